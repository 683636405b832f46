//! The text of `send --latency`'s figures: the summary block after the window and the line
//! after each live interval.

use crate::base::units::format_bytes;
use crate::metrics::latency::{LatencyInterval, RttFigures, WorkingLatency};
use std::fmt::Write as _;

fn rtt_figures(f: &RttFigures) -> String {
    format!(
        "p50 {:.2} ms  p90 {:.2} ms  p99 {:.2} ms  max {:.2} ms  ({} probes)",
        f.p50_ms, f.p90_ms, f.p99_ms, f.max_ms, f.count
    )
}

/// The summary block: idle, loaded, the inflation, RPM and the probe's own bytes.
pub fn latency_lines(l: &WorkingLatency) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "latency: {} probe, {} B each way every {:.0} ms, its {} sent and {} received not in the figures above",
        l.proto,
        l.probe_bytes,
        l.gap_ms,
        format_bytes(l.bytes_sent),
        format_bytes(l.bytes_received)
    );
    let _ = writeln!(out, "  idle:      {}", rtt_figures(&l.idle));
    let _ = writeln!(out, "  loaded:    {}", rtt_figures(&l.loaded));
    let _ = writeln!(
        out,
        "  inflation: p50 {:+.2} ms  p90 {:+.2} ms  p99 {:+.2} ms; responsiveness {:.0} RPM loaded, {:.0} RPM idle",
        l.inflation.p50_ms, l.inflation.p90_ms, l.inflation.p99_ms, l.rpm, l.idle_rpm
    );
    if let Some(c) = &l.cpu {
        let answer = c
            .answer_seconds
            .map_or("answering not reported by the receiver".to_string(), |a| format!("answering {a:.4} CPU-s"));
        let pct = |s: Option<f64>| s.map_or("-".to_string(), |s| format!("{:.2}%", s * 100.0));
        let _ = writeln!(
            out,
            "  cost:      probe {:.4} CPU-s, {answer} in the window: {} of the load threads' {:.3} CPU-s, {} of the receiving host's busy {:.3} CPU-s",
            c.probe_seconds,
            pct(c.share),
            c.load_seconds,
            pct(c.host_share),
            c.host_seconds
        );
    }
    if let Some(t) = &l.trip_times {
        let _ = writeln!(out, "  {}", t.line());
    }
    if l.lost > 0 {
        let _ = writeln!(out, "  {} probes unanswered within 1 s (lost)", l.lost);
    }
    if let Some(e) = &l.error {
        let _ = writeln!(out, "  probe ended early: {e}");
    }
    out
}

/// The line after a live interval: its probes' round trips.
pub fn latency_interval_line(iv: &LatencyInterval) -> String {
    format!(
        "[LAT] {:>5.2}-{:<5.2} sec  rtt p50 {:.2} ms  p90 {:.2} ms  p99 {:.2} ms  max {:.2} ms  {:.0} RPM  ({} probes)",
        iv.start, iv.end, iv.rtt.p50_ms, iv.rtt.p90_ms, iv.rtt.p99_ms, iv.rtt.max_ms, iv.rpm, iv.rtt.count
    )
}
