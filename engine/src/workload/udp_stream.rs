//! UDP stream over uringbench's own control channel: datagrams carrying a 64-bit sequence
//! number and a send timestamp, sent with GSO batches (or one per send, `--no-gso`) and
//! received with GRO, accounted exactly by the receiver (received, lost, out of order,
//! duplicates, RFC 3550 jitter).
//!
//! Every flow gets a socket of its own at both ends. The receiver's sockets all sit on the
//! control port (SO_REUSEPORT), each connected to one of the sender's source ports, which the
//! sender announces in its hello: one firewall hole, TCP and UDP, for the whole test.
//!
//! The sender runs through the one sender sequence ([`crate::session::sequence`]) as a
//! `UdpSender`; the halves here, [`UdpHalves`], run in each direction through
//! [`crate::runtime::side::halves`].

use crate::base::error::{Error, Result};
use crate::base::spec::TestSpec;
use crate::metrics::data_path::DataPath;
use crate::metrics::figures::{IntervalFigures, Role, SideReport, StreamReport, UdpFigures};
use crate::metrics::seq::{LiveStats, SeqStats};
use crate::runtime::handoff::await_first_packets;
use crate::runtime::nic_queues::{queue_table, FlowArrival, TestQueues};
use crate::runtime::placement::Placement;
use crate::runtime::side::halves::{send_halves, split_by_direction, Halves, Indexed, StreamHalves};
use crate::runtime::side::{Live, SideEnd, SideProbes, TestSide};
use crate::session::driver::serve_stream;
use crate::session::live::{Observer, SenderLive, ServerStop};
use crate::session::sender::{SendOptions, SenderSession};
use crate::session::sequence::{run_test, Ended, SenderTest};
use crate::session::server::ServedReports;
use crate::sys::sockopt;
use crate::transport::udp::recv::{self as udp_recv, UdpFlowReceived, UdpRecvConfig, UdpRecvFlow};
use crate::transport::udp::send::{self as udp_send, FinConfig, UdpFlowSent, UdpSendConfig, UdpSendFlow};
use crate::transport::FlowOutcome;
use crate::uring::ring::WakeBatch;
use crate::wire::udp_payload::DatagramHeader;
use crate::workload::latency_probe::{stream_report_with, SenderProbe};
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a receiver on a NIC with queues waits for each flow's first datagram before it
/// hands the flows to their queues' threads: the sender starts on `ready`, within a round trip
/// and its own set-up; a flow still silent after this is dealt by index (and named).
const FIRST_DATAGRAM_WAIT: Duration = Duration::from_millis(500);
/// Buffers per receive ring: with GRO each holds up to 64 KiB of coalesced datagrams.
const RECV_BUFS_GRO: u16 = 64;
const RECV_BUFS_PLAIN: u16 = 1024;
/// Sends in flight per flow: a few GSO batches keep a socket busy; single datagrams need more.
const INFLIGHT_GSO: u32 = 8;
const INFLIGHT_PLAIN: u32 = 32;

/// Receive buffer asked for on every UDP flow socket. A sleeping receive thread is woken per
/// batch (up to 200 us); at 12 Gbit/s that is 300 KB, more than the 208 KiB default, which
/// dropped 40% of a paced stream on the veth pair.
pub(crate) const UDP_RCVBUF: usize = 16 << 20;

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

/// The sender's flow sockets, bound to the address its control connection left from (and
/// from `first_port` + i when `--cport` gave one), with the source ports to announce in the hello.
pub(crate) fn flow_sockets(
    local_ip: IpAddr,
    count: u32,
    first_port: Option<u16>,
) -> Result<(Vec<UdpSocket>, Vec<u16>)> {
    let sockets: Vec<UdpSocket> = (0..count)
        .map(|i| {
            let port = match first_port {
                Some(first) => u16::try_from(u32::from(first) + i)
                    .map_err(|_| Error::usage(format!("--cport {first}: flow {i} would need a port above 65535")))?,
                None => 0,
            };
            UdpSocket::bind(SocketAddr::new(local_ip, port)).map_err(|e| Error::io("binding a UDP flow socket", e))
        })
        .collect::<Result<_>>()?;
    let ports = sockets.iter().map(|s| s.local_addr().map(|a| a.port()).unwrap_or(0)).collect();
    Ok((sockets, ports))
}

/// Runs a UDP stream test against `recv`, in the direction the spec asks.
pub(crate) fn run_send_udp(opts: &SendOptions, observer: Arc<dyn Observer>) -> Result<StreamReport> {
    run_test(opts, UdpSender { opts, probe: None }, observer)
}

/// A UDP stream in the sender's one sequence: a socket per flow, bound before the hello that
/// announces their ports, connected once the receiver accepted; the socket engine's halves.
struct UdpSender<'a> {
    opts: &'a SendOptions,
    /// `--latency`: the probe beside the flows.
    probe: Option<SenderProbe>,
}

/// A UDP sender's sockets from the hello until they are connected: the flows', and
/// (`--latency`) the probe's, the one after the last flow's.
struct UdpSockets {
    flows: Vec<Indexed<UdpSocket>>,
    probe: Option<UdpSocket>,
}

impl SenderTest for UdpSender<'_> {
    type Prepared = UdpSockets;
    type Flows = Vec<Indexed<UdpSocket>>;
    type Local = Halves;
    type Report = StreamReport;

    fn prepare(&mut self, session: &mut SenderSession) -> Result<(UdpSockets, Vec<u16>)> {
        let spec = &self.opts.spec;
        let sockets_wanted = spec.data_connections() + spec.probe_connections();
        let (mut sockets, ports) = flow_sockets(local_ip(session)?, sockets_wanted, self.opts.local.data_port)?;
        let probe = if spec.latency { sockets.pop() } else { None };
        let flows: Vec<Indexed<UdpSocket>> = (0..).zip(sockets).collect();
        mark_flows(spec, flows.iter().map(|(_, s)| s))?;
        // Receiving sockets get GRO and their buffer before the far side is told to start.
        let (_, reverse) = split_by_direction(spec, flows.iter().map(|(i, s)| (*i, s)).collect());
        for (_, s) in reverse {
            prepare_receiver(s, spec)?;
        }
        Ok((UdpSockets { flows, probe }, ports))
    }

    fn open(&mut self, session: &mut SenderSession, sockets: UdpSockets) -> Result<Self::Flows> {
        let (opts, spec) = (self.opts, &self.opts.spec);
        let local_ip = local_ip(session)?;
        let UdpSockets { flows: mut indexed, probe } = sockets;
        // `--steer`: the receiver asked for the final source ports; flows whose port lands them
        // on their queue move to a socket bound there (bind before connect).
        if let Some(steered) = session.steer_udp(spec, &opts.local, opts.port) {
            for ((_, socket), port) in indexed.iter_mut().zip(&steered) {
                if let Some(port) = port {
                    *socket = UdpSocket::bind(SocketAddr::new(local_ip, *port))
                        .map_err(|e| Error::io(format!("binding a steered UDP flow socket to port {port}"), e))?;
                }
            }
            mark_flows(spec, indexed.iter().map(|(_, s)| s))?;
            let port_of = |s: &UdpSocket| s.local_addr().map(|a| a.port()).unwrap_or(0);
            let ports = indexed.iter().map(|(_, s)| port_of(s)).chain(probe.as_ref().map(port_of)).collect();
            session.announce_udp_ports(ports)?;
        }
        let target = SocketAddr::new(session.target_ip, opts.port);
        for (_, s) in &indexed {
            s.connect(target).map_err(|e| Error::io(format!("connecting a UDP flow to {target}"), e))?;
            // Refuse before the test rather than fragment or fail mid-way: every datagram (and
            // every GSO segment) must fit the path MTU.
            if udp_send::path_mtu(s).is_some_and(|mtu| spec.len + udp_send::ip_udp_overhead(s) > mtu) {
                return Err(Error::usage(udp_send::mtu_message(s, spec.len, spec.gso)));
            }
        }
        if let Some(s) = probe {
            s.connect(target).map_err(|e| Error::io(format!("connecting the latency probe to {target}"), e))?;
            self.probe = Some(SenderProbe::open_udp(session, spec, s)?);
        }
        Ok(indexed)
    }

    fn observer(&mut self, observer: Arc<dyn Observer>) -> Arc<dyn Observer> {
        self.probe.as_ref().map_or(observer.clone(), |p| p.watch(&self.opts.spec, observer))
    }

    fn run(&mut self, session: &SenderSession, flows: Self::Flows, t0: Instant, live: &SenderLive) -> Result<Halves> {
        let (spec, placement) = (&self.opts.spec, &session.placement);
        let iface = session.path.interface().map(str::to_string);
        send_halves(&UdpHalves { spec, placement, iface, serving: false, queues: None }, spec, flows, t0, live)
    }

    fn report(self, halves: Halves, end: Ended) -> StreamReport {
        stream_report_with(self.probe, &self.opts.spec, halves, end)
    }
}

/// The address this host's control connection left from, which the flows leave from too.
fn local_ip(session: &SenderSession) -> Result<IpAddr> {
    let local = session.ctl.local_addr().map_err(|e| Error::io("reading the control socket address", e))?;
    Ok(local.ip().to_canonical())
}

/// The socket engine's halves of a UDP stream: what the driver needs to send or receive on
/// connected UDP sockets.
pub(crate) struct UdpHalves<'a> {
    pub spec: &'a TestSpec,
    pub placement: &'a Placement,
    /// The interface facing the peer, whose counters the window reads.
    pub iface: Option<String>,
    /// On `recv`: a sender whose ports refuse every datagram has gone, so sending stops.
    pub serving: bool,
    /// Receiving on a NIC with queues: which queues the test is served from.
    pub queues: Option<&'a TestQueues>,
}

impl StreamHalves for UdpHalves<'_> {
    type Flow = UdpSocket;
    fn send(&self, flows: Vec<Indexed<UdpSocket>>, t0: Instant, live: &dyn Live) -> Result<SideReport> {
        udp_send_side(self, flows, t0, live)
    }
    fn receive(&self, flows: Vec<Indexed<UdpSocket>>, t0: Instant, live: &dyn Live) -> Result<SideReport> {
        udp_receive_side(self, flows, t0, live)
    }
}

/// When refused sends (ICMP port unreachable) mean the peer has gone and a receiver's sending
/// stops: [`REFUSALS_AT_ONCE`] of them in one run, or a run that goes on for [`REFUSALS_FOR`]
/// with no gap over [`REFUSAL_GAP`]. The kernel rate-limits ICMP errors per peer: after a
/// quiet spell it lets a burst of up to 6 through at once (a closed port then stops the
/// sending within a poll of the sampler, 20 ms), later about one a second (then the second
/// one, a second after the first, stops it). One refusal alone never does: a stray error
/// must not end a test.
const REFUSALS_AT_ONCE: u64 = 3;
const REFUSALS_FOR: Duration = Duration::from_millis(500);
const REFUSAL_GAP: Duration = Duration::from_millis(1500);

/// The sending side's view of a running test on `recv`: the test's own, with refusals that
/// went on too long (the sending threads count each refused send) as one more reason to stop.
pub(crate) struct Refusals<'a> {
    live: &'a dyn Live,
    pub(crate) count: Arc<AtomicU64>,
    /// The count seen, and the current run of refusals.
    seen: Mutex<(u64, Option<RefusalRun>)>,
}

/// Refusals with no gap over [`REFUSAL_GAP`]: the first and the latest seen, and the count
/// before the first.
#[derive(Clone, Copy)]
struct RefusalRun {
    first: Instant,
    last: Instant,
    from: u64,
}

impl<'a> Refusals<'a> {
    pub(crate) fn new(live: &'a dyn Live) -> Self {
        Self { live, count: Arc::new(AtomicU64::new(0)), seen: Mutex::new((0, None)) }
    }

    /// `Some(reason)` once refusals mean the peer has gone (see [`REFUSALS_FOR`]).
    fn gone(&self) -> Option<String> {
        let now = Instant::now();
        let count = self.count.load(Ordering::Relaxed);
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let before = seen.0;
        let run = match seen.1 {
            _ if count > before => {
                seen.0 = count;
                let started = RefusalRun { first: now, last: now, from: before };
                Some(seen.1.map_or(started, |r| RefusalRun { last: now, ..r }))
            }
            Some(r) if now - r.last > REFUSAL_GAP => None,
            run => run,
        };
        seen.1 = run;
        let RefusalRun { first, last, from } = run?;
        let refused = count - from;
        (refused >= REFUSALS_AT_ONCE || last - first >= REFUSALS_FOR).then(|| {
            format!(
                "the peer's ports refused {refused} datagrams (ICMP port unreachable) in {:.1} s: it has gone",
                (last - first).as_secs_f64()
            )
        })
    }
}

impl Live for Refusals<'_> {
    fn stopped(&self) -> Option<String> {
        self.live.stopped().or_else(|| self.gone())
    }
    fn interval(&self, role: Role, interval: IntervalFigures) {
        self.live.interval(role, interval);
    }
    fn progress(&self, role: Role, bytes: u64) {
        self.live.progress(role, bytes);
    }
    fn abandoned(&self) -> bool {
        self.live.abandoned()
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
pub(crate) fn prepare_receiver(socket: &UdpSocket, spec: &TestSpec) -> Result<usize> {
    udp_recv::prepare_socket(socket, spec.gso, false).map_err(|e| Error::io("preparing a UDP flow socket", e))?;
    Ok(grow_rcvbuf(socket, UDP_RCVBUF))
}

/// The sending half over connected UDP sockets: queue threads send until the planned end,
/// then FINs; the sampler measures the window.
fn udp_send_side(h: &UdpHalves, sockets: Vec<(u32, UdpSocket)>, t0: Instant, live: &dyn Live) -> Result<SideReport> {
    let (spec, placement) = (h.spec, h.placement);
    let refusals = Refusals::new(live);
    let side = TestSide::new(Role::Sender, spec, placement, &refusals);
    let flows = side.by_queue(sockets, |_, queue, socket| UdpSendFlow { socket, queue });
    let input = |(_, flows): (u32, Vec<UdpSendFlow>)| {
        let cfg = UdpSendConfig {
            refused: h.serving.then(|| Arc::clone(&refusals.count)),
            ..send_config(spec, placement, (t0, flows.len()), side.halt())
        };
        (flows, cfg)
    };
    let threads = side.spawn(flows, input, |(flows, cfg), counters| udp_send::run(flows, counters, &cfg))?;
    // Stopped early: the flows send their FINs now, not after the cool-down.
    let probes = SideProbes { iface: h.iface.as_deref(), ..SideProbes::default() };
    let run = side.run(threads, t0, probes, SideEnd::AtDeadline)?;
    let sent: Vec<_> = run.results.iter().flat_map(|r| r.flows.iter()).collect();
    let outcomes: Vec<FlowOutcome> = sent.iter().map(|f| f.outcome()).collect();
    let mut sender = side.report(&run, &outcomes);
    let send = run.results.first().map_or_else(String::new, |r| r.path.describe());
    sender.set_data_path(DataPath::UdpSend { send, len: spec.len, iperf2: false });
    sender.udp = Some(sent_figures(&sent));
    sender.add_path_notes(run.results.iter().filter_map(|r| r.note.clone()));
    Ok(sender)
}

/// A sender's UDP figures: the datagrams the kernel accepted and the sends refused.
pub(crate) fn sent_figures(flows: &[&UdpFlowSent]) -> UdpFigures {
    UdpFigures {
        datagrams: flows.iter().map(|f| f.datagrams).sum(),
        refused: flows.iter().map(|f| f.refused).sum(),
        ..UdpFigures::default()
    }
}

/// The config of a UDP sending thread over `flows` of the test's flows, from `t0` until the
/// planned end (or `halt`), with a FIN after the last datagram.
pub(crate) fn send_config(
    spec: &TestSpec,
    placement: &Placement,
    (t0, flows): (Instant, usize),
    halt: Arc<AtomicBool>,
) -> UdpSendConfig {
    let inflight = if spec.gso { INFLIGHT_GSO } else { INFLIGHT_PLAIN };
    UdpSendConfig {
        wait: placement.wait,
        ring: placement.fast.ring(),
        batch: WakeBatch { want: (inflight * flows as u32 / 2).clamp(1, 8), max_delay_us: 200 },
        len: spec.len,
        gso: spec.gso,
        inflight,
        deadline: t0 + spec.total(),
        halt: Some(halt),
        rate_bps: spec.rate_bps * flows as u64 / u64::from(spec.flows().max(1)),
        burst: spec.burst.unwrap_or(0),
        max_datagrams: 0,
        drain_limit: Duration::from_secs(2),
        fin: Some(FinConfig::default()),
        refused: None,
    }
}

/// Creates the receiver's flow sockets: bound to the control connection's local address and
/// port (SO_REUSEPORT), each connected to one of the sender's announced source ports.
pub(crate) fn receiver_sockets(ctl: &TcpStream, ports: &[u16]) -> Result<Vec<UdpSocket>> {
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
pub(crate) fn serve_udp(
    ctl: &mut TcpStream,
    stop: &ServerStop,
    spec: &TestSpec,
    sockets: Vec<UdpSocket>,
    placement: &Placement,
    queues: Option<&TestQueues>,
) -> Result<ServedReports> {
    mark_flows(spec, sockets.iter())?;
    let flows: Vec<(u32, UdpSocket)> = (0..).zip(sockets).collect();
    let (forward, _) = split_by_direction(spec, flows.iter().map(|(i, s)| (*i, s)).collect());
    for (_, s) in forward {
        prepare_receiver(s, spec)?;
    }
    let peer_ip: Option<IpAddr> = ctl.peer_addr().ok().map(|a| a.ip());
    let iface = peer_ip.and_then(|ip| crate::sys::hostinfo::route_to(ip).ok()).map(|r| r.ifname);
    serve_stream(ctl, stop, spec, &UdpHalves { spec, placement, iface, serving: true, queues }, flows)
}

/// The receiving half over prepared UDP sockets: measures the window from `t0` and waits for
/// every flow's FIN (or the planned end plus a short grace).
fn udp_receive_side(h: &UdpHalves, sockets: Vec<(u32, UdpSocket)>, t0: Instant, live: &dyn Live) -> Result<SideReport> {
    receive_udp(h, sockets, t0, live, DatagramHeader::Native).map(|(report, _)| report)
}

/// [`udp_receive_side`] for datagrams starting with `header`, with what each flow received.
pub(crate) fn receive_udp(
    h: &UdpHalves,
    sockets: Vec<(u32, UdpSocket)>,
    t0: Instant,
    live: &dyn Live,
    header: DatagramHeader,
) -> Result<(SideReport, Vec<UdpFlowReceived>)> {
    let (spec, placement) = (h.spec, h.placement);
    let gro = spec.gso;
    let rcvbuf = sockets.first().map_or(0, |(_, s)| grow_rcvbuf(s, UDP_RCVBUF));
    let side = TestSide::new(Role::Receiver, spec, placement, live);
    let flow_live: Vec<LiveStats> = sockets.iter().map(|_| LiveStats::default()).collect();
    // On a NIC with queues, each flow is served by the thread of the queue its datagrams
    // arrive on (unless n-tuple rules put it on its own queue): a UDP socket exists before its
    // first datagram, so that is awaited (the sender starts on `ready`), at most a moment.
    let handoff = h.queues.filter(|q| !q.by_rules).map(|q| {
        let fds: Vec<(u32, RawFd)> = sockets.iter().map(|(f, s)| (*f, s.as_raw_fd())).collect();
        await_first_packets(fds.iter().map(|&(_, fd)| fd), Instant::now() + FIRST_DATAGRAM_WAIT);
        q.hand_off_sockets(spec.queues, &fds)
    });
    let queue_of =
        |flow: u32| handoff.as_ref().map_or(spec.queue_of_flow(flow), |h| h.engine_queue_of(flow, spec.queues));
    // Where each flow arrived, read now (the sockets go to the threads), beside its accounting.
    let arrivals: Vec<(FlowArrival, &LiveStats)> = match h.queues {
        Some(_) => sockets
            .iter()
            .zip(&flow_live)
            .filter_map(|((flow, s), live)| Some((FlowArrival::read(*flow, s, queue_of(*flow), 0)?, live)))
            .collect(),
        None => Vec::new(),
    };
    let mut flow_lives = flow_live.iter();
    let items = side.by_queue_of(sockets, queue_of, |_, queue, socket| {
        let live = flow_lives.next().map(Arc::clone);
        UdpRecvFlow { socket, queue, live }
    });
    let cfg = UdpRecvConfig {
        wait: placement.wait,
        ring: placement.fast.ring(),
        batch: WakeBatch { want: 8, max_delay_us: 200 },
        gro,
        buf_count: if gro { RECV_BUFS_GRO } else { RECV_BUFS_PLAIN },
        max_payload: UdpRecvConfig::payload_room(gro, spec.len),
        kernel_timestamps: false,
        one_way_delay: spec.one_way_delay,
        answer_fin: false,
        fin_linger: Duration::from_millis(20),
        halt: side.halt(),
        // Datagrams are never retransmitted: nothing arrives long after the sender's end.
        deadline: t0 + spec.total() + Duration::from_secs(2),
    };
    let threads = side.spawn(
        items,
        |(_, flows)| flows,
        move |flows, counters| udp_recv::run_with(flows, counters, &cfg, header),
    )?;
    let probes = SideProbes { iface: h.iface.as_deref(), udp: &flow_live, ..SideProbes::default() };
    let run = side.run(threads, t0, probes, SideEnd::WithTheSender)?;
    let results = &run.results;
    let flows: Vec<_> = results.iter().flat_map(|r| r.flows.iter()).collect();
    let outcomes: Vec<FlowOutcome> =
        flows.iter().map(|f| FlowOutcome { queue: f.queue, bytes: f.stats.bytes, error: f.error.clone() }).collect();
    let mut report = side.report(&run, &outcomes);
    let flow_stats: Vec<&SeqStats> = flows.iter().map(|f| &f.stats).collect();
    let received = UdpFigures::received(&flow_stats, run.window.udp());
    let datagrams = received.datagrams;
    report.udp = Some(received);
    let completions: u64 = results.iter().map(|r| r.completions).sum();
    let coalesced: u64 = results.iter().map(|r| r.coalesced).sum();
    let gro_on = results.iter().all(|r| r.gro);
    report.set_data_path(DataPath::UdpReceive {
        gro: gro_on,
        rcvbuf_bytes: u32::try_from(rcvbuf).unwrap_or(u32::MAX),
        datagrams,
        completions,
        coalesced,
    });
    report.nic_queues = h.queues.map(|q| {
        // Each flow's bytes, from the accounting its thread published.
        let arrivals: Vec<FlowArrival> = arrivals
            .into_iter()
            .map(|(a, live)| FlowArrival { bytes: live.lock().unwrap_or_else(|p| p.into_inner()).bytes, ..a })
            .collect();
        let polled: Vec<(usize, u64, u64)> =
            placement.threads.iter().zip(results).map(|(t, r)| (t.cpu, r.completions, r.polled_completions)).collect();
        queue_table(q, placement, &arrivals, &polled)
    });
    report.add_path_notes(results.iter().filter_map(|r| r.note.clone()).chain(handoff.map(|h| h.line)));
    Ok((report, flows.into_iter().cloned().collect()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::spec::Proto;
    use crate::runtime::nic_queues::RssSteering;
    use crate::session::control::{read_msg, write_msg, ControlMsg};
    use crate::session::live::Quiet;
    use crate::session::sender::scripted;
    use crate::sys::nic_topology::HashFunction;
    use crate::sys::ntuple::{RXH_IP_DST, RXH_IP_SRC, RXH_L4_B_0_1, RXH_L4_B_2_3};
    use crate::wire::rss::{RssMap, MS_KEY};
    use std::time::Duration;

    /// A receiver whose NIC hashes UDP on ports asks for the final ports after its accept:
    /// the sender binds each flow's socket on a port that hashes onto the flow's queue and
    /// names them in `udp_ports`, the latency probe's port unchanged.
    #[test]
    fn steered_udp_ports_follow_the_accept_and_land_on_their_queues() {
        let table: Vec<u32> = (0..128).map(|i| i % 4).collect();
        let indirection = table.clone();
        let (port, receiver) = scripted::receiver(move |mut s, hello| {
            let ControlMsg::Hello { udp_ports, steer_udp, .. } = hello else { panic!("expected a hello") };
            assert!(steer_udp, "a forward UDP stream offers to steer");
            let steering = RssSteering {
                iface: "eth0".into(),
                hash_function: HashFunction::Toeplitz,
                key: MS_KEY.to_vec(),
                indirection,
                queues: vec![0, 1, 2, 3],
                queue_cpus: vec![None; 4],
                udp4_hash: Some(RXH_IP_SRC | RXH_IP_DST | RXH_L4_B_0_1 | RXH_L4_B_2_3),
                udp6_hash: None,
            };
            let mut accept = scripted::plain_accept();
            if let ControlMsg::Accept { steering: given, latency_probe, udp_ports_follow, .. } = &mut accept {
                (*given, *latency_probe, *udp_ports_follow) = (Some(steering), true, true);
            }
            write_msg(&s, &accept).unwrap();
            let ControlMsg::UdpPorts { ports } = read_msg(&mut s, Duration::from_secs(5)).unwrap() else {
                panic!("expected udp_ports");
            };
            write_msg(&s, &ControlMsg::Abort { reason: "checked the ports".into() }).unwrap();
            (udp_ports, ports)
        });
        let spec = TestSpec {
            proto: Proto::Udp,
            queues: 4,
            latency: true,
            time_ms: 100,
            warmup_ms: 0,
            rate_bps: 1_000_000,
            len: 1400,
            ..TestSpec::default()
        };
        let err = run_send_udp(&scripted::options(port, spec), Arc::new(Quiet)).unwrap_err();
        assert!(err.message.contains("checked the ports"), "{err}");
        let (hello, ports) = receiver.join().unwrap();
        assert_eq!(ports.len(), 5, "four flows and the probe");
        assert_eq!(ports[4], hello[4], "the probe keeps its port");
        let map = RssMap { key: &MS_KEY, table: &table };
        let dst = SocketAddr::from(([127, 0, 0, 1], port));
        let queues: Vec<u32> = ports[..4]
            .iter()
            .map(|&p| map.queue_of(SocketAddr::from(([127, 0, 0, 1], p)), dst, true).unwrap())
            .collect();
        assert_eq!(queues, vec![0, 1, 2, 3], "flow f lands on queue f: {ports:?}");
    }
}
