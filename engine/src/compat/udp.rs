//! The UDP sending half every client against another tool shares: the stream workload's UDP
//! loop over sockets already connected to the far end, each datagram in that tool's format.

use super::Intervals;
use crate::base::error::Result;
use crate::base::spec::TestSpec;
use crate::base::text::first_seen;
use crate::metrics::data_path::DataPath;
use crate::metrics::figures::{Role, SideReport};
use crate::runtime::placement::Placement;
use crate::runtime::side::{SideEnd, SideProbes, TestSide};
use crate::sys::sockopt::{self, LocalEnd};
use crate::transport::udp::send::{self as udp_send, FinConfig, SendPath, UdpFlowSent, UdpSendConfig, UdpSendFlow};
use crate::transport::FlowOutcome;
use crate::uring::ring::WakeBatch;
use crate::wire::udp_payload::DatagramHeader;
use crate::workload::udp_stream;
use socket2::{Domain, Protocol, Socket, Type};
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// How the datagrams of a test against another tool look, and how its flows end.
pub(super) struct UdpWire {
    pub header: DatagramHeader,
    /// iperf2's FIN exchange at the end, or nothing (iperf3 ends on its control connection).
    pub fin: Option<FinConfig>,
    /// A receiver sending to its client: refused sends (ICMP port unreachable) that go on for
    /// a second stop the sending, as on `recv` (the client has gone, or never asked).
    pub serving: bool,
}

/// What [`send_udp`] sent: our sender side, what each flow sent (with its iperf2 server
/// report, if any), and whether every thread ended on UDP GSO (the kernel may refuse it, and
/// the loop then falls back to a send per datagram).
pub(super) struct UdpSent {
    pub side: SideReport,
    pub flows: Vec<UdpFlowSent>,
    pub gso: bool,
}

/// Sends on `sockets` (flow `i` on the i-th, each connected to the far end) until the test's
/// end or a stop, our side described by `data_path` from the send path taken.
pub(super) fn send_udp(
    spec: &TestSpec,
    sockets: Vec<UdpSocket>,
    placement: &Placement,
    iface: Option<&str>,
    live: &Intervals,
    wire: UdpWire,
    data_path: impl Fn(String) -> DataPath,
) -> Result<UdpSent> {
    let items: Vec<_> = sockets
        .into_iter()
        .enumerate()
        .map(|(flow, socket)| {
            let queue = spec.queue_of_flow(flow as u32);
            (queue, UdpSendFlow { socket, queue })
        })
        .collect();
    let refusals = udp_stream::Refusals::new(live);
    let side = TestSide::new(Role::Sender, spec, placement, &refusals);
    let inflight = if spec.gso { 8 } else { 32 };
    let t0 = Instant::now();
    let input = |(_, flows): (u32, Vec<UdpSendFlow>)| {
        let cfg = UdpSendConfig {
            batch: WakeBatch { want: (inflight / 2).clamp(1, 4), max_delay_us: 200 },
            drain_limit: Duration::from_secs(5),
            fin: wire.fin,
            refused: wire.serving.then(|| std::sync::Arc::clone(&refusals.count)),
            ..udp_stream::send_config(spec, placement, (t0, flows.len()), side.halt())
        };
        (flows, cfg)
    };
    let header = wire.header;
    let threads =
        side.spawn(items, input, move |(flows, cfg), counters| udp_send::run_with(flows, counters, &cfg, header))?;
    // Stopped early: the flows end now (and send their FINs, if any), not at the planned end.
    let run = side.run(threads, t0, SideProbes { iface, ..SideProbes::default() }, SideEnd::AtDeadline)?;
    let results = &run.results;
    let sent: Vec<UdpFlowSent> = results.iter().flat_map(|r| r.flows.iter().cloned()).collect();
    let outcomes: Vec<FlowOutcome> = sent.iter().map(UdpFlowSent::outcome).collect();
    let mut sender = side.report(&run, &outcomes);
    sender.set_data_path(data_path(first_seen(results.iter().map(|r| r.path.describe())).join(" / ")));
    sender.add_path_notes(results.iter().filter_map(|r| r.note.clone()));
    sender.udp = Some(udp_stream::sent_figures(&sent.iter().collect::<Vec<_>>()));
    let gso = !results.is_empty() && results.iter().all(|r| matches!(r.path, SendPath::Gso { .. }));
    Ok(UdpSent { side: sender, flows: sent, gso })
}

/// A UDP flow socket leaving from `local` (its address, `--cport` port and device), connected
/// to `target`.
pub(super) fn connect_udp(target: SocketAddr, local: &LocalEnd) -> io::Result<UdpSocket> {
    let socket = Socket::new(Domain::for_address(target), Type::DGRAM.cloexec(), Some(Protocol::UDP))?;
    if let Some(dev) = &local.device {
        socket.bind_device(Some(dev.as_bytes()))?;
    }
    let any = if target.is_ipv4() { Ipv4Addr::UNSPECIFIED.into() } else { Ipv6Addr::UNSPECIFIED.into() };
    socket.bind(&sockopt::sockaddr(&SocketAddr::new(local.bind.unwrap_or(any), local.data_port.unwrap_or(0))))?;
    socket.connect(&sockopt::sockaddr(&target))?;
    Ok(UdpSocket::from(socket))
}

/// iperf3's `--dont-fragment` on a stream we send (either role): IPv4's DF bit on every
/// datagram (path MTU discovery "do"), so a datagram over the path's MTU fails to send instead of going in fragments, as
/// iperf3 sets it. IPv6 routers never fragment: nothing to set there.
pub(crate) fn dont_fragment(socket: &UdpSocket) -> io::Result<()> {
    if socket.local_addr()?.is_ipv6() {
        return Ok(());
    }
    sockopt::set_int(socket.as_raw_fd(), libc::IPPROTO_IP, libc::IP_MTU_DISCOVER, libc::IP_PMTUDISC_DO)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel reads back "do" path MTU discovery on a socket marked don't-fragment.
    #[test]
    fn dont_fragment_sets_pmtudisc_do() {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        dont_fragment(&socket).unwrap();
        let mut value: libc::c_int = -1;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: the fd is open for the call; value and len point to an int and its size.
        let rc = unsafe {
            libc::getsockopt(
                socket.as_raw_fd(),
                libc::IPPROTO_IP,
                libc::IP_MTU_DISCOVER,
                (&mut value as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        assert_eq!((rc, value), (0, libc::IP_PMTUDISC_DO));
    }
}
