//! The everyday run, between two network namespaces: long tests with many intervals and
//! flows (reports of any size), live output into a pipe, Ctrl-C and SIGTERM on either end,
//! `--json-stream`, and each tuning knob shown to take effect in the kernel or on the wire.

mod common;

use common::*;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const RECV_ADDR6: &str = "fd77::2";

/// Sums a JSON array of numbers.
fn sum_u64(v: &Value) -> u64 {
    v.as_array().expect("array").iter().map(|x| x.as_u64().expect("integer")).sum()
}

/// Checks a stream report: complete, byte-exact, `intervals` intervals that add up to the
/// window, and end-of-test TCP_INFO of every flow on both sides.
fn assert_full_report(doc: &Value, intervals: usize, queues: usize, flows: usize) {
    assert_eq!(doc["complete"], true, "complete: {}", doc["error"]);
    let sent = u64_at(doc, "/sum/sender/total_bytes");
    assert!(sent > 0);
    assert_eq!(u64_at(doc, "/sum/receiver/total_bytes"), sent, "receiver counts every byte");
    let ivs = doc["intervals"].as_array().expect("intervals[]");
    assert_eq!(ivs.len(), intervals, "every interval is in the report");
    let mut in_intervals = 0;
    for iv in ivs {
        assert_eq!(iv["queues"].as_array().map(Vec::len), Some(queues), "per-queue bytes in every interval");
        assert_eq!(sum_u64(&iv["queues"]), u64_at(iv, "/bytes"));
        assert!(iv["sender_bytes"].is_u64(), "the sender's figure beside the receiver's");
        in_intervals += u64_at(iv, "/bytes");
    }
    assert_eq!(in_intervals, u64_at(doc, "/sum/receiver/bytes"), "intervals add up to the window");
    for side in ["sender_flows_end", "receiver_flows_end"] {
        let flows_end = doc["tcp"][side].as_array().unwrap_or_else(|| panic!("tcp.{side}"));
        assert_eq!(flows_end.len(), flows, "tcp.{side} has every flow");
        assert!(flows_end.iter().all(|f| f["snd_mss"].as_u64().is_some_and(|m| m > 0)), "TCP_INFO of each flow");
    }
}

#[test]
fn twenty_seconds_of_one_second_intervals_at_p16() {
    let _serial = serial();
    let pair = NetnsPair::up("ube-long");
    let _recv = pair.spawn_recv(&[]);
    let (out, _) = pair.send(&["-c", RECV_ADDR, "-t", "20", "-i", "1", "-P", "16", "-J"], Duration::from_secs(60));
    assert!(out.status.success(), "send failed: {}", String::from_utf8_lossy(&out.stderr));
    let doc = json(&out);
    assert_full_report(&doc, 20, 16, 16);
    // Far more than one frame of the old protocol, every interval with 16 flows' TCP_INFO.
    assert!(out.stdout.len() > 200_000, "report of {} bytes", out.stdout.len());
}

#[test]
fn six_seconds_of_ten_millisecond_intervals_at_p8() {
    let _serial = serial();
    let pair = NetnsPair::up("ube-10ms");
    let _recv = pair.spawn_recv(&[]);
    let (out, _) = pair.send(&["-c", RECV_ADDR, "-t", "6", "-i", "10ms", "-P", "8", "-J"], Duration::from_secs(60));
    assert!(out.status.success(), "send failed: {}", String::from_utf8_lossy(&out.stderr));
    assert_full_report(&json(&out), 600, 8, 8);
}

#[test]
fn a_thousand_flows_report_every_flow() {
    let _serial = serial();
    let pair = NetnsPair::up("ube-1k");
    let _recv = pair.spawn_recv(&[]);
    // 128 KiB socket buffers: with autotuned ones, 2,048 sockets at 25 Gbit/s take this host's
    // TCP memory past net.ipv4.tcp_mem's pressure line in every run (TcpExtTCPMemoryPressures
    // on both ends), and about one run in five a send then waited for memory past the end.
    let args = ["-c", RECV_ADDR, "-t", "5", "-P", "128", "--flows-per-queue", "8", "-w", "128K", "-J"];
    let (out, _) = pair.send(&args, Duration::from_secs(90));
    assert!(out.status.success(), "send failed: {}", String::from_utf8_lossy(&out.stderr));
    let doc = json(&out);
    // Intervals of 1 s are the default, as iperf3's: a 5 s window has 5, each with 128 queues.
    assert_full_report(&doc, 5, 128, 1024);
}

/// Starts `uringbench send ARGS` in the sender namespace with stdout piped; returns the
/// child and a thread that timestamps each line as it arrives.
type Lines = std::thread::JoinHandle<Vec<(Duration, String)>>;

fn send_piped(pair: &NetnsPair, args: &[&str]) -> (std::process::Child, Lines, Instant) {
    let mut c = pair.cmd(&pair.sender_ns(), bin(), &["send"]);
    c.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    let start = Instant::now();
    let mut child = c.spawn().expect("spawn send");
    let stdout = child.stdout.take().expect("stdout");
    let lines = std::thread::spawn(move || {
        BufReader::new(stdout).lines().map_while(Result::ok).map(|l| (start.elapsed(), l)).collect::<Vec<_>>()
    });
    (child, lines, start)
}

/// Waits (bounded) for a child and returns its exit status and stderr.
fn wait_bounded(mut child: std::process::Child, limit: Duration) -> (std::process::ExitStatus, String) {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut e, &mut err);
            }
            return (status, err);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("process did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn interval_lines_reach_a_pipe_as_their_intervals_close() {
    let _serial = serial();
    let pair = NetnsPair::up("ube-pipe");
    let _recv = pair.spawn_recv(&[]);
    let (child, lines, _) = send_piped(&pair, &["-c", RECV_ADDR, "-t", "4", "-i", "1", "--warmup", "1s"]);
    let (status, err) = wait_bounded(child, Duration::from_secs(30));
    let lines = lines.join().unwrap();
    assert!(status.success(), "send failed: {err}");
    let at = |needle: &str| {
        lines
            .iter()
            .find(|(_, l)| l.contains(needle))
            .map(|(t, _)| *t)
            .unwrap_or_else(|| panic!("no '{needle}' in {lines:?}"))
    };
    let header = at("uringbench 0.1.0: Tcp stream");
    let first = at("[SUM]  0.00-1.00");
    let summary = at("total: sender wrote");
    // The header prints as the test starts; the first interval closes 2 s later (1 s warm-up
    // + 1 s) and its line must follow within 0.5 s, long before the summary.
    let lag = first.saturating_sub(header).as_secs_f64() - 2.0;
    assert!(lag < 0.5, "first interval line {lag:.3} s after its interval closed: {lines:?}");
    assert!(lag > -0.2, "an interval line cannot come before its interval closed: {lines:?}");
    assert!(summary - first > Duration::from_millis(2500), "interval lines are live, not printed at the end");
    let sums = lines.iter().filter(|(_, l)| l.starts_with("[SUM]")).count();
    assert_eq!(sums, 5, "four interval lines and the window line: {lines:?}");
}

fn sigint(child: &std::process::Child) {
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
}

#[test]
fn sigint_prints_a_partial_report_and_recv_serves_the_next_test() {
    let _serial = serial();
    let pair = NetnsPair::up("ube-int");
    let _recv = pair.spawn_recv(&[]);
    let (child, lines, start) = send_piped(&pair, &["-c", RECV_ADDR, "-t", "10", "-i", "1", "-J"]);
    std::thread::sleep(Duration::from_secs(3));
    sigint(&child);
    let signalled = Instant::now();
    let (status, err) = wait_bounded(child, Duration::from_secs(10));
    let took = signalled.elapsed();
    assert_eq!(status.code(), Some(1), "an interrupted test exits 1: {err}");
    assert!(took < Duration::from_secs(2), "exits within 2 s of the signal, took {took:?}");
    let text: String = lines.join().unwrap().into_iter().map(|(_, l)| l + "\n").collect();
    let doc: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("JSON ({e}): {text}"));
    assert_eq!(doc["complete"], false);
    let at = f64_at(&doc, "/interrupted/at_seconds");
    assert!(at > 0.5 && at < 3.0, "interrupted about 2 s into the window (1 s warm-up), got {at}");
    assert_eq!(f64_at(&doc, "/interrupted/of_seconds"), 10.0);
    assert!(doc["error"].as_str().unwrap().starts_with("interrupted at"), "{}", doc["error"]);
    assert!(u64_at(&doc, "/sum/receiver/bytes") > 0, "the receiver's figures for the part that ran");
    assert_eq!(u64_at(&doc, "/sum/receiver/total_bytes"), u64_at(&doc, "/sum/sender/total_bytes"));
    assert!(!doc["intervals"].as_array().unwrap().is_empty());
    assert!(start.elapsed() < Duration::from_secs(8));
    // recv is unharmed.
    let (out, _) = pair.send(&["-c", RECV_ADDR, "-t", "1", "--warmup", "0s", "-J"], Duration::from_secs(20));
    assert!(out.status.success(), "next test: {}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn sigterm_to_recv_ends_the_running_test_with_a_report_then_exits_0() {
    let _serial = serial();
    let pair = NetnsPair::up("ube-term");
    let recv = pair.spawn_recv(&[]);
    let (child, lines, _) = send_piped(&pair, &["-c", RECV_ADDR, "-t", "10", "-J"]);
    std::thread::sleep(Duration::from_secs(3));
    // The only process in the receiver's namespace is this test's recv.
    let pid = Command::new("ip").args(["netns", "pids", &pair.receiver_ns()]).output().expect("ip netns pids");
    let pids = String::from_utf8_lossy(&pid.stdout).to_string();
    let pid: i32 =
        pids.lines().next().and_then(|p| p.trim().parse().ok()).unwrap_or_else(|| panic!("recv pid: {pids}"));
    // SAFETY: kill(2) on the recv process this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let recv_out = recv.finish(Duration::from_secs(10));
    assert_eq!(recv_out.status.code(), Some(0), "recv exits 0 after a stop");
    let log = String::from_utf8_lossy(&recv_out.stdout);
    assert!(log.contains("SIGTERM: accepting no more tests"), "{log}");
    assert!(log.contains("] done "), "the running test ended with its report: {log}");
    let (status, err) = wait_bounded(child, Duration::from_secs(10));
    assert_eq!(status.code(), Some(1), "the sender's test was cut short: {err}");
    let text: String = lines.join().unwrap().into_iter().map(|(_, l)| l + "\n").collect();
    let doc: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("JSON ({e}): {text}"));
    assert!(doc["error"].as_str().unwrap().contains("SIGTERM on the receiver"), "{}", doc["error"]);
    assert!(u64_at(&doc, "/sum/receiver/bytes") > 0);
    assert_eq!(u64_at(&doc, "/sum/receiver/total_bytes"), u64_at(&doc, "/sum/sender/total_bytes"));
}

#[test]
fn json_stream_events_arrive_during_the_test_and_end_with_the_document() {
    let _serial = serial();
    let pair = NetnsPair::up("ube-js");
    let _recv = pair.spawn_recv(&[]);
    let (child, lines, _) = send_piped(&pair, &["-c", RECV_ADDR, "-t", "3", "-i", "500ms", "-P", "2", "--json-stream"]);
    let (status, err) = wait_bounded(child, Duration::from_secs(30));
    assert!(status.success(), "{err}");
    let lines = lines.join().unwrap();
    let events: Vec<(Duration, Value)> = lines
        .iter()
        .map(|(t, l)| (*t, serde_json::from_str(l).unwrap_or_else(|e| panic!("line is not JSON ({e}): {l}"))))
        .collect();
    let kinds: Vec<&str> = events.iter().map(|(_, e)| e["event"].as_str().unwrap()).collect();
    assert_eq!(kinds.first(), Some(&"start"));
    assert_eq!(kinds.last(), Some(&"end"));
    assert_eq!(kinds.iter().filter(|k| **k == "interval").count(), 6, "{kinds:?}");
    assert!(events.iter().all(|(_, e)| e["stream_schema_version"] == 1));
    let first_interval = events.iter().find(|(_, e)| e["event"] == "interval").unwrap().0;
    let end = events.last().unwrap().0;
    assert!(end - first_interval > Duration::from_secs(2), "intervals stream while the test runs");
    // The end event is the -J document.
    let mut end_doc = events.last().unwrap().1.clone();
    let map = end_doc.as_object_mut().unwrap();
    map.remove("event");
    map.remove("stream_schema_version");
    let (out, _) = pair.send(&["-c", RECV_ADDR, "-t", "1", "-i", "500ms", "-P", "2", "-J"], Duration::from_secs(20));
    let j = json(&out);
    let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(&end_doc), keys(&j), "the end event carries the -J document's keys");
    let streamed: Vec<Value> =
        events.iter().filter(|(_, e)| e["event"] == "interval").map(|(_, e)| e["queues"].clone()).collect();
    let reported: Vec<Value> = end_doc["intervals"].as_array().unwrap().iter().map(|i| i["queues"].clone()).collect();
    assert_eq!(streamed, reported, "each streamed interval is the report's interval");
}

/// Runs one send with extra args and returns its JSON report (asserting success).
fn send_json(pair: &NetnsPair, extra: &[&str]) -> Value {
    let mut args = vec!["-c", RECV_ADDR, "-t", "2", "--warmup", "500ms", "-J"];
    args.extend_from_slice(extra);
    let (out, _) = pair.send(&args, Duration::from_secs(40));
    assert!(out.status.success(), "send {extra:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    json(&out)
}

fn flows_end(doc: &Value, side: &str) -> Vec<Value> {
    doc["tcp"][format!("{side}_flows_end")].as_array().expect("flows_end").clone()
}

#[test]
fn congestion_mss_window_and_pacing_take_effect_in_the_kernel() {
    let _serial = serial();
    let pair = NetnsPair::up("ube-knob");
    let _recv = pair.spawn_recv(&[]);
    for algo in ["cubic", "reno"] {
        let doc = send_json(&pair, &["-C", algo]);
        assert_eq!(doc["test"]["congestion"], algo, "echoed in test");
        for side in ["sender", "receiver"] {
            assert!(flows_end(&doc, side).iter().all(|f| f["congestion"] == algo), "{side} reads back {algo}");
        }
    }
    let doc = send_json(&pair, &["-M", "1000"]);
    assert!(flows_end(&doc, "sender").iter().all(|f| f["snd_mss"].as_u64().unwrap() <= 1000), "{doc}");

    // -w 64K: the kernel keeps twice the request for its bookkeeping. The sender's TCP_INFO
    // (the kernel's state, read back) then shows the receiver advertising no more than that
    // buffer, and time spent limited by it; without -w, autotuning opens the window wider.
    let small = send_json(&pair, &["-w", "64K"]);
    for side in ["sender", "receiver"] {
        for f in flows_end(&small, side) {
            assert_eq!(f["sndbuf"], 131072, "{side}: {f}");
            assert_eq!(f["rcvbuf"], 131072, "{side}: {f}");
        }
    }
    let snd_wnd = |f: &Value| f["snd_wnd"].as_u64().unwrap_or_else(|| panic!("TCP_INFO snd_wnd: {f}"));
    for f in flows_end(&small, "sender") {
        assert!(snd_wnd(&f) <= 131072, "the peer's window fits its 128 KiB buffer: {f}");
        assert!(f["rwnd_limited_us"].as_u64().unwrap() > 0, "the kernel saw the window limit the sender: {f}");
    }
    let plain = send_json(&pair, &[]);
    for f in flows_end(&plain, "sender") {
        assert!(snd_wnd(&f) > 131072, "without -w the window grows past 128 KiB: {f}");
    }

    // --fq-rate 500M on each of 2 flows: 1 Gbit/s in total, paced by the kernel.
    let paced = send_json(&pair, &["--fq-rate", "500M", "-P", "2"]);
    let bps = f64_at(&paced, "/sum/receiver/bits_per_second");
    // The kernel's pacing is the ceiling; the floor is a sanity bound two orders of magnitude
    // below 1 Gbit/s, not a speed target.
    assert!((1e7..1.1e9).contains(&bps), "--fq-rate 500M -P 2 received {:.3} Gbit/s", bps / 1e9);
    for f in flows_end(&paced, "sender") {
        assert_eq!(f["max_pacing_rate"], 62_500_000, "500 Mbit/s in bytes per second: {f}");
    }
}

#[test]
fn tos_marks_the_packets_the_receiver_counts() {
    let _serial = serial();
    let pair = NetnsPair::up("ube-tos");
    let _recv = pair.spawn_recv(&[]);
    let ipt = |args: &[&str]| pair.cmd(&pair.receiver_ns(), "iptables", args).output().expect("iptables");
    let add = ipt(&["-I", "INPUT", "-p", "tcp", "--dport", "5300", "-m", "dscp", "--dscp", "0x0a", "-j", "ACCEPT"]);
    assert!(add.status.success(), "iptables: {}", String::from_utf8_lossy(&add.stderr));
    let count = || {
        let out = ipt(&["-L", "INPUT", "-v", "-x", "-n"]);
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        text.lines()
            .find(|l| l.contains("DSCP match 0x0a"))
            .and_then(|l| l.split_whitespace().next()?.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no DSCP 0x0a rule counter in:\n{text}"))
    };
    let before = count();
    let _ = send_json(&pair, &[]);
    assert_eq!(count(), before, "unmarked packets do not match DSCP 10");
    let doc = send_json(&pair, &["-S", "0x28"]);
    let marked = count() - before;
    // iptables' own counter; the floor is a sanity bound (a 2.75 s test sends ~10^5 packets).
    assert!(marked > 1_000, "TOS 0x28 (DSCP 10, AF11) marks the data packets: {marked} counted");
    assert_eq!(doc["test"]["tos"], 0x28);
    assert!(flows_end(&doc, "sender").iter().all(|f| f["tos"] == 0x28));
    let doc = send_json(&pair, &["--dscp", "AF11"]);
    assert_eq!(doc["test"]["tos"], 0x28, "--dscp AF11 is TOS 0x28");
}

#[test]
fn bytes_ipv6_bind_dev_and_skip_rx_copy() {
    let _serial = serial();
    let pair = NetnsPair::up("ube-misc");
    let recv = pair.spawn_recv(&[]);
    // -n 1G: exactly 2^30 bytes on both ends, over 3 flows (shares of 357913942 and ...941).
    let (out, _) = pair.send(&["-c", RECV_ADDR, "-n", "1G", "-P", "3", "-t", "60", "-J"], Duration::from_secs(90));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let doc = json(&out);
    assert_eq!(u64_at(&doc, "/sum/sender/total_bytes"), 1 << 30);
    assert_eq!(u64_at(&doc, "/sum/receiver/total_bytes"), 1 << 30);
    assert_eq!(doc["complete"], true, "a test that ends by delivering its bytes is complete");

    // -6 over the pair's IPv6 addresses.
    let (out, _) = pair.send(&["-c", RECV_ADDR6, "-6", "-t", "1", "--warmup", "0s", "-J"], Duration::from_secs(20));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let doc = json(&out);
    assert!(doc["target"].as_str().unwrap().contains("fd77::2"), "{}", doc["target"]);
    assert_eq!(u64_at(&doc, "/sum/receiver/total_bytes"), u64_at(&doc, "/sum/sender/total_bytes"));

    // --bind-dev to the wrong device: lo has no route to the receiver.
    let (out, _) = pair.send(&["-c", RECV_ADDR, "--bind-dev", "lo", "-t", "1"], Duration::from_secs(20));
    assert_ne!(out.status.code(), Some(0), "bound to lo, nothing reaches the receiver");

    // --skip-rx-copy: exact, and the receiving thread's CPU per byte for both paths, each
    // reading checked against the kernel's own accounting of the receiver process.
    let per_gb = |extra: &[&str]| {
        let before = process_cpu_seconds(recv.pid());
        let d = send_json(&pair, extra);
        let process = process_cpu_seconds(recv.pid()) - before;
        let t = &d["cpu"]["receiver"]["threads"][0];
        let thread = f64_at(t, "/user_seconds") + f64_at(t, "/system_seconds");
        // The thread's window is inside the process's run; 2 ticks of slack for the edges.
        assert!(
            0.0 < thread && thread <= process + 0.02,
            "{extra:?}: receiving thread {thread} s, the process {process} s (/proc/PID/stat)"
        );
        let per_gb = thread / (u64_at(&d, "/sum/receiver/bytes") as f64 / 1e9);
        (d, per_gb)
    };
    let mut copy = Vec::new();
    let mut skip = Vec::new();
    for _ in 0..2 {
        copy.push(per_gb(&[]).1);
        let (d, s) = per_gb(&["--skip-rx-copy"]);
        assert_eq!(u64_at(&d, "/sum/receiver/total_bytes"), u64_at(&d, "/sum/sender/total_bytes"));
        assert!(d["receiver"]["path"].as_str().unwrap().contains("MSG_TRUNC"), "the report names the receive path");
        skip.push(s);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        (v[0] + v[1]) / 2.0
    };
    let (c, s) = (median(&mut copy), median(&mut skip));
    // The saving is reported, not asserted: the thread's CPU comes in 10 ms ticks, a 2 s test
    // spends about 0.1 s of it, and on this shared 2-vCPU machine the difference was within that
    // noise (one run 0.049 vs 0.059 s/GB the wrong way round). What is asserted above is that
    // each figure compared is a real reading (within the kernel's count for the process).
    eprintln!("receiver thread CPU-s per GB: copy {c:.3}, --skip-rx-copy {s:.3} ({:.0}% less)", (1.0 - s / c) * 100.0);
}

#[test]
fn bad_knobs_exit_2_before_any_traffic() {
    let _serial = serial();
    let pair = NetnsPair::up("ube-bad");
    let recv = pair.spawn_recv(&[]);
    let cases: &[(&[&str], &str)] = &[
        (&["-C", "no-such-cc"], "tcp_available_congestion_control"),
        (&["-S", "256"], "out of range"),
        (&["--dscp", "AF51"], "invalid DSCP"),
        (&["-M", "50"], "below 88"),
        (&["-M", "9000"], "MTU 1500"),
        (&["-w", "3G"], "2 GiB"),
        (&["-n", "0"], "at least 1"),
        (&["-6"], "no IPv6 address"),
        (&["--bind", "10.99.99.99"], "no local interface has that address"),
        (&["--bind-dev", "nosuchdev0"], "no such device"),
        (&["-u", "-n", "1M"], "applies to TCP"),
        (&["--iperf2", "-C", "reno"], "not to --iperf2"),
    ];
    for (extra, needle) in cases {
        let mut args = vec!["-c", RECV_ADDR, "-t", "1"];
        args.extend_from_slice(extra);
        let (out, _) = pair.send(&args, Duration::from_secs(20));
        one_line_error(&out, 2, needle);
    }
    let log = String::from_utf8_lossy(&recv.kill().stdout).to_string();
    assert!(!log.contains("test from"), "no test started: {log}");
}
