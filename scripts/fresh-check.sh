#!/usr/bin/env bash
# fresh-check.sh: what a new user and a new VM go through, on Debian 12 roots with nothing on
# them but the host's Rust toolchain.
#
#   scripts/fresh-check.sh [--only demo|deb|vagrant|recipes] [--keep]
#
# Every stage starts from a pristine Debian 12 root (debootstrap --variant=minbase, made once
# and cached as a tarball by scripts/lib/debroot.sh, the mirror taken from this host's apt
# sources) into which this checkout's tracked files are copied; only the Rust toolchain is
# bind-mounted. The root is restored from the tarball for every stage, so nothing an earlier
# stage or run installed can hide a missing step.
#
#   demo     the README's first command, `scripts/demo.sh`, as root; passes only when the
#            report ends in an exact byte match ("total: sender wrote N bytes, receiver
#            counted N bytes (exact match)", then the span it covers)
#   deb      `cargo deb -p uringbench-cli` where the demo built, then the package installed
#            into a pristine root (dpkg -i with its Depends from the mirror): `uringbench
#            --version`, `man -w uringbench-send`, the bash completion loads, `systemd-analyze
#            verify` passes on uringbench-recv.service
#   vagrant  the Vagrantfile's shell provisioners (read by scripts/lib/vagrant-provisioners.rb)
#            for VM a, then VM b, each in its own pristine root with the checkout at /vagrant:
#            both end with a working `uringbench`, b with uringbench-recv.service enabled
#   recipes  the cloud recipes' provisioning (recipe_provision in scripts/lib/recipe.sh) with
#            on_vm/put_file/get_file mapped onto two pristine roots: the same checks
# The VM stand-ins get what every cloud image and Vagrant box has and minbase lacks (systemd,
# sudo, curl, CA certificates), nothing more.
#
# The provisioning stages start their cargo target folder from the demo's, which saves minutes
# and hides nothing: the system packages still come from the scripts under test. The demo's
# checkout sits at /opt/uringbench, where the cloud recipes put theirs, so the recipes' build
# finds the workspace built too; the Vagrant VM's (at /vagrant) reuses the registry crates and
# rebuilds the workspace.
#
# --keep leaves the last root in place. Needs root, debootstrap, unshare, ruby (for the
# Vagrantfile). Logs: $URINGBENCH_CACHE/fresh-check/*.log.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
# shellcheck source=scripts/lib/debroot.sh
. scripts/lib/debroot.sh

only=""
keep=0
while [ $# -gt 0 ]; do
    case "$1" in
        --only)
            [ $# -ge 2 ] || { echo "fresh-check.sh: --only needs a stage" >&2; exit 2; }
            case "$2" in demo | deb | vagrant | recipes) only=$2 ;; *) echo "fresh-check.sh: unknown stage '$2'" >&2; exit 2 ;; esac
            shift 2
            ;;
        --keep) keep=1; shift ;;
        -h | --help) sed -n '2,/^$/s/^# \{0,1\}//p' "$0"; exit 0 ;;
        *) echo "fresh-check.sh: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
[ "$(id -u)" = 0 ] || { echo "fresh-check.sh: needs root (chroot, mounts, network namespaces)" >&2; exit 1; }

work="$DEBROOT_CACHE/fresh-check"
mkdir -p "$work"
roots=()
cleanup() {
    local r
    [ "$keep" = 1 ] && return 0
    for r in "${roots[@]}"; do
        rm -rf --one-file-system "$r"
    done
}
trap cleanup EXIT
start=$(date +%s)
tarball=$(debroot_tarball debian12-minbase)

say() { echo "== [$(($(date +%s) - start)) s] $*"; }
fail() {
    echo "fresh-check.sh: FAILED: $*" >&2
    exit 1
}

# ROOT becomes a pristine root named NAME, with the checkout's tracked files (and their local
# changes) at DEST. (Not a command substitution: the cleanup list must be kept.)
fresh_root() {
    local name=$1 dest=$2
    ROOT="$work/$name"
    debroot_restore "$tarball" "$ROOT"
    [[ " ${roots[*]} " == *" $ROOT "* ]] || roots+=("$ROOT")
    mkdir -p "$ROOT$dest"
    git -C "$repo" ls-files -z | tar -C "$repo" --null -T - -cf - | tar -C "$ROOT$dest" -xf -
}

# ROOT becomes a pristine root plus what every cloud image and Vagrant box has and minbase
# lacks: systemd, sudo, curl, CA certificates.
vm_root() {
    fresh_root "$1" "$2"
    in_root "$ROOT" "$work/$1-image.log" 'export DEBIAN_FRONTEND=noninteractive; apt-get update -qq
        apt-get install -y -qq --no-install-recommends systemd sudo curl ca-certificates >/dev/null' ||
        fail "preparing the VM stand-in $1 (log: $work/$1-image.log)"
}

# Runs CMD in ROOT; output to LOG; the last lines of the log on failure.
in_root() {
    local root=$1 log=$2
    shift 2
    debroot_chroot "$root" bash -euc "$*" >"$log" 2>&1 || {
        tail -n 15 "$log" >&2
        return 1
    }
}

# The cargo target folder of the demo root, copied to DEST in ROOT (see the header).
seed_target() {
    local root=$1 dest=$2
    [ -d "$work/demo/opt/uringbench/target" ] || return 0
    mkdir -p "$root$dest"
    cp -a "$work/demo/opt/uringbench/target/." "$root$dest/"
    rm -rf "$root$dest"/debian "$root$dest"/release/uringbench
}

# uringbench works in ROOT; with "service", uringbench-recv.service is enabled there.
check_installed() {
    local root=$1 what=$2
    debroot_chroot "$root" uringbench --version >/dev/null || fail "$what: no working uringbench"
    if [ "${3:-}" = service ]; then
        [ -L "$root/etc/systemd/system/multi-user.target.wants/uringbench-recv.service" ] ||
            fail "$what: uringbench-recv.service is not enabled"
    fi
}

stage_demo() {
    local root log="$work/demo.log" status=0 last
    fresh_root demo /opt/uringbench
    root=$ROOT
    say "demo: scripts/demo.sh in a fresh root"
    debroot_chroot "$root" bash -c 'cd /opt/uringbench && scripts/demo.sh' >"$log" 2>&1 || status=$?
    tail -n 12 "$log"
    last=$(grep -E '^total: ' "$log" | tail -n 1 || true)
    if [ "$status" != 0 ] || ! [[ "$last" =~ ^total:\ sender\ wrote\ ([0-9]+)\ bytes,\ receiver\ counted\ ([0-9]+)\ bytes\ \(exact\ match\)(,\ over\ .*)?$ ]] ||
        [ "${BASH_REMATCH[1]}" != "${BASH_REMATCH[2]}" ] || [ "${BASH_REMATCH[1]}" = 0 ]; then
        fail "demo: scripts/demo.sh exited $status; its last total line: '${last:-none}' (log: $log)"
    fi
    say "demo: exact byte match (${BASH_REMATCH[1]} bytes)"
}

stage_deb() {
    local root pkg
    root="$work/demo"
    [ -d "$root/opt/uringbench/target" ] || stage_demo
    say "deb: cargo deb -p uringbench-cli"
    in_root "$root" "$work/deb-build.log" 'cd /opt/uringbench && cargo deb -p uringbench-cli --quiet' ||
        fail "deb: cargo deb (log: $work/deb-build.log)"
    pkg=$(ls "$root"/opt/uringbench/target/debian/uringbench_*_amd64.deb)
    cp "$pkg" "$work/"
    pkg="$work/${pkg##*/}"
    say "deb: ${pkg##*/} is $(du -k "$pkg" | cut -f1) KiB; installing it into a fresh root"
    fresh_root deb /src/unused
    root=$ROOT
    cp "$pkg" "$root/tmp.deb"
    in_root "$root" "$work/deb.log" '
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        # dpkg -i with the Depends resolved from the mirror: what `apt install ./x.deb` does.
        apt-get install -y -qq --no-install-recommends man-db bash-completion systemd /tmp.deb >/dev/null
        uringbench --version
        man -w uringbench-send
        bash -c ". /usr/share/bash-completion/completions/uringbench && complete -p uringbench"
        dpkg -L uringbench | sort
        systemd-analyze verify /lib/systemd/system/uringbench-recv.service
        echo "package checks passed"' || fail "deb: the package checks (log: $work/deb.log)"
    cat "$work/deb.log"
}

stage_vagrant() {
    local lines vm cmd root
    lines=$(ruby scripts/lib/vagrant-provisioners.rb Vagrantfile) || fail "vagrant: cannot read the Vagrantfile's provisioners"
    for vm in a b; do
        vm_root "vagrant-$vm" /vagrant
        root=$ROOT
        # The shared folder: b sees what a left in it (the package a built).
        if [ "$vm" = b ]; then
            cp -a "$work/vagrant-a/vagrant/." "$root/vagrant/"
        else
            seed_target "$root" /root/uringbench-target
        fi
        while IFS=$'\t' read -r name cmd; do
            [ "$name" = "$vm" ] || continue
            say "vagrant: VM $vm: $cmd"
            in_root "$root" "$work/vagrant-$vm.log" "cd /vagrant && $cmd" || fail "vagrant: VM $vm provisioning (log: $work/vagrant-$vm.log)"
        done <<<"$lines"
        if [ "$vm" = b ]; then check_installed "$root" "vagrant VM b" service; else check_installed "$root" "vagrant VM a"; fi
    done
    say "vagrant: both VMs provisioned"
}

stage_recipes() {
    local vm root
    for vm in a b; do
        vm_root "recipe-$vm" /unused
    done
    seed_target "$work/recipe-a" /opt/uringbench/target
    say "recipes: recipe_provision onto two fresh roots"
    (
        # shellcheck source=scripts/lib/recipe.sh
        . scripts/lib/recipe.sh
        # shellcheck disable=SC2317,SC2329  # called by recipe_provision
        on_vm() {
            local vm=$1
            shift
            debroot_chroot "$work/recipe-$vm" bash -c "$*"
        }
        # shellcheck disable=SC2317,SC2329
        put_file() { cp "$2" "$work/recipe-$1$3"; }
        # shellcheck disable=SC2317,SC2329
        get_file() { cp "$work/recipe-$1$2" "$3"; }
        RESULTS="$work/recipe-results"
        rm -rf "$RESULTS"
        recipe_provision
    ) >"$work/recipes.log" 2>&1 || { tail -n 15 "$work/recipes.log" >&2; fail "recipes: recipe_provision (log: $work/recipes.log)"; }
    check_installed "$work/recipe-a" "recipes VM a"
    check_installed "$work/recipe-b" "recipes VM b" service
    say "recipes: both VMs provisioned"
}

for stage in demo deb vagrant recipes; do
    [ -z "$only" ] || [ "$only" = "$stage" ] || continue
    "stage_$stage"
done
say "fresh-check passed"
