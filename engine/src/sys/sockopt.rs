//! Socket plumbing the standard library does not offer: sockets created before they are
//! bound (so options such as `SO_REUSEPORT` can be set first), integer socket options, the
//! knobs of a test's flows (`-C`, `-w`, `-M`, `-S`, `--fq-rate`) and their read-back, and
//! `sockaddr` conversion for raw calls and io_uring operations. Options socket2 offers are
//! set through it; what it lacks (SO_MAX_PACING_RATE as 64 bits, the reuseport BPF program)
//! is written out here.

use crate::base::spec::Tuning;
use crate::sys::mptcp::StreamProtocol;
use serde::{Deserialize, Serialize};
use socket2::{Domain, Protocol, SockRef, Socket, Type};
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// Where a connecting side's sockets leave from (`-4`/`-6`, `-B ADDR[%DEV]`, `--bind-dev`, `--cport`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LocalEnd {
    /// Only addresses of this family are tried (4 or 6).
    pub family: Option<u8>,
    /// Local address to bind before connecting (port chosen by the kernel).
    pub bind: Option<std::net::IpAddr>,
    /// SO_BINDTODEVICE before connecting.
    pub device: Option<String>,
    /// Source port of the first data flow (`--cport`); flow i leaves from this + i. The
    /// control connection always takes a port from the kernel.
    pub data_port: Option<u16>,
    /// `--steer off`: leave the data flows' source ports to the kernel even when the receiver
    /// says how its NIC hashes them (to see what random hashing does).
    pub no_steer: bool,
    /// `--steer ntuple`: ask the receiver to put each flow on its queue with an n-tuple flow
    /// rule of its NIC (for NICs whose hash cannot be steered by source port).
    pub ntuple: bool,
}

impl LocalEnd {
    /// This end for data flow `flow`: its own source port when `--cport` gave a first one.
    pub(crate) fn for_flow(&self, flow: u32) -> Result<Self, String> {
        let data_port = match self.data_port {
            Some(first) => Some(
                u16::try_from(u32::from(first) + flow)
                    .map_err(|_| format!("--cport {first}: flow {flow} would need a port above 65535"))?,
            ),
            None => None,
        };
        Ok(Self { data_port, ..self.clone() })
    }

    /// This end for a data flow leaving from `port` (a port chosen for its receive queue).
    pub(crate) fn with_port(&self, port: u16) -> Self {
        Self { data_port: Some(port), ..self.clone() }
    }

    /// This end for the control connection: any source port.
    pub(crate) fn for_control(&self) -> Self {
        Self { data_port: None, ..self.clone() }
    }
}

/// `SO_INCOMING_NAPI_ID` of a socket: the NIC queue its packets arrive on, 0 when the path
/// has none (loopback, veth without GRO/XDP): NAPI busy polling then has nothing to poll.
pub(crate) fn incoming_napi_id(fd: std::os::fd::RawFd) -> Option<u32> {
    int_sockopt(fd, libc::SO_INCOMING_NAPI_ID).map(|id| id as u32)
}

/// `SO_INCOMING_CPU` of a socket: the CPU that processed its last packet (-1 before any).
pub(crate) fn incoming_cpu(fd: std::os::fd::RawFd) -> Option<usize> {
    int_sockopt(fd, libc::SO_INCOMING_CPU).and_then(|c| usize::try_from(c).ok())
}

/// An integer SOL_SOCKET option of a socket (`None` when the kernel refuses it).
fn int_sockopt(fd: std::os::fd::RawFd, opt: libc::c_int) -> Option<libc::c_int> {
    let mut id: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: id and len live across the call and len is id's size.
    let rc = unsafe { libc::getsockopt(fd, libc::SOL_SOCKET, opt, (&mut id as *mut libc::c_int).cast(), &mut len) };
    (rc == 0).then_some(id)
}

/// Whether a TCP socket could bind `ip`:`port` now (without SO_REUSEADDR, so a port still in
/// TIME_WAIT from an earlier run counts as taken).
pub(crate) fn tcp_port_free(ip: std::net::IpAddr, port: u16) -> bool {
    Socket::new(Domain::for_address(SocketAddr::new(ip, port)), Type::STREAM.cloexec(), Some(Protocol::TCP))
        .and_then(|s| s.bind(&SocketAddr::new(ip, port).into()))
        .is_ok()
}

/// Whether UDP `port` on `ip` can be bound now.
pub(crate) fn udp_port_free(ip: std::net::IpAddr, port: u16) -> bool {
    std::net::UdpSocket::bind(SocketAddr::new(ip, port)).is_ok()
}

/// Connects a TCP socket to `addr` from `local`, with the knobs that must be set before the
/// handshake (buffers, for the window scale; MSS, which the SYN announces). A data flow of
/// an MPTCP test (`tuning.mptcp`) is an MPTCP socket.
pub(crate) fn connect_tcp(
    addr: SocketAddr,
    local: &LocalEnd,
    tuning: Option<&Tuning>,
    timeout: Duration,
) -> io::Result<TcpStream> {
    connect_stream(addr, local, StreamProtocol::of(tuning.is_some_and(|t| t.mptcp)), tuning, timeout)
}

/// [`connect_tcp`] with a socket of `protocol`, whatever `tuning` says (a peer tool's data
/// connection, whose knobs are set once it is connected).
pub(crate) fn connect_stream(
    addr: SocketAddr,
    local: &LocalEnd,
    protocol: StreamProtocol,
    tuning: Option<&Tuning>,
    timeout: Duration,
) -> io::Result<TcpStream> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM.cloexec(), Some(protocol.socket2()))?;
    if let Some(dev) = &local.device {
        socket.bind_device(Some(dev.as_bytes()))?;
    }
    if local.bind.is_some() || local.data_port.is_some() {
        let unspecified = if addr.is_ipv4() { Ipv4Addr::UNSPECIFIED.into() } else { Ipv6Addr::UNSPECIFIED.into() };
        let port = local.data_port.unwrap_or(0);
        if port != 0 {
            // A fixed source port is reused run after run; the last run's TIME_WAIT must not block it.
            socket.set_reuse_address(true)?;
        }
        socket.bind(&SocketAddr::new(local.bind.unwrap_or(unspecified), port).into())?;
    }
    if let Some(t) = tuning {
        if let Some(w) = t.window {
            socket.set_send_buffer_size(w as usize)?;
            socket.set_recv_buffer_size(w as usize)?;
        }
        if let Some(mss) = t.mss {
            socket.set_tcp_mss(mss)?;
        }
    }
    socket.connect_timeout(&addr.into(), timeout)?;
    Ok(socket.into())
}

/// Applies the knobs that hold on a connected flow: congestion control, buffers, no-delay,
/// TOS and, where the flow sends, the kernel pacing rate.
pub(crate) fn apply_tuning(stream: &TcpStream, t: &Tuning, sends: bool) -> io::Result<()> {
    let s = SockRef::from(stream);
    if let Some(c) = &t.congestion {
        s.set_tcp_congestion(c.as_bytes())?;
    }
    if let Some(w) = t.window {
        s.set_send_buffer_size(w as usize)?;
        s.set_recv_buffer_size(w as usize)?;
    }
    if t.nodelay {
        s.set_tcp_nodelay(true)?;
    }
    if let Some(tos) = t.tos {
        set_tos(&s, tos, stream.local_addr()?.is_ipv6())?;
    }
    if let (Some(bps), true) = (t.fq_rate_bps, sends) {
        set_max_pacing_rate(stream.as_raw_fd(), bps / 8)?;
    }
    Ok(())
}

/// Marks a socket's packets: IP_TOS for IPv4, IPV6_TCLASS for IPv6 (TCP and UDP alike).
pub(crate) fn set_tos(s: &SockRef, tos: u8, ipv6: bool) -> io::Result<()> {
    if ipv6 {
        s.set_tclass_v6(u32::from(tos))?;
        // An IPv6 socket carrying IPv4 (a v4-mapped peer) marks with IP_TOS.
        let _ = s.set_tos_v4(u32::from(tos));
        Ok(())
    } else {
        s.set_tos_v4(u32::from(tos))
    }
}

/// SO_MAX_PACING_RATE in bytes per second, as 64 bits (rates above 34 Gbit/s do not fit the
/// 32-bit form); socket2 has no setter for it.
pub(crate) fn set_max_pacing_rate(fd: RawFd, bytes_per_second: u64) -> io::Result<()> {
    // SAFETY: a u64 option value that lives across the call; a bad fd is an error return.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_MAX_PACING_RATE,
            (&bytes_per_second as *const u64).cast(),
            std::mem::size_of::<u64>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn max_pacing_rate(fd: RawFd) -> Option<u64> {
    let mut v: u64 = 0;
    let mut len = std::mem::size_of::<u64>() as libc::socklen_t;
    // SAFETY: the kernel writes at most len bytes into v.
    let rc = unsafe {
        libc::getsockopt(fd, libc::SOL_SOCKET, libc::SO_MAX_PACING_RATE, (&mut v as *mut u64).cast(), &mut len)
    };
    (rc == 0).then_some(v)
}

/// Checks that this kernel has congestion control `name`: listed in
/// tcp_available_congestion_control, or loadable (setting it on a probe socket makes the
/// kernel load its module where permitted). The error lists what the kernel has.
pub fn check_congestion(name: &str) -> Result<(), String> {
    let available = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control").unwrap_or_default();
    if available.split_whitespace().any(|a| a == name) {
        return Ok(());
    }
    let loads =
        Socket::new(Domain::IPV4, Type::STREAM, None).is_ok_and(|s| s.set_tcp_congestion(name.as_bytes()).is_ok());
    if loads {
        return Ok(());
    }
    Err(format!(
        "congestion control '{name}' is not available: this kernel has {} (net.ipv4.tcp_available_congestion_control)",
        available.trim()
    ))
}

/// A flow's knobs as the kernel reports them after the test.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FlowSocket {
    /// TCP_CONGESTION.
    pub congestion: Option<String>,
    /// SO_SNDBUF and SO_RCVBUF as read back (the kernel doubles what was asked, within
    /// net.core.wmem_max / rmem_max).
    pub sndbuf: Option<u64>,
    pub rcvbuf: Option<u64>,
    /// IP_TOS (IPv4) or IPV6_TCLASS.
    pub tos: Option<u32>,
    /// SO_MAX_PACING_RATE in bytes per second (u64::MAX: unlimited).
    pub max_pacing_rate: Option<u64>,
}

impl FlowSocket {
    pub fn read(stream: &TcpStream) -> Self {
        let s = SockRef::from(stream);
        let v6 = stream.local_addr().is_ok_and(|a| a.is_ipv6() && !is_v4_mapped(&a));
        Self {
            congestion: s.tcp_congestion().ok().map(|c| String::from_utf8_lossy(&c).trim_end_matches('\0').to_string()),
            sndbuf: s.send_buffer_size().ok().map(|v| v as u64),
            rcvbuf: s.recv_buffer_size().ok().map(|v| v as u64),
            tos: if v6 { s.tclass_v6().ok() } else { s.tos_v4().ok() },
            max_pacing_rate: max_pacing_rate(stream.as_raw_fd()),
        }
    }
}

fn is_v4_mapped(a: &SocketAddr) -> bool {
    matches!(a, SocketAddr::V6(v6) if v6.ip().to_ipv4_mapped().is_some())
}

/// What `-w` came to: a note when the kernel granted less than asked (twice the request,
/// its bookkeeping) because of net.core.wmem_max / rmem_max, with the sysctl that raises it.
pub(crate) fn window_note(t: &Tuning, flows: &[FlowSocket]) -> Option<String> {
    let want = u64::from(t.window?) * 2;
    let mut notes = Vec::new();
    for (name, got, sysctl) in [
        ("SO_SNDBUF", flows.iter().filter_map(|f| f.sndbuf).min(), "net.core.wmem_max"),
        ("SO_RCVBUF", flows.iter().filter_map(|f| f.rcvbuf).min(), "net.core.rmem_max"),
    ] {
        if let Some(got) = got.filter(|&g| g < want) {
            notes.push(format!(
                "{name} capped at {got} bytes by {sysctl} (raise it: sysctl -w {sysctl}={})",
                t.window.unwrap_or(0)
            ));
        }
    }
    (!notes.is_empty()).then(|| notes.join("; "))
}

/// A new close-on-exec socket of `kind` (`SOCK_STREAM`, `SOCK_DGRAM`) in `addr`'s family,
/// not yet bound (so options such as `SO_REUSEPORT` can be set first).
pub(crate) fn socket_for(addr: &SocketAddr, kind: libc::c_int) -> io::Result<OwnedFd> {
    Ok(Socket::new(Domain::for_address(*addr), Type::from(kind).cloexec(), None)?.into())
}

/// [`socket_for`] a stream socket of `protocol` (TCP or MPTCP).
pub(crate) fn stream_socket_for(addr: &SocketAddr, protocol: StreamProtocol) -> io::Result<OwnedFd> {
    Ok(Socket::new(Domain::for_address(*addr), Type::STREAM.cloexec(), Some(protocol.socket2()))?.into())
}

/// Sets an integer socket option.
pub(crate) fn set_int(fd: RawFd, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> io::Result<()> {
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

/// Bytes a TCP socket has sent or queued that its peer has not yet acknowledged
/// (`SIOCOUTQ`): 0 once every byte written reached the peer's kernel.
pub(crate) fn unacked_bytes(fd: RawFd) -> io::Result<u32> {
    let mut n: libc::c_int = 0;
    // SAFETY: SIOCOUTQ writes one c_int through the pointer, which lives across the call.
    if unsafe { libc::ioctl(fd, libc::TIOCOUTQ, &mut n as *mut libc::c_int) } == 0 {
        Ok(n.max(0) as u32)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Binds `fd` to `addr`.
pub fn bind(fd: &impl std::os::fd::AsFd, addr: &SocketAddr) -> io::Result<()> {
    SockRef::from(fd).bind(&(*addr).into())
}

/// `SO_ATTACH_REUSEPORT_CBPF` (generic socket UAPI); the libc crate has it only for Android.
const SO_ATTACH_REUSEPORT_CBPF: libc::c_int = 51;

/// A classic BPF program for an SO_REUSEPORT group that picks the socket by the CPU the
/// packet is being processed on: `cpu_to_socket` lists (CPU, socket index in the group);
/// any other CPU takes socket `cpu % group_size`. With each socket served by a thread pinned
/// to its CPU, a connection is accepted (and its packets handled) where its interrupt and
/// softirq already run.
pub(crate) fn cpu_steering_program(cpu_to_socket: &[(usize, u32)], group_size: u32) -> Vec<libc::sock_filter> {
    let op = |code: u16, jt: u8, jf: u8, k: u32| libc::sock_filter { code, jt, jf, k };
    let (ld_abs_w, jeq_k, ret_k, mod_k, ret_a) = (0x20, 0x15, 0x06, 0x94, 0x16);
    let mut prog = vec![op(ld_abs_w, 0, 0, (libc::SKF_AD_OFF + libc::SKF_AD_CPU) as u32)];
    for &(cpu, socket) in cpu_to_socket {
        // Equal: fall through to the return; else skip it.
        prog.push(op(jeq_k, 0, 1, cpu as u32));
        prog.push(op(ret_k, 0, 0, socket));
    }
    prog.push(op(mod_k, 0, 0, group_size.max(1)));
    prog.push(op(ret_a, 0, 0, 0));
    prog
}

/// Attaches [`cpu_steering_program`] to the SO_REUSEPORT group `fd` belongs to.
pub(crate) fn attach_cpu_steering(fd: RawFd, cpu_to_socket: &[(usize, u32)], group_size: u32) -> io::Result<()> {
    let mut prog = cpu_steering_program(cpu_to_socket, group_size);
    let fprog = libc::sock_fprog { len: prog.len() as u16, filter: prog.as_mut_ptr() };
    // SAFETY: fprog points at `prog`, which lives across the call; the kernel copies it.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            SO_ATTACH_REUSEPORT_CBPF,
            (&fprog as *const libc::sock_fprog).cast(),
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `addr` as a raw `sockaddr` for io_uring operations (`as_ptr()`, `len()`).
pub(crate) fn sockaddr(addr: &SocketAddr) -> socket2::SockAddr {
    (*addr).into()
}

/// Every address of the host's interfaces (what a listener on the unspecified address serves).
pub(crate) fn interface_addresses() -> Vec<std::net::IpAddr> {
    let mut out = Vec::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list this function frees below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return out;
    }
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, not yet freed.
        let ifa = unsafe { &*cur };
        if !ifa.ifa_addr.is_null() {
            // SAFETY: ifa_addr points at a sockaddr whose family says which struct it is.
            let family = i32::from(unsafe { (*ifa.ifa_addr).sa_family });
            if family == libc::AF_INET {
                // SAFETY: an AF_INET address is a sockaddr_in.
                let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
                out.push(std::net::IpAddr::from(u32::from_be(sin.sin_addr.s_addr).to_be_bytes()));
            } else if family == libc::AF_INET6 {
                // SAFETY: an AF_INET6 address is a sockaddr_in6.
                let sin6 = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in6) };
                out.push(std::net::IpAddr::from(sin6.sin6_addr.s6_addr));
            }
        }
        cur = ifa.ifa_next;
    }
    // SAFETY: `head` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    out
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
    fn the_steering_program_picks_the_socket_of_the_sending_cpu() {
        let cpus = core_affinity::get_core_ids().unwrap_or_default();
        if cpus.len() < 2 {
            return; // One CPU: nothing to steer between.
        }
        // Two UDP sockets in one SO_REUSEPORT group on loopback, CPU 0 -> socket 1 and
        // CPU 1 -> socket 0 (crossed, so a default hash cannot pass by luck).
        let probe = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = probe.local_addr().unwrap();
        drop(probe);
        let group: Vec<std::net::UdpSocket> = (0..2)
            .map(|_| {
                let fd = socket_for(&addr, libc::SOCK_DGRAM).unwrap();
                SockRef::from(&fd).set_reuse_port(true).unwrap();
                bind(&fd, &addr).unwrap();
                let s = std::net::UdpSocket::from(fd);
                s.set_nonblocking(true).unwrap();
                s
            })
            .collect();
        let (c0, c1) = (cpus[0].id, cpus[1].id);
        attach_cpu_steering(group[0].as_raw_fd(), &[(c0, 1), (c1, 0)], 2).unwrap();
        for (core, expect) in [(cpus[0], 1usize), (cpus[1], 0)] {
            std::thread::spawn(move || {
                assert!(core_affinity::set_for_current(core), "pin to CPU {}", core.id);
                let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
                for _ in 0..20 {
                    tx.send_to(b"x", addr).unwrap();
                }
            })
            .join()
            .unwrap();
            std::thread::sleep(std::time::Duration::from_millis(20));
            let mut buf = [0u8; 8];
            let mut got = [0usize; 2];
            for (i, s) in group.iter().enumerate() {
                while s.recv(&mut buf).is_ok() {
                    got[i] += 1;
                }
            }
            assert_eq!(got[expect], 20, "datagrams sent from CPU {} land on socket {expect}: {got:?}", core.id);
        }
    }

    #[test]
    fn bad_options_are_errors_not_panics() {
        assert!(set_int(-1, libc::SOL_SOCKET, libc::SO_REUSEPORT, 1).is_err());
    }
}
