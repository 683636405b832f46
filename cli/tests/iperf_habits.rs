//! iperf's command line, with real traffic between namespaces: `uringbench -s` on one side,
//! `uringbench -c ADDR [iperf flags]` on the other, each mapped flag checked by what the
//! receiver counted or what the kernel reads back.

mod common;

use common::*;
use std::process::{Child, Output, Stdio};
use std::time::Duration;

/// `uringbench ARGS` (iperf's form, no subcommand) in the receiver namespace; killed on drop.
struct Server(Option<Child>);

impl Server {
    fn start(pair: &NetnsPair, args: &[&str], port: &str) -> Self {
        let child = pair
            .cmd(&pair.receiver_ns(), bin(), args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn uringbench -s");
        pair.wait_listening(port);
        Server(Some(child))
    }

    /// Waits for it to exit by itself (bounded).
    fn finish(mut self, limit: Duration) -> Output {
        finish(self.0.take().expect("server child"), limit)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `uringbench ARGS` in the sender namespace, bounded.
fn client(pair: &NetnsPair, args: &[&str]) -> Output {
    run_bounded(pair.cmd(&pair.sender_ns(), bin(), args), Duration::from_secs(40)).0
}

fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn ok(out: &Output) -> String {
    let t = text(out);
    assert!(out.status.success(), "exit {:?}\nstdout {t}\nstderr {}", out.status, String::from_utf8_lossy(&out.stderr));
    t
}

#[test]
fn iperf3_client_gives_intervals_and_sum() {
    let _s = serial();
    let pair = NetnsPair::up("ubih1");
    let _server = Server::start(&pair, &["-s"], "5300");
    let out = ok(&client(&pair, &["-c", RECV_ADDR, "-P", "4", "-t", "3"]));
    assert!(out.starts_with("iperf flags ran as: uringbench send -c 10.77.0.2 -P 4 -t 3\n"), "{out}");
    for (from, to) in [("0.00", "1.00"), ("1.00", "2.00"), ("2.00", "3.00")] {
        let sum = out.lines().filter(|l| l.starts_with("[SUM]") && l.contains(&format!("{from}-{to} "))).count();
        assert_eq!(sum, 1, "one [SUM] line for {from}-{to}:\n{out}");
        let per_queue = out.lines().filter(|l| l.starts_with("[  ") && l.contains(&format!("{from}-{to} "))).count();
        assert_eq!(per_queue, 4, "four queue lines for {from}-{to}:\n{out}");
    }
    assert!(out.lines().any(|l| l.starts_with("[SUM] 0.00-3.00")), "the window's SUM line:\n{out}");
    assert!(out.contains("(exact match)"), "receiver counted every byte:\n{out}");
}

#[test]
fn udp_without_b_offers_one_megabit_per_flow() {
    let _s = serial();
    let pair = NetnsPair::up("ubih2");
    let _server = Server::start(&pair, &["-s"], "5300");
    let before = pair.receiver_if_counter("rx_bytes");
    let out = client(&pair, &["-c", RECV_ADDR, "-u", "-P", "2", "-t", "3", "-J"]);
    let after = pair.receiver_if_counter("rx_bytes");
    let doc = json(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("iperf flags ran as: uringbench send -c 10.77.0.2 -u -P 2 -t 3 -J"), "{stderr}");
    assert_eq!(stderr.matches("UDP's default").count(), 1, "said once: {stderr}");
    let received = f64_at(&doc, "/sum/receiver/bits_per_second");
    assert!((received - 2e6).abs() < 2e6 * 0.05, "2 flows x 1 Mbit/s, receiver-counted: {received}");
    for q in 0..2 {
        let per_flow = f64_at(&doc, &format!("/queues/{q}/receiver/bits_per_second"));
        assert!((per_flow - 1e6).abs() < 1e6 * 0.05, "queue {q}: {per_flow}");
    }
    // The interface agrees: 4.25 s of 2 Mbit/s is about 1.06 MB of payload, plus headers.
    let wire = after - before;
    assert!((1_000_000..1_300_000).contains(&wire), "receiver interface got {wire} bytes");
}

#[test]
fn b_is_per_flow_and_zero_is_unlimited() {
    let _s = serial();
    let pair = NetnsPair::up("ubih3");
    let _server = Server::start(&pair, &["-s"], "5300");
    let out = ok(&client(&pair, &["-c", RECV_ADDR, "-u", "-P", "2", "-b", "4M", "-t", "2", "-O", "0"]));
    assert!(out.contains("rate: 4.00 Mbits/sec per flow x 2 flows = 8.00 Mbits/sec\n"), "{out}");
    // The verdict names the flag as the user typed it, with its total over the flows.
    assert!(out.contains("verdict: configured rate (-b/--rate set 8.00 Mbits/sec in all and "), "{out}");
    let doc = json(&client(&pair, &["-c", RECV_ADDR, "-u", "-P", "2", "-b", "4M", "-t", "2", "-O", "0", "-J"]));
    let received = f64_at(&doc, "/sum/receiver/bits_per_second");
    assert!((received - 8e6).abs() < 8e6 * 0.05, "2 x 4 Mbit/s received: {received}");
    let doc = json(&client(&pair, &["-c", RECV_ADDR, "-u", "-b", "max", "-t", "1", "-O", "0", "-J"]));
    assert_eq!(u64_at(&doc, "/test/rate_bps"), 0, "max is unlimited");
    assert!(f64_at(&doc, "/sum/receiver/bits_per_second") > 20e6, "unlimited is well above 1 Mbit/s: {doc}");
}

#[test]
fn f_fixes_the_unit_and_i_sets_the_period() {
    let _s = serial();
    let pair = NetnsPair::up("ubih4");
    let _server = Server::start(&pair, &["-s"], "5300");
    let out = ok(&client(&pair, &["-c", RECV_ADDR, "-t", "2", "-O", "0", "-f", "m", "-i", "0.5"]));
    let rates: Vec<&str> = out.lines().filter(|l| l.contains("bits/sec")).collect();
    assert!(rates.len() >= 5, "{out}");
    assert!(rates.iter().all(|l| l.contains("Mbits/sec") && !l.contains("Gbits/sec")), "{out}");
    let halves = out.lines().filter(|l| l.starts_with("[SUM]") && l.contains("1.50-2.00 ")).count();
    assert_eq!(halves, 1, "-i 0.5 gives half-second intervals:\n{out}");
    let out = ok(&client(&pair, &["-c", RECV_ADDR, "-t", "1", "-O", "0", "-f", "K", "-i", "0"]));
    assert!(out.contains("KBytes/sec") && !out.contains("bits/sec"), "{out}");
    assert!(out.contains("running for"), "-i 0: no intervals:\n{out}");
}

#[test]
fn mapped_tcp_knobs_read_back_from_the_kernel() {
    let _s = serial();
    let pair = NetnsPair::up("ubih5");
    let _server = Server::start(&pair, &["-s", "-p", "5999"], "5999");
    let out = client(
        &pair,
        &[
            "-c", RECV_ADDR, "-p", "5999", "-t", "1", "-O", "0", "-J", "-C", "reno", "-w", "256K", "-M", "1200", "-N",
            "-S", "0x28", "-l", "64K", "-Z", "-A", "1", "-T", "habits",
        ],
    );
    let doc = json(&out);
    let flow = doc.pointer("/tcp/sender_flows_end/0").unwrap_or_else(|| panic!("{doc}"));
    assert_eq!(flow["congestion"], "reno", "-C: {flow}");
    assert_eq!(flow["sndbuf"], 2 * 256 * 1024, "-w: the kernel doubles SO_SNDBUF: {flow}");
    assert_eq!(flow["tos"], 0x28, "-S: {flow}");
    let mss =
        doc.pointer("/tcp/sender_flows_end/0/snd_mss").and_then(|v| v.as_u64()).unwrap_or_else(|| panic!("{flow}"));
    assert!(mss <= 1200, "-M 1200: TCP_INFO snd_mss {mss}");
    assert_eq!(doc["test"]["nodelay"], true, "-N");
    assert_eq!(u64_at(&doc, "/test/len"), 64 * 1024, "-l");
    assert_eq!(doc["test"]["zerocopy"], "on", "-Z");
    assert_eq!(u64_at(&doc, "/test/warmup_ms"), 0, "-O 0");
    assert_eq!(doc["title"], "habits", "-T");
    let placement = doc["sender"]["placement"].as_str().unwrap_or_default();
    assert!(placement.contains("(CPU 1)"), "-A 1: {placement}");
    assert!(f64_at(&doc, "/sum/receiver/bits_per_second") > 0.0);
    // The text says what the kernel set on both ends (socket(7): it doubles the request), not
    // the request alone.
    let out = ok(&client(&pair, &["-c", RECV_ADDR, "-p", "5999", "-t", "1", "-O", "0", "-w", "256K"]));
    let line = out
        .lines()
        .find(|l| l.starts_with("window (-w 256.00 KBytes): the kernel set"))
        .unwrap_or_else(|| panic!("{out}"));
    for side in ["sender (this host)", "receiver (far host 10.77.0.2)"] {
        assert!(line.contains(&format!("{side} SO_SNDBUF 512.00 KBytes SO_RCVBUF 512.00 KBytes")), "{side}: {line}");
    }
}

#[test]
fn n_k_r_bidir_and_cport_move_what_they_say() {
    let _s = serial();
    let pair = NetnsPair::up("ubih6");
    let _server = Server::start(&pair, &["-s"], "5300");
    let doc = json(&client(&pair, &["-c", RECV_ADDR, "-n", "3M", "-J"]));
    assert_eq!(u64_at(&doc, "/sum/receiver/total_bytes"), 3 << 20, "-n 3M: {doc}");
    let doc = json(&client(&pair, &["-c", RECV_ADDR, "-k", "5", "-l", "100K", "-J"]));
    assert_eq!(u64_at(&doc, "/sum/receiver/total_bytes"), 500 * 1024, "-k 5 -l 100K: {doc}");
    let doc = json(&client(&pair, &["-c", RECV_ADDR, "-R", "-t", "1", "-O", "0", "-J"]));
    assert_eq!(doc["direction"], "reverse", "-R");
    assert!(u64_at(&doc, "/sum/receiver/bytes") > 0);
    let doc = json(&client(&pair, &["-c", RECV_ADDR, "--bidir", "-t", "1", "-O", "0", "-J"]));
    assert_eq!(doc["direction"], "bidir");
    assert!(u64_at(&doc, "/reverse/sum/receiver/bytes") > 0, "--bidir: the other direction moved bytes too");
    // --cport and -B: the receiver's kernel sees the data flows arrive from those ports.
    let mut c = pair.cmd(
        &pair.sender_ns(),
        bin(),
        &["-c", RECV_ADDR, "-B", "10.77.0.1", "--cport", "5411", "-P", "2", "-t", "3"],
    );
    let child = c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn client");
    let mut seen = String::new();
    for _ in 0..60 {
        std::thread::sleep(Duration::from_millis(100));
        let ss = pair.cmd(&pair.receiver_ns(), "ss", &["-Htn"]).output().expect("ss");
        seen = String::from_utf8_lossy(&ss.stdout).into_owned();
        if from_ports(&seen) {
            break;
        }
    }
    let out = finish(child, Duration::from_secs(30));
    ok(&out);
    assert!(from_ports(&seen), "flows from 10.77.0.1 ports 5411 and 5412:\n{seen}");
}

/// Whether `ss -tn` shows flows from 10.77.0.1 ports 5411 and 5412 (as IPv4, or v4-mapped on
/// the receiver's dual-stack socket).
fn from_ports(ss: &str) -> bool {
    [5411, 5412].iter().all(|p| ss.contains(&format!("10.77.0.1:{p} ")) || ss.contains(&format!("10.77.0.1]:{p} ")))
}

#[test]
fn server_flags_daemon_and_one_off() {
    let _s = serial();
    let pair = NetnsPair::up("ubih7");
    // -D: in the background, its process id printed; it serves until killed.
    let out = run_bounded(pair.cmd(&pair.receiver_ns(), bin(), &["-s", "-D", "-p", "5301"]), Duration::from_secs(10)).0;
    let line = ok(&out);
    assert!(line.starts_with("iperf flags ran as: uringbench recv -p 5301: in the background, process "), "{line}");
    let pid: i32 = line.trim().rsplit(' ').next().and_then(|p| p.parse().ok()).expect("a process id");
    pair.wait_listening("5301");
    let served = client(&pair, &["-c", RECV_ADDR, "-p", "5301", "-t", "1", "-O", "0", "-V"]);
    // SAFETY: kill of the process this test started (its id printed by -D).
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let text = ok(&served);
    assert!(
        text.contains("sender (this host) path:") && text.contains("receiver (far host "),
        "-V: both ends' data path:\n{text}"
    );
    assert!(
        text.contains("cpu sender (this host) in the window:") && text.contains("cpu receiver (far host "),
        "-V: both ends' CPU:\n{text}"
    );
    // -1: exits after one test.
    let once = Server::start(&pair, &["-s", "-1"], "5300");
    ok(&client(&pair, &["-c", RECV_ADDR, "-t", "1", "-O", "0", "-i", "0"]));
    let out = once.finish(Duration::from_secs(10));
    assert!(out.status.success(), "-1 exits 0 after one test: {}", text_of(&out));
}

fn text_of(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

#[test]
fn flags_without_equivalent_are_one_line_errors() {
    for (args, needle) in [
        (&["-c", RECV_ADDR, "-r"][..], "-R"),
        (&["-c", RECV_ADDR, "--rsa-public-key-path", "k"][..], "--psk-file"),
        (&["-s", "-w", "1M"][..], "give -w to the client"),
        (&["-P", "8", "-t", "30"][..], "-c HOST"),
        (&["-c", RECV_ADDR, "-Q"][..], "not an iperf option"),
        // Wrong numbers say what is allowed, in one line, without clap's doubled hint.
        (&["-c", RECV_ADDR, "-P", "-1"][..], "-1 is out of range: a whole number from 1 to"),
        (&["-c", RECV_ADDR, "-b", "-5M"][..], "'-5M' is negative"),
        (&["-c", RECV_ADDR, "-l", "100G"][..], "1 byte to 4294967295 bytes"),
        (&["send"][..], "not provided: -c HOST"),
        (&["send", "-c", RECV_ADDR, "--bogus"][..], "unexpected argument '--bogus'"),
        (&["send", "-c", "[::1"][..], "expected HOST, HOST:PORT, [IPv6] or [IPv6]:PORT"),
        (&["send", "-c", "10.77.0.2:5300", "-p", "5301"][..], "names port 5300 and -p 5301"),
    ] {
        let mut c = std::process::Command::new(bin());
        c.args(args);
        let out = run_bounded(c, Duration::from_secs(10)).0;
        one_line_error(&out, 2, needle);
        assert!(!String::from_utf8_lossy(&out.stderr).contains("For more information"), "{args:?}: the hint once");
    }
}

#[test]
fn output_and_path_flags_do_what_iperf_users_expect() {
    let _s = serial();
    let pair = NetnsPair::up("ubih8");
    let _server = Server::start(&pair, &["-s", "-B", RECV_ADDR, "--server-bitrate-limit", "500M"], "5300");
    let ss = pair.cmd(&pair.receiver_ns(), "ss", &["-Htln"]).output().expect("ss");
    assert!(String::from_utf8_lossy(&ss.stdout).contains("10.77.0.2:5300 "), "-s -B: listens on that address only");
    // Paced: the receiver refuses unlimited tests under --server-bitrate-limit.
    let short = ["-t", "1", "-O", "0", "-b", "100M"];
    let run = |extra: &[&str]| client(&pair, &[&["-c", RECV_ADDR][..], &short, extra].concat());
    // --server-bitrate-limit is recv's --max-rate: a faster test is refused.
    let fast = client(&pair, &["-c", RECV_ADDR, "-t", "1", "-O", "0", "-b", "1G", "-J"]);
    assert!(
        !fast.status.success() && String::from_utf8_lossy(&fast.stderr).contains("--max-rate"),
        "{}",
        text_of(&fast)
    );
    let csv = ok(&run(&["-y", "C"]));
    assert!(csv.lines().next().is_some_and(|l| l.starts_with("kind,") || l.contains(',')), "-y C: CSV\n{csv}");
    let stream = ok(&run(&["--json-stream"]));
    let first: serde_json::Value = serde_json::from_str(stream.lines().next().unwrap_or("")).expect("a JSON line");
    assert_eq!(first["event"], "start", "--json-stream");
    // iperf3 3.20's --json-stream-full-output: the events, then the whole -J document.
    let both = ok(&run(&["--json-stream", "--json-stream-full-output"]));
    let docs: Vec<serde_json::Value> =
        serde_json::Deserializer::from_str(&both).into_iter().collect::<Result<_, _>>().expect("JSON values");
    let (whole, events) = docs.split_last().expect("output");
    let end = events.last().expect("events before the document");
    assert_eq!(
        (&events[0]["event"], &end["event"], &whole["kind"]),
        (&"start".into(), &"end".into(), &"stream".into())
    );
    assert!(whole.get("event").is_none() && whole["intervals"].as_array().is_some_and(|i| !i.is_empty()), "{whole}");
    let received = u64_at(whole, "/sum/receiver/total_bytes");
    assert!(received > 1_000_000 && received == u64_at(end, "/sum/receiver/total_bytes"), "{received}: {end}");
    let log = std::env::temp_dir().join(format!("uringbench-habits-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&log);
    ok(&run(&["--logfile", log.to_str().unwrap_or_default()]));
    let logged = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    assert!(logged.contains("[SUM] 0.00-1.00"), "--logfile holds the report:\n{logged}");
    let doc = json(&run(&["-J", "--fq-rate", "100M", "--dscp", "AF11", "--skip-rx-copy", "-4"]));
    let flow = &doc["tcp"]["sender_flows_end"][0];
    assert_eq!(flow["max_pacing_rate"], 12_500_000, "--fq-rate 100M in bytes/s: {flow}");
    assert_eq!(flow["tos"], 0x28, "--dscp AF11: {flow}");
    assert_eq!(doc["test"]["skip_rx_copy"], true);
    let doc = json(&run(&["-J", "-u", "--trip-times"]));
    assert!(doc.pointer("/sum/receiver/one_way_delay_us/mean").is_some_and(|v| v.is_number()), "--trip-times: {doc}");
    assert!(f64_at(&doc, "/sum/receiver/bits_per_second") > 90e6, "-b 100M per flow");
}

/// The segments this namespace's TCP retransmitted so far (/proc/net/snmp's RetransSegs).
fn retrans_segs(pair: &NetnsPair) -> u64 {
    let out = pair.cmd(&pair.sender_ns(), "cat", &["/proc/net/snmp"]).output().expect("snmp");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let tcp: Vec<&str> = text.lines().filter(|l| l.starts_with("Tcp:")).collect();
    let at = tcp[0].split_whitespace().position(|k| k == "RetransSegs").expect("RetransSegs");
    tcp[1].split_whitespace().nth(at).and_then(|v| v.parse().ok()).expect("a count")
}

#[test]
fn json_and_json_stream_have_an_interval_a_second_with_retr_and_cwnd() {
    let _s = serial();
    let pair = NetnsPair::up("ubih9");
    let _server = Server::start(&pair, &["-s"], "5300");
    let before = retrans_segs(&pair);
    let doc = json(&client(&pair, &["-c", RECV_ADDR, "-P", "2", "-t", "3", "-J"]));
    let after = retrans_segs(&pair);
    let intervals = doc["intervals"].as_array().expect("intervals[]");
    assert_eq!(intervals.len(), 3, "one a second without -i: {doc}");
    let mut retransmitted = 0;
    for iv in intervals {
        let per_flow: Vec<u64> =
            iv["tcp_flow_retransmits"].as_array().expect("per flow").iter().filter_map(|v| v.as_u64()).collect();
        assert_eq!(per_flow.len(), 2, "a count per flow: {iv}");
        let sum = u64_at(iv, "/tcp/retransmitted_segments");
        assert_eq!(per_flow.iter().sum::<u64>(), sum, "[SUM]'s Retr is the flows': {iv}");
        retransmitted += sum;
        for f in 0..2 {
            assert!(u64_at(iv, &format!("/tcp_flows/{f}/cwnd")) > 0, "flow {f}'s cwnd at the interval's end: {iv}");
        }
    }
    // A host CPU's busy share is a share of that CPU: never over 100%, per interval or over the
    // window, however busy the machine (tick counts over a wall-clock span read 101%).
    let shares = |cpu: &serde_json::Value| -> Vec<f64> {
        ["sender", "receiver"]
            .iter()
            .flat_map(|side| cpu[side]["host"].as_array().cloned().unwrap_or_default())
            .filter_map(|h| h["utilization"].as_f64())
            .collect()
    };
    let all: Vec<f64> = intervals.iter().flat_map(|iv| shares(&iv["cpu"])).chain(shares(&doc["cpu"])).collect();
    assert!(all.len() >= 8 && all.iter().all(|u| (0.0..=1.0).contains(u)), "host CPU shares: {all:?}");
    // The kernel's own count for the namespace covers the warm-up and the cool-down too.
    assert!(retransmitted <= after - before, "intervals {retransmitted} <= RetransSegs delta {}", after - before);
    let out = ok(&client(&pair, &["-c", RECV_ADDR, "-t", "3", "--json-stream"]));
    let events: Vec<serde_json::Value> = out.lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect();
    let closed: Vec<&serde_json::Value> = events.iter().filter(|e| e["event"] == "interval").collect();
    assert_eq!(closed.len(), 3, "streamed as they close:\n{out}");
    assert!(closed
        .iter()
        .all(|e| e["tcp"]["retransmitted_segments"].is_u64() && e["tcp_flows"][0]["cwnd"].as_u64() > Some(0)));
    // The text: Retr and Cwnd columns, the placement lines only with -v.
    let text = ok(&client(&pair, &["-c", RECV_ADDR, "-t", "2", "-O", "0"]));
    assert!(text.lines().any(|l| l.ends_with("Retr         Cwnd")), "{text}");
    assert!(
        !text.contains("sender (this host):") && !text.contains("sender (this host) path:"),
        "detail waits for -v:\n{text}"
    );
    let verbose = ok(&client(&pair, &["-c", RECV_ADDR, "-t", "1", "-O", "0", "-V"]));
    assert!(
        verbose.contains("sender (this host):") && verbose.contains("sender (this host) path:"),
        "-V shows it:\n{verbose}"
    );
}

#[test]
fn rr_prints_its_intervals_as_they_close() {
    let _s = serial();
    let pair = NetnsPair::up("ubih10");
    let _server = Server::start(&pair, &["-s"], "5300");
    let out = ok(&client(&pair, &["rr", "-c", RECV_ADDR, "-t", "3"]));
    let lines: Vec<&str> = out.lines().filter(|l| l.starts_with("[SUM]")).collect();
    assert!(lines.len() >= 2, "interval lines without -i:\n{out}");
    assert!(lines[0].starts_with("[SUM]  0.00-1.00 ") && lines[1].starts_with("[SUM]  1.00-2.00 "), "aligned:\n{out}");
    for l in &lines {
        let cells: Vec<&str> = l.split_whitespace().collect();
        let (p50, p99): (f64, f64) = (cells[5].parse().expect("p50"), cells[6].parse().expect("p99"));
        assert!(p50 > 0.0 && p99 >= p50, "p50 and p99 in µs: {l}");
    }
}

#[test]
fn the_wrong_service_is_named_within_a_second() {
    let Some((_s, pair)) = common::peer_pair("iperf3", "ubih11") else { return };
    if !peer_installed("iperf") || !peer_installed("nginx") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("uringbench-habits-nginx-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("nginx dir");
    let d = dir.display();
    let conf = format!(
        "daemon off; pid {d}/nginx.pid; error_log {d}/error.log;\nevents {{}}\nhttp {{ access_log off; \
         client_body_temp_path {d}; proxy_temp_path {d}; fastcgi_temp_path {d}; uwsgi_temp_path {d}; scgi_temp_path {d};\n\
         server {{ listen 5403; location / {{ return 200 ok; }} }} }}\n"
    );
    std::fs::write(dir.join("nginx.conf"), conf).expect("nginx.conf");
    let conf = dir.join("nginx.conf");
    let conf = conf.to_str().unwrap_or_default();
    let spawn = |program: &str, args: &[&str]| {
        pair.cmd(&pair.receiver_ns(), program, args).stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect(program)
    };
    let mut peers = [
        spawn("iperf3", &["-s", "-p", "5401"]),
        spawn("iperf", &["-s", "-p", "5402"]),
        spawn("nginx", &["-c", conf, "-p", dir.to_str().unwrap_or_default()]),
    ];
    for port in ["5401", "5402", "5403"] {
        pair.wait_listening(port);
    }
    for (port, needle) in [("5401", "--iperf3"), ("5402", "--iperf2"), ("5403", "an HTTP server answers there")] {
        let started = std::time::Instant::now();
        let out = client(&pair, &["send", "-c", &format!("{RECV_ADDR}:{port}"), "-t", "1"]);
        let took = started.elapsed();
        one_line_error(&out, 1, needle);
        assert!(String::from_utf8_lossy(&out.stderr).contains("is not a uringbench recv"));
        assert!(took < Duration::from_millis(1500), "named in {took:?} (1 s of watching, plus the start)");
    }
    for p in &mut peers {
        let _ = p.kill();
        let _ = p.wait();
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn targets_as_iperf_users_type_them() {
    let _s = serial();
    let pair = NetnsPair::up("ubih12");
    let _server = Server::start(&pair, &["-s"], "5300");
    // HOST:PORT, and [V6]:PORT on the receiver's own loopback (recv listens on ::).
    let doc = json(&client(&pair, &["-c", &format!("{RECV_ADDR}:5300"), "-t", "1", "-O", "0", "-J"]));
    assert!(u64_at(&doc, "/sum/receiver/bytes") > 0);
    for target in ["[::1]", "[::1]:5300"] {
        let c = pair.cmd(&pair.receiver_ns(), bin(), &["send", "-c", target, "-t", "1", "--warmup", "0", "-J"]);
        let doc = json(&run_bounded(c, Duration::from_secs(30)).0);
        assert_eq!(doc["target"], "[::1]:5300", "{target}");
        assert!(u64_at(&doc, "/sum/receiver/bytes") > 0, "{target}");
    }
}
