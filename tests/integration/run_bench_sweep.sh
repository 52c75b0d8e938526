#!/usr/bin/env bash
# run_bench_sweep.sh ROOT BIN_DIR WORK_DIR plain|tls - perf/run-bench runs a tiny sweep end to
# end against hderp-server (2 rates x 2 repeats, 2 s each after 1 s warm-up, 1 shard) and
# writes one JSON per run, summary.json/summary.txt and five PNG plots. Checked: every point
# delivered > 0 Mbit/s, the paced point delivered about its offered rate with zero loss, the
# latency under load (run-bench's default --latency) is there and sane (> 0, p50 <= p99 <=
# p999) in every run file and the summary, every PNG is a real PNG of some size. run-bench bounds every child with a timeout and stops the
# relay by PID.
set -euo pipefail
root=$1 bin=$2 work=$3 mode=$4
rm -rf "$work" && mkdir -p "$work"
bench=$bin/hderp-bench
tls=()
[ "$mode" = tls ] && tls=(--tls)
python3 "$root/perf/run-bench" --bench "$bench" "${tls[@]}" \
    --relay "hderp=$bin/hderp-server -a 127.0.0.1:{port} -dev -stun=false -shards {shards}$(
        [ "$mode" = tls ] && echo ' -certmode manual -certdir {certdir} -hostname 127.0.0.1 -http-port -1')" \
    --rates 20,0 --repeats 2 --duration 2 --warmup 1 --shards 1 --out "$work" >"$work/run.out" 2>&1 ||
    { cat "$work/run.out"; exit 1; }
cat "$work/run.out"
python3 - "$work" <<'PY'
import glob, json, os, sys
w = sys.argv[1]
runs = [f for f in glob.glob(os.path.join(w, "run-*.json"))]
assert len(runs) == 5, f"expected smoke + 4 run files, got {runs}"
s = json.load(open(os.path.join(w, "summary.json")))
pts = s["points"]
assert len(pts) == 2, pts
for p in pts:
    assert p["runs"] == 2 and p["delivered_mbps_mean"] > 0, p
paced = [p for p in pts if p["offered_mbps"] == 20][0]
assert 16 <= paced["delivered_mbps_mean"] <= 24, paced
assert paced["loss_pct_mean"] == 0, paced
assert paced["relay_cpu_s_per_gb_mean"] is not None, paced
for f in runs:
    l = json.load(open(f))["latency_under_load"]
    assert l and l["count"] > 0 and l["received"] > 0, (f, l)
    assert 0 < l["p50_us"] <= l["p99_us"] <= l["p999_us"] <= l["max_us"], (f, l)
for p in pts:
    a, b, c = (p[f"load_rtt_{q}_us_mean"] for q in ("p50", "p99", "p999"))
    assert a is not None and 0 < a <= b <= c, p
assert paced["load_rtt_p50_us_mean"] < 1e6, paced  # a hang guard, not a performance check
for name in ("throughput", "loss", "latency_p99", "cpu_per_gb", "latency_under_load"):
    png = os.path.join(w, name + ".png")
    data = open(png, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", png
    assert len(data) > 1024, (png, len(data))
txt = open(os.path.join(w, "summary.txt")).read()
assert "hderp" in txt and "load999" in txt, txt
print("ok: sweep files and figures")
PY
