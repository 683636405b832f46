//! `uringbench recv`: one port, test after test, several senders at once, within limits.
//!
//! Every connection is classified by its first four bytes (control session or data flow)
//! on a thread of its own, so a silent or garbage-sending peer costs one thread for a few
//! seconds and never blocks anyone else. A sender can never make the receiver allocate
//! without bound: queues, flows, duration, message length and concurrent sessions are capped
//! by [`ServerLimits`], and a refused test gets the reason.

use crate::base::error::{Error, Result};
use crate::base::spec::{Direction, Proto, TestSpec, Workload};
use crate::report::stream::SideReport;
use crate::runtime::placement::{plan, resolve_cpus, BusyPoll, Placement};
use crate::session::control::{self, ControlMsg, SessionCookie, DATA_HELLO_LEN, PROTOCOL_VERSION};
use crate::sys::probe::KernelCaps;
use crate::sys::settings::{self, Journal, ReceiverVariants, SharedJournal};
use std::collections::HashMap;
use std::io::Read;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// What a remote sender may ask of this receiver.
#[derive(Debug, Clone)]
pub struct ServerLimits {
    pub max_queues: u32,
    pub max_flows: u32,
    /// Warm-up + window + cool-down, in milliseconds.
    pub max_total_ms: u64,
    pub max_len: u32,
    pub max_depth: u32,
    /// Tests served at the same time, from everyone.
    pub max_sessions: usize,
    /// Tests served at the same time to one source address.
    pub max_sessions_per_source: usize,
    /// Memory one test may make this receiver allocate ([`TestRunner::memory`]).
    pub max_memory: u64,
    /// Highest offered rate a test may ask for, in bits/s (`recv --max-rate`); a reverse
    /// test asking for no limit sends at this rate. None: no limit below [`RATE_CEILING`].
    pub max_rate_bps: Option<u64>,
    /// Busy-polling threads are never started for a remote peer's test (`recv --no-spin`).
    pub no_spin: bool,
}

impl Default for ServerLimits {
    fn default() -> Self {
        Self {
            max_queues: 256,
            max_flows: 1024,
            max_total_ms: 600_000,
            max_len: 16 << 20,
            max_depth: 64,
            max_sessions: 4,
            max_sessions_per_source: 2,
            max_memory: 1 << 30,
            max_rate_bps: None,
            no_spin: false,
        }
    }
}

/// Shortest interval a test may ask for: each interval is a message to the sender and a
/// sample per flow, so 1 ms intervals turn a test into a memory and bandwidth sink.
pub const MIN_INTERVAL_MS: u64 = 10;
/// No test asks for more than 10 Tbit/s; a larger rate is a crafted hello (and would wrap
/// the pacing arithmetic).
pub const RATE_CEILING: u64 = 10_000_000_000_000;

impl ServerLimits {
    /// Checks a requested test against the limits; `Err` holds the reason sent to the peer.
    /// `memory` is what the test would allocate here ([`TestRunner::memory`]). Every sum and
    /// product of peer-supplied numbers is checked: a wrapped product must not pass as small.
    pub fn check(&self, spec: &TestSpec, memory: u64) -> std::result::Result<(), String> {
        if spec.workload.latency_bound() {
            crate::transport::rr::check_spec(spec).map_err(|e| e.message)?;
        } else if spec.proto == Proto::Udp
            && (spec.len < crate::wire::udp_payload::HEADER_LEN as u32 || spec.len > 65507)
        {
            return Err(format!(
                "UDP datagram length {} outside {}..65507",
                spec.len,
                crate::wire::udp_payload::HEADER_LEN
            ));
        }
        if spec.queues == 0 || spec.queues > self.max_queues {
            return Err(format!("{} queues requested, this receiver allows 1 to {}", spec.queues, self.max_queues));
        }
        let per_direction = spec.queues.checked_mul(spec.flows_per_queue);
        let both = if spec.direction == Direction::Bidir {
            per_direction.and_then(|f| f.checked_mul(2))
        } else {
            per_direction
        };
        match both {
            Some(flows) if spec.flows_per_queue > 0 && flows <= self.max_flows => {}
            Some(flows) => {
                return Err(format!("{flows} flows requested, this receiver allows 1 to {}", self.max_flows))
            }
            None => {
                return Err(format!(
                    "{} queues x {} flows per queue overflows; this receiver allows at most {} flows",
                    spec.queues, spec.flows_per_queue, self.max_flows
                ))
            }
        }
        if let Some(c) = &spec.tuning.congestion {
            crate::sys::sockopt::check_congestion(c)?;
        }
        if spec.tuning.mss.is_some_and(|m| !(88..=65535).contains(&m)) {
            return Err(format!("MSS {} outside 88..65535", spec.tuning.mss.unwrap_or(0)));
        }
        if spec.tuning.window.is_some_and(|w| w > 1 << 31) {
            return Err("socket buffer above 2 GiB requested".into());
        }
        let total = spec.warmup_ms.checked_add(spec.time_ms).and_then(|t| t.checked_add(spec.cooldown_ms));
        match total {
            Some(t) if spec.time_ms > 0 && t <= self.max_total_ms => {}
            _ => {
                let asked = spec.warmup_ms as f64 + spec.time_ms as f64 + spec.cooldown_ms as f64;
                return Err(format!(
                    "test of {:.1} s requested (warm-up + time + cool-down), this receiver allows up to {:.0} s (recv --max-time)",
                    asked / 1e3,
                    self.max_total_ms as f64 / 1e3
                ));
            }
        }
        if spec.interval_ms != 0 && spec.interval_ms < MIN_INTERVAL_MS {
            return Err(format!("interval of {} ms requested, the shortest is {MIN_INTERVAL_MS} ms", spec.interval_ms));
        }
        if spec.timeout_ms > self.max_total_ms {
            return Err(format!("timeout of {} ms is longer than the longest test", spec.timeout_ms));
        }
        if spec.len == 0 || spec.len > self.max_len {
            return Err(format!("message length {} bytes outside 1..{}", spec.len, self.max_len));
        }
        if spec.depth == 0 || spec.depth > self.max_depth {
            return Err(format!("send depth {} outside 1..{}", spec.depth, self.max_depth));
        }
        let ceiling = self.max_rate_bps.unwrap_or(RATE_CEILING).min(RATE_CEILING);
        for (what, rate) in [("rate", Some(spec.rate_bps)), ("fq pacing rate", spec.tuning.fq_rate_bps)] {
            if let Some(r) = rate.filter(|&r| r > ceiling) {
                return Err(format!(
                    "{what} of {} requested, this receiver allows up to {} (recv --max-rate)",
                    crate::base::units::format_bits_per_second(r as f64),
                    crate::base::units::format_bits_per_second(ceiling as f64)
                ));
            }
        }
        // With --max-rate, the sender's own flows must be paced below it; the receiver paces
        // a reverse test itself (see `cap`).
        if self.max_rate_bps.is_some()
            && spec.rate_bps == 0
            && spec.workload == Workload::Stream
            && spec.direction != Direction::Reverse
        {
            return Err(format!(
                "unlimited rate requested, this receiver allows up to {} (recv --max-rate): pass -b",
                crate::base::units::format_bits_per_second(ceiling as f64)
            ));
        }
        if memory > self.max_memory {
            return Err(format!(
                "test needs {} MiB of memory here (buffers, socket buffers, samples), limit {} MiB",
                memory >> 20,
                self.max_memory >> 20
            ));
        }
        Ok(())
    }

    /// What the receiver changes in an admitted test: with `--max-rate`, a reverse stream
    /// asking for no limit sends at the limit.
    pub fn cap(&self, spec: &mut TestSpec) {
        if let Some(max) = self.max_rate_bps {
            if spec.rate_bps == 0 && spec.workload == Workload::Stream && spec.direction == Direction::Reverse {
                spec.rate_bps = max;
            }
        }
    }
}

/// How `recv` runs.
#[derive(Debug, Clone)]
pub struct ReceiverConfig {
    pub bind: IpAddr,
    /// SO_BINDTODEVICE on the listener (`--bind-dev`): accepted flows stay on that device.
    pub device: Option<String>,
    pub port: u16,
    pub cpus: Option<Vec<usize>>,
    pub busy_poll: BusyPoll,
    /// Exit after the first test.
    pub once: bool,
    pub limits: ServerLimits,
    /// `--variants FILE`: receiver-side settings a sender may ask for by name, applied for
    /// that test only.
    pub variants: Option<Arc<ReceiverVariants>>,
}

/// What the receiver tells its operator, as it happens.
#[derive(Debug, Clone)]
pub enum ServerEvent {
    Listening {
        addr: SocketAddr,
    },
    SessionStarted {
        id: u64,
        peer: SocketAddr,
        spec: TestSpec,
        placement: String,
    },
    SessionEnded {
        id: u64,
        peer: SocketAddr,
        workload: crate::base::spec::Workload,
        report: Box<SideReport>,
    },
    SessionFailed {
        id: u64,
        peer: SocketAddr,
        error: String,
    },
    Refused {
        peer: SocketAddr,
        reason: String,
    },
    /// A signal arrived: no new tests; the running ones end now, each with its report.
    Stopping {
        signal: &'static str,
        running: usize,
    },
    Dropped {
        peer: SocketAddr,
        reason: String,
    },
    /// A receiver variant's settings were applied for the next test.
    VariantApplied {
        name: String,
        applied: Vec<String>,
    },
    /// A receiver variant's settings could not all be reverted (they stay in its state file).
    VariantFailed {
        name: String,
        error: String,
    },
}

pub type EventSink = Arc<dyn Fn(ServerEvent) + Send + Sync>;

struct Shared {
    cfg: ReceiverConfig,
    runner: Arc<dyn TestRunner>,
    caps: KernelCaps,
    cpus: Vec<usize>,
    events: EventSink,
    pending: Pending,
    active: AtomicUsize,
    next_id: AtomicU64,
    /// With `--once`: set when the first test has ended, with its outcome.
    once_done: AtomicBool,
    once_ok: AtomicBool,
    /// Connection threads alive (classifying, or running a control session).
    classifying: AtomicUsize,
    /// A test runs under a receiver variant: no other test may share the host with it.
    variant_active: AtomicBool,
}

const CLASSIFY_TIMEOUT: Duration = Duration::from_secs(5);
/// How long `recv` waits, after a signal, for its running tests to report.
const STOP_GRACE: Duration = Duration::from_secs(30);
const FLOWS_TIMEOUT: Duration = Duration::from_secs(10);

/// Binds the port; fails with a clear message when it is taken.
pub fn bind(cfg: &ReceiverConfig) -> Result<TcpListener> {
    let addr = SocketAddr::new(cfg.bind, cfg.port);
    let listen = || -> std::io::Result<TcpListener> {
        use socket2::{Domain, Socket, Type};
        let socket = Socket::new(Domain::for_address(addr), Type::STREAM.cloexec(), None)?;
        socket.set_reuse_address(true)?;
        if addr.is_ipv6() {
            // "::" serves IPv4 peers too (as v4-mapped addresses), as std's listener does.
            let _ = socket.set_only_v6(false);
        }
        if let Some(dev) = &cfg.device {
            socket.bind_device(Some(dev.as_bytes()))?;
        }
        socket.bind(&addr.into())?;
        socket.listen(1024)?;
        Ok(socket.into())
    };
    listen().map_err(|e| match e.kind() {
        _ if e.raw_os_error() == Some(libc::ENODEV) => {
            Error::usage(format!("--bind-dev {}: no such device", cfg.device.as_deref().unwrap_or("")))
        }
        std::io::ErrorKind::AddrInUse => Error::usage(format!(
            "port {} is already in use on {}: stop the other listener or pick another --port",
            cfg.port, cfg.bind
        )),
        std::io::ErrorKind::AddrNotAvailable => {
            Error::usage(format!("cannot bind {addr}: no local interface has that address"))
        }
        _ => Error::io(format!("binding {addr}"), e),
    })
}

/// Serves tests until killed, or until the first test ends with `--once`. Returns whether
/// that test completed (always true without `--once`).
pub fn serve(
    cfg: ReceiverConfig,
    runner: Arc<dyn TestRunner>,
    listener: TcpListener,
    events: EventSink,
) -> Result<bool> {
    let caps = KernelCaps::detect()?;
    caps.require_tcp_stream()?;
    let mut cpus = resolve_cpus(cfg.cpus.as_deref())?;
    if cfg.cpus.is_none() {
        // Without --cpus, take CPUs from the top while senders take them from the bottom, so
        // a sender and receiver on one host (loopback, namespaces) do not pile onto CPU 0.
        cpus.reverse();
    }
    let addr = listener.local_addr().map_err(|e| Error::io("reading the bound address", e))?;
    (events)(ServerEvent::Listening { addr });
    let shared = Arc::new(Shared {
        cfg,
        runner,
        caps,
        cpus,
        events,
        pending: Mutex::new(HashMap::new()),
        active: AtomicUsize::new(0),
        next_id: AtomicU64::new(1),
        once_done: AtomicBool::new(false),
        once_ok: AtomicBool::new(false),
        classifying: AtomicUsize::new(0),
        variant_active: AtomicBool::new(false),
    });
    loop {
        if shared.once_done.load(Ordering::Acquire) {
            return Ok(shared.once_ok.load(Ordering::Acquire));
        }
        if let Some(signal) = crate::sys::interrupt::signal_name() {
            drop(listener);
            let running = shared.active.load(Ordering::Acquire);
            (shared.events)(ServerEvent::Stopping { signal, running });
            // Each running test sees the signal in its sampler, stops its flows, tells its
            // sender and returns its report; the bound covers a sender that never answers.
            let deadline = Instant::now() + STOP_GRACE;
            while shared.active.load(Ordering::Acquire) > 0 && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            return Ok(true);
        }
        if !wait_readable(&listener, 200) {
            continue;
        }
        let (stream, peer) = match listener.accept() {
            Ok(x) => x,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE)) => {
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
            Err(e) => return Err(Error::io("accepting a connection", e)),
        };
        // Each new connection is classified on a thread of its own (at most a few seconds);
        // a flood of connections must not turn into a flood of threads.
        if shared.classifying.fetch_add(1, Ordering::AcqRel) >= MAX_CLASSIFYING {
            shared.classifying.fetch_sub(1, Ordering::AcqRel);
            (shared.events)(ServerEvent::Dropped {
                peer,
                reason: format!("{MAX_CLASSIFYING} connections already waiting to be classified"),
            });
            continue;
        }
        let conn_shared = Arc::clone(&shared);
        let spawned = std::thread::Builder::new().name("ub-conn".into()).spawn(move || {
            handle_connection(&conn_shared, stream, peer);
            conn_shared.classifying.fetch_sub(1, Ordering::AcqRel);
        });
        if let Err(e) = spawned {
            shared.classifying.fetch_sub(1, Ordering::AcqRel);
            (shared.events)(ServerEvent::Dropped { peer, reason: format!("no thread for the connection: {e}") });
        }
    }
}

/// Connections classified at once: enough for the largest test (1024 flows each way) arriving
/// together, far below what would exhaust the process.
const MAX_CLASSIFYING: usize = 2304;

fn wait_readable(listener: &TcpListener, timeout_ms: i32) -> bool {
    let mut pfd = libc::pollfd { fd: listener.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd for the duration of the call.
    unsafe { libc::poll(&mut pfd, 1, timeout_ms) > 0 }
}

fn handle_connection(shared: &Shared, mut stream: TcpStream, peer: SocketAddr) {
    let mut magic = [0u8; 4];
    let _ = stream.set_read_timeout(Some(CLASSIFY_TIMEOUT));
    if let Err(e) = control::read_exact(&mut stream, &mut magic, CLASSIFY_TIMEOUT) {
        (shared.events)(ServerEvent::Dropped { peer, reason: format!("no greeting: {e}") });
        return;
    }
    match magic {
        control::DATA_MAGIC => {
            let mut rest = [0u8; DATA_HELLO_LEN - 4];
            if stream.read_exact(&mut rest).is_err() {
                (shared.events)(ServerEvent::Dropped { peer, reason: "truncated data greeting".into() });
                return;
            }
            let (cookie, flow) = control::parse_data_hello(&rest);
            let tx = shared.pending.lock().unwrap_or_else(|p| p.into_inner()).get(&cookie).cloned();
            match tx {
                Some(tx) => {
                    let _ = stream.set_read_timeout(None);
                    let _ = tx.send((flow, stream));
                }
                None => {
                    (shared.events)(ServerEvent::Dropped { peer, reason: "data flow for an unknown session".into() })
                }
            }
        }
        control::CONTROL_MAGIC => run_session(shared, stream, peer),
        other => (shared.events)(ServerEvent::Dropped {
            peer,
            reason: format!(
                "not a uringbench peer (greeting {:02x}{:02x}{:02x}{:02x})",
                other[0], other[1], other[2], other[3]
            ),
        }),
    }
}

fn refuse(shared: &Shared, stream: &mut TcpStream, peer: SocketAddr, reason: String) {
    let _ = control::write_msg(stream, &ControlMsg::Refuse { reason: reason.clone() });
    (shared.events)(ServerEvent::Refused { peer, reason });
}

/// Decrements the active-session count however the session ends.
struct ActiveGuard<'a>(&'a AtomicUsize);
impl Drop for ActiveGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

fn run_session(shared: &Shared, mut ctl: TcpStream, peer: SocketAddr) {
    let (spec, udp_ports) = match control::read_msg(&mut ctl, CLASSIFY_TIMEOUT) {
        Ok(ControlMsg::Hello { version, spec, udp_ports }) if version == PROTOCOL_VERSION => (spec, udp_ports),
        Ok(ControlMsg::Hello { version, .. }) => {
            return refuse(
                shared,
                &mut ctl,
                peer,
                format!("protocol version {version}, this receiver speaks {PROTOCOL_VERSION}"),
            )
        }
        Ok(other) => {
            return (shared.events)(ServerEvent::Dropped { peer, reason: format!("expected hello, got {other:?}") });
        }
        Err(e) => return (shared.events)(ServerEvent::Dropped { peer, reason: e.message }),
    };
    if shared.cfg.once && shared.once_done.load(Ordering::Acquire) {
        return refuse(shared, &mut ctl, peer, "receiver is finishing (--once)".into());
    }
    let running = shared.active.fetch_add(1, Ordering::AcqRel);
    let _guard = ActiveGuard(&shared.active);
    let max_sessions = if shared.cfg.once { 1 } else { shared.cfg.limits.max_sessions };
    if running >= max_sessions {
        return refuse(
            shared,
            &mut ctl,
            peer,
            format!("receiver busy: {running} tests running (limit {max_sessions})"),
        );
    }
    // With --engine xdp, a forward UDP test's program takes every UDP datagram to the port:
    // another test that receives UDP here (forward or bidir) must not overlap with it.
    let udp_in = spec.proto == Proto::Udp && spec.direction != Direction::Reverse;
    if shared.runner.udp_alone() && udp_in && running > 0 {
        return refuse(
            shared,
            &mut ctl,
            peer,
            format!("receiver busy: with --engine xdp, UDP tests run one at a time ({running} other tests running)"),
        );
    }
    // The test before may still be reverting its variant (or ending) when a sender starts the
    // next one at once: wait a little for the host rather than refuse.
    if !wait_for_host(shared, spec.variant.is_some()) {
        let reason = if spec.variant.is_some() {
            "receiver busy: a receiver variant needs the host to itself, and other tests are running"
        } else {
            "receiver busy: a test runs under a receiver variant"
        };
        return refuse(shared, &mut ctl, peer, reason.into());
    }
    // The variant's settings stay applied until this guard drops at the end of the session.
    let _variant = match spec.variant.as_deref() {
        None => None,
        Some(name) => match apply_variant(shared, name) {
            Ok(guard) => Some(guard),
            Err(reason) => return refuse(shared, &mut ctl, peer, reason),
        },
    };
    let threads = (spec.queues as usize).min(shared.cpus.len());
    if spec.proto == Proto::Udp && udp_ports.len() != spec.data_connections() as usize {
        let reason =
            format!("UDP test announces {} source ports for {} flows", udp_ports.len(), spec.data_connections());
        return refuse(shared, &mut ctl, peer, reason);
    }
    if let Err(reason) = shared.cfg.limits.check(&spec, shared.runner.memory(&spec, threads)) {
        return refuse(shared, &mut ctl, peer, reason);
    }
    let placement = match plan(
        spec.queues,
        &shared.cpus,
        shared.cfg.busy_poll,
        running > 0 || spec.direction == crate::base::spec::Direction::Bidir,
        spec.workload.latency_bound(),
    ) {
        Ok(p) => p,
        Err(e) => return refuse(shared, &mut ctl, peer, e.message),
    };
    let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
    let mut test = Test {
        ctl: &mut ctl,
        spec: &spec,
        udp_ports: &udp_ports,
        placement: &placement,
        caps: &shared.caps,
        shared,
        id,
    };
    let outcome = shared.runner.run(&mut test);
    match outcome {
        Ok((received, sent)) => {
            let ok = received.as_ref().is_none_or(|r| r.complete) && sent.as_ref().is_none_or(|r| r.complete);
            let msg =
                ControlMsg::Result { report: received.clone().map(Box::new), reverse: sent.clone().map(Box::new) };
            let delivered = control::write_msg(&ctl, &msg);
            for report in received.into_iter().chain(sent) {
                (shared.events)(ServerEvent::SessionEnded {
                    id,
                    peer,
                    workload: spec.workload,
                    report: Box::new(report),
                });
            }
            if let Err(e) = delivered {
                (shared.events)(ServerEvent::SessionFailed {
                    id,
                    peer,
                    error: format!("could not return the report: {e}"),
                });
            }
            shared.once_ok.store(ok, Ordering::Release);
        }
        Err(e) => {
            let _ = control::write_msg(&ctl, &ControlMsg::Abort { reason: e.message.clone() });
            (shared.events)(ServerEvent::SessionFailed { id, peer, error: e.message });
        }
    }
    if shared.cfg.once {
        shared.once_done.store(true, Ordering::Release);
    }
}

/// Receiver-side settings applied for one test; reverted when dropped.
struct VariantGuard<'a> {
    journal: SharedJournal,
    active: &'a AtomicBool,
    name: String,
    events: EventSink,
}

impl Drop for VariantGuard<'_> {
    fn drop(&mut self) {
        let outcome = self.journal.lock().unwrap_or_else(|p| p.into_inner()).revert();
        if let Err(e) = outcome {
            (self.events)(ServerEvent::VariantFailed { name: self.name.clone(), error: e.message });
        }
        self.active.store(false, Ordering::Release);
    }
}

/// How long a new test waits for a variant's revert, or for the tests a variant must not
/// share the host with, to end.
const VARIANT_WAIT: Duration = Duration::from_secs(10);

/// Waits (bounded) until no variant is applied and, with `alone`, this is the only test.
fn wait_for_host(shared: &Shared, alone: bool) -> bool {
    let deadline = Instant::now() + VARIANT_WAIT;
    loop {
        let free =
            !shared.variant_active.load(Ordering::Acquire) && (!alone || shared.active.load(Ordering::Acquire) <= 1);
        if free || Instant::now() > deadline {
            return free;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Applies receiver variant `name` from `--variants`, or says why not (the refusal's reason).
fn apply_variant<'a>(shared: &'a Shared, name: &str) -> std::result::Result<VariantGuard<'a>, String> {
    let Some(variants) = shared.cfg.variants.as_ref() else {
        return Err(format!("receiver variant '{name}' asked for, but this receiver has no --variants file"));
    };
    let changes = variants.get(name)?;
    let others = shared.active.load(Ordering::Acquire).saturating_sub(1);
    if others > 0 || shared.variant_active.swap(true, Ordering::AcqRel) {
        return Err(format!("receiver busy: variant '{name}' needs the host to itself ({others} other tests running)"));
    }
    let state = settings::default_state(&format!("recv-variant-{}", shared.cfg.port));
    let journal = match Journal::create(&state, &format!("uringbench recv variant {name}")) {
        Ok(j) => settings::register(j),
        Err(e) => {
            shared.variant_active.store(false, Ordering::Release);
            return Err(e.message);
        }
    };
    let guard = VariantGuard {
        journal,
        active: &shared.variant_active,
        name: name.to_owned(),
        events: Arc::clone(&shared.events),
    };
    let mut applied = Vec::new();
    for change in changes {
        let outcome = guard.journal.lock().unwrap_or_else(|p| p.into_inner()).apply(change);
        match outcome {
            Ok(Some(what)) => applied.push(what),
            Ok(None) => applied.push(format!("{} (already so)", change.describe())),
            // Dropping the guard reverts what was applied so far.
            Err(e) => return Err(format!("receiver variant '{name}' could not be applied: {}", e.message)),
        }
    }
    (shared.events)(ServerEvent::VariantApplied { name: name.to_owned(), applied });
    Ok(guard)
}

/// The memory a test of `spec` takes on this receiver, and how it runs once accepted: the
/// workload layer's code, handed in by the caller, so the accept loop and the limits live
/// below the workloads they admit.
pub trait TestRunner: Send + Sync {
    /// Bytes a test of `spec` on `threads` receiving threads allocates here (buffer rings,
    /// socket buffers, samples); checked against [`ServerLimits::max_memory`].
    fn memory(&self, spec: &TestSpec, threads: usize) -> u64;
    /// Whether a UDP test that receives here must have the host's UDP port to itself (the
    /// XDP engine takes every datagram to the port).
    fn udp_alone(&self) -> bool;
    /// Runs an accepted test: sets up its flows, tells the sender (through [`Test::accept`] or
    /// [`Test::accept_flows`]) and returns what this side received and sent.
    fn run(&self, test: &mut Test<'_>) -> Result<Reports>;
}

/// What the receiver received (forward flows) and sent (reverse flows) in one test.
pub type Reports = (Option<SideReport>, Option<SideReport>);

/// One test the receiver admitted, as the per-test code sees it.
pub struct Test<'a> {
    pub ctl: &'a mut TcpStream,
    pub spec: &'a TestSpec,
    pub udp_ports: &'a [u16],
    pub placement: &'a Placement,
    pub caps: &'a KernelCaps,
    shared: &'a Shared,
    id: u64,
}

impl Test<'_> {
    /// Tells the sender the test is accepted (crr: with the port of the test's own listener)
    /// and the operator that it started; for tests without TCP data flows to the port.
    pub fn accept(&mut self, data_port: Option<u16>) -> Result<()> {
        let accept = ControlMsg::Accept {
            cookie: [0; 16],
            placement: self.placement.summary.clone(),
            data_port,
            variant: self.spec.variant.clone(),
        };
        control::write_msg(self.ctl, &accept)?;
        self.announce();
        Ok(())
    }

    /// Accepts a test whose TCP data flows connect to the port: hands the sender a cookie,
    /// and returns the flows, in flow order, once all of them arrived.
    pub fn accept_flows(&mut self) -> Result<Vec<(u32, TcpStream)>> {
        let shared = self.shared;
        let cookie = control::new_cookie();
        let (tx, rx) = mpsc::channel();
        shared.pending.lock().unwrap_or_else(|p| p.into_inner()).insert(cookie, tx);
        // However this ends, the cookie admits no more flows.
        let _unregister = Unregister(&shared.pending, cookie);
        control::write_msg(
            self.ctl,
            &ControlMsg::Accept {
                cookie,
                placement: self.placement.summary.clone(),
                data_port: None,
                variant: self.spec.variant.clone(),
            },
        )?;
        self.announce();
        let wanted = self.spec.data_connections() as usize;
        let mut slots: Vec<Option<TcpStream>> = (0..wanted).map(|_| None).collect();
        let mut got = 0;
        let deadline = Instant::now() + FLOWS_TIMEOUT;
        while got < wanted {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok((flow, stream)) if (flow as usize) < wanted && slots[flow as usize].is_none() => {
                    slots[flow as usize] = Some(stream);
                    got += 1;
                }
                Ok((flow, _)) => {
                    return Err(Error::protocol(format!("data flow index {flow} is out of range or repeated")));
                }
                Err(_) => {
                    return Err(Error::peer(format!(
                        "only {got} of {wanted} data connections arrived within {} s",
                        FLOWS_TIMEOUT.as_secs()
                    )));
                }
            }
        }
        Ok(slots.into_iter().enumerate().filter_map(|(i, s)| s.map(|s| (i as u32, s))).collect())
    }

    fn announce(&self) {
        (self.shared.events)(ServerEvent::SessionStarted {
            id: self.id,
            peer: self.ctl.peer_addr().unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0))),
            spec: self.spec.clone(),
            placement: self.placement.summary.clone(),
        });
    }
}

type Pending = Mutex<HashMap<SessionCookie, mpsc::Sender<(u32, TcpStream)>>>;

/// Removes a session's cookie from the pending flows when dropped.
struct Unregister<'a>(&'a Pending, SessionCookie);
impl Drop for Unregister<'_> {
    fn drop(&mut self) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_refuse_what_a_peer_must_not_demand() {
        let limits = ServerLimits::default();
        let ok = TestSpec::default();
        assert!(limits.check(&ok, 1 << 20).is_ok());
        let cases = [
            (TestSpec { queues: 100_000, ..ok.clone() }, "queues"),
            (TestSpec { queues: 0, ..ok.clone() }, "queues"),
            (TestSpec { flows_per_queue: 50_000, ..ok.clone() }, "flows"),
            (TestSpec { time_ms: 1_000_000_000, ..ok.clone() }, "allows up to"),
            (TestSpec { len: u32::MAX, ..ok.clone() }, "message length"),
            (TestSpec { depth: 10_000, ..ok.clone() }, "depth"),
            (TestSpec { proto: Proto::Udp, len: 10, ..ok.clone() }, "UDP datagram length"),
            (TestSpec { proto: Proto::Udp, len: 70_000, ..ok.clone() }, "UDP datagram length"),
            (
                TestSpec {
                    tuning: crate::base::spec::Tuning { congestion: Some("no-such-cc".into()), ..Default::default() },
                    ..ok.clone()
                },
                "tcp_available_congestion_control",
            ),
        ];
        for (spec, expect) in cases {
            let reason = limits.check(&spec, 1 << 20).expect_err(expect);
            assert!(reason.contains(expect), "reason '{reason}' should mention '{expect}'");
        }
        let small = ServerLimits { max_memory: 1 << 20, ..ServerLimits::default() };
        assert!(small.check(&ok, 4 << 20).unwrap_err().contains("MiB"), "memory cap enforced");
    }

    #[test]
    fn crafted_specs_are_refused_with_their_reason() {
        let limits = ServerLimits { max_total_ms: 30_000, ..ServerLimits::default() };
        let ok = TestSpec { time_ms: 5_000, ..TestSpec::default() };
        assert!(limits.check(&ok, 1 << 20).is_ok());
        let cases = [
            (TestSpec { queues: 256, flows_per_queue: 1 << 24, ..ok.clone() }, "overflows"),
            (
                TestSpec { queues: 4, flows_per_queue: u32::MAX / 2, direction: Direction::Bidir, ..ok.clone() },
                "overflows",
            ),
            (TestSpec { warmup_ms: u64::MAX - 1000, ..ok.clone() }, "--max-time"),
            (TestSpec { cooldown_ms: u64::MAX, time_ms: u64::MAX, ..ok.clone() }, "--max-time"),
            (TestSpec { interval_ms: 1, ..ok.clone() }, "shortest is 10 ms"),
            (TestSpec { rate_bps: u64::MAX, ..ok.clone() }, "--max-rate"),
            (TestSpec { timeout_ms: u64::MAX, ..ok.clone() }, "timeout"),
        ];
        for (spec, expect) in cases {
            let reason = limits.check(&spec, 1 << 20).expect_err(expect);
            assert!(reason.contains(expect), "reason '{reason}' should mention '{expect}'");
        }
        let capped = ServerLimits { max_rate_bps: Some(1_000_000_000), ..limits.clone() };
        assert!(capped.check(&ok, 0).unwrap_err().contains("pass -b"), "unlimited forward refused");
        let mut reverse = TestSpec { direction: Direction::Reverse, ..ok.clone() };
        capped.cap(&mut reverse);
        assert_eq!(reverse.rate_bps, 1_000_000_000, "a reverse sender is capped");
        assert!(capped.check(&reverse, 0).is_ok());
    }

    proptest::proptest! {
        /// Whatever a peer puts in a spec, what passes the check is within the limits by
        /// exact arithmetic (u128): no sum or product wrapped on the way.
        #[test]
        fn the_limit_check_never_wraps(
            queues in proptest::prelude::any::<u32>(),
            per_queue in proptest::prelude::any::<u32>(),
            warmup in proptest::prelude::any::<u64>(),
            time in proptest::prelude::any::<u64>(),
            cooldown in proptest::prelude::any::<u64>(),
            interval in proptest::prelude::any::<u64>(),
            rate in proptest::prelude::any::<u64>(),
            bidir in proptest::prelude::any::<bool>(),
            small in proptest::prelude::any::<bool>(),
        ) {
            let limits = ServerLimits::default();
            // Half the cases near the limits, where a wrap would hide.
            let pick = |big: u64, near: u64| if small { near } else { big };
            let spec = TestSpec {
                queues: pick(u64::from(queues), u64::from(queues % 300)) as u32,
                flows_per_queue: pick(u64::from(per_queue), u64::from(per_queue % 2000)) as u32,
                warmup_ms: pick(warmup, warmup % 700_000),
                time_ms: pick(time, time % 700_000),
                cooldown_ms: pick(cooldown, cooldown % 700_000),
                interval_ms: pick(interval, interval % 20),
                rate_bps: rate,
                direction: if bidir { Direction::Bidir } else { Direction::Forward },
                ..TestSpec::default()
            };
            if limits.check(&spec, 0).is_ok() {
                let flows = u128::from(spec.queues) * u128::from(spec.flows_per_queue) * if bidir { 2 } else { 1 };
                proptest::prop_assert!(flows >= 1 && flows <= u128::from(limits.max_flows));
                let total = u128::from(spec.warmup_ms) + u128::from(spec.time_ms) + u128::from(spec.cooldown_ms);
                proptest::prop_assert!(total <= u128::from(limits.max_total_ms));
                proptest::prop_assert!(spec.interval_ms == 0 || spec.interval_ms >= MIN_INTERVAL_MS);
                proptest::prop_assert!(spec.rate_bps <= RATE_CEILING);
                proptest::prop_assert_eq!(u128::from(spec.flows()) * if bidir { 2 } else { 1 }, flows);
            }
        }
    }
}
