//! `uringbench sweep` (a series of stream tests with a chart) and `uringbench report`
//! (re-renders saved results).

use crate::{busy, cpu_list, port_or_default, print_json, CpuList, OnOffAuto, ProtoArg};
use clap::{Args, ValueEnum};
use std::io::Write;
use std::path::{Path, PathBuf};
use uringbench::saved::SavedResults;
use uringbench::spec::{Proto, TestSpec, Workload};
use uringbench::sweep::{self, SweepParam, SweepPlan};
use uringbench::units::{parse_rate, parse_size};
use uringbench::workload::stream::SendOptions;
use uringbench::Error;

#[derive(Clone, Copy, ValueEnum, PartialEq)]
pub enum SweepFormat {
    Text,
    Json,
    Csv,
}

/// A comma-separated list as typed (`1,2,4`, `64K,128K`); a newtype so clap keeps it whole.
#[derive(Clone)]
pub struct ValueList(Vec<u64>);

fn list_of(text: &str, parse: impl Fn(&str) -> Result<u64, Error>) -> Result<ValueList, String> {
    let values: Result<Vec<u64>, Error> = text.split(',').map(|v| parse(v.trim())).collect();
    let values = values.map_err(|e| e.message)?;
    if values.is_empty() {
        return Err(format!("empty list '{text}'"));
    }
    Ok(ValueList(values))
}
fn counts(s: &str) -> Result<ValueList, String> {
    list_of(s, |v| v.parse::<u64>().map_err(|_| Error::usage(format!("invalid count '{v}': expected a whole number"))))
}
fn sizes(s: &str) -> Result<ValueList, String> {
    list_of(s, parse_size)
}
fn rates(s: &str) -> Result<ValueList, String> {
    list_of(s, parse_rate)
}

#[derive(Args)]
#[command(after_help = "Exactly one of --queues, --len, --rate is a list of several values; it is the swept parameter.
Runs are interleaved over the points (1,2,4,1,2,4,...) so slow drifts of the host spread evenly.

Examples:
  uringbench sweep -c 10.0.0.2 -P 1,2,4,8,16 --repeat 5 --svg queues.svg --csv queues.csv --json queues.json
  uringbench sweep -c 10.0.0.2 -l 4K,16K,64K,256K -t 5s --svg len.svg
  uringbench sweep -c 10.0.0.2 -u -l 1470 -b 1G,2G,4G,8G --format csv > udp.csv")]
pub struct SweepArgs {
    /// Host running `uringbench recv` (keep it running: no --once).
    #[arg(short = 'c', long)]
    target: String,
    /// Port [default: 5300].
    #[arg(short = 'p', long)]
    port: Option<u16>,
    /// Queue counts, e.g. 1,2,4,8,16.
    #[arg(short = 'P', long, value_parser = counts, default_value = "1")]
    queues: ValueList,
    /// Bytes per send / datagram, e.g. 16K,64K,256K [default: 128K TCP, 1470 UDP].
    #[arg(short = 'l', long, value_parser = sizes)]
    len: Option<ValueList>,
    /// Total offered rates in bits/s, e.g. 1G,5G,10G (0 = unlimited).
    #[arg(short = 'b', long, value_parser = rates, default_value = "0")]
    rate: ValueList,
    /// Runs per point.
    #[arg(long, default_value_t = 3)]
    repeat: u32,
    #[command(flatten)]
    window: crate::TestWindow,
    #[arg(long, value_enum, default_value_t = ProtoArg::Tcp)]
    proto: ProtoArg,
    /// Same as --proto udp.
    #[arg(short = 'u', long)]
    udp: bool,
    #[arg(long, default_value_t = 1)]
    flows_per_queue: u32,
    #[arg(long, default_value_t = 4)]
    depth: u32,
    #[arg(long, value_enum, default_value_t = OnOffAuto::Auto)]
    zerocopy: OnOffAuto,
    #[arg(long, value_parser = cpu_list)]
    cpus: Option<CpuList>,
    #[arg(long, value_enum, default_value_t = OnOffAuto::Auto)]
    busy_poll: OnOffAuto,
    /// Write the CSV (one row per run, min/median/mean/max/stdev rows per point) here.
    #[arg(long)]
    csv: Option<PathBuf>,
    /// Write the chart (Gbit/s and CPU-s/GB against the swept parameter) here.
    #[arg(long)]
    svg: Option<PathBuf>,
    /// Save the results (re-render later with `uringbench report FILE`).
    #[arg(long)]
    json: Option<PathBuf>,
    /// What goes to stdout: progress and a table, the JSON document, or the CSV.
    #[arg(long, value_enum, default_value_t = SweepFormat::Text)]
    format: SweepFormat,
}

#[derive(Args)]
#[command(after_help = "Examples:
  uringbench report queues.json --svg queues.svg     # a saved sweep
  uringbench send -c 10.0.0.2 -i 1s -J > run.json && uringbench report run.json --svg run.svg")]
pub struct ReportArgs {
    /// A saved sweep (`sweep --json`), `send -J` or `send --repeat N -J` document.
    file: PathBuf,
    /// Write the chart here.
    #[arg(long)]
    svg: Option<PathBuf>,
    /// Sweeps: write the CSV here.
    #[arg(long)]
    csv: Option<PathBuf>,
}

/// The one swept parameter and its values, the other two fixed.
fn swept(args: &SweepArgs) -> Result<(SweepParam, Vec<u64>), Error> {
    let len = args.len.as_ref().map(|l| l.0.clone());
    let lists = [
        (SweepParam::Queues, Some(args.queues.0.clone())),
        (SweepParam::Len, len),
        (SweepParam::Rate, Some(args.rate.0.clone())),
    ];
    let many: Vec<&(SweepParam, Option<Vec<u64>>)> =
        lists.iter().filter(|(_, v)| v.as_ref().is_some_and(|v| v.len() > 1)).collect();
    match many.as_slice() {
        [(p, Some(v))] => Ok((*p, v.clone())),
        [] => Err(Error::usage("give one of --queues, --len or --rate a list of values to sweep, e.g. -P 1,2,4,8")),
        _ => Err(Error::usage("sweep one parameter at a time: only one of --queues, --len, --rate may be a list")),
    }
}

/// Writes the files asked for (`--csv`, `--svg`, `--json`) from the results so far.
fn save(args: &SweepArgs, result: &sweep::SweepResult) -> Result<(), Error> {
    if let Some(path) = &args.csv {
        write_file(path, &result.to_csv())?;
    }
    if let Some(path) = &args.svg {
        write_file(path, &result.chart().to_svg())?;
    }
    if let Some(path) = &args.json {
        let doc = serde_json::to_string_pretty(&result.to_json())
            .map_err(|e| Error::io("encoding JSON", std::io::Error::other(e)))?;
        write_file(path, &format!("{doc}\n"))?;
    }
    Ok(())
}

fn write_file(path: &Path, text: &str) -> Result<(), Error> {
    std::fs::write(path, text).map_err(|e| Error::io(format!("writing {}", path.display()), e))
}

pub fn sweep(args: SweepArgs) -> Result<u8, Error> {
    let (param, values) = swept(&args)?;
    let udp = args.udp || matches!(args.proto, ProtoArg::Udp);
    let single = |list: &Option<ValueList>| list.as_ref().map(|l| l.0[0]);
    let len = single(&args.len).unwrap_or(if udp { 1470 } else { 128 * 1024 });
    if args.repeat == 0 || args.flows_per_queue == 0 || args.depth == 0 || args.window.time.is_zero() {
        return Err(Error::usage("--repeat, --flows-per-queue, --depth and --time must be at least 1"));
    }
    let mut base = TestSpec {
        proto: if udp { Proto::Udp } else { Proto::Tcp },
        workload: Workload::Stream,
        queues: u32::try_from(args.queues.0[0]).unwrap_or(0),
        flows_per_queue: args.flows_per_queue,
        len: u32::try_from(len).unwrap_or(0),
        rate_bps: args.rate.0[0],
        zerocopy: crate::zerocopy_mode(args.zerocopy),
        depth: args.depth,
        ..TestSpec::default()
    };
    args.window.apply(&mut base);
    // The fixed parameters must be valid on their own; the swept one is checked per value.
    for (p, v) in [(SweepParam::Queues, args.queues.0[0]), (SweepParam::Len, len)] {
        if p != param {
            p.apply(&base, v)?;
        }
    }
    let plan = SweepPlan {
        base: SendOptions {
            target: args.target.clone(),
            port: port_or_default(args.port, false),
            spec: base,
            cpus: args.cpus.as_ref().map(|c| c.0.clone()),
            busy_poll: busy(args.busy_poll),
        },
        param,
        values,
        repeat: args.repeat,
    };
    let text = args.format == SweepFormat::Text;
    // The files are rewritten after every run, so a sweep stopped half-way (Ctrl-C, a lost
    // VM) still leaves every finished run on disk.
    let mut save_error: Option<Error> = None;
    let result = sweep::run(&plan, |done| {
        if text {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{}", sweep::run_line(param, done.label, plan.repeat, done.figures));
            let _ = out.flush();
        }
        if save_error.is_none() {
            save_error = save(&args, done.sweep).err();
        }
    })?;
    if let Some(e) = save_error {
        return Err(e);
    }
    let mut out = std::io::stdout().lock();
    match args.format {
        SweepFormat::Text => {
            let _ = write!(out, "\n{}", result.render_table());
        }
        SweepFormat::Json => print_json(&mut out, &result.to_json())?,
        SweepFormat::Csv => {
            let _ = write!(out, "{}", result.to_csv());
        }
    }
    let _ = out.flush();
    if !result.complete() {
        eprintln!("uringbench: some runs were incomplete (see the table or the runs' errors)");
        return Ok(1);
    }
    Ok(0)
}

pub fn report(args: ReportArgs) -> Result<u8, Error> {
    let text =
        std::fs::read_to_string(&args.file).map_err(|e| Error::usage(format!("{}: {e}", args.file.display())))?;
    let saved =
        SavedResults::parse(&text).map_err(|e| Error::usage(format!("{}: {}", args.file.display(), e.message)))?;
    if let Some(path) = &args.svg {
        write_file(path, &saved.chart().to_svg())?;
    }
    if let Some(path) = &args.csv {
        match &saved {
            SavedResults::Sweep(s) => write_file(path, &s.to_csv())?,
            _ => return Err(Error::usage("--csv applies to sweeps; `send --format csv` writes a test's CSV")),
        }
    }
    let mut out = std::io::stdout().lock();
    let _ = write!(out, "{}", saved.render_text());
    Ok(0)
}
