/* conn_send.c - a connection's sending: queue frames (plaintext for a codec, or wire bytes),
 * flush once per tick as one sendmsg of up to NET_IOV_MAX iovecs with one send in flight per
 * connection (order kept), partial sends, watermarks with hysteresis, the write timeout, and
 * half close. Runs on the connection's shard.
 *
 * net_conn_send queues (frame, offset, length) with a reference (sendq.c: chunks of
 * NET_SENDQ_CHUNK_ENTRIES from a pool). A codec's plaintext waits in a second queue until the
 * flush asks the codec to encode it. Crossing send_high_bytes calls on_send_pressure(true),
 * falling under send_low_bytes calls it with false; past send_max_bytes a send fails with
 * -ENOBUFS; net_conn_drop_oldest lets an app's policy drop what waits longest.
 *
 * Small frames first: net_conn_send_urgent copies a control message (at most NET_URGENT_MAX,
 * 64 bytes) and inserts it ahead of what the kernel does not have yet, behind the entries of the
 * send in flight (without one, behind the first entry, which may be the rest of a partial send)
 * and behind the small entries at the front of the rest (earlier urgent messages keep their
 * order); on a codec's connection it goes ahead of the plaintext not yet encoded (what a codec
 * sealed is wire bytes; userspace TLS seals the whole queue at each flush, so there it passes
 * only what came in the same tick); under stacked codecs (wss) the same, in the top codec's input,
 * so the top codec frames it as one of the app's messages. The app's entries must be whole
 * messages: it goes between two. So that there is a backlog left to
 * pass, a send on a backed-up socket (the last sendmsg went in part) covers about what the last
 * one took (NET_SEND_BACKED_MIN at least) instead of NET_IOV_MAX entries: a send waiting for
 * room holds its entries, and a Pong queued behind them waited for ~260 KB of packets
 * (test_net_send_urgent). */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#include <hd/hd_fault.h>

#include "net_impl.h"

/* Entries in the queues between codec levels. */
static uint32_t mid_count(const struct net_conn *c)
{
    uint32_t n = 0;
    for (unsigned i = 0; i < NET_CODECS_MAX - 1; i++)
        n += c->mid[i].count;
    return n;
}

bool net_conn_queues_empty(const struct net_conn *c)
{
    return c->plain.count == 0 && mid_count(c) == 0 && c->wire.count == 0 &&
           !(c->flags & NET_F_ENCODE_DUE);
}

size_t net_conn_queued_bytes(const struct net_conn *c)
{
    uint64_t b = c->plain.bytes + c->wire.bytes;
    for (unsigned i = 0; i < NET_CODECS_MAX - 1; i++)
        b += c->mid[i].bytes;
    return (size_t)b;
}

void net_conn_update_pressure(struct net_conn *c)
{
    size_t q = net_conn_queued_bytes(c);
    uint32_t n = c->plain.count + mid_count(c) + c->wire.count;
    bool frames = c->send_high_frames != 0; /* 0: no entry watermark */
    if (!(c->flags & NET_F_SEND_PAUSED)) {
        /* The common case, every packet: under both high marks. */
        if (hd_likely(q < c->send_high && (!frames || n < c->send_high_frames)))
            return;
        c->flags |= NET_F_SEND_PAUSED;
        if (c->h->on_send_pressure)
            c->h->on_send_pressure(c, true);
    } else if (q <= c->send_low && (!frames || n <= c->send_low_frames)) {
        c->flags &= ~NET_F_SEND_PAUSED;
        if (c->h->on_send_pressure)
            c->h->on_send_pressure(c, false);
    }
}

static int queue_checked(struct net_conn *c, struct net_sendq *q, struct hd_frame *f, uint32_t off,
                         uint32_t len)
{
    if (c->state == NET_CONN_CLOSING || c->state == NET_CONN_CLOSED ||
        (c->flags & (NET_F_FLUSH_CLOSE | NET_F_SHUT_WR)))
        return -EPIPE;
    if (net_conn_queued_bytes(c) + len > c->send_max)
        return -ENOBUFS;
    HD_ASSERT((uint64_t)off + len <= f->size);
    int rc = net_sendq_push(c->ns, q, f, off, len);
    if (rc < 0)
        return rc;
    hd_frame_ref(f);
    if (c->state == NET_CONN_OPEN)
        hd_flush_request(c->shard, &c->flush);
    net_conn_update_pressure(c);
    return 0;
}

int net_conn_send(struct net_conn *c, struct hd_frame *f, uint32_t off, uint32_t len)
{
    return queue_checked(c, c->codecs_n ? &c->plain : &c->wire, f, off, len);
}

int net_conn_send_class(struct net_conn *c, struct hd_frame *f, uint32_t off, uint32_t len,
                        unsigned k)
{
    /* The common case: nothing waits and the socket keeps up, so the frame goes straight in. */
    if (hd_likely(!(c->flags & (NET_F_SEND_PAUSED | NET_F_CLASS_WAIT))))
        return queue_checked(c, c->codecs_n ? &c->plain : &c->wire, f, off, len);
    return net_conn_class_push(c, f, off, len, k);
}

int net_conn_send_copy(struct net_conn *c, const void *data, size_t len)
{
    const uint8_t *p = data;
    while (len > 0) {
        struct hd_frame *f = hd_frame_get(c->shard, len);
        if (f == NULL)
            f = hd_frame_get(c->shard, 1); /* larger than any class: go in pieces */
        if (f == NULL)
            return -ENOMEM;
        uint32_t n = len < f->size ? (uint32_t)len : f->size;
        memcpy(f->data, p, n);
        f->len = n;
        int rc = net_conn_send(c, f, 0, n);
        hd_frame_unref(c->shard, f);
        if (rc < 0)
            return rc;
        p += n;
        len -= n;
    }
    return 0;
}

int net_conn_send_urgent(struct net_conn *c, const void *data, size_t len)
{
    if (len == 0 || len > NET_URGENT_MAX)
        return -EINVAL;
    if (c->state == NET_CONN_CLOSING || c->state == NET_CONN_CLOSED ||
        (c->flags & (NET_F_FLUSH_CLOSE | NET_F_SHUT_WR)))
        return -EPIPE;
    if (net_conn_queued_bytes(c) + len > c->send_max)
        return -ENOBUFS;
    struct net_sendq *q = c->codecs_n ? &c->plain : &c->wire;
    /* Past what the kernel has; without a send in flight the first entry may be the rest of one
     * that went in part (a send that found no context, a connection moving). */
    uint32_t at = c->codecs_n ? 0 : c->send_ctx ? c->send_ctx->entries : (q->count ? 1u : 0u);
    while (at < q->count && net_sendq_at(q, at)->len <= NET_URGENT_MAX)
        at++;
    struct hd_frame *f = hd_frame_get(c->shard, len);
    if (f == NULL)
        return -ENOMEM;
    memcpy(f->data, data, len);
    f->len = (uint32_t)len;
    int rc = net_sendq_insert(c->ns, q, at, f, 0, (uint32_t)len); /* the reference moves */
    if (rc < 0) {
        hd_frame_unref(c->shard, f);
        return rc;
    }
    if (c->state == NET_CONN_OPEN)
        hd_flush_request(c->shard, &c->flush);
    net_conn_update_pressure(c);
    return 0;
}

void net_conn_encode_request(struct net_conn *c)
{
    c->flags |= NET_F_ENCODE_DUE;
    if (c->state == NET_CONN_OPEN) /* from inside encode: the flush runs again next tick */
        hd_flush_request(c->shard, &c->flush);
}

int net_conn_wire_queue(struct net_conn *c, struct hd_frame *f, uint32_t off, uint32_t len)
{
    /* Called by codecs: the reference moves to the queue. A codec's output is the plaintext of
     * the one below it (level 0's: wire bytes). */
    int rc = net_sendq_push(c->ns, net_conn_level_out(c, c->codec_at), f, off, len);
    if (rc < 0) {
        hd_frame_unref(c->shard, f);
        return rc;
    }
    if (c->state == NET_CONN_OPEN && !(c->flags & NET_F_ENCODING))
        hd_flush_request(c->shard, &c->flush); /* from decode; encode runs inside a flush */
    return 0;
}

struct hd_frame *net_conn_plain_take(struct net_conn *c, uint32_t *off, uint32_t *len)
{
    /* A codec below another takes what that one encoded. */
    struct net_sendq *q = net_conn_level_in(c, c->codec_at);
    struct net_sendq_entry *e = net_sendq_at(q, 0);
    if (e == NULL)
        return NULL;
    struct hd_frame *f = e->frame;
    *off = e->off;
    *len = e->len;
    net_sendq_pop(c->ns, c->shard, q, false);
    return f;
}

int net_conn_plain_pass(struct net_conn *c)
{
    uint32_t off, len;
    struct hd_frame *f;
    while ((f = net_conn_plain_take(c, &off, &len)) != NULL) {
        int rc = net_conn_wire_queue(c, f, off, len);
        if (rc < 0)
            return rc;
    }
    return 0;
}

unsigned net_conn_unsent_count(const struct net_conn *c)
{
    if (c->codecs_n)
        return c->plain.count;
    return c->wire.count - (c->send_ctx ? c->send_ctx->entries : 0);
}

uint32_t net_conn_drop_oldest(struct net_conn *c)
{
    struct net_sendq *q = c->codecs_n ? &c->plain : &c->wire;
    uint32_t skip = (!c->codecs_n && c->send_ctx) ? c->send_ctx->entries : 0;
    /* The oldest entry not in the kernel's hands; earlier drops left zero-length tombstones. */
    for (uint32_t i = skip; i < q->count; i++) {
        struct net_sendq_entry *e = net_sendq_at(q, i);
        if (e->frame == NULL)
            continue;
        uint32_t len = e->len;
        if (i == 0) {
            net_sendq_pop(c->ns, c->shard, q, true);
        } else {
            /* Behind entries in flight: leave a tombstone the next send skips. */
            hd_frame_unref(c->shard, e->frame);
            e->frame = NULL;
            q->bytes -= e->len;
            e->len = 0;
        }
        net_conn_update_pressure(c);
        return len;
    }
    return 0;
}

static void shutdown_done(struct hd_op *op, int32_t res, uint32_t flags)
{
    (void)res, (void)flags;
    struct net_conn *c = hd_container_of(op, struct net_conn, ctl_op);
    c->flags |= NET_F_WR_SHUT;
    net_conn_maybe_finish(c);
}

/* The queues just became empty: finish a pending flush-close or half close. */
static void queues_drained(struct net_conn *c)
{
    hd_timer_stop(c->shard, &c->write_timer);
    if (c->flags & NET_F_FLUSH_CLOSE) {
        c->flags &= ~NET_F_FLUSH_CLOSE;
        net_conn_close(c, c->close_reason, false);
        return;
    }
    if ((c->flags & NET_F_SHUT_WR) && !(c->flags & NET_F_WR_SHUT) && !hd_op_busy(&c->ctl_op)) {
        c->ctl_op.fn = shutdown_done;
        struct io_uring_sqe *sqe = hd_op_sqe(c->shard, &c->ctl_op);
        if (sqe)
            io_uring_prep_shutdown(sqe, c->fd, SHUT_WR);
    }
}

void net_conn_shutdown_write(struct net_conn *c)
{
    if (c->state != NET_CONN_OPEN || (c->flags & NET_F_SHUT_WR))
        return;
    c->flags |= NET_F_SHUT_WR;
    if (net_conn_queues_empty(c) && !c->send_ctx)
        queues_drained(c);
    else
        hd_flush_request(c->shard, &c->flush);
}

/* A fault (hd_fault.h): send only the first 1..bytes-1 of these bytes, as a kernel that took
 * part of a sendmsg would; the completion's partial-send path sends the rest. */
static void send_ctx_cut(struct net_send_ctx *x)
{
    uint64_t keep =
        1 + hd_fault_below(x->bytes - 1 > UINT32_MAX ? UINT32_MAX : (uint32_t)(x->bytes - 1));
    x->bytes = keep;
    for (uint32_t i = 0; i < x->entries; i++) {
        if (x->iov[i].iov_len >= keep) {
            x->iov[i].iov_len = keep;
            x->entries = i + 1;
            break;
        }
        keep -= x->iov[i].iov_len;
    }
    x->msg.msg_iovlen = x->entries;
}

/* One sendmsg's iovecs: the wire queue's first NET_IOV_MAX entries; while the socket is backed
 * up, only as many as cover about what the last send took (NET_SEND_BACKED_MIN at least). */
static void send_ctx_fill(struct net_conn *c, struct net_send_ctx *x)
{
    uint32_t n = 0;
    uint64_t bytes = 0, cap = UINT64_MAX;
    if (c->flags & NET_F_SEND_BACKED) {
        cap = (uint64_t)c->backed_kib * 1024u;
        if (cap < NET_SEND_BACKED_MIN)
            cap = NET_SEND_BACKED_MIN;
    }
    for (struct net_sendq_chunk *ch = c->wire.first; ch && n < NET_IOV_MAX && bytes < cap;
         ch = ch->next) {
        for (uint16_t i = ch->head; i < ch->tail && n < NET_IOV_MAX && bytes < cap; i++, n++) {
            struct hd_frame *f = ch->e[i].frame;
            x->iov[n].iov_base = f ? f->data + ch->e[i].off : NULL; /* NULL: a dropped entry */
            x->iov[n].iov_len = ch->e[i].len;
            bytes += ch->e[i].len;
        }
    }
    memset(&x->msg, 0, sizeof(x->msg));
    x->msg.msg_iov = x->iov;
    x->msg.msg_iovlen = n;
    x->entries = n;
    x->bytes = bytes;
    if (bytes > 1 && hd_fault(HD_FAULT_SHORT_SEND))
        send_ctx_cut(x);
}

int net_conn_upper_encode(struct net_conn *c)
{
    int rc = 0;
    for (unsigned level = c->codecs_n; rc == 0 && level-- > 1;) {
        if (net_conn_level_in(c, level)->count == 0)
            continue;
        uint32_t encoding = c->flags & NET_F_ENCODING;
        c->flags |= NET_F_ENCODING;
        uint8_t at = net_conn_codec_at(c, level);
        rc = c->codecs[level].codec->encode(c, c->codecs[level].state);
        c->codec_at = at;
        c->flags = (c->flags & ~NET_F_ENCODING) | encoding;
    }
    return rc;
}

void net_conn_flush_now(struct net_conn *c)
{
    if (c->state != NET_CONN_OPEN)
        return;
    if (hd_unlikely(c->flags & (NET_F_MIGRATING | NET_F_CLASS_WAIT | NET_F_CLASS_DRAIN))) {
        if (c->flags & NET_F_MIGRATING)
            return;                    /* a moving one waits */
        net_conn_class_feed(c, false); /* send classes (conn_class.c), also with a send in flight */
        if (c->state != NET_CONN_OPEN)
            return; /* an app's callback closed it */
    }
    if (c->send_ctx != NULL)
        return; /* one send in flight: its completion flushes again */
    int rc = net_conn_upper_encode(c);
    if (rc < 0) {
        net_conn_close(c, rc, false);
        return;
    }
    if (c->codecs[0].codec && (net_conn_level_in(c, 0)->count || (c->flags & NET_F_ENCODE_DUE))) {
        c->flags &= ~NET_F_ENCODE_DUE; /* encode asks again if it keeps plaintext back */
        c->flags |= NET_F_ENCODING;
        uint8_t at = net_conn_codec_at(c, 0);
        rc = c->codecs[0].codec->encode(c, c->codecs[0].state);
        c->codec_at = at;
        c->flags &= ~NET_F_ENCODING;
        if (rc < 0) {
            net_conn_close(c, rc, false);
            return;
        }
    }
    if (c->wire.count == 0) {
        if (net_conn_queues_empty(c))
            queues_drained(c);
        return;
    }
    struct net_send_ctx *x = hd_slab_get(c->ns->send_ctxs);
    if (x == NULL) { /* every context in use: try again next tick */
        hd_flush_request(c->shard, &c->flush);
        return;
    }
    send_ctx_fill(c, x);
    struct io_uring_sqe *sqe = hd_op_sqe(c->shard, &c->send_op);
    if (sqe == NULL) {
        hd_slab_put(c->ns->send_ctxs, x);
        hd_flush_request(c->shard, &c->flush);
        return;
    }
    io_uring_prep_sendmsg(sqe, c->fd, &x->msg, MSG_NOSIGNAL);
    if (!(c->flags & NET_F_SEND_BACKED)) /* the last one fit: this one most likely does too */
        hd_op_expect_inline(c->shard);
    c->send_ctx = x;
    c->stats.sends++;
    if (c->write_timeout_ms && !hd_timer_armed(&c->write_timer))
        hd_timer_start(c->shard, &c->write_timer, c->write_timeout_ms);
}

void net_conn_send_done(struct hd_op *op, int32_t res, uint32_t flags)
{
    (void)flags;
    struct net_conn *c = hd_container_of(op, struct net_conn, send_op);
    struct net_send_ctx *x = c->send_ctx;
    uint64_t asked = x->bytes;
    c->send_ctx = NULL;
    hd_slab_put(c->ns->send_ctxs, x);
    c->depth++;
    if (res > 0) {
        if ((uint64_t)res < asked) { /* the socket's buffer is full */
            uint64_t kib = (uint64_t)res / 1024u;
            c->backed_kib = (uint16_t)(kib > UINT16_MAX ? UINT16_MAX : kib);
            c->flags |= NET_F_SEND_BACKED;
        } else {
            c->flags &= ~NET_F_SEND_BACKED;
        }
        net_sendq_consume(c->ns, c->shard, &c->wire, (uint64_t)res);
        c->stats.bytes_out += (uint64_t)res;
        if (c->write_timeout_ms) /* progress: the deadline starts over */
            hd_timer_start(c->shard, &c->write_timer, c->write_timeout_ms);
        net_conn_update_pressure(c);
        if (c->state == NET_CONN_OPEN)
            net_conn_flush_now(c);
    } else if (res < 0 && res != -ECANCELED && c->state == NET_CONN_OPEN) {
        net_conn_close(c, res == -EPIPE ? -ECONNRESET : res, false);
    }
    c->depth--;
    net_conn_maybe_finish(c);
}
