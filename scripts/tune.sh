#!/usr/bin/env bash
# tune.sh: apply `uringbench doctor`'s recommendations for a high-bandwidth test, and undo
# them exactly.
#
#   scripts/tune.sh apply  [--iface IF] [--state FILE] [--buffer BYTES] [--dry-run]
#   scripts/tune.sh revert [--state FILE]
#   scripts/tune.sh show   [--state FILE]
#
# `apply` changes, where they fall short (it never lowers a value):
#   - socket buffers: net.core.rmem_max/wmem_max and the max of net.ipv4.tcp_rmem/tcp_wmem
#     raised to --buffer (default 64 MiB: 2x the bandwidth-delay product of 100 Gbit/s at
#     2.5 ms); per network namespace
#   - net.core.netdev_max_backlog raised to 16384 (global; absent inside a namespace)
#   - offloads: TSO, GSO and GRO switched on where the driver allows (ethtool -K); GRO
#     not on software devices (veth), which pass packets already merged
#   - channels: as many combined queues as CPUs, up to the NIC's maximum (ethtool -L)
#   - ring sizes: the NIC's maximum (ethtool -G; physical NICs only)
#   - IRQ affinity: queue i's IRQs on CPU i mod NCPU (/proc/irq/N/smp_affinity_list), after
#     stopping irqbalance, which would move them again
#   - RPS: every RX queue spread over all CPUs when there are fewer RX queues than CPUs
#     (not on software devices: their receive work runs on the sending CPU)
#   - XPS: TX queue i mapped to CPU i mod NCPU when there are several TX queues
#   - the CPU frequency governor set to performance, where cpufreq exists
# Every previous value is written to the state file *before* the change, so `revert`
# restores exactly what was there, in reverse order, even after a partial apply. `apply`
# refuses to run while a state file exists (revert first), so a second apply cannot save
# tuned values as the "previous" ones. Recording, changing and restoring are done by
# `uringbench settings` (the same code `uringbench experiment` uses); this script decides
# what to change. It finds uringbench as $URINGBENCH, on PATH, or in this checkout's target/.
#
# The default state file is per interface and per network namespace:
#   /var/lib/uringbench/tune-<netns inode>-<IF>.state
# Run it inside a namespace (`ip netns exec NS scripts/tune.sh apply --iface IF`) to tune
# that namespace's sysctls and interfaces only. Needs root; ethtool is optional (its
# settings are skipped, with a note, when it is missing).

set -euo pipefail

PROG=${0##*/}
STATE_DIR=/var/lib/uringbench

usage() {
    cat >&2 <<EOF
usage: $PROG apply  [--iface IF] [--state FILE] [--buffer BYTES] [--dry-run]
       $PROG revert [--state FILE]
       $PROG show   [--state FILE]

  apply    raise socket buffers and the backlog, switch on TSO/GSO/GRO, use as many
           queues as CPUs, spread queue IRQs one per CPU (stopping irqbalance), set
           RPS/XPS and the performance governor; previous values go to the state file
  revert   restore every value the state file holds, then remove it
  show     print the state file

  --iface IF      interface to tune (default: the one of the default route)
  --state FILE    state file (default: $STATE_DIR/tune-<netns inode>-<IF>.state)
  --buffer BYTES  socket buffer maximum to raise to (default 67108864)
  --dry-run       print what apply would change, change nothing
EOF
}

die_usage() {
    echo "$PROG: $*" >&2
    usage
    exit 2
}

die() {
    echo "$PROG: $*" >&2
    exit 1
}

ACTION=""
IFACE=""
STATE=""
BUFFER=67108864
DRY_RUN=0

while [ $# -gt 0 ]; do
    case "$1" in
        apply|revert|show)
            [ -z "$ACTION" ] || die_usage "more than one action given ('$ACTION' and '$1')"
            ACTION=$1
            ;;
        --iface|--state|--buffer)
            [ $# -ge 2 ] || die_usage "$1 needs a value"
            case "$1" in
                --iface) IFACE=$2 ;;
                --state) STATE=$2 ;;
                --buffer) BUFFER=$2 ;;
            esac
            shift
            ;;
        --dry-run) DRY_RUN=1 ;;
        -h|--help) usage; exit 0 ;;
        *) die_usage "unknown argument '$1'" ;;
    esac
    shift
done

[ -n "$ACTION" ] || die_usage "no action given"
if ! [[ "$BUFFER" =~ ^[0-9]{1,12}$ ]] || [ "$BUFFER" -lt 1048576 ]; then
    die_usage "bad --buffer '$BUFFER' (bytes, at least 1048576)"
fi
if [ -n "$IFACE" ] && ! [[ "$IFACE" =~ ^[A-Za-z0-9_.:@-]{1,15}$ ]]; then
    die_usage "bad --iface '$IFACE'"
fi
if [ "$ACTION" != apply ] && { [ -n "$IFACE" ] || [ "$DRY_RUN" = 1 ] || [ "$BUFFER" != 67108864 ]; }; then
    die_usage "--iface, --buffer and --dry-run only apply to 'apply'"
fi

have_ethtool() { command -v ethtool >/dev/null 2>&1; }

# The uringbench binary that records and reverts the changes.
find_uringbench() {
    local here candidate
    here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
    for candidate in "${URINGBENCH:-}" "$(command -v uringbench 2>/dev/null || true)" \
        "$here/../target/release/uringbench" "$here/../target/debug/uringbench"; do
        if [ -n "$candidate" ] && [ -x "$candidate" ]; then
            UB=$candidate
            return 0
        fi
    done
    die "uringbench not found: build it (cargo build --release -p uringbench-cli) or set URINGBENCH"
}

# Records the previous value in the state file, then makes one change
# (uringbench settings syntax: KIND:TARGET=VALUE). Prints what it did; fails when the
# change could not be made, with nothing recorded for it.
settings_apply() {
    "$UB" settings apply --state "$STATE" "$1" 2>&1
}
ncpus() { getconf _NPROCESSORS_ONLN; }

# The state file names the network namespace by the inode of /proc/self/ns/net.
netns_id() {
    local link
    link=$(readlink /proc/self/ns/net 2>/dev/null || echo "net:[unknown]")
    link=${link#net:[}
    printf '%s\n' "${link%]}"
}

default_iface() {
    ip -o route get 192.0.2.1 2>/dev/null | sed -n 's/.* dev \([^ ]*\).*/\1/p' | head -n1
}

# ---- state file ------------------------------------------------------------------------
# One change per line, tab-separated: KIND KEY PREVIOUS-VALUE (written by uringbench
# settings, which documents the kinds; this script adds only the service line)
#   file       PATH         previous content (tabs turned into spaces; the kernel accepts both)
#   ethtool-k  IF           "FEATURE on|off"
#   ethtool-l  IF           "combined N"
#   ethtool-g  IF           "rx N" or "tx N"
#   service    NAME         "active"

record() {
    printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$STATE"
}

CHANGES=0

# Writes VALUE to PATH if it differs, recording the old content first.
set_file() {
    local path=$1 value=$2 old
    [ -e "$path" ] || return 0
    old=$(tr '\t' ' ' <"$path" 2>/dev/null) || { echo "  skip $path: unreadable"; return 0; }
    if [ "$old" = "$value" ]; then
        return 0
    fi
    if [ "$DRY_RUN" = 1 ]; then
        # Only what apply would write: writing the current value back changes nothing and
        # fails where apply's write would (a managed IRQ, a read-only file in a namespace).
        if ! (printf '%s' "$old" >"$path") 2>/dev/null; then
            echo "  skip $path: not writable here (read-only in a network namespace?)"
            return 0
        fi
        echo "  $path: $old -> $value"
        CHANGES=$((CHANGES + 1))
        return 0
    fi
    if settings_apply "file:$path=$value" >/dev/null; then
        echo "  $path: $old -> $value"
        CHANGES=$((CHANGES + 1))
    else
        echo "  skip $path: not writable here (read-only in a network namespace?)"
    fi
}

# Raises a single-number sysctl to at least VALUE.
raise_sysctl() {
    local name=$1 want=$2 path cur
    path=/proc/sys/${name//.//}
    if [ ! -e "$path" ]; then
        echo "  skip $name: not present here (a global sysctl outside this namespace)"
        return 0
    fi
    cur=$(<"$path")
    [[ "$cur" =~ ^[0-9]+$ ]] || { echo "  skip $name: unexpected value '$cur'"; return 0; }
    if [ "$cur" -lt "$want" ]; then
        set_file "$path" "$want"
    fi
}

# Raises the third field (max) of tcp_rmem/tcp_wmem to at least VALUE.
raise_triple_max() {
    local name=$1 want=$2 path min def max
    path=/proc/sys/${name//.//}
    [ -e "$path" ] || { echo "  skip $name: not present"; return 0; }
    read -r min def max <"$path"
    if [ "$max" -lt "$want" ]; then
        set_file "$path" "$min $def $want"
    fi
}

cpu_mask_all() {
    # Hex mask of CPUs 0..N-1 in sysfs's comma-separated 32-bit words.
    local n=$1 words=() bits
    while [ "$n" -gt 0 ]; do
        bits=$((n > 32 ? 32 : n))
        if [ "$bits" = 32 ]; then words=(ffffffff "${words[@]}"); else words=("$(printf '%x' $(((1 << bits) - 1)))" "${words[@]}"); fi
        n=$((n - bits))
    done
    local IFS=,
    printf '%s\n' "${words[*]}"
}

cpu_mask_one() {
    # Hex mask of a single CPU, in 32-bit words.
    local cpu=$1 word=$(($1 / 32)) words=() i
    for ((i = 0; i <= word; i++)); do
        if [ "$i" = "$word" ]; then words=("$(printf '%x' $((1 << (cpu % 32))))" "${words[@]}"); else words=(0 "${words[@]}"); fi
    done
    local IFS=,
    printf '%s\n' "${words[*]}"
}

# The queue IRQs of $IFACE, one "IRQ NAME" per line: its device's MSI vectors, minus
# control interrupts.
queue_irqs() {
    local dev=/sys/class/net/$IFACE/device dir irq name
    for dir in "$dev/msi_irqs" "$dev/../msi_irqs"; do
        [ -d "$dir" ] || continue
        for irq in $(printf '%s\n' "$dir"/* | sed 's#.*/##' | sort -n); do
            name=$(awk -v irq="$irq:" '$1 == irq {print $NF}' /proc/interrupts)
            case "$name" in
                *config*|*async*|*ctrl*|*mgmnt*|*mgmt*|*cmd*|*admin*|*-event*|"") ;;
                *) echo "$irq $name" ;;
            esac
        done
        return 0
    done
}

# The queue number in an IRQ name: trailing digits before any "@pci:..." suffix
# (virtio2-input.3 -> 3, mlx5_comp3@pci:0000:00:04.0 -> 3); empty when there are none.
# Records the queue IRQs' affinity and the RPS/XPS maps of $IFACE as they are, changing
# nothing: some drivers (virtio_net) rewrite them on a channel change, so revert must put them
# back after it has restored the channel count (state lines are undone last to first).
record_queue_maps() {
    local line path
    while read -r line; do
        path=/proc/irq/${line%% *}/smp_affinity_list
        [ -r "$path" ] && record file "$path" "$(tr '\t' ' ' <"$path")"
    done < <(queue_irqs)
    for path in "/sys/class/net/$IFACE"/queues/*/rps_cpus "/sys/class/net/$IFACE"/queues/*/xps_cpus; do
        [ -r "$path" ] && record file "$path" "$(tr '\t' ' ' <"$path")"
    done
    return 0
}

irq_queue_index() {
    local base=${1%%@*}
    [[ "$base" =~ ([0-9]+)$ ]] && echo "$((10#${BASH_REMATCH[1]}))"
    return 0
}

# Value of one ethtool -k feature: on/off, or nothing when fixed or absent.
ethtool_feature() {
    ethtool -k "$IFACE" 2>/dev/null | awk -v f="$1:" '$1 == f && $3 != "[fixed]" {print $2}'
}

# A number from `ethtool -l` or `-g` output: section (max|cur) and field name.
ethtool_number() {
    local cmd=$1 section=$2 field=$3
    ethtool "$cmd" "$IFACE" 2>/dev/null | awk -v s="$section" -v f="$field:" '
        /^Pre-set maximums/ {cur = "max"; next}
        /^Current hardware settings/ {cur = "cur"; next}
        cur == s && $1 == f && $2 ~ /^[0-9]+$/ {print $2; exit}'
}

do_apply() {
    [ "$(id -u)" = 0 ] || die "apply needs root"
    [ -n "$IFACE" ] || IFACE=$(default_iface)
    [ -n "$IFACE" ] || die "no default route: give --iface"
    [ -d "/sys/class/net/$IFACE" ] || die "no interface $IFACE in this network namespace (see 'ip link')"
    [ -n "$STATE" ] || STATE="$STATE_DIR/tune-$(netns_id)-$IFACE.state"
    if [ -e "$STATE" ]; then
        die "$STATE exists: already applied; run '$PROG revert --state $STATE' first"
    fi
    local cpus software=0
    cpus=$(ncpus)
    # A software device (veth) has no device/ link. It hands the sender's TSO/GSO packets over
    # whole and runs receive work on the sending CPU, so GRO and RPS only add work there
    # (measured on a 2-vCPU veth pair: GRO on -5%, RPS over both CPUs -25% throughput).
    [ -e "/sys/class/net/$IFACE/device" ] || software=1
    echo "$PROG: tuning $IFACE ($cpus CPUs)$([ "$DRY_RUN" = 1 ] && echo ', dry run: nothing is changed')"
    if [ "$DRY_RUN" = 0 ]; then
        find_uringbench
        mkdir -p "$(dirname "$STATE")"
        printf '# uringbench tune.sh state: iface %s, netns %s, %s\n' "$IFACE" "$(netns_id)" "$(date -u +%FT%TZ)" >"$STATE"
    fi

    echo "socket buffers and backlog:"
    raise_sysctl net.core.rmem_max "$BUFFER"
    raise_sysctl net.core.wmem_max "$BUFFER"
    raise_triple_max net.ipv4.tcp_rmem "$BUFFER"
    raise_triple_max net.ipv4.tcp_wmem "$BUFFER"
    raise_sysctl net.core.netdev_max_backlog 16384

    echo "offloads, channels, rings:"
    if have_ethtool; then
        local short long cur
        for short in tso gso gro; do
            case $short in
                tso) long=tcp-segmentation-offload ;;
                gso) long=generic-segmentation-offload ;;
                gro) long=generic-receive-offload ;;
            esac
            cur=$(ethtool_feature "$long")
            if [ "$short" = gro ] && [ "$software" = 1 ]; then
                [ "$cur" = off ] && echo "  leave GRO off: software device, packets arrive already merged"
                continue
            fi
            if [ "$cur" = off ]; then
                echo "  ethtool -K $IFACE $short on (was off)"
                CHANGES=$((CHANGES + 1))
                if [ "$DRY_RUN" = 0 ]; then
                    settings_apply "ethtool-k:$IFACE:$short=on" >/dev/null || { CHANGES=$((CHANGES - 1)); echo "  warning: ethtool -K $IFACE $short on failed" >&2; }
                fi
            fi
        done
        local max_comb cur_comb want
        max_comb=$(ethtool_number -l max Combined)
        cur_comb=$(ethtool_number -l cur Combined)
        if [ -n "$max_comb" ] && [ -n "$cur_comb" ] && [ "$max_comb" -gt 0 ]; then
            want=$((cpus < max_comb ? cpus : max_comb))
            if [ "$cur_comb" -lt "$want" ]; then
                echo "  ethtool -L $IFACE combined $want (was $cur_comb)"
                CHANGES=$((CHANGES + 1))
                if [ "$DRY_RUN" = 0 ]; then
                    record_queue_maps
                    settings_apply "ethtool-l:$IFACE:combined=$want" >/dev/null || { CHANGES=$((CHANGES - 1)); echo "  warning: ethtool -L failed" >&2; }
                fi
            fi
        fi
        if [ -e "/sys/class/net/$IFACE/device" ]; then
            local max_rx max_tx cur_rx cur_tx
            max_rx=$(ethtool_number -g max RX); max_tx=$(ethtool_number -g max TX)
            cur_rx=$(ethtool_number -g cur RX); cur_tx=$(ethtool_number -g cur TX)
            if [ -n "$max_rx" ] && [ -n "$max_tx" ] && [ -n "$cur_rx" ] && [ -n "$cur_tx" ] &&
                { [ "$cur_rx" -lt "$max_rx" ] || [ "$cur_tx" -lt "$max_tx" ]; }; then
                echo "  ethtool -G $IFACE rx $max_rx tx $max_tx (was rx $cur_rx tx $cur_tx)"
                CHANGES=$((CHANGES + 1))
                if [ "$DRY_RUN" = 0 ]; then
                    { settings_apply "ethtool-g:$IFACE:rx=$max_rx" >/dev/null && settings_apply "ethtool-g:$IFACE:tx=$max_tx" >/dev/null; } ||
                        { CHANGES=$((CHANGES - 1)); echo "  warning: ethtool -G failed" >&2; }
                fi
            fi
        fi
    else
        echo "  skip: ethtool not installed (apt-get install ethtool)"
    fi

    echo "interrupts:"
    local irqs i irq
    mapfile -t irqs < <(queue_irqs)
    if [ "${#irqs[@]}" -gt 0 ]; then
        if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet irqbalance 2>/dev/null; then
            echo "  systemctl stop irqbalance (it would move the IRQs again)"
            CHANGES=$((CHANGES + 1))
            if [ "$DRY_RUN" = 0 ]; then
                record service irqbalance active
                systemctl stop irqbalance || echo "  warning: could not stop irqbalance" >&2
            fi
        fi
        # Queue i's IRQs (a queue may have several, e.g. virtio's input.i and output.i) go to
        # CPU i; IRQs without a queue number in their name count in order.
        local line name queue
        i=0
        for line in "${irqs[@]}"; do
            irq=${line%% *}
            name=${line#* }
            queue=$(irq_queue_index "$name")
            set_file "/proc/irq/$irq/smp_affinity_list" "$(((${queue:-$i}) % cpus))"
            i=$((i + 1))
        done
    else
        echo "  no queue IRQs on $IFACE (software device, or no MSI vectors)"
    fi

    echo "RPS/XPS:"
    local q rxq txq
    rxq=$(find "/sys/class/net/$IFACE/queues" -maxdepth 1 -name 'rx-*' 2>/dev/null | wc -l)
    txq=$(find "/sys/class/net/$IFACE/queues" -maxdepth 1 -name 'tx-*' 2>/dev/null | wc -l)
    if [ "$software" = 1 ]; then
        echo "  leave RPS alone: software device, receive work runs on the sending CPU"
    elif [ "$rxq" -lt "$cpus" ]; then
        for q in "/sys/class/net/$IFACE"/queues/rx-*/rps_cpus; do
            [ -e "$q" ] && set_file "$q" "$(cpu_mask_all "$cpus")"
        done
    fi
    if [ "$txq" -gt 1 ]; then
        for ((i = 0; i < txq; i++)); do
            q="/sys/class/net/$IFACE/queues/tx-$i/xps_cpus"
            [ -e "$q" ] && set_file "$q" "$(cpu_mask_one $((i % cpus)))"
        done
    fi

    echo "CPU frequency governor:"
    local gov found=0
    for gov in /sys/devices/system/cpu/cpu[0-9]*/cpufreq/scaling_governor; do
        [ -e "$gov" ] || continue
        found=1
        if grep -qw performance "$(dirname "$gov")/scaling_available_governors" 2>/dev/null; then
            set_file "$gov" performance
        fi
    done
    [ "$found" = 1 ] || echo "  no cpufreq here (a VM: the hypervisor sets the clock)"

    if [ "$DRY_RUN" = 1 ]; then
        echo "$PROG: $CHANGES change(s) would be made"
    elif [ "$CHANGES" = 0 ]; then
        rm -f "$STATE"
        echo "$PROG: nothing to change; no state file kept"
    else
        echo "$PROG: $CHANGES change(s) made; previous values in $STATE (undo: $PROG revert --state $STATE)"
    fi
}

find_state() {
    if [ -n "$STATE" ]; then
        return 0
    fi
    local found=()
    shopt -s nullglob
    found=("$STATE_DIR"/tune-"$(netns_id)"-*.state)
    shopt -u nullglob
    case ${#found[@]} in
        0) die "nothing to revert: no state file in $STATE_DIR for this network namespace" ;;
        1) STATE=${found[0]} ;;
        *) die "several state files in $STATE_DIR; pick one with --state: ${found[*]}" ;;
    esac
}

do_revert() {
    [ "$(id -u)" = 0 ] || die "revert needs root"
    find_state
    [ -e "$STATE" ] || die "nothing to revert: $STATE does not exist"
    find_uringbench
    "$UB" settings revert --state "$STATE" | sed "s/^/$PROG: /" || die "some settings could not be restored; $STATE kept"
}

do_show() {
    find_state
    [ -e "$STATE" ] || die "no state file $STATE"
    cat "$STATE"
}

case "$ACTION" in
    apply) do_apply ;;
    revert) do_revert ;;
    show) do_show ;;
esac
