//! Counting in the kernel (`recv --engine xdp --xdp-count kernel`): the receiver's XDP program
//! accounts each test datagram in its flow's tracker (`kflows`, found by source port through
//! the array `kflow_of`, 1 + the flow's index per port) and drops it, so no frame is copied to user space. This module sizes and fills
//! those maps and reads the trackers back; the rules are those of the user-space tracker
//! (engine/src/metrics/seq.rs), turned into its figures by the caller.
//!
//! Each CPU keeps its own tracker per flow (a per-CPU map: no lock per frame). A receive
//! queue is polled on one CPU at a time, in ring order, so every CPU sees its share of a flow
//! in order and [`merge`] adds the shares up: counts add, the highest number is the largest,
//! and a sequence number that two CPUs both counted (a duplicate that arrived on another CPU)
//! is found in their windows and counted once, as a duplicate.

use crate::base::error::{Error, Result};
use crate::sys::xdp::bpf_object::{errno_of, map_update, possible_cpus, LoadedObject};
use libxdp_sys as sys;
use std::net::IpAddr;
use std::os::fd::RawFd;

/// Words of the duplicate window (`KWIN_WORDS` in the C source): 64 sequence numbers each.
const KWIN_WORDS: usize = 1024;
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
#[derive(Clone)]
struct KFlow {
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
    last_stamp: u64,
    arrival_us: u64,
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

/// Reads every flow's tracker (flow order), its CPUs' shares merged.
pub(crate) fn read(fd: RawFd) -> Result<Vec<KernelFlowCounts>> {
    // SAFETY: bpf_map_info is a plain C struct of integers: all-zero is valid.
    let mut info: sys::bpf_map_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<sys::bpf_map_info>() as u32;
    // SAFETY: info is a writable bpf_map_info of `len` bytes.
    let rc = unsafe { sys::bpf_map_get_info_by_fd(fd, &mut info, &mut len) };
    if rc != 0 {
        return Err(Error::unsupported(format!("reading the XDP program's flow map: {}", errno_of(rc))));
    }
    let cpus = possible_cpus()?;
    // One value buffer (one KFlow per possible CPU, 16 KiB each) reused for every flow.
    let mut values = vec![zeroed_kflow(); cpus];
    (0..info.max_entries)
        .map(|i| {
            // SAFETY: the map's values are `struct kflow` (KFlow's layout, a multiple of 8
            // bytes, so the kernel's per-CPU stride is its size); `values` holds one per
            // possible CPU, as many as the kernel writes.
            let rc = unsafe { sys::bpf_map_lookup_elem(fd, (&i as *const u32).cast(), values.as_mut_ptr().cast()) };
            if rc != 0 {
                return Err(Error::unsupported(format!("reading flow {i} of the XDP program: {}", errno_of(rc))));
            }
            Ok(merge(&values))
        })
        .collect()
}

/// A tracker that has seen nothing.
fn zeroed_kflow() -> KFlow {
    // SAFETY: KFlow is integers only: all-zero is a valid value.
    unsafe { std::mem::zeroed() }
}

/// One flow's figures out of its CPUs' trackers. A sequence number set in the windows of two
/// CPUs was counted by both: it is taken off `received` (and its bytes off `bytes`, at the
/// flow's mean datagram length, exact for senders that send one length) and counted as a
/// duplicate. Jitter is that of the CPU that timed the most datagrams.
fn merge(cpus: &[KFlow]) -> KernelFlowCounts {
    let mut c = KernelFlowCounts::default();
    let mut jitter_from = 0u64;
    for f in cpus {
        c.highest = c.highest.max(f.highest);
        c.received += f.received;
        c.out_of_order += f.out_of_order;
        c.duplicates += f.duplicates;
        c.too_old += f.too_old;
        c.bytes += f.bytes;
        if f.fin_seq != 0 && (c.fin_seq == 0 || f.fin_seq < c.fin_seq) {
            c.fin_seq = f.fin_seq;
        }
        c.strangers += f.strangers;
        c.foreign += f.foreign;
        if f.transits > jitter_from {
            jitter_from = f.transits;
            c.jitter16_us = f.jitter16_us;
        }
    }
    let twice = counted_twice(cpus);
    if twice > 0 && c.received > 0 {
        c.bytes -= c.bytes / c.received * twice.min(c.received);
        c.received -= twice.min(c.received);
        c.duplicates += twice;
    }
    c
}

/// Sequence numbers the windows of more than one CPU hold (each extra holder counts once).
fn counted_twice(cpus: &[KFlow]) -> u64 {
    if cpus.iter().filter(|f| f.received > 0).count() < 2 {
        return 0;
    }
    let mut twice = 0u64;
    for word in 0..KWIN_WORDS {
        for (i, a) in cpus.iter().enumerate() {
            let [tag, bits] = a.window[word];
            if bits == 0 {
                continue;
            }
            // Bits of this word that an earlier CPU already holds under the same tag.
            let seen =
                cpus[..i].iter().filter(|b| b.window[word][0] == tag).fold(0u64, |acc, b| acc | b.window[word][1]);
            twice += u64::from((bits & seen).count_ones());
        }
    }
    twice
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_and_peer_words() {
        assert_eq!(std::mem::size_of::<KFlow>(), 14 * 8 + KWIN_WORDS * 16);
        let v4 = peer_words("10.77.0.1".parse().unwrap());
        assert_eq!(v4[0].to_ne_bytes(), [10, 77, 0, 1]);
        assert_eq!(&v4[1..], &[0, 0, 0]);
        let v6 = peer_words("fd77::1".parse().unwrap());
        assert_eq!(v6[0].to_ne_bytes(), [0xfd, 0x77, 0, 0]);
        assert_eq!(v6[3].to_ne_bytes(), [0, 0, 0, 1]);
        assert_eq!(map_sizes(None), [("kflow_of", 1), ("kflows", 1)]);
    }

    /// A tracker that counted `seqs` (in order), `len` bytes each.
    fn tracker(seqs: &[u64], len: u64) -> KFlow {
        let mut f = zeroed_kflow();
        for &seq in seqs {
            let word = &mut f.window[(seq >> 6) as usize % KWIN_WORDS];
            if word[0] != seq >> 6 {
                *word = [seq >> 6, 0];
            }
            word[1] |= 1 << (seq & 63);
            f.received += 1;
            f.bytes += len;
            f.highest = f.highest.max(seq);
            f.transits += 1;
        }
        f
    }

    #[test]
    fn cpus_shares_add_up() {
        let mut a = tracker(&(1..=100).collect::<Vec<_>>(), 22);
        let mut b = tracker(&(101..=250).collect::<Vec<_>>(), 22);
        a.fin_seq = 0;
        b.fin_seq = 251;
        b.jitter16_us = 32;
        let c = merge(&[a, b, zeroed_kflow()]);
        assert_eq!((c.received, c.bytes, c.highest, c.duplicates, c.fin_seq), (250, 250 * 22, 250, 0, 251));
        assert_eq!(c.jitter16_us, 32, "the CPU that timed the most datagrams gives the jitter");
    }

    #[test]
    fn a_number_counted_on_two_cpus_is_a_duplicate() {
        let a = tracker(&(1..=100).collect::<Vec<_>>(), 10);
        // 50 and 70 arrive again on another CPU, beside 101..=110.
        let mut seqs = vec![50, 70];
        seqs.extend(101..=110);
        let b = tracker(&seqs, 10);
        let c = merge(&[a.clone(), b]);
        assert_eq!((c.received, c.duplicates, c.bytes, c.highest), (110, 2, 1100, 110));
        // The same window word under another tag (64 * 1024 numbers later) is no duplicate.
        let far = tracker(&[50 + 64 * KWIN_WORDS as u64], 10);
        assert_eq!(merge(&[a, far]).duplicates, 0);
    }
}
