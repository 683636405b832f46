//! `uringbench report FILE.json`: re-renders saved results: a sweep (`sweep --json`), a
//! `send -J` document, or a `send --repeat N -J` document, as a text summary and a chart.

use crate::analysis::compare::Metric;
use crate::analysis::document::{CompareDocument, ExperimentDocument};
use crate::base::error::{Error, Result};
use crate::base::units::format_bits_per_second;
use crate::metrics::document::{read_document, Kind};
use crate::metrics::document::{RunDocument, StreamDocument, TransactionDocument};
use crate::metrics::run_figures::RunFigures;
use crate::metrics::summary::RunsSummary;
use crate::metrics::summary::Stats;
use crate::report::chart::{Axis, Chart, Point, Series};
use crate::report::fleet::{FleetDocument, FleetReport};
use crate::workload::http::HttpDocument;
use crate::workload::search::SearchDocument;
use crate::workload::sweep::SweepResult;
use serde_json::Value;
use std::fmt::Write as _;

/// A saved document, by kind.
#[derive(Debug, Clone)]
pub enum SavedResults {
    Sweep(Box<SweepResult>),
    /// `send --repeat N -J`: the run documents.
    Repeat(Vec<StreamDocument>),
    /// `send -J`: one test.
    Send(Box<StreamDocument>),
    /// `rr -J`, `crr -J`: one request/response test.
    Transactions(Box<TransactionDocument>),
    /// `compare -J`: the variants' statistics and the comparisons.
    Compare(Box<CompareDocument>),
    /// `experiment -J`: every run of every variant, and their comparison.
    Experiment(Box<ExperimentDocument>),
    /// `search -J`: the trials and the rate found.
    Search(Box<SearchDocument>),
    /// `http -J`: one http run.
    Http(Box<HttpDocument>),
    /// `report --fleet`'s merged `fleet.json`.
    Fleet(Box<FleetReport>),
}

/// Most queues drawn as lines of their own in an interval chart; more would be unreadable.
const MAX_QUEUE_LINES: usize = 8;

impl SavedResults {
    /// Recognises and checks a saved document.
    pub fn parse(text: &str) -> Result<Self> {
        let doc: Value = serde_json::from_str(text).map_err(|e| Error::usage(format!("not JSON: {e}")))?;
        if doc["kind"] == "sweep" {
            return SweepResult::from_json(&doc).map(|s| SavedResults::Sweep(Box::new(s)));
        }
        if doc["kind"] == "compare" {
            return read_document(&doc, Kind::Compare)
                .map(|d| SavedResults::Compare(Box::new(d)))
                .map_err(Error::usage);
        }
        if doc["kind"] == "experiment" {
            let d: ExperimentDocument = read_document(&doc, Kind::Experiment).map_err(Error::usage)?;
            return Ok(SavedResults::Experiment(Box::new(d)));
        }
        if doc["kind"] == "search" {
            return read_document(&doc, Kind::Search).map(|d| SavedResults::Search(Box::new(d))).map_err(Error::usage);
        }
        if doc["kind"] == "http" {
            return read_document(&doc, Kind::Http).map(|d| SavedResults::Http(Box::new(d))).map_err(Error::usage);
        }
        if doc["kind"].is_null() && doc["test"]["workload"] == "http" {
            // Written before documents had a kind.
            return serde::Deserialize::deserialize(&doc)
                .map(|d| SavedResults::Http(Box::new(d)))
                .map_err(|e| Error::usage(format!("malformed http document: {e}")));
        }
        if doc["kind"] == "fleet" {
            let d: FleetDocument = read_document(&doc, Kind::Fleet).map_err(Error::usage)?;
            return Ok(SavedResults::Fleet(Box::new(FleetReport::from(d))));
        }
        let unreadable = |e: String| {
            Error::usage(format!(
                "not a uringbench sweep, send -J, send --repeat -J, rr/crr -J, http -J, search -J, compare -J, experiment -J or fleet.json document: {e}"
            ))
        };
        match RunDocument::from_value(&doc).map_err(unreadable)? {
            RunDocument::Stream(d) => Ok(SavedResults::Send(d)),
            RunDocument::Repeat(r) if !r.runs.is_empty() => Ok(SavedResults::Repeat(r.runs)),
            RunDocument::Repeat(_) => Err(Error::usage("a --repeat document with no runs")),
            RunDocument::Transactions(d) => Ok(SavedResults::Transactions(d)),
        }
    }

    pub fn render_text(&self) -> String {
        match self {
            SavedResults::Sweep(s) => {
                let mut out =
                    format!("sweep of {} against {}, {} run(s) per point\n", s.parameter.key(), s.target, s.repeat);
                out += &s.render_table();
                out
            }
            SavedResults::Repeat(runs) => {
                let figures = run_figures(runs);
                let mut out = format!("{} runs against {}\n", runs.len(), runs[0].target);
                for (i, f) in figures.iter().enumerate() {
                    let _ = writeln!(out, "{}", crate::report::sweep::run_line_plain(i + 1, f));
                }
                let summary = RunsSummary::of(&figures);
                let line = |name: &str, st: Option<Stats>, scale: f64| match st {
                    Some(s) => format!(
                        "{name:<22} min {:.3}  median {:.3}  mean {:.3}  max {:.3}  stdev {:.3}\n",
                        s.min / scale,
                        s.median / scale,
                        s.mean / scale,
                        s.max / scale,
                        s.stdev / scale
                    ),
                    None => format!("{name:<22} no complete run\n"),
                };
                out += &line("received Gbit/s", summary.receiver_bits_per_second, 1e9);
                out += &line("receiver CPU-s/GB", summary.cpu_seconds_per_gb, 1.0);
                out
            }
            SavedResults::Send(doc) => {
                let f = RunFigures::of_stream(doc);
                let mut out = format!(
                    "{} stream to {}, {} queue(s), {:.2} s window: received {}, offered {}, {}, verdict: {} ({})\n",
                    format!("{:?}", doc.test.proto).to_uppercase(),
                    doc.target,
                    doc.test.queues,
                    doc.sum.window_seconds,
                    f.receiver_bits_per_second.map_or("nothing".into(), format_bits_per_second),
                    f.sender_bits_per_second.map_or("nothing".into(), format_bits_per_second),
                    f.cpu_seconds_per_gb.map_or("cpu n/a".into(), |c| format!("{c:.3} CPU-s/GB")),
                    doc.verdict.bottleneck,
                    doc.verdict.evidence
                );
                for iv in &doc.intervals {
                    let _ = writeln!(
                        out,
                        "[SUM] {:>6.2}-{:<6.2} sec  {}",
                        iv.start,
                        iv.end,
                        format_bits_per_second(iv.bits_per_second)
                    );
                }
                if let Some(e) = &f.error {
                    let _ = writeln!(out, "incomplete: {e}");
                }
                out
            }
            SavedResults::Transactions(doc) => {
                let mut out = format!(
                    "{} to {}: {:.1} transactions/s, latency p50 {:.1} us p99 {:.1} us, verdict: {} ({})\n",
                    format!("{:?}", doc.test.workload).to_lowercase(),
                    doc.target,
                    doc.transactions_per_second,
                    doc.latency_us.p50,
                    doc.latency_us.p99,
                    doc.verdict.bottleneck,
                    doc.verdict.evidence
                );
                for iv in &doc.intervals {
                    let _ = writeln!(
                        out,
                        "[SUM] {:>6.2}-{:<6.2} sec  {:.1} transactions/s",
                        iv.start, iv.end, iv.transactions_per_second
                    );
                }
                out
            }
            SavedResults::Compare(doc) => comparison_text(doc),
            SavedResults::Search(doc) => doc.result.render_text(&doc.test),
            SavedResults::Http(doc) => doc.report.render_text(),
            SavedResults::Fleet(report) => report.render_text(),
            SavedResults::Experiment(doc) => {
                let runs: Vec<String> =
                    doc.variants.iter().map(|v| format!("{} ({} runs)", v.name, v.runs.len())).collect();
                let mut out = format!("experiment against {}: {}\n", doc.target, runs.join(", "));
                out += &doc
                    .compare
                    .as_ref()
                    .map_or("no comparison (fewer than two variants with a complete run)\n".into(), comparison_text);
                out
            }
        }
    }

    /// The chart `report --svg` writes; a search, an http run and a fleet have their charts on
    /// their `--html` page (a fleet's SVGs are also what `report --fleet` writes).
    pub fn chart(&self) -> Result<Chart> {
        Ok(match self {
            SavedResults::Search(_) | SavedResults::Http(_) | SavedResults::Fleet(_) => return Err(Error::usage(
                "--svg applies to sweeps, runs, comparisons and experiments: give --html OUT.html for this document",
            )),
            SavedResults::Sweep(s) => s.chart(),
            SavedResults::Repeat(runs) => {
                let figures = run_figures(runs);
                let pick = |f: fn(&RunFigures) -> Option<f64>, scale: f64| -> Vec<Point> {
                    figures
                        .iter()
                        .enumerate()
                        .filter(|(_, r)| r.complete)
                        .filter_map(|(x, r)| f(r).map(|y| Point { x, y: y / scale, min: None, max: None }))
                        .collect()
                };
                Chart {
                    title: format!("uringbench send --repeat {} to {}", runs.len(), runs[0].target),
                    x_label: "run".into(),
                    categories: (1..=runs.len()).map(|i| i.to_string()).collect(),
                    left_label: "received Gbit/s".into(),
                    right_label: Some("receiver CPU-s/GB".into()),
                    series: vec![
                        Series {
                            key: "receiver_gbps".into(),
                            name: "received Gbit/s".into(),
                            axis: Axis::Left,
                            points: pick(|r| r.receiver_bits_per_second, 1e9),
                        },
                        Series {
                            key: "cpu_s_per_gb".into(),
                            name: "receiver CPU-s/GB".into(),
                            axis: Axis::Right,
                            points: pick(|r| r.cpu_seconds_per_gb, 1.0),
                        },
                    ],
                }
            }
            SavedResults::Send(doc) => interval_chart(doc),
            SavedResults::Transactions(doc) => Chart {
                title: format!("uringbench {:?} to {}: transactions per interval", doc.test.workload, doc.target),
                x_label: "seconds into the window (interval end)".into(),
                categories: doc.intervals.iter().map(|iv| format!("{:.1}", iv.end)).collect(),
                left_label: "transactions/s".into(),
                right_label: None,
                series: vec![Series {
                    key: "transactions_per_second".into(),
                    name: "transactions/s".into(),
                    axis: Axis::Left,
                    points: doc
                        .intervals
                        .iter()
                        .enumerate()
                        .map(|(x, iv)| Point { x, y: iv.transactions_per_second, min: None, max: None })
                        .collect(),
                }],
            },
            SavedResults::Compare(doc) => crate::report::compare::document_chart(doc, None),
            SavedResults::Experiment(doc) => {
                let metric = doc.compare.as_ref().map_or(Metric::ReceivedGbps, |c| c.primary_metric);
                let samples = experiment_samples(doc, metric);
                match &doc.compare {
                    Some(c) => crate::report::compare::document_chart(c, Some(&samples)),
                    None => Chart {
                        title: format!("uringbench experiment: {} per variant", metric.title()),
                        x_label: "variant".into(),
                        categories: doc.variants.iter().map(|v| v.name.clone()).collect(),
                        left_label: metric.title().into(),
                        right_label: None,
                        series: vec![Series {
                            key: "runs".into(),
                            name: "runs".into(),
                            axis: Axis::Left,
                            points: samples
                                .iter()
                                .enumerate()
                                .flat_map(|(x, v)| v.iter().map(move |&y| Point { x, y, min: None, max: None }))
                                .collect(),
                        }],
                    },
                }
            }
        })
    }
}

/// Each comparison's verdict line, as `compare` prints them.
fn comparison_text(doc: &CompareDocument) -> String {
    let mut out = format!(
        "compare: {} variants against {} on {}\n",
        doc.variants.len(),
        doc.variants.first().map_or("", |v| v.name.as_str()),
        doc.primary_metric.title()
    );
    for c in &doc.comparisons {
        let _ = writeln!(out, "  {}", c.verdict);
    }
    out
}

/// Per variant, `metric` of each of its complete runs, in run order.
pub(crate) fn experiment_samples(doc: &ExperimentDocument, metric: Metric) -> Vec<Vec<f64>> {
    doc.variants
        .iter()
        .map(|v| {
            v.runs.iter().map(RunFigures::of_record).filter(|r| r.complete).filter_map(|r| metric.of_run(&r)).collect()
        })
        .collect()
}

fn run_figures(runs: &[StreamDocument]) -> Vec<RunFigures> {
    runs.iter().map(RunFigures::of_stream).collect()
}

/// Received Gbit/s per interval (the sum, and each queue when there are a few), or the
/// window's headline alone when the test ran without `--interval`.
fn interval_chart(doc: &StreamDocument) -> Chart {
    let intervals = &doc.intervals;
    let mut series = Vec::new();
    let categories: Vec<String>;
    if intervals.is_empty() {
        categories = vec!["window".into()];
        let y = doc.sum.receiver.as_ref().map_or(0.0, |r| r.bits_per_second) / 1e9;
        series.push(Series {
            key: "receiver_gbps".into(),
            name: "received Gbit/s".into(),
            axis: Axis::Left,
            points: vec![Point { x: 0, y, min: None, max: None }],
        });
    } else {
        categories = intervals.iter().map(|iv| format!("{:.1}", iv.end)).collect();
        series.push(Series {
            key: "receiver_gbps".into(),
            name: "received Gbit/s".into(),
            axis: Axis::Left,
            points: intervals
                .iter()
                .enumerate()
                .map(|(x, iv)| Point { x, y: iv.bits_per_second / 1e9, min: None, max: None })
                .collect(),
        });
        let queues = intervals[0].queues.len();
        if (2..=MAX_QUEUE_LINES).contains(&queues) {
            for q in 0..queues {
                let points = intervals
                    .iter()
                    .enumerate()
                    .filter_map(|(x, iv)| {
                        let bytes = *iv.queues.get(q)? as f64;
                        let secs = iv.end - iv.start;
                        (secs > 0.0).then(|| Point { x, y: bytes * 8.0 / secs / 1e9, min: None, max: None })
                    })
                    .collect();
                series.push(Series {
                    key: format!("queue_{q}_gbps"),
                    name: format!("queue {q}"),
                    axis: Axis::Left,
                    points,
                });
            }
        }
    }
    Chart {
        title: format!("uringbench send to {}: received Gbit/s per interval", doc.target),
        x_label: "seconds into the window (interval end)".into(),
        categories,
        left_label: "received Gbit/s".into(),
        right_label: None,
        series,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::document::{IntervalEntry, Kind, RepeatDocument, Tool};

    /// A real `send -J` document (the release before the typed model wrote it), with the
    /// headline and intervals set to known figures.
    fn send_doc(gbps: f64, intervals: bool) -> StreamDocument {
        let mut doc: StreamDocument =
            serde_json::from_str(include_str!("../../tests/fixtures/53b0d44/stream-tcp.json")).unwrap();
        doc.sum.window_seconds = 2.0;
        doc.sum.receiver.as_mut().unwrap().bits_per_second = gbps * 1e9;
        doc.sum.sender.bits_per_second = gbps * 1e9;
        doc.complete = true;
        doc.error = None;
        doc.cpu.receiver_per_byte.as_mut().unwrap().cpu_seconds_per_gb = 0.2;
        doc.verdict.evidence = "cpu0 99%".into();
        let iv = |s: f64, b: f64| IntervalEntry {
            start: s,
            end: s + 1.0,
            bytes: (b * 1e9 / 8.0) as u64,
            bits_per_second: b * 1e9,
            queues: vec![(b * 1e9 / 16.0) as u64, (b * 1e9 / 16.0) as u64],
            sender_bytes: None,
            tcp: None,
            tcp_flows: None,
            tcp_flow_retransmits: None,
            udp: None,
            cpu: None,
        };
        doc.intervals = if intervals { vec![iv(0.0, gbps - 1.0), iv(1.0, gbps + 1.0)] } else { Vec::new() };
        doc
    }

    fn text_of(doc: &impl serde::Serialize) -> String {
        serde_json::to_string(doc).unwrap()
    }

    fn repeat_of(runs: Vec<StreamDocument>) -> String {
        let summary =
            RunsSummary { runs: runs.len(), complete_runs: runs.len(), ..RunsSummary::of(std::iter::empty()) };
        text_of(&RepeatDocument {
            kind: Kind::Repeat,
            schema_version: 1,
            tool: Tool::this(),
            repeat: runs.len(),
            runs,
            summary,
        })
    }

    #[test]
    fn recognises_each_kind_and_refuses_others() {
        assert!(matches!(SavedResults::parse(&text_of(&send_doc(10.0, true))).unwrap(), SavedResults::Send(_)));
        let repeat = repeat_of(vec![send_doc(10.0, false), send_doc(12.0, false)]);
        assert!(matches!(SavedResults::parse(&repeat).unwrap(), SavedResults::Repeat(r) if r.len() == 2));
        for (text, want) in [
            ("{", "not JSON"),
            ("{\"a\": 1}", "not a uringbench"),
            ("{\"repeat\": 2, \"runs\": [1]}", "not a uringbench"),
            ("{\"kind\": \"sweep\", \"schema_version\": 1}", "malformed sweep"),
        ] {
            let e = SavedResults::parse(text).unwrap_err();
            assert!(e.message.contains(want), "{text}: {e}");
            assert_eq!(e.exit_code(), 2);
        }
    }

    #[test]
    fn send_renders_intervals() {
        let saved = SavedResults::parse(&text_of(&send_doc(10.0, true))).unwrap();
        let text = saved.render_text();
        assert!(text.contains("received 10.00 Gbits/sec") && text.contains("(cpu0 99%)"), "{text}");
        assert_eq!(text.matches("[SUM]").count(), 2);
        let chart = saved.chart().unwrap();
        assert_eq!(chart.categories, vec!["1.0", "2.0"]);
        assert_eq!(chart.series.len(), 3, "the sum and two queues");
        assert_eq!(chart.series[0].points[1].y, 11.0);
        assert!((chart.series[1].points[0].y - 4.5).abs() < 1e-9);
        let bare = SavedResults::parse(&text_of(&send_doc(10.0, false))).unwrap().chart().unwrap();
        assert_eq!((bare.categories.len(), bare.series[0].points[0].y), (1, 10.0));
    }

    #[test]
    fn repeat_renders_runs_and_stats() {
        let repeat = repeat_of(vec![send_doc(10.0, false), send_doc(12.0, false), send_doc(14.0, false)]);
        let saved = SavedResults::parse(&repeat).unwrap();
        let text = saved.render_text();
        assert!(text.contains("median 12.000"), "{text}");
        assert_eq!(text.lines().filter(|l| l.starts_with("run ")).count(), 3, "{text}");
        let chart = saved.chart().unwrap();
        assert_eq!(chart.categories, vec!["1", "2", "3"]);
        assert_eq!(chart.series[0].points.len(), 3);
    }
}
