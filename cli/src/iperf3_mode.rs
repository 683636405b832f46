//! `send --iperf3` and `recv --iperf3`: uringbench against an unmodified iperf3, one side at a
//! time; and `send --ntttcp` / `recv --ntttcp`, NTttcp's no-sync mode. Turns the command line
//! into the engine's options (shared with `--iperf2`: [`peer_send_options`],
//! [`peer_recv_options`]) and prints what comes back.

use super::iperf2_mode::{peer_recv_options, peer_send_options, print_report};
use super::{RecvArgs, RsaPaddingArg, SendArgs};
use crate::peer_out::{peer_events, PeerOut};
use uringbench::{
    iperf3_bind, iperf3_send_asking, iperf3_serve, ntttcp_bind, ntttcp_bind_udp, ntttcp_send, ntttcp_serve,
    ntttcp_serve_udp, Error, FastPaths, Iperf3Asks, Iperf3ClientAuth, Iperf3RsaPadding, Iperf3ServerAuth,
    Iperf3ServerOutput, Iperf3TestSummary, NtttcpTestSummary, NtttcpWindow, StopToken, IPERF3_PORT,
};

/// `uringbench send --iperf3`: our sender against `iperf3 -s`.
pub fn send(args: &SendArgs, fast: FastPaths, stop: StopToken) -> Result<u8, Error> {
    let (mut opts, format) = peer_send_options(args, fast, stop, "--iperf3", IPERF3_PORT)?;
    // iperf3 has --cport too: the data connections leave from PORT, PORT + 1, ...
    opts.local.data_port = args.cport;
    let auth = client_auth(args)?;
    let asks = Iperf3Asks { gsro: args.gsro, server_output: args.get_server_output, dont_fragment: args.dont_fragment };
    let report = iperf3_send_asking(&opts, auth.as_ref(), asks)?;
    print_report(format, &report, report.complete(), report.first_error())
}

/// `--username` with `--rsa-public-key-path`: the credentials, the password from
/// IPERF3_PASSWORD as iperf3 takes it (never from the command line), else typed on the terminal.
fn client_auth(args: &SendArgs) -> Result<Option<Iperf3ClientAuth>, Error> {
    let (Some(user), Some(key)) = (&args.username, &args.rsa_public_key_path) else { return Ok(None) };
    let password = match std::env::var("IPERF3_PASSWORD") {
        Ok(p) => p,
        Err(std::env::VarError::NotUnicode(_)) => return Err(Error::usage("IPERF3_PASSWORD is not UTF-8 text")),
        Err(std::env::VarError::NotPresent) => {
            rpassword::prompt_password(format!("Password for {user}: ")).map_err(|e| {
                Error::usage(format!(
                    "--username {user}: set the password in IPERF3_PASSWORD (no terminal to ask it on: {e})"
                ))
            })?
        }
    };
    let padding = match args.rsa_padding {
        RsaPaddingArg::Pkcs1 => Iperf3RsaPadding::Pkcs1,
        RsaPaddingArg::Oaep => Iperf3RsaPadding::Oaep,
    };
    Iperf3ClientAuth::load(user, &password, key, padding).map(Some)
}

/// `uringbench recv --iperf3`: serves `iperf3 -c` clients, one test at a time.
pub fn recv(args: &RecvArgs, fast: FastPaths, stop: StopToken) -> Result<u8, Error> {
    let opts = peer_recv_options(args, fast, stop, "--iperf3", IPERF3_PORT)?;
    // Keys and users are read before anything listens: a bad file is a usage error.
    let auth = match (&args.rsa_private_key_path, &args.authorized_users_path) {
        (Some(key), Some(users)) => Some(Iperf3ServerAuth::load(key, users, args.time_skew_threshold)?),
        _ => None,
    };
    let listener = iperf3_bind(&opts)?;
    let out = PeerOut::of(args, &opts.stop);
    // As `iperf3 -s` decides: a receiver writing JSON gives a --get-server-output client its
    // document, one writing text its line (the client's own -J is not on the wire).
    let output = Iperf3ServerOutput {
        text: Iperf3TestSummary::render_line,
        json: out.writes_json().then_some(Iperf3TestSummary::server_document as _),
    };
    let events = peer_events::<Iperf3TestSummary>(out);
    let ok = iperf3_serve(opts, listener, events, output, auth)?;
    Ok(if ok { 0 } else { 1 })
}

/// `uringbench send --ntttcp`: our sender to NTttcp receivers in no-sync mode.
pub fn send_ntttcp(args: &SendArgs, fast: FastPaths, stop: StopToken) -> Result<u8, Error> {
    let (mut opts, format) = peer_send_options(args, fast, stop, "--ntttcp", args.ntttcp_port)?;
    opts.port = args.ntttcp_port;
    opts.local.data_port = args.cport;
    let report = ntttcp_send(&opts)?;
    print_report(format, &report, report.complete(), report.first_error())
}

/// `uringbench recv --ntttcp`: counts what NTttcp senders in no-sync mode send.
pub fn recv_ntttcp(args: &RecvArgs, fast: FastPaths, stop: StopToken) -> Result<u8, Error> {
    let mut opts = peer_recv_options(args, fast, stop, "--ntttcp", args.ntttcp_port)?;
    opts.port = args.ntttcp_port;
    let events = peer_events::<NtttcpTestSummary>(PeerOut::of(args, &opts.stop));
    let ok = if args.udp {
        let window = NtttcpWindow { warmup: args.warmup, time: args.time, cooldown: args.cooldown };
        let sockets = ntttcp_bind_udp(&opts, args.ports)?;
        ntttcp_serve_udp(opts, sockets, window, events)?
    } else {
        let listeners = ntttcp_bind(&opts, args.ports)?;
        ntttcp_serve(opts, listeners, events)?
    };
    Ok(if ok { 0 } else { 1 })
}
