//! The flow knobs of `send`, `rr` and `crr` (`-C`, `-w`, `-M`, `-S`, `-B`...): turned into the
//! test's tuning and this side's local end, and refused where they cannot apply.

use crate::args::TuningArgs;
use uringbench::{Error, LocalEnd, Tuning};

/// The knobs of `-C`, `-w`, `-M`... (the congestion control checked against this kernel, the
/// rest by the spec's `validate`), and where this side's sockets leave from.
pub(crate) fn tuning_of(t: &TuningArgs) -> Result<(Tuning, LocalEnd), Error> {
    if let Some(c) = &t.congestion {
        uringbench::check_congestion(c).map_err(Error::usage)?;
    }
    let (bind, bind_dev) = match t.bind.as_deref().map(|b| b.split_once('%').map_or((b, None), |(a, d)| (a, Some(d)))) {
        Some((addr, dev)) => {
            let ip = addr.parse().map_err(|_| Error::usage(format!("invalid --bind address '{addr}'")))?;
            (Some(ip), dev.map(str::to_string))
        }
        None => (None, None),
    };
    let tuning = Tuning {
        congestion: t.congestion.clone(),
        window: t.window.map(Tuning::window_of).transpose()?,
        mss: t.mss,
        nodelay: t.no_delay,
        tos: t.tos.or(t.dscp),
        fq_rate_bps: t.fq_rate,
        bytes: t.bytes,
        skip_rx_copy: t.skip_rx_copy,
        mptcp: t.mptcp,
    };
    let local = LocalEnd {
        family: if t.ipv4 {
            Some(4)
        } else if t.ipv6 {
            Some(6)
        } else {
            None
        },
        bind,
        device: t.bind_dev.clone().or(bind_dev),
        data_port: None,
        no_steer: false,
        ntuple: false,
    };
    Ok((tuning, local))
}

/// Refuses the flow knobs where they cannot apply: TCP-only knobs on UDP (or on crr's
/// short-lived connections), any knob on the paths that do not carry them (`--iperf2`,
/// `--engine xdp`).
pub(crate) fn refuse_knobs(t: &TuningArgs, no_tcp_flows: bool, no_knobs: bool) -> Result<(), Error> {
    let tcp_only = [
        ("-C/--congestion", t.congestion.is_some()),
        ("-w/--window", t.window.is_some()),
        ("-M/--mss", t.mss.is_some()),
        ("-N/--no-delay", t.no_delay),
        ("--fq-rate", t.fq_rate.is_some()),
        ("-n/--bytes", t.bytes.is_some()),
        ("--skip-rx-copy", t.skip_rx_copy),
    ];
    // Not TCP-only in this sense: crr's connections can be MPTCP too (UDP is the spec's to refuse).
    let marks = [("-S/--tos", t.tos.is_some()), ("--dscp", t.dscp.is_some()), ("-m/--mptcp", t.mptcp)];
    if no_knobs {
        if let Some((name, _)) = tcp_only.iter().chain(&marks).find(|(_, set)| *set) {
            return Err(Error::usage(format!(
                "{name} applies to uringbench's own engine, not to --iperf2 or --engine xdp"
            )));
        }
    }
    if no_tcp_flows {
        if let Some((name, _)) = tcp_only.iter().find(|(_, set)| *set) {
            return Err(Error::usage(format!("{name} applies to TCP streams and TCP rr")));
        }
    }
    Ok(())
}
