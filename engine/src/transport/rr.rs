//! What every request/response transport loop shares: its configuration, the round-trip
//! histogram, the failure counts, and the size rules.
//!
//! Three loops use it: [`crate::transport::tcp::rr`] (one long-lived connection per flow),
//! [`crate::transport::udp::rr`] (one connected datagram socket per flow, with loss) and
//! [`crate::transport::tcp::crr`] (a new connection per transaction).

use super::FlowOutcome;
use crate::sys::mptcp::StreamProtocol;
use crate::uring::ring::{RingPaths, WaitMode};
use hdrhistogram::Histogram;
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
    pub halt: Arc<AtomicBool>,
    /// crr: what the client's connections are made as (TCP or MPTCP).
    pub protocol: StreamProtocol,
    /// TCP rr client: requests sent back to back before their responses are awaited
    /// (`--bounceback`); 1 is one transaction in flight. A burst's round trip is recorded.
    pub bounceback: u32,
    /// TCP rr: responses carry the server's CLOCK_REALTIME stamp, which the client reads
    /// (`--trip-times`, transport/tcp/trip.rs).
    pub trip_times: bool,
    /// The client's round trips counted for the live intervals' p50 and p99 (with intervals).
    pub live: Option<Arc<crate::metrics::live_latency::LiveLatency>>,
}

impl RrConfig {
    /// Records one completed transaction's round trip of queue `queue` if it ended inside
    /// the window (and counts it for the live intervals).
    pub(crate) fn record(&self, latency_ns: &mut Histogram<u64>, queue: usize, started: Instant, now: Instant) {
        if self.in_window(now) {
            let rtt = now.duration_since(started).as_nanos().max(1) as u64;
            let _ = latency_ns.record(rtt.min(latency_ns.high()));
            if let Some(live) = &self.live {
                live.record(queue, rtt);
            }
        }
    }
}

impl RrConfig {
    /// Whether `now` is inside the measured window.
    pub(crate) fn in_window(&self, now: Instant) -> bool {
        now >= self.window.0 && now <= self.window.1
    }
}

pub use crate::metrics::transactions::RrFailures;

/// What an rr client thread measured.
pub(crate) struct RrClientResult {
    /// Per flow; `bytes` counts transactions.
    pub flows: Vec<FlowOutcome>,
    /// Round-trip times inside the window, nanoseconds.
    pub latency_ns: Histogram<u64>,
    pub failures: RrFailures,
    /// `--trip-times`: the one-way legs of the transactions inside the window.
    pub trip: Option<crate::transport::trip::TripLegs>,
    /// crr `-m`: a sample of the connections' MPTCP state, each read as its answer came
    /// (before the close); empty for the other loops.
    pub mptcp: Vec<crate::sys::mptcp::MptcpConnection>,
}

pub(crate) use crate::metrics::transactions::latency_histogram;

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
