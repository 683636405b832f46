#!/usr/bin/env bash
# xdp_frame_cost.sh: CPU time per 64-byte frame on the sending core, for the AF_XDP sender
# (--gen xsk), the live-frames generator (--gen live) into an AF_XDP socket receiver, the
# generator into --xdp-count kernel, and the XSK sender and the generator into kernel counting
# of a previous build (both ends that build); interleaved runs.
#
#   sudo benches/xdp_frame_cost.sh [RUNS] [BINARY] [PREV_BINARY]
#        (defaults: 5, target/release/uringbench, /work/prev-bin/uringbench)
#
# Each run: a netns pair "xc" (scripts/netns-pair.sh), receiver on CPU 1, sender on CPU 0,
# unpaced 22-byte datagrams (64-byte frames) for 4 s without warm-up. After 1.5 s, perf stat
# counts the sending process's task-clock for 2 s: on veth the receiving end's NAPI work (the
# peer's XDP program, the copy to an AF_XDP socket or the kernel count) runs in softirq on the
# sending CPU, in the sender's context, so it is included. CPU per frame = task-clock ÷ the
# frames sent in those 2 s (the test's average rate × 2 s). Unlike frames/s, this barely
# depends on what else runs on the machine: 1e9 ÷ it is what one dedicated core would send.
# Needs root, perf, python3. Hold /tmp/uringbench-test-traffic.lock around it (flock).
set -euo pipefail
RUNS=${1:-5}
B=$(realpath "${2:-target/release/uringbench}")
P=${3:-/work/prev-bin/uringbench}
cd "$(dirname "$0")/.."
scripts/netns-pair.sh up --name xc >/dev/null
trap 'scripts/netns-pair.sh down --name xc >/dev/null' EXIT
tmp=$(mktemp -d)
one() { # NAME BINARY SEND_ARGS RECV_ARGS
    ip netns exec xc-b taskset -c 1 "$2" recv --once $4 >"$tmp/recv.txt" 2>&1 &
    sleep 0.7
    ip netns exec xc-a taskset -c 0 "$2" send -c 10.77.0.2 -u -l 22 -t 4 -b 0 --warmup 0s -J $3 \
        >"$tmp/send.json" 2>/dev/null &
    local send=$!
    sleep 1.5
    perf stat -e task-clock -p "$send" -x, -o "$tmp/perf.txt" -- sleep 2 >/dev/null 2>&1 || true
    wait
    python3 - "$1" "$tmp" <<'PY'
import json, sys
name, tmp = sys.argv[1], sys.argv[2]
d = json.load(open(tmp + "/send.json"))
ms = float([l for l in open(tmp + "/perf.txt") if "task-clock" in l][0].split(",")[0])
s = d["sum"]
span = d["test"]["time_ms"] / 1000.0 + d["test"]["cooldown_ms"] / 1000.0
sent, received = s["sender"]["datagrams"] / span, s["receiver"]["datagrams"] / span
print("%-8s sent %.3f M/s received %.3f M/s lost %d; sender CPU %.0f ms in 2 s -> %.0f ns/frame"
      % (name, sent / 1e6, received / 1e6, s["receiver"]["lost"], ms, ms * 1e6 / (sent * 2)))
PY
}
for _ in $(seq "$RUNS"); do
    one xsk "$B" "--engine xdp" "--engine xdp"
    one live "$B" "--engine xdp --gen live" "--engine xdp"
    one livek "$B" "--engine xdp --gen live" "--engine xdp --xdp-count kernel"
    [ -x "$P" ] && one xsk-prev "$P" "--engine xdp" "--engine xdp"
    [ -x "$P" ] && one livek-prev "$P" "--engine xdp --gen live" "--engine xdp --xdp-count kernel"
done
