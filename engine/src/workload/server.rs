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
use crate::runtime::placement::{plan, resolve_cpus, BusyPoll};
use crate::session::control::{self, ControlMsg, SessionCookie, DATA_HELLO_LEN, PROTOCOL_VERSION};
use crate::sys::probe::KernelCaps;
use crate::sys::settings::{self, Journal, ReceiverVariants, SharedJournal};
use crate::transport::tcp::crr as tcp_crr;
use crate::uring::ring::BufRing;
use crate::workload::rr::{self, ServerFlows};
use crate::workload::stream::{self, RECV_BUF_COUNT, RECV_BUF_SIZE};
use crate::workload::udp_stream;
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
    pub max_sessions: usize,
    /// Receive buffer memory one test may take.
    pub max_memory: u64,
}

impl Default for ServerLimits {
    fn default() -> Self {
        Self {
            max_queues: 256,
            max_flows: 1024,
            max_total_ms: 3_600_000,
            max_len: 16 << 20,
            max_depth: 64,
            max_sessions: 4,
            max_memory: 1 << 30,
        }
    }
}

impl ServerLimits {
    /// Checks a requested test against the limits; `Err` holds the reason sent to the peer.
    pub fn check(&self, spec: &TestSpec, threads: usize) -> std::result::Result<(), String> {
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
        let flows = spec.flows().max(spec.data_connections());
        if spec.flows_per_queue == 0 || flows > self.max_flows {
            return Err(format!("{flows} flows requested, this receiver allows at most {}", self.max_flows));
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
        let total = spec.total_ms();
        if spec.time_ms == 0 || total > self.max_total_ms {
            return Err(format!(
                "test of {:.1} s requested, this receiver allows up to {:.0} s (recv --max-time)",
                total as f64 / 1e3,
                self.max_total_ms as f64 / 1e3
            ));
        }
        if spec.len == 0 || spec.len > self.max_len {
            return Err(format!("message length {} bytes outside 1..{}", spec.len, self.max_len));
        }
        if spec.depth == 0 || spec.depth > self.max_depth {
            return Err(format!("send depth {} outside 1..{}", spec.depth, self.max_depth));
        }
        let memory =
            threads as u64 * (RECV_BUF_COUNT as u64 * RECV_BUF_SIZE as u64 + BufRing::pinned_bytes(RECV_BUF_COUNT));
        if memory > self.max_memory {
            return Err(format!(
                "test needs {} MiB of receive buffers, limit {} MiB",
                memory >> 20,
                self.max_memory >> 20
            ));
        }
        Ok(())
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
    /// `--engine xdp`: forward UDP tests are received with AF_XDP sockets and uringbench's XDP
    /// program instead of UDP sockets.
    pub xdp: Option<crate::workload::xdp_stream::XdpOptions>,
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

type EventSink = Arc<dyn Fn(ServerEvent) + Send + Sync>;

struct Shared {
    cfg: ReceiverConfig,
    caps: KernelCaps,
    cpus: Vec<usize>,
    events: EventSink,
    pending: Mutex<HashMap<SessionCookie, mpsc::Sender<(u32, TcpStream)>>>,
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
pub fn serve(cfg: ReceiverConfig, listener: TcpListener, events: EventSink) -> Result<bool> {
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
    if shared.cfg.xdp.is_some() && udp_in && running > 0 {
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
    if let Err(reason) = shared.cfg.limits.check(&spec, threads) {
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
    let outcome = accept_and_run(shared, &mut ctl, &spec, &udp_ports, &placement);
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

fn announce(shared: &Shared, ctl: &TcpStream, spec: &TestSpec, placement: &crate::runtime::placement::Placement) {
    (shared.events)(ServerEvent::SessionStarted {
        id: shared.next_id.load(Ordering::Relaxed) - 1,
        peer: ctl.peer_addr().unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0))),
        spec: spec.clone(),
        placement: placement.summary.clone(),
    });
}

fn accept_and_run(
    shared: &Shared,
    ctl: &mut TcpStream,
    spec: &TestSpec,
    udp_ports: &[u16],
    placement: &crate::runtime::placement::Placement,
) -> Result<(Option<SideReport>, Option<SideReport>)> {
    if spec.workload == Workload::Crr {
        let local = ctl.local_addr().map_err(|e| Error::io("reading the control socket address", e))?;
        let steer: Vec<(usize, u32)> = placement.threads.iter().map(|t| (t.cpu, t.queues[0])).collect();
        let (listeners, port, spread) = tcp_crr::listeners(local.ip().to_canonical(), spec.queues, &steer)?;
        let accept = ControlMsg::Accept {
            cookie: [0; 16],
            placement: placement.summary.clone(),
            data_port: Some(port),
            variant: spec.variant.clone(),
        };
        control::write_msg(ctl, &accept)?;
        announce(shared, ctl, spec, placement);
        return rr::serve_rr(ctl, spec, ServerFlows::Crr(listeners, spread), placement).map(|r| (Some(r), None));
    }
    if let Some(xdp) = shared.cfg.xdp.as_ref().filter(|_| {
        spec.proto == Proto::Udp && spec.workload == Workload::Stream && spec.direction == Direction::Forward
    }) {
        // Program and sockets first, so the sender's first frames find them; a failure refuses
        // the test with its reason (and whatever was set up is undone).
        let reception = match crate::workload::xdp_stream::XdpReception::prepare(ctl, udp_ports, xdp) {
            Ok(r) => r,
            Err(e) => {
                let _ = control::write_msg(ctl, &ControlMsg::Refuse { reason: e.message.clone() });
                return Err(e);
            }
        };
        control::write_msg(
            ctl,
            &ControlMsg::Accept {
                cookie: [0; 16],
                placement: placement.summary.clone(),
                data_port: None,
                variant: spec.variant.clone(),
            },
        )?;
        announce(shared, ctl, spec, placement);
        return reception.serve(ctl, spec, placement).map(|r| (Some(r), None));
    }
    if spec.proto == Proto::Udp {
        // Sockets first, so the sender's first datagrams find them (with GRO on).
        let sockets = udp_stream::receiver_sockets(ctl, udp_ports)?;
        let accept = ControlMsg::Accept {
            cookie: [0; 16],
            placement: placement.summary.clone(),
            data_port: None,
            variant: spec.variant.clone(),
        };
        control::write_msg(ctl, &accept)?;
        announce(shared, ctl, spec, placement);
        if spec.workload == Workload::Rr {
            return rr::serve_rr(ctl, spec, ServerFlows::Udp(sockets), placement).map(|r| (Some(r), None));
        }
        return udp_stream::serve_udp(ctl, spec, sockets, placement);
    }
    let cookie = control::new_cookie();
    let (tx, rx) = mpsc::channel();
    shared.pending.lock().unwrap_or_else(|p| p.into_inner()).insert(cookie, tx);
    let unregister = || {
        shared.pending.lock().unwrap_or_else(|p| p.into_inner()).remove(&cookie);
    };
    if let Err(e) = control::write_msg(
        ctl,
        &ControlMsg::Accept {
            cookie,
            placement: placement.summary.clone(),
            data_port: None,
            variant: spec.variant.clone(),
        },
    ) {
        unregister();
        return Err(e);
    }
    announce(shared, ctl, spec, placement);
    let wanted = spec.data_connections() as usize;
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
                unregister();
                return Err(Error::protocol(format!("data flow index {flow} is out of range or repeated")));
            }
            Err(_) => {
                unregister();
                return Err(Error::peer(format!(
                    "only {got} of {wanted} data connections arrived within {} s",
                    FLOWS_TIMEOUT.as_secs()
                )));
            }
        }
    }
    unregister();
    let flows = slots.into_iter().enumerate().map(|(i, s)| (i as u32, s.expect("all slots filled"))).collect();
    if spec.workload == Workload::Rr {
        return rr::serve_rr(ctl, spec, ServerFlows::Tcp(flows), placement).map(|r| (Some(r), None));
    }
    stream::serve_test(ctl, spec, flows, placement, &shared.caps)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_refuse_what_a_peer_must_not_demand() {
        let limits = ServerLimits::default();
        let ok = TestSpec::default();
        assert!(limits.check(&ok, 1).is_ok());
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
            let reason = limits.check(&spec, 1).expect_err(expect);
            assert!(reason.contains(expect), "reason '{reason}' should mention '{expect}'");
        }
        let small = ServerLimits { max_memory: 1 << 20, ..ServerLimits::default() };
        assert!(small.check(&ok, 4).unwrap_err().contains("MiB"), "memory cap enforced");
    }
}
