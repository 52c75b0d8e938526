/* snap.c - immutable snapshots shared by every shard (a reloaded config): struct hd_snap (an
 * atomic refcount and a free function, embedded in the app's object) and struct hd_snap_var (one
 * cache-line slot per shard holding that shard's current snapshot). The main thread builds a new
 * object and publishes it: one reference per shard, posted to each (post.c; a full inbox is
 * retried every millisecond for up to HD_POST_RETRY_MS, and a shard still full keeps its old
 * snapshot until the next publish, which then says -EAGAIN). Each shard, on its own thread, swaps
 * it into its slot between callbacks and drops its reference to the previous one, so a shard
 * never sees a snapshot change during a callback; the last unref (acq_rel) frees it on whichever
 * thread dropped it. A reader may use what hd_snap_var_get returned until it returns to the
 * loop; across an asynchronous wait it takes a reference. Posts are FIFO, so the last publish
 * wins. Publish runs on a thread that is not a shard; get and the swap on the shard that owns
 * the slot; unref on any thread. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hd_impl.h"

struct hd_snap_slot {
    _Alignas(HD_CACHELINE) struct hd_snap *cur; /* written and read by its shard only */
};

struct hd_snap_var {
    struct hd_runtime *rt;
    unsigned count;
    struct hd_snap_slot *slots; /* [count] */
};

void hd_snap_init(struct hd_snap *sn, hd_snap_free_fn *free_fn)
{
    HD_ASSERT(free_fn != NULL);
    atomic_init(&sn->refs, 1);
    sn->free_fn = free_fn;
    sn->var = NULL;
}

void hd_snap_unref(struct hd_snap *sn)
{
    if (sn == NULL)
        return;
    uint32_t old = atomic_fetch_sub_explicit(&sn->refs, 1, memory_order_acq_rel);
    HD_ASSERT(old > 0);
    if (old == 1)
        sn->free_fn(sn);
}

int hd_snap_var_create(struct hd_runtime *rt, struct hd_snap *initial, struct hd_snap_var **out)
{
    struct hd_snap_var *v = calloc(1, sizeof(*v));
    size_t bytes = (size_t)rt->count * sizeof(struct hd_snap_slot);
    struct hd_snap_slot *slots = v ? aligned_alloc(HD_CACHELINE, bytes) : NULL;
    if (slots == NULL) {
        free(v);
        hd_snap_unref(initial);
        return -ENOMEM;
    }
    memset(slots, 0, bytes);
    v->rt = rt;
    v->count = rt->count;
    v->slots = slots;
    if (initial) {
        initial->var = v;
        for (unsigned i = 0; i < v->count; i++) {
            hd_snap_ref(initial);
            slots[i].cur = initial;
        }
        hd_snap_unref(initial); /* the caller's */
    }
    *out = v;
    return 0;
}

void hd_snap_var_destroy(struct hd_snap_var *v)
{
    if (v == NULL)
        return;
    for (unsigned i = 0; i < v->count; i++)
        hd_snap_unref(v->slots[i].cur);
    free(v->slots);
    free(v);
}

struct hd_snap *hd_snap_var_get(const struct hd_snap_var *v, const struct hd_shard *s)
{
    HD_ASSERT(s->id < v->count);
    return v->slots[s->id].cur;
}

/* On shard s: the posted reference replaces the slot's. */
static void snap_swap(struct hd_shard *s, void *arg)
{
    struct hd_snap *sn = arg;
    struct hd_snap_slot *slot = &sn->var->slots[s->id];
    struct hd_snap *old = slot->cur;
    slot->cur = sn;
    hd_snap_unref(old);
}

static void sleep_1ms(void)
{
    struct timespec ts = {.tv_sec = 0, .tv_nsec = 1000000};
    nanosleep(&ts, NULL);
}

int hd_snap_var_publish(struct hd_snap_var *v, struct hd_snap *sn)
{
    HD_ASSERT(hd_shard_current() == NULL); /* it may sleep on a full inbox */
    HD_ASSERT(sn->var == NULL || sn->var == v);
    if (sn->var == NULL)
        sn->var = v; /* before the posts: the producer lock and tail release publish it */
    int result = 0;
    for (unsigned i = 0; i < v->count; i++) {
        hd_snap_ref(sn); /* the shard's, moved by the post */
        int rc = hd_runtime_post(v->rt, i, snap_swap, sn);
        for (unsigned tries = 0; rc == -EAGAIN && tries < HD_POST_RETRY_MS; tries++) {
            sleep_1ms();
            rc = hd_runtime_post(v->rt, i, snap_swap, sn);
        }
        if (rc < 0) {
            hd_snap_unref(sn); /* not moved */
            if (result == 0)
                result = rc;
        }
    }
    hd_snap_unref(sn); /* the caller's */
    return result;
}
