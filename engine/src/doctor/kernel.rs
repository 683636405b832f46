//! Kernel and process: version and io_uring features, `kernel.io_uring_disabled`,
//! RLIMIT_MEMLOCK, and the CPU frequency governor.

use super::facts::{GovernorFacts, IoUringFacts, KernelUnusableFacts, KernelVersionFacts, MemlockFacts, SysctlValue};
use super::{read_trimmed, Check, Context, HostFs};
use crate::sys::probe::KernelCaps;

/// Pinned memory a full test may want: a 64 MiB AF_XDP UMEM, or buffer rings and registered
/// payload buffers for many queue threads (2 MiB of ring per thread).
pub(crate) const MEMLOCK_WANTED: u64 = 64 << 20;

/// (major, minor) of a release string such as `6.18.0-rc3-cloud-amd64`.
pub(crate) fn parse_release(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.trim().split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// io_uring features by the kernel release that brought them, for the version check (the
/// engine still probes each one at run time: a distribution kernel may backport or disable it).
const FEATURES_BY_VERSION: &[((u32, u32), &str)] = &[
    ((5, 19), "provided-buffer rings"),
    ((6, 0), "SEND_ZC and multishot recv"),
    ((6, 2), "zero-copy usage reports"),
    ((6, 9), "NAPI busy-poll registration"),
    ((6, 10), "recv/send bundles"),
    ((6, 15), "zero-copy receive (zcrx)"),
];

pub fn checks(ctx: &Context, fs: &dyn HostFs) -> Vec<Check> {
    let release = read_trimmed(fs, "/proc/sys/kernel/osrelease").ok();
    vec![version(release.as_deref(), &ctx.caps), io_uring_disabled(fs), memlock(&ctx.caps), governor(fs)]
}

fn version(release: Option<&str>, caps: &Result<KernelCaps, String>) -> Check {
    let id = "kernel.version";
    let Some(release) = release else {
        return Check::skip(id, "/proc/sys/kernel/osrelease unreadable: kernel version unknown");
    };
    let caps = match caps {
        Ok(c) => c,
        Err(e) => {
            return Check::fail(id, format!("Linux {release}: io_uring unusable: {e}"))
                .fix("see the message: io_uring must be enabled and reachable (kernel 5.19 or newer)")
                .facts(KernelUnusableFacts { release: release.into(), error: e.clone() });
        }
    };
    let mut have = Vec::new();
    for (flag, name) in [
        (caps.send_zc, "SEND_ZC"),
        (caps.recvsend_bundle, "bundles"),
        (caps.recv_zc, "RECV_ZC"),
        (caps.defer_taskrun, "DEFER_TASKRUN"),
        (caps.min_wait_timeout, "min-wait"),
    ] {
        if flag {
            have.push(name);
        }
    }
    let facts = KernelVersionFacts {
        release: release.into(),
        version: parse_release(release),
        send_zc: caps.send_zc,
        recv_zc: caps.recv_zc,
        recvsend_bundle: caps.recvsend_bundle,
        defer_taskrun: caps.defer_taskrun,
        min_wait_timeout: caps.min_wait_timeout,
    };
    let Some(v) = parse_release(release) else {
        return Check::warn(id, format!("Linux {release:?}: version not understood; io_uring has {}", have.join(", ")))
            .fix("uname -r should print MAJOR.MINOR...; features are probed at run time anyway")
            .facts(facts);
    };
    let missing: Vec<String> = FEATURES_BY_VERSION
        .iter()
        .filter(|(min, _)| v < *min)
        .map(|((a, b), name)| format!("{name} ({a}.{b})"))
        .collect();
    if v < (5, 19) {
        return Check::fail(id, format!("Linux {release} is older than 5.19: the io_uring engine needs buffer rings"))
            .fix("upgrade the kernel to 6.10 or newer (e.g. Debian backports, Ubuntu HWE)")
            .facts(facts);
    }
    if !caps.recvsend_bundle || !missing.is_empty() {
        return Check::warn(
            id,
            format!("Linux {release}: io_uring {}; missing {}", have.join(", "), missing.join(", ")),
        )
        .fix("a 6.10+ kernel receives many buffers per completion; 6.15+ adds zero-copy receive")
        .facts(facts);
    }
    Check::pass(id, format!("Linux {release}: io_uring {}, NAPI registration", have.join(", "))).facts(facts)
}

fn io_uring_disabled(fs: &dyn HostFs) -> Check {
    let id = "kernel.io_uring";
    let facts = |v: Option<SysctlValue>| IoUringFacts { io_uring_disabled: v };
    match super::sysctl(fs, "kernel.io_uring_disabled") {
        Err(_) => {
            Check::pass(id, "kernel.io_uring_disabled absent (kernel before 6.6): io_uring is on").facts(facts(None))
        }
        Ok(v) => match v.parse::<u32>() {
            Ok(0) => Check::pass(id, "kernel.io_uring_disabled = 0 (enabled for everyone)")
                .facts(facts(Some(SysctlValue::Number(0)))),
            Ok(1) => Check::warn(
                id,
                "kernel.io_uring_disabled = 1: only root and kernel.io_uring_group may use io_uring",
            )
            .fix("sysctl -w kernel.io_uring_disabled=0   # or run as root / add the user to kernel.io_uring_group")
            .facts(facts(Some(SysctlValue::Number(1)))),
            Ok(n) => Check::fail(id, format!("kernel.io_uring_disabled = {n}: io_uring is switched off"))
                .fix("sysctl -w kernel.io_uring_disabled=0")
                .facts(facts(Some(SysctlValue::Number(n)))),
            Err(_) => Check::warn(id, format!("kernel.io_uring_disabled is {v:?}, not a number"))
                .fix("sysctl kernel.io_uring_disabled   # expect 0, 1 or 2")
                .facts(facts(Some(SysctlValue::Text(v)))),
        },
    }
}

fn memlock(caps: &Result<KernelCaps, String>) -> Check {
    let id = "kernel.memlock";
    let Ok(caps) = caps else {
        return Check::skip(id, "io_uring unusable: memlock not judged");
    };
    let limit = caps.memlock_limit;
    let facts = MemlockFacts { memlock_limit: limit, cap_ipc_lock: caps.cap_ipc_lock, wanted: MEMLOCK_WANTED };
    let shown = limit.map_or("unlimited".into(), |l| format!("{} KiB", l >> 10));
    if caps.cap_ipc_lock {
        Check::pass(id, format!("RLIMIT_MEMLOCK {shown}, but CAP_IPC_LOCK lifts it")).facts(facts)
    } else if caps.memlock_allows(MEMLOCK_WANTED) {
        Check::pass(id, format!("RLIMIT_MEMLOCK {shown}: room for buffer rings and a 64 MiB UMEM")).facts(facts)
    } else {
        Check::warn(
            id,
            format!(
                "RLIMIT_MEMLOCK {shown}: registered buffers, many buffer rings or a 64 MiB AF_XDP UMEM will not fit"
            ),
        )
        .fix("ulimit -l unlimited   # or LimitMEMLOCK=infinity (systemd), or memlock in /etc/security/limits.conf")
        .facts(facts)
    }
}

/// Governors of all CPUs, from /sys/devices/system/cpu/cpuN/cpufreq/scaling_governor.
/// (cpu, governor); an unreadable file is skipped.
pub(crate) fn governors(fs: &dyn HostFs) -> Vec<(u32, String)> {
    let mut out: Vec<(u32, String)> = fs
        .list("/sys/devices/system/cpu")
        .unwrap_or_default()
        .iter()
        .filter_map(|n| n.strip_prefix("cpu")?.parse::<u32>().ok())
        .filter_map(|cpu| {
            let g = read_trimmed(fs, &format!("/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_governor")).ok()?;
            (!g.is_empty()).then_some((cpu, g))
        })
        .collect();
    out.sort();
    out
}

fn governor(fs: &dyn HostFs) -> Check {
    let id = "cpu.governor";
    let govs = governors(fs);
    if govs.is_empty() {
        return Check::pass(id, "no cpufreq driver (typical of VMs: the hypervisor sets the clock)")
            .facts(GovernorFacts { governors: Default::default() });
    }
    let slow: Vec<u32> = govs.iter().filter(|(_, g)| g != "performance").map(|(c, _)| *c).collect();
    let names: std::collections::BTreeSet<&str> = govs.iter().map(|(_, g)| g.as_str()).collect();
    let facts = GovernorFacts { governors: govs.iter().map(|(c, g)| (c.to_string(), g.clone())).collect() };
    if slow.is_empty() {
        Check::pass(id, format!("all {} CPUs on the performance governor", govs.len())).facts(facts)
    } else {
        let names: Vec<&str> = names.into_iter().collect();
        Check::warn(
            id,
            format!(
                "{} of {} CPUs not on 'performance' ({}): clocks ramp up late and CPU per byte varies run to run",
                slow.len(),
                govs.len(),
                names.join(", ")
            ),
        )
        .fix("cpupower frequency-set -g performance   # or scripts/tune.sh apply")
        .facts(facts)
    }
}

#[cfg(test)]
mod tests {
    use super::super::fake::FakeFs;
    use super::super::testctx;
    use super::super::Status;
    use super::*;

    #[test]
    fn releases() {
        assert_eq!(parse_release("6.18.0"), Some((6, 18)));
        assert_eq!(parse_release("5.15.0-91-generic\n"), Some((5, 15)));
        assert_eq!(parse_release("6.1.0-27-cloud-amd64"), Some((6, 1)));
        assert_eq!(parse_release("linux"), None);
        assert_eq!(parse_release("6"), None);
        assert_eq!(parse_release(""), None);
    }

    #[test]
    fn version_judgements() {
        let caps = Ok(testctx::caps());
        assert_eq!(version(Some("6.18.0"), &caps).status, Status::Pass);
        let old = version(Some("6.1.0-27-cloud-amd64"), &caps);
        assert_eq!(old.status, Status::Warn);
        assert!(old.summary.contains("recv/send bundles (6.10)"), "{}", old.summary);
        assert_eq!(version(Some("5.15.0"), &caps).status, Status::Fail);
        assert_eq!(version(Some("garbage"), &caps).status, Status::Warn);
        assert_eq!(version(None, &caps).status, Status::Skip);
        let broken = version(Some("6.18.0"), &Err("io_uring is disabled".into()));
        assert_eq!(broken.status, Status::Fail);
        assert!(broken.summary.contains("io_uring is disabled"));
    }

    #[test]
    fn io_uring_disabled_values() {
        let at = |v: &str| io_uring_disabled(&FakeFs::new(&[("/proc/sys/kernel/io_uring_disabled", v)]));
        assert_eq!(at("0\n").status, Status::Pass);
        assert_eq!(at("1\n").status, Status::Warn);
        let off = at("2\n");
        assert_eq!(off.status, Status::Fail);
        assert_eq!(off.fix.as_deref(), Some("sysctl -w kernel.io_uring_disabled=0"));
        assert_eq!(at("x\n").status, Status::Warn, "garbled");
        assert_eq!(io_uring_disabled(&FakeFs::default()).status, Status::Pass, "absent before 6.6");
    }

    #[test]
    fn memlock_limits() {
        let mut caps = testctx::caps();
        assert_eq!(memlock(&Ok(caps.clone())).status, Status::Pass, "root with CAP_IPC_LOCK");
        caps.cap_ipc_lock = false;
        let low = memlock(&Ok(caps.clone()));
        assert_eq!(low.status, Status::Warn);
        assert!(low.summary.contains("8192 KiB"), "{}", low.summary);
        caps.memlock_limit = None;
        assert_eq!(memlock(&Ok(caps)).status, Status::Pass, "unlimited");
        assert_eq!(memlock(&Err("x".into())).status, Status::Skip);
    }

    #[test]
    fn governors_from_sysfs() {
        let base = "/sys/devices/system/cpu";
        let vm = FakeFs::new(&[(&format!("{base}/cpu0/topology/core_id"), "0"), (&format!("{base}/online"), "0-1")]);
        assert_eq!(governor(&vm).status, Status::Pass, "no cpufreq: a VM");
        let laptop = FakeFs::new(&[
            (&format!("{base}/cpu0/cpufreq/scaling_governor"), "powersave\n"),
            (&format!("{base}/cpu1/cpufreq/scaling_governor"), "performance\n"),
            (&format!("{base}/cpufreq/policy0/x"), "ignored"),
        ])
        .unreadable(&format!("{base}/cpu2/cpufreq/scaling_governor"), libc::EACCES);
        assert_eq!(governors(&laptop), vec![(0, "powersave".into()), (1, "performance".into())]);
        let c = governor(&laptop);
        assert_eq!(c.status, Status::Warn);
        assert!(c.summary.starts_with("1 of 2 CPUs"), "{}", c.summary);
        let tuned = FakeFs::new(&[(&format!("{base}/cpu0/cpufreq/scaling_governor"), "performance\n")]);
        assert_eq!(governor(&tuned).status, Status::Pass);
    }
}
