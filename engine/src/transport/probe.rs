//! The latency probe of a stream test (`send --latency`): small request/response
//! transactions on a connection of their own beside the load flows, one every
//! [`PROBE_GAP`], answered by the receiver. The load's loops never see it, so its bytes are
//! never in the load's throughput.
//!
//! The probe is deliberately not an io_uring loop: it sends a hundred 64-byte messages a
//! second, where a blocking socket on a thread of its own costs next to nothing and keeps
//! the load's rings and CPUs to themselves (the thread is kept off the load's CPUs when
//! there are others). Each transaction is a request of [`PROBE_LEN`] bytes carrying its
//! sequence number, answered by the same bytes back.

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Bytes of one probe request, and of its answer.
pub const PROBE_LEN: usize = 64;
/// The time from one probe's start to the next (when the answer came sooner).
pub const PROBE_GAP: Duration = Duration::from_millis(10);
/// How long the probe runs alone before the load starts: its round trips then are the idle
/// latency (a hundred probes at [`PROBE_GAP`]).
pub const IDLE_PHASE: Duration = Duration::from_secs(1);
/// A UDP probe unanswered this long counts as lost.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// A responder whose prober stays silent this long has lost it (the sender went away).
const SILENT_PEER: Duration = Duration::from_secs(30);
/// How often a blocked probe thread looks at its stop flag.
const POLL: Duration = Duration::from_millis(50);

/// The probe's connection: the same protocol and path as the load's flows.
pub enum ProbeSocket {
    Tcp(TcpStream),
    Udp(UdpSocket),
}

/// One answered transaction: when its request left and how long the answer took.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProbeSample {
    pub sent: Instant,
    pub rtt: Duration,
}

/// What the probe did so far.
#[derive(Debug, Clone, Default)]
pub struct ProbeLog {
    pub samples: Vec<ProbeSample>,
    /// Requests that got no answer within [`PROBE_TIMEOUT`] (UDP only: TCP retransmits).
    pub lost: u64,
    /// Payload bytes the probe sent and received (not in the load's figures).
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// Why the probe ended before it was stopped, if it did.
    pub error: Option<String>,
}

/// A running probe: its thread and what it measured.
pub struct Prober {
    stop: Arc<AtomicBool>,
    log: Arc<Mutex<ProbeLog>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Prober {
    /// Starts probing over `socket` at once, on a thread kept off `avoid_cpus` (the load's
    /// pinned CPUs) when other CPUs are allowed; it probes until stopped or `until`.
    pub fn start(socket: ProbeSocket, avoid_cpus: &[usize], until: Instant) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let log = Arc::new(Mutex::new(ProbeLog::default()));
        let (t_stop, t_log) = (Arc::clone(&stop), Arc::clone(&log));
        let avoid = avoid_cpus.to_vec();
        let thread = std::thread::Builder::new().name("ub-probe".into()).spawn(move || {
            keep_off(&avoid);
            let ended = match socket {
                ProbeSocket::Tcp(s) => probe_tcp(s, &t_stop, &t_log, until),
                ProbeSocket::Udp(s) => probe_udp(s, &t_stop, &t_log, until),
            };
            if let Err(e) = ended {
                t_log.lock().unwrap_or_else(|p| p.into_inner()).error = Some(format!("latency probe: {e}"));
            }
        })?;
        Ok(Self { stop, log, thread: Some(thread) })
    }

    /// What the probe measured so far, shared (the live view of each interval reads it).
    pub fn log(&self) -> Arc<Mutex<ProbeLog>> {
        Arc::clone(&self.log)
    }

    /// Stops the probe and returns all it measured.
    pub fn finish(mut self) -> ProbeLog {
        self.halt();
        std::mem::take(&mut *self.log.lock().unwrap_or_else(|p| p.into_inner()))
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Prober {
    fn drop(&mut self) {
        self.halt();
    }
}

/// A request: the sequence number, then filler.
fn request(seq: u64) -> [u8; PROBE_LEN] {
    let mut buf = [0x5a; PROBE_LEN];
    buf[..8].copy_from_slice(&seq.to_be_bytes());
    buf
}

/// Waits until `at` or the stop flag, whichever first; false when stopped or past `until`.
fn wait_turn(at: Instant, stop: &AtomicBool, until: Instant) -> bool {
    loop {
        if stop.load(Ordering::Acquire) || Instant::now() >= until {
            return false;
        }
        let left = at.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return true;
        }
        std::thread::sleep(left.min(POLL));
    }
}

fn record(log: &Mutex<ProbeLog>, sent: Instant, rtt: Duration) {
    let mut log = log.lock().unwrap_or_else(|p| p.into_inner());
    log.samples.push(ProbeSample { sent, rtt });
    log.bytes_sent += PROBE_LEN as u64;
    log.bytes_received += PROBE_LEN as u64;
}

/// Runs `transaction(seq)` one every [`PROBE_GAP`] (at once after a slower one) until
/// stopped, past `until`, or `transaction` says the probe is over (false).
fn paced(
    stop: &AtomicBool,
    until: Instant,
    mut transaction: impl FnMut(u64) -> std::io::Result<bool>,
) -> std::io::Result<()> {
    let mut next = Instant::now();
    for seq in 0u64.. {
        if !wait_turn(next, stop, until) {
            break;
        }
        let started = Instant::now();
        if !transaction(seq)? {
            break;
        }
        next = started + PROBE_GAP;
    }
    Ok(())
}

fn probe_tcp(mut s: TcpStream, stop: &AtomicBool, log: &Mutex<ProbeLog>, until: Instant) -> std::io::Result<()> {
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(POLL))?;
    paced(stop, until, |seq| {
        let sent = Instant::now();
        s.write_all(&request(seq))?;
        let mut answer = [0u8; PROBE_LEN];
        let mut got = 0;
        // The answer may wait behind a deep queue: keep reading, looking at the stop flag.
        while got < PROBE_LEN {
            match s.read(&mut answer[got..]) {
                Ok(0) => return Err(std::io::Error::new(ErrorKind::UnexpectedEof, "the receiver closed the probe")),
                Ok(n) => got += n,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    if stop.load(Ordering::Acquire) {
                        return Ok(false);
                    }
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if answer[..8] != seq.to_be_bytes() {
            return Err(std::io::Error::new(ErrorKind::InvalidData, "the receiver answered another probe"));
        }
        record(log, sent, sent.elapsed());
        Ok(true)
    })?;
    let _ = s.shutdown(std::net::Shutdown::Write);
    Ok(())
}

fn probe_udp(s: UdpSocket, stop: &AtomicBool, log: &Mutex<ProbeLog>, until: Instant) -> std::io::Result<()> {
    s.set_read_timeout(Some(POLL))?;
    paced(stop, until, |seq| {
        let sent = Instant::now();
        match s.send(&request(seq)) {
            Ok(_) => {}
            // A refused or full path loses this probe, not the test.
            Err(e) if matches!(e.raw_os_error(), Some(libc::ECONNREFUSED) | Some(libc::ENOBUFS)) => {
                log.lock().unwrap_or_else(|p| p.into_inner()).lost += 1;
                return Ok(true);
            }
            Err(e) => return Err(e),
        }
        let mut answer = [0u8; PROBE_LEN];
        loop {
            if stop.load(Ordering::Acquire) {
                return Ok(false);
            }
            if sent.elapsed() >= PROBE_TIMEOUT {
                let mut log = log.lock().unwrap_or_else(|p| p.into_inner());
                log.lost += 1;
                log.bytes_sent += PROBE_LEN as u64;
                return Ok(true);
            }
            match s.recv(&mut answer) {
                // An answer to an older probe came after it was counted lost: skip it.
                Ok(n) if n == PROBE_LEN && answer[..8] == seq.to_be_bytes() => {
                    record(log, sent, sent.elapsed());
                    return Ok(true);
                }
                Ok(_) => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted) => {}
                Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => {}
                Err(e) => return Err(e),
            }
        }
    })
}

/// Moves the calling thread off `avoid` when the thread may run elsewhere; left as it is
/// when every allowed CPU is one of them (a small host: the probe then shares).
fn keep_off(avoid: &[usize]) {
    if avoid.is_empty() {
        return;
    }
    // SAFETY: a zeroed cpu_set_t is a valid empty set; the calls read and write only `set`.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return;
        }
        let mut others = set;
        for &cpu in avoid.iter().filter(|&&c| c < libc::CPU_SETSIZE as usize) {
            libc::CPU_CLR(cpu, &mut others);
        }
        if libc::CPU_COUNT(&others) > 0 {
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &others);
        }
    }
}

/// Answers a TCP probe on a thread of its own until the prober closes it (or stays silent
/// for [`SILENT_PEER`]), kept off `avoid_cpus` as the prober is.
pub fn answer_tcp(mut s: TcpStream, avoid_cpus: &[usize]) -> std::io::Result<()> {
    let avoid = avoid_cpus.to_vec();
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(SILENT_PEER))?;
    std::thread::Builder::new().name("ub-probe-answer".into()).spawn(move || {
        keep_off(&avoid);
        let mut buf = [0u8; PROBE_LEN];
        while s.read_exact(&mut buf).is_ok() {
            if s.write_all(&buf).is_err() {
                break;
            }
        }
    })?;
    Ok(())
}

/// Answers a UDP probe on a thread of its own until the returned guard is dropped (the end
/// of the test) or the prober stays silent for [`SILENT_PEER`].
pub fn answer_udp(s: UdpSocket, avoid_cpus: &[usize]) -> std::io::Result<Answering> {
    let avoid = avoid_cpus.to_vec();
    s.set_read_timeout(Some(POLL))?;
    let stop = Arc::new(AtomicBool::new(false));
    let t_stop = Arc::clone(&stop);
    std::thread::Builder::new().name("ub-probe-answer".into()).spawn(move || {
        keep_off(&avoid);
        let mut buf = [0u8; PROBE_LEN];
        let mut heard = Instant::now();
        while !t_stop.load(Ordering::Acquire) && heard.elapsed() < SILENT_PEER {
            match s.recv(&mut buf) {
                Ok(n) if n == PROBE_LEN => {
                    heard = Instant::now();
                    let _ = s.send(&buf);
                }
                _ => {}
            }
        }
    })?;
    Ok(Answering(stop))
}

/// Stops a UDP probe's responder when dropped.
pub struct Answering(Arc<AtomicBool>);

impl Drop for Answering {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_probe_is_answered_and_timed() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        answer_tcp(server, &[]).unwrap();
        let probe = Prober::start(ProbeSocket::Tcp(client), &[], Instant::now() + Duration::from_secs(5)).unwrap();
        std::thread::sleep(Duration::from_millis(120));
        let log = probe.finish();
        assert!((5..=13).contains(&log.samples.len()), "about one probe per 10 ms: {}", log.samples.len());
        assert!(log.samples.iter().all(|s| s.rtt < Duration::from_millis(100)), "{:?}", log.samples);
        assert_eq!(log.bytes_sent, log.samples.len() as u64 * PROBE_LEN as u64);
        assert!(log.error.is_none(), "{:?}", log.error);
    }

    #[test]
    fn udp_probe_without_a_responder_counts_losses() {
        let server = UdpSocket::bind("127.0.0.1:0").unwrap();
        let client = UdpSocket::bind("127.0.0.1:0").unwrap();
        client.connect(server.local_addr().unwrap()).unwrap();
        server.connect(client.local_addr().unwrap()).unwrap();
        let answering = answer_udp(server, &[]).unwrap();
        let probe = Prober::start(ProbeSocket::Udp(client), &[], Instant::now() + Duration::from_secs(5)).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        drop(answering);
        std::thread::sleep(Duration::from_millis(1300));
        let log = probe.finish();
        assert!(log.samples.len() >= 3, "answered while the responder ran: {}", log.samples.len());
        assert!(log.lost >= 1, "unanswered once it stopped: {log:?}");
    }
}
