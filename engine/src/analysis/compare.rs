//! `uringbench compare`: did a change help? Per variant the median, min–max and a bootstrap
//! interval of the median; per variant against the first, the ratio of medians with its
//! bootstrap interval, a p-value and a one-line verdict that says either how large the change
//! is, or what these runs cannot show. The p-value is Mann–Whitney's where the run counts let
//! the rank test reach p < 0.05 (4 runs a side or more), else Welch's t on log values; the
//! verdict says which, and when the rank test could not decide.
//!
//! Variants come from saved documents: `send -J` and `send --repeat N -J` (one variant per
//! file, or several files joined into one), `rr`/`crr`/`http -J`, a sweep (one variant per
//! point) and an `experiment` result (one variant per named variant), read by
//! [`crate::analysis::document::load_operand`].

use crate::analysis::stats::{self, MannWhitney};
use crate::base::error::{Error, Result};
use crate::metrics::document::{FailedRun, RunDocument};
use crate::metrics::run_figures::RunFigures;
use crate::metrics::summary::Stats;
use crate::workload::experiment::ExperimentResult;
use crate::workload::http::HttpDocument;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A figure compared between variants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// `sum.receiver.bits_per_second`, in Gbit/s.
    ReceivedGbps,
    /// `cpu.receiver_per_byte.cpu_seconds_per_gb`.
    CpuSecondsPerGb,
    /// `tcp.sender.retransmitted_segments` (TCP streams).
    Retransmits,
    /// `sum.receiver.loss_ratio` × 100 (UDP streams).
    LossPercent,
    /// `transactions_per_second` (rr, crr, http).
    TransactionsPerSecond,
    /// `latency_us.p99` (rr, crr, http).
    P99Us,
    /// `latency.loaded.p99_ms`: the probe's 99th percentile round trip under load (`--latency`).
    LoadedP99Ms,
    /// `latency.rpm`: round trips per minute under load (`--latency`).
    Rpm,
}

pub const ALL_METRICS: [Metric; 8] = [
    Metric::ReceivedGbps,
    Metric::CpuSecondsPerGb,
    Metric::Retransmits,
    Metric::LossPercent,
    Metric::TransactionsPerSecond,
    Metric::P99Us,
    Metric::LoadedP99Ms,
    Metric::Rpm,
];

impl Metric {
    pub fn key(self) -> &'static str {
        match self {
            Metric::ReceivedGbps => "received_gbps",
            Metric::CpuSecondsPerGb => "cpu_seconds_per_gb",
            Metric::Retransmits => "retransmits",
            Metric::LossPercent => "loss_percent",
            Metric::TransactionsPerSecond => "transactions_per_second",
            Metric::P99Us => "p99_us",
            Metric::LoadedP99Ms => "loaded_p99_ms",
            Metric::Rpm => "rpm",
        }
    }

    pub fn parse(text: &str) -> Result<Self> {
        ALL_METRICS.into_iter().find(|m| m.key() == text).ok_or_else(|| {
            let keys: Vec<&str> = ALL_METRICS.iter().map(|m| m.key()).collect();
            Error::usage(format!("unknown metric '{text}': one of {}", keys.join(", ")))
        })
    }

    pub fn title(self) -> &'static str {
        match self {
            Metric::ReceivedGbps => "received Gbit/s",
            Metric::CpuSecondsPerGb => "CPU-s/GB",
            Metric::Retransmits => "retransmits",
            Metric::LossPercent => "loss %",
            Metric::TransactionsPerSecond => "transactions/s",
            Metric::P99Us => "p99 latency us",
            Metric::LoadedP99Ms => "loaded p99 ms",
            Metric::Rpm => "RPM",
        }
    }

    pub(crate) fn higher_is_better(self) -> bool {
        matches!(self, Metric::ReceivedGbps | Metric::TransactionsPerSecond | Metric::Rpm)
    }

    /// The figure of one run, when that run has it.
    pub fn of_run(self, run: &RunFigures) -> Option<f64> {
        let v = match self {
            Metric::ReceivedGbps => run.receiver_bits_per_second.map(|b| b / 1e9),
            Metric::CpuSecondsPerGb => run.cpu_seconds_per_gb,
            Metric::Retransmits => run.retransmits.map(|n| n as f64),
            Metric::LossPercent => run.loss_ratio.map(|l| l * 100.0),
            Metric::TransactionsPerSecond => run.transactions_per_second,
            Metric::P99Us => run.p99_us,
            Metric::LoadedP99Ms => run.loaded_p99_ms,
            Metric::Rpm => run.rpm,
        };
        v.filter(|v| v.is_finite())
    }
}

/// One run's figures from its document of any run kind (stream, rr, crr, http), as saved by
/// `-J`, or the record of a run that never started (an experiment keeps those as incomplete
/// runs).
pub fn figures_of_value(doc: &Value) -> Result<RunFigures> {
    let not_a_run = |e: String| Error::usage(format!("not a test report: {e}"));
    if let Some(failed) = FailedRun::deserialize(doc).ok().filter(|f| !f.complete) {
        return Ok(RunFigures::failed(failed.error));
    }
    if doc.get("url").is_some() && doc.get("transactions_per_second").is_some() {
        let http = HttpDocument::deserialize(doc).map_err(|e| not_a_run(e.to_string()))?;
        return Ok(http.figures());
    }
    match RunDocument::from_value(doc).map_err(not_a_run)? {
        RunDocument::Stream(d) => Ok(RunFigures::of_stream(&d)),
        RunDocument::Transactions(d) => Ok(RunFigures::of_transactions(&d)),
        RunDocument::Repeat(_) => Err(not_a_run("a --repeat document".into())),
    }
}

/// One variant: its name, where its runs came from, and the runs' figures.
#[derive(Debug, Clone)]
pub struct Variant {
    pub name: String,
    pub sources: Vec<String>,
    pub runs: Vec<RunFigures>,
}

impl Variant {
    /// Runs that completed.
    pub fn complete_runs(&self) -> impl Iterator<Item = &RunFigures> {
        self.runs.iter().filter(|r| r.complete)
    }

    pub fn samples(&self, metric: Metric) -> Vec<f64> {
        self.complete_runs().filter_map(|r| metric.of_run(r)).collect()
    }
}

/// A variant's statistics for one metric.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MetricSummary {
    pub n: usize,
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub ci95: [f64; 2],
    /// Standard deviation over the mean.
    pub relative_spread: f64,
}

/// The test whose p-value a comparison's verdict rests on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PTest {
    /// Two-sided Mann–Whitney U: used where the counts let it reach p < 0.05.
    #[default]
    MannWhitney,
    /// Welch's two-sided t test on the logarithms of the values: used where the rank test
    /// cannot reach p < 0.05 with these counts (fewer than 4 runs a side).
    WelchLogT,
}

impl PTest {
    pub fn title(self) -> &'static str {
        match self {
            PTest::MannWhitney => "Mann-Whitney U",
            PTest::WelchLogT => "Welch's t on log values",
        }
    }
}

/// One variant against the first, on one metric.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Comparison {
    pub a: String,
    pub b: String,
    pub metric: Metric,
    pub n_a: usize,
    pub n_b: usize,
    pub median_a: f64,
    pub median_b: f64,
    /// median(b) ÷ median(a); null when median(a) is 0.
    pub ratio: Option<f64>,
    pub ci95: Option<[f64; 2]>,
    /// The p-value of `test`, the test the verdict rests on.
    pub p_value: Option<f64>,
    /// Which test gave `p_value` (documents before it existed used Mann–Whitney).
    #[serde(default)]
    pub test: PTest,
    /// Mann–Whitney's p-value, whichever test decides.
    #[serde(default)]
    pub mann_whitney_p: Option<f64>,
    /// The smallest p the rank test can give with these counts: 2 ÷ C(n_a + n_b, n_a).
    #[serde(default)]
    pub rank_p_floor: Option<f64>,
    /// Welch's t on log values: its p-value, where every value is positive and each side has
    /// two runs or more.
    #[serde(default)]
    pub welch_p: Option<f64>,
    /// p < 0.05 and, where the ratio exists, its interval excludes 1.
    pub significant: bool,
    /// The smallest relative change these runs would find four times in five with `test`
    /// (0.2 = 20%); null where no test can decide with these runs.
    pub min_detectable_effect: Option<f64>,
    pub verdict: String,
}

#[derive(Debug, Clone)]
pub struct CompareReport {
    pub variants: Vec<Variant>,
    pub metrics: Vec<Metric>,
    pub primary: Metric,
    pub seed: u64,
    /// Per variant, per metric (same order as `metrics`).
    pub summaries: Vec<Vec<Option<MetricSummary>>>,
    pub comparisons: Vec<Comparison>,
}

/// A seed of its own for every (pair, metric), so adding a metric does not shift the others.
fn sub_seed(seed: u64, pair: usize, metric: Metric) -> u64 {
    let m = ALL_METRICS.iter().position(|x| *x == metric).unwrap_or(0) as u64;
    seed ^ (pair as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (m + 1).wrapping_mul(0xbf58_476d_1ce4_e5b9)
}

fn summarize(xs: &[f64], seed: u64) -> Option<MetricSummary> {
    let s = Stats::of(xs)?;
    let (lo, hi) = stats::median_ci(xs, seed);
    Some(MetricSummary {
        n: s.n,
        median: s.median,
        min: s.min,
        max: s.max,
        ci95: [lo, hi],
        relative_spread: stats::relative_spread(xs),
    })
}

pub(crate) fn fmt_p(p: f64) -> String {
    if p < 0.001 {
        "p<0.001".into()
    } else {
        format!("p={p:.3}")
    }
}

/// Compares every variant with the first. `metrics`: those asked for, else every metric all
/// variants have.
pub fn compare(variants: Vec<Variant>, metrics: Option<Vec<Metric>>, seed: u64) -> Result<CompareReport> {
    if variants.len() < 2 {
        return Err(Error::usage("compare needs at least two variants (two files, or a sweep or experiment)"));
    }
    for v in &variants {
        if v.complete_runs().next().is_none() {
            return Err(Error::usage(format!("variant '{}' has no complete run", v.name)));
        }
    }
    let available: Vec<Metric> =
        ALL_METRICS.into_iter().filter(|m| variants.iter().all(|v| !v.samples(*m).is_empty())).collect();
    let metrics = match metrics {
        Some(asked) => {
            if let Some(m) = asked.iter().find(|m| !available.contains(m)) {
                return Err(Error::usage(format!("metric {} is missing from some variant's runs", m.key())));
            }
            asked
        }
        None => available,
    };
    let primary = *metrics
        .first()
        .ok_or_else(|| Error::usage("the variants share no metric (a stream against an rr or http test?)"))?;
    let primary =
        if metrics.contains(&Metric::TransactionsPerSecond) { Metric::TransactionsPerSecond } else { primary };
    let summaries = variants
        .iter()
        .enumerate()
        .map(|(i, v)| metrics.iter().map(|m| summarize(&v.samples(*m), sub_seed(seed, 1000 + i, *m))).collect())
        .collect();
    let mut comparisons = Vec::new();
    for (i, b) in variants.iter().enumerate().skip(1) {
        for &m in &metrics {
            comparisons.push(compare_pair(&variants[0], b, m, sub_seed(seed, i, m)));
        }
    }
    Ok(CompareReport { variants, metrics, primary, seed, summaries, comparisons })
}

/// The fewest runs a side with which the rank test can reach p < 0.05; below it, Welch's t on
/// log values judges.
pub fn rank_test_min_runs() -> usize {
    stats::runs_for_rank_test()
}

/// One pair on one metric, with its verdict.
pub(crate) fn compare_pair(a: &Variant, b: &Variant, metric: Metric, seed: u64) -> Comparison {
    let (xa, xb) = (a.samples(metric), b.samples(metric));
    let (ma, mb) = (stats::median(&xa), stats::median(&xb));
    let ratio = (ma != 0.0).then(|| mb / ma);
    let ci95 = stats::ratio_ci(&xa, &xb, seed).map(|(lo, hi)| [lo, hi]);
    let mw: Option<MannWhitney> = stats::mann_whitney(&xa, &xb);
    let welch = stats::welch_log(&xa, &xb);
    let rank_floor = stats::rank_test_floor(xa.len(), xb.len());
    let rank_decides = stats::rank_test_can_decide(xa.len(), xb.len());
    // The rank test judges where it can; below its reach, Welch's t on log values.
    let (test, p_value, mde) = match welch.filter(|_| !rank_decides) {
        Some(w) => (PTest::WelchLogT, Some(w.p_value), stats::welch_detectable_effect(&w)),
        None => {
            let mde = if rank_decides { stats::min_detectable_effect(&xa, &xb) } else { f64::INFINITY };
            (PTest::MannWhitney, mw.map(|m| m.p_value), mde)
        }
    };
    let excludes_one = ci95.is_none_or(|[lo, hi]| lo > 1.0 || hi < 1.0);
    // Below the rank test's reach, with no Welch test either, its approximate p (ties) decides
    // nothing: the exact test could not go below its floor.
    let decisive = rank_decides || test == PTest::WelchLogT;
    let significant = decisive && p_value.is_some_and(|p| p < stats::ALPHA) && excludes_one && ma != mb;
    let spread = stats::relative_spread(&xa).max(stats::relative_spread(&xb));
    let runs = format!("{} vs {} runs", xa.len(), xb.len());
    let p_text = p_value.map_or("no test".into(), fmt_p);
    // Said beside any verdict the rank test could not have reached.
    let rank_note = (!rank_decides)
        .then(|| format!("the rank test cannot go below p={rank_floor:.3} with {runs}, so {} judges", test.title()));
    let verdict = if significant {
        let up = mb > ma;
        let test_text = match test {
            PTest::MannWhitney => p_text.clone(),
            PTest::WelchLogT => format!("{}, {p_text}", test.title()),
        };
        // The size of the change and its interval, as magnitudes in the change's direction.
        let (size, detail) = match (ratio, ci95) {
            (Some(r), Some([lo, hi])) => {
                let (clo, chi) = if up {
                    ((lo - 1.0) * 100.0, (hi - 1.0) * 100.0)
                } else {
                    ((1.0 - hi) * 100.0, (1.0 - lo) * 100.0)
                };
                (format!("{:.1}% ", (r - 1.0).abs() * 100.0), format!("95% CI {clo:.1}–{chi:.1}%, {test_text}, {runs}"))
            }
            _ => (String::new(), format!("{} against {}, {test_text}, {runs}", fmt_value(mb), fmt_value(ma))),
        };
        match metric {
            Metric::ReceivedGbps | Metric::TransactionsPerSecond => {
                format!("{} is {size}{} than {} ({detail})", b.name, if up { "faster" } else { "slower" }, a.name)
            }
            _ => format!(
                "{} has {size}{} {} than {} ({}; {detail})",
                b.name,
                if up { "more" } else { "less" },
                metric.title(),
                a.name,
                if up == metric.higher_is_better() { "better" } else { "worse" }
            ),
        }
    } else if spread == 0.0 && ma == mb {
        format!(
            "no difference in {}: every run of {} and {} gave {} ({runs})",
            metric.title(),
            a.name,
            b.name,
            fmt_value(ma)
        )
    } else if !mde.is_finite() {
        // No test can reach the level with these runs: say so, not a size it would hide.
        let why = if xa.len() < 2 || xb.len() < 2 {
            "a variant with one run has no spread to judge by".to_string()
        } else {
            format!(
                "the rank test cannot go below p={rank_floor:.3} with them, and {} needs positive values",
                PTest::WelchLogT.title()
            )
        };
        format!(
            "undecided in {} between {} and {} ({p_text}): {runs} cannot show a difference ({why}); run each variant {} times or more",
            metric.title(),
            a.name,
            b.name,
            stats::runs_for_rank_test()
        )
    } else {
        let observed = ratio.map(|r| (r - 1.0).abs());
        let note = rank_note.as_ref().map_or(String::new(), |n| format!("; {n}"));
        match observed.filter(|&o| o >= mde) {
            // The change seen is larger than the runs could hide: not "hidden", unproven.
            Some(o) => format!(
                "no significant difference in {} between {} and {} ({p_text}): {} measured {:.0}% {} than {}, but with a spread of ±{:.0}% that could be chance; more runs would tell ({runs}{note})",
                metric.title(),
                a.name,
                b.name,
                b.name,
                o * 100.0,
                if mb > ma { "higher" } else { "lower" },
                a.name,
                spread * 100.0,
            ),
            _ => format!(
                "no significant difference in {} between {} and {} ({p_text}): the runs' spread (±{:.0}%) hides changes under ~{:.0}% ({runs}{note})",
                metric.title(),
                a.name,
                b.name,
                spread * 100.0,
                (mde * 100.0).ceil()
            ),
        }
    };
    Comparison {
        a: a.name.clone(),
        b: b.name.clone(),
        metric,
        n_a: xa.len(),
        n_b: xb.len(),
        median_a: ma,
        median_b: mb,
        ratio,
        ci95,
        p_value,
        test,
        mann_whitney_p: mw.map(|m| m.p_value),
        rank_p_floor: Some(rank_floor),
        welch_p: welch.map(|w| w.p_value),
        significant,
        min_detectable_effect: mde.is_finite().then_some(mde),
        verdict,
    }
}

pub(crate) fn fmt_value(v: f64) -> String {
    fmt_like(v, v)
}

/// `v` with as many decimals as suit `reference`, so a row's figures line up.
pub(crate) fn fmt_like(v: f64, reference: f64) -> String {
    let r = reference.abs();
    let decimals = if r >= 1000.0 || v.fract() == 0.0 && r >= 10.0 {
        0
    } else if r >= 10.0 {
        2
    } else {
        4
    };
    format!("{v:.decimals$}")
}

/// The comparison of an experiment's variants, the first plan variant as the baseline.
pub fn compare_experiment(result: &ExperimentResult, seed: u64) -> Result<CompareReport> {
    let variants = result
        .variants
        .iter()
        .map(|v| Variant {
            name: v.name.clone(),
            sources: vec!["experiment".into()],
            runs: v.runs.iter().map(RunFigures::of_record).collect(),
        })
        .collect();
    compare(variants, None, seed)
}

impl CompareReport {
    /// The verdict lines on the primary metric, one per pair.
    pub fn verdicts(&self) -> Vec<&Comparison> {
        self.comparisons.iter().filter(|c| c.metric == self.primary).collect()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::analysis::stats::normal_samples;
    use crate::base::stop::StopToken;
    use crate::metrics::document::{RunRecord, StreamDocument};
    use crate::sys::probe::KernelCaps;

    /// A real `send -J` document (the release before the typed model wrote it) with a
    /// complete run at `gbps` received and 1/`gbps` CPU-s/GB.
    pub(crate) fn stream_doc(gbps: f64) -> Value {
        let mut d: StreamDocument =
            serde_json::from_str(include_str!("../../tests/fixtures/53b0d44/stream-tcp.json")).unwrap();
        d.complete = true;
        d.error = None;
        d.sum.receiver.as_mut().unwrap().bits_per_second = gbps * 1e9;
        d.cpu.receiver_per_byte.as_mut().unwrap().cpu_seconds_per_gb = 1.0 / gbps;
        d.tcp.sender.retransmitted_segments = 0;
        serde_json::to_value(d).unwrap()
    }

    fn stream_record(gbps: f64) -> RunRecord {
        RunRecord::Stream(Box::new(serde_json::from_value(stream_doc(gbps)).unwrap()))
    }

    pub(crate) fn variant(name: &str, gbps: &[f64]) -> Variant {
        let runs = gbps.iter().map(|&g| figures_of_value(&stream_doc(g)).unwrap()).collect();
        Variant { name: name.into(), sources: vec![], runs }
    }

    #[test]
    fn equal_distributions_are_not_significant_in_19_of_20_seeds() {
        let mut significant = 0;
        for seed in 0..20u64 {
            let a = variant("a", &normal_samples(10, 20.0, 2.0, 100 + seed));
            let b = variant("b", &normal_samples(10, 20.0, 2.0, 200 + seed));
            let c = compare_pair(&a, &b, Metric::ReceivedGbps, seed);
            if c.significant {
                significant += 1;
            } else {
                assert!(c.verdict.starts_with("no significant difference"), "{}", c.verdict);
                assert!(c.verdict.contains("hides changes under ~"), "{}", c.verdict);
            }
        }
        assert!(significant <= 1, "{significant} of 20 equal pairs called significant");
    }

    #[test]
    fn a_twenty_percent_shift_is_found_with_its_sign_and_size() {
        for seed in 0..5u64 {
            let a = variant("base", &normal_samples(10, 20.0, 1.0, 300 + seed));
            let b = variant("tuned", &normal_samples(10, 24.0, 1.2, 400 + seed));
            let c = compare_pair(&a, &b, Metric::ReceivedGbps, seed);
            let [lo, hi] = c.ci95.unwrap();
            assert!(c.significant && c.p_value.unwrap() < 0.01, "{c:?}");
            assert!(lo < 1.2 && 1.2 < hi, "CI {lo}-{hi} covers +20%");
            assert!(c.verdict.starts_with("tuned is ") && c.verdict.contains("% faster than base"), "{}", c.verdict);
            let down = compare_pair(&b, &a, Metric::ReceivedGbps, seed);
            assert!(down.significant && down.verdict.contains("slower"), "{}", down.verdict);
            // CPU per GB fell: less is better.
            let cpu = compare_pair(&a, &b, Metric::CpuSecondsPerGb, seed);
            assert!(cpu.verdict.contains("less CPU-s/GB") && cpu.verdict.contains("(better;"), "{}", cpu.verdict);
        }
    }

    #[test]
    fn three_runs_apart_are_a_difference_and_say_how_it_was_judged() {
        // The case: no overlap, x2.5 apart, 3 against 3.
        let a = variant("base", &[12.0, 12.2, 12.3]);
        let b = variant("tuned", &[29.7, 30.4, 30.5]);
        let c = compare_pair(&a, &b, Metric::ReceivedGbps, 1);
        assert!(c.significant, "{c:?}");
        assert_eq!(c.test, PTest::WelchLogT);
        assert!((c.mann_whitney_p.unwrap() - 0.1).abs() < 1e-12 && (c.rank_p_floor.unwrap() - 0.1).abs() < 1e-12);
        assert!(c.verdict.starts_with("tuned is ") && c.verdict.contains("faster than base"), "{}", c.verdict);
        assert!(c.verdict.contains("Welch's t on log values, p<0.001, 3 vs 3 runs"), "{}", c.verdict);
        // 4 runs a side: the rank test can decide (2/70), and does.
        let a = variant("base", &[12.0, 12.2, 12.3, 12.1]);
        let b = variant("tuned", &[29.7, 30.4, 30.5, 30.0]);
        let c = compare_pair(&a, &b, Metric::ReceivedGbps, 1);
        assert!(c.significant && c.test == PTest::MannWhitney && c.p_value.unwrap() < 0.05, "{c:?}");
    }

    #[test]
    fn five_against_five_of_one_distribution_are_rarely_a_difference() {
        let mut significant = 0;
        for seed in 0..200u64 {
            let a = variant("a", &normal_samples(5, 20.0, 1.0, 1000 + seed));
            let b = variant("b", &normal_samples(5, 20.0, 1.0, 2000 + seed));
            significant += usize::from(compare_pair(&a, &b, Metric::ReceivedGbps, seed).significant);
        }
        // The exact rank test at 5 a side rejects in 3.2% of equal draws (p <= 0.032).
        assert!(significant <= 12, "{significant} of 200 equal 5 vs 5 pairs called significant");
        // An experiment's default runs let the rank test decide.
        use crate::workload::experiment::{Plan, DEFAULT_RUNS};
        assert!(DEFAULT_RUNS as usize >= stats::runs_for_rank_test());
        let plan = Plan::parse("[test]\ntarget = \"x\"\n[[variant]]\nname = \"a\"\n[[variant]]\nname = \"b\"").unwrap();
        assert_eq!(plan.runs, DEFAULT_RUNS);
    }

    #[test]
    fn no_verdict_claims_to_hide_a_change_the_data_show() {
        // Overlapping 3 against 3 with a 15% gap in medians but a wide spread: not significant,
        // and the sentence must not say changes under X% are hidden with X below 15%.
        for (xa, xb) in [
            (vec![10.0, 14.0, 11.0], vec![12.0, 16.0, 12.6]),
            (vec![20.0, 20.4, 19.8, 20.1, 20.2], vec![20.3, 19.9, 20.0, 20.5, 20.1]),
            (vec![10.0, 9.0, 12.0, 10.5, 11.0], vec![11.5, 12.5, 10.0, 13.0, 12.0]),
        ] {
            let (a, b) = (variant("a", &xa), variant("b", &xb));
            let c = compare_pair(&a, &b, Metric::ReceivedGbps, 3);
            let seen = (c.ratio.unwrap() - 1.0).abs();
            if let Some(at) = c.verdict.find("hides changes under ~") {
                let rest = &c.verdict[at + "hides changes under ~".len()..];
                let x: f64 = rest[..rest.find('%').unwrap()].parse().unwrap();
                assert!(x / 100.0 > seen, "{}: claims to hide < {x}% but {:.1}% was seen", c.verdict, seen * 100.0);
            }
            assert!(!c.significant || c.p_value.unwrap() < 0.05);
        }
        // Retransmits of 0 cannot go through logs: 3 against 3 has no test that can decide.
        let a = variant("a", &[10.0, 10.5, 11.0]);
        let b = variant("b", &[10.2, 10.1, 10.4]);
        let c = compare_pair(&a, &b, Metric::Retransmits, 3);
        assert!(c.verdict.starts_with("no difference in retransmits: every run"), "{}", c.verdict);
        let one = variant("one", &[10.0]);
        let c = compare_pair(&one, &b, Metric::ReceivedGbps, 3);
        assert!(c.verdict.starts_with("undecided") && c.min_detectable_effect.is_none(), "{}", c.verdict);
        // Tied zeros against tied fives, 3 a side: the tie-corrected approximation gives
        // p = 0.047, but the exact test cannot go below 0.1: not called a difference.
        let zeros = Variant {
            runs: (0..3)
                .map(|_| RunFigures { complete: true, retransmits: Some(0), ..RunFigures::default() })
                .collect(),
            ..variant("z", &[])
        };
        let fives = Variant {
            runs: (0..3)
                .map(|_| RunFigures { complete: true, retransmits: Some(5), ..RunFigures::default() })
                .collect(),
            ..variant("f", &[])
        };
        let c = compare_pair(&zeros, &fives, Metric::Retransmits, 3);
        assert!(c.mann_whitney_p.unwrap() < 0.05 && !c.significant, "{c:?}");
        assert!(c.verdict.starts_with("undecided in retransmits"), "{}", c.verdict);
    }

    #[test]
    fn runs_interleave_apply_and_revert_around_each_run() {
        use crate::sys::settings::{register, Journal};
        use crate::workload::experiment::{run, tests::PLAN, Plan};
        let dir = std::env::temp_dir().join(format!("ub-exp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mark = dir.join("mark");
        let state = dir.join("exp.state");
        let _ = std::fs::remove_file(&state);
        let plan = Plan::parse(&PLAN.replace("$UB_MARK", mark.to_str().unwrap())).unwrap();
        let journal = register(Journal::create(&state, "test").unwrap());
        let mut seen = Vec::new();
        let result = run(
            &plan,
            KernelCaps::detect().unwrap(),
            &journal,
            &StopToken::new(),
            |opts| {
                // The command variant's mark exists exactly while its runs are made.
                let marked = mark.exists();
                assert_eq!(marked, opts.spec.variant.is_some());
                seen.push(marked);
                let gbps = if marked { 12.0 } else { 10.0 } + seen.len() as f64 * 0.01;
                Ok(stream_record(gbps))
            },
            |_| {},
        )
        .unwrap();
        assert_eq!(seen.len(), 2 * 4 * 2, "a warm-up and a measured run per variant and block");
        assert!(!mark.exists() && !state.exists(), "reverted after the last run");
        assert_eq!(result.variants[0].runs.len(), 4);
        assert_eq!(result.orders.len(), 4);
        let c = compare_experiment(&result, 1).unwrap();
        let v = &c.verdicts()[0];
        assert!(v.significant && v.verdict.starts_with("marked is "), "{}", v.verdict);
        let doc = crate::analysis::document::experiment_document(&result, Some(&c));
        assert_eq!(doc.variants[1].applied[0].split(' ').next(), Some("command"));
        assert!(!doc.compare.unwrap().comparisons.is_empty());
        // The first run failing ends it, reverted.
        let journal = register(Journal::create(&state, "test").unwrap());
        let e = run(
            &plan,
            KernelCaps::detect().unwrap(),
            &journal,
            &StopToken::new(),
            |_| Err(Error::peer("refused: no such variant")),
            |_| {},
        )
        .unwrap_err();
        assert!(e.message.contains("refused"), "{e}");
        assert!(!mark.exists() && !state.exists());
        // A stop during the third run ends the experiment after it, reverted, with the runs so far.
        let journal = register(Journal::create(&state, "test").unwrap());
        let stop = StopToken::new();
        let mut runs = 0;
        let result = run(
            &plan,
            KernelCaps::detect().unwrap(),
            &journal,
            &stop,
            |_| {
                runs += 1;
                if runs == 3 {
                    stop.stop("SIGINT");
                }
                Ok(stream_record(1.0))
            },
            |_| {},
        )
        .unwrap();
        assert_eq!(runs, 3, "no run after the stop");
        let kept: usize = result.variants.iter().map(|v| v.runs.len()).sum();
        assert_eq!(kept, 1, "a warm-up and a measured run, then the warm-up that saw the stop: {kept}");
        assert!(!mark.exists() && !state.exists(), "reverted after the stop");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
