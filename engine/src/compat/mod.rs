//! Other tools' protocols over our loops: iperf2, iperf3 and NTttcp's no-sync mode, each in
//! both roles.
//!
//! What the clients share is here: how a target is resolved and connected (with errors that
//! say what to run on the far host), the live sink that keeps the sender's intervals, and the
//! far side's figures turned into a receiver [`SideReport`]. What the receivers share: their
//! options ([`PeerRecvOptions`]), the limits in force ([`Caps`]) and what they tell
//! ([`PeerEvent`]).

pub mod iperf2;
pub mod iperf3;
pub mod ntttcp;
mod udp;

use crate::base::error::{Error, Result};
use crate::base::spec::{Proto, TestSpec};
use crate::base::stop::StopToken;
use crate::metrics::figures::{IntervalFigures, PathFacts, Role, Roles, SideReport, StreamReport};
use crate::metrics::measure::{QueueCounters, Window};
use crate::runtime::placement::{BusyPoll, Placement};
use crate::runtime::side::Live;
use crate::session::gate::{GateEvent, GateLimits, PAUSE};
use crate::session::live::StartInfo;
use crate::session::progress::NoProgress;
use crate::sys::mptcp::StreamProtocol;
use crate::sys::netpath::PathProbe;
use crate::sys::probe::KernelCaps;
use crate::sys::sockopt;
use crate::transport::tcp::recv::{self as tcp_recv, RecvFlow, RecvWorkerConfig};
use crate::transport::FlowOutcome;
use crate::uring::ring::WaitMode;
use crate::workload::stream::{recv_lowat, zerocopy_for, TcpHalves, RECV_BATCH, RECV_BUF_COUNT, RECV_BUF_SIZE};
use std::io;
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// What `uringbench recv --iperf2` and `recv --iperf3` serve.
#[derive(Debug, Clone)]
pub struct PeerRecvOptions {
    pub bind: IpAddr,
    pub port: u16,
    pub cpus: Option<Vec<usize>>,
    /// `--busy-poll on` spins the flow threads; otherwise they sleep.
    pub busy_poll: BusyPoll,
    /// Return after the first finished test.
    pub once: bool,
    /// Longest any test may last, whatever the client asks.
    pub max_time: Duration,
    /// Most flows (TCP connections and UDP client ports) served at once.
    pub max_flows: u32,
    /// Stopped by the caller to stop serving (`serve` returns `Ok(true)`).
    pub stop: StopToken,
    /// The fast paths the front end probed; the flow threads' rings use their ring part.
    pub fast: crate::uring::fastpath::FastPaths,
    /// What this kernel and process can do, probed once by the front end.
    pub kernel: KernelCaps,
    /// Connections one address may hold while they send their first bytes
    /// (`--max-pending-per-source`; the open-file limit may allow fewer).
    pub max_pending_per_source: u32,
    /// `--max-rate`, in bits/s: what a client may make this receiver send, and ask to send it
    /// (`recv --iperf3` only; the others refuse the option at start).
    pub max_rate_bps: Option<u64>,
    /// A test's data connections may come from another address than its control
    /// connection (a NAT that changes addresses between connections); off by default.
    pub flows_from_any_address: bool,
    /// A test whose flows move nothing for this long ends (`--no-progress-limit`; zero:
    /// never); `recv --ntttcp` ends its connections at `max_time`.
    pub no_progress: Duration,
}

impl PeerRecvOptions {
    /// The limits in force: the options within what the open-file limit allows.
    pub(crate) fn caps(&self) -> Caps {
        let mut caps = Caps::for_limit(crate::session::gate::open_files_limit(), self.max_flows);
        caps.pending_per_source = caps.pending_per_source.min(self.max_pending_per_source.max(1));
        caps
    }
}

/// Connections still sending their first bytes, and flows, one source address may hold.
pub(crate) const PER_SOURCE: u32 = 64;
/// Connections still sending their first bytes, in total.
const MAX_PENDING: u32 = 512;
/// UDP sessions (client ports) served at once, in total: their sources can be spoofed.
const MAX_UDP_SESSIONS: u32 = 64;
/// Descriptors kept for everything but connections and flows (stdio, listeners, /proc reads).
const RESERVED_FDS: u64 = 16;

/// The limits a peer receiver enforces, from the options and the open-file limit: a
/// connection still sending its first bytes holds one descriptor, a flow two (its socket and
/// its ring).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    pub pending: u32,
    pub pending_per_source: u32,
    pub flows: u32,
    pub udp_sessions: u32,
}

impl Caps {
    /// The accept gate's limits from these caps; `what` a pending connection sends, what
    /// such connections are `doing`.
    pub(crate) fn gate_limits(&self, what: &'static str, doing: &'static str) -> GateLimits {
        GateLimits {
            total: self.pending as usize,
            per_source: self.pending_per_source as usize,
            what,
            doing,
            per_source_option: "",
        }
    }

    pub(crate) fn for_limit(open_files: u64, max_flows: u32) -> Self {
        let budget = open_files.saturating_sub(RESERVED_FDS);
        let pending = (budget / 4).clamp(1, u64::from(MAX_PENDING)) as u32;
        let flows = ((budget.saturating_sub(u64::from(pending)) / 2).max(1)).min(u64::from(max_flows.max(1))) as u32;
        Self {
            pending,
            // One address never holds more than half the pending slots.
            pending_per_source: (pending / 2).clamp(1, PER_SOURCE),
            flows,
            udp_sessions: flows.min(MAX_UDP_SESSIONS),
        }
    }
}

/// Where a peer receiver serves, and its limits: TCP connections from `tcp`, UDP datagrams
/// from `udp`, each on `ports` consecutive ports (NTttcp's one port per thread; one for iperf).
#[derive(Debug, Clone)]
pub struct Listening {
    pub tcp: Option<SocketAddr>,
    pub udp: Option<SocketAddr>,
    pub ports: u32,
    pub caps: Caps,
    /// `recv --iperf3` with RSA authentication: the users its file authorizes.
    pub authorized_users: Option<usize>,
}

/// What a peer receiver (`recv --iperf2`, `--iperf3`, `--ntttcp`) tells its operator, as it
/// happens; `T` is its summary of a finished client test. Reasons may quote a peer: escape them.
#[derive(Debug, Clone)]
pub enum PeerEvent<T> {
    /// Serving.
    Listening(Listening),
    /// A client test began (`--json-stream`'s `start`): the test as far as it is known, our
    /// address and the client's, our placement.
    Started(StartInfo),
    /// One interval of a running test's side on this host closed (`recv --iperf3`: our
    /// loops sample the window; the other receivers count each flow to its end only).
    Interval { role: Role, n: usize, figures: IntervalFigures },
    /// A client test (all its flows) ended.
    TestDone(T),
    /// A client asked for something we do not do (or came while we were busy); TCP: the
    /// connection was closed, UDP: its datagrams are ignored.
    Refused { proto: Proto, peer: SocketAddr, reason: String },
    /// A connection or datagram that never became a test (silent, closed early, over a limit).
    Dropped { peer: SocketAddr, reason: String },
    /// Refusals of `peer` (`None`: of addresses not told apart) not logged one by one.
    More { peer: Option<IpAddr>, count: u64, seconds: f64 },
    /// Accepting (TCP) or taking new clients (UDP) waits: out of descriptors or threads.
    Paused { proto: Proto, reason: String },
}

impl<T> PeerEvent<T> {
    /// The accept gate's event as the receiver tells it; `None` for a resume (the next test
    /// line says it worked).
    pub(crate) fn from_gate(event: GateEvent) -> Option<Self> {
        Some(match event {
            GateEvent::Dropped { peer, reason } => PeerEvent::Dropped { peer: shown(peer), reason },
            GateEvent::Paused { what, error, .. } => {
                PeerEvent::Paused { proto: Proto::Tcp, reason: paused(what, &error) }
            }
            GateEvent::Resumed { .. } => return None,
            GateEvent::Suppressed { source, count, seconds } => {
                PeerEvent::More { peer: Some(source).filter(|s| !s.is_unspecified()), count, seconds: seconds as f64 }
            }
        })
    }
}

/// Why taking new clients paused, and that it retries by itself.
pub(crate) fn paused(what: &str, e: &io::Error) -> String {
    let why = match e.raw_os_error() {
        Some(libc::EMFILE) | Some(libc::ENFILE) => "out of file descriptors",
        _ => "out of resources",
    };
    format!("{what} failed ({why}: {e}); trying again every {} ms", PAUSE.as_millis())
}

/// Receives a peer receiver's events; called from several threads.
pub type PeerEventSink<T> = Arc<dyn Fn(PeerEvent<T>) + Send + Sync>;

/// How long a connect to the other tool's server may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// A peer address as users know it: IPv4 clients of a dual-stack socket without `::ffff:`.
fn shown(peer: SocketAddr) -> SocketAddr {
    SocketAddr::new(peer.ip().to_canonical(), peer.port())
}

/// Resolves `host:port` to the first address (of `family`, 4 or 6, when given).
fn resolve(host: &str, port: u16, family: Option<u8>) -> Result<SocketAddr> {
    let mut addrs =
        (host, port).to_socket_addrs().map_err(|e| Error::usage(format!("cannot resolve target '{host}': {e}")))?;
    addrs.find(|a| family.is_none_or(|f| (f == 4) == a.ip().to_canonical().is_ipv4())).ok_or_else(|| {
        Error::usage(format!(
            "target '{host}' has no address{}",
            family.map_or(String::new(), |f| format!(" of IPv{f}"))
        ))
    })
}

/// Connects one TCP connection to the other tool's server; `server` is the command that
/// should be running there (`iperf -s -p 5002`), named when nothing listens.
fn connect_tcp(addr: SocketAddr, local: &sockopt::LocalEnd, server: &str) -> Result<TcpStream> {
    connect_stream(addr, local, StreamProtocol::Tcp, server)
}

/// [`connect_tcp`] with a socket of `protocol` (iperf3's MPTCP data connections).
fn connect_stream(
    addr: SocketAddr,
    local: &sockopt::LocalEnd,
    protocol: StreamProtocol,
    server: &str,
) -> Result<TcpStream> {
    let connected = sockopt::connect_stream(addr, local, protocol, None, CONNECT_TIMEOUT);
    let stream = connected.map_err(|e| match e.raw_os_error() {
        Some(libc::ECONNREFUSED) => {
            Error::peer(format!("nothing listens on {addr} (connection refused): start `{server}` there"))
        }
        Some(libc::EHOSTUNREACH) | Some(libc::ENETUNREACH) => Error::peer(format!("{addr} is unreachable: {e}")),
        _ if matches!(e.kind(), io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock) => Error::peer(format!(
            "{addr} did not answer within {:.0} s (host down or filtered)",
            CONNECT_TIMEOUT.as_secs_f64()
        )),
        _ => Error::peer(format!("cannot connect to {addr}: {e}")),
    })?;
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

/// The stream workload's TCP halves of a client toward `path` (its interface's counters in
/// the window), with the zero-copy choice for that path (none on MPTCP flows, as `send -m`).
fn client_halves<'a>(
    spec: &'a TestSpec,
    placement: &'a Placement,
    caps: &'a KernelCaps,
    path: &PathProbe,
) -> Result<TcpHalves<'a>> {
    let zc = zerocopy_for(spec, caps, path)?;
    Ok(TcpHalves { spec, placement, caps, zc, iface: path.interface().map(str::to_string), queues: None })
}

/// Told each interval of our side as it closes: the role our side plays, the interval's
/// number in that role from 0, its figures.
type IntervalTell = Box<dyn Fn(Role, usize, &IntervalFigures) + Send + Sync>;

/// Our side's intervals, kept by role (and told, when someone listens); a stop of the token,
/// [`Intervals::end`], or (on a receiver) flows that move nothing for the no-progress limit
/// stop the test.
struct Intervals {
    kept: Mutex<Vec<(Role, IntervalFigures)>>,
    stop: StopToken,
    ended: OnceLock<String>,
    idle: Option<NoProgress>,
    tell: Option<IntervalTell>,
}

impl Intervals {
    fn new(stop: &StopToken) -> Self {
        Intervals { kept: Mutex::default(), stop: stop.clone(), ended: OnceLock::new(), idle: None, tell: None }
    }

    /// The same, telling each interval to `tell` as it closes.
    fn telling(self, tell: IntervalTell) -> Self {
        Intervals { tell: Some(tell), ..self }
    }

    /// A receiver's test: it also ends once its flows moved nothing for `opts.no_progress`.
    fn serving(opts: &PeerRecvOptions) -> Self {
        Intervals { idle: Some(NoProgress::new(opts.no_progress)), ..Self::new(&opts.stop) }
    }

    /// Why the test's flows are over the no-progress limit, once they are.
    fn stalled(&self) -> Option<String> {
        self.idle.as_ref().and_then(NoProgress::stalled)
    }

    /// Stops this test only (its far end has gone), for `reason`.
    fn end(&self, reason: String) {
        let _ = self.ended.set(reason);
    }

    /// The intervals of our side playing `role`.
    fn take(&self, role: Role) -> Vec<IntervalFigures> {
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        let (mine, rest) = std::mem::take(&mut *kept).into_iter().partition(|(r, _)| *r == role);
        *kept = rest;
        mine.into_iter().map(|(_, i)| i).collect()
    }
}

impl Live for Intervals {
    fn stopped(&self) -> Option<String> {
        // A serving receiver's stop is this host's as the receiver (its document says so).
        let here = if self.idle.is_some() { "receiver" } else { "sender" };
        self.stop
            .cause()
            .map(|cause| format!("{cause} on the {here}"))
            .or_else(|| self.ended.get().cloned())
            .or_else(|| self.stalled())
    }
    fn interval(&self, role: Role, interval: IntervalFigures) {
        let told = self.tell.as_ref().map(|_| interval.clone());
        let n = {
            let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
            kept.push((role, interval));
            kept.iter().filter(|(r, _)| *r == role).count() - 1
        };
        // Told outside the lock: a slow reader of the output holds up only this call.
        if let (Some(tell), Some(interval)) = (&self.tell, told) {
            tell(role, n, &interval);
        }
    }
    fn progress(&self, role: Role, bytes: u64) {
        if let Some(idle) = &self.idle {
            idle.saw(role, bytes);
        }
    }
    fn abandoned(&self) -> bool {
        self.stalled().is_some()
    }
}

/// The native report of one direction of a test against another tool: its `sender` and
/// `receiver`, one of them ours (the one with a host sample, which gets our intervals), the
/// other the far side's (from that tool's own report); the path facts our probes saw.
fn stream_report(
    spec: TestSpec,
    target: SocketAddr,
    sender: SideReport,
    receiver: Option<SideReport>,
    error: Option<String>,
    path: &PathProbe,
    live: &Intervals,
) -> StreamReport {
    let ours = match &receiver {
        Some(r) if r.host.is_some() && sender.host.is_none() => Role::Receiver,
        _ => Role::Sender,
    };
    stream_report_as(ours, spec, target, sender, receiver, error, path, live)
}

/// [`stream_report`] with our side named: the one playing `ours` (a receiver serving another
/// tool's client knows which it is, whatever its host sample).
#[allow(clippy::too_many_arguments)]
fn stream_report_as(
    ours: Role,
    spec: TestSpec,
    target: SocketAddr,
    mut sender: SideReport,
    mut receiver: Option<SideReport>,
    error: Option<String>,
    path: &PathProbe,
    live: &Intervals,
) -> StreamReport {
    let ours = match receiver.as_mut() {
        Some(r) if ours == Role::Receiver => r,
        _ => &mut sender,
    };
    ours.intervals = live.take(ours.role);
    // The other tool reports no host figures: the data's egress is known only when we send it.
    let roles = match ours.role {
        Role::Sender => Roles::outbound(target.ip().to_string()),
        Role::Receiver => Roles::inbound(target.ip().to_string()),
    };
    let host = ours.host.as_ref();
    let facts = PathFacts {
        egress_interface: (ours.role == Role::Sender).then(|| path.interface().map(str::to_string)).flatten(),
        limits: path.limits.clone(),
        interface_drops: host.and_then(|h| h.interface).map_or(0, |i| i.rx_dropped + i.tx_dropped),
        softnet_drops: host.and_then(|h| h.softnet_total).map_or(0, |s| s.dropped),
    };
    let mut stream = StreamReport {
        spec,
        target: target.to_string(),
        roles,
        sender,
        receiver,
        error,
        path: facts,
        reverse: None,
        interrupted: None,
        latency: None,
    };
    stream.mark_interrupted(live.stopped());
    stream
}

/// A side of the test as another tool reported it: `bytes` per flow (with its queue), over
/// `seconds`; that tool measures its whole test, so every byte is inside the window.
fn far_side(spec: &TestSpec, role: Role, bytes: &[(u32, u64)], seconds: f64, tool: &str) -> SideReport {
    let outcomes: Vec<FlowOutcome> =
        bytes.iter().map(|&(queue, bytes)| FlowOutcome { queue, bytes, error: None }).collect();
    let window = Window { complete: true, ..Window::default() };
    let mut side = SideReport::build(role, spec, &window, &outcomes, &[]);
    for q in &mut side.queues {
        q.bytes = q.total_bytes;
    }
    side.window_seconds = seconds;
    side.placement = format!("{tool} server");
    side
}

/// A test a foreign sender ran against a receiver that counts each flow on its own
/// (`recv --iperf2`, `recv --ntttcp`), as the native report: our side from `bytes` per flow
/// (with its queue) over `seconds` from its first byte to its last, with `errors`; the
/// sender's side empty, as that tool tells its receiver nothing (its own output says what it
/// sent). `local` is our address the sender reached, `peer` the sender.
pub(crate) fn received_report(
    spec: TestSpec,
    (local, peer): (String, IpAddr),
    tool: &str,
    (bytes, seconds): (&[(u32, u64)], f64),
    errors: Vec<String>,
) -> StreamReport {
    let mut receiver = far_side(&spec, Role::Receiver, bytes, seconds, tool);
    receiver.placement = format!("uringbench recv --{tool}: a thread per flow");
    receiver.complete = errors.is_empty();
    receiver.errors = errors;
    let mut sender = far_side(&spec, Role::Sender, &[], 0.0, tool);
    sender.placement = format!("{tool} sender (reports nothing to its receiver)");
    StreamReport {
        spec,
        target: local,
        roles: Roles::inbound(peer.to_string()),
        sender,
        receiver: Some(receiver),
        error: None,
        path: PathFacts::default(),
        reverse: None,
        interrupted: None,
        latency: None,
    }
}

/// Counts one TCP flow's bytes to EOF (or until `halt`) with the io_uring receive loop, on the
/// calling thread: (bytes, errors). `pace` is the test's (rate in bits/s, flows): a paced
/// flow is read at most 1 ms of its data per wake-up, as the stream receiver does.
fn count_to_eof(
    stream: TcpStream,
    opts: &PeerRecvOptions,
    kernel: &KernelCaps,
    pace: (u64, u32),
    halt: Arc<AtomicBool>,
    counters: &QueueCounters,
) -> (u64, Vec<String>) {
    let _ = stream.set_nonblocking(false);
    let spec = TestSpec { rate_bps: pace.0, queues: pace.1.max(1), flows_per_queue: 1, ..TestSpec::default() };
    let cfg = RecvWorkerConfig {
        wait: if opts.busy_poll == BusyPoll::On { WaitMode::Spin } else { WaitMode::Sleep },
        ring: opts.fast.ring(),
        batch: RECV_BATCH,
        buf_count: RECV_BUF_COUNT,
        buf_size: RECV_BUF_SIZE,
        bundle: kernel.recvsend_bundle,
        rcvlowat: recv_lowat(&spec),
        halt,
        skip_copy: false,
    };
    match tcp_recv::run(vec![RecvFlow { stream, queue: 0 }], counters, &cfg) {
        Ok(result) => {
            let bytes = result.flows.iter().map(|f| f.bytes).sum();
            (bytes, result.flows.into_iter().filter_map(|f| f.error).collect())
        }
        Err(e) => (counters.snapshot()[0], vec![e.to_string()]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_follow_the_open_file_limit() {
        let small = Caps::for_limit(64, 256);
        assert_eq!(small, Caps { pending: 12, pending_per_source: 6, flows: 18, udp_sessions: 18 });
        let big = Caps::for_limit(1 << 20, 256);
        assert_eq!(big, Caps { pending: MAX_PENDING, pending_per_source: PER_SOURCE, flows: 256, udp_sessions: 64 });
        assert_eq!(Caps::for_limit(3, 0), Caps { pending: 1, pending_per_source: 1, flows: 1, udp_sessions: 1 });
    }

    fn interval(bytes: u64) -> IntervalFigures {
        IntervalFigures::of_bytes(0.0, bytes)
    }

    #[test]
    fn intervals_are_told_as_they_close_numbered_per_role() {
        let told: Arc<Mutex<Vec<(Role, usize, u64)>>> = Arc::default();
        let into = Arc::clone(&told);
        let live = Intervals::new(&StopToken::new())
            .telling(Box::new(move |role, n, i| into.lock().unwrap().push((role, n, i.bytes[0]))));
        for (role, bytes) in [(Role::Receiver, 10), (Role::Sender, 20), (Role::Receiver, 30)] {
            live.interval(role, interval(bytes));
        }
        let expected = vec![(Role::Receiver, 0, 10), (Role::Sender, 0, 20), (Role::Receiver, 1, 30)];
        assert_eq!(*told.lock().unwrap(), expected);
        // Told and still kept for the report.
        assert_eq!(live.take(Role::Receiver).iter().map(|i| i.bytes[0]).collect::<Vec<_>>(), [10, 30]);
    }

    #[test]
    fn a_received_report_is_ours_on_the_receiving_side() {
        let spec = TestSpec { queues: 2, ..TestSpec::default() };
        let local = ("10.77.0.2:5001".to_string(), IpAddr::from([10, 77, 0, 1]));
        let report = received_report(spec.clone(), local.clone(), "iperf2", (&[(0, 100), (1, 200)], 2.0), Vec::new());
        let receiver = report.receiver.as_ref().expect("our side");
        assert_eq!((receiver.total_bytes(), receiver.bytes(), receiver.window_seconds), (300, 300, 2.0));
        assert_eq!(receiver.queues.iter().map(|q| q.flows).collect::<Vec<_>>(), [1, 1]);
        assert_eq!((report.sender.total_bytes(), report.roles.clone()), (0, Roles::inbound("10.77.0.1")));
        assert!(report.complete(), "{report:?}");
        let failed = received_report(spec, local, "iperf2", (&[(0, 100)], 1.0), vec!["cut".into()]);
        assert!(!failed.complete() && failed.first_error().as_deref() == Some("cut"));
    }
}
