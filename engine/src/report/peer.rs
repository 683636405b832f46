//! What the reports of tests against another tool share (`send --iperf2`, `send --iperf3`):
//! the native document marked with the peer's name, whose intervals carry the sender's view
//! only (those tools report no intervals back).

use crate::metrics::document::StreamDocument;
use crate::metrics::figures::StreamReport;
use crate::report::stream::{interval_json, INTERVAL_TITLES};
use serde_json::{json, Value};
use std::fmt::Write as _;

/// The native document with `peer` set; `intervals[]` carry the sender's view only, so their
/// receiver keys are null.
pub(crate) fn peer_json(stream: &StreamReport, peer: &str) -> Value {
    let mut doc = stream.to_json();
    doc["peer"] = json!(peer);
    let intervals: Vec<Value> = stream
        .sender
        .intervals
        .iter()
        .map(|i| {
            let mut v = interval_json(i, Some(i));
            for key in ["bytes", "bits_per_second", "queues", "udp"] {
                v[key] = Value::Null;
            }
            v
        })
        .collect();
    doc["intervals"] = json!(intervals);
    doc
}

/// The native text, with the sender's interval lines (`-` in the receiver's columns) where
/// the native report puts its intervals.
pub(crate) fn peer_text(stream: &StreamReport) -> String {
    let mut out = stream.render_text();
    let ivs = &stream.sender.intervals;
    if ivs.len() > 1 {
        let mut lines = format!("{INTERVAL_TITLES}\n");
        for i in ivs {
            let rate = crate::base::units::format_bits_per_second(i.bits_per_second());
            let bytes = crate::base::units::format_bytes(i.sum());
            let _ = writeln!(lines, "[SUM] {:5.2}-{:<5.2} sec  {bytes:>12} {rate:>16}   -", i.start, i.end);
        }
        let at = out.find(INTERVAL_TITLES).unwrap_or(out.len());
        out.insert_str(at, &lines);
    }
    out
}

/// The typed document of a test against another tool, as an experiment keeps its runs:
/// the native one with `peer` set and the mode's own verdict on completeness.
pub(crate) fn peer_document(stream: &StreamReport, peer: &str, complete: bool) -> StreamDocument {
    let mut doc = stream.to_document();
    doc.peer = Some(peer.into());
    doc.complete = complete;
    doc
}
