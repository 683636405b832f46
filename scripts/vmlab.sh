#!/usr/bin/env bash
# vmlab.sh: two QEMU guests joined by a multi-queue virtio-net link, for the paths a netns
# pair cannot test (a real NIC driver: queues with MSI-X interrupts, NAPI, native XDP, ethtool).
#
#   scripts/vmlab.sh up      boot the lab (guest a and guest b), provision uringbench in both
#   scripts/vmlab.sh run     up, the lab tests (cargo test --test vmlab), down; exit 1 on failure
#   scripts/vmlab.sh ssh NAME [CMD...]   a command (or a shell) in guest NAME (a or b), as root
#   scripts/vmlab.sh status  "up: ACCEL, booted in N s" (exit 0) or "down" (exit 1)
#   scripts/vmlab.sh down    stop both guests, remove the lab's network namespace
#   scripts/vmlab.sh image   only build (or find) the cached guest image; prints its directory
#
# The guests: Debian 12 (debootstrap minbase, made once by scripts/lib/debroot.sh, the mirror
# taken from this host's apt sources) with the bookworm-backports kernel (linux-image-cloud-amd64,
# 6.12: io_uring bundles and NAPI registration, AF_XDP and native XDP in virtio_net), systemd,
# openssh-server, iproute2, ethtool and bpftool 7.5. Each guest has 4 vCPUs, 1 GiB and three NICs:
#   lab0   virtio-net-pci, mq=on, 2 queue pairs (MSI-X), on a multi-queue tap; both guests' taps
#          are on one bridge inside the private namespace uringbench-vmlab: a 10.98.0.11,
#          b 10.98.0.12 (/24, a range only the lab uses, reachable only from that namespace)
#   lab1   virtio-net-pci, mq=on, rss=on, 4 queue pairs, one per vCPU, on a second bridge:
#          a 10.98.1.11, b 10.98.1.12; the NIC with RSS the steering tests use. QEMU 7.2 cannot
#          load its eBPF RSS program (libbpf 1.x refuses the program's legacy map section), so
#          it hashes in software, where two quirks need the lab's care (docs/placement.md):
#          a packet parked for want of buffers on its target queue stalls the tap queue it
#          came from until that other queue is refilled, so lab1's taps come up only after
#          the guests have filled their rings; and QEMU hashes with a zero byte in front of
#          the key the guest reports (it reads the driver's padding byte as the key's first),
#          so the lab sets a key of one repeated byte, which that offset leaves unchanged for
#          every bit a 128-entry table uses. Guest b has two
#          NUMA nodes (CPUs 0-1 and 2-3), and its lab1 sits on node 1 behind a PCI expander
#          bridge (pxb, numa_node=1): the NUMA placement test's shape
#   mgmt0  QEMU user networking with restrict=on (no way out), ssh forwarded to 127.0.0.1 inside
#          the lab namespace: the command channel
# The disk image is shared read-only (snapshot=on): every boot starts from the same pristine
# image. KVM is used when it boots a kernel, else TCG (software emulation); `up` says which.
# Provisioning is the Vagrantfile's (scripts/provision.sh with the package cargo-deb built in
# $CARGO_TARGET_DIR/debian, default target/debian): a broken provisioning step fails the lab.
#
# Bounded: every wait has a deadline, the guests stop after VMLAB_LIFETIME seconds (default
# 1800) even if `down` never comes, and `run` tears everything down however it ends.
# Environment: VMLAB_ACCEL=kvm|tcg (skip the probe), VMLAB_LIFETIME, URINGBENCH_CACHE (image
# cache, default /var/cache/uringbench). Needs root, qemu-system-x86, debootstrap, an ssh client
# (scripts/install-deps.sh --lab). Logs: /run/uringbench-vmlab/ (console-a.log, console-b.log).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/debroot.sh
. scripts/lib/debroot.sh

PROG=vmlab.sh
NETNS=uringbench-vmlab
RUN=/run/uringbench-vmlab
LIFETIME=${VMLAB_LIFETIME:-1800}
BOOT_DEADLINE=300
GUESTS=(a b)
declare -A ADDR=([a]=10.98.0.11 [b]=10.98.0.12)
declare -A SSH_PORT=([a]=10022 [b]=10023)
declare -A LAB_MAC=([a]=52:54:00:98:00:11 [b]=52:54:00:98:00:12)
declare -A MGMT_MAC=([a]=52:54:00:98:01:11 [b]=52:54:00:98:01:12)
QUEUES=2
CPUS=4
# lab1: the NIC with RSS, one queue pair per vCPU.
declare -A RSS_ADDR=([a]=10.98.1.11 [b]=10.98.1.12)
declare -A RSS_MAC=([a]=52:54:00:98:02:11 [b]=52:54:00:98:02:12)
RSS_QUEUES=$CPUS
# Any byte repeated: QEMU's one-byte offset then changes no bit the indirection table uses.
RSS_KEY_BYTE=6d
# The image's packages (debootstrap --include), then what comes from bookworm-backports.
BASE_PACKAGES=systemd-sysv,udev,kmod,openssh-server,iproute2,ethtool,libelf1,zlib1g,procps,iputils-ping
BACKPORTS_PACKAGES="linux-image-cloud-amd64 bpftool"

die() {
    echo "$PROG: $*" >&2
    exit 1
}

usage() {
    echo "$PROG: $* (see $PROG --help)" >&2
    exit 2
}

# ---- the guest image ------------------------------------------------------------------------

# Configures the restored root in $1 as a lab guest: the kernel from backports, sshd with the
# lab's key, and the unit that names and addresses the NICs. The guest boots without an
# initramfs: its disk is NVMe, and the cloud kernel has NVMe, ext4 and virtio PCI built in.
vmlab_configure_root() {
    local root=$1 key=$2 mirror
    mirror=$(debroot_mirror)
    echo "deb $mirror bookworm-backports main" >"$root/etc/apt/sources.list.d/backports.list"
    # shellcheck disable=SC2016 # expanded inside the chroot
    debroot_chroot "$root" bash -euc '
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends -t bookworm-backports '"$BACKPORTS_PACKAGES"' >/dev/null
        apt-get clean
        rm -rf /var/lib/apt/lists/*
    '
    rm -f "$root/etc/apt/sources.list.d/backports.list"
    # debroot_chroot made these as mount points for the host toolchain.
    rmdir "$root${RUSTUP_HOME:-$HOME/.rustup}" "$root${CARGO_HOME:-$HOME/.cargo}" 2>/dev/null || true

    echo vmlab >"$root/etc/hostname"
    printf '/dev/nvme0n1 / ext4 rw,noatime 0 0\n' >"$root/etc/fstab"
    install -d -m 0700 "$root/root/.ssh"
    install -m 0600 "$key.pub" "$root/root/.ssh/authorized_keys"
    printf 'UseDNS no\nPasswordAuthentication no\n' >"$root/etc/ssh/sshd_config.d/vmlab.conf"
    cat >"$root/usr/local/sbin/vmlab-net" <<'NET'
#!/bin/sh
# Names the lab NICs by MAC (lab0, mgmt0) and addresses them from the kernel command line
# (vmlab.lab=MAC/ADDR vmlab.mgmt=MAC); waits up to 60 s for the devices.
set -eu
# Now, not when udev's coldplug gets to it (tens of seconds later under emulation).
modprobe virtio_net
arg() { tr ' ' '\n' </proc/cmdline | sed -n "s/^vmlab\.$1=//p"; }
lab=$(arg lab) mgmt=$(arg mgmt)
find_mac() {
    for d in /sys/class/net/*; do
        [ "$(cat "$d/address")" = "$1" ] && { basename "$d"; return 0; }
    done
    return 1
}
for name in lab0 mgmt0; do
    case $name in lab0) mac=${lab%%/*} ;; *) mac=$mgmt ;; esac
    i=0
    while ! dev=$(find_mac "$mac"); do
        i=$((i + 1)); [ "$i" -le 600 ] || { echo "vmlab-net: no NIC with MAC $mac" >&2; exit 1; }
        sleep 0.1
    done
    [ "$dev" = "$name" ] || ip link set dev "$dev" name "$name"
    ip link set dev "$name" up
done
ip addr replace "${lab#*/}/24" dev lab0
ip addr replace 10.0.2.15/24 dev mgmt0
ip link set dev lo up
NET
    chmod 0755 "$root/usr/local/sbin/vmlab-net"
    cat >"$root/etc/systemd/system/vmlab-net.service" <<'UNIT'
[Unit]
Description=vmlab NIC names and addresses
DefaultDependencies=no
After=systemd-udevd.service
Before=network.target network-online.target ssh.service
Wants=network.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/local/sbin/vmlab-net

[Install]
WantedBy=multi-user.target network-online.target
UNIT
    ln -sf /etc/systemd/system/vmlab-net.service "$root/etc/systemd/system/multi-user.target.wants/vmlab-net.service"
    # A scrub of LVM snapshots the guest has none of: seconds of emulated boot for nothing.
    ln -sf /dev/null "$root/etc/systemd/system/e2scrub_reap.service"
    mkdir -p "$root/etc/systemd/system/network-online.target.wants"
    ln -sf /etc/systemd/system/vmlab-net.service "$root/etc/systemd/system/network-online.target.wants/vmlab-net.service"
}

# The image directory (disk.img, vmlinuz, kernel, id_ed25519), built once per recipe: the
# directory name carries a hash of this recipe, so a change to it builds a new image.
vmlab_image() {
    local hash dir tarball tmp
    hash=$( (declare -f vmlab_configure_root; echo "$BASE_PACKAGES $BACKPORTS_PACKAGES") | sha256sum | cut -c1-12)
    dir="$DEBROOT_CACHE/vmlab/image-$hash"
    if [ -s "$dir/disk.img" ]; then
        echo "$dir"
        return 0
    fi
    tarball=$(debroot_tarball vmlab-bookworm "$BASE_PACKAGES")
    mkdir -p "$DEBROOT_CACHE/vmlab"
    tmp=$(mktemp -d "$DEBROOT_CACHE/vmlab/.build.XXXXXX")
    echo "$PROG: building the guest image (kernel from bookworm-backports), once" >&2
    debroot_restore "$tarball" "$tmp/root"
    ssh-keygen -q -t ed25519 -N '' -C uringbench-vmlab -f "$tmp/id_ed25519"
    if ! vmlab_configure_root "$tmp/root" "$tmp/id_ed25519" >"$tmp/build.log" 2>&1; then
        tail -n 5 "$tmp/build.log" >&2
        rm -rf --one-file-system "$tmp"
        die "building the guest image failed"
    fi
    cp -L "$tmp/root/vmlinuz" "$tmp/vmlinuz"
    basename "$(readlink -f "$tmp/root/vmlinuz")" >"$tmp/kernel"
    mkfs.ext4 -q -F -L vmlab -d "$tmp/root" "$tmp/disk.img" 2G >/dev/null
    rm -rf --one-file-system "$tmp/root"
    # Images of earlier recipes are never used again.
    rm -rf "$DEBROOT_CACHE"/vmlab/image-*
    mv "$tmp" "$dir"
    echo "$dir"
}

# ---- the lab ---------------------------------------------------------------------------------

in_ns() {
    ip netns exec "$NETNS" "$@"
}

lab_is_up() {
    local g
    for g in "${GUESTS[@]}"; do
        [ -s "$RUN/qemu-$g.pid" ] && kill -0 "$(cat "$RUN/qemu-$g.pid")" 2>/dev/null || return 1
    done
}

# KVM when /dev/kvm opens and the guest kernel boots with it as far as its panic for want of
# a root file system, within 15 s (on this project's CI host /dev/kvm exists, yet nested KVM
# never prints a line), else TCG.
choose_accel() {
    local image=$1 log="$RUN/kvm-probe.log"
    if [ -n "${VMLAB_ACCEL:-}" ]; then
        echo "$VMLAB_ACCEL"
        return
    fi
    if [ -r /dev/kvm ] && [ -w /dev/kvm ]; then
        # The kernel alone, no root file system: it panics at once and QEMU exits (-no-reboot).
        timeout 15 qemu-system-x86_64 -accel kvm -cpu host -m 256 -display none -no-reboot \
            -kernel "$image/vmlinuz" -append "console=ttyS0 root=/dev/nonexistent panic=-1" \
            -serial "file:$log" -monitor none -nodefaults >/dev/null 2>&1 || true
        if grep -q 'Kernel panic' "$log" 2>/dev/null; then
            echo kvm
            return
        fi
    fi
    echo tcg
}

start_guest() {
    local g=$1 image=$2 accel=$3 cpu=host
    # QEMU 7.2's TCG corrupts the 6.12 kernel's SLUB per-CPU fast path (an unlocked
    # cmpxchg16b on %gs): double faults within seconds of boot. Without CX16 the kernel takes
    # its locked slow path, and boots.
    [ "$accel" = tcg ] && cpu=max,-cx16
    in_ns ip tuntap add dev "tap-$g" mode tap multi_queue
    in_ns ip link set dev "tap-$g" master br0 up
    # Guest b has two NUMA nodes (CPUs 0-1, 2-3) and its lab1 on node 1, behind a PCI
    # expander bridge (pxb, with a PCI bridge for the NIC to plug into); last on the command
    # line, so that the devices before it stay on the root bus.
    local numa=() rss_bus=""
    if [ "$g" = b ]; then
        # shellcheck disable=SC2054 # QEMU's own option syntax has the commas
        numa=(-object memory-backend-ram,id=m0,size=512M -object memory-backend-ram,id=m1,size=512M
            -numa node,nodeid=0,cpus=0-1,memdev=m0 -numa node,nodeid=1,cpus=2-3,memdev=m1
            -device pxb,id=pxb1,bus_nr=32,numa_node=1 -device pci-bridge,id=pb1,bus=pxb1,chassis_nr=1,addr=0x1)
        rss_bus=",bus=pb1,addr=0x1"
    fi
    # Down until the guest's rings are full (rss_link_up).
    in_ns ip tuntap add dev "tap1-$g" mode tap multi_queue
    in_ns ip link set dev "tap1-$g" master br1
    in_ns qemu-system-x86_64 -name "vmlab-$g" -accel "$accel" -cpu "$cpu" -smp "$CPUS" -m 1024 \
        -nodefaults -display none -monitor none -no-reboot \
        -kernel "$image/vmlinuz" \
        -append "root=/dev/nvme0n1 rw console=ttyS0 quiet net.ifnames=0 panic=-1 vmlab.lab=${LAB_MAC[$g]}/${ADDR[$g]} vmlab.mgmt=${MGMT_MAC[$g]}" \
        -drive "file=$image/disk.img,if=none,id=disk,format=raw,snapshot=on" -device nvme,drive=disk,serial=vmlab \
        -netdev "tap,id=lab,ifname=tap-$g,script=no,downscript=no,vhost=off,queues=$QUEUES" \
        -device "virtio-net-pci,netdev=lab,mac=${LAB_MAC[$g]},mq=on,vectors=$((2 * QUEUES + 2))" \
        -netdev "user,id=mgmt,restrict=on,hostfwd=tcp:127.0.0.1:${SSH_PORT[$g]}-:22" \
        -device "virtio-net-pci,netdev=mgmt,mac=${MGMT_MAC[$g]}" \
        -netdev "tap,id=rss,ifname=tap1-$g,script=no,downscript=no,vhost=off,queues=$RSS_QUEUES" \
        "${numa[@]}" -device "virtio-net-pci,netdev=rss,mac=${RSS_MAC[$g]},mq=on,rss=on,vectors=$((2 * RSS_QUEUES + 2))$rss_bus" \
        -serial "file:$RUN/console-$g.log" \
        -daemonize -pidfile "$RUN/qemu-$g.pid" 2>"$RUN/qemu-$g.err" ||
        die "QEMU for guest $g did not start: $(head -c 400 "$RUN/qemu-$g.err")"
}

write_ssh_config() {
    local image=$1 g
    install -m 0600 "$image/id_ed25519" "$RUN/id_ed25519"
    : >"$RUN/ssh_config"
    for g in "${GUESTS[@]}"; do
        cat >>"$RUN/ssh_config" <<EOF
Host $g
    HostName 127.0.0.1
    Port ${SSH_PORT[$g]}
EOF
    done
    cat >>"$RUN/ssh_config" <<EOF
Host *
    User root
    IdentityFile $RUN/id_ed25519
    IdentitiesOnly yes
    BatchMode yes
    StrictHostKeyChecking no
    UserKnownHostsFile /dev/null
    LogLevel ERROR
    ConnectTimeout 10
    ServerAliveInterval 10
    ServerAliveCountMax 6
    ControlMaster no
    ControlPath $RUN/ssh-%n
EOF
}

guest_ssh() {
    in_ns ssh -F "$RUN/ssh_config" "$@"
}

# Waits for sshd in guest NAME and leaves one master connection (-M) that every later ssh to
# it shares: one key exchange under emulation, not one per command.
# A guest that dies while booting under TCG is booted once more: QEMU 7.2's TCG can leave a
# stale int3 where the kernel patches its own text early in boot (seen once, in
# sched_clock_cpu, 3.9 s into guest b's boot: "Oops: int3", then a panic), and the next boot from
# the same pristine image goes through. A second death, or one under KVM, is an error.
wait_ssh() {
    local g=$1 deadline=$(($(date +%s) + BOOT_DEADLINE)) retried=0
    until guest_ssh -o ConnectTimeout=5 -fNM "$g" </dev/null >/dev/null 2>&1; do
        if ! kill -0 "$(cat "$RUN/qemu-$g.pid" 2>/dev/null)" 2>/dev/null; then
            tail -n 20 "$RUN/console-$g.log" >&2
            if [ "$retried" = 1 ] || [ "$(cat "$RUN/accel")" != tcg ]; then
                die "guest $g stopped while booting"
            fi
            echo "$PROG: guest $g stopped while booting (console above); booting it once more" >&2
            mv "$RUN/console-$g.log" "$RUN/console-$g.first-boot.log"
            in_ns ip link del "tap-$g" 2>/dev/null || true
            in_ns ip link del "tap1-$g" 2>/dev/null || true
            start_guest "$g" "$image" tcg
            retried=1
            deadline=$(($(date +%s) + BOOT_DEADLINE))
        fi
        if [ "$(date +%s)" -ge "$deadline" ]; then
            tail -n 20 "$RUN/console-$g.log" >&2
            die "guest $g: no ssh within ${BOOT_DEADLINE} s (console: $RUN/console-$g.log)"
        fi
        sleep 2
    done
}

# Names guest NAME's RSS NIC lab1 (by its MAC), addresses it, sets its key, and only then
# brings its tap up: QEMU's software RSS parks a packet whose target queue has no buffers on
# the tap queue it arrived from, and that tap queue then waits for a refill of its own queue
# that may never come (at boot: the ring of a queue the guest has not filled yet), so lab1
# sees no packet before the guest's rings are full.
rss_link_up() {
    local g=$1 key
    key=$(printf "$RSS_KEY_BYTE:%.0s" $(seq 39))$RSS_KEY_BYTE
    guest_ssh "$g" "set -e; for d in /sys/class/net/*; do [ \"\$(cat \$d/address)\" = ${RSS_MAC[$g]} ] && dev=\${d##*/}; done
        [ -n \"\${dev:-}\" ] || { echo 'no NIC with MAC ${RSS_MAC[$g]}' >&2; exit 1; }
        [ \$dev = lab1 ] || ip link set dev \$dev name lab1
        ip addr replace ${RSS_ADDR[$g]}/24 dev lab1
        ip link set dev lab1 up
        ethtool -X lab1 hkey $key" || die "guest $g: setting up lab1 failed"
    in_ns ip link set dev "tap1-$g" up
}

# Provisions guest NAME the way the Vagrantfile does: this checkout (tracked files, local
# changes included) at /vagrant as Vagrant shares it, the package where the Vagrantfile's
# guest a leaves it for b, and then b runs the Vagrantfile's own provisioner line for b
# (read by scripts/lib/vagrant-provisioners.rb); a installs the same package without the
# service (a's Vagrantfile line builds from source, which emulated CPUs cannot do in time).
provision_guest() {
    local g=$1 deb=$2 line
    guest_ssh "$g" 'rm -rf /vagrant && mkdir -p /vagrant/target/vagrant-deb'
    git ls-files -z | tar --null -T - -cf - | guest_ssh "$g" 'tar -C /vagrant -xf -'
    guest_ssh "$g" "cat >/vagrant/target/vagrant-deb/${deb##*/}" <"$deb"
    if [ "$g" = b ]; then
        line=$(ruby scripts/lib/vagrant-provisioners.rb Vagrantfile | awk -F '\t' '$1 == "b" { print $2 }')
        [ -n "$line" ] || die "the Vagrantfile has no provisioner for b"
    else
        line="bash scripts/provision.sh --deb /vagrant/target/vagrant-deb"
    fi
    guest_ssh "$g" "cd /vagrant && $line" >"$RUN/provision-$g.log" 2>&1 ||
        { tail -n 20 "$RUN/provision-$g.log" >&2; die "guest $g: provisioning failed: $line (log: $RUN/provision-$g.log)"; }
    echo "$PROG: guest $g provisioned: $line" >&2
}

# The newest package cargo-deb built for the version in Cargo.toml.
find_deb() {
    local version
    version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
    # shellcheck disable=SC2012 # names are uringbench_VERSION_amd64.deb: no odd characters
    ls -t "${CARGO_TARGET_DIR:-target}"/debian/uringbench_"${version}"_amd64.deb 2>/dev/null | head -n 1
}

cmd_up() {
    [ "$(id -u)" = 0 ] || die "needs root (network namespace, taps)"
    command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 missing (scripts/install-deps.sh --lab)"
    lab_is_up && { echo "$PROG: the lab is already up (scripts/vmlab.sh down first)" >&2; return 0; }
    cmd_down 2>/dev/null || true
    local image accel start g deb t0
    t0=$(date +%s)
    image=$(vmlab_image)
    deb=$(find_deb)
    [ -n "$deb" ] || die "no ${CARGO_TARGET_DIR:-target}/debian/uringbench_*_amd64.deb for this version (cargo deb -p uringbench-cli)"
    command -v ruby >/dev/null || die "ruby missing: it reads the Vagrantfile's provisioners (scripts/install-deps.sh --lab)"
    mkdir -p "$RUN"
    rm -f "$RUN"/*
    echo "image $(($(date +%s) - t0))" >"$RUN/timings"
    accel=$(choose_accel "$image")
    echo "$accel" >"$RUN/accel"
    ip netns add "$NETNS"
    in_ns ip link set dev lo up
    in_ns ip link add br0 type bridge
    in_ns ip link set dev br0 up
    in_ns ip link add br1 type bridge
    in_ns ip link set dev br1 up
    write_ssh_config "$image"
    start=$(date +%s.%N)
    for g in "${GUESTS[@]}"; do
        start_guest "$g" "$image" "$accel"
    done
    # However `down` is (not) called: the guests and the namespace go after LIFETIME seconds.
    setsid bash -c 'sleep "$1"; exec "$2" down' vmlab-watchdog "$LIFETIME" "$PWD/scripts/vmlab.sh" \
        </dev/null >/dev/null 2>&1 &
    echo $! >"$RUN/watchdog.pid"
    for g in "${GUESTS[@]}"; do
        wait_ssh "$g"
    done
    local boot
    boot=$(awk -v a="$(date +%s.%N)" -v b="$start" 'BEGIN { printf "%.1f", a - b }')
    echo "$boot" >"$RUN/boot_seconds"
    for g in "${GUESTS[@]}"; do
        rss_link_up "$g"
    done
    echo "$PROG: guests a and b up in $boot s under ${accel^^} ($(cat "$image/kernel"); $(guest_ssh a systemd-analyze 2>/dev/null | head -n 1 || echo 'no systemd-analyze'))" >&2
    t0=$(date +%s)
    # Both guests at once: each waits mostly on its own emulated CPUs.
    local pids=() failed=0 pid
    for g in "${GUESTS[@]}"; do
        provision_guest "$g" "$deb" &
        pids+=($!)
    done
    for pid in "${pids[@]}"; do
        wait "$pid" || failed=1
    done
    [ "$failed" = 0 ] || die "provisioning failed (logs: $RUN/provision-*.log)"
    echo "boot $boot" >>"$RUN/timings"
    echo "provision $(($(date +%s) - t0))" >>"$RUN/timings"
    guest_ssh a "ping -c 1 -W 5 ${ADDR[b]}" >/dev/null || die "guest a cannot reach guest b over lab0"
    guest_ssh a "ping -c 1 -W 5 ${RSS_ADDR[b]}" >/dev/null || die "guest a cannot reach guest b over lab1"
    echo "$PROG: lab up: a ${ADDR[a]}, b ${ADDR[b]} on lab0 (virtio_net, $QUEUES queue pairs); a ${RSS_ADDR[a]}, b ${RSS_ADDR[b]} on lab1 ($RSS_QUEUES queue pairs, RSS); scripts/vmlab.sh ssh a|b CMD" >&2
}

cmd_down() {
    local g pid
    if [ -s "$RUN/watchdog.pid" ]; then
        pid=$(cat "$RUN/watchdog.pid")
        # Only our watchdog (its command line names it), never a recycled pid.
        if [ "$pid" != "$$" ] && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q vmlab-watchdog; then
            kill -- -"$pid" 2>/dev/null || true
        fi
        rm -f "$RUN/watchdog.pid"
    fi
    for g in "${GUESTS[@]}"; do
        [ -s "$RUN/qemu-$g.pid" ] || continue
        pid=$(cat "$RUN/qemu-$g.pid")
        if [ "$(ps -o comm= -p "$pid" 2>/dev/null)" = qemu-system-x86 ]; then
            kill "$pid" 2>/dev/null || true
            for _ in $(seq 50); do
                kill -0 "$pid" 2>/dev/null || break
                sleep 0.1
            done
            kill -9 "$pid" 2>/dev/null || true
        fi
        rm -f "$RUN/qemu-$g.pid"
    done
    rm -f "$RUN"/ssh-*
    if ip netns list | grep -qw "$NETNS"; then
        ip netns delete "$NETNS"
    fi
}

cmd_run() {
    local start status=0 log
    start=$(date +%s)
    # One lab per machine: a second run (another checkout) waits for this one.
    exec 9>/run/lock/uringbench-vmlab.lock
    flock -w 1800 9 || die "another scripts/vmlab.sh run held the lab for 30 minutes"
    scripts/install-deps.sh --lab --quiet
    # The package the guests are provisioned with (it builds the release binary too).
    cargo deb -q -p uringbench-cli >/dev/null
    echo "$PROG: package built in $(($(date +%s) - start)) s" >&2
    trap 'cmd_down' EXIT
    trap 'exit 130' INT TERM
    # A lab left up by `up` has an older provisioning: start afresh.
    cmd_down
    cmd_up
    local t0 accel
    t0=$(date +%s)
    accel=$(cat "$RUN/accel")
    log="$RUN/tests.log"
    URINGBENCH_VMLAB="$PWD/scripts/vmlab.sh" URINGBENCH_VMLAB_REQUIRED=1 \
        timeout 900 cargo test -q -p uringbench-cli --test vmlab -- --test-threads=1 2>&1 | tee "$log" || status=$?
    [ "$status" = 0 ] && grep -q '^test result: ok\.' "$log" || status=1
    echo "$PROG: lab tests $([ "$status" = 0 ] && echo passed || echo FAILED) under ${accel^^}; seconds: $(tr '\n' ' ' <"$RUN/timings")tests $(($(date +%s) - t0)), all $(($(date +%s) - start))" >&2
    return "$status"
}

case "${1:-}" in
    up) cmd_up ;;
    down) cmd_down ;;
    run) cmd_run ;;
    image) vmlab_image ;;
    ssh)
        shift
        [ $# -ge 1 ] || usage "ssh needs a guest name (a or b)"
        [[ " ${GUESTS[*]} " == *" $1 "* ]] || usage "no guest '$1' (a or b)"
        lab_is_up || die "the lab is not up (scripts/vmlab.sh up)"
        # exec: a timeout or kill aimed at this script reaches ssh itself.
        exec ip netns exec "$NETNS" ssh -F "$RUN/ssh_config" "$@"
        ;;
    status)
        if lab_is_up; then
            echo "up: $(cat "$RUN/accel"), booted in $(cat "$RUN/boot_seconds") s"
        else
            echo "down"
            exit 1
        fi
        ;;
    -h | --help) sed -n '2,/^$/s/^# \{0,1\}//p' "$0"; exit 0 ;;
    "") usage "no command (up, run, ssh, status, down, image)" ;;
    *) usage "unknown command '$1'" ;;
esac
