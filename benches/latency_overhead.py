#!/usr/bin/env python3
"""What `send --latency` costs the load: measured directly, and as an A/B of CPU-s/GB.

    sudo python3 benches/latency_overhead.py [--runs 5] [--time 5] [--queues 1]
        [--binary target/release/uringbench] [--json-out FILE]

What it does
  * Creates the netns pair "ublatb" with scripts/netns-pair.sh (ublatb-a sender 10.77.0.1,
    ublatb-b receiver 10.77.0.2; removed at the end, also on Ctrl-C and errors) and starts one
    `recv --cpus 1` there.
  * Runs `send -c 10.77.0.2 -P Q --cpus 0 -t T -J` with and without `--latency`, interleaved:
    the order alternates from run to run, so neither always goes first.
  * Holds /tmp/uringbench-test-traffic.lock for the whole bench, as the traffic tests do.

What the numbers mean
  * The direct share (every --latency run states it: `latency.cpu`): the probe thread's and
    the receiver's answering thread's CPU time inside the window (each read by the thread
    itself, CLOCK_THREAD_CPUTIME_ID), over (a) the load's queue threads' CPU-s on both sides
    (`share`; the kernel's work outside those threads is missing from the whole, so this
    is an upper bound) and (b) the receiving host's busy CPU-s, the numerator of CPU-s/GB
    (`host_share`; other work on a shared host is in the whole, so this is a lower bound
    there). The direct figures do not depend on run-to-run throughput noise.
  * CPU-s/GB is the document's `cpu.receiver_per_byte.cpu_seconds_per_gb`: the busy time of
    the receiving host's CPUs over the window (both namespaces share the host, so it counts
    the sender, the receiver, the softirqs and the probe's threads) per GB received. The
    probe's own bytes are not in the GB (they are in `latency.bytes_*`).
  * Throughput is `sum.receiver.bits_per_second`.
  * Medians with min-max over the runs; the overhead is the ratio of the medians. The target
    (docs/performance.md) is at most 1% more CPU-s/GB: on 2 shared vCPUs, run-to-run spread is
    far larger than that, so read the min-max before the ratio.

Exit status: 0 when every run produced a figure, 1 otherwise, 2 on bad arguments.
Standard library only.
"""

import argparse
import fcntl
import json
import os
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAIR_SCRIPT = os.path.join(REPO, "scripts", "netns-pair.sh")
PAIR = "ublatb"
NS_SEND, NS_RECV = PAIR + "-a", PAIR + "-b"
ADDR_RECV = "10.77.0.2"
LOCK = "/tmp/uringbench-test-traffic.lock"


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def pair(action):
    subprocess.run(["bash", PAIR_SCRIPT, action, "--name", PAIR], check=action == "up",
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=60)


def wait_listen(port, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = subprocess.run(["ip", "netns", "exec", NS_RECV, "ss", "-Htln"], capture_output=True, text=True)
        if f":{port} " in out.stdout:
            return True
        time.sleep(0.05)
    return False


def one_run(binary, queues, seconds, latency):
    cmd = ["ip", "netns", "exec", NS_SEND, binary, "send", "-c", ADDR_RECV, "-P", str(queues), "--cpus", "0",
           "-t", f"{seconds}s", "-J"]
    if latency:
        cmd.append("--latency")
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 30)
    except subprocess.TimeoutExpired:
        log(f"  send timed out: {' '.join(cmd)}")
        return None
    if out.returncode != 0:
        log(f"  send failed ({out.returncode}): {out.stderr.strip()[:300]}")
        return None
    doc = json.loads(out.stdout)
    per_byte = (doc.get("cpu") or {}).get("receiver_per_byte") or {}
    lat = doc.get("latency") or {}
    return {
        "cpu_s_per_gb": per_byte.get("cpu_seconds_per_gb"),
        "gbps": doc["sum"]["receiver"]["bits_per_second"] / 1e9,
        "loaded_p50_ms": (lat.get("loaded") or {}).get("p50_ms"),
        "probe_bytes": lat.get("bytes_sent"),
        "probe_cpu_s": (lat.get("cpu") or {}).get("probe_seconds"),
        "answer_cpu_s": (lat.get("cpu") or {}).get("answer_seconds"),
        "share_pct": pct((lat.get("cpu") or {}).get("share")),
        "host_share_pct": pct((lat.get("cpu") or {}).get("host_share")),
    }


def pct(x):
    return None if x is None else x * 100


def summary(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return None
    return {"n": len(xs), "median": statistics.median(xs), "min": min(xs), "max": max(xs)}


def fmt(s, digits=3):
    if s is None:
        return "-"
    return f"{s['median']:.{digits}f} ({s['min']:.{digits}f}-{s['max']:.{digits}f}), n={s['n']}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--time", type=int, default=5, help="seconds per run's window")
    ap.add_argument("--queues", type=int, default=1)
    ap.add_argument("--binary", default=os.path.join(REPO, "target", "release", "uringbench"))
    ap.add_argument("--json-out")
    args = ap.parse_args()
    if args.runs < 5 or args.time < 1 or args.queues < 1 or not os.access(args.binary, os.X_OK):
        log("need --runs >= 5, --time >= 1, --queues >= 1 and an executable --binary")
        return 2
    lock = open(LOCK, "a")
    fcntl.flock(lock, fcntl.LOCK_EX)
    recv = None
    results = {"plain": [], "latency": []}
    try:
        pair("up")
        recv = subprocess.Popen(["ip", "netns", "exec", NS_RECV, args.binary, "recv", "--cpus", "1"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if not wait_listen(5300):
            log("recv did not listen")
            return 1
        for r in range(args.runs):
            order = ["plain", "latency"] if r % 2 == 0 else ["latency", "plain"]
            for which in order:
                res = one_run(args.binary, args.queues, args.time, which == "latency")
                results[which].append(res)
                log(f"run {r + 1}/{args.runs} {which}: {res}")
    finally:
        if recv is not None:
            recv.terminate()
            try:
                recv.wait(timeout=5)
            except subprocess.TimeoutExpired:
                recv.kill()
                recv.wait()
        pair("down")
    ok = all(x is not None for xs in results.values() for x in xs)
    table = {}
    for which, runs in results.items():
        done = [x for x in runs if x is not None]
        table[which] = {
            "cpu_s_per_gb": summary([x["cpu_s_per_gb"] for x in done]),
            "gbps": summary([x["gbps"] for x in done]),
            "loaded_p50_ms": summary([x["loaded_p50_ms"] for x in done]),
        }
        if which == "latency":
            for key in ("probe_cpu_s", "answer_cpu_s", "share_pct", "host_share_pct"):
                table[which][key] = summary([x[key] for x in done])
        print(f"{which:8} CPU-s/GB {fmt(table[which]['cpu_s_per_gb'], 4)}  Gbit/s {fmt(table[which]['gbps'], 2)}"
              + (f"  loaded p50 ms {fmt(table[which]['loaded_p50_ms'], 3)}" if which == "latency" else ""))
    lat = table["latency"]
    if lat.get("share_pct"):
        print(f"direct: probe {fmt(lat['probe_cpu_s'], 4)} CPU-s, answering {fmt(lat['answer_cpu_s'], 4)} CPU-s "
              f"in the window")
        print(f"direct share of the load threads' CPU-s (upper bound): {fmt(lat['share_pct'], 3)} %")
        print(f"direct share of the receiving host's busy CPU-s (CPU-s/GB's numerator): "
              f"{fmt(lat['host_share_pct'], 3)} %")
    a, b = table["plain"]["cpu_s_per_gb"], table["latency"]["cpu_s_per_gb"]
    if a and b and a["median"] > 0:
        ratio = b["median"] / a["median"]
        table["cpu_ratio"] = ratio
        print(f"A/B: --latency / plain CPU-s/GB, ratio of medians: {ratio:.4f} ({(ratio - 1) * 100:+.2f}%)")
        pairs = [y["cpu_s_per_gb"] / x["cpu_s_per_gb"] for x, y in zip(results["plain"], results["latency"])
                 if x and y and x["cpu_s_per_gb"] and y["cpu_s_per_gb"]]
        if pairs:
            table["cpu_ratio_pairs"] = summary(pairs)
            print(f"A/B: per interleaved pair, --latency / plain CPU-s/GB: {fmt(table['cpu_ratio_pairs'], 3)}")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"runs": results, "summary": table, "args": vars(args)}, f, indent=2)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
