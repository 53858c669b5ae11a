#!/usr/bin/env bash
# Build the sdist and the wheel as a release would, then install the wheel, without extras,
# into a fresh virtualenv: what `pip install kata-mem` gives a user. `python -m build`
# builds the wheel from the sdist, so a file missing from either is missing here too.
#   scripts/install-wheel.sh VENV DEST
# VENV is a virtualenv with `build` (the test extra); DEST is emptied. Prints the path of
# the installed kata-mem (DEST/venv/bin/kata-mem) on stdout; build logs go to DEST/build.log.
set -euo pipefail
venv=${1:?usage: scripts/install-wheel.sh VENV DEST}
dest=${2:?usage: scripts/install-wheel.sh VENV DEST}
root=$(cd "$(dirname "$0")/.." && pwd)

rm -rf "$dest"
mkdir -p "$dest"
if ! "$venv/bin/python" -m build --outdir "$dest/dist" "$root" >"$dest/build.log" 2>&1; then
    cat "$dest/build.log" >&2
    echo "install-wheel: python -m build failed (log above)" >&2
    exit 1
fi
wheels=("$dest"/dist/*.whl)
sdists=("$dest"/dist/*.tar.gz)
if [ "${#wheels[@]}" != 1 ] || [ "${#sdists[@]}" != 1 ]; then
    echo "install-wheel: expected one wheel and one sdist in $dest/dist" >&2
    exit 1
fi
# No pip inside (it is the slow part of a new virtualenv): VENV's pip installs into it, so
# that it holds exactly kata-mem and its dependencies.
"$venv/bin/python" -m venv --without-pip "$dest/venv"
if ! "$venv/bin/python" -m pip --python "$dest/venv/bin/python" install -q \
        --disable-pip-version-check "${wheels[0]}" >>"$dest/build.log" 2>&1; then
    cat "$dest/build.log" >&2
    echo "install-wheel: pip install ${wheels[0]} failed (log above)" >&2
    exit 1
fi
echo "$dest/venv/bin/kata-mem"
