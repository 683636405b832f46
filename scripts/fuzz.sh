#!/usr/bin/env bash
# fuzz.sh: builds every cargo-fuzz target in fuzz/ and runs each for SECONDS (default 60),
# one after another, starting from its committed seeds (fuzz/seeds/TARGET, captured from real
# traffic by fuzz/seeds.sh), the inputs of crashes fixed since (fuzz/regressions/TARGET) and
# what earlier runs found (fuzz/corpus/TARGET, not committed).
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]
#
# Prints each target's executions (libFuzzer's "#N DONE" line) and a pass/fail summary; a
# crash, timeout (10 s per input), leak or memory blow-up (2 GiB) fails the target, and its
# input is kept in fuzz/artifacts/TARGET/ with the log in fuzz/logs/TARGET.log. Exit status:
# 0 all passed, 1 a target failed, 2 usage or missing tools (scripts/install-deps.sh --fuzz).
set -euo pipefail
cd "$(dirname "$0")/.."
prog=${0##*/}
export PATH="$HOME/.cargo/bin:$PATH"

seconds=${1:-60}
[[ "$seconds" =~ ^[1-9][0-9]*$ ]] || { echo "$prog: SECONDS must be a positive integer, not '$seconds'" >&2; exit 2; }
shift $(($# > 0 ? 1 : 0))
command -v cargo-fuzz >/dev/null || { echo "$prog: cargo-fuzz missing: scripts/install-deps.sh --fuzz" >&2; exit 2; }
rustup toolchain list | grep -q '^nightly-' || { echo "$prog: no nightly toolchain: scripts/install-deps.sh --fuzz" >&2; exit 2; }

targets=("$@")
if [ "${#targets[@]}" -eq 0 ]; then
    mapfile -t targets < <(cd fuzz && cargo +nightly fuzz list)
fi
echo "$prog: building the targets (cargo +nightly fuzz build)"
(cd fuzz && cargo +nightly fuzz build)

mkdir -p fuzz/logs
failed=()
summary=()
for t in "${targets[@]}"; do
    [ -d "fuzz/seeds/$t" ] || { echo "$prog: no seeds for '$t' (fuzz/seeds.sh)" >&2; exit 2; }
    mkdir -p "fuzz/corpus/$t"
    log="fuzz/logs/$t.log"
    echo "$prog: $t for $seconds s"
    rc=0
    # The corpus directory comes first: libFuzzer adds what it finds there, never to the seeds.
    # fuzz/regressions/TARGET holds inputs that once crashed a target (fixed since).
    dirs=("corpus/$t" "seeds/$t")
    [ -d "fuzz/regressions/$t" ] && dirs+=("regressions/$t")
    (cd fuzz && timeout -k 10 $((seconds + 300)) cargo +nightly fuzz run "$t" "${dirs[@]}" -- \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1) \
        >"$log" 2>&1 || rc=$?
    execs=$(sed -n 's/^#\([0-9]*\)[[:space:]]*DONE.*/\1/p' "$log" | tail -n 1)
    if [ "$rc" -eq 0 ] && [ -n "$execs" ]; then
        summary+=("$(printf '%-16s %12s execs  pass' "$t" "$execs")")
    else
        why=$(grep -m 1 -E 'ERROR: (libFuzzer|AddressSanitizer|LeakSanitizer)|panicked at' "$log" || echo "exit status $rc")
        summary+=("$(printf '%-16s %12s execs  FAIL: %s' "$t" "${execs:-?}" "$why")")
        failed+=("$t")
    fi
done
printf '%s\n' "${summary[@]}"
if [ "${#failed[@]}" -gt 0 ]; then
    echo "$prog: ${#failed[@]} of ${#targets[@]} targets failed: ${failed[*]} (logs in fuzz/logs/, inputs in fuzz/artifacts/)"
    exit 1
fi
echo "$prog: all ${#targets[@]} targets passed, $seconds s each"
