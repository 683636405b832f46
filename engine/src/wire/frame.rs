//! Ethernet/IPv4/IPv6/UDP frames as the AF_XDP sender writes them and the receiver reads them.
//!
//! Written by hand rather than with a header crate: the sender writes the same 42- or 62-byte
//! header millions of times a second, changing only the UDP checksum and the 20-byte
//! sequence/timestamp header behind it ([`crate::wire::udp_payload`]). So a [`FrameTemplate`] keeps
//! the finished headers and the checksum sum of everything that does not change, and each
//! frame costs one copy and a 10-word sum. Parsing is the mirror image, bounds-checked, with
//! no allocation.

use crate::wire::udp_payload::{self as payload, WireTime};
use std::net::IpAddr;

pub(crate) const ETH_HEADER_LEN: usize = 14;
pub(crate) const IPV4_HEADER_LEN: usize = 20;
pub(crate) const IPV6_HEADER_LEN: usize = 40;
pub(crate) const UDP_HEADER_LEN: usize = 8;
const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86DD;
const PROTO_UDP: u8 = 17;
/// IPv4 time to live and IPv6 hop limit of our frames (Linux's default).
const TTL: u8 = 64;

/// Bytes of Ethernet + IP + UDP header in front of a datagram of this address family.
pub(crate) fn header_len(ipv6: bool) -> usize {
    ETH_HEADER_LEN + if ipv6 { IPV6_HEADER_LEN } else { IPV4_HEADER_LEN } + UDP_HEADER_LEN
}

/// Adds `bytes` as big-endian 16-bit words to a ones'-complement sum (RFC 1071); an odd
/// last byte is padded with zero. Eight bytes are added per step as two 32-bit halves: since
/// 2^16 = 1 modulo 0xFFFF, a 32-bit word sums to the same folded value as its two 16-bit
/// words, and the receiver checks every byte of every frame with this.
pub(crate) fn sum_words(mut acc: u64, bytes: &[u8]) -> u64 {
    let mut wide = bytes.chunks_exact(8);
    for w in &mut wide {
        let v = u64::from_be_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]);
        acc += (v >> 32) + (v & 0xFFFF_FFFF);
    }
    let mut chunks = wide.remainder().chunks_exact(2);
    for w in &mut chunks {
        acc += u64::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [last] = chunks.remainder() {
        acc += u64::from(*last) << 8;
    }
    acc
}

/// Folds a sum to 16 bits and complements it: the Internet checksum.
pub fn fold(mut acc: u64) -> u16 {
    while acc > 0xFFFF {
        acc = (acc & 0xFFFF) + (acc >> 16);
    }
    !(acc as u16)
}

/// The headers of one flow's frames, ready to copy, for datagrams of `payload_len` bytes.
#[derive(Debug, Clone)]
pub struct FrameTemplate {
    header: Vec<u8>,
    /// Offset of the UDP checksum inside `header`.
    checksum_at: usize,
    /// Sum of the pseudo-header, the UDP header (checksum field zero) and the payload's
    /// zero filler: only the 20-byte sequence header is added per frame.
    base_sum: u64,
    payload_len: usize,
}

/// Link and network addresses of one flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowAddrs {
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
    pub src: IpAddr,
    pub dst: IpAddr,
    pub src_port: u16,
    pub dst_port: u16,
}

impl FrameTemplate {
    /// Headers for `payload_len`-byte datagrams of one flow. Both addresses must be of the
    /// same family; `payload_len` must hold the sequence header and fit a 16-bit UDP length.
    pub fn new(a: &FlowAddrs, payload_len: usize) -> Result<Self, String> {
        if payload_len < payload::HEADER_LEN {
            return Err(format!(
                "a {payload_len}-byte datagram cannot hold the {}-byte sequence header",
                payload::HEADER_LEN
            ));
        }
        let udp_len = UDP_HEADER_LEN + payload_len;
        let mut h = Vec::with_capacity(header_len(true));
        h.extend_from_slice(&a.dst_mac);
        h.extend_from_slice(&a.src_mac);
        let pseudo_sum = match (a.src, a.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                let total = IPV4_HEADER_LEN + udp_len;
                if total > usize::from(u16::MAX) {
                    return Err(format!("a {payload_len}-byte datagram does not fit an IPv4 packet"));
                }
                h.extend_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
                let ip_at = h.len();
                h.extend_from_slice(&[0x45, 0]);
                h.extend_from_slice(&(total as u16).to_be_bytes());
                // Identification 0 with Don't Fragment, as Linux sends DF datagrams.
                h.extend_from_slice(&[0, 0, 0x40, 0, TTL, PROTO_UDP, 0, 0]);
                h.extend_from_slice(&s.octets());
                h.extend_from_slice(&d.octets());
                let ip_sum = fold(sum_words(0, &h[ip_at..ip_at + IPV4_HEADER_LEN]));
                h[ip_at + 10..ip_at + 12].copy_from_slice(&ip_sum.to_be_bytes());
                let acc = sum_words(0, &s.octets());
                sum_words(acc, &d.octets()) + u64::from(PROTO_UDP) + udp_len as u64
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                if udp_len > usize::from(u16::MAX) {
                    return Err(format!("a {payload_len}-byte datagram does not fit an IPv6 packet"));
                }
                h.extend_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
                h.extend_from_slice(&[0x60, 0, 0, 0]);
                h.extend_from_slice(&(udp_len as u16).to_be_bytes());
                h.extend_from_slice(&[PROTO_UDP, TTL]);
                h.extend_from_slice(&s.octets());
                h.extend_from_slice(&d.octets());
                let acc = sum_words(0, &s.octets());
                sum_words(acc, &d.octets()) + u64::from(PROTO_UDP) + udp_len as u64
            }
            _ => return Err(format!("source {} and destination {} are of different families", a.src, a.dst)),
        };
        h.extend_from_slice(&a.src_port.to_be_bytes());
        h.extend_from_slice(&a.dst_port.to_be_bytes());
        h.extend_from_slice(&(udp_len as u16).to_be_bytes());
        let checksum_at = h.len();
        h.extend_from_slice(&[0, 0]);
        let base_sum = sum_words(pseudo_sum, &h[checksum_at - 6..]);
        Ok(Self { header: h, checksum_at, base_sum, payload_len })
    }

    /// The sum each frame's UDP checksum starts from (pseudo-header, UDP header with a zero
    /// checksum, zero filler): only the sequence header is added to it per frame, here or by
    /// the XDP generator program.
    pub(crate) fn checksum_base(&self) -> u64 {
        self.base_sum
    }

    /// The flow's UDP source port.
    pub(crate) fn src_port(&self) -> u16 {
        u16::from_be_bytes([self.header[self.checksum_at - 6], self.header[self.checksum_at - 5]])
    }

    /// Ethernet frame length (without the FCS the NIC adds).
    pub fn frame_len(&self) -> usize {
        self.header.len() + self.payload_len
    }

    /// Writes a whole frame (headers, sequence header, zero filler) into `buf`, which must be
    /// at least [`Self::frame_len`] long. `fin` writes the end-of-flow datagram for `seq`.
    pub fn write(&self, buf: &mut [u8], seq: u64, sent: WireTime, fin: bool) -> usize {
        let n = self.frame_len();
        let buf = &mut buf[..n];
        self.write_headers(buf, seq, sent, fin);
        buf[self.header.len() + payload::HEADER_LEN..].fill(0);
        n
    }

    /// Like [`Self::write`] but leaves the filler after the sequence header alone: for UMEM
    /// frames whose filler was zeroed once and is never written by anyone else.
    pub(crate) fn write_headers(&self, buf: &mut [u8], seq: u64, sent: WireTime, fin: bool) -> usize {
        let h = self.header.len();
        buf[..h].copy_from_slice(&self.header);
        let seq_hdr = &mut buf[h..h + payload::HEADER_LEN];
        // The sequence number is checked by the caller (1..=MAX_SEQ): encoding cannot fail.
        let _ = if fin { payload::encode_fin(seq_hdr, seq, sent) } else { payload::encode(seq_hdr, seq, sent) };
        let mut sum = fold(sum_words(self.base_sum, seq_hdr));
        if sum == 0 {
            sum = 0xFFFF; // UDP sends a computed zero as all ones (zero means "no checksum")
        }
        buf[self.checksum_at..self.checksum_at + 2].copy_from_slice(&sum.to_be_bytes());
        self.frame_len()
    }
}

/// What the UDP checksum of a received frame said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UdpChecksum {
    /// Present and correct.
    Verified,
    /// The field holds only the pseudo-header sum: the sending host left the rest to a NIC
    /// (`CHECKSUM_PARTIAL`), and the frame crossed a virtual link (veth) that never computed
    /// it. The bytes cannot be checked; the IPv4 header checksum still was.
    LeftToOffload,
    /// Zero: the sender sent none (allowed for IPv4).
    Absent,
}

/// The parts of a received frame the receiver accounts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParsedUdp<'a> {
    pub src: IpAddr,
    pub src_port: u16,
    pub dst_port: u16,
    pub payload: &'a [u8],
    pub checksum: UdpChecksum,
}

/// Why a frame was not counted as a test datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameError {
    /// Shorter than its headers say, or than the headers themselves.
    Truncated,
    /// Not IPv4/IPv6 UDP (the program only redirects UDP: this means a foreign program or
    /// a bug).
    NotUdp,
    /// The IPv4 header or UDP checksum does not match.
    BadChecksum,
}

/// Parses an Ethernet frame carrying UDP over IPv4 or IPv6 and checks its checksums.
pub fn parse_udp(frame: &[u8]) -> Result<ParsedUdp<'_>, FrameError> {
    let ethertype = u16::from_be_bytes(frame.get(12..14).ok_or(FrameError::Truncated)?.try_into().unwrap_or([0; 2]));
    let l3 = &frame[ETH_HEADER_LEN..];
    let (src, udp, pseudo) = match ethertype {
        ETHERTYPE_IPV4 => {
            let ip = l3.get(..IPV4_HEADER_LEN).ok_or(FrameError::Truncated)?;
            if ip[0] >> 4 != 4 || ip[9] != PROTO_UDP {
                return Err(FrameError::NotUdp);
            }
            let ihl = usize::from(ip[0] & 0xF) * 4;
            let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
            if ihl < IPV4_HEADER_LEN || total < ihl + UDP_HEADER_LEN || total > l3.len() {
                return Err(FrameError::Truncated);
            }
            if fold(sum_words(0, &l3[..ihl])) != 0 {
                return Err(FrameError::BadChecksum);
            }
            let src = IpAddr::from(<[u8; 4]>::try_from(&ip[12..16]).unwrap_or_default());
            let pseudo = sum_words(0, &ip[12..20]) + u64::from(PROTO_UDP);
            (src, &l3[ihl..total], pseudo)
        }
        ETHERTYPE_IPV6 => {
            let ip = l3.get(..IPV6_HEADER_LEN).ok_or(FrameError::Truncated)?;
            if ip[0] >> 4 != 6 || ip[6] != PROTO_UDP {
                return Err(FrameError::NotUdp);
            }
            let plen = usize::from(u16::from_be_bytes([ip[4], ip[5]]));
            if plen < UDP_HEADER_LEN || IPV6_HEADER_LEN + plen > l3.len() {
                return Err(FrameError::Truncated);
            }
            let src = IpAddr::from(<[u8; 16]>::try_from(&ip[8..24]).unwrap_or_default());
            let pseudo = sum_words(0, &ip[8..40]) + u64::from(PROTO_UDP);
            (src, &l3[IPV6_HEADER_LEN..IPV6_HEADER_LEN + plen], pseudo)
        }
        _ => return Err(FrameError::NotUdp),
    };
    let udp_len = usize::from(u16::from_be_bytes([udp[4], udp[5]]));
    if udp_len < UDP_HEADER_LEN || udp_len > udp.len() {
        return Err(FrameError::Truncated);
    }
    let udp = &udp[..udp_len];
    let field = u16::from_be_bytes([udp[6], udp[7]]);
    // IPv4 allows "no checksum" (0); IPv6 does not, but we only count, so accept it too.
    let checksum = if field == 0 {
        UdpChecksum::Absent
    } else if fold(sum_words(pseudo + udp_len as u64, udp)) == 0 {
        UdpChecksum::Verified
    } else if field == !fold(pseudo + udp_len as u64) {
        // Linux's udp_set_csum for CHECKSUM_PARTIAL stores the folded pseudo-header sum.
        UdpChecksum::LeftToOffload
    } else {
        return Err(FrameError::BadChecksum);
    };
    Ok(ParsedUdp {
        checksum,
        src,
        src_port: u16::from_be_bytes([udp[0], udp[1]]),
        dst_port: u16::from_be_bytes([udp[2], udp[3]]),
        payload: &udp[UDP_HEADER_LEN..],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    const T: WireTime = WireTime { sec: 1_700_000_000, usec: 42 };

    fn addrs(src: IpAddr, dst: IpAddr) -> FlowAddrs {
        FlowAddrs {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            src,
            dst,
            src_port: 40000,
            dst_port: 5300,
        }
    }

    #[test]
    fn ipv4_frame_layout_and_round_trip() {
        let a = addrs(Ipv4Addr::new(10, 77, 0, 1).into(), Ipv4Addr::new(10, 77, 0, 2).into());
        let t = FrameTemplate::new(&a, 22).unwrap();
        assert_eq!(t.frame_len(), 64, "a 22-byte datagram makes a 64-byte frame");
        let mut buf = vec![0xAAu8; 128];
        assert_eq!(t.write(&mut buf, 7, T, false), 64);
        assert_eq!(&buf[12..14], &[0x08, 0x00]);
        assert_eq!(&buf[16..18], &50u16.to_be_bytes(), "IPv4 total length");
        assert_eq!(fold(sum_words(0, &buf[14..34])), 0, "IPv4 header checksum verifies");
        let p = parse_udp(&buf[..64]).unwrap();
        assert_eq!((p.src, p.src_port, p.dst_port, p.payload.len()), (a.src, 40000, 5300, 22));
        assert_eq!(p.checksum, UdpChecksum::Verified);
        let d = payload::decode(p.payload).unwrap();
        assert_eq!((d.seq, d.fin, d.sent), (7, false, Some(T)));
        assert!(p.payload[payload::HEADER_LEN..].iter().all(|&b| b == 0), "filler is zeroed");
    }

    #[test]
    fn udp_checksum_is_the_rfc1071_sum_for_v4_and_v6() {
        for (src, dst) in [
            (IpAddr::from(Ipv4Addr::new(192, 0, 2, 1)), IpAddr::from(Ipv4Addr::new(198, 51, 100, 7))),
            ("fd77::1".parse::<Ipv6Addr>().unwrap().into(), "fd77::2".parse::<Ipv6Addr>().unwrap().into()),
        ] {
            for len in [20usize, 21, 1470] {
                let t = FrameTemplate::new(&addrs(src, dst), len).unwrap();
                let mut buf = vec![0u8; t.frame_len()];
                for seq in [1u64, 0xFFFF, 1 << 40] {
                    t.write(&mut buf, seq, T, seq == 0xFFFF);
                    // Independent computation: pseudo-header + whole UDP segment must sum to 0.
                    let l3 = header_len(src.is_ipv6()) - UDP_HEADER_LEN;
                    let udp = &buf[l3..];
                    let mut acc = 0;
                    match (src, dst) {
                        (IpAddr::V4(s), IpAddr::V4(d)) => {
                            acc = sum_words(acc, &s.octets());
                            acc = sum_words(acc, &d.octets());
                        }
                        (IpAddr::V6(s), IpAddr::V6(d)) => {
                            acc = sum_words(acc, &s.octets());
                            acc = sum_words(acc, &d.octets());
                        }
                        _ => unreachable!(),
                    }
                    acc += 17 + udp.len() as u64;
                    assert_eq!(fold(sum_words(acc, udp)), 0, "{src} len {len} seq {seq}");
                    let p = parse_udp(&buf).unwrap();
                    assert_eq!(payload::decode(p.payload).unwrap().fin, seq == 0xFFFF);
                }
            }
        }
    }

    #[test]
    fn wide_sum_equals_the_word_by_word_sum() {
        let data: Vec<u8> = (0..1500u32).map(|i| (i * 7919 % 251) as u8).collect();
        for len in [0usize, 1, 2, 7, 8, 9, 15, 16, 17, 63, 1499, 1500] {
            let slice = &data[..len];
            let mut naive = 0u64;
            for (i, b) in slice.iter().enumerate() {
                naive += if i % 2 == 0 { u64::from(*b) << 8 } else { u64::from(*b) };
            }
            assert_eq!(fold(sum_words(0, slice)), fold(naive), "length {len}");
        }
    }

    #[test]
    fn damaged_and_foreign_frames_are_refused() {
        let a = addrs(Ipv4Addr::new(10, 0, 0, 1).into(), Ipv4Addr::new(10, 0, 0, 2).into());
        let t = FrameTemplate::new(&a, 100).unwrap();
        let mut buf = vec![0u8; t.frame_len()];
        t.write(&mut buf, 3, T, false);
        assert_eq!(parse_udp(&buf[..40]), Err(FrameError::Truncated), "cut inside the UDP segment");
        let mut bad = buf.clone();
        bad[60] ^= 1;
        assert_eq!(parse_udp(&bad), Err(FrameError::BadChecksum), "a flipped payload bit");
        // A checksum left to a NIC that never computed it (kernel sender over veth): the
        // pseudo-header sum alone, as udp_set_csum writes it for CHECKSUM_PARTIAL.
        let mut partial = buf.clone();
        let pseudo = sum_words(0, &buf[26..34]) + 17 + 108;
        partial[40..42].copy_from_slice(&(!fold(pseudo)).to_be_bytes());
        assert_eq!(parse_udp(&partial).map(|p| p.checksum), Ok(UdpChecksum::LeftToOffload));
        partial[40] ^= 0x10;
        assert_eq!(parse_udp(&partial), Err(FrameError::BadChecksum), "any other wrong value is refused");
        let mut arp = buf.clone();
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        assert_eq!(parse_udp(&arp), Err(FrameError::NotUdp));
        assert_eq!(parse_udp(&buf[..10]), Err(FrameError::Truncated));
        assert!(FrameTemplate::new(&a, 19).is_err(), "too short for the sequence header");
        let mixed = addrs(Ipv4Addr::LOCALHOST.into(), Ipv6Addr::LOCALHOST.into());
        assert!(FrameTemplate::new(&mixed, 100).is_err(), "families must match");
    }
}
