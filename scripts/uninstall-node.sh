#!/usr/bin/env bash
# Remove the node install of scripts/install-node.sh (docs/guide/install.md, "Upgrade and
# uninstall"): what its manifest, PREFIX/kata-mem-install.manifest, lists (the virtualenv's
# files, the links on PATH, the units, the directories it made), each only while it is as the
# install wrote it; everything else is left and named: a file changed since, another's file,
# the units' drop-ins. Kata's VMs keep their current memory; the state directory
# (/run/kata-mem, a tmpfs) is left for `rm -rf` by hand once no sandbox needs it.
#
#   scripts/uninstall-node.sh
#
# Environment: PREFIX (/opt/kata-mem: where the manifest is; it names every other path);
# SYSTEMCTL (systemctl; "-" runs none, for a root that is not the running system's).
# install-node.sh does the work (one set of rules for what is the install's), beside this.
set -euo pipefail
exec "$(dirname "$0")/install-node.sh" --uninstall
