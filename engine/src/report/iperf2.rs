//! `send --iperf2`'s report, rendered: the native JSON and text of its `StreamReport`, plus
//! what only iperf2 mode knows (`peer: "iperf2"`, FINs sent, iperf -s's own byte count).

use crate::compat::iperf2::client::Iperf2Report;
use crate::report::stream::{interval_json, INTERVAL_TITLES};
use serde_json::{json, Value};
use std::fmt::Write as _;

impl Iperf2Report {
    /// The native document with `peer: "iperf2"`; `intervals[]` carry the sender's view only
    /// (iperf2 reports no intervals back), so their receiver keys are null.
    pub fn to_json(&self) -> Value {
        let mut doc = self.stream.to_json();
        doc["peer"] = json!("iperf2");
        doc["complete"] = json!(self.complete());
        doc["sum"]["sender"]["iperf2_counts_bytes"] = json!(self.iperf2_counts_bytes());
        let intervals: Vec<Value> = self
            .stream
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
        doc["iperf2"] = json!({"fins_sent": self.fins, "notes": self.notes});
        doc
    }

    /// The native text, with the sender's interval lines and what iperf2 mode adds.
    pub fn render_text(&self) -> String {
        let mut out = self.stream.render_text();
        let ivs = &self.stream.sender.intervals;
        if ivs.len() > 1 {
            let mut lines = format!("{INTERVAL_TITLES}\n");
            for i in ivs {
                let rate = crate::base::units::format_bits_per_second(i.bits_per_second());
                let bytes = crate::base::units::format_bytes(i.sum());
                let _ = writeln!(lines, "[SUM] {:5.2}-{:<5.2} sec  {bytes:>12} {rate:>16}   -", i.start, i.end);
            }
            // Before the window lines, where the native report puts its intervals.
            let at = out.find(INTERVAL_TITLES).unwrap_or(out.len());
            out.insert_str(at, &lines);
        }
        match self.iperf2_counts_bytes() {
            // iperf -s reports nothing back: say where the receiver's figures are instead.
            Some(n) => {
                out = out.replace("receiver report missing", "receiver: in iperf -s's own output").replace(
                    "receiver counted nothing (no report)",
                    &format!("`iperf -s` counts {n} (all but the first 4 bytes of each connection)"),
                );
            }
            None => {
                out = out.replace("cpu receiver: threads  | host busy \n", "cpu receiver: iperf2 reports none\n");
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
