//! The ethtool rx-classification ioctls (`SIOCETHTOOL` with a `struct ethtool_rxnfc`): the
//! fields a NIC's RSS hashes a flow type on (`ETHTOOL_GRXFH`, what `ethtool -n DEV
//! rx-flow-hash udp4` prints), and n-tuple flow rules that put one flow on one receive queue
//! (`ETHTOOL_SRXCLSRLINS` / `ETHTOOL_SRXCLSRLDEL`, what `ethtool -N DEV flow-type ...` does).
//!
//! The request is encoded by hand into the kernel's 192-byte layout ([`encode`], pure and
//! tested against the offsets of `<linux/ethtool.h>`), so that no binding is needed.

use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;

use crate::base::error::{Error, Result};

const SIOCETHTOOL: libc::c_ulong = 0x8946;
pub const ETHTOOL_GDRVINFO: u32 = 0x03;
pub const ETHTOOL_GRXFH: u32 = 0x29;
pub const ETHTOOL_GRXCLSRLCNT: u32 = 0x2e;
pub const ETHTOOL_SRXCLSRLDEL: u32 = 0x31;
pub const ETHTOOL_SRXCLSRLINS: u32 = 0x32;

pub const TCP_V4_FLOW: u32 = 0x01;
pub const UDP_V4_FLOW: u32 = 0x02;
pub const TCP_V6_FLOW: u32 = 0x05;
pub const UDP_V6_FLOW: u32 = 0x06;

/// Hash-field bits of `ETHTOOL_GRXFH`'s answer.
pub const RXH_IP_SRC: u64 = 1 << 4;
pub const RXH_IP_DST: u64 = 1 << 5;
pub const RXH_L4_B_0_1: u64 = 1 << 6;
pub const RXH_L4_B_2_3: u64 = 1 << 7;

/// `location` asking the driver to choose the rule's slot.
pub const RX_CLS_LOC_ANY: u32 = 0xffff_ffff;

/// Size of `struct ethtool_rxnfc` and the offsets used in it (and in its `fs`, a `struct
/// ethtool_rx_flow_spec` at offset 16).
pub const RXNFC_LEN: usize = 192;
const FS: usize = 16;
const FS_FLOW_TYPE: usize = FS;
const FS_H_U: usize = FS + 4;
const FS_M_U: usize = FS + 76;
const FS_RING_COOKIE: usize = FS + 152;
const FS_LOCATION: usize = FS + 160;

/// Whether a flow type's hash fields include both port halves: only then can a source port
/// choose the queue.
pub fn hashes_ports(fields: u64) -> bool {
    fields & (RXH_L4_B_0_1 | RXH_L4_B_2_3) == RXH_L4_B_0_1 | RXH_L4_B_2_3
}

/// The hash fields in ethtool's words.
pub fn describe_fields(fields: u64) -> String {
    let names: Vec<&str> = [
        (RXH_IP_SRC, "IP SA"),
        (RXH_IP_DST, "IP DA"),
        (RXH_L4_B_0_1, "L4 bytes 0 & 1 [source port]"),
        (RXH_L4_B_2_3, "L4 bytes 2 & 3 [destination port]"),
    ]
    .iter()
    .filter(|(bit, _)| fields & bit != 0)
    .map(|(_, n)| *n)
    .collect();
    if names.is_empty() {
        "nothing".into()
    } else {
        names.join(", ")
    }
}

/// One flow to one receive queue: the packets from `src` to `dst` (as the receiver sees them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowRule {
    pub udp: bool,
    pub src: SocketAddr,
    pub dst: SocketAddr,
    pub queue: u32,
    /// The slot; [`RX_CLS_LOC_ANY`] to let the driver choose.
    pub location: u32,
}

/// A `struct ethtool_rxnfc` for `cmd`: `flow_type` and, for a rule, its match (every field of
/// the 4-tuple, masks all ones), action (the receive queue) and location.
pub fn encode(cmd: u32, flow_type: u32, rule: Option<&FlowRule>) -> [u8; RXNFC_LEN] {
    let mut b = [0u8; RXNFC_LEN];
    b[0..4].copy_from_slice(&cmd.to_ne_bytes());
    b[4..8].copy_from_slice(&flow_type.to_ne_bytes());
    let Some(r) = rule else { return b };
    let ft = match (r.src.ip(), r.udp) {
        (IpAddr::V4(_), false) => TCP_V4_FLOW,
        (IpAddr::V4(_), true) => UDP_V4_FLOW,
        (IpAddr::V6(_), false) => TCP_V6_FLOW,
        (IpAddr::V6(_), true) => UDP_V6_FLOW,
    };
    b[FS_FLOW_TYPE..FS_FLOW_TYPE + 4].copy_from_slice(&ft.to_ne_bytes());
    // Addresses and ports are in network order; the mask marks every bit as matched.
    let put = |b: &mut [u8; RXNFC_LEN], at: usize, bytes: &[u8]| {
        b[at..at + bytes.len()].copy_from_slice(bytes);
        b[at - FS_H_U + FS_M_U..at - FS_H_U + FS_M_U + bytes.len()].fill(0xff);
    };
    let (ports_at, src, dst): (usize, Vec<u8>, Vec<u8>) = match (r.src.ip(), r.dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => (FS_H_U + 8, s.octets().to_vec(), d.octets().to_vec()),
        (s, d) => {
            let v6 = |ip: IpAddr| match ip {
                IpAddr::V6(a) => a.octets().to_vec(),
                IpAddr::V4(a) => a.to_ipv6_mapped().octets().to_vec(),
            };
            (FS_H_U + 32, v6(s), v6(d))
        }
    };
    put(&mut b, FS_H_U, &src);
    put(&mut b, FS_H_U + src.len(), &dst);
    put(&mut b, ports_at, &r.src.port().to_be_bytes());
    put(&mut b, ports_at + 2, &r.dst.port().to_be_bytes());
    b[FS_RING_COOKIE..FS_RING_COOKIE + 8].copy_from_slice(&u64::from(r.queue).to_ne_bytes());
    b[FS_LOCATION..FS_LOCATION + 4].copy_from_slice(&r.location.to_ne_bytes());
    b
}

/// The `data` field of an answer (GRXFH: the hash fields; GRXCLSRLCNT: the table size).
pub fn answer_data(b: &[u8; RXNFC_LEN]) -> u64 {
    u64::from_ne_bytes(b[8..16].try_into().unwrap_or_default())
}

/// The `location` the kernel wrote back after an insert.
pub fn answer_location(b: &[u8; RXNFC_LEN]) -> u32 {
    u32::from_ne_bytes(b[FS_LOCATION..FS_LOCATION + 4].try_into().unwrap_or_default())
}

/// One `SIOCETHTOOL` call on `iface` with `req`, answered in place.
fn call(iface: &str, req: &mut [u8]) -> std::io::Result<()> {
    let sock = std::net::UdpSocket::bind("0.0.0.0:0").or_else(|_| std::net::UdpSocket::bind("[::]:0"))?;
    let mut ifr = [0u8; 40];
    let name = iface.as_bytes();
    if name.is_empty() || name.len() >= libc::IFNAMSIZ {
        return Err(std::io::Error::from_raw_os_error(libc::ENODEV));
    }
    ifr[..name.len()].copy_from_slice(name);
    // ifr_data (a pointer) follows the 16-byte name.
    ifr[16..24].copy_from_slice(&(req.as_mut_ptr() as usize).to_ne_bytes());
    // SAFETY: ifr is a struct ifreq (name, then the data pointer) that lives across the call;
    // the pointer names req, the whole ethtool struct its command reads and writes back
    // (callers pass a buffer of that struct's full size).
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), SIOCETHTOOL, ifr.as_mut_ptr()) };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The fields `iface`'s RSS hashes `flow_type` on (`ethtool -n IFACE rx-flow-hash udp4`).
pub fn flow_hash_fields(iface: &str, flow_type: u32) -> Result<u64> {
    let mut req = encode(ETHTOOL_GRXFH, flow_type, None);
    call(iface, &mut req).map_err(|e| Error::io(format!("reading {iface}'s RSS hash fields (ETHTOOL_GRXFH)"), e))?;
    Ok(answer_data(&req))
}

/// Why `iface` cannot take n-tuple flow rules (the driver's rule table cannot be read), or None.
pub fn ntuple_unsupported(iface: &str) -> Option<String> {
    let mut req = encode(ETHTOOL_GRXCLSRLCNT, 0, None);
    match call(iface, &mut req) {
        Ok(()) => None,
        Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
            let driver = driver_name(iface).unwrap_or_else(|| "its driver".into());
            Some(format!(
                "{iface} ({driver}) has no n-tuple flow rules (ETHTOOL_GRXCLSRLCNT: not supported; `ethtool -k {iface}` shows ntuple-filters off [fixed])"
            ))
        }
        Err(e) => Some(format!("{iface}: reading its n-tuple rule table failed: {e}")),
    }
}

/// The driver of `iface` as ethtool names it (`ETHTOOL_GDRVINFO`: veth, virtio_net, mlx5_core).
pub fn driver_name(iface: &str) -> Option<String> {
    // struct ethtool_drvinfo: cmd, then driver[32], ... (196 bytes in all).
    let mut req = [0u8; 196];
    req[0..4].copy_from_slice(&ETHTOOL_GDRVINFO.to_ne_bytes());
    call(iface, &mut req).ok()?;
    let name = &req[4..36];
    let end = name.iter().position(|&c| c == 0).unwrap_or(name.len());
    Some(String::from_utf8_lossy(&name[..end]).into_owned()).filter(|n| !n.is_empty())
}

/// Installs `rule`; returns the slot the driver put it in (for [`delete_rule`]).
pub fn insert_rule(iface: &str, rule: &FlowRule) -> Result<u32> {
    let mut req = encode(ETHTOOL_SRXCLSRLINS, 0, Some(rule));
    call(iface, &mut req).map_err(|e| {
        Error::io(format!("installing an n-tuple rule on {iface} ({} → rx queue {})", rule.src, rule.queue), e)
    })?;
    Ok(answer_location(&req))
}

/// Removes the rule in slot `location`.
pub fn delete_rule(iface: &str, location: u32) -> Result<()> {
    let rule = FlowRule {
        udp: false,
        src: SocketAddr::from(([0, 0, 0, 0], 0)),
        dst: SocketAddr::from(([0, 0, 0, 0], 0)),
        queue: 0,
        location,
    };
    let mut req = encode(ETHTOOL_SRXCLSRLDEL, 0, Some(&rule));
    call(iface, &mut req).map_err(|e| Error::io(format!("removing n-tuple rule {location} from {iface}"), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Offsets from <linux/ethtool.h> on x86_64 (offsetof): fs at 16, fs.h_u at 4, fs.m_u at
    // 76, fs.ring_cookie at 152, fs.location at 160; tcpip4 ports at 8, tcpip6 ports at 32.
    #[test]
    fn a_udp4_rule_is_laid_out_as_the_kernel_reads_it() {
        let rule = FlowRule {
            udp: true,
            src: "10.77.0.1:40000".parse().unwrap(),
            dst: "10.77.0.2:5300".parse().unwrap(),
            queue: 3,
            location: RX_CLS_LOC_ANY,
        };
        let b = encode(ETHTOOL_SRXCLSRLINS, 0, Some(&rule));
        assert_eq!(b.len(), 192);
        assert_eq!(&b[0..4], &50u32.to_ne_bytes(), "ETHTOOL_SRXCLSRLINS");
        assert_eq!(&b[16..20], &UDP_V4_FLOW.to_ne_bytes());
        assert_eq!(&b[20..24], &[10, 77, 0, 1], "ip4src");
        assert_eq!(&b[24..28], &[10, 77, 0, 2], "ip4dst");
        assert_eq!(&b[28..30], &40000u16.to_be_bytes(), "psrc");
        assert_eq!(&b[30..32], &5300u16.to_be_bytes(), "pdst");
        assert_eq!(b[32], 0, "tos not matched");
        assert_eq!(&b[92..104], &[0xff; 12], "mask: addresses and ports");
        assert_eq!(b[104], 0, "tos mask clear");
        assert_eq!(&b[168..176], &3u64.to_ne_bytes(), "ring_cookie: rx queue 3");
        assert_eq!(&b[176..180], &RX_CLS_LOC_ANY.to_ne_bytes());
        assert_eq!(answer_location(&b), RX_CLS_LOC_ANY);
    }

    #[test]
    fn a_tcp6_rule_puts_ports_after_both_addresses() {
        let rule = FlowRule {
            udp: false,
            src: "[fd77::1]:40001".parse().unwrap(),
            dst: "[fd77::2]:5300".parse().unwrap(),
            queue: 1,
            location: 7,
        };
        let b = encode(ETHTOOL_SRXCLSRLINS, 0, Some(&rule));
        assert_eq!(&b[16..20], &TCP_V6_FLOW.to_ne_bytes());
        assert_eq!(b[20..36], "fd77::1".parse::<std::net::Ipv6Addr>().unwrap().octets());
        assert_eq!(b[36..52], "fd77::2".parse::<std::net::Ipv6Addr>().unwrap().octets());
        assert_eq!(&b[52..54], &40001u16.to_be_bytes());
        assert_eq!(&b[54..56], &5300u16.to_be_bytes());
        assert_eq!(&b[92..128], &[0xff; 36]);
        assert_eq!(&b[176..180], &7u32.to_ne_bytes());
    }

    #[test]
    fn hash_field_queries_and_their_answers() {
        let mut b = encode(ETHTOOL_GRXFH, UDP_V6_FLOW, None);
        assert_eq!(&b[0..4], &41u32.to_ne_bytes());
        assert_eq!(&b[4..8], &6u32.to_ne_bytes());
        assert!(b[8..].iter().all(|&x| x == 0));
        b[8..16].copy_from_slice(&(RXH_IP_SRC | RXH_IP_DST).to_ne_bytes());
        let fields = answer_data(&b);
        assert!(!hashes_ports(fields));
        assert_eq!(describe_fields(fields), "IP SA, IP DA");
        assert!(hashes_ports(fields | RXH_L4_B_0_1 | RXH_L4_B_2_3));
        assert!(!hashes_ports(fields | RXH_L4_B_2_3), "the source port half must be hashed");
    }
}
