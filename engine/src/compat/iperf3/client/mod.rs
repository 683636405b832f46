//! `send --iperf3`: our sender against an unmodified `iperf3 -s`, reported as an ordinary
//! [`StreamReport`] whose receiver figures are the iperf3 server's own results.
//!
//! The control connection speaks iperf3's exchange (docs/protocol.md, "iperf3"); the data
//! connections carry the cookie, then the stream workload's own sending half moves the bytes
//! (io_uring, zero-copy where it pays), so CPU, TCP_INFO and zero-copy figures are ours.
//! With `-m` the parameters carry iperf3's `mptcp` key and the data connections are MPTCP
//! sockets (the control connection stays TCP, as iperf3's): a 3.16+ server listens for them
//! with MPTCP, an older one with plain TCP, and they fall back to it, which the report says.
//!
//! An iperf3 server stops counting, and closes the data connections, the moment it reads
//! TEST_END; whatever it has not read by then is lost to its count. So at the end of the
//! window we first wait until the peer's kernel acknowledged every byte (`SIOCOUTQ` 0 on
//! every flow), then give its reading loop [`READ_GRACE`] to empty its receive buffers, and
//! only then send TEST_END: the server's byte count is then all we sent.

mod udp;

use super::auth::{unix_now, ClientAuth};
use super::control::Control;
use super::our_results;
use super::udp::by_sender;
use crate::base::error::{Error, Result};
use crate::base::spec::{Direction, Proto, TestSpec};
use crate::compat::{client_halves, connect_stream, connect_tcp, far_side, resolve, stream_report, Intervals};
use crate::metrics::data_path::DataPath;
use crate::metrics::figures::{Role, SideReport, StreamReport};
use crate::runtime::placement::plan;
use crate::runtime::placement::resolve_cpus;
use crate::runtime::side::halves::StreamHalves;
use crate::session::sender::SendOptions;
use crate::sys::mptcp::{MptcpConnection, StreamProtocol};
use crate::sys::netpath::PathProbe;
use crate::sys::sockopt;
use crate::wire::iperf3::{
    error_code, new_cookie, server_error_text, stream_id, DataProto, Params, Results, State, IPERF3_PORT,
    MAX_RESULTS_LEN, MAX_STREAMS, MAX_TCP_BLOCK, MAX_UDP_BLOCK, MIN_UDP_BLOCK,
};
use crate::workload::stream::RecvEnd;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};
use udp::{send_udp, UdpTest};

/// How long the server may take for each step of its handshake and of the results exchange.
const STEP_TIMEOUT: Duration = Duration::from_secs(10);
/// After every byte is acknowledged, the server's loop has this long to read it.
pub(super) const READ_GRACE: Duration = Duration::from_millis(250);
/// The longest wait for the acknowledgements of the last bytes.
const ACK_WAIT: Duration = Duration::from_secs(5);
/// Past the planned end, how long the streams the server sends on may take to end.
const END_WAIT: Duration = Duration::from_secs(10);
/// How long a busy server (`ACCESS_DENIED`: iperf3 serves one test at a time) is asked again,
/// every [`BUSY_RETRY`]: in a series (`--repeat`, sweep, experiment, a fleet's rounds) the
/// server can still be ending the previous run's test when the next one connects.
const BUSY_WAIT: Duration = Duration::from_secs(5);
const BUSY_RETRY: Duration = Duration::from_millis(250);

/// A test against an iperf3 server: the native report, plus what only iperf3 mode knows.
#[derive(Debug, Clone)]
pub struct Iperf3Report {
    pub stream: StreamReport,
    /// What we asked of the server.
    pub params: Params,
    /// The server's own results, as it sent them; `None` when the exchange failed.
    pub server: Option<Results>,
    pub notes: Vec<String>,
}

impl Iperf3Report {
    pub fn complete(&self) -> bool {
        self.stream.complete()
    }

    /// The first problem, as one line.
    pub fn first_error(&self) -> Option<String> {
        self.stream.first_error()
    }
}

/// `iperf3 -s`, with `-p` when the port is not the default: what should run on the target.
fn server_command(target: SocketAddr) -> String {
    if target.port() == IPERF3_PORT {
        "iperf3 -s".into()
    } else {
        format!("iperf3 -s -p {}", target.port())
    }
}

/// What `send --iperf3` asks of the server: the spec in iperf3's terms. Refuses what iperf3
/// cannot express, with the reason.
pub fn params_for(spec: &TestSpec) -> Result<Params> {
    let whole_seconds = |ms: u64, what: &str| {
        if ms % 1000 == 0 {
            Ok(ms / 1000)
        } else {
            Err(Error::usage(format!("{what} must be whole seconds with --iperf3 (iperf3 counts in seconds)")))
        }
    };
    if spec.proto == Proto::Udp && !(MIN_UDP_BLOCK..=MAX_UDP_BLOCK).contains(&spec.len) {
        return Err(Error::usage(format!(
            "-l {} is outside iperf3's UDP datagram sizes {MIN_UDP_BLOCK}..={MAX_UDP_BLOCK}",
            spec.len
        )));
    }
    if spec.flows_per_queue != 1 {
        return Err(Error::usage("--flows-per-queue is not available with --iperf3: -P N gives iperf3's N streams"));
    }
    if spec.flows() > MAX_STREAMS {
        return Err(Error::usage(format!("-P {} is more than iperf3's {MAX_STREAMS} streams", spec.flows())));
    }
    if spec.proto == Proto::Tcp && spec.len > MAX_TCP_BLOCK {
        return Err(Error::usage(format!("-l {} is more than iperf3's TCP block limit of {MAX_TCP_BLOCK}", spec.len)));
    }
    if spec.tuning.bytes.is_some() {
        return Err(Error::usage("-n/--bytes is not available with --iperf3 (the test is timed)"));
    }
    let t = &spec.tuning;
    Ok(Params {
        proto: if spec.proto == Proto::Udp { DataProto::Udp } else { DataProto::Tcp },
        omit: whole_seconds(spec.warmup_ms, "--warmup (sent as iperf3's omit, -O)")?,
        time: whole_seconds(spec.time_ms, "-t")?.max(1),
        parallel: spec.flows(),
        len: spec.len,
        reverse: spec.direction == Direction::Reverse,
        bidirectional: spec.direction == Direction::Bidir,
        rate_bps: spec.rate_bps / u64::from(spec.flows().max(1)),
        burst: spec.burst.unwrap_or(0),
        fq_rate_bps: t.fq_rate_bps.unwrap_or(0),
        window: t.window.unwrap_or(0),
        mss: t.mss.unwrap_or(0),
        tos: t.tos.unwrap_or(0),
        congestion: t.congestion.clone(),
        nodelay: t.nodelay,
        mptcp: t.mptcp,
        client_version: Some(format!("uringbench {}", env!("CARGO_PKG_VERSION"))),
        ..Params::default()
    })
}

/// What a client asks of an iperf3 server beyond the test itself (iperf3 client options that
/// change nothing on our side of the test).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Iperf3Asks {
    /// `--gsro` (3.21+): UDP GSO on the sending end, GRO on the receiving end. Our own loops
    /// use them wherever the kernel takes them; this asks the server for them (`gso`, `gro`
    /// and their sizes in the parameters, which servers before 3.21 ignore).
    pub gsro: bool,
    /// `--get-server-output`: the server's own output comes back in its results (text, or
    /// its whole JSON document when it runs with `-J`).
    pub server_output: bool,
    /// `--dont-fragment` (UDP): IPv4's DF bit on every datagram of the streams we send, and
    /// the key that asks the server for it on the streams it sends (`-R`, `--bidir`).
    pub dont_fragment: bool,
}

/// Runs our sender against an unmodified iperf3 server at `opts.target`. Errors before data
/// flows (refused, unreachable, a server that refuses the parameters) come back as `Err`;
/// afterwards problems are in the report.
pub fn run_send(opts: &SendOptions) -> Result<Iperf3Report> {
    run_send_as(opts, None)
}

/// [`run_send`], authenticating to a server that requires it (`iperf3 -s
/// --rsa-private-key-path`) with `auth`'s credentials.
pub fn run_send_as(opts: &SendOptions, auth: Option<&ClientAuth>) -> Result<Iperf3Report> {
    run_send_asking(opts, auth, Iperf3Asks::default())
}

/// [`run_send_as`], asking the server for what `asks` names.
pub fn run_send_asking(opts: &SendOptions, auth: Option<&ClientAuth>, asks: Iperf3Asks) -> Result<Iperf3Report> {
    let mut spec = opts.spec.clone();
    spec.cooldown_ms = 0;
    let mut params = params_for(&spec)?;
    if asks.gsro {
        if spec.proto != Proto::Udp {
            return Err(Error::usage("--gsro asks for UDP GSO and GRO: it needs a UDP test (-u)"));
        }
        if !spec.gso {
            return Err(Error::usage("--gsro asks for GSO, which --no-gso turns off: give one of them"));
        }
        (params.gso, params.gro) = (true, true);
    }
    params.get_server_output = asks.server_output;
    if asks.dont_fragment && spec.proto != Proto::Udp {
        return Err(Error::usage("--dont-fragment sets IPv4's DF bit on UDP datagrams: it needs a UDP test (-u)"));
    }
    params.dont_fragment = asks.dont_fragment;
    spec.validate()?;
    let caps = opts.kernel.clone();
    caps.require_tcp_stream()?;
    if spec.tuning.mptcp {
        caps.require_mptcp()?;
    }
    let placement = plan(spec.queues, &resolve_cpus(opts.cpus.as_deref())?, opts.busy_poll, false, false, &opts.fast)?;
    let target = resolve(&opts.target, opts.port, opts.local.family)?;
    let server = server_command(target);
    let path = PathProbe::to(target.ip(), spec.flows());
    let live = Intervals::new(&opts.stop);
    let peer = |e: String| Error::peer(format!("iperf3 server at {target}: {e}"));

    let cookie = new_cookie();
    let busy_until = Instant::now() + BUSY_WAIT;
    let mut ctl = loop {
        let mut ctl = Control::new(connect_tcp(target, &opts.local.for_control(), &server)?);
        ctl.stream.write_all(&cookie).map_err(|e| peer(format!("writing the cookie: {e}")))?;
        match ctl.read_state(STEP_TIMEOUT).map_err(peer)? {
            State::AccessDenied if Instant::now() < busy_until && !opts.stop.is_stopped() => {
                std::thread::sleep(BUSY_RETRY);
            }
            State::AccessDenied => {
                return Err(peer(format!("{} (asked for {} s)", BUSY, BUSY_WAIT.as_secs())));
            }
            state => break check(state, State::ParamExchange).map(|()| ctl).map_err(peer)?,
        }
    };
    // Stamped as late as iperf3 stamps it: the server holds the time against its clock.
    params.authtoken = auth.map(|a| a.token(unix_now())).transpose()?;
    ctl.send_json(&params.to_json()).map_err(peer)?;
    expect(&mut ctl, State::CreateStreams).map_err(|e| peer(with_auth_hint(e, auth)))?;
    if spec.proto == Proto::Udp {
        let test = UdpTest { opts, spec, params, target, placement, path, live };
        return send_udp(test, ctl);
    }
    let mut flows = Vec::with_capacity(spec.data_connections() as usize);
    let protocol = StreamProtocol::of(spec.tuning.mptcp);
    for flow in 0..spec.data_connections() {
        let local = opts.local.for_flow(flow).map_err(Error::usage)?;
        let mut stream = connect_stream(target, &local, protocol, &server)?;
        stream.write_all(&cookie).map_err(|e| peer(format!("opening stream {}: {e}", stream_id(flow as usize))))?;
        flows.push((flow, stream));
    }
    expect(&mut ctl, State::TestStart).map_err(peer)?;
    expect(&mut ctl, State::TestRunning).map_err(peer)?;

    let halves = client_halves(&spec, &placement, &caps, &path)?;
    // Our sending streams connect first (ids 1, 3, ...), then the ones the server sends on.
    let (tx, rx) = by_sender(flows, spec.flows(), params.reverse, params.bidirectional);
    let rx_first_id = if params.bidirectional { spec.flows() as usize } else { 0 };
    let watch: Vec<TcpStream> = tx.iter().filter_map(|(_, s)| s.try_clone().ok()).collect();
    let mut notes = Vec::new();
    let t0 = Instant::now();
    let (sent, received, ended) = std::thread::scope(|s| {
        let receiving = (!rx.is_empty()).then(|| {
            s.spawn(|| {
                halves.receive_until(
                    rx,
                    t0,
                    &live,
                    RecvEnd::Until { until: t0 + spec.total() + END_WAIT, ended: &|| false },
                )
            })
        });
        let sent = (!tx.is_empty()).then(|| halves.send(tx, t0, &live));
        if sent.is_some() {
            if let Some(n) = wait_acknowledged(&watch) {
                notes.push(format!(
                    "{n} bytes were still unacknowledged after {:.0} s: the server may not count them",
                    ACK_WAIT.as_secs_f64()
                ));
            }
            std::thread::sleep(READ_GRACE);
        } else {
            // Only the server sends: the end is still ours to say, at the planned end of our
            // receiving half's window (which starts on its own thread, a little after t0).
            while Instant::now() < t0 + spec.total() + READ_GRACE && !opts.stop.is_stopped() {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        // The server closes every stream on TEST_END: what it sent us reaches EOF.
        let ended = ctl.send_state(State::TestEnd);
        let received = receiving.map(|h| h.join().unwrap_or_else(|_| Err(Error::peer("the receiving half panicked"))));
        (sent.transpose(), received.transpose(), ended)
    });
    drop(watch);
    let (mut sent, mut received) = (sent?, received?);
    for side in sent.iter_mut() {
        side.add_path_notes([
            "iperf3 data streams (cookie first), TEST_END once the server's kernel acknowledged every byte".into(),
        ]);
    }
    for side in received.iter_mut() {
        side.add_path_notes(["iperf3 data streams (cookie first) sent by the server until our TEST_END".into()]);
    }
    if params.mptcp {
        let conns = sent.iter().chain(received.iter()).flat_map(|s| s.mptcp.iter());
        notes.extend(mptcp_note(conns));
    }
    let ours = our_results(&spec, [(sent.as_ref(), 0), (received.as_ref(), rx_first_id)], None);
    let (server_results, error) = match ended.and_then(|()| exchange(&mut ctl, &ours)) {
        Ok(results) => (Some(results), None),
        Err(e) => (None, Some(format!("iperf3 server at {target}: {e}"))),
    };
    let far = |role, first_id| server_results.as_ref().map(|r| server_side(&spec, r, role, first_id));
    if params.omit > 0 {
        notes.push(format!(
            "the first {} s are omitted on both ends, each by its own clock: the byte counts of the two ends differ by what moved between the two starts",
            params.omit
        ));
    }
    let forward =
        sent.map(|s| stream_report(spec.clone(), target, s, far(Role::Receiver, 0), error.clone(), &path, &live));
    let reverse = received.map(|r| {
        let sender = far(Role::Sender, rx_first_id).unwrap_or_else(|| no_far_sender(&spec));
        stream_report(spec.clone(), target, sender, Some(r), error.clone(), &path, &live)
    });
    Ok(Iperf3Report { stream: both_ways(forward, reverse)?, params, server: server_results, notes })
}

/// A refusal of the parameters, with what to check when it is the server's "test authorization
/// failed" (which says nothing of the cause, by design).
fn with_auth_hint(error: String, auth: Option<&ClientAuth>) -> String {
    if !error.contains(&server_error_text(error_code::AUTH)) {
        return error;
    }
    match auth {
        None => format!("{error}: the server requires credentials (--username, --rsa-public-key-path)"),
        Some(a) => format!(
            "{error}: user '{}': check the password (IPERF3_PASSWORD), the public key, that the clocks agree within the server's --time-skew-threshold, and for a 3.17+ server without --use-pkcs1-padding, --rsa-padding oaep",
            a.user()
        ),
    }
}

/// With `-m`: how many data connections are MPTCP ones and how many fell back to plain TCP,
/// as our kernel says (an iperf3 server tells nothing of its own sockets); `None` when every
/// one is MPTCP (the report lists their subflows).
fn mptcp_note<'a>(conns: impl Iterator<Item = &'a MptcpConnection>) -> Option<String> {
    let (mut mptcp, mut fallback) = (0, 0);
    for c in conns {
        if c.fallback {
            fallback += 1;
        } else {
            mptcp += 1;
        }
    }
    (fallback > 0).then(|| {
        format!(
            "MPTCP (-m): {fallback} of {} data connections fell back to plain TCP: the server did not answer MP_CAPABLE \
             (an iperf3 before 3.16, or one built without MPTCP, ignores -m and listens with plain TCP)",
            mptcp + fallback
        )
    })
}

/// The server's sending side when its results never came: nothing known.
fn no_far_sender(spec: &TestSpec) -> SideReport {
    far_side(spec, Role::Sender, &[], 0.0, "iperf3")
}

/// One report of the test's directions: the forward one with the reverse inside (`--bidir`),
/// or whichever ran.
pub(super) fn both_ways(forward: Option<StreamReport>, reverse: Option<StreamReport>) -> Result<StreamReport> {
    match (forward, reverse) {
        (Some(mut f), Some(r)) => {
            f.reverse = Some(Box::new(r));
            Ok(f)
        }
        (Some(f), None) => Ok(f),
        (None, Some(r)) => Ok(r),
        (None, None) => Err(Error::usage("a test with no streams")),
    }
}

/// What a server that answers `ACCESS_DENIED` means.
const BUSY: &str = "access denied: it is running another test (iperf3 serves one at a time)";

/// Reads the next state and insists on `want`, with what the server meant otherwise.
pub(super) fn expect(ctl: &mut Control, want: State) -> std::result::Result<(), String> {
    check(ctl.read_state(STEP_TIMEOUT)?, want)
}

/// Insists that `state` is `want`, with what the server meant otherwise.
fn check(state: State, want: State) -> std::result::Result<(), String> {
    match state {
        s if s == want => Ok(()),
        State::AccessDenied => Err(BUSY.into()),
        State::ServerTerminate => Err("the server ended the test (killed?)".into()),
        other => Err(format!("expected {want:?}, got {other:?}")),
    }
}

/// Waits until the peer acknowledged every byte on every flow; the bytes still waiting when
/// [`ACK_WAIT`] ran out, if any.
fn wait_acknowledged(flows: &[TcpStream]) -> Option<u64> {
    let until = Instant::now() + ACK_WAIT;
    loop {
        let waiting: u64 = flows.iter().filter_map(|s| sockopt::unacked_bytes(s.as_raw_fd()).ok()).map(u64::from).sum();
        if waiting == 0 {
            return None;
        }
        if Instant::now() >= until {
            return Some(waiting);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// After TEST_END: the results exchange, ours first, then the server's.
pub(super) fn exchange(ctl: &mut Control, ours: &Results) -> std::result::Result<Results, String> {
    match ctl.read_state(STEP_TIMEOUT)? {
        State::ExchangeResults => {}
        other => return Err(format!("expected ExchangeResults after TEST_END, got {other:?}")),
    }
    ctl.send_json(&ours.to_json())?;
    let text = ctl.read_json(MAX_RESULTS_LEN, STEP_TIMEOUT, "the server's results")?;
    let results = Results::parse(&text)?;
    match ctl.read_state(STEP_TIMEOUT)? {
        State::DisplayResults => {}
        other => return Err(format!("expected DisplayResults, got {other:?}")),
    }
    // The server ends its test on this byte; a failure to write it changes no figure.
    let _ = ctl.send_state(State::IperfDone);
    Ok(results)
}

/// The far side, as the server's results tell it: each flow's stream by iperf3's stream id
/// (from `first_id`), playing `role`; a sending server's retransmits are its TCP figure.
pub(super) fn server_side(spec: &TestSpec, results: &Results, role: Role, first_id: usize) -> SideReport {
    let mut bytes = Vec::new();
    let mut missing = 0;
    let mut seconds: f64 = 0.0;
    let mut retransmits: u64 = 0;
    for flow in 0..spec.flows() {
        match results.stream(stream_id(first_id + flow as usize)) {
            Some(s) => {
                bytes.push((spec.queue_of_flow(flow), s.bytes));
                seconds = seconds.max(s.end_s - s.start_s);
                retransmits = s.retransmits.map_or(retransmits, |r| retransmits.saturating_add(r));
            }
            None => missing += 1,
        }
    }
    let mut side = results_side(spec, results, role, (&bytes, seconds), missing);
    if role == Role::Sender {
        side.tcp.retransmitted_segments = retransmits;
    }
    side
}

/// The far side from the server's `results`: per flow its bytes (with the flow's queue) over
/// `seconds`, playing `role`; `missing` of our streams absent from its results are an error.
pub(super) fn results_side(
    spec: &TestSpec,
    results: &Results,
    role: Role,
    (bytes, seconds): (&[(u32, u64)], f64),
    missing: usize,
) -> SideReport {
    let mut side = far_side(spec, role, bytes, seconds, "iperf3");
    side.set_data_path(DataPath::Iperf3Results { streams: results.streams.len() });
    if missing > 0 {
        side.errors.push(format!("the iperf3 server's results lack {missing} of our {} streams", spec.flows()));
    }
    side.complete = side.errors.is_empty();
    side
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::iperf3::StreamResult;

    #[test]
    fn params_follow_the_spec_and_refuse_what_iperf3_cannot_say() {
        let spec = TestSpec { queues: 4, time_ms: 5000, warmup_ms: 2000, len: 65536, ..TestSpec::default() };
        let p = params_for(&spec).unwrap();
        assert_eq!((p.parallel, p.time, p.omit, p.len, p.proto), (4, 5, 2, 65536, DataProto::Tcp));
        let refused = |s: TestSpec| params_for(&s).unwrap_err().to_string();
        assert!(refused(TestSpec { time_ms: 1500, ..spec.clone() }).contains("whole seconds"));
        assert!(refused(TestSpec { warmup_ms: 250, ..spec.clone() }).contains("--warmup"));
        assert!(refused(TestSpec { queues: 129, ..spec.clone() }).contains("128"));
        assert!(refused(TestSpec { flows_per_queue: 2, ..spec.clone() }).contains("--flows-per-queue"));
        assert!(refused(TestSpec { len: 2 << 20, ..spec.clone() }).contains("block"));
        let mut m = spec;
        m.tuning.mptcp = true;
        assert!(params_for(&m).unwrap().mptcp, "-m is iperf3's mptcp key");
    }

    #[test]
    fn a_fallback_to_tcp_is_said_with_its_count() {
        let conn = |fallback| MptcpConnection { fallback, ..MptcpConnection::default() };
        assert_eq!(mptcp_note([conn(false), conn(false)].iter()), None, "all MPTCP: the subflows say it");
        let note = mptcp_note([conn(true), conn(false)].iter()).unwrap();
        assert!(note.contains("1 of 2 data connections fell back to plain TCP"), "{note}");
    }

    #[test]
    fn server_results_become_the_receiver_side() {
        let spec = TestSpec { queues: 2, ..TestSpec::default() };
        let stream = |id, bytes| StreamResult { id, bytes, end_s: 2.5, ..StreamResult::default() };
        let results = Results { streams: vec![stream(1, 100), stream(3, 200)], ..Results::default() };
        let side = server_side(&spec, &results, Role::Receiver, 0);
        assert!(side.complete);
        assert_eq!((side.bytes(), side.total_bytes(), side.window_seconds), (300, 300, 2.5));
        assert_eq!(side.queues[1].bytes, 200, "stream 3 is the second flow");
        let partial =
            server_side(&spec, &Results { streams: vec![stream(1, 100)], ..Results::default() }, Role::Receiver, 0);
        let sending = server_side(
            &spec,
            &Results { streams: vec![stream(4, 7), stream(5, 8)], ..Results::default() },
            Role::Sender,
            2,
        );
        assert_eq!(
            (sending.bytes(), sending.role),
            (15, Role::Sender),
            "--bidir, -P 2: ours are 1 and 3, the server's 4 and 5"
        );
        assert!(!partial.complete && partial.errors[0].contains("1 of our 2"));
    }
}
