#!/usr/bin/env python3
"""Steered against random flow placement on a NIC with RSS, in the VM lab (issue 23): how many
receive queues the flows occupy, how many share one, and the receiver's CPU-s/GB.

    sudo python3 benches/steering_vmlab.py [--runs 5] [--time 3] [--flows 4] [--json-out FILE] [--markdown]

Needs the lab up (`scripts/vmlab.sh up`); leaves it up. Guest a sends to guest b over lab1, a
virtio-net NIC with 4 queue pairs and RSS. For each run, one test of each kind, the order
alternating from run to run:
  * steered: `send`'s default: each flow's source port chosen so that the receiver's RSS hash
    puts flow i on rx queue i (docs/placement.md);
  * random: `send --steer off`: the kernel's ephemeral source ports, so each flow lands where
    the NIC's hash happens to put it, as with iperf2, iperf3 or neper.
Per test:
  * busy queues: guest b's lab1 receive queues that carried a bulk flow, by the guest's own
    interrupt counts (its input.N vectors in /proc/interrupts; busy = grew by at least a fifth
    of the busiest queue's growth), not by anything uringbench says;
  * the most flows on one queue, from the receiver's per-queue table (`receiver.nic_queues`,
    each flow's socket's NAPI id);
  * the receiver-counted rate and the receiver host's CPU-s/GB (`cpu.receiver_per_byte`).
The guests run under TCG (emulated CPUs) here, so rates and CPU-s/GB say little about real
hardware; the occupancy is the point. Receive windows are kept small during the tests (as the
lab tests do) so QEMU's software RSS keeps up.

Exit status: 0 when every test completed; 1 when one failed; 2 when the lab is not up.
Standard library only.
"""

import argparse
import json
import re
import statistics
import subprocess
import sys
import time

LAB = "scripts/vmlab.sh"
B_RSS = "10.98.1.12"
PORT = 5470


def ssh(guest, cmd, limit=120):
    out = subprocess.run([LAB, "ssh", guest, cmd], capture_output=True, text=True, timeout=limit)
    if out.returncode != 0:
        raise RuntimeError(f"guest {guest}: {cmd!r} exited {out.returncode}: {out.stderr.strip()[-400:]}")
    return out.stdout


def rx_interrupts():
    """lab1's receive-queue interrupts on guest b, summed over CPUs: {queue: count}."""
    text = ssh("b", "basename $(readlink /sys/class/net/lab1/device); cat /proc/interrupts")
    dev, _, table = text.partition("\n")
    counts = {}
    for line in table.splitlines():
        m = re.search(rf"{re.escape(dev.strip())}-input\.(\d+)\s*$", line)
        if m:
            fields = line.split()[1:]
            counts[int(m.group(1))] = sum(int(f) for f in fields if f.isdigit())
    return counts


def one_test(kind, flows, secs, port):
    ssh(
        "b",
        f"rm -f /tmp/bench.*; setsid sh -c 'timeout 120 uringbench recv --once -p {port} "
        f">/tmp/bench.out 2>/tmp/bench.err; echo $? >/tmp/bench.rc' </dev/null >/dev/null 2>&1 & "
        f"for i in $(seq 300); do ss -Hltn sport = :{port} | grep -q . && exit 0; sleep 0.1; done; "
        "cat /tmp/bench.err; exit 1",
    )
    before = rx_interrupts()
    steer = "" if kind == "steered" else " --steer off"
    out = ssh("a", f"uringbench send -c {B_RSS} -p {port} -P {flows} -t {secs} -J{steer}", limit=60 + 3 * secs)
    after = rx_interrupts()
    ssh("b", "for i in $(seq 300); do [ -s /tmp/bench.rc ] && break; sleep 0.1; done; cat /tmp/bench.rc")
    doc = json.loads(out)
    delta = {q: after[q] - before.get(q, 0) for q in after}
    top = max(delta.values()) if delta else 0
    busy = sorted(q for q, n in delta.items() if top > 0 and n * 5 >= top)
    rows = ((doc.get("receiver") or {}).get("nic_queues") or {}).get("rows") or []
    per_queue = [len(r.get("flows") or []) for r in rows]
    recv = (doc.get("sum") or {}).get("receiver") or {}
    cpu = ((doc.get("cpu") or {}).get("receiver_per_byte") or {}).get("cpu_seconds_per_gb")
    return {
        "kind": kind,
        "complete": bool(recv) and recv.get("total_bytes") == ((doc.get("sum") or {}).get("sender") or {}).get("total_bytes"),
        "busy_queues": busy,
        "interrupts": delta,
        "max_flows_on_a_queue": max(per_queue) if per_queue else None,
        "queues_with_flows": sum(1 for n in per_queue if n > 0),
        "gbit_per_second": (recv.get("bits_per_second") or 0) / 1e9,
        "cpu_seconds_per_gb": cpu,
        "findings": ((doc.get("receiver") or {}).get("nic_queues") or {}).get("findings") or [],
    }


def summary(results, kind):
    mine = [r for r in results if r["kind"] == kind]
    busy = [len(r["busy_queues"]) for r in mine]
    top = [r["max_flows_on_a_queue"] for r in mine if r["max_flows_on_a_queue"] is not None]
    rate = [r["gbit_per_second"] for r in mine]
    cpu = [r["cpu_seconds_per_gb"] for r in mine if r["cpu_seconds_per_gb"] is not None]

    def med(v, fmt):
        return f"{fmt.format(statistics.median(v))} ({fmt.format(min(v))}–{fmt.format(max(v))})" if v else "-"

    return {
        "kind": kind,
        "tests": len(mine),
        "all_queues_busy": sum(1 for r in mine if len(r["busy_queues"]) == 4),
        "busy_queues": med(busy, "{:.0f}"),
        "max_flows_on_a_queue": med(top, "{:.0f}"),
        "gbit_per_second": med(rate, "{:.3f}"),
        "cpu_seconds_per_gb": med(cpu, "{:.1f}"),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--time", type=int, default=3)
    ap.add_argument("--flows", type=int, default=4)
    ap.add_argument("--json-out")
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args()
    if not (1 <= a.runs <= 50 and 1 <= a.time <= 30 and 1 <= a.flows <= 64):
        print("steering_vmlab.py: --runs 1-50, --time 1-30, --flows 1-64", file=sys.stderr)
        return 2
    if subprocess.run([LAB, "status"], capture_output=True).returncode != 0:
        print("steering_vmlab.py: the VM lab is not up (scripts/vmlab.sh up)", file=sys.stderr)
        return 2
    saved = ssh("b", "sysctl -n net.core.rmem_max net.ipv4.tcp_rmem").splitlines()
    ssh("b", "sysctl -q -w net.core.rmem_max=131072 net.ipv4.tcp_rmem='4096 65536 131072'")
    results, failed = [], 0
    try:
        # One short steered test first, so every queue's MSI vector has fired once and its
        # effective affinity is current (x86 moves a vector only at its next interrupt).
        one_test("steered", a.flows, 1, PORT)
        for run in range(a.runs):
            order = ["steered", "random"] if run % 2 == 0 else ["random", "steered"]
            for kind in order:
                try:
                    r = one_test(kind, a.flows, a.time, PORT + 1 + 2 * run + order.index(kind))
                except (RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError) as e:
                    failed += 1
                    print(f"run {run + 1} {kind}: failed: {e}", file=sys.stderr)
                    continue
                r["run"] = run + 1
                results.append(r)
                print(
                    f"run {r['run']} {kind:8} busy queues {r['busy_queues']} interrupts {r['interrupts']} "
                    f"most flows on a queue {r['max_flows_on_a_queue']} {r['gbit_per_second']:.3f} Gbit/s "
                    f"CPU-s/GB {r['cpu_seconds_per_gb']} {'; '.join(r['findings'])}",
                    flush=True,
                )
                time.sleep(0.5)
    finally:
        if len(saved) == 2:
            ssh("b", f"sysctl -q -w net.core.rmem_max={saved[0]} net.ipv4.tcp_rmem='{saved[1]}'")
    sums = [summary(results, k) for k in ("steered", "random")]
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump({"runs": results, "summary": sums}, f, indent=1)
    if a.markdown:
        print(f"\n| {a.flows} flows, 4 rx queues | tests | all 4 queues busy | busy queues, median (min–max) "
              "| most flows on one queue | Gbit/s | receiver CPU-s/GB |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for s in sums:
            print(f"| {s['kind']} | {s['tests']} | {s['all_queues_busy']} | {s['busy_queues']} | "
                  f"{s['max_flows_on_a_queue']} | {s['gbit_per_second']} | {s['cpu_seconds_per_gb']} |")
    else:
        for s in sums:
            print(json.dumps(s))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
