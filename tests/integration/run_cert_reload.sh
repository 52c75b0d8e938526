#!/usr/bin/env bash
# run_cert_reload.sh BIN_DIR WORK_DIR - TLS mode reloads its certificate on SIGHUP: a new
# handshake gets the new certificate (and still the meta certificate after it), a DERP
# connection made before the reload keeps working, and a broken file on reload is logged and the
# previous certificate stays. Real processes, stopped by PID; every wait is bounded.
set -euo pipefail
bin=$1 work=$2
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work"
. "$here/lib.sh"
# cert NAME: a self-signed certificate for localhost in NAME.crt/.key
cert() {
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
        -keyout "$work/$1.key" -out "$work/$1.crt" -subj "/CN=localhost/O=$1" \
        -addext subjectAltName=DNS:localhost 2>/dev/null
}
# served: the leaf's organisation and the number of certificates in the chain
served() {
    echo | timeout 10 openssl s_client -connect "127.0.0.1:$p" -servername localhost -showcerts \
        2>/dev/null >"$work/chain.txt" || true
    local org
    org=$(sed -n '/BEGIN CERT/,/END CERT/p' "$work/chain.txt" | openssl x509 -noout -subject \
        2>/dev/null | grep -o 'O = [a-z]*' | cut -d' ' -f3) || true
    echo "$org $(grep -c 'BEGIN CERT' "$work/chain.txt")"
}
cert one
cert two
mkdir "$work/certs"
cp "$work/one.crt" "$work/certs/localhost.crt"
cp "$work/one.key" "$work/certs/localhost.key"
server_start server -a 127.0.0.1:0 -c "$work/derper.key" -stun=false --shards 2 \
    -certmode manual -certdir "$work/certs" -hostname localhost -http-port 0
pid=$srv_pid p=$srv_port
[ "$(served)" = "one 2" ] || fail "before the reload: served $(served), want one + meta"

# A DERP connection from before the reload: an echo peer over TLS.
"$bin/hderp-echo" echo --server "https://localhost:$p/derp" --ca "$work/one.crt" \
    >"$work/echo.log" 2>&1 &
pids+=($!)
wait_for 30 grep -q '^nodekey:' "$work/echo.log" || true # the next line says what went wrong
peer=$(grep -m1 '^nodekey:' "$work/echo.log") || fail "the echo peer did not log in"

cp "$work/two.crt" "$work/certs/localhost.crt"
cp "$work/two.key" "$work/certs/localhost.key"
kill -HUP "$pid"
served_two() { [ "$(served)" = "two 2" ]; }
wait_for 10 served_two || fail "after SIGHUP: served '$(served)', want two + meta"
grep -q "TLS: reloaded" "$work/server.log" || fail "no reload line in the log"
# The old connection still relays: a ping over a new connection (verified with the new cert).
timeout 30 "$bin/hderp-echo" ping --server "https://localhost:$p/derp" --ca "$work/two.crt" \
    --peer "$peer" --count 20 --warmup 2 --json >"$work/ping.json" 2>"$work/ping.log" ||
    fail "ping through the echo connected before the reload failed"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(d["lost"] != 0)' \
    "$work/ping.json" || fail "ping lost packets: $(cat "$work/ping.json")"

# A broken certificate file on reload: logged, the previous one stays.
echo "not a certificate" >"$work/certs/localhost.crt"
kill -HUP "$pid"
wait_for 30 grep -q "TLS reload failed" "$work/server.log" || true # checked on the next line
grep -q "TLS reload failed, keeping the previous certificate" "$work/server.log" ||
    fail "no error logged for a broken certificate"
[ "$(served)" = "two 2" ] || fail "after a failed reload: served $(served), want two + meta"
rc=0
stop_pid "$pid" || rc=$?
[ "$rc" = 0 ] || fail "server exit code $rc after SIGTERM"
echo "PASS: certificate reload"
