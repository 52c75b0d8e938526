/* runtime.c - the set of shards: allocation, start-up (global hooks, one pinned thread per
 * shard, wait until each ran its init), stop (any thread, async-signal-safe), wait (signals via
 * signalfd on the main thread) and destruction. Runs on the main thread, except hd_runtime_stop.
 * Owns the shards, the bus rings and the eventfds.
 *
 * hd_runtime_create allocates every shard struct, every bus ring (N x (N-1)) and one eventfd per
 * shard up front, so hd_runtime_stop can wake any shard from any thread, a signal handler
 * included (it only stores an atomic and writes eventfds). It also resolves the module list:
 * each requirement is placed before its first user, once however many modules need it, with arg
 * NULL (its defaults) unless the layer is also listed, in which case the listed entry's arg is
 * used; a listed module otherwise is one more instance (two relays with two configurations); a
 * cycle or more than HD_MODULES_MAX modules is -EINVAL. Instances are told apart by their place
 * in the resolved list (hd_runtime_module_index, hd_shard_instance_state; the relay keeps it in
 * srv_shard.instance and sends it in its bus messages and moves).
 *
 * hd_runtime_start runs the modules' global_init in that order, blocks SIGINT/SIGTERM/SIGHUP/
 * SIGUSR2 when handle_signals is set (the threads inherit the mask), starts one thread per shard
 * and waits until every shard ran its set-up and shard_init; only then are the shards released
 * into their loops, so every ring fd exists before any shard can send a wake-up. A shard_init
 * that fails gives the modules before it on that shard shard_fini in reverse (their state is
 * cleared: hd_shard_module_state returns NULL); the other shards stop and finish normally, and
 * start returns the error. hd_runtime_wait polls a "shard exited" eventfd and a signalfd:
 * SIGINT or SIGTERM stops the runtime (a second one exits at once), SIGHUP and SIGUSR2 go to
 * the modules' on_signal. hd_runtime_destroy frees rings, pools and bus memory after every
 * thread was joined; messages still in rings are dropped, and frames they carried go with their
 * pools' chunks. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <hd/hd_fault.h>

#include "hd_impl.h"

void *hd_shard_main(void *arg);

unsigned hd_cpus_available(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) != 0)
        return 1;
    int n = CPU_COUNT(&set);
    return n > 0 ? (unsigned)n : 1;
}

unsigned hd_runtime_shards_count(const struct hd_runtime *rt)
{
    return rt->count;
}

struct hd_shard *hd_runtime_shard(struct hd_runtime *rt, unsigned i)
{
    HD_ASSERT(i < rt->count);
    return rt->shards[i];
}

static int config_check(struct hd_runtime_config *cfg)
{
    if (cfg->shards_count == 0)
        cfg->shards_count = hd_cpus_available();
    if (cfg->shards_count > HD_SHARDS_MAX)
        return -EINVAL;
    if (cfg->sq_entries == 0)
        cfg->sq_entries = HD_SQ_ENTRIES_DEFAULT;
    if (cfg->sq_entries > HD_SQ_ENTRIES_MAX)
        return -EINVAL;
    if (cfg->busy_poll_us > HD_BUSY_POLL_US_MAX)
        return -EINVAL;
    if (cfg->min_wait_us > HD_MIN_WAIT_US_MAX || cfg->min_wait_gather > HD_MIN_WAIT_GATHER_MAX)
        return -EINVAL;
    if (cfg->stop_grace_ms == 0)
        cfg->stop_grace_ms = HD_STOP_GRACE_MS_DEFAULT;
    if (cfg->modules_count && cfg->modules == NULL)
        return -EINVAL;
    return 0;
}

/* Place module m (and first what it requires) in the resolved list. A requirement is one
 * instance however many modules need it; a listed module already placed as a requirement only
 * gives it its arg; a listed module otherwise is a new instance. depth bounds a cycle. */
static int module_place(struct hd_runtime *rt, unsigned *n, const struct hd_module *m, void *arg,
                        bool listed, unsigned depth)
{
    if (m == NULL || m->abi_version != HD_MODULE_ABI || depth > HD_MODULES_MAX)
        return -EINVAL;
    for (unsigned i = 0; i < *n; i++) {
        if (rt->mods[i] != m)
            continue;
        if (!listed)
            return 0;
        if (!rt->mods_listed[i]) {
            rt->mods_listed[i] = true;
            rt->mods_args[i] = arg;
            return 0;
        }
    }
    for (const struct hd_module *const *r = m->requires; r && *r; r++) {
        int rc = module_place(rt, n, *r, NULL, false, depth + 1);
        if (rc < 0)
            return rc;
    }
    if (*n == HD_MODULES_MAX)
        return -EINVAL;
    rt->mods[*n] = m;
    rt->mods_args[*n] = arg;
    rt->mods_listed[*n] = listed;
    (*n)++;
    return 0;
}

static int modules_resolve(struct hd_runtime *rt)
{
    struct hd_runtime_config *cfg = &rt->cfg;
    unsigned n = 0;
    for (unsigned i = 0; i < cfg->modules_count; i++) {
        void *arg = cfg->modules_args ? cfg->modules_args[i] : NULL;
        int rc = module_place(rt, &n, cfg->modules[i], arg, true, 0);
        if (rc < 0)
            return rc;
    }
    cfg->modules = rt->mods;
    cfg->modules_args = rt->mods_args;
    cfg->modules_count = n;
    return 0;
}

static struct hd_shard *shard_alloc(struct hd_runtime *rt, unsigned id)
{
    struct hd_shard *s =
        aligned_alloc(HD_CACHELINE, (sizeof(*s) + HD_CACHELINE - 1) & ~(size_t)(HD_CACHELINE - 1));
    if (s == NULL)
        return NULL;
    memset(s, 0, sizeof(*s));
    s->rt = rt;
    s->id = id;
    s->count = rt->count;
    s->ring_fd = -1;
    atomic_init(&s->sleeping, 0);
    hd_rand_seed(s);
    s->wake_fd = eventfd(0, EFD_CLOEXEC); /* blocking: io_uring polls it for us */
    if (s->wake_fd < 0) {
        free(s);
        return NULL;
    }
    hd_posts_init(s);
    return s;
}

int hd_runtime_create(const struct hd_runtime_config *config, struct hd_runtime **out)
{
    struct hd_runtime *rt = calloc(1, sizeof(*rt));
    if (rt == NULL)
        return -ENOMEM;
    rt->cfg = *config;
    int rc = config_check(&rt->cfg);
    if (rc == 0)
        rc = modules_resolve(rt);
    if (rc == 0)
        rc = hd_faults_from_env();
    if (rc < 0) {
        free(rt);
        return rc;
    }
    rt->count = rt->cfg.shards_count;
    pthread_mutex_init(&rt->lock, NULL);
    pthread_cond_init(&rt->cond, NULL);
    atomic_init(&rt->stopping, 0);
    rt->done_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    rt->shards = calloc(rt->count, sizeof(*rt->shards));
    rt->rings = calloc((size_t)rt->count * rt->count, sizeof(*rt->rings));
    if (rt->done_fd < 0 || !rt->shards || !rt->rings)
        goto fail;
    for (unsigned i = 0; i < rt->count; i++)
        if ((rt->shards[i] = shard_alloc(rt, i)) == NULL)
            goto fail;
    for (unsigned p = 0; p < rt->count; p++) {
        for (unsigned c = 0; c < rt->count; c++) {
            if (p == c)
                continue;
            struct hd_bus_ring *r = aligned_alloc(HD_CACHELINE, sizeof(*r));
            if (r == NULL)
                goto fail;
            memset(r, 0, sizeof(*r));
            rt->rings[p * rt->count + c] = r;
        }
    }
    *out = rt;
    return 0;
fail:
    hd_runtime_destroy(rt);
    return -ENOMEM;
}

static void signals_block(sigset_t *set)
{
    sigemptyset(set);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGTERM);
    sigaddset(set, SIGHUP);
    sigaddset(set, SIGUSR2);
    pthread_sigmask(SIG_BLOCK, set, NULL);
}

static int global_init(struct hd_runtime *rt, unsigned *inited)
{
    const struct hd_runtime_config *cfg = &rt->cfg;
    for (*inited = 0; *inited < cfg->modules_count; (*inited)++) {
        const struct hd_module *m = cfg->modules[*inited];
        void *arg = cfg->modules_args ? cfg->modules_args[*inited] : NULL;
        int rc = m->global_init ? m->global_init(rt, arg) : 0;
        if (rc < 0) {
            hd_log(HD_LOG_ERROR, "module %s: init failed: %s", m->name, strerror(-rc));
            return rc;
        }
    }
    return 0;
}

static void global_fini(struct hd_runtime *rt, unsigned inited)
{
    const struct hd_runtime_config *cfg = &rt->cfg;
    while (inited-- > 0) {
        void *arg = cfg->modules_args ? cfg->modules_args[inited] : NULL;
        if (cfg->modules[inited]->global_fini)
            cfg->modules[inited]->global_fini(rt, arg);
    }
}

static void join_all(struct hd_runtime *rt, unsigned started)
{
    for (unsigned i = 0; i < started; i++)
        pthread_join(rt->shards[i]->thread, NULL);
}

int hd_runtime_start(struct hd_runtime *rt)
{
    HD_ASSERT(!rt->started);
    unsigned inited = 0;
    int rc = global_init(rt, &inited);
    if (rc < 0) {
        global_fini(rt, inited);
        return rc;
    }
    if (rt->cfg.handle_signals) {
        sigset_t set;
        signals_block(&set); /* before the threads: they inherit the mask */
    }
    unsigned started = 0;
    for (; started < rt->count; started++) {
        struct hd_shard *s = rt->shards[started];
        if (pthread_create(&s->thread, NULL, hd_shard_main, s) != 0) {
            rc = -EAGAIN;
            break;
        }
    }
    pthread_mutex_lock(&rt->lock);
    while (rt->ready < started)
        pthread_cond_wait(&rt->cond, &rt->lock);
    if (rc == 0)
        rc = rt->error;
    if (rc < 0)
        atomic_store_explicit(&rt->stopping, 1, memory_order_release);
    rt->go = true;
    pthread_cond_broadcast(&rt->cond);
    pthread_mutex_unlock(&rt->lock);
    if (rc < 0) {
        join_all(rt, started);
        global_fini(rt, inited);
        rt->waited = true;
        return rc;
    }
    rt->started = true;
    hd_faults_arm(true);                  /* every shard ran its init: set-up itself runs clean */
    if ((rc = hd_watchdog_start(rt)) < 0) /* no watchdog: logged, the runtime still runs */
        hd_log(HD_LOG_WARN, "stall watchdog not started: %s", strerror(-rc));
    return 0;
}

void hd_runtime_stop(struct hd_runtime *rt)
{
    atomic_store_explicit(&rt->stopping, 1, memory_order_release);
    for (unsigned i = 0; i < rt->count; i++)
        hd_shard_wake(rt->shards[i]);
}

static void on_signal(struct hd_runtime *rt, int signo, unsigned *stops)
{
    if (signo == SIGHUP || signo == SIGUSR2) { /* the modules': reload, upgrade */
        const struct hd_runtime_config *cfg = &rt->cfg;
        for (unsigned i = 0; i < cfg->modules_count; i++) {
            void *arg = cfg->modules_args ? cfg->modules_args[i] : NULL;
            if (cfg->modules[i]->on_signal)
                cfg->modules[i]->on_signal(rt, signo, arg);
        }
        return;
    }
    if (++*stops > 1) {
        hd_log(HD_LOG_WARN, "%s again: exiting without waiting", strsignal(signo));
        _exit(1);
    }
    hd_log(HD_LOG_INFO, "%s: stopping (again to exit at once)", strsignal(signo));
    hd_runtime_stop(rt);
}

/* Poll the shards' exit counter and, if configured, the signals. */
static void wait_exits(struct hd_runtime *rt)
{
    int sfd = -1;
    if (rt->cfg.handle_signals) {
        sigset_t set;
        signals_block(&set);
        sfd = signalfd(-1, &set, SFD_CLOEXEC);
    }
    unsigned exited = 0, stops = 0;
    while (exited < rt->count) {
        struct pollfd pfd[2] = {{.fd = rt->done_fd, .events = POLLIN},
                                {.fd = sfd, .events = POLLIN}};
        if (poll(pfd, sfd >= 0 ? 2 : 1, -1) < 0)
            continue; /* EINTR */
        uint64_t n;
        if ((pfd[0].revents & POLLIN) && read(rt->done_fd, &n, sizeof(n)) == sizeof(n))
            exited += (unsigned)n;
        struct signalfd_siginfo si;
        if (sfd >= 0 && (pfd[1].revents & POLLIN) && read(sfd, &si, sizeof(si)) == sizeof(si))
            on_signal(rt, (int)si.ssi_signo, &stops);
    }
    if (sfd >= 0)
        close(sfd);
}

int hd_runtime_wait(struct hd_runtime *rt)
{
    if (!rt->started || rt->waited)
        return rt->error;
    wait_exits(rt);
    join_all(rt, rt->count);
    hd_watchdog_stop(rt);
    global_fini(rt, rt->cfg.modules_count);
    rt->waited = true;
    hd_faults_arm(false);
    hd_faults_report();
    return rt->error;
}

int hd_runtime_run(struct hd_runtime *rt)
{
    int rc = hd_runtime_start(rt);
    if (rc < 0)
        return rc;
    return hd_runtime_wait(rt);
}

static void shard_free(struct hd_shard *s)
{
    if (s->ring_fd >= 0)
        io_uring_queue_exit(&s->ring);
    hd_collects_free(s);
    hd_slabs_destroy_all(s);
    hd_frames_fini(s);
    hd_bus_fini(s);
    hd_handles_fini(s);
    free(s->module_states);
    if (s->wake_fd >= 0)
        close(s->wake_fd);
    hd_posts_deinit(s);
    free(s);
}

void hd_runtime_destroy(struct hd_runtime *rt)
{
    if (rt == NULL)
        return;
    HD_ASSERT(!rt->started || rt->waited);
    /* Every thread has been joined: messages still in rings are dropped with the rings; frames
     * they carried live in pool chunks that are freed wholesale below. */
    hd_watchdog_free(rt);
    for (unsigned i = 0; rt->shards && i < rt->count; i++)
        if (rt->shards[i])
            shard_free(rt->shards[i]);
    for (size_t i = 0; rt->rings && i < (size_t)rt->count * rt->count; i++)
        free(rt->rings[i]);
    free(rt->rings);
    free(rt->shards);
    if (rt->done_fd >= 0)
        close(rt->done_fd);
    pthread_cond_destroy(&rt->cond);
    pthread_mutex_destroy(&rt->lock);
    free(rt);
}
