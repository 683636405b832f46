//! Measurement truth on real traffic between two namespaces: cross-checks against the
//! interface counters and /proc, verdicts on provoked limits, `--repeat` and CSV.

mod common;

use common::*;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Ethernet + IPv4 + TCP with timestamps: the headers each veth packet carries once (a GSO
/// packet is counted as one packet with one set of headers).
const HEADERS: u64 = 14 + 20 + 32;

fn send_json(pair: &NetnsPair, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["--target", RECV_ADDR, "-t", "2", "--warmup", "500ms", "-J", "--cpus", "0"];
    args.extend_from_slice(extra);
    let (out, _) = pair.send(&args, Duration::from_secs(30));
    assert!(out.status.success(), "send failed: {}", String::from_utf8_lossy(&out.stderr));
    json(&out)
}

#[test]
fn figures_cross_check_with_interface_counters_and_proc() {
    let _serial = serial();
    let pair = NetnsPair::up("ubm-x");
    let recv = pair.spawn_recv(&["--cpus", "1"]);
    let doc = send_json(&pair, &["-P", "2", "-i", "500ms"]);

    // Payload + headers on the receiver's interface, over the same window, within 2%.
    let payload = u64_at(&doc, "/sum/receiver/bytes");
    let rx_bytes = u64_at(&doc, "/host/receiver/interface/rx_bytes");
    let rx_packets = u64_at(&doc, "/host/receiver/interface/rx_packets");
    let wire_payload = rx_bytes.saturating_sub(rx_packets * HEADERS);
    let diff = (wire_payload as f64 - payload as f64).abs() / payload as f64;
    assert!(
        diff < 0.02,
        "interface says {wire_payload} payload bytes, receiver counted {payload}: {:.2}% apart",
        diff * 100.0
    );

    // Cycles per byte and CPU-s/GB recomputed from the JSON's own fields.
    let busy = f64_at(&doc, "/cpu/receiver/host_busy_seconds");
    let hz = f64_at(&doc, "/cpu/receiver/nominal_hz");
    let cpb = f64_at(&doc, "/cpu/receiver_per_byte/cycles_per_byte");
    assert!((cpb - busy * hz / payload as f64).abs() < 1e-9 * cpb.max(1.0), "cycles/byte = busy x Hz / bytes");
    let per_gb = f64_at(&doc, "/cpu/receiver_per_byte/cpu_seconds_per_gb");
    assert!((per_gb - busy / (payload as f64 / 1e9)).abs() < 1e-9, "CPU-s/GB = busy / GB");

    // CPU figures are positive and bounded by window x CPUs.
    let window = f64_at(&doc, "/sum/window_seconds");
    let ncpu = doc["cpu"]["receiver"]["host"].as_array().unwrap().len() as f64;
    assert!(busy > 0.0 && busy <= window * ncpu * 1.05, "host busy {busy} s outside (0, {window} x {ncpu}]");
    for side in ["sender", "receiver"] {
        for t in doc["cpu"][side]["threads"].as_array().unwrap() {
            let u = t["utilization"].as_f64().unwrap();
            assert!(u > 0.0 && u <= 1.05, "{side} thread utilization {u} out of range");
        }
    }

    // TCP_INFO is there per interval and per flow at the end; the sender's TCP bytes cover its payload.
    let intervals = doc["intervals"].as_array().unwrap();
    assert!(intervals.len() >= 3, "500 ms intervals over 2 s");
    for i in intervals {
        assert_eq!(i["tcp_flows"].as_array().unwrap().len(), 2, "one TCP_INFO per flow per interval");
        assert!(i["tcp"]["rtt_mean_us"].as_f64().unwrap() > 0.0, "RTT measured each interval");
    }
    let flows_end = doc["tcp"]["sender_flows_end"].as_array().unwrap();
    let tcp_sent: u64 = flows_end.iter().map(|f| f["bytes_sent"].as_u64().unwrap()).sum();
    assert!(tcp_sent >= u64_at(&doc, "/sum/sender/total_bytes"), "TCP sent at least the payload written");
    assert!(doc["host"]["sender"]["snmp"]["tcp_out_segs"].as_u64().unwrap() > 0, "SNMP counters read in the namespace");
    assert_eq!(doc["path"]["egress_interface"], "ubm-xa0", "route lookup found the veth");

    drop(recv);
}

#[test]
fn verdict_names_a_tbf_qdisc() {
    let _serial = serial();
    let pair = NetnsPair::up("ubm-tbf");
    let status = pair
        .cmd(
            &pair.sender_ns(),
            "tc",
            &["qdisc", "add", "dev", "ubm-tbfa0", "root", "tbf", "rate", "1gbit", "burst", "256kb", "latency", "50ms"],
        )
        .status()
        .unwrap();
    assert!(status.success(), "tc qdisc add tbf");
    let recv = pair.spawn_recv(&["--cpus", "1"]);
    let doc = send_json(&pair, &[]);
    assert_eq!(doc["verdict"]["bottleneck"], "qdisc", "verdict: {}", doc["verdict"]);
    assert!(doc["verdict"]["evidence"].as_str().unwrap().contains("tbf"));
    let bps = f64_at(&doc, "/sum/receiver/bits_per_second");
    assert!(bps < 1.05e9, "tbf 1gbit holds the rate, got {bps:.3e}");
    drop(recv);
}

#[test]
fn verdict_names_the_configured_rate() {
    let _serial = serial();
    let pair = NetnsPair::up("ubm-rate");
    let _recv = pair.spawn_recv(&["--cpus", "1"]);
    let doc = send_json(&pair, &["--rate", "2G"]);
    assert_eq!(doc["verdict"]["bottleneck"], "configured rate", "verdict: {}", doc["verdict"]);
}

#[test]
fn verdict_names_a_cpu_shared_with_a_spinning_process() {
    let _serial = serial();
    let pair = NetnsPair::up("ubm-hog");
    let _recv = pair.spawn_recv(&["--cpus", "1"]);
    // A busy loop pinned to the sender's CPU, bounded by `timeout`, stopped with SIGTERM (which
    // `timeout` passes on to the loop) when the test is done or fails.
    let hog = Command::new("timeout")
        .args(["-s", "KILL", "8", "taskset", "-c", "0", "sh", "-c", "while :; do :; done"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let _hog = Terminate(hog);
    std::thread::sleep(Duration::from_millis(200));
    let doc = send_json(&pair, &[]);
    let v = &doc["verdict"];
    assert_eq!(v["bottleneck"], "cpu contention", "verdict: {v}");
    assert!(v["evidence"].as_str().unwrap().contains("CPU 0"), "names the CPU: {v}");
}

/// Sends SIGTERM (not SIGKILL: `timeout` must live to pass it on) when dropped.
struct Terminate(std::process::Child);

impl Drop for Terminate {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let _ = self.0.wait();
    }
}

#[test]
fn verdict_names_a_tiny_receive_window() {
    let _serial = serial();
    let pair = NetnsPair::up("ubm-rwnd");
    let status =
        pair.cmd(&pair.receiver_ns(), "sysctl", &["-qw", "net.ipv4.tcp_rmem=4096 8192 16384"]).status().unwrap();
    assert!(status.success(), "per-namespace tcp_rmem");
    let _recv = pair.spawn_recv(&["--cpus", "1"]);
    let doc = send_json(&pair, &[]);
    assert_eq!(doc["verdict"]["bottleneck"], "receive window", "verdict: {}", doc["verdict"]);
}

#[test]
fn repeat_reports_statistics_and_csv_rows_add_up() {
    let _serial = serial();
    let pair = NetnsPair::up("ubm-rep");
    let _recv = pair.spawn_recv(&["--cpus", "1"]);
    let (out, _) = pair.send(
        &["--target", RECV_ADDR, "-t", "500ms", "--warmup", "100ms", "--repeat", "3", "-J", "--cpus", "0"],
        Duration::from_secs(40),
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let doc = json(&out);
    let runs = doc["runs"].as_array().expect("runs[]");
    assert_eq!(runs.len(), 3);
    let rates: Vec<f64> = runs.iter().map(|r| r["sum"]["receiver"]["bits_per_second"].as_f64().unwrap()).collect();
    let s = &doc["summary"]["receiver_bits_per_second"];
    assert_eq!(s["n"], 3);
    let min = rates.iter().cloned().fold(f64::MAX, f64::min);
    let max = rates.iter().cloned().fold(0.0, f64::max);
    assert_eq!(s["min"].as_f64().unwrap(), min, "summary min is the smallest run");
    assert_eq!(s["max"].as_f64().unwrap(), max);
    let mean = rates.iter().sum::<f64>() / 3.0;
    assert!((s["mean"].as_f64().unwrap() - mean).abs() < 1.0);

    let (out, _) = pair.send(
        &[
            "--target", RECV_ADDR, "-t", "1", "--warmup", "100ms", "-i", "500ms", "-P", "2", "--format", "csv",
            "--cpus", "0",
        ],
        Duration::from_secs(30),
    );
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    assert_eq!(header[0], "run");
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert!(rows.iter().all(|r| r.len() == header.len()), "every row has {} columns", header.len());
    let window: Vec<&Vec<&str>> = rows.iter().filter(|r| r[1] == "window").collect();
    assert_eq!(window.len(), 3, "two queues and a sum for the window");
    let q: u64 = window[..2].iter().map(|r| r[5].parse::<u64>().unwrap()).sum();
    assert_eq!(q, window[2][5].parse::<u64>().unwrap(), "queue rows add up to the sum row");
    let intervals: u64 =
        rows.iter().filter(|r| r[1] == "interval" && r[4] == "sum").map(|r| r[5].parse::<u64>().unwrap()).sum();
    assert_eq!(intervals, q, "interval sums add up to the window");
}
