# NTttcp's no-sync udp receiver as the tests (cli/tests/ntttcp_interop.rs) and benches/peer_pairings.sh use it.
import json, select, socket, sys, time
ports = int(sys.argv[1])
socks = []
for p in range(ports):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    s.bind(("10.77.0.2", 5001 + p)); s.setblocking(False); socks.append(s)
print("ready", flush=True)
count, total, seen, last, deadline = [0] * ports, 0, set(), None, time.time() + 40
while time.time() < deadline and (last is None or time.time() - last < 1.5):
    for s in select.select(socks, [], [], 0.1)[0]:
        while True:
            try:
                b = s.recv(65536)
            except BlockingIOError:
                break
            i = socks.index(s); count[i] += 1; total += len(b); seen.add(i); last = time.time()
print(json.dumps({"bytes": total, "datagrams": sum(count), "ports": len(seen)}))
