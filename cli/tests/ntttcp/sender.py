# NTttcp's no-sync sender as the tests (cli/tests/ntttcp_interop.rs) and benches/peer_pairings.sh use it.
import json, socket, sys, threading, time
ports, secs = int(sys.argv[1]), float(sys.argv[2])
sent, lock = [0], threading.Lock()
chunk = b"\0" * 65536
def run(port):
    s = socket.create_connection(("10.77.0.2", port), timeout=10)
    n, end = 0, time.time() + secs
    while time.time() < end:
        s.sendall(chunk)
        n += len(chunk)
    s.shutdown(socket.SHUT_WR)
    s.recv(1)
    s.close()
    with lock:
        sent[0] += n
ts = [threading.Thread(target=run, args=(5001 + p,)) for p in range(ports)]
[t.start() for t in ts]
[t.join() for t in ts]
print(json.dumps({"bytes": sent[0]}))
