#!/usr/bin/env bash
# ansible-venv.sh: ansible-core, pinned, in a virtual environment under a cache folder, for
# the playbooks in deploy/ansible and scripts/fleet-lab.sh.
#
#   scripts/ansible-venv.sh [--dir DIR] [--lint] [--print]
#
# Creates DIR (default /var/cache/uringbench/ansible-venv, or $URINGBENCH_ANSIBLE_VENV) with
# python3 -m venv and installs ansible-core ANSIBLE_CORE_VERSION from PyPI into it, unless that
# version is already there; with --lint also ansible-lint ANSIBLE_LINT_VERSION (for CI).
# Prints the venv's bin folder as its last line (put it first in PATH). --print only prints
# it, and exits 1 when the venv is missing or holds another version. Needs python3-venv
# (scripts/install-deps.sh --fleet).
set -euo pipefail
prog=${0##*/}

# The version every playbook is checked against (CI and the fleet tests use this one).
ANSIBLE_CORE_VERSION=2.18.12
ANSIBLE_LINT_VERSION=24.12.2

dir=${URINGBENCH_ANSIBLE_VENV:-/var/cache/uringbench/ansible-venv}
print_only=0
lint=0
while [ $# -gt 0 ]; do
    case "$1" in
        --dir) [ $# -ge 2 ] || { echo "$prog: --dir needs a value" >&2; exit 2; }; dir=$2; shift ;;
        --print) print_only=1 ;;
        --lint) lint=1 ;;
        -h | --help) sed -n '2,/^$/s/^# \{0,1\}//p' "$0"; exit 0 ;;
        *) echo "$prog: unknown argument '$1' (see $prog --help)" >&2; exit 2 ;;
    esac
    shift
done

version_of() {
    "$dir/bin/python" -c "import importlib.metadata as m; print(m.version('$1'))" 2>/dev/null || true
}

have_version() {
    [ -x "$dir/bin/python" ] && [ -x "$dir/bin/ansible-playbook" ] &&
        [ "$(version_of ansible-core)" = "$ANSIBLE_CORE_VERSION" ] &&
        { [ "$lint" = 0 ] || [ "$(version_of ansible-lint)" = "$ANSIBLE_LINT_VERSION" ]; }
}

if have_version; then
    echo "$dir/bin"
    exit 0
fi
if [ "$print_only" = 1 ]; then
    echo "$prog: no ansible-core $ANSIBLE_CORE_VERSION in $dir (run $prog without --print)" >&2
    exit 1
fi
command -v python3 >/dev/null || { echo "$prog: python3 is missing (scripts/install-deps.sh --fleet)" >&2; exit 1; }
mkdir -p "$(dirname "$dir")"
if ! [ -x "$dir/bin/pip" ]; then
    python3 -m venv "$dir" || { echo "$prog: python3 -m venv failed (scripts/install-deps.sh --fleet installs python3-venv)" >&2; exit 1; }
fi
wanted=("ansible-core==$ANSIBLE_CORE_VERSION")
[ "$lint" = 0 ] || wanted+=("ansible-lint==$ANSIBLE_LINT_VERSION")
echo "$prog: installing ${wanted[*]} into $dir" >&2
"$dir/bin/pip" install --quiet --disable-pip-version-check "${wanted[@]}" >&2
have_version || { echo "$prog: ${wanted[*]} did not install into $dir" >&2; exit 1; }
echo "$dir/bin"
