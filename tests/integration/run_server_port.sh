#!/bin/bash
# run_server_port.sh BIN WORK - a second hderp-server on an address where one already listens
# fails at start-up with "address in use" (as derper does; SO_REUSEPORT alone would let it in
# and split the connections), also for the dual-stack ":port" form, and the first one keeps
# serving; once the first stopped, a new one starts there. Issue 16 item 4. Also: the deadline
# flags refuse values under their lower bound. Servers started here are stopped by PID. The port
# is held (port_hold: an idle SO_REUSEADDR socket, which hderp-server binds beside) from before
# the first server until the third listens, so nobody else takes it while the first is gone.
# A server on port 0 upgraded (SIGUSR2) names the same ports afterwards. A second server on a
# STUN port in use is refused too.
set -u
bin=$1 work=$2
rm -rf "$work" && mkdir -p "$work"
source "$(dirname "$0")/lib.sh"

port_hold
p=$held_port
server_start first -a "127.0.0.1:$p" -stun=false -c "$work/key1" --shards 2
for a in "127.0.0.1:$p" ":$p"; do
    timeout 20 "$bin/hderp-server" -a "$a" -stun=false -c "$work/key2" >"$work/second.log" 2>&1
    rc=$?
    [ "$rc" = 1 ] || fail "a second server on $a: exit code $rc, expected 1"
    grep -q "address in use" "$work/second.log" || fail "a second server on $a: no 'address in use'"
done
for _ in $(seq 20); do # the first one still answers every time (both its shards)
    curl -sf -o /dev/null "http://127.0.0.1:$p/derp/probe" || fail "the first server stopped answering"
done
stop_pid "${pids[0]}"
rc=$?
[ "$rc" = 0 ] || fail "the first server: exit code $rc after SIGTERM"
server_start third -a "127.0.0.1:$p" -stun=false -c "$work/key2" # fails the test if it cannot
port_release "$p"
stop_pid "$srv_pid" # the third (stop_pid took the first out of pids)

# -stun-port: a second server on the UDP port where one serves STUN fails the same way (its
# shards' SO_REUSEPORT would have joined the first one's group and split the datagrams; issue 24
# item 4), also for ":port"; the first one's own shards did not trip it (it started).
server_start stun1 -a 127.0.0.1:0 -stun-port 0 -c "$work/key5" --shards 2
stun_pid=$srv_pid stun_port=$srv_stun
for a in 127.0.0.1:0 :0; do
    timeout 20 "$bin/hderp-server" -a "$a" -stun-port "$stun_port" -c "$work/key6" \
        >"$work/stun2.log" 2>&1
    rc=$?
    [ "$rc" = 1 ] || fail "a second server on STUN port $stun_port (-a $a): exit code $rc, expected 1"
    grep -q -- "-stun-port .*:$stun_port: address in use" "$work/stun2.log" ||
        fail "a second server on STUN port $stun_port (-a $a): no 'address in use': $(cat "$work/stun2.log")"
done
stop_pid "$stun_pid"
# -stun-port -1 is no STUN (as in the DERP map; it used to bind UDP 65535): two such servers
# run side by side.
server_start nostun1 -a 127.0.0.1:0 -stun-port -1 -c "$work/key7"
[ -z "$srv_stun" ] || fail "-stun-port -1: STUN on port $srv_stun"
nostun=$srv_pid
server_start nostun2 -a 127.0.0.1:0 -stun-port -1 -c "$work/key8"
stop_pid "$srv_pid"
stop_pid "$nostun"

for flag in --http-deadline --login-deadline; do
    timeout 20 "$bin/hderp-server" -a 127.0.0.1:0 -stun=false -c "$work/key3" $flag 50ms \
        >"$work/low.log" 2>&1
    rc=$?
    [ "$rc" = 2 ] || fail "$flag 50ms: exit code $rc, expected 2"
    grep -q "at least 100ms" "$work/low.log" || fail "$flag 50ms: no lower-bound message"
done
# An upgrade of a server started on port 0: the successor names in --port-file (and its start-up
# line) the ports it inherited, not port 0.
server_start zero -a 127.0.0.1:0 -stun-port 0 -c "$work/key4" --pid-file "$work/zero.pid"
old=$srv_pid zero_derp=$srv_port zero_stun=$srv_stun
wait_for 10 test -s "$work/zero.pid" || fail "no pid file"
rm -f "$work/zero.ports"
kill -USR2 "$old"
wait_for 30 pid_gone "$old" || fail "the old process did not exit after SIGUSR2"
new=$(cat "$work/zero.pid")
[ "$new" != "$old" ] || fail "the pid file still names the old process"
pids+=("$new")
wait_for 10 test -s "$work/zero.ports" || fail "the successor wrote no --port-file"
[ "$(port_of "$work/zero.ports" derp)" = "$zero_derp" ] && [ "$(port_of "$work/zero.ports" stun)" = "$zero_stun" ] ||
    fail "after the upgrade --port-file says $(tr '\n' ' ' <"$work/zero.ports"), expected derp $zero_derp stun $zero_stun"
curl -sf -o /dev/null "http://127.0.0.1:$zero_derp/derp/probe" || fail "the successor does not answer"
stop_pid "$new"
echo "PASS: one server per address and STUN port; deadline flags bounded; port 0 kept across an upgrade"
