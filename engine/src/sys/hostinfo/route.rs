//! Which interface the kernel would send a packet for a destination out of.
//!
//! The verdict needs the egress interface to read the right counters, link speed and qdisc,
//! and a test's target is often named by an address that is not on any local interface.
//! This asks the kernel the same question `ip route get ADDR` does (an `RTM_GETROUTE` request
//! with the destination), so policy routing, VRFs and namespaces are all taken into account.

use std::net::IpAddr;

use serde::Serialize;

use crate::base::error::{Error, Result};
use crate::sys::netlink::{self, RTM_GETROUTE, RTM_NEWROUTE};

// Kernel UAPI constants: rtnetlink
const RTA_DST: u16 = 1;
const RTA_OIF: u16 = 4;
const RTA_GATEWAY: u16 = 5;
const RTA_PREFSRC: u16 = 7;
const RTA_VIA: u16 = 18;
const RTM_F_LOOKUP_TABLE: u32 = 0x1000;
const RTN_LOCAL: u8 = 2;
const RTN_BLACKHOLE: u8 = 6;
const RTN_UNREACHABLE: u8 = 7;
const RTN_PROHIBIT: u8 = 8;
/// `struct rtmsg`: family, dst_len, src_len, tos, table, protocol, scope, type, flags.
const RTMSG_LEN: usize = 12;

/// The route the kernel picked for a destination.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Route {
    /// Output interface index (`RTA_OIF`).
    pub ifindex: u32,
    /// Its name in the caller's namespace; empty if it vanished between the two questions.
    pub ifname: String,
    /// The source address the kernel would use (`RTA_PREFSRC`).
    pub source: Option<IpAddr>,
    /// The next hop, when the destination is not on a directly connected network.
    pub gateway: Option<IpAddr>,
    /// The destination is an address of this host: traffic is looped back, whatever the
    /// address looks like.
    pub local: bool,
}

/// The parts of an `RTM_NEWROUTE` answer we use, before the interface name is looked up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RouteReply {
    pub ifindex: u32,
    pub source: Option<IpAddr>,
    pub gateway: Option<IpAddr>,
    pub route_type: u8,
}

/// Asks the kernel which route `dst` takes, in the caller's network namespace.
pub fn route_to(dst: IpAddr) -> Result<Route> {
    // A dual-stack listener sees IPv4 peers as ::ffff:a.b.c.d; the kernel routes those as IPv4.
    let dst = dst.to_canonical();
    let what = format!("route lookup for {dst}");
    let mut sock = netlink::Socket::open()?;
    let reply = sock.request(RTM_GETROUTE, 0, &route_request(dst), &what)?;
    let r = parse_route_reply(&reply, &what)?;
    Ok(Route {
        ifindex: r.ifindex,
        ifname: netlink::ifname(r.ifindex).unwrap_or_default(),
        source: r.source,
        gateway: r.gateway,
        local: r.route_type == RTN_LOCAL,
    })
}

/// The body of an `RTM_GETROUTE` request for one destination (after the netlink header).
pub(crate) fn route_request(dst: IpAddr) -> Vec<u8> {
    let (family, bits, octets) = match dst {
        IpAddr::V4(a) => (libc::AF_INET as u8, 32u8, a.octets().to_vec()),
        IpAddr::V6(a) => (libc::AF_INET6 as u8, 128u8, a.octets().to_vec()),
    };
    let mut body = vec![family, bits, 0, 0, 0, 0, 0, 0];
    body.extend_from_slice(&RTM_F_LOOKUP_TABLE.to_ne_bytes());
    netlink::push_attr(&mut body, RTA_DST, &octets);
    body
}

/// Decodes the kernel's answer to [`route_request`] (the raw reply, netlink headers included).
pub(crate) fn parse_route_reply(reply: &[u8], what: &str) -> Result<RouteReply> {
    let msgs = netlink::data_messages(reply, what)?;
    let msg = msgs
        .iter()
        .find(|m| m.kind == RTM_NEWROUTE)
        .ok_or_else(|| netlink::malformed(what, "no RTM_NEWROUTE message in the reply"))?;
    if msg.payload.len() < RTMSG_LEN {
        return Err(netlink::malformed(what, format!("rtmsg of {} bytes", msg.payload.len())));
    }
    let family = msg.payload[0];
    let route_type = msg.payload[7];
    let attrs = netlink::attrs(&msg.payload[RTMSG_LEN..], what)?;
    let ifindex = netlink::find(&attrs, RTA_OIF).and_then(|v| netlink::u32_at(v, 0));
    let ifindex = match (ifindex, route_type) {
        (Some(i), _) => i,
        (None, RTN_BLACKHOLE) => return Err(Error::unsupported(format!("{what}: the route is a blackhole"))),
        (None, RTN_UNREACHABLE) => return Err(Error::unsupported(format!("{what}: the route is unreachable"))),
        (None, RTN_PROHIBIT) => return Err(Error::unsupported(format!("{what}: the route is prohibited"))),
        (None, t) => return Err(netlink::malformed(what, format!("route of type {t} has no output interface"))),
    };
    let gateway = match netlink::find(&attrs, RTA_GATEWAY) {
        Some(v) => Some(ip_from(family, v).ok_or_else(|| netlink::malformed(what, "bad RTA_GATEWAY"))?),
        // RTA_VIA: a next hop of another family (IPv6 routes via IPv4 gateways):
        // struct rtvia { __kernel_sa_family_t rtvia_family; __u8 rtvia_addr[]; }
        None => match netlink::find(&attrs, RTA_VIA) {
            Some(v) => {
                let fam = netlink::u16_at(v, 0).ok_or_else(|| netlink::malformed(what, "short RTA_VIA"))?;
                Some(ip_from(fam as u8, &v[2..]).ok_or_else(|| netlink::malformed(what, "bad RTA_VIA"))?)
            }
            None => None,
        },
    };
    let source = match netlink::find(&attrs, RTA_PREFSRC) {
        Some(v) => Some(ip_from(family, v).ok_or_else(|| netlink::malformed(what, "bad RTA_PREFSRC"))?),
        None => None,
    };
    Ok(RouteReply { ifindex, source, gateway, route_type })
}

fn ip_from(family: u8, bytes: &[u8]) -> Option<IpAddr> {
    match i32::from(family) {
        libc::AF_INET => Some(IpAddr::from(<[u8; 4]>::try_from(bytes).ok()?)),
        libc::AF_INET6 => Some(IpAddr::from(<[u8; 16]>::try_from(bytes).ok()?)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Replies captured on Linux 6.18 (x86_64, so little-endian) inside namespace hi-a of
    // `scripts/netns-pair.sh up --name hi` (hia0 = ifindex 2, 10.77.0.1 / fd77::1), with
    // `ip route add 198.51.100.0/24 via 10.77.0.2` and `ip -6 route add 2001:db8::/32 via fd77::2`.

    /// `ip route get 10.77.0.2` → dev hia0 src 10.77.0.1 (on-link, no gateway)
    const V4_ONLINK: &[u8] = &[
        0x68, 0x00, 0x00, 0x00, 0x18, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x4b, 0x66, 0x00, 0x00, //
        0x02, 0x20, 0x00, 0x00, 0xfe, 0x00, 0x00, 0x01, 0x00, 0x02, 0x00, 0x00, 0x08, 0x00, 0x0f, 0x00, //
        0xfe, 0x00, 0x00, 0x00, 0x08, 0x00, 0x01, 0x00, 0x0a, 0x4d, 0x00, 0x02, 0x08, 0x00, 0x04, 0x00, //
        0x02, 0x00, 0x00, 0x00, 0x08, 0x00, 0x07, 0x00, 0x0a, 0x4d, 0x00, 0x01, 0x08, 0x00, 0x19, 0x00, //
        0x00, 0x00, 0x00, 0x00, 0x24, 0x00, 0x0c, 0x00, 0x02, 0x00, 0x00, 0x00, 0x9a, 0x01, 0x00, 0x00, //
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, //
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    ];

    /// `ip route get 198.51.100.7` → via 10.77.0.2 dev hia0 src 10.77.0.1
    const V4_VIA_GATEWAY: &[u8] = &[
        0x70, 0x00, 0x00, 0x00, 0x18, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x67, 0x00, 0x00, //
        0x02, 0x20, 0x00, 0x00, 0xfe, 0x00, 0x00, 0x01, 0x00, 0x02, 0x00, 0x00, 0x08, 0x00, 0x0f, 0x00, //
        0xfe, 0x00, 0x00, 0x00, 0x08, 0x00, 0x01, 0x00, 0xc6, 0x33, 0x64, 0x07, 0x08, 0x00, 0x04, 0x00, //
        0x02, 0x00, 0x00, 0x00, 0x08, 0x00, 0x07, 0x00, 0x0a, 0x4d, 0x00, 0x01, 0x08, 0x00, 0x05, 0x00, //
        0x0a, 0x4d, 0x00, 0x02, 0x08, 0x00, 0x19, 0x00, 0x00, 0x00, 0x00, 0x00, 0x24, 0x00, 0x0c, 0x00, //
        0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, //
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    ];

    /// `ip route get 127.0.0.1` → local, dev lo
    const V4_LOCAL: &[u8] = &[
        0x68, 0x00, 0x00, 0x00, 0x18, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0xac, 0x66, 0x00, 0x00, //
        0x02, 0x20, 0x00, 0x00, 0xfe, 0x00, 0x00, 0x02, 0x00, 0x02, 0x00, 0x80, 0x08, 0x00, 0x0f, 0x00, //
        0xfe, 0x00, 0x00, 0x00, 0x08, 0x00, 0x01, 0x00, 0x7f, 0x00, 0x00, 0x01, 0x08, 0x00, 0x04, 0x00, //
        0x01, 0x00, 0x00, 0x00, 0x08, 0x00, 0x07, 0x00, 0x7f, 0x00, 0x00, 0x01, 0x08, 0x00, 0x19, 0x00, //
        0x00, 0x00, 0x00, 0x00, 0x24, 0x00, 0x0c, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, //
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, //
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    ];

    /// `ip -6 route get 2001:db8::5` → via fd77::2 dev hia0 src fd77::1
    const V6_VIA_GATEWAY: &[u8] = &[
        0xb0, 0x00, 0x00, 0x00, 0x18, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x29, 0x67, 0x00, 0x00, //
        0x0a, 0x80, 0x80, 0x00, 0xfe, 0x03, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x08, 0x00, 0x0f, 0x00, //
        0xfe, 0x00, 0x00, 0x00, 0x14, 0x00, 0x01, 0x00, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00, 0x00, 0x00, //
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x05, 0x14, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, //
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x07, 0x00, //
        0xfd, 0x77, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, //
        0x08, 0x00, 0x06, 0x00, 0x00, 0x04, 0x00, 0x00, 0x14, 0x00, 0x05, 0x00, 0xfd, 0x77, 0x00, 0x00, //
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x08, 0x00, 0x04, 0x00, //
        0x02, 0x00, 0x00, 0x00, 0x24, 0x00, 0x0c, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, //
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, //
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x05, 0x00, 0x14, 0x00, 0x00, 0x00, 0x00, 0x00,
    ];

    /// `ip route get 192.0.2.1` with no default route → NLMSG_ERROR -101 (ENETUNREACH)
    const V4_NO_ROUTE: &[u8] = &[
        0x38, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x83, 0x66, 0x00, 0x00, //
        0x9b, 0xff, 0xff, 0xff, 0x24, 0x00, 0x00, 0x00, 0x1a, 0x00, 0x01, 0x00, 0x01, 0x00, 0x00, 0x00, //
        0x00, 0x00, 0x00, 0x00, 0x02, 0x20, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, //
        0x08, 0x00, 0x01, 0x00, 0xc0, 0x00, 0x02, 0x01,
    ];

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    #[cfg(target_endian = "little")]
    fn captured_ipv4_routes() {
        let r = parse_route_reply(V4_ONLINK, "t").unwrap();
        assert_eq!((r.ifindex, r.source, r.gateway), (2, Some(ip("10.77.0.1")), None), "on-link: no gateway");
        let r = parse_route_reply(V4_VIA_GATEWAY, "t").unwrap();
        assert_eq!((r.ifindex, r.source, r.gateway), (2, Some(ip("10.77.0.1")), Some(ip("10.77.0.2"))));
        let r = parse_route_reply(V4_LOCAL, "t").unwrap();
        assert_eq!((r.ifindex, r.route_type), (1, RTN_LOCAL), "127.0.0.1 is a local route out of lo");
    }

    #[test]
    #[cfg(target_endian = "little")]
    fn captured_ipv6_route_with_gateway() {
        let r = parse_route_reply(V6_VIA_GATEWAY, "t").unwrap();
        assert_eq!(r.ifindex, 2);
        assert_eq!(r.source, Some(ip("fd77::1")));
        assert_eq!(r.gateway, Some(ip("fd77::2")));
    }

    #[test]
    #[cfg(target_endian = "little")]
    fn no_route_is_a_one_line_error() {
        let err = parse_route_reply(V4_NO_ROUTE, "route lookup for 192.0.2.1").unwrap_err();
        assert!(
            err.message.starts_with("route lookup for 192.0.2.1: ") && err.message.contains("unreachable"),
            "names the destination and the kernel's reason: {err}"
        );
        assert!(!err.message.contains('\n'));
    }

    #[test]
    #[cfg(target_endian = "little")]
    fn truncated_or_garbled_replies_are_errors_not_panics() {
        for cut in [0, 10, 16, 20, 27, 40, 45, V4_VIA_GATEWAY.len() - 1] {
            let mut short = V4_VIA_GATEWAY[..cut].to_vec();
            // keep the header's length honest so the attribute walk is what gets tested
            if cut >= 4 {
                short[..4].copy_from_slice(&(cut as u32).to_ne_bytes());
            }
            let _ = parse_route_reply(&short, "t"); // must not panic
        }
        assert!(parse_route_reply(&[], "t").is_err(), "empty reply");
        let mut bad = V4_ONLINK.to_vec();
        bad[52] = 0x06; // RTA_PREFSRC of 2 bytes: not an IPv4 address
        assert!(parse_route_reply(&bad, "t").is_err(), "a 2-byte source address is an error");
        let mut no_oif = V4_ONLINK.to_vec();
        no_oif[46] = 0x3f; // turn RTA_OIF into an attribute type nobody knows
        assert!(parse_route_reply(&no_oif, "t").is_err(), "a route without an output interface is an error");
    }

    #[test]
    fn request_carries_destination() {
        let body = route_request(ip("10.77.0.2"));
        assert_eq!(&body[..2], &[libc::AF_INET as u8, 32], "family and a host-length prefix");
        assert_eq!(body.len(), 12 + 4 + 4, "rtmsg, then one RTA_DST attribute");
        assert_eq!(&body[16..], &[10, 77, 0, 2], "the destination, in network order");
        let body6 = route_request(ip("::1"));
        assert_eq!(body6.len(), 12 + 4 + 16);
    }

    #[test]
    fn loopback_lookup_in_this_namespace() {
        let r = route_to(ip("127.0.0.1"))
            .expect("127.0.0.1 routes via lo (in a fresh namespace, `ip link set lo up` first)");
        assert_eq!(r.ifname, "lo");
        assert!(r.local, "127.0.0.1 is a local address");
        let mapped = route_to(ip("::ffff:127.0.0.1")).expect("a v4-mapped peer of a dual-stack socket");
        assert_eq!(mapped.ifname, "lo", "v4-mapped addresses route as IPv4");
    }
}
