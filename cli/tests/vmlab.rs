//! The VM lab (scripts/vmlab.sh): two QEMU guests whose links are a real NIC driver, virtio_net
//! with MSI-X interrupts: lab0 with two queue pairs, lab1 with four and RSS (guest b's on NUMA
//! node 1, for steering and placement). What a veth pair can only refuse or parse is run
//! here for real, and every figure uringbench gives is checked against the kernel's own
//! readback in the same guest (ethtool, /proc/interrupts, /proc/irq, sysfs, bpftool).
//!
//! `scripts/vmlab.sh run` boots the lab and runs this target with URINGBENCH_VMLAB_REQUIRED=1;
//! without the lab up, each test is recorded as skipped with the reason (scripts/test.sh counts
//! it apart from the passes), and fails when the lab was required. Guest a (10.98.0.11) sends, guest b (10.98.0.12) receives; b runs the packaged
//! uringbench-recv.service the provisioning enabled.

mod common;

use common::{skip, u64_at, Lacking};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

const B_ADDR: &str = "10.98.0.12";
const NIC: &str = "lab0";
const QUEUES: usize = 2;

/// The guests are shared: one test at a time.
static LAB: Mutex<()> = Mutex::new(());

struct Lab {
    _guard: MutexGuard<'static, ()>,
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/vmlab.sh")
}

/// The lab, or None (a skip recorded, see `common::skip`) when it is not up and not required.
fn lab() -> Option<Lab> {
    let guard = LAB.lock().unwrap_or_else(|p| p.into_inner());
    let status = Command::new("bash").arg(script()).arg("status").output();
    let up = status.as_ref().is_ok_and(|o| o.status.success());
    if !up {
        let why = match &status {
            Ok(o) => String::from_utf8_lossy(&o.stdout).trim().to_string() + &String::from_utf8_lossy(&o.stderr),
            Err(e) => e.to_string(),
        };
        assert!(std::env::var_os("URINGBENCH_VMLAB_REQUIRED").is_none(), "the VM lab is required but not up: {why}");
        skip(Lacking::VmLab, &format!("the VM lab is not up ({why}); run scripts/vmlab.sh run"));
        return None;
    }
    Some(Lab { _guard: guard })
}

impl Lab {
    /// `cmd` (a shell command line) in guest `g`, killed after `limit`.
    fn sh(&self, g: &str, cmd: &str, limit: Duration) -> Output {
        let mut c = Command::new("timeout");
        c.args(["-k", "5", &limit.as_secs().to_string(), "bash"]).arg(script()).args(["ssh", g, cmd]);
        let out = c.output().expect("run vmlab.sh ssh");
        assert_ne!(out.status.code(), Some(124), "guest {g}: '{cmd}' did not finish within {limit:?}");
        out
    }

    /// stdout of `cmd` in guest `g`, which must succeed.
    fn ok(&self, g: &str, cmd: &str) -> String {
        let out = self.sh(g, cmd, Duration::from_secs(120));
        assert!(
            out.status.success(),
            "guest {g}: '{cmd}' exited {:?}: {}{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn json(&self, g: &str, cmd: &str) -> serde_json::Value {
        let text = self.ok(g, cmd);
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("guest {g}: '{cmd}' printed no JSON ({e}): {text}"))
    }

    /// Starts `uringbench recv --once ARGS` in guest b in the background (stdout, stderr and
    /// exit status in /tmp/NAME.out, .err, .rc) and waits until it listens on `port`.
    fn spawn_recv(&self, name: &str, port: u16, args: &str) {
        self.ok(
            "b",
            &format!(
                "rm -f /tmp/{name}.*; setsid sh -c 'timeout 120 uringbench recv --once -p {port} {args} \
                 >/tmp/{name}.out 2>/tmp/{name}.err; echo $? >/tmp/{name}.rc' </dev/null >/dev/null 2>&1 & \
                 for i in $(seq 300); do ss -Hltn sport = :{port} | grep -q . && exit 0; sleep 0.1; done; \
                 cat /tmp/{name}.err; exit 1"
            ),
        );
    }

    /// Waits (30 s at most) for the background recv NAME to end: its exit status and stderr.
    fn finish_recv(&self, name: &str) -> (i32, String) {
        let text = self.ok(
            "b",
            &format!(
                "for i in $(seq 300); do [ -s /tmp/{name}.rc ] && break; sleep 0.1; done; \
                 cat /tmp/{name}.rc 2>/dev/null || echo none; cat /tmp/{name}.err"
            ),
        );
        let (rc, err) = text.split_once('\n').unwrap_or((text.as_str(), ""));
        let rc = rc.trim().parse().unwrap_or_else(|_| panic!("recv {name} did not end after its test: {text}"));
        (rc, err.to_string())
    }
}

/// Splits the output of commands joined by `echo @@` into their outputs.
fn sections(text: &str) -> Vec<String> {
    text.split("@@\n").map(str::to_owned).collect()
}

/// `ethtool` output's "Key: value" lines after `after` (e.g. "Current hardware settings").
fn ethtool_values(text: &str, after: &str) -> BTreeMap<String, String> {
    text.split(after)
        .nth(1)
        .unwrap_or_else(|| panic!("no '{after}' in {text}"))
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .take_while(|(k, _)| !k.starts_with("Pre-set"))
        .collect()
}

/// `ethtool -S` as name -> value.
fn ethtool_stats(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .filter_map(|(k, v)| Some((k.trim().to_string(), v.trim().parse().ok()?)))
        .collect()
}

/// The queue IRQs of lab0 in /proc/interrupts, by their names (virtioN-input.Q,
/// virtioN-output.Q), N from the device link: irq -> (name, interrupts on all CPUs).
fn queue_irqs(interrupts: &str, virtio: &str) -> BTreeMap<u32, (String, u64)> {
    let cpus = interrupts.lines().next().unwrap().split_whitespace().count();
    interrupts
        .lines()
        .skip(1)
        .filter_map(|l| {
            let (irq, rest) = l.trim_start().split_once(':')?;
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let name = fields.last()?.to_string();
            let ours = name.starts_with(&format!("{virtio}-input.")) || name.starts_with(&format!("{virtio}-output."));
            let count = fields.get(..cpus)?.iter().map(|f| f.parse::<u64>().unwrap_or(0)).sum();
            let irq: u32 = irq.trim().parse().ok()?;
            ours.then_some((irq, (name, count)))
        })
        .collect()
}

fn check<'a>(doc: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    doc["checks"].as_array().expect("checks[]").iter().find(|c| c["id"] == id).unwrap_or_else(|| panic!("no {id}"))
}

/// Raw readbacks of lab0 in one guest, in one ssh round trip.
const READBACK: &str = "ethtool -i lab0; echo @@; ethtool -l lab0; echo @@; ethtool -g lab0; echo @@; \
    ethtool -k lab0; echo @@; ethtool -S lab0; echo @@; cat /proc/interrupts; echo @@; \
    basename $(readlink /sys/class/net/lab0/device); echo @@; ls /sys/class/net/lab0/queues; echo @@; \
    for f in /proc/irq/*/effective_affinity_list; do echo \"$f $(cat $f)\"; done";

#[test]
fn doctor_reads_virtio_net_as_ethtool_and_proc_interrupts_do() {
    let Some(lab) = lab() else { return };
    let doc = lab.json("a", &format!("uringbench doctor --target {B_ADDR} -J"));
    let raw = sections(&lab.ok("a", READBACK));
    let (info, channels, rings, features, stats, interrupts, virtio, queues, affinity) =
        (&raw[0], &raw[1], &raw[2], &raw[3], &raw[4], &raw[5], raw[6].trim(), &raw[7], &raw[8]);

    assert_eq!(doc["interface"]["name"], NIC, "the route to b is lab0: {}", doc["interface"]);
    let driver = info.lines().find_map(|l| l.strip_prefix("driver: ")).expect("ethtool -i driver");
    assert_eq!(driver, "virtio_net");
    assert_eq!(check(&doc, "nic.driver")["facts"]["driver"], driver);
    assert_eq!(check(&doc, "nic.driver")["facts"]["virtual_device"], false, "a PCI device, not software");

    let q = &check(&doc, "nic.queues")["facts"];
    let count = |p: &str| queues.split_whitespace().filter(|n| n.starts_with(p)).count() as u64;
    assert_eq!(q["rx_queues"].as_u64(), Some(count("rx-")), "{queues}");
    assert_eq!(q["tx_queues"].as_u64(), Some(count("tx-")), "{queues}");
    let cur = ethtool_values(channels, "Current hardware settings");
    let max = ethtool_values(channels, "Pre-set maximums");
    assert_eq!(q["channels"]["combined"].as_u64().map(|v| v.to_string()), Some(cur["Combined"].clone()));
    assert_eq!(q["channels"]["max_combined"].as_u64().map(|v| v.to_string()), Some(max["Combined"].clone()));
    assert_eq!(q["channels"]["combined"].as_u64(), Some(QUEUES as u64), "the lab's {QUEUES} queue pairs");
    assert_eq!(check(&doc, "nic.queues")["status"], "pass");

    let r = &check(&doc, "nic.rings")["facts"]["rings"];
    let (cur, max) = (ethtool_values(rings, "Current hardware settings"), ethtool_values(rings, "Pre-set maximums"));
    for (key, table, name) in [("rx", &cur, "RX"), ("tx", &cur, "TX"), ("rx_max", &max, "RX"), ("tx_max", &max, "TX")] {
        assert_eq!(r[key].as_u64().map(|v| v.to_string()).as_ref(), table.get(name), "ring {key}: {rings}");
    }

    let o = &check(&doc, "nic.offloads")["facts"]["offloads"];
    let feature = |name: &str| {
        let line = features.lines().find(|l| l.starts_with(&format!("{name}:"))).unwrap_or_else(|| panic!("{name}"));
        line.split_whitespace().nth(1) == Some("on")
    };
    for (key, name) in [
        ("tso", "tcp-segmentation-offload"),
        ("gso", "generic-segmentation-offload"),
        ("gro", "generic-receive-offload"),
        ("lro", "large-receive-offload"),
        ("rx_checksum", "rx-checksumming"),
    ] {
        assert_eq!(o[key].as_bool(), Some(feature(name)), "{key} as ethtool -k says");
    }

    let counters = ethtool_stats(stats);
    assert_eq!(
        check(&doc, "nic.driver_counters")["facts"]["statistics"].as_u64(),
        Some(counters.len() as u64),
        "as many statistics as ethtool -S lists"
    );

    // IRQs: exactly the queues' MSI-X vectors (input and output per queue pair, no config
    // vector), each where /proc/irq says it is delivered.
    let irqs = queue_irqs(interrupts, virtio);
    assert_eq!(irqs.len(), 2 * QUEUES, "an input and an output vector per queue pair: {interrupts}");
    let effective: BTreeMap<u32, String> = affinity
        .lines()
        .filter_map(|l| {
            let (path, cpus) = l.split_once(' ')?;
            Some((path.split('/').nth(3)?.parse().ok()?, cpus.trim().to_string()))
        })
        .collect();
    let reported = check(&doc, "nic.irq_affinity")["facts"]["irqs"].as_array().expect("irqs").clone();
    assert_eq!(reported.len(), irqs.len(), "{reported:?}");
    for entry in &reported {
        let irq = entry["irq"].as_u64().unwrap() as u32;
        let (name, _) = irqs.get(&irq).unwrap_or_else(|| panic!("IRQ {irq} is not a lab0 queue vector: {interrupts}"));
        assert_eq!(entry["name"], name.as_str());
        let cpus: Vec<usize> = entry["cpus"].as_array().unwrap().iter().map(|c| c.as_u64().unwrap() as usize).collect();
        assert_eq!(cpus, uringbench::units::parse_cpu_list(&effective[&irq]).unwrap(), "IRQ {irq} effective affinity");
    }
    assert_eq!(check(&doc, "path.reach")["facts"]["reach"], "listening", "b's uringbench-recv.service answers");
    assert_eq!(doc["summary"]["fail"].as_u64(), Some(0), "nothing fails in the lab: {}", doc["summary"]);
}

/// Everything tune.sh may touch on lab0, read in one round trip.
const TUNABLES: &str = "ethtool -l lab0 | tail -n 5; ethtool -g lab0 | sed -n '/Current/,$p'; \
    ethtool -k lab0 | grep -v fixed; \
    for q in /sys/class/net/lab0/queues/*; do for f in rps_cpus xps_cpus; do [ -e $q/$f ] && echo \"$q/$f $(cat $q/$f)\"; done; done; \
    for irq in $(ls /sys/class/net/lab0/device/../msi_irqs); do echo \"irq $irq $(cat /proc/irq/$irq/smp_affinity_list)\"; done; \
    sysctl net.core.rmem_max net.core.wmem_max net.ipv4.tcp_rmem net.ipv4.tcp_wmem net.core.netdev_max_backlog";

/// One tune.sh round on guest a: `detune` (as an untuned host might be), then apply and
/// revert. The settings before apply, after apply and after revert, apply's output and the
/// state file.
struct TuneRound {
    before: String,
    tuned: String,
    after: String,
    apply: String,
    recorded: String,
}

fn tune_round(lab: &Lab, detune: &str) -> TuneRound {
    let state = "/tmp/vmlab-tune.state";
    lab.ok("a", detune);
    let before = lab.ok("a", TUNABLES);
    let apply =
        lab.ok("a", &format!("rm -f {state}; bash /vagrant/scripts/tune.sh apply --iface lab0 --state {state}"));
    let tuned = lab.ok("a", TUNABLES);
    let recorded = lab.ok("a", &format!("cat {state}"));
    lab.ok("a", &format!("bash /vagrant/scripts/tune.sh revert --state {state}"));
    let after = lab.ok("a", TUNABLES);
    TuneRound { before, tuned, after, apply, recorded }
}

/// The queue IRQs' CPU lists in a TUNABLES readback.
fn irq_cpus(tunables: &str) -> std::collections::BTreeSet<String> {
    tunables
        .lines()
        .filter(|l| l.starts_with("irq "))
        .filter_map(|l| l.split_whitespace().nth(2))
        .map(str::to_owned)
        .collect()
}

#[test]
fn tune_apply_then_revert_on_virtio_net_leaves_every_value_as_it_was() {
    let Some(lab) = lab() else { return };
    let original = lab.ok("a", TUNABLES);
    let pin_all_to_cpu0 =
        "for irq in $(ls /sys/class/net/lab0/device/../msi_irqs); do echo 0 >/proc/irq/$irq/smp_affinity_list; done; \
         for q in /sys/class/net/lab0/queues/tx-*; do echo 0 >$q/xps_cpus; done";
    // Round 1: one queue pair in use, short rings, GSO off, every IRQ on CPU 0. apply raises
    // channels and rings and turns GSO on; virtio_net itself re-spreads IRQs and XPS when the
    // channel count changes, which revert must undo too.
    let one = tune_round(&lab, &format!("ethtool -L lab0 combined 1 && ethtool -G lab0 rx 128 tx 128 && ethtool -K lab0 gso off && {pin_all_to_cpu0}"));
    // Round 2: all queue pairs, every IRQ and XPS map on CPU 0: apply spreads them itself.
    let two = tune_round(&lab, &format!("ethtool -L lab0 combined {QUEUES} && {pin_all_to_cpu0}"));
    // Put the lab back as it booted for the tests after this one, whatever is asserted below.
    let mut restore =
        format!("ethtool -L lab0 combined {QUEUES}; ethtool -G lab0 rx 256 tx 256; ethtool -K lab0 gso on; ");
    for l in original.lines() {
        match l.split_whitespace().collect::<Vec<_>>()[..] {
            ["irq", irq, cpus] => restore += &format!("echo {cpus} >/proc/irq/{irq}/smp_affinity_list; "),
            [path, mask] if path.starts_with("/sys/") => restore += &format!("echo {mask} >{path}; "),
            _ => {}
        }
    }
    lab.ok("a", &(restore + "true"));
    let back = lab.ok("a", TUNABLES);

    let apply = &one.apply;
    assert!(apply.contains(&format!("ethtool -L lab0 combined {QUEUES} (was 1)")), "channels raised: {apply}");
    assert!(apply.contains("ethtool -G lab0 rx 256 tx 256 (was rx 128 tx 128)"), "rings raised: {apply}");
    assert!(apply.contains("ethtool -K lab0 gso on (was off)"), "GSO on: {apply}");
    assert!(one.tuned.contains(&format!("Combined:\t{QUEUES}")), "{}", one.tuned);
    assert!(one.tuned.contains("generic-segmentation-offload: on"), "{}", one.tuned);
    assert_eq!(irq_cpus(&one.before).len(), 1, "all on CPU 0 before: {}", one.before);
    assert!(irq_cpus(&one.tuned).len() >= 2, "IRQs spread after apply: {}", one.tuned);
    for kind in [
        "ethtool-l\tlab0\tcombined 1",
        // One line per ring parameter (the settings journal of `uringbench settings`).
        "ethtool-g\tlab0\trx 128",
        "ethtool-g\tlab0\ttx 128",
        "ethtool-k\tlab0\tgso off",
        "smp_affinity_list\t0",
    ] {
        assert!(one.recorded.contains(kind), "the state records {kind:?}: {}", one.recorded);
    }
    assert_eq!(one.after, one.before, "revert restores every value of round 1: {apply}");

    assert!(two.apply.contains("smp_affinity_list: 0 -> 1"), "apply moves queue 1's IRQs to CPU 1: {}", two.apply);
    assert!(two.apply.contains("xps_cpus: 0 -> "), "apply sets XPS: {}", two.apply);
    assert!(irq_cpus(&two.tuned).len() >= 2, "{}", two.tuned);
    assert_ne!(two.tuned, two.before);
    assert_eq!(two.after, two.before, "revert restores every value of round 2: {}", two.apply);
    assert_eq!(back, original, "the lab is as it booted again, for the tests after this one");
}

#[test]
fn tcp_stream_over_virtio_is_byte_exact_and_both_nic_queues_carry_it() {
    let Some(lab) = lab() else { return };
    let snapshot = |g: &str| {
        let raw = sections(&lab.ok(g, READBACK));
        (ethtool_stats(&raw[4]), queue_irqs(&raw[5], raw[6].trim()))
    };
    let (a0, _) = snapshot("a");
    let (b0, b_irq0) = snapshot("b");
    // b's receiver is the packaged service the provisioning started.
    let doc = lab.json("a", &format!("uringbench send -c {B_ADDR} -P 2 -t 3s -J"));
    let (a1, _) = snapshot("a");
    let (b1, b_irq1) = snapshot("b");

    let sent = u64_at(&doc, "/sum/sender/total_bytes");
    assert!(sent > 1_000_000, "a 3 s stream over virtio moves megabytes even emulated: {sent}");
    assert_eq!(u64_at(&doc, "/sum/receiver/total_bytes"), sent, "byte-exact: {}", doc["sum"]);
    let queues = doc["queues"].as_array().expect("queues[]");
    assert_eq!(queues.len(), 2);
    for q in queues {
        assert!(u64_at(q, "/receiver/bytes") > 0, "every uringbench queue carried bytes: {q}");
    }
    // The NIC side: both TX queues of a and both RX queues of b were used (the driver's
    // per-queue counters and the per-queue interrupt vectors).
    // A counter virtio_net does not print is a failure, not zero (0 drops would pass vacuously).
    let delta = |before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>, k: &str| {
        let read = |m: &BTreeMap<String, u64>| *m.get(k).unwrap_or_else(|| panic!("ethtool -S lab0 has no {k}: {m:?}"));
        read(after) - read(before)
    };
    // The tap picks b's receive queue for a flow from the queue b last sent it on (its ACKs):
    // the receiver's threads, one per queue, send through their own queue pairs (XPS), so each
    // pulls its flow to its queue. The receiver's placement and hand-off say where they were.
    let receiver = format!("{} / {}", doc["receiver"]["placement"], doc["receiver"]["path"]);
    let xps = lab.ok("b", "cat /sys/class/net/lab0/queues/tx-0/xps_cpus /sys/class/net/lab0/queues/tx-1/xps_cpus");
    for (q, mask) in xps.split_whitespace().enumerate() {
        let mask = u64::from_str_radix(&mask.replace(',', ""), 16).expect("an XPS mask");
        let cpu = receiver
            .split(&format!("rx {q}→CPU "))
            .nth(1)
            .and_then(|t| t.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|c| c.parse::<u32>().ok())
            .unwrap_or_else(|| panic!("the receiver names rx {q}'s thread CPU: {receiver}"));
        assert!(mask >> cpu & 1 == 1, "rx {q}'s thread (CPU {cpu}) sends through tx-{q} (XPS {mask:#x}): {receiver}");
    }
    for q in 0..QUEUES {
        let tx = delta(&a0, &a1, &format!("tx{q}_kicks"));
        let rx = delta(&b0, &b1, &format!("rx{q}_kicks"));
        assert!(tx > 0, "a transmitted on NIC queue {q}: tx{q}_kicks +{tx}");
        assert!(rx > 0, "b refilled NIC queue {q} after receiving: rx{q}_kicks +{rx}; receiver: {receiver}");
        let input = |irqs: &BTreeMap<u32, (String, u64)>| {
            irqs.values().find(|(n, _)| n.ends_with(&format!("-input.{q}"))).map_or(0, |(_, c)| *c)
        };
        assert!(input(&b_irq1) > input(&b_irq0), "b's input.{q} vector fired");
    }
    assert_eq!(delta(&b0, &b1, "rx_drops"), 0, "the driver dropped nothing");
}

#[test]
fn sending_threads_follow_the_xps_map_one_tx_queue_each() {
    let Some(lab) = lab() else { return };
    // virtio_net maps tx-q to CPU q. Crossed (tx-0 <- CPU 1, tx-1 <- CPU 0), `--cpus 0,1` taken
    // in order would still use both queues by luck of the map; by XPS, thread 0 goes to CPU 1
    // (tx-0) and thread 1 to CPU 0 (tx-1). The map is put back however the send ends.
    let q = "/sys/class/net/lab0/queues";
    let cmd = format!(
        "x0=$(cat {q}/tx-0/xps_cpus); x1=$(cat {q}/tx-1/xps_cpus); \
         trap \"echo $x0 >{q}/tx-0/xps_cpus; echo $x1 >{q}/tx-1/xps_cpus\" EXIT; \
         echo 2 >{q}/tx-0/xps_cpus && echo 1 >{q}/tx-1/xps_cpus && ethtool -S lab0 && echo @@ && \
         uringbench send -c {B_ADDR} -P 2 -t 2s --cpus 0,1 -J && echo @@ && ethtool -S lab0"
    );
    let before = lab.ok("a", &format!("cat {q}/tx-0/xps_cpus {q}/tx-1/xps_cpus"));
    let raw = sections(&lab.ok("a", &cmd));
    assert_eq!(lab.ok("a", &format!("cat {q}/tx-0/xps_cpus {q}/tx-1/xps_cpus")), before, "the map is back");
    let doc: serde_json::Value = serde_json::from_str(&raw[1]).expect("send -J");
    assert_eq!(u64_at(&doc, "/sum/receiver/total_bytes"), u64_at(&doc, "/sum/sender/total_bytes"));
    let placement = doc["sender"]["placement"].as_str().unwrap_or_default();
    assert!(placement.contains("one tx queue each: CPU 1→tx-0, CPU 0→tx-1"), "{placement}");
    let (s0, s1) = (ethtool_stats(&raw[0]), ethtool_stats(&raw[2]));
    for tx in ["tx0_kicks", "tx1_kicks"] {
        assert!(s1[tx] > s0[tx], "{tx} grew: the driver's own counter says both tx queues sent");
    }
}

#[test]
fn napi_busy_polling_registers_and_finds_the_virtio_queues() {
    let Some(lab) = lab() else { return };
    lab.spawn_recv("napi", 5401, "--napi");
    let doc = lab.json("a", &format!("uringbench send -c {B_ADDR} -p 5401 -P 2 -t 2s --napi -J"));
    let (rc, err) = lab.finish_recv("napi");
    assert_eq!(rc, 0, "recv --napi: {err}");
    assert_eq!(u64_at(&doc, "/sum/receiver/total_bytes"), u64_at(&doc, "/sum/sender/total_bytes"));
    let rx = &doc["receiver"];
    let placement = rx["placement"].as_str().unwrap_or_default();
    assert!(placement.contains("io_uring NAPI busy poll 50 us"), "NAPI busy polling registered: {rx}");
    let path = rx["path"].as_str().unwrap_or_default();
    let ids = path.split("sockets on NAPI ids [").nth(1).and_then(|s| s.split(']').next());
    let ids: Vec<u64> = ids
        .unwrap_or_else(|| panic!("the receiver's sockets have NAPI ids: {path}"))
        .split(',')
        .map(|s| s.trim().parse().expect("a NAPI id"))
        .collect();
    assert!(!ids.is_empty() && ids.iter().all(|&id| id > 0), "SO_INCOMING_NAPI_ID non-zero: {path}");
    assert!(path.contains("2 of 2 sockets"), "both data sockets arrived through a NIC queue: {path}");
}

#[test]
fn xdp_engine_runs_natively_in_virtio_net_counts_exactly_and_detaches() {
    let Some(lab) = lab() else { return };
    let redirects = |lab: &Lab| ethtool_stats(&lab.ok("b", "ethtool -S lab0"))["rx_xdp_redirects"];
    let before = redirects(&lab);
    lab.spawn_recv("xdp", 5402, "--engine xdp");
    let doc = lab
        .json("a", &format!("uringbench send -c {B_ADDR} -p 5402 --engine xdp -t 1s --warmup 200ms -l 1470 -b 50M -J"));
    let (rc, err) = lab.finish_recv("xdp");
    assert_eq!(rc, 0, "recv --engine xdp: {err}");
    let after = redirects(&lab);

    let sent = u64_at(&doc, "/sum/sender/datagrams");
    assert!(sent > 3000, "50 Mbit/s of 1470 B for 1.2 s: {sent}");
    assert_eq!(u64_at(&doc, "/sum/receiver/datagrams"), sent, "every frame counted: {}", doc["sum"]);
    assert_eq!(u64_at(&doc, "/sum/receiver/lost"), 0);
    assert_eq!(u64_at(&doc, "/sum/receiver/total_bytes"), u64_at(&doc, "/sum/sender/total_bytes"));
    let rx = &doc["xdp"]["receiver"];
    assert_eq!(rx["program_mode"], "native", "virtio_net runs the program in the driver: {rx}");
    assert_eq!(rx["interface"], NIC);
    // The driver's own counter of XDP_REDIRECT verdicts matches what the program steered:
    // the program ran in virtio_net's receive path, not in the generic (skb) hook.
    assert_eq!(after - before, u64_at(rx, "/steer/redirected"), "rx_xdp_redirects counts our redirects");
    assert_eq!(u64_at(rx, "/frames"), u64_at(rx, "/steer/redirected"), "every redirected frame was read");
    for side in ["receiver", "sender"] {
        let x = &doc["xdp"][side];
        match x["bind"].as_str() {
            Some("zero-copy") => {}
            Some("copy") => {
                let notes = x["notes"].to_string();
                assert!(notes.contains("zero-copy refused by the driver"), "{side}: the fallback's reason: {x}");
            }
            other => panic!("{side}: bind {other:?}: {x}"),
        }
    }
    let link = lab.ok("b", "ip link show dev lab0; bpftool prog show");
    assert!(!link.contains(" xdp") && !link.contains("prog/xdp"), "program detached: {link}");
    assert!(!link.contains("uringbench_xdp"), "program unloaded: {link}");
}

#[test]
fn zc_rx_is_refused_naming_virtio_net_and_what_it_lacks() {
    let Some(lab) = lab() else { return };
    // A queue named (registration answers EOPNOTSUPP) or chosen out of RSS (virtio_net keeps
    // none out, or reports no table): one line each, naming the driver and what it lacks.
    for (spec, needle) in [("lab0:0", "header/data split"), ("lab0", "`ethtool -X lab0 equal 1`")] {
        let cmd = format!("uringbench recv --once -p 5403 --zc-rx {spec}");
        let out = lab.sh("b", &cmd, Duration::from_secs(30));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{spec}: refused, not a usage error: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{spec}: one line: {err}");
        assert!(err.contains("lab0 (virtio_net)"), "{spec}: names the interface and its driver: {err}");
        assert!(err.contains("header/data split"), "{spec}: names the capability virtio_net lacks: {err}");
        // A guest kernel without the opcode stops there, before the queues are looked at.
        assert!(err.contains(needle) || err.contains("lacks IORING_OP_RECV_ZC"), "{spec}: {needle} in {err}");
    }
    let listening = lab.ok("b", "ss -Hltn sport = :5403");
    assert!(listening.trim().is_empty(), "nothing left listening: {listening}");
}

#[test]
fn provisioning_installed_the_package_and_the_receiver_service() {
    let Some(lab) = lab() else { return };
    let version = env!("CARGO_PKG_VERSION");
    for g in ["a", "b"] {
        let pkg = lab.ok(g, "dpkg-query -W -f '${Status} ${Version}' uringbench");
        assert_eq!(pkg, format!("install ok installed {version}"), "guest {g}: the package");
        assert_eq!(lab.ok(g, "uringbench --version").trim(), format!("uringbench {version}"));
        let unit = lab.ok(g, "systemctl is-enabled uringbench-recv.service || true");
        assert_eq!(unit.trim(), if g == "b" { "enabled" } else { "disabled" }, "guest {g}: --recv-service only on b");
    }
    assert_eq!(lab.ok("b", "systemctl is-active uringbench-recv.service").trim(), "active");
    let user = lab.ok("b", "ps -o user= -C uringbench");
    assert!(!user.trim().is_empty() && !user.contains("root"), "the service runs without root: {user}");
    let listening = lab.ok("b", "ss -Hltn sport = :5300");
    assert!(!listening.trim().is_empty(), "the service listens on 5300");
}

#[test]
fn vmlab_usage_errors_are_one_line_exit_2() {
    for args in [&[][..], &["sideways"], &["ssh"], &["ssh", "c", "true"]] {
        let out = Command::new("bash").arg(script()).args(args).output().expect("run vmlab.sh");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: one line: {err}");
    }
}

// ---- lab1: the NIC with RSS (4 queue pairs, software RSS in QEMU; guest b's on NUMA node 1) ----

const A_RSS: &str = "10.98.1.11";
const B_RSS: &str = "10.98.1.12";
const RSS_QUEUES: u32 = 4;

/// Guest b's TCP receive buffers capped at 128 KiB while this lives: no flow then has more in
/// flight than its queue's ring holds, and QEMU's software RSS never parks a packet for want of
/// buffers (which stalls the tap queue it came from: scripts/vmlab.sh).
struct SmallWindows<'a> {
    lab: &'a Lab,
    saved: Vec<String>,
}

impl<'a> SmallWindows<'a> {
    fn new(lab: &'a Lab) -> Self {
        let saved = lab.ok("b", "sysctl -n net.core.rmem_max net.ipv4.tcp_rmem").lines().map(str::to_owned).collect();
        lab.ok("b", "sysctl -q -w net.core.rmem_max=131072 net.ipv4.tcp_rmem='4096 65536 131072'");
        Self { lab, saved }
    }
}

impl Drop for SmallWindows<'_> {
    fn drop(&mut self) {
        if let [max, tcp] = &self.saved[..] {
            self.lab.sh(
                "b",
                &format!("sysctl -q -w net.core.rmem_max={max} net.ipv4.tcp_rmem='{tcp}'"),
                Duration::from_secs(60),
            );
        }
    }
}

/// Interrupts each lab1 receive queue of guest b has taken (its `input.N` vector, all CPUs).
fn rx_interrupts(lab: &Lab) -> BTreeMap<u32, u64> {
    let raw = sections(&lab.ok("b", "cat /proc/interrupts; echo @@; basename $(readlink /sys/class/net/lab1/device)"));
    queue_irqs(&raw[0], raw[1].trim())
        .into_values()
        .filter_map(|(name, count)| Some((name.split_once("-input.")?.1.parse().ok()?, count)))
        .collect()
}

/// The queues whose interrupts grew by at least a fifth of the busiest one's: those that
/// carried a bulk flow. The control connection's few packets stay far below.
fn busy_queues(before: &BTreeMap<u32, u64>, after: &BTreeMap<u32, u64>) -> (Vec<u32>, BTreeMap<u32, u64>) {
    let delta: BTreeMap<u32, u64> = after.iter().map(|(q, n)| (*q, n - before.get(q).copied().unwrap_or(0))).collect();
    let max = delta.values().copied().max().unwrap_or(0);
    assert!(max > 50, "a bulk flow makes its queue's vector fire often: {delta:?}");
    (delta.iter().filter(|(_, n)| **n * 5 >= max).map(|(q, _)| *q).collect(), delta)
}

/// One test on lab1 from a to b's `recv --once -p PORT RECV_ARGS`: the sender's output and
/// b's receive-queue interrupt deltas.
fn lab1_test(
    lab: &Lab,
    name: &str,
    port: u16,
    recv_args: &str,
    send_args: &str,
) -> (String, BTreeMap<u32, u64>, BTreeMap<u32, u64>) {
    lab.spawn_recv(name, port, recv_args);
    let before = rx_interrupts(lab);
    let out = lab.ok("a", &format!("uringbench send -c {B_RSS} -p {port} {send_args}"));
    let after = rx_interrupts(lab);
    let (rc, err) = lab.finish_recv(name);
    assert_eq!(rc, 0, "recv {name}: {err}");
    (out, before, after)
}

/// x86 moves an MSI vector to a new CPU at its next interrupt, so until each queue has taken
/// one, /proc/irq/N/effective_affinity_list (what the receiver reads) names the CPU it booted
/// on: one short steered test per boot first, so every queue's vector has fired.
fn settle_rss_irqs(lab: &Lab) {
    static DONE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !DONE.swap(true, std::sync::atomic::Ordering::SeqCst) {
        let affinity = "for i in $(ls /sys/class/net/lab1/device/../msi_irqs); do \
            echo \"IRQ $i: wanted $(cat /proc/irq/$i/smp_affinity_list), now $(cat /proc/irq/$i/effective_affinity_list)\"; done";
        eprintln!("lab1's vectors before any traffic:\n{}", lab.ok("b", affinity));
        lab1_test(lab, "settle", 5410, "", &format!("-P {RSS_QUEUES} -t 1s"));
        eprintln!("after:\n{}", lab.ok("b", affinity));
    }
}

#[test]
fn steered_flows_land_on_four_distinct_rx_queues_by_the_guests_interrupt_counts() {
    let Some(lab) = lab() else { return };
    let _windows = SmallWindows::new(&lab);
    settle_rss_irqs(&lab);
    let (out, before, after) = lab1_test(&lab, "steer", 5411, "", &format!("-P {RSS_QUEUES} -t 2s -J"));
    let doc: serde_json::Value = serde_json::from_str(&out).expect("send -J");
    assert_eq!(u64_at(&doc, "/sum/receiver/total_bytes"), u64_at(&doc, "/sum/sender/total_bytes"), "byte-exact");
    let placement = doc["sender"]["placement"].as_str().unwrap_or_default();
    assert!(placement.contains("flows steered by source port onto lab1's rx queues 0,1,2,3"), "{placement}");
    // The guest's own counters: four bulk flows, four busy receive queues, so one flow each.
    let (busy, delta) = busy_queues(&before, &after);
    eprintln!("steered: input.N interrupts {delta:?}");
    assert_eq!(busy, (0..RSS_QUEUES).collect::<Vec<_>>(), "every rx queue carried a flow: {delta:?}");
    // Our report agrees: one flow per queue, nothing shared, nothing off target.
    let table = &doc["receiver"]["nic_queues"];
    let rows = table["rows"].as_array().expect("rows");
    for r in rows {
        eprintln!("steered row: {r}");
    }
    let flows: Vec<usize> = rows.iter().map(|r| r["flows"].as_array().map_or(0, Vec::len)).collect();
    assert_eq!(flows, vec![1; RSS_QUEUES as usize], "{table}");
    let findings = table["findings"].to_string();
    assert!(!findings.contains("share") && !findings.contains("landed"), "{findings}");
    // Bulk streams sleep between batches by default: each thread counted its completions,
    // and those it found by polling are some of them.
    for r in rows {
        let (all, polled) = (u64_at(r, "/thread_completions"), u64_at(r, "/polled_completions"));
        assert!(all > 0 && polled <= all, "completions counted by the queue's thread: {r}");
    }
    // Each row's IRQ CPU is where the guest delivers that vector.
    let affinity = lab.ok("b", "for f in /proc/irq/*/effective_affinity_list; do echo \"$f $(cat $f)\"; done");
    for r in rows {
        let irq = r["irq"].as_u64().expect("irq");
        let line = affinity.lines().find(|l| l.starts_with(&format!("/proc/irq/{irq}/"))).expect("the IRQ");
        assert_eq!(r["irq_cpu"].to_string(), line.split_whitespace().nth(1).unwrap_or_default(), "IRQ {irq}");
    }
}

#[test]
fn with_irq_placement_each_flow_is_served_on_its_queues_irq_cpu() {
    let Some(lab) = lab() else { return };
    let _windows = SmallWindows::new(&lab);
    settle_rss_irqs(&lab);
    let (out, before, after) =
        lab1_test(&lab, "irq", 5414, "--placement irq --busy-poll on", &format!("-P {RSS_QUEUES} -t 2s -J"));
    let doc: serde_json::Value = serde_json::from_str(&out).expect("send -J");
    assert_eq!(u64_at(&doc, "/sum/receiver/total_bytes"), u64_at(&doc, "/sum/sender/total_bytes"), "byte-exact");
    let (busy, delta) = busy_queues(&before, &after);
    assert_eq!(busy, (0..RSS_QUEUES).collect::<Vec<_>>(), "every rx queue carried a flow: {delta:?}");
    // The receiver read each socket's NAPI id after accept and served it on its queue's thread.
    let handed = format!("{RSS_QUEUES} of {RSS_QUEUES} flows served by the thread of the rx queue they arrived on");
    assert!(out.contains(&handed), "{handed}:\n{}", doc["receiver"]);
    let table = &doc["receiver"]["nic_queues"];
    assert_eq!(table["placement"], "irq", "{table}");
    let affinity = lab.ok("b", "for f in /proc/irq/*/effective_affinity_list; do echo \"$f $(cat $f)\"; done");
    let mut napi_ids = std::collections::BTreeSet::new();
    for r in table["rows"].as_array().expect("rows") {
        eprintln!("irq placement row: {r}");
        assert_eq!(r["flows"].as_array().map_or(0, Vec::len), 1, "one flow a queue: {r}");
        // One thread per queue, on the CPU the guest delivers that queue's vector to.
        let irq = r["irq"].as_u64().expect("irq");
        let line = affinity.lines().find(|l| l.starts_with(&format!("/proc/irq/{irq}/"))).expect("the IRQ");
        let guest_cpu = line.split_whitespace().nth(1).unwrap_or_default().to_string();
        assert_eq!(
            r["thread_cpus"].to_string(),
            format!("[{guest_cpu}]"),
            "queue {}'s thread on its IRQ CPU: {r}",
            r["rx_queue"]
        );
        assert!(napi_ids.insert(r["napi_id"].as_u64().expect("a NAPI id from the sockets")), "{table}");
        // Spinning threads find every completion by polling: a busy-poll share of 100%.
        let all = u64_at(r, "/thread_completions");
        assert!(all > 0 && u64_at(r, "/polled_completions") == all, "busy-poll share 100%: {r}");
    }
    // No thread's sockets span two NAPI ids, and no IRQ and thread apart.
    let findings = table["findings"].to_string();
    assert!(!findings.contains("serves flows of rx queues") && !findings.contains("its thread on CPU"), "{findings}");
}

#[test]
fn udp_flows_are_served_by_the_thread_of_the_queue_they_arrive_on() {
    let Some(lab) = lab() else { return };
    settle_rss_irqs(&lab);
    // b hashes UDP on addresses and ports. Source ports that put flow i on another queue
    // than i, each on its own: served by index, no flow would be on its queue's thread.
    let hash = lab.ok("b", "ethtool -n lab1 rx-flow-hash udp4");
    assert!(hash.contains("L4 bytes 0 & 1"), "b hashes UDP on ports: {hash}");
    let port = 5415;
    let queue_of = lab1_queue_of(&lab, port);
    let base = (20000..30000u16)
        .find(|&p| {
            let qs: Vec<u32> = (0..RSS_QUEUES).map(|i| queue_of(p + i as u16)).collect();
            qs.iter().collect::<std::collections::BTreeSet<_>>().len() == RSS_QUEUES as usize
                && qs.iter().enumerate().all(|(i, q)| *q != i as u32)
        })
        .expect("a port range that deranges the flows");
    let queues: Vec<u32> = (0..RSS_QUEUES).map(|i| queue_of(base + i as u16)).collect();
    // A UDP socket exists before its first datagram: the receiver reads its NAPI id once one
    // is in, then hands each flow to its queue's thread. 2 Mbit/s a flow (about 500 datagrams
    // each) is plenty for that, and far from what stalls lab1: UDP has no window, and at 20
    // Mbit/s a flow the TCG guests once left lab1 stalled for every test after this one
    // (docs/placement.md).
    let send = format!("-u -b 2M -P {RSS_QUEUES} -t 2s --steer off --cport {base} -J");
    let (out, before, after) = lab1_test(&lab, "udp", port, "", &send);
    let doc: serde_json::Value = serde_json::from_str(&out).expect("send -J");
    assert!(u64_at(&doc, "/sum/receiver/total_bytes") > 0, "{}", doc["receiver"]);
    let (busy, delta) = busy_queues(&before, &after);
    eprintln!("udp: ports {base}.. hash to {queues:?}; input.N interrupts {delta:?}");
    assert_eq!(busy, (0..RSS_QUEUES).collect::<Vec<_>>(), "every rx queue carried a flow: {delta:?}");
    let handed = format!("{RSS_QUEUES} of {RSS_QUEUES} flows served by the thread of the rx queue they arrived on");
    assert!(doc["receiver"].to_string().contains(&handed), "{handed}:\n{}", doc["receiver"]);
    // Our table puts each flow on the queue the hash names, and its thread received it.
    let rows = doc["receiver"]["nic_queues"]["rows"].as_array().expect("a NIC queue table for UDP");
    for r in rows {
        eprintln!("udp row: {r}");
        let q = r["rx_queue"].as_u64().expect("rx_queue") as u32;
        let flow = queues.iter().position(|&x| x == q).expect("a flow for every queue");
        assert_eq!(r["flows"], serde_json::json!([flow]), "flow {flow} arrived on rx queue {q}: {r}");
        assert!(u64_at(r, "/thread_completions") > 0 && u64_at(r, "/bytes") > 0, "its thread received it: {r}");
    }
}

/// b's lab1 RSS key and indirection table, as `ethtool -x` shows them.
fn rss_setup(lab: &Lab) -> (Vec<u8>, Vec<u32>) {
    let text = lab.ok("b", "ethtool -x lab1");
    let key_line = text.lines().skip_while(|l| !l.starts_with("RSS hash key")).nth(1).expect("a key");
    let key = key_line.trim().split(':').map(|b| u8::from_str_radix(b, 16).expect("hex")).collect();
    let table = text
        .lines()
        .take_while(|l| !l.starts_with("RSS hash key"))
        .filter_map(|l| l.split_once(':'))
        .filter(|(i, _)| i.trim().parse::<u32>().is_ok())
        .flat_map(|(_, qs)| qs.split_whitespace().map(|q| q.parse::<u32>().expect("a queue")).collect::<Vec<_>>())
        .collect();
    (key, table)
}

/// The lab1 receive queue guest b's hash puts a flow from a's source port to b's `port` on,
/// by the key and table b reports.
fn lab1_queue_of(lab: &Lab, port: u16) -> impl Fn(u16) -> u32 {
    let (key, table) = rss_setup(lab);
    assert_eq!(table.len(), 128, "virtio_net's table");
    let dst = std::net::SocketAddr::new(B_RSS.parse().unwrap(), port);
    let src: std::net::IpAddr = A_RSS.parse().unwrap();
    move |p| {
        let map = uringbench::RssMap { key: &key, table: &table };
        map.queue_of(std::net::SocketAddr::new(src, p), dst, true).expect("a queue")
    }
}

#[test]
fn unsteered_flows_that_hash_together_are_named_by_the_verdict() {
    let Some(lab) = lab() else { return };
    let _windows = SmallWindows::new(&lab);
    settle_rss_irqs(&lab);
    // Source ports whose hash puts flows on three queues, two of them on one, by the key and
    // table guest b reports; below the ephemeral range, so no kernel-chosen port is among them.
    let port = 5412;
    let queue_of = lab1_queue_of(&lab, port);
    let base = (20000..30000u16)
        .find(|&p| {
            let qs: std::collections::BTreeSet<u32> = (0..4).map(|i| queue_of(p + i)).collect();
            qs.len() == 3
        })
        .expect("a port range with one collision");
    let queues: Vec<u32> = (0..4).map(|i| queue_of(base + i)).collect();
    let (a, b) = (0..4).flat_map(|i| (i + 1..4).map(move |j| (i, j))).find(|&(i, j)| queues[i] == queues[j]).unwrap();
    let shared = queues[a];
    let idle = (0..RSS_QUEUES).find(|q| !queues.contains(q)).unwrap();

    let (text, before, after) = lab1_test(&lab, "collide", port, "", &format!("-P 4 -t 2s --steer off --cport {base}"));
    let (busy, delta) = busy_queues(&before, &after);
    eprintln!("random: ports {base}.. hash to {queues:?}; input.N interrupts {delta:?}\n{text}");
    // The guest's counters: four flows on three busy queues, the idle one as the hash says.
    assert_eq!(busy.len(), 3, "four flows on three queues: {delta:?}");
    assert!(!busy.contains(&idle), "rx queue {idle} stayed idle: {delta:?}");
    assert!(busy.contains(&shared), "{delta:?}");
    let line = format!("verdict: flows {a} and {b} share rx queue {shared}");
    assert!(text.contains(&line), "the verdict names the collision ({line}):\n{text}");
}

#[test]
fn receiver_threads_sit_on_the_nics_numa_node() {
    let Some(lab) = lab() else { return };
    let _windows = SmallWindows::new(&lab);
    settle_rss_irqs(&lab);
    let node = lab.ok("b", "cat /sys/class/net/lab1/device/../numa_node");
    assert_eq!(node.trim(), "1", "lab1 sits behind the expander bridge on node 1");
    let cpus =
        uringbench::units::parse_cpu_list(lab.ok("b", "cat /sys/devices/system/node/node1/cpulist").trim()).unwrap();
    assert_eq!(cpus, vec![2, 3]);
    lab.spawn_recv("numa", 5413, "--queues 2");
    // The threads' affinity as the guest's scheduler has it, and where the receiver's memory
    // is: its address ranges (maps) and each mapping's pages per node (numa_maps), for the
    // buffer rings below. A sampler in the guest keeps the last snapshot taken while both queue
    // threads were alive and pinned (a CPU list of one CPU each): under TCG the test's start
    // and end vary by seconds, and a read at a fixed delay found a receiver that had not yet
    // made its rings, or had ended. Bounded: 300 rounds.
    lab.ok(
        "b",
        r#"rm -f /tmp/numa.snap*; cat >/tmp/numa-sampler.sh <<'EOF'
for i in $(seq 300); do
    sleep 0.1
    pid=$(pgrep -n -f '^uringbench recv --once -p 5413') || continue
    { for t in /proc/$pid/task/*; do grep Cpus_allowed_list $t/status | cut -f2; done
      echo @@; cat /proc/$pid/maps; echo @@; cat /proc/$pid/numa_maps; } >/tmp/numa.snap.new 2>/dev/null || continue
    [ "$(sed '/@@/q' /tmp/numa.snap.new | grep -cx '[0-9][0-9]*')" -ge 2 ] && mv /tmp/numa.snap.new /tmp/numa.snap
done
EOF
setsid sh /tmp/numa-sampler.sh </dev/null >/dev/null 2>&1 &"#,
    );
    lab.ok(
        "a",
        &format!(
            "rm -f /tmp/numa.*; setsid sh -c 'uringbench send -c {B_RSS} -p 5413 -P 2 -t 4s -J >/tmp/numa.json 2>/tmp/numa.err; \
             echo $? >/tmp/numa.rc' </dev/null >/dev/null 2>&1 &"
        ),
    );
    let out = lab.ok("a", "for i in $(seq 300); do [ -s /tmp/numa.rc ] && break; sleep 0.1; done; cat /tmp/numa.rc /tmp/numa.json /tmp/numa.err");
    let (rc, err) = lab.finish_recv("numa");
    let mid = lab.ok(
        "b",
        "pkill -f '[n]uma-sampler.sh'; cat /tmp/numa.snap 2>/dev/null || echo 'no snapshot with both queue threads pinned'",
    );
    let parts = sections(&mid);
    assert!(parts.len() >= 3, "a snapshot of the receiver: {mid}");
    let (tasks, maps, numa_maps) = (&parts[0], &parts[1], &parts[2]);
    assert_eq!(rc, 0, "recv --queues 2: {err}");
    let (status, json) = out.split_once('\n').unwrap_or_default();
    assert_eq!(status.trim(), "0", "{out}");
    let doc: serde_json::Value = serde_json::from_str(json.trim()).unwrap_or_else(|e| panic!("send -J ({e}): {out}"));
    assert_eq!(u64_at(&doc, "/sum/receiver/total_bytes"), u64_at(&doc, "/sum/sender/total_bytes"));
    let placement = doc["receiver"]["placement"].as_str().unwrap_or_default();
    assert!(placement.contains("NIC on node 1"), "{placement}");
    let threads: Vec<usize> = doc["cpu"]["receiver"]["threads"]
        .as_array()
        .expect("threads")
        .iter()
        .map(|t| t["cpu"].as_u64().unwrap() as usize)
        .collect();
    assert_eq!(threads.len(), 2, "{placement}");
    assert!(threads.iter().all(|c| cpus.contains(c)), "every thread on node 1 ({cpus:?}): {threads:?}; {placement}");
    let pinned: Vec<usize> = tasks.lines().filter_map(|l| l.trim().parse::<usize>().ok()).collect();
    assert!(pinned.len() >= 2, "the queue threads are pinned, one CPU each: {tasks}");
    assert!(pinned.iter().all(|c| cpus.contains(c)), "pinned on node 1's CPUs: {tasks}");
    let findings = doc["receiver"]["nic_queues"]["findings"].to_string();
    assert!(!findings.contains("off node"), "{findings}");
    // Each queue thread's TCP buffer ring (64 x 32 KiB, mapped with MAP_POPULATE after the
    // thread pinned itself and chose local allocation) lies on node 1, the thread's node. The
    // kernel merges adjacent rings into one mapping, so what is counted is every fully
    // populated anonymous mapping of whole rings.
    let ring = 2u64 << 20;
    let rings = populated_mappings(maps, numa_maps, ring);
    let pages: u64 = rings.iter().flat_map(|(_, nodes)| nodes.values()).sum();
    assert!(pages >= 2 * ring / 4096, "a 2 MiB buffer ring per queue thread:\n{maps}\n{numa_maps}");
    for (addr, nodes) in &rings {
        assert_eq!(nodes.keys().collect::<Vec<_>>(), vec![&1], "rings at {addr:x} on nodes {nodes:?}:\n{numa_maps}");
    }
}

/// The anonymous mappings in /proc/PID/maps whose size is a multiple of `unit` bytes and whose
/// pages are all present (`anon=` equal to their size: mapped with MAP_POPULATE): each one's
/// start address and pages per node from /proc/PID/numa_maps (`N<node>=<pages>`).
fn populated_mappings(maps: &str, numa_maps: &str, unit: u64) -> Vec<(u64, BTreeMap<u32, u64>)> {
    let sizes: BTreeMap<u64, u64> = maps
        .lines()
        .filter(|l| l.split_whitespace().count() == 5)
        .filter_map(|l| {
            let (a, b) = l.split_whitespace().next()?.split_once('-')?;
            let (a, b) = (u64::from_str_radix(a, 16).ok()?, u64::from_str_radix(b, 16).ok()?);
            ((b - a) % unit == 0).then_some((a, b - a))
        })
        .collect();
    numa_maps
        .lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            let addr = u64::from_str_radix(words.next()?, 16).ok()?;
            let size = sizes.get(&addr)?;
            let words: Vec<&str> = words.collect();
            let full = words.iter().any(|w| *w == format!("anon={}", size / 4096));
            let nodes = words
                .iter()
                .filter_map(|w| {
                    let (n, pages) = w.strip_prefix('N')?.split_once('=')?;
                    Some((n.parse().ok()?, pages.parse().ok()?))
                })
                .collect();
            full.then_some((addr, nodes))
        })
        .collect()
}
