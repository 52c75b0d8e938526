# liburing (Debian liburing-dev 2.3). Target: hd::uring
include(HdFindHelpers)
hd_find_pkgconfig(Liburing uring hd::uring liburing.h)
