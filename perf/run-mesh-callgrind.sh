#!/bin/bash
# run-mesh-callgrind.sh BIN OUT - node 1 (port 3431) under callgrind with one shard, node 2
# (3432) plain, meshed; N=3000 pings of 1400 B from node 1 to an echo on node 2: node 1 forwards
# every ping once (server_mesh.c forward_event) and delivers every echo. Then compare, e.g.
#   callgrind_annotate --inclusive=yes OUT | grep forward_event
# (instructions of the forward path; divide by the printed derp_packets_forwarded_out).
set -u
B=$1; OUT=$2; N=${N:-3000}
T=$(mktemp -d); cd $T
echo 00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff > mesh.key
L=http://127.0.0.1:3431,http://127.0.0.1:3432
valgrind --tool=callgrind --callgrind-out-file=$OUT $B/hderp-server -a 127.0.0.1:3431 -stun=false -c k1 -mesh-psk-file mesh.key -mesh-with $L --shards 1 > s1.log 2>&1 & P1=$!
$B/hderp-server -a 127.0.0.1:3432 -stun=false -c k2 -mesh-psk-file mesh.key -mesh-with $L --shards 1 > s2.log 2>&1 & P2=$!
for i in $(seq 300); do [ "$(curl -s -m 2 127.0.0.1:3431/debug/varz | grep -c '^derp_mesh_links_ready 1')" = 1 ] && [ "$(curl -s 127.0.0.1:3432/debug/varz | grep -c '^derp_mesh_links_ready 1')" = 1 ] && break; sleep 0.2; done
$B/hderp-echo echo --server http://127.0.0.1:3432/derp > echo.log 2>&1 & EP=$!
sleep 1; KEY=$(grep -o 'nodekey:[0-9a-f]*' echo.log | head -1)
timeout 120 $B/hderp-echo ping --server http://127.0.0.1:3431/derp --peer $KEY --count $N --warmup 10 --size 1400 2>&1 | tail -2
curl -s 127.0.0.1:3431/debug/varz | grep -E "^derp_packets_forwarded_out"
kill $EP; kill $P1; sleep 3; kill $P2; wait
callgrind_annotate --inclusive=yes $OUT 2>/dev/null | grep -m1 "forward_event"
rm -rf "$T"
