//! One thread per NIC receive queue: which queues a receiver's test serves, the CPU each
//! queue's thread runs on (`--placement`), what the receiver tells the sender so that each
//! flow lands on its queue (the RSS key and table, [`RssSteering`]), the source ports the
//! sender picks from it, and the per-queue table the report shows, with the misalignments it
//! finds (`arrivals.rs`: where each flow arrived, and that table).
//!
//! Engine queue `q` of a test (the threads' unit, `--queues` on the sender) is served from NIC
//! receive queue `nic_queue[q]`: the receiver's `--queues` list in turn. Flow `f` belongs to
//! engine queue `f % queues`, so it aims at `nic_queue[f % queues]`.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use serde::{Deserialize, Serialize};

use crate::base::error::{Error, Result};
use crate::metrics::figures::{NicQueueRow, NicQueueTable};
use crate::runtime::placement::{plan, BusyPoll, Placement};
use crate::sys::nic_topology::{HashFunction, NicTopology};
use crate::uring::fastpath::FastPaths;
use crate::wire::rss::{choose_ports, RssMap};

mod arrivals;
pub(crate) use arrivals::{join_and, landed_queue};
pub use arrivals::{queue_table, FlowArrival};

/// `--placement`: where a queue's thread runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum PlacementMode {
    /// On the CPU its queue's IRQ is delivered to: packets, softirq and thread share one cache.
    Irq,
    /// On a hyperthread sibling of that CPU (else another CPU of the NIC's node): the IRQ's
    /// softirq work does not steal the thread's time.
    IrqSibling,
    /// On the CPUs of the NIC's NUMA node, in order.
    Numa,
    /// On the allowed CPUs in order, ignoring the NIC (what veth and loopback get).
    Cpus,
}

impl PlacementMode {
    pub fn parse(text: &str) -> Result<Self> {
        match text {
            "irq" => Ok(Self::Irq),
            "irq-sibling" => Ok(Self::IrqSibling),
            "numa" => Ok(Self::Numa),
            "cpus" => Ok(Self::Cpus),
            _ => Err(Error::usage(format!("--placement '{text}': expected irq, irq-sibling, numa or cpus"))),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Irq => "irq",
            Self::IrqSibling => "irq-sibling",
            Self::Numa => "numa",
            Self::Cpus => "cpus",
        }
    }
}

/// Receiver → sender, in `accept`: how the receiver's NIC maps a flow to a receive queue and
/// which queue each engine queue of the test is served from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RssSteering {
    pub iface: String,
    pub hash_function: HashFunction,
    /// Empty when the driver does not report it.
    #[serde(default)]
    pub key: Vec<u8>,
    /// Empty when the driver does not report it.
    #[serde(default)]
    pub indirection: Vec<u32>,
    /// The NIC receive queue of each engine queue, in engine-queue order.
    pub queues: Vec<u32>,
    /// The CPU each of those queues' IRQ is delivered to, in the same order.
    pub queue_cpus: Vec<Option<usize>>,
    /// The fields the NIC hashes UDP over IPv4 and over IPv6 on (`ethtool -n DEV
    /// rx-flow-hash udp4`, `RXH_*` bits); absent where the driver does not say, and from
    /// receivers that predate UDP steering.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp4_hash: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp6_hash: Option<u64>,
}

/// The largest key and indirection table a sender accepts from a receiver (drivers use 40- or
/// 52-byte keys and tables of at most a few thousand entries).
const MAX_KEY: usize = 256;
const MAX_TABLE: usize = 1 << 16;

impl RssSteering {
    /// Why source ports cannot steer flows with this set-up, or None when they can.
    pub fn unusable(&self) -> Option<String> {
        if self.hash_function != HashFunction::Toeplitz {
            return Some(format!("{} hashes with {:?}, not Toeplitz", self.iface, self.hash_function));
        }
        if self.key.is_empty() || self.indirection.is_empty() {
            return Some(format!("{}'s driver does not report its RSS key and indirection table", self.iface));
        }
        if self.key.len() > MAX_KEY || self.indirection.len() > MAX_TABLE || self.queues.is_empty() {
            return Some(format!(
                "{}: implausible RSS set-up ({}-byte key, {}-entry table, {} queues)",
                self.iface,
                self.key.len(),
                self.indirection.len(),
                self.queues.len()
            ));
        }
        None
    }

    /// Why source ports cannot steer UDP flows (over IPv6 when `v6`), or None when they can:
    /// besides a usable key and table, the NIC must hash UDP on both ports.
    pub fn udp_unusable(&self, v6: bool) -> Option<String> {
        if let Some(why) = self.unusable() {
            return Some(why);
        }
        let (name, fields) = if v6 { ("udp6", self.udp6_hash) } else { ("udp4", self.udp4_hash) };
        match fields {
            None => Some(format!("{}'s driver does not report which fields it hashes {name} on", self.iface)),
            Some(f) if !crate::sys::ntuple::hashes_ports(f) => Some(format!(
                "{} hashes {name} on {} only, not the ports, so a source port cannot choose the queue (`ethtool -N {} rx-flow-hash {name} sdfn` adds them)",
                self.iface,
                crate::sys::ntuple::describe_fields(f),
                self.iface
            )),
            Some(_) => None,
        }
    }

    /// The receive queue flow `flow` of a test with `engine_queues` queues aims at.
    pub fn target_of_flow(&self, engine_queues: u32, flow: u32) -> u32 {
        let q = (flow % engine_queues.max(1)) as usize;
        self.queues[q % self.queues.len().max(1)]
    }

    /// One source port per flow `0..flows` from `src_ip` to `dst`, each landing on its target
    /// queue; `is_free` says whether a port may be bound. None for a flow no port reaches.
    pub fn ports(
        &self,
        engine_queues: u32,
        flows: u32,
        src_ip: IpAddr,
        dst: SocketAddr,
        is_free: impl FnMut(u16) -> bool,
    ) -> Vec<Option<u16>> {
        if self.unusable().is_some() {
            return vec![None; flows as usize];
        }
        let targets: Vec<u32> = (0..flows).map(|f| self.target_of_flow(engine_queues, f)).collect();
        choose_ports(&RssMap { key: &self.key, table: &self.indirection }, src_ip, dst, &targets, is_free)
    }
}

/// A receiver's test on a NIC with queues: the topology and the NIC queue of each engine queue.
#[derive(Debug, Clone)]
pub struct TestQueues {
    pub topology: NicTopology,
    /// NIC receive queue of each engine queue (index: engine queue).
    pub nic_queue: Vec<u32>,
    pub mode: PlacementMode,
    /// Why this mode, in a few words.
    pub why: String,
    /// The RSS hash fields of UDP over IPv4 and IPv6 (`RXH_*` bits), where read.
    pub udp_hash: [Option<u64>; 2],
    /// Flows are put on their queues by n-tuple rules (`--steer ntuple`): each goes to the
    /// thread of its target queue, not of the queue its handshake arrived on.
    pub by_rules: bool,
}

/// The receive queues `recv --queues` names: `N` is queues 0..N-1, a list (`2-5`, `0,2,4`)
/// those queues.
pub fn parse_queue_list(text: &str) -> Result<Vec<u32>> {
    let bad = || Error::usage(format!("--queues '{text}': expected a count (4) or a list of queues (0-3,8)"));
    if !text.contains(['-', ',']) {
        let n: u32 = text.trim().parse().map_err(|_| bad())?;
        if n == 0 || n > 4096 {
            return Err(bad());
        }
        return Ok((0..n).collect());
    }
    crate::base::units::parse_cpu_list(text).map(|l| l.into_iter().map(|q| q as u32).collect()).map_err(|_| bad())
}

impl TestQueues {
    /// The queues of a test with `engine_queues` queues on `topology`; None when the
    /// interface has no hardware queues (veth, loopback: CPU placement stays). `wanted` is
    /// `recv --queues` (all receive queues when absent); `busy` whether the threads spin.
    pub fn plan(
        topology: NicTopology,
        wanted: Option<&[u32]>,
        engine_queues: u32,
        mode: Option<PlacementMode>,
        busy: bool,
    ) -> Result<Option<Self>> {
        if !topology.has_hardware_queues() {
            return Ok(None);
        }
        let all: Vec<u32> = topology.rx.iter().map(|q| q.queue).collect();
        let served = match wanted {
            None => all.clone(),
            Some(list) => {
                if let Some(q) = list.iter().find(|q| !all.contains(q)) {
                    return Err(Error::usage(format!(
                        "recv --queues names receive queue {q}, but {} has {} ({})",
                        topology.iface,
                        all.len(),
                        describe_list(&all)
                    )));
                }
                list.to_vec()
            }
        };
        let (mode, why) = match mode {
            Some(m) => (m, format!("--placement {}", m.name())),
            None if busy => {
                (PlacementMode::Irq, "default for busy polling: the thread polls where its IRQ lands".into())
            }
            None => (
                PlacementMode::IrqSibling,
                "default without busy polling: beside the IRQ's CPU, so softirq and thread do not share one".into(),
            ),
        };
        let nic_queue = (0..engine_queues.max(1) as usize).map(|q| served[q % served.len()]).collect();
        Ok(Some(Self { topology, nic_queue, mode, why, udp_hash: [None, None], by_rules: false }))
    }

    /// The queues of a test served to the sender at `peer`: those of the interface that
    /// routes to it. None where that interface has no hardware queues (veth, loopback) or
    /// cannot be read; an error only for a `--queues` list the NIC does not have.
    pub fn toward(
        peer: IpAddr,
        wanted: Option<&[u32]>,
        engine_queues: u32,
        mode: Option<PlacementMode>,
        busy: bool,
    ) -> Result<Option<Self>> {
        let Some(topology) = crate::sys::hostinfo::route_to(peer).ok().and_then(|r| NicTopology::read(&r.ifname).ok())
        else {
            return Ok(None);
        };
        let iface = topology.iface.clone();
        let mut planned = Self::plan(topology, wanted, engine_queues, mode, busy)?;
        if let Some(q) = planned.as_mut() {
            use crate::sys::ntuple::{flow_hash_fields, UDP_V4_FLOW, UDP_V6_FLOW};
            q.udp_hash = [UDP_V4_FLOW, UDP_V6_FLOW].map(|t| flow_hash_fields(&iface, t).ok());
        }
        Ok(planned)
    }

    /// The CPU for each of `threads` threads (thread `i` primarily serves engine queue `i`),
    /// distinct and inside `allowed`, with one line saying what was chosen and what could not
    /// be honoured. None for `--placement cpus`.
    pub fn thread_cpus(&self, threads: usize, allowed: &[usize]) -> Option<(Vec<usize>, String)> {
        if self.mode == PlacementMode::Cpus {
            return None;
        }
        let threads = threads.min(allowed.len());
        let node: Vec<usize> = self.topology.node_cpus.iter().copied().filter(|c| allowed.contains(c)).collect();
        let irq_cpus: Vec<usize> =
            self.nic_queue.iter().filter_map(|&q| self.topology.rx_irq_cpu(q)).collect::<Vec<_>>();
        let mut taken: Vec<usize> = Vec::new();
        let mut notes = Vec::new();
        let mut numa_next = node.iter().chain(allowed.iter()).copied();
        for thread in 0..threads {
            let queue = self.nic_queue[thread % self.nic_queue.len()];
            let irq_cpu = self.topology.rx_irq_cpu(queue);
            let wanted = match self.mode {
                PlacementMode::Irq => irq_cpu,
                // A sibling shares the IRQ CPU's caches. Else a CPU whose XPS map sends through
                // the paired transmit queue: the thread's ACKs and replies then leave by its own
                // queue pair, whose completions interrupt the same vector on combined-channel
                // NICs, and a multi-queue tap (which picks the guest's receive queue from the
                // queue the guest last sent the flow on) keeps the flow on this queue. Two
                // threads sending through one tx queue pulled both flows of the VM lab's 2-queue
                // test onto one receive queue.
                PlacementMode::IrqSibling => irq_cpu.and_then(|c| {
                    let free = |n: &usize| allowed.contains(n) && !irq_cpus.contains(n) && !taken.contains(n);
                    siblings(c)
                        .into_iter()
                        .find(|s| allowed.contains(s) && !taken.contains(s))
                        .or_else(|| self.topology.tx_xps_cpus(queue).iter().copied().find(free))
                        .or_else(|| node.iter().copied().find(free))
                }),
                PlacementMode::Numa => numa_next.find(|c| !taken.contains(c)),
                PlacementMode::Cpus => None,
            };
            let cpu = match wanted {
                Some(c) if allowed.contains(&c) && !taken.contains(&c) => c,
                other => {
                    let fallback = node
                        .iter()
                        .chain(allowed.iter())
                        .copied()
                        .find(|c| !taken.contains(c) && !irq_cpus.contains(c))
                        .or_else(|| allowed.iter().copied().find(|c| !taken.contains(c)))?;
                    notes.push(match other {
                        Some(c) if taken.contains(&c) => {
                            format!("queue {queue}'s CPU {c} is taken by another queue's thread: CPU {fallback}")
                        }
                        Some(c) => format!("queue {queue}'s CPU {c} is not allowed (--cpus, taskset): CPU {fallback}"),
                        None if irq_cpu.is_none() => format!("queue {queue} has no IRQ CPU known: CPU {fallback}"),
                        None => format!("no free CPU beside queue {queue}'s IRQ CPU: CPU {fallback}"),
                    });
                    fallback
                }
            };
            taken.push(cpu);
        }
        let pairs: Vec<String> =
            (0..threads).map(|t| format!("rx {}→CPU {}", self.nic_queue[t % self.nic_queue.len()], taken[t])).collect();
        let mut line = format!(
            "{} queues of {}: {} ({}){}",
            self.topology.driver.as_deref().unwrap_or("NIC"),
            self.topology.iface,
            pairs.join(", "),
            self.why,
            self.topology.numa_node.map_or(String::new(), |n| format!(", NIC on node {n}"))
        );
        for n in notes {
            line.push_str("; ");
            line.push_str(&n);
        }
        Some((taken, line))
    }

    /// What the receiver tells the sender in `accept`.
    pub fn steering(&self) -> RssSteering {
        let rss = self.topology.rss.clone();
        RssSteering {
            iface: self.topology.iface.clone(),
            hash_function: rss.as_ref().map_or(HashFunction::Unknown, |r| r.hash_function),
            key: rss.as_ref().map(|r| r.key.clone()).unwrap_or_default(),
            indirection: rss.map(|r| r.indirection).unwrap_or_default(),
            queues: self.nic_queue.clone(),
            queue_cpus: self.nic_queue.iter().map(|&q| self.topology.rx_irq_cpu(q)).collect(),
            udp4_hash: self.udp_hash[0],
            udp6_hash: self.udp_hash[1],
        }
    }
}

/// `0-3` or `0,2,5`.
fn describe_list(list: &[u32]) -> String {
    match (list.first(), list.last()) {
        (Some(a), Some(b)) if (*b - *a) as usize + 1 == list.len() => format!("{a}-{b}"),
        _ => list.iter().map(u32::to_string).collect::<Vec<_>>().join(","),
    }
}

/// The other hyperthreads of `cpu`'s core.
fn siblings(cpu: usize) -> Vec<usize> {
    std::fs::read_to_string(format!("/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list"))
        .ok()
        .and_then(|t| crate::base::units::parse_cpu_list(&t).ok())
        .unwrap_or_default()
        .into_iter()
        .filter(|&c| c != cpu)
        .collect()
}

/// The sender's CPUs in the order its threads take them: first, for each transmit queue in
/// turn, an allowed CPU its XPS map holds, so that each of the first threads sends through a
/// queue of its own; then the other CPUs in order. With the line that says what was chosen.
/// None where the interface has no hardware queues or no XPS map names an allowed CPU
/// (the CPUs then stay in order).
pub fn xps_order(topology: &NicTopology, cpus: &[usize], threads: usize) -> Option<(Vec<usize>, String)> {
    if !topology.has_hardware_queues() {
        return None;
    }
    let mut picked: Vec<(usize, u32)> = Vec::new();
    for q in &topology.tx {
        if picked.len() == threads {
            break;
        }
        let free = cpus.iter().find(|c| q.xps_cpus.contains(c) && !picked.iter().any(|(p, _)| p == *c));
        if let Some(&cpu) = free {
            picked.push((cpu, q.queue));
        }
    }
    if picked.is_empty() {
        return None;
    }
    let order: Vec<usize> = picked
        .iter()
        .map(|(c, _)| *c)
        .chain(cpus.iter().copied().filter(|c| !picked.iter().any(|(p, _)| p == c)))
        .collect();
    let pairs: Vec<String> = picked.iter().map(|(c, q)| format!("CPU {c}→tx-{q}")).collect();
    let mut line = format!("sending threads by {}'s XPS map, one tx queue each: {}", topology.iface, pairs.join(", "));
    if picked.len() < threads.min(cpus.len()) {
        line.push_str(&format!(
            "; the other {} threads share tx queues (no further XPS map holds an allowed CPU)",
            threads.min(cpus.len()) - picked.len()
        ));
    }
    Some((order, line))
}

/// A test's threads: on their queues' CPUs when the NIC has queues (`--placement`), else on
/// `cpus` in order, with a line saying which and why. `how`: busy polling, whether the CPUs are
/// shared with other tests, and whether the workload is latency-bound.
pub(crate) fn place_threads(
    queues: Option<&TestQueues>,
    cpus: &[usize],
    engine_queues: u32,
    (busy_poll, sharing, latency_bound): (BusyPoll, bool, bool),
    fast: &FastPaths,
) -> Result<Placement> {
    let threads = (engine_queues as usize).min(cpus.len());
    let chosen = queues.and_then(|q| q.thread_cpus(threads, cpus));
    let on = chosen.as_ref().map_or(cpus, |(c, _)| c.as_slice());
    let mut placement = plan(engine_queues, on, busy_poll, sharing, latency_bound, fast)?;
    match (&chosen, queues) {
        (Some((_, line)), _) => placement.summary = format!("{}; {line}", placement.summary),
        (None, Some(q)) => {
            placement.summary.push_str(&format!("; --placement cpus: {}'s queues ignored", q.topology.iface))
        }
        (None, None) => placement
            .summary
            .push_str("; no NIC queues on this path (veth, loopback): CPUs in order, flows dealt to threads by index"),
    }
    Ok(placement)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::runtime::placement::ThreadPlan;
    use crate::sys::nic_topology::{QueueInfo, Rss};
    use crate::uring::ring::WaitMode;

    // The Microsoft verification key, a stand-in for a NIC's.
    use crate::wire::rss::MS_KEY as KEY;

    /// A 4-queue NIC: rx queue q has NAPI id 100+q and IRQ 30+q on CPU 3-q, node 0 of CPUs 0-3.
    pub(crate) fn topology(rss: bool) -> NicTopology {
        NicTopology {
            iface: "eth0".into(),
            driver: Some("virtio_net".into()),
            numa_node: Some(0),
            node_cpus: vec![0, 1, 2, 3],
            rx: (0..4)
                .map(|q| QueueInfo {
                    queue: q,
                    napi_id: Some(100 + q),
                    irq: Some(30 + q),
                    irq_cpus: vec![3 - q as usize],
                    xps_cpus: vec![],
                })
                .collect(),
            tx: vec![],
            rss: Some(Rss {
                hash_function: HashFunction::Toeplitz,
                key: if rss { KEY.to_vec() } else { vec![] },
                indirection: if rss { (0..128).map(|i| i % 4).collect() } else { vec![] },
            }),
            notes: vec![],
        }
    }

    fn placement(cpus: &[usize]) -> Placement {
        Placement {
            threads: cpus.iter().enumerate().map(|(i, &cpu)| ThreadPlan { cpu, queues: vec![i as u32] }).collect(),
            wait: WaitMode::Sleep,
            fast: Default::default(),
            summary: String::new(),
        }
    }

    #[test]
    fn sending_threads_take_one_cpu_per_tx_queue_by_xps_then_the_rest() {
        let mut t = topology(true);
        // A 16-vCPU guest with 4 tx queues: XPS sends CPUs q and q+4 (hyperthread siblings)
        // through tx-q, as gve and virtio_net set it for more CPUs than queues.
        let xps = |q: u32, cpus: Vec<usize>| QueueInfo {
            queue: q,
            napi_id: None,
            irq: None,
            irq_cpus: vec![],
            xps_cpus: cpus,
        };
        t.tx = (0..4).map(|q| xps(q, vec![q as usize, q as usize + 4])).collect();
        // --cpus 4,0,5,1: in order, threads 0 and 1 would share tx-0, 2 and 3 tx-1.
        let (order, line) = xps_order(&t, &[4, 0, 5, 1], 4).unwrap();
        assert_eq!(order, vec![4, 5, 0, 1], "tx-0 and tx-1 get a thread each first");
        assert!(line.contains("CPU 4→tx-0, CPU 5→tx-1"), "{line}");
        assert!(line.contains("the other 2 threads share tx queues"), "{line}");
        let (order, line) = xps_order(&t, &(0..8).collect::<Vec<_>>(), 4).unwrap();
        assert_eq!(&order[..4], &[0, 1, 2, 3]);
        assert!(!line.contains("share"), "{line}");
        t.tx.iter_mut().for_each(|q| q.xps_cpus.clear());
        assert!(xps_order(&t, &[0, 1], 2).is_none(), "XPS unset: the CPUs stay in order");
        t.rx.iter_mut().for_each(|q| q.irq = None);
        assert!(xps_order(&t, &[0, 1], 2).is_none(), "veth: no hardware queues");
    }

    #[test]
    fn queue_lists() {
        assert_eq!(parse_queue_list("4").unwrap(), vec![0, 1, 2, 3]);
        assert_eq!(parse_queue_list("2-3,6").unwrap(), vec![2, 3, 6]);
        assert!(parse_queue_list("0").is_err());
        assert!(parse_queue_list("x").is_err());
        assert_eq!(PlacementMode::parse("irq-sibling").unwrap(), PlacementMode::IrqSibling);
        assert!(PlacementMode::parse("near").is_err());
    }

    #[test]
    fn software_devices_keep_cpu_placement() {
        let mut t = topology(true);
        t.rx.iter_mut().for_each(|q| q.irq = None);
        assert!(TestQueues::plan(t, None, 4, None, false).unwrap().is_none());
    }

    #[test]
    fn threads_go_to_their_queues_irq_cpus() {
        let tq = TestQueues::plan(topology(true), None, 4, None, true).unwrap().unwrap();
        assert_eq!(tq.mode, PlacementMode::Irq, "busy polling defaults to the IRQ's CPU: {}", tq.why);
        let (cpus, line) = tq.thread_cpus(4, &[0, 1, 2, 3]).unwrap();
        assert_eq!(cpus, vec![3, 2, 1, 0], "{line}");
        assert!(line.contains("rx 0→CPU 3"), "{line}");
        // CPU 3 not allowed: queue 0's thread moves, and the line says why.
        let (cpus, line) = tq.thread_cpus(4, &[0, 1, 2]).unwrap();
        assert_eq!(cpus, vec![0, 2, 1], "one thread per allowed CPU");
        assert!(line.contains("queue 0's CPU 3 is not allowed"), "{line}");
        let named =
            TestQueues::plan(topology(true), Some(&[2, 3]), 4, Some(PlacementMode::Irq), false).unwrap().unwrap();
        assert_eq!(named.nic_queue, vec![2, 3, 2, 3], "recv --queues 2-3: engine queues take them in turn");
        assert!(TestQueues::plan(topology(true), Some(&[7]), 1, None, false).is_err(), "no rx queue 7");
        let cpus_mode = TestQueues::plan(topology(true), None, 2, Some(PlacementMode::Cpus), false).unwrap().unwrap();
        assert!(cpus_mode.thread_cpus(2, &[0, 1]).is_none());
    }

    #[test]
    fn irq_sibling_threads_send_through_their_own_queue_pair() {
        // The VM lab's guest b on lab0: 4 vCPUs, 2 queue pairs, no NUMA node for the device;
        // virtio_net spreads rx 0's IRQ over CPUs 0-1 (delivered to 0) and rx 1's over 2-3
        // (to 3), and its XPS map sends CPUs 0-1 through tx-0 and 2-3 through tx-1. The
        // receiver's CPU list came rotated ([2, 1, 0, 3]): taken in order, rx 0's thread sat on
        // CPU 2 (tx-1) and rx 1's on CPU 1 (tx-0), crossed.
        let mut t = topology(false);
        t.numa_node = None;
        t.node_cpus.clear();
        t.rx.truncate(2);
        t.rx[0].irq_cpus = vec![0];
        t.rx[1].irq_cpus = vec![3];
        t.tx = (0..2u32)
            .map(|q| QueueInfo {
                queue: q,
                napi_id: None,
                irq: None,
                irq_cpus: vec![],
                xps_cpus: vec![2 * q as usize, 2 * q as usize + 1],
            })
            .collect();
        let tq = TestQueues::plan(t.clone(), None, 2, None, false).unwrap().unwrap();
        assert_eq!(tq.mode, PlacementMode::IrqSibling);
        let (cpus, line) = tq.thread_cpus(2, &[2, 1, 0, 3]).unwrap();
        assert_eq!(cpus, vec![1, 2], "each thread on a CPU of its own queue pair, off both IRQ CPUs: {line}");
        assert!(!line.contains("no free CPU"), "{line}");
        // Without XPS maps the CPUs are taken in the order given.
        t.tx.clear();
        let tq = TestQueues::plan(t, None, 2, None, false).unwrap().unwrap();
        assert_eq!(tq.thread_cpus(2, &[2, 1, 0, 3]).unwrap().0, vec![2, 1]);
    }

    #[test]
    fn steered_flows_land_on_distinct_queues_and_the_table_says_so() {
        let tq = TestQueues::plan(topology(true), None, 4, Some(PlacementMode::Irq), true).unwrap().unwrap();
        let steer = tq.steering();
        assert_eq!(steer.unusable(), None);
        assert_eq!(steer.queue_cpus, vec![Some(3), Some(2), Some(1), Some(0)]);
        let (src, dst): (IpAddr, SocketAddr) = ("10.77.0.1".parse().unwrap(), "10.77.0.2:5300".parse().unwrap());
        let ports = steer.ports(4, 4, src, dst, |_| true);
        let map = RssMap { key: &KEY, table: &steer.indirection };
        let arrivals: Vec<FlowArrival> = ports
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let peer = SocketAddr::new(src, p.unwrap());
                let q = map.queue_of(peer, dst, true).unwrap();
                FlowArrival {
                    flow: i as u32,
                    peer,
                    local: dst,
                    napi_id: Some(100 + q),
                    cpu: None,
                    engine_queue: i as u32,
                    bytes: 1000,
                }
            })
            .collect();
        // The threads on CPUs 3 and 2 (queues 0 and 1) found 75 of 100 and none of 10
        // completions by polling; the others reported none.
        let table = queue_table(&tq, &placement(&[3, 2, 1, 0]), &arrivals, &[(3, 100, 75), (2, 10, 0)]);
        assert_eq!(
            table.rows.iter().map(|r| r.flows.clone()).collect::<Vec<_>>(),
            vec![vec![0], vec![1], vec![2], vec![3]]
        );
        assert_eq!(
            table.rows.iter().map(NicQueueRow::busy_poll_share).collect::<Vec<_>>(),
            vec![Some(0.75), Some(0.0), None, None]
        );
        assert!(table.findings.is_empty(), "{:?}", table.findings);
        assert!(table.summary.starts_with("4 flows on 4 of 4"), "{}", table.summary);
    }

    #[test]
    fn collisions_and_misplaced_threads_are_named() {
        let tq = TestQueues::plan(topology(true), None, 4, Some(PlacementMode::Irq), true).unwrap().unwrap();
        let dst: SocketAddr = "10.77.0.2:5300".parse().unwrap();
        // Flows 0 and 2 both arrive on queue 1 (NAPI 101); queue 2 and 3... flow 1 on 0, flow 3 on 3.
        let arrive = |flow: u32, napi: u32| FlowArrival {
            flow,
            peer: SocketAddr::new("10.77.0.1".parse().unwrap(), 40000 + flow as u16),
            local: dst,
            napi_id: Some(napi),
            cpu: None,
            engine_queue: flow,
            bytes: 10,
        };
        let arrivals = [arrive(0, 101), arrive(1, 100), arrive(2, 101), arrive(3, 103)];
        // Thread of engine queue 1 sits on CPU 1, but rx queue 0's IRQ is on CPU 3.
        let table = queue_table(&tq, &placement(&[3, 1, 2, 0]), &arrivals, &[]);
        assert!(table.findings.contains(&"flows 0 and 2 share rx queue 1".to_string()), "{:?}", table.findings);
        assert!(
            table.findings.contains(&"IRQ of queue 0 on CPU 3, its thread on CPU 1".to_string()),
            "{:?}",
            table.findings
        );
        // Where a flow arrived is compared with the hash of its own ports.
        let steer = tq.steering();
        let map = RssMap { key: &steer.key, table: &steer.indirection };
        for (i, a) in arrivals.iter().enumerate() {
            let (landed, hashed) = (a.napi_id.unwrap() - 100, map.queue_of(a.peer, dst, true).unwrap());
            let missed = format!(
                "flow {i} landed on rx queue {landed}, but its ports hash to rx queue {hashed} by the NIC's reported key and table"
            );
            assert_eq!(table.findings.contains(&missed), landed != hashed, "{:?}", table.findings);
        }
        assert!(table.findings.iter().any(|f| f.contains("but its ports hash to")), "{:?}", table.findings);
        assert!(table.summary.starts_with("4 flows on 3 of 4"), "{}", table.summary);
        let idle = table.rows.iter().find(|r| r.rx_queue == 2).unwrap();
        assert!(idle.flows.is_empty() && idle.bytes == 0, "an idle served queue is a row too");
    }

    #[test]
    fn without_napi_ids_the_incoming_cpu_names_the_queue() {
        let mut t = topology(false);
        t.rx.iter_mut().for_each(|q| q.napi_id = None);
        let tq = TestQueues::plan(t, None, 2, Some(PlacementMode::Irq), true).unwrap().unwrap();
        let dst: SocketAddr = "10.77.0.2:5300".parse().unwrap();
        let arrive = |flow: u32, cpu: usize| FlowArrival {
            flow,
            peer: SocketAddr::new("10.77.0.1".parse().unwrap(), 40000 + flow as u16),
            local: dst,
            napi_id: Some(8200 + flow),
            cpu: Some(cpu),
            engine_queue: flow,
            bytes: 5,
        };
        // CPU 3 is rx queue 0's IRQ CPU, CPU 2 rx queue 1's.
        let table = queue_table(&tq, &placement(&[3, 2]), &[arrive(0, 3), arrive(1, 3)], &[]);
        let q0 = table.rows.iter().find(|r| r.rx_queue == 0).unwrap();
        assert_eq!(q0.flows, vec![0, 1], "{table:?}");
        assert_eq!(q0.napi_id, Some(8200), "the socket's NAPI id when the kernel names none per queue");
        assert!(table.findings.contains(&"flows 0 and 1 share rx queue 0".to_string()), "{:?}", table.findings);
        assert!(table.summary.contains("by the CPU"), "{}", table.summary);
    }

    #[test]
    fn a_thread_serving_several_queues_is_named() {
        let tq = TestQueues::plan(topology(true), None, 2, Some(PlacementMode::Cpus), false).unwrap().unwrap();
        let dst: SocketAddr = "10.77.0.2:5300".parse().unwrap();
        let arrive = |flow: u32, napi: u32, engine_queue: u32| FlowArrival {
            flow,
            peer: SocketAddr::new("10.77.0.1".parse().unwrap(), 40000 + flow as u16),
            local: dst,
            napi_id: Some(napi),
            cpu: None,
            engine_queue,
            bytes: 1,
        };
        let table = queue_table(&tq, &placement(&[0, 1]), &[arrive(0, 100, 0), arrive(1, 101, 0)], &[]);
        assert!(table.findings.contains(&"thread on CPU 0 serves flows of rx queues 0 and 1".to_string()), "{table:?}");
        let table = queue_table(&tq, &placement(&[0, 1]), &[arrive(0, 100, 0), arrive(1, 101, 1)], &[]);
        assert!(!table.findings.iter().any(|f| f.starts_with("thread on CPU")), "{table:?}");
    }

    #[test]
    fn udp_is_steered_only_where_the_nic_hashes_it_on_ports() {
        use crate::sys::ntuple::{RXH_IP_DST, RXH_IP_SRC, RXH_L4_B_0_1, RXH_L4_B_2_3};
        let mut tq = TestQueues::plan(topology(true), None, 4, None, false).unwrap().unwrap();
        assert!(tq.steering().udp_unusable(false).unwrap().contains("does not report which fields it hashes udp4"));
        tq.udp_hash = [Some(RXH_IP_SRC | RXH_IP_DST), Some(RXH_IP_SRC | RXH_IP_DST | RXH_L4_B_0_1 | RXH_L4_B_2_3)];
        let why = tq.steering().udp_unusable(false).unwrap();
        assert!(why.contains("eth0 hashes udp4 on IP SA, IP DA only, not the ports"), "{why}");
        assert_eq!(tq.steering().udp_unusable(true), None, "udp6 hashes on ports");
        let mut no_key = TestQueues::plan(topology(false), None, 4, None, false).unwrap().unwrap();
        no_key.udp_hash = tq.udp_hash;
        assert!(no_key.steering().udp_unusable(true).unwrap().contains("does not report its RSS key"));
    }

    #[test]
    fn unreadable_key_means_no_steering_and_says_why() {
        let tq = TestQueues::plan(topology(false), None, 2, None, false).unwrap().unwrap();
        let steer = tq.steering();
        assert!(steer.unusable().unwrap().contains("does not report its RSS key"), "{:?}", steer.unusable());
        assert_eq!(
            steer.ports(2, 2, "10.77.0.1".parse().unwrap(), "10.77.0.2:5300".parse().unwrap(), |_| true),
            vec![None, None]
        );
        let xor = RssSteering { hash_function: HashFunction::Xor, ..steer };
        assert!(xor.unusable().unwrap().contains("Xor"));
        assert_eq!(join_and(&[1, 4, 9]), "1, 4 and 9");
    }
}
