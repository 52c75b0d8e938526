/* conn_quiet.c - quiet points for layers that rekey the socket under a connection (kTLS): stop
 * receiving and wait until no op is in flight and the wire queue is empty, keep what arrives
 * meanwhile raw and in order, read exact byte counts, send typed records, then resume. Runs on
 * the connection's shard. */
#include <errno.h>
#include <linux/tls.h>
#include <stdlib.h>
#include <string.h>

#include "net_impl.h"

/* ---------------------------------------------------------------- quiet points */

int net_conn_quiet_begin(struct net_conn *c)
{
    if (c->codecs[0].codec == NULL || c->codecs[0].codec->quiesced == NULL)
        return -EINVAL;
    if (c->state != NET_CONN_OPEN || (c->flags & NET_F_MIGRATING))
        return -EBUSY;
    int rc = net_conn_hold_set(c, NET_HOLD_QUIET); /* from steady or carrying, or another round */
    if (rc < 0)
        return rc;
    c->flags |= NET_F_QUIET_WAIT;
    if (hd_op_busy(&c->recv_op) && !(c->flags & NET_F_QUIET_READ))
        hd_op_cancel(c->shard, &c->recv_op); /* its last CQE (or the flush) runs the check */
    hd_flush_request(c->shard, &c->flush);
    return 0;
}

void net_conn_quiet_end(struct net_conn *c)
{
    c->flags &= ~NET_F_QUIET_WAIT;
    if (c->hold == NET_HOLD_QUIET_MOVE) /* else: not quiet now */
        net_conn_hold_set(c, NET_HOLD_MOVE);
    else if (c->hold == NET_HOLD_QUIET) /* bytes kept meanwhile are carried until replayed */
        net_conn_hold_set(c, c->move->pending_head ? NET_HOLD_CARRY : NET_HOLD_NONE);
    if (c->state != NET_CONN_OPEN)
        return;
    c->depth++;
    int rc = net_conn_replay(c); /* the kept bytes, through the codec now installed */
    if (rc < 0)
        net_conn_close(c, rc, false);
    net_conn_recv_arm(c);
    if (c->state == NET_CONN_OPEN && !net_conn_queues_empty(c))
        hd_flush_request(c->shard, &c->flush);
    c->depth--;
    net_conn_maybe_finish(c);
}

/* Copy held ring buffers into pending frames (same order), so that bytes read into frames
 * can follow them. Returns 0 or -ENOBUFS (frame pool exhausted; what was copied stays). */
static int held_to_pending(struct net_conn *c)
{
    struct net_shard *ns = c->ns;
    while (c->held_head != NET_BID_NONE) {
        uint16_t bid = c->held_head;
        struct hd_frame *f = hd_frame_get(c->shard, ns->held_len[bid]);
        if (f == NULL)
            return -ENOBUFS;
        memcpy(f->data, net_bufring_addr(ns, bid), ns->held_len[bid]);
        f->len = ns->held_len[bid];
        f->app_flags = ns->held_type[bid];
        int rc = net_conn_pending_add(c, f); /* quiet: the carrying state is there */
        HD_ASSERT(rc == 0);
        (void)rc;
        c->held_head = ns->held_next[bid];
        if (c->held_head == NET_BID_NONE)
            c->held_tail = NET_BID_NONE;
        net_bufring_recycle(ns, bid);
    }
    return 0;
}

int net_conn_quiet_read(struct net_conn *c, size_t len)
{
    if (!(c->flags & NET_F_QUIET) || c->state != NET_CONN_OPEN || hd_op_busy(&c->recv_op))
        return -EBUSY;
    int rc = held_to_pending(c);
    if (rc < 0)
        return rc;
    struct hd_frame *f = hd_frame_get(c->shard, len);
    if (f == NULL)
        return -ENOBUFS;
    struct io_uring_sqe *sqe = hd_op_sqe(c->shard, &c->recv_op);
    if (sqe == NULL) {
        hd_frame_unref(c->shard, f);
        return -EBUSY;
    }
    rc = net_conn_pending_add(c, f); /* len 0 until the read completes; quiet: cannot fail */
    HD_ASSERT(rc == 0);
    io_uring_prep_recv(sqe, c->fd, f->data, len, 0);
    c->flags = (c->flags & ~NET_F_RECV_TYPED) | NET_F_QUIET_READ;
    return 0;
}

static void quiet_send_done(struct hd_op *op, int32_t res, uint32_t flags)
{
    (void)flags;
    struct net_conn *c = hd_container_of(op, struct net_conn, ctl_op);
    struct net_send_ctx *x = c->send_ctx;
    uint64_t want = x->bytes;
    c->send_ctx = NULL;
    hd_slab_put(c->ns->send_ctxs, x);
    if (res > 0)
        c->stats.bytes_out += (uint64_t)res;
    if (c->state == NET_CONN_OPEN && res >= 0 && (uint64_t)res == want)
        c->flags |= NET_F_QUIET_WAIT;
    else if (c->state == NET_CONN_OPEN)
        net_conn_close(c, res < 0 ? (res == -EPIPE ? -ECONNRESET : res) : -EIO, false);
    net_conn_maybe_finish(c);
}

int net_conn_quiet_sendmsg(struct net_conn *c, int level, int type, const void *cdata, size_t clen,
                           const void *data, size_t len)
{
    if (!(c->flags & NET_F_QUIET) || c->state != NET_CONN_OPEN || c->send_ctx != NULL ||
        hd_op_busy(&c->ctl_op))
        return -EBUSY;
    if (len == 0 || len > NET_QUIET_MSG_MAX || clen > NET_QUIET_CONTROL_MAX)
        return -EMSGSIZE;
    struct net_send_ctx *x = hd_slab_get(c->ns->send_ctxs);
    if (x == NULL)
        return -ENOMEM;
    memset(&x->msg, 0, sizeof(x->msg));
    memset(&x->control, 0, sizeof(x->control));
    memcpy(x->payload, data, len);
    x->iov[0].iov_base = x->payload;
    x->iov[0].iov_len = len;
    x->msg.msg_iov = x->iov;
    x->msg.msg_iovlen = 1;
    x->msg.msg_control = x->control.buf;
    x->msg.msg_controllen = CMSG_SPACE(clen);
    struct cmsghdr *h = CMSG_FIRSTHDR(&x->msg);
    h->cmsg_level = level;
    h->cmsg_type = type;
    h->cmsg_len = CMSG_LEN(clen);
    memcpy(CMSG_DATA(h), cdata, clen);
    x->entries = 0;
    x->bytes = len;
    c->ctl_op.fn = quiet_send_done;
    struct io_uring_sqe *sqe = hd_op_sqe(c->shard, &c->ctl_op);
    if (sqe == NULL) {
        hd_slab_put(c->ns->send_ctxs, x);
        return -EBUSY;
    }
    io_uring_prep_sendmsg(sqe, c->fd, &x->msg, MSG_NOSIGNAL);
    c->send_ctx = x; /* a send is in flight: flushes wait for it */
    c->stats.sends++;
    return 0;
}

/* The kept bytes, visited in arrival order (codec tail, pending frames, held ring buffers):
 * counted in seen, and bytes [off, off + len) copied to out when out is set. */
struct kept_walk {
    size_t off, len, seen, copied;
    uint8_t *out;
};

static void kept_piece(struct kept_walk *k, const uint8_t *p, size_t n)
{
    if (k->out && k->seen + n > k->off && k->copied < k->len) {
        size_t from = k->off > k->seen ? k->off - k->seen : 0;
        size_t take = n - from < k->len - k->copied ? n - from : k->len - k->copied;
        memcpy(k->out + k->copied, p + from, take);
        k->copied += take;
    }
    k->seen += n;
}

static void kept_walk(const struct net_conn *c, struct kept_walk *k)
{
    if (c->codecs[0].tail)
        kept_piece(k, c->codecs[0].tail->data, c->codecs[0].tail->len);
    for (const struct hd_frame *f = net_conn_pending(c); f; f = f->next)
        kept_piece(k, f->data, f->len);
    for (uint16_t b = c->held_head; b != NET_BID_NONE; b = c->ns->held_next[b])
        kept_piece(k, net_bufring_addr(c->ns, b), c->ns->held_len[b]);
}

size_t net_conn_kept_bytes(const struct net_conn *c)
{
    struct kept_walk k = {0};
    kept_walk(c, &k);
    return k.seen;
}

size_t net_conn_kept_peek(const struct net_conn *c, size_t off, void *buf, size_t len)
{
    struct kept_walk k = {.off = off, .len = len, .out = buf};
    kept_walk(c, &k);
    return k.copied;
}

int net_conn_kept_restore(struct net_conn *c, const void *data, size_t len)
{
    if (c->state != NET_CONN_OPEN || (c->flags & NET_F_MIGRATING))
        return -EBUSY;
    /* Frames of at most a ring buffer's size (a class every frame pool has), all or none. */
    struct hd_frame *head = NULL, **tail = &head;
    for (size_t off = 0; off < len;) {
        size_t n = len - off < NET_BUF_SIZE ? len - off : NET_BUF_SIZE;
        struct hd_frame *f = hd_frame_get(c->shard, n);
        if (f == NULL) {
            for (struct hd_frame *g = head, *next; g; g = next) {
                next = g->next;
                hd_frame_unref(c->shard, g);
            }
            return -ENOBUFS;
        }
        memcpy(f->data, (const uint8_t *)data + off, n);
        f->len = (uint32_t)n;
        f->app_flags = 0; /* untyped raw bytes: through decode */
        f->next = NULL;
        *tail = f;
        tail = &f->next;
        off += n;
    }
    for (struct hd_frame *f = head, *next; f; f = next) {
        next = f->next;
        if (net_conn_pending_add(c, f) < 0) { /* only the first can fail: nothing was added */
            HD_ASSERT(f == head);
            for (; f; f = next) {
                next = f->next;
                hd_frame_unref(c->shard, f);
            }
            return -ENOBUFS;
        }
    }
    if (c->flags & (NET_F_RECV_PAUSED | NET_F_QUIET))
        return 0; /* replayed on resume or at the quiet point's end */
    c->depth++;
    int rc = net_conn_replay(c);
    if (rc < 0)
        net_conn_close(c, rc, false);
    c->depth--;
    net_conn_maybe_finish(c);
    return 0;
}
