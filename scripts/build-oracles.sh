#!/usr/bin/env bash
# Build the oracles of the differential tests (tests/oracle/): small Go programs that answer
# with upstream's own code what kata-mem decides by itself.
#
#   scripts/build-oracles.sh [DIR]        # DIR defaults to $KATA_MEM_ORACLE_DIR, else <repo>/.cache/oracle
#
# Writes, each from a module of its own whose go.mod and go.sum pin it:
#   DIR/golang/bin/go-oracle                   tests/oracle/golang (no requirement: Go's
#                                              strconv and regexp, the machine's Go)
#   DIR/kubernetes-1.37/bin/kubernetes-oracle  tests/oracle/kubernetes, go.mod (v1.37.2)
#   DIR/kubernetes-1.35/bin/kubernetes-oracle  the same source, -modfile=kubernetes-1.35.mod
#                                              (v1.35.4) -tags kube1.35
# One source for both Kubernetes releases: a module's go.mod pins every k8s.io module at
# one release, so two releases are two module files (Go's -modfile takes the second, with
# its .sum beside it), and the one function that differs between them is chosen by a build
# tag (defaults_1.35.go, defaults_1.37.go). Only the packages the program imports are
# compiled (k8s.io/kubernetes/pkg/apis/core/... and pkg/api/pod), never the whole module.
#
# Cached as scripts/build-node-rig.sh caches: each output directory keeps the sha256 of its
# inputs (the module's files, the Go version, the flags) and is not built again while they
# match; Go's own caches ($GOCACHE, $GOMODCACHE) are shared by every clone on the machine.
# Measured on this 2-core machine at a load average of 3-8 (other work ran), 2026-12-07:
# cold (an empty build cache, the modules downloaded) 188 s: 21 s for go-oracle (the standard
# library first), 102 s for 1.37, 65 s for 1.35 (the packages both share are built once);
# the build cache warm and DIR empty, 2 s; a changed main.go relinks in about 20 s; up to
# date, 0.25 s.
# One build at a time into DIR (a lock file there). GOTOOLCHAIN=local: the machine's Go.
# Prints one line per binary with the version it answers for.
set -euo pipefail

log() { printf 'build-oracles: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
[[ $# -le 1 ]] || { echo "usage: $0 [DIR]" >&2; exit 2; }
out=${1:-${KATA_MEM_ORACLE_DIR:-$root/.cache/oracle}}
mkdir -p "$out"
out=$(cd "$out" && pwd)
# One build at a time into DIR (pytest workers and the break script's copies may ask at once).
exec 9>"$out/.lock"
flock 9

command -v go >/dev/null || die "go not found: scripts/install-system-deps.sh go says what is needed"
export GOTOOLCHAIN=local CGO_ENABLED=0
go_version=$(go env GOVERSION)
flags=(-mod=readonly -trimpath)

# build NAME MODDIR BIN [GO BUILD FLAGS...]: go build MODDIR's main package into
# $out/NAME/bin/BIN unless $out/NAME/inputs.sha256 holds the hash of its inputs.
build() {
    local name=$1 moddir=$2 bin=$3
    shift 3
    local dest="$out/$name" hash files
    mapfile -t files < <(cd "$moddir" && find . -type f \( -name '*.go' -o -name '*.mod' -o -name '*.sum' \) | LC_ALL=C sort)
    hash=$(
        cd "$moddir"
        {
            sha256sum "${files[@]}"
            printf '%s\n' "$go_version" "${flags[*]}" "$*"
        } | sha256sum | cut -d' ' -f1
    )
    if [[ -f $dest/inputs.sha256 && $(cat "$dest/inputs.sha256") == "$hash" && -x $dest/bin/$bin ]]; then
        log "up to date: $dest/bin/$bin"
        return
    fi
    log "building $name from ${moddir#"$root"/} $*"
    local start=$SECONDS
    rm -rf "$dest.new"
    mkdir -p "$dest.new/bin"
    (cd "$moddir" && go mod download -modfile="${modfile:-go.mod}" && go build "${flags[@]}" -ldflags "-s -w" "$@" -o "$dest.new/bin/$bin" .)
    printf '%s\n' "$hash" >"$dest.new/inputs.sha256"
    rm -rf "$dest"
    mv "$dest.new" "$dest"
    log "built $name in $((SECONDS - start)) s"
}

modfile=go.mod build golang "$root/tests/oracle/golang" go-oracle
modfile=go.mod build kubernetes-1.37 "$root/tests/oracle/kubernetes" kubernetes-oracle
modfile=kubernetes-1.35.mod build kubernetes-1.35 "$root/tests/oracle/kubernetes" kubernetes-oracle \
    -modfile=kubernetes-1.35.mod -tags kube1.35

printf '%s\n' "$out/golang/bin/go-oracle: $go_version"
for release in 1.37 1.35; do
    bin="$out/kubernetes-$release/bin/kubernetes-oracle"
    printf "%s\n" "$bin: $(echo "{\"op\":\"version\"}" | "$bin" | sed -n "s/.*\"value\":\"\([^\"]*\)\".*/\1/p") ($go_version)"
done
