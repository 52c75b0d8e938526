#!/bin/bash
# run-peergone-callgrind.sh BIN OUT - the cost of one departure (PeerGone, spec §6.7) with
# IDLE (default 10,000) other clients connected to the same shard. hderp-server runs under
# callgrind with one shard, instrumentation off until the clients are in, and collecting only
# inside gone_event (--toggle-collect). Then an echo peer and a pinger log in; the pinger sends
# N pings and leaves (the echo peer, subscribed to it, gets one PeerGone), then the echo peer
# leaves (nobody subscribed): 2 departures. The dump's total is gone_event's instructions for
# both. CLIENTS=DIR takes hderp-bench and hderp-echo from DIR. Needs ulimit -n above IDLE + 100.
# MESH=1: the server also has a mesh key and a second (plain, uninstrumented) node meshed with
# it, whose watch link is a watcher on the measured shard, so each departure also goes to a
# watcher (watchers hear of local departures: spec §6.8). The server's port is held for it (it
# runs under valgrind: lib.sh, server_start_probed), with MESH=1 the second node's too (the
# -mesh-with list names both before either starts). Every process is stopped by PID.
set -u
here=$(cd "$(dirname "$0")" && pwd)
B=$1; OUT=$2; C=${CLIENTS:-$B}; IDLE=${IDLE:-10000}; N=${N:-20}
T=$(mktemp -d); cd $T
work=$T
. "$here/lib.sh"
MESHARGS=()
port_hold; A1=$held_port # under valgrind: a held port, probed (lib.sh, server_start_probed)
if [ "${MESH:-0}" = 1 ]; then
    echo 00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff > mesh.key
    port_hold; A2=$held_port
    MESHARGS=(-mesh-psk-file mesh.key -mesh-with http://127.0.0.1:$A1,http://127.0.0.1:$A2)
fi
server_start_probed s $A1 valgrind --tool=callgrind --instr-atstart=no \
    --toggle-collect=gone_event --callgrind-out-file=$OUT $B/hderp-server -a 127.0.0.1:$A1 \
    -stun=false --shards 1 -c k1 "${MESHARGS[@]}"
SP=$srv_pid PORT=$srv_port
U=http://127.0.0.1:$PORT/derp
NP=""
if [ "${MESH:-0}" = 1 ]; then
    server_start s2 $B/hderp-server -a 127.0.0.1:$A2 -stun=false --shards 1 -c k2 "${MESHARGS[@]}"
    NP=$srv_pid
fi
varz() { varz_of http://127.0.0.1:$PORT "$1"; }
GP=""; left=$IDLE; want=0
while [ $left -gt 0 ]; do  # generators of 1 pair + idle peers, one after another: each must
    n=$(( left > 500 ? 500 : left )); [ $n -lt 2 ] && n=2  # log all in within 10 s
    timeout 3000 $C/hderp-bench --server $U --pairs 1 --peers $n --rate-mbps 0.01 --size 100 \
        --warmup 0 --duration 2400 > gen-$left.log 2>&1 & GP="$GP $!"
    left=$(( left - n )); want=$(( want + n ))
    for i in $(seq 120); do c=$(varz derp_current_connections); [ "${c:-0}" -ge $want ] && break; sleep 0.5; done
    [ "${c:-0}" -ge $want ] || { echo "only ${c:-0} of $want connected"; cat gen-*.log; break; }
done
if [ -n "$NP" ]; then
    for i in $(seq 150); do [ "$(varz derp_watchers)" = 1 ] && break; sleep 0.2; done
    echo "$(date +%T) watchers on the measured shard: $(varz derp_watchers)"
fi
echo "$(date +%T) connected: $(varz derp_current_connections)"
callgrind_control -i on $SP > /dev/null
C0=$(varz derp_current_connections)
$C/hderp-echo echo --server $U > echo.log 2>&1 & EP=$!
wait_for 30 grep -q nodekey: echo.log || perf_die "the echo peer did not log in (echo.log)"
KEY=$(grep -o 'nodekey:[0-9a-f]*' echo.log | head -1)
G0=$(varz derp_peer_gone_disconnected_frames)
timeout 120 $C/hderp-echo ping --server $U --peer $KEY --count $N --warmup 0 --interval 5 2>&1 | tail -1
for i in $(seq 100); do [ "$(varz derp_peer_gone_disconnected_frames)" -gt "$G0" ] && break; sleep 0.2; done
stop_pid $EP
gone() { [ "$(varz derp_current_connections)" -le "$C0" ] 2>/dev/null; } # echo, pinger left
wait_for 60 gone || echo "$(date +%T) the echo peer's departure is not counted yet"
echo "$(date +%T) peer_gone_disconnected_frames: $G0 -> $(varz derp_peer_gone_disconnected_frames)"
callgrind_control -i off $SP > /dev/null
# -d returns once the dump is written (vgdb waits for the monitor command's answer); then
# KILL: a TERM would have valgrind stop 10,000 connections first, slowly.
callgrind_control -d $SP > /dev/null; echo "$(date +%T) dumped"
kill -KILL $SP; wait $SP 2>/dev/null
for p in $GP $NP; do kill $p 2>/dev/null; done; wait $GP $NP 2>/dev/null
perf_cleanup
# the dump taken by -d (OUT.1); OUT itself holds only the (uninstrumented) rest
D=$(ls $OUT.* 2>/dev/null | head -1); [ -n "$D" ] || D=$OUT
echo "gone_event instructions (2 departures): $(callgrind_annotate $D 2>/dev/null | awk '/PROGRAM TOTALS/ {print $1}')"
rm -rf "$T"
