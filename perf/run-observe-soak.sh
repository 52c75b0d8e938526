#!/bin/bash
# run-observe-soak.sh BIN_DIR [SECONDS] - hderp-echo observe's memory over a long run: two meshed
# hderp-server nodes (one region) and a third node (another region) on loopback, one observer
# over their DERP map at its defaults (10 probes/s of 64 B per path, 5 paths, STUN per node).
# Prints the observer's RSS every 30 s and, at the end, each path's counts and last minute's
# round trips from /status.json. Every process it starts is stopped by PID. The servers' STUN
# ports, node c's DERP port and the observer's metrics port are port 0, read back; a's and b's
# DERP ports are held for them (the -mesh-with list names both before either starts).
set -u
here=$(cd "$(dirname "$0")" && pwd)
B=$1; SECS=${2:-600}
W=$(mktemp -d)
work=$W
. "$here/lib.sh"
O=
trap 'kill $O 2>/dev/null; perf_cleanup; rm -rf "$W"' EXIT
echo 6a1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0 > "$W/mesh.key"
port_hold; PA=$held_port
port_hold; PB=$held_port
MESH=http://127.0.0.1:$PA,http://127.0.0.1:$PB
server_start a "$B/hderp-server" -a 127.0.0.1:$PA -stun-port 0 --shards 1 -c "$W/a.key" -mesh-psk-file "$W/mesh.key" -mesh-with $MESH; SA=$srv_stun
server_start b "$B/hderp-server" -a 127.0.0.1:$PB -stun-port 0 --shards 1 -c "$W/b.key" -mesh-psk-file "$W/mesh.key" -mesh-with $MESH; SB=$srv_stun
server_start c "$B/hderp-server" -a 127.0.0.1:0 -stun-port 0 --shards 1 -c "$W/c.key"; PC=$srv_port SC=$srv_stun
linked() { [ "$(varz_of http://127.0.0.1:$PA derp_mesh_links_ready)" = 1 ]; }
wait_for 30 linked || perf_die "a's mesh link did not come up (logs in $W)"
cat > "$W/map.json" <<M
{"Regions":{"900":{"RegionID":900,"RegionCode":"lab","Nodes":[
 {"Name":"a","RegionID":900,"HostName":"127.0.0.1","IPv4":"127.0.0.1","DERPPort":$PA,"STUNPort":$SA},
 {"Name":"b","RegionID":900,"HostName":"127.0.0.1","IPv4":"127.0.0.1","DERPPort":$PB,"STUNPort":$SB}]},
 "901":{"RegionID":901,"RegionCode":"solo","Nodes":[
 {"Name":"c","RegionID":901,"HostName":"127.0.0.1","IPv4":"127.0.0.1","DERPPort":$PC,"STUNPort":$SC}]}}}
M
"$B/hderp-echo" observe --derp-map "$W/map.json" --derp-http --metrics-listen 127.0.0.1:0 > "$W/obs.log" 2>&1 & O=$!
metrics_url() { grep -o 'metrics on http://127\.0\.0\.1:[0-9]*' "$W/obs.log" | head -1 | cut -d' ' -f3; }
mu() { [ -n "$(metrics_url)" ]; }
wait_for 30 mu || perf_die "the observer did not say where its metrics are (obs.log)"
PM=$(metrics_url)
for t in $(seq 0 30 "$SECS"); do
    echo "t=${t}s rss_kib=$(awk '/VmRSS/{print $2}' /proc/$O/status)"
    [ "$t" -lt "$SECS" ] && sleep 30
done
curl -s $PM/status.json | python3 -c '
import json, sys
for p in json.load(sys.stdin)["paths"]:
    m = p["last_minute"]
    print("%-6s %-4s up=%s sent=%d received=%d lost=%d p50=%.3f p99=%.3f p999=%.3f ms" % (
        p["path"], p["kind"], p["up"], p["sent"], p["received"], p["lost"], m["p50_ms"],
        m["p99_ms"], m["p999_ms"]))'
