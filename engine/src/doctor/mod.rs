//! `uringbench doctor`: host and path checks, each with the command that fixes it.
//!
//! A throughput figure is only as good as the host it was measured on: io_uring switched off
//! by a sysctl, one NIC queue for 64 CPUs, all queue interrupts on CPU 0, socket buffers
//! smaller than the bandwidth-delay product, a VM whose cloud meters egress below the link.
//! Each of these shows up later as a disappointing number; doctor names them before the test.
//!
//! The checks are split by family ([`kernel`], [`nic`], [`tcp`], [`path`], [`cloud`],
//! [`fastpath`]). Every check is a pure function of a [`Context`] (facts that need system
//! calls: io_uring probe, ethtool ioctls, route lookups, connects) and a [`HostFs`] (the
//! /proc and /sys files it reads), so each can be tested against captured samples, including
//! files that are missing, unreadable or garbled. The live system is [`LiveFs`] plus
//! [`Context::gather`]. What a check judged is kept typed, one type per check ([`facts`]); the
//! text and the `doctor -J` document are rendered from the [`DoctorReport`] in `report/doctor.rs`.
//!
//! Status meanings: `fail` = uringbench cannot run, or its figures would be wrong; `warn` =
//! this will likely hold throughput or latency back; `pass` = fine; `skip` = not applicable
//! or not knowable here. The exit code is 1 when any check failed.

pub mod cloud;
pub mod ethnl;
pub mod ethtool;
pub mod facts;
pub mod fastpath;
pub mod kernel;
pub mod nic;
pub mod nic_cpus;
pub mod path;
pub mod tcp;

use crate::base::error::{Error, Result};
use crate::sys::hostinfo::{self, Cloud, LinkInfo};
use crate::sys::probe::KernelCaps;
use facts::Facts;
use serde::{Deserialize, Serialize};
use std::io;
use std::net::IpAddr;
use std::path::PathBuf;

/// The verdict of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pass,
    Skip,
    Warn,
    Fail,
}

/// One check: what was found, how it is judged, and what fixes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Check {
    /// Stable name, `family.check` (e.g. `nic.mtu`), for scripts.
    pub id: String,
    pub status: Status,
    /// One line: the fact and, when not passing, why it matters.
    pub summary: String,
    /// The command(s) that fix it, for `warn` and `fail`.
    pub fix: Option<String>,
    /// The values the check judged, machine-readable; null for a check that judged none.
    pub facts: Option<Facts>,
}

impl Check {
    pub fn new(id: &'static str, status: Status, summary: impl Into<String>) -> Self {
        Self { id: id.into(), status, summary: summary.into(), fix: None, facts: None }
    }
    pub fn pass(id: &'static str, summary: impl Into<String>) -> Self {
        Self::new(id, Status::Pass, summary)
    }
    pub fn warn(id: &'static str, summary: impl Into<String>) -> Self {
        Self::new(id, Status::Warn, summary)
    }
    pub fn fail(id: &'static str, summary: impl Into<String>) -> Self {
        Self::new(id, Status::Fail, summary)
    }
    pub fn skip(id: &'static str, summary: impl Into<String>) -> Self {
        Self::new(id, Status::Skip, summary)
    }
    pub fn fix(mut self, fix: impl Into<String>) -> Self {
        self.fix = Some(fix.into());
        self
    }
    pub fn facts(mut self, facts: impl Into<Facts>) -> Self {
        self.facts = Some(facts.into());
        self
    }
    /// The family part of the id (`nic` of `nic.mtu`).
    pub fn family(&self) -> &str {
        self.id.split('.').next().unwrap_or(&self.id)
    }
}

/// Read access to /proc and /sys, so checks can run on captured samples.
pub trait HostFs {
    /// A file's whole content.
    fn read(&self, path: &str) -> io::Result<String>;
    /// The entry names of a directory, sorted.
    fn list(&self, dir: &str) -> io::Result<Vec<String>>;
    /// The target of a symbolic link.
    fn link(&self, path: &str) -> io::Result<PathBuf>;
}

/// The live system.
pub(crate) struct LiveFs;

impl HostFs for LiveFs {
    fn read(&self, path: &str) -> io::Result<String> {
        std::fs::read_to_string(path)
    }
    fn list(&self, dir: &str) -> io::Result<Vec<String>> {
        let mut names: Vec<String> =
            std::fs::read_dir(dir)?.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect();
        names.sort();
        Ok(names)
    }
    fn link(&self, path: &str) -> io::Result<PathBuf> {
        std::fs::read_link(path)
    }
}

/// A file read and trimmed; `Err` carries a short reason for messages.
pub(crate) fn read_trimmed(fs: &dyn HostFs, path: &str) -> std::result::Result<String, String> {
    fs.read(path).map(|s| s.trim().to_owned()).map_err(|e| format!("{path}: {e}"))
}

/// A sysctl under /proc/sys by its dotted name.
pub(crate) fn sysctl(fs: &dyn HostFs, name: &str) -> std::result::Result<String, String> {
    read_trimmed(fs, &format!("/proc/sys/{}", name.replace('.', "/")))
}

/// What doctor was asked to look at.
#[derive(Debug, Clone, Default)]
pub struct DoctorOptions {
    pub target: Option<String>,
    pub port: u16,
    pub iface: Option<String>,
    /// Bandwidth the user plans to test at, bits/s; None = link speed, cloud cap or 25 Gbit/s.
    pub bandwidth_bps: Option<u64>,
}

/// How the target answered a TCP connect to its control port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Reach {
    /// Something accepted the connection.
    Listening,
    /// The host answered with a reset: up, but nothing listens on the port.
    Refused,
    /// No answer within the timeout (down, or a firewall drops the SYN).
    NoAnswer,
    /// Some other error (no route, ...).
    Error(String),
}

/// The target as doctor found it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TargetFacts {
    pub host: String,
    pub addr: IpAddr,
    pub port: u16,
    pub reach: Reach,
    /// Handshake RTT, microseconds: the kernel's TCP_INFO sample when the port accepts, else
    /// the shortest of up to three connects answered with a reset.
    pub rtt_us: Option<f64>,
    /// The kernel's path MTU to the target (route MTU, or a smaller one learned from ICMP).
    pub path_mtu: Option<u32>,
    /// The route is local (the address belongs to this host).
    pub local: bool,
}

/// The AF_XDP socket probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum XdpSocket {
    Available,
    /// `socket(AF_XDP)` failed: the reason.
    Unavailable(String),
}

/// Offload state read with the ethtool ioctls; None where the driver does not answer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Offloads {
    pub tso: Option<bool>,
    pub gso: Option<bool>,
    pub gro: Option<bool>,
    pub lro: Option<bool>,
    pub rx_checksum: Option<bool>,
}

/// Channel counts from ETHTOOL_GCHANNELS.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Channels {
    pub max_rx: u32,
    pub max_tx: u32,
    pub max_combined: u32,
    pub rx: u32,
    pub tx: u32,
    pub combined: u32,
}

/// Facts that need system calls rather than file reads.
#[derive(Debug, Clone)]
pub struct Context {
    /// Online CPUs.
    pub cpus: u32,
    /// The interface examined and why that one.
    pub iface: Option<LinkInfo>,
    pub iface_reason: String,
    /// The driver the ethtool ioctl names (ETHTOOL_GDRVINFO).
    pub ethtool_driver: Option<String>,
    pub offloads: Option<Offloads>,
    pub channels: Option<Channels>,
    /// The driver's own statistics (`ethtool -S`), None where it keeps none.
    pub driver_stats: Option<Vec<(String, u64)>>,
    /// Ring sizes and header split (ethtool netlink), or why they could not be read.
    pub rings: std::result::Result<ethnl::Rings, String>,
    pub target: Option<TargetFacts>,
    pub cloud: Option<Cloud>,
    pub caps: std::result::Result<KernelCaps, String>,
    pub xdp_socket: XdpSocket,
    /// `--bandwidth`, bits/s.
    pub bandwidth_bps: Option<u64>,
}

impl Context {
    /// Gathers the live facts. Only a bad `--iface` or an unresolvable `--target` is an error.
    pub(crate) fn gather(opts: &DoctorOptions) -> Result<Self> {
        let target = match &opts.target {
            Some(host) => Some(path::probe_target(host, opts.port)?),
            None => None,
        };
        let (iface, iface_reason) = match &opts.iface {
            Some(name) => (Some(LinkInfo::read(name)?), "--iface".to_string()),
            None => pick_interface(target.as_ref()),
        };
        let (ethtool_driver, offloads, channels) = match &iface {
            Some(l) => ethtool::ethtool_facts(&l.name),
            None => (None, None, None),
        };
        let driver_stats = iface.as_ref().and_then(|l| ethtool::driver_stats(&l.name));
        let rings = match &iface {
            Some(l) => ethnl::rings(&l.name).map_err(|e| e.message),
            None => Err("no interface".into()),
        };
        Ok(Self {
            cpus: hostinfo::cloud::online_cpus().unwrap_or(1),
            iface,
            iface_reason,
            ethtool_driver,
            offloads,
            channels,
            driver_stats,
            rings,
            target,
            cloud: hostinfo::Dmi::read().as_ref().and_then(hostinfo::cloud::detect),
            caps: KernelCaps::detect().map_err(|e| e.message),
            xdp_socket: fastpath::probe_xdp_socket(),
            bandwidth_bps: opts.bandwidth_bps,
        })
    }

    /// The driver name: the ethtool answer, else what sysfs/rtnetlink say.
    pub fn driver(&self) -> Option<&str> {
        self.ethtool_driver.as_deref().or(self.iface.as_ref().and_then(|l| l.driver.as_deref()))
    }
}

/// The interface to examine when none was given: the route to the target, else the default
/// route's, else the first interface that is up (lo last).
fn pick_interface(target: Option<&TargetFacts>) -> (Option<LinkInfo>, String) {
    if let Some(t) = target {
        if let Ok(route) = hostinfo::route_to(t.addr) {
            if let Ok(link) = LinkInfo::read(&route.ifname) {
                return (Some(link), format!("route to {}", t.addr));
            }
        }
    }
    for probe in ["192.0.2.1", "2001:db8::1"] {
        // A route lookup only: TEST-NET/documentation addresses take the default route.
        if let Ok(route) = hostinfo::route_to(probe.parse().expect("literal address")) {
            if let Ok(link) = LinkInfo::read(&route.ifname) {
                return (Some(link), "default route".into());
            }
        }
    }
    let names = LiveFs.list("/sys/class/net").unwrap_or_default();
    let up = |n: &&String| {
        n.as_str() != "lo" && LiveFs.read(&format!("/sys/class/net/{n}/operstate")).is_ok_and(|s| s.trim() == "up")
    };
    if let Some(link) = names.iter().find(up).and_then(|n| LinkInfo::read(n).ok()) {
        return (Some(link), "first interface that is up (no default route)".into());
    }
    (None, "no interface found (give --iface)".into())
}

/// The whole doctor run.
#[derive(Debug, Clone)]
pub struct DoctorReport {
    pub kernel_release: String,
    pub cpus: u32,
    pub iface: Option<String>,
    pub iface_reason: String,
    pub driver: Option<String>,
    pub target: Option<TargetFacts>,
    pub cloud: Option<Cloud>,
    pub checks: Vec<Check>,
}

/// Runs every check family on `ctx` and `fs`.
pub(crate) fn run_checks(ctx: &Context, fs: &dyn HostFs) -> DoctorReport {
    let mut checks = Vec::new();
    checks.extend(kernel::checks(ctx, fs));
    checks.extend(nic::checks(ctx, fs));
    checks.extend(tcp::checks(ctx, fs));
    checks.extend(path::checks(ctx, fs));
    checks.extend(cloud::checks(ctx, fs));
    checks.extend(fastpath::checks(ctx, fs));
    DoctorReport {
        kernel_release: read_trimmed(fs, "/proc/sys/kernel/osrelease").unwrap_or_else(|_| "unknown".into()),
        cpus: ctx.cpus,
        iface: ctx.iface.as_ref().map(|l| l.name.clone()),
        iface_reason: ctx.iface_reason.clone(),
        driver: ctx.driver().map(str::to_owned),
        target: ctx.target.clone(),
        cloud: ctx.cloud,
        checks,
    }
}

/// Gathers the live facts and runs the checks.
pub fn run(opts: &DoctorOptions) -> Result<DoctorReport> {
    if let Some(0) = opts.bandwidth_bps {
        return Err(Error::usage("--bandwidth must be more than 0"));
    }
    let ctx = Context::gather(opts)?;
    Ok(run_checks(&ctx, &LiveFs))
}

/// How many checks ended in each status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Tally {
    pub pass: usize,
    pub warn: usize,
    pub fail: usize,
    pub skip: usize,
}

impl DoctorReport {
    pub fn tally(&self) -> Tally {
        let mut t = Tally::default();
        for c in &self.checks {
            match c.status {
                Status::Pass => t.pass += 1,
                Status::Warn => t.warn += 1,
                Status::Fail => t.fail += 1,
                Status::Skip => t.skip += 1,
            }
        }
        t
    }

    /// 1 when a check failed, else 0.
    pub fn exit_code(&self) -> u8 {
        u8::from(self.tally().fail > 0)
    }

    pub fn check(&self, id: &str) -> Option<&Check> {
        self.checks.iter().find(|c| c.id == id)
    }
}

/// Captured-sample file systems for the checks' unit tests.
#[cfg(test)]
pub(crate) mod fake {
    use super::HostFs;
    use std::collections::BTreeMap;
    use std::io;
    use std::path::PathBuf;

    /// Files by path; `Err(errno)` models an unreadable file; a value starting with `->` is a
    /// symbolic link. Directories are implied by the paths below them.
    #[derive(Default)]
    pub(crate) struct FakeFs(pub BTreeMap<String, Result<String, i32>>);

    impl FakeFs {
        pub(crate) fn new(files: &[(&str, &str)]) -> Self {
            Self(files.iter().map(|(p, v)| (p.to_string(), Ok(v.to_string()))).collect())
        }
        pub(crate) fn with(mut self, path: &str, value: &str) -> Self {
            self.0.insert(path.into(), Ok(value.into()));
            self
        }
        pub(crate) fn unreadable(mut self, path: &str, errno: i32) -> Self {
            self.0.insert(path.into(), Err(errno));
            self
        }
    }

    impl HostFs for FakeFs {
        fn read(&self, path: &str) -> io::Result<String> {
            match self.0.get(path) {
                Some(Ok(v)) if !v.starts_with("->") => Ok(v.clone()),
                Some(Err(e)) => Err(io::Error::from_raw_os_error(*e)),
                _ => Err(io::Error::from_raw_os_error(libc::ENOENT)),
            }
        }
        fn list(&self, dir: &str) -> io::Result<Vec<String>> {
            let prefix = format!("{}/", dir.trim_end_matches('/'));
            let mut names: Vec<String> = self
                .0
                .keys()
                .filter_map(|p| p.strip_prefix(&prefix))
                .map(|rest| rest.split('/').next().unwrap_or(rest).to_string())
                .collect();
            names.dedup();
            if names.is_empty() {
                return Err(io::Error::from_raw_os_error(libc::ENOENT));
            }
            Ok(names)
        }
        fn link(&self, path: &str) -> io::Result<PathBuf> {
            match self.0.get(path) {
                Some(Ok(v)) if v.starts_with("->") => Ok(PathBuf::from(&v[2..])),
                _ => Err(io::Error::from_raw_os_error(libc::ENOENT)),
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod testctx {
    use super::*;
    use crate::sys::probe::KernelCaps;

    /// The kernel facts of the test machine (Linux 6.18 in a VM, root).
    pub(crate) fn caps() -> KernelCaps {
        KernelCaps {
            kernel_release: "6.18.0".into(),
            io_uring_disabled: Some(0),
            send_zc: true,
            recv: true,
            recv_zc: true,
            recvsend_bundle: true,
            min_wait_timeout: true,
            defer_taskrun: true,
            memlock_limit: Some(8 << 20),
            cap_ipc_lock: true,
            mptcp_unavailable: None,
        }
    }

    /// A veth end with MTU 9000, one queue each way, on a 2-CPU host, no cloud, no target.
    pub(crate) fn veth_ctx() -> Context {
        Context {
            cpus: 2,
            iface: Some(LinkInfo {
                name: "uoda0".into(),
                ifindex: 2,
                mtu: 9000,
                speed_mbps: None,
                driver: Some("veth".into()),
                virtual_device: true,
                tx_queues: 1,
                rx_queues: 1,
            }),
            iface_reason: "--iface".into(),
            ethtool_driver: Some("veth".into()),
            offloads: Some(Offloads {
                tso: Some(true),
                gso: Some(true),
                gro: Some(false),
                lro: Some(false),
                rx_checksum: Some(true),
            }),
            channels: Some(Channels { max_rx: 1, max_tx: 1, max_combined: 0, rx: 1, tx: 1, combined: 0 }),
            driver_stats: Some(vec![("peer_ifindex".into(), 3), ("rx_queue_0_drops".into(), 0)]),
            // veth on 6.18 has no ring parameters.
            rings: Err("reading the rings of uoda0: Operation not supported (os error 95)".into()),
            target: None,
            cloud: None,
            caps: Ok(caps()),
            xdp_socket: XdpSocket::Available,
            bandwidth_bps: None,
        }
    }

    /// Every check run on [`veth_ctx`] with Linux 6.18.0 and nothing else readable.
    pub(crate) fn veth_report() -> DoctorReport {
        run_checks(&veth_ctx(), &super::fake::FakeFs::new(&[("/proc/sys/kernel/osrelease", "6.18.0\n")]))
    }

    /// A physical NIC (`driver`) with `queues` combined channels on a `cpus`-CPU host.
    pub(crate) fn nic_ctx(driver: &str, queues: u32, cpus: u32) -> Context {
        let mut c = veth_ctx();
        c.cpus = cpus;
        c.iface = Some(LinkInfo {
            name: "eth0".into(),
            ifindex: 2,
            mtu: 1500,
            speed_mbps: Some(100_000),
            driver: Some(driver.into()),
            virtual_device: false,
            tx_queues: queues,
            rx_queues: queues,
        });
        c.ethtool_driver = Some(driver.into());
        c.channels = Some(Channels { max_combined: 64, combined: queues, ..Default::default() });
        c.rings = Ok(ethnl::Rings {
            rx: Some(1024),
            rx_max: Some(8192),
            tx: Some(1024),
            tx_max: Some(8192),
            header_split: ethnl::HeaderSplit::Disabled,
        });
        c
    }
}

#[cfg(test)]
mod tests {
    use super::fake::FakeFs;
    use super::*;

    #[test]
    fn report_tally_and_exit_code() {
        let mut report = testctx::veth_report();
        assert_eq!(report.kernel_release, "6.18.0");
        assert!(report.checks.len() >= 20, "every family contributes: {}", report.checks.len());
        let ids: Vec<&str> = report.checks.iter().map(|c| c.id.as_str()).collect();
        let mut unique = ids.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), ids.len(), "check ids are unique: {ids:?}");
        for c in &report.checks {
            if matches!(c.status, Status::Warn | Status::Fail) {
                assert!(c.fix.is_some(), "{} is {:?} without a fix: {}", c.id, c.status, c.summary);
            }
            assert!(!c.summary.contains('\n'), "{}: one line", c.id);
        }
        let failed = report.tally().fail;
        report.checks.push(Check::fail("x.y", "broken").fix("mend it"));
        assert_eq!(report.exit_code(), 1, "a failed check makes the exit code 1");
        assert_eq!(report.tally().fail, failed + 1);
        assert_eq!(report.check("x.y").and_then(|c| c.fix.as_deref()), Some("mend it"));
    }

    /// Checks run on a spread of hosts (veth, a NIC in a cloud with a target, no interface and
    /// no io_uring), so that every kind of facts is written at least once.
    fn checks_of_every_kind() -> Vec<Check> {
        let fs = FakeFs::new(&[
            ("/proc/sys/kernel/osrelease", "6.12.1\n"),
            ("/proc/sys/kernel/io_uring_disabled", "0\n"),
            ("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor", "powersave\n"),
            ("/proc/sys/net/ipv4/tcp_rmem", "4096 131072 6291456\n"),
            ("/proc/sys/net/ipv4/tcp_wmem", "4096 16384 4194304\n"),
            ("/proc/sys/net/ipv4/tcp_congestion_control", "cubic\n"),
            ("/proc/sys/net/core/busy_poll", "0\n"),
            ("/proc/sys/net/core/busy_read", "0\n"),
            ("/proc/sys/net/core/netdev_max_backlog", "1000\n"),
            (
                "/proc/interrupts",
                "           CPU0       CPU1\n 38:  0  5 PCI-MSIX  1-edge  mlx5_comp0@pci:0000:00:04.0\n",
            ),
            ("/sys/class/net/eth0/device/msi_irqs/38", "msix"),
            ("/sys/class/net/eth0/device/driver", "->../../../bus/pci/drivers/mlx5_core"),
            ("/proc/irq/38/smp_affinity_list", "1\n"),
            ("/sys/class/net/eth0/queues/rx-0/rps_cpus", "0\n"),
            ("/sys/class/net/eth0/queues/tx-0/xps_cpus", "1\n"),
            ("/sys/class/net/eth0/queues/tx-1/xps_cpus", "zz\n"),
        ]);
        let mut cloud = testctx::nic_ctx("mlx5_core", 2, 2);
        cloud.cloud = Some(Cloud::Gcp);
        cloud.target = Some(TargetFacts {
            host: "peer".into(),
            addr: "10.77.0.2".parse().unwrap(),
            port: 5300,
            reach: Reach::Error("No route to host".into()),
            rtt_us: None,
            path_mtu: Some(1500),
            local: false,
        });
        let mut bare = testctx::veth_ctx();
        bare.iface = None;
        bare.caps = Err("io_uring_setup: Operation not permitted".into());
        let garbled =
            FakeFs::new(&[("/proc/sys/kernel/osrelease", "6.18.0"), ("/proc/sys/kernel/io_uring_disabled", "x")]);
        let mut checks: Vec<Check> = [(testctx::veth_ctx(), &fs), (cloud, &fs), (bare, &garbled)]
            .iter()
            .flat_map(|(ctx, fs)| run_checks(ctx, *fs).checks)
            .collect();
        // The live topology of this host's interfaces decides whether `nic.queue_alignment`
        // has facts; a NIC's queues read elsewhere give it some here.
        let queue = |q: u32| crate::sys::nic_topology::QueueInfo {
            queue: q,
            napi_id: Some(8192 + q),
            irq: Some(40 + q),
            irq_cpus: vec![q as usize],
            xps_cpus: vec![],
        };
        let topology = crate::sys::nic_topology::NicTopology {
            iface: "eth0".into(),
            driver: Some("gve".into()),
            numa_node: Some(0),
            node_cpus: vec![0, 1],
            rx: vec![queue(0), queue(1)],
            tx: vec![],
            rss: None,
            notes: vec![],
        };
        checks.push(nic::queue_alignment("eth0", Some(&topology)));
        checks
    }

    #[test]
    fn facts_read_back_as_the_type_that_wrote_them() {
        let checks = checks_of_every_kind();
        let mut kinds = std::collections::BTreeSet::new();
        for c in &checks {
            let text = serde_json::to_string(c).unwrap();
            let back: Check = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}: {text}", c.id));
            assert_eq!(&back, c, "{text}");
            if let Some(f) = &c.facts {
                kinds.insert(format!("{:?}", std::mem::discriminant(f)));
            }
        }
        assert_eq!(kinds.len(), facts::FACT_TYPES, "every kind of facts is written and read back");
        let io_uring: Vec<&Facts> =
            checks.iter().filter(|c| c.id == "kernel.io_uring").filter_map(|c| c.facts.as_ref()).collect();
        assert!(
            io_uring.contains(&&Facts::IoUring(facts::IoUringFacts {
                io_uring_disabled: Some(facts::SysctlValue::Text("x".into()))
            })),
            "a garbled sysctl is kept as text: {io_uring:?}"
        );
    }

    #[test]
    fn fake_fs_models_missing_unreadable_and_links() {
        let fs = FakeFs::new(&[("/a/b/c", "1"), ("/a/b/d", "->../x/drv")]).unreadable("/a/e", libc::EACCES);
        assert_eq!(fs.list("/a").unwrap(), vec!["b", "e"]);
        assert_eq!(fs.list("/a/b").unwrap(), vec!["c", "d"]);
        assert!(fs.read("/a/e").is_err());
        assert!(fs.read("/nope").is_err());
        assert_eq!(fs.link("/a/b/d").unwrap(), PathBuf::from("../x/drv"));
        assert!(read_trimmed(&fs, "/a/e").unwrap_err().contains("/a/e"));
    }
}
