//! uringbench against the real iperf 2.1.8 (`/usr/bin/iperf`, Debian), one side at a time,
//! between two network namespaces: our sender to `iperf -s` / `iperf -s -u`, `iperf -c` /
//! `iperf -c -u` to `uringbench recv --iperf2`, the tests we refuse, and a UDP FIN nobody
//! answers. Every spawned process is bounded and killed at the end; pairs are named `ubi*`.
//!
//! Two iperf 2.1.8 facts the assertions rely on (both checked by hand on this machine):
//! - `iperf -s` leaves the first 4 bytes of a header-less TCP connection out of its count
//!   (it reads them to classify the stream): it prints what we wrote less 4 per connection.
//! - `iperf -s -u` counts the FIN as a datagram (its total is our datagrams + 1 and its
//!   bytes include the FIN's), and answers only the first UDP test of a server process
//!   correctly: each UDP test here starts its own server.

mod common;

use common::*;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const PORT: &str = "5001";

/// A background process in a namespace (an iperf server, our receiver): stopped with SIGTERM
/// (so it flushes what it printed), then SIGKILL, by its own pid, when finished or dropped.
struct Bg(Option<Child>);

impl Bg {
    /// `program args` in namespace `ns` with line-buffered stdout (`stdbuf`, which execs in
    /// place, as `ip netns exec` does, so the pid is the program's).
    fn spawn(ns: &str, program: &str, args: &[&str]) -> Bg {
        let child = Command::new("ip")
            .args(["netns", "exec", ns, "stdbuf", "-oL", program])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn background process");
        Bg(Some(child))
    }

    /// Stops the process (SIGTERM, then SIGKILL after 3 s) and returns everything it printed.
    fn stop(mut self) -> String {
        let mut child = self.0.take().expect("child");
        // SAFETY: kill(2) on the pid of a child we spawned and have not reaped.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(3);
        while child.try_wait().expect("try_wait").is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        text(&child.wait_with_output().expect("output"))
    }

    /// Waits (bounded) for it to exit by itself and returns its output.
    fn finish(mut self, limit: Duration) -> Output {
        finish(self.0.take().expect("child"), limit)
    }
}

impl Drop for Bg {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// Waits until something listens on `port` (TCP with `tcp`, else UDP) in `ns`.
fn wait_port(pair: &NetnsPair, ns: &str, port: &str, tcp: bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        let out = pair.cmd(ns, "ss", &[if tcp { "-Htln" } else { "-Huln" }]).output().expect("ss");
        if String::from_utf8_lossy(&out.stdout).contains(&format!(":{port} ")) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("nothing listens on {} port {port} in {ns} after 5 s", if tcp { "TCP" } else { "UDP" });
}

/// A command in the sender namespace, run to completion within `limit`.
fn client(pair: &NetnsPair, program: &str, args: &[&str], limit: Duration) -> (Output, Duration) {
    run_bounded(pair.cmd(&pair.sender_ns(), program, args), limit)
}

/// `uringbench recv --iperf2 ARGS` in the receiver namespace, once it listens on both
/// protocols.
fn spawn_recv_iperf2(pair: &NetnsPair, args: &[&str]) -> Bg {
    let mut all = vec!["recv", "--iperf2"];
    all.extend_from_slice(args);
    let recv = Bg::spawn(&pair.receiver_ns(), bin(), &all);
    wait_port(pair, &pair.receiver_ns(), PORT, true);
    wait_port(pair, &pair.receiver_ns(), PORT, false);
    recv
}

/// The CSV lines of `iperf -y C` (one per connection; a `-1` id is a sum): (bytes, bits/s).
fn iperf_csv(out: &str) -> Vec<(u64, f64)> {
    out.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.trim().split(',').collect();
            if f.len() < 9 || f[5] == "-1" {
                return None;
            }
            Some((f[7].parse().ok()?, f[8].parse().ok()?))
        })
        .collect()
}

/// The token after `key` in `line`.
fn after<'a>(line: &'a str, key: &str) -> &'a str {
    line.split(key).nth(1).and_then(|r| r.split_whitespace().next()).unwrap_or_else(|| panic!("no '{key}' in: {line}"))
}

/// "N/M" → (N, M).
fn ratio(token: &str) -> (u64, u64) {
    let (a, b) = token.split_once('/').unwrap_or_else(|| panic!("not N/M: {token}"));
    (a.parse().expect("N"), b.trim_end_matches(',').parse().expect("M"))
}

/// Our receiver's line for a finished test: "[n] iperf2 PROTO test from ...: B bytes in ...".
fn test_line(log: &str, proto: &str) -> String {
    let lines: Vec<&str> =
        log.lines().filter(|l| l.starts_with('[') && l.contains(&format!("iperf2 {proto} test from"))).collect();
    assert_eq!(lines.len(), 1, "one line per finished test:\n{log}");
    lines[0].to_string()
}

fn line_bytes(line: &str) -> u64 {
    let head = line.split(" bytes in ").next().expect("bytes");
    head.rsplit(' ').next().and_then(|b| b.parse().ok()).unwrap_or_else(|| panic!("bytes in: {line}"))
}

fn within(a: f64, b: f64, share: f64) -> bool {
    (a - b).abs() <= share * a.abs().max(b.abs())
}

/// Our TCP sender with `queues` flows to `iperf -s -y C`.
fn tcp_to_iperf_server(pair_name: &str, queues: &str) {
    let Some((_serial, pair)) = peer_pair("iperf", pair_name) else { return };
    let server = Bg::spawn(&pair.receiver_ns(), "iperf", &["-s", "-y", "C"]);
    wait_port(&pair, &pair.receiver_ns(), PORT, true);
    let (out, _) = pair.send(
        &["--iperf2", "--target", RECV_ADDR, "-P", queues, "-t", "2", "--cpus", "0", "-J"],
        Duration::from_secs(30),
    );
    assert!(out.status.success(), "send --iperf2 failed: {}", text(&out));
    std::thread::sleep(Duration::from_millis(500));
    let printed = server.stop();
    let doc = json(&out);
    let n: usize = queues.parse().unwrap();
    let ours = u64_at(&doc, "/sum/sender/total_bytes");
    let our_bps = f64_at(&doc, "/sum/sender/bits_per_second");
    assert_eq!(doc["peer"], "iperf2", "the native document, marked as against iperf2");
    assert!(doc["receiver"].is_null(), "iperf -s reports nothing back over TCP: no receiver side");
    // One flow per queue (`-P N`): queue N's whole-test bytes are connection N's.
    let mut our_flows: Vec<u64> =
        doc["queues"].as_array().expect("queues[]").iter().map(|q| u64_at(q, "/sender/total_bytes") - 4).collect();
    let theirs = iperf_csv(&printed);
    assert_eq!(theirs.len(), n, "iperf -s prints one line per connection:\n{printed}");
    let mut their_flows: Vec<u64> = theirs.iter().map(|t| t.0).collect();
    let their_bytes: u64 = their_flows.iter().sum();
    let their_bps: f64 = theirs.iter().map(|t| t.1).sum();
    eprintln!(
        "-P {queues}: ours {ours} bytes {:.4} Gbit/s; iperf -s {their_bytes} bytes {:.4} Gbit/s",
        our_bps / 1e9,
        their_bps / 1e9
    );
    // A sanity floor two orders of magnitude below the gigabytes a 2 s test moves here; the
    // byte counts below are the check.
    assert!(ours > 20 << 20, "a 2 s test moves more than 20 MiB, moved {ours}");
    assert_eq!(their_bytes, ours - 4 * n as u64, "iperf -s counts every byte we wrote but each connection's first 4");
    assert_eq!(u64_at(&doc, "/sum/sender/iperf2_counts_bytes"), their_bytes, "we say what iperf -s will print");
    our_flows.sort_unstable();
    their_flows.sort_unstable();
    assert_eq!(our_flows, their_flows, "per connection too");
    // The rates divide the same bytes by each side's own clock: ours the test's window, iperf -s
    // each connection's from its accept to its last read (their rates summed). On a 2 s test
    // a 20 ms gap between those clocks is 1%, which a loaded 2-vCPU CI runner reached (23.74
    // against 23.46 Gbit/s with the bytes equal); the byte counts above are the exact check,
    // this one catches a rate computed wrongly (bits for bytes, one connection's time).
    assert!(within(our_bps, their_bps, 0.03), "rates agree within 3%: ours {our_bps:.4e}, iperf2 {their_bps:.4e}");
}

#[test]
fn tcp_sender_one_flow_to_iperf_server() {
    tcp_to_iperf_server("ubi-st1", "1");
}

#[test]
fn tcp_sender_four_flows_to_iperf_server() {
    tcp_to_iperf_server("ubi-st4", "4");
}

/// Our UDP sender at 500 Mbit/s to `iperf -s -u -y C`, with GSO or one send per datagram.
fn udp_to_iperf_server(pair_name: &str, extra: &[&str]) {
    let Some((_serial, pair)) = peer_pair("iperf", pair_name) else { return };
    let server = Bg::spawn(&pair.receiver_ns(), "iperf", &["-s", "-u", "-y", "C"]);
    wait_port(&pair, &pair.receiver_ns(), PORT, false);
    let mut args = vec!["--iperf2", "--target", RECV_ADDR, "-u", "-b", "500M", "-t", "2", "-J"];
    args.extend_from_slice(extra);
    let (out, took) = pair.send(&args, Duration::from_secs(30));
    assert!(out.status.success(), "send --iperf2 -u failed: {}", text(&out));
    std::thread::sleep(Duration::from_millis(300));
    let printed = server.stop();
    let doc = json(&out);
    let sent = u64_at(&doc, "/sum/sender/datagrams");
    let sent_bytes = u64_at(&doc, "/sum/sender/total_bytes");
    let reported_lost = u64_at(&doc, "/sum/receiver/lost");
    // The native keys: `expected` is iperf2's total (its highest sequence number), `datagrams`
    // what arrived of it.
    let reported_total = u64_at(&doc, "/sum/receiver/expected");
    let reported_received = u64_at(&doc, "/sum/receiver/datagrams");
    let reported_bytes = u64_at(&doc, "/sum/receiver/bytes");
    // iperf -s -u -y C: ...,bytes,bits/s,jitter ms,lost,total,loss %,out-of-order
    let line = printed
        .lines()
        .find(|l| l.split(',').count() >= 14)
        .unwrap_or_else(|| panic!("iperf -s -u printed no CSV report:\n{printed}"));
    let f: Vec<&str> = line.split(',').collect();
    let (their_bytes, their_lost, their_total): (u64, u64, u64) =
        (f[7].parse().unwrap(), f[10].parse().unwrap(), f[11].parse().unwrap());
    let path = doc["sender"]["path"].as_str().unwrap().to_string();
    eprintln!(
        "{extra:?}: ours {sent} datagrams {sent_bytes} bytes; iperf -s -u {their_total} datagrams {their_bytes} bytes, \
         lost {their_lost}; our report copy: {reported_total} / {reported_bytes} / lost {reported_lost}; {path}; {took:?}"
    );
    // Sanity floor, two orders of magnitude below what the rate asks for.
    assert!(sent > 850, "2 s at 500 Mbit/s is about 85 000 datagrams, sent {sent}");
    assert_eq!(their_total, sent + 1, "iperf2's total is our datagrams + its count of our FIN");
    assert!(within(their_total as f64, sent as f64, 0.01), "datagram counts within 1%");
    let expected_bytes = sent_bytes + 1470 - their_lost * 1470;
    assert_eq!(their_bytes, expected_bytes, "iperf2's bytes: ours + the FIN's - the lost ones'");
    assert!(within(their_bytes as f64, (sent_bytes - their_lost * 1470) as f64, 0.01), "bytes within 1%");
    assert_eq!(reported_lost, their_lost, "the report we print carries iperf2's lost count");
    assert_eq!((reported_total, reported_bytes), (their_total, their_bytes), "and its totals");
    assert_eq!(reported_received, their_total - their_lost, "received: iperf2's total less its lost");
    assert_eq!(doc["peer"], "iperf2");
    assert_eq!(doc["receiver"]["placement"], "iperf2 server", "the receiver side is iperf2's report");
    if extra.contains(&"--no-gso") {
        assert!(path.contains("one send per datagram"), "per-datagram path ran: {path}");
    } else {
        assert!(path.contains("GSO"), "GSO path ran: {path}");
    }
}

#[test]
fn udp_sender_gso_to_iperf_server() {
    udp_to_iperf_server("ubi-su", &[]);
}

#[test]
fn udp_sender_no_gso_to_iperf_server() {
    udp_to_iperf_server("ubi-su1", &["--no-gso"]);
}

/// Two UDP flows to `iperf -s -u` (its text report): our total is the one on its `[SUM]` line,
/// and our `lost` is its flows' gaps less the late arrivals over all flows, when it counted the
/// late arrivals its report carried. iperf -s often counts 17 of one flow's datagrams late on the
/// other here (17 gaps on one flow, 17 out of order on the other: none lost), where taking the
/// gaps would say 17.
#[test]
fn udp_sender_two_flows_report_iperf_servers_sum_line() {
    let Some((_serial, pair)) = peer_pair("iperf", "ubi-su2") else { return };
    let server = Bg::spawn(&pair.receiver_ns(), "iperf", &["-s", "-u"]);
    wait_port(&pair, &pair.receiver_ns(), PORT, false);
    let args = ["--iperf2", "--target", RECV_ADDR, "-u", "-b", "200M", "-P", "2", "-t", "2", "-J"];
    let (out, _) = pair.send(&args, Duration::from_secs(30));
    assert!(out.status.success(), "send --iperf2 -u -P 2 failed: {}", text(&out));
    std::thread::sleep(Duration::from_millis(300));
    let printed = server.stop();
    let doc = json(&out);
    // "[SUM] 0.0000-2.0 sec  95.4 MBytes  400 Mbits/sec  LOST/TOTAL (x%)"
    let (their_lost, their_total) = printed
        .lines()
        .filter(|l| l.starts_with("[SUM]"))
        .find_map(|l| {
            l.split_whitespace().find_map(|w| {
                let (lost, total) = w.split_once('/')?;
                Some((lost.parse::<u64>().ok()?, total.parse::<u64>().ok()?))
            })
        })
        .unwrap_or_else(|| panic!("iperf -s -u printed no [SUM] lost/total:\n{printed}"));
    // "[SUM] 0.0000-2.0 sec  17 datagrams received out-of-order", when there were any.
    let their_late = printed
        .lines()
        .filter(|l| l.starts_with("[SUM]") && l.contains("datagrams received out-of-order"))
        .find_map(|l| l.split_whitespace().nth(3)?.parse::<u64>().ok())
        .unwrap_or(0);
    // Each flow's own line, "[  1] 0.0000-1.9888 sec  46.6 MBytes  196 Mbits/sec  0.001 ms 737/33967 (2.2%)".
    let flows_lost: u64 = printed
        .lines()
        .filter(|l| l.starts_with("[ ") && !l.contains("datagrams received out-of-order"))
        .filter_map(|l| {
            l.split_whitespace().find_map(|w| {
                let (lost, total) = w.split_once('/')?;
                total.parse::<u64>().ok()?;
                lost.parse::<u64>().ok()
            })
        })
        .sum();
    let (lost, expected) = (u64_at(&doc, "/sum/receiver/lost"), u64_at(&doc, "/sum/receiver/expected"));
    let late = u64_at(&doc, "/sum/receiver/out_of_order");
    eprintln!(
        "iperf -s [SUM] {their_lost}/{their_total}, flows {flows_lost} lost, {their_late} late; ours {lost}/{expected}, {late} late"
    );
    assert_eq!(expected, their_total, "iperf2's total");
    if their_late == late {
        // The datagrams lost are the flows' gaps less the late arrivals over all flows, so the
        // flows' lines are the reference. iperf -s's [SUM] line is not their sum: it printed
        // that, or the flows' gaps as they are (754 = 737 + 17 beside 17 out of order), or a
        // figure between (20 beside flows 27 and 17 late, in a CI run), so it is only held to
        // lie between the two.
        let truly_lost = flows_lost.saturating_sub(their_late);
        assert!(
            (truly_lost..=flows_lost).contains(&their_lost),
            "iperf -s's [SUM] lost lies outside its flows' gaps less and with the late arrivals:\n{printed}"
        );
        assert_eq!(lost, truly_lost, "the flows' lost less the late arrivals, by iperf -s's lines:\n{printed}");
        assert_eq!(u64_at(&doc, "/sum/receiver/datagrams"), their_total - truly_lost);
    } else {
        // iperf2 prints its counts after it sent its report: a late arrival counted in between
        // lowers its printed loss below the report's. (One run in about 25 had the two differ
        // before this branch existed; its output was not kept.)
        assert!(their_late > late, "iperf2 prints more late arrivals than its report had: {their_late} vs {late}");
        assert!(
            lost >= their_lost && lost - their_lost <= their_late - late,
            "ours {lost} lost, [SUM] {their_lost}: apart by at most the {} arrivals after the report:\n{printed}",
            their_late - late
        );
    }
}

/// `iperf -c -P N -y C` to our `recv --iperf2 --once`.
fn iperf_tcp_client_to_us(pair_name: &str, parallel: &str) {
    let Some((_serial, pair)) = peer_pair("iperf", pair_name) else { return };
    let recv = spawn_recv_iperf2(&pair, &["--once", "--cpus", "1"]);
    let (out, _) =
        client(&pair, "iperf", &["-c", RECV_ADDR, "-t", "2", "-P", parallel, "-y", "C"], Duration::from_secs(20));
    assert!(out.status.success(), "iperf -c failed: {}", text(&out));
    let recv_out = recv.finish(Duration::from_secs(15));
    assert!(recv_out.status.success(), "recv --once exits 0 after a complete test: {}", text(&recv_out));
    let log = text(&recv_out);
    let line = test_line(&log, "TCP");
    let ours = line_bytes(&line);
    let theirs = iperf_csv(&String::from_utf8_lossy(&out.stdout));
    let n: usize = parallel.parse().unwrap();
    assert_eq!(theirs.len(), n, "one CSV line per client thread: {}", text(&out));
    let their_bytes: u64 = theirs.iter().map(|t| t.0).sum();
    eprintln!("-P {parallel}: iperf -c wrote {their_bytes} bytes; we counted {ours}: {line}");
    assert!(line.contains(&format!("{n} flow")), "all flows are one test: {line}");
    assert!(line.contains("iperf 2.1.8"), "the client's version is named: {line}");
    assert!(within(ours as f64, their_bytes as f64, 0.01), "within 1%: ours {ours}, iperf -c {their_bytes}");
    assert_eq!(ours, their_bytes, "in fact exact: both count every byte to EOF, the test header included");
}

#[test]
fn iperf_tcp_client_one_flow_to_our_receiver() {
    iperf_tcp_client_to_us("ubi-rt1", "1");
}

#[test]
fn iperf_tcp_client_four_flows_to_our_receiver() {
    iperf_tcp_client_to_us("ubi-rt4", "4");
}

#[test]
fn iperf_udp_client_prints_our_report() {
    let Some((_serial, pair)) = peer_pair("iperf", "ubi-ru") else { return };
    let recv = spawn_recv_iperf2(&pair, &["--once", "--cpus", "1"]);
    let (out, _) = client(
        &pair,
        "iperf",
        &["-c", RECV_ADDR, "-u", "-b", "200M", "-l", "1470", "-t", "2"],
        Duration::from_secs(20),
    );
    let printed = text(&out);
    assert!(out.status.success(), "iperf -c -u failed: {printed}");
    let recv_out = recv.finish(Duration::from_secs(15));
    let log = text(&recv_out);
    assert!(recv_out.status.success(), "recv --once exits 0 after a complete test: {log}");
    let line = test_line(&log, "UDP");
    // The client's "Server Report:" block ends with the figures line.
    let report = printed
        .split("Server Report:")
        .nth(1)
        .and_then(|rest| rest.lines().find(|l| l.contains(" sec ")))
        .unwrap_or_else(|| panic!("iperf -c printed no server report:\n{printed}"));
    assert!(!printed.contains("did not receive ack"), "the report came back in time:\n{printed}");
    let sent: u64 = after(&printed, "Sent ").parse().expect("Sent N datagrams");
    // "[  1] 0.0000-1.9979 sec  50.0 MBytes   210 Mbits/sec   0.001 ms 0/35669 (0%)"
    let tokens: Vec<&str> = report.split_whitespace().collect();
    let at = |unit: &str| tokens.iter().position(|t| *t == unit).map(|i| tokens[i - 1]).expect(unit);
    let their_mbytes: f64 = at("MBytes").parse().unwrap();
    let their_mbps: f64 = at("Mbits/sec").parse().unwrap();
    let their_jitter_ms: f64 = at("ms").parse().unwrap();
    let (their_lost, their_total) = ratio(tokens.iter().find(|t| t.contains('/') && !t.contains("sec")).unwrap());

    let ours = line_bytes(&line);
    let (our_lost, our_total) = ratio(after(&line, "lost "));
    let our_jitter_ms: f64 = after(&line, "jitter ").parse().unwrap();
    let our_mbps: f64 = {
        let rate = line.split(" = ").nth(1).unwrap();
        let mut t = rate.split_whitespace();
        let value: f64 = t.next().unwrap().parse().unwrap();
        match t.next().unwrap().trim_end_matches(',') {
            "Gbits/sec" => value * 1e3,
            "Mbits/sec" => value,
            other => panic!("unexpected unit {other}"),
        }
    };
    eprintln!("iperf -c printed: {report}\nwe printed: {line}\nclient sent {sent} datagrams");
    assert_eq!((their_lost, their_total), (our_lost, our_total), "lost/total exactly ours");
    assert_eq!(our_total + 2, sent, "the client's 'Sent' counts its data datagrams plus 2 (FIN id)");
    assert!(within(their_mbytes, ours as f64 / 1048576.0, 0.01), "bytes within 1%: {their_mbytes} MB vs {ours}");
    assert!(within(their_mbps, our_mbps, 0.01), "rate within 1%: {their_mbps} vs {our_mbps}");
    assert!(
        (their_jitter_ms - our_jitter_ms).abs() <= 0.001 + 0.01 * our_jitter_ms,
        "jitter: {their_jitter_ms} vs {our_jitter_ms}"
    );
    // Sanity floor, two orders of magnitude below what the rate asks for.
    assert!(our_total > 340, "2 s at 200 Mbit/s is about 34 000 datagrams: {our_total}");
}

#[test]
fn tests_needing_the_receiver_to_send_are_refused() {
    let Some((_serial, pair)) = peer_pair("iperf", "ubi-ref") else { return };
    let recv = spawn_recv_iperf2(&pair, &[]);
    for args in [vec!["-r"], vec!["--full-duplex"], vec!["-R"], vec!["-d"], vec!["-u", "-b", "10M", "-R"]] {
        let mut all = vec!["10", "iperf", "-c", RECV_ADDR, "-t", "1"];
        all.extend_from_slice(&args);
        // iperf 2.1.8's --full-duplex client hung once in CI after our close had already broken
        // its write ("tcp write failed: Broken pipe", then nothing for 20 s): its own threads,
        // with our end gone. A hang after such a sign of our close gets one more try; any
        // other hang, or a second one, fails.
        for attempt in 1..=2 {
            let (out, took) = client(&pair, "timeout", &all, Duration::from_secs(20));
            let said = text(&out);
            eprintln!("iperf -c {args:?} ended after {took:?} (try {attempt})");
            let hung = out.status.code() == Some(124);
            let closed_by_us = said.contains("Broken pipe") || said.contains("Connection reset");
            if hung && closed_by_us && attempt == 1 {
                eprintln!("iperf hung after our close broke its connection; once more:\n{said}");
                continue;
            }
            assert!(!hung, "iperf -c {args:?} must not hang on our refusal: {took:?}\n{said}");
            break;
        }
    }
    // Still serving: a plain test right after the refusals is counted.
    let (out, _) = client(&pair, "iperf", &["-c", RECV_ADDR, "-t", "1", "-y", "C"], Duration::from_secs(20));
    assert!(out.status.success(), "{}", text(&out));
    std::thread::sleep(Duration::from_millis(300));
    let log = recv.stop();
    for needle in [
        "refused iperf2 TCP test from 10.77.0.1:",
        "-r (trade-off test) needs the receiver to send; `uringbench recv --iperf2` only receives",
        "--full-duplex needs the receiver to send",
        "-R (reverse) needs the receiver to send",
        "-d (dual test) needs the receiver to send",
        "refused iperf2 UDP test from 10.77.0.1:",
        "its datagrams are ignored",
    ] {
        assert!(log.contains(needle), "recv log lacks '{needle}':\n{log}");
    }
    assert_eq!(log.matches("refused iperf2 UDP test").count(), 1, "a refused UDP client is logged once:\n{log}");
    let line = test_line(&log, "TCP");
    assert_eq!(line_bytes(&line), iperf_csv(&String::from_utf8_lossy(&out.stdout))[0].0, "{line}");
}

#[test]
fn udp_fin_nobody_answers_is_a_bounded_one_line_error() {
    let _serial = serial();
    let pair = NetnsPair::up("ubi-nofin");
    // Inside the pair: the receiver's address with nothing on the port (ICMP port
    // unreachable), and an address of the subnet where no host is.
    for (target, port) in [(RECV_ADDR, "5999"), ("10.77.0.99", PORT)] {
        let (out, took) = pair
            .send(&["--iperf2", "--target", target, "-p", port, "-u", "-b", "50M", "-t", "1"], Duration::from_secs(20));
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        eprintln!("{target}:{port}: exit {:?} after {took:?}: {stderr}", out.status.code());
        assert_eq!(out.status.code(), Some(1), "no report is exit 1");
        assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
        assert!(stderr.contains("no iperf2 server report") && stderr.contains("iperf -s -u"), "{stderr}");
        assert!(took < Duration::from_secs(6), "1 s of sending + a 2 s wait for the report, took {took:?}");
        assert!(String::from_utf8_lossy(&out.stdout).contains("[SUM]"), "our sender side is still printed");
    }
    // TCP to a port where nothing listens: at once, naming what to start there.
    let (out, took) = pair.send(&["--iperf2", "--target", RECV_ADDR, "-p", "5999", "-t", "1"], Duration::from_secs(20));
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("start `iperf -s -p 5999` there"), "{stderr}");
    assert!(took < Duration::from_secs(3), "{took:?}");
}
