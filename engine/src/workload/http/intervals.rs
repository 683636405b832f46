//! An http run interval by interval, on the run's thread: each client thread hands in its
//! piece of every interval ([`crate::transport::http::pieces`]); the collector here merges
//! the threads' pieces per interval, adds the client's CPU from the side's sampler, and shows
//! each interval once every thread has handed in its piece.

use super::model::{HttpInterval, LatencyUs};
use crate::metrics::figures::{IntervalCpu, IntervalFigures};
use crate::transport::http::pieces::{new_histogram, Counts, IntervalClock, Piece};
use hdrhistogram::Histogram;
use std::collections::BTreeMap;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

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
    use crate::transport::http::pieces::ThreadIntervals;

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
