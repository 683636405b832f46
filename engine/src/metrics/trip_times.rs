//! The figures of `rr --trip-times`: each round trip split into its one-way legs, from the
//! client's and the server's CLOCK_REALTIME, and on what grounds the two clocks are taken to
//! agree. Without such grounds the legs are not given: a leg read off two unrelated clocks
//! carries their offset, which can be larger than the leg itself.

use crate::metrics::transactions::LatencySummary;
use serde::{Deserialize, Serialize};

/// Why the client trusts (or not) that the server's clock reads as its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ClockBasis {
    /// Both ends run on one kernel (the same boot id; network namespaces share one
    /// CLOCK_REALTIME): no offset.
    SameHost,
    /// Different hosts, and the user said their clocks are synchronized (`--clocks-synced`,
    /// e.g. by PTP): the legs are off by whatever offset remains.
    Asserted,
    /// Different hosts and no word on their clocks: the legs are not given.
    Unknown,
}

/// `trip_times`: the one-way legs of the round trips inside the window, in microseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TripTimes {
    pub clock: ClockBasis,
    /// Client to server: the server's stamp (the request arrived whole) minus the client's
    /// send time. Null when `clock` is `unknown`.
    pub request_us: Option<LatencySummary>,
    /// Server to client: the response's last byte at the client minus the server's stamp
    /// (it includes the server's turnaround). Null when `clock` is `unknown`.
    pub response_us: Option<LatencySummary>,
    /// The latency probe (`send --latency --trip-times`): the same transactions' round trips
    /// from the client's two clock readings, which the legs add up to. Absent for rr (its
    /// `latency_us` is the round trip) and when the legs are not given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub round_trip_us: Option<LatencySummary>,
    /// Legs that came out negative (recorded as 0): the clocks disagree by more than the leg.
    pub negative_legs: u64,
    /// What the figures rest on, in words.
    pub note: String,
}

impl TripTimes {
    /// The legs as measured, given or withheld by what is known of the clocks.
    pub fn of(clock: ClockBasis, request: LatencySummary, response: LatencySummary, negative_legs: u64) -> Self {
        let note = match clock {
            ClockBasis::SameHost => "one host (the same boot id): both stamps read one clock".to_string(),
            ClockBasis::Asserted => {
                "two hosts whose clocks the user asserted synchronized (--clocks-synced): each leg is off by \
                 the clocks' remaining offset"
                    .to_string()
            }
            ClockBasis::Unknown => "two hosts with an unknown clock offset: one-way delays not given (synchronize \
                 the clocks, e.g. with PTP, and pass --clocks-synced)"
                .to_string(),
        };
        let known = clock != ClockBasis::Unknown;
        Self {
            clock,
            request_us: known.then_some(request),
            response_us: known.then_some(response),
            round_trip_us: None,
            negative_legs,
            note,
        }
    }

    /// The report's line.
    pub fn line(&self) -> String {
        match (&self.request_us, &self.response_us) {
            (Some(q), Some(r)) => format!(
                "one-way: request p50 {:.1} us p99 {:.1} us, response p50 {:.1} us p99 {:.1} us ({}{})",
                q.p50,
                q.p99,
                r.p50,
                r.p99,
                self.note,
                if self.negative_legs > 0 { format!("; {} negative legs", self.negative_legs) } else { String::new() }
            ),
            _ => format!("one-way: {}", self.note),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legs_are_withheld_when_the_clocks_are_unrelated() {
        let l = LatencySummary { count: 3, p50: 10.0, ..LatencySummary::default() };
        let unknown = TripTimes::of(ClockBasis::Unknown, l, l, 0);
        assert!(unknown.request_us.is_none() && unknown.response_us.is_none());
        assert!(unknown.line().contains("unknown clock offset"), "{}", unknown.line());
        let same = TripTimes::of(ClockBasis::SameHost, l, l, 2);
        assert_eq!(same.request_us, Some(l));
        assert!(same.line().contains("2 negative legs"), "{}", same.line());
    }
}
