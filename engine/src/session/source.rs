//! Who a receiver counts a connection or a test against: one IPv4 address, or one IPv6 /64.
//! A host is usually given a whole /64 and may send from any address in it, so counting IPv6
//! per address would let one host take every slot by rotating its source address.

use std::fmt;
use std::net::{IpAddr, Ipv6Addr};

/// The prefix length an IPv6 source is counted by: the usual size of one host's (or one
/// subscriber's) network.
pub(crate) const IPV6_SOURCE_PREFIX: u8 = 64;

/// A source as the per-source limits count it (`--max-pending-per-source`,
/// `--max-sessions-per-source`, the seconds per source): an IPv4 address (a v4-mapped IPv6
/// one counts as its IPv4 address), or the /64 an IPv6 address is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Source(IpAddr);

impl Source {
    pub(crate) fn of(ip: IpAddr) -> Self {
        match ip.to_canonical() {
            IpAddr::V6(a) => {
                let mask = u128::MAX << (128 - u32::from(IPV6_SOURCE_PREFIX));
                Self(IpAddr::V6(Ipv6Addr::from(u128::from(a) & mask)))
            }
            v4 => Self(v4),
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            IpAddr::V6(net) => write!(f, "{net}/{IPV6_SOURCE_PREFIX}"),
            v4 => write!(f, "{v4}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn ipv6_addresses_of_one_64_are_one_source_and_ipv4_addresses_are_their_own() {
        let a = Source::of(ip("2001:db8:1:2::10"));
        assert_eq!(a, Source::of(ip("2001:db8:1:2:ffff:ffff:ffff:ffff")), "anywhere in the /64");
        assert_ne!(a, Source::of(ip("2001:db8:1:3::10")), "the next /64 is another source");
        assert_eq!(a.to_string(), "2001:db8:1:2::/64");
        assert_eq!(Source::of(ip("10.0.0.1")).to_string(), "10.0.0.1");
        assert_ne!(Source::of(ip("10.0.0.1")), Source::of(ip("10.0.0.2")));
        assert_eq!(Source::of(ip("::ffff:10.0.0.1")), Source::of(ip("10.0.0.1")), "a mapped IPv4 peer is its address");
    }
}
