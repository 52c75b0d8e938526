/* watchdog.c - the stall detector: one thread per runtime (unless stall_ms is HD_STALL_OFF) that
 * samples every shard's beat (the tick count, stored at the start of each tick's work and again
 * after its wait), its sleeping flag and the callback it is running (hd_running, one relaxed
 * store of the function pointer and its kind before every op callback, task, timer, flush and
 * bus message), every stall_ms / HD_STALL_SAMPLES (default 50 ms / 5). A shard that is awake with
 * the same beat for stall_ms has stalled inside one stretch of work: the watchdog logs "stall:
 * shard N busy for X ms in one stretch, running <kind> <function>" (symbol.c names it) and, when
 * the shard moves on, "stall: shard N went on after about Y ms", and counts it
 * (hd_shard_stalls, hd_shard_stall_max_ms, which apps export per shard). It only reads the
 * shards' atomics; its counters are its own, and it never touches a shard's data. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hd_impl.h"

static const char *const kind_names[HD_RUN_KINDS] = {"tick",  "op callback", "task",
                                                     "timer", "flush",       "bus message"};

struct hd_watch_shard {
    uint64_t beat;     /* last beat seen */
    uint64_t since_ns; /* when it was first seen (awake) */
    bool stalled;      /* logged as stalled; waiting for it to move on */
    const void *fn;    /* what it ran when the stall was noticed */
    uint32_t kind;
    _Atomic uint64_t stalls, stall_max_ms;
};

struct hd_watchdog {
    struct hd_runtime *rt;
    pthread_t thread;
    _Atomic uint32_t stop;
    uint64_t threshold_ns;
    struct hd_watch_shard *w; /* [rt->count] */
};

static void sleep_ns(uint64_t ns)
{
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000u),
                          .tv_nsec = (long)(ns % 1000000000u)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static void stall_noticed(struct hd_watchdog *wd, unsigned id, struct hd_watch_shard *w,
                          uint64_t now)
{
    struct hd_shard *s = wd->rt->shards[id];
    w->stalled = true;
    w->fn = atomic_load_explicit(&s->running_fn, memory_order_relaxed);
    w->kind = atomic_load_explicit(&s->running_kind, memory_order_relaxed);
    atomic_fetch_add_explicit(&w->stalls, 1, memory_order_relaxed);
    char sym[256] = "(none)";
    if (w->fn)
        hd_symbolize(w->fn, sym, sizeof(sym));
    hd_log_write(HD_LOG_WARN, "stall: shard %u busy for %llu ms in one stretch, running %s %s", id,
                 (unsigned long long)((now - w->since_ns) / 1000000u),
                 w->kind < HD_RUN_KINDS ? kind_names[w->kind] : "?", sym);
}

static void stall_ended(unsigned id, struct hd_watch_shard *w, uint64_t now)
{
    uint64_t ms = (now - w->since_ns) / 1000000u;
    if (ms > atomic_load_explicit(&w->stall_max_ms, memory_order_relaxed))
        atomic_store_explicit(&w->stall_max_ms, ms, memory_order_relaxed);
    char sym[256] = "(none)";
    if (w->fn)
        hd_symbolize(w->fn, sym, sizeof(sym));
    hd_log_write(HD_LOG_WARN, "stall: shard %u went on after about %llu ms (%s %s)", id,
                 (unsigned long long)ms, w->kind < HD_RUN_KINDS ? kind_names[w->kind] : "?", sym);
    w->stalled = false;
}

static void sample(struct hd_watchdog *wd)
{
    uint64_t now = hd_clock_ns();
    for (unsigned i = 0; i < wd->rt->count; i++) {
        struct hd_shard *s = wd->rt->shards[i];
        struct hd_watch_shard *w = &wd->w[i];
        uint64_t beat = atomic_load_explicit(&s->beat, memory_order_relaxed);
        bool asleep = atomic_load_explicit(&s->sleeping, memory_order_relaxed) != 0;
        if (beat != w->beat || asleep) {
            if (w->stalled)
                stall_ended(i, w, now);
            w->beat = beat;
            w->since_ns = now;
            continue;
        }
        if (!w->stalled && now - w->since_ns >= wd->threshold_ns)
            stall_noticed(wd, i, w, now);
    }
}

static void *watchdog_main(void *arg)
{
    struct hd_watchdog *wd = arg;
    pthread_setname_np(pthread_self(), "hd-watchdog");
    uint64_t period = wd->threshold_ns / HD_STALL_SAMPLES;
    while (!atomic_load_explicit(&wd->stop, memory_order_acquire)) {
        sample(wd);
        sleep_ns(period);
    }
    return NULL;
}

int hd_watchdog_start(struct hd_runtime *rt)
{
    uint32_t ms = rt->cfg.stall_ms ? rt->cfg.stall_ms : HD_STALL_MS_DEFAULT;
    if (ms == HD_STALL_OFF)
        return 0;
    struct hd_watchdog *wd = calloc(1, sizeof(*wd));
    if (wd == NULL)
        return -ENOMEM;
    wd->w = calloc(rt->count, sizeof(*wd->w));
    if (wd->w == NULL) {
        free(wd);
        return -ENOMEM;
    }
    wd->rt = rt;
    wd->threshold_ns = (uint64_t)ms * 1000000u;
    uint64_t now = hd_clock_ns();
    for (unsigned i = 0; i < rt->count; i++)
        wd->w[i].since_ns = now;
    if (pthread_create(&wd->thread, NULL, watchdog_main, wd) != 0) {
        free(wd->w);
        free(wd);
        return -EAGAIN;
    }
    rt->watchdog = wd;
    return 0;
}

void hd_watchdog_stop(struct hd_runtime *rt)
{
    struct hd_watchdog *wd = rt->watchdog;
    if (wd == NULL || atomic_exchange(&wd->stop, 1))
        return;
    pthread_join(wd->thread, NULL);
}

void hd_watchdog_free(struct hd_runtime *rt)
{
    struct hd_watchdog *wd = rt->watchdog;
    if (wd == NULL)
        return;
    hd_watchdog_stop(rt);
    free(wd->w);
    free(wd);
    rt->watchdog = NULL;
}

uint64_t hd_shard_stalls(const struct hd_shard *s)
{
    const struct hd_watchdog *wd = s->rt->watchdog;
    return wd ? atomic_load_explicit(&wd->w[s->id].stalls, memory_order_relaxed) : 0;
}

uint64_t hd_shard_stall_max_ms(const struct hd_shard *s)
{
    const struct hd_watchdog *wd = s->rt->watchdog;
    return wd ? atomic_load_explicit(&wd->w[s->id].stall_max_ms, memory_order_relaxed) : 0;
}
