#!/bin/bash
# run-peergone-mesh-callgrind.sh BIN OUT - the cost of a dropped mesh link (spec §7): node 1
# (one shard, under callgrind, instrumentation off until everyone is in, collecting only inside
# srv_forwarder_remove_node) holds IDLE (default 10,000) idle clients and is meshed with node 2,
# which holds K (default 2,000) clients; node 1 learns those K keys from node 2's watch stream.
# Then node 2 is killed: node 1's link drops and all K keys leave the region at once (with one
# shard every departure event runs inside srv_forwarder_remove_node). The dump's total is the
# instructions of that one link drop. CLIENTS=DIR takes hderp-bench from DIR. Both nodes' ports
# are held for them (the -mesh-with list names both before either starts); every process is
# stopped by PID.
set -u
here=$(cd "$(dirname "$0")" && pwd)
B=$1; OUT=$2; C=${CLIENTS:-$B}; IDLE=${IDLE:-10000}; K=${K:-2000}
T=$(mktemp -d); cd $T
work=$T
. "$here/lib.sh"
echo 00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff > mesh.key
port_hold; P1=$held_port
port_hold; P2=$held_port
L=http://127.0.0.1:$P1,http://127.0.0.1:$P2
server_start_probed s1 $P1 valgrind --tool=callgrind --instr-atstart=no \
    --toggle-collect=srv_forwarder_remove_node --callgrind-out-file=$OUT $B/hderp-server \
    -a 127.0.0.1:$P1 -stun=false -c k1 -mesh-psk-file mesh.key -mesh-with $L --shards 1
S1=$srv_pid
server_start s2 $B/hderp-server -a 127.0.0.1:$P2 -stun=false -c k2 -mesh-psk-file mesh.key \
    -mesh-with $L --shards 1
S2=$srv_pid
varz() { varz_of http://127.0.0.1:$1 "$2"; }
linked() { [ "$(varz $P1 derp_mesh_links_ready)" = 1 ] && [ "$(varz $P2 derp_mesh_links_ready)" = 1 ]; }
wait_for 60 linked || perf_die "the mesh links did not come up (logs in $T)"
GP=""
fill() { # fill PORT COUNT: generators of 1 pair + idle peers (each logs all in within 10 s)
    local left=$2 want=$(varz $1 derp_current_connections) n c i
    while [ $left -gt 0 ]; do
        n=$(( left > 500 ? 500 : left )); [ $n -lt 2 ] && n=2
        timeout 3000 $C/hderp-bench --server http://127.0.0.1:$1/derp --pairs 1 --peers $n \
            --rate-mbps 0.01 --size 100 --warmup 0 --duration 2400 > gen-$1-$left.log 2>&1 & GP="$GP $!"
        left=$(( left - n )); want=$(( want + n ))
        for i in $(seq 120); do c=$(varz $1 derp_current_connections); [ "${c:-0}" -ge $want ] && break; sleep 0.5; done
        [ "${c:-0}" -ge $want ] || { echo "only ${c:-0} of $want connected on $1"; break; }
    done
}
fill $P1 $IDLE
fill $P2 $K
for i in $(seq 300); do [ "$(varz $P1 derp_clients_total)" -ge $((IDLE + K)) ] 2>/dev/null && break; sleep 0.5; done
echo "$(date +%T) node 1: $(varz $P1 derp_current_connections) connections, $(varz $P1 derp_clients_total) keys in the region"
callgrind_control -i on $S1 > /dev/null
kill -KILL $S2; wait $S2 2>/dev/null
for i in $(seq 600); do # curl times out while node 1 works: an empty value, retried
    [ "$(varz $P1 derp_clients_total)" -le $IDLE ] 2>/dev/null && break; sleep 0.5; done
echo "$(date +%T) node 1 after the drop: $(varz $P1 derp_clients_total) keys, links ready $(varz $P1 derp_mesh_links_ready)"
callgrind_control -i off $S1 > /dev/null
# -d returns once the dump is written (vgdb waits for the monitor command's answer); then
# KILL: a TERM would have valgrind stop 10,000 connections first, slowly.
callgrind_control -d $S1 > /dev/null
kill -KILL $S1; wait $S1 2>/dev/null
for p in $GP; do kill $p 2>/dev/null; done; wait $GP 2>/dev/null
perf_cleanup
D=$(ls $OUT.* 2>/dev/null | head -1); [ -n "$D" ] || D=$OUT
echo "srv_forwarder_remove_node instructions (1 link drop): $(callgrind_annotate $D 2>/dev/null | awk '/PROGRAM TOTALS/ {print $1}')"
rm -rf "$T"
