//! One client thread of the `http` load: its io_uring and provided-buffer ring, its share of
//! the connections and their states, and the loop that opens them, sends each request, feeds
//! the responses to the parser and counts every outcome into the thread's intervals.

use super::pieces::{Counts, ThreadIntervals, MAX_LATENCY_US};
use super::{ErrorCounts, FailKind};
use crate::base::error::Result;
use crate::metrics::measure::parse_task_stat;
use crate::uring::ring::WaitMode;
use crate::uring::ring::{build_ring, push, wait_for_completions, BufRing, RingPaths, WakeBatch};
use crate::uring::user_data::{UserData, HTTP};
use crate::wire::http1::{ParseError, ResponseParser};
use io_uring::{cqueue, opcode, types, IoUring};
use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Pause before reopening a connection whose connect failed, so a dead server is not hammered.
const RECONNECT_BACKOFF: Duration = Duration::from_millis(20);
const BUF_GROUP: u16 = 0;
const BUF_SIZE: u32 = 16 * 1024;

/// Result of one thread.
pub(crate) struct ThreadResult {
    pub(crate) status: BTreeMap<u16, u64>,
    pub(crate) errors: ErrorCounts,
    pub(crate) bytes: u64,
    pub(crate) opened: u64,
    pub(crate) cpu_ticks: (u64, u64),
    pub(crate) elapsed: Duration,
}

/// The load every client thread works on, shared read-only (its request quota aside).
pub(crate) struct HttpLoad {
    pub(crate) addr: SocketAddr,
    pub(crate) request: Vec<u8>,
    pub(crate) head_only: bool,
    pub(crate) keep_alive: bool,
    pub(crate) timeout: Duration,
    /// Time between two requests on one connection under `--rate`.
    pub(crate) interval: Option<Duration>,
    pub(crate) start: Instant,
    pub(crate) end: Instant,
    /// The side's flag, raised when the run is stopped early.
    pub(crate) halt: Arc<AtomicBool>,
    /// Request quota (`-n`) and how much of it has been taken.
    pub(crate) quota: Option<u64>,
    pub(crate) issued: AtomicU64,
}

/// CPU ticks (user, system) of the calling thread.
fn own_cpu_ticks() -> (u64, u64) {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    std::fs::read_to_string(format!("/proc/self/task/{tid}/stat"))
        .ok()
        .and_then(|s| parse_task_stat(&s))
        .unwrap_or_default()
}

/// One in-flight request.
struct InFlight {
    /// When the request should have gone out (the schedule under `--rate`, else when it did).
    scheduled: Instant,
    deadline: Instant,
    sent: usize,
    /// Whether the send completed fully (a response may arrive before the send completion).
    send_done: bool,
}

enum ConnState {
    /// Not connected; may connect at this time.
    Closed(Instant),
    /// Connected, nothing in flight.
    Idle,
    Busy(InFlight),
}

struct Conn {
    stream: Option<TcpStream>,
    state: ConnState,
    /// Bumped each time the connection is reopened, so late completions of the old socket are
    /// recognised and dropped.
    generation: u32,
    parser: ResponseParser,
    /// Next scheduled send under `--rate`.
    next_at: Instant,
    /// Whether a multishot receive is armed on the current socket.
    armed: bool,
}

// Field order is drop order: the ring goes before the buffers it may write into.
struct HttpRing {
    ring: IoUring,
    bufs: BufRing,
}

fn user_data(idx: usize, generation: u32, send: bool) -> u64 {
    HTTP.pack(UserData { index: idx, generation, op: u64::from(send), ..UserData::default() })
}

fn arm_recv(ring: &mut IoUring, conn: &mut Conn, idx: usize) -> Result<()> {
    if let Some(s) = &conn.stream {
        let entry = opcode::RecvMulti::new(types::Fd(s.as_raw_fd()), BUF_GROUP).build();
        // SAFETY: a multishot receive into the provided-buffer ring, which drops after the
        // ring; the connection's socket is closed only after its operations are reaped.
        unsafe { push(ring, &entry.user_data(user_data(idx, conn.generation, false))) }?;
        conn.armed = true;
    }
    Ok(())
}

fn push_send(ring: &mut IoUring, conn: &Conn, idx: usize, request: &[u8], from: usize) -> Result<()> {
    if let Some(s) = &conn.stream {
        let rest = &request[from..];
        let entry = opcode::Send::new(types::Fd(s.as_raw_fd()), rest.as_ptr(), rest.len() as u32)
            .flags(libc::MSG_NOSIGNAL)
            .build();
        // SAFETY: `request` is the threads' shared request (`sh.request`), alive until every
        // queue thread has joined and never written; the socket is closed only after its
        // operations are reaped.
        unsafe { push(ring, &entry.user_data(user_data(idx, conn.generation, true))) }?;
    }
    Ok(())
}

/// Closes the socket (shutdown first, so its armed receive completes and is dropped as stale).
fn close(conn: &mut Conn, retry_at: Instant) {
    if let Some(s) = conn.stream.take() {
        let _ = s.shutdown(std::net::Shutdown::Both);
    }
    conn.generation = conn.generation.wrapping_add(1);
    conn.armed = false;
    conn.state = ConnState::Closed(retry_at);
}

struct Tally {
    /// A connection changed state outside the completion path (closed, or idle waiting for
    /// its schedule): the next loop turn scans all of them.
    dirty: bool,
    /// This interval's latencies, and its piece for the run when it closes.
    intervals: ThreadIntervals,
    status: BTreeMap<u16, u64>,
    non_2xx: u64,
    errors: ErrorCounts,
    bytes: u64,
    opened: u64,
}

impl Tally {
    /// The totals an interval's piece is the change of.
    fn counts(&self) -> Counts {
        Counts { bytes: self.bytes, errors: self.errors.total(), non_2xx: self.non_2xx }
    }

    /// Closes the thread's interval if `now` is past its end.
    #[inline]
    fn roll(&mut self, now: Instant) {
        let counts = self.counts();
        self.intervals.roll(now, counts);
    }

    fn fail(&mut self, conn: &mut Conn, kind: FailKind, message: impl FnOnce() -> String, now: Instant) {
        self.errors.add(kind, message);
        let backoff = if kind == FailKind::Connect { RECONNECT_BACKOFF } else { Duration::ZERO };
        close(conn, now + backoff);
        self.dirty = true;
    }
}

fn parse_fail_kind(e: &ParseError) -> FailKind {
    match e {
        ParseError::OversizedHeaders => FailKind::OversizedHeaders,
        ParseError::Malformed(_) => FailKind::Malformed,
        ParseError::Truncated => FailKind::Read,
    }
}

/// One thread's loop over connections `first..first+n` (of `total`): open and schedule
/// (the scan), wait, reap the completions; at the end, close every connection. Each interval
/// closes at the first loop turn past its end (the wait never sleeps across one).
pub(crate) fn run_thread(
    sh: &HttpLoad,
    (first, n, total): (u32, u32, u32),
    intervals: ThreadIntervals,
) -> Result<ThreadResult> {
    let cpu0 = own_cpu_ticks();
    let entries = (n * 4).next_power_of_two().clamp(64, 4096);
    // `uringbench http` takes no fast-path flags: a plain ring.
    let ring = build_ring(entries, RingPaths::default())?;
    let buf_count = (n * 4).next_power_of_two().clamp(64, 1024) as u16;
    let bufs = BufRing::register(&ring, BUF_GROUP, buf_count, BUF_SIZE)?;
    let mut hr = HttpRing { ring, bufs };
    let mut tally = Tally {
        dirty: true,
        intervals,
        status: BTreeMap::new(),
        non_2xx: 0,
        errors: ErrorCounts::default(),
        bytes: 0,
        opened: 0,
    };
    let mut conns = new_conns(sh, first, n, total);
    let mut cqes: Vec<(u64, i32, u32)> = Vec::with_capacity(entries as usize * 4);
    let mut last_activity = Instant::now();
    // Closed-loop runs on many connections sleep until several responses are in (or 50 µs
    // passed): one wake-up per batch instead of per response. Paced runs and runs on few
    // connections wake per completion, so latency is not stretched.
    let batch = if sh.interval.is_none() && n >= 16 {
        WakeBatch { want: (n / 8).min(8), max_delay_us: 50 }
    } else {
        WakeBatch { want: 1, max_delay_us: 0 }
    };
    // The scan over all connections (connects, schedules, timeouts) runs when one of them is
    // due or a connection changed state outside the completion path; a completed keep-alive
    // response starts the next request on the spot.
    let mut next_event = sh.start;
    let mut busy = 0;
    loop {
        let now = Instant::now();
        if now >= sh.end || sh.halt.load(Ordering::Relaxed) {
            break;
        }
        tally.roll(now);
        let quota_left = sh.quota.is_none_or(|q| sh.issued.load(Ordering::Relaxed) < q);
        let rescan = now >= next_event || tally.dirty;
        if rescan {
            tally.dirty = false;
            next_event = now + Duration::from_millis(5);
            busy = scan(sh, &mut hr, &mut conns, &mut tally, (now, quota_left), &mut next_event)?;
        }
        if !quota_left && (rescan && busy == 0 || conns.iter().all(|c| !matches!(c.state, ConnState::Busy(_)))) {
            break;
        }
        // At most 100 ms, so that a signal is noticed promptly.
        let limit = next_event
            .min(sh.end)
            .min(tally.intervals.next_edge())
            .saturating_duration_since(Instant::now())
            .clamp(Duration::from_micros(50), Duration::from_millis(100));
        wait_for_completions(&mut hr.ring, WaitMode::Sleep, last_activity, limit, batch)?;
        cqes.clear();
        cqes.extend(hr.ring.completion().map(|c| (c.user_data(), c.result(), c.flags())));
        if !cqes.is_empty() {
            last_activity = Instant::now();
            tally.roll(last_activity);
        }
        reap(sh, &mut hr, &mut conns, &cqes, &mut tally, last_activity)?;
    }
    let elapsed = sh.start.elapsed();
    for conn in &mut conns {
        close(conn, sh.end);
    }
    let cpu1 = own_cpu_ticks();
    drop(hr);
    let counts = tally.counts();
    tally.intervals.finish(elapsed, counts);
    Ok(ThreadResult {
        status: tally.status,
        errors: tally.errors,
        bytes: tally.bytes,
        opened: tally.opened,
        cpu_ticks: (cpu1.0.saturating_sub(cpu0.0), cpu1.1.saturating_sub(cpu0.1)),
        elapsed,
    })
}

/// The thread's connections, closed, their schedules spread evenly over one interval.
fn new_conns(sh: &HttpLoad, first: u32, n: u32, total: u32) -> Vec<Conn> {
    (0..n)
        .map(|i| {
            let offset = sh.interval.map_or(Duration::ZERO, |iv| iv.mul_f64(f64::from(first + i) / f64::from(total)));
            Conn {
                stream: None,
                state: ConnState::Closed(sh.start),
                generation: 0,
                parser: ResponseParser::new(sh.head_only),
                next_at: sh.start + offset,
                armed: false,
            }
        })
        .collect()
}

/// One pass over every connection at `now`: connects the closed ones that are due (while the
/// quota lasts), starts the requests that are due, fails the ones past their deadline, and
/// pulls `next_event` in to the earliest of what is pending. Returns the requests in flight.
fn scan(
    sh: &HttpLoad,
    hr: &mut HttpRing,
    conns: &mut [Conn],
    tally: &mut Tally,
    (now, quota_left): (Instant, bool),
    next_event: &mut Instant,
) -> Result<u32> {
    let mut busy = 0;
    for (idx, conn) in conns.iter_mut().enumerate() {
        if let ConnState::Closed(at) = conn.state {
            if at > now {
                *next_event = (*next_event).min(at);
                continue;
            }
            if !quota_left {
                continue;
            }
            match TcpStream::connect_timeout(&sh.addr, sh.timeout) {
                Ok(s) => {
                    let _ = s.set_nodelay(true);
                    conn.stream = Some(s);
                    conn.state = ConnState::Idle;
                    tally.opened += 1;
                    arm_recv(&mut hr.ring, conn, idx)?;
                }
                Err(e) => {
                    let now = Instant::now();
                    tally.fail(conn, FailKind::Connect, || format!("connect to {}: {e}", sh.addr), now);
                    continue;
                }
            }
        }
        match &conn.state {
            ConnState::Idle => {
                let now = Instant::now();
                if sh.interval.is_some() && conn.next_at > now {
                    *next_event = (*next_event).min(conn.next_at);
                    continue;
                }
                if start_request(sh, &mut hr.ring, conn, idx, now)? {
                    *next_event = (*next_event).min(now + sh.timeout);
                    busy += 1;
                }
            }
            ConnState::Busy(f) => {
                if now >= f.deadline {
                    let timeout = sh.timeout;
                    tally.fail(conn, FailKind::Timeout, || format!("no complete response within {timeout:?}"), now);
                } else {
                    *next_event = (*next_event).min(f.deadline);
                    busy += 1;
                }
            }
            ConnState::Closed(_) => {}
        }
    }
    Ok(busy)
}

/// Hands each completion to its connection's send or receive step; a completion of an
/// earlier connection on the same slot (an older generation) only gives its buffer back.
fn reap(
    sh: &HttpLoad,
    hr: &mut HttpRing,
    conns: &mut [Conn],
    cqes: &[(u64, i32, u32)],
    tally: &mut Tally,
    last_activity: Instant,
) -> Result<()> {
    for &(ud, res, flags) in cqes {
        let UserData { index: idx, generation, op, .. } = HTTP.unpack(ud);
        let is_send = op == 1;
        let bid = cqueue::buffer_select(flags);
        let Some(conn) = conns.get_mut(idx) else { continue };
        if generation != conn.generation {
            if let Some(bid) = bid {
                hr.bufs.recycle(bid, res.max(1) as u32);
            }
            continue;
        }
        if is_send {
            on_send(sh, hr, conn, idx, res, tally, last_activity)?;
        } else {
            on_recv(sh, hr, conn, idx, res, flags, bid, tally, last_activity)?;
        }
    }
    Ok(())
}

fn on_send(
    sh: &HttpLoad,
    hr: &mut HttpRing,
    conn: &mut Conn,
    idx: usize,
    res: i32,
    tally: &mut Tally,
    now: Instant,
) -> Result<()> {
    let ConnState::Busy(f) = &mut conn.state else { return Ok(()) };
    if res < 0 {
        let text = crate::transport::errno_text(res);
        tally.fail(conn, FailKind::Write, || format!("send failed: {text}"), now);
        return Ok(());
    }
    f.sent += res as usize;
    if f.sent < sh.request.len() {
        if res == 0 {
            tally.fail(conn, FailKind::Write, || "send made no progress".into(), now);
            return Ok(());
        }
        let from = f.sent;
        push_send(&mut hr.ring, conn, idx, &sh.request, from)?;
    } else {
        f.send_done = true;
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn on_recv(
    sh: &HttpLoad,
    hr: &mut HttpRing,
    conn: &mut Conn,
    idx: usize,
    res: i32,
    flags: u32,
    bid: Option<u16>,
    tally: &mut Tally,
    now: Instant,
) -> Result<()> {
    if !cqueue::more(flags) {
        conn.armed = false;
    }
    if res > 0 {
        tally.bytes += res as u64;
        let outcome = match (&conn.state, bid) {
            (ConnState::Busy(_), Some(bid)) => Some(conn.parser.feed(hr.bufs.buffer(bid, res as usize))),
            _ => None,
        };
        if let Some(bid) = bid {
            hr.bufs.recycle(bid, res as u32);
        }
        match outcome {
            None => {
                // Bytes while no request is in flight: the server is not speaking HTTP/1.1.
                tally.fail(conn, FailKind::Malformed, || "response data without a request".into(), now);
            }
            Some(Err(e)) => tally.fail(conn, parse_fail_kind(&e), || e.to_string(), now),
            Some(Ok(None)) => {}
            Some(Ok(Some((resp, used)))) => {
                finish(sh, &mut hr.ring, conn, idx, resp.status, resp.keep_alive, tally, now)?;
                if used < res as usize && conn.stream.is_some() {
                    tally.fail(conn, FailKind::Malformed, || "unexpected bytes after a complete response".into(), now);
                }
            }
        }
    } else if res == 0 {
        match &conn.state {
            ConnState::Busy(_) => match conn.parser.eof() {
                Ok(resp) => finish(sh, &mut hr.ring, conn, idx, resp.status, false, tally, now)?,
                Err(e) => tally.fail(conn, parse_fail_kind(&e), || e.to_string(), now),
            },
            // The server closed an idle keep-alive connection: reopen it, no error.
            _ => {
                close(conn, now);
                tally.dirty = true;
            }
        }
        return Ok(());
    } else if res == -libc::ENOBUFS || res == -libc::EINTR || res == -libc::EAGAIN {
        // Ring ran dry or interrupted: re-armed below.
    } else {
        if let Some(bid) = bid {
            hr.bufs.recycle(bid, 1);
        }
        if matches!(conn.state, ConnState::Busy(_)) {
            let text = crate::transport::errno_text(res);
            tally.fail(conn, FailKind::Read, || format!("receive failed: {text}"), now);
        } else {
            close(conn, now);
            tally.dirty = true;
        }
        return Ok(());
    }
    if conn.stream.is_some() && !conn.armed {
        arm_recv(&mut hr.ring, conn, idx)?;
    }
    Ok(())
}

/// A complete response: record it, then send the next request on the spot (closed loop,
/// keep-alive), leave the connection idle for its schedule, or reopen it.
#[allow(clippy::too_many_arguments)]
fn finish(
    sh: &HttpLoad,
    ring: &mut IoUring,
    conn: &mut Conn,
    idx: usize,
    status: u16,
    keep_alive: bool,
    tally: &mut Tally,
    now: Instant,
) -> Result<()> {
    let ConnState::Busy(f) = &conn.state else { return Ok(()) };
    let us = now.saturating_duration_since(f.scheduled).as_micros().clamp(1, u128::from(MAX_LATENCY_US)) as u64;
    tally.intervals.record(us);
    *tally.status.entry(status).or_insert(0) += 1;
    tally.non_2xx += u64::from(!(200..300).contains(&status));
    if !(keep_alive && sh.keep_alive && f.send_done) {
        close(conn, now);
        tally.dirty = true;
        return Ok(());
    }
    conn.state = ConnState::Idle;
    if sh.interval.is_some() || now >= sh.end || !start_request(sh, ring, conn, idx, now)? {
        tally.dirty = true;
    }
    Ok(())
}

/// Sends the next request on an idle connection, unless the `-n` quota is used up.
fn start_request(sh: &HttpLoad, ring: &mut IoUring, conn: &mut Conn, idx: usize, now: Instant) -> Result<bool> {
    if let Some(q) = sh.quota {
        if sh.issued.fetch_add(1, Ordering::Relaxed) >= q {
            return Ok(false);
        }
    }
    let scheduled = if sh.interval.is_some() { conn.next_at } else { now };
    if let Some(iv) = sh.interval {
        conn.next_at += iv;
    }
    conn.parser.reset(sh.head_only);
    push_send(ring, conn, idx, &sh.request, 0)?;
    conn.state = ConnState::Busy(InFlight { scheduled, deadline: now + sh.timeout, sent: 0, send_done: false });
    Ok(true)
}
