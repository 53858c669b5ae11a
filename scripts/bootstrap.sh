#!/usr/bin/env bash
# Create the project virtualenv and install kata-mem into it (editable).
#   scripts/bootstrap.sh VENV [EXTRAS]     e.g. scripts/bootstrap.sh .venv test
# Idempotent: re-installs only when pyproject.toml changed since the last run.
set -euo pipefail
venv=${1:-.venv}
extras=${2:-}
root=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-python3}

if ! "$py" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
    echo "bootstrap: $py is missing or older than 3.10" >&2; exit 1
fi
if [ ! -x "$venv/bin/python" ]; then
    if ! "$py" -m venv "$venv" 2>/dev/null; then
        # Debian splits venv (and ensurepip) into python3-venv.
        if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
            echo "bootstrap: installing python3-venv" >&2
            DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 update -qq
            DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends python3-venv >&2
            rm -rf "$venv"; "$py" -m venv "$venv"
        else
            echo "bootstrap: '$py -m venv' failed; install python3-venv" >&2; exit 1
        fi
    fi
fi
spec="$root"
[ -n "$extras" ] && spec="$root[$extras]"
stamp="$venv/.kata-mem-installed-$(sha256sum "$root/pyproject.toml" | cut -c1-16)-${extras:-base}"
if [ ! -f "$stamp" ]; then
    echo "bootstrap: installing kata-mem${extras:+[$extras]} into $venv" >&2
    "$venv/bin/python" -m pip install -q --disable-pip-version-check -e "$spec" >&2
    rm -f "$venv"/.kata-mem-installed-*-"${extras:-base}"
    touch "$stamp"
fi
