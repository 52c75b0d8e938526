#!/bin/bash
# run-mesh-bench.sh BIN [RATE_MBPS] - two plain hderp-server nodes meshed with each other (one
# shard each, ports 3421/3422), hderp-bench across them (every packet is forwarded once: sender
# on node 1, receiver on node 2 and the other way round), then node 1's forward counters.
# DUR=seconds (default 5). Figures only: see perf/RESULTS.md for how to read them.
set -u
B=$1; RATE=${2:-0}
T=$(mktemp -d); cd $T
echo 00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff > mesh.key
L=http://127.0.0.1:3421,http://127.0.0.1:3422
$B/hderp-server -a 127.0.0.1:3421 -stun=false -c k1 -mesh-psk-file mesh.key -mesh-with $L --shards 1 > s1.log 2>&1 & P1=$!
$B/hderp-server -a 127.0.0.1:3422 -stun=false -c k2 -mesh-psk-file mesh.key -mesh-with $L --shards 1 > s2.log 2>&1 & P2=$!
for i in $(seq 100); do [ "$(curl -s 127.0.0.1:3421/debug/varz | grep -c '^derp_mesh_links_ready 1')" = 1 ] && [ "$(curl -s 127.0.0.1:3422/debug/varz | grep -c '^derp_mesh_links_ready 1')" = 1 ] && break; sleep 0.1; done
$B/hderp-bench --server http://127.0.0.1:3421/derp --server http://127.0.0.1:3422/derp --pairs 4 --rate-mbps $RATE --duration ${DUR:-5} --warmup 1 --relay-pid $P1 2>&1 | tail -12
curl -s 127.0.0.1:3421/debug/varz | grep -E "^derp_(packets_forwarded|mesh_forward_dropped)"
kill $P1 $P2; wait
rm -rf "$T"
