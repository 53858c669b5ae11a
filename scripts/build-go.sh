#!/usr/bin/env bash
# Build the project's Go module (go/: the client of kata-mem serve and the NRI plugin
# kata-mem-nri) at the versions go.mod and go.sum pin.
#
#   scripts/build-go.sh [BINDIR]      # default .cache/bin
#
# Writes BINDIR/kata-mem-nri, a static binary. The modules come from the Go module proxy and
# are kept, with the builds, in Go's own caches ($GOMODCACHE, $GOCACHE; by default
# ~/go/pkg/mod and ~/.cache/go-build), as scripts/build-node-rig.sh keeps the node's: every
# clone on the machine shares them, and the tests then run Go offline (GOPROXY=off,
# tests/service/test_go_client.py). Go is the machine's (scripts/install-system-deps.sh go
# checks it is 1.26 or later).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bindir=${1:-$root/.cache/bin}
mkdir -p "$bindir"
bindir=$(cd "$bindir" && pwd)
export GOTOOLCHAIN=local GOFLAGS=-mod=readonly CGO_ENABLED=0
cd "$root/go"
go mod download
go build -trimpath -o "$bindir/kata-mem-nri" ./cmd/kata-mem-nri
echo "build-go: $bindir/kata-mem-nri ($(go env GOVERSION))" >&2
