#!/usr/bin/env bash
# gcp-tier1.sh: two GCP VMs with Tier_1 networking, a uringbench run between them, the JSON
# collected locally, everything deleted afterwards.
#
#   scripts/gcp-tier1.sh [--project P] [--zone Z] [--machine-type T] [--prefix NAME]
#                        [--queues N] [--time 30s] [--sweep 1,2,4,8,16,32] [--repeat 3]
#                        [--out DIR] [--keep]
#
# What it creates (names start with --prefix, default "uringbench"):
#   - a VPC network with MTU 8896 (the largest GCP allows) and one subnet, 10.77.0.0/24
#   - firewall rules: all TCP/UDP/ICMP inside the subnet; SSH from Google's IAP range only
#   - a compact placement policy, so both VMs sit close together
#   - two n2-standard-64 VMs (Tier_1 needs 30+ vCPUs on N2) with gVNIC and
#     total-egress-bandwidth-tier=TIER_1, Debian 12
# Then it builds uringbench on both from this checkout (git HEAD), applies
# scripts/tune.sh, runs `doctor` on both, `send` with --queues flows and a `sweep` over
# queue counts from a to b's *internal* address, and copies the JSON, CSV and SVG to --out.
# An EXIT trap deletes what was created (also after a failure or Ctrl-C) unless --keep.
#
# Needs: gcloud (authenticated, a project with Compute Engine and quota for 128 N2 vCPUs in
# the region), git. Costs money while it runs: about 2 x n2-standard-64 for ~20 minutes.
# The gcloud calls follow the GCP guides "Configure per VM Tier_1 networking performance"
# and "Maximum transmission unit".

set -euo pipefail

PROG=${0##*/}
# shellcheck source=scripts/lib/recipe.sh
source "$(dirname "$0")/lib/recipe.sh"

PROJECT=""
ZONE=us-central1-a
MACHINE_TYPE=n2-standard-64
PREFIX=uringbench
QUEUES=16
TEST_TIME=30s
SWEEP_QUEUES=1,2,4,8,16,32
SWEEP_REPEAT=3
RESULTS=""
KEEP=0

RECIPE_OPTIONS="--project --zone --machine-type"
recipe_option() {
    case "$1" in
        --project) PROJECT=$2 ;;
        --zone) ZONE=$2 ;;
        --machine-type) MACHINE_TYPE=$2 ;;
    esac
}
recipe_parse_args "$@"

[[ "$PREFIX" =~ ^[a-z][a-z0-9-]{0,40}$ ]] || { echo "$PROG: --prefix must be lowercase letters, digits, '-'" >&2; exit 2; }
command -v gcloud >/dev/null || die "gcloud not found (https://cloud.google.com/sdk)"
[ -n "$PROJECT" ] || PROJECT=$(gcloud config get-value project 2>/dev/null)
[ -n "$PROJECT" ] || die "no project: give --project or run 'gcloud config set project P'"
REGION=${ZONE%-*}
RESULTS=${RESULTS:-results/gcp-tier1-$(date -u +%Y%m%dT%H%M%SZ)}
IFACE_HINT=""

NETWORK=$PREFIX-net
SUBNET=$PREFIX-subnet
FW_INTERNAL=$PREFIX-internal
FW_SSH=$PREFIX-ssh-iap
POLICY=$PREFIX-compact
VM_A=$PREFIX-a
VM_B=$PREFIX-b
GC=(gcloud --project "$PROJECT" --quiet)

# What was created, so that cleanup deletes exactly that, newest first.
CREATED=()

cleanup() {
    local rc=$?
    if [ "$KEEP" = 1 ]; then
        log "--keep: leaving ${CREATED[*]:-nothing} in place (delete with: ${GC[*]} compute instances delete $VM_A $VM_B --zone $ZONE, then the firewall rules, subnet, network and policy)"
        exit "$rc"
    fi
    local i item
    for ((i = ${#CREATED[@]} - 1; i >= 0; i--)); do
        item=${CREATED[$i]}
        log "deleting $item"
        case "$item" in
            instances) "${GC[@]}" compute instances delete "$VM_A" "$VM_B" --zone "$ZONE" || true ;;
            policy) "${GC[@]}" compute resource-policies delete "$POLICY" --region "$REGION" || true ;;
            firewall) "${GC[@]}" compute firewall-rules delete "$FW_INTERNAL" "$FW_SSH" || true ;;
            subnet) "${GC[@]}" compute networks subnets delete "$SUBNET" --region "$REGION" || true ;;
            network) "${GC[@]}" compute networks delete "$NETWORK" || true ;;
        esac
    done
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log "project $PROJECT, zone $ZONE, 2 x $MACHINE_TYPE with gVNIC and Tier_1"
"${GC[@]}" compute networks create "$NETWORK" --subnet-mode=custom --mtu=8896
CREATED+=(network)
"${GC[@]}" compute networks subnets create "$SUBNET" --network "$NETWORK" --region "$REGION" --range 10.77.0.0/24
CREATED+=(subnet)
"${GC[@]}" compute firewall-rules create "$FW_INTERNAL" --network "$NETWORK" --direction INGRESS \
    --allow tcp,udp,icmp --source-ranges 10.77.0.0/24
"${GC[@]}" compute firewall-rules create "$FW_SSH" --network "$NETWORK" --direction INGRESS \
    --allow tcp:22 --source-ranges 35.235.240.0/20
CREATED+=(firewall)
"${GC[@]}" compute resource-policies create group-placement "$POLICY" --region "$REGION" --collocation collocated
CREATED+=(policy)
CREATED+=(instances)
"${GC[@]}" compute instances create "$VM_A" "$VM_B" --zone "$ZONE" \
    --machine-type "$MACHINE_TYPE" \
    --network-interface "nic-type=GVNIC,subnet=$SUBNET" \
    --network-performance-configs total-egress-bandwidth-tier=TIER_1 \
    --resource-policies "$POLICY" --maintenance-policy TERMINATE \
    --image-family debian-12 --image-project debian-cloud --boot-disk-size 50GB

TARGET_IP=$("${GC[@]}" compute instances describe "$VM_B" --zone "$ZONE" --format 'get(networkInterfaces[0].networkIP)')
[ -n "$TARGET_IP" ] || die "could not read $VM_B's internal address"
log "$VM_B internal address $TARGET_IP"

vm_name() { if [ "$1" = a ]; then echo "$VM_A"; else echo "$VM_B"; fi; }
on_vm() {
    local vm=$1
    shift
    "${GC[@]}" compute ssh "$(vm_name "$vm")" --zone "$ZONE" --tunnel-through-iap --command "$*"
}
put_file() { "${GC[@]}" compute scp --zone "$ZONE" --tunnel-through-iap "$2" "$(vm_name "$1"):$3"; }
get_file() { "${GC[@]}" compute scp --zone "$ZONE" --tunnel-through-iap "$(vm_name "$1"):$2" "$3"; }

recipe_run
