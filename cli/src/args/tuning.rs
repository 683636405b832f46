//! The definitions of the commands that measure over several tests or read their results:
//! `doctor`, `sweep`, `report`, `compare`, `search`, `experiment`, `settings`. Compiled with
//! the rest of the definitions (see the parent module's note).

use super::*;

#[derive(Clone, Copy, ValueEnum, PartialEq)]
pub enum DoctorFormat {
    Text,
    Json,
}

#[derive(Args)]
#[command(after_help = "Examples:
  uringbench doctor                             # this host, the interface of the default route
  uringbench doctor --target 10.0.0.2           # plus the path: address, reachability, RTT, path MTU
  uringbench doctor --iface eth0 --bandwidth 100G -J

Exit code: 0 when no check failed (warnings allowed), 1 when one did, 2 for a usage error.")]
pub struct DoctorArgs {
    /// The receiver's host: checks the path to it (address kind, handshake RTT, path MTU).
    #[arg(short = 'c', long)]
    pub target: Option<String>,
    /// Control port on the target [default: 5300].
    #[arg(short = 'p', long)]
    pub port: Option<u16>,
    /// Interface to examine [default: the route to --target, else the default route's].
    #[arg(long)]
    pub iface: Option<String>,
    /// Bandwidth to size socket buffers for, bits/s (25G, 100G) [default: link speed, cloud cap or 25G].
    #[arg(long, value_parser = rate)]
    pub bandwidth: Option<u64>,
    /// What goes to stdout: the checks as text, or one JSON document.
    #[arg(long, value_enum, default_value_t = DoctorFormat::Text)]
    pub format: DoctorFormat,
    /// Same as --format json.
    #[arg(short = 'J', long)]
    pub json: bool,
}

/// A comma-separated list as typed (`1,2,4`, `64K,128K`); a newtype so clap keeps it whole.
#[derive(Clone)]
pub struct ValueList(pub Vec<u64>);

fn list_of(text: &str, parse: impl Fn(&str) -> Result<u64, String>) -> Result<ValueList, String> {
    let values: Vec<u64> = text.split(',').map(|v| parse(v.trim())).collect::<Result<_, _>>()?;
    if values.is_empty() {
        return Err(format!("empty list '{text}'"));
    }
    Ok(ValueList(values))
}
fn counts(s: &str) -> Result<ValueList, String> {
    list_of(s, |v| v.parse::<u64>().map_err(|_| format!("invalid count '{v}': expected a whole number")))
}
fn sizes(s: &str) -> Result<ValueList, String> {
    list_of(s, size)
}
fn rates(s: &str) -> Result<ValueList, String> {
    list_of(s, rate)
}

#[derive(Args)]
#[command(after_help = "Exactly one of --queues, --len, --rate is a list of several values; it is the swept parameter.
Runs are interleaved over the points (1,2,4,1,2,4,...) so slow drifts of the host spread evenly.

Examples:
  uringbench sweep -c 10.0.0.2 -P 1,2,4,8,16 --repeat 5 --svg queues.svg --csv queues.csv --json-file queues.json
  uringbench sweep -c 10.0.0.2 -l 4K,16K,64K,256K -t 5s --svg len.svg
  uringbench sweep -c 10.0.0.2 -u -l 1470 -b 1G,2G,4G,8G --format csv > udp.csv")]
pub struct SweepArgs {
    #[command(flatten)]
    pub to: TargetArgs,
    /// Queue counts, e.g. 1,2,4,8,16.
    #[arg(short = 'P', long, value_parser = counts, default_value = "1")]
    pub queues: ValueList,
    /// Bytes per send / datagram, e.g. 16K,64K,256K [default: 128K TCP, 1470 UDP].
    #[arg(short = 'l', long, value_parser = sizes)]
    pub len: Option<ValueList>,
    /// Total offered rates in bits/s, e.g. 1G,5G,10G (0 = unlimited).
    #[arg(short = 'b', long, value_parser = rates, default_value = "0")]
    pub rate: ValueList,
    /// Runs per point.
    #[arg(long, default_value_t = 3)]
    pub repeat: u32,
    #[command(flatten)]
    pub window: TestWindow,
    /// Interval figures in each run of the saved JSON every this long, e.g. 1s [default: none].
    #[arg(short = 'i', long, value_parser = duration)]
    pub interval: Option<std::time::Duration>,
    /// Protocol of the data flows.
    #[arg(long, value_enum, default_value_t = ProtoArg::Tcp)]
    pub proto: ProtoArg,
    /// Same as --proto udp.
    #[arg(short = 'u', long)]
    pub udp: bool,
    /// Flows (connections or UDP sockets) on each queue's thread.
    #[arg(long, default_value_t = 1)]
    pub flows_per_queue: u32,
    /// Sends in flight per flow.
    #[arg(long, default_value_t = 4)]
    pub depth: u32,
    /// Zero-copy send (SEND_ZC): auto uses it only where the kernel would not copy anyway.
    #[arg(long, value_enum, default_value_t = OnOffAuto::Auto)]
    pub zerocopy: OnOffAuto,
    #[command(flatten)]
    pub threads: ThreadArgs,
    /// Write the CSV (one row per run, min/median/mean/max/stdev rows per point) here.
    #[arg(long)]
    pub csv: Option<PathBuf>,
    /// Write the chart (Gbit/s and CPU-s/GB against the swept parameter) here.
    #[arg(long)]
    pub svg: Option<PathBuf>,
    /// Save the results as JSON here (re-render later with `uringbench report FILE`).
    #[arg(long, value_name = "FILE", alias = "json")]
    pub json_file: Option<PathBuf>,
    /// Write the sweep as one self-contained HTML page here (docs/report.md).
    #[arg(long, value_name = "OUT.html")]
    pub html: Option<PathBuf>,
    /// Same as --format json.
    #[arg(short = 'J')]
    pub json: bool,
    /// What goes to stdout: progress and a table, the JSON document, or the CSV.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

#[derive(Args)]
#[command(after_help = "Examples:
  uringbench report queues.json --svg queues.svg     # a saved sweep
  uringbench send -c 10.0.0.2 -i 1s -J > run.json && uringbench report run.json --svg run.svg
  uringbench report a.json b.json c.json --html runs.html   # one page: the runs overlaid, medians
  uringbench report --fleet results/fleet --by vcpus --by machine_type   # what deploy/ansible collected

With --fleet, the merged report goes into the folder (or --out): fleet.json, fleet.csv,
heatmap.svg and by-ATTR.svg for each --by; the exit code is 1 when a planned run failed.")]
pub struct ReportArgs {
    /// A saved sweep (`sweep --json-file`), `send -J`, `send --repeat N -J`, `rr -J`, `crr -J`,
    /// `http -J`, `search -J`, `compare -J`, `experiment -J` or merged `fleet.json` document; with
    /// --html, several run documents (drawn overlaid, with a table of medians).
    #[arg(required_unless_present = "fleet", conflicts_with = "fleet")]
    pub files: Vec<PathBuf>,
    /// Write one self-contained HTML page here (inline charts, no network): the run's figures
    /// over time (stream, rr, crr), several runs overlaid, the sweep, the comparison, the
    /// experiment or the fleet.
    #[arg(long, value_name = "OUT.html")]
    pub html: Option<PathBuf>,
    /// Write the chart here.
    #[arg(long)]
    pub svg: Option<PathBuf>,
    /// Sweeps: write the CSV here.
    #[arg(long)]
    pub csv: Option<PathBuf>,
    /// Merge a fleet run: the folder the Ansible `run` role wrote (plan.json, runs/).
    #[arg(long, value_name = "DIR", conflicts_with_all = ["svg", "csv"])]
    pub fleet: Option<PathBuf>,
    /// Fleet: summarise by this host fact (the sender's; `receiver.NAME` for the
    /// receiver's; `address` for the address kind); repeat or comma-separate [default: address,vcpus].
    #[arg(long, value_name = "ATTR", value_delimiter = ',', requires = "fleet")]
    pub by: Vec<String>,
    /// Fleet: write the merged files here instead of into the fleet folder.
    #[arg(long, value_name = "DIR", requires = "fleet")]
    pub out: Option<PathBuf>,
}

#[derive(Args)]
#[command(
    after_help = "Each operand is one variant: a send --repeat N -J, send -J, rr/crr/http -J document, or several
joined with commas (NAME=a1.json,a2.json); a sweep or experiment document gives one variant per point
or variant. Every variant is compared with the first.

Examples:
  uringbench compare base.json tuned.json
  uringbench compare cubic=cubic.json bbr=bbr.json --metric received_gbps,cpu_seconds_per_gb --svg ab.svg
  uringbench compare experiment.json -J
  uringbench compare before=fleet-monday after=fleet-tuesday   # two fleet run folders"
)]
pub struct CompareArgs {
    /// Variants: [NAME=]FILE[,FILE...]; a FILE may be a fleet folder (its completed runs).
    #[arg(required = true, value_name = "[NAME=]FILE")]
    pub variants: Vec<String>,
    /// Metrics to compare (comma-separated): received_gbps, cpu_seconds_per_gb, retransmits,
    /// loss_percent, transactions_per_second, p99_us [default: every one all variants have].
    #[arg(long, value_delimiter = ',')]
    pub metric: Vec<String>,
    /// Seed of the bootstrap (the same seed and files always give the same intervals).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Write the per-variant distributions of the primary metric as an SVG here.
    #[arg(long)]
    pub svg: Option<PathBuf>,
    /// Write the comparison as one self-contained HTML page here (docs/report.md).
    #[arg(long, value_name = "OUT.html")]
    pub html: Option<PathBuf>,
    /// What goes to stdout: the comparison as text, or one JSON document.
    #[arg(long, value_enum, default_value_t = TextOrJson::Text)]
    pub format: TextOrJson,
    /// Same as --format json.
    #[arg(short = 'J', long)]
    pub json: bool,
}

/// A share: `0.1%`, `1%` or a fraction `0.001`.
fn share(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let v = match t.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map(|v| v / 100.0),
        None => t.parse::<f64>(),
    };
    match v {
        Ok(v) if v.is_finite() && (0.0..1.0).contains(&v) => Ok(v),
        _ => Err(format!("invalid share '{s}': a percentage such as 0.1% or 1%, below 100%")),
    }
}

#[derive(Args)]
#[command(after_help = "Each trial is a test of --trial; the first is unpaced (what the sender can offer), then the
rate is bisected until the step is below --resolution, and the best rate is repeated --confirm times.
Exit 1 if even the lowest rate tried loses more than --loss.

Examples:
  uringbench search -c 10.0.0.2 -u -l 1470                  # highest lossless UDP rate (GSO)
  uringbench search -c 10.0.0.2 -u -l 1470 --no-gso --loss 0.1%
  uringbench search -c 10.0.0.2 --engine xdp -l 22 --trial 5s -J
  uringbench search -c 10.0.0.2 -P 4 --loss 0.01%           # TCP: retransmitted bytes as the loss")]
pub struct SearchArgs {
    #[command(flatten)]
    pub to: TargetArgs,
    /// Queues (one pinned thread each while CPUs last), each with --flows-per-queue flows.
    #[arg(short = 'P', long, default_value_t = 1, value_parser = super::at_least_one, allow_negative_numbers = true)]
    pub queues: u32,
    /// Flows (connections or UDP sockets) on each queue's thread.
    #[arg(long, default_value_t = 1)]
    pub flows_per_queue: u32,
    /// Bytes per datagram (UDP) or send (TCP) [default: 1470 UDP, 128K TCP].
    #[arg(short = 'l', long, value_parser = size)]
    pub len: Option<u64>,
    /// Protocol of the data flows.
    #[arg(long, value_enum, default_value_t = ProtoArg::Tcp)]
    pub proto: ProtoArg,
    /// Same as --proto udp.
    #[arg(short = 'u', long)]
    pub udp: bool,
    /// UDP: one datagram per send instead of GSO batches.
    #[arg(long)]
    pub no_gso: bool,
    /// Highest loss that passes (UDP: lost datagrams; TCP: retransmitted bytes), e.g. 0.1%.
    #[arg(long, value_parser = share, default_value = "0")]
    pub loss: f64,
    /// Length of each trial's measured window.
    #[arg(long, value_parser = duration, default_value = "2s")]
    pub trial: std::time::Duration,
    /// Before each trial's window (its datagrams count towards the loss).
    #[arg(long, value_parser = duration, default_value = "500ms")]
    pub warmup: std::time::Duration,
    /// After each trial's window, excluded from it.
    #[arg(long, value_parser = duration, default_value = "250ms")]
    pub cooldown: std::time::Duration,
    /// Stop when the search interval is below this share of the upper bound.
    #[arg(long, value_parser = share, default_value = "1%")]
    pub resolution: f64,
    /// Trials at the final rate, all of which must pass.
    #[arg(long, default_value_t = 3)]
    pub confirm: u32,
    /// Upper bound of the search [default: the sender's unpaced rate, from a first trial].
    #[arg(long, value_parser = rate)]
    pub max_rate: Option<u64>,
    /// Run the latency probe beside every trial (as send --latency): each shows its loaded p99.
    #[arg(long)]
    pub latency: bool,
    /// Highest loaded p99 round trip of the latency probe that passes, e.g. 5ms: the answer is
    /// the highest rate whose loaded p99 stays under it (implies --latency).
    #[arg(long, value_parser = duration)]
    pub max_latency: Option<std::time::Duration>,
    #[command(flatten)]
    pub threads: ThreadArgs,
    /// uring: io_uring over sockets; xdp: UDP frames from AF_XDP sockets (implies -u).
    #[arg(long, value_enum, default_value_t = Engine::Uring)]
    pub engine: Engine,
    /// --engine xdp: egress interface [default: the route's to the target].
    #[arg(long)]
    pub iface: Option<String>,
    /// What goes to stdout: progress and the result as text, or one JSON document.
    #[arg(long, value_enum, default_value_t = TextOrJson::Text)]
    pub format: TextOrJson,
    /// Same as --format json.
    #[arg(short = 'J', long)]
    pub json: bool,
    /// Also write the trials and the rate found as one self-contained HTML page here
    /// (docs/report.md).
    #[arg(long, value_name = "OUT.html")]
    pub html: Option<PathBuf>,
    /// Save the search (its trials and answer) as JSON here, as sweep and experiment do
    /// (re-render later with `uringbench report FILE`).
    #[arg(long, value_name = "FILE")]
    pub json_file: Option<PathBuf>,
}

#[derive(Args)]
#[command(after_help = "The plan (TOML) names the test and the variants; see docs/tuning.md.
Settings are recorded in --state before each change and reverted after each run, also on an
error or Ctrl-C; `uringbench settings revert --state FILE` undoes a run that was killed.

Example:
  uringbench experiment tbf.toml --json-file tbf.json --svg tbf.svg")]
pub struct ExperimentArgs {
    /// The plan.
    pub plan: PathBuf,
    /// State file of the changes in force [default: /var/lib/uringbench/experiment-<netns>.state].
    #[arg(long)]
    pub state: Option<PathBuf>,
    /// Save the whole result as JSON here (every run, the settings, the comparison).
    #[arg(long, value_name = "FILE", alias = "json")]
    pub json_file: Option<PathBuf>,
    /// Write the experiment as one self-contained HTML page here: every run, the comparison,
    /// the settings each variant applied (docs/report.md).
    #[arg(long, value_name = "OUT.html")]
    pub html: Option<PathBuf>,
    /// Write the comparison's SVG here.
    #[arg(long)]
    pub svg: Option<PathBuf>,
    /// What goes to stdout: progress and the comparison as text, or one JSON document.
    #[arg(long, value_enum, default_value_t = TextOrJson::Text)]
    pub format: TextOrJson,
    /// Same as --format json.
    #[arg(short = 'J')]
    pub json: bool,
    /// Run the latency probe beside every stream run (as the plan's `latency = true`): the
    /// comparison then carries loaded p99 and RPM.
    #[arg(long)]
    pub latency: bool,
}

#[derive(Args)]
#[command(after_help = "A change is KIND:TARGET=VALUE:
  sysctl:net.core.rmem_max=67108864     file:/sys/class/net/eth0/queues/rx-0/rps_cpus=3
  ethtool-k:eth0:gro=on                 ethtool-l:eth0:combined=4   ethtool-g:eth0:rx=4096
  ethtool-c:eth0:rx-usecs=50            mtu:eth0=9000               qdisc:eth0=fq
The state file is scripts/tune.sh's: one KIND<TAB>KEY<TAB>PREVIOUS line per change.

Examples:
  uringbench settings apply --state /tmp/tune.state sysctl:net.core.rmem_max=67108864
  uringbench settings show --state /tmp/tune.state
  uringbench settings revert --state /tmp/tune.state")]
pub struct SettingsArgs {
    /// What to do with the state file.
    #[arg(value_enum)]
    pub action: SettingsAction,
    /// The state file.
    #[arg(long)]
    pub state: PathBuf,
    /// apply: the changes.
    #[arg(value_name = "CHANGE")]
    pub changes: Vec<String>,
}

#[derive(Clone, Copy, ValueEnum, PartialEq)]
pub enum SettingsAction {
    /// Record each previous value in the state file, then make the change.
    Apply,
    /// Restore every value in the state file, newest first, and remove it.
    Revert,
    /// Print the state file's changes.
    Show,
}
