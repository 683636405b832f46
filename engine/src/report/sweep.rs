//! How a sweep is shown: the run-per-row CSV with per-point statistics, the chart, the table
//! and the progress lines.

use crate::base::spec::Proto;
use crate::base::units::format_bits_per_second;
use crate::metrics::run_figures::RunFigures;
use crate::metrics::summary::Stats;
use crate::report::chart::{Axis, Chart, Point, Series};
use crate::workload::sweep::{SweepParam, SweepResult, SweepRun};
use std::fmt::Write as _;

/// Columns of the sweep CSV.
pub const SWEEP_CSV_HEADER: &str =
    "kind,parameter,value,label,run,complete,receiver_bits_per_second,sender_bits_per_second,cpu_seconds_per_gb,verdict";

pub(crate) fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_owned()
    }
}

/// Bits per second as a whole number.
pub(crate) fn opt_bps(v: Option<f64>) -> String {
    v.map_or(String::new(), |v| format!("{v:.0}"))
}

pub(crate) fn opt(v: Option<f64>) -> String {
    v.map_or(String::new(), |v| format!("{v:.6}").trim_end_matches('0').trim_end_matches('.').to_string())
}

impl SweepResult {
    /// A run-per-row CSV, plus min/median/mean/max/stdev rows per point.
    pub fn to_csv(&self) -> String {
        let mut out = format!("{SWEEP_CSV_HEADER}\n");
        let param = self.parameter.key();
        for p in &self.points {
            for SweepRun { run, figures: r } in &p.runs {
                let _ = writeln!(
                    out,
                    "run,{param},{},{},{},{},{},{},{},{}",
                    p.value,
                    csv_field(&p.label),
                    run,
                    r.complete,
                    opt_bps(r.receiver_bits_per_second),
                    opt_bps(r.sender_bits_per_second),
                    opt(r.cpu_seconds_per_gb),
                    csv_field(r.verdict.as_deref().or(r.error.as_deref()).unwrap_or(""))
                );
            }
            let s = p.summary();
            let pick = |st: &Option<Stats>, f: fn(&Stats) -> f64| opt(st.as_ref().map(f));
            let pick_bps = |st: &Option<Stats>, f: fn(&Stats) -> f64| opt_bps(st.as_ref().map(f));
            for (kind, f) in [
                ("min", (|s: &Stats| s.min) as fn(&Stats) -> f64),
                ("median", |s| s.median),
                ("mean", |s| s.mean),
                ("max", |s| s.max),
                ("stdev", |s| s.stdev),
            ] {
                let _ = writeln!(
                    out,
                    "{kind},{param},{},{},,{},{},{},{},",
                    p.value,
                    csv_field(&p.label),
                    s.complete_runs,
                    pick_bps(&s.receiver_bits_per_second, f),
                    pick_bps(&s.sender_bits_per_second, f),
                    pick(&s.cpu_seconds_per_gb, f)
                );
            }
        }
        out
    }

    /// The chart: received Gbit/s (left) and CPU-s/GB (right), medians with min–max bars.
    pub fn chart(&self) -> Chart {
        let mut gbps = Vec::new();
        let mut cpu = Vec::new();
        for (x, p) in self.points.iter().enumerate() {
            let s = p.summary();
            if let Some(st) = s.receiver_bits_per_second {
                gbps.push(Point { x, y: st.median / 1e9, min: Some(st.min / 1e9), max: Some(st.max / 1e9) });
            }
            if let Some(st) = s.cpu_seconds_per_gb {
                cpu.push(Point { x, y: st.median, min: Some(st.min), max: Some(st.max) });
            }
        }
        let t = &self.test;
        Chart {
            title: format!(
                "uringbench sweep: {} stream to {}, {} run{} per point (median, min-max)",
                if t.proto == Proto::Udp { "UDP" } else { "TCP" },
                self.target,
                self.repeat,
                if self.repeat == 1 { "" } else { "s" }
            ),
            x_label: self.parameter.axis_title().into(),
            categories: self.points.iter().map(|p| p.label.clone()).collect(),
            left_label: "received Gbit/s".into(),
            right_label: Some("receiver CPU-s/GB".into()),
            series: vec![
                Series { key: "receiver_gbps".into(), name: "received Gbit/s".into(), axis: Axis::Left, points: gbps },
                Series { key: "cpu_s_per_gb".into(), name: "receiver CPU-s/GB".into(), axis: Axis::Right, points: cpu },
            ],
        }
    }

    /// A table, one line per point.
    pub fn render_table(&self) -> String {
        let mut out = format!(
            "{:<8} {:>5}  {:<34} {:<26} {}\n",
            self.parameter.key(),
            "runs",
            "received Gbit/s median [min-max]",
            "CPU-s/GB median [min-max]",
            "verdicts"
        );
        for p in &self.points {
            let s = p.summary();
            let range = |st: Option<Stats>, scale: f64, digits: usize| {
                st.map_or("-".to_string(), |st| {
                    format!("{:.d$} [{:.d$}-{:.d$}]", st.median / scale, st.min / scale, st.max / scale, d = digits)
                })
            };
            let mut verdicts: Vec<&str> = p.runs.iter().filter_map(|r| r.figures.verdict.as_deref()).collect();
            verdicts.sort_unstable();
            verdicts.dedup();
            let _ = writeln!(
                out,
                "{:<8} {:>5}  {:<34} {:<26} {}",
                p.label,
                format!("{}/{}", s.complete_runs, s.runs),
                range(s.receiver_bits_per_second, 1e9, 2),
                range(s.cpu_seconds_per_gb, 1.0, 3),
                verdicts.join(", ")
            );
        }
        out
    }
}

/// A one-line description of a run, for progress output.
pub fn run_line(param: SweepParam, label: &str, repeat: u32, r: &SweepRun) -> String {
    format!("{}={label} run {}/{repeat}: {}", param.key(), r.run, run_figures_text(&r.figures))
}

/// `run N: ...` for runs that are not part of a sweep (`send --repeat`).
pub(crate) fn run_line_plain(run: usize, f: &RunFigures) -> String {
    format!("run {run}: {}", run_figures_text(f))
}

fn run_figures_text(f: &RunFigures) -> String {
    let gbps = f.receiver_bits_per_second.map_or("nothing received".into(), format_bits_per_second);
    let cpu = f.cpu_seconds_per_gb.map_or("cpu n/a".into(), |c| format!("{c:.3} CPU-s/GB"));
    let tail = match (&f.error, &f.verdict) {
        (Some(e), _) => format!("incomplete: {e}"),
        (None, Some(v)) => format!("verdict: {v}"),
        _ => String::new(),
    };
    format!("{gbps}, {cpu}, {tail}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::sweep::tests::result;

    #[test]
    fn csv_rows_per_run_and_per_point() {
        let csv = result().to_csv();
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines[0], SWEEP_CSV_HEADER);
        let columns = SWEEP_CSV_HEADER.split(',').count();
        assert!(lines.iter().all(|l| l.split(',').count() == columns), "{csv}");
        assert_eq!(lines.iter().filter(|l| l.starts_with("run,")).count(), 6);
        assert_eq!(lines.iter().filter(|l| l.starts_with("median,")).count(), 2);
        assert!(lines.contains(&"median,queues,1,1,,3,11000000000,11001000000,0.25,"), "{csv}");
        assert!(lines.contains(&"run,queues,2,2,2,false,,,,receiver vanished"), "{csv}");
        assert_eq!(csv_field("a,b \"c\""), "\"a,b \"\"c\"\"\"");
    }

    #[test]
    fn chart_series_and_table() {
        let r = result();
        let c = r.chart();
        assert_eq!(c.categories, vec!["1", "2"]);
        assert_eq!(c.series.len(), 2);
        assert_eq!(c.series[0].points[1], Point { x: 1, y: 16.0, min: Some(15.0), max: Some(17.0) });
        let t = r.render_table();
        assert!(t.contains("2/3"), "{t}");
        assert!(t.contains("11.00 [10.00-12.00]"), "{t}");
        let line = run_line(SweepParam::Queues, "2", 3, &r.points[1].runs[1]);
        assert_eq!(line, "queues=2 run 2/3: nothing received, cpu n/a, incomplete: receiver vanished");
    }
}
