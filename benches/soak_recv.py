#!/usr/bin/env python3
"""Soak test of one `uringbench recv` under attack, on loopback, with real tests meanwhile.

    python3 benches/soak_recv.py [--binary target/debug/uringbench] [--port 15400]
        [--malformed 20000] [--drip 2400] [--idle 2000] [--hold 30] [--json-out FILE]

What it does
  * Raises its own RLIMIT_NOFILE to 65536 (or the hard limit, without CAP_SYS_RESOURCE; it
    needs --idle + --drip + 1024), which the receiver inherits, and
    starts `BIN recv --bind 127.0.0.1 --port PORT`. One real test warms it up; after 2 s of
    quiet its fds (/proc/PID/fd), threads (/proc/PID/task) and RSS (VmRSS) are the baseline.
  * The attack, all from 127.0.0.1, all at once:
      - idle: --idle connections that send nothing;
      - slow drip: --drip connections that send a real control greeting and hello one byte
        every 2.5 s;
      - malformed: --malformed connections (32 at a time), each sending a control stream
        mutated from a real hello: flipped bytes, truncations, oversized and multi-frame
        length words, garbage JSON, other message types, wrong versions, hostile spec values
        (2^24 flows per queue, warmup 2^64-1000, interval 1 ms, 8,000 UDP ports, rate
        2^64-1), data greetings with random cookies, random bytes; each connection reads for
        at most 50 ms and ends with a reset (SO_LINGER 0) so no TIME_WAIT piles up.
    Idle and drip connections stay open until the malformed phase is done and at least
    --hold seconds have passed (at most --hold + 120 s in all).
  * Meanwhile real tests run back to back from another address (127.0.0.2, `send -B`):
    `BIN send -c 127.0.0.1 -p PORT -B 127.0.0.2 -t 1s --warmup 200ms --cooldown 100ms`,
    every third one `--proto udp -b 50M`, each bounded by 30 s. Each must exit 0; the time
    each took is kept.
  * The attack ends: every attack socket is closed. For 10 s the receiver's fds, threads and
    RSS are read every 0.25 s; then one more real test.

Pass criteria (issue 13): within 10 s of the attack's end fds and threads are back to the
baseline ±2 and RSS within baseline + 16 MB, and every real test succeeded (also the one
after). Exit status 0 pass, 1 fail, 2 bad arguments or missing binary, 130 on Ctrl-C.

Loopback only; every phase is bounded in time; the receiver and every socket are closed at
the end, also on errors and Ctrl-C. Standard library only.
"""

import argparse
import json
import os
import random
import resource
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

HOST = "127.0.0.1"
REAL_SOURCE = "127.0.0.2"
NOFILE = 65536
RECOVERY_S = 10.0
FD_SLACK = 2
THREAD_SLACK = 2
RSS_SLACK_KB = 16 * 1024

# A real hello as `uringbench send` 0.1 (protocol 2) sends it, captured by fuzz/seeds.sh.
HELLO = {
    "type": "hello",
    "version": 2,
    "spec": {
        "proto": "tcp", "workload": "stream", "queues": 1, "flows_per_queue": 1, "time_ms": 1000,
        "warmup_ms": 200, "cooldown_ms": 100, "interval_ms": 0, "len": 131072, "rate_bps": 0,
        "zerocopy": "auto", "depth": 4, "gso": True, "direction": "forward", "one_way_delay": False,
        "req_len": 1, "resp_len": 1, "timeout_ms": 1000,
    },
}


def frame(body, more=False):
    return struct.pack(">I", len(body) | (1 << 31 if more else 0)) + body


def control_stream(msg):
    return b"UBC1" + frame(json.dumps(msg).encode())


def hostile_hellos():
    def with_spec(**kw):
        m = json.loads(json.dumps(HELLO))
        m["spec"].update(kw)
        return m

    out = [
        with_spec(queues=256, flows_per_queue=1 << 24),
        with_spec(warmup_ms=(1 << 64) - 1000),
        with_spec(interval_ms=1, flows_per_queue=64, time_ms=3_600_000),
        with_spec(proto="udp", len=1470, queues=4, flows_per_queue=256),
        with_spec(rate_bps=(1 << 64) - 1),
        with_spec(queues=0),
        with_spec(len=0),
        with_spec(depth=1 << 31),
        with_spec(time_ms=0),
    ]
    udp = with_spec(proto="udp", len=1470)
    udp["udp_ports"] = list(range(20000, 28000))
    out.append(udp)
    v = json.loads(json.dumps(HELLO))
    v["version"] = 99
    out.append(v)
    out.append({"type": "abort", "reason": "x" * 60000})
    out.append({"type": "stop", "reason": "\n[99] done 6.6.6.6:1: received 1 GB"})
    out.append({"type": "finished"})
    return [control_stream(m) for m in out]


def mutations(rng, count):
    """`count` malformed or mutated control streams (a mix of the kinds in the docstring)."""
    base = control_stream(HELLO)
    hostile = hostile_hellos()
    for i in range(count):
        kind = i % 10
        if kind == 0:
            b = bytearray(base)
            for _ in range(rng.randint(1, 8)):
                b[rng.randrange(4, len(b))] = rng.randrange(256)
            yield bytes(b)
        elif kind == 1:
            yield base[: rng.randrange(1, len(base))]
        elif kind == 2:
            yield b"UBC1" + struct.pack(">I", rng.choice([0x7FFFFFFF, 0xFFFFFFFF, 65537, 1 << 20]))
        elif kind == 3:
            # Many small continuation frames up to (and past) the receiver's message limit.
            yield b"UBC1" + frame(b"{" * 4000, more=True) * rng.randint(1, 20)
        elif kind == 4:
            yield b"UBC1" + frame(bytes(rng.randrange(256) for _ in range(rng.randint(0, 300))))
        elif kind == 5:
            yield hostile[rng.randrange(len(hostile))]
        elif kind == 6:
            yield b"UBD1" + bytes(rng.randrange(256) for _ in range(20))
        elif kind == 7:
            yield bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
        elif kind == 8:
            yield b"UBC1" + frame(b'{"type":"hello","version":2,"spec":' + b"[" * 2000)
        else:
            yield b"UBC1" + frame(json.dumps({"type": "hello", "version": 2, "spec": {"queues": "x"}}).encode())


def proc_figures(pid):
    try:
        fds = len(os.listdir(f"/proc/{pid}/fd"))
        threads = len(os.listdir(f"/proc/{pid}/task"))
        with open(f"/proc/{pid}/status") as f:
            rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
        return {"fds": fds, "threads": threads, "rss_kb": rss}
    except (OSError, StopIteration):
        return None


class Peak:
    def __init__(self):
        self.fds = self.threads = self.rss_kb = 0

    def update(self, fig):
        if fig:
            self.fds = max(self.fds, fig["fds"])
            self.threads = max(self.threads, fig["threads"])
            self.rss_kb = max(self.rss_kb, fig["rss_kb"])


def close_all(socks):
    for s in socks:
        try:
            s.close()
        except OSError:
            pass
    socks.clear()


def open_many(n, deadline, sink, stop):
    """Opens up to `n` connections (non-blocking connects, 256 at a time) into `sink`;
    returns how many failed."""
    failed = 0
    pending = {}
    opened = 0
    while (opened < n or pending) and time.monotonic() < deadline and not stop.is_set():
        while opened < n and len(pending) < 256:
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex((HOST, ARGS.port))
            pending[s.fileno()] = (s, time.monotonic())
            opened += 1
        # poll, not select: these fds are far above select's 1,024.
        poller = select.poll()
        for fd in pending:
            poller.register(fd, select.POLLOUT)
        for fd, _ in poller.poll(100):
            s, _ = pending.pop(fd)
            if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
                sink.append(s)
            else:
                failed += 1
                s.close()
        now = time.monotonic()
        for fd, (s, t) in list(pending.items()):
            if now - t > 5:
                del pending[fd]
                failed += 1
                s.close()
    for s, _ in pending.values():
        failed += 1
        s.close()
    return failed


def drip(socks, stop, payload):
    """Sends one more byte of `payload` on every socket each 2.5 s until `stop`."""
    at = 0
    while not stop.wait(2.5):
        if at >= len(payload):
            continue
        byte = payload[at : at + 1]
        for s in list(socks):
            try:
                s.send(byte)
            except OSError:
                pass
        at += 1


def malformed_worker(streams, lock, counts, deadline, stop):
    while time.monotonic() < deadline and not stop.is_set():
        with lock:
            data = next(streams, None)
        if data is None:
            return
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.settimeout(2)
        try:
            s.connect((HOST, ARGS.port))
            s.sendall(data)
            s.settimeout(0.05)
            try:
                s.recv(4096)
            except (socket.timeout, OSError):
                pass
            with lock:
                counts["sent"] += 1
        except OSError:
            with lock:
                counts["failed"] += 1
        finally:
            s.close()


def real_test(n):
    udp = n % 3 == 2
    cmd = [ARGS.binary, "send", "-c", HOST, "-p", str(ARGS.port), "-B", REAL_SOURCE, "-t", "1s",
           "--warmup", "200ms", "--cooldown", "100ms"]
    if udp:
        cmd += ["--proto", "udp", "-b", "50M"]
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=30)
        rc, err = p.returncode, p.stderr.decode(errors="replace").strip().splitlines()
    except subprocess.TimeoutExpired:
        rc, err = "timeout", ["no exit within 30 s"]
    return {"n": n, "proto": "udp" if udp else "tcp", "rc": rc, "seconds": round(time.monotonic() - t0, 2),
            "error": err[-1] if err and rc != 0 else None}


def real_tests(results, stop):
    n = 0
    while not stop.is_set():
        results.append(real_test(n))
        n += 1


def main():
    global ARGS
    ap = argparse.ArgumentParser(description="soak one uringbench recv under attack, on loopback")
    ap.add_argument("--binary", default="target/debug/uringbench")
    ap.add_argument("--port", type=int, default=15400)
    ap.add_argument("--malformed", type=int, default=20000)
    ap.add_argument("--drip", type=int, default=2400)
    ap.add_argument("--idle", type=int, default=2000)
    ap.add_argument("--hold", type=float, default=30.0, help="seconds the attack lasts at least")
    ap.add_argument("--json-out")
    ARGS = ap.parse_args()
    if not os.access(ARGS.binary, os.X_OK):
        print(f"soak_recv: {ARGS.binary} is not an executable (cargo build first)", file=sys.stderr)
        return 2
    # Both this process and the receiver (which inherits the limit) hold one fd per attack
    # connection; without CAP_SYS_RESOURCE the hard limit is as far as it goes.
    need = ARGS.idle + ARGS.drip + 1024
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, NOFILE))
    except (ValueError, OSError):
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft != resource.RLIM_INFINITY and soft < need:
        print(f"soak_recv: RLIMIT_NOFILE is {soft}, the attack needs {need} (raise the hard limit)", file=sys.stderr)
        return 2

    stop_attack = threading.Event()
    stop_real = threading.Event()
    attack = []  # idle + drip sockets
    recv = subprocess.Popen([ARGS.binary, "recv", "--bind", HOST, "--port", str(ARGS.port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

    def on_signal(signum, _frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    result = {"binary": ARGS.binary}
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection((HOST, ARGS.port), timeout=0.5).close()
                break
            except OSError:
                time.sleep(0.1)
        else:
            print("soak_recv: the receiver never listened", file=sys.stderr)
            return 1
        warm = real_test(0)
        if warm["rc"] != 0:
            print(f"soak_recv: a real test fails before any attack: {warm}", file=sys.stderr)
            return 1
        time.sleep(2)
        base = proc_figures(recv.pid)
        result["baseline"] = base
        print(f"baseline: {base['fds']} fds, {base['threads']} threads, {base['rss_kb'] / 1024:.1f} MB RSS")

        reals = []
        real_thread = threading.Thread(target=real_tests, args=(reals, stop_real), daemon=True)
        real_thread.start()
        peak = Peak()
        t_attack = time.monotonic()
        limit = t_attack + ARGS.hold + 120
        idle_failed = open_many(ARGS.idle, limit, attack, stop_attack)
        idle_open = len(attack)
        drip_socks = []
        drip_failed = open_many(ARGS.drip, limit, drip_socks, stop_attack)
        attack.extend(drip_socks)
        dripper = threading.Thread(target=drip, args=(drip_socks, stop_attack, control_stream(HELLO)), daemon=True)
        dripper.start()
        peak.update(proc_figures(recv.pid))
        print(f"attack: {idle_open} idle and {len(drip_socks)} slow-drip connections open "
              f"({idle_failed + drip_failed} failed to connect) after {time.monotonic() - t_attack:.1f} s")
        streams = mutations(random.Random(13), ARGS.malformed)
        lock = threading.Lock()
        counts = {"sent": 0, "failed": 0}
        workers = [threading.Thread(target=malformed_worker, args=(streams, lock, counts, limit, stop_attack),
                                    daemon=True) for _ in range(32)]
        for w in workers:
            w.start()
        while any(w.is_alive() for w in workers) or time.monotonic() < t_attack + ARGS.hold:
            if time.monotonic() > limit:
                break
            peak.update(proc_figures(recv.pid))
            time.sleep(0.5)
        stop_attack.set()
        for w in workers:
            w.join(5)
        dripper.join(5)
        peak.update(proc_figures(recv.pid))
        drip_open = len(drip_socks)
        close_all(attack)
        drip_socks.clear()
        stop_real.set()
        t_end = time.monotonic()
        print(f"attack over after {t_end - t_attack:.1f} s: {counts['sent']} malformed streams sent "
              f"({counts['failed']} failed to connect); peak {peak.fds} fds, {peak.threads} threads, "
              f"{peak.rss_kb / 1024:.1f} MB RSS")

        recovered_at = None
        samples = []
        while time.monotonic() < t_end + RECOVERY_S:
            fig = proc_figures(recv.pid)
            if fig is None:
                break
            samples.append(fig)
            ok = (abs(fig["fds"] - base["fds"]) <= FD_SLACK and abs(fig["threads"] - base["threads"]) <= THREAD_SLACK
                  and fig["rss_kb"] <= base["rss_kb"] + RSS_SLACK_KB)
            if ok and recovered_at is None:
                recovered_at = time.monotonic() - t_end
            if not ok:
                recovered_at = None
            time.sleep(0.25)
        real_thread.join(40)
        after = proc_figures(recv.pid)
        final = real_test(len(reals))
        alive = recv.poll() is None
        real_ok = [r for r in reals if r["rc"] == 0]
        result.update({
            "attack": {"idle": idle_open, "drip": drip_open,
                       "idle_connect_failures": idle_failed, "drip_connect_failures": drip_failed,
                       "malformed_sent": counts["sent"], "malformed_connect_failures": counts["failed"],
                       "seconds": round(t_end - t_attack, 1)},
            "peak": vars(peak),
            "at_10s": samples[-1] if samples else None,
            "recovered_after_s": None if recovered_at is None else round(recovered_at, 2),
            "real_tests": reals,
            "final_test": final,
            "receiver_alive": alive,
        })
        last = samples[-1] if samples else after
        print(f"10 s after: {last['fds']} fds, {last['threads']} threads, {last['rss_kb'] / 1024:.1f} MB RSS "
              f"(baseline {base['fds']}, {base['threads']}, {base['rss_kb'] / 1024:.1f} MB)" if last else
              "10 s after: the receiver is gone")
        slowest = max((r["seconds"] for r in reals), default=0)
        print(f"real tests during the attack: {len(real_ok)} of {len(reals)} succeeded (slowest {slowest} s); "
              f"after: {'ok' if final['rc'] == 0 else 'FAILED: ' + str(final['error'])}")
        for r in reals:
            if r["rc"] != 0:
                print(f"  test {r['n']} ({r['proto']}): exit {r['rc']} after {r['seconds']} s: {r['error']}")
        # Judged on the last reading, 10 s after the attack's end.
        checks = {
            "fds back to baseline ±2 within 10 s": bool(last) and abs(last["fds"] - base["fds"]) <= FD_SLACK,
            "threads back to baseline ±2 within 10 s":
                bool(last) and abs(last["threads"] - base["threads"]) <= THREAD_SLACK,
            "RSS within baseline + 16 MB": bool(last) and last["rss_kb"] <= base["rss_kb"] + RSS_SLACK_KB,
            "every real test succeeded": len(real_ok) == len(reals) and len(reals) > 0 and final["rc"] == 0,
            "receiver still running": alive,
        }
        result["checks"] = checks
        result["pass"] = all(checks.values())
        for name, ok in checks.items():
            print(f"  {'pass' if ok else 'FAIL'}: {name}")
        print("soak_recv: PASS" if result["pass"] else "soak_recv: FAIL")
        return 0 if result["pass"] else 1
    except KeyboardInterrupt:
        print("soak_recv: interrupted", file=sys.stderr)
        return 130
    finally:
        stop_attack.set()
        stop_real.set()
        close_all(attack)
        if recv.poll() is None:
            os.killpg(recv.pid, signal.SIGKILL)
        recv.wait()
        if ARGS.json_out:
            with open(ARGS.json_out, "w") as f:
                json.dump(result, f, indent=1)


ARGS = None

if __name__ == "__main__":
    sys.exit(main())
