/* hd_siphash.h - SipHash (Aumasson and Bernstein) under a 16-byte secret key, inline, for hash
 * tables an attacker must not be able to flood: hd_siphash13 (1 compression round, 3
 * finalization rounds: the variant Rust's and Python's tables use) for the relay's per-packet
 * lookups, and hd_siphash24 (the paper's, libsodium's crypto_shorthash) to check it against.
 * Pure; any thread. */
#ifndef HD_SIPHASH_H
#define HD_SIPHASH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define HD_SIPHASH_KEY_LEN 16

static inline uint64_t hd_sip_rotl(uint64_t x, unsigned b)
{
    return (x << b) | (x >> (64 - b));
}

#define HD_SIP_ROUND(v0, v1, v2, v3)                                                               \
    do {                                                                                           \
        v0 += v1;                                                                                  \
        v1 = hd_sip_rotl(v1, 13);                                                                  \
        v1 ^= v0;                                                                                  \
        v0 = hd_sip_rotl(v0, 32);                                                                  \
        v2 += v3;                                                                                  \
        v3 = hd_sip_rotl(v3, 16);                                                                  \
        v3 ^= v2;                                                                                  \
        v0 += v3;                                                                                  \
        v3 = hd_sip_rotl(v3, 21);                                                                  \
        v3 ^= v0;                                                                                  \
        v2 += v1;                                                                                  \
        v1 = hd_sip_rotl(v1, 17);                                                                  \
        v1 ^= v2;                                                                                  \
        v2 = hd_sip_rotl(v2, 32);                                                                  \
    } while (0)

static inline uint64_t hd_sip_le64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof(v));
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

/* SipHash-c-d of data[0..len) under key (c and d are constants at every call site). */
static inline uint64_t hd_siphash_cd(unsigned c, unsigned d, const uint8_t key[HD_SIPHASH_KEY_LEN],
                                     const void *data, size_t len)
{
    const uint8_t *p = data;
    uint64_t k0 = hd_sip_le64(key), k1 = hd_sip_le64(key + 8);
    uint64_t v0 = 0x736f6d6570736575ull ^ k0, v1 = 0x646f72616e646f6dull ^ k1;
    uint64_t v2 = 0x6c7967656e657261ull ^ k0, v3 = 0x7465646279746573ull ^ k1;
    size_t left = len;
    for (; left >= 8; p += 8, left -= 8) {
        uint64_t m = hd_sip_le64(p);
        v3 ^= m;
        for (unsigned i = 0; i < c; i++)
            HD_SIP_ROUND(v0, v1, v2, v3);
        v0 ^= m;
    }
    uint64_t b = (uint64_t)len << 56;
    for (size_t i = 0; i < left; i++)
        b |= (uint64_t)p[i] << (8 * i);
    v3 ^= b;
    for (unsigned i = 0; i < c; i++)
        HD_SIP_ROUND(v0, v1, v2, v3);
    v0 ^= b;
    v2 ^= 0xff;
    for (unsigned i = 0; i < d; i++)
        HD_SIP_ROUND(v0, v1, v2, v3);
    return v0 ^ v1 ^ v2 ^ v3;
}

static inline uint64_t hd_siphash13(const uint8_t key[HD_SIPHASH_KEY_LEN], const void *data,
                                    size_t len)
{
    return hd_siphash_cd(1, 3, key, data, len);
}

static inline uint64_t hd_siphash24(const uint8_t key[HD_SIPHASH_KEY_LEN], const void *data,
                                    size_t len)
{
    return hd_siphash_cd(2, 4, key, data, len);
}

#endif /* HD_SIPHASH_H */
