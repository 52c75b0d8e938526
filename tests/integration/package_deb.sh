#!/usr/bin/env bash
# package_deb.sh BIN_DIR WORK_DIR - the hderp .deb for real: build it (packaging/build-deb.sh),
# dpkg -i, systemd-analyze verify the installed unit, start the installed binary with the
# packaged flags from /etc/default/hderp-server (ports moved to loopback port 0, a test
# certificate for the packaged -hostname where the defaults look for it) and check it serves,
# reloads on SIGHUP and stops cleanly; then dpkg -r and dpkg -P leave nothing behind. Needs root
# and changes the system (CI's throwaway machine): skipped (77) when not root or when an hderp
# package or its state directory exists already (they are never replaced). Every wait is bounded; stopped by PID.
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
# One package test at a time on a machine (several work trees, presets): dpkg and the state
# directory are machine-wide.
exec 9>/run/lock/hderp-package-test.lock
flock -w 300 9 || fail "another package test held the lock for 300 s"
installed=false
cleanup_pkg() {
    cleanup
    if $installed; then dpkg -P hderp >/dev/null 2>&1 || true; fi
    rm -rf /var/lib/hderp
}
trap cleanup_pkg EXIT

deb=$(bash "$src/packaging/build-deb.sh" "$bin" "$work/out") || fail "build-deb.sh"
dpkg-deb -f "$deb" Depends | grep -q liburing2 || fail "Depends lacks liburing2"
dpkg -i "$deb" >"$work/dpkg-i.log" 2>&1 || fail "dpkg -i: $(cat "$work/dpkg-i.log")"
installed=true
for f in /usr/bin/hderp-server /usr/bin/hderp-echo /lib/systemd/system/hderp-server.service \
    /etc/default/hderp-server /usr/share/man/man8/hderp-server.8.gz \
    /usr/share/man/man1/hderp-echo.1.gz; do
    [ -e "$f" ] || fail "not installed: $f"
done
zcat /usr/share/man/man8/hderp-server.8.gz | grep -q -- '-proxy-protocol-from' ||
    fail "the man page is not the --help text"
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

dpkg -r hderp >"$work/dpkg-r.log" 2>&1 || fail "dpkg -r: $(cat "$work/dpkg-r.log")"
[ ! -e /usr/bin/hderp-server ] || fail "dpkg -r left /usr/bin/hderp-server"
[ ! -e /lib/systemd/system/hderp-server.service ] || fail "dpkg -r left the unit"
[ -e /etc/default/hderp-server ] || fail "dpkg -r removed the conffile (only purge should)"
dpkg -P hderp >"$work/dpkg-p.log" 2>&1 || fail "dpkg -P: $(cat "$work/dpkg-p.log")"
installed=false
[ ! -e /etc/default/hderp-server ] || fail "dpkg -P left /etc/default/hderp-server"
[ ! -e /var/lib/hderp ] || fail "dpkg -P left /var/lib/hderp"
if dpkg-query -W -f='${Status}' hderp 2>/dev/null | grep -q 'ok installed'; then
    fail "still installed after dpkg -P"
fi
echo "ok: .deb installed, unit verified, packaged defaults served, removed and purged cleanly"
