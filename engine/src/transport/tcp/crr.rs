//! Connect/request/response/close over TCP (what netperf TCP_CRR and neper tcp_crr measure):
//! every transaction is a new connection, so the figure is what the two kernels' connection
//! set-up and tear-down cost, plus one round trip.
//!
//! The client connects, sends `req_len` bytes, reads `resp_len` bytes (the round trip ends
//! here), then waits for the server's FIN before closing. The server closes first, right
//! after its answer: TIME_WAIT then sits on the server's side, keyed by one listening port,
//! instead of eating the client's ephemeral ports. Each flow runs one connection at a time;
//! all operations go through io_uring (connect, send, receive, multishot accept).
//!
//! A connection that fails or outlives the timeout is counted by cause ([`RrFailures`]) and
//! the flow opens the next one. The operations of an abandoned connection are cancelled and
//! their late completions recognised by a generation number in `user_data`.

use crate::base::error::{Error, Result};
use crate::metrics::measure::QueueCounters;
use crate::sys::mptcp::StreamProtocol;
use crate::sys::sockopt;
use crate::transport::rr::{latency_histogram, RrClientResult, RrConfig, RrFailures};
use crate::transport::{errno_text, FlowOutcome};
use crate::uring::ring::{build_ring, cancel_all, push, wait_for_completions, AlignedBuf, RingPaths, WakeBatch};
use crate::uring::user_data::{UserData, TCP_CRR};
use io_uring::{cqueue, opcode, types, IoUring};
use socket2::SockRef;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Receives land in this much scratch memory at most per operation.
const SCRATCH: u32 = 64 * 1024;

/// One client flow: a slot that runs connections one after another, owned by `queue`.
pub(crate) struct CrrFlow {
    pub queue: u32,
}

/// One server listening socket (all of a test's share one port through SO_REUSEPORT, so the
/// kernel spreads new connections over the queues).
pub struct CrrListener {
    pub listener: TcpListener,
    pub queue: u32,
}

const CONNECT: u64 = 0;
const SEND: u64 = 1;
const RECV: u64 = 2;
const ACCEPT: u64 = 3;
const CLOSE: u64 = 4;
/// A request this long fits one segment on any path (the minimum MSS).
const NAGLE_FREE_LEN: u32 = 536;
/// `user_data` of the cancel requests for timed-out connections.
const TIMEOUT_CANCEL: u64 = u64::MAX - 1;

fn user_data(idx: usize, generation: u16, op: u64) -> u64 {
    TCP_CRR.pack(UserData { index: idx, generation: u32::from(generation), op, ..UserData::default() })
}

fn split(ud: u64) -> (usize, u16, u64) {
    let ud = TCP_CRR.unpack(ud);
    // The layout's generation field is 16 bits wide: the cast loses nothing.
    (ud.index, ud.generation as u16, ud.op)
}

/// Buffers and the ring of one thread. Field order is drop order: the ring goes first.
struct CrrRing {
    ring: IoUring,
    send_buf: AlignedBuf,
    scratch: AlignedBuf,
    /// Operations submitted and not yet ended.
    inflight: usize,
}

impl CrrRing {
    fn new(slots: usize, send_len: u32, ring: RingPaths) -> Result<Self> {
        let entries = (slots as u32 * 2).next_power_of_two().clamp(64, 4096);
        let send_buf = AlignedBuf::new(send_len as usize)?;
        // SAFETY: a fresh mapping of at least send_len bytes.
        unsafe { std::ptr::write_bytes(send_buf.as_ptr(), b'c', send_buf.len()) };
        Ok(Self {
            ring: build_ring(entries, ring)?,
            send_buf,
            scratch: AlignedBuf::new(SCRATCH as usize)?,
            inflight: 0,
        })
    }

    fn push(&mut self, entry: io_uring::squeue::Entry, ud: u64) -> Result<()> {
        self.inflight += 1;
        // SAFETY: every entry this loop builds points at self.send_buf or self.scratch
        // (dropped after self.ring) or at a connection's socket, closed only after its
        // operations are reaped.
        unsafe { push(&mut self.ring, &entry.user_data(ud)) }
    }

    fn send(&mut self, fd: i32, len: u32, ud: u64) -> Result<()> {
        let entry = opcode::Send::new(types::Fd(fd), self.send_buf.as_ptr(), len).build();
        self.push(entry, ud)
    }

    fn recv(&mut self, fd: i32, len: u32, ud: u64) -> Result<()> {
        let entry = opcode::Recv::new(types::Fd(fd), self.scratch.as_ptr(), len.clamp(1, SCRATCH)).build();
        self.push(entry, ud)
    }

    /// Reaps completions as (user_data, result, flags), counting the operations that ended.
    fn reap(&mut self, into: &mut Vec<(u64, i32, u32)>) {
        into.clear();
        for c in self.ring.completion() {
            if c.user_data() == TIMEOUT_CANCEL {
                continue;
            }
            if !cqueue::more(c.flags()) {
                self.inflight -= 1;
            }
            into.push((c.user_data(), c.result(), c.flags()));
        }
    }
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Phase {
    Connecting,
    Sending,
    Receiving,
    /// Answer complete; waiting for the server's FIN.
    Draining,
    Done,
}

struct ClientConn {
    queue: u32,
    fd: Option<OwnedFd>,
    phase: Phase,
    generation: u16,
    started: Instant,
    req_done: u32,
    resp_done: u32,
    transactions: u64,
    error: Option<String>,
}

/// The client's view of why a connection failed.
fn classify(failures: &mut RrFailures, res: i32) {
    match -res {
        libc::ECONNREFUSED => failures.refused += 1,
        libc::EADDRNOTAVAIL => failures.port_exhaustion += 1,
        libc::ETIMEDOUT => failures.timeouts += 1,
        libc::ECONNRESET | libc::EPIPE | 0 => failures.reset += 1,
        _ => failures.other += 1,
    }
}

struct Client<'a> {
    cr: CrrRing,
    conns: Vec<ClientConn>,
    addr: Box<socket2::SockAddr>,
    target: SocketAddr,
    cfg: &'a RrConfig,
    failures: RrFailures,
    active: usize,
    /// Connections answered so far, and the MPTCP state of a sample of them (`-m`).
    answered: u64,
    mptcp: Vec<crate::sys::mptcp::MptcpConnection>,
}

/// crr `-m`: every this many answered connections of a thread (its first included), one is
/// read back (MPTCP_INFO and its subflows, three system calls) before it closes...
pub(crate) const MPTCP_SAMPLE_EVERY: u64 = 64;
/// ...up to this many a thread.
pub(crate) const MPTCP_SAMPLES_KEPT: usize = 32;

impl Client<'_> {
    /// Opens the next connection of flow `idx`, or ends the flow at the deadline.
    fn start(&mut self, idx: usize, now: Instant) -> Result<()> {
        let c = &mut self.conns[idx];
        if let Some(done) = c.fd.take() {
            // Closed through the ring: the close rides on the next connect's submission
            // instead of costing a system call of its own. Its completion is ignored.
            let close = opcode::Close::new(types::Fd(done.into_raw_fd())).build();
            self.cr.push(close, user_data(idx, c.generation, CLOSE))?;
        }
        c.generation = c.generation.wrapping_add(1);
        if now >= self.cfg.deadline {
            c.phase = Phase::Done;
            self.active -= 1;
            return Ok(());
        }
        let fd = match sockopt::stream_socket_for(&self.target, self.cfg.protocol) {
            Ok(fd) => fd,
            Err(e) => {
                // Out of descriptors or memory: the flow cannot go on.
                c.error = Some(format!("creating a socket: {e}"));
                self.failures.other += 1;
                c.phase = Phase::Done;
                self.active -= 1;
                return Ok(());
            }
        };
        if self.cfg.req_len > NAGLE_FREE_LEN {
            // Nagle never holds a connection's first segment (nothing is unacknowledged
            // yet): only a request that may span segments needs TCP_NODELAY's system call.
            let _ = SockRef::from(&fd).set_tcp_nodelay(true);
        }
        let entry = opcode::Connect::new(types::Fd(fd.as_raw_fd()), self.addr.as_ptr().cast(), self.addr.len()).build();
        c.fd = Some(fd);
        c.phase = Phase::Connecting;
        c.started = now;
        c.req_done = 0;
        c.resp_done = 0;
        let ud = user_data(idx, c.generation, CONNECT);
        self.cr.push(entry, ud)
    }

    fn fail(&mut self, idx: usize, res: i32, now: Instant) -> Result<()> {
        classify(&mut self.failures, res);
        let c = &mut self.conns[idx];
        if c.error.is_none() && !matches!(-res, libc::ECONNREFUSED | libc::EADDRNOTAVAIL | libc::ETIMEDOUT) {
            c.error = Some(format!(
                "{:?} failed: {}",
                c.phase,
                if res == 0 { "closed by the server".into() } else { errno_text(res) }
            ));
        }
        self.start(idx, now)
    }

    fn complete(
        &mut self,
        idx: usize,
        op: u64,
        res: i32,
        now: Instant,
        latency: &mut hdrhistogram::Histogram<u64>,
        counters: &QueueCounters,
    ) -> Result<()> {
        let cfg = self.cfg;
        let c = &mut self.conns[idx];
        let fd = c.fd.as_ref().map_or(-1, |f| f.as_raw_fd());
        let generation = c.generation;
        let ud = |op| user_data(idx, generation, op);
        match (c.phase, op) {
            (Phase::Connecting, CONNECT) if res < 0 => self.fail(idx, res, now),
            (Phase::Connecting, CONNECT) => {
                // The request and the receive of its answer go in one submission.
                c.phase = Phase::Sending;
                let (u, r) = (ud(SEND), ud(RECV));
                self.cr.send(fd, cfg.req_len, u)?;
                self.cr.recv(fd, cfg.resp_len, r)
            }
            (Phase::Sending, SEND) if res <= 0 => self.fail(idx, res, now),
            (Phase::Sending, SEND) => {
                c.req_done += res as u32;
                if c.req_done < cfg.req_len {
                    let (left, u) = (cfg.req_len - c.req_done, ud(SEND));
                    self.cr.send(fd, left, u)
                } else {
                    c.phase = Phase::Receiving;
                    Ok(())
                }
            }
            (Phase::Sending | Phase::Receiving, RECV) if res <= 0 => self.fail(idx, res, now),
            // The server answers only a whole request, so an answer means the send is done
            // even if its completion comes later in the batch.
            (Phase::Sending | Phase::Receiving, RECV) => {
                c.resp_done += res as u32;
                let answered = c.resp_done >= cfg.resp_len;
                if answered {
                    c.transactions += 1;
                    counters.add(c.queue as usize, 1);
                    cfg.record(latency, c.queue as usize, c.started, now);
                    c.phase = Phase::Draining;
                }
                let (left, u) = (cfg.resp_len.saturating_sub(c.resp_done).max(1), ud(RECV));
                if answered {
                    self.sample_mptcp(fd, idx);
                }
                self.cr.recv(fd, left, u)
            }
            // The server's FIN (or an error after a complete answer): this connection is done.
            (Phase::Draining, RECV) if res <= 0 => self.start(idx, now),
            (Phase::Draining, RECV) => {
                let u = ud(RECV);
                self.cr.recv(fd, SCRATCH, u)
            }
            _ => Ok(()),
        }
    }

    /// `-m`: reads this answered connection's MPTCP state when its turn in the sample comes
    /// (it is whole and its subflows open: the server closes only after the answer).
    fn sample_mptcp(&mut self, fd: i32, idx: usize) {
        let due = self.answered % MPTCP_SAMPLE_EVERY == 0 && self.mptcp.len() < MPTCP_SAMPLES_KEPT;
        self.answered += 1;
        if due && self.cfg.protocol == StreamProtocol::Mptcp {
            self.mptcp.extend(crate::sys::mptcp::read(fd, idx as u32));
        }
    }

    /// Abandons connections older than the timeout: counted (unless the answer was already
    /// complete), cancelled, replaced.
    fn expire(&mut self, now: Instant) -> Result<()> {
        for idx in 0..self.conns.len() {
            let c = &self.conns[idx];
            if c.phase == Phase::Done || now.duration_since(c.started) < self.cfg.timeout {
                continue;
            }
            if c.phase != Phase::Draining {
                self.failures.timeouts += 1;
            }
            // Every operation on the connection's socket (a send and the receive beside it).
            let fd = types::Fd(c.fd.as_ref().map_or(-1, |f| f.as_raw_fd()));
            let cancel =
                opcode::AsyncCancel2::new(types::CancelBuilder::fd(fd).all()).build().user_data(TIMEOUT_CANCEL);
            // SAFETY: a cancel points at no memory, only at another operation's user_data.
            unsafe { push(&mut self.cr.ring, &cancel) }?;
            self.start(idx, now)?;
        }
        Ok(())
    }
}

/// Runs a crr client thread: each flow opens connection after connection to `target`
/// until the deadline.
pub(crate) fn run_client(
    flows: Vec<CrrFlow>,
    target: SocketAddr,
    counters: &QueueCounters,
    cfg: &RrConfig,
) -> Result<RrClientResult> {
    let now = Instant::now();
    let conns: Vec<ClientConn> = flows
        .into_iter()
        .map(|f| ClientConn {
            queue: f.queue,
            fd: None,
            phase: Phase::Done,
            generation: 0,
            started: now,
            req_done: 0,
            resp_done: 0,
            transactions: 0,
            error: None,
        })
        .collect();
    let mut client = Client {
        cr: CrrRing::new(conns.len(), cfg.req_len, cfg.ring)?,
        active: conns.len(),
        conns,
        addr: Box::new(sockopt::sockaddr(&target)),
        target,
        cfg,
        failures: RrFailures::default(),
        answered: 0,
        mptcp: Vec::new(),
    };
    let mut latency = latency_histogram();
    for idx in 0..client.conns.len() {
        client.start(idx, now)?;
    }
    let tick = (cfg.timeout / 2).clamp(Duration::from_millis(1), Duration::from_millis(100));
    let mut last_activity = Instant::now();
    let mut cqes = Vec::with_capacity(client.conns.len() * 2);
    let batch = WakeBatch { want: 1, max_delay_us: 0 };
    while client.active > 0 && !cfg.halt.load(Ordering::Relaxed) {
        wait_for_completions(&mut client.cr.ring, cfg.wait, last_activity, tick, batch)?;
        client.cr.reap(&mut cqes);
        let now = Instant::now();
        if !cqes.is_empty() {
            last_activity = now;
        }
        for &(ud, res, _) in &cqes {
            let (idx, generation, op) = split(ud);
            if client.conns[idx].generation == generation && client.conns[idx].phase != Phase::Done {
                client.complete(idx, op, res, now, &mut latency, counters)?;
            }
        }
        client.expire(now)?;
    }
    let inflight = client.cr.inflight;
    let _ = cancel_all(&mut client.cr.ring, inflight, Duration::from_secs(1), |_, _, _| {});
    let flows = client
        .conns
        .into_iter()
        .map(|c| FlowOutcome { queue: c.queue, bytes: c.transactions, error: c.error })
        .collect();
    Ok(RrClientResult { flows, latency_ns: latency, failures: client.failures, trip: None, mptcp: client.mptcp })
}

/// The listening sockets of a crr test, one per queue, all on one port of `ip` (the first
/// picks it), in one SO_REUSEPORT group. `steer` maps CPUs to the queue whose thread runs
/// there: a classic BPF program then hands each new connection to the listener of the CPU
/// its SYN was processed on. Returns the listeners, the port, and how connections are
/// spread, in words.
pub fn listeners(
    ip: std::net::IpAddr,
    queues: u32,
    steer: &[(usize, u32)],
    protocol: StreamProtocol,
) -> Result<(Vec<CrrListener>, u16, String)> {
    let mut port = 0;
    let mut out = Vec::with_capacity(queues as usize);
    for queue in 0..queues {
        let addr = SocketAddr::new(ip, port);
        let fd = sockopt::stream_socket_for(&addr, protocol).map_err(|e| Error::io("creating a crr listener", e))?;
        let raw = fd.as_raw_fd();
        SockRef::from(&fd).set_reuse_port(true).map_err(|e| Error::io("setting SO_REUSEPORT on a crr listener", e))?;
        // Accepted sockets inherit it: answers leave at once.
        let _ = SockRef::from(&fd).set_tcp_nodelay(true);
        sockopt::bind(&fd, &addr).map_err(|e| Error::io(format!("binding a crr listener on {addr}"), e))?;
        // SAFETY: a bound socket we own.
        if unsafe { libc::listen(raw, 4096) } != 0 {
            return Err(Error::io("listening for crr connections", std::io::Error::last_os_error()));
        }
        let listener = TcpListener::from(fd);
        if port == 0 {
            port = listener.local_addr().map_err(|e| Error::io("reading the crr listener address", e))?.port();
        }
        out.push(CrrListener { listener, queue });
    }
    let spread = if queues < 2 {
        "one listener".to_string()
    } else {
        match sockopt::attach_cpu_steering(out[0].listener.as_raw_fd(), steer, queues) {
            Ok(()) => format!(
                "{queues} SO_REUSEPORT listeners, connections steered to the listener of the CPU they arrive on"
            ),
            Err(e) => {
                format!("{queues} SO_REUSEPORT listeners spread by the kernel's hash (CPU steering refused: {e})")
            }
        }
    };
    Ok((out, port, spread))
}

struct ServerConn {
    fd: OwnedFd,
    listener: usize,
    req_done: u32,
    resp_done: u32,
}

/// One crr server thread: its ring, its listeners, the connections open now and what it
/// answered.
struct Server<'a> {
    cr: CrrRing,
    listeners: &'a [CrrListener],
    cfg: &'a RrConfig,
    /// Connections by slot; `free` lists the empty slots.
    slots: Vec<Option<ServerConn>>,
    free: Vec<usize>,
    /// Per listener: transactions answered, and the first accept error.
    answered: Vec<u64>,
    errors: Vec<Option<String>>,
    /// Connections open now, and listeners whose accept waits for one of them to close.
    open_conns: usize,
    paused: Vec<usize>,
}

impl Server<'_> {
    /// Arms listener `l`'s multishot accept.
    fn accept(&mut self, l: usize) -> Result<()> {
        let entry = opcode::AcceptMulti::new(types::Fd(self.listeners[l].listener.as_raw_fd())).build();
        self.cr.push(entry, user_data(l, 0, ACCEPT))
    }

    /// An accept completed on listener `l`: a new connection gets a slot and its first
    /// receive; an error is noted once; an accept that ended is re-armed, unless descriptors
    /// ran out, in which case it waits until a connection of this thread closes.
    fn accepted(&mut self, l: usize, res: i32, flags: u32) -> Result<()> {
        if res >= 0 {
            // SAFETY: a new descriptor the kernel just handed to us.
            let fd = unsafe { OwnedFd::from_raw_fd(res) };
            let raw = fd.as_raw_fd();
            let conn = ServerConn { fd, listener: l, req_done: 0, resp_done: 0 };
            self.open_conns += 1;
            let slot = match self.free.pop() {
                Some(s) => {
                    self.slots[s] = Some(conn);
                    s
                }
                None => {
                    self.slots.push(Some(conn));
                    self.slots.len() - 1
                }
            };
            self.cr.recv(raw, self.cfg.req_len, user_data(slot, 0, RECV))?;
        } else if res == -libc::EMFILE || res == -libc::ENFILE {
            self.errors[l].get_or_insert_with(|| {
                format!(
                    "accept failed: {}: raise the receiver's open-file limit (ulimit -n); accepting \
                     resumed as connections closed",
                    errno_text(res)
                )
            });
        } else if res != -libc::ECANCELED {
            self.errors[l].get_or_insert_with(|| format!("accept failed: {}", errno_text(res)));
        }
        // Out of descriptors (or memory): accepting again at once would only fail
        // again, in a loop. Wait until a connection of this thread closes.
        let exhausted = matches!(-res, libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM);
        if !cqueue::more(flags) && res != -libc::ECANCELED {
            if exhausted && self.open_conns > 0 {
                self.paused.push(l);
            } else {
                self.accept(l)?;
            }
        }
        Ok(())
    }

    /// A receive or send of the connection in slot `idx` completed: the request is read to its
    /// end, then the answer sent; once it is out, the connection is counted and closed.
    fn progressed(&mut self, idx: usize, op: u64, res: i32, counters: &QueueCounters) -> Result<()> {
        let cfg = self.cfg;
        let Some(conn) = self.slots[idx].as_mut() else { return Ok(()) };
        let raw = conn.fd.as_raw_fd();
        let mut close = res <= 0;
        if !close && op == RECV {
            conn.req_done += res as u32;
            if conn.req_done < cfg.req_len {
                self.cr.recv(raw, cfg.req_len - conn.req_done, user_data(idx, 0, RECV))?;
            } else {
                self.cr.send(raw, cfg.resp_len, user_data(idx, 0, SEND))?;
            }
        } else if !close {
            conn.resp_done += res as u32;
            if conn.resp_done < cfg.resp_len {
                self.cr.send(raw, cfg.resp_len - conn.resp_done, user_data(idx, 0, SEND))?;
            } else {
                self.answered[conn.listener] += 1;
                counters.add(self.listeners[conn.listener].queue as usize, 1);
                close = true;
            }
        }
        if close {
            // Dropping the descriptor closes it: the FIN follows the answer.
            self.slots[idx] = None;
            self.free.push(idx);
            self.open_conns -= 1;
            for l in std::mem::take(&mut self.paused) {
                self.accept(l)?;
            }
        }
        Ok(())
    }
}

/// Runs a crr server thread: accepts on its listeners, answers each connection's request and
/// closes it, until `cfg.halt`. `bytes` in the outcomes counts answered transactions.
pub(crate) fn run_server(
    listeners: Vec<CrrListener>,
    counters: &QueueCounters,
    cfg: &RrConfig,
) -> Result<Vec<FlowOutcome>> {
    let mut srv = Server {
        cr: CrrRing::new(64, cfg.resp_len, cfg.ring)?,
        listeners: &listeners,
        cfg,
        slots: Vec::new(),
        free: Vec::new(),
        answered: vec![0u64; listeners.len()],
        errors: vec![None; listeners.len()],
        open_conns: 0,
        paused: Vec::new(),
    };
    for l in 0..listeners.len() {
        srv.accept(l)?;
    }
    let mut last_activity = Instant::now();
    let mut cqes = Vec::with_capacity(256);
    let batch = WakeBatch { want: 1, max_delay_us: 0 };
    loop {
        // At the stop, one more look collects answers whose completions were still queued.
        let stopping = cfg.halt.load(Ordering::Relaxed);
        wait_for_completions(&mut srv.cr.ring, cfg.wait, last_activity, Duration::from_millis(100), batch)?;
        srv.cr.reap(&mut cqes);
        if cqes.is_empty() && stopping {
            break;
        }
        if !cqes.is_empty() {
            last_activity = Instant::now();
        }
        for &(ud, res, flags) in &cqes {
            let (idx, _, op) = split(ud);
            if op == ACCEPT {
                srv.accepted(idx, res, flags)?;
            } else {
                srv.progressed(idx, op, res, counters)?;
            }
        }
    }
    // Tear down: what is still in flight is cancelled (a connection accepted meanwhile is
    // closed), then the ring goes before the connections.
    let Server { mut cr, slots, answered, errors, .. } = srv;
    let inflight = cr.inflight;
    let _ = cancel_all(&mut cr.ring, inflight, Duration::from_secs(1), |ud, res, _| {
        if ud & 0xf == ACCEPT && res >= 0 {
            // SAFETY: a connection accepted while cancelling; nobody else owns it.
            drop(unsafe { OwnedFd::from_raw_fd(res) });
        }
    });
    drop(cr);
    drop(slots);
    Ok(listeners
        .iter()
        .zip(answered)
        .zip(errors)
        .map(|((l, bytes), error)| FlowOutcome { queue: l.queue, bytes, error })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::uring::ring::WaitMode;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    fn config(time: Duration) -> RrConfig {
        let now = Instant::now();
        RrConfig {
            wait: WaitMode::Sleep,
            ring: RingPaths::default(),
            req_len: 100,
            resp_len: 3000,
            deadline: now + time,
            window: (now, now + time),
            timeout: Duration::from_millis(500),
            halt: Arc::new(AtomicBool::new(false)),
            protocol: StreamProtocol::Tcp,
            bounceback: 1,
            trip_times: false,
            live: None,
        }
    }

    #[test]
    fn every_connection_is_one_transaction_on_both_ends() {
        let (ls, port, spread) =
            listeners("127.0.0.1".parse().unwrap(), 2, &[(0, 0), (1, 1)], StreamProtocol::Tcp).unwrap();
        assert!(spread.contains("steered"), "{spread}");
        assert_eq!(ls.len(), 2);
        let cfg = config(Duration::from_millis(300));
        let server_cfg = cfg.clone();
        let server_counters = Arc::new(QueueCounters::new(2));
        let sc = Arc::clone(&server_counters);
        let srv = std::thread::spawn(move || run_server(ls, &sc, &server_cfg).unwrap());
        let counters = QueueCounters::new(2);
        let target: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let flows = vec![CrrFlow { queue: 0 }, CrrFlow { queue: 1 }];
        let res = run_client(flows, target, &counters, &cfg).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        cfg.halt.store(true, Ordering::Relaxed);
        let served = srv.join().unwrap();
        let done: u64 = res.flows.iter().map(|f| f.bytes).sum();
        let answered: u64 = served.iter().map(|f| f.bytes).sum();
        assert!(done > 50, "loopback sets up hundreds of connections in 300 ms, got {done}");
        assert_eq!(answered, done, "every answered connection completed on the client");
        assert_eq!(res.failures, RrFailures::default(), "no failure on loopback");
        let recorded = res.latency_ns.len();
        assert!(
            recorded + 2 >= done && recorded <= done,
            "all but the last per flow in the window: {recorded} of {done}"
        );
    }

    #[test]
    fn refused_connections_are_counted_not_fatal() {
        // A port nobody listens on: bind one, note it, close it.
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let cfg = config(Duration::from_millis(100));
        let counters = QueueCounters::new(1);
        let target: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let res = run_client(vec![CrrFlow { queue: 0 }], target, &counters, &cfg).unwrap();
        assert_eq!(res.flows[0].bytes, 0);
        assert!(res.failures.refused > 0, "{:?}", res.failures);
        assert_eq!(res.failures.total(), res.failures.refused, "only refusals: {:?}", res.failures);
    }

    #[test]
    fn user_data_round_trips() {
        let ud = user_data(123_456, 0xbeef, RECV);
        assert_eq!(split(ud), (123_456, 0xbeef, RECV));
        assert_ne!(ud, TIMEOUT_CANCEL);
    }
}
