# jemalloc (Debian libjemalloc-dev 5.3, unprefixed: it replaces malloc). Target: hd::jemalloc
include(HdFindHelpers)
hd_find_pkgconfig(Jemalloc jemalloc hd::jemalloc jemalloc/jemalloc.h)
