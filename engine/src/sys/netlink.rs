//! Just enough rtnetlink to ask the kernel three questions: which route a destination takes,
//! what kind a link is, and which qdiscs and classes shape an interface.
//!
//! Written by hand over a raw `AF_NETLINK` socket instead of a netlink crate: the requests
//! are three fixed structs and the answers a handful of attributes, the crates in use churn
//! their typed APIs between minor versions, and none of them decodes the `tbf` options the
//! verdict needs, so we would parse raw bytes anyway. Keeping parsing apart from the socket
//! also lets every parser run on replies captured from a real kernel.
//!
//! Netlink is host-endian; all integers here are read with `from_ne_bytes`. A socket sees the
//! network namespace of the thread that created it, so under `ip netns exec` every answer is
//! the namespace's.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::base::error::{Error, Result};

// Kernel UAPI constants: netlink
pub(crate) const NLMSG_HDRLEN: usize = 16;
pub(crate) const NLMSG_ERROR: u16 = 2;
pub(crate) const NLMSG_DONE: u16 = 3;
pub(crate) const NLM_F_REQUEST: u16 = 0x1;
pub(crate) const NLM_F_MULTI: u16 = 0x2;
pub(crate) const NLM_F_DUMP: u16 = 0x300;
const NLA_TYPE_MASK: u16 = 0x3fff;

// Kernel UAPI constants: rtnetlink
pub(crate) const RTM_NEWLINK: u16 = 16;
pub(crate) const RTM_GETLINK: u16 = 18;
pub(crate) const RTM_NEWROUTE: u16 = 24;
pub(crate) const RTM_GETROUTE: u16 = 26;
pub(crate) const RTM_NEWQDISC: u16 = 36;
pub(crate) const RTM_GETQDISC: u16 = 38;
pub(crate) const RTM_NEWTCLASS: u16 = 40;
pub(crate) const RTM_GETTCLASS: u16 = 42;

/// The most a reply may add up to; a namespace with more qdiscs than this is not a test host.
const MAX_REPLY_BYTES: usize = 16 << 20;
/// How long we wait for the kernel before giving up (it answers in microseconds).
const RECV_TIMEOUT_S: libc::time_t = 2;

/// One netlink message inside a reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Message<'a> {
    pub kind: u16,
    pub flags: u16,
    pub seq: u32,
    /// Everything after the 16-byte header.
    pub payload: &'a [u8],
}

/// An error for a reply we cannot decode; `what` names the question we asked.
pub(crate) fn malformed(what: &str, detail: impl std::fmt::Display) -> Error {
    Error::unsupported(format!("{what}: the kernel's netlink reply is malformed ({detail})"))
}

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

pub(crate) fn u16_at(buf: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(buf.get(off..off + 2)?.try_into().ok()?))
}

pub(crate) fn u32_at(buf: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(buf.get(off..off + 4)?.try_into().ok()?))
}

pub(crate) fn u64_at(buf: &[u8], off: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(buf.get(off..off + 8)?.try_into().ok()?))
}

/// Splits a buffer of concatenated netlink messages. Every length is checked against what is
/// left, so a truncated or garbled reply is an error, never a panic or an endless loop.
pub(crate) fn messages<'a>(buf: &'a [u8], what: &str) -> Result<Vec<Message<'a>>> {
    let mut out = Vec::new();
    let mut off = 0;
    while off < buf.len() {
        let rest = &buf[off..];
        if rest.len() < NLMSG_HDRLEN {
            return Err(malformed(what, format!("{} stray bytes after the last message", rest.len())));
        }
        let len = u32_at(rest, 0).unwrap_or(0) as usize;
        if len < NLMSG_HDRLEN || len > rest.len() {
            return Err(malformed(what, format!("message length {len} with {} bytes left", rest.len())));
        }
        out.push(Message {
            kind: u16_at(rest, 4).unwrap_or(0),
            flags: u16_at(rest, 6).unwrap_or(0),
            seq: u32_at(rest, 8).unwrap_or(0),
            payload: &rest[NLMSG_HDRLEN..len],
        });
        off += align4(len).min(rest.len());
    }
    Ok(out)
}

/// The data messages of a reply: an `NLMSG_ERROR` carrying an errno becomes that error
/// (with `what` as context), acknowledgements are dropped, and `NLMSG_DONE` ends the list.
pub(crate) fn data_messages<'a>(buf: &'a [u8], what: &str) -> Result<Vec<Message<'a>>> {
    let mut out = Vec::new();
    for msg in messages(buf, what)? {
        match msg.kind {
            NLMSG_ERROR => {
                let errno = u32_at(msg.payload, 0).ok_or_else(|| malformed(what, "short NLMSG_ERROR"))? as i32;
                if errno != 0 {
                    return Err(Error::io(what, io::Error::from_raw_os_error(errno.saturating_neg())));
                }
            }
            NLMSG_DONE => {
                // A dump ends with an int that is negative if the dump failed half-way.
                match u32_at(msg.payload, 0).map(|v| v as i32) {
                    Some(errno) if errno < 0 => {
                        return Err(Error::io(what, io::Error::from_raw_os_error(errno.saturating_neg())))
                    }
                    _ => break,
                }
            }
            _ => out.push(msg),
        }
    }
    Ok(out)
}

/// The attributes (type, value) that follow a fixed header. The nested and byte-order flag
/// bits are masked off the type.
pub(crate) fn attrs<'a>(buf: &'a [u8], what: &str) -> Result<Vec<(u16, &'a [u8])>> {
    let mut out = Vec::new();
    let mut off = 0;
    while off + 4 <= buf.len() {
        let len = u16_at(buf, off).unwrap_or(0) as usize;
        let kind = u16_at(buf, off + 2).unwrap_or(0) & NLA_TYPE_MASK;
        if len < 4 || off + len > buf.len() {
            return Err(malformed(
                what,
                format!("attribute {kind} of length {len} with {} bytes left", buf.len() - off),
            ));
        }
        out.push((kind, &buf[off + 4..off + len]));
        off += align4(len);
    }
    Ok(out)
}

/// The value of the first attribute of type `kind`.
pub(crate) fn find<'a>(attrs: &[(u16, &'a [u8])], kind: u16) -> Option<&'a [u8]> {
    attrs.iter().find(|(k, _)| *k == kind).map(|(_, v)| *v)
}

/// A NUL-terminated string attribute.
pub(crate) fn attr_str(value: &[u8]) -> Option<String> {
    let end = value.iter().position(|&b| b == 0).unwrap_or(value.len());
    std::str::from_utf8(&value[..end]).ok().filter(|s| !s.is_empty()).map(str::to_owned)
}

/// Appends one attribute (header, value, padding) to a request.
pub(crate) fn push_attr(req: &mut Vec<u8>, kind: u16, value: &[u8]) {
    let len = 4 + value.len();
    req.extend_from_slice(&(len as u16).to_ne_bytes());
    req.extend_from_slice(&kind.to_ne_bytes());
    req.extend_from_slice(value);
    req.resize(req.len() + align4(len) - len, 0);
}

/// A route netlink socket, bound in the caller's network namespace.
pub(crate) struct Socket {
    fd: OwnedFd,
    seq: u32,
}

impl Socket {
    pub(crate) fn open() -> Result<Self> {
        Self::open_protocol(libc::NETLINK_ROUTE)
    }

    /// A socket of another netlink protocol (`NETLINK_GENERIC` for the ethtool family).
    pub(crate) fn open_protocol(protocol: libc::c_int) -> Result<Self> {
        // SAFETY: plain socket(2) call; the result is checked before use.
        let fd = unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC, protocol) };
        if fd < 0 {
            return Err(Error::io("opening a netlink socket", io::Error::last_os_error()));
        }
        // SAFETY: fd is a fresh descriptor we own; OwnedFd closes it on every path below.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: an all-zero sockaddr_nl is valid (nl_pid 0 lets the kernel pick our port id).
        let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        // SAFETY: addr is a valid sockaddr_nl and the length passed is its size.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                &addr as *const libc::sockaddr_nl as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(Error::io("binding a route netlink socket", io::Error::last_os_error()));
        }
        let timeout = libc::timeval { tv_sec: RECV_TIMEOUT_S, tv_usec: 0 };
        // SAFETY: timeout is a valid timeval and the length passed is its size.
        let rc = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                &timeout as *const libc::timeval as *const libc::c_void,
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(Error::io("setting a netlink receive timeout", io::Error::last_os_error()));
        }
        Ok(Self { fd, seq: 0 })
    }

    /// Sends one request (`body` is the fixed header and attributes after the netlink header)
    /// and returns the raw reply: every datagram up to `NLMSG_DONE`, an error, or a single
    /// message without `NLM_F_MULTI`. Parse it with [`data_messages`].
    pub(crate) fn request(&mut self, kind: u16, flags: u16, body: &[u8], what: &str) -> Result<Vec<u8>> {
        self.seq = self.seq.wrapping_add(1);
        let mut req = Vec::with_capacity(NLMSG_HDRLEN + body.len());
        req.extend_from_slice(&((NLMSG_HDRLEN + body.len()) as u32).to_ne_bytes());
        req.extend_from_slice(&kind.to_ne_bytes());
        req.extend_from_slice(&(flags | NLM_F_REQUEST).to_ne_bytes());
        req.extend_from_slice(&self.seq.to_ne_bytes());
        req.extend_from_slice(&0u32.to_ne_bytes());
        req.extend_from_slice(body);
        // SAFETY: req is a live buffer of req.len() bytes.
        let sent = unsafe { libc::send(self.fd.as_raw_fd(), req.as_ptr().cast(), req.len(), 0) };
        if sent < 0 {
            return Err(Error::io(what, io::Error::last_os_error()));
        }

        let mut reply = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            // SAFETY: buf is a live, writable buffer of buf.len() bytes. MSG_TRUNC makes the
            // kernel return the datagram's real length, so truncation is detected below.
            let n = unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), libc::MSG_TRUNC) };
            if n < 0 {
                let err = io::Error::last_os_error();
                if err.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(Error::io(format!("{what} (waiting for the kernel's answer)"), err));
            }
            let n = n as usize;
            if n > buf.len() {
                return Err(malformed(what, format!("a {n}-byte datagram does not fit the {}-byte buffer", buf.len())));
            }
            let datagram = &buf[..n];
            let mut finished = false;
            for msg in messages(datagram, what)? {
                if msg.seq != self.seq {
                    continue; // not ours (cannot happen on a fresh socket; cheap to be sure)
                }
                if msg.kind == NLMSG_DONE || msg.kind == NLMSG_ERROR || msg.flags & NLM_F_MULTI == 0 {
                    finished = true;
                }
            }
            reply.extend_from_slice(datagram);
            if finished {
                return Ok(reply);
            }
            if reply.len() > MAX_REPLY_BYTES {
                return Err(malformed(what, format!("reply longer than {MAX_REPLY_BYTES} bytes")));
            }
        }
    }
}

// Kernel UAPI constants: genetlink: the controller that maps family names to ids.
pub(crate) const GENL_ID_CTRL: u16 = 0x10;
const CTRL_CMD_GETFAMILY: u8 = 3;
pub(crate) const CTRL_ATTR_FAMILY_ID: u16 = 1;
pub(crate) const CTRL_ATTR_FAMILY_NAME: u16 = 2;
/// `struct genlmsghdr`: cmd, version, reserved.
pub(crate) const GENL_HDRLEN: usize = 4;

/// The body of a generic-netlink request: the genl header, then the attributes.
pub(crate) fn genl_request(cmd: u8, version: u8, attrs_bytes: &[u8]) -> Vec<u8> {
    let mut body = vec![cmd, version, 0, 0];
    body.extend_from_slice(attrs_bytes);
    body
}

/// The family id out of a `CTRL_CMD_GETFAMILY` reply.
pub(crate) fn parse_family_id(reply: &[u8], what: &str) -> Result<u16> {
    let msgs = data_messages(reply, what)?;
    let msg = msgs.first().ok_or_else(|| malformed(what, "no reply message"))?;
    let a = attrs(msg.payload.get(GENL_HDRLEN..).ok_or_else(|| malformed(what, "short genl header"))?, what)?;
    find(&a, CTRL_ATTR_FAMILY_ID).and_then(|v| u16_at(v, 0)).ok_or_else(|| malformed(what, "no family id"))
}

/// The id of generic-netlink family `name` ("ethtool", "netdev"); an error when the kernel
/// does not have it.
pub(crate) fn genl_family(sock: &mut Socket, name: &str) -> Result<u16> {
    let what = format!("resolving the {name} netlink family");
    let mut attr = Vec::new();
    let mut bytes = name.as_bytes().to_vec();
    bytes.push(0);
    push_attr(&mut attr, CTRL_ATTR_FAMILY_NAME, &bytes);
    let reply = sock.request(GENL_ID_CTRL, 0, &genl_request(CTRL_CMD_GETFAMILY, 1, &attr), &what)?;
    parse_family_id(&reply, &what)
}

pub(crate) const NLA_F_NESTED: u16 = 0x8000;
// Kernel UAPI constants: ethtool_netlink
pub(crate) const ETHTOOL_GENL_VERSION: u8 = 1;
pub(crate) const ETHTOOL_A_HEADER_DEV_NAME: u16 = 2;

/// The nested request header (attribute `header_kind` of the message) that names device
/// `iface` to an ethtool netlink request.
pub(crate) fn ethtool_dev_header(header_kind: u16, iface: &str) -> Vec<u8> {
    let mut name = iface.as_bytes().to_vec();
    name.push(0);
    let mut header = Vec::new();
    push_attr(&mut header, ETHTOOL_A_HEADER_DEV_NAME, &name);
    let mut out = Vec::new();
    push_attr(&mut out, header_kind | NLA_F_NESTED, &header);
    out
}

/// A generic-netlink message as the kernel sends it (header, genl header, attributes), for
/// parser tests.
#[cfg(test)]
pub(crate) fn genl_message(kind: u16, genl_cmd: u8, attrs: &[(u16, Vec<u8>)]) -> Vec<u8> {
    let mut body = vec![genl_cmd, 1, 0, 0];
    for (k, v) in attrs {
        push_attr(&mut body, *k, v);
    }
    let mut out = Vec::new();
    out.extend_from_slice(&((16 + body.len()) as u32).to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(&NLM_F_MULTI.to_ne_bytes());
    out.extend_from_slice(&1u32.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes());
    out.extend_from_slice(&body);
    out
}

/// The name of interface `ifindex` in the caller's network namespace.
pub(crate) fn ifname(ifindex: u32) -> Option<String> {
    let mut name = [0 as libc::c_char; libc::IF_NAMESIZE];
    // SAFETY: name has room for IF_NAMESIZE bytes, as if_indextoname requires.
    let p = unsafe { libc::if_indextoname(ifindex, name.as_mut_ptr()) };
    if p.is_null() {
        return None;
    }
    // SAFETY: on success if_indextoname wrote a NUL-terminated string into name.
    let s = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) };
    Some(s.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_round_trip_with_padding() {
        let mut buf = Vec::new();
        push_attr(&mut buf, 1, b"tbf\0");
        push_attr(&mut buf, 0x8000 | 2, &[1, 2, 3]);
        push_attr(&mut buf, 3, &7u32.to_ne_bytes());
        assert_eq!(buf.len(), 8 + 8 + 8, "each attribute is padded to 4 bytes");
        let a = attrs(&buf, "test").unwrap();
        assert_eq!(a.len(), 3);
        assert_eq!(attr_str(find(&a, 1).unwrap()).as_deref(), Some("tbf"));
        assert_eq!(find(&a, 2), Some(&[1u8, 2, 3][..]), "the NLA_F_NESTED bit is masked off the type");
        assert_eq!(find(&a, 3).and_then(|v| u32_at(v, 0)), Some(7));
    }

    #[test]
    fn malformed_attributes_are_errors() {
        assert!(attrs(&[8, 0, 1, 0, 1], "t").is_err(), "attribute longer than the buffer");
        assert!(attrs(&[2, 0, 1, 0], "t").is_err(), "attribute shorter than its header");
        assert!(attrs(&[], "t").unwrap().is_empty());
    }

    #[test]
    fn malformed_messages_are_errors() {
        let err = messages(&[200, 0, 0, 0, 24, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0], "route lookup").unwrap_err();
        assert!(err.message.starts_with("route lookup: "), "error names the question: {err}");
        assert!(messages(&[0; 15], "t").is_err(), "shorter than one header");
        assert!(messages(&[0; 16], "t").is_err(), "zero length would loop forever");
        assert!(messages(&[], "t").unwrap().is_empty());
    }

    #[test]
    fn error_message_becomes_io_error() {
        // NLMSG_ERROR with errno -101 (ENETUNREACH), as the kernel answers a route lookup
        // for an address with no route.
        let mut m = Vec::new();
        m.extend_from_slice(&36u32.to_ne_bytes());
        m.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
        m.extend_from_slice(&0u16.to_ne_bytes());
        m.extend_from_slice(&[0; 8]);
        m.extend_from_slice(&(-101i32).to_ne_bytes());
        m.extend_from_slice(&[0; 16]);
        let err = data_messages(&m, "route to 192.0.2.1").unwrap_err();
        assert!(err.message.contains("unreachable"), "errno text is kept: {err}");
        // errno 0 is an acknowledgement, not an error
        m[16..20].copy_from_slice(&0i32.to_ne_bytes());
        assert!(data_messages(&m, "t").unwrap().is_empty());
    }

    #[test]
    fn loopback_index_has_a_name() {
        assert_eq!(ifname(1).as_deref(), Some("lo"), "lo is ifindex 1 in every namespace");
        assert_eq!(ifname(u32::MAX), None);
    }
}
