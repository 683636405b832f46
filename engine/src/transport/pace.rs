//! Pacing for the sending loops (TCP, UDP and AF_XDP): one rule, in integer arithmetic.
//!
//! A paced thread may start a send while the bytes it has issued are below what its rate
//! allows from its start until now. So the long-run rate is exact (no rounding accumulates:
//! the allowance is recomputed from the start each time), and the thread is never more than
//! one send ahead of its schedule. A thread that fell behind (a full socket buffer, a
//! descheduled CPU) catches up at once, as the loops always did.
//!
//! Bursts (iperf3's `-b RATE/N`): a send that starts when the rate allows it opens a burst
//! of `burst` bytes (N sends of the loop's length), and every send of that burst starts at
//! once, whatever the allowance; the next burst waits until the allowance passes what was
//! issued. So N sends go back to back, then the thread waits for the rate to catch up, as
//! iperf3 checks its rate after each burst: the long-run rate is the same exact one, and the
//! thread is at most one burst (plus one send) ahead of its schedule.

use std::time::{Duration, Instant};

/// Shortest wait a paced loop is told to take: waking more often than every 20 us costs more
/// than the accuracy it buys.
pub(crate) const MIN_WAIT: Duration = Duration::from_micros(20);

const NANOS_PER_SEC: u128 = 1_000_000_000;

/// The schedule of one sending thread: `rate_bps` bits per second from `start`; 0 is unpaced.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pacer {
    rate_bps: u64,
    start: Instant,
    issued: u64,
    /// Bytes of one burst; 0: none (each send waits for the allowance).
    burst: u64,
    /// What `issued` reaches at the end of the current burst: below it, a send starts at once.
    burst_end: u64,
}

impl Pacer {
    pub(crate) fn new(rate_bps: u64, start: Instant) -> Self {
        Self { rate_bps, start, issued: 0, burst: 0, burst_end: 0 }
    }

    /// The pacer sending in bursts of `sends` sends of `len` bytes (0 sends: no bursts).
    pub(crate) fn in_bursts(self, sends: u32, len: u32) -> Self {
        Self { burst: u64::from(sends) * u64::from(len), ..self }
    }

    /// Whether a rate applies at all.
    #[inline]
    pub(crate) fn is_paced(&self) -> bool {
        self.rate_bps > 0
    }

    /// Bytes issued so far (less those given back with [`Pacer::refund`]).
    #[cfg(test)]
    fn issued(&self) -> u64 {
        self.issued
    }

    /// Bytes the rate allows from the start until `now` (`u64::MAX` when unpaced or past it).
    #[inline]
    pub(crate) fn allowed(&self, now: Instant) -> u64 {
        if self.rate_bps == 0 {
            return u64::MAX;
        }
        let nanos = now.saturating_duration_since(self.start).as_nanos();
        let bytes = nanos.saturating_mul(u128::from(self.rate_bps)) / (8 * NANOS_PER_SEC);
        u64::try_from(bytes).unwrap_or(u64::MAX)
    }

    /// `None` when a send may start at `now`; otherwise how long until it may (at least
    /// [`MIN_WAIT`]).
    #[inline]
    pub(crate) fn wait(&self, now: Instant) -> Option<Duration> {
        if self.issued < self.burst_end || self.issued < self.allowed(now) {
            return None;
        }
        Some(self.until_allowed_exceeds_issued(now).max(MIN_WAIT))
    }

    /// How many sends of `unit` bytes may start at `now`, at most `max` (and at least one when
    /// any may): the rest of the allowance, or of the burst under way (or the one a send now
    /// opens), whichever is more, rounded up, so a batch ends at most one send ahead of it.
    /// `Err` carries the wait as [`Pacer::wait`] gives it.
    #[inline]
    pub(crate) fn budget(&self, now: Instant, unit: u64, max: u64) -> Result<u64, Duration> {
        if !self.is_paced() {
            return Ok(max);
        }
        let allowance = self.allowed(now).saturating_sub(self.issued);
        let burst = if self.issued < self.burst_end {
            self.burst_end - self.issued
        } else if allowance > 0 {
            self.burst
        } else {
            return Err(self.until_allowed_exceeds_issued(now).max(MIN_WAIT));
        };
        Ok(allowance.max(burst).div_ceil(unit.max(1)).clamp(1, max.max(1)))
    }

    /// Counts `bytes` as issued; a send past the end of the last burst opens the next one.
    #[inline]
    pub(crate) fn issue(&mut self, bytes: u64) {
        if self.issued >= self.burst_end {
            self.burst_end = self.issued.saturating_add(self.burst);
        }
        self.issued = self.issued.saturating_add(bytes);
    }

    /// Gives back the bytes of a send that failed and will be sent again: they were not sent
    /// (the burst they were part of keeps its end: their retry belongs to it).
    #[inline]
    pub(crate) fn refund(&mut self, bytes: u64) {
        self.issued = self.issued.saturating_sub(bytes);
    }

    /// Time from `now` to the first nanosecond at which the allowance exceeds what was issued.
    fn until_allowed_exceeds_issued(&self, now: Instant) -> Duration {
        let rate = u128::from(self.rate_bps.max(1));
        // allowed(t) > issued  <=>  t * rate / 8e9 >= issued + 1  <=>  t >= ceil((issued + 1) * 8e9 / rate)
        let due_ns = (u128::from(self.issued) + 1).saturating_mul(8 * NANOS_PER_SEC).div_ceil(rate);
        let elapsed_ns = now.saturating_duration_since(self.start).as_nanos();
        let ns = due_ns.saturating_sub(elapsed_ns);
        Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Simulates a sender over `span` of a made-up clock that issues `unit`-byte sends as soon
    /// as the pacer allows and otherwise sleeps exactly the wait it is told. Returns the bytes
    /// issued, the largest lead over the allowance seen after any send, and the wake-ups.
    fn simulate(rate_bps: u64, unit: u64, span: Duration) -> (u64, u64, u64) {
        let t0 = Instant::now();
        let mut pacer = Pacer::new(rate_bps, t0);
        let mut now = t0;
        let mut lead = 0u64;
        let mut wakeups = 0u64;
        while now < t0 + span {
            match pacer.wait(now) {
                None => {
                    pacer.issue(unit);
                    lead = lead.max(pacer.issued().saturating_sub(pacer.allowed(now)));
                }
                Some(w) => {
                    wakeups += 1;
                    now += w;
                }
            }
        }
        (pacer.issued(), lead, wakeups)
    }

    #[test]
    fn the_long_run_rate_is_exact() {
        for (rate, unit) in
            [(1_000_000u64, 1470u64), (1_000_000_000, 1470), (10_000_000_000, 128 * 1024), (123_456_789, 1000)]
        {
            let (issued, lead, wakeups) = simulate(rate, unit, Duration::from_secs(1));
            let expected = rate / 8;
            // The last wake-up may overshoot the end by MIN_WAIT: that much less was sent.
            let min_wait_bytes = rate / 8 / 1_000_000 * MIN_WAIT.as_micros() as u64;
            assert!(
                issued <= expected + unit && issued + unit + min_wait_bytes >= expected,
                "{rate} bit/s in {unit}-byte sends: {issued} bytes in 1 s, expected {expected}"
            );
            assert!(wakeups <= expected / unit + 2, "{rate} bit/s: {wakeups} wake-ups, more than one per send");
            assert!(lead < unit, "{rate} bit/s: at most one send ahead, was {lead} bytes ahead");
        }
    }

    /// Sends issued over 1 s of a made-up clock by a sender of `unit`-byte sends in bursts of
    /// `burst` sends that sends whenever the pacer allows and otherwise sleeps the wait it is
    /// told: the bytes issued, the largest lead over the allowance after any send, and how
    /// many sends each instant of the clock saw (the bursts as a receiver would see them).
    fn simulate_bursts(rate_bps: u64, unit: u64, burst: u32) -> (u64, u64, Vec<u32>) {
        let t0 = Instant::now();
        let mut pacer = Pacer::new(rate_bps, t0).in_bursts(burst, unit as u32);
        let (mut now, mut lead, mut groups) = (t0, 0u64, vec![0u32]);
        while now < t0 + Duration::from_secs(1) {
            match pacer.wait(now) {
                None => {
                    pacer.issue(unit);
                    lead = lead.max(pacer.issued().saturating_sub(pacer.allowed(now)));
                    *groups.last_mut().unwrap() += 1;
                }
                Some(w) => {
                    now += w;
                    if *groups.last().unwrap() > 0 {
                        groups.push(0);
                    }
                }
            }
        }
        groups.retain(|&n| n > 0);
        (pacer.issued(), lead, groups)
    }

    #[test]
    fn bursts_go_back_to_back_and_hold_the_rate() {
        // iperf3's -b 200M/10 with 1470-byte datagrams, -b 100M/8, and TCP's 128 KiB writes.
        for (rate, unit, burst) in
            [(200_000_000u64, 1470u64, 10u32), (100_000_000, 1400, 8), (100_000_000, 131_072, 10)]
        {
            let (issued, lead, groups) = simulate_bursts(rate, unit, burst);
            let expected = rate / 8;
            let burst_bytes = u64::from(burst) * unit;
            assert!(
                issued <= expected + burst_bytes && issued + burst_bytes + unit >= expected,
                "{rate} bit/s in bursts of {burst}: {issued} bytes in 1 s, expected {expected}"
            );
            assert!(lead <= burst_bytes, "{rate} bit/s: at most one burst ahead, was {lead} bytes ahead");
            // Every burst is exactly `burst` sends at one instant, then a wait.
            assert!(groups.len() > 5, "{groups:?}");
            assert!(groups.iter().all(|&n| n == burst), "bursts of {burst}: {groups:?}");
            let waits_expected = expected / burst_bytes;
            assert!(groups.len() as u64 <= waits_expected + 2, "one wait per burst: {} bursts", groups.len());
        }
        // Without a burst the same sender goes one send at a time.
        let (_, _, groups) = simulate_bursts(200_000_000, 1470, 0);
        assert!(groups.iter().all(|&n| n == 1), "{:?}", &groups[..10]);
    }

    #[test]
    fn a_batch_takes_the_rest_of_its_burst() {
        let t0 = Instant::now();
        let unit = 1000u64;
        let mut pacer = Pacer::new(8_000_000, t0).in_bursts(10, unit as u32); // 1 byte per microsecond
        assert!(pacer.budget(t0, unit, 32).is_err(), "nothing allowed at the start, burst or not");
        // 2 us in: 2 bytes allowed, which opens a burst: all 10 sends may go.
        let now = t0 + Duration::from_micros(2);
        assert_eq!(pacer.budget(now, unit, 32), Ok(10));
        assert_eq!(pacer.budget(now, unit, 4), Ok(4), "never more than the batch");
        pacer.issue(4 * unit);
        assert_eq!(pacer.budget(now, unit, 32), Ok(6), "the rest of the burst, whatever the allowance");
        assert!(pacer.wait(now).is_none());
        pacer.issue(6 * unit);
        // The burst is spent: the next one waits until 10000 bytes are allowed, 10 ms in.
        let w = pacer.wait(now).expect("a burst ahead");
        assert_eq!(now + w, t0 + Duration::from_nanos(10_001_000));
        assert!(pacer.budget(now + w - Duration::from_micros(1), unit, 32).is_err());
        assert_eq!(pacer.budget(now + w, unit, 32), Ok(10), "and then a whole burst again");
        // A long stall: the whole allowance, more than a burst, bounded by the batch.
        assert_eq!(pacer.budget(t0 + Duration::from_secs(1), unit, 10_000), Ok(990));
        // A refund inside a burst gives the retry its place in it.
        pacer.issue(unit);
        pacer.refund(unit);
        assert!(pacer.wait(now + w).is_none());
    }

    #[test]
    fn a_wait_ends_when_the_next_send_is_due() {
        let t0 = Instant::now();
        let mut pacer = Pacer::new(8_000_000, t0); // 1 byte per microsecond
        pacer.issue(1000);
        let w = pacer.wait(t0).expect("1000 bytes ahead at the start");
        assert_eq!(w, Duration::from_nanos(1_001_000), "due when 1001 bytes are allowed");
        assert!(pacer.wait(t0 + w).is_none(), "allowed once the wait is over");
        assert!(pacer.wait(t0 + w - Duration::from_nanos(1000)).is_some(), "not a byte earlier");
        // Close to due: never told to wake in less than MIN_WAIT.
        assert_eq!(pacer.wait(t0 + w - Duration::from_nanos(500)), Some(MIN_WAIT));
    }

    #[test]
    fn budgets_stay_within_the_allowance_and_the_batch() {
        let t0 = Instant::now();
        let unit = 1470u64;
        let mut pacer = Pacer::new(1_000_000_000, t0);
        assert!(pacer.budget(t0, unit, 32).is_err(), "nothing allowed at the start");
        // 100 us at 1 Gbit/s: 12500 bytes, 8.5 frames: 9 may go, ending less than a frame ahead.
        let now = t0 + Duration::from_micros(100);
        assert_eq!(pacer.budget(now, unit, 32), Ok(9));
        assert_eq!(pacer.budget(now, unit, 4), Ok(4), "never more than the batch");
        pacer.issue(9 * unit);
        assert!(pacer.issued() - pacer.allowed(now) < unit);
        assert!(pacer.budget(now, unit, 32).is_err(), "ahead: wait");
        // After a stall the whole allowance is available again, still bounded by the batch.
        let later = now + Duration::from_secs(1);
        assert_eq!(pacer.budget(later, unit, 32), Ok(32));
        assert_eq!(Pacer::new(0, t0).budget(t0, unit, 32), Ok(32), "unpaced: the whole batch");
    }

    #[test]
    fn refunds_give_the_allowance_back() {
        let t0 = Instant::now();
        let mut pacer = Pacer::new(8_000_000, t0);
        pacer.issue(500);
        assert!(pacer.wait(t0 + Duration::from_micros(100)).is_some());
        pacer.refund(500);
        assert!(pacer.wait(t0 + Duration::from_micros(100)).is_none());
        pacer.refund(u64::MAX);
        assert_eq!(pacer.issued(), 0, "refunds saturate at zero");
    }

    #[test]
    fn extreme_rates_and_clocks_do_not_overflow() {
        let t0 = Instant::now();
        let mut fast = Pacer::new(u64::MAX, t0);
        let ten_years = Duration::from_secs(10 * 365 * 86_400);
        assert_eq!(fast.allowed(t0 + ten_years), u64::MAX);
        assert!(fast.wait(t0 + Duration::from_millis(1)).is_none());
        fast.issue(u64::MAX);
        fast.issue(u64::MAX);
        assert_eq!(fast.issued(), u64::MAX, "issued saturates");
        // All of u64::MAX bytes at u64::MAX bit/s are due after 8 s.
        let w = fast.wait(t0).expect("everything issued at the start");
        assert!(w > Duration::from_secs(7) && w <= Duration::from_secs(9), "{w:?}");
        assert!(fast.budget(t0, 1, u64::MAX).is_err());
        let slow = Pacer::new(1, t0);
        assert_eq!(slow.allowed(t0 + ten_years), ten_years.as_secs() / 8);
        assert_eq!(Pacer::new(0, t0).wait(t0), None, "unpaced never waits");
        assert_eq!(Pacer::new(u64::MAX, t0).wait(t0), Some(MIN_WAIT), "not a byte is due at the very start");
    }
}
