//! Summary statistics of a figure over several runs (min, median, mean, max, stdev): what
//! `--repeat`, sweeps, saved results and comparisons print for a set of runs; and the one
//! summary of a set of runs ([`RunsSummary`], built from their figures by
//! `RunsSummary::of` in `metrics/run_figures.rs`).

use serde::{Deserialize, Serialize};

/// The seed of the seeded draws over runs (bootstrap resamples, an experiment's block
/// orders) unless the caller gives one.
pub const DEFAULT_SEED: u64 = 0x7572_696e_6762_656e;

/// Summary statistics of one figure over several runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Stats {
    pub n: usize,
    pub min: f64,
    pub median: f64,
    pub mean: f64,
    pub max: f64,
    /// Sample standard deviation (n − 1); 0 for a single run.
    pub stdev: f64,
}

impl Stats {
    /// `None` for an empty set.
    pub fn of(values: &[f64]) -> Option<Self> {
        if values.is_empty() {
            return None;
        }
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = median_sorted(&v);
        let mean = v.iter().sum::<f64>() / n as f64;
        let var = if n > 1 { v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64 } else { 0.0 };
        Some(Self { n, min: v[0], median, mean, max: v[n - 1], stdev: var.sqrt() })
    }
}

/// A set of runs summarised (`send --repeat`'s `summary`, a sweep point's `summary`, a fleet
/// pair's or attribute group's figures): how many ran, how many succeeded, statistics of each
/// figure over those that succeeded, and their verdicts. The figures after `cpu_seconds_per_gb`
/// are written only where the runs have them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RunsSummary {
    pub runs: usize,
    /// Runs that completed without an error: the statistics are over these.
    pub complete_runs: usize,
    pub receiver_bits_per_second: Option<Stats>,
    pub sender_bits_per_second: Option<Stats>,
    /// Receiver-side host CPU-seconds per GB.
    pub cpu_seconds_per_gb: Option<Stats>,
    /// TCP: segments retransmitted per run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retransmits: Option<Stats>,
    /// UDP: datagrams lost ÷ expected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_ratio: Option<Stats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transactions_per_second: Option<Stats>,
    /// The 99th percentile transaction latency, µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p99_us: Option<Stats>,
    /// `--latency`: the probe's loaded p99 round trip, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loaded_p99_ms: Option<Stats>,
    /// `--latency`: round trips per minute under load.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rpm: Option<Stats>,
    /// Bottleneck names of the runs counted, most frequent first.
    #[serde(default)]
    pub verdicts: Vec<String>,
}

/// The median of sorted values (NaN when empty).
pub(crate) fn median_sorted(v: &[f64]) -> f64 {
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_of_known_values() {
        let s = Stats::of(&[3.0, 1.0, 2.0, 10.0]).unwrap();
        assert_eq!(
            (s.n, s.min, s.median, s.max),
            (4, 1.0, 2.5, 10.0),
            "even count: median is the mean of the middle two"
        );
        assert!((s.mean - 4.0).abs() < 1e-12);
        assert!((s.stdev - 4.0824829).abs() < 1e-6, "sample stdev, got {}", s.stdev);
        let one = Stats::of(&[5.0]).unwrap();
        assert_eq!((one.median, one.stdev), (5.0, 0.0));
        assert_eq!(Stats::of(&[]), None);
    }
}
