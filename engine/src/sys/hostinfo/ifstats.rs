//! Interface counters and what kind of link an interface is.
//!
//! /sys/class/net/IF/statistics is read before and after a test, to cross-check
//! the bytes the transport counted and to see drops and errors the sockets never hear of.
//! The verdict also needs to know what it is looking at: a NIC and its driver (with a link
//! speed and a number of queues to spread flows over), or a software device (veth, loopback,
//! a bridge...) where the "link speed" is made up and the CPU is the wire.
//!
//! sysfs shows the interfaces of the network namespace it was mounted in; `ip netns exec`
//! mounts a fresh one, so run inside the namespace the test uses.

use std::fs;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::base::error::{Error, Result};
use crate::sys::netlink::{self, RTM_GETLINK, RTM_NEWLINK};

// Kernel UAPI constants: if_link and if_arp
const IFLA_LINKINFO: u16 = 18;
const IFLA_INFO_KIND: u16 = 1;
const IFINFOMSG_LEN: usize = 16;
const ARPHRD_LOOPBACK: u16 = 772;

/// The counters of /sys/class/net/IF/statistics that the report uses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct IfCounters {
    pub rx_bytes: u64,
    pub rx_packets: u64,
    pub rx_dropped: u64,
    pub rx_errors: u64,
    pub tx_bytes: u64,
    pub tx_packets: u64,
    pub tx_dropped: u64,
    pub tx_errors: u64,
}

impl IfCounters {
    /// Reads /sys/class/net/`iface`/statistics.
    pub fn read(iface: &str) -> Result<Self> {
        let dir = iface_dir(iface)?.join("statistics");
        Self::from_files(|name| fs::read_to_string(dir.join(name)).ok(), iface)
    }

    /// Builds the counters from `get(file name)` (the text of each statistics file), so the
    /// parsing is testable without sysfs. `iface` names the interface in errors.
    pub(crate) fn from_files(mut get: impl FnMut(&str) -> Option<String>, iface: &str) -> Result<Self> {
        let mut one = |name: &str| -> Result<u64> {
            let text = get(name)
                .ok_or_else(|| Error::unsupported(format!("interface {iface}: statistics/{name} is missing")))?;
            text.trim().parse().map_err(|_| {
                Error::unsupported(format!("interface {iface}: statistics/{name} is {:?}, not a counter", text.trim()))
            })
        };
        Ok(Self {
            rx_bytes: one("rx_bytes")?,
            rx_packets: one("rx_packets")?,
            rx_dropped: one("rx_dropped")?,
            rx_errors: one("rx_errors")?,
            tx_bytes: one("tx_bytes")?,
            tx_packets: one("tx_packets")?,
            tx_dropped: one("tx_dropped")?,
            tx_errors: one("tx_errors")?,
        })
    }

    /// What changed from `before` to `after`. A counter that went backwards (the interface
    /// was recreated in between) counts as 0.
    pub fn delta(before: &Self, after: &Self) -> Self {
        let d = |a: u64, b: u64| a.saturating_sub(b);
        Self {
            rx_bytes: d(after.rx_bytes, before.rx_bytes),
            rx_packets: d(after.rx_packets, before.rx_packets),
            rx_dropped: d(after.rx_dropped, before.rx_dropped),
            rx_errors: d(after.rx_errors, before.rx_errors),
            tx_bytes: d(after.tx_bytes, before.tx_bytes),
            tx_packets: d(after.tx_packets, before.tx_packets),
            tx_dropped: d(after.tx_dropped, before.tx_dropped),
            tx_errors: d(after.tx_errors, before.tx_errors),
        }
    }
}

/// Drivers with the queue API and TCP header/data split that io_uring zero-copy receive needs
/// (the kernel's iou-zcrx.rst; gve from 6.18). Doctor's check and the `--zc-rx` probe both
/// read this one list.
pub(crate) const ZCRX_DRIVERS: &[&str] = &["mlx5_core", "bnxt_en", "gve"];

/// What an interface is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct LinkInfo {
    pub name: String,
    pub ifindex: u32,
    pub mtu: u32,
    /// Link speed in Mbit/s as the driver reports it; None when unknown (`-1`, as virtio
    /// says) or unreadable (lo), and always None on software devices, whose figure is
    /// invented (veth claims 10000 and carries far more).
    pub speed_mbps: Option<u32>,
    /// The kernel driver of a NIC (`virtio_net`, `mlx5_core`, `gve`, `ena`...), or the kind
    /// of a software device (`veth`, `bridge`, `ifb`, `loopback`...).
    pub driver: Option<String>,
    /// A software device: no DMA, no hardware queues, no real speed.
    pub virtual_device: bool,
    pub tx_queues: u32,
    pub rx_queues: u32,
}

impl LinkInfo {
    /// Reads what sysfs (and, for software devices, rtnetlink) says about `iface`.
    pub fn read(iface: &str) -> Result<Self> {
        let dir = iface_dir(iface)?;
        let read = |name: &str| fs::read_to_string(dir.join(name)).ok();
        let number = |name: &str| -> Result<u32> {
            let text = read(name).unwrap_or_default();
            text.trim().parse().map_err(|_| {
                Error::unsupported(format!("interface {iface}: {name} is {:?}, not a number", text.trim()))
            })
        };
        let ifindex = number("ifindex")?;
        let mtu = number("mtu")?;
        let virtual_device = !dir.join("device").exists();
        let speed_mbps = if virtual_device { None } else { read("speed").as_deref().and_then(parse_speed) };
        let driver = if virtual_device {
            let kind = link_kind(ifindex).ok().flatten();
            let arphrd = read("type").and_then(|t| t.trim().parse().ok());
            software_kind(kind.as_deref(), arphrd)
        } else {
            fs::read_link(dir.join("device/driver")).ok().and_then(|p| driver_name(&p))
        };
        let names = fs::read_dir(dir.join("queues"))
            .map(|rd| rd.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect::<Vec<_>>())
            .unwrap_or_default();
        let (tx_queues, rx_queues) = count_queues(&names);
        Ok(Self { name: iface.to_owned(), ifindex, mtu, speed_mbps, driver, virtual_device, tx_queues, rx_queues })
    }
}

/// /sys/class/net/`iface`, after checking the name cannot climb out of it.
/// Whether `iface` can carry traffic now, from its operstate: `up`, or `unknown` (loopback,
/// tunnels: devices that do not report one); None when unreadable (no such interface).
pub fn carrier_up(iface: &str) -> Option<bool> {
    let state = fs::read_to_string(iface_dir(iface).ok()?.join("operstate")).ok()?;
    Some(matches!(state.trim(), "up" | "unknown"))
}

fn iface_dir(iface: &str) -> Result<PathBuf> {
    if iface.is_empty() || iface.len() > 15 || iface.contains('/') || iface == "." || iface == ".." {
        return Err(Error::usage(format!("{iface:?} is not an interface name")));
    }
    let dir = Path::new("/sys/class/net").join(iface);
    if !dir.exists() {
        return Err(Error::usage(format!("no interface {iface} in this network namespace (see `ip link`)")));
    }
    Ok(dir)
}

/// The content of /sys/class/net/IF/speed: Mbit/s, or None for "unknown" (`-1`, or
/// `4294967295` from kernels that print SPEED_UNKNOWN unsigned) and for garbage.
pub(crate) fn parse_speed(text: &str) -> Option<u32> {
    let v: i64 = text.trim().parse().ok()?;
    (v > 0 && v < i64::from(u32::MAX)).then_some(v as u32)
}

/// The driver's name from the target of /sys/class/net/IF/device/driver
/// (`../../../../bus/virtio/drivers/virtio_net` → `virtio_net`).
pub(crate) fn driver_name(link_target: &Path) -> Option<String> {
    link_target.file_name()?.to_str().filter(|s| !s.is_empty()).map(str::to_owned)
}

/// What to call a software device: its rtnetlink kind (`veth`, `bridge`, `ifb`, `tun`...),
/// else what its hardware type says (`loopback` for lo, which has no kind).
pub(crate) fn software_kind(kind: Option<&str>, arphrd: Option<u16>) -> Option<String> {
    match (kind, arphrd) {
        (Some(k), _) if !k.is_empty() => Some(k.to_owned()),
        (_, Some(ARPHRD_LOOPBACK)) => Some("loopback".to_owned()),
        _ => None,
    }
}

/// (tx, rx) queue counts from the entry names of /sys/class/net/IF/queues.
pub(crate) fn count_queues<S: AsRef<str>>(names: &[S]) -> (u32, u32) {
    let count = |prefix: &str| {
        names.iter().filter(|n| n.as_ref().strip_prefix(prefix).is_some_and(|i| i.parse::<u32>().is_ok())).count()
    };
    (count("tx-") as u32, count("rx-") as u32)
}

/// The rtnetlink kind (`IFLA_INFO_KIND`) of interface `ifindex`, None for devices without
/// one (physical NICs, lo).
pub(crate) fn link_kind(ifindex: u32) -> Result<Option<String>> {
    let what = format!("reading link {ifindex}");
    let mut body = vec![0u8; IFINFOMSG_LEN];
    body[4..8].copy_from_slice(&ifindex.to_ne_bytes());
    let reply = netlink::Socket::open()?.request(RTM_GETLINK, 0, &body, &what)?;
    parse_link_kind(&reply, &what)
}

/// Decodes the `IFLA_INFO_KIND` out of an `RTM_NEWLINK` reply.
pub(crate) fn parse_link_kind(reply: &[u8], what: &str) -> Result<Option<String>> {
    let msgs = netlink::data_messages(reply, what)?;
    let msg = msgs
        .iter()
        .find(|m| m.kind == RTM_NEWLINK)
        .ok_or_else(|| netlink::malformed(what, "no RTM_NEWLINK message in the reply"))?;
    let attrs = netlink::attrs(
        msg.payload.get(IFINFOMSG_LEN..).ok_or_else(|| netlink::malformed(what, "short ifinfomsg"))?,
        what,
    )?;
    let Some(info) = netlink::find(&attrs, IFLA_LINKINFO) else {
        return Ok(None);
    };
    Ok(netlink::find(&netlink::attrs(info, what)?, IFLA_INFO_KIND).and_then(netlink::attr_str))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `grep . /sys/class/net/eth0/statistics/*` on the test machine (virtio_net).
    const ETH0_STATS: &[(&str, &str)] = &[
        ("rx_bytes", "44966477\n"),
        ("rx_packets", "1502\n"),
        ("rx_dropped", "0\n"),
        ("rx_errors", "0\n"),
        ("tx_bytes", "97555\n"),
        ("tx_packets", "1029\n"),
        ("tx_dropped", "0\n"),
        ("tx_errors", "0\n"),
    ];

    fn lookup<'a>(table: &'a [(&'a str, &'a str)]) -> impl FnMut(&str) -> Option<String> + 'a {
        move |name| table.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_string())
    }

    #[test]
    fn captured_counters_and_delta() {
        let before = IfCounters::from_files(lookup(ETH0_STATS), "eth0").unwrap();
        assert_eq!(
            (before.rx_bytes, before.rx_packets, before.tx_bytes, before.tx_packets),
            (44_966_477, 1502, 97_555, 1029)
        );
        let after = IfCounters { rx_bytes: 45_000_000, tx_dropped: 3, ..before };
        let d = IfCounters::delta(&before, &after);
        assert_eq!((d.rx_bytes, d.tx_dropped, d.rx_packets), (33_523, 3, 0));
        assert_eq!(IfCounters::delta(&after, &before).rx_bytes, 0, "a counter going backwards is 0, not a wrap");
    }

    #[test]
    fn missing_or_garbled_counter_is_a_clear_error() {
        let missing = IfCounters::from_files(lookup(&ETH0_STATS[..5]), "eth0").unwrap_err();
        assert_eq!(missing.message, "interface eth0: statistics/tx_packets is missing");
        let mut bad = ETH0_STATS.to_vec();
        bad[2] = ("rx_dropped", "lots\n");
        let err = IfCounters::from_files(lookup(&bad), "eth0").unwrap_err();
        assert!(err.message.contains("rx_dropped is \"lots\""), "{err}");
    }

    #[test]
    fn speed_values() {
        assert_eq!(parse_speed("10000\n"), Some(10_000), "veth's made-up speed parses");
        assert_eq!(parse_speed("-1\n"), None, "virtio_net: unknown");
        assert_eq!(parse_speed("4294967295"), None, "SPEED_UNKNOWN printed unsigned");
        assert_eq!(parse_speed(""), None, "lo: read fails with EINVAL, we get nothing");
        assert_eq!(parse_speed("fast"), None);
        assert_eq!(parse_speed("0"), None);
    }

    #[test]
    fn driver_and_kind_names() {
        assert_eq!(driver_name(Path::new("../../../../bus/virtio/drivers/virtio_net")).as_deref(), Some("virtio_net"));
        assert_eq!(driver_name(Path::new("/")), None);
        assert_eq!(software_kind(Some("veth"), Some(1)).as_deref(), Some("veth"));
        assert_eq!(software_kind(None, Some(772)).as_deref(), Some("loopback"), "lo has no rtnetlink kind");
        assert_eq!(software_kind(None, Some(1)), None, "an unknown software ether device");
    }

    #[test]
    fn queue_counts() {
        assert_eq!(count_queues(&["rx-0", "tx-0"]), (1, 1), "veth and virtio_net here");
        let mlx: Vec<String> = (0..8).flat_map(|i| [format!("rx-{i}"), format!("tx-{i}")]).collect();
        assert_eq!(count_queues(&mlx), (8, 8));
        assert_eq!(count_queues(&["tx-", "rx-x", "foo", "tx-1"]), (1, 0), "only tx-N / rx-N count");
        assert_eq!(count_queues::<&str>(&[]), (0, 0));
    }

    // RTM_GETLINK replies captured on Linux 6.18 (x86_64) in namespace hi-a, trimmed to the
    // IFLA_IFNAME and IFLA_LINKINFO attributes (the rest is 1.5 KB of statistics).

    /// hia0, a veth end.
    const LINK_VETH: &[u8] = &[
        0x3c, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x31, 0x68, 0x00, 0x00, //
        0x00, 0x00, 0x01, 0x00, 0x02, 0x00, 0x00, 0x00, 0x43, 0x10, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, //
        0x09, 0x00, 0x03, 0x00, 0x68, 0x69, 0x61, 0x30, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x12, 0x00, //
        0x09, 0x00, 0x01, 0x00, 0x76, 0x65, 0x74, 0x68, 0x00, 0x00, 0x00, 0x00,
    ];

    /// lo: no IFLA_LINKINFO at all.
    const LINK_LO: &[u8] = &[
        0x28, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x5a, 0x68, 0x00, 0x00, //
        0x00, 0x00, 0x04, 0x03, 0x01, 0x00, 0x00, 0x00, 0x49, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, //
        0x07, 0x00, 0x03, 0x00, 0x6c, 0x6f, 0x00, 0x00,
    ];

    #[test]
    #[cfg(target_endian = "little")]
    fn captured_link_kinds() {
        assert_eq!(parse_link_kind(LINK_VETH, "t").unwrap().as_deref(), Some("veth"));
        assert_eq!(parse_link_kind(LINK_LO, "t").unwrap(), None);
        for cut in 0..LINK_VETH.len() {
            let _ = parse_link_kind(&LINK_VETH[..cut], "t"); // never panics
        }
        let mut garbled = LINK_VETH.to_vec();
        garbled[44] = 0x40; // IFLA_LINKINFO longer than the message
        assert!(parse_link_kind(&garbled, "t").is_err());
    }

    #[test]
    fn live_loopback() {
        let lo = LinkInfo::read("lo").expect("every namespace has lo");
        assert_eq!(lo.ifindex, 1);
        assert!(lo.virtual_device);
        assert_eq!(lo.driver.as_deref(), Some("loopback"));
        assert_eq!(lo.speed_mbps, None);
        assert!(lo.tx_queues >= 1 && lo.rx_queues >= 1, "lo has one queue each way: {lo:?}");
        IfCounters::read("lo").expect("lo has statistics");
    }

    #[test]
    fn bad_interface_names_are_usage_errors() {
        for name in ["", "../../etc", "..", "no-such-if0", "a-name-longer-than-15"] {
            let err = LinkInfo::read(name).unwrap_err();
            assert_eq!(err.kind, crate::ErrorKind::Usage, "{name:?}: {err}");
        }
    }
}
