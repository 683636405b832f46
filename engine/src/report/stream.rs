//! How a stream test is shown: iperf2-like text, the JSON document whose keys docs/output.md
//! fixes, and the `--json-stream` events. The figures themselves are metrics/figures.rs.

use crate::analysis::verdict::{diagnose, Verdict};
use crate::base::spec::TestSpec;
use crate::base::units::{format_bits_per_second, format_bytes};
use crate::metrics::figures::{rate, IntervalFigures, SideReport, StreamReport, SCHEMA_VERSION};
use serde_json::{json, Value};
use std::fmt::Write as _;

/// `tcp.*_flows_end[]`: each flow's TCP_INFO at the end, with its knobs as read back.
fn flows_end_json(side: &SideReport) -> Value {
    let entries: Vec<Value> = side
        .tcp_flows_end
        .iter()
        .enumerate()
        .map(|(i, info)| {
            let mut v = serde_json::to_value(info).unwrap_or(Value::Null);
            if let (Value::Object(map), Some(Value::Object(sock))) =
                (&mut v, side.flow_sockets.get(i).map(|s| serde_json::to_value(s).unwrap_or(Value::Null)))
            {
                map.extend(sock);
            }
            v
        })
        .collect();
    Value::Array(entries)
}

/// One entry of `intervals[]` (and of a `--json-stream` interval event): the receiver's
/// figures for the stretch, with the sender's view of it beside them.
pub fn interval_json(i: &IntervalFigures, si: Option<&IntervalFigures>) -> Value {
    json!({"start": i.start, "end": i.end, "bytes": i.sum(), "bits_per_second": i.bits_per_second(),
           "queues": i.bytes, "sender_bytes": si.map(|s| s.sum()),
           "tcp": si.map(|s| &s.tcp), "tcp_flows": si.map(|s| &s.tcp_flows),
           "udp": i.udp.map(|u| json!({"datagrams": u.received, "lost": u.lost,
               "out_of_order": u.out_of_order, "duplicates": u.duplicates, "jitter_us": u.jitter_us}))})
}

/// Version of the `--json-stream` events (one JSON object per line); bumped when a key of an
/// event changes meaning.
pub(crate) const STREAM_SCHEMA_VERSION: u32 = 1;

/// `{"event":"start",...}`: the agreed test and both ends' placement, as it starts.
pub fn start_event(start: &crate::session::live::StartInfo) -> Value {
    json!({"event": "start", "stream_schema_version": STREAM_SCHEMA_VERSION, "schema_version": SCHEMA_VERSION,
           "tool": {"name": "uringbench", "version": env!("CARGO_PKG_VERSION")},
           "target": start.target, "test": start.spec,
           "sender": {"placement": start.sender_placement}, "receiver": {"placement": start.receiver_placement}})
}

/// `{"event":"interval",...}`: one interval as it closed, with the keys of `intervals[]`.
pub fn interval_event(direction: crate::base::spec::Direction, n: usize, entry: Value) -> Value {
    let mut v = json!({"event": "interval", "stream_schema_version": STREAM_SCHEMA_VERSION,
                       "direction": direction, "n": n});
    if let (Value::Object(event), Value::Object(entry)) = (&mut v, entry) {
        event.extend(entry);
    }
    v
}

/// `{"event":"end",...}`: the whole report, the document `-J` writes, with `event` first.
pub fn end_event(doc: Value) -> Value {
    let mut v = json!({"event": "end", "stream_schema_version": STREAM_SCHEMA_VERSION});
    if let (Value::Object(event), Value::Object(doc)) = (&mut v, doc) {
        event.extend(doc);
    }
    v
}

/// The first line of a stream report: the agreed test.
pub fn header_line(s: &TestSpec, target: &str) -> String {
    let mut out = format!(
        "uringbench {}: {:?} stream to {}, {} queue{} x {} flow{}, {} writes, {:.1} s window (+{:.1} s warm-up, {:.2} s cool-down)\n",
        env!("CARGO_PKG_VERSION"),
        s.proto,
        target,
        s.queues,
        if s.queues == 1 { "" } else { "s" },
        s.flows_per_queue,
        if s.flows_per_queue == 1 { "" } else { "s" },
        format_bytes(u64::from(s.len)),
        s.time_ms as f64 / 1e3,
        s.warmup_ms as f64 / 1e3,
        s.cooldown_ms as f64 / 1e3,
    );
    if s.direction == crate::base::spec::Direction::Reverse {
        let _ = writeln!(out, "reverse: {target} sends, this side receives");
    }
    let tuning = s.tuning.describe();
    if !tuning.is_empty() {
        let _ = writeln!(out, "tuning: {tuning} (both ends)");
    }
    out
}

/// Column titles of interval and window lines.
pub const INTERVAL_TITLES: &str = "[ ID] Interval           Offered (sender)               Received (receiver)";

/// The lines of one interval: one per queue (when there are several) and a `[SUM]` line, each
/// with the sender's offered figures (when known) beside the receiver's.
pub fn interval_lines(queues: u32, i: &IntervalFigures, offered: Option<&IntervalFigures>) -> String {
    let mut out = String::new();
    let secs = i.end - i.start;
    let side = |bytes: Option<u64>, secs: f64| {
        bytes.map_or(format!("{:>12} {:>16}", "-", "-"), |b| {
            format!("{:>12} {:>16}", format_bytes(b), format_bits_per_second(rate(b, secs)))
        })
    };
    let offered_secs = offered.map_or(secs, |o| o.end - o.start);
    if queues > 1 {
        for (q, b) in i.bytes.iter().enumerate() {
            let _ = writeln!(
                out,
                "[{q:>3}] {:5.2}-{:<5.2} sec  {}   {}",
                i.start,
                i.end,
                side(offered.and_then(|o| o.bytes.get(q).copied()), offered_secs),
                side(Some(*b), secs)
            );
        }
    }
    let udp = i.udp.map_or(String::new(), |u| {
        format!("  lost {}/{} jitter {:.3} ms", u.lost, u.received + u.lost, u.jitter_us / 1000.0)
    });
    let _ = writeln!(
        out,
        "[SUM] {:5.2}-{:<5.2} sec  {}   {}{udp}",
        i.start,
        i.end,
        side(offered.map(|o| o.sum()), offered_secs),
        side(Some(i.sum()), secs)
    );
    out
}

impl StreamReport {
    /// Names the busiest queue thread when one is saturated; otherwise says nothing stands out.
    pub fn verdict(&self) -> Verdict {
        diagnose(&self.evidence())
    }

    /// Cycles per received byte and CPU-seconds per GB from the receiver's host busy time.
    fn cpu_per_byte(side: &SideReport, bytes: u64) -> Value {
        if bytes == 0 {
            return Value::Null;
        }
        let busy = side.cpu.host_busy_seconds;
        json!({
            "cpu_seconds_per_gb": busy / (bytes as f64 / 1e9),
            "cycles_per_byte": side.cpu.nominal_hz.map(|hz| busy * hz / bytes as f64),
        })
    }

    /// The JSON document that docs/output.md describes.
    pub fn to_json(&self) -> Value {
        let recv = self.receiver.as_ref();
        let queues: Vec<Value> = self
            .sender
            .queues
            .iter()
            .map(|sq| {
                let rq = recv.and_then(|r| r.queues.get(sq.id as usize));
                json!({
                    "id": sq.id,
                    "flows": sq.flows,
                    "sender": {"bytes": sq.bytes, "total_bytes": sq.total_bytes,
                               "bits_per_second": rate(sq.bytes, self.sender.window_seconds)},
                    "receiver": rq.map(|q| json!({"bytes": q.bytes, "total_bytes": q.total_bytes,
                               "bits_per_second": rate(q.bytes, recv.map_or(0.0, |r| r.window_seconds))})),
                })
            })
            .collect();
        let window = recv.map_or(self.sender.window_seconds, |r| r.window_seconds);
        let intervals: Vec<Value> = recv
            .map(|r| r.intervals.as_slice())
            .unwrap_or_default()
            .iter()
            .enumerate()
            // The sender samples the same offsets on its own clock: its interval n is the same
            // stretch of the test, and carries the TCP view (RTT, retransmits, limits).
            .map(|(n, i)| interval_json(i, self.sender.intervals.get(n)))
            .collect();
        let verdict = self.verdict();
        json!({
            "schema_version": SCHEMA_VERSION,
            "tool": {"name": "uringbench", "version": env!("CARGO_PKG_VERSION")},
            "target": self.target,
            "test": self.spec,
            "complete": self.complete(),
            "error": self.error,
            "interrupted": self.interrupted,
            "queues": queues,
            "sum": {
                "window_seconds": window,
                "sender": {"bytes": self.sender.bytes(), "total_bytes": self.sender.total_bytes(),
                           "bits_per_second": self.sender.bits_per_second(),
                           "window_seconds": self.sender.window_seconds,
                           "datagrams": self.sender.udp.as_ref().map(|u| u.datagrams)},
                "receiver": recv.map(|r| {
                    let mut v = json!({"bytes": r.bytes(), "total_bytes": r.total_bytes(),
                           "bits_per_second": r.bits_per_second(), "window_seconds": r.window_seconds});
                    if let Some(u) = &r.udp {
                        v["datagrams"] = json!(u.datagrams);
                        v["lost"] = json!(u.lost);
                        v["out_of_order"] = json!(u.out_of_order);
                        v["duplicates"] = json!(u.duplicates);
                        v["jitter_us"] = json!(u.jitter_us);
                        v["expected"] = json!(u.expected);
                        v["loss_ratio"] = json!(if u.expected > 0 { u.lost as f64 / u.expected as f64 } else { 0.0 });
                        v["one_way_delay_us"] = json!(u.delay_us.map(|[min, mean, max]| json!({"min": min, "mean": mean, "max": max})));
                    }
                    v
                }),
            },
            "intervals": intervals,
            "cpu": {
                "sender": self.sender.cpu,
                "receiver": recv.map(|r| &r.cpu),
                "sender_per_byte": Self::cpu_per_byte(&self.sender, self.sender.bytes()),
                "receiver_per_byte": recv.map(|r| Self::cpu_per_byte(r, r.bytes())),
            },
            "tcp": {
                "sender": self.sender.tcp,
                "receiver": recv.map(|r| &r.tcp),
                "sender_flows_end": flows_end_json(&self.sender),
                "receiver_flows_end": recv.map(flows_end_json),
            },
            "path": self.path,
            "host": {"sender": self.sender.host, "receiver": recv.map(|r| &r.host)},
            "zerocopy": self.sender.zerocopy,
            "xdp": {"sender": self.sender.xdp, "receiver": recv.and_then(|r| r.xdp.as_ref())},
            "sender": {"placement": self.sender.placement, "path": self.sender.path, "complete": self.sender.complete, "errors": self.sender.errors},
            "receiver": recv.map(|r| json!({"placement": r.placement, "path": r.path, "complete": r.complete, "errors": r.errors})),
            "verdict": verdict,
            "direction": self.spec.direction,
            "reverse": self.reverse.as_ref().map(|r| r.to_json()),
        })
    }

    /// One line for a run of `--repeat`.
    pub fn summary_line(&self) -> String {
        let recv = self.receiver.as_ref();
        format!(
            "{} received, {} offered, {}, verdict: {}",
            recv.map_or("nothing".into(), |r| format_bits_per_second(r.bits_per_second())),
            format_bits_per_second(self.sender.bits_per_second()),
            self.receiver_cpu_seconds_per_gb().map_or("cpu n/a".into(), |c| format!("{c:.3} CPU-s/GB")),
            self.verdict().bottleneck
        )
    }

    /// iperf2-style text: one line per queue, a `[SUM]` line, CPU, zero-copy and verdict.
    pub fn render_text(&self) -> String {
        let mut out = header_line(&self.spec, &self.target);
        let _ = writeln!(out, "sender:   {} | {}", self.sender.placement, self.sender.path);
        if let Some(r) = &self.receiver {
            let _ = writeln!(out, "receiver: {} | {}", r.placement, r.path);
        }
        if let Some(r) = self.receiver.as_ref().filter(|r| r.intervals.len() > 1) {
            let _ = writeln!(out, "{INTERVAL_TITLES}");
            for (n, i) in r.intervals.iter().enumerate() {
                out.push_str(&interval_lines(self.spec.queues, i, self.sender.intervals.get(n)));
            }
        }
        out.push_str(&self.render_summary());
        out
    }

    /// The text that follows lines printed live (header, placement and intervals, as the test
    /// ran): each side's data path, then the summary.
    pub fn render_after_live(&self) -> String {
        let mut out = format!("sender path:   {}\n", self.sender.path);
        if let Some(r) = &self.receiver {
            let _ = writeln!(out, "receiver path: {}", r.path);
        }
        out.push_str(&self.render_summary());
        out
    }

    /// Window lines, totals, CPU, UDP, path, TCP, zero-copy, errors and the verdict.
    fn render_summary(&self) -> String {
        let mut out = String::new();
        self.window_lines(&mut out);
        self.total_line(&mut out);
        self.cpu_lines(&mut out);
        self.udp_lines(&mut out);
        self.path_line(&mut out);
        self.tcp_line(&mut out);
        self.zerocopy_line(&mut out);
        self.error_lines(&mut out);
        self.verdict_lines(&mut out);
        out
    }

    /// The per-queue window lines and the `[SUM]` line, offered beside received.
    fn window_lines(&self, out: &mut String) {
        let recv = self.receiver.as_ref();
        let window = recv.map_or(self.sender.window_seconds, |r| r.window_seconds);
        let _ = writeln!(out, "{INTERVAL_TITLES}");
        for sq in &self.sender.queues {
            let rq = recv.and_then(|r| r.queues.get(sq.id as usize));
            let _ = writeln!(
                out,
                "[{:>3}] 0.00-{:<5.2} sec  {:>12} {:>16}   {}",
                sq.id,
                window,
                format_bytes(sq.bytes),
                format_bits_per_second(rate(sq.bytes, self.sender.window_seconds)),
                rq.map_or("-".into(), |q| format!(
                    "{:>12} {:>16}",
                    format_bytes(q.bytes),
                    format_bits_per_second(rate(q.bytes, window))
                )),
            );
        }
        let _ = writeln!(
            out,
            "[SUM] 0.00-{:<5.2} sec  {:>12} {:>16}   {}",
            window,
            format_bytes(self.sender.bytes()),
            format_bits_per_second(self.sender.bits_per_second()),
            recv.map_or("receiver report missing".into(), |r| format!(
                "{:>12} {:>16}",
                format_bytes(r.bytes()),
                format_bits_per_second(r.bits_per_second())
            )),
        );
    }

    /// Bytes over the whole test on both sides, and whether they match.
    fn total_line(&self, out: &mut String) {
        let recv = self.receiver.as_ref();
        let _ = writeln!(
            out,
            "total: sender wrote {} bytes, receiver counted {}",
            self.sender.total_bytes(),
            recv.map_or("nothing (no report)".into(), |r| format!(
                "{} bytes{}",
                r.total_bytes(),
                if r.total_bytes() == self.sender.total_bytes() { " (exact match)" } else { " (MISMATCH)" }
            )),
        );
    }

    /// Each side's queue threads and the host CPUs they ran on.
    fn cpu_lines(&self, out: &mut String) {
        let recv = self.receiver.as_ref();
        for (name, side) in [("sender", Some(&self.sender)), ("receiver", recv)] {
            let Some(side) = side else { continue };
            let threads: Vec<String> = side
                .cpu
                .threads
                .iter()
                .map(|t| {
                    format!(
                        "cpu{} {:.0}% (usr {:.2}s sys {:.2}s)",
                        t.cpu,
                        t.utilization * 100.0,
                        t.user_seconds,
                        t.system_seconds
                    )
                })
                .collect();
            let host: Vec<String> =
                side.cpu.host.iter().map(|h| format!("cpu{} {:.0}%", h.cpu, h.utilization * 100.0)).collect();
            let _ = writeln!(out, "cpu {name}: threads {} | host busy {}", threads.join(", "), host.join(" "));
        }
    }

    /// UDP: the receiver's datagram accounting, and the one-way delay when measured.
    fn udp_lines(&self, out: &mut String) {
        let recv = self.receiver.as_ref();
        if let Some(u) = recv.and_then(|r| r.udp.as_ref()) {
            let sent = self.sender.udp.as_ref().map_or(0, |s| s.datagrams);
            let _ = writeln!(
                out,
                "udp: sent {sent} datagrams, received {}, lost {}/{} ({:.3}%), out-of-order {}, duplicates {}, jitter {:.3} ms",
                u.datagrams,
                u.lost,
                u.expected,
                if u.expected > 0 { u.lost as f64 / u.expected as f64 * 100.0 } else { 0.0 },
                u.out_of_order,
                u.duplicates,
                u.jitter_us / 1000.0
            );
            if let Some([min, mean, max]) = u.delay_us {
                let _ = writeln!(out, "one-way delay: min {:.1} us, mean {:.1} us, max {:.1} us", min, mean, max);
            }
        }
    }

    /// The egress interface, the limits found on the path and its counters in the window.
    fn path_line(&self, out: &mut String) {
        if let Some(iface) = &self.path.egress_interface {
            let limits: Vec<String> = self
                .path
                .limits
                .iter()
                .map(|l| format!("{} {}", l.what, format_bits_per_second(l.bits_per_second)))
                .collect();
            let counters = self.sender.host.as_ref().and_then(|h| h.interface).map_or(String::new(), |i| {
                format!(
                    "; {iface} in the window: tx {} in {} packets, rx {}, drops {}",
                    format_bytes(i.tx_bytes),
                    i.tx_packets,
                    format_bytes(i.rx_bytes),
                    i.tx_dropped + i.rx_dropped
                )
            });
            let _ = writeln!(
                out,
                "path: egress {iface}; limits: {}{counters}",
                if limits.is_empty() { "none found".to_string() } else { limits.join(", ") }
            );
        }
    }

    /// The sender's TCP figures: retransmits, RTT, cwnd and what limited it.
    fn tcp_line(&self, out: &mut String) {
        let t = &self.sender.tcp;
        if t.flows > 0 {
            let _ = writeln!(
                out,
                "tcp sender: {} retransmits ({:.3}% of bytes), rtt mean {:.0} us max {} us, cwnd mean {:.0}, rwnd-limited {:.0}%, sndbuf-limited {:.0}% of busy time",
                t.retransmitted_segments,
                t.retrans_share() * 100.0,
                t.rtt_mean_us,
                t.rtt_max_us,
                t.cwnd_mean,
                t.rwnd_limited_share() * 100.0,
                t.sndbuf_limited_share() * 100.0
            );
        }
    }

    /// Whether SEND_ZC was used, and what the kernel copied anyway.
    fn zerocopy_line(&self, out: &mut String) {
        if let Some(zc) = &self.sender.zerocopy {
            let _ = writeln!(
                out,
                "zero-copy: {} ({}){}",
                if zc.used { "SEND_ZC" } else { "off" },
                zc.reason,
                if zc.used {
                    format!(": {} sends, kernel copied {} of {} notified", zc.sends, zc.copied, zc.notifications)
                } else {
                    String::new()
                }
            );
        }
    }

    /// Every error once, the test's own first.
    fn error_lines(&self, out: &mut String) {
        let recv = self.receiver.as_ref();
        let mut shown: Vec<&String> = Vec::new();
        for err in
            self.error.iter().chain(&self.sender.errors).chain(recv.map(|r| r.errors.as_slice()).unwrap_or_default())
        {
            if !shown.contains(&err) {
                let _ = writeln!(out, "error: {err}");
                shown.push(err);
            }
        }
    }

    /// The verdict, then the reverse direction's report under `--bidir`.
    fn verdict_lines(&self, out: &mut String) {
        let v = self.verdict();
        let _ = writeln!(out, "verdict: {} ({})", v.bottleneck, v.evidence);
        if let Some(rev) = &self.reverse {
            let _ = writeln!(out, "\n--- reverse direction (the far side sending to this one) ---");
            out.push_str(&rev.render_text());
        }
    }
}
