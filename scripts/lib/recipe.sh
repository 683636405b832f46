#!/usr/bin/env bash
# Shared steps of the cloud recipes (gcp-tier1.sh, aws-ena.sh, azure-accelnet.sh): put
# uringbench on two fresh Debian 12 VMs from this checkout (recipe_provision: the Debian
# package built on a, installed on both, the receiver as the packaged service on b), then
# check and measure between them, collecting every JSON document locally.
#
# A recipe sources this file and defines, before calling recipe_run:
#   on_vm VM CMD...          run CMD on VM ("a" or "b") over ssh; stdout comes back
#   put_file VM SRC DST      copy a local file to VM
#   get_file VM SRC DST      copy a file from VM
# and sets RESULTS (local folder), TARGET_IP (b's internal address), QUEUES, TEST_TIME,
# SWEEP_QUEUES, SWEEP_REPEAT, IFACE_HINT (a grep pattern for `ethtool -S` counters to keep, or "").
# Nothing here creates or deletes cloud resources: each recipe does that, and deletes them
# in its EXIT trap.

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

log() {
    printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" >&2
}

die() {
    log "error: $*"
    exit 1
}

usage() {
    sed -n '2,/^$/s/^# \{0,1\}//p' "$0" >&2
}

# Parses a recipe's command line: the options every recipe takes (--prefix, --queues,
# --time, --sweep, --repeat, --out, --keep, --help) and the recipe's own, which it lists in
# RECIPE_OPTIONS and sets in its recipe_option NAME VALUE. Bad input: one line, exit 2.
# shellcheck disable=SC2034  # the variables are the recipe's settings, read there
recipe_parse_args() {
    local prog=${0##*/}
    while [ $# -gt 0 ]; do
        case "$1" in
            --keep) KEEP=1; shift; continue ;;
            -h|--help) usage; exit 0 ;;
            --prefix|--queues|--time|--sweep|--repeat|--out) ;;
            *)
                if ! [[ " $RECIPE_OPTIONS " == *" $1 "* ]]; then
                    echo "$prog: unknown argument '$1'" >&2
                    usage
                    exit 2
                fi
                ;;
        esac
        [ $# -ge 2 ] || { echo "$prog: $1 needs a value" >&2; exit 2; }
        case "$1" in
            --prefix) PREFIX=$2 ;;
            --queues) QUEUES=$2 ;;
            --time) TEST_TIME=$2 ;;
            --sweep) SWEEP_QUEUES=$2 ;;
            --repeat) SWEEP_REPEAT=$2 ;;
            --out) RESULTS=$2 ;;
            *) recipe_option "$1" "$2" ;;
        esac
        shift 2
    done
}

# The package's file name for this checkout's version (cargo-deb: name_version_arch.deb).
deb_name() {
    local version
    version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$REPO_ROOT/Cargo.toml" | head -n 1)
    echo "uringbench_${version}_amd64.deb"
}

# Provisioning, the same scripts/provision.sh the Vagrantfile runs: a builds the Debian package
# from this checkout (build packages, a Rust toolchain and cargo-deb installed first) and
# installs it; the package comes back here and goes to b, which installs it and runs the
# receiver as the packaged uringbench-recv.service. tune.sh goes to both.
recipe_provision() {
    mkdir -p "$RESULTS"
    local src="$RESULTS/uringbench-src.tar.gz" deb vm
    deb=$(deb_name)
    git -C "$REPO_ROOT" archive --format=tar.gz -o "$src" HEAD
    wait_ssh a
    log "building the package on a"
    put_file a "$src" /tmp/uringbench-src.tar.gz
    # The sources are replaced; target/ stays, so a second run on the same VM builds incrementally.
    on_vm a "sudo mkdir -p /opt/uringbench && sudo find /opt/uringbench -mindepth 1 -maxdepth 1 ! -name target -exec rm -rf {} + && sudo tar -xzf /tmp/uringbench-src.tar.gz -C /opt/uringbench"
    on_vm a sudo /opt/uringbench/scripts/provision.sh --src /opt/uringbench --deb-out /tmp/uringbench-deb >"$RESULTS/provision-a.log"
    get_file a "/tmp/uringbench-deb/$deb" "$RESULTS/$deb"
    wait_ssh b
    log "installing $deb on b (receiver as uringbench-recv.service)"
    put_file b "$RESULTS/$deb" "/tmp/$deb"
    put_file b "$REPO_ROOT/scripts/provision.sh" /tmp/uringbench-provision.sh
    on_vm b sudo bash /tmp/uringbench-provision.sh --deb "/tmp/$deb" --recv-service >"$RESULTS/provision-b.log"
    for vm in a b; do
        put_file "$vm" "$REPO_ROOT/scripts/tune.sh" /tmp/uringbench-tune.sh
    done
}

# Waits until VM answers over ssh (fresh VMs take a minute or two to boot).
wait_ssh() {
    local vm=$1 i
    for i in $(seq 1 60); do
        if on_vm "$vm" true >/dev/null 2>&1; then
            return 0
        fi
        log "waiting for ssh on $vm ($i/60)"
        sleep 10
    done
    die "no ssh to $vm after 10 minutes"
}

recipe_run() {
    local vm
    recipe_provision
    for vm in a b; do
        log "tuning $vm (scripts/tune.sh apply)"
        on_vm "$vm" sudo bash /tmp/uringbench-tune.sh apply >"$RESULTS/tune-$vm.log" || log "tune.sh on $vm reported a problem (see tune-$vm.log)"
    done
    sleep 2
    log "doctor on both hosts"
    on_vm a sudo uringbench doctor --target "$TARGET_IP" -J >"$RESULTS/doctor-a.json" || true
    on_vm b sudo uringbench doctor -J >"$RESULTS/doctor-b.json" || true
    if [ -n "$IFACE_HINT" ]; then
        on_vm a "sudo ethtool -S \$(ip -o route get $TARGET_IP | sed -n 's/.* dev \\([^ ]*\\).*/\\1/p') | grep -E '$IFACE_HINT'" >"$RESULTS/nic-counters-before.txt" || true
    fi
    log "send: $QUEUES queues for $TEST_TIME"
    on_vm a sudo uringbench send -c "$TARGET_IP" -P "$QUEUES" -t "$TEST_TIME" -i 1s -J >"$RESULTS/send.json" ||
        log "send reported an incomplete test (see send.json)"
    log "sweep over queues $SWEEP_QUEUES, $SWEEP_REPEAT runs each"
    on_vm a sudo uringbench sweep -c "$TARGET_IP" -P "$SWEEP_QUEUES" --repeat "$SWEEP_REPEAT" -t 10s \
        --json-file /tmp/sweep.json --csv /tmp/sweep.csv --svg /tmp/sweep.svg >"$RESULTS/sweep.txt" ||
        log "sweep had incomplete runs (see sweep.txt)"
    for f in sweep.json sweep.csv sweep.svg; do
        get_file a "/tmp/$f" "$RESULTS/$f" || log "could not fetch $f"
    done
    if [ -n "$IFACE_HINT" ]; then
        on_vm a "sudo ethtool -S \$(ip -o route get $TARGET_IP | sed -n 's/.* dev \\([^ ]*\\).*/\\1/p') | grep -E '$IFACE_HINT'" >"$RESULTS/nic-counters-after.txt" || true
    fi
    log "results in $RESULTS:"
    ls -l "$RESULTS" >&2
}
