use super::*;
use crate::sys::affinity::allowed_cpus;
use std::sync::atomic::AtomicUsize;
use std::sync::Mutex;

/// A live test that stops once `stop_at` has passed, and counts the intervals it is shown.
struct StopsAt {
    stop_at: Instant,
    shown: AtomicUsize,
}

impl StopsAt {
    fn after(wait: Duration) -> Self {
        Self { stop_at: Instant::now() + wait, shown: AtomicUsize::new(0) }
    }
    fn never() -> Self {
        Self::after(Duration::from_secs(3600))
    }
    fn already() -> Self {
        Self::after(Duration::ZERO)
    }
}

impl Live for StopsAt {
    fn stopped(&self) -> Option<String> {
        (Instant::now() >= self.stop_at).then(|| "stopped by the test".to_string())
    }
    fn interval(&self, _role: Role, _interval: IntervalFigures) {
        self.shown.fetch_add(1, Ordering::Relaxed);
    }
}

/// A queue thread's loop in these tests: nothing but waiting for the side's flag.
fn until_halted(halt: &AtomicBool) {
    while !halt.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn placement(threads: Vec<ThreadPlan>) -> Placement {
    Placement {
        threads,
        wait: crate::uring::ring::WaitMode::Spin,
        fast: Default::default(),
        summary: "two threads on one CPU".into(),
    }
}

fn one_thread() -> Placement {
    placement(vec![ThreadPlan { cpu: allowed_cpus()[0], queues: vec![0] }])
}

fn two_threads() -> Placement {
    let cpu = allowed_cpus()[0];
    placement(vec![ThreadPlan { cpu, queues: vec![0] }, ThreadPlan { cpu, queues: vec![1] }])
}

/// A test of `time_ms` with intervals of `interval_ms`, no warm-up and no cool-down.
fn spec(queues: u32, time_ms: u64, interval_ms: u64) -> TestSpec {
    TestSpec { queues, time_ms, warmup_ms: 0, cooldown_ms: 0, interval_ms, ..TestSpec::default() }
}

/// The sampler runs off the queue threads' CPUs during the window (read back from the
/// kernel on the sampling thread itself, at each interval) and has its mask back after.
#[test]
fn the_sampler_keeps_off_the_queue_threads_cpus_and_gets_its_mask_back() {
    let before = allowed_cpus();
    let queue_cpu = before[0];
    let placement = one_thread();
    let spec = spec(1, 40, 20);
    let live = StopsAt::never();
    let side = TestSide::new(Role::Sender, &spec, &placement, &live);
    // The worker outlives the window, so that the whole window is sampled.
    let threads = side
        .spawn(
            vec![(0, 1u32)],
            |(_, xs)| xs[0],
            |x, _| {
                std::thread::sleep(Duration::from_millis(150));
                Ok(x)
            },
        )
        .unwrap();
    let seen = Mutex::new(Vec::new());
    let mut show = |_| seen.lock().unwrap().push(allowed_cpus());
    side.run_showing(threads, Instant::now(), SideProbes::default(), SideEnd::AtDeadline, &mut show).unwrap();
    let seen = seen.into_inner().unwrap();
    assert_eq!(seen.len(), 2, "two intervals closed on the sampling thread");
    for during in &seen {
        if before.len() > 1 {
            assert!(!during.contains(&queue_cpu), "off CPU {queue_cpu} during the window: {during:?}");
            assert_eq!(during.len(), before.len() - 1, "and on every other CPU: {during:?}");
        } else {
            assert_eq!(during, &before, "one CPU allowed: it shares it");
        }
    }
    assert_eq!(allowed_cpus(), before, "its mask is back after the side");
}

#[test]
fn a_receiving_side_waits_for_its_flows_then_releases_its_threads() {
    let placement = one_thread();
    let spec = spec(1, 30, 0);
    let live = StopsAt::never();
    let side = TestSide::new(Role::Receiver, &spec, &placement, &live);
    let threads = side
        .spawn(
            vec![(0, 7u32)],
            |(_, xs)| (xs[0], side.halt()),
            |(x, halt), _| {
                until_halted(&halt);
                Ok(x)
            },
        )
        .unwrap();
    let t0 = Instant::now();
    let end = SideEnd::Receive {
        until: t0 + Duration::from_millis(60),
        ended: &|| false,
        after_stop: None,
        before_release: None,
    };
    let run = side.run(threads, t0, SideProbes::default(), end).unwrap();
    assert!(run.window.complete, "the whole window was sampled");
    assert_eq!(run.results, vec![7]);
    assert!(t0.elapsed() >= Duration::from_millis(60), "waited for the flows until the hard end");
    assert_eq!(run.plans.len(), 1);
    assert!(run.plans[0].1 > 0, "the plan carries the thread's tid");
}

/// How long a stopped receiving side waits, its flows ending at `ends_at` (never: None).
fn stopped_receiver_waits(ends_at: Option<Duration>, after_stop: Duration) -> Duration {
    let placement = one_thread();
    let spec = spec(1, 0, 0);
    let live = StopsAt::already();
    let side = TestSide::new(Role::Receiver, &spec, &placement, &live);
    let threads = side
        .spawn(
            vec![(0, ())],
            |_| side.halt(),
            |halt, _| {
                until_halted(&halt);
                Ok(())
            },
        )
        .unwrap();
    let t0 = Instant::now();
    let ended = || ends_at.is_some_and(|at| t0.elapsed() >= at);
    let end = SideEnd::Receive {
        until: t0 + Duration::from_secs(30),
        ended: &ended,
        after_stop: Some(after_stop),
        before_release: None,
    };
    side.run(threads, t0, SideProbes::default(), end).unwrap();
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
    let placement = one_thread();
    let spec = spec(1, 30_000, 0);
    let live = StopsAt::already();
    let side = TestSide::new(Role::Sender, &spec, &placement, &live);
    let threads = side
        .spawn(
            vec![(0, ())],
            |_| side.halt(),
            |halt, _| -> Result<()> {
                until_halted(&halt);
                panic!("queue 0 gave up");
            },
        )
        .unwrap();
    let started = Instant::now();
    let err = side
        .run(threads, started, SideProbes::default(), SideEnd::AtDeadline)
        .err()
        .expect("a panicked thread fails the side");
    assert!(started.elapsed() < Duration::from_secs(5), "the stop ended the window and the thread");
    assert!(err.message.contains("queue 0 gave up"), "the panic message is kept: {}", err.message);
}

#[test]
fn a_stopped_sending_side_halts_its_threads_and_its_report_says_how_far_it_got() {
    let spec = TestSpec { flows_per_queue: 2, ..spec(2, 30_000, 10) };
    let placement = two_threads();
    let live = StopsAt::after(Duration::from_millis(100));
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
    let spec = spec(2, 50, 10);
    let placement = two_threads();
    let live = StopsAt::never();
    let side = TestSide::new(Role::Receiver, &spec, &placement, &live).unshown();
    let halt = side.halt();
    let threads = side
        .spawn(
            vec![(0, ()), (1, ())],
            |_| side.halt(),
            |halt, _| {
                until_halted(&halt);
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

/// A side with no far end, watched by its stop token: the token's cause is the side's stop.
#[test]
fn a_stop_token_stops_a_side_with_its_cause() {
    let token = StopToken::new();
    assert_eq!(Live::stopped(&token), None);
    token.stop("SIGINT");
    assert_eq!(Live::stopped(&token).as_deref(), Some("SIGINT"));
}
