//! Kernel fast paths a user turns on for a run: SQPOLL submission (`--sqpoll`), io_uring
//! NAPI busy polling (`--napi`) and zero-copy receive (`--zc-rx`).
//!
//! They are properties of the host's set-up, not of one test: the front end builds a
//! [`FastPaths`] from its flags, [`probe`]s it once before any ring exists, and hands the value
//! down with the options of the run. The queue placement carries it, every ring is built with
//! its ring part ([`FastPaths::ring`], passed to [`crate::uring::ring::build_ring`]), and the
//! placement line of every report says which are on, so a result is never read without knowing
//! how it was obtained.
//!
//! Zero-copy receive in particular needs a NIC with TCP header/data split, a dedicated receive
//! queue and flow steering (the kernel's Documentation/networking/iou-zcrx.rst): on veth and
//! loopback the kernel answers EOPNOTSUPP, and [`probe`] refuses with the exact missing
//! prerequisite instead of silently copying.

use crate::base::error::{Error, Result};
use crate::sys::sockopt::incoming_napi_id;
use crate::uring::ring::{register_napi, NapiPoll, RingPaths, SqPoll};
use crate::uring::zcrx::{ZcQueues, ZcRx};

/// The fast paths of a run. The default is none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FastPaths {
    pub sqpoll: Option<SqPoll>,
    pub napi: Option<NapiPoll>,
    pub zc_rx: Option<ZcRx>,
}

impl FastPaths {
    /// What every queue thread's ring is built with.
    pub fn ring(&self) -> RingPaths {
        RingPaths { sqpoll: self.sqpoll, napi: self.napi }
    }

    /// One clause for the placement line, or `None` when nothing is on.
    pub fn describe(&self) -> Option<String> {
        let mut parts = Vec::new();
        if let Some(s) = self.sqpoll {
            parts.push(format!("io_uring SQPOLL (kernel submission thread, idle {} ms)", s.idle_ms));
        }
        if let Some(n) = self.napi {
            parts.push(format!(
                "io_uring NAPI busy poll {} us{}",
                n.busy_poll_us,
                if n.prefer_busy_poll { ", preferred over interrupts" } else { "" }
            ));
        }
        if let Some(z) = &self.zc_rx {
            parts.push(format!("zero-copy receive (RECV_ZC) on {} {}", z.iface, z.describe_queues()));
        }
        (!parts.is_empty()).then(|| parts.join(", "))
    }

    /// One sentence on the NAPI ids of a test's sockets, for the report's path; `None` when
    /// NAPI busy polling is off.
    pub(crate) fn napi_evidence(&self, fds: &[std::os::fd::RawFd]) -> Option<String> {
        self.napi?;
        let ids: Vec<u32> = fds.iter().filter_map(|&fd| incoming_napi_id(fd)).filter(|&id| id != 0).collect();
        Some(if ids.is_empty() {
            format!(
                "NAPI busy poll on, but none of the {} sockets has a NAPI id (no NIC queue on this path)",
                fds.len()
            )
        } else {
            let mut distinct = ids.clone();
            distinct.sort_unstable();
            distinct.dedup();
            format!("{} of {} sockets on NAPI ids {:?}", ids.len(), fds.len(), distinct)
        })
    }
}

/// Checks that the kernel (and for `--zc-rx`, the NIC) provides every path in `paths`. The
/// front end calls it once, before any ring is built; a path that cannot be provided is an
/// error that names what is missing. `--zc-rx IFACE` gets its queues here: those the NIC's
/// RSS leaves out, narrowed to `rx_queues` (`recv --queues`) when given.
pub fn probe(paths: &mut FastPaths, rx_queues: Option<&[u32]>) -> Result<()> {
    if paths.sqpoll.is_some() || paths.napi.is_some() {
        probe_ring_features(paths)?;
    }
    if let Some(z) = paths.zc_rx.as_mut() {
        crate::uring::zcrx::probe(z, rx_queues)?;
    }
    Ok(())
}

/// Builds one throw-away ring with the requested SQPOLL/NAPI settings, so a kernel without
/// them is reported before a test starts.
fn probe_ring_features(paths: &FastPaths) -> Result<()> {
    let mut builder = io_uring::IoUring::<io_uring::squeue::Entry, io_uring::cqueue::Entry>::builder();
    if let Some(s) = paths.sqpoll {
        builder.setup_sqpoll(s.idle_ms);
    }
    let ring = builder.build(8).map_err(|e| {
        Error::unsupported(format!(
            "--sqpoll: the kernel refused an SQPOLL ring ({e}); it needs Linux 5.11+ for unprivileged use, \
             and kernel.io_uring_disabled must be 0"
        ))
    })?;
    if let Some(n) = paths.napi {
        register_napi(&ring, n)?;
    }
    Ok(())
}

/// Parses `--zc-rx IFACE[:QUEUE]`. Without a queue, [`probe`] chooses them from the NIC's
/// RSS indirection table.
pub fn parse_zc_rx(arg: &str) -> Result<ZcRx> {
    let (iface, queues) = match arg.rsplit_once(':') {
        Some((i, q)) => {
            let q = q.parse().map_err(|_| Error::usage(format!("--zc-rx '{arg}': expected IFACE or IFACE:QUEUE")))?;
            (i, ZcQueues::From(q))
        }
        None => (arg, ZcQueues::OutOfRss { queues: Vec::new(), rx_queues: 0 }),
    };
    if iface.is_empty() || iface.len() >= libc::IFNAMSIZ {
        return Err(Error::usage(format!("--zc-rx '{arg}': expected IFACE or IFACE:QUEUE")));
    }
    let name = std::ffi::CString::new(iface).map_err(|_| Error::usage(format!("--zc-rx '{arg}': bad name")))?;
    // SAFETY: a NUL-terminated name that lives across the call.
    let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if ifindex == 0 {
        return Err(Error::usage(format!("--zc-rx: no interface '{iface}' in this network namespace")));
    }
    Ok(ZcRx { iface: iface.to_string(), ifindex, queues })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describe_names_every_path_that_is_on() {
        assert_eq!(FastPaths::default().describe(), None, "nothing on: no clause");
        let all = FastPaths {
            sqpoll: Some(SqPoll { idle_ms: 100 }),
            napi: Some(NapiPoll { busy_poll_us: 50, prefer_busy_poll: true }),
            zc_rx: Some(ZcRx { iface: "eth0".into(), ifindex: 2, queues: ZcQueues::From(8) }),
        };
        let d = all.describe().unwrap();
        for needle in ["SQPOLL", "idle 100 ms", "NAPI busy poll 50 us", "RECV_ZC", "eth0 queue 8"] {
            assert!(d.contains(needle), "'{needle}' in '{d}'");
        }
    }

    #[test]
    fn zc_rx_arguments_are_checked() {
        let lo = parse_zc_rx("lo:3").unwrap();
        assert_eq!((lo.iface.as_str(), &lo.queues), ("lo", &ZcQueues::From(3)));
        assert!(lo.ifindex > 0);
        let auto = parse_zc_rx("lo").unwrap();
        assert_eq!(auto.queues, ZcQueues::OutOfRss { queues: vec![], rx_queues: 0 }, "chosen by probe, from RSS");
        for bad in ["", ":1", "lo:x", "no-such-if0", "a-name-far-too-long-for-linux"] {
            let e = parse_zc_rx(bad).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{bad}: {e}");
        }
    }

    #[test]
    fn sockets_off_any_nic_have_no_napi_id() {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        use std::os::fd::AsRawFd;
        assert_eq!(incoming_napi_id(s.as_raw_fd()), Some(0), "loopback has no NAPI instance");
    }
}
