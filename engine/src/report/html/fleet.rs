//! The fleet page (`report --fleet DIR --html OUT.html`): the pair heatmap, a chart per
//! attribute, the failed runs, and the merged tables.

use super::{figure, Page};
use crate::report::chart::escape;
use crate::report::fleet::{heatmap, FleetDocument, FleetReport};
use std::fmt::Write as _;

const HEATMAP_NOTE: &str =
    "Each cell: the median over that sender→receiver pair's complete runs of the rate the receiver counted \
(each run's send -J document, sum.receiver.bits_per_second); an empty cell: no complete run.";
const ATTRIBUTE_NOTE: &str =
    "Per value of the attribute (a host fact from the inventory): the median of its runs' receiver-counted rate, \
with min to max over those runs.";

/// A standalone SVG file's text as an element a page can hold: without the XML declaration.
fn inline(svg: &str) -> &str {
    match svg.strip_prefix("<?xml") {
        Some(rest) => rest.split_once("?>").map_or(svg, |(_, body)| body.trim_start()),
        None => svg,
    }
}

/// A merged `fleet.json` holds every figure the report has: the page of a saved fleet.
impl From<FleetDocument> for FleetReport {
    fn from(d: FleetDocument) -> Self {
        FleetReport { runs: d.runs, pairs: d.pairs, summaries: d.summaries }
    }
}

/// The page of a fleet run (`report --fleet DIR --html`, or `report fleet.json --html`).
pub(super) fn fleet_page(report: &FleetReport) -> Page {
    let failed = report.failed();
    let title = format!("fleet: {} runs, {} pairs, {} failed", report.runs.len(), report.pairs.len(), failed.len());
    let mut body = format!("<h1>{}</h1>\n", escape(&title));
    figure(&mut body, "heatmap", inline(&heatmap::to_svg(report)), HEATMAP_NOTE);
    for attr in report.summaries.iter().map(|s| &s.attribute).filter(|a| *a != "address" && *a != "entry") {
        figure(&mut body, &format!("by-{attr}"), &report.attribute_chart(attr).svg_element(), ATTRIBUTE_NOTE);
    }
    let _ = writeln!(body, "<h2>Failed runs</h2>");
    if failed.is_empty() {
        let _ = writeln!(body, "<p id=\"failed\" class=\"ok\">none: every planned run completed</p>");
    } else {
        let _ = writeln!(body, "<div class=\"scroll\"><table id=\"failed\"><tr><th>run</th><th>sender → receiver</th><th>address</th><th>why</th></tr>");
        for r in &failed {
            let _ = writeln!(
                body,
                "<tr class=\"failed-run\"><td>{}</td><td>{} → {}</td><td>{}</td><td class=\"bad\">{}</td></tr>",
                escape(&r.id),
                escape(&r.sender),
                escape(&r.receiver),
                escape(&r.address),
                escape(r.figures.error.as_deref().unwrap_or("incomplete"))
            );
        }
        let _ = writeln!(body, "</table></div>");
    }
    let _ = writeln!(body, "<h2>Merged tables</h2>\n<pre class=\"scroll\">{}</pre>", escape(&report.render_text()));
    Page { title, body }
}

#[cfg(test)]
mod tests {
    #[test]
    fn inline_drops_the_xml_declaration_only() {
        assert_eq!(super::inline("<?xml version=\"1.0\"?>\n<svg/>"), "<svg/>");
        assert_eq!(super::inline("<svg/>"), "<svg/>");
    }
}
