#!/usr/bin/env bash
# run_bench_sweep_client.sh ROOT BIN_DIR WORK_DIR - perf/run-bench with the client-like load
# (--load client) from two generator processes (--generators 2: a pair file, senders in one,
# receivers in the other, one --start-at) at 20 Mbit/s, 1 and 2 shards, where the relay command
# fails for shards 2 (it exits at once) and the generator (a wrapper) fails at the rate 7. Checked:
# both failures are recorded in their points' rows (FAILED, the reason in summary.json and
# summary.txt), the other point is measured, and run-bench exits 3; that point delivered about
# its rate with no loss, wrote one DERP frame per write (client_send_syscalls_per_frame == 1),
# and carries the relay's context switches per packet and its syscalls per packet from the
# point's --syscall-run (or the reason they could not be counted). run_bench_sweep.sh client
# runs this.
set -euo pipefail
root=$1 bin=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
cat >"$work/bench-wrapper.sh" <<WRAP
#!/bin/sh
# fails as a generator does when its relay breaks the stream, at the rate 7 only
case " \$* " in
*" --rate-mbps 7 "*) echo "the run failed (pair 0): Message too long" >&2; exit 1;;
esac
exec "$bin/hderp-bench" "\$@"
WRAP
chmod +x "$work/bench-wrapper.sh"
relay="hderp=sh -c 'test {shards} = 1 && exec $bin/hderp-server -a 127.0.0.1:{port} -dev"
relay+=" -stun=false -shards {shards}'"
rc=0
python3 "$root/perf/run-bench" --bench "$work/bench-wrapper.sh" --load client --generators 2 \
    --start-ahead 1 --relay "$relay" --rates 20,7 --repeats 1 --duration 2 --warmup 0.5 \
    --shards 1,2 --syscall-run 1 --no-plots --out "$work" >"$work/run.out" 2>&1 || rc=$?
cat "$work/run.out"
[ "$rc" = 3 ] || { echo "FAIL: run-bench exited $rc, not 3 (some points failed)"; exit 1; }
python3 - "$work" <<'PY'
import json, os, sys
w = sys.argv[1]
pts = json.load(open(os.path.join(w, "summary.json")))["points"]
assert [(p["shards"], p["offered_mbps"]) for p in pts] == [(1, 20), (1, 7), (2, 20), (2, 7)], pts
ok, bad_rate, *bad_shards = pts
assert ok["runs"] == 1 and ok["failed_runs"] == 0 and ok["load"] == "client", ok
assert 16 <= ok["delivered_mbps_mean"] <= 24 and ok["loss_pct_mean"] == 0, ok
assert ok["client_send_syscalls_per_frame"] == 1, ok
assert ok["relay_ctxsw_per_packet_mean"] is not None and ok["relay_ctxsw_per_packet_mean"] > 0, ok
assert ok["relay_syscalls_per_packet"] is not None or ok["syscall_run_error"], ok
if ok["relay_syscalls_per_packet"] is not None:
    assert ok["relay_syscalls_per_packet"] > 0 and ok["relay_io_uring_enter_per_packet"] > 0, ok
run = json.load(open(os.path.join(w, "run-hderp-s1-r20-0.json")))
assert run["generators"] == 2 and len(run["instances_json"]) == 2, run.keys()
tx, rx = run["instances_json"]
assert tx["local_senders"] == 4 and tx["local_receivers"] == 0, tx
assert rx["local_senders"] == 0 and rx["local_receivers"] == 4, rx
assert run["total"]["sent"] == tx["total"]["sent"] > 0 and run["total"]["lost"] == 0, run["total"]
assert tx["client_senders"]["frames"] == tx["client_senders"]["send_syscalls"] > 0, tx
for p in [bad_rate] + bad_shards:
    assert p["runs"] == 0 and p["failed_runs"] == 1 and p["flags"] == ["FAILED"], p
assert "Message too long" in bad_rate["errors"][0], bad_rate
assert all("exited with 1" in p["errors"][0] for p in bad_shards), bad_shards
txt = open(os.path.join(w, "summary.txt")).read()
assert txt.count("FAILED") >= 3 and "failed: run 0: the generator failed" in txt, txt
assert "csw/pkt" in txt and "sys/pkt" in txt, txt
print("ok: failed points recorded, the sweep went on; one frame per write")
PY
