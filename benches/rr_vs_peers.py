#!/usr/bin/env python3
"""Side-by-side TCP request/response benchmark: uringbench rr vs iperf2 bounceback vs sockperf
ping-pong, one flow, on a local netns pair (issue 6).

    sudo python3 benches/rr_vs_peers.py [--runs 5] [--time 10] [--binary target/release/uringbench]
        [--udp] [--json-out FILE] [--markdown]

  --udp compares UDP request/response instead: `uringbench rr -u` vs `sockperf ping-pong`
  over UDP (iperf2's bounceback is TCP only, so it sits out).
  --crr compares connect/request/response/close: `uringbench crr` vs neper `tcp_crr` (built
  from source by scripts/install-deps.sh --peers; netperf is not packaged in Debian main).
  neper closes with SO_LINGER 0 (a reset, no TIME_WAIT) by default; uringbench's server
  closes first and gracefully.

What it does
  * Creates the netns pair "ubrr" with scripts/netns-pair.sh (ubrr-a = client host 10.77.0.1,
    ubrr-b = server host 10.77.0.2) and removes it at the end, also on Ctrl-C / SIGTERM /
    errors.
  * For each run r, runs the three tools once each, interleaved; the order rotates from run to
    run and runs backwards every other run (order bias: no tool always follows the same one).
  * Same pinning for all: server on CPU 1, client on CPU 0 (taskset -c).
  * Every process is bounded in time (client timeouts; servers SIGTERM -> SIGKILL).

The tools (one TCP flow, one transaction in flight, MSG_LEN = 64-byte request and response
for every tool: iperf2's smallest bounceback size, so the one size all three can send)
  * uringbench: `recv --once` / `rr --req 64 --resp 64 --warmup 0s --cooldown 0s -J`:
    transactions_per_second and latency_us.{p50,p99,mean} (HdrHistogram over the whole test,
    as iperf2 measures from its first bounceback: no warm-up left out).
  * iperf2 2.1.x: `iperf -s` / `iperf -c --bounceback --bounceback-period 0 -l 64` (64 bytes is
    iperf2's minimum bounceback size). Transactions/s: bounceback count of the final
    0.00-T report ÷ T; latency: mean/min/max, and p50/p99 binned from its 100 µs histogram
    (2.1.8 prints the same bounceback report with or without -e, so -e is not passed).
    -l below 64 makes 2.1.8 hang.
  * sockperf: `server --tcp` / `ping-pong --tcp -m 64 --full-rtt`, blocking in epoll as it
    does by default. sockperf always leaves its own first 400 ms out of its "[Valid Duration]"
    and last 50 ms (it has no option to keep them); that is the one window difference left,
    in sockperf's favour.
  * sockperf-spin: the same with `--nonblocked --timeout 0` on both ends, so it busy-polls
    like uringbench's latency-bound threads do (the fair peer for spinning latency). --full-rtt makes sockperf report round-trip times (by default it reports RTT/2);
    transactions/s = ReceivedMessages ÷ RunTime of its "[Valid Duration]" line.
  All latencies are round-trip times in microseconds (request sent -> response received).

Exit status: 0 when at least one run of one tool succeeded; 1 when every run of every tool
failed; 2 on bad arguments or missing prerequisites; 130 on Ctrl-C. The issue's target is
reported, not asserted.

Standard library only. Reuses process/netns helpers of benches/stream_vs_iperf2.py.
"""

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stream_vs_iperf2 as sv  # noqa: E402

REPO = sv.REPO
DEFAULT_BINARY = sv.DEFAULT_BINARY

PAIR = "ubrr"
NS_CLI = PAIR + "-a"
NS_SRV = PAIR + "-b"
ADDR_SRV = "10.77.0.2"
UB_PORT = 5300
IPERF_PORT = 5001
SOCKPERF_PORT = 11111
NEPER_CONTROL_PORT = 12866
CPU_CLI = 0
CPU_SRV = 1

# The helpers in stream_vs_iperf2 read these module globals at call time.
sv.PAIR, sv.NS_SEND, sv.NS_RECV = PAIR, NS_CLI, NS_SRV
sv.CPU_SEND, sv.CPU_RECV = CPU_CLI, CPU_SRV

TOOLS = ("uringbench", "iperf2", "sockperf", "sockperf-spin")
PEERS = ("iperf2", "sockperf", "sockperf-spin")
# sockperf spinning like uringbench's latency-bound threads: non-blocking sockets and a zero
# poll timeout on both ends, so neither sleeps between messages.
SOCKPERF_SPIN = ["--nonblocked", "--timeout", "0"]
# One message size for every tool (request and response): iperf2's bounceback minimum.
MSG_LEN = "64"
# Issue 29's target (issue 6 asked for x2 and x0.5; issue 29 measured where the tool stood).
TPS_TARGET = 1.2
P99_TARGET = 1.0
TARGET = "≥ %g× the better peer's transactions/s and p99 ≤ %g× its p99" % (TPS_TARGET, P99_TARGET)

log = sv.log


def in_ns(ns, cpu, cmd):
    return ["ip", "netns", "exec", ns, "taskset", "-c", str(cpu)] + cmd


def new_result(tool, run, cli_cmd, srv_cmd):
    return {"tool": tool, "run": run, "ok": False, "error": None, "client_cmd": cli_cmd,
            "server_cmd": srv_cmd, "tps": None, "p50_us": None, "p99_us": None,
            "mean_us": None, "min_us": None, "max_us": None, "transactions": None,
            "client_wall_s": None}


def client_limit(args):
    return args.time + 30


def run_pair(res, srv_cmd, port, cli_cmd, args, tmp, tag, server_exits=False):
    """Start the server, wait until it listens, run the client bounded in time, stop the
    server. Returns (client stdout, client stderr, server stdout) or None (res['error'] set)."""
    srv_out, srv_err = [os.path.join(tmp, tag + x) for x in (".srv.out", ".srv.err")]
    cli_out, cli_err = [os.path.join(tmp, tag + x) for x in (".cli.out", ".cli.err")]
    with open(srv_out, "wb") as so, open(srv_err, "wb") as se:
        srv = sv.spawn(srv_cmd, so, se)
    try:
        err = sv.wait_listen(srv, port)
        if err:
            res["error"] = "server: %s: %s" % (err, sv.tail_line(srv_err) or "(no stderr)")
            return None
        t0 = time.monotonic()
        rc, timed_out = sv.run_bounded(cli_cmd, client_limit(args), cli_out, cli_err)
        res["client_wall_s"] = round(time.monotonic() - t0, 3)
        res["client_rc"] = rc
        if server_exits:
            try:
                srv.wait(timeout=3)
            except subprocess.TimeoutExpired:
                pass
        else:
            time.sleep(0.3)  # let the server write its final lines
    finally:
        res["server_rc"] = sv.stop(srv)
    out, err_text = sv.read_text(cli_out), sv.read_text(cli_err)
    res["client_output_tail"] = (out + err_text)[-3000:]
    if timed_out:
        res["error"] = "client timed out after %.0f s" % client_limit(args)
        return None
    if rc != 0:
        res["error"] = "client exited %s: %s" % (rc, sv.tail_line(cli_err) or
                                                 sv.tail_line(cli_out) or "(no output)")
        return None
    return out, err_text, sv.read_text(srv_out)


# ---------------------------------------------------------------------------------------
# uringbench


def run_uringbench(args, run, tmp, tool="uringbench"):
    """One rr run; tool "uringbench-prev" runs the --prev-binary build instead."""
    binary = args.prev_binary if tool == "uringbench-prev" else args.binary
    tag = "%s-r%d" % ("ubp" if tool == "uringbench-prev" else "ub", run)
    srv_cmd = in_ns(NS_SRV, CPU_SRV, [binary, "recv", "--once", "--port", str(UB_PORT)]
                    + shlex.split(args.ub_recv_args))
    cli_cmd = in_ns(NS_CLI, CPU_CLI, [binary, "crr" if args.crr else "rr", "--target", ADDR_SRV, "--port",
                                      str(UB_PORT), "-t", sv.time_arg(args.time), "--req", MSG_LEN,
                                      "--resp", MSG_LEN, "-J"] + sv.UB_SAME_WINDOW + (["-u"] if args.udp else [])
                        + shlex.split(args.ub_rr_args))
    res = new_result(tool, run, shlex.join(cli_cmd), shlex.join(srv_cmd))
    if not args.binary_ok:
        res["error"] = args.binary_problem
        return res
    got = run_pair(res, srv_cmd, UB_PORT, cli_cmd, args, tmp, tag, server_exits=True)
    if got is None:
        return res
    stdout = got[0]
    doc = sv.parse_json_doc(stdout)
    if not isinstance(doc, dict):
        res["error"] = "rr printed no JSON document: %s" % (sv.tail_line(
            os.path.join(tmp, "%s.cli.out" % tag)) or "(empty)")
        return res
    try:
        lat = doc["latency_us"]
        res["tps"] = float(doc["transactions_per_second"])
        res["p50_us"] = float(lat["p50"])
        res["p99_us"] = float(lat["p99"])
        for k in ("mean", "min", "max"):
            if lat.get(k) is not None:
                res[k + "_us"] = float(lat[k])
        if lat.get("count") is not None:
            res["transactions"] = int(lat["count"])
    except (KeyError, TypeError, ValueError) as e:
        res["error"] = "JSON lacks transactions_per_second / latency_us.{p50,p99}: %r" % (e,)
        return res
    if not res["tps"]:
        res["error"] = "0 transactions/s"
        return res
    res["ok"] = True
    return res


# ---------------------------------------------------------------------------------------
# iperf2

# Unit suffix -> factor to microseconds for iperf2's latency columns.
_UNIT_US = {"ms": 1000.0, "us": 1.0, "usec": 1.0, "msec": 1000.0, "s": 1e6, "sec": 1e6}


def parse_iperf2_bb(text, duration):
    """Parse iperf 2.1.8 bounceback client output (-e enhanced format).

    Observed final line of a 0.00-T interval, e.g.
      [  1] 0.00-10.00 sec  1.23 MBytes  1.03 Mbits/sec  20150=0.494/0.021/3.210/0.123 ms
            0  14K/37 us  2015 rps
    i.e. `CNT=avg/min/max/stdev ms` (bounceback count and RTT statistics) and `N rps`.
    The BB8-PDF histogram line that follows gives binned p50/p99 (see below)."""
    out = {}
    best = None
    for line in text.splitlines():
        m = re.search(r"\]\s+([0-9.]+)\s*-\s*([0-9.]+)\s+sec\b(.*)", line)
        if not m:
            continue
        start, end, rest = float(m.group(1)), float(m.group(2)), m.group(3)
        bb = re.search(r"\b(\d+)=([0-9.]+)/([0-9.]+)/([0-9.]+)/([0-9.]+)\s*(ms|us|usec|msec|sec|s)\b",
                       rest)
        if start != 0.0 or not bb:
            continue
        if best is None or end >= best["end"]:
            f = _UNIT_US[bb.group(6)]
            best = {"start": start, "end": end, "count": int(bb.group(1)),
                    "mean_us": float(bb.group(2)) * f, "min_us": float(bb.group(3)) * f,
                    "max_us": float(bb.group(4)) * f, "stdev_us": float(bb.group(5)) * f}
            rps = re.search(r"([0-9.]+)\s*rps\b", rest)
            best["rps"] = float(rps.group(1)) if rps else None
    if best:
        out.update(best)
    # Its bounceback RTT histogram, e.g.
    #   [  1] 0.0000-2.0042 sec BB8(f)-PDF: bin(w=100us):cnt(17252)=1:16140,2:618,...,101:1
    #         (5.00/95.00/99.7%=1/2/40,Outliers=0,obl/obu=0/0)
    # gives p50/p99 only to a bin's resolution: report the upper edge of the bin
    # (index × width) in which the percentile falls, marked as binned.
    for line in text.splitlines():
        m = re.search(r"\]\s+0\.0+-[0-9.]+\s+sec\s+BB\S*PDF:\s*bin\(w=([0-9.]+)(us|ms)\):"
                      r"cnt\((\d+)\)=([0-9:,]+)", line)
        if not m:
            continue
        w = float(m.group(1)) * _UNIT_US[m.group(2)]
        bins = sorted((int(a), int(b)) for a, b in
                      (x.split(":") for x in m.group(4).split(",") if ":" in x))
        total = sum(c for _, c in bins)
        pct = {}
        for q in (50, 99):
            need, acc = total * q / 100.0, 0
            for idx, c in bins:
                acc += c
                if acc >= need:
                    pct["p%d" % q] = idx * w
                    break
        out["pdf_percentiles_us"] = pct
        out["pdf_bin_us"] = w
    return out


def run_iperf2(args, run, tmp):
    srv_cmd = in_ns(NS_SRV, CPU_SRV, ["iperf", "-s", "-p", str(IPERF_PORT)])
    cli_cmd = in_ns(NS_CLI, CPU_CLI, ["iperf", "-c", ADDR_SRV, "-p", str(IPERF_PORT),
                                      "--bounceback", "--bounceback-period", "0", "-l", MSG_LEN,
                                      "-t", "%g" % args.time])
    res = new_result("iperf2", run, shlex.join(cli_cmd), shlex.join(srv_cmd))
    if not shutil.which("iperf"):
        res["error"] = "iperf not installed (apt-get install -y iperf)"
        return res
    got = run_pair(res, srv_cmd, IPERF_PORT, cli_cmd, args, tmp, "iperf-r%d" % run)
    if got is None:
        return res
    rep = parse_iperf2_bb(got[0] + "\n" + got[1], args.time)
    res["report"] = rep
    if "count" not in rep:
        res["error"] = "no 0.00-T bounceback report line found: %s" % (
            sv.tail_line(os.path.join(tmp, "iperf-r%d.cli.out" % run)) or "(empty)")
        return res
    dur = rep["end"] - rep["start"]
    res["transactions"] = rep["count"]
    res["tps"] = rep["count"] / dur if dur > 0 else rep.get("rps")
    res["mean_us"], res["min_us"], res["max_us"] = rep["mean_us"], rep["min_us"], rep["max_us"]
    pct = rep.get("pdf_percentiles_us") or {}
    # iperf2 only gives a histogram with 100 µs bins: its p50/p99 are bin upper edges.
    res["p50_us"] = pct.get("p50")
    res["p99_us"] = pct.get("p99")
    res["percentiles_binned_us"] = rep.get("pdf_bin_us")
    if not res["tps"]:
        res["error"] = "0 bouncebacks"
        return res
    res["ok"] = True
    return res


# ---------------------------------------------------------------------------------------
# sockperf


def parse_sockperf(text):
    """Parse sockperf 3.7 ping-pong output (client stdout+stderr), e.g.
      sockperf: [Valid Duration] RunTime=9.550 sec; SentMessages=123456; ReceivedMessages=123456
      sockperf: ====> avg-rtt=24.690 (std-dev=1.234)
      sockperf: Summary: Round trip is 24.690 usec
      sockperf: ---> percentile 99.000 =   31.123
      sockperf: ---> percentile 50.000 =   24.012
    ("Latency is" / avg-lat without --full-rtt)."""
    out = {}
    m = re.search(r"\[Valid Duration\]\s*RunTime=([0-9.]+)\s*sec;\s*SentMessages=(\d+);\s*"
                  r"ReceivedMessages=(\d+)", text)
    if m:
        out["runtime_s"] = float(m.group(1))
        out["sent"] = int(m.group(2))
        out["received"] = int(m.group(3))
    m = re.search(r"Summary:\s*(?:Round trip|Latency) is\s*([0-9.]+)\s*usec", text)
    if m:
        out["mean_us"] = float(m.group(1))
    pct = {}
    for pm in re.finditer(r"--->\s*percentile\s*([0-9.]+)\s*=\s*([0-9.]+)", text):
        pct[float(pm.group(1))] = float(pm.group(2))
    out["percentiles_us"] = {("p%g" % k): v for k, v in sorted(pct.items())}
    m = re.search(r"<MIN> observation\s*=\s*([0-9.]+)", text)
    if m:
        out["min_us"] = float(m.group(1))
    m = re.search(r"<MAX> observation\s*=\s*([0-9.]+)", text)
    if m:
        out["max_us"] = float(m.group(1))
    out["full_rtt"] = "Round trip" in text or "avg-rtt" in text
    return out


def run_sockperf(args, run, tmp, spin=False):
    proto = ([] if args.udp else ["--tcp"]) + (SOCKPERF_SPIN if spin else [])
    srv_cmd = in_ns(NS_SRV, CPU_SRV, ["sockperf", "server"] + proto + ["-i", ADDR_SRV, "-p",
                                                                       str(SOCKPERF_PORT)])
    cli_cmd = in_ns(NS_CLI, CPU_CLI, ["sockperf", "ping-pong"] + proto + [
        "-i", ADDR_SRV, "-p", str(SOCKPERF_PORT), "-m", MSG_LEN, "-t", "%d" % max(1, round(args.time)),
        "--full-rtt"])
    res = new_result("sockperf-spin" if spin else "sockperf", run, shlex.join(cli_cmd),
                     shlex.join(srv_cmd))
    if not shutil.which("sockperf"):
        res["error"] = "sockperf not installed (apt-get install -y sockperf)"
        return res
    got = run_pair(res, srv_cmd, SOCKPERF_PORT, cli_cmd, args, tmp, "sockperf-r%d" % run)
    if got is None:
        return res
    rep = parse_sockperf(got[0] + "\n" + got[1])
    res["report"] = rep
    if not rep.get("runtime_s") or "received" not in rep:
        res["error"] = "no [Valid Duration] line: %s" % (
            sv.tail_line(os.path.join(tmp, "sockperf-r%d.cli.out" % run)) or "(empty)")
        return res
    if not rep["full_rtt"]:
        res["error"] = "sockperf did not report round-trip times (--full-rtt ignored?)"
        return res
    res["transactions"] = rep["received"]
    res["tps"] = rep["received"] / rep["runtime_s"]
    pct = rep["percentiles_us"]
    res["p50_us"], res["p99_us"] = pct.get("p50"), pct.get("p99")
    res["mean_us"], res["min_us"], res["max_us"] = (rep.get("mean_us"), rep.get("min_us"),
                                                    rep.get("max_us"))
    if not res["tps"]:
        res["error"] = "0 messages received"
        return res
    res["ok"] = True
    return res


def parse_neper(text):
    """neper prints key=value lines; latencies are in seconds."""
    kv = dict(re.findall(r"^(\w+)=(\S+)$", text, re.M))
    out = {}
    for key in ("throughput", "num_transactions", "latency_p50", "latency_p99", "latency_mean",
                "latency_min", "latency_max"):
        try:
            out[key] = float(kv[key])
        except (KeyError, ValueError):
            pass
    return out


def run_neper(args, run, tmp):
    """One neper tcp_crr run: one flow, one thread, the same sizes and pinning."""
    # --nolog: neper otherwise writes a log file into the working directory per process.
    common = ["-Q", MSG_LEN, "-R", MSG_LEN, "-l", "%d" % max(1, round(args.time)), "-p", "50,99",
              "--nolog"]
    srv_cmd = in_ns(NS_SRV, CPU_SRV, ["tcp_crr"] + common)
    cli_cmd = in_ns(NS_CLI, CPU_CLI, ["tcp_crr", "-c", "-H", ADDR_SRV] + common)
    res = new_result("neper", run, shlex.join(cli_cmd), shlex.join(srv_cmd))
    if not shutil.which("tcp_crr"):
        res["error"] = "neper tcp_crr not installed (scripts/install-deps.sh --peers)"
        return res
    got = run_pair(res, srv_cmd, NEPER_CONTROL_PORT, cli_cmd, args, tmp, "neper-r%d" % run,
                   server_exits=True)
    if got is None:
        return res
    rep = parse_neper(got[0] + "\n" + got[1])
    res["report"] = rep
    if not rep.get("throughput"):
        res["error"] = "no throughput= line: %s" % (
            sv.tail_line(os.path.join(tmp, "neper-r%d.cli.out" % run)) or "(empty)")
        return res
    res["tps"] = rep["throughput"]
    res["transactions"] = int(rep.get("num_transactions", 0))
    for ours, theirs in (("p50_us", "latency_p50"), ("p99_us", "latency_p99"),
                         ("mean_us", "latency_mean"), ("min_us", "latency_min"),
                         ("max_us", "latency_max")):
        if theirs in rep:
            res[ours] = rep[theirs] * 1e6
    res["ok"] = True
    return res


RUNNERS = {"uringbench": run_uringbench, "iperf2": run_iperf2, "sockperf": run_sockperf,
           "uringbench-prev": lambda args, run, tmp: run_uringbench(args, run, tmp,
                                                                    tool="uringbench-prev"),
           "sockperf-spin": lambda args, run, tmp: run_sockperf(args, run, tmp, spin=True),
           "neper": run_neper}


# ---------------------------------------------------------------------------------------
# summary


def build_summary(results):
    tools = {}
    for tool in TOOLS:
        rs = [r for r in results if r["tool"] == tool]
        ok = [r for r in rs if r["ok"]]
        tools[tool] = {
            "ok": len(ok), "runs": len(rs),
            "tps": sv.summarize([r["tps"] for r in ok]),
            "p50_us": sv.summarize([r["p50_us"] for r in ok]),
            "p99_us": sv.summarize([r["p99_us"] for r in ok]),
            "mean_us": sv.summarize([r["mean_us"] for r in ok]),
            "errors": sorted({r["error"] for r in rs if not r["ok"] and r["error"]}),
        }
    peers = [p for p in PEERS if tools[p]["tps"]]
    better = max(peers, key=lambda p: tools[p]["tps"]["median"]) if peers else None
    u = tools["uringbench"]
    cmp = {"better_peer": better, "tps_ratio": None, "p99_ratio": None, "tps_met": None,
           "p99_met": None, "verdict": None}
    if better and u["tps"]:
        b = tools[better]
        cmp["tps_ratio"] = u["tps"]["median"] / b["tps"]["median"]
        cmp["tps_met"] = cmp["tps_ratio"] >= TPS_TARGET
        if u["p99_us"] and b["p99_us"] and b["p99_us"]["median"]:
            cmp["p99_ratio"] = u["p99_us"]["median"] / b["p99_us"]["median"]
            cmp["p99_met"] = cmp["p99_ratio"] <= P99_TARGET
    if cmp["tps_met"] is False or cmp["p99_met"] is False:
        cmp["verdict"] = "NOT MET"
    elif cmp["tps_met"] and cmp["p99_met"]:
        cmp["verdict"] = "MET"
    else:
        cmp["verdict"] = "UNDETERMINED (missing data)"
    return {"tools": tools, "comparison": cmp}


def stat(t, key, nd):
    return sv.fmt_stat(t[key], nd)


def p_cell(tool, t, key):
    if t[key]:
        v = sv.fmt_num(t[key]["median"], 1)
        return ("≤" + v + " (binned)") if tool == "iperf2" else v
    if tool == "iperf2" and t["mean_us"]:
        return "n/a (mean %s)" % sv.fmt_num(t["mean_us"]["median"], 1)
    return "-"


def mode_name(args):
    return "UDP rr" if args.udp else "TCP crr" if args.crr else "TCP rr"


def explain(args):
    return [
        "One %s flow, one transaction in flight, netns pair over veth; server pinned to CPU %d, "
        "client to CPU %d (taskset); %g s per run, %d interleaved runs, order rotated per run and reversed every other run."
        % ("UDP" if args.udp else "TCP", CPU_SRV, CPU_CLI, args.time, args.runs)
        + (" crr: a new connection per transaction." if args.crr else ""),
        "Message size: %s B request and %s B response for every tool (iperf2's bounceback "
        "minimum)." % (MSG_LEN, MSG_LEN),
        "transactions/s: uringbench transactions_per_second (whole test: --warmup 0s "
        "--cooldown 0s); iperf2 bounceback count of the final 0.00-T report ÷ T; sockperf "
        "ReceivedMessages ÷ RunTime of its [Valid Duration] (sockperf always leaves out its "
        "first 400 ms and last 50 ms).",
        "Latency = round trip in µs: uringbench HdrHistogram p50/p99; sockperf --full-rtt "
        "percentiles; iperf2 2.1.8 prints mean/min/max/stdev and a histogram with 100 µs "
        "bins, so its p50/p99 are '≤' the upper edge of the bin they fall in (coarse).",
        "Values: median (min–max) over successful runs; p50/p99: median over runs.",
    ]


def comparison_lines(s):
    c = s["comparison"]
    u = s["tools"]["uringbench"]
    lines = ["Target (issue 29): %s." % TARGET]
    p = s["tools"].get("uringbench-prev")
    if p:
        lines.append(sv.prev_line("uringbench rr", [
            ("transactions/s", sv.prev_ratio(u["tps"], p["tps"])),
            ("p50", sv.prev_ratio(u["p50_us"], p["p50_us"])),
            ("p99", sv.prev_ratio(u["p99_us"], p["p99_us"]))]))
    if not c["better_peer"]:
        lines.append("No peer produced a result: the target cannot be assessed.")
        return lines
    if not u["tps"]:
        lines.append("uringbench produced no result: the target cannot be assessed.")
        return lines
    b = c["better_peer"]
    lines.append("Better peer by transactions/s: %s." % b)
    lines.append("uringbench/%s transactions/s: x%.2f (target ≥ x%.2f): %s" % (
        b, c["tps_ratio"], TPS_TARGET, "MET" if c["tps_met"] else "NOT MET"))
    if c["p99_ratio"] is not None:
        lines.append("uringbench/%s p99: x%.2f (target ≤ x%.2f): %s%s" % (
            b, c["p99_ratio"], P99_TARGET, "MET" if c["p99_met"] else "NOT MET",
            " (iperf2's p99 is a 100 µs-bin upper edge)" if b == "iperf2" else ""))
    else:
        lines.append("uringbench/%s p99: n/a (%s reports no p99)" % (b, b))
    lines.append("Overall: %s" % c["verdict"])
    return lines


def print_text(s, args, environment):
    print()
    print("uringbench vs %s, %s (%s)" % (", ".join(PEERS), mode_name(args), environment))
    for line in explain(args):
        print("  " + line)
    hdr = "%-15s %-30s %-18s %-18s %s" % ("tool", "transactions/s median (min–max)",
                                         "p50 µs median", "p99 µs median", "runs ok")
    print()
    print(hdr)
    print("-" * len(hdr))
    for tool in TOOLS:
        t = s["tools"][tool]
        print("%-15s %-30s %-18s %-18s %d/%d" % (tool, stat(t, "tps", 0), p_cell(tool, t, "p50_us"),
                                                p_cell(tool, t, "p99_us"), t["ok"], t["runs"]))
    print()
    for line in comparison_lines(s):
        print("  " + line)
    for tool in TOOLS:
        for e in s["tools"][tool]["errors"]:
            print("  %s failed: %s" % (tool, e))


def print_markdown(s, args, environment, cmdline):
    print()
    print("%s, one flow: uringbench vs %s (%s)." % (mode_name(args), ", ".join(PEERS), environment))
    print()
    for line in explain(args):
        print("- " + line)
    print()
    print("| tool | transactions/s median (min–max) | p50 µs (median) | p99 µs (median) | runs ok |")
    print("|---|---:|---:|---:|---:|")
    for tool in TOOLS:
        t = s["tools"][tool]
        print("| %s | %s | %s | %s | %d/%d |" % (tool, stat(t, "tps", 0), p_cell(tool, t, "p50_us"),
                                               p_cell(tool, t, "p99_us"), t["ok"], t["runs"]))
    print()
    for line in comparison_lines(s):
        print("- " + line)
    print()
    print("Command: `%s`" % cmdline)
    fails = [(tool, e) for tool in TOOLS for e in s["tools"][tool]["errors"]]
    if fails:
        print()
        for tool, e in fails:
            print("- %s failed: %s" % (tool, e))


def progress(res, runs):
    head = "[run %d/%d] %s" % (res["run"], runs, res["tool"])
    if res["ok"]:
        def f(x):
            return "-" if x is None else "%.1f" % x
        log("%s %.0f trans/s p50 %s µs p99 %s µs mean %s µs" % (
            head, res["tps"], f(res["p50_us"]), f(res["p99_us"]), f(res["mean_us"])))
    else:
        log("%s FAILED: %s" % (head, res["error"]))


# ---------------------------------------------------------------------------------------
# setup


def parse_args(argv):
    ap = argparse.ArgumentParser(
        description="uringbench rr vs iperf2 bounceback vs sockperf ping-pong on a local netns "
                    "pair (needs root).",
        epilog="Example: sudo python3 benches/rr_vs_peers.py --runs 5 --time 10 --markdown")
    ap.add_argument("--runs", type=int, default=5, help="interleaved runs per tool (default 5)")
    ap.add_argument("--time", type=float, default=10.0, help="seconds per run (default 10)")
    sv.add_common_args(ap)
    ap.add_argument("--ub-recv-args", default="", metavar="ARGS",
                    help="extra arguments for `uringbench recv`")
    ap.add_argument("--ub-rr-args", default="", metavar="ARGS",
                    help="extra arguments for `uringbench rr`, e.g. '--busy-poll off'")
    ap.add_argument("--udp", action="store_true",
                    help="UDP request/response: uringbench rr -u vs sockperf (iperf2 sits out)")
    ap.add_argument("--crr", action="store_true",
                    help="connect/request/response/close: uringbench crr vs neper tcp_crr")
    args = ap.parse_args(argv)
    sv.check_prev_binary(ap, args)
    if args.udp and args.crr:
        ap.error("--udp and --crr exclude each other")
    if args.runs < 1:
        ap.error("--runs must be >= 1")
    if not (1 <= args.time <= 3600):
        ap.error("--time must be in [1, 3600] seconds (sockperf takes whole seconds)")
    return args


def check_prereqs():
    problems = []
    if os.geteuid() != 0:
        problems.append("must run as root (network namespaces)")
    for tool in ("ip", "ss", "taskset"):
        if not shutil.which(tool):
            problems.append("%s not found" % tool)
    if not os.access(sv.PAIR_SCRIPT, os.R_OK):
        problems.append("%s not found" % sv.PAIR_SCRIPT)
    if (os.cpu_count() or 0) < 2:
        problems.append("needs at least 2 CPUs (client on CPU 0, server on CPU 1)")
    return problems


def main(argv):
    global TOOLS, PEERS
    args = parse_args(argv)
    if args.udp:
        TOOLS, PEERS = ("uringbench", "sockperf", "sockperf-spin"), ("sockperf", "sockperf-spin")
    if args.crr:
        TOOLS, PEERS = ("uringbench", "neper"), ("neper",)
    if args.prev_binary:
        TOOLS = TOOLS[:1] + ("uringbench-prev",) + TOOLS[1:]
    problems = check_prereqs()
    if problems:
        for p in problems:
            log("error: " + p)
        return 2
    cmdline = shlex.join(["python3", os.path.relpath(os.path.abspath(sys.argv[0]), REPO)]
                         + list(argv))
    for tool, pkg in (("iperf", "iperf"), ("sockperf", "sockperf")):
        if not shutil.which(tool):
            log("warning: %s not installed (apt-get install -y %s): its runs will fail"
                % (tool, pkg))
    if args.runs < 5:
        log("note: --runs %d < 5: read medians of >= 5 runs" % args.runs)

    signal.signal(signal.SIGTERM, sv._on_sigterm)
    signal.signal(signal.SIGHUP, sv._on_sigterm)
    results = []
    environment = sv.environment_line()
    rc = 0
    pair_up = False
    try:
        sv.prepare_binary(args)
        sv.idle_check()
        log(sv.pair("up"))
        pair_up = True
        with tempfile.TemporaryDirectory(prefix="ubrr-") as tmp:
            for run in range(1, args.runs + 1):
                order = sv.run_order(TOOLS, run)
                for pos, tool in enumerate(order, 1):
                    res = RUNNERS[tool](args, run, tmp)
                    res["order"] = pos
                    results.append(res)
                    progress(res, args.runs)
                    time.sleep(1.0)  # let TIME_WAIT, softirq backlog and timers settle
    except (KeyboardInterrupt, sv.Interrupted) as e:
        log("interrupted (%s): cleaning up" % (str(e) or "Ctrl-C"))
        rc = 130
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        log("error: %s" % e)
        rc = 1
    finally:
        down = (lambda: sv.pair("down")) if pair_up or rc in (1, 130) else None
        if not sv.teardown(down, PAIR):
            rc = rc or 1

    if rc == 0 and not any(r["ok"] for r in results):
        rc = 1
    summary = build_summary(results)
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"command": cmdline, "environment": environment,
                       "explanation": explain(args), "target": TARGET,
                       "settings": {"runs": args.runs, "time_s": args.time,
                                    "binary": args.binary, "prev_binary": args.prev_binary},
                       "results": results, "summary": summary, "exit_status": rc}, f,
                      indent=2, ensure_ascii=False)
        log("raw results written to %s" % args.json_out)
    if results:
        if args.markdown:
            print_markdown(summary, args, environment, cmdline)
        else:
            print_text(summary, args, environment)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
