//! Bulk stream: the sender writes as fast as allowed, the receiver counts.
//!
//! Both ends agree on the test over the control channel, start when the receiver says
//! `Ready`, measure their own window by their own clock, and the receiver's figures travel
//! back so the sender prints both sides. The headline is the receiver's.

use crate::base::error::{Error, Result};
use crate::base::spec::{Direction, TestSpec, ZeroCopyMode};
use crate::metrics::measure::{sample_window, QueueCounters, SampleSources};
use crate::report::stream::{PathFacts, Role, SideReport, StreamReport};
use crate::runtime::placement::{plan, resolve_cpus, BusyPoll, Placement};
use crate::runtime::threads::{deal_by_queue, QueueThreads};
use crate::session::control::{self, ControlMsg, PROTOCOL_VERSION};
use crate::session::live::{Live, Observer, Quiet, SenderLive, ServerLive, StartInfo};
use crate::sys::netpath::PathProbe;
use crate::sys::probe::KernelCaps;
use crate::sys::sockopt::{self, FlowSocket};
use crate::sys::tcpinfo::TcpInfo;
use crate::transport::tcp::recv::{self as tcp_recv, RecvFlow, RecvWorkerConfig};
use crate::transport::tcp::recv_zc as tcp_recv_zc;
use crate::transport::tcp::send::{self as tcp_send, SendFlow, SendWorkerConfig, ZeroCopyCounts};
use crate::uring::ring::WaitMode;
use crate::uring::ring::WakeBatch;
use std::io::Write;
use std::net::TcpStream;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Buffers per receive ring and their size: 2 MiB per queue thread, small enough to stay
/// mostly in cache, large enough for bundles of dozens of segments.
pub const RECV_BUF_COUNT: u16 = 64;
pub const RECV_BUF_SIZE: u32 = 32 * 1024;
/// A sleeping receive thread is woken once per 8 completions or 200 us, whichever comes
/// first: measured on the veth pair, this cut the waker's CPU (the sender's, where veth runs
/// the receive softirq) enough to raise 16-queue throughput from ~14.5 to ~24 Gbit/s and
/// halve CPU-seconds per GB; larger batches starved the TCP window of a single flow.
pub const RECV_BATCH: WakeBatch = WakeBatch { want: 8, max_delay_us: 200 };

/// Receive low-water mark for unpaced streams: the softirq that queues data (on veth, the
/// sender's CPU) signals the socket once per 128 KiB instead of once per packet. With 16
/// flows on the veth pair this raised throughput from ~24 to ~40 Gbit/s; one flow was
/// unchanged. FIN still wakes the reader, so the tail below the mark is never stranded.
pub const RECV_LOWAT: u32 = 128 * 1024;

/// The low-water mark for a test: at most 1 ms of a paced flow's data, so that interval
/// figures of slow flows stay smooth; none below 4 KiB.
fn recv_lowat(spec: &TestSpec) -> Option<u32> {
    if spec.rate_bps == 0 {
        return Some(RECV_LOWAT);
    }
    let per_flow_bytes_per_ms = spec.rate_bps / 8 / u64::from(spec.flows().max(1)) / 1000;
    let lowat = per_flow_bytes_per_ms.min(u64::from(RECV_LOWAT)) as u32;
    (lowat >= 4096).then_some(lowat)
}

/// A sleeping send thread waits for half its in-flight sends (at most 4) or 200 us.
fn send_batch(inflight: u32) -> WakeBatch {
    WakeBatch { want: (inflight / 2).clamp(1, 4), max_delay_us: 200 }
}

/// How long a receiver waits past the planned end for the flows to finish.
pub const END_GRACE: Duration = Duration::from_secs(10);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// What `uringbench send` asks for.
#[derive(Debug, Clone)]
pub struct SendOptions {
    pub target: String,
    pub port: u16,
    pub spec: TestSpec,
    pub cpus: Option<Vec<usize>>,
    pub busy_poll: BusyPoll,
    /// Where this side's sockets leave from (`-4`/`-6`, `--bind`, `--bind-dev`).
    pub local: crate::sys::sockopt::LocalEnd,
    /// `--psk-file`: authenticate to the receiver (and it to us) before sending the test.
    pub psk: Option<crate::session::auth::Psk>,
}

/// Duplicates of the flows' sockets for the sampler, in flow order: TCP_INFO stays readable
/// after a queue thread closed its own copy, and a reused descriptor number can never be
/// read by mistake.
fn sampler_sockets<'a>(streams: impl Iterator<Item = &'a TcpStream>) -> Result<Vec<TcpStream>> {
    streams.map(|s| s.try_clone().map_err(|e| Error::io("duplicating a flow socket for TCP_INFO", e))).collect()
}

/// Decides whether SEND_ZC is used, and why; warns when the memlock limit will not let the
/// payload buffer be registered (the send then uses unregistered memory, and says so).
fn decide_zerocopy(mode: ZeroCopyMode, caps: &KernelCaps, path: &PathProbe, len: u32) -> Result<(bool, String)> {
    let (used, mut reason) = zerocopy_choice(mode, caps, path, len)?;
    if used && !caps.memlock_allows(u64::from(len)) {
        let limit = caps.memlock_limit.unwrap_or(0);
        reason.push_str(&format!(
            "; RLIMIT_MEMLOCK {limit} bytes is below the {len}-byte buffer to register (raise it: ulimit -l, or run with CAP_IPC_LOCK)"
        ));
    }
    Ok((used, reason))
}

fn zerocopy_choice(mode: ZeroCopyMode, caps: &KernelCaps, path: &PathProbe, len: u32) -> Result<(bool, String)> {
    let egress = path.describe();
    match mode {
        ZeroCopyMode::Off => Ok((false, "--zerocopy off".into())),
        ZeroCopyMode::On if !caps.send_zc => {
            Err(Error::unsupported("--zerocopy on: this kernel lacks IORING_OP_SEND_ZC (Linux 6.0 or newer)"))
        }
        ZeroCopyMode::On => Ok((true, format!("--zerocopy on, egress {egress}"))),
        ZeroCopyMode::Auto => {
            if !caps.send_zc {
                Ok((false, "auto: kernel lacks SEND_ZC".into()))
            } else if path.local_delivery() {
                Ok((false, format!("auto: egress {egress} delivers locally, the kernel would copy anyway")))
            } else if len < 16 * 1024 {
                Ok((false, format!("auto: {len}-byte sends are too small for zero-copy to pay")))
            } else {
                Ok((true, format!("auto: egress {egress} is a NIC")))
            }
        }
    }
}

/// The sender's end of the control channel for one test, shared by the TCP and UDP streams:
/// connect and probe the path, agree on the test, wait for `Ready`, and at the end collect the
/// receiver's report.
pub struct SenderSession {
    pub ctl: TcpStream,
    /// The receiver's control address, for messages.
    pub peer: String,
    pub target_ip: std::net::IpAddr,
    pub path: PathProbe,
    pub caps: KernelCaps,
    pub placement: Placement,
    pub cookie: control::SessionCookie,
    /// crr: the receiver's listening port for the test's connections.
    pub data_port: Option<u16>,
    /// The receiver's placement line, from its accept.
    pub receiver_placement: String,
    psk: Option<crate::session::auth::Psk>,
    /// The authenticated session's key, which the data flows' greetings are tagged with.
    key: Option<crate::session::auth::SessionKey>,
}

impl SenderSession {
    /// Probes the kernel, plans the queue threads, connects the control channel and looks up
    /// the path to the receiver.
    pub fn connect(opts: &SendOptions) -> Result<Self> {
        let caps = KernelCaps::detect()?;
        caps.require_tcp_stream()?;
        let cpus = resolve_cpus(opts.cpus.as_deref())?;
        // Both directions at once put a sending and a receiving thread on each CPU: no spinning.
        let shared = opts.spec.direction == Direction::Bidir;
        let latency_bound = opts.spec.workload.latency_bound();
        let placement = plan(opts.spec.queues, &cpus, opts.busy_poll, shared, latency_bound)?;
        let ctl = control::connect_from(&opts.target, opts.port, CONNECT_TIMEOUT, &opts.local, None)?;
        let peer = ctl.peer_addr().map(|a| a.to_string()).unwrap_or_else(|_| opts.target.clone());
        let target_ip =
            ctl.peer_addr().map_err(|e| Error::io("reading the control peer address", e))?.ip().to_canonical();
        let path = PathProbe::to(target_ip, opts.spec.flows());
        if let (Some(mss), Some(iface)) = (opts.spec.tuning.mss, path.interface()) {
            let mtu = std::fs::read_to_string(format!("/sys/class/net/{iface}/mtu"))
                .ok()
                .and_then(|m| m.trim().parse::<u32>().ok());
            let headers = if target_ip.is_ipv4() { 40 } else { 60 };
            if let Some(mtu) = mtu.filter(|&m| mss + headers > m) {
                return Err(Error::usage(format!(
                    "-M/--mss {mss} does not fit the path: {iface} has MTU {mtu}, so at most {} (MTU - {headers} bytes of headers)",
                    mtu.saturating_sub(headers)
                )));
            }
        }
        Ok(Self {
            ctl,
            peer,
            target_ip,
            path,
            caps,
            placement,
            cookie: [0; 16],
            data_port: None,
            receiver_placement: String::new(),
            psk: opts.psk.clone(),
            key: None,
        })
    }

    /// Sends the hello and waits for the receiver to accept (or refuse) the test.
    pub fn negotiate(&mut self, spec: &TestSpec, udp_ports: Vec<u16>) -> Result<()> {
        let peer = &self.peer;
        self.key = crate::session::auth::open_session(&mut self.ctl, self.psk.as_ref(), peer, REPLY_TIMEOUT)?;
        control::write_msg(&self.ctl, &ControlMsg::Hello { version: PROTOCOL_VERSION, spec: spec.clone(), udp_ports })?;
        self.cookie = match control::read_reply(&mut self.ctl, REPLY_TIMEOUT)? {
            ControlMsg::Accept { cookie, data_port, placement, variant } => {
                if variant != spec.variant {
                    return Err(Error::peer(format!(
                        "receiver {peer} did not apply receiver variant '{}' (a uringbench recv without --variants support)",
                        spec.variant.as_deref().unwrap_or("")
                    )));
                }
                self.data_port = data_port;
                self.receiver_placement = placement;
                cookie
            }
            ControlMsg::Refuse { reason } => {
                return Err(Error::peer(format!("receiver {peer} refused the test: {reason}")))
            }
            other => {
                return Err(Error::protocol(format!("receiver {peer} answered {other:?} instead of accept/refuse")))
            }
        };
        Ok(())
    }

    /// The greeting data flow `flow` opens with (tagged with the session key, when there is one).
    pub fn data_hello(&self, flow: u32) -> Vec<u8> {
        crate::session::auth::data_hello(self.key.as_ref(), &self.cookie, flow)
    }

    /// Waits for the receiver to say every flow is in place.
    pub fn wait_ready(&mut self) -> Result<()> {
        let peer = &self.peer;
        match control::read_reply(&mut self.ctl, REPLY_TIMEOUT)? {
            ControlMsg::Ready => Ok(()),
            ControlMsg::Abort { reason } => Err(Error::peer(format!("receiver {peer} aborted the test: {reason}"))),
            other => Err(Error::protocol(format!("receiver {peer} sent {other:?} instead of ready"))),
        }
    }

    /// The test starts: the far end's messages are watched from now on, and the observer
    /// hears of the start.
    pub fn start_live(&self, spec: &TestSpec, observer: Arc<dyn Observer>) -> Result<SenderLive> {
        // Streams show each interval once both ends' figures are in; transaction tests show
        // the client's alone.
        let paired = spec.workload == crate::base::spec::Workload::Stream;
        let live = SenderLive::start(&self.ctl, Arc::clone(&observer), paired)?;
        observer.started(&StartInfo {
            spec: spec.clone(),
            target: self.peer.clone(),
            sender_placement: self.placement.summary.clone(),
            receiver_placement: self.receiver_placement.clone(),
        });
        Ok(live)
    }

    /// Reads the far side's reports: what it received (forward flows) and what it sent
    /// (reverse flows).
    fn remote_reports(&mut self, live: &SenderLive) -> (Option<SideReport>, Option<SideReport>, Option<String>) {
        let peer = &self.peer;
        match live.watch.recv(END_GRACE + Duration::from_secs(5)) {
            Ok(ControlMsg::Result { report, reverse }) => (report.map(|r| *r), reverse.map(|r| *r), None),
            Ok(ControlMsg::Abort { reason }) => (None, None, Some(format!("receiver aborted: {reason}"))),
            Ok(other) => (None, None, Some(format!("receiver sent {other:?} instead of its report"))),
            Err(e) => (None, None, Some(format!("receiver {peer} vanished before reporting: {e}"))),
        }
    }

    /// What this side learnt of the path, with the drops its counters saw.
    fn path_facts(&self, local: &SideReport) -> PathFacts {
        let host = local.host.as_ref();
        PathFacts {
            egress_interface: self.path.interface().map(str::to_string),
            limits: self.path.limits.clone(),
            interface_drops: host.and_then(|h| h.interface).map_or(0, |i| i.rx_dropped + i.tx_dropped),
            softnet_drops: host.and_then(|h| h.softnet_total).map_or(0, |s| s.dropped),
        }
    }

    /// Forward test: collects the receiver's report and puts both sides together.
    pub fn finish(mut self, spec: &TestSpec, mut sender: SideReport, live: SenderLive) -> StreamReport {
        let (mut receiver, _, error) = self.remote_reports(&live);
        live.attach((Some(&mut sender), receiver.as_mut()), (None, None));
        let error = error.or_else(|| receiver.is_none().then(|| "receiver returned no report".to_string()));
        let path = self.path_facts(&sender);
        let mut report = StreamReport {
            spec: spec.clone(),
            target: self.peer,
            sender,
            receiver,
            error,
            path,
            reverse: None,
            interrupted: None,
        };
        report.mark_interrupted(live.stopped());
        report
    }

    /// Reverse test: this side received; the far side's report is the sender's.
    pub fn finish_reverse(mut self, spec: &TestSpec, mut receiver: SideReport, live: SenderLive) -> StreamReport {
        let (_, mut remote_sender, error) = self.remote_reports(&live);
        live.attach((None, None), (remote_sender.as_mut(), Some(&mut receiver)));
        let path = self.path_facts(&receiver);
        let mut report = reverse_report(spec, &self.peer, remote_sender, receiver, error, path);
        report.mark_interrupted(live.stopped());
        report
    }

    /// Both directions: the forward report carries the reverse one.
    pub fn finish_bidir(
        mut self,
        spec: &TestSpec,
        mut sender: SideReport,
        mut receiver: SideReport,
        live: SenderLive,
    ) -> StreamReport {
        let (mut remote_receiver, mut remote_sender, error) = self.remote_reports(&live);
        live.attach((Some(&mut sender), remote_receiver.as_mut()), (remote_sender.as_mut(), Some(&mut receiver)));
        let path = self.path_facts(&sender);
        let mut reverse = reverse_report(spec, &self.peer, remote_sender, receiver, error.clone(), path.clone());
        let stopped = live.stopped();
        reverse.mark_interrupted(stopped.clone());
        let mut report = StreamReport {
            spec: spec.clone(),
            target: self.peer,
            sender,
            receiver: remote_receiver,
            error,
            path,
            reverse: Some(Box::new(reverse)),
            interrupted: None,
        };
        report.mark_interrupted(stopped);
        report
    }
}

/// The report of data sent by the far side to this one. A missing sender report is an empty
/// sender side with the error that explains it.
fn reverse_report(
    spec: &TestSpec,
    peer: &str,
    remote_sender: Option<SideReport>,
    receiver: SideReport,
    error: Option<String>,
    path: PathFacts,
) -> StreamReport {
    let error = error.or_else(|| remote_sender.is_none().then(|| "the far side returned no sender report".to_string()));
    let sender = remote_sender.unwrap_or_else(|| SideReport::build(Role::Sender, spec, &Default::default(), &[], &[]));
    StreamReport {
        spec: spec.clone(),
        target: peer.to_string(),
        sender,
        receiver: Some(receiver),
        error,
        path,
        reverse: None,
        interrupted: None,
    }
}

/// Runs a stream test against `recv` at `opts.target` (TCP or UDP), in the direction the spec
/// asks: forward (this side sends), reverse (the receiver's host sends back over flows this
/// side opened) or both at once.
///
/// Errors before the test starts (unreachable, refused, bad options) come back as `Err`; once
/// data flows, problems are recorded in the report (`complete() == false`) so the partial
/// figures are still shown.
pub fn run_send(opts: &SendOptions) -> Result<StreamReport> {
    run_send_live(opts, Arc::new(Quiet))
}

/// [`run_send`], with `observer` told of the start and of each interval as it closes.
pub fn run_send_live(opts: &SendOptions, observer: Arc<dyn Observer>) -> Result<StreamReport> {
    if opts.spec.proto == crate::base::spec::Proto::Udp {
        return super::udp_stream::run_send_udp(opts, observer);
    }
    let spec = &opts.spec;
    let mut session = SenderSession::connect(opts)?;
    let zc = decide_zerocopy(spec.zerocopy, &session.caps, &session.path, spec.len)?;
    session.negotiate(spec, Vec::new())?;
    let peer = session.peer.clone();
    let mut flows = Vec::with_capacity(spec.flows() as usize);
    for flow in 0..spec.data_connections() {
        let mut stream =
            control::connect_from(&opts.target, opts.port, CONNECT_TIMEOUT, &opts.local, Some(&spec.tuning))?;
        stream
            .write_all(&session.data_hello(flow))
            .map_err(|e| Error::peer(format!("opening data flow {flow} to {peer}: {e}")))?;
        flows.push((flow, stream));
    }
    session.wait_ready()?;
    let live = session.start_live(spec, observer)?;
    let iface = session.path.interface().map(str::to_string);
    let (forward, reverse) = split_by_direction(spec, flows);
    let sending = |flows: Vec<(u32, TcpStream)>| {
        send_side(spec, flows, &session.placement, &session.caps, &zc, iface.as_deref(), Instant::now(), &live)
    };
    let receiving = |flows: Vec<(u32, TcpStream)>| {
        receive_side(spec, flows, &session.placement, &session.caps, iface.as_deref(), &live)
    };
    match spec.direction {
        Direction::Forward => {
            let sender = sending(forward)?;
            Ok(session.finish(spec, sender, live))
        }
        Direction::Reverse => {
            let receiver = receiving(reverse)?;
            Ok(session.finish_reverse(spec, receiver, live))
        }
        Direction::Bidir => {
            let (sender, receiver) = std::thread::scope(|scope| {
                let tx = scope.spawn(|| sending(forward));
                let rx = receiving(reverse);
                (tx.join().unwrap_or_else(|_| Err(tcp_send::worker_panicked())), rx)
            });
            Ok(session.finish_bidir(spec, sender?, receiver?, live))
        }
    }
}

/// A data connection with its flow index.
pub type Indexed<T> = (u32, T);

/// Splits the data connections of a test: forward flows (sender to receiver) come first,
/// reverse flows (receiver's host back to the sender's) after them.
pub fn split_by_direction<T>(spec: &TestSpec, flows: Vec<Indexed<T>>) -> (Vec<Indexed<T>>, Vec<Indexed<T>>) {
    let n = spec.flows();
    match spec.direction {
        Direction::Forward => (flows, Vec::new()),
        Direction::Reverse => (Vec::new(), flows),
        Direction::Bidir => {
            let (fwd, rev): (Vec<_>, Vec<_>) = flows.into_iter().partition(|(i, _)| *i < n);
            (fwd, rev.into_iter().map(|(i, s)| (i - n, s)).collect())
        }
    }
}

/// The sending half of a test over connected TCP flows: queue threads write until the
/// planned end, the sampler measures the window, the flows are half-closed.
// One argument per thing a sending side needs from its caller; bundling them would only
// move the list into a struct used here alone.
#[allow(clippy::too_many_arguments)]
pub fn send_side(
    spec: &TestSpec,
    flows: Vec<(u32, TcpStream)>,
    placement: &Placement,
    caps: &KernelCaps,
    zc: &(bool, String),
    iface: Option<&str>,
    t0: Instant,
    live: &dyn Live,
) -> Result<SideReport> {
    let zerocopy = zc.0;
    let halt = Arc::new(AtomicBool::new(false));
    tune_flows(spec, &flows, true)?;
    let probes = sampler_sockets(flows.iter().map(|(_, f)| f))?;
    let counters = Arc::new(QueueCounters::new(spec.queues as usize));
    let items = flows
        .into_iter()
        .map(|(flow, stream)| {
            let queue = spec.queue_of_flow(flow);
            (queue, SendFlow { stream, queue, budget: spec.tuning.flow_bytes(flow, spec.flows()) })
        })
        .collect();
    let per_thread = deal_by_queue(&placement.threads, items);
    let total_flows = spec.flows().max(1) as u64;
    let inputs: Vec<(Vec<SendFlow>, SendWorkerConfig)> = per_thread
        .into_iter()
        .map(|flows| {
            let cfg = SendWorkerConfig {
                wait: placement.wait,
                batch: send_batch(flows.len() as u32 * spec.depth),
                len: spec.len,
                depth: spec.depth,
                zerocopy,
                deadline: t0 + spec.total(),
                halt: Some(Arc::clone(&halt)),
                rate_bps: spec.rate_bps * flows.len() as u64 / total_flows,
                drain_limit: Duration::from_secs(5),
            };
            (flows, cfg)
        })
        .collect();
    let worker_counters = Arc::clone(&counters);
    let threads = QueueThreads::spawn(&placement.threads, inputs, move |(flows, cfg)| {
        tcp_send::run(flows, &worker_counters, &cfg)
    })?;
    let fds: Vec<RawFd> = probes.iter().map(|p| p.as_raw_fd()).collect();
    let src = SampleSources { counters: &counters, tids: &threads.tids, sockets: &fds, iface, udp: &[] };
    let finished = || threads.all_finished() || live.stopped().is_some();
    let window = sample_window(t0, spec.sample_offsets(), &src, &finished, &mut |iv| live.interval(Role::Sender, iv));
    if live.stopped().is_some() {
        // Stopped early: the flows end now (drained and half-closed), not after the cool-down.
        halt.store(true, std::sync::atomic::Ordering::Relaxed);
    }
    let plans: Vec<_> = placement.threads.iter().cloned().zip(threads.tids.iter().copied()).collect();
    let results = threads.join()?;
    let tcp_end: Vec<Option<TcpInfo>> = fds.iter().map(|&fd| TcpInfo::read(fd)).collect();
    let flow_sockets: Vec<FlowSocket> = probes.iter().map(FlowSocket::read).collect();
    drop(probes);

    let outcomes: Vec<_> = results.iter().flat_map(|r| r.flows.iter().cloned()).collect();
    let mut zc_counts = ZeroCopyCounts::default();
    results.iter().for_each(|r| zc_counts.merge(&r.zerocopy));
    let mut sender = SideReport::build(Role::Sender, spec, &window, &outcomes, &plans);
    if let Some(reason) = live.stopped() {
        sender.stopped_early(spec, &reason);
    }
    sender.tcp_flows_end = tcp_end;
    let window_note = sockopt::window_note(&spec.tuning, &flow_sockets);
    sender.flow_sockets = flow_sockets;
    sender.placement = placement.summary.clone();
    sender.path = format!(
        "io_uring {} of {} B, {} in flight per flow{}",
        if zerocopy { "SEND_ZC" } else { "SEND (copy)" },
        spec.len,
        spec.depth,
        if caps.defer_taskrun { ", single-issuer deferred task run" } else { "" }
    ) + &wake_note(placement.wait, send_batch(spec.depth), caps)
        + &window_note.map_or(String::new(), |n| format!("; {n}"));
    // A fallback is not an error: the test ran, by copying; the zero-copy line says why.
    let used = zerocopy && results.iter().all(|r| r.zerocopy_used);
    let reason = match results.iter().find_map(|r| r.note.clone()) {
        Some(note) => format!("{}; {note}", zc.1),
        None => zc.1.clone(),
    };
    sender.set_zerocopy(&format!("{:?}", spec.zerocopy).to_lowercase(), used, reason, &zc_counts);
    Ok(sender)
}

/// The receiving side of an accepted forward test on `recv`: arms every flow, says `Ready`,
/// then measures like [`receive_side`].
pub fn run_receive(
    ctl: &mut TcpStream,
    spec: &TestSpec,
    flows: Vec<(u32, TcpStream)>,
    placement: &Placement,
    caps: &KernelCaps,
    live: &ServerLive,
) -> Result<SideReport> {
    // Data that arrives before the queue threads arm their receives waits in the socket
    // buffers, so saying Ready first loses nothing.
    control::write_msg(ctl, &ControlMsg::Ready)?;
    let iface = ctl.peer_addr().ok().and_then(|a| crate::sys::hostinfo::route_to(a.ip()).ok()).map(|r| r.ifname);
    receive_side(spec, flows, placement, caps, iface.as_deref(), live)
}

/// The serving side of an accepted test on `recv`, whatever its direction: receives forward
/// flows, sends on reverse flows, both at once for `--bidir`. Returns the report of what it
/// received (forward) and of what it sent (reverse).
pub fn serve_test(
    ctl: &mut TcpStream,
    spec: &TestSpec,
    flows: Vec<(u32, TcpStream)>,
    placement: &Placement,
    caps: &KernelCaps,
) -> Result<(Option<SideReport>, Option<SideReport>)> {
    let live = ServerLive::start(ctl)?;
    if spec.direction == Direction::Forward {
        return run_receive(ctl, spec, flows, placement, caps, &live).map(|r| (Some(r), None));
    }
    let peer_ip = ctl.peer_addr().map_err(|e| Error::io("reading the control peer address", e))?.ip().to_canonical();
    let path = PathProbe::to(peer_ip, spec.flows());
    let zc = decide_zerocopy(spec.zerocopy, caps, &path, spec.len)?;
    control::write_msg(ctl, &ControlMsg::Ready)?;
    let t0 = Instant::now();
    let iface = path.interface();
    let (forward, reverse) = split_by_direction(spec, flows);
    if spec.direction == Direction::Reverse {
        return send_side(spec, reverse, placement, caps, &zc, iface, t0, &live).map(|s| (None, Some(s)));
    }
    let (received, sent) = std::thread::scope(|scope| {
        let tx = scope.spawn(|| send_side(spec, reverse, placement, caps, &zc, iface, t0, &live));
        let rx = receive_side(spec, forward, placement, caps, iface, &live);
        (rx, tx.join().unwrap_or_else(|_| Err(tcp_send::worker_panicked())))
    });
    Ok((Some(received?), Some(sent?)))
}

/// The receiving half of a test over connected TCP flows: arms every flow, measures the
/// window by this side's clock from now, and waits for the flows to reach EOF.
pub fn receive_side(
    spec: &TestSpec,
    flows: Vec<(u32, TcpStream)>,
    placement: &Placement,
    caps: &KernelCaps,
    iface: Option<&str>,
    live: &dyn Live,
) -> Result<SideReport> {
    let counters = Arc::new(QueueCounters::new(spec.queues as usize));
    let stop = Arc::new(AtomicBool::new(false));
    tune_flows(spec, &flows, false)?;
    let probes = sampler_sockets(flows.iter().map(|(_, s)| s))?;
    let items = flows
        .into_iter()
        .map(|(flow, stream)| {
            let queue = spec.queue_of_flow(flow);
            (queue, RecvFlow { stream, queue })
        })
        .collect();
    let cfg = RecvWorkerConfig {
        wait: placement.wait,
        batch: RECV_BATCH,
        buf_count: RECV_BUF_COUNT,
        buf_size: RECV_BUF_SIZE,
        bundle: caps.recvsend_bundle,
        rcvlowat: recv_lowat(spec),
        stop: Arc::clone(&stop),
        skip_copy: spec.tuning.skip_rx_copy,
    };
    let worker_counters = Arc::clone(&counters);
    let zc_rx = crate::uring::fastpath::current().zc_rx.as_ref();
    // With --zc-rx, thread i receives from NIC queue first_queue + i.
    let inputs: Vec<(u32, Vec<RecvFlow>)> = (0..).zip(deal_by_queue(&placement.threads, items)).collect();
    let threads = QueueThreads::spawn(&placement.threads, inputs, move |(thread, flows)| match zc_rx {
        Some(zc) => tcp_recv_zc::run(flows, &worker_counters, &cfg, zc, zc.first_queue + thread),
        None => tcp_recv::run(flows, &worker_counters, &cfg),
    })?;
    let t0 = Instant::now();
    let fds: Vec<RawFd> = probes.iter().map(|p| p.as_raw_fd()).collect();
    let napi = crate::uring::fastpath::napi_evidence(&fds);
    let src = SampleSources { counters: &counters, tids: &threads.tids, sockets: &fds, iface, udp: &[] };
    let finished = || threads.all_finished() || live.stopped().is_some();
    let window = sample_window(t0, spec.sample_offsets(), &src, &finished, &mut |iv| live.interval(Role::Receiver, iv));
    // Stopped early, the far sender ends its flows too: they reach EOF within the grace.
    let hard_end = t0 + spec.total() + END_GRACE;
    while !threads.all_finished() && Instant::now() < hard_end {
        std::thread::sleep(Duration::from_millis(5));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let plans: Vec<_> = placement.threads.iter().cloned().zip(threads.tids.iter().copied()).collect();
    let results = threads.join()?;
    let tcp_end: Vec<Option<TcpInfo>> = fds.iter().map(|&fd| TcpInfo::read(fd)).collect();
    let flow_sockets: Vec<FlowSocket> = probes.iter().map(FlowSocket::read).collect();
    drop(probes);
    let outcomes: Vec<_> = results.iter().flat_map(|r| r.flows.iter().cloned()).collect();
    let completions: u64 = results.iter().map(|r| r.completions).sum();
    let rearms: u64 = results.iter().map(|r| r.rearms).sum();
    let mut report = SideReport::build(Role::Receiver, spec, &window, &outcomes, &plans);
    if let Some(reason) = live.stopped() {
        report.stopped_early(spec, &reason);
    }
    report.tcp_flows_end = tcp_end;
    let window_note = sockopt::window_note(&spec.tuning, &flow_sockets);
    report.flow_sockets = flow_sockets;
    report.placement = placement.summary.clone();
    let total: u64 = outcomes.iter().map(|o| o.bytes).sum();
    report.path = match zc_rx {
        Some(zc) => format!(
            "io_uring multishot RECV_ZC (zero-copy) from {} queues {}..{}, {} MiB area per thread, {:.0} KiB per completion, {} re-arms",
            zc.iface,
            zc.first_queue,
            zc.first_queue + placement.threads.len() as u32 - 1,
            crate::uring::zcrx::AREA_BYTES >> 20,
            total as f64 / completions.max(1) as f64 / 1024.0,
            rearms,
        ),
        None => format!(
            "io_uring multishot RECV{}{}, {} x {} KiB buffer ring per thread, SO_RCVLOWAT {}, {:.0} KiB per completion, {} re-arms{}",
            if caps.recvsend_bundle { " bundles" } else { "" },
            if spec.tuning.skip_rx_copy { " with MSG_TRUNC (payload discarded in the kernel, not copied)" } else { "" },
            RECV_BUF_COUNT,
            RECV_BUF_SIZE / 1024,
            recv_lowat(spec).map_or("default".to_string(), |b| format!("{} KiB", b / 1024)),
            total as f64 / completions.max(1) as f64 / 1024.0,
            rearms,
            wake_note(placement.wait, RECV_BATCH, caps)
        ),
    };
    if let Some(napi) = napi {
        report.path.push_str("; ");
        report.path.push_str(&napi);
    }
    if let Some(note) = window_note {
        report.path.push_str("; ");
        report.path.push_str(&note);
    }
    Ok(report)
}

/// Applies the test's knobs to each flow this side holds (`sends`: the flows it sends on).
fn tune_flows(spec: &TestSpec, flows: &[(u32, TcpStream)], sends: bool) -> Result<()> {
    for (flow, stream) in flows {
        sockopt::apply_tuning(stream, &spec.tuning, sends)
            .map_err(|e| Error::io(format!("setting the test's socket options on flow {flow}"), e))?;
    }
    Ok(())
}

/// Says how sleeping threads are woken, when they sleep at all.
fn wake_note(wait: WaitMode, batch: WakeBatch, caps: &KernelCaps) -> String {
    if wait == WaitMode::Spin || batch.want <= 1 {
        String::new()
    } else if caps.min_wait_timeout {
        format!(", woken per {} completions or {} us", batch.want, batch.max_delay_us)
    } else {
        ", woken per completion (kernel lacks IORING_FEAT_MIN_TIMEOUT for batched wake-ups)".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn low_water_mark_follows_the_rate() {
        let unpaced = TestSpec::default();
        assert_eq!(recv_lowat(&unpaced), Some(RECV_LOWAT), "unpaced streams use the full mark");
        let fast = TestSpec { rate_bps: 100_000_000_000, ..TestSpec::default() };
        assert_eq!(recv_lowat(&fast), Some(RECV_LOWAT), "fast paced flows are capped at the full mark");
        let mid = TestSpec { rate_bps: 1_000_000_000, queues: 2, ..TestSpec::default() };
        assert_eq!(recv_lowat(&mid), Some(62_500), "1 ms of a 500 Mbit/s flow");
        let slow = TestSpec { rate_bps: 10_000_000, ..TestSpec::default() };
        assert_eq!(recv_lowat(&slow), None, "slow flows keep the kernel default");
    }
}

#[cfg(test)]
mod direction_tests {
    use super::*;

    #[test]
    fn bidir_splits_forward_first_and_renumbers_reverse() {
        let spec = TestSpec { queues: 2, direction: Direction::Bidir, ..TestSpec::default() };
        assert_eq!(spec.data_connections(), 4, "one set of flows each way");
        let (fwd, rev) = split_by_direction(&spec, (0..4).map(|i| (i, i * 10)).collect());
        assert_eq!(fwd, vec![(0, 0), (1, 10)]);
        assert_eq!(rev, vec![(0, 20), (1, 30)], "reverse flows are numbered from 0 again");
        let reverse = TestSpec { direction: Direction::Reverse, ..spec };
        let (fwd, rev) = split_by_direction(&reverse, vec![(0, 'a'), (1, 'b')]);
        assert!(fwd.is_empty() && rev.len() == 2, "--reverse: every flow carries data back");
    }
}
