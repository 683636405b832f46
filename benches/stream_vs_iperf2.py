#!/usr/bin/env python3
"""Side-by-side TCP stream benchmark: uringbench vs iperf2 (2.1.x), on a local netns pair.

    sudo python3 benches/stream_vs_iperf2.py [--runs 5] [--time 10] [--queues 1,16]
        [--len 128K] [--binary target/release/uringbench] [--mtu 1500]
        [--json-out FILE] [--markdown]

What it does
  * Creates the netns pair "ubbench" with scripts/netns-pair.sh (ubbench-a = sender host
    10.77.0.1, ubbench-b = receiver host 10.77.0.2) and removes it at the end, also on
    Ctrl-C / SIGTERM / errors.
  * For each queue count Q and each run r, runs uringbench and iperf2 once each,
    interleaved; the order rotates from run to run and runs backwards every other run (order
    bias: each tool goes first in turn, and none always follows the same one).
  * Both tools get the same pinning: receiver on CPU 1, sender on CPU 0 (taskset -c).
  * Every process is bounded in time (client timeouts, server shutdown SIGTERM -> SIGKILL).

What the numbers mean
  * Throughput (Gbit/s) is what the RECEIVER counted:
      - uringbench: sum.receiver.bits_per_second from `send --format json`, run with
        `--warmup 0s --cooldown 0s` (UB_SAME_WINDOW) so that its window is the whole
        connection, slow start included, like iperf2's;
      - iperf2: the server's CSV report (-y C): bytes of all streams ÷ stream duration
        (whole connection, slow start included).
    Same window for every tool, rather than iperf2's interval reports after a warm-up:
    iperf2's CSV intervals are rounded to 0.1 s and its per-stream lines carry no [SUM], so
    cutting them at a warm-up adds error of its own; uringbench's window, by contrast, can
    simply start at the first byte.
  * CPU-s/GB: busy jiffies (user+nice+system+irq+softirq+steal, not idle/iowait) of cpu0
    and cpu1 from /proc/stat, read right before the client starts and right after it
    exits, converted with SC_CLK_TCK, divided by the receiver's WHOLE-RUN bytes / 1e9:
      - uringbench: sum.receiver.total_bytes if the JSON has it (whole run), else
        sum.receiver.bytes (with no warm-up they are the same bytes);
      - iperf2: the server's total bytes (sum of the per-stream final reports).
    /proc/stat is used rather than per-process times because on this kind of VM softirq
    ticks are charged both to the interrupted task and to softirq; the per-CPU totals count each tick once.
    The window includes process start-up, connection set-up and warm-up for both tools,
    and anything else running on the machine: keep the machine idle while benchmarking.
  * On veth the receive-side stack work runs in softirq on the sender's CPU and results are
    bimodal: use >= 5 runs and read the medians.

Exit status: 0 when every (Q, run) slot produced a result for at least one tool; 1 when some
slot failed for both tools; 2 on bad arguments or missing prerequisites; 130 on Ctrl-C.
Targets are reported, not asserted.

Standard library only.
"""

import argparse
import json
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAIR_SCRIPT = os.path.join(REPO, "scripts", "netns-pair.sh")
DEFAULT_BINARY = "target/release/uringbench"

PAIR = "ubbench"
NS_SEND = PAIR + "-a"
NS_RECV = PAIR + "-b"
ADDR_RECV = "10.77.0.2"
UB_PORT = 5300
IPERF_PORT = 5001
CPU_SEND = 0
CPU_RECV = 1

LISTEN_TIMEOUT_S = 5.0
CLK_TCK = os.sysconf("SC_CLK_TCK")
# The fair rule for every bench: the peers (iperf2, sockperf, wrk) measure from their first
# byte, so uringbench's headline does too (no warm-up or cool-down left out of its window).
UB_SAME_WINDOW = ["--warmup", "0s", "--cooldown", "0s"]

# Every child we start, so that cleanup can find them (each in its own session/group).
_children = []


def log(msg):
    print(msg, file=sys.stderr, flush=True)


class Interrupted(Exception):
    pass


def _on_sigterm(signum, frame):
    raise Interrupted("signal %d" % signum)


# ---------------------------------------------------------------------------------------
# processes


def spawn(cmd, stdout, stderr):
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr,
                         start_new_session=True)
    _children.append(p)
    return p


def stop(p, grace=2.0):
    """SIGTERM the process group, then SIGKILL after `grace` seconds. Returns rc."""
    if p.poll() is None:
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                break
            try:
                p.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
    else:
        # the leader is gone; make sure nothing else of its group survives
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    if p in _children:
        _children.remove(p)
    return p.returncode


def stop_all():
    for p in list(_children):
        stop(p, grace=1.0)


def run_bounded(cmd, timeout, stdout_path, stderr_path):
    """Run cmd to completion within `timeout` seconds. Returns (rc, timed_out)."""
    with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
        p = spawn(cmd, out, err)
        try:
            p.wait(timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
        rc = stop(p)
    return rc, timed_out


def read_text(path, limit=None):
    try:
        with open(path, "r", errors="replace") as f:
            s = f.read()
    except OSError:
        return ""
    if limit is not None and len(s) > limit:
        s = "..." + s[-limit:]
    return s


def tail_line(path, n=300):
    """Last non-empty lines of a log, squeezed onto one line for error messages."""
    s = read_text(path).strip()
    if not s:
        return ""
    lines = [l.strip() for l in s.splitlines() if l.strip()]
    out = " | ".join(lines[-3:])
    return out[-n:]


def port_listening(port):
    try:
        r = subprocess.run(["ip", "netns", "exec", NS_RECV, "ss", "-ltunH"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                           timeout=5, text=True)
    except subprocess.TimeoutExpired:
        return False
    return re.search(r":%d\s" % port, r.stdout + "\n") is not None


def wait_listen(proc, port, timeout=LISTEN_TIMEOUT_S):
    """Poll ss in the receiver namespace until `port` listens (TCP, or a bound UDP socket).
    Returns None or an error."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return "receiver exited (rc %s) before listening" % proc.returncode
        if port_listening(port):
            return None
        time.sleep(0.05)
    return "port %d not listening after %.0f s" % (port, timeout)


# ---------------------------------------------------------------------------------------
# CPU accounting


def cpu_busy_jiffies():
    """{cpu_index: busy jiffies} for cpu0 and cpu1 from /proc/stat.

    busy = user + nice + system + irq + softirq + steal (not idle, not iowait; guest time
    is already included in user/nice)."""
    busy = {}
    with open("/proc/stat") as f:
        for line in f:
            m = re.match(r"cpu(\d+)\s+(.*)", line)
            if not m:
                continue
            cpu = int(m.group(1))
            if cpu not in (CPU_SEND, CPU_RECV):
                continue
            v = [int(x) for x in m.group(2).split()] + [0] * 10
            user, nice, system, _idle, _iowait, irq, softirq, steal = v[:8]
            busy[cpu] = user + nice + system + irq + softirq + steal
    return busy


def cpu_delta_s(before, after):
    return {("cpu%d" % c): (after[c] - before[c]) / CLK_TCK for c in before}


# ---------------------------------------------------------------------------------------
# one run of each tool


def new_result(tool, q, run, cmd):
    return {"tool": tool, "queues": q, "run": run, "ok": False, "error": None,
            "client_cmd": cmd, "gbps": None, "bytes_for_cpu": None,
            "bytes_for_cpu_source": None, "cpu_busy_s": None, "cpu_s_per_gb": None,
            "client_wall_s": None}


def finish_cpu(res, cpu):
    res["cpu_busy_s"] = cpu
    total = sum(cpu.values())
    if res["bytes_for_cpu"]:
        res["cpu_s_per_gb"] = total / (res["bytes_for_cpu"] / 1e9)


def parse_json_doc(text):
    """The JSON document a tool printed, tolerating stray text around it; None if there is none."""
    try:
        return json.loads(text)
    except ValueError:
        i, j = text.find("{"), text.rfind("}")
        if 0 <= i < j:
            try:
                return json.loads(text[i:j + 1])
            except ValueError:
                return None
    return None


def time_arg(t):
    return ("%ds" % t) if float(t).is_integer() else ("%dms" % round(t * 1000))


def run_uringbench(args, q, run, tmp, binary=None, tool="uringbench"):
    """One uringbench run; `binary`/`tool` name another build (--prev-binary)."""
    binary = binary or args.binary
    tag = "%s-q%d-r%d" % (tool, q, run)
    send_cmd = ["ip", "netns", "exec", NS_SEND, "taskset", "-c", str(CPU_SEND), binary,
                "send", "--target", ADDR_RECV, "--port", str(UB_PORT), "--queues", str(q),
                "--time", time_arg(args.time), "--len", args.len, "--format", "json"]
    send_cmd += UB_SAME_WINDOW + shlex.split(args.ub_send_args)
    recv_cmd = ["ip", "netns", "exec", NS_RECV, "taskset", "-c", str(CPU_RECV), binary,
                "recv", "--once", "--port", str(UB_PORT)] + shlex.split(args.ub_recv_args)
    res = new_result(tool, q, run, shlex.join(send_cmd))
    res["server_cmd"] = shlex.join(recv_cmd)
    if binary == args.binary and not args.binary_ok:
        res["error"] = args.binary_problem
        return res
    if not os.access(binary, os.X_OK):
        res["error"] = "%s is not an executable" % binary
        return res

    srv_out, srv_err = [os.path.join(tmp, tag + x) for x in (".recv.out", ".recv.err")]
    cli_out, cli_err = [os.path.join(tmp, tag + x) for x in (".send.out", ".send.err")]
    with open(srv_out, "wb") as so, open(srv_err, "wb") as se:
        srv = spawn(recv_cmd, so, se)
    try:
        err = wait_listen(srv, UB_PORT)
        if err:
            res["error"] = "recv: %s: %s" % (err, tail_line(srv_err) or "(no stderr)")
            return res
        before = cpu_busy_jiffies()
        t0 = time.monotonic()
        rc, timed_out = run_bounded(send_cmd, args.time * 2 + 30, cli_out, cli_err)
        res["client_wall_s"] = time.monotonic() - t0
        cpu = cpu_delta_s(before, cpu_busy_jiffies())
        res["client_rc"] = rc
        # with --once the receiver exits by itself; give it a moment, then stop it
        try:
            srv.wait(timeout=3)
        except subprocess.TimeoutExpired:
            pass
        res["server_exited_by_itself"] = srv.poll() is not None
    finally:
        res["server_rc"] = stop(srv)

    stdout = read_text(cli_out)
    if timed_out:
        res["error"] = "send timed out after %.0f s" % (args.time * 2 + 30)
        return res
    doc = parse_json_doc(stdout)
    if rc != 0:
        res["error"] = "send exited %s: %s" % (rc, tail_line(cli_err) or tail_line(cli_out)
                                                or "(no output)")
        res["json"] = doc
        return res
    if not isinstance(doc, dict):
        res["error"] = "send printed no JSON document: %s" % (tail_line(cli_out) or "(empty)")
        return res
    res["json"] = doc
    try:
        recv = doc["sum"]["receiver"]
        res["gbps"] = float(recv["bits_per_second"]) / 1e9
        # Divide CPU by the whole-run receiver bytes when the JSON reports them
        # (total_bytes: warm-up + window + cool-down, matching the CPU window, which spans
        # the whole client run); otherwise by the measured-window bytes.
        if recv.get("total_bytes") is not None:
            res["bytes_for_cpu"] = int(recv["total_bytes"])
            res["bytes_for_cpu_source"] = "sum.receiver.total_bytes"
        else:
            res["bytes_for_cpu"] = int(recv["bytes"])
            res["bytes_for_cpu_source"] = "sum.receiver.bytes"
        res["window_bytes"] = int(recv["bytes"])
    except (KeyError, TypeError, ValueError) as e:
        res["error"] = "JSON lacks sum.receiver.{bits_per_second,bytes}: %r" % (e,)
        return res
    finish_cpu(res, cpu)
    if not res["bytes_for_cpu"]:
        res["error"] = "receiver counted 0 bytes"
        return res
    res["ok"] = True
    return res


def parse_iperf2_csv(text):
    """Parse iperf2 -y C report lines (TCP).

    Line format (iperf 2.1.8):
      timestamp,src_addr,src_port,dst_addr,dst_port,transfer_id,start-end,bytes,bits_per_second
    Observed with 2.1.8 (server side, -y C, no -i):
      * one final line per stream, no [SUM] line at all, even with -P > 1 (text mode prints
        [SUM]; CSV mode does not);
      * timestamp 19700101000000 (epoch 0) unless -i is given;
      * the interval is rounded to 0.1 s ("0.0-10.0") but bits_per_second uses the exact
        duration, so duration = bytes * 8 / bits_per_second;
      * transfer ids on the server keep counting across connections.
    A SUM line (other iperf2 versions) has a negative transfer id; it is used if present.
    Returns dict with streams, sum_line, total_bytes, gbps."""
    streams = {}
    sum_line = None
    for line in text.splitlines():
        f = line.strip().split(",")
        if len(f) < 9:
            continue
        try:
            tid = int(f[5])
            start, end = (float(x) for x in f[6].split("-"))
            nbytes = int(f[-2])
            bps = float(f[-1])
        except ValueError:
            continue
        rec = {"src": "%s:%s" % (f[1], f[2]), "dst": "%s:%s" % (f[3], f[4]), "id": tid,
               "start": start, "end": end, "bytes": nbytes, "bits_per_second": bps,
               "duration": (nbytes * 8 / bps) if bps > 0 else (end - start)}
        if tid < 0:
            sum_line = rec
            continue
        # keep the whole-connection report of each stream: start 0, latest end
        key = (rec["src"], rec["dst"])
        if start == 0.0 and (key not in streams or end >= streams[key]["end"]):
            streams[key] = rec
    out = {"streams": list(streams.values()), "sum_line": sum_line}
    if sum_line is not None:
        out["total_bytes"] = sum_line["bytes"]
        out["gbps"] = sum_line["bits_per_second"] / 1e9
        out["rate_source"] = "SUM line"
    elif streams:
        total = sum(s["bytes"] for s in streams.values())
        # streams run concurrently; divide by the longest exact stream duration
        dur = max(s["duration"] for s in streams.values())
        out["total_bytes"] = total
        out["gbps"] = total * 8 / dur / 1e9 if dur > 0 else None
        out["rate_source"] = "sum of %d stream lines / %.4f s" % (len(streams), dur)
    return out


def run_iperf2(args, q, run, tmp):
    tag = "iperf-q%d-r%d" % (q, run)
    srv_cmd = ["ip", "netns", "exec", NS_RECV, "taskset", "-c", str(CPU_RECV),
               "stdbuf", "-oL", "iperf", "-s", "-p", str(IPERF_PORT), "-y", "C"]
    cli_cmd = ["ip", "netns", "exec", NS_SEND, "taskset", "-c", str(CPU_SEND),
               "iperf", "-c", ADDR_RECV, "-p", str(IPERF_PORT), "-P", str(q),
               "-l", args.len, "-t", ("%g" % args.time)]
    res = new_result("iperf2", q, run, shlex.join(cli_cmd))
    res["server_cmd"] = shlex.join(srv_cmd)
    srv_out, srv_err = [os.path.join(tmp, tag + x) for x in (".srv.out", ".srv.err")]
    cli_out, cli_err = [os.path.join(tmp, tag + x) for x in (".cli.out", ".cli.err")]
    with open(srv_out, "wb") as so, open(srv_err, "wb") as se:
        srv = spawn(srv_cmd, so, se)
    timed_out = False
    try:
        err = wait_listen(srv, IPERF_PORT)
        if err:
            res["error"] = "iperf -s: %s: %s" % (err, tail_line(srv_err) or "(no stderr)")
            return res
        before = cpu_busy_jiffies()
        t0 = time.monotonic()
        limit = args.time * 2 + 30
        rc, timed_out = run_bounded(cli_cmd, limit, cli_out, cli_err)
        res["client_wall_s"] = time.monotonic() - t0
        cpu = cpu_delta_s(before, cpu_busy_jiffies())
        res["client_rc"] = rc
        # let the server write its per-stream reports (~0.5 s), up to 3 s
        time.sleep(0.5)
        deadline = time.monotonic() + 2.5
        while time.monotonic() < deadline:
            if len(parse_iperf2_csv(read_text(srv_out))["streams"]) >= q:
                break
            time.sleep(0.1)
    finally:
        res["server_rc"] = stop(srv)

    res["client_output_tail"] = read_text(cli_out, 2000)
    if timed_out:
        res["error"] = "iperf -c timed out after %.0f s" % limit
        return res
    if rc != 0:
        res["error"] = "iperf -c exited %s: %s" % (rc, tail_line(cli_err) or tail_line(cli_out)
                                                   or "(no output)")
        return res
    rep = parse_iperf2_csv(read_text(srv_out))
    res["server_report"] = rep
    if not rep["streams"] and rep["sum_line"] is None:
        res["error"] = "iperf -s printed no CSV report: %s" % (
            tail_line(srv_out) or tail_line(srv_err) or "(empty)")
        return res
    if rep["sum_line"] is None and len(rep["streams"]) != q:
        res["warning"] = "server reported %d streams, expected %d" % (len(rep["streams"]), q)
    res["gbps"] = rep["gbps"]
    res["bytes_for_cpu"] = rep["total_bytes"]
    res["bytes_for_cpu_source"] = "iperf2 server CSV total bytes (%s)" % rep["rate_source"]
    finish_cpu(res, cpu)
    if not rep["total_bytes"] or rep["gbps"] is None:
        res["error"] = "server counted 0 bytes"
        return res
    res["ok"] = True
    return res


# ---------------------------------------------------------------------------------------
# summary


def fmt_num(x, nd):
    return "-" if x is None else ("%.*f" % (nd, x))


def summarize(values):
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "n": len(values)}


def fmt_stat(s, nd):
    if s is None:
        return "-"
    return "%s (%s–%s)" % (fmt_num(s["median"], nd), fmt_num(s["min"], nd),
                           fmt_num(s["max"], nd))


def build_summary(results, queues):
    """Per queue count (only those that were attempted): medians, ranges and ratios."""
    table = []
    for q in queues:
        if not any(r["queues"] == q for r in results):
            continue
        row = {"queues": q, "tools": {}}
        for tool in tools_of(results):
            rs = [r for r in results if r["queues"] == q and r["tool"] == tool]
            ok = [r for r in rs if r["ok"]]
            row["tools"][tool] = {
                "ok": len(ok), "runs": len(rs),
                "gbps": summarize([r["gbps"] for r in ok]),
                "cpu": summarize([r["cpu_s_per_gb"] for r in ok]),
                "errors": sorted({r["error"] for r in rs if not r["ok"] and r["error"]}),
            }
        u, i = row["tools"]["uringbench"], row["tools"]["iperf2"]
        row["throughput_ratio"] = (u["gbps"]["median"] / i["gbps"]["median"]
                                   if u["gbps"] and i["gbps"] and i["gbps"]["median"] else None)
        row["cpu_ratio"] = (u["cpu"]["median"] / i["cpu"]["median"]
                            if u["cpu"] and i["cpu"] and i["cpu"]["median"] else None)
        p = row["tools"].get("uringbench-prev")
        row["prev_ratio"] = (u["gbps"]["median"] / p["gbps"]["median"]
                             if p and u["gbps"] and p["gbps"] and p["gbps"]["median"] else None)
        row["prev_cpu_ratio"] = (u["cpu"]["median"] / p["cpu"]["median"]
                                 if p and u["cpu"] and p["cpu"] and p["cpu"]["median"] else None)
        table.append(row)
    return table


def tools_of(results):
    """The tools of a run: uringbench and iperf2, and the previous build when compared."""
    tools = ["uringbench", "iperf2"]
    if any(r["tool"] == "uringbench-prev" for r in results):
        tools.insert(1, "uringbench-prev")
    return tools


def explain_header(args):
    return [
        "Receiver pinned to CPU %d, sender to CPU %d (taskset), netns pair over veth, "
        "MTU %d, --len %s, %g s per run, %d interleaved runs per queue count."
        % (CPU_RECV, CPU_SEND, args.mtu, args.len, args.time, args.runs),
        "Gbit/s: receiver-side, whole connection for both tools. uringbench: "
        "sum.receiver.bits_per_second with --warmup 0s --cooldown 0s; iperf2: server CSV "
        "bytes / stream duration.",
        "CPU-s/GB: /proc/stat busy time (user+nice+system+irq+softirq+steal) of cpu0+cpu1 "
        "from client start to client exit, / receiver whole-run bytes (uringbench: "
        "sum.receiver.total_bytes, else sum.receiver.bytes; iperf2: server total bytes).",
        "Values: median (min–max) over successful runs; ratios are uringbench/iperf2 "
        "of the medians.",
    ]


def ratio_lines(row):
    tr = row["throughput_ratio"]
    cr = row["cpu_ratio"]
    why = "n/a (no successful runs of %s)" % " and ".join(
        t for t in ("uringbench", "iperf2") if not row["tools"][t]["ok"])
    lines = ["uringbench/iperf2 throughput %s" % (("x%.2f (median)" % tr) if tr else why),
             "CPU-s/GB ratio %s" % (("%.2f" % cr) if cr else why)]
    if "uringbench-prev" in row["tools"]:
        pr, pc = row.get("prev_ratio"), row.get("prev_cpu_ratio")
        lines.append("this build / previous build: throughput %s, CPU-s/GB %s"
                     % (("x%.3f" % pr) if pr else "n/a", ("x%.3f" % pc) if pc else "n/a"))
    return lines


def print_text(table, args, environment):
    print()
    print("uringbench vs iperf2, TCP stream (%s)" % environment)
    for line in explain_header(args):
        print("  " + line)
    hdr = "%-7s %-11s %-26s %-26s %s" % ("queues", "tool", "Gbit/s median (min–max)",
                                          "CPU-s/GB median (min–max)", "runs ok")
    print()
    print(hdr)
    print("-" * len(hdr))
    for row in table:
        for tool in row["tools"]:
            t = row["tools"][tool]
            print("%-7d %-11s %-26s %-26s %d/%d" % (row["queues"], tool,
                                                    fmt_stat(t["gbps"], 2),
                                                    fmt_stat(t["cpu"], 3), t["ok"], t["runs"]))
        for line in ratio_lines(row):
            print("%-7s %s" % ("", line))
        for tool in row["tools"]:
            for e in row["tools"][tool]["errors"]:
                print("%-7s %s failed: %s" % ("", tool, e))
        print()


def print_markdown(table, args, environment, cmdline):
    print()
    print("TCP stream, uringbench vs iperf2 2.1.8 (%s)." % environment)
    print()
    for line in explain_header(args):
        print("- " + line)
    print()
    print("| queues | tool | Gbit/s median (min–max) | CPU-s/GB median (min–max) | runs ok |")
    print("|---:|---|---:|---:|---:|")
    for row in table:
        for tool in row["tools"]:
            t = row["tools"][tool]
            print("| %d | %s | %s | %s | %d/%d |" % (row["queues"], tool,
                                                    fmt_stat(t["gbps"], 2),
                                                    fmt_stat(t["cpu"], 3), t["ok"], t["runs"]))
        tr, cr = row["throughput_ratio"], row["cpu_ratio"]
        print("| %d | **uringbench/iperf2** | %s | %s | |" % (
            row["queues"], ("**x%.2f**" % tr) if tr else "n/a", ("**%.2f**" % cr) if cr else "n/a"))
        if "uringbench-prev" in row["tools"]:
            pr, pc = row.get("prev_ratio"), row.get("prev_cpu_ratio")
            print("| %d | **this/previous build** | %s | %s | |" % (
                row["queues"], ("x%.3f" % pr) if pr else "n/a", ("x%.3f" % pc) if pc else "n/a"))
    print()
    print("Command: `%s`" % cmdline)
    failures = [(row["queues"], tool, e) for row in table for tool in row["tools"]
                for e in row["tools"][tool]["errors"]]
    if failures:
        print()
        for q, tool, e in failures:
            print("- q=%d %s failed: %s" % (q, tool, e))


def environment_line():
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return "Linux %s, %d CPUs%s" % (os.uname().release, os.cpu_count() or 0,
                                    (", " + model) if model else "")


# ---------------------------------------------------------------------------------------
# setup


def add_common_args(ap):
    """The options every benchmark script takes: which binary, and the output forms."""
    ap.add_argument("--binary", default=DEFAULT_BINARY,
                    help="uringbench binary (default %s; built with cargo build --release "
                         "if missing)" % DEFAULT_BINARY)
    ap.add_argument("--no-build", action="store_true",
                    help="do not run cargo build --release when the binary is missing")
    ap.add_argument("--json-out", metavar="FILE", help="write raw per-run results as JSON")
    ap.add_argument("--markdown", action="store_true",
                    help="print the final table as Markdown (for the README)")
    ap.add_argument("--prev-binary", metavar="PATH",
                    help="a previous uringbench build, run interleaved with the others "
                         "(reported as uringbench-prev, with this/previous ratios)")


def run_order(tools, run):
    """The order of `tools` in run `run` (from 1): rotated by one place per run, and backwards
    in every even run. So each tool goes first in turn, and no tool always follows the same one:
    with rotation alone the cyclic order never changes, and whatever a tool leaves behind
    (a busy-polling peer, a warm or cold cache, sockets in TIME_WAIT) always falls on the same
    successor, which biased the this-build/previous-build pair of every rotation-only run."""
    tools = list(tools)
    k = (run - 1) % len(tools)
    order = tools[k:] + tools[:k]
    return order[::-1] if run % 2 == 0 else order


def check_prev_binary(ap, args):
    """--prev-binary must name an executable; it is kept as an absolute path."""
    if args.prev_binary:
        args.prev_binary = os.path.abspath(args.prev_binary)
        if not os.access(args.prev_binary, os.X_OK):
            ap.error("--prev-binary: not an executable file: %s" % args.prev_binary)


def prev_ratio(this, prev):
    """this/previous of two summaries' medians, or None when either is missing or zero."""
    if not this or not prev or not prev.get("median"):
        return None
    return this["median"] / prev["median"]


def prev_line(name, ratios):
    """One line "this build / previous build (NAME): a x1.01, b x0.98" from (label, ratio)."""
    parts = ["%s %s" % (k, ("x%.3f" % r) if r is not None else "n/a") for k, r in ratios]
    return "this build / previous build (%s): %s" % (name, ", ".join(parts))


def parse_args(argv):
    ap = argparse.ArgumentParser(
        description="uringbench TCP stream vs iperf2 on a local netns pair (needs root).",
        epilog="Example: sudo python3 benches/stream_vs_iperf2.py --runs 5 --time 10 "
               "--queues 1,16 --markdown")
    ap.add_argument("--runs", type=int, default=5,
                    help="interleaved runs per queue count and tool (default 5; use >= 5)")
    ap.add_argument("--time", type=float, default=10.0, help="seconds per run (default 10)")
    ap.add_argument("--queues", default="1,16",
                    help="comma-separated queue counts (= iperf2 -P), default 1,16")
    ap.add_argument("--len", default="128K", help="write/read length, default 128K")
    add_common_args(ap)
    ap.add_argument("--ub-recv-args", default="", metavar="ARGS",
                    help="extra arguments for `uringbench recv`, e.g. '--busy-poll on'")
    ap.add_argument("--ub-send-args", default="", metavar="ARGS",
                    help="extra arguments for `uringbench send`")
    ap.add_argument("--mtu", type=int, default=1500, help="veth MTU, default 1500")
    args = ap.parse_args(argv)
    try:
        args.queues = [int(x) for x in args.queues.split(",") if x.strip()]
    except ValueError:
        ap.error("--queues: expected comma-separated integers, got %r" % args.queues)
    check_prev_binary(ap, args)
    if not args.queues or any(q < 1 or q > 1024 for q in args.queues):
        ap.error("--queues: each value must be 1..1024")
    if args.runs < 1:
        ap.error("--runs must be >= 1")
    if not (0 < args.time <= 3600):
        ap.error("--time must be in (0, 3600] seconds")
    if not re.fullmatch(r"[0-9]+[KMG]?", args.len):
        ap.error("--len: expected e.g. 128K, 64K, 1M, 9000")
    if not (1280 <= args.mtu <= 65535):
        ap.error("--mtu must be 1280..65535")
    return args


def check_prereqs():
    problems = []
    if os.geteuid() != 0:
        problems.append("must run as root (network namespaces)")
    for tool in ("ip", "ss", "taskset", "stdbuf", "iperf"):
        if not any(os.access(os.path.join(d, tool), os.X_OK)
                   for d in os.environ.get("PATH", "").split(os.pathsep) if d):
            problems.append("%s not found%s" % (tool, " (apt-get install iperf)"
                                                if tool == "iperf" else ""))
    if not os.access(PAIR_SCRIPT, os.R_OK):
        problems.append("%s not found" % PAIR_SCRIPT)
    if (os.cpu_count() or 0) < 2:
        problems.append("needs at least 2 CPUs (sender on CPU 0, receiver on CPU 1)")
    return problems


def prepare_binary(args):
    """Resolve the uringbench binary; build it if it is the default and missing."""
    path = args.binary if os.path.isabs(args.binary) else os.path.join(REPO, args.binary)
    args.binary_ok, args.binary_problem = False, None
    if not os.access(path, os.X_OK) and args.binary == DEFAULT_BINARY and not args.no_build:
        log("%s missing: running cargo build --release (max 30 min)" % args.binary)
        try:
            r = subprocess.run(["cargo", "build", "--release"], cwd=REPO, timeout=1800,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            if r.returncode != 0:
                lines = r.stderr.strip().splitlines()
                errors = [l.strip() for l in lines if l.startswith("error")] or lines[-2:]
                args.binary_problem = "cargo build --release failed: %s" % (
                    " | ".join(errors[:2])[:300])
        except FileNotFoundError:
            args.binary_problem = "binary missing and cargo not found"
        except subprocess.TimeoutExpired:
            args.binary_problem = "cargo build --release timed out"
    if os.access(path, os.X_OK):
        args.binary = path
        args.binary_ok = True
    elif args.binary_problem is None:
        args.binary_problem = "binary not found: %s" % path
    if not args.binary_ok:
        log("uringbench unavailable (%s): its runs will be reported as failed" %
            args.binary_problem)


def pair(action, mtu=None, name=None):
    """scripts/netns-pair.sh ACTION for the pair `name` (default: this module's PAIR)."""
    cmd = ["bash", PAIR_SCRIPT, action, "--name", name or PAIR]
    if mtu is not None:
        cmd += ["--mtu", str(mtu)]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=60)
    if r.returncode != 0:
        raise RuntimeError("%s failed (rc %d): %s" % (shlex.join(cmd), r.returncode,
                                                      r.stdout.strip()))
    return r.stdout.strip()


def teardown(pair_down, name):
    """Ends a benchmark run however it ended: stops every child process, then calls
    `pair_down` (None when no netns pair was set up), with Ctrl-C and SIGTERM ignored so the
    cleanup completes. Returns False when the pair could not be removed."""
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        stop_all()
        if pair_down is not None:
            try:
                pair_down()
            except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
                log("warning: could not remove netns pair %s: %s" % (name, e))
                return False
        return True
    finally:
        signal.signal(signal.SIGINT, old)


def idle_check():
    """Warn when the machine is busy before we start (it skews both tools)."""
    a = cpu_busy_jiffies()
    time.sleep(1.0)
    d = cpu_delta_s(a, cpu_busy_jiffies())
    busy = {k: v for k, v in d.items() if v > 0.15}
    if busy:
        log("warning: machine not idle before the benchmark (%s busy in 1 s): numbers will "
            "be noisy" % ", ".join("%s %.0f%%" % (k, v * 100) for k, v in sorted(busy.items())))


def progress(res, total_runs):
    head = "[q=%d run %d/%d] %s" % (res["queues"], res["run"], total_runs, res["tool"])
    if res["ok"]:
        msg = "%s %.1f Gbit/s %.2f CPU-s/GB" % (head, res["gbps"], res["cpu_s_per_gb"])
        if res.get("warning"):
            msg += " (warning: %s)" % res["warning"]
    else:
        msg = "%s FAILED: %s" % (head, res["error"])
    log(msg)


def main(argv):
    args = parse_args(argv)
    problems = check_prereqs()
    if problems:
        for p in problems:
            log("error: " + p)
        return 2
    cmdline = shlex.join(["python3", os.path.relpath(os.path.abspath(sys.argv[0]), REPO)]
                         + list(argv))
    if args.runs < 5:
        log("note: --runs %d < 5: veth results are bimodal, medians need >= 5 runs"
            % args.runs)

    signal.signal(signal.SIGTERM, _on_sigterm)
    signal.signal(signal.SIGHUP, _on_sigterm)
    results = []
    environment = environment_line()
    rc = 0
    pair_up = False
    try:
        prepare_binary(args)
        idle_check()
        log(pair("up", args.mtu))
        pair_up = True
        with tempfile.TemporaryDirectory(prefix="ubbench-") as tmp:
            slot = 0
            for q in args.queues:
                for run in range(1, args.runs + 1):
                    tools = [("uringbench", run_uringbench), ("iperf2", run_iperf2)]
                    if args.prev_binary:
                        tools.insert(1, ("uringbench-prev", lambda a, q_, r_, t_: run_uringbench(
                            a, q_, r_, t_, binary=args.prev_binary, tool="uringbench-prev")))
                    slot += 1
                    tools = run_order(tools, slot)
                    slot_ok = False
                    for _name, fn in tools:
                        res = fn(args, q, run, tmp)
                        res["order"] = [t for t, _ in tools].index(_name) + 1
                        results.append(res)
                        progress(res, args.runs)
                        slot_ok = slot_ok or res["ok"]
                        time.sleep(1.0)  # let TIME_WAIT, softirq backlog and timers settle
                    if not slot_ok:
                        rc = 1
    except (KeyboardInterrupt, Interrupted) as e:
        log("interrupted (%s): cleaning up" % (str(e) or "Ctrl-C"))
        rc = 130
    except RuntimeError as e:
        log("error: %s" % e)
        rc = 1
    finally:
        down = (lambda: pair("down")) if pair_up or rc == 130 else None
        if not teardown(down, PAIR):
            rc = rc or 1

    table = build_summary(results, args.queues)
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"command": cmdline, "environment": environment,
                       "explanation": explain_header(args),
                       "settings": {"runs": args.runs, "time_s": args.time,
                                    "queues": args.queues, "len": args.len, "mtu": args.mtu,
                                    "binary": args.binary, "prev_binary": args.prev_binary, "clk_tck": CLK_TCK},
                       "results": results, "summary": table, "exit_status": rc}, f, indent=2)
        log("raw results written to %s" % args.json_out)
    if results:
        if args.markdown:
            print_markdown(table, args, environment, cmdline)
        else:
            print_text(table, args, environment)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
