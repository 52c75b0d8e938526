#!/usr/bin/env bash
# run-idle-mem.sh [BIN_DIR] - what an idle logged-in DERP connection costs hderp-server in memory.
# For each mode (plain; TLS with -certmode manual and a throwaway self-signed certificate) and
# each N of idle connections it starts a fresh server (one shard, -dev, no STUN), lets
# hderp-bench hold N+2 logged-in connections (batches of --pairs 1 --peers K at 0.01 Mbit/s:
# one slow pair each, the rest idle), waits until /debug/varz counts all N+2 connections, lets
# them settle, and reads the server's VmRSS and /proc/PID/smaps_rollup (Anonymous: heap and pools; the rest is mapped files).
# Prints, per mode, RSS and anonymous KiB at each N and KiB per idle connection =
# (RSS(N) - RSS(0)) / N, and the marginal cost between consecutive Ns (RSS(N) - RSS(N_prev)) /
# (N - N_prev): the first figure includes one-off costs that the first connections pay (the
# shard's 4 MiB provided-buffer ring is touched page by page as receives land in it, pool
# chunks of 2 MiB), the marginal one between 1000 and 4000 is the steady per-connection cost.
# Kernel memory is not in RSS: the last column is the growth of the socket-related slab caches
# (/proc/slabinfo, machine-wide: both loopback ends, and other work on the machine) per N.
#
# Environment: NS ("0 1000 4000"), MODES ("plain tls"), SETTLE (2 s after the last login),
# SHARDS (1), OUT (a new directory under /tmp: server logs, bench outputs, the samples).
# The generators have a hard timeout; servers listen on port 0 (read back from --port-file)
# and are stopped by PID (also on exit). With the
# defaults it takes about a minute. The generators and the server each need N+ fds: the script
# checks ulimit -n.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
bin=${1:-$root/build/release/bin}
ns=${NS:-0 1000 4000}
modes=${MODES:-plain tls}
settle=${SETTLE:-2}
shards=${SHARDS:-1}
out=${OUT:-$(mktemp -d /tmp/idle-mem.XXXXXX)}
mkdir -p "$out"

die() { echo "run-idle-mem: $*" >&2; exit 2; }
for b in hderp-server hderp-bench; do
    [ -x "$bin/$b" ] || die "$bin/$b missing (build it first)"
done
max_n=0
for n in $ns; do [ "$n" -gt "$max_n" ] && max_n=$n; done
[ "$(ulimit -n)" -ge $((max_n + 64)) ] || die "ulimit -n $(ulimit -n) is below N+64"

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -keyout "$out/127.0.0.1.key" -out "$out/127.0.0.1.crt" -subj /CN=127.0.0.1 \
    -addext subjectAltName=IP:127.0.0.1 2>/dev/null

work=$out
. "$here/lib.sh"
pid=""
stop_server() {
    [ -n "$pid" ] || return 0
    stop_pid "$pid" 5 || true
    pid=""
}
bpids=()
cleanup() {
    for b in "${bpids[@]}"; do kill "$b" 2>/dev/null || true; done
    stop_server
    perf_cleanup
}
trap cleanup EXIT

conns() { # the server's current_connections gauge
    curl -sk --max-time 2 "$url/debug/varz" |
        awk '$1 == "derp_current_connections" || $1 == "current_connections" {n = $2}
             END {print n + 0}'
}
# Kernel memory of sockets (not in RSS): KiB in the slab caches an idle TCP connection uses
# (socket, inode, file, dentry, io_uring request), machine-wide, so it counts both loopback ends
# (server and generator) and whatever else runs; -1 when /proc/slabinfo is not readable.
kslab() {
    awk '$1 ~ /^(TCP|TCPv6|sock_inode_cache|filp|dentry|io_kiocb)$/ {b += $2 * $4}
         END {printf "%d", NR ? b / 1024 : -1}' /proc/slabinfo 2>/dev/null || echo -1
}
sample() { # "rss_kib anon_kib" of $pid
    local rss anon
    rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status")
    anon=$(awk '/^Anonymous:/ {print $2}' "/proc/$pid/smaps_rollup" 2>/dev/null || echo 0)
    echo "$rss ${anon:-0}"
}

echo "# hderp-server, $shards shard(s), -dev -stun=false; hderp-bench --pairs 1 --peers N+2" \
    "at 0.01 Mbit/s; sampled ${settle} s after all logins; raw output in $out"
printf '%-6s %6s %10s %10s %14s %14s %14s %16s\n' mode N RSS_KiB anon_KiB 'KiB/conn(RSS)' \
    'KiB/conn(anon)' 'marginal(RSS)' 'kernel_slab/conn'
for mode in $modes; do
    args=() bargs=() scheme=http
    if [ "$mode" = tls ]; then
        args=(-certmode manual -certdir "$out" -hostname 127.0.0.1 -http-port -1)
        bargs=(--ca "$out/127.0.0.1.crt")
        scheme=https
    fi
    base_rss="" base_anon="" prev_rss="" prev_n=""
    for n in $ns; do
        server_start "server-$mode-$n" "$bin/hderp-server" -a 127.0.0.1:0 -dev -stun=false \
            --shards "$shards" "${args[@]}"
        pid=$srv_pid
        url=$scheme://127.0.0.1:$srv_port
        want=$((n + 2))
        # The logins come in batches of at most 1000 connections, one generator process each:
        # the server refuses TLS handshakes past 1024 in progress per shard (tls/), and one
        # generator opens all its peers at once. Each batch is --pairs 1 plus idle peers; the
        # window (cut short by the kill below) is long enough to log in and sample.
        left=$want batch=0 bpids=()
        while [ "$left" -gt 0 ]; do
            k=$left
            [ "$k" -gt 1000 ] && k=1000
            [ $((left - k)) -eq 1 ] && k=$((k - 1)) # no batch of 1 (a pair is 2 peers)
            timeout 200 "$bin/hderp-bench" --server "$url/derp" "${bargs[@]}" --pairs 1 \
                --peers "$k" --rate-mbps 0.01 --size 100 --warmup 1 --duration 120 \
                >"$out/bench-$mode-$n-$batch.txt" 2>&1 &
            bpids+=($!)
            left=$((left - k)) batch=$((batch + 1))
            got=0
            for _ in $(seq 600); do # up to 60 s for the batch's logins
                got=$(conns)
                [ "$got" -ge $((want - left)) ] && break
                kill -0 "${bpids[-1]}" 2>/dev/null || break
                sleep 0.1
            done
            [ "$got" -ge $((want - left)) ] ||
                die "$mode N=$n: only $got of $((want - left)) connections (see $out/bench-$mode-$n-*.txt)"
        done
        sleep "$settle" # not a wait for a condition (the logins are in): SETTLE of quiet life
        slab=$(kslab)
        [ "$(conns)" -ge "$want" ] || die "$mode N=$n: connections dropped while settling"
        read -r rss anon < <(sample)
        cat "/proc/$pid/smaps_rollup" >"$out/smaps-$mode-$n.txt" 2>/dev/null || true
        for b in "${bpids[@]}"; do kill "$b" 2>/dev/null || true; done
        for b in "${bpids[@]}"; do wait "$b" 2>/dev/null || true; done
        bpids=()
        stop_server
        per_rss=- per_anon=- marg=- kper=-
        if [ -n "$prev_rss" ] && [ "$n" -gt "$prev_n" ]; then
            marg=$(awk -v a="$rss" -v b="$prev_rss" -v n="$((n - prev_n))" \
                'BEGIN {printf "%.2f", (a - b) / n}')
        fi
        prev_rss=$rss prev_n=$n
        if [ -z "$base_rss" ]; then
            base_rss=$rss base_anon=$anon base_n=$n base_slab=$slab
        elif [ "$n" -gt "$base_n" ]; then
            per_rss=$(awk -v a="$rss" -v b="$base_rss" -v n="$((n - base_n))" \
                'BEGIN {printf "%.2f", (a - b) / n}')
            per_anon=$(awk -v a="$anon" -v b="$base_anon" -v n="$((n - base_n))" \
                'BEGIN {printf "%.2f", (a - b) / n}')
            [ "$slab" -ge 0 ] && kper=$(awk -v a="$slab" -v b="$base_slab" -v n="$((n - base_n))" \
                'BEGIN {printf "%.2f", (a - b) / n}')
        fi
        printf '%-6s %6s %10s %10s %14s %14s %14s %16s\n' "$mode" "$n" "$rss" "$anon" "$per_rss" \
            "$per_anon" "$marg" "$kper" | tee -a "$out/samples.txt"
    done
done
