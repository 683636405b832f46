#!/usr/bin/env bash
# aws-ena.sh: two EC2 instances with ENA in a cluster placement group, a uringbench run
# between them, the JSON collected locally, everything deleted afterwards.
#
#   scripts/aws-ena.sh [--region R] [--instance-type T] [--prefix NAME]
#                      [--queues N] [--time 30s] [--sweep 1,2,4,8,16,32] [--repeat 3]
#                      [--out DIR] [--keep]
#
# What it creates (names start with --prefix, default "uringbench"), in the region's default
# VPC: a cluster placement group (a flow gets 10 Gbit/s inside one, 5 outside), a security
# group (all traffic between its members, SSH from this machine's public address only), an
# ed25519 key pair, and two Debian 12 instances of --instance-type (default c6in.16xlarge:
# ENA, 100 Gbit/s). It builds uringbench on both from this checkout, applies
# scripts/tune.sh, runs `doctor`, `send` with --queues flows (one flow alone cannot pass
# the per-flow cap) and a `sweep` over queue counts to b's *private* address, and keeps
# ENA's bw_in/out_allowance_exceeded and pps_allowance_exceeded counters from before and
# after, which show when the instance's own allowance, not the tool, was the limit.
# An EXIT trap deletes what was created (also after a failure or Ctrl-C) unless --keep.
#
# Needs: aws CLI v2 (credentials with EC2 rights), ssh, curl, git. Costs money while it runs.

set -euo pipefail

PROG=${0##*/}
# shellcheck source=scripts/lib/recipe.sh
source "$(dirname "$0")/lib/recipe.sh"

REGION=${AWS_REGION:-us-east-1}
INSTANCE_TYPE=c6in.16xlarge
PREFIX=uringbench
QUEUES=16
TEST_TIME=30s
SWEEP_QUEUES=1,2,4,8,16,32
SWEEP_REPEAT=3
RESULTS=""
KEEP=0

RECIPE_OPTIONS="--region --instance-type"
recipe_option() {
    case "$1" in
        --region) REGION=$2 ;;
        --instance-type) INSTANCE_TYPE=$2 ;;
    esac
}
recipe_parse_args "$@"

[[ "$PREFIX" =~ ^[A-Za-z][A-Za-z0-9-]{0,40}$ ]] || { echo "$PROG: bad --prefix" >&2; exit 2; }
command -v aws >/dev/null || die "aws CLI not found"
RESULTS=${RESULTS:-results/aws-ena-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$RESULTS"
IFACE_HINT='allowance_exceeded|conntrack_allowance'
AWS=(aws --region "$REGION" --output text)
PG=$PREFIX-pg
KEY=$PREFIX-key
KEY_FILE=$RESULTS/$KEY.pem
KNOWN_HOSTS=$RESULTS/known_hosts
SG_ID=""
IDS=()
CREATED=()

cleanup() {
    local rc=$?
    if [ "$KEEP" = 1 ]; then
        log "--keep: leaving instances ${IDS[*]:-none}, security group ${SG_ID:-none}, placement group $PG and key pair $KEY in $REGION"
        exit "$rc"
    fi
    local i item
    for ((i = ${#CREATED[@]} - 1; i >= 0; i--)); do
        item=${CREATED[$i]}
        log "deleting $item"
        case "$item" in
            instances)
                if [ "${#IDS[@]}" -gt 0 ]; then
                    "${AWS[@]}" ec2 terminate-instances --instance-ids "${IDS[@]}" >/dev/null || true
                    "${AWS[@]}" ec2 wait instance-terminated --instance-ids "${IDS[@]}" || true
                fi
                ;;
            sg) "${AWS[@]}" ec2 delete-security-group --group-id "$SG_ID" || true ;;
            pg) "${AWS[@]}" ec2 delete-placement-group --group-name "$PG" || true ;;
            key) "${AWS[@]}" ec2 delete-key-pair --key-name "$KEY" || true; rm -f "$KEY_FILE" ;;
        esac
    done
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

AMI=$("${AWS[@]}" ssm get-parameter --name /aws/service/debian/release/12/latest/amd64 --query Parameter.Value)
VPC=$("${AWS[@]}" ec2 describe-vpcs --filters Name=isDefault,Values=true --query 'Vpcs[0].VpcId')
[ "$VPC" != None ] || die "no default VPC in $REGION"
read -r SUBNET AZ < <("${AWS[@]}" ec2 describe-subnets --filters "Name=vpc-id,Values=$VPC" Name=default-for-az,Values=true \
    --query 'Subnets[0].[SubnetId,AvailabilityZone]')
MY_IP=$(curl -sSf https://checkip.amazonaws.com | tr -d '[:space:]')
log "region $REGION ($AZ), 2 x $INSTANCE_TYPE, Debian 12 ($AMI), cluster placement group"

"${AWS[@]}" ec2 create-key-pair --key-name "$KEY" --key-type ed25519 --query KeyMaterial >"$KEY_FILE"
CREATED+=(key)
chmod 600 "$KEY_FILE"
"${AWS[@]}" ec2 create-placement-group --group-name "$PG" --strategy cluster
CREATED+=(pg)
SG_ID=$("${AWS[@]}" ec2 create-security-group --group-name "$PREFIX-sg" --description "uringbench test pair" \
    --vpc-id "$VPC" --query GroupId)
CREATED+=(sg)
"${AWS[@]}" ec2 authorize-security-group-ingress --group-id "$SG_ID" --protocol tcp --port 22 --cidr "$MY_IP/32" >/dev/null
"${AWS[@]}" ec2 authorize-security-group-ingress --group-id "$SG_ID" --protocol -1 --source-group "$SG_ID" >/dev/null
CREATED+=(instances)
read -r -a IDS < <("${AWS[@]}" ec2 run-instances --count 2 --image-id "$AMI" --instance-type "$INSTANCE_TYPE" \
    --key-name "$KEY" --security-group-ids "$SG_ID" --subnet-id "$SUBNET" --placement "GroupName=$PG" \
    --block-device-mappings 'DeviceName=/dev/xvda,Ebs={VolumeSize=50}' \
    --tag-specifications "ResourceType=instance,Tags=[{Key=Name,Value=$PREFIX}]" \
    --query 'Instances[].InstanceId' | tr '\t' ' ')
[ "${#IDS[@]}" = 2 ] || die "expected 2 instances, got: ${IDS[*]}"
"${AWS[@]}" ec2 wait instance-running --instance-ids "${IDS[@]}"
addr() { "${AWS[@]}" ec2 describe-instances --instance-ids "$1" --query "Reservations[0].Instances[0].$2"; }
PUB_A=$(addr "${IDS[0]}" PublicIpAddress)
PUB_B=$(addr "${IDS[1]}" PublicIpAddress)
TARGET_IP=$(addr "${IDS[1]}" PrivateIpAddress)
log "a ${IDS[0]} ($PUB_A), b ${IDS[1]} ($PUB_B, private $TARGET_IP)"

SSH=(ssh -i "$KEY_FILE" -o StrictHostKeyChecking=accept-new -o "UserKnownHostsFile=$KNOWN_HOSTS" -o ConnectTimeout=10)
SCP=(scp -q -i "$KEY_FILE" -o StrictHostKeyChecking=accept-new -o "UserKnownHostsFile=$KNOWN_HOSTS")
vm_addr() { if [ "$1" = a ]; then echo "$PUB_A"; else echo "$PUB_B"; fi; }
on_vm() {
    local vm=$1
    shift
    "${SSH[@]}" "admin@$(vm_addr "$vm")" "$*"
}
put_file() { "${SCP[@]}" "$2" "admin@$(vm_addr "$1"):$3"; }
get_file() { "${SCP[@]}" "admin@$(vm_addr "$1"):$2" "$3"; }

recipe_run
