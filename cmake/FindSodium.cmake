# libsodium (Debian libsodium-dev 1.0.18), for DERP's NaCl box. Target: hd::sodium
include(HdFindHelpers)
hd_find_pkgconfig(Sodium sodium hd::sodium sodium.h)
