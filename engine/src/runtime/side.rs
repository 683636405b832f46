//! The one skeleton every side of a test runs once its queue threads are started: sample the
//! window, end the threads (at once after a stop, or once the flows have drained), join them.
//! The thread that runs it (the sampler, which wakes every few tens of ms to look for the end)
//! keeps off the queue threads' CPUs meanwhile, where the process may use others: a spinning
//! rr thread would otherwise be preempted by it about 50 times a second.
//!
//! A sending side's threads stop at their own deadline; a stop ends them early. A receiving
//! side's flows end when the far sender's do (EOF, FIN), so it waits for them, bounded, and
//! then lets its threads go. What the threads return, the window and the thread plans go
//! back to the engine, which builds its report from them.

use crate::base::error::Result;
use crate::metrics::measure::{sample_window, IntervalSink, SampleSources, Window};
use crate::runtime::placement::ThreadPlan;
use crate::runtime::threads::QueueThreads;
use crate::sys::affinity::KeptOff;
use std::time::{Duration, Instant};

/// How long a receiver waits past the planned end for the flows to finish.
pub(crate) const END_GRACE: Duration = Duration::from_secs(10);

/// After a stop, how long a receiver that can tell its flows' end (the sender's FINs) still
/// waits for it: a stopped sender ends its flows and then sends its FINs, and the frames it had
/// in flight (the live-frames generator's current call, up to a few tens of ms at a paced rate)
/// arrive first. Cutting at the stop itself lost about 100 such frames of an 8,200-frame test
/// (`xdp_live`'s stop test, once in CI).
pub(crate) const STOP_LINGER: Duration = Duration::from_secs(1);

/// How a side ends once its window is sampled.
pub(crate) enum Ending<'a> {
    /// A sending side: the threads stop at their deadline; after a stop, `halt` ends them now.
    Send { halt: &'a mut dyn FnMut() },
    /// A receiving side: waits until every thread returned or `ended()` says the flows are
    /// over, at most until `until` (and, with `after_stop`, no longer than that once
    /// stopped), then `release` tells the threads to end.
    Receive { until: Instant, ended: &'a dyn Fn() -> bool, after_stop: Option<Duration>, release: &'a mut dyn FnMut() },
}

impl<'a> Ending<'a> {
    /// A receiving side whose flows end when the far sender's do (EOF, FIN): it waits for its
    /// threads until `until`, or until `abandoned()` says the flows moved nothing for the
    /// receiver's no-progress limit (they will never end by themselves, and nothing is in
    /// flight); a stop does not cut the wait short; then `release` lets them go.
    pub(crate) fn with_the_sender(
        until: Instant,
        abandoned: &'a dyn Fn() -> bool,
        release: &'a mut dyn FnMut(),
    ) -> Self {
        Ending::Receive { until, ended: abandoned, after_stop: None, release }
    }
}

/// Flows that end only with their threads.
pub fn never() -> bool {
    false
}

/// What one side measured: the window, each thread's result, and the plan each thread ran
/// (with its kernel thread id, for the CPU figures).
pub(crate) struct SideRun<R> {
    pub window: Window,
    pub results: Vec<R>,
    pub plans: Vec<(ThreadPlan, i32)>,
}

/// Runs the side whose `threads` are started: samples `src` (its `tids` are the threads')
/// from `t0` at `offsets`, hands each closed interval to `sink`, polls `stopped`, ends as
/// `ending` says, and joins; a failed or panicked thread is the side's error.
pub(crate) fn run_side<R: Send + 'static>(
    threads: QueueThreads<R>,
    src: SampleSources<'_>,
    (t0, offsets): (Instant, impl IntoIterator<Item = Duration>),
    stopped: &dyn Fn() -> bool,
    sink: &mut IntervalSink<'_>,
    ending: Ending<'_>,
) -> Result<SideRun<R>> {
    let src = SampleSources { tids: &threads.tids, ..src };
    let _off = KeptOff::cpus(&threads.plans.iter().map(|p| p.cpu).collect::<Vec<_>>());
    let ended: &dyn Fn() -> bool = match &ending {
        Ending::Send { .. } => &never,
        Ending::Receive { ended, .. } => *ended,
    };
    let finished = || threads.all_finished() || ended() || stopped();
    let window = sample_window(t0, offsets, &src, &finished, sink);
    match ending {
        Ending::Send { halt } => {
            if stopped() {
                // Stopped early: the flows end now, not after the cool-down.
                halt();
            }
        }
        Ending::Receive { until, ended, after_stop, release } => {
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
            release();
        }
    }
    let plans: Vec<_> = threads.plans.iter().cloned().zip(threads.tids.iter().copied()).collect();
    let results = threads.join()?;
    Ok(SideRun { window, results, plans })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::measure::QueueCounters;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    fn plans() -> Vec<ThreadPlan> {
        vec![ThreadPlan { cpu: crate::sys::affinity::allowed_cpus()[0], queues: vec![0] }]
    }

    /// The sampler runs off the queue threads' CPUs during the window (read back from the
    /// kernel on the sampling thread itself, at each interval) and has its mask back after.
    #[test]
    fn the_sampler_keeps_off_the_queue_threads_cpus_and_gets_its_mask_back() {
        let before = crate::sys::affinity::allowed_cpus();
        let queue_cpu = before[0];
        let plans = vec![ThreadPlan { cpu: queue_cpu, queues: vec![0] }];
        // The worker outlives the window, so that the whole window is sampled.
        let threads = QueueThreads::spawn(&plans, vec![1u32], |x| {
            std::thread::sleep(Duration::from_millis(150));
            Ok(x)
        })
        .unwrap();
        let counters = QueueCounters::new(1);
        let src = SampleSources { counters: &counters, tids: &[], sockets: &[], iface: None, udp: &[] };
        let offsets = vec![Duration::ZERO, Duration::from_millis(20), Duration::from_millis(40)];
        let mut seen = Vec::new();
        let mut sink = |_| seen.push(crate::sys::affinity::allowed_cpus());
        let ending = Ending::Send { halt: &mut || {} };
        run_side(threads, src, (Instant::now(), offsets), &|| false, &mut sink, ending).unwrap();
        assert_eq!(seen.len(), 2, "two intervals closed on the sampling thread");
        for during in &seen {
            if before.len() > 1 {
                assert!(!during.contains(&queue_cpu), "off CPU {queue_cpu} during the window: {during:?}");
                assert_eq!(during.len(), before.len() - 1, "and on every other CPU: {during:?}");
            } else {
                assert_eq!(during, &before, "one CPU allowed: it shares it");
            }
        }
        assert_eq!(crate::sys::affinity::allowed_cpus(), before, "its mask is back after the side");
    }

    #[test]
    fn a_receiving_side_waits_for_its_flows_then_releases_its_threads() {
        let plans = plans();
        let go = Arc::new(AtomicBool::new(false));
        let worker_go = Arc::clone(&go);
        let threads = QueueThreads::spawn(&plans, vec![7u32], move |x| {
            while !worker_go.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(1));
            }
            Ok(x)
        })
        .unwrap();
        let counters = QueueCounters::new(1);
        let src = SampleSources { counters: &counters, tids: &[], sockets: &[], iface: None, udp: &[] };
        let t0 = Instant::now();
        let offsets = vec![Duration::ZERO, Duration::from_millis(30)];
        let ended = || false;
        let mut release = || go.store(true, Ordering::Relaxed);
        let ending = Ending::Receive {
            until: t0 + Duration::from_millis(60),
            ended: &ended,
            after_stop: None,
            release: &mut release,
        };
        let run = run_side(threads, src, (t0, offsets), &|| false, &mut |_| {}, ending).unwrap();
        assert!(run.window.complete, "the whole window was sampled");
        assert_eq!(run.results, vec![7]);
        assert!(t0.elapsed() >= Duration::from_millis(60), "waited for the flows until the hard end");
        assert_eq!(run.plans.len(), 1);
        assert!(run.plans[0].1 > 0, "the plan carries the thread's tid");
    }

    /// How long a stopped receiving side waits, its flows ending at `ends_at` (never: None).
    fn stopped_receiver_waits(ends_at: Option<Duration>, after_stop: Duration) -> Duration {
        let go = Arc::new(AtomicBool::new(false));
        let worker_go = Arc::clone(&go);
        let threads = QueueThreads::spawn(&plans(), vec![()], move |()| {
            while !worker_go.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(1));
            }
            Ok(())
        })
        .unwrap();
        let counters = QueueCounters::new(1);
        let src = SampleSources { counters: &counters, tids: &[], sockets: &[], iface: None, udp: &[] };
        let t0 = Instant::now();
        let ended = || ends_at.is_some_and(|at| t0.elapsed() >= at);
        let mut release = || go.store(true, Ordering::Relaxed);
        let ending = Ending::Receive {
            until: t0 + Duration::from_secs(30),
            ended: &ended,
            after_stop: Some(after_stop),
            release: &mut release,
        };
        run_side(threads, src, (t0, vec![Duration::ZERO]), &|| true, &mut |_| {}, ending).unwrap();
        t0.elapsed()
    }

    #[test]
    fn a_stopped_receiver_waits_for_its_flows_end_at_most_the_linger() {
        // The FINs come 40 ms after the stop: the wait sees them rather than cutting at the stop.
        let took = stopped_receiver_waits(Some(Duration::from_millis(40)), Duration::from_secs(5));
        assert!(took >= Duration::from_millis(40), "waited past the stop for the flows' end: {took:?}");
        assert!(took < Duration::from_secs(5), "and no longer: {took:?}");
        // FINs that never come: the linger bounds the wait, not the far `until`.
        let took = stopped_receiver_waits(None, Duration::from_millis(50));
        assert!(took >= Duration::from_millis(50) && took < Duration::from_secs(5), "{took:?}");
    }

    #[test]
    fn a_stop_halts_a_sending_side_and_a_panic_is_the_sides_error() {
        let plans = plans();
        let halt = Arc::new(AtomicBool::new(false));
        let worker_halt = Arc::clone(&halt);
        let threads = QueueThreads::spawn(&plans, vec![()], move |()| -> Result<()> {
            while !worker_halt.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(1));
            }
            panic!("queue 0 gave up");
        })
        .unwrap();
        let counters = QueueCounters::new(1);
        let src = SampleSources { counters: &counters, tids: &[], sockets: &[], iface: None, udp: &[] };
        let offsets = vec![Duration::ZERO, Duration::from_secs(30)];
        let mut stop = || halt.store(true, Ordering::Relaxed);
        let started = Instant::now();
        let err = run_side(threads, src, (started, offsets), &|| true, &mut |_| {}, Ending::Send { halt: &mut stop })
            .err()
            .expect("a panicked thread fails the side");
        assert!(started.elapsed() < Duration::from_secs(5), "the stop ended the window and the thread");
        assert!(err.message.contains("queue 0 gave up"), "the panic message is kept: {}", err.message);
    }
}
