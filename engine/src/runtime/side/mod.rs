//! One side of a test, run the same way for every workload: the side's queue counters and the
//! flag that ends its threads, its flows dealt to the planned queue threads, the threads
//! started, the window sampled and watched by a `Live`, the threads ended (at once after a
//! stop, or once the flows have drained) and joined, and the side's report built from what
//! came back. [`halves`] runs a stream engine's sending and receiving sides in each direction.
//!
//! A workload supplies only what differs: the input of each queue thread (its flows and its
//! config) and the loop the thread runs, then the figures only it has (path, zero-copy, UDP,
//! AF_XDP). What a side is watched by, the control channel on either host, is the session's
//! (`Live`'s implementations).
//!
//! A sending side's threads stop at their own deadline; a stop ends them early. A receiving
//! side's flows end when the far sender's do (EOF, FIN), so it waits for them, bounded, and
//! then lets its threads go. The thread that samples the window (which wakes every few tens of
//! ms to look for the end) keeps off the queue threads' CPUs meanwhile, where the process may
//! use others: a spinning rr thread would otherwise be preempted by it about 50 times a second.

pub mod halves;

use crate::base::error::Result;
use crate::base::spec::TestSpec;
use crate::base::stop::StopToken;
use crate::metrics::figures::{IntervalFigures, Role, SideReport};
use crate::metrics::measure::{sample_window, IntervalSink, QueueCounters, SampleSources, Window};
use crate::metrics::seq::LiveStats;
use crate::runtime::placement::{Placement, ThreadPlan};
use crate::runtime::threads::{deal_by_queue, QueueThreads};
use crate::sys::affinity::KeptOff;
use crate::transport::FlowOutcome;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a receiver waits past the planned end for the flows to finish.
pub(crate) const END_GRACE: Duration = Duration::from_secs(10);

/// After a stop, how long a receiver that can tell its flows' end (the sender's FINs) still
/// waits for it: a stopped sender ends its flows and then sends its FINs, and the frames it had
/// in flight (the live-frames generator's current call, up to a few tens of ms at a paced rate)
/// arrive first. Cutting at the stop itself lost about 100 such frames of an 8,200-frame test
/// (`xdp_live`'s stop test, once in CI).
pub(crate) const STOP_LINGER: Duration = Duration::from_secs(1);

/// What a running side is watched by: whether it must end now, and where its intervals go.
/// The session implements it over the control channel on either host
/// (`session::live::ServerLive`, `session::live::SenderLive`).
pub(crate) trait Live: Sync {
    /// `Some(reason)` once the test must end before its planned end.
    fn stopped(&self) -> Option<String>;
    /// One closed interval of the side playing `role` on this host.
    fn interval(&self, role: Role, interval: IntervalFigures);
    /// The side playing `role` has moved `bytes` so far (polled with [`Self::stopped`]): a
    /// receiver's no-progress limit watches it.
    fn progress(&self, _role: Role, _bytes: u64) {}
    /// Whether the test's flows moved nothing for the receiver's no-progress limit: they
    /// will never end by themselves, so a side waiting for their end stops waiting.
    fn abandoned(&self) -> bool {
        false
    }
}

/// A side with no far end (http's client) is watched by its stop token alone.
impl Live for StopToken {
    fn stopped(&self) -> Option<String> {
        self.cause().map(str::to_string)
    }
    fn interval(&self, _role: Role, _interval: IntervalFigures) {}
}

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
    /// its threads until the planned end and a grace, or until the live test says the flows
    /// are abandoned (they moved nothing for the receiver's no-progress limit, so they will
    /// never end by themselves); a stop does not cut the wait short; then it raises the flag.
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
/// its kernel thread id, for the CPU figures), and why it stopped early, if it did.
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
        end: SideEnd<'_>,
    ) -> Result<SideRun<R>> {
        let shown_as = self.shown.then_some(self.role);
        let mut show = |iv| {
            if let Some(role) = shown_as {
                self.live.interval(role, iv);
            }
        };
        self.run_showing(threads, t0, probes, end, &mut show)
    }

    /// [`run`](Self::run), each closed interval handed to `show` instead of `live` (http
    /// joins its client threads' pieces of the interval to it there).
    pub(crate) fn run_showing<R: Send + 'static>(
        &self,
        threads: QueueThreads<R>,
        t0: Instant,
        probes: SideProbes<'_>,
        end: SideEnd<'_>,
        show: &mut IntervalSink<'_>,
    ) -> Result<SideRun<R>> {
        let src = SampleSources {
            counters: &self.counters,
            tids: &threads.tids,
            sockets: probes.sockets,
            iface: probes.iface,
            udp: probes.udp,
        };
        // The bytes moved so far go with each poll: a receiver's no-progress limit reads them.
        let stopped = || {
            self.live.progress(self.role, self.counters.snapshot().iter().sum());
            self.live.stopped().is_some()
        };
        let abandoned = || self.live.abandoned();
        let never = || false;
        // Whether a receiving side's flows are over by its own sign (a sending side's never are:
        // they end with their threads).
        let ended: &dyn Fn() -> bool = match &end {
            SideEnd::AtDeadline => &never,
            SideEnd::WithTheSender => &abandoned,
            SideEnd::Receive { ended, .. } => *ended,
        };
        let _off = KeptOff::cpus(&threads.plans.iter().map(|p| p.cpu).collect::<Vec<_>>());
        let finished = || threads.all_finished() || ended() || stopped();
        let window = sample_window(t0, self.spec.sample_offsets(), &src, &finished, show);
        match end {
            SideEnd::AtDeadline => {
                if stopped() {
                    // Stopped early: the flows end now, not after the cool-down.
                    self.halt.store(true, Ordering::Relaxed);
                }
            }
            SideEnd::WithTheSender => {
                wait_for_the_flows(&threads, t0 + self.spec.total() + END_GRACE, ended, None, &stopped);
                self.halt.store(true, Ordering::Relaxed);
            }
            SideEnd::Receive { until, after_stop, before_release, .. } => {
                wait_for_the_flows(&threads, until, ended, after_stop, &stopped);
                if let Some(first) = before_release {
                    first();
                }
                self.halt.store(true, Ordering::Relaxed);
            }
        }
        let plans: Vec<_> = threads.plans.iter().cloned().zip(threads.tids.iter().copied()).collect();
        let results = threads.join()?;
        Ok(SideRun { window, results, plans, stopped: self.live.stopped() })
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

/// A receiving side's wait, once its window is sampled, for every thread to return or
/// `ended()`, at most until `until` (and, with `after_stop`, no longer than that once
/// stopped).
fn wait_for_the_flows<R: Send + 'static>(
    threads: &QueueThreads<R>,
    until: Instant,
    ended: &dyn Fn() -> bool,
    after_stop: Option<Duration>,
    stopped: &dyn Fn() -> bool,
) {
    let mut until = until;
    let mut stop_seen = false;
    while !(threads.all_finished() || ended()) && Instant::now() < until {
        if let (Some(linger), false) = (after_stop, stop_seen) {
            if stopped() {
                stop_seen = true;
                until = until.min(Instant::now() + linger);
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[cfg(test)]
mod tests;
