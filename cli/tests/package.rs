//! The packaged service (cli/debian/uringbench-recv.service): the receiver works with exactly
//! the privileges the unit gives it, a non-root user holding only the unit's ambient
//! capabilities and its memlock limit, for the socket engine and for AF_XDP.

mod common;

use common::*;
use std::time::Duration;

fn unit() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/debian/uringbench-recv.service");
    std::fs::read_to_string(path).expect("read the unit file")
}

/// The values of `Key=` in the unit, split on spaces.
fn unit_values(key: &str) -> Vec<String> {
    let prefix = format!("{key}=");
    unit()
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .flat_map(|v| v.split_whitespace().map(str::to_string).collect::<Vec<_>>())
        .collect()
}

/// `prlimit` and `setpriv` arguments that run a command as the unit would: user nobody, the
/// unit's ambient capabilities and nothing else in the bounding set. The memlock limit stays
/// the host's (raising it needs CAP_SYS_RESOURCE, which CI's sandbox lacks), which makes the
/// test stricter: only CAP_IPC_LOCK lets the buffer rings and the AF_XDP UMEM be pinned.
fn as_the_unit() -> Vec<String> {
    let caps: Vec<String> = unit_values("AmbientCapabilities")
        .iter()
        .map(|c| format!("+{}", c.trim_start_matches("CAP_").to_lowercase()))
        .collect();
    assert!(caps.len() >= 4, "the unit names its capabilities: {caps:?}");
    assert_eq!(unit_values("CapabilityBoundingSet"), unit_values("AmbientCapabilities"), "bounding set = ambient set");
    assert_eq!(unit_values("LimitMEMLOCK"), ["infinity"]);
    assert_eq!(unit_values("DynamicUser"), ["yes"], "the unit runs as a transient non-root user");
    let caps = caps.join(",");
    [
        "prlimit",
        "--nofile=16384:16384",
        "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        &format!("--inh-caps=-all,{caps}"),
        &format!("--ambient-caps=-all,{caps}"),
        &format!("--bounding-set=-all,{caps}"),
        "--no-new-privs",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// The receiver's uid and effective capability mask, from /proc.
fn identity(pid: u32) -> (String, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("recv's /proc status");
    let field = |name: &str| {
        status.lines().find_map(|l| l.strip_prefix(name)).map(|v| v.trim().to_string()).expect("status field")
    };
    let uid = field("Uid:").split_whitespace().next().unwrap().to_string();
    let cap_eff = u64::from_str_radix(&field("CapEff:"), 16).expect("hex CapEff");
    (uid, cap_eff)
}

#[test]
fn recv_runs_with_only_the_units_privileges() {
    let _serial = serial();
    let pair = NetnsPair::up("uosv");
    let wrapper = as_the_unit();
    let wrapper: Vec<&str> = wrapper.iter().map(String::as_str).collect();

    // Socket engine, TCP then UDP, from one receiver: what the service serves by default.
    let recv = pair.spawn_recv_under(&wrapper, &[]);
    let (uid, cap_eff) = identity(recv.pid());
    assert_eq!(uid, "65534", "recv runs as nobody, not root");
    const CAP_SYS_ADMIN: u64 = 1 << 21;
    const CAP_NET_ADMIN: u64 = 1 << 12;
    assert_eq!(cap_eff & CAP_SYS_ADMIN, 0, "no CAP_SYS_ADMIN");
    assert_ne!(cap_eff & CAP_NET_ADMIN, 0, "CAP_NET_ADMIN held");
    for proto in [&[][..], &["-u", "-b", "200M"][..]] {
        let mut args = vec!["--target", RECV_ADDR, "-t", "1s", "--warmup", "200ms", "-J"];
        args.extend_from_slice(proto);
        let (out, _) = pair.send(&args, Duration::from_secs(30));
        assert!(
            out.status.success(),
            "send {proto:?} to the unit-privileged recv: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let doc = json(&out);
        let sent = u64_at(&doc, "/sum/sender/total_bytes");
        assert!(sent > 1 << 20, "{proto:?}: moved {sent} bytes");
        assert_eq!(u64_at(&doc, "/sum/receiver/total_bytes"), sent, "{proto:?}: receiver-verified bytes");
    }
    drop(recv);

    // AF_XDP: the program load (CAP_BPF), attach (CAP_NET_ADMIN), AF_XDP sockets (CAP_NET_RAW)
    // and the UMEM (memlock) all work under the unit's privileges.
    let recv = pair.spawn_recv_under(&wrapper, &["--engine", "xdp", "--once"]);
    let (out, _) = pair.send(
        &["--target", RECV_ADDR, "--engine", "xdp", "-t", "1s", "--warmup", "200ms", "-l", "1470", "-b", "50M", "-J"],
        Duration::from_secs(30),
    );
    let recv_out = recv.finish(Duration::from_secs(10));
    assert!(
        out.status.success(),
        "xdp send to the unit-privileged recv: {} / recv: {}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&recv_out.stderr)
    );
    let doc = json(&out);
    let sent = u64_at(&doc, "/sum/sender/datagrams");
    assert!(sent > 3000, "50 Mbit/s of 1470 B for 1.2 s, got {sent}");
    assert_eq!(u64_at(&doc, "/sum/receiver/datagrams"), sent, "every frame counted by the AF_XDP receiver");
    assert!(recv_out.status.success(), "recv --once exits 0: {}", String::from_utf8_lossy(&recv_out.stderr));
}
