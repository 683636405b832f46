//! What this kernel and process can do, found at run time (probe, never assume: distribution
//! kernels backport and disable features, so a version number proves nothing).
//!
//! Everything the engine relies on is checked here once, before a test starts, so that a
//! missing feature becomes one clear sentence naming the fix instead of an EINVAL deep inside
//! a worker thread.

use crate::base::error::{Error, Result};
use io_uring::{opcode, IoUring, Probe};
use serde::{Deserialize, Serialize};
use std::fs;

/// The io_uring and memory facts that decide how a test runs.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct KernelCaps {
    pub kernel_release: String,
    /// `kernel.io_uring_disabled`: 0 enabled, 1 restricted to a group, 2 disabled.
    pub io_uring_disabled: Option<u32>,
    pub send_zc: bool,
    pub recv: bool,
    pub recv_zc: bool,
    /// `IORING_FEAT_RECVSEND_BUNDLE`: receive several buffers per completion.
    pub recvsend_bundle: bool,
    /// `IORING_FEAT_MIN_TIMEOUT` (6.12): a wait can ask for several completions with a bound.
    pub min_wait_timeout: bool,
    /// `IORING_SETUP_DEFER_TASKRUN` + `SINGLE_ISSUER` accepted.
    pub defer_taskrun: bool,
    /// RLIMIT_MEMLOCK soft limit in bytes; `None` means unlimited.
    pub memlock_limit: Option<u64>,
    /// CAP_IPC_LOCK lifts the memlock accounting of pinned io_uring memory.
    pub cap_ipc_lock: bool,
    /// Why this host makes no MPTCP sockets (`net.mptcp.enabled = 0`, no MPTCP in the
    /// kernel); absent when it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mptcp_unavailable: Option<String>,
}

impl KernelCaps {
    /// Probes the running kernel. Fails only when io_uring cannot be used at all. The front
    /// end probes once per command and carries the value in the run's options
    /// (`SendOptions::kernel`, `ReceiverConfig::kernel`, `PeerRecvOptions::kernel`), so a
    /// sweep, search or experiment probes once for all its runs.
    ///
    /// The probe rings are made and dropped on a thread of their own: a ring's teardown
    /// (a kernel worker, milliseconds later) signals each task that used it with task work,
    /// which makes that task's next timed socket read fail with EINTR. The caller, often a
    /// front end about to read its control connection, is kept out of it.
    pub fn detect() -> Result<Self> {
        std::thread::scope(|s| s.spawn(Self::detect_here).join())
            .unwrap_or_else(|_| Err(Error::unsupported("the io_uring probe thread panicked")))
    }

    fn detect_here() -> Result<Self> {
        let io_uring_disabled = read_u32("/proc/sys/kernel/io_uring_disabled");
        let ring = IoUring::new(8).map_err(|e| explain_ring_error(e, io_uring_disabled))?;
        let mut probe = Probe::new();
        ring.submitter()
            .register_probe(&mut probe)
            .map_err(|e| Error::unsupported(format!("io_uring opcode probe failed ({e}): kernel older than 5.6")))?;
        let defer_taskrun = IoUring::<io_uring::squeue::Entry, io_uring::cqueue::Entry>::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .build(8)
            .is_ok();
        let (memlock_limit, _) = memlock_rlimit();
        Ok(Self {
            kernel_release: fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_string(),
            io_uring_disabled,
            send_zc: probe.is_supported(opcode::SendZc::CODE),
            recv: probe.is_supported(opcode::Recv::CODE),
            recv_zc: probe.is_supported(opcode::RecvZc::CODE),
            recvsend_bundle: ring.params().is_feature_recvsend_bundle(),
            min_wait_timeout: ring.params().is_feature_min_timeout(),
            defer_taskrun,
            memlock_limit,
            cap_ipc_lock: has_cap_ipc_lock(),
            mptcp_unavailable: crate::sys::mptcp::probe().err(),
        })
    }

    /// Checks that the opcodes a TCP stream test needs are there.
    pub(crate) fn require_tcp_stream(&self) -> Result<()> {
        if !self.recv {
            return Err(Error::unsupported("io_uring lacks IORING_OP_RECV/SEND: kernel 5.6 or newer is needed"));
        }
        Ok(())
    }

    /// Refuses `-m/--mptcp` on a host without MPTCP, with the reason.
    pub(crate) fn require_mptcp(&self) -> Result<()> {
        match &self.mptcp_unavailable {
            Some(why) => Err(Error::unsupported(format!("-m/--mptcp: {why}"))),
            None => Ok(()),
        }
    }

    /// Whether `bytes` of pinned memory (registered buffers, buffer rings) fit the memlock limit.
    pub(crate) fn memlock_allows(&self, bytes: u64) -> bool {
        self.cap_ipc_lock || self.memlock_limit.is_none_or(|limit| bytes <= limit)
    }
}

fn explain_ring_error(err: std::io::Error, disabled: Option<u32>) -> Error {
    match err.raw_os_error() {
        Some(libc::ENOSYS) => Error::unsupported("this kernel has no io_uring (ENOSYS): Linux 5.19 or newer is needed"),
        Some(libc::EPERM) | Some(libc::EACCES) => Error::unsupported(match disabled {
            Some(2) => "io_uring is disabled (kernel.io_uring_disabled=2): run `sysctl -w kernel.io_uring_disabled=0`".to_string(),
            Some(1) => "io_uring is restricted (kernel.io_uring_disabled=1): run as root, join kernel.io_uring_group, or `sysctl -w kernel.io_uring_disabled=0`".to_string(),
            _ => format!("io_uring_setup refused ({err}): a seccomp profile (containers) may block it"),
        }),
        Some(libc::ENOMEM) => Error::unsupported(format!(
            "io_uring_setup failed with ENOMEM: raise RLIMIT_MEMLOCK (`ulimit -l unlimited`) ({err})"
        )),
        _ => Error::unsupported(format!("io_uring_setup failed: {err}")),
    }
}

fn read_u32(path: &str) -> Option<u32> {
    fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// RLIMIT_MEMLOCK as (soft, hard); `None` = unlimited.
pub(crate) fn memlock_rlimit() -> (Option<u64>, Option<u64>) {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes into the rlimit struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) } != 0 {
        return (None, None);
    }
    let conv = |v: libc::rlim_t| {
        if v == libc::RLIM_INFINITY {
            None
        } else {
            Some(v)
        }
    };
    (conv(lim.rlim_cur), conv(lim.rlim_max))
}

/// CAP_IPC_LOCK in the effective set, read from /proc/self/status.
fn has_cap_ipc_lock() -> bool {
    const CAP_IPC_LOCK: u32 = 14;
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| parse_cap_eff(&s))
        .is_some_and(|caps| caps & (1u64 << CAP_IPC_LOCK) != 0)
}

fn parse_cap_eff(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("CapEff:"))?;
    u64::from_str_radix(line["CapEff:".len()..].trim(), 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cap_eff_parsing() {
        let status = "Name:\tx\nCapInh:\t0000000000000000\nCapEff:\t000001ffffffffff\n";
        assert_eq!(parse_cap_eff(status), Some(0x1ff_ffff_ffff));
        assert_eq!(parse_cap_eff("CapEff:\tzz\n"), None, "malformed hex is not a capability set");
        assert_eq!(parse_cap_eff(""), None);
    }

    #[test]
    fn this_kernel_has_what_the_tcp_engine_needs() {
        let caps = KernelCaps::detect().expect("io_uring must work on the CI machine");
        caps.require_tcp_stream().expect("RECV/SEND opcodes");
        assert!(caps.send_zc, "Linux 6.18 has SEND_ZC");
        assert!(caps.recvsend_bundle, "Linux 6.18 has IORING_FEAT_RECVSEND_BUNDLE");
    }

    #[test]
    fn memlock_check() {
        let caps = KernelCaps { memlock_limit: Some(8 << 20), cap_ipc_lock: false, ..KernelCaps::detect().unwrap() };
        assert!(caps.memlock_allows(1 << 20));
        assert!(!caps.memlock_allows(64 << 20), "64 MiB does not fit an 8 MiB limit without CAP_IPC_LOCK");
        let root = KernelCaps { cap_ipc_lock: true, ..caps };
        assert!(root.memlock_allows(64 << 20), "CAP_IPC_LOCK lifts the limit");
    }
}
