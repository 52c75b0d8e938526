#!/usr/bin/env bash
# run_compare.sh ROOT BIN_DIR WORK_DIR - perf/compare end to end in its tiny configuration
# (--quick: 1 shard, one rate per load, 1 run of 1 s, one ceiling step, 50 idle clients) with
# hderp-server and perf/floor only (--no-derper: make test never builds Go). Checked: it exits 0;
# report.json has the client-like and batched points, plain and TLS, with hderp's CPU-s/GB and
# ping p50/p99 (and the floor's, and hderp's ratio to it, in plain), the ceiling rows with the
# unpaced flood of both relays, and the idle memory of hderp (plain, TLS) and the floor (plain);
# report.txt has those rows and the three plots exist. Nothing here reads a figure's size: the
# tool is what is tested, not the relays.
set -euo pipefail
root=$1 bin=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
rc=0
python3 "$root/perf/compare" --quick --no-derper --bin "$bin" --out "$work/out" \
    >"$work/compare.out" 2>&1 || rc=$?
cat "$work/compare.out"
[ "$rc" = 0 ] || { echo "FAIL: perf/compare exited $rc"; exit 1; }
python3 - "$work/out" <<'PY'
import json, os, sys
out = sys.argv[1]
rep = json.load(open(os.path.join(out, "report.json")))
pts = {(p["load"], p["transport"], p["offered_mbps"], p["shards"]): p for p in rep["points"]}
want = [("client", "plain", 20, 1), ("client", "tls", 20, 1), ("batched", "plain", 100, 1),
        ("batched", "tls", 100, 1)]
assert sorted(pts) == sorted(want), sorted(pts)
for key, p in pts.items():
    relays = ["hderp", "floor"] if key[1] == "plain" else ["hderp"]
    for fig in ("cpu", "p50", "p99"):
        vals = p["figures"][fig]["vals"]
        for r in relays:
            assert vals.get(r) is not None and vals[r] > 0, (key, fig, r, vals)
        if key[1] == "plain":
            assert p["figures"][fig]["x_floor"] is not None, (key, fig, p)
        else:
            assert "floor" not in vals or vals["floor"] is None, (key, fig, vals)
        assert p["figures"][fig]["best_peer"] is None, (key, fig, p)  # no peer but the floor
ceil = {(c["transport"], c["shards"]): c for c in rep["ceilings"]}
assert sorted(ceil) == [("plain", 1), ("tls", 1)], sorted(ceil)
for r in ("hderp", "floor"):
    assert ceil[("plain", 1)]["unpaced"][r][0] > 0, ceil
assert ceil[("tls", 1)]["unpaced"]["hderp"][0] > 0, ceil
idle = {(p["relay"], p["mode"]) for p in rep["idle"]["per_conn"]}
assert idle == {("hderp", "plain"), ("floor", "plain"), ("hderp", "tls")}, idle
for p in rep["idle"]["per_conn"]:
    assert p["n"] == 50 and p["rss_kib"] > 0 and p["counted_by"] == "varz", p
md = open(os.path.join(out, "report.txt")).read()
for row in ("| client-like | plain | 20 | 1 |", "| client-like | tls | 20 | 1 |",
            "| batched | plain | 100 | 1 |", "| batched | tls | 100 | 1 |", "| plain | 1 |",
            "| tls | 1 |", "| plain | hderp |", "| plain | floor |", "| tls | hderp |"):
    assert row in md, (row, md)
for fig in ("cpu", "p50", "p99"):
    svg = os.path.join(out, "plots", f"compare_{fig}.svg")
    assert os.path.getsize(svg) > 0, svg
print("ok: every section's rows are in the report, with hderp's and the floor's figures")
PY
