//! `send --iperf3 -u`: our UDP ends against an unmodified `iperf3 -s`, in any direction.
//!
//! After CREATE_STREAMS each stream is "connected" as iperf3 does it: a UDP socket connected
//! to the server's port sends the 4-byte [`UDP_CONNECT_MSG`], and the server, which listens
//! for one stream at a time, answers on the socket it connected back to us. Every stream is
//! connected this way whoever sends on it: ours first, then (`-R`, `--bidir`) the server's.
//! Once the test runs, the stream workload's UDP loop sends datagrams with iperf3's header
//! (send time, then a 32- or 64-bit sequence number from 1), paced by `-b`, and its receive
//! loop reads the server's, counting gaps and jitter from that header. iperf3 has no end
//! marker for UDP: the server counts, and sends, until it reads TEST_END, so we send it
//! [`READ_GRACE`] after our last datagram (or the planned end). Its results then give, per
//! stream, what it received (bytes, its loss count: gaps in the sequence less late arrivals,
//! jitter) or what it sent (bytes, its highest sequence number).

use super::super::control::Control;
use super::super::our_results;
use super::super::udp::{by_sender, with_received_figures, with_sent_figures};
use super::{
    both_ways, exchange, expect, no_far_sender, results_side, server_side as far_side_of, Iperf3Report, READ_GRACE,
};
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
    stream_id, Params, Results, State, LEGACY_UDP_CONNECT_REPLY, UDP_CONNECT_MSG, UDP_CONNECT_REPLY,
};
use crate::wire::udp_payload::DatagramHeader;
use crate::workload::udp_stream::{prepare_receiver, receive_udp, UdpHalves};
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

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

/// Connects the streams, then sends on ours and receives on the server's until the end,
/// then TEST_END and the results exchange.
pub(super) fn send_udp(test: UdpTest, mut ctl: Control) -> Result<Iperf3Report> {
    let UdpTest { opts, spec, params, target, placement, path, live } = test;
    let peer = |e: String| Error::peer(format!("iperf3 server at {target}: {e}"));
    let mut sockets = Vec::with_capacity(spec.data_connections() as usize);
    for flow in 0..spec.data_connections() {
        let local = opts.local.for_flow(flow).map_err(Error::usage)?;
        let socket = connect_stream(target, &local)
            .map_err(|e| peer(format!("connecting UDP stream {}: {e}", stream_id(flow as usize))))?;
        sockets.push((flow, socket));
    }
    let n = spec.flows();
    let (tx, rx) = by_sender(sockets, n, params.reverse, params.bidirectional);
    for (_, socket) in &rx {
        prepare_receiver(socket, &spec)?;
    }
    if params.dont_fragment {
        for (_, socket) in &tx {
            compat_udp::dont_fragment(socket)
                .map_err(|e| Error::io("setting IP don't-fragment (--dont-fragment)", e))?;
        }
    }
    let rx_first_id = if params.bidirectional { n as usize } else { 0 };
    expect(&mut ctl, State::TestStart).map_err(peer)?;
    expect(&mut ctl, State::TestRunning).map_err(peer)?;
    let wide = params.udp_counters_64bit;
    let header = DatagramHeader::Iperf3 { wide };
    let halves = UdpHalves {
        spec: &spec,
        placement: &placement,
        iface: path.interface().map(str::to_string),
        serving: false,
        queues: None,
    };
    let t0 = Instant::now();
    let (sent, received, ended) = std::thread::scope(|s| {
        let receiving = (!rx.is_empty()).then(|| s.spawn(|| receive_udp(&halves, rx, t0, &live, header)));
        let sent = (!tx.is_empty()).then(|| {
            let sockets = tx.into_iter().map(|(_, s)| s).collect();
            let wire = UdpWire { header, fin: None, serving: false };
            compat_udp::send_udp(&spec, sockets, &placement, path.interface(), &live, wire, |send| {
                DataPath::Iperf3UdpSend { send, len: spec.len, wide_counters: wide }
            })
            .map(|sent| (sent.side, sent.flows))
        });
        // Only the server sends: the end is still ours to say, at the planned end.
        while sent.is_none() && Instant::now() < t0 + spec.total() && !opts.stop.is_stopped() {
            std::thread::sleep(Duration::from_millis(20));
        }
        // The server counts what it has read when TEST_END reaches it: let it read the last
        // ones. It stops sending on TEST_END; our receiving half reads to its planned end.
        std::thread::sleep(READ_GRACE);
        let ended = ctl.send_state(State::TestEnd);
        let panicked = || Err(Error::peer("the receiving half panicked"));
        (sent, receiving.map(|h| h.join().unwrap_or_else(|_| panicked())), ended)
    });
    let (sent, received) = (sent.transpose()?, received.transpose()?);
    let (sent_flows, received_flows) = (sent.as_ref().map(|s| &s.1[..]), received.as_ref().map(|r| &r.1[..]));
    let mut ours =
        our_results(&spec, [(sent.as_ref().map(|s| &s.0), 0), (received.as_ref().map(|r| &r.0), rx_first_id)], None);
    with_sent_figures(&mut ours, sent_flows.unwrap_or_default(), 0);
    with_received_figures(&mut ours, received_flows.unwrap_or_default(), rx_first_id);
    let (server, error) = match ended.and_then(|()| exchange(&mut ctl, &ours)) {
        Ok(results) => (Some(results), None),
        Err(e) => (None, Some(format!("iperf3 server at {target}: {e}"))),
    };
    let forward = sent.map(|(mut sender, flows)| {
        sender.add_path_notes([format!(
            "iperf3 UDP streams (connect datagram each way), TEST_END {} ms after the last datagram",
            READ_GRACE.as_millis()
        )]);
        let receiver = server.as_ref().map(|r| server_side(&spec, r, &flows));
        stream_report(spec.clone(), target, sender, receiver, error.clone(), &path, &live)
    });
    let reverse = received.map(|(mut receiver, _)| {
        receiver.add_path_notes([
            "iperf3 UDP streams (connect datagram each way) sent by the server until our TEST_END".into(),
        ]);
        let sender = server.as_ref().map_or_else(|| no_far_sender(&spec), |r| far_sender(&spec, r, rx_first_id));
        stream_report(spec.clone(), target, sender, Some(receiver), error.clone(), &path, &live)
    });
    Ok(Iperf3Report { stream: both_ways(forward, reverse)?, params, server, notes: Vec::new() })
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

/// The far end's sending side from its `results`: its streams from `first_id`, the bytes and
/// the datagrams (its highest sequence numbers) it says it sent.
fn far_sender(spec: &TestSpec, results: &Results, first_id: usize) -> SideReport {
    let mut side = far_side_of(spec, results, Role::Sender, first_id);
    let datagrams =
        (0..spec.flows() as usize).filter_map(|f| results.stream(stream_id(first_id + f))).map(|s| s.packets).sum();
    side.udp = Some(UdpFigures { datagrams, ..UdpFigures::default() });
    side
}

/// The far side from the server's results: per stream what it received, its losses (gaps
/// in the sequence numbers, less the late arrivals that filled them) and jitter; the
/// datagrams it was sent are ours. A stream missing from the results is an error.
fn server_side(spec: &TestSpec, results: &Results, sent: &[UdpFlowSent]) -> SideReport {
    let mut bytes = Vec::new();
    let mut seconds: f64 = 0.0;
    let mut udp = UdpFigures::default();
    let mut jitter = Vec::new();
    for f in sent {
        let Some(s) = results.stream(stream_id(f.queue as usize)) else { continue };
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
    use crate::wire::iperf3::StreamResult;

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

    #[test]
    fn the_far_sender_counts_its_datagrams() {
        let spec = TestSpec { proto: Proto::Udp, queues: 2, ..TestSpec::default() };
        let stream = |id, bytes, packets| StreamResult { id, bytes, packets, end_s: 2.0, ..StreamResult::default() };
        let results = Results { streams: vec![stream(1, 1400, 1), stream(3, 2800, 2)], ..Results::default() };
        let side = far_sender(&spec, &results, 0);
        assert_eq!(
            (side.role, side.total_bytes(), side.udp.as_ref().map(|u| u.datagrams)),
            (Role::Sender, 4200, Some(3))
        );
    }
}
