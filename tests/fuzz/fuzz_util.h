/* fuzz_util.h - what every libFuzzer target here shares: the entry point's prototype, CHECK (an
 * invariant the code under test promises; a failure aborts, which libFuzzer reports with the
 * input), a digest for comparing two runs, and a reader over the fuzzer's bytes. */
#ifndef FUZZ_UTIL_H
#define FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond);           \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* FNV-1a style running digest. */
static inline uint64_t fuzz_mix(uint64_t h, uint64_t v)
{
    return (h ^ v) * 0x100000001b3ull;
}

static inline uint64_t fuzz_mix_bytes(uint64_t h, const uint8_t *p, size_t len)
{
    for (size_t i = 0; i < len; i++)
        h = fuzz_mix(h, p[i]);
    return h;
}

/* Consumes the fuzzer's input front to back; past the end every read is 0. */
struct fuzz_in {
    const uint8_t *p;
    size_t len;
};

static inline uint8_t fuzz_u8(struct fuzz_in *in)
{
    if (in->len == 0)
        return 0;
    in->len--;
    return *in->p++;
}

static inline uint16_t fuzz_u16(struct fuzz_in *in)
{
    uint16_t hi = fuzz_u8(in);
    return (uint16_t)(hi << 8 | fuzz_u8(in));
}

#endif
