//! The one skeleton every side of a test runs once its queue threads are started: sample the
//! window, end the threads (at once after a stop, or once the flows have drained), join them.
//!
//! A sending side's threads stop at their own deadline; a stop ends them early. A receiving
//! side's flows end when the far sender's do (EOF, FIN), so it waits for them, bounded, and
//! then lets its threads go. What the threads return, the window and the thread plans go
//! back to the engine, which builds its report from them.

use crate::base::error::Result;
use crate::metrics::measure::{sample_window, IntervalSink, SampleSources, Window};
use crate::runtime::placement::ThreadPlan;
use crate::runtime::threads::QueueThreads;
use std::time::{Duration, Instant};

/// How long a receiver waits past the planned end for the flows to finish.
pub(crate) const END_GRACE: Duration = Duration::from_secs(10);

/// How a side ends once its window is sampled.
pub(crate) enum Ending<'a> {
    /// A sending side: the threads stop at their deadline; after a stop, `halt` ends them now.
    Send { halt: &'a mut dyn FnMut() },
    /// A receiving side: waits until every thread returned or `ended()` says the flows are
    /// over, at most until `until` (and no longer once stopped, with `stop_cuts`), then
    /// `release` tells the threads to end.
    Receive { until: Instant, ended: &'a dyn Fn() -> bool, stop_cuts: bool, release: &'a mut dyn FnMut() },
}

impl<'a> Ending<'a> {
    /// A receiving side whose flows end when the far sender's do (EOF, FIN): it waits for its
    /// threads until `until`, a stop does not cut the wait short, then `release` lets them go.
    pub(crate) fn with_the_sender(until: Instant, release: &'a mut dyn FnMut()) -> Self {
        Ending::Receive { until, ended: &never, stop_cuts: false, release }
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
        Ending::Receive { until, ended, stop_cuts, release } => {
            while !(threads.all_finished() || ended() || (stop_cuts && stopped())) && Instant::now() < until {
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
        vec![ThreadPlan { cpu: crate::runtime::placement::allowed_cpus()[0], queues: vec![0] }]
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
            stop_cuts: false,
            release: &mut release,
        };
        let run = run_side(threads, src, (t0, offsets), &|| false, &mut |_| {}, ending).unwrap();
        assert!(run.window.complete, "the whole window was sampled");
        assert_eq!(run.results, vec![7]);
        assert!(t0.elapsed() >= Duration::from_millis(60), "waited for the flows until the hard end");
        assert_eq!(run.plans.len(), 1);
        assert!(run.plans[0].1 > 0, "the plan carries the thread's tid");
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
