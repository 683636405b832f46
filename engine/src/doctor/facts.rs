//! The values each check judged (`checks[].facts` of `doctor -J`), one type per check and one
//! shape per type, as docs/output.md lists them by check id.
//!
//! [`Facts`] is untagged: the JSON carries no variant name, only the keys the check wrote. A
//! saved document is read back by shape, so every type refuses keys it does not know
//! (`deny_unknown_fields`); no two types share a set of keys, hence each object has exactly one
//! type it can be read as.

use super::ethnl::{HeaderSplit, Rings};
use super::{Channels, Offloads, Reach};
use crate::sys::hostinfo::Cloud;
use crate::sys::nic_topology::{HashFunction, QueueInfo};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::IpAddr;

/// Declares [`Facts`] with one variant per type, and `From` each type, so a check writes
/// `.facts(MtuFacts { .. })`.
macro_rules! facts {
    ($($(#[$doc:meta])* $variant:ident($ty:ty),)*) => {
        /// The facts behind one check's verdict.
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
        #[serde(untagged)]
        pub enum Facts {
            $($(#[$doc])* $variant($ty),)*
        }
        /// How many types of facts there are (the round-trip test writes every one).
        #[cfg(test)]
        pub(crate) const FACT_TYPES: usize = [$(stringify!($variant)),*].len();
        $(impl From<$ty> for Facts {
            fn from(facts: $ty) -> Self {
                Facts::$variant(facts)
            }
        })*
    };
}

facts! {
    /// `kernel.version`
    KernelVersion(KernelVersionFacts),
    /// `kernel.version` when io_uring cannot be used
    KernelUnusable(KernelUnusableFacts),
    /// `kernel.io_uring`
    IoUring(IoUringFacts),
    /// `kernel.memlock`
    Memlock(MemlockFacts),
    /// `cpu.governor`
    Governors(GovernorFacts),
    /// `nic.interface`: no interface was examined
    NoInterface(NoInterfaceFacts),
    /// `nic.driver`
    NicDriver(NicDriverFacts),
    /// `nic.mtu`
    NicMtu(NicMtuFacts),
    /// `nic.queues`
    NicQueues(NicQueueFacts),
    /// `nic.rings`
    NicRings(NicRingFacts),
    /// `nic.driver_counters`
    DriverCounters(DriverCounterFacts),
    /// `nic.offloads`
    NicOffloads(NicOffloadFacts),
    /// `nic.irq_affinity`
    IrqAffinity(IrqAffinityFacts),
    /// `nic.irqbalance`
    Irqbalance(IrqbalanceFacts),
    /// `nic.rps`
    Rps(RpsFacts),
    /// `nic.xps`
    Xps(XpsFacts),
    /// `nic.queue_alignment`
    QueueAlignment(QueueAlignmentFacts),
    /// `tcp.buffers`
    TcpBuffers(TcpBufferFacts),
    /// `tcp.congestion`
    Congestion(CongestionFacts),
    /// `tcp.busy_poll`
    BusyPoll(BusyPollFacts),
    /// `tcp.backlog`
    Backlog(BacklogFacts),
    /// `path.address`
    PathAddress(PathAddressFacts),
    /// `path.reach`
    PathReach(PathReachFacts),
    /// `path.mtu`
    PathMtu(PathMtuFacts),
    /// `cloud.egress_cap`
    EgressCap(EgressCapFacts),
    /// `cloud.nic`
    CloudNic(CloudNicFacts),
    /// `fastpath.af_xdp`
    AfXdp(AfXdpFacts),
    /// `fastpath.zcrx`
    Zcrx(ZcrxFacts),
}

/// `kernel.version`: the release and what the io_uring probe found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KernelVersionFacts {
    pub release: String,
    /// [major, minor]; null when the release string is not understood.
    pub version: Option<(u32, u32)>,
    pub send_zc: bool,
    pub recv_zc: bool,
    pub recvsend_bundle: bool,
    pub defer_taskrun: bool,
    pub min_wait_timeout: bool,
}

/// `kernel.version` when the io_uring probe failed: the release and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KernelUnusableFacts {
    pub release: String,
    pub error: String,
}

/// `kernel.io_uring`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct IoUringFacts {
    /// The sysctl: null when absent (kernels before 6.6).
    pub io_uring_disabled: Option<SysctlValue>,
}

/// A sysctl's value: a number, or the text when it is not one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum SysctlValue {
    Number(u32),
    Text(String),
}

/// `kernel.memlock`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemlockFacts {
    /// RLIMIT_MEMLOCK in bytes; null = unlimited.
    pub memlock_limit: Option<u64>,
    pub cap_ipc_lock: bool,
    /// The pinned memory a full test may want, bytes.
    pub wanted: u64,
}

/// `cpu.governor`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GovernorFacts {
    /// CPU number (as a string key) → its cpufreq governor; empty without cpufreq.
    pub governors: BTreeMap<String, String>,
}

/// `nic.interface`: `{"interface": null}`, no interface was found to examine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoInterfaceFacts {
    pub interface: (),
}

/// `nic.driver`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NicDriverFacts {
    pub interface: String,
    pub driver: Option<String>,
    pub virtual_device: bool,
    pub speed_mbps: Option<u32>,
}

/// `nic.mtu`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NicMtuFacts {
    pub interface: String,
    pub mtu: u32,
}

/// `nic.queues`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NicQueueFacts {
    pub interface: String,
    /// From /sys/class/net/IF/queues.
    pub rx_queues: u32,
    pub tx_queues: u32,
    /// Online CPUs.
    pub cpus: u32,
    /// ETHTOOL_GCHANNELS; null where the driver does not answer.
    pub channels: Option<Channels>,
}

/// `nic.rings`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NicRingFacts {
    pub interface: String,
    pub rings: Rings,
}

/// `nic.driver_counters`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DriverCounterFacts {
    pub interface: String,
    /// How many statistics the driver keeps (`ethtool -S`).
    pub statistics: usize,
    /// The loss counters above 0, by name.
    pub loss_counters: BTreeMap<String, u64>,
}

/// `nic.offloads`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NicOffloadFacts {
    pub interface: String,
    pub offloads: Offloads,
}

/// `nic.irq_affinity`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct IrqAffinityFacts {
    pub interface: String,
    pub irqs: Vec<IrqPlacement>,
}

/// One queue IRQ and the CPUs it is delivered to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct IrqPlacement {
    pub irq: u32,
    pub name: String,
    /// Effective affinity, else the affinity set; null when unreadable.
    pub cpus: Option<Vec<usize>>,
}

/// `nic.irqbalance`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct IrqbalanceFacts {
    pub irqbalance_running: bool,
}

/// Queue name (`rx-0`, `tx-3`) → number of CPUs in its mask; null when the mask is garbled.
pub type QueueMaskCpus = BTreeMap<String, Option<u32>>;

/// `nic.rps`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RpsFacts {
    pub interface: String,
    pub rps_cpus: QueueMaskCpus,
}

/// `nic.xps`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct XpsFacts {
    pub interface: String,
    pub xps_cpus: QueueMaskCpus,
}

/// `nic.queue_alignment`: the receive queues as read and how the device spreads flows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct QueueAlignmentFacts {
    pub interface: String,
    pub numa_node: Option<u32>,
    pub rx: Vec<QueueInfo>,
    /// Null when the driver does not report RSS.
    pub rss: Option<RssShape>,
}

/// The RSS function and the sizes of its key and table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RssShape {
    pub hash_function: HashFunction,
    pub key_bytes: usize,
    pub indirection_entries: usize,
}

/// `tcp.buffers`: the bandwidth-delay product planned for and the socket buffer limits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TcpBufferFacts {
    pub bandwidth_bps: u64,
    /// Where the bandwidth comes from (`--bandwidth`, `link speed`, ...).
    pub bandwidth_from: String,
    pub rtt_us: f64,
    pub rtt_from: String,
    pub bdp_bytes: u64,
    /// 2 × BDP, at least 1 MiB, rounded up to a power of two.
    pub wanted_bytes: u64,
    /// [min, default, max]; null when unreadable.
    pub tcp_rmem: Option<[u64; 3]>,
    pub tcp_wmem: Option<[u64; 3]>,
    pub rmem_max: Option<u64>,
    pub wmem_max: Option<u64>,
}

/// `tcp.congestion`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CongestionFacts {
    pub congestion_control: Option<String>,
    pub available: Vec<String>,
    pub default_qdisc: Option<String>,
}

/// `tcp.busy_poll`: the sysctls as read (µs); null when not visible.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BusyPollFacts {
    pub busy_poll: Option<String>,
    pub busy_read: Option<String>,
}

/// `tcp.backlog`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BacklogFacts {
    pub netdev_max_backlog: Option<u64>,
    pub softnet_dropped_since_boot: Option<u64>,
}

/// `path.address`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PathAddressFacts {
    pub host: String,
    pub addr: IpAddr,
    /// RFC 1918, CGNAT, link-local, loopback, IPv6 ULA/link-local.
    pub internal: bool,
    /// The address belongs to this host.
    pub local: bool,
}

/// `path.reach`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PathReachFacts {
    pub port: u16,
    pub reach: Reach,
    pub rtt_us: Option<f64>,
}

/// `path.mtu`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PathMtuFacts {
    pub path_mtu: Option<u32>,
    pub interface_mtu: Option<u32>,
}

/// `cloud.egress_cap`, from engine/data/cloud-egress.json.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EgressCapFacts {
    pub cloud: Cloud,
    pub vcpus: u32,
    pub cap_gbps: Option<f64>,
    pub per_flow_gbps: Option<f64>,
    pub source: String,
    pub note: String,
}

/// `cloud.nic`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CloudNicFacts {
    pub cloud: Cloud,
    pub driver: String,
    /// [name, driver] of every interface with a device driver.
    pub interfaces: Vec<(String, String)>,
}

/// `fastpath.af_xdp`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AfXdpFacts {
    /// `socket(AF_XDP)` succeeded.
    pub socket: bool,
    pub driver: String,
    pub zerocopy_driver: bool,
    pub memlock_ok: bool,
    pub bpffs_mounted: bool,
}

/// `fastpath.zcrx`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ZcrxFacts {
    pub recv_zc_opcode: bool,
    pub driver: String,
    pub virtual_device: bool,
    pub zcrx_driver: bool,
    /// Present once the kernel and the driver qualify.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header_split: Option<HeaderSplit>,
}
