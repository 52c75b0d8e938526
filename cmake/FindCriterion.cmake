# Criterion (Debian libcriterion-dev 2.4.1), unit tests. Target: hd::criterion
include(HdFindHelpers)
hd_find_pkgconfig(Criterion criterion hd::criterion criterion/criterion.h)
