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
//! The figures and the document are [`model`]'s; the run interval by interval, [`intervals`]'s;
//! one client thread's connections and loop, [`crate::transport::http`]'s. The threads run
//! through the one side every test runs ([`crate::runtime::side`]).

mod intervals;
mod model;

pub use model::{ClientCpu, HttpDocument, HttpInterval, HttpReport, HttpTest, LatencyUs};

use crate::base::error::{Error, Result};
use crate::base::spec::TestSpec;
use crate::base::stop::StopToken;
use crate::metrics::figures::Role;
use crate::metrics::measure::clock_ticks;
use crate::runtime::placement::{resolve_cpus, Placement, ThreadPlan};
use crate::runtime::side::{SideEnd, SideProbes, TestSide};
use crate::transport::http::client::{run_thread, HttpLoad, ThreadResult};
use crate::transport::http::pieces::{IntervalClock, ThreadIntervals};
use crate::transport::http::ErrorCounts;
use crate::uring::ring::WaitMode;
use crate::wire::http1::HttpUrl;
use hdrhistogram::Histogram;
use intervals::Collector;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Longest a `-n` run may take when no `-d` bounds it.
pub const DEFAULT_REQUEST_RUN_LIMIT: Duration = Duration::from_secs(600);
/// The interval of the document's `intervals[]` when `-i` does not say.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(1);
/// Longest the run's thread waits, at an interval's end, for a client thread's piece of it
/// (one busy in a blocking connect); a late piece still counts, in a later line.
const PIECE_WAIT: Duration = Duration::from_millis(300);

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
    // The one side every test runs: the client threads (thread t serves "queue" t) sampled over
    // a window of the run's length from its start, watched by the run's stop token. The
    // threads end at their own deadline or quota, or when a stop raises the side's flag.
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let spec = TestSpec {
        queues: threads,
        time_ms: ms(opts.duration),
        warmup_ms: 0,
        cooldown_ms: 0,
        interval_ms: ms(opts.interval),
        ..TestSpec::default()
    };
    let placement =
        Placement { threads: plans, wait: WaitMode::Sleep, fast: Default::default(), summary: String::new() };
    let side = TestSide::new(Role::Sender, &spec, &placement, &opts.stop);
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
        halt: side.halt(),
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
    let qt = side.spawn(
        (0..threads).zip(inputs).collect(),
        |(_, mut mine)| mine.pop().expect("one input per client thread"),
        move |(first, n, ivs), _| run_thread(&worker_shared, (first, n, total), ivs),
    )?;
    // The sampler reads the client threads' CPU (and the host's) at each interval's end; the
    // threads' pieces of the interval join it there.
    let mut collector = Collector::new(rx, clock, threads as usize);
    let mut sink = |iv| collector.sampled(iv, PIECE_WAIT, show);
    let run = side.run_showing(qt, start, SideProbes::default(), SideEnd::AtDeadline, &mut sink)?;
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
