//! `send --ntttcp`'s report, rendered: the native JSON and text of its `StreamReport`, which
//! has no receiver side (NTttcp prints its own), with `peer: "ntttcp"` and the ports used.

use crate::compat::ntttcp::{NtttcpReport, NtttcpTestSummary};
use crate::metrics::document::StreamDocument;
use crate::report::peer::{peer_document, peer_json, peer_text, received_document};
use serde_json::{json, Value};

impl NtttcpReport {
    /// The typed document ([`peer_document`]), as an experiment keeps its runs.
    pub fn to_document(&self) -> StreamDocument {
        peer_document(&self.stream, "ntttcp", self.complete())
    }

    /// The native document with `peer: "ntttcp"` ([`peer_json`]) and an `ntttcp` object.
    pub fn to_json(&self) -> Value {
        let mut doc = peer_json(&self.stream, "ntttcp");
        doc["complete"] = json!(self.complete());
        doc["ntttcp"] = json!({"base_port": self.base_port, "ports": self.stream.spec.queues});
        doc
    }

    /// The native text; the receiver's figures are in NTttcp's own output.
    pub fn render_text(&self) -> String {
        peer_text(&self.stream)
            .replace("receiver report missing", "receiver: in NTttcp's own output")
            .replace("receiver counted nothing (no report)", "NTttcp counts on its side")
    }
}

impl NtttcpTestSummary {
    /// `recv --ntttcp -J`'s document of the test ([`received_document`]): one queue per port,
    /// our counts as the receiver's side (NTttcp announces no version).
    pub fn to_document(&self) -> Option<StreamDocument> {
        self.report.as_ref().map(|r| received_document(r, "ntttcp", None, self.errors.is_empty()))
    }
}
