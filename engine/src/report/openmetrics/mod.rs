//! `recv --metrics`: what the receiver served, as an OpenMetrics text exposition a Prometheus
//! server scrapes. [`MetricsExporter`] is told of every test as it ends (it is the receiver's
//! [`TestTally`]) and keeps counters and, for the last test of each of the most recent
//! senders (at most `max_senders` of them), that test's figures; the endpoint
//! ([`endpoint`]) renders them on each scrape. The metric names are in docs/metrics.md.
//!
//! The encoder is hand-written ([`text`]) rather than the `prometheus-client` crate's: what is
//! exposed is a snapshot of a small bounded table, rendered per scrape, not instruments
//! updated in place; a sender's series change labels (its verdict) from one test to the next,
//! which a registry of instruments would need removed and re-added by hand; and the format is
//! a few lines of escaping and ordering, tested here against Prometheus itself
//! (cli/tests/metrics.rs).

pub mod endpoint;
mod text;

use crate::analysis::verdict::diagnose;
use crate::base::spec::{Direction, Proto, TestSpec, Workload};
use crate::metrics::figures::{cpu_evidence, Evidence, SideReport};
use crate::metrics::verdict::Bottleneck;
use crate::session::end_report::SenderRetransmits;
use crate::session::receiver::{TestOutcome, TestTally};
use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};
use text::Exposition;

/// Senders whose last test is kept, by default (`recv --metrics-senders`).
pub const DEFAULT_MAX_SENDERS: usize = 256;
/// The most `recv --metrics-senders` accepts: every sender is a few series per scrape.
pub const MAX_SENDERS: usize = 4096;

/// How an admitted test ended: the `outcome` label of `uringbench_tests_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// Every report this receiver made for it is complete.
    Complete,
    /// It ran, but a report is incomplete (a flow failed, it was stopped early).
    Incomplete,
    /// It ended without a report.
    Failed,
}

impl Outcome {
    const ALL: [Outcome; 3] = [Outcome::Complete, Outcome::Incomplete, Outcome::Failed];
    fn name(self) -> &'static str {
        match self {
            Outcome::Complete => "complete",
            Outcome::Incomplete => "incomplete",
            Outcome::Failed => "failed",
        }
    }
}

/// One gauge's figure of a sender's last test, when it has one.
type Figure = fn(&LastTest) -> Option<f64>;

/// The last test one sender ran here, as its series show it.
#[derive(Debug, Clone)]
struct LastTest {
    sender: IpAddr,
    proto: &'static str,
    workload: &'static str,
    direction: &'static str,
    queues: u32,
    outcome: Outcome,
    verdict: Bottleneck,
    /// Stream tests this receiver received: its window's rate, bits/s, and the window.
    received_bps: Option<f64>,
    window_seconds: Option<f64>,
    /// This host's busy CPU-seconds per GB received in the window.
    cpu_seconds_per_gb: Option<f64>,
    /// TCP segments the test's data sender retransmitted: this receiver's own flows (reverse,
    /// bidir) or, forward, the sender's flows as its end report gave them.
    retransmitted_segments: Option<u64>,
    /// UDP: datagrams lost and expected over the test.
    lost_datagrams: Option<(u64, u64)>,
    ended_unix_seconds: f64,
}

#[derive(Debug, Default)]
struct Ledger {
    tests: [u64; 3],
    refused: u64,
    received_bytes: u64,
    sent_bytes: u64,
    /// Scrape connections answered and dropped (malformed, oversized, too slow, too many).
    scrapes: u64,
    dropped_requests: u64,
    /// Oldest first; one entry per sender address.
    last: VecDeque<LastTest>,
}

/// The receiver's counters and each recent sender's last test, rendered on each scrape.
#[derive(Debug)]
pub struct MetricsExporter {
    ledger: Mutex<Ledger>,
    max_senders: usize,
}

impl MetricsExporter {
    /// Keeps the last test of at most `max_senders` senders (1..=[`MAX_SENDERS`]).
    pub fn new(max_senders: usize) -> Self {
        Self { ledger: Mutex::default(), max_senders: max_senders.clamp(1, MAX_SENDERS) }
    }

    fn ledger(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn scraped(&self) {
        self.ledger().scrapes += 1;
    }

    pub(crate) fn request_dropped(&self) {
        self.ledger().dropped_requests += 1;
    }

    /// The exposition, in the OpenMetrics text format.
    pub fn render(&self) -> String {
        let l = self.ledger();
        let mut x = Exposition::default();
        x.family("uringbench_tests", "counter", "Tests this receiver admitted, by how they ended.");
        for o in Outcome::ALL {
            x.sample("uringbench_tests_total", &[("outcome", o.name())], l.tests[o as usize]);
        }
        x.family(
            "uringbench_tests_refused",
            "counter",
            "Tests and connections refused with a reason (limits, --allow, --psk-file, busy).",
        );
        x.sample("uringbench_tests_refused_total", &[], l.refused);
        x.family(
            "uringbench_received_bytes",
            "counter",
            "Payload bytes received in stream tests, whole tests (warm-up and cool-down included).",
        );
        x.sample("uringbench_received_bytes_total", &[], l.received_bytes);
        x.family(
            "uringbench_sent_bytes",
            "counter",
            "Payload bytes sent in reverse and bidirectional stream tests, whole tests.",
        );
        x.sample("uringbench_sent_bytes_total", &[], l.sent_bytes);
        x.family("uringbench_metrics_scrapes", "counter", "Requests for /metrics answered.");
        x.sample("uringbench_metrics_scrapes_total", &[], l.scrapes);
        x.family(
            "uringbench_metrics_dropped_requests",
            "counter",
            "Connections to the metrics endpoint dropped: malformed, oversized, too slow, or too many.",
        );
        x.sample("uringbench_metrics_dropped_requests_total", &[], l.dropped_requests);
        x.family(
            "uringbench_last_test_senders",
            "gauge",
            "Senders whose last test is shown (at most recv --metrics-senders).",
        );
        x.sample("uringbench_last_test_senders", &[], l.last.len() as u64);

        let senders: Vec<String> = l.last.iter().map(|t| t.sender.to_string()).collect();
        x.family(
            "uringbench_last_test",
            "info",
            "The last test from each sender: its protocol, workload, direction, queues, outcome and verdict.",
        );
        for (t, sender) in l.last.iter().zip(&senders) {
            let queues = t.queues.to_string();
            let labels = [
                ("sender", sender.as_str()),
                ("proto", t.proto),
                ("workload", t.workload),
                ("direction", t.direction),
                ("queues", queues.as_str()),
                ("outcome", t.outcome.name()),
                ("verdict", t.verdict.name()),
            ];
            x.sample("uringbench_last_test_info", &labels, 1u64);
        }
        let gauges: [(&str, &str, Figure); 7] = [
            (
                "uringbench_last_test_received_bits_per_second",
                "Bits per second this receiver received in the last test's window (stream tests).",
                |t| t.received_bps,
            ),
            ("uringbench_last_test_window_seconds", "The last test's measured window on this receiver.", |t| {
                t.window_seconds
            }),
            (
                "uringbench_last_test_cpu_seconds_per_gigabyte",
                "This host's busy CPU-seconds per GB (1e9 bytes) received in the last test's window.",
                |t| t.cpu_seconds_per_gb,
            ),
            (
                "uringbench_last_test_retransmitted_segments",
                "TCP segments the last test's data sender retransmitted in its window: this receiver's own flows (reverse, bidirectional), or the sender's as its end report gave them (forward).",
                |t| t.retransmitted_segments.map(|n| n as f64),
            ),
            ("uringbench_last_test_lost_datagrams", "UDP datagrams lost in the last test.", |t| {
                t.lost_datagrams.map(|(lost, _)| lost as f64)
            }),
            ("uringbench_last_test_loss_ratio", "UDP datagrams lost over those expected in the last test.", |t| {
                t.lost_datagrams.filter(|&(_, expected)| expected > 0).map(|(lost, expected)| lost as f64 / expected as f64)
            }),
            ("uringbench_last_test_end_timestamp_seconds", "When the last test ended (Unix time).", |t| {
                Some(t.ended_unix_seconds)
            }),
        ];
        for (name, help, value) in gauges {
            x.family(name, "gauge", help);
            for (t, sender) in l.last.iter().zip(&senders) {
                if let Some(v) = value(t).filter(|v| v.is_finite()) {
                    x.sample(name, &[("sender", sender.as_str())], v);
                }
            }
        }
        x.finish()
    }

    /// Keeps `test` as its sender's last, the most recent `max_senders` senders only.
    fn keep(&self, ledger: &mut Ledger, test: LastTest) {
        ledger.last.retain(|t| t.sender != test.sender);
        while ledger.last.len() >= self.max_senders {
            ledger.last.pop_front();
        }
        ledger.last.push_back(test);
    }
}

impl TestTally for MetricsExporter {
    fn ended(&self, peer: SocketAddr, spec: &TestSpec, outcome: TestOutcome<'_>) {
        let ended_unix_seconds = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
        let mut test = LastTest {
            sender: peer.ip().to_canonical(),
            proto: match spec.proto {
                Proto::Tcp => "tcp",
                Proto::Udp => "udp",
            },
            workload: match spec.workload {
                Workload::Stream => "stream",
                Workload::Rr => "rr",
                Workload::Crr => "crr",
            },
            direction: match spec.direction {
                Direction::Forward => "forward",
                Direction::Reverse => "reverse",
                Direction::Bidir => "bidir",
            },
            queues: spec.queues,
            outcome: Outcome::Failed,
            verdict: Bottleneck::Incomplete,
            received_bps: None,
            window_seconds: None,
            cpu_seconds_per_gb: None,
            retransmitted_segments: None,
            lost_datagrams: None,
            ended_unix_seconds,
        };
        let mut ledger = self.ledger();
        if let TestOutcome::Reports { received, sent, sender_retransmits } = outcome {
            let complete = [received, sent].into_iter().flatten().all(|r| r.complete);
            test.outcome = if complete { Outcome::Complete } else { Outcome::Incomplete };
            test.verdict = receiver_verdict(spec, received, sent, sender_retransmits).bottleneck;
            // A forward test's retransmissions are the sender's, from its end report.
            test.retransmitted_segments = sender_retransmits.map(|r| r.retransmitted_segments);
            // An rr or crr report counts transactions where a stream's counts bytes.
            if spec.workload == Workload::Stream {
                if let Some(r) = received {
                    ledger.received_bytes = ledger.received_bytes.saturating_add(r.total_bytes());
                    test.received_bps = Some(r.bits_per_second());
                    test.window_seconds = Some(r.window_seconds);
                    test.cpu_seconds_per_gb =
                        (r.bytes() > 0).then(|| r.cpu.host_busy_seconds / (r.bytes() as f64 / 1e9));
                    test.lost_datagrams = r.udp.as_ref().map(|u| (u.lost, u.expected));
                }
                if let Some(s) = sent {
                    ledger.sent_bytes = ledger.sent_bytes.saturating_add(s.total_bytes());
                    test.window_seconds = test.window_seconds.or(Some(s.window_seconds));
                    if spec.proto == Proto::Tcp {
                        test.retransmitted_segments = Some(s.tcp.retransmitted_segments);
                    }
                }
            }
        }
        ledger.tests[test.outcome as usize] += 1;
        self.keep(&mut ledger, test);
    }

    fn refused(&self, _peer: SocketAddr) {
        self.ledger().refused += 1;
    }
}

/// The verdict from what this receiver saw of a test: its own reports (received bytes, its
/// CPU, UDP loss, what it sent over TCP), the rate the sender asked for and, in a forward TCP
/// test, the retransmissions of the sender's end report. The sender's CPU, its windows and
/// the path's limits are the sender's (its report has the full verdict), so this one cannot
/// name them.
fn receiver_verdict(
    spec: &TestSpec,
    received: Option<&SideReport>,
    sent: Option<&SideReport>,
    sender_retransmits: Option<SenderRetransmits>,
) -> crate::metrics::verdict::Verdict {
    let incomplete = [received, sent]
        .into_iter()
        .flatten()
        .find(|r| !r.complete)
        .map(|r| r.errors.first().cloned().unwrap_or_else(|| "the test did not complete".into()));
    let (threads, host) = cpu_evidence(sent, received);
    diagnose(&Evidence {
        incomplete,
        received_bps: received.map_or(0.0, |r| r.bits_per_second()),
        configured_rate_bps: spec.rate_bps,
        tcp: sent.map(|s| s.tcp.clone()).or(sender_retransmits.map(SenderRetransmits::window)).unwrap_or_default(),
        udp_loss: received.and_then(|r| {
            let u = r.udp.as_ref()?;
            let rcvbuf = r.host.as_ref().and_then(|h| h.snmp).map_or(0, |s| s.udp_rcvbuf_errors);
            Some((u.lost, u.expected, rcvbuf))
        }),
        threads,
        host,
        ..Evidence::default()
    })
}

#[cfg(test)]
mod tests;
