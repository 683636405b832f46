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
const RECEIVER: &str = include_str!("ntttcp/receiver.py");

/// NTttcp's UDP receiver (`-r -u -m N,*,IP -ns`): one socket per thread from 5001, counting
/// datagrams and bytes until 1.5 s without one (after the first); says `ready` once bound.
const UDP_RECEIVER: &str = include_str!("ntttcp/udp_receiver.py");

/// NTttcp's sender (`-s -m N,*,IP -ns -t T`): one thread per port, sending 64 KiB writes for
/// T seconds, then closing; prints the bytes written.
const SENDER: &str = include_str!("ntttcp/sender.py");

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

/// NTttcp's UDP sender (`-s -u -m N,*,IP -ns`): datagrams of 1400 plain bytes to ports
/// 5001..5000+N in turn, paced at RATE datagrams a second for SECS seconds. Prints per port
/// the datagrams sent, and how many left within [FROM, TO) seconds of the first.
const UDP_SENDER: &str = include_str!("ntttcp/udp_sender.py");

/// `recv --ntttcp -u ARGS` in the receiver namespace once it listens, and NTttcp's UDP sender
/// (`ports`, `rate` datagrams/s for `secs`, counting the ones sent in `inside`) in the
/// sender's: our test line, what the sender sent per port and inside, and the datagrams the
/// receiving kernel dropped (Udp InErrors).
fn ntttcp_udp_sender_to_us(
    name: &str,
    recv: &[&str],
    sender: [&str; 3],
    inside: (f64, f64),
) -> (String, Vec<u64>, u64, u64) {
    use std::io::{BufRead, Read};
    let _serial = serial();
    let pair = NetnsPair::up(name);
    let args = [&["recv", "--ntttcp", "-u", "--once"][..], recv].concat();
    let mut child = pair
        .cmd(&pair.receiver_ns(), bin(), &args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn recv --ntttcp -u");
    let mut lines = std::io::BufReader::new(child.stdout.take().expect("its stdout"));
    let mut first = String::new();
    lines.read_line(&mut first).expect("recv --ntttcp -u says it listens");
    assert!(first.contains("listening on :: UDP ports 5001.."), "{first}");
    let rest = std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = lines.read_to_string(&mut rest);
        rest
    });
    let dropped_before = pair.snmp_counter(&pair.receiver_ns(), "Udp", "InErrors");
    let (lo, hi) = (inside.0.to_string(), inside.1.to_string());
    let far_args = ["-c", UDP_SENDER, sender[0], sender[1], sender[2], &lo, &hi];
    let (far, _) = run_bounded(pair.cmd(&pair.sender_ns(), "python3", &far_args), Duration::from_secs(30));
    assert!(far.status.success(), "{}", String::from_utf8_lossy(&far.stderr));
    let out = finish(child, Duration::from_secs(20));
    let log = rest.join().expect("the reader");
    assert!(out.status.success(), "recv --ntttcp -u failed: {log}{}", String::from_utf8_lossy(&out.stderr));
    let dropped = pair.snmp_counter(&pair.receiver_ns(), "Udp", "InErrors") - dropped_before;
    let theirs: serde_json::Value = serde_json::from_slice(&far.stdout).expect("the sender's JSON");
    let sent: Vec<u64> = theirs["datagrams"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
    let line =
        log.lines().find(|l| l.starts_with("[1] ntttcp UDP test from 10.77.0.1")).unwrap_or_else(|| panic!("{log}"));
    assert!(!line.contains("incomplete"), "{line}");
    (line.to_string(), sent, u64_at(&theirs, "/inside"), dropped)
}

/// The number just before `marker` in `line`.
fn number_before(line: &str, marker: &str) -> u64 {
    line.split(marker).next().and_then(|h| h.rsplit(' ').next()).and_then(|b| b.parse().ok()).expect(marker)
}

/// NTttcp's UDP sender on 8 ports to `recv --ntttcp -u -P 8`, all within the window: we
/// counted, per port, every datagram it sent, less the ones our kernel dropped.
#[test]
fn ntttcp_udp_sender_eight_threads_to_us() {
    let (line, sent, _, dropped) =
        ntttcp_udp_sender_to_us("ubne", &["-P", "8", "-t", "3"], ["8", "8000", "1.5"], (0.0, 3.0));
    let per_port: Vec<u64> = line
        .split("per port: ")
        .nth(1)
        .and_then(|t| t.split(';').next())
        .map(|t| t.split(' ').map(|b| b.parse().expect("a port's bytes")).collect())
        .expect("per port bytes");
    let total: u64 = sent.iter().sum();
    assert!(total > 10_000, "real traffic: {total} datagrams");
    assert_eq!(per_port.len(), 8, "{line}");
    for (port, (&ours, &theirs)) in per_port.iter().zip(&sent).enumerate() {
        assert!(ours > 0 && ours <= theirs * 1400, "port {}: {ours} of {} bytes: {line}", 5001 + port, theirs * 1400);
    }
    assert_eq!(number_before(&line, " datagrams)"), total - dropped, "all sent less the kernel's drops: {line}");
    assert_eq!(number_before(&line, " bytes in "), (total - dropped) * 1400, "{line}");
}

/// NTttcp's window: with `--warmup 1s -t 1s --cooldown 1s` only the datagrams of the second
/// second after the first are counted, every one of the 2.8 s received.
#[test]
fn ntttcp_udp_warmup_and_cooldown_are_not_counted() {
    let recv = ["-P", "1", "-t", "1s", "--warmup", "1s", "--cooldown", "1s"];
    let (line, sent, inside, dropped) = ntttcp_udp_sender_to_us("ubnf", &recv, ["1", "4000", "2.8"], (1.0, 2.0));
    let all = number_before(&line, " bytes received in all");
    assert_eq!(all, (sent[0] - dropped) * 1400, "every datagram received, in the window or not: {line}");
    let counted = number_before(&line, " datagrams)");
    assert!(inside > 2000, "real traffic inside the window: {inside}");
    // The two ends' clocks for the window differ by the first datagram's flight and the
    // sender's pacing: a few milliseconds' worth at most.
    let slack = 40 + dropped;
    assert!(counted + slack >= inside && counted <= inside + slack, "counted {counted}, sent inside {inside}: {line}");
    assert!(line.contains("in 1.000 s") && line.contains("warm-up 1.0 s and cool-down 1.0 s not counted"), "{line}");
}

/// A window `recv --ntttcp -u` cannot serve is refused in one line before any traffic.
#[test]
fn recv_ntttcp_udp_refuses_a_window_it_cannot_serve() {
    let recv = |args: &[&str]| {
        let mut c = std::process::Command::new(bin());
        c.args(["recv", "--ntttcp", "-u", "--ntttcp-port", "47001"]).args(args);
        run_bounded(c, Duration::from_secs(10)).0
    };
    one_line_error(&recv(&["-t", "0"]), 2, "-t must be more than 0");
    one_line_error(&recv(&["-t", "9m", "--warmup", "1m", "--cooldown", "1m"]), 2, "longer than --max-time 600 s");
}
