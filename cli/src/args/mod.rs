//! Every command-line definition of `uringbench`: subcommands, options, their help and
//! their value parsers. Nothing here runs a test.
//!
//! This module is compiled twice: into the binary, and into `build.rs`, which renders the man
//! pages and shell completions from the same definitions. So it may use only clap, std and
//! `crate::units` (the engine's `units.rs`, which `build.rs` includes by path).

use crate::units;
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

mod choices;
mod tuning;
mod values;
pub use choices::*;
pub use tuning::*;
pub use values::*;

pub const EXAMPLES: &str = "Examples:
  uringbench recv                                  # serve tests on port 5300, one after another
  uringbench send --target 10.0.0.2 -P 16 -t 30s   # 16 queues for 30 s, receiver-verified report
  uringbench send --target 10.0.0.2 -J > run.json  # machine-readable report
  uringbench -s                                    # iperf's spelling of recv
  uringbench -c 10.0.0.2 -P 4 -t 30                # iperf's spelling of send (docs/iperf.md)

Exit status: 0 the test completed, 1 it failed or was incomplete, 2 a usage error.";

const RECV_EXAMPLES: &str = "Examples:
  uringbench recv                                  # serve tests on port 5300, one after another
  uringbench recv --cpus 2-5 --once                # queue threads on CPUs 2..5, exit after one test
  uringbench recv --psk-file /etc/uringbench/psk --allow 10.0.0.0/8   # a receiver others can reach
  uringbench recv --iperf3 --once -J > test.json   # one `iperf3 -c` test, our report as JSON";

const SEND_EXAMPLES: &str = "Examples:
  uringbench send -c 10.0.0.2 -P 16 -t 30s         # 16 queues for 30 s, receiver-verified report
  uringbench send -c 10.0.0.2 -u -b 2G -l 1470     # UDP, 2 Gbit/s per flow
  uringbench send -c 10.0.0.2 -R -J > run.json     # the receiver's host sends; JSON report";

const RR_EXAMPLES: &str = "Examples:
  uringbench rr -c 10.0.0.2 -t 10s                 # one transaction in flight: latency percentiles
  uringbench rr -c 10.0.0.2 -P 4 --flows-per-queue 8 --req 64 --resp 1K -J
  uringbench crr -c 10.0.0.2 -P 2                  # a connection per transaction";

/// Bytes per send (TCP) or per datagram (UDP) when `-l` is not given.
pub fn default_len(udp: bool) -> u64 {
    if udp {
        1470
    } else {
        128 * 1024
    }
}

/// UDP's offered rate per flow when neither `-b` nor `--pps` is given: iperf's 1 Mbit/s, so a
/// forgotten `-b` never floods a shared network.
pub const UDP_DEFAULT_RATE: u64 = 1_000_000;

#[derive(Parser)]
#[command(name = "uringbench", version, about = "io_uring network traffic engine: receiver-verified throughput, CPU per byte, zero-copy truth", after_help = EXAMPLES)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Receive tests: counts what senders deliver and reports it back.
    #[command(after_help = RECV_EXAMPLES)]
    Recv(RecvArgs),
    /// Send a test to a running `uringbench recv` and print both sides' figures.
    #[command(after_help = SEND_EXAMPLES)]
    Send(SendArgs),
    /// HTTP/1.1 load on a web server, like wrk/wrk2: latency percentiles, requests/s, errors.
    Http(HttpArgs),
    /// Request/response against `uringbench recv`: transactions/s and latency percentiles.
    #[command(after_help = RR_EXAMPLES)]
    #[command(mut_arg("bytes", |a| a.hide(true)), mut_arg("skip_rx_copy", |a| a.hide(true)))]
    Rr(RrArgs),
    /// Connect/request/response/close against `uringbench recv`: connections/s, latency, failures.
    // crr's connections live for one transaction: no TCP knob of a long flow, no UDP form.
    #[command(after_help = RR_EXAMPLES)]
    #[command(
        mut_arg("bytes", |a| a.hide(true)),
        mut_arg("skip_rx_copy", |a| a.hide(true)),
        mut_arg("udp", |a| a.hide(true)),
        mut_arg("congestion", |a| a.hide(true)),
        mut_arg("window", |a| a.hide(true)),
        mut_arg("mss", |a| a.hide(true)),
        mut_arg("no_delay", |a| a.hide(true)),
        mut_arg("fq_rate", |a| a.hide(true)),
        mut_arg("bounceback", |a| a.hide(true)),
        mut_arg("trip_times", |a| a.hide(true)),
        mut_arg("clocks_synced", |a| a.hide(true))
    )]
    Crr(RrArgs),
    /// Host and path checks (kernel, NIC, IRQs, sysctls, cloud caps), each with its fix.
    Doctor(DoctorArgs),
    /// A series of stream tests over queues, lengths or rates: CSV, JSON and an SVG chart.
    Sweep(SweepArgs),
    /// Re-render saved results (sweep JSON, send -J): text summary and an SVG chart.
    Report(ReportArgs),
    /// A/B comparison of saved runs: medians, bootstrap 95% intervals, Mann-Whitney p, a verdict.
    Compare(CompareArgs),
    /// Highest rate with loss at or below a threshold (RFC 2544 binary search over trials).
    Search(SearchArgs),
    /// Named variants of host settings, applied and reverted around interleaved runs, compared.
    Experiment(ExperimentArgs),
    /// Apply settings with their previous values recorded, or revert a state file exactly.
    Settings(SettingsArgs),
    /// Print the shell completions the package installs: uringbench completions bash >
    /// /etc/bash_completion.d/uringbench (bash, zsh or fish).
    Completions {
        /// The shell: bash, zsh or fish.
        #[arg(value_enum)]
        shell: CompletionShell,
    },
    /// Print a man page the package installs (roff): uringbench man send | man -l -
    Man {
        /// The command whose page to print [default: the tool's own page].
        command: Option<String>,
    },
}

/// The shells whose completions the package ships.
#[derive(Clone, Copy, ValueEnum)]
pub enum CompletionShell {
    Bash,
    Zsh,
    Fish,
}

/// Where a test goes: one group for send, rr/crr, sweep and search.
#[derive(Args, Clone)]
pub struct TargetArgs {
    /// Host running `uringbench recv` (for several runs keep it running: no --once).
    #[arg(short = 'c', long)]
    pub target: String,
    /// Port [default: 5300, 5001 with send --iperf2, 5201 with send --iperf3].
    #[arg(short = 'p', long)]
    pub port: Option<u16>,
    /// Secret shared with `recv --psk-file` (at least 16 bytes): both ends prove they hold it
    /// before the test is sent, and its data flows carry a key derived from it.
    #[arg(long, value_name = "FILE")]
    pub psk_file: Option<PathBuf>,
}

/// This host's queue threads: the CPUs they may use and whether they spin.
#[derive(Args, Clone)]
pub struct ThreadArgs {
    /// CPUs for this side's queue threads, e.g. 0-3,8 [default: all this process may use].
    #[arg(long, value_parser = cpu_list)]
    pub cpus: Option<CpuList>,
    /// auto spins on the completion queue while a thread has a CPU of its own.
    #[arg(long, value_enum, default_value_t = OnOffAuto::Auto)]
    pub busy_poll: OnOffAuto,
}

#[derive(Args)]
pub struct RrArgs {
    #[command(flatten)]
    pub to: TargetArgs,
    /// Queues (one pinned thread each while CPUs last); one flow each.
    #[arg(short = 'P', long, default_value_t = 1, value_parser = at_least_one, allow_negative_numbers = true)]
    pub queues: u32,
    /// Flows per queue, each with one transaction (crr: one connection) in flight.
    #[arg(long, default_value_t = 1)]
    pub flows_per_queue: u32,
    /// rr over UDP: one datagram each way per transaction (sizes up to 65507 B).
    #[arg(short = 'u', long)]
    pub udp: bool,
    /// UDP rr and crr: a transaction unanswered this long is counted as failed.
    #[arg(long, value_parser = duration, default_value = "1s")]
    pub timeout: std::time::Duration,
    /// Request size (1 B to 1 MiB).
    #[arg(long, value_parser = size, default_value = "1")]
    pub req: u64,
    /// Response size (1 B to 1 MiB).
    #[arg(long, value_parser = size, default_value = "1")]
    pub resp: u64,
    /// TCP rr: N requests back to back, then their N responses (iperf2's --bounceback);
    /// latency is each burst's round trip.
    #[arg(long, value_name = "N")]
    pub bounceback: Option<u32>,
    /// rr: split round trips into one-way delays from both ends' CLOCK_REALTIME (needs --resp 8
    /// or more; UDP: 16); given when both ends share a kernel, or with --clocks-synced.
    #[arg(long)]
    pub trip_times: bool,
    /// Assert that both hosts' clocks are synchronized (PTP, NTP), for --trip-times.
    #[arg(long, requires = "trip_times")]
    pub clocks_synced: bool,
    #[command(flatten)]
    pub window: TestWindow,
    /// Report transactions/s and latency (p50, p99) every this long, e.g. 500ms; 0 turns
    /// the intervals off [default: 1s].
    #[arg(short = 'i', long, value_parser = duration)]
    pub interval: Option<std::time::Duration>,
    #[command(flatten)]
    pub threads: ThreadArgs,
    /// What goes to stdout: the live text report or one JSON document at the end.
    #[arg(long, value_enum, default_value_t = TextOrJson::Text)]
    pub format: TextOrJson,
    /// Same as --format json.
    #[arg(short = 'J', long)]
    pub json: bool,
    /// Also write the report as one self-contained HTML page here (docs/report.md).
    #[arg(long, value_name = "OUT.html")]
    pub html: Option<PathBuf>,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub tuning: TuningArgs,
    #[command(flatten)]
    pub fast: FastPathArgs,
}

/// Kernel knobs of the data flows, applied on both ends (send; rr and crr where they apply),
/// and where this side's sockets leave from.
#[derive(Args)]
pub struct TuningArgs {
    /// TCP congestion control, e.g. cubic, reno, bbr (TCP_CONGESTION, both ends).
    #[arg(short = 'C', long, value_name = "ALGO")]
    pub congestion: Option<String>,
    /// Socket buffers SO_SNDBUF and SO_RCVBUF, e.g. 64K, 4M (both ends; at most 2G).
    #[arg(short = 'w', long, value_name = "BYTES", value_parser = size)]
    pub window: Option<u64>,
    /// TCP maximum segment size (TCP_MAXSEG, set before connecting; 88 to the path MTU).
    #[arg(short = 'M', long, value_name = "BYTES")]
    pub mss: Option<u32>,
    /// TCP_NODELAY on both ends (the sending end of a stream has it by default).
    #[arg(short = 'N', long)]
    pub no_delay: bool,
    /// IPv4 TOS byte / IPv6 traffic class, e.g. 0x28 or 40 (TCP and UDP, both ends).
    #[arg(short = 'S', long, value_name = "VALUE", value_parser = tos)]
    pub tos: Option<u8>,
    /// DSCP by name (EF, AF11..AF43, CS0..CS7, VA) or number 0..63, instead of --tos.
    #[arg(long, value_name = "NAME|NUMBER", value_parser = dscp, conflicts_with = "tos")]
    pub dscp: Option<u8>,
    /// Per-flow kernel pacing (SO_MAX_PACING_RATE, 64-bit) instead of user-space --rate, e.g. 500M.
    #[arg(long, value_name = "RATE", value_parser = rate)]
    pub fq_rate: Option<u64>,
    /// Only IPv4 addresses of the target.
    #[arg(short = '4', long = "ipv4", conflicts_with = "ipv6")]
    pub ipv4: bool,
    /// Only IPv6 addresses of the target.
    #[arg(short = '6', long = "ipv6")]
    pub ipv6: bool,
    /// Local address (and device, ADDR%DEV) for this side's sockets.
    #[arg(short = 'B', long = "bind", value_name = "ADDR[%DEV]")]
    pub bind: Option<String>,
    /// Send from this device only (SO_BINDTODEVICE).
    #[arg(long, value_name = "DEV")]
    pub bind_dev: Option<String>,
    /// Send exactly this many bytes over all flows (K/M/G, binary); the test ends when they
    /// are delivered, with --time as an upper bound.
    #[arg(short = 'n', long, value_name = "N", value_parser = size)]
    pub bytes: Option<u64>,
    /// The receiver discards TCP payload in the kernel (MSG_TRUNC) instead of copying it.
    #[arg(long)]
    pub skip_rx_copy: bool,
    /// Multipath TCP data flows (IPPROTO_MPTCP); the report lists each flow's subflows.
    #[arg(short = 'm', long)]
    pub mptcp: bool,
}

/// Where the report goes and how it is labelled (send, rr, crr).
#[derive(Args)]
pub struct OutputArgs {
    /// One JSON object per line as the test runs: a start event, one interval event per
    /// interval as it closes, and an end event with the whole report (see docs/output.md).
    #[arg(long, conflicts_with = "json")]
    pub json_stream: bool,
    /// With --json-stream: after the end event, also the whole report as -J writes it (iperf3
    /// 3.20's --json-stream-full-output).
    #[arg(long, requires = "json_stream")]
    pub json_stream_full_output: bool,
    /// Prefix every text line with TEXT (stored in JSON as `title`).
    #[arg(short = 'T', long, value_name = "TEXT")]
    pub title: Option<String>,
    /// Write the report to FILE (appended) instead of stdout.
    #[arg(long, value_name = "FILE")]
    pub logfile: Option<PathBuf>,
    /// Text also shows the data path and tuning detail: each side's placement and data path,
    /// the egress path and its limits, TCP and zero-copy figures, NIC queues (JSON always
    /// has them).
    #[arg(short = 'v', long)]
    pub verbose: bool,
}

/// How long a test runs and what its headline excludes (send, rr, crr, sweep).
#[derive(Args)]
pub struct TestWindow {
    /// Measured window, e.g. 10s, 500ms, 2m (a bare number is seconds). The test lasts
    /// --warmup + this + --cooldown: 11.25 s of traffic by default.
    #[arg(short = 't', long, value_parser = duration, default_value = "10s")]
    pub time: std::time::Duration,
    /// Traffic before the measured window, excluded from the headline (iperf3's -O).
    #[arg(long, value_parser = duration, default_value = "1s")]
    pub warmup: std::time::Duration,
    /// Traffic after the measured window, excluded from the headline.
    #[arg(long, value_parser = duration, default_value = "250ms")]
    pub cooldown: std::time::Duration,
}

/// Kernel fast paths, chosen for the whole process (see `uringbench::fastpath`).
#[derive(Args, Default)]
pub struct FastPathArgs {
    /// io_uring SQPOLL: a kernel thread submits; optional idle time before it sleeps
    /// [default: 100ms].
    #[arg(long, value_name = "IDLE", value_parser = duration, num_args = 0..=1, default_missing_value = "100ms")]
    pub sqpoll: Option<std::time::Duration>,
    /// io_uring NAPI busy polling (Linux 6.9+) for this long per wait [default: 50us].
    #[arg(long, value_name = "TIME", value_parser = duration, num_args = 0..=1, default_missing_value = "50us")]
    pub napi: Option<std::time::Duration>,
}

#[derive(Args)]
pub struct RecvArgs {
    /// Local address to listen on.
    #[arg(long, default_value = "::")]
    pub bind: String,
    /// Listen on this device only (SO_BINDTODEVICE); the test's flows stay on it.
    #[arg(long, value_name = "DEV")]
    pub bind_dev: Option<String>,
    /// Port for control and data connections [default: 5300, 5001 with --iperf2, 5201 with
    /// --iperf3].
    #[arg(short = 'p', long)]
    pub port: Option<u16>,
    #[command(flatten)]
    pub threads: ThreadArgs,
    /// Exit after one test (exit code 1 if it was incomplete).
    #[arg(long)]
    pub once: bool,
    /// Serve unmodified iperf2 clients (`iperf -c`, TCP and UDP) on -p's port, 5001 unless given.
    #[arg(long, conflicts_with = "iperf3")]
    pub iperf2: bool,
    /// Serve unmodified iperf3 clients (`iperf3 -c [-u]`, one test at a time) on -p's port,
    /// 5201 unless given.
    #[arg(long, conflicts_with = "ntttcp")]
    pub iperf3: bool,
    /// Receive from NTttcp senders in no-sync mode (`ntttcp.exe -s ... -ns`, `ntttcp -s -N`):
    /// TCP (UDP with -u) on --ports consecutive ports from --ntttcp-port.
    #[arg(long, conflicts_with = "iperf2")]
    pub ntttcp: bool,
    /// With --ntttcp: NTttcp's UDP (its -u), counted within -t after --warmup from the first
    /// datagram.
    #[arg(short = 'u', long, requires = "ntttcp")]
    pub udp: bool,
    /// With --ntttcp -u: the counted time (NTttcp's -t).
    #[arg(short = 't', long, value_parser = duration, default_value = "60s", requires = "udp")]
    pub time: std::time::Duration,
    /// With --ntttcp -u: received and not counted before -t (NTttcp's -wu).
    #[arg(long, value_parser = duration, default_value = "0s", requires = "udp")]
    pub warmup: std::time::Duration,
    /// With --ntttcp -u: received and not counted after -t (NTttcp's -cd).
    #[arg(long, value_parser = duration, default_value = "0s", requires = "udp")]
    pub cooldown: std::time::Duration,
    /// With --ntttcp: ports to listen on, one per NTttcp thread (its -m N / -P N).
    #[arg(short = 'P', long, default_value_t = 1, requires = "ntttcp")]
    pub ports: u32,
    /// With --ntttcp: the first of its ports (NTttcp's -p).
    #[arg(long, default_value_t = 5001, requires = "ntttcp")]
    pub ntttcp_port: u16,
    /// Longest test a sender may request (warm-up and cool-down included).
    #[arg(long, value_parser = duration, default_value = "10m")]
    pub max_time: std::time::Duration,
    /// End a test whose flows move no byte for this long (a peer that announced a test and
    /// sends or reads nothing), freeing its slot; 0s: never [default: 20s; not with --ntttcp].
    #[arg(long, value_parser = duration, value_name = "DURATION")]
    pub no_progress_limit: Option<std::time::Duration>,
    /// Most queues a sender may request.
    #[arg(long, default_value_t = 256)]
    pub max_queues: u32,
    /// NIC receive queues tests are served from: a count (4: queues 0-3) or a list (0-3,8);
    /// engine queue i of a test takes the i-th in turn [default: every receive queue].
    #[arg(long, value_name = "N|LIST")]
    pub queues: Option<String>,
    /// Where each NIC queue's thread runs [default: irq when busy polling, else irq-sibling;
    /// cpus on veth and loopback].
    #[arg(long, value_enum)]
    pub placement: Option<Placement>,
    /// Tests served at the same time.
    #[arg(long, default_value_t = 4)]
    pub max_sessions: usize,
    /// Tests served at the same time to one source address.
    #[arg(long, default_value_t = 2)]
    pub max_sessions_per_source: usize,
    /// Connections from one source address still in their handshake (5 s at most each);
    /// more are closed at once.
    // The engine's ReceiverConfig default is the same 64: build.rs reads this file without
    // the engine, so the number is written here too.
    #[arg(long, default_value_t = 64)]
    pub max_pending_per_source: usize,
    /// Highest rate a test may ask for (25G, 500M): faster ones are refused, a reverse test
    /// asking for no limit is sent at this rate [default: no limit].
    #[arg(long, value_parser = rate)]
    pub max_rate: Option<u64>,
    /// Secret a sender must prove it holds (`send --psk-file` with the same file, at least 16
    /// bytes) before it may describe a test; without it anyone who reaches the port may.
    #[arg(long, value_name = "FILE")]
    pub psk_file: Option<PathBuf>,
    /// With --iperf3: let in only clients with credentials, as `iperf3 -s
    /// --rsa-private-key-path`: the PEM private key (PKCS#8 or PKCS#1, no passphrase) their
    /// credentials are encrypted for; with --authorized-users-path.
    #[arg(long, value_name = "FILE", requires_all = ["iperf3", "authorized_users_path"])]
    pub rsa_private_key_path: Option<PathBuf>,
    /// With --rsa-private-key-path: iperf3's users file, one USER,SHA256 line per user, the
    /// hex SHA-256 of {USER}PASSWORD; read once at start.
    #[arg(long, value_name = "FILE", requires = "rsa_private_key_path")]
    pub authorized_users_path: Option<PathBuf>,
    /// With --rsa-private-key-path: how many seconds a client's credentials may be stamped
    /// away from our clock.
    #[arg(long, value_name = "SECS", default_value_t = 10, requires = "rsa_private_key_path")]
    pub time_skew_threshold: u64,
    /// Accept connections only from these networks (CIDR[,CIDR...], e.g. 10.0.0.0/8,2001:db8::/32);
    /// others are closed at accept.
    #[arg(long, value_name = "CIDR[,CIDR...]", value_delimiter = ',')]
    pub allow: Vec<String>,
    /// Serve counts of the tests served and each recent sender's last test as OpenMetrics
    /// text on http://ADDR:PORT/metrics, for a Prometheus server to scrape (docs/metrics.md)
    /// [default: off].
    #[arg(long, value_name = "ADDR:PORT")]
    pub metrics: Option<std::net::SocketAddr>,
    /// --metrics: how many senders' last tests are shown (the most recent ones).
    #[arg(long, value_name = "N", default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub metrics_senders: u64,
    /// Never busy-poll for a remote peer's test (threads sleep on their completion queues).
    #[arg(long)]
    pub no_spin: bool,
    /// Accept a test's data flows from any address, not only its control connection's: for
    /// senders behind a NAT that changes addresses between connections. Anyone who sees a
    /// test's cookie on the wire can then join it (docs/public-receiver.md).
    #[arg(long)]
    pub flows_from_any_address: bool,
    /// With --iperf2, --iperf3 or --ntttcp: each finished test as the JSON document of `send
    /// -J` (with `peer`), one per line on stdout; the log lines go to stderr.
    #[arg(short = 'J', long)]
    pub json: bool,
    /// With --iperf2, --iperf3 or --ntttcp: one JSON object per line: a start event as each
    /// test begins, interval events as they close (--iperf3), an end event with its document;
    /// the log lines go to stderr (docs/output.md).
    #[arg(long, conflicts_with = "json")]
    pub json_stream: bool,
    /// uring: sockets; xdp: forward UDP tests on AF_XDP sockets with uringbench's XDP program.
    #[arg(long, value_enum, default_value_t = Engine::Uring)]
    pub engine: Engine,
    /// --engine xdp: interface to attach to [default: the one facing each sender].
    #[arg(long)]
    pub iface: Option<String>,
    /// --engine xdp: where the program runs (auto: native, else generic).
    #[arg(long, value_enum, default_value_t = XdpModeArg::Auto)]
    pub xdp_mode: XdpModeArg,
    /// --engine xdp: where frames are accounted. sockets: AF_XDP sockets, every frame checked
    /// in user space; kernel: the XDP program tracks each flow's sequence numbers itself and
    /// drops the frames (the fastest; UDP checksums are not verified).
    #[arg(long, value_enum, default_value_t = XdpCountArg::Sockets)]
    pub xdp_count: XdpCountArg,
    /// Zero-copy receive (io_uring RECV_ZC) from NIC queues of IFACE, one per thread: QUEUE..
    /// (you steer the flows), or without QUEUE the queues RSS leaves out (`ethtool -X IFACE
    /// equal N-1`), each flow put there by an n-tuple rule; needs header split (refused with
    /// what is missing).
    #[arg(long, value_name = "IFACE[:QUEUE]")]
    pub zc_rx: Option<String>,
    /// Receiver-side variants a sender may ask for by name (TOML: `[NAME]` tables of settings);
    /// applied for that test only and reverted after it. Without it every variant is refused.
    #[arg(long, value_name = "FILE")]
    pub variants: Option<PathBuf>,
    #[command(flatten)]
    pub fast: FastPathArgs,
}

#[derive(Args)]
pub struct SendArgs {
    #[command(flatten)]
    pub to: TargetArgs,
    /// Queues (one pinned thread each while CPUs last), each with --flows-per-queue flows;
    /// with --engine xdp, NIC queues.
    #[arg(short = 'P', long, default_value_t = 1, value_parser = at_least_one, allow_negative_numbers = true)]
    pub queues: u32,
    /// Flows (connections or UDP sockets) on each queue's thread.
    #[arg(long, default_value_t = 1)]
    pub flows_per_queue: u32,
    #[command(flatten)]
    pub window: TestWindow,
    /// Report every queue's and the [SUM] figures every this long, e.g. 500ms, in every
    /// output (text, -J, --json-stream); 0 turns them off [default: 1s].
    #[arg(short = 'i', long, value_parser = duration)]
    pub interval: Option<std::time::Duration>,
    /// Bytes per send (TCP) or per datagram (UDP), binary units [default: 128K TCP, 1470 UDP].
    #[arg(short = 'l', long, value_parser = size)]
    pub len: Option<u64>,
    /// Offered rate of each flow in bits/s (25G, 500M), as iperf's -b; 0 or max = unlimited.
    /// RATE/N (iperf3's burst form, e.g. 100M/10): N sends back to back, then a wait that
    /// holds the average at RATE. The header shows the total [default: 1M with UDP,
    /// unlimited with TCP].
    #[arg(short = 'b', long, value_parser = rate_or_max, allow_hyphen_values = true)]
    pub rate: Option<OfferedRate>,
    /// Offered datagrams (UDP frames) per second of each flow (e.g. 1M, 250k), instead of
    /// --rate: the same as --rate PPS x --len x 8.
    #[arg(long, value_parser = request_rate, conflicts_with = "rate")]
    pub pps: Option<f64>,
    /// Sends in flight per flow.
    #[arg(long, default_value_t = 4)]
    pub depth: u32,
    /// Protocol of the data flows.
    #[arg(long, value_enum, default_value_t = ProtoArg::Tcp)]
    pub proto: ProtoArg,
    /// Same as --proto udp.
    #[arg(short = 'u', long)]
    pub udp: bool,
    /// The receiver's host sends, this one receives (over connections this side opens).
    #[arg(short = 'R', long, conflicts_with = "bidir")]
    pub reverse: bool,
    /// Both directions at once, one set of flows each way.
    #[arg(long)]
    pub bidir: bool,
    /// UDP: one datagram per send instead of GSO batches (for comparison).
    #[arg(long)]
    pub no_gso: bool,
    /// UDP: also report one-way delay (both ends must share a clock: same host, or PTP).
    #[arg(long)]
    pub one_way_delay: bool,
    /// Working latency: a probe of small request/response transactions beside the load, on a
    /// connection of its own, idle first, then under the load (docs/output.md).
    #[arg(long)]
    pub latency: bool,
    /// With --latency: split the probe's round trips into one-way delays from both ends'
    /// CLOCK_REALTIME; given when both ends share a kernel, or with --clocks-synced.
    #[arg(long, requires = "latency")]
    pub trip_times: bool,
    /// Assert that both hosts' clocks are synchronized (PTP, NTP), for --trip-times.
    #[arg(long, requires = "trip_times")]
    pub clocks_synced: bool,
    /// Talk to an unmodified iperf2 server (`iperf -s`, `iperf -s -u`) instead of `uringbench recv`.
    #[arg(long, conflicts_with = "iperf3")]
    pub iperf2: bool,
    /// Talk to an unmodified iperf3 server (`iperf3 -s`, 3.9 or later) instead of `uringbench
    /// recv`: its results become the receiver side; --warmup is sent as its omit (-O).
    #[arg(long, conflicts_with = "ntttcp")]
    pub iperf3: bool,
    /// With --iperf3: authenticate as USER to a server that requires it (`iperf3 -s
    /// --rsa-private-key-path`); the password is read from IPERF3_PASSWORD, else asked on the
    /// terminal; with --rsa-public-key-path.
    #[arg(long, value_name = "USER", requires_all = ["iperf3", "rsa_public_key_path"])]
    pub username: Option<String>,
    /// With --username: the server's PEM public key (BEGIN PUBLIC KEY) the credentials are
    /// encrypted with.
    #[arg(long, value_name = "FILE", requires = "username")]
    pub rsa_public_key_path: Option<PathBuf>,
    /// With --username: the credentials' RSA padding, pkcs1 for iperf3 servers up to 3.16 (and
    /// later ones run with --use-pkcs1-padding), oaep for 3.17 and later by default.
    #[arg(long, value_enum, default_value_t = RsaPaddingArg::Pkcs1, requires = "username")]
    pub rsa_padding: RsaPaddingArg,
    /// With --iperf3 -u: ask the server for UDP GSO on the sending end and GRO on the
    /// receiving end, as iperf3 3.21's --gsro (our own loops use them wherever the kernel takes
    /// them; servers before 3.21 ignore the ask).
    #[arg(long, requires = "iperf3")]
    pub gsro: bool,
    /// With --iperf3: the server's own output comes back in its results (text, or its whole
    /// JSON document when it runs with -J), as iperf3's --get-server-output.
    #[arg(long, requires = "iperf3")]
    pub get_server_output: bool,
    /// With --iperf3 -u: IPv4's don't-fragment bit on every datagram we send, and asked of the
    /// server for what it sends (-R, --bidir), as iperf3's --dont-fragment: a datagram over the
    /// path MTU fails to send instead of going in fragments.
    #[arg(long, requires = "iperf3")]
    pub dont_fragment: bool,
    /// Send to NTttcp receivers in no-sync mode (`ntttcp.exe -r ... -ns`, `ntttcp -r -N`):
    /// queue q's flows go to port --ntttcp-port + q.
    #[arg(long, conflicts_with = "iperf2")]
    pub ntttcp: bool,
    /// With --ntttcp: the receiver's first port (NTttcp's -p).
    #[arg(long, default_value_t = 5001, requires = "ntttcp")]
    pub ntttcp_port: u16,
    /// Zero-copy send (SEND_ZC): auto uses it only where the kernel would not copy anyway.
    #[arg(long, value_enum, default_value_t = OnOffAuto::Auto)]
    pub zerocopy: OnOffAuto,
    #[command(flatten)]
    pub threads: ThreadArgs,
    /// What goes to stdout: the live text report, one JSON document, or CSV rows.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Same as --format json.
    #[arg(short = 'J', long)]
    pub json: bool,
    /// Also write the report as one self-contained HTML page here (docs/report.md); with
    /// --repeat, every run on one page.
    #[arg(long, value_name = "OUT.html")]
    pub html: Option<PathBuf>,
    /// Print every rate in one unit, as iperf's -f: k, m, g, t (Kbits..Tbits/sec) or K, M,
    /// G, T (KBytes..TBytes/sec) [default: chosen by magnitude].
    #[arg(short = 'f', long, value_name = "UNIT", value_parser = unit_letter)]
    pub units: Option<char>,
    /// Source port of the first data flow; flow i leaves from PORT + i (iperf3's --cport).
    #[arg(long, value_name = "PORT")]
    pub cport: Option<u16>,
    /// Choose each flow's source port so the receiver's NIC hashes it onto its own receive
    /// queue (auto: when the receiver reports a Toeplitz key and table; ntuple: by the
    /// receiver's n-tuple flow rules).
    #[arg(long, value_enum, default_value_t = Steer::Auto)]
    pub steer: Steer,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub tuning: TuningArgs,
    /// Run the test N times and add min/median/mean/max/stdev (keep `recv` running: no --once).
    #[arg(long, default_value_t = 1)]
    pub repeat: u32,
    /// Start the data at this instant on this host's clock: RFC 3339 (2026-12-05T10:00:00Z)
    /// or Unix seconds with a fraction (iperf2's --txstart-time). Connects and negotiates up
    /// to 5 s before; the report says how late the data began and when the receiver saw it.
    #[arg(long, value_name = "TIME")]
    pub start_at: Option<String>,
    /// uring: io_uring over sockets; xdp: UDP frames from AF_XDP sockets (implies -u).
    #[arg(long, value_enum, default_value_t = Engine::Uring)]
    pub engine: Engine,
    /// --engine xdp: egress interface [default: the route's to the target].
    #[arg(long)]
    pub iface: Option<String>,
    /// --engine xdp: how frames are made. xsk: written into AF_XDP sockets' TX rings; live: by
    /// an XDP program run on live frames (BPF_PROG_RUN, Linux 5.18+), out through the driver's
    /// ndo_xdp_xmit with no skb (a veth peer needs an XDP program or GRO on).
    #[arg(long, value_enum, default_value_t = XdpGenArg::Xsk)]
    pub gen: XdpGenArg,
    #[command(flatten)]
    pub fast: FastPathArgs,
}

#[derive(Args)]
#[command(after_help = "Examples:
  uringbench http http://127.0.0.1:8080/ -c 64 -d 30s          # closed loop, as fast as responses come
  uringbench http http://127.0.0.1:8080/ -c 64 -d 30s -R 20000 # fixed rate, latency from scheduled sends
  uringbench http http://[::1]:8080/api -n 1000 --method POST --body '{}' -H 'Content-Type: application/json'")]
pub struct HttpArgs {
    /// Target URL, http:// only (https is not supported).
    pub url: String,
    /// Connections, spread over the threads.
    #[arg(short = 'c', long, default_value_t = 16)]
    pub connections: u32,
    /// Run length, e.g. 30s [default: 10s; with -n an upper bound, default 10m].
    #[arg(short = 'd', long, value_parser = duration)]
    pub duration: Option<std::time::Duration>,
    /// Stop after this many requests instead of after -d.
    #[arg(short = 'n', long)]
    pub requests: Option<u64>,
    /// Request method (GET, HEAD, POST, ...).
    #[arg(short = 'm', long, default_value = "GET")]
    pub method: String,
    /// Extra request header 'Name: value' (repeatable).
    #[arg(short = 'H', long = "header")]
    pub headers: Vec<String>,
    /// Request body (sent with a Content-Length).
    #[arg(long)]
    pub body: Option<String>,
    /// One request per connection (`Connection: close`).
    #[arg(long)]
    pub no_keepalive: bool,
    /// Total requests/s over all connections (1000, 20k); latency is then measured from each
    /// request's scheduled send time, as wrk2 does (coordinated-omission correction).
    #[arg(short = 'R', long, value_parser = request_rate)]
    pub rate: Option<f64>,
    /// Longest wait for a connect or a complete response.
    #[arg(long, value_parser = duration, default_value = "2s")]
    pub timeout: std::time::Duration,
    /// Length of each interval of the report (requests/s, latency, CPU), and of each live
    /// line with text output, e.g. 500ms.
    #[arg(short = 'i', long, value_parser = duration, default_value = "1s")]
    pub interval: std::time::Duration,
    /// CPUs for the threads, e.g. 0-3,8 [default: all this process may use].
    #[arg(long, value_parser = cpu_list)]
    pub cpus: Option<CpuList>,
    /// Threads, one io_uring each [default: one per allowed CPU, at most one per connection].
    #[arg(short = 't', long)]
    pub threads: Option<u32>,
    /// What goes to stdout: the text summary, one JSON document, or a CSV header and row.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Same as --format json.
    #[arg(short = 'J', long)]
    pub json: bool,
    /// Also write the report as one self-contained HTML page here (docs/report.md).
    #[arg(long, value_name = "OUT.html")]
    pub html: Option<PathBuf>,
}

impl SendArgs {
    /// Whom this send talks to.
    pub fn peer(&self) -> Peer {
        Peer::of(self.iperf2, self.iperf3, self.ntttcp)
    }
}

impl RecvArgs {
    /// Whom this receiver serves.
    pub fn peer(&self) -> Peer {
        Peer::of(self.iperf2, self.iperf3, self.ntttcp)
    }
}
