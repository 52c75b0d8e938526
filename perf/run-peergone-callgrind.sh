#!/bin/bash
# run-peergone-callgrind.sh BIN OUT - the cost of one departure (PeerGone, spec §6.7) with
# IDLE (default 10,000) other clients connected to the same shard. hderp-server runs under
# callgrind with one shard, instrumentation off until the clients are in, and collecting only
# inside gone_event (--toggle-collect). Then an echo peer and a pinger log in; the pinger sends
# N pings and leaves (the echo peer, subscribed to it, gets one PeerGone), then the echo peer
# leaves (nobody subscribed): 2 departures. The dump's total is gone_event's instructions for
# both. CLIENTS=DIR takes hderp-bench and hderp-echo from DIR. Needs ulimit -n above IDLE + 100.
set -u
B=$1; OUT=$2; C=${CLIENTS:-$B}; IDLE=${IDLE:-10000}; N=${N:-20}; PORT=${PORT:-3451}
T=$(mktemp -d); cd $T
U=http://127.0.0.1:$PORT/derp
valgrind --tool=callgrind --instr-atstart=no --toggle-collect=gone_event \
    --callgrind-out-file=$OUT $B/hderp-server -a 127.0.0.1:$PORT -stun=false --shards 1 > s.log 2>&1 & SP=$!
varz() { curl -s -m 5 127.0.0.1:$PORT/debug/varz | awk -v k="$1" '$1 == k {print $2}'; }
for i in $(seq 300); do [ -n "$(varz derp_current_connections)" ] && break; sleep 0.2; done
GP=""; left=$IDLE; want=0
while [ $left -gt 0 ]; do  # generators of 1 pair + idle peers, one after another: each must
    n=$(( left > 500 ? 500 : left )); [ $n -lt 2 ] && n=2  # log all in within 10 s
    timeout 3000 $C/hderp-bench --server $U --pairs 1 --peers $n --rate-mbps 0.01 --size 100 \
        --warmup 0 --duration 2400 > gen-$left.log 2>&1 & GP="$GP $!"
    left=$(( left - n )); want=$(( want + n ))
    for i in $(seq 120); do c=$(varz derp_current_connections); [ "${c:-0}" -ge $want ] && break; sleep 0.5; done
    [ "${c:-0}" -ge $want ] || { echo "only ${c:-0} of $want connected"; cat gen-*.log; break; }
done
echo "$(date +%T) connected: $(varz derp_current_connections)"
callgrind_control -i on $SP > /dev/null
$C/hderp-echo echo --server $U > echo.log 2>&1 & EP=$!
for i in $(seq 100); do grep -q nodekey: echo.log && break; sleep 0.2; done
KEY=$(grep -o 'nodekey:[0-9a-f]*' echo.log | head -1)
G0=$(varz derp_peer_gone_disconnected_frames)
timeout 120 $C/hderp-echo ping --server $U --peer $KEY --count $N --warmup 0 --interval 5 2>&1 | tail -1
for i in $(seq 100); do [ "$(varz derp_peer_gone_disconnected_frames)" -gt "$G0" ] && break; sleep 0.2; done
kill $EP; wait $EP 2>/dev/null
sleep 2
echo "$(date +%T) peer_gone_disconnected_frames: $G0 -> $(varz derp_peer_gone_disconnected_frames)"
callgrind_control -i off $SP > /dev/null
callgrind_control -d $SP > /dev/null; echo "$(date +%T) dumped"
sleep 1
kill -KILL $SP; wait $SP 2>/dev/null # the dump is written; a TERM waits for valgrind to see it
for p in $GP; do kill $p 2>/dev/null; done; wait
# the dump taken by -d (OUT.1); OUT itself holds only the (uninstrumented) rest
D=$(ls $OUT.* 2>/dev/null | head -1); [ -n "$D" ] || D=$OUT
echo "gone_event instructions (2 departures): $(callgrind_annotate $D 2>/dev/null | awk '/PROGRAM TOTALS/ {print $1}')"
rm -rf "$T"
