//! What the reports of tests against another tool share (`send --iperf2`, `send --iperf3`):
//! the native document marked with the peer's name, whose intervals carry the sender's view
//! only (those tools report no intervals back).

use crate::base::spec::Direction;
use crate::metrics::document::StreamDocument;
use crate::metrics::figures::{IntervalFigures, Role, StreamReport};
use crate::report::stream::{interval_event, interval_json, start_event, INTERVAL_TITLES};
use crate::session::live::StartInfo;
use serde_json::{json, Value};
use std::fmt::Write as _;

/// The native document with `peer` set; `intervals[]` carry the sender's view only, so their
/// receiver keys are null.
pub(crate) fn peer_json(stream: &StreamReport, peer: &str) -> Value {
    let mut doc = stream.to_json();
    doc["peer"] = json!(peer);
    let intervals: Vec<Value> = stream.sender.intervals.iter().map(sender_interval).collect();
    doc["intervals"] = json!(intervals);
    doc
}

/// An entry of `intervals[]` with the sender's view only: the receiver's keys are null.
fn sender_interval(i: &IntervalFigures) -> Value {
    let mut v = interval_json(i, Some(i));
    for key in ["bytes", "bits_per_second", "queues", "udp"] {
        v[key] = Value::Null;
    }
    v
}

/// `--json-stream`'s `start` of a test another tool (`peer`) runs against one of our
/// receivers: the native event with `peer`.
pub fn received_start_event(start: &StartInfo, peer: &str) -> Value {
    let mut v = start_event(start);
    v["peer"] = json!(peer);
    v
}

/// `--json-stream`'s `interval` of our side of such a test, playing `role`: receiving, the
/// native keys in the client's own direction; sending (`-R`, `--bidir`), in the reverse
/// direction with the receiver's keys null (the other tool reports no intervals back).
pub fn received_interval_event(role: Role, n: usize, i: &IntervalFigures) -> Value {
    match role {
        Role::Receiver => interval_event(Direction::Forward, n, interval_json(i, None)),
        Role::Sender => interval_event(Direction::Reverse, n, sender_interval(i)),
    }
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

/// The typed document of a test another tool sent to one of our receivers (`recv --iperf2`,
/// `--iperf3`, `--ntttcp` with `-J`): [`peer_document`] with the sender's `peer_version`;
/// CPU per byte only for a side whose CPU was sampled (ours), and each queue's flows as the
/// receiver counted them where the sender reported none.
pub(crate) fn received_document(
    stream: &StreamReport,
    peer: &str,
    version: Option<&str>,
    complete: bool,
) -> StreamDocument {
    let mut doc = peer_document(stream, peer, complete);
    doc.peer_version = version.map(str::to_string);
    unsampled_cpu(&mut doc, stream);
    if let (Some(r), Some(doc)) = (stream.reverse.as_deref(), doc.reverse.as_deref_mut()) {
        unsampled_cpu(doc, r);
    }
    doc
}

/// A side with no host sample (the other tool's) has no CPU figures: no CPU per byte.
fn unsampled_cpu(doc: &mut StreamDocument, stream: &StreamReport) {
    if stream.sender.host.is_none() {
        doc.cpu.sender_per_byte = None;
    }
    if stream.receiver.as_ref().is_none_or(|r| r.host.is_none()) {
        doc.cpu.receiver_per_byte = None;
    }
    let Some(receiver) = &stream.receiver else { return };
    for (entry, counted) in doc.queues.iter_mut().zip(&receiver.queues) {
        if entry.flows == 0 {
            entry.flows = counted.flows;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::spec::TestSpec;

    #[test]
    fn a_received_document_names_the_sender_and_claims_no_unsampled_cpu() {
        let spec = TestSpec { queues: 2, ..TestSpec::default() };
        let local = ("10.77.0.2:5001".to_string(), std::net::IpAddr::from([10, 77, 0, 1]));
        let mut report =
            crate::compat::received_report(spec, local, "iperf2", (&[(0, 1_000_000), (1, 2_000_000)], 1.0), Vec::new());
        // A host that did spend CPU, unsampled: no CPU per byte may come of it.
        if let Some(r) = report.receiver.as_mut() {
            r.cpu.host_busy_seconds = 0.5;
        }
        let doc = received_document(&report, "iperf2", Some("2.1.8"), true);
        assert_eq!((doc.peer.as_deref(), doc.peer_version.as_deref()), (Some("iperf2"), Some("2.1.8")));
        assert!(doc.cpu.receiver_per_byte.is_none() && doc.cpu.sender_per_byte.is_none());
        assert_eq!(doc.queues.iter().map(|q| q.flows).collect::<Vec<_>>(), [1, 1], "the receiver's flows");
        assert_eq!(doc.sum.receiver.as_ref().map(|r| r.total_bytes), Some(3_000_000));
        assert!(doc.complete);
        let json = serde_json::to_value(&doc).expect("serializes");
        assert_eq!(json["peer_version"], "2.1.8");
    }
}
