//! `uringbench sweep`: the same stream test over a series of queue counts, message lengths or
//! rates, several runs per point, summarised per point (min/median/mean/max/stdev) and charted.
//!
//! Runs are interleaved (point 1, 2, 3, then point 1, 2, 3 again...) rather than grouped,
//! so that a slow drift of the host (another tenant, thermal state, the bimodal softirq
//! placement of softirq work on a 2-vCPU VM) spreads over every point instead of biasing one.
//!
//! Saved results (`--json`) hold every run's figures; [`SweepResult::from_json`] reads them
//! back and recomputes the summaries, so `uringbench report` charts old sweeps the same way.

use crate::base::error::{Error, Result};
use crate::base::spec::TestSpec;
use crate::metrics::document::{read_document, Kind, StreamDocument, Tool};
use crate::metrics::figures::{StreamReport, SCHEMA_VERSION};
use crate::metrics::run_figures::RunFigures;
use crate::metrics::summary::RunsSummary;
use crate::session::sender::SendOptions;
use crate::workload::stream::run_send;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The swept parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SweepParam {
    /// `--queues`: queue count (one flow each, times `--flows-per-queue`).
    Queues,
    /// `--len`: bytes per send (TCP) or per datagram (UDP).
    Len,
    /// `--rate`: total offered rate, bits/s.
    Rate,
}

impl SweepParam {
    pub fn key(self) -> &'static str {
        match self {
            SweepParam::Queues => "queues",
            SweepParam::Len => "len",
            SweepParam::Rate => "rate",
        }
    }

    /// The x-axis title.
    pub(crate) fn axis_title(self) -> &'static str {
        match self {
            SweepParam::Queues => "queues (-P)",
            SweepParam::Len => "message length (--len)",
            SweepParam::Rate => "offered rate (--rate, bits/s)",
        }
    }

    /// How a value is written on the command line: `4`, `64K`, `10G`.
    pub fn label(self, value: u64) -> String {
        let with = |v: u64, units: &[(u64, &str)]| {
            units.iter().find(|(m, _)| v >= *m && v % m == 0).map_or(v.to_string(), |(m, s)| format!("{}{s}", v / m))
        };
        match self {
            SweepParam::Queues => value.to_string(),
            SweepParam::Len => with(value, &[(1 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")]),
            SweepParam::Rate => with(value, &[(1_000_000_000, "G"), (1_000_000, "M"), (1_000, "K")]),
        }
    }

    /// `spec` with this parameter set to `value`; a usage error when it is out of range.
    pub fn apply(self, spec: &TestSpec, value: u64) -> Result<TestSpec> {
        let mut s = spec.clone();
        match self {
            SweepParam::Queues => {
                s.queues = u32::try_from(value)
                    .ok()
                    .filter(|&q| (1..=1024).contains(&q))
                    .ok_or_else(|| Error::usage(format!("--queues {value}: must be 1 to 1024")))?;
            }
            SweepParam::Len => {
                s.len = u32::try_from(value)
                    .ok()
                    .filter(|&l| l > 0)
                    .ok_or_else(|| Error::usage(format!("--len {value}: must be 1 byte to 4 GiB")))?;
            }
            SweepParam::Rate => s.rate_bps = value,
        }
        Ok(s)
    }
}

/// What a sweep runs.
#[derive(Debug, Clone)]
pub struct SweepPlan {
    /// Target, port, CPUs and the spec every point starts from.
    pub base: SendOptions,
    pub param: SweepParam,
    pub values: Vec<u64>,
    /// Runs per point.
    pub repeat: u32,
}

/// One run of a point as kept in the results: its number and its figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SweepRun {
    /// 1-based run number at this point.
    pub run: u32,
    #[serde(flatten)]
    pub figures: RunFigures,
}

/// One point of the series.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SweepPoint {
    pub value: u64,
    pub label: String,
    pub runs: Vec<SweepRun>,
}

impl SweepPoint {
    /// Statistics of the point over its complete runs.
    pub fn summary(&self) -> RunsSummary {
        RunsSummary::of(self.runs.iter().map(|r| &r.figures))
    }
}

/// A whole sweep: what was swept, the base test, and every point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SweepResult {
    pub parameter: SweepParam,
    pub target: String,
    /// The test every point started from (the swept field differs per point).
    pub test: TestSpec,
    pub repeat: u32,
    pub points: Vec<SweepPoint>,
}

/// Progress of a running sweep, for the caller to print (and to save: `sweep` holds every
/// run so far, so an interrupted sweep still leaves its results).
#[derive(Debug)]
pub struct RunDone<'a> {
    pub point: usize,
    pub label: &'a str,
    pub figures: &'a SweepRun,
    pub report: Option<&'a StreamReport>,
    pub sweep: &'a SweepResult,
}

/// Runs the sweep against a running `uringbench recv`. The first run failing to start is an
/// error (nothing to sweep against); later failures are recorded as incomplete runs and the
/// sweep goes on. `document` is a run's report as its `send -J` document (written by the
/// report layer, with the analysis layer's verdict, handed in by the caller): each run's
/// figures are read from it, as from a saved run.
pub fn run(
    plan: &SweepPlan,
    document: impl Fn(&StreamReport) -> StreamDocument,
    mut progress: impl FnMut(RunDone),
) -> Result<SweepResult> {
    if plan.values.is_empty() {
        return Err(Error::usage("sweep: no values to sweep"));
    }
    if plan.repeat == 0 {
        return Err(Error::usage("--repeat must be at least 1"));
    }
    let specs: Vec<TestSpec> =
        plan.values.iter().map(|&v| plan.param.apply(&plan.base.spec, v)).collect::<Result<_>>()?;
    let points: Vec<SweepPoint> =
        plan.values.iter().map(|&v| SweepPoint { value: v, label: plan.param.label(v), runs: Vec::new() }).collect();
    let mut result = SweepResult {
        parameter: plan.param,
        target: plan.base.target.clone(),
        test: plan.base.spec.clone(),
        repeat: plan.repeat,
        points,
    };
    for run in 1..=plan.repeat {
        for (i, spec) in specs.iter().enumerate() {
            let opts = SendOptions { spec: spec.clone(), ..plan.base.clone() };
            let (figures, report) = match run_send(&opts) {
                Ok(r) => (RunFigures::of_stream(&document(&r)), Some(r)),
                Err(e) if run == 1 && i == 0 => return Err(e),
                Err(e) => (RunFigures::failed(e.message), None),
            };
            result.points[i].runs.push(SweepRun { run, figures });
            let point = &result.points[i];
            progress(RunDone {
                point: i,
                label: &point.label,
                figures: point.runs.last().expect("just pushed"),
                report: report.as_ref(),
                sweep: &result,
            });
            if plan.base.stop.is_stopped() {
                // The run that saw the stop was reported as far as it got; no more runs.
                return Ok(result);
            }
        }
    }
    Ok(result)
}

impl SweepResult {
    /// Every run complete.
    pub fn complete(&self) -> bool {
        self.points.iter().all(|p| p.runs.iter().all(|r| r.figures.complete))
    }

    /// The saved document: the result plus per-point summaries.
    pub fn to_document(&self) -> SweepDocument {
        SweepDocument {
            schema_version: SCHEMA_VERSION,
            kind: Kind::Sweep,
            tool: Tool::this(),
            parameter: self.parameter,
            target: self.target.clone(),
            test: self.test.clone(),
            repeat: self.repeat,
            complete: self.complete(),
            points: self
                .points
                .iter()
                .map(|p| SweepPointEntry { point: p.clone(), summary: Some(p.summary()) })
                .collect(),
        }
    }

    /// Reads a saved sweep back (summaries are recomputed from the runs).
    pub(crate) fn from_json(doc: &Value) -> Result<Self> {
        let saved: SweepDocument = read_document(doc, Kind::Sweep).map_err(Error::usage)?;
        if saved.points.is_empty() {
            return Err(Error::usage("sweep document has no points"));
        }
        Ok(Self {
            parameter: saved.parameter,
            target: saved.target,
            test: saved.test,
            repeat: saved.repeat,
            points: saved.points.into_iter().map(|p| p.point).collect(),
        })
    }
}

/// A sweep as saved (`sweep --json`, `-J`).
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SweepDocument {
    pub schema_version: u32,
    pub kind: Kind,
    pub tool: Tool,
    pub parameter: SweepParam,
    pub target: String,
    /// The test every point started from (the swept field differs per point).
    pub test: TestSpec,
    /// Runs per point.
    pub repeat: u32,
    /// Every run of every point complete.
    pub complete: bool,
    pub points: Vec<SweepPointEntry>,
}

/// One point as saved: its runs and the statistics over its complete runs.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SweepPointEntry {
    #[serde(flatten)]
    pub point: SweepPoint,
    /// Written with every point; [`SweepResult::from_json`] recomputes it from the runs.
    #[serde(default)]
    pub summary: Option<RunsSummary>,
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn figures(run: u32, gbps: f64, cpu: f64) -> SweepRun {
        SweepRun {
            run,
            figures: RunFigures {
                complete: true,
                receiver_bits_per_second: Some(gbps * 1e9),
                sender_bits_per_second: Some(gbps * 1e9 + 1e6),
                cpu_seconds_per_gb: Some(cpu),
                verdict: Some("sender cpu".into()),
                error: None,
                retransmits: Some(run.into()),
                ..RunFigures::default()
            },
        }
    }

    pub(crate) fn result() -> SweepResult {
        SweepResult {
            parameter: SweepParam::Queues,
            target: "10.77.0.2".into(),
            test: TestSpec::default(),
            repeat: 3,
            points: vec![
                SweepPoint {
                    value: 1,
                    label: "1".into(),
                    runs: vec![figures(1, 10.0, 0.2), figures(2, 12.0, 0.25), figures(3, 11.0, 0.3)],
                },
                SweepPoint {
                    value: 2,
                    label: "2".into(),
                    runs: vec![
                        figures(1, 15.0, 0.2),
                        SweepRun { run: 2, figures: RunFigures::failed("receiver vanished") },
                        figures(3, 17.0, 0.22),
                    ],
                },
            ],
        }
    }

    #[test]
    fn labels_and_apply() {
        assert_eq!(SweepParam::Len.label(65536), "64K");
        assert_eq!(SweepParam::Len.label(1470), "1470");
        assert_eq!(SweepParam::Len.label(1 << 20), "1M");
        assert_eq!(SweepParam::Rate.label(2_500_000_000), "2500M");
        assert_eq!(SweepParam::Rate.label(10_000_000_000), "10G");
        assert_eq!(SweepParam::Queues.label(16), "16");
        let base = TestSpec::default();
        assert_eq!(SweepParam::Queues.apply(&base, 8).unwrap().queues, 8);
        assert_eq!(SweepParam::Len.apply(&base, 4096).unwrap().len, 4096);
        assert_eq!(SweepParam::Rate.apply(&base, 1_000_000).unwrap().rate_bps, 1_000_000);
        assert_eq!(SweepParam::Queues.apply(&base, 0).unwrap_err().exit_code(), 2);
        assert_eq!(SweepParam::Len.apply(&base, 1 << 33).unwrap_err().exit_code(), 2);
    }

    #[test]
    fn summaries_use_complete_runs_only() {
        let r = result();
        let s = r.points[1].summary();
        assert_eq!((s.runs, s.complete_runs), (3, 2));
        assert_eq!(s.receiver_bits_per_second.unwrap().median, 16e9);
        assert!(!r.complete());
        let s = r.points[0].summary();
        assert_eq!(s.receiver_bits_per_second.unwrap().min, 10e9);
    }

    #[test]
    fn json_round_trip_and_bad_documents() {
        let r = result();
        let doc = serde_json::to_value(r.to_document()).unwrap();
        assert_eq!(doc["points"][0]["summary"]["receiver_bits_per_second"]["median"].as_f64(), Some(11e9));
        let back = SweepResult::from_json(&doc).unwrap();
        assert_eq!(back, r, "a saved sweep reads back as it was");
        let mut not_sweep = doc.clone();
        not_sweep["kind"] = "stream".into();
        let mut other_version = doc.clone();
        other_version["schema_version"] = 9.into();
        let mut malformed = doc.clone();
        malformed["points"] = "x".into();
        for (bad, want) in
            [(not_sweep, "not a sweep"), (other_version, "schema_version 9"), (malformed, "malformed sweep document")]
        {
            let e = SweepResult::from_json(&bad).unwrap_err();
            assert!(e.message.contains(want), "{e}");
            assert_eq!(e.exit_code(), 2);
        }
        let mut empty = doc.clone();
        empty["points"] = Value::Array(Vec::new());
        assert!(SweepResult::from_json(&empty).unwrap_err().message.contains("no points"));
    }
}
