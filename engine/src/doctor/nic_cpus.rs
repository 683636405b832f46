//! Which CPUs a NIC's packet work lands on: where its queue interrupts are delivered, whether
//! irqbalance moves them, and the kernel's software steering (RPS for receive, XPS for
//! transmit). The NIC itself (driver, MTU, queues, rings, offloads) is `nic.rs`.

use super::facts::{IrqAffinityFacts, IrqPlacement, IrqbalanceFacts, RpsFacts, XpsFacts};
use super::{read_trimmed, Check, Context, HostFs};
use crate::sys::nic_topology::{irq_delivery_cpus, parse_interrupts, IrqLine};

/// Whether an IRQ name is a queue's (not a device's control/config/admin interrupt).
pub(crate) fn is_queue_irq(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    !["config", "async", "ctrl", "mgmnt", "mgmt", "cmd", "admin", "-event"].iter().any(|k| n.contains(k))
}

/// The queue IRQs of `iface`: the MSI vectors of its device (or of the PCI function above a
/// virtio device), minus control interrupts, with their names from /proc/interrupts.
pub fn queue_irqs(fs: &dyn HostFs, iface: &str) -> Vec<IrqLine> {
    let base = format!("/sys/class/net/{iface}/device");
    let vectors = fs.list(&format!("{base}/msi_irqs")).or_else(|_| fs.list(&format!("{base}/../msi_irqs")));
    let Ok(vectors) = vectors else { return Vec::new() };
    let table = parse_interrupts(&fs.read("/proc/interrupts").unwrap_or_default());
    let mut irqs: Vec<IrqLine> = vectors
        .iter()
        .filter_map(|v| v.parse::<u32>().ok())
        .filter_map(|irq| table.iter().find(|l| l.irq == irq).cloned())
        .filter(|l| is_queue_irq(&l.name))
        .collect();
    irqs.sort_by_key(|l| l.irq);
    irqs
}

/// Where an IRQ is delivered, by the rule placement uses ([`irq_delivery_cpus`]).
fn irq_cpus(fs: &dyn HostFs, irq: u32) -> Option<Vec<usize>> {
    let read = |f: &str| read_trimmed(fs, &format!("/proc/irq/{irq}/{f}")).ok();
    irq_delivery_cpus(read("effective_affinity_list"), read("smp_affinity_list"))
}

pub(super) fn irq_affinity(ctx: &Context, fs: &dyn HostFs, irqs: &[IrqLine]) -> Check {
    let id = "nic.irq_affinity";
    let link = ctx.iface.as_ref().expect("checked by caller");
    if link.virtual_device {
        return Check::pass(id, format!("{}: software device, no queue interrupts", link.name));
    }
    if irqs.is_empty() {
        return Check::skip(
            id,
            format!("{}: no queue interrupts found (no msi_irqs, or /proc/interrupts unreadable)", link.name),
        );
    }
    let placed: Vec<(u32, String, Option<Vec<usize>>)> =
        irqs.iter().map(|l| (l.irq, l.name.clone(), irq_cpus(fs, l.irq))).collect();
    let facts = IrqAffinityFacts {
        interface: link.name.clone(),
        irqs: placed
            .iter()
            .map(|(irq, name, cpus)| IrqPlacement { irq: *irq, name: name.clone(), cpus: cpus.clone() })
            .collect(),
    };
    // Queues whose IRQs are each pinned to one CPU, by queue: a queue may have several IRQs
    // (virtio: input.N and output.N) that belong on the same CPU, while different queues
    // belong on different CPUs.
    let mut queue_cpu: std::collections::BTreeMap<u32, usize> = std::collections::BTreeMap::new();
    for (n, (_, name, cpus)) in placed.iter().enumerate() {
        if let Some(cpu) = cpus.as_ref().filter(|c| c.len() == 1).map(|c| c[0]) {
            queue_cpu.entry(irq_queue_index(name).unwrap_or(n as u32)).or_insert(cpu);
        }
    }
    let queues: std::collections::BTreeSet<u32> =
        placed.iter().enumerate().map(|(n, (_, name, _))| irq_queue_index(name).unwrap_or(n as u32)).collect();
    let distinct: std::collections::BTreeSet<usize> = queue_cpu.values().copied().collect();
    let unknown = placed.iter().filter(|(_, _, c)| c.is_none()).count();
    let n = irqs.len();
    let want = queues.len().min(ctx.cpus as usize);
    if distinct.len() >= want && queue_cpu.len() == queues.len() && unknown == 0 {
        return Check::pass(
            id,
            format!("{n} IRQs of {} queue(s) on {} distinct CPU(s), one per queue", queues.len(), distinct.len()),
        )
        .facts(facts);
    }
    let fix = format!(
        "scripts/tune.sh apply --iface {}   # or: echo CPU > /proc/irq/N/smp_affinity_list, queue i's IRQs on CPU i",
        link.name
    );
    Check::warn(
        id,
        format!(
            "{n} IRQs of {} queue(s): {} pinned to one CPU each, on {} distinct CPU(s){}: queues share CPUs or float",
            queues.len(),
            queue_cpu.len(),
            distinct.len(),
            if unknown > 0 { format!(", {unknown} unreadable") } else { String::new() }
        ),
    )
    .fix(fix)
    .facts(facts)
}

/// The queue number in an IRQ name: its trailing digits, before any `@pci:...` suffix
/// (`virtio2-input.3` → 3, `mlx5_comp3@pci:0000:00:04.0` → 3, `ens5-Tx-Rx-0` → 0).
pub(crate) fn irq_queue_index(name: &str) -> Option<u32> {
    let base = name.split('@').next().unwrap_or(name);
    let digits = base.len() - base.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    base[base.len() - digits..].parse().ok()
}

pub(super) fn irqbalance(fs: &dyn HostFs, virtual_device: bool) -> Check {
    let id = "nic.irqbalance";
    let running = fs
        .list("/proc")
        .unwrap_or_default()
        .iter()
        .filter(|p| p.bytes().all(|b| b.is_ascii_digit()))
        .any(|p| read_trimmed(fs, &format!("/proc/{p}/comm")).is_ok_and(|c| c == "irqbalance"));
    let facts = IrqbalanceFacts { irqbalance_running: running };
    if running && !virtual_device {
        Check::warn(id, "irqbalance is running: it moves queue IRQs away from the CPUs tuned for them")
            .fix("systemctl stop irqbalance   # scripts/tune.sh apply does this and revert restarts it")
            .facts(facts)
    } else if running {
        Check::pass(id, "irqbalance is running (no queue interrupts on this software device)").facts(facts)
    } else {
        Check::pass(id, "irqbalance not running: IRQ affinity stays as set").facts(facts)
    }
}

/// Number of CPUs in a hex CPU mask as sysfs prints it (`00000000,0000000f`); None if garbled.
pub(crate) fn mask_cpus(mask: &str) -> Option<u32> {
    let mut n = 0;
    for word in mask.trim().split(',') {
        n += u64::from_str_radix(word, 16).ok()?.count_ones();
    }
    Some(n)
}

/// (queue name, CPUs in its mask) for each `rx-N`/`tx-N` of `iface` having file `file`.
fn queue_masks(fs: &dyn HostFs, iface: &str, prefix: &str, file: &str) -> Vec<(String, Option<u32>)> {
    let dir = format!("/sys/class/net/{iface}/queues");
    fs.list(&dir)
        .unwrap_or_default()
        .into_iter()
        .filter(|q| q.starts_with(prefix))
        .filter_map(|q| {
            let text = fs.read(&format!("{dir}/{q}/{file}")).ok()?;
            Some((q, mask_cpus(&text)))
        })
        .collect()
}

fn all_cpus_mask(cpus: u32) -> String {
    let mut words = Vec::new();
    let mut left = cpus;
    while left > 0 {
        let bits = left.min(32);
        words.push(if bits == 32 { "ffffffff".to_string() } else { format!("{:x}", (1u64 << bits) - 1) });
        left -= bits;
    }
    words.reverse();
    if words.is_empty() {
        "1".into()
    } else {
        words.join(",")
    }
}

pub(super) fn rps(ctx: &Context, fs: &dyn HostFs) -> Check {
    let id = "nic.rps";
    let link = ctx.iface.as_ref().expect("checked by caller");
    let masks = queue_masks(fs, &link.name, "rx-", "rps_cpus");
    let facts = RpsFacts { interface: link.name.clone(), rps_cpus: masks.iter().cloned().collect() };
    if masks.is_empty() {
        return Check::skip(id, format!("{}: no readable rx-*/rps_cpus (kernel without RPS?)", link.name));
    }
    let spread = masks.iter().filter(|(_, n)| n.unwrap_or(0) > 0).count();
    if link.virtual_device {
        // A veth's receive work runs in the sender's context; RPS adds a second backlog and
        // an IPI (on this project's 2-vCPU veth pair: 20-30% less throughput, 30-45% more CPU
        // per GB with RPS over both CPUs).
        let state = if spread > 0 { format!("RPS on for {spread} RX queue(s)") } else { "RPS off".to_string() };
        return Check::pass(
            id,
            format!(
                "{}: software device, {state}: receive work runs on the sending CPU; RPS only adds a hop",
                link.name
            ),
        )
        .facts(facts);
    }
    if link.rx_queues >= ctx.cpus {
        return Check::pass(id, format!("{} RX queues for {} CPUs: RPS not needed", link.rx_queues, ctx.cpus))
            .facts(facts);
    }
    if spread > 0 {
        return Check::pass(id, format!("RPS spreads {spread} of {} RX queues over more CPUs", masks.len()))
            .facts(facts);
    }
    Check::warn(
        id,
        format!(
            "{} RX queue(s) for {} CPUs and RPS off: protocol processing stays on the interrupted CPU",
            link.rx_queues, ctx.cpus
        ),
    )
    .fix(format!(
        "for q in /sys/class/net/{}/queues/rx-*/rps_cpus; do echo {} > $q; done   # or scripts/tune.sh apply",
        link.name,
        all_cpus_mask(ctx.cpus)
    ))
    .facts(facts)
}

pub(super) fn xps(ctx: &Context, fs: &dyn HostFs) -> Check {
    let id = "nic.xps";
    let link = ctx.iface.as_ref().expect("checked by caller");
    if link.tx_queues <= 1 {
        return Check::pass(id, format!("{}: one TX queue, XPS does not apply", link.name));
    }
    let masks = queue_masks(fs, &link.name, "tx-", "xps_cpus");
    let facts = XpsFacts { interface: link.name.clone(), xps_cpus: masks.iter().cloned().collect() };
    if masks.is_empty() {
        return Check::skip(id, format!("{}: no readable tx-*/xps_cpus", link.name));
    }
    let mapped = masks.iter().filter(|(_, n)| n.unwrap_or(0) > 0).count();
    if mapped == masks.len() {
        return Check::pass(id, format!("every one of {} TX queues has an XPS CPU map", masks.len())).facts(facts);
    }
    Check::warn(
        id,
        format!("{mapped} of {} TX queues have an XPS map: senders on different CPUs contend for queues", masks.len()),
    )
    .fix(format!("scripts/tune.sh apply --iface {}   # maps tx-N to CPU N", link.name))
    .facts(facts)
}

#[cfg(test)]
mod tests {
    use super::super::fake::FakeFs;
    use super::super::testctx::{nic_ctx, veth_ctx};
    use super::super::Status;
    use super::*;

    /// /proc/interrupts of the test machine (2 vCPUs, virtio), trimmed.
    const INTERRUPTS: &str = "           CPU0       CPU1       
 24:          1          0  IO-APIC   5-edge      ACPI:Ged
 37:          0          0 PCI-MSIX-0000:00:03.0   0-edge      virtio2-config
 38:          0       2264 PCI-MSIX-0000:00:03.0   1-edge      virtio2-input.0
 39:       1995          0 PCI-MSIX-0000:00:03.0   2-edge      virtio2-output.0
 40:          0          0 PCI-MSIX-0000:00:04.0   0-edge      virtio3-config
NMI:          0          0   Non-maskable interrupts
LOC:     585912     612466   Local timer interrupts
ERR:          0
";

    #[test]
    fn interrupts_table() {
        let t = parse_interrupts(INTERRUPTS);
        assert_eq!(t.len(), 5, "numbered lines only");
        assert_eq!(t[2], IrqLine { irq: 38, counts: vec![0, 2264], name: "virtio2-input.0".into() });
        assert_eq!(parse_interrupts(""), vec![]);
        let garbled = "           CPU0       CPU1\n 38: x y z name\n 39: 1\n 40: 1 2 PCI ok-0\n";
        let t = parse_interrupts(garbled);
        assert_eq!(t.len(), 1, "malformed lines are skipped: {t:?}");
        assert_eq!(t[0].name, "ok-0");
    }

    #[test]
    fn queue_irq_names() {
        for q in ["virtio2-input.0", "mlx5_comp3@pci:0000:00:04.0", "gve-ntfy-blk0@pci:0000:00:04.0", "ens5-Tx-Rx-0"] {
            assert!(is_queue_irq(q), "{q}");
        }
        for c in ["virtio2-config", "mlx5_async0@pci:0000:00:04.0", "gve-mgmnt@pci:0000:00:04.0"] {
            assert!(!is_queue_irq(c), "{c}");
        }
    }

    fn virtio_fs(affinity: [&str; 2]) -> FakeFs {
        FakeFs::new(&[
            ("/proc/interrupts", INTERRUPTS),
            ("/sys/class/net/eth0/device/../msi_irqs/37", "msix"),
            ("/sys/class/net/eth0/device/../msi_irqs/38", "msix"),
            ("/sys/class/net/eth0/device/../msi_irqs/39", "msix"),
            ("/proc/irq/38/smp_affinity_list", affinity[0]),
            ("/proc/irq/39/smp_affinity_list", affinity[1]),
        ])
    }

    #[test]
    fn irq_spread() {
        let ctx = nic_ctx("virtio_net", 1, 2);
        let fs = virtio_fs(["0\n", "0\n"]);
        let irqs = queue_irqs(&fs, "eth0");
        assert_eq!(irqs.iter().map(|l| l.irq).collect::<Vec<_>>(), vec![38, 39], "config IRQ left out");
        let c = irq_affinity(&ctx, &fs, &irqs);
        assert_eq!(c.status, Status::Pass, "input.0 and output.0 are one queue: {}", c.summary);
        let fs = virtio_fs(["0-1\n", "0-1\n"]);
        let c = irq_affinity(&ctx, &fs, &irqs);
        assert_eq!(c.status, Status::Warn, "floating over both CPUs: {}", c.summary);
        let fs = virtio_fs(["0-1\n", "0-1\n"]).with("/proc/irq/38/effective_affinity_list", "1\n");
        let fs = fs.with("/proc/irq/39/effective_affinity_list", "1\n");
        assert_eq!(irq_affinity(&ctx, &fs, &irqs).status, Status::Pass, "effective affinity wins");
        let fs = virtio_fs(["0\n", "0\n"]).unreadable("/proc/irq/38/smp_affinity_list", libc::EACCES);
        let c = irq_affinity(&ctx, &fs, &irqs);
        assert!(c.summary.contains("1 unreadable"), "{}", c.summary);
        // Four mlx5 completion queues on a 4-CPU host, two of them sharing CPU 0.
        let mlx = nic_ctx("mlx5_core", 4, 4);
        let lines: Vec<IrqLine> = (0..4)
            .map(|q| IrqLine { irq: 60 + q, counts: vec![0; 4], name: format!("mlx5_comp{q}@pci:0000:00:04.0") })
            .collect();
        let pinned = |cpus: [&str; 4]| {
            let mut fs = FakeFs::default();
            for (q, c) in cpus.iter().enumerate() {
                fs = fs.with(&format!("/proc/irq/{}/smp_affinity_list", 60 + q), c);
            }
            fs
        };
        assert_eq!(irq_affinity(&mlx, &pinned(["0", "1", "2", "3"]), &lines).status, Status::Pass);
        let c = irq_affinity(&mlx, &pinned(["0", "0", "2", "3"]), &lines);
        assert_eq!(c.status, Status::Warn);
        assert!(c.summary.contains("on 3 distinct CPU(s)"), "{}", c.summary);
        let none = FakeFs::default();
        assert_eq!(irq_affinity(&ctx, &none, &queue_irqs(&none, "eth0")).status, Status::Skip);
        assert_eq!(irq_affinity(&veth_ctx(), &none, &[]).status, Status::Pass, "software device");
    }

    #[test]
    fn queue_numbers_in_irq_names() {
        assert_eq!(irq_queue_index("virtio2-input.3"), Some(3));
        assert_eq!(irq_queue_index("mlx5_comp12@pci:0000:00:04.0"), Some(12));
        assert_eq!(irq_queue_index("gve-ntfy-blk5@pci:0000:00:04.0"), Some(5));
        assert_eq!(irq_queue_index("ens5-Tx-Rx-0"), Some(0));
        assert_eq!(irq_queue_index("eth0"), Some(0), "a bare interface name: its digit");
        assert_eq!(irq_queue_index("hv_netvsc"), None);
        assert_eq!(irq_queue_index(""), None);
    }

    #[test]
    fn masks() {
        assert_eq!(mask_cpus("0\n"), Some(0));
        assert_eq!(mask_cpus("3"), Some(2));
        assert_eq!(mask_cpus("00000000,0000000f"), Some(4));
        assert_eq!(mask_cpus("zz"), None);
        assert_eq!(all_cpus_mask(2), "3");
        assert_eq!(all_cpus_mask(32), "ffffffff");
        assert_eq!(all_cpus_mask(36), "f,ffffffff");
    }

    #[test]
    fn rps_and_xps() {
        let ctx = veth_ctx();
        let fs = FakeFs::new(&[("/sys/class/net/uoda0/queues/rx-0/rps_cpus", "0\n")]);
        let c = rps(&ctx, &fs);
        assert_eq!(c.status, Status::Pass, "veth: RPS only adds a hop: {}", c.summary);
        assert!(c.summary.contains("software device, RPS off"), "{}", c.summary);
        // A single-queue NIC on 2 CPUs.
        let mut virtio = nic_ctx("virtio_net", 1, 2);
        virtio.iface.as_mut().unwrap().name = "uoda0".into();
        let c = rps(&virtio, &fs);
        assert_eq!(c.status, Status::Warn, "1 queue, 2 CPUs, RPS off");
        assert!(c.fix.unwrap().contains("echo 3 >"));
        let fs = FakeFs::new(&[("/sys/class/net/uoda0/queues/rx-0/rps_cpus", "3\n")]);
        assert_eq!(rps(&virtio, &fs).status, Status::Pass);
        let fs = FakeFs::new(&[("/sys/class/net/uoda0/queues/rx-0/rps_cpus", "bogus\n")]);
        assert_eq!(rps(&virtio, &fs).status, Status::Warn, "garbled mask counts as off");
        assert_eq!(rps(&ctx, &FakeFs::default()).status, Status::Skip);
        assert_eq!(xps(&ctx, &FakeFs::default()).status, Status::Pass, "one TX queue");
        let ctx = nic_ctx("mlx5_core", 2, 2);
        let q = "/sys/class/net/eth0/queues";
        let fs = FakeFs::new(&[(&format!("{q}/tx-0/xps_cpus"), "1\n"), (&format!("{q}/tx-1/xps_cpus"), "0\n")]);
        assert_eq!(xps(&ctx, &fs).status, Status::Warn);
        let fs = fs.with(&format!("{q}/tx-1/xps_cpus"), "2\n");
        assert_eq!(xps(&ctx, &fs).status, Status::Pass);
        assert_eq!(rps(&ctx, &FakeFs::new(&[(&format!("{q}/rx-0/rps_cpus"), "0")])).status, Status::Pass);
    }
}
