//! The sender's session of a stream or transaction test: connect the control channel, probe
//! the path, agree on the test, wait for `Ready`, and at the end put the far side's report
//! beside this side's.

use crate::base::error::{Error, Result};
use crate::base::spec::{Direction, Proto, TestSpec, Workload, ZeroCopyMode};
use crate::base::stop::StopToken;
use crate::metrics::figures::{Host, PathFacts, Role, Roles, SideReport, StreamReport};
use crate::runtime::nic_queues::xps_order;
use crate::runtime::placement::{plan, resolve_cpus, BusyPoll, Placement};
use crate::runtime::side::Live;
use crate::runtime::side::END_GRACE;
use crate::session::control::{self, ControlMsg, PROTOCOL_VERSION};
use crate::session::live::{Observer, SenderLive, StartInfo};
use crate::sys::netpath::PathProbe;
use crate::sys::nic_topology::NicTopology;
use crate::sys::probe::KernelCaps;
use crate::sys::sockopt::{tcp_port_free, udp_port_free, LocalEnd};
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
    /// What this kernel and process can do, probed once by the front end
    /// ([`KernelCaps::detect`]) and carried to every run of these options.
    pub kernel: KernelCaps,
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

/// What the far end sent back at the end of a test: its report of the forward flows (what it
/// received; rr's server's), of the reverse flows (what it sent), or why there is none.
pub(crate) struct FarReports {
    pub forward: Option<SideReport>,
    pub reverse: Option<SideReport>,
    pub error: Option<String>,
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
    /// The sender may choose source ports (`--steer` not off, no `--cport`).
    may_steer: bool,
    /// The receiver's accept asks for the UDP flows' final source ports (`udp_ports`).
    udp_ports_follow: bool,
    /// `--steer ntuple`: the receiver is to steer the flows by n-tuple rules.
    ntuple: bool,
    /// The receiver's accept says it places the flows by n-tuple rules (asked for or not).
    rules_by_receiver: bool,
    /// `--latency`: the receiver's probe answers carry its clock and CPU time (its accept's
    /// `probe_stamps`).
    pub probe_stamps: bool,
    /// `--latency`: where the receiver's own qdiscs could hold a queue (its accept's
    /// `receiver_queues`).
    pub receiver_queues: Option<crate::sys::netpath::ReceiverQueues>,
    psk: Option<crate::session::auth::Psk>,
    /// The authenticated session's key, which the data flows' greetings are tagged with.
    key: Option<crate::session::auth::SessionKey>,
    /// The receiver binds flows to their ends (its accept's `bound_flows`): the tags cover them.
    bound_flows: bool,
    stop: StopToken,
}

impl SenderSession {
    /// Probes the kernel, plans the queue threads, connects the control channel and looks up
    /// the path to the receiver.
    pub(crate) fn connect(opts: &SendOptions) -> Result<Self> {
        // A library caller's spec is checked as the CLI's is, before anything is opened.
        opts.spec.validate()?;
        // `--start-at`: connect only a little before the instant.
        if let Some(at) = opts.spec.start_at {
            crate::session::start::prepare(at, &opts.stop)?;
        }
        let caps = opts.kernel.clone();
        caps.require_tcp_stream()?;
        if opts.spec.tuning.mptcp {
            caps.require_mptcp()?;
        }
        let spec = &opts.spec;
        // The receiver knows a forward stream's flows (TCP: as they connect; UDP: the source
        // ports of its hello) before any data moves; rules for the flows of a reverse or
        // bidirectional test would steer what this side receives, which no receiver installs.
        let forward_stream = spec.workload == Workload::Stream && spec.direction == Direction::Forward;
        if opts.local.ntuple && !forward_stream {
            return Err(Error::usage("--steer ntuple steers forward streams only, TCP or UDP (no -R, --bidir or rr)"));
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
            may_steer: !opts.local.no_steer && opts.local.data_port.is_none(),
            udp_ports_follow: false,
            ntuple: opts.local.ntuple,
            rules_by_receiver: false,
            probe_stamps: false,
            receiver_queues: None,
            psk: opts.psk.clone(),
            key: None,
            bound_flows: false,
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
        let steer_udp = self.may_steer
            && spec.proto == Proto::Udp
            && spec.workload == Workload::Stream
            && spec.direction == Direction::Forward;
        let hello = ControlMsg::Hello {
            version: PROTOCOL_VERSION,
            spec: spec.clone(),
            udp_ports,
            steer_udp,
            steer_ntuple: self.ntuple,
        };
        control::write_msg(&self.ctl, &hello)?;
        if self.key.is_none() {
            crate::session::first_answer::check(&self.ctl, peer)?;
        }
        self.cookie = match control::read_reply(&mut self.ctl, REPLY_TIMEOUT)? {
            ControlMsg::Accept {
                cookie,
                data_port,
                placement,
                variant,
                steering,
                boot_id,
                latency_probe,
                udp_ports_follow,
                ntuple,
                probe_stamps,
                receiver_queues,
                bound_flows,
                start_message,
            } => {
                if spec.start_at.is_some() && !start_message {
                    return Err(Error::peer(format!(
                        "receiver {peer} does not wait for a --start-at (a uringbench recv older than --start-at): upgrade it, or run without --start-at"
                    )));
                }
                // `recv --zc-rx IFACE` places the flows by rules although this side did not ask.
                self.rules_by_receiver = ntuple;
                if self.ntuple && !ntuple {
                    return Err(Error::peer(format!(
                        "receiver {peer} does not install n-tuple rules (a uringbench recv older than --steer ntuple): upgrade it, or run without --steer ntuple"
                    )));
                }
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
                self.udp_ports_follow = udp_ports_follow && steer_udp;
                self.probe_stamps = probe_stamps;
                self.receiver_queues = receiver_queues;
                self.bound_flows = bound_flows;
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

    /// The source port of each TCP data flow, chosen so that the receiver's NIC hashes flow
    /// `f` onto the receive queue of its engine queue; None for a flow left to the kernel. The
    /// sender's placement line says what was done, or why not.
    pub(crate) fn steer(&mut self, spec: &TestSpec, local: &LocalEnd, port: u16) -> Vec<Option<u16>> {
        let why_not = self.why_not_steered(spec, local).or_else(|| self.steering.as_ref()?.unusable());
        self.steered_ports(spec, port, why_not, tcp_port_free)
    }

    /// UDP: when the receiver's accept asks for the flows' final source ports, the port each
    /// data flow is to be sent from (None: keep the socket bound before the hello), chosen as
    /// for TCP; the caller rebinds those flows and calls [`Self::announce_udp_ports`]. None
    /// when the hello's ports stay; the placement line says why, where the receiver has queues.
    pub(crate) fn steer_udp(&mut self, spec: &TestSpec, local: &LocalEnd, port: u16) -> Option<Vec<Option<u16>>> {
        let v6 = self.ctl.local_addr().is_ok_and(|a| a.ip().to_canonical().is_ipv6());
        let why_not = self.why_not_steered(spec, local).or_else(|| {
            let steering = self.steering.as_ref()?;
            steering.udp_unusable(v6).or_else(|| {
                (!self.udp_ports_follow).then(|| {
                    "the receiver keeps the hello's UDP source ports (a uringbench recv older than UDP steering, or its XDP engine)"
                        .to_string()
                })
            })
        });
        if !self.udp_ports_follow {
            self.steered_ports(spec, port, why_not, udp_port_free);
            return None;
        }
        Some(self.steered_ports(spec, port, why_not, udp_port_free))
    }

    /// Tells the receiver the UDP flows' final source ports (data flows, then the probe's).
    pub(crate) fn announce_udp_ports(&self, ports: Vec<u16>) -> Result<()> {
        control::write_msg(&self.ctl, &ControlMsg::UdpPorts { ports })
    }

    /// Why this sender does not choose its source ports, whatever the receiver reports.
    fn why_not_steered(&self, spec: &TestSpec, local: &LocalEnd) -> Option<String> {
        if local.no_steer {
            Some("--steer off".to_string())
        } else if local.ntuple {
            Some("--steer ntuple: the receiver's n-tuple rules place them instead".to_string())
        } else if self.rules_by_receiver {
            Some("the receiver places them with n-tuple rules of its own (its zero-copy queues)".to_string())
        } else if local.data_port.is_some() {
            Some("--cport fixes the source ports".to_string())
        } else if spec.direction != Direction::Forward {
            Some("only forward flows are steered".to_string())
        } else {
            None
        }
    }

    /// One source port per data flow from the receiver's RSS set-up (`is_free`: whether a
    /// port may be bound), or all None with the reason `why_not` in the placement line.
    fn steered_ports(
        &mut self,
        spec: &TestSpec,
        port: u16,
        why_not: Option<String>,
        is_free: fn(std::net::IpAddr, u16) -> bool,
    ) -> Vec<Option<u16>> {
        let flows = spec.data_connections() as usize;
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
        let ports = steering.ports(spec.queues, spec.flows(), src, dst, |p| is_free(src, p));
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

    /// The greeting data flow `flow` opens with on `stream` (tagged with the session key,
    /// when there is one, over the connection's ends when the receiver binds flows).
    pub(crate) fn data_hello(&self, flow: u32, stream: &std::net::TcpStream) -> Result<Vec<u8>> {
        use crate::session::auth::{data_hello, FlowEnds};
        let ends = match self.bound_flows {
            true => Some(FlowEnds::of(stream, true).map_err(|e| Error::io("reading a data flow's addresses", e))?),
            false => None,
        };
        Ok(data_hello(self.key.as_ref(), &self.cookie, flow, ends.as_ref()))
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

    /// `--start-at`: waits for the instant once `ready` is in and tells the receiver the data
    /// starts; this host's clock as it did (None without --start-at).
    pub(crate) fn release_start(&self, spec: &TestSpec) -> Result<Option<crate::base::start_at::StartAt>> {
        spec.start_at.map(|at| crate::session::start::release(at, &self.ctl, &self.stop)).transpose()
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
            roles: self.roles(spec),
            this_placement: self.placement.summary.clone(),
            far_placement: self.receiver_placement.clone(),
        });
        Ok(live)
    }

    /// Reads the far end's reports once this host's side is done: what it received (forward
    /// flows) and what it sent (reverse flows), or why there are none (`far_end` names it).
    pub(crate) fn far_reports(&self, live: &SenderLive, far_end: &str) -> FarReports {
        let peer = &self.peer;
        let (forward, reverse, error) = match live.watch.recv(END_GRACE + Duration::from_secs(5)) {
            Ok(ControlMsg::Result { report, reverse }) => (report.map(|r| *r), reverse.map(|r| *r), None),
            Ok(ControlMsg::Abort { reason }) => (None, None, Some(format!("{far_end} aborted: {reason}"))),
            Ok(other) => (None, None, Some(format!("{far_end} sent {other:?} instead of its report"))),
            Err(e) => (None, None, Some(format!("{far_end} {peer} vanished before reporting: {e}"))),
        };
        FarReports { forward, reverse, error }
    }

    /// The roles of this test's data (under `--bidir`, of its forward half), the one place a
    /// sending host decides them.
    pub(crate) fn roles(&self, spec: &TestSpec) -> Roles {
        Roles::of(spec.direction, self.target_ip.to_string())
    }

    /// What this side learnt of the path, with the drops its own counters saw (`local`): the
    /// data's egress is the data sender's interface, as its report names it (the far host's
    /// under `-R`), or the one this host routes the far host through when it sends.
    fn path_facts(&self, roles: &Roles, data_sender: Option<&SideReport>, local: &SideReport) -> PathFacts {
        let host = local.host.as_ref();
        let reported = data_sender.and_then(|s| s.host.as_ref()).map(|h| h.iface.clone()).filter(|i| !i.is_empty());
        let probed = (roles.data_sender == Host::This).then(|| self.path.interface().map(str::to_string)).flatten();
        PathFacts {
            egress_interface: reported.or(probed),
            limits: self.path.limits.clone(),
            interface_drops: host.and_then(|h| h.interface).map_or(0, |i| i.rx_dropped + i.tx_dropped),
            softnet_drops: host.and_then(|h| h.softnet_total).map_or(0, |s| s.dropped),
        }
    }

    /// Forward test: collects the receiver's report and puts both sides together.
    pub(crate) fn finish(
        self,
        spec: &TestSpec,
        mut sender: SideReport,
        far: FarReports,
        live: SenderLive,
    ) -> StreamReport {
        let FarReports { forward: mut receiver, error, .. } = far;
        if receiver.is_some() {
            crate::session::end_report::send(&self.ctl, spec, &sender.tcp);
        }
        live.attach((Some(&mut sender), receiver.as_mut()), (None, None));
        let error = error.or_else(|| receiver.is_none().then(|| "receiver returned no report".to_string()));
        let roles = self.roles(spec);
        let path = self.path_facts(&roles, Some(&sender), &sender);
        let mut report = StreamReport {
            spec: spec.clone(),
            target: self.peer,
            roles,
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
        self,
        spec: &TestSpec,
        mut receiver: SideReport,
        far: FarReports,
        live: SenderLive,
    ) -> StreamReport {
        let FarReports { reverse: mut remote_sender, error, .. } = far;
        live.attach((None, None), (remote_sender.as_mut(), Some(&mut receiver)));
        let roles = self.roles(spec);
        let path = self.path_facts(&roles, remote_sender.as_ref(), &receiver);
        let mut report = reverse_report(spec, &self.peer, roles, remote_sender, receiver, error, path);
        report.mark_interrupted(live.stopped());
        report
    }

    /// Both directions: the forward report carries the reverse one.
    pub(crate) fn finish_bidir(
        self,
        spec: &TestSpec,
        (mut sender, mut receiver): (SideReport, SideReport),
        far: FarReports,
        live: SenderLive,
    ) -> StreamReport {
        let FarReports { forward: mut remote_receiver, reverse: mut remote_sender, error } = far;
        live.attach((Some(&mut sender), remote_receiver.as_mut()), (remote_sender.as_mut(), Some(&mut receiver)));
        let roles = self.roles(spec);
        let path = self.path_facts(&roles, Some(&sender), &sender);
        let reverse_roles = roles.reversed();
        let reverse_path = self.path_facts(&reverse_roles, remote_sender.as_ref(), &receiver);
        let mut reverse =
            reverse_report(spec, &self.peer, reverse_roles, remote_sender, receiver, error.clone(), reverse_path);
        let stopped = live.stopped();
        reverse.mark_interrupted(stopped.clone());
        let mut report = StreamReport {
            spec: spec.clone(),
            target: self.peer,
            roles,
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
    roles: Roles,
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
        roles,
        sender,
        receiver: Some(receiver),
        error,
        path,
        reverse: None,
        interrupted: None,
        latency: None,
    }
}

/// A scripted receiver on loopback for the sender's unit tests.
#[cfg(test)]
pub(crate) mod scripted {
    use super::*;
    use crate::session::control::{read_msg, CONTROL_MAGIC};
    use std::io::Read;
    use std::net::TcpListener;

    /// Listens on a loopback port, reads one control greeting and hello, and runs `script`
    /// with the connection and the hello; the port, and the thread to join for its result.
    pub(crate) fn receiver<T: Send + 'static>(
        script: impl FnOnce(TcpStream, ControlMsg) -> T + Send + 'static,
    ) -> (u16, std::thread::JoinHandle<T>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let thread = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut magic = [0u8; 4];
            s.read_exact(&mut magic).unwrap();
            assert_eq!(magic, CONTROL_MAGIC);
            let hello = read_msg(&mut s, Duration::from_secs(5)).unwrap();
            script(s, hello)
        });
        (port, thread)
    }

    /// An accept with nothing optional in it.
    pub(crate) fn plain_accept() -> ControlMsg {
        ControlMsg::Accept {
            cookie: [7; 16],
            placement: String::new(),
            data_port: None,
            variant: None,
            steering: None,
            boot_id: None,
            latency_probe: false,
            udp_ports_follow: false,
            ntuple: false,
            probe_stamps: false,
            receiver_queues: None,
            bound_flows: false,
            start_message: false,
        }
    }

    /// Options for a test of `spec` against the scripted receiver on `port`.
    pub(crate) fn options(port: u16, spec: TestSpec) -> SendOptions {
        SendOptions {
            target: "127.0.0.1".into(),
            port,
            spec,
            cpus: None,
            busy_poll: BusyPoll::Off,
            local: Default::default(),
            fast: Default::default(),
            kernel: KernelCaps::detect().expect("io_uring works where the tests run"),
            psk: None,
            stop: Default::default(),
        }
    }
}
