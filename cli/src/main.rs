//! `uringbench`: parses the command line, calls the engine, prints. Nothing else lives here.

mod args;
mod doctor_cmd;
mod iperf2_mode;
mod iperf3_mode;
mod iperf_cli;
mod knobs;
mod live_out;
mod metrics_endpoint;
mod peer_out;
mod progress;
mod recv_cmd;
mod shipped;
mod sink;
mod sweep_cmd;
mod target;
mod tuning_cmd;
mod xdp_mode;

use args::*;
use clap::Parser;
use knobs::{refuse_knobs, tuning_of};
use live_out::{LiveOut, Out, Style};
use sink::Sink;
use std::{process::ExitCode, sync::Arc, time::Duration};
use uringbench::{
    iperf2::IPERF2_PORT,
    output::{csv_rows, end_event, SavedResults, CSV_HEADER},
    repeat::{RepeatPlan, RepeatResult},
    units::{self, format_bits_per_second},
    BusyPoll, Direction, Error, FastPaths, Kind, Observer, Proto, Psk, Quiet, RepeatDocument, RunsSummary, SendOptions,
    Stats, StopToken, StreamDocument, TestSpec, Tool, TransactionDocument, Workload, ZeroCopyMode, DEFAULT_PORT,
    SCHEMA_VERSION,
};

impl TestWindow {
    /// Writes the window and the interval period into a spec (milliseconds on the wire).
    pub fn apply(&self, spec: &mut TestSpec, interval: Option<std::time::Duration>) {
        spec.time_ms = self.time.as_millis() as u64;
        spec.warmup_ms = self.warmup.as_millis() as u64;
        spec.cooldown_ms = self.cooldown.as_millis() as u64;
        spec.interval_ms = interval.map_or(0, |d| d.as_millis() as u64);
    }
}

/// The total offered rate of a send (`-b` and `--pps` are per flow, as iperf's `-b`), and the
/// line that says so when it is limited.
pub(crate) fn offered(args: &SendArgs, udp: bool, len: u64) -> (u64, Option<String>) {
    let flows = u64::from(args.queues) * u64::from(args.flows_per_queue);
    let bursts = burst_of(args).map_or(String::new(), |n| format!(" in bursts of {n} sends"));
    let (per_flow, why) = match (args.pps, args.rate) {
        (Some(pps), _) => ((pps * len as f64 * 8.0).round() as u64, ""),
        (None, Some(rate)) => (rate.bps, bursts.as_str()),
        (None, None) if udp => (UDP_DEFAULT_RATE, " (UDP's default, as iperf's; -b 0 for unlimited)"),
        (None, None) => (0, ""),
    };
    let total = per_flow.saturating_mul(flows);
    let line = (total > 0).then(|| {
        format!(
            "rate: {} per flow x {flows} flow{} = {}{why}",
            format_bits_per_second(per_flow as f64),
            if flows == 1 { "" } else { "s" },
            format_bits_per_second(total as f64)
        )
    });
    (total, line)
}

/// `-b RATE/N`'s N: sends back to back before the rate is checked.
pub(crate) fn burst_of(args: &SendArgs) -> Option<u32> {
    args.rate.and_then(|r| r.burst)
}

/// `-s -D`: the receiver in the background, in a process group of its own so the terminal's
/// Ctrl-C does not reach it, its output discarded; prints its process id.
fn daemon(t: &iperf_cli::Translation) -> ExitCode {
    use std::{os::unix::process::CommandExt, process::Stdio};
    let spawned = std::env::current_exe().and_then(|exe| {
        std::process::Command::new(exe)
            .args(&t.argv[1..])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
    });
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            eprintln!("uringbench: starting the receiver in the background: {e}");
            return ExitCode::from(1);
        }
    };
    // A receiver that cannot listen (port taken, bad flag) exits at once: say so here.
    std::thread::sleep(std::time::Duration::from_millis(300));
    if let Ok(Some(status)) = child.try_wait() {
        eprintln!("uringbench: the background receiver exited at once ({status}); run it without -D to see why");
        return ExitCode::from(1);
    }
    Sink::stdout().text(&format!("{}: in the background, process {}\n", t.ran_as(), child.id()));
    match Sink::stdout().finish() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("uringbench: {e}");
            ExitCode::from(1)
        }
    }
}

impl FastPathArgs {
    /// The fast paths asked for, probed before any ring exists; the run carries them down.
    /// `rx_queues`: `recv --queues`, which narrows the queues `--zc-rx IFACE` chooses.
    fn probe(&self, zc_rx: Option<&str>, rx_queues: Option<&[u32]>) -> Result<FastPaths, Error> {
        use uringbench::{fastpath, NapiPoll, SqPoll};
        let mut paths = FastPaths {
            sqpoll: self.sqpoll.map(|d| SqPoll { idle_ms: d.as_millis().clamp(1, 60_000) as u32 }),
            napi: self
                .napi
                .map(|d| NapiPoll { busy_poll_us: d.as_micros().clamp(1, 1_000_000) as u32, prefer_busy_poll: true }),
            zc_rx: zc_rx.map(fastpath::parse_zc_rx).transpose()?,
        };
        if paths != FastPaths::default() {
            fastpath::probe(&mut paths, rx_queues)?;
        }
        Ok(paths)
    }
}

/// The direction `send`'s flags ask for.
pub(crate) fn direction_of(args: &SendArgs) -> Direction {
    if args.bidir {
        Direction::Bidir
    } else if args.reverse {
        Direction::Reverse
    } else {
        Direction::Forward
    }
}

/// The port to use: given, or the default of the peer (iperf2's 5001 with --iperf2).
fn port_or_default(port: Option<u16>, peer: Peer) -> u16 {
    port.unwrap_or(if peer == Peer::Iperf2 { IPERF2_PORT } else { DEFAULT_PORT })
}

pub(crate) fn zerocopy_mode(z: OnOffAuto) -> ZeroCopyMode {
    match z {
        OnOffAuto::Auto => ZeroCopyMode::Auto,
        OnOffAuto::On => ZeroCopyMode::On,
        OnOffAuto::Off => ZeroCopyMode::Off,
    }
}

fn busy(b: OnOffAuto) -> BusyPoll {
    match b {
        OnOffAuto::Auto => BusyPoll::Auto,
        OnOffAuto::On => BusyPoll::On,
        OnOffAuto::Off => BusyPoll::Off,
    }
}

fn main() -> ExitCode {
    // Where this process's output begins, should stdout be a file to cut back on a failed write.
    let _ = Sink::stdout();
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let text: Vec<String> = argv.iter().map(|a| a.to_string_lossy().into_owned()).collect();
    let iperf = match iperf_cli::translate(&text) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("uringbench: {e}");
            return ExitCode::from(2);
        }
    };
    let parsed = match &iperf {
        Some(t) => Cli::try_parse_from(&t.argv),
        None => Cli::try_parse_from(argv),
    };
    let mut cli = match parsed {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(
                e.kind(),
                ErrorKind::DisplayHelp
                    | ErrorKind::DisplayVersion
                    | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            ) {
                let _ = e.print();
                return ExitCode::from(if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                    2
                } else {
                    0
                });
            }
            // One line, as every other error: clap's message up to its usage block.
            let text = e.to_string();
            let message: Vec<&str> = text
                .lines()
                .map(str::trim)
                .take_while(|l| {
                    !l.starts_with("Usage:") && !l.starts_with("tip:") && !l.starts_with("For more information")
                })
                .filter(|l| !l.is_empty())
                .collect();
            // `send` without -c: name the flag as users type it.
            let message = message.join(" ").replace("--target <TARGET>", "-c HOST");
            eprintln!("uringbench: {} (see --help)", message.trim_start_matches("error: "));
            return ExitCode::from(2);
        }
    };
    if let Err(e) = target::normalize(&mut cli) {
        eprintln!("uringbench: {e}");
        return ExitCode::from(e.exit_code() as u8);
    }
    if let Some(t) = &iperf {
        if t.daemon {
            return daemon(t);
        }
        // Which native command ran, where it cannot spoil a JSON or CSV document.
        if t.machine_output() {
            eprintln!("{}", t.ran_as());
        } else {
            Sink::stdout().text(&format!("{}\n", t.ran_as()));
        }
    }
    // Commands that run tests end them early on a signal, with what they measured; the
    // others keep the default action (a Ctrl-C on `doctor` ends it at once).
    let runs_tests = matches!(
        cli.command,
        Command::Recv(_)
            | Command::Send(_)
            | Command::Http(_)
            | Command::Rr(_)
            | Command::Crr(_)
            | Command::Sweep(_)
            | Command::Search(_)
            | Command::Experiment(_)
    );
    let stop = if runs_tests {
        match stop_on_signals() {
            Ok(stop) => stop,
            Err(e) => {
                eprintln!("uringbench: {e}");
                return ExitCode::from(e.exit_code() as u8);
            }
        }
    } else {
        StopToken::new()
    };
    let result = match cli.command {
        Command::Recv(args) => recv_cmd::recv(args, stop),
        Command::Send(args) => send(args, stop),
        Command::Http(args) => http(args, stop),
        Command::Rr(args) => rr(args, Workload::Rr, stop),
        Command::Crr(args) => rr(args, Workload::Crr, stop),
        Command::Doctor(args) => doctor_cmd::doctor(args),
        Command::Sweep(args) => sweep_cmd::sweep(args, stop),
        Command::Report(args) => sweep_cmd::report(args),
        Command::Compare(args) => tuning_cmd::compare(args),
        Command::Search(args) => tuning_cmd::search(args, stop),
        Command::Experiment(args) => tuning_cmd::experiment(args, stop),
        Command::Settings(args) => tuning_cmd::settings(args),
        Command::Completions { shell } => shipped::completions(shell),
        Command::Man { command } => shipped::man(command.as_deref()),
    };
    // Stdout is completed whatever the command did: a failed write there is an error too.
    let result = result.and_then(|code| Sink::stdout().finish().map(|()| code));
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            // The result measured is not lost when its output could not be written.
            if let Some(headline) = sink::take_headline() {
                eprintln!("uringbench: result: {headline}");
            }
            eprintln!("uringbench: {e}");
            ExitCode::from(e.exit_code() as u8)
        }
    }
}

/// How long after the first stop signal another one forces an exit. A shorter gap is the same
/// stop delivered twice: GNU `timeout` and a terminal signal the process and then its process
/// group, microseconds apart.
const FORCE_EXIT_AFTER: Duration = Duration::from_millis(500);

/// Maps the stop signals (SIGINT, SIGTERM, SIGHUP, SIGQUIT) onto a new stop token: the first one
/// stops it, so the running test ends early with its report; another one at least
/// [`FORCE_EXIT_AFTER`] later reverts every setting still applied and exits at once. Call it
/// before any other thread exists (the signals are blocked here, and so in every later thread).
fn stop_on_signals() -> Result<StopToken, Error> {
    let signals = uringbench::StopSignals::block()?;
    let stop = StopToken::new();
    let token = stop.clone();
    std::thread::Builder::new()
        .name("ub-signals".into())
        .spawn(move || {
            let mut first: Option<std::time::Instant> = None;
            while let Some(signal) = signals.wait() {
                match first {
                    None => {
                        first = Some(std::time::Instant::now());
                        token.stop(signal.name);
                    }
                    Some(at) if at.elapsed() >= FORCE_EXIT_AFTER => {
                        let (reverted, failed) = uringbench::settings::revert_registered();
                        if reverted > 0 {
                            eprintln!("uringbench: interrupted: reverted {reverted} setting(s)");
                        }
                        for e in &failed {
                            eprintln!("uringbench: interrupted: {e}");
                        }
                        std::process::exit(if failed.is_empty() { 128 + signal.number } else { 1 });
                    }
                    Some(_) => {}
                }
            }
        })
        .map_err(|e| Error::io("starting the signal watcher", e))?;
    Ok(stop)
}

impl OutputArgs {
    /// How much the text report shows (`-v`).
    fn detail(&self) -> uringbench::output::Detail {
        if self.verbose {
            uringbench::output::Detail::Verbose
        } else {
            uringbench::output::Detail::Short
        }
    }
}

/// Intervals of send, rr and crr when `-i` is not given, in every output, as iperf3's
/// (`-i 0` turns them off).
const DEFAULT_INTERVAL: Duration = Duration::from_secs(1);

/// `--start-at`: the instant, checked against this host's clock before anything is opened.
fn start_at_of(args: &SendArgs) -> Result<Option<uringbench::StartAt>, Error> {
    let Some(text) = args.start_at.as_deref() else { return Ok(None) };
    if args.peer().is_tool() {
        return Err(Error::usage(
            "--start-at needs a uringbench recv, which waits for the start: not with --iperf2, --iperf3 or --ntttcp",
        ));
    }
    if args.repeat > 1 {
        return Err(Error::usage("--start-at starts one run: not with --repeat"));
    }
    let at = uringbench::StartAt::parse(text)?;
    at.check(uringbench::StartAt::now())?;
    Ok(Some(at))
}

fn send(args: SendArgs, stop: StopToken) -> Result<u8, Error> {
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
    let len = args.len.unwrap_or(default_len(udp));
    if len == 0 || len > u64::from(u32::MAX) {
        return Err(Error::usage(format!("--len {len} out of range: 1 byte to {} bytes (4 GiB - 1)", u32::MAX)));
    }
    units::set_fixed_unit(args.units)?;
    let (rate_bps, rate_line) = offered(&args, udp, len);
    let mut spec = TestSpec {
        proto: if udp { Proto::Udp } else { Proto::Tcp },
        workload: Workload::Stream,
        queues: args.queues,
        flows_per_queue: args.flows_per_queue,
        len: len as u32,
        rate_bps,
        burst: burst_of(&args),
        zerocopy: zerocopy_mode(args.zerocopy),
        depth: args.depth,
        gso: !args.no_gso,
        one_way_delay: args.one_way_delay,
        latency: args.latency,
        trip_times: args.trip_times,
        clocks_synced: args.clocks_synced,
        direction: direction_of(&args),
        start_at,
        ..TestSpec::default()
    };
    args.window.apply(&mut spec, Some(args.interval.unwrap_or(DEFAULT_INTERVAL)));
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
    let opts = SendOptions {
        target: args.target,
        port: port_or_default(args.port, peer),
        spec,
        cpus: args.cpus.map(|c| c.0),
        busy_poll: busy(args.busy_poll),
        local,
        fast,
        kernel: uringbench::KernelCaps::detect()?,
        psk: args.psk_file.as_deref().map(Psk::load).transpose()?,
        stop,
    };
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

fn http(args: HttpArgs, stop: StopToken) -> Result<u8, Error> {
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
    match format {
        Format::Text => out.text(&report.render_text()),
        Format::Json => out.json_doc(&report.to_json())?,
        Format::Csv => out.text(&format!("{}\n{}\n", HttpReport::CSV_HEADER, report.csv_row())),
    }
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

fn rr(args: RrArgs, workload: Workload, stop: StopToken) -> Result<u8, Error> {
    let fast = args.fast.probe(None, None)?;
    let mut spec = TestSpec {
        proto: if args.udp { Proto::Udp } else { Proto::Tcp },
        workload,
        queues: args.queues,
        flows_per_queue: args.flows_per_queue,
        req_len: u32::try_from(args.req).unwrap_or(u32::MAX),
        resp_len: u32::try_from(args.resp).unwrap_or(u32::MAX),
        timeout_ms: args.timeout.as_millis() as u64,
        bounceback: args.bounceback,
        trip_times: args.trip_times,
        clocks_synced: args.clocks_synced,
        ..TestSpec::default()
    };
    args.window.apply(&mut spec, Some(args.interval.unwrap_or(DEFAULT_INTERVAL)));
    let (tuning, local) = tuning_of(&args.tuning)?;
    if tuning.bytes.is_some() || tuning.skip_rx_copy {
        return Err(Error::usage("-n/--bytes and --skip-rx-copy apply to send, not to rr or crr"));
    }
    // rr over TCP keeps its flows for the whole test; crr's come and go, UDP rr has none.
    refuse_knobs(&args.tuning, args.udp || workload == Workload::Crr, false)?;
    spec.tuning = tuning;
    spec.validate()?;
    let json = args.json || args.format == TextOrJson::Json;
    let opts = SendOptions {
        target: args.target,
        port: port_or_default(args.port, Peer::Uringbench),
        spec,
        cpus: args.cpus.map(|c| c.0),
        busy_poll: busy(args.busy_poll),
        local,
        fast,
        kernel: uringbench::KernelCaps::detect()?,
        psk: args.psk_file.as_deref().map(Psk::load).transpose()?,
        stop,
    };
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
