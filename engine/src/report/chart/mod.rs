//! A small SVG line chart for sweeps and saved reports: categories along x (queue counts,
//! message lengths, rates, runs or intervals), one or two y axes (Gbit/s on the left, CPU
//! per GB on the right), a line per series and a min–max bar at every point.
//!
//! [`plot`] draws measured values against time (or any numeric x) with SI-prefixed unit axes,
//! per-series lines or a min/median/max band; [`scale`] holds the ticks and prefixes both use.
//!
//! Hand-written rather than a plotting crate: the chart has one shape, the SVG is a few
//! hundred lines of plain text with stable `id`/`class`/`data-*` attributes that tests and
//! scripts can read back, and text needs no font files (a crate that measures text does).

use scale::{fmt_tick, nice_scale};
use std::fmt::Write as _;

pub mod plot;
pub mod scale;

/// Which y axis a series is drawn against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Axis {
    Left,
    Right,
}

/// One point: the category index, the value (a median, say) and its spread.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    pub x: usize,
    pub y: f64,
    pub min: Option<f64>,
    pub max: Option<f64>,
}

/// A named line.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Stable identifier (`receiver_gbps`), used in the SVG's element ids.
    pub key: String,
    /// Legend text.
    pub name: String,
    pub axis: Axis,
    pub points: Vec<Point>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Chart {
    pub title: String,
    pub x_label: String,
    /// One label per x position.
    pub categories: Vec<String>,
    pub left_label: String,
    pub right_label: Option<String>,
    pub series: Vec<Series>,
}

const WIDTH: f64 = 880.0;
const HEIGHT: f64 = 500.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = WIDTH - 90.0;
const TOP: f64 = 70.0;
const BOTTOM: f64 = HEIGHT - 70.0;
/// Okabe and Ito's colour-blind-safe palette (black first, for the headline series).
pub(crate) const PALETTE: &[&str] =
    &["#000000", "#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#f0e442"];

/// What a standalone SVG file starts with.
const XML_DECLARATION: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";

/// Escapes text for XML content and attribute values.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // Control characters are not allowed in XML 1.0.
            c if (c as u32) < 0x20 && c != '\t' && c != '\n' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

impl Chart {
    fn axis_max(&self, axis: Axis) -> f64 {
        self.series
            .iter()
            .filter(|s| s.axis == axis)
            .flat_map(|s| s.points.iter())
            .flat_map(|p| [Some(p.y), p.max])
            .flatten()
            .filter(|v| v.is_finite())
            .fold(0.0, f64::max)
    }

    fn x_of(&self, i: usize) -> f64 {
        let n = self.categories.len().max(1) as f64;
        LEFT + (RIGHT - LEFT) * (i as f64 + 0.5) / n
    }

    /// The chart as a standalone SVG document, each series a line through its points.
    pub fn to_svg(&self) -> String {
        format!("{XML_DECLARATION}{}", self.render(true))
    }

    /// The `<svg>` element alone, for a page that holds it inline.
    pub fn svg_element(&self) -> String {
        self.render(true)
    }

    /// The same without lines: for categories that are not a scale (variants of a
    /// comparison), where a series may hold several points per category (one per run).
    pub fn to_svg_points(&self) -> String {
        format!("{XML_DECLARATION}{}", self.render(false))
    }

    /// [`Chart::to_svg_points`]'s `<svg>` element alone, for a page that holds it inline.
    pub fn svg_points_element(&self) -> String {
        self.render(false)
    }

    /// The document: title, axes, each series, the legend.
    fn render(&self, lines: bool) -> String {
        let mut s = String::new();
        self.svg_head(&mut s);
        let (lmax, lstep) = nice_scale(self.axis_max(Axis::Left));
        let right = self.right_label.as_ref().map(|_| nice_scale(self.axis_max(Axis::Right)));
        self.left_axis(&mut s, lmax, lstep);
        if let (Some(label), Some((rmax, rstep))) = (&self.right_label, right) {
            right_axis(&mut s, label, rmax, rstep);
        }
        self.x_axis(&mut s);
        for (n, series) in self.series.iter().enumerate() {
            let top = match series.axis {
                Axis::Left => lmax,
                Axis::Right => right.map_or(lmax, |r| r.0),
            };
            self.series_group(&mut s, n, series, top, lines);
        }
        self.legend(&mut s);
        let _ = writeln!(s, "</svg>");
        s
    }

    /// The `<svg>` element, a white background and the title.
    fn svg_head(&self, s: &mut String) {
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
        let _ = writeln!(
            s,
            r#"<text id="title" x="{}" y="28" text-anchor="middle" font-size="16">{}</text>"#,
            WIDTH / 2.0,
            escape(&self.title)
        );
    }

    /// Grid lines and the left axis with its ticks and label.
    fn left_axis(&self, s: &mut String, lmax: f64, lstep: f64) {
        let _ = writeln!(s, r#"<g id="axis-left" stroke="black">"#);
        let mut v = 0.0;
        while v <= lmax + lstep / 2.0 {
            let y = y_of(v, lmax);
            let _ = writeln!(s, r##"<line x1="{LEFT}" y1="{y:.1}" x2="{RIGHT}" y2="{y:.1}" stroke="#dddddd"/>"##);
            let _ = writeln!(
                s,
                r#"<text x="{}" y="{:.1}" text-anchor="end" stroke="none">{}</text>"#,
                LEFT - 6.0,
                y + 4.0,
                fmt_tick(v, lstep)
            );
            v += lstep;
        }
        let _ = writeln!(s, r#"<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{BOTTOM}"/>"#);
        let _ = writeln!(
            s,
            r#"<text x="20" y="{0:.1}" transform="rotate(-90 20 {0:.1})" text-anchor="middle" stroke="none">{1}</text>"#,
            (TOP + BOTTOM) / 2.0,
            escape(&self.left_label)
        );
        let _ = writeln!(s, "</g>");
    }

    /// X axis: thin the labels out so they do not overlap.
    fn x_axis(&self, s: &mut String) {
        let _ = writeln!(s, r#"<g id="axis-x" stroke="black">"#);
        let _ = writeln!(s, r#"<line x1="{LEFT}" y1="{BOTTOM}" x2="{RIGHT}" y2="{BOTTOM}"/>"#);
        let every = self.categories.len().div_ceil(16).max(1);
        for (i, c) in self.categories.iter().enumerate() {
            let x = self.x_of(i);
            let _ = writeln!(s, r#"<line x1="{x:.1}" y1="{BOTTOM}" x2="{x:.1}" y2="{}"/>"#, BOTTOM + 4.0);
            if i % every == 0 {
                let _ = writeln!(
                    s,
                    r#"<text x="{x:.1}" y="{}" text-anchor="middle" stroke="none">{}</text>"#,
                    BOTTOM + 18.0,
                    escape(c)
                );
            }
        }
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle" stroke="none">{}</text>"#,
            (LEFT + RIGHT) / 2.0,
            HEIGHT - 22.0,
            escape(&self.x_label)
        );
        let _ = writeln!(s, "</g>");
    }

    /// One series: min–max bars, the line through the points (when `lines`), the points.
    fn series_group(&self, s: &mut String, n: usize, series: &Series, top: f64, lines: bool) {
        let color = PALETTE[n % PALETTE.len()];
        let axis = if series.axis == Axis::Left { "left" } else { "right" };
        let key = escape(&series.key);
        let _ = writeln!(
            s,
            r#"<g class="series" id="series-{key}" data-name="{}" data-axis="{axis}" stroke="{color}" fill="{color}">"#,
            escape(&series.name)
        );
        let points: Vec<&Point> =
            series.points.iter().filter(|p| p.y.is_finite() && p.x < self.categories.len()).collect();
        for p in &points {
            if let (Some(lo), Some(hi)) = (p.min.filter(|v| v.is_finite()), p.max.filter(|v| v.is_finite())) {
                let x = self.x_of(p.x);
                let (y1, y2) = (y_of(lo, top), y_of(hi, top));
                let _ = writeln!(
                    s,
                    r#"<g class="range" data-min="{lo:.6}" data-max="{hi:.6}"><line x1="{x:.1}" y1="{y1:.1}" x2="{x:.1}" y2="{y2:.1}"/><line x1="{:.1}" y1="{y1:.1}" x2="{:.1}" y2="{y1:.1}"/><line x1="{:.1}" y1="{y2:.1}" x2="{:.1}" y2="{y2:.1}"/></g>"#,
                    x - 5.0,
                    x + 5.0,
                    x - 5.0,
                    x + 5.0
                );
            }
        }
        if lines && points.len() > 1 {
            let coords: Vec<String> =
                points.iter().map(|p| format!("{:.1},{:.1}", self.x_of(p.x), y_of(p.y, top))).collect();
            let _ = writeln!(s, r#"<polyline fill="none" stroke-width="2" points="{}"/>"#, coords.join(" "));
        }
        for p in &points {
            let label = escape(&self.categories[p.x]);
            let _ = writeln!(
                s,
                r#"<circle class="point" cx="{:.1}" cy="{:.1}" r="4" data-x="{label}" data-y="{:.6}"><title>{}: {label} → {:.3}</title></circle>"#,
                self.x_of(p.x),
                y_of(p.y, top),
                p.y,
                escape(&series.name),
                p.y
            );
        }
        let _ = writeln!(s, "</g>");
    }

    /// Legend along the top.
    fn legend(&self, s: &mut String) {
        let _ = writeln!(s, r#"<g id="legend">"#);
        let mut x = LEFT;
        for (n, series) in self.series.iter().enumerate() {
            let color = PALETTE[n % PALETTE.len()];
            let _ = writeln!(s, r#"<rect x="{x:.1}" y="{}" width="14" height="4" fill="{color}"/>"#, TOP - 22.0);
            let _ = writeln!(s, r#"<text x="{:.1}" y="{}">{}</text>"#, x + 20.0, TOP - 16.0, escape(&series.name));
            x += 30.0 + 7.0 * series.name.chars().count() as f64;
        }
        let _ = writeln!(s, "</g>");
    }
}

/// The right axis with its ticks and label.
fn right_axis(s: &mut String, label: &str, rmax: f64, rstep: f64) {
    let _ = writeln!(s, r#"<g id="axis-right" stroke="black">"#);
    let mut v = 0.0;
    while v <= rmax + rstep / 2.0 {
        let y = y_of(v, rmax);
        let _ =
            writeln!(s, r#"<text x="{}" y="{:.1}" stroke="none">{}</text>"#, RIGHT + 6.0, y + 4.0, fmt_tick(v, rstep));
        v += rstep;
    }
    let _ = writeln!(s, r#"<line x1="{RIGHT}" y1="{TOP}" x2="{RIGHT}" y2="{BOTTOM}"/>"#);
    let x = WIDTH - 18.0;
    let _ = writeln!(
        s,
        r#"<text x="{x}" y="{0:.1}" transform="rotate(90 {x} {0:.1})" text-anchor="middle" stroke="none">{1}</text>"#,
        (TOP + BOTTOM) / 2.0,
        escape(label)
    );
    let _ = writeln!(s, "</g>");
}

/// The y coordinate of `v` on an axis whose top is `top`.
fn y_of(v: f64, top: f64) -> f64 {
    BOTTOM - (BOTTOM - TOP) * (v / top).clamp(0.0, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart() -> Chart {
        Chart {
            title: "TCP stream <queues> & \"CPU\"".into(),
            x_label: "queues (-P)".into(),
            categories: vec!["1".into(), "2".into(), "4".into()],
            left_label: "Gbit/s".into(),
            right_label: Some("CPU-s/GB".into()),
            series: vec![
                Series {
                    key: "receiver_gbps".into(),
                    name: "received Gbit/s".into(),
                    axis: Axis::Left,
                    points: vec![
                        Point { x: 0, y: 10.0, min: Some(9.0), max: Some(11.0) },
                        Point { x: 1, y: 18.0, min: Some(17.0), max: Some(19.5) },
                        Point { x: 2, y: f64::NAN, min: None, max: None },
                    ],
                },
                Series {
                    key: "cpu_s_per_gb".into(),
                    name: "CPU-s/GB".into(),
                    axis: Axis::Right,
                    points: vec![Point { x: 0, y: 0.12, min: Some(0.1), max: Some(0.13) }],
                },
            ],
        }
    }

    #[test]
    fn svg_has_series_points_bars_and_escaped_text() {
        let svg = chart().to_svg();
        assert!(svg.starts_with("<?xml"));
        assert!(svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains(r#"id="series-receiver_gbps""#) && svg.contains(r#"id="series-cpu_s_per_gb""#));
        assert_eq!(svg.matches(r#"class="point""#).count(), 3, "NaN points are left out");
        assert_eq!(svg.matches(r#"class="range""#).count(), 3);
        assert!(svg.contains("TCP stream &lt;queues&gt; &amp; &quot;CPU&quot;"));
        assert!(!svg.contains("NaN"));
        assert_eq!(svg.matches("<polyline").count(), 1, "a single point draws no line");
        assert!(svg.contains(r#"id="axis-right""#));
        let open = svg.matches("<g").count();
        assert_eq!(open, svg.matches("</g>").count(), "groups balance");
    }

    #[test]
    fn empty_chart_is_still_a_document() {
        let c = Chart { series: vec![], categories: vec![], right_label: None, ..chart() };
        let svg = c.to_svg();
        assert!(svg.contains("<svg") && svg.contains("</svg>") && !svg.contains("axis-right"));
    }
}
