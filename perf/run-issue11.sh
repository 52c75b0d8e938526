#!/usr/bin/env bash
# perf/run-issue11.sh OUT_DIR [--extra NAME=CMD]... - every figure issue 11's "Done when" asks
# for, in one command (about 12 minutes on the 2-vCPU box), into OUT_DIR:
#   client-plain/, client-tls/   the client-like load (--load client: one DERP frame per write),
#                                4 pairs, 56 / 224 / 448 Mbit/s (224 = 4 x 5,000 packets/s x
#                                1,400 B, the issue's load), 1 and 2 shards, packing on (the
#                                default), 3 runs of 5 s, relay and generator unpinned; each
#                                point's syscalls and io_uring_enter per packet (--syscall-run)
#   batched-plain/, batched-tls/ the batched generator at 2,000 Mbit/s, 1 shard, relay on CPU 0,
#                                generator on CPU 1, 2 runs of 5 s; beside it the same relay
#                                with --min-wait-us 0 ("hderp-minwait0"): what the min-wait
#                                costs the ping at that load
#   ceiling-plain/, ceiling-tls/ the loss-free ceiling (run-bench --ceiling: loss < 0.01 %, two
#                                generator processes from a pair file, senders apart from
#                                receivers, both on CPU 1, relay on CPU 0, 1 shard), then the
#                                ping round trip at 80 % of it against idle (3 runs of 5 s each)
#   plot/                        CPU-s/GB against offered rate, 1 and 2 shards, plain and TLS
#                                (perf/plot-cpu-per-gb: svg, png, text)
#   summary.txt, summary.json    the issue's targets against these figures (perf/issue11-report),
#                                the machine's load average before and after
# Every run-bench directory keeps its own runs' JSON, summary.txt and summary.json.
# --extra NAME=CMD (repeatable): another relay started the way run-bench's --relay does ({port},
# {certdir}), measured at the client-like 224 Mbit/s (1 shard) and for its ceiling, plain only
# unless CMD holds {certdir} (then TLS only). Found by itself: build/peers/derper-v1.102.5 (make
# peers), else `derper` on PATH (plain and TLS).
# Environment: BIN (default build/release/bin), RB_ARGS (more run-bench arguments for every
# invocation, e.g. "--repeats 1 --duration 2" for a quick check of the script itself).
# Run it on an otherwise idle machine: the summary prints the load average it saw.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 OUT_DIR [--extra NAME=CMD]..." >&2; exit 2; }
out=$1
shift
extras=()
while [ $# -gt 0 ]; do
    case $1 in
    --extra) extras+=("$2"); shift 2 ;;
    *) echo "$0: unknown argument $1" >&2; exit 2 ;;
    esac
done
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${BIN:-$root/build/release/bin}
for b in hderp-server hderp-bench; do
    [ -x "$bin/$b" ] || { echo "$0: no $bin/$b: build first (make build)" >&2; exit 2; }
done
mkdir -p "$out"
out=$(cd "$out" && pwd)
srv=$bin/hderp-server
plain="-a 127.0.0.1:{port} -dev -stun=false -shards {shards}"
tls="-a 127.0.0.1:{port} -certmode manual -certdir {certdir} -hostname 127.0.0.1 -http-port -1"
tls+=" -stun=false -shards {shards}"
# derper: make peers' build, else one on PATH. Not -dev (it moves derper to :3340 whatever -a
# says); -c: its key file, in the section's directory (without it derper run as root writes
# /var/lib/derper/derper.key).
derper=$root/build/peers/derper-v1.102.5
[ -x "$derper" ] || derper=$(command -v derper || true)
if [ -n "$derper" ]; then
    d="$derper -c {certdir}/derper.key -a 127.0.0.1:{port}"
    extras+=("derper=$d -stun=false")
    extras+=("derper-tls=$d -certmode manual -certdir {certdir} -hostname 127.0.0.1 -http-port -1 -stun=false")
fi
# shellcheck disable=SC2206
more=(${RB_ARGS:-}) # after the section's own arguments: the last of a repeated option wins
rb=(python3 "$root/perf/run-bench" --bench "$bin/hderp-bench")
started=$(date -u +%FT%TZ)
load0=$(cut -d' ' -f1-3 /proc/loadavg)
echo "# run-issue11: $started, load average $load0, output in $out"
fails=0
run() { # DIR ARGS...: one run-bench invocation; exit 3 (some points failed) is recorded, not fatal
    local dir=$1 rc=0
    shift
    echo "# run-issue11: $dir"
    "${rb[@]}" --out "$out/$dir" "$@" "${more[@]}" >"$out/$dir.log" 2>&1 || rc=$?
    [ "$rc" = 0 ] || { echo "# run-issue11: $dir: run-bench exited $rc (see $dir.log)"; fails=1; }
    sed -n '/^relay /,$p' "$out/$dir.log" | grep -v -e '^peers:' -e '^Warning:' -e '^# plot' || true
}
extra_relays() { # MODE: --relay arguments of the extras for plain or tls
    local e
    for e in "${extras[@]}"; do
        case $e in
        *"{certdir}"*) [ "$1" = tls ] && printf '%s\0' --relay "$e" ;;
        *) [ "$1" = plain ] && printf '%s\0' --relay "$e" ;;
        esac
    done
    return 0
}
for mode in plain tls; do
    if [ $mode = plain ]; then args=(); cmd="hderp=$srv $plain"; else args=(--tls); cmd="hderp=$srv $tls"; fi
    run client-$mode "${args[@]}" --load client --shards 1,2 --rates 56,224,448 --repeats 3 \
        --duration 5 --warmup 2 --syscall-run 2 --relay "$cmd"
    run batched-$mode "${args[@]}" --shards 1 --rates 2000 --repeats 2 --duration 5 --warmup 1 \
        --syscall-run 2 --relay-cpus 0 --bench-cpus 1 --relay "$cmd" \
        --relay "hderp-minwait0=${cmd#hderp=} --min-wait-us 0"
    mapfile -d '' ex < <(extra_relays $mode)
    run ceiling-$mode "${args[@]}" --shards 1 --rates '' --ceiling --ceiling-steps 7 \
        --ceiling-duration 3 --ceiling-latency 0.8 --generators 2 --relay-cpus 0 --bench-cpus 1:1 \
        --repeats 3 --duration 5 --warmup 1 --syscall-run 2 --relay "$cmd" "${ex[@]}"
    if [ ${#ex[@]} -gt 0 ]; then
        run client-extra-$mode "${args[@]}" --load client --shards 1 --rates 224 --repeats 3 \
            --duration 5 --warmup 2 --syscall-run 2 "${ex[@]}"
    fi
done
python3 "$root/perf/plot-cpu-per-gb" --out "$out/plot" "client plain=$out/client-plain/summary.json" \
    "client TLS=$out/client-tls/summary.json" "batched plain=$out/batched-plain/summary.json" \
    "batched TLS=$out/batched-tls/summary.json" >"$out/plot.log" 2>&1 || {
    echo "# run-issue11: the plot failed (see plot.log)"; fails=1; }
python3 "$root/perf/issue11-report" --dir "$out" --started "$started" --load-before "$load0" \
    --load-after "$(cut -d' ' -f1-3 /proc/loadavg)" --extras "${#extras[@]}"
[ $fails = 0 ] || { echo "# run-issue11: some runs failed: see the sections' summaries"; exit 3; }
