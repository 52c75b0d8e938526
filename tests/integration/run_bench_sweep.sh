#!/usr/bin/env bash
# run_bench_sweep.sh ROOT BIN_DIR WORK_DIR plain|tls|client - perf/run-bench runs a tiny sweep end to
# end against hderp-server (tls: 2 rates x 2 repeats; plain: 2 rates x 2 peer counts, --peers
# 8,40 with the default 4 pairs, so 0 and 32 idle peers, x 1 repeat; 2 s each after 1 s warm-up,
# 1 shard) and writes one JSON per run, summary.json/summary.txt and five PNG plots. Checked
# (plain): a run file and a summary row per peer count, the generator ran that many peers, a
# `peers` column in summary.txt and one plot curve per peer count. Checked (both): every point
# delivered > 0 Mbit/s, the paced point delivered about its offered rate with zero loss, the
# latency under load (run-bench's default --latency) is there and sane (> 0, p50 <= p99 <=
# p999) in every run file and the summary and came from a probe process of its own (--probe own,
# the default: the runs' last generator argv), every PNG is a real PNG of some size. run-bench bounds every child with a timeout and stops the
# relay by PID.
# interleave: two relays with --interleave: the runs' harness_seq shows them alternating (smoke
# a, smoke b, run 0 a, run 0 b, run 1 a, run 1 b, syscalls a, syscalls b), both points in the
# summary; --interleave with --no-restart is refused.
# client: --load client with two generator processes (--generators 2, a pair file) at 20 Mbit/s
# and 1 and 2 shards, where the relay command fails for shards 2 (it exits at once) and the
# generator (a wrapper) fails at the rate 7: both failures are recorded in their points' rows
# (FAILED, with the reason in summary.txt), the other point is measured, and run-bench exits 3;
# that point's row carries one write per frame (client_send_syscalls_per_frame == 1), context
# switches per packet, and syscalls per packet from its --syscall-run (or the reason why not).
set -euo pipefail
root=$1 bin=$2 work=$3 mode=$4
rm -rf "$work" && mkdir -p "$work"
bench=$bin/hderp-bench
if [ "$mode" = client ]; then
    exec bash "$(dirname "$0")/run_bench_sweep_client.sh" "$root" "$bin" "$work"
fi
if [ "$mode" = interleave ]; then # two relays, --interleave: their runs alternate
    # No write deadline: a generator stalled for seconds on a loaded box (the debug preset) must
    # not have its receivers closed (what is tested here is run-bench, not the relay's timeout).
    srv="$bin/hderp-server -a 127.0.0.1:{port} -dev -stun=false -shards {shards}"
    srv+=" -tcp-write-timeout 0"
    python3 "$root/perf/run-bench" --bench "$bench" --relay "a=$srv" --relay "b=$srv" --interleave \
        --rates 20 --repeats 2 --duration 1 --warmup 0.5 --shards 1 --syscall-run 1 --no-plots \
        --out "$work" >"$work/run.out" 2>&1 || { cat "$work/run.out"; exit 1; }
    cat "$work/run.out"
    python3 - "$work" <<'PY'
import glob, json, os, sys
runs = [json.load(open(f)) | {"file": os.path.basename(f)}
        for f in glob.glob(os.path.join(sys.argv[1], "run-*.json"))]
order = [r["file"] for r in sorted(runs, key=lambda r: r["harness_seq"])]
want = [f"run-{n}-s1-r20-{t}.json" for t in ("smoke", "0", "1", "syscalls") for n in "ab"]
assert order == want, order
pts = json.load(open(os.path.join(sys.argv[1], "summary.json")))["points"]
assert [(p["relay"], p["runs"]) for p in pts] == [("a", 2), ("b", 2)], pts
PY
    if python3 "$root/perf/run-bench" --bench "$bench" --relay "a=$srv" --interleave --no-restart \
        --rates 20 --out "$work/refused" >"$work/refused.out" 2>&1; then
        echo "--interleave with --no-restart was not refused"; exit 1
    fi
    grep -q "not with --no-restart" "$work/refused.out" || { cat "$work/refused.out"; exit 1; }
    echo "interleave: ok"
    exit 0
fi
tls=()
sweep=(--rates 20,0 --repeats 2)
[ "$mode" = tls ] && tls=(--tls)
[ "$mode" = plain ] && sweep=(--rates 20,0 --repeats 1 --peers 8,40)
hd="$bin/hderp-server -a 127.0.0.1:{port} -dev -stun=false -shards {shards} -tcp-write-timeout 0"
[ "$mode" = tls ] && hd+=" -certmode manual -certdir {certdir} -hostname 127.0.0.1 -http-port -1"
python3 "$root/perf/run-bench" --bench "$bench" "${tls[@]}" --relay "hderp=$hd" \
    "${sweep[@]}" --duration 2 --warmup 1 --shards 1 --syscall-run 0 --out "$work" \
    >"$work/run.out" 2>&1 ||
    { cat "$work/run.out"; exit 1; }
cat "$work/run.out"
python3 - "$work" "$mode" <<'PY'
import glob, json, os, re, sys
w, mode = sys.argv[1], sys.argv[2]
runs = [f for f in glob.glob(os.path.join(w, "run-*.json"))]
assert len(runs) == 5, f"expected smoke + 4 run files, got {runs}"
s = json.load(open(os.path.join(w, "summary.json")))
pts = s["points"]
peers = [8, 40] if mode == "plain" else [8]  # 8 = 2 x the default 4 pairs: no idle peers
repeats = 1 if mode == "plain" else 2
assert len(pts) == 2 * len(peers), pts
assert sorted({p["peers"] for p in pts}) == peers, pts
for p in pts:
    assert p["runs"] == repeats and p["delivered_mbps_mean"] > 0, p
for n in peers:
    paced = [p for p in pts if p["offered_mbps"] == 20 and p["peers"] == n][0]
    assert 16 <= paced["delivered_mbps_mean"] <= 24, paced
    assert paced["loss_pct_mean"] == 0, paced
    assert paced["relay_cpu_s_per_gb_mean"] is not None, paced
for f in runs:
    m = re.search(r"-p(\d+)-r", os.path.basename(f))
    if mode == "plain":  # --peers given: the peer count is in the name, the generator ran it
        assert m and int(m.group(1)) in peers, f
        assert json.load(open(f))["peers"] == int(m.group(1)), f
    else:  # no --peers: today's names, the generator's default
        assert m is None and json.load(open(f))["peers"] == 8, f
for f in runs:
    r = json.load(open(f))
    l = r["latency_under_load"]
    assert l and l["count"] > 0 and l["received"] > 0, (f, l)
    # --probe own (the default): the ping/echo pair ran in a process of its own, the last one
    assert r.get("latency_probe") == "own process", (f, r.get("latency_probe"))
    assert "--latency" in r["harness_argv"][-1] and "--pairs" in r["harness_argv"][-1], f
    assert not any("--latency" in a for a in r["harness_argv"][:-1]), f
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
head, *rows = txt.splitlines()
assert head.split()[:3] == ["relay", "shards", "peers"], head
assert sorted(int(r.split()[2]) for r in rows if r.startswith("hderp")) == sorted(peers * 2), txt
# one curve per peer count when several were swept, one (today's label) otherwise
curves = glob.glob(os.path.join(w, "plot-throughput-*-0.dat"))
assert len(curves) == len(peers), curves
print("ok: sweep files and figures")
PY
