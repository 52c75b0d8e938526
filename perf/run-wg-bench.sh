#!/bin/bash
# run-wg-bench.sh [BIN_DIR] - WireGuard-shaped UDP through hderp-wgrelay and through the floor
# (hderp-bench-wg --floor: recvfrom, one lookup, sendto), at the same offered loads, one after the
# other. For each run: the forwarder's CPU seconds (utime + stime from /proc, the whole run),
# bytes delivered, CPU-s per GB, loss, one-way latency. Prints figures; passes or fails nothing.
# PAIRS (4), SECONDS (5), SIZE (1280), RATES ("2000 5000 0": per socket, 0 = unpaced), SHARDS (1).
set -euo pipefail
bin=${1:-build/release/bin}
pairs=${PAIRS:-4} secs=${SECONDS_PER_RUN:-5} size=${SIZE:-1280} shards=${SHARDS:-1}
rates=${RATES:-"2000 5000 0"}
work=$(mktemp -d)
trap 'kill $pid 2>/dev/null || true; rm -rf "$work"' EXIT
"$bin/hderp-bench-wg" --print-peers "$pairs" >"$work/peers"
ticks=$(getconf CLK_TCK)
cpu() { awk -v t="$ticks" '{print ($14 + $15) / t}' "/proc/$1/stat"; }
free_port() { python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
printf '%-8s %6s %8s %10s %10s %8s %10s %8s %8s %9s\n' target rate sent received lost loss% \
    cpu_s cpu_s/GB p50_us p99_us
for rate in $rates; do
    for target in floor wgrelay; do
        if [ $target = floor ]; then
            addr=127.0.0.1:$(free_port)
            "$bin/hderp-bench-wg" --floor "$addr" >"$work/out" 2>&1 &
            pid=$!
            extra=--plain
        else
            "$bin/hderp-wgrelay" --peers "$work/peers" --listen 127.0.0.1:0 --handshake-rate 0 \
                --shards "$shards" >"$work/out" 2>&1 &
            pid=$!
            extra=
        fi
        for _ in $(seq 100); do grep -q listening "$work/out" && break; sleep 0.05; done
        [ $target = wgrelay ] && addr=$(awk '/listening on/ {print $4}' "$work/out")
        c0=$(cpu $pid)
        line=$("$bin/hderp-bench-wg" --relay "$addr" --pairs "$pairs" --seconds "$secs" \
            --rate "$rate" --size "$size" $extra)
        c1=$(cpu $pid)
        kill $pid && wait $pid 2>/dev/null || true
        echo "$line" | awk -v tg=$target -v c0="$c0" -v c1="$c1" '{
            for (i = 1; i < NF; i += 2) v[$i] = $(i + 1)
            cpu = c1 - c0; gb = v["bytes"] / 1e9
            printf "%-8s %6s %8d %10d %10d %8.2f %10.2f %8.2f %8d %9d\n", tg, v["rate"], v["sent"],
                v["received"], v["lost"], 100 * v["lost"] / (v["sent"] ? v["sent"] : 1), cpu,
                (gb > 0 ? cpu / gb : 0), v["lat_p50_us"], v["lat_p99_us"] }'
    done
done
