#!/usr/bin/env bash
# run_echo_ping.sh BIN_DIR WORK_DIR plain|tls|wss - hderp-echo echo + ping through a real
# hderp-server: zero loss, sane percentiles, a clear error for an unknown peer. wss: TLS with
# the echo on the WebSocket carrier (wss://) and the pinger on plain DERP. Bounded waits; every
# process is stopped by PID.
set -euo pipefail
bin=$1 work=$2 mode=$3
rm -rf "$work" && mkdir -p "$work" # a stale echo.out would pass the wait before echo writes it
. "$(dirname "$0")/lib.sh"
args=(-a 127.0.0.1:0 -c "$work/derper.key" -stun=false --shards 2)
scheme=http
tlsargs=()
if [ "$mode" = tls ] || [ "$mode" = wss ]; then
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
        -keyout "$work/127.0.0.1.key" -out "$work/127.0.0.1.crt" -subj /CN=127.0.0.1 \
        -addext subjectAltName=IP:127.0.0.1 2>/dev/null
    args+=(-certmode manual -certdir "$work" -hostname 127.0.0.1 -http-port -1)
    scheme=https
    tlsargs=(--ca "$work/127.0.0.1.crt")
fi
server_start server "${args[@]}"
p=$srv_port
url=$scheme://127.0.0.1:$p/derp
wait_probe "${url%/derp}" -k || fail "server did not answer on port $p"
echo_url=$url
[ "$mode" = wss ] && echo_url=wss://${url#https://}
"$bin/hderp-echo" echo --server "$echo_url" "${tlsargs[@]}" >"$work/echo.out" 2>"$work/echo.log" &
pids+=($!)
wait_for 30 test -s "$work/echo.out" || true # the check below says what it printed
key=$(head -1 "$work/echo.out")
[[ $key =~ ^nodekey:[0-9a-f]{64}$ ]] || fail "echo printed '$key', not a nodekey line"
out=$(timeout 60 "$bin/hderp-echo" ping --server "$url" "${tlsargs[@]}" --peer "$key" \
      --count 2000 --warmup 200 --rate 2000 --json 2>"$work/ping.log") || fail "ping failed"
echo "$out"
python3 - "$out" <<'PY' || fail "ping result"
import json, sys
r = json.loads(sys.argv[1])
assert r["sent"] == 2000 and r["measured"] == 1800, r
assert r["lost"] == 0 and r["duplicated"] == 0 and r["misrouted"] == 0, r
assert 0 < r["p50_us"] <= r["p99_us"] <= r["max_us"] < 1e6, r
PY
bare=${key#nodekey:}
if timeout 20 "$bin/hderp-echo" ping --server "$url" "${tlsargs[@]}" \
       --peer "$(printf '%064x' 7)" --count 5 --warmup 1 >/dev/null 2>"$work/unknown.log"; then
    fail "ping to an unknown peer succeeded"
fi
grep -q 'not on this relay' "$work/unknown.log" || fail "no clear error for an unknown peer"
# bare hex keys are accepted too
timeout 30 "$bin/hderp-echo" ping --server "$url" "${tlsargs[@]}" --peer "$bare" --count 50 \
    --warmup 5 >/dev/null 2>>"$work/ping.log" || fail "ping with a bare hex key"
if [ "$mode" = wss ]; then
    grep -q "logged in to wss://" "$work/echo.log" || fail "the echo did not log in over wss"
fi
echo "ok: echo/ping $mode"
