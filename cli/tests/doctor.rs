//! `uringbench doctor` on a veth pair made for the test: it must report the real facts of
//! that pair (driver, the MTU set, queue counts, path MTU, reachability), as text and JSON.

mod common;

use common::*;
use std::time::Duration;

fn check<'a>(doc: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    doc["checks"]
        .as_array()
        .expect("checks[]")
        .iter()
        .find(|c| c["id"] == id)
        .unwrap_or_else(|| panic!("no check {id} in {doc}"))
}

/// What sysfs in the sender namespace says about one attribute of the veth end.
fn sysfs(pair: &NetnsPair, attr: &str) -> String {
    let path = format!("/sys/class/net/{}a0/{attr}", pair.name);
    let out = pair.cmd(&pair.sender_ns(), "cat", &[&path]).output().expect("cat");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn doctor_reports_the_veth_pair_it_runs_on() {
    let _serial = serial();
    let pair = NetnsPair::up_with_mtu("uod", 9000);
    let recv = pair.spawn_recv(&["--port", "5391"]);
    let doctor = |args: &[&str]| {
        let mut c = pair.cmd(&pair.sender_ns(), bin(), &["doctor"]);
        c.args(args);
        run_bounded(c, Duration::from_secs(30)).0
    };

    let out = doctor(&["--target", RECV_ADDR, "-p", "5391", "-J"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "no check fails on a healthy veth pair: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let doc = json(&out);
    assert_eq!(doc["interface"]["name"], "uoda0", "the route to the target picks the veth end");
    assert_eq!(doc["interface"]["chosen_by"], format!("route to {RECV_ADDR}"));
    assert_eq!(doc["interface"]["driver"], "veth");
    assert_eq!(check(&doc, "nic.driver")["facts"]["driver"], "veth");
    assert_eq!(check(&doc, "nic.driver")["facts"]["virtual_device"], true);
    assert_eq!(check(&doc, "nic.mtu")["facts"]["mtu"].as_u64(), Some(9000), "the MTU the pair was made with");
    let queues = &check(&doc, "nic.queues")["facts"];
    let listing = pair.cmd(&pair.sender_ns(), "ls", &["/sys/class/net/uoda0/queues"]).output().unwrap();
    let names = String::from_utf8_lossy(&listing.stdout).to_string();
    let count = |p: &str| names.split_whitespace().filter(|n| n.starts_with(p)).count() as u64;
    assert_eq!(queues["rx_queues"].as_u64(), Some(count("rx-")), "rx queues as sysfs lists them: {names}");
    assert_eq!(queues["tx_queues"].as_u64(), Some(count("tx-")), "tx queues as sysfs lists them: {names}");
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    let online = uringbench::units::parse_cpu_list(&online).unwrap().len() as u64;
    assert_eq!(queues["cpus"].as_u64(), Some(online), "online CPUs");
    assert_eq!(check(&doc, "path.mtu")["facts"]["path_mtu"].as_u64(), Some(9000), "path MTU across the veth");
    assert_eq!(check(&doc, "path.address")["status"], "pass", "10.77.0.2 is private");
    let reach = check(&doc, "path.reach");
    assert_eq!(reach["facts"]["reach"], "listening", "recv listens on 5391: {reach}");
    let rtt = reach["facts"]["rtt_us"].as_f64().expect("a handshake RTT");
    assert!(rtt > 0.0 && rtt < 100_000.0, "veth handshake RTT {rtt} µs");
    assert_eq!(check(&doc, "fastpath.zcrx")["status"], "skip", "zcrx is impossible on veth");
    assert!(check(&doc, "fastpath.zcrx")["summary"].as_str().unwrap().contains("veth has no header split"));
    let counters = check(&doc, "nic.driver_counters");
    assert_eq!(counters["status"], "pass", "a fresh veth has lost nothing: {counters}");
    assert!(counters["facts"]["statistics"].as_u64().unwrap() > 0, "veth keeps statistics (ethtool -S): {counters}");
    let offloads = &check(&doc, "nic.offloads")["facts"]["offloads"];
    assert_eq!(offloads["tso"], true, "veth does TSO: {offloads}");
    let rps = sysfs(&pair, "queues/rx-0/rps_cpus");
    assert_eq!(
        check(&doc, "nic.rps")["facts"]["rps_cpus"]["rx-0"].as_u64(),
        Some(u64::from(u32::from_str_radix(&rps, 16).unwrap().count_ones()))
    );
    let tally = &doc["summary"];
    let total = ["pass", "warn", "fail", "skip"].iter().map(|k| tally[k].as_u64().unwrap()).sum::<u64>();
    assert_eq!(total as usize, doc["checks"].as_array().unwrap().len(), "the tally counts every check");
    for c in doc["checks"].as_array().unwrap() {
        if c["status"] == "warn" || c["status"] == "fail" {
            assert!(c["fix"].is_string(), "every warning carries its fix: {c}");
        }
    }
    drop(recv);

    // Nothing listens any more: the host answers with a reset, doctor says what to run and
    // fails (exit 1): no test can run there.
    let out = doctor(&["--target", RECV_ADDR, "-p", "5391"]);
    assert_eq!(out.status.code(), Some(1), "a dead target fails doctor");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(text.contains("interface uoda0 (veth, route to 10.77.0.2)"), "{text}");
    assert!(text.contains("uoda0 MTU 9000"), "{text}");
    assert!(text.contains("nothing listens on port 5391"), "{text}");
    assert!(text.contains("fix: on the target: uringbench recv -p 5391"), "{text}");
    assert!(text.lines().last().unwrap().contains("passed"), "ends with the tally: {text}");
    assert!(!text.contains('\x1b'), "no colours into a pipe");
}

#[test]
fn doctor_usage_errors_are_one_line_exit_2() {
    for args in [&["--iface", "no-such-if0"][..], &["--bandwidth", "fast"], &["--format", "xml"], &["--bandwidth", "0"]]
    {
        let mut c = std::process::Command::new(bin());
        c.arg("doctor").args(args);
        let (out, _) = run_bounded(c, Duration::from_secs(20));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: one line: {err}");
    }
}
