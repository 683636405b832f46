//! The search page (`search --html`, `report search.json --html`): the lossless rate found,
//! each trial's received rate and loss against the rate it offered, the trials in the order
//! they ran, and the table of trials.

use super::{facts_table, figure, flatten, tool_line, Page};
use crate::base::spec::Proto;
use crate::report::chart::escape;
use crate::report::chart::plot::{Line, Plot, Quantity, Style};
use crate::report::chart::scale::si;
use crate::workload::search::{Phase, RateTrial, SearchDocument};
use std::fmt::Write as _;

const RATE_NOTE: &str =
    "Each trial at the rate it offered (the rate asked; the unpaced probe: what the sender wrote): \
the rate its receiver counted (bytes ×8 ÷ the receiver's window), passed trials and failed ones apart; \
the vertical line: the highest rate that passed every confirmation.";
const STEPS_NOTE: &str =
    "The rate each trial asked for, in the order the search ran them (bisection, then confirmation \
runs); the unpaced probe at what its sender offered.";

/// Where a trial sits on the rate axis: the rate asked, or for the unpaced probe what it offered.
fn offered(t: &RateTrial) -> f64 {
    if t.rate_bps == 0 {
        crate::workload::search::offered_bps(&t.figures)
    } else {
        t.rate_bps as f64
    }
}

fn loss_note(proto: Proto) -> &'static str {
    match proto {
        Proto::Udp => {
            "Each trial's loss against the rate it offered: datagrams the receiver never saw ÷ those sent, \
from the sequence number in every datagram, over the whole trial; the horizontal line: the loss the search accepts."
        }
        _ => {
            "Each trial's loss against the rate it offered: bytes the sender's kernel retransmitted ÷ bytes sent \
(TCP_INFO), over the whole trial; the horizontal line: the loss the search accepts."
        }
    }
}

/// Points `(offered, value)` of the trials `keep` selects, in rate order, so a line reads left to right.
fn by_rate(
    steps: &[RateTrial],
    keep: impl Fn(&RateTrial) -> bool,
    value: impl Fn(&RateTrial) -> Option<f64>,
) -> Vec<(f64, f64)> {
    let mut points: Vec<(f64, f64)> =
        steps.iter().filter(|t| keep(t)).filter_map(|t| Some((offered(t), value(t)?))).collect();
    points.sort_by(|a, b| a.0.total_cmp(&b.0));
    points
}

pub(super) fn page(doc: &SearchDocument) -> Page {
    let r = &doc.result;
    let proto = format!("{:?}", doc.test.proto).to_uppercase();
    let title = format!("{proto} lossless rate search against {}", doc.target);
    let mut body = format!("<h1>{}</h1>\n", escape(&title));
    let _ = writeln!(
        body,
        "<p>{} trial(s), loss accepted ≤ {:.3}%, resolution {:.1}%, {} confirmation(s) · the highest rate that passed:</p>",
        r.steps.len(),
        r.loss_threshold * 100.0,
        r.resolution * 100.0,
        r.confirm
    );
    match r.rate_bps {
        Some(rate) => {
            let _ = writeln!(
                body,
                "<p class=\"headline\" id=\"headline\" data-bits-per-second=\"{rate}\">{}</p>\n<p>{:.0} datagrams/s of {} B</p>",
                escape(&si(rate, "bit/s")),
                r.pps.unwrap_or_default(),
                doc.test.len
            );
        }
        None => {
            let _ = writeln!(
                body,
                "<p class=\"headline bad\" id=\"headline\">none: even the lowest rate tried lost too much</p>"
            );
        }
    }
    let received = |t: &RateTrial| t.figures.receiver_bits_per_second;
    let mut lines = vec![
        Line {
            key: "passed".into(),
            name: "passed".into(),
            style: Style::Bold,
            points: by_rate(&r.steps, |t| t.passed, received),
        },
        Line {
            key: "failed".into(),
            name: "failed".into(),
            style: Style::Dashed,
            points: by_rate(&r.steps, |t| !t.passed, received),
        },
    ];
    let top = r.steps.iter().filter_map(received).fold(0.0, f64::max);
    if let Some(rate) = r.rate_bps {
        lines.push(Line {
            key: "found".into(),
            name: "rate found".into(),
            style: Style::Thin,
            points: vec![(rate, 0.0), (rate, top)],
        });
    }
    let rate_plot = Plot {
        id: "plot-search-rate".into(),
        title: "Received against offered, each trial".into(),
        x: Quantity::new("offered rate", "bit/s"),
        y: Quantity::new("received", "bit/s"),
        lines,
        band: None,
    };
    figure(&mut body, "search-rate", &rate_plot.svg_element(), RATE_NOTE);
    let loss_plot = Plot {
        id: "plot-search-loss".into(),
        title: "Loss against offered, each trial".into(),
        x: Quantity::new("offered rate", "bit/s"),
        y: Quantity::new("loss", "%"),
        lines: vec![
            Line {
                key: "loss".into(),
                name: "loss".into(),
                style: Style::Bold,
                points: by_rate(&r.steps, |_| true, |t| t.figures.loss_or_retransmit_ratio().map(|l| l * 100.0)),
            },
            Line {
                key: "threshold".into(),
                name: "loss accepted".into(),
                style: Style::Thin,
                points: [
                    r.steps.iter().map(offered).fold(f64::INFINITY, f64::min),
                    r.steps.iter().map(offered).fold(0.0, f64::max),
                ]
                .into_iter()
                .filter(|x| x.is_finite())
                .map(|x| (x, r.loss_threshold * 100.0))
                .collect(),
            },
        ],
        band: None,
    };
    figure(&mut body, "search-loss", &loss_plot.svg_element(), loss_note(doc.test.proto));
    let steps_plot = Plot {
        id: "plot-search-steps".into(),
        title: "Rate asked, trial by trial".into(),
        x: Quantity::new("trial", "#"),
        y: Quantity::new("offered rate", "bit/s"),
        lines: vec![Line {
            key: "asked".into(),
            name: "rate asked".into(),
            style: Style::Bold,
            points: r.steps.iter().map(|t| (t.step as f64, offered(t))).collect(),
        }],
        band: None,
    };
    figure(&mut body, "search-steps", &steps_plot.svg_element(), STEPS_NOTE);
    trials_table(&mut body, &r.steps);
    let mut settings = vec![("target".to_owned(), doc.target.clone())];
    flatten("", &serde_json::to_value(&doc.test).unwrap_or_default(), &mut settings);
    let _ = writeln!(body, "<h2>Settings of every trial</h2>");
    facts_table(&mut body, "settings", &settings);
    tool_line(&mut body, &doc.tool, doc.schema_version);
    Page { title, body }
}

fn trials_table(out: &mut String, steps: &[RateTrial]) {
    let _ = writeln!(out, "<h2>Trials</h2>\n<div class=\"scroll\"><table id=\"trials\"><tr><th>trial</th><th>phase</th><th>offered</th><th>received</th><th>loss</th><th>result</th></tr>");
    for t in steps {
        let phase = match t.phase {
            Phase::Probe => "probe (unpaced)",
            Phase::Search => "search",
            Phase::Confirm => "confirm",
        };
        let result = if t.passed { "pass".to_owned() } else { format!("FAIL: {}", t.reason.as_deref().unwrap_or("")) };
        let _ = writeln!(
            out,
            "<tr class=\"trial\"><td class=\"num\">{}</td><td>{phase}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"{}\">{}</td></tr>",
            t.step,
            escape(&si(offered(t), "bit/s")),
            escape(&t.figures.receiver_bits_per_second.map_or("–".into(), |b| si(b, "bit/s"))),
            t.figures.loss_or_retransmit_ratio().map_or("–".into(), |l| format!("{:.3}%", l * 100.0)),
            if t.passed { "ok" } else { "bad" },
            escape(&result)
        );
    }
    let _ = writeln!(out, "</table></div>");
}
