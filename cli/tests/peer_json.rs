//! The receiver's own report as JSON when another tool sends: `recv --iperf2 -J` with the real
//! `iperf -c` (Debian's 2.1.8), `recv --iperf3 -J` and `--json-stream` with the real `iperf3
//! -c` (3.12), `recv --ntttcp -J` with NTttcp's no-sync sender (the Python far end of
//! cli/tests/ntttcp_interop.rs). Each document's byte count is held against what the sending
//! tool itself reports, and each document against the published schema. One short test each;
//! pairs are named `ubj*`, every process is bounded.

mod common;

use common::*;
use serde_json::Value;
use std::process::{Output, Stdio};
use std::time::Duration;

/// The lines a receiver wrote to stdout under `-J` or `--json-stream`, each parsed: nothing
/// else may be there.
fn json_lines(out: &Output) -> Vec<Value> {
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .lines()
        .map(|l| {
            serde_json::from_str(l).unwrap_or_else(|e| {
                panic!("a stdout line is not JSON ({e}): {l}\nstderr: {}", String::from_utf8_lossy(&out.stderr))
            })
        })
        .collect()
}

/// The one document a `--once -J` receiver wrote; its log line went to stderr.
fn one_document(out: &Output, test_line: &str) -> Value {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(test_line), "the log line goes to stderr under -J: {stderr}");
    let mut docs = json_lines(out);
    assert_eq!(docs.len(), 1, "one document for the one test: {docs:?}");
    let doc = docs.remove(0);
    assert_matches_schema(&doc, "stream.schema.json");
    assert_eq!(doc["kind"], "stream", "{doc}");
    assert_eq!(doc["complete"], true, "{doc}");
    assert_eq!(doc["roles"]["data_receiver"], "this", "{doc}");
    assert_eq!(doc["roles"]["far_host"], "10.77.0.1", "{doc}");
    doc
}

/// `iperf -c -P 2 -y C` to `recv --iperf2 --once -J`: the document's received bytes are what
/// iperf's own CSV lines say it sent, flow by flow in sum.
#[test]
fn iperf2_client_to_recv_json() {
    let Some((_serial, pair)) = peer_pair("iperf", "ubj2") else { return };
    let recv = pair
        .cmd(&pair.receiver_ns(), bin(), &["recv", "--iperf2", "--once", "--cpus", "1", "-J"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn recv --iperf2");
    let recv = pair.listening(recv, "5001");
    let (client, _) = run_bounded(
        pair.cmd(&pair.sender_ns(), "iperf", &["-c", RECV_ADDR, "-t", "1", "-P", "2", "-y", "C"]),
        Duration::from_secs(20),
    );
    assert!(client.status.success(), "iperf -c: {}", String::from_utf8_lossy(&client.stderr));
    let out = finish(recv, Duration::from_secs(15));
    assert!(out.status.success(), "recv --once -J exits 0: {}", String::from_utf8_lossy(&out.stderr));
    // iperf -y C: one line per connection, bytes in the 8th field (a sum line has id -1).
    let csv = String::from_utf8_lossy(&client.stdout).to_string();
    let flows: Vec<u64> = csv
        .lines()
        .filter_map(|l| l.split(',').collect::<Vec<_>>().get(5..8).map(|f| (f[0].to_string(), f[2].to_string())))
        .filter(|(id, _)| id != "-1")
        .map(|(_, bytes)| bytes.parse().expect("bytes"))
        .collect();
    assert_eq!(flows.len(), 2, "one CSV line per flow: {csv}");
    let sent: u64 = flows.iter().sum();
    let doc = one_document(&out, "[1] iperf2 TCP test from 10.77.0.1");
    assert!(sent > 1_000_000, "real traffic moved: {sent}");
    assert_eq!(u64_at(&doc, "/sum/receiver/total_bytes"), sent, "every byte iperf -c says it sent: {doc}");
    assert_eq!((doc["peer"].as_str(), doc["peer_version"].as_str()), (Some("iperf2"), Some("2.1.8")));
    let mut per_flow: Vec<u64> =
        doc["queues"].as_array().expect("queues").iter().map(|q| u64_at(q, "/receiver/total_bytes")).collect();
    let mut theirs = flows.clone();
    per_flow.sort_unstable();
    theirs.sort_unstable();
    assert_eq!(per_flow, theirs, "one queue per flow, each flow's bytes as iperf counted them");
}

/// `recv --iperf3 --once` with `output` (`-J` or `--json-stream`), and `iperf3 -c -P 2 -J`
/// for `secs` seconds against it: the receiver's output and the client's own JSON.
fn iperf3_client_to_recv(name: &str, output: &str, secs: &str) -> Option<(Output, Value)> {
    let (_serial, pair) = peer_pair("iperf3", name)?;
    let recv = pair
        .cmd(&pair.receiver_ns(), bin(), &["recv", "--iperf3", "--once", "--cpus", "1", output])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn recv --iperf3");
    let recv = pair.listening(recv, "5201");
    let (client, _) = run_bounded(
        pair.cmd(&pair.sender_ns(), "iperf3", &["-c", RECV_ADDR, "-t", secs, "-P", "2", "-J"]),
        Duration::from_secs(20),
    );
    let out = finish(recv, Duration::from_secs(15));
    assert!(client.status.success(), "iperf3 -c: {}", String::from_utf8_lossy(&client.stdout));
    assert!(out.status.success(), "recv --once exits 0: {}", String::from_utf8_lossy(&out.stderr));
    let theirs = serde_json::from_slice(&client.stdout).expect("iperf3 -J is JSON");
    Some((out, theirs))
}

/// `iperf3 -c` to `recv --iperf3 -J`: the document's received bytes are iperf3's own sent
/// bytes, and its sender side is the client's results (the same count).
#[test]
fn iperf3_client_to_recv_json() {
    let Some((out, theirs)) = iperf3_client_to_recv("ubj3", "-J", "1") else { return };
    let doc = one_document(&out, "[1] iperf3 TCP test from 10.77.0.1");
    let sent = u64_at(&theirs, "/end/sum_sent/bytes");
    assert!(sent > 1_000_000, "real traffic moved: {sent}");
    assert_eq!(u64_at(&doc, "/sum/receiver/total_bytes"), sent, "every byte iperf3 -c says it sent: {doc}");
    assert_eq!(u64_at(&doc, "/sum/sender/total_bytes"), sent, "the client's results are the sender side");
    assert_eq!(doc["peer"], "iperf3");
    let version = theirs["start"]["version"].as_str().expect("iperf3's version");
    assert!(version.ends_with(doc["peer_version"].as_str().expect("peer_version")), "{version} vs {doc}");
    assert_eq!(doc["queues"].as_array().map(Vec::len), Some(2), "one queue per stream");
    assert!(doc["cpu"]["receiver_per_byte"].is_object(), "our CPU per byte: {doc}");
}

/// `iperf3 -c` to `recv --iperf3 --json-stream`: a start event, interval events as they
/// close, and an end event whose document has every byte iperf3 -c says it sent.
#[test]
fn iperf3_client_to_recv_json_stream() {
    let Some((out, theirs)) = iperf3_client_to_recv("ubj4", "--json-stream", "2") else { return };
    let events = json_lines(&out);
    let names: Vec<&str> = events.iter().map(|e| e["event"].as_str().expect("an event")).collect();
    assert_eq!(names.first(), Some(&"start"), "{names:?}");
    assert_eq!(names.last(), Some(&"end"), "{names:?}");
    assert!(names.iter().filter(|n| **n == "interval").count() >= 1, "intervals as they close: {names:?}");
    assert_eq!(events[0]["peer"], "iperf3");
    assert_eq!(events[0]["test"]["queues"], 2, "{}", events[0]);
    let intervals: u64 = events.iter().filter(|e| e["event"] == "interval").map(|e| u64_at(e, "/bytes")).sum();
    let mut end = events.last().cloned().expect("end");
    let sent = u64_at(&theirs, "/end/sum_sent/bytes");
    assert_eq!(u64_at(&end, "/sum/receiver/total_bytes"), sent, "every byte iperf3 -c says it sent");
    assert!(intervals > 0 && intervals <= sent, "the intervals count real bytes: {intervals} of {sent}");
    let map = end.as_object_mut().expect("an object");
    map.remove("event");
    map.remove("stream_schema_version");
    assert_matches_schema(&end, "stream.schema.json");
}

/// NTttcp's no-sync sender (2 threads, 1 s) to `recv --ntttcp -P 2 -J`: the document's
/// received bytes are what the sender says it wrote, one queue per port.
#[test]
fn ntttcp_sender_to_recv_json() {
    const SENDER: &str = include_str!("ntttcp/sender.py");
    let _serial = serial();
    let pair = NetnsPair::up("ubjn");
    let recv = pair
        .cmd(&pair.receiver_ns(), bin(), &["recv", "--ntttcp", "-P", "2", "--once", "-J"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn recv --ntttcp");
    let recv = pair.listening(recv, "5002");
    let (far, _) =
        run_bounded(pair.cmd(&pair.sender_ns(), "python3", &["-c", SENDER, "2", "1"]), Duration::from_secs(30));
    assert!(far.status.success(), "{}", String::from_utf8_lossy(&far.stderr));
    let sent = u64_at(&serde_json::from_slice(&far.stdout).expect("the sender's JSON"), "/bytes");
    let out = finish(recv, Duration::from_secs(15));
    assert!(out.status.success(), "recv --once -J exits 0: {}", String::from_utf8_lossy(&out.stderr));
    let doc = one_document(&out, "[1] ntttcp TCP test from 10.77.0.1");
    assert!(sent > 1_000_000, "real traffic moved: {sent}");
    assert_eq!(u64_at(&doc, "/sum/receiver/total_bytes"), sent, "every byte the sender wrote: {doc}");
    assert_eq!(doc["peer"], "ntttcp");
    let queues = doc["queues"].as_array().expect("queues");
    assert_eq!(queues.len(), 2, "one queue per port: {doc}");
    assert!(queues.iter().all(|q| u64_at(q, "/receiver/total_bytes") > 0 && q["flows"] == 1), "{doc}");
    assert!(doc["cpu"]["receiver_per_byte"].is_null(), "no CPU sampled, no CPU per byte: {doc}");
}

/// A document that cannot be written is an error: `recv --iperf3 --once -J` with stdout on
/// /dev/full serves its test and exits 1 naming stdout, as `send -J` does.
#[test]
fn recv_json_to_a_full_disk_is_exit_1() {
    let Some((_serial, pair)) = peer_pair("iperf3", "ubj5") else { return };
    let full = std::fs::OpenOptions::new().write(true).open("/dev/full").expect("/dev/full");
    let recv = pair
        .cmd(&pair.receiver_ns(), bin(), &["recv", "--iperf3", "--once", "-J"])
        .stdout(full)
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn recv --iperf3");
    let recv = pair.listening(recv, "5201");
    let (client, _) = run_bounded(
        pair.cmd(&pair.sender_ns(), "iperf3", &["-c", RECV_ADDR, "-t", "1", "-J"]),
        Duration::from_secs(20),
    );
    assert!(client.status.success(), "the test itself ran: {}", String::from_utf8_lossy(&client.stdout));
    let out = finish(recv, Duration::from_secs(15));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "a failed write is exit 1: {stderr}");
    assert!(stderr.contains("writing stdout") && stderr.contains("No space left"), "{stderr}");
    assert!(stderr.contains("[1] iperf3 TCP test from 10.77.0.1"), "the test's line is still told: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// The native receiver has no document of its own (a uringbench sender's has both ends):
/// `recv -J` without a peer tool is a one-line usage error.
#[test]
fn recv_json_needs_a_peer_tool() {
    let mut recv = std::process::Command::new(bin());
    recv.args(["recv", "-J"]);
    let (out, _) = run_bounded(recv, Duration::from_secs(10));
    one_line_error(&out, 2, "--iperf2, --iperf3 or --ntttcp");
}
