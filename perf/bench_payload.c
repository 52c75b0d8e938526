/* bench_payload.c - hderp-bench's packet payload: the 32-byte header (magic, pair, sequence,
 * send time, flags, checksum) stamped in front of a per-pair filler, and the check a receiver
 * makes. Pure functions over bytes, called by whichever thread sends or receives (the
 * generator's shards, the client-like senders' threads). */
#include <string.h>

#include "bench_relay_impl.h"

/* FNV-1a's 64-bit parameters, applied to 64-bit words (a fast, order-sensitive checksum). */
#define BENCH_FNV_PRIME 0x100000001b3ull

uint64_t bench_hash_bytes(uint64_t h, const uint8_t *p, size_t len)
{
    size_t i = 0;
    for (; i + 8 <= len; i += 8)
        h = (h ^ bench_get64(p + i)) * BENCH_FNV_PRIME;
    for (; i < len; i++)
        h = (h ^ p[i]) * BENCH_FNV_PRIME;
    return h;
}

/* Header layout: [0] magic u32, [4] pair u32, [8] seq u64, [16] send time u64 (ns,
 * CLOCK_MONOTONIC), [24] flags u32, [28] checksum u32. The checksum covers the filler first and
 * the header last, so a sender hashes the filler once per run and four words per packet. */
uint64_t bench_hash_header(uint64_t h, const uint8_t *hdr)
{
    h = bench_hash_bytes(h, hdr, 24);
    return (h ^ bench_get32(hdr + 24)) * BENCH_FNV_PRIME;
}

static uint32_t hash_fold(uint64_t h)
{
    return (uint32_t)(h ^ (h >> 32));
}

_Static_assert(BENCH_HDR_LEN == 32, "header layout above");

void bench_payload_stamp(struct bench_sender *tx, uint64_t seq, uint64_t t, uint32_t flags)
{
    uint8_t *b = tx->buf;
    bench_put32(b, BENCH_MAGIC);
    bench_put32(b + 4, tx->pair->id);
    bench_put64(b + 8, seq);
    bench_put64(b + 16, t);
    bench_put32(b + 24, flags);
    bench_put32(b + 28, hash_fold(bench_hash_header(tx->body_hash, b)));
}

bool bench_payload_check(const uint8_t *data, size_t len)
{
    /* Any size that carries the header: an instance elsewhere may run another --size; the
     * checksum over the whole payload catches truncation. */
    if (len < BENCH_HDR_LEN || bench_get32(data) != BENCH_MAGIC)
        return false;
    uint64_t h = bench_hash_bytes(BENCH_FNV_OFFSET, data + BENCH_HDR_LEN, len - BENCH_HDR_LEN);
    return hash_fold(bench_hash_header(h, data)) == bench_get32(data + 28);
}
