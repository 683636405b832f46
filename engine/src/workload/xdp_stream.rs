//! A UDP stream test with the AF_XDP engine at either end, over the usual control channel.
//!
//! - `send --engine xdp`: the hello announces one source port per flow, exactly as the socket
//!   UDP sender does (the ports are reserved by binding ordinary UDP sockets that are never
//!   used), so `recv` (either engine) expects the frames. The frames are written whole, with
//!   this host's address on the control connection, the egress interface's MAC and the next
//!   hop's MAC from the neighbour table.
//! - `recv --engine xdp`: forward UDP tests are received by AF_XDP sockets on every receive
//!   queue of the interface that faces the sender; the program steers the control port's UDP
//!   to them and passes the rest. TCP tests and reverse directions use the socket engine.
//!
//! Both sides fill the same [`SideReport`] as the socket engine, plus [`XdpFigures`]. The
//! sender runs through the one sender sequence ([`crate::session::sequence`]) as an
//! `XdpSender`; the halves here, [`XdpSendHalf`] on the sending host and [`XdpReceiveHalf`]
//! on `recv`, run through [`crate::runtime::side::halves`].

use crate::base::error::{Error, Result};
use crate::base::spec::{Direction, Proto, TestSpec};
use crate::base::text::first_seen;
use crate::metrics::data_path::DataPath;
use crate::metrics::figures::{Role, SideReport, StreamReport, UdpFigures};
use crate::metrics::seq::{LiveStats, SeqStats};
use crate::metrics::xdp::{SocketCounters, SteerCounters, XdpFigures};
use crate::runtime::placement::Placement;
use crate::runtime::side::halves::{send_halves, Halves, Indexed, StreamHalves};
use crate::runtime::side::{Live, SideEnd, SideProbes, TestSide, STOP_LINGER};
use crate::session::driver::{serve_stream, stream_report};
use crate::session::live::{Observer, SenderLive, ServerStop};
use crate::session::sender::{SendOptions, SenderSession};
use crate::session::sequence::{run_test, Ended, SenderTest};
use crate::sys::hostinfo::{self, neigh};
use crate::sys::xdp::kernel_count::KernelFlows;
use crate::sys::xdp::live_frames::LiveFrames;
use crate::sys::xdp::program::{self, AttachMode, XdpProgram};
use crate::sys::xdp::socket::{self, XskQueue, MAX_FRAME_LEN};
use crate::transport::xdp::kernel_watch;
use crate::transport::xdp::recv::{self as xrecv, XdpRecvConfig, XdpRecvFlow, XdpRecvResult};
use crate::transport::xdp::send::{self as xsend, XdpFlowSent, XdpSendConfig, XdpSendFlow, XdpSendQueue};
use crate::transport::FlowOutcome;
use crate::uring::ring::WaitMode;
use crate::wire::frame::{self, FlowAddrs, FrameTemplate};
use crate::workload::xdp_live;
use crate::workload::xdp_sender::{flows_by_queue, sender_report};
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// AF_XDP choices of one side (local, not part of the agreed test).
#[derive(Debug, Clone, Default)]
pub struct XdpOptions {
    /// Interface to use; default: the one the route to the peer takes.
    pub iface: Option<String>,
    /// Force native or generic mode for the receiver's program (default: native, else generic).
    pub program_mode: Option<AttachMode>,
    /// How a sender makes its frames.
    pub gen: XdpGen,
    /// Where a receiver accounts the frames.
    pub count: XdpCount,
}

/// Where `recv --engine xdp` accounts the test's frames.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum XdpCount {
    /// In user space, from AF_XDP sockets (every frame checked, checksums included).
    #[default]
    Sockets,
    /// In the XDP program itself, which drops the frames ([`crate::transport::xdp::kernel_watch`]).
    Kernel,
}

/// How `send --engine xdp` makes its frames.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum XdpGen {
    /// Written into AF_XDP sockets' UMEMs and sent through their TX rings (zero-copy where
    /// the driver has it).
    #[default]
    Xsk,
    /// Made by an XDP program run on live frames (`BPF_PROG_RUN`), sent through the driver's
    /// `ndo_xdp_xmit` ([`crate::workload::xdp_live`]).
    Live,
}

/// Silence after the last FIN before the receiver calls the flows ended.
const FIN_LINGER: Duration = Duration::from_millis(20);
/// How long after the planned end the receiver waits for FINs that never come.
const RECEIVE_GRACE: Duration = Duration::from_secs(2);

/// How long the sender waits for the kernel to resolve the next hop's MAC.
const NEIGHBOUR_WAIT: Duration = Duration::from_secs(2);

fn interface_mtu(ifname: &str) -> Result<u32> {
    let path = format!("/sys/class/net/{ifname}/mtu");
    let text = std::fs::read_to_string(&path).map_err(|e| Error::io(format!("reading {path}"), e))?;
    text.trim().parse().map_err(|_| Error::unsupported(format!("{path} holds '{}', not an MTU", text.trim())))
}

/// Refuses datagram lengths the path or a UMEM frame cannot carry, naming the `--len` that fits.
pub(crate) fn check_len(len: u32, ipv6: bool, ifname: &str, mtu: u32) -> Result<u32> {
    let l3 = (frame::header_len(ipv6) - frame::ETH_HEADER_LEN) as u32;
    let frame_len = len + frame::header_len(ipv6) as u32;
    if len < crate::wire::udp_payload::HEADER_LEN as u32 {
        return Err(Error::usage(format!(
            "--len {len} is shorter than the {}-byte sequence header every datagram carries (the smallest frame is {} bytes: --len {})",
            crate::wire::udp_payload::HEADER_LEN,
            crate::wire::udp_payload::HEADER_LEN + frame::header_len(ipv6),
            crate::wire::udp_payload::HEADER_LEN
        )));
    }
    if len + l3 > mtu {
        return Err(Error::usage(format!(
            "--len {len} makes {}-byte packets, over the MTU {mtu} of {ifname}: use --len {} or less (or raise the MTU on both ends)",
            len + l3,
            mtu - l3
        )));
    }
    if frame_len > MAX_FRAME_LEN {
        return Err(Error::usage(format!(
            "--len {len} makes {frame_len}-byte frames, over the {MAX_FRAME_LEN} bytes one AF_XDP UMEM frame holds (multi-buffer frames are not supported): use --len {} or less",
            MAX_FRAME_LEN - frame::header_len(ipv6) as u32
        )));
    }
    Ok(frame_len)
}

/// Runs a forward UDP test from this host's AF_XDP sockets to `recv` at `opts.target`.
pub fn run_send_xdp(opts: &SendOptions, xdp: &XdpOptions, observer: Arc<dyn Observer>) -> Result<StreamReport> {
    let spec = &opts.spec;
    if spec.proto != Proto::Udp {
        return Err(Error::usage("--engine xdp sends UDP only (add -u)"));
    }
    if spec.direction != Direction::Forward {
        return Err(Error::usage(
            "--engine xdp sends forward only: for the other direction run `recv --engine xdp` on this host and send from the other",
        ));
    }
    run_test(opts, XdpSender { opts, xdp, reserved: Vec::new() }, observer)
}

/// A forward AF_XDP stream in the sender's one sequence: its sockets (or the generator) and
/// frame templates set up before the hello, and its one sending half.
struct XdpSender<'a> {
    opts: &'a SendOptions,
    xdp: &'a XdpOptions,
    /// The flows' source ports, held until the test's end so that no other program on this
    /// host gets them.
    reserved: Vec<UdpSocket>,
}

/// What an AF_XDP sender sets up before the hello, and its flows once they are ready.
struct XdpReady {
    engine: SendEngine,
    flows: Vec<Indexed<XdpSendFlow>>,
    ifname: String,
    ifindex: u32,
    frame_len: u32,
    ipv6: bool,
    /// The live-frames generator's `ndo_xdp_xmit` note, from its check after the hello.
    live_note: Option<String>,
}

impl SenderTest for XdpSender<'_> {
    type Prepared = XdpReady;
    type Flows = XdpReady;
    type Local = Halves;
    type Report = StreamReport;

    fn prepare(&mut self, session: &mut SenderSession) -> Result<(XdpReady, Vec<u16>)> {
        let (opts, spec, xdp) = (self.opts, &self.opts.spec, self.xdp);
        let local_ip = session.ctl.local_addr().map_err(|e| Error::io("reading the control socket address", e))?.ip();
        let local_ip = local_ip.to_canonical();
        let target_ip = session.target_ip;
        let route = hostinfo::route_to(target_ip)?;
        if route.local {
            return Err(Error::usage(format!(
                "--engine xdp needs a link to the target: {target_ip} is an address of this host (loopback has no AF_XDP path)"
            )));
        }
        let ifname = xdp.iface.clone().unwrap_or_else(|| route.ifname.clone());
        let ifindex = program::ifindex(&ifname)?;
        let mtu = interface_mtu(&ifname)?;
        let frame_len = check_len(spec.len, target_ip.is_ipv6(), &ifname, mtu)?;
        let src_mac = neigh::interface_mac(&ifname)?;
        let next_hop = route.gateway.unwrap_or(target_ip);
        let dst_mac = neigh::resolve(next_hop, ifindex, &ifname, NEIGHBOUR_WAIT)?;
        // Sockets (or the generator) before the hello: a bad queue, a low memlock limit or a
        // kernel without live frames fails the command before the receiver starts anything.
        let engine = match xdp.gen {
            XdpGen::Xsk => {
                SendEngine::Xsk((0..spec.queues).map(|q| socket::open(&ifname, q, "tx")).collect::<Result<_>>()?)
            }
            XdpGen::Live => SendEngine::Live(xdp_live::prepare(ifindex)?),
        };
        // Source ports: reserved with ordinary sockets so no other program on this host gets them.
        self.reserved = (0..spec.flows())
            .map(|_| {
                UdpSocket::bind(SocketAddr::new(local_ip, 0)).map_err(|e| Error::io("reserving a UDP source port", e))
            })
            .collect::<Result<_>>()?;
        let ports: Vec<u16> = self.reserved.iter().map(|s| s.local_addr().map(|a| a.port()).unwrap_or(0)).collect();
        let mut flows = Vec::with_capacity(ports.len());
        for (i, &port) in (0..).zip(&ports) {
            let addrs =
                FlowAddrs { src_mac, dst_mac, src: local_ip, dst: target_ip, src_port: port, dst_port: opts.port };
            let template = FrameTemplate::new(&addrs, spec.len as usize).map_err(Error::usage)?;
            flows.push((i, XdpSendFlow { template, queue: spec.queue_of_flow(i) }));
        }
        let ipv6 = target_ip.is_ipv6();
        Ok((XdpReady { engine, flows, ifname, ifindex, frame_len, ipv6, live_note: None }, ports))
    }

    fn open(&mut self, _session: &mut SenderSession, mut ready: XdpReady) -> Result<XdpReady> {
        if let SendEngine::Live(_) = ready.engine {
            let at = xdp_live::LiveOutput {
                ifname: ready.ifname.clone(),
                ifindex: ready.ifindex,
                frame_len: ready.frame_len,
                ipv6: ready.ipv6,
            };
            ready.live_note = at.check_xmit()?;
        }
        Ok(ready)
    }

    fn run(&mut self, session: &SenderSession, ready: XdpReady, t0: Instant, live: &SenderLive) -> Result<Halves> {
        let (spec, placement) = (&self.opts.spec, &session.placement);
        let XdpReady { engine, flows, ifname, ifindex, frame_len, ipv6, live_note } = ready;
        match engine {
            SendEngine::Xsk(xsks) => {
                let half = XdpSendHalf { spec, placement, xsks: Mutex::new(xsks), ifname, frame_len };
                send_halves(&half, spec, flows, t0, live)
            }
            SendEngine::Live(gen) => {
                let at = xdp_live::LiveOutput { ifname, ifindex, frame_len, ipv6 };
                let half = xdp_live::LiveSendHalf::new(spec, placement, gen, at, live_note);
                send_halves(&half, spec, flows, t0, live)
            }
        }
    }

    fn report(self, halves: Halves, end: Ended) -> StreamReport {
        stream_report(&self.opts.spec, halves, end)
    }
}

/// What sends the frames, set up before the hello.
enum SendEngine {
    /// One AF_XDP socket per queue.
    Xsk(Vec<XskQueue>),
    /// The live-frames generator.
    Live(Arc<LiveFrames>),
}

/// The AF_XDP engine's sending half: its sockets, opened before the hello, and the flows'
/// frame templates. It sends forward only (the command refuses the other directions).
pub(crate) struct XdpSendHalf<'a> {
    spec: &'a TestSpec,
    placement: &'a Placement,
    /// One socket per queue, taken by the send.
    xsks: Mutex<Vec<XskQueue>>,
    ifname: String,
    frame_len: u32,
}

impl StreamHalves for XdpSendHalf<'_> {
    type Flow = XdpSendFlow;
    fn send(&self, flows: Vec<Indexed<XdpSendFlow>>, t0: Instant, live: &dyn Live) -> Result<SideReport> {
        let xsks = std::mem::take(&mut *self.xsks.lock().unwrap_or_else(|p| p.into_inner()));
        xdp_send_side(self, xsks, flows, t0, live)
    }
}

/// Sends every flow's frames from its queue's socket until the planned end, then the FINs.
fn xdp_send_side(
    h: &XdpSendHalf,
    xsks: Vec<XskQueue>,
    flows: Vec<Indexed<XdpSendFlow>>,
    t0: Instant,
    live: &dyn Live,
) -> Result<SideReport> {
    let (spec, placement) = (h.spec, h.placement);
    let items: Vec<(u32, XdpSendQueue)> = xsks
        .into_iter()
        .zip(flows_by_queue(spec, flows))
        .map(|(xsk, flows)| (xsk.queue, XdpSendQueue { xsk, flows }))
        .collect();
    let total_flows = u64::from(spec.flows().max(1));
    let side = TestSide::new(Role::Sender, spec, placement, live);
    let input = |(_, queues): (u32, Vec<XdpSendQueue>)| {
        let flows: u64 = queues.iter().map(|q| q.flows.len() as u64).sum();
        let cfg = XdpSendConfig {
            len: spec.len,
            deadline: t0 + spec.total(),
            halt: Some(side.halt()),
            rate_bps: spec.rate_bps * flows / total_flows,
            burst: spec.burst.unwrap_or(0),
            fin_copies: 5,
            fin_interval: Duration::from_millis(5),
            drain_limit: Duration::from_secs(2),
            spin: placement.wait == WaitMode::Spin,
        };
        (queues, cfg)
    };
    let threads = side.spawn(items, input, |(queues, cfg), counters| Ok(xsend::run(queues, counters, &cfg)))?;
    // A stop ends the window, the queues' sending (then their FINs) and the far end's reception.
    let probes = SideProbes { iface: Some(&h.ifname), ..SideProbes::default() };
    let run = side.run(threads, t0, probes, SideEnd::AtDeadline)?;
    let results = &run.results;
    let mut figures = XdpFigures {
        interface: h.ifname.clone(),
        nic_queues: results.iter().flat_map(|r| r.nic_queues.iter().copied()).collect(),
        program_mode: None,
        bind: results.first().map(|r| r.bind),
        need_wakeup: true,
        frame_len: h.frame_len,
        frames: results.iter().map(|r| r.completed).sum(),
        produced: results.iter().map(|r| r.produced).sum(),
        wakeups: results.iter().map(|r| r.wakeups).sum(),
        ring_full: results.iter().map(|r| r.ring_full).sum(),
        ..XdpFigures::default()
    };
    for r in results {
        figures.sockets.add(&r.sockets);
    }
    figures.notes = first_seen(results.iter().flat_map(|r| r.notes.iter().cloned()));
    let flows: Vec<&XdpFlowSent> = results.iter().flat_map(|r| r.flows.iter()).collect();
    Ok(sender_report(&side, &run, &flows, figures, spec.len))
}

/// A forward UDP test accepted by `recv --engine xdp`, with its program attached and its
/// sockets bound and registered, before the sender is told to start.
pub(crate) struct XdpReception {
    program: XdpProgram,
    xsks: Vec<XskQueue>,
    flows: Vec<(IpAddr, u16)>,
    port: u16,
}

impl XdpReception {
    /// Attaches the program on the interface facing the peer and binds a socket on each of its
    /// receive queues. Fails (and the caller refuses the test) if any step fails; whatever was
    /// set up is torn down on the way out (the program detaches when dropped).
    pub(crate) fn prepare(ctl: &TcpStream, udp_ports: &[u16], xdp: &XdpOptions) -> Result<Self> {
        let peer = ctl.peer_addr().map_err(|e| Error::io("reading the control peer address", e))?.ip().to_canonical();
        let port = ctl.local_addr().map_err(|e| Error::io("reading the control socket address", e))?.port();
        let ifname = match &xdp.iface {
            Some(i) => i.clone(),
            None => hostinfo::route_to(peer)?.ifname,
        };
        if xdp.count == XdpCount::Kernel {
            let kernel = KernelFlows { peer, ports: udp_ports.to_vec() };
            let program = XdpProgram::attach(&ifname, port..=port, xdp.program_mode, Some(&kernel))?;
            let flows = udp_ports.iter().map(|&p| (peer, p)).collect();
            return Ok(Self { program, xsks: Vec::new(), flows, port });
        }
        let program = XdpProgram::attach(&ifname, port..=port, xdp.program_mode, None)?;
        let nq = program::queue_count(&ifname, "rx").max(1);
        if nq > program::MAX_QUEUES {
            return Err(Error::unsupported(format!(
                "{ifname} has {nq} receive queues, more than the {} the XDP program serves",
                program::MAX_QUEUES
            )));
        }
        let mut xsks = Vec::with_capacity(nq as usize);
        for q in 0..nq {
            let mut xsk = socket::open(&ifname, q, "rx")?;
            xsk.prime_fill();
            program.register_socket(q, xsk.raw_fd())?;
            xsks.push(xsk);
        }
        Ok(Self { program, xsks, flows: udp_ports.iter().map(|&p| (peer, p)).collect(), port })
    }

    /// Tells the sender to start, receives until every flow's FIN (or the planned end plus a
    /// grace), and returns the receiver's report. The program is detached on return.
    pub(crate) fn serve(
        self,
        ctl: &mut TcpStream,
        stop: &ServerStop,
        spec: &TestSpec,
        placement: &Placement,
    ) -> Result<SideReport> {
        let flows: Vec<Indexed<(IpAddr, u16)>> = (0..).zip(self.flows.iter().copied()).collect();
        let half = XdpReceiveHalf { spec, placement, reception: Mutex::new(Some(self)) };
        let served = serve_stream(ctl, stop, spec, &half, flows)?;
        served.received.ok_or_else(|| Error::usage("recv --engine xdp receives forward tests only"))
    }
}

/// The AF_XDP engine's receiving half on `recv`: forward UDP tests only (the receiver hands
/// every other test to the socket engine).
pub(crate) struct XdpReceiveHalf<'a> {
    spec: &'a TestSpec,
    placement: &'a Placement,
    /// The program and sockets, taken by the receive.
    reception: Mutex<Option<XdpReception>>,
}

impl StreamHalves for XdpReceiveHalf<'_> {
    /// The flow's source address and port, as the sender announced it.
    type Flow = (IpAddr, u16);
    fn receive(&self, _flows: Vec<Indexed<(IpAddr, u16)>>, t0: Instant, live: &dyn Live) -> Result<SideReport> {
        let reception = self.reception.lock().unwrap_or_else(|p| p.into_inner()).take();
        let reception = reception.ok_or_else(|| Error::usage("an XDP reception serves one test"))?;
        reception.receive(self.spec, self.placement, t0, live)
    }
}

impl XdpReception {
    /// Receives the test's frames, its window sampled from `t0`.
    fn receive(self, spec: &TestSpec, placement: &Placement, t0: Instant, ctl_live: &dyn Live) -> Result<SideReport> {
        let Self { mut program, xsks, flows, port } = self;
        let ifname = program.ifname.clone();
        // Counting in the kernel binds no socket: the program's counters of every queue.
        let nic_queues = if xsks.is_empty() { program::queue_count(&ifname, "rx").max(1) } else { xsks.len() as u32 };
        let side = TestSide::new(Role::Receiver, spec, placement, ctl_live);
        let fins: Arc<Vec<AtomicBool>> = Arc::new(flows.iter().map(|_| AtomicBool::new(false)).collect());
        let activity = Arc::new(AtomicU64::new(0));
        let epoch = Instant::now();
        let cfg = XdpRecvConfig {
            dst_port: port,
            one_way_delay: spec.one_way_delay,
            halt: side.halt(),
            fins: Arc::clone(&fins),
            activity: Arc::clone(&activity),
            epoch,
            spin: placement.wait == WaitMode::Spin,
        };
        // The flows have ended when every FIN was seen and nothing arrived for a moment (the
        // sender repeats its FIN a few times, 5 ms apart).
        let ended = || {
            let quiet = epoch.elapsed().saturating_sub(Duration::from_nanos(activity.load(Ordering::Relaxed)));
            !fins.is_empty() && fins.iter().all(|f| f.load(Ordering::Relaxed)) && quiet >= FIN_LINGER
        };
        let mut live: Vec<LiveStats> = Vec::new();
        // Every thread watches every flow; each flow's figures come from the threads that saw it.
        let mut input = |(_, queues): (u32, Vec<XskQueue>)| {
            let thread_flows: Vec<XdpRecvFlow> = flows
                .iter()
                .enumerate()
                .map(|(i, &(src, src_port))| {
                    let l = LiveStats::default();
                    live.push(Arc::clone(&l));
                    XdpRecvFlow { src, src_port, queue: spec.queue_of_flow(i as u32), live: Some(l) }
                })
                .collect();
            (queues, thread_flows)
        };
        let threads = match program.kernel_flows_fd() {
            // Counting in the kernel: one thread watches the program's trackers.
            Some(kflows) => side.spawn(
                vec![(0, ())],
                |(q, _)| input((q, Vec::new())),
                move |(_, flows), counters| Ok(kernel_watch::run(kflows, &flows, counters, &cfg)),
            )?,
            None => {
                // NIC queue q is served by the thread of test queue q mod queues.
                let items = xsks.into_iter().map(|x| (x.queue % spec.queues, x)).collect();
                side.spawn(items, input, move |(queues, flows), counters| {
                    Ok(xrecv::run(queues, &flows, counters, &cfg))
                })?
            }
        };
        // Detach first, then let the threads empty their rings: the program's `redirected`
        // then equals what the threads read plus what the sockets dropped, exactly.
        let mut detach = || program.detach();
        // Datagrams are never retransmitted: nothing arrives long after the sender's end.
        // Stopped early, the FINs the stopped sender still sends end the wait (at most
        // STOP_LINGER later), so the frames it had in flight are counted.
        let ending = SideEnd::Receive {
            until: t0 + spec.total() + RECEIVE_GRACE,
            ended: &ended,
            after_stop: Some(STOP_LINGER),
            before_release: Some(&mut detach),
        };
        let probes = SideProbes { iface: Some(&ifname), udp: &live, ..SideProbes::default() };
        let run = side.run(threads, t0, probes, ending)?;
        let results = &run.results;
        let steer: Vec<SteerCounters> = program.counters(nic_queues)?;
        let (mode, program_note) = (program.mode, program.note.clone());
        drop(program);

        // Per flow: the threads that saw it (RSS keeps a flow on one queue).
        let per_flow: Vec<SeqStats> = (0..flows.len())
            .map(|f| {
                let mut seen = results.iter().map(|r| r.flows[f]).filter(|s| s.received > 0 || s.fin);
                let first = seen.next().unwrap_or_default();
                seen.fold(first, |mut acc, s| {
                    acc.merge(&s);
                    acc
                })
            })
            .collect();
        let outcomes: Vec<FlowOutcome> = per_flow
            .iter()
            .enumerate()
            .map(|(i, s)| FlowOutcome { queue: spec.queue_of_flow(i as u32), bytes: s.bytes, error: None })
            .collect();
        let mut report = side.report(&run, &outcomes);
        let received = UdpFigures::received(&per_flow.iter().collect::<Vec<_>>(), run.window.udp());
        let datagrams = received.datagrams;
        report.udp = Some(received);
        let ipv6 = flows.first().is_some_and(|(ip, _)| ip.is_ipv6());
        let frame_len = spec.len + frame::header_len(ipv6) as u32;
        let figures = receive_figures(results, ifname, (mode, program_note), &steer, frame_len);
        report.xdp = Some(figures);
        report.set_data_path(DataPath::XdpReceive { datagrams });
        Ok(report)
    }
}

/// The AF_XDP figures of a reception: what the threads counted, summed, beside the program's
/// steering counters.
fn receive_figures(
    results: &[XdpRecvResult],
    interface: String,
    (mode, program_note): (AttachMode, Option<String>),
    steer: &[SteerCounters],
    frame_len: u32,
) -> XdpFigures {
    let mut sockets = SocketCounters::default();
    for r in results {
        sockets.add(&r.sockets);
    }
    let notes = first_seen(program_note.into_iter().chain(results.iter().flat_map(|r| r.notes.iter().cloned())));
    let steer_sum = steer.iter().fold(SteerCounters::default(), |a, c| SteerCounters {
        redirected: a.redirected + c.redirected,
        passed: a.passed + c.passed,
        dropped: a.dropped + c.dropped,
    });
    XdpFigures {
        interface,
        nic_queues: results.iter().flat_map(|r| r.nic_queues.iter().copied()).collect(),
        program_mode: Some(mode),
        bind: results.iter().find_map(|r| r.bind),
        need_wakeup: true,
        frame_len,
        frames: results.iter().map(|r| r.frames).sum(),
        produced: 0,
        wakeups: results.iter().map(|r| r.polls).sum(),
        ring_full: 0,
        steer: Some(steer_sum),
        sockets,
        strangers: results.iter().map(|r| r.strangers).sum(),
        malformed: results.iter().map(|r| r.malformed).sum(),
        foreign: results.iter().map(|r| r.foreign).sum(),
        checksum_unverified: results.iter().map(|r| r.checksum_unverified).sum(),
        notes,
    }
}
