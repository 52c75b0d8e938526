#!/usr/bin/env bash
# run-relay-bench.sh [BIN_DIR] - a first relay benchmark on this machine: hderp-server pinned to
# CPU 0 (one shard, plain HTTP, -dev, no STUN), hderp-bench pinned to CPU 1, 4 pairs of
# 1400-byte packets at 100, 224, 400, 1000 Mbit/s and unpaced. For each point: delivered Mbit/s,
# loss %, the relay's CPU time (utime+stime of /proc/PID/stat, sampled by the bench at the
# window edges) per GB delivered, its RSS (VmRSS), the generator's own CPU, and the relay's
# drop counters from /debug/varz. Then one profile point (perf record of the relay) if perf works.
#
# BIN_DIR defaults to build/release/bin. Environment: RATES ("100 224 400 1000 0"; 224 =
# DESIGN.md's derper reference load, 4 pairs x 5,000 packets/s x 1400 B), PAIRS (4),
# SIZE (1400), DURATION (5), WARMUP (1), PROFILE_RATE (1000; "" = no profile), OUT (a new
# directory under /tmp: logs, raw outputs, perf.data). Every child has a hard timeout; the whole
# script stays under ~3 minutes with the defaults; the server listens on port 0 (read back from
# --port-file) and is stopped by PID.
#
# TLS=1 measures the relay in TLS mode. Tailscale's derper is not on this machine, so
# there is no side-by-side baseline: compare with the derper figures in docs/DESIGN.md
# (about 19.5 CPU-s/GB over TLS), which are not plain-TCP figures.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
bin=${1:-$root/build/release/bin}
rates=${RATES:-100 224 400 1000 0}
pairs=${PAIRS:-4} size=${SIZE:-1400} duration=${DURATION:-5} warmup=${WARMUP:-1}
profile_rate=${PROFILE_RATE-1000}
out=${OUT:-$(mktemp -d /tmp/relay-bench.XXXXXX)}
budget_s=170 # the watchdog's bound on the server's life
mkdir -p "$out"

die() { echo "run-relay-bench: $*" >&2; exit 2; }
for b in hderp-server hderp-bench; do
    [ -x "$bin/$b" ] || die "$bin/$b missing (build it first)"
done
command -v taskset >/dev/null || die "taskset missing"
[ "$(nproc --all)" -ge 2 ] || die "needs 2 CPUs (relay on 0, load on 1)"
if ! command -v derper >/dev/null; then
    echo "# derper (Tailscale) is not on this machine: no baseline run. The comparison must come"
    echo "# from docs/DESIGN.md (derper ~19.5 CPU-s/GB over TLS, 1400 B, 4 pairs)."
fi

# TLS=1: the relay in TLS mode (-certmode manual, a throwaway certificate for 127.0.0.1), the
# generator verifying it; userspace records on a kernel without the tls ULP.
tls_server=() tls_bench=() scheme=http
if [ "${TLS:-0}" = 1 ]; then
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
        -keyout "$out/127.0.0.1.key" -out "$out/127.0.0.1.crt" -subj /CN=127.0.0.1 \
        -addext subjectAltName=IP:127.0.0.1 2>/dev/null
    tls_server=(-certmode manual -certdir "$out" -hostname 127.0.0.1 -http-port -1)
    tls_bench=(--ca "$out/127.0.0.1.crt")
    scheme=https
fi
work=$out
. "$here/lib.sh"
server_start server taskset -c 0 "$bin/hderp-server" -a 127.0.0.1:0 -dev -stun=false \
    --shards 1 "${tls_server[@]}"
pid=$srv_pid port=$srv_port
(
    sleep "$budget_s" &
    sleeper=$!
    trap 'kill "$sleeper" 2>/dev/null; exit 0' TERM
    wait "$sleeper"
    kill -TERM "$pid" 2>/dev/null
    sleep 2
    kill -KILL "$pid" 2>/dev/null
) &
watchdog=$!
stopped=""
stop_server() { # the exit status of the first stop
    [ -n "$stopped" ] && return "$stopped"
    stopped=0
    stop_pid "$pid" 5 || stopped=$?
    return "$stopped"
}
cleanup() {
    stop_server || true
    kill "$watchdog" 2>/dev/null || true
    perf_cleanup
}
trap cleanup EXIT

url=$scheme://127.0.0.1:$port

drops() {
    curl -sk --max-time 2 "$url/debug/varz" |
        awk '/^derp_packets_dropped\{/ {n += $2} END {print n + 0}'
}
fig() { awk -v n="$1" '$1 == n {print $2}' "$2"; }
bench() { # rate outfile
    timeout $((duration + warmup + 30)) taskset -c 1 "$bin/hderp-bench" \
        --server "$url/derp" "${tls_bench[@]}" --pairs "$pairs" --size "$size" --rate-mbps "$1" \
        --duration "$duration" --warmup "$warmup" --relay-pid "$pid" --relay-cpu 0 >"$2"
}

echo "# hderp-server pid $pid on CPU 0 (1 shard, $scheme); generator on CPU 1; $pairs pairs x" \
    "$size B; window ${duration} s after ${warmup} s warm-up; raw output in $out"
echo "# load average at start: $(cut -d' ' -f1-3 /proc/loadavg) (other work on CPU 0 shows as" \
    "cpu0 busy above the relay's own cores)"
printf '%-9s %10s %8s %9s %7s %9s %9s %9s %7s %9s  %s\n' offered delivered loss% relay_cpu cores \
    CPU-s/GB cpu0_busy RSS_KiB gen_cpu drops notes
for r in $rates; do
    d0=$(drops)
    bench "$r" "$out/bench-$r.txt" || { echo "run-relay-bench: bench at $r failed" >&2; exit 1; }
    d1=$(drops)
    f=$out/bench-$r.txt
    notes=""
    [ "$(fig gen_fell_behind "$f")" = 1 ] && notes+="generator-fell-behind "
    [ "$(fig gen_cpu_bound "$f")" = 1 ] && notes+="generator-cpu-bound "
    if [ "$r" != 0 ] && [ "$(fig lost_packets "$f")" != 0 ]; then
        notes+="LOSS-below-saturation(tick-gap-max=$(fig gen_tick_gap_max_us "$f")us) "
    fi
    for a in reordered_packets duplicated_packets misrouted_packets corrupt_packets; do
        [ "$(fig $a "$f")" = 0 ] || notes+="$a=$(fig $a "$f") "
    done
    other=$(awk -v c="$(fig relay_core_busy_cores "$f")" -v p="$(fig relay_cpu_cores "$f")" \
        'BEGIN {printf "%.2f", c - p}')
    # Unaccounted softirq is ~0.1 core at saturation; more means something else ran on CPU 0.
    awk -v o="$other" 'BEGIN {exit !(o > 0.2)}' && notes+="CPU0-SHARED(+$other-cores) "
    label=$r
    [ "$r" = 0 ] && label=unpaced
    printf '%-9s %10.1f %8.3f %9.2f %7.2f %9.2f %9.2f %9s %7.2f %9s  %s\n' "$label" \
        "$(fig delivered_mbps "$f")" "$(fig loss_pct "$f")" "$(fig relay_cpu_s "$f")" \
        "$(fig relay_cpu_cores "$f")" "$(fig relay_cpu_s_per_gb "$f")" \
        "$(fig relay_core_busy_cores "$f")" \
        "$(fig relay_rss_end_kib "$f")" "$(fig gen_cpu_cores "$f")" $((d1 - d0)) "$notes"
done

if [ -n "$profile_rate" ] && command -v perf >/dev/null &&
    perf record -q -e cpu-clock -o "$out/probe.data" -- true >/dev/null 2>&1; then
    # Sample the relay while the bench runs; the warm-up is included (same load).
    timeout $((duration + warmup + 15)) perf record -q -e cpu-clock -F 4000 -g -p "$pid" \
        -o "$out/perf.data" -- sleep $((duration + warmup)) >"$out/perf.log" 2>&1 &
    perfpid=$!
    bench "$profile_rate" "$out/bench-profile.txt" || echo "run-relay-bench: profile run failed"
    wait "$perfpid" || true
    plabel="$profile_rate Mbit/s"
    [ "$profile_rate" = 0 ] && plabel=unpaced
    echo "# profile: relay at $plabel, perf record -e cpu-clock (kernel + user)," \
        "self cost:"
    timeout 60 perf report -i "$out/perf.data" --stdio --no-children --sort symbol \
        --percent-limit 0.8 -g none 2>/dev/null |
        awk '/^ +[0-9.]+%/ {printf "#   %7s %s %s\n", $1, $2, $3}' | head -15 || true
else
    echo "# profile: skipped (PROFILE_RATE empty or perf record does not work here)"
fi

stop_server && rc=0 || rc=$?
echo "# server exit status $rc after SIGTERM"
