/* malloc_count_none.c - the allocation counter's stand-in under sanitizers, which own malloc:
 * tests that need the counter skip. Test code only. */
#include "tls_test_util.h"

bool tt_malloc_count_available(void)
{
    return false;
}

void tt_malloc_count_start(void)
{
}

size_t tt_malloc_count_stop(void)
{
    return 0;
}
