//! Working latency (`send --latency`): the probe's round trips before the load started
//! (idle) and during the measured window (loaded), the inflation between them, and
//! responsiveness in round trips per minute (RPM: 60 s over the loaded median round trip,
//! as the IETF responsiveness work defines it). docs/output.md describes every key.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// Round-trip figures of a set of probe transactions, in milliseconds (nearest-rank
/// percentiles). All zero when no probe was answered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RttFigures {
    /// Answered probes.
    pub count: u64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

impl RttFigures {
    /// The figures of `rtts` (any order).
    pub fn of(rtts: &mut [Duration]) -> Self {
        if rtts.is_empty() {
            return Self::default();
        }
        rtts.sort_unstable();
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let rank = |q: f64| rtts[((q * rtts.len() as f64).ceil() as usize).clamp(1, rtts.len()) - 1];
        Self {
            count: rtts.len() as u64,
            p50_ms: ms(rank(0.50)),
            p90_ms: ms(rank(0.90)),
            p99_ms: ms(rank(0.99)),
            max_ms: ms(rtts[rtts.len() - 1]),
        }
    }

    /// Round trips per minute at the median: 60 s over p50; 0 without a probe.
    pub fn rpm(&self) -> f64 {
        if self.count == 0 || self.p50_ms <= 0.0 {
            0.0
        } else {
            60_000.0 / self.p50_ms
        }
    }
}

/// The probe's figures over one interval of the window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LatencyInterval {
    /// Seconds since the window start, as the interval's throughput figures.
    pub start: f64,
    pub end: f64,
    pub rtt: RttFigures,
    /// 60 s over this interval's p50.
    pub rpm: f64,
}

/// How much the load raised the round trip: loaded minus idle, per percentile, in ms.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Inflation {
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
}

/// The `latency` section of a stream document.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WorkingLatency {
    /// `tcp` or `udp`: the probe's protocol, the load's.
    pub proto: String,
    /// Bytes of each request and of each answer.
    pub probe_bytes: u32,
    /// Milliseconds from one probe's start to the next.
    pub gap_ms: f64,
    /// Before any load flow was opened.
    pub idle: RttFigures,
    /// During the measured window, with the load running.
    pub loaded: RttFigures,
    pub inflation: Inflation,
    /// 60 s over the loaded p50: round trips per minute under working conditions.
    pub rpm: f64,
    /// 60 s over the idle p50, for scale.
    pub idle_rpm: f64,
    /// UDP probes unanswered within a second (lost, or answered too late).
    pub lost: u64,
    /// The probe's own payload bytes, both ways: never in the load's throughput.
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// What the probe cost inside the window, against the load's queue threads (absent from
    /// an older document).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<ProbeCpu>,
    /// `--trip-times`: the loaded probes' one-way legs, from the stamps in the answers
    /// (absent without it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trip_times: Option<crate::metrics::trip_times::TripTimes>,
    /// Where the receiver's own qdiscs could hold a queue (its interface toward the sender),
    /// as it said at the test's start; absent from an older receiver.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receiver_queues: Option<crate::sys::netpath::ReceiverQueues>,
    /// The window's intervals (as `intervals[]`), when the test has them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub intervals: Vec<LatencyInterval>,
    /// Why the probe ended early, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What the probe cost inside the measured window (`latency.cpu`), in CPU-seconds, against
/// two measures of the load's: its queue threads (all of it is the load's, but the kernel's
/// work outside them is missing: an upper bound on the share) and the receiving host's busy
/// time, the numerator of CPU-s/GB (it holds all of the load's, but also anything else the
/// host ran: a lower bound on a busy host).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ProbeCpu {
    /// The sending host's probe thread (user + system), read by the thread itself.
    pub probe_seconds: f64,
    /// The receiver's answering thread (user + system), from the readings its answers carry;
    /// null from a receiver that does not put them in.
    pub answer_seconds: Option<f64>,
    /// The load's queue threads on both sides (user + system, `cpu.threads` of each side).
    pub load_seconds: f64,
    /// (probe + answer) ÷ `load_seconds`. Null without load threads' figures.
    pub share: Option<f64>,
    /// The receiving host's busy CPU-seconds (`receiver.cpu.host_busy_seconds`).
    pub host_seconds: f64,
    /// (probe + answer) ÷ `host_seconds`: the probe's part of the receiver's CPU-s/GB when
    /// both ends run on one host. Null without the receiver's figures.
    pub host_share: Option<f64>,
}

impl ProbeCpu {
    /// The figures from the two threads' nanoseconds and the load's and host's seconds.
    pub fn of(probe_ns: u64, answer_ns: Option<u64>, load_seconds: f64, host_seconds: f64) -> Self {
        let probe_seconds = probe_ns as f64 / 1e9;
        let answer_seconds = answer_ns.map(|ns| ns as f64 / 1e9);
        let spent = probe_seconds + answer_seconds.unwrap_or(0.0);
        let share_of = |whole: f64| (whole > 0.0).then(|| spent / whole);
        Self {
            probe_seconds,
            answer_seconds,
            load_seconds,
            share: share_of(load_seconds),
            host_seconds,
            host_share: share_of(host_seconds),
        }
    }
}

/// How much a running total (a thread's CPU time) grew over `start`..`end`, from readings
/// taken as the probes ended (`(probe sent, reading)`, in order): the last reading of a probe
/// sent before `end` minus the last of one sent before `start` (the first in the span when
/// none came before). None without a reading in the span.
pub fn growth_between(readings: &[(Instant, u64)], start: Instant, end: Instant) -> Option<u64> {
    let before = readings.iter().rev().find(|(at, _)| *at < start);
    let inside = || readings.iter().filter(|(at, _)| *at >= start && *at < end);
    let (first, last) = (inside().next()?, inside().next_back()?);
    Some(last.1.saturating_sub(before.unwrap_or(first).1))
}

/// When the phases of a test with a probe began, by the sending host's clock.
#[derive(Debug, Clone, Copy)]
pub struct ProbeClock {
    /// The load flows were opened: probes sent before are idle.
    pub load_start: Instant,
    /// The measured window's start (after the warm-up) and its length.
    pub window_start: Instant,
    pub window: Duration,
}

/// The round trips of the probes sent within `from`..`to` (offsets from `origin`).
pub fn rtts_between(samples: &[(Instant, Duration)], origin: Instant, from: f64, to: f64) -> Vec<Duration> {
    let (a, b) = (origin + Duration::from_secs_f64(from.max(0.0)), origin + Duration::from_secs_f64(to.max(0.0)));
    samples.iter().filter(|(at, _)| *at >= a && *at < b).map(|&(_, rtt)| rtt).collect()
}

/// One interval's figures from the samples sent in it.
pub fn interval_figures(
    samples: &[(Instant, Duration)],
    window_start: Instant,
    start: f64,
    end: f64,
) -> LatencyInterval {
    let rtt = RttFigures::of(&mut rtts_between(samples, window_start, start, end));
    LatencyInterval { start, end, rtt, rpm: rtt.rpm() }
}

impl WorkingLatency {
    /// The section from the probe's samples (`(sent, rtt)`), its phases and the window's
    /// intervals (`(start, end)` seconds).
    pub fn build(samples: &[(Instant, Duration)], clock: &ProbeClock, intervals: &[(f64, f64)]) -> Self {
        let mut idle: Vec<Duration> =
            samples.iter().filter(|(at, _)| *at < clock.load_start).map(|&(_, r)| r).collect();
        let mut loaded = rtts_between(samples, clock.window_start, 0.0, clock.window.as_secs_f64());
        let (idle, loaded) = (RttFigures::of(&mut idle), RttFigures::of(&mut loaded));
        let both = idle.count > 0 && loaded.count > 0;
        let grew = |l: f64, i: f64| if both { l - i } else { 0.0 };
        Self {
            idle,
            loaded,
            inflation: Inflation {
                p50_ms: grew(loaded.p50_ms, idle.p50_ms),
                p90_ms: grew(loaded.p90_ms, idle.p90_ms),
                p99_ms: grew(loaded.p99_ms, idle.p99_ms),
            },
            rpm: loaded.rpm(),
            idle_rpm: idle.rpm(),
            intervals: intervals.iter().map(|&(s, e)| interval_figures(samples, clock.window_start, s, e)).collect(),
            ..Self::default()
        }
    }

    /// The growth of the median round trip under load, in ms, when both phases were measured.
    pub fn median_growth_ms(&self) -> Option<f64> {
        (self.idle.count > 0 && self.loaded.count > 0).then_some(self.inflation.p50_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank_and_rpm_is_sixty_seconds_over_p50() {
        let mut rtts: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        let f = RttFigures::of(&mut rtts);
        assert_eq!((f.count, f.p50_ms, f.p90_ms, f.p99_ms, f.max_ms), (100, 50.0, 90.0, 99.0, 100.0));
        assert_eq!(f.rpm(), 1200.0);
        assert_eq!(RttFigures::of(&mut []).rpm(), 0.0, "no probe: no figure");
    }

    #[test]
    fn idle_loaded_and_intervals_split_by_the_clock() {
        let t = Instant::now();
        let at = |ms: u64| t + Duration::from_millis(ms);
        // Idle: 0..1000 ms at 1 ms; warm-up 1000..2000 ignored; window 2000..4000 at 20 ms.
        let mut samples = vec![];
        for i in 0..10 {
            samples.push((at(i * 100), Duration::from_millis(1)));
            samples.push((at(1000 + i * 100), Duration::from_millis(500)));
            samples.push((at(2000 + i * 100), Duration::from_millis(20)));
            samples.push((at(3000 + i * 100), Duration::from_millis(30)));
        }
        let clock = ProbeClock { load_start: at(1000), window_start: at(2000), window: Duration::from_secs(2) };
        let w = WorkingLatency::build(&samples, &clock, &[(0.0, 1.0), (1.0, 2.0)]);
        assert_eq!(w.idle.count, 10);
        assert_eq!(w.loaded.count, 20, "the warm-up's probes are neither idle nor loaded");
        assert_eq!((w.loaded.p50_ms, w.loaded.max_ms), (20.0, 30.0));
        assert_eq!(w.inflation.p50_ms, 19.0);
        assert_eq!(w.rpm, 3000.0);
        assert_eq!(w.intervals.len(), 2);
        assert_eq!((w.intervals[0].rtt.p50_ms, w.intervals[1].rtt.p50_ms), (20.0, 30.0));
        assert_eq!(w.intervals[1].rpm, 2000.0);
        assert_eq!(w.median_growth_ms(), Some(19.0));
    }

    #[test]
    fn growth_counts_from_the_last_reading_before_the_span() {
        let t = Instant::now();
        let at = |ms: u64| t + Duration::from_millis(ms);
        let readings = [(at(0), 100), (at(10), 150), (at(20), 170), (at(30), 400), (at(40), 900)];
        assert_eq!(growth_between(&readings, at(15), at(35)), Some(250), "from 150 (sent at 10) to 400");
        assert_eq!(growth_between(&readings, at(0), at(25)), Some(70), "nothing before: from the first");
        assert_eq!(growth_between(&readings, at(41), at(50)), None, "no probe in the span");
        let cpu = ProbeCpu::of(2_000_000, Some(1_000_000), 1.5, 6.0);
        assert_eq!((cpu.probe_seconds, cpu.answer_seconds, cpu.share), (0.002, Some(0.001), Some(0.002)));
        assert_eq!(cpu.host_share, Some(0.0005));
        assert_eq!(ProbeCpu::of(1, None, 0.0, 0.0).share, None, "no load figures: no share");
    }
}
