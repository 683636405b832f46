#!/usr/bin/env bash
# collect.sh: a round's results: each sender pod's JSON document (its log) into DIR, as
# round-<index>.json, for `uringbench report` or `report --fleet` (docs/kubernetes.md).
#
#   deploy/kubernetes/collect.sh [--namespace NS] [--job NAME] DIR
set -euo pipefail
prog=${0##*/}
ns=uringbench
job=uringbench-round-send
dir=
while [ $# -gt 0 ]; do
    case "$1" in
        --namespace) [ $# -ge 2 ] || { echo "$prog: --namespace needs a value" >&2; exit 2; }; ns=$2; shift ;;
        --job) [ $# -ge 2 ] || { echo "$prog: --job needs a value" >&2; exit 2; }; job=$2; shift ;;
        -h | --help) sed -n '2,/^$/s/^# \{0,1\}//p' "$0"; exit 0 ;;
        -*) echo "$prog: unknown option '$1'" >&2; exit 2 ;;
        *) dir=$1 ;;
    esac
    shift
done
[ -n "$dir" ] || { echo "$prog: name the folder to write into (see $prog --help)" >&2; exit 2; }
command -v kubectl >/dev/null || { echo "$prog: kubectl is missing" >&2; exit 1; }
mkdir -p "$dir"
pods=$(kubectl -n "$ns" get pods -l "job-name=$job" \
    -o jsonpath='{range .items[*]}{.metadata.labels.batch\.kubernetes\.io/job-completion-index} {.metadata.name}{"\n"}{end}')
[ -n "$pods" ] || { echo "$prog: no pods of job $job in namespace $ns" >&2; exit 1; }
failed=0
while read -r index pod; do
    if kubectl -n "$ns" logs "$pod" -c send >"$dir/round-$index.json.part"; then
        mv "$dir/round-$index.json.part" "$dir/round-$index.json"
        echo "$dir/round-$index.json"
    else
        rm -f "$dir/round-$index.json.part"
        echo "$prog: no log from $pod (index $index)" >&2
        failed=1
    fi
done <<<"$pods"
exit "$failed"
