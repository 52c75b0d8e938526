#!/bin/bash
# run_flag_errors.sh BIN WORK - the command lines of every program say what was wrong with a flag
# and exit 2 (issue 23): an unknown flag is "unknown flag" even at the end of the line (where it
# looked like a flag missing its value), a known flag without its value "needs a value", a bad
# value names the flag; hderp-server, its check and upgrade subcommands, hderp-echo ping and
# observe. Every flag --help lists is known to the parser. Durations in Go's spelling are taken
# where a program wants one. Nothing here starts a server: each program is bounded by timeout(1).
set -u
bin=$1 work=$2
rm -rf "$work" && mkdir -p "$work"
source "$(dirname "$0")/lib.sh"

# expect CODE TEXT CMD...: CMD exits CODE and its stderr has TEXT.
expect() {
    local code=$1 want=$2
    shift 2
    timeout 20 "$@" >"$work/out.log" 2>&1
    local rc=$?
    [ "$rc" = "$code" ] || fail "$*: exit code $rc, expected $code"
    grep -qF -- "$want" "$work/out.log" || fail "$*: no \"$want\" in: $(cat "$work/out.log")"
}
srv=$bin/hderp-server echo=$bin/hderp-echo
key=0000000000000000000000000000000000000000000000000000000000000001

expect 2 "unknown flag -verbos" "$srv" -verbos
expect 2 "unknown flag -verbos" "$srv" -stun=false -verbos
expect 2 "unknown flag --nonsense" "$srv" --nonsense 3
expect 2 "-c needs a value" "$srv" -c
expect 2 "-a 1.2.3.4.5:80: not a numeric address" "$srv" -a 1.2.3.4.5:80 -c "$work/key"
expect 2 "-tcp-keepalive-time 10: not a duration" "$srv" -tcp-keepalive-time 10
expect 2 "unexpected argument stray" "$srv" stray
expect 2 "unknown flag --verbos" "$srv" check --verbos
expect 2 "--timeout needs a value" "$srv" check http://127.0.0.1:1/derp --timeout
expect 2 "--timeout 5x: expected a duration" "$srv" check --timeout 5x http://127.0.0.1:1/derp
expect 2 "unknown flag --pidfile" "$srv" upgrade --pidfile x
expect 2 "--pid-file needs a value" "$srv" upgrade --pid-file
expect 2 "unknown flag --serv" "$echo" ping --serv
expect 2 "--interval 2x: expected a duration" "$echo" ping --server http://127.0.0.1:1 \
    --peer "$key" --interval 2x
expect 2 "unrecognized option '--nosuch'" "$echo" observe --server http://127.0.0.1:1 --nosuch
expect 2 "requires an argument" "$echo" observe --server http://127.0.0.1:1 --duration
expect 2 "--duration 10x: expected a duration" "$echo" observe --server http://127.0.0.1:1 \
    --duration 10x

# derper's flags hderp-server does not implement: refused by name with what to do (exit 2),
# unless given derper's default (then the bad -a is what stops it); -home as derper checks it.
for flag in -ace -derp=false; do
    name=${flag%% *} name=${name%%=*}
    expect 2 "$name: a derper flag hderp-server does not support: " "$srv" $flag
done
for flag in -acme-ip-certs=false -acme-ip-certs "-secrets-url=" -ace=false -derp \
    "-secrets-path-prefix prod/derp" "-secrets-cache-dir /nowhere" \
    "-bootstrap-dns-names a.example" "-unpublished-bootstrap-dns-names a/b"; do
    expect 2 "-a bad: not a numeric address" "$srv" $flag -a bad
done
# -certmode gcp as derper checks it: the EAB key id and key, a contact, the key's base64.
expect 2 "-certmode gcp requires -acme-eab-kid and -acme-eab-key" "$srv" -certmode gcp
expect 2 "-certmode gcp requires -acme-email" "$srv" -certmode gcp -acme-eab-kid k \
    -acme-eab-key c2VjcmV0
expect 2 "-acme-eab-key: invalid base64" "$srv" -certmode gcp -acme-eab-kid k -acme-eab-key '%%' \
    -acme-email ops@example.com
expect 2 "-a bad: not a numeric address" "$srv" -certmode gcp -acme-eab-kid k \
    -acme-eab-key c2VjcmV0 -acme-email ops@example.com -a bad
expect 2 "-home foo: expected" "$srv" -home foo
expect 2 "-home http://a b: expected" "$srv" -home "http://a b"
for home in "" blank https://example.com/derp; do
    expect 2 "-a bad: not a numeric address" "$srv" -home "$home" -a bad
done

# Every flag --help names is one the parser knows: given last without a value, it is never
# "unknown flag" (a boolean runs on to another error or to a start, cut by the bad -a).
"$srv" --help >"$work/help.txt" || fail "--help: exit code $?"
names=$(grep -oE '^ +--?[a-z][a-z0-9-]*' "$work/help.txt" | tr -d ' ' | sed 's/^-*//' | sort -u)
[ "$(echo "$names" | wc -l)" -gt 40 ] || fail "too few flags read from --help: $names"
for n in $names; do
    timeout 20 "$srv" -a bad -"$n" >"$work/out.log" 2>&1
    ! grep -q "unknown flag" "$work/out.log" || fail "--help lists -$n, the parser does not know it"
done

# Durations in Go's spelling, bare numbers in their old unit: the flags parse (the programs then
# fail to reach the closed port: exit 1, not 2).
expect 1 "" "$echo" ping --server http://127.0.0.1:1 --peer "$key" --interval 2ms \
    --timeout 1s --count 2 --warmup 0
expect 1 "" "$echo" ping --server http://127.0.0.1:1 --peer "$key" --interval 2 \
    --timeout 1000 --count 2 --warmup 0
expect 1 "" "$echo" observe --server http://127.0.0.1:1 --once --duration 1s --down-after 500ms
expect 1 "" "$srv" check --timeout 2s --stun-port 0 http://127.0.0.1:1/derp
echo "PASS: flag errors named, exit 2, every --help flag known, Go durations"
