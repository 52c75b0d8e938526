/* bench_wg.c - hderp-bench-wg: WireGuard-shaped UDP load through hderp-wgrelay, and the floor.
 *
 *   hderp-bench-wg --print-peers N            a peers file for N pairs (keys from a fixed seed)
 *   hderp-bench-wg --floor HOST:PORT          the floor: a plain UDP forwarder, as simple as it
 *                                             gets (recvfrom, one table lookup, sendto)
 *   hderp-bench-wg --relay HOST:PORT [--pairs N] [--seconds S] [--rate PPS] [--size B] [--plain]
 *
 * The generator opens two UDP sockets per pair. Against hderp-wgrelay it first makes each pair
 * meet with real WireGuard message shapes (initiations and a response carrying MAC1s for the
 * registered keys; the relay must run with --handshake-rate 0, every source being 127.0.0.1);
 * against the floor (--plain) each socket sends one message to its own index, which is how the
 * floor learns where an index lives. Then both sides of every pair send data messages (type 4,
 * the partner's index, a counter, a sequence number and a send time inside) at --rate packets
 * per second each (0: as fast as the sockets take them) for --seconds, and the generator counts
 * what arrives: received, lost, reordered, one-way latency (same clock), bytes. One line of
 * results; nothing passes or fails on timing (perf/README.md). */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <hd/net.h>

#include "wgr.h"

#define PAIRS_MAX   256u
#define FLOOR_SLOTS 65536u /* the floor's index table: direct-mapped by index */
#define LAT_MAX     (1u << 20)

struct side {
    int fd;
    uint32_t my_idx, peer_idx;
    uint64_t counter, sent, received, reordered, max_seq;
};

static struct side sides[2 * PAIRS_MAX];
static uint32_t *lat_us;
static size_t lat_count;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void key_of(unsigned i, uint8_t k[WGR_KEY_LEN])
{
    for (unsigned j = 0; j < WGR_KEY_LEN; j++)
        k[j] = (uint8_t)(i * 131u + j * 7u + 1u);
}

static int print_peers(unsigned pairs)
{
    for (unsigned i = 0; i < 2 * pairs; i++) {
        uint8_t k[WGR_KEY_LEN];
        char b64[64];
        key_of(i, k);
        /* base64 by hand: 32 bytes -> 44 characters */
        static const char tab[] =
            "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        unsigned o = 0;
        for (unsigned j = 0; j < 33; j += 3) {
            uint32_t v = (uint32_t)k[j] << 16 | (j + 1 < 32 ? (uint32_t)k[j + 1] << 8 : 0) |
                         (j + 2 < 32 ? k[j + 2] : 0);
            b64[o++] = tab[v >> 18 & 63];
            b64[o++] = tab[v >> 12 & 63];
            b64[o++] = j + 1 < 32 ? tab[v >> 6 & 63] : '=';
            b64[o++] = j + 2 < 32 ? tab[v & 63] : '=';
        }
        b64[o] = '\0';
        printf("%s p%u p%u\n", b64, i, i ^ 1u);
    }
    return 0;
}

/* ---------------------------------------------------------------- the floor */

static int floor_run(const struct net_addr *at)
{
    int fd = socket(at->sa.sa_family, SOCK_DGRAM, 0), bytes = 4 << 20; /* as hderp-wgrelay */
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
    if (fd < 0 || bind(fd, &at->sa, at->len) < 0) {
        perror("hderp-bench-wg --floor");
        return 1;
    }
    static struct {
        uint32_t idx;
        struct sockaddr_storage a;
        socklen_t len;
    } table[FLOOR_SLOTS];
    printf("floor: listening\n");
    fflush(stdout);
    uint8_t buf[2048];
    for (;;) {
        struct sockaddr_storage from;
        socklen_t flen = sizeof(from);
        ssize_t n = recvfrom(fd, buf, sizeof(buf), 0, (struct sockaddr *)&from, &flen);
        if (n < 8)
            continue;
        uint32_t idx = wgr_le32(buf + 4);
        unsigned slot = idx & (FLOOR_SLOTS - 1);
        if (table[slot].len == 0 || table[slot].idx != idx) { /* learn where idx lives */
            table[slot].idx = idx;
            table[slot].a = from;
            table[slot].len = flen;
            continue;
        }
        sendto(fd, buf, (size_t)n, 0, (struct sockaddr *)&table[slot].a, table[slot].len);
    }
}

/* ---------------------------------------------------------------- the generator */

static void put32(uint8_t *p, uint32_t v)
{
    for (unsigned i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void send_to(int fd, const void *p, size_t len)
{
    if (send(fd, p, len, 0) < 0 && errno != EAGAIN && errno != ENOBUFS)
        perror("send");
}

static void drain(int fd, uint8_t *buf, size_t cap, ssize_t *n)
{
    *n = recv(fd, buf, cap, MSG_DONTWAIT);
}

/* Pair i meets: b initiates (no route yet: b becomes a candidate), a initiates (sent to the
 * candidate b), b answers a with a response whose MAC1 names a. */
static int meet(unsigned i)
{
    struct side *a = &sides[2 * i], *b = &sides[2 * i + 1];
    uint8_t ka[WGR_KEY_LEN], kb[WGR_KEY_LEN], mka[WGR_KEY_LEN], mkb[WGR_KEY_LEN];
    key_of(2 * i, ka), key_of(2 * i + 1, kb);
    wgr_mac1_key(ka, mka), wgr_mac1_key(kb, mkb);
    uint8_t m[WGR_INITIATION_LEN] = {1}, r[WGR_RESPONSE_LEN] = {2}, buf[2048];
    put32(m + 4, b->my_idx ^ 0x80000000u);
    wgr_mac1_put(mka, m, WGR_INITIATION_MAC1);
    send_to(b->fd, m, sizeof(m));
    usleep(2000);
    put32(m + 4, a->my_idx);
    wgr_mac1_put(mkb, m, WGR_INITIATION_MAC1);
    send_to(a->fd, m, sizeof(m));
    struct pollfd p = {.fd = b->fd, .events = POLLIN};
    for (uint64_t end = now_ns() + 2000000000u; now_ns() < end;) {
        ssize_t n = -1;
        if (poll(&p, 1, 100) > 0)
            drain(b->fd, buf, sizeof(buf), &n);
        if (n == WGR_INITIATION_LEN && wgr_le32(buf + 4) == a->my_idx)
            break;
    }
    put32(r + 4, b->my_idx);
    put32(r + 8, a->my_idx);
    wgr_mac1_put(mka, r, WGR_RESPONSE_MAC1);
    send_to(b->fd, r, sizeof(r));
    p.fd = a->fd;
    for (uint64_t end = now_ns() + 2000000000u; now_ns() < end;) {
        ssize_t n = -1;
        if (poll(&p, 1, 100) > 0)
            drain(a->fd, buf, sizeof(buf), &n);
        if (n == WGR_RESPONSE_LEN)
            return 0;
    }
    fprintf(stderr, "hderp-bench-wg: pair %u did not meet through the relay\n", i);
    return -1;
}

static void send_data(struct side *s, uint8_t *pkt, size_t size)
{
    memset(pkt, 0, 16);
    pkt[0] = 4;
    put32(pkt + 4, s->peer_idx);
    uint64_t c = s->counter++, t = now_ns();
    memcpy(pkt + 8, &c, 8);
    memcpy(pkt + 16, &c, 8); /* the sequence number, inside the "encrypted" part */
    memcpy(pkt + 24, &t, 8);
    if (send(s->fd, pkt, size, MSG_DONTWAIT) == (ssize_t)size)
        s->sent++;
    else
        s->counter--;
}

static void receive(struct side *s, uint8_t *buf)
{
    ssize_t n;
    while ((n = recv(s->fd, buf, 2048, MSG_DONTWAIT)) >= 32) {
        if (buf[0] != 4)
            continue;
        uint64_t seq, t;
        memcpy(&seq, buf + 16, 8);
        memcpy(&t, buf + 24, 8);
        s->received++;
        if (seq + 1 < s->max_seq)
            s->reordered++;
        if (seq + 1 > s->max_seq)
            s->max_seq = seq + 1;
        if (lat_count < LAT_MAX)
            lat_us[lat_count++] = (uint32_t)((now_ns() - t) / 1000u);
    }
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static int generate(const struct net_addr *relay, unsigned pairs, double seconds, double rate,
                    unsigned size, bool plain)
{
    lat_us = malloc(LAT_MAX * sizeof(*lat_us));
    uint8_t pkt[2048], buf[2048];
    for (unsigned i = 0; i < 2 * pairs; i++) {
        struct side *s = &sides[i];
        s->fd = socket(relay->sa.sa_family, SOCK_DGRAM, 0);
        int big = 4 << 20;
        setsockopt(s->fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
        if (s->fd < 0 || connect(s->fd, &relay->sa, relay->len) < 0) {
            perror("hderp-bench-wg: socket");
            return 1;
        }
        s->my_idx = 0x1000u + i;
        s->peer_idx = 0x1000u + (i ^ 1u);
    }
    for (unsigned i = 0; i < pairs; i++) {
        if (plain) {
            uint8_t hello[32] = {4};
            put32(hello + 4, sides[2 * i].my_idx);
            send_to(sides[2 * i].fd, hello, 32);
            put32(hello + 4, sides[2 * i + 1].my_idx);
            send_to(sides[2 * i + 1].fd, hello, 32);
        } else if (meet(i) < 0) {
            return 1;
        }
    }
    usleep(100000);
    uint64_t start = now_ns(), end = start + (uint64_t)(seconds * 1e9);
    while (now_ns() < end) {
        double elapsed = (double)(now_ns() - start) / 1e9;
        for (unsigned i = 0; i < 2 * pairs; i++) {
            struct side *s = &sides[i];
            uint64_t due = rate > 0 ? (uint64_t)(elapsed * rate) : s->sent + 8;
            for (unsigned k = 0; s->sent < due && k < 64; k++)
                send_data(s, pkt, size);
            receive(s, buf);
        }
        if (rate > 0)
            usleep(50);
    }
    for (uint64_t stop = now_ns() + 500000000u; now_ns() < stop;) /* stragglers */
        for (unsigned i = 0; i < 2 * pairs; i++)
            receive(&sides[i], buf);
    uint64_t sent = 0, received = 0, reordered = 0;
    for (unsigned i = 0; i < 2 * pairs; i++) {
        sent += sides[i].sent, received += sides[i].received, reordered += sides[i].reordered;
    }
    qsort(lat_us, lat_count, sizeof(*lat_us), cmp_u32);
    uint32_t p50 = lat_count ? lat_us[lat_count / 2] : 0;
    uint32_t p99 = lat_count ? lat_us[lat_count * 99 / 100] : 0;
    printf("pairs %u size %u rate %.0f seconds %.1f sent %llu received %llu lost %llu "
           "reordered %llu bytes %llu pps %.0f lat_p50_us %u lat_p99_us %u\n",
           pairs, size, rate, seconds, (unsigned long long)sent, (unsigned long long)received,
           (unsigned long long)(sent - received), (unsigned long long)reordered,
           (unsigned long long)(received * size), (double)received / seconds, p50, p99);
    return 0;
}

int main(int argc, char **argv)
{
    struct net_addr relay = {0};
    unsigned pairs = 4, size = 1280;
    double seconds = 5, rate = 0;
    bool plain = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--print-peers") == 0 && v)
            return print_peers((unsigned)atoi(v));
        if (strcmp(a, "--floor") == 0 && v && net_addr_parse(v, &relay) == 0)
            return floor_run(&relay);
        if (strcmp(a, "--relay") == 0 && v && net_addr_parse(v, &relay) == 0)
            i++;
        else if (strcmp(a, "--pairs") == 0 && v && (pairs = (unsigned)atoi(v)) > 0)
            i++;
        else if (strcmp(a, "--seconds") == 0 && v && (seconds = atof(v)) > 0)
            i++;
        else if (strcmp(a, "--rate") == 0 && v && (rate = atof(v)) >= 0)
            i++;
        else if (strcmp(a, "--size") == 0 && v && (size = (unsigned)atoi(v)) >= 32)
            i++;
        else if (strcmp(a, "--plain") == 0)
            plain = true;
        else {
            fprintf(stderr, "usage: hderp-bench-wg --print-peers N | --floor HOST:PORT | --relay "
                            "HOST:PORT [--pairs N] [--seconds S] [--rate PPS] [--size B] "
                            "[--plain]\n");
            return 2;
        }
    }
    if (relay.len == 0 || pairs > PAIRS_MAX || size > WGR_DATAGRAM_MAX) {
        fprintf(stderr, "hderp-bench-wg: --relay is required; at most %u pairs, %u bytes\n",
                PAIRS_MAX, WGR_DATAGRAM_MAX);
        return 2;
    }
    return generate(&relay, pairs, seconds, rate, size, plain);
}
