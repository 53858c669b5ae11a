#!/usr/bin/env bash
# Remove the node install of scripts/install-node.sh (docs/guide/install.md, "Upgrade and
# uninstall"): the units, the links on PATH (kata-mem, kata-mem-shim) and the virtualenv, each
# only when it is what the install made (a unit naming BIN_DIR/kata-mem, a link into PREFIX, a
# virtualenv holding kata-mem). Kata's VMs keep their current memory; the state directory
# (/run/kata-mem, a tmpfs) is left for `rm -rf` by hand once no sandbox needs it.
#
#   scripts/uninstall-node.sh
#
# Environment: PREFIX, BIN_DIR, UNIT_DIR as for install-node.sh; SYSTEMCTL (systemctl;
# "-" runs none, for a root that is not the running system's).
set -euo pipefail
prefix=${PREFIX:-/opt/kata-mem}
bin_dir=${BIN_DIR:-/usr/local/bin}
unit_dir=${UNIT_DIR:-/etc/systemd/system}
systemctl=${SYSTEMCTL:-systemctl}
log() { printf 'uninstall-node: %s\n' "$*" >&2; }

if [ "$systemctl" != - ] && [ -d /run/systemd/system ]; then
    "$systemctl" disable --now kata-mem.socket kata-mem.service >&2 || true
fi
for unit in kata-mem.socket kata-mem.service; do
    path=$unit_dir/$unit
    if [ -f "$path" ] && grep -q "kata-mem" "$path"; then
        rm -f "$path"
        log "removed $path"
    fi
done
if [ "$systemctl" != - ] && [ -d /run/systemd/system ]; then
    "$systemctl" daemon-reload >&2 || true
fi
for command in kata-mem kata-mem-shim; do
    link=$bin_dir/$command
    if [ -L "$link" ] && [ "$(readlink "$link")" = "$prefix/bin/$command" ]; then
        rm -f "$link"
        log "removed $link"
    elif [ -e "$link" ] || [ -L "$link" ]; then
        log "left $link: not a link to $prefix/bin/$command"
    fi
done
if [ -f "$prefix/pyvenv.cfg" ] && [ -x "$prefix/bin/kata-mem" ]; then
    rm -rf "$prefix"
    log "removed $prefix"
elif [ -e "$prefix" ]; then
    log "left $prefix: not a virtualenv holding kata-mem"
fi
