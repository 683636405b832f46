//! The kernel's neighbour table (ARP for IPv4, NDP for IPv6): the link-layer address of a next
//! hop, which a sender that writes whole Ethernet frames (the AF_XDP engine) must put in them.
//!
//! Asked over rtnetlink (`RTM_GETNEIGH` dump of one interface) with the same hand-written
//! helpers as the route lookup. When the entry is missing or unusable, [`resolve`] makes the
//! kernel resolve it by sending one UDP datagram to the address's discard port through an
//! ordinary socket, then asks again.

use crate::base::error::{Error, Result};
use crate::sys::netlink::{self, NLM_F_DUMP};
use std::net::IpAddr;
use std::time::{Duration, Instant};

const RTM_NEWNEIGH: u16 = 28;
const RTM_GETNEIGH: u16 = 30;
const NDA_DST: u16 = 1;
const NDA_LLADDR: u16 = 2;
/// `struct ndmsg`: family, pad, pad16, ifindex, state, flags, type.
const NDMSG_LEN: usize = 12;
const NUD_INCOMPLETE: u16 = 0x01;
const NUD_FAILED: u16 = 0x20;

/// One entry: the address, its link-layer address, its NUD state bits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Neighbour {
    pub ip: IpAddr,
    pub lladdr: Vec<u8>,
    pub state: u16,
}

impl Neighbour {
    /// Entries being resolved or that failed carry no usable address.
    pub(crate) fn usable(&self) -> bool {
        self.state & (NUD_INCOMPLETE | NUD_FAILED) == 0 && self.lladdr.len() == 6
    }
}

/// The body of a dump request for the neighbours of `ifindex` in `family`.
fn request(family: u8, ifindex: u32) -> Vec<u8> {
    let mut body = vec![0u8; NDMSG_LEN];
    body[0] = family;
    body[4..8].copy_from_slice(&(ifindex as i32).to_ne_bytes());
    body
}

/// Decodes the entries of an `RTM_GETNEIGH` dump reply, keeping those of `ifindex`.
pub(crate) fn parse_dump(reply: &[u8], ifindex: u32, what: &str) -> Result<Vec<Neighbour>> {
    let mut out = Vec::new();
    for msg in netlink::data_messages(reply, what)? {
        if msg.kind != RTM_NEWNEIGH || msg.payload.len() < NDMSG_LEN {
            continue;
        }
        let p = msg.payload;
        if netlink::u32_at(p, 4) != Some(ifindex) {
            continue;
        }
        let state = netlink::u16_at(p, 8).unwrap_or(0);
        let attrs = netlink::attrs(&p[NDMSG_LEN..], what)?;
        let ip = match netlink::find(&attrs, NDA_DST) {
            Some(v) if v.len() == 4 => IpAddr::from(<[u8; 4]>::try_from(v).unwrap_or_default()),
            Some(v) if v.len() == 16 => IpAddr::from(<[u8; 16]>::try_from(v).unwrap_or_default()),
            _ => continue,
        };
        let lladdr = netlink::find(&attrs, NDA_LLADDR).map(<[u8]>::to_vec).unwrap_or_default();
        out.push(Neighbour { ip, lladdr, state });
    }
    Ok(out)
}

/// The table's entry for `ip` on `ifindex`, if any.
pub fn lookup(ip: IpAddr, ifindex: u32) -> Result<Option<Neighbour>> {
    let ip = ip.to_canonical();
    let family = if ip.is_ipv4() { libc::AF_INET } else { libc::AF_INET6 } as u8;
    let what = format!("neighbour lookup for {ip}");
    let mut sock = netlink::Socket::open()?;
    let reply = sock.request(RTM_GETNEIGH, NLM_F_DUMP, &request(family, ifindex), &what)?;
    Ok(parse_dump(&reply, ifindex, &what)?.into_iter().find(|n| n.ip == ip))
}

/// The MAC address of `ip` on `ifindex`: from the table, or after making the kernel resolve
/// it (one datagram to port 9, discard) and waiting up to `wait`.
pub(crate) fn resolve(ip: IpAddr, ifindex: u32, ifname: &str, wait: Duration) -> Result<[u8; 6]> {
    let ip = ip.to_canonical();
    let usable =
        |n: Option<Neighbour>| n.filter(Neighbour::usable).map(|n| <[u8; 6]>::try_from(n.lladdr).unwrap_or_default());
    if let Some(mac) = usable(lookup(ip, ifindex)?) {
        return Ok(mac);
    }
    let bind: IpAddr = if ip.is_ipv4() { [0u8; 4].into() } else { [0u16; 8].into() };
    let probe =
        std::net::UdpSocket::bind((bind, 0)).map_err(|e| Error::io("opening a socket to probe the neighbour", e))?;
    let _ = probe.send_to(b"uringbench neighbour probe", (ip, 9));
    let end = Instant::now() + wait;
    while Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
        if let Some(mac) = usable(lookup(ip, ifindex)?) {
            return Ok(mac);
        }
    }
    Err(Error::peer(format!(
        "no link-layer address for next hop {ip} on {ifname} after {:.1} s (unreachable? check `ip neigh show dev {ifname}`, or add one: ip neigh replace {ip} lladdr MAC dev {ifname})",
        wait.as_secs_f64()
    )))
}

/// The MAC address of a local interface, from sysfs.
pub(crate) fn interface_mac(ifname: &str) -> Result<[u8; 6]> {
    let path = format!("/sys/class/net/{ifname}/address");
    let text = std::fs::read_to_string(&path).map_err(|e| Error::io(format!("reading {path}"), e))?;
    parse_mac(text.trim())
        .ok_or_else(|| Error::unsupported(format!("{ifname} has no Ethernet address ('{}')", text.trim())))
}

/// `aa:bb:cc:dd:ee:ff` to bytes.
pub(crate) fn parse_mac(text: &str) -> Option<[u8; 6]> {
    let parts: Vec<u8> =
        text.split(':').map(|p| u8::from_str_radix(p, 16)).collect::<std::result::Result<_, _>>().ok()?;
    parts.try_into().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(ifindex: u32, state: u16, dst: &[u8], mac: Option<&[u8]>) -> Vec<u8> {
        let mut body = request(if dst.len() == 4 { 2 } else { 10 }, ifindex);
        body[8..10].copy_from_slice(&state.to_ne_bytes());
        netlink::push_attr(&mut body, NDA_DST, dst);
        if let Some(m) = mac {
            netlink::push_attr(&mut body, NDA_LLADDR, m);
        }
        let mut msg = Vec::new();
        msg.extend_from_slice(&((16 + body.len()) as u32).to_ne_bytes());
        msg.extend_from_slice(&RTM_NEWNEIGH.to_ne_bytes());
        msg.extend_from_slice(&netlink::NLM_F_MULTI.to_ne_bytes());
        msg.extend_from_slice(&[0; 8]);
        msg.extend_from_slice(&body);
        msg
    }

    #[test]
    fn dump_keeps_the_interface_and_decodes_entries() {
        let mut reply = entry(3, 0x80, &[10, 77, 0, 2], Some(&[2, 1, 2, 3, 4, 5]));
        reply.extend(entry(4, 0x02, &[10, 77, 0, 9], Some(&[9; 6])));
        reply.extend(entry(3, NUD_INCOMPLETE, &[10, 77, 0, 3], None));
        let got = parse_dump(&reply, 3, "test").unwrap();
        assert_eq!(got.len(), 2, "the entry of interface 4 is left out");
        assert_eq!(got[0].ip, IpAddr::from([10, 77, 0, 2]));
        assert!(got[0].usable());
        assert_eq!(got[0].lladdr, vec![2, 1, 2, 3, 4, 5]);
        assert!(!got[1].usable(), "an incomplete entry has no address to use");
    }

    #[test]
    fn macs_parse() {
        assert_eq!(parse_mac("02:1a:ff:00:10:0b"), Some([2, 0x1a, 0xff, 0, 0x10, 0x0b]));
        assert_eq!(parse_mac("02:1a:ff"), None);
        assert_eq!(parse_mac("zz:1a:ff:00:10:0b"), None);
    }
}
