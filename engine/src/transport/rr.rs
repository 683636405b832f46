//! What every request/response transport loop shares: its configuration, the round-trip
//! histogram, the failure counts, and the size rules.
//!
//! Three loops use it: [`crate::transport::tcp::rr`] (one long-lived connection per flow),
//! [`crate::transport::udp::rr`] (one connected datagram socket per flow, with loss) and
//! [`crate::transport::tcp::crr`] (a new connection per transaction).

use super::FlowOutcome;
use crate::uring::ring::{RingPaths, WaitMode};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How an rr thread runs.
#[derive(Debug, Clone)]
pub(crate) struct RrConfig {
    pub wait: WaitMode,
    /// The fast paths the thread's ring is built with.
    pub ring: RingPaths,
    pub req_len: u32,
    pub resp_len: u32,
    /// Client: start no new transaction after this instant. Server: unused.
    pub deadline: Instant,
    /// Client: only transactions completing inside this window enter the histogram.
    pub window: (Instant, Instant),
    /// UDP and crr clients: a transaction older than this is abandoned and counted.
    pub timeout: Duration,
    /// Raised when the test must end regardless of the flows.
    pub stop: Arc<AtomicBool>,
}

impl RrConfig {
    /// Records one completed transaction's round trip if it ended inside the window.
    pub(crate) fn record(&self, latency_ns: &mut Histogram<u64>, started: Instant, now: Instant) {
        if now >= self.window.0 && now <= self.window.1 {
            let rtt = now.duration_since(started).as_nanos().max(1) as u64;
            let _ = latency_ns.record(rtt.min(latency_ns.high()));
        }
    }
}

/// Transactions that did not complete, by cause. Over TCP rr all stay zero (a broken flow
/// ends the flow instead); over UDP a lost request or response is a `timeout`; crr sees
/// every connection failure.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
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

/// What an rr client thread measured.
pub(crate) struct RrClientResult {
    /// Per flow; `bytes` counts transactions.
    pub flows: Vec<FlowOutcome>,
    /// Round-trip times inside the window, nanoseconds.
    pub latency_ns: Histogram<u64>,
    pub failures: RrFailures,
}

/// A new histogram for round trips from 1 ns to 100 s at 3 significant digits.
pub(crate) fn latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 100_000_000_000, 3).expect("static histogram bounds are valid")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_add_up_and_explain_only_what_happened() {
        let mut a = RrFailures { timeouts: 2, late: 1, ..RrFailures::default() };
        a.add(&RrFailures { refused: 3, port_exhaustion: 1, ..RrFailures::default() });
        assert_eq!(a.total(), 6, "late answers are not failures of their own: {a:?}");
        let lines = a.explain(Duration::from_millis(200));
        assert_eq!(lines.len(), 4, "{lines:?}");
        assert!(lines[0].contains("200 ms"), "{lines:?}");
        assert!(lines.iter().any(|l| l.contains("ip_local_port_range")), "{lines:?}");
        assert!(RrFailures::default().explain(Duration::from_secs(1)).is_empty());
    }
}
