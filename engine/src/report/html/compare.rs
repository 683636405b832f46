//! The comparison page (`compare -J`) and the experiment page (`experiment -J`): each
//! variant's runs as a strip plot with the median's 95% interval, the ratios with their
//! intervals, the p-values and whether each difference is significant, and (experiment) the
//! settings each variant applied.

use super::{facts_table, figure, flatten, Page};
use crate::analysis::compare::{fmt_p, PTest};
use crate::analysis::document::{CompareDocument, ExperimentDocument};
use crate::report::chart::escape;
use crate::report::compare::document_chart;
use crate::report::saved::SavedResults;
use std::fmt::Write as _;

fn note(doc: &CompareDocument, dots: bool) -> String {
    format!(
        "{}Bars, as the legend names them: the median's 95% interval ({} bootstrap resamples, seed {}) and min to max over complete runs. \
         Figure: {}, from each run's document (the receiver-counted rate, the receiver's CPU per GB from /proc/stat, \
         the sender's TCP_INFO retransmits, or the UDP receiver's loss).",
        if dots { "Each dot: one complete run. " } else { "" },
        doc.bootstrap_rounds,
        doc.seed,
        doc.primary_metric.title()
    )
}

/// The comparisons' table: ratio, its interval, p-value, significant or not, the verdict.
fn comparisons(out: &mut String, doc: &CompareDocument) {
    let _ = writeln!(
        out,
        "<h2>Comparisons (p from Mann-Whitney U, or Welch's t on log values where the rank test cannot reach the level, significant at p &lt; {})</h2>\n<div class=\"scroll\"><table id=\"comparisons\"><tr><th>metric</th><th>variant vs baseline</th><th>medians</th><th>ratio</th><th>95% CI</th><th>p</th><th>significant</th><th>verdict</th></tr>",
        doc.alpha
    );
    for c in &doc.comparisons {
        let _ = writeln!(
            out,
            "<tr class=\"comparison\" data-significant=\"{}\"><td>{}</td><td>{} vs {}</td><td class=\"num\">{:.4} vs {:.4}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"{}\">{}</td><td>{}</td></tr>",
            c.significant,
            escape(c.metric.title()),
            escape(&c.b),
            escape(&c.a),
            c.median_b,
            c.median_a,
            c.ratio.map_or("n/a".into(), |r| format!("{r:.3}")),
            c.ci95.map_or("–".into(), |[lo, hi]| format!("{lo:.3}–{hi:.3}")),
            escape(&c.p_value.map_or("no test".into(), |p| match c.test {
                PTest::MannWhitney => fmt_p(p),
                PTest::WelchLogT => format!("{} (Welch, log)", fmt_p(p)),
            })),
            if c.significant { "ok" } else { "" },
            if c.significant { "yes" } else { "no" },
            escape(&c.verdict)
        );
    }
    let _ = writeln!(out, "</table></div>");
}

pub(super) fn compare_page(doc: &CompareDocument) -> Page {
    let title = format!("comparison of {} variants", doc.variants.len());
    let mut body = format!("<h1>{}</h1>\n", escape(&title));
    let chart = document_chart(doc, None);
    figure(&mut body, "compare", &chart.svg_points_element(), &note(doc, false));
    comparisons(&mut body, doc);
    let _ = writeln!(body, "<h2>Variants</h2>\n<table id=\"variants\"><tr><th>variant</th><th>runs</th><th>complete</th><th>from</th></tr>");
    for v in &doc.variants {
        let _ = writeln!(
            body,
            "<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
            escape(&v.name),
            v.runs,
            v.complete_runs,
            escape(&v.sources.join(", "))
        );
    }
    let _ = writeln!(body, "</table>");
    Page { title, body }
}

pub(super) fn experiment_page(saved: &SavedResults, doc: &ExperimentDocument) -> crate::base::error::Result<Page> {
    let title = format!("experiment against {}", doc.target);
    let chart = saved.chart()?.svg_points_element();
    let mut body = format!("<h1>{}</h1>\n", escape(&title));
    let dots = "Each dot: one complete run. Bars where a comparison was made.";
    match &doc.compare {
        Some(c) => figure(&mut body, "experiment", &chart, &note(c, true)),
        None => figure(&mut body, "experiment", &chart, dots),
    }
    match &doc.compare {
        Some(c) => comparisons(&mut body, c),
        None => {
            let _ = writeln!(body, "<p>No comparison: fewer than two variants had a complete run.</p>");
        }
    }
    let _ = writeln!(body, "<h2>Variants and the settings they applied</h2>\n<div class=\"scroll\"><table id=\"variants\"><tr><th>variant</th><th>runs</th><th>complete</th><th>settings</th><th>applied</th></tr>");
    for v in &doc.variants {
        let complete = v.runs.iter().filter(|r| crate::metrics::run_figures::RunFigures::of_record(r).complete).count();
        let _ = writeln!(
            body,
            "<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{complete}</td><td>{}</td><td>{}</td></tr>",
            escape(&v.name),
            v.runs.len(),
            escape(&v.settings.join("; ")),
            escape(&v.applied.join("; "))
        );
    }
    let _ = writeln!(body, "</table></div>");
    let orders: Vec<String> = doc.block_orders.iter().map(|o| o.join(" → ")).collect();
    let mut rows = vec![
        ("target".to_owned(), doc.target.clone()),
        ("seed".into(), doc.seed.to_string()),
        ("warm-up runs".into(), doc.warmup_runs.to_string()),
        ("block orders".into(), orders.join(" | ")),
    ];
    flatten("test", &serde_json::to_value(&doc.test).unwrap_or_default(), &mut rows);
    let _ = writeln!(body, "<h2>Settings</h2>");
    facts_table(&mut body, "settings", &rows);
    Ok(Page { title, body })
}
