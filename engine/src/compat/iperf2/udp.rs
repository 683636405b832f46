//! `recv --iperf2` over UDP. iperf2 gives each client port its own server socket, and so do
//! we: the listening socket is peeked, never read, for a new client's first datagram; it is
//! then connected to that client and handed to a receive thread (FINs answered with a
//! [`crate::wire::iperf2::ServerReport`]), and a fresh listening socket is bound to the port
//! (`SO_REUSEADDR`; the kernel prefers the connected socket for its peer). Datagrams of another
//! new client in the microseconds between the two steps are lost to that client, as with
//! `iperf -s -u`. Out of descriptors or threads, taking new clients pauses, said once.

use super::groups::{ClientTest, ClientTests, FlowEnd, FlowGuard, Joined, REFUSED_MAX};
use super::receiver::Iperf2Event;
use super::receiver::{refusal, sending_mode};
use crate::base::spec::Proto;
use crate::compat::paused;
use crate::compat::shown;
use crate::metrics::measure::QueueCounters;
use crate::session::gate::Pause;
use crate::session::logq::RateLimit;
use crate::sys::epoll::Epoll;
use crate::sys::sockopt;
use crate::transport::udp::recv::{self as udp_recv, UdpRecvConfig, UdpRecvFlow, GRO_PAYLOAD};
use crate::wire::iperf2::{self, version_string, UdpClientHeader, SERVER_ACKFIN_SILENCE};
use crate::wire::udp_payload as payload;
use crate::workload::stream::RECV_BATCH;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::time::Instant;

/// The UDP listening socket's token on the gate's epoll.
pub(super) const UDP_TOKEN: u64 = 1;
/// Buffers of a UDP flow's GRO ring (each up to 64 KiB of coalesced datagrams).
const UDP_RECV_BUFS: u16 = 64;
/// Datagrams the serving loop looks at per wake-up, so TCP accepts are never starved.
const UDP_PEEKS_PER_TICK: usize = 256;

/// Makes `fd` a UDP socket bound to `addr` that others of ours can share (`SO_REUSEADDR`),
/// with GRO and kernel receive timestamps on before any datagram arrives. `exclusive`: bind
/// before allowing reuse, so that any other socket already on the port (an `iperf -s -u`,
/// another `recv --iperf2`) makes the bind fail instead of silently sharing the port.
pub(super) fn udp_listener(fd: OwnedFd, addr: SocketAddr, exclusive: bool) -> io::Result<UdpSocket> {
    if !exclusive {
        socket2::SockRef::from(&fd).set_reuse_address(true)?;
    }
    sockopt::bind(&fd, &addr)?;
    let socket = UdpSocket::from(fd);
    if exclusive {
        socket2::SockRef::from(&socket).set_reuse_address(true)?;
    }
    // Root may size the buffer past rmem_max: a burst at the start of a fast test fits.
    if sockopt::set_int(socket.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, 8 << 20).is_err() {
        let _ = socket2::SockRef::from(&socket).set_recv_buffer_size(8 << 20);
    }
    udp_recv::prepare_socket(&socket, true, true)?;
    socket.set_nonblocking(true)?;
    Ok(socket)
}

/// Dissolves a UDP socket's association (connect to `AF_UNSPEC`): it hears every peer again.
fn disconnect(socket: &UdpSocket) -> io::Result<()> {
    // SAFETY: all-zero is a valid sockaddr; the kernel reads only its family.
    let mut any: libc::sockaddr = unsafe { std::mem::zeroed() };
    any.sa_family = libc::AF_UNSPEC as libc::sa_family_t;
    let len = std::mem::size_of::<libc::sockaddr>() as libc::socklen_t;
    // SAFETY: a valid sockaddr and its length for the duration of the call.
    if unsafe { libc::connect(socket.as_raw_fd(), &any, len) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The UDP listening socket new clients arrive on, handed over to each new client.
pub(super) struct UdpIntake {
    pub(super) shared: Arc<ClientTests>,
    pub(super) socket: UdpSocket,
    addr: SocketAddr,
    pause: Pause,
}

impl UdpIntake {
    pub(super) fn new(shared: Arc<ClientTests>, socket: UdpSocket, addr: SocketAddr) -> Self {
        Self { shared, socket, addr, pause: Pause::default() }
    }

    /// Joins the serving loop's epoll.
    pub(super) fn watch(&self, epoll: &Epoll) -> io::Result<()> {
        epoll.add(self.socket.as_raw_fd(), UDP_TOKEN)
    }

    /// After a pause, takes new clients again when it is due.
    pub(super) fn resume_if_due(&mut self, epoll: &Epoll, now: Instant) {
        if self.pause.due(now) && self.watch(epoll).is_ok() {
            self.pause.retried();
        }
        self.pause.over(now);
    }

    fn tell(&self, event: Iperf2Event) {
        (self.shared.events)(event);
    }

    /// A client's datagrams that never become a test, logged a few per source and window.
    fn dropped(&self, drops: &RateLimit, peer: SocketAddr, reason: String) {
        if drops.allow(peer.ip().to_canonical(), Instant::now()) {
            self.tell(Iperf2Event::Dropped { peer: shown(peer), reason });
        }
    }

    /// Taking new UDP clients waits [`gate::PAUSE`] (the socket is off the epoll meanwhile);
    /// said once per episode.
    pub(super) fn pause_intake(&mut self, epoll: &Epoll, what: &str, e: &io::Error) {
        epoll.remove(self.socket.as_raw_fd());
        if self.pause.failed(Instant::now()) {
            self.tell(Iperf2Event::Paused { proto: Proto::Udp, reason: paused(what, e) });
        }
    }

    /// Looks at the datagrams waiting on the UDP listening socket: a new client's first
    /// datagram hands the socket over to that client and binds a new one; anything else is
    /// read away.
    pub(super) fn handle(&mut self, epoll: &Epoll, drops: &RateLimit) {
        let mut head = [0u8; 128];
        for _ in 0..UDP_PEEKS_PER_TICK {
            let (n, peer) = match self.socket.peek_from(&mut head) {
                Ok(r) => r,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // ICMP errors for earlier report datagrams (a client gone) surface here: skip.
                Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => continue,
                Err(e) => return self.pause_intake(epoll, "reading the UDP listening socket", &e),
            };
            let datagram = &head[..n.min(head.len())];
            let header = payload::decode(datagram).filter(|d| !d.fin).and_then(|_| UdpClientHeader::parse(datagram));
            let Some(header) = header else {
                // Not a test's first datagram, or a FIN whose flow is over: read it away.
                self.discard();
                continue;
            };
            if self.refused_before(peer, &header) {
                self.discard();
                continue;
            }
            if !self.hand_over(epoll, peer, &header, drops) {
                return;
            }
        }
    }

    /// Reads away the datagram at the head of the listening socket.
    fn discard(&self) {
        let _ = self.socket.recv_from(&mut [0u8; 1]);
    }

    /// Whether `peer`'s test is one we refuse (told once per client port).
    fn refused_before(&mut self, peer: SocketAddr, header: &UdpClientHeader) -> bool {
        let now = Instant::now();
        let mut st = self.shared.lock();
        if let Some(seen) = st.refused_udp.get_mut(&peer) {
            *seen = now;
            return true;
        }
        if !header.receiver_must_send() {
            return false;
        }
        if st.refused_udp.len() >= REFUSED_MAX {
            if let Some(oldest) = st.refused_udp.iter().min_by_key(|(_, t)| **t).map(|(p, _)| *p) {
                st.refused_udp.remove(&oldest);
            }
        }
        st.refused_udp.insert(peer, now);
        drop(st);
        let run_now = header.flags & iperf2::RUN_NOW != 0;
        let mode = sending_mode(header.reverse, header.full_duplex, header.legacy_dual, run_now);
        let reason = format!("{}; its datagrams are ignored", refusal(mode));
        self.tell(Iperf2Event::Refused { proto: Proto::Udp, peer: shown(peer), reason });
        true
    }

    /// A new client port: this socket becomes its own (everything it sent so far is queued
    /// here), and a fresh socket listens for the next client. `false`: taking new clients is
    /// paused.
    fn hand_over(&mut self, epoll: &Epoll, peer: SocketAddr, header: &UdpClientHeader, drops: &RateLimit) -> bool {
        let test = ClientTest {
            version: header.peer_version.map(|(u, l)| version_string(u, l)),
            threads: header.threads,
            time: header.time,
            rate_bps: header.rate_bps,
        };
        let counters = Arc::new(QueueCounters::new(1));
        let joined = match self.shared.join(Proto::Udp, peer.ip().to_canonical(), &test, Some(Arc::clone(&counters))) {
            Ok(j) => Arc::new(j),
            Err(reason) => {
                self.discard();
                self.dropped(drops, peer, reason);
                return true;
            }
        };
        // The next listening socket's descriptor first: out of descriptors, nothing changes.
        let spare = match sockopt::socket_for(&self.addr, libc::SOCK_DGRAM) {
            Ok(fd) => fd,
            Err(e) => {
                self.shared.leave(&joined);
                self.discard();
                self.pause_intake(epoll, "opening a UDP socket for a new client", &e);
                return false;
            }
        };
        if let Err(e) = self.socket.connect(peer) {
            self.shared.leave(&joined);
            self.discard();
            self.dropped(drops, peer, format!("cannot connect a UDP socket to it: {e}"));
            return true;
        }
        let next = match udp_listener(spare, self.addr, false) {
            Ok(s) => s,
            Err(e) => {
                // Listen for everyone on the old socket again.
                let _ = disconnect(&self.socket);
                self.shared.leave(&joined);
                self.discard();
                self.pause_intake(epoll, "binding a UDP socket for the next client", &e);
                return false;
            }
        };
        // The client's socket leaves the epoll before it is handed over; the new one joins.
        epoll.remove(self.socket.as_raw_fd());
        let socket = std::mem::replace(&mut self.socket, next);
        if let Err(e) = self.watch(epoll) {
            self.pause_intake(epoll, "watching the UDP socket for the next client", &e);
        }
        let _ = socket.set_nonblocking(false);
        let (shared, mine) = (Arc::clone(&self.shared), Arc::clone(&joined));
        let (no_fin, trip_times) = (header.no_udp_fin, header.trip_times);
        let spawned = std::thread::Builder::new().name("ub-iperf2-udp".into()).spawn(move || {
            let mut guard = FlowGuard::new(&shared, &mine);
            guard.end = receive_udp(&shared, socket, peer, &mine, counters, no_fin, trip_times);
        });
        if let Err(e) = spawned {
            self.shared.leave(&joined);
            self.pause_intake(epoll, "starting a flow thread", &e);
            return false;
        }
        true
    }
}

/// Serves one UDP client port on the socket handed over to it (connected to that port).
fn receive_udp(
    shared: &ClientTests,
    socket: UdpSocket,
    peer: SocketAddr,
    joined: &Joined,
    counters: Arc<QueueCounters>,
    no_fin: bool,
    trip_times: bool,
) -> FlowEnd {
    let cfg = UdpRecvConfig {
        wait: shared.wait_mode(),
        ring: shared.opts.fast.ring(),
        batch: RECV_BATCH,
        gro: true,
        buf_count: UDP_RECV_BUFS,
        max_payload: GRO_PAYLOAD,
        kernel_timestamps: true,
        one_way_delay: trip_times,
        answer_fin: true,
        fin_linger: SERVER_ACKFIN_SILENCE,
        halt: Arc::clone(&joined.stop),
        deadline: joined.deadline,
    };
    let start = Instant::now();
    let mut end = FlowEnd { local: socket.local_addr().ok(), ..FlowEnd::default() };
    match udp_recv::run(vec![UdpRecvFlow { socket, queue: 0, live: None }], &counters, &cfg) {
        Ok(result) => {
            end.notes.extend(result.note);
            for f in result.flows {
                end.bytes += f.stats.bytes;
                if f.strangers > 0 {
                    end.notes.push(format!(
                        "{} datagrams of another client arrived on this client's socket while it was handed over (not counted)",
                        f.strangers
                    ));
                }
                end.errors.extend(f.error);
                if !f.stats.fin && !no_fin {
                    end.errors.push(format!(
                        "no FIN from {}: the client stopped sending without ending its test (killed?)",
                        shown(peer)
                    ));
                }
                end.udp = Some((f.stats, f.duration, f.reports_sent));
            }
        }
        Err(e) => end.errors.push(e.to_string()),
    }
    end.span = Some((start, Instant::now()));
    end
}

#[cfg(test)]
mod tests {
    use super::super::server::tests::{collect_events, loopback_opts};
    use super::super::server::{bind_receiver, serve};
    use super::*;
    use crate::transport::udp::send::{self as udp_send, FinConfig, UdpSendConfig, UdpSendFlow};
    use crate::uring::ring::{WaitMode, WakeBatch};
    use crate::wire::iperf2::HEADER_VERSION2;
    use std::time::Duration;

    #[test]
    fn udp_listener_binds_exclusively_or_shared() {
        let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let fd = || sockopt::socket_for(&addr, libc::SOCK_DGRAM).unwrap();
        let s = udp_listener(fd(), addr, true).expect("bind v4");
        let addr = s.local_addr().unwrap();
        assert!(udp_listener(fd(), addr, true).is_err(), "an exclusive bind on a taken port fails");
        let shared = udp_listener(fd(), addr, false).expect("a reuse bind next to ours succeeds");
        assert_eq!(shared.local_addr().unwrap(), addr);
        shared.connect("127.0.0.1:9".parse::<SocketAddr>().unwrap()).unwrap();
        disconnect(&shared).expect("back to listening for everyone");
        assert!(shared.peer_addr().is_err(), "no peer after the disconnect");
    }

    #[test]
    fn udp_client_gets_our_report_on_loopback() {
        let listeners = bind_receiver(&loopback_opts()).expect("bind on loopback");
        let addr = listeners.udp.local_addr().unwrap();
        let (sink, seen) = collect_events();
        let server = std::thread::spawn(move || serve(loopback_opts(), listeners, sink));
        // Our own sender plays the iperf2 client: 2000 datagrams, FINs until the report.
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(addr).unwrap();
        let cfg = UdpSendConfig {
            wait: WaitMode::Sleep,
            ring: Default::default(),
            batch: WakeBatch { want: 1, max_delay_us: 0 },
            len: 1470,
            gso: true,
            inflight: 4,
            deadline: Instant::now() + Duration::from_secs(10),
            halt: None,
            rate_bps: 200_000_000,
            burst: 0,
            max_datagrams: 2000,
            drain_limit: Duration::from_secs(1),
            fin: Some(FinConfig::iperf2()),
            refused: None,
        };
        let sent = udp_send::run(vec![UdpSendFlow { socket: tx, queue: 0 }], &QueueCounters::new(1), &cfg).unwrap();
        let ok = server.join().unwrap().expect("serve returns after one test");
        let report = sent.flows[0].report.expect("our receiver answered the FIN");
        let events = seen.lock().unwrap();
        let done = events
            .iter()
            .find_map(|e| if let Iperf2Event::TestDone(s) = e { Some(s.clone()) } else { None })
            .expect("a finished test");
        assert!(ok, "complete: {done:?}");
        let stats = done.udp.expect("UDP figures");
        assert_eq!(stats.expected, 2000, "FIN told how many were sent");
        assert_eq!(report.datagrams, stats.expected, "the report carries our total");
        assert_eq!(report.lost, stats.lost, "and our loss");
        assert_eq!(report.bytes, done.bytes);
        assert_eq!(stats.received + stats.lost, 2000);
    }

    #[test]
    fn udp_reverse_client_is_ignored() {
        let mut opts = loopback_opts();
        opts.once = false;
        let stop = opts.stop.clone();
        let listeners = bind_receiver(&opts).expect("bind on loopback");
        let addr = listeners.udp.local_addr().unwrap();
        let (sink, seen) = collect_events();
        let server = std::thread::spawn(move || serve(opts, listeners, sink));
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(addr).unwrap();
        let mut d = vec![0u8; 200];
        d[0..4].copy_from_slice(&1u32.to_be_bytes());
        d[16..20].copy_from_slice(&(0x4C01_0098 | HEADER_VERSION2).to_be_bytes());
        d[48..50].copy_from_slice(&iperf2::upper::REVERSE.to_be_bytes());
        for _ in 0..20 {
            tx.send(&d).unwrap();
        }
        let refused = |e: &Iperf2Event| matches!(e, Iperf2Event::Refused { proto: Proto::Udp, .. });
        let until = Instant::now() + Duration::from_secs(3);
        while !seen.lock().unwrap().iter().any(refused) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(200));
        let events = seen.lock().unwrap().clone();
        assert_eq!(events.iter().filter(|e| refused(e)).count(), 1, "logged once for 20 datagrams: {events:?}");
        assert!(!events.iter().any(|e| matches!(e, Iperf2Event::TestDone(_))), "no test is served for it");
        stop.stop("the test is over");
        assert!(server.join().unwrap().expect("serving ends when asked"));
    }
}
