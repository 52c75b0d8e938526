#!/usr/bin/env bash
# The framework as a user gets it: cmake --install into a fresh temporary prefix, then
#   1. the prefix holds the public headers (<hd/...>) and no private one;
#   2. each shared library exports exactly the public API: every global symbol of its static
#      twin that a public header names, and nothing else;
#   3. examples/ configured out of tree with only that prefix (find_package(hd)), built against
#      the static libraries and against the shared ones, and their tests run;
#   4. examples/udprelay built by hand with pkg-config (hd.pc) and its test run;
#   5. examples/ through add_subdirectory of the source tree, built and tested.
# Usage: run_install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
export LC_ALL=C # one collation for sort, comm and python's sorted
build=$(realpath "$1")
src=$(realpath "$2")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
jobs=2
say() { echo "install test: $*"; }
die() { echo "install test: FAIL: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$prefix" >/dev/null
libdir=$(dirname "$(find "$prefix" -name 'libhd_reactor.a' | head -1)")
[ -f "$libdir/pkgconfig/hd.pc" ] || die "no hd.pc"
[ -f "$libdir/cmake/hd/hdConfig.cmake" ] || die "no hdConfig.cmake"

# 1. headers
want=$(cd "$src/include/hd" && ls *.h | sort)
have=$(cd "$prefix/include/hd" && ls | sort)
[ "$want" = "$have" ] || die "installed headers differ from include/hd: $have"
priv=$(find "$prefix" -name '*_impl.h' -o -name 'hd_poison.h' -o -name 'tls_keys.h' \
       -o -name 'tls_record.h')
[ -z "$priv" ] || die "private headers installed: $priv"
say "headers ok ($(echo "$have" | wc -l) public, no private)"

# 2. exported symbols: the identifiers of the public headers' code, comments left out (every
# declared name is among them; a symbol must be named there to count as public).
python3 - "$prefix"/include/hd/*.h >"$tmp/idents" <<'PY'
import re, sys
names = set()
for path in sys.argv[1:]:
    code = re.sub(r"/\*.*?\*/|//[^\n]*", " ", open(path).read(), flags=re.S)
    names.update(re.findall(r"\b[A-Za-z_][A-Za-z0-9_]*\b", code))
print("\n".join(sorted(names)))
PY
for lib in reactor net tls kit; do
    so="$libdir/libhd_$lib.so"
    [ -f "$so" ] || die "no $so"
    nm -D --defined-only "$so" | awk '$2 ~ /[TDBR]/ {print $3}' | sort -u >"$tmp/exported"
    statics="$libdir/libhd_$lib.a"
    [ "$lib" = net ] && statics="$statics $libdir/libhd_net_http.a"
    [ "$lib" = tls ] && statics="$statics $libdir/libhd_tls_crypto.a"
    nm --defined-only --extern-only $statics 2>/dev/null | awk 'NF == 3 {print $3}' |
        sort -u >"$tmp/globals"
    comm -12 "$tmp/globals" "$tmp/idents" >"$tmp/public"
    comm -23 "$tmp/globals" "$tmp/idents" >"$tmp/internal"
    leaked=$(comm -12 "$tmp/exported" "$tmp/internal")
    [ -z "$leaked" ] || die "libhd_$lib.so exports internal symbols: $leaked"
    extra=$(comm -23 "$tmp/exported" "$tmp/idents")
    [ -z "$extra" ] || die "libhd_$lib.so exports names no public header has: $extra"
    missing=$(comm -23 "$tmp/public" "$tmp/exported")
    [ -z "$missing" ] || die "libhd_$lib.so lacks public symbols: $missing"
    say "libhd_$lib.so exports $(wc -l <"$tmp/exported") public symbols," \
        "hides $(wc -l <"$tmp/internal") internal ones"
done

# 3. examples against the installed package only, static then shared
run_examples() { # <build dir> <cmake args...>
    local dir=$1
    shift
    cmake -S "$src/examples" -B "$dir" -G Ninja "$@" >"$tmp/configure.log" ||
        { cat "$tmp/configure.log"; die "examples: configure failed ($*)"; }
    cmake --build "$dir" -j "$jobs" >"$tmp/build.log" ||
        { cat "$tmp/build.log"; die "examples: build failed ($*)"; }
    (cd "$dir" && ctest --output-on-failure) || die "examples: tests failed ($*)"
}
for kind in static shared; do
    shared=OFF
    [ $kind = shared ] && shared=ON
    run_examples "$tmp/ex-$kind" -DCMAKE_PREFIX_PATH="$prefix" -DHD_EXAMPLES_SHARED=$shared
    hd_dir=$(sed -n 's/^hd_DIR:PATH=//p' "$tmp/ex-$kind/CMakeCache.txt")
    [ "$hd_dir" = "$libdir/cmake/hd" ] || die "find_package(hd) found $hd_dir, not the prefix"
    say "examples built and tested against the installed package ($kind)"
done
readelf -d "$tmp/ex-shared/pubsub" | grep -q 'libhd_tls.so' || die "shared pubsub: no libhd_tls.so"

# 4. pkg-config, by hand: what a Makefile user writes
export PKG_CONFIG_PATH=$libdir/pkgconfig
mkdir "$tmp/pc"
cc -std=gnu17 -Wall -Werror $(pkg-config --cflags hd) "$src/examples/udprelay/udprelay.c" \
    -o "$tmp/pc/udprelay" $(pkg-config --libs hd)
readelf -d "$tmp/pc/udprelay" | grep -q 'libhd_kit.so' || die "pkg-config build: not shared"
python3 "$src/examples/tests/test_udprelay.py" "$tmp/pc/udprelay"
say "udprelay built with pkg-config and tested"

# 5. add_subdirectory of the source tree (the framework only, static)
run_examples "$tmp/ex-subdir" -DHD_SOURCE_DIR="$src" -DHD_SHARED=OFF
say "examples built and tested through add_subdirectory"
