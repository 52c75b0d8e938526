#!/usr/bin/env bash
# run_check.sh BIN_DIR WORK_DIR - `hderp-server check URL` against good and broken servers on
# loopback: a TLS node (verified with --ca: PASS), two plain nodes meshed with each other (PASS,
# mesh 1 of 1 ready), then what must FAIL with exit 1 and name the failing check: the TLS node
# without its CA (tls), a node without STUN (stun), a node whose mesh peer is gone (mesh), an
# HTTP server that is not DERP (upgrade, generate_204). Stopped by PID; bounded waits.
set -euo pipefail
bin=$1 work=$2
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$work"
. "$here/lib.sh"
srv=$bin/hderp-server
openssl rand -hex 32 >"$work/mesh.key"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 \
    -keyout "$work/localhost.key" -out "$work/localhost.crt" -subj /CN=localhost \
    -addext subjectAltName=DNS:localhost 2>/dev/null
server_start tls -a 127.0.0.1:0 -certmode manual -certdir "$work" -hostname localhost \
    -http-port 0 -stun-port 0 -c "$work/t.key" --shards 2
t=$srv_port ts=$srv_stun
# A and B name each other in -mesh-with, so their ports are held before either starts (and
# stay held: B's port must not go to anyone else once B is killed below).
port_hold
a=$held_port
port_hold
b=$held_port
mesh=http://127.0.0.1:$a,http://127.0.0.1:$b
server_start a -a "127.0.0.1:$a" -stun-port 0 -c "$work/a.key" -mesh-psk-file "$work/mesh.key" \
    -mesh-with "$mesh" --shards 2
as=$srv_stun
server_start b -a "127.0.0.1:$b" -stun-port 0 -c "$work/b.key" -mesh-psk-file "$work/mesh.key" \
    -mesh-with "$mesh" --shards 1
bpid=$srv_pid
server_start nostun -a 127.0.0.1:0 -stun=false -c "$work/n.key"
n=$srv_port
python3 -u -m http.server --bind 127.0.0.1 0 --directory "$work" >"$work/web.log" 2>&1 &
pids+=($!)
wait_for "$START_S" grep -q 'port [0-9]' "$work/web.log" || fail "the web server did not start"
ns=$(grep -o 'port [0-9]*' "$work/web.log" | head -1 | cut -d' ' -f2)
wait_probe "https://localhost:$t" --cacert "$work/localhost.crt" \
    --resolve "localhost:$t:127.0.0.1" || fail "TLS node not up"
for p in "$a" "$b" "$n"; do wait_probe "http://127.0.0.1:$p" || fail "node :$p not up"; done
ready() { [ "$(varz "http://127.0.0.1:$1" derp_mesh_links_ready)" = "$2" ]; }
wait_for 10 ready "$a" 1 || fail "node A's mesh link never came up"

# expect_check EXIT NAME... -- check args: run it, require the exit code, and each NAME's line
# to say FAIL when EXIT is 1 (and the verdict to match).
expect_check() {
    local want=$1
    shift
    local names=()
    while [ "$1" != -- ]; do names+=("$1"); shift; done
    shift
    local rc=0
    "$srv" check --timeout 5s "$@" >"$work/check.out" 2>&1 || rc=$?
    cat "$work/check.out"
    [ "$rc" = "$want" ] || fail "check $* exited $rc, want $want"
    for x in "${names[@]}"; do
        grep -Eq "^  FAIL +$x:" "$work/check.out" || fail "check $*: no FAIL line for $x"
    done
    if [ "$want" = 0 ]; then
        grep -q '^verdict: PASS' "$work/check.out" || fail "check $*: no PASS verdict"
        if grep -q '^  FAIL' "$work/check.out"; then fail "check $*: a FAIL line"; fi
    elif [ "$want" = 1 ]; then
        grep -q '^verdict: FAIL' "$work/check.out" || fail "check $*: no FAIL verdict"
    fi
}
expect_check 0 -- --ca "$work/localhost.crt" --stun-port "$ts" "https://localhost:$t/derp"
grep -Eq '^  ok +tls: .*verified; expires .*\((29|30) days\)' "$work/check.out" ||
    fail "the tls line does not give the expiry"
grep -Eq '^  ok +mesh: no -mesh-with peers configured' "$work/check.out" || fail "mesh line"
expect_check 0 -- --stun-port "$as" "http://127.0.0.1:$a"
grep -Eq '^  ok +mesh: 1 of 1 links ready' "$work/check.out" || fail "mesh: not 1 of 1 ready"
grep -Eq '^  ok +packets: 20/20 A->B, 20/20 B->A' "$work/check.out" || fail "packets line"

# Broken ones.
SSL_CERT_FILE=/dev/null expect_check 1 tls -- --stun-port "$ts" "https://localhost:$t/derp"
port_hold udp # a UDP port where nothing answers, held so that no STUN server can be there
expect_check 1 stun -- --stun-port "$held_port" "http://127.0.0.1:$n"
stop_pid "$bpid" || true
wait_for 10 ready "$a" 0 || true # the check below says what it sees
expect_check 1 mesh -- --stun-port "$as" "http://127.0.0.1:$a"
grep -Eq '^  FAIL +mesh: 0 of 1 links ready' "$work/check.out" || fail "mesh: not 0 of 1"
expect_check 1 generate_204 upgrade packets ping -- --stun-port 0 "http://127.0.0.1:$ns"
expect_check 2 -- --bogus-flag "http://127.0.0.1:$ns"
echo "ok: check passes good servers and names what is broken in the others"
