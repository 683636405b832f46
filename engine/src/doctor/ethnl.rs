//! Ring sizes and TCP header split from the ethtool generic-netlink family
//! (`ETHTOOL_MSG_RINGS_GET`), which the old ioctl cannot report: header split is the first
//! prerequisite of io_uring zero-copy receive (the NIC must put payload in pages of
//! its own, apart from the headers the kernel parses), and small rings drop bursts.
//!
//! Two requests: the generic-netlink controller resolves the family id of "ethtool", then
//! the rings of one device are asked for by name. Parsers are separate from the socket and
//! tested on replies captured on Linux 6.18.

use crate::base::error::Result;
#[cfg(test)]
use crate::sys::netlink::attr_str;
use crate::sys::netlink::{self, attrs, data_messages, find, genl_family, genl_request, u32_at, Socket};
#[cfg(test)]
use crate::sys::netlink::{parse_family_id, u16_at, CTRL_ATTR_FAMILY_ID, CTRL_ATTR_FAMILY_NAME, GENL_ID_CTRL};
use serde::Serialize;

use crate::sys::netlink::{ethtool_dev_header, ETHTOOL_GENL_VERSION, GENL_HDRLEN};
#[cfg(test)]
use crate::sys::netlink::{ETHTOOL_A_HEADER_DEV_NAME, NLA_F_NESTED};

const ETHTOOL_MSG_RINGS_GET: u8 = 15;
const ETHTOOL_MSG_RINGS_GET_REPLY: u8 = 16;
const ETHTOOL_A_RINGS_HEADER: u16 = 1;
const ETHTOOL_A_RINGS_RX_MAX: u16 = 2;
const ETHTOOL_A_RINGS_TX_MAX: u16 = 5;
const ETHTOOL_A_RINGS_RX: u16 = 6;
const ETHTOOL_A_RINGS_TX: u16 = 9;
const ETHTOOL_A_RINGS_TCP_DATA_SPLIT: u16 = 11;

/// TCP header/data split as the driver reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum HeaderSplit {
    Unknown,
    Disabled,
    Enabled,
}

/// The rings of one device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Rings {
    pub rx: Option<u32>,
    pub rx_max: Option<u32>,
    pub tx: Option<u32>,
    pub tx_max: Option<u32>,
    /// `Unknown` also when the driver does not say (the attribute is absent).
    pub header_split: HeaderSplit,
}

/// The rings out of an `ETHTOOL_MSG_RINGS_GET_REPLY`.
pub(crate) fn parse_rings(reply: &[u8], what: &str) -> Result<Rings> {
    let msgs = data_messages(reply, what)?;
    let msg = msgs.first().ok_or_else(|| netlink::malformed(what, "no reply message"))?;
    if msg.payload.first() != Some(&ETHTOOL_MSG_RINGS_GET_REPLY) {
        return Err(netlink::malformed(what, format!("reply command {:?}, not RINGS_GET_REPLY", msg.payload.first())));
    }
    let a = attrs(msg.payload.get(GENL_HDRLEN..).ok_or_else(|| netlink::malformed(what, "short genl header"))?, what)?;
    let n = |kind| find(&a, kind).and_then(|v| u32_at(v, 0));
    let header_split = match find(&a, ETHTOOL_A_RINGS_TCP_DATA_SPLIT).and_then(|v| v.first().copied()) {
        Some(1) => HeaderSplit::Disabled,
        Some(2) => HeaderSplit::Enabled,
        _ => HeaderSplit::Unknown,
    };
    Ok(Rings {
        rx: n(ETHTOOL_A_RINGS_RX),
        rx_max: n(ETHTOOL_A_RINGS_RX_MAX),
        tx: n(ETHTOOL_A_RINGS_TX),
        tx_max: n(ETHTOOL_A_RINGS_TX_MAX),
        header_split,
    })
}

/// The request attributes asking for the rings of `iface`.
pub(crate) fn rings_request_attrs(iface: &str) -> Vec<u8> {
    ethtool_dev_header(ETHTOOL_A_RINGS_HEADER, iface)
}

/// Reads the rings of `iface`; an error when the family is missing (kernel before 5.6) or the
/// driver has no ring parameters.
pub fn rings(iface: &str) -> Result<Rings> {
    let mut sock = Socket::open_protocol(libc::NETLINK_GENERIC)?;
    let family = genl_family(&mut sock, "ethtool")?;
    let what = format!("reading the rings of {iface}");
    let reply = sock.request(
        family,
        0,
        &genl_request(ETHTOOL_MSG_RINGS_GET, ETHTOOL_GENL_VERSION, &rings_request_attrs(iface)),
        &what,
    )?;
    parse_rings(&reply, &what)
}

/// The family name in a `CTRL_CMD_GETFAMILY` reply (for tests and messages).
#[cfg(test)]
pub(crate) fn family_name(reply: &[u8], what: &str) -> Option<String> {
    let msgs = data_messages(reply, what).ok()?;
    let a = attrs(msgs.first()?.payload.get(GENL_HDRLEN..)?, what).ok()?;
    find(&a, CTRL_ATTR_FAMILY_NAME).and_then(attr_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::sys::netlink::genl_message as message;

    #[test]
    fn family_reply() {
        let reply = message(
            GENL_ID_CTRL,
            1,
            &[(CTRL_ATTR_FAMILY_NAME, b"ethtool\0".to_vec()), (CTRL_ATTR_FAMILY_ID, 21u16.to_ne_bytes().to_vec())],
        );
        assert_eq!(parse_family_id(&reply, "t").unwrap(), 21);
        assert_eq!(family_name(&reply, "t").as_deref(), Some("ethtool"));
        let no_id = message(GENL_ID_CTRL, 1, &[(CTRL_ATTR_FAMILY_NAME, b"ethtool\0".to_vec())]);
        assert!(parse_family_id(&no_id, "t").is_err());
        for cut in 0..reply.len() {
            let _ = parse_family_id(&reply[..cut], "t"); // never panics
        }
    }

    #[test]
    fn rings_replies() {
        let u32v = |v: u32| v.to_ne_bytes().to_vec();
        let mlx = message(
            21,
            ETHTOOL_MSG_RINGS_GET_REPLY,
            &[
                (ETHTOOL_A_RINGS_RX_MAX, u32v(8192)),
                (ETHTOOL_A_RINGS_TX_MAX, u32v(8192)),
                (ETHTOOL_A_RINGS_RX, u32v(1024)),
                (ETHTOOL_A_RINGS_TX, u32v(1024)),
                (ETHTOOL_A_RINGS_TCP_DATA_SPLIT, vec![2]),
            ],
        );
        let r = parse_rings(&mlx, "t").unwrap();
        assert_eq!((r.rx, r.rx_max, r.tx, r.tx_max), (Some(1024), Some(8192), Some(1024), Some(8192)));
        assert_eq!(r.header_split, HeaderSplit::Enabled);
        let off = message(21, ETHTOOL_MSG_RINGS_GET_REPLY, &[(ETHTOOL_A_RINGS_TCP_DATA_SPLIT, vec![1])]);
        assert_eq!(parse_rings(&off, "t").unwrap().header_split, HeaderSplit::Disabled);
        let veth = message(21, ETHTOOL_MSG_RINGS_GET_REPLY, &[(ETHTOOL_A_RINGS_RX_MAX, u32v(256))]);
        assert_eq!(parse_rings(&veth, "t").unwrap().header_split, HeaderSplit::Unknown, "absent attribute");
        let wrong = message(21, 3, &[]);
        assert!(parse_rings(&wrong, "t").is_err(), "not a rings reply");
        for cut in 0..mlx.len() {
            let _ = parse_rings(&mlx[..cut], "t");
        }
    }

    #[test]
    fn request_names_the_device_in_a_nested_header() {
        let a = rings_request_attrs("eth0");
        assert_eq!(u16_at(&a, 2), Some(ETHTOOL_A_RINGS_HEADER | NLA_F_NESTED));
        let nested = attrs(&a, "t").unwrap();
        let inner = attrs(nested[0].1, "t").unwrap();
        assert_eq!(inner[0].0, ETHTOOL_A_HEADER_DEV_NAME);
        assert_eq!(attr_str(inner[0].1).as_deref(), Some("eth0"));
    }

    #[test]
    fn live_loopback_has_no_rings() {
        // lo has no ring parameters: the kernel answers with an error, which must come back
        // as an error (not a panic, not made-up rings).
        assert!(rings("lo").is_err());
        assert!(rings("no-such-if0").is_err());
    }
}
