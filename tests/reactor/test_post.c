/* test_post.c - hd_runtime_post and shared snapshots on real shards driven from the test's own
 * (non-shard) thread: posts run on the shard they were sent to, in order, waking idle shards;
 * a full inbox returns -EAGAIN exactly at HD_POST_INBOX_SIZE; bad shard and exited shard; a
 * snapshot published to every shard is swapped in everywhere and the old one is freed exactly
 * once, after the last shard let go, while shards keep reading the current one on a timer.
 *
 * ThreadSanitizer: as test_bus.c, a TSan build runs the same cases from its own main(). */
#include <errno.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "harness.h"

#if defined(__SANITIZE_THREAD__)
#define POST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define POST_TSAN 1
#endif
#endif

#ifdef POST_TSAN
#define POST_TEST(name)   static void name(void)
#define EXPECT(cond, ...) HDT_CHECK(cond)
#define PUBLISHES         200u
#else
#include <criterion/criterion.h>
#define POST_TEST(name)   Test(test_reactor_post, name)
#define EXPECT(cond, ...) cr_assert(cond, __VA_ARGS__)
#define PUBLISHES         2000u
#endif

#define SHARDS      3u
#define POSTS_EACH  500u
#define WAIT_MS_MAX 10000u /* hang guard for every bounded wait below */
#define READ_MAGIC  0x5eed5eedu

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {.tv_sec = ms / 1000u, .tv_nsec = (long)(ms % 1000u) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Polls pred() every millisecond, up to WAIT_MS_MAX. */
static bool wait_for(bool (*pred)(void))
{
    for (unsigned ms = 0; ms < WAIT_MS_MAX; ms++) {
        if (pred())
            return true;
        sleep_ms(1);
    }
    return pred();
}

/* A runtime with an optional module, started on this (non-shard) thread. */
static struct hd_runtime *start(const struct hd_module *m)
{
    static const struct hd_module *mods[1];
    mods[0] = m;
    struct hd_runtime_config cfg = {
        .shards_count = SHARDS,
        .modules = mods,
        .modules_count = m ? 1 : 0,
    };
    struct hd_runtime *rt = NULL;
    HDT_CHECK(hd_runtime_create(&cfg, &rt) == 0);
    HDT_CHECK(hd_runtime_start(rt) == 0);
    return rt;
}

static void finish(struct hd_runtime *rt)
{
    hd_runtime_stop(rt);
    HDT_CHECK(hd_runtime_wait(rt) == 0);
    hd_runtime_destroy(rt);
}

/* ---------------------------------------------------------------- posts reach their shard */

static _Atomic unsigned received[SHARDS];
static _Atomic unsigned misrouted;
static unsigned next_seq[SHARDS]; /* touched by shard i only */

static void record(struct hd_shard *s, void *arg)
{
    uintptr_t v = (uintptr_t)arg;
    unsigned want = (unsigned)(v % SHARDS), seq = (unsigned)(v / SHARDS);
    unsigned id = hd_shard_id(s);
    if (id != want || hd_shard_current() != s || seq != next_seq[id])
        atomic_fetch_add(&misrouted, 1);
    next_seq[id] = seq + 1;
    atomic_fetch_add(&received[id], 1);
}

static bool all_received(void)
{
    for (unsigned i = 0; i < SHARDS; i++)
        if (atomic_load(&received[i]) != POSTS_EACH)
            return false;
    return true;
}

POST_TEST(posts_reach_their_shard_in_order)
{
    memset(next_seq, 0, sizeof(next_seq));
    for (unsigned i = 0; i < SHARDS; i++)
        atomic_store(&received[i], 0);
    atomic_store(&misrouted, 0);
    struct hd_runtime *rt = start(NULL);
    unsigned eagain = 0;
    for (unsigned seq = 0; seq < POSTS_EACH; seq++) {
        for (unsigned i = 0; i < SHARDS; i++) {
            void *arg = (void *)(uintptr_t)(seq * SHARDS + i);
            int rc;
            /* Shards are idle and asleep between bursts: each post must wake its shard. */
            while ((rc = hd_runtime_post(rt, i, record, arg)) == -EAGAIN && eagain < 100000) {
                eagain++;
                sleep_ms(1);
            }
            EXPECT(rc == 0, "post to shard %u: %d", i, rc);
        }
        if (seq % 100 == 99)
            sleep_ms(5); /* let them fall asleep again */
    }
    EXPECT(wait_for(all_received), "posts lost: %u %u %u", atomic_load(&received[0]),
           atomic_load(&received[1]), atomic_load(&received[2]));
    EXPECT(atomic_load(&misrouted) == 0, "%u posts on the wrong shard or out of order",
           atomic_load(&misrouted));
    EXPECT(hd_runtime_post(rt, SHARDS, record, NULL) == -EINVAL, "shard out of range accepted");
    finish(rt);
}

/* ---------------------------------------------------------------- a full inbox */

static _Atomic int blocker_state; /* 1: running on the shard, 2: released by the test */
static _Atomic unsigned filler_runs;

static void blocker(struct hd_shard *s, void *arg)
{
    (void)s;
    (void)arg;
    atomic_store(&blocker_state, 1);
    for (unsigned ms = 0; ms < WAIT_MS_MAX && atomic_load(&blocker_state) != 2; ms++)
        sleep_ms(1);
}

static void filler(struct hd_shard *s, void *arg)
{
    (void)s;
    (void)arg;
    atomic_fetch_add(&filler_runs, 1);
}

static bool blocker_running(void)
{
    return atomic_load(&blocker_state) == 1;
}

static bool fillers_ran(void)
{
    return atomic_load(&filler_runs) == HD_POST_INBOX_SIZE + 1;
}

POST_TEST(full_inbox_is_eagain_exactly)
{
    atomic_store(&blocker_state, 0);
    atomic_store(&filler_runs, 0);
    struct hd_runtime *rt = start(NULL);
    EXPECT(hd_runtime_post(rt, 1, blocker, NULL) == 0, "blocker refused");
    EXPECT(wait_for(blocker_running), "blocker never ran");
    /* Shard 1 is inside a post and drains nothing: the inbox takes exactly its size. */
    for (unsigned i = 0; i < HD_POST_INBOX_SIZE; i++)
        EXPECT(hd_runtime_post(rt, 1, filler, NULL) == 0, "post %u refused early", i);
    EXPECT(hd_runtime_post(rt, 1, filler, NULL) == -EAGAIN, "a full inbox accepted a post");
    EXPECT(hd_runtime_post(rt, 0, filler, NULL) == 0, "another shard's inbox is not full");
    atomic_store(&blocker_state, 2);
    EXPECT(wait_for(fillers_ran), "fillers lost: %u", atomic_load(&filler_runs));
    finish(rt);
}

static _Atomic unsigned late_runs;

static void late(struct hd_shard *s, void *arg)
{
    (void)s;
    (void)arg;
    atomic_fetch_add(&late_runs, 1);
}

POST_TEST(posts_accepted_before_exit_run_once_then_eshutdown)
{
    atomic_store(&late_runs, 0);
    atomic_store(&blocker_state, 0);
    struct hd_runtime *rt = start(NULL);
    EXPECT(hd_runtime_post(rt, 0, blocker, NULL) == 0, "blocker refused");
    EXPECT(wait_for(blocker_running), "blocker never ran");
    EXPECT(hd_runtime_post(rt, 0, late, NULL) == 0, "late post refused");
    hd_runtime_stop(rt);
    atomic_store(&blocker_state, 2);
    EXPECT(hd_runtime_wait(rt) == 0, "wait failed");
    EXPECT(atomic_load(&late_runs) == 1, "a post accepted before exit ran %u times",
           atomic_load(&late_runs));
    EXPECT(hd_runtime_post(rt, 0, late, NULL) == -ESHUTDOWN, "exited shard accepted a post");
    hd_runtime_destroy(rt);
}

/* ---------------------------------------------------------------- snapshots */

struct cfg {
    struct hd_snap snap;
    unsigned version;
    uint32_t magic; /* cleared by cfg_free: a reader of a freed snapshot sees it (or ASan does) */
};

#define CFG_MAX (PUBLISHES + 1u)
static _Atomic unsigned freed[CFG_MAX];
static _Atomic unsigned frees_total;
static _Atomic unsigned bad_reads;
static _Atomic unsigned reads;
static struct hd_snap_var *var;

static void cfg_free(struct hd_snap *sn)
{
    struct cfg *c = (struct cfg *)sn;
    atomic_fetch_add(&freed[c->version], 1);
    atomic_fetch_add(&frees_total, 1);
    c->magic = 0;
    free(c);
}

static struct cfg *cfg_new(unsigned version)
{
    struct cfg *c = calloc(1, sizeof(*c));
    HDT_CHECK(c != NULL);
    hd_snap_init(&c->snap, cfg_free);
    c->version = version;
    c->magic = READ_MAGIC;
    return c;
}

/* A module whose shards read the current snapshot every millisecond. */
struct reader {
    struct hd_timer t;
    struct hd_shard *s;
    unsigned last_version;
};

static void reader_fire(struct hd_timer *t)
{
    struct reader *r = hd_container_of(t, struct reader, t);
    const struct cfg *c = (const struct cfg *)hd_snap_var_get(var, r->s);
    if (c == NULL || c->magic != READ_MAGIC || c->version < r->last_version)
        atomic_fetch_add(&bad_reads, 1);
    else
        r->last_version = c->version;
    atomic_fetch_add(&reads, 1);
    hd_timer_start(r->s, t, 1);
}

static int reader_init(struct hd_shard *s, void *arg, void **state)
{
    (void)arg;
    struct reader *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return -ENOMEM;
    r->s = s;
    hd_timer_init(&r->t, reader_fire);
    hd_timer_start(s, &r->t, 1);
    *state = r;
    return 0;
}

static void reader_stop(struct hd_shard *s, void *state)
{
    struct reader *r = state;
    hd_timer_stop(s, &r->t);
}

static void reader_fini(struct hd_shard *s, void *state)
{
    (void)s;
    free(state);
}

static const struct hd_module reader_module = {
    .abi_version = HD_MODULE_ABI,
    .name = "reader",
    .shard_init = reader_init,
    .shard_stop = reader_stop,
    .shard_fini = reader_fini,
};

static _Atomic unsigned saw_version[SHARDS];

static void look(struct hd_shard *s, void *arg)
{
    (void)arg;
    const struct cfg *c = (const struct cfg *)hd_snap_var_get(var, s);
    atomic_store(&saw_version[hd_shard_id(s)], c ? c->version : 0u);
}

#define NOT_LOOKED UINT32_MAX /* saw_version before a shard's look ran */

/* Version 0 is freed once every shard swapped it out, which may come before the looks posted
 * to them ran: wait for both (the test read saw_version too early: 1 run in 7 failed). */
static bool first_freed_and_looked(void)
{
    for (unsigned i = 0; i < SHARDS; i++)
        if (atomic_load(&saw_version[i]) == NOT_LOOKED)
            return false;
    return atomic_load(&freed[0]) >= 1;
}

static bool all_but_last_freed(void)
{
    return atomic_load(&frees_total) >= PUBLISHES;
}

static void snap_reset(void)
{
    for (unsigned i = 0; i < CFG_MAX; i++)
        atomic_store(&freed[i], 0);
    atomic_store(&frees_total, 0);
    atomic_store(&bad_reads, 0);
    atomic_store(&reads, 0);
    for (unsigned i = 0; i < SHARDS; i++)
        atomic_store(&saw_version[i], NOT_LOOKED);
}

POST_TEST(snapshot_swapped_everywhere_and_freed_once)
{
    snap_reset();
    struct hd_runtime *rt = NULL;
    struct hd_runtime_config cfg = {.shards_count = SHARDS};
    static const struct hd_module *mods[] = {&reader_module};
    cfg.modules = mods;
    cfg.modules_count = 1;
    EXPECT(hd_runtime_create(&cfg, &rt) == 0, "create");
    EXPECT(hd_snap_var_create(rt, &cfg_new(0)->snap, &var) == 0, "var");
    EXPECT(hd_runtime_start(rt) == 0, "start");

    /* One publish: every shard swaps in version 1, then version 0 is freed exactly once. */
    EXPECT(hd_snap_var_publish(var, &cfg_new(1)->snap) == 0, "publish");
    for (unsigned i = 0; i < SHARDS; i++)
        EXPECT(hd_runtime_post(rt, i, look, NULL) == 0, "look");
    EXPECT(wait_for(first_freed_and_looked), "version 0 never freed, or a shard never looked");
    for (unsigned i = 0; i < SHARDS; i++)
        EXPECT(atomic_load(&saw_version[i]) == 1, "shard %u sees version %u", i,
               atomic_load(&saw_version[i]));
    EXPECT(atomic_load(&freed[1]) == 0, "the current snapshot was freed");

    /* Many publishes while the shards read: each old one freed once, the current one never. */
    for (unsigned v = 2; v <= PUBLISHES; v++)
        EXPECT(hd_snap_var_publish(var, &cfg_new(v)->snap) == 0, "publish %u", v);
    EXPECT(wait_for(all_but_last_freed), "only %u of %u old snapshots freed",
           atomic_load(&frees_total), PUBLISHES);
    for (unsigned v = 0; v < PUBLISHES; v++)
        EXPECT(atomic_load(&freed[v]) == 1, "version %u freed %u times", v, atomic_load(&freed[v]));
    EXPECT(atomic_load(&freed[PUBLISHES]) == 0, "the current snapshot was freed");
    EXPECT(atomic_load(&bad_reads) == 0, "%u reads saw a freed or older snapshot",
           atomic_load(&bad_reads));

    hd_runtime_stop(rt);
    EXPECT(hd_runtime_wait(rt) == 0, "wait");
    EXPECT(atomic_load(&reads) > 0, "the shards never read");
    hd_snap_var_destroy(var);
    var = NULL;
    EXPECT(atomic_load(&freed[PUBLISHES]) == 1, "last snapshot freed %u times at destroy",
           atomic_load(&freed[PUBLISHES]));
    EXPECT(atomic_load(&frees_total) == PUBLISHES + 1, "%u frees", atomic_load(&frees_total));
    hd_runtime_destroy(rt);
}

POST_TEST(publish_after_exit_keeps_nothing)
{
    snap_reset();
    struct hd_runtime *rt = start(NULL);
    EXPECT(hd_snap_var_create(rt, NULL, &var) == 0, "var");
    hd_runtime_stop(rt);
    EXPECT(hd_runtime_wait(rt) == 0, "wait");
    EXPECT(hd_snap_var_publish(var, &cfg_new(7)->snap) == -ESHUTDOWN, "publish to exited shards");
    EXPECT(atomic_load(&freed[7]) == 1, "refused snapshot freed %u times", atomic_load(&freed[7]));
    hd_snap_var_destroy(var);
    var = NULL;
    EXPECT(atomic_load(&frees_total) == 1, "%u frees", atomic_load(&frees_total));
    hd_runtime_destroy(rt);
}

#ifdef POST_TSAN
int main(void)
{
    static const struct {
        const char *name;
        void (*fn)(void);
    } cases[] = {
        {"posts_reach_their_shard_in_order", posts_reach_their_shard_in_order},
        {"full_inbox_is_eagain_exactly", full_inbox_is_eagain_exactly},
        {"posts_accepted_before_exit_run_once_then_eshutdown",
         posts_accepted_before_exit_run_once_then_eshutdown},
        {"snapshot_swapped_everywhere_and_freed_once", snapshot_swapped_everywhere_and_freed_once},
        {"publish_after_exit_keeps_nothing", publish_after_exit_keeps_nothing},
    };
    for (unsigned i = 0; i < HD_ARRAY_SIZE(cases); i++) {
        fprintf(stderr, "[RUN ] test_reactor_post::%s\n", cases[i].name);
        cases[i].fn();
        fprintf(stderr, "[PASS] test_reactor_post::%s\n", cases[i].name);
    }
    fprintf(stderr, "[====] test_reactor_post (TSan runner): %u cases passed\n",
            (unsigned)HD_ARRAY_SIZE(cases));
    return 0;
}
#endif
