//! How a stream test is shown: iperf2-like text, the JSON document whose keys docs/output.md
//! fixes, and the `--json-stream` events. The figures themselves are metrics/figures.rs.

use crate::analysis::verdict::{diagnose, queue_finding, Verdict};
use crate::base::spec::TestSpec;
use crate::base::units::{format_bits_per_second, format_bytes};
use crate::metrics::document::{
    BySide, CpuPerByte, CpuSection, FlowEnd, IntervalDatagrams, IntervalEntry, Kind, MptcpSection, OneWayDelay,
    QueueBytes, QueueEntry, ReceivedDatagrams, ReceiverSum, SenderSum, SideSummary, StreamDocument, StreamSum,
    SynchronizedStart, TcpSection, Tool, WindowDatagrams,
};
use crate::metrics::figures::{rate, Host, IntervalFigures, Role, SideReport, StreamReport, SCHEMA_VERSION};
pub use crate::report::interval_rows::{interval_lines, interval_titles, shown_span, INTERVAL_TITLES};
use crate::report::interval_rows::{other_span, tcp_columns};
use crate::report::latency::latency_lines;
use serde_json::{json, Value};
use std::fmt::Write as _;

/// The receiver's NIC queue table: one line per receive queue.
pub fn nic_queue_lines(t: &crate::metrics::figures::NicQueueTable) -> String {
    let mut out = format!("rx queues of {} (--placement {}): {}\n", t.iface, t.placement, t.summary);
    let _ = writeln!(out, "  rx queue  NAPI id  IRQ  IRQ CPU  thread CPU  node  flows      busy-poll  bytes");
    for r in &t.rows {
        let [queue, napi, irq, irq_cpu, threads, node, flows, busy, bytes] = nic_queue_cells(r);
        let _ = writeln!(
            out,
            "  {queue:>8}  {napi:>7}  {irq:>3}  {irq_cpu:>7}  {threads:>10}  {node:>4}  {flows:<9}  {busy:>9}  {bytes}"
        );
    }
    out
}

/// One NIC queue row's cells, as the text and the HTML page show them: rx queue, NAPI id,
/// IRQ, IRQ CPU, thread CPUs, NUMA node, flows, busy-poll share, bytes (`-` where unknown).
pub fn nic_queue_cells(r: &crate::metrics::figures::NicQueueRow) -> [String; 9] {
    let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    let list = |v: Vec<String>| if v.is_empty() { "-".to_string() } else { v.join(",") };
    [
        r.rx_queue.to_string(),
        opt(r.napi_id.map(|n| n.to_string())),
        opt(r.irq.map(|n| n.to_string())),
        opt(r.irq_cpu.map(|n| n.to_string())),
        list(r.thread_cpus.iter().map(usize::to_string).collect()),
        opt(r.numa_node.map(|n| n.to_string())),
        list(r.flows.iter().map(u32::to_string).collect()),
        r.busy_poll_share().map_or_else(|| "-".into(), |s| format!("{:.0}%", s * 100.0)),
        format_bytes(r.bytes),
    ]
}

/// `tcp.*_flows_end[]`: each flow's TCP_INFO at the end, with its knobs as read back.
fn flows_end(side: &SideReport) -> Vec<Option<FlowEnd>> {
    side.tcp_flows_end
        .iter()
        .enumerate()
        .map(|(i, info)| {
            info.map(|info| FlowEnd { info, socket: side.flow_sockets.get(i).cloned().unwrap_or_default() })
        })
        .collect()
}

/// One entry of `intervals[]` (and of a `--json-stream` interval event): the receiver's
/// figures for the stretch, with the sender's view of it beside them.
pub fn interval_entry(i: &IntervalFigures, si: Option<&IntervalFigures>) -> IntervalEntry {
    IntervalEntry {
        start: i.start,
        end: i.end,
        bytes: i.sum(),
        bits_per_second: i.bits_per_second(),
        queues: i.bytes.clone(),
        sender_bytes: si.map(|s| s.sum()),
        tcp: si.map(|s| s.tcp.clone()),
        tcp_flows: si.map(|s| s.tcp_flows.clone()),
        tcp_flow_retransmits: si.filter(|s| !s.tcp_retransmits.is_empty()).map(|s| s.tcp_retransmits.clone()),
        udp: i.udp.map(|u| IntervalDatagrams {
            datagrams: u.received,
            lost: u.lost,
            out_of_order: u.out_of_order,
            duplicates: u.duplicates,
            jitter_us: u.jitter_us,
        }),
        cpu: match (si.and_then(|s| s.cpu.clone()), i.cpu.clone()) {
            (None, None) => None,
            (sender, receiver) => Some(BySide { sender, receiver }),
        },
    }
}

/// [`interval_entry`] as a JSON value.
pub fn interval_json(i: &IntervalFigures, si: Option<&IntervalFigures>) -> Value {
    serde_json::to_value(interval_entry(i, si)).unwrap_or(Value::Null)
}

/// Version of the `--json-stream` events (one JSON object per line); bumped when a key of an
/// event changes meaning.
pub(crate) const STREAM_SCHEMA_VERSION: u32 = 1;

/// `{"event":"start",...}`: the agreed test and both ends' placement, as it starts.
pub fn start_event(start: &crate::session::live::StartInfo) -> Value {
    // Under --bidir, the forward half's roles: this host is its sender.
    let placement_of = |role: Role| match start.roles.host(role) {
        Host::This => &start.this_placement,
        Host::Far => &start.far_placement,
    };
    json!({"event": "start", "stream_schema_version": STREAM_SCHEMA_VERSION, "schema_version": SCHEMA_VERSION,
           "tool": {"name": "uringbench", "version": env!("CARGO_PKG_VERSION")},
           "target": start.target, "test": start.spec, "roles": start.roles,
           "sender": {"placement": placement_of(Role::Sender)}, "receiver": {"placement": placement_of(Role::Receiver)}})
}

/// The live header's placement lines: each host's, labelled with the host and its role.
pub fn placement_lines(start: &crate::session::live::StartInfo) -> String {
    start.placements().iter().map(|(label, line)| format!("{label}: {line}\n")).collect()
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

/// `--json-stream`'s `{"event":"latency",...}` after interval `n` of the load's direction.
pub fn latency_event(n: usize, iv: &crate::metrics::latency::LatencyInterval) -> Value {
    let mut v = json!({"event": "latency", "stream_schema_version": STREAM_SCHEMA_VERSION, "n": n});
    if let (Value::Object(event), Ok(Value::Object(entry))) = (&mut v, serde_json::to_value(iv)) {
        event.extend(entry);
    }
    v
}

/// `{"event":"end",...}`: the whole report, the document `-J` writes, with `event` first.
pub fn end_event(doc: &impl serde::Serialize) -> Value {
    let mut v = json!({"event": "end", "stream_schema_version": STREAM_SCHEMA_VERSION});
    if let (Value::Object(event), Ok(Value::Object(doc))) = (&mut v, serde_json::to_value(doc)) {
        event.extend(doc);
    }
    v
}

/// The first line of a stream report: the agreed test.
pub fn header_line(s: &TestSpec, target: &str) -> String {
    // A test that ends when its bytes are delivered has no time window: it says so.
    let span = match s.tuning.bytes {
        Some(n) => format!("until {} are sent (at most {:.1} s)", format_bytes(n), s.time_ms as f64 / 1e3),
        None => format!(
            "{:.1} s window (+{:.1} s warm-up, {:.2} s cool-down)",
            s.time_ms as f64 / 1e3,
            s.warmup_ms as f64 / 1e3,
            s.cooldown_ms as f64 / 1e3
        ),
    };
    let mut out = format!(
        "uringbench {}: {:?} stream to {}, {} queue{} x {} flow{} (a queue: a pinned thread and its flows), {} writes, {span}\n",
        env!("CARGO_PKG_VERSION"),
        s.proto,
        target,
        s.queues,
        if s.queues == 1 { "" } else { "s" },
        s.flows_per_queue,
        if s.flows_per_queue == 1 { "" } else { "s" },
        format_bytes(u64::from(s.len)),
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

/// `text`'s lines, each prefixed with `tag` (`--bidir`'s `fwd `/`rev `; empty: as they are).
fn tagged(tag: &str, text: &str) -> String {
    if tag.is_empty() {
        return text.to_string();
    }
    text.lines().map(|l| format!("{tag}{l}\n")).collect()
}

/// How much a text report shows. The short default is what an iperf user reads: the interval
/// table, the totals, CPU per side and the verdict. `-v` adds the data path and tuning detail
/// (placement, paths, TCP and zero-copy figures, NIC queues). This is the one place that says
/// which lines wait for `-v`; JSON always carries everything.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Detail {
    #[default]
    Short,
    Verbose,
}

impl Detail {
    /// Whether the placement lines, each side's data path, the egress path and its limits,
    /// the TCP and zero-copy figures and the NIC queue table are shown.
    pub fn shows_data_path(self) -> bool {
        self == Detail::Verbose
    }
}

impl StreamReport {
    /// Names the busiest queue thread when one is saturated; otherwise says nothing stands out.
    pub fn verdict(&self) -> Verdict {
        let mut verdict = diagnose(&self.evidence());
        let received = self.receiver.as_ref().map_or(0.0, |r| r.bits_per_second());
        verdict.queue = self
            .latency
            .as_ref()
            .and_then(|l| queue_finding(l, &self.path.limits, self.path.egress_interface.as_deref(), received));
        verdict
    }

    /// Cycles per received byte and CPU-seconds per GB from a side's host busy time.
    fn cpu_per_byte(side: &SideReport, bytes: u64) -> Option<CpuPerByte> {
        if bytes == 0 {
            return None;
        }
        let busy = side.cpu.host_busy_seconds;
        Some(CpuPerByte {
            cpu_seconds_per_gb: busy / (bytes as f64 / 1e9),
            cycles_per_byte: side.cpu.nominal_hz.map(|hz| busy * hz / bytes as f64),
        })
    }

    /// The document docs/output.md describes (what `-J` writes).
    pub fn to_document(&self) -> StreamDocument {
        let recv = self.receiver.as_ref();
        let queue_bytes = |bytes: u64, total_bytes: u64, window: f64| QueueBytes {
            bytes,
            total_bytes,
            bits_per_second: rate(bytes, window),
        };
        let queues = self
            .sender
            .queues
            .iter()
            .map(|sq| QueueEntry {
                id: sq.id,
                flows: sq.flows,
                sender: queue_bytes(sq.bytes, sq.total_bytes, self.sender.window_seconds),
                receiver: recv.and_then(|r| {
                    r.queues.get(sq.id as usize).map(|q| queue_bytes(q.bytes, q.total_bytes, r.window_seconds))
                }),
            })
            .collect();
        let window = recv.map_or(self.sender.window_seconds, |r| r.window_seconds);
        let intervals = recv
            .map(|r| r.intervals.as_slice())
            .unwrap_or_default()
            .iter()
            .enumerate()
            // The sender samples the same offsets on its own clock: its interval n is the same
            // stretch of the test, and carries the TCP view (RTT, retransmits, limits).
            .map(|(n, i)| interval_entry(i, self.sender.intervals.get(n)))
            .collect();
        let side = |s: &SideReport| SideSummary {
            placement: s.placement.clone(),
            path: s.path.clone(),
            data_path: s.data_path.clone(),
            complete: s.complete,
            errors: s.errors.clone(),
            nic_queues: s.nic_queues.clone(),
        };
        StreamDocument {
            kind: Kind::Stream,
            schema_version: SCHEMA_VERSION,
            tool: Tool::this(),
            title: None,
            peer: None,
            peer_version: None,
            target: self.target.clone(),
            roles: Some(self.roles.clone()),
            test: self.spec.clone(),
            complete: self.complete(),
            error: self.error.clone(),
            interrupted: self.interrupted.clone(),
            queues,
            sum: StreamSum {
                window_seconds: window,
                sender: SenderSum {
                    bytes: self.sender.bytes(),
                    total_bytes: self.sender.total_bytes(),
                    bits_per_second: self.sender.bits_per_second(),
                    window_seconds: self.sender.window_seconds,
                    datagrams: self.sender.udp.as_ref().map(|u| u.datagrams),
                },
                receiver: recv.map(|r| ReceiverSum {
                    bytes: r.bytes(),
                    total_bytes: r.total_bytes(),
                    bits_per_second: r.bits_per_second(),
                    window_seconds: r.window_seconds,
                    udp: r.udp.as_ref().map(|u| ReceivedDatagrams {
                        datagrams: u.datagrams,
                        lost: u.lost,
                        out_of_order: u.out_of_order,
                        duplicates: u.duplicates,
                        jitter_us: u.jitter_us,
                        expected: u.expected,
                        loss_ratio: if u.expected > 0 { u.lost as f64 / u.expected as f64 } else { 0.0 },
                        one_way_delay_us: u.delay_us.map(|[min, mean, max]| OneWayDelay { min, mean, max }),
                        window: u.window.map(|w| WindowDatagrams {
                            datagrams: w.datagrams,
                            lost: w.lost,
                            expected: w.expected,
                            loss_ratio: w.loss_ratio(),
                        }),
                    }),
                }),
                peer_totals_after_omit_s: None,
            },
            intervals,
            cpu: CpuSection {
                sender: self.sender.cpu.clone(),
                receiver: recv.map(|r| r.cpu.clone()),
                sender_per_byte: Self::cpu_per_byte(&self.sender, self.sender.bytes()),
                receiver_per_byte: recv.and_then(|r| Self::cpu_per_byte(r, r.bytes())),
            },
            tcp: TcpSection {
                sender: self.sender.tcp.clone(),
                receiver: recv.map(|r| r.tcp.clone()),
                sender_flows_end: flows_end(&self.sender),
                receiver_flows_end: recv.map(flows_end),
            },
            path: self.path.clone(),
            host: BySide { sender: self.sender.host.clone(), receiver: recv.and_then(|r| r.host.clone()) },
            zerocopy: self.sender.zerocopy.clone(),
            xdp: BySide { sender: self.sender.xdp.clone(), receiver: recv.and_then(|r| r.xdp.clone()) },
            sender: side(&self.sender),
            receiver: recv.map(side),
            verdict: self.verdict(),
            direction: self.spec.direction,
            reverse: self.reverse.as_ref().map(|r| Box::new(r.to_document())),
            mptcp: MptcpSection::of(self.spec.tuning.mptcp, &self.sender, recv),
            latency: self.latency.clone(),
            start: self.synchronized_start(),
        }
    }

    /// `--start-at`: the instant and when each end's data began.
    fn synchronized_start(&self) -> Option<SynchronizedStart> {
        let receiver = self.receiver.as_ref().and_then(|r| r.data_began_unix_ns);
        SynchronizedStart::of(self.spec.start_at?, self.sender.data_began_unix_ns, receiver)
    }

    /// [`to_document`](Self::to_document) as a JSON value.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self.to_document()).unwrap_or(Value::Null)
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

    /// The directions this report holds, each with the tag its lines carry: this one alone
    /// (untagged), or under `--bidir` the forward one (`fwd `) and the reverse one (`rev `).
    fn directions(&self) -> Vec<(&'static str, &StreamReport)> {
        match &self.reverse {
            Some(rev) => vec![("fwd ", self), ("rev ", rev.as_ref())],
            None => vec![("", self)],
        }
    }

    /// iperf2-style text with every detail (a saved run, a peer tool's report): one line per
    /// queue, a `[SUM]` line, CPU, zero-copy and verdict; under `--bidir` one report: one
    /// header, both directions in each table, a verdict for each.
    pub fn render_text(&self) -> String {
        self.render_text_with(Detail::Verbose)
    }

    /// [`render_text`](Self::render_text) at the given detail.
    pub fn render_text_with(&self, detail: Detail) -> String {
        let mut out = header_line(&self.spec, &self.target);
        if detail.shows_data_path() {
            for (tag, d) in self.directions() {
                let _ =
                    writeln!(out, "{tag}{}: {} | {}", d.roles.label(Role::Sender), d.sender.placement, d.sender.path);
                if let Some(r) = &d.receiver {
                    let _ = writeln!(out, "{tag}{}: {} | {}", d.roles.label(Role::Receiver), r.placement, r.path);
                }
            }
        }
        if self.directions().iter().any(|(_, d)| d.receiver.as_ref().is_some_and(|r| r.intervals.len() > 1)) {
            let _ = writeln!(out, "{}", interval_titles(&self.spec));
            for (tag, d) in self.directions() {
                for (n, i) in d.receiver.as_ref().map_or(&[][..], |r| &r.intervals[..]).iter().enumerate() {
                    out.push_str(&tagged(tag, &interval_lines(&d.spec, n, i, d.sender.intervals.get(n))));
                }
            }
        }
        out.push_str(&self.render_summary(detail));
        out
    }

    /// The text that follows lines printed live (header, placement and intervals, as the test
    /// ran): with `-v` each side's data path, then the summary.
    pub fn render_after_live(&self, detail: Detail) -> String {
        let mut out = String::new();
        if detail.shows_data_path() {
            for (tag, d) in self.directions() {
                let _ = writeln!(out, "{tag}{} path: {}", d.roles.label(Role::Sender), d.sender.path);
                if let Some(r) = &d.receiver {
                    let _ = writeln!(out, "{tag}{} path: {}", d.roles.label(Role::Receiver), r.path);
                }
            }
        }
        out.push_str(&self.render_summary(detail));
        out
    }

    /// The window's table (both directions under `--bidir`, with a sum of each and of both),
    /// then each direction's totals, CPU, UDP, (with `-v`) path, TCP and zero-copy, errors and
    /// verdict.
    fn render_summary(&self, detail: Detail) -> String {
        let mut out = String::new();
        let directions = self.directions();
        let _ = writeln!(out, "{}", interval_titles(&self.spec));
        for (tag, d) in &directions {
            let mut rows = String::new();
            d.window_lines(&mut rows);
            out.push_str(&tagged(tag, &rows));
        }
        if directions.len() > 1 {
            self.both_ways_line(&mut out);
        }
        if let Some(start) = self.synchronized_start() {
            out.push_str(&crate::report::start::start_line(&start));
        }
        for (tag, d) in &directions {
            let mut lines = String::new();
            d.total_line(&mut lines);
            d.socket_buffer_line(&mut lines);
            d.cpu_lines(&mut lines);
            d.udp_lines(&mut lines);
            if detail.shows_data_path() {
                d.path_line(&mut lines);
                if let Some(t) = d.receiver.as_ref().and_then(|r| r.nic_queues.as_ref()) {
                    lines.push_str(&nic_queue_lines(t));
                }
                d.tcp_line(&mut lines);
                d.zerocopy_line(&mut lines);
            }
            if let Some(l) = &d.latency {
                lines.push_str(&latency_lines(l));
            }
            d.error_lines(&mut lines);
            d.verdict_lines(&mut lines);
            out.push_str(&tagged(tag, &lines));
        }
        out
    }

    /// `--bidir`: both directions' window figures added up, each side's over its own window.
    fn both_ways_line(&self, out: &mut String) {
        let directions = self.directions();
        let offered: u64 = directions.iter().map(|(_, d)| d.sender.bytes()).sum();
        let offered_bps: f64 = directions.iter().map(|(_, d)| d.sender.bits_per_second()).sum();
        let received: u64 = directions.iter().filter_map(|(_, d)| d.receiver.as_ref()).map(|r| r.bytes()).sum();
        let received_bps: f64 =
            directions.iter().filter_map(|(_, d)| d.receiver.as_ref()).map(|r| r.bits_per_second()).sum();
        let window = self.shown_window();
        let _ = writeln!(
            out,
            "[ALL] 0.00-{window:<5.2} sec  {:>12} {:>16}   {:>12} {:>16}  (both directions)",
            format_bytes(offered),
            format_bits_per_second(offered_bps),
            format_bytes(received),
            format_bits_per_second(received_bps)
        );
    }

    /// The window's span as its rows show it: as planned when it ran as planned, as the
    /// intervals are (the rates use the measured one).
    fn shown_window(&self) -> f64 {
        let window = self.receiver.as_ref().map_or(self.sender.window_seconds, |r| r.window_seconds);
        let planned = self.spec.time_ms as f64 / 1e3;
        if (window - planned).abs() < 0.1 {
            planned
        } else {
            window
        }
    }

    /// The per-queue window lines and the `[SUM]` line, offered beside received.
    fn window_lines(&self, out: &mut String) {
        let recv = self.receiver.as_ref();
        let window = recv.map_or(self.sender.window_seconds, |r| r.window_seconds);
        let shown = self.shown_window();
        for sq in &self.sender.queues {
            let rq = recv.and_then(|r| r.queues.get(sq.id as usize));
            let _ = writeln!(
                out,
                "[{:>3}] 0.00-{:<5.2} sec  {:>12} {:>16}   {}",
                sq.id,
                shown,
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
            "[SUM] 0.00-{:<5.2} sec  {:>12} {:>16}   {}{}{}",
            shown,
            format_bytes(self.sender.bytes()),
            format_bits_per_second(self.sender.bits_per_second()),
            recv.map_or("receiver report missing".into(), |r| format!(
                "{:>12} {:>16}",
                format_bytes(r.bytes()),
                format_bits_per_second(r.bits_per_second())
            )),
            // The window's retransmits, as iperf3's summary gives them.
            if tcp_columns(&self.spec) && self.sender.tcp.flows > 0 {
                format!("  {:>6}", self.sender.tcp.retransmitted_segments)
            } else {
                String::new()
            },
            other_span(self.sender.window_seconds, window),
        );
    }

    /// Bytes over the whole test on both sides, and whether they match.
    fn total_line(&self, out: &mut String) {
        let recv = self.receiver.as_ref();
        // With -n the window is the whole transfer: say how long it took.
        if let Some(n) = self.spec.tuning.bytes {
            let took = recv.map_or(self.sender.window_seconds, |r| r.window_seconds);
            let _ = writeln!(out, "until {}: the transfer took {took:.3} s", format_bytes(n));
        }
        let _ = writeln!(
            out,
            "total: sender wrote {} bytes, receiver counted {}, over the whole run (warm-up and cool-down included)",
            self.sender.total_bytes(),
            recv.map_or("nothing (no report)".into(), |r| format!(
                "{} bytes{}",
                r.total_bytes(),
                if r.total_bytes() == self.sender.total_bytes() { " (exact match)" } else { " (MISMATCH)" }
            )),
        );
    }

    /// `-w`: what the kernel set on each side's flows, read back with getsockopt after the
    /// test, beside what was asked (the kernel doubles a request for its own bookkeeping and
    /// keeps it between its floor and net.core.wmem_max / rmem_max).
    fn socket_buffer_line(&self, out: &mut String) {
        let Some(asked) = self.spec.tuning.window else { return };
        let range = |values: Vec<u64>| match (values.iter().min(), values.iter().max()) {
            (Some(lo), Some(hi)) if lo == hi => format_bytes(*lo),
            (Some(lo), Some(hi)) => format!("{}-{}", format_bytes(*lo), format_bytes(*hi)),
            _ => "not read".into(),
        };
        let sides: Vec<String> = [(Role::Sender, Some(&self.sender)), (Role::Receiver, self.receiver.as_ref())]
            .into_iter()
            .filter_map(|(role, side)| {
                let flows = &side?.flow_sockets;
                (!flows.is_empty()).then(|| {
                    format!(
                        "{} SO_SNDBUF {} SO_RCVBUF {}",
                        self.roles.label(role),
                        range(flows.iter().filter_map(|f| f.sndbuf).collect()),
                        range(flows.iter().filter_map(|f| f.rcvbuf).collect())
                    )
                })
            })
            .collect();
        if sides.is_empty() {
            return;
        }
        let _ = writeln!(
            out,
            "window (-w {}): the kernel set {} (it doubles a request, within its floor and net.core.wmem_max/rmem_max)",
            format_bytes(u64::from(asked)),
            sides.join("; ")
        );
    }

    /// Each side's queue threads and the host CPUs they ran on.
    fn cpu_lines(&self, out: &mut String) {
        let recv = self.receiver.as_ref();
        for (role, side) in [(Role::Sender, Some(&self.sender)), (Role::Receiver, recv)] {
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
            let name = self.roles.label(role);
            let _ = writeln!(
                out,
                "cpu {name} in the window: threads {} | host busy {}",
                threads.join(", "),
                host.join(" ")
            );
        }
    }

    /// UDP: the receiver's datagram accounting, and the one-way delay when measured.
    fn udp_lines(&self, out: &mut String) {
        let recv = self.receiver.as_ref();
        if let Some(u) = recv.and_then(|r| r.udp.as_ref()) {
            // The headline's span first, then the whole run's exact accounting (FIN included).
            if let Some(w) = &u.window {
                let _ = writeln!(
                    out,
                    "udp in the window: received {}, lost {}/{} ({:.3}%)",
                    w.datagrams,
                    w.lost,
                    w.expected,
                    w.loss_ratio() * 100.0
                );
            }
            let sent = self.sender.udp.as_ref().map_or(0, |s| s.datagrams);
            let _ = writeln!(
                out,
                "udp over the whole run: sent {sent} datagrams, received {}, lost {}/{} ({:.3}%), out-of-order {}, duplicates {}, jitter {:.3} ms",
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

    /// Where the data left the data sender (its egress interface, with that interface's own
    /// counters in the window, from the data sender's report), and the limits this host found
    /// on its own egress.
    fn path_line(&self, out: &mut String) {
        let limits: Vec<String> = self
            .path
            .limits
            .iter()
            .map(|l| format!("{} {}", l.what, format_bits_per_second(l.bits_per_second)))
            .collect();
        let limits = if limits.is_empty() { "none found".to_string() } else { limits.join(", ") };
        let sender = self.roles.label(Role::Sender);
        let egress = self.path.egress_interface.as_deref();
        let counters = self.sender.host.as_ref().filter(|h| Some(h.iface.as_str()) == egress).and_then(|h| h.interface);
        let mut line = match (egress, counters) {
            (Some(iface), Some(i)) => format!(
                "path: data leaves the {sender} by {iface}; {iface} in the window: tx {} in {} packets, rx {}, drops {}",
                format_bytes(i.tx_bytes),
                i.tx_packets,
                format_bytes(i.rx_bytes),
                i.tx_dropped + i.rx_dropped
            ),
            (Some(iface), None) => format!("path: data leaves the {sender} by {iface} (its counters not reported)"),
            (None, _) => format!("path: the {sender}'s egress is not reported"),
        };
        if self.roles.data_sender == Host::This {
            let _ = write!(line, "; limits: {limits}");
        } else {
            let _ = write!(line, "; limits on this host's own egress: {limits}");
        }
        let _ = writeln!(out, "{line}");
    }

    /// The sender's TCP figures: retransmits, RTT, cwnd and what limited it.
    fn tcp_line(&self, out: &mut String) {
        let t = &self.sender.tcp;
        if t.flows > 0 {
            let _ = writeln!(
                out,
                "tcp {} in the window: {} retransmits ({:.3}% of bytes), srtt mean {:.0} us at the end, max {} us sampled, cwnd mean {:.0} at the end, rwnd-limited {:.0}%, sndbuf-limited {:.0}% of busy time",
                self.roles.label(Role::Sender),
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
                "zero-copy on the {} over the whole run: {} ({}){}",
                self.roles.label(Role::Sender),
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

    /// The verdict, with the queue and NIC queue findings behind it.
    fn verdict_lines(&self, out: &mut String) {
        let v = self.verdict();
        let _ = writeln!(out, "verdict: {} ({})", v.bottleneck, v.evidence);
        if let Some(queue) = &v.queue {
            let _ = writeln!(out, "verdict: {queue}");
        }
        for finding in self.receiver.as_ref().and_then(|r| r.nic_queues.as_ref()).map_or(&[][..], |t| &t.findings[..]) {
            let _ = writeln!(out, "verdict: {finding}");
        }
    }
}
