#!/usr/bin/env bash
# help2man.sh PROGRAM SECTION DESCRIPTION [SUBCOMMAND...] - a man page (roff, on stdout) made
# from PROGRAM --help: NAME, SYNOPSIS, the help text verbatim as OPTIONS, each SUBCOMMAND's
# PROGRAM SUBCOMMAND --help as a section of its own, and where the project documents the rest.
# Used by build-deb.sh so the page never drifts from the flags; test_docs_flags checks the page
# against docs/FLAGS.md.
set -euo pipefail
prog=$1 section=$2 desc=$3
shift 3
name=$(basename "$prog")
help=$("$prog" --help 2>&1 || true)
[ -n "$help" ] || { echo "help2man.sh: $prog --help printed nothing" >&2; exit 1; }
# roff: a leading dot or quote would be a request; backslashes are escapes.
verbatim() { sed -e 's/\\/\\e/g' -e "s/^\\([.']\\)/\\\\\\&\\1/"; }
upper=$(echo "$name" | tr '[:lower:]' '[:upper:]')
printf '.TH %s %s "" "hderp" "hderp"\n' "$upper" "$section"
printf '.SH NAME\n%s \\- %s\n' "$name" "$desc"
printf '.SH SYNOPSIS\n.B %s\n[flags]\n' "$name"
printf '.SH OPTIONS\n.nf\n'
echo "$help" | verbatim
printf '.fi\n'
for sub in "$@"; do
    subhelp=$("$prog" "$sub" --help 2>&1 || true)
    [ -n "$subhelp" ] || { echo "help2man.sh: $prog $sub --help printed nothing" >&2; exit 1; }
    printf '.SH %s %s\n.nf\n' "$(echo "$name $sub" | tr '[:lower:]' '[:upper:]')" OPTIONS
    echo "$subhelp" | verbatim
    printf '.fi\n'
done
case $name in
hderp-server)
    printf '.SH FILES\n.TP\n/etc/default/hderp-server\nflags for the systemd unit (hderp-server.service)\n'
    printf '.TP\n/var/lib/hderp\nstate: the server key, certificates\n'
    printf '.SH SEE ALSO\n%s\n' "FLAGS.md and OPERATING.md in /usr/share/doc/hderp/"
    ;;
hderp-wgrelay)
    printf '.SH FILES\n.TP\n/etc/default/hderp-wgrelay\nflags for the systemd unit (hderp-wgrelay.service)\n'
    printf '.TP\n/etc/hderp/wg-peers\nthe registered peers (an example: /usr/share/doc/hderp/examples/wg-peers)\n'
    printf '.SH SEE ALSO\n%s\n' "WGRELAY.md in /usr/share/doc/hderp/"
    ;;
*)
    printf '.SH SEE ALSO\n%s\n' "FLAGS.md and OPERATING.md in /usr/share/doc/hderp/"
    ;;
esac
