//! `uringbench`: parses the command line, calls the engine, prints. Nothing else lives here.

mod doctor_cmd;
mod iperf2_mode;
mod sweep_cmd;
mod xdp_mode;

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use uringbench::control::DEFAULT_PORT;
use uringbench::export::{csv_rows, RepeatSummary, Stats, CSV_HEADER};
use uringbench::iperf2::IPERF2_PORT;
use uringbench::placement::{parse_cpu_list, BusyPoll};
use uringbench::report::{Role, SCHEMA_VERSION};
use uringbench::server::{self, ReceiverConfig, ServerEvent, ServerLimits};
use uringbench::spec::{Direction, Proto, TestSpec, Workload, ZeroCopyMode};
use uringbench::units::{format_bits_per_second, parse_duration, parse_rate, parse_size};
use uringbench::workload::stream::SendOptions;
use uringbench::Error;

const EXAMPLES: &str = "Examples:
  uringbench recv                                  # serve tests on port 5300, one after another
  uringbench send --target 10.0.0.2 -P 16 -t 30s   # 16 queues for 30 s, receiver-verified report
  uringbench send --target 10.0.0.2 -J > run.json  # machine-readable report
  uringbench recv --cpus 2-5 --once                # queue threads on CPUs 2..5, exit after one test";

#[derive(Parser)]
#[command(name = "uringbench", version, about = "io_uring network traffic engine: receiver-verified throughput, CPU per byte, zero-copy truth", after_help = EXAMPLES)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Receive tests: counts what senders deliver and reports it back.
    Recv(RecvArgs),
    /// Send a test to a running `uringbench recv` and print both sides' figures.
    Send(SendArgs),
    /// HTTP/1.1 load on a web server, like wrk/wrk2: latency percentiles, requests/s, errors.
    Http(HttpArgs),
    /// Request/response against `uringbench recv`: transactions/s and latency percentiles.
    Rr(RrArgs),
    /// Connect/request/response/close against `uringbench recv`: connections/s, latency, failures.
    Crr(RrArgs),
    /// Host and path checks (kernel, NIC, IRQs, sysctls, cloud caps), each with its fix.
    Doctor(doctor_cmd::DoctorArgs),
    /// A series of stream tests over queues, lengths or rates: CSV, JSON and an SVG chart.
    Sweep(sweep_cmd::SweepArgs),
    /// Re-render saved results (sweep JSON, send -J): text summary and an SVG chart.
    Report(sweep_cmd::ReportArgs),
}

#[derive(Args)]
struct RrArgs {
    /// Host running `uringbench recv`.
    #[arg(short = 'c', long)]
    target: String,
    /// Port [default: 5300].
    #[arg(short = 'p', long)]
    port: Option<u16>,
    /// Queues (one pinned thread each while CPUs last); one flow each.
    #[arg(short = 'P', long, default_value_t = 1)]
    queues: u32,
    /// Flows per queue, each with one transaction (crr: one connection) in flight.
    #[arg(long, default_value_t = 1)]
    flows_per_queue: u32,
    /// rr over UDP: one datagram each way per transaction (sizes up to 65507 B).
    #[arg(short = 'u', long)]
    udp: bool,
    /// UDP rr and crr: a transaction unanswered this long is counted as failed.
    #[arg(long, value_parser = duration, default_value = "1s")]
    timeout: std::time::Duration,
    /// Request size (1 B to 1 MiB).
    #[arg(long, value_parser = size, default_value = "1")]
    req: u64,
    /// Response size (1 B to 1 MiB).
    #[arg(long, value_parser = size, default_value = "1")]
    resp: u64,
    #[command(flatten)]
    window: TestWindow,
    #[arg(long, value_parser = cpu_list)]
    cpus: Option<CpuList>,
    /// auto spins on the completion queue while a thread has a CPU of its own.
    #[arg(long, value_enum, default_value_t = OnOffAuto::Auto)]
    busy_poll: OnOffAuto,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    #[arg(short = 'J', long)]
    json: bool,
    #[command(flatten)]
    fast: FastPathArgs,
}

/// How long a test runs and what its headline excludes (send, rr, crr, sweep).
#[derive(Args)]
pub(crate) struct TestWindow {
    /// Measured window, e.g. 10s, 500ms, 2m.
    #[arg(short = 't', long, value_parser = duration, default_value = "10s")]
    pub time: std::time::Duration,
    /// Excluded from the headline at the start.
    #[arg(long, value_parser = duration, default_value = "1s")]
    pub warmup: std::time::Duration,
    /// Excluded from the headline at the end.
    #[arg(long, value_parser = duration, default_value = "250ms")]
    pub cooldown: std::time::Duration,
    /// Interval report period (receiver-side figures), e.g. 1s.
    #[arg(short = 'i', long, value_parser = duration)]
    pub interval: Option<std::time::Duration>,
}

impl TestWindow {
    /// Writes the window into a spec (milliseconds on the wire).
    pub fn apply(&self, spec: &mut TestSpec) {
        spec.time_ms = self.time.as_millis() as u64;
        spec.warmup_ms = self.warmup.as_millis() as u64;
        spec.cooldown_ms = self.cooldown.as_millis() as u64;
        spec.interval_ms = self.interval.map_or(0, |d| d.as_millis() as u64);
    }
}

/// Kernel fast paths, chosen for the whole process (see `uringbench::fastpath`).
#[derive(Args, Default)]
struct FastPathArgs {
    /// io_uring SQPOLL: a kernel thread submits; optional idle time before it sleeps.
    #[arg(long, value_name = "IDLE", value_parser = duration, num_args = 0..=1, default_missing_value = "100ms")]
    sqpoll: Option<std::time::Duration>,
    /// io_uring NAPI busy polling (Linux 6.9+) for this long per wait [default: 50us].
    #[arg(long, value_name = "TIME", value_parser = duration, num_args = 0..=1, default_missing_value = "50us")]
    napi: Option<std::time::Duration>,
}

impl FastPathArgs {
    /// Probes and turns on what was asked, before any ring exists.
    fn apply(&self, zc_rx: Option<&str>) -> Result<(), Error> {
        use uringbench::fastpath::{self, FastPaths, NapiPoll, SqPoll};
        let paths = FastPaths {
            sqpoll: self.sqpoll.map(|d| SqPoll { idle_ms: d.as_millis().clamp(1, 60_000) as u32 }),
            napi: self
                .napi
                .map(|d| NapiPoll { busy_poll_us: d.as_micros().clamp(1, 1_000_000) as u32, prefer_busy_poll: true }),
            zc_rx: zc_rx.map(fastpath::parse_zc_rx).transpose()?,
        };
        if paths == FastPaths::default() {
            return Ok(());
        }
        fastpath::configure(paths)
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum OnOffAuto {
    Auto,
    On,
    Off,
}

#[derive(Clone, Copy, ValueEnum, PartialEq)]
enum Format {
    Text,
    Json,
    Csv,
}

#[derive(Args)]
struct RecvArgs {
    /// Local address to listen on.
    #[arg(long, default_value = "::")]
    bind: String,
    /// Port for control and data connections.
    /// Port [default: 5300, or 5001 with --iperf2].
    #[arg(short = 'p', long)]
    port: Option<u16>,
    /// CPUs for queue threads, e.g. 0-3,8 (default: all this process may use).
    #[arg(long, value_parser = cpu_list)]
    cpus: Option<CpuList>,
    /// Busy-poll the completion queues: auto spins briefly when a thread has its own CPU.
    #[arg(long, value_enum, default_value_t = OnOffAuto::Auto)]
    busy_poll: OnOffAuto,
    /// Exit after one test (exit code 1 if it was incomplete).
    #[arg(long)]
    once: bool,
    /// Serve unmodified iperf2 clients (`iperf -c`, TCP and UDP) on the port (default 5001).
    #[arg(long)]
    iperf2: bool,
    /// Longest test a sender may request (warm-up and cool-down included).
    #[arg(long, value_parser = duration, default_value = "1h")]
    max_time: std::time::Duration,
    /// Most queues a sender may request.
    #[arg(long, default_value_t = 256)]
    max_queues: u32,
    /// Tests served at the same time.
    #[arg(long, default_value_t = 4)]
    max_sessions: usize,
    /// uring: sockets; xdp: forward UDP tests on AF_XDP sockets with uringbench's XDP program.
    #[arg(long, value_enum, default_value_t = xdp_mode::Engine::Uring)]
    engine: xdp_mode::Engine,
    /// --engine xdp: interface to attach to [default: the one facing each sender].
    #[arg(long)]
    iface: Option<String>,
    /// --engine xdp: where the program runs (auto: native, else generic).
    #[arg(long, value_enum, default_value_t = xdp_mode::XdpModeArg::Auto)]
    xdp_mode: xdp_mode::XdpModeArg,
    /// Zero-copy receive (io_uring RECV_ZC) from NIC queue QUEUE.. of IFACE, one queue per
    /// thread; needs header split and flow steering (refused with what is missing).
    #[arg(long, value_name = "IFACE[:QUEUE]")]
    zc_rx: Option<String>,
    #[command(flatten)]
    fast: FastPathArgs,
}

#[derive(Args)]
struct SendArgs {
    /// Host running `uringbench recv`.
    #[arg(short = 'c', long)]
    target: String,
    /// Port [default: 5300, or 5001 with --iperf2].
    #[arg(short = 'p', long)]
    port: Option<u16>,
    /// Queues (one pinned thread each while CPUs last); at least one flow each.
    #[arg(short = 'P', long, default_value_t = 1)]
    queues: u32,
    /// Extra flows per queue.
    #[arg(long, default_value_t = 1)]
    flows_per_queue: u32,
    #[command(flatten)]
    window: TestWindow,
    /// Bytes per send (TCP) or per datagram (UDP), binary units [default: 128K TCP, 1470 UDP].
    #[arg(short = 'l', long, value_parser = size)]
    len: Option<u64>,
    /// Total offered rate over all flows in bits/s (25G, 500M); 0 = unlimited.
    #[arg(short = 'b', long, value_parser = rate, default_value = "0")]
    rate: u64,
    /// Total offered rate in datagrams (UDP frames) per second over all flows (e.g. 1M, 250k),
    /// instead of --rate: the same as --rate PPS x --len x 8.
    #[arg(long, value_parser = request_rate, conflicts_with = "rate")]
    pps: Option<f64>,
    /// Sends in flight per flow.
    #[arg(long, default_value_t = 4)]
    depth: u32,
    /// Protocol of the data flows.
    #[arg(long, value_enum, default_value_t = ProtoArg::Tcp)]
    proto: ProtoArg,
    /// Same as --proto udp.
    #[arg(short = 'u', long)]
    udp: bool,
    /// The receiver's host sends, this one receives (over connections this side opens).
    #[arg(short = 'R', long, conflicts_with = "bidir")]
    reverse: bool,
    /// Both directions at once, one set of flows each way.
    #[arg(long)]
    bidir: bool,
    /// UDP: one datagram per send instead of GSO batches (for comparison).
    #[arg(long)]
    no_gso: bool,
    /// UDP: also report one-way delay (both ends must share a clock: same host, or PTP).
    #[arg(long)]
    one_way_delay: bool,
    /// Talk to an unmodified iperf2 server (`iperf -s`, `iperf -s -u`) instead of `uringbench recv`.
    #[arg(long)]
    iperf2: bool,
    /// Zero-copy send (SEND_ZC): auto uses it only where the kernel would not copy anyway.
    #[arg(long, value_enum, default_value_t = OnOffAuto::Auto)]
    zerocopy: OnOffAuto,
    #[arg(long, value_parser = cpu_list)]
    cpus: Option<CpuList>,
    #[arg(long, value_enum, default_value_t = OnOffAuto::Auto)]
    busy_poll: OnOffAuto,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Same as --format json.
    #[arg(short = 'J', long)]
    json: bool,
    /// Run the test N times and add min/median/mean/max/stdev (keep `recv` running: no --once).
    #[arg(long, default_value_t = 1)]
    repeat: u32,
    /// uring: io_uring over sockets; xdp: UDP frames from AF_XDP sockets (implies -u).
    #[arg(long, value_enum, default_value_t = xdp_mode::Engine::Uring)]
    engine: xdp_mode::Engine,
    /// --engine xdp: egress interface [default: the route's to the target].
    #[arg(long)]
    iface: Option<String>,
    #[command(flatten)]
    fast: FastPathArgs,
}

#[derive(Args)]
#[command(after_help = "Examples:
  uringbench http http://127.0.0.1:8080/ -c 64 -d 30s          # closed loop, as fast as responses come
  uringbench http http://127.0.0.1:8080/ -c 64 -d 30s -R 20000 # fixed rate, latency from scheduled sends
  uringbench http http://[::1]:8080/api -n 1000 --method POST --body '{}' -H 'Content-Type: application/json'")]
struct HttpArgs {
    /// Target URL, http:// only (https is not supported).
    url: String,
    /// Connections, spread over the threads.
    #[arg(short = 'c', long, default_value_t = 16)]
    connections: u32,
    /// Run length, e.g. 30s [default: 10s; with -n an upper bound, default 10m].
    #[arg(short = 'd', long, value_parser = duration)]
    duration: Option<std::time::Duration>,
    /// Stop after this many requests instead of after -d.
    #[arg(short = 'n', long)]
    requests: Option<u64>,
    /// Request method (GET, HEAD, POST, ...).
    #[arg(short = 'm', long, default_value = "GET")]
    method: String,
    /// Extra request header 'Name: value' (repeatable).
    #[arg(short = 'H', long = "header")]
    headers: Vec<String>,
    /// Request body (sent with a Content-Length).
    #[arg(long)]
    body: Option<String>,
    /// One request per connection (`Connection: close`).
    #[arg(long)]
    no_keepalive: bool,
    /// Total requests/s over all connections (1000, 20k); latency is then measured from each
    /// request's scheduled send time, as wrk2 does (coordinated-omission correction).
    #[arg(short = 'R', long, value_parser = request_rate)]
    rate: Option<f64>,
    /// Longest wait for a connect or a complete response.
    #[arg(long, value_parser = duration, default_value = "2s")]
    timeout: std::time::Duration,
    #[arg(long, value_parser = cpu_list)]
    cpus: Option<CpuList>,
    /// Threads, one io_uring each [default: one per allowed CPU, at most one per connection].
    #[arg(short = 't', long)]
    threads: Option<u32>,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Same as --format json.
    #[arg(short = 'J', long)]
    json: bool,
}

/// Requests per second: a number with an optional k or M.
fn request_rate(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let (num, mult) = match t.char_indices().last() {
        Some((i, 'k' | 'K')) => (&t[..i], 1e3),
        Some((i, 'm' | 'M')) => (&t[..i], 1e6),
        _ => (t, 1.0),
    };
    match num.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v * mult),
        _ => Err(format!("invalid rate '{s}': expected requests per second, e.g. 5000 or 20k")),
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum ProtoArg {
    Tcp,
    Udp,
}

/// A `--cpus` value; a newtype so clap takes it as one value, not a list of values.
#[derive(Clone)]
struct CpuList(Vec<usize>);

fn cpu_list(s: &str) -> Result<CpuList, String> {
    parse_cpu_list(s).map(CpuList).map_err(|e| e.message)
}
fn duration(s: &str) -> Result<std::time::Duration, String> {
    parse_duration(s).map_err(|e| e.message)
}
fn size(s: &str) -> Result<u64, String> {
    parse_size(s).map_err(|e| e.message)
}
fn rate(s: &str) -> Result<u64, String> {
    parse_rate(s).map_err(|e| e.message)
}

/// The port to use: given, or the default of the mode (iperf2's 5001 with --iperf2).
fn port_or_default(port: Option<u16>, iperf2: bool) -> u16 {
    port.unwrap_or(if iperf2 { IPERF2_PORT } else { DEFAULT_PORT })
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
    let cli = match Cli::try_parse() {
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
                .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("tip:"))
                .filter(|l| !l.is_empty())
                .collect();
            eprintln!("uringbench: {} (see --help)", message.join(" ").trim_start_matches("error: "));
            return ExitCode::from(2);
        }
    };
    let result = match cli.command {
        Command::Recv(args) => recv(args),
        Command::Send(args) => send(args),
        Command::Http(args) => http(args),
        Command::Rr(args) => rr(args, Workload::Rr),
        Command::Crr(args) => rr(args, Workload::Crr),
        Command::Doctor(args) => doctor_cmd::doctor(args),
        Command::Sweep(args) => sweep_cmd::sweep(args),
        Command::Report(args) => sweep_cmd::report(args),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("uringbench: {e}");
            ExitCode::from(e.exit_code() as u8)
        }
    }
}

fn recv(args: RecvArgs) -> Result<u8, Error> {
    args.fast.apply(args.zc_rx.as_deref())?;
    xdp_mode::refuse_iperf2(args.engine, args.iperf2)?;
    if args.iperf2 {
        return iperf2_mode::recv(&args);
    }
    let bind = args.bind.parse().map_err(|_| Error::usage(format!("invalid --bind address '{}'", args.bind)))?;
    let cfg = ReceiverConfig {
        bind,
        port: port_or_default(args.port, args.iperf2),
        cpus: args.cpus.map(|c| c.0),
        busy_poll: busy(args.busy_poll),
        once: args.once,
        limits: ServerLimits {
            max_total_ms: args.max_time.as_millis() as u64,
            max_queues: args.max_queues,
            max_sessions: args.max_sessions,
            ..ServerLimits::default()
        },
        xdp: xdp_mode::recv_options(args.engine, args.iface.clone(), args.xdp_mode)?,
    };
    let listener = server::bind(&cfg)?;
    let events = Arc::new(|event: ServerEvent| {
        let line = match event {
            ServerEvent::Listening { addr } => format!("uringbench recv: listening on {addr}"),
            ServerEvent::SessionStarted { id, peer, spec, placement } => format!(
                "[{id}] test from {peer}: {:?} {:?}, {} queues x {} flows, {:.1} s; {placement}",
                spec.proto,
                spec.workload,
                spec.queues,
                spec.flows_per_queue,
                spec.time_ms as f64 / 1e3
            ),
            ServerEvent::SessionEnded { id, peer, workload: Workload::Rr | Workload::Crr, report } => format!(
                "[{id}] done {peer}: answered {} transactions ({} in the window: {:.0}/s){}",
                report.total_bytes(),
                report.bytes(),
                report.bytes() as f64 / report.window_seconds.max(1e-9),
                if report.complete { String::new() } else { format!(", incomplete: {}", report.errors.join("; ")) }
            ),
            ServerEvent::SessionEnded { id, peer, report, .. } => format!(
                "[{id}] done {peer}: {} {} bytes ({} in the window: {}){}",
                if report.role == Role::Sender { "sent" } else { "received" },
                report.total_bytes(),
                report.bytes(),
                format_bits_per_second(report.bits_per_second()),
                if report.complete { String::new() } else { format!(", incomplete: {}", report.errors.join("; ")) }
            ),
            ServerEvent::SessionFailed { id, peer, error } => {
                format!("[{id}] failed {peer}: {error}")
            }
            ServerEvent::Refused { peer, reason } => format!("refused test from {peer}: {reason}"),
            ServerEvent::Dropped { peer, reason } => {
                format!("dropped connection from {peer}: {reason}")
            }
            ServerEvent::Stopping { signal, running } => {
                format!("uringbench recv: {signal}: accepting no more tests, ending {running} running")
            }
        };
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    });
    let ok = server::serve(cfg, listener, events)?;
    Ok(if ok { 0 } else { 1 })
}

fn send(args: SendArgs) -> Result<u8, Error> {
    args.fast.apply(None)?;
    xdp_mode::refuse_iperf2(args.engine, args.iperf2)?;
    if args.iperf2 {
        return iperf2_mode::send(&args);
    }
    let run_test = xdp_mode::sender(args.engine, args.iface.clone())?;
    let udp = args.udp || matches!(args.proto, ProtoArg::Udp) || args.engine == xdp_mode::Engine::Xdp;
    let len = args.len.unwrap_or(if udp { 1470 } else { 128 * 1024 });
    if len == 0 || len > u64::from(u32::MAX) {
        return Err(Error::usage(format!("--len {len} out of range")));
    }
    let mut spec = TestSpec {
        proto: if udp { Proto::Udp } else { Proto::Tcp },
        workload: Workload::Stream,
        queues: args.queues,
        flows_per_queue: args.flows_per_queue,
        len: len as u32,
        rate_bps: args.pps.map_or(args.rate, |pps| (pps * len as f64 * 8.0).round() as u64),
        zerocopy: zerocopy_mode(args.zerocopy),
        depth: args.depth,
        gso: !args.no_gso,
        one_way_delay: args.one_way_delay,
        direction: if args.bidir {
            Direction::Bidir
        } else if args.reverse {
            Direction::Reverse
        } else {
            Direction::Forward
        },
        ..TestSpec::default()
    };
    args.window.apply(&mut spec);
    if spec.queues == 0 || spec.flows_per_queue == 0 || spec.depth == 0 {
        return Err(Error::usage("--queues, --flows-per-queue and --depth must be at least 1"));
    }
    if spec.time_ms == 0 {
        return Err(Error::usage("--time must be longer than 0"));
    }
    if args.repeat == 0 {
        return Err(Error::usage("--repeat must be at least 1"));
    }
    let opts = SendOptions {
        target: args.target,
        port: port_or_default(args.port, args.iperf2),
        spec,
        cpus: args.cpus.map(|c| c.0),
        busy_poll: busy(args.busy_poll),
    };
    let format = if args.json { Format::Json } else { args.format };
    let repeat = args.repeat as usize;
    let mut reports = Vec::with_capacity(repeat);
    let mut out = std::io::stdout().lock();
    if format == Format::Csv {
        let _ = writeln!(out, "{CSV_HEADER}");
    }
    let mut stopped: Option<Error> = None;
    for run in 1..=repeat {
        let report = match run_test(&opts, Arc::new(uringbench::workload::live::Quiet)) {
            Ok(r) => r,
            Err(e) if run == 1 => return Err(e),
            Err(e) => {
                stopped = Some(e);
                break;
            }
        };
        match format {
            Format::Text if repeat == 1 => {
                let _ = write!(out, "{}", report.render_text());
            }
            Format::Text => {
                let _ = writeln!(out, "run {run}/{repeat}: {}", report.summary_line());
            }
            Format::Csv => {
                let _ = write!(out, "{}", csv_rows(run, &report));
            }
            Format::Json => {}
        }
        let _ = out.flush();
        reports.push(report);
    }
    let summary = RepeatSummary::of(&reports);
    match format {
        Format::Json if repeat == 1 => print_json(&mut out, &reports[0].to_json())?,
        Format::Json => {
            let runs: Vec<_> = reports.iter().map(|r| r.to_json()).collect();
            print_json(
                &mut out,
                &serde_json::json!({"schema_version": SCHEMA_VERSION, "repeat": repeat, "runs": runs, "summary": summary}),
            )?;
        }
        Format::Text if repeat > 1 => {
            let _ = write!(out, "{}", render_summary(&summary));
        }
        _ => {}
    }
    if let Some(e) = &stopped {
        eprintln!("uringbench: stopped after {} of {repeat} runs: {e}", reports.len());
    } else if let Some(e) = reports.iter().find_map(|r| r.error.as_ref()).filter(|_| format != Format::Text) {
        eprintln!("uringbench: {e}");
    }
    let all_complete = stopped.is_none() && reports.iter().all(|r| r.complete());
    Ok(if all_complete { 0 } else { 1 })
}

fn http(args: HttpArgs) -> Result<u8, Error> {
    use uringbench::workload::http::{run_http, HttpOptions, HttpReport, DEFAULT_REQUEST_RUN_LIMIT};
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
    };
    let report = run_http(&opts)?;
    let mut out = std::io::stdout().lock();
    let format = if args.json { Format::Json } else { args.format };
    match format {
        Format::Text => {
            let _ = write!(out, "{}", report.render_text());
        }
        Format::Json => print_json(&mut out, &report.to_json())?,
        Format::Csv => {
            let _ = writeln!(out, "{}\n{}", HttpReport::CSV_HEADER, report.csv_row());
        }
    }
    let _ = out.flush();
    if !report.complete && format != Format::Text {
        eprintln!("uringbench: incomplete: {} responses, {} failed requests", report.requests, report.errors.total());
    }
    Ok(if report.complete { 0 } else { 1 })
}

fn print_json(out: &mut impl Write, doc: &serde_json::Value) -> Result<(), Error> {
    let text = serde_json::to_string_pretty(doc).map_err(|e| Error::io("encoding JSON", std::io::Error::other(e)))?;
    let _ = writeln!(out, "{text}");
    Ok(())
}

fn render_summary(s: &RepeatSummary) -> String {
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

fn rr(args: RrArgs, workload: Workload) -> Result<u8, Error> {
    args.fast.apply(None)?;
    if args.queues == 0 || args.flows_per_queue == 0 || args.window.time.is_zero() {
        return Err(Error::usage("--queues, --flows-per-queue and --time must be at least 1"));
    }
    if workload == Workload::Crr && args.udp {
        return Err(Error::usage("crr opens TCP connections; it has no --udp form"));
    }
    let mut spec = TestSpec {
        proto: if args.udp { Proto::Udp } else { Proto::Tcp },
        workload,
        queues: args.queues,
        flows_per_queue: args.flows_per_queue,
        req_len: u32::try_from(args.req).unwrap_or(u32::MAX),
        resp_len: u32::try_from(args.resp).unwrap_or(u32::MAX),
        timeout_ms: args.timeout.as_millis() as u64,
        ..TestSpec::default()
    };
    args.window.apply(&mut spec);
    uringbench::transport::rr::check_spec(&spec)?;
    let format = if args.json { Format::Json } else { args.format };
    if format == Format::Csv {
        return Err(Error::usage("rr and crr write text or json"));
    }
    let opts = SendOptions {
        target: args.target,
        port: port_or_default(args.port, false),
        spec,
        cpus: args.cpus.map(|c| c.0),
        busy_poll: busy(args.busy_poll),
    };
    let report = uringbench::workload::rr::run_rr(&opts)?;
    let mut out = std::io::stdout().lock();
    if format == Format::Json {
        print_json(&mut out, &report.to_json())?;
    } else {
        let _ = write!(out, "{}", report.render_text());
    }
    Ok(if report.succeeded() { 0 } else { 1 })
}
