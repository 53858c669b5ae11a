#!/usr/bin/env bash
# Build the node runtime the end-to-end tests run on (tests/support/node.py): containerd
# with NRI, its runc shim, ctr, crictl, and the test programs of tests/go (a CRI client,
# a static pause binary, an NRI plugin that records what it gets).
#
#   scripts/build-node-rig.sh [DIR]        # DIR defaults to <repo>/.cache/rig
#
# Writes, each from a module of its own whose go.mod and go.sum pin it:
#   DIR/containerd-vX.Y.Z/bin/{containerd,containerd-shim-runc-v2,ctr}
#                       tests/rig/containerd-v2.3 (v2.3.x), tests/rig/containerd-v2.4 (v2.4.x)
#   DIR/crictl-vX.Y.Z/bin/crictl        tests/rig/cri-tools
#   DIR/test-programs/bin/{cri-call,nri-recorder,pause}   tests/go
# The pin modules require only the upstream module, whose go.mod has no replace directive,
# so that Go's minimal version selection picks exactly upstream's own dependency versions.
# Their `tool` lines name the commands, built in one `go build` per module (the packages
# the commands share are compiled once). runc is Debian's (scripts/install-system-deps.sh node).
#
# Cached: each output directory keeps the sha256 of its inputs (the pin module's go.mod and
# go.sum, or every file of tests/go; the Go version; the build flags) in inputs.sha256, and
# is not built again while they match. One build at a time into DIR (a lock file there).
# Go's own caches ($GOCACHE, $GOMODCACHE; by default ~/.cache/go-build and ~/go/pkg/mod), not
# the checkout's: they are shared by every clone on the machine, so CI's fresh clone right
# after a session that built here compiles nothing and only links (a cold build of all of it
# takes several minutes on 2 cores). GOTOOLCHAIN=local:
# the machine's Go (1.26.8 or later: containerd v2.3.7's go.mod asks for 1.26.8). Modules
# come from $GOPROXY (Go's default: the module proxy).
# Prints one line per binary with the version it reports.
set -euo pipefail

log() { printf 'build-node-rig: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
[[ $# -le 1 ]] || { echo "usage: $0 [DIR]" >&2; exit 2; }
out=${1:-$root/.cache/rig}
mkdir -p "$out"
out=$(cd "$out" && pwd)
# One build at a time into DIR (two pytest workers may ask at once): the second waits.
exec 9>"$out/.lock"
flock 9

command -v go >/dev/null || die "go not found: scripts/install-system-deps.sh go says what is needed"
export GOTOOLCHAIN=local
go_version=$(go env GOVERSION)

# Static binaries without cgo; containerd's snapshotters that need cgo or host tools are left
# out (btrfs, devmapper, zfs: the tests use overlayfs). -trimpath and -s -w: smaller binaries
# that do not name this machine's paths.
tags="no_btrfs no_devmapper no_zfs"
flags=(-mod=readonly -modcacherw -trimpath -tags "$tags")
strip="-s -w"
export CGO_ENABLED=0

# module_version MODDIR MODULE: the version MODDIR's go.mod requires of MODULE.
module_version() {
    local v
    v=$(awk -v m="$2" '$1 == m { print $2; exit } $1 == "require" && $2 == m { print $3; exit }' \
        "$1/go.mod")
    [[ -n $v ]] || die "$1/go.mod does not require $2"
    printf '%s\n' "$v"
}

# inputs_hash FILE...: one sha256 over the files' contents and names, the Go version and
# the flags (extra words after --).
inputs_hash() {
    local files=() extra=()
    while [[ $# -gt 0 && $1 != -- ]]; do files+=("$1"); shift; done
    [[ $# -gt 0 ]] && shift
    extra=("$@")
    {
        sha256sum "${files[@]}"
        printf '%s\n' "$go_version" "${flags[*]}" "$strip" "${extra[@]}"
    } | sha256sum | cut -d' ' -f1
}

# build NAME MODDIR HASH LDFLAGS PACKAGES...: go build PACKAGES of MODDIR into
# $out/NAME/bin unless $out/NAME/inputs.sha256 holds HASH and every binary is there.
build() {
    local name=$1 moddir=$2 hash=$3 ldflags=$4
    shift 4
    local dest="$out/$name" bins=() pkg
    for pkg in "$@"; do
        if [[ $pkg == tool ]]; then  # the module's tool lines: `tool X` or a `tool (...)` block
            while read -r pkg; do bins+=("${pkg##*/}"); done < <(awk '
                $1 == "tool" && $2 == "(" { block = 1; next }
                block && $1 == ")" { block = 0; next }
                block { print $1 } $1 == "tool" && $2 != "(" { print $2 }' "$moddir/go.mod")
            [[ ${#bins[@]} -gt 0 ]] || die "$moddir/go.mod names no tool"
        else
            bins+=("${pkg##*/}")
        fi
    done
    local cached=1 bin
    [[ -f $dest/inputs.sha256 && $(cat "$dest/inputs.sha256") == "$hash" ]] || cached=0
    for bin in "${bins[@]}"; do [[ -x $dest/bin/$bin ]] || cached=0; done
    if [[ $cached -eq 1 ]]; then
        log "up to date: $dest (${bins[*]})"
        return
    fi
    log "building $name (${bins[*]}) from ${moddir#"$root"/}"
    local start=$SECONDS
    rm -rf "$dest.new"
    mkdir -p "$dest.new/bin"
    go -C "$moddir" build "${flags[@]}" -ldflags "$strip $ldflags" -o "$dest.new/bin/" "$@"
    for bin in "${bins[@]}"; do
        [[ -x $dest.new/bin/$bin ]] || die "go build wrote no $bin"
    done
    printf '%s\n' "$hash" >"$dest.new/inputs.sha256"
    rm -rf "$dest"
    mv "$dest.new" "$dest"
    log "built $name in $((SECONDS - start)) s"
}

rig="$root/tests/rig"
built=()

# containerd: its version package is filled at link time as containerd's Makefile does
# (VERSION is the tag; there is no git revision to give).
for series in v2.3 v2.4; do
    moddir="$rig/containerd-$series"
    version=$(module_version "$moddir" github.com/containerd/containerd/v2)
    [[ $version == "$series".* ]] || die "$moddir pins containerd $version, not a $series release"
    pkg=github.com/containerd/containerd/v2/version
    ldflags="-X $pkg.Version=$version"
    build "containerd-$version" "$moddir" \
        "$(inputs_hash "$moddir/go.mod" "$moddir/go.sum" -- "$ldflags")" "$ldflags" tool
    built+=("containerd-$version")
done

# crictl: cri-tools' Makefile gives the version without its leading v.
moddir="$rig/cri-tools"
version=$(module_version "$moddir" sigs.k8s.io/cri-tools)
ldflags="-X sigs.k8s.io/cri-tools/pkg/version.Version=${version#v}"
build "crictl-$version" "$moddir" \
    "$(inputs_hash "$moddir/go.mod" "$moddir/go.sum" -- "$ldflags")" "$ldflags" tool
built+=("crictl-$version")

# The test programs: every file of tests/go is an input.
moddir="$root/tests/go"
mapfile -t go_files < <(cd "$moddir" && find . -type f \( -name '*.go' -o -name go.mod -o -name go.sum \) | LC_ALL=C sort)
build test-programs "$moddir" "$(cd "$moddir" && inputs_hash "${go_files[@]}")" "" \
    ./cmd/cri-call ./cmd/nri-recorder ./cmd/pause
built+=(test-programs)

# One line per binary, with the version it reports.
for name in "${built[@]}"; do
    bin="$out/$name/bin"
    case $name in
        containerd-*)
            printf '%s\n' "$bin/containerd: $("$bin/containerd" --version)"
            printf '%s\n' "$bin/ctr: $("$bin/ctr" --version)"
            printf '%s\n' "$bin/containerd-shim-runc-v2: $("$bin/containerd-shim-runc-v2" -v | awk '$1 == "Version:" { print $2 }')"
            ;;
        crictl-*) printf '%s\n' "$bin/crictl: $("$bin/crictl" --version)" ;;
        test-programs)
            for b in cri-call nri-recorder pause; do
                printf '%s\n' "$bin/$b: built from tests/go with $go_version"
            done
            ;;
    esac
done
if command -v runc >/dev/null; then
    printf '%s\n' "$(command -v runc): $(runc --version | head -n1)"
else
    log "runc not found: scripts/install-system-deps.sh node installs Debian's"
fi
