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
//! - **UDP**: each client port gets a socket of its own, handed over from the listening
//!   socket when its first datagram arrives (`udp`).
//!
//! Flows of one `iperf -c -P N` (same client address, the header says N) are one test: one
//! event when the last of them ends. Limits: connections still sending their header, flows and
//! UDP sessions are capped per source address and in total, within what the open-file limit
//! allows ([`Caps`]); running out of descriptors or threads anyway pauses accepting (or taking
//! new UDP clients), said once, and never ends the serving.

use super::groups::{ClientTest, ClientTests, FlowEnd, FlowGuard, Joined, State};
use super::receiver::{refusal, sending_mode, Iperf2Event, Iperf2EventSink, Iperf2Listeners, Iperf2RecvOptions};
use super::udp::{udp_listener, UdpIntake, UDP_TOKEN};
use crate::base::error::{Error, Result};
use crate::base::spec::Proto;
use crate::compat::{count_to_eof, shown};
use crate::metrics::measure::QueueCounters;
use crate::runtime::placement::resolve_cpus;
use crate::session::gate::{self, Classifier, GateEvent, Verdict};
use crate::session::logq::RateLimit;
use crate::sys::epoll::Epoll;
use crate::sys::sockopt;
use crate::wire::iperf2::{
    self, classify_tcp_first_word, version_string, ClientHdrAck, TcpClientHeader, TcpClientKind, TcpHeaderWord,
    TestAmount, IPERF_2_1_8_VERSION,
};
use crate::wire::udp_payload::WireTime;
use std::io::{self, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Refusals are told once per address per window of the refusal log (10 s).
const TELLS_PER_WINDOW: u32 = 1;
/// Binds the TCP listener and the UDP socket on `opts.port` (port 0: any free port, the same
/// for both). Another listener on the port is a usage error.
pub fn bind_receiver(opts: &Iperf2RecvOptions) -> Result<Iperf2Listeners> {
    const OTHER: &str = " (an `iperf -s`?)";
    let tcp = gate::listen(SocketAddr::new(opts.bind, opts.port), None, OTHER)?;
    let addr = tcp.local_addr().map_err(|e| Error::io("reading the bound address", e))?;
    let udp = sockopt::socket_for(&addr, libc::SOCK_DGRAM)
        .and_then(|fd| udp_listener(fd, addr, true))
        .map_err(|e| gate::bind_error("UDP ", addr, None, OTHER, e))?;
    Ok(Iperf2Listeners { tcp, udp })
}

/// A TCP connection on the gate: its header's first word, once read.
type Header = gate::Pending<Option<TcpHeaderWord>>;

/// The serving loop's own state: the UDP listening socket, and the refusal log.
struct Serving {
    shared: Arc<ClientTests>,
    udp: UdpIntake,
    refusals: RateLimit,
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
        self.udp.watch(epoll)
    }

    fn tell(&self, event: GateEvent) {
        // The pause said it retries; the next test line says it worked.
        if let Some(event) = Iperf2Event::from_gate(event) {
            (self.shared.events)(event);
        }
    }

    fn tick(&mut self, epoll: &Epoll, now: Instant) -> Option<bool> {
        if let Some(ok) = self.shared.lock().once_result {
            return Some(ok);
        }
        if self.shared.opts.stop.is_stopped() {
            return Some(true);
        }
        self.udp.resume_if_due(epoll, now);
        self.shared.tick();
        None
    }

    fn ready(&mut self, token: u64, epoll: &Epoll) {
        if token == UDP_TOKEN {
            self.udp.handle(epoll, &self.refusals);
        }
    }
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

    fn start_tcp_flow(&mut self, p: Header, prefix: u64, test: ClientTest) -> Verdict<Option<TcpHeaderWord>> {
        let ip = p.peer.ip().to_canonical();
        // The flow's progress is watched by the serving loop (the no-progress limit).
        let counters = Arc::new(QueueCounters::new(1));
        let joined = match self.shared.join(Proto::Tcp, ip, &test, Some(Arc::clone(&counters))) {
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
            guard.end = receive_tcp(&shared, p.stream, &test, prefix, p.accepted, &mine, &counters);
        });
        match spawned {
            Ok(_) => Verdict::Done,
            Err(e) => {
                self.shared.leave(&joined);
                Verdict::Pause("starting a flow thread", e)
            }
        }
    }
}

/// Counts one TCP flow's bytes to EOF (the header's `prefix` included).
fn receive_tcp(
    shared: &ClientTests,
    stream: TcpStream,
    test: &ClientTest,
    prefix: u64,
    accepted: Instant,
    joined: &Joined,
    counters: &QueueCounters,
) -> FlowEnd {
    let pace = (test.rate_bps, test.threads);
    let local = stream.local_addr().ok();
    let (bytes, errors) = count_to_eof(stream, &shared.opts, &shared.kernel, pace, Arc::clone(&joined.stop), counters);
    let mut end = FlowEnd { bytes: prefix + bytes, errors, local, ..FlowEnd::default() };
    end.span = Some((accepted, Instant::now()));
    end
}

/// Serves iperf2 clients (`iperf -c`, TCP and UDP) until killed, or until the first test
/// ends with `once`. Returns whether that test was complete (always true without `once`).
pub fn serve(opts: Iperf2RecvOptions, listeners: Iperf2Listeners, events: Iperf2EventSink) -> Result<bool> {
    let kernel = opts.kernel.clone();
    kernel.require_tcp_stream()?;
    let mut cpus = resolve_cpus(opts.cpus.as_deref())?;
    if opts.cpus.is_none() {
        // Senders take CPUs from the bottom: on one host, start from the top (as `recv` does).
        cpus.reverse();
    }
    let Iperf2Listeners { tcp, udp } = listeners;
    let tcp_addr = tcp.local_addr().map_err(|e| Error::io("reading the bound address", e))?;
    let udp_addr = udp.local_addr().map_err(|e| Error::io("reading the bound address", e))?;
    let caps = opts.caps();
    (events)(Iperf2Event::Listening(crate::compat::Listening {
        tcp: Some(tcp_addr),
        udp: Some(udp_addr),
        ports: 1,
        caps,
        authorized_users: None,
    }));
    let shared = Arc::new(ClientTests {
        opts,
        caps,
        kernel,
        cpus,
        next_cpu: AtomicUsize::new(0),
        events,
        state: Mutex::new(State::default()),
        stopping: AtomicBool::new(false),
    });
    let udp = UdpIntake::new(Arc::clone(&shared), udp, udp_addr);
    let mut serving = Serving { shared: Arc::clone(&shared), udp, refusals: RateLimit::new(TELLS_PER_WINDOW) };
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
pub(super) mod tests {
    use super::*;
    use crate::base::stop::StopToken;
    use crate::compat::iperf2::receiver::Iperf2TestSummary;
    use crate::runtime::placement::BusyPoll;
    use crate::wire::iperf2::{HEADER_EXTEND, HEADER_LEN_BIT};
    use std::io::Read;

    #[test]
    fn refusal_names_the_mode() {
        assert!(sending_mode(true, false, false, false).contains("-R"));
        assert!(sending_mode(false, true, false, false).contains("--full-duplex"));
        assert!(sending_mode(false, false, true, true).contains("-d"));
        assert!(sending_mode(false, false, true, false).contains("-r"));
        assert!(refusal("--full-duplex").contains("only receives"));
    }

    pub(crate) fn collect_events() -> (Iperf2EventSink, Arc<Mutex<Vec<Iperf2Event>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink_seen = Arc::clone(&seen);
        (Arc::new(move |e| sink_seen.lock().unwrap().push(e)), seen)
    }

    pub(crate) fn loopback_opts() -> Iperf2RecvOptions {
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
            kernel: crate::sys::probe::KernelCaps::detect().unwrap(),
            max_pending_per_source: 64,
            max_rate_bps: None,
            flows_from_any_address: false,
            no_progress: crate::session::progress::DEFAULT_NO_PROGRESS,
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

    /// A flow that sends its header and a little data, then nothing, is ended at the
    /// no-progress limit: its connection is closed and its test says why.
    #[test]
    fn a_silent_tcp_flow_ends_at_the_no_progress_limit() {
        let opts = Iperf2RecvOptions { no_progress: Duration::from_millis(500), ..loopback_opts() };
        let listeners = bind_receiver(&opts).expect("bind on loopback");
        let addr = listeners.tcp_addr().unwrap();
        let (sink, seen) = collect_events();
        let server = std::thread::spawn(move || serve(opts, listeners, sink));
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(&tcp_header(HEADER_EXTEND | HEADER_LEN_BIT | (60 << 1), 1, 0)).unwrap();
        s.write_all(&[b'0'; 4096]).unwrap();
        let sent = Instant::now();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let closed = loop {
            match s.read(&mut [0u8; 16]) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                r => break r,
            }
        };
        assert!(matches!(closed, Ok(0)), "the silent flow's connection is closed: {closed:?}");
        let took = sent.elapsed();
        assert!(took >= Duration::from_millis(450) && took < Duration::from_secs(3), "closed after {took:?}");
        assert!(server.join().unwrap().is_ok());
        let events = seen.lock().unwrap();
        let done = events.iter().find_map(|e| if let Iperf2Event::TestDone(t) = e { Some(t) } else { None });
        let done = done.expect("the test is told");
        assert_eq!(done.bytes, 60 + 4096, "{done:?}");
        assert!(done.errors.iter().any(|e| e.contains("nothing received for 0.5 s")), "{done:?}");
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
}
