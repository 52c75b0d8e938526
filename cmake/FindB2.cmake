# libb2 (Debian libb2-dev 0.98.1), BLAKE2s for WireGuard's MAC1 in hderp-wgrelay (libsodium and
# BoringSSL have BLAKE2b only). Target: hd::b2
include(HdFindHelpers)
hd_find_pkgconfig(B2 libb2 hd::b2 blake2.h)
