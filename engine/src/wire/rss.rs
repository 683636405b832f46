//! Receive-side scaling arithmetic: the Toeplitz hash a NIC computes over a packet's addresses
//! and ports, the indirection table that turns the hash into a receive queue, and the search
//! for a source port that lands a flow on the queue we want.
//!
//! A sender that knows the receiver's key and table can choose each flow's source port so that
//! N flows occupy N distinct queues, instead of leaving it to chance (16 flows hashed at random
//! onto 16 queues occupy about 10.3 of them). Everything here is pure: the key and table come
//! from the receiver (ethtool netlink), the ports are tried by the caller.

use std::net::{IpAddr, SocketAddr};

/// The Toeplitz hash of `input` under `key`, as NICs compute it for RSS: for every set bit of
/// the input, XOR in the 32 key bits starting at that bit's position. The key must be at least
/// 4 bytes longer than the input (a 40-byte key covers the 36-byte IPv6 4-tuple); key bits
/// beyond its end count as 0.
pub fn toeplitz(key: &[u8], input: &[u8]) -> u32 {
    let key_bit = |i: usize| -> u32 { key.get(i / 8).map_or(0, |b| u32::from((b >> (7 - i % 8)) & 1)) };
    let mut window = (0..32).fold(0u32, |w, i| (w << 1) | key_bit(i));
    let mut hash = 0u32;
    for (byte_index, byte) in input.iter().enumerate() {
        for bit in 0..8 {
            if byte & (0x80 >> bit) != 0 {
                hash ^= window;
            }
            window = (window << 1) | key_bit(32 + byte_index * 8 + bit);
        }
    }
    hash
}

/// The bytes the NIC hashes for a packet from `src` to `dst`: source address, destination
/// address, then (when the NIC hashes ports for this protocol) source and destination port,
/// all in network order. Mixed address families hash as the source's family (cannot happen
/// on one connection).
pub fn hash_input(src: SocketAddr, dst: SocketAddr, with_ports: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(36);
    match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            out.extend_from_slice(&s.octets());
            out.extend_from_slice(&d.octets());
        }
        (s, d) => {
            out.extend_from_slice(&to_v6(s).octets());
            out.extend_from_slice(&to_v6(d).octets());
        }
    }
    if with_ports {
        out.extend_from_slice(&src.port().to_be_bytes());
        out.extend_from_slice(&dst.port().to_be_bytes());
    }
    out
}

fn to_v6(ip: IpAddr) -> std::net::Ipv6Addr {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

/// A receiver's RSS set-up, as far as steering needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RssMap<'a> {
    pub key: &'a [u8],
    /// Indirection table: entry `hash % len` is the receive queue. Tables are powers of two in
    /// every driver we know, where this is the same as masking the low bits.
    pub table: &'a [u32],
}

impl RssMap<'_> {
    /// The receive queue a packet from `src` to `dst` lands on; None for an empty table.
    pub fn queue_of(&self, src: SocketAddr, dst: SocketAddr, with_ports: bool) -> Option<u32> {
        if self.table.is_empty() {
            return None;
        }
        let hash = toeplitz(self.key, &hash_input(src, dst, with_ports));
        Some(self.table[hash as usize % self.table.len()])
    }

    /// The source ports in `candidates`, in order, that land a flow from `src_ip` to `dst` on
    /// `queue`. The caller binds the first that is free and tries the next if the bind fails.
    pub fn ports_for_queue<'s>(
        &'s self,
        src_ip: IpAddr,
        dst: SocketAddr,
        queue: u32,
        candidates: impl Iterator<Item = u16> + 's,
    ) -> impl Iterator<Item = u16> + 's {
        candidates.filter(move |&port| self.queue_of(SocketAddr::new(src_ip, port), dst, true) == Some(queue))
    }
}

/// The queue each of `flows` flows aims at: the queues in turn, so flows beyond the queue count
/// spread evenly (no queue gets two more than another).
pub fn target_queues(flows: usize, queues: &[u32]) -> Vec<u32> {
    if queues.is_empty() {
        return Vec::new();
    }
    (0..flows).map(|i| queues[i % queues.len()]).collect()
}

/// Source ports the search tries: the kernel's default ephemeral range
/// (net.ipv4.ip_local_port_range), so a steered port looks like any other.
pub const STEER_PORTS: std::ops::RangeInclusive<u16> = 32768..=60999;

/// One source port per flow, each landing on its target queue, all distinct; `is_free` says
/// whether a port may be used (the caller's bind test). None for a flow whose queue no free
/// candidate reaches (a queue absent from the table, or the range exhausted).
pub fn choose_ports(
    map: &RssMap<'_>,
    src_ip: IpAddr,
    dst: SocketAddr,
    targets: &[u32],
    mut is_free: impl FnMut(u16) -> bool,
) -> Vec<Option<u16>> {
    let mut taken = std::collections::HashSet::new();
    targets
        .iter()
        .map(|&queue| {
            let port = map.ports_for_queue(src_ip, dst, queue, STEER_PORTS).find(|p| !taken.contains(p) && is_free(*p));
            if let Some(p) = port {
                taken.insert(p);
            }
            port
        })
        .collect()
}

/// The key of Microsoft's published RSS verification suite ("Verifying the RSS Hash
/// Calculation", Windows driver documentation); tests elsewhere use it as any NIC's key.
#[cfg(test)]
pub(crate) const MS_KEY: [u8; 40] = [
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0, 0xd0, 0xca, 0x2b,
    0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c, 0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac,
    0x01, 0xfa,
];

#[cfg(test)]
mod tests {
    use super::*;

    use super::MS_KEY;

    /// (destination, source, hash of the addresses only, hash with TCP ports), as published.
    const MS_VECTORS: &[(&str, &str, u32, u32)] = &[
        ("161.142.100.80:1766", "66.9.149.187:2794", 0x323e8fc2, 0x51ccc178),
        ("65.69.140.83:4739", "199.92.111.2:14230", 0xd718262a, 0xc626b0ea),
        ("12.22.207.184:38024", "24.19.198.95:12898", 0xd2d0a5de, 0x5c2b394a),
        ("209.142.163.6:2217", "38.27.205.30:48228", 0x82989176, 0xafc7327f),
        ("202.188.127.2:1303", "153.39.163.191:44251", 0x5d1809c5, 0x10e828a2),
        ("[3ffe:2501:200:3::1]:1766", "[3ffe:2501:200:1fff::7]:2794", 0x2cc18cd5, 0x40207d3d),
        ("[ff02::1]:4739", "[3ffe:501:8::260:97ff:fe40:efab]:14230", 0x0f0c461c, 0xdde51bbf),
        ("[fe80::200:f8ff:fe21:67cf]:38024", "[3ffe:1900:4545:3:200:f8ff:fe21:67cf]:44251", 0x4b61e985, 0x02d1feef),
    ];

    #[test]
    fn published_verification_vectors() {
        for &(dst, src, addrs_only, with_ports) in MS_VECTORS {
            let (dst, src): (SocketAddr, SocketAddr) = (dst.parse().unwrap(), src.parse().unwrap());
            assert_eq!(toeplitz(&MS_KEY, &hash_input(src, dst, false)), addrs_only, "{src} -> {dst}, addresses");
            assert_eq!(toeplitz(&MS_KEY, &hash_input(src, dst, true)), with_ports, "{src} -> {dst}, with ports");
        }
    }

    #[test]
    fn short_key_and_empty_input() {
        assert_eq!(toeplitz(&MS_KEY, &[]), 0);
        assert_eq!(toeplitz(&[], &[0xff; 12]), 0, "missing key bits count as zero");
        // One set bit selects the 32-bit key window at its position.
        assert_eq!(toeplitz(&MS_KEY, &[0x80]), 0x6d5a56da);
        assert_eq!(toeplitz(&MS_KEY, &[0x00, 0x80]), 0x5a56da25);
    }

    fn round_robin_table(queues: u32, len: usize) -> Vec<u32> {
        (0..len as u32).map(|i| i % queues).collect()
    }

    #[test]
    fn port_search_lands_every_queue_for_1_to_64_queues() {
        let src: IpAddr = "10.77.0.1".parse().unwrap();
        let dst: SocketAddr = "10.77.0.2:5300".parse().unwrap();
        let src6: IpAddr = "fd77::1".parse().unwrap();
        let dst6: SocketAddr = "[fd77::2]:5300".parse().unwrap();
        for queues in 1..=64u32 {
            let table = round_robin_table(queues, 128.max(queues as usize));
            let map = RssMap { key: &MS_KEY, table: &table };
            let all: Vec<u32> = (0..queues).collect();
            for (s, d) in [(src, dst), (src6, dst6)] {
                let targets = target_queues(queues as usize, &all);
                let ports = choose_ports(&map, s, d, &targets, |_| true);
                let mut landed: Vec<u32> = ports
                    .iter()
                    .map(|p| map.queue_of(SocketAddr::new(s, p.expect("every queue reachable")), d, true).unwrap())
                    .collect();
                assert_eq!(landed, targets, "{queues} queues: each flow on its target");
                landed.sort_unstable();
                landed.dedup();
                assert_eq!(landed.len(), queues as usize, "{queues} queues, all occupied");
            }
        }
    }

    #[test]
    fn more_flows_than_queues_spread_evenly_and_ports_stay_distinct() {
        let table = round_robin_table(4, 128);
        let map = RssMap { key: &MS_KEY, table: &table };
        let targets = target_queues(10, &[0, 1, 2, 3]);
        assert_eq!(targets, vec![0, 1, 2, 3, 0, 1, 2, 3, 0, 1]);
        let ports: Vec<u16> =
            choose_ports(&map, "10.77.0.1".parse().unwrap(), "10.77.0.2:5300".parse().unwrap(), &targets, |_| true)
                .into_iter()
                .map(Option::unwrap)
                .collect();
        let mut unique = ports.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), ports.len(), "two flows never share a source port: {ports:?}");
        assert!(target_queues(3, &[]).is_empty());
    }

    #[test]
    fn busy_ports_are_skipped_and_unreachable_queues_are_none() {
        let table = round_robin_table(4, 128);
        let map = RssMap { key: &MS_KEY, table: &table };
        let (s, d): (IpAddr, SocketAddr) = ("10.77.0.1".parse().unwrap(), "10.77.0.2:5300".parse().unwrap());
        let first = choose_ports(&map, s, d, &[2], |_| true)[0].unwrap();
        let second = choose_ports(&map, s, d, &[2], |p| p != first)[0].unwrap();
        assert_ne!(first, second);
        assert_eq!(map.queue_of(SocketAddr::new(s, second), d, true), Some(2));
        assert_eq!(choose_ports(&map, s, d, &[7], |_| true), vec![None], "queue 7 is not in the table");
        assert_eq!(RssMap { key: &MS_KEY, table: &[] }.queue_of(d, d, true), None);
    }
}
