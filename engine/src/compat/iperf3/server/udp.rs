//! `recv --iperf3` serving `iperf3 -c -u`: after CREATE_STREAMS the client "connects" each UDP
//! stream with a 4-byte datagram to our port; we take them one at a time, as `iperf3 -s`
//! does, on a socket bound to the control connection's address and port (SO_REUSEPORT, so
//! each stream's socket, once connected to its client port, gets that stream's datagrams),
//! answer each, and count the datagrams with the UDP receive loop reading iperf3's header.
//! iperf3 marks no end: the loop runs to the planned end plus a grace, while TEST_END and
//! the client's results come on the control connection. Our results give per stream the
//! bytes received, the datagrams lost (gaps less late arrivals), the highest sequence number
//! seen and the jitter, which is what the client prints as its receiver's.

use super::super::control::Control;
use super::super::our_results;
use super::{await_end, test_spec, Iperf3TestSummary, TestContext, STEP_TIMEOUT};
use crate::base::spec::Proto;
use crate::compat::Intervals;
use crate::runtime::placement::plan;
use crate::sys::sockopt;
use crate::transport::udp::recv::UdpFlowReceived;
use crate::wire::iperf3::{stream_id, Params, Results, State, UDP_CONNECT_MSG, UDP_CONNECT_REPLY};
use crate::wire::udp_payload::DatagramHeader;
use crate::workload::udp_stream::{receive_udp, UdpHalves};
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

/// The socket the first stream's connect datagram comes to: bound to the control
/// connection's address and port. It must exist before CREATE_STREAMS is sent.
pub(super) fn udp_listener(ctl: &Control) -> io::Result<UdpSocket> {
    let local = ctl.stream.local_addr()?;
    let local = SocketAddr::new(local.ip().to_canonical(), local.port());
    let fd = sockopt::socket_for(&local, libc::SOCK_DGRAM)?;
    socket2::SockRef::from(&fd).set_reuse_port(true)?;
    sockopt::bind(&fd, &local)?;
    Ok(UdpSocket::from(fd))
}

/// Serves a UDP test from CREATE_STREAMS (sent, with `listener` bound before it) to our
/// results; `Err` says why it failed.
pub(super) fn serve_udp(
    ctx: &TestContext,
    ctl: &mut Control,
    params: &Params,
    listener: UdpSocket,
    summary: &mut Iperf3TestSummary,
) -> Result<(), String> {
    let deadline = Instant::now() + STEP_TIMEOUT;
    let mut sockets = Vec::with_capacity(params.parallel as usize);
    let mut next = Some(listener);
    for i in 0..params.parallel {
        let more = i + 1 < params.parallel;
        let stream = match next.take() {
            Some(listener) => accept_stream(ctl, listener, deadline, more),
            None => Err(io::Error::other("no socket for it")),
        };
        let (socket, after) = stream.map_err(|e| format!("UDP stream {} of {}: {e}", i + 1, params.parallel))?;
        sockets.push((i, socket));
        next = after;
    }
    let spec = test_spec(params, Proto::Udp);
    let placement =
        plan(spec.queues, &ctx.cpus, ctx.opts.busy_poll, false, false, &ctx.opts.fast).map_err(|e| e.to_string())?;
    let halves = UdpHalves { spec: &spec, placement: &placement, iface: None, serving: false };
    let live = Intervals::new(&ctx.opts.stop);
    let header = DatagramHeader::Iperf3 { wide: params.udp_counters_64bit };
    ctl.send_state(State::TestStart)?;
    ctl.send_state(State::TestRunning)?;
    let t0 = Instant::now();
    let (received, client) = std::thread::scope(|s| {
        let receiving = s.spawn(|| receive_udp(&halves, sockets, &live, header));
        let client = await_end(ctl, t0 + ctx.opts.max_time + STEP_TIMEOUT);
        summary.seconds = t0.elapsed().as_secs_f64();
        (receiving.join().unwrap_or_else(|_| Err(crate::Error::peer("the receiving half panicked"))), client)
    });
    let (side, flows) = received.map_err(|e| e.to_string())?;
    let client = client?;
    summary.bytes = side.total_bytes();
    summary.client_sent = Some(client.streams.iter().map(|s| s.bytes).sum());
    summary.errors.extend(side.errors.iter().cloned());
    let mut ours = our_results(&spec, [(Some(&side), 0), (None, 0)]);
    with_datagram_figures(&mut ours, &flows);
    ctl.send_json(&ours.to_json())
}

/// Takes the next stream: its connect datagram on `socket`, which is then connected to the
/// client's port; with `more` to come, the next stream's socket is bound before we answer
/// (the client sends its next connect datagram on our answer).
fn accept_stream(
    ctl: &Control,
    socket: UdpSocket,
    deadline: Instant,
    more: bool,
) -> io::Result<(UdpSocket, Option<UdpSocket>)> {
    let mut buf = [0u8; 64];
    let (n, peer) = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "no connect datagram in time"));
        }
        socket.set_read_timeout(Some(left.max(Duration::from_millis(1))))?;
        match socket.recv_from(&mut buf) {
            // A datagram that is not the connect message (a stray, a late one) is skipped.
            Ok((n, peer)) if buf[..n] == UDP_CONNECT_MSG => break (n, peer),
            Ok(_) => continue,
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => continue,
            Err(e) => return Err(e),
        }
    };
    debug_assert_eq!(n, UDP_CONNECT_MSG.len());
    socket.connect(SocketAddr::new(peer.ip().to_canonical(), peer.port()))?;
    let next = if more { Some(udp_listener(ctl)?) } else { None };
    socket.send(&UDP_CONNECT_REPLY)?;
    socket.set_read_timeout(None)?;
    Ok((socket, next))
}

/// Puts each flow's datagram accounting in our results' streams (flow i is stream i).
fn with_datagram_figures(results: &mut Results, flows: &[UdpFlowReceived]) {
    for flow in flows {
        if let Some(s) = results.streams.iter_mut().find(|s| s.id == stream_id(flow.queue as usize)) {
            s.bytes = flow.stats.bytes;
            s.errors = flow.stats.lost;
            s.packets = flow.stats.expected;
            s.jitter_s = flow.stats.jitter_us / 1e6;
        }
    }
}
