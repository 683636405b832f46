//! `send --iperf2`'s report, rendered: the native JSON and text of its `StreamReport`, plus
//! what only iperf2 mode knows (`peer: "iperf2"`, FINs sent, iperf -s's own byte count).

use crate::compat::iperf2::client::Iperf2Report;
use crate::compat::iperf2::Iperf2TestSummary;
use crate::metrics::document::StreamDocument;
use crate::report::peer::{peer_document, peer_json, peer_text, received_document};
use serde_json::{json, Value};
use std::fmt::Write as _;

impl Iperf2Report {
    /// The typed document ([`peer_document`]), as an experiment keeps its runs.
    pub fn to_document(&self) -> StreamDocument {
        peer_document(&self.stream, "iperf2", self.complete())
    }

    /// The native document with `peer: "iperf2"` ([`peer_json`]).
    pub fn to_json(&self) -> Value {
        let mut doc = peer_json(&self.stream, "iperf2");
        doc["complete"] = json!(self.complete());
        doc["sum"]["sender"]["iperf2_counts_bytes"] = json!(self.iperf2_counts_bytes());
        doc["iperf2"] = json!({"fins_sent": self.fins, "notes": self.notes});
        doc
    }

    /// The native text, with the sender's interval lines and what iperf2 mode adds.
    pub fn render_text(&self) -> String {
        let mut out = peer_text(&self.stream);
        match self.iperf2_counts_bytes() {
            // iperf -s reports nothing back: say where the receiver's figures are instead.
            Some(n) => {
                out = out.replace("receiver report missing", "receiver: in iperf -s's own output").replace(
                    "receiver counted nothing (no report)",
                    &format!("`iperf -s` counts {n} (all but the first 4 bytes of each connection)"),
                );
            }
            None => {
                let receiver = self.stream.roles.label(crate::metrics::figures::Role::Receiver);
                out = out.replace(
                    &format!("cpu {receiver}: threads  | host busy \n"),
                    &format!("cpu {receiver}: iperf2 reports none\n"),
                );
                let _ = writeln!(
                    out,
                    "iperf2: receiver figures from the server's report; {} FINs sent (iperf 2.1.8 counts one among its datagrams)",
                    self.fins
                );
            }
        }
        for note in &self.notes {
            let _ = writeln!(out, "note: {note}");
        }
        out
    }
}

impl Iperf2TestSummary {
    /// `recv --iperf2 -J`'s document of the test ([`received_document`]): our counts as the
    /// receiver's side, the client's version as `peer_version`.
    pub fn to_document(&self) -> StreamDocument {
        received_document(&self.report, "iperf2", self.client_version.as_deref(), self.complete())
    }
}
