//! scripts/tune.sh inside a network namespace made for the test: `apply` changes settings
//! (buffers, GRO, RPS) and records them; `revert` puts back every recorded setting exactly,
//! and the host's own settings are never touched.

mod common;

use common::*;
use std::path::PathBuf;
use std::process::Command;

fn tune_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/tune.sh")
}

/// Settings a tune run may touch in the namespace, read from inside it.
fn read_in(pair: &NetnsPair, path: &str) -> String {
    let out = pair.cmd(&pair.sender_ns(), "cat", &[path]).output().expect("cat");
    String::from_utf8_lossy(&out.stdout).to_string()
}

fn ethtool_features(pair: &NetnsPair) -> Option<String> {
    let out = pair.cmd(&pair.sender_ns(), "ethtool", &["-k", "uota0"]).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).to_string())
}

fn tune(pair: &NetnsPair, args: &[&str]) -> std::process::Output {
    let script = tune_script();
    let mut c = pair.cmd(&pair.sender_ns(), "bash", &[script.to_str().unwrap()]);
    // tune.sh records and reverts through `uringbench settings`: this build's binary.
    c.args(args).env("URINGBENCH", bin());
    run_bounded(c, std::time::Duration::from_secs(60)).0
}

const HOST_SETTINGS: &[&str] = &[
    "/proc/sys/net/core/rmem_max",
    "/proc/sys/net/core/wmem_max",
    "/proc/sys/net/ipv4/tcp_rmem",
    "/proc/sys/net/ipv4/tcp_wmem",
    "/proc/sys/net/core/netdev_max_backlog",
];

#[test]
fn apply_then_revert_restores_every_touched_setting() {
    let pair = NetnsPair::up("uot");
    let state = std::env::temp_dir().join(format!("uot-{}.state", std::process::id()));
    let _ = std::fs::remove_file(&state);
    let state_arg = state.to_str().unwrap();
    let host_before: Vec<String> = HOST_SETTINGS.iter().map(|p| std::fs::read_to_string(p).unwrap()).collect();
    let ns_paths = [
        "/proc/sys/net/ipv4/tcp_rmem",
        "/proc/sys/net/ipv4/tcp_wmem",
        "/proc/sys/net/core/rmem_max",
        "/proc/sys/net/core/wmem_max",
        "/sys/class/net/uota0/queues/rx-0/rps_cpus",
    ];
    // GSO off, as a misconfigured host might have it: apply must turn it on and revert off.
    let ethtool =
        pair.cmd(&pair.sender_ns(), "ethtool", &["-K", "uota0", "gso", "off"]).status().is_ok_and(|s| s.success());
    let before: Vec<String> = ns_paths.iter().map(|p| read_in(&pair, p)).collect();
    let features_before = ethtool_features(&pair);

    let out = tune(&pair, &["apply", "--iface", "uota0", "--state", state_arg, "--buffer", "134217728"]);
    let log = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "apply failed: {log} {}", String::from_utf8_lossy(&out.stderr));
    let recorded = std::fs::read_to_string(&state).expect("apply keeps a state file");
    let lines: Vec<&str> = recorded.lines().filter(|l| !l.starts_with('#')).collect();
    assert!(!lines.is_empty(), "{log}");

    // What apply did is visible in the namespace.
    let rmem = read_in(&pair, "/proc/sys/net/ipv4/tcp_rmem");
    assert_eq!(rmem.split_whitespace().nth(2), Some("134217728"), "tcp_rmem max raised: {log}");
    // A veth is a software device: RPS and GRO only add work there, so they stay as they were.
    assert_eq!(read_in(&pair, "/sys/class/net/uota0/queues/rx-0/rps_cpus"), before[4], "RPS left alone on veth: {log}");
    assert!(log.contains("leave RPS alone: software device"), "{log}");
    if ethtool {
        let now = ethtool_features(&pair).unwrap();
        assert!(now.contains("generic-segmentation-offload: on"), "GSO back on: {log}");
        assert!(lines.contains(&"ethtool-k\tuota0\tgso off"), "{recorded}");
        let gro = |f: &str| f.lines().find(|l| l.starts_with("generic-receive-offload:")).map(str::to_owned);
        assert_eq!(gro(&now), gro(features_before.as_ref().unwrap()), "GRO left alone on veth: {log}");
    }
    // Everything recorded belongs to the namespace: its sysctls, its interface.
    for l in &lines {
        let mut f = l.split('\t');
        let (kind, key) = (f.next().unwrap(), f.next().unwrap());
        match kind {
            "file" => assert!(
                key.starts_with("/proc/sys/net/ipv4/")
                    || key.starts_with("/proc/sys/net/core/")
                    || key.starts_with("/sys/class/net/uota0/"),
                "touched a setting outside the namespace: {l}"
            ),
            "ethtool-k" | "ethtool-l" | "ethtool-g" => assert_eq!(key, "uota0"),
            other => panic!("unexpected state line kind {other}: {l}"),
        }
    }
    // A second apply would record tuned values as the previous ones: refused.
    let again = tune(&pair, &["apply", "--iface", "uota0", "--state", state_arg]);
    assert_eq!(again.status.code(), Some(1), "second apply refused");
    assert!(String::from_utf8_lossy(&again.stderr).contains("already applied"));

    let out = tune(&pair, &["revert", "--state", state_arg]);
    assert!(
        out.status.success(),
        "revert failed: {} {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!state.exists(), "revert removes the state file");
    let after: Vec<String> = ns_paths.iter().map(|p| read_in(&pair, p)).collect();
    assert_eq!(after, before, "every namespace setting is back as it was");
    assert_eq!(ethtool_features(&pair), features_before, "offloads as they were");
    // Every file the state named reads as before (also those not in the list above).
    for l in &lines {
        let mut f = l.splitn(3, '\t');
        if f.next() == Some("file") {
            let key = f.next().unwrap();
            let previous = f.next().unwrap();
            assert_eq!(read_in(&pair, key).split_whitespace().collect::<Vec<_>>().join(" "), previous, "{key}");
        }
    }
    let host_after: Vec<String> = HOST_SETTINGS.iter().map(|p| std::fs::read_to_string(p).unwrap()).collect();
    assert_eq!(host_after, host_before, "the host's own settings never changed");

    let nothing = tune(&pair, &["revert", "--state", state_arg]);
    assert_eq!(nothing.status.code(), Some(1), "nothing to revert");
}

#[test]
fn tune_usage_errors_exit_2() {
    for args in [&["sideways"][..], &["apply", "--buffer", "12"], &["revert", "--iface", "x"], &[]] {
        let out = Command::new("bash").arg(tune_script()).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

/// A `settings apply` that fails part-way says what stays applied and how to undo it; the
/// dry run of tune.sh lists only writes apply would make (not the namespace's read-only
/// net.core.rmem_max, which apply skips).
#[test]
fn a_failed_apply_says_what_stays_and_dry_run_lists_only_real_writes() {
    let _serial = serial();
    let pair = NetnsPair::up("uotf");
    let state = std::env::temp_dir().join(format!("ub-tune-fail-{}.state", std::process::id()));
    let ns = pair.sender_ns();
    let before = read_in(&pair, "/proc/sys/net/ipv4/tcp_ecn");
    let ecn = if before.trim() == "1" { "2" } else { "1" };
    let s = state.to_str().unwrap();
    let first = format!("sysctl:net.ipv4.tcp_ecn={ecn}");
    let out = pair
        .cmd(&ns, bin(), &["settings", "apply", "--state", s, &first, "sysctl:net.core.rmem_max=1234567"])
        .output()
        .unwrap();
    one_line_error(
        &out,
        1,
        &format!("1 earlier change(s) stay applied, recorded in {s} (undo: uringbench settings revert --state {s})"),
    );
    assert_eq!(read_in(&pair, "/proc/sys/net/ipv4/tcp_ecn").trim(), ecn, "the first change stayed, as said");
    assert!(pair.cmd(&ns, bin(), &["settings", "revert", "--state", s]).status().unwrap().success());
    assert_eq!(read_in(&pair, "/proc/sys/net/ipv4/tcp_ecn"), before, "and the command said undoes it");
    let dry = tune(&pair, &["apply", "--iface", "uotfa0", "--dry-run"]);
    let text = String::from_utf8_lossy(&dry.stdout);
    assert!(dry.status.success(), "{text}");
    assert!(text.contains("skip /proc/sys/net/core/rmem_max"), "read-only here, so not a change: {text}");
    assert!(!text.contains("  /proc/sys/net/core/rmem_max:"), "not listed as a change: {text}");
}
