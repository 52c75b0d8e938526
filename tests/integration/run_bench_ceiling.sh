#!/usr/bin/env bash
# run_bench_ceiling.sh ROOT BIN_DIR WORK_DIR - perf/run-bench --ceiling and --syscall-method.
# 1. The search itself (perf/run_bench_ceiling.py) against made-up relays whose loss starts
#    above a known rate, one whose generator falls behind first, and one that fails every
#    paced run: the ceiling found is the highest passing rate tried, within the resolution of
#    the true one, in at most the steps allowed, and the reason it stopped is the right one.
# 2. A real one against hderp-server (1 shard, plain, two generator processes, 2 steps of 1 s):
#    summary.json has the ceiling (the highest passing paced step), the idle and 80 % points
#    are rows of the summary, the ping ratios are those rows' p50/p99 divided, summary.txt
#    prints them, and the points' syscall runs were counted by the forced method (perf stat
#    on the relay) or say why not.
# 3. --syscall-method strace on one point: counted by strace, or the reason in the row.
# 4. issue11-report and plot-cpu-per-gb over those two directories (below).
set -euo pipefail
root=$1 bin=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
python3 - "$root/perf" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import run_bench_ceiling as rbc

def relay(true_ceiling, unpaced=None, gen_limit=None):
    calls = []
    def run(rate, tag):
        calls.append(rate)
        if rate == 0:
            return {"delivered_mbps": unpaced or true_ceiling * 0.7, "loss_pct": 40.0,
                    "window_s": 1.0, "gen_cpu_s": 0.1}
        behind = gen_limit is not None and rate > gen_limit
        loss = 0.0 if rate <= true_ceiling else 2.5
        return {"delivered_mbps": rate * (1 - loss / 100), "loss_pct": loss, "window_s": 1.0,
                "gen_cpu_s": 0.1, "gen_fell_behind": behind}
    return run, calls

for true in (900, 2500, 5000):
    run, calls = relay(true)
    c = rbc.search(run, 8, 0.05)
    passed = [s["offered_mbps"] for s in c["steps"] if s["ok"]]
    assert c["ceiling_mbps"] == max(passed) <= true, (true, c)
    assert c["ceiling_mbps"] >= 0.9 * true, (true, c)  # 8 steps reach 5 % brackets here
    assert len(calls) <= 9 and calls[0] == 0, calls
    assert c["limited_by"].startswith("loss 2.500 %") and not c["generator_bound"], c
    assert c["steps"][0]["offered_mbps"] == 0 and not c["steps"][0]["ok"], c
run, calls = relay(5000, gen_limit=1200)
c = rbc.search(run, 6, 0.05)
assert c["generator_bound"] and "generator" in c["limited_by"] and c["ceiling_mbps"] <= 1200, c
run, _ = relay(0, unpaced=1000)
c = rbc.search(run, 3, 0.05)
assert c["ceiling_mbps"] is None and c["limited_by"].startswith("loss"), c
print("ok: the search")
PY
relay="hderp=$bin/hderp-server -a 127.0.0.1:{port} -dev -stun=false -shards {shards}"
rb=(python3 "$root/perf/run-bench" --bench "$bin/hderp-bench" --relay "$relay" --no-plots)
rc=0
"${rb[@]}" --rates '' --ceiling --ceiling-steps 2 --ceiling-duration 1 --generators 2 \
    --start-ahead 1 --repeats 1 --duration 1 --warmup 0.3 --syscall-run 1 \
    --syscall-method perf --out "$work/ceiling" >"$work/ceiling.out" 2>&1 || rc=$?
cat "$work/ceiling.out"
[ "$rc" = 0 ] || { echo "FAIL: run-bench --ceiling exited $rc"; exit 1; }
python3 - "$work/ceiling" "$root/perf" <<'PY'
import json, os, sys
w = sys.argv[1]
sys.path.insert(0, sys.argv[2])
import run_bench_ceiling as rbc
s = json.load(open(os.path.join(w, "summary.json")))
(c,) = s["ceilings"]
assert c["relay"] == "hderp" and c["shards"] == 1 and c["generators"] == 2, c
assert c["steps"][0]["offered_mbps"] == 0 and 1 <= len(c["steps"]) <= 3, c
# the paced steps (the unpaced one, step 0, may pass too now that senders wait: not a ceiling)
passed = [x["offered_mbps"] for x in c["steps"][1:] if x["ok"]]
assert c["ceiling_mbps"] == (max(passed) if passed else None), c
if not passed:  # a loaded machine: no paced run passed; then no latency points either
    assert "latency" not in c and not s["points"], s
    print("note: no paced run passed here:", c["limited_by"])
    sys.exit(0)
for x in c["steps"][1:]:
    assert os.path.exists(os.path.join(w, f"run-hderp-s1-r{x['offered_mbps']}-"
                                          f"ceil{c['steps'].index(x) - 1}.json")), x
idle, load = c["latency_rates"]
assert idle == rbc.IDLE_MBPS and load == rbc.round_rate(0.8 * c["ceiling_mbps"]), c
rows = {p["offered_mbps"]: p for p in s["points"]}
assert set(rows) == {idle, load} and all(r["runs"] == 1 for r in rows.values()), rows
lat = c["latency"]
for q in ("p50", "p99"):
    want = rows[load][f"load_rtt_{q}_us_mean"] / rows[idle][f"load_rtt_{q}_us_mean"]
    assert abs(lat[f"{q}_ratio"] - want) < 0.01, (q, lat)
assert lat["meets_target"] == (max(lat["p50_ratio"], lat["p99_ratio"]) <= 1.5), lat
for r in rows.values():
    if r["syscall_method"]:
        assert r["syscall_method"] == "perf" and r["relay_syscalls_per_packet"] > 0, r
        assert r["relay_io_uring_enter_per_packet"] > 0, r
    else:
        assert r["syscall_run_error"].startswith("perf: "), r
txt = open(os.path.join(w, "summary.txt")).read()
assert "ceiling hderp 1 shard(s): " in txt and "ping at 80% of it" in txt, txt
assert "sys-by" in txt, txt
print("ok: ceiling", c["ceiling_mbps"], "Mbit/s, ratios", lat["p50_ratio"], lat["p99_ratio"])
PY
"${rb[@]}" --load client --rates 20 --repeats 1 --duration 1 --warmup 0.3 --syscall-run 1.5 \
    --syscall-method strace --out "$work/strace" >"$work/strace.out" 2>&1 || rc=$?
[ "$rc" = 0 ] || { cat "$work/strace.out"; echo "FAIL: run-bench (strace) exited $rc"; exit 1; }
python3 - "$work/strace" <<'PY'
import json, os, sys
(r,) = json.load(open(os.path.join(sys.argv[1], "summary.json")))["points"]
if r["syscall_method"]:
    assert r["syscall_method"] == "strace" and r["relay_syscalls_per_packet"] > 0, r
    assert r["relay_io_uring_enter_per_packet"] > 0, r
    txt = open(os.path.join(sys.argv[1], "summary.txt")).read()
    assert " strace " in txt, txt
else:
    assert r["syscall_run_error"].startswith("strace: "), r
print("ok: strace", r["syscall_method"], r["relay_syscalls_per_packet"], r["syscall_run_error"])
PY
# 4. issue11-report and plot-cpu-per-gb over these two run-bench directories as the sections of
# a run-issue11.sh directory (ceiling-plain, client-plain): the ceiling's ping ratios are its
# targets' figures, the sections that did not run read "not measured", and the plot has one
# curve per section and relay and an svg
mkdir -p "$work/i11"
cp -r "$work/ceiling" "$work/i11/ceiling-plain"
cp -r "$work/strace" "$work/i11/client-plain"
python3 "$root/perf/issue11-report" --dir "$work/i11" --started t --load-before 0 \
    --load-after 0 >"$work/i11/report.out"
python3 "$root/perf/plot-cpu-per-gb" --out "$work/i11/plot" "client=$work/strace/summary.json" \
    "ceiling=$work/ceiling/summary.json" >"$work/i11/plot.out"
python3 - "$work/i11" <<'PY'
import json, os, sys
d = sys.argv[1]
rep = json.load(open(os.path.join(d, "summary.json")))
t = {x["target"]: x for x in rep["targets"]}
c = json.load(open(os.path.join(d, "ceiling-plain", "summary.json")))["ceilings"][0]
if c.get("latency"):
    r = t["ping p50 at 80 % of the ceiling / idle, plain, hderp"]
    assert r["value"] == c["latency"]["p50_ratio"] and r["met"] == (r["value"] <= 1.5), r
assert t["client-like plain, 1 shard, CPU-s/GB"]["met"] is None, t  # no 224 Mbit/s point here
assert t["batched tls 2,000 Mbit/s, 1 shard, loss %"]["met"] is None, t
txt = open(os.path.join(d, "summary.txt")).read()
assert "not measured" in txt and "== ceiling-plain (run-bench summary) ==" in txt, txt
plot = open(os.path.join(d, "plot", "cpu_per_gb.txt")).read()
assert "client hderp 1 shard(s)" in plot, plot
svg = open(os.path.join(d, "plot", "cpu_per_gb.svg")).read()
assert svg.lstrip().startswith("<?xml") and "<svg" in svg, svg[:200]
print("ok: issue11-report and plot-cpu-per-gb")
PY
