/* hd_base.h - the few macros every layer uses: assertions that stay on in release builds,
 * container_of, branch hints. Header-only; any thread. */
#ifndef HD_BASE_H
#define HD_BASE_H

#include <stddef.h>
#include <stdint.h>
#include <stdnoreturn.h>

noreturn void hd_assert_fail(const char *expr, const char *file, int line, const char *func);

/* Guards our own invariants; always on (CONVENTIONS.md: never <assert.h>, NDEBUG would remove it).
 * Bad input from a peer is an operating error (-EPROTO), never an assert. */
#define HD_ASSERT(expr)                                                                            \
    ((__builtin_expect(!!(expr), 1)) ? (void)0                                                     \
                                     : hd_assert_fail(#expr, __FILE__, __LINE__, __func__))

/* O(n) checks, debug builds only. */
#ifdef HD_DEBUG
#define HD_DASSERT(expr) HD_ASSERT(expr)
#else
/* Not evaluated, but compiled: a release build still type-checks the expression (a check that
 * no longer compiles is found at once, not in the next debug build). */
#define HD_DASSERT(expr) ((void)sizeof(!(expr)))
#endif

#define hd_likely(x)   __builtin_expect(!!(x), 1)
#define hd_unlikely(x) __builtin_expect(!!(x), 0)

#define hd_container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

#define HD_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#define HD_IS_POW2(x) ((x) != 0 && (((x) & ((x)-1)) == 0))

#define HD_CACHELINE 64

#endif /* HD_BASE_H */
