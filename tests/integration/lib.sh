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
lib_die() { fail "$@"; }
# wait_for, server_start_cmd, server_listening, port_of, port_hold, port_release, stop_pid
. "$(dirname "${BASH_SOURCE[0]}")/procs_ports.sh"

# wait_probe BASE_URL [curl args...]: up to 5 s for BASE_URL/derp/probe to answer; 1 if never.
wait_probe() {
    local base=$1
    shift
    wait_for 5 curl -s "$@" -o /dev/null "$base/derp/probe"
}

# Start-up of a sanitizer build on a loaded 2-core machine: generous, only a failure waits.
START_S=15

# server_start NAME ARGS...: "$bin/hderp-server" (or $server_bin) ARGS, as server_start_cmd
# (procs_ports.sh) starts it: port file, log, srv_pid and srv_port / srv_http / srv_stun; fails
# the test if it never listened.
server_start() {
    local name=$1
    shift
    server_start_cmd "$name" "${server_bin:-$bin/hderp-server}" "$@"
}
# varz BASE_URL NAME [curl args...]: the value of the /debug/varz series named exactly NAME
# (labels included, e.g. 'hderp_loop_stalls{shard="0"}'); empty if there is none.
varz() {
    local base=$1 name=$2
    shift 2
    curl -s "$@" "$base/debug/varz" | awk -v n="$name" '$1 == n { print $2 }'
}
