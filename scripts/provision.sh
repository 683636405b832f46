#!/usr/bin/env bash
# provision.sh: put uringbench on a fresh VM, the one way the Vagrantfile, the cloud recipes
# and the VM lab do it.
#
#   scripts/provision.sh --deb FILE [--recv-service]
#   scripts/provision.sh --src DIR [--deb-out DIR] [--recv-service]
#
# --deb FILE|DIR   install the Debian package (apt resolves its Depends); a folder means the
#                  newest uringbench_*.deb in it
# --src DIR        build it from the source tree DIR: the build packages (install-deps.sh
#                  --build), a Rust toolchain if there is none (rustup, minimal profile),
#                  cargo-deb if missing, then `cargo deb` and install the package it made
# --deb-out DIR    with --src: also copy the package to DIR (to install it on other VMs)
# --recv-service   enable uringbench-recv.service, and start it when systemd is running
#
# Runs as root. Idempotent: a second run reinstalls the same package and changes nothing
# else. Needs apt (the package is a .deb); elsewhere build from source by hand
# (scripts/install-deps.sh --build && cargo install --path cli).
set -euo pipefail
prog=${0##*/}

deb=""
src=""
deb_out=""
service=0
while [ $# -gt 0 ]; do
    case "$1" in
        --deb | --src | --deb-out)
            [ $# -ge 2 ] || { echo "$prog: $1 needs a value" >&2; exit 2; }
            case "$1" in --deb) deb=$2 ;; --src) src=$2 ;; --deb-out) deb_out=$2 ;; esac
            shift 2
            ;;
        --recv-service) service=1; shift ;;
        -h | --help) sed -n '2,/^$/s/^# \{0,1\}//p' "$0"; exit 0 ;;
        *) echo "$prog: unknown argument '$1' (see $prog --help)" >&2; exit 2 ;;
    esac
done
if { [ -n "$deb" ] && [ -n "$src" ]; } || { [ -z "$deb" ] && [ -z "$src" ]; }; then
    echo "$prog: give exactly one of --deb FILE or --src DIR" >&2
    exit 2
fi
[ -z "$deb_out" ] || [ -n "$src" ] || { echo "$prog: --deb-out goes with --src" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "$prog: run as root" >&2; exit 1; }
command -v apt-get >/dev/null || { echo "$prog: no apt-get: the package is a .deb; build by hand: scripts/install-deps.sh --build && cargo install --path cli" >&2; exit 1; }
export DEBIAN_FRONTEND=noninteractive

log() { printf '%s: %s\n' "$prog" "$*"; }

if [ -n "$src" ]; then
    [ -x "$src/scripts/install-deps.sh" ] || { echo "$prog: $src is not a uringbench source tree" >&2; exit 1; }
    "$src/scripts/install-deps.sh" --build
    export PATH="$HOME/.cargo/bin:$PATH"
    if ! command -v cargo >/dev/null; then
        log "no Rust toolchain: installing one with rustup (minimal profile)"
        "$src/scripts/install-deps.sh" --bootstrap
        curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal >/dev/null
    fi
    if ! command -v cargo-deb >/dev/null; then
        log "installing cargo-deb"
        cargo install cargo-deb --locked --quiet
    fi
    log "building the package in $src"
    (cd "$src" && cargo deb -p uringbench-cli --quiet)
    deb="${CARGO_TARGET_DIR:-$src/target}/debian"
    deb=$(ls -t "$deb"/uringbench_*.deb | head -n 1)
    if [ -n "$deb_out" ]; then
        mkdir -p "$deb_out"
        cp "$deb" "$deb_out/"
        log "package copied to $deb_out/${deb##*/}"
    fi
fi

if [ -d "$deb" ]; then
    dir=$deb
    deb=$(ls -t "$dir"/uringbench_*.deb 2>/dev/null | head -n 1)
    [ -n "$deb" ] || { echo "$prog: no uringbench_*.deb in $dir" >&2; exit 1; }
fi
[ -f "$deb" ] || { echo "$prog: no such package: $deb" >&2; exit 1; }
log "installing ${deb##*/}"
deb=$(cd "$(dirname "$deb")" && pwd)/${deb##*/}
# A fresh VM's package lists may be missing or stale, and the Depends come from them.
apt-get update -qq
apt-get install -y -qq --no-install-recommends --reinstall "$deb" >/dev/null
uringbench --version

if [ "$service" = 1 ]; then
    command -v systemctl >/dev/null || { echo "$prog: --recv-service needs systemd, and this host has no systemctl; start 'uringbench recv' another way" >&2; exit 1; }
    systemctl enable uringbench-recv.service >/dev/null 2>&1 || {
        echo "$prog: systemctl enable uringbench-recv.service failed" >&2
        exit 1
    }
    if [ -d /run/systemd/system ]; then
        systemctl restart uringbench-recv.service
        log "uringbench-recv.service enabled and running"
    else
        log "uringbench-recv.service enabled; systemd is not running here, so it starts at the next boot"
    fi
fi
