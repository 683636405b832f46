//! `recv --iperf3` serving `iperf3 -c -u`, in any direction: after CREATE_STREAMS the client
//! "connects" each UDP stream with a 4-byte datagram to our port, whoever will send on it (its
//! own first, then with `-R`/`--bidir` the ones we send on); we take them one at a time, as
//! `iperf3 -s` does, on a socket bound to the control connection's address and port
//! (SO_REUSEPORT, so each stream's socket, once connected to its client port, gets that
//! stream's datagrams), and answer each. The UDP receive loop counts the client's datagrams
//! reading iperf3's header; the UDP sending loop sends ours with that header, paced by the
//! client's `-b`, until [`super::WINDOW_MARGIN`] before the client's planned end. iperf3 marks
//! no end: the receive loop runs to the planned end plus a grace, while TEST_END and the
//! client's results come on the control connection. Our results give per receiving stream
//! the bytes received, the datagrams lost (gaps less late arrivals), the highest sequence
//! number seen and the jitter, which the client prints as its receiver's; per sending stream
//! the bytes and the highest sequence number we sent, which it prints as its sender's.

use super::super::control::Control;
use super::super::our_results;
use super::super::udp::{by_sender, with_received_figures, with_sent_figures};
use super::{
    await_end, facing, sent_by, test_report, test_spec, unix_now_ms, with_output, Iperf3TestSummary, TestContext,
    STEP_TIMEOUT,
};
use crate::base::spec::Proto;
use crate::compat::udp::{self as compat_udp, UdpWire};
use crate::metrics::data_path::DataPath;
use crate::runtime::placement::plan;
use crate::sys::sockopt;
use crate::wire::iperf3::{stream_id, Params, State, UDP_CONNECT_MSG, UDP_CONNECT_REPLY};
use crate::wire::udp_payload::DatagramHeader;
use crate::workload::udp_stream::{prepare_receiver, receive_udp, UdpHalves};
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
    let count = params.connections();
    let mut sockets = Vec::with_capacity(count as usize);
    let mut next = Some(listener);
    for i in 0..count {
        let more = i + 1 < count;
        let stream = match next.take() {
            Some(listener) => accept_stream(ctx, ctl, listener, deadline, more),
            None => Err(io::Error::other("no socket for it")),
        };
        let (socket, after) = stream.map_err(|e| format!("UDP stream {} of {count}: {e}", i + 1))?;
        sockets.push((i, socket));
        next = after;
    }
    summary.data_peers = sockets.iter().filter_map(|(_, s)| s.peer_addr().ok()).map(crate::compat::shown).collect();
    let spec = test_spec(params, Proto::Udp);
    let n = params.parallel;
    // The client's sending streams connect first, then (-R, --bidir) the ones we send on.
    let (rx, tx) = by_sender(sockets, n, params.reverse, params.bidirectional);
    let tx_first_id = if params.bidirectional { n as usize } else { 0 };
    for (_, socket) in &rx {
        prepare_receiver(socket, &spec).map_err(|e| e.to_string())?;
    }
    if params.dont_fragment {
        for (_, socket) in &tx {
            compat_udp::dont_fragment(socket)
                .map_err(|e| format!("setting IP don't-fragment (--dont-fragment): {e}"))?;
        }
    }
    let placement =
        plan(spec.queues, &ctx.cpus, ctx.opts.busy_poll, false, false, &ctx.opts.fast).map_err(|e| e.to_string())?;
    let halves =
        UdpHalves { spec: &spec, placement: &placement, iface: facing(&ctl.stream), serving: false, queues: None };
    let live = ctx.started(&spec, params, &ctl.stream, &placement);
    let wide = params.udp_counters_64bit;
    let header = DatagramHeader::Iperf3 { wide };
    summary.started_unix_ms = Some(unix_now_ms());
    ctl.send_state(State::TestStart)?;
    ctl.send_state(State::TestRunning)?;
    let t0 = Instant::now();
    let (received, sent, client) = std::thread::scope(|s| {
        let receiving = (!rx.is_empty()).then(|| s.spawn(|| receive_udp(&halves, rx, t0, &live, header)));
        // Our sending ends [`super::WINDOW_MARGIN`] before the client's clock ends the test,
        // so that it has read all we sent when it says TEST_END.
        let sending =
            (!tx.is_empty()).then(|| {
                s.spawn(|| {
                    let sockets = tx.into_iter().map(|(_, s)| s).collect();
                    let wire = UdpWire { header, fin: None, serving: true };
                    compat_udp::send_udp(&spec, sockets, &placement, None, &live, wire, |send| {
                        DataPath::Iperf3UdpSend { send, len: spec.len, wide_counters: wide }
                    })
                    .map(|sent| (sent.side, sent.flows, sent.gso))
                })
            });
        let client = await_end(ctl, t0 + ctx.opts.max_time + STEP_TIMEOUT, &live);
        summary.seconds = t0.elapsed().as_secs_f64();
        if let Err(e) = &client {
            // No one reads what we would still send.
            live.end(e.clone());
        }
        let panicked = || crate::base::error::Error::peer("a half of the test panicked");
        let received = receiving.map(|h| h.join().unwrap_or_else(|_| Err(panicked())));
        let sent = sending.map(|h| h.join().unwrap_or_else(|_| Err(panicked())));
        (received.transpose(), sent.transpose(), client)
    });
    let (received, sent) = (received.map_err(|e| e.to_string())?, sent.map_err(|e| e.to_string())?);
    let client = client?;
    summary.bytes = received.as_ref().map_or(0, |(side, _)| side.total_bytes());
    summary.client_sent = received.as_ref().map(|_| sent_by(&client, n as usize, 0));
    summary.sent = sent.as_ref().map(|(side, ..)| side.total_bytes());
    // What our loops did with GSO and GRO, whatever the client's --gsro asked (they use them
    // wherever the kernel takes them).
    summary.gro =
        received.as_ref().map(|(side, _)| matches!(side.data_path, Some(DataPath::UdpReceive { gro: true, .. })));
    summary.gso = sent.as_ref().map(|(.., gso)| *gso);
    if sent.is_some() {
        let theirs = (tx_first_id..tx_first_id + n as usize).filter_map(|i| client.stream(stream_id(i)));
        let (bytes, lost) = theirs.fold((0, 0), |(b, l), s| (b + s.bytes, l + s.errors));
        summary.client_received = Some(bytes);
        summary.client_lost = Some(lost);
    }
    for side in received.iter().map(|r| &r.0).chain(sent.iter().map(|s| &s.0)) {
        summary.errors.extend(side.errors.iter().cloned());
    }
    let sides = [(received.as_ref().map(|r| &r.0), 0), (sent.as_ref().map(|s| &s.0), tx_first_id)];
    let mut ours = our_results(&spec, sides, Some(summary.seconds));
    with_received_figures(&mut ours, received.as_ref().map_or(&[][..], |r| &r.1), 0);
    with_sent_figures(&mut ours, sent.as_ref().map_or(&[][..], |s| &s.1), tx_first_id);
    let sides = [received.map(|r| r.0), sent.map(|s| s.0)];
    summary.report = test_report(&spec, params, &ctl.stream, sides, &client, &live);
    with_output(ctx, params, summary, &mut ours);
    ctl.send_json(&ours.to_json())
}

/// Takes the next stream: its connect datagram on `socket`, which is then connected to the
/// client's port; with `more` to come, the next stream's socket is bound before we answer
/// (the client sends its next connect datagram on our answer).
fn accept_stream(
    ctx: &TestContext,
    ctl: &Control,
    socket: UdpSocket,
    deadline: Instant,
    more: bool,
) -> io::Result<(UdpSocket, Option<UdpSocket>)> {
    let mut buf = [0u8; 64];
    // A stream belongs to the control connection's peer: a connect datagram from any other
    // address (a forged source) would make us send the test's data where no one asked.
    let client = ctl.stream.peer_addr()?.ip().to_canonical();
    let (n, peer) = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "no connect datagram in time"));
        }
        socket.set_read_timeout(Some(left.max(Duration::from_millis(1))))?;
        match socket.recv_from(&mut buf) {
            // A datagram that is not the connect message (a stray, a late one) is skipped.
            Ok((n, peer)) if buf[..n] == UDP_CONNECT_MSG && peer.ip().to_canonical() == client => break (n, peer),
            Ok((n, peer)) => {
                if buf[..n] == UDP_CONNECT_MSG {
                    let reason = format!("a stream's connect datagram not from the test's client {client}: ignored");
                    ctx.refused(Proto::Udp, peer, reason);
                }
                continue;
            }
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
