#!/bin/bash
# go_build.sh SRC_DIR OUT_DIR CACHE_DIR - builds the interop suite's Go programs from the module
# in SRC_DIR (tests/interop: go.mod pins tailscale.com, go.sum is committed) into OUT_DIR:
# every main package of the module, derpclient again with the WebSocket client compiled in
# (ts_debug_websockets), and the module's tools (derper, derpprobe: `tool` in go.mod).
# Modules come through the module proxy (GOPROXY as the caller has it, else Go's default);
# the build and module caches live in CACHE_DIR/{cache,modcache} (one for every preset), unless
# the caller set GOCACHE / GOMODCACHE. No Go toolchain, or a failed build: exit 1 (the interop
# tests that need the programs then fail too; nothing is skipped).
set -euo pipefail
src=$1 out=$(realpath -m "$2") cache=$(realpath -m "$3") # absolute: the build runs in SRC_DIR
export PATH=/usr/local/go/bin:$PATH
if ! command -v go >/dev/null; then
    echo "FAIL: no Go toolchain: the interop tests need go (Go 1.26 at /usr/local/go/bin, or" \
        "on PATH); install it from https://go.dev/dl/"
    exit 1
fi
export GOCACHE=${GOCACHE:-$cache/cache} GOMODCACHE=${GOMODCACHE:-$cache/modcache}
# go.mod's go line is the floor: a newer toolchain is never fetched behind the caller's back;
# -modcacherw: the module cache stays deletable (make clean) without root.
export GOTOOLCHAIN=local GOFLAGS="-mod=readonly -modcacherw -buildvcs=false ${GOFLAGS:-}"
rm -rf "$out" # a failed build leaves no programs of an earlier one
mkdir -p "$out" "$GOCACHE" "$GOMODCACHE"
cd "$src"
echo "go_build: $(go version); GOCACHE=$GOCACHE GOMODCACHE=$GOMODCACHE"
start=$(date +%s)
go build -o "$out/" ./... tool
go build -tags ts_debug_websockets -o "$out/derpclient" ./derpclient
echo "go_build: built $(cd "$out" && ls | tr '\n' ' ')in $(($(date +%s) - start))s"
