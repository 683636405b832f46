//! uringbench against the real iperf3 (`/usr/bin/iperf3`, Debian's 3.12), one side at a time,
//! between two network namespaces: our sender to `iperf3 -s`, `iperf3 -c` to
//! `uringbench recv --iperf3`. Byte counts are compared across the two tools' own reports.
//! Every spawned process is bounded; pairs are named `ub3*`.

mod common;

use common::*;
use std::process::{Child, Stdio};
use std::time::Duration;

const PORT: &str = "5201";

/// `iperf3 -s -1 -J` in the receiver namespace (one test, then it exits), once it listens.
fn iperf3_server(pair: &NetnsPair) -> Child {
    iperf3_server_with(pair, &["-1", "-J"])
}

/// `iperf3 -s` with `extra` arguments in the receiver namespace, once it listens.
fn iperf3_server_with(pair: &NetnsPair, extra: &[&str]) -> Child {
    pair.iperf3_server(PORT, extra)
}

/// What `iperf3 -J` printed, parsed.
fn iperf3_json(out: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("iperf3 -J output is not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

/// `send --iperf3 -P flows` against `iperf3 -s`: the server's own received byte count is
/// every byte we wrote, and it is our report's receiver side.
fn send_to_iperf3_server(name: &str, flows: &str) {
    let Some((_serial, pair)) = peer_pair("iperf3", name) else { return };
    let server = iperf3_server(&pair);
    let (out, _) = pair
        .send(&["--iperf3", "-c", "10.77.0.2", "-P", flows, "-t", "2", "--warmup", "0", "-J"], Duration::from_secs(30));
    let server = finish(server, Duration::from_secs(10));
    assert!(out.status.success(), "send --iperf3 failed: {}", String::from_utf8_lossy(&out.stderr));
    let ours = json(&out);
    let theirs = iperf3_json(&server);
    assert_eq!(ours["peer"], "iperf3");
    assert_eq!(ours["complete"], true);
    let sent = u64_at(&ours, "/sum/sender/total_bytes");
    let counted = u64_at(&theirs, "/end/sum_received/bytes");
    assert!(sent > 1_000_000, "real traffic moved: {sent}");
    assert_eq!(counted, sent, "iperf3 -s counted every byte we wrote");
    assert_eq!(u64_at(&ours, "/sum/receiver/total_bytes"), counted, "its count is our receiver side");
    let streams = theirs["end"]["streams"].as_array().expect("iperf3's streams");
    assert_eq!(streams.len().to_string(), flows, "one iperf3 stream per flow");
    assert_eq!(ours["iperf3"]["params"]["parallel"].to_string(), flows);
}

#[test]
fn send_one_flow_to_iperf3_server() {
    send_to_iperf3_server("ub3a", "1");
}

#[test]
fn send_eight_flows_to_iperf3_server() {
    send_to_iperf3_server("ub3b", "8");
}

/// `send --iperf3 -R` and `--bidir`: what the server sent is exactly what we received, and
/// (bidir) what we sent is exactly what it received.
#[test]
fn reverse_and_bidir_with_iperf3_server() {
    let Some((_serial, pair)) = peer_pair("iperf3", "ub3g") else { return };
    for mode in ["-R", "--bidir"] {
        let server = iperf3_server(&pair);
        let (out, _) = pair.send(
            &["--iperf3", "-c", "10.77.0.2", "-P", "2", "-t", "2", "--warmup", "0", mode, "-J"],
            Duration::from_secs(30),
        );
        let server = finish(server, Duration::from_secs(10));
        assert!(out.status.success(), "send --iperf3 {mode} failed: {}", String::from_utf8_lossy(&out.stderr));
        let (ours, theirs) = (json(&out), iperf3_json(&server));
        assert_eq!(ours["peer"], "iperf3");
        let back = if mode == "-R" { &ours } else { &ours["reverse"] };
        let received = u64_at(back, "/sum/receiver/total_bytes");
        let server_sent_key = if mode == "-R" { "/end/sum_sent/bytes" } else { "/end/sum_sent_bidir_reverse/bytes" };
        assert!(received > 1_000_000, "{mode}: real traffic came back: {received}");
        assert_eq!(u64_at(&theirs, server_sent_key), received, "{mode}: we received every byte iperf3 -s sent");
        assert_eq!(u64_at(back, "/sum/sender/total_bytes"), received, "{mode}: its count is our sender side");
        if mode == "--bidir" {
            let sent = u64_at(&ours, "/sum/sender/total_bytes");
            assert_eq!(u64_at(&theirs, "/end/sum_received/bytes"), sent, "--bidir: it received every byte we sent");
        }
    }
}

/// `send --iperf3 -u -P 2 -b 100M` against `iperf3 -s`: the datagrams it counted are the ones we
/// sent less the ones it says it lost (and at most a few at the end it never saw), its
/// figures are our receiver side, and the rate held.
#[test]
fn send_udp_at_a_rate_to_iperf3_server() {
    let Some((_serial, pair)) = peer_pair("iperf3", "ub3u") else { return };
    let server = iperf3_server(&pair);
    let args = ["--iperf3", "-c", "10.77.0.2", "-u", "-P", "2", "-b", "100M", "-l", "1400", "-t", "2", "--warmup", "0"];
    let (out, _) = pair.send(&[&args[..], &["-J"]].concat(), Duration::from_secs(30));
    let server = finish(server, Duration::from_secs(10));
    assert!(out.status.success(), "send --iperf3 -u failed: {}", String::from_utf8_lossy(&out.stderr));
    let (ours, theirs) = (json(&out), iperf3_json(&server));
    assert_eq!((ours["peer"].as_str(), ours["complete"].as_bool()), (Some("iperf3"), Some(true)));
    let sent = u64_at(&ours, "/sum/sender/total_bytes");
    let counted = u64_at(&theirs, "/end/sum_received/bytes");
    let lost = u64_at(&theirs, "/end/sum_received/lost_packets");
    let highest = u64_at(&theirs, "/end/sum_received/packets");
    assert!(sent > 10_000_000 && sent % 1400 == 0, "real traffic, whole datagrams: {sent}");
    assert_eq!(counted, (highest - lost) * 1400, "iperf3 counted every datagram it did not call lost");
    let unseen_tail = sent / 1400 - highest;
    assert!(unseen_tail <= 64, "at most a few datagrams after the last one iperf3 saw: {unseen_tail}");
    assert_eq!(u64_at(&ours, "/sum/receiver/total_bytes"), counted, "its count is our receiver side");
    assert_eq!(u64_at(&ours, "/sum/receiver/lost"), lost, "its loss count too");
    assert_eq!(theirs["end"]["streams"].as_array().map(Vec::len), Some(2), "one iperf3 stream per flow");
    let rate = ours["sum"]["sender"]["bits_per_second"].as_f64().unwrap();
    assert!(rate < 220e6 && rate > 100e6, "-b 100M per stream, as iperf3's, paced the 2 streams: {rate}");
}

/// The datagram size of the UDP tests: whole datagrams make byte counts datagram counts.
const DATAGRAM: u64 = 1400;

/// One direction of a UDP test as the two ends counted it: the sender's bytes, the
/// receiver's bytes, its losses and its highest sequence number. The receiver counted every
/// datagram it did not call lost, and missed at most a few after the last one it saw (UDP
/// has no end marker: those are neither counted nor lost).
fn udp_counts_agree(what: &str, sent: u64, (received, lost, highest): (u64, u64, u64)) {
    assert!(sent > 5_000_000 && sent % DATAGRAM == 0, "{what}: real traffic, whole datagrams: {sent}");
    assert_eq!(received, (highest - lost) * DATAGRAM, "{what}: every datagram not called lost was counted");
    let unseen_tail = sent / DATAGRAM - highest;
    assert!(unseen_tail <= 64, "{what}: at most a few datagrams after the last one seen: {unseen_tail}");
}

/// `send --iperf3 -u -R` and `-u --bidir` against `iperf3 -s`: the datagrams the server says
/// it sent are the ones we counted, less the ones we found lost; with --bidir what we sent
/// is what it counted, less its losses; each end's figures are the other's far side.
#[test]
fn udp_reverse_and_bidir_with_iperf3_server() {
    let Some((_serial, pair)) = peer_pair("iperf3", "ub3w") else { return };
    for mode in ["-R", "--bidir"] {
        let server = iperf3_server(&pair);
        let args =
            ["--iperf3", "-c", "10.77.0.2", "-u", "-P", "2", "-b", "50M", "-l", "1400", "-t", "2", "--warmup", "0"];
        let (out, _) = pair.send(&[&args[..], &[mode, "-J"]].concat(), Duration::from_secs(30));
        let server = finish(server, Duration::from_secs(10));
        assert!(out.status.success(), "send --iperf3 -u {mode} failed: {}", String::from_utf8_lossy(&out.stderr));
        let (ours, theirs) = (json(&out), iperf3_json(&server));
        assert_eq!((ours["peer"].as_str(), ours["complete"].as_bool()), (Some("iperf3"), Some(true)), "{mode}");
        let back = if mode == "-R" { &ours } else { &ours["reverse"] };
        let key = if mode == "-R" { "/end/sum_sent" } else { "/end/sum_sent_bidir_reverse" };
        let server_sent = u64_at(&theirs, &format!("{key}/bytes"));
        let received = u64_at(back, "/sum/receiver/total_bytes");
        let ours_back = (received, u64_at(back, "/sum/receiver/lost"), u64_at(back, "/sum/receiver/expected"));
        udp_counts_agree(&format!("{mode}: iperf3 -s to us"), server_sent, ours_back);
        assert_eq!(u64_at(&theirs, &format!("{key}/packets")), server_sent / DATAGRAM, "{mode}: one per datagram");
        assert_eq!(u64_at(back, "/sum/sender/total_bytes"), server_sent, "{mode}: its count is our sender side");
        assert_eq!(u64_at(back, "/sum/sender/datagrams"), server_sent / DATAGRAM, "{mode}: and its datagrams");
        if mode == "--bidir" {
            let sent = u64_at(&ours, "/sum/sender/total_bytes");
            let counted = u64_at(&theirs, "/end/sum_received/bytes");
            let lost = u64_at(&theirs, "/end/sum_received/lost_packets");
            udp_counts_agree(
                "--bidir: us to iperf3 -s",
                sent,
                (counted, lost, u64_at(&theirs, "/end/sum_received/packets")),
            );
            assert_eq!(u64_at(&ours, "/sum/receiver/total_bytes"), counted, "--bidir: its count is our receiver side");
            assert_eq!(u64_at(&ours, "/sum/receiver/lost"), lost, "--bidir: its loss count too");
        }
    }
}

/// An experiment whose runs go to a stock `iperf3 -s` (`peer = "iperf3"`): every run is an
/// iperf3 document with the server's figures as its receiver side, and the variant with a
/// 100 Mbit/s tbf on our egress is found slower.
#[test]
fn experiment_against_iperf3_server() {
    let Some((_serial, pair)) = peer_pair("iperf3", "ub3x") else { return };
    let server = iperf3_server_with(&pair, &[]);
    let dir = std::env::temp_dir().join(format!("ub3x-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (plan, state, saved) = (dir.join("p.toml"), dir.join("s.state"), dir.join("r.json"));
    let plan_text = format!(
        "runs = 2\nwarmup_runs = 0\n[test]\npeer = \"iperf3\"\ntarget = \"{RECV_ADDR}\"\ntime = \"1s\"\nwarmup = \"0s\"\n\
         [[variant]]\nname = \"plain\"\n[[variant]]\nname = \"tbf\"\n[variant.iface.{}a0]\n\
         qdisc = \"tbf rate 100mbit burst 256kb latency 10ms\"\n",
        pair.name
    );
    std::fs::write(&plan, plan_text).unwrap();
    let mut c = pair.cmd(&pair.sender_ns(), bin(), &["experiment"]);
    c.arg(&plan).arg("--state").arg(&state).arg("--json").arg(&saved);
    let (out, _) = run_bounded(c, Duration::from_secs(90));
    let mut server = server;
    let _ = server.kill();
    let _ = server.wait();
    assert!(out.status.success(), "experiment failed: {}", String::from_utf8_lossy(&out.stderr));
    let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&saved).unwrap()).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    // Each variant's slowest and fastest run.
    let mut spans = Vec::new();
    for v in doc["variants"].as_array().unwrap() {
        let runs = v["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 2, "{}", v["name"]);
        let mut rates: Vec<f64> = runs
            .iter()
            .map(|r| {
                assert_eq!((r["peer"].as_str(), r["complete"].as_bool()), (Some("iperf3"), Some(true)), "{r}");
                assert!(u64_at(r, "/sum/receiver/total_bytes") > 1_000_000, "iperf3 -s counted real traffic");
                r["sum"]["receiver"]["bits_per_second"].as_f64().unwrap()
            })
            .collect();
        rates.sort_by(f64::total_cmp);
        spans.push((rates[0], rates[1]));
    }
    let (plain, tbf) = (spans[0], spans[1]);
    assert!(tbf.1 < 110e6 && tbf.1 < plain.0 / 2.0, "the tbf variant is slower: plain {plain:?}, tbf {tbf:?}");
}

#[test]
fn send_to_nothing_says_what_to_run() {
    let Some((_serial, pair)) = peer_pair("iperf3", "ub3c") else { return };
    let (out, _) = pair.send(&["--iperf3", "-c", "10.77.0.2", "-t", "1"], Duration::from_secs(15));
    one_line_error(&out, 1, "start `iperf3 -s` there");
    // A busy server: a_busy_iperf3_server_is_asked_again_for_5_s.
    let (out, _) = pair.send(&["--iperf3", "-c", "10.77.0.2", "-t", "1.5"], Duration::from_secs(15));
    one_line_error(&out, 2, "whole seconds");
    let (out, _) = pair.send(&["--iperf3", "-c", "10.77.0.2", "--json-stream"], Duration::from_secs(15));
    one_line_error(&out, 2, "--json-stream is not available with --iperf3 (use -J)");
}

/// `uringbench recv --iperf3 --once` in the receiver namespace, stdout captured.
fn spawn_recv_iperf3(pair: &NetnsPair) -> Recv {
    pair.spawn_recv(&["--iperf3", "--once", "--port", PORT])
}

/// Our receiver's line for its first test, an iperf3 `proto` test from the sender namespace.
fn test_line<'a>(log: &'a str, proto: &str) -> &'a str {
    let start = format!("[1] iperf3 {proto} test from 10.77.0.1");
    log.lines().find(|l| l.starts_with(&start)).unwrap_or_else(|| panic!("no {proto} test line:\n{log}"))
}

/// The number just before the first `marker` in `line`.
fn number_before(line: &str, marker: &str) -> u64 {
    line.split(marker).next().and_then(|h| h.rsplit(' ').next()).and_then(|b| b.parse().ok()).expect(marker)
}

/// The most a TCP socket's `which` buffer (`tcp_wmem`, `tcp_rmem`) grows to in namespace `ns`.
fn buffer_max(pair: &NetnsPair, ns: &str, which: &str) -> u64 {
    let (out, _) = run_bounded(pair.cmd(ns, "cat", &[&format!("/proc/sys/net/ipv4/{which}")]), Duration::from_secs(5));
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    text.split_whitespace().nth(2).and_then(|m| m.parse().ok()).unwrap_or_else(|| panic!("{which}: {text:?}"))
}

/// `iperf3 -c -P parallel -J` (with `mode`: nothing, `-R` or `--bidir`) against `recv
/// --iperf3`: the client's own sent byte count is what we counted, its received count is
/// what we sent (less what the buffers still held when it stopped reading), and its report
/// shows our counts as the far side's.
fn iperf3_client_to_us(name: &str, parallel: &str, mode: &[&str]) {
    let Some((_serial, pair)) = peer_pair("iperf3", name) else { return };
    let recv = spawn_recv_iperf3(&pair);
    let args = [&["-c", "10.77.0.2", "-p", PORT, "-t", "2", "-P", parallel, "-J"][..], mode].concat();
    let (out, _) = run_bounded(pair.cmd(&pair.sender_ns(), "iperf3", &args), Duration::from_secs(30));
    let log = recv.finish(Duration::from_secs(10));
    let log = String::from_utf8_lossy(&log.stdout).to_string();
    assert!(out.status.success(), "iperf3 -c failed: {}\nour log:\n{log}", String::from_utf8_lossy(&out.stdout));
    let theirs = iperf3_json(&out);
    let line = test_line(&log, "TCP");
    let number_before = |marker: &str| number_before(line, marker);
    assert!(line.contains(&format!("{parallel} stream")) && !line.contains("incomplete"), "{line}");
    let (forward, back) = match mode {
        ["-R"] => (None, Some("/end/sum_received/bytes")),
        ["--bidir"] => (Some("/end/sum_sent/bytes"), Some("/end/sum_received_bidir_reverse/bytes")),
        _ => (Some("/end/sum_sent/bytes"), None),
    };
    if let Some(key) = forward {
        let sent = u64_at(&theirs, key);
        assert!(sent > 1_000_000, "real traffic moved: {sent}");
        assert_eq!(number_before(" bytes in "), sent, "we counted every byte iperf3 -c sent: {line}");
        assert_eq!(u64_at(&theirs, "/end/sum_received/bytes"), sent, "and it shows our count as its receiver's");
    }
    if let Some(key) = back {
        let received = u64_at(&theirs, key);
        assert!(received > 1_000_000, "{mode:?}: real traffic came back: {received}");
        // The client stops reading at its TEST_END; we stop sending 250 ms before it, which
        // is time enough on a quiet machine. A client starved of CPU (seen on a loaded
        // machine with --bidir, whose loop reads one block per ten it writes) leaves bytes in
        // the two sockets' buffers: never more than they hold.
        let sent = number_before(" bytes, client received");
        let held = parallel.parse::<u64>().unwrap()
            * (buffer_max(&pair, &pair.receiver_ns(), "tcp_wmem") + buffer_max(&pair, &pair.sender_ns(), "tcp_rmem"));
        assert!(
            received <= sent && sent - received <= held,
            "{mode:?}: iperf3 -c read what we sent, less at most the {held} bytes the buffers hold: {line}"
        );
        let its_results: Option<u64> =
            line.split("client received ").nth(1).and_then(|t| t.split(' ').next()).and_then(|b| b.parse().ok());
        assert_eq!(its_results, Some(received), "{mode:?}: its results to us say the same: {line}");
    }
}

#[test]
fn iperf3_client_one_stream_to_our_receiver() {
    iperf3_client_to_us("ub3d", "1", &[]);
}

#[test]
fn iperf3_client_eight_streams_to_our_receiver() {
    iperf3_client_to_us("ub3e", "8", &[]);
}

#[test]
fn iperf3_client_reverse_from_our_receiver() {
    iperf3_client_to_us("ub3r", "2", &["-R"]);
}

#[test]
fn iperf3_client_bidir_with_our_receiver() {
    iperf3_client_to_us("ub3i", "2", &["--bidir"]);
}

/// `iperf3 -c -u -P 2 -b 50M` against `recv --iperf3`: what we counted is what the client
/// sent less what we found lost (and at most a few at the end), and the client shows our
/// count and loss as its receiver's.
#[test]
fn iperf3_udp_client_to_our_receiver() {
    let Some((_serial, pair)) = peer_pair("iperf3", "ub3v") else { return };
    let recv = spawn_recv_iperf3(&pair);
    let args = ["-c", "10.77.0.2", "-p", PORT, "-u", "-P", "2", "-b", "50M", "-l", "1400", "-t", "2", "-J"];
    let (out, _) = run_bounded(pair.cmd(&pair.sender_ns(), "iperf3", &args), Duration::from_secs(30));
    let log = recv.finish(Duration::from_secs(10));
    let log = String::from_utf8_lossy(&log.stdout).to_string();
    assert!(out.status.success(), "iperf3 -c -u failed: {}\nour log:\n{log}", String::from_utf8_lossy(&out.stdout));
    let theirs = iperf3_json(&out);
    let line = test_line(&log, "UDP");
    assert!(line.contains("2 streams") && !line.contains("incomplete"), "{line}");
    let counted = number_before(line, " bytes in ");
    let sent = u64_at(&theirs, "/end/sum_sent/bytes");
    let lost = u64_at(&theirs, "/end/sum_received/lost_packets");
    let highest = u64_at(&theirs, "/end/sum_received/packets");
    assert!(sent > 5_000_000 && sent % 1400 == 0, "real traffic, whole datagrams: {sent}");
    assert_eq!(u64_at(&theirs, "/end/sum_received/bytes"), counted, "iperf3 -c shows our count: {line}");
    assert_eq!(counted, (highest - lost) * 1400, "we counted every datagram we did not call lost");
    assert!(sent / 1400 - highest <= 64, "at most a few datagrams after the last one we saw: {sent} {highest}");
}

/// `iperf3 -c -u -R` and `-u --bidir` against `recv --iperf3`: what we sent is what the
/// client counted, less what it found lost, and it shows our sent count as its sender's;
/// with --bidir what it sent is what we counted, less our losses, as in its report.
#[test]
fn iperf3_udp_client_reverse_and_bidir_with_our_receiver() {
    let Some((_serial, pair)) = peer_pair("iperf3", "ub3y") else { return };
    for mode in ["-R", "--bidir"] {
        let recv = spawn_recv_iperf3(&pair);
        let args = ["-c", "10.77.0.2", "-p", PORT, "-u", "-P", "2", "-b", "50M", "-l", "1400", "-t", "2", "-J", mode];
        let (out, _) = run_bounded(pair.cmd(&pair.sender_ns(), "iperf3", &args), Duration::from_secs(30));
        let log = recv.finish(Duration::from_secs(10));
        let log = String::from_utf8_lossy(&log.stdout).to_string();
        assert!(
            out.status.success(),
            "iperf3 -c -u {mode} failed: {}\nour log:\n{log}",
            String::from_utf8_lossy(&out.stdout)
        );
        let theirs = iperf3_json(&out);
        let line = test_line(&log, "UDP");
        assert!(line.contains("2 streams") && !line.contains("incomplete"), "{mode}: {line}");
        let number_before = |marker: &str| number_before(line, marker);
        let back = if mode == "-R" { "/end/sum_received" } else { "/end/sum_received_bidir_reverse" };
        let (received, lost) =
            (u64_at(&theirs, &format!("{back}/bytes")), u64_at(&theirs, &format!("{back}/lost_packets")));
        let sent = number_before(" bytes, client received");
        udp_counts_agree(
            &format!("{mode}: us to iperf3 -c"),
            sent,
            (received, lost, u64_at(&theirs, &format!("{back}/packets"))),
        );
        assert_eq!(number_before(" bytes and lost"), received, "{mode}: its results to us say what it counted: {line}");
        assert_eq!(number_before(" datagrams"), lost, "{mode}: and what it lost: {line}");
        let shown = if mode == "-R" { "/end/sum_sent/bytes" } else { "/end/sum_sent_bidir_reverse/bytes" };
        assert_eq!(u64_at(&theirs, shown), sent, "{mode}: iperf3 -c shows our count as its sender's");
        if mode == "--bidir" {
            let client_sent = u64_at(&theirs, "/end/sum_sent/bytes");
            let counted = number_before(" bytes in ");
            let ours = (
                counted,
                u64_at(&theirs, "/end/sum_received/lost_packets"),
                u64_at(&theirs, "/end/sum_received/packets"),
            );
            udp_counts_agree("--bidir: iperf3 -c to us", client_sent, ours);
            assert_eq!(
                u64_at(&theirs, "/end/sum_received/bytes"),
                counted,
                "--bidir: iperf3 -c shows our count: {line}"
            );
        }
    }
}

#[test]
fn our_receiver_refuses_what_it_does_not_serve_and_hostile_peers() {
    let Some((_serial, pair)) = peer_pair("iperf3", "ub3f") else { return };
    let recv = pair.spawn_recv(&["--iperf3", "--port", PORT]);
    // A server CPU (-A) is not served: refused with iperf3's own error, which it prints.
    let (out, _) = run_bounded(
        pair.cmd(&pair.sender_ns(), "iperf3", &["-c", "10.77.0.2", "-p", PORT, "-t", "1", "-A", "0,0"]),
        Duration::from_secs(20),
    );
    assert!(!out.status.success(), "iperf3 -A must fail against recv --iperf3");
    assert!(String::from_utf8_lossy(&out.stderr).contains("unable to set CPU affinity"), "{out:?}");
    // Hostile control connections, from a small Python client in the sender namespace: not a
    // cookie; a cookie then an absurd JSON length; a cookie then bytes that are not JSON.
    let script = format!(
        r#"{PY_IPERF3_STATE}
import socket, struct, sys
def conn():
    s = socket.create_connection(("10.77.0.2", 5201), timeout=5)
    return s
s = conn(); s.sendall(b"X" * 37); print("garbage", s.recv(16)); s.close()
for body in [struct.pack(">I", 0xFFFFFFFF), struct.pack(">I", 5) + b"{{nope"]:
    s = conn(); s.sendall(b"a" * 36 + b"\0")
    state = s.recv(1)
    s.sendall(body)
    print("state", state[0], "reply", read_state(s)); s.close()
"#
    );
    let (py, _) = run_bounded(pair.cmd(&pair.sender_ns(), "python3", &["-c", &script]), Duration::from_secs(30));
    let py_out = String::from_utf8_lossy(&py.stdout).to_string();
    assert!(py.status.success(), "{py_out}{}", String::from_utf8_lossy(&py.stderr));
    assert_eq!(
        py_out.matches("state 9 reply [254, 0, 0, 0, 114, 0, 0, 0, 0]").count(),
        2,
        "SERVER_ERROR 114 for both: {py_out}"
    );
    // Still serving: a real client afterwards gets its test.
    let (ok, _) = run_bounded(
        pair.cmd(&pair.sender_ns(), "iperf3", &["-c", "10.77.0.2", "-p", PORT, "-t", "1"]),
        Duration::from_secs(20),
    );
    let log = recv.kill();
    let log = String::from_utf8_lossy(&log.stdout).to_string();
    assert!(ok.status.success(), "a good client after the hostile ones is served:\n{log}");
    assert!(log.contains("refused iperf3 TCP test from 10.77.0.1") && log.contains("-A's server CPU"), "{log}");
    // Every refusal goes through one log limit, one line per address per 10 s: the hostile
    // peers' three refusals (their SERVER_ERROR above) are counted, not written.
    let lines = log.lines().filter(|l| l.starts_with("refused ") || l.starts_with("dropped ")).count();
    assert_eq!(lines, 1, "one refusal line for 10.77.0.1 in the window: {log}");
    assert!(log.contains("] iperf3 TCP test from 10.77.0.1") && !log.contains("incomplete"), "{log}");
}

/// `send --iperf3` against a server busy with a stock client's test: asked again until it is
/// free (the stock client's test completes undisturbed, ours then runs and the server counts
/// it), and refused in one line after 5 s when the other test lasts longer.
#[test]
fn a_busy_iperf3_server_is_asked_again_for_5_s() {
    let Some((_serial, pair)) = peer_pair("iperf3", "ub3w") else { return };
    let server = iperf3_server_with(&pair, &[]);
    let other = |secs: &str| {
        pair.cmd(&pair.sender_ns(), "iperf3", &["-c", "10.77.0.2", "-p", PORT, "-t", secs, "-J"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn iperf3 -c")
    };
    let first = other("2");
    std::thread::sleep(Duration::from_millis(500));
    let (out, took) =
        pair.send(&["--iperf3", "-c", "10.77.0.2", "-t", "1", "--warmup", "0", "-J"], Duration::from_secs(30));
    let first = finish(first, Duration::from_secs(10));
    assert!(out.status.success(), "send --iperf3 after a busy answer: {}", String::from_utf8_lossy(&out.stderr));
    assert!(u64_at(&iperf3_json(&first), "/end/sum_received/bytes") > 0, "the stock client's test completed");
    let ours = json(&out);
    assert_eq!(ours["complete"], true);
    assert!(u64_at(&ours, "/sum/receiver/total_bytes") > 0, "the server counted our test");
    assert!(took > Duration::from_millis(1500), "ours waited for the other test ({took:?})");

    let long = other("8");
    std::thread::sleep(Duration::from_millis(500));
    let (out, took) = pair.send(&["--iperf3", "-c", "10.77.0.2", "-t", "1"], Duration::from_secs(30));
    let _ = finish(long, Duration::from_secs(15));
    let mut server = server;
    let _ = server.kill();
    let _ = server.wait();
    one_line_error(&out, 1, "access denied");
    assert!(String::from_utf8_lossy(&out.stderr).contains("asked for 5 s"));
    assert!(took >= Duration::from_secs(5) && took < Duration::from_secs(7), "refused after {took:?}");
}

/// `recv --iperf3` stopped (SIGINT) in the middle of a stock client's test tells that test
/// before it exits: one line, incomplete, with the bytes it counted and the signal named.
#[test]
fn a_receiver_stopped_mid_test_tells_the_test() {
    let Some((_serial, pair)) = peer_pair("iperf3", "ub3i") else { return };
    let recv = pair.spawn_recv(&["--iperf3", "--port", PORT]);
    let client = pair
        .cmd(&pair.sender_ns(), "iperf3", &["-c", "10.77.0.2", "-p", PORT, "-t", "5"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn iperf3 -c");
    std::thread::sleep(Duration::from_millis(2500));
    // SAFETY: kill(2) on the receiver's pid has no memory-safety preconditions.
    assert_eq!(unsafe { libc::kill(recv.pid() as i32, libc::SIGINT) }, 0);
    let out = recv.finish(Duration::from_secs(5));
    let _ = finish(client, Duration::from_secs(10));
    let log = String::from_utf8_lossy(&out.stdout);
    let line = test_line(&log, "TCP");
    assert!(line.contains("incomplete: interrupted at") && line.contains("SIGINT on the receiver"), "{line}");
    assert_eq!(line.matches("SIGINT").count(), 1, "the cause once: {line}");
    assert!(number_before(line, " bytes in ") > 1_000_000, "what it counted: {line}");
}

/// `send --iperf3 -u --dont-fragment` against `iperf3 -s`: the key goes in the parameters,
/// datagrams within the path MTU arrive as iperf3 counts them, and one over it (no GSO) is
/// refused in one line naming the path MTU, where without DF it would go in fragments.
#[test]
fn send_iperf3_dont_fragment_to_iperf3_server() {
    let Some((_serial, pair)) = peer_pair("iperf3", "ub3f") else { return };
    let server = iperf3_server(&pair);
    let args = ["--iperf3", "-c", "10.77.0.2", "-u", "-l", "1400", "-b", "50M", "-t", "1", "--warmup", "0"];
    let (out, _) = pair.send(&[&args[..], &["--dont-fragment", "-J"]].concat(), Duration::from_secs(30));
    let theirs = iperf3_json(&finish(server, Duration::from_secs(10)));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let ours = json(&out);
    assert_eq!(ours["iperf3"]["params"]["dont_fragment"], 1, "asked of the server: {}", ours["iperf3"]["params"]);
    let counted = u64_at(&theirs, "/end/sum_received/bytes");
    assert!(counted > 1_000_000, "iperf3 -s counted the datagrams: {counted}");
    assert_eq!(u64_at(&ours, "/sum/receiver/total_bytes"), counted, "its count is our receiver side");
    let mut server = iperf3_server(&pair);
    let (out, _) = pair.send(
        &["--iperf3", "-c", "10.77.0.2", "-u", "-l", "2000", "--no-gso", "--dont-fragment", "-t", "1"],
        Duration::from_secs(15),
    );
    let _ = server.kill();
    let _ = server.wait();
    one_line_error(&out, 1, "does not fit the path MTU of 1500 bytes");
}
