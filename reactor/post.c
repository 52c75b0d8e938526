/* post.c - each shard's inbox for threads that are not shards (hd_runtime_post(rt, shard, fn,
 * arg): the main thread in on_signal, a test): a bounded ring of HD_POST_INBOX_SIZE (64) slots
 * with many producers serialised by a mutex (posts are rare: reloads, tests) and one consumer,
 * the shard, which drains it every tick without the lock (step 2 of the tick). A full inbox
 * returns -EAGAIN (nothing queued). A producer that publishes wakes a sleeping shard exactly as
 * a bus producer does (bus.c): the seq_cst fence after publishing pairs with the one in the shard
 * between announcing sleep and looking at its inboxes again, and the producer that wins the
 * exchange of `sleeping` writes the shard's eventfd (a foreign thread has no ring to send a
 * MSG_RING from). When a shard exits it closes its inbox under the mutex (later posts get
 * -ESHUTDOWN) and runs what was accepted, before shard_fini: an accepted post runs exactly once.
 * Producers run on any thread; drain and close on the shard. */
#include <errno.h>

#include "hd_impl.h"

#define POST_MASK (HD_POST_INBOX_SIZE - 1u)

void hd_posts_init(struct hd_shard *s)
{
    struct hd_post_inbox *in = &s->posts;
    pthread_mutex_init(&in->lock, NULL);
    in->closed = false;
    atomic_init(&in->tail, 0);
    atomic_init(&in->head, 0);
}

void hd_posts_deinit(struct hd_shard *s)
{
    pthread_mutex_destroy(&s->posts.lock);
}

int hd_runtime_post(struct hd_runtime *rt, unsigned shard, hd_post_fn *fn, void *arg)
{
    HD_ASSERT(fn != NULL);
    if (shard >= rt->count)
        return -EINVAL;
    struct hd_shard *s = rt->shards[shard];
    struct hd_post_inbox *in = &s->posts;
    pthread_mutex_lock(&in->lock);
    if (in->closed) {
        pthread_mutex_unlock(&in->lock);
        return -ESHUTDOWN;
    }
    uint32_t tail = atomic_load_explicit(&in->tail, memory_order_relaxed);
    /* Acquire pairs with the shard's release of head: it is done with the slot we reuse. */
    uint32_t head = atomic_load_explicit(&in->head, memory_order_acquire);
    if (tail - head == HD_POST_INBOX_SIZE) {
        pthread_mutex_unlock(&in->lock);
        return -EAGAIN;
    }
    in->slots[tail & POST_MASK] = (struct hd_post){.fn = fn, .arg = arg};
    /* Release pairs with the shard's acquire of tail: the slot is visible first. */
    atomic_store_explicit(&in->tail, tail + 1, memory_order_release);
    pthread_mutex_unlock(&in->lock);
    /* As in hd_bus_publish: either the shard sees our tail or we see its flag. */
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&s->sleeping, memory_order_relaxed) &&
        atomic_exchange_explicit(&s->sleeping, 0, memory_order_relaxed))
        hd_shard_wake(s);
    return 0;
}

bool hd_posts_pending(struct hd_shard *s)
{
    struct hd_post_inbox *in = &s->posts;
    return atomic_load_explicit(&in->tail, memory_order_acquire) !=
           atomic_load_explicit(&in->head, memory_order_relaxed);
}

void hd_posts_drain(struct hd_shard *s)
{
    struct hd_post_inbox *in = &s->posts;
    uint32_t head = atomic_load_explicit(&in->head, memory_order_relaxed);
    uint32_t tail = atomic_load_explicit(&in->tail, memory_order_acquire);
    /* Bounded by the inbox size: posts arriving while we run wait for the next tick. */
    while (head != tail) {
        struct hd_post p = in->slots[head & POST_MASK];
        head++;
        /* Release before running fn: the slot was copied, a producer may reuse it. */
        atomic_store_explicit(&in->head, head, memory_order_release);
        s->stats.posts_run++;
        p.fn(s, p.arg);
    }
}

void hd_posts_close(struct hd_shard *s)
{
    struct hd_post_inbox *in = &s->posts;
    pthread_mutex_lock(&in->lock);
    in->closed = true;
    pthread_mutex_unlock(&in->lock);
    /* No producer can add more: what was accepted runs now, once. */
    hd_posts_drain(s);
}
