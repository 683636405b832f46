//! A client thread's side of an http run's intervals: it keeps the latencies of the current
//! interval in a histogram of its own and hands it over, with its counts, when the interval
//! closes (no lock, no shared write per request). The run's thread puts the pieces together
//! (`workload::http`'s collector).

use hdrhistogram::Histogram;
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

/// Highest latency the histograms record (longer ones are clamped): one hour in µs.
pub(crate) const MAX_LATENCY_US: u64 = 3_600_000_000;

/// A latency histogram of the run's range (µs, 3 significant digits).
pub(crate) fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_US, 3).expect("valid fixed histogram bounds")
}

/// Where interval `n` begins and ends: every `every` from `start`, the last one cut at the
/// run's planned end.
#[derive(Debug, Clone, Copy)]
pub(crate) struct IntervalClock {
    pub start: Instant,
    pub every: Duration,
    /// Index of the last interval the planned run holds.
    pub last: u64,
}

impl IntervalClock {
    pub(crate) fn new(start: Instant, every: Duration, duration: Duration) -> Self {
        let n = duration.as_nanos().div_ceil(every.as_nanos().max(1)).max(1);
        Self { start, every, last: u64::try_from(n - 1).unwrap_or(u64::MAX) }
    }

    /// The interval `at` falls in (one past the planned end: the last).
    fn index(&self, at: Instant) -> u64 {
        let n = at.saturating_duration_since(self.start).as_nanos() / self.every.as_nanos().max(1);
        u64::try_from(n).unwrap_or(u64::MAX).min(self.last)
    }

    /// When interval `n` ends (for the last one: never, it runs to the end of the run).
    fn edge_after(&self, n: u64) -> Instant {
        let far = self.start + Duration::from_secs(100 * 365 * 86_400);
        if n >= self.last {
            return far;
        }
        u32::try_from(n + 1).ok().and_then(|k| self.every.checked_mul(k)).map_or(far, |d| self.start + d)
    }
}

/// A thread's totals when it closes an interval; its piece is the change since the last one.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Counts {
    pub bytes: u64,
    pub errors: u64,
    pub non_2xx: u64,
}

impl Counts {
    /// What was counted between `earlier` and these totals.
    fn since(self, earlier: Counts) -> Counts {
        Counts {
            bytes: self.bytes - earlier.bytes,
            errors: self.errors - earlier.errors,
            non_2xx: self.non_2xx - earlier.non_2xx,
        }
    }

    pub(crate) fn add(&mut self, other: Counts) {
        self.bytes += other.bytes;
        self.errors += other.errors;
        self.non_2xx += other.non_2xx;
    }
}

/// One thread's piece of one interval.
pub(crate) struct Piece {
    pub(crate) thread: usize,
    pub(crate) index: u64,
    /// The thread's last piece: it ends the run.
    pub(crate) last: bool,
    /// Seconds from the run's start to the piece's close.
    pub(crate) until: f64,
    pub(crate) hist: Histogram<u64>,
    pub(crate) counts: Counts,
}

/// One client thread's current interval: the latencies recorded in it, the totals when it
/// opened, and where the piece goes when it closes.
pub(crate) struct ThreadIntervals {
    clock: IntervalClock,
    thread: usize,
    index: u64,
    next_edge: Instant,
    hist: Histogram<u64>,
    opened_at: Counts,
    tx: Sender<Piece>,
}

impl ThreadIntervals {
    pub(crate) fn new(clock: IntervalClock, thread: usize, tx: Sender<Piece>) -> Self {
        Self {
            clock,
            thread,
            index: 0,
            next_edge: clock.edge_after(0),
            hist: new_histogram(),
            opened_at: Counts::default(),
            tx,
        }
    }

    /// When the current interval ends.
    pub(crate) fn next_edge(&self) -> Instant {
        self.next_edge
    }

    /// Records one response's latency in the current interval.
    #[inline]
    pub(crate) fn record(&mut self, us: u64) {
        let _ = self.hist.record(us.clamp(1, MAX_LATENCY_US));
    }

    /// Closes the current interval if `now` is past its end (one comparison when not): hands
    /// its piece over, and an empty piece for each interval the thread slept through.
    #[inline]
    pub(crate) fn roll(&mut self, now: Instant, totals: Counts) {
        if now >= self.next_edge {
            self.close(now, totals);
        }
    }

    fn close(&mut self, now: Instant, totals: Counts) {
        let index = self.clock.index(now);
        if index == self.index {
            self.next_edge = self.clock.edge_after(index);
            return;
        }
        let until = now.saturating_duration_since(self.clock.start).as_secs_f64();
        self.hand_over(totals, until, false);
        for skipped in self.index + 1..index {
            self.send(skipped, new_histogram(), Counts::default(), until, false);
        }
        self.index = index;
        self.next_edge = self.clock.edge_after(index);
    }

    /// The current interval's piece (the change in `totals` since it opened) goes to the run.
    fn hand_over(&mut self, totals: Counts, until: f64, last: bool) {
        let hist = std::mem::replace(&mut self.hist, new_histogram());
        let counts = totals.since(self.opened_at);
        self.opened_at = totals;
        self.send(self.index, hist, counts, until, last);
    }

    fn send(&self, index: u64, hist: Histogram<u64>, counts: Counts, until: f64, last: bool) {
        // The receiver lives until every thread is joined; a failed send loses nothing counted
        // in the totals.
        let _ = self.tx.send(Piece { thread: self.thread, index, last, until, hist, counts });
    }

    /// The thread ends `elapsed` after the start: its last piece goes over.
    pub(crate) fn finish(mut self, elapsed: Duration, totals: Counts) {
        self.hand_over(totals, elapsed.as_secs_f64(), true);
    }
}
