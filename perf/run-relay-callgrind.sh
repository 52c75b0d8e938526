#!/bin/bash
# run-relay-callgrind.sh SERVER_BIN_DIR CLIENT_BIN_DIR OUT - one relay (one shard, plain) under
# callgrind; N=3000 pings of 1400 B from hderp-echo ping to an echo peer through it (so ~6,000
# packets relayed); the dump is OUT.1. Compare two server builds with the same clients, e.g.
#   callgrind_annotate --inclusive=yes OUT.1 | grep -E ':client_data |:deliver '
set -u
B=$1; C=$2; OUT=$3; N=${N:-3000}; PORT=${PORT:-3461}
T=$(mktemp -d); cd $T
valgrind --tool=callgrind --callgrind-out-file=$OUT $B/hderp-server -a 127.0.0.1:$PORT -stun=false -c k1 --shards 1 > s1.log 2>&1 & P1=$!
for i in $(seq 300); do curl -s -m 2 -o /dev/null 127.0.0.1:$PORT/derp/probe && break; sleep 0.2; done
$C/hderp-echo echo --server http://127.0.0.1:$PORT/derp > echo.log 2>&1 & EP=$!
for i in $(seq 100); do grep -q nodekey: echo.log && break; sleep 0.2; done
KEY=$(grep -o 'nodekey:[0-9a-f]*' echo.log | head -1)
timeout 300 $C/hderp-echo ping --server http://127.0.0.1:$PORT/derp --peer $KEY --count $N --warmup 10 --size 1400 2>&1 | tail -1
kill $EP; sleep 1; callgrind_control -d $P1 >/dev/null 2>&1; sleep 3; kill -KILL $P1; wait 2>/dev/null; OUT=$OUT.1
callgrind_annotate --inclusive=yes $OUT 2>/dev/null | grep -E ":client_data |:deliver |PROGRAM TOTALS" | head -4
rm -rf $T
