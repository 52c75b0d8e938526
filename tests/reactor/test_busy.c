/* test_busy.c - hd_shard_busy_ppm on a real 2-shard runtime: a shard that keeps working reads
 * busy, a shard that only wakes for a timer now and then reads nearly idle (and non-zero: it
 * was measured, not defaulted), the figure is republished once an interval (not per tick), a
 * shard that then sleeps through two intervals reads 0, and a shard number out of range reads
 * 0. Deadlines bound each wait; no figure depends on how fast the machine is beyond "busy" >=
 * a fifth of a core while spinning. */
#include <criterion/criterion.h>
#include <stdatomic.h>

#include "harness.h"
#include "hd_impl.h" /* the publish stamp, to tell a measured figure from none */

#define DEADLINE_MS   60000
#define SPIN_NS       2000000 /* one task's work on the busy shard */
#define BUSY_MIN_PPM  200000  /* a spinning thread on a shared 2-CPU box gets far more */
#define IDLE_MAX_PPM  100000  /* a 20 ms timer costs microseconds per wake-up */
#define IDLE_TIMER_MS 20

struct busy_ctx {
    struct hd_runtime *rt;
    struct hd_shard *busy;
    struct hd_timer idle_timer;
    atomic_bool idle_stop;
    uint64_t deadline_ms;
    uint64_t ticks_at_stamp, stamp_seen; /* the busy shard's ticks at its first publish */
    uint32_t busy_ppm, idle_ppm, idle_after;
    int phase; /* 0: until busy and idle are measured; 1: until the idle one reads 0 */
};

static struct busy_ctx bc;

static void idle_timer_cb(struct hd_timer *t)
{
    if (!atomic_load(&bc.idle_stop))
        hd_timer_start(hd_shard_current(), t, IDLE_TIMER_MS);
}

static void spin_task(void *arg)
{
    (void)arg;
    uint64_t end = hd_clock_ns() + SPIN_NS;
    while (hd_clock_ns() < end)
        ; /* work */
    HDT_CHECK(hd_clock_ms() < bc.deadline_ms);
    uint64_t stamp = atomic_load_explicit(&bc.busy->busy_stamp_ms, memory_order_relaxed);
    if (stamp != 0 && bc.stamp_seen == 0) {
        bc.stamp_seen = stamp;
        bc.ticks_at_stamp = hd_shard_stats(bc.busy)->ticks;
    }
    uint32_t b = hd_shard_busy_ppm(bc.rt, 0), i = hd_shard_busy_ppm(bc.rt, 1);
    bool idle_measured =
        atomic_load_explicit(&hd_runtime_shard(bc.rt, 1)->busy_stamp_ms, memory_order_relaxed) != 0;
    if (bc.phase == 0 && b >= BUSY_MIN_PPM && idle_measured && i > 0) {
        bc.busy_ppm = b, bc.idle_ppm = i;
        atomic_store(&bc.idle_stop, true);
        bc.phase = 1;
    } else if (bc.phase == 1 && i == 0) {
        bc.idle_after = i;
        hd_runtime_stop(bc.rt);
        return;
    }
    HDT_CHECK(hd_defer(bc.busy, spin_task, NULL) == 0);
}

static void body(struct hd_shard *s, void *arg)
{
    (void)arg;
    if (hd_shard_id(s) == 1) {
        hd_timer_init(&bc.idle_timer, idle_timer_cb);
        hd_timer_start(s, &bc.idle_timer, IDLE_TIMER_MS);
        return;
    }
    bc.busy = s;
    bc.rt = hd_shard_runtime(s);
    bc.deadline_ms = hd_clock_ms() + DEADLINE_MS;
    HDT_CHECK(hd_defer(s, spin_task, NULL) == 0);
}

Test(reactor_busy, busy_idle_and_asleep)
{
    struct hd_runtime *rt;
    cr_assert_eq(hdt_run(&(struct hdt_options){.shards = 2}, body, NULL, &rt), 0);
    cr_assert_geq(bc.busy_ppm, BUSY_MIN_PPM, "busy shard %u ppm", bc.busy_ppm);
    cr_assert_leq(bc.busy_ppm, HD_BUSY_PPM_FULL);
    cr_assert_gt(bc.idle_ppm, 0, "the idle shard was measured");
    cr_assert_lt(bc.idle_ppm, IDLE_MAX_PPM, "idle shard %u ppm", bc.idle_ppm);
    cr_assert_eq(bc.idle_after, 0);
    /* once an interval: the first stamp came after many ticks, not at the first */
    cr_assert_gt(bc.ticks_at_stamp, 1);
    cr_assert_eq(hd_shard_busy_ppm(rt, 2), 0, "out of range");
    hd_runtime_destroy(rt);
}
