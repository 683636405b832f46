//! Request/response (`uringbench rr`): transactions per second and their round-trip latency
//! percentiles, the latency half of network testing (what netperf TCP_RR, neper tcp_rr and
//! sockperf ping-pong answer).
//!
//! It rides the stream test's control channel and data connections: `recv` answers every
//! request (its queue threads spin while they have a CPU each, since latency is the point),
//! and both ends count transactions per queue, so the client can print both sides. Latency
//! is the client's: from a request's submission to the last byte of its response.

use super::stream::{SendOptions, SenderSession};
use super::udp_stream;
use crate::analysis::verdict::{diagnose, Evidence, Verdict};
use crate::base::error::{Error, Result};
use crate::base::spec::{Proto, TestSpec, Workload};
use crate::metrics::measure::{sample_window, QueueCounters, SampleSources};
use crate::report::stream::{cpu_evidence, IntervalFigures, Role, SideReport};
use crate::runtime::placement::Placement;
use crate::runtime::threads::{deal_by_queue, QueueThreads};
use crate::session::control::{self, ControlMsg};
use crate::session::live::{Live, Observer, Quiet, ServerLive};
use crate::transport::rr::{check_spec, latency_histogram, RrClientResult, RrConfig, RrFailures};
use crate::transport::tcp::crr::{self as tcp_crr, CrrFlow, CrrListener};
use crate::transport::tcp::rr::{self as tcp_rr, RrFlow};
use crate::transport::udp::rr::{self as udp_rr, UdpRrFlow};
use hdrhistogram::Histogram;
use serde::Serialize;
use serde_json::{json, Value};
use std::io::Write;
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::AtomicBool;
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
fn workload_name(spec: &TestSpec) -> String {
    let proto = if spec.proto == Proto::Udp { "UDP" } else { "TCP" };
    let workload = if spec.workload == Workload::Crr { "crr" } else { "rr" };
    format!("{proto} {workload}")
}

/// The first line of an rr or crr report: the agreed test.
pub fn rr_header(s: &TestSpec, target: &str) -> String {
    format!(
        "uringbench {}: {} to {}, {} queue{} x {} flow{}, {} B request / {} B response, {:.1} s window\n",
        env!("CARGO_PKG_VERSION"),
        workload_name(s),
        target,
        s.queues,
        if s.queues == 1 { "" } else { "s" },
        s.flows_per_queue,
        if s.flows_per_queue == 1 { "" } else { "s" },
        s.req_len,
        s.resp_len,
        s.time_ms as f64 / 1e3
    )
}

/// One client interval of an rr or crr test (`bytes` count transactions).
pub fn rr_interval_line(i: &IntervalFigures) -> String {
    format!(
        "[SUM] {:5.2}-{:<5.2} sec  {:>10} transactions  {:>12.0} trans/s\n",
        i.start,
        i.end,
        i.sum(),
        i.sum() as f64 / (i.end - i.start).max(1e-9)
    )
}

/// One entry of an rr report's `intervals[]` (and of a `--json-stream` interval event).
pub fn rr_interval_json(i: &IntervalFigures) -> Value {
    json!({"start": i.start, "end": i.end, "transactions": i.sum(),
           "transactions_per_second": i.sum() as f64 / (i.end - i.start).max(1e-9)})
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

    pub fn verdict(&self) -> Verdict {
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
        diagnose(&Evidence { incomplete, threads, host, udp_loss, ..Evidence::default() })
    }

    /// JSON with the latency keys of docs/output.md: `latency_us` and `transactions_per_second`.
    pub fn to_json(&self) -> Value {
        let server = self.server.as_ref();
        let queues: Vec<Value> = self
            .client
            .queues
            .iter()
            .map(|q| {
                json!({"id": q.id, "flows": q.flows,
                       "client": {"transactions": q.bytes, "total_transactions": q.total_bytes},
                       "server": server.and_then(|s| s.queues.get(q.id as usize))
                           .map(|s| json!({"transactions": s.bytes, "total_transactions": s.total_bytes}))})
            })
            .collect();
        let intervals: Vec<Value> = self.client.intervals.iter().map(rr_interval_json).collect();
        json!({
            "schema_version": crate::report::stream::SCHEMA_VERSION,
            "tool": {"name": "uringbench", "version": env!("CARGO_PKG_VERSION")},
            "target": self.target,
            "test": self.spec,
            "complete": self.complete(),
            "error": self.error,
            "transactions_per_second": self.transactions_per_second(),
            "latency_us": self.latency,
            "failures": self.failures,
            "failure_notes": self.failures.explain(self.spec.timeout()),
            "queues": queues,
            "sum": {
                "window_seconds": self.client.window_seconds,
                "client": {"transactions": self.client.bytes(), "total_transactions": self.client.total_bytes()},
                "server": server.map(|s| json!({"transactions": s.bytes(), "total_transactions": s.total_bytes()})),
            },
            "intervals": intervals,
            "cpu": {"client": self.client.cpu, "server": server.map(|s| &s.cpu)},
            "client": {"placement": self.client.placement, "path": self.client.path, "errors": self.client.errors},
            "server": server.map(|s| json!({"placement": s.placement, "path": s.path, "errors": s.errors})),
            "verdict": self.verdict(),
        })
    }

    pub fn render_text(&self) -> String {
        use std::fmt::Write as _;
        let mut out = rr_header(&self.spec, &self.target);
        let _ = writeln!(out, "client: {} | {}", self.client.placement, self.client.path);
        if let Some(srv) = &self.server {
            let _ = writeln!(out, "server: {} | {}", srv.placement, srv.path);
        }
        for i in &self.client.intervals {
            out.push_str(&rr_interval_line(i));
        }
        out.push_str(&self.render_summary());
        out
    }

    /// The text that follows lines printed live (header, placement, intervals): each side's
    /// path, then the summary.
    pub fn render_after_live(&self) -> String {
        use std::fmt::Write as _;
        let mut out = format!("client path: {}\n", self.client.path);
        if let Some(srv) = &self.server {
            let _ = writeln!(out, "server path: {}", srv.path);
        }
        out.push_str(&self.render_summary());
        out
    }

    /// Transactions, latency, failures, CPU, errors and the verdict.
    fn render_summary(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        let l = &self.latency;
        let _ = writeln!(
            out,
            "transactions: {} in the window, {:.0}/s; total client {} / server {}",
            self.client.bytes(),
            self.transactions_per_second(),
            self.client.total_bytes(),
            self.server.as_ref().map_or("no report".into(), |s| s.total_bytes().to_string())
        );
        let _ = writeln!(
            out,
            "latency: p50 {:.1} us  p90 {:.1} us  p99 {:.1} us  p99.9 {:.1} us  max {:.1} us  (min {:.1}, mean {:.1}, {} samples)",
            l.p50, l.p90, l.p99, l.p999, l.max, l.min, l.mean, l.count
        );
        if self.failures.total() + self.failures.late > 0 {
            let f = &self.failures;
            let _ = writeln!(
                out,
                "failures: {} (timeouts {}, refused {}, port exhaustion {}, reset {}, other {}; late answers {})",
                f.total(),
                f.timeouts,
                f.refused,
                f.port_exhaustion,
                f.reset,
                f.other,
                f.late
            );
            for note in f.explain(self.spec.timeout()) {
                let _ = writeln!(out, "  {note}");
            }
        }
        for (name, side) in [("client", Some(&self.client)), ("server", self.server.as_ref())] {
            let Some(side) = side else { continue };
            let threads: Vec<String> =
                side.cpu.threads.iter().map(|t| format!("cpu{} {:.0}%", t.cpu, t.utilization * 100.0)).collect();
            let _ = writeln!(out, "cpu {name}: threads {}", threads.join(", "));
        }
        for err in self.error.iter().chain(&self.client.errors).chain(self.server.iter().flat_map(|s| &s.errors)) {
            let _ = writeln!(out, "error: {err}");
        }
        let v = self.verdict();
        let _ = writeln!(out, "verdict: {} ({})", v.bottleneck, v.evidence);
        out
    }
}

fn config(spec: &TestSpec, placement: &Placement, t0: Instant, stop: &Arc<AtomicBool>) -> RrConfig {
    RrConfig {
        wait: placement.wait,
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
    let queue_of = |flow: u32| spec.queue_of_flow(flow);
    // Open (or announce) the flows the server waits for, by transport.
    let flows = match (spec.workload, spec.proto) {
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
            let (sockets, ports) = udp_stream::flow_sockets(local.ip().to_canonical(), spec.flows())?;
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
    };
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
    let src = SampleSources { counters: &counters, tids: &threads.tids, sockets: &[], iface: None, udp: &[] };
    let finished = || threads.all_finished() || live.stopped().is_some();
    let window = sample_window(t0, spec.sample_offsets(), &src, &finished, &mut |iv| live.interval(Role::Sender, iv));
    if live.stopped().is_some() {
        // Stopped early: the flows end now, not at the planned end.
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
    let plans: Vec<_> = placement.threads.iter().cloned().zip(threads.tids.iter().copied()).collect();
    let results = threads.join()?;
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
    let (server, mut error) = match live.watch.recv(super::stream::END_GRACE + Duration::from_secs(5)) {
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

/// TCP rr flows end with the client's half-close; UDP and crr need a `Finished` message.
fn ends_with_its_flows(spec: &TestSpec) -> bool {
    spec.workload == Workload::Rr && spec.proto == Proto::Tcp
}

/// What the server side of a transaction test serves.
pub enum ServerFlows {
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
pub fn serve_rr(ctl: &mut TcpStream, spec: &TestSpec, flows: ServerFlows, placement: &Placement) -> Result<SideReport> {
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
    let src = SampleSources { counters: &counters, tids: &threads.tids, sockets: &[], iface: None, udp: &[] };
    let finished = || threads.all_finished() || live.stopped().is_some();
    // The report shows the client's intervals: the server's are not kept or sent.
    let window = sample_window(t0, spec.sample_offsets(), &src, &finished, &mut |_| {});
    let mut errors = Vec::new();
    if ends_with_its_flows(spec) {
        let hard_end = t0 + spec.total() + super::stream::END_GRACE;
        while !threads.all_finished() && Instant::now() < hard_end {
            std::thread::sleep(Duration::from_millis(5));
        }
    } else {
        // The client finishes its last transactions (up to one timeout), then says so.
        match live.watch.recv(spec.timeout() + super::stream::END_GRACE) {
            Ok(ControlMsg::Finished) => {}
            Ok(other) => errors.push(format!("client sent {other:?} instead of finished")),
            Err(e) => errors.push(format!("client vanished before finishing: {e}")),
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let plans: Vec<_> = placement.threads.iter().cloned().zip(threads.tids.iter().copied()).collect();
    let outcomes: Vec<_> = threads.join()?.into_iter().flatten().collect();
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
