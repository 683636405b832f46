//! Request/response (`uringbench rr`): transactions per second and their round-trip latency
//! percentiles, the latency half of network testing (what netperf TCP_RR, neper tcp_rr and
//! sockperf ping-pong answer).
//!
//! It rides the stream test's control channel and data connections: `recv` answers every
//! request (its queue threads spin while they have a CPU each, since latency is the point),
//! and both ends count transactions per queue, so the client can print both sides. Latency
//! is the client's: from a request's submission to the last byte of its response.

use super::stream::{SendOptions, SenderSession};
use crate::control::{self, ControlMsg};
use crate::error::{Error, Result};
use crate::measure::{sample_window, QueueCounters, SampleSources};
use crate::placement::Placement;
use crate::report::{cpu_evidence, Role, SideReport};
use crate::spec::TestSpec;
use crate::threads::{deal_by_queue, QueueThreads};
use crate::transport::tcp_rr::{self, RrConfig, RrFlow};
use crate::verdict::{diagnose, Evidence, Verdict};
use hdrhistogram::Histogram;
use serde::Serialize;
use serde_json::{json, Value};
use std::io::Write;
use std::net::TcpStream;
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

/// Both sides of an rr test. In the side reports, `bytes` counts transactions.
#[derive(Debug, Clone)]
pub struct RrReport {
    pub spec: TestSpec,
    pub target: String,
    pub client: SideReport,
    pub server: Option<SideReport>,
    pub latency: LatencySummary,
    pub error: Option<String>,
}

impl RrReport {
    pub fn complete(&self) -> bool {
        self.error.is_none() && self.client.complete && self.server.as_ref().is_some_and(|s| s.complete)
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
        diagnose(&Evidence { incomplete, threads, host, ..Evidence::default() })
    }

    /// JSON with DESIGN §6's latency keys: `latency_us` and `transactions_per_second`.
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
        let intervals: Vec<Value> = self
            .client
            .intervals
            .iter()
            .map(|i| {
                json!({"start": i.start, "end": i.end, "transactions": i.sum(),
                            "transactions_per_second": i.sum() as f64 / (i.end - i.start).max(1e-9)})
            })
            .collect();
        json!({
            "schema_version": crate::report::SCHEMA_VERSION,
            "tool": {"name": "uringbench", "version": env!("CARGO_PKG_VERSION")},
            "target": self.target,
            "test": self.spec,
            "complete": self.complete(),
            "error": self.error,
            "transactions_per_second": self.transactions_per_second(),
            "latency_us": self.latency,
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
        let mut out = String::new();
        let s = &self.spec;
        let _ = writeln!(
            out,
            "uringbench {}: TCP rr to {}, {} queue{} x {} flow{}, {} B request / {} B response, {:.1} s window",
            env!("CARGO_PKG_VERSION"),
            self.target,
            s.queues,
            if s.queues == 1 { "" } else { "s" },
            s.flows_per_queue,
            if s.flows_per_queue == 1 { "" } else { "s" },
            s.req_len,
            s.resp_len,
            s.time_ms as f64 / 1e3
        );
        let _ = writeln!(out, "client: {} | {}", self.client.placement, self.client.path);
        if let Some(srv) = &self.server {
            let _ = writeln!(out, "server: {} | {}", srv.placement, srv.path);
        }
        for i in &self.client.intervals {
            let _ = writeln!(
                out,
                "[SUM] {:5.2}-{:<5.2} sec  {:>10} transactions  {:>12.0} trans/s",
                i.start,
                i.end,
                i.sum(),
                i.sum() as f64 / (i.end - i.start).max(1e-9)
            );
        }
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
        stop: Arc::clone(stop),
    }
}

/// Runs the client side of an rr test against `recv`.
pub fn run_rr(opts: &SendOptions) -> Result<RrReport> {
    let spec = &opts.spec;
    tcp_rr::check_sizes(spec.req_len, spec.resp_len)?;
    let mut session = SenderSession::connect(opts)?;
    session.negotiate(spec, Vec::new())?;
    let peer = session.peer.clone();
    let mut flows = Vec::with_capacity(spec.flows() as usize);
    for flow in 0..spec.flows() {
        let mut stream = control::connect(&opts.target, opts.port, Duration::from_secs(3))?;
        let _ = stream.set_nodelay(true);
        stream
            .write_all(&control::data_hello(&session.cookie, flow))
            .map_err(|e| Error::peer(format!("opening data flow {flow} to {peer}: {e}")))?;
        let queue = spec.queue_of_flow(flow);
        flows.push((queue, RrFlow { stream, queue }));
    }
    session.wait_ready()?;
    let t0 = Instant::now();
    let placement = session.placement.clone();
    let stop = Arc::new(AtomicBool::new(false));
    let cfg = config(spec, &placement, t0, &stop);
    let counters = Arc::new(QueueCounters::new(spec.queues as usize));
    let worker_counters = Arc::clone(&counters);
    let threads = QueueThreads::spawn(&placement.threads, deal_by_queue(&placement.threads, flows), move |flows| {
        tcp_rr::run_client(flows, &worker_counters, &cfg)
    })?;
    let src = SampleSources { counters: &counters, tids: &threads.tids, sockets: &[], iface: None, udp: &[] };
    let (samples, window_complete) = sample_window(t0, &spec.sample_offsets(), &src, &|| threads.all_finished());
    let plans: Vec<_> = placement.threads.iter().cloned().zip(threads.tids.iter().copied()).collect();
    let results = threads.join()?;
    let mut latency = tcp_rr::latency_histogram();
    for r in &results {
        let _ = latency.add(&r.latency_ns);
    }
    let outcomes: Vec<_> = results.into_iter().flat_map(|r| r.flows).collect();
    let mut client = SideReport::build(Role::Sender, spec, &samples, window_complete, &outcomes, &plans);
    client.placement = placement.summary.clone();
    client.path = "io_uring SEND + RECV per transaction, one transaction in flight per flow, TCP_NODELAY".into();
    let (server, error) = match control::read_msg(&mut session.ctl, super::stream::END_GRACE + Duration::from_secs(5)) {
        Ok(ControlMsg::Result { report, .. }) => (report.map(|r| *r), None),
        Ok(ControlMsg::Abort { reason }) => (None, Some(format!("server aborted: {reason}"))),
        Ok(other) => (None, Some(format!("server sent {other:?} instead of its report"))),
        Err(e) => (None, Some(format!("server {peer} vanished before reporting: {e}"))),
    };
    Ok(RrReport { spec: spec.clone(), target: peer, client, server, latency: LatencySummary::of(&latency), error })
}

/// The server side of an accepted rr test on `recv`: says `Ready`, answers requests until
/// every flow's EOF, and reports its transaction counts.
pub fn serve_rr(
    ctl: &mut TcpStream,
    spec: &TestSpec,
    flows: Vec<(u32, TcpStream)>,
    placement: &Placement,
) -> Result<SideReport> {
    tcp_rr::check_sizes(spec.req_len, spec.resp_len)?;
    let items: Vec<(u32, RrFlow)> = flows
        .into_iter()
        .map(|(flow, stream)| {
            let _ = stream.set_nodelay(true);
            let queue = spec.queue_of_flow(flow);
            (queue, RrFlow { stream, queue })
        })
        .collect();
    control::write_msg(ctl, &ControlMsg::Ready)?;
    let t0 = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let cfg = config(spec, placement, t0, &stop);
    let counters = Arc::new(QueueCounters::new(spec.queues as usize));
    let worker_counters = Arc::clone(&counters);
    let threads = QueueThreads::spawn(&placement.threads, deal_by_queue(&placement.threads, items), move |flows| {
        tcp_rr::run_server(flows, &worker_counters, &cfg)
    })?;
    let src = SampleSources { counters: &counters, tids: &threads.tids, sockets: &[], iface: None, udp: &[] };
    let (samples, window_complete) = sample_window(t0, &spec.sample_offsets(), &src, &|| threads.all_finished());
    let hard_end = t0 + spec.total() + super::stream::END_GRACE;
    while !threads.all_finished() && Instant::now() < hard_end {
        std::thread::sleep(Duration::from_millis(5));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let plans: Vec<_> = placement.threads.iter().cloned().zip(threads.tids.iter().copied()).collect();
    let outcomes: Vec<_> = threads.join()?.into_iter().flatten().collect();
    let mut report = SideReport::build(Role::Receiver, spec, &samples, window_complete, &outcomes, &plans);
    report.placement = placement.summary.clone();
    report.path = "io_uring RECV + SEND per transaction, TCP_NODELAY".into();
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_ordered_and_in_microseconds() {
        let mut h = tcp_rr::latency_histogram();
        for ns in [10_000u64, 20_000, 30_000, 40_000, 1_000_000] {
            h.record(ns).unwrap();
        }
        let l = LatencySummary::of(&h);
        assert_eq!(l.count, 5);
        assert!((l.min - 10.0).abs() < 0.1, "10 us minimum, got {}", l.min);
        assert!(l.p50 <= l.p90 && l.p90 <= l.p99 && l.p99 <= l.p999 && l.p999 <= l.max, "{l:?}");
        assert!((l.max - 1000.0).abs() < 1.0, "1 ms maximum, got {}", l.max);
        assert_eq!(LatencySummary::of(&tcp_rr::latency_histogram()).count, 0, "empty histogram: zeros");
    }

    #[test]
    fn sizes_outside_1b_to_1mib_are_usage_errors() {
        assert!(tcp_rr::check_sizes(1, 1 << 20).is_ok());
        for (req, resp) in [(0, 1), (1, 0), ((1 << 20) + 1, 1)] {
            let e = tcp_rr::check_sizes(req, resp).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{e}");
        }
    }
}
