//! Round trips of rr and crr as the test runs. Each queue thread counts its transactions'
//! round trips in log-linear buckets (16 per power of two: a bucket is within 1/16 of its
//! values), and whoever shows an interval reads the change of the counts since the previous
//! one for its percentiles. The report's own latency keeps the exact histogram; these
//! buckets are for the figures of each interval only.

use crate::metrics::latency::RttFigures;
use std::sync::atomic::{AtomicU64, Ordering};

/// Buckets below 16 ns hold one value each; above, 16 per power of two up to 2^MAX_POW ns
/// (about 18 minutes), the last one holding everything longer.
const LINEAR: usize = 16;
const MAX_POW: u32 = 40;
const BUCKETS: usize = LINEAR + (MAX_POW as usize - 3) * 16;

/// The bucket of a round trip of `ns` nanoseconds.
fn bucket(ns: u64) -> usize {
    if ns < LINEAR as u64 {
        return ns as usize;
    }
    let pow = 63 - ns.leading_zeros();
    if pow > MAX_POW {
        return BUCKETS - 1;
    }
    let sub = (ns >> (pow - 4)) as usize - 16;
    LINEAR + (pow as usize - 4) * 16 + sub
}

/// The middle of bucket `b`, nanoseconds.
fn value(b: usize) -> u64 {
    if b < LINEAR {
        return b as u64;
    }
    let pow = (b - LINEAR) / 16 + 4;
    let sub = ((b - LINEAR) % 16) as u64;
    let width = 1u64 << (pow - 4);
    (16 + sub) * width + width / 2
}

/// Every queue's bucket counts of the round trips that ended inside the window.
pub struct LiveLatency {
    queues: Vec<Vec<AtomicU64>>,
}

impl std::fmt::Debug for LiveLatency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LiveLatency({} queues)", self.queues.len())
    }
}

impl LiveLatency {
    pub fn new(queues: usize) -> Self {
        Self { queues: (0..queues.max(1)).map(|_| (0..BUCKETS).map(|_| AtomicU64::new(0)).collect()).collect() }
    }

    /// Counts one round trip of queue `queue` (a queue past the last counts on the last).
    #[inline]
    pub fn record(&self, queue: usize, ns: u64) {
        let q = &self.queues[queue.min(self.queues.len() - 1)];
        q[bucket(ns)].fetch_add(1, Ordering::Relaxed);
    }

    /// The counts of all queues together, by bucket.
    pub fn snapshot(&self) -> Vec<u64> {
        let mut sum = vec![0u64; BUCKETS];
        for q in &self.queues {
            for (s, c) in sum.iter_mut().zip(q) {
                *s += c.load(Ordering::Relaxed);
            }
        }
        sum
    }
}

/// The round trips counted between two snapshots (nearest-rank percentiles of the buckets'
/// middles, in milliseconds).
pub fn figures_between(before: &[u64], after: &[u64]) -> RttFigures {
    let counts: Vec<u64> =
        after.iter().zip(before.iter().chain(std::iter::repeat(&0))).map(|(a, b)| a.saturating_sub(*b)).collect();
    let count: u64 = counts.iter().sum();
    if count == 0 {
        return RttFigures::default();
    }
    let ms = |b: usize| value(b) as f64 / 1e6;
    let rank = |q: f64| {
        let want = ((q * count as f64).ceil() as u64).clamp(1, count);
        let mut seen = 0;
        for (b, c) in counts.iter().enumerate() {
            seen += c;
            if seen >= want {
                return ms(b);
            }
        }
        ms(BUCKETS - 1)
    };
    let max = counts.iter().rposition(|&c| c > 0).map_or(0.0, ms);
    RttFigures { count, p50_ms: rank(0.50), p90_ms: rank(0.90), p99_ms: rank(0.99), max_ms: max }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_holds_its_value_within_a_sixteenth() {
        for ns in [1u64, 15, 16, 17, 1000, 12_345, 987_654, 40_000_000, 1 << 39] {
            let mid = value(bucket(ns)) as f64;
            assert!((mid - ns as f64).abs() <= ns as f64 / 16.0, "{ns} -> {mid}");
        }
        assert_eq!(bucket(u64::MAX), BUCKETS - 1, "the longest share the last bucket");
        assert!((1..BUCKETS).all(|b| value(b) > value(b - 1)), "buckets ascend");
    }

    #[test]
    fn percentiles_of_the_change_between_snapshots() {
        let live = LiveLatency::new(2);
        for _ in 0..1000 {
            live.record(0, 50_000);
        }
        let first = live.snapshot();
        for i in 0..100u64 {
            live.record(1, if i < 98 { 20_000 } else { 900_000 });
        }
        let f = figures_between(&first, &live.snapshot());
        assert_eq!(f.count, 100, "only the second interval's");
        assert!((f.p50_ms - 0.020).abs() < 0.020 / 16.0, "{f:?}");
        assert!((f.p99_ms - 0.900).abs() < 0.900 / 16.0, "{f:?}");
        assert_eq!(figures_between(&first, &first), RttFigures::default());
    }
}
