//! Exports beyond the single-run report: CSV.
//!
//! CSV has one row per queue and per sum, for every interval and for the whole window, so a
//! spreadsheet gets the same figures as the text report. The columns are fixed (see
//! [`CSV_HEADER`]) and documented in docs/output.md.

use crate::metrics::figures::{rate, StreamReport};
use std::fmt::Write as _;

/// Columns of the CSV export.
pub const CSV_HEADER: &str = "run,kind,start,end,queue,receiver_bytes,receiver_bits_per_second,sender_bytes,sender_bits_per_second,retransmits,rtt_us,cwnd,udp_lost,udp_expected";

/// A sum row's UDP datagrams lost and expected over its span (empty cells without UDP).
fn udp_cells(lost_expected: Option<(u64, u64)>) -> String {
    lost_expected.map_or(",".into(), |(lost, expected)| format!("{lost},{expected}"))
}

/// CSV rows of one run (without the header). `run` numbers runs from 1.
pub fn csv_rows(run: usize, report: &StreamReport) -> String {
    let mut out = String::new();
    let recv = report.receiver.as_ref();
    let send = &report.sender;
    let nq = report.spec.queues as usize;
    let intervals = recv.map(|r| r.intervals.as_slice()).unwrap_or_default();
    for (i, iv) in intervals.iter().enumerate() {
        let siv = send.intervals.get(i);
        let len = iv.end - iv.start;
        let tcp = siv.map(|s| &s.tcp);
        for q in 0..nq {
            let sb = siv.map_or(0, |s| s.bytes[q]);
            let _ = writeln!(
                out,
                "{run},interval,{:.3},{:.3},{q},{},{:.0},{sb},{:.0},,,,,",
                iv.start,
                iv.end,
                iv.bytes[q],
                rate(iv.bytes[q], len),
                rate(sb, siv.map_or(0.0, |s| s.end - s.start))
            );
        }
        let sb: u64 = siv.map_or(0, |s| s.sum());
        let _ = writeln!(
            out,
            "{run},interval,{:.3},{:.3},sum,{},{:.0},{sb},{:.0},{},{:.0},{:.1},{}",
            iv.start,
            iv.end,
            iv.sum(),
            iv.bits_per_second(),
            siv.map_or(0.0, |s| s.bits_per_second()),
            tcp.map_or(0, |t| t.retransmitted_segments),
            tcp.map_or(0.0, |t| t.rtt_mean_us),
            tcp.map_or(0.0, |t| t.cwnd_mean),
            udp_cells(iv.udp.map(|u| (u.lost, u.expected))),
        );
    }
    let window = recv.map_or(send.window_seconds, |r| r.window_seconds);
    for q in 0..nq {
        let rb = recv.map_or(0, |r| r.queues[q].bytes);
        let sb = send.queues[q].bytes;
        let _ = writeln!(
            out,
            "{run},window,0.000,{window:.3},{q},{rb},{:.0},{sb},{:.0},,,,,",
            rate(rb, window),
            rate(sb, send.window_seconds)
        );
    }
    let _ = writeln!(
        out,
        "{run},window,0.000,{window:.3},sum,{},{:.0},{},{:.0},{},{:.0},{:.1},{}",
        recv.map_or(0, |r| r.bytes()),
        recv.map_or(0.0, |r| r.bits_per_second()),
        send.bytes(),
        send.bits_per_second(),
        send.tcp.retransmitted_segments,
        send.tcp.rtt_mean_us,
        send.tcp.cwnd_mean,
        udp_cells(recv.and_then(|r| r.udp.as_ref()?.window).map(|w| (w.lost, w.expected))),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_and_rows_have_the_same_number_of_columns() {
        let columns = CSV_HEADER.split(',').count();
        assert_eq!(columns, 14);
        let row = "1,interval,0.000,1.000,0,10,80,10,80,,,,,";
        assert_eq!(row.split(',').count(), columns, "empty TCP columns still count");
    }
}
