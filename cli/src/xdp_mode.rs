//! `--engine xdp` on `send` and `recv`: the options that choose the AF_XDP engine and its
//! interface, turned into the engine's [`XdpOptions`].

pub use crate::args::{Engine, XdpCountArg, XdpGenArg, XdpModeArg};
use std::sync::Arc;
use uringbench::{
    run_send_live, run_send_xdp, AttachMode, Error, Observer, SendOptions, StreamReport, XdpCount, XdpGen, XdpOptions,
};

/// The receiver's AF_XDP options, or `None` for the socket engine.
pub fn recv_options(
    engine: Engine,
    iface: Option<String>,
    mode: XdpModeArg,
    count: XdpCountArg,
) -> Result<Option<XdpOptions>, Error> {
    if engine == Engine::Uring {
        if iface.is_some() || mode != XdpModeArg::Auto || count != XdpCountArg::Sockets {
            return Err(Error::usage("--iface, --xdp-mode and --xdp-count apply to --engine xdp"));
        }
        return Ok(None);
    }
    let count = match count {
        XdpCountArg::Sockets => XdpCount::Sockets,
        XdpCountArg::Kernel => XdpCount::Kernel,
    };
    let program_mode = match mode {
        XdpModeArg::Auto => None,
        XdpModeArg::Native => Some(AttachMode::Native),
        XdpModeArg::Generic => Some(AttachMode::Generic),
    };
    Ok(Some(XdpOptions { iface, program_mode, gen: XdpGen::Xsk, count }))
}

/// Runs one send test, telling the observer of its progress.
pub type SendTest = Box<dyn Fn(&SendOptions, Arc<dyn Observer>) -> Result<StreamReport, Error>>;

/// The function that runs one send test with the chosen engine (and, for xdp, frame maker).
pub fn sender(engine: Engine, iface: Option<String>, gen: XdpGenArg) -> Result<SendTest, Error> {
    match engine {
        Engine::Uring if iface.is_some() => Err(Error::usage("--iface applies to --engine xdp")),
        Engine::Uring if gen != XdpGenArg::Xsk => Err(Error::usage("--gen applies to --engine xdp")),
        Engine::Uring => Ok(Box::new(run_send_live)),
        Engine::Xdp => {
            let gen = match gen {
                XdpGenArg::Xsk => XdpGen::Xsk,
                XdpGenArg::Live => XdpGen::Live,
            };
            let xdp = XdpOptions { iface, program_mode: None, gen, count: XdpCount::Sockets };
            Ok(Box::new(move |opts: &SendOptions, observer| run_send_xdp(opts, &xdp, observer)))
        }
    }
}

/// `--iperf2` talks to iperf2 without uringbench's control channel, which the AF_XDP engine
/// uses to agree on ports and return the receiver's figures.
pub fn refuse_iperf2(engine: Engine, iperf2: bool) -> Result<(), Error> {
    if iperf2 && engine == Engine::Xdp {
        return Err(Error::usage(
            "--engine xdp works with uringbench at the other end, not with --iperf2 (use --engine uring there)",
        ));
    }
    Ok(())
}
