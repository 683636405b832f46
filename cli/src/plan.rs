//! The planning stage between the parsed arguments and the engine: the argument groups every
//! sending command shares become validated values here, once, so `send`, `rr`/`crr`, `sweep`,
//! `search` and the peer modes build their `TestSpec` and `SendOptions` the same way.
//!
//! The engine takes milliseconds and bits per second; the conversions from the command line's
//! durations, flags and defaults live here and nowhere else.

use crate::{
    args::{
        default_len, FastPathArgs, Format, OnOffAuto, OutputArgs, Peer, ProtoArg, RrArgs, SearchArgs, SendArgs,
        SweepArgs, TargetArgs, TestWindow, TextOrJson, ThreadArgs, ValueList, UDP_DEFAULT_RATE,
    },
    knobs::{refuse_knobs, tuning_of},
    xdp_mode,
};
use std::time::Duration;
use uringbench::{
    iperf2::IPERF2_PORT,
    output::OutputFormat,
    search::SearchPlan,
    sweep::{SweepParam, SweepPlan},
    units::format_bits_per_second,
    BusyPoll, Direction, Error, FastPaths, KernelCaps, LocalEnd, Proto, Psk, SendOptions, StopToken, TestSpec,
    Workload, ZeroCopyMode, DEFAULT_PORT,
};

/// Intervals of send, rr and crr when `-i` is not given, in every output, as iperf3's
/// (`-i 0` turns them off).
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(1);

/// Where a test goes and how this host runs its threads: the target group and the thread group
/// of the arguments, validated (the key read, the kernel probed) once for every run they serve.
#[derive(Clone)]
pub struct Reach {
    target: String,
    port: u16,
    psk: Option<Psk>,
    cpus: Option<Vec<usize>>,
    busy_poll: BusyPoll,
    kernel: KernelCaps,
}

impl Reach {
    /// `port` applies when `-p` was not given (each peer tool has its own).
    pub fn new(to: &TargetArgs, threads: &ThreadArgs, port: u16) -> Result<Self, Error> {
        Ok(Self {
            target: to.target.clone(),
            port: to.port.unwrap_or(port),
            psk: to.psk_file.as_deref().map(Psk::load).transpose()?,
            cpus: threads.cpus.as_ref().map(|c| c.0.clone()),
            busy_poll: busy(threads.busy_poll),
            kernel: KernelCaps::detect()?,
        })
    }

    /// The engine's options for one test of this reach.
    pub fn options(&self, spec: TestSpec, local: LocalEnd, fast: FastPaths, stop: StopToken) -> SendOptions {
        SendOptions {
            target: self.target.clone(),
            port: self.port,
            spec,
            cpus: self.cpus.clone(),
            busy_poll: self.busy_poll,
            local,
            fast,
            kernel: self.kernel.clone(),
            psk: self.psk.clone(),
            stop,
        }
    }
}

/// The port to use: given, or the default of the peer (iperf2's 5001 with --iperf2).
pub fn port_or_default(port: Option<u16>, peer: Peer) -> u16 {
    port.unwrap_or(default_port(peer))
}

/// The port each receiver listens on unless told otherwise.
pub fn default_port(peer: Peer) -> u16 {
    if peer == Peer::Iperf2 {
        IPERF2_PORT
    } else {
        DEFAULT_PORT
    }
}

pub fn zerocopy_mode(z: OnOffAuto) -> ZeroCopyMode {
    match z {
        OnOffAuto::Auto => ZeroCopyMode::Auto,
        OnOffAuto::On => ZeroCopyMode::On,
        OnOffAuto::Off => ZeroCopyMode::Off,
    }
}

pub fn busy(b: OnOffAuto) -> BusyPoll {
    match b {
        OnOffAuto::Auto => BusyPoll::Auto,
        OnOffAuto::On => BusyPoll::On,
        OnOffAuto::Off => BusyPoll::Off,
    }
}

impl TestWindow {
    /// Writes the window and the interval period into a spec (milliseconds on the wire).
    pub fn apply(&self, spec: &mut TestSpec, interval: Option<std::time::Duration>) {
        spec.time_ms = self.time.as_millis() as u64;
        spec.warmup_ms = self.warmup.as_millis() as u64;
        spec.cooldown_ms = self.cooldown.as_millis() as u64;
        spec.interval_ms = interval.map_or(0, |d| d.as_millis() as u64);
    }
}

impl From<Format> for OutputFormat {
    fn from(f: Format) -> Self {
        match f {
            Format::Text => OutputFormat::Text,
            Format::Json => OutputFormat::Json,
            Format::Csv => OutputFormat::Csv,
        }
    }
}

/// The output format of the commands that take `--format text|json` and `-J`.
pub fn text_or_json(format: TextOrJson, json: bool) -> OutputFormat {
    if json || format == TextOrJson::Json {
        OutputFormat::Json
    } else {
        OutputFormat::Text
    }
}

/// The direction `send`'s flags ask for.
pub fn direction_of(args: &SendArgs) -> Direction {
    if args.bidir {
        Direction::Bidir
    } else if args.reverse {
        Direction::Reverse
    } else {
        Direction::Forward
    }
}

/// The total offered rate of a send (`-b` and `--pps` are per flow, as iperf's `-b`), and the
/// line that says so when it is limited.
pub fn offered(args: &SendArgs, udp: bool, len: u64) -> (u64, Option<String>) {
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
pub fn burst_of(args: &SendArgs) -> Option<u32> {
    args.rate.and_then(|r| r.burst)
}

/// A stream test of `send` (ours or a peer tool's receiver): the spec its flags describe, and
/// the line that names a limited rate. Each caller adds what only it has (the latency probe,
/// a start time, the tuning it checked).
pub struct StreamPlan {
    pub spec: TestSpec,
    pub rate_line: Option<String>,
}

impl StreamPlan {
    /// `udp`: the caller's decision (`-u`, `--proto udp`, or an engine that sends only UDP);
    /// `interval`: the report period, which differs between our receiver and the peer tools.
    pub fn new(args: &SendArgs, udp: bool, interval: Option<std::time::Duration>) -> Result<Self, Error> {
        let len = args.len.unwrap_or(default_len(udp));
        if len == 0 || len > u64::from(u32::MAX) {
            return Err(Error::usage(format!("--len {len} out of range: 1 byte to {} bytes (4 GiB - 1)", u32::MAX)));
        }
        let (rate_bps, rate_line) = offered(args, udp, len);
        let mut spec = TestSpec {
            proto: if udp { Proto::Udp } else { Proto::Tcp },
            workload: Workload::Stream,
            queues: args.queues,
            flows_per_queue: args.flows_per_queue,
            len: len as u32,
            rate_bps,
            burst: burst_of(args),
            zerocopy: zerocopy_mode(args.zerocopy),
            depth: args.depth,
            gso: !args.no_gso,
            direction: direction_of(args),
            ..TestSpec::default()
        };
        args.window.apply(&mut spec, interval);
        Ok(Self { spec, rate_line })
    }
}

/// `rr` and `crr`: the test their flags describe, checked, with the options to run it.
pub fn rr_options(args: &RrArgs, workload: Workload, stop: StopToken) -> Result<SendOptions, Error> {
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
    Ok(Reach::new(&args.to, &args.threads, DEFAULT_PORT)?.options(spec, local, fast, stop))
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

/// `sweep`: the base test, the parameter swept and its values, every point checked before any
/// runs.
pub fn sweep_plan(args: &SweepArgs, stop: StopToken) -> Result<SweepPlan, Error> {
    let (param, values) = swept(args)?;
    let udp = args.udp || matches!(args.proto, ProtoArg::Udp);
    let single = |list: &Option<ValueList>| list.as_ref().map(|l| l.0[0]);
    let len = single(&args.len).unwrap_or(if udp { 1470 } else { 128 * 1024 });
    if args.repeat == 0 {
        return Err(Error::usage("--repeat must be at least 1"));
    }
    let mut base = TestSpec {
        proto: if udp { Proto::Udp } else { Proto::Tcp },
        workload: Workload::Stream,
        queues: u32::try_from(args.queues.0[0]).unwrap_or(0),
        flows_per_queue: args.flows_per_queue,
        len: u32::try_from(len).unwrap_or(0),
        rate_bps: args.rate.0[0],
        zerocopy: zerocopy_mode(args.zerocopy),
        depth: args.depth,
        ..TestSpec::default()
    };
    args.window.apply(&mut base, args.interval);
    // The fixed parameters must be valid on their own; then every point, before any runs.
    for (p, v) in [(SweepParam::Queues, args.queues.0[0]), (SweepParam::Len, len)] {
        if p != param {
            p.apply(&base, v)?;
        }
    }
    for &v in &values {
        param.apply(&base, v)?.validate()?;
    }
    Ok(SweepPlan {
        base: Reach::new(&args.to, &args.threads, DEFAULT_PORT)?.options(
            base,
            Default::default(),
            Default::default(),
            stop,
        ),
        param,
        values,
        repeat: args.repeat,
    })
}

/// `search`: the trial test and the search's bounds, with the options every trial runs with.
pub fn search_plan(args: &SearchArgs, stop: StopToken) -> Result<(SearchPlan, SendOptions), Error> {
    let latency = args.latency || args.max_latency.is_some();
    if latency && args.engine == xdp_mode::Engine::Xdp {
        return Err(Error::usage("--latency and --max-latency need uringbench's own engine, not --engine xdp"));
    }
    let udp = args.udp || matches!(args.proto, ProtoArg::Udp) || args.engine == xdp_mode::Engine::Xdp;
    let len = args.len.unwrap_or(if udp { 1470 } else { 128 * 1024 });
    let len = u32::try_from(len).map_err(|_| Error::usage(format!("--len {len} out of range")))?;
    // The window of each trial is --trial: named here, before the spec's check names --time.
    if args.trial.as_millis() == 0 {
        return Err(Error::usage("--trial must be 1 ms or longer"));
    }
    let spec = TestSpec {
        proto: if udp { Proto::Udp } else { Proto::Tcp },
        workload: Workload::Stream,
        queues: args.queues,
        flows_per_queue: args.flows_per_queue,
        len,
        gso: !args.no_gso,
        time_ms: args.trial.as_millis() as u64,
        warmup_ms: args.warmup.as_millis() as u64,
        cooldown_ms: args.cooldown.as_millis() as u64,
        latency,
        ..TestSpec::default()
    };
    spec.validate()?;
    let base = Reach::new(&args.to, &args.threads, DEFAULT_PORT)?.options(
        spec.clone(),
        Default::default(),
        Default::default(),
        stop,
    );
    let plan = SearchPlan {
        spec,
        loss_threshold: args.loss,
        resolution: args.resolution,
        confirm: args.confirm,
        max_rate_bps: args.max_rate.filter(|&r| r > 0),
        max_latency_ms: args.max_latency.map(|d| d.as_secs_f64() * 1e3),
    };
    Ok((plan, base))
}

impl FastPathArgs {
    /// The fast paths asked for, probed before any ring exists; the run carries them down.
    /// `rx_queues`: `recv --queues`, which narrows the queues `--zc-rx IFACE` chooses.
    pub fn probe(&self, zc_rx: Option<&str>, rx_queues: Option<&[u32]>) -> Result<FastPaths, Error> {
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

impl OutputArgs {
    /// How much the text report shows (`-v`).
    pub fn detail(&self) -> uringbench::output::Detail {
        if self.verbose {
            uringbench::output::Detail::Verbose
        } else {
            uringbench::output::Detail::Short
        }
    }
}

/// `--start-at`: the instant, checked against this host's clock before anything is opened.
pub fn start_at_of(args: &SendArgs) -> Result<Option<uringbench::StartAt>, Error> {
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
