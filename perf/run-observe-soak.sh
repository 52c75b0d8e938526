#!/bin/bash
# run-observe-soak.sh BIN_DIR [SECONDS] - hderp-echo observe's memory over a long run: two meshed
# hderp-server nodes (one region) and a third node (another region) on loopback, one observer
# over their DERP map at its defaults (10 probes/s of 64 B per path, 5 paths, STUN per node).
# Prints the observer's RSS every 30 s and, at the end, each path's counts and last minute's
# round trips from /status.json. Every process it starts is stopped by PID.
set -u
B=$1; SECS=${2:-600}
W=$(mktemp -d)
O= A= BB= C=
trap 'kill $O $A $BB $C 2>/dev/null; rm -rf "$W"' EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
uport() { python3 -c 'import socket; s=socket.socket(type=socket.SOCK_DGRAM); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
echo 6a1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0 > "$W/mesh.key"
PA=$(port); PB=$(port); PC=$(port); SA=$(uport); SB=$(uport); SC=$(uport); PM=$(port)
MESH=http://127.0.0.1:$PA,http://127.0.0.1:$PB
"$B/hderp-server" -a 127.0.0.1:$PA -stun-port $SA --shards 1 -c "$W/a.key" -mesh-psk-file "$W/mesh.key" -mesh-with $MESH > "$W/a.log" 2>&1 & A=$!
"$B/hderp-server" -a 127.0.0.1:$PB -stun-port $SB --shards 1 -c "$W/b.key" -mesh-psk-file "$W/mesh.key" -mesh-with $MESH > "$W/b.log" 2>&1 & BB=$!
"$B/hderp-server" -a 127.0.0.1:$PC -stun-port $SC --shards 1 -c "$W/c.key" > "$W/c.log" 2>&1 & C=$!
for i in $(seq 100); do curl -s http://127.0.0.1:$PA/debug/varz | grep -q '^derp_mesh_links_ready 1' && break; sleep 0.2; done
cat > "$W/map.json" <<M
{"Regions":{"900":{"RegionID":900,"RegionCode":"lab","Nodes":[
 {"Name":"a","RegionID":900,"HostName":"127.0.0.1","IPv4":"127.0.0.1","DERPPort":$PA,"STUNPort":$SA},
 {"Name":"b","RegionID":900,"HostName":"127.0.0.1","IPv4":"127.0.0.1","DERPPort":$PB,"STUNPort":$SB}]},
 "901":{"RegionID":901,"RegionCode":"solo","Nodes":[
 {"Name":"c","RegionID":901,"HostName":"127.0.0.1","IPv4":"127.0.0.1","DERPPort":$PC,"STUNPort":$SC}]}}}
M
"$B/hderp-echo" observe --derp-map "$W/map.json" --derp-http --metrics-listen 127.0.0.1:$PM > "$W/obs.log" 2>&1 & O=$!
for t in $(seq 0 30 "$SECS"); do
    echo "t=${t}s rss_kib=$(awk '/VmRSS/{print $2}' /proc/$O/status)"
    [ "$t" -lt "$SECS" ] && sleep 30
done
curl -s http://127.0.0.1:$PM/status.json | python3 -c '
import json, sys
for p in json.load(sys.stdin)["paths"]:
    m = p["last_minute"]
    print("%-6s %-4s up=%s sent=%d received=%d lost=%d p50=%.3f p99=%.3f p999=%.3f ms" % (
        p["path"], p["kind"], p["up"], p["sent"], p["received"], p["lost"], m["p50_ms"],
        m["p99_ms"], m["p999_ms"]))'
