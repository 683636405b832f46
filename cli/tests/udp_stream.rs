//! UDP stream between two namespaces: exact datagram accounting against the sender's count,
//! with loss injected by an iptables rule, and the UDP failure paths.

mod common;

use common::*;
use std::time::Duration;

fn udp_send(pair: &NetnsPair, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["--target", RECV_ADDR, "-u", "-t", "1", "--warmup", "200ms", "-J", "--cpus", "0"];
    args.extend_from_slice(extra);
    let (out, _) = pair.send(&args, Duration::from_secs(30));
    assert!(out.status.success(), "UDP send failed: {}", String::from_utf8_lossy(&out.stderr));
    json(&out)
}

#[test]
fn paced_gso_stream_arrives_complete() {
    let _serial = serial();
    let pair = NetnsPair::up("ubu-gso");
    let _recv = pair.spawn_recv(&["--cpus", "1"]);
    let rx_before = pair.receiver_if_counter("rx_bytes");
    let doc = udp_send(&pair, &["-b", "1G", "-P", "2", "-i", "250ms", "--one-way-delay"]);
    let rx_after = pair.receiver_if_counter("rx_bytes");
    let sent = u64_at(&doc, "/sum/sender/datagrams");
    let received = u64_at(&doc, "/sum/receiver/datagrams");
    let lost = u64_at(&doc, "/sum/receiver/lost");
    // A sanity bound two orders of magnitude below this machine (~200k in 1.45 s at 2 Gbit/s):
    // whether nothing is lost at that rate is the machine's speed, for benches/.
    assert!(sent > 2_000, "1.45 s at 2 Gbit/s is ~200k datagrams, sent {sent}");
    assert_eq!(received + lost, sent, "received + lost must equal what the sender sent");
    let (payload, sent_bytes, len) =
        (u64_at(&doc, "/sum/receiver/total_bytes"), u64_at(&doc, "/sum/sender/total_bytes"), u64_at(&doc, "/test/len"));
    assert_eq!(payload, received * len, "the received bytes are the received datagrams' payload");
    assert_eq!(sent_bytes, sent * len, "the sent bytes are the sent datagrams' payload");
    // The veth's own counter (sysfs, read here): every byte counted arrived on the wire, and the
    // wire carried no more than what was sent plus headers (GRO packets carry one header set each).
    let wire = rx_after - rx_before;
    assert!(wire >= payload, "the interface saw {wire} bytes, less than the {payload} counted");
    assert!(wire <= sent_bytes + sent * 42 + 1_000_000, "the interface saw {wire} bytes for {sent_bytes} sent");
    assert!(
        doc["sender"]["path"].as_str().unwrap().contains("GSO"),
        "the report says GSO ran: {}",
        doc["sender"]["path"]
    );
    assert!(doc["receiver"]["path"].as_str().unwrap().contains("GRO on"), "and GRO: {}", doc["receiver"]["path"]);
    assert_eq!(doc["sum"]["receiver"]["out_of_order"], 0);
    assert_eq!(doc["sum"]["receiver"]["duplicates"], 0);
    assert!(doc["sum"]["receiver"]["jitter_us"].as_f64().is_some());
    // Per-interval accounting: every interval saw datagrams, none lost, and the intervals
    // cover part of the whole test's datagrams.
    let intervals = doc["intervals"].as_array().unwrap();
    assert!(intervals.len() >= 3, "250 ms intervals over 1 s");
    let (mut in_window, mut lost_in_window) = (0, 0);
    for i in intervals {
        let d = i["udp"]["datagrams"].as_u64().unwrap_or_else(|| panic!("interval without UDP figures: {i}"));
        // Sanity, two orders of magnitude below the ~40k a 250 ms interval holds at 2 Gbit/s.
        assert!(d > 400, "each 250 ms interval at 2 Gbit/s holds ~40k datagrams, got {d}");
        in_window += d;
        lost_in_window += i["udp"]["lost"].as_u64().unwrap_or_else(|| panic!("interval without loss count: {i}"));
    }
    assert!(in_window < received, "the window excludes warm-up and cool-down datagrams");
    assert!(lost_in_window <= lost, "the intervals lost {lost_in_window}, the whole test {lost}");
    // Both ends share this host's clock: one-way delay is meaningful and ordered.
    let delay = &doc["sum"]["receiver"]["one_way_delay_us"];
    let (min, mean, max) =
        (delay["min"].as_f64().unwrap(), delay["mean"].as_f64().unwrap(), delay["max"].as_f64().unwrap());
    assert!(0.0 <= min && min <= mean && mean <= max, "delay min {min} <= mean {mean} <= max {max}");
}

#[test]
fn injected_loss_is_counted_exactly() {
    let _serial = serial();
    let pair = NetnsPair::up("ubu-loss");
    // Drop every 10th datagram to the test port in the receiver's namespace.
    let rule = [
        "-p",
        "udp",
        "--dport",
        "5300",
        "-m",
        "statistic",
        "--mode",
        "nth",
        "--every",
        "10",
        "--packet",
        "0",
        "-j",
        "DROP",
    ];
    let mut add = vec!["-A", "INPUT"];
    add.extend_from_slice(&rule);
    let status = pair.cmd(&pair.receiver_ns(), "iptables", &add).status().expect("iptables (apt install iptables)");
    assert!(status.success(), "iptables rule");
    let _recv = pair.spawn_recv(&["--cpus", "1"]);
    let doc = udp_send(&pair, &["--no-gso", "-b", "500M"]);
    let sent = u64_at(&doc, "/sum/sender/datagrams");
    let received = u64_at(&doc, "/sum/receiver/datagrams");
    let lost = u64_at(&doc, "/sum/receiver/lost");
    // The rule's own counter: data datagrams plus any FIN copies it hit.
    let out = pair.cmd(&pair.receiver_ns(), "iptables", &["-L", "INPUT", "-v", "-n", "-x"]).output().unwrap();
    let listing = String::from_utf8_lossy(&out.stdout).to_string();
    let dropped: u64 = listing
        .lines()
        .find(|l| l.contains("DROP"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no DROP counter in:\n{listing}"));
    assert_eq!(received + lost, sent, "received + lost = sent");
    let fins_hit = dropped - lost;
    assert!(fins_hit <= 5, "iptables dropped {dropped}, receiver counted {lost} lost: only FIN copies may differ");
    let share = lost as f64 / sent as f64;
    assert!((0.095..0.105).contains(&share), "every 10th datagram dropped, counted {:.2}%", share * 100.0);
    assert_eq!(doc["verdict"]["bottleneck"], "datagram loss", "10% loss is named: {}", doc["verdict"]);
}

#[test]
fn datagram_larger_than_the_path_mtu_is_refused() {
    let _serial = serial();
    let pair = NetnsPair::up("ubu-mtu");
    let _recv = pair.spawn_recv(&[]);
    let (out, _) =
        pair.send(&["--target", RECV_ADDR, "-u", "--no-gso", "-l", "1600", "-t", "1"], Duration::from_secs(15));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "oversized datagram is a usage error: {stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
    assert!(
        stderr.contains("path MTU of 1500") && stderr.contains("--len 1472"),
        "names the MTU and the fix: {stderr}"
    );
    let (out, _) = pair.send(&["--target", RECV_ADDR, "-u", "-b", "fast", "-t", "1"], Duration::from_secs(15));
    assert_eq!(out.status.code(), Some(2), "bad rate syntax is exit 2");
}

#[test]
fn udp_reverse_and_bidir_account_each_way() {
    let _serial = serial();
    let pair = NetnsPair::up("ubu-rev");
    let _recv = pair.spawn_recv(&["--cpus", "1"]);
    let doc = udp_send(&pair, &["-b", "1G", "-R"]);
    assert_eq!(doc["direction"], "reverse");
    let sent = u64_at(&doc, "/sum/sender/datagrams");
    // Sanity floors two orders of magnitude below this machine (~100k datagrams at 1 Gbit/s).
    assert!(sent > 1_000, "the far side sent datagrams back: {sent}");
    assert_eq!(u64_at(&doc, "/sum/receiver/datagrams") + u64_at(&doc, "/sum/receiver/lost"), sent);
    let doc = udp_send(&pair, &["-b", "1G", "--bidir"]);
    for (name, d) in [("forward", &doc), ("reverse", &doc["reverse"])] {
        let sent = u64_at(d, "/sum/sender/datagrams");
        assert!(sent > 1_000, "{name}: datagrams sent");
        assert_eq!(
            u64_at(d, "/sum/receiver/datagrams") + u64_at(d, "/sum/receiver/lost"),
            sent,
            "{name}: exact accounting"
        );
    }
}
