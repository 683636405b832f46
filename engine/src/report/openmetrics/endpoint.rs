//! The HTTP listener of `recv --metrics`: plain HTTP/1.x, `GET /metrics` only, one response a
//! connection. Its connections wait on the receivers' accept gate ([`crate::session::gate`]):
//! its deadline from the accept, its caps per source address and in all, its pause when
//! descriptors run out. Of a request only the request line is parsed; the header lines are
//! read (so that closing does not reset the connection before the response is read) up to the
//! blank line that ends them, never interpreted, and a request longer than
//! [`MAX_REQUEST`] is refused. A response is written by one of at most [`WRITERS`]
//! threads within [`WRITE_DEADLINE`], so a scraper that reads slowly holds a thread for that
//! long at most and never the gate.

use super::text::CONTENT_TYPE;
use super::MetricsExporter;
use crate::base::error::{Error, Result};
use crate::base::stop::StopToken;
use crate::session::gate::{self, Classifier, GateEvent, GateLimits, Pending, Verdict};
use crate::session::logq::RateLimit;
use crate::sys::epoll::Epoll;
use std::io::{self, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A request (its request line and header lines) longer than this is refused.
pub const MAX_REQUEST: usize = 8 * 1024;
/// The request line alone may be this long.
const MAX_REQUEST_LINE: usize = 1024;
/// Responses being written at once; a scrape beyond them is answered 503.
const WRITERS: usize = 4;
/// A response not read by then is abandoned.
const WRITE_DEADLINE: Duration = Duration::from_secs(5);
/// Connections waiting for their request, in all and from one address.
const PENDING_TOTAL: usize = 64;
const PENDING_PER_SOURCE: usize = 8;

/// What the endpoint tells its operator (a few lines per source address per 10 s).
pub type MetricsLog = Arc<dyn Fn(String) + Send + Sync>;

/// Binds the metrics listener on `addr`, or says why it cannot.
pub fn bind(addr: SocketAddr) -> Result<TcpListener> {
    TcpListener::bind(addr).map_err(|e| match e.kind() {
        io::ErrorKind::AddrInUse => Error::usage(format!(
            "--metrics {addr}: the port is already in use: stop the other listener or pick another"
        )),
        io::ErrorKind::AddrNotAvailable => {
            Error::usage(format!("--metrics {addr}: no local interface has that address"))
        }
        _ => Error::io(format!("binding --metrics {addr}"), e),
    })
}

/// Serves `exporter` on `listener` from a thread of its own until `stop` is stopped.
pub fn start(
    listener: TcpListener,
    exporter: Arc<MetricsExporter>,
    stop: StopToken,
    log: MetricsLog,
) -> Result<std::thread::JoinHandle<Result<()>>> {
    let limits = GateLimits {
        total: PENDING_TOTAL,
        per_source: PENDING_PER_SOURCE,
        what: "request",
        doing: "sending their request",
        per_source_option: "",
    };
    let mut scrapes =
        Scrapes { exporter, stop, log, refusals: RateLimit::default(), writers: Arc::new(AtomicUsize::new(0)) };
    std::thread::Builder::new()
        .name("ub-metrics".into())
        .spawn(move || gate::serve(listener, limits, &mut scrapes))
        .map_err(|e| Error::io("starting the metrics endpoint's thread", e))
}

struct Scrapes {
    exporter: Arc<MetricsExporter>,
    stop: StopToken,
    log: MetricsLog,
    refusals: RateLimit,
    /// Responses being written.
    writers: Arc<AtomicUsize>,
}

/// Where a request is: the length of its request line once its end was seen.
#[derive(Debug, Default)]
struct Request {
    line_end: Option<usize>,
}

/// What a request line asks for.
#[derive(Debug, PartialEq, Eq)]
enum Asked {
    Metrics,
    Status(&'static str),
}

/// The answer to a complete request line (`GET /metrics HTTP/1.1`; a query string is ignored).
fn route(line: &[u8]) -> Asked {
    let Ok(line) = std::str::from_utf8(line) else { return Asked::Status("400 Bad Request") };
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) = (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Asked::Status("400 Bad Request");
    };
    if !version.starts_with("HTTP/1.") {
        return Asked::Status("400 Bad Request");
    }
    if method != "GET" {
        return Asked::Status("405 Method Not Allowed");
    }
    match target.split('?').next() {
        Some("/metrics") => Asked::Metrics,
        _ => Asked::Status("404 Not Found"),
    }
}

/// Whether `buf` ends a line (LF, or CRLF).
fn ends_line(buf: &[u8]) -> bool {
    buf.last() == Some(&b'\n')
}

impl Scrapes {
    fn drop_with(&self, conn: Pending<Request>, status: &'static str, reason: String) -> Verdict<Request> {
        // A short answer into an empty send buffer: never blocks.
        let _ = (&conn.stream).write_all(response_head(status, 0, "text/plain").as_bytes());
        self.drop_conn(conn.peer, reason);
        Verdict::Done
    }

    fn answer(&self, conn: Pending<Request>, asked: Asked) -> Verdict<Request> {
        let status = match asked {
            Asked::Status(status) => return self.drop_with(conn, status, format!("answered {status}")),
            Asked::Metrics => "200 OK",
        };
        if self.writers.fetch_add(1, Ordering::AcqRel) >= WRITERS {
            self.writers.fetch_sub(1, Ordering::AcqRel);
            return self.drop_with(
                conn,
                "503 Service Unavailable",
                format!("{WRITERS} responses already being written"),
            );
        }
        self.exporter.scraped();
        let body = self.exporter.render();
        let mut out = response_head(status, body.len(), CONTENT_TYPE).into_bytes();
        out.extend_from_slice(body.as_bytes());
        let writers = Arc::clone(&self.writers);
        let stream = conn.stream;
        let spawned = std::thread::Builder::new().name("ub-metrics-out".into()).spawn(move || {
            write_within(&stream, &out, Instant::now() + WRITE_DEADLINE);
            let _ = stream.shutdown(Shutdown::Write);
            writers.fetch_sub(1, Ordering::AcqRel);
        });
        match spawned {
            Ok(_) => Verdict::Done,
            Err(e) => {
                self.writers.fetch_sub(1, Ordering::AcqRel);
                Verdict::Pause("starting a response's thread", e)
            }
        }
    }
}

fn response_head(status: &str, length: usize, content_type: &str) -> String {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {length}\r\nConnection: close\r\n\r\n"
    )
}

/// Writes `out` unless `deadline` passes first (then the rest is abandoned).
fn write_within(mut stream: &TcpStream, mut out: &[u8], deadline: Instant) {
    if stream.set_nonblocking(false).is_err() {
        return;
    }
    while !out.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_write_timeout(Some(left)).is_err() {
            return;
        }
        match stream.write(out) {
            Ok(0) => return,
            Ok(n) => out = &out[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

impl Classifier for Scrapes {
    type State = Request;
    type Outcome = ();

    fn open(&self, _ip: IpAddr) -> std::result::Result<(Request, usize), String> {
        Ok((Request::default(), 1))
    }

    /// Byte by byte (a request is a few hundred bytes): the request line, then the header
    /// lines up to the blank line, which are not interpreted.
    fn classify(&mut self, mut conn: Pending<Request>) -> Verdict<Request> {
        let len = conn.buf.len();
        if conn.state.line_end.is_none() {
            if ends_line(&conn.buf) {
                conn.state.line_end = Some(len);
            } else if len >= MAX_REQUEST_LINE {
                return self.drop_with(
                    conn,
                    "414 URI Too Long",
                    format!("request line longer than {MAX_REQUEST_LINE} bytes"),
                );
            }
        } else if conn.buf.ends_with(b"\n\r\n") || conn.buf.ends_with(b"\n\n") {
            let line_end = conn.state.line_end.unwrap_or(len);
            let line = conn.buf[..line_end].strip_suffix(b"\n").unwrap_or(&conn.buf[..line_end]);
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let asked = route(line);
            return self.answer(conn, asked);
        }
        if len >= MAX_REQUEST {
            return self.drop_with(
                conn,
                "431 Request Header Fields Too Large",
                format!("request longer than {MAX_REQUEST} bytes"),
            );
        }
        conn.want = len + 1;
        Verdict::More(conn)
    }

    fn refusals(&self) -> &RateLimit {
        &self.refusals
    }

    fn tell(&self, event: GateEvent) {
        let line = match event {
            GateEvent::Dropped { peer, reason } => format!("metrics: connection from {peer}: {reason}"),
            GateEvent::Paused { what, error, open } => {
                format!("metrics: accepting paused: {what} failed: {error} ({open} connections open)")
            }
            GateEvent::Resumed { paused } => {
                format!("metrics: accepting again ({:.1} s of trouble)", paused.as_secs_f64())
            }
            GateEvent::Suppressed { source, count, seconds } => {
                format!("metrics: ... and {count} more from {source} in the last {seconds} s")
            }
        };
        (self.log)(line);
    }

    /// Every drop is counted; a few per source address are logged.
    fn drop_conn(&self, peer: SocketAddr, reason: String) {
        if !reason.starts_with("answered") {
            self.exporter.request_dropped();
        }
        if self.refusals.allow(peer.ip().to_canonical(), Instant::now()) {
            self.tell(GateEvent::Dropped { peer, reason });
        }
    }

    fn tick(&mut self, _epoll: &Epoll, _now: Instant) -> Option<()> {
        self.stop.is_stopped().then_some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_get_of_metrics_is_served() {
        assert_eq!(route(b"GET /metrics HTTP/1.1"), Asked::Metrics);
        assert_eq!(route(b"GET /metrics?x=1 HTTP/1.0"), Asked::Metrics);
        assert_eq!(route(b"GET / HTTP/1.1"), Asked::Status("404 Not Found"));
        assert_eq!(route(b"POST /metrics HTTP/1.1"), Asked::Status("405 Method Not Allowed"));
        assert_eq!(route(b"GET /metrics"), Asked::Status("400 Bad Request"));
        assert_eq!(route(b"GET /metrics SPDY/3"), Asked::Status("400 Bad Request"));
        assert_eq!(route(b"GET  /metrics HTTP/1.1"), Asked::Status("400 Bad Request"));
        assert_eq!(route(&[0xff, b' ', b'/', b' ', b'H']), Asked::Status("400 Bad Request"));
    }
}
