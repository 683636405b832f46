//! The rows of a stream report's tables: interval and window lines' titles, the spans they
//! are shown with, iperf3's `Retr` and `Cwnd` cells, and a row's note when the sender's figures
//! cover another span.

use crate::base::spec::TestSpec;
use crate::base::units::{format_bits_per_second, format_bytes};
use crate::metrics::figures::{rate, IntervalFigures};
use std::fmt::Write as _;

/// Column titles of interval and window lines.
pub const INTERVAL_TITLES: &str = "[ ID] Interval           Offered (sender)               Received (receiver)";

/// The titles of a test's interval lines: TCP adds iperf3's `Retr` and `Cwnd` columns.
pub fn interval_titles(s: &TestSpec) -> String {
    if tcp_columns(s) {
        format!("{INTERVAL_TITLES}{:>17}{:>13}", "Retr", "Cwnd")
    } else {
        INTERVAL_TITLES.to_string()
    }
}

/// Whether a test's lines carry the sender's TCP columns.
pub(crate) fn tcp_columns(s: &TestSpec) -> bool {
    s.proto == crate::base::spec::Proto::Tcp
}

/// The bounds interval `n` is shown with: the planned ones (n x the interval, the last one
/// cut at the window's end) when the samples were taken on time, as iperf shows them, so a
/// late first sample does not read `0.00-0.99`, `0.99-1.99`; the measured ones otherwise (a
/// run stopped early). Rates are always over the measured length.
pub fn shown_span(s: &TestSpec, n: usize, i: &IntervalFigures) -> (f64, f64) {
    let step = s.interval_ms as f64 / 1e3;
    let window = s.time_ms as f64 / 1e3;
    if step <= 0.0 {
        return (i.start, i.end);
    }
    let start = n as f64 * step;
    let end = (start + step).min(window);
    let slack = (step / 4.0).min(0.1);
    if (i.start - start).abs() < slack && (i.end - end).abs() < slack {
        (start, end)
    } else {
        (i.start, i.end)
    }
}

/// The sender's `Retr` and `Cwnd` cells for the flows `pick` selects (by flow number):
/// segments retransmitted in the interval and the congestion windows' bytes at its end,
/// summed; `-` where the interval does not carry them.
fn tcp_cells(offered: Option<&IntervalFigures>, pick: impl Fn(u32) -> bool) -> String {
    let Some(o) = offered else { return format!("  {:>6}  {:>11}", "-", "-") };
    let flows = || (0u32..).zip(&o.tcp_flows).filter(|(f, _)| pick(*f));
    let retr = if o.tcp_retransmits.is_empty() {
        "-".to_string()
    } else {
        (0u32..).zip(&o.tcp_retransmits).filter(|(f, _)| pick(*f)).map(|(_, r)| u64::from(*r)).sum::<u64>().to_string()
    };
    let cwnd = if o.tcp_flows.is_empty() || flows().all(|(_, i)| i.is_none()) {
        "-".to_string()
    } else {
        format_bytes(flows().filter_map(|(_, i)| i.map(|i| u64::from(i.cwnd) * u64::from(i.snd_mss))).sum())
    };
    format!("  {retr:>6}  {cwnd:>11}")
}

/// The lines of interval `n`: one per queue (when there are several) and a `[SUM]` line, each
/// with the sender's offered figures (when known) beside the receiver's, and for TCP the
/// sender's retransmits and congestion window (iperf3's `Retr` and `Cwnd`).
pub fn interval_lines(s: &TestSpec, n: usize, i: &IntervalFigures, offered: Option<&IntervalFigures>) -> String {
    let mut out = String::new();
    let secs = i.end - i.start;
    let (from, to) = shown_span(s, n, i);
    let side = |bytes: Option<u64>, secs: f64| {
        bytes.map_or(format!("{:>12} {:>16}", "-", "-"), |b| {
            format!("{:>12} {:>16}", format_bytes(b), format_bits_per_second(rate(b, secs)))
        })
    };
    let offered_secs = offered.map_or(secs, |o| o.end - o.start);
    let tcp = tcp_columns(s);
    if s.queues > 1 {
        for (q, b) in (0u32..).zip(&i.bytes) {
            let cells = if tcp { tcp_cells(offered, |f| s.queue_of_flow(f) == q) } else { String::new() };
            let _ = writeln!(
                out,
                "[{q:>3}] {from:5.2}-{to:<5.2} sec  {}   {}{cells}",
                side(offered.and_then(|o| o.bytes.get(q as usize).copied()), offered_secs),
                side(Some(*b), secs)
            );
        }
    }
    let tail = match i.udp {
        Some(u) => format!("  lost {}/{} jitter {:.3} ms", u.lost, u.received + u.lost, u.jitter_us / 1000.0),
        None if tcp => tcp_cells(offered, |_| true),
        None => String::new(),
    };
    let _ = writeln!(
        out,
        "[SUM] {from:5.2}-{to:<5.2} sec  {}   {}{tail}{}",
        side(offered.map(|o| o.sum()), offered_secs),
        side(Some(i.sum()), secs),
        offered.map_or(String::new(), |_| other_span(offered_secs, secs)),
    );
    out
}

/// How far apart (as a share of the row's span) the sender's span may be before a row says it:
/// each end samples on its own clock, a few hundredths of a second apart on a busy host.
const SPAN_TOLERANCE: f64 = 0.05;

/// A row states one span: when the sender's figures beside the receiver's cover a span of
/// their own (a sender that ended early, or whose clock read the edges apart), the row says
/// it instead of showing two rates over different spans as one.
pub(crate) fn other_span(offered_secs: f64, row_secs: f64) -> String {
    if (offered_secs - row_secs).abs() > SPAN_TOLERANCE * row_secs.max(0.001) {
        format!("  (offered over the sender's {offered_secs:.2} s)")
    } else {
        String::new()
    }
}
