/* conn_class.c - a connection's send classes (net.h, net_conn_send_class): bounded queues of
 * frames that wait for room in the send queue, each with its drop policy, and the writer that
 * moves them into the send queue at each flush, one from each class in turn, up to the high
 * watermark. Their entries are the send queue's (sendq.c: chunks from the shard's pool, the
 * time each went in kept beside it), so a connection that keeps up holds none. Runs on the
 * connection's shard. */
#include <errno.h>

#include "net_impl.h"

static const struct net_send_classes *classes(const struct net_conn *c)
{
    return c->h->send_classes;
}

unsigned net_conn_class_count(const struct net_conn *c, unsigned k)
{
    if (k < NET_SEND_CLASSES_MAX)
        return c->classq[k].count;
    unsigned n = 0;
    for (unsigned i = 0; i < NET_SEND_CLASSES_MAX; i++)
        n += c->classq[i].count;
    return n;
}

bool net_conn_send_paused(const struct net_conn *c)
{
    return (c->flags & NET_F_SEND_PAUSED) != 0;
}

/* Take the oldest entry of class k out of its queue (*at: when it went in): the reference is
 * the caller's. */
static struct net_sendq_entry class_take(struct net_conn *c, unsigned k, uint32_t *at)
{
    struct net_sendq *q = &c->classq[k];
    struct net_sendq_chunk *ch = q->first;
    struct net_sendq_entry e = ch->e[ch->head];
    *at = ch->at[ch->head];
    net_sendq_pop(c->ns, c->shard, q, false);
    return e;
}

/* Drop an entry taken out of class k at `at` (its enqueue time, hd_now_ms's low 32 bits). */
static void class_drop(struct net_conn *c, struct net_sendq_entry e, unsigned k, uint32_t at,
                       enum net_send_drop why, bool notify)
{
    const struct net_send_classes *sc = classes(c);
    if (notify && sc && sc->on_drop)
        sc->on_drop(c, e.frame, e.off, e.len, k, why, (uint32_t)hd_now_ms(c->shard) - at);
    hd_frame_unref(c->shard, e.frame);
}

static bool classes_empty(const struct net_conn *c)
{
    for (unsigned i = 0; i < NET_SEND_CLASSES_MAX; i++)
        if (c->classq[i].count)
            return false;
    return true;
}

/* The send queue is backed up or frames wait already: the frame waits in its class. */
int net_conn_class_push(struct net_conn *c, struct hd_frame *f, uint32_t off, uint32_t len,
                        unsigned k)
{
    const struct net_send_classes *sc = classes(c);
    HD_ASSERT(sc != NULL && k < sc->count && sc->count <= NET_SEND_CLASSES_MAX);
    HD_ASSERT((uint64_t)off + len <= f->size);
    if (c->state == NET_CONN_CLOSING || c->state == NET_CONN_CLOSED ||
        (c->flags & (NET_F_FLUSH_CLOSE | NET_F_SHUT_WR)))
        return -EPIPE;
    /* Moving (net_conn_migrate, net_migrate_begin): the classes were drained when it began and
     * do not travel, the send queue does (send_max_bytes bounds it meanwhile). */
    if (c->flags & NET_F_MIGRATING)
        return net_conn_send(c, f, off, len);
    const struct net_send_class *cl = &sc->cls[k];
    struct net_sendq *q = &c->classq[k];
    for (unsigned t = 0; t <= cl->tries; t++) {
        if (q->count < cl->depth) {
            if (net_sendq_push(c->ns, q, f, off, len) < 0)
                break; /* no entry in the pool: as a full class */
            q->last->at[q->last->tail - 1] = (uint32_t)hd_now_ms(c->shard);
            hd_frame_ref(f);
            c->flags |= NET_F_CLASS_WAIT | NET_F_CLASS_DRAIN;
            if (c->state == NET_CONN_OPEN)
                hd_flush_request(c->shard, &c->flush);
            return 1;
        }
        if (t == cl->tries)
            break;
        uint32_t at;
        struct net_sendq_entry old = class_take(c, k, &at);
        class_drop(c, old, k, at, NET_SEND_DROP_OLDEST, true);
    }
    if (sc->on_drop)
        sc->on_drop(c, f, off, len, k, NET_SEND_DROP_NEW, 0);
    return -ENOSPC;
}

void net_conn_class_feed(struct net_conn *c, bool all)
{
    const struct net_send_classes *sc = classes(c);
    if (sc == NULL) {
        c->flags &= ~(NET_F_CLASS_WAIT | NET_F_CLASS_DRAIN);
        return;
    }
    struct net_sendq *dst = c->codecs_n ? &c->plain : &c->wire;
    uint32_t now = (uint32_t)hd_now_ms(c->shard);
    unsigned turn = 0;
    while ((c->flags & NET_F_CLASS_WAIT) && (all || !(c->flags & NET_F_SEND_PAUSED)) &&
           c->state == NET_CONN_OPEN) {
        unsigned k = turn++ % sc->count;
        if (c->classq[k].count == 0) {
            if (classes_empty(c))
                c->flags &= ~NET_F_CLASS_WAIT;
            continue;
        }
        uint32_t at;
        struct net_sendq_entry e = class_take(c, k, &at);
        if (net_sendq_push(c->ns, dst, e.frame, e.off, e.len) < 0) {
            class_drop(c, e, k, at, NET_SEND_DROP_ERROR, true);
            continue;
        }
        if (sc->on_taken) /* the reference is the send queue's now */
            sc->on_taken(c, e.frame, e.off, e.len, k, now - at);
        net_conn_update_pressure(c);
    }
    if ((c->flags & (NET_F_CLASS_WAIT | NET_F_CLASS_DRAIN | NET_F_SEND_PAUSED)) ==
            NET_F_CLASS_DRAIN &&
        c->state == NET_CONN_OPEN) {
        c->flags &= ~NET_F_CLASS_DRAIN;
        if (sc->on_drained)
            sc->on_drained(c);
    }
}

void net_conn_class_drain(struct net_conn *c)
{
    if (c->flags & (NET_F_CLASS_WAIT | NET_F_CLASS_DRAIN))
        net_conn_class_feed(c, true);
}

void net_conn_class_clear(struct net_conn *c, bool notify)
{
    for (unsigned k = 0; k < NET_SEND_CLASSES_MAX; k++) {
        while (c->classq[k].count) {
            uint32_t at;
            struct net_sendq_entry e = class_take(c, k, &at);
            class_drop(c, e, k, at, NET_SEND_DROP_CLOSED, notify);
        }
    }
    c->flags &= ~(NET_F_CLASS_WAIT | NET_F_CLASS_DRAIN);
}
