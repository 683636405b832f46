//! `recv --iperf2`: serves unmodified `iperf -c` clients, TCP and UDP, on one port (5001 by
//! default), test after test.
//!
//! One serving thread watches the UDP listening socket, and the TCP listener through the accept
//! gate ([`crate::session::gate`]), which holds every accepted connection that has not yet sent
//! its whole header: an idle or slow connection costs a descriptor, never a thread, and has the
//! gate's deadline from its accept to send it. Only a flow that will be served gets a thread of
//! its own, which counts its bytes with the io_uring receive loops.
//! - **TCP**: the first word is classified ([`classify_tcp_first_word`]), the rest of the
//!   header read, the ack written when the client blocks for one (`-X`), and tests that need
//!   us to send (`-r`, `-d`, `-R`, `--full-duplex`, `--bounceback`) are refused and closed. The
//!   header bytes are counted: an iperf2 client counts them in its own total, and so does
//!   `iperf -s`.
//! - **UDP**: iperf2 gives each client port its own server socket (Listener.cpp). We do the
//!   same: the listening socket is peeked, never read, for a new client's first datagram; it
//!   is then connected to that client and handed to a receive thread (FINs answered with a
//!   [`crate::wire::iperf2::ServerReport`]), and a fresh listening socket is bound to the port
//!   (`SO_REUSEADDR`; the kernel prefers the connected socket for its peer). Datagrams of
//!   another new client in the microseconds between the two steps are lost to that client, as
//!   with `iperf -s -u`.
//!
//! Flows of one `iperf -c -P N` (same client address, the header says N) are one test: one
//! event when the last of them ends. Limits: connections still sending their header, flows and
//! UDP sessions are capped per source address and in total, within what the open-file limit
//! allows ([`Caps`]); running out of descriptors or threads anyway pauses accepting (or taking
//! new UDP clients), said once, and never ends the serving.

use super::groups::{ClientTest, FlowEnd, FlowGuard, Joined, Shared, State, REFUSED_MAX};
use super::receiver::{Caps, Iperf2Event, Iperf2EventSink, Iperf2Listeners, Iperf2RecvOptions};
use crate::base::error::{Error, Result};
use crate::base::spec::Proto;
use crate::compat::{count_to_eof, shown};
use crate::metrics::measure::QueueCounters;
use crate::runtime::placement::resolve_cpus;
use crate::session::gate::{self, Classifier, GateEvent, Pause, Verdict};
use crate::session::logq::RateLimit;
use crate::sys::epoll::Epoll;
use crate::sys::probe::KernelCaps;
use crate::sys::sockopt;
use crate::transport::udp::recv::{self as udp_recv, UdpRecvConfig, UdpRecvFlow, GRO_PAYLOAD};
use crate::wire::iperf2::{
    self, classify_tcp_first_word, version_string, ClientHdrAck, TcpClientHeader, TcpClientKind, TcpHeaderWord,
    TestAmount, UdpClientHeader, IPERF_2_1_8_VERSION, SERVER_ACKFIN_SILENCE,
};
use crate::wire::udp_payload::{self as payload, WireTime};
use crate::workload::stream::RECV_BATCH;
use std::io::{self, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpStream, UdpSocket};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Refusals are told once per address per window of the refusal log (10 s).
const TELLS_PER_WINDOW: u32 = 1;
/// The UDP listening socket's token on the gate's epoll.
const UDP_TOKEN: u64 = 1;
/// Buffers of a UDP flow's GRO ring (each up to 64 KiB of coalesced datagrams).
const UDP_RECV_BUFS: u16 = 64;
/// Datagrams the serving loop looks at per wake-up, so TCP accepts are never starved.
const UDP_PEEKS_PER_TICK: usize = 256;

/// Binds the TCP listener and the UDP socket on `opts.port` (port 0: any free port, the same
/// for both). Another listener on the port is a usage error.
pub fn bind_receiver(opts: &Iperf2RecvOptions) -> Result<Iperf2Listeners> {
    let in_use = |what: &str, port: u16, e: io::Error| {
        match e.kind() {
        io::ErrorKind::AddrInUse => Error::usage(format!(
            "{what} port {port} is already in use on {}: stop the other listener (an `iperf -s`?) or pick another --port",
            opts.bind
        )),
        io::ErrorKind::AddrNotAvailable => {
            Error::usage(format!("cannot bind {}: no local interface has that address", SocketAddr::new(opts.bind, port)))
        }
        _ => Error::io(format!("binding {what} {}", SocketAddr::new(opts.bind, port)), e),
    }
    };
    let tcp = gate::listen(SocketAddr::new(opts.bind, opts.port), None).map_err(|e| in_use("TCP", opts.port, e))?;
    let port = tcp.local_addr().map_err(|e| Error::io("reading the bound address", e))?.port();
    let addr = SocketAddr::new(opts.bind, port);
    let udp = sockopt::socket_for(&addr, libc::SOCK_DGRAM)
        .and_then(|fd| udp_listener(fd, addr, true))
        .map_err(|e| in_use("UDP", port, e))?;
    Ok(Iperf2Listeners { tcp, udp })
}

/// Makes `fd` a UDP socket bound to `addr` that others of ours can share (`SO_REUSEADDR`),
/// with GRO and kernel receive timestamps on before any datagram arrives. `exclusive`: bind
/// before allowing reuse, so that any other socket already on the port (an `iperf -s -u`,
/// another `recv --iperf2`) makes the bind fail instead of silently sharing the port.
fn udp_listener(fd: OwnedFd, addr: SocketAddr, exclusive: bool) -> io::Result<UdpSocket> {
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

/// Names what a header asks the receiver to send, for the refusal message.
fn sending_mode(reverse: bool, full_duplex: bool, legacy_dual: bool, run_now: bool) -> &'static str {
    if full_duplex {
        "--full-duplex"
    } else if reverse {
        "-R (reverse)"
    } else if legacy_dual && run_now {
        "-d (dual test)"
    } else {
        "-r (trade-off test)"
    }
}

/// Why we do not serve a test that needs us to send.
fn refusal(mode: &str) -> String {
    format!(
        "{mode} needs the receiver to send; `uringbench recv --iperf2` only receives (run that test against \
         `iperf -s`, or use `uringbench send --iperf2` for our sending side)"
    )
}

/// A TCP connection on the gate: its header's first word, once read.
type Header = gate::Pending<Option<TcpHeaderWord>>;

/// The serving loop's own state: the UDP listening socket, and the refusal log.
struct Serving {
    shared: Arc<Shared>,
    udp: UdpSocket,
    udp_addr: SocketAddr,
    refusals: RateLimit,
    udp_pause: Pause,
}

impl Classifier for Serving {
    type State = Option<TcpHeaderWord>;
    type Outcome = bool;

    fn open(&self, _: IpAddr) -> std::result::Result<(Self::State, usize), String> {
        Ok((None, 4))
    }

    /// The first word classifies the stream; the rest of the header says the test.
    fn classify(&mut self, mut conn: Header) -> Verdict<Self::State> {
        let Some(word) = conn.state else {
            let first = u32::from_be_bytes([conn.buf[0], conn.buf[1], conn.buf[2], conn.buf[3]]);
            return match classify_tcp_first_word(first) {
                TcpClientKind::BounceBack => self.refuse_tcp(conn, refusal("--bounceback")),
                TcpClientKind::PlainData => {
                    self.start_tcp_flow(conn, 4, ClientTest { version: None, threads: 1, time: None, rate_bps: 0 })
                }
                TcpClientKind::Header(word) => {
                    conn.state = Some(word);
                    conn.want = word.len_bytes as usize;
                    Verdict::More(conn)
                }
            };
        };
        let h = TcpClientHeader::parse(word, &conn.buf);
        if h.receiver_must_send() {
            let run_now = word.flags & iperf2::RUN_NOW != 0;
            return self.refuse_tcp(conn, refusal(sending_mode(h.reverse, h.full_duplex, word.legacy_dual, run_now)));
        }
        if word.permit_key {
            let reason = "the client sent a permit key (--permit-key), which this receiver does not check";
            return self.refuse_tcp(conn, reason.into());
        }
        if word.needs_ack {
            // A 2.1.8 client without -X never reads the ack; one left unread in its socket
            // would turn its close into a reset, so only clients that wait for it get it. It
            // is small and the socket's send buffer is empty: it goes out whole at once.
            let now = WireTime::now();
            let times = h.trip_times.then_some(iperf2::AckTimes { sent: now, sent_rx: now, ack: now });
            let ack = ClientHdrAck { version: IPERF_2_1_8_VERSION, flags: 0, times }.encode();
            if let Err(e) = (&conn.stream).write_all(&ack) {
                self.drop_conn(conn.peer, format!("writing the header ack failed: {e}"));
                return Verdict::Done;
            }
        }
        let test = ClientTest {
            version: h.peer_version.map(|(u, l)| version_string(u, l)),
            threads: u32::try_from(h.num_threads).unwrap_or(1).max(1),
            time: match h.amount {
                TestAmount::Time(t) => Some(t),
                TestAmount::Bytes(_) => None,
            },
            rate_bps: h.rate_bps,
        };
        self.start_tcp_flow(conn, u64::from(word.len_bytes), test)
    }

    fn refusals(&self) -> &RateLimit {
        &self.refusals
    }

    fn start(&mut self, epoll: &Epoll) -> io::Result<()> {
        epoll.add(self.udp.as_raw_fd(), UDP_TOKEN)
    }

    fn tell(&self, event: GateEvent) {
        (self.shared.events)(match event {
            GateEvent::Dropped { peer, reason } => Iperf2Event::Dropped { peer: shown(peer), reason },
            GateEvent::Paused { what, error, .. } => {
                Iperf2Event::Paused { proto: Proto::Tcp, reason: paused(what, &error) }
            }
            // The pause said it retries; the next test line says it worked.
            GateEvent::Resumed { .. } => return,
            GateEvent::Suppressed { source, count, seconds } => {
                Iperf2Event::More { peer: Some(source).filter(|s| !s.is_unspecified()), count, seconds: seconds as f64 }
            }
        });
    }

    fn tick(&mut self, epoll: &Epoll, now: Instant) -> Option<bool> {
        if let Some(ok) = self.shared.lock().once_result {
            return Some(ok);
        }
        if self.shared.opts.stop.is_stopped() {
            return Some(true);
        }
        if self.udp_pause.due(now) && epoll.add(self.udp.as_raw_fd(), UDP_TOKEN).is_ok() {
            self.udp_pause.retried();
        }
        self.udp_pause.over(now);
        self.shared.tick();
        None
    }

    fn ready(&mut self, token: u64, epoll: &Epoll) {
        if token == UDP_TOKEN {
            self.handle_udp(epoll);
        }
    }
}

/// Why an intake paused, as `recv --iperf2` says it.
fn paused(what: &str, e: &io::Error) -> String {
    let why = match e.raw_os_error() {
        Some(libc::EMFILE) | Some(libc::ENFILE) => "out of file descriptors",
        _ => "out of resources",
    };
    format!("{what} failed ({why}: {e}); trying again every {} ms", gate::PAUSE.as_millis())
}

impl Serving {
    fn tell_event(&self, event: Iperf2Event) {
        (self.shared.events)(event);
    }

    /// Refuses a TCP test: its connection is closed, so the client ends at once.
    fn refuse_tcp(&self, conn: Header, reason: String) -> Verdict<Option<TcpHeaderWord>> {
        let _ = conn.stream.shutdown(Shutdown::Both);
        self.tell_event(Iperf2Event::Refused { proto: Proto::Tcp, peer: shown(conn.peer), reason });
        Verdict::Done
    }

    /// Taking new UDP clients waits [`gate::PAUSE`] (the socket is off the epoll meanwhile);
    /// said once per episode.
    fn pause_udp(&mut self, epoll: &Epoll, what: &str, e: &io::Error) {
        epoll.remove(self.udp.as_raw_fd());
        if self.udp_pause.failed(Instant::now()) {
            self.tell_event(Iperf2Event::Paused { proto: Proto::Udp, reason: paused(what, e) });
        }
    }

    fn start_tcp_flow(&mut self, p: Header, prefix: u64, test: ClientTest) -> Verdict<Option<TcpHeaderWord>> {
        let ip = p.peer.ip().to_canonical();
        let joined = match self.shared.join(Proto::Tcp, ip, &test, None) {
            Ok(j) => Arc::new(j),
            Err(reason) => {
                let _ = p.stream.shutdown(Shutdown::Both);
                self.drop_conn(p.peer, reason);
                return Verdict::Done;
            }
        };
        let (shared, mine) = (Arc::clone(&self.shared), Arc::clone(&joined));
        let spawned = std::thread::Builder::new().name("ub-iperf2-tcp".into()).spawn(move || {
            let mut guard = FlowGuard::new(&shared, &mine);
            guard.end = receive_tcp(&shared, p.stream, &test, prefix, p.accepted, &mine);
        });
        match spawned {
            Ok(_) => Verdict::Done,
            Err(e) => {
                self.shared.leave(&joined);
                Verdict::Pause("starting a flow thread", e)
            }
        }
    }

    /// Looks at the datagrams waiting on the UDP listening socket: a new client's first
    /// datagram hands the socket over to that client and binds a new one; anything else is
    /// read away.
    fn handle_udp(&mut self, epoll: &Epoll) {
        let mut head = [0u8; 128];
        for _ in 0..UDP_PEEKS_PER_TICK {
            let (n, peer) = match self.udp.peek_from(&mut head) {
                Ok(r) => r,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // ICMP errors for earlier report datagrams (a client gone) surface here: skip.
                Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => continue,
                Err(e) => return self.pause_udp(epoll, "reading the UDP listening socket", &e),
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
            if !self.hand_over(epoll, peer, &header) {
                return;
            }
        }
    }

    /// Reads away the datagram at the head of the listening socket.
    fn discard(&self) {
        let _ = self.udp.recv_from(&mut [0u8; 1]);
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
        self.tell_event(Iperf2Event::Refused { proto: Proto::Udp, peer: shown(peer), reason });
        true
    }

    /// A new client port: this socket becomes its own (everything it sent so far is queued
    /// here), and a fresh socket listens for the next client. `false`: taking new clients is
    /// paused.
    fn hand_over(&mut self, epoll: &Epoll, peer: SocketAddr, header: &UdpClientHeader) -> bool {
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
                self.drop_conn(peer, reason);
                return true;
            }
        };
        // The next listening socket's descriptor first: out of descriptors, nothing changes.
        let spare = match sockopt::socket_for(&self.udp_addr, libc::SOCK_DGRAM) {
            Ok(fd) => fd,
            Err(e) => {
                self.shared.leave(&joined);
                self.discard();
                self.pause_udp(epoll, "opening a UDP socket for a new client", &e);
                return false;
            }
        };
        if let Err(e) = self.udp.connect(peer) {
            self.shared.leave(&joined);
            self.discard();
            self.drop_conn(peer, format!("cannot connect a UDP socket to it: {e}"));
            return true;
        }
        let next = match udp_listener(spare, self.udp_addr, false) {
            Ok(s) => s,
            Err(e) => {
                // Listen for everyone on the old socket again.
                let _ = disconnect(&self.udp);
                self.shared.leave(&joined);
                self.discard();
                self.pause_udp(epoll, "binding a UDP socket for the next client", &e);
                return false;
            }
        };
        // The client's socket leaves the epoll before it is handed over; the new one joins.
        epoll.remove(self.udp.as_raw_fd());
        let socket = std::mem::replace(&mut self.udp, next);
        if let Err(e) = epoll.add(self.udp.as_raw_fd(), UDP_TOKEN) {
            self.pause_udp(epoll, "watching the UDP socket for the next client", &e);
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
            self.pause_udp(epoll, "starting a flow thread", &e);
            return false;
        }
        true
    }
}

/// Counts one TCP flow's bytes to EOF (the header's `prefix` included).
fn receive_tcp(
    shared: &Shared,
    stream: TcpStream,
    test: &ClientTest,
    prefix: u64,
    accepted: Instant,
    joined: &Joined,
) -> FlowEnd {
    let (bytes, errors) =
        count_to_eof(stream, &shared.opts, &shared.kernel, (test.rate_bps, test.threads), Arc::clone(&joined.stop));
    let mut end = FlowEnd { bytes: prefix + bytes, errors, ..FlowEnd::default() };
    end.span = Some((accepted, Instant::now()));
    end
}

/// Serves one UDP client port on the socket handed over to it (connected to that port).
fn receive_udp(
    shared: &Shared,
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
        stop: Arc::clone(&joined.stop),
        deadline: joined.deadline,
    };
    let start = Instant::now();
    let mut end = FlowEnd::default();
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

/// Serves iperf2 clients (`iperf -c`, TCP and UDP) until killed, or until the first test
/// ends with `once`. Returns whether that test was complete (always true without `once`).
pub fn serve(opts: Iperf2RecvOptions, listeners: Iperf2Listeners, events: Iperf2EventSink) -> Result<bool> {
    let kernel = KernelCaps::detect()?;
    kernel.require_tcp_stream()?;
    let mut cpus = resolve_cpus(opts.cpus.as_deref())?;
    if opts.cpus.is_none() {
        // Senders take CPUs from the bottom: on one host, start from the top (as `recv` does).
        cpus.reverse();
    }
    let Iperf2Listeners { tcp, udp } = listeners;
    let tcp_addr = tcp.local_addr().map_err(|e| Error::io("reading the bound address", e))?;
    let udp_addr = udp.local_addr().map_err(|e| Error::io("reading the bound address", e))?;
    let caps = Caps::for_limit(gate::open_files_limit(), opts.max_flows);
    (events)(Iperf2Event::Listening { tcp: tcp_addr, udp: udp_addr, caps });
    let shared = Arc::new(Shared {
        opts,
        caps,
        kernel,
        cpus,
        next_cpu: AtomicUsize::new(0),
        events,
        state: Mutex::new(State::default()),
        stopping: AtomicBool::new(false),
    });
    let mut serving = Serving {
        shared: Arc::clone(&shared),
        udp,
        udp_addr,
        refusals: RateLimit::new(TELLS_PER_WINDOW),
        udp_pause: Pause::default(),
    };
    let limits = caps.gate_limits("iperf2 header", "sending their header");
    let ok = gate::serve(tcp, limits, &mut serving)?;
    shared.stop_all();
    // Flow threads notice the stop within one wait (100 ms); give them a bounded moment.
    let until = Instant::now() + Duration::from_secs(2);
    while shared.lock().flows > 0 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(ok)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::stop::StopToken;
    use crate::compat::iperf2::receiver::Iperf2TestSummary;
    use crate::runtime::placement::BusyPoll;
    use crate::transport::udp::send::{self as udp_send, FinConfig, UdpSendConfig, UdpSendFlow};
    use crate::uring::ring::WaitMode;
    use crate::uring::ring::WakeBatch;
    use crate::wire::iperf2::{HEADER_EXTEND, HEADER_LEN_BIT, HEADER_VERSION2};
    use std::io::Read;

    #[test]
    fn refusal_names_the_mode() {
        assert!(sending_mode(true, false, false, false).contains("-R"));
        assert!(sending_mode(false, true, false, false).contains("--full-duplex"));
        assert!(sending_mode(false, false, true, true).contains("-d"));
        assert!(sending_mode(false, false, true, false).contains("-r"));
        assert!(refusal("--full-duplex").contains("only receives"));
    }

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

    fn collect_events() -> (Iperf2EventSink, Arc<Mutex<Vec<Iperf2Event>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink_seen = Arc::clone(&seen);
        (Arc::new(move |e| sink_seen.lock().unwrap().push(e)), seen)
    }

    fn loopback_opts() -> Iperf2RecvOptions {
        Iperf2RecvOptions {
            bind: "127.0.0.1".parse().unwrap(),
            port: 0,
            cpus: None,
            busy_poll: BusyPoll::Off,
            once: true,
            max_time: Duration::from_secs(20),
            max_flows: 16,
            stop: StopToken::new(),
            fast: Default::default(),
        }
    }

    /// A 2.1.8-style TCP client header (plain `iperf -c`, or with upper flags).
    fn tcp_header(flags: u32, threads: i32, upper: u16) -> Vec<u8> {
        let mut h = vec![0u8; 60];
        h[0..4].copy_from_slice(&flags.to_be_bytes());
        h[4..8].copy_from_slice(&threads.to_be_bytes());
        h[20..24].copy_from_slice(&(-100i32).to_be_bytes());
        h[32..34].copy_from_slice(&upper.to_be_bytes());
        h[36..40].copy_from_slice(&IPERF_2_1_8_VERSION.0.to_be_bytes());
        h[40..44].copy_from_slice(&IPERF_2_1_8_VERSION.1.to_be_bytes());
        h
    }

    #[test]
    fn tcp_clients_counted_and_refused_on_loopback() {
        let listeners = bind_receiver(&loopback_opts()).expect("bind on loopback");
        let addr = listeners.tcp_addr().unwrap();
        let (sink, seen) = collect_events();
        let server = std::thread::spawn(move || serve(loopback_opts(), listeners, sink));

        // A reverse (-R) client is refused and its connection closed.
        let mut rev = TcpStream::connect(addr).unwrap();
        rev.write_all(&tcp_header(0x4401_0078, 1, iperf2::upper::REVERSE)).unwrap();
        rev.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        assert!(matches!(rev.read(&mut [0u8; 16]), Ok(0) | Err(_)), "refused connection is closed");

        // Two flows of a -P 2 test: header + data, then half-close; one test, all bytes. The
        // first flow's header comes a byte at a time (read as it arrives, on no thread of
        // its own), and it ends before the second one connects: the second still joins.
        let mut flows = Vec::new();
        for n in 0..2u64 {
            let mut s = TcpStream::connect(addr).unwrap();
            let header = tcp_header(HEADER_EXTEND | HEADER_LEN_BIT | (60 << 1), 2, 0);
            if n == 0 {
                for b in &header {
                    s.write_all(&[*b]).unwrap();
                    std::thread::sleep(Duration::from_millis(2));
                }
            } else {
                s.write_all(&header).unwrap();
            }
            let chunk = vec![b'0'; 64 * 1024];
            for _ in 0..(16 + n) {
                s.write_all(&chunk).unwrap();
            }
            s.shutdown(Shutdown::Write).unwrap();
            if n == 0 {
                std::thread::sleep(Duration::from_millis(300));
            }
            flows.push(s);
        }
        let ok = server.join().unwrap().expect("serve returns after one test");
        let events = seen.lock().unwrap();
        assert!(ok, "the test was complete: {events:?}");
        let refused = events.iter().any(|e| matches!(e, Iperf2Event::Refused { reason, .. } if reason.contains("-R")));
        assert!(refused, "the -R client was refused with a reason: {events:?}");
        let done: Vec<&Iperf2TestSummary> =
            events.iter().filter_map(|e| if let Iperf2Event::TestDone(s) = e { Some(s) } else { None }).collect();
        assert_eq!(done.len(), 1, "one test for both flows: {events:?}");
        let t = done[0];
        assert_eq!((t.flows, t.expected_flows), (2, 2));
        assert_eq!(t.bytes, 2 * 60 + (16 + 17) * 64 * 1024, "header bytes and data, every byte");
        assert_eq!(t.client_version.as_deref(), Some("2.1.8"));
        drop(flows);
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
