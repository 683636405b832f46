//! How a comparison is shown: the text table and verdicts, and the per-variant chart.

use crate::analysis::compare::{fmt_like, fmt_p, fmt_value, CompareReport, PTest};
use crate::analysis::document::CompareDocument;
use crate::analysis::stats;
use crate::report::chart::{Axis, Chart, Point, Series};
use std::fmt::Write as _;

impl CompareReport {
    /// Per-variant summaries of every metric, each pair's ratio and test, and the verdicts.
    pub fn render_text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "compare: {} variants against {}; 95% intervals from {} bootstrap resamples (seed {}), p from Mann-Whitney U, or from Welch's t on log values where the rank test cannot reach p<0.05 (fewer than {} runs a side)",
            self.variants.len(),
            self.variants[0].name,
            stats::BOOTSTRAP_ROUNDS,
            self.seed,
            stats::runs_for_rank_test()
        );
        let width = self.variants.iter().map(|v| v.name.len()).max().unwrap_or(4).max(8);
        for (mi, m) in self.metrics.iter().enumerate() {
            let _ = writeln!(out, "\n{}", m.title());
            for (vi, v) in self.variants.iter().enumerate() {
                if let Some(s) = &self.summaries[vi][mi] {
                    let _ = writeln!(
                        out,
                        "  {:<width$}  {:>3} runs  median {:>10}  [{} - {}]  95% CI {} - {}",
                        v.name,
                        s.n,
                        fmt_value(s.median),
                        fmt_like(s.min, s.median),
                        fmt_like(s.max, s.median),
                        fmt_like(s.ci95[0], s.median),
                        fmt_like(s.ci95[1], s.median)
                    );
                }
            }
            for c in self.comparisons.iter().filter(|c| c.metric == *m) {
                let ratio = c.ratio.map_or("ratio n/a (median 0)".into(), |r| format!("ratio {r:.3}"));
                let ci = c.ci95.map_or(String::new(), |[lo, hi]| format!("  95% CI {lo:.3} - {hi:.3}"));
                let p = match (c.test, c.p_value) {
                    (_, None) => "no test".to_string(),
                    (PTest::MannWhitney, Some(p)) => fmt_p(p),
                    (PTest::WelchLogT, Some(p)) => format!("{} (Welch, log)", fmt_p(p)),
                };
                // Where the rank test could not decide, its p and its floor, beside Welch's.
                let rank = match (c.test, c.mann_whitney_p, c.rank_p_floor) {
                    (PTest::WelchLogT, Some(mw), Some(floor)) => {
                        format!("  rank test {} (cannot go below {floor:.3})", fmt_p(mw))
                    }
                    _ => String::new(),
                };
                let _ = writeln!(
                    out,
                    "  {} vs {}: {ratio}{ci}  {p}  {}{rank}",
                    c.b,
                    c.a,
                    if c.significant { "significant" } else { "not significant" }
                );
            }
        }
        let _ = writeln!(out, "\nverdict ({}):", self.primary.title());
        for c in self.verdicts() {
            let _ = writeln!(out, "  {}", c.verdict);
        }
        out
    }

    /// Per-variant distributions of the primary metric: every run as a dot, the median with its
    /// 95% interval, and the min–max.
    pub fn chart(&self) -> Chart {
        let samples: Vec<Vec<f64>> = self.variants.iter().map(|v| v.samples(self.primary)).collect();
        document_chart(&self.to_document(), Some(&samples))
    }
}

/// A saved comparison's chart of its primary metric: per variant the median with its 95%
/// interval and the min–max, and every run as a dot where the runs are known (`samples`, per
/// variant: an experiment's document has them, a compare document only their statistics).
pub fn document_chart(doc: &CompareDocument, samples: Option<&[Vec<f64>]>) -> Chart {
    let metric = doc.primary_metric;
    let mut runs = Vec::new();
    let mut medians = Vec::new();
    let mut ranges = Vec::new();
    for (x, v) in doc.variants.iter().enumerate() {
        if let Some(values) = samples.and_then(|s| s.get(x)) {
            runs.extend(values.iter().map(|&y| Point { x, y, min: None, max: None }));
        }
        if let Some(Some(s)) = v.metrics.get(metric.key()) {
            medians.push(Point { x, y: s.median, min: Some(s.ci95[0]), max: Some(s.ci95[1]) });
            ranges.push(Point { x, y: s.median, min: Some(s.min), max: Some(s.max) });
        }
    }
    let mut series = Vec::new();
    if samples.is_some() {
        series.push(Series { key: "runs".into(), name: "runs".into(), axis: Axis::Left, points: runs });
    }
    series.push(Series { key: "median_ci95".into(), name: "median, 95% CI".into(), axis: Axis::Left, points: medians });
    series.push(Series { key: "min_max".into(), name: "min-max".into(), axis: Axis::Left, points: ranges });
    Chart {
        title: format!("uringbench compare: {} per variant", metric.title()),
        x_label: "variant".into(),
        categories: doc.variants.iter().map(|v| v.name.clone()).collect(),
        left_label: metric.title().into(),
        right_label: None,
        series,
    }
}

#[cfg(test)]
mod tests {
    use crate::analysis::compare::tests::variant;
    use crate::analysis::compare::{compare, Metric};

    #[test]
    fn report_is_reproducible_and_renders() {
        let vs = || vec![variant("a", &[10.0, 11.0, 10.5, 9.8]), variant("b", &[12.0, 12.5, 11.9, 12.2])];
        let r1 = compare(vs(), None, 42).unwrap();
        let r2 = compare(vs(), None, 42).unwrap();
        let json = |r: &crate::analysis::compare::CompareReport| serde_json::to_value(r.to_document()).unwrap();
        assert_eq!(json(&r1), json(&r2), "seeded: the same input gives the same document");
        assert_eq!(r1.metrics, vec![Metric::ReceivedGbps, Metric::CpuSecondsPerGb, Metric::Retransmits]);
        let doc = json(&r1);
        let c = &doc["comparisons"][0];
        assert_eq!(
            (c["a"].as_str(), c["b"].as_str(), c["metric"].as_str()),
            (Some("a"), Some("b"), Some("received_gbps"))
        );
        assert!(c["ratio"].as_f64().unwrap() > 1.1 && c["ci95"].as_array().unwrap().len() == 2);
        assert!(c["p_value"].as_f64().is_some() && c["significant"].is_boolean());
        // All-zero retransmits: no ratio, no difference.
        let r = doc["comparisons"].as_array().unwrap().iter().find(|c| c["metric"] == "retransmits").unwrap();
        assert!(r["ratio"].is_null() && r["significant"] == false, "{r}");
        let text = r1.render_text();
        assert!(text.contains("verdict (received Gbit/s):") && text.contains("b vs a: ratio"), "{text}");
        let svg = r1.chart().to_svg_points();
        assert_eq!(svg.matches(r#"class="point""#).count(), 8 + 2 + 2);
        assert!(!svg.contains("<polyline"));
    }
}
