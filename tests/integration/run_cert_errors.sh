#!/bin/bash
# run_cert_errors.sh BIN WORK - -certmode manual with certificate files that cannot be used:
# hderp-server refuses to start (exit 1) with a message naming the file and why (issue 23: every
# failure was "Bad message" after an OpenSSL line): the certificate missing, the key missing, a
# file not readable by the user (as nobody when run as root), a directory, not PEM, a key that is
# not the certificate's. Then the right pair starts. Each server is bounded by timeout(1); the
# one that starts is stopped by PID.
set -u
bin=$1 work=$2
rm -rf "$work" && mkdir -p "$work/certs"
source "$(dirname "$0")/lib.sh"
host=derp.test
crt=$work/certs/$host.crt key=$work/certs/$host.key

mkpair() { # mkpair CRT KEY: a self-signed P-256 certificate for $host and its key
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
        -keyout "$2" -out "$1" -subj "/CN=$host" -addext "subjectAltName=DNS:$host" 2>/dev/null ||
        fail "openssl req"
}
mkpair "$work/good.crt" "$work/good.key"
mkpair "$work/other.crt" "$work/other.key"
flags=(-a 127.0.0.1:0 -certmode manual -certdir "$work/certs" -hostname "$host" -stun=false)

# refused WANT... : the server exits 1 before listening, its stderr has each WANT.
refused() {
    timeout 20 "${run_as[@]}" "$bin/hderp-server" "${flags[@]}" -c "$keydir/derper.key" \
        >"$work/out.log" 2>&1
    local rc=$?
    [ "$rc" = 1 ] || fail "$case: exit code $rc, expected 1"
    for want in "$@"; do
        grep -qF -- "$want" "$work/out.log" || fail "$case: no \"$want\" in: $(cat "$work/out.log")"
    done
    ! grep -q "Bad message" "$work/out.log" || fail "$case: 'Bad message' in the message"
}
run_as=() keydir=$work

case="no certificate"
refused "certificate $crt: No such file or directory" "put the PEM certificate chain there"
case="no key"
cp "$work/good.crt" "$crt"
refused "private key $key: No such file or directory" "put the PEM private key there"
case="certificate is a directory"
rm -f "$crt" && mkdir "$crt" && cp "$work/good.key" "$key"
refused "certificate $crt: Is a directory"
case="certificate not PEM"
rmdir "$crt" && echo "not a certificate" >"$crt"
refused "certificate $crt / key $key: not PEM, or the key is not the certificate's"
case="key of another certificate"
cp "$work/good.crt" "$crt" && cp "$work/other.key" "$key"
refused "not PEM, or the key is not the certificate's"

case="certificate not readable"
cp "$work/good.key" "$key" && chmod 600 "$crt" "$key"
if [ "$(id -u)" = 0 ]; then # root reads anything: the server runs as nobody instead
    run_as=(setpriv --reuid=65534 --regid=65534 --clear-groups)
    keydir=$work/nobody
    mkdir -p "$keydir" && chown 65534 "$keydir"
    chmod 755 "$work" "$work/certs"
else
    chmod 000 "$crt"
fi
refused "certificate $crt: Permission denied" "make it readable by this user"
chmod 644 "$crt" "$key"
run_as=() keydir=$work

server_start good "${flags[@]}" -c "$work/derper.key"
stop_pid "$srv_pid"
rc=$?
[ "$rc" = 0 ] || fail "exit code $rc after SIGTERM"
echo "PASS: unusable certificate files named with the reason; the right pair starts"
