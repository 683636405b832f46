//! Measured values against a numeric x (seconds into the window, mostly): lines, and for many
//! series a min/median/max band instead of hundreds of lines. Both axes carry their unit with an
//! SI prefix chosen from the data ([`UnitAxis`]); the y axis starts at 0 so heights compare.
//!
//! Every element a reader or a test looks for has a stable class: `series` (one per line, with
//! `data-key`, `data-name` and `data-points`), `band` (with `data-series`, the number of series
//! it stands for), `axis-label`, `tick`. Points of emphasised lines carry a `<title>`, the value
//! a browser shows on hover, so the page needs no script for it.

use super::scale::{si, UnitAxis};
use super::{escape, PALETTE};
use std::fmt::Write as _;

/// How a line is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// A headline series: thick, with hover values at its points.
    Bold,
    /// One of many (a queue): thin.
    Thin,
    /// A reference (the sender's offered rate): dashed, with hover values.
    Dashed,
}

/// One named line.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    /// Stable identifier, unique in the plot (`sum`, `queue-3`).
    pub key: String,
    /// Legend text.
    pub name: String,
    pub style: Style,
    pub points: Vec<(f64, f64)>,
}

/// The spread of many series at each x: lowest, median and highest.
#[derive(Debug, Clone, PartialEq)]
pub struct Band {
    /// Legend text.
    pub name: String,
    /// How many series it summarises.
    pub series: usize,
    /// `(x, min, median, max)`.
    pub points: Vec<(f64, f64, f64, f64)>,
}

impl Band {
    /// The band over `series`, each a value per x position (all of the same length as `xs`).
    pub fn of(name: impl Into<String>, xs: &[f64], series: &[Vec<f64>]) -> Self {
        let points = xs
            .iter()
            .enumerate()
            .filter_map(|(i, &x)| {
                let mut v: Vec<f64> =
                    series.iter().filter_map(|s| s.get(i).copied()).filter(|v| v.is_finite()).collect();
                v.sort_by(f64::total_cmp);
                let median = match v.len() {
                    0 => return None,
                    n if n % 2 == 1 => v[n / 2],
                    n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
                };
                Some((x, v[0], median, v[v.len() - 1]))
            })
            .collect();
        Self { name: name.into(), series: series.len(), points }
    }
}

/// Thin lines for `series` (key, legend name, a value per x in `xs`) up to `max_lines` of them;
/// past that, no lines but their min/median/max band, named by `band_name(count)`.
pub fn lines_or_band(
    xs: &[f64],
    series: Vec<(String, String, Vec<f64>)>,
    max_lines: usize,
    band_name: impl FnOnce(usize) -> String,
) -> (Vec<Line>, Option<Band>) {
    if series.len() > max_lines {
        let values: Vec<Vec<f64>> = series.into_iter().map(|(_, _, v)| v).collect();
        return (Vec::new(), Some(Band::of(band_name(values.len()), xs, &values)));
    }
    let lines = series
        .into_iter()
        .map(|(key, name, values)| Line {
            key,
            name,
            style: Style::Thin,
            points: xs.iter().copied().zip(values).collect(),
        })
        .collect();
    (lines, None)
}

/// A quantity and its unit (`throughput`, `bit/s`); the unit gains its prefix on the axis.
#[derive(Debug, Clone, PartialEq)]
pub struct Quantity {
    pub label: String,
    pub unit: String,
}

impl Quantity {
    pub fn new(label: impl Into<String>, unit: impl Into<String>) -> Self {
        Self { label: label.into(), unit: unit.into() }
    }
}

/// A plot: lines and at most one band against a numeric x.
#[derive(Debug, Clone, PartialEq)]
pub struct Plot {
    /// The `<svg>` element's id, unique in a page.
    pub id: String,
    pub title: String,
    pub x: Quantity,
    pub y: Quantity,
    pub lines: Vec<Line>,
    pub band: Option<Band>,
}

const WIDTH: f64 = 880.0;
const LEFT: f64 = 72.0;
const RIGHT: f64 = WIDTH - 24.0;
const PLOT_HEIGHT: f64 = 240.0;
const LEGEND_ROW: f64 = 18.0;
/// Points drawn with a visible marker up to this many per line; beyond, markers only catch hover.
const VISIBLE_MARKERS: usize = 120;

/// Where each value lands.
struct Frame {
    x: UnitAxis,
    y: UnitAxis,
    top: f64,
    bottom: f64,
}

impl Frame {
    fn px(&self, x: f64) -> f64 {
        LEFT + (RIGHT - LEFT) * (x / self.x.top).clamp(0.0, 1.0)
    }
    fn py(&self, y: f64) -> f64 {
        self.bottom - (self.bottom - self.top) * (y / self.y.top).clamp(0.0, 1.0)
    }
}

impl Plot {
    fn legend_entries(&self) -> Vec<(String, &'static str, &'static str)> {
        let mut entries: Vec<(String, &'static str, &'static str)> = self
            .lines
            .iter()
            .enumerate()
            .map(|(n, l)| (l.name.clone(), PALETTE[n % PALETTE.len()], dash(l.style)))
            .collect();
        if let Some(b) = &self.band {
            entries.push((b.name.clone(), BAND_COLOUR, ""));
        }
        entries
    }

    /// Legend rows: entries laid out left to right, wrapping at the plot's width.
    fn legend_rows(&self) -> Vec<Vec<(f64, String, &'static str, &'static str)>> {
        let mut rows: Vec<Vec<(f64, String, &'static str, &'static str)>> = vec![Vec::new()];
        let mut x = LEFT;
        for (name, colour, dash) in self.legend_entries() {
            let w = 30.0 + 6.5 * name.chars().count() as f64;
            if x + w > RIGHT && x > LEFT {
                rows.push(Vec::new());
                x = LEFT;
            }
            rows.last_mut().expect("one row at least").push((x, name, colour, dash));
            x += w + 8.0;
        }
        rows
    }

    fn frame(&self, legend_rows: usize) -> Frame {
        let values = self.lines.iter().flat_map(|l| l.points.iter().copied());
        let band = self.band.iter().flat_map(|b| b.points.iter().map(|p| (p.0, p.3)));
        let (xmax, ymax) = values
            .chain(band)
            .filter(|(x, y)| x.is_finite() && y.is_finite())
            .fold((0.0f64, 0.0f64), |(a, b), (x, y)| (a.max(x), b.max(y)));
        let top = 40.0 + LEGEND_ROW * legend_rows as f64;
        Frame {
            x: UnitAxis::new(xmax, &self.x.unit),
            y: UnitAxis::new(ymax, &self.y.unit),
            top,
            bottom: top + PLOT_HEIGHT,
        }
    }

    /// The `<svg>` element: title, legend, axes with their units, the band, the lines.
    pub fn svg_element(&self) -> String {
        let rows = self.legend_rows();
        let frame = self.frame(rows.len());
        let height = frame.bottom + 50.0;
        let mut s = String::new();
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" class="plot" id="{}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12" role="img" aria-label="{}">"#,
            escape(&self.id),
            escape(&self.title)
        );
        let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
        let _ = writeln!(s, r#"<text class="title" x="{LEFT}" y="20" font-size="15">{}</text>"#, escape(&self.title));
        legend(&mut s, &rows);
        self.axes(&mut s, &frame);
        if let Some(b) = &self.band {
            band(&mut s, &frame, b);
        }
        for (n, line) in self.lines.iter().enumerate() {
            self.line(&mut s, &frame, n, line);
        }
        if self.lines.iter().all(|l| l.points.is_empty()) && self.band.as_ref().is_none_or(|b| b.points.is_empty()) {
            let _ = writeln!(
                s,
                r##"<text x="{}" y="{}" text-anchor="middle" fill="#555">no data in this document</text>"##,
                (LEFT + RIGHT) / 2.0,
                (frame.top + frame.bottom) / 2.0
            );
        }
        let _ = writeln!(s, "</svg>");
        s
    }

    /// Grid, ticks and both axis labels with their prefixed units.
    fn axes(&self, s: &mut String, f: &Frame) {
        let _ = writeln!(s, r##"<g class="axes" stroke="#000">"##);
        for (v, label) in &f.y.ticks {
            let y = f.py(*v);
            let _ = writeln!(s, r##"<line x1="{LEFT}" y1="{y:.1}" x2="{RIGHT}" y2="{y:.1}" stroke="#e3e3e3"/>"##);
            let _ = writeln!(
                s,
                r#"<text class="tick" x="{}" y="{:.1}" text-anchor="end" stroke="none">{label}</text>"#,
                LEFT - 6.0,
                y + 4.0
            );
        }
        for (v, label) in &f.x.ticks {
            let x = f.px(*v);
            let _ = writeln!(s, r#"<line x1="{x:.1}" y1="{}" x2="{x:.1}" y2="{}"/>"#, f.bottom, f.bottom + 4.0);
            let _ = writeln!(
                s,
                r#"<text class="tick" x="{x:.1}" y="{}" text-anchor="middle" stroke="none">{label}</text>"#,
                f.bottom + 17.0
            );
        }
        let _ = writeln!(s, r#"<line x1="{LEFT}" y1="{}" x2="{LEFT}" y2="{}"/>"#, f.top, f.bottom);
        let _ = writeln!(s, r#"<line x1="{LEFT}" y1="{0}" x2="{RIGHT}" y2="{0}"/>"#, f.bottom);
        let _ = writeln!(
            s,
            r#"<text class="axis-label" data-axis="x" x="{}" y="{}" text-anchor="middle" stroke="none">{}</text>"#,
            (LEFT + RIGHT) / 2.0,
            f.bottom + 36.0,
            escape(&axis_text(&self.x, &f.x))
        );
        let mid = (f.top + f.bottom) / 2.0;
        let _ = writeln!(
            s,
            r#"<text class="axis-label" data-axis="y" x="16" y="{mid:.1}" transform="rotate(-90 16 {mid:.1})" text-anchor="middle" stroke="none">{}</text>"#,
            escape(&axis_text(&self.y, &f.y))
        );
        let _ = writeln!(s, "</g>");
    }

    fn line(&self, s: &mut String, f: &Frame, n: usize, line: &Line) {
        let colour = PALETTE[n % PALETTE.len()];
        let width = match line.style {
            Style::Bold => 2.5,
            Style::Dashed => 2.0,
            Style::Thin => 1.0,
        };
        let points: Vec<(f64, f64)> =
            line.points.iter().copied().filter(|(x, y)| x.is_finite() && y.is_finite()).collect();
        let _ = writeln!(
            s,
            r#"<g class="series" data-key="{}" data-name="{}" data-points="{}" stroke="{colour}" fill="{colour}">"#,
            escape(&line.key),
            escape(&line.name),
            points.len()
        );
        let coords: Vec<String> = points.iter().map(|(x, y)| format!("{:.1},{:.1}", f.px(*x), f.py(*y))).collect();
        let _ = writeln!(
            s,
            r#"<polyline fill="none" stroke-width="{width}"{} points="{}"><title>{}</title></polyline>"#,
            dash_attr(line.style),
            coords.join(" "),
            escape(&line.name)
        );
        if line.style != Style::Thin {
            let r = if points.len() <= VISIBLE_MARKERS { 2.5 } else { 0.0 };
            let x_unit = &self.x.unit;
            for (x, y) in &points {
                let _ = writeln!(
                    s,
                    r#"<circle cx="{:.1}" cy="{:.1}" r="{r}" stroke="none"><title>{}: {} at {}</title></circle>"#,
                    f.px(*x),
                    f.py(*y),
                    escape(&line.name),
                    escape(&si(*y, &self.y.unit)),
                    escape(&si(*x, x_unit))
                );
            }
        }
        let _ = writeln!(s, "</g>");
    }
}

/// Grey: the band is context for the lines drawn over it, not one of them.
const BAND_COLOUR: &str = "#888888";

fn dash(style: Style) -> &'static str {
    if style == Style::Dashed {
        "6 4"
    } else {
        ""
    }
}

fn dash_attr(style: Style) -> String {
    match dash(style) {
        "" => String::new(),
        d => format!(r#" stroke-dasharray="{d}""#),
    }
}

/// `throughput (Gbit/s)`.
fn axis_text(q: &Quantity, axis: &UnitAxis) -> String {
    if axis.unit.is_empty() {
        q.label.clone()
    } else {
        format!("{} ({})", q.label, axis.unit)
    }
}

fn legend(s: &mut String, rows: &[Vec<(f64, String, &'static str, &'static str)>]) {
    let _ = writeln!(s, r#"<g class="legend">"#);
    for (r, row) in rows.iter().enumerate() {
        let y = 38.0 + LEGEND_ROW * r as f64;
        for (x, name, colour, dash) in row {
            let dash = if dash.is_empty() { String::new() } else { format!(r#" stroke-dasharray="{dash}""#) };
            let _ = writeln!(
                s,
                r#"<line x1="{x:.1}" y1="{0:.1}" x2="{1:.1}" y2="{0:.1}" stroke="{colour}" stroke-width="3"{dash}/><text x="{2:.1}" y="{3:.1}">{4}</text>"#,
                y - 4.0,
                x + 20.0,
                x + 25.0,
                y,
                escape(name)
            );
        }
    }
    let _ = writeln!(s, "</g>");
}

/// The band: a shaded area from min to max and its median as a line.
fn band(s: &mut String, f: &Frame, b: &Band) {
    let upper = b.points.iter().map(|p| format!("{:.1},{:.1}", f.px(p.0), f.py(p.3)));
    let lower = b.points.iter().rev().map(|p| format!("{:.1},{:.1}", f.px(p.0), f.py(p.1)));
    let outline: Vec<String> = upper.chain(lower).collect();
    let median: Vec<String> = b.points.iter().map(|p| format!("{:.1},{:.1}", f.px(p.0), f.py(p.2))).collect();
    let _ = writeln!(
        s,
        r#"<g class="band" data-series="{}" data-name="{}"><polygon points="{}" fill="{BAND_COLOUR}" fill-opacity="0.25" stroke="none"/><polyline points="{}" fill="none" stroke="{BAND_COLOUR}" stroke-width="1.5"><title>{}</title></polyline></g>"#,
        b.series,
        escape(&b.name),
        outline.join(" "),
        median.join(" "),
        escape(&b.name)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> Plot {
        Plot {
            id: "throughput".into(),
            title: "Throughput <per interval>".into(),
            x: Quantity::new("time", "s"),
            y: Quantity::new("throughput", "bit/s"),
            lines: vec![
                Line {
                    key: "sum".into(),
                    name: "received".into(),
                    style: Style::Bold,
                    points: vec![(1.0, 9.1e9), (2.0, 9.4e9)],
                },
                Line {
                    key: "offered".into(),
                    name: "offered".into(),
                    style: Style::Dashed,
                    points: vec![(1.0, 9.2e9), (2.0, 9.4e9)],
                },
            ],
            band: Some(Band::of(
                "per queue",
                &[1.0, 2.0],
                &[vec![4.0e9, 4.5e9], vec![5.1e9, 4.9e9], vec![1.0e9, f64::NAN]],
            )),
        }
    }

    /// The whole SVG of a small plot against a file kept in the repository: any change to the
    /// drawing shows up as a diff to review. UPDATE_GOLDEN=1 rewrites the file.
    #[test]
    fn golden_small_plot() {
        let svg = small().svg_element();
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/small-plot.svg");
        if std::env::var_os("UPDATE_GOLDEN").is_some() {
            std::fs::write(path, &svg).unwrap();
        }
        let want = std::fs::read_to_string(path).expect("golden file (UPDATE_GOLDEN=1 writes it)");
        assert_eq!(svg, want, "the plot's SVG changed; review it and rerun with UPDATE_GOLDEN=1");
    }

    #[test]
    fn units_series_and_band() {
        let svg = small().svg_element();
        assert!(svg.contains(">throughput (Gbit/s)</text>") && svg.contains(">time (s)</text>"), "{svg}");
        assert_eq!(svg.matches(r#"class="series""#).count(), 2);
        assert!(svg.contains(r#"data-series="3""#));
        assert!(svg.contains("received: 9.40 Gbit/s at 2.00 s"));
        assert!(svg.contains("Throughput &lt;per interval&gt;"));
        assert!(!svg.contains("NaN"));
        assert_eq!(svg.matches("<g").count(), svg.matches("</g>").count());
    }

    #[test]
    fn band_takes_min_median_max_and_skips_missing() {
        let b = Band::of("b", &[1.0, 2.0, 3.0], &[vec![1.0, 4.0], vec![3.0, 2.0], vec![2.0, f64::NAN]]);
        assert_eq!(b.points, vec![(1.0, 1.0, 2.0, 3.0), (2.0, 2.0, 3.0, 4.0)]);
        assert_eq!(b.series, 3);
    }

    #[test]
    fn empty_plot_says_so() {
        let p = Plot { lines: vec![], band: None, ..small() };
        assert!(p.svg_element().contains("no data in this document"));
    }
}
