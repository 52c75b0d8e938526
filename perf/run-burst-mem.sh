#!/usr/bin/env bash
# run-burst-mem.sh [BIN_DIR] - does hderp-server give memory back after a burst? Starts a fresh
# server (-dev, no STUN, SHARDS shards), reads its VmRSS idle, runs hderp-bench with PAIRS
# unpaced pairs of SIZE-byte packets for DURATION s (the burst fills the frame pools), then reads
# VmRSS again AFTER s after the generator left (issue 16 item 7: the pools used to keep every
# chunk, jemalloc every page). Prints one line per figure (KiB) and a summary. The generator has
# a hard timeout; the server listens on port 0 (read back) and is stopped by PID.
#
# Environment: SHARDS (2), PAIRS (50), SIZE (16384), DURATION (4), AFTER (5), OUT (a new
# directory under /tmp: logs).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
bin=${1:-$root/build/release/bin}
bench=${BENCH:-$bin/hderp-bench}
shards=${SHARDS:-2} pairs=${PAIRS:-50} size=${SIZE:-16384} duration=${DURATION:-4}
after=${AFTER:-5}
out=${OUT:-$(mktemp -d /tmp/burst-mem.XXXXXX)}
mkdir -p "$out"
work=$out
. "$here/lib.sh"
server_start server "$bin/hderp-server" -a 127.0.0.1:0 -dev -stun=false --shards "$shards"
pid=$srv_pid port=$srv_port
rss() { awk '/^VmRSS/ {print $2}' "/proc/$pid/status"; }
sleep 1 # not a wait for a condition: the idle figure is read a second into an idle life
idle=$(rss)
timeout $((duration + 30)) "$bench" --server "http://127.0.0.1:$port/derp" --pairs "$pairs" \
    --peers $((2 * pairs)) --size "$size" --duration "$duration" --warmup 1 \
    --relay-pid "$pid" >"$out/bench.log" 2>&1 || true
peak=$(awk '/^VmHWM/ {print $2}' "/proc/$pid/status")
left=$(rss)
sleep "$after"
later=$(rss)
echo "burst_mem_idle_kib $idle"
echo "burst_mem_peak_kib $peak"
echo "burst_mem_at_end_kib $left"
echo "burst_mem_after_${after}s_kib $later"
echo "summary: $shards shards, $pairs pairs x $size B unpaced for ${duration}s: RSS idle $idle KiB," \
    "peak $peak KiB, at the end $left KiB, ${after}s later $later KiB (logs in $out)"
stop_pid "$pid" || true
