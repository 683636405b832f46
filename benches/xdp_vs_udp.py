#!/usr/bin/env python3
"""Packet-rate benchmark: uringbench --engine xdp vs --engine uring --no-gso vs iperf2 UDP,
one queue each side across a local netns pair, at 64-byte and 1470-byte frames.

    sudo python3 benches/xdp_vs_udp.py [--runs 5] [--time 5] [--lens 22,1470]
        [--tools xdp,xdpg,live,nogso,iperf2,xdp-prev] [--binary target/release/uringbench]
        [--prev-binary PATH] [--json-out FILE] [--markdown]

What it does
  * Creates the netns pair "uxbench" (scripts/netns-pair.sh; uxbench-a = sender 10.77.0.1,
    uxbench-b = receiver 10.77.0.2, MTU 1500) and removes it at the end, also on Ctrl-C.
  * For each datagram length and each run, runs the tools once each, interleaved, the
    order rotating from run to run and reversed every other run (sv.run_order), with the same pinning (receiver CPU 1, sender CPU 0):
      (x) uringbench --engine xdp at both ends (AF_XDP sockets, uringbench's XDP program on
          the receiver's veth: native mode, copy-mode sockets):
            ip netns exec uxbench-b taskset -c 1 uringbench recv --once --engine xdp
            ip netns exec uxbench-a taskset -c 0 uringbench send --target 10.77.0.2 -u
                -l LEN -b 0 -t T -J --engine xdp
      (g) the same with the receiver's program in generic mode (`recv --xdp-mode generic`):
          on veth, native mode converts every skb into a page-pool buffer (one more copy on
          the sender's CPU) and was measured slower than generic mode;
      (l) the live-frames generator into the same receiver: `send --engine xdp --gen live`
          (an XDP program run by BPF_PROG_RUN on live frames, out through the veth's
          ndo_xdp_xmit, no skb), `recv --engine xdp` (native);
      (k) the live-frames generator into `recv --engine xdp --xdp-count kernel`: the receiver's
          XDP program accounts every datagram itself and drops it (no socket);
      (p) with --prev-binary PATH and the tool `xdp-prev`: (x) with that build, to compare
          the XSK path against the previous build, interleaved;
      (b) uringbench --engine uring (default) --no-gso: io_uring, one datagram per send
          and per receive completion;
      (c) iperf2: iperf -s -u -l LEN / iperf -c -u -b 100G -l LEN (unpaced).
    The uringbench and iperf2 runners, parsers and their definitions are those of
    benches/udp_vs_iperf2.py (imported, with this script's pair name).
  * Lengths are UDP payload bytes, the same for every tool: 22 bytes is a 64-byte
    Ethernet frame (14 + 20 + 8 + 22, without the FCS), 1470 bytes a 1512-byte frame.

What the numbers mean
  * Received Mframes/s (headline): datagrams the receiver counted over the whole test ÷
    the whole test's duration (udp_vs_iperf2.py: uringbench sum.receiver.datagrams ÷
    (warm-up + time + cool-down); iperf2 (total − lost) ÷ its exact duration). Every
    received datagram is one frame on the wire here (no GSO, no fragmentation).
  * Loss %, CPU-s/GB and sent Mframes/s as in udp_vs_iperf2.py.
  * For the AF_XDP receiver, "delivered" is what the receiver's XDP program handed to the
    AF_XDP sockets (xdp.receiver.steer.redirected) over the same duration: delivered minus
    received is what the sockets dropped (their RX ring was full: the receiving thread fell
    behind), sent minus delivered what never reached the program (the veth's ring was full).
  * Medians with min–max over the successful runs.
  * Targets (issue 5), reported, not asserted, for each xdp mode: >= 1 M frames/s received
    at 64-byte frames; >= 3x iperf2's received datagrams/s at 1470 bytes.

Exit status: 0 when every run produced a result for at least one tool; 1 otherwise; 2 on
bad arguments or missing prerequisites; 130 on Ctrl-C. Standard library only.
"""

import argparse
import json
import os
import shlex
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stream_vs_iperf2 as sv  # noqa: E402  (shared process/CPU/formatting helpers)
import udp_vs_iperf2 as uv  # noqa: E402  (UDP runners and parsers, reused as they are)

from stream_vs_iperf2 import (  # noqa: E402
    log, summarize, fmt_num, fmt_stat, environment_line, idle_check,
    check_prereqs, prepare_binary, Interrupted, REPO, DEFAULT_BINARY, CPU_SEND, CPU_RECV,
)

# The UDP runners read the pair's namespaces from their module's globals at call time: point
# them at this benchmark's own pair so it never touches another benchmark's.
uv.PAIR = "uxbench"
uv.NS_SEND = uv.PAIR + "-a"
uv.NS_RECV = uv.PAIR + "-b"
uv.TOOLS["xdp"] = ("(x)", "uringbench --engine xdp")
uv.TOOLS["xdpg"] = ("(g)", "uringbench --engine xdp, generic")
uv.TOOLS["live"] = ("(l)", "uringbench --engine xdp --gen live")
uv.TOOLS["livek"] = ("(k)", "--gen live, --xdp-count kernel")
uv.TOOLS["xdp-prev"] = ("(p)", "previous build --engine xdp")

TOOL_ORDER = ("xdp", "xdpg", "live", "livek", "nogso", "iperf2", "xdp-prev")
XDP_TOOLS = ("xdp", "xdpg", "live", "livek", "xdp-prev")
MIN_FRAME_TARGET = 1.0  # M frames/s at 64-byte frames (issue 5)
LIVE_FRAME_TARGET = 4.0  # M frames/s at 64-byte frames, sequence-exact (issue 29)
RATIO_TARGET = 3.0  # xdp / iperf2 at 1470 bytes
FRAME_OVERHEAD = 14 + 20 + 8


def run_tool(args, tool, length, run, tmp):
    a = argparse.Namespace(**vars(args))
    a.len = length
    a.rate_bps = None
    if tool in XDP_TOOLS:
        a.ub_send_args = "--engine xdp" + (" --gen live" if tool in ("live", "livek") else "")
        a.ub_recv_args = "--engine xdp" + {"xdpg": " --xdp-mode generic",
                                           "livek": " --xdp-count kernel"}.get(tool, "")
        res = uv.run_uringbench(a, tool, run, tmp)
    elif tool == "nogso":
        a.ub_send_args = ""
        a.ub_recv_args = ""
        res = uv.run_uringbench(a, "nogso", run, tmp)
    else:
        res = uv.run_iperf2(a, "iperf2", run, tmp)
    res["len"] = length
    if res.get("json"):
        xdp = (res["json"].get("xdp") or {})
        res["xdp"] = xdp
        steer = ((xdp.get("receiver") or {}).get("steer") or {})
        if res["ok"] and steer.get("redirected") is not None and res.get("dgps"):
            # The same duration as the received rate: scale it by delivered / received.
            received = res["json"]["sum"]["receiver"]["datagrams"] or 1
            res["delivered_dgps"] = res["dgps"] * steer["redirected"] / received
        res.pop("json", None)  # keep --json-out small: the figures that matter are copied
    return res


def build_summary(results, lens, tools):
    s = {}
    for length in lens:
        row = {"len": length, "frame": length + FRAME_OVERHEAD, "tools": {}}
        for tool in tools:
            rs = [r for r in results if r["len"] == length and r["tool"] == tool]
            ok = [r for r in rs if r["ok"]]
            if not rs:
                continue
            row["tools"][tool] = {
                "label": uv.label(tool), "ok": len(ok), "runs": len(rs),
                "mfps": summarize([r["dgps"] / 1e6 for r in ok]),
                "sent_mfps": summarize([r["sent_dgps"] / 1e6 for r in ok if r["sent_dgps"]]),
                "delivered_mfps": summarize([r["delivered_dgps"] / 1e6 for r in ok
                                             if r.get("delivered_dgps")]),
                "loss_pct": summarize([r["loss_pct"] for r in ok]),
                "cpu": summarize([r["cpu_s_per_gb"] for r in ok]),
                "paths": sorted({"%s | %s" % (r.get("sender_path"), r.get("receiver_path"))
                                 for r in ok if r.get("sender_path")})[:1],
                "errors": sorted({r["error"] for r in rs if not r["ok"] and r["error"]}),
            }
        s[length] = row
    return s


def targets(summary):
    lines = []
    for tool in XDP_TOOLS:
        name = uv.label(tool)
        small = summary.get(22, {}).get("tools", {}).get(tool)
        if small and small["mfps"]:
            m = small["mfps"]["median"]
            want = LIVE_FRAME_TARGET if tool in ("live", "livek") else MIN_FRAME_TARGET
            lines.append("%s at 64-byte frames: %.3f M frames/s received (median) -- target >= %.1f M: %s"
                         % (name, m, want, "MET" if m >= want else "NOT MET"))
        big = summary.get(1470, {}).get("tools", {})
        x, i = big.get(tool), big.get("iperf2")
        if x and i and x["mfps"] and i["mfps"] and i["mfps"]["median"]:
            ratio = x["mfps"]["median"] / i["mfps"]["median"]
            lines.append("%s / iperf2 at 1470 bytes: x%.2f (medians) -- target >= x%.0f: %s"
                         % (name, ratio, RATIO_TARGET, "MET" if ratio >= RATIO_TARGET else "NOT MET"))
    return lines


def print_table(summary, args, environment, cmdline, markdown):
    p = (lambda line: print(line))
    print()
    p("UDP packet rate, one queue each side, uringbench --engine xdp vs --engine uring "
      "--no-gso vs iperf2 2.1.8 (%s); %g s per run, %d interleaved runs, receiver CPU %d, "
      "sender CPU %d, MTU 1500, unpaced." % (environment, args.time, args.runs, CPU_RECV, CPU_SEND))
    print()
    if markdown:
        p("| frame (payload) | tool | received Mframes/s median (min–max) | loss % median "
          "(min–max) | sent Mframes/s median | delivered Mframes/s median | CPU-s/GB median | runs ok |")
        p("|---|---|---:|---:|---:|---:|---:|---:|")
    else:
        p("%-16s %-26s %-28s %-24s %-10s %-10s %-9s %s" % ("frame (payload)", "tool",
          "recv Mframes/s med (min–max)", "loss % med (min–max)", "sent M/s", "deliv M/s",
          "CPU-s/GB", "ok"))
    for length, row in summary.items():
        for tool, t in row["tools"].items():
            size = "%d B (%d B)" % (row["frame"], length)
            sent = fmt_num(t["sent_mfps"]["median"], 3) if t["sent_mfps"] else "-"
            cpu = fmt_num(t["cpu"]["median"], 3) if t["cpu"] else "-"
            delivered = fmt_num(t["delivered_mfps"]["median"], 3) if t["delivered_mfps"] else "-"
            cells = (size, t["label"], fmt_stat(t["mfps"], 3), fmt_stat(t["loss_pct"], 2), sent,
                     delivered, cpu, "%d/%d" % (t["ok"], t["runs"]))
            if markdown:
                p("| %s |" % " | ".join(cells))
            else:
                p("%-16s %-26s %-28s %-24s %-10s %-10s %-9s %s" % cells)
    print()
    for line in targets(summary):
        p(("- " if markdown else "  ") + line)
    for length, row in summary.items():
        for tool, t in row["tools"].items():
            for path in t["paths"]:
                p(("- " if markdown else "  ") + "%d B %s path: %s" % (length, t["label"], path))
            for e in t["errors"]:
                p(("- " if markdown else "  ") + "%d B %s failed: %s" % (length, t["label"], e))
    print()
    p(("Command: `%s`" if markdown else "Command: %s") % cmdline)


def parse_args(argv):
    ap = argparse.ArgumentParser(description="uringbench --engine xdp vs --engine uring --no-gso "
                                 "vs iperf2 UDP packet rate on a local netns pair (needs root).")
    ap.add_argument("--runs", type=int, default=5, help="interleaved runs per tool and length (>= 5)")
    ap.add_argument("--time", type=float, default=5.0, help="seconds per run (default 5)")
    ap.add_argument("--lens", default="22,1470",
                    help="UDP payload lengths (default 22,1470: 64- and 1512-byte frames)")
    ap.add_argument("--tools", default="xdp,xdpg,nogso,iperf2",
                    help="subset of %s (xdp-prev needs --prev-binary)" % ",".join(TOOL_ORDER))
    sv.add_common_args(ap)
    args = ap.parse_args(argv)
    if args.runs < 1 or not (0 < args.time <= 600):
        ap.error("--runs >= 1 and --time in (0, 600]")
    sv.check_prev_binary(ap, args)
    try:
        args.lens = [int(x) for x in args.lens.split(",") if x.strip()]
    except ValueError:
        ap.error("--lens: comma-separated integers")
    if not args.lens or any(not (20 <= n <= 1472) for n in args.lens):
        ap.error("--lens: each 20..1472 (the 20-byte sequence header; MTU 1500)")
    tools = [t.strip() for t in args.tools.split(",") if t.strip()]
    if not tools or any(t not in TOOL_ORDER for t in tools):
        ap.error("--tools: a comma-separated subset of %s" % ",".join(TOOL_ORDER))
    if "xdp-prev" in tools and not args.prev_binary:
        ap.error("--tools xdp-prev: give the previous build with --prev-binary PATH")
    args.tools = [t for t in TOOL_ORDER if t in tools]
    args.mtu = 1500
    args.ub_send_args = args.ub_recv_args = ""
    return args


def main(argv):
    args = parse_args(argv)
    problems = check_prereqs()
    if problems:
        for p in problems:
            log("error: " + p)
        return 2
    cmdline = shlex.join(["python3", os.path.relpath(os.path.abspath(sys.argv[0]), REPO)] + list(argv))
    signal.signal(signal.SIGTERM, sv._on_sigterm)
    signal.signal(signal.SIGHUP, sv._on_sigterm)
    results, rc, pair_tried = [], 0, False
    environment = environment_line()
    try:
        prepare_binary(args)
        idle_check()
        pair_tried = True
        log(uv.pair("up", args.mtu))
        with tempfile.TemporaryDirectory(prefix="uxbench-") as tmp:
            for length in args.lens:
                for run in range(1, args.runs + 1):
                    run_ok = False
                    for tool in sv.run_order(args.tools, run):
                        res = run_tool(args, tool, length, run, tmp)
                        results.append(res)
                        uv.progress(res, args.runs)
                        run_ok = run_ok or res["ok"]
                        time.sleep(1.0)
                    if not run_ok:
                        rc = 1
    except (KeyboardInterrupt, Interrupted) as e:
        log("interrupted (%s): cleaning up" % (str(e) or "Ctrl-C"))
        rc = 130
    except RuntimeError as e:
        log("error: %s" % e)
        rc = 1
    finally:
        if not sv.teardown((lambda: uv.pair("down")) if pair_tried else None, uv.PAIR):
            rc = rc or 1
    summary = build_summary(results, args.lens, args.tools)
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"command": cmdline, "environment": environment, "results": results,
                       "summary": {str(k): v for k, v in summary.items()}, "exit_status": rc},
                      f, indent=2)
        log("raw results written to %s" % args.json_out)
    if results:
        print_table(summary, args, environment, cmdline, args.markdown)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
