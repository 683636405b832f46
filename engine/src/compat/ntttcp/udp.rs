//! `recv --ntttcp -u`: NTttcp's UDP no-sync receiver. One UDP socket per NTttcp thread on
//! ports base..base+P-1, each read by a thread of its own; datagrams carry plain data (no
//! header, no end marker) from any number of sender sockets, and are counted as NTttcp counts
//! them: bytes and datagrams per port, within the test's window only.
//!
//! The window is NTttcp's (`-t`, and `-wu`/`-cd`, ntttcp-for-Linux's `-W`/`-C`), from the
//! first datagram's arrival: the first `warmup` is received and not counted, the next `time`
//! is counted, the `cooldown` after it is received and not counted, and the test ends. Every
//! test is bounded by its window (at most `--max-time`); a stop ends it at once.

use super::{NtttcpEvent, NtttcpEventSink, NtttcpTestSummary};
use crate::base::error::{Error, Result};
use crate::base::spec::{Proto, TestSpec};
use crate::compat::Listening;
use crate::compat::{shown, PeerRecvOptions};
use crate::workload::udp_stream::prepare_receiver;
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a port's thread waits for a datagram before it looks at the stop flag again.
const READ_WAIT: Duration = Duration::from_millis(50);
/// How often the test's end is looked for.
const POLL: Duration = Duration::from_millis(10);
/// The largest UDP payload: every datagram fits one read.
const MAX_DATAGRAM: usize = 65_535;
/// Sender addresses kept for the test line.
const MAX_PEERS: usize = 16;
/// `start` while no test runs.
const IDLE: u64 = 0;
/// `start` while a finished test's counts are taken: datagrams then are after its end.
const ENDING: u64 = u64::MAX;

/// NTttcp's test window, from the first datagram's arrival.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NtttcpWindow {
    /// Received, not counted (NTttcp's `-wu`, ntttcp-for-Linux's `-W`).
    pub warmup: Duration,
    /// Counted (NTttcp's `-t`).
    pub time: Duration,
    /// Received after the counted time, not counted (NTttcp's `-cd`, `-C`).
    pub cooldown: Duration,
}

impl NtttcpWindow {
    fn total(&self) -> Duration {
        self.warmup + self.time + self.cooldown
    }
}

/// Binds `ports` UDP sockets from `opts.port` up; a port in use is a usage error.
pub fn bind_udp_receiver(opts: &PeerRecvOptions, ports: u32) -> Result<Vec<UdpSocket>> {
    super::check_ports(opts, ports)?;
    let spec = TestSpec { gso: false, ..TestSpec::default() };
    (0..ports)
        .map(|i| {
            let addr = SocketAddr::new(opts.bind, opts.port + i as u16);
            let socket = UdpSocket::bind(addr).map_err(|e| match e.kind() {
                io::ErrorKind::AddrInUse => Error::usage(format!("UDP {addr} is in use (an NTttcp receiver?)")),
                _ => Error::io(format!("binding UDP {addr}"), e),
            })?;
            // No GRO: each read is one datagram, as NTttcp counts them.
            prepare_receiver(&socket, &spec)?;
            socket.set_read_timeout(Some(READ_WAIT)).map_err(|e| Error::io("setting a read timeout", e))?;
            Ok(socket)
        })
        .collect()
}

/// One port's counts: in the window, and over the whole test.
#[derive(Default)]
struct PortCounts {
    bytes: AtomicU64,
    datagrams: AtomicU64,
    all_bytes: AtomicU64,
    all_datagrams: AtomicU64,
}

impl PortCounts {
    /// The counts so far, zeroed: (window bytes, window datagrams, all bytes).
    fn take(&self) -> (u64, u64, u64) {
        let all = self.all_bytes.swap(0, Ordering::Relaxed);
        self.all_datagrams.swap(0, Ordering::Relaxed);
        (self.bytes.swap(0, Ordering::Relaxed), self.datagrams.swap(0, Ordering::Relaxed), all)
    }
}

/// What the port threads share with the test's clock.
struct Shared {
    /// The clock's origin; `start` is nanoseconds after it, or [`IDLE`], [`ENDING`].
    origin: Instant,
    start: AtomicU64,
    window: NtttcpWindow,
    ports: Vec<PortCounts>,
    peers: Mutex<Vec<IpAddr>>,
    stop: AtomicBool,
}

impl Shared {
    fn nanos(&self, at: Instant) -> u64 {
        // Past 2^64 ns (584 years) a clock reads as the end of time.
        u64::try_from(at.duration_since(self.origin).as_nanos()).unwrap_or(ENDING - 1).max(IDLE + 1)
    }

    /// Counts a datagram of `len` bytes from `peer` on `port`, arrived at `now`; the first
    /// one starts the test.
    fn count(&self, port: usize, len: u64, now: Instant) {
        let at = self.nanos(now);
        let start = match self.start.compare_exchange(IDLE, at, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => at,
            Err(ENDING) => return,
            Err(start) => start,
        };
        let since = Duration::from_nanos(at.saturating_sub(start));
        let c = &self.ports[port];
        c.all_bytes.fetch_add(len, Ordering::Relaxed);
        c.all_datagrams.fetch_add(1, Ordering::Relaxed);
        if since >= self.window.warmup && since < self.window.warmup + self.window.time {
            c.bytes.fetch_add(len, Ordering::Relaxed);
            c.datagrams.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn saw(&self, peer: IpAddr) {
        let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        if peers.len() < MAX_PEERS && !peers.contains(&peer) {
            peers.push(peer);
        }
    }
}

/// Reads one port until stopped, counting every datagram.
fn read_port(shared: &Shared, port: usize, socket: &UdpSocket) -> Option<String> {
    let mut buf = vec![0u8; MAX_DATAGRAM];
    let mut last_peer: Option<IpAddr> = None;
    while !shared.stop.load(Ordering::Relaxed) {
        match socket.recv_from(&mut buf) {
            Ok((n, from)) => {
                shared.count(port, n as u64, Instant::now());
                let ip = shown(from).ip();
                if last_peer != Some(ip) {
                    last_peer = Some(ip);
                    shared.saw(ip);
                }
            }
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // A refusal from an earlier reply, or a transient error: the port keeps serving.
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {}
            Err(e) => return Some(format!("reading UDP port {}: {e}", socket.local_addr().map_or(0, |a| a.port()))),
        }
    }
    None
}

/// Serves NTttcp UDP senders on `sockets` (from `opts.port` up) until stopped, or until the
/// first test with `once`; whether that test was complete (always true without `once`).
pub fn serve_udp(
    opts: PeerRecvOptions,
    sockets: Vec<UdpSocket>,
    window: NtttcpWindow,
    events: NtttcpEventSink,
) -> Result<bool> {
    if window.time.is_zero() {
        return Err(Error::usage("-t must be more than 0 with --ntttcp -u (NTttcp's test time)"));
    }
    if window.total() > opts.max_time {
        return Err(Error::usage(format!(
            "the window ({:.0} s with warm-up and cool-down) is longer than --max-time {} s",
            window.total().as_secs_f64(),
            opts.max_time.as_secs()
        )));
    }
    let caps = opts.caps();
    events(NtttcpEvent::Listening(Listening {
        tcp: None,
        udp: Some(SocketAddr::new(opts.bind, opts.port)),
        ports: sockets.len() as u32,
        caps,
        authorized_users: None,
    }));
    let shared = Shared {
        origin: Instant::now(),
        start: AtomicU64::new(IDLE),
        window,
        ports: sockets.iter().map(|_| PortCounts::default()).collect(),
        peers: Mutex::default(),
        stop: AtomicBool::new(false),
    };
    std::thread::scope(|s| {
        let readers: Vec<_> = (0..)
            .zip(&sockets)
            .map(|(port, socket)| {
                let shared = &shared;
                std::thread::Builder::new()
                    .name("ub-ntttcp-udp".into())
                    .spawn_scoped(s, move || read_port(shared, port, socket))
                    .map_err(|e| Error::io("starting a port thread", e))
            })
            .collect::<Result<_>>()?;
        let ended = watch_tests(&opts, &shared, &events);
        shared.stop.store(true, Ordering::Relaxed);
        for reader in readers {
            if let Ok(Some(e)) = reader.join() {
                events(NtttcpEvent::Dropped { peer: SocketAddr::new(opts.bind, opts.port), reason: e });
            }
        }
        Ok(ended)
    })
}

/// Ends each test once its window (warm-up, time, cool-down) has passed since its first
/// datagram, and tells it; returns as `serve_udp` does.
fn watch_tests(opts: &PeerRecvOptions, shared: &Shared, events: &NtttcpEventSink) -> bool {
    let mut next_id = 0;
    let mut announced = false;
    loop {
        std::thread::sleep(POLL);
        let stopped = opts.stop.is_stopped();
        let start = shared.start.load(Ordering::Acquire);
        let now = Instant::now();
        let running = start != IDLE && start != ENDING;
        if running && !announced {
            announced = true;
            let peer = shared.peers.lock().unwrap_or_else(|p| p.into_inner()).first().copied();
            let local = SocketAddr::new(opts.bind, opts.port);
            let ip = peer.unwrap_or(IpAddr::from([0, 0, 0, 0]));
            let info = super::start_info(Proto::Udp, shared.ports.len(), local, ip, Some(shared.window));
            events(NtttcpEvent::Started(info));
        }
        let since = Duration::from_nanos(shared.nanos(now).saturating_sub(start));
        if running && (stopped || since >= shared.window.total()) {
            shared.start.store(ENDING, Ordering::Release);
            next_id += 1;
            let local = SocketAddr::new(opts.bind, opts.port).to_string();
            let cause = stopped.then(|| opts.stop.cause().unwrap_or("stopped"));
            let summary = finish(shared, next_id, since, cause, local);
            shared.start.store(IDLE, Ordering::Release);
            announced = false;
            let complete = summary.errors.is_empty();
            events(NtttcpEvent::TestDone(summary));
            if opts.once {
                return complete;
            }
        }
        if stopped {
            return true;
        }
    }
}

/// The finished test's summary, its counts taken: `since` its first datagram, and why it
/// was cut short, if it was; `local` is our address its sender reached.
fn finish(shared: &Shared, id: u64, since: Duration, stopped: Option<&str>, local: String) -> NtttcpTestSummary {
    let w = shared.window;
    let counts: Vec<(u64, u64, u64)> = shared.ports.iter().map(PortCounts::take).collect();
    let peers = std::mem::take(&mut *shared.peers.lock().unwrap_or_else(|p| p.into_inner()));
    let counted = since.saturating_sub(w.warmup).min(w.time);
    let every_byte: Vec<(u32, u64)> = (0..).zip(counts.iter().map(|c| c.2)).collect();
    let mut errors = Vec::new();
    if let Some(cause) = stopped {
        errors.push(format!("{cause} {:.1} s into the test", since.as_secs_f64()));
    }
    NtttcpTestSummary {
        id,
        peers,
        connections: 0,
        port_bytes: counts.iter().map(|c| c.0).collect(),
        port_datagrams: Some(counts.iter().map(|c| c.1).collect()),
        received_bytes: counts.iter().map(|c| c.2).sum(),
        window: Some(w),
        seconds: counted.as_secs_f64(),
        errors,
        report: None,
    }
    .with_report(Proto::Udp, local, &every_byte)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared(window: NtttcpWindow) -> Shared {
        Shared {
            origin: Instant::now(),
            start: AtomicU64::new(IDLE),
            window,
            ports: (0..2).map(|_| PortCounts::default()).collect(),
            peers: Mutex::default(),
            stop: AtomicBool::new(false),
        }
    }

    #[test]
    fn only_the_window_after_the_warmup_is_counted() {
        let s = |ms| Duration::from_millis(ms);
        let w = NtttcpWindow { warmup: s(100), time: s(200), cooldown: s(100) };
        let sh = shared(w);
        let t0 = Instant::now();
        for (at, port) in [(0, 0), (50, 1), (100, 0), (250, 1), (299, 1), (300, 0), (399, 1)] {
            sh.count(port, 1000, t0 + s(at));
        }
        let summary = finish(&sh, 1, s(400), None, String::new());
        assert_eq!(summary.port_bytes, vec![1000, 2000], "100, 250 and 299 ms are in the window");
        assert_eq!(summary.port_datagrams, Some(vec![1, 2]));
        assert_eq!((summary.received_bytes, summary.seconds), (7000, 0.2));
        assert!(summary.errors.is_empty());
        // The counts were taken: the next datagram starts a new test from zero.
        sh.start.store(IDLE, Ordering::Release);
        sh.count(0, 10, t0 + s(1000));
        assert_eq!(finish(&sh, 2, s(50), Some("stopped"), String::new()).received_bytes, 10);
    }

    #[test]
    fn a_finished_tests_late_datagrams_are_not_counted() {
        let sh = shared(NtttcpWindow { time: Duration::from_secs(1), ..NtttcpWindow::default() });
        sh.start.store(ENDING, Ordering::Release);
        sh.count(0, 1000, Instant::now());
        assert_eq!(sh.ports[0].take(), (0, 0, 0));
    }
}
