//! The sending host's side of `send --latency`: opens the probe's connection beside the
//! load's flows (TCP: the data flow after the last; UDP: the socket after the last), runs it
//! alone for [`IDLE_PHASE`] so its round trips are the idle latency, keeps it running through
//! the warm-up and the window, shows each interval's round trips live, and puts the
//! `latency` section into the report.

use crate::base::error::{Error, Result};
use crate::base::spec::{Direction, Proto, TestSpec};
use crate::metrics::figures::{IntervalFigures, StreamReport};
use crate::metrics::latency::{
    growth_between, interval_figures, LatencyInterval, ProbeClock, ProbeCpu, WorkingLatency,
};
use crate::metrics::transactions::LatencySummary;
use crate::metrics::trip_times::{ClockBasis, TripTimes};
use crate::session::control;
use crate::session::live::{Observer, StartInfo};
use crate::session::sender::{SendOptions, SenderSession, CONNECT_TIMEOUT};
use crate::transport::probe::{ProbeLog, ProbeSample, ProbeSocket, Prober, IDLE_PHASE, PROBE_GAP, PROBE_LEN};
use crate::transport::trip::TripLegs;
use std::io::Write;
use std::net::UdpSocket;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A running probe of one test.
pub(crate) struct SenderProbe {
    prober: Prober,
    proto: Proto,
    /// TCP: when the load's flows were opened (probes before are idle). UDP: the load starts
    /// at `ready`, which the receiver sends once [`IDLE_PHASE`] has passed.
    load_start: Option<Instant>,
    clock: Arc<Mutex<Option<Instant>>>,
    /// The receiver's answers carry its clock and its answering thread's CPU time.
    stamped: bool,
    /// `--trip-times`: on what grounds the receiver's clock reads as this one's.
    trip_clock: Option<ClockBasis>,
    /// Where the receiver's own qdiscs could hold a queue, as it said.
    receiver_queues: Option<crate::sys::netpath::ReceiverQueues>,
}

/// How long past the test's planned end a probe may run before it stops by itself.
const PROBE_SLACK: Duration = Duration::from_secs(10);

/// A stream sender's one report: the sides' figures, then the latency probe's, when the
/// test ran one (the same for TCP and UDP streams).
pub(crate) fn stream_report_with(
    probe: Option<SenderProbe>,
    spec: &TestSpec,
    halves: crate::runtime::side::halves::Halves,
    end: crate::session::sequence::Ended,
) -> StreamReport {
    let mut report = crate::session::driver::stream_report(spec, halves, end);
    if let Some(probe) = probe {
        probe.finish(spec, &mut report);
    }
    report
}

impl SenderProbe {
    /// TCP: opens the probe as the flow after the last data flow, probes the idle path for
    /// [`IDLE_PHASE`] and returns with the probe running; open the load's flows next.
    pub(crate) fn open_tcp(session: &SenderSession, opts: &SendOptions) -> Result<Self> {
        let spec = &opts.spec;
        let index = spec.data_connections();
        let local = opts.local.for_control();
        let mut stream = control::connect_from(&opts.target, opts.port, CONNECT_TIMEOUT, &local, None)?;
        stream
            .write_all(&session.data_hello(index, &stream)?)
            .map_err(|e| Error::peer(format!("opening the latency probe to {}: {e}", session.peer)))?;
        let mut probe = Self::start(session, spec, ProbeSocket::Tcp(stream))?;
        std::thread::sleep(IDLE_PHASE);
        probe.load_start = Some(Instant::now());
        Ok(probe)
    }

    /// UDP: starts probing over `socket` (connected to the receiver's port, which answers
    /// it once the test is accepted); the receiver holds `ready` back for [`IDLE_PHASE`].
    pub(crate) fn open_udp(session: &SenderSession, spec: &TestSpec, socket: UdpSocket) -> Result<Self> {
        Self::start(session, spec, ProbeSocket::Udp(socket))
    }

    fn start(session: &SenderSession, spec: &TestSpec, socket: ProbeSocket) -> Result<Self> {
        let trip_clock = session.trip_clock(spec)?;
        if trip_clock.is_some() && !session.probe_stamps {
            return Err(Error::peer(format!(
                "receiver {} does not stamp its latency probe's answers (a uringbench recv before --trip-times on send): upgrade it, or run without --trip-times",
                session.peer
            )));
        }
        let until = Instant::now() + IDLE_PHASE + spec.total() + PROBE_SLACK;
        let prober = Prober::start(socket, &session.placement.cpus(), until)
            .map_err(|e| Error::io("starting the latency probe's thread", e))?;
        Ok(Self {
            prober,
            proto: spec.proto,
            load_start: None,
            clock: Arc::new(Mutex::new(None)),
            stamped: session.probe_stamps,
            trip_clock,
            receiver_queues: session.receiver_queues.clone(),
        })
    }

    /// `observer`, told each interval's round trips after the interval itself.
    pub(crate) fn watch(&self, spec: &TestSpec, observer: Arc<dyn Observer>) -> Arc<dyn Observer> {
        Arc::new(ProbeObserver {
            inner: observer,
            log: self.prober.log(),
            started: Arc::clone(&self.clock),
            warmup: Duration::from_millis(spec.warmup_ms),
            direction: load_direction(spec),
        })
    }

    /// Stops the probe and adds its section to `report`.
    pub(crate) fn finish(self, spec: &TestSpec, report: &mut StreamReport) {
        let started = *self.clock.lock().unwrap_or_else(|p| p.into_inner());
        let log: ProbeLog = self.prober.finish();
        let Some(t0) = started else { return };
        let local = if spec.direction == Direction::Reverse { report.receiver.as_ref() } else { Some(&report.sender) };
        let window = local.map_or(spec.time_ms as f64 / 1e3, |s| s.window_seconds);
        // The intervals of the load's direction as the receiving side closed them.
        let sides = [report.receiver.as_ref(), Some(&report.sender)];
        let intervals: Vec<(f64, f64)> = sides
            .into_iter()
            .flatten()
            .find(|s| !s.intervals.is_empty())
            .map(|s| s.intervals.iter().map(|i| (i.start, i.end)).collect())
            .unwrap_or_default();
        let clock = ProbeClock {
            load_start: self.load_start.unwrap_or(t0),
            window_start: t0 + Duration::from_millis(spec.warmup_ms),
            window: Duration::from_secs_f64(window.max(0.0)),
        };
        let samples: Vec<(Instant, Duration)> = log.samples.iter().map(|s| (s.sent, s.rtt)).collect();
        let mut latency = WorkingLatency::build(&samples, &clock, &intervals);
        latency.proto = match self.proto {
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
        }
        .into();
        latency.probe_bytes = PROBE_LEN as u32;
        latency.gap_ms = PROBE_GAP.as_secs_f64() * 1e3;
        latency.lost = log.lost;
        latency.bytes_sent = log.bytes_sent;
        latency.bytes_received = log.bytes_received;
        latency.error = log.error;
        let (from, to) = (clock.window_start, clock.window_start + clock.window);
        latency.cpu = probe_cpu(self.stamped, &log.samples, from, to, report);
        latency.trip_times = self.trip_clock.map(|basis| trip_times(basis, &log.samples, from, to));
        latency.receiver_queues = self.receiver_queues;
        report.latency = Some(latency);
    }
}

/// What probing cost over `from`..`to` (the answering side's too, when its answers carry
/// it: `stamped`), against the load's queue threads of both sides.
fn probe_cpu(
    stamped: bool,
    samples: &[ProbeSample],
    from: Instant,
    to: Instant,
    report: &StreamReport,
) -> Option<ProbeCpu> {
    let readings =
        |f: fn(&ProbeSample) -> u64| -> Vec<(Instant, u64)> { samples.iter().map(|s| (s.sent, f(s))).collect() };
    let probe = growth_between(&readings(|s| s.cpu_ns), from, to)?;
    let answer = if stamped { growth_between(&readings(|s| s.peer_cpu_ns), from, to) } else { None };
    let load: f64 = [Some(&report.sender), report.receiver.as_ref()]
        .into_iter()
        .flatten()
        .flat_map(|side| side.cpu.threads.iter())
        .map(|t| t.user_seconds + t.system_seconds)
        .sum();
    let host = report.receiver.as_ref().map_or(0.0, |r| r.cpu.host_busy_seconds);
    Some(ProbeCpu::of(probe, answer, load, host))
}

/// The one-way legs of the probes sent within `from`..`to`, and their round trips by the
/// same clock readings (so the legs can be checked against them); withheld by `basis`.
fn trip_times(basis: ClockBasis, samples: &[ProbeSample], from: Instant, to: Instant) -> TripTimes {
    let mut legs = TripLegs::new();
    let mut round_trips = crate::metrics::transactions::latency_histogram();
    for s in samples.iter().filter(|s| s.sent >= from && s.sent < to) {
        legs.record(s.sent_real_ns, s.peer_stamp_ns, s.arrived_real_ns);
        let _ = round_trips.record(s.arrived_real_ns.saturating_sub(s.sent_real_ns).clamp(1, round_trips.high()));
    }
    let mut t =
        TripTimes::of(basis, LatencySummary::of(&legs.request), LatencySummary::of(&legs.response), legs.negative);
    if t.request_us.is_some() {
        t.round_trip_us = Some(LatencySummary::of(&round_trips));
    }
    t
}

/// The direction whose intervals the probe's are shown with: the load's (forward for `--bidir`).
fn load_direction(spec: &TestSpec) -> Direction {
    match spec.direction {
        Direction::Reverse => Direction::Reverse,
        _ => Direction::Forward,
    }
}

/// Passes everything on to the caller's observer and, after each interval of the load's
/// direction, the probe's round trips over it.
struct ProbeObserver {
    inner: Arc<dyn Observer>,
    log: Arc<Mutex<ProbeLog>>,
    /// When the test started (the sending host read `ready`): its window starts a warm-up later.
    started: Arc<Mutex<Option<Instant>>>,
    warmup: Duration,
    direction: Direction,
}

impl ProbeObserver {
    fn figures(&self, iv: &IntervalFigures) -> Option<LatencyInterval> {
        let t0 = (*self.started.lock().unwrap_or_else(|p| p.into_inner()))?;
        let log = self.log.lock().unwrap_or_else(|p| p.into_inner());
        let samples: Vec<(Instant, Duration)> = log.samples.iter().map(|s| (s.sent, s.rtt)).collect();
        Some(interval_figures(&samples, t0 + self.warmup, iv.start, iv.end))
    }
}

impl Observer for ProbeObserver {
    fn started(&self, start: &StartInfo) {
        *self.started.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
        self.inner.started(start);
    }

    fn interval(&self, direction: Direction, n: usize, received: &IntervalFigures, offered: Option<&IntervalFigures>) {
        self.inner.interval(direction, n, received, offered);
        if direction == self.direction {
            if let Some(figures) = self.figures(received) {
                self.inner.latency(n, &figures);
            }
        }
    }

    fn latency(&self, n: usize, figures: &LatencyInterval) {
        self.inner.latency(n, figures);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::control::{write_msg, ControlMsg};
    use crate::session::sender::scripted;

    /// A receiver that predates `--latency` accepts without `latency_probe`: the sender
    /// refuses to run rather than measure nothing, and says why.
    #[test]
    fn an_older_receiver_is_refused_clearly() {
        let (port, old_receiver) = scripted::receiver(|s, hello| {
            let ControlMsg::Hello { spec, .. } = hello else { panic!("expected a hello") };
            assert!(spec.latency, "the spec asks for the probe");
            write_msg(&s, &scripted::plain_accept()).unwrap();
        });
        let spec = TestSpec { latency: true, time_ms: 100, warmup_ms: 0, ..TestSpec::default() };
        let mut session = SenderSession::connect(&scripted::options(port, spec.clone())).unwrap();
        let err = session.negotiate(&spec, Vec::new()).unwrap_err();
        assert!(err.message.contains("does not answer --latency probes"), "{err}");
        assert!(err.message.contains("upgrade it, or run without --latency"), "{err}");
        old_receiver.join().unwrap();
    }
}
