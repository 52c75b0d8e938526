#!/bin/bash
# run_derper_parity.sh BIN WORK - behaviours of derper v1.102.5 that hderp-server matches
# (docs/DERPER-PARITY.md): /bootstrap-dns answers as derper without -bootstrap-dns-names (200,
# JSON, empty, closed); CONNECT is refused as derper without -ace (403 "CONNECT not enabled");
# the mesh key is read from derper's default -mesh-psk-file ($HOME/keys/derp-mesh.key) when the
# flag is not given, and -mesh-psk-file "" turns that off; an IP -hostname in -certmode manual
# gets a self-signed certificate kept in -certdir and pinned by the CertName it logs; a client's
# TCP round trip is counted in derp_tcp_rtt every 10 s (not with TS_DERP_DISABLE_RTT_STATS);
# derp_current_file_descriptors counts the process's descriptors; derper's debug knobs hderp
# does not honour (TS_DEBUG_DERP_PER_CLIENT_SEND_QUEUE_DEPTH, DERP_DEBUG_LOGS,
# DERP_PROBER_DEBUG_LOGS, TS_DEBUG_VERBOSE_DROPS) are each named in one line at start.
# Servers stopped by PID.
set -u
bin=$1 work=$2
rm -rf "$work" && mkdir -p "$work/home/keys"
source "$(dirname "$0")/lib.sh"

server_start plain -a 127.0.0.1:0 -stun=false -c "$work/derper.key"
p=$srv_port
curl -s -D "$work/bdns.head" -o "$work/bdns.body" "http://127.0.0.1:$p/bootstrap-dns?q=a.example" ||
    fail "/bootstrap-dns: curl $?"
head -1 "$work/bdns.head" | grep -q "^HTTP/1.1 200" || fail "/bootstrap-dns: $(head -1 "$work/bdns.head")"
grep -qi "^Content-Type: application/json" "$work/bdns.head" || fail "/bootstrap-dns: not JSON"
grep -qi "^Connection: close" "$work/bdns.head" || fail "/bootstrap-dns: connection kept"
[ ! -s "$work/bdns.body" ] || fail "/bootstrap-dns: a body: $(cat "$work/bdns.body")"
printf 'CONNECT controlplane.tailscale.com:443 HTTP/1.1\r\nHost: controlplane.tailscale.com\r\n\r\n' |
    timeout 10 python3 -c '
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(sys.stdin.buffer.read())
out = b""
while True:
    b = s.recv(4096)
    if not b:
        break
    out += b
sys.stdout.write(out.decode(errors="replace"))' "$p" >"$work/connect.out" || fail "CONNECT: no answer"
head -1 "$work/connect.out" | grep -q "^HTTP/1.1 403" || fail "CONNECT: $(head -1 "$work/connect.out")"
grep -q "CONNECT not enabled" "$work/connect.out" || fail "CONNECT: $(cat "$work/connect.out")"
stop_pid "$srv_pid" || fail "exit code $? after SIGTERM"

# derper's default -mesh-psk-file: $HOME/keys/derp-mesh.key (/home/derp/keys/... first).
[ -e /home/derp/keys/derp-mesh.key ] && fail "/home/derp/keys/derp-mesh.key exists here: it wins"
echo 00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff >"$work/home/keys/derp-mesh.key"
HOME=$work/home server_start meshdefault -a 127.0.0.1:0 -stun=false -c "$work/derper.key"
grep -q "mesh key from $work/home/keys/derp-mesh.key (derper's default" "$work/meshdefault.log" ||
    fail "the default mesh key file was not read"
grep -q "mesh key set" "$work/meshdefault.log" || fail "no mesh key with the default file"
stop_pid "$srv_pid" || fail "exit code $? after SIGTERM"
HOME=$work/home server_start meshoff -a 127.0.0.1:0 -stun=false -c "$work/derper.key" \
    -mesh-psk-file ""
grep -q "mesh key none" "$work/meshoff.log" || fail "-mesh-psk-file \"\" did not turn it off"
stop_pid "$srv_pid" || fail "exit code $? after SIGTERM"

# -certmode manual with an IP -hostname and no files: a self-signed certificate written to
# -certdir (made 0700; key 0600), the same across a restart, its CertName logged as derper does
# and printed by --print-derpmap, and it is the certificate served (its DER's SHA-256).
ipargs=(-certmode manual -certdir "$work/ipcerts/sub" -hostname 127.0.0.1 -http-port -1
    -stun=false -c "$work/derper.key")
server_start ip1 -a 127.0.0.1:0 "${ipargs[@]}"
p=$srv_port
[ "$(stat -c %a "$work/ipcerts/sub")" = 700 ] || fail "-certdir not made 0700"
[ "$(stat -c %a "$work/ipcerts/sub/127.0.0.1.key")" = 600 ] || fail "the key is not 0600"
pin=$(grep -o 'sha256-raw:[0-9a-f]\{64\}' "$work/ip1.log" | head -1)
[ -n "$pin" ] || fail "no CertName logged for the IP certificate"
grep -q '"HostName":"127.0.0.1","CertName":"sha256-raw:' "$work/ip1.log" ||
    fail "the DERPMap line is not logged"
served=$(python3 -c '
import hashlib, socket, ssl, sys
ctx = ssl._create_unverified_context()
with ctx.wrap_socket(socket.create_connection(("127.0.0.1", int(sys.argv[1]))),
                     server_hostname="127.0.0.1") as t:
    print("sha256-raw:" + hashlib.sha256(t.getpeercert(binary_form=True)).hexdigest())' "$p")
[ "$served" = "$pin" ] || fail "served $served, logged $pin"
stop_pid "$srv_pid" || fail "exit code $? after SIGTERM"
server_start ip2 -a 127.0.0.1:0 "${ipargs[@]}"
grep -q "$pin" "$work/ip2.log" || fail "a restart changed the certificate"
stop_pid "$srv_pid" || fail "exit code $? after SIGTERM"
"$bin/hderp-server" --print-derpmap -a 127.0.0.1:443 "${ipargs[@]}" >"$work/ipmap.json" \
    2>"$work/ipmap.log" || fail "--print-derpmap: exit code $?"
grep -q "\"CertName\": \"$pin\"" "$work/ipmap.json" || fail "--print-derpmap: no $pin"

# derp_tcp_rtt: a logged-in client's TCP_INFO round trip every 10 s (loopback: the 10ms
# bucket); none with TS_DERP_DISABLE_RTT_STATS. The server without it gets its client first, so
# when the other has counted one, this one's client has been logged in longer.
# echo_client NAME PORT: hderp-echo echo logged in to the server on PORT (its key printed).
echo_client() {
    "$bin/hderp-echo" echo --server "http://127.0.0.1:$2/derp" >"$work/$1.out" 2>"$work/$1.log" &
    pids+=($!)
    wait_for 30 test -s "$work/$1.out" || fail "$1: the echo client did not log in"
}
TS_DERP_DISABLE_RTT_STATS=true server_start rttoff -a 127.0.0.1:0 -stun=false \
    -c "$work/derper.key"
off_port=$srv_port off_pid=$srv_pid
echo_client echooff "$off_port"
server_start rtt -a 127.0.0.1:0 -stun=false -c "$work/derper.key"
echo_client echoon "$srv_port"
rtt_counted() { [ "$(varz "http://127.0.0.1:$srv_port" 'derp_tcp_rtt{le="10ms"}')" -ge 1 ] 2>/dev/null; }
wait_for 60 rtt_counted || fail "no derp_tcp_rtt{le=\"10ms\"} after a client was logged in 10 s"
curl -s "http://127.0.0.1:$off_port/debug/varz" | grep -q '^derp_tcp_rtt{' &&
    fail "derp_tcp_rtt counted with TS_DERP_DISABLE_RTT_STATS"
# derp_current_file_descriptors: the process's open descriptors, as /proc lists them (give or
# take the scrape's own connection and the listing's).
fds=$(varz "http://127.0.0.1:$srv_port" derp_current_file_descriptors)
now=$(ls "/proc/$srv_pid/fd" | wc -l)
[ -n "$fds" ] && [ "$fds" -gt 0 ] && [ "$fds" -ge $((now - 4)) ] && [ "$fds" -le $((now + 4)) ] ||
    fail "derp_current_file_descriptors '$fds', /proc/$srv_pid/fd lists $now"
stop_pid "$srv_pid" || fail "exit code $? after SIGTERM"
stop_pid "$off_pid" || fail "exit code $? after SIGTERM (rtt off)"
grep -q "ignored here" "$work/rtt.log" && fail "a knob named at start though none was set"
TS_DEBUG_DERP_PER_CLIENT_SEND_QUEUE_DEPTH=64 DERP_DEBUG_LOGS=true DERP_PROBER_DEBUG_LOGS=1 \
    TS_DEBUG_VERBOSE_DROPS=nodekey:00 server_start knobs -a 127.0.0.1:0 -stun=false \
    -c "$work/derper.key"
for k in TS_DEBUG_DERP_PER_CLIENT_SEND_QUEUE_DEPTH=64 DERP_DEBUG_LOGS=true \
    DERP_PROBER_DEBUG_LOGS=1 TS_DEBUG_VERBOSE_DROPS=nodekey:00; do
    [ "$(grep -c "^hderp-server: $k is derper's and ignored here: " "$work/knobs.log")" = 1 ] ||
        fail "$k: not named once at start: $(cat "$work/knobs.log")"
done
stop_pid "$srv_pid" || fail "exit code $? after SIGTERM (knobs)"
echo "PASS: /bootstrap-dns, CONNECT, the default mesh key file, the IP certificate and its" \
    "CertName, derp_tcp_rtt, derp_current_file_descriptors, as derper v1.102.5; derper's debug knobs named"
