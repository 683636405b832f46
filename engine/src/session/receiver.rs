//! What `recv` is set up with and what it tells: its configuration, the limits a remote
//! sender's hello is checked against (with checked arithmetic: a wrapped product never passes
//! as a small one), the networks it accepts connections from, and its events. The accept loop
//! and the sessions that use them are in [`crate::session::server`].

use crate::base::spec::{Direction, TestSpec, Workload, RATE_CEILING};
use crate::base::stop::StopToken;
use crate::metrics::figures::SideReport;
use crate::runtime::placement::BusyPoll;
use crate::session::auth::Psk;
use crate::sys::settings::ReceiverVariants;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

/// How `recv` runs.
#[derive(Debug, Clone)]
pub struct ReceiverConfig {
    pub bind: IpAddr,
    /// SO_BINDTODEVICE on the listener (`--bind-dev`): accepted flows stay on that device.
    pub device: Option<String>,
    pub port: u16,
    pub cpus: Option<Vec<usize>>,
    pub busy_poll: BusyPoll,
    /// Exit after the first test.
    pub once: bool,
    pub limits: ServerLimits,
    /// `--variants FILE`: receiver-side settings a sender may ask for by name, applied for
    /// that test only.
    pub variants: Option<Arc<ReceiverVariants>>,
    /// The fast paths the front end probed (`--sqpoll`, `--napi`, `--zc-rx`).
    pub fast: crate::uring::fastpath::FastPaths,
    /// What this kernel and process can do, probed once by the front end.
    pub kernel: crate::sys::probe::KernelCaps,
    /// `--psk-file`: a sender must prove it holds this secret before it may describe a test.
    pub psk: Option<Psk>,
    /// `--allow`: the networks connections are accepted from (empty: all).
    pub allow: Vec<Cidr>,
    /// Connections from one source address in their handshake at once.
    pub max_pending_per_source: usize,
    /// `--flows-from-any-address`: a test's data flows may come from another address than
    /// its control connection (a NAT that changes addresses between connections); with a
    /// key their tags then cannot cover the connection's ends.
    pub flows_from_any_address: bool,
    /// Ends the receiver: no new tests, and the running ones end now with their reports.
    pub stop: StopToken,
    /// `--queues`: the NIC receive queues tests are served from (all when None).
    pub nic_queues: Option<Vec<u32>>,
    /// `--placement`: where a queue's thread runs on a NIC with queues (chosen per test when
    /// None).
    pub placement: Option<crate::runtime::nic_queues::PlacementMode>,
    /// `recv --metrics`: told of every test as it ends and every refusal, directly (not
    /// through the log queue, which drops lines under load and rate-limits refusals).
    pub tally: Option<Tally>,
}

impl ReceiverConfig {
    /// What `uringbench recv` does without options, on a kernel probed as `kernel`: every
    /// address (IPv6 and mapped IPv4) on the default port, the default limits, no
    /// authentication, no filter, until stopped.
    pub fn new(kernel: crate::sys::probe::KernelCaps) -> Self {
        Self {
            bind: IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
            device: None,
            port: crate::session::control::DEFAULT_PORT,
            cpus: None,
            busy_poll: BusyPoll::Auto,
            once: false,
            limits: ServerLimits::default(),
            variants: None,
            fast: Default::default(),
            kernel,
            psk: None,
            allow: Vec::new(),
            max_pending_per_source: DEFAULT_MAX_PENDING_PER_SOURCE,
            flows_from_any_address: false,
            stop: StopToken::new(),
            nic_queues: None,
            placement: None,
            tally: None,
        }
    }
}

/// How a test this receiver admitted ended, as [`TestTally::ended`] is told it.
#[derive(Debug, Clone, Copy)]
pub enum TestOutcome<'a> {
    /// The test ran: what this receiver received (forward flows) and sent (reverse flows).
    /// `sender_retransmits`: a forward TCP stream's sender's end report, when it sent one
    /// that can be true (session/end_report.rs).
    Reports {
        received: Option<&'a SideReport>,
        sent: Option<&'a SideReport>,
        sender_retransmits: Option<crate::session::end_report::SenderRetransmits>,
    },
    /// The test failed before it had a report (the reason, as logged).
    Failed(&'a str),
}

/// What counts the receiver's tests (`recv --metrics`): called on the session's thread as each
/// admitted test ends, and for each refusal; it must not block.
pub trait TestTally: Send + Sync {
    fn ended(&self, peer: SocketAddr, spec: &TestSpec, outcome: TestOutcome<'_>);
    fn refused(&self, peer: SocketAddr);
}

/// A shared [`TestTally`] in [`ReceiverConfig::tally`].
#[derive(Clone)]
pub struct Tally(pub Arc<dyn TestTally>);

impl std::fmt::Debug for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tally")
    }
}

/// Connections from one source address in their handshake at once, by default
/// (`recv --max-pending-per-source`).
pub const DEFAULT_MAX_PENDING_PER_SOURCE: usize = 64;

/// What the receiver tells its operator, as it happens.
// One event per session start, moved once to the operator's callback: boxing the spec would
// buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum ServerEvent {
    Listening {
        addr: SocketAddr,
    },
    SessionStarted {
        id: u64,
        peer: SocketAddr,
        spec: TestSpec,
        placement: String,
    },
    SessionEnded {
        id: u64,
        peer: SocketAddr,
        workload: crate::base::spec::Workload,
        report: Box<SideReport>,
    },
    SessionFailed {
        id: u64,
        peer: SocketAddr,
        error: String,
    },
    Refused {
        peer: SocketAddr,
        reason: String,
    },
    /// The receiver's stop token was stopped (a signal): no new tests; the running ones end
    /// now, each with its report.
    Stopping {
        cause: String,
        running: usize,
    },
    Dropped {
        peer: SocketAddr,
        reason: String,
    },
    /// A receiver variant's settings were applied for the next test.
    VariantApplied {
        name: String,
        applied: Vec<String>,
    },
    /// A receiver variant could not be applied (the sender was refused without the local
    /// detail), or its settings could not all be reverted (they stay in its state file).
    /// At start: a receiver variant left applied by an earlier run of this receiver (killed
    /// mid-test) was reverted; what was restored.
    LeftoverReverted {
        restored: Vec<String>,
    },
    VariantFailed {
        name: String,
        error: String,
    },
    /// `count` more refusals or drops from `source` in the last `seconds` were not logged.
    Suppressed {
        source: IpAddr,
        count: u64,
        seconds: u64,
    },
    /// Accepting stopped for lack of descriptors, memory or threads; it retries by itself.
    AcceptPaused {
        reason: String,
    },
    AcceptResumed {
        paused: Duration,
    },
    /// The log queue was full: `count` events were not logged.
    LogDropped {
        count: u64,
    },
    /// Without `--psk-file`, the receiver listens on these public addresses.
    Unauthenticated {
        exposed: Vec<IpAddr>,
    },
}

pub(crate) type EventSink = Arc<dyn Fn(ServerEvent) + Send + Sync>;

/// What a remote sender may ask of this receiver.
#[derive(Debug, Clone)]
pub struct ServerLimits {
    pub max_queues: u32,
    pub max_flows: u32,
    /// Warm-up + window + cool-down, in milliseconds.
    pub max_total_ms: u64,
    pub max_len: u32,
    pub max_depth: u32,
    /// Tests served at the same time, from everyone.
    pub max_sessions: usize,
    /// Tests served at the same time to one source address.
    pub max_sessions_per_source: usize,
    /// Memory one test may make this receiver allocate
    /// ([`crate::session::server::TestRunner::memory`]).
    pub max_memory: u64,
    /// Highest offered rate a test may ask for, in bits/s (`recv --max-rate`); a reverse
    /// test asking for no limit sends at this rate. None: no limit below [`RATE_CEILING`].
    pub max_rate_bps: Option<u64>,
    /// Busy-polling threads are never started for a remote peer's test (`recv --no-spin`).
    pub no_spin: bool,
    /// A test whose flows move nothing for this long ends (`recv --no-progress-limit`; zero:
    /// never), so an idle peer cannot hold a slot until `max_total_ms`.
    pub no_progress: Duration,
}

impl Default for ServerLimits {
    fn default() -> Self {
        Self {
            max_queues: 256,
            max_flows: 1024,
            max_total_ms: 600_000,
            max_len: 16 << 20,
            max_depth: 64,
            max_sessions: 4,
            max_sessions_per_source: 2,
            max_memory: 1 << 30,
            max_rate_bps: None,
            no_spin: false,
            no_progress: crate::session::progress::DEFAULT_NO_PROGRESS,
        }
    }
}

impl ServerLimits {
    /// Checks a requested test against the limits; `Err` holds the reason sent to the peer.
    /// `memory` is what the test would allocate here ([`TestRunner::memory`]). Every sum and
    /// product of peer-supplied numbers is checked: a wrapped product must not pass as small.
    pub fn check(&self, spec: &TestSpec, memory: u64) -> std::result::Result<(), String> {
        // The fields on their own first (both ends check them alike), then this receiver's limits.
        spec.validate().map_err(|e| e.message)?;
        if spec.queues > self.max_queues {
            return Err(format!("{} queues requested, this receiver allows 1 to {}", spec.queues, self.max_queues));
        }
        let flows = spec.flows().saturating_mul(if spec.direction == Direction::Bidir { 2 } else { 1 });
        if flows > self.max_flows {
            return Err(format!("{flows} flows requested, this receiver allows 1 to {}", self.max_flows));
        }
        if let Some(c) = &spec.tuning.congestion {
            crate::sys::sockopt::check_congestion(c)?;
        }
        if spec.total_ms() > self.max_total_ms {
            return Err(format!(
                "test of {:.1} s requested (warm-up + time + cool-down), this receiver allows up to {:.0} s (recv --max-time)",
                spec.total_ms() as f64 / 1e3,
                self.max_total_ms as f64 / 1e3
            ));
        }
        if spec.timeout_ms > self.max_total_ms {
            return Err(format!("timeout of {} ms is longer than the longest test", spec.timeout_ms));
        }
        if spec.len > self.max_len {
            return Err(format!("message length {} bytes outside 1..{}", spec.len, self.max_len));
        }
        if spec.depth > self.max_depth {
            return Err(format!("send depth {} outside 1..{}", spec.depth, self.max_depth));
        }
        let ceiling = self.max_rate_bps.unwrap_or(RATE_CEILING).min(RATE_CEILING);
        for (what, rate) in [("rate", Some(spec.rate_bps)), ("fq pacing rate", spec.tuning.fq_rate_bps)] {
            if let Some(r) = rate.filter(|&r| r > ceiling) {
                return Err(format!(
                    "{what} of {} requested, this receiver allows up to {} (recv --max-rate)",
                    crate::base::units::format_bits_per_second(r as f64),
                    crate::base::units::format_bits_per_second(ceiling as f64)
                ));
            }
        }
        // With --max-rate, the sender's own flows must be paced below it; the receiver paces
        // a reverse test itself (see `cap`).
        if self.max_rate_bps.is_some()
            && spec.rate_bps == 0
            && spec.workload == Workload::Stream
            && spec.direction != Direction::Reverse
        {
            return Err(format!(
                "unlimited rate requested, this receiver allows up to {} (recv --max-rate): pass -b",
                crate::base::units::format_bits_per_second(ceiling as f64)
            ));
        }
        if memory > self.max_memory {
            return Err(format!(
                "test needs {} MiB of memory here (buffers, socket buffers, samples), limit {} MiB",
                memory >> 20,
                self.max_memory >> 20
            ));
        }
        Ok(())
    }

    /// What the receiver changes in an admitted test: with `--max-rate`, a reverse stream
    /// asking for no limit sends at the limit.
    pub fn cap(&self, spec: &mut TestSpec) {
        if let Some(max) = self.max_rate_bps {
            if spec.rate_bps == 0 && spec.workload == Workload::Stream && spec.direction == Direction::Reverse {
                spec.rate_bps = max;
            }
        }
    }
}

/// A network in CIDR notation (`10.0.0.0/8`, `2001:db8::/32`, or one address).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    net: IpAddr,
    prefix: u8,
}

impl std::str::FromStr for Cidr {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let (addr, prefix) = s.split_once('/').map_or((s, None), |(a, p)| (a, Some(p)));
        let net: IpAddr = addr.trim().parse().map_err(|_| format!("'{s}' is not an address or CIDR network"))?;
        let max = if net.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => p
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|&p| p <= max)
                .ok_or_else(|| format!("'{s}': prefix length must be 0..{max}"))?,
        };
        Ok(Self { net, prefix })
    }
}

impl Cidr {
    /// Whether `ip` lies in the network (an IPv4 peer seen as v4-mapped IPv6 counts as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        fn bits(ip: IpAddr) -> (u128, u32) {
            match ip {
                IpAddr::V4(a) => (u128::from(u32::from(a)) << 96, 32),
                IpAddr::V6(a) => (u128::from(a), 128),
            }
        }
        let (net, nlen) = bits(self.net.to_canonical());
        let (ip, ilen) = bits(ip.to_canonical());
        if nlen != ilen {
            return false;
        }
        // Both kinds sit at the top of the 128 bits, so the prefix masks from the top.
        let prefix = u32::from(self.prefix);
        let mask = if prefix == 0 { 0 } else { u128::MAX << (128 - prefix) };
        (net & mask) == (ip & mask)
    }
}

/// The addresses a listener on `bind` serves that are neither loopback nor private (for the
/// unspecified address: every such address of the host's interfaces).
pub(crate) fn exposed_addresses(bind: IpAddr) -> Vec<IpAddr> {
    let candidates = if bind.is_unspecified() { crate::sys::sockopt::interface_addresses() } else { vec![bind] };
    candidates.into_iter().filter(|a| !crate::doctor::path::is_internal(*a) && !a.is_unspecified()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::spec::{Proto, MIN_INTERVAL_MS};

    #[test]
    fn limits_refuse_what_a_peer_must_not_demand() {
        let limits = ServerLimits::default();
        let ok = TestSpec::default();
        assert!(limits.check(&ok, 1 << 20).is_ok());
        let cases = [
            (TestSpec { queues: 100_000, ..ok.clone() }, "queues"),
            (TestSpec { queues: 0, ..ok.clone() }, "queues"),
            (TestSpec { flows_per_queue: 50_000, ..ok.clone() }, "flows"),
            (TestSpec { time_ms: 1_000_000_000, ..ok.clone() }, "allows up to"),
            (TestSpec { len: u32::MAX, ..ok.clone() }, "message length"),
            (TestSpec { depth: 10_000, ..ok.clone() }, "depth"),
            (TestSpec { proto: Proto::Udp, len: 10, ..ok.clone() }, "UDP datagram length"),
            (TestSpec { proto: Proto::Udp, len: 70_000, ..ok.clone() }, "UDP datagram length"),
            (
                TestSpec {
                    tuning: crate::base::spec::Tuning { congestion: Some("no-such-cc".into()), ..Default::default() },
                    ..ok.clone()
                },
                "tcp_available_congestion_control",
            ),
        ];
        for (spec, expect) in cases {
            let reason = limits.check(&spec, 1 << 20).expect_err(expect);
            assert!(reason.contains(expect), "reason '{reason}' should mention '{expect}'");
        }
        let small = ServerLimits { max_memory: 1 << 20, ..ServerLimits::default() };
        assert!(small.check(&ok, 4 << 20).unwrap_err().contains("MiB"), "memory cap enforced");
    }

    #[test]
    fn crafted_specs_are_refused_with_their_reason() {
        let limits = ServerLimits { max_total_ms: 30_000, ..ServerLimits::default() };
        let ok = TestSpec { time_ms: 5_000, ..TestSpec::default() };
        assert!(limits.check(&ok, 1 << 20).is_ok());
        let cases = [
            (TestSpec { queues: 256, flows_per_queue: 1 << 24, ..ok.clone() }, "overflows"),
            (
                TestSpec { queues: 4, flows_per_queue: u32::MAX / 2, direction: Direction::Bidir, ..ok.clone() },
                "overflows",
            ),
            (TestSpec { warmup_ms: u64::MAX - 1000, ..ok.clone() }, "--max-time"),
            (TestSpec { cooldown_ms: u64::MAX, time_ms: u64::MAX, ..ok.clone() }, "--max-time"),
            (TestSpec { interval_ms: 1, ..ok.clone() }, "shortest is 10 ms"),
            (TestSpec { rate_bps: u64::MAX, ..ok.clone() }, "--max-rate"),
            (TestSpec { timeout_ms: u64::MAX, ..ok.clone() }, "timeout"),
        ];
        for (spec, expect) in cases {
            let reason = limits.check(&spec, 1 << 20).expect_err(expect);
            assert!(reason.contains(expect), "reason '{reason}' should mention '{expect}'");
        }
        let capped = ServerLimits { max_rate_bps: Some(1_000_000_000), ..limits.clone() };
        assert!(capped.check(&ok, 0).unwrap_err().contains("pass -b"), "unlimited forward refused");
        let mut reverse = TestSpec { direction: Direction::Reverse, ..ok.clone() };
        capped.cap(&mut reverse);
        assert_eq!(reverse.rate_bps, 1_000_000_000, "a reverse sender is capped");
        assert!(capped.check(&reverse, 0).is_ok());
    }

    #[test]
    fn cidr_lists_match_v4_v6_and_mapped_peers() {
        let net: Cidr = "10.77.0.0/16".parse().unwrap();
        assert!(net.contains("10.77.3.4".parse().unwrap()));
        assert!(net.contains("::ffff:10.77.3.4".parse().unwrap()), "a v4-mapped peer is its IPv4 address");
        assert!(!net.contains("10.78.0.1".parse().unwrap()));
        assert!(!net.contains("fd00::1".parse().unwrap()));
        let one: Cidr = "fd00::1".parse().unwrap();
        assert!(one.contains("fd00::1".parse().unwrap()) && !one.contains("fd00::2".parse().unwrap()));
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains("192.0.2.1".parse().unwrap()));
        assert!("10.0.0.0/33".parse::<Cidr>().unwrap_err().contains("0..32"));
        assert!("nonsense".parse::<Cidr>().is_err());
        assert!(exposed_addresses("127.0.0.1".parse().unwrap()).is_empty());
        assert!(exposed_addresses("10.1.2.3".parse().unwrap()).is_empty());
        let public: IpAddr = "203.0.113.5".parse().unwrap();
        assert_eq!(exposed_addresses(public), vec![public], "a public address is named in the warning");
    }

    proptest::proptest! {
        /// Whatever a peer puts in a spec, what passes the check is within the limits by
        /// exact arithmetic (u128): no sum or product wrapped on the way.
        #[test]
        fn the_limit_check_never_wraps(
            queues in proptest::prelude::any::<u32>(),
            per_queue in proptest::prelude::any::<u32>(),
            warmup in proptest::prelude::any::<u64>(),
            time in proptest::prelude::any::<u64>(),
            cooldown in proptest::prelude::any::<u64>(),
            interval in proptest::prelude::any::<u64>(),
            rate in proptest::prelude::any::<u64>(),
            bidir in proptest::prelude::any::<bool>(),
            small in proptest::prelude::any::<bool>(),
        ) {
            let limits = ServerLimits::default();
            // Half the cases near the limits, where a wrap would hide.
            let pick = |big: u64, near: u64| if small { near } else { big };
            let spec = TestSpec {
                queues: pick(u64::from(queues), u64::from(queues % 300)) as u32,
                flows_per_queue: pick(u64::from(per_queue), u64::from(per_queue % 2000)) as u32,
                warmup_ms: pick(warmup, warmup % 700_000),
                time_ms: pick(time, time % 700_000),
                cooldown_ms: pick(cooldown, cooldown % 700_000),
                interval_ms: pick(interval, interval % 20),
                rate_bps: rate,
                direction: if bidir { Direction::Bidir } else { Direction::Forward },
                ..TestSpec::default()
            };
            if limits.check(&spec, 0).is_ok() {
                let flows = u128::from(spec.queues) * u128::from(spec.flows_per_queue) * if bidir { 2 } else { 1 };
                proptest::prop_assert!(flows >= 1 && flows <= u128::from(limits.max_flows));
                let total = u128::from(spec.warmup_ms) + u128::from(spec.time_ms) + u128::from(spec.cooldown_ms);
                proptest::prop_assert!(total <= u128::from(limits.max_total_ms));
                proptest::prop_assert!(spec.interval_ms == 0 || spec.interval_ms >= MIN_INTERVAL_MS);
                proptest::prop_assert!(spec.rate_bps <= RATE_CEILING);
                proptest::prop_assert_eq!(u128::from(spec.flows()) * if bidir { 2 } else { 1 }, flows);
            }
        }
    }
}
