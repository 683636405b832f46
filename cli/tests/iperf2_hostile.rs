//! `recv --iperf2` against a peer that connects and never sends a header, as an attacker
//! would, between two network namespaces: under a 64-descriptor limit it keeps serving real
//! iperf2 clients, thousands of idle connections cost descriptors for a few seconds and no
//! threads, and running out of descriptors pauses accepting instead of ending the receiver.
//! The idle connections come from other addresses of the sender namespace than the real
//! clients (10.77.0.1), as an attacker's would. Every process is bounded and killed at the end.

mod common;

use common::*;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Opens `n` TCP connections to our receiver's iperf2 port from the source addresses in
/// argv[1] (round robin), sends nothing, and for `argv[3]` seconds records when each
/// connected and when the receiver closed it. Prints one JSON line at the end.
const IDLE_PY: &str = r#"
import json, resource, select, socket, sys, time
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
srcs, n, limit = sys.argv[1].split(","), int(sys.argv[2]), float(sys.argv[3])
t0 = time.monotonic()
socks, poller, fds = [], select.poll(), {}
for i in range(n):
    s = socket.socket()
    s.setblocking(False)
    s.bind((srcs[i % len(srcs)], 0))
    try:
        s.connect(("10.77.0.2", 5001))
    except BlockingIOError:
        pass
    socks.append(s)
    fds[s.fileno()] = i
    poller.register(s, select.POLLOUT | select.POLLIN)
connected, closed = {}, {}
while time.monotonic() - t0 < limit and len(closed) < n:
    for fd, ev in poller.poll(50):
        i, now = fds[fd], time.monotonic() - t0
        if i not in connected:
            connected[i] = now
            poller.modify(fd, select.POLLIN)
        if ev & (select.POLLIN | select.POLLHUP | select.POLLERR):
            try:
                data = socks[i].recv(1)
            except OSError:
                data = b""
            if not data:
                closed[i] = now
                poller.unregister(fd)
lives = sorted(closed[i] - connected[i] for i in closed)
print(json.dumps({"opened": n, "connected": len(connected), "closed": len(closed), "lives": lives}))
"#;

/// The idle-connection script, running in the background in the sender namespace.
fn idle_connections(pair: &NetnsPair, sources: &[String], n: usize, seconds: u32) -> Child {
    pair.cmd(&pair.sender_ns(), "python3", &["-c", IDLE_PY, &sources.join(","), &n.to_string(), &seconds.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3")
}

/// Its JSON line, once it has ended: (connected, closed, lifetimes of the closed ones).
fn idle_result(child: Child, limit: Duration) -> (u64, u64, Vec<f64>) {
    let out = finish(child, limit);
    let text = String::from_utf8_lossy(&out.stdout);
    let doc: serde_json::Value = serde_json::from_str(text.lines().last().unwrap_or(""))
        .unwrap_or_else(|_| panic!("idle script: {text} {}", String::from_utf8_lossy(&out.stderr)));
    let lives = doc["lives"].as_array().expect("lives").iter().map(|v| v.as_f64().unwrap()).collect();
    (doc["connected"].as_u64().unwrap(), doc["closed"].as_u64().unwrap(), lives)
}

/// Adds `addrs` to the sender's end of the pair: sources of the idle connections.
fn add_sources(pair: &NetnsPair, addrs: &[String]) {
    let dev = format!("{}a0", pair.name);
    for a in addrs {
        let out =
            pair.cmd(&pair.sender_ns(), "ip", &["addr", "add", &format!("{a}/24"), "dev", &dev]).output().unwrap();
        assert!(out.status.success(), "ip addr add {a}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

/// `recv --iperf2 --port 5001` in the receiver namespace under `wrapper`, listening on UDP too.
fn spawn_iperf2_recv(pair: &NetnsPair, wrapper: &[&str]) -> Recv {
    let recv = pair.spawn_recv_under(wrapper, &["--iperf2", "--port", "5001", "--cpus", "1"]);
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        let out = pair.cmd(&pair.receiver_ns(), "ss", &["-Huln"]).output().expect("ss");
        if String::from_utf8_lossy(&out.stdout).contains(":5001 ") {
            return recv;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("recv --iperf2 does not listen on UDP 5001");
}

fn count_dir(path: &str) -> usize {
    std::fs::read_dir(path).map(|d| d.count()).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// `iperf -c ARGS` from the sender namespace's own address, bounded.
fn iperf(pair: &NetnsPair, args: &[&str]) -> String {
    let mut all = vec!["-c", RECV_ADDR];
    all.extend_from_slice(args);
    let (out, took) = run_bounded(pair.cmd(&pair.sender_ns(), "iperf", &all), Duration::from_secs(30));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "iperf -c {args:?} failed after {took:?}: {text}");
    text
}

/// Bytes of `iperf -c -y C`'s per-connection lines, summed.
fn csv_bytes(out: &str) -> u64 {
    out.lines().filter_map(|l| l.trim().split(',').nth(7)?.parse::<u64>().ok()).sum()
}

/// Our receiver's line for a finished test from 10.77.0.1 over `proto`.
fn our_bytes(log: &str, proto: &str) -> Vec<u64> {
    log.lines()
        .filter(|l| l.contains(&format!("iperf2 {proto} test from 10.77.0.1")))
        .map(|l| {
            let head = l.split(" bytes in ").next().unwrap();
            head.rsplit(' ').next().unwrap().parse().unwrap_or_else(|_| panic!("bytes in: {l}"))
        })
        .collect()
}

#[test]
fn under_64_descriptors_80_idle_connections_do_not_stop_real_clients() {
    let Some((_serial, pair)) = peer_pair("iperf", "ubh64") else { return };
    let attacker = vec!["10.77.0.3".to_string()];
    add_sources(&pair, &attacker);
    let mut recv = spawn_iperf2_recv(&pair, &["prlimit", "--nofile=64"]);
    let idle = idle_connections(&pair, &attacker, 80, 10);
    std::thread::sleep(Duration::from_secs(1));
    // While the idle connections hold what they may: a TCP test and a UDP test, served.
    let tcp = iperf(&pair, &["-t", "1", "-y", "C"]);
    let udp = iperf(&pair, &["-u", "-b", "20M", "-t", "1"]);
    assert!(udp.contains("Server Report:"), "the UDP client got our report: {udp}");
    let (connected, closed, lives) = idle_result(idle, Duration::from_secs(20));
    assert!(recv.running(), "recv --iperf2 still runs");
    let log = String::from_utf8_lossy(&recv.kill().stdout).to_string();
    eprintln!("{log}\nidle: {connected} connected, {closed} closed by the receiver, lifetimes {lives:?}");
    assert_eq!(our_bytes(&log, "TCP"), vec![csv_bytes(&tcp)], "the TCP client's every byte, counted: {tcp}");
    assert_eq!(our_bytes(&log, "UDP").len(), 1, "the UDP test is served: {log}");
    assert_eq!((connected, closed), (80, 80), "every idle connection was closed by the receiver");
    let held: Vec<f64> = lives.iter().copied().filter(|&l| l > 1.0).collect();
    assert!(!held.is_empty() && held.len() <= 32, "a few were held until their header deadline: {lives:?}");
    assert!(held.iter().all(|&l| (4.5..8.0).contains(&l)), "and closed at the 5 s deadline: {held:?}");
    assert!(!log.contains("Too many open files"), "{log}");
    let attacker_lines = log.lines().filter(|l| l.contains("10.77.0.3")).count();
    assert!(attacker_lines <= 4, "refusals are told once per address per 10 s: {log}");
    assert!(log.contains("still sending their header"), "{log}");
}

#[test]
fn three_thousand_idle_connections_cost_descriptors_for_seconds_and_no_threads() {
    let Some((_serial, pair)) = peer_pair("iperf", "ubh3k") else { return };
    let attackers: Vec<String> = (10..18).map(|n| format!("10.77.0.{n}")).collect();
    add_sources(&pair, &attackers);
    let recv = spawn_iperf2_recv(&pair, &["prlimit", "--nofile=4096"]);
    let (task, fd) = (format!("/proc/{}/task", recv.pid()), format!("/proc/{}/fd", recv.pid()));
    let (threads0, fds0) = (count_dir(&task), count_dir(&fd));
    let idle = idle_connections(&pair, &attackers, 3000, 25);
    std::thread::sleep(Duration::from_millis(2500));
    let (threads, fds) = (count_dir(&task), count_dir(&fd));
    eprintln!("before: {threads0} threads, {fds0} fds; under 3000 idle connections: {threads} threads, {fds} fds");
    assert!(threads <= threads0 + 1, "no thread per idle connection: {threads0} -> {threads}");
    assert!(fds >= fds0 + 256, "idle connections are held while they may send a header: {fds0} -> {fds}");
    assert!(fds <= fds0 + 512 + 8, "at most 64 per address, 512 in all: {fds0} -> {fds}");
    let tcp = iperf(&pair, &["-t", "1", "-y", "C"]);
    let (connected, closed, lives) = idle_result(idle, Duration::from_secs(40));
    let (threads1, fds1) = (count_dir(&task), count_dir(&fd));
    let log = String::from_utf8_lossy(&recv.kill().stdout).to_string();
    eprintln!("after: {threads1} threads, {fds1} fds; idle: {connected} connected, {closed} closed\n{log}");
    assert_eq!(our_bytes(&log, "TCP"), vec![csv_bytes(&tcp)], "a real client is served meanwhile: {log}");
    assert_eq!(closed, connected, "the receiver closed every idle connection");
    assert!(connected >= 2900, "nearly all 3000 connected: {connected}");
    // A connection the kernel completed while the accept queue was full is accepted late: its
    // life counts from the client's side, so the bound is looser than the deadline.
    assert!(lives.iter().all(|&l| l < 16.0), "none outlived the 5 s header deadline by much: {:?}", lives.last());
    assert!(fds1 <= fds0 + 2, "descriptors back to the baseline: {fds0} -> {fds1}");
    assert!(threads1 <= threads0 + 1, "threads back to the baseline: {threads0} -> {threads1}");
    assert!(log.lines().count() < 60, "refusals are told per address, not per connection:\n{log}");
}

#[test]
fn out_of_descriptors_accepting_pauses_once_and_resumes() {
    let Some((_serial, pair)) = peer_pair("iperf", "ubhmf") else { return };
    let attacker = vec!["10.77.0.3".to_string()];
    add_sources(&pair, &attacker);
    let mut recv = spawn_iperf2_recv(&pair, &[]);
    let idle = idle_connections(&pair, &attacker, 40, 9);
    std::thread::sleep(Duration::from_millis(800));
    // Below what is open now: every new descriptor fails with EMFILE until the idle ones go.
    let pid = recv.pid().to_string();
    let out = Command::new("prlimit").args(["--pid", &pid, "--nofile=30:30"]).output().expect("prlimit");
    assert!(out.status.success(), "prlimit: {}", String::from_utf8_lossy(&out.stderr));
    let tcp = iperf(&pair, &["-t", "2", "-y", "C"]);
    let _ = idle_result(idle, Duration::from_secs(20));
    assert!(recv.running(), "recv --iperf2 still runs");
    let log = String::from_utf8_lossy(&recv.kill().stdout).to_string();
    eprintln!("{log}");
    assert_eq!(log.matches("TCP paused: accepting a connection failed (out of file descriptors").count(), 1, "{log}");
    assert_eq!(our_bytes(&log, "TCP"), vec![csv_bytes(&tcp)], "served once descriptors came back: {log}");
}
