#!/bin/bash
# run-relay-callgrind.sh SERVER_BIN_DIR CLIENT_BIN_DIR OUT - one relay (one shard, plain, on a
# port held for it) under callgrind; N=3000 pings of 1400 B from hderp-echo
# ping to an echo peer through it (so ~6,000 packets relayed); the dump is OUT.1. Compare two
# server builds with the same clients, e.g.
#   callgrind_annotate --inclusive=yes OUT.1 | grep -E ':client_data |:deliver '
# Every process is stopped by PID.
set -u
here=$(cd "$(dirname "$0")" && pwd)
B=$1; C=$2; OUT=$3; N=${N:-3000}
T=$(mktemp -d); cd $T
work=$T
. "$here/lib.sh"
port_hold; A1=$held_port # under valgrind: a held port, probed (lib.sh, server_start_probed)
server_start_probed s1 $A1 valgrind --tool=callgrind --callgrind-out-file=$OUT $B/hderp-server -a 127.0.0.1:$A1 -stun=false -c k1 --shards 1
P1=$srv_pid; U=http://127.0.0.1:$A1
$C/hderp-echo echo --server $U/derp > echo.log 2>&1 & EP=$!
pids+=($EP)
wait_for 30 grep -q 'nodekey:' echo.log || perf_die "the echo peer did not log in (echo.log)"
KEY=$(grep -o 'nodekey:[0-9a-f]*' echo.log | head -1)
timeout 300 $C/hderp-echo ping --server $U/derp --peer $KEY --count $N --warmup 10 --size 1400 2>&1 | tail -1
stop_pid $EP
left() { [ "$(varz_of $U derp_current_connections)" = 0 ]; }
wait_for 30 left || echo "# the relay still counts connections: dumped anyway"
# -d returns once the dump is written (vgdb waits for the monitor command's answer); then KILL:
# a TERM would have valgrind write the rest too, slowly.
callgrind_control -d $P1 >/dev/null 2>&1; kill -KILL $P1; wait $P1 2>/dev/null; OUT=$OUT.1
perf_cleanup
callgrind_annotate --inclusive=yes $OUT 2>/dev/null | grep -E ":client_data |:deliver |PROGRAM TOTALS" | head -4
rm -rf $T
