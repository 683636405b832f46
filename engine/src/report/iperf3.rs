//! `send --iperf3`'s report, rendered: the native JSON and text of its `StreamReport` (the
//! receiver side is the iperf3 server's results), plus what only iperf3 mode knows
//! (`peer: "iperf3"`, the server's CPU and congestion control, the parameters sent).

use crate::base::text::{escape_controls, peer_text as shown_text};
use crate::base::units::format_bits_per_second;
use crate::compat::iperf3::client::Iperf3Report;
use crate::compat::iperf3::Iperf3TestSummary;
use crate::metrics::document::StreamDocument;
use crate::report::peer::{peer_document, peer_json, peer_text, received_document};
use crate::wire::iperf3::{stream_id, Results, ServerOutputFacts, MAX_STREAMS};
use serde_json::{json, Value};
use std::fmt::Write as _;

/// The reordering events the server's TCP saw on stream `id`, when its output says.
fn reorder_of(facts: &ServerOutputFacts, id: u64) -> Option<u64> {
    (0..2 * MAX_STREAMS as usize).find(|&i| stream_id(i) == id).and_then(|i| facts.reorder.get(i).copied().flatten())
}

impl Iperf3Report {
    /// The typed document ([`peer_document`]), as an experiment keeps its runs.
    pub fn to_document(&self) -> StreamDocument {
        let mut doc = peer_document(&self.stream, "iperf3", self.complete());
        let after_omit = self.peer_totals_after_omit();
        doc.sum.peer_totals_after_omit_s = after_omit;
        if let Some(reverse) = doc.reverse.as_deref_mut() {
            reverse.sum.peer_totals_after_omit_s = after_omit;
        }
        if let Some(m) = doc.mptcp.as_mut().filter(|_| self.far_receiver()) {
            m.receiver = None;
        }
        doc
    }

    /// Whether the document's receiver side is the iperf3 server (all but `-R` alone), whose
    /// MPTCP state nothing tells: its `mptcp.receiver` is absent rather than empty.
    fn far_receiver(&self) -> bool {
        !self.params.reverse || self.params.bidirectional
    }

    /// An iperf3 server leaves its omitted start out of every total it reports: with an
    /// omit, the far side's `total_bytes` begin that many seconds in, and the document says so.
    fn peer_totals_after_omit(&self) -> Option<u64> {
        (self.params.omit > 0 && self.server.is_some()).then_some(self.params.omit)
    }

    /// The native document with `peer: "iperf3"` ([`peer_json`]) and an `iperf3` object.
    pub fn to_json(&self) -> Value {
        let mut doc = peer_json(&self.stream, "iperf3");
        doc["complete"] = json!(self.complete());
        if let Some(omit) = self.peer_totals_after_omit() {
            doc["sum"]["peer_totals_after_omit_s"] = json!(omit);
            if doc["reverse"].is_object() {
                doc["reverse"]["sum"]["peer_totals_after_omit_s"] = json!(omit);
            }
        }
        if doc["mptcp"].is_object() && self.far_receiver() {
            doc["mptcp"]["receiver"] = Value::Null;
        }
        doc["iperf3"] = json!({
            "params": self.params.to_json(),
            "server": self.server.as_ref().map(|r| {
                let facts = r.server_output_json.as_ref().map(ServerOutputFacts::read).unwrap_or_default();
                let mut server = json!({
                    "cpu_util_total": r.cpu_util[0],
                    "cpu_util_user": r.cpu_util[1],
                    "cpu_util_system": r.cpu_util[2],
                    "congestion_used": r.congestion_used,
                    "streams": r.streams.iter().map(|s| {
                        let mut stream = json!({
                            "id": s.id, "bytes": s.bytes, "seconds": s.end_s - s.start_s,
                            "lost": s.errors, "jitter_ms": s.jitter_s * 1e3,
                        });
                        if let Some(n) = reorder_of(&facts, s.id) {
                            stream["reorder"] = json!(n);
                        }
                        stream
                    }).collect::<Vec<_>>(),
                });
                // What only the server's own output says (`--get-server-output`), where it says it.
                for (key, value) in [
                    ("start_ms", facts.start_ms.map(|v| json!(v))),
                    ("gso", facts.gso.map(|v| json!(v))),
                    ("gro", facts.gro.map(|v| json!(v))),
                    ("output_text", r.server_output_text.as_ref().map(|t| json!(t))),
                    ("output_json", r.server_output_json.clone()),
                ] {
                    if let Some(value) = value {
                        server[key] = value;
                    }
                }
                server
            }),
            "notes": self.notes,
        });
        doc
    }

    /// The native text, with the sender's interval lines and what iperf3 mode adds.
    pub fn render_text(&self) -> String {
        let mut out = peer_text(&self.stream);
        // The far side's CPU is iperf3's own figure, on its line below.
        for side in ["sender", "receiver"] {
            out = out.replace(&format!("cpu {side}: threads  | host busy \n"), "");
        }
        if self.params.omit > 0 {
            self.omitted_totals(&mut out);
        }
        if let Some(r) = &self.server {
            let moved = if self.params.bidirectional {
                "received and sent"
            } else if self.params.reverse {
                "sent"
            } else {
                "received"
            };
            let _ = writeln!(
                out,
                "iperf3 server: {} bytes {moved}, CPU {:.1}% (user {:.1}%, system {:.1}%){}",
                r.streams.iter().map(|s| s.bytes).sum::<u64>(),
                r.cpu_util[0],
                r.cpu_util[1],
                r.cpu_util[2],
                r.congestion_used.as_ref().map_or(String::new(), |c| format!(", congestion control {c}")),
            );
        }
        if let Some(r) = &self.server {
            self.server_output(r, &mut out);
        }
        for note in &self.notes {
            let _ = writeln!(out, "note: {note}");
        }
        out
    }

    /// What the server's own output says (`--get-server-output`): its start, whether its UDP
    /// sockets took GSO and GRO (`--gsro`), the reordering its TCP saw on what it sent; then
    /// the output itself, every line indented under its heading (it is the peer's text).
    fn server_output(&self, r: &Results, out: &mut String) {
        let facts = r.server_output_json.as_ref().map(ServerOutputFacts::read).unwrap_or_default();
        if let Some(ms) = facts.start_ms {
            let _ = writeln!(out, "iperf3 server: its test started at Unix time {}.{:03} s", ms / 1000, ms % 1000);
        }
        if self.params.gso || self.params.gro {
            let took = |v: Option<bool>| v.map_or("not said", |on| if on { "yes" } else { "no (refused)" });
            let _ = match (facts.gso, facts.gro) {
                (None, None) => writeln!(
                    out,
                    "iperf3 server: asked for GSO and GRO (--gsro); whether its sockets took them is only in a 3.21+ server's -J output, which --get-server-output brings back"
                ),
                (gso, gro) => writeln!(out, "iperf3 server: its UDP sockets took GSO: {}, GRO: {} (--gsro)", took(gso), took(gro)),
            };
        }
        let reordered: Vec<u64> = facts.reorder.iter().flatten().copied().collect();
        if !reordered.is_empty() {
            let _ = writeln!(
                out,
                "iperf3 server: its TCP saw {} reordering events on the streams it sent",
                reordered.iter().sum::<u64>()
            );
        }
        if let Some(text) = &r.server_output_text {
            out.push_str("Server output:\n");
            for line in text.lines() {
                let _ = writeln!(out, "  {}", escape_controls(line));
            }
        }
        if let Some(doc) = &r.server_output_json {
            out.push_str("Server JSON output:\n");
            // Pretty JSON escapes every control character inside its strings.
            let text = serde_json::to_string_pretty(doc).unwrap_or_default();
            for line in text.lines() {
                let _ = writeln!(out, "  {line}");
            }
        }
    }

    /// With an omitted start the server's totals start at its own omit's end, not ours: each
    /// `total:` line says so instead of comparing the two.
    fn omitted_totals(&self, out: &mut String) {
        let mut reports = vec![&self.stream];
        reports.extend(self.stream.reverse.as_deref());
        let mut from = 0;
        for report in reports {
            let Some(at) = out[from..].find("total: sender wrote").map(|n| from + n) else { return };
            let end = out[at..].find('\n').map_or(out.len(), |n| at + n + 1);
            let Some(receiver) = &report.receiver else { return };
            // Ours is the side our probes sampled; the other one is the server's.
            let (ours, theirs, we) = if report.sender.host.is_some() {
                (&report.sender, receiver, "sent")
            } else {
                (receiver, &report.sender, "received")
            };
            let line = format!(
                "total: we {we} {} bytes, {} after our omitted first {} s; the iperf3 server counted {} after its own\n",
                ours.total_bytes(),
                ours.bytes(),
                self.params.omit,
                theirs.total_bytes()
            );
            out.replace_range(at..end, &line);
            from = at + line.len();
        }
    }
}

impl Iperf3TestSummary {
    /// `recv --iperf3 -J`'s document of the test ([`received_document`]), once it ran: our
    /// sides from our loops, the client's from its results, its version as `peer_version`.
    pub fn to_document(&self) -> Option<StreamDocument> {
        let report = self.report.as_ref()?;
        let mut doc = received_document(report, "iperf3", self.client_version.as_deref(), self.errors.is_empty());
        // The client leaves its omitted start out of the totals its results give.
        let after_omit = (self.omit > 0).then_some(self.omit);
        doc.sum.peer_totals_after_omit_s = after_omit;
        if let Some(reverse) = doc.reverse.as_deref_mut() {
            reverse.sum.peer_totals_after_omit_s = after_omit;
        }
        Some(doc)
    }

    /// One line for a finished client test (`recv --iperf3`'s log, and what a client's
    /// `--get-server-output` gets back): what we counted, and what the client says it sent.
    pub fn render_line(&self) -> String {
        let s = self;
        let version = s.client_version.as_ref().map_or("iperf3".to_string(), |v| format!("iperf3 {}", shown_text(v)));
        let mut line = format!(
            "[{}] iperf3 {} test from {} ({version}, {} stream{}): {} bytes in {:.3} s = {}",
            s.id,
            if s.udp { "UDP" } else { "TCP" },
            s.peer.map_or("?".to_string(), |p| p.to_string()),
            s.streams,
            if s.streams == 1 { "" } else { "s" },
            s.bytes,
            s.seconds,
            format_bits_per_second(s.bits_per_second())
        );
        if let Some(user) = &s.user {
            let _ = write!(line, ", user {}", shown_text(user));
        }
        if !s.data_peers.is_empty() {
            let shown: Vec<String> = s.data_peers.iter().take(4).map(|a| a.to_string()).collect();
            let more = s.data_peers.len().saturating_sub(shown.len());
            let more = if more > 0 { format!(" +{more}") } else { String::new() };
            let _ = write!(line, ", data with {}{more}", shown.join(" "));
        }
        if let Some(sent) = s.client_sent {
            let _ = write!(line, ", client sent {sent} bytes");
            if s.omit > 0 {
                let _ = write!(line, " after its omitted first {} s", s.omit);
            }
            if s.burst > 0 {
                let _ = write!(line, " in bursts of {} writes", s.burst);
            }
            if s.dont_fragment {
                line += " with don't-fragment";
            }
        }
        if let Some(sent) = s.sent {
            let _ = write!(line, "; sent {sent} bytes");
            if s.burst > 0 {
                let _ = write!(line, " in bursts of {} {}", s.burst, if s.udp { "datagrams" } else { "writes" });
            }
            if s.dont_fragment && s.udp {
                line += " with don't-fragment";
            }
            if let Some(got) = s.client_received {
                let _ = write!(line, ", client received {got} bytes");
            }
            if let Some(lost) = s.client_lost {
                let _ = write!(line, " and lost {lost} datagrams");
            }
        }
        if let Some(words) = s.gsro_words() {
            let _ = write!(line, "; {words}");
        }
        if s.mptcp {
            let _ = write!(line, "; {}", s.mptcp_words());
        }
        if !s.errors.is_empty() {
            let _ = write!(line, ", incomplete: {}", shown_text(&s.errors.join("; ")));
        }
        line
    }

    /// A UDP test: whether our loops ran with GRO and GSO, and whether the client asked
    /// (`--gsro`, iperf3 3.21).
    fn gsro_words(&self) -> Option<String> {
        if !self.udp {
            return None;
        }
        let said = |used: Option<bool>, what: &str, how: &str| {
            used.map(|on| {
                if on {
                    format!("{what} on our {how}")
                } else {
                    format!("no {what} on our {how} (the kernel refused it)")
                }
            })
        };
        let parts: Vec<String> =
            [said(self.gro, "GRO", "receive"), said(self.gso, "GSO", "send")].into_iter().flatten().collect();
        let asked = if self.gsro { " (the client asked --gsro)" } else { "" };
        (!parts.is_empty()).then(|| format!("{}{asked}", parts.join(", ")))
    }

    /// A `-m` test's data connections as the kernel says them: each one's subflows, or its
    /// fallback to plain TCP; or that none was an MPTCP socket (the client's MPTCP never
    /// reached us: its SYN came without MP_CAPABLE).
    fn mptcp_words(&self) -> String {
        let mut words = crate::sys::mptcp::describe(&self.mptcp_received, false);
        words.extend(crate::sys::mptcp::describe(&self.mptcp_sent, true));
        if words.is_empty() {
            return "MPTCP asked (-m), but the data connections came as plain TCP (no MP_CAPABLE in their SYN)".into();
        }
        words.join("; ")
    }
}
