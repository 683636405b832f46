//! The sender's session of a stream or transaction test: connect the control channel, probe
//! the path, agree on the test, wait for `Ready`, and at the end put the far side's report
//! beside this side's.

use crate::base::error::{Error, Result};
use crate::base::spec::{Direction, TestSpec, ZeroCopyMode};
use crate::base::stop::StopToken;
use crate::metrics::figures::{PathFacts, Role, SideReport, StreamReport};
use crate::runtime::nic_queues::xps_order;
use crate::runtime::placement::{plan, resolve_cpus, BusyPoll, Placement};
use crate::runtime::side::END_GRACE;
use crate::session::control::{self, ControlMsg, PROTOCOL_VERSION};
use crate::session::live::{Live, Observer, SenderLive, StartInfo};
use crate::sys::netpath::PathProbe;
use crate::sys::nic_topology::NicTopology;
use crate::sys::probe::KernelCaps;
use crate::sys::sockopt::{tcp_port_free, LocalEnd};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

/// How long a sender waits for the receiver to accept a connection.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
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
    /// The fast paths the front end probed (`--sqpoll`, `--napi`).
    pub fast: crate::uring::fastpath::FastPaths,
    /// `--psk-file`: authenticate to the receiver (and it to us) before sending the test.
    pub psk: Option<crate::session::auth::Psk>,
    /// Ends the test early (and a sweep, search or experiment between runs); the report says
    /// it was interrupted and why. Clones of the options share it.
    pub stop: StopToken,
}

/// Decides whether SEND_ZC is used, and why; warns when the memlock limit will not let the
/// payload buffer be registered (the send then uses unregistered memory, and says so).
pub(crate) fn decide_zerocopy(
    mode: ZeroCopyMode,
    caps: &KernelCaps,
    path: &PathProbe,
    len: u32,
) -> Result<(bool, String)> {
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
pub(crate) struct SenderSession {
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
    /// The receiver's NIC queues and RSS set-up, from its accept (None: no queues, or an
    /// older receiver).
    pub steering: Option<crate::runtime::nic_queues::RssSteering>,
    /// `--trip-times`: the receiver's boot id, from its accept (None: a receiver that does
    /// not stamp responses).
    pub peer_boot_id: Option<String>,
    /// `--latency`: the receiver's probe answers carry its clock and CPU time (its accept's
    /// `probe_stamps`).
    pub probe_stamps: bool,
    /// `--latency`: where the receiver's own qdiscs could hold a queue (its accept's
    /// `receiver_queues`).
    pub receiver_queues: Option<crate::sys::netpath::ReceiverQueues>,
    psk: Option<crate::session::auth::Psk>,
    /// The authenticated session's key, which the data flows' greetings are tagged with.
    key: Option<crate::session::auth::SessionKey>,
    stop: StopToken,
}

impl SenderSession {
    /// Probes the kernel, plans the queue threads, connects the control channel and looks up
    /// the path to the receiver.
    pub(crate) fn connect(opts: &SendOptions) -> Result<Self> {
        // A library caller's spec is checked as the CLI's is, before anything is opened.
        opts.spec.validate()?;
        let caps = KernelCaps::detect()?;
        caps.require_tcp_stream()?;
        if opts.spec.tuning.mptcp {
            caps.require_mptcp()?;
        }
        let cpus = resolve_cpus(opts.cpus.as_deref())?;
        // Both directions at once put a sending and a receiving thread on each CPU: no spinning.
        let shared = opts.spec.direction == Direction::Bidir;
        let latency_bound = opts.spec.workload.latency_bound();
        // Planned before connecting, so that a refusal (--busy-poll on a shared CPU) opens nothing.
        let mut placement = plan(opts.spec.queues, &cpus, opts.busy_poll, shared, latency_bound, &opts.fast)?;
        let ctl = control::connect_from(&opts.target, opts.port, CONNECT_TIMEOUT, &opts.local.for_control(), None)?;
        control::harden(&ctl)?;
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
        // Each sending thread on a CPU that XPS sends through a transmit queue of its own.
        let threads = (opts.spec.queues as usize).min(cpus.len());
        let xps = path.interface().and_then(|i| NicTopology::read(i).ok()).and_then(|t| xps_order(&t, &cpus, threads));
        if let Some((order, line)) = xps {
            placement = plan(opts.spec.queues, &order, opts.busy_poll, shared, latency_bound, &opts.fast)?;
            placement.summary = format!("{}; {line}", placement.summary);
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
            steering: None,
            peer_boot_id: None,
            probe_stamps: false,
            receiver_queues: None,
            psk: opts.psk.clone(),
            key: None,
            stop: opts.stop.clone(),
        })
    }

    /// `--trip-times`: on what grounds the receiver's clock is taken to read as this one's
    /// (None without it). A receiver that did not answer with its boot id does not stamp.
    pub(crate) fn trip_clock(&self, spec: &TestSpec) -> Result<Option<crate::metrics::trip_times::ClockBasis>> {
        use crate::metrics::trip_times::ClockBasis;
        if !spec.trip_times {
            return Ok(None);
        }
        let Some(theirs) = &self.peer_boot_id else {
            return Err(Error::peer(format!(
                "receiver {} does not stamp --trip-times responses (a uringbench recv before it): upgrade it",
                self.peer
            )));
        };
        Ok(Some(if crate::transport::trip::boot_id().as_ref() == Some(theirs) {
            ClockBasis::SameHost
        } else if spec.clocks_synced {
            ClockBasis::Asserted
        } else {
            ClockBasis::Unknown
        }))
    }

    /// Sends the hello and waits for the receiver to accept (or refuse) the test.
    pub(crate) fn negotiate(&mut self, spec: &TestSpec, udp_ports: Vec<u16>) -> Result<()> {
        let peer = &self.peer;
        self.key = crate::session::auth::open_session(&mut self.ctl, self.psk.as_ref(), peer, REPLY_TIMEOUT)?;
        control::write_msg(&self.ctl, &ControlMsg::Hello { version: PROTOCOL_VERSION, spec: spec.clone(), udp_ports })?;
        self.cookie = match control::read_reply(&mut self.ctl, REPLY_TIMEOUT)? {
            ControlMsg::Accept {
                cookie,
                data_port,
                placement,
                variant,
                steering,
                boot_id,
                latency_probe,
                probe_stamps,
                receiver_queues,
            } => {
                if spec.latency && !latency_probe {
                    return Err(Error::peer(format!(
                        "receiver {peer} does not answer --latency probes (a uringbench recv older than --latency): upgrade it, or run without --latency"
                    )));
                }
                if variant != spec.variant {
                    return Err(Error::peer(format!(
                        "receiver {peer} did not apply receiver variant '{}' (a uringbench recv without --variants support)",
                        spec.variant.as_deref().unwrap_or("")
                    )));
                }
                self.data_port = data_port;
                self.receiver_placement = placement;
                self.steering = steering;
                self.peer_boot_id = boot_id;
                self.probe_stamps = probe_stamps;
                self.receiver_queues = receiver_queues;
                cookie
            }
            ControlMsg::Refuse { reason } if spec.latency && reason.contains("source ports for") => {
                return Err(Error::peer(format!(
                    "receiver {peer} refused the test: {reason} (a uringbench recv older than --latency does not know the probe's port: upgrade it, or run without --latency)"
                )))
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

    /// The source port of each data flow, chosen so that the receiver's NIC hashes flow `f`
    /// onto the receive queue of its engine queue; None for a flow left to the kernel. The
    /// sender's placement line says what was done, or why not.
    pub(crate) fn steer(&mut self, spec: &TestSpec, local: &LocalEnd, port: u16) -> Vec<Option<u16>> {
        let flows = spec.data_connections() as usize;
        let why_not = if local.no_steer {
            Some("--steer off".to_string())
        } else if local.data_port.is_some() {
            Some("--cport fixes the source ports".to_string())
        } else if spec.direction != Direction::Forward {
            Some("only forward flows are steered".to_string())
        } else {
            match &self.steering {
                None => None,
                Some(s) => s.unusable(),
            }
        };
        let steering = match (&self.steering, why_not) {
            (Some(s), None) => s.clone(),
            (s, why) => {
                if let (Some(s), Some(why)) = (s, why) {
                    self.placement.summary.push_str(&format!("; flows not steered onto {}'s queues: {why}", s.iface));
                }
                return vec![None; flows];
            }
        };
        let src = match self.ctl.local_addr() {
            Ok(a) => a.ip().to_canonical(),
            Err(_) => return vec![None; flows],
        };
        let dst = std::net::SocketAddr::new(self.target_ip, port);
        let ports = steering.ports(spec.queues, spec.flows(), src, dst, |p| tcp_port_free(src, p));
        let targets: Vec<String> =
            (0..spec.flows()).map(|f| steering.target_of_flow(spec.queues, f).to_string()).collect();
        let missed: Vec<String> =
            ports.iter().enumerate().filter(|(_, p)| p.is_none()).map(|(f, _)| f.to_string()).collect();
        self.placement.summary.push_str(&format!(
            "; flows steered by source port onto {}'s rx queues {} (its Toeplitz key and table)",
            steering.iface,
            targets.join(",")
        ));
        if !missed.is_empty() {
            self.placement
                .summary
                .push_str(&format!(" except flows {}: no free port reaches their queue", missed.join(",")));
        }
        ports
    }

    /// The greeting data flow `flow` opens with (tagged with the session key, when there is one).
    pub(crate) fn data_hello(&self, flow: u32) -> Vec<u8> {
        crate::session::auth::data_hello(self.key.as_ref(), &self.cookie, flow)
    }

    /// Waits for the receiver to say every flow is in place.
    pub(crate) fn wait_ready(&mut self) -> Result<()> {
        let peer = &self.peer;
        match control::read_reply(&mut self.ctl, REPLY_TIMEOUT)? {
            ControlMsg::Ready => Ok(()),
            ControlMsg::Abort { reason } => Err(Error::peer(format!("receiver {peer} aborted the test: {reason}"))),
            other => Err(Error::protocol(format!("receiver {peer} sent {other:?} instead of ready"))),
        }
    }

    /// The test starts: the far end's messages are watched from now on, and the observer
    /// hears of the start.
    pub(crate) fn start_live(&self, spec: &TestSpec, observer: Arc<dyn Observer>) -> Result<SenderLive> {
        // Streams show each interval once both ends' figures are in; transaction tests show
        // the client's alone.
        let paired = spec.workload == crate::base::spec::Workload::Stream;
        let live = SenderLive::start(&self.ctl, Arc::clone(&observer), paired, self.stop.clone())?;
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
    pub(crate) fn finish(mut self, spec: &TestSpec, mut sender: SideReport, live: SenderLive) -> StreamReport {
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
            latency: None,
        };
        report.mark_interrupted(live.stopped());
        report
    }

    /// Reverse test: this side received; the far side's report is the sender's.
    pub(crate) fn finish_reverse(
        mut self,
        spec: &TestSpec,
        mut receiver: SideReport,
        live: SenderLive,
    ) -> StreamReport {
        let (_, mut remote_sender, error) = self.remote_reports(&live);
        live.attach((None, None), (remote_sender.as_mut(), Some(&mut receiver)));
        let path = self.path_facts(&receiver);
        let mut report = reverse_report(spec, &self.peer, remote_sender, receiver, error, path);
        report.mark_interrupted(live.stopped());
        report
    }

    /// Both directions: the forward report carries the reverse one.
    pub(crate) fn finish_bidir(
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
            latency: None,
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
        latency: None,
    }
}
