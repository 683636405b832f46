//! What a hostile peer sends to `recv` cannot forge or flood its log: peer-supplied text is
//! escaped onto one line and cut to 200 bytes (the first step of the public-receiver work).

mod common;

use common::*;
use std::time::Duration;

/// Python that connects to the receiver as a control session and sends one framed JSON
/// message of `type` `kind`, then waits for the receiver's answer or its close.
fn crafted_hello(kind_expr: &str) -> String {
    format!(
        r#"import socket, struct, json
s = socket.create_connection(("{RECV_ADDR}", 5300), timeout=5)
body = json.dumps({{"type": {kind_expr}}}).encode()
s.sendall(b"UBC1" + struct.pack(">I", len(body)) + body)
try:
    s.recv(65536)
except Exception:
    pass
"#
    )
}

#[test]
fn a_peer_cannot_forge_a_log_line_or_flood_one() {
    let _serial = serial();
    let pair = NetnsPair::up("uohl");
    let recv = pair.spawn_recv(&[]);
    for kind in [r#""hello\n[99] done 6.6.6.6:1: received 1 bytes\r\u001b[2K""#, r#""x" * 60000"#] {
        let out = pair
            .cmd(&pair.sender_ns(), "timeout", &["10", "python3", "-c", &crafted_hello(kind)])
            .output()
            .expect("python3");
        assert!(out.status.success(), "crafted hello: {}", String::from_utf8_lossy(&out.stderr));
    }
    // The receiver still serves a real test afterwards.
    let (out, _) = pair.send(&["--target", RECV_ADDR, "-t", "1s", "--warmup", "0s", "-J"], Duration::from_secs(30));
    assert!(out.status.success(), "a real send after the crafted ones: {}", String::from_utf8_lossy(&out.stderr));
    let log = recv.kill();
    let text = String::from_utf8_lossy(&log.stdout);
    let peer_lines: Vec<&str> = text.lines().filter(|l| l.contains("10.77.0.1")).collect();
    assert!(peer_lines.len() >= 3, "the crafted connections and the real test are logged: {text}");
    assert!(!text.lines().any(|l| l.starts_with("[99]")), "no forged line: {text}");
    assert!(text.contains("\\n[99] done 6.6.6.6:1"), "the forged text is shown escaped on its line: {text}");
    assert!(!text.contains('\u{1b}') && !text.contains('\r'), "no terminal control reaches the log");
    let longest = text.lines().map(str::len).max().unwrap_or(0);
    assert!(longest < 600, "a 60 KB message type is cut, the longest line has {longest} bytes: {text}");
    assert!(text.contains("bytes more)"), "the cut says how much was left out: {text}");
}

/// Python helpers speaking the control protocol from the outside (docs/protocol.md) after
/// [`PY_FRAMING`]: the `--psk-file` handshake, a data flow's greeting.
const PROTO_PY: &str = r#"import socket, struct, json, hmac, hashlib, os, sys, time
def mac(key, *parts):
    return hmac.new(key, b"".join(parts), hashlib.sha256).digest()
VERSION = struct.pack(">I", 3)
def authenticate(s, key):
    nc = os.urandom(32)
    s.sendall(b"UBC1" + frame({"type": "auth", "version": 3, "nonce": list(nc)}))
    ch = read_msg(s)
    assert ch["type"] == "challenge", ch
    ns = bytes(ch["nonce"])
    assert hmac.compare_digest(bytes(ch["proof"]), mac(key, b"uringbench receiver proof", VERSION, nc, ns)), "receiver proof"
    s.sendall(frame({"type": "proof", "proof": list(mac(key, b"uringbench sender proof", VERSION, nc, ns))}))
    return mac(key, b"uringbench session key", VERSION, nc, ns)
SPEC = {"proto": "tcp", "workload": "stream", "queues": 1, "flows_per_queue": 1, "time_ms": 1000,
        "warmup_ms": 0, "cooldown_ms": 0, "interval_ms": 0, "len": 131072, "rate_bps": 0,
        "zerocopy": "off", "depth": 4}
"#;

fn psk_file(dir: &std::path::Path, name: &str, secret: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, format!("{secret}\n")).expect("write psk");
    path.display().to_string()
}

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("ub-hostile-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

#[test]
fn psk_refuses_the_unauthenticated_and_the_wrong_key_and_a_stolen_cookie() {
    let _serial = serial();
    let dir = scratch("psk");
    let right = psk_file(&dir, "right", "0a1b2c3d4e5f60718293a4b5c6d7e8f9");
    let wrong = psk_file(&dir, "wrong", "ffffffffffffffffffffffffffffffff");
    let pair = NetnsPair::up("uopk");
    let recv = pair.spawn_recv(&["--psk-file", &right]);
    let t = ["--target", RECV_ADDR, "-t", "1s", "--warmup", "0s"];
    let (none, _) = pair.send(&t, Duration::from_secs(20));
    one_line_error(&none, 1, "--psk-file");
    let (bad, _) = pair.send(&[&t[..], &["--psk-file", &wrong]].concat(), Duration::from_secs(20));
    one_line_error(&bad, 1, "--psk-file");
    let (good, _) = pair.send(&[&t[..], &["--psk-file", &right, "-J"]].concat(), Duration::from_secs(30));
    assert!(good.status.success(), "the right key: {}", String::from_utf8_lossy(&good.stderr));
    assert!(u64_at(&json(&good), "/sum/receiver/total_bytes") > 0, "bytes the receiver counted");
    // A peer that saw the cookie on the wire but lacks the key: its flows are closed, the
    // test does not start; the flow with the right tag starts it.
    let stolen = format!(
        r#"{PY_FRAMING}{PROTO_PY}
key = open("{right}").read().strip().encode()
s = socket.create_connection(("{RECV_ADDR}", 5300), timeout=5)
skey = authenticate(s, key)
s.sendall(frame({{"type": "hello", "version": 3, "spec": SPEC}}))
acc = read_msg(s)
assert acc["type"] == "accept", acc
cookie = bytes(acc["cookie"])
idx = struct.pack(">I", 0)
for greeting in (b"UBD1" + cookie + idx, b"UBD2" + cookie + idx + b"\0" * 16):
    f = socket.create_connection(("{RECV_ADDR}", 5300), timeout=3)
    f.sendall(greeting)
    assert f.recv(1) == b"", "a flow without the key must be closed"
s.settimeout(0.5)
try:
    print("early:", read_msg(s)["type"])
    sys.exit(1)
except socket.timeout:
    pass
assert acc.get("bound_flows") is True, acc
def end(addr, port):
    return b"\0" * 10 + b"\xff\xff" + socket.inet_aton(addr) + struct.pack(">H", port)
f = socket.create_connection(("{RECV_ADDR}", 5300), timeout=3)
(src, sport), (dst, dport) = f.getsockname(), f.getpeername()
ends = end(src, sport) + end(dst, dport)
greeting = b"UBD3" + cookie + idx + mac(skey, b"uringbench bound data flow", cookie, idx, ends)[:16]
# The greeting as seen on the wire, replayed first from another port of the same address and
# from another address (the sender's IPv6 one): both closed, the session still waits.
r = socket.create_connection(("{RECV_ADDR}", 5300), timeout=3)
r6 = socket.create_connection(("fd77::2", 5300), timeout=3)
for replay in (r, r6):
    replay.sendall(greeting)
    assert replay.recv(1) == b"", "a replayed greeting must be closed"
f.sendall(greeting)
s.settimeout(5)
print("then:", read_msg(s)["type"])
sent = 0
while sent < 3000000:
    sent += f.send(b"x" * min(65536, 3000000 - sent))
f.shutdown(socket.SHUT_WR)
while True:
    m = read_msg(s)
    if m["type"] == "result":
        print("counted:", sum(q["total_bytes"] for q in m["report"]["queues"]), "sent:", sent)
        break
"#
    );
    let out = pair.cmd(&pair.sender_ns(), "timeout", &["20", "python3", "-c", &stolen]).output().expect("python3");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "stolen cookie: {said} {}", String::from_utf8_lossy(&out.stderr));
    assert!(said.contains("then: ready"), "the tagged flow joined the session: {said}");
    assert!(said.contains("counted: 3000000 sent: 3000000"), "the test's bytes are the real flow's: {said}");
    let log = recv.kill();
    let text = String::from_utf8_lossy(&log.stdout);
    assert!(text.contains("requires authentication"), "{text}");
    assert_eq!(text.matches("without the session's key").count(), 2, "both stolen-cookie flows refused: {text}");
    assert!(text.contains("not the session key's on this connection"), "the replay from another port: {text}");
    assert!(text.contains("from another address"), "the replay from another address: {text}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Python that sends `hellos` (JSON objects updating SPEC) one by one and prints each answer.
fn crafted_specs(hellos: &[&str]) -> String {
    let list = hellos.join(",\n");
    format!(
        r#"{PY_FRAMING}{PROTO_PY}
for change, ports in [{list}]:
    spec = dict(SPEC); spec.update(change)
    s = socket.create_connection(("{RECV_ADDR}", 5300), timeout=5)
    s.sendall(b"UBC1" + frame({{"type": "hello", "version": 3, "spec": spec, "udp_ports": ports}}))
    m = read_msg(s)
    print(m["type"], m.get("reason", ""))
"#
    )
}

#[test]
fn crafted_hellos_are_refused_with_their_reasons_and_cost_no_thread() {
    let _serial = serial();
    let pair = NetnsPair::up("uocr");
    let mut recv = pair.spawn_recv(&["--max-time", "30s"]);
    let script = crafted_specs(&[
        r#"({"interval_ms": 1}, [])"#,
        r#"({"queues": 256, "flows_per_queue": 16777216}, [])"#,
        r#"({"warmup_ms": 2**64 - 1000}, [])"#,
        r#"({"proto": "udp", "len": 1470}, list(range(10000, 18000)))"#,
        r#"({"rate_bps": 2**64 - 1}, [])"#,
    ]);
    let out = pair.cmd(&pair.sender_ns(), "timeout", &["20", "python3", "-c", &script]).output().expect("python3");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said} {}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<&str> = said.lines().collect();
    assert_eq!(lines.len(), 5, "{said}");
    for (line, expect) in
        lines.iter().zip(["shortest is 10 ms", "overflows", "--max-time", "8000 source ports", "--max-rate"])
    {
        assert!(line.starts_with("refuse ") && line.contains(expect), "'{line}' should be a refusal naming '{expect}'");
    }
    let threads = proc_entries(recv.pid(), "task");
    assert!(threads <= 4, "refusals start no threads: recv has {threads}");
    assert!(recv.running());
    let text = String::from_utf8_lossy(&recv.kill().stdout).to_string();
    assert!(!text.lines().any(|l| l.starts_with('[')), "no test started: {text}");
}

#[test]
fn allow_refuses_sources_outside_it() {
    let _serial = serial();
    let pair = NetnsPair::up("uoal");
    let t = ["--target", RECV_ADDR, "-t", "1s", "--warmup", "0s"];
    let recv = pair.spawn_recv(&["--allow", "192.168.0.0/16,fd00::/8"]);
    let (out, _) = pair.send(&t, Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(1), "outside --allow: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&recv.kill().stdout).to_string();
    assert!(text.contains("not in --allow") && !text.lines().any(|l| l.starts_with('[')), "{text}");
    let recv = pair.spawn_recv(&["--allow", "10.77.0.1/32"]);
    let (out, _) = pair.send(&t, Duration::from_secs(20));
    assert!(out.status.success(), "inside --allow: {}", String::from_utf8_lossy(&out.stderr));
    drop(recv);
}

/// Python that holds `count` connections from loopback addresses 127.0.0.2.. (`per` each)
/// to port 5300 for `seconds`: each sends one greeting byte every 2.5 s and is reopened when
/// the receiver closes it. Prints how many it opened in all.
fn slow_drip(count: usize, per: usize, seconds: u32) -> String {
    format!(
        r#"import socket, selectors, time, errno
sel = selectors.DefaultSelector()
def open_one(i):
    s = socket.socket()
    s.bind(("127.0.0.%d" % (2 + i // {per}), 0))
    s.setblocking(False)
    try:
        s.connect(("127.0.0.1", 5300))
    except BlockingIOError:
        pass
    sel.register(s, selectors.EVENT_READ, i)
    return s
socks = {{i: open_one(i) for i in range({count})}}
opened = {count}
end = time.time() + {seconds}
next_drip = time.time()
while time.time() < end:
    for key, _ in sel.select(timeout=0.2):
        i = key.data
        try:
            gone = key.fileobj.recv(4096) == b""
        except OSError:
            gone = True
        if gone:
            sel.unregister(key.fileobj)
            key.fileobj.close()
            socks[i] = open_one(i)
            opened += 1
    if time.time() >= next_drip:
        next_drip += 2.5
        for s in list(socks.values()):
            try:
                s.send(b"U")
            except OSError:
                pass
print(opened)
"#
    )
}

#[test]
fn a_slow_drip_costs_descriptors_not_threads_and_delays_no_real_send() {
    let _serial = serial();
    let pair = NetnsPair::up("uosd");
    let mut recv = pair.spawn_recv(&[]);
    let pid = recv.pid();
    let drip = pair
        .cmd(&pair.receiver_ns(), "prlimit", &["--nofile=8192", "python3", "-c", &slow_drip(2400, 60, 14)])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    std::thread::sleep(Duration::from_secs(4));
    let count = |what: &str| proc_entries(pid, what);
    let (threads, fds) = (count("task"), count("fd"));
    let (out, took) = pair.send(
        &["--target", RECV_ADDR, "-t", "1s", "--warmup", "0s", "--cooldown", "0s", "-J"],
        Duration::from_secs(20),
    );
    let during = (count("task"), count("fd"));
    let opened = drip.wait_with_output().expect("drip");
    assert!(out.status.success(), "a real send during the drip: {}", String::from_utf8_lossy(&out.stderr));
    assert!(u64_at(&json(&out), "/sum/receiver/total_bytes") > 0);
    eprintln!(
        "slow drip: recv had {threads} threads and {fds} fds under the drip ({} and {} during the send); the 1 s send took {:.2} s; the drip opened {} connections",
        during.0,
        during.1,
        took.as_secs_f64(),
        String::from_utf8_lossy(&opened.stdout).trim()
    );
    assert!(fds > 1000, "the drip really held connections open: {fds} fds");
    assert!(threads <= 4, "idle connections cost no threads: {threads}");
    assert!(took < Duration::from_secs(4), "a 1 s test took {took:?}: delayed by more than 3 s");
    assert!(recv.running(), "recv still serves");
    let text = String::from_utf8_lossy(&recv.kill().stdout).to_string();
    let summaries = text.lines().filter(|l| l.starts_with("... and ") && l.contains(" more from 127.0.0.")).count();
    assert!(summaries > 0, "repeated drops are counted, not logged one by one: {}", &text[..text.len().min(3000)]);
    assert!(text.lines().count() < 2000, "the log stays short: {} lines", text.lines().count());
}

#[test]
fn recv_under_ulimit_64_keeps_serving() {
    let _serial = serial();
    let pair = NetnsPair::up("uoul");
    let mut recv = pair.spawn_recv_under(&["prlimit", "--nofile=64"], &[]);
    let drip = pair
        .cmd(&pair.receiver_ns(), "python3", &["-c", &slow_drip(80, 20, 12)])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    std::thread::sleep(Duration::from_secs(2));
    let t = ["--target", RECV_ADDR, "-t", "1s", "--warmup", "0s", "--cooldown", "0s", "-J"];
    for round in 0..2 {
        let (out, took) = pair.send(&t, Duration::from_secs(20));
        assert!(
            out.status.success(),
            "send {round} under 64 fds: {} {}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        assert!(u64_at(&json(&out), "/sum/receiver/total_bytes") > 0);
        assert!(took < Duration::from_secs(8), "send {round} took {took:?}");
        assert!(recv.running(), "recv is still running");
    }
    let _ = drip.wait_with_output();
    let text = String::from_utf8_lossy(&recv.kill().stdout).to_string();
    assert!(text.contains("test from"), "{text}");
}

#[test]
fn max_rate_refuses_faster_tests_and_paces_a_reverse_sender() {
    let _serial = serial();
    let pair = NetnsPair::up("uomr");
    let _recv = pair.spawn_recv(&["--max-rate", "200M"]);
    let t = ["--target", RECV_ADDR, "-t", "2s", "--warmup", "0s", "--cooldown", "0s"];
    let (fast, _) = pair.send(&[&t[..], &["-b", "1G"]].concat(), Duration::from_secs(20));
    one_line_error(&fast, 1, "--max-rate");
    let (unlimited, _) = pair.send(&t, Duration::from_secs(20));
    one_line_error(&unlimited, 1, "pass -b");
    let (reverse, _) = pair.send(&[&t[..], &["--reverse", "-J"]].concat(), Duration::from_secs(30));
    assert!(reverse.status.success(), "reverse under --max-rate: {}", String::from_utf8_lossy(&reverse.stderr));
    let bps = f64_at(&json(&reverse), "/sum/receiver/bits_per_second");
    // Paced: never above the cap. The floor is a sanity bound two orders of magnitude below it.
    assert!((2.0e6..2.3e8).contains(&bps), "the receiver's reverse sending is paced at 200 Mbit/s: {bps:.3e}");
}

#[test]
fn running_out_of_descriptors_pauses_accepting_and_recv_resumes() {
    let _serial = serial();
    let pair = NetnsPair::up("uoem");
    let mut recv = pair.spawn_recv(&[]);
    let pid = recv.pid().to_string();
    // A soft limit of 3 leaves no descriptor to allocate (0-2 are taken): every accept fails
    // with EMFILE, whatever the timing (the handshake cap keeps a filling table below the
    // limit, so flows alone may not get there). The limit comes back a second later.
    let limit = move |soft: &str| {
        let out = std::process::Command::new("prlimit")
            .args(["--pid", &pid, &format!("--nofile={soft}:")])
            .output()
            .expect("prlimit");
        assert!(out.status.success(), "prlimit: {}", String::from_utf8_lossy(&out.stderr));
    };
    let later = limit.clone();
    limit("3");
    let restore = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(1));
        later("1024");
    });
    let t = ["--target", RECV_ADDR, "-t", "1s", "--warmup", "0s", "--cooldown", "0s", "-J"];
    let (out, took) = pair.send(&t, Duration::from_secs(30));
    restore.join().expect("restored the limit");
    assert!(recv.running(), "EMFILE does not end recv");
    assert!(
        out.status.success(),
        "the test that waited for a descriptor: {:?} {} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(u64_at(&json(&out), "/sum/receiver/total_bytes") > 0);
    assert!(took < Duration::from_secs(8), "served once descriptors came back: {took:?}");
    // The trouble counts as over after 2 s without another failure.
    std::thread::sleep(Duration::from_millis(2500));
    let text = String::from_utf8_lossy(&recv.kill().stdout).to_string();
    assert_eq!(text.matches("accepting paused").count(), 1, "said once: {text}");
    assert!(text.contains("Too many open files") && text.contains("accepting again"), "{text}");
}
