//! One finished result, every output format: the command chooses text, `-J`'s document or CSV
//! through [`Exported`], whatever the result is, and never renders one itself.
//!
//! The results of a test that prints as it runs (`send`, `rr`) do not go through it yet: the
//! command writes their live rows and events, then picks among their documents (a series',
//! `--json-stream-full-output`'s, one with `--title`) itself.

use crate::analysis::compare::CompareReport;
use crate::analysis::document::CompareDocument;
use crate::base::error::{Error, Result};
use crate::compat::iperf2::client::Iperf2Report;
use crate::compat::iperf3::client::Iperf3Report;
use crate::compat::ntttcp::NtttcpReport;
use crate::workload::http::{HttpDocument, HttpReport};
use crate::workload::sweep::{SweepDocument, SweepResult};
use serde::Serialize;
use serde_json::Value;

/// The formats a result is written in (`--format`, `-J`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputFormat {
    Text,
    Json,
    Csv,
}

/// A finished result as each format shows it.
pub trait Exported {
    /// `-J`'s document.
    type Document: Serialize;
    fn document(&self) -> Self::Document;
    /// The text report.
    fn text(&self) -> String;
    /// The CSV table, its header first; `None` where the result has no table.
    fn csv(&self) -> Option<String> {
        None
    }

    /// The result written in `format`, as it goes to its output.
    fn export(&self, format: OutputFormat) -> Result<String> {
        match format {
            OutputFormat::Text => Ok(self.text()),
            OutputFormat::Json => json_text(&self.document()),
            OutputFormat::Csv => {
                self.csv().ok_or_else(|| Error::usage("--format csv is not available for this result"))
            }
        }
    }
}

/// One JSON document, indented, with a final newline: how every document is written (`-J`,
/// `--json-file`).
pub fn json_text(doc: &impl Serialize) -> Result<String> {
    serde_json::to_string_pretty(doc)
        .map(|t| t + "\n")
        .map_err(|e| Error::io("encoding JSON", std::io::Error::other(e)))
}

impl Exported for HttpReport {
    type Document = HttpDocument;
    fn document(&self) -> HttpDocument {
        self.to_document()
    }
    fn text(&self) -> String {
        self.render_text()
    }
    fn csv(&self) -> Option<String> {
        Some(format!("{}\n{}\n", HttpReport::CSV_HEADER, self.csv_row()))
    }
}

impl Exported for SweepResult {
    type Document = SweepDocument;
    fn document(&self) -> SweepDocument {
        self.to_document()
    }
    fn text(&self) -> String {
        format!("\n{}", self.render_table())
    }
    fn csv(&self) -> Option<String> {
        Some(self.to_csv())
    }
}

impl Exported for CompareReport {
    type Document = CompareDocument;
    fn document(&self) -> CompareDocument {
        self.to_document()
    }
    fn text(&self) -> String {
        self.render_text()
    }
}

/// `send --iperf2`, `--iperf3`, `--ntttcp`: the native document with the peer's additions.
macro_rules! peer_send_report {
    ($($report:ty),*) => {$(
        impl Exported for $report {
            type Document = Value;
            fn document(&self) -> Value {
                self.to_json()
            }
            fn text(&self) -> String {
                self.render_text()
            }
        }
    )*};
}

peer_send_report!(Iperf2Report, Iperf3Report, NtttcpReport);
