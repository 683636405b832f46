//! Statistics for comparing run samples: the median, a seeded percentile bootstrap of the
//! median and of the ratio of two medians, the Mann–Whitney U test, and the smallest change a
//! set of runs could have detected.
//!
//! Benchmark runs on shared machines are skewed and occasionally bimodal, so everything here is
//! rank- or resampling-based rather than assuming normal runs. The bootstrap draws from a
//! ChaCha8 stream with a fixed seed: the same documents always give the same intervals.

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
