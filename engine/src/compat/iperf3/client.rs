//! `send --iperf3`: our sender against an unmodified `iperf3 -s`, reported as an ordinary
//! [`StreamReport`] whose receiver figures are the iperf3 server's own results.
//!
//! The control connection speaks iperf3's exchange (docs/protocol.md, "iperf3"); the data
//! connections carry the cookie, then the stream workload's own sending half moves the bytes
//! (io_uring, zero-copy where it pays), so CPU, TCP_INFO and zero-copy figures are ours.
//!
//! An iperf3 server stops counting, and closes the data connections, the moment it reads
//! TEST_END; whatever it has not read by then is lost to its count. So at the end of the
//! window we first wait until the peer's kernel acknowledged every byte (`SIOCOUTQ` 0 on
//! every flow), then give its reading loop [`READ_GRACE`] to empty its receive buffers, and
//! only then send TEST_END: the server's byte count is then all we sent.

use super::control::Control;
use crate::base::error::{Error, Result};
use crate::base::spec::{Direction, Proto, TestSpec};
use crate::compat::{connect_tcp, far_side, resolve, stream_report, Intervals};
use crate::metrics::figures::{Role, SideReport, StreamReport};
use crate::runtime::placement::plan;
use crate::runtime::placement::resolve_cpus;
use crate::session::driver::StreamHalves;
use crate::session::sender::{decide_zerocopy, SendOptions};
use crate::sys::netpath::PathProbe;
use crate::sys::probe::KernelCaps;
use crate::sys::sockopt;
use crate::wire::iperf3::{
    new_cookie, stream_id, DataProto, Params, Results, State, StreamResult, IPERF3_PORT, MAX_RESULTS_LEN, MAX_STREAMS,
    MAX_TCP_BLOCK,
};
use crate::workload::stream::TcpHalves;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// How long the server may take for each step of its handshake and of the results exchange.
const STEP_TIMEOUT: Duration = Duration::from_secs(10);
/// After every byte is acknowledged, the server's loop has this long to read it.
const READ_GRACE: Duration = Duration::from_millis(250);
/// The longest wait for the acknowledgements of the last bytes.
const ACK_WAIT: Duration = Duration::from_secs(5);

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
        let s = &self.stream;
        s.error
            .clone()
            .or_else(|| s.sender.errors.first().cloned())
            .or_else(|| s.receiver.as_ref().and_then(|r| r.errors.first().cloned()))
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
    if spec.proto != Proto::Tcp {
        return Err(Error::usage("--iperf3 runs TCP tests only in this version (UDP is not implemented yet)"));
    }
    if spec.direction != Direction::Forward {
        return Err(Error::usage("--iperf3 runs forward tests only in this version (no -R or --bidir yet)"));
    }
    if spec.flows_per_queue != 1 {
        return Err(Error::usage("--flows-per-queue is not available with --iperf3: -P N gives iperf3's N streams"));
    }
    if spec.flows() > MAX_STREAMS {
        return Err(Error::usage(format!("-P {} is more than iperf3's {MAX_STREAMS} streams", spec.flows())));
    }
    if spec.len > MAX_TCP_BLOCK {
        return Err(Error::usage(format!("-l {} is more than iperf3's TCP block limit of {MAX_TCP_BLOCK}", spec.len)));
    }
    if spec.tuning.bytes.is_some() {
        return Err(Error::usage("-n/--bytes is not available with --iperf3 (the test is timed)"));
    }
    let t = &spec.tuning;
    Ok(Params {
        proto: DataProto::Tcp,
        omit: whole_seconds(spec.warmup_ms, "--warmup (sent as iperf3's omit, -O)")?,
        time: whole_seconds(spec.time_ms, "-t")?.max(1),
        parallel: spec.flows(),
        len: spec.len,
        rate_bps: spec.rate_bps / u64::from(spec.flows().max(1)),
        fq_rate_bps: t.fq_rate_bps.unwrap_or(0),
        window: t.window.unwrap_or(0),
        mss: t.mss.unwrap_or(0),
        tos: t.tos.unwrap_or(0),
        congestion: t.congestion.clone(),
        nodelay: t.nodelay,
        client_version: Some(format!("uringbench {}", env!("CARGO_PKG_VERSION"))),
        ..Params::default()
    })
}

/// Runs our sender against an unmodified iperf3 server at `opts.target`. Errors before data
/// flows (refused, unreachable, a server that refuses the parameters) come back as `Err`;
/// afterwards problems are in the report.
pub fn run_send(opts: &SendOptions) -> Result<Iperf3Report> {
    let mut spec = opts.spec.clone();
    spec.cooldown_ms = 0;
    let params = params_for(&spec)?;
    spec.validate()?;
    let caps = KernelCaps::detect()?;
    caps.require_tcp_stream()?;
    let placement = plan(spec.queues, &resolve_cpus(opts.cpus.as_deref())?, opts.busy_poll, false, false, &opts.fast)?;
    let target = resolve(&opts.target, opts.port, opts.local.family)?;
    let server = server_command(target);
    let path = PathProbe::to(target.ip(), spec.flows());
    let live = Intervals::new(&opts.stop);
    let peer = |e: String| Error::peer(format!("iperf3 server at {target}: {e}"));

    let cookie = new_cookie();
    let mut ctl = Control::new(connect_tcp(target, &opts.local.for_control(), &server)?);
    ctl.stream.write_all(&cookie).map_err(|e| peer(format!("writing the cookie: {e}")))?;
    expect(&mut ctl, State::ParamExchange).map_err(peer)?;
    ctl.send_json(&params.to_json()).map_err(peer)?;
    expect(&mut ctl, State::CreateStreams).map_err(peer)?;
    let mut flows = Vec::with_capacity(spec.flows() as usize);
    for flow in 0..spec.flows() {
        let local = opts.local.for_flow(flow).map_err(Error::usage)?;
        let mut stream = connect_tcp(target, &local, &server)?;
        stream.write_all(&cookie).map_err(|e| peer(format!("opening stream {}: {e}", stream_id(flow as usize))))?;
        flows.push((flow, stream));
    }
    expect(&mut ctl, State::TestStart).map_err(peer)?;
    expect(&mut ctl, State::TestRunning).map_err(peer)?;

    let zc = decide_zerocopy(spec.zerocopy, &caps, &path, spec.len)?;
    let watch: Vec<TcpStream> = flows.iter().filter_map(|(_, s)| s.try_clone().ok()).collect();
    let halves =
        TcpHalves { spec: &spec, placement: &placement, caps: &caps, zc, iface: path.interface().map(str::to_string) };
    let mut sender = halves.send(flows, Instant::now(), &live)?;
    sender
        .path
        .push_str("; iperf3 data streams (cookie first), TEST_END once the server's kernel acknowledged every byte");
    let mut notes = Vec::new();
    if let Some(n) = wait_acknowledged(&watch) {
        notes.push(format!(
            "{n} bytes were still unacknowledged after {:.0} s: the server may not count them",
            ACK_WAIT.as_secs_f64()
        ));
    }
    std::thread::sleep(READ_GRACE);
    drop(watch);

    let (receiver, server_results, error) = match finish(&mut ctl, &spec, &sender) {
        Ok(results) => (Some(server_side(&spec, &results)), Some(results), None),
        Err(e) => (None, None, Some(format!("iperf3 server at {target}: {e}"))),
    };
    if params.omit > 0 {
        notes.push(format!(
            "the first {} s are omitted on both ends, each by its own clock: the byte counts of the two ends differ by what moved between the two starts",
            params.omit
        ));
    }
    let stream = stream_report(spec, target, sender, receiver, error, &path, &live);
    Ok(Iperf3Report { stream, params, server: server_results, notes })
}

/// Reads the next state and insists on `want`, with what the server meant otherwise.
fn expect(ctl: &mut Control, want: State) -> std::result::Result<(), String> {
    match ctl.read_state(STEP_TIMEOUT)? {
        s if s == want => Ok(()),
        State::AccessDenied => Err("access denied: it is running another test (iperf3 serves one at a time)".into()),
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

/// TEST_END, then the results exchange: ours first, then the server's.
fn finish(ctl: &mut Control, spec: &TestSpec, sender: &SideReport) -> std::result::Result<Results, String> {
    ctl.send_state(State::TestEnd)?;
    match ctl.read_state(STEP_TIMEOUT)? {
        State::ExchangeResults => {}
        other => return Err(format!("expected ExchangeResults after TEST_END, got {other:?}")),
    }
    ctl.send_json(&our_results(spec, sender).to_json())?;
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

/// Our side's results as iperf3 shows them on the server: per stream what we sent in the
/// window, its retransmits, and our queue threads' CPU.
fn our_results(spec: &TestSpec, sender: &SideReport) -> Results {
    let secs = sender.window_seconds;
    let (user, system) =
        sender.cpu.threads.iter().fold((0.0, 0.0), |(u, s), t| (u + t.user_seconds, s + t.system_seconds));
    let pct = |x: f64| if secs > 0.0 { 100.0 * x / secs } else { 0.0 };
    let streams = (0..spec.flows())
        .map(|flow| {
            let q = spec.queue_of_flow(flow) as usize;
            StreamResult {
                id: stream_id(flow as usize),
                // Without an omitted start, all we sent, as iperf3 counts its own side.
                bytes: sender.queues.get(q).map_or(0, |q| if spec.warmup_ms == 0 { q.total_bytes } else { q.bytes }),
                retransmits: sender
                    .tcp_flows_end
                    .get(flow as usize)
                    .and_then(|i| i.as_ref())
                    .map(|i| u64::from(i.total_retrans)),
                end_s: secs,
                ..StreamResult::default()
            }
        })
        .collect();
    Results {
        cpu_util: [pct(user + system), pct(user), pct(system)],
        sender_has_retransmits: Some(true),
        congestion_used: spec.tuning.congestion.clone(),
        streams,
    }
}

/// The receiver side from the server's results: each flow's stream, by iperf3's stream id.
fn server_side(spec: &TestSpec, results: &Results) -> SideReport {
    let mut bytes = Vec::new();
    let mut missing = 0;
    let mut seconds: f64 = 0.0;
    for flow in 0..spec.flows() {
        match results.stream(stream_id(flow as usize)) {
            Some(s) => {
                bytes.push((spec.queue_of_flow(flow), s.bytes));
                seconds = seconds.max(s.end_s - s.start_s);
            }
            None => missing += 1,
        }
    }
    let mut side = far_side(spec, Role::Receiver, &bytes, seconds, "iperf3");
    side.path = format!("iperf3 server results ({} streams)", results.streams.len());
    if missing > 0 {
        side.errors.push(format!("the iperf3 server's results lack {missing} of our {} streams", spec.flows()));
    }
    side.complete = side.errors.is_empty();
    side
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(refused(TestSpec { len: 2 << 20, ..spec }).contains("block"));
    }

    #[test]
    fn server_results_become_the_receiver_side() {
        let spec = TestSpec { queues: 2, ..TestSpec::default() };
        let stream = |id, bytes| StreamResult { id, bytes, end_s: 2.5, ..StreamResult::default() };
        let results = Results { streams: vec![stream(1, 100), stream(3, 200)], ..Results::default() };
        let side = server_side(&spec, &results);
        assert!(side.complete);
        assert_eq!((side.bytes(), side.total_bytes(), side.window_seconds), (300, 300, 2.5));
        assert_eq!(side.queues[1].bytes, 200, "stream 3 is the second flow");
        let partial = server_side(&spec, &Results { streams: vec![stream(1, 100)], ..Results::default() });
        assert!(!partial.complete && partial.errors[0].contains("1 of our 2"));
    }
}
