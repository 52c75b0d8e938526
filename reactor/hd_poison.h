/* hd_poison.h - ASan manual poisoning for pools (no-ops without ASan). reactor/ only. */
#ifndef HD_POISON_H
#define HD_POISON_H

#if defined(__SANITIZE_ADDRESS__)
#define HD_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HD_ASAN 1
#endif
#endif

#ifdef HD_ASAN
#include <sanitizer/asan_interface.h>
#define HD_POISON(p, n)   ASAN_POISON_MEMORY_REGION((p), (n))
#define HD_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define HD_POISON(p, n)   ((void)(p), (void)(n))
#define HD_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#if defined(HD_ASAN) || defined(HD_DEBUG)
#define HD_POISON_FILL 1 /* freed objects are filled with 0xdb */
#endif

#endif /* HD_POISON_H */
