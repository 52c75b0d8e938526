/* malloc_count.c - counts this thread's malloc/calloc/realloc calls while enabled, by
 * interposing the allocator entry points over glibc's __libc_* (so BoringSSL's calls are seen
 * too). Linked only into builds without sanitizers (see CMakeLists.txt). Test code only. */
#include <stddef.h>
#include <stdlib.h>

#include "tls_test_util.h"

void *__libc_malloc(size_t size);
void *__libc_calloc(size_t count, size_t size);
void *__libc_realloc(void *ptr, size_t size);
void __libc_free(void *ptr);

static __thread bool tt_counting;
static __thread size_t tt_count;

void *malloc(size_t size)
{
    if (tt_counting)
        tt_count++;
    return __libc_malloc(size);
}

void *calloc(size_t count, size_t size)
{
    if (tt_counting)
        tt_count++;
    return __libc_calloc(count, size);
}

void *realloc(void *ptr, size_t size)
{
    if (tt_counting)
        tt_count++;
    return __libc_realloc(ptr, size);
}

void free(void *ptr)
{
    __libc_free(ptr);
}

bool tt_malloc_count_available(void)
{
    return true;
}

void tt_malloc_count_start(void)
{
    tt_count = 0;
    tt_counting = true;
}

size_t tt_malloc_count_stop(void)
{
    tt_counting = false;
    return tt_count;
}
