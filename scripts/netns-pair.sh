#!/usr/bin/env bash
# netns-pair.sh: two "hosts" on one machine, for local two-host tests and benchmarks.
#
#   scripts/netns-pair.sh up|down|status [--name NAME] [--mtu N]
#
# `up` creates two network namespaces joined by a veth pair:
#
#   NAME-a ("sender host")                   NAME-b ("receiver host")
#   NAMEa0: 10.77.0.1/24, fd77::1/64  <--->  NAMEb0: 10.77.0.2/24, fd77::2/64
#
# with loopback up in both, the same MTU on both ends (default 1500), IPv6 addresses
# added with `nodad` (usable at once) and permanent neighbour entries both ways (ARP/ND
# are not needed, which keeps XDP programs that swallow everything workable).
# If the namespaces exist already, `up` removes them first.
# `down` removes both namespaces (the veth goes with them); exits 0 if already gone.
# `status` prints namespaces, interfaces, MTU and addresses.
#
# Pairs with different NAMEs coexist (the veth is created directly inside the
# namespaces, so the same addresses in different pairs do not clash).
#
# Typical use:
#   scripts/netns-pair.sh up --name ub
#   ip netns exec ub-b uringbench recv ...
#   ip netns exec ub-a uringbench send --target 10.77.0.2 ...
#   scripts/netns-pair.sh down --name ub
#
# Needs root (or CAP_NET_ADMIN + CAP_SYS_ADMIN) and iproute2.

set -euo pipefail

PROG=${0##*/}

ADDR_A4=10.77.0.1
ADDR_B4=10.77.0.2
ADDR_A6=fd77::1
ADDR_B6=fd77::2
PREFIX4=24
PREFIX6=64

usage() {
    cat >&2 <<EOF
usage: $PROG up|down|status [--name NAME] [--mtu N]

  up       create namespaces NAME-a and NAME-b joined by a veth pair
           (NAMEa0 in NAME-a: $ADDR_A4/$PREFIX4, $ADDR_A6/$PREFIX6;
            NAMEb0 in NAME-b: $ADDR_B4/$PREFIX4, $ADDR_B6/$PREFIX6);
           an existing pair of that name is removed first
  down     remove both namespaces (exit 0 if they do not exist)
  status   show namespaces, interfaces, MTU and addresses

  --name NAME   pair name, default "ub": letters, digits, '_' and '-', at most 13
                characters (interface names NAMEa0/NAMEb0 must fit in 15)
  --mtu N       MTU of both veth ends, default 1500 (1280..65535), e.g. 9000

examples:
  $PROG up --name ub --mtu 9000
  ip netns exec ub-b uringbench recv
  ip netns exec ub-a uringbench send --target $ADDR_B4
  $PROG down --name ub
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

# ---- arguments -----------------------------------------------------------------------

ACTION=""
NAME=ub
MTU=1500
MTU_SET=0

while [ $# -gt 0 ]; do
    case "$1" in
        up|down|status)
            [ -z "$ACTION" ] || die_usage "more than one action given ('$ACTION' and '$1')"
            ACTION=$1
            ;;
        --name|--mtu)
            [ $# -ge 2 ] || die_usage "$1 needs a value"
            if [ "$1" = --name ]; then NAME=$2; else MTU=$2; MTU_SET=1; fi
            shift
            ;;
        --name=*) NAME=${1#--name=} ;;
        --mtu=*) MTU=${1#--mtu=}; MTU_SET=1 ;;
        -h|--help) usage; exit 0 ;;
        *) die_usage "unknown argument '$1'" ;;
    esac
    shift
done

[ -n "$ACTION" ] || die_usage "no action given"
[[ "$NAME" =~ ^[A-Za-z0-9_][A-Za-z0-9_-]{0,12}$ ]] ||
    die_usage "bad --name '$NAME' (letters, digits, '_', '-'; 1..13 characters; not starting with '-')"
if ! [[ "$MTU" =~ ^[0-9]{1,5}$ ]] || [ "$MTU" -lt 1280 ] || [ "$MTU" -gt 65535 ]; then
    die_usage "bad --mtu '$MTU' (an integer 1280..65535; IPv6 needs at least 1280)"
fi
if [ "$ACTION" != up ] && [ "$MTU_SET" = 1 ]; then
    die_usage "--mtu only applies to 'up'"
fi

NS_A="${NAME}-a"
NS_B="${NAME}-b"
IF_A="${NAME}a0"
IF_B="${NAME}b0"

command -v ip >/dev/null 2>&1 || die "'ip' (iproute2) not found"

# ---- helpers -------------------------------------------------------------------------

ns_exists() {
    # `ip netns list` prints "name" or "name (id: N)"
    ip netns list 2>/dev/null | awk '{print $1}' | grep -qxF -- "$1"
}

need_root() {
    [ "$(id -u)" = 0 ] || die "'$ACTION' needs root (network namespaces and veth)"
}

# MAC address of interface $2 in namespace $1, from `ip -j link`.
mac_of() {
    local json mac
    json=$(ip -n "$1" -j link show dev "$2")
    mac=$(printf '%s\n' "$json" | sed -n 's/.*"address":"\([0-9a-fA-F:]*\)".*/\1/p')
    [[ "$mac" =~ ^([0-9a-fA-F]{2}:){5}[0-9a-fA-F]{2}$ ]] ||
        die "could not read the MAC address of $2 in $1 (got '$mac')"
    printf '%s\n' "$mac"
}

do_down() {
    local ns rc=0
    for ns in "$NS_A" "$NS_B"; do
        if ns_exists "$ns"; then
            ip netns del "$ns" || rc=1
        fi
    done
    return "$rc"
}

do_up() {
    need_root
    if ns_exists "$NS_A" || ns_exists "$NS_B"; then
        echo "$PROG: pair '$NAME' exists already; removing it first" >&2
        do_down
    fi

    # On any failure from here on, remove what was created so far.
    trap 'rc=$?; if [ "$rc" != 0 ]; then echo "$PROG: up failed; cleaning up" >&2; do_down || true; fi' EXIT

    ip netns add "$NS_A"
    ip netns add "$NS_B"
    # Create both ends directly inside their namespaces: no name clash in the root
    # namespace when several pairs come up at the same time.
    ip link add "$IF_A" netns "$NS_A" mtu "$MTU" type veth peer name "$IF_B" netns "$NS_B" mtu "$MTU"

    local ns
    for ns in "$NS_A" "$NS_B"; do
        ip -n "$ns" link set lo up
    done

    ip -n "$NS_A" addr add "$ADDR_A4/$PREFIX4" dev "$IF_A"
    ip -n "$NS_B" addr add "$ADDR_B4/$PREFIX4" dev "$IF_B"
    ip -n "$NS_A" -6 addr add "$ADDR_A6/$PREFIX6" dev "$IF_A" nodad
    ip -n "$NS_B" -6 addr add "$ADDR_B6/$PREFIX6" dev "$IF_B" nodad

    ip -n "$NS_A" link set "$IF_A" up
    ip -n "$NS_B" link set "$IF_B" up

    # Static neighbours both ways (no ARP / neighbour discovery needed).
    local mac_a mac_b
    mac_a=$(mac_of "$NS_A" "$IF_A")
    mac_b=$(mac_of "$NS_B" "$IF_B")
    ip -n "$NS_A" neigh replace "$ADDR_B4" lladdr "$mac_b" dev "$IF_A" nud permanent
    ip -n "$NS_A" -6 neigh replace "$ADDR_B6" lladdr "$mac_b" dev "$IF_A" nud permanent
    ip -n "$NS_B" neigh replace "$ADDR_A4" lladdr "$mac_a" dev "$IF_B" nud permanent
    ip -n "$NS_B" -6 neigh replace "$ADDR_A6" lladdr "$mac_a" dev "$IF_B" nud permanent

    if command -v ping >/dev/null 2>&1; then
        ip netns exec "$NS_A" ping -q -c1 -W1 "$ADDR_B4" >/dev/null ||
            die "pair '$NAME' is up but $NS_A cannot ping $ADDR_B4"
    else
        echo "$PROG: ping not installed; skipping the connectivity check" >&2
    fi

    trap - EXIT
    echo "netns pair $NAME: $NS_A ($ADDR_A4, $IF_A) <-> $NS_B ($ADDR_B4, $IF_B) mtu $MTU"
}

do_status() {
    local ns ifc found=0
    for ns in "$NS_A" "$NS_B"; do
        if [ "$ns" = "$NS_A" ]; then ifc=$IF_A; else ifc=$IF_B; fi
        if ! ns_exists "$ns"; then
            echo "$ns: absent"
            continue
        fi
        found=1
        echo "$ns:"
        if ip -n "$ns" link show dev "$ifc" >/dev/null 2>&1; then
            local mtu state mac
            mtu=$(ip -n "$ns" -o link show dev "$ifc" | sed -n 's/.* mtu \([0-9]*\) .*/\1/p')
            state=$(ip -n "$ns" -br link show dev "$ifc" | awk '{print $2}')
            mac=$(mac_of "$ns" "$ifc")
            echo "  $ifc: state $state mtu $mtu mac $mac"
        else
            echo "  $ifc: missing"
        fi
        ip -n "$ns" -br addr show | sed 's/^/  /'
        ip -n "$ns" neigh show | sed 's/^/  neigh /'
    done
    if [ "$found" = 0 ]; then
        echo "netns pair $NAME: down"
    fi
}

case "$ACTION" in
    up) do_up ;;
    down) need_root; do_down ;;
    status) do_status ;;
esac
