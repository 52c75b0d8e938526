#!/usr/bin/env bash
# package_deb.sh BIN_DIR WORK_DIR - the hderp .deb for real: build it (packaging/build-deb.sh),
# dpkg -i, systemd-analyze verify the installed units, start the installed binaries with the
# packaged flags from /etc/default/hderp-server and /etc/default/hderp-wgrelay (ports moved to
# loopback port 0; a test certificate for the packaged -hostname, and the packaged example peers
# file, where the defaults look for them) and check each serves, reloads on SIGHUP and stops
# cleanly; then dpkg -r and dpkg -P leave nothing behind. Needs root and changes the system (CI's
# throwaway machine): skipped (77) when not root or when an hderp package, its state directory
# or /etc/hderp exists already (they are never replaced). Every wait is bounded; stopped by PID.
set -euo pipefail
bin=$1 work=$2
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
mkdir -p "$work"
. "$here/lib.sh"
[ "$(id -u)" = 0 ] || { echo "SKIP: dpkg -i needs root"; exit 77; }
if dpkg-query -W -f='${Status}' hderp 2>/dev/null | grep -q 'ok installed'; then
    echo "SKIP: an hderp package is installed on this machine; not replacing it"
    exit 77
fi
if [ -e /var/lib/hderp ] || [ -e /var/lib/private/hderp ]; then
    echo "SKIP: /var/lib/hderp exists (a purge would remove it); not touching it"
    exit 77
fi
if [ -e /etc/hderp ]; then
    echo "SKIP: /etc/hderp exists (the test puts the example peers file there); not touching it"
    exit 77
fi
# One package test at a time on a machine (several work trees, presets): dpkg and the state
# directory are machine-wide.
exec 9>/run/lock/hderp-package-test.lock
flock -w 300 9 || fail "another package test held the lock for 300 s"
installed=false
cleanup_pkg() {
    cleanup
    if $installed; then dpkg -P hderp >/dev/null 2>&1 || true; fi
    rm -rf /var/lib/hderp /etc/hderp
}
trap cleanup_pkg EXIT

deb=$(bash "$src/packaging/build-deb.sh" "$bin" "$work/out") || fail "build-deb.sh"
dpkg-deb -f "$deb" Depends | grep -q liburing2 || fail "Depends lacks liburing2"
dpkg -i "$deb" >"$work/dpkg-i.log" 2>&1 || fail "dpkg -i: $(cat "$work/dpkg-i.log")"
installed=true
for f in /usr/bin/hderp-server /usr/bin/hderp-echo /lib/systemd/system/hderp-server.service \
    /etc/default/hderp-server /usr/share/man/man8/hderp-server.8.gz \
    /usr/share/man/man1/hderp-echo.1.gz /usr/bin/hderp-wgrelay \
    /lib/systemd/system/hderp-wgrelay.service /etc/default/hderp-wgrelay \
    /usr/share/man/man8/hderp-wgrelay.8.gz /usr/share/doc/hderp/examples/wg-peers; do
    [ -e "$f" ] || fail "not installed: $f"
done
for d in WGRELAY.md; do # the repository's docs/ file, as the man page's SEE ALSO names it
    [ -e "/usr/share/doc/hderp/$d" ] || fail "not installed: /usr/share/doc/hderp/$d"
done
zcat /usr/share/man/man8/hderp-server.8.gz | grep -q -- '-proxy-protocol-from' ||
    fail "the man page is not the --help text"
zcat /usr/share/man/man8/hderp-wgrelay.8.gz | grep -q -- '-handshake-rate' ||
    fail "the hderp-wgrelay man page is not its --help text"
dpkg-query -L hderp | grep -qx /usr/bin/hderp-wgrelay || fail "hderp-wgrelay is not the package's"
# The unit: systemd's own checker, with no complaint about it.
systemd-analyze verify /lib/systemd/system/hderp-server.service >"$work/verify.log" 2>&1 ||
    fail "systemd-analyze verify: $(cat "$work/verify.log")"
if grep -q 'hderp-server' "$work/verify.log"; then fail "verify: $(cat "$work/verify.log")"; fi
# Its hardening as systemd scores it (0 best .. 10): 1.6 now; more than 2.0 is a regression.
systemd-analyze security --offline=yes --threshold=20 /lib/systemd/system/hderp-server.service \
    >"$work/security.log" 2>&1 || fail "exposure over 2.0: $(tail -1 "$work/security.log")"
grep -qx 'ExecStart=/usr/bin/hderp-server $HDERP_FLAGS' /lib/systemd/system/hderp-server.service ||
    fail "ExecStart is not the binary with \$HDERP_FLAGS"
grep -qx 'ExecReload=/bin/kill -HUP $MAINPID' /lib/systemd/system/hderp-server.service ||
    fail "ExecReload is not SIGHUP"
wunit=/lib/systemd/system/hderp-wgrelay.service
systemd-analyze verify "$wunit" >"$work/verify-wg.log" 2>&1 ||
    fail "systemd-analyze verify $wunit: $(cat "$work/verify-wg.log")"
if grep -q 'hderp-wgrelay' "$work/verify-wg.log"; then fail "verify: $(cat "$work/verify-wg.log")"; fi
# No capability, no writable place: scored lower than the server's unit; over 2.0 is a regression.
systemd-analyze security --offline=yes --threshold=20 "$wunit" >"$work/security-wg.log" 2>&1 ||
    fail "$wunit: exposure over 2.0: $(tail -1 "$work/security-wg.log")"
grep -qx 'ExecStart=/usr/bin/hderp-wgrelay $HDERP_WGRELAY_FLAGS' "$wunit" ||
    fail "ExecStart is not hderp-wgrelay with \$HDERP_WGRELAY_FLAGS"
grep -qx 'ExecReload=/bin/kill -HUP $MAINPID' "$wunit" || fail "hderp-wgrelay's ExecReload is not SIGHUP"

# The packaged defaults, as the unit would run them, on loopback ports.
HDERP_FLAGS=
. /etc/default/hderp-server
flags=" $HDERP_FLAGS "
for pair in "-a :443|-a 127.0.0.1:0" "-http-port 80|-http-port 0" \
    "-stun-port 3478|-stun-port 0"; do
    from=${pair%%|*} to=${pair#*|}
    [[ $flags == *" $from "* ]] || fail "the packaged flags have no '$from': $HDERP_FLAGS"
    flags=${flags/ $from / $to }
done
[[ $flags == *" -hostname derp.example.com "* ]] || fail "packaged -hostname changed: $flags"
[[ $flags == *" -certdir /var/lib/hderp/certs "* ]] || fail "packaged -certdir changed: $flags"
mkdir -p /var/lib/hderp/certs
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -keyout /var/lib/hderp/certs/derp.example.com.key \
    -out /var/lib/hderp/certs/derp.example.com.crt -subj /CN=derp.example.com \
    -addext subjectAltName=DNS:derp.example.com 2>/dev/null
cp /var/lib/hderp/certs/derp.example.com.crt "$work/ca.crt"
# shellcheck disable=SC2086 # the flags are words, as systemd splits $HDERP_FLAGS
server_bin=/usr/bin/hderp-server server_start server $flags --shards 1
pid=$srv_pid p=$srv_port hp=$srv_http
tls=(--cacert "$work/ca.crt" --resolve "derp.example.com:$p:127.0.0.1")
wait_probe "https://derp.example.com:$p" "${tls[@]}" || fail "the installed server does not answer"
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$hp/generate_204") || true
[ "$code" = 204 ] || fail "-http-port: /generate_204 answered $code"
[ "$(stat -c %a /var/lib/hderp/derper.key)" = 600 ] || fail "derper.key is not 0600"
kill -HUP "$pid" # what ExecReload sends
wait_for 5 grep -q 'reload' "$work/server.log" || true # a stop is checked on the next line
kill -0 "$pid" 2>/dev/null || fail "SIGHUP stopped the server"
wait_probe "https://derp.example.com:$p" "${tls[@]}" || fail "no answer after SIGHUP"
rc=0
stop_pid "$pid" || rc=$?
[ "$rc" = 0 ] || fail "the installed server exited $rc on SIGTERM"

# hderp-wgrelay with its packaged flags (ports on loopback) and the packaged example peers file
# where they look for it: it loads the peers, serves /metrics, reloads on SIGHUP, stops cleanly.
HDERP_WGRELAY_FLAGS=
. /etc/default/hderp-wgrelay
wflags=" $HDERP_WGRELAY_FLAGS "
for pair in "-listen 0.0.0.0:51820|-listen 127.0.0.1:0" \
    "-metrics 127.0.0.1:9101|-metrics 127.0.0.1:0"; do
    from=${pair%%|*} to=${pair#*|}
    [[ $wflags == *" $from "* ]] || fail "the packaged wgrelay flags have no '$from': $wflags"
    wflags=${wflags/ $from / $to }
done
[[ $wflags == *" -peers /etc/hderp/wg-peers "* ]] || fail "packaged -peers changed: $wflags"
mkdir -p /etc/hderp
cp /usr/share/doc/hderp/examples/wg-peers /etc/hderp/wg-peers
# shellcheck disable=SC2086 # the flags are words, as systemd splits $HDERP_WGRELAY_FLAGS
/usr/bin/hderp-wgrelay $wflags >"$work/wgrelay.log" 2>&1 &
wpid=$!
pids+=("$wpid")
wait_for 10 grep -q 'wgrelay: listening on' "$work/wgrelay.log" || fail "hderp-wgrelay did not start"
grep -q 'wgrelay: 3 peers from /etc/hderp/wg-peers' "$work/wgrelay.log" ||
    fail "hderp-wgrelay did not load the example's 3 peers"
mp=$(sed -n 's/^wgrelay: listening on .* metrics 127\.0\.0\.1:\([0-9]*\)$/\1/p' "$work/wgrelay.log")
[ -n "$mp" ] || fail "hderp-wgrelay printed no metrics address"
curl -s "http://127.0.0.1:$mp/metrics" | grep -q '^wgrelay_received_total ' ||
    fail "hderp-wgrelay's /metrics has no wgrelay_received_total"
kill -HUP "$wpid" # what ExecReload sends
wait_for 5 grep -q 'reloaded /etc/hderp/wg-peers: 3 peers' "$work/wgrelay.log" ||
    fail "hderp-wgrelay did not reload the peers on SIGHUP"
rc=0
stop_pid "$wpid" || rc=$?
[ "$rc" = 0 ] || fail "the installed hderp-wgrelay exited $rc on SIGTERM"
rm -rf /etc/hderp

dpkg -r hderp >"$work/dpkg-r.log" 2>&1 || fail "dpkg -r: $(cat "$work/dpkg-r.log")"
[ ! -e /usr/bin/hderp-server ] || fail "dpkg -r left /usr/bin/hderp-server"
[ ! -e /usr/bin/hderp-wgrelay ] || fail "dpkg -r left /usr/bin/hderp-wgrelay"
[ ! -e /lib/systemd/system/hderp-server.service ] || fail "dpkg -r left the unit"
[ ! -e /lib/systemd/system/hderp-wgrelay.service ] || fail "dpkg -r left the wgrelay unit"
[ -e /etc/default/hderp-server ] || fail "dpkg -r removed the conffile (only purge should)"
[ -e /etc/default/hderp-wgrelay ] || fail "dpkg -r removed the wgrelay conffile (only purge should)"
dpkg -P hderp >"$work/dpkg-p.log" 2>&1 || fail "dpkg -P: $(cat "$work/dpkg-p.log")"
installed=false
[ ! -e /etc/default/hderp-server ] || fail "dpkg -P left /etc/default/hderp-server"
[ ! -e /etc/default/hderp-wgrelay ] || fail "dpkg -P left /etc/default/hderp-wgrelay"
[ ! -e /var/lib/hderp ] || fail "dpkg -P left /var/lib/hderp"
if dpkg-query -W -f='${Status}' hderp 2>/dev/null | grep -q 'ok installed'; then
    fail "still installed after dpkg -P"
fi
echo "ok: .deb installed, units verified, both relays' packaged defaults served, removed and purged cleanly"
