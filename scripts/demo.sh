#!/usr/bin/env bash
# demo.sh: build uringbench and run one TCP stream test between two network namespaces.
#
#   scripts/demo.sh [extra `uringbench send` options, e.g. -P 4 --format json]
#
# Creates the netns pair "ubdemo" (scripts/netns-pair.sh), runs `uringbench recv --once` in
# ubdemo-b and a 5 s `uringbench send` from ubdemo-a, prints the report, removes the pair.
# Receiver and sender get a CPU each when the machine has two or more.
# Needs root and a Rust toolchain; the system packages it lacks (compilers and headers for the
# build, iproute2) are installed first by scripts/install-deps.sh, which says what it installs.
set -euo pipefail
cd "$(dirname "$0")/.."

export PATH="$HOME/.cargo/bin:$PATH"
command -v cargo >/dev/null || { echo "demo.sh: cargo not found: install Rust first (https://rustup.rs)" >&2; exit 1; }
scripts/install-deps.sh --build --quiet
cargo build --release --quiet
bin=target/release/uringbench
name=ubdemo
recv_cpus=()
send_cpus=()
if [ "$(nproc)" -ge 2 ]; then
    recv_cpus=(--cpus 1)
    send_cpus=(--cpus 0)
fi

scripts/netns-pair.sh up --name "$name"
recv_pid=""
cleanup() {
    [ -n "$recv_pid" ] && kill "$recv_pid" 2>/dev/null
    scripts/netns-pair.sh down --name "$name"
}
trap cleanup EXIT

ip netns exec "$name-b" "$bin" recv --once "${recv_cpus[@]}" >/tmp/uringbench-demo-recv.log 2>&1 &
recv_pid=$!
for _ in $(seq 50); do
    ip netns exec "$name-b" ss -Htln | grep -q ':5300 ' && break
    sleep 0.1
done

defaults=(-t 5 -i 1s)
for arg in "$@"; do
    case "$arg" in -t | --time | --time=* | -i | --interval | --interval=*) defaults=() ;; esac
done
status=0
ip netns exec "$name-a" "$bin" send --target 10.77.0.2 "${defaults[@]}" "${send_cpus[@]}" "$@" || status=$?
wait "$recv_pid" || true
recv_pid=""
exit "$status"
