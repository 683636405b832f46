//! `recv --iperf3`: serves unmodified `iperf3 -c` clients (TCP and UDP, any direction), one test at a time
//! as `iperf3 -s` does, on one port (5201 by default).
//!
//! Every accepted connection waits on the accept gate ([`crate::session::gate`]) until it
//! has sent its 37-byte cookie, within the gate's deadline and per-source caps: an idle or
//! slow connection costs a descriptor, never a thread. Then:
//! - no test running: the connection is a new test's control connection, served by a thread
//!   of its own ([`serve_test`]): parameters (bounded, checked against our limits), the
//!   streams, the data counted by the stream workload's receiving half, the results;
//! - a test running and the cookie is its own: one of its data connections, handed over;
//! - otherwise: ACCESS_DENIED and closed, as iperf3 answers while busy.
//!
//! Where the kernel has MPTCP the listener is an MPTCP one, as `recv`'s: the data connections
//! of a `-m` client (IPPROTO_MPTCP sockets) are MPTCP connections, a plain client's are plain
//! TCP sockets. (iperf3's own server remakes its listener as MPTCP for a `-m` test; one
//! listener that takes both serves the same clients without closing the port.)
//!
//! The end: the client sends TEST_END and then its results, which say how many bytes it
//! sent; once those bytes have arrived (at most [`DRAIN_WAIT`]) each data connection is shut
//! for reading, so the loops read to its end: our count and the client's are the same bytes.
//! Then we answer with our results.

mod udp;

use super::auth::{unix_now, ServerAuth};
use super::client::{both_ways, server_side};
use super::control::Control;
use super::our_results;
use super::udp::by_sender;
use crate::base::error::{Error, Result};
use crate::base::spec::{Direction, Proto, TestSpec, Tuning, Workload};
use crate::compat::{shown, stream_report_as, Intervals, PeerEvent, PeerEventSink, PeerRecvOptions};
use crate::metrics::figures::{Role, Roles, SideReport, StreamReport};
use crate::runtime::placement::Placement;
use crate::runtime::placement::{plan, resolve_cpus};
use crate::runtime::side::halves::StreamHalves;
use crate::session::gate::{self, Classifier, GateEvent, Verdict};
use crate::session::live::StartInfo;
use crate::session::logq::RateLimit;
use crate::sys::epoll::Epoll;
use crate::sys::mptcp::{MptcpConnection, StreamProtocol};
use crate::sys::netpath::PathProbe;
use crate::sys::probe::KernelCaps;
use crate::sys::tcpinfo::TcpInfo;
use crate::wire::iperf3::{
    check_cookie, error_code, stream_id, DataProto, Params, Refusal, Results, State, COOKIE_LEN, MAX_PARAMS_LEN,
    MAX_RESULTS_LEN, MAX_STREAMS,
};
use crate::workload::stream::{RecvEnd, TcpHalves};
use std::io::Write;
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use udp::{serve_udp, udp_listener};

/// How long a client may take for each step of its handshake and of the results exchange.
pub(super) const STEP_TIMEOUT: Duration = Duration::from_secs(10);
/// After the client's results, how long its last bytes may take to arrive.
const DRAIN_WAIT: Duration = Duration::from_secs(3);
/// After the flows are shut for reading, how long their loops may take to reach EOF before
/// they are cut (so a loop that missed the wake-up cannot hold the client).
const CUT_GRACE: Duration = Duration::from_secs(2);
/// Past the planned end, how long we wait for TEST_END before ending the test ourselves.
const END_GRACE: Duration = Duration::from_secs(10);
/// Our window ends this long before the client's planned end: the client starts its clock
/// when TEST_START reaches it, a little before ours starts, and stops sending on its own
/// clock. (The byte counts cover the whole test, TEST_RUNNING to TEST_END, either way.)
const WINDOW_MARGIN: Duration = Duration::from_millis(250);
/// Refusals are told once per address per window of the refusal log (10 s).
const TELLS_PER_WINDOW: u32 = 1;

/// What `recv --iperf3` tells, as it happens.
pub type Iperf3Event = PeerEvent<Iperf3TestSummary>;

/// Receives the events of [`serve`]; called from several threads.
pub type Iperf3EventSink = PeerEventSink<Iperf3TestSummary>;

/// What a client's `--get-server-output` gets back of a finished test, as `iperf3 -s`
/// decides it: by the server's own output, not the client's (its `-J` is not on the wire).
/// The renderers live in report/; the caller hands them in.
#[derive(Clone, Copy)]
pub struct ServerOutput {
    /// Our test line (`server_output_text`), as a server printing text sends its lines.
    pub text: fn(&Iperf3TestSummary) -> String,
    /// With the receiver writing JSON (`-J`, `--json-stream`): the iperf3-shaped document of
    /// what it measured (`server_output_json`), as `iperf3 -s -J` sends its own; from the
    /// test, its parameters and the results we give the client.
    pub json: Option<fn(&Iperf3TestSummary, &Params, &Results) -> serde_json::Value>,
}

/// One finished client test.
#[derive(Debug, Clone, Default)]
pub struct Iperf3TestSummary {
    pub id: u64,
    pub peer: Option<IpAddr>,
    pub client_version: Option<String>,
    pub streams: u32,
    /// Seconds the client omitted at the start (`-O`).
    pub omit: u64,
    /// Bytes we received over the whole test, and the seconds from TEST_RUNNING to TEST_END.
    pub bytes: u64,
    pub seconds: f64,
    /// What the client's results say it sent (after its omitted start), when they came.
    pub client_sent: Option<u64>,
    /// A UDP test (`-u`).
    pub udp: bool,
    /// -R, --bidir: bytes we sent, and what the client's results say it received.
    pub sent: Option<u64>,
    pub client_received: Option<u64>,
    /// -u with -R, --bidir: the datagrams the client's results say it lost of ours.
    pub client_lost: Option<u64>,
    /// The client's `-b RATE/COUNT` (writes back to back per pacing step; 0 without: with
    /// `-R`, `--bidir` our sending loops burst so too) and `--dont-fragment`: how what we
    /// counted was sent (a sender in bursts loses more in small buffers; DF makes a datagram
    /// over the path's MTU an error at its sending end).
    pub burst: u32,
    pub dont_fragment: bool,
    /// Our wall clock when we told the client TEST_START, Unix milliseconds.
    pub started_unix_ms: Option<u64>,
    /// The client's `--gsro` (3.21): it asked for UDP GSO on the sender, GRO on the receiver.
    pub gsro: bool,
    /// UDP: whether our receive loop ran with GRO and our send loop with GSO, which both use
    /// wherever the kernel takes them, asked or not (`None`: we did not receive, or send).
    pub gro: Option<bool>,
    pub gso: Option<bool>,
    /// The client's end of each data stream: where what we sent went, where what we
    /// received came from.
    pub data_peers: Vec<SocketAddr>,
    /// The user the client authenticated as (`--rsa-private-key-path`).
    pub user: Option<String>,
    /// `-m` (TCP): the client asked for MPTCP data connections; our end of each, as the
    /// kernel says after the test (MPTCP_INFO: its subflows, or a fallback to plain TCP), of
    /// the streams we received and of those we sent (a plain TCP socket is left out).
    pub mptcp: bool,
    pub mptcp_received: Vec<MptcpConnection>,
    pub mptcp_sent: Vec<MptcpConnection>,
    pub errors: Vec<String>,
    /// The test as the native report has it (`recv --iperf3 -J`), once it ran: each
    /// direction's sides, ours from our loops, the client's from its results.
    pub report: Option<StreamReport>,
}

impl Iperf3TestSummary {
    pub fn bits_per_second(&self) -> f64 {
        crate::metrics::figures::rate(self.bytes, self.seconds)
    }
}

/// Binds the listener on `opts.port` (port 0: any free port), an MPTCP one where the kernel
/// has MPTCP; another listener there is a usage error.
pub fn bind_receiver(opts: &PeerRecvOptions) -> Result<TcpListener> {
    let addr = SocketAddr::new(opts.bind, opts.port);
    let protocol = StreamProtocol::of(opts.kernel.mptcp_unavailable.is_none());
    gate::listen_as(addr, None, protocol, " (an `iperf3 -s`?)")
}

/// Whether `listener` accepts an MPTCP client's connections as MPTCP ones (an MPTCP
/// listener: [`bind_receiver`]'s where the kernel has MPTCP), or why not.
fn mptcp_served(listener: &TcpListener, kernel: &KernelCaps) -> std::result::Result<(), String> {
    let protocol = socket2::SockRef::from(listener).protocol().ok().flatten();
    if protocol == Some(socket2::Protocol::MPTCP) {
        return Ok(());
    }
    Err(kernel.mptcp_unavailable.clone().unwrap_or_else(|| "this receiver's listener is a plain TCP one".into()))
}

/// What a test thread needs from the serving loop.
#[derive(Clone)]
pub(super) struct TestContext {
    pub(super) opts: PeerRecvOptions,
    events: Iperf3EventSink,
    kernel: KernelCaps,
    pub(super) cpus: Vec<usize>,
    max_streams: u32,
    /// The one refusal log: at most [`TELLS_PER_WINDOW`] lines per address per window,
    /// whether the gate, the serving loop or a test's thread refuses.
    refusals: Arc<RateLimit>,
    /// Our lines for a client that asked for them (`--get-server-output`).
    output: ServerOutput,
    /// iperf3's RSA authentication, when the receiver requires it.
    auth: Option<Arc<ServerAuth>>,
    /// Whether a `-m` client's data connections will be MPTCP ones, or why not.
    mptcp: std::result::Result<(), String>,
}

impl TestContext {
    /// Tells that the test of `params` starts on `ctl` with our threads at `placement`, and
    /// makes its live sink, which tells each of our intervals as it closes.
    pub(super) fn started(
        &self,
        spec: &TestSpec,
        params: &Params,
        ctl: &TcpStream,
        placement: &Placement,
    ) -> Intervals {
        if let (Ok(local), Ok(peer)) = (ctl.local_addr(), ctl.peer_addr()) {
            let spec = directed(spec, params);
            let far = shown(peer).ip().to_string();
            let roles = if spec.direction == Direction::Reverse { Roles::outbound(far) } else { Roles::inbound(far) };
            (self.events)(PeerEvent::Started(StartInfo {
                spec,
                target: shown(local).to_string(),
                roles,
                this_placement: placement.summary.clone(),
                far_placement: "iperf3 client".into(),
            }));
        }
        let events = Arc::clone(&self.events);
        Intervals::serving(&self.opts).telling(Box::new(move |role, n, figures| {
            events(PeerEvent::Interval { role, n, figures: figures.clone() })
        }))
    }

    /// Tells a refusal of `peer`, through the refusal log's rate limit.
    pub(super) fn refused(&self, proto: Proto, peer: SocketAddr, reason: String) {
        if self.refusals.allow(peer.ip().to_canonical(), Instant::now()) {
            (self.events)(Iperf3Event::Refused { proto, peer: shown(peer), reason });
        }
    }
}

/// The test being served: its cookie (its data connections carry it), where they go, and
/// its thread, which returns whether the test was complete (`None`: refused).
struct Active {
    cookie: [u8; COOKIE_LEN],
    peer: SocketAddr,
    streams: SyncSender<TcpStream>,
    thread: JoinHandle<Option<bool>>,
}

struct Serving {
    ctx: TestContext,
    active: Option<Active>,
    next_id: u64,
    /// Whether the first finished test was complete (what `once` returns).
    first_done: Option<bool>,
}

impl Serving {
    /// Joins the test thread once it ended, and keeps the first finished test's outcome.
    fn reap(&mut self) {
        if !self.active.as_ref().is_some_and(|a| a.thread.is_finished()) {
            return;
        }
        if let Some(active) = self.active.take() {
            if let Some(complete) = active.thread.join().unwrap_or(Some(false)) {
                self.first_done.get_or_insert(complete);
            }
        }
    }

    fn tell_event(&self, event: Iperf3Event) {
        (self.ctx.events)(event);
    }
}

impl Classifier for Serving {
    type State = ();
    type Outcome = bool;

    fn open(&self, _: IpAddr) -> std::result::Result<((), usize), String> {
        Ok(((), COOKIE_LEN))
    }

    fn classify(&mut self, conn: gate::Pending<()>) -> Verdict<()> {
        if let Err(reason) = check_cookie(&conn.buf) {
            self.drop_conn(conn.peer, reason);
            return Verdict::Done;
        }
        self.reap();
        if self.ctx.opts.once && self.first_done.is_some() {
            self.drop_conn(conn.peer, "the receiver served its one test (--once) and is ending".into());
            return Verdict::Done;
        }
        if let Some(a) = &self.active {
            if conn.buf[..] == a.cookie[..] {
                // The cookie travels in the clear: a data connection is the test's only from
                // its client's address (unless --flows-from-any-address, for a NAT).
                let client = a.peer.ip().to_canonical();
                if conn.peer.ip().to_canonical() != client && !self.ctx.opts.flows_from_any_address {
                    let reason =
                        format!("a data connection with the cookie of the test from {client}, from another address");
                    self.drop_conn(conn.peer, reason);
                } else if a.streams.try_send(conn.stream).is_err() {
                    self.drop_conn(conn.peer, "a data connection beyond its test's streams".into());
                }
            } else {
                // iperf3's answer while busy; a client that reads it says the server is busy.
                let _ = (&conn.stream).write_all(&[State::AccessDenied.byte()]);
                let reason = format!("busy with the test from {} (iperf3 serves one test at a time)", shown(a.peer));
                self.ctx.refused(Proto::Tcp, conn.peer, reason);
            }
            return Verdict::Done;
        }
        self.next_id += 1;
        let (tx, rx) = mpsc::sync_channel(2 * MAX_STREAMS as usize);
        let (ctx, id, peer) = (self.ctx.clone(), self.next_id, conn.peer);
        let spawned = std::thread::Builder::new()
            .name("ub-iperf3-test".into())
            .spawn(move || run_test(&ctx, id, conn.stream, peer, rx));
        match spawned {
            Ok(thread) => {
                let mut cookie = [0u8; COOKIE_LEN];
                cookie.copy_from_slice(&conn.buf);
                self.active = Some(Active { cookie, peer, streams: tx, thread });
                Verdict::Done
            }
            Err(e) => Verdict::Pause("starting a test thread", e),
        }
    }

    fn refusals(&self) -> &RateLimit {
        &self.ctx.refusals
    }

    fn tell(&self, event: GateEvent) {
        if let Some(event) = PeerEvent::from_gate(event) {
            self.tell_event(event);
        }
    }

    fn tick(&mut self, _epoll: &Epoll, _now: Instant) -> Option<bool> {
        self.reap();
        match self.first_done {
            Some(complete) if self.ctx.opts.once => Some(complete),
            _ => self.ctx.opts.stop.is_stopped().then_some(true),
        }
    }
}

/// Serves iperf3 clients until stopped, or until the first finished test with `once`; with
/// `auth`, only those whose credentials it lets in (as `iperf3 -s --rsa-private-key-path`).
/// Returns whether that test was complete (always true without `once`).
pub fn serve(
    opts: PeerRecvOptions,
    listener: TcpListener,
    events: Iperf3EventSink,
    output: ServerOutput,
    auth: Option<ServerAuth>,
) -> Result<bool> {
    let kernel = opts.kernel.clone();
    kernel.require_tcp_stream()?;
    let mut cpus = resolve_cpus(opts.cpus.as_deref())?;
    if opts.cpus.is_none() {
        // Senders take CPUs from the bottom: on one host, start from the top (as `recv` does).
        cpus.reverse();
    }
    let addr = listener.local_addr().map_err(|e| Error::io("reading the bound address", e))?;
    let caps = opts.caps();
    let authorized_users = auth.as_ref().map(|a| a.users());
    events(Iperf3Event::Listening(crate::compat::Listening {
        tcp: Some(addr),
        udp: None,
        ports: 1,
        caps,
        authorized_users,
    }));
    let stop = opts.stop.clone();
    let max_streams = caps.flows.min(MAX_STREAMS);
    let refusals = Arc::new(RateLimit::new(TELLS_PER_WINDOW));
    let auth = auth.map(Arc::new);
    let mptcp = mptcp_served(&listener, &kernel);
    let ctx = TestContext { opts, events, kernel, cpus, max_streams, refusals, output, auth, mptcp };
    let mut serving = Serving { ctx, active: None, next_id: 0, first_done: None };
    let limits = caps.gate_limits("iperf3 cookie", "sending their cookie");
    let ok = gate::serve(listener, limits, &mut serving)?;
    if let Some(active) = serving.active.take() {
        // The test sees the stop through its live sink and its deadlines; give it a moment.
        stop.stop("the receiver is stopping");
        let until = Instant::now() + Duration::from_secs(3);
        while !active.thread.is_finished() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    Ok(ok)
}

/// Why a test did not finish: refused before it started (told as a refusal), or failed.
enum Ended {
    Refused(Proto, String),
    Failed(String),
}

/// One client test on its own thread; tells how it ended. `Some(complete)` for a test that
/// ran, `None` for a refusal.
fn run_test(
    ctx: &TestContext,
    id: u64,
    ctl: TcpStream,
    peer: SocketAddr,
    streams: Receiver<TcpStream>,
) -> Option<bool> {
    let mut summary = Iperf3TestSummary { id, peer: Some(peer.ip().to_canonical()), ..Default::default() };
    let _ = ctl.set_nonblocking(false);
    let mut ctl = Control::new(ctl);
    match serve_test(ctx, &mut ctl, &streams, &mut summary) {
        Ok(()) => {}
        Err(Ended::Refused(proto, reason)) => {
            ctx.refused(proto, peer, reason);
            return None;
        }
        // A stop is told by the loops too ("interrupted at 2.5 s ... (SIGINT on the receiver)"):
        // the same cause once.
        Err(Ended::Failed(e)) if summary.errors.iter().any(|known| known.contains(&e)) => {}
        Err(Ended::Failed(e)) => summary.errors.push(e),
    }
    let complete = summary.errors.is_empty();
    (ctx.events)(Iperf3Event::TestDone(summary));
    Some(complete)
}

/// Refuses the test the way iperf3 clients understand (SERVER_ERROR with iperf3's error
/// number, whose text the client prints), with our reason for the log.
fn refuse(ctl: &mut Control, proto: Proto, refusal: Refusal) -> Ended {
    let mut msg = vec![State::ServerError.byte()];
    msg.extend_from_slice(&refusal.code.to_be_bytes());
    msg.extend_from_slice(&refusal.errno.to_be_bytes());
    let _ = ctl.stream.write_all(&msg);
    Ended::Refused(proto, refusal.reason)
}

/// The test's course on its control connection, from the parameters to IPERF_DONE.
fn serve_test(
    ctx: &TestContext,
    ctl: &mut Control,
    streams: &Receiver<TcpStream>,
    summary: &mut Iperf3TestSummary,
) -> std::result::Result<(), Ended> {
    ctl.send_state(State::ParamExchange).map_err(Ended::Failed)?;
    let text = ctl
        .read_json(MAX_PARAMS_LEN, STEP_TIMEOUT, "the parameters")
        .map_err(|e| refuse(ctl, Proto::Tcp, Refusal::new(error_code::RECV_PARAMS, e)))?;
    let mut params = Params::parse(&text).map_err(|r| refuse(ctl, Proto::Tcp, r))?;
    let proto = if params.proto == DataProto::Udp { Proto::Udp } else { Proto::Tcp };
    // As iperf3's server: the credentials before anything else the parameters ask.
    if let Some(auth) = &ctx.auth {
        let user = auth.check(params.authtoken.as_deref(), unix_now()).map_err(|r| refuse(ctl, proto, r))?;
        summary.user = Some(user);
    }
    check_params(ctx, &params).map_err(|r| refuse(ctl, proto, r))?;
    cap_rate(ctx, &mut params);
    summary.client_version = params.client_version.clone();
    summary.streams = params.parallel;
    summary.omit = params.omit;
    summary.udp = proto == Proto::Udp;
    summary.burst = params.burst;
    summary.dont_fragment = params.dont_fragment;
    summary.gsro = params.gso || params.gro;
    if summary.udp {
        // The first stream's socket listens before the client is told to connect.
        let listener = udp_listener(ctl).map_err(|e| Ended::Failed(format!("binding the UDP port: {e}")))?;
        ctl.send_state(State::CreateStreams).map_err(Ended::Failed)?;
        serve_udp(ctx, ctl, &params, listener, summary).map_err(Ended::Failed)?;
        ctl.send_state(State::DisplayResults).map_err(Ended::Failed)?;
        // The client's last word; its absence changes no figure.
        let _ = ctl.read_state(STEP_TIMEOUT);
        return Ok(());
    }
    ctl.send_state(State::CreateStreams).map_err(Ended::Failed)?;
    let mut flows = Vec::with_capacity(params.parallel as usize);
    let deadline = Instant::now() + STEP_TIMEOUT;
    while flows.len() < params.connections() as usize {
        let left = deadline.saturating_duration_since(Instant::now());
        match streams.recv_timeout(left) {
            Ok(s) => {
                let _ = s.set_nonblocking(false);
                flows.push((flows.len() as u32, s));
            }
            Err(_) => {
                return Err(Ended::Failed(format!(
                    "{} of {} data connections came within {} s",
                    flows.len(),
                    params.connections(),
                    STEP_TIMEOUT.as_secs()
                )))
            }
        }
    }
    summary.data_peers = flows.iter().filter_map(|(_, s)| s.peer_addr().ok()).map(shown).collect();
    let spec = test_spec(&params, Proto::Tcp);
    let failed = |e: Error| Ended::Failed(e.to_string());
    let placement = plan(spec.queues, &ctx.cpus, ctx.opts.busy_poll, false, false, &ctx.opts.fast).map_err(failed)?;
    let halves = TcpHalves {
        spec: &spec,
        placement: &placement,
        caps: &ctx.kernel,
        zc: (false, String::new()),
        iface: facing(&ctl.stream),
        queues: None,
    };
    let live = ctx.started(&spec, &params, &ctl.stream, &placement);
    // The client's sending streams connect first, then (-R, --bidir) the ones we send on.
    let n = params.parallel;
    let (rx, tx) = by_sender(flows, n, params.reverse, params.bidirectional);
    let tx_first_id = if params.bidirectional { n as usize } else { 0 };
    let watch: Vec<TcpStream> = rx.iter().filter_map(|(_, s)| s.try_clone().ok()).collect();
    let sending: Vec<TcpStream> = tx.iter().filter_map(|(_, s)| s.try_clone().ok()).collect();
    summary.started_unix_ms = Some(unix_now_ms());
    ctl.send_state(State::TestStart).map_err(Ended::Failed)?;
    ctl.send_state(State::TestRunning).map_err(Ended::Failed)?;
    let t0 = Instant::now();
    let until = t0 + ctx.opts.max_time + END_GRACE;
    // Set once the flows are shut: a loop that has not seen its EOF by then is cut.
    let cut_at: std::sync::Mutex<Option<Instant>> = std::sync::Mutex::new(None);
    let cut = || cut_at.lock().unwrap_or_else(|p| p.into_inner()).is_some_and(|t| Instant::now() >= t);
    let (received, sent, client) = std::thread::scope(|s| {
        let receiving = (!rx.is_empty())
            .then(|| s.spawn(|| halves.receive_until(rx, t0, &live, RecvEnd::Until { until, ended: &cut })));
        // We stop sending a little before the client's clock ends the test, so that it has
        // read all we sent when it says TEST_END.
        let sender = (!tx.is_empty()).then(|| s.spawn(|| halves.send(tx, t0, &live)));
        let client = await_end(ctl, until, &live);
        summary.seconds = t0.elapsed().as_secs_f64();
        // However the control connection ended, the flows end now: once the bytes the client
        // says it sent have arrived, each is shut for reading, and its loop reads to EOF.
        let want = client.as_ref().map_or(0, |r| sent_by(r, n as usize, 0));
        wait_arrived(&watch, want);
        for s in &watch {
            let _ = s.shutdown(Shutdown::Read);
        }
        // A client that ended early no longer reads: our sending ends with the connections.
        for s in sending.iter().filter(|_| client.is_err()) {
            let _ = s.shutdown(Shutdown::Both);
        }
        *cut_at.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now() + CUT_GRACE);
        let panicked = || Err(Error::peer("a half of the test panicked"));
        let received = receiving.map(|h| h.join().unwrap_or_else(|_| panicked()));
        let sent = sender.map(|h| h.join().unwrap_or_else(|_| panicked()));
        (received, sent, client)
    });
    let (mut received, sent) = (received.transpose().map_err(failed)?, sent.transpose().map_err(failed)?);
    summary.bytes = received.as_ref().map_or(0, SideReport::total_bytes);
    summary.sent = sent.as_ref().map(SideReport::total_bytes);
    let client_sent = client.as_ref().ok().map(|c| sent_by(c, n as usize, 0));
    if spec.tuning.mptcp {
        summary.mptcp = true;
        summary.mptcp_received = received.as_ref().map(|s| s.mptcp.clone()).unwrap_or_default();
        // Numbered in the order the client opened them, as its streams are (--bidir: ours last).
        let in_client_order = |c: &MptcpConnection| MptcpConnection { flow: c.flow + tx_first_id as u32, ..c.clone() };
        summary.mptcp_sent = sent.iter().flat_map(|s| s.mptcp.iter().map(in_client_order)).collect();
    }
    if let Some(side) = received.as_mut() {
        // A loop cut after the last byte the client sent had nothing more to count.
        if client_sent != Some(summary.bytes) || summary.omit > 0 {
            summary.errors.extend(side.errors.iter().cloned());
        } else {
            side.errors.clear();
            side.complete = true;
        }
    }
    summary.errors.extend(sent.iter().flat_map(|s| s.errors.iter().cloned()));
    let client = client.map_err(Ended::Failed)?;
    summary.client_sent = received.as_ref().and(client_sent);
    summary.client_received = sent.as_ref().map(|_| sent_by(&client, n as usize, tx_first_id));
    let mut ours = our_results(&spec, [(received.as_ref(), 0), (sent.as_ref(), tx_first_id)], Some(summary.seconds));
    summary.report = test_report(&spec, &params, &ctl.stream, [received, sent], &client, &live);
    with_output(ctx, &params, summary, &mut ours);
    ctl.send_json(&ours.to_json()).map_err(Ended::Failed)?;
    ctl.send_state(State::DisplayResults).map_err(Ended::Failed)?;
    // The client's last word; its absence changes no figure.
    let _ = ctl.read_state(STEP_TIMEOUT);
    Ok(())
}

/// The client's test as the native report has it: the client's forward direction (it sends,
/// we receive: `sides[0]`) with the reverse one (we send: `sides[1]`) inside under `--bidir`;
/// our sides from our loops (with their intervals), the client's from its `results`. The
/// report's target is our address the client reached, its far host the client.
pub(super) fn test_report(
    spec: &TestSpec,
    params: &Params,
    ctl: &TcpStream,
    [received, sent]: [Option<SideReport>; 2],
    results: &Results,
    live: &Intervals,
) -> Option<StreamReport> {
    let (Ok(local), Ok(peer)) = (ctl.local_addr(), ctl.peer_addr()) else { return None };
    let (local, peer) = (shown(local), shown(peer));
    let spec = directed(spec, params);
    let tx_first_id = if params.bidirectional { params.parallel as usize } else { 0 };
    let path = PathProbe::to(peer.ip(), spec.flows());
    let theirs = |role, first_id| server_side(&spec, results, role, first_id);
    let report =
        |ours, sender, receiver| stream_report_as(ours, spec.clone(), peer, sender, receiver, None, &path, live);
    let forward = received.map(|ours| report(Role::Receiver, theirs(Role::Sender, 0), Some(ours)));
    let reverse = sent.map(|ours| report(Role::Sender, ours, Some(theirs(Role::Receiver, tx_first_id))));
    let mut report = both_ways(forward, reverse).ok()?;
    report.target = local.to_string();
    if let Some(r) = report.reverse.as_deref_mut() {
        r.target = local.to_string();
    }
    Some(report)
}

/// The interface the kernel routes the client's address through: its counters are our side's
/// host figures, as `recv` samples them.
pub(super) fn facing(ctl: &TcpStream) -> Option<String> {
    let peer = ctl.peer_addr().ok()?;
    crate::sys::hostinfo::route_to(peer.ip().to_canonical()).ok().map(|r| r.ifname)
}

/// Our side's `spec` with the direction the client asked for (its `-R`, `--bidir`).
fn directed(spec: &TestSpec, params: &Params) -> TestSpec {
    let direction = match (params.bidirectional, params.reverse) {
        (true, _) => Direction::Bidir,
        (false, true) => Direction::Reverse,
        (false, false) => Direction::Forward,
    };
    TestSpec { direction, ..spec.clone() }
}

/// Our side of the client's test: one flow per stream, our window ending [`WINDOW_MARGIN`]
/// before the client's.
pub(super) fn test_spec(params: &Params, proto: Proto) -> TestSpec {
    TestSpec {
        proto,
        workload: Workload::Stream,
        queues: params.parallel,
        flows_per_queue: 1,
        time_ms: (params.time.max(1) * 1000).saturating_sub(WINDOW_MARGIN.as_millis() as u64),
        warmup_ms: params.omit * 1000,
        // iperf3's server reports every second (a client's -i is its own, not on the wire).
        interval_ms: 1000,
        cooldown_ms: 0,
        len: params.len,
        rate_bps: params.rate_bps.saturating_mul(u64::from(params.parallel)),
        // The client's `-b RATE/N`: our sending loops burst as iperf3's server would.
        burst: (params.burst > 0).then_some(params.burst),
        // The receive buffer is the receiver's part of -w; the rest is the sender's. A UDP
        // test ignores -m, as iperf3 does.
        tuning: Tuning {
            window: (params.window > 0).then_some(params.window),
            mptcp: params.mptcp && proto == Proto::Tcp,
            ..Tuning::default()
        },
        ..TestSpec::default()
    }
}

/// Our limits and what we serve: a refusal carries iperf3's error number for it.
fn check_params(ctx: &TestContext, p: &Params) -> std::result::Result<(), Refusal> {
    unserved(p)?;
    if p.mptcp && p.proto == DataProto::Tcp {
        if let Err(why) = &ctx.mptcp {
            // What iperf3's server answers when it cannot make its MPTCP listener.
            let refusal = Refusal::new(error_code::STREAM_LISTEN, format!("MPTCP (-m): {why}"));
            return Err(refusal.with_errno(libc::ENOPROTOOPT));
        }
    }
    let asked = Duration::from_secs(p.time.saturating_add(p.omit));
    if asked > ctx.opts.max_time || (p.time == 0 && p.bytes == 0 && p.blocks == 0) {
        return Err(Refusal::new(
            error_code::DURATION,
            format!(
                "a test of {} s (omit included) is over --max-time {} s",
                asked.as_secs(),
                ctx.opts.max_time.as_secs()
            ),
        ));
    }
    if p.parallel > ctx.max_streams {
        return Err(Refusal::new(
            error_code::NUM_STREAMS,
            format!("{} streams is over the limit of {}", p.parallel, ctx.max_streams),
        ));
    }
    if let Some(max) = ctx.opts.max_rate_bps {
        let show = |r: u64| crate::base::units::format_bits_per_second(r as f64);
        let asked = p.rate_bps.saturating_mul(u64::from(p.parallel));
        if asked > max {
            let why = format!(
                "-b {} over {} streams is over this receiver's {} (recv --max-rate)",
                show(p.rate_bps),
                p.parallel,
                show(max)
            );
            return Err(Refusal::new(error_code::TOTAL_RATE, why));
        }
        // The client paces its own sending: with no -b it would send as fast as it can.
        if asked == 0 && (!p.reverse || p.bidirectional) {
            let why = format!(
                "a test the client sends without -b, this receiver allows up to {} (recv --max-rate)",
                show(max)
            );
            return Err(Refusal::new(error_code::TOTAL_RATE, why));
        }
    }
    Ok(())
}

/// The options `recv --iperf3` does not give, each refused with the iperf3 error number
/// whose text names it. `-b RATE/COUNT` is served both ways (the client's sending, our
/// sending loops' bursts); so is `--dont-fragment`; our UDP loops use GRO and GSO whether
/// `--gsro` asked or not, and the test line says so.
fn unserved(p: &Params) -> std::result::Result<(), Refusal> {
    let not = |code: i32, what: &str| Err(Refusal::new(code, format!("{what} is not served by `recv --iperf3`")));
    if p.server_affinity.is_some() {
        return not(error_code::AFFINITY, "-A's server CPU (recv --cpus places our threads)");
    }
    if p.server_sends() && p.flowlabel > 0 {
        return not(error_code::FLOW_LABEL, "-L's flow label on the streams we send (-R, --bidir)");
    }
    Ok(())
}

/// With `--get-server-output`, our output for the test goes back in our results, as iperf3's
/// server sends its own: our document when we write JSON (the client prints it under "Server
/// JSON output:"), else our test line ("Server output:").
pub(super) fn with_output(ctx: &TestContext, p: &Params, summary: &Iperf3TestSummary, ours: &mut Results) {
    if !p.get_server_output {
        return;
    }
    match ctx.output.json {
        Some(document) => ours.server_output_json = Some(document(summary, p, ours)),
        None => ours.server_output_text = Some((ctx.output.text)(summary)),
    }
}

/// Our wall clock in Unix milliseconds.
pub(super) fn unix_now_ms() -> u64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
}

/// With `--max-rate`, a test we send (`-R`) that asks for no limit is sent at the limit,
/// shared by its streams (as `recv` sends a reverse test).
fn cap_rate(ctx: &TestContext, p: &mut Params) {
    if let Some(max) = ctx.opts.max_rate_bps {
        if p.rate_bps == 0 {
            p.rate_bps = (max / u64::from(p.parallel.max(1))).max(1);
        }
    }
}

/// Waits until the flows' kernels received `want` bytes of data beyond the cookies, at most
/// [`DRAIN_WAIT`]. An MPTCP flow's are its connection's, over all its subflows (its TCP_INFO
/// is its first subflow's).
fn wait_arrived(flows: &[TcpStream], want: u64) {
    let cookies = (COOKIE_LEN * flows.len()) as u64;
    let until = Instant::now() + DRAIN_WAIT;
    let received = |fd| crate::sys::mptcp::bytes_received(fd).or_else(|| TcpInfo::read(fd).map(|i| i.bytes_received));
    while Instant::now() < until {
        let got: u64 = flows.iter().filter_map(|s| received(s.as_raw_fd())).sum();
        if got >= want + cookies {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Waits for TEST_END (until `until`, or until the test's flows are over the no-progress
/// limit, or the receiver is stopped), then reads the client's results; them, or why there
/// are none.
pub(super) fn await_end(ctl: &mut Control, until: Instant, live: &Intervals) -> std::result::Result<Results, String> {
    // The control connection is quiet while the data flows: it is watched in slices, so that
    // a client that announced a test and sends (or reads) nothing loses it at the limit, and a
    // stopped receiver (Ctrl-C) tells the test's end within its grace instead of losing it.
    loop {
        if let Some(reason) = crate::runtime::side::Live::stopped(live) {
            return Err(reason);
        }
        let left = until.saturating_duration_since(Instant::now());
        let slice = left.min(Duration::from_millis(250)).as_millis() as i32;
        if left.is_zero() || crate::session::control::readable(&ctl.stream, slice) {
            break;
        }
    }
    let left = until.saturating_duration_since(Instant::now());
    match ctl.read_state(left)? {
        State::TestEnd => {}
        State::ClientTerminate => return Err("the client ended the test early (interrupted)".into()),
        other => return Err(format!("expected TEST_END, got {other:?}")),
    }
    ctl.send_state(State::ExchangeResults)?;
    let text = ctl.read_json(MAX_RESULTS_LEN, STEP_TIMEOUT, "the client's results")?;
    Results::parse(&text)
}

/// What the client's results say its `count` streams from iperf3 stream index `first` moved.
pub(super) fn sent_by(results: &Results, count: usize, first: usize) -> u64 {
    (first..first + count).filter_map(|i| results.stream(stream_id(i))).map(|s| s.bytes).sum()
}
