#!/bin/bash
# run_wg_interop.sh RELAY WORK [SHARDS [FLAGS...]] - hderp-wgrelay with real WireGuard: builds the Go program
# of tests/interop/wg (wireguard-go on gVisor's netstack; modules from go.sum, through the
# module proxy or the local module cache) into WORK and runs it against RELAY. Go 1.26 from PATH
# or /usr/local/go/bin.
set -euo pipefail
relay=$1 work=$2 shards=${3:-1}
shift $(($# < 3 ? $# : 3))
src=$(cd "$(dirname "$0")/../interop/wg" && pwd)
export PATH=$PATH:/usr/local/go/bin GOFLAGS=-mod=readonly GOTOOLCHAIN=local
if ! command -v go >/dev/null; then
    echo "run_wg_interop: no Go toolchain (PATH or /usr/local/go/bin): install Go 1.26" >&2
    exit 1
fi
mkdir -p "$work"
(cd "$src" && go build -o "$work/wgtest" .)
exec "$work/wgtest" -relay "$relay" -shards "$shards" "$@"
