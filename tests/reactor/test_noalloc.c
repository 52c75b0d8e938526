/* test_noalloc.c - the steady state allocates nothing. Two shards storm each other with frames
 * (sent over the bus, unreferenced by the receiver so they flow back to their owner batched),
 * plain bus messages (enough to spill into the overflow), NOPs re-armed from their callbacks, a
 * 1 ms timer, a flush and a deferred task every tick. After a warm-up each shard measures its
 * own thread across the storm: the frame pools must not grow (capacity, chunks), and no malloc
 * may happen: jemalloc's per-thread "thread.allocated" (release builds with jemalloc), or
 * ASan's malloc hook counting calls from shard threads (ASan builds). */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <string.h>

#include "harness.h"
#include "hd_poison.h" /* HD_ASAN */

#if defined(HD_HAVE_JEMALLOC)
#include <jemalloc/jemalloc.h>
#define NOALLOC_METER "jemalloc thread.allocated"
#elif defined(HD_ASAN)
/* From <sanitizer/allocator_interface.h>, which gcc 12 does not ship; libasan exports it. */
int __sanitizer_install_malloc_and_free_hooks(void (*malloc_hook)(const volatile void *, size_t),
                                              void (*free_hook)(const volatile void *));
#define NOALLOC_METER "ASan malloc hook"
#endif

#ifdef NOALLOC_METER
#define NOALLOC_METER_NAME NOALLOC_METER
#else
#define NOALLOC_METER_NAME "no meter"
#endif

#define STORM_WINDOW 2048u   /* frames of one shard in flight at most: bounds the pool */
#define STORM_WARM   100000u /* frames each way before measuring */
#ifdef HD_ASAN
#define STORM_FRAMES 300000u /* measured, each way */
#else
#define STORM_FRAMES 2000000u
#endif
#define STORM_TOTAL     (STORM_WARM + STORM_FRAMES)
#define STORM_PAYLOAD   64u
#define STORM_PLAIN_MAX 1024u /* plain messages per tick, at most half the room (see pump) */

struct storm_shard {
    struct hd_shard *s;
    unsigned peer;
    uint64_t sent, received, plain_sent, plain_received, plain_expect;
    struct hd_op nop;
    struct hd_timer tick;
    struct hd_flush flush;
    bool flush_requested;
    uint64_t nops, timer_fires, flushes, pumps;
    bool measuring, measured, done;
    /* measured across the storm */
    uint64_t alloc_before, alloc_after, dealloc_before, dealloc_after;
    uint64_t hook_mallocs, hook_frees;
    struct hd_pool_stats pool_before, pool_after;
    uint64_t nops_before, timers_before, flushes_before, returned_before, overflowed_before;
    uint64_t nops_in, timers_in, flushes_in, returned_in, overflowed_in;
};

static struct storm_shard storm[2];

#ifdef HD_ASAN
static __thread bool hook_counting;
static __thread uint64_t hook_mallocs_tls, hook_frees_tls;

static void on_malloc(const volatile void *p, size_t n)
{
    (void)p, (void)n;
    if (hook_counting)
        hook_mallocs_tls++;
}

static void on_free(const volatile void *p)
{
    (void)p;
    if (hook_counting)
        hook_frees_tls++;
}
#endif

#ifdef HD_HAVE_JEMALLOC
static uint64_t je_counter(const char *name)
{
    uint64_t v = 0;
    size_t len = sizeof(v);
    HDT_CHECK(mallctl(name, &v, &len, NULL, 0) == 0);
    return v;
}
#endif

static void meter_start(struct storm_shard *me)
{
    hd_frame_stats(me->s, 0, &me->pool_before);
    const struct hd_shard_stats *st = hd_shard_stats(me->s);
    me->nops_before = me->nops;
    me->timers_before = me->timer_fires;
    me->flushes_before = me->flushes;
    me->returned_before = st->frames_returned;
    me->overflowed_before = st->bus_overflowed;
    me->measuring = true;
#ifdef HD_HAVE_JEMALLOC
    me->dealloc_before = je_counter("thread.deallocated");
    me->alloc_before = je_counter("thread.allocated"); /* last: nothing runs after it */
#endif
#ifdef HD_ASAN
    hook_mallocs_tls = hook_frees_tls = 0;
    hook_counting = true;
#endif
}

static void meter_stop(struct storm_shard *me)
{
#ifdef HD_HAVE_JEMALLOC
    me->alloc_after = je_counter("thread.allocated"); /* first: nothing ran before it */
    me->dealloc_after = je_counter("thread.deallocated");
#endif
#ifdef HD_ASAN
    hook_counting = false;
    me->hook_mallocs = hook_mallocs_tls;
    me->hook_frees = hook_frees_tls;
#endif
    me->measuring = false;
    me->measured = true;
    hd_frame_stats(me->s, 0, &me->pool_after);
    const struct hd_shard_stats *st = hd_shard_stats(me->s);
    me->nops_in = me->nops - me->nops_before;
    me->timers_in = me->timer_fires - me->timers_before;
    me->flushes_in = me->flushes - me->flushes_before;
    me->returned_in = st->frames_returned - me->returned_before;
    me->overflowed_in = st->bus_overflowed - me->overflowed_before;
}

static void storm_check_progress(struct storm_shard *me)
{
    if (!me->measuring && !me->measured && me->sent >= STORM_WARM && me->received >= STORM_WARM)
        meter_start(me);
    if (me->measuring && me->sent == STORM_TOTAL && me->received == STORM_TOTAL)
        meter_stop(me);
    if (me->measured && !me->done) {
        struct hd_pool_stats st;
        hd_frame_stats(me->s, 0, &st);
        if (st.in_use == 0) { /* every frame of ours came home */
            me->done = true;
            hdt_done(me->s);
        }
    }
}

static void frame_msg(struct hd_shard *dst, const struct hd_msg *m)
{
    struct storm_shard *me = &storm[hd_shard_id(dst)];
    struct hd_frame *f = m->ptr;
    HDT_CHECK(f->owner == me->peer && f->len == STORM_PAYLOAD);
    HDT_CHECK(f->app_u64 == me->received);
    HDT_CHECK(f->data[0] == (uint8_t)f->app_u64 && f->data[STORM_PAYLOAD - 1] == 0xee);
    me->received++;
    hd_frame_unref(dst, f); /* the last reference: the frame goes home over the bus */
    storm_check_progress(me);
}

static void plain_msg(struct hd_shard *dst, const struct hd_msg *m)
{
    struct storm_shard *me = &storm[hd_shard_id(dst)];
    HDT_CHECK(m->u64[0] == me->plain_expect);
    me->plain_expect++;
    me->plain_received++;
}

static void nop_done(struct hd_op *op, int32_t res, uint32_t flags)
{
    (void)flags;
    struct storm_shard *me = hd_container_of(op, struct storm_shard, nop);
    HDT_CHECK(res == 0);
    me->nops++;
    if (!hd_shard_stopping(me->s))
        HDT_CHECK(hd_op_nop(me->s, op) == 0);
}

static void tick_fired(struct hd_timer *t)
{
    struct storm_shard *me = hd_container_of(t, struct storm_shard, tick);
    me->timer_fires++;
    hd_timer_start(me->s, t, 1);
}

static void flush_ran(struct hd_flush *f)
{
    struct storm_shard *me = hd_container_of(f, struct storm_shard, flush);
    me->flushes++;
}

/* Every tick: frames while fewer than STORM_WINDOW of ours are out, then plain messages in at
 * most half the room left (the reactor's own frame-return messages need bus room too). */
static void pump(void *arg)
{
    struct storm_shard *me = arg;
    struct hd_shard *s = me->s;
    me->pumps++;
    hd_flush_request(s, &me->flush);
    hd_flush_request(s, &me->flush); /* once per tick however often */
    struct hd_pool_stats st;
    hd_frame_stats(s, 0, &st);
    uint64_t out = st.in_use;
    unsigned room = hd_bus_room(s, me->peer);
    while (me->sent < STORM_TOTAL && out < STORM_WINDOW && room > 0) {
        struct hd_frame *f = hd_frame_get(s, STORM_PAYLOAD);
        HDT_CHECK(f != NULL);
        f->len = STORM_PAYLOAD;
        f->app_u64 = me->sent;
        f->data[0] = (uint8_t)me->sent;
        f->data[STORM_PAYLOAD - 1] = 0xee;
        struct hd_msg m = {.fn = frame_msg, .ptr = f};
        HDT_CHECK(hd_bus_send(s, me->peer, &m) == 0);
        me->sent++;
        out++;
        room--;
    }
    unsigned plain = room / 2 < STORM_PLAIN_MAX ? room / 2 : STORM_PLAIN_MAX;
    for (unsigned i = 0; i < plain && me->sent < STORM_TOTAL; i++) {
        struct hd_msg m = {.fn = plain_msg, .u64 = {me->plain_sent++, 0}};
        HDT_CHECK(hd_bus_send(s, me->peer, &m) == 0);
    }
    storm_check_progress(me);
    if (!me->done)
        HDT_CHECK(hd_defer(s, pump, me) == 0);
}

static void storm_body(struct hd_shard *s, void *arg)
{
    (void)arg;
    struct storm_shard *me = &storm[hd_shard_id(s)];
    me->s = s;
    me->peer = 1 - hd_shard_id(s);
    hd_op_init(s, &me->nop, nop_done);
    HDT_CHECK(hd_op_nop(s, &me->nop) == 0);
    hd_timer_init(&me->tick, tick_fired);
    hd_timer_start(s, &me->tick, 1);
    hd_flush_init(&me->flush, flush_ran);
#ifdef HD_HAVE_JEMALLOC
    (void)je_counter("thread.allocated"); /* the first mallctl may set things up */
#endif
    pump(me);
}

Test(test_reactor_noalloc, storm_allocates_nothing)
{
    memset(storm, 0, sizeof(storm));
#ifdef HD_ASAN
    cr_assert(__sanitizer_install_malloc_and_free_hooks(on_malloc, on_free) != 0);
#endif
    struct hdt_options o = {.shards = 2};
    cr_assert_eq(hdt_run(&o, storm_body, NULL, NULL), 0);
    for (unsigned i = 0; i < 2; i++) {
        struct storm_shard *me = &storm[i];
        cr_assert(me->measured && me->done, "shard %u did not finish", i);
        cr_assert_eq(me->sent, STORM_TOTAL);
        cr_assert_eq(me->received, STORM_TOTAL);
        /* The storm exercised every hot path while measured. */
        cr_assert_gt(me->nops_in, 0, "no NOP completed during the storm");
        cr_assert_gt(me->flushes_in, 0, "no flush ran during the storm");
        cr_assert_gt(me->returned_in, 0, "no frame went home during the storm");
        cr_assert_gt(me->plain_received, 0);
        cr_log_info("shard %u, storm: %llu NOPs, %llu timer fires, %llu flushes, %llu frames "
                    "home, %llu overflowed; %s %llu -> %llu",
                    i, (unsigned long long)me->nops_in, (unsigned long long)me->timers_in,
                    (unsigned long long)me->flushes_in, (unsigned long long)me->returned_in,
                    (unsigned long long)me->overflowed_in, NOALLOC_METER_NAME,
                    (unsigned long long)me->alloc_before, (unsigned long long)me->alloc_after);
        /* Pools did not grow. */
        cr_assert_eq(me->pool_after.capacity, me->pool_before.capacity,
                     "shard %u: pool grew from %llu to %llu frames", i,
                     (unsigned long long)me->pool_before.capacity,
                     (unsigned long long)me->pool_after.capacity);
        cr_assert_eq(me->pool_after.chunks, me->pool_before.chunks, "shard %u: chunks grew", i);
        cr_assert_leq(me->pool_after.high_water, STORM_WINDOW);
        cr_assert_eq(me->pool_after.exhausted, 0);
#if defined(HD_HAVE_JEMALLOC)
        cr_assert_eq(me->alloc_after, me->alloc_before,
                     "shard %u allocated %llu bytes during the storm", i,
                     (unsigned long long)(me->alloc_after - me->alloc_before));
        cr_assert_eq(me->dealloc_after, me->dealloc_before,
                     "shard %u freed %llu bytes during the storm", i,
                     (unsigned long long)(me->dealloc_after - me->dealloc_before));
#elif defined(HD_ASAN)
        cr_assert_eq(me->hook_mallocs, 0, "shard %u called malloc %llu times during the storm", i,
                     (unsigned long long)me->hook_mallocs);
        cr_assert_eq(me->hook_frees, 0, "shard %u called free %llu times during the storm", i,
                     (unsigned long long)me->hook_frees);
#endif
    }
#ifndef NOALLOC_METER
    cr_log_warn("no allocation meter in this build (no jemalloc, no ASan): pools checked only");
#endif
}
