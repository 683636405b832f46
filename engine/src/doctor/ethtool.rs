//! The ethtool ioctls (`SIOCETHTOOL`), which every driver answers without the ethtool binary or
//! generic netlink: the driver's name, offloads, channel counts and its own statistics
//! (`ethtool -S`). Parsers are separate from the socket and tested on built blocks.

use super::{Channels, Offloads};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const SIOCETHTOOL: libc::c_ulong = 0x8946;
const ETHTOOL_GDRVINFO: u32 = 0x03;
const ETHTOOL_GRXCSUM: u32 = 0x14;
const ETHTOOL_GTSO: u32 = 0x1e;
const ETHTOOL_GGSO: u32 = 0x23;
const ETHTOOL_GFLAGS: u32 = 0x25;
const ETHTOOL_GGRO: u32 = 0x2b;
const ETHTOOL_GCHANNELS: u32 = 0x3c;
const ETH_FLAG_LRO: u32 = 1 << 15;
/// `struct ethtool_drvinfo`: cmd, driver[32], version[32], fw_version[32], bus_info[32],
/// erom_version[32], reserved2[12], five u32 counts.
const DRVINFO_LEN: usize = 4 + 5 * 32 + 12 + 5 * 4;

#[repr(C)]
struct IfReq {
    name: [libc::c_char; libc::IFNAMSIZ],
    data: *mut libc::c_void,
    /// The rest of the ifreq union (it is 24 bytes on 64-bit).
    _pad: [u8; 16],
}

/// One SIOCETHTOOL call with `buf` as the command block (its first u32 is the command).
fn ethtool_ioctl(sock: &OwnedFd, iface: &str, buf: &mut [u8]) -> io::Result<()> {
    if iface.len() >= libc::IFNAMSIZ {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let mut req = IfReq { name: [0; libc::IFNAMSIZ], data: buf.as_mut_ptr().cast(), _pad: [0; 16] };
    for (d, s) in req.name.iter_mut().zip(iface.bytes()) {
        *d = s as libc::c_char;
    }
    // SAFETY: `req` is a valid ifreq whose data points at `buf`, which is as large as the
    // command block the kernel reads and writes for the command in its first word (callers
    // size it per command), and both outlive the call.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), SIOCETHTOOL as _, &mut req) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn ethtool_value(sock: &OwnedFd, iface: &str, cmd: u32) -> Option<u32> {
    let mut buf = [0u8; 8];
    buf[..4].copy_from_slice(&cmd.to_ne_bytes());
    ethtool_ioctl(sock, iface, &mut buf).ok()?;
    Some(u32::from_ne_bytes(buf[4..8].try_into().ok()?))
}

/// The driver name out of a filled `ethtool_drvinfo` block.
pub(crate) fn drvinfo_driver(buf: &[u8]) -> Option<String> {
    let field = buf.get(4..36)?;
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    std::str::from_utf8(&field[..end]).ok().filter(|s| !s.is_empty()).map(str::to_owned)
}

/// Channel counts out of a filled `ethtool_channels` block (cmd + 8 u32).
pub(crate) fn parse_channels(buf: &[u8]) -> Option<Channels> {
    let w = |i: usize| buf.get(4 + 4 * i..8 + 4 * i).map(|b| u32::from_ne_bytes(b.try_into().expect("4 bytes")));
    Some(Channels { max_rx: w(0)?, max_tx: w(1)?, max_combined: w(3)?, rx: w(4)?, tx: w(5)?, combined: w(7)? })
}

const ETHTOOL_GSTRINGS: u32 = 0x1b;
const ETHTOOL_GSTATS: u32 = 0x1d;
const ETHTOOL_GSSET_INFO: u32 = 0x37;
const ETH_SS_STATS: u32 = 1;
const ETH_GSTRING_LEN: usize = 32;
/// More statistics than any driver has (mlx5 has a few thousand): a bound on what we allocate.
const MAX_STATS: usize = 65536;

/// The number of driver statistics from a filled `ethtool_sset_info` block (cmd, reserved,
/// u64 mask, then one u32 per set in the mask); None when the stats set is not supported.
pub(crate) fn parse_sset_count(buf: &[u8]) -> Option<usize> {
    let mask = u64::from_ne_bytes(buf.get(8..16)?.try_into().ok()?);
    if mask & (1 << ETH_SS_STATS) == 0 {
        return None;
    }
    Some(u32::from_ne_bytes(buf.get(16..20)?.try_into().ok()?) as usize)
}

/// The names of a filled `ethtool_gstrings` block (cmd, string_set, len, then 32-byte names).
pub(crate) fn parse_stat_names(buf: &[u8], n: usize) -> Option<Vec<String>> {
    (0..n)
        .map(|i| {
            let field = buf.get(12 + i * ETH_GSTRING_LEN..12 + (i + 1) * ETH_GSTRING_LEN)?;
            let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
            Some(String::from_utf8_lossy(&field[..end]).trim().to_string())
        })
        .collect()
}

/// The values of a filled `ethtool_stats` block (cmd, n_stats, then u64 values).
pub(crate) fn parse_stat_values(buf: &[u8], n: usize) -> Option<Vec<u64>> {
    (0..n).map(|i| Some(u64::from_ne_bytes(buf.get(8 + i * 8..16 + i * 8)?.try_into().ok()?))).collect()
}

/// The driver's statistics (`ethtool -S`) by name; None where the driver has none.
pub(crate) fn driver_stats(iface: &str) -> Option<Vec<(String, u64)>> {
    // SAFETY: socket() has no memory-safety preconditions; a valid fd is owned right away.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: fd was just returned by socket() and nothing else owns it.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut info = [0u8; 20];
    info[..4].copy_from_slice(&ETHTOOL_GSSET_INFO.to_ne_bytes());
    info[8..16].copy_from_slice(&(1u64 << ETH_SS_STATS).to_ne_bytes());
    ethtool_ioctl(&sock, iface, &mut info).ok()?;
    let n = parse_sset_count(&info).filter(|&n| n > 0 && n <= MAX_STATS)?;
    let mut names = vec![0u8; 12 + n * ETH_GSTRING_LEN];
    names[..4].copy_from_slice(&ETHTOOL_GSTRINGS.to_ne_bytes());
    names[4..8].copy_from_slice(&ETH_SS_STATS.to_ne_bytes());
    names[8..12].copy_from_slice(&(n as u32).to_ne_bytes());
    ethtool_ioctl(&sock, iface, &mut names).ok()?;
    let mut values = vec![0u8; 8 + n * 8];
    values[..4].copy_from_slice(&ETHTOOL_GSTATS.to_ne_bytes());
    values[4..8].copy_from_slice(&(n as u32).to_ne_bytes());
    ethtool_ioctl(&sock, iface, &mut values).ok()?;
    Some(parse_stat_names(&names, n)?.into_iter().zip(parse_stat_values(&values, n)?).collect())
}

/// Driver, offloads and channels of `iface` from the ethtool ioctls; each None where the
/// driver does not implement the query.
pub(crate) fn ethtool_facts(iface: &str) -> (Option<String>, Option<Offloads>, Option<Channels>) {
    // SAFETY: socket() has no memory-safety preconditions; a valid fd is owned right away.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return (None, None, None);
    }
    // SAFETY: fd was just returned by socket() and nothing else owns it.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut info = [0u8; DRVINFO_LEN];
    info[..4].copy_from_slice(&ETHTOOL_GDRVINFO.to_ne_bytes());
    let driver = ethtool_ioctl(&sock, iface, &mut info).ok().and_then(|_| drvinfo_driver(&info));
    let get = |cmd| ethtool_value(&sock, iface, cmd).map(|v| v != 0);
    let offloads = Offloads {
        tso: get(ETHTOOL_GTSO),
        gso: get(ETHTOOL_GGSO),
        gro: get(ETHTOOL_GGRO),
        lro: ethtool_value(&sock, iface, ETHTOOL_GFLAGS).map(|f| f & ETH_FLAG_LRO != 0),
        rx_checksum: get(ETHTOOL_GRXCSUM),
    };
    let offloads = (offloads != Offloads::default()).then_some(offloads);
    let mut ch = [0u8; 36];
    ch[..4].copy_from_slice(&ETHTOOL_GCHANNELS.to_ne_bytes());
    let channels = ethtool_ioctl(&sock, iface, &mut ch).ok().and_then(|_| parse_channels(&ch));
    (driver, offloads, channels)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_blocks() {
        let mut info = [0u8; 20];
        info[8..16].copy_from_slice(&(1u64 << ETH_SS_STATS).to_ne_bytes());
        info[16..20].copy_from_slice(&3u32.to_ne_bytes());
        assert_eq!(parse_sset_count(&info), Some(3));
        assert_eq!(parse_sset_count(&[0u8; 20]), None, "stats set not supported");
        assert_eq!(parse_sset_count(&info[..12]), None, "short block");
        let mut names = vec![0u8; 12 + 3 * ETH_GSTRING_LEN];
        for (i, n) in ["peer_ifindex", "rx_queue_0_drops", "bw_out_allowance_exceeded"].iter().enumerate() {
            names[12 + i * 32..12 + i * 32 + n.len()].copy_from_slice(n.as_bytes());
        }
        let parsed = parse_stat_names(&names, 3).unwrap();
        assert_eq!(parsed, ["peer_ifindex", "rx_queue_0_drops", "bw_out_allowance_exceeded"]);
        assert_eq!(parse_stat_names(&names, 4), None, "more names than the block holds");
        let mut values = vec![0u8; 8 + 3 * 8];
        for (i, v) in [7u64, 0, 1234].iter().enumerate() {
            values[8 + i * 8..16 + i * 8].copy_from_slice(&v.to_ne_bytes());
        }
        assert_eq!(parse_stat_values(&values, 3), Some(vec![7, 0, 1234]));
        assert_eq!(parse_stat_values(&values[..20], 3), None);
    }

    #[test]
    fn ioctl_blocks() {
        let mut info = [0u8; DRVINFO_LEN];
        info[4..8].copy_from_slice(b"veth");
        assert_eq!(drvinfo_driver(&info).as_deref(), Some("veth"));
        assert_eq!(drvinfo_driver(&[0u8; DRVINFO_LEN]), None);
        assert_eq!(drvinfo_driver(&[0u8; 3]), None, "short block");
        let mut ch = [0u8; 36];
        for (i, v) in [1u32, 1, 0, 0, 1, 1, 0, 0].iter().enumerate() {
            ch[4 + 4 * i..8 + 4 * i].copy_from_slice(&v.to_ne_bytes());
        }
        assert_eq!(
            parse_channels(&ch),
            Some(Channels { max_rx: 1, max_tx: 1, max_combined: 0, rx: 1, tx: 1, combined: 0 })
        );
        assert_eq!(parse_channels(&ch[..20]), None);
    }

    #[test]
    fn live_ioctls() {
        assert_eq!(driver_stats("lo"), None, "lo keeps no driver statistics");
        assert_eq!(driver_stats("no-such-if0"), None);
        let (d, o, c) = ethtool_facts("no-such-if0");
        assert_eq!((d, o, c), (None, None, None), "a missing interface answers nothing");
    }
}
