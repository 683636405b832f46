//! One-way delays (`--trip-times`), whatever carries the stamps: the clocks both ends read
//! and the legs a client measures. A receiver stamps each answer with the CLOCK_REALTIME
//! time its request had arrived; the client, which noted its own CLOCK_REALTIME when it sent
//! the request and when the answer came, splits the round trip into the request's leg
//! (stamp − send time) and the answer's leg (arrival − stamp; it includes the receiver's
//! turnaround). TCP rr stamps in transport/tcp/trip.rs, UDP rr in transport/udp/rr.rs, the
//! latency probe in transport/probe.rs.

use crate::metrics::transactions::latency_histogram;
use hdrhistogram::Histogram;

/// This kernel's boot id (/proc/sys/kernel/random/boot_id): two processes that read the same
/// one run on one kernel, so on one CLOCK_REALTIME (network namespaces do not change it).
pub(crate) fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok().map(|s| s.trim().to_string())
}

/// CLOCK_REALTIME now, in nanoseconds since the epoch.
pub(crate) fn realtime_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec into `ts`.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}

/// The one-way legs a client thread measured, nanoseconds.
pub(crate) struct TripLegs {
    pub request: Histogram<u64>,
    pub response: Histogram<u64>,
    /// Legs that came out negative (the clocks disagree by more than the leg): recorded as
    /// 1 ns and counted here.
    pub negative: u64,
}

impl TripLegs {
    pub(crate) fn new() -> Self {
        Self { request: latency_histogram(), response: latency_histogram(), negative: 0 }
    }

    /// One round trip: sent at `sent`, stamped by the far end at `stamp`, answered at
    /// `arrived` (CLOCK_REALTIME nanoseconds, each read by the end that saw it).
    pub(crate) fn record(&mut self, sent: u64, stamp: u64, arrived: u64) {
        for (h, from, to) in [(&mut self.request, sent, stamp), (&mut self.response, stamp, arrived)] {
            if to < from {
                self.negative += 1;
            }
            let _ = h.record(to.saturating_sub(from).clamp(1, h.high()));
        }
    }

    pub(crate) fn add(&mut self, o: &TripLegs) {
        let _ = self.request.add(&o.request);
        let _ = self.response.add(&o.response);
        self.negative += o.negative;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamp_after_the_arrival_is_counted_negative() {
        let mut legs = TripLegs::new();
        legs.record(100, 50, 200);
        assert_eq!(legs.negative, 1);
        assert_eq!(legs.request.min(), 1, "a negative leg is recorded as 1 ns");
    }
}
