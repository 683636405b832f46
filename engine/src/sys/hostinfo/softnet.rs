//! Per-CPU receive-path counters from /proc/net/softnet_stat.
//!
//! When the receive softirq cannot keep up, the kernel says so here before anywhere else:
//! `dropped` counts packets thrown away because a CPU's backlog queue was full, and
//! `time_squeeze` counts NAPI rounds that ran out of budget or time with work left. Either
//! growing during a test means the receiving CPU, not the wire, was the bottleneck.
//!
//! One line per online CPU, columns in hex. Since Linux 5.10 the 13th column is the CPU's
//! id (lines skip offline CPUs, so the line number is not the id); older kernels lack it and
//! the line number is used. The counters are 32-bit and wrap, which [`SoftnetCounters::delta`]
//! allows for. They are global to the host, whatever namespace reads them.

use serde::Serialize;

use crate::base::error::{Error, Result};

const PATH: &str = "/proc/net/softnet_stat";
/// Column of the CPU id (0-based), on kernels that print it.
const CPU_ID_COLUMN: usize = 12;

/// One CPU's softnet counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct SoftnetCounters {
    pub cpu: u32,
    /// Packets the receive softirq handled on this CPU.
    pub processed: u32,
    /// Packets dropped because this CPU's backlog was full (`netdev_max_backlog`).
    pub dropped: u32,
    /// NAPI rounds cut short with work left (`netdev_budget` / `netdev_budget_usecs`).
    pub time_squeeze: u32,
}

/// The sum over CPUs, in 64 bits so it cannot wrap.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct SoftnetTotals {
    pub processed: u64,
    pub dropped: u64,
    pub time_squeeze: u64,
}

impl SoftnetCounters {
    /// What changed on one CPU from `before` to `after`, allowing for one wrap of the 32-bit
    /// counters (at a few million packets a second they wrap about every quarter hour).
    pub fn delta(before: &Self, after: &Self) -> Self {
        Self {
            cpu: after.cpu,
            processed: after.processed.wrapping_sub(before.processed),
            dropped: after.dropped.wrapping_sub(before.dropped),
            time_squeeze: after.time_squeeze.wrapping_sub(before.time_squeeze),
        }
    }
}

/// Reads /proc/net/softnet_stat.
pub fn read() -> Result<Vec<SoftnetCounters>> {
    let text = std::fs::read_to_string(PATH).map_err(|e| Error::io(format!("reading {PATH}"), e))?;
    parse_softnet_stat(&text)
}

/// Parses the text of /proc/net/softnet_stat.
pub(crate) fn parse_softnet_stat(text: &str) -> Result<Vec<SoftnetCounters>> {
    let mut out = Vec::new();
    for (line_no, line) in text.lines().filter(|l| !l.trim().is_empty()).enumerate() {
        let cols = line
            .split_whitespace()
            .map(|c| u32::from_str_radix(c, 16).ok())
            .collect::<Option<Vec<u32>>>()
            .ok_or_else(|| {
                Error::unsupported(format!("{PATH}: line {} has a column that is not a 32-bit hex number", line_no + 1))
            })?;
        if cols.len() < 3 {
            return Err(Error::unsupported(format!(
                "{PATH}: line {} has {} columns, expected at least 3",
                line_no + 1,
                cols.len()
            )));
        }
        let cpu = cols.get(CPU_ID_COLUMN).copied().unwrap_or(line_no as u32);
        out.push(SoftnetCounters { cpu, processed: cols[0], dropped: cols[1], time_squeeze: cols[2] });
    }
    if out.is_empty() {
        return Err(Error::unsupported(format!("{PATH}: no CPU lines")));
    }
    Ok(out)
}

/// Per-CPU changes, for the CPUs present in both snapshots (a CPU that went on- or offline
/// in between has no meaningful difference).
pub(crate) fn delta_per_cpu(before: &[SoftnetCounters], after: &[SoftnetCounters]) -> Vec<SoftnetCounters> {
    after.iter().filter_map(|a| before.iter().find(|b| b.cpu == a.cpu).map(|b| SoftnetCounters::delta(b, a))).collect()
}

/// The sum over CPUs.
pub fn sum(cpus: &[SoftnetCounters]) -> SoftnetTotals {
    cpus.iter().fold(SoftnetTotals::default(), |t, c| SoftnetTotals {
        processed: t.processed + u64::from(c.processed),
        dropped: t.dropped + u64::from(c.dropped),
        time_squeeze: t.time_squeeze + u64::from(c.time_squeeze),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Captured on Linux 6.18, 2 vCPUs, after a veth benchmark (15 columns: the CPU id is
    /// column 13, then the input and process queue lengths).
    const CAPTURED: &str = "\
0318dcb9 00000000 00000001 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000
0157be36 00000000 00000002 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000001 00000000 00000000
";

    /// The pre-5.10 layout (11 columns, no CPU id), here for CPUs 0 and 1.
    const OLD_LAYOUT: &str = "\
0000a000 00000003 00000010 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000
0000b000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000
";

    #[test]
    fn captured_sample() {
        let cpus = parse_softnet_stat(CAPTURED).unwrap();
        assert_eq!(
            cpus,
            [
                SoftnetCounters { cpu: 0, processed: 0x0318_dcb9, dropped: 0, time_squeeze: 1 },
                SoftnetCounters { cpu: 1, processed: 0x0157_be36, dropped: 0, time_squeeze: 2 },
            ]
        );
    }

    #[test]
    fn cpu_id_comes_from_its_column_when_cpus_are_offline() {
        // CPU 1 offline: the second line is CPU 2.
        let text = "00000001 00000000 00000000 0 0 0 0 0 0 0 0 00000000 00000000\n\
                    00000002 00000000 00000000 0 0 0 0 0 0 0 0 00000000 00000002\n";
        let ids: Vec<u32> = parse_softnet_stat(text).unwrap().iter().map(|c| c.cpu).collect();
        assert_eq!(ids, [0, 2], "the id column wins over the line number");
        let old: Vec<u32> = parse_softnet_stat(OLD_LAYOUT).unwrap().iter().map(|c| c.cpu).collect();
        assert_eq!(old, [0, 1], "without an id column, the line number is the id");
    }

    #[test]
    fn delta_handles_wrap_and_missing_cpus() {
        let before = [
            SoftnetCounters { cpu: 0, processed: u32::MAX - 9, dropped: 1, time_squeeze: 0 },
            SoftnetCounters { cpu: 1, processed: 100, dropped: 0, time_squeeze: 0 },
        ];
        let after = [
            SoftnetCounters { cpu: 0, processed: 10, dropped: 4, time_squeeze: 2 },
            SoftnetCounters { cpu: 3, processed: 5, dropped: 0, time_squeeze: 0 },
        ];
        let d = delta_per_cpu(&before, &after);
        assert_eq!(d, [SoftnetCounters { cpu: 0, processed: 20, dropped: 3, time_squeeze: 2 }], "wrap; CPU 3 is new");
        let t = sum(&parse_softnet_stat(CAPTURED).unwrap());
        assert_eq!(t, SoftnetTotals { processed: 0x0318_dcb9 + 0x0157_be36, dropped: 0, time_squeeze: 3 });
    }

    #[test]
    fn malformed_samples_are_errors() {
        for (text, want) in [
            ("", "no CPU lines"),
            ("0318dcb9 zz 00000001\n", "32-bit hex"),
            ("0318dcb9 00000000\n", "2 columns"),
            ("1ffffffff 0 0\n", "32-bit hex"),
        ] {
            let err = parse_softnet_stat(text).unwrap_err();
            assert!(err.message.contains(want), "{text:?}: expected {want:?} in {err}");
        }
    }

    #[test]
    fn live_read_has_a_line_per_online_cpu() {
        let cpus = read().expect("/proc/net/softnet_stat is readable");
        // SAFETY: sysconf has no preconditions.
        let (online, configured) =
            unsafe { (libc::sysconf(libc::_SC_NPROCESSORS_ONLN), libc::sysconf(libc::_SC_NPROCESSORS_CONF)) };
        assert_eq!(cpus.len() as i64, online, "one line per CPU sysconf counts online: {cpus:?}");
        let ids: Vec<u32> = cpus.iter().map(|c| c.cpu).collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "ids increase: {ids:?}");
        assert!(ids.iter().all(|&id| i64::from(id) < configured), "ids are CPUs of this machine: {ids:?}");
    }
}
