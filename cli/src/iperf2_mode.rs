//! `send --iperf2` and `recv --iperf2`: uringbench against an unmodified iperf 2.1.8, one side
//! at a time. Turns the command line into the engine's
//! [`uringbench::iperf2`] options and prints what comes back; the modes
//! share the flags of `send` and `recv`, so they live beside `main.rs` rather than in it.

use super::{knobs::tuning_of, Format, ProtoArg, RecvArgs, SendArgs};
use crate::{
    peer_out::{peer_events, PeerOut},
    plan::{busy, port_or_default, Reach, StreamPlan},
    sink::Sink,
};
use uringbench::{
    iperf2::{bind_receiver, run_send, serve, Iperf2TestSummary},
    output::Exported,
    Direction, Error, FastPaths, PeerRecvOptions, SendOptions, StopToken,
};

/// The options of a test against another tool's server (`--iperf2`, `--iperf3`, named by
/// `flag` in refusals) from `send`'s flags, and the output format; `port` is that tool's
/// default. The spec carries the flow knobs and the direction; each mode refuses what its
/// peer cannot do.
pub fn peer_send_options(
    args: &SendArgs,
    fast: FastPaths,
    stop: StopToken,
    flag: &str,
    port: u16,
) -> Result<(SendOptions, Format), Error> {
    if args.repeat != 1 {
        return Err(Error::usage(format!(
            "--repeat is not available with {flag}: run the command once per repetition"
        )));
    }
    if args.to.psk_file.is_some() {
        let theirs =
            if flag == "--iperf3" { " (iperf3's own credentials: --username, --rsa-public-key-path)" } else { "" };
        return Err(Error::usage(format!(
            "--psk-file is not available with {flag}: the other tool does not take it{theirs}"
        )));
    }
    if args.tuning.mptcp && flag != "--iperf3" {
        return Err(Error::usage(format!(
            "-m/--mptcp is not available with {flag}: the other tool's receiver takes plain TCP only (iperf3 3.16+ has it: --iperf3)"
        )));
    }
    let format = if args.json { Format::Json } else { args.format };
    if format == Format::Csv {
        return Err(Error::usage(format!("--format csv is not available with {flag} (use text or json)")));
    }
    if args.output.json_stream {
        // The far tool's figures come once, after the test: no stream to give.
        return Err(Error::usage(format!("--json-stream is not available with {flag} (use -J)")));
    }
    let udp = args.udp || matches!(args.proto, ProtoArg::Udp);
    let (tuning, local) = tuning_of(&args.tuning)?;
    let mut spec = StreamPlan::new(args, udp, args.interval)?.spec;
    spec.tuning = tuning;
    // Neither iperf2 nor iperf3 (without its RSA option) authenticates: --psk-file was refused.
    let opts = Reach::new(&args.to, &args.threads, port)?.options(spec, local, fast, stop);
    Ok((opts, format))
}

/// Prints a peer mode's report as text or JSON (CSV was refused); the exit code says whether
/// it was complete.
pub fn print_report(
    format: Format,
    report: &impl Exported,
    complete: bool,
    error: Option<String>,
) -> Result<u8, Error> {
    Sink::stdout().export(format.into(), report)?;
    if complete {
        Ok(0)
    } else {
        Err(Error::peer(error.unwrap_or_else(|| "the test did not complete".into())))
    }
}

/// `uringbench send --iperf2`: our sender against `iperf -s` (TCP) or `iperf -s -u` (UDP).
pub fn send(args: &SendArgs, fast: FastPaths, stop: StopToken) -> Result<u8, Error> {
    let (mut opts, format) =
        peer_send_options(args, fast, stop, "--iperf2", port_or_default(args.to.port, crate::args::Peer::Iperf2))?;
    // iperf2 tests run forward, without the flow knobs (main.rs refuses them).
    opts.spec.direction = Direction::Forward;
    opts.spec.tuning = Default::default();
    let report = run_send(&opts)?;
    print_report(format, &report, report.complete(), report.first_error())
}

/// `uringbench recv --iperf2`: serves `iperf -c` clients, TCP and UDP, on one port.
pub fn recv(args: &RecvArgs, fast: FastPaths, stop: StopToken) -> Result<u8, Error> {
    let opts = peer_recv_options(args, fast, stop, "--iperf2", port_or_default(args.port, crate::args::Peer::Iperf2))?;
    let listeners = bind_receiver(&opts)?;
    let events = peer_events::<Iperf2TestSummary>(PeerOut::of(args, &opts.stop));
    let ok = serve(opts, listeners, events)?;
    Ok(if ok { 0 } else { 1 })
}

/// The options of a receiver serving another tool's clients (`--iperf2`, `--iperf3`, named
/// by `flag` in refusals) from `recv`'s flags; `port` is that tool's default.
pub fn peer_recv_options(
    args: &RecvArgs,
    fast: FastPaths,
    stop: StopToken,
    flag: &str,
    port: u16,
) -> Result<PeerRecvOptions, Error> {
    // The native receiver's authentication and address filter: the other tools' clients have neither.
    if args.psk_file.is_some() || !args.allow.is_empty() {
        let theirs = if flag == "--iperf3" { " with ours (iperf3's own: --rsa-private-key-path)" } else { "" };
        return Err(Error::usage(format!(
            "--psk-file and --allow are not available with {flag}: its clients do not authenticate{theirs} (filter with a firewall)"
        )));
    }
    refuse_native_limits(args, flag)?;
    let bind = args.bind.parse().map_err(|_| Error::usage(format!("invalid --bind address '{}'", args.bind)))?;
    Ok(PeerRecvOptions {
        bind,
        port: args.port.unwrap_or(port),
        cpus: args.threads.cpus.as_ref().map(|c| c.0.clone()),
        // --no-spin: a remote peer's test never gets spinning threads, whatever --busy-poll says.
        busy_poll: if args.no_spin { uringbench::BusyPoll::Off } else { busy(args.threads.busy_poll) },
        once: args.once,
        max_time: args.max_time,
        max_flows: args.max_queues,
        stop,
        fast,
        kernel: uringbench::KernelCaps::detect()?,
        max_pending_per_source: u32::try_from(args.max_pending_per_source).unwrap_or(u32::MAX),
        max_rate_bps: args.max_rate,
        flows_from_any_address: args.flows_from_any_address,
        no_progress: args.no_progress_limit.unwrap_or(uringbench::DEFAULT_NO_PROGRESS),
    })
}

/// The native receiver's limits a peer receiver (`flag`) cannot apply, refused at start with
/// the reason: an operator who set one must not believe it holds. The ones it applies:
/// --max-time, --max-queues (flows), --no-spin, --once; --max-pending-per-source on the
/// receivers behind the accept gate (--iperf2, --iperf3); --max-rate on --iperf3 (it paces
/// what it sends and refuses clients asking for more); --max-sessions and
/// --max-sessions-per-source on --iperf3, which serves one test at a time.
fn refuse_native_limits(args: &RecvArgs, flag: &str) -> Result<(), Error> {
    let iperf3 = flag == "--iperf3";
    let refused = |option: &str, why: &str| Err(Error::usage(format!("{option} is not available with {flag}: {why}")));
    if args.max_rate.is_some() && !iperf3 {
        return refused(
            "--max-rate",
            "this receiver never sends (it refuses -r, -d, -R), and a client's own sending rate cannot be capped from here: \
             shape it with tc, or serve --iperf3",
        );
    }
    // The defaults of RecvArgs: another value was asked for.
    if !iperf3 && (args.max_sessions != 4 || args.max_sessions_per_source != 2) {
        return refused(
            "--max-sessions and --max-sessions-per-source",
            "its tests are counted as flows and UDP sessions (cap them with --max-queues)",
        );
    }
    if args.max_sessions == 0 || args.max_sessions_per_source == 0 {
        return refused("--max-sessions 0", "it would serve no test");
    }
    if flag == "--ntttcp" && args.max_pending_per_source != 64 {
        return refused(
            "--max-pending-per-source",
            "NTttcp's connections carry data from their first byte, there is no handshake to wait for",
        );
    }
    if flag == "--ntttcp" && args.no_progress_limit.is_some() {
        return refused("--no-progress-limit", "each NTttcp connection is counted on its own until --max-time");
    }
    if flag != "--ntttcp" && args.max_pending_per_source == 0 {
        return refused("--max-pending-per-source 0", "it would close every connection");
    }
    for (set, option) in [
        (args.variants.is_some(), "--variants"),
        (args.queues.is_some(), "--queues"),
        (args.placement.is_some(), "--placement"),
        (args.bind_dev.is_some(), "--bind-dev"),
    ] {
        if set {
            return refused(option, "it serves uringbench senders only (their hello asks for it)");
        }
    }
    Ok(())
}
