//! `uringbench doctor`: runs the engine's host and path checks and prints them.

use crate::{print_json, rate};
use clap::{Args, ValueEnum};
use std::io::{IsTerminal, Write};
use uringbench::control::DEFAULT_PORT;
use uringbench::doctor::{self, DoctorOptions};
use uringbench::Error;

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
    target: Option<String>,
    /// Control port on the target [default: 5300].
    #[arg(short = 'p', long)]
    port: Option<u16>,
    /// Interface to examine [default: the route to --target, else the default route's].
    #[arg(long)]
    iface: Option<String>,
    /// Bandwidth to size socket buffers for, bits/s (25G, 100G) [default: link speed, cloud cap or 25G].
    #[arg(long, value_parser = rate)]
    bandwidth: Option<u64>,
    #[arg(long, value_enum, default_value_t = DoctorFormat::Text)]
    format: DoctorFormat,
    /// Same as --format json.
    #[arg(short = 'J', long)]
    json: bool,
}

pub fn doctor(args: DoctorArgs) -> Result<u8, Error> {
    let opts = DoctorOptions {
        target: args.target,
        port: args.port.unwrap_or(DEFAULT_PORT),
        iface: args.iface,
        bandwidth_bps: args.bandwidth,
    };
    let report = doctor::run(&opts)?;
    let mut out = std::io::stdout().lock();
    if args.json || args.format == DoctorFormat::Json {
        print_json(&mut out, &report.to_json())?;
    } else {
        let color = out.is_terminal() && std::env::var_os("NO_COLOR").is_none();
        let _ = write!(out, "{}", report.render_text(color));
    }
    let _ = out.flush();
    Ok(report.exit_code())
}
