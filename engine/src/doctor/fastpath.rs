//! Readiness of the kernel fast paths beyond plain io_uring sockets: AF_XDP (the `xdp`
//! engine) and io_uring zero-copy receive (zcrx, `RECV_ZC`). Both depend on the NIC driver
//! as much as on the kernel: on veth and lo AF_XDP runs in copy
//! mode and zcrx is refused outright, and doctor says which prerequisite is missing.

use super::ethnl::HeaderSplit;
use super::facts::{AfXdpFacts, ZcrxFacts};
use super::{kernel::parse_release, Check, Context, HostFs, XdpSocket};
use crate::sys::hostinfo::ifstats::ZCRX_DRIVERS;

/// Drivers with AF_XDP zero-copy (gve from 6.17, in DQO-RDA queue format).
const XSK_ZEROCOPY_DRIVERS: &[&str] = &["ice", "i40e", "ixgbe", "igc", "mlx5_core", "gve"];
/// UMEM size the xdp engine registers.
const UMEM_BYTES: u64 = 64 << 20;

pub fn checks(ctx: &Context, fs: &dyn HostFs) -> Vec<Check> {
    vec![af_xdp(ctx, fs), zcrx(ctx, fs)]
}

/// Whether this kernel lets us open an AF_XDP socket.
pub(crate) fn probe_xdp_socket() -> XdpSocket {
    // SAFETY: socket() has no memory-safety preconditions; the fd is closed right away.
    let fd = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return XdpSocket::Unavailable(std::io::Error::last_os_error().to_string());
    }
    // SAFETY: fd is a socket we own and close once.
    unsafe { libc::close(fd) };
    XdpSocket::Available
}

fn bpffs_mounted(fs: &dyn HostFs) -> bool {
    fs.read("/proc/mounts").is_ok_and(|m| m.lines().any(|l| l.split_whitespace().nth(2) == Some("bpf")))
}

fn release(fs: &dyn HostFs) -> Option<(u32, u32)> {
    fs.read("/proc/sys/kernel/osrelease").ok().as_deref().and_then(parse_release)
}

fn af_xdp(ctx: &Context, fs: &dyn HostFs) -> Check {
    let id = "fastpath.af_xdp";
    let driver = ctx.driver().unwrap_or("unknown");
    let iface = ctx.iface.as_ref().map_or("IF", |l| l.name.as_str());
    let memlock_ok = ctx.caps.as_ref().is_ok_and(|c| c.memlock_allows(UMEM_BYTES));
    let bpffs = bpffs_mounted(fs);
    let gve_too_old = driver == "gve" && release(fs).is_some_and(|v| v < (6, 17));
    let zerocopy = XSK_ZEROCOPY_DRIVERS.contains(&driver) && !gve_too_old;
    let facts = AfXdpFacts {
        socket: matches!(ctx.xdp_socket, XdpSocket::Available),
        driver: driver.into(),
        zerocopy_driver: zerocopy,
        memlock_ok,
        bpffs_mounted: bpffs,
    };
    if let XdpSocket::Unavailable(e) = &ctx.xdp_socket {
        return Check::warn(id, format!("AF_XDP socket refused ({e}): the xdp engine cannot run"))
            .fix("use a kernel built with CONFIG_XDP_SOCKETS=y, and run as root (CAP_NET_RAW, CAP_BPF)")
            .facts(facts);
    }
    if !memlock_ok {
        return Check::warn(id, "AF_XDP available, but RLIMIT_MEMLOCK is too small for a 64 MiB UMEM")
            .fix("ulimit -l unlimited   # or run with CAP_IPC_LOCK")
            .facts(facts);
    }
    let mode = if zerocopy {
        format!("zero-copy capable driver {driver}")
    } else if gve_too_old {
        "copy mode: gve has AF_XDP zero-copy from Linux 6.17 (DQO-RDA)".to_string()
    } else {
        format!("copy mode: {driver} has no AF_XDP zero-copy (ice, i40e, mlx5, gve DQO-RDA do)")
    };
    let bpf = if bpffs { "" } else { "; bpffs not mounted (programs attach directly, no libxdp dispatcher)" };
    Check::pass(id, format!("AF_XDP ready on {iface}: {mode}{bpf}")).facts(facts)
}

fn zcrx(ctx: &Context, fs: &dyn HostFs) -> Check {
    let id = "fastpath.zcrx";
    let driver = ctx.driver().unwrap_or("unknown");
    let kernel_ok = ctx.caps.as_ref().is_ok_and(|c| c.recv_zc);
    let virtual_device = ctx.iface.as_ref().is_none_or(|l| l.virtual_device);
    let iface = ctx.iface.as_ref().map_or("IF", |l| l.name.as_str());
    let gve_too_old = driver == "gve" && release(fs).is_some_and(|v| v < (6, 18));
    let facts = ZcrxFacts {
        recv_zc_opcode: kernel_ok,
        driver: driver.into(),
        virtual_device,
        zcrx_driver: ZCRX_DRIVERS.contains(&driver),
        header_split: None,
    };
    if !kernel_ok {
        return Check::warn(id, "zero-copy receive unavailable: the kernel lacks IORING_OP_RECV_ZC (Linux 6.15+)")
            .fix("upgrade to Linux 6.15 or newer (6.18 for gve)")
            .facts(facts);
    }
    if virtual_device || !ZCRX_DRIVERS.contains(&driver) {
        return Check::skip(
            id,
            format!("zcrx not possible on {iface}: {driver} has no header split or queue API (needs mlx5, bnxt or gve DQO-RDA)"),
        )
        .facts(facts);
    }
    if gve_too_old {
        return Check::warn(id, "zcrx on gve needs Linux 6.18+ (DQO-RDA queue format)")
            .fix("upgrade the kernel to 6.18 or newer")
            .facts(facts);
    }
    let queues = ctx.iface.as_ref().map_or(1, |l| l.rx_queues);
    let last = queues.saturating_sub(1);
    let steer =
        format!("ethtool -X {iface} equal {last}; ethtool -N {iface} flow-type tcp6 dst-port 5300 action {last}");
    let split = ctx.rings.as_ref().map(|r| r.header_split).unwrap_or(HeaderSplit::Unknown);
    let (state, fix) = match split {
        HeaderSplit::Enabled => ("header split is on", steer),
        HeaderSplit::Disabled => ("header split is off", format!("ethtool -G {iface} tcp-data-split on; {steer}")),
        HeaderSplit::Unknown => {
            ("the driver does not report header split", format!("ethtool -G {iface} tcp-data-split on; {steer}"))
        }
    };
    let facts = ZcrxFacts { header_split: Some(split), ..facts };
    Check::warn(
        id,
        format!("kernel and {driver} support zcrx, {state}; it also needs a queue kept out of RSS with a flow rule steering the test to it"),
    )
    .fix(fix)
    .facts(facts)
}

#[cfg(test)]
mod tests {
    use super::super::fake::FakeFs;
    use super::super::testctx::{nic_ctx, veth_ctx};
    use super::super::Status;
    use super::*;

    #[test]
    fn veth_is_copy_mode_and_no_zcrx() {
        let fs = FakeFs::new(&[("/proc/mounts", "proc /proc proc rw 0 0\n"), ("/proc/sys/kernel/osrelease", "6.18.0")]);
        let ctx = veth_ctx();
        let x = af_xdp(&ctx, &fs);
        assert_eq!(x.status, Status::Pass);
        assert!(x.summary.contains("copy mode: veth"), "{}", x.summary);
        assert!(x.summary.contains("bpffs not mounted"));
        let z = zcrx(&ctx, &fs);
        assert_eq!(z.status, Status::Skip);
        assert!(z.summary.contains("veth has no header split"), "{}", z.summary);
    }

    #[test]
    fn real_nics() {
        let fs =
            FakeFs::new(&[("/proc/mounts", "bpf /sys/fs/bpf bpf rw 0 0\n"), ("/proc/sys/kernel/osrelease", "6.12.1")]);
        let mlx = nic_ctx("mlx5_core", 8, 8);
        let x = af_xdp(&mlx, &fs);
        assert!(x.summary.contains("zero-copy capable") && !x.summary.contains("bpffs"), "{}", x.summary);
        let z = zcrx(&mlx, &fs);
        assert_eq!(z.status, Status::Warn);
        assert!(z.summary.contains("header split is off"), "{}", z.summary);
        assert!(z.fix.unwrap().contains("ethtool -G eth0 tcp-data-split on"));
        let mut split_on = nic_ctx("mlx5_core", 8, 8);
        if let Ok(r) = split_on.rings.as_mut() {
            r.header_split = HeaderSplit::Enabled;
        }
        let z = zcrx(&split_on, &fs);
        assert!(z.summary.contains("header split is on") && !z.fix.unwrap().contains("tcp-data-split"));
        let gve = nic_ctx("gve", 8, 8);
        assert!(af_xdp(&gve, &fs).summary.contains("from Linux 6.17"), "6.12 gve is copy mode");
        assert!(zcrx(&gve, &fs).summary.contains("6.18"));
        let mut no_socket = veth_ctx();
        no_socket.xdp_socket = XdpSocket::Unavailable("Address family not supported by protocol".into());
        assert_eq!(af_xdp(&no_socket, &fs).status, Status::Warn);
        let mut old = mlx;
        old.caps.as_mut().unwrap().recv_zc = false;
        assert_eq!(zcrx(&old, &fs).status, Status::Warn);
        old.caps.as_mut().unwrap().cap_ipc_lock = false;
        assert!(af_xdp(&old, &fs).summary.contains("RLIMIT_MEMLOCK"), "8 MiB limit, no CAP_IPC_LOCK");
    }

    #[test]
    fn live_socket_probe() {
        assert_eq!(probe_xdp_socket(), XdpSocket::Available, "root on Linux 6.18 can open AF_XDP sockets");
    }
}
