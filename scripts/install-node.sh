#!/usr/bin/env bash
# Install kata-mem on a node, in the layout docs/guide/install.md describes: a virtualenv
# under /opt/kata-mem, its two commands on PATH as /usr/local/bin/kata-mem and kata-mem-shim
# (links into it), and configs/systemd's units in /etc/systemd/system, their ExecStart the
# first link. Debian 12 refuses `pip install` into the system Python (PEP 668, "externally
# managed"); a virtualenv of its own is what it asks for.
#
#   scripts/install-node.sh [SOURCE]
#
# SOURCE: a wheel (kata_mem-*.whl) or a checkout (default: the one this script is in).
# Environment: PREFIX (/opt/kata-mem), BIN_DIR (/usr/local/bin), UNIT_DIR
# (/etc/systemd/system; "-" installs no units), EXTRAS (e.g. libvirt), PYTHON (python3).
# Run again with a newer SOURCE to upgrade in place. Starts nothing: it prints the
# systemctl commands. Needs python3-venv (Debian) and PyPI for the dependencies, and, for the
# units, configs/systemd/ beside scripts/ (a checkout's layout: copy both with a wheel).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source=${1:-$root}
prefix=${PREFIX:-/opt/kata-mem}
bin_dir=${BIN_DIR:-/usr/local/bin}
unit_dir=${UNIT_DIR:-/etc/systemd/system}
py=${PYTHON:-python3}
log() { printf 'install-node: %s\n' "$*" >&2; }
units=$root/configs/systemd

# A SOURCE that is not there (a mistyped wheel path) stops everything before anything is made:
# pip would fail only after the virtualenv was, and the uninstall leaves one without kata-mem.
if [ ! -e "$source" ]; then
    log "no $source: expected a kata_mem-*.whl file or a kata-mem checkout; nothing was installed"
    exit 1
fi

# The units come from beside this script (a checkout's layout), not from the wheel: without
# them, stop before anything is made.
if [ "$unit_dir" != - ]; then
    for unit in kata-mem.socket kata-mem.service; do
        if [ ! -f "$units/$unit" ]; then
            log "no $units/$unit: copy configs/systemd/ beside scripts/ as a checkout has them, or install no units (UNIT_DIR=-); nothing was installed"
            exit 1
        fi
    done
fi

if [ ! -x "$prefix/bin/python" ]; then
    if ! "$py" -m venv "$prefix"; then
        log "'$py -m venv $prefix' failed (on Debian: apt-get install python3-venv)"
        exit 1
    fi
fi
spec=$source
if [ -n "${EXTRAS:-}" ]; then
    spec="$source[$EXTRAS]"
fi
"$prefix/bin/python" -m pip install -q --disable-pip-version-check --upgrade "$spec" >&2
mkdir -p "$bin_dir"
# kata-mem-shim is what a runtime's shim runs (docs/guide/shim.md): on PATH beside kata-mem.
for command in kata-mem kata-mem-shim; do
    ln -sfn "$prefix/bin/$command" "$bin_dir/$command"
done
log "installed $("$bin_dir/kata-mem" --version) in $prefix; $bin_dir/kata-mem and" \
    "$bin_dir/kata-mem-shim link to it"
if [ "$unit_dir" != - ]; then
    mkdir -p "$unit_dir"
    for unit in kata-mem.socket kata-mem.service; do
        # The shipped units run /usr/local/bin/kata-mem: BIN_DIR's link where it differs.
        if ! sed "s#/usr/local/bin/kata-mem#$bin_dir/kata-mem#g" "$units/$unit" \
            >"$unit_dir/$unit.tmp"; then
            rm -f "$unit_dir/$unit.tmp"
            exit 1
        fi
        chmod 0644 "$unit_dir/$unit.tmp"
        mv "$unit_dir/$unit.tmp" "$unit_dir/$unit"
    done
    log "units in $unit_dir: systemctl daemon-reload && systemctl enable --now kata-mem.socket"
fi
