//! `uringbench recv`: one port, test after test, several senders at once, within limits.
//!
//! Every connection's handshake (its greeting, the `--psk-file` exchange, the hello; or a data
//! flow's greeting) runs on one epoll in the accept thread, under a 5 s deadline, a cap per
//! source address and one in all: idle or dripping peers cost a descriptor each, never a
//! thread, and never block anyone else. A hello is checked against [`ServerLimits`] there
//! (queues, flows, duration, interval, rate, memory, sessions in all and per source, with
//! checked arithmetic), so a refusal costs no thread and no socket, and the peer gets the
//! reason. An admitted test runs on a thread of its own, the workload's code handed in as a
//! [`TestRunner`]; its place in the counts is a guard given back however it ends.

use crate::base::error::{Error, Result};
use crate::base::spec::{Direction, Proto, TestSpec, Workload, RATE_CEILING};
use crate::base::stop::StopToken;
use crate::metrics::figures::SideReport;
use crate::runtime::placement::{plan, resolve_cpus, BusyPoll, Placement};
use crate::session::auth::{self, Nonce, Psk, SessionKey};
use crate::session::control::{
    self, ControlMsg, SessionCookie, DATA_HELLO_LEN, MAX_FRAME, MIN_PROTOCOL_VERSION, PROTOCOL_VERSION,
};
use crate::session::logq::{self, LogQueue, RateLimit};
use crate::sys::epoll::Epoll;
use crate::sys::probe::KernelCaps;
use crate::sys::settings::{self, Journal, ReceiverVariants, SharedJournal};
use std::collections::{HashMap, VecDeque};
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

impl ServerLimits {
    /// Checks a requested test against the limits; `Err` holds the reason sent to the peer.
    /// `memory` is what the test would allocate here ([`TestRunner::memory`]). Every sum and
    /// product of peer-supplied numbers is checked: a wrapped product must not pass as small.
    pub fn check(&self, spec: &TestSpec, memory: u64) -> std::result::Result<(), String> {
        // The fields on their own first (both ends check them alike), then this receiver's limits.
        spec.validate().map_err(|e| e.message)?;
        if spec.queues > self.max_queues {
            return Err(format!("{} queues requested, this receiver allows 1 to {}", spec.queues, self.max_queues));
        }
        let flows = spec.flows().saturating_mul(if spec.direction == Direction::Bidir { 2 } else { 1 });
        if flows > self.max_flows {
            return Err(format!("{flows} flows requested, this receiver allows 1 to {}", self.max_flows));
        }
        if let Some(c) = &spec.tuning.congestion {
            crate::sys::sockopt::check_congestion(c)?;
        }
        if spec.total_ms() > self.max_total_ms {
            return Err(format!(
                "test of {:.1} s requested (warm-up + time + cool-down), this receiver allows up to {:.0} s (recv --max-time)",
                spec.total_ms() as f64 / 1e3,
                self.max_total_ms as f64 / 1e3
            ));
        }
        if spec.timeout_ms > self.max_total_ms {
            return Err(format!("timeout of {} ms is longer than the longest test", spec.timeout_ms));
        }
        if spec.len > self.max_len {
            return Err(format!("message length {} bytes outside 1..{}", spec.len, self.max_len));
        }
        if spec.depth > self.max_depth {
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
    /// The fast paths the front end probed (`--sqpoll`, `--napi`, `--zc-rx`).
    pub fast: crate::uring::fastpath::FastPaths,
    /// `--psk-file`: a sender must prove it holds this secret before it may describe a test.
    pub psk: Option<Psk>,
    /// `--allow`: the networks connections are accepted from (empty: all).
    pub allow: Vec<Cidr>,
    /// Connections from one source address in their handshake at once.
    pub max_pending_per_source: usize,
    /// Ends the receiver: no new tests, and the running ones end now with their reports.
    pub stop: StopToken,
}

/// A network in CIDR notation (`10.0.0.0/8`, `2001:db8::/32`, or one address).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    net: IpAddr,
    prefix: u8,
}

impl std::str::FromStr for Cidr {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let (addr, prefix) = s.split_once('/').map_or((s, None), |(a, p)| (a, Some(p)));
        let net: IpAddr = addr.trim().parse().map_err(|_| format!("'{s}' is not an address or CIDR network"))?;
        let max = if net.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => p
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|&p| p <= max)
                .ok_or_else(|| format!("'{s}': prefix length must be 0..{max}"))?,
        };
        Ok(Self { net, prefix })
    }
}

impl Cidr {
    /// Whether `ip` lies in the network (an IPv4 peer seen as v4-mapped IPv6 counts as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        fn bits(ip: IpAddr) -> (u128, u32) {
            match ip {
                IpAddr::V4(a) => (u128::from(u32::from(a)) << 96, 32),
                IpAddr::V6(a) => (u128::from(a), 128),
            }
        }
        let (net, nlen) = bits(self.net.to_canonical());
        let (ip, ilen) = bits(ip.to_canonical());
        if nlen != ilen {
            return false;
        }
        // Both kinds sit at the top of the 128 bits, so the prefix masks from the top.
        let prefix = u32::from(self.prefix);
        let mask = if prefix == 0 { 0 } else { u128::MAX << (128 - prefix) };
        (net & mask) == (ip & mask)
    }
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
    /// The receiver's stop token was stopped (a signal): no new tests; the running ones end
    /// now, each with its report.
    Stopping {
        cause: String,
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
    /// `count` more refusals or drops from `source` in the last `seconds` were not logged.
    Suppressed {
        source: IpAddr,
        count: u64,
        seconds: u64,
    },
    /// Accepting stopped for lack of descriptors, memory or threads; it retries by itself.
    AcceptPaused {
        reason: String,
    },
    AcceptResumed {
        paused: Duration,
    },
    /// The log queue was full: `count` events were not logged.
    LogDropped {
        count: u64,
    },
    /// Without `--psk-file`, the receiver listens on these public addresses.
    Unauthenticated {
        exposed: Vec<IpAddr>,
    },
}

pub(crate) type EventSink = Arc<dyn Fn(ServerEvent) + Send + Sync>;

/// How many tests, and how many seconds of them, one source address runs now.
#[derive(Debug, Default, Clone, Copy)]
struct SourceUse {
    sessions: usize,
    ms: u64,
    /// Data flows its accepted tests still wait for: they may be in their handshake at once
    /// beyond `--max-pending-per-source` (a 1,024-flow test opens them all together).
    flows_awaited: usize,
}

struct Shared {
    cfg: ReceiverConfig,
    runner: Arc<dyn TestRunner>,
    caps: KernelCaps,
    cpus: Vec<usize>,
    /// The log queue's sender: never blocks (session/logq.rs).
    events: EventSink,
    /// Repeated refusals and drops, per source address.
    limit_log: RateLimit,
    pending: Pending,
    active: AtomicUsize,
    /// Running tests per source address.
    sources: Mutex<HashMap<IpAddr, SourceUse>>,
    next_id: AtomicU64,
    /// With `--once`: set when the first test has ended, with its outcome.
    once_done: AtomicBool,
    once_ok: AtomicBool,
    /// A test runs under a receiver variant: no other test may share the host with it.
    variant_active: AtomicBool,
}

impl Shared {
    fn flows_awaited(&self, ip: IpAddr) -> usize {
        self.sources.lock().unwrap_or_else(|p| p.into_inner()).get(&ip).map_or(0, |u| u.flows_awaited)
    }

    /// Logs a refusal or a dropped connection, a few per source address per window.
    fn refused(&self, event: ServerEvent) {
        let source = match &event {
            ServerEvent::Refused { peer, .. } | ServerEvent::Dropped { peer, .. } => peer.ip().to_canonical(),
            _ => return (self.events)(event),
        };
        if self.limit_log.allow(source, Instant::now()) {
            (self.events)(event);
        }
    }

    fn drop_conn(&self, peer: SocketAddr, reason: impl Into<String>) {
        self.refused(ServerEvent::Dropped { peer, reason: reason.into() });
    }

    /// Tells the peer why (one write into an empty socket buffer, never waiting) and logs it.
    fn refuse(&self, stream: &TcpStream, peer: SocketAddr, reason: String) {
        let _ = control::write_msg(stream, &ControlMsg::Refuse { reason: reason.clone() });
        self.refused(ServerEvent::Refused { peer, reason });
    }
}

/// The whole handshake (greeting, `--psk-file` exchange, hello; or a data flow's greeting)
/// must be over this long after the connection was accepted: a deadline, however slowly
/// the peer drips its bytes.
pub(crate) const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(5);
/// Out of descriptors, only a handshake at least this old is closed to make room: a real peer
/// sends its greeting within a round trip, and the accept that found no descriptor may have
/// been the probe after the last connection (Linux reserves the descriptor before it looks
/// at the queue), so the newest handshake is as likely a data flow of a test as an attack.
const EVICT_MIN_AGE: Duration = Duration::from_secs(1);
/// How long `recv` waits, after a signal, for its running tests to report.
const STOP_GRACE: Duration = Duration::from_secs(30);
const FLOWS_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections in their handshake at once, from everyone: enough for the largest test (1024
/// flows each way) arriving together; less where the descriptor limit is lower.
const MAX_CLASSIFYING: usize = 2304;
/// Descriptors kept free for the tests themselves (rings, flows, duplicates for sampling).
const FD_RESERVE: u64 = 32;
/// After EMFILE, ENFILE or ENOMEM at accept: how long accepting pauses before it retries.
const ACCEPT_PAUSE: Duration = Duration::from_millis(250);
/// Accept trouble is over after this long without another failure.
const TROUBLE_OVER: Duration = Duration::from_secs(2);

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

/// The addresses a listener on `bind` serves that are neither loopback nor private (for the
/// unspecified address: every such address of the host's interfaces).
pub(crate) fn exposed_addresses(bind: IpAddr) -> Vec<IpAddr> {
    let candidates = if bind.is_unspecified() { crate::sys::sockopt::interface_addresses() } else { vec![bind] };
    candidates.into_iter().filter(|a| !crate::doctor::path::is_internal(*a) && !a.is_unspecified()).collect()
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
    let log = LogQueue::start(events, |count| ServerEvent::LogDropped { count })
        .map_err(|e| Error::io("starting the log thread", e))?;
    let log = Arc::new(log);
    let sender = Arc::clone(&log);
    let events: EventSink = Arc::new(move |e| sender.send(e));
    (events)(ServerEvent::Listening { addr });
    if cfg.psk.is_none() {
        let exposed = exposed_addresses(cfg.bind);
        if !exposed.is_empty() {
            (events)(ServerEvent::Unauthenticated { exposed });
        }
    }
    listener.set_nonblocking(true).map_err(|e| Error::io("making the listener non-blocking", e))?;
    let shared = Arc::new(Shared {
        cfg,
        runner,
        caps,
        cpus,
        events,
        limit_log: RateLimit::default(),
        pending: Mutex::new(HashMap::new()),
        active: AtomicUsize::new(0),
        sources: Mutex::new(HashMap::new()),
        next_id: AtomicU64::new(1),
        once_done: AtomicBool::new(false),
        once_ok: AtomicBool::new(false),
        variant_active: AtomicBool::new(false),
    });
    let outcome = accept_loop(&shared, listener);
    log.flush(Duration::from_secs(2));
    outcome
}

fn accept_loop(shared: &Arc<Shared>, listener: TcpListener) -> Result<bool> {
    let mut gate = Gate::new(shared, &listener)?;
    let mut ready = Vec::new();
    // The rate-limited log's windows are swept once a second, not on every wake.
    let mut next_sweep = Instant::now();
    loop {
        if shared.once_done.load(Ordering::Acquire) {
            return Ok(shared.once_ok.load(Ordering::Acquire));
        }
        if let Some(cause) = shared.cfg.stop.cause().map(str::to_owned) {
            drop(gate);
            drop(listener);
            let running = shared.active.load(Ordering::Acquire);
            (shared.events)(ServerEvent::Stopping { cause, running });
            // Each running test sees the signal in its sampler, stops its flows, tells its
            // sender and returns its report; the bound covers a sender that never answers.
            let deadline = Instant::now() + STOP_GRACE;
            while shared.active.load(Ordering::Acquire) > 0 && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            return Ok(true);
        }
        let now = Instant::now();
        gate.expire(now);
        if now >= next_sweep {
            next_sweep = now + Duration::from_secs(1);
            for (source, count) in shared.limit_log.expired(now) {
                (shared.events)(ServerEvent::Suppressed { source, count, seconds: logq::WINDOW.as_secs() });
            }
        }
        gate.resume_if_due(&listener, now);
        ready.clear();
        gate.epoll.wait(&mut ready, gate.wait_ms(now)).map_err(|e| Error::io("waiting for connections", e))?;
        for r in &ready {
            if r.token == LISTENER {
                gate.accept_all(&listener)?;
            } else {
                gate.readable(r.token, r.hangup);
            }
        }
    }
}

const LISTENER: u64 = 0;

/// Where a connection's handshake is.
enum Step {
    /// The 4-byte greeting.
    Magic,
    /// A data flow's cookie, index (and tag, `UBD2`).
    Data {
        tagged: bool,
    },
    /// A control message's frame word, then its body.
    Word(Ctl),
    Body(Ctl, bool),
}

/// Which control message a session waits for.
enum Ctl {
    /// `auth` (with `--psk-file`) or `hello` (without).
    First,
    /// The sender's proof, after our challenge.
    Proof { client: Nonce, server: Nonce },
    /// The hello of an authenticated session.
    Hello { key: SessionKey },
}

/// A connection in its handshake: non-blocking, read exactly as far as the current step
/// needs (so nothing a test sends after it is consumed here).
struct Conn {
    stream: TcpStream,
    peer: SocketAddr,
    step: Step,
    buf: Vec<u8>,
    want: usize,
    /// The control message reassembled so far.
    msg: Vec<u8>,
    /// Bytes read in all.
    got: usize,
}

/// The accept thread's classifier: every connection in its handshake, on one epoll.
struct Gate<'a> {
    shared: &'a Arc<Shared>,
    epoll: Epoll,
    conns: HashMap<u64, Conn>,
    /// Tokens in accept order: their deadlines are in order too.
    order: VecDeque<(Instant, u64)>,
    per_source: HashMap<IpAddr, usize>,
    next_token: u64,
    max_total: usize,
    /// Whether the listener is on the epoll; when not, when to put it back.
    retry_at: Option<Instant>,
    /// Accept trouble (EMFILE...): since when, and its latest occurrence. It is over, and
    /// said so once, after [`TROUBLE_OVER`] without another.
    trouble: Option<(Instant, Instant)>,
    listener_fd: i32,
}

/// What a step of a handshake came to.
enum Next {
    /// Waits for more bytes.
    More(Conn),
    /// Handed on or closed.
    Done,
}

impl<'a> Gate<'a> {
    fn new(shared: &'a Arc<Shared>, listener: &TcpListener) -> Result<Self> {
        let epoll = Epoll::new().map_err(|e| Error::io("creating the accept loop's epoll", e))?;
        epoll.add(listener.as_raw_fd(), LISTENER).map_err(|e| Error::io("watching the listener", e))?;
        let nofile = crate::sys::sockopt::open_files_limit();
        let max_total = (nofile.saturating_sub(FD_RESERVE).max(4) as usize).min(MAX_CLASSIFYING);
        Ok(Self {
            shared,
            epoll,
            conns: HashMap::new(),
            order: VecDeque::new(),
            per_source: HashMap::new(),
            next_token: LISTENER + 1,
            max_total,
            retry_at: None,
            trouble: None,
            listener_fd: listener.as_raw_fd(),
        })
    }

    fn wait_ms(&self, now: Instant) -> i32 {
        let mut until = now + Duration::from_millis(200);
        if let Some((at, _)) = self.order.front() {
            until = until.min(*at);
        }
        if let Some(retry) = self.retry_at {
            until = until.min(retry);
        }
        until.saturating_duration_since(now).as_millis().clamp(1, 200) as i32
    }

    /// Closes every connection whose handshake ran past its deadline.
    fn expire(&mut self, now: Instant) {
        while let Some(&(at, token)) = self.order.front() {
            if at > now {
                break;
            }
            self.order.pop_front();
            if let Some(conn) = self.conns.remove(&token) {
                self.forget(&conn);
                let secs = HANDSHAKE_DEADLINE.as_secs();
                let reason = if conn.got == 0 {
                    format!("sent nothing within {secs} s")
                } else {
                    format!("handshake not finished within {secs} s ({} bytes in)", conn.got)
                };
                self.shared.drop_conn(conn.peer, reason);
            }
        }
    }

    fn forget(&mut self, conn: &Conn) {
        self.forget_ip(conn.peer.ip().to_canonical());
    }

    fn forget_ip(&mut self, ip: IpAddr) {
        if let Some(n) = self.per_source.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                self.per_source.remove(&ip);
            }
        }
    }

    fn resume_if_due(&mut self, listener: &TcpListener, now: Instant) {
        if self.retry_at.is_some_and(|at| now >= at) && self.epoll.add(listener.as_raw_fd(), LISTENER).is_ok() {
            self.retry_at = None;
        }
        if let Some((since, last)) = self.trouble {
            if self.retry_at.is_none() && now.duration_since(last) >= TROUBLE_OVER {
                (self.shared.events)(ServerEvent::AcceptResumed { paused: last.duration_since(since) });
                self.trouble = None;
            }
        }
    }

    /// Accepts what the listener holds. Running out of descriptors, memory or threads pauses
    /// accepting (said once) instead of ending `recv`.
    fn accept_all(&mut self, listener: &TcpListener) -> Result<()> {
        for _ in 0..256 {
            match listener.accept() {
                Ok((stream, peer)) => self.admit_conn(stream, peer),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e)
                    if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)) =>
                {
                    self.epoll.remove(self.listener_fd);
                    let now = Instant::now();
                    if self.trouble.is_none() {
                        let open = self.conns.len();
                        (self.shared.events)(ServerEvent::AcceptPaused {
                            reason: format!(
                                "{e} ({open} connections in their handshake, {} tests running)",
                                self.shared.active.load(Ordering::Acquire)
                            ),
                        });
                    }
                    self.trouble = Some((self.trouble.map_or(now, |(since, _)| since), now));
                    self.retry_at = Some(now + ACCEPT_PAUSE);
                    // Make room: the heaviest source's oldest stalled handshake goes first.
                    self.close_stalled(now);
                    return Ok(());
                }
                // The peer gave up between SYN and accept, or a transient network error.
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(
                            libc::ECONNABORTED
                                | libc::EPROTO
                                | libc::EPERM
                                | libc::ENETDOWN
                                | libc::ENETUNREACH
                                | libc::EHOSTUNREACH
                                | libc::EHOSTDOWN
                                | libc::ENONET
                                | libc::EOPNOTSUPP
                                | libc::ETIMEDOUT
                        )
                    ) =>
                {
                    continue
                }
                Err(e) => return Err(Error::io("accepting a connection", e)),
            }
        }
        Ok(())
    }

    /// The table is full and a newcomer's source holds `mine`: the source holding most closes
    /// its oldest handshake, if it holds more than the newcomer's would with it.
    fn make_room_for(&mut self, mine: usize) -> bool {
        let Some((ip, n)) = self.heaviest_source() else { return false };
        n > mine + 1 && self.close_oldest_of(ip, n, Instant::now(), Duration::ZERO)
    }

    /// Out of descriptors at `now`: the source holding most closes its oldest handshake if it
    /// is older than [`EVICT_MIN_AGE`] (a newer one may be a test's own data flow).
    fn close_stalled(&mut self, now: Instant) -> bool {
        let Some((ip, n)) = self.heaviest_source() else { return false };
        self.close_oldest_of(ip, n, now, EVICT_MIN_AGE)
    }

    /// The source with the most handshakes, and how many it has.
    fn heaviest_source(&self) -> Option<(IpAddr, usize)> {
        self.per_source.iter().max_by_key(|(_, n)| **n).map(|(&ip, &n)| (ip, n))
    }

    /// Closes the oldest handshake from `ip` (which holds `n`) that is at least `min_age` old
    /// at `now`; false when it has none.
    fn close_oldest_of(&mut self, ip: IpAddr, n: usize, now: Instant, min_age: Duration) -> bool {
        // A deadline is the accept time plus HANDSHAKE_DEADLINE, so the queue is oldest first.
        let due_by = now + HANDSHAKE_DEADLINE - min_age;
        let token = self
            .order
            .iter()
            .take_while(|(at, _)| *at <= due_by)
            .map(|(_, t)| *t)
            .find(|t| self.conns.get(t).is_some_and(|c| c.peer.ip().to_canonical() == ip));
        let Some(conn) = token.and_then(|t| self.conns.remove(&t)) else { return false };
        self.forget(&conn);
        self.shared.drop_conn(conn.peer, format!("closed to make room: {n} connections from {ip} in their handshake"));
        true
    }

    fn admit_conn(&mut self, stream: TcpStream, peer: SocketAddr) {
        let ip = peer.ip().to_canonical();
        let cfg = &self.shared.cfg;
        if !cfg.allow.is_empty() && !cfg.allow.iter().any(|c| c.contains(ip)) {
            return self.shared.drop_conn(peer, "source address not in --allow");
        }
        let mine = self.per_source.get(&ip).copied().unwrap_or(0);
        if mine >= cfg.max_pending_per_source && mine >= cfg.max_pending_per_source + self.shared.flows_awaited(ip) {
            return self.shared.drop_conn(
                peer,
                format!("{mine} connections from {ip} already in their handshake (recv --max-pending-per-source)"),
            );
        }
        if self.conns.len() >= self.max_total && !self.make_room_for(mine) {
            return self.shared.drop_conn(peer, format!("{} connections already in their handshake", self.conns.len()));
        }
        if stream.set_nonblocking(true).is_err() {
            return;
        }
        let token = self.next_token;
        self.next_token += 1;
        if let Err(e) = self.epoll.add(stream.as_raw_fd(), token) {
            return self.shared.drop_conn(peer, format!("cannot watch the connection: {e}"));
        }
        *self.per_source.entry(ip).or_insert(0) += 1;
        self.order.push_back((Instant::now() + HANDSHAKE_DEADLINE, token));
        // Finished handshakes leave their tokens behind until their deadline; under churn
        // they are dropped at once, so scans of the order stay as long as the table.
        if self.order.len() > 2 * self.conns.len() + 64 {
            let conns = &self.conns;
            self.order.retain(|(_, t)| *t == token || conns.contains_key(t));
        }
        self.conns.insert(
            token,
            Conn { stream, peer, step: Step::Magic, buf: Vec::with_capacity(4), want: 4, msg: Vec::new(), got: 0 },
        );
    }

    fn readable(&mut self, token: u64, hangup: bool) {
        let Some(conn) = self.conns.remove(&token) else { return };
        let ip = conn.peer.ip().to_canonical();
        match drive(self.shared, &self.epoll, conn, hangup) {
            Next::More(conn) => {
                self.conns.insert(token, conn);
            }
            Next::Done => self.forget_ip(ip),
        }
    }
}

/// Reads what `conn` has for its current step and moves it on as far as that allows.
fn drive(shared: &Arc<Shared>, epoll: &Epoll, mut conn: Conn, hangup: bool) -> Next {
    loop {
        while conn.buf.len() < conn.want {
            let start = conn.buf.len();
            let end = conn.want.min(start + 16 * 1024);
            conn.buf.resize(end, 0);
            match (&conn.stream).read(&mut conn.buf[start..end]) {
                Ok(0) => {
                    shared.drop_conn(conn.peer, "closed during its handshake");
                    return Next::Done;
                }
                Ok(n) => {
                    conn.buf.truncate(start + n);
                    conn.got += n;
                }
                Err(e) => {
                    conn.buf.truncate(start);
                    match e.kind() {
                        std::io::ErrorKind::WouldBlock if !hangup => return Next::More(conn),
                        std::io::ErrorKind::Interrupted => continue,
                        _ => {
                            shared.drop_conn(conn.peer, format!("failed during its handshake: {e}"));
                            return Next::Done;
                        }
                    }
                }
            }
        }
        let step = std::mem::replace(&mut conn.step, Step::Magic);
        match step {
            Step::Magic => {
                let magic: [u8; 4] = conn.buf[..4].try_into().unwrap_or_default();
                match magic {
                    control::CONTROL_MAGIC => {
                        conn.buf.clear();
                        conn.want = 4;
                        conn.step = Step::Word(Ctl::First);
                    }
                    control::DATA_MAGIC => {
                        conn.want = DATA_HELLO_LEN;
                        conn.step = Step::Data { tagged: false };
                    }
                    control::DATA_AUTH_MAGIC => {
                        conn.want = DATA_HELLO_LEN + auth::TAG_LEN;
                        conn.step = Step::Data { tagged: true };
                    }
                    other => {
                        shared.drop_conn(
                            conn.peer,
                            format!(
                                "not a uringbench peer (greeting {:02x}{:02x}{:02x}{:02x})",
                                other[0], other[1], other[2], other[3]
                            ),
                        );
                        return Next::Done;
                    }
                }
            }
            Step::Data { tagged } => {
                join_flow(shared, epoll, conn, tagged);
                return Next::Done;
            }
            Step::Word(ctl) => {
                let (len, more) = control::frame_word(conn.buf[..4].try_into().unwrap_or_default());
                if len > MAX_FRAME || conn.msg.len() + len > MAX_FRAME {
                    let reason = format!(
                        "control message of {} bytes or more exceeds the {MAX_FRAME}-byte limit",
                        conn.msg.len() + len
                    );
                    shared.refuse(&conn.stream, conn.peer, reason);
                    return Next::Done;
                }
                conn.buf.clear();
                conn.want = len;
                conn.step = Step::Body(ctl, more);
            }
            Step::Body(ctl, more) => {
                conn.msg.extend_from_slice(&conn.buf);
                conn.buf.clear();
                conn.want = 4;
                if more {
                    conn.step = Step::Word(ctl);
                    continue;
                }
                let msg = match control::decode(&conn.msg) {
                    Ok(m) => m,
                    Err(e) => {
                        shared.refuse(&conn.stream, conn.peer, e.message);
                        return Next::Done;
                    }
                };
                conn.msg = Vec::new();
                match on_message(shared, epoll, conn, ctl, msg) {
                    Some((back, next)) => {
                        conn = back;
                        conn.step = Step::Word(next);
                    }
                    None => return Next::Done,
                }
            }
        }
    }
}

/// Hands a data flow to the session whose cookie it presents, if its tag (for an
/// authenticated session) proves it holds the session key.
fn join_flow(shared: &Shared, epoll: &Epoll, conn: Conn, tagged: bool) {
    let rest: [u8; DATA_HELLO_LEN - 4] = conn.buf[4..DATA_HELLO_LEN].try_into().unwrap_or([0; DATA_HELLO_LEN - 4]);
    let (cookie, flow) = control::parse_data_hello(&rest);
    let entry = shared.pending.lock().unwrap_or_else(|p| p.into_inner()).get(&cookie).cloned();
    let Some((tx, key)) = entry else {
        return shared.drop_conn(conn.peer, "data flow for an unknown session");
    };
    match (&key, tagged) {
        (Some(key), true) if key.verify_flow(&cookie, flow, &conn.buf[DATA_HELLO_LEN..]) => {}
        (None, false) => {}
        (Some(_), _) => return shared.drop_conn(conn.peer, "data flow without the session's key (--psk-file)"),
        (None, true) => return shared.drop_conn(conn.peer, "tagged data flow for an unauthenticated session"),
    }
    epoll.remove(conn.stream.as_raw_fd());
    if conn.stream.set_nonblocking(false).is_ok() {
        let _ = tx.send((flow, conn.stream));
    }
}

/// A complete control message during the handshake: the next message wanted, or None when
/// the connection is done with here (handed to a session, or refused).
fn on_message(shared: &Arc<Shared>, epoll: &Epoll, conn: Conn, ctl: Ctl, msg: ControlMsg) -> Option<(Conn, Ctl)> {
    let (stream, peer) = (&conn.stream, conn.peer);
    let psk = shared.cfg.psk.as_ref();
    match (ctl, msg, psk) {
        (Ctl::First, ControlMsg::Auth { version, nonce: client }, Some(psk)) => {
            if version < PROTOCOL_VERSION {
                shared.refuse(
                    stream,
                    peer,
                    format!("authentication of protocol version {version}, this receiver speaks {PROTOCOL_VERSION}"),
                );
                return None;
            }
            let server = match auth::nonce() {
                Ok(n) => n,
                Err(e) => {
                    shared.refuse(stream, peer, e.message);
                    return None;
                }
            };
            let challenge = ControlMsg::Challenge { nonce: server, proof: psk.receiver_proof(&client, &server) };
            if control::write_msg(stream, &challenge).is_err() {
                shared.drop_conn(peer, "could not send the challenge");
                return None;
            }
            Some((conn, Ctl::Proof { client, server }))
        }
        (Ctl::First, ControlMsg::Auth { .. }, None) => {
            shared.refuse(stream, peer, "this receiver has no --psk-file: run the sender without --psk-file".into());
            None
        }
        (Ctl::First, ControlMsg::Hello { .. }, Some(_)) => {
            shared.refuse(
                stream,
                peer,
                "this receiver requires authentication: run the sender with --psk-file (the receiver's secret)".into(),
            );
            None
        }
        (Ctl::Proof { client, server }, ControlMsg::Proof { proof }, Some(psk)) => {
            if auth::same(&psk.sender_proof(&client, &server), &proof) {
                Some((conn, Ctl::Hello { key: psk.session_key(&client, &server) }))
            } else {
                shared.refuse(
                    stream,
                    peer,
                    "authentication failed: the sender's --psk-file holds another secret".into(),
                );
                None
            }
        }
        (Ctl::First, ControlMsg::Hello { version, spec, udp_ports }, None) => {
            admit(shared, epoll, conn, version, spec, udp_ports, None);
            None
        }
        (Ctl::Hello { key }, ControlMsg::Hello { version, spec, udp_ports }, Some(_)) => {
            admit(shared, epoll, conn, version, spec, udp_ports, Some(key));
            None
        }
        (_, other, _) => {
            shared.refuse(stream, peer, format!("unexpected {} message during the handshake", other.kind()));
            None
        }
    }
}

/// Holds a running test's place in the counts (in total and for its source address); gives
/// it back when dropped, however the session ends (a panic included).
struct SessionSlot {
    shared: Arc<Shared>,
    source: IpAddr,
    ms: u64,
}

impl Drop for SessionSlot {
    fn drop(&mut self) {
        self.shared.active.fetch_sub(1, Ordering::AcqRel);
        let mut sources = self.shared.sources.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(u) = sources.get_mut(&self.source) {
            u.sessions = u.sessions.saturating_sub(1);
            u.ms = u.ms.saturating_sub(self.ms);
            if u.sessions == 0 {
                sources.remove(&self.source);
            }
        }
    }
}

/// What a session thread is handed.
struct Admitted {
    ctl: TcpStream,
    peer: SocketAddr,
    spec: TestSpec,
    udp_ports: Vec<u16>,
    key: Option<SessionKey>,
    running: usize,
    slot: SessionSlot,
}

/// A complete hello: checked against every limit here, on the accept thread (a refusal
/// costs no thread and no socket), then run on a thread of its own.
fn admit(
    shared: &Arc<Shared>,
    epoll: &Epoll,
    conn: Conn,
    version: u32,
    mut spec: TestSpec,
    udp_ports: Vec<u16>,
    key: Option<SessionKey>,
) {
    let (stream, peer) = (&conn.stream, conn.peer);
    let lowest = if key.is_some() { PROTOCOL_VERSION } else { MIN_PROTOCOL_VERSION };
    if !(lowest..=PROTOCOL_VERSION).contains(&version) {
        return shared.refuse(
            stream,
            peer,
            format!("protocol version {version}, this receiver speaks {lowest} to {PROTOCOL_VERSION}"),
        );
    }
    if shared.cfg.once && shared.once_done.load(Ordering::Acquire) {
        return shared.refuse(stream, peer, "receiver is finishing (--once)".into());
    }
    let limits = &shared.cfg.limits;
    limits.cap(&mut spec);
    let threads = (spec.queues as usize).min(shared.cpus.len());
    if let Err(reason) = limits.check(&spec, shared.runner.memory(&spec, threads)) {
        return shared.refuse(stream, peer, reason);
    }
    if spec.proto == Proto::Udp && udp_ports.len() != spec.data_connections() as usize {
        let reason =
            format!("UDP test announces {} source ports for {} flows", udp_ports.len(), spec.data_connections());
        return shared.refuse(stream, peer, reason);
    }
    let source = peer.ip().to_canonical();
    let ms = spec.warmup_ms.saturating_add(spec.time_ms).saturating_add(spec.cooldown_ms);
    let max_sessions = if shared.cfg.once { 1 } else { limits.max_sessions };
    let running = {
        let mut sources = shared.sources.lock().unwrap_or_else(|p| p.into_inner());
        let running = shared.active.load(Ordering::Acquire);
        let mine = sources.get(&source).copied().unwrap_or_default();
        if running >= max_sessions {
            drop(sources);
            return shared.refuse(
                stream,
                peer,
                format!("receiver busy: {running} tests running (limit {max_sessions})"),
            );
        }
        if mine.sessions >= limits.max_sessions_per_source {
            drop(sources);
            return shared.refuse(
                stream,
                peer,
                format!(
                    "receiver busy: {} tests from {source} running (recv --max-sessions-per-source {})",
                    mine.sessions, limits.max_sessions_per_source
                ),
            );
        }
        if mine.ms.saturating_add(ms) > limits.max_total_ms {
            drop(sources);
            return shared.refuse(
                stream,
                peer,
                format!("tests from {source} would run {:.0} s at once, this receiver allows {:.0} s per source (recv --max-time)", (mine.ms + ms) as f64 / 1e3, limits.max_total_ms as f64 / 1e3),
            );
        }
        let u = sources.entry(source).or_default();
        u.sessions += 1;
        u.ms += ms;
        shared.active.fetch_add(1, Ordering::AcqRel)
    };
    let slot = SessionSlot { shared: Arc::clone(shared), source, ms };
    // The thread receives its work through a channel, so that when no thread can be started
    // the connection is still here to be told why.
    let (tx, rx) = mpsc::channel::<Admitted>();
    let thread_shared = Arc::clone(shared);
    let spawned = std::thread::Builder::new().name("ub-session".into()).spawn(move || {
        if let Ok(work) = rx.recv() {
            run_admitted(&thread_shared, work);
        }
    });
    if let Err(e) = spawned {
        drop(slot);
        return shared.refuse(stream, peer, format!("receiver out of threads ({e}); try again later"));
    }
    epoll.remove(stream.as_raw_fd());
    let ctl = conn.stream;
    if ctl.set_nonblocking(false).is_err() {
        drop(tx);
        drop(slot);
        return shared.drop_conn(peer, "could not hand the session to its thread");
    }
    let _ = tx.send(Admitted { ctl, peer, spec, udp_ports, key, running, slot });
}

/// A session's thread: a panic in it ends this session only (its slot and cookie are given
/// back as it unwinds) and is logged as the session's failure.
fn run_admitted(shared: &Shared, work: Admitted) {
    let peer = work.peer;
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_session(shared, work)));
    if let Err(panic) = outcome {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".into());
        (shared.events)(ServerEvent::SessionFailed {
            id: 0,
            peer,
            error: format!("internal error, session ended: {what}"),
        });
    }
}

fn run_session(shared: &Shared, work: Admitted) {
    let Admitted { mut ctl, peer, spec, udp_ports, key, running, slot: _slot } = work;
    let refuse = |ctl: &TcpStream, reason: String| shared.refuse(ctl, peer, reason);
    // A test can always be stopped: a sender that vanishes is noticed (keepalive, user
    // timeout) and a write to it cannot block the session for long.
    if let Err(e) = control::harden(&ctl) {
        return shared.drop_conn(peer, e.message);
    }
    // With --engine xdp, a forward UDP test's program takes every UDP datagram to the port:
    // another test that receives UDP here (forward or bidir) must not overlap with it.
    let udp_in = spec.proto == Proto::Udp && spec.direction != Direction::Reverse;
    if shared.runner.udp_alone() && udp_in && running > 0 {
        return refuse(
            &ctl,
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
        return refuse(&ctl, reason.into());
    }
    // The variant's settings stay applied until this guard drops at the end of the session.
    let _variant = match spec.variant.as_deref() {
        None => None,
        Some(name) => match apply_variant(shared, name) {
            Ok(guard) => Some(guard),
            Err(reason) => return refuse(&ctl, reason),
        },
    };
    let busy_poll = if shared.cfg.limits.no_spin { BusyPoll::Off } else { shared.cfg.busy_poll };
    let placement = match plan(
        spec.queues,
        &shared.cpus,
        busy_poll,
        running > 0 || spec.direction == Direction::Bidir,
        spec.workload.latency_bound(),
        &shared.cfg.fast,
    ) {
        Ok(p) => p,
        Err(e) => return refuse(&ctl, e.message),
    };
    let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
    let mut test = Test {
        ctl: &mut ctl,
        spec: &spec,
        udp_ports: &udp_ports,
        placement: &placement,
        caps: &shared.caps,
        stop: &shared.cfg.stop,
        shared,
        id,
        key,
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
pub(crate) type Reports = (Option<SideReport>, Option<SideReport>);

/// One test the receiver admitted, as the per-test code sees it.
pub struct Test<'a> {
    pub ctl: &'a mut TcpStream,
    pub spec: &'a TestSpec,
    pub udp_ports: &'a [u16],
    pub placement: &'a Placement,
    pub caps: &'a KernelCaps,
    /// The receiver's stop token: the test's live watch ends the test when it is stopped.
    pub stop: &'a StopToken,
    shared: &'a Shared,
    id: u64,
    /// The authenticated session's key: its data flows must present a tag made with it.
    key: Option<SessionKey>,
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
    pub(crate) fn accept_flows(&mut self) -> Result<Vec<(u32, TcpStream)>> {
        let shared = self.shared;
        let cookie = control::new_cookie();
        let (tx, rx) = mpsc::channel();
        shared.pending.lock().unwrap_or_else(|p| p.into_inner()).insert(cookie, (tx, self.key.clone()));
        // However this ends, the cookie admits no more flows.
        let _unregister = Unregister(&shared.pending, cookie);
        let wanted = self.spec.data_connections() as usize;
        let _awaited = self.ctl.peer_addr().ok().map(|a| FlowsAwaited::new(shared, a.ip().to_canonical(), wanted));
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

/// Sessions waiting for their data flows: by cookie, where to hand a flow, and the key its
/// tag must be made with (authenticated sessions).
type Pending = Mutex<HashMap<SessionCookie, (mpsc::Sender<(u32, TcpStream)>, Option<SessionKey>)>>;

/// A test's data flows counted as awaited from its source while it waits for them.
struct FlowsAwaited<'a> {
    shared: &'a Shared,
    source: IpAddr,
    n: usize,
}

impl<'a> FlowsAwaited<'a> {
    fn new(shared: &'a Shared, source: IpAddr, n: usize) -> Self {
        if let Some(u) = shared.sources.lock().unwrap_or_else(|p| p.into_inner()).get_mut(&source) {
            u.flows_awaited += n;
        }
        Self { shared, source, n }
    }
}

impl Drop for FlowsAwaited<'_> {
    fn drop(&mut self) {
        if let Some(u) = self.shared.sources.lock().unwrap_or_else(|p| p.into_inner()).get_mut(&self.source) {
            u.flows_awaited = u.flows_awaited.saturating_sub(self.n);
        }
    }
}

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
    use crate::base::spec::MIN_INTERVAL_MS;

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

    #[test]
    fn cidr_lists_match_v4_v6_and_mapped_peers() {
        let net: Cidr = "10.77.0.0/16".parse().unwrap();
        assert!(net.contains("10.77.3.4".parse().unwrap()));
        assert!(net.contains("::ffff:10.77.3.4".parse().unwrap()), "a v4-mapped peer is its IPv4 address");
        assert!(!net.contains("10.78.0.1".parse().unwrap()));
        assert!(!net.contains("fd00::1".parse().unwrap()));
        let one: Cidr = "fd00::1".parse().unwrap();
        assert!(one.contains("fd00::1".parse().unwrap()) && !one.contains("fd00::2".parse().unwrap()));
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains("192.0.2.1".parse().unwrap()));
        assert!("10.0.0.0/33".parse::<Cidr>().unwrap_err().contains("0..32"));
        assert!("nonsense".parse::<Cidr>().is_err());
        assert!(exposed_addresses("127.0.0.1".parse().unwrap()).is_empty());
        assert!(exposed_addresses("10.1.2.3".parse().unwrap()).is_empty());
        let public: IpAddr = "203.0.113.5".parse().unwrap();
        assert_eq!(exposed_addresses(public), vec![public], "a public address is named in the warning");
    }

    /// A runner whose first test panics and whose second is served: the panic ends that
    /// session only and gives its slot back.
    struct PanicsOnce(AtomicBool);
    impl TestRunner for PanicsOnce {
        fn memory(&self, _: &TestSpec, _: usize) -> u64 {
            0
        }
        fn udp_alone(&self) -> bool {
            false
        }
        fn run(&self, test: &mut Test<'_>) -> Result<Reports> {
            if !self.0.swap(true, Ordering::AcqRel) {
                panic!("boom in a session");
            }
            test.accept(None)?;
            Ok((None, None))
        }
    }

    #[test]
    fn a_panic_in_a_session_ends_that_session_only() {
        let cfg = ReceiverConfig {
            bind: "127.0.0.1".parse().unwrap(),
            device: None,
            port: 0,
            cpus: None,
            busy_poll: BusyPoll::Off,
            once: true,
            limits: ServerLimits { max_sessions: 1, ..ServerLimits::default() },
            variants: None,
            fast: Default::default(),
            psk: None,
            allow: Vec::new(),
            max_pending_per_source: 64,
            stop: StopToken::new(),
        };
        let listener = bind(&cfg).unwrap();
        let addr = listener.local_addr().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&log);
        let events: EventSink = Arc::new(move |e| sink.lock().unwrap().push(format!("{e:?}")));
        let runner = Arc::new(PanicsOnce(AtomicBool::new(false)));
        let server = std::thread::spawn(move || serve(cfg, runner, listener, events));
        let hello = |expect_accept: bool| {
            let mut s = TcpStream::connect(addr).unwrap();
            std::io::Write::write_all(&mut s, &control::CONTROL_MAGIC).unwrap();
            let spec = TestSpec { time_ms: 100, warmup_ms: 0, ..TestSpec::default() };
            control::write_msg(&s, &ControlMsg::Hello { version: PROTOCOL_VERSION, spec, udp_ports: vec![] }).unwrap();
            let reply = control::read_reply(&mut s, Duration::from_secs(5));
            match (expect_accept, reply) {
                (false, Err(_)) => {}
                (true, Ok(ControlMsg::Accept { .. })) => {
                    let end = control::read_reply(&mut s, Duration::from_secs(5)).unwrap();
                    assert_eq!(end.kind(), "result");
                }
                (_, other) => panic!("unexpected reply {other:?}"),
            }
        };
        hello(false);
        // The slot the panicking session held is free again (max_sessions is 1).
        hello(true);
        assert!(server.join().unwrap().unwrap(), "--once ends after the served test");
        let log = log.lock().unwrap();
        assert!(log.iter().any(|l| l.contains("internal error, session ended: boom in a session")), "{log:?}");
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
