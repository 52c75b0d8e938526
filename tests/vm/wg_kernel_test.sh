#!/bin/sh
# wg_kernel_test.sh: kernel WireGuard through hderp-wgrelay, run as the test "binary" of
# run_vm_test.sh inside the VM (busybox sh; iproute2's ip, wireguard-tools' wg and the relay are
# copied into /test beside it). Three network namespaces, each joined to the VM's root namespace
# by a veth pair; the relay listens in the root namespace (no IP forwarding there, so the only
# way between the namespaces is through the relay):
#   a (10.0.1.2, wg0 10.9.0.1) and b (10.0.2.2, wg0 10.9.0.2): registered peers, Endpoint the relay
#   c (10.0.3.2, wg0 10.9.0.3): a key not in the peers file; b lists c as a peer, so what keeps
#       c out is the relay (b's handshake response to c is dropped, response_mac1)
# Checked: a and b complete a handshake through the relay, ping across the tunnel, move a file
# over TCP whose SHA-256 matches on both ends; c gets no handshake and no ping; the relay's
# /metrics count the sessions, the forwarded datagrams and c's refusal. The relay's ports are
# fixed: nothing else runs in the VM (the WireGuard interfaces pick theirs).
# busybox 1.35's wget crashes with -T when the connection is refused: timeout(1) bounds it instead.
# Usage (inside the VM): wg_kernel_test.sh [SHARDS [SIZE_KIB]]
set -u
umask 077
shards=${1:-1}
size_kib=${2:-2048}
PATH=/test:/bin
export PATH
# iproute2's ip (busybox's applet knows no netns and no wireguard links; busybox sh runs its own
# applets before PATH).
ip() { /test/ip "$@"; }
relay_port=51820
metrics=127.0.0.1:9101
work=/tmp/wgk
relay_pid=""

say() { echo "wg_kernel: [$(cut -d" " -f1 /proc/uptime)] $*"; }

dump() {
    echo "----- relay log -----"
    cat $work/relay.log 2>/dev/null
    echo "----- relay metrics -----"
    timeout 10 wget -q -O - "http://$metrics/metrics" 2>/dev/null | grep -v '^#'
    for ns in a b c; do
        echo "----- wg show ($ns) -----"
        ip netns exec $ns wg show 2>&1
    done
}

fail() {
    echo "HDVM-FAIL wg_kernel: $*"
    dump
    [ -n "$relay_pid" ] && kill "$relay_pid" 2>/dev/null
    exit 1
}

# A counter from the relay's /metrics (0 when absent). $1: the metric's full name with labels.
metric() {
    timeout 10 wget -q -O - "http://$metrics/metrics" 2>/dev/null |
        awk -v m="$1" '$1 == m { v = $2 } END { print v + 0 }'
}

# Runs "$@" every 0.2 s until it succeeds (0) or $deadline_s seconds passed (1).
deadline_s=90
poll() {
    local end=$(($(date +%s) + deadline_s))
    while ! "$@" >/dev/null 2>&1; do
        [ "$(date +%s)" -lt $end ] || return 1
        sleep 0.2
    done
}

# The handshake time `wg show latest-handshakes` reports for peer $3 in namespace $1 ($2: wg0).
handshake_of() {
    ip netns exec "$1" wg show "$2" latest-handshakes | awk -v k="$3" '$1 == k { print $2 }'
}
has_handshake() { [ "$(handshake_of "$1" wg0 "$2")" -gt 0 ] 2>/dev/null; }

mkdir -p $work/www /run/netns || fail "mkdir"
say "kernel $(uname -r), relay shards $shards, transfer $size_kib KiB"

# --- namespaces and veth pairs -------------------------------------------------------------
n=1
for ns in a b c; do
    ip netns add $ns || fail "ip netns add $ns"
    ip link add v$ns type veth peer name eth0 netns $ns || fail "veth for $ns"
    ip addr add 10.0.$n.1/24 dev v$ns && ip link set v$ns up || fail "root side of v$ns"
    ip -n $ns link set lo up && ip -n $ns addr add 10.0.$n.2/24 dev eth0 &&
        ip -n $ns link set eth0 up || fail "namespace side of v$ns"
    n=$((n + 1))
done
sysctl -w net.ipv4.ip_forward=0 >/dev/null || fail "ip_forward"

# --- keys and the peers file: a and b registered (each allows the other), c not ------------
for ns in a b c; do
    wg genkey >$work/$ns.key || fail "wg genkey"
    eval "pub_$ns=\$(wg pubkey <$work/$ns.key)" || fail "wg pubkey"
done
{
    echo "# kernel WireGuard peers (tests/vm/wg_kernel_test.sh)"
    echo "$pub_a a b"
    echo "$pub_b b a"
} >$work/peers

hderp-wgrelay --peers $work/peers --listen 0.0.0.0:$relay_port --metrics $metrics \
    --shards "$shards" >$work/relay.log 2>&1 &
relay_pid=$!
relay_up() { kill -0 $relay_pid && timeout 10 wget -q -O /dev/null "http://$metrics/metrics"; }
poll relay_up || fail "hderp-wgrelay did not serve /metrics"
say "relay up (pid $relay_pid)"

# --- WireGuard interfaces: every peer's Endpoint is the relay as seen from its namespace ----
# wg0 in namespace $1, address 10.9.0.$2, private key $1.key; the peers follow as wg set args.
wg_up() {
    local ns=$1 host=$2
    shift 2
    ip -n $ns link add wg0 type wireguard || fail "ip link add wg0 type wireguard ($ns)"
    ip netns exec $ns wg set wg0 private-key $work/$ns.key "$@" ||
        fail "wg set ($ns)"
    ip -n $ns addr add 10.9.0.$host/24 dev wg0 && ip -n $ns link set wg0 up || fail "wg0 up ($ns)"
}
wg_up a 1 peer "$pub_b" endpoint 10.0.1.1:$relay_port allowed-ips 10.9.0.2/32 \
    persistent-keepalive 1
wg_up b 2 peer "$pub_a" endpoint 10.0.2.1:$relay_port allowed-ips 10.9.0.1/32 \
    persistent-keepalive 1 peer "$pub_c" allowed-ips 10.9.0.3/32

poll has_handshake a "$pub_b" || fail "a and b did not complete a handshake through the relay"
poll has_handshake b "$pub_a" || fail "b shows no handshake with a"
say "handshake a <-> b through the relay"
# What the kernel learned of the other side's address: the relay's (no IP forwarding in the root
# namespace, so there is no other way across; this checks the Endpoint did not roam elsewhere).
endpoint_of() {
    ip netns exec "$1" wg show wg0 endpoints | awk -v k="$2" '$1 == k { print $2 }'
}
ep=$(endpoint_of a "$pub_b")
[ "$ep" = 10.0.1.1:$relay_port ] || fail "a's endpoint for b is '$ep', not the relay"
ep=$(endpoint_of b "$pub_a")
[ "$ep" = 10.0.2.1:$relay_port ] || fail "b's endpoint for a is '$ep', not the relay"

ip netns exec a ping -c 3 -i 0.2 -W 10 10.9.0.2 >$work/ping.log 2>&1 ||
    fail "ping a -> b across the tunnel: $(cat $work/ping.log)"
ip netns exec b ping -c 3 -i 0.2 -W 10 10.9.0.1 >$work/ping.log 2>&1 ||
    fail "ping b -> a across the tunnel: $(cat $work/ping.log)"
say "ping a <-> b: $(grep 'packets' $work/ping.log)"

# --- a transfer over TCP through the tunnel, checked end to end ----------------------------
dd if=/dev/urandom of=$work/www/blob bs=1024 count="$size_kib" 2>/dev/null || fail "dd"
echo up >$work/www/up
ip netns exec b httpd -f -p 10.9.0.2:8080 -h $work/www &
httpd_pid=$!
# Up when it answers inside b (10.9.0.2 is b's own address: not through the tunnel).
poll ip netns exec b timeout 10 wget -q -O /dev/null http://10.9.0.2:8080/up ||
    fail "busybox httpd in b did not come up"
fwd0=$(metric wgrelay_forwarded_total)
t0=$(date +%s)
ip netns exec a timeout 300 wget -q -O $work/got http://10.9.0.2:8080/blob ||
    fail "wget of $size_kib KiB from b through the tunnel failed"
t1=$(date +%s)
kill $httpd_pid 2>/dev/null
want=$(sha256sum <$work/www/blob | cut -d' ' -f1)
got=$(sha256sum <$work/got | cut -d' ' -f1)
[ "$want" = "$got" ] || fail "transfer: sha256 $got, sent $want ($(wc -c <$work/got) bytes)"
fwd=$(($(metric wgrelay_forwarded_total) - fwd0))
# At most 1420-byte segments in b -> a data alone: the relay forwarded at least that many.
min=$((size_kib * 1024 / 1420))
[ $fwd -ge $min ] || fail "the relay forwarded $fwd datagrams during the transfer, fewer than $min"
say "transfer $size_kib KiB b -> a over TCP in $((t1 - t0)) s, sha256 $got, $fwd datagrams relayed"

# --- an unregistered peer: c targets b (which lists c) through the relay --------------------
m0=$(metric 'wgrelay_dropped_total{reason="response_mac1"}')
wg_up c 3 peer "$pub_b" endpoint 10.0.3.1:$relay_port allowed-ips 10.9.0.2/32 \
    persistent-keepalive 1
refused() { [ "$(metric 'wgrelay_dropped_total{reason="response_mac1"}')" -gt "$m0" ]; }
poll refused || fail "the relay did not count b's response to unregistered c (response_mac1)"
if ip netns exec c ping -c 2 -i 0.2 -W 3 10.9.0.2 >$work/ping.log 2>&1; then
    fail "unregistered c reached b: $(cat $work/ping.log)"
fi
[ "$(handshake_of c wg0 "$pub_b")" = 0 ] || fail "unregistered c completed a handshake with b"
[ "$(handshake_of b wg0 "$pub_c")" = 0 ] || fail "b completed a handshake with unregistered c"
say "unregistered c refused:" \
    "response_mac1 $(metric 'wgrelay_dropped_total{reason="response_mac1"}')"

# a and b still talk.
ip netns exec a ping -c 2 -i 0.2 -W 10 10.9.0.2 >$work/ping.log 2>&1 ||
    fail "a -> b after c's attempts: $(cat $work/ping.log)"

sessions=$(metric wgrelay_sessions_total)
[ "$sessions" -ge 1 ] || fail "wgrelay_sessions_total is $sessions"
say "relay: sessions $sessions, forwarded $(metric wgrelay_forwarded_total)," \
    "data $(metric wgrelay_data_total), routed $(metric wgrelay_routed_total)"
kill $relay_pid
wait $relay_pid
rc=$?
relay_pid=""
# hderp-wgrelay exits 0 on SIGTERM after stopping its shards.
[ $rc = 0 ] || fail "hderp-wgrelay exited $rc on SIGTERM"
say "ok"
