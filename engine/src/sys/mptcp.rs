//! Multipath TCP (`-m/--mptcp`): whether this kernel makes MPTCP sockets, the protocol a
//! test's data sockets are made with, and what the kernel says of an MPTCP connection's
//! subflows after the test (`SOL_MPTCP` getsockopt: `MPTCP_INFO`, `MPTCP_TCPINFO`,
//! `MPTCP_SUBFLOW_ADDRS`).
//!
//! The byte layouts are those of include/uapi/linux/mptcp.h. The parsers take the bytes the
//! kernel wrote, so they are tested on bytes captured from a real connection; the readers
//! around them only make the calls.

use crate::sys::tcpinfo::{TcpInfo, TCP_INFO_LEN};
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::RawFd;

/// `SOL_MPTCP` (linux/socket.h); the libc crate does not have it.
const SOL_MPTCP: libc::c_int = 284;
const MPTCP_INFO: libc::c_int = 1;
const MPTCP_TCPINFO: libc::c_int = 2;
const MPTCP_SUBFLOW_ADDRS: libc::c_int = 3;
/// `struct mptcp_info` as of Linux 6.10 (older kernels fill less, the rest stays zero).
const INFO_LEN: usize = 96;
/// `struct mptcp_subflow_data`: the header before the per-subflow arrays.
const SUBFLOW_DATA_LEN: usize = 16;
/// `struct mptcp_subflow_addrs`: two `sockaddr_storage`.
const ADDRS_LEN: usize = 256;
/// Subflows read per connection at most (the kernel caps a connection at 8 too).
const MAX_SUBFLOWS: usize = 8;
/// `MPTCP_INFO_FLAG_FALLBACK`: the connection runs as plain TCP.
const FLAG_FALLBACK: u32 = 1;

/// The protocol a test's TCP data sockets are made with: carried from the spec to every
/// place that makes one (never a process-wide switch).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StreamProtocol {
    #[default]
    Tcp,
    /// IPPROTO_MPTCP: the kernel falls back to TCP when the peer does not speak it.
    Mptcp,
}

impl StreamProtocol {
    pub fn of(mptcp: bool) -> Self {
        if mptcp {
            StreamProtocol::Mptcp
        } else {
            StreamProtocol::Tcp
        }
    }

    pub(crate) fn socket2(self) -> socket2::Protocol {
        match self {
            StreamProtocol::Tcp => socket2::Protocol::TCP,
            StreamProtocol::Mptcp => socket2::Protocol::MPTCP,
        }
    }
}

/// Whether this kernel makes MPTCP sockets, probed once (the sysctl, then a socket): `Err`
/// says why not, with the fix.
pub fn probe() -> Result<(), String> {
    let enabled = std::fs::read_to_string("/proc/sys/net/mptcp/enabled").ok();
    if enabled.as_deref().map(str::trim) == Some("0") {
        return Err("MPTCP is disabled on this host (net.mptcp.enabled = 0): sysctl -w net.mptcp.enabled=1".into());
    }
    match socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, Some(socket2::Protocol::MPTCP)) {
        Ok(_) => Ok(()),
        Err(e) if enabled.is_none() => Err(format!("this kernel has no MPTCP (no net.mptcp sysctls; socket: {e})")),
        Err(e) => Err(format!("this kernel refuses MPTCP sockets: {e}")),
    }
}

/// One subflow of an MPTCP connection, as its TCP_INFO says after the test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Subflow {
    /// Local and remote address, `ip:port` (null when the kernel did not say).
    pub local: Option<String>,
    pub remote: Option<String>,
    /// tcpi_bytes_sent, tcpi_bytes_acked, tcpi_bytes_received of the subflow.
    pub bytes_sent: u64,
    pub bytes_acked: u64,
    pub bytes_received: u64,
    pub rtt_us: u32,
    pub total_retrans: u32,
}

/// One data connection's MPTCP state after the test (`mptcp_info` and its subflows).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MptcpConnection {
    /// Flow index.
    pub flow: u32,
    /// The connection runs as plain TCP (the peer did not answer MP_CAPABLE).
    pub fallback: bool,
    /// Subflows open at the end, and created over the connection's life
    /// (mptcpi_subflows_total; 0 from kernels before 6.10).
    pub subflows_open: u32,
    pub subflows_total: u32,
    /// Connection-level (data sequence) bytes: mptcpi_bytes_sent, _received, _acked,
    /// _retrans (0 from kernels before 6.9).
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub bytes_acked: u64,
    pub bytes_retrans: u64,
    pub subflows: Vec<Subflow>,
}

/// What `MPTCP_INFO` holds that the report uses.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Info {
    /// Subflows beyond the first (mptcpi_subflows).
    extra_subflows: u8,
    flags: u32,
    bytes_sent: u64,
    bytes_received: u64,
    bytes_acked: u64,
    bytes_retrans: u64,
    subflows_total: u8,
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4).map_or(0, |s| u32::from_ne_bytes(s.try_into().unwrap_or_default()))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    b.get(at..at + 8).map_or(0, |s| u64::from_ne_bytes(s.try_into().unwrap_or_default()))
}

/// Parses `struct mptcp_info`; fields past the end of `b` (an older kernel) read as 0.
fn parse_info(b: &[u8]) -> Info {
    Info {
        extra_subflows: b.first().copied().unwrap_or(0),
        flags: u32_at(b, 8),
        bytes_retrans: u64_at(b, 48),
        bytes_sent: u64_at(b, 56),
        bytes_received: u64_at(b, 64),
        bytes_acked: u64_at(b, 72),
        subflows_total: b.get(80).copied().unwrap_or(0),
    }
}

/// Splits a `struct mptcp_subflow_data` buffer into its elements: as many as the kernel
/// says it has and as fit in what it wrote, each `min(size_user, size_kernel)` long.
fn parse_subflow_data(b: &[u8]) -> Vec<&[u8]> {
    let header = u32_at(b, 0) as usize;
    let count = u32_at(b, 4) as usize;
    let (kernel, user) = (u32_at(b, 8) as usize, u32_at(b, 12) as usize);
    let each = kernel.min(user);
    if header < SUBFLOW_DATA_LEN || each == 0 {
        return Vec::new();
    }
    (0..count.min(MAX_SUBFLOWS)).filter_map(|i| b.get(header + i * user..header + i * user + each)).collect()
}

/// Parses a `sockaddr_in` or `sockaddr_in6` (the first half or the second of a
/// `struct mptcp_subflow_addrs`).
fn parse_sockaddr(b: &[u8]) -> Option<SocketAddr> {
    let family = i32::from(u16::from_ne_bytes(b.get(0..2)?.try_into().ok()?));
    let port = u16::from_be_bytes(b.get(2..4)?.try_into().ok()?);
    let ip = match family {
        libc::AF_INET => IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(b.get(4..8)?).ok()?)),
        libc::AF_INET6 => IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(b.get(8..24)?).ok()?)),
        _ => return None,
    };
    // A dual-stack listener's subflows are v4-mapped: say them as IPv4.
    Some(SocketAddr::new(ip.to_canonical(), port))
}

/// The connection from its `MPTCP_INFO`, `MPTCP_TCPINFO` and `MPTCP_SUBFLOW_ADDRS` bytes.
fn connection(flow: u32, info: &[u8], tcp_infos: &[u8], addrs: &[u8]) -> MptcpConnection {
    let i = parse_info(info);
    let addrs = parse_subflow_data(addrs);
    let subflows = parse_subflow_data(tcp_infos)
        .into_iter()
        .enumerate()
        .map(|(n, raw)| {
            let (t, bytes_acked) = TcpInfo::from_bytes(raw);
            let ends =
                addrs.get(n).map(|a| (a.get(..128).and_then(parse_sockaddr), a.get(128..).and_then(parse_sockaddr)));
            let (local, remote) = ends.unwrap_or_default();
            Subflow {
                local: local.map(|a| a.to_string()),
                remote: remote.map(|a| a.to_string()),
                bytes_sent: t.bytes_sent,
                bytes_acked,
                bytes_received: t.bytes_received,
                rtt_us: t.rtt_us,
                total_retrans: t.total_retrans,
            }
        })
        .collect();
    MptcpConnection {
        flow,
        fallback: i.flags & FLAG_FALLBACK != 0,
        subflows_open: u32::from(i.extra_subflows) + 1,
        subflows_total: u32::from(i.subflows_total),
        bytes_sent: i.bytes_sent,
        bytes_received: i.bytes_received,
        bytes_acked: i.bytes_acked,
        bytes_retrans: i.bytes_retrans,
        subflows,
    }
}

/// getsockopt(SOL_MPTCP, `opt`) into `buf`, which holds the call's input too (the
/// subflow-data header); the bytes the kernel wrote, or `None` when it refused.
fn get(fd: RawFd, opt: libc::c_int, buf: &mut [u8]) -> Option<usize> {
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `buf`, which lives across the call.
    let rc = unsafe { libc::getsockopt(fd, SOL_MPTCP, opt, buf.as_mut_ptr().cast(), &mut len) };
    (rc == 0).then_some((len as usize).min(buf.len()))
}

/// A subflow-data request for elements of `each` bytes: the header filled in, room for
/// [`MAX_SUBFLOWS`] elements after it.
fn subflow_request(each: usize) -> Vec<u8> {
    let mut buf = vec![0u8; SUBFLOW_DATA_LEN + MAX_SUBFLOWS * each];
    buf[0..4].copy_from_slice(&(SUBFLOW_DATA_LEN as u32).to_ne_bytes());
    buf[12..16].copy_from_slice(&(each as u32).to_ne_bytes());
    buf
}

/// Reads flow `flow`'s MPTCP state from its socket; `None` for a plain TCP socket (one a
/// plain client opened to an MPTCP listener is one) or a kernel without `MPTCP_INFO`. An
/// MPTCP socket that fell back to TCP refuses `MPTCP_INFO`; its SO_PROTOCOL still says MPTCP.
pub(crate) fn read(fd: RawFd, flow: u32) -> Option<MptcpConnection> {
    let mut info = [0u8; INFO_LEN];
    let Some(got) = get(fd, MPTCP_INFO, &mut info) else {
        // SAFETY: `fd` is the caller's open socket for this call; the SockRef never closes it.
        let socket = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
        let protocol = socket2::SockRef::from(&socket).protocol().ok().flatten();
        return (protocol == Some(socket2::Protocol::MPTCP)).then(|| MptcpConnection {
            flow,
            fallback: true,
            ..MptcpConnection::default()
        });
    };
    let mut tcp = subflow_request(TCP_INFO_LEN);
    let tcp_len = get(fd, MPTCP_TCPINFO, &mut tcp).unwrap_or(0);
    let mut addrs = subflow_request(ADDRS_LEN);
    let addrs_len = get(fd, MPTCP_SUBFLOW_ADDRS, &mut addrs).unwrap_or(0);
    Some(connection(flow, &info[..got], &tcp[..tcp_len], &addrs[..addrs_len]))
}

/// The data bytes an MPTCP connection received over all its subflows (mptcpi_bytes_received);
/// `None` for a plain TCP socket, one that fell back (its TCP_INFO counts them all), or a
/// kernel before 6.9, which does not count them.
pub(crate) fn bytes_received(fd: RawFd) -> Option<u64> {
    let mut info = [0u8; INFO_LEN];
    let got = get(fd, MPTCP_INFO, &mut info)?;
    let i = parse_info(&info[..got]);
    (i.flags & FLAG_FALLBACK == 0 && i.bytes_received > 0).then_some(i.bytes_received)
}

/// Every flow's MPTCP state, in flow order (flows that are not MPTCP sockets are left out);
/// `None` when the test's flows are not MPTCP (`mptcp` false) or there are none to read
/// (crr reads a sample of its connections itself, transport/tcp/crr.rs).
pub(crate) fn read_flows(mptcp: bool, fds: &[RawFd]) -> Option<Vec<MptcpConnection>> {
    (mptcp && !fds.is_empty()).then(|| (0..).zip(fds).filter_map(|(flow, &fd)| read(fd, flow)).collect())
}

/// The report's lines on the flows' subflows: one per connection, each subflow's ends and
/// the bytes it carried (sent, or received on a receiving side).
pub(crate) fn describe(conns: &[MptcpConnection], sending: bool) -> Vec<String> {
    conns
        .iter()
        .map(|c| {
            if c.fallback {
                return format!("MPTCP flow {}: fell back to plain TCP (the peer did not answer MP_CAPABLE)", c.flow);
            }
            let subflows: Vec<String> = c
                .subflows
                .iter()
                .map(|s| {
                    let bytes = if sending { s.bytes_acked } else { s.bytes_received };
                    format!(
                        "{} -> {} {}",
                        s.local.as_deref().unwrap_or("?"),
                        s.remote.as_deref().unwrap_or("?"),
                        crate::base::units::format_bytes(bytes)
                    )
                })
                .collect();
            format!("MPTCP flow {}: {} subflows: {}", c.flow, c.subflows.len(), subflows.join(", "))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    /// MPTCP_INFO of the sending end of a loopback connection (Linux 6.18) after 100,000
    /// bytes: one subflow, none beyond it, not fallen back.
    const LOOPBACK_INFO: &str = "0000000200000000020000007b2708adfd659fd4efa2e76efddd9ed4efa2e76e72cf8b243819c22d\
        00000000000000000000000000000000a0860100000000000000000000000000a0fe00000000000001000000000000000000000000000000";

    #[test]
    fn mptcp_info_from_the_kernel_parses() {
        let i = parse_info(&hex(LOOPBACK_INFO));
        assert_eq!(i.extra_subflows, 0);
        assert_eq!(i.flags & FLAG_FALLBACK, 0);
        assert_eq!(i.bytes_sent, 100_000);
        assert_eq!(i.bytes_received, 0);
        assert_eq!(i.subflows_total, 1);
        // A short (older kernel's) answer reads the missing fields as zero.
        let short = parse_info(&hex(LOOPBACK_INFO)[..40]);
        assert_eq!((short.bytes_sent, short.subflows_total), (0, 0));
    }

    #[test]
    fn subflow_arrays_are_cut_by_what_both_sides_know() {
        // Header: 16 bytes, 2 subflows, kernel element 4 bytes, user element 6 bytes.
        let mut b = Vec::new();
        for v in [16u32, 2, 4, 6] {
            b.extend_from_slice(&v.to_ne_bytes());
        }
        b.extend_from_slice(&[1, 1, 1, 1, 0, 0, 2, 2, 2, 2, 0, 0]);
        let els = parse_subflow_data(&b);
        assert_eq!(els, vec![&[1u8, 1, 1, 1][..], &[2u8, 2, 2, 2][..]]);
        // A count larger than the bytes written yields only the whole elements.
        b[4..8].copy_from_slice(&5u32.to_ne_bytes());
        assert_eq!(parse_subflow_data(&b).len(), 2);
        assert!(parse_subflow_data(&[0u8; 8]).is_empty(), "a truncated header is no element");
    }

    #[test]
    fn socket_addresses_of_both_families_parse() {
        let mut v4 = vec![0u8; 128];
        v4[0..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
        v4[2..4].copy_from_slice(&5300u16.to_be_bytes());
        v4[4..8].copy_from_slice(&[10, 77, 1, 2]);
        assert_eq!(parse_sockaddr(&v4), Some("10.77.1.2:5300".parse().unwrap()));
        let mut v6 = vec![0u8; 128];
        v6[0..2].copy_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
        v6[2..4].copy_from_slice(&80u16.to_be_bytes());
        v6[8..24].copy_from_slice(&"fd77::2".parse::<Ipv6Addr>().unwrap().octets());
        assert_eq!(parse_sockaddr(&v6), Some("[fd77::2]:80".parse().unwrap()));
        assert_eq!(parse_sockaddr(&[0u8; 128]), None, "family 0: no address");
    }

    #[test]
    fn a_loopback_mptcp_connection_reads_back_its_subflow() {
        if probe().is_err() {
            return; // No MPTCP here: nothing to read.
        }
        let listener =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, Some(socket2::Protocol::MPTCP)).unwrap();
        listener.bind(&"127.0.0.1:0".parse::<SocketAddr>().unwrap().into()).unwrap();
        listener.listen(1).unwrap();
        let addr = listener.local_addr().unwrap().as_socket().unwrap();
        let client =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, Some(socket2::Protocol::MPTCP)).unwrap();
        client.connect(&addr.into()).unwrap();
        let (server, _) = listener.accept().unwrap();
        let mut client = std::net::TcpStream::from(client);
        let mut server = std::net::TcpStream::from(server);
        std::io::Write::write_all(&mut client, &[7u8; 50_000]).unwrap();
        let mut got = vec![0u8; 50_000];
        std::io::Read::read_exact(&mut server, &mut got).unwrap();
        use std::os::fd::AsRawFd;
        let c = read(client.as_raw_fd(), 0).expect("an MPTCP socket answers MPTCP_INFO");
        assert!(!c.fallback, "{c:?}");
        assert_eq!(c.subflows.len(), 1, "{c:?}");
        assert_eq!(c.subflows[0].remote.as_deref(), Some(addr.to_string().as_str()), "{c:?}");
        assert!(c.subflows[0].bytes_acked >= 50_000, "{c:?}");
        let s = read(server.as_raw_fd(), 0).unwrap();
        assert!(s.subflows[0].bytes_received >= 50_000, "{s:?}");
        // The connection-level count is the bytes the application sent, exactly.
        assert!(matches!(bytes_received(server.as_raw_fd()), Some(50_000) | None), "None only before 6.9");
        // A plain TCP socket is no MPTCP connection.
        let plain = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        assert!(read(plain.as_raw_fd(), 0).is_none());
        assert!(bytes_received(plain.as_raw_fd()).is_none());
        // An MPTCP client of a plain TCP listener falls back, and reads as such.
        let to_plain =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, Some(socket2::Protocol::MPTCP)).unwrap();
        to_plain.connect(&plain.local_addr().unwrap().into()).unwrap();
        let _accepted = plain.accept().unwrap();
        let f = read(to_plain.as_raw_fd(), 3).expect("a fallen-back MPTCP socket is still one");
        assert!(f.fallback && f.subflows.is_empty() && f.flow == 3, "{f:?}");
    }
}
