#!/usr/bin/env bash
# test.sh: the whole test suite, as the README's second command.
#
#   scripts/test.sh [cargo test arguments, e.g. -p uringbench-engine, or a test name]
#
# Installs what the tests need and lacks (scripts/install-deps.sh --build --test --fleet, which says
# what it installs), then runs `cargo test --workspace`: unit tests, and real-traffic tests
# between network namespaces the tests create and remove. Needs root (namespaces, XDP,
# iptables) and a Rust toolchain. Prints one summary line, "N passed, N failed, N skipped",
# and the reason for each skip; exits non-zero when a test fails.
#
# A test that cannot run (the VM lab is not up, a tool is missing) records a skip
# (cli/tests/common `skip`) in $URINGBENCH_SKIP_LOG: cargo counts it as passed, so it is
# counted here apart. With URINGBENCH_NO_SKIP=1 (.ci/run) a skip for want of a tool CI installs
# fails the test instead.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
command -v cargo >/dev/null || { echo "test.sh: cargo not found: install Rust first (https://rustup.rs)" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "test.sh: run as root: the tests create network namespaces and attach XDP programs" >&2; exit 1; }
scripts/install-deps.sh --build --test --fleet --quiet

log=$(mktemp)
skips=$(mktemp)
trap 'rm -f "$log" "$skips"' EXIT
export URINGBENCH_SKIP_LOG=$skips
status=0
cargo test --workspace "$@" 2>&1 | tee "$log" || status=$?
passed=$(grep -Eo '^test result: (ok|FAILED)\. [0-9]+ passed' "$log" | awk '{s += $4} END {print s + 0}')
failed=$(grep -Eo '; [0-9]+ failed' "$log" | awk '{s += $2} END {print s + 0}')
skipped=$(grep -c '^SKIP: ' "$skips" || true)
echo "test.sh: $((passed - skipped)) passed, $failed failed, $skipped skipped"
sed 's/^SKIP: /test.sh: skipped /' "$skips"
exit "$status"
