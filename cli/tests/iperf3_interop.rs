//! uringbench against the real iperf3 (`/usr/bin/iperf3`, Debian's 3.12), one side at a time,
//! between two network namespaces: our sender to `iperf3 -s`, `iperf3 -c` to
//! `uringbench recv --iperf3`. Byte counts are compared across the two tools' own reports.
//! Every spawned process is bounded; pairs are named `ub3*`.

mod common;

use common::*;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const PORT: &str = "5201";

fn iperf3_present() -> bool {
    Command::new("iperf3").arg("-v").output().is_ok()
}

/// `iperf3 -s -1 -J` in the receiver namespace (one test, then it exits), once it listens.
fn iperf3_server(pair: &NetnsPair) -> Child {
    let child = pair
        .cmd(&pair.receiver_ns(), "iperf3", &["-s", "-1", "-J", "-p", PORT])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn iperf3 -s");
    pair.wait_listening(PORT);
    child
}

/// What `iperf3 -J` printed, parsed.
fn iperf3_json(out: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("iperf3 -J output is not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

/// `send --iperf3 -P flows` against `iperf3 -s`: the server's own received byte count is
/// every byte we wrote, and it is our report's receiver side.
fn send_to_iperf3_server(name: &str, flows: &str) {
    let _serial = serial();
    if !iperf3_present() {
        return skip(Lacking::Installed, "iperf3 is not installed: scripts/install-deps.sh --test installs it");
    }
    let pair = NetnsPair::up(name);
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

#[test]
fn send_to_nothing_or_busy_iperf3_server_says_what_to_run() {
    let _serial = serial();
    if !iperf3_present() {
        return skip(Lacking::Installed, "iperf3 is not installed: scripts/install-deps.sh --test installs it");
    }
    let pair = NetnsPair::up("ub3c");
    let (out, _) = pair.send(&["--iperf3", "-c", "10.77.0.2", "-t", "1"], Duration::from_secs(15));
    one_line_error(&out, 1, "start `iperf3 -s` there");
    // A server in the middle of a test answers ACCESS_DENIED to a second client.
    let server = iperf3_server(&pair);
    let mut first = pair
        .cmd(&pair.sender_ns(), "iperf3", &["-c", "10.77.0.2", "-t", "3"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn iperf3 -c");
    std::thread::sleep(Duration::from_millis(700));
    let (out, _) = pair.send(&["--iperf3", "-c", "10.77.0.2", "-t", "1"], Duration::from_secs(15));
    one_line_error(&out, 1, "access denied");
    let _ = first.wait();
    finish(server, Duration::from_secs(10));
    let (out, _) = pair.send(&["--iperf3", "-c", "10.77.0.2", "-t", "1.5"], Duration::from_secs(15));
    one_line_error(&out, 2, "whole seconds");
}
