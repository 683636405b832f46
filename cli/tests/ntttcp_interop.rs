//! uringbench against NTttcp's no-sync mode, between two network namespaces. No NTttcp package
//! exists in the registries this project reaches, and the no-sync wire is plain TCP data on
//! consecutive ports, so the far end is a small Python program that does what NTttcp does
//! there: a receiver listening on ports BASE..BASE+N-1 and counting each connection to EOF,
//! or a sender opening one connection per thread to BASE+i, sending for the test time and
//! closing. Pairs are named `ubn*`; every process is bounded.

mod common;

use common::*;
use std::process::Stdio;
use std::time::Duration;

/// NTttcp's receiver (`-r -m N,*,IP -ns`): one listener per thread from 5001, each connection
/// counted to EOF; prints the total bytes and connections once `conns` connections ended.
const RECEIVER: &str = r#"
import json, socket, sys, threading
ports, conns = int(sys.argv[1]), int(sys.argv[2])
total, ended, lock = [0], [0], threading.Lock()
def count(c):
    n = 0
    while True:
        b = c.recv(1 << 20)
        if not b:
            break
        n += len(b)
    with lock:
        total[0] += n
        ended[0] += 1
def listen(port):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("10.77.0.2", port)); s.listen(64); s.settimeout(30)
    while True:
        try:
            c, _ = s.accept()
        except OSError:
            return
        threading.Thread(target=count, args=(c,), daemon=True).start()
for p in range(ports):
    threading.Thread(target=listen, args=(5001 + p,), daemon=True).start()
import time
deadline = time.time() + 40
while time.time() < deadline:
    with lock:
        if ended[0] >= conns:
            break
    time.sleep(0.05)
print(json.dumps({"bytes": total[0], "connections": ended[0]}))
"#;

/// NTttcp's UDP receiver (`-r -u -m N,*,IP -ns`): one socket per thread from 5001, counting
/// datagrams and bytes until 1.5 s without one (after the first); says `ready` once bound.
const UDP_RECEIVER: &str = r#"
import json, select, socket, sys, time
ports = int(sys.argv[1])
socks = []
for p in range(ports):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    s.bind(("10.77.0.2", 5001 + p)); s.setblocking(False); socks.append(s)
print("ready", flush=True)
count, total, seen, last, deadline = [0] * ports, 0, set(), None, time.time() + 40
while time.time() < deadline and (last is None or time.time() - last < 1.5):
    for s in select.select(socks, [], [], 0.1)[0]:
        while True:
            try:
                b = s.recv(65536)
            except BlockingIOError:
                break
            i = socks.index(s); count[i] += 1; total += len(b); seen.add(i); last = time.time()
print(json.dumps({"bytes": total, "datagrams": sum(count), "ports": len(seen)}))
"#;

/// NTttcp's sender (`-s -m N,*,IP -ns -t T`): one thread per port, sending 64 KiB writes for
/// T seconds, then closing; prints the bytes written.
const SENDER: &str = r#"
import json, socket, sys, threading, time
ports, secs = int(sys.argv[1]), float(sys.argv[2])
sent, lock = [0], threading.Lock()
chunk = b"\0" * 65536
def run(port):
    s = socket.create_connection(("10.77.0.2", port), timeout=10)
    n, end = 0, time.time() + secs
    while time.time() < end:
        s.sendall(chunk)
        n += len(chunk)
    s.shutdown(socket.SHUT_WR)
    s.recv(1)
    s.close()
    with lock:
        sent[0] += n
ts = [threading.Thread(target=run, args=(5001 + p,)) for p in range(ports)]
[t.start() for t in ts]
[t.join() for t in ts]
print(json.dumps({"bytes": sent[0]}))
"#;

fn send_to_ntttcp_receiver(name: &str, ports: &str) {
    let _serial = serial();
    let pair = NetnsPair::up(name);
    let n: u32 = ports.parse().unwrap();
    let far = pair
        .cmd(&pair.receiver_ns(), "python3", &["-c", RECEIVER, ports, ports])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the NTttcp-like receiver");
    let far = pair.listening(far, &(5000 + n).to_string());
    let (out, _) = pair.send(
        &["--ntttcp", "-c", "10.77.0.2", "-P", ports, "-t", "2", "--warmup", "0", "--cooldown", "0", "-J"],
        Duration::from_secs(30),
    );
    let far = finish(far, Duration::from_secs(45));
    assert!(out.status.success(), "send --ntttcp failed: {}", String::from_utf8_lossy(&out.stderr));
    let ours = json(&out);
    let theirs: serde_json::Value = serde_json::from_slice(&far.stdout).expect("the receiver's JSON");
    assert_eq!(ours["peer"], "ntttcp");
    assert_eq!(theirs["connections"], n, "one connection per port");
    let sent = u64_at(&ours, "/sum/sender/total_bytes");
    assert!(sent > 1_000_000, "real traffic moved: {sent}");
    assert_eq!(u64_at(&theirs, "/bytes"), sent, "the receiver counted every byte we wrote, to EOF");
}

/// `send --ntttcp -u`: datagrams to every port from 5001, paced, all of them counted by a
/// receiver that counts as NTttcp's does (bytes per datagram, no header).
#[test]
fn send_udp_to_ntttcp_receiver() {
    use std::io::BufRead;
    let _serial = serial();
    let pair = NetnsPair::up("ubnu");
    let mut far = pair
        .cmd(&pair.receiver_ns(), "python3", &["-c", UDP_RECEIVER, "4"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the NTttcp-like UDP receiver");
    let mut ready = String::new();
    let mut lines = std::io::BufReader::new(far.stdout.take().expect("its stdout"));
    lines.read_line(&mut ready).expect("the receiver says it is ready");
    assert_eq!(ready.trim(), "ready");
    let args = ["--ntttcp", "-c", "10.77.0.2", "-u", "-P", "4", "-b", "20M", "-l", "1400", "-t", "2", "-J"];
    let (out, _) = pair.send(&args, Duration::from_secs(30));
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut lines, &mut rest).expect("the receiver's JSON");
    let _ = finish(far, Duration::from_secs(5));
    assert!(out.status.success(), "send --ntttcp -u failed: {}", String::from_utf8_lossy(&out.stderr));
    let (ours, theirs): (serde_json::Value, serde_json::Value) = (json(&out), serde_json::from_str(&rest).unwrap());
    assert_eq!((ours["peer"].as_str(), ours["complete"].as_bool()), (Some("ntttcp"), Some(true)));
    assert_eq!(theirs["ports"], 4, "every port from 5001 got datagrams: {theirs}");
    let sent = u64_at(&ours, "/sum/sender/total_bytes");
    let counted = u64_at(&theirs, "/bytes");
    assert!(sent > 5_000_000, "real traffic moved: {sent}");
    assert_eq!(counted, u64_at(&theirs, "/datagrams") * 1400, "whole datagrams of -l bytes");
    assert!(counted <= sent && counted * 100 >= sent * 99, "counted {counted} of {sent} bytes sent (1% loss allowed)");
}

#[test]
fn send_one_thread_to_ntttcp_receiver() {
    send_to_ntttcp_receiver("ubna", "1");
}

#[test]
fn send_eight_threads_to_ntttcp_receiver() {
    send_to_ntttcp_receiver("ubnb", "8");
}

fn ntttcp_sender_to_us(name: &str, ports: &str) {
    let _serial = serial();
    let pair = NetnsPair::up(name);
    let recv = pair
        .cmd(&pair.receiver_ns(), bin(), &["recv", "--ntttcp", "-P", ports, "--once", "--ntttcp-port", "5001"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn recv --ntttcp");
    let recv = pair.listening(recv, &(5000 + ports.parse::<u32>().unwrap()).to_string());
    let (far, _) =
        run_bounded(pair.cmd(&pair.sender_ns(), "python3", &["-c", SENDER, ports, "2"]), Duration::from_secs(30));
    assert!(far.status.success(), "{}", String::from_utf8_lossy(&far.stderr));
    let sent = u64_at(&serde_json::from_slice(&far.stdout).expect("the sender's JSON"), "/bytes");
    let log = finish(recv, Duration::from_secs(15));
    let log = String::from_utf8_lossy(&log.stdout).to_string();
    let line =
        log.lines().find(|l| l.starts_with("[1] ntttcp TCP test from 10.77.0.1")).unwrap_or_else(|| panic!("{log}"));
    let counted: u64 =
        line.split(" bytes in ").next().and_then(|h| h.rsplit(' ').next()).and_then(|b| b.parse().ok()).expect("bytes");
    assert!(sent > 1_000_000, "real traffic moved: {sent}");
    assert_eq!(counted, sent, "we counted every byte the sender wrote: {line}");
    assert!(line.contains(&format!("({ports} connection")) && !line.contains("incomplete"), "{line}");
}

#[test]
fn ntttcp_sender_one_thread_to_us() {
    ntttcp_sender_to_us("ubnc", "1");
}

#[test]
fn ntttcp_sender_eight_threads_to_us() {
    ntttcp_sender_to_us("ubnd", "8");
}
