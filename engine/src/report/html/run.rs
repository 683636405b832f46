//! The run page (one `send -J` document) and the runs page (several, overlaid).

use super::{facts_table, figure, flatten, tool_line, verdict, Page, MAX_LINES};
use crate::metrics::document::StreamDocument;
use crate::metrics::run_figures::RunFigures;
use crate::metrics::summary::RunsSummary;
use crate::report::chart::escape;
use crate::report::chart::plot::{lines_or_band, Line, Plot, Quantity, Style};
use crate::report::chart::scale::si;
use std::fmt::Write as _;

const THROUGHPUT_NOTE: &str = "Received: bytes the receiver counted per interval (its own clock), ×8 ÷ the interval. \
Offered: bytes the sender wrote in the same interval, on its clock.";
const LOSS_NOTE_TCP: &str =
    "Segments the kernel retransmitted in each interval, summed over the sender's flows (TCP_INFO total_retrans, read at each interval's end).";
const LOSS_NOTE_UDP: &str = "Datagrams the receiver found missing or out of order in each interval, from the sequence numbers in every datagram.";
const RTT_NOTE: &str =
    "Smoothed round-trip time the sender's kernel keeps per flow (TCP_INFO tcpi_rtt) at each interval's end: the mean over flows and the largest.";
fn proto(doc: &StreamDocument) -> String {
    format!("{:?}", doc.test.proto).to_uppercase()
}

/// One run: headline, charts, settings.
pub(super) fn page(doc: &StreamDocument) -> Page {
    let title = doc.title.clone().unwrap_or_else(|| format!("{} stream to {}", proto(doc), doc.target));
    let mut body = format!("<h1>{}</h1>\n", escape(&title));
    run_section(&mut body, doc, "");
    if let Some(rev) = &doc.reverse {
        let _ = writeln!(body, "<h2>The other direction (--bidir)</h2>");
        run_section(&mut body, rev, "reverse-");
    }
    tool_line(&mut body, &doc.tool, doc.schema_version);
    Page { title, body }
}

/// The headline, the figures and the facts of one direction; `prefix` keeps element ids unique.
fn run_section(out: &mut String, doc: &StreamDocument, prefix: &str) {
    headline(out, doc, prefix);
    let xs: Vec<f64> = doc.intervals.iter().map(|iv| iv.end).collect();
    if !super::over_time(doc.intervals.len()) {
        super::no_over_time(out, doc.intervals.len());
    } else {
        figure(out, &format!("{prefix}throughput"), &throughput(doc, prefix).svg_element(), THROUGHPUT_NOTE);
        if let Some(plot) = per_queue(doc, &xs, prefix) {
            let note = format!(
                "Bytes the receiver counted on each queue's flows per interval, ×8 ÷ the interval: a line per queue, \
                 or past {MAX_LINES} queues the lowest, the median and the highest queue at each interval."
            );
            figure(out, &format!("{prefix}queues"), &plot.svg_element(), &note);
        }
        loss(out, doc, prefix);
        rtt(out, doc, prefix);
    }
    super::cpu::section(out, doc, prefix);
    facts(out, doc, prefix);
}

fn headline(out: &mut String, doc: &StreamDocument, prefix: &str) {
    let recv = doc.sum.receiver.as_ref();
    let _ = writeln!(
        out,
        "<p>{} queue(s) × {} flow(s), {:.2} s window · receiver-counted:</p>",
        doc.test.queues, doc.test.flows_per_queue, doc.sum.window_seconds
    );
    match recv {
        Some(r) => {
            let _ = writeln!(
                out,
                "<p class=\"headline\" id=\"{prefix}headline\" data-bits-per-second=\"{}\">{}</p>",
                r.bits_per_second,
                escape(&si(r.bits_per_second, "bit/s"))
            );
        }
        None => {
            let _ = writeln!(out, "<p class=\"headline bad\" id=\"{prefix}headline\">no receiver report</p>");
        }
    }
    let _ = writeln!(out, "<p>offered by the sender: {}</p>", escape(&si(doc.sum.sender.bits_per_second, "bit/s")));
    let (class, total) = match recv {
        Some(r) if r.total_bytes == doc.sum.sender.total_bytes => {
            ("ok", format!("receiver counted {} bytes (exact match)", r.total_bytes))
        }
        Some(r) => ("bad", format!("receiver counted {} bytes (MISMATCH)", r.total_bytes)),
        None => ("bad", "receiver counted nothing (no report)".to_owned()),
    };
    let _ = writeln!(
        out,
        "<p class=\"{class}\" id=\"{prefix}total\">total: sender wrote {} bytes, {}</p>",
        doc.sum.sender.total_bytes,
        escape(&total)
    );
    if let Some(w) = recv.and_then(|r| r.udp.as_ref()).and_then(|u| u.window.as_ref()) {
        let _ = writeln!(
            out,
            "<p>UDP in the window: received {} datagrams, lost {} of {} ({:.3}%)</p>",
            w.datagrams,
            w.lost,
            w.expected,
            w.loss_ratio * 100.0
        );
    }
    if let Some(u) = recv.and_then(|r| r.udp.as_ref()) {
        let _ = writeln!(
            out,
            "<p>UDP over the whole run: received {} datagrams, lost {} of {} ({:.3}%), out of order {}, duplicates {}, jitter {}</p>",
            u.datagrams,
            u.lost,
            u.expected,
            u.loss_ratio * 100.0,
            u.out_of_order,
            u.duplicates,
            escape(&si(u.jitter_us / 1e6, "s"))
        );
    }
    if let Some(e) = &doc.error {
        let _ = writeln!(out, "<p class=\"bad\">incomplete: {}</p>", escape(e));
    }
    verdict(out, &doc.verdict, prefix);
}

/// Per queue, its received rate in each interval.
fn queue_rates(doc: &StreamDocument) -> Vec<Vec<f64>> {
    let queues = doc.intervals.iter().map(|iv| iv.queues.len()).max().unwrap_or(0);
    (0..queues)
        .map(|q| {
            doc.intervals
                .iter()
                .map(|iv| {
                    let secs = iv.end - iv.start;
                    match iv.queues.get(q) {
                        Some(&b) if secs > 0.0 => b as f64 * 8.0 / secs,
                        _ => f64::NAN,
                    }
                })
                .collect()
        })
        .collect()
}

fn throughput(doc: &StreamDocument, prefix: &str) -> Plot {
    let mut lines = vec![Line {
        key: "sum".into(),
        name: "received (SUM)".into(),
        style: Style::Bold,
        points: doc.intervals.iter().map(|iv| (iv.end, iv.bits_per_second)).collect(),
    }];
    let offered: Vec<(f64, f64)> = doc
        .intervals
        .iter()
        .filter_map(|iv| {
            let secs = iv.end - iv.start;
            iv.sender_bytes.filter(|_| secs > 0.0).map(|b| (iv.end, b as f64 * 8.0 / secs))
        })
        .collect();
    if !offered.is_empty() {
        lines.push(Line {
            key: "offered".into(),
            name: "offered (sender)".into(),
            style: Style::Dashed,
            points: offered,
        });
    }
    Plot {
        id: format!("{prefix}plot-throughput"),
        title: "Throughput per interval".into(),
        x: Quantity::new("time into the window", "s"),
        y: Quantity::new("throughput", "bit/s"),
        lines,
        band: None,
    }
}

/// Each queue's received rate: a line per queue, or past [`MAX_LINES`] their band. A
/// figure of its own, on its own scale: a queue carries a share of the sum, and beside the sum
/// hundreds of queues would sit on the floor of the axis.
fn per_queue(doc: &StreamDocument, xs: &[f64], prefix: &str) -> Option<Plot> {
    let per_queue = queue_rates(doc);
    if per_queue.len() < 2 {
        return None;
    }
    let series = per_queue.into_iter().enumerate().map(|(q, r)| (format!("queue-{q}"), format!("queue {q}"), r));
    let (lines, band) = lines_or_band(xs, series.collect(), MAX_LINES, |n| format!("{n} queues: min, median, max"));
    Some(Plot {
        id: format!("{prefix}plot-queues"),
        title: "Throughput per queue".into(),
        x: Quantity::new("time into the window", "s"),
        y: Quantity::new("throughput", "bit/s"),
        lines,
        band,
    })
}

/// Retransmitted segments (TCP) or lost and reordered datagrams (UDP) per interval.
fn loss(out: &mut String, doc: &StreamDocument, prefix: &str) {
    let tcp: Vec<(f64, f64)> = doc
        .intervals
        .iter()
        .filter_map(|iv| iv.tcp.as_ref().map(|t| (iv.end, t.retransmitted_segments as f64)))
        .collect();
    let udp = |f: fn(&crate::metrics::document::IntervalDatagrams) -> u64| -> Vec<(f64, f64)> {
        doc.intervals.iter().filter_map(|iv| iv.udp.as_ref().map(|u| (iv.end, f(u) as f64))).collect()
    };
    // By protocol, not by which key is present: UDP intervals carry an empty TCP window too.
    let udp_test = doc.test.proto == crate::base::spec::Proto::Udp;
    let (lines, unit, note) = if !udp_test && !tcp.is_empty() {
        (
            vec![Line {
                key: "retransmits".into(),
                name: "retransmitted segments".into(),
                style: Style::Bold,
                points: tcp,
            }],
            "segments",
            LOSS_NOTE_TCP,
        )
    } else if udp_test && doc.intervals.iter().any(|iv| iv.udp.is_some()) {
        (
            vec![
                Line { key: "lost".into(), name: "lost datagrams".into(), style: Style::Bold, points: udp(|u| u.lost) },
                Line {
                    key: "reordered".into(),
                    name: "out of order".into(),
                    style: Style::Dashed,
                    points: udp(|u| u.out_of_order),
                },
            ],
            "datagrams",
            LOSS_NOTE_UDP,
        )
    } else {
        return;
    };
    let plot = Plot {
        id: format!("{prefix}plot-loss"),
        title: "Retransmits and loss per interval".into(),
        x: Quantity::new("time into the window", "s"),
        y: Quantity::new("per interval", unit),
        lines,
        band: None,
    };
    figure(out, &format!("{prefix}loss"), &plot.svg_element(), note);
}

fn rtt(out: &mut String, doc: &StreamDocument, prefix: &str) {
    let windows: Vec<(f64, &crate::sys::tcpinfo::TcpWindow)> = doc
        .intervals
        .iter()
        .filter_map(|iv| iv.tcp.as_ref().map(|t| (iv.end, t)))
        .filter(|(_, t)| t.rtt_mean_us > 0.0)
        .collect();
    if windows.is_empty() {
        return;
    }
    let plot = Plot {
        id: format!("{prefix}plot-rtt"),
        title: "Round-trip time (sender's kernel)".into(),
        x: Quantity::new("time into the window", "s"),
        y: Quantity::new("RTT", "s"),
        lines: vec![
            Line {
                key: "rtt-mean".into(),
                name: "mean over flows".into(),
                style: Style::Bold,
                points: windows.iter().map(|(x, t)| (*x, t.rtt_mean_us / 1e6)).collect(),
            },
            Line {
                key: "rtt-max".into(),
                name: "largest flow".into(),
                style: Style::Dashed,
                points: windows.iter().map(|(x, t)| (*x, f64::from(t.rtt_max_us) / 1e6)).collect(),
            },
        ],
        band: None,
    };
    figure(out, &format!("{prefix}rtt"), &plot.svg_element(), RTT_NOTE);
}

/// Path, zero-copy, settings and host facts.
fn facts(out: &mut String, doc: &StreamDocument, prefix: &str) {
    let _ = writeln!(out, "<h2>Path and data path</h2>");
    let mut rows = vec![
        ("sender path".to_owned(), doc.sender.path.clone()),
        ("sender placement".to_owned(), doc.sender.placement.clone()),
    ];
    if let Some(r) = &doc.receiver {
        rows.push(("receiver path".into(), r.path.clone()));
        rows.push(("receiver placement".into(), r.placement.clone()));
    }
    rows.push(("egress interface".into(), doc.path.egress_interface.clone().unwrap_or_else(|| "unknown".into())));
    let limits = serde_json::to_value(&doc.path.limits).unwrap_or_default();
    flatten("path limits", &limits, &mut rows);
    rows.push(("drops on the egress interface (window)".into(), doc.path.interface_drops.to_string()));
    rows.push(("softnet drops (window)".into(), doc.path.softnet_drops.to_string()));
    if let Some(z) = &doc.zerocopy {
        rows.push((
            "zero-copy".into(),
            format!(
                "{} (asked {}): {}; {} sends, {} notifications, {} copied by the kernel",
                if z.used { "used" } else { "not used" },
                z.requested,
                z.reason,
                z.sends,
                z.notifications,
                z.copied
            ),
        ));
    }
    facts_table(out, &format!("{prefix}path"), &rows);
    if let Some(t) = doc.receiver.as_ref().and_then(|r| r.nic_queues.as_ref()) {
        nic_queues(out, t, prefix);
    }
    let _ = writeln!(out, "<h2>Settings</h2>");
    let mut settings = vec![("target".to_owned(), doc.target.clone())];
    flatten("", &serde_json::to_value(&doc.test).unwrap_or_default(), &mut settings);
    facts_table(out, &format!("{prefix}settings"), &settings);
    let mut host = Vec::new();
    flatten("", &serde_json::to_value(&doc.host).unwrap_or_default(), &mut host);
    if !host.is_empty() {
        let _ = writeln!(out, "<h2>Host counters over the window</h2>");
        facts_table(out, &format!("{prefix}host"), &host);
    }
}

/// The runs of one saved file, each with the name it is shown under.
pub(super) struct RunFile<'a> {
    pub file: String,
    pub runs: Vec<(String, &'a StreamDocument)>,
}

/// Several runs: their received rate overlaid, and a table of each run with the medians of
/// each file's runs. A file is one variant (one setting, one host pair): runs of two files
/// are never pooled into one median; `uringbench compare` is the tool for the difference.
pub(super) fn runs_page(files: &[RunFile]) -> Page {
    let runs: Vec<(String, &StreamDocument)> = files.iter().flat_map(|f| f.runs.iter().cloned()).collect();
    let runs = &runs[..];
    let title = format!("{} runs", runs.len());
    let mut body = format!("<h1>{}</h1>\n", escape(&title));
    let lines: Vec<Line> = runs
        .iter()
        .enumerate()
        .map(|(i, (name, d))| Line {
            key: format!("run-{i}"),
            name: name.clone(),
            style: Style::Bold,
            points: d.intervals.iter().map(|iv| (iv.end, iv.bits_per_second)).collect(),
        })
        .collect();
    let lines: Vec<Line> = lines.into_iter().filter(|l| super::over_time(l.points.len())).collect();
    let plot = Plot {
        id: "plot-runs".into(),
        title: "Received throughput per interval, each run".into(),
        x: Quantity::new("time into the window", "s"),
        y: Quantity::new("throughput", "bit/s"),
        lines,
        band: None,
    };
    if plot.lines.is_empty() {
        super::no_over_time(&mut body, runs.iter().map(|(_, d)| d.intervals.len()).max().unwrap_or(0));
    } else {
        figure(
            &mut body,
            "runs",
            &plot.svg_element(),
            "Each line: the bytes that run's receiver counted per interval, ×8 ÷ the interval.",
        );
    }
    let figures: Vec<RunFigures> = runs.iter().map(|(_, d)| RunFigures::of_stream(d)).collect();
    // The table's columns: received, offered, receiver CPU-s/GB, retransmits (TCP).
    let column = |f: &RunFigures, c: usize| match c {
        0 => f.receiver_bits_per_second,
        1 => f.sender_bits_per_second,
        2 => f.cpu_seconds_per_gb,
        _ => f.retransmits.map(|n| n as f64),
    };
    let _ = writeln!(body, "<div class=\"scroll\"><table id=\"runs\"><tr><th>run</th><th>received</th><th>offered</th><th>receiver CPU-s/GB</th><th>retransmits</th><th>verdict</th><th>complete</th></tr>");
    let cell = |v: Option<f64>, col: usize| match (v, col) {
        (None, _) => "–".to_owned(),
        (Some(v), 0 | 1) => si(v, "bit/s"),
        (Some(v), 2) => format!("{v:.3}"),
        (Some(v), _) => format!("{v:.0}"),
    };
    for ((name, d), f) in runs.iter().zip(&figures) {
        let _ = writeln!(
            body,
            "<tr><td>{}</td>{}<td>{}</td><td>{}</td></tr>",
            escape(name),
            (0..4).map(|c| format!("<td class=\"num\">{}</td>", escape(&cell(column(f, c), c)))).collect::<String>(),
            escape(&d.verdict.bottleneck.to_string()),
            if d.complete { "yes" } else { "no" }
        );
    }
    let mut at = 0;
    for file in files {
        let figures = &figures[at..at + file.runs.len()];
        at += file.runs.len();
        if file.runs.len() < 2 {
            continue; // One run is its own row; no median of one.
        }
        let summary = RunsSummary::of(figures);
        let stats = [
            summary.receiver_bits_per_second,
            summary.sender_bits_per_second,
            summary.cpu_seconds_per_gb,
            summary.retransmits,
        ];
        let whose = if files.len() > 1 { format!("{}'s ", file.file) } else { String::new() };
        let _ = writeln!(
            body,
            "<tr class=\"medians\"{}><th>median (min–max) of {}{} complete</th>{}<td></td><td></td></tr>",
            if files.len() > 1 { String::new() } else { " id=\"medians\"".to_owned() },
            escape(&whose),
            summary.complete_runs,
            (0..4)
                .map(|c| match stats[c] {
                    Some(s) => format!(
                        "<td class=\"num\">{} ({}–{})</td>",
                        escape(&cell(Some(s.median), c)),
                        escape(&cell(Some(s.min), c)),
                        escape(&cell(Some(s.max), c))
                    ),
                    None => "<td>–</td>".to_owned(),
                })
                .collect::<String>()
        );
    }
    let _ = writeln!(body, "</table></div>");
    if files.len() > 1 {
        let names: Vec<&str> = files.iter().map(|f| f.file.as_str()).collect();
        let _ = writeln!(
            body,
            "<p id=\"variants-note\">Each file is taken as a variant of its own: no median is pooled across files. \
             To tell whether they differ: <code>uringbench compare {}</code>.</p>",
            escape(&names.join(" "))
        );
    }
    for (i, (name, d)) in runs.iter().enumerate() {
        let _ = writeln!(body, "<h2>{}</h2>", escape(name));
        run_section(&mut body, d, &format!("run{i}-"));
    }
    Page { title, body }
}

/// The receiver's NIC queue table: which flows landed on which receive queue, where its
/// IRQ and its thread ran, and the misalignments found.
fn nic_queues(out: &mut String, t: &crate::metrics::figures::NicQueueTable, prefix: &str) {
    let _ = writeln!(out, "<h2>Receive queues of {}</h2>", escape(&t.iface));
    let _ = writeln!(
        out,
        "<p>--placement {}: {}. Each flow's queue is the one its socket's packets arrived on (SO_INCOMING_NAPI_ID); \
         busy-poll is the share of the queue's threads' receive completions found by polling the ring rather than \
         after sleeping until an interrupt's wake-up.</p>",
        escape(&t.placement),
        escape(&t.summary)
    );
    let _ = writeln!(
        out,
        "<div class=\"scroll\"><table id=\"{prefix}nic-queues\"><tr><th>rx queue</th><th>NAPI id</th><th>IRQ</th>\
         <th>IRQ CPU</th><th>thread CPU</th><th>NUMA node</th><th>flows</th><th>busy-poll</th><th>bytes</th></tr>"
    );
    for r in &t.rows {
        let cells: Vec<String> =
            crate::report::stream::nic_queue_cells(r).iter().map(|c| format!("<td>{}</td>", escape(c))).collect();
        let _ = writeln!(out, "<tr>{}</tr>", cells.concat());
    }
    let _ = writeln!(out, "</table></div>");
    if !t.findings.is_empty() {
        let _ = writeln!(out, "<ul class=\"findings\">");
        for f in &t.findings {
            let _ = writeln!(out, "<li>{}</li>", escape(f));
        }
        let _ = writeln!(out, "</ul>");
    }
}
