//! The fleet matrix as an SVG heatmap: senders down, receivers across, one matrix per kind of
//! address (and per plan entry, when there are several), each cell the median received
//! Gbit/s of that ordered pair. Failed pairs are
//! marked, the diagonal (a host to itself) is greyed out. Cells carry `data-*` attributes so
//! tests and scripts can read the figures back.

use super::FleetReport;
use crate::report::chart::escape;

const CELL: f64 = 64.0;
const LABEL: f64 = 120.0;
const TOP: f64 = 60.0;
const GAP: f64 = 50.0;

/// Blue, lighter for lower rates (white at 0, full at `max`).
fn shade(value: f64, max: f64) -> String {
    let t = if max > 0.0 { (value / max).clamp(0.0, 1.0) } else { 0.0 };
    let mix = |full: f64| (255.0 - (255.0 - full) * t).round() as u8;
    format!("#{:02x}{:02x}{:02x}", mix(31.0), mix(119.0), mix(180.0))
}

/// The heatmap document: the title, one matrix per (plan entry, address), the note.
pub fn to_svg(report: &FleetReport) -> String {
    let mut s = String::new();
    let _ = write_svg(report, &mut s);
    s
}

/// [`to_svg`] written as it is made (a million cells go into the file, not a string first).
pub fn write_svg(report: &FleetReport, s: &mut dyn std::fmt::Write) -> std::fmt::Result {
    let mut seen = std::collections::HashSet::new();
    let hosts: Vec<&str> = report
        .pairs
        .iter()
        .flat_map(|p| [p.sender.as_str(), p.receiver.as_str()])
        .filter(|h| seen.insert(*h))
        .collect();
    let mut blocks: Vec<(&str, &str)> = Vec::new();
    for p in &report.pairs {
        if !blocks.contains(&(p.entry.as_str(), p.address.as_str())) {
            blocks.push((&p.entry, &p.address));
        }
    }
    let several_entries = blocks.iter().any(|b| b.0 != blocks[0].0);
    let n = hosts.len() as f64;
    let block = LABEL + n * CELL + GAP;
    let title = format!("uringbench fleet: median received Gbit/s, {} runs", report.runs.len());
    // Wide enough for the title too (16 px sans-serif, about 9 px a character): with two or
    // three hosts the matrices alone are narrower than it, and the title was cut off.
    let width = (block * blocks.len().max(1) as f64).max(20.0 + 9.0 * title.chars().count() as f64).max(360.0);
    let height = TOP + LABEL + n * CELL + 40.0;
    let max = report
        .pairs
        .iter()
        .filter_map(|p| p.figures.receiver_bits_per_second.map(|s| s.median / 1e9))
        .fold(0.0, f64::max);
    let pairs = report.pairs.iter().map(|p| ((&*p.entry, &*p.sender, &*p.receiver, &*p.address), p)).collect();
    let m = Matrices { hosts, several_entries, max, pairs };
    writeln!(s, r#"<?xml version="1.0" encoding="UTF-8"?>"#)?;
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(s, r#"<text id="title" x="10" y="22" font-size="16">{title}</text>"#);
    // The axes on a line of their own: with two or three hosts the picture is narrower than
    // one long title line.
    let _ = writeln!(s, r#"<text id="axes" x="10" y="38">sender (rows) to receiver (columns)</text>"#);
    for (b, (entry, addr)) in blocks.iter().enumerate() {
        m.matrix(s, b as f64 * block + LABEL, entry, addr);
    }
    let _ = writeln!(
        s,
        r#"<text id="note" x="10" y="{}">* some runs of the pair failed; grey: not planned</text>"#,
        height - 14.0
    );
    writeln!(s, "</svg>")
}

/// What every matrix shares: the hosts in order, whether matrices are told apart
/// by plan entry, and the rate of the darkest cell.
struct Matrices<'a> {
    hosts: Vec<&'a str>,
    several_entries: bool,
    max: f64,
    /// Each pair by (entry, sender, receiver, address): a cell's lookup, not a search.
    pairs: std::collections::HashMap<(&'a str, &'a str, &'a str, &'a str), &'a super::PairSummary>,
}

impl Matrices<'_> {
    /// One matrix at `x0`: its caption, the host labels, a cell per ordered pair.
    fn matrix(&self, s: &mut dyn std::fmt::Write, x0: f64, entry: &str, addr: &str) {
        let y0 = TOP + LABEL;
        let several_entries = self.several_entries;
        let id = if several_entries { format!("{entry}-{addr}") } else { addr.to_string() };
        let _ = writeln!(
            s,
            r#"<g class="heatmap" id="heatmap-{}" data-entry="{}" data-address="{}">"#,
            escape(&id),
            escape(entry),
            escape(addr)
        );
        let caption = if several_entries { format!("{entry}, {addr} address") } else { format!("{addr} address") };
        let _ = writeln!(s, r#"<text x="{x0}" y="{}" font-size="14">{}</text>"#, TOP - 10.0, escape(&caption));
        self.host_labels(s, x0, y0);
        for (i, snd) in self.hosts.iter().enumerate() {
            for (j, rcv) in self.hosts.iter().enumerate() {
                self.cell(s, (entry, addr), snd, rcv, x0 + j as f64 * CELL, y0 + i as f64 * CELL);
            }
        }
        let _ = writeln!(s, "</g>");
    }

    /// Senders down the left, receivers slanted across the top.
    fn host_labels(&self, s: &mut dyn std::fmt::Write, x0: f64, y0: f64) {
        for (i, h) in self.hosts.iter().enumerate() {
            let h = escape(h);
            let _ = writeln!(
                s,
                r#"<text class="sender" x="{}" y="{:.1}" text-anchor="end">{h}</text>"#,
                x0 - 6.0,
                y0 + (i as f64 + 0.5) * CELL + 4.0
            );
            let cx = x0 + (i as f64 + 0.5) * CELL;
            let _ = writeln!(
                s,
                r#"<text class="receiver" x="{cx:.1}" y="{:.1}" transform="rotate(-45 {cx:.1} {:.1})">{h}</text>"#,
                y0 - 8.0,
                y0 - 8.0
            );
        }
    }

    /// The cell of one ordered pair at (`x`, `y`): its median shaded, or marked failed or
    /// not planned.
    fn cell(&self, s: &mut dyn std::fmt::Write, (entry, addr): (&str, &str), snd: &str, rcv: &str, x: f64, y: f64) {
        let max = self.max;
        let pair = self.pairs.get(&(entry, snd, rcv, addr)).copied();
        let attrs = format!(r#"data-sender="{}" data-receiver="{}""#, escape(snd), escape(rcv));
        let Some(p) = pair else {
            let _ = writeln!(
                s,
                r##"<rect class="unplanned" {attrs} x="{x}" y="{y}" width="{CELL}" height="{CELL}" fill="#eeeeee" stroke="white"/>"##
            );
            return;
        };
        let f = &p.figures;
        let median = f.receiver_bits_per_second.map(|st| st.median / 1e9);
        let fill = median.map_or("#f4a6a6".to_string(), |m| shade(m, max));
        let _ = writeln!(
            s,
            r#"<rect class="cell" {attrs} data-runs="{}" data-complete="{}" data-gbps="{}" x="{x}" y="{y}" width="{CELL}" height="{CELL}" fill="{fill}" stroke="white"><title>{} to {}: {} of {} runs, {}</title></rect>"#,
            f.runs,
            f.complete_runs,
            median.map_or(String::new(), |m| format!("{m:.3}")),
            escape(snd),
            escape(rcv),
            f.complete_runs,
            f.runs,
            median.map_or("failed".to_string(), |m| format!("{m:.2} Gbit/s"))
        );
        let label = match median {
            Some(m) if f.complete_runs == f.runs => format!("{m:.2}"),
            Some(m) => format!("{m:.2}*"),
            None => "failed".into(),
        };
        let color = if median.is_some_and(|m| max > 0.0 && m / max > 0.6) { "white" } else { "black" };
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" fill="{color}">{label}</text>"#,
            x + CELL / 2.0,
            y + CELL / 2.0 + 4.0
        );
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::plan_and_records;
    use super::*;

    #[test]
    fn one_matrix_per_address_with_a_cell_per_pair() {
        let (plan, records) = plan_and_records();
        let report = FleetReport::merge(&plan, &records, None).unwrap();
        let svg = to_svg(&report);
        assert!(svg.starts_with("<?xml") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches(r#"class="heatmap""#).count(), 2);
        assert_eq!(svg.matches(r#"class="cell""#).count(), 12);
        assert_eq!(svg.matches(r#"class="unplanned""#).count(), 6, "the diagonal of each matrix");
        assert!(svg.contains(r#"data-sender="h3" data-receiver="h1" data-runs="2" data-complete="0" data-gbps="""#));
        assert!(svg.contains(r#"data-sender="h2" data-receiver="h3" data-runs="2" data-complete="1""#));
        assert_eq!(svg.matches("<g").count(), svg.matches("</g>").count());
        assert_eq!(shade(0.0, 10.0), "#ffffff");
        assert_eq!(shade(10.0, 10.0), "#1f77b4");
    }
}
