//! Request/response over TCP: the client sends `req_len` bytes and waits for `resp_len`
//! bytes back, one transaction in flight per flow; the server answers every complete request.
//!
//! Payload content is never looked at, so all of a thread's sends come from one shared
//! buffer. Each flow's receive is one multishot receive into a provided-buffer ring, armed
//! once: a transaction costs each end one send submission and one entry to complete the
//! receive the kernel flags as ready, with nothing to re-arm (no poll set-up, no failed
//! first receive attempt) and nothing allocated. Both wait by polling the completion queue
//! in user space while they spin. The client reads the clock once per transaction (the
//! instant a response completes is the next request's start) and records every round trip
//! (from just before the request's submission to the reap of its last response byte) in an
//! HdrHistogram.

use crate::base::error::Result;
use crate::metrics::measure::QueueCounters;
use crate::transport::rr::{latency_histogram, RrClientResult, RrConfig, RrFailures};
use crate::transport::{errno_text, FlowOutcome};
use crate::uring::ring::{build_ring, cancel_all, push, wait_for_completions, AlignedBuf, BufRing, WakeBatch};
use io_uring::{cqueue, opcode, types, IoUring};
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Provided receive buffers per thread, and the size of each: one completion lands in one
/// buffer, which goes back to the ring before the next completion is looked at.
const RECV_BUFS: u16 = 64;
const RECV_BUF_SIZE: u32 = 16 * 1024;
const BUF_GROUP: u16 = 0;

/// One flow handed to an rr thread.
pub(crate) struct RrFlow {
    pub stream: TcpStream,
    pub queue: u32,
}

/// A flow in its transactions: its socket, where its current transaction stands, and its count.
struct TcpTransactingFlow {
    stream: TcpStream,
    queue: u32,
    open: bool,
    /// Whether the flow's multishot receive is armed.
    receiving: bool,
    /// Whether a send of this flow is in flight.
    sending: bool,
    /// Bytes of the current request sent (client) or received (server).
    req_done: u32,
    /// Bytes of the current response received (client) or sent (server).
    resp_done: u32,
    /// Server: complete requests not answered yet (a client has one in flight at a time,
    /// but a request can complete while the previous answer's send is still in flight).
    unanswered: u32,
    started: Instant,
    transactions: u64,
    error: Option<String>,
}

impl TcpTransactingFlow {
    fn fail(&mut self, error: String) {
        self.error.get_or_insert(error);
        self.open = false;
    }
}

// Field order is drop order: the ring goes first, before the buffers it may reference.
struct RrRing {
    ring: IoUring,
    send_buf: AlignedBuf,
    bufs: BufRing,
}

const SEND: u64 = 0;
const RECV: u64 = 1;

fn user_data(idx: usize, op: u64) -> u64 {
    ((idx as u64) << 1) | op
}

impl RrRing {
    fn new(flows: usize, cfg: &RrConfig) -> Result<Self> {
        let entries = (flows as u32 * 2).next_power_of_two().clamp(64, 4096);
        let send_len = cfg.req_len.max(cfg.resp_len) as usize;
        let send_buf = AlignedBuf::new(send_len)?;
        // SAFETY: a fresh mapping of at least send_len bytes.
        unsafe { std::ptr::write_bytes(send_buf.as_ptr(), b'r', send_buf.len()) };
        let ring = build_ring(entries, cfg.ring)?;
        let bufs = BufRing::register(&ring, BUF_GROUP, RECV_BUFS, RECV_BUF_SIZE)?;
        Ok(Self { ring, send_buf, bufs })
    }

    fn send(&mut self, idx: usize, f: &mut TcpTransactingFlow, len: u32) -> Result<()> {
        f.sending = true;
        let entry = opcode::Send::new(types::Fd(f.stream.as_raw_fd()), self.send_buf.as_ptr(), len).build();
        // SAFETY: self.send_buf is only read by the kernel and drops after self.ring.
        unsafe { push(&mut self.ring, &entry.user_data(user_data(idx, SEND))) }
    }

    /// A send that carried nothing: sent again when interrupted, else the flow's failure.
    fn send_failed(&mut self, idx: usize, f: &mut TcpTransactingFlow, res: i32, left: u32) -> Result<()> {
        if res == -libc::EINTR || res == -libc::EAGAIN {
            return self.send(idx, f, left);
        }
        if f.open {
            f.fail(format!("transaction failed: {}", errno_text(res)));
        }
        Ok(())
    }

    /// Arms flow `idx`'s multishot receive.
    fn arm(&mut self, idx: usize, f: &mut TcpTransactingFlow) -> Result<()> {
        f.receiving = true;
        let entry = opcode::RecvMulti::new(types::Fd(f.stream.as_raw_fd()), BUF_GROUP).build();
        // SAFETY: the provided buffers belong to self.bufs, which drops after self.ring; the
        // socket stays open until the thread has cancelled and reaped its operations.
        unsafe { push(&mut self.ring, &entry.user_data(user_data(idx, RECV))) }
    }

    /// Takes a receive completion: gives its buffer back and re-arms a receive that ended.
    /// Returns the bytes received, 0 at EOF, or None for a completion that carried nothing
    /// (out of buffers, interrupted).
    fn received(&mut self, idx: usize, f: &mut TcpTransactingFlow, res: i32, flags: u32) -> Result<Option<u32>> {
        if !cqueue::more(flags) {
            f.receiving = false;
        }
        if res > 0 {
            if let Some(bid) = cqueue::buffer_select(flags) {
                self.bufs.recycle(bid, res as u32);
            }
        }
        let retry = matches!(-res, libc::ENOBUFS | libc::EINTR | libc::EAGAIN);
        if (res > 0 || retry) && !f.receiving && f.open {
            self.arm(idx, f)?;
        }
        if res < 0 && !retry && f.open {
            f.fail(format!("transaction failed: {}", errno_text(res)));
        }
        Ok(if retry || res < 0 { None } else { Some(res as u32) })
    }

    /// Cancels what is still in flight so the buffers can go.
    fn finish(&mut self, state: &[TcpTransactingFlow]) {
        let inflight = state.iter().map(|f| usize::from(f.receiving) + usize::from(f.sending)).sum();
        let _ = cancel_all(&mut self.ring, inflight, Duration::from_secs(1), |_, _, _| {});
    }
}

fn states(flows: Vec<RrFlow>) -> Vec<TcpTransactingFlow> {
    let now = Instant::now();
    flows
        .into_iter()
        .map(|f| TcpTransactingFlow {
            stream: f.stream,
            queue: f.queue,
            open: true,
            receiving: false,
            sending: false,
            req_done: 0,
            resp_done: 0,
            unanswered: 0,
            started: now,
            transactions: 0,
            error: None,
        })
        .collect()
}

fn outcomes(state: Vec<TcpTransactingFlow>) -> Vec<FlowOutcome> {
    state.into_iter().map(|f| FlowOutcome { queue: f.queue, bytes: f.transactions, error: f.error }).collect()
}

/// Reaps the ready completions into `cqes` as (user_data, result, flags).
fn reap(ring: &mut IoUring, cqes: &mut Vec<(u64, i32, u32)>) {
    cqes.clear();
    cqes.extend(ring.completion().map(|c| (c.user_data(), c.result(), c.flags())));
}

/// Runs an rr client thread: transactions back to back on every flow until the deadline,
/// then half-closes each flow. A transaction is one send submission; its response arrives
/// through the flow's multishot receive.
pub(crate) fn run_client(flows: Vec<RrFlow>, counters: &QueueCounters, cfg: &RrConfig) -> Result<RrClientResult> {
    let mut rr = RrRing::new(flows.len(), cfg)?;
    let mut state = states(flows);
    let mut latency_ns = latency_histogram();
    let now = Instant::now();
    for (idx, f) in state.iter_mut().enumerate() {
        rr.arm(idx, f)?;
        f.started = now;
        rr.send(idx, f, cfg.req_len)?;
    }
    let mut active = state.len();
    let mut last_activity = now;
    let mut cqes = Vec::with_capacity(state.len() * 2);
    let batch = WakeBatch { want: 1, max_delay_us: 0 };
    while active > 0 && !cfg.stop.load(Ordering::Relaxed) {
        wait_for_completions(&mut rr.ring, cfg.wait, last_activity, Duration::from_millis(100), batch)?;
        reap(&mut rr.ring, &mut cqes);
        if cqes.is_empty() {
            continue;
        }
        // The one clock read of this batch: the end of the transactions it completes and the
        // start of the requests it sends.
        let now = Instant::now();
        last_activity = now;
        for &(ud, res, flags) in &cqes {
            let idx = (ud >> 1) as usize;
            let f = &mut state[idx];
            let was_open = f.open;
            if ud & 1 == SEND {
                f.sending = false;
                if res > 0 {
                    f.req_done += res as u32;
                    if f.req_done < cfg.req_len && f.open {
                        rr.send(idx, f, cfg.req_len - f.req_done)?;
                    }
                } else {
                    let left = cfg.req_len - f.req_done;
                    rr.send_failed(idx, f, res, left)?;
                }
            } else {
                match rr.received(idx, f, res, flags)? {
                    None => {}
                    Some(0) if f.open => f.fail("server closed the flow mid-transaction".into()),
                    Some(n) if f.open => {
                        f.resp_done += n;
                        // A whole response (the server answers only a whole request, so the
                        // request's send is complete too).
                        if f.resp_done >= cfg.resp_len {
                            f.resp_done -= cfg.resp_len;
                            f.req_done = 0;
                            f.transactions += 1;
                            counters.add(f.queue as usize, 1);
                            cfg.record(&mut latency_ns, f.started, now);
                            if now >= cfg.deadline {
                                let _ = f.stream.shutdown(Shutdown::Write);
                                f.open = false;
                            } else {
                                f.started = now;
                                rr.send(idx, f, cfg.req_len)?;
                            }
                        }
                    }
                    Some(_) => {}
                }
            }
            if was_open && !state[idx].open {
                active -= 1;
            }
        }
    }
    if active > 0 {
        for f in state.iter_mut().filter(|f| f.open) {
            f.error.get_or_insert_with(|| "server stopped answering".into());
        }
    }
    rr.finish(&state);
    Ok(RrClientResult { flows: outcomes(state), latency_ns, failures: RrFailures::default() })
}

/// Runs an rr server thread: answers every complete request until each flow's EOF. An
/// answer is one send submission; requests arrive through the flow's multishot receive.
pub(crate) fn run_server(flows: Vec<RrFlow>, counters: &QueueCounters, cfg: &RrConfig) -> Result<Vec<FlowOutcome>> {
    let mut rr = RrRing::new(flows.len(), cfg)?;
    let mut state = states(flows);
    for (idx, f) in state.iter_mut().enumerate() {
        rr.arm(idx, f)?;
    }
    let mut active = state.len();
    let mut last_activity = Instant::now();
    let mut cqes = Vec::with_capacity(state.len() * 2);
    let batch = WakeBatch { want: 1, max_delay_us: 0 };
    while active > 0 && !cfg.stop.load(Ordering::Relaxed) {
        wait_for_completions(&mut rr.ring, cfg.wait, last_activity, Duration::from_millis(100), batch)?;
        reap(&mut rr.ring, &mut cqes);
        if cqes.is_empty() {
            continue;
        }
        last_activity = Instant::now();
        for &(ud, res, flags) in &cqes {
            let idx = (ud >> 1) as usize;
            let f = &mut state[idx];
            let was_open = f.open;
            if ud & 1 == SEND {
                f.sending = false;
                if res > 0 {
                    f.resp_done += res as u32;
                    if f.resp_done < cfg.resp_len {
                        rr.send(idx, f, cfg.resp_len - f.resp_done)?;
                    } else {
                        f.resp_done = 0;
                        f.transactions += 1;
                        counters.add(f.queue as usize, 1);
                        if f.unanswered > 0 {
                            f.unanswered -= 1;
                            rr.send(idx, f, cfg.resp_len)?;
                        }
                    }
                } else {
                    let left = cfg.resp_len - f.resp_done;
                    rr.send_failed(idx, f, res, left)?;
                }
            } else {
                match rr.received(idx, f, res, flags)? {
                    None => {}
                    // EOF between transactions is the client's clean end.
                    Some(0) => {
                        if f.req_done > 0 {
                            f.fail("client closed the flow mid-request".into());
                        }
                        f.open = false;
                    }
                    Some(n) => {
                        f.req_done += n;
                        while f.req_done >= cfg.req_len {
                            f.req_done -= cfg.req_len;
                            f.unanswered += 1;
                        }
                        if f.unanswered > 0 && !f.sending {
                            f.unanswered -= 1;
                            rr.send(idx, f, cfg.resp_len)?;
                        }
                    }
                }
            }
            if was_open && !state[idx].open {
                active -= 1;
            }
        }
    }
    if active > 0 {
        for f in state.iter_mut().filter(|f| f.open) {
            f.error.get_or_insert_with(|| "flow still open when the server stopped waiting".into());
        }
    }
    rr.finish(&state);
    Ok(outcomes(state))
}
