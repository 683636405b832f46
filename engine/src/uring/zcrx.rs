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
use crate::sys::nic_topology::NicTopology;
use crate::uring::ring::AlignedBuf;
use io_uring::types::{io_uring_region_desc, io_uring_zcrx_area_reg, io_uring_zcrx_ifq_reg, io_uring_zcrx_rqe};
use io_uring::{cqueue, squeue, IoUring};
use std::sync::atomic::{AtomicU32, Ordering};

/// Zero-copy receive into memory this process registered, from NIC receive queues of `iface`
/// (one per receiving thread).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZcRx {
    pub iface: String,
    pub ifindex: u32,
    pub queues: ZcQueues,
}

/// Which receive queues the threads of a zero-copy receiver bind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ZcQueues {
    /// `--zc-rx IFACE:QUEUE`: thread *i* binds QUEUE + *i*; the user steers the flows there.
    From(u32),
    /// `--zc-rx IFACE`: the receive queues the RSS indirection table leaves out (of `rx_queues`
    /// in all), one per thread in order; empty until [`probe`] chooses them. RSS never maps a
    /// flow to them, so the receiver puts each flow on its thread's queue with an n-tuple rule.
    OutOfRss { queues: Vec<u32>, rx_queues: u32 },
}

impl ZcRx {
    /// The receive queue thread `thread` binds; None past the queues chosen out of RSS.
    pub fn queue_of_thread(&self, thread: u32) -> Option<u32> {
        match &self.queues {
            ZcQueues::From(first) => first.checked_add(thread),
            ZcQueues::OutOfRss { queues, .. } => queues.get(thread as usize).copied(),
        }
    }

    /// The queues chosen out of RSS (the receiver steers the flows with n-tuple rules), or
    /// None for an explicit `IFACE:QUEUE`.
    pub fn out_of_rss(&self) -> Option<&[u32]> {
        match &self.queues {
            ZcQueues::From(_) => None,
            ZcQueues::OutOfRss { queues, .. } => Some(queues),
        }
    }

    /// The queues chosen out of RSS that a test of `threads` receiving threads serves: one per
    /// thread, so that engine queue `q` (served by thread `q % threads`) aims at its thread's
    /// queue. None for an explicit `IFACE:QUEUE`.
    pub fn served_by(&self, threads: usize) -> Option<&[u32]> {
        self.out_of_rss().map(|q| &q[..q.len().min(threads)])
    }

    /// The queues in words, for the placement line: `queue 8+` or `queues 6, 7 (kept out of RSS)`.
    pub fn describe_queues(&self) -> String {
        match &self.queues {
            ZcQueues::From(first) => format!("queue {first}+"),
            ZcQueues::OutOfRss { queues, .. } => format!(
                "queue{} {} (kept out of RSS, flows put there by n-tuple rules)",
                if queues.len() == 1 { "" } else { "s" },
                queues.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
            ),
        }
    }

    /// Why a test with `threads` receiving threads cannot have a queue each, or None. Only
    /// queues chosen out of RSS are counted: an explicit `IFACE:QUEUE` trusts the user.
    pub fn too_few_queues(&self, threads: usize) -> Option<String> {
        let ZcQueues::OutOfRss { queues, rx_queues } = &self.queues else { return None };
        (threads > queues.len()).then(|| {
            let iface = &self.iface;
            format!(
                "--zc-rx {iface}: the test has {threads} receiving threads but only {} of {iface}'s {rx_queues} receive \
                 queues ({}) are kept out of RSS: keep {threads} out (`ethtool -X {iface} equal {}`, then restart recv) \
                 or send with fewer queues (-P {})",
                queues.len(),
                queues.iter().map(u32::to_string).collect::<Vec<_>>().join(", "),
                rx_queues.saturating_sub(threads as u32).max(1),
                queues.len()
            )
        })
    }
}

/// The receive queues of `topology` that its RSS indirection table leaves out (what `ethtool
/// -X IFACE equal N-1` does to the last), in order: the queues zero-copy receive may take,
/// since no flow reaches them by hashing. `wanted` (`recv --queues`) narrows them and must name
/// only such queues. The error is the one line `recv` refuses with, naming the `ethtool`
/// command that keeps queues out.
pub fn queues_out_of_rss(topology: &NicTopology, wanted: Option<&[u32]>) -> std::result::Result<Vec<u32>, String> {
    let iface = &topology.iface;
    let driver = topology.driver.as_deref().unwrap_or("unknown driver");
    let all: Vec<u32> = topology.rx.iter().map(|q| q.queue).collect();
    let n = all.len() as u32;
    let keep_out = if n < 2 {
        format!("add a receive queue and keep it out (`ethtool -L {iface} combined 2`, `ethtool -X {iface} equal 1`)")
    } else {
        format!("keep the last one out with `ethtool -X {iface} equal {}`", n - 1)
    };
    // A driver known not to do zcrx at all is named as such: keeping queues out would not help.
    let known = topology.driver.is_none() || crate::sys::hostinfo::ifstats::ZCRX_DRIVERS.contains(&driver);
    let cannot = if known {
        String::new()
    } else {
        format!(
            " ({driver} cannot receive zero-copy at all: it lacks the queue API with TCP header/data split that \
             zcrx needs, as in mlx5, bnxt or gve DQO-RDA)"
        )
    };
    let table = match topology.rss.as_ref().map(|r| r.indirection.as_slice()) {
        Some(t) if !t.is_empty() => t,
        _ => {
            return Err(format!(
                "--zc-rx {iface}: no receive queue is known to be kept out of RSS: {iface} ({driver}) reports no RSS \
                 indirection table{cannot}; on a NIC that has one, {keep_out}, or name the queue (--zc-rx {iface}:QUEUE)"
            ));
        }
    };
    let out: Vec<u32> = all.iter().copied().filter(|q| !table.contains(q)).collect();
    if let Some(list) = wanted {
        if let Some(q) = list.iter().find(|q| !out.contains(q)) {
            let why = if all.contains(q) { "RSS spreads flows over it" } else { "it has no such queue" };
            return Err(format!(
                "--zc-rx {iface}: recv --queues names rx queue {q}, but {why}; the queues kept out of RSS are [{}] \
                 ({keep_out})",
                out.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
            ));
        }
        return Ok(list.to_vec());
    }
    if out.is_empty() {
        return Err(format!(
            "--zc-rx {iface}: RSS spreads flows over all {n} receive queues of {iface} ({driver}){cannot}, none is kept \
             out for zero-copy receive: {keep_out} (one per receiving thread: equal N-k keeps k), or name the queue \
             (--zc-rx {iface}:QUEUE)"
        ));
    }
    Ok(out)
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
        // With queues chosen out of RSS, the receiver already keeps them out and steers the
        // flows: only header split is left to name.
        Some(libc::EOPNOTSUPP) if z.out_of_rss().is_some() => Error::unsupported(format!(
            "--zc-rx: {iface} ({driver}) cannot receive zero-copy on its rx queue {rxq}, kept out of RSS: its driver \
             lacks the netdev queue API with TCP header/data split (EOPNOTSUPP). zcrx needs a NIC such as mlx5, bnxt \
             or gve DQO-RDA (Linux 6.18+), with `ethtool -G {iface} tcp-data-split on`"
        )),
        Some(libc::EOPNOTSUPP) => Error::unsupported(format!(
            "--zc-rx: {iface} ({driver}) cannot receive zero-copy: its driver lacks the netdev queue API with \
             TCP header/data split (EOPNOTSUPP). zcrx needs a NIC such as mlx5, bnxt or gve DQO-RDA (Linux 6.18+), \
             with `ethtool -G {iface} tcp-data-split on`, a receive queue kept out of RSS (use the last one: \
             `ethtool -X {iface} equal <queues - 1>`, or let `--zc-rx {iface}` choose it) and the test's flows \
             steered to it (`ethtool -N {iface} flow-type tcp4 dst-port 5300 action {rxq}`)"
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
/// For `--zc-rx IFACE` it first chooses the queues out of RSS (`recv --queues` narrows them,
/// [`queues_out_of_rss`]) and checks that the NIC takes n-tuple rules, without which no flow
/// could reach them.
pub fn probe(z: &mut ZcRx, wanted: Option<&[u32]>) -> Result<()> {
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
    if let ZcQueues::OutOfRss { queues, rx_queues } = &mut z.queues {
        let mut topology = NicTopology::read(&z.iface)?;
        // Software devices have no driver link in sysfs; ethtool still names them (veth).
        if topology.driver.is_none() {
            topology.driver = crate::sys::ntuple::driver_name(&z.iface);
        }
        *queues = queues_out_of_rss(&topology, wanted).map_err(Error::unsupported)?;
        *rx_queues = topology.rx.len() as u32;
        if let Some(why) = crate::sys::ntuple::ntuple_unsupported(&z.iface) {
            return Err(Error::unsupported(format!(
                "--zc-rx {}: the flows cannot be put on queues kept out of RSS: {why}",
                z.iface
            )));
        }
    }
    let first = z.queue_of_thread(0).unwrap_or(0);
    ZcrxRing::register(z.ifindex, first, 64).map(drop).map_err(|e| explain(z, first, &e))
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
        let mut z = crate::uring::fastpath::parse_zc_rx("lo:0").unwrap();
        let e = probe(&mut z, None).unwrap_err();
        // lo has no header split, so a kernel with the opcode answers EOPNOTSUPP; an older one
        // lacks the opcode.
        assert!(e.message.contains("tcp-data-split") || e.message.contains("RECV_ZC"), "names what is missing: {e}");
        assert_ne!(e.exit_code(), 0);
    }

    /// A NIC of `rx` receive queues whose indirection table (`table`, repeated to 128 entries
    /// as drivers fill it) covers the queues listed; None: no table reported.
    fn nic(rx: u32, table: Option<&[u32]>) -> NicTopology {
        use crate::sys::nic_topology::{HashFunction, QueueInfo, Rss};
        NicTopology {
            iface: "eth1".into(),
            driver: Some("mlx5_core".into()),
            numa_node: Some(0),
            node_cpus: vec![0, 1, 2, 3, 4, 5, 6, 7],
            rx: (0..rx)
                .map(|q| QueueInfo {
                    queue: q,
                    napi_id: None,
                    irq: Some(40 + q),
                    irq_cpus: vec![q as usize],
                    xps_cpus: vec![],
                })
                .collect(),
            tx: vec![],
            rss: table.map(|t| Rss {
                hash_function: HashFunction::Toeplitz,
                key: vec![0x6d; 40],
                indirection: t.iter().copied().cycle().take(128).collect(),
            }),
            notes: vec![],
        }
    }

    #[test]
    fn the_queues_rss_leaves_out_are_chosen_in_order() {
        // `ethtool -X eth1 equal 6`: the table covers 0..=5, so 6 and 7 are free for zcrx.
        let t = nic(8, Some(&[0, 1, 2, 3, 4, 5]));
        assert_eq!(queues_out_of_rss(&t, None), Ok(vec![6, 7]));
        // `equal 7`: the last queue alone.
        assert_eq!(queues_out_of_rss(&nic(8, Some(&[0, 1, 2, 3, 4, 5, 6])), None), Ok(vec![7]));
        // A table with a hole (`ethtool -X eth1 weight 1 1 0 1`): the hole.
        assert_eq!(queues_out_of_rss(&nic(4, Some(&[0, 1, 3])), None), Ok(vec![2]));
        // recv --queues narrows them, to queues out of RSS only.
        assert_eq!(queues_out_of_rss(&t, Some(&[7])), Ok(vec![7]));
        let e = queues_out_of_rss(&t, Some(&[5, 7])).unwrap_err();
        assert!(e.contains("names rx queue 5, but RSS spreads flows over it") && e.contains("[6, 7]"), "{e}");
        let e = queues_out_of_rss(&t, Some(&[9])).unwrap_err();
        assert!(e.contains("it has no such queue"), "{e}");
    }

    #[test]
    fn no_queue_out_of_rss_is_refused_naming_the_ethtool_command() {
        let e = queues_out_of_rss(&nic(8, Some(&[0, 1, 2, 3, 4, 5, 6, 7])), None).unwrap_err();
        assert!(e.starts_with("--zc-rx eth1: RSS spreads flows over all 8 receive queues"), "{e}");
        assert!(e.contains("`ethtool -X eth1 equal 7`") && e.contains("--zc-rx eth1:QUEUE"), "{e}");
        let e = queues_out_of_rss(&nic(1, Some(&[0])), None).unwrap_err();
        assert!(e.contains("`ethtool -L eth1 combined 2`, `ethtool -X eth1 equal 1`"), "{e}");
        let e = queues_out_of_rss(&nic(8, None), None).unwrap_err();
        assert!(e.contains("reports no RSS indirection table") && e.contains("equal 7"), "{e}");
        assert!(!e.contains("cannot receive zero-copy at all"), "mlx5 can: {e}");
        let mut veth = nic(1, None);
        veth.driver = Some("veth".into());
        let e = queues_out_of_rss(&veth, None).unwrap_err();
        assert!(
            e.contains("eth1 (veth) reports no RSS indirection table (veth cannot receive zero-copy at all"),
            "{e}"
        );
        assert_eq!(e.lines().count(), 1, "one line: {e}");
    }

    #[test]
    fn threads_take_the_chosen_queues_one_each() {
        let auto =
            ZcRx { iface: "eth1".into(), ifindex: 3, queues: ZcQueues::OutOfRss { queues: vec![6, 7], rx_queues: 8 } };
        assert_eq!(
            (auto.queue_of_thread(0), auto.queue_of_thread(1), auto.queue_of_thread(2)),
            (Some(6), Some(7), None)
        );
        assert_eq!(auto.out_of_rss(), Some(&[6, 7][..]));
        assert_eq!(auto.served_by(1), Some(&[6][..]), "one thread, one queue: engine queues wrap onto it");
        assert_eq!(auto.served_by(4), Some(&[6, 7][..]), "too few: refused by too_few_queues");
        assert!(auto.describe_queues().starts_with("queues 6, 7 (kept out of RSS"), "{}", auto.describe_queues());
        assert_eq!(auto.too_few_queues(2), None);
        let e = auto.too_few_queues(3).unwrap();
        assert!(e.contains("3 receiving threads but only 2 of eth1's 8 receive queues (6, 7)"), "{e}");
        assert!(e.contains("`ethtool -X eth1 equal 5`") && e.contains("-P 2"), "{e}");
        let fixed = ZcRx { iface: "eth1".into(), ifindex: 3, queues: ZcQueues::From(8) };
        assert_eq!(fixed.queue_of_thread(3), Some(11), "IFACE:QUEUE: thread i on QUEUE + i");
        assert_eq!((fixed.out_of_rss(), fixed.too_few_queues(64)), (None, None), "the user's queues are trusted");
        assert_eq!(fixed.served_by(2), None);
        assert_eq!(fixed.describe_queues(), "queue 8+");
    }

    #[test]
    fn a_driver_without_header_split_is_named_for_either_form() {
        let e = |queues| {
            let z = ZcRx { iface: "lo".into(), ifindex: 1, queues };
            explain(&z, 7, &std::io::Error::from_raw_os_error(libc::EOPNOTSUPP)).message
        };
        let fixed = e(ZcQueues::From(7));
        assert!(fixed.contains("action 7") && fixed.contains("equal <queues - 1>"), "{fixed}");
        let auto = e(ZcQueues::OutOfRss { queues: vec![7], rx_queues: 8 });
        assert!(auto.contains("rx queue 7, kept out of RSS") && auto.contains("tcp-data-split on"), "{auto}");
        assert!(!auto.contains("ethtool -N"), "the receiver steers the flows itself: {auto}");
    }

    #[test]
    fn area_offsets_drop_the_area_id() {
        assert_eq!(area_offset((3u64 << AREA_SHIFT) | 0x1234), 0x1234);
        assert_eq!(area_offset(0x1234), 0x1234);
    }
}
