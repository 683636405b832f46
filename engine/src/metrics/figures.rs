//! What a test measured, on each side: the figure types (docs/output.md).
//!
//! Each side builds a [`SideReport`] from its own samples; the receiver's travels back over
//! the control channel, and the sender combines both into a [`StreamReport`]. How they are
//! shown (text, JSON) is report/stream.rs; what limited the run, analysis/verdict.rs, from the
//! [`Evidence`] gathered here.

use crate::base::spec::TestSpec;
use crate::metrics::seq::SeqStats;
use crate::sys::hostinfo::HostDelta;
use crate::sys::netpath::PathLimit;
use crate::sys::tcpinfo::{TcpInfo, TcpWindow};
use serde::{Deserialize, Serialize};

pub use crate::base::SCHEMA_VERSION;

/// A side's error when its flows ended before its window did.
pub(crate) const ENDED_EARLY: &str = "the flows ended before the measured window did";

/// A test stopped before its planned end, by a signal at either end.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Interruption {
    /// How much of the measured window had run (the receiver's figure when it reported).
    pub at_seconds: f64,
    /// The planned window.
    pub of_seconds: f64,
    /// Which signal, on which end.
    pub reason: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Sender,
    Receiver,
}

impl Role {
    /// The role's name as the report says it: "sender", "receiver".
    pub fn name(self) -> &'static str {
        match self {
            Role::Sender => "sender",
            Role::Receiver => "receiver",
        }
    }
}

/// Which of the two hosts of a test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Host {
    /// The host that ran `send` and prints the report.
    This,
    /// The host at the other end (`recv`, or another tool's server).
    Far,
}

/// Who played which part in one direction of a test's data: the data sender and the data
/// receiver, each this host or the far host. Decided once from the test's direction where
/// the report is put together (`session/sender.rs`, `compat/`), and carried to every output,
/// so that each figure can say whose it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Roles {
    /// The host that sent this direction's data.
    pub data_sender: Host,
    /// The host that received it.
    pub data_receiver: Host,
    /// The far host's address, as this host connected to it.
    pub far_host: String,
}

impl Roles {
    /// This host sends the data to `far_host` (a forward test, `--bidir`'s forward half).
    pub fn outbound(far_host: impl Into<String>) -> Self {
        Self { data_sender: Host::This, data_receiver: Host::Far, far_host: far_host.into() }
    }

    /// `far_host` sends the data to this host (`-R`, `--bidir`'s reverse half).
    pub fn inbound(far_host: impl Into<String>) -> Self {
        Self { data_sender: Host::Far, data_receiver: Host::This, far_host: far_host.into() }
    }

    /// The roles of a test of `direction` against `far_host`; under `--bidir`, of its forward
    /// half (its reverse half's are [`Self::reversed`]).
    pub fn of(direction: crate::base::spec::Direction, far_host: impl Into<String>) -> Self {
        match direction {
            crate::base::spec::Direction::Reverse => Self::inbound(far_host),
            _ => Self::outbound(far_host),
        }
    }

    /// The same hosts with the data flowing the other way.
    pub fn reversed(&self) -> Self {
        Self { data_sender: self.data_receiver, data_receiver: self.data_sender, far_host: self.far_host.clone() }
    }

    /// The host that played `role`.
    pub fn host(&self, role: Role) -> Host {
        match role {
            Role::Sender => self.data_sender,
            Role::Receiver => self.data_receiver,
        }
    }

    /// `host` in words: "this host", "far host 10.0.0.2".
    pub fn host_name(&self, host: Host) -> String {
        match host {
            Host::This => "this host".to_string(),
            Host::Far => format!("far host {}", self.far_host),
        }
    }

    /// The role with its host, as a report line is labelled: "sender (this host)".
    pub fn label(&self, role: Role) -> String {
        format!("{} ({})", role.name(), self.host_name(self.host(role)))
    }
}

/// A side's interface without carrier (its operstate not up) inside the measured window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CarrierLoss {
    pub iface: String,
    /// When it went down, seconds from the window's start.
    pub at_seconds: f64,
    /// How long it stayed down (to the window's end when it never came back in it).
    pub seconds: f64,
}

/// One NIC receive queue of a test.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NicQueueRow {
    pub rx_queue: u32,
    pub napi_id: Option<u32>,
    pub irq: Option<u32>,
    /// The CPU the queue's IRQ is delivered to.
    pub irq_cpu: Option<usize>,
    /// The CPUs of the threads that served its flows.
    pub thread_cpus: Vec<usize>,
    /// The NIC's NUMA node.
    pub numa_node: Option<u32>,
    /// The flows that arrived on it (by their socket's NAPI id).
    pub flows: Vec<u32>,
    /// Their payload bytes over the whole test.
    pub bytes: u64,
    /// Receive completions of the threads that served it, and how many of them the threads
    /// found by polling their ring rather than after sleeping in the kernel until an
    /// interrupt's wake-up: `polled_completions ÷ thread_completions` is the busy-poll share.
    #[serde(default)]
    pub thread_completions: u64,
    #[serde(default)]
    pub polled_completions: u64,
}

impl NicQueueRow {
    /// The share of its threads' completions found by polling, when they had any.
    pub fn busy_poll_share(&self) -> Option<f64> {
        (self.thread_completions > 0).then(|| self.polled_completions as f64 / self.thread_completions as f64)
    }
}

/// The receive queues of a receiver's test: one row per queue served or used, and the
/// misalignments found ("flows 3 and 7 share rx queue 2").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NicQueueTable {
    pub iface: String,
    /// `--placement` in force: irq, irq-sibling, numa.
    pub placement: String,
    /// One line: how many flows landed on how many of the served queues.
    pub summary: String,
    pub rows: Vec<NicQueueRow>,
    pub findings: Vec<String>,
}

/// One queue's bytes.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
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
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct IntervalFigures {
    /// Seconds since the window started.
    pub start: f64,
    pub end: f64,
    pub bytes: Vec<u64>,
    /// TCP figures of all flows over the interval.
    pub tcp: TcpWindow,
    /// TCP_INFO of each flow at the interval's end, in flow order.
    pub tcp_flows: Vec<Option<TcpInfo>>,
    /// Segments each flow retransmitted in the interval (its TCP_INFO total_retrans at the
    /// interval's two ends), in flow order; empty where not read (a peer before this field).
    #[serde(default)]
    pub tcp_retransmits: Vec<u32>,
    /// UDP receiver: datagram accounting over the interval, all flows (jitter as of its end).
    pub udp: Option<SeqStats>,
    /// The side's CPU over the interval (absent from a peer before this field).
    #[serde(default)]
    pub cpu: Option<IntervalCpu>,
}

/// One side's CPU over one interval, from the CPU clocks its sampler already reads at each
/// interval's end (no reading of its own).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct IntervalCpu {
    /// Each host CPU's busy share of the interval (user+nice+system+irq+softirq+steal from
    /// /proc/stat ÷ the interval; 1 = busy throughout), and the softirq part of it.
    pub host: Vec<CpuShare>,
    /// The side's queue threads' user + system time (their /proc task stat) ÷ the interval:
    /// CPUs' worth, 1 = one CPU throughout.
    pub threads: f64,
}

/// One host CPU's share of an interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CpuShare {
    pub cpu: usize,
    pub utilization: f64,
    pub softirq: f64,
}

impl IntervalCpu {
    /// The host's busy CPUs' worth over the interval: the sum of `host[].utilization`.
    pub fn host_busy(&self) -> f64 {
        self.host.iter().map(|h| h.utilization).sum()
    }
}

impl IntervalFigures {
    /// A test's interval: one queue that moved `bytes` over the second from `start`, nothing
    /// else measured.
    #[cfg(test)]
    pub(crate) fn of_bytes(start: f64, bytes: u64) -> Self {
        IntervalFigures {
            start,
            end: start + 1.0,
            bytes: vec![bytes],
            tcp: Default::default(),
            tcp_flows: Vec::new(),
            tcp_retransmits: Vec::new(),
            udp: None,
            cpu: None,
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
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ThreadCpu {
    pub cpu: usize,
    pub queues: Vec<u32>,
    pub user_seconds: f64,
    pub system_seconds: f64,
    /// (user + system) ÷ window.
    pub utilization: f64,
}

/// One host CPU's busy time inside the window (user+nice+system+irq+softirq+steal).
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HostCpu {
    pub cpu: usize,
    pub busy_seconds: f64,
    /// The softirq part of `busy_seconds`.
    pub softirq_seconds: f64,
    pub utilization: f64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
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
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
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
    /// Receiver: the same accounting over the measured window only, the span of the headline
    /// (absent from a sender, and from a peer before this field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<UdpWindow>,
}

/// A UDP receiver's datagram accounting over the measured window: the differences of its
/// flows' sequence accounting between the window's first and last sample.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct UdpWindow {
    /// Distinct datagrams received in the window.
    pub datagrams: u64,
    /// Datagrams found missing in the window (late arrivals that fill an earlier gap are
    /// not taken back: only the whole run's count is exact).
    pub lost: u64,
    /// How far the highest sequence number advanced in the window.
    pub expected: u64,
}

impl UdpWindow {
    /// Lost datagrams as a share of expected ones (0 when nothing was expected).
    pub fn loss_ratio(&self) -> f64 {
        if self.expected == 0 {
            0.0
        } else {
            self.lost as f64 / self.expected as f64
        }
    }
}

impl UdpFigures {
    /// A receiver's figures from its flows' sequence accounting: counts summed, jitter the
    /// mean of the flows' estimates; `window`, the accounting over the measured window.
    pub fn received(flows: &[&SeqStats], window: Option<SeqStats>) -> Self {
        let stats = SeqStats::sum(flows.iter().copied());
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
            window: window.map(|w| UdpWindow { datagrams: w.received, lost: w.lost, expected: w.expected }),
        }
    }
}

/// Zero-copy truth for one side: requested, used, and what the kernel reported.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
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
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SideReport {
    pub role: Role,
    /// Threads, CPUs and wait mode, in one line.
    pub placement: String,
    /// The data path used (opcodes, buffer ring shape), in one line: `data_path` said in words,
    /// with the transports' notes.
    pub path: String,
    /// The data path as facts (absent from a peer before this field).
    #[serde(default)]
    pub data_path: Option<crate::metrics::data_path::DataPath>,
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
    /// Receiver on a NIC with queues: which flows landed on which receive queue, and where
    /// each queue's IRQ and thread ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nic_queues: Option<NicQueueTable>,
    /// MPTCP flows (`-m`): each connection's subflows as the kernel reports them at the end
    /// (absent for TCP, and from a peer before this field).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mptcp: Vec<crate::sys::mptcp::MptcpConnection>,
    /// The side's interface without carrier inside the window, as its sampler saw it (absent
    /// when it never went down, and from a peer before this field).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub carrier_lost: Vec<CarrierLoss>,
    /// `send --start-at`: this host's wall clock (Unix ns) when the data began: the sender's
    /// as it released the data, the receiver's as the sender's `start` arrived. Absent
    /// without --start-at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_began_unix_ns: Option<u64>,
    /// Whether the whole window was measured and every flow ended cleanly.
    pub complete: bool,
    pub errors: Vec<String>,
}

impl SideReport {
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
    pub(crate) fn stopped_early(&mut self, spec: &TestSpec, reason: &str) {
        self.errors.retain(|e| e != ENDED_EARLY);
        self.errors.push(format!(
            "interrupted at {:.1} s of {:.1} s ({reason})",
            self.window_seconds,
            spec.time_ms as f64 / 1e3
        ));
        self.complete = false;
    }
}

/// A queue thread, tagged with its side ("sender" or "receiver").
pub(crate) type SideThread = (&'static str, ThreadCpu);
/// A host CPU, tagged with the side whose queue threads ran on it.
pub(crate) type SideHostCpu = (&'static str, HostCpu);

/// The CPU figures the verdict looks at, from the sending and the receiving side: every queue
/// thread, and of the host's CPUs only those a side's queue threads ran on.
pub(crate) fn cpu_evidence(
    sender: Option<&SideReport>,
    receiver: Option<&SideReport>,
) -> (Vec<SideThread>, Vec<SideHostCpu>) {
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

/// Bits per second of `bytes` over `seconds` (0 for an empty window).
pub(crate) fn rate(bytes: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        bytes as f64 * 8.0 / seconds
    } else {
        0.0
    }
}

/// Both sides of a stream test, as the sender prints it.
#[derive(Debug, Clone)]
pub struct StreamReport {
    pub spec: TestSpec,
    pub target: String,
    /// Which host sent this direction's data and which received it.
    pub roles: Roles,
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
    /// `--latency`: the probe's round trips, idle and under this load.
    pub latency: Option<crate::metrics::latency::WorkingLatency>,
}

/// Facts about the network path gathered by the sender around the window.
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
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
    pub(crate) fn mark_interrupted(&mut self, reason: Option<String>) {
        let Some(reason) = reason else { return };
        let at = self.receiver.as_ref().map_or(self.sender.window_seconds, |r| r.window_seconds);
        let of = self.spec.time_ms as f64 / 1e3;
        self.error = Some(format!("interrupted at {at:.1} s of {of:.1} s ({reason})"));
        self.interrupted = Some(Interruption { at_seconds: at, of_seconds: of, reason });
    }

    /// The first problem of the test, as one line: its own error, else the first of a side's.
    pub fn first_error(&self) -> Option<String> {
        self.error
            .clone()
            .or_else(|| self.sender.errors.first().cloned())
            .or_else(|| self.receiver.as_ref().and_then(|r| r.errors.first().cloned()))
    }

    pub fn complete(&self) -> bool {
        self.error.is_none()
            && self.sender.complete
            && self.receiver.as_ref().is_some_and(|r| r.complete)
            && self.reverse.as_ref().is_none_or(|r| r.complete())
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
            carrier_lost: [(Role::Sender, Some(&self.sender)), (Role::Receiver, self.receiver.as_ref())]
                .into_iter()
                .filter_map(|(role, side)| Some((self.roles.host_name(self.roles.host(role)), side?)))
                .flat_map(|(host, side)| side.carrier_lost.iter().map(move |c| (host.clone(), c.clone())))
                .collect(),
            silences: self.receiver.as_ref().map_or_else(Vec::new, |r| silences(&r.intervals)),
        }
    }

    /// Receiver-side host CPU-seconds per GB of received payload in the window.
    pub(crate) fn receiver_cpu_seconds_per_gb(&self) -> Option<f64> {
        let r = self.receiver.as_ref()?;
        (r.bytes() > 0).then(|| r.cpu.host_busy_seconds / (r.bytes() as f64 / 1e9))
    }
}

/// Everything the rules look at, gathered from both sides of a run.
#[derive(Debug, Clone, Default)]
pub struct Evidence {
    pub incomplete: Option<String>,
    pub received_bps: f64,
    pub configured_rate_bps: u64,
    /// Limits in the order they are checked: qdisc, link speed, cloud cap.
    pub path_limits: Vec<PathLimit>,
    /// Sender-side TCP over the window.
    pub tcp: TcpWindow,
    /// Drops counted by the interfaces and softnet backlogs on the path during the window.
    pub drops: u64,
    /// UDP: (lost, expected) datagrams over the test, and the receiver's socket-buffer drops
    /// (UDP RcvbufErrors) in its window.
    pub udp_loss: Option<(u64, u64, u64)>,
    /// Queue threads of each side ("sender"/"receiver").
    pub threads: Vec<SideThread>,
    /// Host CPUs of each side.
    pub host: Vec<SideHostCpu>,
    /// Either side's interface without carrier inside the window: the host (in words) and when.
    pub carrier_lost: Vec<(String, CarrierLoss)>,
    /// Stretches of the window in which the receiver counted no data: (from, seconds), from
    /// its consecutive zero-byte intervals.
    pub silences: Vec<(f64, f64)>,
}

/// The stretches of `intervals` that carried no bytes, consecutive ones joined: (from, seconds).
/// None in a window that moved nothing at all: that is the run's failure, not an outage in it.
pub(crate) fn silences(intervals: &[IntervalFigures]) -> Vec<(f64, f64)> {
    if intervals.iter().all(|i| i.sum() == 0) {
        return Vec::new();
    }
    let mut out: Vec<(f64, f64)> = Vec::new();
    let mut open: Option<(f64, f64)> = None;
    for i in intervals {
        match (i.sum() == 0, open.as_mut()) {
            (true, Some((_, end))) => *end = i.end,
            (true, None) => open = Some((i.start, i.end)),
            (false, _) => out.extend(open.take().map(|(a, b)| (a, b - a))),
        }
    }
    out.extend(open.map(|(a, b)| (a, b - a)));
    out
}
