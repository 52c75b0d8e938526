# lib.sh - shared pieces of the integration scripts (sourced): a bounded wait for a condition,
# hderp-server started on port 0 with the ports it bound read back (--port-file), a port held
# for a server whose port must be known before it starts, stop by PID, /debug/varz, and one
# failure report. Scripts set $bin (the build's bin/) and $work, and list the PIDs they start
# in pids (stopped by PID on exit).
pids=()
holds=()
cleanup() { for x in "${pids[@]}" "${holds[@]}"; do kill "$x" 2>/dev/null || true; done; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; for f in "$work"/*.log; do echo "--- $f"; cat "$f"; done; exit 1; }

# wait_for SECONDS CMD [ARGS...]: runs CMD every 0.05 s until it succeeds; 1 if it never did
# within SECONDS (a bound for a hang, not a performance figure).
wait_for() {
    local tries=$(($1 * 20))
    shift
    for _ in $(seq "$tries"); do
        "$@" && return 0
        sleep 0.05
    done
    return 1
}

# wait_probe BASE_URL [curl args...]: up to 5 s for BASE_URL/derp/probe to answer; 1 if never.
wait_probe() {
    local base=$1
    shift
    wait_for 5 curl -s "$@" -o /dev/null "$base/derp/probe"
}

# Start-up of a sanitizer build on a loaded 2-core machine: generous, only a failure waits.
START_S=15

# server_start NAME ARGS...: "$bin/hderp-server" (or $server_bin) ARGS --port-file
# $work/NAME.ports in the background, output in $work/NAME.log, its PID added to pids. Give it
# port 0 (-a 127.0.0.1:0, -stun-port 0, -http-port 0) or a held port (port_hold). Waits
# (START_S) until every shard listens, then sets srv_pid and the ports it bound: srv_port (-a),
# srv_http (-http-port, TLS mode only), srv_stun (-stun-port; empty when STUN is off). Fails the
# test if it never listened.
server_start() {
    local name=$1
    shift
    local pf=$work/$name.ports
    rm -f "$pf"
    "${server_bin:-$bin/hderp-server}" "$@" --port-file "$pf" >"$work/$name.log" 2>&1 &
    srv_pid=$!
    pids+=("$srv_pid")
    wait_for "$START_S" server_listening "$srv_pid" "$pf" ||
        fail "hderp-server $name did not start listening (hderp-server $*)"
    srv_port=$(port_of "$pf" derp) srv_http=$(port_of "$pf" http) srv_stun=$(port_of "$pf" stun)
}
# server_listening PID PORT_FILE: 0 once the file is there, 1 while PID runs without it.
server_listening() {
    [ -s "$2" ] && return 0
    kill -0 "$1" 2>/dev/null && return 1
    fail "hderp-server (PID $1) exited before it listened"
}
# port_of PORT_FILE NAME: the port of the line "NAME ADDRESS" (empty if there is none).
port_of() { awk -v n="$2" '$1 == n { sub(/.*:/, "", $2); print $2 }' "$1"; }

# port_hold [tcp|udp]: for a server whose port must be known before it starts (a -mesh-with
# list naming every node, a flag printed into a DERP map first): binds 127.0.0.1:0 with
# SO_REUSEADDR in a helper process that keeps the socket until port_release, and sets
# held_port. Nothing else is given the port meanwhile (the kernel never hands out a bound port
# for port 0, and an explicit bind conflicts), but a listener that sets SO_REUSEADDR itself
# (hderp-server's, Go's, haproxy's) binds it beside the idle held socket. A TCP hold may stay
# for good (a restarted server gets the port back); release a UDP hold once the server listens,
# as it would get a share of the datagrams.
port_hold() {
    local kind=${1:-tcp} f=$work/.hold.$$.${#holds[@]}
    rm -f "$f"
    python3 -c '
import os, signal, socket, sys
udp = sys.argv[1] == "udp"
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM if udp else socket.SOCK_STREAM)
if not udp:
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 0))
if udp:  # after the bind: UDP port 0 search would share a port with SO_REUSEADDR sockets
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
with open(sys.argv[2] + ".tmp", "w") as f:
    f.write("%d\n" % s.getsockname()[1])
os.rename(sys.argv[2] + ".tmp", sys.argv[2])
signal.pause()  # holds the socket until port_release (SIGTERM) or the script exits
' "$kind" "$f" &
    holds+=($!)
    wait_for 5 test -s "$f" || fail "port_hold $kind: no port"
    held_port=$(cat "$f")
    rm -f "$f"
    eval "hold_pid_${kind}_$held_port=${holds[-1]}"
}
# port_release PORT [tcp|udp]: closes the socket port_hold holds on PORT (its helper, by PID).
port_release() {
    local v=hold_pid_${2:-tcp}_$1
    kill "${!v}" 2>/dev/null || true
    wait "${!v}" 2>/dev/null || true
}

# stop_pid PID: SIGTERM, up to 15 s for it to exit (then SIGKILL); returns its exit status.
stop_pid() {
    kill -TERM "$1" 2>/dev/null || true
    wait_for 15 pid_gone "$1" || kill -KILL "$1" 2>/dev/null || true
    local rc=0
    wait "$1" || rc=$?
    return "$rc"
}
pid_gone() { ! kill -0 "$1" 2>/dev/null; }

# varz BASE_URL NAME [curl args...]: the value of the /debug/varz series named exactly NAME
# (labels included, e.g. 'hderp_loop_stalls{shard="0"}'); empty if there is none.
varz() {
    local base=$1 name=$2
    shift 2
    curl -s "$@" "$base/debug/varz" | awk -v n="$name" '$1 == n { print $2 }'
}
