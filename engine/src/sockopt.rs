//! Socket plumbing the standard library does not offer: sockets created before they are
//! bound (so options such as `SO_REUSEPORT` can be set first), integer socket options, and
//! `sockaddr` conversion for raw calls and io_uring operations.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// A new close-on-exec socket of `kind` (`SOCK_STREAM`, `SOCK_DGRAM`) in `addr`'s family.
pub fn socket_for(addr: &SocketAddr, kind: libc::c_int) -> io::Result<OwnedFd> {
    let family = if addr.is_ipv6() { libc::AF_INET6 } else { libc::AF_INET };
    // SAFETY: socket(2) with constant arguments; the result is checked before use.
    let fd = unsafe { libc::socket(family, kind | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Sets an integer socket option.
pub fn set_int(fd: RawFd, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> io::Result<()> {
    // SAFETY: a c_int option value that lives across the call; a bad fd is an error return.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Binds `fd` to `addr`.
pub fn bind(fd: &impl AsRawFd, addr: &SocketAddr) -> io::Result<()> {
    let (sa, len) = sockaddr(addr);
    // SAFETY: sa is a valid sockaddr of len bytes that lives across the call.
    if unsafe { libc::bind(fd.as_raw_fd(), (&sa as *const libc::sockaddr_storage).cast(), len) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `addr` as a `sockaddr_storage` and the length of the part that matters.
pub fn sockaddr(addr: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes(a.ip().octets()) },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr { s6_addr: a.ip().octets() },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (storage, len as libc::socklen_t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockaddr_round_trips_through_bind_for_both_families() {
        for addr in ["127.0.0.1:0", "[::1]:0"] {
            let addr: SocketAddr = addr.parse().unwrap();
            let fd = socket_for(&addr, libc::SOCK_DGRAM).unwrap();
            if let Err(e) = bind(&fd, &addr) {
                assert_eq!(e.raw_os_error(), Some(libc::EADDRNOTAVAIL), "{addr}: only a missing ::1 may fail: {e}");
                continue;
            }
            let socket = std::net::UdpSocket::from(fd);
            let bound = socket.local_addr().unwrap();
            assert_eq!(bound.ip(), addr.ip(), "bound where asked");
            assert_ne!(bound.port(), 0, "the kernel picked a port");
        }
    }

    #[test]
    fn bad_options_are_errors_not_panics() {
        assert!(set_int(-1, libc::SOL_SOCKET, libc::SO_REUSEPORT, 1).is_err());
    }
}
