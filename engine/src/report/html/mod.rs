//! `report FILE.json... --html OUT.html`: one self-contained HTML page per saved result (a run,
//! several runs, an rr or crr run, a sweep, a comparison, an experiment, a fleet run). Inline CSS and SVG only: no script, no font, no fetch, so the page
//! works from `file://`, prints, and reads on a phone (the charts scale to the width).
//!
//! The page is drawn from the typed documents, the same figures the JSON holds; every figure
//! has a footnote that says what it measures and where (receiver-counted bytes, the sender's
//! TCP_INFO, /proc/stat), as docs/output.md does.

mod compare;
mod cpu;
mod fleet;
mod http;
mod run;
mod search;
mod sweep;
mod transactions;

use crate::base::error::{Error, Result};
use crate::report::chart::escape;
use crate::report::saved::SavedResults;
use std::fmt::Write as _;

/// The stylesheet: readable on screen, on a phone (charts scale to the width) and printed.
const STYLE: &str = "
body{font:15px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;color:#111;max-width:960px;margin:0 auto;padding:12px}
h1{font-size:1.4em;margin:.2em 0}h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ccc}
.headline{font-size:2.2em;font-weight:600;margin:.1em 0}
.verdict{padding:.4em .7em;background:#f3f3f3;border-left:4px solid #0072b2}
.bad{color:#b00}.ok{color:#060}
figure{margin:1em 0;break-inside:avoid}figure svg{max-width:100%;height:auto;display:block}svg.plot{width:100%}
figcaption{font-size:.85em;color:#444}
table{border-collapse:collapse;margin:.5em 0;font-size:.9em}td,th{border:1px solid #ccc;padding:2px 6px;text-align:left;vertical-align:top}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.bar{display:inline-block;height:.8em;background:#0072b2;vertical-align:middle}
.scroll{overflow-x:auto}
@media print{body{max-width:none;font-size:11pt}h2{break-after:avoid}a{color:inherit}}
";

/// Most series (queues, CPUs) drawn as lines of their own; beyond, their min/median/max band.
pub(crate) const MAX_LINES: usize = 16;

/// A page: its title and the body's HTML.
pub(crate) struct Page {
    pub(crate) title: String,
    pub(crate) body: String,
}

impl Page {
    /// The whole document.
    fn html(&self) -> String {
        format!(
            "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<meta name=\"generator\" content=\"uringbench {}\">\n<title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n{}</body>\n</html>\n",
            env!("CARGO_PKG_VERSION"),
            escape(&self.title),
            self.body
        )
    }
}

/// Whether intervals can draw a chart over time: a line needs two points. A run saved without
/// intervals (or with one, its whole window, as runs without `-i` were) says so instead of
/// drawing an empty frame with one dot; its window's figures are in the tables.
pub(crate) fn over_time(intervals: usize) -> bool {
    intervals >= 2
}

/// What a page says in place of the charts over time when [`over_time`] is false.
pub(crate) fn no_over_time(out: &mut String, intervals: usize) {
    let _ = writeln!(
        out,
        "<p class=\"no-over-time\">{} in this document (saved before intervals were the default, or with <code>-i 0</code>): \
         the charts over time need at least two; the window's figures are below.</p>",
        if intervals == 0 { "No intervals" } else { "One interval, the whole window," }
    );
}

/// One figure: the SVG and its footnote.
pub(crate) fn figure(out: &mut String, id: &str, svg: &str, note: &str) {
    let _ =
        writeln!(out, "<figure id=\"fig-{}\">\n{svg}<figcaption>{}</figcaption>\n</figure>", escape(id), escape(note));
}

/// The verdict with its evidence; `prefix` keeps the element id unique on the page.
pub(crate) fn verdict(out: &mut String, v: &crate::metrics::verdict::Verdict, prefix: &str) {
    let _ = writeln!(
        out,
        "<p class=\"verdict\" id=\"{prefix}verdict\">verdict: <strong>{}</strong> — {}</p>",
        escape(&v.bottleneck.to_string()),
        escape(&v.evidence)
    );
}

/// The program and schema that wrote the document, at the page's foot.
pub(crate) fn tool_line(out: &mut String, tool: &crate::metrics::document::Tool, schema_version: u32) {
    let _ = writeln!(out, "<p class=\"tool\">uringbench {} · schema {schema_version}</p>", escape(&tool.version));
}

/// A two-column table of facts.
pub(crate) fn facts_table(out: &mut String, id: &str, rows: &[(String, String)]) {
    let _ = writeln!(out, "<table id=\"{}\">", escape(id));
    for (k, v) in rows {
        let _ = writeln!(out, "<tr><th>{}</th><td>{}</td></tr>", escape(k), escape(v));
    }
    let _ = writeln!(out, "</table>");
}

/// Rows `key: value` for every scalar in a JSON value, nested keys joined with dots and arrays
/// of scalars joined with commas; nulls left out (settings that were not set).
pub(crate) fn flatten(prefix: &str, v: &serde_json::Value, rows: &mut Vec<(String, String)>) {
    use serde_json::Value;
    let key = |k: &str| if prefix.is_empty() { k.to_owned() } else { format!("{prefix}.{k}") };
    match v {
        Value::Null => {}
        Value::Object(m) => m.iter().for_each(|(k, v)| flatten(&key(k), v, rows)),
        Value::Array(a) if a.iter().all(|x| !x.is_object() && !x.is_array()) => {
            if !a.is_empty() {
                rows.push((prefix.to_owned(), a.iter().map(scalar).collect::<Vec<_>>().join(", ")));
            }
        }
        Value::Array(a) => a.iter().enumerate().for_each(|(i, v)| flatten(&format!("{prefix}[{i}]"), v, rows)),
        other => rows.push((prefix.to_owned(), scalar(other))),
    }
}

fn scalar(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The page for saved documents, each with the name it is shown under (its file name): one
/// run, several runs (overlaid, with a table and each file's median: a file is a variant, so
/// runs of two files are not pooled), a `--repeat` document (its runs and their median), or
/// one sweep, comparison or experiment.
pub fn render(saved: &[(String, SavedResults)]) -> Result<String> {
    let page = match saved {
        [] => return Err(Error::usage("give at least one saved document")),
        [(_, SavedResults::Sweep(s))] => sweep::page(s),
        [(_, SavedResults::Send(doc))] => run::page(doc),
        [(_, SavedResults::Transactions(doc))] => transactions::page(doc),
        [(_, SavedResults::Compare(doc))] => compare::compare_page(doc),
        [(_, SavedResults::Search(doc))] => search::page(doc),
        [(_, SavedResults::Http(doc))] => http::page(doc),
        [(_, SavedResults::Fleet(report))] => fleet::fleet_page(report),
        [(_, one @ SavedResults::Experiment(doc))] => compare::experiment_page(one, doc)?,
        [(name, SavedResults::Repeat(runs))] => run::runs_page(&[run::RunFile {
            file: name.clone(),
            runs: runs.iter().enumerate().map(|(i, d)| (format!("{name} run {}", i + 1), d)).collect(),
        }]),
        many => {
            let mut files = Vec::new();
            for (name, s) in many {
                match s {
                    SavedResults::Send(doc) => {
                        files.push(run::RunFile { file: name.clone(), runs: vec![(name.clone(), doc.as_ref())] })
                    }
                    SavedResults::Repeat(runs) => files.push(run::RunFile {
                        file: name.clone(),
                        runs: runs.iter().enumerate().map(|(i, d)| (format!("{name} run {}", i + 1), d)).collect(),
                    }),
                    SavedResults::Sweep(_)
                    | SavedResults::Compare(_)
                    | SavedResults::Experiment(_)
                    | SavedResults::Transactions(_)
                    | SavedResults::Search(_)
                    | SavedResults::Http(_)
                    | SavedResults::Fleet(_) => {
                        return Err(Error::usage(format!(
                            "{name}: an rr, crr or http run, a search, a sweep, a comparison, an experiment or a fleet goes on a page of its own (give it alone)"
                        )))
                    }
                }
            }
            run::runs_page(&files)
        }
    };
    Ok(page.html())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> (String, SavedResults) {
        let path = format!("{}/tests/fixtures/53b0d44/{name}.json", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).unwrap();
        (name.to_owned(), SavedResults::parse(&text).unwrap())
    }

    #[test]
    fn run_page_has_headline_queues_and_footnotes() {
        let saved = [fixture("stream-tcp")];
        let SavedResults::Send(doc) = &saved[0].1 else { panic!("a stream document") };
        let html = render(&saved).unwrap();
        let bps = doc.sum.receiver.as_ref().unwrap().bits_per_second;
        assert!(html.contains(&format!("data-bits-per-second=\"{bps}\"")), "headline carries the receiver's rate");
        let queues = doc.intervals[0].queues.len();
        assert_eq!(html.matches("data-key=\"queue-").count(), queues);
        assert!(html.contains("(exact match)") && html.contains("throughput (Gbit/s)"));
        assert_eq!(html.matches("<figure").count(), html.matches("<figcaption>").count());
        assert!(!html.contains("<script") && !html.contains("src=") && !html.contains("https://"), "nothing fetched");
    }

    #[test]
    fn many_queues_draw_a_band() {
        let (name, saved) = fixture("stream-tcp");
        let SavedResults::Send(mut doc) = saved else { panic!("a stream document") };
        for iv in &mut doc.intervals {
            iv.queues = (0..40).map(|q| q * 1000).collect();
        }
        let html = render(&[(name, SavedResults::Send(doc))]).unwrap();
        assert_eq!(html.matches("data-key=\"queue-").count(), 0);
        assert!(html.contains("class=\"band\" data-series=\"40\""));
    }

    #[test]
    fn cpu_over_time_per_side_and_per_core() {
        use crate::metrics::document::BySide;
        use crate::metrics::figures::{CpuShare, IntervalCpu};
        let (name, saved) = fixture("stream-tcp");
        let SavedResults::Send(mut doc) = saved else { panic!("a stream document") };
        let html = render(&[(name.clone(), SavedResults::Send(doc.clone()))]).unwrap();
        assert!(!html.contains("fig-cpu-sides"), "no CPU chart from a document without interval CPU");
        let cpu = |cores: usize| IntervalCpu {
            host: (0..cores).map(|c| CpuShare { cpu: c, utilization: 0.5, softirq: 0.1 }).collect(),
            threads: 0.9,
        };
        for iv in &mut doc.intervals {
            iv.cpu = Some(BySide { sender: Some(cpu(2)), receiver: Some(cpu(40)) });
        }
        let n = doc.intervals.len();
        let html = render(&[(name, SavedResults::Send(doc))]).unwrap();
        for key in ["sender-host", "sender-threads", "receiver-host", "receiver-threads"] {
            assert!(html.contains(&format!("data-key=\"{key}\" ")), "{key}");
        }
        assert!(
            html.contains(&format!("data-key=\"sender-host\" data-name=\"sender host, all CPUs\" data-points=\"{n}\""))
        );
        assert_eq!(html.matches("data-key=\"sender-cpu-").count(), 2, "a line per sender CPU");
        assert_eq!(html.matches("data-key=\"receiver-cpu-").count(), 0, "40 CPUs: a band");
        assert!(html.contains("class=\"band\" data-series=\"40\""));
    }

    /// Every figure has its footnote, and nothing is fetched.
    fn footnoted(html: &str) {
        assert_eq!(html.matches("<figure").count(), html.matches("<figcaption>").count());
        assert!(!html.contains("<figcaption></figcaption>"), "an empty footnote");
        assert!(!html.contains("<script") && !html.contains("src=") && !html.contains("https://"), "nothing fetched");
    }

    #[test]
    fn search_http_and_fleet_pages() {
        let saved = [fixture("search")];
        let SavedResults::Search(doc) = &saved[0].1 else { panic!("a search document") };
        let html = render(&saved).unwrap();
        footnoted(&html);
        let rate = doc.result.rate_bps.unwrap();
        assert!(html.contains(&format!("id=\"headline\" data-bits-per-second=\"{rate}\"")), "the rate found");
        let passed = doc.result.steps.iter().filter(|t| t.passed).count();
        let failed = doc.result.steps.len() - passed;
        assert!(html.contains(&format!("data-key=\"passed\" data-name=\"passed\" data-points=\"{passed}\"")));
        assert!(html.contains(&format!("data-key=\"failed\" data-name=\"failed\" data-points=\"{failed}\"")));
        assert_eq!(html.matches("class=\"trial\"").count(), doc.result.steps.len(), "a row per trial");

        let saved = [fixture("http")];
        let SavedResults::Http(doc) = &saved[0].1 else { panic!("an http document") };
        let html = render(&saved).unwrap();
        footnoted(&html);
        let tps = doc.report.transactions_per_second;
        assert!(html.contains(&format!("data-transactions-per-second=\"{tps}\"")));
        assert!(html.contains("fig-latency") && html.contains("status 200"));

        let saved = [fixture("fleet")];
        let SavedResults::Fleet(report) = &saved[0].1 else { panic!("a fleet document") };
        let html = render(&saved).unwrap();
        footnoted(&html);
        assert_eq!(html.matches("class=\"failed-run\"").count(), report.failed().len());
        assert!(html.contains("fig-heatmap"));
        let e = render(&[fixture("stream-tcp"), fixture("search")]).unwrap_err();
        assert!(e.message.contains("page of its own"), "{e}");
    }

    #[test]
    fn several_runs_and_a_sweep() {
        let html = render(&[fixture("stream-tcp"), fixture("stream-udp")]).unwrap();
        // stream-udp was saved with one interval, its window: no line of one dot for it.
        assert_eq!(html.matches("data-key=\"run-").count(), 1);
        // Two files are two variants: each its own row, no median pooled over them.
        assert!(!html.contains("class=\"medians\"") && html.contains("id=\"variants-note\""));
        assert!(html.contains("uringbench compare stream-tcp stream-udp"));
        let repeat = fixture("repeat");
        let SavedResults::Repeat(runs) = &repeat.1 else { panic!("a repeat document") };
        let one = render(std::slice::from_ref(&repeat)).unwrap();
        assert!(one.contains("id=\"medians\"") && !one.contains("variants-note"), "one file's runs: their median");
        let two = render(&[repeat.clone(), ("again".into(), repeat.1.clone())]).unwrap();
        assert_eq!(two.matches("class=\"medians\"").count(), 2, "a median per file");
        assert!(two.contains("median (min–max) of again&apos;s ") && runs.len() > 1, "named by its file");
        for (kind, id) in [("compare", "fig-compare"), ("experiment", "fig-experiment")] {
            let page = render(&[fixture(kind)]).unwrap();
            assert!(page.contains(id) && page.contains("id=\"comparisons\""), "{kind}");
        }
        let rr = render(&[fixture("rr")]).unwrap();
        assert!(rr.contains("data-transactions-per-second") && rr.contains("id=\"latency\""));
        let sweep = render(&[fixture("sweep")]).unwrap();
        assert!(sweep.contains("fig-sweep") && !sweep.contains("<?xml"));
        let e = render(&[fixture("sweep"), fixture("stream-tcp")]).unwrap_err();
        assert!(e.message.contains("page of its own"), "{e}");
    }
}
