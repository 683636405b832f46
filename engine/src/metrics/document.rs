//! The result documents: what `-J` writes and what every reader of saved results (`report`,
//! `compare`, the fleet report) reads back, as one set of types. Writers build these values and
//! serialize them; readers deserialize them; nobody reaches into a document by string keys or
//! JSON pointers. docs/output.md says what each key means; docs/schema/ holds the JSON Schema
//! generated from these types (a test fails when the two drift apart).
//!
//! Every document starts with the same envelope: `kind` (what it holds), `schema_version`
//! ([`SCHEMA_VERSION`], one constant for all kinds) and `tool` (name and version). Documents
//! written before `kind` existed load as the kind their shape says (a stream document).

use crate::base::spec::{Direction, TestSpec};
use crate::metrics::data_path::DataPath;
use crate::metrics::figures::{CpuFigures, Interruption, IntervalCpu, PathFacts, ZeroCopyFigures};
use crate::metrics::latency::WorkingLatency;
use crate::metrics::summary::RunsSummary;
use crate::metrics::transactions::{LatencySummary, RrFailures};
use crate::metrics::verdict::Verdict;
use crate::metrics::xdp::XdpFigures;
use crate::sys::hostinfo::HostDelta;
use crate::sys::mptcp::MptcpConnection;
use crate::sys::sockopt::FlowSocket;
use crate::sys::tcpinfo::{TcpInfo, TcpWindow};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use crate::metrics::figures::SCHEMA_VERSION;

/// What a document holds: the `kind` key of every document.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// One stream test (`send`), TCP, UDP or AF_XDP, any direction.
    Stream,
    /// One request/response test (`rr`).
    Rr,
    /// One connect/request/response test (`crr`).
    Crr,
    /// One HTTP load run (`http`).
    Http,
    /// `send --repeat N`: the runs and statistics over them.
    Repeat,
    /// `sweep`: runs over a swept parameter.
    Sweep,
    /// `search`: the highest rate within a loss limit.
    Search,
    /// `experiment`: interleaved runs of settings variants and their comparison.
    Experiment,
    /// `compare`: saved runs compared.
    Compare,
    /// `report --fleet`: a fleet run merged.
    Fleet,
    /// `doctor`: host readiness checks.
    Doctor,
}

impl Kind {
    fn stream() -> Self {
        Kind::Stream
    }

    /// The `kind` key's value.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Stream => "stream",
            Kind::Rr => "rr",
            Kind::Crr => "crr",
            Kind::Http => "http",
            Kind::Repeat => "repeat",
            Kind::Sweep => "sweep",
            Kind::Search => "search",
            Kind::Experiment => "experiment",
            Kind::Compare => "compare",
            Kind::Fleet => "fleet",
            Kind::Doctor => "doctor",
        }
    }
}

/// Reads a document that must say it is of `kind` and of this build's schema version: the
/// envelope is checked first, so a wrong file is named as such instead of as a missing key.
pub fn read_document<T: serde::de::DeserializeOwned>(doc: &serde_json::Value, kind: Kind) -> Result<T, String> {
    let envelope = Envelope::deserialize(doc).map_err(|e| format!("not a {} document: {e}", kind.name()))?;
    if envelope.kind != Some(kind) {
        return Err(format!("not a {0} document (no \"kind\": \"{0}\")", kind.name()));
    }
    if envelope.schema_version != Some(u64::from(SCHEMA_VERSION)) {
        let version = envelope.schema_version.map_or("missing".into(), |v| v.to_string());
        return Err(format!("{} document schema_version {version} is not supported", kind.name()));
    }
    T::deserialize(doc).map_err(|e| format!("malformed {} document: {e}", kind.name()))
}

/// The program that wrote a document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Tool {
    pub name: String,
    pub version: String,
}

impl Tool {
    /// This build.
    pub fn this() -> Self {
        Self { name: "uringbench".into(), version: env!("CARGO_PKG_VERSION").into() }
    }
}

/// One value per side of a stream test.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct BySide<T> {
    pub sender: T,
    pub receiver: T,
}

/// A stream test (`send -J`): `queues[]`, `sum`, `intervals[]`, CPU, TCP, path, host counters,
/// zero-copy and XDP figures, the verdict; `reverse` holds the other direction of `--bidir`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct StreamDocument {
    #[serde(default = "Kind::stream")]
    pub kind: Kind,
    pub schema_version: u32,
    pub tool: Tool,
    /// `-T/--title`, when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The far end's tool when it was not uringbench: `iperf2`, `iperf3` or `ntttcp` (`send
    /// --iperf2`, `--iperf3`, `--ntttcp`; docs/peers.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<String>,
    /// With `peer`, in the documents of `recv --iperf2`, `--iperf3` and `--ntttcp` (where the
    /// other tool sent): its version as its client announced it (absent when it did not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_version: Option<String>,
    /// The receiver's control address as connected.
    pub target: String,
    /// Which host sent this direction's data and which received it: this host (the one that
    /// ran `send`) or the far host (absent from documents before this field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub roles: Option<crate::metrics::figures::Roles>,
    pub test: TestSpec,
    pub complete: bool,
    pub error: Option<String>,
    pub interrupted: Option<Interruption>,
    pub queues: Vec<QueueEntry>,
    pub sum: StreamSum,
    pub intervals: Vec<IntervalEntry>,
    pub cpu: CpuSection,
    pub tcp: TcpSection,
    pub path: PathFacts,
    pub host: BySide<Option<HostDelta>>,
    pub zerocopy: Option<ZeroCopyFigures>,
    pub xdp: BySide<Option<XdpFigures>>,
    pub sender: SideSummary,
    pub receiver: Option<SideSummary>,
    pub verdict: Verdict,
    pub direction: Direction,
    pub reverse: Option<Box<StreamDocument>>,
    /// `-m/--mptcp`: each side's connections and their subflows as the kernel reported them
    /// after the test (absent without `-m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mptcp: Option<MptcpSection>,
    /// `send --latency`: the probe's round trips, idle and under the load; absent without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency: Option<WorkingLatency>,
    /// `send --start-at`: the instant asked for and when each end's data began; absent
    /// without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<SynchronizedStart>,
}

/// `start`: a run started at an instant (`send --start-at`). Each end's time is its own wall
/// clock (CLOCK_REALTIME): the sender's as it released the data, the receiver's as the
/// sender's `start` message arrived (about one one-way delay after). Between two hosts the
/// receiver's time is only as good as the two clocks' agreement (NTP, PTP).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SynchronizedStart {
    /// The instant asked for, RFC 3339 UTC.
    pub at: String,
    pub at_unix_ns: u64,
    /// The sender's clock when its data began.
    pub sender_began_unix_ns: u64,
    /// `sender_began_unix_ns - at_unix_ns`: how late the sender started (negative: early).
    pub sender_late_ns: i64,
    /// The receiver's clock when the data began (absent when its report never came).
    pub receiver_began_unix_ns: Option<u64>,
}

impl SynchronizedStart {
    /// The record of a start at `at` from both ends' stamps (None when the sender has none).
    pub fn of(at: crate::base::start_at::StartAt, sender: Option<u64>, receiver: Option<u64>) -> Option<Self> {
        let began = crate::base::start_at::StartAt(sender?);
        Some(Self {
            at: at.to_string(),
            at_unix_ns: at.0,
            sender_began_unix_ns: began.0,
            sender_late_ns: began.since(at),
            receiver_began_unix_ns: receiver,
        })
    }
}

/// `mptcp`: the MPTCP connections of each side, in flow order (a side's connections that
/// are plain TCP sockets are left out; none at all: the kernel gave no MPTCP_INFO).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct MptcpSection {
    /// The sending side (rr, crr: the client).
    pub sender: Vec<MptcpConnection>,
    /// The receiving side (rr, crr: the server); absent when its report never came.
    pub receiver: Option<Vec<MptcpConnection>>,
}

impl MptcpSection {
    /// Both sides' connections from their reports, for a test run with `-m`.
    pub(crate) fn of(
        mptcp: bool,
        sender: &crate::metrics::figures::SideReport,
        receiver: Option<&crate::metrics::figures::SideReport>,
    ) -> Option<Self> {
        // Nothing read on either side: no section.
        let read = !sender.mptcp.is_empty() || receiver.is_some_and(|r| !r.mptcp.is_empty());
        (mptcp && read).then(|| Self { sender: sender.mptcp.clone(), receiver: receiver.map(|r| r.mptcp.clone()) })
    }
}

/// Bytes one side moved on one queue.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct QueueBytes {
    /// Inside the window.
    pub bytes: u64,
    /// Over the whole test, warm-up and cool-down included.
    pub total_bytes: u64,
    /// Window bytes × 8 ÷ that side's window.
    pub bits_per_second: f64,
}

/// One entry of `queues[]`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct QueueEntry {
    pub id: u32,
    pub flows: u32,
    pub sender: QueueBytes,
    pub receiver: Option<QueueBytes>,
}

/// `sum`: the window over all queues.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct StreamSum {
    /// The receiver's window (the sender's when no receiver report arrived).
    pub window_seconds: f64,
    pub sender: SenderSum,
    pub receiver: Option<ReceiverSum>,
    /// `send --iperf3` with a warm-up (sent as iperf3's omit, `-O`): the far side's
    /// `total_bytes` (here and in `queues[]`) are not the whole test's but what the iperf3
    /// server counted after its own omitted first seconds, this many. Absent: every
    /// `total_bytes` covers the whole test.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_totals_after_omit_s: Option<u64>,
}

/// `sum.sender`: what the sender offered.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct SenderSum {
    pub bytes: u64,
    pub total_bytes: u64,
    pub bits_per_second: f64,
    pub window_seconds: f64,
    /// UDP: datagrams sent over the whole test.
    pub datagrams: Option<u64>,
}

/// `sum.receiver`: what the receiver counted (the headline is its `bits_per_second`).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ReceiverSum {
    pub bytes: u64,
    pub total_bytes: u64,
    pub bits_per_second: f64,
    pub window_seconds: f64,
    /// UDP accounting (absent for TCP).
    #[serde(flatten)]
    pub udp: Option<ReceivedDatagrams>,
}

/// A UDP receiver's accounting over the whole test.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ReceivedDatagrams {
    pub datagrams: u64,
    pub lost: u64,
    pub out_of_order: u64,
    pub duplicates: u64,
    pub jitter_us: f64,
    pub expected: u64,
    pub loss_ratio: f64,
    /// `--one-way-delay`: arrival − send timestamp; null without it.
    pub one_way_delay_us: Option<OneWayDelay>,
    /// The figures above are the whole run's (warm-up, cool-down and the FIN included); these
    /// are the measured window's, the headline's span (absent before this field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<WindowDatagrams>,
}

/// A UDP receiver's datagrams over the measured window.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema)]
pub struct WindowDatagrams {
    pub datagrams: u64,
    pub lost: u64,
    pub expected: u64,
    /// `lost ÷ expected`.
    pub loss_ratio: f64,
}

/// One-way delay over the test, in µs.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema)]
pub struct OneWayDelay {
    pub min: f64,
    pub mean: f64,
    pub max: f64,
}

/// One entry of `intervals[]`: the receiver's figures for the stretch, with the sender's view.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct IntervalEntry {
    pub start: f64,
    pub end: f64,
    pub bytes: u64,
    pub bits_per_second: f64,
    /// Bytes per queue.
    pub queues: Vec<u64>,
    pub sender_bytes: Option<u64>,
    pub tcp: Option<TcpWindow>,
    pub tcp_flows: Option<Vec<Option<TcpInfo>>>,
    /// Segments each flow retransmitted in the interval, in flow order (iperf3's per-stream
    /// `retransmits`; absent from documents before this field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_flow_retransmits: Option<Vec<u32>>,
    pub udp: Option<IntervalDatagrams>,
    /// Each side's CPU over the interval, on that side's host (absent from documents, and far
    /// ends, before this field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<BySide<Option<IntervalCpu>>>,
}

/// A UDP receiver's accounting over one interval (jitter as of its end).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema)]
pub struct IntervalDatagrams {
    pub datagrams: u64,
    pub lost: u64,
    pub out_of_order: u64,
    pub duplicates: u64,
    pub jitter_us: f64,
}

/// `cpu`: both sides' CPU objects and CPU per byte.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct CpuSection {
    pub sender: CpuFigures,
    pub receiver: Option<CpuFigures>,
    pub sender_per_byte: Option<CpuPerByte>,
    pub receiver_per_byte: Option<CpuPerByte>,
}

/// CPU cost per byte a side counted in its window.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema)]
pub struct CpuPerByte {
    pub cpu_seconds_per_gb: f64,
    pub cycles_per_byte: Option<f64>,
}

/// `tcp`: the TCP window objects and each flow's TCP_INFO at the end.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct TcpSection {
    pub sender: TcpWindow,
    pub receiver: Option<TcpWindow>,
    pub sender_flows_end: Vec<Option<FlowEnd>>,
    pub receiver_flows_end: Option<Vec<Option<FlowEnd>>>,
}

/// A flow's TCP_INFO after the test, with its knobs as the kernel reports them.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct FlowEnd {
    #[serde(flatten)]
    pub info: TcpInfo,
    #[serde(flatten)]
    pub socket: FlowSocket,
}

/// `sender`, `receiver`: placement, data path, completeness, errors.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct SideSummary {
    pub placement: String,
    pub path: String,
    /// The data path as facts (`path` says them in words); absent in older documents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_path: Option<DataPath>,
    pub complete: bool,
    pub errors: Vec<String>,
    /// Receiver on a NIC with queues: the per-queue table (absent on veth and loopback).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nic_queues: Option<crate::metrics::figures::NicQueueTable>,
}

/// `send --repeat N -J`: every run's document and statistics over the complete ones.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct RepeatDocument {
    /// `repeat` (documents written before `kind` existed have none).
    #[serde(default = "Kind::repeat")]
    pub kind: Kind,
    pub schema_version: u32,
    #[serde(default = "Tool::this")]
    pub tool: Tool,
    pub repeat: usize,
    pub runs: Vec<StreamDocument>,
    /// Over the complete runs.
    pub summary: RunsSummary,
}

impl Kind {
    fn repeat() -> Self {
        Kind::Repeat
    }
}

/// An rr or crr test (`rr -J`, `crr -J`): transactions, latency percentiles, failures.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct TransactionDocument {
    /// `rr` or `crr` (older documents: from `test.workload`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<Kind>,
    pub schema_version: u32,
    pub tool: Tool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    pub target: String,
    pub test: TestSpec,
    pub complete: bool,
    pub error: Option<String>,
    pub transactions_per_second: f64,
    pub latency_us: LatencySummary,
    pub failures: RrFailures,
    /// One line per non-zero failure cause, with what to do about it.
    pub failure_notes: Vec<String>,
    pub queues: Vec<TransactionQueue>,
    pub sum: TransactionSum,
    pub intervals: Vec<TransactionInterval>,
    pub cpu: ClientServer<CpuFigures>,
    pub client: TransactionSide,
    pub server: Option<TransactionSide>,
    pub verdict: Verdict,
    /// `-m/--mptcp`: `sender` is the client, `receiver` the server (absent without `-m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mptcp: Option<MptcpSection>,
    /// `--trip-times`: the round trips' one-way legs (absent without it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trip_times: Option<crate::metrics::trip_times::TripTimes>,
}

/// Transactions one side counted.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema)]
pub struct Transactions {
    /// Inside the window.
    pub transactions: u64,
    /// Over the whole test.
    pub total_transactions: u64,
}

/// One entry of an rr document's `queues[]`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct TransactionQueue {
    pub id: u32,
    pub flows: u32,
    pub client: Transactions,
    pub server: Option<Transactions>,
}

/// An rr document's `sum`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct TransactionSum {
    pub window_seconds: f64,
    pub client: Transactions,
    pub server: Option<Transactions>,
}

/// One entry of an rr document's `intervals[]` (the client's).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct TransactionInterval {
    pub start: f64,
    pub end: f64,
    pub transactions: u64,
    pub transactions_per_second: f64,
    /// The client's CPU over the interval (absent from documents before this field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<IntervalCpu>,
    /// The round trips that ended in the interval, from buckets within 1/16 of their values
    /// (absent from documents before this field, and from `--json-stream`'s interval event,
    /// which a `latency` event with these figures follows).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub round_trips: Option<crate::metrics::latency::RttFigures>,
}

/// One value for the client and one for the server (absent when its report never came).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ClientServer<T> {
    pub client: T,
    pub server: Option<T>,
}

/// An rr document's `client`, `server`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct TransactionSide {
    pub placement: String,
    pub path: String,
    /// The data path as facts (`path` says them in words); absent in older documents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_path: Option<DataPath>,
    pub errors: Vec<String>,
}

/// The envelope every document starts with: enough to tell what the rest holds.
#[derive(Debug, Clone, Deserialize)]
pub struct Envelope {
    pub kind: Option<Kind>,
    pub schema_version: Option<u64>,
}

/// A saved document of any run kind, as a reader finds it in a file.
#[derive(Debug, Clone)]
pub enum RunDocument {
    Stream(Box<StreamDocument>),
    Transactions(Box<TransactionDocument>),
    Repeat(Box<RepeatDocument>),
}

impl RunDocument {
    /// Reads a document of a run kind: the envelope says which, and documents from before the
    /// envelope are told apart by their shape (`repeat` + `runs`, `transactions_per_second`).
    pub fn from_value(doc: &serde_json::Value) -> Result<Self, String> {
        let envelope = Envelope::deserialize(doc).map_err(|e| e.to_string())?;
        if let Some(v) = envelope.schema_version.filter(|&v| v != u64::from(SCHEMA_VERSION)) {
            return Err(format!("schema_version {v}, this build reads {SCHEMA_VERSION}"));
        }
        let kind = envelope.kind.unwrap_or(if doc.get("repeat").is_some() && doc.get("runs").is_some() {
            Kind::Repeat
        } else if doc.get("transactions_per_second").is_some() {
            Kind::Rr
        } else {
            Kind::Stream
        });
        let typed = |e: serde_json::Error| format!("not a {kind:?} document: {e}");
        Ok(match kind {
            Kind::Stream => RunDocument::Stream(Box::new(StreamDocument::deserialize(doc).map_err(typed)?)),
            Kind::Rr | Kind::Crr => {
                RunDocument::Transactions(Box::new(TransactionDocument::deserialize(doc).map_err(typed)?))
            }
            Kind::Repeat => RunDocument::Repeat(Box::new(RepeatDocument::deserialize(doc).map_err(typed)?)),
            other => return Err(format!("a {other:?} document, not a run")),
        })
    }
}

/// A run that failed before it had a report, as an experiment keeps it:
/// `{"complete": false, "error": "..."}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FailedRun {
    /// Always false.
    pub complete: bool,
    pub error: String,
}

/// One run as a series of runs keeps it (an experiment's variants): the run's document, or
/// why there is none. Told apart by shape: a failed run has only `complete` and `error`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum RunRecord {
    Failed(FailedRun),
    Stream(Box<StreamDocument>),
    Transactions(Box<TransactionDocument>),
}

impl RunRecord {
    /// The record of a run that never produced a report.
    pub fn failed(error: impl Into<String>) -> Self {
        RunRecord::Failed(FailedRun { complete: false, error: error.into() })
    }
}

/// One run of a fleet plan as the Ansible run role records it (`runs/ID.json`, written by
/// deploy/ansible/filter_plugins/fleet.py): the planned run, the `send -J` document when one came
/// back, the exit status and why it failed, and both hosts' facts. Facts are free-form by
/// design: inventory variables the user names become attributes.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct FleetRunRecord {
    /// `fleet-run`.
    #[serde(default)]
    pub kind: String,
    pub id: String,
    #[serde(default)]
    pub entry: String,
    #[serde(default)]
    pub sender: String,
    #[serde(default)]
    pub receiver: String,
    #[serde(default)]
    pub address: String,
    #[serde(default)]
    pub target: Option<String>,
    #[serde(default)]
    pub repeat: Option<u64>,
    /// `send`'s exit status; null when it never ran.
    #[serde(default)]
    pub rc: Option<i64>,
    #[serde(default)]
    pub error: Option<String>,
    /// What `send -J` printed, read as a [`StreamDocument`] by whoever needs its figures (an
    /// unreadable one makes that run failed, not the whole fleet unreadable).
    #[serde(default)]
    pub document: Option<serde_json::Value>,
    #[serde(default)]
    pub sender_facts: serde_json::Map<String, serde_json::Value>,
    #[serde(default)]
    pub receiver_facts: serde_json::Map<String, serde_json::Value>,
}

impl FleetRunRecord {
    /// The run's document, when one came back and reads as a stream document. A run against
    /// another tool (`send --iperf3 -J`, ...: `peer` set) has intervals with the receiver's
    /// columns empty (the far side gives none): it is read without its intervals.
    pub fn stream_document(&self) -> Option<Result<StreamDocument, String>> {
        self.document.as_ref().map(|d| {
            let peer = d.get("peer").is_some_and(|p| !p.is_null());
            let mut d = d.clone();
            if peer {
                d["intervals"] = serde_json::Value::Array(Vec::new());
            }
            StreamDocument::deserialize(d).map_err(|e| e.to_string())
        })
    }
}
