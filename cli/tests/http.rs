//! `uringbench http` against a real nginx (started here on 127.0.0.1 with its own config and
//! prefix, killed at the end even on panic) and against a tiny server of our own that sends
//! malformed responses. Every run is bounded in time; all traffic stays on loopback.

mod common;

use common::{bin, f64_at, json, run_bounded, u64_at};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(30);

fn nginx_binary() -> Option<PathBuf> {
    ["/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/bin/nginx"].iter().map(PathBuf::from).find(|p| p.exists())
}

/// An nginx of our own: own port, own prefix, no daemon, no master; killed when dropped.
struct Nginx {
    child: Option<Child>,
    dir: PathBuf,
    port: u16,
}

impl Nginx {
    fn start(port: u16) -> Self {
        let nginx = nginx_binary().expect("nginx is installed (apt-get install nginx-light)");
        let dir = std::env::temp_dir().join(format!("uringbench-nginx-{port}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("www/gz")).unwrap();
        std::fs::create_dir_all(dir.join("tmp")).unwrap();
        std::fs::write(dir.join("www/index.html"), "hello from nginx\n").unwrap();
        std::fs::write(dir.join("www/gz/big.txt"), "compressible line of text\n".repeat(400)).unwrap();
        let d = dir.display();
        let conf = format!(
            "daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n\
events {{ worker_connections 256; }}\n\
http {{\n  access_log {d}/access.log;\n  client_body_temp_path {d}/tmp;\n  proxy_temp_path {d}/tmp;\n  default_type text/plain;\n\
  keepalive_requests 100000;\n\
  server {{\n    listen 127.0.0.1:{port};\n    root {d}/www;\n\
    location /gz/ {{ gzip on; gzip_min_length 1; gzip_types text/plain; chunked_transfer_encoding on; }}\n  }}\n}}\n"
        );
        std::fs::write(dir.join("nginx.conf"), conf).unwrap();
        let child = Command::new(nginx)
            .arg("-p")
            .arg(&dir)
            .arg("-c")
            .arg(dir.join("nginx.conf"))
            .arg("-e")
            .arg(dir.join("error.log"))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn nginx");
        let mut this = Self { child: Some(child), dir, port };
        this.wait_listening();
        this
    }

    fn wait_listening(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                let log = std::fs::read_to_string(self.dir.join("error.log")).unwrap_or_default();
                panic!("nginx exited at start ({status}): {log}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("nginx does not listen on port {} after 5 s", self.port);
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// Requests nginx itself logged so far (its access log: one line per request served).
    fn served(&self) -> u64 {
        std::fs::read_to_string(self.dir.join("access.log")).map_or(0, |t| t.lines().count() as u64)
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn http(args: &[&str]) -> Output {
    let mut c = Command::new(bin());
    c.arg("http").args(args);
    let (out, _) = run_bounded(c, LIMIT);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "uringbench panicked: {stderr}");
    out
}

/// `uringbench http ARGS` run by bash, which prints its child's CPU time (`times`: the
/// kernel's rusage of the whole process, all threads) on the last line of stderr. Returns the
/// output without that line, and the child's user + system seconds.
fn http_with_cpu(args: &[&str]) -> (Output, f64) {
    let mut c = Command::new("bash");
    c.args(["-c", "\"$@\"; rc=$?; times >&2; exit $rc", "bash", bin(), "http"]).args(args);
    let (mut out, _) = run_bounded(c, LIMIT);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let (rest, children) = stderr.trim_end().rsplit_once('\n').expect("bash times: two lines");
    let seconds = |t: &str| {
        let (m, s) = t.trim_end_matches('s').split_once('m').unwrap_or_else(|| panic!("bash times: {t}"));
        m.parse::<f64>().unwrap() * 60.0 + s.parse::<f64>().unwrap()
    };
    let cpu = children.split_whitespace().map(seconds).sum();
    // Drop the shell's own line too: what remains is uringbench's stderr.
    out.stderr = rest.rsplit_once('\n').map_or("", |(r, _)| r).as_bytes().to_vec();
    assert!(!rest.contains("panicked"), "uringbench panicked: {rest}");
    (out, cpu)
}

fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

/// One raw request, for checking what the server really sends.
fn raw_get(port: u16, path: &str, extra: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{extra}\r\n").unwrap();
    let mut v = Vec::new();
    let _ = s.read_to_end(&mut v);
    String::from_utf8_lossy(&v).into_owned()
}

#[test]
fn nginx_keepalive_and_not() {
    let _g = common::serial();
    let nginx = Nginx::start(18081);
    let served_before = nginx.served();
    let (out, process_cpu) = http_with_cpu(&[&nginx.url("/"), "-c", "4", "-d", "1s", "-t", "2", "--format", "json"]);
    std::thread::sleep(Duration::from_millis(200)); // nginx logs right after each response it sends
    let served = nginx.served() - served_before;
    let v = json(&out);
    assert_eq!(code(&out), 0, "keep-alive run is complete: {v}");
    let requests = u64_at(&v, "/requests");
    // A sanity floor, orders of magnitude below the tens of thousands nginx serves here in 1 s.
    assert!(requests > 100, "requests {requests}");
    // The server's own count: every request uringbench counted, plus at most the one in flight on
    // each of the 4 connections when the run ended.
    assert!(
        (requests..=requests + 4).contains(&served),
        "nginx logged {served} requests, uringbench counted {requests}"
    );
    assert_eq!(u64_at(&v, "/status/200"), requests);
    assert_eq!(u64_at(&v, "/errors_total"), 0);
    assert!(u64_at(&v, "/connections_opened") <= 8, "keep-alive reuses connections: {v}");
    for k in ["p50", "p90", "p99", "p999", "max"] {
        assert!(u64_at(&v, &format!("/latency_us/{k}")) > 0, "latency_us.{k}");
    }
    assert!(common::f64_at(&v, "/transactions_per_second") > 0.0);
    // The client's CPU per request, turned back into seconds, is its load threads' share of what
    // the kernel charged the whole process (bash's `times`, 10 ms ticks on both sides): at most
    // all of it, and most of it (the main thread only starts and joins them).
    let threads_cpu = common::f64_at(&v, "/cpu/us_per_request") * requests as f64 / 1e6;
    assert!(
        threads_cpu > 0.0 && threads_cpu <= process_cpu + 0.02 && threads_cpu >= process_cpu * 0.5 - 0.02,
        "report: {threads_cpu} s of CPU in the load threads, kernel: {process_cpu} s for the process"
    );

    let out = http(&[&nginx.url("/"), "-c", "2", "-d", "1s", "--no-keepalive", "--format", "json"]);
    let v = json(&out);
    assert_eq!(code(&out), 0, "{v}");
    let requests = u64_at(&v, "/requests");
    // Sanity floor, orders of magnitude below this machine's new connections per second.
    assert!(requests > 20, "requests {requests}");
    assert!(u64_at(&v, "/connections_opened") >= requests, "one connection per request: {v}");

    let out = http(&[&nginx.url("/"), "-c", "2", "-n", "50", "--method", "HEAD", "--format", "csv"]);
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let row: Vec<&str> = text.lines().nth(1).expect("csv row").split(',').collect();
    assert_eq!(row[4], "50", "-n 50 makes exactly 50 requests: {text}");
}

#[test]
fn nginx_chunked_404_and_rate() {
    let _g = common::serial();
    let nginx = Nginx::start(18082);
    let raw = raw_get(nginx.port, "/gz/big.txt", "Accept-Encoding: gzip\r\n");
    assert!(raw.to_ascii_lowercase().contains("transfer-encoding: chunked"), "nginx answers chunked: {raw:.300}");
    let page = std::env::temp_dir().join(format!("ub-http-{}.html", std::process::id()));
    let page_arg = page.display().to_string();
    let out = http(&[
        &nginx.url("/gz/big.txt"),
        "-c",
        "2",
        "-d",
        "1s",
        "-H",
        "Accept-Encoding: gzip",
        "-J",
        "--html",
        &page_arg,
    ]);
    let v = json(&out);
    assert_eq!(code(&out), 0, "{v}");
    let shown = common::page_headline(&page, "data-transactions-per-second");
    let tps = f64_at(&v, "/transactions_per_second");
    assert!(common::same_figure(shown, tps), "http --html shows {shown}, the JSON {tps}");
    let _ = std::fs::remove_file(&page);
    // A sanity floor orders of magnitude below what nginx serves here in 1 s.
    assert!(u64_at(&v, "/status/200") > 50 && u64_at(&v, "/errors_total") == 0, "{v}");

    let out = http(&[&nginx.url("/missing"), "-c", "2", "-d", "500ms", "-J"]);
    let v = json(&out);
    assert!(u64_at(&v, "/status/404") > 0 && u64_at(&v, "/non_2xx") == u64_at(&v, "/requests"), "{v}");
    assert_eq!(u64_at(&v, "/errors_total"), 0, "a 404 is a status, not a transport error: {v}");

    let out = http(&[&nginx.url("/"), "-c", "4", "-d", "2s", "--rate", "200", "-J"]);
    let v = json(&out);
    let requests = u64_at(&v, "/requests");
    assert!((300..=450).contains(&requests), "--rate 200 for 2 s gives about 400 requests: {requests}");

    let out = http(&[&nginx.url("/"), "-c", "2", "-d", "500ms"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("latency") && text.contains("p99.9") && text.contains("200: "), "{text}");
}

#[test]
fn nginx_stopped_mid_test() {
    let _g = common::serial();
    let mut nginx = Nginx::start(18083);
    let mut c = Command::new(bin());
    c.args(["http", &nginx.url("/"), "-c", "4", "-d", "2s", "--timeout", "500ms", "-J"]);
    let child = c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn uringbench");
    std::thread::sleep(Duration::from_millis(700));
    nginx.stop();
    let start = Instant::now();
    let out = common::finish(child, LIMIT);
    assert!(start.elapsed() < Duration::from_secs(5), "no hang after the server went away");
    let v = json(&out);
    assert_eq!(code(&out), 1, "errors make the run incomplete: {v}");
    assert!(u64_at(&v, "/requests") > 0);
    assert!(u64_at(&v, "/errors/connect") > 0, "reconnects to a dead server are counted: {v}");
    let (requests, errors) = sums(&v, &["requests", "errors"]);
    assert_eq!(
        (requests, errors),
        (u64_at(&v, "/requests"), u64_at(&v, "/errors_total")),
        "the intervals' responses and failures add up to the run's"
    );
}

/// A stop signal ends an http run soon with its partial report, through the side's stop as
/// for every other test: exit 1, `interrupted` names the signal, the window ends near it, and
/// nginx's own access log holds at least every response counted.
#[test]
fn nginx_run_stopped_by_sigint_keeps_its_partial_report() {
    let _g = common::serial();
    let nginx = Nginx::start(18085);
    let mut c = Command::new(bin());
    c.args(["http", &nginx.url("/"), "-c", "4", "-d", "20s", "-i", "500ms", "-J"]);
    let child = c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn uringbench");
    std::thread::sleep(Duration::from_millis(1500));
    // SAFETY: kill(2) on a child this test started and has not reaped.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let signalled = Instant::now();
    let out = common::finish(child, LIMIT);
    let took = signalled.elapsed();
    assert!(took < Duration::from_secs(3), "ends soon after the signal, not at -d 20s: took {took:?}");
    let v = json(&out);
    assert_eq!(code(&out), 1, "an interrupted run exits 1: {v}");
    let why = v["interrupted"].as_str().unwrap_or_else(|| panic!("interrupted: {v}"));
    assert!(why.contains("SIGINT"), "{why}");
    let window = f64_at(&v, "/window_seconds");
    assert!(window > 1.0 && window < 4.0, "the window ends at the signal, about 1.5 s in: {window}");
    let requests = u64_at(&v, "/requests");
    assert!(requests > 0, "{v}");
    assert!(nginx.served() >= requests, "nginx logged {} requests for {requests} responses", nginx.served());
    let (in_intervals, _) = sums(&v, &["requests", "errors"]);
    assert_eq!(in_intervals, requests, "the intervals' responses are the run's");
}

/// The sums of `keys` over the document's `intervals[]`.
fn sums(v: &serde_json::Value, keys: &[&str]) -> (u64, u64) {
    let ivs = v["intervals"].as_array().unwrap_or_else(|| panic!("intervals[]: {v}"));
    let sum = |k: &str| ivs.iter().map(|iv| iv[k].as_u64().unwrap_or_else(|| panic!("{k} in {iv}"))).sum::<u64>();
    (sum(keys[0]), sum(keys[1]))
}

/// `-i`: as many intervals as the run has (2 s ÷ 500 ms), back to back, their responses and
/// bytes adding up to the run's, each with its own latency and the client's CPU; the text
/// output has a live line per interval; a `-n` run's intervals add up to exactly `-n`.
#[test]
fn nginx_intervals_add_up_to_the_run() {
    let _g = common::serial();
    let nginx = Nginx::start(18084);
    let out = http(&[&nginx.url("/"), "-c", "4", "-t", "2", "-d", "2s", "-i", "500ms", "-J"]);
    let v = json(&out);
    assert_eq!(code(&out), 0, "{v}");
    let ivs = v["intervals"].as_array().unwrap();
    assert_eq!(ivs.len(), 4, "2 s in 500 ms intervals: {v}");
    let (requests, bytes) = sums(&v, &["requests", "bytes_read"]);
    assert_eq!(requests, u64_at(&v, "/requests"), "the intervals' responses are the run's");
    assert_eq!(bytes, u64_at(&v, "/bytes_read"), "the intervals' bytes are the run's");
    let threads: f64 = ivs.iter().map(|iv| f64_at(iv, "/cpu/threads")).sum();
    assert!(threads > 0.0, "the load threads cost CPU over the run: {v}");
    let mut at = 0.0;
    for (n, iv) in ivs.iter().enumerate() {
        let (start, end) = (f64_at(iv, "/start"), f64_at(iv, "/end"));
        assert!((start - at).abs() < 1e-9 && end > start, "interval {n} follows the one before: {iv}");
        at = end;
        // A sanity floor, far below the thousands nginx answers here in 500 ms.
        assert!(u64_at(iv, "/requests") > 20, "interval {n}: {iv}");
        let rate = f64_at(iv, "/transactions_per_second");
        assert!((rate * (end - start) - u64_at(iv, "/requests") as f64).abs() < 1.0, "interval {n}: {iv}");
        assert!(u64_at(iv, "/latency_us/p50") > 0 && u64_at(iv, "/latency_us/p50") <= u64_at(iv, "/latency_us/p99"));
        assert!(u64_at(iv, "/latency_us/max") <= u64_at(&v, "/latency_us/max"), "interval {n}: {iv}");
        // Thread CPU is the kernel's tick-sampled utime + stime (10 ms): in 500 ms on a loaded
        // host a light thread can be charged no tick, so each interval is checked for a
        // figure, and the run as a whole for a cost.
        assert!(f64_at(iv, "/cpu/threads") >= 0.0, "the load threads' CPU in interval {n}: {iv}");
        assert!(!iv["cpu"]["host"].as_array().unwrap().is_empty(), "the host's CPUs in interval {n}");
    }
    assert!((at - 2.0).abs() < 0.1, "the last interval ends with the run: {at}");

    let out = http(&[&nginx.url("/"), "-c", "2", "-d", "1500ms", "-i", "500ms"]);
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("[SUM]")).collect();
    assert_eq!(lines.len(), 3, "a live line per interval: {text}");
    assert!(lines[0].contains(" 0.00-0.50 ") && lines[0].contains("req/s"), "{text}");

    let out = http(&[&nginx.url("/"), "-c", "3", "-n", "2000", "-i", "100ms", "-J"]);
    let v = json(&out);
    assert_eq!(code(&out), 0, "{v}");
    assert_eq!(sums(&v, &["requests", "errors"]), (2000, 0), "-n 2000 in its intervals: {v}");
}

/// What the bad server sends after reading a request.
#[derive(Clone, Copy)]
enum Bad {
    Garbage,
    Oversized,
    TruncatedChunked,
    Endless,
    GoodChunked,
}

/// A loopback server sending one kind of response to every request; stopped when dropped.
struct BadServer {
    local: std::net::SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl BadServer {
    fn start(kind: Bad) -> Self {
        Self::start_on(kind, "127.0.0.1:0")
    }

    fn start_on(kind: Bad, addr: &str) -> Self {
        let listener = TcpListener::bind(addr).unwrap();
        listener.set_nonblocking(true).unwrap();
        let local = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let s = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut conns = Vec::new();
            while !s.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let s = Arc::clone(&s);
                        conns.push(std::thread::spawn(move || serve(stream, kind, &s)));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
            for c in conns {
                let _ = c.join();
            }
        });
        Self { local, stop, thread: Some(thread) }
    }
    fn url(&self) -> String {
        format!("http://{}/", self.local)
    }
}

impl Drop for BadServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Reads one request head (bounded); false when the client went away.
fn read_request(stream: &mut TcpStream, stop: &AtomicBool) -> bool {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !stop.load(Ordering::Relaxed) && head.len() < 65536 {
        match stream.read(&mut buf) {
            Ok(0) => return false,
            Ok(n) => {
                head.extend_from_slice(&buf[..n]);
                if head.windows(4).any(|w| w == b"\r\n\r\n") {
                    return true;
                }
            }
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => return false,
        }
    }
    false
}

/// A complete chunked response with a chunk extension and a trailer.
const GOOD_CHUNKED: &[u8] =
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n0\r\nX-Trailer: 1\r\n\r\n";

fn serve(mut stream: TcpStream, kind: Bad, stop: &AtomicBool) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_millis(50)));
    let _ = stream.set_write_timeout(Some(Duration::from_millis(500)));
    while read_request(&mut stream, stop) {
        let ok = match kind {
            Bad::Garbage => {
                let _ = stream.write_all(b"garbage here\r\n\r\n");
                false
            }
            Bad::Oversized => {
                let mut r = b"HTTP/1.1 200 OK\r\nX-Big: ".to_vec();
                r.extend(std::iter::repeat_n(b'a', 100 * 1024));
                let _ = stream.write_all(&r);
                false
            }
            Bad::TruncatedChunked => {
                let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nabc");
                false
            }
            Bad::Endless => {
                let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n");
                while !stop.load(Ordering::Relaxed) && stream.write_all(&[b'x'; 512]).is_ok() {
                    std::thread::sleep(Duration::from_millis(10));
                }
                false
            }
            Bad::GoodChunked => stream.write_all(GOOD_CHUNKED).is_ok(),
        };
        if !ok {
            break;
        }
    }
}

fn bad_run(kind: Bad) -> serde_json::Value {
    let server = BadServer::start(kind);
    let start = Instant::now();
    let out = http(&[&server.url(), "-c", "2", "-d", "1s", "--timeout", "300ms", "-J"]);
    assert!(start.elapsed() < Duration::from_secs(10), "bounded in time");
    let v = json(&out);
    assert_eq!(code(&out), 1, "a bad server makes the run incomplete: {v}");
    v
}

#[test]
fn malformed_responses_are_counted_by_kind() {
    let _g = common::serial();
    let v = bad_run(Bad::Garbage);
    assert!(u64_at(&v, "/errors/malformed") > 0 && u64_at(&v, "/requests") == 0, "garbage: {v}");
    let v = bad_run(Bad::Oversized);
    assert!(u64_at(&v, "/errors/oversized_headers") > 0 && u64_at(&v, "/requests") == 0, "oversized: {v}");
    let v = bad_run(Bad::TruncatedChunked);
    assert!(u64_at(&v, "/errors/read") > 0 && u64_at(&v, "/requests") == 0, "truncated: {v}");
    let v = bad_run(Bad::Endless);
    assert!(u64_at(&v, "/errors/timeout") > 0 && u64_at(&v, "/requests") == 0, "endless: {v}");
}

#[test]
fn own_chunked_server_and_usage_errors() {
    let _g = common::serial();
    let server = BadServer::start(Bad::GoodChunked);
    let out = http(&[&server.url(), "-c", "2", "-d", "500ms", "-J"]);
    let v = json(&out);
    assert_eq!(code(&out), 0, "{v}");
    assert!(u64_at(&v, "/status/200") > 10 && u64_at(&v, "/errors_total") == 0, "{v}");
    assert_eq!(u64_at(&v, "/bytes_read") % GOOD_CHUNKED.len() as u64, 0, "whole chunked responses only: {v}");

    // A host name (resolved; with several addresses, the one that accepts is used).
    let by_name = server.url().replace("127.0.0.1", "localhost");
    let out = http(&[&by_name, "-c", "1", "-d", "300ms", "-J"]);
    let v = json(&out);
    assert!(code(&out) == 0 && u64_at(&v, "/requests") > 0, "{by_name}: {v}");
    drop(server);

    // An IPv6 literal host, where the host has IPv6 loopback.
    if std::net::TcpListener::bind("[::1]:0").is_ok() {
        let server = BadServer::start_on(Bad::GoodChunked, "[::1]:0");
        let out = http(&[&server.url(), "-c", "1", "-d", "300ms", "-J"]);
        let v = json(&out);
        assert!(code(&out) == 0 && u64_at(&v, "/requests") > 0, "{}: {v}", server.url());
    }

    let out = http(&["https://127.0.0.1/"]);
    assert_eq!(code(&out), 2);
    assert!(String::from_utf8_lossy(&out.stderr).contains("https is not supported"));
    let out = http(&["http://127.0.0.1:1/", "-H", "no colon"]);
    assert_eq!(code(&out), 2);
}
