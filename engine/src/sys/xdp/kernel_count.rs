//! Counting in the kernel (`recv --engine xdp --xdp-count kernel`): the receiver's XDP program
//! accounts each test datagram in its flow's tracker (`kflows`, found by source port through
//! the array `kflow_of`, 1 + the flow's index per port) and drops it, so no frame is copied to user space. This module sizes and fills
//! those maps and reads the trackers back; the rules are those of the user-space tracker
//! (engine/src/metrics/seq.rs), turned into its figures by the caller.

use crate::base::error::{Error, Result};
use crate::sys::xdp::bpf_object::{errno_of, map_update, LoadedObject};
use libxdp_sys as sys;
use std::net::IpAddr;
use std::os::fd::RawFd;

/// Words of the duplicate window (`KWIN_WORDS` in the C source): 64 sequence numbers each.
const KWIN_WORDS: usize = 1024;
/// `BPF_F_LOCK`: a lookup copies the value under its spin lock (a consistent snapshot).
const BPF_F_LOCK: u64 = 4;
/// The most flows a kernel-counting program tracks (16 KiB of map per flow).
pub(crate) const MAX_KERNEL_FLOWS: usize = 1024;

/// The test's flows as the program identifies them.
#[derive(Debug, Clone)]
pub(crate) struct KernelFlows {
    /// The sender's address: frames from any other count as strangers.
    pub peer: IpAddr,
    /// Source port of each flow, in flow order.
    pub ports: Vec<u16>,
}

/// `struct kflow` of the C source.
#[repr(C)]
struct KFlow {
    lock: u32,
    pad: u32,
    received: u64,
    bytes: u64,
    highest: u64,
    out_of_order: u64,
    duplicates: u64,
    too_old: u64,
    fin_seq: u64,
    strangers: u64,
    foreign: u64,
    jitter16_us: i64,
    last_transit_us: i64,
    transits: u64,
    window: [[u64; 2]; KWIN_WORDS],
}

/// One flow's tracker as the program left it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct KernelFlowCounts {
    pub highest: u64,
    pub received: u64,
    pub out_of_order: u64,
    pub duplicates: u64,
    pub too_old: u64,
    pub bytes: u64,
    /// Lowest FIN sequence number seen; 0 when none.
    pub fin_seq: u64,
    /// Test-port frames with this flow's port from another address.
    pub strangers: u64,
    /// Frames too short for the sequence header, or with id 0.
    pub foreign: u64,
    /// RFC 3550 jitter in microseconds, times 16.
    pub jitter16_us: i64,
}

/// The sizes of the kernel-counting maps: one entry each when the program does not count;
/// else every port, and one tracker per flow.
pub(crate) fn map_sizes(kernel: Option<&KernelFlows>) -> [(&'static str, u32); 2] {
    match kernel {
        Some(k) => [("kflow_of", 1 << 16), ("kflows", k.ports.len().max(1) as u32)],
        None => [("kflow_of", 1), ("kflows", 1)],
    }
}

/// The sender's address as the program compares it (network-order words; IPv4 in the first).
pub(crate) fn peer_words(peer: IpAddr) -> [u32; 4] {
    let mut words = [0u32; 4];
    match peer.to_canonical() {
        IpAddr::V4(a) => words[0] = u32::from_ne_bytes(a.octets()),
        IpAddr::V6(a) => {
            for (w, chunk) in words.iter_mut().zip(a.octets().chunks_exact(4)) {
                *w = u32::from_ne_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
            }
        }
    }
    words
}

/// Puts each flow's source port in `kflow_of`; returns the trackers' map.
pub(crate) fn register_flows(object: &LoadedObject, kernel: &KernelFlows) -> Result<RawFd> {
    if kernel.ports.len() > MAX_KERNEL_FLOWS {
        return Err(Error::usage(format!(
            "--xdp-count kernel tracks {MAX_KERNEL_FLOWS} flows at most (the test has {})",
            kernel.ports.len()
        )));
    }
    let index_fd = object.map_fd("kflow_of")?;
    for (slot, &port) in (1u32..).zip(&kernel.ports) {
        map_update(index_fd, &u32::from(port), &slot, "registering a flow with the XDP program")?;
    }
    object.map_fd("kflows")
}

/// Reads every flow's tracker (flow order), each a consistent snapshot.
pub(crate) fn read(fd: RawFd) -> Result<Vec<KernelFlowCounts>> {
    // SAFETY: bpf_map_info is a plain C struct of integers: all-zero is valid.
    let mut info: sys::bpf_map_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<sys::bpf_map_info>() as u32;
    // SAFETY: info is a writable bpf_map_info of `len` bytes.
    let rc = unsafe { sys::bpf_map_get_info_by_fd(fd, &mut info, &mut len) };
    if rc != 0 {
        return Err(Error::unsupported(format!("reading the XDP program's flow map: {}", errno_of(rc))));
    }
    // One value buffer reused for every flow (16 KiB: on the heap).
    let mut value: Box<std::mem::MaybeUninit<KFlow>> = Box::new_uninit();
    (0..info.max_entries)
        .map(|i| {
            // SAFETY: the map's values are `struct kflow` (KFlow's layout); the kernel writes
            // one whole value into the buffer before it is read.
            let rc = unsafe {
                sys::bpf_map_lookup_elem_flags(fd, (&i as *const u32).cast(), value.as_mut_ptr().cast(), BPF_F_LOCK)
            };
            if rc != 0 {
                return Err(Error::unsupported(format!("reading flow {i} of the XDP program: {}", errno_of(rc))));
            }
            // SAFETY: written whole by the successful lookup above.
            let f = unsafe { value.assume_init_ref() };
            Ok(KernelFlowCounts {
                highest: f.highest,
                received: f.received,
                out_of_order: f.out_of_order,
                duplicates: f.duplicates,
                too_old: f.too_old,
                bytes: f.bytes,
                fin_seq: f.fin_seq,
                strangers: f.strangers,
                foreign: f.foreign,
                jitter16_us: f.jitter16_us,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_and_peer_words() {
        assert_eq!(std::mem::size_of::<KFlow>(), 8 + 12 * 8 + KWIN_WORDS * 16);
        let v4 = peer_words("10.77.0.1".parse().unwrap());
        assert_eq!(v4[0].to_ne_bytes(), [10, 77, 0, 1]);
        assert_eq!(&v4[1..], &[0, 0, 0]);
        let v6 = peer_words("fd77::1".parse().unwrap());
        assert_eq!(v6[0].to_ne_bytes(), [0xfd, 0x77, 0, 0]);
        assert_eq!(v6[3].to_ne_bytes(), [0, 0, 0, 1]);
        assert_eq!(map_sizes(None), [("kflow_of", 1), ("kflows", 1)]);
    }
}
