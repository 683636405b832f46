//! A receiver left on a public address, held by peers that take slots and send nothing, or
//! rotate their addresses, or flood it: what they cannot make it do. The peers are Python
//! speaking the protocols from the sender namespace, which also runs the real senders; every
//! process is bounded. Pairs are named `ubpr*`.

mod common;

use common::*;
use std::process::Stdio;
use std::time::Duration;

/// Python helpers for `recv`'s control protocol after [`PY_FRAMING`]: a UDP test's spec and its
/// hello from a given source address.
const PROTO_PY: &str = r#"import socket, struct, json, subprocess, sys, threading, time
SPEC = {"proto": "udp", "workload": "stream", "queues": 1, "flows_per_queue": 1, "time_ms": 60000,
        "warmup_ms": 0, "cooldown_ms": 0, "interval_ms": 0, "len": 1400, "rate_bps": 1000000,
        "zerocopy": "off", "depth": 4}
def hello(src, port):
    s = socket.create_connection((RECV, 5300), timeout=20, source_address=(src, 0))
    s.sendall(b"UBC1" + frame({"type": "hello", "version": 3, "spec": SPEC, "udp_ports": [port]}))
    return s
"#;

/// Adds `addrs` to the sender namespace's interface (IPv6 without duplicate detection).
fn add_sender_addresses(pair: &NetnsPair, addrs: &[&str]) {
    for a in addrs {
        let prefix = if a.contains(':') { "/64" } else { "/24" };
        let out = pair
            .cmd(
                &pair.sender_ns(),
                "ip",
                &["addr", "add", &format!("{a}{prefix}"), "dev", &format!("{}a0", pair.name), "nodad"],
            )
            .output()
            .expect("ip addr add");
        assert!(out.status.success(), "ip addr add {a}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

/// Four tests announced from two addresses (a UDP forward test each: no flow to wait for)
/// that send nothing hold all four of `recv`'s slots; a real `send` is refused while they do,
/// and served once the no-progress limit (2 s) has ended them: within the limit plus a
/// second of their start. Each idle peer is told why (a `stop` naming the limit, then the
/// result), and the log says it once per test.
#[test]
fn receiver_ends_idle_tests_at_the_no_progress_limit_and_serves_the_next_sender() {
    let _serial = serial();
    let pair = NetnsPair::up("ubpri");
    add_sender_addresses(&pair, &["10.77.0.11"]);
    let recv = pair.spawn_recv(&["--no-progress-limit", "2s"]);
    let script = format!(
        r#"RECV = "{RECV_ADDR}"
{PY_FRAMING}{PROTO_PY}
said = {{}}
def idle(i, src):
    s = hello(src, 40000 + i)
    seen = []
    try:
        while True:
            m = read_msg(s)
            seen.append(m["type"])
            if m["type"] == "accept":
                accepted.release()
            if m["type"] == "stop":
                seen.append(m["reason"].replace(" ", "_"))
            if m["type"] in ("result", "refuse", "abort"):
                break
    except Exception as e:
        seen.append("closed")
    said[i] = "%.1f %s" % (time.monotonic() - t0, ",".join(seen))
accepted = threading.Semaphore(0)
t0 = time.monotonic()
threads = [threading.Thread(target=idle, args=(i, src)) for i, src in
           enumerate(["10.77.0.1", "10.77.0.1", "10.77.0.11", "10.77.0.11"])]
for t in threads:
    t.start()
for _ in threads:
    assert accepted.acquire(timeout=10), "four idle tests accepted"
held = time.monotonic() - t0
refused = 0
while True:
    start = time.monotonic() - t0
    r = subprocess.run([sys.argv[1], "send", "--target", RECV, "-t", "1s", "--warmup", "0s", "-J"],
                       capture_output=True, timeout=30)
    if r.returncode == 0:
        break
    assert b"busy" in r.stderr, r.stderr
    refused += 1
    assert start < 15, "never served"
    time.sleep(0.1)
for t in threads:
    t.join(20)
print("held %.1f refused %d served_from %.1f" % (held, refused, start))
for i in sorted(said):
    print(said[i])
"#
    );
    let mut c = pair.cmd(&pair.sender_ns(), "timeout", &["40", "python3", "-c", &script, bin()]);
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    let (out, _) = run_bounded(c, Duration::from_secs(45));
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    let log = String::from_utf8_lossy(&recv.kill().stdout).to_string();
    assert!(out.status.success(), "{said}\n{}\n{log}", String::from_utf8_lossy(&out.stderr));
    let mut lines = said.lines();
    let head: Vec<&str> = lines.next().unwrap_or_default().split_whitespace().collect();
    let (held, refused, served): (f64, u32, f64) =
        (head[1].parse().unwrap(), head[3].parse().unwrap(), head[5].parse().unwrap());
    assert!(refused >= 1, "a real sender was refused while the idle tests held the slots: {said}");
    assert!(served <= held + 2.0 + 1.0, "served from {served:.1} s, the slots were held from {held:.1} s: {said}");
    let idle: Vec<&str> = lines.collect();
    assert_eq!(idle.len(), 4, "{said}");
    for line in &idle {
        assert!(
            line.contains(",stop,receiver:_nothing_received_for_2_s") && line.ends_with(",result"),
            "{line}\n{said}"
        );
    }
    let ended =
        log.lines().filter(|l| l.contains("nothing received for 2 s: test ended (--no-progress-limit)")).count();
    assert_eq!(ended, 4, "one line per idle test: {log}");
    assert!(!log.contains("could not return the report"), "{log}");
}

/// Addresses of one IPv6 /64 are one source: 8 connections from 8 addresses of the sender's
/// /64 that send nothing are held 3 at a time (`--max-pending-per-source 3`), the rest closed
/// at once; and of 3 idle tests from 3 more addresses of the /64, the third is refused by
/// `--max-sessions-per-source 2`. Counted by the peer: which connections the receiver closed,
/// and its refusal.
#[test]
fn receiver_counts_ipv6_sources_per_64() {
    let _serial = serial();
    let pair = NetnsPair::up("ubpr6");
    let addrs: Vec<String> = (0x11..0x1c).map(|i| format!("fd77::{i:x}")).collect();
    add_sender_addresses(&pair, &addrs.iter().map(String::as_str).collect::<Vec<_>>());
    let recv = pair.spawn_recv(&["--max-pending-per-source", "3", "--no-progress-limit", "10s"]);
    let script = format!(
        r#"RECV = "fd77::2"
{PY_FRAMING}{PROTO_PY}
import select
conns = []
for src in {pending:?}:
    s = socket.create_connection((RECV, 5300), timeout=5, source_address=(src, 0))
    conns.append(s)
    time.sleep(0.05)
time.sleep(0.5)
closed = 0
for s in conns:
    r, _, _ = select.select([s], [], [], 0)
    if r and s.recv(1) == b"":
        closed += 1
print("held", len(conns) - closed, "closed", closed)
for s in conns:
    s.close()
time.sleep(0.3)
for src in {tests:?}:
    s = hello(src, 41000)
    m = read_msg(s)
    print(src, m["type"], m.get("reason", "").replace(" ", "_"))
    conns.append(s)
"#,
        pending = &addrs[..8],
        tests = &addrs[8..],
    );
    let mut c = pair.cmd(&pair.sender_ns(), "timeout", &["20", "python3", "-c", &script]);
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    let (out, _) = run_bounded(c, Duration::from_secs(25));
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    let log = String::from_utf8_lossy(&recv.kill().stdout).to_string();
    assert!(out.status.success(), "{said}\n{}\n{log}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<&str> = said.lines().collect();
    assert_eq!(lines[0], "held 3 closed 5", "{said}\n{log}");
    assert!(log.contains("3 connections from fd77::/64 still in their handshake"), "{log}");
    assert!(lines[1].contains(" accept") && lines[2].contains(" accept"), "{said}");
    assert!(lines[3].contains(" refuse ") && lines[3].contains("2_tests_from_fd77::/64_running"), "{said}");
}

/// `recv --iperf3` with a test running answers every other cookie with ACCESS_DENIED, and
/// logs one busy line per address per window (10 s): a flood of 3 s from one address is one
/// line. A test whose client sends nothing after TEST_RUNNING is ended at the no-progress
/// limit (2 s) with its reason, and the next client gets PARAM_EXCHANGE.
#[test]
fn receiver_iperf3_logs_one_busy_line_per_window_and_ends_a_silent_test() {
    let _serial = serial();
    let pair = NetnsPair::up("ubpr3");
    let recv = pair.spawn_recv(&["--iperf3", "--port", "5201", "--no-progress-limit", "2s"]);
    let script = format!(
        r#"import json, random, socket, struct, time
S = ("{RECV_ADDR}", 5201)
cookie = b"abcdefghijklmnopqrstuvwxyz234567abcd\0"
c = socket.create_connection(S, timeout=10)
c.sendall(cookie)
assert c.recv(1) == bytes([9]), "PARAM_EXCHANGE"
p = json.dumps({{"tcp": True, "time": 60, "parallel": 1, "len": 131072, "client_version": "3.12"}}).encode()
c.sendall(struct.pack(">I", len(p)) + p)
assert c.recv(1) == bytes([10]), "CREATE_STREAMS"
d = socket.create_connection(S, timeout=10)
d.sendall(cookie)
assert c.recv(1) == bytes([1]), "TEST_START"
assert c.recv(1) == bytes([2]), "TEST_RUNNING"
running = time.monotonic()
denied = 0
while time.monotonic() - running < 1.5:
    f = socket.create_connection(S, timeout=5)
    f.sendall("".join(random.choice("abcdefghijklmnopqrstuvwxyz234567") for _ in range(36)).encode() + b"\0")
    if f.recv(1) == bytes([255]):
        denied += 1
    f.close()
c.settimeout(10)
try:
    while c.recv(4096):
        pass
except OSError:
    pass
ended = time.monotonic() - running
time.sleep(0.2)
n = socket.create_connection(S, timeout=5)
n.sendall(b"zyxwvutsrqponmlkjihgfedcba765432zyxw\0")
print(denied, "%.1f" % ended, n.recv(1)[0])
"#
    );
    let mut c = pair.cmd(&pair.sender_ns(), "timeout", &["20", "python3", "-c", &script]);
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    let (out, _) = run_bounded(c, Duration::from_secs(25));
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    std::thread::sleep(Duration::from_millis(300));
    let log = String::from_utf8_lossy(&recv.kill().stdout).to_string();
    assert!(out.status.success(), "{said}\n{}\n{log}", String::from_utf8_lossy(&out.stderr));
    let words: Vec<&str> = said.split_whitespace().collect();
    let (denied, ended, next): (u32, f64, u32) =
        (words[0].parse().unwrap(), words[1].parse().unwrap(), words[2].parse().unwrap());
    assert!(denied >= 50, "the flood got ACCESS_DENIED {denied} times: {said}");
    let busy = log.lines().filter(|l| l.contains("busy with the test from")).count();
    assert_eq!(busy, 1, "{denied} refusals from one address in one window are one line: {log}");
    assert!((1.5..=4.0).contains(&ended), "the silent test ended {ended:.1} s after TEST_RUNNING: {log}");
    assert!(log.contains("nothing received for 2 s: test ended (--no-progress-limit)"), "{log}");
    assert_eq!(next, 9, "the next client gets PARAM_EXCHANGE once the silent test ended: {said}");
}
