#!/bin/bash
# run_server_flags.sh BIN WORK - hderp-server refuses bad -mesh-with lists at start-up with a
# message naming the entry (exit 1, nothing listening), and starts with a good one; a name that
# does not resolve is not fatal (looked up at each dial, as derper does) but logged. Each server
# is bounded by timeout(1); the ones that start are stopped by PID. --min-wait-us: range, default
# on, off with 0, in use where the kernel has it, relays.
set -u
bin=$1 work=$2
rm -rf "$work" && mkdir -p "$work"
source "$(dirname "$0")/lib.sh"
echo 00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff >"$work/mesh.key"

# refused LIST EXPECTED-TEXT [extra flags...]
refused() {
    local list=$1 want=$2
    shift 2
    timeout 20 "$bin/hderp-server" -a 127.0.0.1:0 -stun=false -c "$work/key" "$@" \
        -mesh-with "$list" >"$work/out.log" 2>&1
    local rc=$?
    [ "$rc" = 1 ] || fail "-mesh-with '$list': exit code $rc, expected 1"
    grep -qF -- "$want" "$work/out.log" || fail "-mesh-with '$list': no \"$want\" in the message"
}
mk="-mesh-psk-file $work/mesh.key"
refused "http://127.0.0.1:1" "needs a mesh key"
refused "derp1.example.com:443/10.0.0.1:443" "is not host[:port][/dialhost]" $mk
refused "derp1.example.com/" "is not host[:port][/dialhost]" $mk
refused "127.0.0.1:99999" "bad host or port" $mk
refused "[::1" "bad host or port" $mk
refused "derp1.example.com/bad*name" "is neither an address nor a host name" $mk
refused "$(printf 'http://127.0.0.1:%d,' $(seq 1 33))" "more than 32 nodes" $mk

# A good list (own entry, empty entries, spaces, IPv6 dial host, an https entry) starts. The own
# entry names the server's port, so that port is held before it starts; another entry's port is
# held too (a port that is surely not the server's own).
port_hold
p=$held_port
port_hold
other=$held_port
server_start good -a "127.0.0.1:$p" -stun=false -c "$work/key" $mk \
    -mesh-with " http://127.0.0.1:$p,, localhost:$other/[::1] ,127.0.0.1:1/::1,"
grep -q "3 mesh nodes" "$work/good.log" || fail "expected 3 mesh nodes in the start-up line"
stop_pid "$srv_pid"
rc=$?
[ "$rc" = 0 ] || fail "exit code $rc after SIGTERM"

# A name that does not resolve: the server runs, the link's lookup fails and says so.
server_start noname -a 127.0.0.1:0 -stun=false -c "$work/key" $mk \
    -mesh-with "no-such-host.invalid."
wait_for 10 grep -q "cannot look up no-such-host.invalid." "$work/noname.log" ||
    fail "no lookup failure logged"
stop_pid "$srv_pid"
rc=$?
[ "$rc" = 0 ] || fail "exit code $rc after SIGTERM (unresolvable node)"

# The admission cache and re-check need a controller to ask.
for flag in -verify-cache-ttl -verify-recheck-interval; do
    timeout 20 "$bin/hderp-server" -a 127.0.0.1:0 -stun=false -c "$work/key" $flag 10s \
        >"$work/out.log" 2>&1
    rc=$?
    [ "$rc" = 1 ] || fail "$flag without -verify-client-url: exit code $rc, expected 1"
    grep -q "need -verify-client-url" "$work/out.log" || fail "$flag: no message naming the need"
done
# --min-wait-us: out of range is refused; on by default, off with 0 (the start-up line names
# min-wait only when it is in use); with it a relay still relays (the DERP smoke client through
# it). The probe decides: on a kernel without IORING_FEAT_MIN_TIMEOUT (< 6.12) the line must not name it.
timeout 20 "$bin/hderp-server" -a 127.0.0.1:0 -stun=false -c "$work/key" \
    --min-wait-us 1001 >"$work/out.log" 2>&1
rc=$?
[ "$rc" = 2 ] || fail "--min-wait-us 1001: exit code $rc, expected 2 (a bad flag)"
grep -q "expected 0..1000" "$work/out.log" || fail "--min-wait-us 1001: no range in the message"
kver=$(uname -r | awk -F. '{print $1 * 1000 + $2}')
for mw in 0 50 default; do
    mwflag=(--min-wait-us "$mw")
    [ "$mw" = default ] && mwflag=()
    server_start "mw$mw" -a 127.0.0.1:0 -stun=false -c "$work/key" "${mwflag[@]}"
    pid=$srv_pid p=$srv_port
    if [ "$mw" != 0 ] && [ "$kver" -ge 6012 ]; then
        grep -q "io_uring.* min-wait" "$work/mw$mw.log" || fail "--min-wait-us $mw: not in use"
    else
        ! grep -q "min-wait" "$work/mw$mw.log" || fail "--min-wait-us $mw: min-wait named"
    fi
    timeout 60 python3 "$(dirname "$0")/derp_smoke.py" "$p" >"$work/smoke$mw.log" 2>&1 ||
        fail "DERP client through --min-wait-us $mw"
    stop_pid "$pid"
    rc=$?
    [ "$rc" = 0 ] || fail "exit code $rc after SIGTERM (--min-wait-us $mw)"
done
echo "PASS: -mesh-with checks, admission flags, --min-wait-us"
