//! Multipath TCP between two namespaces joined by two veth pairs: `send -m` carries its data
//! over two subflows, each with bytes the kernel counted, the second one over the second
//! veth pair; `crr -m` reads a sample of its short-lived connections back before closing
//! them; a plain `send` still works against the MPTCP listener of `recv`. Through iperf3's
//! protocol: `send --iperf3 -m` to `recv --iperf3` is MPTCP over two subflows, the kernels'
//! MPTcpExt counters say so; to Debian's `iperf3 -s` (3.12, no MPTCP) it falls back to TCP
//! and the report says it; a receiver without MPTCP refuses with iperf3's own error.

mod common;

use common::*;
use std::process::Command;
use std::time::Duration;

/// A second veth pair between the pair's namespaces (10.77.1.1 - 10.77.1.2), the sender's
/// second address an MPTCP subflow endpoint bound to its veth, and both sides allowed 2 extra
/// subflows. All of it lives in the namespaces, which take it with them.
fn second_path(pair: &NetnsPair) {
    let (a, b) = (pair.sender_ns(), pair.receiver_ns());
    let (ia, ib) = (format!("{}a1", pair.name), format!("{}b1", pair.name));
    let steps: Vec<Vec<String>> = vec![
        vec!["link", "add", &ia, "netns", &a, "type", "veth", "peer", "name", &ib, "netns", &b],
        vec!["-n", &a, "addr", "add", "10.77.1.1/24", "dev", &ia],
        vec!["-n", &b, "addr", "add", "10.77.1.2/24", "dev", &ib],
        vec!["-n", &a, "link", "set", &ia, "up"],
        vec!["-n", &b, "link", "set", &ib, "up"],
        vec!["-n", &a, "mptcp", "limits", "set", "subflow", "2", "add_addr_accepted", "2"],
        vec!["-n", &b, "mptcp", "limits", "set", "subflow", "2", "add_addr_accepted", "2"],
        vec!["-n", &a, "mptcp", "endpoint", "add", "10.77.1.1", "dev", &ia, "subflow"],
    ]
    .into_iter()
    .map(|s| s.into_iter().map(String::from).collect())
    .collect();
    for step in steps {
        let out = Command::new("ip").args(&step).output().expect("run ip");
        assert!(out.status.success(), "ip {}: {}", step.join(" "), String::from_utf8_lossy(&out.stderr));
    }
}

/// The traffic lock and a netns pair `name`; `None` (the test skipped) on a host without
/// MPTCP, where the tests cannot run.
fn mptcp_pair(name: &str) -> Option<(Serial, NetnsPair)> {
    if !std::fs::read_to_string("/proc/sys/net/mptcp/enabled").is_ok_and(|v| v.trim() == "1") {
        skip(Lacking::Installed, "net.mptcp.enabled is not 1 on this host");
        return None;
    }
    let serial = serial();
    Some((serial, NetnsPair::up(name)))
}

fn tx_bytes(pair: &NetnsPair, iface: &str) -> u64 {
    let path = format!("/sys/class/net/{iface}/statistics/tx_bytes");
    let out = pair.cmd(&pair.sender_ns(), "cat", &[&path]).output().expect("cat counter");
    String::from_utf8_lossy(&out.stdout).trim().parse().expect("numeric counter")
}

#[test]
fn send_m_carries_exact_bytes_over_two_subflows_each_counted_by_the_kernel() {
    let Some((_serial, pair)) = mptcp_pair("ubmp") else { return };
    second_path(&pair);
    let recv = pair.spawn_recv(&["--cpus", "1"]);
    let second_before = tx_bytes(&pair, &format!("{}a1", pair.name));
    let (out, _) = pair.send(
        &["--target", RECV_ADDR, "-m", "-t", "3", "--warmup", "500ms", "--cpus", "0", "-J"],
        Duration::from_secs(30),
    );
    let second_sent = tx_bytes(&pair, &format!("{}a1", pair.name)) - second_before;
    drop(recv);
    assert!(out.status.success(), "send -m: {}", String::from_utf8_lossy(&out.stderr));
    let doc = json(&out);
    let sent = u64_at(&doc, "/sum/sender/total_bytes");
    assert!(sent > 0, "{doc}");
    assert_eq!(u64_at(&doc, "/sum/receiver/total_bytes"), sent, "the receiver counted every byte sent, no more");
    let conns = doc["mptcp"]["sender"].as_array().unwrap_or_else(|| panic!("no mptcp.sender: {doc}"));
    assert_eq!(conns.len(), 1, "one flow, one MPTCP connection: {conns:?}");
    let c = &conns[0];
    assert_eq!(c["fallback"], false, "{c}");
    let subflows = c["subflows"].as_array().expect("subflows");
    assert!(subflows.len() >= 2, "two paths, two subflows or more: {c}");
    for s in subflows {
        assert!(s["bytes_acked"].as_u64().unwrap() > 0, "every subflow carried acknowledged bytes: {c}");
    }
    let on_second: Vec<_> =
        subflows.iter().filter(|s| s["local"].as_str().unwrap_or("").starts_with("10.77.1.1:")).collect();
    assert!(!on_second.is_empty(), "a subflow leaves from the second path's address: {c}");
    // The subflows carried the connection's bytes: together at least what the sender counted
    // (retransmissions and reinjections add to them).
    let carried: u64 = subflows.iter().map(|s| s["bytes_sent"].as_u64().unwrap()).sum();
    assert!(carried >= sent, "subflows sent {carried} bytes of {sent}: {c}");
    let on_second_acked: u64 = on_second.iter().map(|s| s["bytes_acked"].as_u64().unwrap()).sum();
    assert!(second_sent >= on_second_acked, "the second veth sent {second_sent} bytes, its subflows {on_second_acked}");
    // The receiver's side of the same connection.
    let theirs = doc["mptcp"]["receiver"].as_array().unwrap_or_else(|| panic!("no mptcp.receiver: {doc}"));
    assert_eq!(theirs.len(), 1, "{theirs:?}");
    let received: u64 =
        theirs[0]["subflows"].as_array().unwrap().iter().map(|s| s["bytes_received"].as_u64().unwrap()).sum();
    assert!(received >= sent, "the receiver's subflows received {received} of {sent}");
}

/// crr's connections live for one transaction: each client thread reads one in 64 back as
/// its answer comes, before it closes, and the report says it is a sample.
#[test]
fn crr_m_reads_a_sample_of_its_connections_before_they_close() {
    let Some((_serial, pair)) = mptcp_pair("ubmp-crr") else { return };
    second_path(&pair);
    let recv = pair.spawn_recv(&["--cpus", "1"]);
    let mut c = pair.cmd(&pair.sender_ns(), bin(), &["crr", "--target", RECV_ADDR, "-m", "-t", "2"]);
    c.args(["--warmup", "200ms", "--cpus", "0", "--req", "100", "--resp", "200", "-J"]);
    let (out, _) = run_bounded(c, Duration::from_secs(30));
    drop(recv);
    assert!(out.status.success(), "crr -m: {}", String::from_utf8_lossy(&out.stderr));
    let doc = json(&out);
    let connections = u64_at(&doc, "/sum/client/total_transactions");
    let conns = doc["mptcp"]["sender"].as_array().unwrap_or_else(|| panic!("no mptcp.sender: {doc}"));
    // One thread: its first answered connection, then one in 64, at most 32.
    let expected = connections.div_ceil(64).min(32) as usize;
    assert_eq!(conns.len(), expected, "{connections} connections: {conns:?}");
    for c in conns {
        assert_eq!(c["fallback"], false, "the MPTCP listener answered MP_CAPABLE: {c}");
        let subflows = c["subflows"].as_array().expect("subflows");
        assert!(!subflows.is_empty(), "an open subflow as the answer came: {c}");
        let sent: u64 = subflows.iter().map(|s| s["bytes_sent"].as_u64().unwrap()).sum();
        let received: u64 = subflows.iter().map(|s| s["bytes_received"].as_u64().unwrap()).sum();
        assert!(sent >= 100 && received >= 200, "the request went out and the answer came in: {c}");
    }
    let path = doc["client"]["path"].as_str().unwrap_or_default();
    assert!(path.contains("1 in 64 answered connections"), "the report says it is a sample: {path}");
}

#[test]
fn a_plain_send_still_works_against_the_mptcp_listener() {
    let Some((_serial, pair)) = mptcp_pair("ubmp-plain") else { return };
    let recv = pair.spawn_recv(&["--cpus", "1"]);
    let ss = pair.cmd(&pair.receiver_ns(), "ss", &["-Hltn", "--mptcp"]).output().expect("ss");
    let (out, _) = pair
        .send(&["--target", RECV_ADDR, "-t", "1", "--warmup", "200ms", "--cpus", "0", "-J"], Duration::from_secs(20));
    drop(recv);
    assert!(
        String::from_utf8_lossy(&ss.stdout).contains(":5300"),
        "recv listens with MPTCP: {}",
        String::from_utf8_lossy(&ss.stdout)
    );
    assert!(out.status.success(), "plain send: {}", String::from_utf8_lossy(&out.stderr));
    let doc = json(&out);
    let sent = u64_at(&doc, "/sum/sender/total_bytes");
    assert!(sent > 0);
    assert_eq!(u64_at(&doc, "/sum/receiver/total_bytes"), sent);
    assert!(doc.get("mptcp").is_none(), "no -m, no mptcp section: {doc}");
    // The TCP_INFO readback works on what the MPTCP listener accepted.
    assert!(u64_at(&doc, "/tcp/receiver_flows_end/0/bytes_received") >= sent, "{doc}");
}

#[test]
fn a_host_with_mptcp_disabled_refuses_m_and_a_receiver_without_it_gets_a_fallback() {
    let Some((_serial, pair)) = mptcp_pair("ubmp-off") else { return };
    let recv = pair.spawn_recv(&["--cpus", "1"]);
    let sysctl = |ns: &str, v: &str| {
        let out = pair.cmd(ns, "sysctl", &["-qw", &format!("net.mptcp.enabled={v}")]).output().expect("sysctl");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    };
    // The sender's namespace without MPTCP: refused before anything is sent, with the reason.
    sysctl(&pair.sender_ns(), "0");
    let (out, _) = pair.send(&["--target", RECV_ADDR, "-m", "-t", "1"], Duration::from_secs(20));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("net.mptcp.enabled = 0") && stderr.lines().count() == 1, "{stderr}");
    // Zero-copy sends do not exist on MPTCP sockets: asking for them is a usage error.
    let (out, _) = pair.send(&["--target", RECV_ADDR, "-m", "--zerocopy", "on", "-t", "1"], Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    // The receiver's without it (its listener is plain TCP, made after the sysctl): the
    // sender's MPTCP flow falls back to TCP and the report says so.
    sysctl(&pair.sender_ns(), "1");
    drop(recv);
    sysctl(&pair.receiver_ns(), "0");
    let recv = pair.spawn_recv(&["--cpus", "1"]);
    let (out, _) =
        pair.send(&["--target", RECV_ADDR, "-m", "-t", "1", "--warmup", "200ms", "-J"], Duration::from_secs(20));
    drop(recv);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let doc = json(&out);
    assert_eq!(u64_at(&doc, "/sum/receiver/total_bytes"), u64_at(&doc, "/sum/sender/total_bytes"));
    assert_eq!(doc["mptcp"]["sender"][0]["fallback"], true, "{}", doc["mptcp"]);
    assert!(doc["sender"]["path"].as_str().unwrap().contains("fell back to plain TCP"), "{}", doc["sender"]["path"]);
}

/// iperf3's port, where `recv --iperf3` and `iperf3 -s` listen.
const IPERF3_PORT: &str = "5201";

/// One MPTcpExt counter of namespace `ns` (/proc/net/netstat).
fn mptcp_counter(pair: &NetnsPair, ns: &str, name: &str) -> u64 {
    pair.snmp_counter(ns, "MPTcpExt", name)
}

/// `send --iperf3 -m` to `recv --iperf3` over two paths: the one data connection is MPTCP
/// (the receiver's kernel took exactly one MP_CAPABLE SYN, the control connection being
/// plain TCP, and at least one MP_JOIN), it has two subflows or more, one of them on the
/// second path, and `recv --iperf3` counted exactly the bytes we sent, its own line says the
/// same and names the subflows.
#[test]
fn send_iperf3_m_to_recv_iperf3_is_mptcp_with_exact_bytes() {
    let Some((_serial, pair)) = mptcp_pair("ubmp3a") else { return };
    second_path(&pair);
    let recv = pair.spawn_recv(&["--iperf3", "--port", IPERF3_PORT, "--cpus", "1"]);
    let rx_ns = pair.receiver_ns();
    let (syn_before, join_before) =
        (mptcp_counter(&pair, &rx_ns, "MPCapableSYNRX"), mptcp_counter(&pair, &rx_ns, "MPJoinSynRx"));
    let (out, _) = pair.send(
        &["--iperf3", "-c", RECV_ADDR, "-m", "-t", "2", "--warmup", "0", "--cpus", "0", "-J"],
        Duration::from_secs(30),
    );
    let (syn, join) = (
        mptcp_counter(&pair, &rx_ns, "MPCapableSYNRX") - syn_before,
        mptcp_counter(&pair, &rx_ns, "MPJoinSynRx") - join_before,
    );
    let log = String::from_utf8_lossy(&recv.kill().stdout).to_string();
    assert!(out.status.success(), "send --iperf3 -m: {}", String::from_utf8_lossy(&out.stderr));
    let doc = json(&out);
    assert_eq!(doc["iperf3"]["params"]["mptcp"], true, "{}", doc["iperf3"]);
    let sent = u64_at(&doc, "/sum/sender/total_bytes");
    assert!(sent > 1_000_000, "real traffic: {sent}");
    assert_eq!(u64_at(&doc, "/sum/receiver/total_bytes"), sent, "recv --iperf3's results count every byte sent");
    assert_eq!(syn, 1, "one MPTCP data connection reached the receiver's kernel; the control one is plain TCP");
    assert!(join >= 1, "the second path joined the connection: {join} MP_JOIN SYNs");
    let c = &doc["mptcp"]["sender"][0];
    assert_eq!(c["fallback"], false, "{}", doc["mptcp"]);
    let subflows = c["subflows"].as_array().unwrap_or_else(|| panic!("no subflows: {}", doc["mptcp"]));
    assert!(subflows.len() >= 2, "two paths, two subflows or more: {c}");
    assert!(subflows.iter().any(|s| s["local"].as_str().unwrap_or("").starts_with("10.77.1.1:")), "{c}");
    assert!(doc["mptcp"]["receiver"].is_null(), "the far side's MPTCP state is not ours to report");
    let line =
        log.lines().find(|l| l.contains("iperf3 TCP test from")).unwrap_or_else(|| panic!("no test line: {log}"));
    assert!(
        line.contains(&format!(": {sent} bytes in ")) && line.contains(&format!("client sent {sent} bytes")),
        "{line}"
    );
    assert!(line.contains("MPTCP flow 0: ") && line.contains(" -> 10.77.1.1:"), "{line}");
    assert!(!line.contains("incomplete"), "{line}");
}

/// `send --iperf3 -m` to Debian's `iperf3 -s` (3.12 has no MPTCP: it ignores the key and
/// listens with plain TCP): the test runs, iperf3 counts every byte, our kernel saw the
/// SYN-ACK without MP_CAPABLE, and the report says the connection fell back to TCP.
#[test]
fn send_iperf3_m_to_a_stock_iperf3_server_falls_back_to_tcp_and_says_so() {
    if !peer_installed("iperf3") {
        return;
    }
    let Some((_serial, pair)) = mptcp_pair("ubmp3b") else { return };
    let server = pair.iperf3_server(IPERF3_PORT, &["-1", "-J"]);
    let tx_ns = pair.sender_ns();
    let fallback_before = mptcp_counter(&pair, &tx_ns, "MPCapableFallbackSYNACK");
    let (out, _) =
        pair.send(&["--iperf3", "-c", RECV_ADDR, "-m", "-t", "1", "--warmup", "0", "-J"], Duration::from_secs(30));
    let fallbacks = mptcp_counter(&pair, &tx_ns, "MPCapableFallbackSYNACK") - fallback_before;
    let server = finish(server, Duration::from_secs(10));
    assert!(out.status.success(), "send --iperf3 -m: {}", String::from_utf8_lossy(&out.stderr));
    let (ours, theirs) = (json(&out), serde_json::from_slice::<serde_json::Value>(&server.stdout).expect("iperf3 -J"));
    let sent = u64_at(&ours, "/sum/sender/total_bytes");
    assert!(sent > 1_000_000, "real traffic: {sent}");
    assert_eq!(u64_at(&theirs, "/end/sum_received/bytes"), sent, "iperf3 -s counted every byte");
    assert_eq!(fallbacks, 1, "our kernel took one SYN-ACK without MP_CAPABLE (the data connection's)");
    assert_eq!(ours["mptcp"]["sender"][0]["fallback"], true, "{}", ours["mptcp"]);
    let notes = ours["iperf3"]["notes"].to_string();
    assert!(notes.contains("1 of 1 data connections fell back to plain TCP"), "{notes}");
    assert!(ours["sender"]["path"].as_str().unwrap_or("").contains("fell back to plain TCP"), "{}", ours["sender"]);
}

/// A receiver namespace without MPTCP: `recv --iperf3` refuses a `-m` client with iperf3's
/// own error (the stream listener, with its errno) and logs why; a sender namespace without
/// it refuses `send --iperf3 -m` before connecting.
#[test]
fn without_mptcp_iperf3_m_is_refused_with_iperf3s_error_and_the_reason() {
    let Some((_serial, pair)) = mptcp_pair("ubmp3c") else { return };
    let sysctl = |ns: &str, v: &str| {
        let out = pair.cmd(ns, "sysctl", &["-qw", &format!("net.mptcp.enabled={v}")]).output().expect("sysctl");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    };
    sysctl(&pair.receiver_ns(), "0");
    let recv = pair.spawn_recv(&["--iperf3", "--port", IPERF3_PORT, "--cpus", "1"]);
    let (out, _) = pair.send(&["--iperf3", "-c", RECV_ADDR, "-m", "-t", "1"], Duration::from_secs(20));
    let log = String::from_utf8_lossy(&recv.kill().stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("unable to start stream listener (iperf3 error 202): Protocol not available"),
        "iperf3's error and errno: {stderr}"
    );
    assert!(log.contains("MPTCP (-m): MPTCP is disabled on this host (net.mptcp.enabled = 0)"), "{log}");
    sysctl(&pair.sender_ns(), "0");
    let (out, _) = pair.send(&["--iperf3", "-c", RECV_ADDR, "-m", "-t", "1"], Duration::from_secs(20));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("net.mptcp.enabled = 0") && stderr.lines().count() == 1, "{stderr}");
}

/// iperf2's and NTttcp's receivers take plain TCP only: `-m` with their modes is a usage error
/// rather than a flag silently ignored (nothing is sent: the check comes first).
#[test]
fn m_with_iperf2_or_ntttcp_is_a_usage_error() {
    for mode in ["--iperf2", "--ntttcp"] {
        let mut c = std::process::Command::new(bin());
        c.args(["send", mode, "-c", "127.0.0.1", "-m", "-t", "1"]);
        let (out, _) = run_bounded(c, Duration::from_secs(10));
        one_line_error(&out, 2, "-m/--mptcp");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(mode), "the error names the mode: {stderr}");
    }
}
