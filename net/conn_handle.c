/* conn_handle.c - connections addressed by handle from any shard, and re-offering the bytes an
 * app kept. A connection's handle (shard, slot, generation: struct hd_handle) is opened when the
 * connection is made and closed just before on_close, so a copy held anywhere goes stale when
 * the connection goes. Sends and closes by handle travel as bus messages to the handle's shard
 * (the own shard included: hd_bus_send queues those for the next drain), where the connection
 * is looked up again; a message for a connection that is gone is dropped and counted. */
#include <errno.h>

#include "net_impl.h"

struct hd_handle net_conn_handle(const struct net_conn *c)
{
    return c->handle;
}

struct net_conn *net_conn_by_handle(struct hd_shard *s, struct hd_handle h)
{
    struct net_conn *c = hd_handle_get(s, h);
    HD_ASSERT(c == NULL || c->shard == s);
    return c;
}

const struct net_shard_counters *net_shard_counters(struct hd_shard *s)
{
    return &net_shard_of(s)->counters;
}

/* u64[1] of a send: off in the high half, len in the low. */
static void send_msg(struct hd_shard *s, const struct hd_msg *m)
{
    struct hd_frame *f = m->ptr;
    struct net_conn *c = net_conn_by_handle(s, (struct hd_handle){m->u64[0]});
    struct net_shard *ns = net_shard_of(s);
    if (c == NULL) {
        ns->counters.handle_stale++;
    } else if (net_conn_send(c, f, (uint32_t)(m->u64[1] >> 32), (uint32_t)m->u64[1]) < 0) {
        ns->counters.handle_refused++;
    }
    hd_frame_unref(s, f); /* the message's reference */
}

int net_conn_send_to(struct hd_shard *s, struct hd_handle h, struct hd_frame *f, uint32_t off,
                     uint32_t len)
{
    HD_ASSERT(f != NULL);
    if (h.v == 0 || hd_handle_shard(h) >= hd_shard_count(s))
        return -EINVAL;
    hd_frame_ref(f);
    struct hd_msg m = {.fn = send_msg, .ptr = f, .u64 = {h.v, ((uint64_t)off << 32) | len}};
    int rc = hd_bus_send(s, hd_handle_shard(h), &m);
    if (rc < 0)
        hd_frame_unref(s, f);
    return rc;
}

#define CLOSE_FLUSH (UINT64_C(1) << 32)

static void close_msg(struct hd_shard *s, const struct hd_msg *m)
{
    struct net_conn *c = net_conn_by_handle(s, (struct hd_handle){m->u64[0]});
    if (c == NULL) {
        net_shard_of(s)->counters.handle_stale++;
        return;
    }
    net_conn_close(c, (int)(int32_t)(uint32_t)m->u64[1], (m->u64[1] & CLOSE_FLUSH) != 0);
}

int net_conn_close_to(struct hd_shard *s, struct hd_handle h, int reason, bool flush)
{
    if (h.v == 0 || hd_handle_shard(h) >= hd_shard_count(s))
        return -EINVAL;
    struct hd_msg m = {.fn = close_msg,
                       .u64 = {h.v, (uint64_t)(uint32_t)reason | (flush ? CLOSE_FLUSH : 0)}};
    return hd_bus_send_control(s, hd_handle_shard(h), &m); /* not lost to the sends it follows */
}

/* ---------------------------------------------------------------- re-offer */

static void reoffer_task(struct hd_shard *s, void *obj)
{
    (void)s;
    struct net_conn *c = obj;
    c->flags &= ~NET_F_REOFFER;
    /* Paused meanwhile (the resume offers them), closing or moving: nothing to do now. */
    if (c->state != NET_CONN_OPEN || (c->flags & (NET_F_RECV_PAUSED | NET_F_MIGRATING)))
        return;
    c->depth++;
    int rc = net_conn_replay(c);
    if (rc < 0)
        net_conn_close(c, rc, false);
    c->depth--;
    net_conn_maybe_finish(c);
}

int net_conn_reoffer(struct net_conn *c)
{
    HD_ASSERT(hd_shard_current() == c->shard);
    if (c->state != NET_CONN_OPEN)
        return -EPIPE;
    if (c->flags & NET_F_REOFFER)
        return 0; /* one offer is already due */
    int rc = hd_defer_handle(c->shard, reoffer_task, c->handle);
    if (rc == 0)
        c->flags |= NET_F_REOFFER;
    return rc;
}
