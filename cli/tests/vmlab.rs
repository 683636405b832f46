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
//!
//! lab0's tests are here; lab1's, the NIC with RSS, in `vmlab/rss.rs`.

mod common;
#[path = "vmlab/rss.rs"]
mod rss;

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
