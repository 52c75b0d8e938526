#!/usr/bin/env bash
# build-deb.sh BIN_DIR OUT_DIR - the hderp .deb (dpkg-deb): hderp-server, hderp-echo and
# hderp-wgrelay from BIN_DIR (debug info stripped), the systemd units of the two relays with
# /etc/default/hderp-server and /etc/default/hderp-wgrelay (conffiles), an example WireGuard
# peers file, man pages made from --help (and the subcommands'), README and the operator's docs;
# Depends from dpkg-shlibdeps. Prints the .deb's path.
set -euo pipefail
bin=$(cd "$1" && pwd) out=$2
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/.." && pwd)
version=$(sed -n 's/^project(hderp VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")
arch=$(dpkg --print-architecture)
mkdir -p "$out"
out=$(cd "$out" && pwd)
stage=$(mktemp -d "$out/stage.XXXXXX")
trap 'rm -rf "$stage"' EXIT
root=$stage/root
install -d "$root/DEBIAN" "$root/usr/bin" "$root/lib/systemd/system" "$root/etc/default" \
    "$root/usr/share/man/man8" "$root/usr/share/man/man1" "$root/usr/share/doc/hderp/examples"
for p in hderp-server hderp-echo hderp-wgrelay; do
    install -m 0755 "$bin/$p" "$root/usr/bin/$p"
    objcopy --strip-debug "$root/usr/bin/$p"
done
for p in hderp-server hderp-wgrelay; do
    install -m 0644 "$here/deb/$p.service" "$root/lib/systemd/system/"
    install -m 0644 "$here/deb/$p.default" "$root/etc/default/$p"
done
install -m 0644 "$here/deb/wg-peers" "$root/usr/share/doc/hderp/examples/wg-peers"
bash "$here/help2man.sh" "$root/usr/bin/hderp-server" 8 "a DERP relay for Tailscale clients" \
    check upgrade |
    gzip -9n >"$root/usr/share/man/man8/hderp-server.8.gz"
bash "$here/help2man.sh" "$root/usr/bin/hderp-echo" 1 "DERP echo client and latency probe" \
    observe |
    gzip -9n >"$root/usr/share/man/man1/hderp-echo.1.gz"
bash "$here/help2man.sh" "$root/usr/bin/hderp-wgrelay" 8 "a relay for stock WireGuard peers" |
    gzip -9n >"$root/usr/share/man/man8/hderp-wgrelay.8.gz"
(cd "$src" && install -m 0644 README.md docs/OPERATING.md docs/FLAGS.md docs/METRICS.md \
    docs/WGRELAY.md \
    "$root/usr/share/doc/hderp/")
# Depends: what the binaries link, as dpkg-shlibdeps reads it (it wants a debian/control).
mkdir -p "$stage/debian"
printf 'Source: hderp\n\nPackage: hderp\nArchitecture: any\n' >"$stage/debian/control"
deps=$(cd "$stage" && dpkg-shlibdeps -O -e"$root/usr/bin/hderp-server" -e"$root/usr/bin/hderp-echo" \
    -e"$root/usr/bin/hderp-wgrelay" 2>/dev/null | sed -n 's/^shlibs:Depends=//p')
[ -n "$deps" ] || { echo "build-deb.sh: dpkg-shlibdeps found no dependencies" >&2; exit 1; }
size=$(du -sk "$root" | cut -f1)
cat >"$root/DEBIAN/control" <<CONTROL
Package: hderp
Version: $version
Architecture: $arch
Maintainer: hderp maintainers <hderp@localhost>
Installed-Size: $size
Depends: $deps
Section: net
Priority: optional
Description: DERP relay for Tailscale clients on io_uring (a drop-in for derper)
 hderp-server relays DERP traffic for Tailscale clients, takes derper's flags and meshes with
 derper nodes; hderp-echo measures a relay's latency; hderp-wgrelay relays stock WireGuard
 peers that are both behind NAT. Includes hardened systemd units (hderp-server.service,
 hderp-wgrelay.service, flags in /etc/default/), neither enabled on install.
CONTROL
printf '/etc/default/hderp-server\n/etc/default/hderp-wgrelay\n' >"$root/DEBIAN/conffiles"
for s in postinst prerm postrm; do install -m 0755 "$here/deb/$s" "$root/DEBIAN/$s"; done
deb=$out/hderp_${version}_${arch}.deb
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
echo "$deb"
