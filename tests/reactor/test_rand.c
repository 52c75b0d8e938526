/* test_rand.c - the shard's generator (hd/hd_rand.h): xoshiro256** against the reference
 * sequence, every shard seeded apart and every run seeded anew (libc's rand() gave every thread
 * one shared sequence, the same in every run), hd_rand_below in range for small, odd and huge
 * bounds, roughly uniform, and free of the modulo bias (where x % n would favour the low
 * results). The statistical bounds are 10 standard deviations or more wide: they cannot fail
 * by chance, only for a wrong generator. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include <hd/hd_rand.h>

#include "harness.h"
#include "hd_impl.h" /* the state, to start from a known one */

#define SHARDS 4

struct first_draws {
    uint64_t state[SHARDS][4]; /* as the runtime seeded it */
    uint64_t draw[SHARDS][2];
};

static void draws_body(struct hd_shard *s, void *arg)
{
    struct first_draws *d = arg;
    unsigned id = hd_shard_id(s);
    memcpy(d->state[id], s->rand_state, sizeof(d->state[id]));
    d->draw[id][0] = hd_rand_u64(s);
    d->draw[id][1] = hd_rand_u64(s);
    hdt_done(s);
}

/* Equal 256-bit states from getrandom: 2^-256. */
Test(test_reactor_rand, seeded_per_shard_and_per_run)
{
    static struct first_draws a, b;
    struct hdt_options o = {.shards = SHARDS};
    cr_assert_eq(hdt_run(&o, draws_body, &a, NULL), 0);
    cr_assert_eq(hdt_run(&o, draws_body, &b, NULL), 0);
    for (unsigned i = 0; i < SHARDS; i++) {
        const uint64_t *st = a.state[i];
        cr_assert(st[0] | st[1] | st[2] | st[3], "shard %u: an all-zero xoshiro state", i);
        for (unsigned j = 0; j < i; j++) {
            cr_assert(memcmp(a.state[i], a.state[j], sizeof(a.state[i])) != 0,
                      "shards %u and %u were seeded alike", i, j);
            cr_assert_neq(a.draw[i][0], a.draw[j][0], "shards %u and %u drew alike", i, j);
        }
        cr_assert(memcmp(a.state[i], b.state[i], sizeof(a.state[i])) != 0,
                  "shard %u was seeded alike in two runs", i);
        cr_assert_neq(a.draw[i][0], b.draw[i][0], "shard %u drew alike in two runs", i);
    }
}

/* The checks that need one shard run on it, their verdicts come back here (cr_assert must stay
 * on the test's thread). */
struct one {
    void (*fn)(struct hd_shard *s, struct one *o);
    uint64_t got[16];
    uint64_t bad, count[16];
};

static void one_body(struct hd_shard *s, void *arg)
{
    struct one *o = arg;
    o->fn(s, o);
    hdt_done(s);
}

static void run_one(struct one *o)
{
    struct hdt_options opt = {.shards = 1};
    cr_assert_eq(hdt_run(&opt, one_body, o, NULL), 0);
}

static void known_answer(struct hd_shard *s, struct one *o)
{
    const uint64_t st[4] = {1, 2, 3, 4};
    memcpy(s->rand_state, st, sizeof(st));
    for (unsigned i = 0; i < 10; i++)
        o->got[i] = hd_rand_u64(s);
}

/* The reference implementation's first outputs from the state {1, 2, 3, 4} (the same as the
 * test vector of Rust's rand_xoshiro crate). */
Test(test_reactor_rand, xoshiro256starstar_reference_sequence)
{
    static const uint64_t want[10] = {
        11520u,
        0u,
        1509978240u,
        1215971899390074240u,
        1216172134540287360u,
        607988272756665600u,
        16172922978634559625u,
        8476171486693032832u,
        10595114339597558777u,
        2904607092377533576u,
    };
    static struct one o = {.fn = known_answer};
    run_one(&o);
    for (unsigned i = 0; i < 10; i++)
        cr_assert_eq(o.got[i], want[i], "draw %u: %llu, want %llu", i, (unsigned long long)o.got[i],
                     (unsigned long long)want[i]);
}

static const uint64_t bounds[] = {
    1,
    2,
    3,
    7,
    1000,
    (1ull << 32) + 1,
    1ull << 63,
    (1ull << 63) + 1,
    0xaaaaaaaaaaaaaaabull,
    UINT64_MAX,
};

static void in_range(struct hd_shard *s, struct one *o)
{
    for (unsigned b = 0; b < HD_ARRAY_SIZE(bounds); b++) {
        uint64_t max = 0;
        for (unsigned i = 0; i < 20000; i++) {
            uint64_t x = hd_rand_below(s, bounds[b]);
            if (x >= bounds[b])
                o->bad++;
            max = x > max ? x : max;
        }
        o->got[b] = max;
    }
}

Test(test_reactor_rand, below_stays_below)
{
    static struct one o = {.fn = in_range};
    run_one(&o);
    cr_assert_eq(o.bad, 0, "%llu draws at or past their bound", (unsigned long long)o.bad);
    cr_assert_eq(o.got[0], 0, "below(1) is always 0");
    cr_assert_eq(o.got[1], 1, "below(2) never drew 1 in 20000 tries");
    /* The huge bounds reach their top half (each draw does with probability >= 1/2). */
    for (unsigned b = 6; b < HD_ARRAY_SIZE(bounds); b++)
        cr_assert_geq(o.got[b], bounds[b] / 2, "below(%llu) stayed low: at most %llu",
                      (unsigned long long)bounds[b], (unsigned long long)o.got[b]);
}

#define UNIFORM_BUCKETS 10
#define UNIFORM_DRAWS   100000

static void uniform(struct hd_shard *s, struct one *o)
{
    for (unsigned i = 0; i < UNIFORM_DRAWS; i++)
        o->count[hd_rand_below(s, UNIFORM_BUCKETS)]++;
}

/* Each bucket expects 10000 with a standard deviation of ~95: +-1000 is over 10 of them. */
Test(test_reactor_rand, below_roughly_uniform)
{
    static struct one o = {.fn = uniform};
    run_one(&o);
    for (unsigned i = 0; i < UNIFORM_BUCKETS; i++)
        cr_assert(o.count[i] >= 9000 && o.count[i] <= 11000, "bucket %u: %llu of %u", i,
                  (unsigned long long)o.count[i], UNIFORM_DRAWS);
}

/* n = 0xaaaaaaaaaaaaaaab, about 2/3 of 2^64: x % n hits [0, 2^64 - n) twice as often as the
 * rest, so 2/3 of its results fall below 2^64 - n (~n/2); unbiased, about half do. */
#define BIAS_N     0xaaaaaaaaaaaaaaabull
#define BIAS_DRAWS 20000

static void bias(struct hd_shard *s, struct one *o)
{
    uint64_t low_end = 0 - BIAS_N; /* 2^64 - n */
    for (unsigned i = 0; i < BIAS_DRAWS; i++)
        if (hd_rand_below(s, BIAS_N) < low_end)
            o->count[0]++;
}

/* Unbiased: 10000 +- 71 (one standard deviation); modulo: ~13333. */
Test(test_reactor_rand, below_without_modulo_bias)
{
    static struct one o = {.fn = bias};
    run_one(&o);
    cr_assert(o.count[0] >= 9000 && o.count[0] <= 11000,
              "%llu of %u draws below 2^64 - n: want about half (x %% n gives 2/3)",
              (unsigned long long)o.count[0], BIAS_DRAWS);
}
