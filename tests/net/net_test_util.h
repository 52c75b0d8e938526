/* net_test_util.h - helpers shared by the tests/net connection tests (test_conn.c,
 * test_ws_conn.c): a free loopback port, and the byte stream the bulk tests send and check.
 * nt_free_port on the test thread; nt_stream_byte anywhere (pure). */
#ifndef NET_TEST_UTIL_H
#define NET_TEST_UTIL_H

#include <stdint.h>

/* A loopback TCP port nobody listens on right now (the test fails if none can be had). */
uint16_t nt_free_port(void);

/* The byte at position i of stream `seed`: cheap to recompute on the receiving side. */
static inline uint8_t nt_stream_byte(uint64_t seed, uint64_t i)
{
    uint64_t x = (i >> 3) * 0x9E3779B97F4A7C15ull + seed;
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 32;
    return (uint8_t)(x >> ((i & 7) * 8));
}

#endif /* NET_TEST_UTIL_H */
