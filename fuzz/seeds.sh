#!/usr/bin/env bash
# Regenerates the fuzz targets' seed corpora (fuzz/seeds/TARGET/) from real traffic on
# loopback: uringbench send/rr/crr against uringbench recv, iperf 2.1.8 clients and servers,
# nginx, and UDP frames on lo. Needs root (AF_PACKET), iperf and nginx
# (scripts/install-deps.sh --test). Usage: fuzz/seeds.sh [BINARY]
set -euo pipefail
cd "$(dirname "$0")/.."
binary=${1:-target/debug/uringbench}
[ -x "$binary" ] || cargo build -p uringbench
exec timeout -k 5 300 python3 fuzz/capture_seeds.py --binary "$binary" --out fuzz/seeds
