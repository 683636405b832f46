//! Facts about the network path of a test: which interface carries it and what kind it is.
//!
//! Zero-copy send only pays when a real NIC DMAs straight from user pages; on loopback and
//! on virtual devices (veth, bridges, tunnels) the kernel copies at local delivery anyway
//! (KERNEL-NOTES), so `--zerocopy auto` asks this module first.

use std::ffi::CStr;
use std::net::IpAddr;
use std::path::Path;

/// The interface that owns a local address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interface {
    pub name: String,
    pub loopback: bool,
    /// A software device (veth, bridge, tun...): no DMA, so no true zero-copy.
    pub virtual_device: bool,
}

/// Finds the interface that holds `addr` (the local address of a connected socket).
pub fn interface_for_local_addr(addr: IpAddr) -> Option<Interface> {
    let name = interface_name_for(addr)?;
    let loopback = addr.is_loopback() || name == "lo";
    let virtual_device = Path::new("/sys/devices/virtual/net").join(&name).exists();
    Some(Interface { name, loopback, virtual_device })
}

fn interface_name_for(addr: IpAddr) -> Option<String> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs allocates a list we free with freeifaddrs below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return None;
    }
    let mut found = None;
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: cur walks the list getifaddrs returned; each node and its sockaddr are valid
        // until freeifaddrs.
        unsafe {
            let ifa = &*cur;
            if !ifa.ifa_addr.is_null() && sockaddr_ip(ifa.ifa_addr) == Some(addr) {
                found = Some(CStr::from_ptr(ifa.ifa_name).to_string_lossy().into_owned());
                break;
            }
            cur = ifa.ifa_next;
        }
    }
    // SAFETY: head came from getifaddrs.
    unsafe { libc::freeifaddrs(head) };
    found
}

/// # Safety
/// `sa` must point at a valid sockaddr of the family it declares.
unsafe fn sockaddr_ip(sa: *const libc::sockaddr) -> Option<IpAddr> {
    match i32::from((*sa).sa_family) {
        libc::AF_INET => {
            let sin = &*(sa as *const libc::sockaddr_in);
            Some(IpAddr::from(u32::from_be(sin.sin_addr.s_addr).to_be_bytes()))
        }
        libc::AF_INET6 => {
            let sin6 = &*(sa as *const libc::sockaddr_in6);
            Some(IpAddr::from(sin6.sin6_addr.s6_addr))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_found_and_classified() {
        let lo = interface_for_local_addr("127.0.0.1".parse().unwrap()).expect("127.0.0.1 is on lo");
        assert_eq!(lo.name, "lo");
        assert!(lo.loopback);
        assert!(lo.virtual_device, "lo is a software device");
    }

    #[test]
    fn unknown_address_has_no_interface() {
        assert_eq!(interface_for_local_addr("192.0.2.123".parse().unwrap()), None, "TEST-NET address is not local");
    }
}
