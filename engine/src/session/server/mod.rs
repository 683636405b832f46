//! `uringbench recv`: one port, test after test, several senders at once, within limits.
//!
//! Every connection's handshake (its greeting, the `--psk-file` exchange, the hello; or a data
//! flow's greeting) is read on the accept gate ([`crate::session::gate`]), whose deadline and
//! caps keep idle or dripping peers to a descriptor each, never a thread; this file is its
//! classifier ([`Handshakes`]). A hello is checked against
//! [`ServerLimits`](crate::session::receiver::ServerLimits) there
//! (queues, flows, duration, interval, rate, memory, sessions in all and per source, with
//! checked arithmetic), so a refusal costs no thread and no socket, and the peer gets the
//! reason. An admitted test runs on a thread of its own, the workload's code handed in as a
//! [`TestRunner`]; its place in the counts is a guard given back however it ends.

mod flows;
mod ntuple;
mod test;
mod variants;

use flows::{join_flow, Greeting};
use test::Pending;
pub use test::{ServedReports, Test, TestRunner};
use variants::{apply_variant, check_variant, revert_leftover, wait_for_host};

use crate::base::error::{Error, Result};
use crate::base::spec::{Direction, Proto, TestSpec, Workload};
use crate::runtime::nic_queues::{place_threads, TestQueues};
use crate::runtime::placement::{resolve_cpus, BusyPoll};
use crate::session::admission::{Admissions, SessionSlot};
use crate::session::auth::{self, Nonce, SessionKey};
use crate::session::control::{self, ControlMsg, DATA_HELLO_LEN, MAX_FRAME, MIN_PROTOCOL_VERSION, PROTOCOL_VERSION};
use crate::session::end_report;
use crate::session::gate::{self, Classifier, GateEvent, GateLimits, Verdict};
use crate::session::live::ServerStop;
use crate::session::logq::{LogQueue, RateLimit};
use crate::session::receiver::{exposed_addresses, EventSink, ReceiverConfig, ServerEvent, TestOutcome};
use crate::session::source::Source;
use crate::sys::epoll::Epoll;
use crate::sys::probe::KernelCaps;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// What `recv`'s accept loop and its session threads share.
struct ReceiverState {
    cfg: ReceiverConfig,
    runner: Arc<dyn TestRunner>,
    caps: KernelCaps,
    cpus: Vec<usize>,
    /// The log queue's sender: never blocks (session/logq.rs).
    events: EventSink,
    /// Repeated refusals and drops, per source address.
    limit_log: RateLimit,
    pending: Pending,
    admissions: Arc<Admissions>,
    next_id: AtomicU64,
    /// With `--once`: set when the first test has ended, with its outcome.
    once_done: AtomicBool,
    once_ok: AtomicBool,
    /// A test runs under a receiver variant: no other test may share the host with it.
    variant_active: AtomicBool,
    /// What ends each test besides its sender: the stop token and the no-progress limit.
    test_stop: ServerStop,
}

impl ReceiverState {
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
        if let Some(tally) = &self.cfg.tally {
            tally.0.refused(peer);
        }
        self.refused(ServerEvent::Refused { peer, reason });
    }
}

/// How long `recv` waits, after a signal, for its running tests to report.
const STOP_GRACE: Duration = Duration::from_secs(30);
const FLOWS_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections in their handshake at once, from everyone: enough for the largest test (1024
/// flows each way) arriving together; less where the descriptor limit is lower.
const MAX_CLASSIFYING: usize = 2304;
/// Descriptors kept free for the tests themselves (rings, flows, duplicates for sampling).
const FD_RESERVE: u64 = 32;

/// Binds the port; fails with a clear message when it is taken.
pub fn bind(cfg: &ReceiverConfig) -> Result<TcpListener> {
    // MPTCP where the kernel has it: MPTCP senders get MPTCP, plain ones plain TCP sockets.
    let protocol = crate::sys::mptcp::StreamProtocol::of(crate::sys::mptcp::probe().is_ok());
    gate::listen_as(SocketAddr::new(cfg.bind, cfg.port), cfg.device.as_deref(), protocol, "")
}

/// Serves tests until killed, or until the first test ends with `--once`. Returns whether
/// that test completed (always true without `--once`).
pub fn serve(
    cfg: ReceiverConfig,
    runner: Arc<dyn TestRunner>,
    listener: TcpListener,
    events: EventSink,
) -> Result<bool> {
    let caps = cfg.kernel.clone();
    caps.require_tcp_stream()?;
    let mut cpus = resolve_cpus(cfg.cpus.as_deref())?;
    if cfg.cpus.is_none() {
        // Without --cpus, take CPUs from the top while senders take them from the bottom, so
        // a sender and receiver on one host (loopback, namespaces) do not pile onto CPU 0.
        cpus.reverse();
    }
    let addr = listener.local_addr().map_err(|e| Error::io("reading the bound address", e))?;
    let leftover = if cfg.variants.is_some() { revert_leftover(cfg.port)? } else { Vec::new() };
    let log = LogQueue::start(events, |count| ServerEvent::LogDropped { count })
        .map_err(|e| Error::io("starting the log thread", e))?;
    let log = Arc::new(log);
    let sender = Arc::clone(&log);
    let events: EventSink = Arc::new(move |e| sender.send(e));
    (events)(ServerEvent::Listening { addr });
    if !leftover.is_empty() {
        (events)(ServerEvent::LeftoverReverted { restored: leftover });
    }
    if cfg.psk.is_none() {
        let exposed = exposed_addresses(cfg.bind);
        if !exposed.is_empty() {
            (events)(ServerEvent::Unauthenticated { exposed });
        }
    }
    let (cfg_stop, no_progress) = (cfg.stop.clone(), cfg.limits.no_progress);
    let shared = Arc::new(ReceiverState {
        cfg,
        runner,
        caps,
        cpus,
        events,
        limit_log: RateLimit::default(),
        pending: Mutex::new(HashMap::new()),
        admissions: Arc::default(),
        next_id: AtomicU64::new(1),
        once_done: AtomicBool::new(false),
        once_ok: AtomicBool::new(false),
        variant_active: AtomicBool::new(false),
        test_stop: ServerStop { token: cfg_stop, no_progress },
    });
    let limits = GateLimits {
        total: (gate::open_files_limit().saturating_sub(FD_RESERVE).max(4) as usize).min(MAX_CLASSIFYING),
        per_source: shared.cfg.max_pending_per_source,
        what: "handshake",
        doing: "in their handshake",
        per_source_option: "recv --max-pending-per-source",
    };
    // The gate (the listener and every connection in its handshake) is closed when it returns.
    let outcome = gate::serve(listener, limits, &mut Handshakes(&shared)).map(|ended| match ended {
        Ended::Once(ok) => ok,
        Ended::Stopped(cause) => {
            stop_running(&shared, cause);
            true
        }
    });
    log.flush(Duration::from_secs(2));
    outcome
}

/// Why the accept loop ended.
enum Ended {
    /// With `--once`: the first test ended, complete or not.
    Once(bool),
    /// The receiver's stop token was stopped (a signal), for this reason.
    Stopped(String),
}

/// After a signal, with the listener closed: each running test sees the signal in its
/// sampler, stops its flows, tells its sender and returns its report; the bound covers a
/// sender that never answers.
fn stop_running(shared: &ReceiverState, cause: String) {
    let running = shared.admissions.running();
    (shared.events)(ServerEvent::Stopping { cause, running });
    let deadline = Instant::now() + STOP_GRACE;
    while shared.admissions.running() > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `recv`'s classifier on the gate: a control session's greeting, `--psk-file` exchange and
/// hello, or a data flow's greeting.
struct Handshakes<'a>(&'a Arc<ReceiverState>);

impl Classifier for Handshakes<'_> {
    type State = Handshake;
    type Outcome = Ended;

    fn open(&self, ip: IpAddr) -> std::result::Result<(Handshake, usize), String> {
        let allow = &self.0.cfg.allow;
        if !allow.is_empty() && !allow.iter().any(|c| c.contains(ip)) {
            return Err("source address not in --allow".into());
        }
        Ok((Handshake { step: Step::Magic, msg: Vec::new() }, 4))
    }

    fn classify(&mut self, conn: Conn) -> Verdict<Handshake> {
        classify(self.0, conn)
    }

    /// A test's data flows may all be in their handshake at once beyond
    /// `--max-pending-per-source` (a 1,024-flow test opens them together).
    fn extra_room(&self, source: Source) -> usize {
        self.0.admissions.flows_awaited(source)
    }

    fn refusals(&self) -> &RateLimit {
        &self.0.limit_log
    }

    fn tell(&self, event: GateEvent) {
        let shared = self.0;
        (shared.events)(match event {
            GateEvent::Dropped { peer, reason } => ServerEvent::Dropped { peer, reason },
            GateEvent::Paused { error, open, .. } => ServerEvent::AcceptPaused {
                reason: format!(
                    "{error} ({open} connections in their handshake, {} tests running)",
                    shared.admissions.running()
                ),
            },
            GateEvent::Resumed { paused } => ServerEvent::AcceptResumed { paused },
            GateEvent::Suppressed { source, count, seconds } => ServerEvent::Suppressed { source, count, seconds },
        });
    }

    fn tick(&mut self, _: &Epoll, _: Instant) -> Option<Ended> {
        if self.0.once_done.load(Ordering::Acquire) {
            return Some(Ended::Once(self.0.once_ok.load(Ordering::Acquire)));
        }
        self.0.cfg.stop.cause().map(|cause| Ended::Stopped(cause.to_owned()))
    }
}

/// Where a connection's handshake is.
enum Step {
    /// The 4-byte greeting.
    Magic,
    /// A data flow's cookie, index (and tag, `UBD2` and `UBD3`).
    Data(Greeting),
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

/// A connection's handshake: its step, and the control message reassembled so far.
struct Handshake {
    step: Step,
    msg: Vec<u8>,
}

type Conn = gate::Pending<Handshake>;

/// The bytes the current step asked for are in: the next step, or where the connection goes.
fn classify(shared: &Arc<ReceiverState>, mut conn: Conn) -> Verdict<Handshake> {
    let step = std::mem::replace(&mut conn.state.step, Step::Magic);
    match step {
        Step::Magic => {
            let magic: [u8; 4] = conn.buf[..4].try_into().unwrap_or_default();
            match magic {
                control::CONTROL_MAGIC => {
                    conn.buf.clear();
                    conn.want = 4;
                    conn.state.step = Step::Word(Ctl::First);
                }
                control::DATA_MAGIC => {
                    conn.want = DATA_HELLO_LEN;
                    conn.state.step = Step::Data(Greeting::Plain);
                }
                control::DATA_AUTH_MAGIC => {
                    conn.want = DATA_HELLO_LEN + auth::TAG_LEN;
                    conn.state.step = Step::Data(Greeting::Tagged);
                }
                control::DATA_BOUND_MAGIC => {
                    conn.want = DATA_HELLO_LEN + auth::TAG_LEN;
                    conn.state.step = Step::Data(Greeting::Bound);
                }
                other => {
                    shared.drop_conn(
                        conn.peer,
                        format!(
                            "not a uringbench peer (greeting {:02x}{:02x}{:02x}{:02x})",
                            other[0], other[1], other[2], other[3]
                        ),
                    );
                    return Verdict::Done;
                }
            }
        }
        Step::Data(greeting) => {
            join_flow(shared, conn, greeting);
            return Verdict::Done;
        }
        Step::Word(ctl) => {
            let (len, more) = control::frame_word(conn.buf[..4].try_into().unwrap_or_default());
            let total = conn.state.msg.len() + len;
            if len > MAX_FRAME || total > MAX_FRAME {
                let reason = format!("control message of {total} bytes or more exceeds the {MAX_FRAME}-byte limit");
                shared.refuse(&conn.stream, conn.peer, reason);
                return Verdict::Done;
            }
            conn.buf.clear();
            conn.want = len;
            conn.state.step = Step::Body(ctl, more);
        }
        Step::Body(ctl, more) => {
            conn.state.msg.extend_from_slice(&conn.buf);
            conn.buf.clear();
            conn.want = 4;
            if more {
                conn.state.step = Step::Word(ctl);
                return Verdict::More(conn);
            }
            let msg = match control::decode(&std::mem::take(&mut conn.state.msg)) {
                Ok(m) => m,
                Err(e) => {
                    shared.refuse(&conn.stream, conn.peer, e.message);
                    return Verdict::Done;
                }
            };
            match on_message(shared, conn, ctl, msg) {
                Some((back, next)) => {
                    conn = back;
                    conn.state.step = Step::Word(next);
                }
                None => return Verdict::Done,
            }
        }
    }
    Verdict::More(conn)
}

/// A complete control message during the handshake: the next message wanted, or None when
/// the connection is done with here (handed to a session, or refused).
fn on_message(shared: &Arc<ReceiverState>, conn: Conn, ctl: Ctl, msg: ControlMsg) -> Option<(Conn, Ctl)> {
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
        (Ctl::First, ControlMsg::Hello { version, spec, udp_ports, steer_udp, steer_ntuple }, None) => {
            admit(shared, conn, version, spec, Steers { udp_ports, steer_udp, steer_ntuple }, None);
            None
        }
        (Ctl::Hello { key }, ControlMsg::Hello { version, spec, udp_ports, steer_udp, steer_ntuple }, Some(_)) => {
            admit(shared, conn, version, spec, Steers { udp_ports, steer_udp, steer_ntuple }, Some(key));
            None
        }
        (_, other, _) => {
            shared.refuse(stream, peer, format!("unexpected {} message during the handshake", other.kind()));
            None
        }
    }
}

/// What a session thread is handed.
struct Admitted {
    ctl: TcpStream,
    peer: SocketAddr,
    spec: TestSpec,
    steers: Steers,
    key: Option<SessionKey>,
    slot: SessionSlot,
}

/// What the hello says of the flows' source ports and their steering.
struct Steers {
    udp_ports: Vec<u16>,
    /// The sender would re-announce steered UDP source ports.
    steer_udp: bool,
    /// The sender asks for n-tuple flow rules (`--steer ntuple`).
    steer_ntuple: bool,
}

/// A complete hello: checked against every limit here, on the accept thread (a refusal
/// costs no thread and no socket), then run on a thread of its own.
fn admit(
    shared: &Arc<ReceiverState>,
    conn: Conn,
    version: u32,
    mut spec: TestSpec,
    steers: Steers,
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
    let ports_wanted = spec.data_connections() as usize + spec.probe_connections() as usize;
    let udp_ports = &steers.udp_ports;
    if spec.proto == Proto::Udp && udp_ports.len() != ports_wanted {
        let probe = if spec.latency { " and the latency probe" } else { "" };
        let reason =
            format!("UDP test announces {} source ports for {} flows{probe}", udp_ports.len(), spec.data_connections());
        return shared.refuse(stream, peer, reason);
    }
    let ms = spec.warmup_ms.saturating_add(spec.time_ms).saturating_add(spec.cooldown_ms);
    let max_sessions = if shared.cfg.once { 1 } else { limits.max_sessions };
    let slot = match shared.admissions.admit(peer.ip().to_canonical(), ms, limits, max_sessions) {
        Ok(slot) => slot,
        Err(reason) => return shared.refuse(stream, peer, reason),
    };
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
    let ctl = conn.stream;
    if ctl.set_nonblocking(false).is_err() {
        drop(tx);
        drop(slot);
        return shared.drop_conn(peer, "could not hand the session to its thread");
    }
    let _ = tx.send(Admitted { ctl, peer, spec, steers, key, slot });
}

/// A session's thread: a panic in it ends this session only (its slot and cookie are given
/// back as it unwinds) and is logged as the session's failure.
fn run_admitted(shared: &ReceiverState, work: Admitted) {
    let peer = work.peer;
    let spec = shared.cfg.tally.is_some().then(|| work.spec.clone());
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_session(shared, work)));
    if let Err(panic) = outcome {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".into());
        let error = format!("internal error, session ended: {what}");
        if let (Some(tally), Some(spec)) = (&shared.cfg.tally, &spec) {
            tally.0.ended(peer, spec, TestOutcome::Failed(&error));
        }
        (shared.events)(ServerEvent::SessionFailed { id: 0, peer, error });
    }
}

fn run_session(shared: &ReceiverState, work: Admitted) {
    let Admitted { mut ctl, peer, spec, steers, key, slot } = work;
    let running = slot.others;
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
    // A variant this receiver cannot apply is refused at once, not after the wait below.
    if let Err(reason) = spec.variant.as_deref().map_or(Ok(()), |name| check_variant(shared, name)) {
        return refuse(&ctl, reason);
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
    let sharing = running > 0 || spec.direction == Direction::Bidir;
    let spins = busy_poll == BusyPoll::On || (busy_poll == BusyPoll::Auto && spec.workload.latency_bound() && !sharing);
    let cfg = &shared.cfg;
    let peer_ip = ctl.peer_addr().map(|a| a.ip().to_canonical()).ok();
    let how = (busy_poll, sharing, spec.workload.latency_bound());
    // `--zc-rx IFACE`: a TCP stream received here is served from the queues kept out of RSS,
    // one per thread, its flows put there by n-tuple rules.
    let zc_rules = cfg.fast.zc_rx.as_ref().filter(|z| {
        z.out_of_rss().is_some()
            && spec.proto == Proto::Tcp
            && spec.workload == Workload::Stream
            && spec.direction != Direction::Reverse
    });
    // As many of them as the test has threads (as place_threads counts them), so that each
    // engine queue aims at the queue its thread binds.
    let threads = (spec.queues as usize).min(shared.cpus.len());
    let served = zc_rules.and_then(|z| z.served_by(threads)).or(cfg.nic_queues.as_deref());
    let placed = peer_ip
        .map_or(Ok(None), |ip| TestQueues::toward(ip, served, spec.queues, cfg.placement, spins))
        .and_then(|queues| Ok((place_threads(queues.as_ref(), &shared.cpus, spec.queues, how, &cfg.fast)?, queues)));
    let (placement, mut queues) = match placed {
        Ok(p) => p,
        Err(e) => return refuse(&ctl, e.message),
    };
    if let Some(why) = zc_rules.and_then(|z| zc_refusal(z, queues.as_ref(), placement.threads.len())) {
        return refuse(&ctl, why);
    }
    let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
    // `--steer ntuple` or `--zc-rx IFACE`: the rules are made once the flows arrive, and
    // removed when this drops. Zero-copy queues come first: RSS never brings a flow there.
    let rules = match zc_rules {
        Some(z) => Some(ntuple::NtupleRules::for_zero_copy(z, id)),
        None => steers.steer_ntuple.then(|| ntuple::NtupleRules::for_test(queues.as_ref(), peer_ip, id)),
    };
    let ntuple = match rules {
        None => None,
        Some(Ok(rules)) => Some(rules),
        Some(Err(reason)) => return refuse(&ctl, reason),
    };
    if let Some(q) = queues.as_mut() {
        q.by_rules = ntuple.is_some();
    }
    let mut test = Test {
        ctl: &mut ctl,
        spec: &spec,
        udp_ports: &steers.udp_ports,
        steer_udp: steers.steer_udp,
        ntuple: ntuple.as_ref(),
        placement: &placement,
        queues: queues.as_ref(),
        caps: &shared.caps,
        stop: &shared.test_stop,
        shared,
        id,
        key,
        slot: &slot,
    };
    let outcome = shared.runner.run(&mut test);
    match outcome {
        Ok(ServedReports { received, sent }) => {
            let ok = received.as_ref().is_none_or(|r| r.complete) && sent.as_ref().is_none_or(|r| r.complete);
            let msg =
                ControlMsg::Result { report: received.clone().map(Box::new), reverse: sent.clone().map(Box::new) };
            let delivered = control::write_msg(&ctl, &msg);
            if let Some(tally) = &shared.cfg.tally {
                // Only `recv --metrics` uses the sender's end report: without it nothing waits.
                let sender_retransmits = (delivered.is_ok() && end_report::carries_end_report(&spec))
                    .then(|| end_report::receive(&mut ctl, &spec).ok())
                    .flatten();
                let outcome =
                    TestOutcome::Reports { received: received.as_ref(), sent: sent.as_ref(), sender_retransmits };
                tally.0.ended(peer, &spec, outcome);
            }
            // One line per report: a report that could not be returned says so on its line,
            // unless the line already says why the test is incomplete (a sender that went away
            // mid-test is the usual reason for both).
            let undelivered = delivered.err().map(|e| format!("could not return the report: {e}"));
            if let (Some(error), None, None) = (&undelivered, &received, &sent) {
                (shared.events)(ServerEvent::SessionFailed { id, peer, error: error.clone() });
            }
            for mut report in received.into_iter().chain(sent) {
                if let Some(why) = undelivered.as_ref().filter(|_| report.complete) {
                    report.errors.push(why.clone());
                    report.complete = false;
                }
                (shared.events)(ServerEvent::SessionEnded {
                    id,
                    peer,
                    workload: spec.workload,
                    report: Box::new(report),
                });
            }
            shared.once_ok.store(ok, Ordering::Release);
        }
        Err(e) => {
            let _ = control::write_msg(&ctl, &ControlMsg::Abort { reason: e.message.clone() });
            if let Some(tally) = &shared.cfg.tally {
                tally.0.ended(peer, &spec, TestOutcome::Failed(&e.message));
            }
            (shared.events)(ServerEvent::SessionFailed { id, peer, error: e.message });
        }
    }
    if shared.cfg.once {
        shared.once_done.store(true, Ordering::Release);
    }
}

/// Why a test cannot receive zero-copy from the queues `z` chose out of RSS: fewer queues
/// than receiving threads, or the sender reached through another interface.
fn zc_refusal(z: &crate::uring::zcrx::ZcRx, queues: Option<&TestQueues>, threads: usize) -> Option<String> {
    if let Some(q) = queues.filter(|q| q.topology.iface != z.iface) {
        return Some(format!(
            "--zc-rx {}: this sender is reached through {}, not {}: its flows cannot arrive on the zero-copy queues",
            z.iface, q.topology.iface, z.iface
        ));
    }
    z.too_few_queues(threads)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::receiver::ServerLimits;

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
        fn run(&self, test: &mut Test<'_>) -> Result<ServedReports> {
            if !self.0.swap(true, Ordering::AcqRel) {
                panic!("boom in a session");
            }
            test.accept(None)?;
            Ok(ServedReports::default())
        }
    }

    #[test]
    fn zero_copy_tests_are_refused_off_the_nic_or_with_too_few_queues() {
        use crate::sys::nic_topology::{NicTopology, QueueInfo};
        use crate::uring::zcrx::{ZcQueues, ZcRx};
        let nic = |iface: &str| NicTopology {
            iface: iface.into(),
            driver: Some("mlx5_core".into()),
            numa_node: None,
            node_cpus: vec![],
            rx: (0..8)
                .map(|q| QueueInfo { queue: q, napi_id: None, irq: Some(40 + q), irq_cpus: vec![], xps_cpus: vec![] })
                .collect(),
            tx: vec![],
            rss: None,
            notes: vec![],
        };
        let zc =
            ZcRx { iface: "eth1".into(), ifindex: 3, queues: ZcQueues::OutOfRss { queues: vec![6, 7], rx_queues: 8 } };
        let on_eth1 = TestQueues::plan(nic("eth1"), Some(&[6, 7]), 2, None, false).unwrap().unwrap();
        assert_eq!(on_eth1.nic_queue, vec![6, 7], "threads served from the zero-copy queues");
        assert_eq!(zc_refusal(&zc, Some(&on_eth1), 2), None);
        let e = zc_refusal(&zc, Some(&on_eth1), 3).unwrap();
        assert!(e.contains("3 receiving threads but only 2"), "{e}");
        let on_eth0 = TestQueues::plan(nic("eth0"), None, 2, None, false).unwrap().unwrap();
        let e = zc_refusal(&zc, Some(&on_eth0), 2).unwrap();
        assert!(e.contains("this sender is reached through eth0, not eth1"), "{e}");
    }

    #[test]
    fn a_panic_in_a_session_ends_that_session_only() {
        let cfg = ReceiverConfig {
            bind: "127.0.0.1".parse().unwrap(),
            port: 0,
            busy_poll: BusyPoll::Off,
            once: true,
            limits: ServerLimits { max_sessions: 1, ..ServerLimits::default() },
            ..ReceiverConfig::new(KernelCaps::detect().unwrap())
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
            control::write_msg(
                &s,
                &ControlMsg::Hello {
                    version: PROTOCOL_VERSION,
                    spec,
                    udp_ports: vec![],
                    steer_udp: false,
                    steer_ntuple: false,
                },
            )
            .unwrap();
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
}
