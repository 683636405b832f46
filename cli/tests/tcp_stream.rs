//! TCP stream between two network namespaces: byte exactness, interface counters, JSON
//! shape, serving several tests, and every way a test can go wrong.

mod common;

use common::*;
use std::time::Duration;

/// Runs one stream test of `queues` queues and checks the receiver's count against the
/// sender's and against the veth counters.
fn exact_bytes(pair_name: &str, queues: &str, cpus: &str) {
    let _serial = serial();
    let pair = NetnsPair::up(pair_name);
    let recv = pair.spawn_recv(&["--once", "--cpus", cpus]);
    let rx_before = pair.receiver_if_counter("rx_bytes");
    let (out, _) = pair.send(
        &[
            "--target", RECV_ADDR, "-P", queues, "-t", "2", "--warmup", "500ms", "-i", "1s", "--format", "json",
            "--cpus", cpus,
        ],
        Duration::from_secs(30),
    );
    let rx_after = pair.receiver_if_counter("rx_bytes");
    let recv_out = recv.finish(Duration::from_secs(10));
    assert!(out.status.success(), "send failed: {}", String::from_utf8_lossy(&out.stderr));
    assert!(recv_out.status.success(), "recv --once must exit 0 after a clean test");

    let doc = json(&out);
    let sent = u64_at(&doc, "/sum/sender/total_bytes");
    let received = u64_at(&doc, "/sum/receiver/total_bytes");
    assert!(sent > 10 << 20, "a 2.75 s test must move more than 10 MiB, moved {sent}");
    assert_eq!(received, sent, "receiver must count exactly the bytes the sender wrote");

    let nq: usize = queues.parse().unwrap();
    let per_queue = doc["queues"].as_array().expect("queues[]");
    assert_eq!(per_queue.len(), nq, "one entry per queue");
    let mut qsum = 0;
    for (i, q) in per_queue.iter().enumerate() {
        assert_eq!(q["id"].as_u64(), Some(i as u64));
        let qs = u64_at(q, "/sender/total_bytes");
        let qr = u64_at(q, "/receiver/total_bytes");
        assert_eq!(qs, qr, "queue {i}: receiver and sender totals differ");
        assert!(qr > 0, "queue {i} moved nothing");
        assert!(u64_at(q, "/receiver/bytes") <= qr, "window bytes cannot exceed the total");
        qsum += qr;
    }
    assert_eq!(qsum, received, "queues add up to the sum");

    // The window headline is the sum of its intervals, and its rate is bytes / window.
    let window = f64_at(&doc, "/sum/window_seconds");
    assert!((1.8..2.5).contains(&window), "window {window} s should be about the requested 2 s");
    let bytes = u64_at(&doc, "/sum/receiver/bytes");
    let intervals: u64 = doc["intervals"].as_array().unwrap().iter().map(|i| i["bytes"].as_u64().unwrap()).sum();
    assert_eq!(intervals, bytes, "intervals add up to the headline");
    let bps = f64_at(&doc, "/sum/receiver/bits_per_second");
    assert!((bps - bytes as f64 * 8.0 / window).abs() < 1.0, "bits_per_second = bytes*8/window");
    assert!(bytes < received, "warm-up and cool-down bytes are excluded from the window");

    // Wire cross-check: the veth carried the payload plus headers (GSO packets carry one
    // header set per 64 KiB), plus the small control exchange.
    let wire = rx_after - rx_before;
    assert!(wire >= received, "interface saw {wire} bytes, less than the {received} payload bytes");
    assert!(
        (wire as f64) < received as f64 * 1.06 + 1e6,
        "interface saw {wire} bytes for {received} payload bytes: more than 6% overhead"
    );
    let placement = doc["sender"]["placement"].as_str().unwrap();
    assert!(placement.contains(&format!("(CPU {cpus})")), "threads pinned as --cpus asked: {placement}");
    for key in ["schema_version", "test", "cpu", "verdict"] {
        assert!(doc.get(key).is_some(), "JSON lacks the fixed key '{key}'");
    }
}

#[test]
fn one_queue_receiver_counts_every_byte() {
    exact_bytes("ubt-q1", "1", "0");
}

#[test]
fn sixteen_queues_receiver_counts_every_byte() {
    exact_bytes("ubt-q16", "16", "0,1");
}

#[test]
fn recv_serves_consecutive_tests_without_restarting() {
    let _serial = serial();
    let pair = NetnsPair::up("ubt-seq");
    let recv = pair.spawn_recv(&[]);
    for run in 0..3 {
        let (out, _) = pair
            .send(&["--target", RECV_ADDR, "-t", "500ms", "--warmup", "0s", "-P", "2", "-J"], Duration::from_secs(20));
        assert!(out.status.success(), "run {run} failed: {}", String::from_utf8_lossy(&out.stderr));
        let doc = json(&out);
        assert_eq!(u64_at(&doc, "/sum/receiver/total_bytes"), u64_at(&doc, "/sum/sender/total_bytes"), "run {run}");
    }
    let mut recv = recv;
    assert!(recv.running(), "recv must still be serving after three tests");
    let out = recv.kill();
    let log = String::from_utf8_lossy(&out.stdout);
    assert_eq!(log.matches("] done ").count(), 3, "recv reports three finished tests:\n{log}");
}

#[test]
fn usage_errors_exit_2_with_one_line() {
    let run = |args: &[&str]| {
        run_bounded(
            {
                let mut c = std::process::Command::new(bin());
                c.args(args);
                c
            },
            Duration::from_secs(10),
        )
        .0
    };
    one_line_error(&run(&["send", "--target", "127.0.0.1", "--frobnicate"]), 2, "--frobnicate");
    one_line_error(&run(&["send", "--target", "127.0.0.1", "-l", "12Q"]), 2, "12Q");
    one_line_error(&run(&["send", "--target", "127.0.0.1", "-t", "soon"]), 2, "soon");
    one_line_error(&run(&["recv", "--cpus", "7-2"]), 2, "7-2");
    one_line_error(&run(&["send"]), 2, "-c HOST");
}

#[test]
fn closed_port_and_unreachable_host_fail_fast() {
    let _serial = serial();
    let pair = NetnsPair::up("ubt-unr");
    let (out, took) = pair.send(&["--target", RECV_ADDR, "--port", "5399", "-t", "1"], Duration::from_secs(15));
    one_line_error(&out, 1, "connection refused");
    assert!(took < Duration::from_secs(3), "a refused connection is reported at once, took {took:?}");
    // An address inside the pair's own subnet where no host answers (traffic stays on the veth).
    let (out, took) = pair.send(&["--target", "10.77.0.99", "-t", "1"], Duration::from_secs(15));
    assert_eq!(out.status.code(), Some(1), "unreachable host is exit 1");
    assert_eq!(String::from_utf8_lossy(&out.stderr).trim_end().lines().count(), 1);
    assert!(took < Duration::from_secs(6), "unreachable host must fail within a few seconds, took {took:?}");
}

#[test]
fn port_in_use_is_a_clear_error() {
    let _serial = serial();
    let pair = NetnsPair::up("ubt-port");
    let _first = pair.spawn_recv(&["--port", "5311"]);
    let (out, _) =
        run_bounded(pair.cmd(&pair.receiver_ns(), bin(), &["recv", "--port", "5311"]), Duration::from_secs(10));
    one_line_error(&out, 2, "already in use");
}

#[test]
fn receiver_killed_mid_test_gives_partial_report_and_exit_1() {
    let _serial = serial();
    let pair = NetnsPair::up("ubt-kill");
    let mut recv = pair.spawn_recv(&["--once"]);
    let mut c =
        pair.cmd(&pair.sender_ns(), bin(), &["send", "--target", RECV_ADDR, "-t", "10", "--warmup", "0s", "-i", "1s"]);
    let sender = std::thread::spawn(move || {
        run_bounded(
            {
                c.stdin(std::process::Stdio::null());
                c
            },
            Duration::from_secs(40),
        )
    });
    std::thread::sleep(Duration::from_secs(2));
    recv.kill_now();
    let (out, took) = sender.join().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "sender must fail when the receiver dies: {stdout}");
    assert!(took < Duration::from_secs(30), "sender must not hang, took {took:?}");
    assert!(stdout.contains("[SUM]"), "a partial report is printed:\n{stdout}");
    assert!(stdout.contains("error:"), "the report says what went wrong:\n{stdout}");
}

#[test]
fn garbage_and_oversized_control_messages_are_dropped_while_serving_others() {
    let _serial = serial();
    // On loopback in the receiver's namespace: the misbehaving clients are local tools.
    let pair = NetnsPair::up("ubt-junk");
    let recv = pair.spawn_recv(&[]);
    let ns = pair.receiver_ns();
    // A client written in Python inside the namespace: garbage greeting, an oversized frame,
    // malformed JSON, and one that connects and says nothing.
    let script = r#"
import socket, struct, time
def conn():
    s = socket.create_connection(("127.0.0.1", 5300), timeout=5); return s
a = conn(); a.sendall(b"GET / HTTP/1.1\r\n\r\n")
b = conn(); b.sendall(b"UBC1" + struct.pack(">I", 0xFFFFFFF0) + b"x" * 100)
c = conn(); c.sendall(b"UBC1" + struct.pack(">I", 5) + b"{oops")
for s in (a, b, c):
    try:
        s.settimeout(5); s.recv(100)
    except Exception:
        pass
time.sleep(0.2)
print("sent")
"#;
    let (out, _) = run_bounded(pair.cmd(&ns, "python3", &["-c", script]), Duration::from_secs(20));
    assert!(out.status.success(), "python client: {}", String::from_utf8_lossy(&out.stderr));
    // A client that connects and says nothing stays connected during the real test below.
    let silent = "import socket, time\ns = socket.create_connection(('127.0.0.1', 5300))\ntime.sleep(7)\n";
    let silent = pair.cmd(&ns, "python3", &["-c", silent]).spawn().expect("silent client");
    let (out, _) = pair.send(&["--target", RECV_ADDR, "-t", "500ms", "--warmup", "0s", "-J"], Duration::from_secs(20));
    assert!(
        out.status.success(),
        "a real test right after the junk must succeed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc = json(&out);
    assert_eq!(u64_at(&doc, "/sum/receiver/total_bytes"), u64_at(&doc, "/sum/sender/total_bytes"));
    finish(silent, Duration::from_secs(15));
    let log = String::from_utf8_lossy(&recv.kill().stdout).to_string();
    assert!(log.contains("not a uringbench peer"), "garbage greeting dropped:\n{log}");
    assert!(log.contains("exceeds"), "oversized frame dropped:\n{log}");
    assert!(log.contains("malformed control message"), "bad JSON dropped:\n{log}");
    assert!(log.contains("sent nothing"), "silent client timed out:\n{log}");
}

#[test]
fn rate_limited_stream_holds_its_rate() {
    let _serial = serial();
    let pair = NetnsPair::up("ubt-rate");
    let recv = pair.spawn_recv(&["--once"]);
    let (out, _) = pair.send(
        &["--target", RECV_ADDR, "-P", "2", "-t", "2", "--warmup", "500ms", "--rate", "1G", "-J"],
        Duration::from_secs(30),
    );
    recv.finish(Duration::from_secs(10));
    assert!(out.status.success(), "paced send failed: {}", String::from_utf8_lossy(&out.stderr));
    let doc = json(&out);
    let bps = f64_at(&doc, "/sum/receiver/bits_per_second");
    // The pacer's behaviour is the ceiling: never faster than asked. The floor is only a sanity
    // bound, two orders of magnitude below 2 Gbit/s (how close to the rate a loaded machine
    // gets is for benches/).
    assert!(
        (2e7..2.2e9).contains(&bps),
        "--rate 1G per flow over 2 flows must not exceed 2 Gbit/s in all, got {bps:.3e}"
    );
    assert_eq!(u64_at(&doc, "/test/rate_bps"), 2_000_000_000, "the agreed spec carries the rate");
    assert_eq!(u64_at(&doc, "/sum/receiver/total_bytes"), u64_at(&doc, "/sum/sender/total_bytes"));
}

#[test]
fn zerocopy_truth_is_reported() {
    let _serial = serial();
    let pair = NetnsPair::up("ubt-zc");
    let _recv = pair.spawn_recv(&[]);
    let (out, _) = pair.send(
        &["--target", RECV_ADDR, "-t", "1", "--warmup", "200ms", "--zerocopy", "on", "-J"],
        Duration::from_secs(30),
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let doc = json(&out);
    let zc = &doc["zerocopy"];
    assert_eq!(zc["used"], true, "--zerocopy on uses SEND_ZC: {zc}");
    let sends = zc["sends"].as_u64().unwrap();
    let notifications = zc["notifications"].as_u64().unwrap();
    assert!(sends > 100, "SEND_ZC sends counted: {zc}");
    assert!(notifications > 0 && notifications <= sends, "notifications reported: {zc}");
    assert_eq!(zc["copied"].as_u64().unwrap(), notifications, "veth delivers locally: the kernel copies every one");
    assert_eq!(u64_at(&doc, "/sum/receiver/total_bytes"), u64_at(&doc, "/sum/sender/total_bytes"));

    let (out, _) = pair.send(&["--target", RECV_ADDR, "-t", "500ms", "--warmup", "0s", "-J"], Duration::from_secs(30));
    let doc = json(&out);
    assert_eq!(doc["zerocopy"]["used"], false, "auto does not use SEND_ZC on veth");
    let reason = doc["zerocopy"]["reason"].as_str().unwrap();
    assert!(reason.contains("virtual device") && reason.contains("copy anyway"), "auto says why: {reason}");
}

#[test]
fn reverse_and_bidir_count_every_byte_each_way() {
    let _serial = serial();
    let pair = NetnsPair::up("ubt-rev");
    let _recv = pair.spawn_recv(&[]);
    let (out, _) = pair
        .send(&["--target", RECV_ADDR, "-t", "1", "--warmup", "200ms", "-R", "-P", "2", "-J"], Duration::from_secs(30));
    assert!(out.status.success(), "reverse: {}", String::from_utf8_lossy(&out.stderr));
    let doc = json(&out);
    assert_eq!(doc["direction"], "reverse");
    let sent = u64_at(&doc, "/sum/sender/total_bytes");
    assert!(sent > 1 << 20, "the far side sent data back: {sent}");
    assert_eq!(u64_at(&doc, "/sum/receiver/total_bytes"), sent, "this side counted every byte the far side wrote");
    assert_eq!(doc["queues"].as_array().unwrap().len(), 2);

    let (out, _) =
        pair.send(&["--target", RECV_ADDR, "-t", "1", "--warmup", "200ms", "--bidir", "-J"], Duration::from_secs(30));
    assert!(out.status.success(), "bidir: {}", String::from_utf8_lossy(&out.stderr));
    let doc = json(&out);
    assert_eq!(doc["direction"], "bidir");
    for (name, d) in [("forward", &doc), ("reverse", &doc["reverse"])] {
        let sent = u64_at(d, "/sum/sender/total_bytes");
        assert!(sent > 1 << 20, "{name}: data moved");
        assert_eq!(u64_at(d, "/sum/receiver/total_bytes"), sent, "{name}: receiver counted every byte");
    }
    let (out, _) = pair.send(&["--target", RECV_ADDR, "-R", "--bidir"], Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(2), "--reverse and --bidir together is a usage error");
}

#[test]
fn low_memlock_limits_are_explained() {
    let _serial = serial();
    let pair = NetnsPair::up("ubt-mlock");
    // No locked memory at all: io_uring cannot even set up its rings.
    let out = low_memlock(&pair, &pair.receiver_ns(), "0", &["recv", "--port", "5312", "--once"]);
    one_line_error(&out, 1, "RLIMIT_MEMLOCK");
    // 64 KiB: rings work, but the 128 KiB zero-copy payload cannot be registered, so the
    // sender copies instead and says why; the test itself completes.
    let _recv = pair.spawn_recv(&[]);
    let out = low_memlock(
        &pair,
        &pair.sender_ns(),
        "65536",
        &["send", "--target", RECV_ADDR, "-t", "500ms", "--warmup", "0s", "--zerocopy", "on", "-J"],
    );
    assert!(out.status.success(), "low memlock must not fail the test: {}", String::from_utf8_lossy(&out.stderr));
    let doc = json(&out);
    assert_eq!(doc["zerocopy"]["used"], false, "zero-copy falls back to copies");
    let reason = doc["zerocopy"]["reason"].as_str().unwrap();
    assert!(
        reason.contains("RLIMIT_MEMLOCK") && reason.contains("CAP_IPC_LOCK"),
        "names the limit and the fix: {reason}"
    );
    assert_eq!(u64_at(&doc, "/sum/receiver/total_bytes"), u64_at(&doc, "/sum/sender/total_bytes"));
}

#[test]
fn sender_killed_mid_test_leaves_recv_serving() {
    let _serial = serial();
    let pair = NetnsPair::up("ubt-skill");
    let recv = pair.spawn_recv(&[]);
    let mut sender = pair
        .cmd(&pair.sender_ns(), bin(), &["send", "--target", RECV_ADDR, "-t", "10", "--warmup", "0s"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    sender.kill().unwrap();
    let _ = sender.wait();
    // The receiver notices (EOF/reset on the flows), reports the session, and serves the next.
    let (out, took) =
        pair.send(&["--target", RECV_ADDR, "-t", "500ms", "--warmup", "0s", "-J"], Duration::from_secs(30));
    assert!(out.status.success(), "next test after a vanished sender: {}", String::from_utf8_lossy(&out.stderr));
    assert!(took < Duration::from_secs(15), "the receiver did not keep the next sender waiting: {took:?}");
    let doc = json(&out);
    assert_eq!(u64_at(&doc, "/sum/receiver/total_bytes"), u64_at(&doc, "/sum/sender/total_bytes"));
    let log = String::from_utf8_lossy(&recv.kill().stdout).to_string();
    assert_eq!(log.matches("] done ").count(), 2, "both sessions reported:\n{log}");
    assert!(log.contains("incomplete"), "the vanished sender's session is marked incomplete:\n{log}");
}
