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
use crate::base::spec::{Proto, TestSpec, Workload};
use crate::metrics::figures::{cpu_evidence, Evidence, Role, SideReport};
use crate::metrics::measure::{QueueCounters, SampleSources};
use crate::runtime::placement::Placement;
use crate::runtime::side::{never, Ending, END_GRACE};
use crate::runtime::threads::{deal_by_queue, QueueThreads};
use crate::session::control::{self, ControlMsg};
use crate::session::live::{run_watched, Live, Observer, Quiet, ServerLive};
use crate::session::sender::{SendOptions, SenderSession};
use crate::transport::rr::{check_spec, latency_histogram, RrClientResult, RrConfig, RrFailures};
use crate::transport::tcp::crr::{self as tcp_crr, CrrFlow, CrrListener};
use crate::transport::tcp::rr::{self as tcp_rr, RrFlow};
use crate::transport::udp::rr::{self as udp_rr, UdpRrFlow};
use hdrhistogram::Histogram;
use serde::Serialize;
use std::cell::{Cell, RefCell};
use std::io::Write;
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Round-trip percentiles in microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct LatencySummary {
    pub count: u64,
    pub min: f64,
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

impl LatencySummary {
    pub fn of(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return Self::default();
        }
        let us = |ns: u64| ns as f64 / 1e3;
        Self {
            count: h.len(),
            min: us(h.min()),
            mean: h.mean() / 1e3,
            p50: us(h.value_at_quantile(0.50)),
            p90: us(h.value_at_quantile(0.90)),
            p99: us(h.value_at_quantile(0.99)),
            p999: us(h.value_at_quantile(0.999)),
            max: us(h.max()),
        }
    }
}

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

fn config(spec: &TestSpec, placement: &Placement, t0: Instant, stop: &Arc<AtomicBool>) -> RrConfig {
    RrConfig {
        wait: placement.wait,
        ring: placement.fast.ring(),
        req_len: spec.req_len,
        resp_len: spec.resp_len,
        deadline: t0 + spec.total(),
        window: (t0 + spec.warmup(), t0 + spec.warmup() + spec.time()),
        timeout: spec.timeout(),
        stop: Arc::clone(stop),
    }
}

/// How a transaction test's data moves, in words for the report.
fn path_text(spec: &TestSpec, client: bool) -> String {
    match (spec.workload, spec.proto, client) {
        (Workload::Crr, _, true) => {
            "io_uring CONNECT + SEND + RECV per transaction, a new TCP connection each, server closes first".into()
        }
        (Workload::Crr, _, false) => {
            "io_uring multishot ACCEPT + RECV + SEND per connection, closed after the answer".into()
        }
        (_, Proto::Udp, true) => {
            format!("io_uring SEND + RECV per transaction on connected UDP sockets, {} ms timeout", spec.timeout_ms)
        }
        (_, Proto::Udp, false) => "io_uring RECV + SEND per transaction on connected UDP sockets".into(),
        (_, _, true) => "io_uring SEND + RECV per transaction, one transaction in flight per flow, TCP_NODELAY".into(),
        (_, _, false) => "io_uring RECV + SEND per transaction, TCP_NODELAY".into(),
    }
}

/// The client's flows of a transaction test, by transport, with the queue of each.
enum ClientFlows {
    Tcp(Vec<(u32, RrFlow)>),
    Udp(Vec<(u32, UdpRrFlow)>),
    /// crr: flow slots, and the server's listening address for the test.
    Crr(Vec<(u32, CrrFlow)>, SocketAddr),
}

/// Spawns one client thread per planned CPU over `items`, dealt by queue.
fn spawn<T, F>(placement: &Placement, items: Vec<(u32, T)>, body: F) -> Result<QueueThreads<RrClientResult>>
where
    T: Send + 'static,
    F: Fn(Vec<T>) -> Result<RrClientResult> + Send + Sync + 'static,
{
    QueueThreads::spawn(&placement.threads, deal_by_queue(&placement.threads, items), body)
}

/// Runs the client side of an rr or crr test against `recv`.
pub fn run_rr(opts: &SendOptions) -> Result<RrReport> {
    run_rr_live(opts, Arc::new(Quiet))
}

/// [`run_rr`], with `observer` told of the start and of each client interval as it closes
/// (`bytes` count transactions).
pub fn run_rr_live(opts: &SendOptions, observer: Arc<dyn Observer>) -> Result<RrReport> {
    let spec = &opts.spec;
    check_spec(spec)?;
    let mut session = SenderSession::connect(opts)?;
    let peer = session.peer.clone();
    let stop = Arc::new(AtomicBool::new(false));
    let counters = Arc::new(QueueCounters::new(spec.queues as usize));
    let worker_counters = Arc::clone(&counters);
    let placement = session.placement.clone();
    let flows = open_flows(opts, &mut session)?;
    session.wait_ready()?;
    let live = session.start_live(spec, observer)?;
    let t0 = Instant::now();
    let cfg = config(spec, &placement, t0, &stop);
    let threads = match flows {
        ClientFlows::Tcp(items) => {
            spawn(&placement, items, move |flows| tcp_rr::run_client(flows, &worker_counters, &cfg))?
        }
        ClientFlows::Udp(items) => {
            spawn(&placement, items, move |flows| udp_rr::run_client(flows, &worker_counters, &cfg))?
        }
        ClientFlows::Crr(items, target) => {
            spawn(&placement, items, move |flows| tcp_crr::run_client(flows, target, &worker_counters, &cfg))?
        }
    };
    let src = SampleSources { counters: &counters, tids: &[], sockets: &[], iface: None, udp: &[] };
    // Stopped early: the flows end now, not at the planned end.
    let mut halt = || stop.store(true, Ordering::Relaxed);
    let run = run_watched(&live, Some(Role::Sender), (spec, t0), threads, src, Ending::Send { halt: &mut halt })?;
    let (window, results, plans) = (run.window, run.results, run.plans);
    let mut latency = latency_histogram();
    let mut failures = RrFailures::default();
    for r in &results {
        let _ = latency.add(&r.latency_ns);
        failures.add(&r.failures);
    }
    let outcomes: Vec<_> = results.into_iter().flat_map(|r| r.flows).collect();
    let mut client = SideReport::build(Role::Sender, spec, &window, &outcomes, &plans);
    let stopped = live.stopped();
    if let Some(reason) = &stopped {
        client.stopped_early(spec, reason);
    }
    live.attach((Some(&mut client), None), (None, None));
    client.placement = placement.summary.clone();
    client.path = path_text(spec, true);
    if !ends_with_its_flows(spec) {
        // The server's flows cannot see the end: say it.
        let _ = control::write_msg(&session.ctl, &ControlMsg::Finished);
    }
    let (server, mut error) = match live.watch.recv(END_GRACE + Duration::from_secs(5)) {
        Ok(ControlMsg::Result { report, .. }) => (report.map(|r| *r), None),
        Ok(ControlMsg::Abort { reason }) => (None, Some(format!("server aborted: {reason}"))),
        Ok(other) => (None, Some(format!("server sent {other:?} instead of its report"))),
        Err(e) => (None, Some(format!("server {peer} vanished before reporting: {e}"))),
    };
    if let Some(reason) = stopped {
        error = Some(format!(
            "interrupted at {:.1} s of {:.1} s ({reason})",
            client.window_seconds,
            spec.time_ms as f64 / 1e3
        ));
    }
    Ok(RrReport {
        spec: spec.clone(),
        target: peer,
        client,
        server,
        latency: LatencySummary::of(&latency),
        failures,
        error,
    })
}

/// Opens (or, for UDP and crr, announces) the flows the server waits for, by transport.
fn open_flows(opts: &SendOptions, session: &mut SenderSession) -> Result<ClientFlows> {
    let spec = &opts.spec;
    let peer = session.peer.clone();
    let queue_of = |flow: u32| spec.queue_of_flow(flow);
    Ok(match (spec.workload, spec.proto) {
        (Workload::Crr, _) => {
            session.negotiate(spec, Vec::new())?;
            let port = session.data_port.ok_or_else(|| {
                Error::protocol(format!("receiver {peer} accepted a crr test without a port to connect to"))
            })?;
            let items = (0..spec.flows()).map(|f| (queue_of(f), CrrFlow { queue: queue_of(f) })).collect();
            ClientFlows::Crr(items, SocketAddr::new(session.target_ip, port))
        }
        (_, Proto::Udp) => {
            let local = session.ctl.local_addr().map_err(|e| Error::io("reading the control socket address", e))?;
            let (sockets, ports) = udp_stream::flow_sockets(local.ip().to_canonical(), spec.flows(), None)?;
            session.negotiate(spec, ports)?;
            let target = SocketAddr::new(session.target_ip, opts.port);
            let mut items = Vec::with_capacity(sockets.len());
            for (flow, socket) in (0..).zip(sockets) {
                socket.connect(target).map_err(|e| Error::io(format!("connecting a UDP flow to {target}"), e))?;
                items.push((queue_of(flow), UdpRrFlow { socket, queue: queue_of(flow) }));
            }
            ClientFlows::Udp(items)
        }
        (_, Proto::Tcp) => {
            session.negotiate(spec, Vec::new())?;
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
                    .write_all(&session.data_hello(flow))
                    .map_err(|e| Error::peer(format!("opening data flow {flow} to {peer}: {e}")))?;
                items.push((queue_of(flow), RrFlow { stream, queue: queue_of(flow) }));
            }
            ClientFlows::Tcp(items)
        }
    })
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
    spec: &TestSpec,
    flows: ServerFlows,
    placement: &Placement,
) -> Result<SideReport> {
    check_spec(spec)?;
    let stop = Arc::new(AtomicBool::new(false));
    let counters = Arc::new(QueueCounters::new(spec.queues as usize));
    let worker_counters = Arc::clone(&counters);
    let live = ServerLive::start(ctl)?;
    control::write_msg(ctl, &ControlMsg::Ready)?;
    let t0 = Instant::now();
    let cfg = config(spec, placement, t0, &stop);
    let mut path = path_text(spec, false);
    let threads = match flows {
        ServerFlows::Tcp(flows) => {
            let items = flows
                .into_iter()
                .map(|(flow, stream)| {
                    let _ = stream.set_nodelay(true);
                    let _ = crate::sys::sockopt::apply_tuning(&stream, &spec.tuning, true);
                    (spec.queue_of_flow(flow), RrFlow { stream, queue: spec.queue_of_flow(flow) })
                })
                .collect();
            QueueThreads::spawn(&placement.threads, deal_by_queue(&placement.threads, items), move |flows| {
                tcp_rr::run_server(flows, &worker_counters, &cfg)
            })?
        }
        ServerFlows::Udp(sockets) => {
            let items = (0..)
                .zip(sockets)
                .map(|(flow, socket)| (spec.queue_of_flow(flow), UdpRrFlow { socket, queue: spec.queue_of_flow(flow) }))
                .collect();
            QueueThreads::spawn(&placement.threads, deal_by_queue(&placement.threads, items), move |flows| {
                udp_rr::run_server(flows, &worker_counters, &cfg)
            })?
        }
        ServerFlows::Crr(listeners, spread) => {
            path = format!("{path}; {spread}");
            let items = listeners.into_iter().map(|l| (l.queue, l)).collect();
            QueueThreads::spawn(&placement.threads, deal_by_queue(&placement.threads, items), move |ls| {
                tcp_crr::run_server(ls, &worker_counters, &cfg)
            })?
        }
    };
    let src = SampleSources { counters: &counters, tids: &[], sockets: &[], iface: None, udp: &[] };
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
    let (ended, until): (&dyn Fn() -> bool, _) = if ends_with_its_flows(spec) {
        (&never, t0 + spec.total() + END_GRACE)
    } else {
        (&said_finished, t0 + spec.total() + spec.timeout() + END_GRACE)
    };
    let mut release = || stop.store(true, Ordering::Relaxed);
    // The report shows the client's intervals: the server's are not kept or sent.
    let run = run_watched(
        &live,
        None,
        (spec, t0),
        threads,
        src,
        Ending::Receive { until, ended, stop_cuts: false, release: &mut release },
    )?;
    let (window, plans) = (run.window, run.plans);
    let outcomes: Vec<_> = run.results.into_iter().flatten().collect();
    let errors = errors.into_inner();
    let mut report = SideReport::build(Role::Receiver, spec, &window, &outcomes, &plans);
    if let Some(reason) = live.stopped() {
        report.stopped_early(spec, &reason);
    }
    report.placement = placement.summary.clone();
    report.path = path;
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
