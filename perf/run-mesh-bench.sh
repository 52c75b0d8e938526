#!/bin/bash
# run-mesh-bench.sh BIN [RATE_MBPS] - two plain hderp-server nodes meshed with each other (one
# shard each, on ports held for them: the -mesh-with list names both before either starts),
# hderp-bench across them (every packet is forwarded once: sender on node 1, receiver on node 2
# and the other way round), then node 1's forward counters. DUR=seconds (default 5). Figures
# only: see perf/RESULTS.md for how to read them. The nodes are stopped by PID.
set -u
here=$(cd "$(dirname "$0")" && pwd)
B=$1; RATE=${2:-0}
T=$(mktemp -d); cd $T
work=$T
. "$here/lib.sh"
echo 00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff > mesh.key
port_hold; A1=$held_port
port_hold; A2=$held_port
L=http://127.0.0.1:$A1,http://127.0.0.1:$A2
server_start s1 $B/hderp-server -a 127.0.0.1:$A1 -stun=false -c k1 -mesh-psk-file mesh.key -mesh-with $L --shards 1; P1=$srv_pid
server_start s2 $B/hderp-server -a 127.0.0.1:$A2 -stun=false -c k2 -mesh-psk-file mesh.key -mesh-with $L --shards 1; P2=$srv_pid
linked() { [ "$(varz_of http://127.0.0.1:$A1 derp_mesh_links_ready)" = 1 ] && [ "$(varz_of http://127.0.0.1:$A2 derp_mesh_links_ready)" = 1 ]; }
wait_for 30 linked || perf_die "the mesh links did not come up (logs in $T)"
$B/hderp-bench --server http://127.0.0.1:$A1/derp --server http://127.0.0.1:$A2/derp --pairs 4 --rate-mbps $RATE --duration ${DUR:-5} --warmup 1 --relay-pid $P1 2>&1 | tail -12
curl -s 127.0.0.1:$A1/debug/varz | grep -E "^derp_(packets_forwarded|mesh_forward_dropped)"
stop_pid $P1; stop_pid $P2
perf_cleanup
rm -rf "$T"
