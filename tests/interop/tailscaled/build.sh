#!/bin/bash
# build.sh INTEROP_DIR OUT_DIR CACHE_DIR - builds the v1.80.3 node of the tailscaled interop
# test: tsnode from the module INTEROP_DIR/v1.80 (its own go.mod pins tailscale.com v1.80.3, as
# one module cannot hold two versions; tsnode/main.go there is a link to tailscaled/tsnode's)
# into OUT_DIR/v1.80. The v1.102.5 programs (tspair, tsnode) are main packages of INTEROP_DIR's
# module, built by the suite's go_build.sh with the others. Modules come through the module
# proxy (GOPROXY as the caller has it); the build and module caches are CACHE_DIR/{cache,
# modcache} (shared by every preset) unless GOCACHE / GOMODCACHE are set. No Go, or a failed
# build: exit 1, which fails the tests that need the program (ctest fixture): nothing is skipped.
set -euo pipefail
src=$(cd "$1" && pwd) out=$2 cache=$3
export PATH=/usr/local/go/bin:$PATH
if ! command -v go >/dev/null; then
    echo "FAIL: no Go toolchain: the interop tests need go (Go 1.26 at /usr/local/go/bin, or" \
        "on PATH)"
    exit 1
fi
mkdir -p "$out/v1.80" "$cache"
out=$(cd "$out" && pwd) cache=$(cd "$cache" && pwd)
export GOCACHE=${GOCACHE:-$cache/cache} GOMODCACHE=${GOMODCACHE:-$cache/modcache}
# go.mod's go line is the floor; no newer toolchain is fetched behind the caller's back.
export GOTOOLCHAIN=local GOFLAGS="-mod=readonly -buildvcs=false ${GOFLAGS:-}"
mkdir -p "$GOCACHE" "$GOMODCACHE"
echo "build: $(go version); GOCACHE=$GOCACHE GOMODCACHE=$GOMODCACHE"
start=$(date +%s)
cd "$src/v1.80"
go build -o "$out/v1.80/" ./tsnode
echo "build: v1.80/tsnode (tailscale.com $(go list -m -f '{{.Version}}' tailscale.com))" \
    "in $(($(date +%s) - start))s"
