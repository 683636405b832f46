//! The rr and crr page: transactions per second (the headline and per interval), latency
//! percentiles, failures with what to do about them, CPU per side, settings.

use super::cpu::{cpu_table, over_time, CPU_NOTE};
use super::{facts_table, figure, flatten, verdict, Page};
use crate::metrics::document::TransactionDocument;
use crate::metrics::figures::IntervalCpu;
use crate::report::chart::escape;
use crate::report::chart::plot::{Line, Plot, Quantity, Style};
use crate::report::chart::scale::si;
use std::fmt::Write as _;

const RATE_NOTE: &str = "Transactions the client completed per interval (a request sent and its whole response \
received; for crr, a connection opened, used and closed as well), ÷ the interval.";
const LATENCY_NOTE: &str = "Each transaction's round trip as the client timed it, from the request's submission \
to the last byte of its response, for every transaction completed in the window (an HdrHistogram, 3 significant digits).";

pub(super) fn page(doc: &TransactionDocument) -> Page {
    let workload = format!("{:?}", doc.test.workload).to_lowercase();
    let title = doc
        .title
        .clone()
        .unwrap_or_else(|| format!("{} {workload} to {}", format!("{:?}", doc.test.proto).to_uppercase(), doc.target));
    let mut body = format!("<h1>{}</h1>\n", escape(&title));
    let _ = writeln!(
        body,
        "<p>{} queue(s) × {} flow(s), {:.2} s window · client-counted:</p>\n<p class=\"headline\" id=\"headline\" data-transactions-per-second=\"{}\">{}</p>",
        doc.test.queues,
        doc.test.flows_per_queue,
        doc.sum.window_seconds,
        doc.transactions_per_second,
        escape(&si(doc.transactions_per_second, "transactions/s"))
    );
    if let Some(e) = &doc.error {
        let _ = writeln!(body, "<p class=\"bad\">incomplete: {}</p>", escape(e));
    }
    for note in &doc.failure_notes {
        let _ = writeln!(body, "<p class=\"bad\">{}</p>", escape(note));
    }
    verdict(&mut body, &doc.verdict, "");
    if !super::over_time(doc.intervals.len()) {
        super::no_over_time(&mut body, doc.intervals.len());
    } else {
        let plot = Plot {
            id: "plot-transactions".into(),
            title: "Transactions per interval".into(),
            x: Quantity::new("time into the window", "s"),
            y: Quantity::new("rate", "transactions/s"),
            lines: vec![Line {
                key: "sum".into(),
                name: "transactions/s (client)".into(),
                style: Style::Bold,
                points: doc.intervals.iter().map(|iv| (iv.end, iv.transactions_per_second)).collect(),
            }],
            band: None,
        };
        figure(&mut body, "transactions", &plot.svg_element(), RATE_NOTE);
    }
    let l = &doc.latency_us;
    let rows: Vec<(String, String)> = [
        ("min", l.min),
        ("mean", l.mean),
        ("p50", l.p50),
        ("p90", l.p90),
        ("p99", l.p99),
        ("p99.9", l.p999),
        ("max", l.max),
    ]
    .iter()
    .map(|(k, us)| ((*k).to_owned(), si(us / 1e6, "s")))
    .chain([("transactions timed".to_owned(), l.count.to_string())])
    .collect();
    let _ = writeln!(body, "<h2>Latency</h2>");
    facts_table(&mut body, "latency", &rows);
    let _ = writeln!(body, "<p class=\"note\"><small>{}</small></p>", escape(LATENCY_NOTE));
    let mut failures = Vec::new();
    flatten("", &serde_json::to_value(doc.failures).unwrap_or_default(), &mut failures);
    let _ = writeln!(body, "<h2>Failures</h2>");
    facts_table(&mut body, "failures", &failures);
    let _ = writeln!(body, "<h2>CPU</h2>");
    let client: Vec<(f64, &IntervalCpu)> =
        doc.intervals.iter().filter_map(|iv| iv.cpu.as_ref().map(|c| (iv.end, c))).collect();
    if super::over_time(client.len()) {
        over_time(&mut body, &[("client", client)], "");
    }
    cpu_table(&mut body, &[("client", Some(&doc.cpu.client)), ("server", doc.cpu.server.as_ref())], "");
    let _ = writeln!(body, "<p class=\"note\"><small>{}</small></p>", escape(CPU_NOTE));
    let mut settings = vec![("target".to_owned(), doc.target.clone()), ("client path".into(), doc.client.path.clone())];
    if let Some(s) = &doc.server {
        settings.push(("server path".into(), s.path.clone()));
    }
    flatten("", &serde_json::to_value(&doc.test).unwrap_or_default(), &mut settings);
    let _ = writeln!(body, "<h2>Path and settings</h2>");
    facts_table(&mut body, "settings", &settings);
    Page { title, body }
}
