//! The figures of a transaction test (rr, crr) that its report carries: round-trip
//! percentiles and failed transactions by cause.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Round-trip percentiles in microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LatencySummary {
    pub count: u64,
    pub min: f64,
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

impl LatencySummary {
    pub fn of(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return Self::default();
        }
        let us = |ns: u64| ns as f64 / 1e3;
        Self {
            count: h.len(),
            min: us(h.min()),
            mean: h.mean() / 1e3,
            p50: us(h.value_at_quantile(0.50)),
            p90: us(h.value_at_quantile(0.90)),
            p99: us(h.value_at_quantile(0.99)),
            p999: us(h.value_at_quantile(0.999)),
            max: us(h.max()),
        }
    }
}

/// A new histogram for round trips from 1 ns to 100 s at 3 significant digits.
pub(crate) fn latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 100_000_000_000, 3).expect("static histogram bounds are valid")
}

/// Transactions that did not complete, by cause. Over TCP rr all stay zero (a broken flow
/// ends the flow instead); over UDP a lost request or response is a `timeout`; crr sees
/// every connection failure.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RrFailures {
    /// No answer (UDP) or no connection/response (crr) within the timeout.
    pub timeouts: u64,
    /// UDP: answers that arrived after their transaction had timed out, discarded.
    pub late: u64,
    /// Connection refused (crr) or ICMP port unreachable (UDP).
    pub refused: u64,
    /// crr: connect failed with EADDRNOTAVAIL, no local port left.
    pub port_exhaustion: u64,
    /// crr: reset or closed by the server before the whole response.
    pub reset: u64,
    /// Anything else: the errno texts are in the flow errors.
    pub other: u64,
}

impl RrFailures {
    pub fn total(&self) -> u64 {
        self.timeouts + self.refused + self.port_exhaustion + self.reset + self.other
    }

    pub fn add(&mut self, o: &RrFailures) {
        self.timeouts += o.timeouts;
        self.late += o.late;
        self.refused += o.refused;
        self.port_exhaustion += o.port_exhaustion;
        self.reset += o.reset;
        self.other += o.other;
    }

    /// One line per non-zero cause, saying what it means and what to do about it.
    pub(crate) fn explain(&self, timeout: Duration) -> Vec<String> {
        let ms = timeout.as_millis();
        let mut lines = Vec::new();
        if self.timeouts > 0 {
            lines.push(format!(
                "{} transactions unanswered within {ms} ms (lost datagrams, a stalled server, or SYN drops: \
                 check the server's listen backlog and interface drops)",
                self.timeouts
            ));
        }
        if self.late > 0 {
            lines.push(format!("{} answers arrived after their transaction timed out and were discarded", self.late));
        }
        if self.refused > 0 {
            lines.push(format!(
                "{} connections refused (nothing listening, or the accept queue overflowed: \
                 net.core.somaxconn, net.ipv4.tcp_max_syn_backlog)",
                self.refused
            ));
        }
        if self.port_exhaustion > 0 {
            lines.push(format!(
                "{} connects found no free local port (EADDRNOTAVAIL): widen net.ipv4.ip_local_port_range \
                 or use more client addresses",
                self.port_exhaustion
            ));
        }
        if self.reset > 0 {
            lines.push(format!("{} connections reset or closed before the whole response", self.reset));
        }
        if self.other > 0 {
            lines.push(format!("{} transactions failed otherwise (see the flow errors)", self.other));
        }
        lines
    }
}
