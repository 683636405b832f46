//! CPU on a run page: each side's CPU over time (the host's busy CPUs and the queue threads'
//! share, per interval; each host CPU's busy share, per interval), then the window's table.

use super::{figure, MAX_LINES};
use crate::metrics::document::StreamDocument;
use crate::metrics::figures::{CpuFigures, IntervalCpu};
use crate::report::chart::escape;
use crate::report::chart::plot::{lines_or_band, Line, Plot, Quantity, Style};
use std::fmt::Write as _;

pub(super) const CPU_NOTE: &str = "Busy share of each host CPU over the window (user+nice+system+irq+softirq+steal from /proc/stat, read at the window's ends), \
and each queue thread's CPU time (its /proc task stat).";
const SIDES_NOTE: &str = "Per interval, on each side's own host: all its CPUs' busy time summed \
(user+nice+system+irq+softirq+steal from /proc/stat; 100% = one CPU busy throughout) and the side's queue threads' \
user+system time (their /proc task stat). The sampler reads both at each interval's end, as it reads the byte counters.";

/// Each side's per-interval CPU, if the document has it: (side, [(interval end, CPU)]).
fn per_side(doc: &StreamDocument) -> Vec<(&'static str, Vec<(f64, &IntervalCpu)>)> {
    let side = |pick: fn(&crate::metrics::document::BySide<Option<IntervalCpu>>) -> Option<&IntervalCpu>| {
        doc.intervals.iter().filter_map(|iv| iv.cpu.as_ref().and_then(pick).map(|c| (iv.end, c))).collect::<Vec<_>>()
    };
    [("sender", side(|c| c.sender.as_ref())), ("receiver", side(|c| c.receiver.as_ref()))]
        .into_iter()
        .filter(|(_, v)| super::over_time(v.len()))
        .collect()
}

/// The CPU heading, the charts over time (when the intervals carry CPU), the window's table and
/// CPU per byte.
pub(super) fn section(out: &mut String, doc: &StreamDocument, prefix: &str) {
    let _ = writeln!(out, "<h2>CPU</h2>");
    let sides = per_side(doc);
    if !sides.is_empty() {
        over_time(out, &sides, prefix);
    }
    cpu_table(out, &[("sender", Some(&doc.cpu.sender)), ("receiver", doc.cpu.receiver.as_ref())], prefix);
    for (side, per) in [("sender", doc.cpu.sender_per_byte), ("receiver", doc.cpu.receiver_per_byte)] {
        if let Some(p) = per {
            let cycles = p.cycles_per_byte.map_or(String::new(), |c| format!(", {c:.2} cycles per byte"));
            let _ = writeln!(out, "<p>{side}: {:.3} CPU-seconds per GB{cycles}</p>", p.cpu_seconds_per_gb);
        }
    }
    let _ = writeln!(out, "<p class=\"note\"><small>{}</small></p>", escape(CPU_NOTE));
}

/// Each side's CPU per interval (the host's busy CPUs and the queue threads' share), and per
/// core of each side's host.
pub(super) fn over_time(out: &mut String, sides: &[(&str, Vec<(f64, &IntervalCpu)>)], prefix: &str) {
    let x = || Quantity::new("time into the window", "s");
    let mut lines = Vec::new();
    for (side, cpu) in sides {
        lines.push(Line {
            key: format!("{side}-host"),
            name: format!("{side} host, all CPUs"),
            style: Style::Bold,
            points: cpu.iter().map(|(x, c)| (*x, c.host_busy() * 100.0)).collect(),
        });
        lines.push(Line {
            key: format!("{side}-threads"),
            name: format!("{side} queue threads"),
            style: Style::Dashed,
            points: cpu.iter().map(|(x, c)| (*x, c.threads * 100.0)).collect(),
        });
    }
    let plot = Plot {
        id: format!("{prefix}plot-cpu-sides"),
        title: "CPU per side".into(),
        x: x(),
        y: Quantity::new("busy, 100 = one CPU", "%"),
        lines,
        band: None,
    };
    figure(out, &format!("{prefix}cpu-sides"), &plot.svg_element(), SIDES_NOTE);
    for (side, cpu) in sides {
        let xs: Vec<f64> = cpu.iter().map(|(x, _)| *x).collect();
        let mut ids: Vec<usize> = cpu.iter().flat_map(|(_, c)| c.host.iter().map(|h| h.cpu)).collect();
        ids.sort_unstable();
        ids.dedup();
        let series = ids
            .iter()
            .map(|&id| {
                let busy = cpu
                    .iter()
                    // Documents written before shares were taken over the CPU's own ticks
                    // hold readings a hair over 100% (ticks over wall-clock seconds).
                    .map(|(_, c)| {
                        c.host.iter().find(|h| h.cpu == id).map_or(f64::NAN, |h| (h.utilization * 100.0).min(100.0))
                    })
                    .collect();
                (format!("{side}-cpu-{id}"), format!("cpu{id}"), busy)
            })
            .collect();
        let (lines, band) = lines_or_band(&xs, series, MAX_LINES, |n| format!("{n} CPUs: min, median, max"));
        let plot = Plot {
            id: format!("{prefix}plot-cpu-cores-{side}"),
            title: format!("CPU per core, {side}'s host"),
            x: x(),
            y: Quantity::new("busy", "%"),
            lines,
            band,
        };
        let note = format!(
            "Per interval, each CPU of the {side}'s host: its busy share (user+nice+system+irq+softirq+steal from \
             /proc/stat, read at each interval's end): a line per CPU, or past {MAX_LINES} CPUs the least busy, \
             the median and the busiest CPU at each interval: busy ticks over the CPU's own ticks between the two \
             reads, as top takes it (an older document's reading over 100% is drawn at 100%)."
        );
        figure(out, &format!("{prefix}cpu-cores-{side}"), &plot.svg_element(), &note);
    }
}

/// Each side's host CPUs with bars, and the queue threads that ran on each.
pub(super) fn cpu_table(out: &mut String, sides: &[(&str, Option<&CpuFigures>)], prefix: &str) {
    let _ = writeln!(out, "<div class=\"scroll\"><table id=\"{prefix}cpu\"><tr><th>side</th><th>CPU</th><th>busy</th><th>softirq</th><th>queue threads on it</th></tr>");
    for &(side, figs) in sides {
        let Some(figs) = figs else { continue };
        for h in &figs.host {
            let threads: Vec<String> = figs
                .threads
                .iter()
                .filter(|t| t.cpu == h.cpu)
                .map(|t| {
                    format!(
                        "queues {:?}: {:.0}% (usr {:.2} s, sys {:.2} s)",
                        t.queues,
                        t.utilization * 100.0,
                        t.user_seconds,
                        t.system_seconds
                    )
                })
                .collect();
            let pct = (h.utilization * 100.0).clamp(0.0, 100.0);
            let _ = writeln!(
                out,
                "<tr><td>{side}</td><td>cpu{}</td><td class=\"num\"><span class=\"bar\" style=\"width:{:.0}px\"></span> {pct:.0}%</td><td class=\"num\">{:.2} s</td><td>{}</td></tr>",
                h.cpu,
                pct,
                h.softirq_seconds,
                escape(&threads.join("; "))
            );
        }
    }
    let _ = writeln!(out, "</table></div>");
}
