//! Where a NIC's queues are: for one interface, its receive and transmit queues, each queue's
//! NAPI instance and IRQ, the CPUs each IRQ is delivered to, the device's NUMA node and that
//! node's CPUs, the RSS key, hash function and indirection table, and the XPS maps. Read once
//! before a test; placement chooses threads from it and the report shows it.
//!
//! Sources, each with a pure parser tested on captured or documented text:
//! - the netdev generic-netlink family (`queue-get`, `napi-get`, Linux 6.9+): queue → NAPI id
//!   → IRQ, straight from the kernel;
//! - else `/sys/class/net/DEV/device/msi_irqs` (the device's vectors) and the IRQ names in
//!   `/proc/interrupts`, which each driver forms its own way ([`irq_queue`]);
//! - `/proc/irq/N/effective_affinity_list`: the CPU the IRQ really lands on, unless the mask set
//!   in `smp_affinity_list` has moved on and the IRQ has not fired since ([`irq_delivery_cpus`]);
//! - `/sys/class/net/DEV/device/numa_node` and `/sys/devices/system/node/nodeN/cpulist`;
//! - ethtool netlink `RSS_GET`: key, hash function, indirection table;
//! - `/sys/class/net/DEV/queues/tx-N/xps_cpus`.
//!
//! Every source is best-effort: what cannot be read is absent and named in `notes`, never an
//! error. veth and loopback have queues in sysfs but no IRQs: [`NicTopology::has_hardware_queues`]
//! says so.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::base::error::{Error, Result};
use crate::base::units::parse_cpu_list;
use crate::sys::netlink::{
    self, attrs, data_messages, ethtool_dev_header, find, genl_family, genl_request, push_attr, u32_at, Socket,
    ETHTOOL_GENL_VERSION, GENL_HDRLEN, NLM_F_DUMP,
};

/// One queue of the device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct QueueInfo {
    pub queue: u32,
    /// The NAPI instance that polls it (netdev netlink); what SO_INCOMING_NAPI_ID reports.
    pub napi_id: Option<u32>,
    /// The IRQ that signals it.
    pub irq: Option<u32>,
    /// The CPUs that IRQ is delivered to (effective affinity); empty when unknown.
    pub irq_cpus: Vec<usize>,
    /// Transmit queues: the CPUs whose packets XPS sends through this queue; empty when unset.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub xps_cpus: Vec<usize>,
}

/// The RSS hash function the device uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum HashFunction {
    Toeplitz,
    Xor,
    Crc32,
    /// None set, or a function this build does not know.
    Unknown,
}

impl HashFunction {
    /// From the `ETH_RSS_HASH_*` bit mask ethtool reports (exactly one bit is active).
    pub fn from_bits(bits: u32) -> Self {
        match bits {
            1 => Self::Toeplitz,
            2 => Self::Xor,
            4 => Self::Crc32,
            _ => Self::Unknown,
        }
    }
}

/// How the device spreads received flows over its queues.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Rss {
    pub hash_function: HashFunction,
    /// The hash key; empty when the driver does not report it.
    pub key: Vec<u8>,
    /// Entry `hash % len` is the receive queue; empty when the driver does not report it.
    pub indirection: Vec<u32>,
}

/// The queues of one interface and where they are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NicTopology {
    pub iface: String,
    /// The kernel driver bound to the device (`virtio_net`, `mlx5_core`, `gve`, `ena`).
    pub driver: Option<String>,
    /// The device's NUMA node; None on a single-node host or when the platform does not say.
    pub numa_node: Option<u32>,
    /// The CPUs of that node.
    pub node_cpus: Vec<usize>,
    pub rx: Vec<QueueInfo>,
    pub tx: Vec<QueueInfo>,
    pub rss: Option<Rss>,
    /// One line per source that could not be read, and why.
    pub notes: Vec<String>,
}

impl NicTopology {
    /// Whether the queues have IRQs of their own: false on veth, loopback and other software
    /// devices, where queue placement means nothing and CPU placement stays.
    pub fn has_hardware_queues(&self) -> bool {
        self.rx.iter().any(|q| q.irq.is_some())
    }

    /// The receive queue polled by NAPI instance `napi_id`.
    pub fn rx_queue_of_napi(&self, napi_id: u32) -> Option<u32> {
        self.rx.iter().find(|q| q.napi_id == Some(napi_id)).map(|q| q.queue)
    }

    /// Receive queue → the first CPU its IRQ is delivered to.
    pub fn rx_irq_cpu(&self, queue: u32) -> Option<usize> {
        self.rx.iter().find(|q| q.queue == queue).and_then(|q| q.irq_cpus.first().copied())
    }

    /// The CPUs whose XPS map sends through transmit queue `queue` (empty where unset).
    pub fn tx_xps_cpus(&self, queue: u32) -> &[usize] {
        self.tx.iter().find(|q| q.queue == queue).map_or(&[], |q| q.xps_cpus.as_slice())
    }

    /// Reads the topology of `iface` in the caller's network namespace; an error only when
    /// the interface does not exist.
    pub fn read(iface: &str) -> Result<Self> {
        let dir = Path::new("/sys/class/net").join(iface);
        if iface.is_empty() || iface.contains('/') || !dir.exists() {
            return Err(Error::usage(format!("no interface '{iface}' in this network namespace")));
        }
        let mut notes = Vec::new();
        let device = dir.join("device");
        let driver = fs::read_link(device.join("driver"))
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
        let (rx_count, tx_count) = count_queues(&dir.join("queues"));
        let irq_names = match device_irqs(&device) {
            Some(irqs) => match fs::read_to_string("/proc/interrupts") {
                Ok(text) => parse_interrupts(&text)
                    .into_iter()
                    .filter(|l| irqs.contains(&l.irq))
                    .map(|l| (l.irq, l.name))
                    .collect(),
                Err(e) => {
                    notes.push(format!("/proc/interrupts: {e}"));
                    Vec::new()
                }
            },
            None => Vec::new(),
        };
        let netdev = match read_netdev(&dir) {
            Ok(n) => Some(n),
            Err(e) => {
                notes.push(format!("netdev netlink (NAPI ids): {e}"));
                None
            }
        };
        let mut irqs: Vec<u32> = irq_names.iter().map(|(irq, _)| *irq).collect();
        if let Some((_, napis)) = &netdev {
            irqs.extend(napis.iter().filter_map(|n| n.irq));
        }
        let irq_cpus: BTreeMap<u32, Vec<usize>> = irqs
            .into_iter()
            .filter_map(|irq| {
                let read = |f: &str| fs::read_to_string(format!("/proc/irq/{irq}/{f}")).ok();
                Some((irq, irq_delivery_cpus(read("effective_affinity_list"), read("smp_affinity_list"))?))
            })
            .collect();
        let xps = (0..tx_count)
            .filter_map(|q| {
                let text = fs::read_to_string(dir.join(format!("queues/tx-{q}/xps_cpus"))).ok()?;
                Some((q, parse_cpu_mask(&text)?))
            })
            .collect();
        let numa_node = device_file(&device, "numa_node")
            .and_then(|t| t.trim().parse::<i64>().ok())
            .and_then(|n| u32::try_from(n).ok());
        let node_cpus = numa_node
            .and_then(|n| fs::read_to_string(format!("/sys/devices/system/node/node{n}/cpulist")).ok())
            .and_then(|t| parse_cpu_list(&t).ok())
            .unwrap_or_default();
        let rss = match read_rss(iface) {
            Ok(rss) => Some(rss),
            Err(e) => {
                notes.push(format!("RSS (ethtool netlink): {e}"));
                None
            }
        };
        Ok(assemble(Sources {
            iface: iface.to_owned(),
            driver,
            rx_count,
            tx_count,
            irq_names,
            irq_cpus,
            netdev,
            xps,
            numa_node,
            node_cpus,
            rss,
            notes,
        }))
    }
}

/// The CPUs an IRQ is delivered to, from its `effective_affinity_list` and `smp_affinity_list`
/// texts: the effective CPUs, unless they lie outside the mask set. On x86 an IRQ moves to a
/// new mask only when it next fires, so right after `tune.sh` (or a boot, before any traffic)
/// the effective list still names the old CPU; the VM lab saw two queues' IRQs read as CPU 2
/// that moved to CPUs 1 and 3 with their first packet. Then the mask set is where it will be.
/// Without an effective list (older kernels, some architectures) the mask set is all there is.
pub fn irq_delivery_cpus(effective: Option<String>, configured: Option<String>) -> Option<Vec<usize>> {
    let parse = |t: Option<String>| t.and_then(|t| parse_cpu_list(t.trim()).ok()).filter(|c| !c.is_empty());
    let (effective, configured) = (parse(effective), parse(configured));
    match (effective, configured) {
        (Some(e), Some(c)) if !e.iter().all(|cpu| c.contains(cpu)) => Some(c),
        (Some(e), _) => Some(e),
        (None, c) => c,
    }
}

/// Everything read, before it is put together (the pure half of [`NicTopology::read`]).
pub(crate) struct Sources {
    pub iface: String,
    pub driver: Option<String>,
    pub rx_count: u32,
    pub tx_count: u32,
    /// The device's IRQs and their names in /proc/interrupts.
    pub irq_names: Vec<(u32, String)>,
    pub irq_cpus: BTreeMap<u32, Vec<usize>>,
    pub netdev: Option<(Vec<NetdevQueue>, Vec<Napi>)>,
    pub xps: BTreeMap<u32, Vec<usize>>,
    pub numa_node: Option<u32>,
    pub node_cpus: Vec<usize>,
    pub rss: Option<Rss>,
    pub notes: Vec<String>,
}

pub(crate) fn assemble(s: Sources) -> NicTopology {
    let gve_blocks = s.irq_names.iter().filter(|(_, n)| n.starts_with("gve-ntfy-blk")).count() as u32;
    let named: Vec<(u32, IrqQueue)> =
        s.irq_names.iter().filter_map(|(irq, name)| Some((*irq, irq_queue(name, gve_blocks)?))).collect();
    let (queues, napis) = s.netdev.unwrap_or_default();
    let queue = |rx: bool, id: u32| -> QueueInfo {
        let napi_id = queues.iter().find(|q| q.rx == rx && q.id == id).and_then(|q| q.napi_id);
        let napi_irq = napi_id.and_then(|n| napis.iter().find(|p| p.id == n)).and_then(|p| p.irq);
        let name_irq = named
            .iter()
            .find(|(_, q)| match q {
                IrqQueue::Rx(i) => rx && *i == id,
                IrqQueue::Tx(i) => !rx && *i == id,
                IrqQueue::Combined(i) => *i == id,
            })
            .map(|(irq, _)| *irq);
        let irq = napi_irq.or(name_irq);
        QueueInfo {
            queue: id,
            napi_id,
            irq,
            irq_cpus: irq.and_then(|i| s.irq_cpus.get(&i).cloned()).unwrap_or_default(),
            xps_cpus: if rx { Vec::new() } else { s.xps.get(&id).cloned().unwrap_or_default() },
        }
    };
    NicTopology {
        rx: (0..s.rx_count).map(|q| queue(true, q)).collect(),
        tx: (0..s.tx_count).map(|q| queue(false, q)).collect(),
        iface: s.iface,
        driver: s.driver,
        numa_node: s.numa_node,
        node_cpus: s.node_cpus,
        rss: s.rss,
        notes: s.notes,
    }
}

/// `rx-N` and `tx-N` entries under /sys/class/net/DEV/queues.
fn count_queues(dir: &Path) -> (u32, u32) {
    let Ok(entries) = fs::read_dir(dir) else { return (0, 0) };
    let names: Vec<String> = entries.filter_map(|e| Some(e.ok()?.file_name().to_string_lossy().into_owned())).collect();
    let count = |prefix: &str| names.iter().filter(|n| n.starts_with(prefix)).count() as u32;
    (count("rx-"), count("tx-"))
}

/// A file of the device, or of its parent: a virtio NIC's `device` is the virtio device, whose
/// PCI function (with `msi_irqs` and `numa_node`) is the parent.
fn device_path(device: &Path, name: &str) -> Option<PathBuf> {
    [device.join(name), device.join("..").join(name)].into_iter().find(|p| p.exists())
}

fn device_file(device: &Path, name: &str) -> Option<String> {
    fs::read_to_string(device_path(device, name)?).ok()
}

/// The device's MSI/MSI-X vectors: the entries of its `msi_irqs` directory.
fn device_irqs(device: &Path) -> Option<Vec<u32>> {
    let entries = fs::read_dir(device_path(device, "msi_irqs")?).ok()?;
    Some(entries.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect())
}

/// One line of /proc/interrupts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IrqLine {
    pub irq: u32,
    /// Interrupts taken per CPU.
    pub counts: Vec<u64>,
    /// The action name (`virtio2-input.0`, `mlx5_comp3@pci:0000:00:04.0`, `gve-ntfy-blk0@pci:...`).
    pub name: String,
}

/// Parses /proc/interrupts; lines that are not numbered IRQs (NMI, LOC...) are skipped, and
/// a malformed numbered line is skipped too rather than failing the whole table.
pub(crate) fn parse_interrupts(text: &str) -> Vec<IrqLine> {
    let mut lines = text.lines();
    let cpus = lines.next().map_or(0, |h| h.split_whitespace().filter(|w| w.starts_with("CPU")).count());
    lines
        .filter_map(|line| {
            let (num, rest) = line.trim_start().split_once(':')?;
            let irq = num.trim().parse().ok()?;
            let fields: Vec<&str> = rest.split_whitespace().collect();
            if fields.len() < cpus + 1 {
                return None;
            }
            let counts: Option<Vec<u64>> = fields[..cpus].iter().map(|f| f.parse().ok()).collect();
            Some(IrqLine { irq, counts: counts?, name: fields.last()?.to_string() })
        })
        .collect()
}

/// Which queue an IRQ serves, by its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IrqQueue {
    Rx(u32),
    Tx(u32),
    /// One vector for a receive and transmit queue pair (a "channel").
    Combined(u32),
}

/// The queue an IRQ name stands for, in the forms drivers use:
/// virtio_net `virtio2-input.3` / `virtio2-output.3`; mlx5 `mlx5_comp3@pci:0000:00:08.0`;
/// ena `ena-Tx-Rx-3`; Intel drivers `eth0-TxRx-3`, `eth0-rx-3`, `eth0-tx-3`; gve
/// `gve-ntfy-blk3@pci:...`, where the lower half of the `gve_blocks` notification blocks serve
/// transmit queues and the upper half receive queues. Management and config vectors are None.
pub(crate) fn irq_queue(name: &str, gve_blocks: u32) -> Option<IrqQueue> {
    let name = name.split('@').next().unwrap_or(name);
    let num = |s: &str| s.parse::<u32>().ok();
    if let Some(rest) = name.strip_prefix("mlx5_comp") {
        return num(rest).map(IrqQueue::Combined);
    }
    if let Some(rest) = name.strip_prefix("gve-ntfy-blk") {
        let block = num(rest)?;
        let half = gve_blocks / 2;
        return Some(if block < half { IrqQueue::Tx(block) } else { IrqQueue::Rx(block - half) });
    }
    if name.starts_with("virtio") {
        let (_, q) = name.split_once('-')?;
        let (kind, index) = q.split_once('.')?;
        return match kind {
            "input" => num(index).map(IrqQueue::Rx),
            "output" => num(index).map(IrqQueue::Tx),
            _ => None,
        };
    }
    let (head, index) = name.rsplit_once('-')?;
    let index = num(index)?;
    let kind = head.rsplit('-').next()?.to_ascii_lowercase();
    match kind.as_str() {
        "rx" if head.to_ascii_lowercase().ends_with("tx-rx") => Some(IrqQueue::Combined(index)),
        "txrx" => Some(IrqQueue::Combined(index)),
        "rx" => Some(IrqQueue::Rx(index)),
        "tx" => Some(IrqQueue::Tx(index)),
        _ => None,
    }
}

/// A CPU mask as sysfs prints it (`xps_cpus`, `smp_affinity`): hex, 32-bit groups separated
/// by commas, most significant first. None when it is not one.
pub(crate) fn parse_cpu_mask(text: &str) -> Option<Vec<usize>> {
    let groups: Vec<&str> = text.trim().split(',').collect();
    let mut cpus = Vec::new();
    for (i, group) in groups.iter().rev().enumerate() {
        let bits = u32::from_str_radix(group, 16).ok()?;
        cpus.extend((0..32).filter(|b| bits & (1 << b) != 0).map(|b| i * 32 + b));
    }
    cpus.sort_unstable();
    Some(cpus)
}

// Kernel UAPI constants: netdev
const NETDEV_FAMILY_VERSION: u8 = 1;
const NETDEV_CMD_QUEUE_GET: u8 = 10;
const NETDEV_CMD_NAPI_GET: u8 = 11;
const NETDEV_A_QUEUE_ID: u16 = 1;
const NETDEV_A_QUEUE_IFINDEX: u16 = 2;
const NETDEV_A_QUEUE_TYPE: u16 = 3;
const NETDEV_A_QUEUE_NAPI_ID: u16 = 4;
const NETDEV_QUEUE_TYPE_RX: u32 = 0;
const NETDEV_A_NAPI_IFINDEX: u16 = 1;
const NETDEV_A_NAPI_ID: u16 = 2;
const NETDEV_A_NAPI_IRQ: u16 = 3;

/// One queue of a netdev `queue-get` dump.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NetdevQueue {
    pub id: u32,
    pub rx: bool,
    pub napi_id: Option<u32>,
}

/// One NAPI instance of a netdev `napi-get` dump.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Napi {
    pub id: u32,
    pub irq: Option<u32>,
}

/// The attributes of one netlink message: (type, value).
type Attrs<'a> = Vec<(u16, &'a [u8])>;

/// The attributes of each message of a generic-netlink dump.
fn genl_dump_attrs<'a>(reply: &'a [u8], what: &str) -> Result<Vec<Attrs<'a>>> {
    data_messages(reply, what)?
        .into_iter()
        .map(|m| {
            attrs(m.payload.get(GENL_HDRLEN..).ok_or_else(|| netlink::malformed(what, "short genl header"))?, what)
        })
        .collect()
}

pub(crate) fn parse_queue_dump(reply: &[u8], what: &str) -> Result<Vec<NetdevQueue>> {
    genl_dump_attrs(reply, what)?
        .iter()
        .map(|a| {
            let n = |kind| find(a, kind).and_then(|v| u32_at(v, 0));
            Ok(NetdevQueue {
                id: n(NETDEV_A_QUEUE_ID).ok_or_else(|| netlink::malformed(what, "queue without an id"))?,
                rx: n(NETDEV_A_QUEUE_TYPE) == Some(NETDEV_QUEUE_TYPE_RX),
                napi_id: n(NETDEV_A_QUEUE_NAPI_ID),
            })
        })
        .collect()
}

pub(crate) fn parse_napi_dump(reply: &[u8], what: &str) -> Result<Vec<Napi>> {
    genl_dump_attrs(reply, what)?
        .iter()
        .map(|a| {
            let n = |kind| find(a, kind).and_then(|v| u32_at(v, 0));
            Ok(Napi {
                id: n(NETDEV_A_NAPI_ID).ok_or_else(|| netlink::malformed(what, "NAPI without an id"))?,
                irq: n(NETDEV_A_NAPI_IRQ),
            })
        })
        .collect()
}

/// The queues and NAPI instances of the interface at `dir` (/sys/class/net/DEV); an error on
/// kernels without the netdev family (before 6.9) or its queue objects.
fn read_netdev(dir: &Path) -> Result<(Vec<NetdevQueue>, Vec<Napi>)> {
    let ifindex: u32 = fs::read_to_string(dir.join("ifindex"))
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .ok_or_else(|| Error::unsupported("no ifindex in sysfs"))?;
    let mut sock = Socket::open_protocol(libc::NETLINK_GENERIC)?;
    let family = genl_family(&mut sock, "netdev")?;
    let dump = |sock: &mut Socket, cmd, attr, what: &str| {
        let mut a = Vec::new();
        push_attr(&mut a, attr, &ifindex.to_ne_bytes());
        sock.request(family, NLM_F_DUMP, &genl_request(cmd, NETDEV_FAMILY_VERSION, &a), what)
    };
    let what = "dumping the queues (netdev queue-get)";
    let queues = parse_queue_dump(&dump(&mut sock, NETDEV_CMD_QUEUE_GET, NETDEV_A_QUEUE_IFINDEX, what)?, what)?;
    let what = "dumping the NAPI instances (netdev napi-get)";
    let napis = parse_napi_dump(&dump(&mut sock, NETDEV_CMD_NAPI_GET, NETDEV_A_NAPI_IFINDEX, what)?, what)?;
    Ok((queues, napis))
}

// Kernel UAPI constants: ethtool_netlink
const ETHTOOL_MSG_RSS_GET: u8 = 38;
const ETHTOOL_MSG_RSS_GET_REPLY: u8 = 38;
const ETHTOOL_A_RSS_HEADER: u16 = 1;
const ETHTOOL_A_RSS_HFUNC: u16 = 3;
const ETHTOOL_A_RSS_INDIR: u16 = 4;
const ETHTOOL_A_RSS_HKEY: u16 = 5;

/// The RSS configuration out of an `ETHTOOL_MSG_RSS_GET_REPLY` (the default context).
pub(crate) fn parse_rss(reply: &[u8], what: &str) -> Result<Rss> {
    let msgs = data_messages(reply, what)?;
    let msg = msgs.first().ok_or_else(|| netlink::malformed(what, "no reply message"))?;
    if msg.payload.first() != Some(&ETHTOOL_MSG_RSS_GET_REPLY) {
        return Err(netlink::malformed(what, format!("reply command {:?}, not RSS_GET_REPLY", msg.payload.first())));
    }
    let a = attrs(msg.payload.get(GENL_HDRLEN..).ok_or_else(|| netlink::malformed(what, "short genl header"))?, what)?;
    let indir = find(&a, ETHTOOL_A_RSS_INDIR).unwrap_or_default();
    if indir.len() % 4 != 0 {
        return Err(netlink::malformed(what, format!("indirection table of {} bytes", indir.len())));
    }
    Ok(Rss {
        hash_function: HashFunction::from_bits(find(&a, ETHTOOL_A_RSS_HFUNC).and_then(|v| u32_at(v, 0)).unwrap_or(0)),
        key: find(&a, ETHTOOL_A_RSS_HKEY).unwrap_or_default().to_vec(),
        indirection: indir.chunks_exact(4).filter_map(|c| u32_at(c, 0)).collect(),
    })
}

/// Reads the RSS configuration of `iface`.
fn read_rss(iface: &str) -> Result<Rss> {
    let mut sock = Socket::open_protocol(libc::NETLINK_GENERIC)?;
    let family = genl_family(&mut sock, "ethtool")?;
    let what = format!("reading the RSS configuration of {iface}");
    let body =
        genl_request(ETHTOOL_MSG_RSS_GET, ETHTOOL_GENL_VERSION, &ethtool_dev_header(ETHTOOL_A_RSS_HEADER, iface));
    parse_rss(&sock.request(family, 0, &body, &what)?, &what)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::netlink::genl_message;

    fn fixture(name: &str) -> String {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/nic").join(name);
        fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    fn names(text: &str) -> Vec<(u32, String)> {
        parse_interrupts(text).into_iter().map(|l| (l.irq, l.name)).collect()
    }

    #[test]
    fn interrupts_of_a_virtio_net_guest() {
        let all = names(&fixture("interrupts-virtio_net.txt"));
        assert!(all.contains(&(38, "virtio2-input.0".into())), "{all:?}");
        assert!(all.contains(&(39, "virtio2-output.0".into())));
        assert!(!all.iter().any(|(_, n)| n == "interrupts"), "named lines without a number are skipped");
        assert_eq!(irq_queue("virtio2-input.0", 0), Some(IrqQueue::Rx(0)));
        assert_eq!(irq_queue("virtio2-output.0", 0), Some(IrqQueue::Tx(0)));
        assert_eq!(irq_queue("virtio2-config", 0), None);
        assert_eq!(irq_queue("virtio3-rx", 0), None, "a virtio-vsock ring is not a NIC queue");
    }

    #[test]
    fn interrupts_of_a_four_queue_virtio_net_guest() {
        let all = names(&fixture("interrupts-virtio_net-4q.txt"));
        let queues: Vec<IrqQueue> = all.iter().filter_map(|(_, n)| irq_queue(n, 0)).collect();
        assert_eq!(queues.iter().filter(|q| matches!(q, IrqQueue::Rx(_))).count(), 4, "{all:?}");
        assert_eq!(queues.iter().filter(|q| matches!(q, IrqQueue::Tx(_))).count(), 4);
    }

    #[test]
    fn interrupts_of_mlx5_gve_and_ena() {
        let mlx = names(&fixture("interrupts-mlx5.txt"));
        let combined: Vec<IrqQueue> = mlx.iter().filter_map(|(_, n)| irq_queue(n, 0)).collect();
        assert_eq!(combined, (0..4).map(IrqQueue::Combined).collect::<Vec<_>>(), "{mlx:?}");
        assert_eq!(irq_queue("mlx5_async0@pci:0000:08:00.0", 0), None);

        let gve = names(&fixture("interrupts-gve.txt"));
        let blocks = gve.iter().filter(|(_, n)| n.starts_with("gve-ntfy-blk")).count() as u32;
        assert_eq!(blocks, 8);
        let q: Vec<IrqQueue> = gve.iter().filter_map(|(_, n)| irq_queue(n, blocks)).collect();
        assert_eq!(&q[..4], &(0..4).map(IrqQueue::Tx).collect::<Vec<_>>()[..], "lower blocks transmit");
        assert_eq!(&q[4..], &(0..4).map(IrqQueue::Rx).collect::<Vec<_>>()[..], "upper blocks receive");
        assert_eq!(irq_queue("gve-mgmnt@pci:0000:00:04.0", blocks), None);

        let ena = names(&fixture("interrupts-ena.txt"));
        let q: Vec<IrqQueue> = ena.iter().filter_map(|(_, n)| irq_queue(n, 0)).collect();
        assert_eq!(q, (0..4).map(IrqQueue::Combined).collect::<Vec<_>>(), "{ena:?}");
        assert_eq!(irq_queue("ena-mgmnt@pci:0000:00:05.0", 0), None);
        assert_eq!(irq_queue("i40e-eth0-TxRx-7", 0), Some(IrqQueue::Combined(7)));
        assert_eq!(irq_queue("eth0-rx-2", 0), Some(IrqQueue::Rx(2)));
        assert_eq!(irq_queue("eth0-tx-2", 0), Some(IrqQueue::Tx(2)));
    }

    #[test]
    fn cpu_masks() {
        assert_eq!(parse_cpu_mask("00000003\n"), Some(vec![0, 1]));
        assert_eq!(parse_cpu_mask("00000001,00000100"), Some(vec![8, 32]));
        assert_eq!(parse_cpu_mask("0"), Some(vec![]), "XPS unset");
        assert_eq!(parse_cpu_mask("xyz"), None);
    }

    fn u32v(v: u32) -> Vec<u8> {
        v.to_ne_bytes().to_vec()
    }

    #[test]
    fn netdev_dumps() {
        let mut reply = Vec::new();
        for (id, kind, napi) in [(0, 0, Some(8193)), (1, 0, Some(8194)), (0, 1, None)] {
            let mut a = vec![
                (NETDEV_A_QUEUE_ID, u32v(id)),
                (NETDEV_A_QUEUE_IFINDEX, u32v(2)),
                (NETDEV_A_QUEUE_TYPE, u32v(kind)),
            ];
            if let Some(n) = napi {
                a.push((NETDEV_A_QUEUE_NAPI_ID, u32v(n)));
            }
            reply.extend(genl_message(30, NETDEV_CMD_QUEUE_GET, &a));
        }
        let q = parse_queue_dump(&reply, "t").unwrap();
        assert_eq!(q[1], NetdevQueue { id: 1, rx: true, napi_id: Some(8194) });
        assert_eq!(q[2], NetdevQueue { id: 0, rx: false, napi_id: None });
        let napi =
            genl_message(30, NETDEV_CMD_NAPI_GET, &[(NETDEV_A_NAPI_ID, u32v(8193)), (NETDEV_A_NAPI_IRQ, u32v(38))]);
        assert_eq!(parse_napi_dump(&napi, "t").unwrap(), vec![Napi { id: 8193, irq: Some(38) }]);
        let no_id = genl_message(30, NETDEV_CMD_QUEUE_GET, &[(NETDEV_A_QUEUE_TYPE, u32v(0))]);
        assert!(parse_queue_dump(&no_id, "t").is_err());
        for cut in 0..reply.len() {
            let _ = parse_queue_dump(&reply[..cut], "t"); // never panics
        }
    }

    #[test]
    fn rss_replies() {
        let key: Vec<u8> = (0..40).collect();
        let table: Vec<u8> = (0..128u32).flat_map(|i| (i % 4).to_ne_bytes()).collect();
        let full = genl_message(
            21,
            ETHTOOL_MSG_RSS_GET_REPLY,
            &[(ETHTOOL_A_RSS_HFUNC, u32v(1)), (ETHTOOL_A_RSS_INDIR, table), (ETHTOOL_A_RSS_HKEY, key.clone())],
        );
        let rss = parse_rss(&full, "t").unwrap();
        assert_eq!(rss.hash_function, HashFunction::Toeplitz);
        assert_eq!(rss.key, key);
        assert_eq!(rss.indirection.len(), 128);
        assert_eq!(&rss.indirection[..5], &[0, 1, 2, 3, 0]);
        // A virtio_net without the RSS feature reports the function only (ethtool -x:
        // "Operation not supported" for table and key).
        let bare = genl_message(21, ETHTOOL_MSG_RSS_GET_REPLY, &[(ETHTOOL_A_RSS_HFUNC, u32v(1))]);
        let rss = parse_rss(&bare, "t").unwrap();
        assert!(rss.key.is_empty() && rss.indirection.is_empty());
        let odd = genl_message(21, ETHTOOL_MSG_RSS_GET_REPLY, &[(ETHTOOL_A_RSS_INDIR, vec![0; 6])]);
        assert!(parse_rss(&odd, "t").is_err());
        assert!(parse_rss(&genl_message(21, 3, &[]), "t").is_err(), "not an RSS reply");
        for cut in 0..full.len() {
            let _ = parse_rss(&full[..cut], "t");
        }
        assert_eq!(HashFunction::from_bits(2), HashFunction::Xor);
        assert_eq!(HashFunction::from_bits(0), HashFunction::Unknown);
    }

    fn four_queue_sources() -> Sources {
        let names = ["virtio1-config", "virtio1-input.0", "virtio1-output.0", "virtio1-input.1", "virtio1-output.1"];
        Sources {
            iface: "eth0".into(),
            driver: Some("virtio_net".into()),
            rx_count: 2,
            tx_count: 2,
            irq_names: names.iter().enumerate().map(|(i, n)| (24 + i as u32, n.to_string())).collect(),
            irq_cpus: [(25, vec![1]), (26, vec![0]), (27, vec![3]), (28, vec![2])].into_iter().collect(),
            netdev: None,
            xps: [(0, vec![0]), (1, vec![1])].into_iter().collect(),
            numa_node: Some(0),
            node_cpus: vec![0, 1, 2, 3],
            rss: None,
            notes: vec![],
        }
    }

    #[test]
    fn assembled_from_irq_names() {
        let t = assemble(four_queue_sources());
        assert!(t.has_hardware_queues());
        assert_eq!(t.rx[1], QueueInfo { queue: 1, napi_id: None, irq: Some(27), irq_cpus: vec![3], xps_cpus: vec![] });
        assert_eq!(t.tx[1].irq, Some(28));
        assert_eq!(t.tx[1].xps_cpus, vec![1]);
        assert_eq!(t.rx_irq_cpu(0), Some(1));
        assert_eq!(t.rx_irq_cpu(7), None);
    }

    #[test]
    fn netdev_napi_irq_wins_over_names() {
        let mut s = four_queue_sources();
        s.netdev = Some((
            vec![
                NetdevQueue { id: 0, rx: true, napi_id: Some(8193) },
                NetdevQueue { id: 1, rx: true, napi_id: Some(8194) },
            ],
            vec![Napi { id: 8193, irq: Some(28) }, Napi { id: 8194, irq: None }],
        ));
        let t = assemble(s);
        assert_eq!(t.rx[0].napi_id, Some(8193));
        assert_eq!(t.rx[0].irq, Some(28), "the kernel's NAPI → IRQ link");
        assert_eq!(t.rx[1].irq, Some(27), "no IRQ in the NAPI object: the name's");
        assert_eq!(t.rx_queue_of_napi(8194), Some(1));
        assert_eq!(t.rx_queue_of_napi(1), None);
    }

    #[test]
    fn software_devices_have_no_hardware_queues() {
        let t = NicTopology::read("lo").unwrap();
        assert!(!t.has_hardware_queues(), "{t:?}");
        assert!(!t.rx.is_empty(), "lo has rx-0 in sysfs: {t:?}");
        assert!(NicTopology::read("no-such-if0").is_err());
        assert!(NicTopology::read("../lo").is_err());
        let json = serde_json::to_value(&t).unwrap();
        assert!(json["rx"][0]["queue"].is_u64(), "{json}");
    }

    #[test]
    fn live_pci_nics_have_their_irqs_found() {
        // Every interface of this host whose device has MSI vectors (a virtio_net VM's eth0, a
        // real NIC): the topology finds an IRQ per receive queue, each delivered to some CPU.
        for entry in fs::read_dir("/sys/class/net").unwrap() {
            let iface = entry.unwrap().file_name().to_string_lossy().into_owned();
            let device = Path::new("/sys/class/net").join(&iface).join("device");
            if device_irqs(&device).is_none_or(|irqs| irqs.is_empty()) {
                continue;
            }
            let t = NicTopology::read(&iface).unwrap();
            assert!(t.has_hardware_queues(), "{t:?}");
            for q in &t.rx {
                assert!(q.irq.is_some() && !q.irq_cpus.is_empty(), "{iface} rx {}: {t:?}", q.queue);
            }
            let mut napis: Vec<u32> = t.rx.iter().filter_map(|q| q.napi_id).collect();
            let n = napis.len();
            napis.dedup();
            assert_eq!(napis.len(), n, "one NAPI instance per receive queue: {t:?}");
        }
    }

    #[test]
    fn an_irq_not_yet_moved_to_its_new_mask_is_where_the_mask_says() {
        let t = |s: &str| Some(s.to_string());
        assert_eq!(irq_delivery_cpus(t("2\n"), t("1\n")), Some(vec![1]), "stale effective: the mask set");
        assert_eq!(irq_delivery_cpus(t("1\n"), t("0-3\n")), Some(vec![1]), "effective inside the mask");
        assert_eq!(irq_delivery_cpus(None, t("3\n")), Some(vec![3]), "no effective list");
        assert_eq!(irq_delivery_cpus(t("0\n"), None), Some(vec![0]), "no mask readable");
        assert_eq!(irq_delivery_cpus(t("\n"), t("\n")), None);
    }
}
