#!/bin/bash
# run_debug_access.sh BIN WORK - who may read /debug/ besides loopback (docs/DERPER-PARITY.md,
# "/debug/* access"), from addresses that are not loopback ones, in a network namespace of its
# own (unshare -n: nothing but its own lo, given 10.9.0.1-3 and 100.64.0.1): refused by
# default (403); let in by TS_DEBUG_TRUSTED_CIDRS and TS_ALLOW_DEBUG_IP, as derper; Tailscale's
# 100.64.0.1 not let in (derper would: hderp differs on purpose); in -dev the 403 names the
# TS_ALLOW_DEBUG_IP to set; a bad TS_DEBUG_TRUSTED_CIDRS refuses to start, naming it. Needs
# root (CI runs as root). Servers stopped by PID.
set -u
bin=$1 work=$2
if [ -z "${HD_DEBUG_ACCESS_NETNS:-}" ]; then
    HD_DEBUG_ACCESS_NETNS=1 exec unshare -n bash "$0" "$@"
fi
rm -rf "$work" && mkdir -p "$work"
source "$(dirname "$0")/lib.sh"
ip link set lo up || fail "ip link set lo up"
for a in 10.9.0.1 10.9.0.2 10.9.0.3 100.64.0.1; do
    ip addr add "$a/32" dev lo || fail "ip addr add $a"
done

# code SRC PATH: the status of GET http://10.9.0.1:$srv_port/PATH from the address SRC.
code() { curl -s -o "$work/body" -w '%{http_code}' --interface "$1" "http://10.9.0.1:$srv_port$2"; }
# expect SRC PATH STATUS WHAT
expect() {
    local got
    got=$(code "$1" "$2")
    [ "$got" = "$3" ] || fail "$4: GET $2 from $1 answered $got, not $3 ($(cat "$work/body"))"
}
args=(-a 0.0.0.0:0 -stun=false -c "$work/derper.key")

server_start closed "${args[@]}"
expect 127.0.0.1 /debug/varz 200 "loopback"
expect 10.9.0.2 /debug/varz 403 "no knob"
grep -q "debug access denied" "$work/body" || fail "403 body: $(cat "$work/body")"
stop_pid "$srv_pid" || fail "exit code $? after SIGTERM"

TS_DEBUG_TRUSTED_CIDRS=10.9.0.0/24,fd00::/8 server_start cidrs "${args[@]}"
expect 10.9.0.2 /debug/varz 200 "TS_DEBUG_TRUSTED_CIDRS"
expect 10.9.0.2 /debug/ 200 "TS_DEBUG_TRUSTED_CIDRS (index)"
expect 100.64.0.1 /debug/varz 403 "a Tailscale address (not let in)"
stop_pid "$srv_pid" || fail "exit code $? after SIGTERM"

TS_ALLOW_DEBUG_IP=10.9.0.3 server_start oneip "${args[@]}"
expect 10.9.0.3 /debug/check 200 "TS_ALLOW_DEBUG_IP"
expect 10.9.0.2 /debug/check 403 "another address than TS_ALLOW_DEBUG_IP"
stop_pid "$srv_pid" || fail "exit code $? after SIGTERM"

server_start dev -dev "${args[@]}"
expect 10.9.0.2 /debug/ 403 "-dev"
grep -q "set TS_ALLOW_DEBUG_IP=10.9.0.2" "$work/body" || fail "-dev's 403: $(cat "$work/body")"
stop_pid "$srv_pid" || fail "exit code $? after SIGTERM"

TS_DEBUG_TRUSTED_CIDRS=10.9.0.0/33 "$bin/hderp-server" "${args[@]}" >"$work/bad.log" 2>&1
rc=$?
[ "$rc" -ne 0 ] || fail "a bad TS_DEBUG_TRUSTED_CIDRS started"
grep -q 'TS_DEBUG_TRUSTED_CIDRS=10.9.0.0/33: "10.9.0.0/33" is not a prefix' "$work/bad.log" ||
    fail "bad TS_DEBUG_TRUSTED_CIDRS: $(cat "$work/bad.log")"
echo "PASS: /debug/ from non-loopback addresses: refused, TS_DEBUG_TRUSTED_CIDRS," \
    "TS_ALLOW_DEBUG_IP, not Tailscale's 100.64/10, -dev's hint, a bad prefix refused"
