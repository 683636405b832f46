//! One side of a test, built once for every engine: the side's queue counters and the flag
//! that ends its threads, its flows dealt to the planned queue threads, the threads started,
//! the window sampled and watched by `Live`, and the side's report built from what came back.
//!
//! An engine supplies only what differs, a small table of callbacks over this one loop: the
//! input of each queue thread (its flows and its config) and the loop the thread runs, then
//! the figures only it has (path, zero-copy, UDP, AF_XDP).

use crate::base::error::Result;
use crate::base::spec::TestSpec;
use crate::metrics::figures::{Role, SideReport};
use crate::metrics::measure::{QueueCounters, SampleSources, Window};
use crate::metrics::seq::LiveStats;
use crate::runtime::placement::{Placement, ThreadPlan};
use crate::runtime::side::{run_side, Ending, END_GRACE};
use crate::runtime::threads::{deal_by_queue, QueueThreads};
use crate::session::live::Live;
use crate::transport::FlowOutcome;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One side of a test on this host: the sender or the receiver of `spec`'s flows, watched by
/// `live`.
pub(crate) struct TestSide<'a> {
    role: Role,
    spec: &'a TestSpec,
    placement: &'a Placement,
    live: &'a dyn Live,
    /// Whether the side's intervals go to `live` (an rr server's are not shown).
    shown: bool,
    counters: Arc<QueueCounters>,
    /// Raised to end the threads: on a stop (sending), or once the flows ended (receiving).
    halt: Arc<AtomicBool>,
}

/// What the sampler reads beside the side's own counters and threads.
#[derive(Default)]
pub(crate) struct SideProbes<'a> {
    /// The flows' sockets, for TCP_INFO.
    pub sockets: &'a [RawFd],
    /// The interface facing the peer, for its counters.
    pub iface: Option<&'a str>,
    /// UDP flows' accounting, published by the receiving threads.
    pub udp: &'a [LiveStats],
}

/// How a side ends once its window is sampled.
pub(crate) enum SideEnd<'a> {
    /// A sending side: its threads stop at their deadline; a stop raises the halt flag at once.
    AtDeadline,
    /// A receiving side whose flows end when the far sender's do (EOF, FIN): it waits for
    /// its threads until the planned end and a grace, then raises the flag.
    WithTheSender,
    /// A receiving side with its own sign that the flows are over: waits until every thread
    /// returned or `ended()`, at most until `until` (and no longer once stopped, with
    /// `after_stop`: at most that long once stopped), then runs `before_release` and raises the flag.
    Receive {
        until: Instant,
        ended: &'a dyn Fn() -> bool,
        after_stop: Option<Duration>,
        before_release: Option<&'a mut dyn FnMut()>,
    },
}

/// What one side measured: the window, each thread's result, the plan each thread ran (with
/// its kernel thread id), and why it stopped early, if it did.
pub(crate) struct SideRun<R> {
    pub window: Window,
    pub results: Vec<R>,
    pub plans: Vec<(ThreadPlan, i32)>,
    pub stopped: Option<String>,
}

impl<'a> TestSide<'a> {
    pub(crate) fn new(role: Role, spec: &'a TestSpec, placement: &'a Placement, live: &'a dyn Live) -> Self {
        let counters = Arc::new(QueueCounters::new(spec.queues as usize));
        Self { role, spec, placement, live, shown: true, counters, halt: Arc::new(AtomicBool::new(false)) }
    }

    /// The same side, whose intervals are not shown.
    pub(crate) fn unshown(self) -> Self {
        Self { shown: false, ..self }
    }

    /// The flag the threads watch (every loop config's `halt`).
    pub(crate) fn halt(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.halt)
    }

    /// Each of `flows` (by index) with its queue, made into what a queue thread runs by
    /// `make(flow, queue, flow's socket)`.
    pub(crate) fn by_queue<X, T>(&self, flows: Vec<(u32, X)>, make: impl FnMut(u32, u32, X) -> T) -> Vec<(u32, T)> {
        self.by_queue_of(flows, |flow| self.spec.queue_of_flow(flow), make)
    }

    /// [`by_queue`](Self::by_queue), each flow's queue given by `queue_of(flow)` (a receiver
    /// serves a flow on the queue of the NIC queue it arrived on).
    pub(crate) fn by_queue_of<X, T>(
        &self,
        flows: Vec<(u32, X)>,
        queue_of: impl Fn(u32) -> u32,
        mut make: impl FnMut(u32, u32, X) -> T,
    ) -> Vec<(u32, T)> {
        flows
            .into_iter()
            .map(|(flow, x)| {
                let queue = queue_of(flow);
                (queue, make(flow, queue, x))
            })
            .collect()
    }

    /// Deals `items` (each with its queue) to the planned threads, makes each thread's input
    /// with `input(thread, its items)`, and starts the threads, each running `body` over its
    /// input with the side's counters.
    pub(crate) fn spawn<T, I, R>(
        &self,
        items: Vec<(u32, T)>,
        input: impl FnMut((u32, Vec<T>)) -> I,
        body: impl Fn(I, &QueueCounters) -> Result<R> + Send + Sync + 'static,
    ) -> Result<QueueThreads<R>>
    where
        I: Send + 'static,
        R: Send + 'static,
    {
        let threads = &self.placement.threads;
        let inputs = (0..).zip(deal_by_queue(threads, items)).map(input).collect();
        let counters = Arc::clone(&self.counters);
        QueueThreads::spawn(threads, inputs, move |input| body(input, &counters))
    }

    /// Runs the side whose `threads` are started: samples the window from `t0` (with
    /// `probes`), hands each closed interval to `live`, ends as `end` says, and joins; a
    /// failed or panicked thread is the side's error.
    pub(crate) fn run<R: Send + 'static>(
        &self,
        threads: QueueThreads<R>,
        t0: Instant,
        probes: SideProbes<'_>,
        mut end: SideEnd<'_>,
    ) -> Result<SideRun<R>> {
        let src = SampleSources {
            counters: &self.counters,
            tids: &[],
            sockets: probes.sockets,
            iface: probes.iface,
            udp: probes.udp,
        };
        let mut before_release = match &mut end {
            SideEnd::Receive { before_release, .. } => before_release.take(),
            _ => None,
        };
        let mut raise = || {
            if let Some(first) = before_release.as_mut() {
                first();
            }
            self.halt.store(true, Ordering::Relaxed);
        };
        let abandoned = || self.live.abandoned();
        let ending = match end {
            SideEnd::AtDeadline => Ending::Send { halt: &mut raise },
            SideEnd::WithTheSender => {
                Ending::with_the_sender(t0 + self.spec.total() + END_GRACE, &abandoned, &mut raise)
            }
            SideEnd::Receive { until, ended, after_stop, .. } => {
                Ending::Receive { until, ended, after_stop, release: &mut raise }
            }
        };
        let shown_as = self.shown.then_some(self.role);
        let mut sink = |iv| {
            if let Some(role) = shown_as {
                self.live.interval(role, iv);
            }
        };
        // The bytes moved so far go with each poll: a receiver's no-progress limit reads them.
        let stopped = || {
            self.live.progress(self.role, self.counters.snapshot().iter().sum());
            self.live.stopped().is_some()
        };
        let run = run_side(threads, src, (t0, self.spec.sample_offsets()), &stopped, &mut sink, ending)?;
        Ok(SideRun { window: run.window, results: run.results, plans: run.plans, stopped: self.live.stopped() })
    }

    /// The side's report from `run` and its flows' `outcomes`: the figures over the window,
    /// how far it got when stopped, and its placement. The engine adds its path and the
    /// figures only it has.
    pub(crate) fn report<R>(&self, run: &SideRun<R>, outcomes: &[FlowOutcome]) -> SideReport {
        let mut report = SideReport::build(self.role, self.spec, &run.window, outcomes, &run.plans);
        if let Some(reason) = &run.stopped {
            report.stopped_early(self.spec, reason);
        }
        report.placement = self.placement.summary.clone();
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::figures::IntervalFigures;
    use crate::runtime::placement::ThreadPlan;
    use crate::sys::affinity::allowed_cpus;
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    /// A live test that stops once `stop_at` has passed, and counts the intervals it is shown.
    struct StopsAt {
        stop_at: Instant,
        shown: AtomicUsize,
    }

    impl Live for StopsAt {
        fn stopped(&self) -> Option<String> {
            (Instant::now() >= self.stop_at).then(|| "stopped by the test".to_string())
        }
        fn interval(&self, _role: Role, _interval: IntervalFigures) {
            self.shown.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn two_threads() -> Placement {
        let cpu = allowed_cpus()[0];
        Placement {
            threads: vec![ThreadPlan { cpu, queues: vec![0] }, ThreadPlan { cpu, queues: vec![1] }],
            wait: crate::uring::ring::WaitMode::Spin,
            fast: Default::default(),
            summary: "two threads on one CPU".into(),
        }
    }

    #[test]
    fn a_stopped_sending_side_halts_its_threads_and_its_report_says_how_far_it_got() {
        let spec = TestSpec {
            queues: 2,
            flows_per_queue: 2,
            time_ms: 30_000,
            warmup_ms: 0,
            interval_ms: 10,
            ..TestSpec::default()
        };
        let placement = two_threads();
        let live = StopsAt { stop_at: Instant::now() + Duration::from_millis(100), shown: AtomicUsize::new(0) };
        let side = TestSide::new(Role::Sender, &spec, &placement, &live);
        let flows = side.by_queue((0..spec.flows()).map(|f| (f, ())).collect(), |flow, queue, ()| (flow, queue));
        let threads = side
            .spawn(
                flows,
                |(thread, flows)| (thread, flows, side.halt()),
                |(thread, flows, halt), counters| {
                    // Each thread counts a byte per flow until the side raises its flag.
                    while !halt.load(Ordering::Relaxed) {
                        for &(_, queue) in &flows {
                            counters.add(queue as usize, 1);
                        }
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    Ok((thread, flows))
                },
            )
            .unwrap();
        let started = Instant::now();
        let run = side.run(threads, started, SideProbes::default(), SideEnd::AtDeadline).unwrap();
        assert!(started.elapsed() < Duration::from_secs(10), "the stop ended the side long before its 30 s");
        assert_eq!(run.stopped.as_deref(), Some("stopped by the test"));
        let dealt: Vec<_> = run.results.iter().map(|(t, flows)| (*t, flows.clone())).collect();
        let by_queue = |q: u32| (0..4).filter(|&f| spec.queue_of_flow(f) == q).map(|f| (f, q)).collect::<Vec<_>>();
        assert_eq!(dealt, vec![(0, by_queue(0)), (1, by_queue(1))], "each thread got its queue's flows");
        assert!(live.shown.load(Ordering::Relaxed) > 0, "the sending side's intervals are shown");
        let outcomes: Vec<FlowOutcome> =
            (0..4).map(|f| FlowOutcome { queue: spec.queue_of_flow(f), bytes: 10, error: None }).collect();
        let report = side.report(&run, &outcomes);
        assert!(!report.complete, "a stopped side is not complete");
        assert!(report.errors.iter().any(|e| e.contains("stopped by the test")), "{:?}", report.errors);
        assert_eq!(report.placement, "two threads on one CPU");
        assert_eq!(report.queues.iter().map(|q| q.total_bytes).sum::<u64>(), 40);
    }

    #[test]
    fn a_receiving_side_runs_its_release_before_raising_the_flag_and_an_unshown_side_shows_nothing() {
        let spec = TestSpec { queues: 2, time_ms: 50, warmup_ms: 0, interval_ms: 10, ..TestSpec::default() };
        let placement = two_threads();
        let live = StopsAt { stop_at: Instant::now() + Duration::from_secs(3600), shown: AtomicUsize::new(0) };
        let side = TestSide::new(Role::Receiver, &spec, &placement, &live).unshown();
        let halt = side.halt();
        let threads = side
            .spawn(
                vec![(0, ()), (1, ())],
                |_| side.halt(),
                |halt, _| {
                    while !halt.load(Ordering::Relaxed) {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    Ok(())
                },
            )
            .unwrap();
        let t0 = Instant::now();
        let flag_at_release = Arc::new(AtomicBool::new(true));
        let seen = Arc::clone(&flag_at_release);
        let mut first = move || seen.store(halt.load(Ordering::Relaxed), Ordering::Relaxed);
        let end = SideEnd::Receive {
            until: t0 + Duration::from_millis(80),
            ended: &|| false,
            after_stop: None,
            before_release: Some(&mut first),
        };
        let run = side.run(threads, t0, SideProbes::default(), end).unwrap();
        assert!(t0.elapsed() >= Duration::from_millis(80), "waited for the flows until `until`");
        assert_eq!(run.results.len(), 2, "both threads were released and joined");
        assert!(!flag_at_release.load(Ordering::Relaxed), "before_release ran while the flag was still down");
        assert_eq!(run.stopped, None);
        assert_eq!(live.shown.load(Ordering::Relaxed), 0, "an unshown side's intervals are not shown");
    }
}
