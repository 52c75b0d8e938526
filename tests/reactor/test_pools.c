/* test_pools.c - slab pools (exact statistics, exhaustion, lazy carving in chunks, ownership,
 * reuse, ASan poisoning of freed objects) and frame pools (size classes, exhaustion, refcounts,
 * frames whose last reference dies on another shard going home over the bus). Slabs outside
 * any shard run on the test thread; frames run on real shards. */
#include <criterion/criterion.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>

#include "harness.h"
#include "hd_poison.h" /* HD_ASAN: which build this is */

#ifdef HD_ASAN
#include <sanitizer/asan_interface.h>
#endif

static void stats_of(const struct hd_slab *p, struct hd_pool_stats *st)
{
    memset(st, 0xa5, sizeof(*st)); /* every field must be written */
    hd_slab_stats(p, st);
}

/* ---------------------------------------------------------------- slabs */

#define SMALL_CAP 100

Test(test_reactor_pools, slab_stats_exhaustion_reuse)
{
    struct hd_slab *p;
    cr_assert_eq(hd_slab_create(NULL, "small", 48, SMALL_CAP, &p), 0);
    struct hd_pool_stats st;
    stats_of(p, &st);
    cr_assert_eq(st.capacity, 0, "carved before the first get");
    cr_assert_eq(st.chunks, 0, "a chunk allocated before the first get");
    cr_assert_eq(st.cap, SMALL_CAP);
    cr_assert_eq(st.in_use + st.high_water + st.exhausted + st.gets + st.puts, 0);

    char *objs[SMALL_CAP];
    for (unsigned i = 0; i < SMALL_CAP; i++) {
        objs[i] = hd_slab_get(p);
        cr_assert_not_null(objs[i]);
        memset(objs[i], (int)i, 48); /* the whole object is usable */
        stats_of(p, &st);
        cr_assert_eq(st.capacity, i + 1, "carving is not one object per first-time get");
        cr_assert_eq(st.in_use, i + 1);
        cr_assert_eq(st.high_water, i + 1);
        cr_assert_eq(st.chunks, 1);
        cr_assert(hd_slab_owns(p, objs[i]));
        cr_assert_eq(hd_slab_of(objs[i]), p);
        if (i > 0)
            cr_assert_eq(objs[i] - objs[i - 1], 48, "objects are not packed at their size");
    }
    for (unsigned i = 0; i < SMALL_CAP; i++)
        for (unsigned k = 0; k < 48; k++)
            cr_assert_eq((unsigned char)objs[i][k], i, "object %u overlaps another", i);

    cr_assert_null(hd_slab_get(p), "a get past the cap succeeded");
    cr_assert_null(hd_slab_get(p));
    stats_of(p, &st);
    cr_assert_eq(st.exhausted, 2);
    cr_assert_eq(st.gets, SMALL_CAP, "failed gets counted as gets");
    cr_assert_eq(st.capacity, SMALL_CAP);

    for (unsigned i = 0; i < 30; i++)
        hd_slab_put(p, objs[i]);
    stats_of(p, &st);
    cr_assert_eq(st.in_use, SMALL_CAP - 30);
    cr_assert_eq(st.puts, 30);
    cr_assert_eq(st.high_water, SMALL_CAP, "high water fell with puts");

    /* Reuse: the next gets hand back exactly the objects that were put. */
    for (unsigned i = 0; i < 30; i++) {
        char *o = hd_slab_get(p);
        cr_assert_not_null(o);
        bool was_put = false;
        for (unsigned k = 0; k < 30; k++)
            was_put |= (o == objs[k]);
        cr_assert(was_put, "a get after puts carved or invented an object");
    }
    stats_of(p, &st);
    cr_assert_eq(st.capacity, SMALL_CAP);
    cr_assert_eq(st.in_use, SMALL_CAP);
    cr_assert_eq(st.gets, SMALL_CAP + 30);
    cr_assert_eq(st.exhausted, 2);
    cr_assert_eq(st.chunks, 1);
    hd_slab_destroy(p);
}

Test(test_reactor_pools, slab_owns_and_slab_of)
{
    struct hd_slab *p, *q;
    cr_assert_eq(hd_slab_create(NULL, "p", 64, 16, &p), 0);
    cr_assert_eq(hd_slab_create(NULL, "q", 64, 16, &q), 0);
    char *a = hd_slab_get(p), *a2 = hd_slab_get(p);
    char *b = hd_slab_get(q);
    cr_assert(a && a2 && b);
    cr_assert(hd_slab_owns(p, a));
    cr_assert(hd_slab_owns(p, a2));
    cr_assert(!hd_slab_owns(q, a), "q claims p's object");
    cr_assert(!hd_slab_owns(p, b), "p claims q's object");
    cr_assert(hd_slab_owns(q, b));
    cr_assert(!hd_slab_owns(p, a + 1), "interior pointer owned");
    cr_assert(!hd_slab_owns(p, a + 16), "interior pointer owned");
    cr_assert(!hd_slab_owns(p, a + 63), "interior pointer owned");
    /* In p's chunk but not carved yet: not an object. */
    cr_assert(!hd_slab_owns(p, a2 + 64), "uncarved slot owned");
    cr_assert(!hd_slab_owns(p, a2 + 64 * 5), "uncarved slot owned");
    cr_assert_eq(hd_slab_of(a), p);
    cr_assert_eq(hd_slab_of(a2), p);
    cr_assert_eq(hd_slab_of(b), q);
    cr_assert_eq(hd_slab_of(a + 5), p, "the chunk header is found from interior pointers too");
    /* Once freed, still the pool's memory (owns is about the pool, not about being in use). */
    hd_slab_put(p, a);
    cr_assert(hd_slab_owns(p, a));
    hd_slab_put(p, a2);
    hd_slab_put(q, b);
    hd_slab_destroy(p);
    hd_slab_destroy(q);
}

/* Sizes that are not powers of two (owns checks the slot with the odd part's inverse, not a
 * division): every byte offset over the first objects, carved or not, against the plain rule. */
Test(test_reactor_pools, slab_owns_odd_sizes)
{
    static const size_t sizes[] = {48, 80, 208, 2080, 65696};
    for (unsigned k = 0; k < HD_ARRAY_SIZE(sizes); k++) {
        struct hd_slab *p;
        cr_assert_eq(hd_slab_create(NULL, "odd", sizes[k], 16, &p), 0);
        char *first = hd_slab_get(p), *o = NULL;
        for (int i = 0; i < 4; i++)
            o = hd_slab_get(p); /* 5 carved */
        cr_assert(first && o);
        for (size_t off = 0; off < 7 * sizes[k]; off++) {
            bool want = off % sizes[k] == 0 && off / sizes[k] < 5;
            cr_assert_eq(hd_slab_owns(p, first + off), want, "size %zu, offset %zu", sizes[k], off);
        }
        cr_assert(!hd_slab_owns(p, first - 1) && !hd_slab_owns(p, first - 16));
        hd_slab_destroy(p);
    }
}

/* Objects of 256 KiB: 7 fit in a 2 MiB chunk after its header, so chunks show the carving. */
#define BIG_OBJ       (256u * 1024u)
#define BIG_PER_CHUNK ((HD_SLAB_CHUNK_SIZE - 64u) / BIG_OBJ)
#define BIG_CAP       20u
_Static_assert(BIG_PER_CHUNK == 7, "the expectations below assume 7 per chunk");

Test(test_reactor_pools, slab_lazy_chunks)
{
    struct hd_slab *p;
    cr_assert_eq(hd_slab_create(NULL, "big", BIG_OBJ, BIG_CAP, &p), 0);
    void *objs[BIG_CAP];
    struct hd_pool_stats st;
    for (unsigned i = 0; i < BIG_CAP; i++) {
        objs[i] = hd_slab_get(p);
        cr_assert_not_null(objs[i]);
        stats_of(p, &st);
        cr_assert_eq(st.chunks, i / BIG_PER_CHUNK + 1, "after %u gets: %llu chunks", i + 1,
                     (unsigned long long)st.chunks);
        cr_assert_eq(st.capacity, i + 1);
        cr_assert_eq(hd_slab_of(objs[i]), p);
        memset(objs[i], 0x5a, BIG_OBJ);
    }
    cr_assert_null(hd_slab_get(p));
    stats_of(p, &st);
    cr_assert_eq(st.chunks, 3);
    cr_assert_eq(st.exhausted, 1);
    for (unsigned i = 0; i < BIG_CAP; i++)
        hd_slab_put(p, objs[i]);
    for (unsigned i = 0; i < BIG_CAP; i++)
        cr_assert_not_null(hd_slab_get(p));
    stats_of(p, &st);
    cr_assert_eq(st.chunks, 3, "reuse allocated a chunk");
    cr_assert_eq(st.capacity, BIG_CAP);
    cr_assert_eq(st.high_water, BIG_CAP);
    cr_assert_eq(st.gets, 2 * BIG_CAP);
    cr_assert_eq(st.puts, BIG_CAP);
    hd_slab_destroy(p); /* frees objects still in use too (ASan's leak check agrees) */
}

Test(test_reactor_pools, slab_create_limits)
{
    struct hd_slab *p = NULL;
    cr_assert_eq(hd_slab_create(NULL, "x", 0, 10, &p), -EINVAL);
    cr_assert_eq(hd_slab_create(NULL, "x", 16, 0, &p), -EINVAL);
    cr_assert_eq(hd_slab_create(NULL, "x", HD_SLAB_CHUNK_SIZE - 63, 1, &p), -EINVAL);
    cr_assert_null(p);
    /* The largest object: one per chunk. */
    cr_assert_eq(hd_slab_create(NULL, "max", HD_SLAB_CHUNK_SIZE - 64, 2, &p), 0);
    void *a = hd_slab_get(p), *b = hd_slab_get(p);
    cr_assert(a && b);
    struct hd_pool_stats st;
    stats_of(p, &st);
    cr_assert_eq(st.chunks, 2);
    hd_slab_destroy(p);
    /* Tiny objects are rounded up to HD_SLAB_OBJ_MIN (room for the free-list link). */
    cr_assert_eq(hd_slab_create(NULL, "tiny", 1, 4, &p), 0);
    char *t0 = hd_slab_get(p), *t1 = hd_slab_get(p);
    cr_assert_eq(t1 - t0, HD_SLAB_OBJ_MIN);
    hd_slab_put(p, t0);
    hd_slab_put(p, t1);
    hd_slab_destroy(p);
}

/* Putting an object into a pool that does not own it is our bug: HD_ASSERT aborts. */
Test(test_reactor_pools, slab_put_foreign_object_aborts, .signal = SIGABRT)
{
    struct hd_slab *p, *q;
    cr_assert_eq(hd_slab_create(NULL, "p", 32, 4, &p), 0);
    cr_assert_eq(hd_slab_create(NULL, "q", 32, 4, &q), 0);
    void *b = hd_slab_get(q);
    cr_assert_not_null(hd_slab_get(p));
    hd_slab_put(p, b);
}

#ifdef HD_ASAN
/* ASan builds: a freed object is poisoned whole, a re-got one is usable whole. */
Test(test_reactor_pools, slab_put_poisons)
{
    struct hd_slab *p;
    cr_assert_eq(hd_slab_create(NULL, "poison", 100, 8, &p), 0); /* 100 rounds to 112 */
    char *o = hd_slab_get(p);
    cr_assert_null(__asan_region_is_poisoned(o, 112), "a fresh object is poisoned");
    /* Uncarved memory of the chunk is poisoned too (nothing may scribble there). */
    cr_assert(__asan_address_is_poisoned(o + 112));
    hd_slab_put(p, o);
    for (unsigned k = 0; k < 112; k += 8)
        cr_assert(__asan_address_is_poisoned(o + k), "byte %u of a freed object not poisoned", k);
    char *again = hd_slab_get(p);
    cr_assert_eq(again, o);
    cr_assert_null(__asan_region_is_poisoned(again, 112));
    hd_slab_destroy(p);
}

/* Use after put: ASan reports it and exits with its default exitcode (1). */
Test(test_reactor_pools, slab_use_after_put_is_caught, .exit_code = 1)
{
    struct hd_slab *p;
    cr_assert_eq(hd_slab_create(NULL, "uap", 64, 8, &p), 0);
    volatile char *o = hd_slab_get(p);
    o[40] = 1;
    hd_slab_put(p, (void *)o);
    o[40] = 2; /* ASan: use-after-poison */
    hd_slab_destroy(p);
}
#endif

/* ---------------------------------------------------------------- frames */

static void done_body(struct hd_shard *s, void *arg)
{
    (void)arg;
    hdt_done(s);
}

static const struct hd_frame_class test_classes[] = {
    {.size = 256, .cap_count = 8},
    {.size = 4096, .cap_count = 4},
    {.size = 65600, .cap_count = 2},
};

static void frame_stats(struct hd_shard *s, unsigned cls, struct hd_pool_stats *st)
{
    memset(st, 0xa5, sizeof(*st));
    hd_frame_stats(s, cls, st);
}

static void check_fresh(struct hd_shard *s, struct hd_frame *f, unsigned cls, uint32_t size)
{
    HDT_CHECK(f != NULL);
    HDT_CHECK(f->cls == cls);
    HDT_CHECK(f->size == size);
    HDT_CHECK(f->len == 0);
    HDT_CHECK(atomic_load(&f->refs) == 1);
    HDT_CHECK(f->owner == hd_shard_id(s));
    HDT_CHECK(f->next == NULL);
    HDT_CHECK(f->app_flags == 0 && f->app_u64 == 0);
    memset(f->data, 0x77, f->size); /* all of it is usable */
}

static void classes_body(struct hd_shard *s, void *arg)
{
    (void)arg;
    struct hd_pool_stats st;
    HDT_CHECK(hd_frame_classes_count(s) == 3);
    struct hd_frame *c0[8], *c1[4], *c2[2];
    unsigned n0 = 0, n1 = 0, n2 = 0;
    /* The smallest class that fits. */
    check_fresh(s, c0[n0++] = hd_frame_get(s, 0), 0, 256);
    check_fresh(s, c0[n0++] = hd_frame_get(s, 1), 0, 256);
    check_fresh(s, c0[n0++] = hd_frame_get(s, 256), 0, 256);
    check_fresh(s, c1[n1++] = hd_frame_get(s, 257), 1, 4096);
    check_fresh(s, c1[n1++] = hd_frame_get(s, 4096), 1, 4096);
    check_fresh(s, c2[n2++] = hd_frame_get(s, 4097), 2, 65600);
    check_fresh(s, c2[n2++] = hd_frame_get(s, 65600), 2, 65600);
    /* The class a size comes from, and the live counters a policy reads before a get. */
    HDT_CHECK(hd_frame_class_of(s, 0) == 0 && hd_frame_class_of(s, 256) == 0);
    HDT_CHECK(hd_frame_class_of(s, 257) == 1 && hd_frame_class_of(s, 65600) == 2);
    HDT_CHECK(hd_frame_class_of(s, 65601) == -ENOBUFS);
    const struct hd_pool_stats *live = hd_frame_class_counters(s, 0);
    HDT_CHECK(live->cap == 8 && live->in_use == n0);
    /* Too big for every class. */
    HDT_CHECK(hd_frame_get(s, 65601) == NULL);
    HDT_CHECK(hd_frame_get(s, SIZE_MAX) == NULL);
    for (unsigned i = 0; i < 3; i++) {
        frame_stats(s, i, &st);
        HDT_CHECK(st.exhausted == 0); /* too big is not an exhaustion of a class */
    }
    /* Class 2 is exhausted: NULL, counted, and no fallback elsewhere. */
    HDT_CHECK(hd_frame_get(s, 5000) == NULL);
    frame_stats(s, 2, &st);
    HDT_CHECK(st.exhausted == 1 && st.in_use == 2 && st.cap == 2);
    while (n0 < 8)
        check_fresh(s, c0[n0++] = hd_frame_get(s, 100), 0, 256);
    HDT_CHECK(hd_frame_get(s, 100) == NULL);
    frame_stats(s, 0, &st);
    HDT_CHECK(st.exhausted == 1 && st.in_use == 8 && st.high_water == 8);
    HDT_CHECK(live->in_use == 8 && live->exhausted == 1); /* the counters themselves */
    frame_stats(s, 1, &st);
    HDT_CHECK(st.in_use == 2 && st.exhausted == 0); /* class 0 did not spill into class 1 */

    /* Refcounts: refs keep it alive, the last unref frees it. */
    struct hd_frame *f = c1[0];
    hd_frame_ref(f);
    hd_frame_ref(f);
    HDT_CHECK(atomic_load(&f->refs) == 3);
    hd_frame_unref(s, f);
    hd_frame_unref(s, f);
    frame_stats(s, 1, &st);
    HDT_CHECK(st.in_use == 2 && st.puts == 0);
    hd_frame_unref(s, f);
    frame_stats(s, 1, &st);
    HDT_CHECK(st.in_use == 1 && st.puts == 1);
    /* Freed frames come back fresh. */
    check_fresh(s, c1[0] = hd_frame_get(s, 300), 1, 4096);
    frame_stats(s, 1, &st);
    HDT_CHECK(st.capacity == 2); /* reused, not carved */

    for (unsigned i = 0; i < n0; i++)
        hd_frame_unref(s, c0[i]);
    for (unsigned i = 0; i < n1; i++)
        hd_frame_unref(s, c1[i]);
    for (unsigned i = 0; i < n2; i++)
        hd_frame_unref(s, c2[i]);
    for (unsigned i = 0; i < 3; i++) {
        frame_stats(s, i, &st);
        HDT_CHECK(st.in_use == 0);
        HDT_CHECK(st.gets == st.puts);
    }
    HDT_CHECK(hd_shard_stats(s)->frames_returned == 0);
    hdt_done(s);
}

Test(test_reactor_pools, frame_classes_refcounts)
{
    struct hdt_options o = {.shards = 1, .frame_classes = test_classes, .frame_classes_count = 3};
    cr_assert_eq(hdt_run(&o, classes_body, NULL, NULL), 0);
}

Test(test_reactor_pools, frame_default_classes)
{
    struct hd_runtime *rt;
    struct hdt_options o = {.shards = 1};
    cr_assert_eq(hdt_run(&o, done_body, NULL, &rt), 0);
    struct hd_shard *s = hd_runtime_shard(rt, 0);
    cr_assert_eq(hd_frame_classes_count(s), 2);
    struct hd_pool_stats st;
    hd_frame_stats(s, 0, &st);
    cr_assert_eq(st.cap, 65536);
    cr_assert_eq(st.chunks, 0, "frame memory allocated before the first frame");
    hd_frame_stats(s, 1, &st);
    cr_assert_eq(st.cap, 1024);
    hd_runtime_destroy(rt);
}

Test(test_reactor_pools, frame_classes_invalid)
{
    static const struct hd_frame_class descending[] = {{4096, 4}, {256, 4}};
    static const struct hd_frame_class equal[] = {{256, 4}, {256, 4}};
    static const struct hd_frame_class many[HD_FRAME_CLASSES_MAX + 1] = {
        {16, 1}, {32, 1}, {64, 1}, {128, 1}, {256, 1}};
    struct hdt_options o = {.shards = 1, .frame_classes = descending, .frame_classes_count = 2};
    cr_assert_eq(hdt_run(&o, done_body, NULL, NULL), -EINVAL);
    o.frame_classes = equal;
    cr_assert_eq(hdt_run(&o, done_body, NULL, NULL), -EINVAL);
    o.frame_classes = many;
    o.frame_classes_count = HD_ARRAY_SIZE(many);
    cr_assert_eq(hdt_run(&o, done_body, NULL, NULL), -EINVAL);
    o.frame_classes_count = 0;
    cr_assert_eq(hdt_run(&o, done_body, NULL, NULL), -EINVAL);
}

/* ---- frames that die on another shard: shard 0 sends FRAMES_SENT frames to shard 1, which
 * drops the last reference; they must come back to shard 0's pool in one batched message. One
 * more frame is shared: shard 1 drops its reference first, shard 0's is the last (freed at
 * home, not returned). */
#define FRAMES_SENT 100

struct xret_ctx {
    struct hd_shard *s0;
    struct hd_frame *shared;
    struct hd_timer poll, watchdog;
    _Atomic unsigned got;        /* frames shard 1 received */
    _Atomic bool shared_dropped; /* shard 1 dropped its reference to the shared frame */
    bool shared_released;        /* shard 0 dropped the last one */
    unsigned polls;
};

static struct xret_ctx *xret;

static void xret_frame_msg(struct hd_shard *dst, const struct hd_msg *m)
{
    struct hd_frame *f = m->ptr;
    HDT_CHECK(hd_shard_id(dst) == 1);
    HDT_CHECK(f->owner == 0);
    HDT_CHECK(f->len == 4 && f->app_u64 == m->u64[0]);
    HDT_CHECK(memcmp(f->data, "\x01\x02\x03\x04", 4) == 0);
    hd_frame_unref(dst, f);
    if (f == xret->shared)
        atomic_store(&xret->shared_dropped, true);
    else
        atomic_fetch_add(&xret->got, 1);
}

static void xret_poll(struct hd_timer *t)
{
    struct hd_shard *s = xret->s0;
    struct hd_pool_stats st;
    hd_frame_stats(s, 0, &st);
    xret->polls++;
    if (!xret->shared_released && atomic_load(&xret->shared_dropped)) {
        HDT_CHECK(atomic_load(&xret->shared->refs) == 1);
        hd_frame_unref(s, xret->shared); /* the last reference, at home */
        xret->shared_released = true;
        hd_frame_stats(s, 0, &st);
    }
    if (xret->shared_released && st.in_use == 0) {
        HDT_CHECK(atomic_load(&xret->got) == FRAMES_SENT);
        HDT_CHECK(st.puts == FRAMES_SENT + 1);
        hd_timer_stop(s, &xret->watchdog);
        hd_runtime_stop(hd_shard_runtime(s));
        return;
    }
    hd_timer_start(s, t, 1);
}

static void xret_watchdog(struct hd_timer *t)
{
    (void)t;
    fprintf(stderr, "frames did not come home: got %u, shared dropped %d\n",
            atomic_load(&xret->got), (int)atomic_load(&xret->shared_dropped));
    abort();
}

static void xret_body(struct hd_shard *s, void *arg)
{
    (void)arg;
    if (hd_shard_id(s) != 0)
        return;
    xret->s0 = s;
    for (unsigned i = 0; i <= FRAMES_SENT; i++) {
        struct hd_frame *f = hd_frame_get(s, 4);
        HDT_CHECK(f);
        memcpy(f->data, "\x01\x02\x03\x04", 4);
        f->len = 4;
        f->app_u64 = i;
        if (i == FRAMES_SENT) {
            hd_frame_ref(f); /* shared: shard 0 keeps a reference */
            xret->shared = f;
        }
        struct hd_msg m = {.fn = xret_frame_msg, .ptr = f, .u64 = {i, 0}};
        HDT_CHECK(hd_bus_send(s, 1, &m) == 0); /* the frame's reference moves to shard 1 */
    }
    hd_timer_init(&xret->poll, xret_poll);
    hd_timer_start(s, &xret->poll, 1);
    hd_timer_init(&xret->watchdog, xret_watchdog);
    hd_timer_start(s, &xret->watchdog, 10000);
}

Test(test_reactor_pools, frame_last_unref_elsewhere_goes_home)
{
    static struct xret_ctx c;
    memset(&c, 0, sizeof(c));
    xret = &c;
    struct hdt_options o = {.shards = 2};
    struct hd_runtime *rt;
    cr_assert_eq(hdt_run(&o, xret_body, NULL, &rt), 0);
    struct hd_shard *s0 = hd_runtime_shard(rt, 0), *s1 = hd_runtime_shard(rt, 1);
    const struct hd_shard_stats *st1 = hd_shard_stats(s1);
    cr_assert_eq(st1->frames_returned, FRAMES_SENT, "shard 1 returned %llu frames",
                 (unsigned long long)st1->frames_returned);
    /* All 100 were published by one tail store, drained in one pass, sent home in one list. */
    cr_assert_eq(st1->bus_sent, 1, "frames went home in %llu messages",
                 (unsigned long long)st1->bus_sent);
    cr_assert_eq(hd_shard_stats(s0)->frames_returned, 0);
    struct hd_pool_stats st;
    hd_frame_stats(s0, 0, &st);
    cr_assert_eq(st.in_use, 0);
    cr_assert_eq(st.gets, FRAMES_SENT + 1);
    cr_assert_eq(st.puts, FRAMES_SENT + 1);
    hd_frame_stats(s1, 0, &st);
    cr_assert_eq(st.gets + st.puts + st.capacity, 0, "shard 1's own pool was used");
    cr_assert_gt(c.polls, 0);
    hd_runtime_destroy(rt);
}

/* ---------------------------------------------------------------- shrinking after a burst */

/* 64 KiB objects: 31 per 2 MiB chunk. */
#define BURST_OBJ    (64u * 1024u)
#define BURST_CHUNKS 8u
#define BURST_COUNT  (BURST_CHUNKS * 31u)

/* Issue 16 item 7: a burst grows a pool chunk by chunk; once it is over (a trim interval whose
 * peak stayed low), the empty chunks go back to the allocator but one spare, and the pool grows
 * again when needed. Within an interval nothing is freed (the steady state never allocates). */
Test(test_reactor_pools, slab_shrinks_after_burst)
{
    struct hd_slab *p;
    cr_assert_eq(hd_slab_create(NULL, "burst", BURST_OBJ, 4 * BURST_COUNT, &p), 0);
    static void *objs[BURST_COUNT];
    for (unsigned i = 0; i < BURST_COUNT; i++)
        cr_assert_not_null(objs[i] = hd_slab_get(p));
    struct hd_pool_stats st;
    stats_of(p, &st);
    cr_assert_eq(st.chunks, BURST_CHUNKS);
    for (unsigned i = 0; i < BURST_COUNT; i++)
        hd_slab_put(p, objs[i]);
    cr_assert(hd_slab_trim_wanted(p), "empty chunks beyond the load: the shard must wake");
    hd_slab_trim(p); /* the interval that saw the burst: its peak needed every chunk */
    stats_of(p, &st);
    cr_assert_eq(st.chunks, BURST_CHUNKS, "freed within the burst's interval");
    cr_assert(hd_slab_trim_wanted(p));
    for (unsigned i = 0; i < 3; i++) /* a small load meanwhile */
        cr_assert_not_null(objs[i] = hd_slab_get(p));
    hd_slab_trim(p); /* a quiet interval: one chunk in use, one spare */
    stats_of(p, &st);
    cr_assert_eq(st.chunks, 1 + HD_SLAB_SPARE_CHUNKS, "%llu chunks kept",
                 (unsigned long long)st.chunks);
    cr_assert_eq(st.chunks_freed, BURST_CHUNKS - 1 - HD_SLAB_SPARE_CHUNKS);
    cr_assert_eq(st.in_use, 3);
    cr_assert_leq(st.capacity, (1 + HD_SLAB_SPARE_CHUNKS) * 31u);
    for (unsigned i = 0; i < 3; i++) {
        cr_assert(hd_slab_owns(p, objs[i]), "a live object's chunk was freed");
        memset(objs[i], 0x5a, BURST_OBJ);
        hd_slab_put(p, objs[i]);
    }
    for (unsigned i = 0; i < BURST_COUNT; i++) /* the next burst grows it again */
        cr_assert_not_null(objs[i] = hd_slab_get(p));
    stats_of(p, &st);
    cr_assert_eq(st.chunks, BURST_CHUNKS);
    for (unsigned i = 0; i < BURST_COUNT; i++)
        hd_slab_put(p, objs[i]);
    hd_slab_destroy(p);
}
