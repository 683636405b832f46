//! Flows and NIC queues between two network namespaces: what a veth pair with several queues
//! can show of the receiver's hand-off (each flow to the thread of the queue it arrived on),
//! UDP steering and `--steer ntuple`. veth has queues but no interrupts, and the kernel names
//! no NAPI instance per veth queue, so these tests check the fallbacks and refusals with real
//! traffic; the queue mapping itself is checked by the unit tests and the VM lab.

mod common;

use common::*;
use std::process::Command;
use std::time::Duration;

/// Replaces the pair's veth with one of `queues` receive and transmit queues a side, the
/// same names, addresses and permanent neighbours, and turns veth's NAPI on: GRO on the
/// receiving end, TSO off on the sending end (veth only takes the NAPI path for packets that
/// are not TSO super-frames). The sockets then report NAPI ids.
fn requeue(pair: &NetnsPair, queues: u32) {
    let (a, b) = (pair.sender_ns(), pair.receiver_ns());
    let (ia, ib) = (format!("{}a0", pair.name), pair.receiver_if());
    let ip = |ns: &str, args: &str| {
        let out = Command::new("ip").args(["-n", ns]).args(args.split_whitespace()).output().expect("ip");
        assert!(out.status.success(), "ip -n {ns} {args}: {}", String::from_utf8_lossy(&out.stderr));
    };
    let q = queues.to_string();
    ip(&a, &format!("link del {ia}"));
    ip(
        &a,
        &format!(
            "link add {ia} numtxqueues {q} numrxqueues {q} type veth peer name {ib} netns {b} numtxqueues {q} numrxqueues {q}"
        ),
    );
    ip(&a, &format!("addr add 10.77.0.1/24 dev {ia}"));
    ip(&b, &format!("addr add 10.77.0.2/24 dev {ib}"));
    ip(&a, &format!("link set {ia} up"));
    ip(&b, &format!("link set {ib} up"));
    let mac = |ns: &str, dev: &str| {
        let out = pair.cmd(ns, "cat", &[&format!("/sys/class/net/{dev}/address")]).output().expect("cat");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    ip(&a, &format!("neigh replace 10.77.0.2 lladdr {} dev {ia} nud permanent", mac(&b, &ib)));
    ip(&b, &format!("neigh replace 10.77.0.1 lladdr {} dev {ib} nud permanent", mac(&a, &ia)));
    let ethtool = |ns: &str, args: &[&str]| {
        let out = pair.cmd(ns, "ethtool", args).output().expect("ethtool");
        assert!(out.status.success(), "ethtool {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    ethtool(&b, &["-K", &ib, "gro", "off"]);
    ethtool(&b, &["-K", &ib, "gro", "on"]);
    ethtool(&a, &["-K", &ia, "tso", "off"]);
}

/// A pair named `name` whose veth has `queues` queues a side, held for this test alone; None
/// (the test skipped) without ethtool.
fn queued_pair(name: &str, queues: u32) -> Option<(Serial, NetnsPair)> {
    if !Command::new("ethtool").arg("--version").output().is_ok_and(|o| o.status.success()) {
        skip(Lacking::Installed, "ethtool is not installed");
        return None;
    }
    let serial = serial();
    let pair = NetnsPair::up(name);
    requeue(&pair, queues);
    Some((serial, pair))
}

#[test]
fn on_veth_with_napi_ids_but_no_queue_names_flows_are_dealt_by_index_and_the_line_says_so() {
    let Some((_serial, pair)) = queued_pair("ubsth", 4) else { return };
    let recv = pair.spawn_recv(&["--once", "--napi"]);
    let (out, _) = pair.send(
        &["--target", RECV_ADDR, "-P", "4", "-t", "1", "--warmup", "0", "--format", "json"],
        Duration::from_secs(30),
    );
    let recv_out = recv.finish(Duration::from_secs(10));
    assert!(out.status.success(), "send: {}", String::from_utf8_lossy(&out.stderr));
    assert!(recv_out.status.success(), "recv: {}", String::from_utf8_lossy(&recv_out.stderr));
    let doc = json(&out);
    let sent = u64_at(&doc, "/sum/sender/total_bytes");
    assert!(sent > 1 << 20, "a 1 s stream moves megabytes: {sent}");
    assert_eq!(u64_at(&doc, "/sum/receiver/total_bytes"), sent, "byte-exact");
    let receiver = &doc["receiver"];
    // The sockets have NAPI ids (veth's NAPI is on), on more than one of the four queues' instances...
    let path = receiver["path"].as_str().unwrap_or_default();
    assert!(path.contains("4 of 4 sockets on NAPI ids"), "veth NAPI on: {path}");
    // ...but the kernel does not say which queue each belongs to: no hand-off, no table.
    let placement = receiver["placement"].as_str().unwrap_or_default();
    assert!(
        placement
            .contains("no NIC queues on this path (veth, loopback): CPUs in order, flows dealt to threads by index"),
        "{placement}"
    );
    assert!(!path.contains("served by the thread of the rx queue"), "{path}");
    assert!(receiver["nic_queues"].is_null(), "{}", receiver["nic_queues"]);
    // Dealt by index: each queue's receiver bytes are its sender's.
    for q in doc["queues"].as_array().expect("queues[]") {
        assert_eq!(u64_at(q, "/receiver/total_bytes"), u64_at(q, "/sender/total_bytes"), "{q}");
    }
}

#[test]
fn steer_ntuple_is_refused_on_veth_naming_what_is_missing_and_installs_nothing() {
    let Some((_serial, pair)) = queued_pair("ubstn", 2) else { return };
    let recv = pair.spawn_recv(&[]);
    let ib = pair.receiver_if();
    let (out, _) = pair.send(
        &["--target", RECV_ADDR, "-P", "2", "-t", "1", "--warmup", "0", "--steer", "ntuple"],
        Duration::from_secs(30),
    );
    // The refusal is the receiver's, and names the device and what it lacks.
    one_line_error(&out, 1, &format!("refused the test: --steer ntuple: {ib} (veth) has no n-tuple flow rules"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("ntuple-filters off [fixed]"), "{stderr}");
    // The kernel agrees: the driver has no rule table at all.
    let rules = pair.cmd(&pair.receiver_ns(), "ethtool", &["-n", &ib]).output().expect("ethtool -n");
    assert!(!rules.status.success(), "veth has no rx classification: {}", String::from_utf8_lossy(&rules.stdout));
    // The receiver goes on serving: the same test without --steer ntuple runs, byte-exact.
    let (out, _) = pair.send(
        &["--target", RECV_ADDR, "-P", "2", "-t", "1", "--warmup", "0", "--format", "json"],
        Duration::from_secs(30),
    );
    assert!(out.status.success(), "send: {}", String::from_utf8_lossy(&out.stderr));
    let doc = json(&out);
    assert_eq!(u64_at(&doc, "/sum/receiver/total_bytes"), u64_at(&doc, "/sum/sender/total_bytes"));
    // No journal of rules is left behind.
    let left: Vec<_> = std::fs::read_dir("/var/lib/uringbench")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok()).filter(|n| n.starts_with("ntuple-")).collect()
        })
        .unwrap_or_default();
    assert!(left.is_empty(), "{left:?}");
    drop(recv);
}

#[test]
fn steer_ntuple_refuses_what_it_cannot_steer_before_connecting() {
    for extra in [&["-R"][..], &["--bidir"][..], &["-u", "-R"][..]] {
        let mut c = Command::new(bin());
        c.args(["send", "--target", "127.0.0.1", "-p", "9", "-t", "1", "--steer", "ntuple"]).args(extra);
        let (out, _) = run_bounded(c, Duration::from_secs(10));
        one_line_error(&out, 2, "--steer ntuple steers forward streams only, TCP or UDP (no -R, --bidir or rr)");
    }
}

#[test]
fn steer_ntuple_for_udp_is_refused_on_veth_naming_what_is_missing() {
    let Some((_serial, pair)) = queued_pair("ubstu", 2) else { return };
    let recv = pair.spawn_recv(&[]);
    let ib = pair.receiver_if();
    let udp = ["--target", RECV_ADDR, "-u", "-b", "100M", "-P", "2", "-t", "1", "--warmup", "0"];
    let (out, _) = pair.send(&[&udp[..], &["--steer", "ntuple"]].concat(), Duration::from_secs(30));
    // The same refusal as for TCP: the receiver's, naming the device and what it lacks.
    one_line_error(&out, 1, &format!("refused the test: --steer ntuple: {ib} (veth) has no n-tuple flow rules"));
    // The receiver goes on serving: the same UDP test without rules runs and is counted.
    let (out, _) = pair.send(&[&udp[..], &["--format", "json"]].concat(), Duration::from_secs(30));
    assert!(out.status.success(), "send: {}", String::from_utf8_lossy(&out.stderr));
    let doc = json(&out);
    assert!(u64_at(&doc, "/sum/receiver/total_bytes") > 0, "{doc}");
    drop(recv);
}
