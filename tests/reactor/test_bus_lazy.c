/* test_bus_lazy.c - lazy bus messages (hd_bus_send_lazy: the reactor's frames going home) on
 * real shards: published to a sleeping shard they wake nobody and wait, in order before what
 * follows, until an ordinary message wakes it; HD_BUS_LAZY_BACKLOG of them from one producer
 * wake it by themselves, so a long sleep never fills its ring. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "harness.h"
#include "hd_impl.h" /* white-box: hd_bus_send_lazy, a shard's `sleeping` flag */

#define FEW       10u /* lazy messages well under the backlog */
#define SETTLE_MS 50  /* how long the few wait unseen (a wake-up would come within a tick) */

struct lazy_ctx {
    struct hd_shard *s0, *s1;
    struct hd_timer step, watchdog;
    unsigned phase;
    unsigned asleep_ticks;     /* consecutive steps that saw shard 1's flag: it is in its wait */
    _Atomic uint32_t lazy_run; /* lazy messages run on shard 1 */
    _Atomic uint32_t seen_at_urgent;
    _Atomic bool backlog_woke;
    uint64_t wakes_before;
};

static struct lazy_ctx *lz;

static void lazy_msg(struct hd_shard *dst, const struct hd_msg *m)
{
    (void)dst;
    HDT_CHECK(m->u64[0] == atomic_load(&lz->lazy_run)); /* in order */
    uint32_t n = atomic_fetch_add(&lz->lazy_run, 1) + 1;
    if (n == FEW + HD_BUS_LAZY_BACKLOG)
        atomic_store(&lz->backlog_woke, true);
}

static void urgent_msg(struct hd_shard *dst, const struct hd_msg *m)
{
    (void)dst, (void)m;
    atomic_store(&lz->seen_at_urgent, atomic_load(&lz->lazy_run));
}

static void send_lazy(struct hd_shard *s, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        uint32_t seq = lz->phase == 1 ? i : FEW + i;
        struct hd_msg m = {.fn = lazy_msg, .u64 = {seq, 0}};
        HDT_CHECK(hd_bus_send_lazy(s, 1, &m) == 0);
    }
}

/* Shard 0, every millisecond: 0 wait for shard 1 to sleep, send FEW lazy; 1 after SETTLE_MS
 * check nothing ran, send an urgent one; 2 wait for both and the next sleep, send the backlog;
 * 3 wait until it ran. */
static void lazy_step(struct hd_timer *t)
{
    struct hd_shard *s = lz->s0;
    lz->asleep_ticks = atomic_load(&lz->s1->sleeping) ? lz->asleep_ticks + 1 : 0;
    bool asleep = lz->asleep_ticks >= 2; /* past its re-check of the inboxes, in the kernel */
    if (lz->phase == 0 && asleep) {
        lz->phase = 1;
        lz->wakes_before = hd_shard_stats(lz->s1)->wakes_received;
        send_lazy(s, FEW);
        hd_timer_start(s, t, SETTLE_MS);
        return;
    }
    if (lz->phase == 1) {
        HDT_CHECK(atomic_load(&lz->lazy_run) == 0); /* published, but nobody woke it */
        HDT_CHECK(hd_shard_stats(lz->s1)->wakes_received == lz->wakes_before);
        struct hd_msg m = {.fn = urgent_msg};
        HDT_CHECK(hd_bus_send(s, 1, &m) == 0);
        lz->phase = 2;
    } else if (lz->phase == 2 && asleep && atomic_load(&lz->seen_at_urgent) == FEW) {
        lz->phase = 3;
        lz->asleep_ticks = 0;
        send_lazy(s, HD_BUS_LAZY_BACKLOG);
    } else if (lz->phase == 3 && atomic_load(&lz->backlog_woke)) {
        hd_runtime_stop(hd_shard_runtime(s));
        return;
    }
    hd_timer_start(s, t, 1);
}

static void lazy_watchdog(struct hd_timer *t)
{
    (void)t;
    fprintf(stderr, "lazy test stuck in phase %u (%u run)\n", lz->phase,
            atomic_load(&lz->lazy_run));
    abort();
}

static void lazy_body(struct hd_shard *s, void *arg)
{
    (void)arg;
    if (hd_shard_id(s) != 0)
        return; /* shard 1 idles: no timers, no tasks */
    lz->s0 = s;
    lz->s1 = hd_runtime_shard(hd_shard_runtime(s), 1);
    hd_timer_init(&lz->step, lazy_step);
    hd_timer_start(s, &lz->step, 1);
    hd_timer_init(&lz->watchdog, lazy_watchdog);
    hd_timer_start(s, &lz->watchdog, 10000);
}

Test(test_reactor_bus_lazy, lazy_waits_unless_backlog)
{
    static struct lazy_ctx c;
    memset(&c, 0, sizeof(c));
    lz = &c;
    struct hdt_options o = {.shards = 2};
    struct hd_runtime *rt;
    cr_assert_eq(hdt_run(&o, lazy_body, NULL, &rt), 0);
    cr_assert_eq(atomic_load(&c.seen_at_urgent), FEW, "the lazy ones ran before the urgent one");
    cr_assert_eq(atomic_load(&c.lazy_run), FEW + HD_BUS_LAZY_BACKLOG);
    hd_runtime_destroy(rt);
}
