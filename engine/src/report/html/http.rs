//! The http page (`http --html`, `report http.json --html`): requests per second, latency
//! percentiles, status codes and errors, the client's CPU, what was loaded.

use super::{facts_table, figure, tool_line, Page};
use crate::report::chart::scale::si;
use crate::report::chart::{escape, Axis, Chart, Point, Series};
use crate::workload::http::{FailKind, HttpDocument};
use std::fmt::Write as _;

const LATENCY_NOTE: &str =
    "Each response's latency as the client timed it, from the request's write (with --rate: its \
scheduled time, so a stall counts) to the response's last byte, for every response in the run (an HdrHistogram).";

pub(super) fn page(doc: &HttpDocument) -> Page {
    let r = &doc.report;
    let title = format!("http {} {}", r.method, r.url);
    let mut body = format!("<h1>{}</h1>\n", escape(&title));
    let _ = writeln!(
        body,
        "<p>{} connection(s) on {} thread(s), {:.2} s{} · responses the client received:</p>\n<p class=\"headline\" id=\"headline\" data-transactions-per-second=\"{}\">{}</p>\n<p>{} responses, {} read ({}), {} connections opened</p>",
        r.connections,
        r.threads,
        r.window_seconds,
        if r.keep_alive { "" } else { ", no keep-alive" },
        r.transactions_per_second,
        escape(&si(r.transactions_per_second, "requests/s")),
        r.requests,
        escape(&si(r.bytes_read as f64, "B")),
        escape(&si(r.bytes_per_second * 8.0, "bit/s")),
        r.connections_opened
    );
    if let Some(i) = &r.interrupted {
        let _ = writeln!(body, "<p class=\"bad\">incomplete: {}</p>", escape(i));
    } else if !r.complete {
        let _ = writeln!(
            body,
            "<p class=\"bad\">incomplete: {} request(s) failed or no response came back</p>",
            doc.errors_total
        );
    }
    let l = &r.latency_us;
    let percentiles =
        [("min", l.min), ("p50", l.p50), ("p90", l.p90), ("p99", l.p99), ("p99.9", l.p999), ("max", l.max)];
    let chart = Chart {
        title: "Latency percentiles".into(),
        x_label: "percentile".into(),
        categories: percentiles.iter().map(|(k, _)| (*k).to_owned()).collect(),
        left_label: "latency (µs)".into(),
        right_label: None,
        series: vec![Series {
            key: "latency".into(),
            name: "latency".into(),
            axis: Axis::Left,
            points: percentiles
                .iter()
                .enumerate()
                .map(|(x, (_, us))| Point { x, y: *us as f64, min: None, max: None })
                .collect(),
        }],
    };
    figure(&mut body, "latency", &chart.svg_element(), LATENCY_NOTE);
    let mut rows: Vec<(String, String)> =
        percentiles.iter().map(|(k, us)| ((*k).to_owned(), si(*us as f64 / 1e6, "s"))).collect();
    rows.push(("mean".into(), si(l.mean / 1e6, "s")));
    facts_table(&mut body, "latency", &rows);
    let _ = writeln!(body, "<h2>Responses and errors</h2>");
    let mut outcome: Vec<(String, String)> =
        r.status.iter().map(|(code, n)| (format!("status {code}"), n.to_string())).collect();
    outcome.push(("non-2xx".into(), r.non_2xx.to_string()));
    for kind in FailKind::ALL {
        outcome.push((format!("errors: {}", kind.name()), r.errors.get(kind).to_string()));
    }
    outcome.extend(r.errors.examples.iter().map(|(k, v)| (format!("example: {k}"), v.clone())));
    facts_table(&mut body, "responses", &outcome);
    let _ = writeln!(body, "<h2>Client CPU</h2>");
    let cpu = [
        ("user".to_owned(), format!("{:.2} s", r.cpu.user_seconds)),
        ("system".to_owned(), format!("{:.2} s", r.cpu.system_seconds)),
        ("per request".to_owned(), si(r.cpu.us_per_request / 1e6, "s")),
    ];
    facts_table(&mut body, "cpu", &cpu);
    let _ = writeln!(
        body,
        "<p class=\"note\"><small>The client process's own CPU time over the run (its threads' /proc task stat), ÷ the responses for per request.</small></p>"
    );
    let settings = [
        ("url".to_owned(), r.url.clone()),
        ("method".to_owned(), r.method.clone()),
        ("connections".to_owned(), r.connections.to_string()),
        ("threads".to_owned(), r.threads.to_string()),
        ("keep-alive".to_owned(), r.keep_alive.to_string()),
        (
            "rate asked".to_owned(),
            r.rate.map_or("none (as fast as responses come)".into(), |q| format!("{q:.0} requests/s")),
        ),
    ];
    let _ = writeln!(body, "<h2>Settings</h2>");
    facts_table(&mut body, "settings", &settings);
    tool_line(&mut body, &doc.tool, doc.schema_version);
    Page { title, body }
}
