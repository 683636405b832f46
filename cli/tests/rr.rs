//! Request/response between two namespaces: both ends count the same transactions, the
//! percentiles are ordered, and bad sizes are refused.

mod common;

use common::*;
use std::time::Duration;

#[test]
fn transactions_agree_on_both_ends_and_percentiles_are_ordered() {
    let _serial = serial();
    let pair = NetnsPair::up("ubr-rr");
    let recv = pair.spawn_recv(&["--cpus", "1"]);
    for (queues, req, resp) in [("1", "1", "1"), ("4", "100", "64K")] {
        let mut c = pair.cmd(&pair.sender_ns(), bin(), &["rr", "--target", RECV_ADDR, "-t", "1", "--warmup", "200ms"]);
        c.args(["-P", queues, "--req", req, "--resp", resp, "-i", "500ms", "-J", "--cpus", "0"]);
        let (out, _) = run_bounded(c, Duration::from_secs(30));
        assert!(out.status.success(), "rr -P {queues}: {}", String::from_utf8_lossy(&out.stderr));
        let doc = json(&out);
        let client = u64_at(&doc, "/sum/client/total_transactions");
        assert!(client > 1000, "a second of rr over veth makes thousands of transactions, got {client}");
        assert_eq!(
            u64_at(&doc, "/sum/server/total_transactions"),
            client,
            "server answered exactly what the client completed"
        );
        let tps = f64_at(&doc, "/transactions_per_second");
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
}
