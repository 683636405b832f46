//! UDP stream over uringbench's own control channel: datagrams carrying a 64-bit sequence
//! number and a send timestamp, sent with GSO batches (or one per send, `--no-gso`) and
//! received with GRO, accounted exactly by the receiver (received, lost, out of order,
//! duplicates, RFC 3550 jitter).
//!
//! Every flow gets a socket of its own at both ends. The receiver's sockets all sit on the
//! control port (SO_REUSEPORT), each connected to one of the sender's source ports, which the
//! sender announces in its hello: one firewall hole, TCP and UDP, for the whole test.

use super::stream::{split_by_direction, SendOptions, SenderSession, END_GRACE};
use crate::base::error::{Error, Result};
use crate::base::spec::{Direction, TestSpec};
use crate::metrics::measure::{sample_window, QueueCounters, SampleSources};
use crate::metrics::seq::SeqStats;
use crate::report::stream::{Role, SideReport, StreamReport, UdpFigures};
use crate::runtime::placement::Placement;
use crate::runtime::threads::{deal_by_queue, QueueThreads};
use crate::session::control::{self, ControlMsg};
use crate::session::live::{Live, Observer, ServerLive};
use crate::sys::sockopt;
use crate::transport::udp::recv::{self as udp_recv, LiveStats, UdpRecvConfig, UdpRecvFlow};
use crate::transport::udp::send::{self as udp_send, FinConfig, UdpSendConfig, UdpSendFlow};
use crate::transport::FlowOutcome;
use crate::uring::ring::WakeBatch;
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Buffers per receive ring: with GRO each holds up to 64 KiB of coalesced datagrams.
const RECV_BUFS_GRO: u16 = 64;
const RECV_BUFS_PLAIN: u16 = 1024;
/// Sends in flight per flow: a few GSO batches keep a socket busy; single datagrams need more.
const INFLIGHT_GSO: u32 = 8;
const INFLIGHT_PLAIN: u32 = 32;

/// Receive buffer asked for on every UDP flow socket. A sleeping receive thread is woken per
/// batch (up to 200 us); at 12 Gbit/s that is 300 KB, more than the 208 KiB default, which
/// dropped 40% of a paced stream on the veth pair.
pub const UDP_RCVBUF: usize = 16 << 20;

/// Raises SO_RCVBUF to `bytes`: SO_RCVBUFFORCE where allowed (CAP_NET_ADMIN), else as far
/// as net.core.rmem_max lets SO_RCVBUF go. Returns the size the kernel granted.
fn grow_rcvbuf(socket: &UdpSocket, bytes: usize) -> usize {
    let s = socket2::SockRef::from(socket);
    // socket2 has no SO_RCVBUFFORCE.
    if sockopt::set_int(socket.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, bytes as libc::c_int).is_err() {
        let _ = s.set_recv_buffer_size(bytes);
    }
    s.recv_buffer_size().unwrap_or(0)
}

/// The sender's flow sockets, bound to the address its control connection left from, with
/// the source ports to announce in the hello.
pub fn flow_sockets(local_ip: IpAddr, count: u32) -> Result<(Vec<UdpSocket>, Vec<u16>)> {
    let sockets: Vec<UdpSocket> = (0..count)
        .map(|_| UdpSocket::bind(SocketAddr::new(local_ip, 0)).map_err(|e| Error::io("binding a UDP flow socket", e)))
        .collect::<Result<_>>()?;
    let ports = sockets.iter().map(|s| s.local_addr().map(|a| a.port()).unwrap_or(0)).collect();
    Ok((sockets, ports))
}

/// Runs a UDP stream test against `recv`, in the direction the spec asks.
pub fn run_send_udp(opts: &SendOptions, observer: Arc<dyn Observer>) -> Result<StreamReport> {
    let spec = &opts.spec;
    let mut session = SenderSession::connect(opts)?;
    let local_ip = session.ctl.local_addr().map_err(|e| Error::io("reading the control socket address", e))?.ip();
    let local_ip = local_ip.to_canonical();
    let (sockets, ports) = flow_sockets(local_ip, spec.data_connections())?;
    let indexed: Vec<(u32, UdpSocket)> = (0..).zip(sockets).collect();
    mark_flows(spec, indexed.iter().map(|(_, s)| s))?;
    let (forward, reverse) = split_by_direction(spec, indexed);
    // Receiving sockets get GRO and their buffer before the far side is told to start.
    for (_, s) in &reverse {
        prepare_receiver(s, spec)?;
    }
    session.negotiate(spec, ports)?;
    let target = SocketAddr::new(session.target_ip, opts.port);
    for (_, s) in forward.iter().chain(&reverse) {
        s.connect(target).map_err(|e| Error::io(format!("connecting a UDP flow to {target}"), e))?;
        // Refuse before the test rather than fragment or fail mid-way: every datagram (and
        // every GSO segment) must fit the path MTU.
        if udp_send::path_mtu(s).is_some_and(|mtu| spec.len + udp_send::ip_udp_overhead(s) > mtu) {
            return Err(Error::usage(udp_send::mtu_message(s, spec.len, spec.gso)));
        }
    }
    session.wait_ready()?;
    let live = session.start_live(spec, observer)?;
    let iface = session.path.interface().map(str::to_string);
    let placement = &session.placement;
    match spec.direction {
        Direction::Forward => {
            let sender = udp_send_side(spec, forward, placement, iface.as_deref(), Instant::now(), &live)?;
            Ok(session.finish(spec, sender, live))
        }
        Direction::Reverse => {
            let receiver = udp_receive_side(spec, reverse, placement, iface.as_deref(), &live)?;
            Ok(session.finish_reverse(spec, receiver, live))
        }
        Direction::Bidir => {
            let (sender, receiver) = std::thread::scope(|scope| {
                let tx =
                    scope.spawn(|| udp_send_side(spec, forward, placement, iface.as_deref(), Instant::now(), &live));
                let rx = udp_receive_side(spec, reverse, placement, iface.as_deref(), &live);
                (tx.join().unwrap_or_else(|_| Err(udp_send::worker_panicked())), rx)
            });
            Ok(session.finish_bidir(spec, sender?, receiver?, live))
        }
    }
}

/// Marks every flow socket with the test's TOS (`-S`, `--dscp`), on either end.
fn mark_flows<'a>(spec: &TestSpec, sockets: impl Iterator<Item = &'a UdpSocket>) -> Result<()> {
    let Some(tos) = spec.tuning.tos else { return Ok(()) };
    for s in sockets {
        let v6 = s.local_addr().map_err(|e| Error::io("reading a UDP flow address", e))?.is_ipv6();
        sockopt::set_tos(&socket2::SockRef::from(s), tos, v6)
            .map_err(|e| Error::io("setting the TOS of a UDP flow", e))?;
    }
    Ok(())
}

/// Turns on GRO (when the test uses GSO) and the large receive buffer.
fn prepare_receiver(socket: &UdpSocket, spec: &TestSpec) -> Result<usize> {
    udp_recv::prepare_socket(socket, spec.gso, false).map_err(|e| Error::io("preparing a UDP flow socket", e))?;
    Ok(grow_rcvbuf(socket, UDP_RCVBUF))
}

/// The sending half over connected UDP sockets: queue threads send until the planned end,
/// then FINs; the sampler measures the window.
fn udp_send_side(
    spec: &TestSpec,
    sockets: Vec<(u32, UdpSocket)>,
    placement: &Placement,
    iface: Option<&str>,
    t0: Instant,
    live: &dyn Live,
) -> Result<SideReport> {
    let halt = Arc::new(AtomicBool::new(false));
    let counters = Arc::new(QueueCounters::new(spec.queues as usize));
    let flows: Vec<(u32, UdpSendFlow)> = sockets
        .into_iter()
        .map(|(i, socket)| {
            let queue = spec.queue_of_flow(i);
            (queue, UdpSendFlow { socket, queue })
        })
        .collect();
    let total_flows = u64::from(spec.flows().max(1));
    let inputs: Vec<(Vec<UdpSendFlow>, UdpSendConfig)> = deal_by_queue(&placement.threads, flows)
        .into_iter()
        .map(|flows| {
            let inflight = if spec.gso { INFLIGHT_GSO } else { INFLIGHT_PLAIN };
            let cfg = UdpSendConfig {
                wait: placement.wait,
                batch: WakeBatch { want: (inflight * flows.len() as u32 / 2).clamp(1, 8), max_delay_us: 200 },
                len: spec.len,
                gso: spec.gso,
                inflight,
                deadline: t0 + spec.total(),
                halt: Some(Arc::clone(&halt)),
                rate_bps: spec.rate_bps * flows.len() as u64 / total_flows,
                max_datagrams: 0,
                drain_limit: Duration::from_secs(2),
                fin: Some(FinConfig::default()),
            };
            (flows, cfg)
        })
        .collect();
    let worker_counters = Arc::clone(&counters);
    let threads = QueueThreads::spawn(&placement.threads, inputs, move |(flows, cfg)| {
        udp_send::run(flows, &worker_counters, &cfg)
    })?;
    let src = SampleSources { counters: &counters, tids: &threads.tids, sockets: &[], iface, udp: &[] };
    let finished = || threads.all_finished() || live.stopped().is_some();
    let window = sample_window(t0, spec.sample_offsets(), &src, &finished, &mut |iv| live.interval(Role::Sender, iv));
    if live.stopped().is_some() {
        // Stopped early: the flows send their FINs now, not after the cool-down.
        halt.store(true, Ordering::Relaxed);
    }
    let plans: Vec<_> = placement.threads.iter().cloned().zip(threads.tids.iter().copied()).collect();
    let results = threads.join()?;

    let sent: Vec<_> = results.iter().flat_map(|r| r.flows.iter()).collect();
    let outcomes: Vec<FlowOutcome> =
        sent.iter().map(|f| FlowOutcome { queue: f.queue, bytes: f.bytes, error: f.error.clone() }).collect();
    let mut sender = SideReport::build(Role::Sender, spec, &window, &outcomes, &plans);
    if let Some(reason) = live.stopped() {
        sender.stopped_early(spec, &reason);
    }
    let path = results.first().map_or_else(String::new, |r| r.path.describe());
    sender.placement = placement.summary.clone();
    sender.path = format!("io_uring UDP {path}, {} B datagrams", spec.len);
    sender.udp = Some(UdpFigures {
        datagrams: sent.iter().map(|f| f.datagrams).sum(),
        refused: sent.iter().map(|f| f.refused).sum(),
        ..UdpFigures::default()
    });
    for note in results.iter().filter_map(|r| r.note.clone()) {
        sender.path.push_str(&format!("; {note}"));
    }
    Ok(sender)
}

/// Creates the receiver's flow sockets: bound to the control connection's local address and
/// port (SO_REUSEPORT), each connected to one of the sender's announced source ports.
pub fn receiver_sockets(ctl: &TcpStream, ports: &[u16]) -> Result<Vec<UdpSocket>> {
    let local = ctl.local_addr().map_err(|e| Error::io("reading the control socket address", e))?;
    let peer = ctl.peer_addr().map_err(|e| Error::io("reading the control peer address", e))?;
    let local = SocketAddr::new(local.ip().to_canonical(), local.port());
    ports.iter().map(|&p| reuseport_socket(local, SocketAddr::new(peer.ip().to_canonical(), p))).collect()
}

fn reuseport_socket(local: SocketAddr, peer: SocketAddr) -> Result<UdpSocket> {
    let fd = sockopt::socket_for(&local, libc::SOCK_DGRAM).map_err(|e| Error::io("creating a UDP flow socket", e))?;
    socket2::SockRef::from(&fd)
        .set_reuse_port(true)
        .map_err(|e| Error::io("setting SO_REUSEPORT on a UDP flow socket", e))?;
    sockopt::bind(&fd, &local).map_err(|e| Error::io(format!("binding UDP {local}"), e))?;
    let socket = UdpSocket::from(fd);
    socket.connect(peer).map_err(|e| Error::io(format!("connecting a UDP flow to {peer}"), e))?;
    Ok(socket)
}

/// The serving side of an accepted UDP test on `recv`, whatever its direction: receives on
/// forward flows, sends on reverse flows, both at once for `--bidir`. Returns the report of
/// what it received and of what it sent.
pub fn serve_udp(
    ctl: &mut TcpStream,
    spec: &TestSpec,
    sockets: Vec<UdpSocket>,
    placement: &Placement,
) -> Result<(Option<SideReport>, Option<SideReport>)> {
    mark_flows(spec, sockets.iter())?;
    let (forward, reverse) = split_by_direction(spec, (0..).zip(sockets).collect());
    for (_, s) in &forward {
        prepare_receiver(s, spec)?;
    }
    let peer_ip: Option<IpAddr> = ctl.peer_addr().ok().map(|a| a.ip());
    let iface = peer_ip.and_then(|ip| crate::sys::hostinfo::route_to(ip).ok()).map(|r| r.ifname);
    let iface = iface.as_deref();
    let live = ServerLive::start(ctl)?;
    control::write_msg(ctl, &ControlMsg::Ready)?;
    let t0 = Instant::now();
    match spec.direction {
        Direction::Forward => udp_receive_side(spec, forward, placement, iface, &live).map(|r| (Some(r), None)),
        Direction::Reverse => udp_send_side(spec, reverse, placement, iface, t0, &live).map(|s| (None, Some(s))),
        Direction::Bidir => {
            let (received, sent) = std::thread::scope(|scope| {
                let tx = scope.spawn(|| udp_send_side(spec, reverse, placement, iface, t0, &live));
                let rx = udp_receive_side(spec, forward, placement, iface, &live);
                (rx, tx.join().unwrap_or_else(|_| Err(udp_send::worker_panicked())))
            });
            Ok((Some(received?), Some(sent?)))
        }
    }
}

/// The receiving half over prepared UDP sockets: measures the window from now and waits for
/// every flow's FIN (or the planned end plus a short grace).
fn udp_receive_side(
    spec: &TestSpec,
    sockets: Vec<(u32, UdpSocket)>,
    placement: &Placement,
    iface: Option<&str>,
    live: &dyn Live,
) -> Result<SideReport> {
    let gro = spec.gso;
    let rcvbuf = sockets.first().map_or(0, |(_, s)| grow_rcvbuf(s, UDP_RCVBUF));
    let counters = Arc::new(QueueCounters::new(spec.queues as usize));
    let stop = Arc::new(AtomicBool::new(false));
    let flow_live: Vec<LiveStats> = sockets.iter().map(|_| LiveStats::default()).collect();
    let items: Vec<(u32, UdpRecvFlow)> = sockets
        .into_iter()
        .zip(&flow_live)
        .map(|((i, socket), live)| {
            let queue = spec.queue_of_flow(i);
            (queue, UdpRecvFlow { socket, queue, live: Some(Arc::clone(live)) })
        })
        .collect();
    let t_start = Instant::now();
    let cfg = UdpRecvConfig {
        wait: placement.wait,
        batch: WakeBatch { want: 8, max_delay_us: 200 },
        gro,
        buf_count: if gro { RECV_BUFS_GRO } else { RECV_BUFS_PLAIN },
        max_payload: UdpRecvConfig::payload_room(gro, spec.len),
        kernel_timestamps: false,
        one_way_delay: spec.one_way_delay,
        answer_fin: false,
        fin_linger: Duration::from_millis(20),
        stop: Arc::clone(&stop),
        // Datagrams are never retransmitted: nothing arrives long after the sender's end.
        deadline: t_start + spec.total() + Duration::from_secs(2),
    };
    let worker_counters = Arc::clone(&counters);
    let threads = QueueThreads::spawn(&placement.threads, deal_by_queue(&placement.threads, items), move |flows| {
        udp_recv::run(flows, &worker_counters, &cfg)
    })?;
    let t0 = Instant::now();
    let src = SampleSources { counters: &counters, tids: &threads.tids, sockets: &[], iface, udp: &flow_live };
    let finished = || threads.all_finished() || live.stopped().is_some();
    let window = sample_window(t0, spec.sample_offsets(), &src, &finished, &mut |iv| live.interval(Role::Receiver, iv));
    let hard_end = t0 + spec.total() + END_GRACE;
    while !threads.all_finished() && Instant::now() < hard_end {
        std::thread::sleep(Duration::from_millis(5));
    }
    stop.store(true, Ordering::Relaxed);
    let plans: Vec<_> = placement.threads.iter().cloned().zip(threads.tids.iter().copied()).collect();
    let results = threads.join()?;
    let flows: Vec<_> = results.iter().flat_map(|r| r.flows.iter()).collect();
    let outcomes: Vec<FlowOutcome> =
        flows.iter().map(|f| FlowOutcome { queue: f.queue, bytes: f.stats.bytes, error: f.error.clone() }).collect();
    let mut report = SideReport::build(Role::Receiver, spec, &window, &outcomes, &plans);
    if let Some(reason) = live.stopped() {
        report.stopped_early(spec, &reason);
    }
    let flow_stats: Vec<&SeqStats> = flows.iter().map(|f| &f.stats).collect();
    let received = UdpFigures::received(&flow_stats);
    let datagrams = received.datagrams;
    report.udp = Some(received);
    let completions: u64 = results.iter().map(|r| r.completions).sum();
    let coalesced: u64 = results.iter().map(|r| r.coalesced).sum();
    let gro_on = results.iter().all(|r| r.gro);
    report.placement = placement.summary.clone();
    report.path = format!(
        "io_uring multishot RECVMSG, {}, SO_RCVBUF {} KiB, {} datagrams in {} completions ({} coalesced)",
        if gro_on { "UDP GRO on" } else { "no GRO: one datagram per completion" },
        rcvbuf / 1024,
        datagrams,
        completions,
        coalesced
    );
    for note in results.iter().filter_map(|r| r.note.clone()) {
        report.path.push_str(&format!("; {note}"));
    }
    Ok(report)
}
