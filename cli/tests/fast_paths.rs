//! Kernel fast paths between two namespaces: `--sqpoll` and `--napi` runs move exactly the
//! bytes they report and say so in the placement line; `--zc-rx` on veth is refused with the
//! missing prerequisite instead of silently copying, with a queue named or without (queues
//! chosen out of RSS).

mod common;

use common::*;
use std::time::Duration;

#[test]
fn sqpoll_and_napi_runs_are_exact_and_reported() {
    let _serial = serial();
    let pair = NetnsPair::up("ubf-fp");
    let recv = pair.spawn_recv(&["--napi", "20us", "--cpus", "1"]);
    for (flag, needle) in [("--sqpoll", "io_uring SQPOLL"), ("--napi", "io_uring NAPI busy poll 50 us")] {
        let (out, _) = pair.send(
            &["--target", RECV_ADDR, "-t", "1", "--warmup", "200ms", "-J", "--cpus", "0", flag],
            Duration::from_secs(30),
        );
        assert!(out.status.success(), "{flag}: {}", String::from_utf8_lossy(&out.stderr));
        let doc = json(&out);
        let sent = u64_at(&doc, "/sum/sender/total_bytes");
        assert!(sent > 1 << 20, "{flag}: moved only {sent} bytes");
        assert_eq!(u64_at(&doc, "/sum/receiver/total_bytes"), sent, "{flag}: receiver counted every byte");
        let placement = doc["sender"]["placement"].as_str().unwrap();
        assert!(placement.contains(needle), "{flag} is named in the sender's placement: {placement}");
        let receiver = doc["receiver"]["placement"].as_str().unwrap();
        assert!(receiver.contains("NAPI busy poll 20 us"), "recv --napi 20us is named: {receiver}");
        let path = doc["receiver"]["path"].as_str().unwrap();
        assert!(path.contains("none of the 1 sockets has a NAPI id"), "veth without GRO has no NAPI id: {path}");
    }
    drop(recv);
}

#[test]
fn zero_copy_receive_on_veth_names_what_is_missing() {
    let _serial = serial();
    let pair = NetnsPair::up("ubf-zc");
    let iface = pair.receiver_if();
    let spec = format!("{iface}:0");
    let c = pair.cmd(&pair.receiver_ns(), bin(), &["recv", "--zc-rx", &spec]);
    let (out, took) = run_bounded(c, Duration::from_secs(10));
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(1), "refused as unsupported: {err}");
    assert!(took < Duration::from_secs(5), "refused before listening, not after a timeout");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    for needle in [iface.as_str(), "veth", "EOPNOTSUPP", "tcp-data-split", "mlx5"] {
        assert!(err.contains(needle), "'{needle}' in: {err}");
    }
    // Without a queue, the receiver looks for queues kept out of RSS: veth reports no RSS
    // table at all, and the one line says so, with the command that keeps a queue out.
    let c = pair.cmd(&pair.receiver_ns(), bin(), &["recv", "--zc-rx", &iface]);
    let (out, took) = run_bounded(c, Duration::from_secs(10));
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(1), "refused as unsupported: {err}");
    assert!(took < Duration::from_secs(5), "refused before listening, not after a timeout");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    // An older kernel stops at its missing opcode first; this one names the missing table.
    if !err.contains("lacks IORING_OP_RECV_ZC") {
        for needle in [
            format!("--zc-rx {iface}: no receive queue is known to be kept out of RSS"),
            format!("{iface} (veth) reports no RSS indirection table"),
            "veth cannot receive zero-copy at all".to_string(),
            format!("`ethtool -X {iface} equal"),
            format!("--zc-rx {iface}:QUEUE"),
        ] {
            assert!(err.contains(&needle), "'{needle}' in: {err}");
        }
    }
    // Queues chosen for uringbench senders only: the iperf modes are told to name one.
    let c = pair.cmd(&pair.receiver_ns(), bin(), &["recv", "--iperf3", "--zc-rx", &iface]);
    let (out, _) = run_bounded(c, Duration::from_secs(10));
    one_line_error(&out, 2, "name the queue (--zc-rx IFACE:QUEUE)");
    let c = pair.cmd(&pair.receiver_ns(), bin(), &["recv", "--zc-rx", "nosuch0"]);
    let (out, _) = run_bounded(c, Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(2), "a missing interface is a usage error");
    assert!(String::from_utf8_lossy(&out.stderr).contains("no interface 'nosuch0'"));
}
