//! What the kernel writes into one buffer of a multishot `RecvMsg`: after the
//! `io_uring_recvmsg_out` header, the source address and the control messages (the GRO
//! segment size, the kernel's receive time), each read here by bytes from room of a fixed size.

use crate::wire::udp_payload::WireTime;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// Bytes of the `io_uring_recvmsg_out` header the kernel writes first in each buffer.
pub(super) const RECVMSG_OUT_LEN: usize = 16;
/// Room for the source address (`sockaddr_in6`, which also holds a `sockaddr_in`).
pub(super) const NAME_LEN: usize = std::mem::size_of::<libc::sockaddr_in6>();
/// Room for control messages: a `UDP_GRO` int (24 bytes) and a `timespec` (32 bytes).
pub(super) const CONTROL_LEN: usize = 64;

/// What the control messages of one completion said.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Control {
    pub(super) gro_size: Option<usize>,
    pub(super) stamp: Option<WireTime>,
}

fn ne_usize(b: &[u8]) -> usize {
    let mut w = [0u8; std::mem::size_of::<usize>()];
    let n = w.len();
    w.copy_from_slice(&b[..n]);
    usize::from_ne_bytes(w)
}

fn ne_i32(b: &[u8]) -> i32 {
    i32::from_ne_bytes([b[0], b[1], b[2], b[3]])
}

fn ne_i64(b: &[u8]) -> i64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[..8]);
    i64::from_ne_bytes(w)
}

/// Walks the control messages (`cmsghdr`: length, level, type, data padded to 8 bytes),
/// reading by bytes so the buffer's alignment does not matter.
pub(super) fn parse_control(mut data: &[u8]) -> Control {
    const HDR: usize = std::mem::size_of::<libc::cmsghdr>();
    let mut out = Control::default();
    while data.len() >= HDR {
        let len = ne_usize(data);
        if len < HDR || len > data.len() {
            break;
        }
        let level = ne_i32(&data[std::mem::size_of::<usize>()..]);
        let kind = ne_i32(&data[std::mem::size_of::<usize>() + 4..]);
        let body = &data[HDR..len];
        if level == libc::SOL_UDP && kind == libc::UDP_GRO && body.len() >= 4 {
            out.gro_size = usize::try_from(ne_i32(body)).ok().filter(|&n| n > 0);
        } else if level == libc::SOL_SOCKET && kind == libc::SO_TIMESTAMPNS && body.len() >= 16 {
            out.stamp = Some(WireTime::from_nanos_parts(ne_i64(body), ne_i64(&body[8..])));
        }
        let next = len.next_multiple_of(std::mem::size_of::<usize>());
        if next >= data.len() {
            break;
        }
        data = &data[next..];
    }
    out
}

/// A socket address from raw `sockaddr` bytes.
pub(super) fn parse_name(name: &[u8]) -> Option<SocketAddr> {
    let family = u16::from_ne_bytes([*name.first()?, *name.get(1)?]);
    let port = u16::from_be_bytes([*name.get(2)?, *name.get(3)?]);
    match i32::from(family) {
        libc::AF_INET => {
            let ip: [u8; 4] = name.get(4..8)?.try_into().ok()?;
            Some(SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::from(ip), port)))
        }
        libc::AF_INET6 => {
            let ip: [u8; 16] = name.get(8..24)?.try_into().ok()?;
            let scope = u32::from_ne_bytes(name.get(24..28)?.try_into().ok()?);
            Some(SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::from(ip), port, 0, scope)))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmsg(level: i32, kind: i32, body: &[u8]) -> Vec<u8> {
        let hdr = std::mem::size_of::<libc::cmsghdr>();
        let len = hdr + body.len();
        let mut v = Vec::new();
        v.extend_from_slice(&len.to_ne_bytes());
        v.extend_from_slice(&level.to_ne_bytes());
        v.extend_from_slice(&kind.to_ne_bytes());
        v.extend_from_slice(body);
        v.resize(len.next_multiple_of(8), 0);
        v
    }

    #[test]
    fn control_messages_parse() {
        let mut data = cmsg(libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, &{
            let mut ts = 1_700_000_000i64.to_ne_bytes().to_vec();
            ts.extend_from_slice(&5_000i64.to_ne_bytes());
            ts
        });
        data.extend(cmsg(libc::SOL_UDP, libc::UDP_GRO, &1470i32.to_ne_bytes()));
        let c = parse_control(&data);
        assert_eq!(c.gro_size, Some(1470), "UDP_GRO segment size");
        assert_eq!(c.stamp, Some(WireTime { sec: 1_700_000_000, usec: 5 }), "SCM_TIMESTAMPNS in microseconds");
        assert_eq!(parse_control(&data[..10]), Control::default(), "truncated control data: nothing, no panic");
        let mut bogus = data.clone();
        bogus[..8].copy_from_slice(&4096usize.to_ne_bytes());
        assert_eq!(parse_control(&bogus), Control::default(), "length past the end stops the walk");
    }

    #[test]
    fn socket_names_parse() {
        let a: SocketAddr = "10.77.0.1:5001".parse().unwrap();
        let mut raw = [0u8; NAME_LEN];
        raw[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
        raw[2..4].copy_from_slice(&5001u16.to_be_bytes());
        raw[4..8].copy_from_slice(&[10, 77, 0, 1]);
        assert_eq!(parse_name(&raw[..16]), Some(a));
        assert_eq!(parse_name(&raw[..3]), None, "short name");
    }
}
