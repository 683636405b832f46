#!/usr/bin/env bash
# fleet-lab.sh: a fleet of "hosts" on one machine, each a network namespace with its own sshd,
# for running the Ansible playbooks in deploy/ansible exactly as against cloud VMs.
#
#   scripts/fleet-lab.sh up|down|status [--hosts N] [--name NAME] [--dir DIR]
#   scripts/fleet-lab.sh test [--hosts N] [--plan FILE] [--down HOST] [--out DIR] [--name NAME] [--dir DIR]
#   scripts/fleet-lab.sh ansible-playbook|ansible ARGS...   (run from the controller's namespace)
#
# `up` makes N hosts (2..16, default 4), host1..hostN, in namespaces NAME-host1.., plus a
# switch namespace NAME-sw with two bridges:
#
#   internal: hostI eth0 10.78.0.I/24  <->  NAME-sw bridge "int" 10.78.0.254 (the controller)
#   external: hostI ext0 10.79.0.I/24  <->  NAME-sw bridge "ext" (no controller address)
#
# Each host's ext0 sends through a tbf qdisc of 1 Gbit/s, so traffic to an "external"
# address is capped as a cloud's external path is, and traffic to an "internal" one is not.
# Each host runs its own sshd on 10.78.0.I:22 under `taskset` with a CPU mask of its own
# (host1 and host2 one CPU each, the others every CPU), so everything started over ssh on
# that host, `uringbench recv` and `send` included, sees that many CPUs (nproc), as VMs of
# different sizes would. `up` writes into DIR (default /tmp/uringbench-fleet-NAME): an ssh key,
# the hosts' keys and sshd configs, and inventory.yml with groups `fleet` (every host),
# `small` (one CPU) and `large`, each host's internal_address, external_address and
# machine_type (lab-1cpu, lab-2cpu, ...), and a binary install of this checkout's
# target/debug/uringbench (or $URINGBENCH_BIN) under DIR/prefix.
# The namespaces share this machine's filesystem: an install on one host is seen by all.
#
# `down` ends every process inside the lab's namespaces and removes them and DIR.
# `test` does the whole local check: up, then deploy/ansible/site.yml (install, receivers,
# the plan, stop) with the plan FILE (default: a full mesh over the internal addresses,
# 2 repeats of 2 s), `uringbench report --fleet`, down. With --down HOST that host's sshd is
# stopped first (a host that is down). It prints the merged JSON's path as its last line and
# exits 0 only when every planned run ran and was byte-exact (the report's exit code).
# Results go to --out DIR (default DIR-results, kept after down).
#
# Needs root, iproute2, openssh-server and a Python venv with ansible-core
# (scripts/install-deps.sh --fleet; scripts/ansible-venv.sh).
set -euo pipefail
PROG=${0##*/}
REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

usage() {
    sed -n '2,/^$/s/^# \{0,1\}//p' "$0" >&2
}
die_usage() {
    echo "$PROG: $*" >&2
    exit 2
}
die() {
    echo "$PROG: $*" >&2
    exit 1
}

ACTION=${1:-}
[ -n "$ACTION" ] || { usage; exit 2; }
shift
case "$ACTION" in
    -h | --help) usage; exit 0 ;;
    ansible-playbook | ansible) ;;
    up | down | status | test)
        HOSTS=4
        NAME=fl
        DIR=""
        PLAN=""
        DOWN_HOST=""
        OUT=""
        while [ $# -gt 0 ]; do
            case "$1" in
                -h | --help) usage; exit 0 ;;
                --hosts | --name | --dir | --plan | --down | --out)
                    [ $# -ge 2 ] || die_usage "$1 needs a value"
                    case "$1" in
                        --hosts) HOSTS=$2 ;;
                        --name) NAME=$2 ;;
                        --dir) DIR=$2 ;;
                        --plan) PLAN=$2 ;;
                        --down) DOWN_HOST=$2 ;;
                        --out) OUT=$2 ;;
                    esac
                    shift 2
                    ;;
                *) die_usage "unknown argument '$1' (see $PROG --help)" ;;
            esac
        done
        [[ "$HOSTS" =~ ^([2-9]|1[0-6])$ ]] || die_usage "--hosts must be 2 to 16, got '$HOSTS'"
        [[ "$NAME" =~ ^[a-z][a-z0-9]{0,5}$ ]] || die_usage "--name must be 1 to 6 lower-case letters or digits, starting with a letter"
        [ -n "$DIR" ] || DIR=/tmp/uringbench-fleet-$NAME
        [ -n "$OUT" ] || OUT=$DIR-results
        if [ -n "$DOWN_HOST" ] && ! [[ "$DOWN_HOST" =~ ^host([1-9]|1[0-6])$ ]]; then
            die_usage "--down takes a host name (host1..host$HOSTS), got '$DOWN_HOST'"
        fi
        if [ -n "$PLAN" ] && ! [ -r "$PLAN" ]; then
            die_usage "--plan $PLAN: no such file"
        fi
        ;;
    *) die_usage "unknown action '$ACTION' (up, down, status, test, ansible-playbook, ansible)" ;;
esac

[ "$(id -u)" = 0 ] || die "needs root (network namespaces and sshd)"

ns_of() { echo "$NAME-host$1"; }

# The namespaces of a lab, whatever its size (down and status do not need --hosts).
lab_namespaces() {
    ip netns list | awk '{print $1}' | grep -E "^$NAME-(sw|host[0-9]+)$" || true
}

# CPUs of host I: hosts 1 and 2 get one CPU each (different ones when there are two), the
# others every CPU, so a lab of 4 has two sizes to compare.
cpus_of() {
    local i=$1 n
    n=$(nproc --all)
    case "$i" in
        1) echo 0 ;;
        2) echo $((n > 1 ? 1 : 0)) ;;
        *) echo "0-$((n - 1))" ;;
    esac
}

# Ends every process in a namespace (sshd, sessions, receivers the playbooks started, the
# controller's ssh connections): the lab's own namespaces only, each process by its id.
kill_namespace_processes() {
    local ns=$1 pids
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [ -n "$pids" ] || return 0
    # shellcheck disable=SC2086  # one pid per word
    kill $pids 2>/dev/null || true
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        pids=$(ip netns pids "$ns" 2>/dev/null || true)
        [ -n "$pids" ] || return 0
        sleep 0.2
    done
    # shellcheck disable=SC2086
    kill -9 $pids 2>/dev/null || true
}

lab_down() {
    local ns
    for ns in $(lab_namespaces); do
        kill_namespace_processes "$ns"
        ip netns del "$ns" 2>/dev/null || true
    done
    rm -rf "$DIR"
}

write_sshd_config() {
    local i=$1 hd=$DIR/host$1
    cat >"$hd/sshd_config" <<EOF
ListenAddress 10.78.0.$i
Port 22
HostKey $hd/ssh_host_ed25519_key
PidFile $hd/sshd.pid
AuthorizedKeysFile $DIR/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PrintMotd no
AcceptEnv LANG LC_*
Subsystem sftp internal-sftp
EOF
}

write_inventory() {
    local bin=$1 i cpus ncpu small="" large="" hostlines="" group
    for i in $(seq 1 "$HOSTS"); do
        cpus=$(cpus_of "$i")
        ncpu=$(taskset -c "$cpus" nproc)
        hostlines+="        host$i:
          ansible_host: 10.78.0.$i
          internal_address: 10.78.0.$i
          external_address: 10.79.0.$i
          machine_type: lab-${ncpu}cpu
          lab_cpus: \"$cpus\"
"
        group="        host$i: {}
"
        if [ "$ncpu" = 1 ]; then small+=$group; else large+=$group; fi
    done
    # A group without hosts is an empty mapping.
    [ -n "$small" ] || small="        {}
"
    [ -n "$large" ] || large="        {}
"
    cat >"$DIR/inventory.yml" <<EOF
# The local fleet of scripts/fleet-lab.sh (namespaces on one machine): generated by 'up'.
all:
  vars:
    ansible_user: root
    ansible_python_interpreter: /usr/bin/python3
    ansible_ssh_private_key_file: $DIR/id_ed25519
    ansible_ssh_common_args: >-
      -o UserKnownHostsFile=$DIR/known_hosts -o StrictHostKeyChecking=accept-new
      -o ConnectTimeout=5
    # The hosts share this machine's filesystem: install the binary into the lab's folder.
    uringbench_binary: $bin
    uringbench_prefix: $DIR/prefix
    uringbench_state_dir: $DIR/state
    uringbench_run_dir: $DIR/run
    fleet_results: $OUT
  children:
    fleet:
      hosts:
$hostlines    small:
      hosts:
$small    large:
      hosts:
$large
EOF
}

lab_up() {
    local SW=$NAME-sw
    command -v sshd >/dev/null || [ -x /usr/sbin/sshd ] || die "sshd is missing (scripts/install-deps.sh --fleet)"
    local sshd bin i ns hd cpus
    sshd=$(command -v sshd || echo /usr/sbin/sshd)
    bin=${URINGBENCH_BIN:-$REPO_ROOT/target/debug/uringbench}
    [ -x "$bin" ] || die "no uringbench binary at $bin (cargo build, or set URINGBENCH_BIN)"
    lab_down
    mkdir -p "$DIR"
    chmod 700 "$DIR"
    mkdir -p /run/sshd
    ssh-keygen -q -t ed25519 -N "" -C "uringbench-fleet-lab" -f "$DIR/id_ed25519"
    cp "$DIR/id_ed25519.pub" "$DIR/authorized_keys"

    ip netns add "$SW"
    ip -n "$SW" link set lo up
    ip -n "$SW" link add int type bridge
    ip -n "$SW" link add ext type bridge
    ip -n "$SW" addr add 10.78.0.254/24 dev int
    ip -n "$SW" link set int up
    ip -n "$SW" link set ext up
    # Bridged frames need no netfilter here (where br_netfilter is loaded, it is per namespace).
    ip netns exec "$SW" sysctl -qw net.bridge.bridge-nf-call-iptables=0 2>/dev/null || true

    for i in $(seq 1 "$HOSTS"); do
        ns=$(ns_of "$i")
        hd=$DIR/host$i
        mkdir -p "$hd"
        ip netns add "$ns"
        ip -n "$ns" link set lo up
        ip link add "h$i-int" netns "$SW" type veth peer name eth0 netns "$ns"
        ip link add "h$i-ext" netns "$SW" type veth peer name ext0 netns "$ns"
        ip -n "$SW" link set "h$i-int" master int up
        ip -n "$SW" link set "h$i-ext" master ext up
        ip -n "$ns" addr add "10.78.0.$i/24" dev eth0
        ip -n "$ns" addr add "10.79.0.$i/24" dev ext0
        ip -n "$ns" link set eth0 up
        ip -n "$ns" link set ext0 up
        ip -n "$ns" route add default via 10.78.0.254
        # The external path's cap: 1 Gbit/s on the host's egress toward external addresses.
        ip netns exec "$ns" tc qdisc add dev ext0 root tbf rate 1gbit burst 256kb latency 20ms
        ssh-keygen -q -t ed25519 -N "" -C "host$i" -f "$hd/ssh_host_ed25519_key"
        write_sshd_config "$i"
        cpus=$(cpus_of "$i")
        ip netns exec "$ns" "$sshd" -t -f "$hd/sshd_config" || die "sshd -t rejected $hd/sshd_config"
        ip netns exec "$ns" taskset -c "$cpus" "$sshd" -f "$hd/sshd_config" -E "$hd/sshd.log"
    done
    write_inventory "$bin"
    # Wait until every sshd answers (bounded).
    for i in $(seq 1 "$HOSTS"); do
        local ok=0
        for _ in $(seq 1 50); do
            if ip netns exec "$SW" bash -c "exec 3<>/dev/tcp/10.78.0.$i/22" 2>/dev/null; then ok=1; break; fi
            sleep 0.1
        done
        [ "$ok" = 1 ] || die "sshd of host$i does not answer on 10.78.0.$i:22 (see $DIR/host$i/sshd.log)"
    done
    echo "$PROG: $HOSTS hosts up; inventory $DIR/inventory.yml; run playbooks with: $PROG ansible-playbook -i $DIR/inventory.yml deploy/ansible/site.yml" >&2
}

lab_status() {
    local ns
    for ns in $(lab_namespaces); do
        echo "== $ns"
        ip -n "$ns" -br addr
        ip netns exec "$ns" tc qdisc show dev ext0 2>/dev/null | grep tbf || true
    done
    [ -f "$DIR/inventory.yml" ] && echo "inventory: $DIR/inventory.yml"
    return 0
}

# ansible-core from the pinned venv, run in the switch namespace (where the controller's
# address is), with this repository's ansible.cfg.
controller() {
    local venv
    venv=$("$REPO_ROOT/scripts/ansible-venv.sh" | tail -n 1)
    ip netns exec "$NAME-sw" env PATH="$venv:$PATH" ANSIBLE_CONFIG="$REPO_ROOT/deploy/ansible/ansible.cfg" \
        ANSIBLE_LOCAL_TEMP="$DIR/ansible-tmp" ANSIBLE_SSH_CONTROL_PATH_DIR="$DIR/cp" "$@"
}

lab_test() {
    local plan=$PLAN bin rc=0 report_rc=0
    bin=${URINGBENCH_BIN:-$REPO_ROOT/target/debug/uringbench}
    [ -n "$plan" ] || plan=$REPO_ROOT/deploy/ansible/examples/lab-mesh.yml
    trap lab_down EXIT
    lab_up
    if [ -n "$DOWN_HOST" ]; then
        local n=${DOWN_HOST#host}
        [ "$n" -le "$HOSTS" ] || die_usage "--down $DOWN_HOST: the lab has $HOSTS hosts"
        kill "$(cat "$DIR/$DOWN_HOST/sshd.pid")"
        echo "$PROG: stopped the sshd of $DOWN_HOST" >&2
    fi
    rm -rf "$OUT"
    mkdir -p "$OUT"
    controller ansible-playbook -i "$DIR/inventory.yml" -e "@$plan" "$REPO_ROOT/deploy/ansible/site.yml" >&2 || rc=$?
    echo "$PROG: ansible-playbook exited with $rc" >&2
    "$bin" report --fleet "$OUT" >&2 || report_rc=$?
    echo "$OUT/fleet.json"
    [ "$report_rc" = 0 ] || exit "$report_rc"
    exit 0
}

case "$ACTION" in
    up) lab_up ;;
    down) lab_down ;;
    status) lab_status ;;
    test) lab_test ;;
    ansible-playbook | ansible)
        NAME=${FLEET_LAB_NAME:-fl}
        DIR=${FLEET_LAB_DIR:-/tmp/uringbench-fleet-$NAME}
        controller "$ACTION" "$@"
        ;;
esac
