//! What every request/response transport loop shares: its configuration, the round-trip
//! histogram, the failure counts, and the size rules.
//!
//! Three loops use it: [`crate::transport::tcp::rr`] (one long-lived connection per flow),
//! [`crate::transport::udp::rr`] (one connected datagram socket per flow, with loss) and
//! [`crate::transport::tcp::crr`] (a new connection per transaction).

use super::FlowOutcome;
use crate::base::error::{Error, Result};
use crate::base::spec::{Proto, TestSpec, Workload};
use crate::uring::ring::{RingPaths, WaitMode};
use hdrhistogram::Histogram;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Largest request or response over TCP: `--req` and `--resp` go from 1 byte to 1 MiB.
pub(crate) const MAX_MESSAGE: u32 = 1 << 20;
/// Largest request or response over UDP: one IPv4 datagram.
pub(crate) const MAX_UDP_MESSAGE: u32 = 65_507;
/// Longest per-transaction timeout a test may ask for.
pub(crate) const MAX_TIMEOUT_MS: u64 = 60_000;

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

pub use crate::metrics::transactions::RrFailures;

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

/// Checks a transaction test's sizes, protocol and timeout (both ends run it).
pub fn check_spec(spec: &TestSpec) -> Result<()> {
    let max = match spec.proto {
        Proto::Tcp => MAX_MESSAGE,
        Proto::Udp => MAX_UDP_MESSAGE,
    };
    for (name, v) in [("--req", spec.req_len), ("--resp", spec.resp_len)] {
        if v == 0 || v > max {
            let what = if spec.proto == Proto::Udp { "65507 bytes (one UDP datagram)" } else { "1 MiB" };
            return Err(Error::usage(format!("{name} {v} bytes is outside 1 byte .. {what}")));
        }
    }
    if spec.workload == Workload::Crr && spec.proto == Proto::Udp {
        return Err(Error::usage("crr opens TCP connections; it has no UDP form"));
    }
    if spec.timeout_ms == 0 || spec.timeout_ms > MAX_TIMEOUT_MS {
        return Err(Error::usage(format!(
            "--timeout {} ms is outside 1 ms .. {} s",
            spec.timeout_ms,
            MAX_TIMEOUT_MS / 1000
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_outside_the_protocol_limits_are_usage_errors() {
        let tcp = TestSpec { workload: Workload::Rr, req_len: 1, resp_len: MAX_MESSAGE, ..TestSpec::default() };
        assert!(check_spec(&tcp).is_ok(), "1 B / 1 MiB is the TCP range");
        for (req, resp) in [(0, 1), (1, 0), (MAX_MESSAGE + 1, 1)] {
            let e = check_spec(&TestSpec { req_len: req, resp_len: resp, ..tcp.clone() }).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{e}");
        }
        let udp = TestSpec { proto: Proto::Udp, resp_len: MAX_UDP_MESSAGE, ..tcp.clone() };
        assert!(check_spec(&udp).is_ok(), "a 65507-byte answer fits one datagram");
        let e = check_spec(&TestSpec { resp_len: MAX_UDP_MESSAGE + 1, ..udp.clone() }).unwrap_err();
        assert!(e.message.contains("65507"), "names the datagram limit: {e}");
        let e = check_spec(&TestSpec { workload: Workload::Crr, ..udp }).unwrap_err();
        assert!(e.message.contains("TCP"), "{e}");
        assert!(check_spec(&TestSpec { timeout_ms: 0, ..tcp }).is_err(), "a zero timeout is refused");
    }

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
