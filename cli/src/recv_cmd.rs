//! `uringbench recv`: the receiver's options become its configuration, and its events lines.

use crate::args::Peer;
use crate::{
    args,
    args::RecvArgs,
    iperf2_mode, iperf3_mode, metrics_endpoint,
    plan::{busy, port_or_default},
    sink::Sink,
    xdp_mode,
};
use std::sync::Arc;
use uringbench::{escape_controls, Error, Psk, ReceiverConfig, ServerEvent, ServerLimits, StopToken, Workloads};

pub fn recv(args: RecvArgs, stop: StopToken) -> Result<u8, Error> {
    let tally = metrics_endpoint::start(&args, &stop)?;
    let nic_queues = args.queues.as_deref().map(uringbench::parse_queue_list).transpose()?;
    let auto_zc = args.zc_rx.as_deref().is_some_and(|z| !z.contains(':'));
    let peer = args.peer();
    if auto_zc && peer.is_tool() {
        return Err(Error::usage(
            "--zc-rx IFACE (queues kept out of RSS, flows placed by n-tuple rules) serves uringbench senders only: \
             with --iperf2, --iperf3 or --ntttcp name the queue (--zc-rx IFACE:QUEUE) and steer the flows to it yourself",
        ));
    }
    let fast = args.fast.probe(args.zc_rx.as_deref(), nic_queues.as_deref())?;
    xdp_mode::refuse_iperf2(args.engine, peer == Peer::Iperf2)?;
    if matches!(peer, Peer::Iperf3 | Peer::Ntttcp) && args.engine == xdp_mode::Engine::Xdp {
        return Err(Error::usage("--engine xdp is not available with --iperf3 or --ntttcp"));
    }
    if (args.json || args.json_stream) && !peer.is_tool() {
        return Err(Error::usage(
            "recv -J and --json-stream write the documents of tests another tool sends (with --iperf2, --iperf3 or --ntttcp): \
             a uringbench sender's `send -J` has both ends' figures",
        ));
    }
    match peer {
        Peer::Iperf2 => return iperf2_mode::recv(&args, fast, stop),
        Peer::Iperf3 => return iperf3_mode::recv(&args, fast, stop),
        Peer::Ntttcp => return iperf3_mode::recv_ntttcp(&args, fast, stop),
        Peer::Uringbench => {}
    }
    // A stop (Ctrl-C, systemd's SIGTERM) ends running tests with their reports, then exits 0.
    let bind = args.bind.parse().map_err(|_| Error::usage(format!("invalid --bind address '{}'", args.bind)))?;
    let cfg = ReceiverConfig {
        bind,
        device: args.bind_dev.clone(),
        port: port_or_default(args.port, peer),
        cpus: args.threads.cpus.map(|c| c.0),
        busy_poll: busy(args.threads.busy_poll),
        once: args.once,
        limits: ServerLimits {
            max_total_ms: args.max_time.as_millis() as u64,
            max_queues: args.max_queues,
            max_sessions: args.max_sessions,
            max_sessions_per_source: args.max_sessions_per_source,
            max_rate_bps: args.max_rate,
            no_spin: args.no_spin,
            no_progress: args.no_progress_limit.unwrap_or(uringbench::DEFAULT_NO_PROGRESS),
            ..ServerLimits::default()
        },
        psk: args.psk_file.as_deref().map(Psk::load).transpose()?,
        allow: args
            .allow
            .iter()
            .map(|c| c.parse().map_err(|e| Error::usage(format!("--allow: {e}"))))
            .collect::<Result<_, _>>()?,
        max_pending_per_source: args.max_pending_per_source,
        flows_from_any_address: args.flows_from_any_address,
        stop,
        variants: args.variants.as_deref().map(uringbench::settings::ReceiverVariants::load).transpose()?.map(Arc::new),
        fast,
        kernel: uringbench::KernelCaps::detect()?,
        nic_queues,
        placement: args.placement.map(|p| match p {
            args::Placement::Irq => uringbench::PlacementMode::Irq,
            args::Placement::IrqSibling => uringbench::PlacementMode::IrqSibling,
            args::Placement::Numa => uringbench::PlacementMode::Numa,
            args::Placement::Cpus => uringbench::PlacementMode::Cpus,
        }),
        tally,
    };
    let workloads =
        Workloads { xdp: xdp_mode::recv_options(args.engine, args.iface.clone(), args.xdp_mode, args.xdp_count)? };
    let listener = uringbench::bind(&cfg)?;
    let events = Arc::new(|event: ServerEvent| {
        let line = event.render_line();
        // Reasons and errors may quote what a peer sent: one line each, whatever it sent.
        Sink::stdout().text(&format!("{}\n", escape_controls(&line)));
    });
    let ok = uringbench::serve(cfg, Arc::new(workloads), listener, events)?;
    Ok(if ok { 0 } else { 1 })
}
