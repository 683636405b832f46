//! An http run interval by interval: each client thread keeps the latencies of the current
//! interval in a histogram of its own and hands it over, with its counts, when the interval
//! closes (no lock, no shared write per request); the run's thread merges the threads' pieces
//! per interval, adds the client's CPU from the sampler the other workloads use, and shows
//! each interval once every thread has handed in its piece.

use super::model::{HttpInterval, LatencyUs};
use crate::metrics::figures::{IntervalCpu, IntervalFigures};
use hdrhistogram::Histogram;
use std::collections::BTreeMap;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

/// Highest latency the histograms record (longer ones are clamped): one hour in µs.
pub(super) const MAX_LATENCY_US: u64 = 3_600_000_000;

/// A latency histogram of the run's range (µs, 3 significant digits).
fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_US, 3).expect("valid fixed histogram bounds")
}

/// Where interval `n` begins and ends: every `every` from `start`, the last one cut at the
/// run's planned end.
#[derive(Debug, Clone, Copy)]
pub(super) struct IntervalClock {
    pub start: Instant,
    pub every: Duration,
    /// Index of the last interval the planned run holds.
    pub last: u64,
}

impl IntervalClock {
    pub(super) fn new(start: Instant, every: Duration, duration: Duration) -> Self {
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
pub(super) struct Counts {
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

    fn add(&mut self, other: Counts) {
        self.bytes += other.bytes;
        self.errors += other.errors;
        self.non_2xx += other.non_2xx;
    }
}

/// One thread's piece of one interval.
pub(super) struct Piece {
    thread: usize,
    index: u64,
    /// The thread's last piece: it ends the run.
    last: bool,
    /// Seconds from the run's start to the piece's close.
    until: f64,
    hist: Histogram<u64>,
    counts: Counts,
}

/// One client thread's current interval: the latencies recorded in it, the totals when it
/// opened, and where the piece goes when it closes.
pub(super) struct ThreadIntervals {
    clock: IntervalClock,
    thread: usize,
    index: u64,
    next_edge: Instant,
    hist: Histogram<u64>,
    opened_at: Counts,
    tx: Sender<Piece>,
}

impl ThreadIntervals {
    pub(super) fn new(clock: IntervalClock, thread: usize, tx: Sender<Piece>) -> Self {
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
    pub(super) fn next_edge(&self) -> Instant {
        self.next_edge
    }

    /// Records one response's latency in the current interval.
    #[inline]
    pub(super) fn record(&mut self, us: u64) {
        let _ = self.hist.record(us.clamp(1, MAX_LATENCY_US));
    }

    /// Closes the current interval if `now` is past its end (one comparison when not): hands
    /// its piece over, and an empty piece for each interval the thread slept through.
    #[inline]
    pub(super) fn roll(&mut self, now: Instant, totals: Counts) {
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
    pub(super) fn finish(mut self, elapsed: Duration, totals: Counts) {
        self.hand_over(totals, elapsed.as_secs_f64(), true);
    }
}

/// One interval being put together from the threads' pieces.
struct Pending {
    hist: Histogram<u64>,
    counts: Counts,
    /// The latest close of a piece: the interval ends no later (the run's last interval).
    until: f64,
}

/// The run's side: takes the threads' pieces and the sampler's CPU intervals, and puts out
/// each interval, in order, once every thread has handed in its piece of it.
pub(super) struct Collector {
    rx: Receiver<Piece>,
    clock: IntervalClock,
    /// Per thread: the highest interval it handed in, and whether it handed in its last.
    through: Vec<(Option<u64>, bool)>,
    pending: BTreeMap<u64, Pending>,
    /// The sampler's CPU figures, by interval.
    cpu: Vec<IntervalCpu>,
    next: u64,
    done: Vec<HttpInterval>,
    /// Every latency of every piece: the run's histogram.
    run: Histogram<u64>,
}

impl Collector {
    pub(super) fn new(rx: Receiver<Piece>, clock: IntervalClock, threads: usize) -> Self {
        Self {
            rx,
            clock,
            through: vec![(None, false); threads],
            pending: BTreeMap::new(),
            cpu: Vec::new(),
            next: 0,
            done: Vec::new(),
            run: new_histogram(),
        }
    }

    fn take(&mut self, p: Piece) {
        let t = &mut self.through[p.thread];
        t.0 = Some(t.0.map_or(p.index, |i| i.max(p.index)));
        t.1 |= p.last;
        let slot = self.pending.entry(p.index).or_insert_with(|| Pending {
            hist: new_histogram(),
            counts: Counts::default(),
            until: 0.0,
        });
        let _ = slot.hist.add(&p.hist);
        let _ = self.run.add(&p.hist);
        slot.counts.add(p.counts);
        slot.until = slot.until.max(p.until);
    }

    /// Whether every thread has handed in its piece of interval `n` (or ended before it).
    fn ready(&self, n: u64) -> bool {
        self.through.iter().all(|&(at, last)| last || at.is_some_and(|i| i >= n))
    }

    /// The sampler closed its next interval: keeps its CPU, waits (at most `wait`) for the
    /// threads' pieces of the intervals up to it, and puts out those that are whole.
    pub(super) fn sampled(&mut self, iv: IntervalFigures, wait: Duration, show: &mut dyn FnMut(&HttpInterval)) {
        self.cpu.push(iv.cpu.unwrap_or_default());
        let want = self.cpu.len() as u64 - 1;
        let deadline = Instant::now() + wait;
        while !self.ready(want) {
            match self.rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(p) => self.take(p),
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => break,
            }
        }
        while let Ok(p) = self.rx.try_recv() {
            self.take(p);
        }
        self.put_out(show);
    }

    /// Puts out, in order, each interval every thread has handed in.
    fn put_out(&mut self, show: &mut dyn FnMut(&HttpInterval)) {
        while self.ready(self.next) {
            let Some(p) = self.pending.remove(&self.next) else { break };
            let n = self.next;
            self.next += 1;
            let start = self.clock.every.as_secs_f64() * n as f64;
            let nominal_end = if n >= self.clock.last { f64::INFINITY } else { start + self.clock.every.as_secs_f64() };
            let end = nominal_end.min(p.until).max(start);
            let requests = p.hist.len();
            let iv = HttpInterval {
                start,
                end,
                requests,
                transactions_per_second: if end > start { requests as f64 / (end - start) } else { 0.0 },
                bytes_read: p.counts.bytes,
                non_2xx: p.counts.non_2xx,
                errors: p.counts.errors,
                latency_us: LatencyUs::of(&p.hist),
                cpu: self.cpu.get(n as usize).cloned(),
            };
            show(&iv);
            self.done.push(iv);
        }
    }

    /// Every thread has been joined: takes their remaining pieces and puts out the rest. With
    /// the intervals, the histogram of every latency of the run.
    pub(super) fn finish(mut self, show: &mut dyn FnMut(&HttpInterval)) -> (Vec<HttpInterval>, Histogram<u64>) {
        while let Ok(p) = self.rx.try_recv() {
            self.take(p);
        }
        for t in &mut self.through {
            t.1 = true;
        }
        self.put_out(show);
        (self.done, self.run)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_add_up_per_interval_and_come_out_in_order() {
        let start = Instant::now() - Duration::from_millis(2500);
        let clock = IntervalClock::new(start, Duration::from_secs(1), Duration::from_secs(3));
        assert_eq!(clock.last, 2);
        let (tx, rx) = std::sync::mpsc::channel();
        let mut a = ThreadIntervals::new(clock, 0, tx.clone());
        let mut b = ThreadIntervals::new(clock, 1, tx);
        a.record(100);
        b.record(200);
        b.record(300);
        // Thread a sleeps through interval 1; b sees each edge.
        b.roll(start + Duration::from_millis(1100), Counts { bytes: 10, errors: 1, non_2xx: 0 });
        b.record(400);
        b.roll(start + Duration::from_millis(2100), Counts { bytes: 20, errors: 1, non_2xx: 1 });
        a.roll(start + Duration::from_millis(2200), Counts { bytes: 5, errors: 0, non_2xx: 0 });
        a.record(500);
        a.finish(Duration::from_millis(2500), Counts { bytes: 7, errors: 0, non_2xx: 0 });
        b.finish(Duration::from_millis(2400), Counts { bytes: 20, errors: 1, non_2xx: 1 });
        let c = Collector::new(rx, clock, 2);
        let mut shown = Vec::new();
        let (ivs, run) = c.finish(&mut |iv| shown.push(iv.requests));
        assert_eq!(run.len(), 5, "every latency in the totals");
        assert_eq!(shown, vec![3, 1, 1]);
        assert_eq!(ivs.iter().map(|i| i.requests).sum::<u64>(), 5);
        assert_eq!(ivs.iter().map(|i| i.bytes_read).sum::<u64>(), 27);
        assert_eq!((ivs[0].errors, ivs[1].non_2xx), (1, 1));
        assert_eq!(ivs[2].end, 2.5, "the last interval ends with the run");
        assert_eq!(ivs[1].end, 2.0);
        assert_eq!(ivs[0].latency_us.max, 300);
    }
}
