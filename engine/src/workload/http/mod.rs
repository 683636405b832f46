//! The `http` workload: an HTTP/1.1 load generator (like wrk and wrk2) on io_uring.
//!
//! It exists so a web server can be loaded by the same pinned, one-ring-per-thread engine that
//! moves bulk traffic, and measured the same way: latency per request into an HdrHistogram,
//! and the client's own CPU per request, so a saturated client is visible instead
//! of being mistaken for a slow server.
//!
//! Each thread owns one io_uring, one provided-buffer ring, and its share of the connections.
//! A connection is opened with a blocking connect (bounded by `--timeout`), then carries one
//! request at a time: a `SEND` of the request, a multishot `RECV` feeding
//! [`crate::wire::http1::ResponseParser`]. Any transport or protocol error is counted by kind and the
//! connection is reopened. With `--rate`, requests follow a fixed schedule per connection and
//! latency is measured from the *scheduled* send time, as wrk2 does, so a stalled server is
//! not hidden by the client waiting for it (coordinated omission).
//!
//! The figures and the document are [`model`]'s; the run interval by interval, [`intervals`]'s.

mod intervals;
mod model;

pub use model::{ClientCpu, ErrorCounts, FailKind, HttpDocument, HttpInterval, HttpReport, HttpTest, LatencyUs};

use crate::base::error::{Error, Result};
use crate::base::stop::StopToken;
use crate::metrics::measure::{clock_ticks, parse_task_stat, QueueCounters, SampleSources};
use crate::runtime::placement::{resolve_cpus, ThreadPlan};
use crate::runtime::side::{run_side, Ending};
use crate::runtime::threads::QueueThreads;
use crate::uring::ring::WaitMode;
use crate::uring::ring::{build_ring, push, wait_for_completions, BufRing, RingPaths, WakeBatch};
use crate::uring::user_data::{UserData, HTTP};
use crate::wire::http1::{HttpUrl, ParseError, ResponseParser};
use hdrhistogram::Histogram;
use intervals::{Collector, Counts, IntervalClock, ThreadIntervals, MAX_LATENCY_US};
use io_uring::{cqueue, opcode, types, IoUring};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Pause before reopening a connection whose connect failed, so a dead server is not hammered.
const RECONNECT_BACKOFF: Duration = Duration::from_millis(20);
/// Longest a `-n` run may take when no `-d` bounds it.
pub const DEFAULT_REQUEST_RUN_LIMIT: Duration = Duration::from_secs(600);
/// The interval of the document's `intervals[]` when `-i` does not say.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(1);
/// Longest the run's thread waits, at an interval's end, for a client thread's piece of it
/// (one busy in a blocking connect); a late piece still counts, in a later line.
const PIECE_WAIT: Duration = Duration::from_millis(300);
const BUF_GROUP: u16 = 0;
const BUF_SIZE: u32 = 16 * 1024;

/// Resolves the host (a name, or an IPv4/IPv6 literal). A name with several addresses
/// (`localhost`: ::1 and 127.0.0.1) gets the first one that accepts a connection within
/// `timeout`, as wrk does; if none does, the first, and the run counts connect errors.
pub(crate) fn resolve(url: &HttpUrl, timeout: Duration) -> Result<SocketAddr> {
    let addrs: Vec<SocketAddr> = (url.host.as_str(), url.port)
        .to_socket_addrs()
        .map_err(|e| Error::peer(format!("cannot resolve '{}': {e}", url.host)))?
        .collect();
    let first = *addrs.first().ok_or_else(|| Error::peer(format!("'{}' has no address", url.host)))?;
    if addrs.len() == 1 {
        return Ok(first);
    }
    Ok(addrs.into_iter().find(|a| TcpStream::connect_timeout(a, timeout).is_ok()).unwrap_or(first))
}

/// What the user asked for.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    pub url: String,
    pub connections: u32,
    /// Run length; with `requests`, an upper bound.
    pub duration: Duration,
    /// Stop after this many requests (responses or failures) instead of at `duration`.
    pub requests: Option<u64>,
    pub method: String,
    /// `Name: value` lines added to every request.
    pub headers: Vec<String>,
    pub body: Option<String>,
    pub keep_alive: bool,
    /// Total requests per second over all connections; `None` = as fast as responses come.
    pub rate: Option<f64>,
    pub timeout: Duration,
    pub cpus: Option<Vec<usize>>,
    pub threads: Option<u32>,
    /// Length of each of the document's intervals (and live line).
    pub interval: Duration,
    /// Ends the run early; the report says it was interrupted and why.
    pub stop: StopToken,
}

/// Result of one thread.
struct ThreadResult {
    status: BTreeMap<u16, u64>,
    errors: ErrorCounts,
    bytes: u64,
    opened: u64,
    cpu_ticks: (u64, u64),
    elapsed: Duration,
}

/// The load every client thread works on, shared read-only (its request quota aside).
struct HttpLoad {
    addr: SocketAddr,
    request: Vec<u8>,
    head_only: bool,
    keep_alive: bool,
    timeout: Duration,
    /// Time between two requests on one connection under `--rate`.
    interval: Option<Duration>,
    start: Instant,
    end: Instant,
    stop: StopToken,
    /// Request quota (`-n`) and how much of it has been taken.
    quota: Option<u64>,
    issued: AtomicU64,
}

/// Builds the request bytes; refuses header/method text that would break the framing.
pub(crate) fn build_request(url: &HttpUrl, opts: &HttpOptions) -> Result<Vec<u8>> {
    let method = opts.method.to_ascii_uppercase();
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
        return Err(Error::usage(format!("invalid --method '{}'", opts.method)));
    }
    let mut req = format!("{method} {} HTTP/1.1\r\nHost: {}\r\n", url.path, url.host_header);
    let mut has_ua = false;
    for h in &opts.headers {
        let (name, value) =
            h.split_once(':').ok_or_else(|| Error::usage(format!("invalid --header '{h}': expected 'Name: value'")))?;
        let name = name.trim();
        if name.is_empty()
            || name.bytes().any(|b| !(b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)))
            || value.contains(['\r', '\n'])
        {
            return Err(Error::usage(format!("invalid --header '{h}': expected 'Name: value'")));
        }
        for fixed in ["host", "content-length", "transfer-encoding", "connection"] {
            if name.eq_ignore_ascii_case(fixed) {
                return Err(Error::usage(format!("--header '{h}': {name} is set by uringbench itself")));
            }
        }
        has_ua |= name.eq_ignore_ascii_case("user-agent");
        let _ = write!(req, "{name}: {}\r\n", value.trim());
    }
    if !has_ua {
        req += "User-Agent: uringbench\r\n";
    }
    if !opts.keep_alive {
        req += "Connection: close\r\n";
    }
    let body = opts.body.as_deref().unwrap_or("");
    if opts.body.is_some() || matches!(method.as_str(), "POST" | "PUT" | "PATCH") {
        let _ = write!(req, "Content-Length: {}\r\n", body.len());
    }
    req += "\r\n";
    req += body;
    Ok(req.into_bytes())
}

/// Checks a run before it starts, as [`run_http_live`] does first: the options, the URL, its
/// host's address, and one connection to it (closed at once), so that a closed port is
/// refused at once instead of failing every request of the run. A caller that says
/// "running..." calls it before.
pub fn check_http(opts: &HttpOptions) -> Result<()> {
    prepare(opts).map(|_| ())
}

/// The checked options: the request rate, the request's bytes and the server's address.
fn prepare(opts: &HttpOptions) -> Result<(Option<f64>, Vec<u8>, SocketAddr)> {
    let url = HttpUrl::parse(&opts.url)?;
    if opts.connections == 0 {
        return Err(Error::usage("-c/--connections must be at least 1"));
    }
    if opts.requests == Some(0) || opts.duration.is_zero() {
        return Err(Error::usage("-d must be longer than 0 and -n at least 1"));
    }
    if opts.timeout.is_zero() {
        return Err(Error::usage("--timeout must be longer than 0"));
    }
    let min_interval = Duration::from_millis(crate::base::spec::MIN_INTERVAL_MS);
    if opts.interval < min_interval {
        return Err(Error::usage(format!("-i/--interval must be at least {} ms", min_interval.as_millis())));
    }
    let rate = match opts.rate {
        Some(r) if !(r.is_finite() && r > 0.0) => return Err(Error::usage("--rate must be a positive number")),
        r => r,
    };
    let request = build_request(&url, opts)?;
    let addr = resolve(&url, opts.timeout)?;
    match TcpStream::connect_timeout(&addr, opts.timeout) {
        Ok(_) => Ok((rate, request, addr)),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            Err(Error::peer(format!("nothing listens on {addr} (connection refused): check the URL's host and port")))
        }
        Err(e) if matches!(e.kind(), std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock) => {
            Err(Error::peer(format!("{addr} did not answer within {:.1} s (--timeout)", opts.timeout.as_secs_f64())))
        }
        Err(e) => Err(Error::peer(format!("cannot connect to {addr}: {e}"))),
    }
}

/// Runs the load and returns its report. Errors only for what stops the run from starting.
pub fn run_http(opts: &HttpOptions) -> Result<HttpReport> {
    run_http_live(opts, &mut |_| {})
}

/// [`run_http`], with `show` handed each interval, in order, as soon as every client thread
/// has handed in its piece of it.
pub fn run_http_live(opts: &HttpOptions, show: &mut dyn FnMut(&HttpInterval)) -> Result<HttpReport> {
    let (rate, request, addr) = prepare(opts)?;
    let cpus = resolve_cpus(opts.cpus.as_deref())?;
    let threads = opts.threads.unwrap_or(cpus.len() as u32).clamp(1, opts.connections);
    if opts.threads == Some(0) {
        return Err(Error::usage("--threads must be at least 1"));
    }
    let plans: Vec<ThreadPlan> =
        (0..threads).map(|t| ThreadPlan { cpu: cpus[t as usize % cpus.len()], queues: vec![t] }).collect();
    let start = Instant::now();
    let shared = Arc::new(HttpLoad {
        addr,
        request,
        head_only: opts.method.eq_ignore_ascii_case("HEAD"),
        keep_alive: opts.keep_alive,
        timeout: opts.timeout,
        interval: rate.map(|r| Duration::from_secs_f64(f64::from(opts.connections) / r)),
        start,
        end: start + opts.duration,
        stop: opts.stop.clone(),
        quota: opts.requests,
        issued: AtomicU64::new(0),
    });
    let clock = IntervalClock::new(start, opts.interval, opts.duration);
    let (tx, rx) = std::sync::mpsc::channel();
    let inputs: Vec<(u32, u32, ThreadIntervals)> = (0..threads)
        .map(|t| {
            let n = opts.connections / threads + u32::from(t < opts.connections % threads);
            let first = (0..t).map(|u| opts.connections / threads + u32::from(u < opts.connections % threads)).sum();
            (first, n, ThreadIntervals::new(clock, t as usize, tx.clone()))
        })
        .collect();
    drop(tx);
    let worker_shared = Arc::clone(&shared);
    let total = opts.connections;
    let qt =
        QueueThreads::spawn(&plans, inputs, move |(first, n, ivs)| run_thread(&worker_shared, (first, n, total), ivs))?;
    // The sampler the other workloads use reads the client threads' CPU (and the host's) at
    // each interval's end; the threads' pieces of the interval join it there.
    let mut collector = Collector::new(rx, clock, threads as usize);
    let counters = QueueCounters::new(0);
    let src = SampleSources { counters: &counters, tids: &[], sockets: &[], iface: None, udp: &[] };
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let offsets = crate::base::spec::window_offsets(0, ms(opts.duration), ms(opts.interval));
    let stopped = || shared.stop.is_stopped();
    let mut sink = |iv| collector.sampled(iv, PIECE_WAIT, show);
    let run = run_side(qt, src, (start, offsets), &stopped, &mut sink, Ending::Send { halt: &mut || {} })?;
    let (intervals, hist) = collector.finish(show);
    Ok(merge(opts, threads, rate, run.results, intervals, &hist))
}

fn merge(
    opts: &HttpOptions,
    threads: u32,
    rate: Option<f64>,
    results: Vec<ThreadResult>,
    intervals: Vec<HttpInterval>,
    hist: &Histogram<u64>,
) -> HttpReport {
    let mut status = BTreeMap::new();
    let mut errors = ErrorCounts::default();
    let (mut bytes, mut opened, mut user, mut system) = (0, 0, 0, 0);
    let mut elapsed = Duration::ZERO;
    for r in &results {
        for (k, v) in &r.status {
            *status.entry(*k).or_insert(0) += v;
        }
        errors.merge(&r.errors);
        bytes += r.bytes;
        opened += r.opened;
        user += r.cpu_ticks.0;
        system += r.cpu_ticks.1;
        elapsed = elapsed.max(r.elapsed);
    }
    let requests: u64 = status.values().sum();
    let secs = elapsed.as_secs_f64().max(1e-9);
    let ticks = clock_ticks();
    let cpu = ClientCpu {
        user_seconds: user as f64 / ticks,
        system_seconds: system as f64 / ticks,
        us_per_request: if requests > 0 { (user + system) as f64 / ticks * 1e6 / requests as f64 } else { 0.0 },
    };
    let latency_us = LatencyUs::of(hist);
    let non_2xx = status.iter().filter(|(k, _)| !(200..300).contains(*k)).map(|(_, v)| v).sum();
    HttpReport {
        url: opts.url.clone(),
        method: opts.method.to_ascii_uppercase(),
        connections: opts.connections,
        threads,
        keep_alive: opts.keep_alive,
        rate,
        window_seconds: secs,
        requests,
        transactions_per_second: requests as f64 / secs,
        bytes_read: bytes,
        bytes_per_second: bytes as f64 / secs,
        latency_us,
        status,
        non_2xx,
        complete: errors.total() == 0 && requests > 0 && !opts.stop.is_stopped(),
        interrupted: opts
            .stop
            .cause()
            .map(|cause| format!("interrupted at {secs:.1} s of {:.1} s ({cause})", opts.duration.as_secs_f64())),
        errors,
        connections_opened: opened,
        cpu,
        intervals,
    }
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
fn run_thread(sh: &HttpLoad, (first, n, total): (u32, u32, u32), intervals: ThreadIntervals) -> Result<ThreadResult> {
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
        if now >= sh.end || sh.stop.is_stopped() {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests() {
        let url = HttpUrl::parse("http://h:1/p").unwrap();
        let mut opts = HttpOptions {
            url: "http://h:1/p".into(),
            connections: 1,
            duration: Duration::from_secs(1),
            requests: None,
            method: "post".into(),
            headers: vec!["X-A: b".into()],
            body: Some("hi".into()),
            keep_alive: false,
            rate: None,
            timeout: Duration::from_secs(1),
            cpus: None,
            threads: None,
            interval: DEFAULT_INTERVAL,
            stop: StopToken::new(),
        };
        let req = String::from_utf8(build_request(&url, &opts).unwrap()).unwrap();
        assert_eq!(
            req,
            "POST /p HTTP/1.1\r\nHost: h:1\r\nX-A: b\r\nUser-Agent: uringbench\r\nConnection: close\r\nContent-Length: 2\r\n\r\nhi"
        );
        for bad in ["nocolon", "X: a\r\nInjected: 1", "Host: other", ": v"] {
            opts.headers = vec![bad.into()];
            assert!(build_request(&url, &opts).is_err(), "{bad:?}");
        }
    }
}
