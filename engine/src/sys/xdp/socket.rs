//! One AF_XDP socket and its UMEM, bound to one queue of an interface (xsk-rs over libxdp).
//!
//! Every queue gets a UMEM of its own (no sharing, so no locking between queue threads).
//! Binding tries zero-copy first and falls back to copy mode, which is all that veth and
//! drivers without AF_XDP support offer; [`XskQueue::bind`] says which one the kernel gave.
//! `XDP_USE_NEED_WAKEUP` is always asked for: the kernel then tells us when it needs a
//! `sendto`/`poll` to make progress, instead of us making one per batch.
//!
//! libxdp is told not to load its own program (`XSK_LIBXDP_FLAGS_INHIBIT_PROG_LOAD`): the
//! receiver attaches uringbench's program ([`super::program`]) and registers the socket in
//! its map; a sender needs no program at all to transmit.

use crate::base::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::num::NonZeroU32;
use xsk_rs::config::{BindFlags, FrameSize, LibxdpFlags, QueueSize, SocketConfig, UmemConfig};
use xsk_rs::socket::{RxQueue, Socket, TxQueue, XdpStatistics};
use xsk_rs::umem::{frame::FrameDesc, CompQueue, FillQueue, Umem};

/// Bytes per UMEM frame: a page. Room for a frame of [`MAX_FRAME_LEN`] bytes after the
/// 256-byte headroom the kernel keeps in front of received data.
pub(crate) const UMEM_FRAME_SIZE: u32 = 4096;
/// The longest Ethernet frame one UMEM frame holds (larger needs AF_XDP multi-buffer).
pub(crate) const MAX_FRAME_LEN: u32 = UMEM_FRAME_SIZE - 256;
/// Frames per UMEM: 32 MiB per queue. Half of them sit in the fill ring, so at 1 M frames/s
/// the receiver can be off its CPU for 4 ms before the kernel runs out of buffers (with 2048
/// it dropped frames as `fill_ring_empty` on a shared 2-vCPU VM).
pub(crate) const UMEM_FRAMES: u32 = 8192;
/// Descriptors per ring (fill, completion, RX, TX).
pub(crate) const RING_SIZE: u32 = 4096;

/// How the socket was bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum BindMode {
    /// The NIC reads and writes the UMEM directly.
    ZeroCopy,
    /// The kernel copies between its buffers and the UMEM (veth, drivers without AF_XDP).
    Copy,
}

/// A bound AF_XDP socket with its UMEM and the four rings.
pub struct XskQueue {
    pub queue: u32,
    pub tx: TxQueue,
    pub rx: RxQueue,
    pub fill: FillQueue,
    pub comp: CompQueue,
    /// Every frame of the UMEM, as handed out at creation (the caller tracks which are free).
    pub frames: Vec<FrameDesc>,
    pub umem: Umem,
    pub bind: BindMode,
    /// Why zero-copy was not used, when it was asked for and refused.
    pub note: Option<String>,
}

/// Counters the kernel keeps for an AF_XDP socket (`XDP_STATISTICS`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SocketCounters {
    /// Frames dropped for other reasons than a full ring.
    pub rx_dropped: u64,
    /// Frames dropped because the RX ring was full (the receiver fell behind).
    pub rx_ring_full: u64,
    /// Times the fill ring was empty when a frame arrived (no buffer to put it in).
    pub rx_fill_ring_empty: u64,
    pub rx_invalid_descs: u64,
    pub tx_invalid_descs: u64,
    pub tx_ring_empty: u64,
}

impl SocketCounters {
    pub(crate) fn from_stats(s: &XdpStatistics) -> Self {
        Self {
            rx_dropped: s.rx_dropped(),
            rx_ring_full: s.rx_ring_full(),
            rx_fill_ring_empty: s.rx_fill_ring_empty_descs(),
            rx_invalid_descs: s.rx_invalid_descs(),
            tx_invalid_descs: s.tx_invalid_descs(),
            tx_ring_empty: s.tx_ring_empty_descs(),
        }
    }
    pub fn add(&mut self, o: &SocketCounters) {
        self.rx_dropped += o.rx_dropped;
        self.rx_ring_full += o.rx_ring_full;
        self.rx_fill_ring_empty += o.rx_fill_ring_empty;
        self.rx_invalid_descs += o.rx_invalid_descs;
        self.tx_invalid_descs += o.tx_invalid_descs;
        self.tx_ring_empty += o.tx_ring_empty;
    }
}

/// RLIMIT_MEMLOCK soft limit in bytes (`None`: unlimited).
fn memlock_limit() -> Option<u64> {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes one rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) } != 0 || lim.rlim_cur == libc::RLIM_INFINITY {
        return None;
    }
    Some(lim.rlim_cur)
}

fn umem_error(err: Option<&std::io::Error>, bytes: u64) -> Error {
    let limit = memlock_limit().map_or("unlimited".to_string(), |l| format!("{} KiB", l / 1024));
    match err.and_then(|e| e.raw_os_error()) {
        // socket(AF_XDP) itself is refused without CAP_NET_RAW.
        Some(libc::EPERM) | Some(libc::EACCES) => Error::unsupported(format!(
            "creating an AF_XDP socket was refused ({}): run as root (or with CAP_NET_RAW and CAP_NET_ADMIN)",
            err.map_or_else(String::new, |e| e.to_string())
        )),
        // The UMEM's pages are charged to RLIMIT_MEMLOCK unless the process has CAP_IPC_LOCK.
        Some(libc::ENOBUFS) | Some(libc::ENOMEM) => Error::unsupported(format!(
            "registering a {} MiB AF_XDP UMEM failed ({}): RLIMIT_MEMLOCK is {limit}; raise it (ulimit -l unlimited) or run as root with CAP_IPC_LOCK",
            bytes >> 20,
            err.map_or_else(String::new, |e| e.to_string())
        )),
        _ => Error::unsupported(format!(
            "creating a {} MiB AF_XDP UMEM failed: {}",
            bytes >> 20,
            err.map_or_else(|| "unknown error".to_string(), |e| e.to_string())
        )),
    }
}

/// Checks that `queue` exists on the interface for `kind` ("rx" or "tx").
pub(crate) fn check_queue(ifname: &str, queue: u32, kind: &str) -> Result<()> {
    let count = super::program::queue_count(ifname, kind);
    if queue >= count {
        return Err(Error::usage(format!(
            "{kind} queue {queue} is out of range: {ifname} has {count} {kind} queue{} (use fewer queues, or add some: ethtool -L {ifname} combined N)",
            if count == 1 { "" } else { "s" }
        )));
    }
    Ok(())
}

fn try_bind(ifname: &str, queue: u32, bind: BindMode) -> Result<std::result::Result<XskQueue, std::io::Error>> {
    let umem_cfg = UmemConfig::builder()
        .frame_size(FrameSize::new(UMEM_FRAME_SIZE).expect("a power of two"))
        .fill_queue_size(QueueSize::new(RING_SIZE).expect("a power of two"))
        .comp_queue_size(QueueSize::new(RING_SIZE).expect("a power of two"))
        .build()
        .map_err(|e| Error::unsupported(format!("UMEM configuration: {e}")))?;
    let bytes = u64::from(UMEM_FRAME_SIZE) * u64::from(UMEM_FRAMES);
    let (umem, frames) = Umem::new(umem_cfg, NonZeroU32::new(UMEM_FRAMES).expect("non-zero"), false).map_err(|e| {
        umem_error(std::error::Error::source(&e).and_then(|s| s.downcast_ref::<std::io::Error>()), bytes)
    })?;
    let mode_flag = match bind {
        BindMode::ZeroCopy => BindFlags::XDP_ZEROCOPY,
        BindMode::Copy => BindFlags::XDP_COPY,
    };
    let sock_cfg = SocketConfig::builder()
        .rx_queue_size(QueueSize::new(RING_SIZE).expect("a power of two"))
        .tx_queue_size(QueueSize::new(RING_SIZE).expect("a power of two"))
        .libxdp_flags(LibxdpFlags::XSK_LIBXDP_FLAGS_INHIBIT_PROG_LOAD)
        .bind_flags(mode_flag | BindFlags::XDP_USE_NEED_WAKEUP)
        .build();
    let iface = ifname.parse().map_err(|_| Error::usage(format!("invalid interface name '{ifname}'")))?;
    // SAFETY: the UMEM is not shared with any other socket, and libxdp's program loading is
    // inhibited, which is the condition xsk-rs states for sound socket deletion.
    match unsafe { Socket::new(sock_cfg, &umem, &iface, queue) } {
        Ok((tx, rx, Some((fill, comp)))) => {
            Ok(Ok(XskQueue { queue, tx, rx, fill, comp, frames, umem, bind, note: None }))
        }
        Ok((_, _, None)) => Err(Error::unsupported("AF_XDP socket came without fill and completion rings")),
        Err(e) => {
            let io = std::error::Error::source(&e)
                .and_then(|s| s.downcast_ref::<std::io::Error>())
                .and_then(|e| e.raw_os_error())
                .map(std::io::Error::from_raw_os_error)
                .unwrap_or_else(|| std::io::Error::other(e.to_string()));
            Ok(Err(io))
        }
    }
}

/// Opens and binds the socket of `queue` on `ifname`: zero-copy when the driver supports it,
/// else copy mode. `kind` ("rx" or "tx") is the queue type checked for existence first.
pub fn open(ifname: &str, queue: u32, kind: &str) -> Result<XskQueue> {
    super::program::ifindex(ifname)?;
    check_queue(ifname, queue, kind)?;
    let zc_err = match try_bind(ifname, queue, BindMode::ZeroCopy)? {
        Ok(q) => return Ok(q),
        Err(e) => e,
    };
    match try_bind(ifname, queue, BindMode::Copy)? {
        Ok(mut q) => {
            q.note = Some(format!("zero-copy refused by the driver ({zc_err}): copy mode"));
            Ok(q)
        }
        Err(e) => Err(match e.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EACCES) => Error::unsupported(format!(
                "binding an AF_XDP socket to {ifname} queue {queue} was refused ({e}): run as root (CAP_NET_RAW and CAP_NET_ADMIN)"
            )),
            Some(libc::ENOBUFS) | Some(libc::ENOMEM) => umem_error(Some(&e), u64::from(UMEM_FRAME_SIZE) * u64::from(UMEM_FRAMES)),
            Some(libc::EBUSY) => Error::unsupported(format!(
                "{ifname} queue {queue} already has an AF_XDP socket (another test or tool is using it)"
            )),
            _ => Error::unsupported(format!("binding an AF_XDP socket to {ifname} queue {queue} failed: {e}")),
        }),
    }
}

impl XskQueue {
    /// The socket's kernel counters (zeros if the kernel cannot give them).
    pub fn counters(&self) -> SocketCounters {
        self.rx.fd().xdp_statistics().map(|s| SocketCounters::from_stats(&s)).unwrap_or_default()
    }
    /// Gives the kernel receive buffers: as many frames as the fill ring holds (the rest stay
    /// in `frames`). Done before the sender is told to start: a frame that arrives while the
    /// fill ring is empty is dropped (`rx_fill_ring_empty`).
    pub(crate) fn prime_fill(&mut self) {
        let give = self.frames.len().min(RING_SIZE as usize);
        let at = self.frames.len() - give;
        // SAFETY: frames of this UMEM that are in no ring yet.
        let n = unsafe { self.fill.produce(&self.frames[at..]) };
        if n == give {
            self.frames.truncate(at);
        }
    }
    /// Turns on the kernel's busy polling for this socket (SO_PREFER_BUSY_POLL,
    /// SO_BUSY_POLL `usecs`, SO_BUSY_POLL_BUDGET `budget`): a poll or recvfrom on it then runs
    /// the queue's NAPI in the caller's context instead of waiting for its interrupt. The
    /// error names the option the kernel refused (raising SO_BUSY_POLL above
    /// net.core.busy_read needs CAP_NET_ADMIN).
    pub(crate) fn enable_busy_poll(&self, usecs: u32, budget: u32) -> std::result::Result<(), String> {
        // the generic socket UAPI; the libc crate lacks the last two.
        const SO_PREFER_BUSY_POLL: libc::c_int = 69;
        const SO_BUSY_POLL_BUDGET: libc::c_int = 70;
        let fd = self.raw_fd();
        for (name, opt, value) in [
            ("SO_PREFER_BUSY_POLL", SO_PREFER_BUSY_POLL, 1),
            ("SO_BUSY_POLL", libc::SO_BUSY_POLL, usecs as libc::c_int),
            ("SO_BUSY_POLL_BUDGET", SO_BUSY_POLL_BUDGET, budget as libc::c_int),
        ] {
            crate::sys::sockopt::set_int(fd, libc::SOL_SOCKET, opt, value).map_err(|e| format!("{name}: {e}"))?;
        }
        Ok(())
    }

    /// The socket's file descriptor, for the program's XSKMAP.
    pub(crate) fn raw_fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        self.rx.fd().as_raw_fd()
    }
}
