//! `send --repeat N`: the same stream test N times against one receiver, one run after the
//! other, each run's figures read from its document and the runs summarised
//! ([`RunsSummary`]), as a sweep does for each of its points.
//!
//! The first run failing to start is an error (nothing to repeat against); a later failure
//! ends the series with the runs so far, and so does a stop (the run that saw it is kept, as
//! far as it got).

use crate::base::error::{Error, Result};
use crate::base::stop::StopToken;
use crate::metrics::document::StreamDocument;
use crate::metrics::figures::StreamReport;
use crate::metrics::run_figures::RunFigures;
use crate::metrics::summary::RunsSummary;

/// What a repeat runs: how many times, and the stop that may end the series early (the same
/// token the runs watch).
#[derive(Debug, Clone)]
pub struct RepeatPlan {
    pub runs: u32,
    pub stop: StopToken,
}

/// A run done, for the caller to print.
#[derive(Debug)]
pub struct RunDone<'a> {
    /// 1-based.
    pub run: u32,
    pub report: &'a StreamReport,
    pub figures: &'a RunFigures,
}

/// The series as it ran.
#[derive(Debug)]
pub struct RepeatResult {
    /// Every run's report, in order.
    pub reports: Vec<StreamReport>,
    /// Every run's figures, in the same order.
    pub figures: Vec<RunFigures>,
    /// The failure of a later run to start, which ended the series.
    pub stopped: Option<Error>,
    /// Over the runs that completed.
    pub summary: RunsSummary,
}

/// Runs the series. `test` runs run N (1-based); `document` is a report as its `send -J`
/// document (written by the report layer, with the analysis layer's verdict: handed in by the
/// caller), which each run's figures are read from; `done` sees each run as it ends.
pub fn run(
    plan: &RepeatPlan,
    test: impl FnMut(u32) -> Result<StreamReport>,
    document: impl Fn(&StreamReport) -> StreamDocument,
    mut done: impl FnMut(RunDone),
) -> Result<RepeatResult> {
    let (runs, stopped) = repeat(
        plan,
        test,
        |r| RunFigures::of_stream(&document(r)),
        |run, report, figures| done(RunDone { run, report, figures }),
    )?;
    let (reports, figures): (Vec<StreamReport>, Vec<RunFigures>) = runs.into_iter().unzip();
    let summary = RunsSummary::of(&figures);
    Ok(RepeatResult { reports, figures, stopped, summary })
}

/// The series over any report type: each run with its figures, and the later failure that
/// ended it early.
type Series<R> = (Vec<(R, RunFigures)>, Option<Error>);

fn repeat<R>(
    plan: &RepeatPlan,
    mut test: impl FnMut(u32) -> Result<R>,
    figures_of: impl Fn(&R) -> RunFigures,
    mut done: impl FnMut(u32, &R, &RunFigures),
) -> Result<Series<R>> {
    if plan.runs == 0 {
        return Err(Error::usage("--repeat must be at least 1"));
    }
    let mut runs = Vec::with_capacity(plan.runs as usize);
    for run in 1..=plan.runs {
        let report = match test(run) {
            Ok(r) => r,
            Err(e) if run == 1 => return Err(e),
            Err(e) => return Ok((runs, Some(e))),
        };
        let figures = figures_of(&report);
        done(run, &report, &figures);
        runs.push((report, figures));
        if plan.stop.is_stopped() {
            break; // The run that saw the stop is kept, as far as it got; no more runs.
        }
    }
    Ok((runs, None))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(runs: u32) -> RepeatPlan {
        RepeatPlan { runs, stop: StopToken::new() }
    }

    /// A run's figures: `gbps` received, complete.
    fn figures(gbps: &f64) -> RunFigures {
        RunFigures { complete: true, receiver_bits_per_second: Some(gbps * 1e9), ..RunFigures::default() }
    }

    #[test]
    fn every_run_in_order_then_a_summary() {
        let mut seen = Vec::new();
        let (runs, stopped) =
            repeat(&plan(3), |run| Ok(10.0 + run as f64), figures, |run, _, f| seen.push((run, f.clone()))).unwrap();
        assert!(stopped.is_none());
        assert_eq!(runs.iter().map(|(r, _)| *r).collect::<Vec<_>>(), [11.0, 12.0, 13.0]);
        assert_eq!(seen.iter().map(|(n, _)| *n).collect::<Vec<_>>(), [1, 2, 3]);
        let s = RunsSummary::of(runs.iter().map(|(_, f)| f));
        assert_eq!((s.runs, s.complete_runs, s.receiver_bits_per_second.unwrap().median), (3, 3, 12e9));
    }

    #[test]
    fn a_first_failure_is_the_error_a_later_one_ends_the_series() {
        let refused = repeat(&plan(3), |_| -> Result<f64> { Err(Error::peer("refused")) }, figures, |_, _, _| {});
        assert!(refused.unwrap_err().message.contains("refused"));
        let (runs, stopped) = repeat(
            &plan(3),
            |run| if run == 2 { Err(Error::peer("receiver vanished")) } else { Ok(1.0) },
            figures,
            |_, _, _| {},
        )
        .unwrap();
        assert_eq!(runs.len(), 1, "no run after the failure");
        assert!(stopped.unwrap().message.contains("vanished"));
        assert_eq!(repeat(&plan(0), |_| Ok(1.0), figures, |_, _, _| {}).unwrap_err().exit_code(), 2);
    }

    #[test]
    fn a_stop_keeps_the_run_that_saw_it_and_ends_the_series() {
        let p = plan(5);
        let (runs, stopped) = repeat(
            &p,
            |run| {
                if run == 2 {
                    p.stop.stop("SIGINT");
                }
                Ok(1.0)
            },
            figures,
            |_, _, _| {},
        )
        .unwrap();
        assert_eq!((runs.len(), stopped.is_none()), (2, true));
    }
}
