//! Per-flow receive accounting for UDP: received, lost, out-of-order, duplicates, jitter and
//! one-way delay (the `udp` keys of docs/output.md).
//!
//! ## Counting rules, and how they relate to iperf2
//! an iperf2 2.1.8 server keeps the highest id
//! seen; an id above `highest + 1` adds the gap to "lost", an id at or below `highest` counts
//! one "out of order", and the printed loss is `lost - out_of_order` clamped at 0 (its comment:
//! "assume most of the time out-of-order packets are not duplicate packets"). The total it
//! prints is the highest id. So a late packet that was first counted lost ends up as
//! out-of-order and no longer lost, but a duplicate is also taken for a late packet and hides
//! a real loss.
//!
//! We keep the same meaning and make it exact:
//! - `received` counts *distinct* sequence numbers; a repeat of one still inside the window
//!   below is a `duplicate` and changes nothing else.
//! - `out_of_order` counts distinct datagrams that arrived below the highest seen (late
//!   arrivals), as iperf2 counts them, minus the duplicates iperf2 would also have counted.
//! - `lost = expected - received`, where `expected` is the highest sequence number the sender
//!   is known to have used: the highest seen, or the FIN's `seq - 1` when a FIN told us more
//!   (datagrams lost at the very end are then still counted). A late arrival of a datagram
//!   counted lost earlier therefore lowers `lost` and raises `out_of_order`, as in iperf2.
//!
//! Duplicates are recognised within a window of [`DUP_WINDOW`] sequence numbers below the
//! highest (a fixed 8 KiB bitmap per flow, whatever the sequence numbers do). A datagram older
//! than that is counted received and out-of-order without a duplicate check (it is also
//! counted in `too_old`): a duplicate that old would make `received` exceed `expected`, and
//! `lost` is then clamped at 0.
//!
//! ## Jitter and delay
//! Jitter is the RFC 3550 estimator over transit times `D = arrival - sent`:
//! `J += (|D(i-1,i)| - J) / 16`, in microseconds, over every non-duplicate datagram carrying a
//! timestamp, in arrival order (iperf2 does the same, in seconds). It does not need
//! synchronised clocks; one-way delay (the transit itself) does, so it is kept only when
//! asked for ([`SeqTracker::with_one_way_delay`]).
//!
//! ## Intervals and totals: snapshots
//! The tracker only grows. [`SeqTracker::stats`] takes a [`SeqStats`] snapshot;
//! [`SeqStats::delta`] of two snapshots gives an interval's figures and [`SeqStats::merge`]
//! adds flows together for a `[SUM]` line. Snapshots are small `Copy` values that can be sent
//! across threads, which a live tracker (with its bitmap) should not be.

use crate::wire::udp_payload::WireTime;
use serde::{Deserialize, Serialize};

/// Sequence numbers below the highest seen within which duplicates are recognised.
pub(crate) const DUP_WINDOW: u64 = 1 << 16;
const WINDOW_WORDS: usize = (DUP_WINDOW / 64) as usize;

/// A flow's accounting as of its last completion, published for the interval sampler.
pub(crate) type LiveStats = std::sync::Arc<std::sync::Mutex<SeqStats>>;

/// What one datagram was, relative to those before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// The next sequence number expected.
    InOrder,
    /// Above the next expected: this many sequence numbers were skipped (lost so far).
    Gap(u64),
    /// Below the highest seen and not seen before.
    Late,
    /// Seen before (within the window).
    Duplicate,
    /// Older than the duplicate window: counted as late without a duplicate check.
    TooOld,
    /// Sequence number 0, which no sender uses: ignored.
    Invalid,
}

/// One-way delay (transit) statistics, microseconds; meaningful only with synchronised
/// clocks.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DelayStats {
    pub count: u64,
    pub min_us: f64,
    pub max_us: f64,
    pub sum_us: f64,
}

impl DelayStats {
    fn first(transit_us: f64) -> Self {
        Self { count: 1, min_us: transit_us, max_us: transit_us, sum_us: transit_us }
    }
    fn add(&mut self, transit_us: f64) {
        self.count += 1;
        self.min_us = self.min_us.min(transit_us);
        self.max_us = self.max_us.max(transit_us);
        self.sum_us += transit_us;
    }
    /// Mean transit, microseconds (0 when empty).
    pub(crate) fn mean_us(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum_us / self.count as f64
        }
    }
    fn merge(&mut self, other: &DelayStats) {
        self.count += other.count;
        self.min_us = self.min_us.min(other.min_us);
        self.max_us = self.max_us.max(other.max_us);
        self.sum_us += other.sum_us;
    }
}

/// A snapshot of a flow's accounting (or of several flows merged).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SeqStats {
    /// Distinct datagrams received.
    pub received: u64,
    /// `expected - received`, clamped at 0.
    pub lost: u64,
    /// Distinct datagrams that arrived below the highest sequence number seen.
    pub out_of_order: u64,
    /// Repeats of a sequence number already received.
    pub duplicates: u64,
    /// Late datagrams older than the duplicate window (included in `out_of_order`).
    pub too_old: u64,
    /// The highest sequence number the sender is known to have used (see module docs).
    pub expected: u64,
    /// Payload bytes of the distinct datagrams.
    pub bytes: u64,
    /// RFC 3550 jitter estimate at the time of the snapshot, microseconds.
    pub jitter_us: f64,
    /// A FIN arrived.
    pub fin: bool,
    /// One-way delay, when asked for and at least one datagram carried a timestamp.
    pub delay: Option<DelayStats>,
}

impl SeqStats {
    /// Lost datagrams as a share of expected ones (0 when nothing was expected).
    pub fn loss_ratio(&self) -> f64 {
        if self.expected == 0 {
            0.0
        } else {
            self.lost as f64 / self.expected as f64
        }
    }

    /// The figures of the interval between `earlier` and `self` (two snapshots of the same
    /// flow). Counters are differences; `lost` is clamped at 0 (late arrivals in this interval
    /// may repair losses of an earlier one: only the total is exact). Jitter is the estimator's
    /// value at the end of the interval, as iperf2 prints it. Delay count, sum and so mean are
    /// the interval's; min and max stay those of the whole flow so far.
    pub fn delta(&self, earlier: &SeqStats) -> SeqStats {
        let delay = match (self.delay, earlier.delay) {
            (Some(now), Some(before)) => Some(DelayStats {
                count: now.count.saturating_sub(before.count),
                sum_us: now.sum_us - before.sum_us,
                ..now
            }),
            (now, _) => now,
        };
        SeqStats {
            received: self.received.saturating_sub(earlier.received),
            lost: self.lost.saturating_sub(earlier.lost),
            out_of_order: self.out_of_order.saturating_sub(earlier.out_of_order),
            duplicates: self.duplicates.saturating_sub(earlier.duplicates),
            too_old: self.too_old.saturating_sub(earlier.too_old),
            expected: self.expected.saturating_sub(earlier.expected),
            bytes: self.bytes.saturating_sub(earlier.bytes),
            jitter_us: self.jitter_us,
            fin: self.fin,
            delay,
        }
    }

    /// The sum of several flows' figures (see [`SeqStats::merge`]); empty input gives the
    /// default (all zero, no FIN).
    pub fn sum<'a>(flows: impl IntoIterator<Item = &'a SeqStats>) -> SeqStats {
        let mut flows = flows.into_iter();
        let Some(first) = flows.next() else {
            return SeqStats::default();
        };
        let mut total = *first;
        for flow in flows {
            total.merge(flow);
        }
        total
    }

    /// Adds another flow's figures. Jitter becomes the mean of both weighted by datagrams
    /// received (iperf2 prints no jitter on its sum line; this keeps one number that a flow
    /// with few datagrams cannot dominate). `fin` is true only when every flow saw one.
    pub(crate) fn merge(&mut self, other: &SeqStats) {
        let weight = self.received + other.received;
        self.jitter_us = if weight == 0 {
            self.jitter_us.max(other.jitter_us)
        } else {
            (self.jitter_us * self.received as f64 + other.jitter_us * other.received as f64) / weight as f64
        };
        self.received += other.received;
        self.lost += other.lost;
        self.out_of_order += other.out_of_order;
        self.duplicates += other.duplicates;
        self.too_old += other.too_old;
        self.expected += other.expected;
        self.bytes += other.bytes;
        self.fin &= other.fin;
        self.delay = match (self.delay, other.delay) {
            (Some(mut a), Some(b)) => {
                a.merge(&b);
                Some(a)
            }
            (a, b) => a.or(b),
        };
    }
}

/// The receive accounting of one flow. Memory is fixed (about 8 KiB) whatever arrives.
#[derive(Clone)]
pub struct SeqTracker {
    highest: u64,
    received: u64,
    out_of_order: u64,
    duplicates: u64,
    too_old: u64,
    bytes: u64,
    /// Lowest FIN sequence number seen (the first FIN carries `last + 1`; retries of an
    /// iperf2 client carry `last + 2`, `last + 3`, ...).
    fin_seq: Option<u64>,
    jitter_us: f64,
    last_transit_us: Option<f64>,
    track_delay: bool,
    delay: Option<DelayStats>,
    /// Bit `s % DUP_WINDOW` set: sequence `s` in `(highest - DUP_WINDOW, highest]` received.
    window: Box<[u64; WINDOW_WORDS]>,
}

impl Default for SeqTracker {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for SeqTracker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SeqTracker").field("stats", &self.stats()).finish()
    }
}

impl SeqTracker {
    /// A tracker without one-way delay statistics.
    pub fn new() -> Self {
        Self {
            highest: 0,
            received: 0,
            out_of_order: 0,
            duplicates: 0,
            too_old: 0,
            bytes: 0,
            fin_seq: None,
            jitter_us: 0.0,
            last_transit_us: None,
            track_delay: false,
            delay: None,
            window: Box::new([0; WINDOW_WORDS]),
        }
    }

    /// A tracker that also keeps one-way delay min/mean/max (needs synchronised clocks).
    pub fn with_one_way_delay() -> Self {
        Self { track_delay: true, ..Self::new() }
    }

    fn bit(seq: u64) -> (usize, u64) {
        let pos = seq % DUP_WINDOW;
        ((pos / 64) as usize, 1u64 << (pos % 64))
    }

    /// Clears the window bits of sequence numbers `from..=to` (they are about to become the
    /// newest part of the window); a span as large as the window clears everything.
    fn clear_span(&mut self, from: u64, to: u64) {
        if to - from + 1 >= DUP_WINDOW {
            self.window.fill(0);
            return;
        }
        let mut seq = from;
        while seq <= to {
            let (word, mask) = Self::bit(seq);
            if seq % 64 == 0 && to - seq >= 63 {
                self.window[word] = 0;
                seq += 64;
            } else {
                self.window[word] &= !mask;
                seq += 1;
            }
        }
    }

    /// Accounts one data datagram of `bytes` payload bytes, sent at `sent` (if it carried a
    /// timestamp) and received at `arrived`.
    pub fn record(&mut self, seq: u64, bytes: u32, sent: Option<WireTime>, arrived: WireTime) -> Arrival {
        if seq == 0 {
            return Arrival::Invalid;
        }
        let arrival = if seq > self.highest {
            let gap = seq - self.highest - 1;
            self.clear_span(self.highest + 1, seq);
            self.highest = seq;
            if gap == 0 {
                Arrival::InOrder
            } else {
                Arrival::Gap(gap)
            }
        } else if self.highest - seq >= DUP_WINDOW {
            self.too_old += 1;
            self.out_of_order += 1;
            Arrival::TooOld
        } else {
            let (word, mask) = Self::bit(seq);
            if self.window[word] & mask != 0 {
                self.duplicates += 1;
                return Arrival::Duplicate;
            }
            self.out_of_order += 1;
            Arrival::Late
        };
        if arrival != Arrival::TooOld {
            let (word, mask) = Self::bit(seq);
            self.window[word] |= mask;
        }
        self.received += 1;
        self.bytes += u64::from(bytes);
        if let Some(sent) = sent {
            self.add_transit(arrived.micros_since(sent) as f64);
        }
        arrival
    }

    fn add_transit(&mut self, transit_us: f64) {
        if let Some(last) = self.last_transit_us {
            self.jitter_us += ((transit_us - last).abs() - self.jitter_us) / 16.0;
        }
        self.last_transit_us = Some(transit_us);
        if self.track_delay {
            match &mut self.delay {
                Some(d) => d.add(transit_us),
                None => self.delay = Some(DelayStats::first(transit_us)),
            }
        }
    }

    /// Accounts a FIN datagram carrying `seq` (positive). It tells how many datagrams the
    /// sender used (`seq - 1` for the first FIN); it is not itself a data datagram.
    pub fn record_fin(&mut self, seq: u64) {
        if seq == 0 {
            return;
        }
        self.fin_seq = Some(self.fin_seq.map_or(seq, |f| f.min(seq)));
    }

    /// The highest data sequence number received (0 before the first).
    pub fn highest(&self) -> u64 {
        self.highest
    }

    /// The highest sequence number the sender is known to have used.
    pub fn expected(&self) -> u64 {
        self.highest.max(self.fin_seq.map_or(0, |f| f - 1))
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> SeqStats {
        let expected = self.expected();
        SeqStats {
            received: self.received,
            lost: expected.saturating_sub(self.received),
            out_of_order: self.out_of_order,
            duplicates: self.duplicates,
            too_old: self.too_old,
            expected,
            bytes: self.bytes,
            jitter_us: self.jitter_us,
            fin: self.fin_seq.is_some(),
            delay: self.delay,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEN: u32 = 100;

    fn at(us: i64) -> WireTime {
        WireTime { sec: (us / 1_000_000) as u32, usec: (us % 1_000_000) as u32 }
    }

    /// Feeds sequence numbers without timestamps.
    fn feed(t: &mut SeqTracker, seqs: impl IntoIterator<Item = u64>) -> Vec<Arrival> {
        seqs.into_iter().map(|s| t.record(s, LEN, None, at(0))).collect()
    }

    #[test]
    fn in_order() {
        let mut t = SeqTracker::new();
        assert!(feed(&mut t, 1..=1000).iter().all(|a| *a == Arrival::InOrder), "1..=1000 arrives in order");
        let s = t.stats();
        assert_eq!((s.received, s.lost, s.out_of_order, s.duplicates, s.expected), (1000, 0, 0, 0, 1000));
        assert_eq!(s.bytes, 1000 * u64::from(LEN), "bytes of every datagram");
    }

    #[test]
    fn gaps_count_as_lost_until_they_arrive() {
        let mut t = SeqTracker::new();
        assert_eq!(
            feed(&mut t, [1, 2, 5, 6]),
            vec![Arrival::InOrder, Arrival::InOrder, Arrival::Gap(2), Arrival::InOrder]
        );
        assert_eq!(t.stats().lost, 2, "3 and 4 missing");
        assert_eq!(feed(&mut t, [4]), vec![Arrival::Late]);
        let s = t.stats();
        assert_eq!((s.lost, s.out_of_order), (1, 1), "a late arrival repairs one loss and counts out of order");
        assert_eq!(
            feed(&mut t, [3]),
            vec![Arrival::Late],
            "the last missing datagram arrives too (iperf2 would count it out of order as well)"
        );
        assert_eq!((t.stats().lost, t.stats().out_of_order, t.stats().received), (0, 2, 6));
    }

    #[test]
    fn first_datagram_lost_is_a_gap_from_one() {
        let mut t = SeqTracker::new();
        assert_eq!(feed(&mut t, [3]), vec![Arrival::Gap(2)], "sequence numbers start at 1");
        assert_eq!(t.stats().lost, 2);
    }

    #[test]
    fn reordering_without_loss() {
        let mut t = SeqTracker::new();
        feed(&mut t, [1, 3, 2, 5, 4, 6]);
        let s = t.stats();
        assert_eq!((s.received, s.lost, s.out_of_order, s.duplicates), (6, 0, 2, 0), "two swaps: 2 late, 4 late");
    }

    #[test]
    fn duplicates_do_not_hide_losses() {
        let mut t = SeqTracker::new();
        let arrivals = feed(&mut t, [1, 2, 2, 4, 4, 1]);
        assert_eq!(arrivals[2], Arrival::Duplicate, "repeat of the highest");
        assert_eq!(arrivals[4], Arrival::Duplicate, "repeat after a gap");
        assert_eq!(arrivals[5], Arrival::Duplicate, "old repeat inside the window");
        let s = t.stats();
        assert_eq!(
            (s.received, s.lost, s.out_of_order, s.duplicates),
            (3, 1, 0, 3),
            "3 is still lost (iperf2 would report 0 lost, 3 out of order)"
        );
    }

    #[test]
    fn low_word_wraps_into_the_high_word() {
        let mut t = SeqTracker::new();
        let start = 0xFFFF_FFF0u64;
        assert_eq!(feed(&mut t, [start]), vec![Arrival::Gap(start - 1)]);
        let arrivals = feed(&mut t, start + 1..=0x1_0000_0010);
        assert!(arrivals.iter().all(|a| *a == Arrival::InOrder), "0xFFFF_FFFF -> 0x1_0000_0000 is in order");
        assert_eq!(feed(&mut t, [0xFFFF_FFFF]), vec![Arrival::Duplicate], "bitmap keyed by the full 64-bit number");
        assert_eq!(feed(&mut t, [0x1_0000_0000]), vec![Arrival::Duplicate]);
        assert_eq!(t.stats().lost, start - 1, "only the numbers below the first one received are lost");
    }

    #[test]
    fn huge_jump_keeps_memory_bounded_and_counts_exactly() {
        let mut t = SeqTracker::new();
        feed(&mut t, [1, 2]);
        let far = 1u64 << 50;
        assert_eq!(feed(&mut t, [far]), vec![Arrival::Gap(far - 3)], "a jump of 2^50 is one gap");
        assert_eq!(std::mem::size_of_val(&*t.window), 8192, "the window stays 8 KiB");
        assert_eq!(feed(&mut t, [2]), vec![Arrival::TooOld], "far below the window: no duplicate check");
        assert_eq!(feed(&mut t, [far - 5]), vec![Arrival::Late], "inside the window again");
        assert_eq!(feed(&mut t, [far - 5]), vec![Arrival::Duplicate]);
        let s = t.stats();
        assert_eq!(s.received, 5, "1, 2, far, 2 (too old, taken as late), far-5");
        assert_eq!(s.lost, far - 5, "expected - received");
        assert_eq!(s.too_old, 1);
    }

    #[test]
    fn window_slides_clearing_reused_bits() {
        let mut t = SeqTracker::new();
        feed(&mut t, [1]);
        // Skip exactly a window: seq 1 + DUP_WINDOW reuses bit of seq 1, which must be clear.
        assert_eq!(feed(&mut t, [1 + DUP_WINDOW]), vec![Arrival::Gap(DUP_WINDOW - 1)]);
        assert_eq!(feed(&mut t, [2]), vec![Arrival::Late], "2 is inside the window and was never seen");
        assert_eq!(feed(&mut t, [100]), vec![Arrival::Late], "bits of skipped numbers were cleared");
        assert_eq!(feed(&mut t, [1]), vec![Arrival::TooOld], "1 slid out of the window");
    }

    #[test]
    fn fin_reveals_tail_loss() {
        let mut t = SeqTracker::new();
        feed(&mut t, 1..=90);
        t.record_fin(96); // a retry arrives first
        t.record_fin(95); // the first FIN: -(last + 1) with last = 94
        t.record_fin(97);
        let s = t.stats();
        assert!(s.fin, "FIN seen");
        assert_eq!((s.expected, s.lost), (94, 4), "datagrams 91..=94 were lost at the end");
        assert_eq!(s.received + s.lost, 94, "accounting identity");
    }

    #[test]
    fn rfc3550_jitter() {
        let mut t = SeqTracker::new();
        // Transits 1000, 1100, 1000, 1000 us: |D| = 100, 100, 0.
        let sends = [0i64, 10_000, 20_000, 30_000];
        let transits = [1000i64, 1100, 1000, 1000];
        for (i, (s, d)) in sends.iter().zip(transits).enumerate() {
            t.record(i as u64 + 1, LEN, Some(at(1_000_000 + s)), at(1_000_000 + s + d));
        }
        let mut j = 0.0f64;
        for d in [100.0, 100.0, 0.0] {
            j += (d - j) / 16.0;
        }
        assert!((t.stats().jitter_us - j).abs() < 1e-9, "J += (|D| - J)/16: {} vs {}", t.stats().jitter_us, j);
        assert!(t.stats().delay.is_none(), "no delay stats unless asked");
    }

    #[test]
    fn one_way_delay_when_asked() {
        let mut t = SeqTracker::with_one_way_delay();
        t.record(1, LEN, Some(at(5_000_000)), at(5_000_300));
        t.record(2, LEN, Some(at(5_001_000)), at(5_001_100));
        t.record(3, LEN, None, at(5_002_000));
        let d = t.stats().delay.expect("delay stats");
        assert_eq!((d.count, d.min_us, d.max_us), (2, 100.0, 300.0), "datagram without timestamp skipped");
        assert_eq!(d.mean_us(), 200.0);
    }

    #[test]
    fn snapshots_give_intervals_and_merge_gives_sums() {
        let mut a = SeqTracker::new();
        feed(&mut a, 1..=10);
        let first = a.stats();
        feed(&mut a, [12, 13, 11]);
        let interval = a.stats().delta(&first);
        assert_eq!(
            (interval.received, interval.out_of_order, interval.lost, interval.expected),
            (3, 1, 0, 3),
            "interval figures are differences of snapshots"
        );

        let mut b = SeqTracker::new();
        feed(&mut b, [1, 3]);
        let sum = SeqStats::sum(&[a.stats(), b.stats()]);
        assert_eq!((sum.received, sum.lost, sum.expected, sum.out_of_order), (15, 1, 16, 1), "sums of both flows");
        assert!(!sum.fin, "FIN only when all flows saw one");
        assert_eq!(sum.received + sum.lost, sum.expected, "identity holds for sums");
    }

    #[test]
    fn merge_weights_jitter_by_datagrams() {
        let a = SeqStats { received: 3, jitter_us: 10.0, ..Default::default() };
        let b = SeqStats { received: 1, jitter_us: 50.0, ..Default::default() };
        let mut m = a;
        m.merge(&b);
        assert_eq!(m.jitter_us, 20.0, "(3*10 + 1*50) / 4");
    }

    /// What the network did to one datagram of a generated run.
    #[derive(Debug, Clone, Copy)]
    enum Fate {
        Lost,
        /// Arrives this many slots late (0: in order).
        Delayed(u16),
        /// Arrives twice, the copy this many slots after the original.
        Doubled(u16),
    }

    fn fate() -> impl proptest::strategy::Strategy<Value = Fate> {
        use proptest::prelude::*;
        prop_oneof![
            6 => Just(Fate::Delayed(0)),
            1 => Just(Fate::Lost),
            2 => (0u16..300).prop_map(Fate::Delayed),
            1 => (0u16..300).prop_map(Fate::Doubled),
        ]
    }

    /// The arrival order of datagrams `1..=fates.len()` under their fates (stable: equal
    /// slots keep sending order).
    fn arrivals(fates: &[Fate]) -> Vec<u64> {
        let mut slots: Vec<(usize, u64)> = Vec::new();
        for (i, f) in fates.iter().enumerate() {
            let seq = i as u64 + 1;
            match *f {
                Fate::Lost => {}
                Fate::Delayed(d) => slots.push((i + usize::from(d), seq)),
                Fate::Doubled(d) => {
                    slots.push((i, seq));
                    slots.push((i + usize::from(d), seq));
                }
            }
        }
        slots.sort_by_key(|s| s.0);
        slots.into_iter().map(|s| s.1).collect()
    }

    proptest::proptest! {
        #[test]
        fn received_plus_lost_is_sent_under_reordering_duplication_and_loss(
            fates in proptest::collection::vec(fate(), 1..1500),
            fins in 1u64..4,
        ) {
            let sent = fates.len() as u64;
            let order = arrivals(&fates);
            let mut t = SeqTracker::new();
            let mut seen = std::collections::HashSet::new();
            let (mut highest, mut late) = (0u64, 0u64);
            for &seq in &order {
                let arrival = t.record(seq, LEN, None, at(0));
                let new = seen.insert(seq);
                proptest::prop_assert_eq!(arrival == Arrival::Duplicate, !new, "seq {}: {:?}", seq, arrival);
                if new && seq < highest {
                    late += 1;
                }
                highest = highest.max(seq);
            }
            // The sender's FINs (the first carries sent + 1), retries possibly first.
            for k in (0..fins).rev() {
                t.record_fin(sent + 1 + k);
            }
            let s = t.stats();
            let distinct = seen.len() as u64;
            proptest::prop_assert_eq!(s.received + s.lost, sent, "received + lost = sent");
            proptest::prop_assert_eq!(s.received, distinct);
            proptest::prop_assert_eq!(s.lost, fates.iter().filter(|f| matches!(f, Fate::Lost)).count() as u64);
            proptest::prop_assert_eq!(s.duplicates, order.len() as u64 - distinct);
            proptest::prop_assert_eq!(s.out_of_order, late, "late = below the highest seen, first time");
            proptest::prop_assert_eq!((s.expected, s.too_old, s.bytes), (sent, 0, distinct * u64::from(LEN)));
        }

        #[test]
        fn interval_snapshots_add_up_to_the_totals(
            fates in proptest::collection::vec(fate(), 1..800),
            cuts in proptest::collection::vec(0usize..1600, 0..20),
        ) {
            let order = arrivals(&fates);
            let mut cuts: Vec<usize> = cuts.into_iter().filter(|&c| c < order.len()).collect();
            cuts.sort_unstable();
            let mut t = SeqTracker::new();
            let mut snapshots = vec![t.stats()];
            let mut next_cut = cuts.iter().peekable();
            for (i, &seq) in order.iter().enumerate() {
                while next_cut.next_if(|&&c| c == i).is_some() {
                    snapshots.push(t.stats());
                }
                t.record(seq, LEN, None, at(0));
            }
            t.record_fin(fates.len() as u64 + 1);
            let total = t.stats();
            snapshots.push(total);
            let intervals: Vec<SeqStats> = snapshots.windows(2).map(|w| w[1].delta(&w[0])).collect();
            let sum = SeqStats::sum(&intervals);
            proptest::prop_assert_eq!(
                (sum.received, sum.duplicates, sum.out_of_order, sum.expected, sum.bytes),
                (total.received, total.duplicates, total.out_of_order, total.expected, total.bytes),
                "the intervals' figures add up to the flow's"
            );
            // Lost is clamped per interval (late arrivals repair earlier losses): the intervals'
            // sum can only exceed the total, never fall short of it.
            proptest::prop_assert!(sum.lost >= total.lost);
        }
    }

    #[test]
    fn seq_zero_is_ignored() {
        let mut t = SeqTracker::new();
        assert_eq!(feed(&mut t, [0]), vec![Arrival::Invalid]);
        t.record_fin(0);
        assert_eq!(t.stats(), SeqStats::default(), "nothing counted");
    }
}
