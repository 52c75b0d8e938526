# lib.sh - shared pieces of the perf/ shell drivers (sourced), on top of
# tests/integration/procs_ports.sh (as tests/integration/lib.sh is): a bounded wait for a condition,
# hderp-server started on port 0 with the ports it bound read back (--port-file), a port held
# for a server whose port must be known before it starts (a -mesh-with list naming every node),
# and stop by PID. A driver sets $work (a directory for the port files and the servers' logs)
# first. Every PID server_start or port_hold starts is in pids / holds, stopped by PID on exit
# (perf_cleanup; a driver with a trap of its own calls it from there).
pids=()
holds=()
perf_cleanup() {
    local x
    for x in "${pids[@]}" "${holds[@]}"; do kill "$x" 2>/dev/null || true; done
    # A server under valgrind never sees the SIGTERM (server_start_probed): SIGKILL, by PID.
    all_gone() { for x in "${pids[@]}"; do pid_gone "$x" || return 1; done; }
    wait_for 5 all_gone || for x in "${pids[@]}"; do kill -KILL "$x" 2>/dev/null || true; done
}
trap perf_cleanup EXIT
perf_die() {
    echo "${0##*/}: $*" >&2
    exit 2
}
lib_die() { perf_die "$@"; }
# wait_for, server_start_cmd, server_listening, port_of, port_hold, port_release, stop_pid,
# pid_gone: shared with the integration tests
. "$(dirname "${BASH_SOURCE[0]}")/../tests/integration/procs_ports.sh"

# A start-up under valgrind, or with thousands of pools to carve, is slow: generous, only a
# failure waits that long.
START_S=${START_S:-120}

# server_start NAME CMD...: server_start_cmd (procs_ports.sh: CMD is hderp-server and its
# flags, possibly behind taskset or valgrind; --port-file is appended, so the server's flags come
# last); exits the driver (2) if the server never listened.
server_start() { server_start_cmd "$@"; }
# server_start_probed NAME PORT CMD...: as server_start, for a server under valgrind, whose
# flags give it the held PORT (port_hold): in the background, output in $work/NAME.log, its PID
# in pids and srv_pid, srv_port=PORT; waits (START_S) until /derp/probe answers there. No
# --port-file: valgrind does not know that io_uring_enter blocks and keeps its one-thread-at-a-
# time lock through the shard's sleep, so the main thread (which writes the port file) runs
# only when something wakes the shard; the probes do.
server_start_probed() {
    local name=$1 port=$2
    shift 2
    "$@" >"$work/$name.log" 2>&1 &
    srv_pid=$!
    pids+=("$srv_pid")
    srv_port=$port srv_http="" srv_stun=""
    wait_for "$START_S" server_answers "$srv_pid" "$port" "$work/$name.log" ||
        perf_die "hderp-server $name did not answer within ${START_S}s (log: $work/$name.log)"
}
# server_answers PID PORT LOG: 0 once http://127.0.0.1:PORT/derp/probe answers, 1 while PID runs.
server_answers() {
    curl -s -m 2 -o /dev/null "http://127.0.0.1:$2/derp/probe" && return 0
    kill -0 "$1" 2>/dev/null && return 1
    perf_die "hderp-server (PID $1) exited before it answered (log: $3)"
}
# varz_of BASE_URL NAME [curl args...]: the /debug/varz series named exactly NAME; empty if none.
varz_of() {
    local base=$1 name=$2
    shift 2
    curl -s -m 5 "$@" "$base/debug/varz" | awk -v n="$name" '$1 == n { print $2 }'
}
