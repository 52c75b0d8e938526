/* test_bus.c - the cross-shard bus on real shards: millions of sequenced messages in both
 * directions (and all-to-all on three shards sharing two cores), exact ring-full backpressure
 * against a consumer that is blocked (bulk, then the room it leaves for control messages), wake-ups
 * of a sleeping shard by MSG_RING and by the eventfd fallback, invalid destinations, and
 * hd_collect. Messages to the own shard: test_bus_self.c.
 *
 * ThreadSanitizer: Criterion's runner cannot start under TSan (BoxFort's inheritable arena fails
 * with EAGAIN, Snaipe/Criterion#274), so a TSan build runs the same cases from its own main()
 * with smaller counts; a failure aborts. */
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>

#include "harness.h"
#include "hd_impl.h" /* white-box: a shard's `sleeping` flag */

#if defined(__SANITIZE_THREAD__)
#define BUS_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define BUS_TSAN 1
#endif
#endif

#ifdef BUS_TSAN
#define BUS_TEST(name)       static void name(void)
#define EXPECT(cond, ...)    HDT_CHECK(cond)
#define SKIP(...)            return
#define STREAM_PER_DIRECTION 500000u /* 1 million in all */
#define ALL_PAIRS_PER_PAIR   20000u
#else
#include <criterion/criterion.h>
#define BUS_TEST(name)       Test(test_reactor_bus, name)
#define EXPECT(cond, ...)    cr_assert(cond, __VA_ARGS__)
#define SKIP(...)            cr_skip_test(__VA_ARGS__)
#define STREAM_PER_DIRECTION 5000000u /* 10 million in all */
#define ALL_PAIRS_PER_PAIR   200000u
#endif

#define BUS_SHARDS_MAX 4

/* ---------------------------------------------------------------- sequenced streams */

struct stream_shard {
    uint64_t next_seq[BUS_SHARDS_MAX]; /* to each destination */
    uint64_t expect[BUS_SHARDS_MAX];   /* from each source */
    uint64_t received;
    bool sent_all, received_all, done;
};

struct stream_ctx {
    unsigned shards;
    uint64_t per_pair;
    struct stream_shard sh[BUS_SHARDS_MAX]; /* sh[i] is touched by shard i only */
};

static struct stream_ctx *stream;

static uint64_t stream_tag(uint64_t seq, unsigned src)
{
    return (seq * UINT64_C(0x9e3779b97f4a7c15)) ^ src;
}

static void stream_maybe_done(struct hd_shard *s, struct stream_shard *me)
{
    if (me->sent_all && me->received_all && !me->done) {
        me->done = true;
        hdt_done(s);
    }
}

static void stream_msg(struct hd_shard *dst, const struct hd_msg *m)
{
    struct stream_shard *me = &stream->sh[hd_shard_id(dst)];
    uint64_t src = m->u64[1] & 0xff;
    HDT_CHECK(src < stream->shards && src != hd_shard_id(dst));
    uint64_t seq = m->u64[0];
    /* In order, none lost, none duplicated: exactly the next number from this source. */
    if (seq != me->expect[src]) {
        fprintf(stderr, "shard %u from %u: got seq %llu, expected %llu\n", hd_shard_id(dst),
                (unsigned)src, (unsigned long long)seq, (unsigned long long)me->expect[src]);
        abort();
    }
    HDT_CHECK(m->u64[1] >> 8 == seq);
    HDT_CHECK((uintptr_t)m->ptr == (uintptr_t)stream_tag(seq, (unsigned)src));
    me->expect[src]++;
    me->received++;
    if (me->received == stream->per_pair * (stream->shards - 1)) {
        me->received_all = true;
        stream_maybe_done(dst, me);
    }
}

/* Each tick: fill every destination up to the room the bus reports (every such send must
 * succeed), then come back next tick until everything is sent. */
static void stream_pump(void *arg)
{
    struct hd_shard *s = arg;
    unsigned id = hd_shard_id(s);
    struct stream_shard *me = &stream->sh[id];
    bool more = false;
    for (unsigned dst = 0; dst < stream->shards; dst++) {
        if (dst == id)
            continue;
        unsigned room = hd_bus_room(s, dst);
        HDT_CHECK(room <= HD_BUS_RING_SIZE + HD_BUS_OVERFLOW_SIZE);
        while (room-- > 0 && me->next_seq[dst] < stream->per_pair) {
            uint64_t seq = me->next_seq[dst]++;
            struct hd_msg m = {.fn = stream_msg,
                               .ptr = (void *)(uintptr_t)stream_tag(seq, id),
                               .u64 = {seq, seq << 8 | id}};
            HDT_CHECK(hd_bus_send(s, dst, &m) == 0);
        }
        if (me->next_seq[dst] < stream->per_pair)
            more = true;
    }
    if (more) {
        HDT_CHECK(hd_defer(s, stream_pump, s) == 0);
        return;
    }
    me->sent_all = true;
    stream_maybe_done(s, me);
}

static void stream_body(struct hd_shard *s, void *arg)
{
    (void)arg;
    stream_pump(s);
}

static void stream_run(unsigned shards, uint64_t per_pair)
{
    static struct stream_ctx c;
    memset(&c, 0, sizeof(c));
    c.shards = shards;
    c.per_pair = per_pair;
    stream = &c;
    struct hdt_options o = {.shards = shards};
    struct hd_runtime *rt;
    EXPECT(hdt_run(&o, stream_body, NULL, &rt) == 0, "runtime failed");
    for (unsigned i = 0; i < shards; i++) {
        const struct hd_shard_stats *st = hd_shard_stats(hd_runtime_shard(rt, i));
        EXPECT(c.sh[i].received == per_pair * (shards - 1), "shard %u received %llu", i,
               (unsigned long long)c.sh[i].received);
        for (unsigned src = 0; src < shards; src++)
            EXPECT(src == i || c.sh[i].expect[src] == per_pair, "shard %u from %u: %llu", i, src,
                   (unsigned long long)c.sh[i].expect[src]);
        EXPECT(st->bus_sent == per_pair * (shards - 1), "shard %u bus_sent %llu", i,
               (unsigned long long)st->bus_sent);
        EXPECT(st->bus_received == per_pair * (shards - 1), "shard %u bus_received %llu", i,
               (unsigned long long)st->bus_received);
        EXPECT(st->bus_full == 0, "a send within hd_bus_room failed");
    }
    hd_runtime_destroy(rt);
}

BUS_TEST(two_shards_both_directions_in_order)
{
    stream_run(2, STREAM_PER_DIRECTION);
}

/* Three shards on two cores: six rings at once, threads preempting each other. */
BUS_TEST(three_shards_all_pairs_in_order)
{
    stream_run(3, ALL_PAIRS_PER_PAIR);
}

/* ---------------------------------------------------------------- ring-full backpressure */

/* What hd_bus_send takes of a bus nobody drains, then what hd_bus_send_control still takes. */
#define BULK_ACCEPT (HD_BUS_RING_SIZE + HD_BUS_OVERFLOW_SIZE - HD_BUS_BULK_RESERVE)
#define FULL_ACCEPT (BULK_ACCEPT + HD_BUS_CONTROL_ROOM)
#define FULL_EXTRA  100u

struct full_ctx {
    struct hd_shard *s0;
    _Atomic bool release;      /* producer -> blocked consumer: go on */
    _Atomic uint32_t received; /* consumer's count */
    _Atomic bool spun_out;     /* the consumer gave up waiting (the test then fails) */
    uint32_t accepted;
    uint64_t next_expected;
    struct hd_timer retry, poll;
    bool extra_sent;
};

static struct full_ctx *full;

static void full_msg(struct hd_shard *dst, const struct hd_msg *m)
{
    HDT_CHECK(m->u64[0] == full->next_expected);
    full->next_expected++;
    uint32_t n = atomic_fetch_add(&full->received, 1) + 1;
    if (n == FULL_ACCEPT + FULL_EXTRA)
        hd_runtime_stop(hd_shard_runtime(dst));
}

static int full_send(struct hd_shard *s, uint64_t seq)
{
    struct hd_msg m = {.fn = full_msg, .u64 = {seq, 0}};
    return hd_bus_send(s, 1, &m);
}

static void full_poll(struct hd_timer *t)
{
    struct hd_shard *s = full->s0;
    if (atomic_load(&full->received) < full->accepted) {
        hd_timer_start(s, t, 1);
        return;
    }
    /* Everything accepted arrived: sending works again. */
    HDT_CHECK(hd_bus_room(s, 1) == BULK_ACCEPT);
    for (uint32_t i = 0; i < FULL_EXTRA; i++)
        HDT_CHECK(full_send(s, full->accepted + i) == 0);
    full->extra_sent = true;
}

static void full_retry(struct hd_timer *t)
{
    struct hd_shard *s = full->s0;
    (void)t;
    /* 20 ms later the consumer is still blocked: the ring was published full and stays so. */
    HDT_CHECK(hd_bus_room(s, 1) == 0);
    HDT_CHECK(full_send(s, full->accepted) == -EAGAIN);
    HDT_CHECK(hd_shard_stats(s)->bus_full == 3);
    atomic_store(&full->release, true);
    hd_timer_init(&full->poll, full_poll);
    hd_timer_start(s, &full->poll, 1);
}

static void full_body(struct hd_shard *s, void *arg)
{
    (void)arg;
    if (hd_shard_id(s) == 1) {
        /* Block this shard's thread (bounded), so its inbox is not drained. */
        uint64_t give_up = hd_clock_ns() + UINT64_C(10) * 1000000000u;
        while (!atomic_load(&full->release)) {
            if (hd_clock_ns() > give_up) {
                atomic_store(&full->spun_out, true);
                break;
            }
        }
        return;
    }
    full->s0 = s;
    HDT_CHECK(hd_bus_room(s, 1) == BULK_ACCEPT);
    uint32_t n = 0;
    int rc;
    while ((rc = full_send(s, n)) == 0)
        n++;
    HDT_CHECK(rc == -EAGAIN && n == BULK_ACCEPT);
    const struct hd_shard_stats *st = hd_shard_stats(s);
    HDT_CHECK(st->bus_full == 1);
    /* Bulk filled it: control messages still go, behind the bulk, into the room it left. */
    struct hd_msg m = {.fn = full_msg, .u64 = {n, 0}};
    while ((rc = hd_bus_send_control(s, 1, &m)) == 0)
        m.u64[0] = ++n;
    HDT_CHECK(rc == -EAGAIN && n == FULL_ACCEPT);
    full->accepted = n;
    HDT_CHECK(st->bus_full == 2);
    HDT_CHECK(st->bus_sent == n);
    HDT_CHECK(st->bus_overflowed == HD_BUS_OVERFLOW_SIZE - HD_BUS_RESERVED);
    HDT_CHECK(hd_bus_room(s, 1) == 0);
    hd_timer_init(&full->retry, full_retry);
    hd_timer_start(s, &full->retry, 20);
}

BUS_TEST(ring_full_backpressure_exact)
{
    static struct full_ctx c;
    memset(&c, 0, sizeof(c));
    full = &c;
    struct hdt_options o = {.shards = 2};
    struct hd_runtime *rt;
    EXPECT(hdt_run(&o, full_body, NULL, &rt) == 0, "runtime failed");
    EXPECT(!atomic_load(&c.spun_out), "the consumer was never released");
    EXPECT(c.accepted == FULL_ACCEPT, "accepted %u, expected ring %u + overflow %u", c.accepted,
           HD_BUS_RING_SIZE, HD_BUS_OVERFLOW_SIZE);
    EXPECT(c.extra_sent, "sending did not resume");
    EXPECT(atomic_load(&c.received) == FULL_ACCEPT + FULL_EXTRA, "received %u",
           atomic_load(&c.received));
    EXPECT(c.next_expected == FULL_ACCEPT + FULL_EXTRA, "order broken");
    const struct hd_shard_stats *st0 = hd_shard_stats(hd_runtime_shard(rt, 0));
    const struct hd_shard_stats *st1 = hd_shard_stats(hd_runtime_shard(rt, 1));
    EXPECT(st0->bus_full == 3, "bus_full %llu", (unsigned long long)st0->bus_full);
    EXPECT(st0->bus_sent == FULL_ACCEPT + FULL_EXTRA, "bus_sent %llu",
           (unsigned long long)st0->bus_sent);
    EXPECT(st1->bus_received == FULL_ACCEPT + FULL_EXTRA, "bus_received %llu",
           (unsigned long long)st1->bus_received);
    hd_runtime_destroy(rt);
}

/* ---------------------------------------------------------------- wake-ups */

struct wake_ctx {
    struct hd_shard *s0, *s1;
    struct hd_timer delay, watchdog;
    _Atomic bool arrived;
    uint64_t wakes_at_arrival;
    bool was_sleeping;
    unsigned sleep_polls;
};

static struct wake_ctx *wk;

/* A task deferred by the message runs at the start of the next tick, after the completions of
 * the wait that brought the message (the wake-up's among them) were dispatched. */
static void wake_counted(void *arg)
{
    struct hd_shard *dst = arg;
    wk->wakes_at_arrival = hd_shard_stats(dst)->wakes_received;
    atomic_store(&wk->arrived, true);
    hd_runtime_stop(hd_shard_runtime(dst));
}

static void wake_msg(struct hd_shard *dst, const struct hd_msg *m)
{
    HDT_CHECK(m->u64[0] == 0xfeed);
    HDT_CHECK(hd_defer(dst, wake_counted, dst) == 0);
}

static void wake_watchdog(struct hd_timer *t)
{
    (void)t;
    fprintf(stderr, "the sleeping shard was never woken\n");
    abort();
}

static void wake_delay(struct hd_timer *t)
{
    struct hd_shard *s = wk->s0;
    /* Send only once shard 1 announced its sleep (it has nothing to do: no timers, no tasks). */
    if (!atomic_load(&wk->s1->sleeping)) {
        wk->sleep_polls++;
        hd_timer_start(s, t, 1);
        return;
    }
    wk->was_sleeping = true;
    struct hd_msg m = {.fn = wake_msg, .u64 = {0xfeed, 0}};
    HDT_CHECK(hd_bus_send(s, 1, &m) == 0);
}

static void wake_body(struct hd_shard *s, void *arg)
{
    (void)arg;
    if (hd_shard_id(s) != 0)
        return; /* shard 1 idles */
    wk->s0 = s;
    wk->s1 = hd_runtime_shard(hd_shard_runtime(s), 1);
    hd_timer_init(&wk->delay, wake_delay);
    hd_timer_start(s, &wk->delay, 100);
    hd_timer_init(&wk->watchdog, wake_watchdog);
    hd_timer_start(s, &wk->watchdog, 10000);
}

static void wake_run(uint32_t disable)
{
    static struct wake_ctx c;
    memset(&c, 0, sizeof(c));
    wk = &c;
    struct hdt_options o = {.shards = 2, .features_disable = disable};
    struct hd_runtime *rt;
    EXPECT(hdt_run(&o, wake_body, NULL, &rt) == 0, "runtime failed");
    EXPECT(atomic_load(&c.arrived), "message lost");
    EXPECT(c.was_sleeping, "shard 1 never slept");
    struct hd_shard *s0 = hd_runtime_shard(rt, 0), *s1 = hd_runtime_shard(rt, 1);
    bool msg_ring = hd_shard_features(s0) & HD_FEAT_MSG_RING;
    if (!msg_ring && !(disable & HD_FEAT_MSG_RING)) {
        hd_runtime_destroy(rt);
        SKIP("kernel without IORING_OP_MSG_RING");
    }
    EXPECT(msg_ring == !(disable & HD_FEAT_MSG_RING), "MSG_RING feature %d", (int)msg_ring);
    EXPECT(hd_shard_stats(s0)->wakes_sent >= 1, "no wake-up sent");
    EXPECT(c.wakes_at_arrival >= 1, "the message arrived without a wake-up being received");
    EXPECT(hd_shard_stats(s1)->bus_received == 1, "bus_received");
    hd_runtime_destroy(rt);
}

BUS_TEST(wake_sleeping_shard_msg_ring)
{
    wake_run(0);
}

BUS_TEST(wake_sleeping_shard_eventfd)
{
    wake_run(HD_FEAT_MSG_RING);
}

/* ---------------------------------------------------------------- invalid destinations */

static void never_msg(struct hd_shard *dst, const struct hd_msg *m)
{
    (void)dst, (void)m;
    abort();
}

static void invalid_body(struct hd_shard *s, void *arg)
{
    (void)arg;
    struct hd_msg m = {.fn = never_msg};
    unsigned id = hd_shard_id(s);
    HDT_CHECK(hd_bus_send(s, hd_shard_count(s), &m) == -EINVAL);
    HDT_CHECK(hd_bus_send(s, HD_SHARDS_MAX, &m) == -EINVAL);
    HDT_CHECK(hd_bus_send(s, UINT_MAX, &m) == -EINVAL);
    HDT_CHECK(hd_bus_send_control(s, hd_shard_count(s), &m) == -EINVAL);
    HDT_CHECK(hd_bus_room(s, id) == HD_BUS_SELF_SIZE - HD_BUS_BULK_RESERVE); /* test_bus_self.c */
    HDT_CHECK(hd_bus_room(s, hd_shard_count(s)) == 0);
    HDT_CHECK(hd_bus_room(s, UINT_MAX) == 0);
    for (unsigned d = 0; d < hd_shard_count(s); d++)
        HDT_CHECK(d == id || hd_bus_room(s, d) == BULK_ACCEPT);
    hdt_done(s);
}

BUS_TEST(send_out_of_range_is_einval)
{
    struct hdt_options o = {.shards = 3};
    struct hd_runtime *rt;
    EXPECT(hdt_run(&o, invalid_body, NULL, &rt) == 0, "runtime failed");
    for (unsigned i = 0; i < 3; i++) {
        const struct hd_shard_stats *st = hd_shard_stats(hd_runtime_shard(rt, i));
        EXPECT(st->bus_sent == 0 && st->bus_full == 0 && st->bus_received == 0,
               "an invalid send was counted or delivered");
    }
    hd_runtime_destroy(rt);
}

/* ---------------------------------------------------------------- hd_collect */

#define COLLECT_SHARDS 3

struct collect_slot {
    unsigned id;
    unsigned requester;
    uint64_t magic;
    bool on_own_thread;
};

struct collect_ctx {
    _Atomic unsigned done_calls;
    _Atomic unsigned fills;
    bool done_ok[COLLECT_SHARDS];
    unsigned eagain_seen;
    struct hd_timer retry;
    struct hd_shard *s0;
};

static struct collect_ctx *coll;

static void collect_fill(struct hd_shard *s, void *slot, void *arg)
{
    struct collect_slot *cs = slot;
    cs->id = hd_shard_id(s);
    cs->requester = (unsigned)(uintptr_t)arg;
    cs->magic = UINT64_C(0xc011ec7) + hd_shard_id(s);
    cs->on_own_thread = hd_shard_current() == s;
    atomic_fetch_add(&coll->fills, 1);
}

static void collect_done(struct hd_shard *s, void *slots, unsigned count, void *arg)
{
    unsigned me = hd_shard_id(s);
    HDT_CHECK(hd_shard_current() == s);
    HDT_CHECK((unsigned)(uintptr_t)arg == me);
    HDT_CHECK(count == COLLECT_SHARDS);
    struct collect_slot *cs = slots;
    for (unsigned i = 0; i < count; i++) {
        HDT_CHECK(cs[i].id == i); /* shard order */
        HDT_CHECK(cs[i].requester == me);
        HDT_CHECK(cs[i].magic == UINT64_C(0xc011ec7) + i);
        HDT_CHECK(cs[i].on_own_thread);
    }
    HDT_CHECK(!coll->done_ok[me]);
    coll->done_ok[me] = true;
    if (atomic_fetch_add(&coll->done_calls, 1) + 1 == COLLECT_SHARDS)
        hd_runtime_stop(hd_shard_runtime(s));
}

/* Every shard collects at once: three requests in flight, each done() on its requester. */
static void collect_body(struct hd_shard *s, void *arg)
{
    (void)arg;
    unsigned me = hd_shard_id(s);
    HDT_CHECK(hd_collect(s, sizeof(struct collect_slot), collect_fill, collect_done,
                         (void *)(uintptr_t)me) == 0);
}

BUS_TEST(collect_gathers_every_shard_in_order)
{
    static struct collect_ctx c;
    memset(&c, 0, sizeof(c));
    coll = &c;
    struct hdt_options o = {.shards = COLLECT_SHARDS};
    EXPECT(hdt_run(&o, collect_body, NULL, NULL) == 0, "runtime failed");
    EXPECT(atomic_load(&c.done_calls) == COLLECT_SHARDS, "done ran %u times",
           atomic_load(&c.done_calls));
    EXPECT(atomic_load(&c.fills) == COLLECT_SHARDS * COLLECT_SHARDS, "fill ran %u times",
           atomic_load(&c.fills));
    for (unsigned i = 0; i < COLLECT_SHARDS; i++)
        EXPECT(c.done_ok[i], "shard %u's collect never completed", i);
}

/* With the bus to one shard full, hd_collect refuses (-EAGAIN) without sending anything; once
 * the bus drains it goes through. */
static void noop_msg(struct hd_shard *dst, const struct hd_msg *m)
{
    (void)dst, (void)m;
}

static void collect_retry(struct hd_timer *t)
{
    struct hd_shard *s = coll->s0;
    int rc = hd_collect(s, sizeof(struct collect_slot), collect_fill, collect_done, (void *)0);
    if (rc == -EAGAIN) {
        coll->eagain_seen++;
        hd_timer_start(s, t, 1);
        return;
    }
    HDT_CHECK(rc == 0);
}

static void collect_full_body(struct hd_shard *s, void *arg)
{
    (void)arg;
    if (hd_shard_id(s) != 0)
        return;
    coll->s0 = s;
    struct hd_msg m = {.fn = noop_msg};
    while (hd_bus_send(s, 1, &m) == 0)
        ;
    uint64_t sent = hd_shard_stats(s)->bus_sent;
    HDT_CHECK(hd_collect(s, sizeof(struct collect_slot), collect_fill, collect_done, (void *)0) ==
              -EAGAIN);
    HDT_CHECK(hd_shard_stats(s)->bus_sent == sent); /* nothing went to shard 2 either */
    HDT_CHECK(atomic_load(&coll->fills) == 0);
    coll->eagain_seen = 1;
    hd_timer_init(&coll->retry, collect_retry);
    hd_timer_start(s, &coll->retry, 1);
}

static void collect_full_done_count(void)
{
    /* Only shard 0 collects here: done() stops the runtime after COLLECT_SHARDS calls, so count
     * the other two as done up front. */
    atomic_store(&coll->done_calls, COLLECT_SHARDS - 1);
}

BUS_TEST(collect_refuses_when_bus_full)
{
    static struct collect_ctx c;
    memset(&c, 0, sizeof(c));
    coll = &c;
    collect_full_done_count();
    struct hdt_options o = {.shards = COLLECT_SHARDS};
    EXPECT(hdt_run(&o, collect_full_body, NULL, NULL) == 0, "runtime failed");
    EXPECT(c.done_ok[0], "the collect never completed");
    EXPECT(c.eagain_seen >= 1, "no -EAGAIN");
    EXPECT(atomic_load(&c.fills) == COLLECT_SHARDS, "fill ran %u times", atomic_load(&c.fills));
}

#ifdef BUS_TSAN
int main(void)
{
    static const struct {
        const char *name;
        void (*fn)(void);
    } cases[] = {
        {"two_shards_both_directions_in_order", two_shards_both_directions_in_order},
        {"three_shards_all_pairs_in_order", three_shards_all_pairs_in_order},
        {"ring_full_backpressure_exact", ring_full_backpressure_exact},
        {"wake_sleeping_shard_msg_ring", wake_sleeping_shard_msg_ring},
        {"wake_sleeping_shard_eventfd", wake_sleeping_shard_eventfd},
        {"send_out_of_range_is_einval", send_out_of_range_is_einval},
        {"collect_gathers_every_shard_in_order", collect_gathers_every_shard_in_order},
        {"collect_refuses_when_bus_full", collect_refuses_when_bus_full},
    };
    for (unsigned i = 0; i < HD_ARRAY_SIZE(cases); i++) {
        fprintf(stderr, "[RUN ] test_reactor_bus::%s\n", cases[i].name);
        cases[i].fn();
        fprintf(stderr, "[PASS] test_reactor_bus::%s\n", cases[i].name);
    }
    fprintf(stderr, "[====] test_reactor_bus (TSan runner): %u cases passed\n",
            (unsigned)HD_ARRAY_SIZE(cases));
    return 0;
}
#endif
