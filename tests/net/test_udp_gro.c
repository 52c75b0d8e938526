/* test_udp_gro.c - the pure half of UDP GRO on receive (net/udp_gro.c): the cut of a coalesced
 * buffer into its datagrams and the UDP_GRO cmsg's segment size, over many seeded random cases
 * (a fixed-seed xorshift: a failure reproduces) and the edges (an empty datagram, a size of 0,
 * a size at or over the length, a stop from the callback); the cmsg walker over well-formed
 * blocks, cut ones, lengths that point past the block and random bytes. */
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <string.h>
#include <sys/socket.h>

#include "net_impl.h"

#ifndef UDP_GRO
#define UDP_GRO 104
#endif

static uint64_t rng = 0x9e3779b97f4a7c15u;

static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static struct {
    const uint8_t *base;
    size_t off;         /* where the next segment must start */
    size_t lens[70000]; /* every segment's length, in order */
    unsigned count, stop_after;
    bool stop, gap;
} cut;

static void on_segment(const uint8_t *seg, size_t len, void *arg)
{
    (void)arg;
    if (seg != cut.base + cut.off)
        cut.gap = true; /* a segment must start where the one before ended */
    cut.off += len;
    cr_assert_lt(cut.count, sizeof(cut.lens) / sizeof(cut.lens[0]));
    cut.lens[cut.count++] = len;
    if (cut.count == cut.stop_after)
        cut.stop = true;
}

static unsigned split(const uint8_t *data, size_t len, size_t seg, unsigned stop_after)
{
    cut.count = 0, cut.off = 0, cut.stop_after = stop_after, cut.stop = false, cut.gap = false;
    cut.base = data;
    return net_udp_gro_split(data, len, seg, on_segment, NULL, &cut.stop);
}

static uint8_t buf[NET_UDP_DATAGRAM_MAX + 1024];

Test(net_udp_gro, split_random_lengths_and_sizes)
{
    for (unsigned iter = 0; iter < 20000; iter++) {
        size_t len = next() % (sizeof(buf) + 1);
        size_t seg = iter % 4 == 0 ? next() % 2000 : next() % (sizeof(buf) + 2000);
        unsigned n = split(buf, len, seg, 0);
        unsigned want = seg == 0 || seg >= len ? 1 : (unsigned)((len + seg - 1) / seg);
        cr_assert_eq(n, want, "len %zu seg %zu: %u segments, want %u", len, seg, n, want);
        cr_assert_eq(cut.count, n);
        cr_assert(!cut.gap, "len %zu seg %zu: segments not back to back", len, seg);
        cr_assert_eq(cut.off, len, "len %zu seg %zu: the segments cover %zu bytes", len, seg,
                     cut.off);
        for (unsigned i = 0; i + 1 < n; i++)
            cr_assert_eq(cut.lens[i], seg, "len %zu seg %zu: segment %u is %zu bytes", len, seg, i,
                         cut.lens[i]);
        if (n > 1)
            cr_assert(cut.lens[n - 1] >= 1 && cut.lens[n - 1] <= seg, "len %zu seg %zu: last %zu",
                      len, seg, cut.lens[n - 1]);
    }
}

Test(net_udp_gro, split_edges)
{
    cr_assert_eq(split(buf, 0, 0, 0), 1, "an empty datagram is one datagram");
    cr_assert_eq(cut.lens[0], 0);
    cr_assert_eq(split(buf, 0, 1000, 0), 1);
    cr_assert_eq(split(buf, 1000, 1000, 0), 1, "a size equal to the length: not coalesced");
    cr_assert_eq(split(buf, 1000, 0, 0), 1, "no size: the buffer whole");
    cr_assert_eq(split(buf, 1001, 1000, 0), 2);
    cr_assert_eq(cut.lens[1], 1);
    cr_assert_eq(split(buf, 64000, 1000, 0), 64);
    cr_assert_eq(split(buf, 65535, 1, 0), 65535, "one byte each: as many as bytes");
}

Test(net_udp_gro, split_stops_when_the_app_closed)
{
    cr_assert_eq(split(buf, 10000, 1000, 3), 3, "closed in the third segment's callback");
    cr_assert_eq(split(buf, 10000, 1000, 1), 1);
    cr_assert_eq(split(buf, 10000, 1000, 10), 10);
    cr_assert_eq(split(buf, 500, 1000, 1), 1, "a single datagram is handed over whole");
}

/* Appends one cmsg (level, type, an int value) at *off of block: returns false when it does not
 * fit. */
static bool put(uint8_t *block, size_t cap, size_t *off, int level, int type, int value)
{
    if (*off + CMSG_SPACE(sizeof(int)) > cap)
        return false;
    struct cmsghdr h = {.cmsg_len = CMSG_LEN(sizeof(int)), .cmsg_level = level, .cmsg_type = type};
    memcpy(block + *off, &h, sizeof(h));
    memcpy(block + *off + CMSG_LEN(0), &value, sizeof(value));
    *off += CMSG_SPACE(sizeof(int));
    return true;
}

Test(net_udp_gro, gro_size_well_formed)
{
    _Alignas(struct cmsghdr) uint8_t block[256] = {0};
    size_t off = 0;
    cr_assert_eq(net_udp_gro_size(block, 0), 0, "no control block: not coalesced");
    put(block, sizeof(block), &off, SOL_UDP, UDP_GRO, 1420);
    cr_assert_eq(net_udp_gro_size(block, off), 1420);
    off = 0;
    put(block, sizeof(block), &off, IPPROTO_IP, IP_TOS, 7);
    put(block, sizeof(block), &off, SOL_SOCKET, SO_TIMESTAMP, 1);
    put(block, sizeof(block), &off, SOL_UDP, UDP_GRO, 1000);
    cr_assert_eq(net_udp_gro_size(block, off), 1000, "found after other cmsgs");
    size_t pad = CMSG_SPACE(sizeof(int)) - CMSG_LEN(sizeof(int));
    cr_assert_eq(net_udp_gro_size(block, off - pad), 1000, "the last one without its padding");
    cr_assert_eq(net_udp_gro_size(block, off - pad - 1), 0, "the GRO cmsg cut short: none");
    off = 0;
    put(block, sizeof(block), &off, SOL_UDP, UDP_GRO, 0);
    cr_assert_eq(net_udp_gro_size(block, off), 0);
    off = 0;
    put(block, sizeof(block), &off, SOL_UDP, UDP_GRO, -5);
    cr_assert_eq(net_udp_gro_size(block, off), 0, "a negative size is no size");
    off = 0;
    put(block, sizeof(block), &off, SOL_UDP, UDP_SEGMENT, 1000);
    cr_assert_eq(net_udp_gro_size(block, off), 0, "UDP_SEGMENT is the send side's");
}

Test(net_udp_gro, gro_size_malformed_blocks)
{
    _Alignas(struct cmsghdr) uint8_t block[256] = {0};
    struct cmsghdr h = {.cmsg_len = 0, .cmsg_level = SOL_UDP, .cmsg_type = UDP_GRO};
    memset(block, 0, sizeof(block));
    memcpy(block, &h, sizeof(h));
    cr_assert_eq(net_udp_gro_size(block, sizeof(block)), 0, "a zero length: no endless walk");
    h.cmsg_len = sizeof(block) + 1;
    memcpy(block, &h, sizeof(h));
    cr_assert_eq(net_udp_gro_size(block, sizeof(block)), 0, "a length past the block");
    h.cmsg_len = sizeof(struct cmsghdr); /* a header with no room for the int */
    memcpy(block, &h, sizeof(h));
    cr_assert_eq(net_udp_gro_size(block, sizeof(struct cmsghdr)), 0);
    for (size_t len = 0; len < sizeof(struct cmsghdr); len++)
        cr_assert_eq(net_udp_gro_size(block, len), 0, "shorter than a header: %zu", len);
}

Test(net_udp_gro, gro_size_random_bytes)
{
    /* Random blocks, some with a well-formed GRO cmsg at a random aligned place, every length:
     * the walk reads only inside the block (ASan in the debug preset), ends, and a size it
     * returns is one a GRO cmsg in the block carries. */
    _Alignas(struct cmsghdr) uint8_t block[512];
    for (unsigned iter = 0; iter < 20000; iter++) {
        for (size_t i = 0; i < sizeof(block); i += 8) {
            uint64_t r = next();
            memcpy(block + i, &r, 8);
        }
        if (iter % 2) { /* plausible lengths, so the walk goes further than the first header */
            for (size_t off = 0; off + sizeof(struct cmsghdr) <= sizeof(block);
                 off += CMSG_SPACE(sizeof(int))) {
                struct cmsghdr h;
                memcpy(&h, block + off, sizeof(h));
                h.cmsg_len = next() % 4 ? CMSG_LEN(sizeof(int)) : next() % 64;
                memcpy(block + off, &h, sizeof(h));
            }
        }
        size_t len = next() % (sizeof(block) + 1);
        size_t seg = net_udp_gro_size(block, len);
        cr_assert_leq(seg, (size_t)INT32_MAX);
        if (seg == 0)
            continue;
        bool found = false;
        for (size_t off = 0; off + CMSG_LEN(sizeof(int)) <= len && !found; off += 8) {
            struct cmsghdr h;
            int v;
            memcpy(&h, block + off, sizeof(h));
            memcpy(&v, block + off + CMSG_LEN(0), sizeof(v));
            found = h.cmsg_level == SOL_UDP && h.cmsg_type == UDP_GRO && (size_t)v == seg;
        }
        cr_assert(found, "iteration %u: size %zu is in no GRO cmsg of the block", iter, seg);
    }
}
