# NTttcp's no-sync receiver as the tests (cli/tests/ntttcp_interop.rs) and benches/peer_pairings.sh use it.
import json, socket, sys, threading
ports, conns = int(sys.argv[1]), int(sys.argv[2])
total, ended, lock = [0], [0], threading.Lock()
def count(c):
    n = 0
    while True:
        b = c.recv(1 << 20)
        if not b:
            break
        n += len(b)
    with lock:
        total[0] += n
        ended[0] += 1
def listen(port):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("10.77.0.2", port)); s.listen(64); s.settimeout(30)
    while True:
        try:
            c, _ = s.accept()
        except OSError:
            return
        threading.Thread(target=count, args=(c,), daemon=True).start()
for p in range(ports):
    threading.Thread(target=listen, args=(5001 + p,), daemon=True).start()
import time
deadline = time.time() + 40
while time.time() < deadline:
    with lock:
        if ended[0] >= conns:
            break
    time.sleep(0.05)
print(json.dumps({"bytes": total[0], "connections": ended[0]}))
