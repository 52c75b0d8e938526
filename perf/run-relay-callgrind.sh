#!/bin/bash
# run-relay-callgrind.sh SERVER_BIN_DIR CLIENT_BIN_DIR OUT - one relay (one shard, plain, on a
# port held for it) under callgrind; the dump is OUT.1. The load (LOAD):
#   ping (default)   N=3000 pings of 1400 B from hderp-echo ping to an echo peer through it
#                    (~6,000 packets relayed, one per receive: the latency path);
#   client, batched  hderp-bench --load LOAD: PAIRS (4) pairs, RATE Mbit/s (client 24, batched
#                    60) of 1400 B for DUR (3 s) after a 1 s warm-up (client: one frame per
#                    write(2), as tailscaled; batched: a sender's frames of one 1 ms tick in one
#                    sendmsg, so a receive holds several).
# It prints the packets the relay sent (derp_packets_sent) and, per packet, the inclusive
# instructions of: client_data (the reader: split, route, deliver; logins included),
# on_send_packet (one packet from its frame to net's send queue: copy, route, deliver),
# writer_run (the backlog's writer), net_conn_flush_now and net_conn_send_done (the sendmsg and
# its completion; the second includes flushes of the first) and the whole process.
# Compare two server builds with the same clients. Every process is stopped by PID.
set -u
here=$(cd "$(dirname "$0")" && pwd)
B=$1; C=$2; OUT=$3; N=${N:-3000}; LOAD=${LOAD:-ping}
PAIRS=${PAIRS:-4}; DUR=${DUR:-3}; RATE=${RATE:-$([ "$LOAD" = batched ] && echo 60 || echo 24)}
T=$(mktemp -d); cd $T
work=$T
. "$here/lib.sh"
port_hold; A1=$held_port # under valgrind: a held port, probed (lib.sh, server_start_probed)
server_start_probed s1 $A1 valgrind --tool=callgrind --callgrind-out-file=$OUT $B/hderp-server -a 127.0.0.1:$A1 -stun=false -c k1 --shards 1
P1=$srv_pid; U=http://127.0.0.1:$A1
if [ "$LOAD" = ping ]; then
    $C/hderp-echo echo --server $U/derp > echo.log 2>&1 & EP=$!
    pids+=($EP)
    wait_for 30 grep -q 'nodekey:' echo.log || perf_die "the echo peer did not log in (echo.log)"
    KEY=$(grep -o 'nodekey:[0-9a-f]*' echo.log | head -1)
    timeout 300 $C/hderp-echo ping --server $U/derp --peer $KEY --count $N --warmup 10 --size 1400 2>&1 | tail -1
    stop_pid $EP
else
    timeout 300 $C/hderp-bench --server $U/derp --pairs $PAIRS --rate-mbps $RATE --size 1400 \
        --duration $DUR --warmup 1 --load $LOAD 2>&1 | grep -E 'delivered|lost' | head -3
fi
left() { [ "$(varz_of $U derp_current_connections)" = 0 ]; }
wait_for 30 left || echo "# the relay still counts connections: dumped anyway"
SENT=$(varz_of $U derp_packets_sent)
# -d returns once the dump is written (vgdb waits for the monitor command's answer); then KILL:
# a TERM would have valgrind write the rest too, slowly.
callgrind_control -d $P1 >/dev/null 2>&1; kill -KILL $P1; wait $P1 2>/dev/null; OUT=$OUT.1
perf_cleanup
echo "load $LOAD packets_sent $SENT"
callgrind_annotate --inclusive=yes $OUT 2>/dev/null | grep -v '=>' |
    grep -E ":(client_data|on_send_packet|writer_run|net_conn_flush_now|net_conn_send_done) |PROGRAM" |
    awk -v n="$SENT" '{ v = $1; gsub(",", "", v); f = "total"
        for (i = 2; i <= NF; i++) if (substr($i, 1, 1) == "/" && index($i, ":")) { f = $i; sub(/.*:/, "", f) }
        if (!seen[f]++) printf "%-20s %12d Ir %7.0f Ir/packet\n", f, v, (n > 0 ? v / n : 0) }'
rm -rf $T
