//! An admitted test as the workload that runs it sees it ([`Test`]): its spec, placement and
//! NIC queues, its control channel, the sender told it is accepted, its data flows awaited by
//! cookie; and what the workload hands back ([`ServedReports`]) through the [`TestRunner`].

use super::ntuple::NtupleRules;
use super::{ReceiverState, FLOWS_TIMEOUT};
use crate::base::error::{Error, Result};
use crate::base::spec::{Direction, TestSpec};
use crate::metrics::figures::SideReport;
use crate::runtime::nic_queues::TestQueues;
use crate::runtime::placement::Placement;
use crate::session::admission::SessionSlot;
use crate::session::auth::SessionKey;
use crate::session::control::{self, ControlMsg, SessionCookie};
use crate::session::live::ServerStop;
use crate::session::receiver::ServerEvent;
use crate::sys::probe::KernelCaps;
use std::collections::HashMap;
use std::net::{SocketAddr, TcpStream};
use std::sync::{mpsc, Mutex};
use std::time::Instant;

/// The memory a test of `spec` takes on this receiver, and how it runs once accepted: the
/// workload layer's code, handed in by the caller, so the accept loop and the limits live
/// below the workloads they admit.
pub trait TestRunner: Send + Sync {
    /// Bytes a test of `spec` on `threads` receiving threads allocates here (buffer rings,
    /// socket buffers, samples); checked against [`ServerLimits::max_memory`].
    fn memory(&self, spec: &TestSpec, threads: usize) -> u64;
    /// Whether a UDP test that receives here must have the host's UDP port to itself (the
    /// XDP engine takes every datagram to the port).
    fn udp_alone(&self) -> bool;
    /// Runs an accepted test: sets up its flows, tells the sender (through [`Test::accept`] or
    /// [`Test::accept_flows`]) and returns what this side received and sent.
    fn run(&self, test: &mut Test<'_>) -> Result<ServedReports>;
}

/// What the receiver received (forward flows) and sent (reverse flows) in one test.
#[derive(Debug, Default)]
pub struct ServedReports {
    pub received: Option<SideReport>,
    pub sent: Option<SideReport>,
}

impl ServedReports {
    /// A test that only received here (forward flows, rr, crr).
    pub fn received(report: SideReport) -> Self {
        Self { received: Some(report), sent: None }
    }
}

/// One test the receiver admitted, as the per-test code sees it.
pub struct Test<'a> {
    pub ctl: &'a mut TcpStream,
    pub spec: &'a TestSpec,
    pub udp_ports: &'a [u16],
    /// The hello's `steer_udp`: the sender re-announces steered source ports if asked.
    pub(super) steer_udp: bool,
    /// `--steer ntuple` or `recv --zc-rx IFACE`: the rules this test's flows are put on their
    /// queues by.
    pub(super) ntuple: Option<&'a NtupleRules>,
    pub placement: &'a Placement,
    /// The NIC queues the test is served from; None on veth and loopback.
    pub queues: Option<&'a TestQueues>,
    pub caps: &'a KernelCaps,
    /// The receiver's stop token and no-progress limit: the test's live watch ends the test
    /// when it is stopped or its flows move nothing for the limit.
    pub stop: &'a ServerStop,
    pub(super) shared: &'a ReceiverState,
    pub(super) id: u64,
    /// The authenticated session's key: its data flows must present a tag made with it.
    pub(super) key: Option<SessionKey>,
    /// Its place in the receiver's counts.
    pub(super) slot: &'a SessionSlot,
}

impl Test<'_> {
    /// Tells the sender the test is accepted (crr: with the port of the test's own listener)
    /// and the operator that it started; for tests without TCP data flows to the port.
    pub fn accept(&mut self, data_port: Option<u16>) -> Result<()> {
        control::write_msg(self.ctl, &self.accept_msg([0; 16], data_port, false))?;
        self.announce();
        Ok(())
    }

    /// Whether n-tuple rules are to place this test's flows (`--steer ntuple`, `--zc-rx IFACE`).
    pub fn steered_by_rules(&self) -> bool {
        self.ntuple.is_some()
    }

    /// Whether this UDP test's data flows' source ports follow the accept (`udp_ports`): the
    /// sender steers them (the hello's `steer_udp`), the flows come in, this NIC hashes UDP
    /// on ports with a Toeplitz key and table it reports, and no n-tuple rules place them.
    pub fn udp_ports_follow(&self) -> bool {
        let v6 = self.ctl.local_addr().is_ok_and(|a| a.ip().to_canonical().is_ipv6());
        self.steer_udp
            && self.ntuple.is_none()
            && self.spec.direction == Direction::Forward
            && self.queues.is_some_and(|q| q.steering().udp_unusable(v6).is_none())
    }

    /// Accepts a UDP test whose ports follow ([`Self::udp_ports_follow`]) and returns its
    /// data flows' source ports from the sender's `udp_ports` message. The latency probe's
    /// port stays the hello's (its responder is up before the accept); the data flows start
    /// on `ready`, so their sockets made after the accept miss nothing.
    pub fn accept_udp_ports(&mut self) -> Result<Vec<u16>> {
        control::write_msg(self.ctl, &self.accept_msg([0; 16], None, true))?;
        self.announce();
        let data = self.spec.data_connections() as usize;
        let hello = self.udp_ports;
        match control::read_msg_up_to(self.ctl, FLOWS_TIMEOUT, control::MAX_FRAME)? {
            ControlMsg::UdpPorts { ports }
                if ports.len() == hello.len() && !ports.contains(&0) && ports[data..] == hello[data..] =>
            {
                Ok(ports[..data].to_vec())
            }
            ControlMsg::UdpPorts { ports } => Err(Error::protocol(format!(
                "udp_ports names {} ports for the hello's {} (none 0, the latency probe's unchanged)",
                ports.len(),
                hello.len()
            ))),
            other => Err(Error::protocol(format!("expected udp_ports after the accept, got {}", other.kind()))),
        }
    }

    /// The `accept` message: the cookie the data flows present, the receiver's placement and
    /// the RSS set-up the sender steers by.
    fn accept_msg(&self, cookie: SessionCookie, data_port: Option<u16>, udp_ports_follow: bool) -> ControlMsg {
        ControlMsg::Accept {
            cookie,
            placement: self.placement.summary.clone(),
            data_port,
            variant: self.spec.variant.clone(),
            steering: self.queues.map(TestQueues::steering),
            boot_id: if self.spec.trip_times { crate::transport::trip::boot_id() } else { None },
            latency_probe: self.spec.latency,
            udp_ports_follow,
            ntuple: self.ntuple.is_some(),
            probe_stamps: self.spec.latency,
            bound_flows: self.key.is_some() && !self.shared.cfg.flows_from_any_address,
            receiver_queues: self
                .spec
                .latency
                .then(|| self.ctl.peer_addr().ok())
                .flatten()
                .and_then(|peer| crate::sys::netpath::ReceiverQueues::toward(peer.ip())),
            start_message: self.spec.start_at.is_some(),
        }
    }

    /// Accepts a test whose TCP data flows connect to the port: hands the sender a cookie,
    /// and returns the flows, in flow order, once all of them arrived.
    pub(crate) fn accept_flows(&mut self) -> Result<Vec<(u32, TcpStream)>> {
        let shared = self.shared;
        let cookie = control::new_cookie();
        let (tx, rx) = mpsc::channel();
        let peer = self.ctl.peer_addr().map_err(|e| Error::io("reading the sender's address", e))?.ip().to_canonical();
        let awaited = AwaitedFlows { to: tx, key: self.key.clone(), peer };
        shared.pending.lock().unwrap_or_else(|p| p.into_inner()).insert(cookie, awaited);
        // However this ends, the cookie admits no more flows.
        let _unregister = Unregister(&shared.pending, cookie);
        let wanted = self.spec.data_connections() as usize;
        // `--latency`: the probe is the flow after the last, answered as soon as it arrives
        // (the sender measures the idle round trip before it opens the load's flows).
        let mut probe_awaited = self.spec.latency;
        let awaited = wanted + usize::from(probe_awaited);
        let _awaited = self.slot.await_flows(awaited);
        let accept = self.accept_msg(cookie, None, false);
        control::write_msg(self.ctl, &accept)?;
        self.announce();
        let mut slots: Vec<Option<TcpStream>> = (0..wanted).map(|_| None).collect();
        let mut got = 0;
        let deadline = Instant::now() + FLOWS_TIMEOUT;
        while got < wanted || probe_awaited {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok((flow, stream)) if flow as usize == wanted && probe_awaited => {
                    probe_awaited = false;
                    crate::transport::probe::answer_tcp(stream, &self.placement.cpus())
                        .map_err(|e| Error::io("starting the latency probe's responder", e))?;
                }
                Ok((flow, stream)) if (flow as usize) < wanted && slots[flow as usize].is_none() => {
                    slots[flow as usize] = Some(stream);
                    got += 1;
                }
                Ok((flow, _)) => {
                    return Err(Error::protocol(format!("data flow index {flow} is out of range or repeated")));
                }
                Err(_) if got == wanted => {
                    return Err(Error::peer(format!(
                        "the latency probe's connection did not arrive within {} s",
                        FLOWS_TIMEOUT.as_secs()
                    )));
                }
                Err(_) => {
                    return Err(Error::peer(format!(
                        "only {got} of {wanted} data connections arrived within {} s",
                        FLOWS_TIMEOUT.as_secs()
                    )));
                }
            }
        }
        Ok(slots.into_iter().enumerate().filter_map(|(i, s)| s.map(|s| (i as u32, s))).collect())
    }

    /// `--steer ntuple` (or `recv --zc-rx IFACE`): installs one rule per arrived TCP flow
    /// that this side receives, putting it on its target queue; the line for the receiver's
    /// report. None without rules.
    pub(crate) fn steer_by_rules(&self, flows: &[(u32, TcpStream)]) -> Result<Option<String>> {
        // --bidir: the forward flows come first; the rest carry data back and need no rule.
        let received = if self.spec.direction == Direction::Bidir { self.spec.flows() as usize } else { flows.len() };
        let ends: Vec<(u32, Option<(SocketAddr, SocketAddr)>)> =
            flows.iter().take(received).map(|(f, s)| (*f, s.peer_addr().ok().zip(s.local_addr().ok()))).collect();
        self.install_rules(&ends, false)
    }

    /// `--steer ntuple` for a forward UDP stream: one rule per flow's socket (connected to the
    /// sender's source port, bound to the port of the control connection); the line for the
    /// receiver's report. None without `--steer ntuple`.
    pub(crate) fn steer_udp_by_rules(&self, sockets: &[std::net::UdpSocket]) -> Result<Option<String>> {
        let ends: Vec<(u32, Option<(SocketAddr, SocketAddr)>)> =
            (0..).zip(sockets).map(|(f, s)| (f, s.peer_addr().ok().zip(s.local_addr().ok()))).collect();
        self.install_rules(&ends, true)
    }

    /// Installs a rule per flow (index, the sender's address and this side's) on its target.
    fn install_rules(&self, ends: &[(u32, Option<(SocketAddr, SocketAddr)>)], udp: bool) -> Result<Option<String>> {
        let Some(rules) = self.ntuple else { return Ok(None) };
        let ids: Vec<u32> = ends.iter().map(|(f, _)| *f).collect();
        let targets = rules.targets(self.spec.queues, &ids, &self.placement.threads);
        let canon = |a: SocketAddr| SocketAddr::new(a.ip().to_canonical(), a.port());
        let mut flows = Vec::with_capacity(ends.len());
        for ((flow, addrs), target) in ends.iter().zip(targets) {
            let (Some((peer, local)), Some(queue)) = (addrs, target) else {
                return Err(Error::unsupported(format!(
                    "n-tuple rules: flow {flow} has no address or no target queue"
                )));
            };
            flows.push((*flow, canon(*peer), canon(*local), queue));
        }
        rules.install(&flows, udp).map(Some)
    }

    fn announce(&self) {
        (self.shared.events)(ServerEvent::SessionStarted {
            id: self.id,
            peer: self.ctl.peer_addr().unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0))),
            spec: self.spec.clone(),
            placement: self.placement.summary.clone(),
        });
    }
}

/// Sessions waiting for their data flows: by cookie, where to hand a flow, and the key its
/// tag must be made with (authenticated sessions).
pub(super) type Pending = Mutex<HashMap<SessionCookie, AwaitedFlows>>;

/// Where a session's data flows go, and what they must prove to get there.
#[derive(Clone)]
pub(super) struct AwaitedFlows {
    pub(super) to: mpsc::Sender<(u32, TcpStream)>,
    /// The authenticated session's key: each flow presents a tag made with it.
    pub(super) key: Option<SessionKey>,
    /// The control connection's peer: flows come from its address (unless
    /// `--flows-from-any-address`), and with a key their tags cover their ends (`UBD3`).
    pub(super) peer: std::net::IpAddr,
}

/// Removes a session's cookie from the pending flows when dropped.
struct Unregister<'a>(&'a Pending, SessionCookie);
impl Drop for Unregister<'_> {
    fn drop(&mut self) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.1);
    }
}
