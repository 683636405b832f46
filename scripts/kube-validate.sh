#!/usr/bin/env bash
# kube-validate.sh: checks deploy/kubernetes/*.yaml against the Kubernetes API schemas,
# offline, with kubernetes-validate (pinned, from PyPI, in a virtual environment under a cache
# folder; its schemas ship inside the package).
#
#   scripts/kube-validate.sh [--dir DIR] [--install-only]
#
# Creates DIR (default /var/cache/uringbench/kube-validate-venv, or
# $URINGBENCH_KUBE_VALIDATE_VENV) and installs kubernetes-validate KUBERNETES_VALIDATE_VERSION
# into it unless that version is there, then validates every manifest (strict: an unknown
# field fails) against Kubernetes KUBERNETES_VERSION, and round.yaml once more with its
# two-zone anti-affinity (docs/kubernetes.md). As root the validation runs in a network
# namespace of its own with no interfaces, which proves it needs no network. Needs
# python3-venv (scripts/install-deps.sh --fleet).
set -euo pipefail
prog=${0##*/}
cd "$(dirname "$0")/.."

KUBERNETES_VALIDATE_VERSION=1.34.1
# The oldest Kubernetes the round's anti-affinity (matchLabelKeys) works on by default.
KUBERNETES_VERSION=1.31.0

dir=${URINGBENCH_KUBE_VALIDATE_VENV:-/var/cache/uringbench/kube-validate-venv}
install_only=0
while [ $# -gt 0 ]; do
    case "$1" in
        --dir) [ $# -ge 2 ] || { echo "$prog: --dir needs a value" >&2; exit 2; }; dir=$2; shift ;;
        --install-only) install_only=1 ;;
        -h | --help) sed -n '2,/^$/s/^# \{0,1\}//p' "$0"; exit 0 ;;
        *) echo "$prog: unknown argument '$1' (see $prog --help)" >&2; exit 2 ;;
    esac
    shift
done

installed() {
    [ -x "$dir/bin/kubernetes-validate" ] &&
        [ "$("$dir/bin/python" -c "import importlib.metadata as m; print(m.version('kubernetes-validate'))" 2>/dev/null)" = "$KUBERNETES_VALIDATE_VERSION" ]
}
if ! installed; then
    command -v python3 >/dev/null || { echo "$prog: python3 is missing (scripts/install-deps.sh --fleet)" >&2; exit 1; }
    mkdir -p "$(dirname "$dir")"
    [ -x "$dir/bin/pip" ] || python3 -m venv "$dir" ||
        { echo "$prog: python3 -m venv failed (scripts/install-deps.sh --fleet installs python3-venv)" >&2; exit 1; }
    echo "$prog: installing kubernetes-validate==$KUBERNETES_VALIDATE_VERSION into $dir" >&2
    "$dir/bin/pip" install --quiet --disable-pip-version-check "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION" >&2
    installed || { echo "$prog: kubernetes-validate did not install into $dir" >&2; exit 1; }
fi
[ "$install_only" = 0 ] || exit 0

zones=$(mktemp --suffix=.yaml)
trap 'rm -f "$zones"' EXIT
sed 's|topologyKey: kubernetes.io/hostname|topologyKey: topology.kubernetes.io/zone|' deploy/kubernetes/round.yaml >"$zones"
grep -q 'topology.kubernetes.io/zone' "$zones" || { echo "$prog: round.yaml has no hostname anti-affinity to turn into zones" >&2; exit 1; }
offline=()
if [ "$(id -u)" = 0 ] && unshare --net true 2>/dev/null; then
    offline=(unshare --net)
fi
"${offline[@]}" "$dir/bin/kubernetes-validate" -k "$KUBERNETES_VERSION" --strict --quiet deploy/kubernetes/*.yaml "$zones"
echo "$prog: deploy/kubernetes/*.yaml and round.yaml with two zones valid against Kubernetes $KUBERNETES_VERSION${offline:+ (offline)}"
