#!/usr/bin/env bash
# azure-accelnet.sh: two Azure VMs with accelerated networking in a proximity placement
# group, a uringbench run between them, the JSON collected locally, everything deleted
# afterwards.
#
#   scripts/azure-accelnet.sh [--location L] [--size S] [--prefix NAME]
#                             [--queues N] [--time 30s] [--sweep 1,2,4,8,16,32] [--repeat 3]
#                             [--out DIR] [--keep]
#
# Everything lives in one new resource group (--prefix plus a timestamp): a proximity
# placement group, a virtual network 10.77.0.0/24, a network security group allowing SSH
# from this machine's public address only (traffic inside the virtual network is allowed by
# Azure's default rules), and two Debian 12 VMs of --size (default Standard_D64s_v5) with
# --accelerated-networking true: the synthetic hv_netvsc NIC then gets an SR-IOV VF
# (mlx5_core or mana), which `doctor` reports as cloud.nic. Azure meters egress per VM
# size; accelerated networking cuts latency and CPU per packet but does not lift that cap.
# It builds uringbench on both from this checkout, applies scripts/tune.sh, runs
# `doctor`, `send` and a `sweep` over queue counts to b's *private* address, and copies
# the results to --out. An EXIT trap deletes the resource group unless --keep.
#
# Needs: az CLI (logged in, a subscription with quota for 128 Dsv5 vCPUs), ssh, curl, git.
# Costs money while it runs.

set -euo pipefail

PROG=${0##*/}
# shellcheck source=scripts/lib/recipe.sh
source "$(dirname "$0")/lib/recipe.sh"

LOCATION=eastus
SIZE=Standard_D64s_v5
PREFIX=uringbench
QUEUES=16
TEST_TIME=30s
SWEEP_QUEUES=1,2,4,8,16,32
SWEEP_REPEAT=3
RESULTS=""
KEEP=0

RECIPE_OPTIONS="--location --size"
recipe_option() {
    case "$1" in
        --location) LOCATION=$2 ;;
        --size) SIZE=$2 ;;
    esac
}
recipe_parse_args "$@"

[[ "$PREFIX" =~ ^[A-Za-z][A-Za-z0-9-]{0,40}$ ]] || { echo "$PROG: bad --prefix" >&2; exit 2; }
command -v az >/dev/null || die "az CLI not found"
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
RESULTS=${RESULTS:-results/azure-accelnet-$STAMP}
mkdir -p "$RESULTS"
IFACE_HINT=""
RG=$PREFIX-$STAMP
RG_CREATED=0
ADMIN=azureuser
KEY_FILE=$RESULTS/id_ed25519
KNOWN_HOSTS=$RESULTS/known_hosts

cleanup() {
    local rc=$?
    if [ "$RG_CREATED" = 1 ]; then
        if [ "$KEEP" = 1 ]; then
            log "--keep: leaving resource group $RG (delete with: az group delete -n $RG --yes)"
        else
            log "deleting resource group $RG"
            az group delete --name "$RG" --yes || log "could not delete $RG: delete it by hand"
        fi
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

MY_IP=$(curl -sSf https://api.ipify.org | tr -d '[:space:]')
ssh-keygen -q -t ed25519 -N '' -f "$KEY_FILE"
log "location $LOCATION, 2 x $SIZE with accelerated networking, resource group $RG"

az group create --name "$RG" --location "$LOCATION" --output none
RG_CREATED=1
az ppg create --resource-group "$RG" --name "$PREFIX-ppg" --location "$LOCATION" --type Standard --output none
az network vnet create --resource-group "$RG" --name "$PREFIX-vnet" --address-prefix 10.77.0.0/24 \
    --subnet-name default --subnet-prefix 10.77.0.0/24 --output none
az network nsg create --resource-group "$RG" --name "$PREFIX-nsg" --output none
az network nsg rule create --resource-group "$RG" --nsg-name "$PREFIX-nsg" --name ssh-from-here --priority 100 \
    --direction Inbound --access Allow --protocol Tcp --destination-port-ranges 22 \
    --source-address-prefixes "$MY_IP/32" --output none
for vm in a b; do
    az vm create --resource-group "$RG" --name "$PREFIX-$vm" --location "$LOCATION" --size "$SIZE" \
        --image Debian:debian-12:12-gen2:latest --admin-username "$ADMIN" --ssh-key-values "$KEY_FILE.pub" \
        --vnet-name "$PREFIX-vnet" --subnet default --nsg "$PREFIX-nsg" --ppg "$PREFIX-ppg" \
        --accelerated-networking true --public-ip-sku Standard --os-disk-size-gb 50 --output none
done
ip_of() { az vm show --show-details --resource-group "$RG" --name "$PREFIX-$1" --query "$2" --output tsv; }
PUB_A=$(ip_of a publicIps)
PUB_B=$(ip_of b publicIps)
TARGET_IP=$(ip_of b privateIps)
log "a $PUB_A, b $PUB_B (private $TARGET_IP)"

SSH=(ssh -i "$KEY_FILE" -o StrictHostKeyChecking=accept-new -o "UserKnownHostsFile=$KNOWN_HOSTS" -o ConnectTimeout=10)
SCP=(scp -q -i "$KEY_FILE" -o StrictHostKeyChecking=accept-new -o "UserKnownHostsFile=$KNOWN_HOSTS")
vm_addr() { if [ "$1" = a ]; then echo "$PUB_A"; else echo "$PUB_B"; fi; }
on_vm() {
    local vm=$1
    shift
    "${SSH[@]}" "$ADMIN@$(vm_addr "$vm")" "$*"
}
put_file() { "${SCP[@]}" "$2" "$ADMIN@$(vm_addr "$1"):$3"; }
get_file() { "${SCP[@]}" "$ADMIN@$(vm_addr "$1"):$2" "$3"; }

recipe_run
