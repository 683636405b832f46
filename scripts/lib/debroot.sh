#!/usr/bin/env bash
# Debian 12 roots made with debootstrap, for checks that need a machine with nothing on it
# (scripts/fresh-check.sh) and for guest images (scripts/vmlab.sh). Sourced, not run.
#
#   debroot_mirror                       the Debian mirror this host's apt uses (never a fixed one)
#   debroot_tarball NAME [PKG,PKG...]    path of a cached tarball of a minbase root (with the
#                                        extra packages), made on first use
#   debroot_restore TARBALL DIR          DIR becomes exactly the tarball's root (old DIR removed)
#   debroot_chroot DIR CMD...            runs CMD as root in DIR, in a private mount namespace
#                                        with /proc, /sys, /dev, a fresh /run, the
#                                        host's resolv.conf and the host's Rust toolchain
#                                        (RUSTUP_HOME, CARGO_HOME) bind-mounted, and apt's
#                                        download folder shared with every other root; every
#                                        mount ends with CMD
#
# The cache is $URINGBENCH_CACHE (default /var/cache/uringbench). A tarball is made once and
# only ever extracted afterwards, so every run starts from the same pristine root. What apt
# downloads in a root lands in $DEBROOT_CACHE/apt-archives, shared by all roots and runs: a
# root still installs every package its scripts ask for (nothing is preinstalled), only the
# .deb files are not fetched from the mirror again.

DEBROOT_SUITE=bookworm
DEBROOT_CACHE=${URINGBENCH_CACHE:-/var/cache/uringbench}

# The first non-security mirror for the suite in the host's apt sources (deb822 .sources files
# or the one-line format).
debroot_mirror() {
    local f uri
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -r "$f" ] || continue
        uri=$(awk -v suite="$DEBROOT_SUITE" '
            /^[[:space:]]*$/ { if (u != "" && s ~ "(^| )" suite "( |$)") { print u; exit } u = ""; s = ""; next }
            /^URIs:/ { u = $2 }
            /^Suites:/ { $1 = ""; s = $0 " " }
            END { if (u != "" && s ~ "(^| )" suite "( |$)") print u }' "$f" | grep -v -- '-security' | head -n 1)
        [ -n "$uri" ] && { echo "$uri"; return 0; }
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -r "$f" ] || continue
        uri=$(awk -v suite="$DEBROOT_SUITE" '$1 == "deb" {
                i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
                if ($(i + 1) == suite) { print $i; exit } }' "$f")
        [ -n "$uri" ] && { echo "$uri"; return 0; }
    done
    echo "debroot: no '$DEBROOT_SUITE' mirror in this host's apt sources (/etc/apt/sources.list*)" >&2
    return 1
}

debroot_tarball() {
    local name=$1 include=${2:-} tarball tmp mirror
    tarball="$DEBROOT_CACHE/$name.tar"
    if [ -s "$tarball" ]; then
        echo "$tarball"
        return 0
    fi
    command -v debootstrap >/dev/null || {
        echo "debroot: debootstrap is not installed (scripts/install-deps.sh --test)" >&2
        return 1
    }
    mirror=$(debroot_mirror) || return 1
    mkdir -p "$DEBROOT_CACHE"
    tmp=$(mktemp -d "$DEBROOT_CACHE/.build-$name.XXXXXX")
    echo "debroot: making $name (debootstrap --variant=minbase $DEBROOT_SUITE from $mirror), once" >&2
    if ! debootstrap --variant=minbase ${include:+--include="$include"} "$DEBROOT_SUITE" "$tmp/root" "$mirror" \
        >"$tmp/debootstrap.log" 2>&1; then
        echo "debroot: debootstrap failed; last lines of its log:" >&2
        tail -n 5 "$tmp/debootstrap.log" >&2
        rm -rf "$tmp"
        return 1
    fi
    # Downloaded .debs are not part of a fresh machine.
    rm -rf "$tmp/root/var/cache/apt/archives/"*.deb "$tmp/root/var/lib/apt/lists/"*
    tar -C "$tmp/root" --numeric-owner -cf "$tmp/root.tar" .
    mv "$tmp/root.tar" "$tarball"
    rm -rf "$tmp"
    echo "$tarball"
}

debroot_restore() {
    local tarball=$1 dir=$2
    case "$dir" in "" | / | /usr | /var | /root) echo "debroot: refusing to restore into '$dir'" >&2; return 1 ;; esac
    rm -rf --one-file-system "$dir"
    mkdir -p "$dir"
    tar -C "$dir" --numeric-owner -xpf "$tarball"
}

debroot_chroot() {
    local dir=$1
    shift
    local rustup=${RUSTUP_HOME:-$HOME/.rustup} cargo_home=${CARGO_HOME:-$HOME/.cargo}
    [ -d "$rustup" ] && [ -d "$cargo_home" ] || {
        echo "debroot: no Rust toolchain at $rustup and $cargo_home" >&2
        return 1
    }
    local archives="$DEBROOT_CACHE/apt-archives"
    mkdir -p "$archives/partial"
    # A private mount namespace: the mounts below vanish with the command, whatever happens.
    unshare --mount --propagation private -- bash -euc '
        dir=$1 rustup=$2 cargo_home=$3 archives=$4
        shift 4
        # The root must be a mount point: `ip netns exec` remounts / as a slave.
        mount --bind "$dir" "$dir"
        mount -t proc proc "$dir/proc"
        mount --rbind /sys "$dir/sys"
        mount --rbind /dev "$dir/dev"
        mount -t tmpfs tmpfs "$dir/run"
        cp -L /etc/resolv.conf "$dir/etc/resolv.conf"
        mkdir -p "$dir$rustup" "$dir$cargo_home"
        mount --bind "$rustup" "$dir$rustup"
        mount -o remount,bind,ro "$dir$rustup"
        mount --bind "$cargo_home" "$dir$cargo_home"
        mkdir -p "$dir/var/cache/apt/archives"
        mount --bind "$archives" "$dir/var/cache/apt/archives"
        exec chroot "$dir" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
            RUSTUP_HOME="$rustup" CARGO_HOME="$cargo_home" \
            PATH="$cargo_home/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" "$@"
    ' debroot "$dir" "$rustup" "$cargo_home" "$archives" "$@"
}
