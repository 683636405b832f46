//! Loading, attaching and reading uringbench's own XDP program (`xdp-prog/uringbench_xdp.c`).
//!
//! The object is compiled by `engine/build.rs` and embedded, then loaded with the libbpf
//! functions that `libxdp-sys` exposes. It is attached through a **BPF link**
//! (`bpf_link_create(BPF_XDP)`), not with `bpf_xdp_attach`: a link belongs to its file
//! descriptor, so the kernel detaches the program when the last descriptor closes, whether
//! uringbench ends normally, on an error, on SIGINT or SIGKILL. Nothing is pinned in bpffs
//! (which `ip netns exec` hides anyway: it mounts a fresh /sys), so nothing can be left behind.
//!
//! Native (driver) mode is tried first; if the driver has no XDP support the generic (skb)
//! mode is used, and [`XdpProgram::mode`] says which one the kernel accepted.

use crate::base::error::{Error, Result};
use crate::sys::xdp::bpf_object::{errno_of, load_error, map_update, possible_cpus, realtime_offset_ns, LoadedObject};
use crate::sys::xdp::kernel_count::{self, KernelFlows};
use libxdp_sys as sys;
use serde::{Deserialize, Serialize};
use std::ffi::{c_int, CString};
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// The compiled program (see `engine/build.rs`).
static OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/uringbench_xdp.o"));

/// Entries of the program's per-queue maps (`MAX_QUEUES` in the C source).
pub(crate) const MAX_QUEUES: u32 = 256;

const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

/// How the program runs on the interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum AttachMode {
    /// In the driver, before an skb exists.
    Native,
    /// After the skb is built (any interface; slower).
    Generic,
}

/// The program's counters for one receive queue, summed over CPUs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SteerCounters {
    /// Test frames handed to the queue's AF_XDP socket.
    pub redirected: u64,
    /// Other traffic given to the kernel's stack (ARP, ICMP, TCP control channel...).
    pub passed: u64,
    /// Test frames dropped because no socket was bound on their queue.
    pub dropped: u64,
}

/// Interface index of `name`, or an error that says how to list interfaces.
pub(crate) fn ifindex(name: &str) -> Result<u32> {
    let c = CString::new(name).map_err(|_| Error::usage(format!("invalid interface name '{name}'")))?;
    // SAFETY: a valid NUL-terminated string.
    let index = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if index == 0 {
        return Err(Error::usage(format!(
            "no interface '{name}' in this network namespace (`ip link show` lists them)"
        )));
    }
    Ok(index)
}

/// The number of queues of `kind` ("rx" or "tx") the interface exposes in sysfs.
pub(crate) fn queue_count(ifname: &str, kind: &str) -> u32 {
    let dir = format!("/sys/class/net/{ifname}/queues");
    std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().starts_with(&format!("{kind}-")))
                .count()
        })
        .unwrap_or(0) as u32
}

/// The loaded program, attached to one interface until dropped.
pub(crate) struct XdpProgram {
    /// The BPF link: closing it detaches the program. Always `Some` until dropped.
    link: Option<OwnedFd>,
    /// Dropped after the link (fields drop in order): the maps outlive the attachment.
    _object: LoadedObject,
    xsks_fd: RawFd,
    counters_fd: RawFd,
    /// The flow trackers, when the program counts in the kernel.
    kflows_fd: Option<RawFd>,
    pub ifname: String,
    pub mode: AttachMode,
    /// Why generic mode was used, when it was.
    pub note: Option<String>,
}

/// `struct steer_config` of the C source.
#[repr(C)]
struct SteerConfig {
    port_lo: u16,
    port_hi: u16,
    kernel_count: u32,
    clock_offset: u64,
    peer: [u32; 4],
}

impl XdpProgram {
    /// Loads the program, steers UDP to destination ports `ports` and attaches it to `ifname`:
    /// native mode first, generic if the driver refuses (or only `force`'s mode when given).
    /// With `kernel`, the program accounts the test's flows itself and drops their frames
    /// ([`kernel_count`]); no socket is needed.
    pub(crate) fn attach(
        ifname: &str,
        ports: std::ops::RangeInclusive<u16>,
        force: Option<AttachMode>,
        kernel: Option<&KernelFlows>,
    ) -> Result<Self> {
        let ifindex = ifindex(ifname)?;
        let object = LoadedObject::load(OBJECT, "uringbench_xdp", &kernel_count::map_sizes(kernel))?;
        let prog_fd = object.prog_fd;
        let xsks_fd = object.map_fd("xsks")?;
        let counters_fd = object.map_fd("counters")?;
        let steer_fd = object.map_fd("steer")?;
        let config = SteerConfig {
            port_lo: *ports.start(),
            port_hi: *ports.end(),
            kernel_count: u32::from(kernel.is_some()),
            clock_offset: realtime_offset_ns(),
            peer: kernel.map_or([0; 4], |k| kernel_count::peer_words(k.peer)),
        };
        map_update(steer_fd, &0u32, &config, "configuring the XDP program's port range failed")?;
        let kflows_fd = match kernel {
            Some(k) => Some(kernel_count::register_flows(&object, k)?),
            None => None,
        };

        let modes: &[AttachMode] = match force {
            Some(AttachMode::Native) => &[AttachMode::Native],
            Some(AttachMode::Generic) => &[AttachMode::Generic],
            None => &[AttachMode::Native, AttachMode::Generic],
        };
        let mut note = None;
        let mut last_err = None;
        for &mode in modes {
            // SAFETY: all-zero is a valid bpf_link_create_opts; libbpf reads `sz` to know
            // which fields the caller knows.
            let mut opts: sys::bpf_link_create_opts = unsafe { std::mem::zeroed() };
            opts.sz = std::mem::size_of::<sys::bpf_link_create_opts>();
            opts.flags = if mode == AttachMode::Native { XDP_FLAGS_DRV_MODE } else { XDP_FLAGS_SKB_MODE };
            // SAFETY: valid program fd, interface index and options that live across the call.
            let fd = unsafe { sys::bpf_link_create(prog_fd, ifindex as c_int, sys::bpf_attach_type_BPF_XDP, &opts) };
            if fd >= 0 {
                // SAFETY: bpf_link_create returned a new descriptor we now own.
                let link = unsafe { OwnedFd::from_raw_fd(fd) };
                return Ok(Self {
                    link: Some(link),
                    _object: object,
                    xsks_fd,
                    counters_fd,
                    kflows_fd,
                    ifname: ifname.to_string(),
                    mode,
                    note: note.take(),
                });
            }
            let err = errno_of(fd);
            if err.raw_os_error() == Some(libc::EBUSY) || err.raw_os_error() == Some(libc::EEXIST) {
                return Err(Error::unsupported(format!(
                    "{ifname} already has an XDP program attached (another test or tool): detach it first (ip link set dev {ifname} xdp off)"
                )));
            }
            if mode == AttachMode::Native {
                note = Some(format!("native XDP refused by the driver of {ifname} ({err}): generic mode"));
            }
            last_err = Some((mode, err));
        }
        let (mode, err) = last_err.expect("at least one mode was tried");
        Err(match err.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EACCES) => load_error(err),
            _ => Error::unsupported(format!(
                "attaching the XDP program to {ifname} in {} mode failed: {err}",
                if mode == AttachMode::Native { "native" } else { "generic" }
            )),
        })
    }

    /// Detaches the program from the interface now; its maps (counters) stay readable until
    /// the program is dropped.
    pub(crate) fn detach(&mut self) {
        drop(self.link.take());
    }

    /// Puts an AF_XDP socket in the program's map at `queue`: test frames arriving on that
    /// receive queue go to it.
    pub(crate) fn register_socket(&self, queue: u32, socket_fd: RawFd) -> Result<()> {
        if queue >= MAX_QUEUES {
            return Err(Error::usage(format!(
                "receive queue {queue} is beyond the {MAX_QUEUES} queues the XDP program serves"
            )));
        }
        // The XSKMAP has u32 keys and u32 (socket fd) values.
        map_update(
            self.xsks_fd,
            &queue,
            &(socket_fd as u32),
            &format!("registering the AF_XDP socket of queue {queue}"),
        )
    }

    /// The flows' trackers' map ([`kernel_count::read`]), when the program counts in the
    /// kernel; readable until the program is dropped.
    pub(crate) fn kernel_flows_fd(&self) -> Option<RawFd> {
        self.kflows_fd
    }

    /// The program's counters for queues `0..queues`, summed over CPUs.
    pub(crate) fn counters(&self, queues: u32) -> Result<Vec<SteerCounters>> {
        let cpus = possible_cpus()?;
        // Per-CPU values are laid out one per possible CPU, each rounded up to 8 bytes
        // (our value is 3 x u64 already).
        let mut values = vec![[0u64; 3]; cpus];
        (0..queues.min(MAX_QUEUES))
            .map(|q| {
                // SAFETY: the buffer holds one 24-byte value per possible CPU, as the kernel
                // writes for a per-CPU array lookup.
                let rc = unsafe {
                    sys::bpf_map_lookup_elem(self.counters_fd, (&q as *const u32).cast(), values.as_mut_ptr().cast())
                };
                if rc != 0 {
                    return Err(Error::unsupported(format!("reading the XDP program's counters: {}", errno_of(rc))));
                }
                Ok(values.iter().fold(SteerCounters::default(), |acc, v| SteerCounters {
                    redirected: acc.redirected + v[0],
                    passed: acc.passed + v[1],
                    dropped: acc.dropped + v[2],
                }))
            })
            .collect()
    }
}
