//! The path to `--target`: is the address internal, does the host answer on the control
//! port (and how long a handshake takes), and what path MTU the kernel holds for it.
//!
//! Nothing here sends test traffic: up to three TCP handshakes (closed at once) and a UDP
//! socket that is connected but never written to (connecting only looks up the route).

use super::facts::{PathAddressFacts, PathMtuFacts, PathReachFacts};
use super::{Check, Context, HostFs, Reach, TargetFacts};
use crate::base::error::{Error, Result};
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// How long one handshake may take before the target counts as not answering.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

pub fn checks(ctx: &Context, _fs: &dyn HostFs) -> Vec<Check> {
    let Some(t) = &ctx.target else {
        return vec![Check::skip("path.target", "no --target: path checks skipped")];
    };
    vec![address(t), reach(t), path_mtu(ctx, t)]
}

/// Whether an address stays inside a private network (RFC 1918, CGNAT, link-local,
/// loopback, IPv6 unique-local and link-local).
pub(crate) fn is_internal(addr: IpAddr) -> bool {
    match addr.to_canonical() {
        IpAddr::V4(a) => {
            let o = a.octets();
            a.is_private() || a.is_loopback() || a.is_link_local() || (o[0] == 100 && (o[1] & 0xc0) == 64)
        }
        IpAddr::V6(a) => {
            let s = a.segments()[0];
            a.is_loopback() || (s & 0xfe00) == 0xfc00 || (s & 0xffc0) == 0xfe80
        }
    }
}

fn address(t: &TargetFacts) -> Check {
    let id = "path.address";
    let facts = PathAddressFacts { host: t.host.clone(), addr: t.addr, internal: is_internal(t.addr), local: t.local };
    if t.local {
        return Check::pass(id, format!("{} is this host's own address: traffic is looped back", t.addr)).facts(facts);
    }
    if is_internal(t.addr) {
        return Check::pass(id, format!("{} is an internal address", t.addr)).facts(facts);
    }
    Check::warn(id, format!("{} is a public address: cloud traffic to external IPs is NATed and slower than to internal ones", t.addr))
        .fix("use the target's internal (VPC) address, e.g. gcloud compute instances describe VM --format='get(networkInterfaces[0].networkIP)'")
        .facts(facts)
}

fn reach(t: &TargetFacts) -> Check {
    let id = "path.reach";
    let facts = PathReachFacts { port: t.port, reach: t.reach.clone(), rtt_us: t.rtt_us };
    let rtt = t.rtt_us.map(|r| format!(", handshake RTT {r:.0} µs")).unwrap_or_default();
    match &t.reach {
        Reach::Listening => Check::pass(id, format!("{}:{} accepts connections{rtt}", t.addr, t.port)).facts(facts),
        // A test cannot run there: a failed check (exit 1), as a send would fail.
        Reach::Refused => Check::fail(id, format!("{} answers, but nothing listens on port {}{rtt}", t.addr, t.port))
            .fix(format!("on the target: uringbench recv -p {}", t.port))
            .facts(facts),
        Reach::NoAnswer => Check::fail(
            id,
            format!(
                "no answer from {}:{} within {} s: host down, or a firewall drops it",
                t.addr,
                t.port,
                CONNECT_TIMEOUT.as_secs()
            ),
        )
        .fix(format!(
            "allow TCP {} (control and data flows) and UDP {} to the target (firewall rule / security group)",
            t.port, t.port
        ))
        .facts(facts),
        Reach::Error(e) => Check::fail(id, format!("cannot reach {}:{}: {e}", t.addr, t.port))
            .fix(format!("ip route get {}", t.addr))
            .facts(facts),
    }
}

fn path_mtu(ctx: &Context, t: &TargetFacts) -> Check {
    let id = "path.mtu";
    // An IP packet is at most 65535 bytes, whatever the interface (lo has 65536).
    let if_mtu = ctx.iface.as_ref().map(|l| l.mtu.min(65535));
    let facts = PathMtuFacts { path_mtu: t.path_mtu, interface_mtu: if_mtu };
    let Some(pmtu) = t.path_mtu else {
        return Check::skip(id, "the kernel gave no path MTU for the target").facts(facts);
    };
    // Without an answer the kernel's figure is only its route's: nothing was learnt on the way.
    if matches!(t.reach, Reach::NoAnswer | Reach::Error(_)) {
        return Check::skip(id, format!("{} did not answer: path MTU {pmtu} is the route's, not measured", t.addr))
            .facts(facts);
    }
    if ctx.cloud == Some(crate::sys::hostinfo::Cloud::Gcp) && pmtu < 8896 {
        return Check::warn(id, format!("path MTU {pmtu} to {}: GCP VPCs carry 8896", t.addr))
            .fix("gcloud compute networks update NETWORK --mtu=8896   # and the MTU on both VMs' interfaces")
            .facts(facts);
    }
    match if_mtu {
        Some(m) if pmtu < m => {
            Check::warn(id, format!("path MTU {pmtu} to {} is below the interface MTU {m}: a hop carries less", t.addr))
                .fix(format!(
                    "tracepath {}   # find the hop; set the interfaces to {pmtu} or raise that hop's MTU",
                    t.addr
                ))
                .facts(facts)
        }
        _ => Check::pass(id, format!("path MTU {pmtu} to {}", t.addr)).facts(facts),
    }
}

/// Resolves `host` and finds out how it answers; only an unresolvable name is an error.
pub(crate) fn probe_target(host: &str, port: u16) -> Result<TargetFacts> {
    let addr = resolve(host, port)?;
    let local = crate::sys::hostinfo::route_to(addr.ip()).is_ok_and(|r| r.local);
    let (reach, rtt) = handshakes(addr);
    Ok(TargetFacts {
        host: host.to_owned(),
        addr: addr.ip(),
        port,
        reach,
        rtt_us: rtt.map(|d| d.as_secs_f64() * 1e6),
        path_mtu: kernel_path_mtu(addr),
        local,
    })
}

fn resolve(host: &str, port: u16) -> Result<SocketAddr> {
    let bracketless = host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = bracketless.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    (host, port)
        .to_socket_addrs()
        .map_err(|e| Error::usage(format!("cannot resolve --target {host}: {e}")))?
        .next()
        .ok_or_else(|| Error::usage(format!("--target {host} resolves to no address")))
}

/// Up to three handshakes: the shortest time to an answer (accept or reset). A listener is
/// connected to once only, and the connection closed at once.
fn handshakes(addr: SocketAddr) -> (Reach, Option<Duration>) {
    let mut best: Option<Duration> = None;
    let mut reach = Reach::NoAnswer;
    for _ in 0..3 {
        let start = Instant::now();
        let result = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT);
        let took = start.elapsed();
        match result {
            Ok(stream) => {
                // The kernel's own RTT sample of the handshake (TCP_INFO) excludes the time
                // this process took to get scheduled around connect(), which on a first
                // connect in a fresh namespace is several times the wire RTT.
                let kernel_rtt = crate::sys::tcpinfo::TcpInfo::read(stream.as_raw_fd())
                    .map(|i| Duration::from_micros(u64::from(i.rtt_us)))
                    .filter(|d| !d.is_zero());
                drop(stream);
                let rtt = kernel_rtt.unwrap_or(took);
                return (Reach::Listening, Some(best.map_or(rtt, |b| b.min(rtt))));
            }
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                reach = Reach::Refused;
                best = Some(best.map_or(took, |b| b.min(took)));
            }
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => return (Reach::NoAnswer, best),
            Err(e) => return (Reach::Error(e.to_string()), best),
        }
    }
    (reach, best)
}

/// IP_MTU / IPV6_MTU of a UDP socket connected to `addr` with path-MTU discovery on: the
/// route's MTU, or a smaller one the kernel learned from ICMP "fragmentation needed".
fn kernel_path_mtu(addr: SocketAddr) -> Option<u32> {
    let bind: SocketAddr = if addr.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }.parse().ok()?;
    let sock = UdpSocket::bind(bind).ok()?;
    let (level, discover, do_flag, mtu_opt) = if addr.is_ipv4() {
        (libc::IPPROTO_IP, libc::IP_MTU_DISCOVER, libc::IP_PMTUDISC_DO, libc::IP_MTU)
    } else {
        (libc::IPPROTO_IPV6, libc::IPV6_MTU_DISCOVER, libc::IPV6_PMTUDISC_DO, libc::IPV6_MTU)
    };
    let fd = sock.as_raw_fd();
    // SAFETY: setsockopt reads one c_int from a live local variable of the size passed.
    unsafe {
        libc::setsockopt(
            fd,
            level,
            discover,
            (&do_flag as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    sock.connect(addr).ok()?;
    let mut mtu: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `mtu`, which lives across the call.
    let rc = unsafe { libc::getsockopt(fd, level, mtu_opt, (&mut mtu as *mut libc::c_int).cast(), &mut len) };
    (rc == 0 && mtu > 0).then_some(mtu as u32)
}

#[cfg(test)]
mod tests {
    use super::super::testctx::veth_ctx;
    use super::super::Status;
    use super::*;

    fn target(addr: &str, reach: Reach, pmtu: Option<u32>) -> TargetFacts {
        TargetFacts {
            host: addr.into(),
            addr: addr.parse().unwrap(),
            port: 5300,
            reach,
            rtt_us: Some(35.0),
            path_mtu: pmtu,
            local: false,
        }
    }

    #[test]
    fn address_classes() {
        for a in [
            "10.77.0.2",
            "172.16.5.1",
            "192.168.56.12",
            "100.64.0.1",
            "127.0.0.1",
            "169.254.1.1",
            "fd77::2",
            "fe80::1",
            "::1",
            "::ffff:10.0.0.1",
        ] {
            assert!(is_internal(a.parse().unwrap()), "{a}");
        }
        for a in ["8.8.8.8", "34.120.1.1", "100.128.0.1", "2001:4860::8888", "172.32.0.1"] {
            assert!(!is_internal(a.parse().unwrap()), "{a}");
        }
        assert_eq!(address(&target("34.120.1.1", Reach::Listening, None)).status, Status::Warn);
        assert_eq!(address(&target("10.0.0.2", Reach::Listening, None)).status, Status::Pass);
    }

    #[test]
    fn reach_and_mtu() {
        assert_eq!(reach(&target("10.0.0.2", Reach::Listening, None)).status, Status::Pass);
        let r = reach(&target("10.0.0.2", Reach::Refused, None));
        assert_eq!(r.status, Status::Fail, "nothing to test against");
        assert_eq!(r.fix.as_deref(), Some("on the target: uringbench recv -p 5300"));
        assert_eq!(reach(&target("10.0.0.2", Reach::NoAnswer, None)).status, Status::Fail);
        assert_eq!(
            reach(&target("10.0.0.2", Reach::Error("Network is unreachable".into()), None)).status,
            Status::Fail
        );
        let ctx = veth_ctx();
        assert_eq!(path_mtu(&ctx, &target("10.0.0.2", Reach::Listening, Some(9000))).status, Status::Pass);
        assert_eq!(path_mtu(&ctx, &target("10.0.0.2", Reach::Listening, Some(1400))).status, Status::Warn);
        assert_eq!(path_mtu(&ctx, &target("10.0.0.2", Reach::Listening, None)).status, Status::Skip);
        let silent = path_mtu(&ctx, &target("10.0.0.2", Reach::NoAnswer, Some(9000)));
        assert_eq!(silent.status, Status::Skip, "no answer: the route's MTU is not the path's: {}", silent.summary);
        let mut gcp = veth_ctx();
        gcp.cloud = Some(crate::sys::hostinfo::Cloud::Gcp);
        assert_eq!(path_mtu(&gcp, &target("10.0.0.2", Reach::Listening, Some(1460))).status, Status::Warn);
    }

    #[test]
    fn live_loopback_target() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let t = probe_target("127.0.0.1", port).unwrap();
        assert_eq!(t.reach, Reach::Listening);
        assert!(t.local, "127.0.0.1 routes locally");
        assert_eq!(t.path_mtu, Some(65535), "lo's MTU 65536, as large as an IP packet goes");
        assert!(t.rtt_us.is_some());
        drop(listener);
        let t = probe_target("127.0.0.1", port).unwrap();
        assert_eq!(t.reach, Reach::Refused, "nothing listens any more");
        let err = probe_target("", 5300).unwrap_err();
        assert_eq!(err.exit_code(), 2, "{err}");
    }
}
