#!/usr/bin/env bash
# peer_pairings.sh: one run of each pairing with another tool, both ends' own figures, on a
# private netns pair (ubpair-a 10.77.0.1, ubpair-b 10.77.0.2): iperf2 and iperf3 in both roles
# (TCP, UDP, iperf3's -R and --bidir), and NTttcp's no-sync mode against the Python far end the
# tests use (no NTttcp binary exists in the registries this project reaches). Needs root,
# iperf, iperf3, python3 and a release build (target/release/uringbench, or $URINGBENCH).
#   bash benches/peer_pairings.sh [SECONDS]      (default 3 s a run; about 2 minutes in all)
set -u
cd "$(dirname "$0")/.." || exit 2
U=${URINGBENCH:-$PWD/target/release/uringbench}
T=${1:-3}
NT=$PWD/cli/tests/ntttcp
A=ubpair-a B=ubpair-b
[ -x "$U" ] || { echo "peer_pairings.sh: no $U (cargo build --release)" >&2; exit 2; }
cleanup() { ip netns pids "$B" 2>/dev/null | xargs -r kill 2>/dev/null; ip netns del "$A" 2>/dev/null; ip netns del "$B" 2>/dev/null; }
trap cleanup EXIT
cleanup
ip netns add "$A" && ip netns add "$B" || exit 1
ip link add vpa netns "$A" type veth peer name vpb netns "$B"
ip -n "$A" addr add 10.77.0.1/24 dev vpa && ip -n "$B" addr add 10.77.0.2/24 dev vpb
for ns in "$A" "$B"; do ip -n "$ns" link set lo up; done
ip -n "$A" link set vpa up && ip -n "$B" link set vpb up
a() { ip netns exec "$A" timeout 60 "$@"; }
far_log=$(mktemp)
# The far end in namespace b, given 2 s to listen; `ended` stops whatever is left there.
far() { ip netns exec "$B" timeout 60 "$@" >"$far_log" 2>&1 & sleep 2; }
ended() { sleep 1; ip netns pids "$B" | xargs -r kill 2>/dev/null; wait; echo "--- the far end:"; grep -v '^ *$' "$far_log" | tail -n "${1:-8}"; }
pairing() { echo; echo "=== $*"; }

pairing "send --iperf2 -> iperf -s"; far iperf -s; a "$U" send --iperf2 -c 10.77.0.2 -P 2 -t "$T" | grep -E '^total'; ended 3
pairing "send --iperf2 -u -> iperf -s -u"; far iperf -s -u; a "$U" send --iperf2 -c 10.77.0.2 -u -b 200M -P 2 -t "$T" | grep -E '^udp'; ended 2
pairing "iperf -c -> recv --iperf2"; far "$U" recv --iperf2 --once; a iperf -c 10.77.0.2 -P 2 -t "$T" | tail -n 1; ended 1
pairing "iperf -c -u -> recv --iperf2"; far "$U" recv --iperf2 --once; a iperf -c 10.77.0.2 -u -b 100M -P 2 -t "$T" | grep -A1 'Server Report' | grep -v 'Server\|ID\|--'; ended 1
for mode in "" "-R" "--bidir" "-u -b 100M" "-u -b 100M -R" "-u -b 100M --bidir"; do
    pairing "send --iperf3 $mode -> iperf3 -s"; far iperf3 -s -1
    # shellcheck disable=SC2086 # the mode's words are separate arguments
    a "$U" send --iperf3 -c 10.77.0.2 $mode -P 2 -t "$T" --warmup 0 | grep -E '^total|^udp|^iperf3 server'
    ended 4
done
for mode in "" "-R" "--bidir" "-u -b 100M" "-u -b 100M -R" "-u -b 100M --bidir"; do
    pairing "iperf3 -c $mode -> recv --iperf3"; far "$U" recv --iperf3 --once
    # shellcheck disable=SC2086
    a iperf3 -c 10.77.0.2 $mode -P 2 -t "$T" | grep -E 'SUM.*(sender|receiver)'
    ended 1
done
pairing "send --ntttcp -> NTttcp's receiver"; far python3 "$NT/receiver.py" 2 2
a "$U" send --ntttcp -c 10.77.0.2 -P 2 -t "$T" --warmup 0 --cooldown 0 | grep -E '^total'; ended 1
pairing "NTttcp's sender -> recv --ntttcp"; far "$U" recv --ntttcp -P 2 --once
a python3 "$NT/sender.py" 2 "$T"; ended 1
pairing "send --ntttcp -u -> NTttcp's UDP receiver"; far python3 "$NT/udp_receiver.py" 2
a "$U" send --ntttcp -u -c 10.77.0.2 -P 2 -b 100M -l 1400 -t "$T" --warmup 0 --cooldown 0 | grep -E '^total'; sleep 2; ended 1
pairing "NTttcp's UDP sender -> recv --ntttcp -u"; far "$U" recv --ntttcp -u -P 2 -t "$T" --warmup 0 --cooldown 0 --once
a python3 "$NT/udp_sender.py" 2 20000 "$T" 0 "$T"; sleep 2; ended 1
rm -f "$far_log"
