//! NTttcp's no-sync mode (`ntttcp.exe -ns`, ntttcp-for-Linux `-N`), TCP and UDP, in both roles: the
//! way a Windows VM and a Linux VM are measured against each other, with uringbench as the
//! Linux end. There is no control connection: the receiver listens on consecutive ports from a
//! base port (5001 by default), one per NTttcp thread; the sender opens its connections to
//! them (one per thread with `ntttcp.exe -m N,*,IP`, `-n` per port with ntttcp-for-Linux),
//! sends plain data for its test time and closes; each side reports what it moved.
//!
//! - [`run_send`]: `send --ntttcp`: flow i of queue q connects to base + q, and the stream
//!   workload's sending half moves the bytes, half-closing every connection at the end.
//! - [`serve`]: `recv --ntttcp`: listeners on base..base+P-1; every accepted connection is
//!   counted to EOF by the io_uring receive loop on a thread of its own. A test begins with
//!   the first connection and ends when every connection reached EOF and none came for
//!   [`QUIET`] (or at `--max-time`).
//! - [`udp::serve_udp`]: `recv --ntttcp -u`: one UDP socket per port, datagrams counted
//!   within NTttcp's window (warm-up, time, cool-down) from the first one's arrival.

use crate::base::error::{Error, Result};
use crate::base::spec::{Direction, Proto, TestSpec};
use crate::compat::udp::{self as compat_udp, UdpWire};
use crate::compat::{
    client_halves, connect_tcp, count_to_eof, received_report, resolve, shown, stream_report, Intervals,
    PeerRecvOptions,
};
use crate::compat::{Listening, PeerEvent, PeerEventSink};
use crate::metrics::data_path::DataPath;
use crate::metrics::figures::{Roles, StreamReport};
use crate::metrics::measure::QueueCounters;
use crate::runtime::placement::{plan, resolve_cpus, Placement};
use crate::runtime::side::halves::StreamHalves;
use crate::session::gate;
use crate::session::live::StartInfo;
use crate::session::sender::SendOptions;
use crate::sys::netpath::PathProbe;
use crate::wire::udp_payload::DatagramHeader;
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod udp;

pub use crate::wire::NTTTCP_PORT;
pub use udp::{bind_udp_receiver, serve_udp, NtttcpWindow};
/// A receiving test is over once every connection ended and no new one came for this long.
const QUIET: Duration = Duration::from_secs(1);
/// How often the accept loop looks at its listeners.
const POLL: Duration = Duration::from_millis(10);

/// A test against an NTttcp receiver: the native report, with no receiver side (NTttcp
/// reports in its own output).
#[derive(Debug, Clone)]
pub struct NtttcpReport {
    pub stream: StreamReport,
    pub base_port: u16,
}

impl NtttcpReport {
    pub fn complete(&self) -> bool {
        self.stream.error.is_none() && self.stream.sender.complete
    }

    pub fn first_error(&self) -> Option<String> {
        self.stream.first_error()
    }
}

/// The receiver's command lines that match `-P ports` from `base`: Windows, then Linux.
pub fn receiver_commands(ports: u32, base: u16) -> String {
    let port = if base == NTTTCP_PORT { String::new() } else { format!(" -p {base}") };
    format!("`ntttcp.exe -r -m {ports},*,RECEIVER_IP -ns -t T{port}` or `ntttcp -r -N -P {ports} -t T{port}`")
}

/// Runs our sender against NTttcp receivers on `opts.target`, ports `opts.port` (the base) up.
pub fn run_send(opts: &SendOptions) -> Result<NtttcpReport> {
    let spec = opts.spec.clone();
    if spec.direction != Direction::Forward {
        return Err(Error::usage("--ntttcp sends only: run `recv --ntttcp` here for the other direction"));
    }
    if u32::from(opts.port) + spec.queues > 65536 {
        return Err(Error::usage(format!(
            "ports {}..{} run past 65535",
            opts.port,
            u32::from(opts.port) + spec.queues - 1
        )));
    }
    spec.validate()?;
    let caps = opts.kernel.clone();
    caps.require_tcp_stream()?;
    let placement = plan(spec.queues, &resolve_cpus(opts.cpus.as_deref())?, opts.busy_poll, false, false, &opts.fast)?;
    let first = resolve(&opts.target, opts.port, opts.local.family)?;
    let path = PathProbe::to(first.ip(), spec.flows());
    let live = Intervals::new(&opts.stop);
    let receiver = receiver_commands(spec.queues, opts.port);
    if spec.proto == Proto::Udp {
        return send_udp(opts, spec, first.ip(), &placement, path, live);
    }
    let mut flows = Vec::with_capacity(spec.flows() as usize);
    for flow in 0..spec.flows() {
        let port = opts.port + spec.queue_of_flow(flow) as u16;
        let local = opts.local.for_flow(flow).map_err(Error::usage)?;
        flows.push((flow, connect_tcp(SocketAddr::new(first.ip(), port), &local, &receiver)?));
    }
    let halves = client_halves(&spec, &placement, &caps, &path)?;
    let mut sender = halves.send(flows, Instant::now(), &live)?;
    sender.add_path_notes([format!(
        "NTttcp no-sync: queue q's flows to port {}+q, plain data, half-close at the end",
        opts.port
    )]);
    let stream = stream_report(spec, first, sender, None, None, &path, &live);
    Ok(NtttcpReport { stream, base_port: opts.port })
}

/// UDP no-sync: queue q's flows send datagrams to port base + q until the end, paced by
/// `-b`; NTttcp's UDP receiver counts what arrives during its own test time. No end marker.
fn send_udp(
    opts: &SendOptions,
    spec: TestSpec,
    ip: IpAddr,
    placement: &Placement,
    path: PathProbe,
    live: Intervals,
) -> Result<NtttcpReport> {
    let sockets = (0..spec.flows())
        .map(|flow| {
            let to = SocketAddr::new(ip, opts.port + spec.queue_of_flow(flow) as u16);
            let local = opts.local.for_flow(flow).map_err(Error::usage)?;
            compat_udp::connect_udp(to, &local).map_err(|e| Error::io(format!("opening a UDP flow to {to}"), e))
        })
        .collect::<Result<Vec<_>>>()?;
    let wire = UdpWire { header: DatagramHeader::Native, fin: None, serving: false };
    let mut sender = compat_udp::send_udp(&spec, sockets, placement, path.interface(), &live, wire, |send| {
        DataPath::UdpSend { send, len: spec.len, iperf2: false }
    })?
    .side;
    sender.add_path_notes([format!("NTttcp no-sync UDP: queue q's flows to port {}+q, no end marker", opts.port)]);
    let stream = stream_report(spec, SocketAddr::new(ip, opts.port), sender, None, None, &path, &live);
    Ok(NtttcpReport { stream, base_port: opts.port })
}

/// What `recv --ntttcp` tells: a test begins at its first connection (TCP) or datagram (UDP),
/// with the ports as queues; a connection over the cap, or after `--once`'s test, is dropped.
pub type NtttcpEvent = PeerEvent<NtttcpTestSummary>;

pub type NtttcpEventSink = PeerEventSink<NtttcpTestSummary>;

/// One finished receiving test.
#[derive(Debug, Clone, Default)]
pub struct NtttcpTestSummary {
    pub id: u64,
    /// The senders' addresses, in order of first connection.
    pub peers: Vec<IpAddr>,
    pub connections: u32,
    /// Bytes per port, from the base port up (UDP: within the window).
    pub port_bytes: Vec<u64>,
    /// UDP: datagrams per port within the window.
    pub port_datagrams: Option<Vec<u64>>,
    /// Every byte received, in the window or not.
    pub received_bytes: u64,
    /// UDP: the window the counts are from.
    pub window: Option<NtttcpWindow>,
    /// TCP: from the first accept to the last EOF. UDP: the counted part of the window.
    pub seconds: f64,
    pub errors: Vec<String>,
    /// The test as the native report has it (`recv --ntttcp -J`): one queue per port, our
    /// counts as the receiver's side; the sender's side is empty (NTttcp tells us nothing).
    pub report: Option<Box<StreamReport>>,
}

impl NtttcpTestSummary {
    pub fn bytes(&self) -> u64 {
        self.port_bytes.iter().sum()
    }

    pub fn bits_per_second(&self) -> f64 {
        crate::metrics::figures::rate(self.bytes(), self.seconds)
    }
}

/// What `--json-stream`'s `start` says of a test as its first sender arrives: `ports` queues,
/// our address `local` it reached, the window (UDP).
fn start_info(proto: Proto, ports: usize, local: SocketAddr, peer: IpAddr, window: Option<NtttcpWindow>) -> StartInfo {
    let window = window.unwrap_or_default();
    let ms = |d: Duration| d.as_millis() as u64;
    StartInfo {
        spec: TestSpec {
            proto,
            queues: ports.max(1) as u32,
            flows_per_queue: 1,
            time_ms: ms(window.time),
            warmup_ms: ms(window.warmup),
            cooldown_ms: ms(window.cooldown),
            ..TestSpec::default()
        },
        target: local.to_string(),
        roles: Roles::inbound(peer.to_string()),
        this_placement: "uringbench recv --ntttcp: a thread per connection (TCP) or port (UDP)".into(),
        far_placement: "NTttcp sender".into(),
    }
}

impl NtttcpTestSummary {
    /// Sets [`Self::report`]: `flows` are (port index, bytes over the whole test) of each
    /// connection (TCP) or port (UDP); `local` is our address the sender reached.
    fn with_report(mut self, proto: Proto, local: String, flows: &[(u32, u64)]) -> Self {
        let ports = self.port_bytes.len().max(1) as u32;
        let window = self.window.unwrap_or_default();
        let ms = |d: Duration| d.as_millis() as u64;
        let spec = TestSpec {
            proto,
            queues: ports,
            flows_per_queue: (flows.len() as u32).div_ceil(ports).max(1),
            time_ms: if self.window.is_some() { ms(window.time) } else { (self.seconds * 1e3) as u64 },
            warmup_ms: ms(window.warmup),
            cooldown_ms: ms(window.cooldown),
            ..TestSpec::default()
        };
        let peer = self.peers.first().copied().unwrap_or(IpAddr::from([0, 0, 0, 0]));
        let mut report = received_report(spec, (local, peer), "ntttcp", (flows, self.seconds), self.errors.clone());
        if let Some(side) = report.receiver.as_mut() {
            // Over UDP only the window's bytes are counted; the totals are every byte.
            for (q, &bytes) in side.queues.iter_mut().zip(&self.port_bytes) {
                q.bytes = bytes;
            }
        }
        self.report = Some(Box::new(report));
        self
    }
}

/// Binds `ports` listeners from `opts.port` up; a port in use is a usage error.
pub fn bind_receiver(opts: &PeerRecvOptions, ports: u32) -> Result<Vec<TcpListener>> {
    check_ports(opts, ports)?;
    (0..ports)
        .map(|i| {
            let addr = SocketAddr::new(opts.bind, opts.port + i as u16);
            gate::listen(addr, None, " (an NTttcp receiver?)")
        })
        .collect()
}

/// `ports` ports from `opts.port` fit in 1..65535.
fn check_ports(opts: &PeerRecvOptions, ports: u32) -> Result<()> {
    if ports == 0 || u32::from(opts.port) + ports > 65536 || opts.port == 0 {
        return Err(Error::usage(format!("--ports {ports} from --ntttcp-port {} does not fit in 1..65535", opts.port)));
    }
    Ok(())
}

/// A counted connection's end: its bytes, its errors, when it reached EOF.
type FlowDone = (u64, Vec<String>, Instant);

/// One accepted connection being counted.
struct Counting {
    port: usize,
    done: Arc<Mutex<Option<FlowDone>>>,
    /// Our address the sender reached.
    local: Option<SocketAddr>,
}

/// Serves NTttcp senders until stopped, or until the first test with `once`; whether that
/// test was complete (always true without `once`).
pub fn serve(opts: PeerRecvOptions, listeners: Vec<TcpListener>, events: NtttcpEventSink) -> Result<bool> {
    let kernel = opts.kernel.clone();
    kernel.require_tcp_stream()?;
    let caps = opts.caps();
    for l in &listeners {
        l.set_nonblocking(true).map_err(|e| Error::io("making a listener non-blocking", e))?;
    }
    events(NtttcpEvent::Listening(Listening {
        tcp: Some(SocketAddr::new(opts.bind, opts.port)),
        udp: None,
        ports: listeners.len() as u32,
        caps,
        authorized_users: None,
    }));
    let stop_flows = Arc::new(AtomicBool::new(false));
    let mut next_id = 0;
    let mut test: Option<(NtttcpTestSummary, Instant, Vec<Counting>, Instant)> = None;
    loop {
        if opts.stop.is_stopped() {
            stop_flows.store(true, Ordering::Relaxed);
            return Ok(true);
        }
        let now = Instant::now();
        for (port, l) in listeners.iter().enumerate() {
            while let Ok((stream, peer)) = l.accept() {
                let peer = shown(peer);
                let open = test
                    .as_ref()
                    .map_or(0, |t| t.2.iter().filter(|c| c.done.lock().map_or(true, |d| d.is_none())).count());
                if open >= caps.flows as usize {
                    events(NtttcpEvent::Dropped {
                        peer,
                        reason: format!("over the limit of {} connections", caps.flows),
                    });
                    continue;
                }
                if test.is_none() {
                    next_id += 1;
                    let summary =
                        NtttcpTestSummary { id: next_id, port_bytes: vec![0; listeners.len()], ..Default::default() };
                    test = Some((summary, now, Vec::new(), now));
                    let local = stream.local_addr().map(shown).unwrap_or(peer);
                    events(NtttcpEvent::Started(start_info(Proto::Tcp, listeners.len(), local, peer.ip(), None)));
                }
                let Some(t) = test.as_mut() else { continue };
                if !t.0.peers.contains(&peer.ip()) {
                    t.0.peers.push(peer.ip());
                }
                t.3 = now;
                let local = stream.local_addr().ok().map(shown);
                let done = Arc::new(Mutex::new(None));
                let (flow_done, flow_opts, flow_kernel, stop) =
                    (Arc::clone(&done), opts.clone(), kernel.clone(), Arc::clone(&stop_flows));
                let spawned = std::thread::Builder::new().name("ub-ntttcp-rx".into()).spawn(move || {
                    let (bytes, errors) =
                        count_to_eof(stream, &flow_opts, &flow_kernel, (0, 1), stop, &QueueCounters::new(1));
                    *flow_done.lock().unwrap_or_else(|p| p.into_inner()) = Some((bytes, errors, Instant::now()));
                });
                match spawned {
                    Ok(_) => t.2.push(Counting { port, done, local }),
                    Err(e) => events(NtttcpEvent::Dropped { peer, reason: format!("no thread for it: {e}") }),
                }
            }
        }
        if let Some((_, started, flows, last)) = &test {
            let ended: Vec<Option<Instant>> =
                flows.iter().map(|c| c.done.lock().unwrap_or_else(|p| p.into_inner()).as_ref().map(|d| d.2)).collect();
            let all_done = ended.iter().all(Option::is_some);
            let last_end = ended.iter().flatten().max().copied().unwrap_or(*last).max(*last);
            let over_time = now.duration_since(*started) > opts.max_time;
            if over_time {
                stop_flows.store(true, Ordering::Relaxed);
            }
            if all_done && (over_time || now.duration_since(last_end) >= QUIET) {
                let (mut summary, started, flows, _) = test.take().expect("a test");
                let mut counted = Vec::with_capacity(flows.len());
                for c in &flows {
                    if let Some((bytes, errors, _)) = c.done.lock().unwrap_or_else(|p| p.into_inner()).take() {
                        summary.port_bytes[c.port] += bytes;
                        summary.errors.extend(errors);
                        counted.push((c.port as u32, bytes));
                    }
                }
                let local = flows.iter().find_map(|c| c.local).map_or_else(String::new, |a| a.to_string());
                summary.connections = flows.len() as u32;
                summary.received_bytes = summary.bytes();
                summary.seconds = last_end.duration_since(started).as_secs_f64();
                if over_time {
                    summary.errors.push(format!("still sending after --max-time {} s", opts.max_time.as_secs()));
                }
                stop_flows.store(false, Ordering::Relaxed);
                let summary = summary.with_report(Proto::Tcp, local, &counted);
                let complete = summary.errors.is_empty();
                events(NtttcpEvent::TestDone(summary));
                if opts.once {
                    return Ok(complete);
                }
            }
        }
        std::thread::sleep(POLL);
    }
}
