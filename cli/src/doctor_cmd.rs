//! `uringbench doctor`: runs the engine's host and path checks and prints them.

use crate::args::{DoctorArgs, DoctorFormat};
use crate::{port_or_default, print_json};
use std::io::{IsTerminal, Write};
use uringbench::{run_doctor, DoctorOptions, Error};

pub fn doctor(args: DoctorArgs) -> Result<u8, Error> {
    let opts = DoctorOptions {
        target: args.target,
        port: port_or_default(args.port, false),
        iface: args.iface,
        bandwidth_bps: args.bandwidth,
    };
    let report = run_doctor(&opts)?;
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
