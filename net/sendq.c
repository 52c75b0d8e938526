/* sendq.c - a connection's send queue: (frame, offset, length) entries in chunks from the
 * shard's chunk pool, so an idle connection holds no queue memory. The shard keeps one emptied
 * chunk aside (net_shard.chunk_spare): a connection whose queue empties at every send, the
 * common case, takes it back at its next push without a round trip through the pool. Shard
 * thread only. */
#include <errno.h>

#include "net_impl.h"

int net_sendq_push(struct net_shard *ns, struct net_sendq *q, struct hd_frame *f, uint32_t off,
                   uint32_t len)
{
    struct net_sendq_chunk *c = q->last;
    if (c == NULL || c->tail == NET_SENDQ_CHUNK_ENTRIES) {
        struct net_sendq_chunk *n = ns->chunk_spare;
        if (n != NULL)
            ns->chunk_spare = NULL;
        else if ((n = hd_slab_get(ns->chunks)) == NULL)
            return -ENOBUFS;
        n->next = NULL;
        n->head = n->tail = 0;
        if (c)
            c->next = n;
        else
            q->first = n;
        q->last = n;
        c = n;
    }
    c->e[c->tail++] = (struct net_sendq_entry){.frame = f, .off = off, .len = len};
    q->count++;
    q->bytes += len;
    return 0;
}

struct net_sendq_entry *net_sendq_at(struct net_sendq *q, uint32_t index)
{
    for (struct net_sendq_chunk *c = q->first; c; c = c->next) {
        uint32_t n = (uint32_t)(c->tail - c->head);
        if (index < n)
            return &c->e[c->head + index];
        index -= n;
    }
    return NULL;
}

int net_sendq_insert(struct net_shard *ns, struct net_sendq *q, uint32_t index, struct hd_frame *f,
                     uint32_t off, uint32_t len)
{
    HD_ASSERT(index <= q->count);
    int rc = net_sendq_push(ns, q, f, off, len);
    if (rc < 0)
        return rc;
    /* One pass from index on: each entry takes the place of the one after it. */
    struct net_sendq_entry carry = {.frame = f, .off = off, .len = len};
    uint32_t i = 0;
    for (struct net_sendq_chunk *c = q->first; c; c = c->next) {
        for (uint16_t k = c->head; k < c->tail; k++, i++) {
            if (i < index)
                continue;
            struct net_sendq_entry t = c->e[k];
            c->e[k] = carry;
            carry = t;
        }
    }
    return 0;
}

void net_sendq_pop(struct net_shard *ns, struct hd_shard *s, struct net_sendq *q, bool unref)
{
    struct net_sendq_chunk *c = q->first;
    HD_ASSERT(c && c->head < c->tail);
    struct net_sendq_entry *e = &c->e[c->head++];
    q->count--;
    q->bytes -= e->len;
    if (unref && e->frame)
        hd_frame_unref(s, e->frame);
    if (c->head == c->tail) {
        q->first = c->next;
        if (q->first == NULL)
            q->last = NULL;
        HD_DASSERT(hd_slab_owns(ns->chunks, c)); /* as hd_slab_put would check */
        if (ns->chunk_spare == NULL)
            ns->chunk_spare = c; /* the pool's own: freed with it at the shard's end */
        else
            hd_slab_put(ns->chunks, c);
    }
}

void net_sendq_consume(struct net_shard *ns, struct hd_shard *s, struct net_sendq *q, uint64_t n)
{
    for (;;) {
        struct net_sendq_entry *e = net_sendq_at(q, 0);
        if (e == NULL) {
            HD_ASSERT(n == 0);
            return;
        }
        if (n < e->len) {
            e->off += (uint32_t)n;
            e->len -= (uint32_t)n;
            q->bytes -= n;
            return;
        }
        if (n == 0 && e->len > 0)
            return; /* zero-length entries (dropped ones) at the front go too */
        n -= e->len;
        net_sendq_pop(ns, s, q, true);
    }
}

void net_sendq_clear(struct net_shard *ns, struct hd_shard *s, struct net_sendq *q)
{
    while (q->count)
        net_sendq_pop(ns, s, q, true);
}
