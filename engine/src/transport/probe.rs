//! The latency probe of a stream test (`send --latency`): small request/response
//! transactions on a connection of their own beside the load flows, one every
//! [`PROBE_GAP`], answered by the receiver. The load's loops never see it, so its bytes are
//! never in the load's throughput.
//!
//! The probe is deliberately not an io_uring loop: it sends a hundred 64-byte messages a
//! second, where a blocking socket on a thread of its own costs next to nothing and keeps
//! the load's rings and CPUs to themselves (the thread is kept off the load's CPUs when
//! there are others). Each transaction is a request of [`PROBE_LEN`] bytes carrying its
//! sequence number, answered by as many bytes: the sequence number echoed, then the
//! answering host's CLOCK_REALTIME when the request had arrived (for one-way delays) and the
//! answering thread's CPU time so far (so the sender can state what answering cost), each
//! 8 bytes big-endian; the rest is filler.
//!
//! One wake-up a probe: the prober sleeps until a probe is due, reads the previous probe's
//! answer (there by then, unless its round trip is longer than [`PROBE_GAP`]; then it waits
//! for it) and sends the next. The answer's arrival time is the kernel's receive stamp
//! (SO_TIMESTAMPNS), so reading it later changes nothing, and the round trip leaves out the
//! prober's own scheduling delay (the answering thread's is in it).
//!
//! Both ends time themselves: each sample carries the probe thread's own CPU time
//! (CLOCK_THREAD_CPUTIME_ID, user + system) after it, so the cost of probing inside any span
//! is the difference of two samples' readings.

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpStream, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::sys::affinity::KeptOff;
use crate::transport::trip::realtime_ns;

/// Bytes of one probe request, and of its answer.
pub const PROBE_LEN: usize = 64;
/// Where an answer carries the answering host's CLOCK_REALTIME at the request's arrival.
const ANSWER_STAMP: std::ops::Range<usize> = 8..16;
/// Where an answer carries the answering thread's CPU time so far, in nanoseconds.
const ANSWER_CPU: std::ops::Range<usize> = 16..24;
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

/// One answered transaction: when its request left and how long the answer took, by both
/// clocks, and what each end's probe thread had spent so far.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProbeSample {
    pub sent: Instant,
    pub rtt: Duration,
    /// This host's CLOCK_REALTIME when the request left and when the answer was in, ns.
    pub sent_real_ns: u64,
    pub arrived_real_ns: u64,
    /// The probe thread's CPU time after this transaction, ns.
    pub cpu_ns: u64,
    /// What the answer carried: the answering host's CLOCK_REALTIME at the request's arrival
    /// and its answering thread's CPU time, ns (meaningful only from a receiver that says it
    /// stamps its answers).
    pub peer_stamp_ns: u64,
    pub peer_cpu_ns: u64,
}

/// CPU time (user + system) of the calling thread, in nanoseconds.
pub(crate) fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec into `ts`.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}

fn field(answer: &[u8; PROBE_LEN], at: std::ops::Range<usize>) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&answer[at]);
    u64::from_be_bytes(b)
}

/// Stamps a request that arrived (`buf`) into its answer, in place: the arrival time on this
/// host's CLOCK_REALTIME and the answering thread's CPU time so far.
fn stamp_answer(buf: &mut [u8; PROBE_LEN]) {
    buf[ANSWER_STAMP].copy_from_slice(&realtime_ns().to_be_bytes());
    buf[ANSWER_CPU].copy_from_slice(&thread_cpu_ns().to_be_bytes());
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
            let _off = KeptOff::cpus(&avoid);
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

/// When a request left, by both clocks.
#[derive(Clone, Copy)]
struct Departure {
    at: Instant,
    real_ns: u64,
}

impl Departure {
    fn now() -> Self {
        Self { at: Instant::now(), real_ns: realtime_ns() }
    }
}

/// Records an answer whose last byte the kernel received at `arrived_real_ns`.
fn record(log: &Mutex<ProbeLog>, sent: Departure, answer: &[u8; PROBE_LEN], arrived_real_ns: u64) {
    let sample = ProbeSample {
        sent: sent.at,
        rtt: Duration::from_nanos(arrived_real_ns.saturating_sub(sent.real_ns)),
        sent_real_ns: sent.real_ns,
        arrived_real_ns,
        cpu_ns: thread_cpu_ns(),
        peer_stamp_ns: field(answer, ANSWER_STAMP),
        peer_cpu_ns: field(answer, ANSWER_CPU),
    };
    let mut log = log.lock().unwrap_or_else(|p| p.into_inner());
    log.samples.push(sample);
    log.bytes_received += PROBE_LEN as u64;
}

fn count_sent(log: &Mutex<ProbeLog>) {
    log.lock().unwrap_or_else(|p| p.into_inner()).bytes_sent += PROBE_LEN as u64;
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

/// Has the kernel stamp each datagram or segment this socket receives with its arrival time
/// (CLOCK_REALTIME), read back by [`recv_stamped`]: the prober then need not wake when an
/// answer comes, only when the next probe is due, and still knows when the answer came.
fn stamp_arrivals(fd: RawFd) -> std::io::Result<()> {
    let on: libc::c_int = 1;
    // SAFETY: setsockopt reads one c_int from `on`.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// One receive into `buf`: the bytes read and the kernel's arrival stamp of the last of
/// them (CLOCK_REALTIME ns; None when the kernel gave none).
fn recv_stamped(fd: RawFd, buf: &mut [u8]) -> std::io::Result<(usize, Option<u64>)> {
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    // Room for one SCM_TIMESTAMPNS (a timespec), aligned for cmsghdr.
    let mut control = [0u64; 8];
    // SAFETY: msghdr is plain data; all-zero is its empty value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    // SAFETY: `msg` points at `iov` (into `buf`) and `control`, both alive for the call.
    let n = unsafe { libc::recvmsg(fd, &mut msg, 0) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut stamp = None;
    // SAFETY: the CMSG macros walk the control bytes the kernel wrote into `control`, within
    // msg_controllen; a SCM_TIMESTAMPNS message holds one timespec.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                let ts = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::timespec>());
                stamp = Some((ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64));
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok((n as usize, stamp))
}

fn timed_out(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted)
}

/// Each probe is sent when its turn comes, and its answer is read when the next one's turn
/// comes (or at once, when it has not come by then): one wake-up a probe. The answer's time
/// is the kernel's arrival stamp, so reading it late changes nothing.
fn probe_tcp(s: TcpStream, stop: &AtomicBool, log: &Mutex<ProbeLog>, until: Instant) -> std::io::Result<()> {
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(POLL))?;
    stamp_arrivals(s.as_raw_fd())?;
    let mut due: Option<(u64, Departure)> = None;
    paced(stop, until, |seq| {
        if let Some((prev, sent)) = due.take() {
            let Some((answer, arrived)) = read_tcp_answer(&s, stop)? else { return Ok(false) };
            if answer[..8] != prev.to_be_bytes() {
                return Err(std::io::Error::new(ErrorKind::InvalidData, "the receiver answered another probe"));
            }
            // Unstamped (only while the kernel turns its stamps on): its time is unknown.
            if let Some(arrived) = arrived {
                record(log, sent, &answer, arrived);
            }
        }
        let sent = Departure::now();
        (&s).write_all(&request(seq))?;
        count_sent(log);
        due = Some((seq, sent));
        Ok(true)
    })?;
    let _ = s.shutdown(std::net::Shutdown::Write);
    Ok(())
}

/// Reads one whole answer and the arrival stamp of its last byte; None once stopped.
fn read_tcp_answer(s: &TcpStream, stop: &AtomicBool) -> std::io::Result<Option<([u8; PROBE_LEN], Option<u64>)>> {
    let mut answer = [0u8; PROBE_LEN];
    let (mut got, mut arrived) = (0, None);
    // The answer may wait behind a deep queue: keep reading, looking at the stop flag.
    while got < PROBE_LEN {
        match recv_stamped(s.as_raw_fd(), &mut answer[got..]) {
            Ok((0, _)) => return Err(std::io::Error::new(ErrorKind::UnexpectedEof, "the receiver closed the probe")),
            Ok((n, stamp)) => (got, arrived) = (got + n, stamp),
            Err(e) if timed_out(&e) => {
                if stop.load(Ordering::Acquire) {
                    return Ok(None);
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(Some((answer, arrived)))
}

fn probe_udp(s: UdpSocket, stop: &AtomicBool, log: &Mutex<ProbeLog>, until: Instant) -> std::io::Result<()> {
    s.set_read_timeout(Some(POLL))?;
    stamp_arrivals(s.as_raw_fd())?;
    let mut due: Option<(u64, Departure)> = None;
    paced(stop, until, |seq| {
        if let Some((prev, sent)) = due.take() {
            match read_udp_answer(&s, prev, sent, stop)? {
                UdpAnswer::Came(answer, Some(arrived)) => record(log, sent, &answer, arrived),
                UdpAnswer::Came(_, None) => {}
                UdpAnswer::Lost => log.lock().unwrap_or_else(|p| p.into_inner()).lost += 1,
                UdpAnswer::Stopped => return Ok(false),
            }
        }
        let sent = Departure::now();
        match s.send(&request(seq)) {
            Ok(_) => {
                count_sent(log);
                due = Some((seq, sent));
            }
            // A refused or full path loses this probe, not the test.
            Err(e) if matches!(e.raw_os_error(), Some(libc::ECONNREFUSED) | Some(libc::ENOBUFS)) => {
                log.lock().unwrap_or_else(|p| p.into_inner()).lost += 1;
            }
            Err(e) => return Err(e),
        }
        Ok(true)
    })
}

enum UdpAnswer {
    Came([u8; PROBE_LEN], Option<u64>),
    /// Unanswered within [`PROBE_TIMEOUT`] of its request.
    Lost,
    Stopped,
}

/// Waits for the answer to probe `seq` (sent at `sent`), skipping late answers to older ones.
fn read_udp_answer(s: &UdpSocket, seq: u64, sent: Departure, stop: &AtomicBool) -> std::io::Result<UdpAnswer> {
    let mut answer = [0u8; PROBE_LEN];
    loop {
        match recv_stamped(s.as_raw_fd(), &mut answer) {
            Ok((n, arrived)) if n == PROBE_LEN && answer[..8] == seq.to_be_bytes() => {
                return Ok(UdpAnswer::Came(answer, arrived));
            }
            // A late answer to an older probe, or a stray datagram.
            Ok(_) => {}
            Err(e) if timed_out(&e) || e.raw_os_error() == Some(libc::ECONNREFUSED) => {}
            Err(e) => return Err(e),
        }
        if stop.load(Ordering::Acquire) {
            return Ok(UdpAnswer::Stopped);
        }
        if sent.at.elapsed() >= PROBE_TIMEOUT {
            return Ok(UdpAnswer::Lost);
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
        let _off = KeptOff::cpus(&avoid);
        let mut buf = [0u8; PROBE_LEN];
        while s.read_exact(&mut buf).is_ok() {
            stamp_answer(&mut buf);
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
        let _off = KeptOff::cpus(&avoid);
        let mut buf = [0u8; PROBE_LEN];
        let mut heard = Instant::now();
        while !t_stop.load(Ordering::Acquire) && heard.elapsed() < SILENT_PEER {
            match s.recv(&mut buf) {
                Ok(n) if n == PROBE_LEN => {
                    heard = Instant::now();
                    stamp_answer(&mut buf);
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
        assert_eq!(log.bytes_received, log.samples.len() as u64 * PROBE_LEN as u64);
        assert!(log.bytes_sent >= log.bytes_received, "{log:?}");
        assert!(log.error.is_none(), "{:?}", log.error);
        // One host, one clock: each answer's stamp falls between its request and its answer.
        for s in &log.samples {
            assert!(s.sent_real_ns <= s.peer_stamp_ns && s.peer_stamp_ns <= s.arrived_real_ns, "{s:?}");
        }
        // Both threads' CPU readings only grow, and are real readings (not the filler).
        let pairs = log.samples.windows(2);
        assert!(pairs.clone().all(|w| w[0].cpu_ns <= w[1].cpu_ns && w[0].peer_cpu_ns <= w[1].peer_cpu_ns));
        let last = log.samples.last().unwrap();
        assert!(last.cpu_ns > 0 && last.peer_cpu_ns > 0 && last.peer_cpu_ns < 1_000_000_000, "{last:?}");
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
