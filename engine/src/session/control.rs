//! The control channel between `send` and `recv` (docs/protocol.md describes it in full).
//!
//! Every connection to the receiver's port starts with a 4-byte magic that says what it is:
//! `UBC1` a control session, `UBD1` a data flow. A control message is JSON carried in one or
//! more frames: a 4-byte big-endian word whose top bit says "more frames of this message
//! follow" and whose other bits give the length of the frame's body, at most [`MAX_FRAME`]
//! bytes. A reader reassembles a message up to a limit of its own choosing, so a peer can never
//! make it allocate more: `recv` accepts [`MAX_FRAME`] from a sender, the sender accepts
//! [`MAX_REPORT`] for the receiver's report. A data flow sends its 16-byte session cookie and
//! its flow index once, then only payload.

use crate::base::error::{Error, Result};
use crate::base::spec::{TestSpec, Tuning};
use crate::metrics::figures::{IntervalFigures, Role, SideReport};
use crate::sys::sockopt::LocalEnd;
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

/// Version of the control protocol. Version 2 added multi-frame messages, streamed intervals
/// and `stop`; version 3 the `--psk-file` handshake (`auth`, `challenge`, `proof`) and the
/// tagged data-flow greeting `UBD2`. A receiver refuses a version outside
/// [`MIN_PROTOCOL_VERSION`]..=[`PROTOCOL_VERSION`], and an authenticated session below 3.
pub const PROTOCOL_VERSION: u32 = 3;
/// The oldest sender a receiver without `--psk-file` serves (its wire is unchanged since).
pub const MIN_PROTOCOL_VERSION: u32 = 2;
/// Default port of `recv`: distinct from iperf2's 5001 and iperf3's 5201.
pub const DEFAULT_PORT: u16 = 5300;
pub const CONTROL_MAGIC: [u8; 4] = *b"UBC1";
pub const DATA_MAGIC: [u8; 4] = *b"UBD1";
/// A data flow of an authenticated session: the greeting carries the flow's tag too.
pub(crate) const DATA_AUTH_MAGIC: [u8; 4] = *b"UBD2";
/// A data flow of an authenticated session whose receiver binds flows to their ends (its
/// accept says `bound_flows`): the tag covers the connection's addresses and ports too.
pub(crate) const DATA_BOUND_MAGIC: [u8; 4] = *b"UBD3";
/// Largest body of one frame, in bytes; also the largest message `recv` accepts from a sender.
pub const MAX_FRAME: usize = 64 * 1024;
/// Largest message a sender accepts from the receiver (its report, an interval of 1,024
/// flows). A report's size is bounded by the flows of a test, never by its length, because
/// the intervals travel one by one as they close; 1,024 flows need well under 2 MiB.
pub const MAX_REPORT: usize = 64 << 20;
/// Top bit of a frame's length word: more frames of this message follow.
pub(crate) const MORE: u32 = 1 << 31;
/// Length of a data flow's greeting: magic, cookie, flow index.
pub const DATA_HELLO_LEN: usize = 4 + 16 + 4;

/// Identifies one test on the receiver; data flows present it to join their session.
pub(crate) type SessionCookie = [u8; 16];

/// Messages of the control channel.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ControlMsg {
    /// Sender → receiver, first, with `--psk-file`: its nonce (session/auth.rs).
    Auth { version: u32, nonce: [u8; 32] },
    /// Receiver → sender: its nonce and its proof of the secret over both nonces.
    Challenge { nonce: [u8; 32], proof: [u8; 32] },
    /// Sender → receiver: its proof of the secret; the hello follows.
    Proof { proof: [u8; 32] },
    /// Sender → receiver: the test it wants. For UDP, `udp_ports` holds the source port of
    /// each flow's socket, so the receiver can give every flow a socket of its own on the
    /// control port (one firewall hole for everything).
    Hello {
        version: u32,
        spec: TestSpec,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        udp_ports: Vec<u16>,
        /// UDP, `send --steer`: the sender will choose its flows' source ports from the
        /// accept's RSS set-up and announce them in `udp_ports` if the accept asks for them
        /// (`udp_ports_follow`). Absent from senders that predate it.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        steer_udp: bool,
        /// `send --steer ntuple`: the receiver is to put each data flow on its receive queue
        /// with an n-tuple flow rule of its NIC, or refuse the test saying why it cannot.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        steer_ntuple: bool,
    },
    /// Receiver → sender: accepted; open the data flows with this cookie. A connection-rate
    /// test (`crr`) connects to `data_port` instead: a listener private to the test, because
    /// every transaction is a new connection.
    Accept {
        cookie: SessionCookie,
        placement: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        data_port: Option<u16>,
        /// The receiver variant (`TestSpec::variant`) now applied, echoed so that a sender
        /// can tell a receiver that applied it from one too old to know the field.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        variant: Option<String>,
        /// The receiver's NIC has queues: how it hashes flows to them and which queue each
        /// engine queue of the test is served from, so the sender can choose source ports
        /// that land every flow on its own queue. Absent on veth and loopback, and from
        /// receivers that predate it (the sender then leaves ports to the kernel).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        steering: Option<crate::runtime::nic_queues::RssSteering>,
        /// A `--trip-times` test: the receiver's boot id, which says it stamps responses and
        /// lets the sender tell whether both ends read one clock (the same kernel). Absent
        /// otherwise, and from receivers that predate it (the sender then refuses to go on).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        boot_id: Option<String>,
        /// The receiver answers the test's latency probe (`TestSpec::latency`): a TCP test's
        /// probe is the data flow after the last, a UDP test's the source port after the
        /// last. Absent from receivers that predate it: the sender then refuses `--latency`.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        latency_probe: bool,
        /// Answering a hello with `steer_udp` whose flows source ports can steer: the
        /// receiver makes its UDP flow sockets only once the `udp_ports` message names the
        /// final source ports. Absent from receivers that predate it (the hello's ports stay).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        udp_ports_follow: bool,
        /// Answering `steer_ntuple`: the receiver installs the rules once the flows arrive.
        /// Absent from receivers that predate it (the sender then refuses to go on).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        ntuple: bool,
        /// Its probe answers carry its clock and its answering thread's CPU time (bytes 8..24
        /// of each answer). Absent from receivers that predate it: their answers are echoes,
        /// and the sender states neither the answering cost nor the probe's one-way delays.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        probe_stamps: bool,
        /// `--latency`: where the receiver's own qdiscs could hold a queue (its interface
        /// toward the sender). Absent from older receivers and when it cannot be read.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        receiver_queues: Option<crate::sys::netpath::ReceiverQueues>,
        /// An authenticated session's data flows greet with `UBD3`, their tag covering the
        /// connection's ends. Absent from receivers that predate it (flows greet with `UBD2`).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        bound_flows: bool,
        /// Answering a hello whose spec has `start_at`: the receiver waits for the sender's
        /// `start` after `ready` and starts its window there. Absent from receivers that
        /// predate it: the sender then refuses to go on.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        start_message: bool,
    },
    /// Sender → receiver, right after an accept with `udp_ports_follow`: the source port of
    /// each UDP flow socket (and the latency probe's), in the hello's order and number.
    UdpPorts { ports: Vec<u16> },
    /// Receiver → sender: refused, with the reason (a limit, a version mismatch...).
    Refuse { reason: String },
    /// Receiver → sender: every flow is connected and armed; the test starts now.
    Ready,
    /// Sender → receiver, after `ready`, only for a test with `start_at`: the data starts now
    /// (the sender's wall clock read as it released the data, for the record).
    Start { at_unix_ns: u64 },
    /// Receiver → sender: the receiver's own measurements at the end: what it received
    /// (forward flows) and what it sent (reverse flows, with `--reverse`/`--bidir`).
    Result {
        report: Option<Box<SideReport>>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reverse: Option<Box<SideReport>>,
    },
    /// Sender → receiver, after `result`, in a forward TCP stream test: its flows'
    /// retransmissions over its window, which the receiver cannot see (session/end_report.rs).
    /// A receiver that predates it has closed the channel; one that knows it waits at most
    /// 2 s for it.
    SenderEnd { retransmits: crate::metrics::retransmits::SenderRetransmits },
    /// Sender → receiver, for tests whose flows have no end of their own (UDP and
    /// connection-rate request/response): the sender's flows are done, stop and report.
    Finished,
    /// Either way, during the test: one interval of the side that measured it (`role`), sent
    /// as the interval closes, so the far end can print it live and nobody keeps them all.
    Interval { role: Role, interval: IntervalFigures },
    /// Either way, during the test: end it now (Ctrl-C, SIGTERM, `recv` shutting down). Both
    /// ends stop their flows, close their window and report what they measured.
    Stop { reason: String },
    /// Either way: the test is abandoned.
    Abort { reason: String },
}

impl ControlMsg {
    /// The message's type, as on the wire: what a log line or an error names (never the
    /// peer's contents).
    pub fn kind(&self) -> &'static str {
        match self {
            ControlMsg::Auth { .. } => "auth",
            ControlMsg::Challenge { .. } => "challenge",
            ControlMsg::Proof { .. } => "proof",
            ControlMsg::Hello { .. } => "hello",
            ControlMsg::Accept { .. } => "accept",
            ControlMsg::UdpPorts { .. } => "udp_ports",
            ControlMsg::Refuse { .. } => "refuse",
            ControlMsg::Ready => "ready",
            ControlMsg::Start { .. } => "start",
            ControlMsg::Result { .. } => "result",
            ControlMsg::SenderEnd { .. } => "sender_end",
            ControlMsg::Finished => "finished",
            ControlMsg::Interval { .. } => "interval",
            ControlMsg::Stop { .. } => "stop",
            ControlMsg::Abort { .. } => "abort",
        }
    }
}

/// Splits a frame's length word: the body's length and whether more frames follow.
pub(crate) fn frame_word(word: [u8; 4]) -> (usize, bool) {
    let word = u32::from_be_bytes(word);
    ((word & !MORE) as usize, word & MORE != 0)
}

/// Decodes a reassembled message body.
pub fn decode(body: &[u8]) -> Result<ControlMsg> {
    serde_json::from_slice(body).map_err(|e| Error::protocol(format!("malformed control message: {e}")))
}

/// Writes one message, in as many frames as its size needs, with one write call.
pub(crate) fn write_msg(mut stream: &TcpStream, msg: &ControlMsg) -> Result<()> {
    let body = serde_json::to_vec(msg).map_err(|e| Error::protocol(format!("encoding control message: {e}")))?;
    stream.write_all(&frame(&body)).map_err(|e| Error::peer(format!("control channel write failed: {e}")))
}

/// `body` split into frames of at most [`MAX_FRAME`] bytes (an empty body is one empty frame).
fn frame(body: &[u8]) -> Vec<u8> {
    let pieces = body.len().div_ceil(MAX_FRAME).max(1);
    let mut out = Vec::with_capacity(body.len() + 4 * pieces);
    let mut chunks = body.chunks(MAX_FRAME).peekable();
    if chunks.peek().is_none() {
        out.extend_from_slice(&0u32.to_be_bytes());
    }
    while let Some(chunk) = chunks.next() {
        let more = if chunks.peek().is_some() { MORE } else { 0 };
        out.extend_from_slice(&(chunk.len() as u32 | more).to_be_bytes());
        out.extend_from_slice(chunk);
    }
    out
}

/// Reads one message of at most [`MAX_FRAME`] bytes (what `recv` accepts from a sender),
/// waiting at most `timeout` for each part.
pub fn read_msg(stream: &mut TcpStream, timeout: Duration) -> Result<ControlMsg> {
    read_msg_up_to(stream, timeout, MAX_FRAME)
}

/// Reads one message from the receiver (a report may span many frames).
pub(crate) fn read_reply(stream: &mut TcpStream, timeout: Duration) -> Result<ControlMsg> {
    read_msg_up_to(stream, timeout, MAX_REPORT)
}

/// Reads one message of at most `limit` bytes, frame by frame; refuses a longer one before
/// allocating for it.
pub(crate) fn read_msg_up_to(stream: &mut TcpStream, timeout: Duration, limit: usize) -> Result<ControlMsg> {
    stream.set_read_timeout(Some(timeout)).map_err(|e| Error::io("setting control timeout", e))?;
    read_frames(stream, timeout, limit)
}

/// The frame reader and message decoder behind [`read_msg_up_to`], over any reader (the
/// fuzz targets feed it bytes); `timeout` only names the wait in a timeout's error.
pub fn read_frames(stream: &mut impl Read, timeout: Duration, limit: usize) -> Result<ControlMsg> {
    let mut body = Vec::new();
    loop {
        let mut word = [0u8; 4];
        read_exact(stream, &mut word, timeout)?;
        let word = u32::from_be_bytes(word);
        let len = (word & !MORE) as usize;
        if len > MAX_FRAME || body.len() + len > limit {
            return Err(Error::protocol(format!(
                "control message of {} bytes or more exceeds the {limit}-byte limit",
                body.len() + len
            )));
        }
        let start = body.len();
        body.resize(start + len, 0);
        read_exact(stream, &mut body[start..], timeout)?;
        if word & MORE == 0 {
            break;
        }
    }
    serde_json::from_slice(&body).map_err(|e| Error::protocol(format!("malformed control message: {e}")))
}

/// The writing half of a control connection shared by the threads of one test (a sampler per
/// direction streams intervals while the session thread may send `stop`). After a failed
/// write the stream may hold half a frame, so every later write is refused.
#[derive(Clone)]
pub(crate) struct CtlWriter {
    inner: Arc<Mutex<Option<TcpStream>>>,
}

impl CtlWriter {
    /// A writer over a duplicate of `ctl`. A peer that stops reading blocks a write for at
    /// most `stall`, then the channel counts as broken.
    pub(crate) fn new(ctl: &TcpStream, stall: Duration) -> Result<Self> {
        let w = ctl.try_clone().map_err(|e| Error::io("duplicating the control socket", e))?;
        w.set_write_timeout(Some(stall)).map_err(|e| Error::io("setting the control write timeout", e))?;
        Ok(Self { inner: Arc::new(Mutex::new(Some(w))) })
    }

    pub(crate) fn send(&self, msg: &ControlMsg) -> Result<()> {
        let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let Some(stream) = guard.as_ref() else {
            return Err(Error::peer("control channel broken by an earlier failed write"));
        };
        let sent = write_msg(stream, msg);
        if sent.is_err() {
            *guard = None;
        }
        sent
    }
}

/// Reads the far end's messages during a test, on a thread of its own: `stop` raises a flag
/// the samplers poll, intervals go to `on_interval` as they arrive, anything else waits in a
/// queue for [`CtlWatch::recv`]. The thread ends at the first read error (the far end closed)
/// or when the watch is dropped.
pub(crate) struct CtlWatch {
    stop: Arc<Mutex<Option<String>>>,
    /// Why the channel ended, once a read failed (the far end closed it, or it broke).
    closed: Arc<Mutex<Option<String>>>,
    done: Arc<AtomicBool>,
    rx: Mutex<mpsc::Receiver<Result<ControlMsg>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// What a watch does with the intervals it receives.
pub(crate) type IntervalHandler = Box<dyn FnMut(Role, IntervalFigures) + Send>;

impl CtlWatch {
    /// Starts watching `ctl` (a duplicate of it); messages are accepted up to `limit` bytes.
    pub(crate) fn start(ctl: &TcpStream, limit: usize, mut on_interval: IntervalHandler) -> Result<Self> {
        let mut stream = ctl.try_clone().map_err(|e| Error::io("duplicating the control socket", e))?;
        let stop = Arc::new(Mutex::new(None));
        let closed = Arc::new(Mutex::new(None));
        let t_closed = Arc::clone(&closed);
        let done = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel();
        let (t_stop, t_done) = (Arc::clone(&stop), Arc::clone(&done));
        let thread = std::thread::Builder::new()
            .name("ub-ctl".into())
            .spawn(move || {
                while !t_done.load(Ordering::Acquire) {
                    if !readable(&stream, 100) {
                        continue;
                    }
                    match read_msg_up_to(&mut stream, Duration::from_secs(30), limit) {
                        Ok(ControlMsg::Interval { role, interval }) => on_interval(role, interval),
                        Ok(ControlMsg::Stop { reason }) => {
                            *t_stop.lock().unwrap_or_else(|p| p.into_inner()) = Some(reason);
                        }
                        Ok(msg) => {
                            let _ = tx.send(Ok(msg));
                        }
                        Err(e) => {
                            *t_closed.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.message.clone());
                            let _ = tx.send(Err(e));
                            break;
                        }
                    }
                }
            })
            .map_err(|e| Error::io("starting the control reader", e))?;
        Ok(Self { stop, closed, done, rx: Mutex::new(rx), thread: Some(thread) })
    }

    /// Whether the far end asked to stop.
    #[cfg(test)]
    fn stop_requested(&self) -> bool {
        self.stop_reason().is_some()
    }

    /// Why the far end asked to stop, once it did.
    pub(crate) fn stop_reason(&self) -> Option<String> {
        self.stop.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Why the channel ended, once the far end closed it (or it broke).
    pub(crate) fn closed(&self) -> Option<String> {
        self.closed.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The next message other than an interval or `stop` if one is in, without waiting;
    /// `Some(Err)` once the channel has ended.
    pub(crate) fn try_next(&self) -> Option<Result<ControlMsg>> {
        match self.rx.lock().unwrap_or_else(|p| p.into_inner()).try_recv() {
            Ok(msg) => Some(msg),
            Err(mpsc::TryRecvError::Empty) => None,
            Err(mpsc::TryRecvError::Disconnected) => Some(Err(Error::peer("peer closed the control connection"))),
        }
    }

    /// The next message other than an interval or `stop`, waiting at most `timeout`.
    pub(crate) fn recv(&self, timeout: Duration) -> Result<ControlMsg> {
        match self.rx.lock().unwrap_or_else(|p| p.into_inner()).recv_timeout(timeout) {
            Ok(msg) => msg,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                Err(Error::peer(format!("peer sent nothing for {:.1} s", timeout.as_secs_f64())))
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(Error::peer("peer closed the control connection")),
        }
    }
}

impl Drop for CtlWatch {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Waits up to `timeout_ms` for `stream` to have data (or EOF).
pub(crate) fn readable(stream: &TcpStream, timeout_ms: i32) -> bool {
    let mut pfd = libc::pollfd { fd: stream.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd for the duration of the call.
    unsafe { libc::poll(&mut pfd, 1, timeout_ms) > 0 }
}

/// `read_exact` with errors that say what happened to the peer.
pub(crate) fn read_exact(stream: &mut impl Read, buf: &mut [u8], timeout: Duration) -> Result<()> {
    stream.read_exact(buf).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => Error::peer("peer closed the control connection"),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
            Error::peer(format!("peer sent nothing for {:.1} s", timeout.as_secs_f64()))
        }
        _ => Error::peer(format!("control connection failed: {e}")),
    })
}

/// The greeting a data flow sends before any payload.
pub fn data_hello(cookie: &SessionCookie, flow: u32) -> [u8; DATA_HELLO_LEN] {
    let mut hello = [0u8; DATA_HELLO_LEN];
    hello[..4].copy_from_slice(&DATA_MAGIC);
    hello[4..20].copy_from_slice(cookie);
    hello[20..].copy_from_slice(&flow.to_be_bytes());
    hello
}

/// Splits the part of a data greeting after the magic into cookie and flow index.
pub fn parse_data_hello(rest: &[u8; DATA_HELLO_LEN - 4]) -> (SessionCookie, u32) {
    let mut cookie = [0u8; 16];
    cookie.copy_from_slice(&rest[..16]);
    (cookie, u32::from_be_bytes([rest[16], rest[17], rest[18], rest[19]]))
}

/// A fresh random session cookie.
pub(crate) fn new_cookie() -> SessionCookie {
    let mut cookie = [0u8; 16];
    // SAFETY: getrandom writes at most cookie.len() bytes into our buffer.
    let n = unsafe { libc::getrandom(cookie.as_mut_ptr().cast(), cookie.len(), 0) };
    if n != cookie.len() as isize {
        // getrandom cannot fail for 16 bytes after boot; fall back to time and pid anyway.
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        cookie[..8].copy_from_slice(&(t.as_nanos() as u64).to_le_bytes());
        cookie[8..12].copy_from_slice(&std::process::id().to_le_bytes());
    }
    cookie
}

/// How long a control write may block on a far end that stops reading before the channel
/// counts as broken (the test's figures are then lost, its flows are not).
pub(crate) const CTL_WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// Makes a control connection notice a far end that has gone silently (host down, path cut)
/// within seconds rather than the kernel's minutes: writes give up after 10 s, keepalive
/// probes an idle connection after 5 s (1 s apart, 5 of them), and TCP_USER_TIMEOUT drops it
/// once sent data has waited 10 s for an acknowledgement.
pub(crate) fn harden(ctl: &TcpStream) -> Result<()> {
    let sock = socket2::SockRef::from(ctl);
    let keepalive = socket2::TcpKeepalive::new()
        .with_time(Duration::from_secs(5))
        .with_interval(Duration::from_secs(1))
        .with_retries(5);
    ctl.set_write_timeout(Some(CTL_WRITE_TIMEOUT))
        .and_then(|()| sock.set_tcp_keepalive(&keepalive))
        .and_then(|()| sock.set_tcp_user_timeout(Some(CTL_WRITE_TIMEOUT)))
        .map_err(|e| Error::io("setting the control connection's timeouts", e))
}

/// Resolves `host` and connects to `port`, with errors that say what to do.
pub fn connect(host: &str, port: u16, timeout: Duration) -> Result<TcpStream> {
    connect_from(host, port, timeout, &LocalEnd::default(), None)
}

/// [`connect`] from `local` (address family, local address, device), with the flow knobs
/// that must be set before the handshake.
pub(crate) fn connect_from(
    host: &str,
    port: u16,
    timeout: Duration,
    local: &LocalEnd,
    tuning: Option<&Tuning>,
) -> Result<TcpStream> {
    use std::net::ToSocketAddrs;
    let addrs: Vec<std::net::SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| Error::usage(format!("cannot resolve target '{host}': {e}")))?
        .filter(|a| match local.family {
            Some(4) => a.is_ipv4() || a.ip().to_canonical().is_ipv4(),
            Some(6) => a.is_ipv6() && a.ip().to_canonical().is_ipv6(),
            _ => true,
        })
        .filter(|a| local.bind.is_none_or(|b| b.is_ipv4() == a.is_ipv4()))
        .collect();
    let addr = *addrs.first().ok_or_else(|| match (local.family, local.bind) {
        (Some(f), _) => Error::usage(format!("target '{host}' has no IPv{f} address (-{f})")),
        (None, Some(b)) => Error::usage(format!("target '{host}' has no address of --bind {b}'s family")),
        _ => Error::usage(format!("target '{host}' has no address")),
    })?;
    let stream =
        crate::sys::sockopt::connect_tcp(addr, local, tuning, timeout).map_err(|e| match e.raw_os_error() {
            Some(libc::EADDRNOTAVAIL) if local.bind.is_some() => Error::usage(format!(
                "cannot bind {}: no local interface has that address",
                local.bind.map_or(String::new(), |b| b.to_string())
            )),
            Some(libc::ENODEV) if local.device.is_some() => {
                Error::usage(format!("--bind-dev {}: no such device", local.device.as_deref().unwrap_or("")))
            }
            Some(libc::EPERM) if local.device.is_some() => Error::usage(format!(
                "--bind-dev {}: SO_BINDTODEVICE needs CAP_NET_RAW",
                local.device.as_deref().unwrap_or("")
            )),
            Some(libc::ECONNREFUSED) => Error::peer(format!(
                "nothing listens on {addr} (connection refused): start `uringbench recv --port {port}` there"
            )),
            Some(libc::EHOSTUNREACH) | Some(libc::ENETUNREACH) => Error::peer(format!("{addr} is unreachable: {e}")),
            _ if matches!(e.kind(), std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock) => Error::peer(
                format!("{addr} did not answer within {:.0} s (host down or filtered)", timeout.as_secs_f64()),
            ),
            _ => Error::peer(format!("cannot connect to {addr}: {e}")),
        })?;
    // Control messages go out at once, and so do data flows: without TCP_NODELAY, 16 flows
    // on the veth pair fell from about 27 to 17 Gbit/s (Nagle holds each write's last
    // partial segment while the receiver waits for SO_RCVLOWAT), so `-N` only confirms it.
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (b, _) = listener.accept().unwrap();
        (a, b)
    }

    #[test]
    fn frames_round_trip() {
        let (a, mut b) = pair();
        write_msg(
            &a,
            &ControlMsg::Hello {
                version: PROTOCOL_VERSION,
                spec: TestSpec::default(),
                udp_ports: vec![],
                steer_udp: false,
                steer_ntuple: false,
            },
        )
        .unwrap();
        match read_msg(&mut b, Duration::from_secs(2)).unwrap() {
            ControlMsg::Hello { version, spec, .. } => {
                assert_eq!(version, PROTOCOL_VERSION);
                assert_eq!(spec, TestSpec::default(), "the spec must survive the wire unchanged");
            }
            other => panic!("expected Hello, got {other:?}"),
        }
    }

    #[test]
    fn a_message_larger_than_a_frame_travels_in_pieces() {
        let (a, mut b) = pair();
        let reason = "x".repeat(3 * MAX_FRAME + 17);
        let writer = std::thread::spawn(move || write_msg(&a, &ControlMsg::Abort { reason }).map(|_| a));
        match read_reply(&mut b, Duration::from_secs(5)).unwrap() {
            ControlMsg::Abort { reason } => assert_eq!(reason.len(), 3 * MAX_FRAME + 17, "reassembled whole"),
            other => panic!("expected Abort, got {other:?}"),
        }
        let _a = writer.join().unwrap().unwrap();
        assert_eq!(frame(b"").len(), 4, "an empty body is one empty frame");
        assert_eq!(frame(&[0; MAX_FRAME]).len(), 4 + MAX_FRAME, "an exact fit needs no continuation");
    }

    #[test]
    fn a_multi_frame_message_over_the_limit_is_refused() {
        let (a, mut b) = pair();
        let reason = "y".repeat(MAX_FRAME + 1);
        let writer = std::thread::spawn(move || {
            let _ = write_msg(&a, &ControlMsg::Abort { reason });
            a
        });
        let err = read_msg(&mut b, Duration::from_secs(5)).unwrap_err();
        assert!(err.message.contains("exceeds the 65536-byte limit"), "{err}");
        drop(b);
        let _ = writer.join();
    }

    #[test]
    fn the_watch_raises_stop_and_queues_the_rest() {
        let (a, b) = pair();
        let got = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&got);
        let watch =
            CtlWatch::start(&b, MAX_REPORT, Box::new(move |role, iv| sink.lock().unwrap().push((role, iv.end))))
                .unwrap();
        let iv = IntervalFigures::of_bytes(0.0, 5);
        write_msg(&a, &ControlMsg::Interval { role: Role::Receiver, interval: iv }).unwrap();
        write_msg(&a, &ControlMsg::Stop { reason: "SIGINT".into() }).unwrap();
        write_msg(&a, &ControlMsg::Finished).unwrap();
        assert!(matches!(watch.recv(Duration::from_secs(5)).unwrap(), ControlMsg::Finished));
        assert!(watch.stop_requested());
        assert_eq!(watch.stop_reason().as_deref(), Some("SIGINT"));
        assert_eq!(*got.lock().unwrap(), vec![(Role::Receiver, 1.0)], "the interval went to the handler");
        drop(a);
        assert!(watch.recv(Duration::from_secs(5)).is_err(), "EOF ends the watch with an error");
    }

    #[test]
    fn oversized_frame_is_refused_before_allocation() {
        let (mut a, mut b) = pair();
        a.write_all(&(u32::MAX).to_be_bytes()).unwrap();
        let err = read_msg(&mut b, Duration::from_secs(2)).unwrap_err();
        assert!(err.message.contains("exceeds"), "unexpected error: {err}");
    }

    #[test]
    fn garbage_json_is_a_protocol_error() {
        let (mut a, mut b) = pair();
        a.write_all(&5u32.to_be_bytes()).unwrap();
        a.write_all(b"{oops").unwrap();
        let err = read_msg(&mut b, Duration::from_secs(2)).unwrap_err();
        assert_eq!(err.kind, crate::base::error::ErrorKind::Protocol, "{err}");
    }

    #[test]
    fn silent_peer_times_out() {
        let (_a, mut b) = pair();
        let err = read_msg(&mut b, Duration::from_millis(100)).unwrap_err();
        assert!(err.message.contains("sent nothing"), "{err}");
    }

    #[test]
    fn data_hello_round_trip() {
        let cookie = new_cookie();
        let hello = data_hello(&cookie, 7);
        assert_eq!(&hello[..4], b"UBD1");
        let rest: [u8; DATA_HELLO_LEN - 4] = hello[4..].try_into().unwrap();
        assert_eq!(parse_data_hello(&rest), (cookie, 7));
        assert_ne!(new_cookie(), cookie, "cookies must differ between sessions");
    }
}
