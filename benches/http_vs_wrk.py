#!/usr/bin/env python3
"""Side-by-side HTTP load benchmark: `uringbench http` vs wrk, against nginx on loopback.

    python3 benches/http_vs_wrk.py [--runs 5] [--time 10] [--connections 64]
        [--binary target/release/uringbench] [--json-out FILE] [--markdown]

What it does
  * Writes an nginx config into a temporary prefix (1 worker, `master_process off`,
    `daemon off`, `access_log off`, keepalive_requests 1e9) serving a 1 KiB file on
    127.0.0.1:18180, and starts nginx pinned to CPU 1 (taskset -c 1). It is checked (a real
    GET of the file) before each run and restarted if it died; at the end it gets SIGKILL,
    also on Ctrl-C / SIGTERM / errors.
  * For each run r, runs both clients once, interleaved; the order rotates from run to
    run and runs backwards every other run (order bias). Both clients are pinned to CPU 0 (taskset -c 0), one
    thread, the same number of connections and the same duration:
      uringbench: taskset -c 0 BIN http URL -c 64 -d 10s -t 1 -J
      wrk:        taskset -c 0 wrk -t1 -c64 -d10s --latency URL
  * Every process is bounded in time (client: --time + 30 s, then SIGKILL of its process
    group; nginx: SIGKILL at the end). Traffic goes to 127.0.0.1 only.

What the numbers mean
  * requests/s: what each tool reports (uringbench: transactions_per_second over its
    window; wrk: "Requests/sec").
  * client CPU-µs/request (the number the target is judged on): user+sys CPU time of the
    client process from os.wait4() rusage (whole process life: start-up, connects, run,
    teardown), × 1e6 / requests the tool reports (uringbench: `requests`; wrk: "N requests
    in"). Same method for both tools. uringbench's self-reported cpu.us_per_request is
    shown alongside for reference.
  * cpu0 busy µs/request: /proc/stat busy jiffies (user+nice+system+irq+softirq+steal) of
    CPU 0 from client start to client exit, / requests. Coarse (jiffies) and includes
    anything else that ran on CPU 0 and loopback softirq work charged to CPU 0: a cross-check,
    not the target metric.
  * p99 latency: uringbench latency_us.p99 (HdrHistogram); wrk --latency "99%" line.
  * Values are median (min–max) over successful runs; ratios are uringbench/wrk of the
    medians.
  * One failure rule for both tools (failed_run): a run fails, and is left out of the
    medians and listed, when the client exits non-zero, times out, reports no requests, or
    reports any request error or non-2xx response (uringbench: errors_total, non_2xx; wrk:
    "Socket errors", "Non-2xx or 3xx responses"). Neither tool's wait-for-the-window
    differs: both measure from their first request (neither has a warm-up).

Targets (issue 6), reported, not asserted:
  requests/s >= wrk's (ratio >= 1.00); client CPU per request <= 0.5 x wrk's (ratio <= 0.50).

Exit status: 0 when at least one run of either tool succeeded; 1 when every run of both
tools failed; 2 on bad arguments or missing prerequisites; 130 on Ctrl-C / SIGTERM.

Standard library only.
"""

import argparse
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stream_vs_iperf2 as sv  # noqa: E402
from stream_vs_iperf2 import (  # noqa: E402  (helpers only; no side effects on import)
    CLK_TCK, Interrupted, _on_sigterm, cpu_busy_jiffies, environment_line, fmt_num,
    fmt_stat, log, parse_json_doc, read_text, summarize, tail_line)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_BINARY = "target/release/uringbench"
HOST = "127.0.0.1"
PORT = 18180
PATH = "/1k.bin"
FILE_SIZE = 1024
URL = "http://%s:%d%s" % (HOST, PORT, PATH)
CPU_CLIENT = 0
CPU_SERVER = 1
TOOLS = ("uringbench", "wrk")
TARGET_RPS_RATIO = 1.0   # uringbench requests/s >= wrk's
TARGET_CPU_RATIO = 0.5   # uringbench client CPU per request <= 0.5 x wrk's

_children = []  # Popen objects still to be cleaned up (each in its own process group)


# ---------------------------------------------------------------------------------------
# processes


def spawn(cmd, stdout, stderr):
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr,
                         start_new_session=True)
    _children.append(p)
    return p


def kill_group(p):
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def reap(p, timeout=5.0):
    """SIGKILL p's process group and reap p (bounded). Returns rc or None."""
    kill_group(p)
    if p.returncode is None:
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
    if p in _children and p.returncode is not None:
        _children.remove(p)
    return p.returncode


def stop_all():
    for p in list(_children):
        reap(p, timeout=2.0)


def run_with_rusage(cmd, timeout, stdout_path, stderr_path):
    """Run cmd (exec'd in place, e.g. via taskset) to completion within `timeout` s.

    Returns (rc, timed_out, cpu_s, wall_s, cpu0_busy_s). cpu_s is ru_utime + ru_stime of
    the child from os.wait4 (the child's own rusage, including its reaped descendants)."""
    with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
        before = cpu_busy_jiffies()
        t0 = time.monotonic()
        p = spawn(cmd, out, err)
    deadline = t0 + timeout
    timed_out = False
    status = ru = None
    try:
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid == p.pid:
                break
            if time.monotonic() >= deadline:
                timed_out = True
                kill_group(p)
                pid, status, ru = os.wait4(p.pid, 0)
                break
            time.sleep(0.02)
    finally:
        if status is None:  # interrupted while waiting: make sure it dies
            kill_group(p)
    wall = time.monotonic() - t0
    after = cpu_busy_jiffies()
    rc = os.waitstatus_to_exitcode(status)
    p.returncode = rc  # we reaped it ourselves; keep Popen consistent
    kill_group(p)      # anything left in its group
    if p in _children:
        _children.remove(p)
    cpu_s = ru.ru_utime + ru.ru_stime
    cpu0 = (after[CPU_CLIENT] - before[CPU_CLIENT]) / CLK_TCK
    return rc, timed_out, cpu_s, wall, cpu0


# ---------------------------------------------------------------------------------------
# nginx


NGINX_CONF = """\
worker_processes 1;
daemon off;
master_process off;
pid {prefix}/nginx.pid;
error_log {prefix}/logs/error.log warn;
worker_rlimit_nofile 4096;
events {{
    worker_connections 2048;
}}
http {{
    access_log off;
    keepalive_requests 1000000000;
    keepalive_timeout 120s;
    sendfile on;
    tcp_nopush off;
    tcp_nodelay on;
    types {{ application/octet-stream bin; }}
    default_type application/octet-stream;
    client_body_temp_path {prefix}/tmp/client;
    proxy_temp_path {prefix}/tmp/proxy;
    fastcgi_temp_path {prefix}/tmp/fastcgi;
    uwsgi_temp_path {prefix}/tmp/uwsgi;
    scgi_temp_path {prefix}/tmp/scgi;
    server {{
        listen {host}:{port} backlog=1024;
        root {prefix}/html;
    }}
}}
"""


class Nginx:
    def __init__(self, nginx_bin, tmp):
        self.bin = nginx_bin
        self.prefix = os.path.join(tmp, "nginx")
        self.proc = None
        self.starts = 0
        for d in ("logs", "html", "tmp"):
            os.makedirs(os.path.join(self.prefix, d), exist_ok=True)
        with open(os.path.join(self.prefix, "html", PATH.lstrip("/")), "wb") as f:
            f.write(os.urandom(FILE_SIZE))
        self.conf = os.path.join(self.prefix, "nginx.conf")
        with open(self.conf, "w") as f:
            f.write(NGINX_CONF.format(prefix=self.prefix, host=HOST, port=PORT))
        self.cmd = ["taskset", "-c", str(CPU_SERVER), self.bin, "-p", self.prefix + "/",
                    "-c", self.conf]

    def start(self):
        self.stop()
        self.starts += 1
        out = os.path.join(self.prefix, "logs", "stdout.%d" % self.starts)
        err = os.path.join(self.prefix, "logs", "stderr.%d" % self.starts)
        with open(out, "wb") as so, open(err, "wb") as se:
            self.proc = spawn(self.cmd, so, se)
        deadline = time.monotonic() + 5.0
        problem = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                problem = "nginx exited (rc %s): %s" % (
                    self.proc.returncode, tail_line(err) or
                    tail_line(os.path.join(self.prefix, "logs", "error.log")) or "(no output)")
                break
            problem = self.check()
            if problem is None:
                return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("could not start nginx: %s" % problem)

    def check(self):
        """GET the file once (HTTP/1.0, bounded). Returns None if it is served, else why."""
        try:
            with socket.create_connection((HOST, PORT), timeout=2.0) as s:
                s.settimeout(2.0)
                s.sendall(("GET %s HTTP/1.0\r\nHost: %s:%d\r\n\r\n" % (PATH, HOST, PORT))
                          .encode())
                data = b""
                while len(data) < 65536:
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    data += chunk
        except OSError as e:
            return "GET %s: %s" % (URL, e)
        head, _, body = data.partition(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200") or len(body) != FILE_SIZE:
            return "GET %s: unexpected response %r (body %d bytes)" % (
                URL, head.split(b"\r\n", 1)[0], len(body))
        return None

    def ensure(self):
        if self.proc is None or self.proc.poll() is not None or self.check() is not None:
            if self.proc is not None:
                log("nginx not serving (%s): restarting it" % (
                    "exited rc %s" % self.proc.returncode if self.proc.poll() is not None
                    else self.check()))
            self.start()

    def stop(self):
        if self.proc is not None:
            reap(self.proc)
            self.proc = None


def port_in_use():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(1.0)
    try:
        return s.connect_ex((HOST, PORT)) == 0
    finally:
        s.close()


# ---------------------------------------------------------------------------------------
# one run of each tool


def new_result(tool, run, cmd):
    return {"tool": tool, "run": run, "ok": False, "error": None, "warning": None,
            "client_cmd": shlex.join(cmd), "rps": None, "requests": None, "p50_us": None,
            "p99_us": None, "client_cpu_s": None, "cpu_us_per_req": None,
            "self_cpu_us_per_req": None, "cpu0_busy_s": None, "cpu0_us_per_req": None,
            "client_wall_s": None, "client_rc": None}


def finish_cpu(res, cpu_s, cpu0_s):
    res["client_cpu_s"] = cpu_s
    res["cpu0_busy_s"] = cpu0_s
    if res["requests"]:
        res["cpu_us_per_req"] = cpu_s * 1e6 / res["requests"]
        res["cpu0_us_per_req"] = cpu0_s * 1e6 / res["requests"]


def client_limit(args):
    return args.time + 30


    return None


def run_uringbench(args, run, tmp, tool="uringbench"):
    """One http run; tool "uringbench-prev" runs the --prev-binary build instead."""
    binary = args.prev_binary if tool == "uringbench-prev" else args.binary
    cmd = ["taskset", "-c", str(CPU_CLIENT), binary, "http", URL,
           "-c", str(args.connections), "-d", "%ds" % args.time, "-t", "1", "-J"]
    cmd += shlex.split(args.ub_args)
    res = new_result(tool, run, cmd)
    if not args.binary_ok:
        res["error"] = args.binary_problem
        return res
    stem = "%s-r%d" % ("ubp" if tool == "uringbench-prev" else "ub", run)
    out, err = [os.path.join(tmp, stem + x) for x in (".out", ".err")]
    rc, timed_out, cpu_s, wall, cpu0 = run_with_rusage(cmd, client_limit(args), out, err)
    res["client_rc"], res["client_wall_s"] = rc, wall
    if timed_out:
        res["error"] = "timed out after %d s (killed)" % client_limit(args)
        return res
    doc = parse_json_doc(read_text(out))
    if not isinstance(doc, dict):
        res["error"] = "exited %s, no JSON document: %s" % (
            rc, tail_line(err) or tail_line(out) or "(no output)")
        return res
    res["json"] = doc
    try:
        res["rps"] = float(doc["transactions_per_second"])
        res["requests"] = int(doc["requests"])
        lat = doc.get("latency_us") or {}
        res["p50_us"] = float(lat["p50"]) if lat.get("p50") is not None else None
        res["p99_us"] = float(lat["p99"]) if lat.get("p99") is not None else None
        cpu = doc.get("cpu") or {}
        if cpu.get("us_per_request") is not None:
            res["self_cpu_us_per_req"] = float(cpu["us_per_request"])
    except (KeyError, TypeError, ValueError) as e:
        res["error"] = "JSON lacks transactions_per_second/requests: %r" % (e,)
        return res
    finish_cpu(res, cpu_s, cpu0)
    problems = []
    errs = doc.get("errors_total")
    if errs:
        problems.append("%s request errors %s" % (errs, json.dumps(
            {k: v for k, v in (doc.get("errors") or {}).items() if k != "examples" and v})))
    if doc.get("non_2xx"):
        problems.append("%s non-2xx responses" % doc["non_2xx"])
    return failed_run(res, rc, res["requests"], problems, tail_line(err))


_UNITS = {"us": 1.0, "ms": 1e3, "s": 1e6, "m": 60e6, "h": 3600e6}


def wrk_latency_us(s):
    m = re.fullmatch(r"([0-9.]+)(us|ms|s|m|h)", s.strip())
    return float(m.group(1)) * _UNITS[m.group(2)] if m else None


def parse_wrk(text):
    """Parse wrk 4.x text output (with --latency)."""
    out = {}
    m = re.search(r"^Requests/sec:\s*([0-9.]+)", text, re.M)
    if m:
        out["rps"] = float(m.group(1))
    m = re.search(r"^\s*(\d+) requests in ([0-9.]+\w+)", text, re.M)
    if m:
        out["requests"] = int(m.group(1))
        out["duration"] = m.group(2)
    for pct, key in (("50", "p50_us"), ("99", "p99_us")):
        m = re.search(r"^\s*%s%%\s+(\S+)" % pct, text, re.M)
        if m:
            out[key] = wrk_latency_us(m.group(1))
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    if m:
        out["socket_errors"] = dict(zip(("connect", "read", "write", "timeout"),
                                        (int(x) for x in m.groups())))
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    if m:
        out["non_2xx_3xx"] = int(m.group(1))
    return out


def run_wrk(args, run, tmp):
    cmd = ["taskset", "-c", str(CPU_CLIENT), args.wrk, "-t1", "-c%d" % args.connections,
           "-d%ds" % args.time, "--latency", URL]
    res = new_result("wrk", run, cmd)
    out, err = [os.path.join(tmp, "wrk-r%d%s" % (run, x)) for x in (".out", ".err")]
    rc, timed_out, cpu_s, wall, cpu0 = run_with_rusage(cmd, client_limit(args), out, err)
    res["client_rc"], res["client_wall_s"] = rc, wall
    text = read_text(out)
    res["client_output_tail"] = text[-2000:]
    if timed_out:
        res["error"] = "timed out after %d s (killed)" % client_limit(args)
        return res
    if rc != 0:
        return failed_run(res, rc, None, [], tail_line(err) or tail_line(out))
    rep = parse_wrk(text)
    res["report"] = rep
    if "rps" not in rep or not rep.get("requests"):
        res["error"] = "no 'Requests/sec' / 'N requests in' in output: %s" % (
            tail_line(out) or "(empty)")
        return res
    res["rps"], res["requests"] = rep["rps"], rep["requests"]
    res["p50_us"], res["p99_us"] = rep.get("p50_us"), rep.get("p99_us")
    finish_cpu(res, cpu_s, cpu0)
    problems = []
    if rep.get("socket_errors") and any(rep["socket_errors"].values()):
        problems.append("socket errors %s" % json.dumps(rep["socket_errors"]))
    if rep.get("non_2xx_3xx"):
        problems.append("%d non-2xx/3xx responses" % rep["non_2xx_3xx"])
    return failed_run(res, rc, res["requests"], problems, tail_line(err))


def failed_run(res, rc, requests, problems, stderr_tail):
    """The one failure rule for every client: a non-zero exit, no requests, or any request
    error or non-2xx response fails the run (kept out of the medians, listed as failed)."""
    if rc != 0 or not requests or problems:
        res["error"] = "exited %s with %s requests%s: %s" % (
            rc, requests, "".join("; " + p for p in problems), stderr_tail or "(no stderr)")
        return res
    res["ok"] = True
    return res


# ---------------------------------------------------------------------------------------
# summary


def build_summary(results):
    s = {"tools": {}}
    for tool in TOOLS:
        rs = [r for r in results if r["tool"] == tool]
        ok = [r for r in rs if r["ok"]]
        s["tools"][tool] = {
            "ok": len(ok), "runs": len(rs),
            "rps": summarize([r["rps"] for r in ok]),
            "cpu": summarize([r["cpu_us_per_req"] for r in ok]),
            "self_cpu": summarize([r["self_cpu_us_per_req"] for r in ok]),
            "cpu0": summarize([r["cpu0_us_per_req"] for r in ok]),
            "p50": summarize([r["p50_us"] for r in ok]),
            "p99": summarize([r["p99_us"] for r in ok]),
            "errors": sorted({r["error"] for r in rs if not r["ok"] and r["error"]}),
            "warnings": sorted({r["warning"] for r in rs if r["ok"] and r["warning"]}),
        }
    u, w = s["tools"]["uringbench"], s["tools"]["wrk"]

    def ratio(key):
        if u[key] and w[key] and w[key]["median"]:
            return u[key]["median"] / w[key]["median"]
        return None
    s["rps_ratio"] = ratio("rps")
    s["cpu_ratio"] = ratio("cpu")
    s["cpu0_ratio"] = ratio("cpu0")
    s["rps_target_met"] = None if s["rps_ratio"] is None else s["rps_ratio"] >= TARGET_RPS_RATIO
    s["cpu_target_met"] = None if s["cpu_ratio"] is None else s["cpu_ratio"] <= TARGET_CPU_RATIO
    p = s["tools"].get("uringbench-prev")
    if p:
        s["prev"] = {k: sv.prev_ratio(u[k], p[k]) for k in ("rps", "cpu", "p99")}
    return s


def explain_header(args, wrk_version):
    return [
        "nginx (1 worker, master_process off, access_log off) pinned to CPU %d serves a "
        "%d-byte file on %s; clients pinned to CPU %d, 1 thread, %d keep-alive connections, "
        "%d s per run, %d interleaved runs (order rotates, reversed every other run). wrk: %s."
        % (CPU_SERVER, FILE_SIZE, URL, CPU_CLIENT, args.connections, args.time, args.runs,
           wrk_version or "version unknown"),
        "requests/s: as reported (uringbench transactions_per_second; wrk Requests/sec).",
        "client CPU-µs/request: user+sys of the client process (os.wait4 rusage, whole "
        "process life) × 1e6 / requests the tool reports; same method for both tools.",
        "cpu0 µs/request: /proc/stat busy time of CPU 0 from client start to exit / requests "
        "(includes loopback softirq work charged to CPU 0; cross-check only). "
        "uringbench self: its own cpu.us_per_request.",
        "Values: median (min–max) over successful runs; ratios are uringbench/wrk of the "
        "medians.",
    ]


def verdict(met):
    return "n/a" if met is None else ("MET" if met else "NOT MET")


def target_lines(s):
    missing = [t for t in ("uringbench", "wrk") if not s["tools"][t]["ok"]]
    na = "n/a (no successful runs of %s)" % " and ".join(missing)
    rr, cr, c0 = s["rps_ratio"], s["cpu_ratio"], s["cpu0_ratio"]
    return [
        "uringbench/wrk requests/s: %s — target >= %.2f (requests/s >= wrk's): %s" % (
            ("%.2f" % rr) if rr is not None else na, TARGET_RPS_RATIO,
            verdict(s["rps_target_met"])),
        "uringbench/wrk client CPU-µs/request: %s — target <= %.2f (<= 0.5x wrk's): %s" % (
            ("%.2f" % cr) if cr is not None else na, TARGET_CPU_RATIO,
            verdict(s["cpu_target_met"])),
        "(cross-check, not the target) uringbench/wrk cpu0 µs/request: %s" % (
            ("%.2f" % c0) if c0 is not None else "n/a"),
    ] + prev_lines(s)


def prev_lines(s):
    p = s.get("prev")
    if not p:
        return []
    return [sv.prev_line("uringbench http", [("requests/s", p["rps"]),
                                             ("client CPU-µs/request", p["cpu"]),
                                             ("p99", p["p99"])])]


COLS = ("tool", "requests/s median (min–max)", "client CPU-µs/req median (min–max)",
        "uringbench self CPU-µs/req", "cpu0 µs/req median", "p50 µs median", "p99 µs median",
        "runs ok")


def row_cells(tool, t):
    return [tool, fmt_stat(t["rps"], 0), fmt_stat(t["cpu"], 2),
            fmt_stat(t["self_cpu"], 2) if tool.startswith("uringbench") else "-",
            fmt_num(t["cpu0"]["median"] if t["cpu0"] else None, 2),
            fmt_num(t["p50"]["median"] if t["p50"] else None, 0),
            fmt_num(t["p99"]["median"] if t["p99"] else None, 0),
            "%d/%d" % (t["ok"], t["runs"])]


def print_text(s, args, environment, wrk_version):
    print()
    print("uringbench http vs wrk, nginx 1 KiB file over loopback (%s)" % environment)
    for line in explain_header(args, wrk_version):
        print("  " + line)
    print()
    widths = [15, 30, 34, 26, 18, 13, 13, 7]
    fmt = "  ".join("%%-%ds" % w for w in widths)
    hdr = fmt % COLS
    print(hdr)
    print("-" * len(hdr))
    for tool in TOOLS:
        print(fmt % tuple(row_cells(tool, s["tools"][tool])))
    print()
    for line in target_lines(s):
        print(line)
    for tool in TOOLS:
        for e in s["tools"][tool]["errors"]:
            print("%s failed: %s" % (tool, e))
        for w in s["tools"][tool]["warnings"]:
            print("%s warning: %s" % (tool, w))


def print_markdown(s, args, environment, wrk_version, cmdline):
    print()
    print("HTTP load, `uringbench http` vs wrk, nginx serving 1 KiB over loopback (%s)."
          % environment)
    print()
    for line in explain_header(args, wrk_version):
        print("- " + line)
    print()
    print("| " + " | ".join(COLS) + " |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for tool in TOOLS:
        print("| " + " | ".join(row_cells(tool, s["tools"][tool])) + " |")
    rr, cr = s["rps_ratio"], s["cpu_ratio"]
    print("| **uringbench/wrk** | %s | %s | | %s | | | |" % (
        ("**%.2f**" % rr) if rr is not None else "n/a",
        ("**%.2f**" % cr) if cr is not None else "n/a",
        ("%.2f" % s["cpu0_ratio"]) if s["cpu0_ratio"] is not None else "n/a"))
    print()
    print("Targets (issue 6): requests/s >= wrk's — **%s**; client CPU per request <= 0.5× "
          "wrk's — **%s**." % (verdict(s["rps_target_met"]), verdict(s["cpu_target_met"])))
    for line in prev_lines(s):
        print()
        print(line)
    print()
    print("Command: `%s`" % cmdline)
    notes = [(tool, "failed", e) for tool in TOOLS for e in s["tools"][tool]["errors"]]
    notes += [(tool, "warning", w) for tool in TOOLS for w in s["tools"][tool]["warnings"]]
    if notes:
        print()
        for tool, kind, e in notes:
            print("- %s %s: %s" % (tool, kind, e))


# ---------------------------------------------------------------------------------------
# setup


def which(name):
    if os.sep in name:
        return name if os.access(name, os.X_OK) else None
    for d in os.environ.get("PATH", "").split(os.pathsep) + ["/usr/sbin", "/sbin"]:
        p = os.path.join(d, name)
        if d and os.access(p, os.X_OK):
            return p
    return None


def parse_args(argv):
    ap = argparse.ArgumentParser(
        description="uringbench http vs wrk against a local nginx (127.0.0.1:%d)." % PORT,
        epilog="Example: python3 benches/http_vs_wrk.py --runs 5 --time 10 --markdown")
    ap.add_argument("--runs", type=int, default=5,
                    help="interleaved runs per tool (default 5; use >= 5)")
    ap.add_argument("--time", type=int, default=10, help="seconds per run (default 10)")
    ap.add_argument("--connections", "-c", type=int, default=64,
                    help="connections for both clients (default 64)")
    sv.add_common_args(ap)
    ap.add_argument("--wrk", default="wrk", help="wrk binary (default: wrk from PATH)")
    ap.add_argument("--nginx", default="nginx", help="nginx binary (default: nginx)")
    ap.add_argument("--ub-args", default="", metavar="ARGS",
                    help="extra arguments for `uringbench http`")
    args = ap.parse_args(argv)
    sv.check_prev_binary(ap, args)
    if args.runs < 1:
        ap.error("--runs must be >= 1")
    if not (1 <= args.time <= 3600):
        ap.error("--time must be 1..3600 seconds")
    if not (1 <= args.connections <= 1000):
        ap.error("--connections must be 1..1000")
    return args


def check_prereqs(args):
    problems = []
    for name, attr, hint in (("taskset", None, "util-linux"), (args.wrk, "wrk", "wrk"),
                             (args.nginx, "nginx", "nginx")):
        p = which(name)
        if p is None:
            problems.append("%s not found (apt-get install -y %s)" % (name, hint))
        elif attr:
            setattr(args, attr, p)
    if (os.cpu_count() or 0) < 2:
        problems.append("needs at least 2 CPUs (client on CPU 0, nginx on CPU 1)")
    if not problems and port_in_use():
        problems.append("%s:%d is already in use (a leftover nginx?)" % (HOST, PORT))
    return problems


def wrk_version(wrk):
    try:
        r = subprocess.run([wrk, "-v"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           stdin=subprocess.DEVNULL, text=True, timeout=5)
        m = re.search(r"wrk\s+(\S+)", r.stdout)
        return ("wrk " + m.group(1)) if m else None
    except (OSError, subprocess.TimeoutExpired):
        return None


def progress(res, total_runs):
    head = "[run %d/%d] %-10s" % (res["run"], total_runs, res["tool"])
    if res["ok"]:
        msg = "%s %9.0f req/s  client %.2f CPU-µs/req" % (head, res["rps"], res["cpu_us_per_req"])
        if res["self_cpu_us_per_req"] is not None:
            msg += " (self-reported %.2f)" % res["self_cpu_us_per_req"]
        msg += "  cpu0 %.2f µs/req  p99 %s µs  (%.1f s wall)" % (
            res["cpu0_us_per_req"], fmt_num(res["p99_us"], 0), res["client_wall_s"])
        if res["warning"]:
            msg += " (warning: %s)" % res["warning"]
    else:
        msg = "%s FAILED: %s" % (head, res["error"])
    log(msg)


def main(argv):
    global TOOLS
    args = parse_args(argv)
    if args.prev_binary:
        TOOLS = ("uringbench", "uringbench-prev", "wrk")
    problems = check_prereqs(args)
    if problems:
        for p in problems:
            log("error: " + p)
        return 2
    cmdline = shlex.join(["python3", os.path.relpath(os.path.abspath(sys.argv[0]), REPO)]
                         + list(argv))
    if args.runs < 5:
        log("note: --runs %d < 5: read the medians of >= 5 runs for the README" % args.runs)

    signal.signal(signal.SIGTERM, _on_sigterm)
    signal.signal(signal.SIGHUP, _on_sigterm)
    results = []
    environment = environment_line()
    wver = wrk_version(args.wrk)
    rc = 0
    nginx = None
    try:
        sv.prepare_binary(args)
        sv.idle_check()
        with tempfile.TemporaryDirectory(prefix="ubhttp-") as tmp:
            nginx = Nginx(args.nginx, tmp)
            nginx.start()
            log("nginx listening on %s:%d (prefix %s), pinned to CPU %d"
                % (HOST, PORT, nginx.prefix, CPU_SERVER))
            for run in range(1, args.runs + 1):
                tools = [("uringbench", run_uringbench), ("wrk", run_wrk)]
                if args.prev_binary:
                    tools.insert(1, ("uringbench-prev", lambda a, r, t: run_uringbench(
                        a, r, t, tool="uringbench-prev")))
                tools = sv.run_order(tools, run)
                for order, (_name, fn) in enumerate(tools, 1):
                    nginx.ensure()
                    res = fn(args, run, tmp)
                    res["order"] = order
                    results.append(res)
                    progress(res, args.runs)
                    time.sleep(1.0)  # let connections close and timers settle
            nginx.stop()
    except (KeyboardInterrupt, Interrupted) as e:
        log("interrupted (%s): cleaning up" % (str(e) or "Ctrl-C"))
        rc = 130
    except RuntimeError as e:
        log("error: %s" % e)
        rc = 1
    finally:
        old = signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            if nginx is not None:
                nginx.stop()
            stop_all()
        finally:
            signal.signal(signal.SIGINT, old)

    if rc == 0 and not any(r["ok"] for r in results):
        rc = 1
    summary = build_summary(results)
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"command": cmdline, "environment": environment, "wrk": wver,
                       "explanation": explain_header(args, wver),
                       "settings": {"runs": args.runs, "time_s": args.time,
                                    "connections": args.connections, "url": URL,
                                    "binary": args.binary, "prev_binary": args.prev_binary,
                                    "clk_tck": CLK_TCK,
                                    "cpu_client": CPU_CLIENT, "cpu_server": CPU_SERVER},
                       "results": results, "summary": summary, "exit_status": rc}, f,
                      indent=2)
        log("raw results written to %s" % args.json_out)
    if results:
        if args.markdown:
            print_markdown(summary, args, environment, wver, cmdline)
        else:
            print_text(summary, args, environment, wver)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
