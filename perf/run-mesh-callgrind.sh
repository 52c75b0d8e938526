#!/bin/bash
# run-mesh-callgrind.sh BIN OUT - node 1 under callgrind with one shard, node 2 plain, meshed
# (on ports held for them: the -mesh-with list names both before either starts); N=3000 pings
# of 1400 B from node 1 to an echo on node 2: node 1 forwards every ping once (server_mesh.c
# forward_event) and delivers every echo. Then compare, e.g.
#   callgrind_annotate --inclusive=yes OUT.1 | grep forward_event
# (instructions of the forward path; divide by the printed derp_packets_forwarded_out).
# Every process is stopped by PID.
set -u
here=$(cd "$(dirname "$0")" && pwd)
B=$1; OUT=$2; N=${N:-3000}
T=$(mktemp -d); cd $T
work=$T
. "$here/lib.sh"
echo 00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff > mesh.key
port_hold; A1=$held_port
port_hold; A2=$held_port
L=http://127.0.0.1:$A1,http://127.0.0.1:$A2
server_start_probed s1 $A1 valgrind --tool=callgrind --callgrind-out-file=$OUT $B/hderp-server -a 127.0.0.1:$A1 -stun=false -c k1 -mesh-psk-file mesh.key -mesh-with $L --shards 1; P1=$srv_pid
server_start s2 $B/hderp-server -a 127.0.0.1:$A2 -stun=false -c k2 -mesh-psk-file mesh.key -mesh-with $L --shards 1; P2=$srv_pid
linked() { [ "$(varz_of http://127.0.0.1:$A1 derp_mesh_links_ready)" = 1 ] && [ "$(varz_of http://127.0.0.1:$A2 derp_mesh_links_ready)" = 1 ]; }
wait_for 60 linked || perf_die "the mesh links did not come up (logs in $T)"
$B/hderp-echo echo --server http://127.0.0.1:$A2/derp > echo.log 2>&1 & EP=$!
pids+=($EP)
wait_for 30 grep -q 'nodekey:' echo.log || perf_die "the echo peer did not log in (echo.log)"
KEY=$(grep -o 'nodekey:[0-9a-f]*' echo.log | head -1)
timeout 120 $B/hderp-echo ping --server http://127.0.0.1:$A1/derp --peer $KEY --count $N --warmup 10 --size 1400 2>&1 | tail -2
curl -s 127.0.0.1:$A1/debug/varz | grep -E "^derp_packets_forwarded_out"
# -d returns once the dump (OUT.1) is written (vgdb waits for the monitor command's answer);
# then KILL: under valgrind the server does not see a SIGTERM (its signalfd never reads it).
stop_pid $EP
callgrind_control -d $P1 >/dev/null 2>&1; kill -KILL $P1; wait $P1 2>/dev/null
stop_pid $P2
perf_cleanup
callgrind_annotate --inclusive=yes $OUT.1 2>/dev/null | grep -m1 "forward_event"
rm -rf "$T"
