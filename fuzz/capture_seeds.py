#!/usr/bin/env python3
"""Captures the fuzz targets' seed corpora from real traffic on loopback (fuzz/seeds.sh runs it).

    python3 fuzz/capture_seeds.py --binary target/debug/uringbench --out fuzz/seeds

Every seed is bytes a real peer sent, recorded at the parser's boundary:
  control_frame  both directions of real `uringbench send/rr/crr` control connections to a
                 `uringbench recv`, through a recording TCP relay (greeting + frames), and
                 the first data flow's greeting
  hello_spec     the JSON body of each captured hello
  iperf2_tcp     the first bytes of real `iperf -c` (2.1.8) TCP connections with various
                 options, and the header ack a real `iperf -s` sends a `-X` client
  iperf2_udp     real `iperf -c -u` datagrams (first, middle, FIN) and the server report a
                 real `iperf -s -u` sends back; `uringbench send --iperf2 -u` datagrams
  iperf3_control both directions of real `iperf3 -c` (3.x) control connections to a real
                 `iperf3 -s`, through a recording TCP relay (cookie, states, parameters and
                 results JSON), for several options
  http1_response real nginx responses (length, chunked gzip, HEAD, 404, 304, keep-alive,
                 HTTP/1.0), prefixed with the target's read-size byte
  xdp_frame      Ethernet frames of UDP datagrams on `lo` (IPv4 and IPv6), from AF_PACKET
  udp_seq        the captured datagram headers (arbitrary-header mode) and the arrival order
                 of a real run turned into the model's operations

Loopback only; every process is bounded in time and killed at the end. Needs root (AF_PACKET).
"""

import argparse
import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

HOST = "127.0.0.1"
RECV_PORT = 15390
RELAY_PORT = 15391
IPERF_PORT = 15392
IPERF_SERVER_PORT = 15393
HTTP_PORT = 15394
IPERF3_SERVER_PORT = 15395
IPERF3_RELAY_PORT = 15396
CAPTURE_LIMIT = 64 * 1024

procs = []


def spawn(cmd, **kw):
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, **kw)
    procs.append(p)
    return p


def run(cmd, timeout):
    """Runs a client for at most `timeout` seconds (then SIGKILL of its group)."""
    p = spawn(cmd)
    try:
        p.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def stop_all():
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


def wait_port(port, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection((HOST, port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"capture_seeds: nothing listens on {HOST}:{port}")


def write(out, target, name, data):
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


class TcpRelay:
    """Accepts on `listen`, relays each connection to `upstream`, records both directions."""

    def __init__(self, listen, upstream):
        self.upstream = upstream
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((HOST, listen))
        self.sock.listen(64)
        self.conns = []  # [client->server bytes, server->client bytes]
        self.done = False
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while not self.done:
            r, _, _ = select.select([self.sock], [], [], 0.1)
            if not r:
                continue
            try:
                a, _ = self.sock.accept()
            except OSError:
                return
            b = socket.create_connection(("127.0.0.1", self.upstream))
            rec = [bytearray(), bytearray()]
            self.conns.append(rec)
            threading.Thread(target=self.pump, args=(a, b, rec), daemon=True).start()

    def pump(self, a, b, rec):
        ends = {a: (b, rec[0]), b: (a, rec[1])}
        deadline = time.monotonic() + 30
        while ends and time.monotonic() < deadline:
            r, _, _ = select.select(list(ends), [], [], 0.2)
            for s in r:
                if s not in ends:  # cleared by a failed send to its peer in this round
                    continue
                peer, buf = ends[s]
                try:
                    data = s.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    try:
                        peer.shutdown(socket.SHUT_WR)
                    except OSError:
                        pass
                    del ends[s]
                    continue
                if len(buf) < CAPTURE_LIMIT:
                    buf += data[: CAPTURE_LIMIT - len(buf)]
                try:
                    peer.sendall(data)
                except OSError:
                    ends.clear()
        a.close()
        b.close()

    def close(self):
        self.done = True
        time.sleep(0.2)
        self.sock.close()


def first_frame_body(stream):
    """Body of the first frame after a 4-byte greeting, or None."""
    if len(stream) < 8:
        return None
    (word,) = struct.unpack(">I", stream[4:8])
    n = word & 0x7FFFFFFF
    return bytes(stream[8 : 8 + n]) if len(stream) >= 8 + n else None


def capture_control(binary, out):
    recv = spawn([binary, "recv", "--bind", HOST, "--port", str(RECV_PORT), "--max-sessions", "4"])
    wait_port(RECV_PORT)
    relay = TcpRelay(RELAY_PORT, RECV_PORT)
    short = ["-t", "300ms", "--warmup", "100ms", "--cooldown", "50ms"]
    tests = {
        "tcp": ["send", *short],
        "tcp-interval-multi": ["send", *short, "-i", "100ms", "-P", "2", "--flows-per-queue", "2"],
        "tcp-reverse": ["send", *short, "--reverse"],
        "tcp-bidir": ["send", *short, "--bidir"],
        "udp": ["send", *short, "--proto", "udp", "-b", "10M", "-l", "1200"],
        "rr": ["rr", *short, "--req", "64", "--resp", "256"],
        "crr": ["crr", *short],
    }
    for name, args in tests.items():
        before = len(relay.conns)
        run([binary, args[0], "-c", HOST, "-p", str(RELAY_PORT), *args[1:]], timeout=20)
        time.sleep(0.3)
        for c2s, s2c in relay.conns[before:]:
            if c2s[:4] == b"UBC1":
                write(out, "control_frame", f"{name}-client", bytes(c2s))
                write(out, "control_frame", f"{name}-receiver", bytes(s2c))
                body = first_frame_body(c2s)
                if body:
                    write(out, "hello_spec", f"{name}.json", body)
            elif c2s[:4] == b"UBD1" and name in ("tcp", "tcp-bidir"):
                write(out, "control_frame", f"{name}-data-greeting", bytes(c2s[:24]))
    relay.close()
    recv.kill()


def listen_tcp(port):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((HOST, port))
    s.listen(16)
    return s


def read_some(conn, limit=512, timeout=1.5):
    conn.settimeout(0.3)
    data = bytearray()
    deadline = time.monotonic() + timeout
    while len(data) < limit and time.monotonic() < deadline:
        try:
            chunk = conn.recv(limit - len(data))
        except socket.timeout:
            continue
        except OSError:
            break
        if not chunk:
            break
        data += chunk
    return bytes(data)


def capture_iperf2_tcp(out):
    lst = listen_tcp(IPERF_PORT)
    variants = {
        "plain": [],
        "enhanced": ["-e"],
        "bytes": ["-n", "64K"],
        "trip-times": ["--trip-times"],
        "peer-detect": ["-X"],
        "reverse": ["-R"],
        "full-duplex": ["--full-duplex"],
        "rate": ["-b", "10M", "-e"],
        "legacy-dual": ["-d"],
        "tradeoff": ["-r"],
        "permit-key": ["--permit-key=fuzzseed"],
    }
    headers = {}
    for name, extra in variants.items():
        client = spawn(["iperf", "-c", HOST, "-p", str(IPERF_PORT), "-t", "0.3", "-l", "256", *extra])
        lst.settimeout(3)
        try:
            conn, _ = lst.accept()
        except socket.timeout:
            client.kill()
            continue
        data = read_some(conn)
        conn.close()
        client.kill()
        client.wait()
        if data:
            write(out, "iperf2_tcp", name, data)
            headers[name] = data
    lst.close()
    # A real server's header ack: replay the captured -X header to `iperf -s`.
    if "peer-detect" in headers:
        server = spawn(["iperf", "-s", "-B", HOST, "-p", str(IPERF_SERVER_PORT)])
        wait_port(IPERF_SERVER_PORT)
        flags = struct.unpack(">I", headers["peer-detect"][:4])[0]
        hlen = (flags & 0x1FE) >> 1 if flags & 0x10000 else len(headers["peer-detect"])
        c = socket.create_connection((HOST, IPERF_SERVER_PORT), timeout=3)
        c.sendall(headers["peer-detect"][:hlen])
        ack = read_some(c, limit=52, timeout=2)
        c.close()
        server.kill()
        if ack:
            write(out, "iperf2_tcp", "server-ack", ack)


class UdpRelay:
    """Relays datagrams between one client and `upstream` (or just records them when
    `upstream` is None), keeping every datagram's first bytes in arrival order."""

    def __init__(self, listen, upstream=None, family=socket.AF_INET, host=HOST):
        self.sock = socket.socket(family, socket.SOCK_DGRAM)
        self.sock.bind((host, listen))
        self.up = None
        if upstream:
            self.up = socket.socket(family, socket.SOCK_DGRAM)
            self.up.connect((host, upstream))
        self.upstream = []
        self.downstream = []
        self.client = None
        self.done = False
        threading.Thread(target=self.loop, daemon=True).start()

    def loop(self):
        socks = [self.sock] + ([self.up] if self.up else [])
        while not self.done:
            r, _, _ = select.select(socks, [], [], 0.1)
            for s in r:
                try:
                    data, addr = s.recvfrom(65536)
                except OSError:
                    continue
                if s is self.sock:
                    self.client = addr
                    if len(self.upstream) < 20000:
                        self.upstream.append(data[:1500])
                    if self.up:
                        self.up.send(data)
                elif self.client:
                    self.downstream.append(data[:1500])
                    self.sock.sendto(data, self.client)

    def close(self):
        self.done = True
        time.sleep(0.2)
        self.sock.close()
        if self.up:
            self.up.close()


def capture_iperf2_udp(binary, out):
    server = spawn(["iperf", "-s", "-u", "-e", "-B", HOST, "-p", str(IPERF_SERVER_PORT)])
    time.sleep(0.5)
    runs = {
        "plain": [],
        "enhanced": ["-e"],
        "trip-times": ["--trip-times"],
        "reverse": ["-R"],
        "no-udp-fin": ["--no-udp-fin"],
        "isochronous": ["--isochronous=60:1m,0.1m"],
    }
    real_run = None
    for name, extra in runs.items():
        relay = UdpRelay(IPERF_PORT, IPERF_SERVER_PORT)
        run(["iperf", "-c", HOST, "-u", "-p", str(IPERF_PORT), "-t", "0.3", "-b", "2M", "-l", "1200", *extra],
            timeout=8)
        relay.close()
        sent = relay.upstream
        if not sent:
            continue
        write(out, "iperf2_udp", f"{name}-first", sent[0])
        write(out, "iperf2_udp", f"{name}-middle", sent[len(sent) // 2])
        write(out, "iperf2_udp", f"{name}-last", sent[-1])
        for i, report in enumerate(relay.downstream[:2]):
            write(out, "iperf2_udp", f"{name}-server-report-{i}", report)
        if name == "plain":
            real_run = sent
    server.kill()
    # uringbench's own datagrams, as `send --iperf2 -u` writes them.
    relay = UdpRelay(IPERF_PORT)
    run([binary, "send", "--iperf2", "-c", HOST, "-p", str(IPERF_PORT), "--proto", "udp", "-t", "300ms",
         "--warmup", "0ms", "--cooldown", "0ms", "-b", "2M", "-l", "200"], timeout=10)
    relay.close()
    if relay.upstream:
        write(out, "iperf2_udp", "uringbench-first", relay.upstream[0])
        write(out, "iperf2_udp", "uringbench-last", relay.upstream[-1])
        if real_run is None:
            real_run = relay.upstream
    return real_run, relay.upstream


def udp_seq_seeds(out, runs):
    for name, datagrams in runs.items():
        if not datagrams:
            continue
        # Arbitrary-header mode (odd first byte): the headers as they arrived.
        write(out, "udp_seq", f"{name}-headers", b"\x01" + b"".join(d[:20] for d in datagrams[:400]))
        # Model mode: the real arrival order as operations (deliver, drop for each gap, FIN).
        ops = bytearray([0, 0])
        nxt = 1
        for d in datagrams[:2000]:
            (seq,) = struct.unpack(">i", d[:4])
            if seq <= 0:
                continue
            while nxt < seq and len(ops) < 4000:
                ops.append(3)
                nxt += 1
            if seq == nxt:
                ops.append(0)
                nxt += 1
            else:
                ops.append(6 | min(nxt - 1 - seq, 31) << 3)
        ops.append(0xFF)
        write(out, "udp_seq", f"{name}-arrivals", bytes(ops))


NGINX_CONF = """\
worker_processes 1;
daemon off;
master_process off;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{ worker_connections 64; }}
http {{
    access_log off;
    keepalive_timeout 10s;
    types {{ text/plain txt; application/octet-stream bin; }}
    default_type application/octet-stream;
    gzip on;
    gzip_types text/plain;
    gzip_min_length 1;
    client_body_temp_path {prefix}/tmp;
    proxy_temp_path {prefix}/tmp;
    fastcgi_temp_path {prefix}/tmp;
    uwsgi_temp_path {prefix}/tmp;
    scgi_temp_path {prefix}/tmp;
    server {{
        listen {host}:{port};
        root {prefix}/html;
    }}
}}
"""


def capture_http(tmp, out):
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    prefix = os.path.join(tmp, "nginx")
    for d in ("html", "tmp"):
        os.makedirs(os.path.join(prefix, d), exist_ok=True)
    with open(os.path.join(prefix, "html", "f.bin"), "wb") as f:
        f.write(bytes(range(256)) * 4)
    with open(os.path.join(prefix, "html", "t.txt"), "w") as f:
        f.write("uringbench fuzz seed\n" * 200)
    conf = os.path.join(prefix, "nginx.conf")
    with open(conf, "w") as f:
        f.write(NGINX_CONF.format(prefix=prefix, host=HOST, port=HTTP_PORT))
    spawn([nginx, "-p", prefix + "/", "-c", conf])
    wait_port(HTTP_PORT)
    host = f"Host: {HOST}\r\n"
    mtime = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 3600))
    requests = {
        "length": (0x3F, f"GET /f.bin HTTP/1.1\r\n{host}\r\n"),
        "chunked-gzip": (0x07, f"GET /t.txt HTTP/1.1\r\n{host}Accept-Encoding: gzip\r\n\r\n"),
        "head": (0x80 | 0x7F, f"HEAD /f.bin HTTP/1.1\r\n{host}\r\n"),
        "not-found": (0x7F, f"GET /missing HTTP/1.1\r\n{host}\r\n"),
        "not-modified": (0x10, f"GET /f.bin HTTP/1.1\r\n{host}If-Modified-Since: {mtime}\r\n\r\n"),
        "keep-alive-two": (0x02, f"GET /f.bin HTTP/1.1\r\n{host}\r\nGET /t.txt HTTP/1.1\r\n{host}\r\n"),
        "http10-close": (0x7F, f"GET /f.bin HTTP/1.0\r\n\r\n"),
        "bad-request": (0x7F, "GARBAGE\r\n\r\n"),
    }
    for name, (ctl, req) in requests.items():
        c = socket.create_connection((HOST, HTTP_PORT), timeout=3)
        c.sendall(req.encode())
        if "close" not in name:
            time.sleep(0.3)
            c.shutdown(socket.SHUT_WR)
        data = read_some(c, limit=CAPTURE_LIMIT, timeout=2)
        c.close()
        if data:
            write(out, "http1_response", name, bytes([ctl]) + data)


def capture_iperf3(out):
    """Control connections of real iperf3 tests, both directions, through a recording relay."""
    if shutil.which("iperf3") is None:
        print("capture_seeds: iperf3 not installed, no iperf3_control seeds", file=sys.stderr)
        return
    server = spawn(["iperf3", "-s", "-B", HOST, "-p", str(IPERF3_SERVER_PORT)])
    wait_port(IPERF3_SERVER_PORT)
    relay = TcpRelay(IPERF3_RELAY_PORT, IPERF3_SERVER_PORT)
    tests = {
        "plain": [],
        "parallel": ["-P", "3"],
        "reverse": ["-R"],
        "bidir": ["--bidir"],
        "omit": ["-O", "1"],
        "knobs": ["-w", "256K", "-C", "reno", "-M", "1400", "-S", "16", "-b", "200M", "-l", "64K"],
        "server-output": ["--get-server-output", "-J"],
    }
    for name, extra in tests.items():
        before = len(relay.conns)
        run(["iperf3", "-c", HOST, "-p", str(IPERF3_RELAY_PORT), "-t", "1", *extra], timeout=15)
        time.sleep(0.3)
        if len(relay.conns) > before:
            control = relay.conns[before]
            write(out, "iperf3_control", f"{name}-client", bytes(control[0]))
            write(out, "iperf3_control", f"{name}-server", bytes(control[1]))
    relay.close()
    server.kill()


def capture_frames(binary, out, udp_traffic):
    """UDP frames on lo as AF_PACKET sees them, for IPv4 and IPv6."""
    cap = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
    cap.bind(("lo", 0))
    cap.settimeout(0.2)
    frames = {}

    def grab(key, send):
        t = threading.Thread(target=send, daemon=True)
        t.start()
        deadline = time.monotonic() + 5
        got = []
        while time.monotonic() < deadline and len(got) < 3:
            try:
                f = cap.recv(65536)
            except socket.timeout:
                continue
            et = f[12:14]
            if et == b"\x08\x00" and f[23] == 17 and struct.unpack(">H", f[36:38])[0] == IPERF_PORT:
                got.append(f)
            elif et == b"\x86\xdd" and f[20] == 17 and struct.unpack(">H", f[56:58])[0] == IPERF_PORT:
                got.append(f)
        t.join()
        for i, f in enumerate(got):
            frames[f"{key}-{i}"] = f

    def iperf_v4():
        run(["iperf", "-c", HOST, "-u", "-p", str(IPERF_PORT), "-t", "0.2", "-b", "1M", "-l", "300"], timeout=5)

    def iperf_v6():
        run(["iperf", "-V", "-c", "::1", "-u", "-p", str(IPERF_PORT), "-t", "0.2", "-b", "1M", "-l", "300"],
            timeout=5)

    sink4 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sink4.bind((HOST, IPERF_PORT))
    sink6 = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    sink6.bind(("::1", IPERF_PORT))
    grab("iperf-ipv4", iperf_v4)
    grab("iperf-ipv6", iperf_v6)
    sink4.close()
    sink6.close()
    cap.close()
    for name, f in frames.items():
        write(out, "xdp_frame", name, f)


def main():
    ap = argparse.ArgumentParser(description="capture the fuzz seeds from real loopback traffic")
    ap.add_argument("--binary", default="target/debug/uringbench")
    ap.add_argument("--out", default="fuzz/seeds")
    args = ap.parse_args()
    if not os.access(args.binary, os.X_OK):
        print(f"capture_seeds: {args.binary} is not an executable (cargo build first)", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("capture_seeds: needs root (AF_PACKET capture on lo)", file=sys.stderr)
        return 2
    shutil.rmtree(args.out, ignore_errors=True)
    tmp = tempfile.mkdtemp(prefix="ub-seeds-")
    try:
        capture_control(args.binary, args.out)
        capture_iperf2_tcp(args.out)
        iperf_run, ours = capture_iperf2_udp(args.binary, args.out)
        udp_seq_seeds(args.out, {"iperf2": iperf_run, "uringbench": ours})
        capture_http(tmp, args.out)
        capture_iperf3(args.out)
        capture_frames(args.binary, args.out, iperf_run)
    finally:
        stop_all()
        shutil.rmtree(tmp, ignore_errors=True)
    for target in sorted(os.listdir(args.out)):
        files = os.listdir(os.path.join(args.out, target))
        size = sum(os.path.getsize(os.path.join(args.out, target, f)) for f in files)
        print(f"{target}: {len(files)} seeds, {size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
