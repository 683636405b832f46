//! Request/response (`uringbench rr`): transactions per second and their round-trip latency
//! percentiles, the latency half of network testing (what netperf TCP_RR, neper tcp_rr and
//! sockperf ping-pong answer).
//!
//! It rides the stream test's control channel and data connections: `recv` answers every
//! request (its queue threads spin while they have a CPU each, since latency is the point),
//! and both ends count transactions per queue, so the client can print both sides. Latency
//! is the client's: from a request's submission to the last byte of its response.

use super::udp_stream;
use crate::base::error::{Error, Result};
use crate::base::spec::{Direction, Proto, TestSpec, Workload};
use crate::metrics::data_path::DataPath;
use crate::metrics::figures::{cpu_evidence, Evidence, IntervalFigures, Role, SideReport};
use crate::metrics::latency::LatencyInterval;
use crate::metrics::live_latency::{figures_between, LiveLatency};
use crate::metrics::trip_times::TripTimes;
use crate::runtime::placement::Placement;
use crate::runtime::side::{SideEnd, SideProbes, TestSide, END_GRACE};
use crate::session::control::{self, ControlMsg};
use crate::session::live::{Observer, Quiet, SenderLive, ServerLive, ServerStop, StartInfo};
use crate::session::sender::{SendOptions, SenderSession};
use crate::session::sequence::{run_test, Ended, SenderTest};
use crate::sys::mptcp::StreamProtocol;
use crate::transport::rr::{latency_histogram, RrConfig, RrFailures};
use crate::transport::tcp::crr::{self as tcp_crr, CrrFlow, CrrListener};
use crate::transport::tcp::rr::{self as tcp_rr, RrFlow};
use crate::transport::trip::TripLegs;
use crate::transport::udp::rr::{self as udp_rr, UdpRrFlow};
use std::cell::{Cell, RefCell};
use std::io::Write;
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use crate::metrics::transactions::LatencySummary;

/// "TCP rr", "UDP rr" or "TCP crr".
pub(crate) fn workload_name(spec: &TestSpec) -> String {
    let proto = if spec.proto == Proto::Udp { "UDP" } else { "TCP" };
    let workload = if spec.workload == Workload::Crr { "crr" } else { "rr" };
    format!("{proto} {workload}")
}

/// Both sides of an rr test. In the side reports, `bytes` counts transactions.
#[derive(Debug, Clone)]
pub struct RrReport {
    pub spec: TestSpec,
    pub target: String,
    pub client: SideReport,
    pub server: Option<SideReport>,
    pub latency: LatencySummary,
    /// Transactions that failed, by cause (client's view).
    pub failures: RrFailures,
    /// `--trip-times`: the round trips' one-way legs.
    pub trip_times: Option<TripTimes>,
    /// The client's round trips over each interval (bucketed: within 1/16 of the values), in
    /// the order of `client.intervals`; empty without intervals.
    pub interval_latency: Vec<LatencyInterval>,
    pub error: Option<String>,
}

impl RrReport {
    pub fn complete(&self) -> bool {
        self.error.is_none() && self.client.complete && self.server.as_ref().is_some_and(|s| s.complete)
    }

    /// Complete, and for crr without a failed connection: the exit status's question. Lost
    /// UDP transactions are the path's figure, not a failed test.
    pub fn succeeded(&self) -> bool {
        self.complete() && (self.spec.workload != Workload::Crr || self.failures.total() == 0)
    }

    /// Why [`Self::succeeded`] is false, as one line: the test's own error, else a side's, else
    /// crr's failed connections.
    pub fn first_error(&self) -> Option<String> {
        let failed = self.failures.total();
        self.error
            .clone()
            .or_else(|| self.client.errors.first().cloned())
            .or_else(|| self.server.as_ref().and_then(|s| s.errors.first().cloned()))
            .or_else(|| self.server.is_none().then(|| "no report from the server".to_string()))
            .or_else(|| {
                (self.spec.workload == Workload::Crr && failed > 0)
                    .then(|| format!("{failed} crr transaction(s) failed (see failures)"))
            })
    }

    /// "TCP rr", "UDP rr", "TCP crr".
    pub fn name(&self) -> String {
        workload_name(&self.spec)
    }

    /// Transactions per second over the client's window.
    pub fn transactions_per_second(&self) -> f64 {
        let w = self.client.window_seconds;
        if w > 0.0 {
            self.client.bytes() as f64 / w
        } else {
            0.0
        }
    }

    /// The figures the verdict rules look at (client as the sending side).
    pub fn evidence(&self) -> Evidence {
        let (threads, host) = cpu_evidence(Some(&self.client), self.server.as_ref());
        let incomplete = self
            .error
            .clone()
            .or_else(|| self.client.errors.first().cloned())
            .or_else(|| self.server.as_ref().and_then(|s| s.errors.first().cloned()));
        // A UDP transaction that timed out lost its request or its answer.
        let udp_loss = (self.spec.proto == Proto::Udp).then(|| {
            let lost = self.failures.timeouts;
            (lost, lost + self.client.total_bytes(), 0)
        });
        Evidence { incomplete, threads, host, udp_loss, ..Evidence::default() }
    }
}

fn config(
    spec: &TestSpec,
    placement: &Placement,
    t0: Instant,
    halt: Arc<AtomicBool>,
    live: Option<Arc<LiveLatency>>,
) -> RrConfig {
    RrConfig {
        wait: placement.wait,
        ring: placement.fast.ring(),
        req_len: spec.req_len,
        resp_len: spec.resp_len,
        deadline: t0 + spec.total(),
        window: (t0 + spec.warmup(), t0 + spec.warmup() + spec.time()),
        timeout: spec.timeout(),
        halt,
        protocol: StreamProtocol::of(spec.tuning.mptcp),
        bounceback: spec.bounceback.unwrap_or(1),
        trip_times: spec.trip_times,
        live,
    }
}

/// Passes everything on to the caller's observer and, right after each client interval, the
/// round trips counted over it (its p50 and p99 for the live line), keeping them for the
/// report.
struct IntervalLatency {
    inner: Arc<dyn Observer>,
    live: Arc<LiveLatency>,
    last: Mutex<Vec<u64>>,
    kept: Mutex<Vec<LatencyInterval>>,
}

impl Observer for IntervalLatency {
    fn started(&self, start: &StartInfo) {
        self.inner.started(start);
    }

    fn interval(&self, direction: Direction, n: usize, received: &IntervalFigures, offered: Option<&IntervalFigures>) {
        self.inner.interval(direction, n, received, offered);
        let now = self.live.snapshot();
        let rtt = figures_between(
            &std::mem::replace(&mut *self.last.lock().unwrap_or_else(|p| p.into_inner()), now.clone()),
            &now,
        );
        let figures = LatencyInterval { start: received.start, end: received.end, rtt, rpm: rtt.rpm() };
        self.kept.lock().unwrap_or_else(|p| p.into_inner()).push(figures);
        self.inner.latency(n, &figures);
    }

    fn latency(&self, n: usize, figures: &LatencyInterval) {
        self.inner.latency(n, figures);
    }
}

/// A transaction test's data path on the client or the server.
fn data_path(spec: &TestSpec, client: bool) -> DataPath {
    DataPath::Transactions { workload: spec.workload, proto: spec.proto, client, timeout_ms: spec.timeout_ms }
}

/// The client's flows of a transaction test, by transport, with the queue of each.
enum ClientFlows {
    Tcp(Vec<(u32, RrFlow)>),
    Udp(Vec<(u32, UdpRrFlow)>),
    /// crr: flow slots, and the server's listening address for the test.
    Crr(Vec<(u32, CrrFlow)>, SocketAddr),
}

/// Runs the client side of an rr or crr test against `recv`.
pub fn run_rr(opts: &SendOptions) -> Result<RrReport> {
    run_rr_live(opts, Arc::new(Quiet))
}

/// [`run_rr`], with `observer` told of the start and of each client interval as it closes
/// (`bytes` count transactions).
pub fn run_rr_live(opts: &SendOptions, observer: Arc<dyn Observer>) -> Result<RrReport> {
    run_test(opts, RrClient { opts, clock: None, rtts: None }, observer)
}

/// An rr or crr client in the sender's one sequence: its flows by transport, and its one side.
struct RrClient<'a> {
    opts: &'a SendOptions,
    /// `--trip-times`: on what grounds the server's clock reads as this one's.
    clock: Option<crate::metrics::trip_times::ClockBasis>,
    /// With intervals: the round trips of each, beside the caller's observer.
    rtts: Option<Arc<IntervalLatency>>,
}

/// What the client measured, for its report.
struct ClientSide {
    client: SideReport,
    latency: LatencySummary,
    failures: RrFailures,
    trip_times: Option<TripTimes>,
    stopped: Option<String>,
}

impl SenderTest for RrClient<'_> {
    /// UDP rr: the flows' sockets, bound before the hello that announces their ports.
    type Prepared = Option<Vec<UdpSocket>>;
    type Flows = ClientFlows;
    type Local = ClientSide;
    type Report = RrReport;
    const FAR_END: &'static str = "server";

    fn prepare(&mut self, session: &mut SenderSession) -> Result<(Self::Prepared, Vec<u16>)> {
        let spec = &self.opts.spec;
        if spec.workload == Workload::Crr || spec.proto != Proto::Udp {
            return Ok((None, Vec::new()));
        }
        let local = session.ctl.local_addr().map_err(|e| Error::io("reading the control socket address", e))?;
        let (sockets, ports) = udp_stream::flow_sockets(local.ip().to_canonical(), spec.flows(), None)?;
        Ok((Some(sockets), ports))
    }

    fn open(&mut self, session: &mut SenderSession, udp: Self::Prepared) -> Result<ClientFlows> {
        let flows = open_flows(self.opts, session, udp)?;
        self.clock = session.trip_clock(&self.opts.spec)?;
        Ok(flows)
    }

    fn observer(&mut self, observer: Arc<dyn Observer>) -> Arc<dyn Observer> {
        if self.opts.spec.interval_ms == 0 {
            return observer;
        }
        let rtts = Arc::new(IntervalLatency {
            inner: observer,
            live: Arc::new(LiveLatency::new(self.opts.spec.queues as usize)),
            last: Mutex::new(Vec::new()),
            kept: Mutex::new(Vec::new()),
        });
        self.rtts = Some(Arc::clone(&rtts));
        rtts
    }

    fn run(
        &mut self,
        session: &SenderSession,
        flows: ClientFlows,
        t0: Instant,
        live: &SenderLive,
    ) -> Result<ClientSide> {
        let (spec, placement) = (&self.opts.spec, &session.placement);
        let side = TestSide::new(Role::Sender, spec, placement, live);
        let cfg = config(spec, placement, t0, side.halt(), self.rtts.as_ref().map(|r| Arc::clone(&r.live)));
        let mptcp_probes = match &flows {
            ClientFlows::Tcp(items) if spec.tuning.mptcp => mptcp_probes(items.iter().map(|(_, f)| &f.stream))?,
            _ => Vec::new(),
        };
        let threads = match flows {
            ClientFlows::Tcp(items) => {
                side.spawn(items, |(_, flows)| flows, move |flows, counters| tcp_rr::run_client(flows, counters, &cfg))?
            }
            ClientFlows::Udp(items) => {
                side.spawn(items, |(_, flows)| flows, move |flows, counters| udp_rr::run_client(flows, counters, &cfg))?
            }
            ClientFlows::Crr(items, target) => side.spawn(
                items,
                |(_, flows)| flows,
                move |flows, counters| tcp_crr::run_client(flows, target, counters, &cfg),
            )?,
        };
        // Stopped early: the flows end now, not at the planned end.
        let run = side.run(threads, t0, SideProbes::default(), SideEnd::AtDeadline)?;
        let mut latency = latency_histogram();
        let mut failures = RrFailures::default();
        let mut legs = TripLegs::new();
        for r in &run.results {
            let _ = latency.add(&r.latency_ns);
            failures.add(&r.failures);
            if let Some(t) = &r.trip {
                legs.add(t);
            }
        }
        let trip_times = self.clock.map(|clock| {
            TripTimes::of(clock, LatencySummary::of(&legs.request), LatencySummary::of(&legs.response), legs.negative)
        });
        let outcomes: Vec<_> = run.results.iter().flat_map(|r| r.flows.iter().cloned()).collect();
        let mut client = side.report(&run, &outcomes);
        live.attach((Some(&mut client), None), (None, None));
        client.set_data_path(data_path(spec, true));
        if spec.workload == Workload::Crr && spec.tuning.mptcp {
            client.add_path_notes([crr_mptcp_note()]);
            client.set_mptcp(Some(crr_mptcp_sample(&run.results)));
        } else {
            client.set_mptcp(read_mptcp(spec, &mptcp_probes));
        }
        if !ends_with_its_flows(spec) {
            // The server's flows cannot see the end: say it.
            let _ = control::write_msg(&session.ctl, &ControlMsg::Finished);
        }
        let latency = LatencySummary::of(&latency);
        Ok(ClientSide { client, latency, failures, trip_times, stopped: run.stopped })
    }

    fn report(self, side: ClientSide, end: Ended) -> RrReport {
        let spec = &self.opts.spec;
        let ClientSide { client, latency, failures, trip_times, stopped } = side;
        let mut error = end.far.error;
        if let Some(reason) = stopped {
            error = Some(format!(
                "interrupted at {:.1} s of {:.1} s ({reason})",
                client.window_seconds,
                spec.time_ms as f64 / 1e3
            ));
        }
        RrReport {
            spec: spec.clone(),
            target: end.session.peer,
            client,
            server: end.far.forward,
            latency,
            failures,
            trip_times,
            interval_latency: self
                .rtts
                .map(|r| std::mem::take(&mut *r.kept.lock().unwrap_or_else(|p| p.into_inner())))
                .unwrap_or_default(),
            error,
        }
    }
}

/// Opens (or, for UDP and crr, readies) the flows the server waits for, by transport; UDP
/// rr's sockets (`udp`) were bound before the hello.
fn open_flows(opts: &SendOptions, session: &mut SenderSession, udp: Option<Vec<UdpSocket>>) -> Result<ClientFlows> {
    let spec = &opts.spec;
    let peer = session.peer.clone();
    let queue_of = |flow: u32| spec.queue_of_flow(flow);
    Ok(match (spec.workload, udp) {
        (Workload::Crr, _) => {
            let port = session.data_port.ok_or_else(|| {
                Error::protocol(format!("receiver {peer} accepted a crr test without a port to connect to"))
            })?;
            let items = (0..spec.flows()).map(|f| (queue_of(f), CrrFlow { queue: queue_of(f) })).collect();
            ClientFlows::Crr(items, SocketAddr::new(session.target_ip, port))
        }
        (_, Some(sockets)) => {
            let target = SocketAddr::new(session.target_ip, opts.port);
            let mut items = Vec::with_capacity(sockets.len());
            for (flow, socket) in (0..).zip(sockets) {
                socket.connect(target).map_err(|e| Error::io(format!("connecting a UDP flow to {target}"), e))?;
                items.push((queue_of(flow), UdpRrFlow { socket, queue: queue_of(flow) }));
            }
            ClientFlows::Udp(items)
        }
        (_, None) => {
            let mut items = Vec::with_capacity(spec.flows() as usize);
            for flow in 0..spec.flows() {
                let mut stream = control::connect_from(
                    &opts.target,
                    opts.port,
                    Duration::from_secs(3),
                    &opts.local,
                    Some(&spec.tuning),
                )?;
                crate::sys::sockopt::apply_tuning(&stream, &spec.tuning, true)
                    .map_err(|e| Error::io(format!("setting the test's socket options on flow {flow}"), e))?;
                let _ = stream.set_nodelay(true);
                stream
                    .write_all(&session.data_hello(flow, &stream)?)
                    .map_err(|e| Error::peer(format!("opening data flow {flow} to {peer}: {e}")))?;
                items.push((queue_of(flow), RrFlow { stream, queue: queue_of(flow) }));
            }
            ClientFlows::Tcp(items)
        }
    })
}

/// Duplicates of an MPTCP test's flows, kept to read their subflows once the threads that
/// own the flows are done with them.
fn mptcp_probes<'a>(streams: impl Iterator<Item = &'a TcpStream>) -> Result<Vec<TcpStream>> {
    streams.map(|s| s.try_clone().map_err(|e| Error::io("duplicating a flow socket for MPTCP_INFO", e))).collect()
}

/// crr `-m`: the connections each thread read back before closing them, numbered in turn
/// (`flow` is the sampled connection's number: crr has no long-lived flows).
fn crr_mptcp_sample(results: &[crate::transport::rr::RrClientResult]) -> Vec<crate::sys::mptcp::MptcpConnection> {
    let conns = results.iter().flat_map(|r| r.mptcp.iter().cloned());
    (0..).zip(conns).map(|(n, c)| crate::sys::mptcp::MptcpConnection { flow: n, ..c }).collect()
}

/// What crr's `mptcp` entries are: a sample, and of what.
fn crr_mptcp_note() -> String {
    format!(
        "MPTCP (crr): 1 in {} answered connections of each thread, at most {} a thread, read back as its answer came (before the close)",
        tcp_crr::MPTCP_SAMPLE_EVERY,
        tcp_crr::MPTCP_SAMPLES_KEPT
    )
}

/// The subflows of an MPTCP test's flows (`None` without `-m`).
fn read_mptcp(spec: &TestSpec, probes: &[TcpStream]) -> Option<Vec<crate::sys::mptcp::MptcpConnection>> {
    use std::os::fd::AsRawFd;
    let fds: Vec<_> = probes.iter().map(|p| p.as_raw_fd()).collect();
    crate::sys::mptcp::read_flows(spec.tuning.mptcp, &fds)
}

/// TCP rr flows end with the client's half-close; UDP and crr need a `Finished` message.
fn ends_with_its_flows(spec: &TestSpec) -> bool {
    spec.workload == Workload::Rr && spec.proto == Proto::Tcp
}

/// What the server side of a transaction test serves.
pub(crate) enum ServerFlows {
    /// TCP rr: the data connections, by flow index.
    Tcp(Vec<(u32, TcpStream)>),
    /// UDP rr: one socket per flow, connected to the client's, by flow index.
    Udp(Vec<UdpSocket>),
    /// crr: the test's listening sockets, and how connections are spread over them.
    Crr(Vec<CrrListener>, String),
}

/// The server side of an accepted rr or crr test on `recv`: says `Ready`, answers requests
/// until the flows end (TCP rr) or the client says `Finished`, and reports its transaction
/// counts.
pub(crate) fn serve_rr(
    ctl: &mut TcpStream,
    stop: &ServerStop,
    spec: &TestSpec,
    flows: ServerFlows,
    placement: &Placement,
) -> Result<SideReport> {
    let live = ServerLive::start(ctl, stop)?;
    // The report shows the client's intervals: the server's are not kept or sent.
    let side = TestSide::new(Role::Receiver, spec, placement, &live).unshown();
    control::write_msg(ctl, &ControlMsg::Ready)?;
    let t0 = Instant::now();
    let cfg = config(spec, placement, t0, side.halt(), None);
    let mut notes = Vec::new();
    let mptcp_probes = match &flows {
        ServerFlows::Tcp(flows) if spec.tuning.mptcp => mptcp_probes(flows.iter().map(|(_, s)| s))?,
        _ => Vec::new(),
    };
    let threads = match flows {
        ServerFlows::Tcp(flows) => {
            let items = side.by_queue(flows, |_, queue, stream| {
                let _ = stream.set_nodelay(true);
                let _ = crate::sys::sockopt::apply_tuning(&stream, &spec.tuning, true);
                RrFlow { stream, queue }
            });
            side.spawn(items, |(_, flows)| flows, move |flows, counters| tcp_rr::run_server(flows, counters, &cfg))?
        }
        ServerFlows::Udp(sockets) => {
            let items = side.by_queue((0..).zip(sockets).collect(), |_, queue, socket| UdpRrFlow { socket, queue });
            side.spawn(items, |(_, flows)| flows, move |flows, counters| udp_rr::run_server(flows, counters, &cfg))?
        }
        ServerFlows::Crr(listeners, spread) => {
            notes.push(spread);
            let items = listeners.into_iter().map(|l| (l.queue, l)).collect();
            side.spawn(items, |(_, ls)| ls, move |ls, counters| tcp_crr::run_server(ls, counters, &cfg))?
        }
    };
    let errors = RefCell::new(Vec::new());
    let finished = Cell::new(false);
    // TCP rr flows end with the client's half-close; otherwise the client finishes its last
    // transactions (up to one timeout), then says so (once: the answer is kept).
    let said_finished = || {
        let said = finished.get()
            || match live.watch.try_next() {
                None => false,
                Some(Ok(ControlMsg::Finished)) => true,
                Some(Ok(other)) => {
                    errors.borrow_mut().push(format!("client sent {other:?} instead of finished"));
                    true
                }
                Some(Err(e)) => {
                    errors.borrow_mut().push(format!("client vanished before finishing: {e}"));
                    true
                }
            };
        finished.set(said);
        said
    };
    let end = if ends_with_its_flows(spec) {
        SideEnd::WithTheSender
    } else {
        let until = t0 + spec.total() + spec.timeout() + END_GRACE;
        SideEnd::Receive { until, ended: &said_finished, after_stop: None, before_release: None }
    };
    let run = side.run(threads, t0, SideProbes::default(), end)?;
    let outcomes: Vec<_> = run.results.iter().flatten().cloned().collect();
    let errors = errors.into_inner();
    let mut report = side.report(&run, &outcomes);
    report.set_data_path(data_path(spec, false));
    report.add_path_notes(notes);
    report.set_mptcp(read_mptcp(spec, &mptcp_probes));
    if !errors.is_empty() {
        report.complete = false;
        report.errors.extend(errors);
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_ordered_and_in_microseconds() {
        let mut h = latency_histogram();
        for ns in [10_000u64, 20_000, 30_000, 40_000, 1_000_000] {
            h.record(ns).unwrap();
        }
        let l = LatencySummary::of(&h);
        assert_eq!(l.count, 5);
        assert!((l.min - 10.0).abs() < 0.1, "10 us minimum, got {}", l.min);
        assert!(l.p50 <= l.p90 && l.p90 <= l.p99 && l.p99 <= l.p999 && l.p999 <= l.max, "{l:?}");
        assert!((l.max - 1000.0).abs() < 1.0, "1 ms maximum, got {}", l.max);
        assert_eq!(LatencySummary::of(&latency_histogram()).count, 0, "empty histogram: zeros");
    }
}
