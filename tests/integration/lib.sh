# lib.sh - shared pieces of the integration scripts (sourced): a free loopback port, waiting
# for a server's /derp/probe, and one failure report. Scripts set $work, and list the PIDs
# they start in pids (stopped by PID on exit).
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# wait_probe BASE_URL [curl args...]: up to 5 s for BASE_URL/derp/probe to answer; 1 if never.
wait_probe() {
    local base=$1
    shift
    for _ in $(seq 100); do
        curl -s "$@" -o /dev/null "$base/derp/probe" && return 0
        sleep 0.05
    done
    return 1
}
pids=()
cleanup() { for x in "${pids[@]}"; do kill "$x" 2>/dev/null || true; done; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; for f in "$work"/*.log; do echo "--- $f"; cat "$f"; done; exit 1; }
