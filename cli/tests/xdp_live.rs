//! `send --engine xdp --gen live` between two namespaces: the frames an XDP program makes on
//! live frames (BPF_PROG_RUN) are counted byte- and sequence-exact by `recv --engine xdp` and
//! by the socket UDP receiver, a stop ends the generator within a second, and a veth peer that
//! cannot take XDP frames is refused with the fix. Needs root (CI runs as root).

mod common;

use common::*;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// The generator for a short test; the callers add the rate.
const LIVE: [&str; 8] = ["--engine", "xdp", "--gen", "live", "-t", "1s", "--warmup", "200ms"];

fn send_json(pair: &NetnsPair, target: &str, args: &[&str]) -> serde_json::Value {
    let all: Vec<&str> = ["--target", target, "-J"].into_iter().chain(LIVE).chain(args.iter().copied()).collect();
    let (out, _) = pair.send(&all, Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(0), "send failed: {}", String::from_utf8_lossy(&out.stderr));
    json(&out)
}

/// Every datagram the generator numbered arrived once, in full: the receiver's datagrams and
/// bytes equal the sender's, nothing lost or out of order.
fn assert_exact(doc: &serde_json::Value, at_least: u64) {
    let sent = u64_at(doc, "/sum/sender/datagrams");
    assert!(sent >= at_least, "expected at least {at_least} datagrams, the generator numbered {sent}");
    assert_eq!(u64_at(doc, "/sum/receiver/datagrams"), sent, "every frame counted: {}", doc["sum"]);
    assert_eq!(u64_at(doc, "/sum/receiver/total_bytes"), u64_at(doc, "/sum/sender/total_bytes"));
    assert_eq!(u64_at(doc, "/sum/receiver/lost"), 0, "{}", doc["sum"]);
    // Each flow numbers its own datagrams: a frame credited to the wrong flow would show here.
    assert_eq!(u64_at(doc, "/sum/receiver/out_of_order"), 0, "{}", doc["sum"]);
    assert_eq!(u64_at(doc, "/sum/receiver/duplicates"), 0, "{}", doc["sum"]);
    let notes = doc["xdp"]["sender"]["notes"].to_string();
    assert!(notes.contains("live frames: BPF_PROG_RUN"), "the report names the generator: {notes}");
}

/// Turns GRO on or off at the receiver's veth end: with it on (and no XDP program there) the
/// sender's veth accepts XDP frames for it.
fn receiver_gro(pair: &NetnsPair, on: bool) {
    let dev = pair.receiver_if();
    let state = if on { "on" } else { "off" };
    let out = pair.cmd(&pair.receiver_ns(), "ethtool", &["-K", &dev, "gro", state]).output().expect("ethtool");
    assert!(out.status.success(), "ethtool -K gro {state}: {}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn live_frames_are_counted_exactly_by_the_af_xdp_receiver() {
    let _serial = serial();
    let pair = NetnsPair::up("uxl1");
    let recv = pair.spawn_recv(&["--engine", "xdp", "--once"]);
    let doc = send_json(&pair, RECV_ADDR, &["-l", "1470", "-b", "50M"]);
    assert_exact(&doc, 3000);
    let rx = &doc["xdp"]["receiver"];
    assert_eq!(u64_at(rx, "/malformed"), 0, "the program's checksums verify: {rx}");
    assert_eq!(u64_at(rx, "/checksum_unverified"), 0, "full UDP checksums: {rx}");
    assert_eq!(u64_at(rx, "/strangers"), 0, "every frame carries one of the announced source ports: {rx}");
    assert_eq!(u64_at(rx, "/frame_len"), 1512);
    let out = recv.finish(Duration::from_secs(10));
    assert!(out.status.success(), "recv --once: {}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn live_frames_of_64_bytes_over_ipv6_and_several_flows_are_counted_exactly() {
    let _serial = serial();
    let pair = NetnsPair::up("uxl2");
    let recv = pair.spawn_recv(&["--engine", "xdp", "--once"]);
    // 4 flows of 22-byte datagrams (64-byte frames with IPv4): each flow's own sequence.
    let doc = send_json(&pair, RECV_ADDR, &["-l", "22", "--flows-per-queue", "4", "--pps", "20k"]);
    assert_exact(&doc, 4000);
    assert_eq!(u64_at(&doc, "/queues/0/flows"), 4, "{}", doc["queues"]);
    assert_eq!(u64_at(&doc, "/xdp/receiver/frame_len"), 64);
    recv.finish(Duration::from_secs(10));
    let recv = pair.spawn_recv(&["--engine", "xdp", "--once"]);
    let doc = send_json(&pair, "fd77::2", &["-l", "1400", "-b", "50M"]);
    assert_exact(&doc, 3000);
    assert_eq!(u64_at(&doc, "/xdp/receiver/malformed"), 0, "IPv6 UDP checksums verify");
    recv.finish(Duration::from_secs(10));
}

#[test]
fn live_frames_are_accounted_by_the_socket_receiver_with_gro_on() {
    let _serial = serial();
    let pair = NetnsPair::up("uxl3");
    // Without an XDP program or GRO at the peer the veth drops XDP frames: refused, with the fix.
    receiver_gro(&pair, false);
    let recv = pair.spawn_recv(&[]);
    let mut args = vec!["--target", RECV_ADDR];
    args.extend_from_slice(&LIVE);
    let (out, _) = pair.send(&args, Duration::from_secs(20));
    one_line_error(&out, 1, "does not take XDP frames");
    assert!(String::from_utf8_lossy(&out.stderr).contains("gro on"), "names the fix");
    drop(recv);
    receiver_gro(&pair, true);
    let recv = pair.spawn_recv(&["--once"]);
    let counter = |group, name| pair.snmp_counter(&pair.receiver_ns(), group, name);
    let (rcvbuf_errors, truncated) = (counter("Udp", "RcvbufErrors"), counter("IpExt", "InTruncatedPkts"));
    let doc = send_json(&pair, RECV_ADDR, &["-l", "1470", "-b", "50M"]);
    let overflowed = counter("Udp", "RcvbufErrors") - rcvbuf_errors;
    assert_eq!(overflowed, 0, "the receiving socket kept up: {}", doc["sum"]);
    // With GRO on the veth turns the XDP frames into skbs for the stack, and there a few of
    // ~6,000 (0.1-0.4% on a loaded machine) reach IP shorter than their IP header's length:
    // the kernel drops them as truncated (IpExt InTruncatedPkts) before UDP sees them. The
    // generator sends them whole (both AF_XDP receivers count every frame, checksums
    // verified), so each datagram lost is one the kernel counted truncated.
    let truncated = counter("IpExt", "InTruncatedPkts") - truncated;
    let sent = u64_at(&doc, "/sum/sender/datagrams");
    let (received, lost) = (u64_at(&doc, "/sum/receiver/datagrams"), u64_at(&doc, "/sum/receiver/lost"));
    assert!(sent > 3000, "{}", doc["sum"]);
    assert_eq!(received + lost, sent, "sequence accounting: {}", doc["sum"]);
    assert_eq!(lost, truncated, "every datagram lost is one the kernel dropped as truncated: {}", doc["sum"]);
    assert_eq!(u64_at(&doc, "/sum/receiver/total_bytes"), received * 1470, "whole datagrams: {}", doc["sum"]);
    assert_eq!(u64_at(&doc, "/sum/receiver/duplicates"), 0, "{}", doc["sum"]);
    assert!(doc["xdp"]["receiver"].is_null(), "the socket receiver has no AF_XDP figures");
    recv.finish(Duration::from_secs(10));
}

#[test]
fn a_stop_ends_the_generator_within_a_second() {
    let _serial = serial();
    let pair = NetnsPair::up("uxl4");
    let _recv = pair.spawn_recv(&["--engine", "xdp"]);
    let mut send = pair.cmd(&pair.sender_ns(), bin(), &["send", "-c", RECV_ADDR, "-J"]);
    send.args(["--engine", "xdp", "--gen", "live", "-t", "30", "--warmup", "0s", "-l", "1470", "-b", "50M"]);
    let child = send.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn send");
    std::thread::sleep(Duration::from_secs(2));
    let before = pair.receiver_if_counter("rx_packets");
    // SAFETY: kill(2) on a child this test started and has not reaped (`ip netns exec` execs
    // the program, so the pid is uringbench's).
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let signalled = Instant::now();
    std::thread::sleep(Duration::from_secs(1));
    let after_1s = pair.receiver_if_counter("rx_packets");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(pair.receiver_if_counter("rx_packets"), after_1s, "no frame arrives later than 1 s after the stop");
    assert!(after_1s > before, "frames were arriving when the stop came");
    let out = finish(child, Duration::from_secs(15));
    let took = signalled.elapsed();
    assert_eq!(out.status.code(), Some(1), "an interrupted test exits 1: {}", String::from_utf8_lossy(&out.stderr));
    assert!(took < Duration::from_secs(4), "the sender ends with the test, took {took:?}");
    let doc = json(&out);
    assert!(doc["interrupted"]["reason"].as_str().unwrap().starts_with("SIGINT on the sender"));
    // Paced far below what the pair carries, with FINs after the stop: every frame counted.
    assert_eq!(u64_at(&doc, "/sum/receiver/datagrams"), u64_at(&doc, "/sum/sender/datagrams"), "{}", doc["sum"]);
}

#[test]
fn counting_in_the_kernel_accounts_every_datagram_of_either_sender() {
    let _serial = serial();
    let pair = NetnsPair::up("uxl5");
    let kernel = ["--engine", "xdp", "--xdp-count", "kernel", "--once"];
    // Paced live frames: every one counted by the program, with each flow's sequence.
    let recv = pair.spawn_recv(&kernel);
    let doc = send_json(&pair, RECV_ADDR, &["-l", "22", "--flows-per-queue", "3", "--pps", "20k"]);
    assert_exact(&doc, 4000);
    let rx = &doc["xdp"]["receiver"];
    assert!(rx["notes"].to_string().contains("counted in the kernel"), "{rx}");
    assert_eq!(u64_at(&doc, "/queues/0/flows"), 3, "{}", doc["queues"]);
    // The program accounted (and dropped) the data frames and the FINs.
    assert!(u64_at(rx, "/steer/redirected") > u64_at(&doc, "/sum/sender/datagrams"), "{rx}");
    assert!(recv.finish(Duration::from_secs(10)).status.success());
    // The AF_XDP socket sender into the same receiver, paced: exact as well.
    let recv = pair.spawn_recv(&kernel);
    let args = ["--target", RECV_ADDR, "-J", "--engine", "xdp", "-t", "1s", "--warmup", "200ms", "-b", "50M"];
    let (out, _) = pair.send(&args, Duration::from_secs(30));
    assert!(out.status.success(), "send: {}", String::from_utf8_lossy(&out.stderr));
    let doc = json(&out);
    let sent = u64_at(&doc, "/sum/sender/datagrams");
    assert!(sent > 3000);
    assert_eq!(u64_at(&doc, "/sum/receiver/datagrams"), sent, "{}", doc["sum"]);
    assert_eq!(u64_at(&doc, "/sum/receiver/total_bytes"), u64_at(&doc, "/sum/sender/total_bytes"));
    recv.finish(Duration::from_secs(10));
    // Unpaced live frames: whatever the veth could not carry is counted lost, exactly.
    let recv = pair.spawn_recv(&kernel);
    let (out, _) = pair.send(
        &["--target", RECV_ADDR, "-J", "--engine", "xdp", "--gen", "live", "-t", "1s", "-l", "22", "-b", "0"],
        Duration::from_secs(30),
    );
    assert!(out.status.success(), "send: {}", String::from_utf8_lossy(&out.stderr));
    let doc = json(&out);
    let (sent, received) = (u64_at(&doc, "/sum/sender/datagrams"), u64_at(&doc, "/sum/receiver/datagrams"));
    assert_eq!(received + u64_at(&doc, "/sum/receiver/lost"), sent, "sequence accounting: {}", doc["sum"]);
    recv.finish(Duration::from_secs(10));
}

#[test]
fn the_new_options_outside_the_xdp_engine_are_one_line_errors() {
    let run = |args: &[&str]| {
        let mut c = std::process::Command::new(bin());
        c.args(args);
        run_bounded(c, Duration::from_secs(5)).0
    };
    one_line_error(&run(&["send", "-c", RECV_ADDR, "-u", "--gen", "live"]), 2, "--gen applies to --engine xdp");
    one_line_error(&run(&["recv", "--xdp-count", "kernel"]), 2, "--xdp-count apply to --engine xdp");
}
