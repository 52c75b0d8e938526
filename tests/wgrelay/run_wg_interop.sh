#!/bin/bash
# run_wg_interop.sh RELAY WORK CACHE [SHARDS [FLAGS...]] - hderp-wgrelay with real WireGuard:
# builds the Go program of tests/interop/wg (its own module: wireguard-go and gVisor's netstack,
# go.sum committed; apart from tests/interop's module, whose tailscale.com pins a different
# gVisor) into WORK and runs it against RELAY. Go as tests/interop/go_build.sh has it: 1.26 from
# /usr/local/go/bin or PATH, the local toolchain only, modules through the module proxy, the
# build and module caches in CACHE/{cache,modcache} unless GOCACHE / GOMODCACHE are set.
set -euo pipefail
relay=$1 work=$(realpath -m "$2") cache=$(realpath -m "$3") shards=${4:-1}
shift $(($# < 4 ? $# : 4))
src=$(cd "$(dirname "$0")/../interop/wg" && pwd)
export PATH=/usr/local/go/bin:$PATH
if ! command -v go >/dev/null; then
    echo "FAIL: no Go toolchain: this test needs go (Go 1.26 at /usr/local/go/bin, or on PATH)" >&2
    exit 1
fi
export GOCACHE=${GOCACHE:-$cache/cache} GOMODCACHE=${GOMODCACHE:-$cache/modcache}
export GOTOOLCHAIN=local GOFLAGS="-mod=readonly -modcacherw -buildvcs=false ${GOFLAGS:-}"
mkdir -p "$work" "$GOCACHE" "$GOMODCACHE"
(cd "$src" && go build -o "$work/wgtest" .)
exec "$work/wgtest" -relay "$relay" -shards "$shards" "$@"
