//! iperf3's burst form `-b RATE/N` (issue 41) against Debian's iperf3 3.12 between two network
//! namespaces, both roles: `send --iperf3 -b RATE/N` asks for it (`burst` in the parameters)
//! and sends in bursts, `recv --iperf3` sends a `-R -b RATE/N` client's streams in bursts; the
//! bytes and rates are iperf3's own counts. That the bursts reach the wire back to back is
//! measured apart, by a receiver that reads the kernel's receive time of every datagram. The
//! pacing rule itself is unit-tested in the engine (transport::pace). Pairs are named `ubb*`;
//! every process is bounded.

mod common;

use common::*;
use std::process::Stdio;
use std::time::{Duration, Instant};

const PORT: &str = "5201";
const DATAGRAM: u64 = 1400;

/// What `iperf3 -J` printed, parsed.
fn iperf3_json(out: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("iperf3 -J output is not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

/// `rate` is within `percent` of `want` bits/s.
fn near(rate: f64, want: f64, percent: f64) -> bool {
    (rate - want).abs() <= want * percent / 100.0
}

/// `send --iperf3 -b 200M/10 -u` and `-b 100M/10` (TCP) against `iperf3 -s -J`: the burst goes
/// out as iperf3's key, the server counted every byte we sent (UDP: every datagram it did not
/// call lost, and at most a few at the end): the rate over our 2 s within 5 %, and its own
/// rate for its first second within 15 %.
#[test]
fn send_iperf3_bursts_to_iperf3_server() {
    let Some((_serial, pair)) = peer_pair("iperf3", "ubba") else { return };
    for (proto, rate, want) in [(&["-u", "-l", "1400"][..], "200M/10", 200e6), (&[][..], "100M/10", 100e6)] {
        let server = pair.iperf3_server(PORT, &["-1", "-J"]);
        let args = [&["--iperf3", "-c", "10.77.0.2", "-b", rate, "-t", "2", "--warmup", "0", "-J"][..], proto].concat();
        let (out, _) = pair.send(&args, Duration::from_secs(30));
        let server = finish(server, Duration::from_secs(10));
        assert!(out.status.success(), "send {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        let (ours, theirs) = (json(&out), iperf3_json(&server));
        assert_eq!(ours["iperf3"]["params"]["burst"].as_u64(), Some(10), "{rate}: asked as iperf3 asks");
        assert_eq!(ours["test"]["burst"].as_u64(), Some(10), "{rate}: and our loops ran with it");
        let sent = u64_at(&ours, "/sum/sender/total_bytes");
        let counted = u64_at(&theirs, "/end/sum_received/bytes");
        // What iperf3 -s saw sent: TCP its count, UDP its highest sequence number's datagrams
        // (those it counted and those it found lost).
        let seen = if proto.is_empty() {
            assert_eq!(counted, sent, "{rate}: iperf3 -s counted every byte we wrote");
            counted
        } else {
            let lost = u64_at(&theirs, "/end/sum_received/lost_packets");
            let highest = u64_at(&theirs, "/end/sum_received/packets");
            assert!(sent % DATAGRAM == 0, "whole datagrams: {sent}");
            assert_eq!(counted, (highest - lost) * DATAGRAM, "{rate}: every datagram not called lost was counted");
            assert!(sent / DATAGRAM - highest <= 64, "{rate}: at most a few unseen at the end: {sent} {highest}");
            highest * DATAGRAM
        };
        // That is the rate over our 2 s; its own rate for its first second is the rate too
        // (its whole-test average runs over its own, longer, span).
        let over_2_s = seen as f64 * 8.0 / 2.0;
        assert!(near(over_2_s, want, 5.0), "{rate}: iperf3 -s saw {seen} bytes sent: {over_2_s} bit/s over 2 s");
        let first = f64_at(&theirs["intervals"][0]["sum"], "/bits_per_second");
        assert!(near(first, want, 15.0), "{rate}: iperf3 -s measured {first} bit/s in its first second");
        println!("send --iperf3 -b {rate} {proto:?}: we sent {sent} bytes, iperf3 -s counted {counted}, {first:.0} bit/s in its first second");
    }
}

/// The number just after the first `marker` in `line`.
fn number_after(line: &str, marker: &str) -> u64 {
    line.split(marker).nth(1).and_then(|t| t.split(' ').next()).and_then(|b| b.parse().ok()).expect(marker)
}

/// `iperf3 -c -R -u -b 100M/8` and `-R -b 50M/10` (TCP) against `recv --iperf3`: we send in
/// bursts (the test line says so) and the client's own report shows the rate it asked for in
/// its first second (we stop sending 250 ms before its end, so its whole-test average is
/// lower), and the bytes: TCP every byte we sent less at most what the buffers hold, UDP every
/// datagram it did not call lost.
#[test]
fn iperf3_client_reverse_bursts_from_our_receiver() {
    let Some((_serial, pair)) = peer_pair("iperf3", "ubbb") else { return };
    for (proto, rate, want) in [(&["-u", "-l", "1400"][..], "100M/8", 100e6), (&[][..], "50M/10", 50e6)] {
        let recv = pair.spawn_recv(&["--iperf3", "--once", "--port", PORT]);
        let args = [&["-c", "10.77.0.2", "-p", PORT, "-t", "2", "-R", "-b", rate, "-J"][..], proto].concat();
        let (out, _) = run_bounded(pair.cmd(&pair.sender_ns(), "iperf3", &args), Duration::from_secs(30));
        let log = recv.finish(Duration::from_secs(10));
        let log = String::from_utf8_lossy(&log.stdout).to_string();
        assert!(out.status.success(), "iperf3 {args:?}: {}\nour log:\n{log}", String::from_utf8_lossy(&out.stdout));
        let theirs = iperf3_json(&out);
        let line = log.lines().find(|l| l.starts_with("[1] iperf3 ")).unwrap_or_else(|| panic!("no test line:\n{log}"));
        let unit = if proto.is_empty() { "writes" } else { "datagrams" };
        let burst = rate.split('/').nth(1).unwrap();
        assert!(line.contains(&format!(" in bursts of {burst} {unit}")), "{rate}: {line}");
        assert!(!line.contains("incomplete"), "{line}");
        let sent = number_after(line, "; sent ");
        let received = u64_at(&theirs, "/end/sum_received/bytes");
        if proto.is_empty() {
            assert!(received <= sent && sent - received <= 8 << 20, "{rate}: it read what we sent: {line}");
        } else {
            let lost = u64_at(&theirs, "/end/sum_received/lost_packets");
            let highest = u64_at(&theirs, "/end/sum_received/packets");
            assert_eq!(received, (highest - lost) * DATAGRAM, "{rate}: every datagram not called lost was counted");
            assert!(sent / DATAGRAM - highest <= 64, "{rate}: at most a few unseen at the end: {sent} {highest}");
        }
        let first = f64_at(&theirs["intervals"][0]["sum"], "/bits_per_second");
        assert!(near(first, want, 15.0), "{rate}: iperf3 -c received {first} bit/s in its first second");
        assert!(received > 5_000_000, "{rate}: real traffic: {received}");
        println!("iperf3 -c -R -b {rate} {proto:?}: we sent {sent} bytes, it received {received}, {first:.0} bit/s in its first second");
    }
}

/// A receiver in the receiver namespace on UDP 10.77.0.2:5001 that takes each datagram's
/// kernel receive time (SO_TIMESTAMPNS) and prints, as JSON, the sizes of the runs of
/// datagrams that arrived less than 200 us apart, once 1 s passes without one (at most 10 s).
const PY_RUNS: &str = r#"
import json, socket, struct, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
s.setsockopt(socket.SOL_SOCKET, 35, 1)  # SO_TIMESTAMPNS
s.bind(("10.77.0.2", 5001))
s.settimeout(1.0)
stamps, until = [], time.time() + 10
while time.time() < until:
    try:
        _, anc, _, _ = s.recvmsg(65536, 256)
    except socket.timeout:
        if stamps:
            break
        continue
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == 35:
            sec, nsec = struct.unpack("qq", data[:16])
            stamps.append(sec * 10**9 + nsec)
runs = []
for i, t in enumerate(stamps):
    if i == 0 or t - stamps[i - 1] > 200_000:
        runs.append(0)
    runs[-1] += 1
print(json.dumps(runs))
"#;

/// Runs `send --ntttcp -u ARGS` (plain datagrams to port 5001, no control connection) to
/// [`PY_RUNS`], and returns the runs it saw.
fn datagram_runs(pair: &NetnsPair, rate: &str) -> Vec<u64> {
    let child = pair
        .cmd(&pair.receiver_ns(), "python3", &["-c", PY_RUNS])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn python3");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let out = pair.cmd(&pair.receiver_ns(), "ss", &["-Huln"]).output().expect("ss");
        if String::from_utf8_lossy(&out.stdout).contains(":5001 ") {
            break;
        }
        assert!(Instant::now() < deadline, "the datagram receiver did not bind within 5 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    let args =
        ["--ntttcp", "-u", "-c", "10.77.0.2", "-l", "1400", "-b", rate, "-t", "1", "--warmup", "0", "--cooldown", "0"];
    let (out, _) = pair.send(&args, Duration::from_secs(20));
    let runs = finish(child, Duration::from_secs(15));
    assert!(out.status.success(), "send {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&runs.stdout)
        .unwrap_or_else(|e| panic!("receiver: {e}: {}", String::from_utf8_lossy(&runs.stderr)))
}

/// `-b 20M/10`: the datagrams arrive in runs of 10 (a run is datagrams less than 200 us
/// apart; bursts are 5.6 ms apart at 20 Mbit/s); a run longer than 10 is bursts that caught
/// up after a stall, so whole bursts. `-b 20M` without a burst: one datagram every 560 us.
#[test]
fn bursts_arrive_back_to_back() {
    let Some((_serial, pair)) = peer_pair("python3", "ubbc") else { return };
    let runs = datagram_runs(&pair, "20M/10");
    let datagrams: u64 = runs.iter().sum();
    // 20 Mbit/s for 1 s in 1400-byte datagrams: 1786 (less whatever a start or end cuts).
    assert!((1500..=1900).contains(&datagrams), "{datagrams} datagrams in {} runs", runs.len());
    assert!(runs.iter().all(|n| n % 10 == 0), "whole bursts of 10: {runs:?}");
    let tens = runs.iter().filter(|&&n| n == 10).count();
    assert!(tens * 10 >= runs.len() * 9, "at least 9 runs in 10 are one burst: {runs:?}");
    println!("-b 20M/10: {datagrams} datagrams in {} runs, {tens} of exactly 10", runs.len());
    let smooth = datagram_runs(&pair, "20M");
    let singles = smooth.iter().filter(|&&n| n == 1).count();
    assert!(singles * 10 >= smooth.len() * 8, "without a burst, mostly one datagram at a time: {smooth:?}");
    println!("-b 20M: {} runs, {singles} of one datagram", smooth.len());
}

/// The native `send -b RATE/N`: the same loops, so the same bursts. Forward and `-R` (the
/// receiver sends, the burst in the test's spec) against `uringbench recv`: the far end's
/// count over the window is the rate, within 10 %. A burst out of 1..=1000 is one line.
#[test]
fn native_send_bursts_both_ways() {
    let _serial = serial();
    let pair = NetnsPair::up("ubbd");
    let recv = pair.spawn_recv(&[]);
    for mode in [&[][..], &["-R"][..]] {
        let args =
            [&["-c", "10.77.0.2", "-u", "-l", "1400", "-b", "40M/10", "-t", "1", "-i", "0", "-J"][..], mode].concat();
        let (out, _) = pair.send(&args, Duration::from_secs(30));
        assert!(out.status.success(), "send {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        let doc = json(&out);
        assert_eq!(doc["test"]["burst"].as_u64(), Some(10), "{mode:?}: {}", doc["test"]);
        let received = f64_at(&doc, "/sum/receiver/bits_per_second");
        assert!(near(received, 40e6, 10.0), "{mode:?}: the receiving end counted {received} bit/s");
    }
    drop(recv.kill());
    for (rate, needle) in
        [("100M/0", "N from 1 to 1000"), ("100M/1001", "N from 1 to 1000"), ("fast/10", "invalid rate")]
    {
        let (out, _) = pair.send(&["-c", "10.77.0.2", "-b", rate, "-t", "1"], Duration::from_secs(10));
        one_line_error(&out, 2, needle);
    }
}
