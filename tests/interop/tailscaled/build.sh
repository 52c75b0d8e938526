#!/bin/bash
# build.sh INTEROP_DIR OUT_DIR CACHE_DIR - builds the tailscaled interop test's programs:
# tspair and tsnode from the module in INTEROP_DIR (tests/interop, tailscale.com as its go.mod
# pins it) into OUT_DIR, and tsnode again from INTEROP_DIR/v1.80 (its own module, pinning
# tailscale.com v1.80.3; the same source file) into OUT_DIR/v1.80. Modules come through the
# module proxy (GOPROXY as the caller has it); the build and module caches are
# CACHE_DIR/{cache,modcache} (shared by every preset) unless GOCACHE / GOMODCACHE are set.
# No Go, or a failed build: exit 1, which fails the tests that need the programs (ctest
# fixture): nothing is skipped.
set -euo pipefail
src=$1 out=$2 cache=$3
export PATH=/usr/local/go/bin:$PATH
if ! command -v go >/dev/null; then
    echo "FAIL: no Go toolchain: the interop tests need go (Go 1.26 at /usr/local/go/bin, or" \
        "on PATH)"
    exit 1
fi
export GOCACHE=${GOCACHE:-$cache/cache} GOMODCACHE=${GOMODCACHE:-$cache/modcache}
# go.mod's go line is the floor; no newer toolchain is fetched behind the caller's back.
export GOTOOLCHAIN=local GOFLAGS="-mod=readonly -buildvcs=false ${GOFLAGS:-}"
mkdir -p "$out/v1.80" "$GOCACHE" "$GOMODCACHE"
echo "build: $(go version); GOCACHE=$GOCACHE GOMODCACHE=$GOMODCACHE"
start=$(date +%s)
(cd "$src" && go build -o "$out/" ./tailscaled/tspair ./tailscaled/tsnode)
mid=$(date +%s)
(cd "$src/v1.80" && go build -o "$out/v1.80/" ./tsnode)
end=$(date +%s)
echo "build: tspair, tsnode ($(cd "$src" && go list -m -f '{{.Version}}' tailscale.com))" \
    "in $((mid - start))s; v1.80/tsnode ($(cd "$src/v1.80" && go list -m -f '{{.Version}}' \
    tailscale.com)) in $((end - mid))s"
