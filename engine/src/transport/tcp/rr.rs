//! Request/response over TCP: the client sends `req_len` bytes and waits for `resp_len`
//! bytes back, one transaction in flight per flow; the server answers every complete request.
//!
//! Payload content is never looked at, so all of a thread's sends come from one shared
//! buffer and all its receives land in one shared scratch buffer: a transaction costs two
//! ring round trips and no allocation. The client records every transaction's round trip
//! (from the request's submission to the last response byte) into an HdrHistogram.

use crate::base::error::Result;
use crate::metrics::measure::QueueCounters;
use crate::transport::rr::{latency_histogram, RrClientResult, RrConfig, RrFailures};
use crate::transport::tcp::rr_bell::{self, BellRing};
use crate::transport::tcp::trip::{realtime_ns, FlowStamps, StampedSends, TripLegs, TRIP_SCRATCH};
use crate::transport::{errno_text, FlowOutcome};
use crate::uring::ring::{build_ring, push, wait_for_completions, AlignedBuf, WakeBatch};
use crate::uring::user_data::{UserData, TCP_RR};
use io_uring::{opcode, types, IoUring};
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Receives land in this much scratch memory at most per operation.
const SCRATCH: u32 = 64 * 1024;

pub(crate) use crate::transport::tcp::RrFlow;

#[derive(Clone, Copy, PartialEq)]
enum Phase {
    Sending,
    Receiving,
    Done,
}

/// A flow in its transactions: its socket, where its current transaction stands, and its count.
struct TcpTransactingFlow {
    stream: TcpStream,
    queue: u32,
    phase: Phase,
    /// Bytes of the current request sent (client) or received (server).
    req_done: u32,
    /// Bytes of the current response received (client) or sent (server).
    resp_done: u32,
    started: Instant,
    transactions: u64,
    error: Option<String>,
    /// `--trip-times` client: the stamps of the burst being received.
    stamps: FlowStamps,
}

// Field order is drop order: the ring goes first, before the buffers it may reference.
struct RrRing {
    ring: IoUring,
    send_buf: AlignedBuf,
    scratch: AlignedBuf,
    /// `--trip-times` client: one receive scratch per flow, where the stamps are read.
    flow_scratch: Option<AlignedBuf>,
    /// `--trip-times` server: each response in flight with its own stamp.
    stamped: Option<StampedSends>,
}

const SEND: u64 = 0;
const RECV: u64 = 1;
/// An operation's user data: its flow, its stamped-response slot (0 when none) and its kind.
fn user_data(idx: usize, slot: u32, op: u64) -> u64 {
    TCP_RR.pack(UserData { index: idx, slot, op, ..UserData::default() })
}

/// The flow, slot and whether it is a send, from an operation's user data.
fn parse_user_data(ud: u64) -> (usize, u32, bool) {
    let ud = TCP_RR.unpack(ud);
    (ud.index, ud.slot, ud.op == SEND)
}

impl RrRing {
    fn new(flows: usize, cfg: &RrConfig) -> Result<Self> {
        let entries = (flows as u32 * 2).next_power_of_two().clamp(64, 4096);
        // A client sends a whole --bounceback burst of requests in one operation.
        let send_len = (cfg.req_len * cfg.bounceback).max(cfg.resp_len) as usize;
        let send_buf = AlignedBuf::new(send_len)?;
        // SAFETY: a fresh mapping of at least send_len bytes.
        unsafe { std::ptr::write_bytes(send_buf.as_ptr(), b'r', send_buf.len()) };
        Ok(Self {
            ring: build_ring(entries, cfg.ring)?,
            send_buf,
            scratch: AlignedBuf::new(SCRATCH as usize)?,
            flow_scratch: None,
            stamped: None,
        })
    }

    /// This ring for a `--trip-times` client: every flow receives into its own scratch.
    fn reading_stamps(mut self, flows: usize) -> Result<Self> {
        self.flow_scratch = Some(AlignedBuf::new(flows * TRIP_SCRATCH as usize)?);
        Ok(self)
    }

    /// This ring for a `--trip-times` server: responses are stamped.
    fn stamping(mut self, flows: usize, in_flight: u32) -> Self {
        self.stamped = Some(StampedSends::new(flows, in_flight));
        self
    }

    /// Sends what is left of the response in flow `idx`'s slot `slot`.
    fn send_stamped(&mut self, idx: usize, slot: u32, fd: i32, resp_len: u32) -> Result<()> {
        let payload = self.send_buf.as_ptr();
        let Some(stamped) = self.stamped.as_mut() else { return self.send(idx, fd, resp_len) };
        let msg = stamped.message(idx, slot, payload, resp_len);
        let entry = opcode::SendMsg::new(types::Fd(fd), msg).build();
        // SAFETY: the message and its pieces point into self.stamped's boxed slots and
        // self.send_buf, which drop after self.ring; a slot is reused only after its send completed
        // (a flow has at most as many responses in flight as it has slots).
        unsafe { push(&mut self.ring, &entry.user_data(user_data(idx, slot, SEND))) }
    }

    /// The bytes the last receive of flow `idx` wrote, when it received into its own scratch.
    fn received(&self, idx: usize, len: usize) -> Option<&[u8]> {
        let scratch = self.flow_scratch.as_ref()?;
        // SAFETY: flow idx's scratch is TRIP_SCRATCH bytes at idx * TRIP_SCRATCH, written by
        // its one completed receive (len <= TRIP_SCRATCH bytes), none in flight now.
        Some(unsafe { std::slice::from_raw_parts(scratch.as_ptr().add(idx * TRIP_SCRATCH as usize), len) })
    }

    fn send(&mut self, idx: usize, fd: i32, len: u32) -> Result<()> {
        let entry = opcode::Send::new(types::Fd(fd), self.send_buf.as_ptr(), len).build();
        // SAFETY: self.send_buf is only read by the kernel and drops after self.ring.
        unsafe { push(&mut self.ring, &entry.user_data(user_data(idx, 0, SEND))) }
    }

    fn recv(&mut self, idx: usize, fd: i32, remaining: u32) -> Result<()> {
        let (at, cap) = match &self.flow_scratch {
            // SAFETY: flow idx's own TRIP_SCRATCH bytes inside the per-flow scratch.
            Some(s) => (unsafe { s.as_ptr().add(idx * TRIP_SCRATCH as usize) }, TRIP_SCRATCH),
            None => (self.scratch.as_ptr(), SCRATCH),
        };
        let entry = opcode::Recv::new(types::Fd(fd), at, remaining.min(cap)).build();
        // SAFETY: the scratch is written only by the kernel (the shared one never read; a
        // flow's own read only after its receive completed) and drops after self.ring.
        unsafe { push(&mut self.ring, &entry.user_data(user_data(idx, 0, RECV))) }
    }
}

fn states(flows: Vec<RrFlow>, phase: Phase) -> Vec<TcpTransactingFlow> {
    let now = Instant::now();
    flows
        .into_iter()
        .map(|f| TcpTransactingFlow {
            stream: f.stream,
            queue: f.queue,
            phase,
            req_done: 0,
            resp_done: 0,
            started: now,
            transactions: 0,
            error: None,
            stamps: FlowStamps::default(),
        })
        .collect()
}

fn outcomes(state: Vec<TcpTransactingFlow>) -> Vec<FlowOutcome> {
    state.into_iter().map(|f| FlowOutcome { queue: f.queue, bytes: f.transactions, error: f.error }).collect()
}

/// Runs an rr client thread: transactions back to back on every flow until the deadline,
/// then half-closes each flow. A transaction's send and the receive of its response are
/// submitted together: one `io_uring_enter` issues both, and the only other is the one that
/// collects the response. With `--bounceback N` a transaction is a burst: N requests in one
/// send, then all N responses; it counts N transactions and one round trip.
pub(crate) fn run_client(mut flows: Vec<RrFlow>, counters: &QueueCounters, cfg: &RrConfig) -> Result<RrClientResult> {
    if let Some(ring) = BellRing::for_flows(&flows, cfg, false)? {
        return rr_bell::run_client(ring, flows.remove(0), counters, cfg);
    }
    let burst = cfg.bounceback.max(1);
    let (req_len, resp_len) = (cfg.req_len * burst, cfg.resp_len * burst);
    let mut rr = RrRing::new(flows.len(), cfg)?;
    if cfg.trip_times {
        rr = rr.reading_stamps(flows.len())?;
    }
    let mut trip = cfg.trip_times.then(TripLegs::new);
    let mut state = states(flows, Phase::Sending);
    let mut latency_ns = latency_histogram();
    let start = |rr: &mut RrRing, f: &mut TcpTransactingFlow, idx: usize| -> Result<()> {
        f.req_done = 0;
        f.resp_done = 0;
        f.phase = Phase::Receiving;
        f.started = Instant::now();
        f.stamps.sent_ns = if cfg.trip_times { realtime_ns() } else { 0 };
        let fd = f.stream.as_raw_fd();
        rr.send(idx, fd, req_len)?;
        rr.recv(idx, fd, resp_len)
    };
    for (idx, f) in state.iter_mut().enumerate() {
        start(&mut rr, f, idx)?;
    }
    let mut active = state.len();
    let mut last_activity = Instant::now();
    let mut cqes: Vec<(u64, i32)> = Vec::with_capacity(state.len() * 2);
    let batch = WakeBatch { want: 1, max_delay_us: 0 };
    while active > 0 && !cfg.halt.load(Ordering::Relaxed) {
        wait_for_completions(&mut rr.ring, cfg.wait, last_activity, Duration::from_millis(100), batch)?;
        cqes.clear();
        cqes.extend(rr.ring.completion().map(|c| (c.user_data(), c.result())));
        let now = Instant::now();
        if !cqes.is_empty() {
            last_activity = now;
        }
        for &(ud, res) in &cqes {
            let (idx, _, is_send) = parse_user_data(ud);
            let f = &mut state[idx];
            let fd = f.stream.as_raw_fd();
            if f.phase == Phase::Done {
                continue;
            }
            if res == -libc::EINTR || res == -libc::EAGAIN {
                if is_send {
                    rr.send(idx, fd, req_len - f.req_done)?;
                } else {
                    rr.recv(idx, fd, resp_len - f.resp_done)?;
                }
                continue;
            }
            if res <= 0 {
                f.error = Some(if res == 0 {
                    "server closed the flow mid-transaction".into()
                } else {
                    format!("transaction failed: {}", errno_text(res))
                });
                f.phase = Phase::Done;
                active -= 1;
                continue;
            }
            if is_send {
                f.req_done += res as u32;
                if f.req_done < req_len {
                    rr.send(idx, fd, req_len - f.req_done)?;
                }
                continue;
            }
            if let Some(bytes) = rr.received(idx, res as usize) {
                let legs = trip.as_mut().filter(|_| cfg.in_window(now));
                f.stamps.received(bytes, u64::from(f.resp_done), cfg.resp_len, realtime_ns(), legs);
            }
            f.resp_done += res as u32;
            if f.resp_done < resp_len {
                rr.recv(idx, fd, resp_len - f.resp_done)?;
                continue;
            }
            // A whole transaction (the server answers only a whole request, so the send
            // is complete too).
            f.transactions += u64::from(burst);
            counters.add(f.queue as usize, u64::from(burst));
            cfg.record(&mut latency_ns, f.queue as usize, f.started, now);
            if now >= cfg.deadline {
                let _ = f.stream.shutdown(Shutdown::Write);
                f.phase = Phase::Done;
                active -= 1;
                continue;
            }
            start(&mut rr, f, idx)?;
        }
    }
    if active > 0 {
        for f in state.iter_mut().filter(|f| f.phase != Phase::Done) {
            f.error.get_or_insert_with(|| "server stopped answering".into());
        }
    }
    Ok(RrClientResult { flows: outcomes(state), latency_ns, failures: RrFailures::default(), trip, mptcp: Vec::new() })
}

/// Runs an rr server thread: answers every complete request until each flow's EOF. The
/// answer and the receive of the next request are submitted together.
pub(crate) fn run_server(mut flows: Vec<RrFlow>, counters: &QueueCounters, cfg: &RrConfig) -> Result<Vec<FlowOutcome>> {
    if let Some(ring) = BellRing::for_flows(&flows, cfg, true)? {
        return rr_bell::run_server(ring, flows.remove(0), counters, cfg);
    }
    let mut rr = RrRing::new(flows.len(), cfg)?;
    if cfg.trip_times {
        // A flow has as many responses in flight as its client's burst has requests.
        rr = rr.stamping(flows.len(), cfg.bounceback);
    }
    let mut state = states(flows, Phase::Receiving);
    for (idx, f) in state.iter().enumerate() {
        rr.recv(idx, f.stream.as_raw_fd(), cfg.req_len)?;
    }
    let mut active = state.len();
    let mut last_activity = Instant::now();
    let mut cqes: Vec<(u64, i32)> = Vec::with_capacity(state.len() * 2);
    let batch = WakeBatch { want: 1, max_delay_us: 0 };
    while active > 0 && !cfg.halt.load(Ordering::Relaxed) {
        wait_for_completions(&mut rr.ring, cfg.wait, last_activity, Duration::from_millis(100), batch)?;
        cqes.clear();
        cqes.extend(rr.ring.completion().map(|c| (c.user_data(), c.result())));
        if !cqes.is_empty() {
            last_activity = Instant::now();
        }
        for &(ud, res) in &cqes {
            let (idx, slot, is_send) = parse_user_data(ud);
            let fd = state[idx].stream.as_raw_fd();
            let f = &mut state[idx];
            if f.phase == Phase::Done {
                continue;
            }
            if res == -libc::EINTR || res == -libc::EAGAIN {
                if is_send && rr.stamped.is_some() {
                    rr.send_stamped(idx, slot, fd, cfg.resp_len)?;
                } else if is_send {
                    rr.send(idx, fd, cfg.resp_len - f.resp_done)?;
                } else {
                    rr.recv(idx, fd, cfg.req_len - f.req_done)?;
                }
                continue;
            }
            if res <= 0 {
                // EOF between transactions is the client's clean end.
                if res < 0 || f.req_done > 0 {
                    f.error = Some(if res == 0 {
                        "client closed the flow mid-request".into()
                    } else {
                        format!("transaction failed: {}", errno_text(res))
                    });
                }
                f.phase = Phase::Done;
                active -= 1;
                continue;
            }
            if !is_send {
                f.req_done += res as u32;
                if f.req_done < cfg.req_len {
                    rr.recv(idx, fd, cfg.req_len - f.req_done)?;
                } else {
                    // A whole request: answer it and wait for the next in one submission.
                    f.req_done = 0;
                    f.resp_done = 0;
                    match rr.stamped.as_mut() {
                        Some(stamped) => {
                            let slot = stamped.start(idx, realtime_ns());
                            rr.send_stamped(idx, slot, fd, cfg.resp_len)?;
                        }
                        None => rr.send(idx, fd, cfg.resp_len)?,
                    }
                    rr.recv(idx, fd, cfg.req_len)?;
                }
                continue;
            }
            if let Some(stamped) = rr.stamped.as_mut() {
                // Each stamped response keeps its own count: several may be in flight.
                if stamped.sent(idx, slot, res as u32, cfg.resp_len) {
                    f.transactions += 1;
                    counters.add(f.queue as usize, 1);
                } else {
                    rr.send_stamped(idx, slot, fd, cfg.resp_len)?;
                }
                continue;
            }
            f.resp_done += res as u32;
            if f.resp_done < cfg.resp_len {
                rr.send(idx, fd, cfg.resp_len - f.resp_done)?;
                continue;
            }
            f.transactions += 1;
            counters.add(f.queue as usize, 1);
        }
    }
    if active > 0 {
        for f in state.iter_mut().filter(|f| f.phase != Phase::Done) {
            f.error.get_or_insert_with(|| "flow still open when the server stopped waiting".into());
        }
    }
    Ok(outcomes(state))
}
