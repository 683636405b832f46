//! Request/response shapes between two namespaces: `--bounceback` bursts (every request of
//! every burst answered, one round trip per burst) and `--trip-times` (one-way legs from both
//! ends' clocks, which in two namespaces of one host are one clock) over TCP rr, UDP rr and
//! the latency probe of `send --latency`.

mod common;

use common::*;
use std::time::Duration;

/// `rr ARGS` in the sender namespace against a fresh `recv` of `pair`, JSON parsed.
fn rr_json(pair: &NetnsPair, args: &[&str]) -> serde_json::Value {
    let recv = pair.spawn_recv(&["--cpus", "1"]);
    let mut c = pair.cmd(&pair.sender_ns(), bin(), &["rr", "--target", RECV_ADDR, "-t", "1", "--warmup", "200ms"]);
    c.args(args).args(["-J", "--cpus", "0"]);
    let (out, _) = run_bounded(c, Duration::from_secs(30));
    drop(recv);
    assert!(out.status.success(), "rr {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    json(&out)
}

#[test]
fn rr_bounceback_answers_every_request_of_every_burst() {
    let _serial = serial();
    let pair = NetnsPair::up("ubbb");
    let doc = rr_json(&pair, &["--bounceback", "8", "--req", "100", "--resp", "200"]);
    let client = u64_at(&doc, "/sum/client/total_transactions");
    assert!(client > 0 && client % 8 == 0, "whole bursts of 8 requests: {client}");
    assert_eq!(u64_at(&doc, "/sum/server/total_transactions"), client, "the server answered every request");
    let bursts = u64_at(&doc, "/latency_us/count");
    assert!(bursts > 0 && bursts <= client / 8, "one round trip per burst: {bursts} of {client} requests");
    assert_eq!(doc["test"]["bounceback"], 8);
    // Bursts with stamped responses: each response keeps its own stamp.
    let doc = rr_json(&pair, &["--bounceback", "4", "--trip-times", "--req", "32", "--resp", "32"]);
    let client = u64_at(&doc, "/sum/client/total_transactions");
    assert!(client > 0 && client % 4 == 0, "{client}");
    assert_eq!(u64_at(&doc, "/sum/server/total_transactions"), client);
    assert_eq!(doc["trip_times"]["negative_legs"], 0, "{doc}");
    // A leg per response; bursts that straddle the window's edges count some legs only.
    let (legs, bursts) = (u64_at(&doc, "/trip_times/request_us/count"), u64_at(&doc, "/latency_us/count"));
    assert!(legs.abs_diff(4 * bursts) <= 8, "{legs} legs for {bursts} bursts of 4");
}

/// The legs of `doc`'s `trip` section: same clock, none negative, both > 0, one pair per
/// round trip, and their means adding up to the round trips' (`rtt`) within 10%.
fn assert_legs_add_up(doc: &serde_json::Value, trip: &str, rtt: &str) {
    let t = doc.pointer(trip).unwrap_or_else(|| panic!("no {trip}: {doc}"));
    assert_eq!(t["clock"], "same_host", "two namespaces of one kernel share its clock: {t}");
    assert_eq!(t["negative_legs"], 0, "one clock, no negative leg: {t}");
    let f = |p: &str| doc.pointer(p).and_then(|v| v.as_f64()).unwrap_or_else(|| panic!("no {p}: {doc}"));
    let (request, response) = (f(&format!("{trip}/request_us/mean")), f(&format!("{trip}/response_us/mean")));
    assert!(request > 0.0 && response > 0.0, "both legs take time: {t}");
    let legs = f(&format!("{trip}/request_us/count"));
    assert!(legs > 0.0, "{t}");
    assert_eq!(legs, f(&format!("{rtt}/count")), "one pair of legs per round trip");
    let (sum, rtt) = (request + response, f(&format!("{rtt}/mean")));
    assert!((sum - rtt).abs() <= 0.1 * rtt, "legs {request:.1} + {response:.1} us against a {rtt:.1} us round trip");
}

#[test]
fn trip_times_in_one_host_are_non_negative_legs_that_add_up_to_the_round_trip() {
    let _serial = serial();
    let pair = NetnsPair::up("ubtt");
    let doc = rr_json(&pair, &["--trip-times", "--req", "64", "--resp", "64"]);
    assert_legs_add_up(&doc, "/trip_times", "/latency_us");
    // UDP rr: the stamp follows the transaction's tag.
    let doc = rr_json(&pair, &["-u", "--trip-times", "--req", "16", "--resp", "16"]);
    assert_legs_add_up(&doc, "/trip_times", "/latency_us");
    // A test without the flag has no legs, and a receiver-side stamp needs room.
    let plain = rr_json(&pair, &["--req", "64", "--resp", "64"]);
    assert!(plain.get("trip_times").is_none(), "{plain}");
    for (args, need) in [(&["--resp", "4"][..], "--resp 8"), (&["-u", "--resp", "12"][..], "--resp 16")] {
        let mut c = pair.cmd(&pair.sender_ns(), bin(), &["rr", "--target", RECV_ADDR, "--trip-times"]);
        c.args(args);
        let (out, _) = run_bounded(c, Duration::from_secs(10));
        assert_eq!(out.status.code(), Some(2), "too small a response is refused before anything runs");
        assert!(String::from_utf8_lossy(&out.stderr).contains(need), "{}", String::from_utf8_lossy(&out.stderr));
    }
}

/// `send --latency --trip-times`: the probe's loaded round trips split into legs, beside a
/// paced load, and the probe's cost stated beside its bytes.
#[test]
fn latency_probe_trip_times_add_up_and_its_cost_is_stated() {
    let _serial = serial();
    let pair = NetnsPair::up("ubpt");
    for udp in [false, true] {
        let recv = pair.spawn_recv(&["--cpus", "1"]);
        let mut c = pair.cmd(&pair.sender_ns(), bin(), &["send", "-c", RECV_ADDR, "-t", "2", "--warmup", "200ms"]);
        c.args(["--latency", "--trip-times", "-b", "200M", "-J", "--cpus", "0"]);
        if udp {
            c.arg("-u");
        }
        let (out, _) = run_bounded(c, Duration::from_secs(30));
        drop(recv);
        assert!(out.status.success(), "udp {udp}: {}", String::from_utf8_lossy(&out.stderr));
        let doc = json(&out);
        assert_legs_add_up(&doc, "/latency/trip_times", "/latency/trip_times/round_trip_us");
        // The legs are the loaded probes'.
        assert_eq!(u64_at(&doc, "/latency/trip_times/request_us/count"), u64_at(&doc, "/latency/loaded/count"));
        let cpu = &doc["latency"]["cpu"];
        let f = |k: &str| cpu[k].as_f64().unwrap_or_else(|| panic!("no latency.cpu.{k}: {doc}"));
        assert!(f("probe_seconds") > 0.0 && f("answer_seconds") > 0.0, "both threads ran: {cpu}");
        assert!(f("load_seconds") > 0.0 && f("host_seconds") > 0.0, "{cpu}");
        assert!(f("share") > 0.0 && f("host_share") > 0.0 && f("host_share") < 1.0, "{cpu}");
    }
    // Without --latency there is no probe to split.
    let c = pair.cmd(&pair.sender_ns(), bin(), &["send", "-c", RECV_ADDR, "--trip-times"]);
    let (out, _) = run_bounded(c, Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
}
