/* test_wait.c - the tick's wait policy (shard.c): the kernel's min-wait batches completions that
 * arrive under load, never holds a lone completion on a quiet shard, never holds back a timer due
 * sooner than the min-wait, and is not used when the feature is disabled. A very long min-wait
 * (400 ms) makes "held" visible as completions that come back from the same sleep (the shard's
 * sleep counter), not as a duration. The late completions are reads on timerfds (io_uring's own
 * timeouts always end a wait, min-wait or not). How a tick's submissions meet the min-wait (one
 * io_uring_enter while min-waits gather input, the submit first between bursts) shows in the
 * shard's enter and sleep counters. */
#define _GNU_SOURCE /* RUSAGE_THREAD */
#include <criterion/criterion.h>
#include <errno.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "harness.h"
#include "hd_impl.h"
#include <hd/hd_uring.h>

#define LONG_MIN_WAIT_US (400u * 1000u)
#define BURST_NOPS       64 /* > HD_MIN_WAIT_ARM_CQES: arms the min-wait */
#define BATCH_OPS        8  /* < HD_MIN_WAIT_BATCH: only the min-wait ends their sleep */
#define MS               (1000u * 1000u)

static const struct hdt_options long_wait = {.shards = 1, .min_wait_us = LONG_MIN_WAIT_US};
static const struct hdt_options no_min_wait = {
    .shards = 1, .min_wait_us = LONG_MIN_WAIT_US, .features_disable = HD_FEAT_MIN_WAIT};

struct wait_ctx {
    struct hd_shard *s;
    struct hd_op nops[BURST_NOPS], ops[BATCH_OPS], guard;
    int op_fd[BATCH_OPS], guard_fd;
    uint64_t op_buf[BATCH_OPS], guard_buf;
    struct hd_timer timer;
    unsigned nops_done, ops_done, pending; /* pending: callbacks until the test stops */
    uint64_t op_sleep[BATCH_OPS], guard_sleep, timer_sleep; /* the sleep that delivered each */
    bool use_timer; /* after the burst: a 20 ms wheel timer and the guard instead of the batch */
    bool late_op;   /* after the burst: one op due after the min-wait ended empty, and the guard */
    bool busy_op;   /* after the burst: one op that completes while a callback works, the guard */
    uint32_t features;
    uint64_t min_waits;
};

static uint64_t sleep_now(struct hd_shard *s)
{
    return hd_shard_stats(s)->sleeps;
}

/* A read of a timerfd that expires in ns: completes then, through the kernel's task work. */
static void timerfd_read(struct hd_shard *s, struct hd_op *op, hd_op_fn *fn, int *fd, uint64_t *buf,
                         uint64_t ns)
{
    *fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC);
    HDT_CHECK(*fd >= 0);
    struct itimerspec it = {
        .it_value = {.tv_sec = (time_t)(ns / 1000000000u), .tv_nsec = (long)(ns % 1000000000u)}};
    HDT_CHECK(timerfd_settime(*fd, 0, &it, NULL) == 0);
    hd_op_init(s, op, fn);
    struct io_uring_sqe *sqe = hd_op_sqe(s, op);
    HDT_CHECK(sqe != NULL);
    io_uring_prep_read(sqe, *fd, buf, sizeof(*buf), 0);
}

static void close_fds(struct wait_ctx *c)
{
    for (unsigned i = 0; i < BATCH_OPS; i++)
        if (c->op_fd[i] > 0)
            close(c->op_fd[i]);
    if (c->guard_fd > 0)
        close(c->guard_fd);
}

static void finish(struct wait_ctx *c)
{
    if (--c->pending > 0)
        return;
    c->features = hd_shard_features(c->s);
    c->min_waits = hd_shard_stats(c->s)->min_waits;
    hdt_done(c->s);
}

static void guard_done(struct hd_op *op, int32_t res, uint32_t flags)
{
    struct wait_ctx *c = hd_container_of(op, struct wait_ctx, guard);
    (void)flags;
    HDT_CHECK(res == (int32_t)sizeof(uint64_t));
    c->guard_sleep = sleep_now(c->s);
    finish(c);
}

static void timer_fired(struct hd_timer *t)
{
    struct wait_ctx *c = hd_container_of(t, struct wait_ctx, timer);
    c->timer_sleep = sleep_now(c->s);
    finish(c);
}

static struct wait_ctx *the_ctx; /* the one case running (one shard, one at a time) */

static void op_done(struct hd_op *op, int32_t res, uint32_t flags)
{
    (void)flags;
    HDT_CHECK(res == (int32_t)sizeof(uint64_t));
    struct hd_shard *s = hd_shard_current();
    struct wait_ctx *c = the_ctx;
    c->op_sleep[op - c->ops] = sleep_now(s);
    c->ops_done++;
    finish(c);
}

/* A callback that works for 3 ms: the op due in 1 ms completes meanwhile, into the kernel's task
 * work, and waits there when the tick goes to sleep. */
static void busy_nop_done(struct hd_op *op, int32_t res, uint32_t flags)
{
    (void)op;
    (void)flags;
    HDT_CHECK(res == 0);
    uint64_t end = hd_clock_ns() + 3u * MS;
    while (hd_clock_ns() < end)
        ;
}

/* After the burst (the shard is "under load"): either BATCH_OPS timeouts 1..8 ms apart, or a
 * wheel timer due in 20 ms beside a 200 ms guard. */
static void after_burst(struct wait_ctx *c)
{
    if (c->busy_op) {
        c->pending = 2;
        timerfd_read(c->s, &c->ops[0], op_done, &c->op_fd[0], &c->op_buf[0], 1u * MS);
        timerfd_read(c->s, &c->guard, guard_done, &c->guard_fd, &c->guard_buf, 200ull * MS);
        hd_op_init(c->s, &c->nops[0], busy_nop_done);
        HDT_CHECK(hd_op_nop(c->s, &c->nops[0]) == 0);
        return;
    }
    if (c->late_op) {
        c->pending = 2;
        timerfd_read(c->s, &c->ops[0], op_done, &c->op_fd[0], &c->op_buf[0], 150ull * MS);
        timerfd_read(c->s, &c->guard, guard_done, &c->guard_fd, &c->guard_buf, 600ull * MS);
        return;
    }
    if (c->use_timer) {
        c->pending = 2;
        hd_timer_init(&c->timer, timer_fired);
        hd_timer_start(c->s, &c->timer, 20);
        timerfd_read(c->s, &c->guard, guard_done, &c->guard_fd, &c->guard_buf, 200ull * MS);
        return;
    }
    c->pending = BATCH_OPS;
    for (unsigned i = 0; i < BATCH_OPS; i++) {
        timerfd_read(c->s, &c->ops[i], op_done, &c->op_fd[i], &c->op_buf[i],
                     (uint64_t)(i + 1) * MS);
    }
}

static void nop_done(struct hd_op *op, int32_t res, uint32_t flags)
{
    (void)op;
    (void)flags;
    HDT_CHECK(res == 0);
    struct wait_ctx *c = the_ctx;
    if (++c->nops_done == BURST_NOPS)
        after_burst(c);
}

static void burst_body(struct hd_shard *s, void *arg)
{
    struct wait_ctx *c = arg;
    c->s = s;
    the_ctx = c;
    for (unsigned i = 0; i < BURST_NOPS; i++) {
        hd_op_init(s, &c->nops[i], nop_done);
        HDT_CHECK(hd_op_nop(s, &c->nops[i]) == 0);
    }
}

/* Under load the completions that arrive within the min-wait come back in one tick. */
Test(test_reactor_wait, load_batches_completions)
{
    struct wait_ctx c = {0};
    cr_assert_eq(hdt_run(&long_wait, burst_body, &c, NULL), 0);
    close_fds(&c);
    cr_assert_eq(c.ops_done, BATCH_OPS);
    if (!(c.features & HD_FEAT_MIN_WAIT)) {
        cr_log_info("kernel without IORING_FEAT_MIN_TIMEOUT: the plain wait (fallback) ran");
        cr_assert_eq(c.min_waits, 0);
        return;
    }
    cr_assert_geq(c.min_waits, 1);
    for (unsigned i = 1; i < BATCH_OPS; i++)
        cr_assert_eq(c.op_sleep[i], c.op_sleep[0], "op %u after sleep %llu, op 0 after %llu", i,
                     (unsigned long long)c.op_sleep[i], (unsigned long long)c.op_sleep[0]);
}

/* Disabled: each completion wakes the shard as before (no min-wait sleeps). */
Test(test_reactor_wait, disabled_never_min_waits)
{
    struct wait_ctx c = {0};
    cr_assert_eq(hdt_run(&no_min_wait, burst_body, &c, NULL), 0);
    close_fds(&c);
    cr_assert_eq(c.ops_done, BATCH_OPS);
    cr_assert_eq(c.features & HD_FEAT_MIN_WAIT, 0);
    cr_assert_eq(c.min_waits, 0);
}

/* Off by default (min_wait_us 0): the plain wait even under load. */
Test(test_reactor_wait, off_by_default)
{
    static const struct hdt_options defaults = {.shards = 1};
    struct wait_ctx c = {0};
    cr_assert_eq(hdt_run(&defaults, burst_body, &c, NULL), 0);
    close_fds(&c);
    cr_assert_eq(c.ops_done, BATCH_OPS);
    cr_assert_eq(c.features & HD_FEAT_MIN_WAIT, 0);
    cr_assert_eq(c.min_waits, 0);
}

/* A wheel timer due before the min-wait would end fires after a sleep of its own. */
Test(test_reactor_wait, timer_not_held_back)
{
    struct wait_ctx c = {.use_timer = true};
    cr_assert_eq(hdt_run(&long_wait, burst_body, &c, NULL), 0);
    close_fds(&c);
    cr_assert_lt(c.timer_sleep, c.guard_sleep, "timer after sleep %llu, guard after %llu",
                 (unsigned long long)c.timer_sleep, (unsigned long long)c.guard_sleep);
}

/* Under load, a min-wait that ended with nothing to report: the first completion after it
 * wakes the shard at once, in a sleep of its own before the guard's (were it held until the
 * sleep's timeout or until HD_MIN_WAIT_BATCH completions, both would come back from the same
 * sleep). The min-wait (50 ms) ends empty well before the op (150 ms). */
Test(test_reactor_wait, completion_after_empty_min_wait_not_held)
{
    static const struct hdt_options short_wait = {.shards = 1, .min_wait_us = 50u * 1000u};
    struct wait_ctx c = {.late_op = true};
    cr_assert_eq(hdt_run(&short_wait, burst_body, &c, NULL), 0);
    close_fds(&c);
    cr_assert_eq(c.ops_done, 1);
    if (!(c.features & HD_FEAT_MIN_WAIT)) {
        cr_log_info("kernel without IORING_FEAT_MIN_TIMEOUT: the plain wait (fallback) ran");
        return;
    }
    cr_assert_geq(c.min_waits, 1);
    cr_assert_lt(c.op_sleep[0], c.guard_sleep, "op after sleep %llu, guard after %llu",
                 (unsigned long long)c.op_sleep[0], (unsigned long long)c.guard_sleep);
}

/* Under load, a completion that came while the tick worked (it waits in the kernel's task work
 * when the tick would sleep) is not held for a min-wait's window: the plain wait takes it at once,
 * in a sleep before the guard's (held, both would come back from the same sleep when the 400 ms
 * min-wait passed). */
Test(test_reactor_wait, input_already_waiting_not_held)
{
    struct wait_ctx c = {.busy_op = true};
    cr_assert_eq(hdt_run(&long_wait, burst_body, &c, NULL), 0);
    close_fds(&c);
    cr_assert_eq(c.ops_done, 1);
    cr_assert_lt(c.op_sleep[0], c.guard_sleep, "op after sleep %llu, guard after %llu",
                 (unsigned long long)c.op_sleep[0], (unsigned long long)c.guard_sleep);
}

/* A quiet shard: one op alone comes back from a sleep of its own, before a guard due later (were
 * it held by the min-wait, both would come back from the same sleep when the min-wait ends). */
static void lone_body(struct hd_shard *s, void *arg)
{
    struct wait_ctx *c = arg;
    c->s = s;
    the_ctx = c;
    timerfd_read(s, &c->ops[0], op_done, &c->op_fd[0], &c->op_buf[0], 1 * MS);
    timerfd_read(s, &c->guard, guard_done, &c->guard_fd, &c->guard_buf, 200ull * MS);
    c->pending = 2;
}

Test(test_reactor_wait, lone_op_not_held)
{
    struct wait_ctx c = {0};
    cr_assert_eq(hdt_run(&long_wait, lone_body, &c, NULL), 0);
    close_fds(&c);
    cr_assert_eq(c.ops_done, 1);
    cr_assert_eq(c.min_waits, 0);
    cr_assert_lt(c.op_sleep[0], c.guard_sleep, "op after sleep %llu, guard after %llu",
                 (unsigned long long)c.op_sleep[0], (unsigned long long)c.guard_sleep);
}

/* The adaptive min-wait (min_wait_gather > 0): about as long as gather completions take at the
 * recent rate, and none on a quiet shard, when the wait would be too short to matter, or when it
 * would be longer than the cap (a window that gathers a packet or two holds them for nothing:
 * until 2026-12-07 it was capped instead, and held each packet of a light load, issue 25). */
Test(test_reactor_wait, adaptive_length)
{
    cr_assert_eq(hd_min_wait_us(HD_MIN_WAIT_ARM_CQES - 1, 100, 4), 0, "quiet: no min-wait");
    cr_assert_eq(hd_min_wait_us(1000, 0, 4), 0, "not configured");
    cr_assert_eq(hd_min_wait_us(HD_MIN_WAIT_ARM_CQES, 100, 0), 100, "fixed: the cap");
    cr_assert_eq(hd_min_wait_us(80, 100, 4), 100, "40 CQEs a ms: 4 take 100 us");
    cr_assert_eq(hd_min_wait_us(79, 100, 4), 0, "slower: over the cap, none");
    cr_assert_eq(hd_min_wait_us(40, 100, 4), 0, "a light load: none");
    cr_assert_eq(hd_min_wait_us(160, 100, 4), 50, "faster: shorter");
    cr_assert_eq(hd_min_wait_us(800, 100, 4), HD_MIN_WAIT_US_FLOOR, "at the floor");
    cr_assert_eq(hd_min_wait_us(801, 100, 4), 0, "busy: under the floor, plain wait");
}

/* The spin before a sleep: as long as a sleep costs when the recent waits for work were no
 * longer than that, none otherwise; the recent gap a moving average of waits, each capped. */
Test(test_reactor_wait, spin_decision)
{
    cr_assert_eq(hd_spin_us(0, 15), 15, "work comes at once: spin");
    cr_assert_eq(hd_spin_us(15000, 15), 15, "as long as a sleep: spin");
    cr_assert_eq(hd_spin_us(15001, 15), 0, "longer: sleep");
    cr_assert_eq(hd_spin_us(200000, 15), 0, "a light load (200 us gaps): sleep");
    cr_assert_eq(hd_spin_us(0, 0), 0, "sleeps free: never spin");
    uint64_t gap = HD_SPIN_GAP_CAP_NS; /* a shard starts as if idle */
    unsigned waits = 0;
    while (hd_spin_us(gap, 15) == 0 && waits < 100) {
        gap = hd_spin_gap(gap, 2000);
        waits++;
    }
    cr_assert_geq(waits, 8, "a few short waits do not turn the spin on (%u did)", waits);
    cr_assert_lt(waits, 100, "a run of 2 us waits does");
    cr_assert_eq(hd_spin_us(hd_spin_gap(gap, 1000000000), 15), 0, "one long pause turns it off");
    cr_assert_eq(hd_spin_gap(HD_SPIN_GAP_CAP_NS, UINT64_MAX), HD_SPIN_GAP_CAP_NS, "capped");
}

/* ---------------------------------------------------------------- submissions and the min-wait */

/* Steady: input every 200 us, a min-wait of 1 ms gathers it; 16 "sends" per input (the rate
 * arms the min-wait, fewer than HD_MIN_WAIT_BATCH). Bursts: 1.5 ms apart, a min-wait of 200 us
 * gathers nothing; 24 sends each (HD_MIN_WAIT_ARM_CQES in 2 ms arm it, fewer than the batch). */
#define STREAM_PERIOD_NS (200u * 1000u)
#define STREAM_NOPS      16
#define STREAM_WARM      10 /* inputs before counting */
#define STREAM_COUNTED   60
#define BURST_PERIOD_NS  (1500u * 1000u)
#define BURST_SENDS      24
#define BURSTS_WARM      2
#define BURSTS_COUNTED   40

struct stream_ctx {
    struct hd_shard *s;
    struct hd_op poll, nops[BURST_SENDS];
    int fd;
    unsigned per_input, warm, counted;
    unsigned inputs, nops_done, nops_queued;
    uint64_t enters0, sleeps0, enters, sleeps; /* sleeps: the thread's voluntary switches */
    uint32_t features;
    bool stopping;
    bool inline_nops; /* the NOPs are taken as completing at once (hd_op_expect_inline) */
    /* late_inline: after counting, one read taken as inline that completes 1 ms later, beside a
     * guard due in 300 ms; the shard's sleep counter when each came back */
    bool late_inline;
    struct hd_op late, guard;
    int late_fd, guard_fd;
    uint64_t late_buf, guard_buf, late_sleep, guard_sleep;
    unsigned late_pending;
};

static struct stream_ctx *the_stream;

/* The late read or the guard came back: the shard's sleep counter then. */
static void late_op_done(struct hd_op *op, int32_t res, uint32_t flags)
{
    struct stream_ctx *c = the_stream;
    (void)flags;
    HDT_CHECK(res == (int32_t)sizeof(uint64_t));
    *(op == &c->late ? &c->late_sleep : &c->guard_sleep) = hd_shard_stats(c->s)->sleeps;
    if (--c->late_pending == 0)
        hdt_done(c->s);
}

/* The input stops (its timerfd disarmed; the poll stays armed and quiet); a read taken as
 * completing at once completes 1 ms later instead, beside a guard due in 300 ms. */
static void late_inline_start(struct stream_ctx *c)
{
    struct itimerspec off = {0};
    HDT_CHECK(timerfd_settime(c->fd, 0, &off, NULL) == 0);
    c->late_pending = 2;
    timerfd_read(c->s, &c->late, late_op_done, &c->late_fd, &c->late_buf, 1u * MS);
    hd_op_expect_inline(c->s);
    timerfd_read(c->s, &c->guard, late_op_done, &c->guard_fd, &c->guard_buf, 300ull * MS);
}

static void stream_nop(struct hd_op *op, int32_t res, uint32_t flags)
{
    (void)op;
    (void)flags;
    HDT_CHECK(res == 0 || res == -ECANCELED);
    the_stream->nops_done++;
}

/* Each input (the timerfd became readable: a multishot poll, woken lazily like a socket's recv)
 * queues per_input NOPs, the stand-ins for the sends a relay makes of what it read. */
static void stream_input(struct hd_op *op, int32_t res, uint32_t flags)
{
    struct stream_ctx *c = hd_container_of(op, struct stream_ctx, poll);
    (void)flags;
    if (res < 0 || c->stopping)
        return; /* cancelled at the stop */
    uint64_t expirations;
    HDT_CHECK(read(c->fd, &expirations, sizeof(expirations)) == sizeof(expirations));
    const struct hd_shard_stats *st = hd_shard_stats(c->s);
    struct rusage ru; /* the sleeps this thread really took: its voluntary context switches */
    HDT_CHECK(getrusage(RUSAGE_THREAD, &ru) == 0);
    c->inputs++;
    if (c->inputs == c->warm) {
        c->enters0 = st->enters;
        c->sleeps0 = (uint64_t)ru.ru_nvcsw;
    }
    if (c->inputs == c->warm + c->counted) {
        c->enters = st->enters - c->enters0;
        c->sleeps = (uint64_t)ru.ru_nvcsw - c->sleeps0;
        c->features = hd_shard_features(c->s);
        c->stopping = true;
        if (c->late_inline)
            late_inline_start(c);
        else
            hdt_done(c->s);
        return;
    }
    for (unsigned i = 0; i < c->per_input; i++) {
        hd_op_init(c->s, &c->nops[i], stream_nop);
        HDT_CHECK(hd_op_nop(c->s, &c->nops[i]) == 0);
        if (c->inline_nops)
            hd_op_expect_inline(c->s);
        c->nops_queued++;
    }
}

static void stream_body(struct hd_shard *s, void *arg)
{
    struct stream_ctx *c = arg;
    c->s = s;
    the_stream = c;
    hd_op_init(s, &c->poll, stream_input);
    struct io_uring_sqe *sqe = hd_op_sqe(s, &c->poll);
    HDT_CHECK(sqe != NULL);
    io_uring_prep_poll_multishot(sqe, c->fd, POLLIN);
}

/* Runs the stream; false (logged) on a kernel without the min-wait, where the plain wait ran
 * and there is nothing to judge. */
/* Runs the stream on a shard set up with o, input every period_ns. */
static void stream_go(struct stream_ctx *c, const struct hdt_options *o, uint64_t period_ns)
{
    c->fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
    cr_assert_geq(c->fd, 0);
    struct timespec p = {.tv_sec = 0, .tv_nsec = (long)period_ns};
    struct itimerspec it = {.it_interval = p, .it_value = p};
    cr_assert_eq(timerfd_settime(c->fd, 0, &it, NULL), 0);
    cr_assert_eq(hdt_run(o, stream_body, c, NULL), 0);
    close(c->fd);
    cr_assert_eq(c->nops_done, c->nops_queued, "every NOP submitted came back");
}

static bool stream_run(struct stream_ctx *c, const char *what, uint64_t period_ns,
                       uint32_t min_wait_us)
{
    const struct hdt_options ms_wait = {.shards = 1, .min_wait_us = min_wait_us};
    stream_go(c, &ms_wait, period_ns);
    if (!(c->features & HD_FEAT_MIN_WAIT)) {
        cr_log_info("kernel without IORING_FEAT_MIN_TIMEOUT: the plain wait (fallback) ran");
        return false;
    }
    cr_log_info("%s: %llu enters, %llu sleeps", what, (unsigned long long)c->enters,
                (unsigned long long)c->sleeps);
    return true;
}

/* Input every 200 us, 16 "sends" made of each, a min-wait of 1 ms: every min-wait gathers input,
 * so the sends a tick made go in with its sleep, one io_uring_enter per sleep (the submit first
 * would be two, and a peer the sends woke on this CPU would preempt us between them). */
Test(test_reactor_wait, steady_input_submits_with_the_sleep)
{
    struct stream_ctx c = {
        .per_input = STREAM_NOPS, .warm = STREAM_WARM, .counted = STREAM_COUNTED};
    if (!stream_run(&c, "steady input", STREAM_PERIOD_NS, 1000))
        return;
    cr_assert_gt(c.sleeps, 0);
    cr_assert_lt(c.enters * 2, c.sleeps * 3, "%llu enters for %llu sleeps: the submits went apart",
                 (unsigned long long)c.enters, (unsigned long long)c.sleeps);
}

/* Bursts 1.5 ms apart, 24 "sends" each (the rate arms the min-wait), a min-wait of 200 us: one
 * after the sends would gather nothing but their own completions and cost a second sleep per
 * burst; the submit goes first instead and each burst costs one sleep (or none, for a burst
 * whose input already waited in the kernel when the tick would sleep: a tick late by a
 * preemption on a busy machine; the floor says the sleeps were counted at all). */
Test(test_reactor_wait, bursts_submit_first)
{
    struct stream_ctx c = {
        .per_input = BURST_SENDS, .warm = BURSTS_WARM, .counted = BURSTS_COUNTED};
    if (!stream_run(&c, "bursts", BURST_PERIOD_NS, 200))
        return;
    cr_assert_geq(c.sleeps, BURSTS_COUNTED / 2);
    cr_assert_lt(c.sleeps * 2, (uint64_t)BURSTS_COUNTED * 3, "%llu sleeps for %u bursts",
                 (unsigned long long)c.sleeps, BURSTS_COUNTED);
}

/* The plain wait (no min-wait), input every INLINE_PERIOD_NS (its recent gap under
 * HD_INLINE_GAP_MAX_NS). */
static const struct hdt_options plain_wait = {.shards = 1, .features_disable = HD_FEAT_MIN_WAIT};
#define INLINE_PERIOD_NS (100u * 1000u)

/* The plain wait (no min-wait): input every 100 us, 16 "sends" made of each that complete at
 * once. Their submit and the sleep after it are one io_uring_enter: the sleep waits for a
 * completion beyond theirs. Before, the sends' own completions ended the wait as it began: two
 * enters per input, and a peer the sends woke on this CPU preempted the shard between them. */
Test(test_reactor_wait, inline_sends_submit_with_the_sleep)
{
    struct stream_ctx c = {.per_input = STREAM_NOPS,
                           .warm = STREAM_WARM,
                           .counted = STREAM_COUNTED,
                           .inline_nops = true};
    stream_go(&c, &plain_wait, INLINE_PERIOD_NS);
    cr_log_info("inline sends: %llu enters, %llu sleeps for %u inputs",
                (unsigned long long)c.enters, (unsigned long long)c.sleeps, STREAM_COUNTED);
    cr_assert_gt(c.sleeps, 0);
    cr_assert_lt(c.enters * 2, c.sleeps * 3, "%llu enters for %llu sleeps: the submits went apart",
                 (unsigned long long)c.enters, (unsigned long long)c.sleeps);
}

/* A submission taken as completing at once that does not (a send whose socket filled) does not
 * wake a wait that asks for one completion beyond it: the wait's bound (HD_INLINE_WAIT_US) takes
 * it, not the next completion of anything else (here a guard 300 ms later). */
Test(test_reactor_wait, inline_taken_late_is_not_held)
{
    struct stream_ctx c = {.per_input = STREAM_NOPS,
                           .warm = STREAM_WARM,
                           .counted = STREAM_COUNTED,
                           .inline_nops = true,
                           .late_inline = true};
    stream_go(&c, &plain_wait, INLINE_PERIOD_NS);
    close(c.late_fd);
    close(c.guard_fd);
    cr_assert_lt(c.late_sleep, c.guard_sleep,
                 "the late completion came back with the guard (sleep %llu): held",
                 (unsigned long long)c.late_sleep);
}

/* Where the wait asks for a completion beyond the inline ones: input no sparser than
 * HD_INLINE_GAP_MAX_NS on average, and then for at most HD_INLINE_WAIT_US. */
Test(test_reactor_wait, inline_wait_decision)
{
    cr_assert_eq(hd_inline_wait_us(0), HD_INLINE_WAIT_US, "busy");
    cr_assert_eq(hd_inline_wait_us(HD_INLINE_GAP_MAX_NS), HD_INLINE_WAIT_US, "at the limit");
    cr_assert_eq(hd_inline_wait_us(HD_INLINE_GAP_MAX_NS + 1), 0, "sparser: submit first");
    cr_assert_eq(hd_inline_wait_us(HD_SPIN_GAP_CAP_NS), 0, "idle");
    cr_assert_geq(HD_INLINE_WAIT_US * 1000ull, HD_INLINE_GAP_MAX_NS * 20ull,
                  "the bound is twenty gaps or more");
}

/* The judgement of a min-wait's gathering. Without submissions: a completion within the window
 * (a quarter late at most: the wake-up's own delay) gathered; one that came later came after the
 * window passed empty, which does not end the wait. At a client-like 5,000 packets/s (packets
 * ~200 us apart, a 100 us min-wait) the next packet comes 120-200 us into the wait: the first
 * rule (a completion within twice the min-wait) took that for gathering, and the next sends went
 * in with a min-wait that ended with only their own completions, a timer wake-up of its own per
 * packet (+39 % CPU per GB there). With submissions the wait ends at the window: input is what
 * came beyond our own completions. */
Test(test_reactor_wait, gathering_judged_by_the_window)
{
    const uint64_t us100 = 100u * 1000u;
    cr_assert(hd_min_wait_gathered(0, 1, us100 + 10000, 100), "at the window, a wake-up late");
    cr_assert(hd_min_wait_gathered(0, 3, us100 / 2, 100), "the batch ended it early");
    cr_assert_not(hd_min_wait_gathered(0, 1, us100 + 50000, 100), "came after the window");
    cr_assert_not(hd_min_wait_gathered(0, 1, us100 * 2 - 1000, 100), "within twice: still late");
    cr_assert_not(hd_min_wait_gathered(0, 0, us100, 100), "the timeout, nothing");
    cr_assert(hd_min_wait_gathered(4, 6, us100, 100), "two inputs beside four sends");
    cr_assert_not(hd_min_wait_gathered(4, 4, us100, 100), "only our own completions");
    cr_assert_not(hd_min_wait_gathered(4, 3, us100, 100), "a send went asynchronous");
}
