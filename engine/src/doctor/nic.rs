//! The network interface: driver, MTU, queues against CPUs, rings, offloads, its driver's
//! loss counters, and how its queues align with CPUs; where its queue interrupts land and
//! RPS/XPS are checked in `nic_cpus.rs`.
//!
//! Offloads, channels, the driver name and its statistics come from the ethtool ioctls
//! ([`super::ethtool`]); everything else is /sys and /proc.

use super::facts::{
    DriverCounterFacts, NicDriverFacts, NicMtuFacts, NicOffloadFacts, NicQueueFacts, NicRingFacts, NoInterfaceFacts,
    QueueAlignmentFacts, RssShape,
};
use super::nic_cpus::{irq_affinity, irqbalance, queue_irqs, rps, xps};
use super::{Check, Context, HostFs};

/// Drivers we know by name, with what they are (for the summary line).
const KNOWN_DRIVERS: &[(&str, &str)] = &[
    ("gve", "Google gVNIC"),
    ("ena", "AWS Elastic Network Adapter"),
    ("mlx5_core", "NVIDIA/Mellanox ConnectX"),
    ("hv_netvsc", "Hyper-V/Azure synthetic NIC"),
    ("virtio_net", "virtio-net (KVM/QEMU)"),
    ("veth", "virtual Ethernet pair (software)"),
    ("loopback", "loopback (software)"),
    ("ice", "Intel E810"),
    ("i40e", "Intel X710/XL710"),
    ("ixgbe", "Intel 82599/X540"),
    ("bnxt_en", "Broadcom NetXtreme-E"),
];

pub fn checks(ctx: &Context, fs: &dyn HostFs) -> Vec<Check> {
    let Some(link) = &ctx.iface else {
        return vec![Check::skip("nic.interface", format!("no interface examined: {}", ctx.iface_reason))
            .facts(NoInterfaceFacts { interface: () })];
    };
    let mut out = vec![driver(ctx), mtu(ctx), queues(ctx), rings(ctx), offloads(ctx), driver_counters(ctx)];
    let irqs = queue_irqs(fs, &link.name);
    out.push(irq_affinity(ctx, fs, &irqs));
    out.push(irqbalance(fs, link.virtual_device));
    out.push(rps(ctx, fs));
    out.push(xps(ctx, fs));
    out.push(queue_alignment(&link.name, crate::sys::nic_topology::NicTopology::read(&link.name).ok().as_ref()));
    out
}

/// Whether one thread per receive queue can sit on its queue's IRQ CPU, on the NIC's node, with
/// flows steered onto distinct queues: what `recv` and `send` will do (docs/placement.md).
pub(crate) fn queue_alignment(iface: &str, topo: Option<&crate::sys::nic_topology::NicTopology>) -> Check {
    use crate::sys::nic_topology::HashFunction;
    let id = "nic.queue_alignment";
    let Some(t) = topo.filter(|t| t.has_hardware_queues()) else {
        return Check::pass(id, format!("{iface}: no NIC queues with interrupts: threads placed by CPU order"));
    };
    let irq_cpu: Vec<(u32, Option<usize>)> = t.rx.iter().map(|q| (q.queue, q.irq_cpus.first().copied())).collect();
    let facts = QueueAlignmentFacts {
        interface: iface.into(),
        numa_node: t.numa_node,
        rx: t.rx.clone(),
        rss: t.rss.as_ref().map(|r| RssShape {
            hash_function: r.hash_function,
            key_bytes: r.key.len(),
            indirection_entries: r.indirection.len(),
        }),
    };
    let mut problems = Vec::new();
    let mut fixes = Vec::new();
    let mut by_cpu: std::collections::BTreeMap<usize, Vec<u32>> = std::collections::BTreeMap::new();
    for (q, cpu) in &irq_cpu {
        if let Some(c) = cpu {
            by_cpu.entry(*c).or_default().push(*q);
        }
    }
    for (cpu, queues) in by_cpu.iter().filter(|(_, q)| q.len() > 1) {
        let list: Vec<String> = queues.iter().map(u32::to_string).collect();
        problems.push(format!("rx queues {} share IRQ CPU {cpu}", list.join(",")));
    }
    if let Some(node) = t.numa_node.filter(|_| !t.node_cpus.is_empty()) {
        let off: Vec<String> = irq_cpu
            .iter()
            .filter(|(_, c)| c.is_some_and(|c| !t.node_cpus.contains(&c)))
            .map(|(q, c)| format!("queue {q} on CPU {}", c.unwrap_or_default()))
            .collect();
        if !off.is_empty() {
            problems.push(format!("IRQs off the NIC's node {node}: {}", off.join(", ")));
        }
    }
    if !problems.is_empty() {
        fixes.push(format!("scripts/tune.sh apply --iface {iface}"));
    }
    let steer = match &t.rss {
        Some(r) if r.hash_function == HashFunction::Toeplitz && !r.key.is_empty() && !r.indirection.is_empty() => {
            format!(
                "RSS Toeplitz, {}-byte key, {}-entry table: send can steer flows onto queues",
                r.key.len(),
                r.indirection.len()
            )
        }
        Some(r) if r.hash_function != HashFunction::Toeplitz => {
            problems.push(format!(
                "RSS hashes with {:?}: flows cannot be steered by source port, they land at random",
                r.hash_function
            ));
            fixes.push(format!("ethtool -X {iface} hfunc toeplitz"));
            String::new()
        }
        _ => {
            problems.push("the driver does not report its RSS key and table: flows land on queues at random".into());
            String::new()
        }
    };
    let queues = t.rx.len();
    let node = t.numa_node.map_or(String::new(), |n| format!(", NIC on node {n}"));
    if problems.is_empty() {
        Check::pass(id, format!("{iface}: {queues} rx queues, IRQs on {} distinct CPUs{node}; {steer}", by_cpu.len()))
            .facts(facts)
    } else {
        let mut check = Check::warn(id, format!("{iface}: {queues} rx queues{node}: {}", problems.join("; ")));
        if !fixes.is_empty() {
            check = check.fix(fixes.join("; "));
        }
        check.facts(facts)
    }
}

fn driver(ctx: &Context) -> Check {
    let id = "nic.driver";
    let link = ctx.iface.as_ref().expect("checked by caller");
    let facts = NicDriverFacts {
        interface: link.name.clone(),
        driver: ctx.driver().map(str::to_owned),
        virtual_device: link.virtual_device,
        speed_mbps: link.speed_mbps,
    };
    match ctx.driver() {
        Some(d) => {
            let what = KNOWN_DRIVERS.iter().find(|(n, _)| *n == d).map_or("", |(_, w)| w);
            let speed = link.speed_mbps.map(|s| format!(", link {} Gbit/s", f64::from(s) / 1e3)).unwrap_or_default();
            let what = if what.is_empty() { String::new() } else { format!(": {what}") };
            Check::pass(id, format!("{}: driver {d}{what}{speed}", link.name)).facts(facts)
        }
        None => Check::warn(id, format!("{}: driver unknown (no device/driver link, no ethtool answer)", link.name))
            .fix(format!("ethtool -i {}", link.name))
            .facts(facts),
    }
}

fn mtu(ctx: &Context) -> Check {
    let id = "nic.mtu";
    let link = ctx.iface.as_ref().expect("checked by caller");
    let facts = NicMtuFacts { interface: link.name.clone(), mtu: link.mtu };
    use crate::sys::hostinfo::Cloud;
    let (want, why) = match ctx.cloud {
        Some(Cloud::Gcp) => (8896, "GCP VPCs carry up to 8896"),
        Some(Cloud::Aws) => (9001, "AWS carries 9001 inside a VPC"),
        _ => (0, ""),
    };
    if link.mtu < want {
        let fix = match ctx.cloud {
            Some(Cloud::Gcp) => format!(
                "gcloud compute networks update NETWORK --mtu=8896   # then, on both VMs: ip link set dev {} mtu 8896",
                link.name
            ),
            _ => format!("ip link set dev {} mtu {want}   # on both hosts", link.name),
        };
        return Check::warn(id, format!("{} MTU {}: {why}; bigger frames cost less CPU per byte", link.name, link.mtu))
            .fix(fix)
            .facts(facts);
    }
    let note = if link.mtu >= 8000 {
        "jumbo frames"
    } else {
        "standard frames (jumbo frames cut per-packet cost where the whole path carries them)"
    };
    Check::pass(id, format!("{} MTU {}: {note}", link.name, link.mtu)).facts(facts)
}

fn queues(ctx: &Context) -> Check {
    let id = "nic.queues";
    let link = ctx.iface.as_ref().expect("checked by caller");
    let ch = ctx.channels;
    let facts = NicQueueFacts {
        interface: link.name.clone(),
        rx_queues: link.rx_queues,
        tx_queues: link.tx_queues,
        cpus: ctx.cpus,
        channels: ch,
    };
    let active = link.rx_queues.min(link.tx_queues).max(ch.map_or(0, |c| c.combined));
    let summary = format!("{} RX / {} TX queues for {} CPUs", link.rx_queues, link.tx_queues, ctx.cpus);
    if link.virtual_device {
        return Check::pass(id, format!("{summary} (software device: no interrupts to spread)")).facts(facts);
    }
    let max = ch.map_or(0, |c| c.max_combined.max(c.max_rx.min(c.max_tx)));
    let reachable = if max > 0 { ctx.cpus.min(max) } else { ctx.cpus };
    if active >= reachable {
        return Check::pass(id, format!("{summary}: one per CPU where the NIC allows")).facts(facts);
    }
    Check::warn(id, format!("{summary}: receive work lands on {active} CPU(s); the NIC allows {max}"))
        .fix(format!("ethtool -L {} combined {reachable}", link.name))
        .facts(facts)
}

fn rings(ctx: &Context) -> Check {
    let id = "nic.rings";
    let link = ctx.iface.as_ref().expect("checked by caller");
    let r = match &ctx.rings {
        Ok(r) => r,
        Err(e) => return Check::skip(id, format!("{}: no ring parameters ({e})", link.name)),
    };
    let facts = NicRingFacts { interface: link.name.clone(), rings: *r };
    let show = |v: Option<u32>| v.map_or("?".to_string(), |v| v.to_string());
    let summary = format!(
        "{}: RX ring {} of {}, TX ring {} of {}",
        link.name,
        show(r.rx),
        show(r.rx_max),
        show(r.tx),
        show(r.tx_max)
    );
    let short = |cur: Option<u32>, max: Option<u32>| matches!((cur, max), (Some(c), Some(m)) if c < m);
    if link.virtual_device || !(short(r.rx, r.rx_max) || short(r.tx, r.tx_max)) {
        return Check::pass(id, summary).facts(facts);
    }
    Check::warn(id, format!("{summary}: short rings overflow on bursts (rx_missed, drops)"))
        .fix(format!(
            "ethtool -G {} rx {} tx {}   # or scripts/tune.sh apply",
            link.name,
            show(r.rx_max),
            show(r.tx_max)
        ))
        .facts(facts)
}

fn driver_counters(ctx: &Context) -> Check {
    let id = "nic.driver_counters";
    let link = ctx.iface.as_ref().expect("checked by caller");
    let Some(stats) = &ctx.driver_stats else {
        return Check::skip(id, format!("{}: the driver keeps no statistics of its own (ethtool -S)", link.name));
    };
    let losses: Vec<&(String, u64)> = stats.iter().filter(|(n, v)| *v > 0 && is_loss_counter(n)).collect();
    let facts = DriverCounterFacts {
        interface: link.name.clone(),
        statistics: stats.len(),
        loss_counters: losses.iter().map(|(n, v)| (n.clone(), *v)).collect(),
    };
    if losses.is_empty() {
        return Check::pass(
            id,
            format!(
                "{}: no drop, miss or allowance counter above 0 among {} driver statistics",
                link.name,
                stats.len()
            ),
        )
        .facts(facts);
    }
    let shown: Vec<String> = losses.iter().take(4).map(|(n, v)| format!("{n} {v}")).collect();
    let more = if losses.len() > 4 { format!(" and {} more", losses.len() - 4) } else { String::new() };
    let aws = losses.iter().any(|(n, _)| n.contains("allowance_exceeded"));
    let why = if aws {
        "the instance exceeded its AWS network allowance (bandwidth, PPS or connections)"
    } else {
        "the NIC or driver lost packets"
    };
    Check::warn(id, format!("{}: {}{more} since boot: {why}", link.name, shown.join(", ")))
        .fix(format!("watch them across a test: ethtool -S {} | grep -E 'drop|miss|exceeded'   # rings: ethtool -G; AWS: a larger instance or fewer flows per ENA queue", link.name))
        .facts(facts)
}

fn offloads(ctx: &Context) -> Check {
    let id = "nic.offloads";
    let link = ctx.iface.as_ref().expect("checked by caller");
    let Some(o) = &ctx.offloads else {
        return Check::skip(id, format!("{}: the driver answers no ethtool offload queries", link.name));
    };
    let facts = NicOffloadFacts { interface: link.name.clone(), offloads: o.clone() };
    let show = |v: Option<bool>| match v {
        Some(true) => "on",
        Some(false) => "off",
        None => "n/a",
    };
    let summary = format!(
        "{}: TSO {}, GSO {}, GRO {}, LRO {}, rx-checksum {}",
        link.name,
        show(o.tso),
        show(o.gso),
        show(o.gro),
        show(o.lro),
        show(o.rx_checksum)
    );
    // A software device (veth) hands the sender's TSO/GSO super-packets to the receiver
    // whole, so GRO has nothing to merge; turning it on there only adds a NAPI pass (on this
    // project's 2-vCPU veth pair: 5-9% less throughput, 4-10% more CPU per GB).
    let gro_matters = !link.virtual_device;
    let off: Vec<&str> = [("tso", o.tso), ("gso", o.gso), ("gro", o.gro.filter(|_| gro_matters))]
        .iter()
        .filter(|(_, v)| *v == Some(false))
        .map(|(n, _)| *n)
        .collect();
    if off.is_empty() {
        let note = if !gro_matters && o.gro == Some(false) {
            " (GRO off is right on a software device: packets arrive already merged)"
        } else {
            ""
        };
        return Check::pass(id, format!("{summary}{note}")).facts(facts);
    }
    let fix =
        format!("ethtool -K {} {}", link.name, off.iter().map(|n| format!("{n} on")).collect::<Vec<_>>().join(" "));
    Check::warn(id, format!("{summary}: every packet crosses the stack alone without {}", off.join("/").to_uppercase()))
        .fix(fix)
        .facts(facts)
}

/// Whether a driver statistic counts packets lost or refused (drops, misses, a cloud's
/// allowance), as opposed to traffic or configuration.
pub(crate) fn is_loss_counter(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    ["drop", "discard", "miss", "allowance_exceeded", "no_buf", "nobuf", "fifo_err", "over_err", "timeout"]
        .iter()
        .any(|k| n.contains(k))
}

#[cfg(test)]
mod tests {
    use super::super::testctx::{nic_ctx, veth_ctx};
    use super::super::{Facts, Status};
    use super::*;

    #[test]
    fn queue_alignment_names_shared_irq_cpus_and_unsteerable_rss() {
        use crate::sys::nic_topology::{HashFunction, NicTopology, QueueInfo, Rss};
        let queue = |q: u32, cpu: usize| QueueInfo {
            queue: q,
            napi_id: None,
            irq: Some(40 + q),
            irq_cpus: vec![cpu],
            xps_cpus: vec![],
        };
        let mut t = NicTopology {
            iface: "eth0".into(),
            driver: Some("gve".into()),
            numa_node: Some(1),
            node_cpus: vec![2, 3],
            rx: vec![queue(0, 2), queue(1, 3)],
            tx: vec![],
            rss: Some(Rss { hash_function: HashFunction::Toeplitz, key: vec![1; 40], indirection: vec![0, 1] }),
            notes: vec![],
        };
        let ok = queue_alignment("eth0", Some(&t));
        assert_eq!(ok.status, Status::Pass, "{}", ok.summary);
        assert!(ok.summary.contains("send can steer flows"), "{}", ok.summary);
        t.rx[1].irq_cpus = vec![2];
        t.rx.push(queue(2, 0));
        t.rss.as_mut().unwrap().hash_function = HashFunction::Xor;
        let bad = queue_alignment("eth0", Some(&t));
        assert_eq!(bad.status, Status::Warn);
        for part in
            ["rx queues 0,1 share IRQ CPU 2", "IRQs off the NIC's node 1: queue 2 on CPU 0", "RSS hashes with Xor"]
        {
            assert!(bad.summary.contains(part), "{part}: {}", bad.summary);
        }
        assert!(bad.fix.as_deref().unwrap_or_default().contains("ethtool -X eth0 hfunc toeplitz"));
        assert_eq!(queue_alignment("veth0", None).status, Status::Pass, "no queues: nothing to align");
    }

    #[test]
    fn driver_mtu_queues_offloads() {
        let ctx = veth_ctx();
        let d = driver(&ctx);
        assert!(d.summary.contains("driver veth"), "{}", d.summary);
        assert_eq!(mtu(&ctx).status, Status::Pass);
        assert!(mtu(&ctx).summary.contains("MTU 9000"));
        let q = queues(&ctx);
        let Some(Facts::NicQueues(f)) = &q.facts else { panic!("{:?}", q.facts) };
        assert_eq!((q.status, f.rx_queues), (Status::Pass, 1));
        let o = offloads(&ctx);
        assert_eq!(o.status, Status::Pass, "GRO off is right on veth: {}", o.summary);
        assert!(o.summary.contains("packets arrive already merged"), "{}", o.summary);
        let mut nic = nic_ctx("mlx5_core", 8, 8);
        nic.offloads = ctx.offloads.clone();
        let o = offloads(&nic);
        assert_eq!(o.status, Status::Warn, "GRO off on a NIC");
        assert_eq!(o.fix.as_deref(), Some("ethtool -K eth0 gro on"));
        let mut no_gso = veth_ctx();
        no_gso.offloads.as_mut().unwrap().gso = Some(false);
        assert_eq!(offloads(&no_gso).fix.as_deref(), Some("ethtool -K uoda0 gso on"), "GSO matters on veth too");

        let mut gcp = nic_ctx("gve", 4, 16);
        gcp.cloud = Some(crate::sys::hostinfo::Cloud::Gcp);
        let m = mtu(&gcp);
        assert_eq!(m.status, Status::Warn);
        assert!(m.fix.unwrap().contains("--mtu=8896"));
        let q = queues(&gcp);
        assert_eq!(q.status, Status::Warn, "{}", q.summary);
        assert_eq!(q.fix.as_deref(), Some("ethtool -L eth0 combined 16"));
        assert_eq!(queues(&nic_ctx("gve", 16, 16)).status, Status::Pass);
        let mut unknown = nic_ctx("x", 1, 1);
        unknown.ethtool_driver = None;
        unknown.iface.as_mut().unwrap().driver = None;
        assert_eq!(driver(&unknown).status, Status::Warn);
        unknown.offloads = None;
        assert_eq!(offloads(&unknown).status, Status::Skip);
    }

    #[test]
    fn ring_sizes() {
        assert_eq!(rings(&veth_ctx()).status, Status::Skip, "veth has no rings");
        let mlx = nic_ctx("mlx5_core", 8, 8);
        let r = rings(&mlx);
        assert_eq!(r.status, Status::Warn);
        assert_eq!(r.fix.as_deref(), Some("ethtool -G eth0 rx 8192 tx 8192   # or scripts/tune.sh apply"));
        let mut full = nic_ctx("mlx5_core", 8, 8);
        full.rings = Ok(super::super::ethnl::Rings {
            rx: Some(8192),
            rx_max: Some(8192),
            tx: Some(8192),
            tx_max: Some(8192),
            header_split: super::super::ethnl::HeaderSplit::Enabled,
        });
        assert_eq!(rings(&full).status, Status::Pass);
        let mut none = nic_ctx("x", 1, 1);
        none.rings = Err("Operation not supported".into());
        assert_eq!(rings(&none).status, Status::Skip);
    }

    #[test]
    fn loss_counters() {
        assert!(is_loss_counter("rx_queue_0_drops") && is_loss_counter("pps_allowance_exceeded"));
        assert!(
            is_loss_counter("rx_missed_errors") && !is_loss_counter("rx_packets") && !is_loss_counter("peer_ifindex")
        );

        let mut ctx = nic_ctx("ena", 8, 8);
        let names = ["peer_ifindex", "rx_queue_0_drops", "bw_out_allowance_exceeded"].map(String::from);
        ctx.driver_stats = Some(names.into_iter().zip([7, 0, 1234]).collect());
        let c = driver_counters(&ctx);
        assert_eq!(c.status, Status::Warn);
        assert!(c.summary.contains("bw_out_allowance_exceeded 1234") && c.summary.contains("AWS"), "{}", c.summary);
        let Some(Facts::DriverCounters(f)) = &c.facts else { panic!("{:?}", c.facts) };
        assert_eq!(f.statistics, 3);
        ctx.driver_stats = Some(vec![("rx_queue_0_drops".into(), 0), ("peer_ifindex".into(), 7)]);
        assert_eq!(driver_counters(&ctx).status, Status::Pass);
        ctx.driver_stats = None;
        assert_eq!(driver_counters(&ctx).status, Status::Skip);
    }
}
