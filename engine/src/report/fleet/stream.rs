//! Writing the merged fleet files as they are produced: `fleet.json` serialised run by run
//! from the rows (no merged copy of them is built), and the CSV, the heatmap and the text
//! written through [`FmtIo`] into a buffered file rather than into one string each. A
//! million runs' `fleet.json` is about 2 GB: held as a string it would double the memory.

use super::{AttributeSummary, FailedFleetRun, FleetReport, FleetRun, PairSummary, SCHEMA_VERSION};
use crate::metrics::document::{Kind, Tool};
use serde::Serialize;
use std::io;

/// `fmt::Write` over an `io::Write`: the text renderers write into a file as they go. The
/// first I/O error is kept (`fmt::Error` carries none) and returned by [`FmtIo::finish`].
pub struct FmtIo<W: io::Write> {
    out: W,
    error: Option<io::Error>,
}

impl<W: io::Write> FmtIo<W> {
    pub fn new(out: W) -> Self {
        Self { out, error: None }
    }

    /// The writer back, or the first error a write met.
    pub fn finish(self) -> io::Result<W> {
        match self.error {
            Some(e) => Err(e),
            None => Ok(self.out),
        }
    }
}

impl<W: io::Write> std::fmt::Write for FmtIo<W> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        if self.error.is_some() {
            return Err(std::fmt::Error);
        }
        self.out.write_all(s.as_bytes()).map_err(|e| {
            self.error = Some(e);
            std::fmt::Error
        })
    }
}

/// [`super::FleetDocument`] over the report's own rows: the same fields in the same order, so
/// the file reads back as that type.
#[derive(Serialize)]
struct DocumentView<'a> {
    schema_version: u32,
    kind: Kind,
    tool: Tool,
    planned_runs: usize,
    complete_runs: usize,
    failed_runs: Vec<FailedFleetRun>,
    pairs: &'a [PairSummary],
    summaries: &'a [AttributeSummary],
    runs: &'a [FleetRun],
}

impl FleetReport {
    /// `fleet.json`, indented as `-J` documents are, with a final newline.
    pub fn write_document(&self, mut out: impl io::Write) -> io::Result<()> {
        let failed_runs = self.failed_runs();
        let view = DocumentView {
            schema_version: SCHEMA_VERSION,
            kind: Kind::Fleet,
            tool: Tool::this(),
            planned_runs: self.runs.len(),
            complete_runs: self.runs.len() - failed_runs.len(),
            failed_runs,
            pairs: &self.pairs,
            summaries: &self.summaries,
            runs: &self.runs,
        };
        serde_json::to_writer_pretty(&mut out, &view).map_err(io::Error::other)?;
        out.write_all(b"\n")?;
        out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::plan_and_records;
    use super::*;

    #[test]
    fn the_streamed_document_is_the_merged_document() {
        let (plan, records) = plan_and_records();
        let report = FleetReport::merge(&plan, &records, None).unwrap();
        let mut streamed = Vec::new();
        report.write_document(&mut streamed).unwrap();
        let whole = serde_json::to_string_pretty(&report.to_document()).unwrap() + "\n";
        assert_eq!(String::from_utf8(streamed).unwrap(), whole);
        // Every run of a host shares one value of its facts.
        let h1: Vec<&FleetRun> =
            report.runs.iter().filter(|r| r.sender == "h1" && !r.sender_facts.is_empty()).collect();
        assert!(h1.len() > 1 && h1.iter().all(|r| std::sync::Arc::ptr_eq(&r.sender_facts, &h1[0].sender_facts)));
    }

    #[test]
    fn a_failed_write_is_an_error() {
        struct Full;
        impl io::Write for Full {
            fn write(&mut self, _: &[u8]) -> io::Result<usize> {
                Err(io::Error::from_raw_os_error(libc::ENOSPC))
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let (plan, records) = plan_and_records();
        let report = FleetReport::merge(&plan, &records, None).unwrap();
        assert!(report.write_document(Full).is_err());
        let mut text = FmtIo::new(Full);
        assert!(super::super::csv::write_csv(&report, &mut text).is_err());
        assert!(matches!(text.finish(), Err(e) if e.raw_os_error() == Some(libc::ENOSPC)));
    }
}
