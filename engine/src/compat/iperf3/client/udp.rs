//! `send --iperf3 -u`: our UDP sender against an unmodified `iperf3 -s`.
//!
//! After CREATE_STREAMS each stream is "connected" as iperf3 does it: a UDP socket connected
//! to the server's port sends the 4-byte [`UDP_CONNECT_MSG`], and the server, which listens
//! for one stream at a time, answers on the socket it connected back to us. Once every stream
//! is answered and the test runs, the stream workload's UDP loop sends datagrams with iperf3's
//! header (send time, then a 32- or 64-bit sequence number from 1), paced by `-b`. iperf3 has
//! no end marker for UDP: the server counts until it reads TEST_END, so we send it
//! [`READ_GRACE`] after our last datagram. Its results then give, per stream, the bytes it
//! received, its loss count (gaps in the sequence, less late arrivals) and its jitter.

use super::super::control::Control;
use super::{exchange, expect, results_side, Iperf3Report, READ_GRACE};
use crate::base::error::{Error, Result};
use crate::base::spec::TestSpec;
use crate::compat::udp::{self as compat_udp, UdpWire};
use crate::compat::{stream_report, Intervals};
use crate::metrics::data_path::DataPath;
use crate::metrics::figures::{Role, SideReport, UdpFigures};
use crate::runtime::placement::Placement;
use crate::session::sender::SendOptions;
use crate::sys::netpath::PathProbe;
use crate::sys::sockopt::LocalEnd;
use crate::transport::udp::send::UdpFlowSent;
use crate::wire::iperf3::{
    stream_id, Params, Results, State, StreamResult, LEGACY_UDP_CONNECT_REPLY, UDP_CONNECT_MSG, UDP_CONNECT_REPLY,
};
use crate::wire::udp_payload::DatagramHeader;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

/// How long the server may take to answer a stream's connect datagram.
const CONNECT_REPLY_WAIT: Duration = Duration::from_secs(5);

/// A UDP test set up to the server's CREATE_STREAMS.
pub(super) struct UdpTest<'a> {
    pub opts: &'a SendOptions,
    pub spec: TestSpec,
    pub params: Params,
    pub target: SocketAddr,
    pub placement: Placement,
    pub path: PathProbe,
    pub live: Intervals,
}

/// Connects the streams, sends until the end, then TEST_END and the results exchange.
pub(super) fn send_udp(test: UdpTest, mut ctl: Control) -> Result<Iperf3Report> {
    let UdpTest { opts, spec, params, target, placement, path, live } = test;
    let peer = |e: String| Error::peer(format!("iperf3 server at {target}: {e}"));
    let mut sockets = Vec::with_capacity(spec.flows() as usize);
    for flow in 0..spec.flows() {
        let local = opts.local.for_flow(flow).map_err(Error::usage)?;
        let socket = connect_stream(target, &local)
            .map_err(|e| peer(format!("connecting UDP stream {}: {e}", stream_id(flow as usize))))?;
        sockets.push(socket);
    }
    expect(&mut ctl, State::TestStart).map_err(peer)?;
    expect(&mut ctl, State::TestRunning).map_err(peer)?;
    let wide = params.udp_counters_64bit;
    let wire = UdpWire { header: DatagramHeader::Iperf3 { wide }, fin: None };
    let (mut sender, sent) = compat_udp::send_udp(&spec, sockets, &placement, path.interface(), &live, wire, |send| {
        DataPath::Iperf3UdpSend { send, len: spec.len, wide_counters: wide }
    })?;
    // The server counts what it has read when TEST_END reaches it: let it read the last ones.
    std::thread::sleep(READ_GRACE);
    let ours = our_results(&spec, &sender, &sent);
    let (server, error) = match ctl.send_state(State::TestEnd).and_then(|()| exchange(&mut ctl, &ours)) {
        Ok(results) => (Some(results), None),
        Err(e) => (None, Some(format!("iperf3 server at {target}: {e}"))),
    };
    sender.add_path_notes([format!(
        "iperf3 UDP streams (connect datagram each way), TEST_END {} ms after the last datagram",
        READ_GRACE.as_millis()
    )]);
    let receiver = server.as_ref().map(|r| server_side(&spec, r, &sent));
    let stream = stream_report(spec, target, sender, receiver, error, &path, &live);
    Ok(Iperf3Report { stream, params, server, notes: Vec::new() })
}

/// One UDP stream: a socket from `local`, connected to the server, whose connect datagram
/// the server answered.
fn connect_stream(target: SocketAddr, local: &LocalEnd) -> io::Result<UdpSocket> {
    let socket = compat_udp::connect_udp(target, local)?;
    socket.send(&UDP_CONNECT_MSG)?;
    socket.set_read_timeout(Some(CONNECT_REPLY_WAIT))?;
    let mut reply = [0u8; 8];
    let n = socket.recv(&mut reply).map_err(|e| match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => io::Error::new(
            io::ErrorKind::TimedOut,
            format!("no answer to the connect datagram within {} s", CONNECT_REPLY_WAIT.as_secs()),
        ),
        _ => e,
    })?;
    if n != 4 || (reply[..4] != UDP_CONNECT_REPLY && reply[..4] != LEGACY_UDP_CONNECT_REPLY) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("the answer {:02x?} is not iperf3's", &reply[..n]),
        ));
    }
    socket.set_read_timeout(None)?;
    Ok(socket)
}

/// Our results as the server shows them: per stream the bytes and datagrams we sent (after
/// the omitted start, as iperf3 counts), our threads' CPU.
fn our_results(spec: &TestSpec, sender: &SideReport, sent: &[UdpFlowSent]) -> Results {
    let secs = sender.window_seconds;
    let (user, system) =
        sender.cpu.threads.iter().fold((0.0, 0.0), |(u, s), t| (u + t.user_seconds, s + t.system_seconds));
    let pct = |x: f64| if secs > 0.0 { 100.0 * x / secs } else { 0.0 };
    let streams = sent
        .iter()
        .enumerate()
        .map(|(i, f)| StreamResult {
            id: stream_id(i),
            bytes: if spec.warmup_ms == 0 {
                f.bytes
            } else {
                sender.queues.get(f.queue as usize).map_or(0, |q| q.bytes / u64::from(q.flows.max(1)))
            },
            packets: f.datagrams,
            end_s: secs,
            ..StreamResult::default()
        })
        .collect();
    Results {
        cpu_util: [pct(user + system), pct(user), pct(system)],
        sender_has_retransmits: Some(false),
        congestion_used: None,
        streams,
    }
}

/// The far side from the server's results: per stream what it received, its losses (gaps
/// in the sequence numbers, less the late arrivals that filled them) and jitter; the
/// datagrams it was sent are ours. A stream missing from the results is an error.
fn server_side(spec: &TestSpec, results: &Results, sent: &[UdpFlowSent]) -> SideReport {
    let mut bytes = Vec::new();
    let mut seconds: f64 = 0.0;
    let mut udp = UdpFigures::default();
    let mut jitter = Vec::new();
    for (i, f) in sent.iter().enumerate() {
        let Some(s) = results.stream(stream_id(i)) else { continue };
        bytes.push((f.queue, s.bytes));
        seconds = seconds.max(s.end_s - s.start_s);
        udp.lost += s.errors;
        udp.expected += f.datagrams;
        jitter.push(s.jitter_s * 1e6);
    }
    udp.datagrams = udp.expected.saturating_sub(udp.lost);
    udp.jitter_us = if jitter.is_empty() { 0.0 } else { jitter.iter().sum::<f64>() / jitter.len() as f64 };
    let mut side = results_side(spec, results, Role::Receiver, (&bytes, seconds), sent.len() - bytes.len());
    side.udp = Some(udp);
    side
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::spec::Proto;

    #[test]
    fn server_results_become_the_udp_receiver_side() {
        let spec = TestSpec { proto: Proto::Udp, queues: 2, len: 1000, ..TestSpec::default() };
        let flow = |queue, datagrams| UdpFlowSent { queue, datagrams, bytes: datagrams * 1000, ..Default::default() };
        let sent = [flow(0, 100), flow(1, 50)];
        let stream = |id, bytes, errors, jitter_s| StreamResult {
            id,
            bytes,
            errors,
            jitter_s,
            end_s: 2.0,
            ..Default::default()
        };
        let results =
            Results { streams: vec![stream(1, 98_000, 2, 0.0001), stream(3, 50_000, 0, 0.0003)], ..Default::default() };
        let side = server_side(&spec, &results, &sent);
        let udp = side.udp.as_ref().unwrap();
        assert!(side.complete);
        assert_eq!((side.total_bytes(), udp.expected, udp.lost, udp.datagrams), (148_000, 150, 2, 148));
        assert!((udp.jitter_us - 200.0).abs() < 1e-6, "the mean of the streams' jitter: {}", udp.jitter_us);
        let partial =
            server_side(&spec, &Results { streams: vec![stream(1, 1000, 0, 0.0)], ..Default::default() }, &sent);
        assert!(!partial.complete && partial.errors[0].contains("1 of our 2"));
    }
}
