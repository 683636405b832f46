//! The http page (`http --html`, `report http.json --html`): requests per second and latency
//! over time, latency percentiles, status codes and errors, the client's CPU (over time and in
//! all), what was loaded.

use super::cpu::over_time;
use super::{facts_table, figure, tool_line, Page};
use crate::metrics::figures::IntervalCpu;
use crate::report::chart::plot::{Line, Plot, Quantity, Style};
use crate::report::chart::scale::si;
use crate::report::chart::{escape, Axis, Chart, Point, Series};
use crate::transport::http::FailKind;
use crate::workload::http::{HttpDocument, HttpInterval};
use std::fmt::Write as _;

const RATE_NOTE: &str = "Responses the client received per interval (any status; failed requests are not \
responses), ÷ the interval, as the client's load threads counted them at each response's last byte (intervals[].\
transactions_per_second).";
const LATENCY_OVER_TIME_NOTE: &str = "The p50 and p99 latency of the responses that completed in each interval \
(intervals[].latency_us), each timed by the client from the request's write (with --rate: its scheduled time) to the \
response's last byte; an HdrHistogram per load thread and interval, merged at the interval's end.";

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
    over_time_figures(&mut body, &r.intervals);
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
    let cpu: Vec<(f64, &IntervalCpu)> =
        r.intervals.iter().filter_map(|iv| iv.cpu.as_ref().map(|c| (iv.end, c))).collect();
    if super::over_time(cpu.len()) {
        over_time(&mut body, &[("client", cpu)], "");
    }
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

/// Requests/s and latency p50/p99 per interval, or why there are none.
fn over_time_figures(out: &mut String, intervals: &[HttpInterval]) {
    if !super::over_time(intervals.len()) {
        super::no_over_time(out, intervals.len());
        return;
    }
    let x = || Quantity::new("time into the run", "s");
    let rate = Plot {
        id: "plot-requests".into(),
        title: "Requests per interval".into(),
        x: x(),
        y: Quantity::new("rate", "requests/s"),
        lines: vec![Line {
            key: "requests".into(),
            name: "requests/s".into(),
            style: Style::Bold,
            points: intervals.iter().map(|iv| (iv.end, iv.transactions_per_second)).collect(),
        }],
        band: None,
    };
    figure(out, "requests", &rate.svg_element(), RATE_NOTE);
    let latency = |key: &str, style, pick: fn(&HttpInterval) -> u64| Line {
        key: key.into(),
        name: format!("{key} latency"),
        style,
        points: intervals.iter().filter(|iv| iv.requests > 0).map(|iv| (iv.end, pick(iv) as f64 / 1e6)).collect(),
    };
    let plot = Plot {
        id: "plot-latency-over-time".into(),
        title: "Latency per interval".into(),
        x: x(),
        y: Quantity::new("latency", "s"),
        lines: vec![
            latency("p50", Style::Bold, |iv| iv.latency_us.p50),
            latency("p99", Style::Dashed, |iv| iv.latency_us.p99),
        ],
        band: None,
    };
    figure(out, "latency-over-time", &plot.svg_element(), LATENCY_OVER_TIME_NOTE);
}
