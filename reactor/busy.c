/* busy.c - each shard's recent busy fraction: the CPU time of its thread over the wall time of
 * the last HD_BUSY_INTERVAL_MS, published once an interval by the shard (tick) and read by any
 * thread (hd_shard_busy_ppm). The thread's CPU clock, not the tick's own stopwatch: at a light
 * load most of a loop's cost is the kernel work io_uring_enter does inline and the sleep and
 * wake-up around it, which the tick histograms do not see. One clock_gettime a second. */
#include <stdatomic.h>
#include <time.h>

#include "hd_impl.h"

static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
        return 0;
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void hd_busy_roll(struct hd_shard *s)
{
    uint64_t cpu = thread_cpu_ns();
    if (s->busy_ms != 0) {
        uint64_t wall_ns = (s->now_ms - s->busy_ms) * 1000000u;
        uint64_t used = cpu > s->busy_cpu_ns ? cpu - s->busy_cpu_ns : 0;
        uint64_t ppm = wall_ns ? used * HD_BUSY_PPM_FULL / wall_ns : 0;
        /* relaxed: a figure on its own, nothing else is published with it */
        atomic_store_explicit(&s->busy_ppm,
                              (uint32_t)(ppm > HD_BUSY_PPM_FULL ? HD_BUSY_PPM_FULL : ppm),
                              memory_order_relaxed);
        atomic_store_explicit(&s->busy_stamp_ms, s->now_ms, memory_order_relaxed);
    }
    s->busy_ms = s->now_ms;
    s->busy_cpu_ns = cpu;
}

uint32_t hd_shard_busy_ppm(struct hd_runtime *rt, unsigned shard)
{
    if (rt == NULL || shard >= rt->count || rt->shards[shard] == NULL)
        return 0;
    struct hd_shard *s = rt->shards[shard];
    /* relaxed, pairing with the stores above: each value stands alone */
    uint32_t ppm = atomic_load_explicit(&s->busy_ppm, memory_order_relaxed);
    uint64_t stamp = atomic_load_explicit(&s->busy_stamp_ms, memory_order_relaxed);
    /* A shard that has slept through the last intervals published nothing since: idle. (One
     * that is running a long callback is busy: the watchdog's business, its figure stands.) */
    if (hd_clock_ms() - stamp > 2 * HD_BUSY_INTERVAL_MS &&
        atomic_load_explicit(&s->sleeping, memory_order_relaxed) != 0)
        return 0;
    return ppm;
}
