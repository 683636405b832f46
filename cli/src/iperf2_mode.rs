//! `send --iperf2` and `recv --iperf2`: uringbench against an unmodified iperf 2.1.8, one side
//! at a time. Turns the command line into the engine's
//! [`uringbench::iperf2`] options and prints what comes back; the modes
//! share the flags of `send` and `recv`, so they live beside `main.rs` rather than in it.

use super::{busy, port_or_default, tuning_of, Format, ProtoArg, RecvArgs, SendArgs};
use crate::{peer_out::PeerOut, sink::Sink};
use std::{net::SocketAddr, sync::Arc};
use uringbench::{
    iperf2::{bind_receiver, run_send, serve, Iperf2Event, Iperf2EventSink, Iperf2TestSummary},
    peer_text,
    units::format_bits_per_second,
    Direction, Error, FastPaths, PeerCaps, PeerEvent, PeerRecvOptions, Proto, SendOptions, StopToken, TestSpec,
    Workload,
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
    if args.psk_file.is_some() {
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
    let len = args.len.unwrap_or(crate::args::default_len(udp));
    if len == 0 || len > u64::from(u32::MAX) {
        return Err(Error::usage(format!("--len {len} out of range")));
    }
    let (tuning, local) = tuning_of(&args.tuning)?;
    let mut spec = TestSpec {
        proto: if udp { Proto::Udp } else { Proto::Tcp },
        workload: Workload::Stream,
        queues: args.queues,
        flows_per_queue: args.flows_per_queue,
        len: len as u32,
        rate_bps: crate::offered(args, udp, len).0,
        burst: crate::burst_of(args),
        zerocopy: crate::zerocopy_mode(args.zerocopy),
        depth: args.depth,
        gso: !args.no_gso,
        direction: crate::direction_of(args),
        tuning,
        ..TestSpec::default()
    };
    args.window.apply(&mut spec, args.interval);
    let opts = SendOptions {
        target: args.target.clone(),
        port: args.port.unwrap_or(port),
        spec,
        cpus: args.cpus.as_ref().map(|c| c.0.clone()),
        busy_poll: busy(args.busy_poll),
        fast,
        kernel: uringbench::KernelCaps::detect()?,
        local,
        // Neither iperf2 nor iperf3 (without its RSA option) authenticates.
        psk: None,
        stop,
    };
    Ok((opts, format))
}

/// Prints a peer mode's report as text or JSON; the exit code says whether it was complete.
pub fn print_report(
    format: Format,
    json: serde_json::Value,
    text: String,
    complete: bool,
    error: Option<String>,
) -> Result<u8, Error> {
    let out = Sink::stdout();
    match format {
        Format::Json => out.json_doc(&json)?,
        _ => out.text(&text),
    }
    if complete {
        Ok(0)
    } else {
        Err(Error::peer(error.unwrap_or_else(|| "the test did not complete".into())))
    }
}

/// `uringbench send --iperf2`: our sender against `iperf -s` (TCP) or `iperf -s -u` (UDP).
pub fn send(args: &SendArgs, fast: FastPaths, stop: StopToken) -> Result<u8, Error> {
    let (mut opts, format) =
        peer_send_options(args, fast, stop, "--iperf2", port_or_default(args.port, crate::args::Peer::Iperf2))?;
    // iperf2 tests run forward, without the flow knobs (main.rs refuses them).
    opts.spec.direction = Direction::Forward;
    opts.spec.tuning = Default::default();
    let report = run_send(&opts)?;
    print_report(format, report.to_json(), report.render_text(), report.complete(), report.first_error())
}

/// `uringbench recv --iperf2`: serves `iperf -c` clients, TCP and UDP, on one port.
pub fn recv(args: &RecvArgs, fast: FastPaths, stop: StopToken) -> Result<u8, Error> {
    let opts = peer_recv_options(args, fast, stop, "--iperf2", port_or_default(args.port, crate::args::Peer::Iperf2))?;
    let listeners = bind_receiver(&opts)?;
    let out = PeerOut::of(args, &opts.stop);
    let events: Iperf2EventSink = Arc::new(move |event: Iperf2Event| {
        let doc = match &event {
            PeerEvent::TestDone(s) if out.writes_json() => Some(s.to_document()),
            _ => None,
        };
        peer_event(out, "--iperf2", event, test_line, |tcp, udp, caps| {
            format!(
                "listening on TCP {tcp} and UDP {udp} for iperf2 clients (`iperf -c`, `iperf -c -u`); \
                 limits: {} connections sending their header ({} per address), {} flows, {} UDP sessions",
                caps.pending, caps.pending_per_source, caps.flows, caps.udp_sessions
            )
        });
        if let Some(doc) = doc {
            out.done(Some(doc), String::new);
        }
    });
    let ok = serve(opts, listeners, events)?;
    Ok(if ok { 0 } else { 1 })
}

/// Writes what a peer receiver (`recv --iperf2`, `recv --iperf3`: `flag`) tells to `out`: a
/// log line, or a `--json-stream` event; `test_line` and `listening` say what only that
/// tool's receiver says. (A finished test's document is the caller's: it knows its type.)
pub fn peer_event<T>(
    out: PeerOut,
    flag: &str,
    event: PeerEvent<T>,
    test_line: impl Fn(&T) -> String,
    listening: impl Fn(SocketAddr, SocketAddr, PeerCaps) -> String,
) {
    let tool = flag.trim_start_matches('-');
    let line = match event {
        PeerEvent::Started(start) => return out.started(&start, tool),
        PeerEvent::Interval { role, n, figures } => return out.interval(role, n, &figures),
        PeerEvent::Listening { tcp, udp, caps } => format!("uringbench recv {flag}: {}", listening(tcp, udp, caps)),
        PeerEvent::TestDone(summary) => test_line(&summary),
        PeerEvent::Refused { proto, peer, reason } => {
            format!("refused {tool} {} test from {peer}: {}", proto_name(proto), peer_text(&reason))
        }
        PeerEvent::Dropped { peer, reason } => format!("dropped connection from {peer}: {}", peer_text(&reason)),
        PeerEvent::More { peer, count, seconds } => format!(
            "... and {count} more from {} in the last {seconds:.0} s",
            peer.map_or("other addresses".to_string(), |p| p.to_string())
        ),
        PeerEvent::Paused { proto, reason } => {
            format!("uringbench recv {flag}: {} paused: {reason}", proto_name(proto))
        }
    };
    out.log(&line);
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
        cpus: args.cpus.as_ref().map(|c| c.0.clone()),
        // --no-spin: a remote peer's test never gets spinning threads, whatever --busy-poll says.
        busy_poll: if args.no_spin { uringbench::BusyPoll::Off } else { busy(args.busy_poll) },
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

fn proto_name(proto: Proto) -> &'static str {
    match proto {
        Proto::Tcp => "TCP",
        Proto::Udp => "UDP",
    }
}

/// One line per finished client test: bytes, rate, and for UDP loss, reordering and jitter.
fn test_line(s: &Iperf2TestSummary) -> String {
    let flows = if s.flows == s.expected_flows {
        format!("{} flow{}", s.flows, if s.flows == 1 { "" } else { "s" })
    } else {
        format!("{} of {} flows", s.flows, s.expected_flows)
    };
    let version = s.client_version.as_ref().map_or("iperf2".to_string(), |v| format!("iperf {v}"));
    let mut line = format!(
        "[{}] iperf2 {} test from {} ({version}, {flows}): {} bytes in {:.3} s = {}",
        s.id,
        proto_name(s.proto),
        s.peer,
        s.bytes,
        s.seconds,
        format_bits_per_second(s.bits_per_second())
    );
    if let Some(u) = &s.udp {
        line += &format!(
            ", lost {}/{} ({:.2}%), out-of-order {}, jitter {:.3} ms, {} datagrams received, {} report{} sent",
            u.lost,
            u.expected,
            100.0 * u.loss_ratio(),
            u.out_of_order,
            u.jitter_us / 1e3,
            u.received,
            s.reports_sent,
            if s.reports_sent == 1 { "" } else { "s" }
        );
        if u.duplicates > 0 {
            line += &format!(", {} duplicates", u.duplicates);
        }
    }
    if !s.errors.is_empty() {
        line += &format!(", incomplete: {}", peer_text(&s.errors.join("; ")));
    }
    if !s.notes.is_empty() {
        line += &format!(" (note: {})", peer_text(&s.notes.join("; ")));
    }
    line
}
