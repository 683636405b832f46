//! `send --iperf3`'s report, rendered: the native JSON and text of its `StreamReport` (the
//! receiver side is the iperf3 server's results), plus what only iperf3 mode knows
//! (`peer: "iperf3"`, the server's CPU and congestion control, the parameters sent).

use crate::compat::iperf3::client::Iperf3Report;
use crate::report::peer::{peer_json, peer_text};
use serde_json::{json, Value};
use std::fmt::Write as _;

impl Iperf3Report {
    /// The native document with `peer: "iperf3"` ([`peer_json`]) and an `iperf3` object.
    pub fn to_json(&self) -> Value {
        let mut doc = peer_json(&self.stream, "iperf3");
        doc["complete"] = json!(self.complete());
        doc["iperf3"] = json!({
            "params": self.params.to_json(),
            "server": self.server.as_ref().map(|r| json!({
                "cpu_util_total": r.cpu_util[0],
                "cpu_util_user": r.cpu_util[1],
                "cpu_util_system": r.cpu_util[2],
                "congestion_used": r.congestion_used,
                "streams": r.streams.iter().map(|s| json!({
                    "id": s.id, "bytes": s.bytes, "seconds": s.end_s - s.start_s,
                })).collect::<Vec<_>>(),
            })),
            "notes": self.notes,
        });
        doc
    }

    /// The native text, with the sender's interval lines and what iperf3 mode adds.
    pub fn render_text(&self) -> String {
        let mut out = peer_text(&self.stream);
        if self.params.omit > 0 {
            // The server counts from the end of its own omitted start: its total is not ours.
            if let (Some(at), Some(r)) = (out.find("total: sender wrote"), &self.stream.receiver) {
                let end = out[at..].find('\n').map_or(out.len(), |n| at + n + 1);
                let line = format!(
                    "total: sender wrote {} bytes, {} after its omitted first {} s; the iperf3 server counted {} after its own\n",
                    self.stream.sender.total_bytes(),
                    self.stream.sender.bytes(),
                    self.params.omit,
                    r.total_bytes()
                );
                out.replace_range(at..end, &line);
            }
        }
        if let Some(r) = &self.server {
            let _ = writeln!(
                out,
                "iperf3 server: {} bytes received, CPU {:.1}% (user {:.1}%, system {:.1}%){}",
                r.streams.iter().map(|s| s.bytes).sum::<u64>(),
                r.cpu_util[0],
                r.cpu_util[1],
                r.cpu_util[2],
                r.congestion_used.as_ref().map_or(String::new(), |c| format!(", congestion control {c}")),
            );
        }
        for note in &self.notes {
            let _ = writeln!(out, "note: {note}");
        }
        out
    }
}
