//! What a test measured, on each side, and how it is shown (docs/output.md).
//!
//! Each side builds a [`SideReport`] from its own samples; the receiver's travels back over
//! the control channel, and the sender combines both into a [`StreamReport`] that renders as
//! iperf2-like text or as the JSON document whose keys docs/output.md fixes.

use crate::analysis::verdict::{diagnose, Evidence, Verdict};
use crate::base::spec::TestSpec;
use crate::base::units::{format_bits_per_second, format_bytes};
use crate::metrics::measure::{clock_ticks, Sample, Window};
use crate::metrics::seq::SeqStats;
use crate::runtime::placement::ThreadPlan;
use crate::sys::hostinfo::HostDelta;
use crate::sys::netpath::PathLimit;
use crate::sys::tcpinfo::{TcpInfo, TcpWindow};
use crate::transport::tcp::send::ZeroCopyCounts;
use crate::transport::FlowOutcome;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::fmt::Write as _;

/// Version of the JSON document; bumped when a fixed key changes meaning.
pub const SCHEMA_VERSION: u32 = 1;

/// A side's error when its flows ended before its window did.
const ENDED_EARLY: &str = "the flows ended before the measured window did";

/// A test stopped before its planned end, by a signal at either end.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Interruption {
    /// How much of the measured window had run (the receiver's figure when it reported).
    pub at_seconds: f64,
    /// The planned window.
    pub of_seconds: f64,
    /// Which signal, on which end.
    pub reason: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Sender,
    Receiver,
}

/// One queue's bytes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct QueueFigures {
    pub id: u32,
    /// Bytes inside the measured window.
    pub bytes: u64,
    /// Bytes over the whole test, warm-up and cool-down included (sender: written;
    /// receiver: read up to EOF).
    pub total_bytes: u64,
    pub flows: u32,
}

/// Bytes per queue between two consecutive samples.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IntervalFigures {
    /// Seconds since the window started.
    pub start: f64,
    pub end: f64,
    pub bytes: Vec<u64>,
    /// TCP figures of all flows over the interval.
    pub tcp: TcpWindow,
    /// TCP_INFO of each flow at the interval's end, in flow order.
    pub tcp_flows: Vec<Option<TcpInfo>>,
    /// UDP receiver: datagram accounting over the interval, all flows (jitter as of its end).
    pub udp: Option<SeqStats>,
}

impl IntervalFigures {
    /// The stretch between samples `a` and `b`, timed from the window's `first` sample.
    pub fn between(first: &Sample, a: &Sample, b: &Sample) -> Self {
        Self {
            start: (a.at - first.at).as_secs_f64(),
            end: (b.at - first.at).as_secs_f64(),
            bytes: b.bytes.iter().zip(&a.bytes).map(|(b, a)| b - a).collect(),
            tcp: TcpWindow::between(&a.tcp, &b.tcp),
            tcp_flows: b.tcp.clone(),
            udp: (!b.udp.is_empty()).then(|| SeqStats::sum(&b.udp).delta(&SeqStats::sum(&a.udp))),
        }
    }
    pub fn sum(&self) -> u64 {
        self.bytes.iter().sum()
    }
    pub fn bits_per_second(&self) -> f64 {
        rate(self.sum(), self.end - self.start)
    }
}

/// One queue thread's CPU time inside the window.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ThreadCpu {
    pub cpu: usize,
    pub queues: Vec<u32>,
    pub user_seconds: f64,
    pub system_seconds: f64,
    /// (user + system) ÷ window.
    pub utilization: f64,
}

/// One host CPU's busy time inside the window (user+nice+system+irq+softirq+steal).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HostCpu {
    pub cpu: usize,
    pub busy_seconds: f64,
    /// The softirq part of `busy_seconds`.
    pub softirq_seconds: f64,
    pub utilization: f64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CpuFigures {
    pub threads: Vec<ThreadCpu>,
    pub host: Vec<HostCpu>,
    /// Sum of `host[].busy_seconds`.
    pub host_busy_seconds: f64,
    /// Nominal CPU frequency used for cycles per byte.
    pub nominal_hz: Option<f64>,
}

/// UDP datagram accounting of one side: the sender counts what it sent, the receiver the
/// sequence-number accounting over the whole test (FIN included: losses at the end count).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct UdpFigures {
    /// Sender: datagrams sent. Receiver: distinct datagrams received.
    pub datagrams: u64,
    pub lost: u64,
    pub out_of_order: u64,
    pub duplicates: u64,
    /// Highest sequence number the sender is known to have used.
    pub expected: u64,
    /// RFC 3550 jitter, microseconds: mean of the flows' estimates.
    pub jitter_us: f64,
    /// Sender: sends refused by ICMP port unreachable (nobody listening).
    pub refused: u64,
    /// One-way delay (`--one-way-delay`, ends sharing a clock): min, mean, max microseconds.
    #[serde(default)]
    pub delay_us: Option<[f64; 3]>,
}

impl UdpFigures {
    /// A receiver's figures from its flows' sequence accounting: counts summed, jitter the
    /// mean of the flows' estimates.
    pub fn received(flows: &[&crate::metrics::seq::SeqStats]) -> Self {
        let stats = crate::metrics::seq::SeqStats::sum(flows.iter().copied());
        let jitter_us =
            if flows.is_empty() { 0.0 } else { flows.iter().map(|s| s.jitter_us).sum::<f64>() / flows.len() as f64 };
        Self {
            datagrams: stats.received,
            lost: stats.lost,
            out_of_order: stats.out_of_order,
            duplicates: stats.duplicates,
            expected: stats.expected,
            jitter_us,
            refused: 0,
            delay_us: stats.delay.filter(|d| d.count > 0).map(|d| [d.min_us, d.sum_us / d.count as f64, d.max_us]),
        }
    }
}

/// Zero-copy truth for one side: requested, used, and what the kernel reported.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ZeroCopyFigures {
    /// `--zerocopy` as given.
    pub requested: String,
    /// Whether SEND_ZC was used.
    pub used: bool,
    /// Why it was or was not used.
    pub reason: String,
    pub sends: u64,
    pub notifications: u64,
    /// Sends the kernel reported it copied anyway.
    pub copied: u64,
}

/// Everything one side measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SideReport {
    pub role: Role,
    /// Threads, CPUs and wait mode, in one line.
    pub placement: String,
    /// The data path used (opcodes, buffer ring shape).
    pub path: String,
    pub queues: Vec<QueueFigures>,
    pub window_seconds: f64,
    pub intervals: Vec<IntervalFigures>,
    pub cpu: CpuFigures,
    /// TCP figures of all flows over the measured window.
    pub tcp: TcpWindow,
    /// TCP_INFO of each flow after the test ended, in flow order.
    pub tcp_flows_end: Vec<Option<TcpInfo>>,
    /// The knobs of each flow as the kernel reported them at the end, in flow order.
    #[serde(default)]
    pub flow_sockets: Vec<crate::sys::sockopt::FlowSocket>,
    /// Interface, SNMP and softnet counters over the window (interface: the one facing the peer).
    pub host: Option<HostDelta>,
    /// UDP tests only.
    pub udp: Option<UdpFigures>,
    pub zerocopy: Option<ZeroCopyFigures>,
    /// AF_XDP engine (`--engine xdp`): modes obtained and the program's and sockets' counters.
    #[serde(default)]
    pub xdp: Option<crate::metrics::xdp::XdpFigures>,
    /// Whether the whole window was measured and every flow ended cleanly.
    pub complete: bool,
    pub errors: Vec<String>,
}

impl SideReport {
    /// Builds a side's report from its window's first and last samples and its flows'
    /// outcomes. Intervals are not in it: they went to the sampler's sink, and whoever kept
    /// them puts them in `intervals`.
    pub fn build(
        role: Role,
        spec: &TestSpec,
        window: &Window,
        outcomes: &[FlowOutcome],
        threads: &[(ThreadPlan, i32)],
    ) -> Self {
        let nq = spec.queues as usize;
        let mut queues: Vec<QueueFigures> =
            (0..nq).map(|q| QueueFigures { id: q as u32, bytes: 0, total_bytes: 0, flows: 0 }).collect();
        for o in outcomes {
            let q = &mut queues[o.queue as usize];
            q.total_bytes += o.bytes;
            q.flows += 1;
        }
        let mut errors: Vec<String> = Vec::new();
        for o in outcomes.iter().filter_map(|o| o.error.as_ref()) {
            if !errors.contains(o) {
                errors.push(o.clone());
            }
        }
        let window_complete = window.complete;
        let mut window_seconds = 0.0;
        let intervals = Vec::new();
        let mut tcp = TcpWindow::default();
        let mut host = None;
        let mut cpu = CpuFigures { nominal_hz: crate::metrics::measure::nominal_cpu_hz(), ..CpuFigures::default() };
        if let (Some(first), Some(last)) = (window.first.as_ref(), window.last.as_ref()) {
            window_seconds = (last.at - first.at).as_secs_f64();
            for (q, fig) in queues.iter_mut().enumerate() {
                fig.bytes = last.bytes[q] - first.bytes[q];
            }
            cpu = cpu_figures(first, last, window_seconds, threads, cpu.nominal_hz);
            tcp = TcpWindow::between(&first.tcp, &last.tcp);
            host = first.host.as_ref().zip(last.host.as_ref()).map(|(a, b)| HostDelta::between(a, b));
        }
        // With `-n` the test ends when the bytes are delivered, before the planned window.
        let ends_by_bytes = spec.tuning.bytes.is_some();
        if !window_complete && !ends_by_bytes {
            errors.push(ENDED_EARLY.into());
        }
        let complete = (window_complete || ends_by_bytes) && errors.is_empty();
        Self {
            role,
            placement: String::new(),
            path: String::new(),
            queues,
            window_seconds,
            intervals,
            cpu,
            tcp,
            tcp_flows_end: Vec::new(),
            flow_sockets: Vec::new(),
            host,
            udp: None,
            zerocopy: None,
            xdp: None,
            complete,
            errors,
        }
    }

    pub fn bytes(&self) -> u64 {
        self.queues.iter().map(|q| q.bytes).sum()
    }
    pub fn total_bytes(&self) -> u64 {
        self.queues.iter().map(|q| q.total_bytes).sum()
    }
    pub fn bits_per_second(&self) -> f64 {
        rate(self.bytes(), self.window_seconds)
    }

    /// The test was stopped before its planned end (`reason`: who stopped it): says how far
    /// it got instead of blaming the flows.
    pub fn stopped_early(&mut self, spec: &TestSpec, reason: &str) {
        self.errors.retain(|e| e != ENDED_EARLY);
        self.errors.push(format!(
            "interrupted at {:.1} s of {:.1} s ({reason})",
            self.window_seconds,
            spec.time_ms as f64 / 1e3
        ));
        self.complete = false;
    }

    pub fn set_zerocopy(&mut self, requested: &str, used: bool, reason: String, counts: &ZeroCopyCounts) {
        self.zerocopy = Some(ZeroCopyFigures {
            requested: requested.into(),
            used,
            reason,
            sends: counts.sends,
            notifications: counts.notifications,
            copied: counts.copied,
        });
    }
}

fn cpu_figures(
    first: &Sample,
    last: &Sample,
    window: f64,
    threads: &[(ThreadPlan, i32)],
    nominal_hz: Option<f64>,
) -> CpuFigures {
    let tick = clock_ticks();
    let window = window.max(1e-9);
    let threads = threads
        .iter()
        .filter_map(|(plan, tid)| {
            let a = first.cpu.threads.iter().find(|t| t.0 == *tid)?;
            let b = last.cpu.threads.iter().find(|t| t.0 == *tid)?;
            let user = b.1.saturating_sub(a.1) as f64 / tick;
            let system = b.2.saturating_sub(a.2) as f64 / tick;
            Some(ThreadCpu {
                cpu: plan.cpu,
                queues: plan.queues.clone(),
                user_seconds: user,
                system_seconds: system,
                utilization: (user + system) / window,
            })
        })
        .collect();
    let host: Vec<HostCpu> = last
        .cpu
        .host
        .iter()
        .filter_map(|b| {
            let a = first.cpu.host.iter().find(|h| h.cpu == b.cpu)?;
            let secs = b.busy.saturating_sub(a.busy) as f64 / tick;
            let softirq = b.softirq.saturating_sub(a.softirq) as f64 / tick;
            Some(HostCpu { cpu: b.cpu, busy_seconds: secs, softirq_seconds: softirq, utilization: secs / window })
        })
        .collect();
    let host_busy_seconds = host.iter().map(|h| h.busy_seconds).sum();
    CpuFigures { threads, host, host_busy_seconds, nominal_hz }
}

/// A queue thread, tagged with its side ("sender" or "receiver").
pub type SideThread = (&'static str, ThreadCpu);
/// A host CPU, tagged with the side whose queue threads ran on it.
pub type SideHostCpu = (&'static str, HostCpu);

/// The CPU figures the verdict looks at, from the sending and the receiving side: every queue
/// thread, and of the host's CPUs only those a side's queue threads ran on.
pub fn cpu_evidence(sender: Option<&SideReport>, receiver: Option<&SideReport>) -> (Vec<SideThread>, Vec<SideHostCpu>) {
    let mut threads = Vec::new();
    let mut host = Vec::new();
    for (name, side) in [("sender", sender), ("receiver", receiver)] {
        let Some(side) = side else { continue };
        threads.extend(side.cpu.threads.iter().map(|t| (name, t.clone())));
        let own = |h: &&HostCpu| side.cpu.threads.iter().any(|t| t.cpu == h.cpu);
        host.extend(side.cpu.host.iter().filter(own).map(|h| (name, h.clone())));
    }
    (threads, host)
}

fn rate(bytes: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        bytes as f64 * 8.0 / seconds
    } else {
        0.0
    }
}

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
pub const STREAM_SCHEMA_VERSION: u32 = 1;

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

/// Both sides of a stream test, as the sender prints it.
#[derive(Debug, Clone)]
pub struct StreamReport {
    pub spec: TestSpec,
    pub target: String,
    pub sender: SideReport,
    /// `None` when the receiver's report never arrived.
    pub receiver: Option<SideReport>,
    /// Why the test is incomplete, when it is.
    pub error: Option<String>,
    /// What the sender found out about the path (limits, interface counters).
    pub path: PathFacts,
    /// `--bidir`: the test of the other direction (the far side sending to this one).
    pub reverse: Option<Box<StreamReport>>,
    /// Set when a signal at either end stopped the test early.
    pub interrupted: Option<Interruption>,
}

/// Facts about the network path gathered by the sender around the window.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PathFacts {
    /// Interface the kernel routes the target through.
    pub egress_interface: Option<String>,
    /// Rate limits found on the path: egress qdisc, link speed, cloud egress cap.
    pub limits: Vec<PathLimit>,
    /// Packets dropped on the egress interface (rx+tx) during the window.
    pub interface_drops: u64,
    /// Packets dropped by softnet backlogs during the window.
    pub softnet_drops: u64,
}

impl PathFacts {
    pub fn drops(&self) -> u64 {
        self.interface_drops + self.softnet_drops
    }
}

impl StreamReport {
    /// Records that the test was stopped early (`reason`, when it was): the error says how
    /// far it got, in the receiver's window when there is one.
    pub fn mark_interrupted(&mut self, reason: Option<String>) {
        let Some(reason) = reason else { return };
        let at = self.receiver.as_ref().map_or(self.sender.window_seconds, |r| r.window_seconds);
        let of = self.spec.time_ms as f64 / 1e3;
        self.error = Some(format!("interrupted at {at:.1} s of {of:.1} s ({reason})"));
        self.interrupted = Some(Interruption { at_seconds: at, of_seconds: of, reason });
    }

    pub fn complete(&self) -> bool {
        self.error.is_none()
            && self.sender.complete
            && self.receiver.as_ref().is_some_and(|r| r.complete)
            && self.reverse.as_ref().is_none_or(|r| r.complete())
    }

    /// Names the busiest queue thread when one is saturated; otherwise says nothing stands out.
    pub fn verdict(&self) -> Verdict {
        diagnose(&self.evidence())
    }

    /// The figures the verdict rules look at.
    pub fn evidence(&self) -> Evidence {
        let incomplete = self
            .error
            .clone()
            .or_else(|| self.receiver.as_ref().and_then(|r| r.errors.first().cloned()))
            .or_else(|| self.sender.errors.first().cloned());
        let (threads, host) = cpu_evidence(Some(&self.sender), self.receiver.as_ref());
        Evidence {
            incomplete,
            received_bps: self.receiver.as_ref().map_or(0.0, |r| r.bits_per_second()),
            configured_rate_bps: self.spec.rate_bps,
            path_limits: self.path.limits.clone(),
            tcp: self.sender.tcp.clone(),
            drops: self.path.drops(),
            udp_loss: self.receiver.as_ref().and_then(|r| {
                let u = r.udp.as_ref()?;
                let rcvbuf = r.host.as_ref().and_then(|h| h.snmp).map_or(0, |s| s.udp_rcvbuf_errors);
                Some((u.lost, u.expected, rcvbuf))
            }),
            threads,
            host,
        }
    }

    /// Receiver-side host CPU-seconds per GB of received payload in the window.
    pub fn receiver_cpu_seconds_per_gb(&self) -> Option<f64> {
        let r = self.receiver.as_ref()?;
        (r.bytes() > 0).then(|| r.cpu.host_busy_seconds / (r.bytes() as f64 / 1e9))
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

    /// Window lines, totals, CPU, path, TCP, zero-copy, errors and the verdict.
    fn render_summary(&self) -> String {
        let mut out = String::new();
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
        let mut shown: Vec<&String> = Vec::new();
        for err in
            self.error.iter().chain(&self.sender.errors).chain(recv.map(|r| r.errors.as_slice()).unwrap_or_default())
        {
            if !shown.contains(&err) {
                let _ = writeln!(out, "error: {err}");
                shown.push(err);
            }
        }
        let v = self.verdict();
        let _ = writeln!(out, "verdict: {} ({})", v.bottleneck, v.evidence);
        if let Some(rev) = &self.reverse {
            let _ = writeln!(out, "\n--- reverse direction (the far side sending to this one) ---");
            out.push_str(&rev.render_text());
        }
        out
    }
}
