//! The sweep page: rate (and receiver CPU per GB) against the swept parameter, each point's
//! median with its runs' min–max, and the table of runs.

use super::{figure, Page};
use crate::report::chart::escape;
use crate::workload::sweep::SweepResult;
use std::fmt::Write as _;

const NOTE: &str = "Each point: the median over that point's complete runs of the receiver-counted rate (left axis) \
and of the receiver's host CPU-seconds per GB received (right axis, /proc/stat); the bar spans the runs' min to max.";

pub(super) fn page(s: &SweepResult) -> Page {
    let title = format!("sweep of {} against {}", s.parameter.key(), s.target);
    let mut body =
        format!("<h1>{}</h1>\n<p>{} run(s) per point, {} point(s)</p>\n", escape(&title), s.repeat, s.points.len());
    figure(&mut body, "sweep", &s.chart().svg_element(), NOTE);
    let _ = writeln!(body, "<h2>Runs</h2>\n<pre>{}</pre>", escape(&s.render_table()));
    Page { title, body }
}
