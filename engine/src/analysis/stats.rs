//! Statistics for comparing run samples: the median, a seeded percentile bootstrap of the
//! median and of the ratio of two medians, the Mann–Whitney U test, Welch's t test on log
//! values, and the smallest change a set of runs could have detected.
//!
//! Benchmark runs on shared machines are skewed and occasionally bimodal, so the rank test
//! (no assumption on the shape) judges wherever it can. It cannot with few runs: its smallest
//! two-sided p is 2 ÷ C(nₐ + n_b, nₐ) (0.1 for 3 against 3), so below 4 runs a side nothing it
//! says can reach p < 0.05. There Welch's t on the logarithms of the values judges instead: it
//! assumes independent runs whose logarithms are roughly normal within a variant (a
//! multiplicative spread, as throughput's is), with no common variance. The bootstrap draws
//! from a ChaCha8 stream with a fixed seed: the same documents always give the same intervals.

use crate::metrics::summary::median_sorted;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Bootstrap resamples per interval: enough for stable 2.5/97.5 percentiles (their Monte Carlo
/// error is well under the spread of any real set of runs).
pub(crate) const BOOTSTRAP_ROUNDS: usize = 10_000;
/// Two-sided significance level.
pub(crate) const ALPHA: f64 = 0.05;

/// The median of a non-empty sample (mean of the middle two for an even count).
pub fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    median_sorted(&v)
}

/// The q-quantile (0..=1) of sorted values, linear between order statistics.
fn quantile_sorted(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let pos = q.clamp(0.0, 1.0) * (v.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    v[lo] + (v[hi] - v[lo]) * (pos - lo as f64)
}

/// The median of a resample (with replacement) of `xs`, into `buf`.
fn resampled_median(xs: &[f64], rng: &mut ChaCha8Rng, buf: &mut Vec<f64>) -> f64 {
    buf.clear();
    buf.extend((0..xs.len()).map(|_| xs[rng.random_range(0..xs.len())]));
    buf.sort_by(f64::total_cmp);
    median_sorted(buf)
}

/// 95% percentile-bootstrap interval of the median. A single value gives a point interval.
pub(crate) fn median_ci(xs: &[f64], seed: u64) -> (f64, f64) {
    if xs.len() < 2 {
        let m = median(xs);
        return (m, m);
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut buf = Vec::with_capacity(xs.len());
    let mut meds: Vec<f64> = (0..BOOTSTRAP_ROUNDS).map(|_| resampled_median(xs, &mut rng, &mut buf)).collect();
    meds.sort_by(f64::total_cmp);
    (quantile_sorted(&meds, ALPHA / 2.0), quantile_sorted(&meds, 1.0 - ALPHA / 2.0))
}

/// 95% percentile-bootstrap interval of median(b) ÷ median(a), the two samples resampled
/// independently. `None` when a resampled median of `a` is 0 (the ratio is undefined).
pub(crate) fn ratio_ci(a: &[f64], b: &[f64], seed: u64) -> Option<(f64, f64)> {
    if a.is_empty() || b.is_empty() {
        return None;
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (mut ba, mut bb) = (Vec::with_capacity(a.len()), Vec::with_capacity(b.len()));
    let mut ratios = Vec::with_capacity(BOOTSTRAP_ROUNDS);
    for _ in 0..BOOTSTRAP_ROUNDS {
        let ma = resampled_median(a, &mut rng, &mut ba);
        let mb = resampled_median(b, &mut rng, &mut bb);
        if ma == 0.0 {
            return None;
        }
        ratios.push(mb / ma);
    }
    ratios.sort_by(f64::total_cmp);
    Some((quantile_sorted(&ratios, ALPHA / 2.0), quantile_sorted(&ratios, 1.0 - ALPHA / 2.0)))
}

/// Result of a two-sided Mann–Whitney U test of `b` against `a`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct MannWhitney {
    /// Pairs (x from b, y from a) with x > y, ties counting one half.
    pub u: f64,
    pub p_value: f64,
    /// Whether the p-value is from the exact distribution (small samples without ties) or the
    /// normal approximation with tie and continuity corrections.
    pub exact: bool,
}

/// Largest sample size for the exact distribution; above it the normal approximation is
/// within a fraction of a percent.
const EXACT_MAX: usize = 30;

/// Two-sided Mann–Whitney U test. Needs at least one value on each side.
pub(crate) fn mann_whitney(a: &[f64], b: &[f64]) -> Option<MannWhitney> {
    let (na, nb) = (a.len(), b.len());
    if na == 0 || nb == 0 {
        return None;
    }
    // Midranks over the pooled sample.
    let mut pooled: Vec<(f64, bool)> = a.iter().map(|&x| (x, false)).chain(b.iter().map(|&x| (x, true))).collect();
    pooled.sort_by(|x, y| x.0.total_cmp(&y.0));
    let n = pooled.len();
    let mut rank_sum_b = 0.0;
    let mut tie_term = 0.0;
    let mut i = 0;
    while i < n {
        let mut j = i;
        while j + 1 < n && pooled[j + 1].0 == pooled[i].0 {
            j += 1;
        }
        let t = (j - i + 1) as f64;
        let midrank = (i + j) as f64 / 2.0 + 1.0;
        rank_sum_b += pooled[i..=j].iter().filter(|p| p.1).count() as f64 * midrank;
        tie_term += t * t * t - t;
        i = j + 1;
    }
    let u = rank_sum_b - (nb * (nb + 1)) as f64 / 2.0;
    let mean = (na * nb) as f64 / 2.0;
    if tie_term == 0.0 && na <= EXACT_MAX && nb <= EXACT_MAX {
        let dist = u_distribution(nb, na);
        let total: f64 = dist.iter().sum();
        let k = u.round() as usize;
        let lower: f64 = dist[..=k].iter().sum::<f64>() / total;
        let upper: f64 = dist[k..].iter().sum::<f64>() / total;
        return Some(MannWhitney { u, p_value: (2.0 * lower.min(upper)).min(1.0), exact: true });
    }
    let nf = n as f64;
    let var = (na * nb) as f64 / 12.0 * ((nf + 1.0) - tie_term / (nf * (nf - 1.0)));
    if var <= 0.0 {
        // Every value equal: nothing tells the samples apart.
        return Some(MannWhitney { u, p_value: 1.0, exact: false });
    }
    let z = ((u - mean).abs() - 0.5).max(0.0) / var.sqrt();
    let p = statrs::function::erf::erfc(z / std::f64::consts::SQRT_2);
    Some(MannWhitney { u, p_value: p.min(1.0), exact: false })
}

/// Frequencies of U = 0..=m·n for samples of m and n values without ties: the count of
/// orderings in which the m values beat the n values in exactly U pairs.
fn u_distribution(m: usize, n: usize) -> Vec<f64> {
    // f[i][j] over U, built by where the largest value comes from: from the first sample it
    // beats all j of the second (adds j), from the second it adds nothing.
    let mut prev: Vec<Vec<f64>> = (0..=n).map(|_| vec![1.0]).collect(); // i = 0
    for i in 1..=m {
        let mut cur: Vec<Vec<f64>> = Vec::with_capacity(n + 1);
        cur.push(vec![1.0]);
        for j in 1..=n {
            let mut f = vec![0.0; i * j + 1];
            for (u, c) in prev[j].iter().enumerate() {
                f[u + j] += c;
            }
            for (u, c) in cur[j - 1].iter().enumerate() {
                f[u] += c;
            }
            cur.push(f);
        }
        prev = cur;
    }
    prev.swap_remove(n)
}

/// The smallest two-sided p-value the exact rank test can give for these counts: every value
/// of one side above every value of the other, 2 ÷ C(nₐ + n_b, nₐ) (at most 1).
pub(crate) fn rank_test_floor(na: usize, nb: usize) -> f64 {
    if na == 0 || nb == 0 {
        return 1.0;
    }
    // C(n, k) as a product of ratios: exact enough and never overflows for these counts.
    let (n, k) = (na + nb, na.min(nb));
    let orderings: f64 = (1..=k).map(|i| (n - k + i) as f64 / i as f64).product();
    (2.0 / orderings).min(1.0)
}

/// Whether the rank test can reach the significance level with these counts.
pub(crate) fn rank_test_can_decide(na: usize, nb: usize) -> bool {
    rank_test_floor(na, nb) < ALPHA
}

/// The fewest runs a side (the same on both) at which the rank test can reach the level.
pub(crate) fn runs_for_rank_test() -> usize {
    (2..).find(|&n| rank_test_can_decide(n, n)).unwrap_or(usize::MAX)
}

/// Result of Welch's two-sided t test of log(b) against log(a).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Welch {
    /// mean(log b) − mean(log a): the log of the ratio of geometric means.
    pub log_ratio: f64,
    /// Its standard error, √(s²ₐ/nₐ + s²_b/n_b) over the log values.
    pub std_error: f64,
    /// Welch–Satterthwaite degrees of freedom.
    pub df: f64,
    pub p_value: f64,
}

/// Sample mean and variance (n − 1) of the logarithms of `xs`.
fn log_moments(xs: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    let logs: Vec<f64> = xs.iter().map(|x| x.ln()).collect();
    let mean = logs.iter().sum::<f64>() / n;
    let var = logs.iter().map(|l| (l - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, var)
}

/// Welch's t test on the logarithms of two samples. Needs two values or more a side, every one
/// positive (a rate or a time; counts that can be 0, such as retransmits, have no test here).
/// Both sides without any spread: p is 1 for equal values and 0 for different ones.
pub(crate) fn welch_log(a: &[f64], b: &[f64]) -> Option<Welch> {
    use statrs::distribution::{ContinuousCDF, StudentsT};
    if a.len() < 2 || b.len() < 2 || a.iter().chain(b).any(|x| !(x.is_finite() && *x > 0.0)) {
        return None;
    }
    let ((ma, va), (mb, vb)) = (log_moments(a), log_moments(b));
    let (na, nb) = (a.len() as f64, b.len() as f64);
    let (qa, qb) = (va / na, vb / nb);
    let std_error = (qa + qb).sqrt();
    let log_ratio = mb - ma;
    if std_error == 0.0 {
        let p_value = if log_ratio == 0.0 { 1.0 } else { 0.0 };
        return Some(Welch { log_ratio, std_error, df: na + nb - 2.0, p_value });
    }
    let df = (qa + qb).powi(2) / (qa * qa / (na - 1.0) + qb * qb / (nb - 1.0));
    let t = StudentsT::new(0.0, 1.0, df).ok()?;
    let p_value = (2.0 * t.cdf(-(log_ratio / std_error).abs())).min(1.0);
    Some(Welch { log_ratio, std_error, df, p_value })
}

/// The smallest relative change (0.2 = 20%) Welch's test on log values finds at the 5% level
/// four times in five with this spread and these counts: exp((t₀.₉₇₅ + t₀.₈) × standard
/// error) − 1, the quantiles of Student's t at the test's degrees of freedom.
pub(crate) fn welch_detectable_effect(w: &Welch) -> f64 {
    use statrs::distribution::{ContinuousCDF, StudentsT};
    if w.std_error == 0.0 {
        return 0.0;
    }
    match StudentsT::new(0.0, 1.0, w.df) {
        Ok(t) => ((t.inverse_cdf(1.0 - ALPHA / 2.0) + t.inverse_cdf(0.8)) * w.std_error).exp_m1(),
        Err(_) => f64::INFINITY,
    }
}

/// Relative spread of a sample: its standard deviation over its mean (0 for one value).
pub(crate) fn relative_spread(xs: &[f64]) -> f64 {
    let n = xs.len();
    let mean = xs.iter().sum::<f64>() / n.max(1) as f64;
    if n < 2 || mean == 0.0 {
        return 0.0;
    }
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    (var.sqrt() / mean).abs()
}

/// The smallest relative change (0.2 = 20%) that runs with these spreads and counts would find
/// at the 5% level four times in five: (z₀.₉₇₅ + z₀.₈) × pooled relative spread × √(1/nₐ + 1/n_b).
pub(crate) fn min_detectable_effect(a: &[f64], b: &[f64]) -> f64 {
    const Z: f64 = 1.959_964 + 0.841_621;
    if a.is_empty() || b.is_empty() {
        return f64::INFINITY;
    }
    let (sa, sb) = (relative_spread(a), relative_spread(b));
    let (na, nb) = (a.len() as f64, b.len() as f64);
    let pooled = (((na - 1.0) * sa * sa + (nb - 1.0) * sb * sb) / (na + nb - 2.0).max(1.0)).sqrt();
    Z * pooled * (1.0 / na + 1.0 / nb).sqrt()
}

/// Normally distributed samples for tests: `n` values with this mean and standard deviation,
/// from a seeded stream (Box–Muller).
#[cfg(test)]
pub(crate) fn normal_samples(n: usize, mean: f64, sd: f64, seed: u64) -> Vec<f64> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n)
        .map(|_| {
            let u1: f64 = rng.random_range(f64::MIN_POSITIVE..1.0);
            let u2: f64 = rng.random();
            mean + sd * (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_u_matches_known_tables() {
        // 3 vs 3, complete separation: P(U = 9) = 1/20, two-sided 0.1.
        let mw = mann_whitney(&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0]).unwrap();
        assert!(mw.exact && mw.u == 9.0, "{mw:?}");
        assert!((mw.p_value - 0.1).abs() < 1e-12, "{mw:?}");
        // 5 vs 5 separated: 2/252.
        let mw = mann_whitney(&[1.0, 2.0, 3.0, 4.0, 5.0], &[6.0, 7.0, 8.0, 9.0, 10.0]).unwrap();
        assert!((mw.p_value - 2.0 / 252.0).abs() < 1e-12, "{mw:?}");
        let d = u_distribution(4, 6);
        assert_eq!(d.iter().sum::<f64>(), 210.0, "C(10,4) orderings");
        assert_eq!(d.len(), 25);
        assert_eq!(d, d.iter().rev().copied().collect::<Vec<_>>(), "symmetric");
        // Interleaved samples: no evidence at all.
        let mw = mann_whitney(&[1.0, 3.0, 5.0, 7.0], &[2.0, 4.0, 6.0, 8.0]).unwrap();
        assert!(mw.p_value > 0.5, "{mw:?}");
    }

    #[test]
    fn ties_use_the_corrected_normal_approximation() {
        // By hand: midranks give U_b = 19.5; ties (3, 2, 3) make the variance
        // 25/12 x (11 - 54/90) = 21.667, so z = (7 - 0.5)/4.6547 = 1.3964 and p = 0.1626.
        let mw = mann_whitney(&[1.0, 2.0, 2.0, 3.0, 4.0], &[2.0, 3.0, 4.0, 4.0, 5.0]).unwrap();
        assert!(!mw.exact);
        assert_eq!(mw.u, 19.5);
        assert!((mw.p_value - 0.1626).abs() < 5e-4, "{mw:?}");
        let same = mann_whitney(&[0.0, 0.0], &[0.0, 0.0]).unwrap();
        assert_eq!(same.p_value, 1.0);
    }

    #[test]
    fn bootstrap_is_reproducible_and_covers_the_median() {
        let xs = normal_samples(10, 100.0, 10.0, 7);
        assert_eq!(median_ci(&xs, 1), median_ci(&xs, 1), "same seed, same interval");
        let (lo, hi) = median_ci(&xs, 1);
        let m = median(&xs);
        assert!(lo <= m && m <= hi && hi - lo < 30.0, "{lo} {m} {hi}");
        let (rlo, rhi) = ratio_ci(&xs, &xs.iter().map(|x| x * 1.5).collect::<Vec<_>>(), 3).unwrap();
        assert!(rlo < 1.5 && 1.5 < rhi, "{rlo} {rhi}");
        assert_eq!(ratio_ci(&[0.0, 0.0], &[1.0], 1), None);
        assert_eq!(median_ci(&[4.0], 1), (4.0, 4.0));
    }

    #[test]
    fn the_rank_test_cannot_decide_below_four_runs_a_side() {
        assert!((rank_test_floor(3, 3) - 0.1).abs() < 1e-12, "2/C(6,3) = 2/20");
        assert!((rank_test_floor(5, 5) - 2.0 / 252.0).abs() < 1e-12);
        assert!((rank_test_floor(4, 4) - 2.0 / 70.0).abs() < 1e-12);
        assert!(
            (rank_test_floor(2, 6) - 2.0 / 28.0).abs() < 1e-12 && (rank_test_floor(6, 2) - 2.0 / 28.0).abs() < 1e-12
        );
        assert!(!rank_test_can_decide(3, 3) && !rank_test_can_decide(2, 5) && rank_test_can_decide(4, 4));
        assert!(rank_test_can_decide(2, 10), "2/C(12,2) = 0.030");
        assert_eq!(runs_for_rank_test(), 4);
        // The floor is what the test gives for complete separation.
        let mw = mann_whitney(&[1.0, 2.0, 3.0, 4.0], &[5.0, 6.0, 7.0, 8.0]).unwrap();
        assert!((mw.p_value - rank_test_floor(4, 4)).abs() < 1e-12);
    }

    #[test]
    fn welch_on_logs_matches_a_worked_example() {
        // 3 against 3 without overlap, x2.5 apart: 12.0, 12.2, 12.3 against 29.7, 30.4, 30.5
        // Gbit/s. By hand (natural logs): means 2.49865, 3.40777; variances 1.5826e-4,
        // 2.0999e-4; standard error 0.011079; t = 82.06 at 3.92 degrees of freedom: p = 1.711e-7
        // (the t tail integrated numerically).
        let a = [12.0, 12.2, 12.3];
        let b = [29.7, 30.4, 30.5];
        let w = welch_log(&a, &b).unwrap();
        assert!((w.log_ratio - 0.909_12).abs() < 1e-4, "{w:?}");
        assert!((w.std_error - 0.011_079).abs() < 1e-5, "{w:?}");
        assert!((w.df - 3.92).abs() < 0.01, "{w:?}");
        assert!((w.p_value / 1.711e-7 - 1.0).abs() < 0.01, "{w:?}");
        // Equal-variance textbook case (Welch = Student when n and s match): logs 0,1,2 vs
        // 1,2,3 give t = -1.2247 at 4 df, two-sided p = 0.2879.
        let e = std::f64::consts::E;
        let w = welch_log(&[1.0, e, e * e], &[e, e * e, e * e * e]).unwrap();
        assert!((w.df - 4.0).abs() < 1e-9 && (w.p_value - 0.2879).abs() < 5e-4, "{w:?}");
        // No test without two positive values a side.
        assert_eq!(welch_log(&[1.0], &[2.0, 3.0]), None);
        assert_eq!(welch_log(&[0.0, 1.0], &[2.0, 3.0]), None);
        let same = welch_log(&[5.0, 5.0], &[5.0, 5.0]).unwrap();
        assert_eq!(same.p_value, 1.0);
    }

    #[test]
    fn welch_on_logs_holds_its_level_and_finds_large_changes() {
        // Equal log-normal-ish samples, 5 against 5 and 3 against 3: about 5% called different.
        for n in [3, 5] {
            let mut hits = 0;
            for seed in 0..2000u64 {
                let a = normal_samples(n, 20.0, 1.0, seed);
                let b = normal_samples(n, 20.0, 1.0, 10_000 + seed);
                hits += usize::from(welch_log(&a, &b).unwrap().p_value < ALPHA);
            }
            assert!((40..=140).contains(&hits), "{n} a side: {hits} of 2000 at the 5% level");
        }
        // A 10% shift with 2.5% spread, 3 a side: found in most draws, and the detectable
        // effect for such runs is below 10%.
        let mut found = 0;
        for seed in 0..200u64 {
            let a = normal_samples(3, 20.0, 0.5, seed);
            let b = normal_samples(3, 22.0, 0.55, 500 + seed);
            let w = welch_log(&a, &b).unwrap();
            found += usize::from(w.p_value < ALPHA);
        }
        assert!(found > 100, "{found} of 200");
    }

    #[test]
    fn detectable_effect_grows_with_spread_and_falls_with_runs() {
        let a = normal_samples(10, 100.0, 18.0, 1);
        let b = normal_samples(10, 100.0, 18.0, 2);
        let mde = min_detectable_effect(&a, &b);
        assert!((0.12..0.35).contains(&mde), "{mde}");
        let a40 = normal_samples(40, 100.0, 18.0, 1);
        let b40 = normal_samples(40, 100.0, 18.0, 2);
        let mde40 = min_detectable_effect(&a40, &b40);
        assert!(mde40 < mde / 1.3, "{mde40} vs {mde}");
    }
}
