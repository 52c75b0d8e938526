/* bus.c - the cross-shard bus: one single-producer/single-consumer ring of HD_BUS_RING_SIZE
 * (4,096) 32-byte messages (fn, ptr, two u64) per ordered pair of shards, written by the
 * producer's thread and read by the consumer's. Producers write slots all tick and publish each
 * dirty ring's tail once, with release, at the end of the tick; the consumer reads the tail with
 * acquire and releases its head after a batch. A full ring spills into a bounded per-destination
 * overflow owned by the producer (HD_BUS_OVERFLOW_SIZE; order kept: while it holds anything, new
 * messages go behind it); when that is full the send fails with -EAGAIN and counts bus_full —
 * never a spin, never a silent drop. A message to the sending shard itself goes into that
 * shard's own queue (HD_BUS_SELF_SIZE, no atomics: one thread), bounded the same way, and runs
 * at the start of the next drain (only those queued before the pass), never inside
 * hd_bus_send, so a local and a remote owner behave alike.
 *
 * Wake-ups: a shard about to sleep stores sleeping = 1, fences, and re-checks its inboxes; a
 * producer, after publishing, fences and exchanges the destination's flag to 0, and only the one
 * that sees 1 wakes it (IORING_OP_MSG_RING, or an eventfd write without it). So a sleeping shard
 * gets at most one wake-up however many shards publish to it, and a busy one none. Lazy messages
 * (hd_bus_send_lazy: frames going home) wake nobody: the consumer drains them on its next tick,
 * whatever wakes it; only when the ring from this producer holds HD_BUS_LAZY_BACKLOG (a quarter)
 * does the publish wake it anyway, so a long sleep cannot fill the ring for urgent messages. */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "hd_impl.h"

#define RING_MASK (HD_BUS_RING_SIZE - 1u)
#define OVF_MASK  (HD_BUS_OVERFLOW_SIZE - 1u)
#define SELF_MASK (HD_BUS_SELF_SIZE - 1u)

static inline struct hd_bus_ring *ring_to(struct hd_shard *s, unsigned dst)
{
    return s->rt->rings[s->id * s->count + dst];
}

static inline struct hd_bus_ring *ring_from(struct hd_shard *s, unsigned src)
{
    return s->rt->rings[src * s->count + s->id];
}

int hd_bus_init(struct hd_shard *s)
{
    HD_ASSERT(s->count <= 64); /* bus_dirty is one bitmap word */
    s->overflow = calloc(s->count, sizeof(*s->overflow));
    s->self_q = calloc(HD_BUS_SELF_SIZE, sizeof(*s->self_q));
    return s->overflow && s->self_q ? 0 : -ENOMEM;
}

void hd_bus_fini(struct hd_shard *s)
{
    free(s->overflow);
    free(s->self_q);
    s->overflow = NULL;
    s->self_q = NULL;
}

/* Free slots in the ring to dst as the producer sees them (refreshing the consumer's head). */
static uint32_t ring_space(struct hd_bus_ring *r)
{
    uint32_t used = r->tail_local - r->head_cached;
    if (used == HD_BUS_RING_SIZE) {
        /* Acquire pairs with the consumer's release of head: its reads of those slots are done. */
        r->head_cached = atomic_load_explicit(&r->head, memory_order_acquire);
        used = r->tail_local - r->head_cached;
    }
    return HD_BUS_RING_SIZE - used;
}

unsigned hd_bus_room(struct hd_shard *s, unsigned dst)
{
    if (dst >= s->count)
        return 0;
    if (dst == s->id) {
        uint32_t free_slots = HD_BUS_SELF_SIZE - (s->self_tail - s->self_head);
        return free_slots > HD_BUS_BULK_RESERVE ? free_slots - HD_BUS_BULK_RESERVE : 0;
    }
    struct hd_bus_ring *r = ring_to(s, dst);
    struct hd_bus_overflow *ov = &s->overflow[dst];
    r->head_cached = atomic_load_explicit(&r->head, memory_order_acquire);
    uint32_t ovf_free = HD_BUS_OVERFLOW_SIZE - (ov->tail - ov->head);
    /* While the overflow holds messages, order keeps new ones out of the ring. */
    uint32_t room = ov->tail != ov->head ? ovf_free : ring_space(r) + ovf_free;
    return room > HD_BUS_BULK_RESERVE ? room - HD_BUS_BULK_RESERVE : 0;
}

/* reserve: slots (of ring + overflow) this message leaves free, in three levels: an app's bulk
 * leaves HD_BUS_BULK_RESERVE, its control messages HD_BUS_RESERVED, the reactor's own (frames
 * going home, collect requests) none. So an app that fills the bus with packets starves neither
 * its own control messages nor the reactor's. */
/* A message to this shard itself: queued for the next drain, the same order and bounds as a
 * message to another shard (never run inside the send: the caller may be mid-callback). */
static int self_enqueue(struct hd_shard *s, const struct hd_msg *m, uint32_t reserve)
{
    if (s->self_tail - s->self_head + reserve >= HD_BUS_SELF_SIZE) {
        s->stats.bus_full++;
        return -EAGAIN;
    }
    s->self_q[s->self_tail & SELF_MASK] = *m;
    s->self_tail++;
    s->stats.bus_sent++;
    return 0;
}

static int bus_enqueue(struct hd_shard *s, unsigned dst, const struct hd_msg *m, uint32_t reserve,
                       bool lazy)
{
    if (hd_unlikely(dst >= s->count))
        return -EINVAL;
    HD_ASSERT(m->fn != NULL);
    if (hd_unlikely(dst == s->id))
        return self_enqueue(s, m, reserve);
    struct hd_bus_ring *r = ring_to(s, dst);
    struct hd_bus_overflow *ov = &s->overflow[dst];
    uint32_t ovf_used = ov->tail - ov->head;
    /* The reserve comes out of the overflow: apps get the whole ring and most of it. */
    if (hd_likely(ovf_used == 0) && ring_space(r) > 0) {
        r->slots[r->tail_local & RING_MASK] = *m;
        r->tail_local++;
    } else if (ovf_used + reserve < HD_BUS_OVERFLOW_SIZE) {
        ov->slots[ov->tail & OVF_MASK] = *m;
        ov->tail++;
        s->stats.bus_overflowed++;
    } else {
        s->stats.bus_full++;
        return -EAGAIN;
    }
    s->bus_dirty |= UINT64_C(1) << dst;
    if (!lazy)
        s->bus_urgent |= UINT64_C(1) << dst;
    s->stats.bus_sent++;
    return 0;
}

int hd_bus_send(struct hd_shard *s, unsigned dst, const struct hd_msg *m)
{
    return bus_enqueue(s, dst, m, HD_BUS_BULK_RESERVE, false);
}

int hd_bus_send_control(struct hd_shard *s, unsigned dst, const struct hd_msg *m)
{
    return bus_enqueue(s, dst, m, HD_BUS_RESERVED, false);
}

int hd_bus_send_internal(struct hd_shard *s, unsigned dst, const struct hd_msg *m)
{
    return bus_enqueue(s, dst, m, 0, false);
}

int hd_bus_send_lazy(struct hd_shard *s, unsigned dst, const struct hd_msg *m)
{
    return bus_enqueue(s, dst, m, 0, true);
}

static void wake(struct hd_shard *s, struct hd_shard *dst)
{
    s->stats.wakes_sent++;
    if (s->features & HD_FEAT_MSG_RING) {
        struct io_uring_sqe *sqe = hd_sqe_get(s); /* NULL: the eventfd below instead */
        if (sqe) {
            io_uring_prep_msg_ring(sqe, dst->ring_fd, 0, HD_TAG_WAKE, 0);
            io_uring_sqe_set_data64(sqe, HD_TAG_IGNORE);
            return;
        }
    }
    hd_shard_wake(dst);
}

/* Only lazy messages for this ring: whether it holds enough that the consumer must wake anyway.
 * The consumer's head is read again only when the old one says so. */
static bool lazy_backlog(struct hd_bus_ring *r)
{
    if (r->tail_local - r->head_cached < HD_BUS_LAZY_BACKLOG)
        return false;
    r->head_cached = atomic_load_explicit(&r->head, memory_order_acquire);
    return r->tail_local - r->head_cached >= HD_BUS_LAZY_BACKLOG;
}

void hd_bus_publish(struct hd_shard *s)
{
    uint64_t dirty = s->bus_dirty;
    if (dirty == 0)
        return;
    uint64_t published = 0;
    uint64_t still = 0;
    while (dirty) {
        unsigned d = (unsigned)__builtin_ctzll(dirty);
        dirty &= dirty - 1;
        struct hd_bus_ring *r = ring_to(s, d);
        struct hd_bus_overflow *ov = &s->overflow[d];
        while (ov->tail != ov->head && ring_space(r) > 0) {
            r->slots[r->tail_local & RING_MASK] = ov->slots[ov->head & OVF_MASK];
            r->tail_local++;
            ov->head++;
        }
        if (ov->tail != ov->head)
            still |= UINT64_C(1) << d;
        /* Release pairs with the consumer's acquire of tail: the slots are visible first. */
        if (atomic_load_explicit(&r->tail, memory_order_relaxed) != r->tail_local) {
            atomic_store_explicit(&r->tail, r->tail_local, memory_order_release);
            if ((s->bus_urgent & (UINT64_C(1) << d)) || lazy_backlog(r))
                published |= UINT64_C(1) << d;
            else
                s->stats.wakes_skipped++;
        }
    }
    s->bus_dirty = still;
    s->bus_urgent &= still; /* an urgent message still in the overflow wakes when published */
    if (published == 0)
        return;
    /* Pairs with the fence in a consumer between announcing sleep and re-checking its rings:
     * either it sees our tail or we see its flag. */
    atomic_thread_fence(memory_order_seq_cst);
    while (published) {
        unsigned d = (unsigned)__builtin_ctzll(published);
        published &= published - 1;
        struct hd_shard *dst = s->rt->shards[d];
        if (atomic_load_explicit(&dst->sleeping, memory_order_relaxed) &&
            atomic_exchange_explicit(&dst->sleeping, 0, memory_order_relaxed))
            wake(s, dst);
    }
}

/* The messages this shard sent itself before this pass (one queued by a handler here runs at the
 * next drain: the loop always moves on). */
void hd_bus_drain_self(struct hd_shard *s, unsigned budget)
{
    uint32_t n = s->self_tail - s->self_head;
    if (n > budget)
        n = budget;
    for (uint32_t i = 0; i < n; i++) {
        struct hd_msg m = s->self_q[s->self_head & SELF_MASK];
        s->self_head++; /* before the call: a handler may queue more (the slot is free) */
        hd_running(s, HD_RUN_BUS, (const void *)m.fn);
        m.fn(s, &m);
    }
    s->stats.bus_received += n;
}

bool hd_bus_self_pending(const struct hd_shard *s)
{
    return s->self_tail != s->self_head;
}

void hd_bus_drain(struct hd_shard *s, unsigned budget)
{
    hd_bus_drain_self(s, budget);
    for (unsigned src = 0; src < s->count; src++) {
        if (src == s->id)
            continue;
        struct hd_bus_ring *r = ring_from(s, src);
        uint32_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
        uint32_t tail = atomic_load_explicit(&r->tail, memory_order_acquire);
        uint32_t n = tail - head;
        if (n > budget)
            n = budget;
        for (uint32_t i = 0; i < n; i++) {
            const struct hd_msg *m = &r->slots[(head + i) & RING_MASK];
            hd_running(s, HD_RUN_BUS, (const void *)m->fn);
            m->fn(s, m);
        }
        if (n) {
            atomic_store_explicit(&r->head, head + n, memory_order_release);
            s->stats.bus_received += n;
        }
    }
}

bool hd_bus_pending(struct hd_shard *s)
{
    for (unsigned src = 0; src < s->count; src++) {
        if (src == s->id)
            continue;
        struct hd_bus_ring *r = ring_from(s, src);
        if (atomic_load_explicit(&r->tail, memory_order_acquire) !=
            atomic_load_explicit(&r->head, memory_order_relaxed))
            return true;
    }
    return false;
}

void hd_bus_wake_received(struct hd_shard *s)
{
    s->stats.wakes_received++;
}
