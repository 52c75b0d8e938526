/* bench_aead.c - hd-bench-aead: what one userspace TLS 1.3 record costs with tls/tls_record.c.
 * Per suite: seal + open of a 1400-byte record (ns per record, Gbit/s of payload), and twelve
 * 1400-byte frames sealed through the coalescer (16800 bytes -> records of 16384 + 416) versus
 * twelve single records (ns per KiB of payload). Prints "name value unit" lines, then a
 * summary. Single-threaded, allocation-free after start-up; each figure runs for a fixed time
 * budget, so the whole program takes about 4 seconds. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <openssl/base.h>
#ifndef OPENSSL_IS_BORINGSSL
#error "tls/ needs BoringSSL (android-libboringssl-dev)"
#endif

#include "tls_keys.h"
#include "tls_record.h"

/* DERP's typical packet: a WireGuard datagram under the 1500-byte MTU. */
#define BENCH_FRAME_LEN 1400
/* Frames per coalescing burst; 12 x 1400 = 16800 > 16384, so the coalescer cuts two records. */
#define BENCH_BURST_FRAMES 12
/* Time budget per figure: 9 figures x 0.4 s keeps the run under 10 s. */
#define BENCH_BUDGET_NS 400000000ull
/* Iterations between clock reads: amortises clock_gettime. */
#define BENCH_BATCH 256

_Static_assert(BENCH_BURST_FRAMES *BENCH_FRAME_LEN <= 2 * TLS_RECORD_PLAINTEXT_MAX,
               "a burst fits two records");

static uint8_t frames[BENCH_BURST_FRAMES][BENCH_FRAME_LEN];
static uint8_t wire[BENCH_BURST_FRAMES * TLS_RECORD_SIZE_MAX];

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

struct bench_pair {
    struct tls_record_state tx, rx;
};

static int pair_init(struct bench_pair *p, uint16_t suite)
{
    uint8_t secret[TLS_SECRET_LEN_MAX];
    memset(secret, 0x42, sizeof(secret));
    struct tls_traffic_keys keys;
    int rc = tls_traffic_keys_init(&keys, suite, secret,
                                   suite == TLS_SUITE_AES_256_GCM_SHA384 ? 48 : 32);
    if (rc == 0)
        rc = tls_record_state_init(&p->tx, &keys, 0);
    if (rc == 0)
        rc = tls_record_state_init(&p->rx, &keys, 0);
    tls_traffic_keys_deinit(&keys);
    return rc;
}

static void pair_deinit(struct bench_pair *p)
{
    tls_record_state_deinit(&p->tx);
    tls_record_state_deinit(&p->rx);
}

/* One seal + open of a 1400-byte record; returns 0 or -errno. */
static int seal_open_once(struct bench_pair *p)
{
    struct iovec iov = {frames[0], BENCH_FRAME_LEN};
    size_t consumed;
    ssize_t n = tls_record_seal_iov(&p->tx, &iov, 1, &consumed, wire, sizeof(wire));
    if (n < 0)
        return (int)n;
    struct tls_record_in rec;
    return tls_record_open(&p->rx, wire, (size_t)n, &rec);
}

/* The burst through the coalescer: one call, records of up to 16 KiB. */
static int seal_coalesced_once(struct bench_pair *p)
{
    struct iovec iov[BENCH_BURST_FRAMES];
    for (size_t i = 0; i < BENCH_BURST_FRAMES; i++)
        iov[i] = (struct iovec){frames[i], BENCH_FRAME_LEN};
    size_t consumed;
    ssize_t n = tls_record_seal_iov(&p->tx, iov, BENCH_BURST_FRAMES, &consumed, wire, sizeof(wire));
    return n < 0 ? (int)n : 0;
}

/* The burst as one record per frame. */
static int seal_single_once(struct bench_pair *p)
{
    size_t off = 0;
    for (size_t i = 0; i < BENCH_BURST_FRAMES; i++) {
        ssize_t n = tls_record_seal(&p->tx, TLS_CONTENT_APPLICATION_DATA, frames[i],
                                    BENCH_FRAME_LEN, wire + off, sizeof(wire) - off);
        if (n < 0)
            return (int)n;
        off += (size_t)n;
    }
    return 0;
}

/* Runs op for the time budget; returns ns per call, or a negative errno. */
static double bench_run(struct bench_pair *p, int (*op)(struct bench_pair *))
{
    uint64_t start = now_ns(), elapsed = 0, calls = 0;
    while (elapsed < BENCH_BUDGET_NS) {
        for (int i = 0; i < BENCH_BATCH; i++) {
            int rc = op(p);
            if (rc < 0)
                return rc;
        }
        calls += BENCH_BATCH;
        elapsed = now_ns() - start;
    }
    return (double)elapsed / (double)calls;
}

struct bench_suite {
    uint16_t suite;
    const char *name;
    double seal_open_ns, coalesced_ns_per_kib, single_ns_per_kib;
};

static int bench_suite(struct bench_suite *s)
{
    struct bench_pair p;
    int rc = pair_init(&p, s->suite);
    if (rc < 0)
        return rc;
    double burst_kib = BENCH_BURST_FRAMES * BENCH_FRAME_LEN / 1024.0;
    double seal_open = bench_run(&p, seal_open_once);
    double coalesced = bench_run(&p, seal_coalesced_once);
    double single = bench_run(&p, seal_single_once);
    pair_deinit(&p);
    if (seal_open < 0 || coalesced < 0 || single < 0)
        return -EIO;
    s->seal_open_ns = seal_open;
    s->coalesced_ns_per_kib = coalesced / burst_kib;
    s->single_ns_per_kib = single / burst_kib;
    printf("bench_aead_%s_seal_open_1400_ns %.1f ns/record\n", s->name, s->seal_open_ns);
    printf("bench_aead_%s_seal_open_1400_gbps %.2f Gbit/s\n", s->name,
           BENCH_FRAME_LEN * 8.0 / s->seal_open_ns);
    printf("bench_aead_%s_seal_12x1400_coalesced %.1f ns/KiB\n", s->name, s->coalesced_ns_per_kib);
    printf("bench_aead_%s_seal_12x1400_single %.1f ns/KiB\n", s->name, s->single_ns_per_kib);
    fflush(stdout);
    return 0;
}

int main(void)
{
    if (!tls_crypto_is_boringssl()) {
        fprintf(stderr, "hd-bench-aead: libcrypto is not BoringSSL\n");
        return 1;
    }
    for (size_t f = 0; f < BENCH_BURST_FRAMES; f++) {
        for (size_t i = 0; i < BENCH_FRAME_LEN; i++)
            frames[f][i] = (uint8_t)(f + i * 3);
    }
    struct bench_suite suites[] = {
        {TLS_SUITE_AES_128_GCM_SHA256, "aes_128_gcm", 0, 0, 0},
        {TLS_SUITE_AES_256_GCM_SHA384, "aes_256_gcm", 0, 0, 0},
        {TLS_SUITE_CHACHA20_POLY1305_SHA256, "chacha20_poly1305", 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof(suites) / sizeof(suites[0]); i++) {
        int rc = bench_suite(&suites[i]);
        if (rc < 0) {
            fprintf(stderr, "hd-bench-aead: %s failed: %s\n", suites[i].name, strerror(-rc));
            return 1;
        }
    }
    printf("# summary: seal+open of one 1400-byte record; 12 x 1400-byte frames sealed\n"
           "# coalesced (2 records) vs 12 single records\n");
    for (size_t i = 0; i < sizeof(suites) / sizeof(suites[0]); i++) {
        const struct bench_suite *s = &suites[i];
        printf("# %-18s %7.1f ns/record %6.2f Gbit/s | coalesced %6.1f ns/KiB, single %6.1f "
               "ns/KiB (%.2fx)\n",
               s->name, s->seal_open_ns, BENCH_FRAME_LEN * 8.0 / s->seal_open_ns,
               s->coalesced_ns_per_kib, s->single_ns_per_kib,
               s->single_ns_per_kib / s->coalesced_ns_per_kib);
    }
    return 0;
}
