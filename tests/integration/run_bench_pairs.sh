#!/usr/bin/env bash
# run_bench_pairs.sh BIN_DIR WORK_DIR - one experiment shared by two hderp-bench processes
# through a real plain hderp-server: gen-pairs writes a pair file (layout sides: instance 0
# runs the 3 senders, instance 1 the 3 receivers), both processes log in and start together
# (--start-at), 3 Mbit/s for 3 s. Checked from their JSON: the receivers got every packet the
# senders sent (received == expected == the senders' sent: the trailers carry each sender's
# window), lost 0, misrouted 0; each side says which figures it counted. Layout cross (both
# instances send and receive, 2 shards each) adds up the same way.
# Then bad pair files and flags get clear errors. Bounded waits; processes stopped by PID.
set -euo pipefail
bin=$1 work=$2
bench=$bin/hderp-bench
mkdir -p "$work"
. "$(dirname "$0")/lib.sh"
server_start server -a 127.0.0.1:0 -c "$work/derper.key" -stun=false --shards 2
p=$srv_port
url=http://127.0.0.1:$p/derp
pf=$work/pairs.txt
rm -f "$pf"
"$bench" gen-pairs --pairs 3 --instances 2 --layout sides --out "$pf" 2>"$work/gen.log" ||
    fail "gen-pairs failed"
[ "$(stat -c %a "$pf")" = 600 ] || fail "the pair file is not mode 0600"
[ "$(grep -c '^pair ' "$pf")" = 3 ] || fail "gen-pairs wrote $(grep -c '^pair ' "$pf") pairs"
t=$(python3 -c 'import time; print(f"{time.time() + 2:.3f}")')
common=(--server "$url" --pair-file "$pf" --rate-mbps 3 --duration 3 --warmup 1 --start-at "$t"
        --json)
timeout 60 "$bench" "${common[@]}" --instance 0 >"$work/tx.json" 2>"$work/tx.log" &
tx=$!
pids+=($tx)
timeout 60 "$bench" "${common[@]}" --instance 1 >"$work/rx.json" 2>"$work/rx.log" &
rx=$!
pids+=($rx)
wait "$tx" || fail "the sending instance failed"
wait "$rx" || fail "the receiving instance failed"
cat "$work/tx.json" "$work/rx.json"
python3 - "$work/tx.json" "$work/rx.json" <<'PY' || fail "pair file result"
import json, sys
tx, rx = (json.load(open(f)) for f in sys.argv[1:3])
for r, i in ((tx, 0), (rx, 1)):
    assert r["instance"] == i and r["instances"] == 2 and r["pairs_total"] == 3, r
    assert r["pair_file"].endswith("pairs.txt") and r["pairs"] == 3, r
    assert "received" in r["counted_by"]["receiver"] and "lost" in r["counted_by"]["receiver"], r
    assert "sent" in r["counted_by"]["sender"], r
assert tx["local_senders"] == 3 and tx["local_receivers"] == 0, tx
assert rx["local_senders"] == 0 and rx["local_receivers"] == 3, rx
ts, rs = tx["total"], rx["total"]
# The sender side counts sent, nothing received; the receiver side the rest.
assert ts["sent"] > 0 and ts["received"] == 0 and ts["expected"] == 0, ts
assert rs["sent"] == 0 and rx["trailers_missing"] == 0, rx
assert rs["expected"] == ts["sent"], (rs, ts)  # the trailers carry the senders' windows
assert rs["received"] == rs["expected"] and rs["lost"] == 0, rs
assert rs["misrouted"] == 0 and rs["corrupt"] == 0 and rs["duplicated"] == 0, rs
assert tx["offered_mbps"] == 3, tx
# Rates only when the senders kept up (they say when they did not: on a loaded box, ASan):
# counting is checked either way.
if not tx["gen_fell_behind"]:
    assert 0.8 * 3 <= rx["delivered_mbps"] <= 1.2 * 3, rx
    assert 0.8 * 3 <= tx["sent_mbps"] <= 1.2 * 3, tx
else:
    print("note: the senders fell behind their offered rate: rates not checked")
assert abs(tx["window_start_unix"] - rx["window_start_unix"]) < 0.5, (tx, rx)
by_id = {p["pair"]: p for p in tx["per_pair"]}
for p in tx["per_pair"]:
    assert p["sender_here"] and not p["receiver_here"] and p["expected"] == 0, p
for p in rx["per_pair"]:
    assert p["receiver_here"] and not p["sender_here"] and p["trailer"], p
    assert p["expected"] == by_id[p["pair"]]["sent"] == p["received"], (p, by_id)
PY
# Layout cross: each instance runs senders and receivers of different pairs (2 shards each);
# what both sent is what both received.
"$bench" gen-pairs --pairs 4 --instances 2 --layout cross --out "$work/cross.txt" ||
    fail "gen-pairs --layout cross failed"
t=$(python3 -c 'import time; print(f"{time.time() + 1.5:.3f}")')
for i in 0 1; do
    timeout 60 "$bench" --server "$url" --pair-file "$work/cross.txt" --instance "$i" --shards 2 \
        --rate-mbps 4 --duration 1 --warmup 0.5 --start-at "$t" --json >"$work/cross$i.json" \
        2>"$work/cross$i.log" &
    pids+=($!)
    cross[i]=$!
done
wait "${cross[0]}" && wait "${cross[1]}" || fail "a cross-layout instance failed"
python3 - "$work/cross0.json" "$work/cross1.json" <<'PY' || fail "cross layout result"
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
for r in (a, b):
    assert r["local_senders"] == 2 and r["local_receivers"] == 2, r
    assert r["total"]["lost"] == 0 and r["total"]["misrouted"] == 0, r
sent = a["total"]["sent"] + b["total"]["sent"]
assert sent > 0 and a["total"]["received"] + b["total"]["received"] == sent, (a, b)
PY
# Keys: nodekey: for a side run elsewhere is fine; a privkey-less side here is refused.
python3 - "$pf" "$work/pub.txt" <<'PY'
import sys
out = []
for line in open(sys.argv[1]):
    f = line.split()
    if f and f[0] == "pair":  # instance 1's copy: the senders' public keys would do; the
        f[5] = f[5].removeprefix("privkey:")  # receivers' keys as bare hex
        f[4] = "nodekey:" + "0" * 63 + str(f[1])  # not a real public key: fine, never dialled
        line = " ".join(f) + "\n"
    out.append(line)
open(sys.argv[2], "w").write("".join(out))
PY
timeout 30 "$bench" --server "$url" --pair-file "$work/pub.txt" --instance 1 --rate-mbps 1 \
    --duration 0.3 --warmup 0.2 --json >/dev/null 2>"$work/pub.log" ||
    fail "nodekey: senders and bare hex receivers: $(cat "$work/pub.log")"
bad() { # bad NAME PATTERN FILE-CONTENT [extra flags]: refused with exit 2 and PATTERN in stderr
    local name=$1 pattern=$2 content=$3
    shift 3
    printf '%b' "$content" >"$work/$name.txt"
    if "$bench" --server "$url" --pair-file "$work/$name.txt" "$@" >/dev/null 2>"$work/$name.log"
    then fail "pair file $name ran"; fi
    grep -q -- "$pattern" "$work/$name.log" || fail "no clear error for $name: $(cat "$work/$name.log")"
}
k1=$(printf 'privkey:%064x' 1) k2=$(printf 'privkey:%064x' 2)
bad magic 'not a pair file' 'pairs 1\n'
bad empty 'no pairs' 'hderp-bench-pairs 1\ninstances 1\n'
bad order 'line 4: pair 2: pairs must be numbered' \
    "hderp-bench-pairs 1\ninstances 1\npair 0 0 0 $k1 $k2\npair 2 0 0 $k2 $k1\n"
bad dup 'used twice' "hderp-bench-pairs 1\ninstances 1\npair 0 0 0 $k1 $k1\n"
bad key 'line 3: a key is not' "hderp-bench-pairs 1\ninstances 1\npair 0 0 0 $k1 zz\n"
bad fields 'want: pair ID' "hderp-bench-pairs 1\ninstances 1\npair 0 0 $k1 $k2\n"
bad inst 'instance 5 is not below' "hderp-bench-pairs 1\ninstances 2\npair 0 0 5 $k1 $k2\n"
bad which 'say which with --instance' "hderp-bench-pairs 1\ninstances 2\npair 0 0 1 $k1 $k2\n"
bad range '--instance 3: the file has instances 0..1' \
    "hderp-bench-pairs 1\ninstances 2\npair 0 0 1 $k1 $k2\n" --instance 3
bad pub 'only its public key' \
    "hderp-bench-pairs 1\ninstances 1\npair 0 0 0 $(printf 'nodekey:%064x' 1) $k2\n"
bad both '--pairs and --pair-file' "hderp-bench-pairs 1\ninstances 1\npair 0 0 0 $k1 $k2\n" \
    --pairs 2
if "$bench" --server "$url" --pair-file "$work/nonexistent" >/dev/null 2>"$work/missing.log"; then
    fail "a missing pair file ran"
fi
grep -q 'nonexistent: No such file' "$work/missing.log" || fail "no clear error for a missing file"
if "$bench" --server "$url" --instance 1 >/dev/null 2>"$work/noinst.log"; then
    fail "--instance without --pair-file ran"
fi
grep -q -- '--instance needs --pair-file' "$work/noinst.log" || fail "no clear error: --instance"
if "$bench" gen-pairs --pairs 2 --instances 3 --layout sides --out "$work/x.txt" 2>"$work/g.log"
then fail "gen-pairs --layout sides with 3 instances ran"; fi
grep -q 'even --instances' "$work/g.log" || fail "no clear error for an odd sides layout"
echo "ok: bench pair file"
