/* shard.c - one shard's thread: set-up, the tick, and the stop sequence.
 *
 * The tick (docs/ARCHITECTURE.md "The tick"), in this order, each stage bounded:
 *   deferred tasks (those queued before the pass) -> bus inboxes (HD_BUS_DRAIN_BUDGET each) ->
 *   posts from other threads (what was in the inbox, <= HD_POST_INBOX_SIZE) -> finished collects
 *   -> timers due -> stop phase -> end-of-tick flushes -> frames back to their owners -> bus
 *   publish (+ wake-ups) -> one io_uring enter that submits everything and waits for a CQE until
 *   the next timer (after a bounded spin where work came lately within a sleep's cost) -> bus
 *   inboxes again if anything arrived during the wait (a message published before the I/O that
 *   caused a completion is handled before that completion) -> CQE dispatch (HD_CQE_BATCH at a
 *   time, HD_CQE_BUDGET_MAX). The clock is read at the start of the tick and again after the
 *   wait, so timers armed by completion callbacks count from then.
 *
 * The wait (docs/ARCHITECTURE.md "The wait policy"): the recent gap is a moving average
 * (1/HD_SPIN_GAP_WEIGHT) of how long waits lasted until work came, each counted up to
 * HD_SPIN_GAP_CAP_NS; a shard starts as if idle (no spin until waits were short). The min-wait
 * is not used when the next timer is due within its window (the kernel would stretch the
 * timeout to it); a sleep with no timer carries a HD_MIN_WAIT_IDLE_TS_MS timeout (without one
 * the kernel ends the wait at the window). Wake-ups from other shards (MSG_RING / eventfd CQEs)
 * count as completions, so under load they too can wait up to the window. How the tick's own
 * SQEs meet a min-wait (in the same enter while min-waits gather input, else submitted first)
 * is said at min_wait_enter; how SQEs that complete at once meet the plain wait, at plain_wait.
 * Until 2026-12-07 the window was capped at min_wait_us instead of
 * being sized to gather (it held each packet of a 56-224 Mbit/s client-like load up to 100 us,
 * +100-150 us on a ping's round trip; issue 25). The number of sleeps is the lever, not how they
 * are armed (a periodic timer armed once cost as much per wake-up). The thread's timer slack is
 * HD_TIMER_SLACK_NS, so the kernel does not end a min-wait 50 us late.
 *
 * Stop: RUNNING -> STOPPING (modules' shard_stop; apps close what they own; wait for their ops
 * up to stop_grace_ms) -> CANCELLING (one ASYNC_CANCEL_ANY|ALL per tick until nothing is in
 * flight, at most HD_STOP_CANCEL_MS) -> DONE (remaining tasks run, shard_fini hooks in reverse,
 * the thread exits). The thread owns its struct hd_shard; see runtime.c for start-up and the
 * main thread. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <sys/prctl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hd_impl.h"

static __thread struct hd_shard *current_shard;

struct hd_shard *hd_shard_current(void)
{
    return current_shard;
}

unsigned hd_shard_id(const struct hd_shard *s)
{
    return s->id;
}

unsigned hd_shard_count(const struct hd_shard *s)
{
    return s->count;
}

struct hd_runtime *hd_shard_runtime(const struct hd_shard *s)
{
    return s->rt;
}

bool hd_shard_stopping(const struct hd_shard *s)
{
    return s->phase != HD_PHASE_RUNNING ||
           atomic_load_explicit(&s->rt->stopping, memory_order_relaxed);
}

uint32_t hd_shard_features(const struct hd_shard *s)
{
    return s->features;
}

const struct hd_shard_stats *hd_shard_stats(const struct hd_shard *s)
{
    return &s->stats;
}

struct io_uring *hd_shard_ring(struct hd_shard *s)
{
    return &s->ring;
}

void *hd_shard_module_state(const struct hd_shard *s, const struct hd_module *m)
{
    const struct hd_runtime_config *cfg = &s->rt->cfg;
    for (unsigned i = 0; i < cfg->modules_count; i++)
        if (cfg->modules[i] == m)
            return s->module_states ? s->module_states[i] : NULL;
    return NULL;
}

int hd_runtime_module_index(const struct hd_runtime *rt, const struct hd_module *m, const void *arg)
{
    const struct hd_runtime_config *cfg = &rt->cfg;
    for (unsigned i = 0; i < cfg->modules_count; i++)
        if (cfg->modules[i] == m && cfg->modules_args[i] == arg)
            return (int)i;
    return -ENOENT;
}

void *hd_shard_instance_state(const struct hd_shard *s, unsigned index)
{
    if (index >= s->rt->cfg.modules_count || s->module_states == NULL)
        return NULL;
    return s->module_states[index];
}

unsigned hd_shard_slabs_count(const struct hd_shard *s)
{
    unsigned n = 0;
    for (const struct hd_slab *p = s->slabs; p; p = hd_slab_next_in_shard(p))
        n++;
    return n;
}

void hd_shard_wake(struct hd_shard *s)
{
    uint64_t one = 1;
    ssize_t w = write(s->wake_fd, &one, sizeof(one));
    (void)w; /* an eventfd write only fails on counter overflow: it is awake anyway */
}

static void wake_arm(struct hd_shard *s);

static void wake_done(struct hd_op *op, int32_t res, uint32_t flags)
{
    struct hd_shard *s = hd_container_of(op, struct hd_shard, wake_op);
    (void)flags;
    if (res > 0)
        s->stats.wakes_received++;
    if (s->phase < HD_PHASE_CANCELLING && res != -ECANCELED)
        wake_arm(s);
}

static void wake_arm(struct hd_shard *s)
{
    struct io_uring_sqe *sqe = hd_op_sqe(s, &s->wake_op);
    HD_ASSERT(sqe != NULL); /* at start-up or right after a CQE: the SQ has room */
    io_uring_prep_read(sqe, s->wake_fd, &s->wake_buf, sizeof(s->wake_buf), 0);
}

/* ---------------------------------------------------------------- stop phases */

static void cancel_all(struct hd_shard *s)
{
    struct io_uring_sqe *sqe = hd_sqe_get(s); /* NULL: the next CANCELLING tick tries again */
    if (sqe) {
        io_uring_prep_cancel64(sqe, 0, IORING_ASYNC_CANCEL_ANY | IORING_ASYNC_CANCEL_ALL);
        io_uring_sqe_set_data64(sqe, HD_TAG_IGNORE);
    }
}

static void phase_step(struct hd_shard *s)
{
    const struct hd_runtime_config *cfg = &s->rt->cfg;
    if (s->phase == HD_PHASE_RUNNING) {
        if (!atomic_load_explicit(&s->rt->stopping, memory_order_acquire))
            return;
        s->phase = HD_PHASE_STOPPING;
        s->phase_deadline_ms = s->now_ms + cfg->stop_grace_ms;
        for (unsigned i = 0; i < cfg->modules_count; i++)
            if (cfg->modules[i]->shard_stop)
                cfg->modules[i]->shard_stop(s, s->module_states[i]);
    }
    if (s->phase == HD_PHASE_STOPPING) {
        uint32_t app_ops = s->ops_inflight - s->wake_op.inflight;
        if (app_ops > 0 && s->now_ms < s->phase_deadline_ms)
            return;
        s->phase = HD_PHASE_CANCELLING;
        s->phase_deadline_ms = s->now_ms + HD_STOP_CANCEL_MS;
    }
    if (s->phase == HD_PHASE_CANCELLING) {
        if (s->ops_inflight == 0) {
            s->phase = HD_PHASE_DONE;
            return;
        }
        if (s->now_ms >= s->phase_deadline_ms) {
            hd_log(HD_LOG_ERROR, "stop: %u ops still in flight after cancel; exiting anyway",
                   s->ops_inflight);
            s->phase = HD_PHASE_DONE;
            return;
        }
        /* Every CANCELLING tick: callbacks of cancelled ops may have armed new ones. */
        cancel_all(s);
    }
}

/* ---------------------------------------------------------------- the tick */

static bool work_pending(const struct hd_shard *s)
{
    return s->tasks_head != s->tasks_tail || s->flush_head != NULL || hd_bus_self_pending(s);
}

static bool backlog_pending(const struct hd_shard *s)
{
    return s->bus_dirty || s->collects || s->frames_back_dirty;
}

static uint64_t wait_ms_for(struct hd_shard *s)
{
    if (work_pending(s))
        return 0;
    uint64_t wait = hd_wheel_next_ms(&s->wheel, s->now_ms);
    /* Our own unpublished bus messages or answers we wait for: look again soon. */
    if (backlog_pending(s) && wait > 1)
        wait = 1;
    if (s->phase != HD_PHASE_RUNNING && wait > 10)
        wait = 10;
    if (wait > HD_SLAB_TRIM_MS) { /* wake to give chunks back */
        if (s->now_ms - s->trim_checked_ms >= HD_SLAB_TRIM_CHECK_MS) {
            s->trim_checked_ms = s->now_ms;
            s->trim_wanted = hd_slabs_trim_wanted(s);
        }
        if (s->trim_wanted)
            wait = HD_SLAB_TRIM_MS;
    }
    return wait;
}

/* Completions wait in the kernel's task work (DEFER_TASKRUN posts them only when asked; the ring's
 * TASKRUN_FLAG makes the kernel say so in the SQ flags, ring.c). */
static bool input_pending(const struct hd_shard *s)
{
    return (IO_URING_READ_ONCE(*s->ring.sq.kflags) & IORING_SQ_TASKRUN) != 0;
}

/* Submit what the tick queued, then spin on the CQ, the kernel's pending completions and the
 * inboxes for up to us; true if something arrived (the tick then takes it without sleeping). */
static bool spin(struct hd_shard *s, uint32_t us)
{
    uint64_t end = hd_clock_ns() + (uint64_t)us * 1000u;
    hd_ring_submit(s);
    s->stats.spins++;
    for (;;) {
        if (input_pending(s)) {
            io_uring_get_events(&s->ring);
            s->stats.enters++;
        }
        if (io_uring_cq_ready(&s->ring) || hd_bus_pending(s) || hd_posts_pending(s)) {
            s->stats.spins_won++;
            return true;
        }
        if (hd_clock_ns() >= end)
            return false;
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause(); /* a spinning hyperthread yields its core's pipeline */
#endif
    }
}

uint32_t hd_spin_us(uint64_t gap_ns, uint32_t sleep_cost_us)
{
    /* Work that comes within a sleep's cost is cheaper to wait for awake, and goes out sooner;
     * a spin that outlasts the sleep's cost ends (ski rental: at most twice the sleep). */
    return gap_ns <= (uint64_t)sleep_cost_us * 1000u ? sleep_cost_us : 0;
}

uint32_t hd_inline_wait_us(uint64_t gap_ns)
{
    return gap_ns <= HD_INLINE_GAP_MAX_NS ? HD_INLINE_WAIT_US : 0;
}

uint64_t hd_spin_gap(uint64_t gap_ns, uint64_t waited_ns)
{
    if (waited_ns > HD_SPIN_GAP_CAP_NS)
        waited_ns = HD_SPIN_GAP_CAP_NS;
    return gap_ns - gap_ns / HD_SPIN_GAP_WEIGHT + waited_ns / HD_SPIN_GAP_WEIGHT;
}

/* The load estimate: CQEs dispatched in this millisecond and the previous one. */
static void rate_roll(struct hd_shard *s)
{
    if (s->now_ms == s->rate_ms)
        return;
    s->rate_prev = s->now_ms == s->rate_ms + 1 ? s->rate_cur : 0;
    s->rate_cur = 0;
    s->rate_ms = s->now_ms;
}

uint32_t hd_min_wait_us(uint32_t cqes_2ms, uint32_t cap_us, uint32_t gather)
{
    if (cqes_2ms < HD_MIN_WAIT_ARM_CQES || cap_us == 0)
        return 0;
    if (gather == 0)
        return cap_us;
    uint64_t us = (uint64_t)gather * 2000u / cqes_2ms; /* gather completions at that rate */
    /* Under the floor the shard finds its completions awake; over the cap a window would hold
     * a packet or two for its length and gather nothing more: one sleep each, sent at once. */
    if (us < HD_MIN_WAIT_US_FLOOR || us > cap_us)
        return 0;
    return (uint32_t)us;
}

bool hd_min_wait_gathered(unsigned submitted, unsigned ready, uint64_t waited_ns, uint32_t us)
{
    if (submitted > 0) /* the wait ended at the window: input is what is beyond our own */
        return ready > submitted;
    /* Without submissions a window that passed empty does not end the wait: the first
     * completion after it does, so one that came late came after the window. */
    return ready > 0 && waited_ns <= (uint64_t)us * 1250u;
}

/* The min-wait is worth its latency only under load: HD_MIN_WAIT_ARM_CQES completions in two
 * milliseconds (a lone ping's four CQEs never arm it), and only when the wait it bounds ends
 * after it (a timer due sooner is not held back). Returns the min-wait for this sleep, 0: none. */
static uint32_t min_wait_wanted(struct hd_shard *s, uint64_t wait_ms)
{
    if (!(s->features & HD_FEAT_MIN_WAIT))
        return 0;
    rate_roll(s);
    const struct hd_runtime_config *cfg = &s->rt->cfg;
    uint32_t us =
        hd_min_wait_us(s->rate_cur + s->rate_prev, cfg->min_wait_us, cfg->min_wait_gather);
    if (us == 0 || (wait_ms != UINT64_MAX && wait_ms * 1000u <= us))
        return 0;
    return us;
}

/* Sleep until HD_MIN_WAIT_BATCH completions, or us passed with at least one, or the
 * timeout; once the min-wait passed empty, the first completion wakes (kernel >= 6.12,
 * DEFER_TASKRUN ring).
 *
 * Queued SQEs go in by one of two ways. While min-waits gather input, the same io_uring_enter
 * submits them and sleeps: the completions the submit posts inline (a sendmsg on loopback) are
 * in the CQ when the wait starts, the kernel ends the wait when the min-wait passes (any
 * completion ready ends it then), and the peers the sends woke on this CPU run while we sleep
 * instead of preempting us on the way out of a submit-only enter. Otherwise (input sparser than
 * the min-wait, or bursts with quiet gaps) the submit goes first without waiting: a min-wait that
 * gathers nothing but our own completions is a timer wake-up of its own, where a min-wait without
 * them passes empty without waking us (perf/RESULTS.md, 2026-12-06).
 *
 * Gathering, judged after each min-wait: with our submissions, more completions than we
 * submitted (input came within the window, which ends at the min-wait); without, a completion
 * within the min-wait and a quarter (one that came later came after the window passed empty,
 * and woke us at once). A min-wait with submissions that gathered nothing ended where the kernel
 * would have gone on waiting for the first completion: the next sleep does that instead of a
 * new min-wait (min_wait_ended_empty, enter). */
static void min_wait_enter(struct hd_shard *s, uint64_t wait_ms, unsigned queued, uint32_t us)
{
    unsigned submit = 0;
    s->stats.sqes += queued;
    if (queued > 0 && s->min_wait_gathers) {
        submit = hd_ring_sq_publish(&s->ring);
    } else if (queued > 0) {
        io_uring_submit_and_get_events(&s->ring);
        s->stats.enters++;
        if (io_uring_cq_ready(&s->ring))
            return;
    }
    if (wait_ms == UINT64_MAX)
        wait_ms = HD_MIN_WAIT_IDLE_TS_MS;
    struct __kernel_timespec ts = {.tv_sec = (long long)(wait_ms / 1000),
                                   .tv_nsec = (long long)(wait_ms % 1000) * 1000000};
    struct hd_getevents_arg arg = {.min_wait_usec = us, .ts = (uint64_t)(uintptr_t)&ts};
    s->stats.sleeps++;
    s->stats.min_waits++;
    uint64_t t0 = hd_clock_ns();
    /* -ETIME (the timeout) and -EINTR are ordinary ends of a wait: the tick goes on either way;
     * SQEs the kernel did not take stay in the SQ for the next enter. */
    (void)io_uring_enter2((unsigned)s->ring_fd, submit, HD_MIN_WAIT_BATCH,
                          IORING_ENTER_GETEVENTS | IORING_ENTER_EXT_ARG, (sigset_t *)(void *)&arg,
                          sizeof(arg));
    s->min_wait_gathers =
        hd_min_wait_gathered(submit, io_uring_cq_ready(&s->ring), hd_clock_ns() - t0, us);
    s->min_wait_ended_empty = submit > 0 && !s->min_wait_gathers;
}

/* The plain sleep: submit what the tick queued and wait for a completion until the next timer.
 * Completions the submit posts at once (inline: SQEs taken with hd_op_expect_inline, such as
 * sends to sockets with room) would end that wait before it began: the enter would return, and a
 * peer the sends woke on this CPU (a TCP receiver on loopback is woken here, the waker being
 * expected to sleep) would preempt the shard on its way out, a second switch and a second enter
 * per tick. So where input comes often enough, the wait asks for one completion beyond the
 * inline ones, one enter per tick; it ends at HD_INLINE_WAIT_US at the latest, so a send that
 * went asynchronous after all (its socket filled), whose completion alone does not wake such a
 * wait, is not held longer than that (perf/RESULTS.md, 2026-12-07). */
static void plain_wait(struct hd_shard *s, uint64_t wait_ms, unsigned inline_sqes)
{
    struct io_uring_cqe *cqe;
    uint64_t ns = wait_ms == UINT64_MAX ? UINT64_MAX : wait_ms * 1000000u;
    unsigned nr = 1;
    uint32_t us = inline_sqes > 0 ? hd_inline_wait_us(s->gap_ns) : 0;
    if (us > 0) {
        nr += inline_sqes;
        if ((uint64_t)us * 1000u < ns)
            ns = (uint64_t)us * 1000u;
        s->stats.inline_waits++;
    }
    struct __kernel_timespec ts = {.tv_sec = (long long)(ns / 1000000000u),
                                   .tv_nsec = (long long)(ns % 1000000000u)};
    s->stats.sleeps++;
    io_uring_submit_and_wait_timeout(&s->ring, &cqe, nr, ns == UINT64_MAX ? NULL : &ts, NULL);
}

static void enter(struct hd_shard *s, uint64_t wait_ms)
{
    unsigned queued = io_uring_sq_ready(&s->ring);
    unsigned inline_sqes = s->sq_inline;
    HD_ASSERT(inline_sqes <= queued);
    s->sq_inline = 0; /* every way below submits the SQ */
    s->stats.enters++;
    if (wait_ms == 0) {
        io_uring_submit_and_get_events(&s->ring);
        s->stats.sqes += queued;
        return;
    }
    /* Announce sleep, then look at the inboxes once more (the fence pairs with the producers'
     * fence after publishing): a message published before we announced is seen here. */
    atomic_store_explicit(&s->sleeping, 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_seq_cst);
    if (hd_bus_pending(s) || hd_posts_pending(s) ||
        (atomic_load_explicit(&s->rt->stopping, memory_order_relaxed) &&
         s->phase == HD_PHASE_RUNNING)) {
        atomic_store_explicit(&s->sleeping, 0, memory_order_relaxed);
        io_uring_submit_and_get_events(&s->ring);
        s->stats.sqes += queued;
        return;
    }
    uint32_t min_wait = min_wait_wanted(s, wait_ms);
    /* The last window passed empty: the first completion wakes. Input already waiting in the
     * kernel is not held for a window either: the plain wait takes it at once. */
    if (s->min_wait_ended_empty || (min_wait > 0 && input_pending(s)))
        min_wait = 0;
    s->min_wait_ended_empty = false;
    if (min_wait > 0) {
        min_wait_enter(s, wait_ms, queued, min_wait);
    } else {
        plain_wait(s, wait_ms, inline_sqes);
        s->stats.sqes += queued;
    }
    atomic_store_explicit(&s->sleeping, 0, memory_order_relaxed);
}

static void tick(struct hd_shard *s)
{
    uint64_t t0 = hd_clock_ns();
    s->now_ms = t0 / 1000000u;
    s->stats.ticks++;
    atomic_store_explicit(&s->beat, s->stats.ticks, memory_order_relaxed);
    hd_tasks_run(s);
    hd_bus_drain(s, HD_BUS_DRAIN_BUDGET);
    hd_posts_drain(s);
    hd_collects_poll(s);
    hd_wheel_expire(s, s->now_ms);
    hd_busy_tick(s);
    if (s->now_ms - s->trim_ms >= HD_SLAB_TRIM_MS) { /* pools shrink after a burst */
        s->trim_ms = s->now_ms;
        hd_slabs_trim(s);
    }
    phase_step(s);
    hd_flushes_run(s);
    hd_frames_flush_back(s);
    hd_bus_publish(s);
    if (s->phase == HD_PHASE_DONE) {
        s->sq_inline = 0;
        io_uring_submit_and_get_events(&s->ring);
        return;
    }
    uint64_t wait = wait_ms_for(s);
    /* The loop histograms sample one tick in HD_TICK_SAMPLE: two clock reads and two records
     * per tick were a tenth of an idle round trip (perf/RESULTS.md). */
    bool sample = (s->stats.ticks & (HD_TICK_SAMPLE - 1)) == 0;
    uint64_t t1 = sample ? hd_clock_ns() : 0;
    bool ready = io_uring_cq_ready(&s->ring) > 0;
    uint64_t tw = 0;
    bool woke = false;
    if (!ready && wait > 0) {
        /* The spin: work that came lately within a sleep's cost is awaited awake. */
        tw = hd_clock_ns();
        uint32_t us = hd_spin_us(s->gap_ns, HD_SLEEP_COST_US);
        if (us < s->rt->cfg.busy_poll_us)
            us = s->rt->cfg.busy_poll_us;
        woke = us > 0 && spin(s, us);
    }
    if (!woke || io_uring_sq_ready(&s->ring) > 0) /* the spin submitted: no enter left to do */
        enter(s, ready || woke ? 0 : wait);
    /* The clock again after the wait: timers armed by the completions below count from now,
     * not from before a sleep (or a long tick) that may have lasted a while. */
    uint64_t t2 = hd_clock_ns();
    if (tw)
        s->gap_ns = hd_spin_gap(s->gap_ns, t2 - tw);
    s->now_ms = t2 / 1000000u;
    /* The wait is over: the dispatch below is new work (the watchdog times it from here). */
    atomic_store_explicit(&s->beat, s->stats.ticks | (UINT64_C(1) << 63), memory_order_relaxed);
    /* Bus messages that arrived during the wait go before its completions, cause before effect:
     * a message another shard published before the I/O that caused a completion here (it sent
     * bytes whose answer arrives on a connection here) is handled first, so the completion never
     * acts on state the message retires (a route to a connection that moved or closed). */
    if (hd_bus_pending(s))
        hd_bus_drain(s, HD_BUS_DRAIN_BUDGET);
    unsigned cqes = hd_ops_dispatch(s, HD_CQE_BUDGET_MAX);
    rate_roll(s);
    s->rate_cur += cqes;
    if (sample) {
        hd_hist_record(&s->stats.tick_ns, (t1 - t0) + (hd_clock_ns() - t2));
        hd_hist_record(&s->stats.cqes_per_tick, cqes);
    }
}

/* ---------------------------------------------------------------- thread */

static void pin(struct hd_shard *s)
{
    cpu_set_t allowed, one;
    if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0)
        return;
    int n = CPU_COUNT(&allowed);
    if (n <= 0)
        return;
    int want = (int)(s->id % (unsigned)n), seen = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (!CPU_ISSET(cpu, &allowed))
            continue;
        if (seen++ == want) {
            CPU_ZERO(&one);
            CPU_SET(cpu, &one);
            pthread_setaffinity_np(pthread_self(), sizeof(one), &one);
            return;
        }
    }
}

static int shard_setup(struct hd_shard *s)
{
    const struct hd_runtime_config *cfg = &s->rt->cfg;
    uint32_t disable = cfg->features_disable | (cfg->min_wait_us == 0 ? HD_FEAT_MIN_WAIT : 0);
    int rc = hd_ring_setup(s, cfg->sq_entries, disable);
    if (rc < 0) {
        hd_log(HD_LOG_ERROR, "io_uring set-up failed: %s", strerror(-rc));
        return rc;
    }
    s->now_ms = hd_clock_ms();
    s->trim_ms = s->now_ms;
    s->gap_ns = HD_SPIN_GAP_CAP_NS; /* no spin until waits were short */
    hd_wheel_init(&s->wheel, s->now_ms);
    hd_hist_init(&s->stats.tick_ns);
    hd_hist_init(&s->stats.cqes_per_tick);
    if ((rc = hd_bus_init(s)) < 0 || (rc = hd_frames_init(s)) < 0)
        return rc;
    s->module_states = calloc(cfg->modules_count ? cfg->modules_count : 1, sizeof(void *));
    if (s->module_states == NULL)
        return -ENOMEM;
    hd_op_init(s, &s->wake_op, wake_done);
    wake_arm(s);
    return 0;
}

/* Module shard_init hooks in order; on a failure the ones that succeeded get shard_fini. */
static int modules_init(struct hd_shard *s, unsigned *inited)
{
    const struct hd_runtime_config *cfg = &s->rt->cfg;
    for (*inited = 0; *inited < cfg->modules_count; (*inited)++) {
        const struct hd_module *m = cfg->modules[*inited];
        if (!m->shard_init)
            continue;
        void *arg = cfg->modules_args ? cfg->modules_args[*inited] : NULL;
        int rc = m->shard_init(s, arg, &s->module_states[*inited]);
        if (rc < 0) {
            hd_log(HD_LOG_ERROR, "module %s: shard init failed: %s", m->name, strerror(-rc));
            return rc;
        }
    }
    return 0;
}

static void modules_fini(struct hd_shard *s, unsigned inited)
{
    const struct hd_runtime_config *cfg = &s->rt->cfg;
    while (inited-- > 0) {
        if (cfg->modules[inited]->shard_fini)
            cfg->modules[inited]->shard_fini(s, s->module_states[inited]);
        s->module_states[inited] = NULL; /* hd_shard_module_state: gone */
    }
}

void *hd_shard_main(void *arg);
void *hd_shard_main(void *arg)
{
    struct hd_shard *s = arg;
    struct hd_runtime *rt = s->rt;
    current_shard = s;
    char name[16];
    snprintf(name, sizeof(name), "hd-shard-%u", s->id);
    pthread_setname_np(pthread_self(), name);
    (void)prctl(PR_SET_TIMERSLACK, HD_TIMER_SLACK_NS, 0, 0, 0); /* best effort: a coarser wait */
    if (rt->cfg.pin)
        pin(s);
    unsigned inited = 0;
    int rc = shard_setup(s);
    if (rc == 0)
        rc = modules_init(s, &inited);
    pthread_mutex_lock(&rt->lock);
    s->error = rc;
    if (rc < 0 && rt->error == 0)
        rt->error = rc;
    rt->ready++;
    pthread_cond_broadcast(&rt->cond);
    while (!rt->go)
        pthread_cond_wait(&rt->cond, &rt->lock);
    pthread_mutex_unlock(&rt->lock);
    if (rc == 0) {
        while (s->phase != HD_PHASE_DONE)
            tick(s);
        /* Tasks deferred by the last callbacks still run (bounded: tasks may defer tasks). */
        for (unsigned pass = 0; pass < 64 && work_pending(s); pass++) {
            hd_tasks_run(s);
            hd_bus_drain_self(s, HD_BUS_DRAIN_BUDGET);
            hd_flushes_run(s);
        }
    }
    /* Posts accepted so far run once, here, while the modules' state still exists. */
    hd_posts_close(s);
    modules_fini(s, inited);
    pthread_mutex_lock(&rt->lock);
    rt->exited++;
    pthread_mutex_unlock(&rt->lock);
    uint64_t one = 1;
    ssize_t w = write(rt->done_fd, &one, sizeof(one));
    (void)w;
    current_shard = NULL;
    return NULL;
}
