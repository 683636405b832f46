//! io_uring zero-copy receive (zcrx, Linux 6.15+): the NIC writes TCP payload straight into
//! memory this process registered, and `RECV_ZC` completions say where it landed.
//!
//! Set-up, per receiving thread: a ring with single issuer, DEFER_TASKRUN and 32-byte CQEs
//! (the second half of each CQE carries the payload's offset), an *area* of anonymous memory
//! the NIC's page pool hands out, and a *refill ring* through which the consumer returns
//! pieces of the area once it is done with them. Registration binds all of that to one
//! hardware receive queue ([`ZcrxRing::register`]).
//!
//! It only works on NICs whose driver implements the queue API with TCP header/data split
//! (mlx5, bnxt, gve DQO-RDA on 6.18+), with that queue taken out of RSS and the test's flows
//! steered to it. Everything else (veth, loopback, virtio_net) answers EOPNOTSUPP, which
//! [`probe`] turns into the list of prerequisites.

use crate::base::error::{Error, Result};
use crate::uring::ring::AlignedBuf;
use io_uring::types::{io_uring_region_desc, io_uring_zcrx_area_reg, io_uring_zcrx_ifq_reg, io_uring_zcrx_rqe};
use io_uring::{cqueue, squeue, IoUring};
use std::sync::atomic::{AtomicU32, Ordering};

/// Zero-copy receive into memory this process registered, from NIC receive queues
/// `first_queue..` of `iface` (one per receiving thread).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZcRx {
    pub iface: String,
    pub ifindex: u32,
    pub first_queue: u32,
}

/// Memory registered per receive queue for the NIC to write into.
pub(crate) const AREA_BYTES: usize = 64 << 20;
/// Refill ring entries (the kernel may round it).
pub(crate) const RQ_ENTRIES: u32 = 4096;
/// Offsets in a zcrx CQE carry the area id above this bit.
const AREA_SHIFT: u32 = io_uring::types::IORING_ZCRX_AREA_SHIFT;
const AREA_MASK: u64 = !((1u64 << AREA_SHIFT) - 1);

/// A ring bound to one NIC receive queue for zero-copy receive. Field order is drop order:
/// the ring (and with it the registration) goes before the memory it points at.
pub(crate) struct ZcrxRing {
    pub ring: IoUring<squeue::Entry, cqueue::Entry32>,
    _area: AlignedBuf,
    _region: AlignedBuf,
    /// `zcrx_ifq_idx` for `RECV_ZC`.
    pub ifq_id: u32,
    area_token: u64,
    rq_tail: *const AtomicU32,
    rqes: *mut io_uring_zcrx_rqe,
    rq_mask: u32,
    /// Refill entries written but not yet published.
    tail: u32,
}

impl ZcrxRing {
    /// Registers `AREA_BYTES` of memory and a refill ring on receive queue `rxq` of
    /// interface `ifindex`. The error is the kernel's errno, for [`explain`].
    pub(crate) fn register(ifindex: u32, rxq: u32, entries: u32) -> std::result::Result<Self, std::io::Error> {
        let ring = IoUring::<squeue::Entry, cqueue::Entry32>::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .setup_cqsize(entries * 4)
            .build(entries)?;
        let area = AlignedBuf::new(AREA_BYTES).map_err(|_| std::io::Error::from_raw_os_error(libc::ENOMEM))?;
        let page = 4096usize;
        let region_len = (page + RQ_ENTRIES as usize * std::mem::size_of::<io_uring_zcrx_rqe>()).next_multiple_of(page);
        let region = AlignedBuf::new(region_len).map_err(|_| std::io::Error::from_raw_os_error(libc::ENOMEM))?;
        // SAFETY: all-zero is valid for these plain kernel ABI structs.
        let mut area_reg: io_uring_zcrx_area_reg = unsafe { std::mem::zeroed() };
        area_reg.addr = area.as_ptr() as u64;
        area_reg.len = area.len() as u64;
        // SAFETY: as above.
        let mut region_desc: io_uring_region_desc = unsafe { std::mem::zeroed() };
        region_desc.user_addr = region.as_ptr() as u64;
        region_desc.size = region.len() as u64;
        region_desc.flags = io_uring::types::IORING_MEM_REGION_TYPE_USER;
        // SAFETY: as above.
        let mut reg: io_uring_zcrx_ifq_reg = unsafe { std::mem::zeroed() };
        reg.if_idx = ifindex;
        reg.if_rxq = rxq;
        reg.rq_entries = RQ_ENTRIES;
        reg.area_ptr = (&mut area_reg as *mut io_uring_zcrx_area_reg) as u64;
        reg.region_ptr = (&mut region_desc as *mut io_uring_region_desc) as u64;
        ring.submitter().register_ifq(&reg)?;
        // The kernel wrote the offsets, the id and the area token back through the pointers:
        // read them as memory it changed.
        // SAFETY: both structs are live locals the kernel finished writing.
        let (reg, area_reg) = unsafe { (std::ptr::read_volatile(&reg), std::ptr::read_volatile(&area_reg)) };
        let base = region.as_ptr();
        let rq_entries = reg.rq_entries.max(1);
        Ok(Self {
            ring,
            ifq_id: reg.zcrx_id,
            area_token: area_reg.rq_area_token,
            // SAFETY: offsets the kernel gave inside the region it accepted.
            rq_tail: unsafe { base.add(reg.offsets.tail as usize) }.cast(),
            // SAFETY: as above.
            rqes: unsafe { base.add(reg.offsets.rqes as usize) }.cast(),
            rq_mask: rq_entries - 1,
            tail: 0,
            _area: area,
            _region: region,
        })
    }

    /// Hands a received piece (`off` from its CQE, `len` its result) back to the NIC.
    pub(crate) fn refill(&mut self, off: u64, len: u32) {
        let idx = (self.tail & self.rq_mask) as usize;
        // SAFETY: idx is inside the rq_entries the kernel sized; the kernel only reads entries
        // below the published tail.
        unsafe {
            self.rqes.add(idx).write(io_uring_zcrx_rqe { off: (off & !AREA_MASK) | self.area_token, len, __pad: 0 })
        };
        self.tail = self.tail.wrapping_add(1);
    }

    /// Publishes the refill entries written since the last call.
    pub(crate) fn publish(&mut self) {
        // SAFETY: the tail word lives in the registered region for the ring's lifetime.
        unsafe { (*self.rq_tail).store(self.tail, Ordering::Release) };
    }
}

/// Turns a registration errno into the missing prerequisite, naming the interface, its
/// driver and the commands that provide what is missing.
pub(crate) fn explain(z: &ZcRx, rxq: u32, err: &std::io::Error) -> Error {
    let driver = crate::sys::hostinfo::ifstats::LinkInfo::read(&z.iface)
        .ok()
        .and_then(|l| l.driver)
        .unwrap_or_else(|| "unknown driver".into());
    let iface = &z.iface;
    match err.raw_os_error() {
        Some(libc::EOPNOTSUPP) => Error::unsupported(format!(
            "--zc-rx: {iface} ({driver}) cannot receive zero-copy: its driver lacks the netdev queue API with \
             TCP header/data split (EOPNOTSUPP). zcrx needs a NIC such as mlx5, bnxt or gve DQO-RDA (Linux 6.18+), \
             with `ethtool -G {iface} tcp-data-split on`, a receive queue kept out of RSS (use the last one: \
             `ethtool -X {iface} equal <queues - 1>`) and the test's flows steered to it \
             (`ethtool -N {iface} flow-type tcp4 dst-port 5300 action {rxq}`)"
        )),
        Some(libc::ENODEV) => Error::unsupported(format!("--zc-rx: interface {iface} disappeared (ENODEV)")),
        Some(libc::EINVAL) | Some(libc::ERANGE) => Error::unsupported(format!(
            "--zc-rx: the kernel refused receive queue {rxq} of {iface} ({driver}): {err}. The queue must exist \
             (`ethtool -l {iface}`) and header split must be on (`ethtool -G {iface} tcp-data-split on`)"
        )),
        Some(libc::EPERM) | Some(libc::EACCES) => {
            Error::unsupported(format!("--zc-rx: registering a NIC queue needs CAP_NET_ADMIN ({err})"))
        }
        Some(libc::ENOMEM) => Error::unsupported(format!(
            "--zc-rx: could not pin the {} MiB receive area ({err}): raise RLIMIT_MEMLOCK (ulimit -l) or run with CAP_IPC_LOCK",
            AREA_BYTES >> 20
        )),
        Some(libc::EEXIST) | Some(libc::EBUSY) => Error::unsupported(format!(
            "--zc-rx: receive queue {rxq} of {iface} is already bound to another zero-copy consumer ({err})"
        )),
        _ => Error::unsupported(format!(
            "--zc-rx: registering receive queue {rxq} of {iface} ({driver}) failed: {err}; zero-copy receive needs \
             Linux 6.15+ built with CONFIG_IO_URING_ZCRX"
        )),
    }
}

/// Checks that zero-copy receive works on the first queue of `z` by registering it once.
pub fn probe(z: &ZcRx) -> Result<()> {
    let caps = crate::sys::probe::KernelCaps::detect()?;
    if !caps.recv_zc {
        // A newer kernel alone would not do on most NICs: say so now, not after the upgrade.
        let driver = crate::sys::hostinfo::ifstats::LinkInfo::read(&z.iface).ok().and_then(|l| l.driver);
        let nic = match driver {
            Some(d) if crate::sys::hostinfo::ifstats::ZCRX_DRIVERS.contains(&d.as_str()) => String::new(),
            Some(d) => format!(
                "; and {} ({d}) could not use it either: its driver lacks the netdev queue API with TCP \
                 header/data split (zcrx needs mlx5, bnxt or gve DQO-RDA)",
                z.iface
            ),
            None => format!("; {} has no driver to check (not a NIC)", z.iface),
        };
        return Err(Error::unsupported(format!(
            "--zc-rx: this kernel ({}) lacks IORING_OP_RECV_ZC (Linux 6.15+ with CONFIG_IO_URING_ZCRX){nic}",
            caps.kernel_release
        )));
    }
    ZcrxRing::register(z.ifindex, z.first_queue, 64).map(drop).map_err(|e| explain(z, z.first_queue, &e))
}

/// Splits a zcrx CQE's offset into the byte offset inside the area.
#[cfg(test)]
pub(crate) fn area_offset(off: u64) -> u64 {
    off & !AREA_MASK
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_refused_with_its_prerequisites() {
        let z = crate::uring::fastpath::parse_zc_rx("lo").unwrap();
        let e = probe(&z).unwrap_err();
        // lo has no header split, so a kernel with the opcode answers EOPNOTSUPP; an older one
        // lacks the opcode.
        assert!(e.message.contains("tcp-data-split") || e.message.contains("RECV_ZC"), "names what is missing: {e}");
        assert_ne!(e.exit_code(), 0);
    }

    #[test]
    fn area_offsets_drop_the_area_id() {
        assert_eq!(area_offset((3u64 << AREA_SHIFT) | 0x1234), 0x1234);
        assert_eq!(area_offset(0x1234), 0x1234);
    }
}
