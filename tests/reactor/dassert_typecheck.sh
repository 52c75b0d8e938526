#!/bin/bash
# dassert_typecheck.sh CC INCLUDE_DIR - HD_DASSERT is compiled (not evaluated) in release builds:
# a check naming something that does not exist must fail to compile without HD_DEBUG too, and a
# good one must compile and not be evaluated (issue 16 item 10).
set -u
cc=$1 inc=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/good.c" <<'C'
#include <hd/hd_base.h>
static int calls;
__attribute__((unused)) static int touch(void) { return ++calls; }
int main(void) { HD_DASSERT(touch() == 1); return calls; } /* 0: not evaluated */
C
cat >"$tmp/bad.c" <<'C'
#include <hd/hd_base.h>
int main(void) { HD_DASSERT(no_such_variable == 1); return 0; }
C
"$cc" -std=gnu17 -Wall -Werror -I"$inc" "$tmp/good.c" -o "$tmp/good" || { echo "FAIL: good.c"; exit 1; }
"$tmp/good" || { echo "FAIL: HD_DASSERT evaluated its argument in a release build"; exit 1; }
if "$cc" -std=gnu17 -I"$inc" -c "$tmp/bad.c" -o "$tmp/bad.o" 2>"$tmp/err"; then
    echo "FAIL: HD_DASSERT(no_such_variable == 1) compiled without HD_DEBUG"
    exit 1
fi
grep -q "no_such_variable" "$tmp/err" || { echo "FAIL: another error:"; cat "$tmp/err"; exit 1; }
echo "PASS: HD_DASSERT type-checks in release builds and does not evaluate"
