//! lab1: the NIC with RSS (4 queue pairs, software RSS in QEMU; guest b's on NUMA node 1).
//! Steered and unsteered flows, IRQ placement and the receiver's NUMA node, each checked
//! against guest b's interrupt counts, /proc/irq and /proc/PID/numa_maps.

use super::{lab, queue_irqs, sections, Lab};
use crate::common::u64_at;
use std::collections::BTreeMap;
use std::time::Duration;

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
