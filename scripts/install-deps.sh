#!/usr/bin/env bash
# install-deps.sh: the one list of system packages uringbench needs, and their installer.
#
#   scripts/install-deps.sh [--build] [--test] [--peers] [--lab] [--fleet] [--fuzz] [--list] [--quiet]
#
# Groups (the run group is always included):
#   run      what the binary uses at run time: iproute2, ethtool, libelf, zlib
#   --build  compile uringbench: clang and llvm (the XDP program, built to BPF), libelf and
#            zlib headers, m4 and make (libxdp and libbpf are built from source), libpcap,
#            the kernel UAPI headers, pkg-config, a C toolchain
#   --test   `cargo test --workspace` and .ci/run: ping, iptables, procps, python3, iperf2, iperf3,
#            openssl (the RSA keys of the iperf3 authentication tests), nginx, bpftool, shellcheck, ruby, man-db, debootstrap (the fresh-machine check),
#            chromium (loads the HTML report headless), prometheus (scrapes recv --metrics),
#            and cargo-deb (from crates.io, with `cargo install --locked`)
#   --peers  the tools the benchmarks compare against: iperf2, iperf3, sockperf, wrk, nginx,
#            and neper's tcp_crr (built from its source on GitHub: no distribution packages it)
#   --lab    scripts/vmlab.sh: QEMU, debootstrap, an ssh client, e2fsprogs (the guest disk),
#            ruby (reads the Vagrantfile's provisioners)
#   --fleet  scripts/fleet-lab.sh: sshd, ssh client, Python venv (ansible-core from PyPI)
#   --fuzz   scripts/fuzz.sh: the nightly Rust toolchain (with rustup) and cargo-fuzz
#   --bootstrap  what fetching a Rust toolchain with rustup needs: curl, CA certificates
#
# Debian and Ubuntu (apt) and Fedora, RHEL and their rebuilds (dnf). Installs only what is
# missing, says what it installs, and changes nothing when all is present (so it is safe to
# run before every build). With --list it prints the missing packages and installs nothing.
# On another distribution it stops with one line naming the packages to install by hand.
# Installing needs root (or sudo).
set -euo pipefail
prog=${0##*/}

groups=(run)
list_only=0
quiet=0
for arg in "$@"; do
    case "$arg" in
        --build | --test | --peers | --lab | --fleet | --fuzz | --bootstrap) groups+=("${arg#--}") ;;
        --list) list_only=1 ;;
        --quiet) quiet=1 ;;
        -h | --help) sed -n '2,/^$/s/^# \{0,1\}//p' "$0"; exit 0 ;;
        *) echo "$prog: unknown argument '$arg' (see $prog --help)" >&2; exit 2 ;;
    esac
done

# One table: group, Debian package, Fedora/RHEL package ("-" where the distribution has none
# or another package of the list already provides it). "cargo:NAME" is a tool from crates.io,
# "rustup:NAME" a Rust toolchain, "neper:NAME" a neper program built from source (needs git,
# make and a C compiler) into /usr/local/bin.
packages() {
    cat <<'TABLE'
run    iproute2          iproute
run    ethtool           ethtool
run    libelf1           elfutils-libelf
run    zlib1g            zlib
build  build-essential   gcc
build  make              make
build  clang             clang
build  llvm              llvm
build  libelf-dev        elfutils-libelf-devel
build  zlib1g-dev        zlib-devel
build  pkg-config        pkgconf-pkg-config
build  m4                m4
build  libpcap-dev       libpcap-devel
build  linux-libc-dev    kernel-headers
test   iputils-ping      iputils
test   iptables          iptables
test   procps            procps-ng
test   python3           python3
test   iperf             iperf
test   iperf3            iperf3
test   openssl           openssl
test   nginx-light       nginx
test   bpftool           bpftool
test   shellcheck        ShellCheck
test   ruby              ruby
test   man-db            man-db
test   debootstrap       debootstrap
test   systemd           systemd
test   xz-utils          xz
test   chromium          chromium
test   prometheus        golang-github-prometheus
test   cargo:cargo-deb   cargo:cargo-deb
peers  iperf             iperf
peers  iperf3            iperf3
peers  sockperf          sockperf
peers  wrk               wrk
peers  nginx-light       nginx
peers  git               git
peers  build-essential   gcc
peers  neper:tcp_crr     neper:tcp_crr
lab    qemu-system-x86   qemu-system-x86-core
lab    debootstrap       debootstrap
lab    openssh-client    openssh-clients
lab    xz-utils          xz
lab    e2fsprogs         e2fsprogs
lab    ruby              ruby
fuzz   rustup:nightly    rustup:nightly
fuzz   cargo:cargo-fuzz  cargo:cargo-fuzz
fleet  openssh-server    openssh-server
fleet  openssh-client    openssh-clients
fleet  python3-venv      python3
bootstrap curl          curl
bootstrap ca-certificates ca-certificates
TABLE
}

distro=unknown
os_release=${URINGBENCH_OS_RELEASE:-/etc/os-release}   # another file only in tests
if [ -r "$os_release" ]; then
    # shellcheck disable=SC1090
    . "$os_release"
    case " ${ID:-} ${ID_LIKE:-} " in
        *" debian "* | *" ubuntu "*) distro=debian ;;
        *" fedora "* | *" rhel "* | *" centos "*) distro=fedora ;;
    esac
fi

wanted=()
while read -r group deb rpm; do
    [[ " ${groups[*]} " == *" $group "* ]] || continue
    pkg=$deb
    [ "$distro" = fedora ] && pkg=$rpm
    [ "$pkg" = - ] && continue
    [[ " ${wanted[*]} " == *" $pkg "* ]] || wanted+=("$pkg")
done < <(packages)

if [ "$distro" = unknown ]; then
    echo "$prog: unknown distribution '${ID:-?}' (no apt or dnf); install by hand (Debian names): ${wanted[*]}" >&2
    exit 2
fi

installed() {
    if [[ "$1" == cargo:* ]]; then
        command -v "${1#cargo:}" >/dev/null || [ -x "$HOME/.cargo/bin/${1#cargo:}" ]
    elif [[ "$1" == neper:* ]]; then
        command -v "${1#neper:}" >/dev/null
    elif [[ "$1" == rustup:* ]]; then
        rustup_bin=$(command -v rustup || echo "$HOME/.cargo/bin/rustup")
        [ -x "$rustup_bin" ] && "$rustup_bin" toolchain list | grep -q "^${1#rustup:}-"
    elif [ "$distro" = debian ]; then
        [ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null)" = installed ]
    else
        rpm -q --whatprovides "$1" >/dev/null 2>&1
    fi
}

missing=()
for pkg in "${wanted[@]}"; do
    installed "$pkg" || missing+=("$pkg")
done

if [ "${#missing[@]}" -eq 0 ]; then
    [ "$quiet" = 1 ] || [ "$list_only" = 1 ] || echo "$prog: all ${#wanted[@]} packages for ${groups[*]} are installed"
    exit 0
fi
if [ "$list_only" = 1 ]; then
    printf '%s\n' "${missing[@]}"
    exit 0
fi

# Tools from crates.io go in with cargo, as the user running this (no sudo).
crates=()
toolchains=()
neper=()
system=()
for pkg in "${missing[@]}"; do
    case "$pkg" in
        cargo:*) crates+=("${pkg#cargo:}") ;;
        neper:*) neper+=("${pkg#neper:}") ;;
        rustup:*) toolchains+=("${pkg#rustup:}") ;;
        *) system+=("$pkg") ;;
    esac
done
missing=("${system[@]}")
for toolchain in "${toolchains[@]}"; do
    rustup_bin=$(command -v rustup || echo "$HOME/.cargo/bin/rustup")
    [ -x "$rustup_bin" ] || { echo "$prog: rustup not found; install it, then: rustup toolchain install $toolchain" >&2; exit 1; }
    echo "$prog: installing the $toolchain Rust toolchain (rustup toolchain install --profile minimal)"
    "$rustup_bin" toolchain install --profile minimal "$toolchain"
done
if [ "${#crates[@]}" -gt 0 ]; then
    cargo=$(command -v cargo || echo "$HOME/.cargo/bin/cargo")
    [ -x "$cargo" ] || { echo "$prog: cargo not found; install Rust (rustup), then: cargo install --locked ${crates[*]}" >&2; exit 1; }
    echo "$prog: installing ${crates[*]} from crates.io (cargo install --locked)"
    "$cargo" install --locked --quiet "${crates[@]}"
fi
[ "${#missing[@]}" -gt 0 ] || [ "${#neper[@]}" -gt 0 ] || exit 0

sudo=()
if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || { echo "$prog: not root and no sudo; as root install: ${missing[*]}" >&2; exit 1; }
    sudo=(sudo)
fi
if [ "${#missing[@]}" -eq 0 ]; then
    :
elif [ "$distro" = debian ]; then
    echo "$prog: installing ${missing[*]} (missing for ${groups[*]})"
    export DEBIAN_FRONTEND=noninteractive
    "${sudo[@]}" apt-get update -qq
    "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
    echo "$prog: installing ${missing[*]} (missing for ${groups[*]})"
    # The BPF tool and a few test tools live in EPEL on RHEL and its rebuilds.
    "${sudo[@]}" dnf install -y -q "${missing[@]}"
fi
# neper after the system packages: its build needs git, make and a C compiler from them.
if [ "${#neper[@]}" -gt 0 ]; then
    src=$(mktemp -d)
    echo "$prog: building ${neper[*]} from https://github.com/google/neper into /usr/local/bin"
    git clone --quiet --depth 1 https://github.com/google/neper "$src/neper"
    make -s -C "$src/neper" "${neper[@]}"
    for tool in "${neper[@]}"; do
        "${sudo[@]}" install -m 0755 "$src/neper/$tool" /usr/local/bin/
        missing+=("neper:$tool")
    done
    rm -rf "$src"
fi
still=()
for pkg in "${missing[@]}"; do
    installed "$pkg" || still+=("$pkg")
done
if [ "${#still[@]}" -gt 0 ]; then
    echo "$prog: the package manager finished but these are still missing: ${still[*]}" >&2
    exit 1
fi
