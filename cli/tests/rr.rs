//! Request/response and connect/request/response/close between two namespaces: both ends
//! count the same transactions, the percentiles are ordered, failures injected with iptables
//! are counted by cause, and bad sizes are refused.

mod common;

use common::*;
use std::time::Duration;

#[test]
fn transactions_agree_on_both_ends_and_percentiles_are_ordered() {
    let _serial = serial();
    let pair = NetnsPair::up("ubr-rr");
    let recv = pair.spawn_recv(&["--cpus", "1"]);
    let page = std::env::temp_dir().join(format!("ub-rr-{}.html", std::process::id()));
    for (queues, req, resp) in [("1", "1", "1"), ("4", "100", "64K")] {
        let mut c = pair.cmd(&pair.sender_ns(), bin(), &["rr", "--target", RECV_ADDR, "-t", "1", "--warmup", "200ms"]);
        c.args(["-P", queues, "--req", req, "--resp", resp, "-i", "500ms", "-J", "--cpus", "0"]);
        c.arg("--html").arg(&page);
        let in_segs_0 = pair.snmp_counter(&pair.receiver_ns(), "Tcp", "InSegs");
        let (out, _) = run_bounded(c, Duration::from_secs(30));
        let in_segs = pair.snmp_counter(&pair.receiver_ns(), "Tcp", "InSegs") - in_segs_0;
        assert!(out.status.success(), "rr -P {queues}: {}", String::from_utf8_lossy(&out.stderr));
        let doc = json(&out);
        let client = u64_at(&doc, "/sum/client/total_transactions");
        // A sanity floor two orders of magnitude below the ~100k transactions/s of this machine.
        assert!(client > 1000, "a second of rr over veth makes thousands of transactions, got {client}");
        assert_eq!(
            u64_at(&doc, "/sum/server/total_transactions"),
            client,
            "server answered exactly what the client completed"
        );
        // The server namespace's kernel saw at least one TCP segment per request (/proc/net/snmp).
        assert!(in_segs >= client, "{in_segs} TCP segments reached the server for {client} transactions");
        let tps = f64_at(&doc, "/transactions_per_second");
        let cpus = doc["intervals"][0]["cpu"]["host"].as_array().map_or(0, Vec::len);
        assert!(cpus > 0, "the client's CPU per interval: {}", doc["intervals"][0]);
        let html = std::fs::read_to_string(&page).unwrap();
        let lines = if cpus <= 16 { cpus } else { 0 }; // past 16 CPUs, a band
        assert_eq!(html.matches("data-key=\"client-cpu-").count(), lines, "a line per client CPU");
        let shown = page_headline(&page, "data-transactions-per-second");
        assert!(same_figure(shown, tps), "--html shows {shown}, the JSON {tps}");
        let window = f64_at(&doc, "/sum/window_seconds");
        assert!((tps - u64_at(&doc, "/sum/client/transactions") as f64 / window).abs() < 1.0);
        let l = &doc["latency_us"];
        let p: Vec<f64> = ["min", "p50", "p90", "p99", "p999", "max"].iter().map(|k| l[*k].as_f64().unwrap()).collect();
        assert!(p.windows(2).all(|w| w[0] <= w[1]), "percentiles ordered: {l}");
        assert!(p[0] > 0.0, "round trips take time: {l}");
        // Latency samples are the transactions completing in the nominal window; the counters'
        // window is bounded by the sampler's wake-ups, a few microseconds off.
        let (samples, counted) = (l["count"].as_u64().unwrap() as f64, u64_at(&doc, "/sum/client/transactions") as f64);
        assert!(
            (samples - counted).abs() <= counted * 0.005 + 2.0,
            "{samples} latency samples for {counted} transactions"
        );
        assert_eq!(doc["queues"].as_array().unwrap().len(), queues.parse::<usize>().unwrap());
    }
    let _ = std::fs::remove_file(&page);
    let log = String::from_utf8_lossy(&recv.kill().stdout).to_string();
    assert_eq!(log.matches("answered").count(), 2, "recv reports both rr tests:\n{log}");
}

#[test]
fn bad_sizes_are_refused() {
    for (req, resp) in [("0", "1"), ("1", "2M")] {
        let mut c = std::process::Command::new(bin());
        c.args(["rr", "--target", "127.0.0.1", "--req", req, "--resp", resp]);
        let (out, _) = run_bounded(c, Duration::from_secs(10));
        assert_eq!(out.status.code(), Some(2), "--req {req} --resp {resp}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(String::from_utf8_lossy(&out.stderr).contains("1 MiB"), "names the allowed range");
    }
    let mut c = std::process::Command::new(bin());
    c.args(["rr", "-u", "--target", "127.0.0.1", "--resp", "65508"]);
    let (out, _) = run_bounded(c, Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("65507"), "UDP names the datagram limit");
    let mut c = std::process::Command::new(bin());
    c.args(["crr", "-u", "--target", "127.0.0.1"]);
    let (out, _) = run_bounded(c, Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(2), "crr has no UDP form");
}

/// `rr`/`crr` in the sender namespace against `recv`, JSON parsed; exit code returned too.
fn run_json(pair: &NetnsPair, args: &[&str]) -> (serde_json::Value, Option<i32>) {
    let mut c = pair.cmd(&pair.sender_ns(), bin(), args);
    c.args(["--target", RECV_ADDR, "--warmup", "200ms", "-J", "--cpus", "0"]);
    let (out, _) = run_bounded(c, Duration::from_secs(40));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.code().is_some_and(|c| c <= 1), "{args:?}: {err}");
    if out.status.code() == Some(1) {
        // The document is on stdout; stderr still says why the run failed.
        assert!(err.lines().any(|l| l.starts_with("uringbench: ")), "{args:?}: exit 1 with nothing said: {err}");
    }
    (json(&out), out.status.code())
}

fn percentiles_ordered(doc: &serde_json::Value) {
    let l = &doc["latency_us"];
    let p: Vec<f64> = ["min", "p50", "p90", "p99", "p999", "max"].iter().map(|k| l[*k].as_f64().unwrap()).collect();
    assert!(p.windows(2).all(|w| w[0] <= w[1]) && p[0] > 0.0, "percentiles ordered: {l}");
}

fn iptables_dropped(pair: &NetnsPair, ns: &str) -> u64 {
    let out = pair.cmd(ns, "iptables", &["-L", "INPUT", "-v", "-x", "-n"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    text.lines()
        .filter(|l| l.contains("DROP"))
        .map(|l| l.split_whitespace().next().unwrap().parse::<u64>().unwrap())
        .sum()
}

#[test]
fn udp_rr_counts_every_lost_request_as_a_timeout() {
    let _serial = serial();
    let pair = NetnsPair::up("ubr-urr");
    let recv = pair.spawn_recv(&["--cpus", "1"]);
    let in_datagrams_0 = pair.snmp_counter(&pair.receiver_ns(), "Udp", "InDatagrams");
    let (doc, code) = run_json(&pair, &["rr", "-u", "-t", "1", "--req", "200", "--resp", "1000"]);
    let in_datagrams = pair.snmp_counter(&pair.receiver_ns(), "Udp", "InDatagrams") - in_datagrams_0;
    assert_eq!(code, Some(0));
    let client = u64_at(&doc, "/sum/client/total_transactions");
    // Sanity floor, two orders of magnitude below this machine.
    assert!(client > 1000, "thousands of UDP transactions in a second, got {client}");
    // The server's kernel delivered at least one datagram per transaction (/proc/net/snmp).
    assert!(in_datagrams >= client, "{in_datagrams} datagrams reached the server for {client} transactions");
    assert_eq!(u64_at(&doc, "/sum/server/total_transactions"), client, "lossless veth: both ends agree");
    assert_eq!(u64_at(&doc, "/failures/timeouts"), 0);
    percentiles_ordered(&doc);

    // Every 50th datagram reaching the server is dropped: each is one request lost.
    let rule = ["-A", "INPUT", "-p", "udp", "--dport", "5300", "-m", "statistic", "--mode", "nth", "--every", "50"];
    let mut rule: Vec<&str> = rule.to_vec();
    rule.extend(["--packet", "0", "-j", "DROP"]);
    assert!(pair.cmd(&pair.receiver_ns(), "iptables", &rule).status().unwrap().success());
    let (doc, code) = run_json(&pair, &["rr", "-u", "-t", "1", "--timeout", "20ms"]);
    assert_eq!(code, Some(0), "lost UDP transactions are the path's figure, not a failed run");
    let dropped = iptables_dropped(&pair, &pair.receiver_ns());
    let timeouts = u64_at(&doc, "/failures/timeouts");
    assert!(dropped > 0, "the rule dropped requests");
    assert_eq!(timeouts, dropped, "one timeout per dropped request");
    let client = u64_at(&doc, "/sum/client/total_transactions");
    assert_eq!(u64_at(&doc, "/sum/server/total_transactions"), client, "answers are never dropped");
    assert_eq!(doc["verdict"]["bottleneck"], "datagram loss", "{}", doc["verdict"]);
    assert!(doc["failure_notes"][0].as_str().unwrap().contains("20 ms"), "{}", doc["failure_notes"]);
    drop(recv);
}

#[test]
fn crr_opens_one_connection_per_transaction_and_counts_failures_by_cause() {
    let _serial = serial();
    let pair = NetnsPair::up("ubr-crr");
    let recv = pair.spawn_recv(&["--cpus", "1"]);
    let (doc, code) = run_json(&pair, &["crr", "-t", "1", "-P", "2", "--flows-per-queue", "2", "--resp", "2000"]);
    assert_eq!(code, Some(0));
    let client = u64_at(&doc, "/sum/client/total_transactions");
    // Sanity floor, two orders of magnitude below the ~33k connections/s of this machine.
    assert!(client > 300, "hundreds of connections a second over veth, got {client}");
    assert_eq!(u64_at(&doc, "/sum/server/total_transactions"), client, "one answer per connection");
    assert_eq!(doc["failures"]["refused"], 0);
    assert_eq!(doc["failures"]["timeouts"], 0);
    percentiles_ordered(&doc);
    // The client really opened that many connections: its namespace's ActiveOpens counter.
    let snmp = pair.cmd(&pair.sender_ns(), "cat", &["/proc/net/snmp"]).output().unwrap();
    let snmp = String::from_utf8_lossy(&snmp.stdout).to_string();
    let tcp: Vec<&str> = snmp.lines().filter(|l| l.starts_with("Tcp:")).collect();
    let col = tcp[0].split_whitespace().position(|k| k == "ActiveOpens").unwrap();
    let opens: u64 = tcp[1].split_whitespace().nth(col).unwrap().parse().unwrap();
    assert!(opens >= client, "{opens} active opens for {client} transactions (plus control connections)");
    drop(recv);

    // CPU steering: each client queue thread is pinned to one CPU, veth processes its SYNs
    // on that CPU, and the server's SO_REUSEPORT program hands them to the listener whose
    // thread runs there. So per CPU, client and server counts agree exactly.
    let recv = pair.spawn_recv(&["--cpus", "0-1"]);
    let page = std::env::temp_dir().join(format!("ub-crr-{}.html", std::process::id()));
    let mut c = pair.cmd(&pair.sender_ns(), bin(), &["crr", "--target", RECV_ADDR, "-t", "1", "-P", "2"]);
    c.args(["--warmup", "200ms", "-J", "--cpus", "0-1"]).arg("--html").arg(&page);
    let (out, _) = run_bounded(c, Duration::from_secs(40));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let doc = json(&out);
    let shown = page_headline(&page, "data-transactions-per-second");
    let tps = f64_at(&doc, "/transactions_per_second");
    assert!(same_figure(shown, tps), "crr --html shows {shown}, the JSON {tps}");
    let _ = std::fs::remove_file(&page);
    assert!(doc["server"]["path"].as_str().unwrap().contains("steered"), "{}", doc["server"]["path"]);
    let per_cpu = |side: &str| -> std::collections::BTreeMap<u64, u64> {
        let threads = doc["cpu"][side]["threads"].as_array().unwrap();
        threads
            .iter()
            .map(|t| {
                let q = t["queues"][0].as_u64().unwrap() as usize;
                (t["cpu"].as_u64().unwrap(), u64_at(&doc["queues"][q][side], "/total_transactions"))
            })
            .collect()
    };
    let (client_cpus, server_cpus) = (per_cpu("client"), per_cpu("server"));
    assert_eq!(client_cpus.len(), 2, "two client threads on two CPUs: {client_cpus:?}");
    assert_eq!(client_cpus, server_cpus, "connections served on the CPU they came from");

    // Two local ports for four flows: the others find none.
    pair.cmd(&pair.sender_ns(), "sysctl", &["-qw", "net.ipv4.ip_local_port_range=50000 50001"]).status().unwrap();
    let (doc, code) = run_json(&pair, &["crr", "-t", "1", "--flows-per-queue", "4"]);
    pair.cmd(&pair.sender_ns(), "sysctl", &["-qw", "net.ipv4.ip_local_port_range=32768 60999"]).status().unwrap();
    assert_eq!(code, Some(1), "failed connections fail the run");
    assert!(u64_at(&doc, "/failures/port_exhaustion") > 0, "{}", doc["failures"]);
    let notes = doc["failure_notes"].to_string();
    assert!(notes.contains("ip_local_port_range"), "explains the fix: {notes}");

    // SYNs to anything but the control port vanish: connects time out.
    let drop_syn = ["-A", "INPUT", "-p", "tcp", "--syn", "!", "--dport", "5300", "-j", "DROP"];
    assert!(pair.cmd(&pair.receiver_ns(), "iptables", &drop_syn).status().unwrap().success());
    let (doc, code) = run_json(&pair, &["crr", "-t", "500ms", "--timeout", "50ms"]);
    assert_eq!(code, Some(1));
    let timeouts = u64_at(&doc, "/failures/timeouts");
    assert!((5..=20).contains(&timeouts), "0.7 s of 50 ms timeouts on one flow: {}", doc["failures"]);
    assert_eq!(u64_at(&doc, "/sum/client/total_transactions"), 0);
    let log = String::from_utf8_lossy(&recv.kill().stdout).to_string();
    assert_eq!(log.matches("answered").count(), 3, "recv served all three crr tests:\n{log}");
}

#[test]
fn crr_receiver_out_of_descriptors_pauses_accepting_and_says_so() {
    let _serial = serial();
    let pair = NetnsPair::up("ubr-emf");
    // 40 descriptors: the receiver's own plus a few dozen connections, fewer than the 64
    // the client keeps connecting at once.
    let recv = pair.spawn_recv_under(&["prlimit", "--nofile=40"], &["--cpus", "1"]);
    let mut c = pair.cmd(&pair.sender_ns(), bin(), &["crr", "--target", RECV_ADDR, "-t", "1"]);
    c.args(["--warmup", "200ms", "-J", "--cpus", "0", "--flows-per-queue", "64", "--timeout", "2s"]);
    let (out, took) = run_bounded(c, Duration::from_secs(40));
    assert!(took < Duration::from_secs(15), "bounded, no spin or hang: {took:?}");
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let doc = json(&out);
    let client = u64_at(&doc, "/sum/client/total_transactions");
    assert!(client > 100, "accepting resumed after each shortage: {client} transactions");
    assert_eq!(u64_at(&doc, "/sum/server/total_transactions"), client, "no transaction lost on either side");
    let errors = doc["server"]["errors"].to_string();
    assert!(errors.contains("ulimit -n"), "the receiver names the fix: {errors}");
    drop(recv);
}
