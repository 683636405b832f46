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

/// Busy seconds of each CPU so far (user+nice+system+irq+softirq+steal), read from /proc/stat
/// by the test itself.
fn proc_stat_busy() -> Vec<f64> {
    // SAFETY: sysconf has no preconditions.
    let tick = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let text = std::fs::read_to_string("/proc/stat").expect("read /proc/stat");
    text.lines()
        .filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
        .map(|l| {
            let f: Vec<f64> = l.split_whitespace().skip(1).map(|x| x.parse().expect("a /proc/stat field")).collect();
            (f[0] + f[1] + f[2] + f[5] + f[6] + f[7]) / tick
        })
        .collect()
}

/// The CPU's nominal frequency as /proc/cpuinfo states it ("model name ... @ 2.20GHz", else
/// "cpu MHz"), parsed here rather than by uringbench's parser.
fn cpuinfo_hz() -> f64 {
    let text = std::fs::read_to_string("/proc/cpuinfo").expect("read /proc/cpuinfo");
    let field =
        |name: &str| text.lines().find(|l| l.starts_with(name)).and_then(|l| l.split_once(':')).map(|(_, v)| v.trim());
    match field("model name").and_then(|m| m.rsplit_once(" @ ")).and_then(|(_, f)| f.strip_suffix("GHz")) {
        Some(ghz) => ghz.trim().parse::<f64>().expect("GHz in model name") * 1e9,
        None => field("cpu MHz").expect("cpu MHz in /proc/cpuinfo").parse::<f64>().expect("cpu MHz") * 1e6,
    }
}

#[test]
fn figures_cross_check_with_interface_counters_and_proc() {
    let _serial = serial();
    let pair = NetnsPair::up("ubm-x");
    let recv = pair.spawn_recv(&["--cpus", "1"]);
    // The veth's counters and /proc/stat, read here around the whole run (no warm-up, so the
    // window is nearly all of it).
    let (rx_bytes_0, rx_packets_0) = (pair.receiver_if_counter("rx_bytes"), pair.receiver_if_counter("rx_packets"));
    let busy_0 = proc_stat_busy();
    let out_segs_0 = pair.snmp_counter(&pair.sender_ns(), "Tcp", "OutSegs");
    let args = ["--target", RECV_ADDR, "-t", "2", "--warmup", "0s", "--cooldown", "0s", "-J", "--cpus", "0"];
    let (out, _) = pair.send(&[&args[..], &["-P", "2", "-i", "500ms"]].concat(), Duration::from_secs(30));
    let busy_1 = proc_stat_busy();
    let out_segs_1 = pair.snmp_counter(&pair.sender_ns(), "Tcp", "OutSegs");
    let (rx_bytes_1, rx_packets_1) = (pair.receiver_if_counter("rx_bytes"), pair.receiver_if_counter("rx_packets"));
    assert!(out.status.success(), "send failed: {}", String::from_utf8_lossy(&out.stderr));
    let doc = json(&out);

    // Payload + headers on the receiver's interface (sysfs) over the whole run, within 2% of
    // every byte the receiver counted (the control channel's few kB are inside that).
    let total = u64_at(&doc, "/sum/receiver/total_bytes");
    let (rx_bytes, rx_packets) = (rx_bytes_1 - rx_bytes_0, rx_packets_1 - rx_packets_0);
    let wire_payload = rx_bytes.saturating_sub(rx_packets * HEADERS);
    let diff = (wire_payload as f64 - total as f64).abs() / total as f64;
    assert!(
        diff < 0.02,
        "sysfs says {wire_payload} payload bytes, receiver counted {total}: {:.2}% apart",
        diff * 100.0
    );
    // uringbench's own reading of the same counters, over its window, lies inside that.
    let payload = u64_at(&doc, "/sum/receiver/bytes");
    let window_rx_bytes = u64_at(&doc, "/host/receiver/interface/rx_bytes");
    assert!(
        payload <= window_rx_bytes && window_rx_bytes <= rx_bytes,
        "the report's interface rx_bytes {window_rx_bytes} must cover its {payload} payload and fit the {rx_bytes} sysfs saw"
    );

    // CPU: the report's busy seconds per CPU fit what /proc/stat (read here) saw over the whole
    // run, and cover at least half of it (the window is nearly all of the run, and an unpaced
    // sender keeps its CPU busy throughout). Two ticks of slack per CPU for the sampling edges.
    let slack = 0.02;
    let host = doc["cpu"]["receiver"]["host"].as_array().expect("cpu.receiver.host[]");
    assert_eq!(host.len(), busy_0.len(), "one entry per CPU in /proc/stat");
    for h in host {
        let cpu = h["cpu"].as_u64().unwrap() as usize;
        let (reported, seen) = (h["busy_seconds"].as_f64().unwrap(), busy_1[cpu] - busy_0[cpu]);
        assert!(reported <= seen + slack, "CPU {cpu}: report says {reported} s busy, /proc/stat saw {seen} s");
    }
    let seen: f64 = busy_1.iter().zip(&busy_0).map(|(b, a)| b - a).sum();
    let busy = f64_at(&doc, "/cpu/receiver/host_busy_seconds");
    let ncpu = busy_0.len() as f64;
    assert!(
        seen * 0.5 <= busy && busy <= seen + slack * ncpu,
        "host busy {busy} s against {seen} s in /proc/stat over the whole run"
    );
    // The per-byte figures, turned back into seconds with the test's own frequency and byte
    // count, land on the same busy time.
    let hz = cpuinfo_hz();
    assert_eq!(f64_at(&doc, "/cpu/receiver/nominal_hz"), hz, "nominal Hz as /proc/cpuinfo states it");
    let cpb = f64_at(&doc, "/cpu/receiver_per_byte/cycles_per_byte");
    let per_gb = f64_at(&doc, "/cpu/receiver_per_byte/cpu_seconds_per_gb");
    for (what, secs) in [("cycles/byte", cpb * payload as f64 / hz), ("CPU-s/GB", per_gb * payload as f64 / 1e9)] {
        assert!(
            seen * 0.5 <= secs && secs <= seen + slack * ncpu,
            "{what} implies {secs} s busy against {seen} s in /proc/stat"
        );
    }
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
    // The sender namespace's SNMP counter over the window: non-zero, and within what
    // /proc/net/snmp (read here) counted over the whole run.
    let out_segs = u64_at(&doc, "/host/sender/snmp/tcp_out_segs");
    assert!(
        0 < out_segs && out_segs <= out_segs_1 - out_segs_0,
        "report: {out_segs} TCP segments out, /proc/net/snmp: {}",
        out_segs_1 - out_segs_0
    );
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
