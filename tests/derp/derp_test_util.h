/* derp_test_util.h - helpers shared by the DERP protocol tests: hex vectors and a seeded PRNG.
 * Test support only. */
#ifndef DERP_TEST_UTIL_H
#define DERP_TEST_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <hd/net_http.h>

/* Decodes hex, ignoring spaces and newlines, into out (at most out_size bytes).
 * Returns the byte count; aborts on a malformed vector (a bug in the test itself). */
static inline size_t test_hex(const char *hex, uint8_t *out, size_t out_size)
{
    size_t n = 0;
    int hi = -1;
    for (const char *p = hex; *p; p++) {
        if (*p == ' ' || *p == '\n')
            continue;
        int v = net_hex_digit(*p);
        if (v < 0)
            abort();
        if (hi < 0) {
            hi = v;
            continue;
        }
        if (n >= out_size)
            abort();
        out[n++] = (uint8_t)(hi << 4 | v);
        hi = -1;
    }
    if (hi >= 0)
        abort();
    return n;
}

/* xorshift64*: deterministic, seeded per test. */
static inline uint64_t test_rand(uint64_t *state)
{
    uint64_t x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * 0x2545F4914F6CDD1Dull;
}

/* Fills buf with bytes from the PRNG. */
static inline void test_fill(uint64_t *state, uint8_t *buf, size_t len)
{
    for (size_t i = 0; i < len; i++)
        buf[i] = (uint8_t)(test_rand(state) >> 56);
}

#endif /* DERP_TEST_UTIL_H */
