//! `send --iperf3`: uringbench against an unmodified iperf3 server. Turns the command line
//! into the engine's options (shared with `--iperf2`: [`peer_send_options`]) and prints what
//! comes back.

use super::iperf2_mode::{peer_send_options, print_report};
use super::SendArgs;
use uringbench::{iperf3_send, Error, FastPaths, StopToken, IPERF3_PORT};

/// `uringbench send --iperf3`: our sender against `iperf3 -s`.
pub fn send(args: &SendArgs, fast: FastPaths, stop: StopToken) -> Result<u8, Error> {
    let (mut opts, format) = peer_send_options(args, fast, stop, "--iperf3", IPERF3_PORT)?;
    // iperf3 has --cport too: the data connections leave from PORT, PORT + 1, ...
    opts.local.data_port = args.cport;
    let report = iperf3_send(&opts)?;
    print_report(format, report.to_json(), report.render_text(), report.complete(), report.first_error())
}
