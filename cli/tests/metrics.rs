//! `recv --metrics`: a real Prometheus (Debian's `prometheus`) scrapes two receivers, and the
//! endpoint holds under a dripping and an oversized request while a test runs.

mod common;

use common::{bin, run_bounded, serial, skip, Lacking, NetnsPair};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const METRICS_PORT: u16 = 9477;
const PROMETHEUS: &str = "127.0.0.1:19090";

/// Runs `f` on a thread inside network namespace `ns` (sockets it makes live there).
fn in_netns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let path = format!("/var/run/netns/{ns}");
    std::thread::spawn(move || {
        use std::os::fd::AsRawFd;
        let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("open {path}: {e}"));
        // SAFETY: setns on a descriptor of a namespace file; it moves only this thread.
        let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns {path}: {}", std::io::Error::last_os_error());
        f()
    })
    .join()
    .expect("netns thread")
}

/// An HTTP/1.0 GET from namespace `ns`: (status line, body).
fn http_get(ns: &str, addr: &str, path: &str) -> std::io::Result<(String, String)> {
    let (addr, request) = (addr.to_string(), format!("GET {path} HTTP/1.0\r\nHost: test\r\n\r\n"));
    in_netns(ns, move || {
        let mut s = TcpStream::connect_timeout(&addr.parse::<SocketAddr>().unwrap(), Duration::from_secs(2))?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        s.write_all(request.as_bytes())?;
        let mut text = String::new();
        s.read_to_string(&mut text)?;
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        Ok((head.lines().next().unwrap_or("").to_string(), body.to_string()))
    })
}

fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A PromQL instant query through Prometheus's HTTP API: its result vector.
fn query(ns: &str, promql: &str) -> Vec<serde_json::Value> {
    let (status, body) = http_get(ns, PROMETHEUS, &format!("/api/v1/query?query={}", url_encode(promql)))
        .unwrap_or_else(|e| panic!("query {promql}: {e}"));
    assert!(status.contains("200"), "query {promql}: {status} {body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("Prometheus answers JSON");
    v["data"]["result"].as_array().cloned().unwrap_or_default()
}

fn sample_value(s: &serde_json::Value) -> f64 {
    s["value"][1].as_str().expect("value string").parse().expect("a number")
}

/// A receiver with `--metrics` in namespace `ns`, on control port `port`; waits until both
/// its ports answer.
fn receiver(pair: &NetnsPair, ns: &str, addr: &str, port: &str) -> Child {
    let metrics = format!("{addr}:{METRICS_PORT}");
    let child = pair
        .cmd(ns, bin(), &["recv", "--port", port, "--metrics", &metrics])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn recv");
    let deadline = Instant::now() + Duration::from_secs(5);
    while http_get(ns, &metrics, "/metrics").is_err() {
        assert!(Instant::now() < deadline, "recv --metrics {metrics} not answering after 5 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    child
}

/// Killed with its children's output dropped, however the test ends.
struct Kill(Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `send -t 1 --json ARGS` from namespace `ns`: its JSON.
fn send(pair: &NetnsPair, ns: &str, args: &[&str]) -> serde_json::Value {
    let mut c = pair.cmd(ns, bin(), &["send", "-t", "1", "--json"]);
    c.args(args);
    let (out, _) = run_bounded(c, Duration::from_secs(20));
    assert!(out.status.success(), "send {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("send --json")
}

#[test]
fn prometheus_scrapes_two_receivers_and_reads_each_senders_last_test() {
    if Command::new("prometheus").arg("--version").output().is_err() {
        return skip(Lacking::Installed, "prometheus is not installed: scripts/install-deps.sh --test installs it");
    }
    let _serial = serial();
    let pair = NetnsPair::up("ubmet");
    let (a, b) = (pair.sender_ns(), pair.receiver_ns());
    // Receiver 1 on the "b" host, receiver 2 on the "a" host.
    let _r1 = Kill(receiver(&pair, &b, "10.77.0.2", "5300"));
    let _r2 = Kill(receiver(&pair, &a, "10.77.0.1", "5311"));
    // Receiver 1 serves two senders (a's IPv4 and IPv6 addresses), the IPv4 one twice: its
    // series must show the second test. Receiver 2 serves b with UDP.
    let first = send(&pair, &a, &["-c", "10.77.0.2"]);
    let v6 = send(&pair, &a, &["-c", "fd77::2"]);
    let last_v4 = send(&pair, &a, &["-c", "10.77.0.2", "-P", "2"]);
    let udp = send(&pair, &b, &["-c", "10.77.0.1", "-p", "5311", "-u", "-b", "200M"]);

    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("metrics-prometheus");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: uringbench\n    \
             static_configs:\n      - targets: ['10.77.0.2:{METRICS_PORT}', '10.77.0.1:{METRICS_PORT}']\n"
        ),
    )
    .unwrap();
    let prometheus = pair
        .cmd(
            &a,
            "prometheus",
            &[
                &format!("--config.file={}", config.display()),
                &format!("--storage.tsdb.path={}", dir.join("data").display()),
                &format!("--web.listen-address={PROMETHEUS}"),
                "--log.level=warn",
            ],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn prometheus");
    let _prometheus = Kill(prometheus);

    // Both receivers scraped since the tests ended: their four tests are in.
    let deadline = Instant::now() + Duration::from_secs(30);
    let total = "sum(uringbench_tests_total)";
    loop {
        let up = http_get(&a, PROMETHEUS, "/-/ready").is_ok_and(|(s, _)| s.contains("200"));
        if up && query(&a, total).first().map(sample_value) == Some(4.0) {
            break;
        }
        assert!(Instant::now() < deadline, "Prometheus had not scraped 4 tests after 30 s");
        std::thread::sleep(Duration::from_millis(250));
    }

    // The counters: per receiver, the tests it served, all complete, and the bytes it received.
    let tests = query(&a, "sum by (instance) (uringbench_tests_total{outcome=\"complete\"})");
    let of = |set: &[serde_json::Value], instance: &str| {
        set.iter()
            .find(|s| s["metric"]["instance"] == instance)
            .map(sample_value)
            .unwrap_or_else(|| panic!("no series of {instance} in {set:?}"))
    };
    let (i1, i2) = (format!("10.77.0.2:{METRICS_PORT}"), format!("10.77.0.1:{METRICS_PORT}"));
    assert_eq!(of(&tests, &i1), 3.0);
    assert_eq!(of(&tests, &i2), 1.0);
    let bytes = query(&a, "uringbench_received_bytes_total");
    let total_bytes = |docs: &[&serde_json::Value]| {
        docs.iter().map(|d| d["sum"]["receiver"]["total_bytes"].as_u64().expect("total_bytes")).sum::<u64>() as f64
    };
    assert_eq!(of(&bytes, &i1), total_bytes(&[&first, &v6, &last_v4]));
    assert_eq!(of(&bytes, &i2), total_bytes(&[&udp]));

    // Each sender's last Gbit/s, as the heatmap query gives it, equals its test's own JSON.
    let heatmap = "uringbench_last_test_received_bits_per_second / 1e9";
    let rows = query(&a, heatmap);
    let mut answer = Vec::new();
    for (instance, sender, doc) in [(&i1, "10.77.0.1", &last_v4), (&i1, "fd77::1", &v6), (&i2, "10.77.0.2", &udp)] {
        let row = rows
            .iter()
            .find(|s| s["metric"]["instance"] == instance.as_str() && s["metric"]["sender"] == sender)
            .unwrap_or_else(|| panic!("no row for {sender} at {instance} in {rows:?}"));
        let json = doc["sum"]["receiver"]["bits_per_second"].as_f64().expect("bits_per_second");
        let shown = sample_value(row);
        assert!((shown - json / 1e9).abs() <= 1e-12 * shown.abs(), "{sender} at {instance}: {shown} vs {json}");
        answer.push(format!("{instance} {sender} {shown}"));
    }
    assert_eq!(rows.len(), 3, "one row per sender and receiver: {rows:?}");
    // Unscaled, the gauge is the JSON's value to the last few bits: the sender's JSON sums the
    // receiver's per-queue figures, the gauge divides the receiver's total, so the two may round
    // apart in the last place.
    let raw = query(&a, "uringbench_last_test_received_bits_per_second{sender=\"10.77.0.1\"}");
    let (gauge, json) = (sample_value(&raw[0]), last_v4["sum"]["receiver"]["bits_per_second"].as_f64().unwrap());
    assert!((gauge - json).abs() <= 1e-12 * json.abs(), "gauge {gauge} vs JSON {json}");
    let info = query(&a, "uringbench_last_test_info{sender=\"10.77.0.2\"}");
    assert_eq!(info[0]["metric"]["proto"], "udp");
    let queues = query(&a, "uringbench_last_test_info{sender=\"10.77.0.1\"}");
    assert_eq!(queues[0]["metric"]["queues"], "2", "the last test from 10.77.0.1 had two queues");
    println!("{heatmap}:\n{}", answer.join("\n"));
}

#[test]
fn a_dripping_and_an_oversized_request_leave_tests_alone() {
    let _serial = serial();
    let pair = NetnsPair::up("ubmetd");
    let (a, b) = (pair.sender_ns(), pair.receiver_ns());
    let _r = Kill(receiver(&pair, &b, "10.77.0.2", "5300"));
    let target = format!("10.77.0.2:{METRICS_PORT}");
    // Twelve connections drip a request byte every 300 ms: the per-source cap holds 8; the
    // gate's deadline closes them after 5 s, however slowly they go on.
    let t = target.clone();
    let drip = std::thread::spawn({
        let a = a.clone();
        move || {
            in_netns(&a, move || {
                let start = Instant::now();
                let mut conns: Vec<TcpStream> =
                    (0..12).filter_map(|_| TcpStream::connect(t.parse::<SocketAddr>().unwrap()).ok()).collect();
                let mut closed_at = Vec::new();
                for byte in b"GET /metrics HTTP/1.1\r\nX: ".iter().cycle().take(40) {
                    if conns.is_empty() {
                        break;
                    }
                    conns.retain_mut(|c| {
                        if c.write_all(&[*byte]).is_ok() {
                            return true;
                        }
                        closed_at.push(start.elapsed());
                        false
                    });
                    std::thread::sleep(Duration::from_millis(300));
                }
                (conns.len(), closed_at)
            })
        }
    });
    std::thread::sleep(Duration::from_millis(200));
    // An oversized request (from the other address: the drips' holds its cap) is answered
    // 431 and closed at once.
    let t = target.clone();
    let oversized = in_netns(&b, move || {
        let mut s = TcpStream::connect(t.parse::<SocketAddr>().unwrap()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let _ = s.write_all(format!("GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(20_000)).as_bytes());
        let mut got = vec![0u8; 64];
        let n = s.read(&mut got).unwrap_or(0);
        String::from_utf8_lossy(&got[..n]).to_string()
    });
    assert!(oversized.starts_with("HTTP/1.1 431"), "oversized request answered: {oversized:?}");
    // A test runs meanwhile, and a scrape is answered.
    let doc = send(&pair, &a, &["-c", "10.77.0.2"]);
    assert!(doc["sum"]["receiver"]["bits_per_second"].as_f64().unwrap() > 0.0);
    assert_ne!(doc["verdict"]["bottleneck"], "incomplete", "the test completes");
    // From another address than the drips' (their address holds its cap of pending requests).
    let (status, body) = http_get(&b, &target, "/metrics").expect("a scrape beside the drip");
    assert!(status.contains("200"), "{status}");
    assert!(body.contains("uringbench_tests_total{outcome=\"complete\"} 1"), "{body}");
    let (open, closed_at) = drip.join().expect("drip thread");
    assert_eq!(open, 0, "every dripping connection was closed");
    assert!(closed_at.iter().all(|t| *t < Duration::from_secs(7)), "closed by the deadline: {closed_at:?}");
    let (_, body) = http_get(&a, &target, "/metrics").unwrap();
    let dropped: u64 = body
        .lines()
        .find_map(|l| l.strip_prefix("uringbench_metrics_dropped_requests_total "))
        .and_then(|v| v.parse().ok())
        .expect("dropped counter");
    assert!(dropped >= 13, "12 drips and the oversized request counted as dropped: {dropped}");
}

/// A forward test's retransmissions happen at the sender: its end report carries them to the
/// receiver, whose gauge then equals what the sender's kernel counted. The receiver's host
/// drops 1% of the data segments (iptables' statistic match), and the sender's namespace's
/// /proc/net/snmp `RetransSegs`, which sees only this test, bounds the figure from outside.
#[test]
fn a_forward_tests_retransmits_reach_the_receivers_metrics() {
    if Command::new("iptables").arg("--version").output().is_err() {
        return skip(Lacking::Installed, "iptables is not installed");
    }
    let _serial = serial();
    let pair = NetnsPair::up("ubmetr");
    let (a, b) = (pair.sender_ns(), pair.receiver_ns());
    let drop_rule =
        "INPUT -p tcp --dport 5300 -m length --length 1000:65535 -m statistic --mode random --probability 0.01 -j DROP";
    let rule = pair.cmd(&b, "iptables", &["-A"]).args(drop_rule.split(' ')).output().expect("iptables");
    if !rule.status.success() {
        return skip(Lacking::Installed, "iptables' statistic match is not available here");
    }
    let _r = Kill(receiver(&pair, &b, "10.77.0.2", "5300"));
    let before = pair.snmp_counter(&a, "Tcp", "RetransSegs");
    let doc = send(&pair, &a, &["-c", "10.77.0.2", "--warmup", "0", "--cooldown", "0"]);
    let snmp = pair.snmp_counter(&a, "Tcp", "RetransSegs") - before;
    let json = doc["tcp"]["sender"]["retransmitted_segments"].as_u64().expect("the sender's retransmitted_segments");
    let (_, body) = http_get(&b, &format!("10.77.0.2:{METRICS_PORT}"), "/metrics").expect("scrape");
    let gauge: u64 = body
        .lines()
        .find_map(|l| l.strip_prefix("uringbench_last_test_retransmitted_segments{sender=\"10.77.0.1\"} "))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no retransmitted_segments for 10.77.0.1:\n{body}"));
    assert!(gauge > 0, "1% of the data dropped, yet no retransmission (snmp {snmp})");
    assert_eq!(gauge, json, "the receiver's gauge is the sender's own count");
    // The kernel's count of the whole namespace: the data window's, plus any of the handshake
    // and of the last acknowledgements after the sender's window closed.
    assert!(gauge <= snmp && snmp - gauge <= 10.max(snmp / 20), "gauge {gauge}, RetransSegs {snmp}");
    println!("retransmits: gauge {gauge}, sender JSON {json}, sender's RetransSegs {snmp}");
}

#[test]
fn metrics_needs_an_address_and_a_uringbench_receiver() {
    let run = |args: &[&str]| Command::new(bin()).arg("recv").args(args).output().expect("run recv");
    common::one_line_error(&run(&["--metrics", "nonsense"]), 2, "--metrics");
    common::one_line_error(
        &run(&["--iperf3", "--metrics", "127.0.0.1:0"]),
        2,
        "not yet with --iperf2, --iperf3 or --ntttcp",
    );
    common::one_line_error(&run(&["--metrics", "127.0.0.1:0", "--metrics-senders", "0"]), 2, "--metrics-senders");
}
