/* net_test_util.h - helpers shared by the tests/net connection tests (test_conn.c,
 * test_ws_conn.c, test_send_*.c, test_codec_move.c): a held loopback port, a connected loopback
 * pair, and the byte stream the bulk tests send and check. nt_port_hold on the test thread;
 * nt_loopback_pair and nt_stream_byte on any thread. */
#ifndef NET_TEST_UTIL_H
#define NET_TEST_UTIL_H

#include <stdint.h>

/* A loopback TCP port held for the test's listeners: bound with SO_REUSEADDR and never
 * listening, and kept open until the test process exits, so no other process is given the port
 * (the kernel hands out no bound port for port 0) while net's listeners (SO_REUSEADDR) bind
 * beside it. Test thread; the test fails if none can be had. */
uint16_t nt_port_hold(void);

/* A connected loopback TCP pair: *net_fd (the accepted end, for net) and *peer_fd (the end that
 * connected). bufsize > 0: the peer's receive buffer (set before connect, so the window stays
 * small) and net's send buffer are that small. Returns 0 or -errno (nothing left open). */
int nt_loopback_pair(int bufsize, int *net_fd, int *peer_fd);

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
