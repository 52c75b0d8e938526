#!/bin/bash
# run_observe_map.sh BIN WORK - what hderp-server --print-derpmap prints ({"derpMap": ...}) is a
# map hderp-echo observe reads (issue 23: "no Regions object"), and a plain-HTTP node dialled
# with TLS is reported as such ("answered in plain HTTP", not "oversized record"): observe with
# the printed map against a plain-HTTP server says so and reports the path down (exit 1); with
# --derp-http the path is up (exit 0); ping with https:// to it says so too. Bounded waits; the
# server is stopped by PID.
set -u
bin=$1 work=$2
rm -rf "$work" && mkdir -p "$work"
source "$(dirname "$0")/lib.sh"

server_start server -a 127.0.0.1:0 -stun=false -c "$work/derper.key"
p=$srv_port
"$bin/hderp-server" --print-derpmap -a "127.0.0.1:$p" -stun=false >"$work/map.json" \
    2>"$work/print.log" || fail "--print-derpmap: exit code $?"
grep -q '"derpMap"' "$work/map.json" || fail "the printed map has no derpMap key"

timeout 60 "$bin/hderp-echo" observe --derp-map "$work/map.json" --once --duration 2s \
    >"$work/tls.out" 2>"$work/tls.log"
rc=$?
[ "$rc" = 1 ] || fail "observe over TLS to a plain-HTTP node: exit code $rc, expected 1 (down)"
grep -q "answered in plain HTTP where TLS was expected" "$work/tls.log" ||
    fail "observe did not say the node answered in plain HTTP"
grep -q "derp-http" "$work/tls.log" || fail "observe's message does not name --derp-http"
! grep -q "oversized record" "$work/tls.log" || fail "observe still says oversized record"

timeout 60 "$bin/hderp-echo" observe --derp-map "$work/map.json" --derp-http --once \
    --duration 2s >"$work/http.out" 2>"$work/http.log" ||
    fail "observe --derp-http with the printed map: exit code $?"
grep -q "900a->900a.* up " "$work/http.out" || fail "the path is not up: $(cat "$work/http.out")"

key=nodekey:0000000000000000000000000000000000000000000000000000000000000001
timeout 60 "$bin/hderp-echo" ping --server "https://127.0.0.1:$p/derp" --insecure --peer "$key" \
    --count 2 --warmup 0 --timeout 1s >"$work/ping.out" 2>"$work/ping.log"
rc=$?
[ "$rc" = 1 ] || fail "ping over TLS to a plain-HTTP port: exit code $rc, expected 1"
grep -q "answered in plain HTTP" "$work/ping.log" || fail "ping did not say plain HTTP"

stop_pid "$srv_pid"
rc=$?
[ "$rc" = 0 ] || fail "exit code $rc after SIGTERM"
echo "PASS: the printed DERP map read by observe; plain HTTP named when TLS was dialled"
