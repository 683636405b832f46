# NTttcp's no-sync udp sender as the tests (cli/tests/ntttcp_interop.rs) and benches/peer_pairings.sh use it.
import json, socket, sys, time
ports, rate, secs, lo, hi = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(ports)]
payload = b"B" * 1400
sent, inside, n, t0 = [0] * ports, 0, 0, time.time()
while True:
    now = time.time() - t0
    if now >= secs:
        break
    while n < rate * now + 1:
        i = n % ports
        at = time.time() - t0
        socks[i].sendto(payload, ("10.77.0.2", 5001 + i))
        sent[i] += 1; n += 1
        inside += lo <= at < hi
    time.sleep(0.0005)
print(json.dumps({"datagrams": sent, "inside": inside}))
