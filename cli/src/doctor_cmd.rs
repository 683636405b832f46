//! `uringbench doctor`: runs the engine's host and path checks and prints them.

use crate::args::{DoctorArgs, DoctorFormat};
use crate::{plan::port_or_default, sink::Sink};
use std::io::IsTerminal;
use uringbench::{run_doctor, DoctorOptions, Error};

pub fn doctor(args: DoctorArgs) -> Result<u8, Error> {
    let opts = DoctorOptions {
        target: args.target,
        port: port_or_default(args.port, crate::args::Peer::Uringbench),
        iface: args.iface,
        bandwidth_bps: args.bandwidth,
    };
    let report = run_doctor(&opts)?;
    let out = Sink::stdout();
    if args.json || args.format == DoctorFormat::Json {
        out.json_doc(&report.to_json())?;
    } else {
        let color = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
        out.text(&report.render_text(color));
    }
    Ok(report.exit_code())
}
