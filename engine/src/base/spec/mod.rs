//! The agreed description of one test: what the sender asks for and the receiver accepts.
//!
//! A `TestSpec` travels over the control channel ([`crate::session::control`]) and is echoed in
//! every report as the `test` key (docs/output.md), so it holds only what both ends must agree on. Local
//! choices (which CPUs, busy polling) stay out of it.
//!
//! Its kernel knobs for the data flows, [`Tuning`], are in `tuning.rs`.

use crate::base::error::{Error, Result};
use crate::base::units::{format_bits_per_second, MAX_BURST};
use serde::{Deserialize, Serialize};
use std::time::Duration;

mod tuning;
pub use tuning::Tuning;

/// Bytes of uringbench's header at the start of every UDP datagram (sequence number and send
/// time; the format is `wire::udp_payload`'s).
pub const UDP_HEADER_LEN: u32 = 20;
/// The most one UDP datagram carries over IPv4: 65535 - 8 (UDP) - 20 (IP).
pub const MAX_UDP_PAYLOAD: u32 = 65_507;
/// The largest rr request or response over TCP.
pub const MAX_RR_MESSAGE: u32 = 1 << 20;
/// The longest transaction timeout (`--timeout`) of rr over UDP and crr.
pub const MAX_RR_TIMEOUT_MS: u64 = 60_000;
/// Shortest interval a test may ask for: each interval is a message to the sender and a
/// sample per flow, so 1 ms intervals turn a test into a memory and bandwidth sink.
pub const MIN_INTERVAL_MS: u64 = 10;
/// No test asks for more than 10 Tbit/s; a larger rate is a crafted hello (and would wrap
/// the pacing arithmetic).
pub const RATE_CEILING: u64 = 10_000_000_000_000;
/// The MSS range the kernel takes for TCP_MAXSEG.
pub const MSS_RANGE: std::ops::RangeInclusive<u32> = 88..=65_535;
/// The largest socket buffer a test may ask for (`-w`): the kernel's int holds twice it.
pub const MAX_WINDOW: u32 = 1 << 31;

/// Transport protocol of the data flows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Proto {
    Tcp,
    Udp,
}

/// Whether the sender uses `IORING_OP_SEND_ZC`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ZeroCopyMode {
    /// Zero-copy only where it pays: never when the kernel would copy anyway (local delivery).
    Auto,
    On,
    Off,
}

/// Which way the data flows, seen from the side that runs `send`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// `send` sends, `recv` receives.
    #[default]
    Forward,
    /// `recv` sends back over flows `send` opened (`--reverse`), so a sender behind NAT or a
    /// firewall can still measure the other way.
    Reverse,
    /// Both at once, one set of flows each way (`--bidir`).
    Bidir,
}

/// Workload run over the flows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Workload {
    Stream,
    /// Request/response: `req_len` bytes out, `resp_len` bytes back, one at a time per flow.
    Rr,
    /// Connect, request, response, close: one new TCP connection per transaction.
    Crr,
}

impl Workload {
    /// Transaction workloads measure latency: their threads spin while they have a CPU.
    pub fn latency_bound(self) -> bool {
        matches!(self, Workload::Rr | Workload::Crr)
    }
}

/// Most requests of one `--bounceback` burst.
pub const MAX_BOUNCEBACK: u32 = 1024;
/// Most bytes of one `--bounceback` burst's requests (or responses).
pub const MAX_BURST_BYTES: u64 = 16 << 20;
/// Bytes of a `--trip-times` response's timestamp: CLOCK_REALTIME nanoseconds, big-endian.
pub const TRIP_STAMP_LEN: u32 = 8;
/// Where a UDP rr response carries its `--trip-times` stamp: after the transaction's tag.
pub const UDP_TRIP_STAMP_AT: u32 = 8;

/// One test as agreed by both ends. Durations are in milliseconds on the wire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TestSpec {
    pub proto: Proto,
    pub workload: Workload,
    pub queues: u32,
    pub flows_per_queue: u32,
    /// Length of the measured window.
    pub time_ms: u64,
    pub warmup_ms: u64,
    pub cooldown_ms: u64,
    /// Interval report period; 0 means no interval lines.
    pub interval_ms: u64,
    /// Bytes per send call.
    pub len: u32,
    /// Total offered rate over all flows in bits/s; 0 means unlimited.
    pub rate_bps: u64,
    /// With a rate: sends each sending thread makes back to back before it waits for the
    /// rate (`-b RATE/N`, iperf3's burst form); absent: every send waits for the rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u32>,
    pub zerocopy: ZeroCopyMode,
    /// Sends in flight per flow.
    pub depth: u32,
    /// UDP: batch datagrams with GSO (false: one datagram per send).
    #[serde(default = "yes")]
    pub gso: bool,
    #[serde(default)]
    pub direction: Direction,
    /// UDP: also measure one-way delay (only meaningful when both ends share a clock: the
    /// same host, or clocks synchronised by PTP).
    #[serde(default)]
    pub one_way_delay: bool,
    /// rr: request and response sizes in bytes.
    #[serde(default = "one")]
    pub req_len: u32,
    #[serde(default = "one")]
    pub resp_len: u32,
    /// rr over UDP and crr: a transaction (or connect) not answered within this long counts
    /// as a failure and the flow moves on.
    #[serde(default = "second")]
    pub timeout_ms: u64,
    /// TCP rr: requests sent back to back per burst before their responses are awaited
    /// (`--bounceback N`); absent: one transaction at a time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bounceback: Option<u32>,
    /// TCP rr: the receiver stamps each response with the CLOCK_REALTIME time its request
    /// arrived (`--trip-times`), so the client can split the round trip into one-way delays.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub trip_times: bool,
    /// `--clocks-synced`: the user asserts both hosts' clocks are synchronized, so that
    /// `--trip-times` between two hosts gives one-way delays (the client's assumption only).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub clocks_synced: bool,
    /// A receiver-side variant to run under: a name from the receiver's `recv --variants`
    /// file, whose settings the receiver applies for this test and reverts after it. The
    /// sender only names it; what it changes is the receiver's own file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    /// Stream tests (`--latency`): a latency probe runs beside the load, on a connection of
    /// its own that the receiver answers (idle, then loaded round trips). A receiver that
    /// answers it says so in its `accept`; one too old to know the key ignores it, and the
    /// sender refuses to run without an answer.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub latency: bool,
    /// `send --start-at`: the instant the data starts, on the sender's clock. The sender
    /// says `start` on the control channel as it releases the data; a receiver that knows
    /// the key waits for that message (its accept's `start_message`) and starts its window
    /// there. A receiver too old to know it ignores it, and the sender refuses to go on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_at: Option<crate::base::start_at::StartAt>,
    /// Socket and kernel knobs applied to every data flow on both ends (`-C`, `-w`, `-M`...).
    #[serde(flatten)]
    pub tuning: Tuning,
}

fn second() -> u64 {
    1_000
}

fn one() -> u32 {
    1
}

fn yes() -> bool {
    true
}

impl Default for TestSpec {
    fn default() -> Self {
        Self {
            proto: Proto::Tcp,
            workload: Workload::Stream,
            queues: 1,
            flows_per_queue: 1,
            time_ms: 10_000,
            warmup_ms: 1_000,
            cooldown_ms: 250,
            interval_ms: 0,
            len: 128 * 1024,
            rate_bps: 0,
            burst: None,
            zerocopy: ZeroCopyMode::Auto,
            depth: 4,
            gso: true,
            direction: Direction::Forward,
            one_way_delay: false,
            req_len: 1,
            resp_len: 1,
            timeout_ms: 1_000,
            bounceback: None,
            trip_times: false,
            clocks_synced: false,
            variant: None,
            latency: false,
            start_at: None,
            tuning: Tuning::default(),
        }
    }
}

impl TestSpec {
    /// Flows per direction (saturating: a crafted spec's product must not wrap to a small
    /// number; the receiver's limit check refuses it).
    pub fn flows(&self) -> u32 {
        self.queues.saturating_mul(self.flows_per_queue)
    }
    /// Data connections of a test: one set of flows per direction; none for crr, whose
    /// connections come and go during the test.
    /// The latency probe's connections beside the data flows (`--latency`): one, or none.
    pub fn probe_connections(&self) -> u32 {
        u32::from(self.latency)
    }

    pub fn data_connections(&self) -> u32 {
        if self.workload == Workload::Crr {
            0
        } else if self.direction == Direction::Bidir {
            self.flows().saturating_mul(2)
        } else {
            self.flows()
        }
    }
    /// Queue that owns flow `flow`: flows are dealt out round-robin.
    pub fn queue_of_flow(&self, flow: u32) -> u32 {
        flow % self.queues.max(1)
    }
    pub fn time(&self) -> Duration {
        Duration::from_millis(self.time_ms)
    }
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms.max(1))
    }
    pub fn warmup(&self) -> Duration {
        Duration::from_millis(self.warmup_ms)
    }
    /// Warm-up + window + cool-down: how long the sender keeps sending.
    pub fn total(&self) -> Duration {
        Duration::from_millis(self.total_ms())
    }
    /// [`Self::total`] in milliseconds, saturating: `warmup_ms = 2^64 - 1000` must not wrap
    /// into a short test.
    pub(crate) fn total_ms(&self) -> u64 {
        self.warmup_ms.saturating_add(self.time_ms).saturating_add(self.cooldown_ms)
    }
    /// Offsets from the start at which counters are sampled: window start, each interval
    /// boundary inside the window, window end. Consecutive samples bound one interval, so
    /// the interval figures add up exactly to the window's. Computed as they are needed: a
    /// test of a million intervals holds none of them in memory.
    pub fn sample_offsets(&self) -> impl Iterator<Item = Duration> + use<> {
        window_offsets(self.warmup_ms, self.warmup_ms.saturating_add(self.time_ms), self.interval_ms)
    }
}

/// The sampler's offsets for a window from `start_ms` to `end_ms` with an interval of
/// `step_ms` (0: none): the start, every step inside the window, and the end.
pub fn window_offsets(start_ms: u64, end_ms: u64, step_ms: u64) -> impl Iterator<Item = Duration> {
    // Checked steps: an offset past u64 ends the list instead of wrapping back into the window.
    let inner = (step_ms > 0).then(|| {
        (1u64..)
            .map_while(move |n| n.checked_mul(step_ms).and_then(|d| start_ms.checked_add(d)))
            .take_while(move |&at| at < end_ms)
    });
    std::iter::once(start_ms)
        .chain(inner.into_iter().flatten())
        .chain(std::iter::once(end_ms))
        .map(Duration::from_millis)
}

impl TestSpec {
    /// Checks each field on its own and every sum and product of them, the same on both ends:
    /// the sender before it connects, the receiver before its own limits. The first bad field
    /// is a usage error naming its flag; a crafted spec whose product or sum would wrap is
    /// refused, never passed as small.
    pub fn validate(&self) -> Result<()> {
        let bad = |message: String| Err(Error::usage(message));
        if self.workload == Workload::Crr && self.proto == Proto::Udp {
            return bad("crr opens TCP connections; it has no UDP form (--udp)".into());
        }
        if self.start_at.is_some() && self.workload != Workload::Stream {
            return bad("--start-at starts stream tests only (send), not rr or crr".into());
        }
        if self.queues == 0 {
            return bad("--queues must be at least 1".into());
        }
        if self.flows_per_queue == 0 {
            return bad("--flows-per-queue must be at least 1".into());
        }
        let ways = if self.direction == Direction::Bidir { 2 } else { 1 };
        if self.queues.checked_mul(self.flows_per_queue).and_then(|f| f.checked_mul(ways)).is_none() {
            let both = if ways == 2 { " x 2 (--bidir)" } else { "" };
            return bad(format!(
                "--queues {} x --flows-per-queue {}{both} overflows the count of flows",
                self.queues, self.flows_per_queue
            ));
        }
        if self.time_ms == 0 {
            return bad("--time must be longer than 0".into());
        }
        if self.warmup_ms.checked_add(self.time_ms).and_then(|t| t.checked_add(self.cooldown_ms)).is_none() {
            let asked = self.warmup_ms as f64 + self.time_ms as f64 + self.cooldown_ms as f64;
            return bad(format!(
                "--warmup + --time + --cooldown of {:.1} s overflows the count of milliseconds, longer than any recv --max-time",
                asked / 1e3
            ));
        }
        if self.interval_ms != 0 && self.interval_ms < MIN_INTERVAL_MS {
            return bad(format!(
                "--interval of {} ms requested, the shortest is {MIN_INTERVAL_MS} ms",
                self.interval_ms
            ));
        }
        if self.len == 0 {
            return bad("--len must be at least 1".into());
        }
        if self.proto == Proto::Udp && self.workload == Workload::Stream {
            if self.len < UDP_HEADER_LEN {
                return bad(format!(
                    "UDP datagram length {} (--len) is shorter than the {UDP_HEADER_LEN}-byte sequence header every datagram carries",
                    self.len
                ));
            }
            if self.len > MAX_UDP_PAYLOAD {
                return bad(format!(
                    "UDP datagram length {} (--len) is over {MAX_UDP_PAYLOAD} bytes, the most one datagram carries",
                    self.len
                ));
            }
        }
        if self.depth == 0 {
            return bad("--depth must be at least 1".into());
        }
        for (flag, rate) in [("-b/--rate", Some(self.rate_bps)), ("--fq-rate", self.tuning.fq_rate_bps)] {
            if let Some(r) = rate.filter(|&r| r > RATE_CEILING) {
                return bad(format!(
                    "{flag} of {} requested, over the {} ceiling of any test (no recv --max-rate raises it)",
                    format_bits_per_second(r as f64),
                    format_bits_per_second(RATE_CEILING as f64)
                ));
            }
        }
        if let Some(n) = self.burst {
            if self.workload != Workload::Stream {
                return bad("-b RATE/N sends bursts in stream tests (send), not rr or crr".into());
            }
            if !(1..=MAX_BURST).contains(&n) {
                return bad(format!("-b RATE/{n}: a burst is 1 to {MAX_BURST} sends (iperf3's limit)"));
            }
        }
        if self.workload.latency_bound() {
            self.validate_transactions()?;
        }
        if self.tuning.mptcp && self.proto == Proto::Udp {
            return bad("-m/--mptcp applies to TCP flows, not UDP".into());
        }
        if self.tuning.mptcp && self.zerocopy == ZeroCopyMode::On {
            return bad("--zerocopy on: the kernel has no zero-copy send on MPTCP sockets (-m)".into());
        }
        if self.latency && self.workload != Workload::Stream {
            return bad("--latency runs beside a stream test's load; rr and crr measure latency already".into());
        }
        if self.clocks_synced && !self.trip_times {
            return bad("--clocks-synced only qualifies --trip-times".into());
        }
        if self.trip_times && self.workload == Workload::Stream && !self.latency {
            return bad("--trip-times on send splits the latency probe's round trips: it needs --latency".into());
        }
        self.tuning.validate()
    }

    /// A transaction test's sizes and timeout.
    fn validate_transactions(&self) -> Result<()> {
        let (max, what) = match self.proto {
            Proto::Tcp => (MAX_RR_MESSAGE, "1 MiB"),
            Proto::Udp => (MAX_UDP_PAYLOAD, "65507 bytes (one UDP datagram)"),
        };
        for (flag, v) in [("--req", self.req_len), ("--resp", self.resp_len)] {
            if v == 0 || v > max {
                return Err(Error::usage(format!("{flag} {v} bytes is outside 1 byte .. {what}")));
            }
        }
        let tcp_rr = self.proto == Proto::Tcp && self.workload == Workload::Rr;
        if let Some(n) = self.bounceback {
            if !tcp_rr {
                return Err(Error::usage("--bounceback applies to TCP rr"));
            }
            if !(1..=MAX_BOUNCEBACK).contains(&n) {
                return Err(Error::usage(format!("--bounceback {n} is outside 1 .. {MAX_BOUNCEBACK} requests")));
            }
            if u64::from(n) * u64::from(self.req_len.max(self.resp_len)) > MAX_BURST_BYTES {
                return Err(Error::usage(format!(
                    "--bounceback {n} of {}-byte messages is over {MAX_BURST_BYTES} bytes a burst",
                    self.req_len.max(self.resp_len)
                )));
            }
        }
        if self.trip_times {
            if self.workload != Workload::Rr {
                return Err(Error::usage("--trip-times applies to rr (TCP or UDP) and to send --latency, not to crr"));
            }
            let need = match self.proto {
                Proto::Tcp => TRIP_STAMP_LEN,
                Proto::Udp => UDP_TRIP_STAMP_AT + TRIP_STAMP_LEN,
            };
            if self.resp_len < need {
                return Err(Error::usage(format!(
                    "--trip-times needs --resp {need} or more: each response carries an {TRIP_STAMP_LEN}-byte timestamp{}",
                    if self.proto == Proto::Udp { " after the transaction's 8-byte tag" } else { "" }
                )));
            }
        }
        if self.timeout_ms == 0 || self.timeout_ms > MAX_RR_TIMEOUT_MS {
            return Err(Error::usage(format!(
                "--timeout {} ms is outside 1 ms .. {} s",
                self.timeout_ms,
                MAX_RR_TIMEOUT_MS / 1000
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sample_offsets_cover_the_window_only() {
        let spec = TestSpec { warmup_ms: 2000, time_ms: 3000, interval_ms: 1000, ..TestSpec::default() };
        let got: Vec<u64> = spec.sample_offsets().map(|d| d.as_millis() as u64).collect();
        assert_eq!(got, vec![2000, 3000, 4000, 5000], "warm-up excluded, one sample per boundary");
        let no_interval = TestSpec { interval_ms: 0, ..spec.clone() };
        assert_eq!(no_interval.sample_offsets().count(), 2, "without --interval only start and end");
        let ragged = TestSpec { interval_ms: 2000, ..spec };
        let got: Vec<u64> = ragged.sample_offsets().map(|d| d.as_millis() as u64).collect();
        assert_eq!(got, vec![2000, 4000, 5000], "a short last interval ends at the window end");
    }

    #[test]
    fn byte_shares_add_up_to_the_total() {
        let t = Tuning { bytes: Some(1_073_741_824 + 5), ..Tuning::default() };
        let shares: Vec<u64> = (0..7).map(|f| t.flow_bytes(f, 7).unwrap()).collect();
        assert_eq!(shares.iter().sum::<u64>(), 1_073_741_829);
        assert!(shares.iter().max().unwrap() - shares.iter().min().unwrap() <= 1);
        assert_eq!(Tuning::default().flow_bytes(0, 1), None);
    }

    #[test]
    fn tuning_keys_sit_in_the_test_object_only_when_set() {
        let plain = serde_json::to_value(TestSpec::default()).unwrap();
        assert!(plain.get("congestion").is_none() && plain.get("nodelay").is_none());
        let spec = TestSpec {
            tuning: Tuning { congestion: Some("reno".into()), tos: Some(0x28), ..Tuning::default() },
            ..TestSpec::default()
        };
        let v = serde_json::to_value(&spec).unwrap();
        assert_eq!(v["congestion"], "reno");
        assert_eq!(v["tos"], 0x28);
        let back: TestSpec = serde_json::from_value(v).unwrap();
        assert_eq!(back, spec, "the knobs survive the wire");
    }

    #[test]
    fn hostile_hellos_saturate_instead_of_wrapping() {
        // 256 queues × 2^24 flows per queue wrapped to 0 flows; a warm-up of 2^64 - 1000 ms
        // wrapped into a test shorter than any --max-time.
        let wide =
            TestSpec { queues: 256, flows_per_queue: 1 << 24, direction: Direction::Bidir, ..TestSpec::default() };
        assert_eq!((wide.flows(), wide.data_connections()), (u32::MAX, u32::MAX));
        let long = TestSpec { warmup_ms: u64::MAX - 1000, ..TestSpec::default() };
        assert_eq!(long.total_ms(), u64::MAX);
        assert_eq!(long.sample_offsets().count(), 2, "no interval offset past u64");
        assert_eq!(TestSpec { queues: 0, ..TestSpec::default() }.queue_of_flow(3), 0, "no division by zero");
    }

    proptest::proptest! {
        #[test]
        fn sample_offsets_cut_the_window_into_intervals_that_add_up(
            warmup_ms in 0u64..10_000_000,
            time_ms in 1u64..10_000_000,
            interval_ms in 0u64..2_000_000,
        ) {
            // At most 10,000 intervals: the property, not the memory, is under test.
            let interval_ms = if interval_ms > 0 { interval_ms.max(time_ms / 10_000) } else { 0 };
            let spec = TestSpec { warmup_ms, time_ms, interval_ms, ..TestSpec::default() };
            let at: Vec<u64> = spec.sample_offsets().map(|d| d.as_millis() as u64).collect();
            proptest::prop_assert_eq!(at[0], warmup_ms, "the window starts after the warm-up");
            proptest::prop_assert_eq!(*at.last().unwrap(), warmup_ms + time_ms, "and ends with it");
            let steps: Vec<u64> = at.windows(2).map(|w| w[1] - w[0]).collect();
            proptest::prop_assert_eq!(steps.iter().sum::<u64>(), time_ms, "the intervals add up to the window");
            proptest::prop_assert!(steps.iter().all(|&s| s > 0), "no empty interval");
            if interval_ms > 0 {
                let (last, full) = steps.split_last().unwrap();
                proptest::prop_assert!(full.iter().all(|&s| s == interval_ms), "every interval but the last is whole");
                proptest::prop_assert!(*last <= interval_ms);
                proptest::prop_assert_eq!(steps.len() as u64, time_ms.div_ceil(interval_ms));
            } else {
                proptest::prop_assert_eq!(steps.len(), 1, "without --interval the window is one interval");
            }
        }

        #[test]
        fn derived_counts_and_durations_never_wrap(
            queues in proptest::prelude::any::<u32>(),
            flows_per_queue in proptest::prelude::any::<u32>(),
            warmup_ms in proptest::prelude::any::<u64>(),
            time_ms in proptest::prelude::any::<u64>(),
            cooldown_ms in proptest::prelude::any::<u64>(),
            interval_ms in proptest::prelude::any::<u64>(),
            bidir in proptest::prelude::any::<bool>(),
        ) {
            let direction = if bidir { Direction::Bidir } else { Direction::Forward };
            let spec = TestSpec {
                queues, flows_per_queue, warmup_ms, time_ms, cooldown_ms, interval_ms, direction,
                ..TestSpec::default()
            };
            let flows = u128::from(queues) * u128::from(flows_per_queue);
            proptest::prop_assert_eq!(u128::from(spec.flows()), flows.min(u128::from(u32::MAX)), "saturates, never wraps");
            let connections = if bidir { 2 * flows } else { flows };
            proptest::prop_assert_eq!(u128::from(spec.data_connections()), connections.min(u128::from(u32::MAX)));
            let total = u128::from(warmup_ms) + u128::from(time_ms) + u128::from(cooldown_ms);
            proptest::prop_assert_eq!(u128::from(spec.total_ms()), total.min(u128::from(u64::MAX)));
            proptest::prop_assert!(spec.queue_of_flow(flows_per_queue) < queues.max(1));
            let end = u128::from(warmup_ms) + u128::from(time_ms);
            let mut last = None;
            for at in spec.sample_offsets().take(64) {
                let at = at.as_millis();
                proptest::prop_assert!(at <= end.min(u128::from(u64::MAX)), "an offset past the window: {}", at);
                proptest::prop_assert!(last.is_none_or(|l| at >= l), "offsets never go back (a wrapped one would)");
                last = Some(at);
            }
        }
    }

    #[test]
    fn flows_are_dealt_round_robin() {
        let spec = TestSpec { queues: 4, flows_per_queue: 2, ..TestSpec::default() };
        assert_eq!(spec.flows(), 8);
        let queues: Vec<u32> = (0..8).map(|f| spec.queue_of_flow(f)).collect();
        assert_eq!(queues, vec![0, 1, 2, 3, 0, 1, 2, 3]);
    }

    /// The message of `spec`'s check, which must be a usage error.
    fn refusal(spec: &TestSpec) -> String {
        let e = spec.validate().expect_err("a bad field is refused");
        assert_eq!(e.exit_code(), 2, "a bad field is a usage error: {e}");
        assert!(!e.message.contains('\n'), "one line: {e}");
        e.message
    }

    #[test]
    fn each_bad_field_is_refused_with_its_own_flag() {
        let ok = TestSpec::default();
        ok.validate().expect("the default spec is valid");
        let rr = TestSpec { workload: Workload::Rr, ..ok.clone() };
        let udp = TestSpec { proto: Proto::Udp, len: 1470, ..ok.clone() };
        let tuned = |tuning: Tuning| TestSpec { tuning, ..ok.clone() };
        let cases = [
            (TestSpec { workload: Workload::Crr, proto: Proto::Udp, ..ok.clone() }, "no UDP form"),
            (TestSpec { queues: 0, ..ok.clone() }, "--queues must be at least 1"),
            (TestSpec { flows_per_queue: 0, ..ok.clone() }, "--flows-per-queue must be at least 1"),
            (TestSpec { queues: 256, flows_per_queue: 1 << 24, ..ok.clone() }, "overflows"),
            (
                TestSpec { queues: 4, flows_per_queue: u32::MAX / 2, direction: Direction::Bidir, ..ok.clone() },
                "--bidir",
            ),
            (TestSpec { time_ms: 0, ..ok.clone() }, "--time must be longer than 0"),
            (TestSpec { warmup_ms: u64::MAX - 1000, ..ok.clone() }, "--max-time"),
            (TestSpec { interval_ms: 1, ..ok.clone() }, "shortest is 10 ms"),
            (TestSpec { len: 0, ..ok.clone() }, "--len must be at least 1"),
            (TestSpec { len: 10, ..udp.clone() }, "shorter than the 20-byte sequence header"),
            (TestSpec { len: 70_000, ..udp.clone() }, "UDP datagram length 70000"),
            (TestSpec { depth: 0, ..ok.clone() }, "--depth must be at least 1"),
            (TestSpec { rate_bps: u64::MAX, ..ok.clone() }, "-b/--rate"),
            (tuned(Tuning { fq_rate_bps: Some(u64::MAX), ..Tuning::default() }), "--fq-rate of"),
            (TestSpec { req_len: 0, ..rr.clone() }, "--req 0"),
            (TestSpec { resp_len: MAX_RR_MESSAGE + 1, ..rr.clone() }, "--resp"),
            (TestSpec { timeout_ms: 0, ..rr.clone() }, "--timeout 0 ms"),
            (TestSpec { timeout_ms: MAX_RR_TIMEOUT_MS + 1, ..rr.clone() }, "--timeout"),
            (tuned(Tuning { window: Some(0), ..Tuning::default() }), "-w/--window 0"),
            (tuned(Tuning { window: Some(MAX_WINDOW + 1), ..Tuning::default() }), "2 GiB"),
            (tuned(Tuning { mss: Some(50), ..Tuning::default() }), "below 88"),
            (tuned(Tuning { mss: Some(70_000), ..Tuning::default() }), "above 65535"),
            (tuned(Tuning { bytes: Some(0), ..Tuning::default() }), "-n/--bytes must be at least 1"),
            (tuned(Tuning { fq_rate_bps: Some(0), ..Tuning::default() }), "--fq-rate must be above 0"),
        ];
        for (spec, expect) in cases {
            let message = refusal(&spec);
            assert!(message.contains(expect), "'{message}' should say '{expect}'");
        }
        // The edges themselves pass.
        for spec in [
            TestSpec { interval_ms: MIN_INTERVAL_MS, rate_bps: RATE_CEILING, ..ok.clone() },
            TestSpec { len: UDP_HEADER_LEN, ..udp.clone() },
            TestSpec { len: MAX_UDP_PAYLOAD, ..udp.clone() },
            TestSpec { req_len: MAX_RR_MESSAGE, timeout_ms: MAX_RR_TIMEOUT_MS, ..rr.clone() },
            tuned(Tuning { window: Some(MAX_WINDOW), mss: Some(88), bytes: Some(1), ..Tuning::default() }),
            // A transaction test's length is not a datagram's.
            TestSpec { proto: Proto::Udp, len: 1, ..rr.clone() },
        ] {
            spec.validate().unwrap_or_else(|e| panic!("{spec:?} is valid: {e}"));
        }
    }

    #[test]
    fn transaction_sizes_outside_the_protocol_limits_are_usage_errors() {
        let tcp = TestSpec { workload: Workload::Rr, req_len: 1, resp_len: MAX_RR_MESSAGE, ..TestSpec::default() };
        assert!(tcp.validate().is_ok(), "1 B / 1 MiB is the TCP range");
        for (req, resp) in [(0, 1), (1, 0), (MAX_RR_MESSAGE + 1, 1)] {
            let e = TestSpec { req_len: req, resp_len: resp, ..tcp.clone() }.validate().unwrap_err();
            assert_eq!(e.exit_code(), 2, "{e}");
        }
        let udp = TestSpec { proto: Proto::Udp, resp_len: MAX_UDP_PAYLOAD, ..tcp.clone() };
        assert!(udp.validate().is_ok(), "a 65507-byte answer fits one datagram");
        let e = TestSpec { resp_len: MAX_UDP_PAYLOAD + 1, ..udp.clone() }.validate().unwrap_err();
        assert!(e.message.contains("65507"), "names the datagram limit: {e}");
        let e = TestSpec { workload: Workload::Crr, ..udp }.validate().unwrap_err();
        assert!(e.message.contains("TCP"), "{e}");
        assert!(TestSpec { timeout_ms: 0, ..tcp }.validate().is_err(), "a zero timeout is refused");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(1024))]
        /// Whatever a peer or a caller puts in a spec, the check returns (no panic), and what
        /// passes is in range by exact arithmetic (u128): no product or sum wrapped on the way.
        #[test]
        fn validate_never_panics_and_never_passes_a_wrapped_spec(
            (queues, flows_per_queue, len, depth) in proptest::prelude::any::<(u32, u32, u32, u32)>(),
            (warmup_ms, time_ms, cooldown_ms, interval_ms, rate_bps) in
                proptest::prelude::any::<(u64, u64, u64, u64, u64)>(),
            (req_len, resp_len, timeout_ms) in proptest::prelude::any::<(u32, u32, u64)>(),
            (window, mss, fq_rate_bps, bytes) in
                proptest::prelude::any::<(Option<u32>, Option<u32>, Option<u64>, Option<u64>)>(),
            (proto_udp, workload, direction) in (proptest::prelude::any::<bool>(), 0u8..3, 0u8..3),
            small in proptest::prelude::any::<bool>(),
        ) {
            // Half the cases near the edges, where a wrap or an off-by-one would hide.
            let near = |big: u64, m: u64| if small { big % m } else { big };
            let spec = TestSpec {
                proto: if proto_udp { Proto::Udp } else { Proto::Tcp },
                workload: [Workload::Stream, Workload::Rr, Workload::Crr][usize::from(workload)],
                direction: [Direction::Forward, Direction::Reverse, Direction::Bidir][usize::from(direction)],
                queues: near(u64::from(queues), 300) as u32,
                flows_per_queue: near(u64::from(flows_per_queue), 2000) as u32,
                warmup_ms: near(warmup_ms, 700_000),
                time_ms: near(time_ms, 700_000),
                cooldown_ms: near(cooldown_ms, 700_000),
                interval_ms: near(interval_ms, 40),
                len: near(u64::from(len), 70_000) as u32,
                rate_bps: near(rate_bps, RATE_CEILING + RATE_CEILING / 8),
                depth: near(u64::from(depth), 8) as u32,
                req_len: near(u64::from(req_len), u64::from(MAX_RR_MESSAGE) + 1000) as u32,
                resp_len: near(u64::from(resp_len), u64::from(MAX_RR_MESSAGE) + 1000) as u32,
                timeout_ms: near(timeout_ms, 70_000),
                tuning: Tuning {
                    window: window.map(|w| near(u64::from(w), u64::from(MAX_WINDOW) + 1000) as u32),
                    mss: mss.map(|m| near(u64::from(m), 70_000) as u32),
                    fq_rate_bps: fq_rate_bps.map(|r| near(r, RATE_CEILING + RATE_CEILING / 8)),
                    bytes,
                    ..Tuning::default()
                },
                ..TestSpec::default()
            };
            if spec.validate().is_ok() {
                let ways = if spec.direction == Direction::Bidir { 2 } else { 1 };
                let flows = u128::from(spec.queues) * u128::from(spec.flows_per_queue) * ways;
                proptest::prop_assert!(flows >= 1 && flows <= u128::from(u32::MAX));
                proptest::prop_assert_eq!(u128::from(spec.flows()) * ways, flows);
                let total = u128::from(spec.warmup_ms) + u128::from(spec.time_ms) + u128::from(spec.cooldown_ms);
                proptest::prop_assert_eq!(u128::from(spec.total_ms()), total);
                proptest::prop_assert!(spec.time_ms > 0 && spec.len > 0 && spec.depth > 0);
                proptest::prop_assert!(spec.interval_ms == 0 || spec.interval_ms >= MIN_INTERVAL_MS);
                proptest::prop_assert!(spec.rate_bps <= RATE_CEILING);
                proptest::prop_assert!(spec.tuning.fq_rate_bps.is_none_or(|r| (1..=RATE_CEILING).contains(&r)));
                proptest::prop_assert!(spec.tuning.window.is_none_or(|w| (1..=MAX_WINDOW).contains(&w)));
                proptest::prop_assert!(spec.tuning.mss.is_none_or(|m| MSS_RANGE.contains(&m)));
                proptest::prop_assert!(spec.tuning.bytes != Some(0));
                if spec.workload == Workload::Stream && spec.proto == Proto::Udp {
                    proptest::prop_assert!((UDP_HEADER_LEN..=MAX_UDP_PAYLOAD).contains(&spec.len));
                }
                if spec.workload.latency_bound() {
                    proptest::prop_assert!(spec.req_len >= 1 && spec.resp_len >= 1);
                    proptest::prop_assert!((1..=MAX_RR_TIMEOUT_MS).contains(&spec.timeout_ms));
                    proptest::prop_assert!(!(spec.workload == Workload::Crr && spec.proto == Proto::Udp));
                }
            }
        }
    }
}
