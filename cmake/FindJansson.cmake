# jansson (Debian libjansson-dev 2.14), for small JSON. Target: hd::jansson
include(HdFindHelpers)
hd_find_pkgconfig(Jansson jansson hd::jansson jansson.h)
