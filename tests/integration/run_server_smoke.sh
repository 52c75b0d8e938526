#!/usr/bin/env bash
# run_server_smoke.sh BIN_DIR WORK_DIR plain|tls - start a real hderp-server on loopback port 0
# (the ports it bound read back), drive it with curl and the independent Python DERP client,
# check /debug/varz, stop it with SIGTERM by PID and require a clean exit 0. Every wait is
# bounded.
set -euo pipefail
bin=$1 work=$2 mode=$3
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$work"
. "$here/lib.sh"
args=(-a 127.0.0.1:0 -c "$work/derper.key" -stun-port 0 --shards 2)
ca=""
if [ "$mode" = tls ]; then
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
        -keyout "$work/localhost.key" -out "$work/localhost.crt" -subj /CN=localhost \
        -addext subjectAltName=DNS:localhost 2>/dev/null
    args+=(-certmode manual -certdir "$work" -hostname localhost -http-port 0)
    ca=$work/localhost.crt
fi
server_start server "${args[@]}"
pid=$srv_pid p=$srv_port sp=$srv_stun
url=http://127.0.0.1:$p
curl_tls=()
if [ "$mode" = tls ]; then
    url=https://localhost:$p
    curl_tls=(--cacert "$work/localhost.crt" --resolve "localhost:$p:127.0.0.1")
fi
code=$(curl -s "${curl_tls[@]}" -o /dev/null -w '%{http_code}' "$url/derp/probe") || true
[ "$code" = 200 ] || fail "/derp/probe answered $code"
if [ "$mode" = tls ]; then # -hostname is a DNS name: a handshake without that SNI is refused
    code=$(curl -sk -o /dev/null -w '%{http_code}' "https://127.0.0.1:$p/derp/probe") || true
    [ "$code" = 000 ] || fail "a connection without SNI got HTTP $code"
fi
if [ "$mode" = tls ]; then # the meta certificate (spec §1.2) follows the chain
    echo | timeout 10 openssl s_client -connect "127.0.0.1:$p" -servername localhost -showcerts \
        2>/dev/null >"$work/chain.txt" || true
    [ "$(grep -c 'BEGIN CERT' "$work/chain.txt")" = 2 ] || fail "chain is not leaf + meta cert"
    awk '/BEGIN CERT/{n++} n==2' "$work/chain.txt" | sed -n '/BEGIN/,/END/p' >"$work/meta.pem"
    key=$(grep -o 'public key nodekey:[0-9a-f]*' "$work/server.log" | cut -d: -f2)
    meta=$(openssl x509 -in "$work/meta.pem" -noout -subject -serial -text)
    grep -q "CN = derpkey$key" <<<"$meta" || fail "meta cert subject: $(echo "$meta" | head -1)"
    grep -q '^serial=02$' <<<"$meta" || fail "meta cert serial"
    [ "$(echo "$meta" | grep -c 'X509v3 ')" = 2 ] || fail "meta cert: not exactly one extension"
    grep -q 'CA:FALSE' <<<"$meta" || fail "meta cert: basicConstraints"
    # Validity: now - 30 days .. now + 30 days (spec §1.2), within a minute of slack.
    nb=$(date -d "$(openssl x509 -in "$work/meta.pem" -noout -startdate | cut -d= -f2)" +%s)
    na=$(date -d "$(openssl x509 -in "$work/meta.pem" -noout -enddate | cut -d= -f2)" +%s)
    now=$(date +%s) month=$((30 * 86400))
    [ $((nb - (now - month))) -ge -60 ] && [ $((nb - (now - month))) -le 60 ] ||
        fail "meta cert notBefore $nb is not now - 30 days ($((now - month)))"
    [ $((na - (now + month))) -ge -60 ] && [ $((na - (now + month))) -le 60 ] ||
        fail "meta cert notAfter $na is not now + 30 days ($((now + month)))"
fi
code=$(curl -s "${curl_tls[@]}" -o /dev/null -w '%{http_code}' "$url/derp") || true
[ "$code" = 426 ] || fail "GET /derp without Upgrade answered $code, want 426"
resp=$(curl -s "${curl_tls[@]}" -D - -o /dev/null -H 'X-Tailscale-Challenge: ts_abc' "$url/generate_204")
grep -q '^HTTP/1.1 204' <<<"$resp" || fail "generate_204: $resp"
echo "$resp" | grep -qi '^X-Tailscale-Response: response ts_abc' || fail "no challenge response"
timeout 60 python3 "$here/derp_smoke.py" "$p" $ca || fail "DERP client"
# STUN (spec §10, Appendix B request): one XOR-MAPPED-ADDRESS with our own address and port,
# family 1; a request without SOFTWARE=tailnode gets no answer.
timeout 20 python3 - "$sp" <<'PY' || fail "STUN"
import socket, struct, sys
port = int(sys.argv[1])
req = bytes.fromhex('000100142112a442000102030405060708090a0b'
                    '802200087461696c6e6f6465' '80280004' '8aabad90')
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(3)
s.bind(('127.0.0.1', 0)); me = s.getsockname()
s.sendto(req, ('127.0.0.1', port))
d, _ = s.recvfrom(100)
assert len(d) == 32 and d[:2] == b'\x01\x01' and d[8:20] == req[8:20], d.hex()
assert d[20:24] == bytes.fromhex('00200008') and d[25] == 1, d.hex()
xport = struct.unpack('>H', d[26:28])[0] ^ 0x2112
xip = bytes(a ^ b for a, b in zip(d[28:32], bytes.fromhex('2112a442')))
assert (socket.inet_ntoa(xip), xport) == me, (xip, xport, me)
s.sendto(req[:20] + bytes.fromhex('80280004') + b'\0\0\0\0', ('127.0.0.1', port))
try:
    s.recvfrom(100); sys.exit('answered a request without SOFTWARE')
except socket.timeout:
    pass
PY
varz=$(curl -s "${curl_tls[@]}" "$url/debug/varz")
grep -q '^derp_packets_sent 100$' <<<"$varz" || fail "varz packets_sent: $(echo "$varz" | grep packets_sent)"
grep -q '^hderp_loop_stalls{shard="0"} [0-9]' <<<"$varz" || fail "varz has no stall counter"
# derp_smoke.py checked the NotHere count against the client's (3, more only if the server took
# over a second for the 6 discos: the rate limit refills): here it is still there, at most 6.
nh=$(echo "$varz" | awk '$1 == "derp_peer_gone_not_here_frames" {print $2}')
[ -n "$nh" ] && [ "$nh" -ge 3 ] && [ "$nh" -le 6 ] ||
    fail "varz NotHere count: $(echo "$varz" | grep -E 'not_here|placement|stalls' | tr '\n' ' ')"
rc=0
stop_pid "$pid" || rc=$?
trap - EXIT
[ "$rc" = 0 ] || fail "server exit code $rc after SIGTERM"
grep -q 'stopped' "$work/server.log" || fail "no clean stop in the log"
echo "ok: $mode smoke"
