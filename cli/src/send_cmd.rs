//! `send`, `rr`/`crr` and `http`: a test run from this host, printed as it runs (text rows or
//! `--json-stream` events) and then as the format asks; `send --repeat` runs through the
//! engine's series. The plan each runs comes from `plan.rs`.

use crate::{
    args::{self, *},
    iperf2_mode, iperf3_mode,
    knobs::{refuse_knobs, tuning_of},
    live_out::{LiveOut, Out, Style},
    plan::{self, default_port, start_at_of, Reach, StreamPlan, DEFAULT_INTERVAL},
    progress, sink,
    sink::Sink,
    sweep_cmd, xdp_mode,
};
use std::sync::Arc;
use uringbench::{
    output::{csv_rows, end_event, SavedResults, CSV_HEADER},
    repeat::{RepeatPlan, RepeatResult},
    units::{self, format_bits_per_second},
    Error, Kind, Observer, Quiet, RepeatDocument, RunsSummary, Stats, StopToken, StreamDocument, Tool,
    TransactionDocument, Workload, SCHEMA_VERSION,
};

pub fn send(args: SendArgs, stop: StopToken) -> Result<u8, Error> {
    let fast = args.fast.probe(None, None)?;
    let peer = args.peer();
    xdp_mode::refuse_iperf2(args.engine, peer == Peer::Iperf2)?;
    let udp = args.udp || matches!(args.proto, ProtoArg::Udp) || args.engine == xdp_mode::Engine::Xdp;
    refuse_knobs(&args.tuning, udp, peer == Peer::Iperf2 || args.engine == xdp_mode::Engine::Xdp)?;
    if args.latency && (peer.is_tool() || args.engine == xdp_mode::Engine::Xdp) {
        return Err(Error::usage(
            "--latency needs a uringbench recv to answer its probe and uringbench's own engine: not with --iperf2, --iperf3, --ntttcp or --engine xdp",
        ));
    }
    let start_at = start_at_of(&args)?;
    if peer == Peer::Iperf2 && args.html.is_some() {
        return Err(Error::usage("--html is not available with --iperf2: save -J and run `report --html` on it"));
    }
    if matches!(peer, Peer::Iperf3 | Peer::Ntttcp) && args.engine == xdp_mode::Engine::Xdp {
        return Err(Error::usage("--engine xdp is not available with --iperf3 or --ntttcp"));
    }
    match peer {
        Peer::Iperf2 => return iperf2_mode::send(&args, fast, stop),
        Peer::Iperf3 => return iperf3_mode::send(&args, fast, stop),
        Peer::Ntttcp => return iperf3_mode::send_ntttcp(&args, fast, stop),
        Peer::Uringbench => {}
    }
    let run_test = xdp_mode::sender(args.engine, args.iface.clone(), args.gen)?;
    let StreamPlan { mut spec, rate_line } =
        StreamPlan::new(&args, udp, Some(args.interval.unwrap_or(DEFAULT_INTERVAL)))?;
    units::set_fixed_unit(args.units)?;
    spec.one_way_delay = args.one_way_delay;
    spec.latency = args.latency;
    spec.trip_times = args.trip_times;
    spec.clocks_synced = args.clocks_synced;
    spec.start_at = start_at;
    let (tuning, mut local) = tuning_of(&args.tuning)?;
    local.data_port = args.cport;
    local.no_steer = args.steer == args::Steer::Off;
    local.ntuple = args.steer == args::Steer::Ntuple;
    if args.cport.is_some() && (peer == Peer::Iperf2 || args.engine == xdp_mode::Engine::Xdp) {
        return Err(Error::usage("--cport applies to uringbench's own engine, not to --iperf2 or --engine xdp"));
    }
    if tuning.bytes.is_some() {
        // The whole transfer is the window, as iperf measures `-n`.
        spec.warmup_ms = 0;
        spec.cooldown_ms = 0;
    }
    spec.tuning = tuning;
    spec.validate()?;
    if args.repeat == 0 {
        return Err(Error::usage("--repeat must be at least 1"));
    }
    let opts = Reach::new(&args.to, &args.threads, default_port(peer))?.options(spec, local, fast, stop);
    let format = if args.json { Format::Json } else { args.format };
    if args.output.json_stream && format == Format::Csv {
        return Err(Error::usage("--json-stream writes JSON; it does not combine with --format csv"));
    }
    let repeat = args.repeat as usize;
    let out = Arc::new(Out::new(args.output.logfile.as_deref(), args.output.title.clone())?);
    out.stop_on_failure(&opts.stop);
    // One test in text prints as it runs; --json-stream always does.
    let live = if args.output.json_stream {
        Some(Style::JsonStream)
    } else if format == Format::Text && repeat == 1 {
        Some(Style::Text)
    } else {
        None
    };
    let title = args.output.title.clone();
    if format == Format::Csv {
        out.raw(&format!("{CSV_HEADER}\n"));
    }
    if let Some(line) = rate_line {
        if format == Format::Text && !args.output.json_stream {
            out.text(&format!("{line}\n"));
        } else {
            eprintln!("uringbench: {line}");
        }
    }
    let mut progress = (repeat > 1).then(|| progress::Progress::new("send --repeat", repeat));
    let plan = RepeatPlan { runs: args.repeat, stop: opts.stop.clone() };
    let RepeatResult { reports, stopped, summary, .. } = uringbench::repeat::run(
        &plan,
        |_| {
            let live_out = live.map(|style| LiveOut::new(&out, style, args.output.detail()));
            let observer: Arc<dyn Observer> = match &live_out {
                Some(l) => l.clone(),
                None => Arc::new(Quiet),
            };
            let ran = run_test(&opts, observer);
            // Rows held for order are shown before the run's summary.
            if let Some(l) = &live_out {
                l.flush();
            }
            ran
        },
        |report| report.to_document(),
        |done| {
            let (run, report) = (done.run, done.report);
            match (live, format) {
                (Some(Style::JsonStream), _) => out.json_line(&end_event(&titled(report.to_document(), &title))),
                (Some(Style::Text), _) => out.text(&report.render_after_live(args.output.detail())),
                (None, Format::Text) => out.text(&format!("run {run}/{repeat}: {}\n", report.summary_line())),
                (None, Format::Csv) => out.raw(&csv_rows(run as usize, report)),
                (None, Format::Json) => {}
            }
            sink::set_headline(if repeat == 1 {
                report.summary_line()
            } else {
                format!("run {run}/{repeat}: {}", report.summary_line())
            });
            if let Some(p) = progress.as_mut() {
                p.step();
            }
        },
    )?;
    if let Some(median) = summary.receiver_bits_per_second.as_ref().filter(|_| repeat > 1) {
        sink::set_headline(format!(
            "{} runs, median {} received",
            reports.len(),
            format_bits_per_second(median.median)
        ));
    }
    // The whole document: -J's, or after the events with --json-stream-full-output.
    let whole = if args.output.json_stream { args.output.json_stream_full_output } else { format == Format::Json };
    match format {
        _ if whole && repeat == 1 => out.json_doc(&titled(reports[0].to_document(), &title))?,
        _ if whole => out.json_doc(&RepeatDocument {
            kind: Kind::Repeat,
            schema_version: SCHEMA_VERSION,
            tool: Tool::this(),
            repeat,
            runs: reports.iter().map(|r| titled(r.to_document(), &title)).collect(),
            summary,
        })?,
        _ if args.output.json_stream => {}
        Format::Text if repeat > 1 => out.text(&render_summary(&summary)),
        _ => {}
    }
    // The report is in place (or its error known) before --html is tried.
    let written = out.finish();
    let html = sweep_cmd::write_html(args.html.as_deref(), "send", || {
        let mut docs: Vec<StreamDocument> = reports.iter().map(|r| titled(r.to_document(), &title)).collect();
        match docs.len() {
            1 => SavedResults::Send(Box::new(docs.remove(0))),
            _ => SavedResults::Repeat(docs),
        }
    });
    written.and(html)?;
    if let Some(e) = &stopped {
        eprintln!("uringbench: stopped after {} of {repeat} runs: {e}", reports.len());
    } else if let Some(e) = reports.iter().find_map(|r| r.first_error()).filter(|_| format != Format::Text) {
        // A JSON or CSV document on stdout carries it too; stderr says why the exit is 1.
        eprintln!("uringbench: {e}");
    }
    let interrupted_early = opts.stop.is_stopped() && reports.len() < repeat;
    let all_complete = stopped.is_none() && !interrupted_early && reports.iter().all(|r| r.complete());
    Ok(if all_complete { 0 } else { 1 })
}

pub fn http(args: HttpArgs, stop: StopToken) -> Result<u8, Error> {
    use uringbench::{run_http_live, HttpOptions, HttpReport, DEFAULT_REQUEST_RUN_LIMIT};
    let opts = HttpOptions {
        url: args.url,
        connections: args.connections,
        duration: args.duration.unwrap_or(if args.requests.is_some() {
            DEFAULT_REQUEST_RUN_LIMIT
        } else {
            std::time::Duration::from_secs(10)
        }),
        requests: args.requests,
        method: args.method,
        headers: args.headers,
        body: args.body,
        keep_alive: !args.no_keepalive,
        rate: args.rate,
        timeout: args.timeout,
        cpus: args.cpus.map(|c| c.0),
        threads: args.threads,
        interval: args.interval,
        stop,
    };
    let format = if args.json { Format::Json } else { args.format };
    // A bad URL or a closed port is said before "running...", not after the run.
    uringbench::check_http(&opts)?;
    if format == Format::Text {
        // The summary comes at the end; say at once what runs, and for how long at most.
        Sink::stdout().text(&format!(
            "{} {}: {} connections, running {}...\n",
            opts.method,
            opts.url,
            opts.connections,
            match opts.requests {
                Some(n) => format!("{n} requests (at most {:.0} s)", opts.duration.as_secs_f64()),
                None => format!("{:.1} s", opts.duration.as_secs_f64()),
            }
        ));
    }
    Sink::stdout().stop_on_failure(&opts.stop);
    // Text output shows each interval as it closes, as rr does.
    let report = run_http_live(&opts, &mut |iv| {
        if format == Format::Text {
            Sink::stdout().text(&HttpReport::interval_line(iv));
        }
    })?;
    sink::set_headline(format!(
        "{} requests, {:.0} transactions/s, p99 {} us",
        report.requests, report.transactions_per_second, report.latency_us.p99
    ));
    let out = Sink::stdout();
    out.export(format.into(), &report)?;
    let written = out.finish();
    sweep_cmd::write_html(args.html.as_deref(), "http", || SavedResults::Http(Box::new(report.to_document())))?;
    written?;
    if let Some(i) = report.interrupted.as_ref().filter(|_| format != Format::Text) {
        eprintln!("uringbench: {i}");
    } else if !report.complete && format != Format::Text {
        eprintln!("uringbench: incomplete: {} responses, {} failed requests", report.requests, report.errors.total());
    }
    Ok(if report.complete { 0 } else { 1 })
}

/// A run's document with its `title` (`--title`), when one was given.
fn titled<D: Titled>(mut doc: D, title: &Option<String>) -> D {
    doc.set_title(title.clone());
    doc
}

/// A document that carries `--title`.
trait Titled {
    fn set_title(&mut self, title: Option<String>);
}

impl Titled for StreamDocument {
    fn set_title(&mut self, title: Option<String>) {
        self.title = title;
    }
}

impl Titled for TransactionDocument {
    fn set_title(&mut self, title: Option<String>) {
        self.title = title;
    }
}

fn render_summary(s: &RunsSummary) -> String {
    let mut out = format!("{} runs, {} complete\n", s.runs, s.complete_runs);
    let line = |name: &str, st: &Option<Stats>, scale: f64, unit: &str| match st {
        Some(st) => format!(
            "{name:<22} min {:.2}  median {:.2}  mean {:.2}  max {:.2}  stdev {:.2} {unit}\n",
            st.min / scale,
            st.median / scale,
            st.mean / scale,
            st.max / scale,
            st.stdev / scale
        ),
        None => format!("{name:<22} no complete run\n"),
    };
    out += &line("received Gbit/s", &s.receiver_bits_per_second, 1e9, "");
    out += &line("offered Gbit/s", &s.sender_bits_per_second, 1e9, "");
    out += &line("receiver CPU-s/GB", &s.cpu_seconds_per_gb, 1.0, "");
    out
}

pub fn rr(args: RrArgs, workload: Workload, stop: StopToken) -> Result<u8, Error> {
    let opts = plan::rr_options(&args, workload, stop)?;
    let json = args.json || args.format == TextOrJson::Json;
    let out = Arc::new(Out::new(args.output.logfile.as_deref(), args.output.title.clone())?);
    out.stop_on_failure(&opts.stop);
    let style = if args.output.json_stream { Style::JsonStream } else { Style::Text };
    let detail = args.output.detail();
    let observer: Arc<dyn Observer> = if json { Arc::new(Quiet) } else { LiveOut::new(&out, style, detail) };
    let report = uringbench::run_rr_live(&opts, observer)?;
    let title = args.output.title.clone();
    match (json, style) {
        (true, _) => out.json_doc(&titled(report.to_document(), &title))?,
        (_, Style::JsonStream) => {
            out.json_line(&end_event(&titled(report.to_document(), &title)));
            if args.output.json_stream_full_output {
                out.json_doc(&titled(report.to_document(), &title))?;
            }
        }
        _ => out.text(&report.render_after_live(detail)),
    }
    sink::set_headline(format!(
        "{:.0} transactions/s, p99 latency {} us",
        report.transactions_per_second(),
        report.latency.p99
    ));
    let written = out.finish();
    let name = if workload == Workload::Crr { "crr" } else { "rr" };
    let html = sweep_cmd::write_html(args.html.as_deref(), name, || {
        SavedResults::Transactions(Box::new(titled(report.to_document(), &title)))
    });
    written.and(html)?;
    if let Some(e) = report.first_error().filter(|_| !report.succeeded() && (json || args.output.json_stream)) {
        eprintln!("uringbench: {e}");
    }
    Ok(if report.succeeded() { 0 } else { 1 })
}
