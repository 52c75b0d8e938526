/* rand.c - each shard's pseudo-random generator (hd/hd_rand.h): xoshiro256** over the 32 bytes
 * of state in struct hd_shard, and its seeding. Seeded on the main thread when the runtime
 * allocates the shard (before the shard's thread exists); drawn from on the shard's own thread
 * only, so it needs neither a lock nor an atomic. Owns nothing else. */
#include <errno.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include <hd/hd_rand.h>

#include "hd_impl.h"

_Static_assert(sizeof(((struct hd_shard *)0)->rand_state) == 32, "xoshiro256: 256 bits");

static inline uint64_t rotl(uint64_t x, unsigned k)
{
    return (x << k) | (x >> (64 - k));
}

/* splitmix64 as a generator (what the xoshiro authors advise to expand a 64-bit seed into a
 * state): its output is a bijection of its counter, so four draws are never all zero, and two
 * seeds give two different states (the first word alone tells them apart). */
static uint64_t splitmix64_next(uint64_t *x)
{
    uint64_t z = hd_splitmix64(*x);
    *x += HD_SPLITMIX64_GAMMA;
    return z;
}

void hd_rand_seed_from(struct hd_shard *s, uint64_t seed)
{
    for (unsigned i = 0; i < 4; i++)
        s->rand_state[i] = splitmix64_next(&seed);
}

void hd_rand_seed(struct hd_shard *s)
{
    /* GRND_NONBLOCK: before the kernel's pool is initialised (early boot) this fails with
     * EAGAIN rather than block the start-up; jitter does not need that much. */
    ssize_t n = getrandom(s->rand_state, sizeof(s->rand_state), GRND_NONBLOCK);
    const uint64_t *st = s->rand_state;
    if (n == (ssize_t)sizeof(s->rand_state) && (st[0] | st[1] | st[2] | st[3]) != 0)
        return; /* xoshiro's one forbidden state is all zero */
    if (n < 0)
        hd_log(HD_LOG_WARN, "getrandom: %s: shard %u's generator is seeded from the clock",
               strerror(errno), s->id);
    /* Different per shard whatever the clock reads: the id is added, not mixed in. */
    uint64_t seed = hd_clock_ns() ^ ((uint64_t)getpid() << 32);
    hd_rand_seed_from(s, hd_splitmix64(seed) + s->id);
}

uint64_t hd_rand_u64(struct hd_shard *s)
{
    /* xoshiro256** 1.0, as in the authors' reference xoshiro256starstar.c */
    uint64_t *st = s->rand_state;
    uint64_t result = rotl(st[1] * 5, 7) * 9;
    uint64_t t = st[1] << 17;
    st[2] ^= st[0];
    st[3] ^= st[1];
    st[1] ^= st[2];
    st[0] ^= st[3];
    st[2] ^= t;
    st[3] = rotl(st[3], 45);
    return result;
}

uint64_t hd_rand_below(struct hd_shard *s, uint64_t n)
{
    HD_ASSERT(n > 0);
    /* The high half of x * n is x scaled to [0, n). Each result is hit by floor(2^64 / n) or
     * one more of the 2^64 values of x; rejecting the x whose low half falls below
     * 2^64 mod n leaves exactly floor(2^64 / n) for each. The remainder (a division) is
     * computed only when the low half is below n, which is rare unless n is huge. */
    unsigned __int128 m = (unsigned __int128)hd_rand_u64(s) * n;
    uint64_t low = (uint64_t)m;
    if (low < n) {
        uint64_t threshold = -n % n; /* 2^64 mod n, in 64-bit arithmetic */
        for (unsigned i = 1; low < threshold && i < HD_RAND_DRAWS_MAX; i++) {
            m = (unsigned __int128)hd_rand_u64(s) * n;
            low = (uint64_t)m;
        }
    }
    return (uint64_t)(m >> 64);
}
