/* kit_pipe.c - two connections of one shard piped into each other: what one receives is queued
 * on the other, with backpressure (a side whose peer's send queue is above its high watermark
 * stops receiving until it falls under the low one), half closes carried through, and one
 * callback once both have closed. The pipe is the caller's memory (embedded in its session);
 * it takes over both connections' handlers. Runs on the connections' shard. */
#include <errno.h>

#include <hd/kit.h>

static struct kit_pipe *pipe_of(struct net_conn *c, unsigned *side)
{
    struct kit_pipe *p = net_conn_app(c);
    HD_ASSERT(p != NULL && (p->c[0] == c || p->c[1] == c));
    *side = p->c[0] == c ? 0 : 1;
    return p;
}

static ssize_t pipe_data(struct net_conn *c, const uint8_t *data, size_t len)
{
    unsigned i;
    struct kit_pipe *p = pipe_of(c, &i);
    struct net_conn *other = p->c[!i];
    if (other == NULL || net_conn_state(other) != NET_CONN_OPEN) {
        p->stats.dropped += len; /* the other side is gone: this one closes with it */
        return (ssize_t)len;
    }
    int rc = net_conn_send_copy(other, data, len);
    if (rc == -ENOBUFS) { /* over the other's cap (its high mark paused us already): wait */
        net_conn_pause_recv(c, true);
        return 0;
    }
    if (rc < 0)
        return rc;
    p->stats.bytes[i] += len;
    return (ssize_t)len;
}

/* The other side's send queue crossed a watermark: stop or resume this side's receiving. */
static void pipe_pressure(struct net_conn *c, bool paused)
{
    unsigned i;
    struct kit_pipe *p = pipe_of(c, &i);
    struct net_conn *src = p->c[!i];
    if (paused)
        p->stats.pauses++;
    if (src && net_conn_state(src) == NET_CONN_OPEN)
        net_conn_pause_recv(src, paused); /* resuming offers src's kept bytes, inside this call */
}

static void pipe_eof(struct net_conn *c)
{
    unsigned i;
    struct kit_pipe *p = pipe_of(c, &i);
    p->eof |= (uint8_t)(1u << i);
    if (p->eof == 3) { /* both directions ended: close both once their queues are sent */
        net_conn_close(c, 0, true);
        if (p->c[!i])
            net_conn_close(p->c[!i], 0, true);
    } else if (p->c[!i]) {
        net_conn_shutdown_write(p->c[!i]); /* after what is queued */
    }
}

static void pipe_close(struct net_conn *c, int reason)
{
    unsigned i;
    struct kit_pipe *p = pipe_of(c, &i);
    p->c[i] = NULL;
    if (p->reason == 0)
        p->reason = reason;
    if (p->c[!i]) {
        net_conn_close(p->c[!i], reason, true); /* what it still has queued goes out first */
        return;
    }
    if (p->done)
        p->done(p, p->arg); /* both closed: p is the caller's again */
}

static const struct net_conn_handler pipe_handler = {
    .on_data = pipe_data,
    .on_send_pressure = pipe_pressure,
    .on_eof = pipe_eof,
    .on_close = pipe_close,
};

int kit_pipe_start(struct kit_pipe *p, struct net_conn *a, struct net_conn *b,
                   kit_pipe_done_fn *done, void *arg)
{
    if (a == b || net_conn_shard(a) != net_conn_shard(b))
        return -EINVAL;
    if (net_conn_state(a) != NET_CONN_OPEN || net_conn_state(b) != NET_CONN_OPEN)
        return -EPIPE;
    *p = (struct kit_pipe){.c = {a, b}, .done = done, .arg = arg};
    net_conn_set_app(a, &pipe_handler, p);
    net_conn_set_app(b, &pipe_handler, p);
    /* Bytes the previous handler kept (what followed a pairing line) flow now: a side it
     * paused is resumed (its kept bytes are offered inside this call), the others' are offered
     * again on the next tick. */
    int rc = 0;
    for (unsigned i = 0; i < 2 && rc == 0; i++) {
        if (p->c[i] && net_conn_state(p->c[i]) == NET_CONN_OPEN)
            net_conn_pause_recv(p->c[i], false);
        if (p->c[i] && net_conn_state(p->c[i]) == NET_CONN_OPEN)
            rc = net_conn_reoffer(p->c[i]);
    }
    return rc;
}
