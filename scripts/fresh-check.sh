#!/usr/bin/env bash
# fresh-check.sh: the README's first command on a machine that has nothing but Rust.
#
#   scripts/fresh-check.sh [--keep] [--deb]
#
# Restores a pristine Debian 12 root (debootstrap --variant=minbase, made once and cached as a
# tarball by scripts/lib/debroot.sh, the mirror taken from this host's apt sources), copies
# this checkout's tracked files into it, bind-mounts only this host's Rust toolchain, and runs
# `scripts/demo.sh` inside, as root, as a new user would. Passes only when the demo's report
# ends in an exact byte match ("total: sender wrote N bytes, receiver counted N bytes (exact
# match)"). The root is restored from the tarball on every run, so nothing an earlier run
# installed can hide a missing step.
#
# --deb   also builds the Debian package inside the root (cargo deb), installs it there with
#         apt (dpkg -i plus its Depends) and checks `uringbench --version`, `man -w
#         uringbench-send`, the bash completion and `systemd-analyze verify` on the unit
# --keep  leave the root in place afterwards (for a look inside)
#
# Needs root, debootstrap, unshare (util-linux). Logs: $URINGBENCH_CACHE/fresh-check/*.log.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/debroot.sh
. scripts/lib/debroot.sh

keep=0
deb=0
for arg in "$@"; do
    case "$arg" in
        --keep) keep=1 ;;
        --deb) deb=1 ;;
        -h | --help) sed -n '2,/^$/s/^# \{0,1\}//p' "$0"; exit 0 ;;
        *) echo "fresh-check.sh: unknown argument '$arg'" >&2; exit 2 ;;
    esac
done
[ "$(id -u)" = 0 ] || { echo "fresh-check.sh: needs root (chroot, mounts, network namespaces)" >&2; exit 1; }

work="$DEBROOT_CACHE/fresh-check"
root="$work/root"
mkdir -p "$work"
start=$(date +%s)
tarball=$(debroot_tarball debian12-minbase)
debroot_restore "$tarball" "$root"
cleanup() {
    [ "$keep" = 1 ] || rm -rf --one-file-system "$root"
}
trap cleanup EXIT

# The checkout as a clone would have it: tracked files (with their local changes), no target/.
mkdir -p "$root/src/uringbench"
git ls-files -z | tar --null -T - -cf - | tar -C "$root/src/uringbench" -xf -

echo "== fresh Debian 12 root ready in $(($(date +%s) - start)) s; running scripts/demo.sh inside"
log="$work/demo.log"
status=0
debroot_chroot "$root" bash -c 'cd /src/uringbench && scripts/demo.sh' >"$log" 2>&1 || status=$?
tail -n 12 "$log"
last=$(grep -E '^total: ' "$log" | tail -n 1 || true)
if [ "$status" != 0 ] || ! [[ "$last" =~ ^total:\ sender\ wrote\ ([0-9]+)\ bytes,\ receiver\ counted\ ([0-9]+)\ bytes\ \(exact\ match\)$ ]] ||
    [ "${BASH_REMATCH[1]}" != "${BASH_REMATCH[2]}" ] || [ "${BASH_REMATCH[1]}" = 0 ]; then
    echo "fresh-check.sh: FAILED: scripts/demo.sh exited $status; its last total line: '${last:-none}' (log: $log)" >&2
    exit 1
fi
echo "== demo on a fresh root: exact byte match (${BASH_REMATCH[1]} bytes)"

if [ "$deb" = 1 ]; then
    # Built where the demo built, installed into a pristine root again, so the package's
    # Depends, not what the build installed, make it work.
    debroot_chroot "$root" bash -euc '
        cd /src/uringbench
        command -v cargo-deb >/dev/null || { echo "cargo-deb is not installed (cargo install cargo-deb)"; exit 1; }
        cargo deb -p uringbench-cli --quiet
    ' >"$work/deb-build.log" 2>&1 || { tail -n 20 "$work/deb-build.log" >&2; echo "fresh-check.sh: FAILED: cargo deb (log: $work/deb-build.log)" >&2; exit 1; }
    pkg=$(ls "$root"/src/uringbench/target/debian/uringbench_*_amd64.deb)
    cp "$pkg" "$work/"
    pkg="$work/${pkg##*/}"
    echo "== built ${pkg##*/}: $(du -k "$pkg" | cut -f1) KiB; installing it into a pristine root"
    debroot_restore "$tarball" "$root"
    cp "$pkg" "$root/tmp.deb"
    debroot_chroot "$root" bash -euc '
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        # dpkg -i with the Depends resolved from the mirror: what `apt install ./x.deb` does.
        apt-get install -y -qq --no-install-recommends man-db bash-completion systemd /tmp.deb >/dev/null
        uringbench --version
        man -w uringbench-send
        bash -c ". /usr/share/bash-completion/completions/uringbench && complete -p uringbench"
        dpkg -L uringbench | sort
        systemd-analyze verify /lib/systemd/system/uringbench-recv.service
        echo "package checks passed"
    ' >"$work/deb.log" 2>&1 || { cat "$work/deb.log" >&2; echo "fresh-check.sh: FAILED: the Debian package checks (log: $work/deb.log)" >&2; exit 1; }
    cat "$work/deb.log"
fi
echo "== fresh-check passed in $(($(date +%s) - start)) s"
