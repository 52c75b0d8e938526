# procs_ports.sh - shell pieces shared by the integration scripts (tests/integration/lib.sh) and
# the perf/ drivers (perf/lib.sh), sourced by those two: a bounded wait for a condition, the
# ports a server wrote to its --port-file, a port held for a server whose port must be known
# before it starts, and stop by PID. The sourcing lib defines lib_die MSG (how a failure ends
# the script) and the arrays pids and holds (the PIDs it stops on exit).

# wait_for SECONDS CMD [ARGS...]: runs CMD every 0.05 s until it succeeds; 1 if it never did
# within SECONDS (whole seconds; a bound for a hang, not a performance figure).
wait_for() {
    local tries=$(($1 * 20))
    shift
    for _ in $(seq "$tries"); do
        "$@" && return 0
        sleep 0.05
    done
    return 1
}

# server_start_cmd NAME CMD...: CMD (hderp-server and its flags, possibly behind taskset or
# valgrind: --port-file $work/NAME.ports is appended, so the server's flags come last) in the
# background, output in $work/NAME.log, its PID added to pids. Give it port 0 (-a 127.0.0.1:0,
# -stun-port 0, -http-port 0) or a held port (port_hold). Waits (START_S, set by the sourcing
# lib) until every shard listens, then sets srv_pid and the ports it bound: srv_port (-a),
# srv_http (-http-port, TLS mode only), srv_stun (-stun-port; empty when STUN is off); lib_die
# if it never listened.
server_start_cmd() {
    local name=$1
    shift
    local pf=$work/$name.ports
    rm -f "$pf"
    "$@" --port-file "$pf" >"$work/$name.log" 2>&1 &
    srv_pid=$!
    pids+=("$srv_pid")
    wait_for "$START_S" server_listening "$srv_pid" "$pf" ||
        lib_die "hderp-server $name did not listen within ${START_S}s ($*; log: $work/$name.log)"
    srv_port=$(port_of "$pf" derp) srv_http=$(port_of "$pf" http) srv_stun=$(port_of "$pf" stun)
}
# server_listening PID PORT_FILE: 0 once the file is there, 1 while PID runs without it.
server_listening() {
    [ -s "$2" ] && return 0
    kill -0 "$1" 2>/dev/null && return 1
    lib_die "hderp-server (PID $1) exited before it listened (log: ${2%.ports}.log)"
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
    wait_for 10 test -s "$f" || lib_die "port_hold $kind: no port"
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

# stop_pid PID [SECONDS]: SIGTERM, up to SECONDS (15) for it to exit, then SIGKILL; returns its
# exit status (PID must be a child of this shell). It leaves pids: the clean-up on exit must not
# signal whoever gets the PID next.
stop_pid() {
    kill -TERM "$1" 2>/dev/null || true
    wait_for "${2:-15}" pid_gone "$1" || kill -KILL "$1" 2>/dev/null || true
    local rc=0 x left=()
    wait "$1" 2>/dev/null || rc=$?
    for x in "${pids[@]}"; do [ "$x" = "$1" ] || left+=("$x"); done
    pids=("${left[@]}")
    return "$rc"
}
pid_gone() { ! kill -0 "$1" 2>/dev/null; }
