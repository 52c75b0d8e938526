/* test_misc.c - deferred tasks (order, the ring's bound, next-tick continuations), end-of-tick
 * flushes (once per tick, cancel, cancel from another flush), histograms (bucket maths,
 * quantiles, merge), the log rate limit, and the runtime's life cycle: stop by signal, a module
 * whose shard_init fails, the stop sequence's hooks. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "hd_impl.h" /* hd_clock_ms for the rate-limit window */

static uint64_t ticks_of(struct hd_shard *s)
{
    return hd_shard_stats(s)->ticks;
}

/* ---------------------------------------------------------------- deferred tasks */

struct defer_ctx {
    struct hd_shard *s;
    uint64_t body_tick;
    unsigned next; /* order check */
    unsigned ran;
    uint64_t first_tick, last_tick;
    uint64_t child_tick;
    unsigned ran_at_child; /* tasks of the batch that had run when the child ran */
    bool child_ran;
    int overflow_rc;
};

static struct defer_ctx *dc;

static void defer_child(void *arg)
{
    (void)arg;
    dc->child_ran = true;
    dc->child_tick = ticks_of(dc->s);
    dc->ran_at_child = dc->ran;
    hdt_done(dc->s);
}

static void defer_task(void *arg)
{
    unsigned i = (unsigned)(uintptr_t)arg;
    HDT_CHECK(i == dc->next); /* FIFO */
    dc->next++;
    dc->ran++;
    uint64_t t = ticks_of(dc->s);
    if (i == 0)
        dc->first_tick = t;
    dc->last_tick = t;
    if (i == 0) /* a task deferring a task: it runs next tick, after the whole batch */
        HDT_CHECK(hd_defer(dc->s, defer_child, NULL) == 0);
}

static void defer_body(struct hd_shard *s, void *arg)
{
    dc = arg;
    dc->s = s;
    dc->body_tick = ticks_of(s);
    for (unsigned i = 0; i < HD_DEFER_RING_SIZE; i++)
        HDT_CHECK(hd_defer(s, defer_task, (void *)(uintptr_t)i) == 0);
    dc->overflow_rc = hd_defer(s, defer_task, (void *)(uintptr_t)999999);
}

Test(test_reactor_misc, defer_order_bound_and_next_tick)
{
    static struct defer_ctx c;
    memset(&c, 0, sizeof(c));
    struct hdt_options one = {.shards = 1};
    struct hd_runtime *rt;
    cr_assert_eq(hdt_run(&one, defer_body, &c, &rt), 0);
    cr_assert_eq(c.overflow_rc, -EAGAIN, "task %d past HD_DEFER_RING_SIZE", c.overflow_rc);
    cr_assert_eq(c.ran, HD_DEFER_RING_SIZE);
    cr_assert_eq(c.first_tick, c.body_tick + 1, "deferred tasks did not run on the next tick");
    cr_assert_eq(c.last_tick, c.first_tick, "one batch was split over ticks");
    cr_assert(c.child_ran);
    cr_assert_eq(c.child_tick, c.first_tick + 1, "a task's task ran in the same pass");
    cr_assert_eq(c.ran_at_child, HD_DEFER_RING_SIZE);
    /* body + batch + child */
    cr_assert_geq(hd_shard_stats(hd_runtime_shard(rt, 0))->tasks_run, HD_DEFER_RING_SIZE + 2);
    hd_runtime_destroy(rt);
}

/* ---------------------------------------------------------------- flushes */

struct flush_ctx {
    struct hd_shard *s;
    struct hd_flush many, self, cancelled, x, y, late;
    unsigned many_runs, self_runs, cancelled_runs, x_runs, y_runs, late_runs;
    uint64_t many_tick, req_tick, self_ticks[2], late_req_tick, late_tick;
    unsigned step;
    bool tasks_done_before_flush;
    unsigned tasks_this_tick;
};

static struct flush_ctx *fc;

static void many_fn(struct hd_flush *f)
{
    (void)f;
    fc->many_runs++;
    fc->many_tick = ticks_of(fc->s);
}

static void self_fn(struct hd_flush *f)
{
    if (fc->self_runs < 2)
        fc->self_ticks[fc->self_runs] = ticks_of(fc->s);
    fc->self_runs++;
    if (fc->self_runs == 1)
        hd_flush_request(fc->s, f); /* from its own run: next tick, not this pass */
}

static void cancelled_fn(struct hd_flush *f)
{
    (void)f;
    fc->cancelled_runs++;
}

static void late_fn(struct hd_flush *f)
{
    (void)f;
    fc->late_runs++;
    fc->late_tick = ticks_of(fc->s);
}

/* x and y each cancel the other: whichever runs first must keep the other from running. */
static void x_fn(struct hd_flush *f)
{
    (void)f;
    fc->x_runs++;
    hd_flush_cancel(fc->s, &fc->y);
    /* Requested during the flush pass: runs next tick. */
    hd_flush_request(fc->s, &fc->late);
    fc->late_req_tick = ticks_of(fc->s);
}

static void y_fn(struct hd_flush *f)
{
    (void)f;
    fc->y_runs++;
    hd_flush_cancel(fc->s, &fc->x);
    hd_flush_request(fc->s, &fc->late);
    fc->late_req_tick = ticks_of(fc->s);
}

static void flush_step(void *arg)
{
    (void)arg;
    struct hd_shard *s = fc->s;
    switch (fc->step++) {
    case 0:
        fc->req_tick = ticks_of(s);
        for (unsigned i = 0; i < 100; i++)
            hd_flush_request(s, &fc->many);
        hd_flush_request(s, &fc->self);
        hd_flush_request(s, &fc->cancelled);
        hd_flush_cancel(s, &fc->cancelled);
        hd_flush_cancel(s, &fc->cancelled); /* not queued any more: a no-op */
        HDT_CHECK(fc->many_runs == 0);      /* not before the end of the tick */
        break;
    case 1:
        HDT_CHECK(fc->many_runs == 1);
        hd_flush_request(s, &fc->x);
        hd_flush_request(s, &fc->y);
        break;
    case 2:
    case 3:
        break;
    default:
        hdt_done(s);
        return;
    }
    HDT_CHECK(hd_defer(s, flush_step, NULL) == 0);
}

static void flush_body(struct hd_shard *s, void *arg)
{
    fc = arg;
    fc->s = s;
    hd_flush_init(&fc->many, many_fn);
    hd_flush_init(&fc->self, self_fn);
    hd_flush_init(&fc->cancelled, cancelled_fn);
    hd_flush_init(&fc->x, x_fn);
    hd_flush_init(&fc->y, y_fn);
    hd_flush_init(&fc->late, late_fn);
    flush_step(NULL);
}

Test(test_reactor_misc, flush_once_per_tick_and_cancel)
{
    static struct flush_ctx c;
    memset(&c, 0, sizeof(c));
    struct hdt_options one = {.shards = 1};
    cr_assert_eq(hdt_run(&one, flush_body, &c, NULL), 0);
    cr_assert_eq(c.many_runs, 1, "requested 100 times in a tick, ran %u times", c.many_runs);
    cr_assert_eq(c.many_tick, c.req_tick, "the flush did not run at the end of its tick");
    cr_assert_eq(c.self_runs, 2);
    cr_assert_eq(c.self_ticks[0], c.req_tick);
    cr_assert_eq(c.self_ticks[1], c.req_tick + 1,
                 "a flush re-requested by itself ran again "
                 "in the same pass");
    cr_assert_eq(c.cancelled_runs, 0, "a cancelled flush ran");
    cr_assert_eq(c.x_runs + c.y_runs, 1,
                 "a flush cancelled by another in the same pass ran "
                 "(x %u, y %u)",
                 c.x_runs, c.y_runs);
    cr_assert_eq(c.late_runs, 1);
    cr_assert_eq(c.late_tick, c.late_req_tick + 1);
}

/* ---------------------------------------------------------------- histograms */

static void check_bucket_of(uint64_t v)
{
    unsigned b = hd_hist_bucket_of(v);
    cr_assert_lt(b, HD_HIST_BUCKETS, "value %llu: bucket %u", (unsigned long long)v, b);
    uint64_t up = hd_hist_bucket_upper(b);
    cr_assert_leq(v, up, "value %llu above its bucket's upper bound %llu", (unsigned long long)v,
                  (unsigned long long)up);
    if (b > 0) {
        uint64_t lo = hd_hist_bucket_upper(b - 1) + 1;
        cr_assert_geq(v, lo, "value %llu below its bucket's lower bound %llu",
                      (unsigned long long)v, (unsigned long long)lo);
        /* Width: exact below 16, then at most 1/16 of the bucket's lower bound. */
        if (lo >= 16)
            cr_assert_leq((up - lo) * 16, lo, "bucket %u [%llu, %llu] wider than 1/16", b,
                          (unsigned long long)lo, (unsigned long long)up);
        else
            cr_assert_eq(up, lo);
    }
}

Test(test_reactor_misc, hist_buckets_consistent)
{
    unsigned prev = 0;
    for (uint64_t v = 0; v <= (UINT64_C(1) << 20); v++) {
        check_bucket_of(v);
        unsigned b = hd_hist_bucket_of(v);
        if (v > 0)
            cr_assert(b == prev || b == prev + 1, "bucket jumps at %llu", (unsigned long long)v);
        prev = b;
    }
    for (unsigned k = 4; k < 64; k++) {
        uint64_t p = UINT64_C(1) << k;
        uint64_t probes[] = {p - 1, p, p + 1, p + p / 2, p + p / 16, p + p / 16 - 1, p | (p - 1)};
        for (unsigned i = 0; i < HD_ARRAY_SIZE(probes); i++)
            check_bucket_of(probes[i]);
    }
    check_bucket_of(UINT64_MAX);
    cr_assert_eq(hd_hist_bucket_of(UINT64_MAX), HD_HIST_BUCKETS - 1);
    cr_assert_eq(hd_hist_bucket_upper(HD_HIST_BUCKETS - 1), UINT64_MAX);
    /* Every bucket is reachable and its upper bound maps back to it. */
    for (unsigned b = 0; b < HD_HIST_BUCKETS; b++) {
        cr_assert_eq(hd_hist_bucket_of(hd_hist_bucket_upper(b)), b, "bucket %u", b);
        if (b > 0)
            cr_assert_gt(hd_hist_bucket_upper(b), hd_hist_bucket_upper(b - 1));
    }
}

static struct hd_hist h_a, h_b, h_all, h_tmp;

static void check_quantile(const struct hd_hist *h, double q, uint64_t exact)
{
    uint64_t got = hd_hist_quantile(h, q);
    /* An upper bound of the true value's bucket: never below it, within 1/16 above. */
    cr_assert_geq(got, exact, "q %.4f: %llu below the true %llu", q, (unsigned long long)got,
                  (unsigned long long)exact);
    cr_assert_leq((got - exact) * 16, exact, "q %.4f: %llu too far above the true %llu", q,
                  (unsigned long long)got, (unsigned long long)exact);
}

Test(test_reactor_misc, hist_quantiles_and_merge)
{
    hd_hist_init(&h_all);
    cr_assert_eq(hd_hist_quantile(&h_all, 0.5), 0, "empty histogram");
    cr_assert_eq(h_all.count, 0);
    /* Uniform 1..100000. */
    const uint64_t n = 100000;
    hd_hist_init(&h_a);
    hd_hist_init(&h_b);
    for (uint64_t v = 1; v <= n; v++) {
        hd_hist_record(&h_all, v);
        hd_hist_record(v <= n / 2 ? &h_a : &h_b, v);
    }
    cr_assert_eq(h_all.count, n);
    cr_assert_eq(h_all.sum, n * (n + 1) / 2);
    cr_assert_eq(h_all.min, 1);
    cr_assert_eq(h_all.max, n);
    static const double qs[] = {0.001, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999, 0.9999};
    for (unsigned i = 0; i < HD_ARRAY_SIZE(qs); i++) {
        double want = qs[i] * (double)n; /* the rank ceil(q n) is the true value here */
        uint64_t exact = (uint64_t)want;
        if ((double)exact < want)
            exact++;
        check_quantile(&h_all, qs[i], exact);
    }
    cr_assert_eq(hd_hist_quantile(&h_all, 1.0), n, "q 1 is the max");
    cr_assert_eq(hd_hist_quantile(&h_all, 0.0), 1, "q 0 is the min");

    /* Merge of the two halves equals the whole. */
    hd_hist_init(&h_tmp);
    hd_hist_merge(&h_tmp, &h_a);
    hd_hist_merge(&h_tmp, &h_b);
    cr_assert_eq(memcmp(&h_tmp, &h_all, sizeof(h_all)), 0, "merge differs from the whole");
    /* Merging an empty one changes nothing (its min is UINT64_MAX). */
    struct hd_hist *empty = &h_b;
    hd_hist_init(empty);
    hd_hist_merge(&h_tmp, empty);
    cr_assert_eq(memcmp(&h_tmp, &h_all, sizeof(h_all)), 0, "merging an empty one changed it");
    for (unsigned i = 0; i < HD_ARRAY_SIZE(qs); i++)
        cr_assert_eq(hd_hist_quantile(&h_tmp, qs[i]), hd_hist_quantile(&h_all, qs[i]));

    /* Two-point: 999 fast values and one outlier. */
    hd_hist_init(&h_a);
    for (unsigned i = 0; i < 999; i++)
        hd_hist_record(&h_a, 10);
    hd_hist_record(&h_a, 1000000000);
    cr_assert_eq(hd_hist_quantile(&h_a, 0.5), 10);
    cr_assert_eq(hd_hist_quantile(&h_a, 0.999), 10);
    cr_assert_eq(hd_hist_quantile(&h_a, 1.0), 1000000000);
    check_quantile(&h_a, 0.9995, 1000000000);

    /* Constant: every quantile is the value itself (clamped to min and max). */
    hd_hist_init(&h_a);
    for (unsigned i = 0; i < 1000; i++)
        hd_hist_record(&h_a, 777777);
    for (unsigned i = 0; i < HD_ARRAY_SIZE(qs); i++)
        cr_assert_eq(hd_hist_quantile(&h_a, qs[i]), 777777);

    /* Geometric: 2^k recorded 2^(20-k) times, so half the values are 1. */
    hd_hist_init(&h_a);
    uint64_t total = 0;
    for (unsigned k = 0; k <= 20; k++)
        for (uint64_t i = 0; i < (UINT64_C(1) << (20 - k)); i++, total++)
            hd_hist_record(&h_a, UINT64_C(1) << k);
    cr_assert_eq(hd_hist_quantile(&h_a, 0.5), 1);
    cr_assert_eq(hd_hist_quantile(&h_a, 0.75), 2);
    cr_assert_eq(hd_hist_quantile(&h_a, 1.0), UINT64_C(1) << 20);
    cr_assert_eq(h_a.count, total);
}

/* ---------------------------------------------------------------- log rate limit */

Test(test_reactor_misc, log_rate_limit_allow)
{
    struct hd_log_rl rl = {0};
    uint32_t sup = 12345;
    uint64_t t = 1000000;
    for (unsigned i = 0; i < HD_LOG_RL_BURST; i++) {
        cr_assert(hd_log_rl_allow_at(&rl, t + i, &sup), "line %u suppressed", i);
        cr_assert_eq(sup, 0);
    }
    /* A flood: 20 lines a second for the rest of the window, all suppressed. */
    unsigned flood = 0;
    for (uint64_t ms = 50; ms < HD_LOG_RL_WINDOW_MS; ms += 50, flood++)
        cr_assert(!hd_log_rl_allow_at(&rl, t + ms, &sup), "line at +%llu ms allowed",
                  (unsigned long long)ms);
    /* The next window: one line through with the count, once. */
    cr_assert(hd_log_rl_allow_at(&rl, t + HD_LOG_RL_WINDOW_MS, &sup));
    cr_assert_eq(sup, flood);
    for (unsigned i = 1; i < HD_LOG_RL_BURST; i++) {
        cr_assert(hd_log_rl_allow_at(&rl, t + HD_LOG_RL_WINDOW_MS + i, &sup));
        cr_assert_eq(sup, 0, "the suppressed count was reported twice");
    }
    cr_assert(!hd_log_rl_allow_at(&rl, t + HD_LOG_RL_WINDOW_MS + 10, &sup));
}

static void log_burst(unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        hd_log_rl(HD_LOG_WARN, "burst line %u", i); /* one call site */
}

Test(test_reactor_misc, log_rate_limit_macro_lines)
{
    char path[] = "/tmp/hdt_log_XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    unlink(path);
    int saved = dup(STDERR_FILENO);
    cr_assert_eq(dup2(fd, STDERR_FILENO), STDERR_FILENO);
    log_burst(200); /* "accept failed" 20 times a second for 10 s: a few lines */
    dup2(saved, STDERR_FILENO);
    close(saved);
    char buf[8192];
    ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
    close(fd);
    cr_assert_gt(n, 0);
    buf[n] = '\0';
    unsigned lines = 0;
    for (char *p = buf; *p; p++)
        lines += (*p == '\n');
    cr_assert_eq(lines, HD_LOG_RL_BURST, "%u lines:\n%s", lines, buf);
    cr_assert_not_null(strstr(buf, "WARN  main burst line 0\n"), "%s", buf);
    cr_assert_not_null(strstr(buf, "burst line 4\n"));
    cr_assert_null(strstr(buf, "burst line 5\n"), "line 5 got through");
}

/* ---------------------------------------------------------------- life cycle */

#define LC_SHARDS 3

struct lc_ctx {
    _Atomic unsigned seq;
    _Atomic unsigned init[2][LC_SHARDS], stop[2][LC_SHARDS], fini[2][LC_SHARDS];
    _Atomic unsigned stop_seq[2][LC_SHARDS], fini_seq[2][LC_SHARDS];
    _Atomic unsigned global_init[2], global_fini[2], global_fini_seq[2];
    _Atomic unsigned signals, hup;
    _Atomic bool wrong_thread, not_stopping;
    int fail_init_on; /* module 1's shard_init fails on this shard (-1: never) */
    int fail_global;  /* module 1's global_init fails */
};

static struct lc_ctx lc;

static unsigned lc_module(void *arg)
{
    return (unsigned)(uintptr_t)arg;
}

static int lc_global_init(struct hd_runtime *rt, void *arg)
{
    (void)rt;
    unsigned m = lc_module(arg);
    atomic_fetch_add(&lc.global_init[m], 1);
    return m == 1 && lc.fail_global ? -ENOTSUP : 0;
}

static void lc_global_fini(struct hd_runtime *rt, void *arg)
{
    (void)rt;
    unsigned m = lc_module(arg);
    atomic_fetch_add(&lc.global_fini[m], 1);
    atomic_store(&lc.global_fini_seq[m], atomic_fetch_add(&lc.seq, 1) + 1);
}

static int lc_shard_init(struct hd_shard *s, void *arg, void **state)
{
    unsigned m = lc_module(arg), id = hd_shard_id(s);
    *state = (void *)(uintptr_t)(m + 1);
    if (hd_shard_current() != s)
        atomic_store(&lc.wrong_thread, true);
    atomic_fetch_add(&lc.init[m][id], 1);
    if (m == 1 && (int)id == lc.fail_init_on)
        return -EADDRINUSE;
    return 0;
}

/* The harness-free modules get their module index as arg; state tells them apart too. */
static void lc_shard_stop(struct hd_shard *s, void *state)
{
    unsigned m = (unsigned)(uintptr_t)state - 1, id = hd_shard_id(s);
    if (hd_shard_current() != s)
        atomic_store(&lc.wrong_thread, true);
    if (!hd_shard_stopping(s))
        atomic_store(&lc.not_stopping, true);
    atomic_fetch_add(&lc.stop[m][id], 1);
    atomic_store(&lc.stop_seq[m][id], atomic_fetch_add(&lc.seq, 1) + 1);
}

static void lc_shard_fini(struct hd_shard *s, void *state)
{
    unsigned m = (unsigned)(uintptr_t)state - 1, id = hd_shard_id(s);
    if (hd_shard_current() != s)
        atomic_store(&lc.wrong_thread, true);
    atomic_fetch_add(&lc.fini[m][id], 1);
    atomic_store(&lc.fini_seq[m][id], atomic_fetch_add(&lc.seq, 1) + 1);
}

static void lc_on_signal(struct hd_runtime *rt, int signo, void *arg)
{
    (void)rt;
    if (lc_module(arg) != 0)
        return;
    atomic_fetch_add(&lc.signals, 1);
    if (signo == SIGHUP)
        atomic_fetch_add(&lc.hup, 1);
}

static const struct hd_module lc_mod = {
    .abi_version = HD_MODULE_ABI,
    .name = "lifecycle",
    .global_init = lc_global_init,
    .global_fini = lc_global_fini,
    .shard_init = lc_shard_init,
    .shard_stop = lc_shard_stop,
    .shard_fini = lc_shard_fini,
    .on_signal = lc_on_signal,
};

static const struct hd_module *const lc_mods[] = {&lc_mod, &lc_mod};
static void *const lc_args[] = {(void *)(uintptr_t)0, (void *)(uintptr_t)1};

static int lc_create(bool signals, struct hd_runtime **rt)
{
    struct hd_runtime_config cfg = {
        .shards_count = LC_SHARDS,
        .handle_signals = signals,
        .modules = lc_mods,
        .modules_args = lc_args,
        .modules_count = 2,
    };
    return hd_runtime_create(&cfg, rt);
}

static void lc_reset(void)
{
    memset(&lc, 0, sizeof(lc));
    lc.fail_init_on = -1;
}

static unsigned threads_count(void)
{
    DIR *d = opendir("/proc/self/task");
    cr_assert_not_null(d);
    unsigned n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* Stop sequence: shard_stop then shard_fini on every shard, on its own thread; modules stop in
 * order and finish in reverse; global_fini after every shard_fini. */
static void lc_check_stopped_cleanly(void)
{
    cr_assert(!atomic_load(&lc.wrong_thread), "a shard hook ran on another thread");
    cr_assert(!atomic_load(&lc.not_stopping), "shard_stop ran before stopping was visible");
    unsigned last_fini = 0;
    for (unsigned id = 0; id < LC_SHARDS; id++) {
        for (unsigned m = 0; m < 2; m++) {
            cr_assert_eq(atomic_load(&lc.init[m][id]), 1);
            cr_assert_eq(atomic_load(&lc.stop[m][id]), 1, "module %u shard %u: shard_stop x%u", m,
                         id, atomic_load(&lc.stop[m][id]));
            cr_assert_eq(atomic_load(&lc.fini[m][id]), 1, "module %u shard %u: shard_fini x%u", m,
                         id, atomic_load(&lc.fini[m][id]));
            cr_assert_lt(atomic_load(&lc.stop_seq[m][id]), atomic_load(&lc.fini_seq[m][id]),
                         "shard %u: fini before stop", id);
            if (atomic_load(&lc.fini_seq[m][id]) > last_fini)
                last_fini = atomic_load(&lc.fini_seq[m][id]);
        }
        cr_assert_lt(atomic_load(&lc.stop_seq[0][id]), atomic_load(&lc.stop_seq[1][id]),
                     "modules did not stop in order");
        cr_assert_gt(atomic_load(&lc.fini_seq[0][id]), atomic_load(&lc.fini_seq[1][id]),
                     "modules did not finish in reverse order");
    }
    for (unsigned m = 0; m < 2; m++) {
        cr_assert_eq(atomic_load(&lc.global_init[m]), 1);
        cr_assert_eq(atomic_load(&lc.global_fini[m]), 1);
        cr_assert_gt(atomic_load(&lc.global_fini_seq[m]), last_fini,
                     "global_fini before a shard_fini");
    }
    cr_assert_gt(atomic_load(&lc.global_fini_seq[0]), atomic_load(&lc.global_fini_seq[1]));
}

Test(test_reactor_misc, stop_sequence_hooks)
{
    lc_reset();
    struct hd_runtime *rt;
    cr_assert_eq(lc_create(false, &rt), 0);
    cr_assert_eq(hd_runtime_start(rt), 0);
    for (unsigned id = 0; id < LC_SHARDS; id++) /* start returns after every shard_init */
        for (unsigned m = 0; m < 2; m++)
            cr_assert_eq(atomic_load(&lc.init[m][id]), 1);
    hd_runtime_stop(rt);
    hd_runtime_stop(rt); /* idempotent */
    cr_assert_eq(hd_runtime_wait(rt), 0);
    lc_check_stopped_cleanly();
    hd_runtime_destroy(rt);
}

static void *signaller(void *arg)
{
    (void)arg;
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
    kill(getpid(), SIGHUP);
    /* SIGTERM only once the reload was seen, so both are handled whatever the scheduling. */
    for (unsigned i = 0; i < 10000 && atomic_load(&lc.hup) == 0; i++) {
        struct timespec ms = {0, 1000 * 1000};
        nanosleep(&ms, NULL);
    }
    kill(getpid(), SIGTERM);
    return NULL;
}

Test(test_reactor_misc, stop_by_sigterm_after_sighup)
{
    lc_reset();
    struct hd_runtime *rt;
    cr_assert_eq(lc_create(true, &rt), 0);
    cr_assert_eq(hd_runtime_start(rt), 0);
    /* Created after start: it inherits the mask that blocks the signals for signalfd. */
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, signaller, NULL), 0);
    cr_assert_eq(hd_runtime_wait(rt), 0);
    pthread_join(t, NULL);
    cr_assert_eq(atomic_load(&lc.hup), 1, "SIGHUP reached on_signal %u times",
                 atomic_load(&lc.hup));
    cr_assert_eq(atomic_load(&lc.signals), 1, "SIGTERM went to on_signal");
    lc_check_stopped_cleanly();
    hd_runtime_destroy(rt);
}

Test(test_reactor_misc, start_fails_when_a_shard_init_fails)
{
    lc_reset();
    lc.fail_init_on = 1;
    unsigned threads_before = threads_count();
    struct hd_runtime *rt;
    cr_assert_eq(lc_create(false, &rt), 0);
    cr_assert_eq(hd_runtime_start(rt), -EADDRINUSE);
    cr_assert_eq(threads_count(), threads_before, "shard threads left running");
    cr_assert(!atomic_load(&lc.wrong_thread));
    for (unsigned id = 0; id < LC_SHARDS; id++) {
        cr_assert_eq(atomic_load(&lc.init[0][id]), 1);
        cr_assert_eq(atomic_load(&lc.init[1][id]), 1);
        /* Module 0 succeeded everywhere: finished everywhere. */
        cr_assert_eq(atomic_load(&lc.fini[0][id]), 1, "shard %u: module 0 fini x%u", id,
                     atomic_load(&lc.fini[0][id]));
        /* Module 1 failed on shard 1: finished on the others only. */
        cr_assert_eq(atomic_load(&lc.fini[1][id]), id == 1 ? 0u : 1u, "shard %u: module 1 fini x%u",
                     id, atomic_load(&lc.fini[1][id]));
        if (atomic_load(&lc.stop[0][id]))
            cr_assert_lt(atomic_load(&lc.stop_seq[0][id]), atomic_load(&lc.fini_seq[0][id]));
        cr_assert_eq(atomic_load(&lc.stop[1][1]), 0, "shard_stop for a failed init");
    }
    for (unsigned m = 0; m < 2; m++) {
        cr_assert_eq(atomic_load(&lc.global_init[m]), 1);
        cr_assert_eq(atomic_load(&lc.global_fini[m]), 1, "module %u global_fini x%u", m,
                     atomic_load(&lc.global_fini[m]));
    }
    cr_assert_eq(hd_runtime_wait(rt), -EADDRINUSE);
    hd_runtime_destroy(rt);
}

Test(test_reactor_misc, start_fails_when_a_global_init_fails)
{
    lc_reset();
    lc.fail_global = 1;
    unsigned threads_before = threads_count();
    struct hd_runtime *rt;
    cr_assert_eq(lc_create(false, &rt), 0);
    cr_assert_eq(hd_runtime_start(rt), -ENOTSUP);
    cr_assert_eq(threads_count(), threads_before);
    for (unsigned id = 0; id < LC_SHARDS; id++)
        cr_assert_eq(atomic_load(&lc.init[0][id]) + atomic_load(&lc.init[1][id]), 0,
                     "a shard started after global_init failed");
    cr_assert_eq(atomic_load(&lc.global_fini[0]), 1, "module 0 was not finished");
    cr_assert_eq(atomic_load(&lc.global_fini[1]), 0, "the failed module was finished");
    hd_runtime_destroy(rt);
}

/* hd_tbucket: starts full, refills with time up to the burst, never takes more than it has. */
Test(test_reactor_misc, token_bucket)
{
    struct hd_tbucket b;
    hd_tbucket_fill(&b, 3, 1000);
    for (int i = 0; i < 3; i++)
        cr_assert(hd_tbucket_take(&b, 0.001, 3, 1000, 1), "token %d of the burst", i);
    cr_assert(!hd_tbucket_take(&b, 0.001, 3, 1000, 1), "burst spent");
    cr_assert(!hd_tbucket_take(&b, 0.001, 3, 1500, 1), "half a token after 500 ms");
    cr_assert(hd_tbucket_take(&b, 0.001, 3, 2000, 1), "one token after 1 s");
    cr_assert(!hd_tbucket_take(&b, 0.001, 3, 2000, 1));
    cr_assert(hd_tbucket_take(&b, 0.001, 3, 1000000, 3), "a long pause refills the burst");
    cr_assert(!hd_tbucket_take(&b, 0.001, 3, 1000000, 1), "and no more than the burst");
    cr_assert(!hd_tbucket_take(&b, 0.001, 3, 999999, 1), "a clock going back adds nothing");
}
