/* conn.c - a connection's life: adopt or connect, receive (multishot recv into the shard's
 * buffer ring, or one recv at a time into a pool frame without it; record-typed recvmsg for
 * codecs with a record hook), bytes held while paused or carried by a move and their replay,
 * timeouts, and close — which frees the connection only after the kernel returned every op.
 * Runs on the connection's shard. What received bytes go through (codecs, tails, on_data) is in
 * conn_codec.c, sending in conn_send.c, quiet points in conn_quiet.c, accessors in
 * conn_access.c.
 *
 * States: CONNECTING (outgoing only: socket + IORING_OP_CONNECT, the write timer bounds it) ->
 * OPEN -> CLOSING -> CLOSED. A connection owns three ops (recv, send, ctl = connect / shutdown /
 * close), a flush, an idle timer, a write timer and an absolute deadline
 * (net_conn_set_deadline); when one of them closes it (reason -ETIMEDOUT), net_conn_closed_by
 * says which, so an app can tell its own timeouts from the kernel's -ETIMEDOUT
 * (TCP_USER_TIMEOUT, a failed keepalive). Each transition and the invariants a reader relies on
 * (no op in flight at free or move, depth balanced, one close, the fd closed once) are
 * HD_ASSERTs. net_conn_close moves to CLOSING, cancels what is in flight and, once no op of it
 * is in the kernel, closes the fd through the ring; only after that completion does on_close run
 * and the struct go back to its pool. Completion handlers raise a depth counter so a connection
 * is never freed under its own callback. With flush, close first stops reading and sends what is
 * queued (bounded by the write timeout); a codec with a close hook (TLS) ends its protocol first
 * (close_notify after the queued bytes). With on_deadline the deadline calls the app first and
 * then closes with flush (bounded by the write timeout or NET_DEADLINE_FLUSH_MS).
 *
 * Receiving: while the app has paused receiving (backpressure, a move in progress), buffers
 * that still arrive are held on the connection in order, not copied, and replayed on resume; the
 * peer's end (a recv of 0) that comes while bytes before it are held waits until the replay has
 * delivered them. An empty buffer ring (-ENOBUFS) retries after 1 ms, never in a loop. */
#include <errno.h>
#include <linux/tls.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hd/hd_fault.h>

#include "net_impl.h"

#ifndef SOL_TLS
#define SOL_TLS 282 /* include/linux/socket.h; older libc headers lack it */
#endif

static void recv_done(struct hd_op *op, int32_t res, uint32_t flags);
static void nobufs_wait(struct net_conn *c);
static void nobufs_retry(struct hd_timer *t);
static struct hd_frame *pending_pop(struct net_conn *c);

/* The timers run only while the connection is open (a close stops them), so the one that fires
 * is the one that closes it. */
static void idle_fired(struct hd_timer *t)
{
    struct net_conn *c = hd_container_of(t, struct net_conn, idle_timer);
    c->closed_by = NET_CONN_TIMER_IDLE;
    net_conn_close(c, -ETIMEDOUT, false);
}

static void write_fired(struct hd_timer *t)
{
    struct net_conn *c = hd_container_of(t, struct net_conn, write_timer);
    c->closed_by = NET_CONN_TIMER_WRITE;
    net_conn_close(c, -ETIMEDOUT, false);
}

static void deadline_fired(struct hd_timer *t)
{
    struct net_conn *c = hd_container_of(t, struct net_conn, deadline_timer);
    c->deadline_at_ms = 0;
    c->closed_by = NET_CONN_TIMER_DEADLINE;
    if (c->h->on_deadline == NULL || c->state != NET_CONN_OPEN) {
        net_conn_close(c, -ETIMEDOUT, false);
        return;
    }
    /* The app's last word first (a timer, not a completion: a close from it is finished by
     * the end-of-tick flush), then a bounded flush and the close. */
    c->h->on_deadline(c);
    if (c->state != NET_CONN_OPEN || (c->flags & NET_F_FLUSH_CLOSE))
        return;
    if (c->write_timeout_ms == 0)
        c->write_timeout_ms = NET_DEADLINE_FLUSH_MS;
    net_conn_close(c, -ETIMEDOUT, true);
}

static void conn_flush_cb(struct hd_flush *f)
{
    struct net_conn *c = hd_container_of(f, struct net_conn, flush);
    if (c->state == NET_CONN_CLOSING) {
        net_conn_maybe_finish(c);
        return;
    }
    net_conn_flush_now(c);
    if (c->flags & NET_F_QUIET_WAIT) /* nothing in flight may complete to run the check */
        net_conn_maybe_finish(c);
}

struct net_conn *net_conn_new(struct hd_shard *s, int fd, const struct net_conn_handler *h,
                              void *app, const struct net_conn_options *opt)
{
    struct net_shard *ns = net_shard_of(s);
    struct net_conn *c = hd_slab_get(ns->conns);
    if (c == NULL)
        return NULL;
    HD_ASSERT(fd >= 0 && h != NULL);
    memset(c, 0, sizeof(*c));
    if (hd_handle_open(s, c, &c->handle) < 0) {
        hd_slab_put(ns->conns, c);
        return NULL;
    }
    c->shard = s;
    c->ns = ns;
    c->fd = fd;
    c->held_head = c->held_tail = NET_BID_NONE;
    c->h = h;
    c->app = app;
    hd_op_init(s, &c->recv_op, recv_done);
    hd_op_init(s, &c->send_op, net_conn_send_done);
    hd_op_init(s, &c->ctl_op, NULL);
    hd_flush_init(&c->flush, conn_flush_cb);
    hd_timer_init(&c->idle_timer, idle_fired);
    hd_timer_init(&c->write_timer, write_fired);
    hd_timer_init(&c->nobufs_timer, nobufs_retry);
    hd_timer_init(&c->deadline_timer, deadline_fired);
    c->send_high = NET_SEND_HIGH_DEFAULT;
    c->send_low = NET_SEND_LOW_DEFAULT;
    c->send_max = NET_SEND_MAX_DEFAULT;
    c->rx_tail_max = opt && opt->rx_tail_max ? opt->rx_tail_max : ns->rx_tail_max;
    if (opt) {
        c->idle_timeout_ms = opt->idle_timeout_ms;
        c->write_timeout_ms = opt->write_timeout_ms;
        if (opt->send_high_bytes)
            c->send_high = opt->send_high_bytes;
        if (opt->send_low_bytes)
            c->send_low = opt->send_low_bytes;
        if (opt->send_max_bytes)
            c->send_max = opt->send_max_bytes;
        c->send_high_frames = opt->send_high_frames;
        c->send_low_frames = opt->send_low_frames;
    }
    ns->conns_count++;
    c->all_next = ns->all;
    if (ns->all)
        ns->all->all_pprev = &c->all_next;
    c->all_pprev = &ns->all;
    ns->all = c;
    return c;
}

int net_conn_adopt(struct hd_shard *s, int fd, const struct net_conn_handler *h, void *app,
                   const struct net_conn_options *opt, struct net_conn **out)
{
    struct net_conn *c = net_conn_new(s, fd, h, app, opt);
    if (c == NULL)
        return -ENOMEM;
    HD_ASSERT(c->state == NET_CONN_CONNECTING && c->flags == 0); /* fresh: zeroed, not yet open */
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)); /* we batch writes ourselves */
    c->peer.len = sizeof(c->peer.ss);
    if (getpeername(fd, &c->peer.sa, &c->peer.len) < 0)
        c->peer.len = 0;
    net_conn_state_set(c, NET_CONN_OPEN);
    if (c->idle_timeout_ms)
        hd_timer_start(s, &c->idle_timer, c->idle_timeout_ms);
    net_conn_recv_arm(c);
    *out = c;
    return 0;
}

/* ---------------------------------------------------------------- connect */

static void connect_done(struct hd_op *op, int32_t res, uint32_t flags)
{
    (void)flags;
    struct net_conn *c = hd_container_of(op, struct net_conn, ctl_op);
    HD_ASSERT(c->state == NET_CONN_CONNECTING || c->state == NET_CONN_CLOSING);
    hd_timer_stop(c->shard, &c->write_timer);
    if (c->state != NET_CONN_CONNECTING) { /* closed (timeout) meanwhile */
        net_conn_maybe_finish(c);
        return;
    }
    c->depth++;
    if (res < 0) {
        if (c->h->on_connected)
            c->h->on_connected(c, res);
        net_conn_close(c, res, false);
        c->depth--;
        net_conn_maybe_finish(c);
        return;
    }
    net_conn_state_set(c, NET_CONN_OPEN);
    if (c->idle_timeout_ms)
        hd_timer_start(c->shard, &c->idle_timer, c->idle_timeout_ms);
    net_conn_recv_arm(c);
    if (c->h->on_connected)
        c->h->on_connected(c, 0);
    if (c->state == NET_CONN_OPEN && !net_conn_queues_empty(c))
        hd_flush_request(c->shard, &c->flush);
    c->depth--;
    net_conn_maybe_finish(c);
}

int net_conn_connect(struct hd_shard *s, const struct net_addr *addr, uint32_t timeout_ms,
                     const struct net_conn_handler *h, void *app,
                     const struct net_conn_options *opt, struct net_conn **out)
{
    bool unix_sock = addr->sa.sa_family == AF_UNIX;
    int fd = socket(addr->sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC, unix_sock ? 0 : IPPROTO_TCP);
    if (fd < 0)
        return -errno;
    int one = 1;
    if (!unix_sock)
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    struct net_conn *c = net_conn_new(s, fd, h, app, opt);
    if (c == NULL) {
        close(fd);
        return -ENOMEM;
    }
    c->peer = *addr;
    HD_ASSERT(c->state == NET_CONN_CONNECTING); /* fresh: zeroed */
    c->ctl_op.fn = connect_done;
    struct io_uring_sqe *sqe = hd_op_sqe(s, &c->ctl_op);
    if (sqe == NULL) {
        net_conn_state_set(c, NET_CONN_CLOSING);
        c->close_reason = -EBUSY;
        net_conn_maybe_finish(c);
        return -EBUSY;
    }
    io_uring_prep_connect(sqe, fd, &c->peer.sa, c->peer.len);
    if (timeout_ms)
        hd_timer_start(s, &c->write_timer, timeout_ms);
    *out = c;
    return 0;
}

/* ---------------------------------------------------------------- receive */

/* Record-typed receive: one recvmsg with room for the record type cmsg. Single-shot on
 * purpose: a multishot recvmsg would let the kernel go on reading (and decrypting) past a
 * record the codec has not seen yet, such as a KeyUpdate the kernel cannot follow, which on
 * Linux 6.1 fails the socket (EBADMSG) before the codec could answer with a close_notify. */
static void record_arm(struct net_conn *c, struct io_uring_sqe *sqe)
{
    struct net_recv_msg *m = c->rmsg;
    memset(m, 0, sizeof(*m));
    m->msg.msg_control = m->control.buf;
    m->msg.msg_controllen = sizeof(m->control.buf);
    m->msg.msg_iov = &m->iov;
    m->msg.msg_iovlen = 1; /* with a buffer ring only iov_len counts: the buffer's size */
    m->iov.iov_base = c->ns->buf_ring ? NULL : c->recv_frame->data;
    m->iov.iov_len = c->ns->buf_ring ? NET_BUF_SIZE : NET_RECV_FALLBACK_SIZE;
    io_uring_prep_recvmsg(sqe, c->fd, &m->msg, 0);
    if (c->ns->buf_ring) {
        sqe->flags |= IOSQE_BUFFER_SELECT;
        sqe->buf_group = NET_BUF_GROUP;
    }
    c->flags |= NET_F_RECV_TYPED; /* this read carries a record type */
}

/* The record type of the recvmsg that just completed (kTLS puts it in a cmsg). */
static uint8_t record_type(const struct net_conn *c)
{
    const struct msghdr *m = &c->rmsg->msg;
    for (struct cmsghdr *h = CMSG_FIRSTHDR(m); h != NULL; h = CMSG_NXTHDR((struct msghdr *)m, h))
        if (h->cmsg_level == SOL_TLS && h->cmsg_type == TLS_GET_RECORD_TYPE &&
            h->cmsg_len >= CMSG_LEN(sizeof(uint8_t)))
            return *CMSG_DATA(h);
    return NET_RECORD_DATA; /* kTLS always names the type; bytes without one are data */
}

void net_conn_recv_arm(struct net_conn *c)
{
    if (c->state != NET_CONN_OPEN ||
        (c->flags & (NET_F_RECV_PAUSED | NET_F_NOBUFS | NET_F_QUIET)) || hd_op_busy(&c->recv_op))
        return;
    if (!c->ns->buf_ring && c->recv_frame == NULL) {
        c->recv_frame = hd_frame_get(c->shard, NET_RECV_FALLBACK_SIZE);
        if (c->recv_frame == NULL) { /* frame pool exhausted: retry shortly */
            nobufs_wait(c);
            return;
        }
    }
    /* The recvmsg state of record-typed reads (kTLS) lives until the connection is freed;
     * connections without them (plain, userspace TLS) never carry it. From the shard's pool: no
     * malloc on the data path (a full pool closes the connection, as a full conn pool would). */
    const struct net_codec *k = c->codecs[0].codec; /* NULL with levels: a failed move's */
    bool record = k && k->record;
    if (record && c->rmsg == NULL && (c->rmsg = hd_slab_get(c->ns->rmsgs)) == NULL) {
        net_conn_close(c, -ENOMEM, false);
        return;
    }
    HD_ASSERT(!(c->flags & (NET_F_MIGRATING | NET_F_QUIET_READ))); /* a move: recv paused */
    struct io_uring_sqe *sqe = hd_op_sqe(c->shard, &c->recv_op);
    if (sqe == NULL) {
        net_conn_close(c, -EBUSY, false);
        return;
    }
    if (record) {
        record_arm(c, sqe);
        return;
    }
    c->flags &= ~NET_F_RECV_TYPED; /* untyped bytes */
    if (c->ns->buf_ring) {
        io_uring_prep_recv_multishot(sqe, c->fd, NULL, 0, 0);
        sqe->flags |= IOSQE_BUFFER_SELECT;
        sqe->buf_group = NET_BUF_GROUP;
        return;
    }
    io_uring_prep_recv(sqe, c->fd, c->recv_frame->data, NET_RECV_FALLBACK_SIZE, 0);
}

/* A read of a known record type: data to the codec's decode (or the app), others to the
 * codec's record hook. type 0: an untyped read. */
static int input_typed(struct net_conn *c, uint8_t type, uint8_t *data, size_t len)
{
    if (type == 0 || type == NET_RECORD_DATA)
        return net_conn_input(c, data, len);
    c->stats.bytes_in += len;
    const struct net_codec_level *l = &c->codecs[0]; /* record is a level 0 hook */
    if (l->codec == NULL || l->codec->record == NULL)
        return -EPROTO; /* kept across a codec change that dropped the hook: undecodable */
    uint8_t at = net_conn_codec_at(c, 0);
    int rc = l->codec->record(c, l->state, type, data, len);
    c->codec_at = at;
    return rc;
}

static void nobufs_retry(struct hd_timer *t)
{
    struct net_conn *c = hd_container_of(t, struct net_conn, nobufs_timer);
    HD_ASSERT((c->flags & NET_F_NOBUFS) && c->state == NET_CONN_OPEN); /* a close stops it */
    c->flags &= ~NET_F_NOBUFS;
    if (c->idle_timeout_ms)
        hd_timer_start(c->shard, &c->idle_timer, c->idle_timeout_ms);
    net_conn_recv_arm(c);
}

/* Buffers that arrived after a pause (the multishot recv is cancelled asynchronously) wait on
 * the connection, not copied: the shard's held_next chains them. */
static void held_push(struct net_conn *c, uint16_t bid, uint32_t len, uint8_t type)
{
    struct net_shard *ns = c->ns;
    ns->held_next[bid] = NET_BID_NONE;
    ns->held_len[bid] = len;
    ns->held_type[bid] = type;
    if (c->held_tail == NET_BID_NONE)
        c->held_head = bid;
    else
        ns->held_next[c->held_tail] = bid;
    c->held_tail = bid;
}

/* Feed held buffers to the app in order while it is not paused. Returns 0 or -errno. */
static int held_drain(struct net_conn *c, bool deliver)
{
    struct net_shard *ns = c->ns;
    int rc = 0;
    while (c->held_head != NET_BID_NONE) {
        if (deliver && (c->flags & (NET_F_RECV_PAUSED | NET_F_QUIET)))
            return 0;
        uint16_t bid = c->held_head;
        c->held_head = ns->held_next[bid];
        if (c->held_head == NET_BID_NONE)
            c->held_tail = NET_BID_NONE;
        if (deliver && rc == 0 && c->state == NET_CONN_OPEN)
            rc = input_typed(c, ns->held_type[bid], net_bufring_addr(ns, bid), ns->held_len[bid]);
        net_bufring_recycle(ns, bid);
    }
    return rc;
}

/* Before a move: copy held ring buffers (raw bytes, in order) into pool frames so the ring
 * gets its buffers back on this shard. *out is a heap array of *count frames. */
int net_conn_held_take(struct net_conn *c, struct hd_frame ***out, uint32_t *count)
{
    struct net_shard *ns = c->ns;
    uint32_t n = 0;
    for (uint16_t b = c->held_head; b != NET_BID_NONE; b = ns->held_next[b])
        n++;
    for (struct hd_frame *f = net_conn_pending(c); f; f = f->next)
        n++;
    *out = NULL;
    *count = 0;
    if (n == 0)
        return 0;
    struct hd_frame **v = calloc(n, sizeof(*v));
    int rc = v ? 0 : -ENOMEM;
    uint32_t i = 0;
    for (struct hd_frame *p; (p = pending_pop(c)) != NULL;) { /* older than anything held */
        if (v)
            v[i++] = p;
        else
            hd_frame_unref(c->shard, p);
    }
    while (c->held_head != NET_BID_NONE) {
        uint16_t bid = c->held_head;
        c->held_head = ns->held_next[bid];
        if (c->held_head == NET_BID_NONE)
            c->held_tail = NET_BID_NONE;
        struct hd_frame *f = rc == 0 ? hd_frame_get(c->shard, ns->held_len[bid]) : NULL;
        if (f) {
            memcpy(f->data, net_bufring_addr(ns, bid), ns->held_len[bid]);
            f->len = ns->held_len[bid];
            f->app_flags = ns->held_type[bid]; /* pending frames carry their record type */
            v[i++] = f;
        } else if (rc == 0) {
            rc = -ENOBUFS;
        }
        net_bufring_recycle(ns, bid);
    }
    *out = v;
    *count = i;
    return rc;
}

int net_conn_pending_add(struct net_conn *c, struct hd_frame *f)
{
    if (c->hold == NET_HOLD_NONE) {
        int rc = net_conn_hold_set(c, NET_HOLD_CARRY);
        if (rc < 0)
            return rc;
    }
    struct net_conn_move *m = c->move;
    f->next = NULL;
    if (m->pending_tail)
        m->pending_tail->next = f;
    else
        m->pending_head = f;
    m->pending_tail = f;
    return 0;
}

/* The first carried frame, taken off (the reference is the caller's), or NULL; the last one
 * taken ends NET_HOLD_CARRY. */
static struct hd_frame *pending_pop(struct net_conn *c)
{
    struct net_conn_move *m = c->move;
    struct hd_frame *f = m ? m->pending_head : NULL;
    if (f == NULL)
        return NULL;
    m->pending_head = f->next;
    f->next = NULL;
    if (m->pending_head == NULL) {
        m->pending_tail = NULL;
        if (c->hold == NET_HOLD_CARRY)
            net_conn_hold_set(c, NET_HOLD_NONE);
    }
    return f;
}

/* Feed pending frames (raw bytes carried over by a move) while the app is not paused. */
static int pending_drain(struct net_conn *c, bool deliver)
{
    int rc = 0;
    while (net_conn_pending(c)) {
        if (deliver && (c->flags & (NET_F_RECV_PAUSED | NET_F_QUIET)))
            return 0;
        struct hd_frame *f = pending_pop(c);
        if (deliver && rc == 0 && c->state == NET_CONN_OPEN)
            rc = input_typed(c, f->app_flags, f->data, f->len);
        hd_frame_unref(c->shard, f);
    }
    return rc;
}

/* The peer's end of stream, for the app: on_eof, or close (-ECONNRESET) without one. */
static int eof_in(struct net_conn *c)
{
    if (c->h->on_eof == NULL)
        return -ECONNRESET;
    c->h->on_eof(c);
    return 0;
}

/* Offer, in arrival order, everything received but not yet given to the app: the app's tail,
 * the codec's tail, pending frames, held ring buffers, then the peer's end if it came after
 * them (NET_F_EOF_HELD). Stops where the app pauses. */
int net_conn_replay(struct net_conn *c)
{
    int rc = net_conn_tails_replay(c);
    if (rc == 0)
        rc = pending_drain(c, true);
    if (rc == 0)
        rc = held_drain(c, true);
    if (rc == 0 && (c->flags & NET_F_EOF_HELD) && c->state == NET_CONN_OPEN &&
        !(c->flags & (NET_F_RECV_PAUSED | NET_F_QUIET)) && c->held_head == NET_BID_NONE &&
        net_conn_pending(c) == NULL) {
        /* Every byte before the peer's end is delivered: now the end, and no more recv. */
        c->flags = (c->flags & ~NET_F_EOF_HELD) | NET_F_RECV_PAUSED;
        rc = eof_in(c);
    }
    return rc;
}

/* The buffer ring (or the frame pool, without one) is empty: recv again in a moment, never
 * in a tight loop. The idle timeout waits meanwhile: the peer is not idle, we are. */
static void nobufs_wait(struct net_conn *c)
{
    HD_ASSERT(!(c->flags & NET_F_NOBUFS));
    c->flags |= NET_F_NOBUFS;
    hd_timer_stop(c->shard, &c->idle_timer);
    hd_timer_start(c->shard, &c->nobufs_timer, NET_NOBUFS_RETRY_MS);
}

/* Bytes from a recv: to the codec and app, or kept (in order) while paused or quiet. */
static int recv_bytes(struct net_conn *c, int32_t res, uint32_t flags)
{
    bool ring = (flags & IORING_CQE_F_BUFFER) != 0;
    uint16_t bid = (uint16_t)(flags >> IORING_CQE_BUFFER_SHIFT);
    uint8_t *data = ring ? net_bufring_addr(c->ns, bid) : c->recv_frame->data;
    uint8_t type = (c->flags & NET_F_RECV_TYPED) ? record_type(c) : 0;
    int rc = 0;
    if (ring && c->state == NET_CONN_OPEN &&
        ((c->flags & (NET_F_RECV_PAUSED | NET_F_QUIET | NET_F_CARRY)) ||
         c->held_head != NET_BID_NONE)) {
        held_push(c, bid, (uint32_t)res, type); /* keep it, in order, until resumed */
        return 0;
    }
    if (c->state == NET_CONN_OPEN) {
        if (c->idle_timeout_ms)
            hd_timer_start(c->shard, &c->idle_timer, c->idle_timeout_ms);
        rc = input_typed(c, type, data, (size_t)res);
    }
    if (ring)
        net_bufring_recycle(c->ns, bid);
    return rc;
}

/* A net_conn_quiet_read finished: its bytes are in the last pending frame. */
static int quiet_read_done(struct net_conn *c, int32_t res)
{
    c->flags &= ~NET_F_QUIET_READ;
    if (c->state != NET_CONN_OPEN)
        return 0;
    if (res > 0)
        c->move->pending_tail->len = (uint32_t)res;
    if (res > 0 || res == -ECANCELED) { /* cancelled by a pause: the codec asks again */
        c->flags |= NET_F_QUIET_WAIT;
        return 0;
    }
    return res == 0 ? -ECONNRESET : res; /* the peer left in the middle of a record */
}

static void recv_done(struct hd_op *op, int32_t res, uint32_t flags)
{
    struct net_conn *c = hd_container_of(op, struct net_conn, recv_op);
    HD_ASSERT(c->state != NET_CONN_CLOSED); /* freed only once no op of it is in flight */
    int rc = 0;
    c->depth++;
    /* Closing after a flush: the close reason is decided; an EOF or error of the read side no
     * longer changes it (a peer's close_notify is often followed by its FIN at once). */
    bool counts = c->state == NET_CONN_OPEN && !(c->flags & NET_F_FLUSH_CLOSE);
    if (c->flags & NET_F_QUIET_READ) {
        rc = quiet_read_done(c, res);
    } else if (res > 0 && hd_fault(HD_FAULT_RESET)) {
        rc = recv_bytes(c, 1 + (int32_t)hd_fault_below((uint32_t)res), flags); /* mid-frame */
        rc = rc < 0 ? rc : -ECONNRESET;
    } else if (res > 0) {
        rc = recv_bytes(c, res, flags);
    } else if (res == 0) {
        /* Bytes that came before the end but wait (paused, quiet) go first: the end waits. */
        if (counts && (c->held_head != NET_BID_NONE || net_conn_pending(c) != NULL))
            c->flags |= NET_F_EOF_HELD;
        else if (counts)
            rc = eof_in(c);
        if (!(flags & IORING_CQE_F_MORE) && c->state == NET_CONN_OPEN)
            c->flags |= NET_F_RECV_PAUSED; /* no more bytes will come: stop re-arming */
    } else if (res == -ENOBUFS && c->state == NET_CONN_OPEN) {
        nobufs_wait(c);
    } else if (res != -ECANCELED && counts) {
        rc = res;
    }
    if (rc < 0 && c->state == NET_CONN_OPEN)
        net_conn_close(c, rc, false);
    if (!(flags & IORING_CQE_F_MORE) && c->state == NET_CONN_OPEN)
        net_conn_recv_arm(c);
    HD_ASSERT(c->depth > 0);
    c->depth--;
    net_conn_maybe_finish(c);
}

void net_conn_pause_recv(struct net_conn *c, bool paused)
{
    if (paused) {
        if (c->flags & NET_F_RECV_PAUSED)
            return;
        c->flags |= NET_F_RECV_PAUSED;
        if (hd_op_busy(&c->recv_op))
            hd_op_cancel(c->shard, &c->recv_op);
        return;
    }
    /* A move keeps recv paused until the new shard resumes it: resuming here (an app answering
     * on_send_pressure(false) from a send that completed during the wait) would hand bytes to
     * the app on the shard being left and re-arm a recv the move then waits on. */
    if (!(c->flags & NET_F_RECV_PAUSED) || (c->flags & NET_F_MIGRATING))
        return;
    c->flags &= ~NET_F_RECV_PAUSED;
    /* Bytes the app left when it paused come first, then buffers that arrived meanwhile. */
    c->depth++;
    int rc = net_conn_replay(c);
    if (rc < 0)
        net_conn_close(c, rc, false);
    else if (!(c->flags & NET_F_RECV_PAUSED))
        net_conn_recv_arm(c);
    c->depth--;
    net_conn_maybe_finish(c);
}

/* ---------------------------------------------------------------- close */

static void close_done(struct hd_op *op, int32_t res, uint32_t flags)
{
    (void)flags;
    struct net_conn *c = hd_container_of(op, struct net_conn, ctl_op);
    HD_ASSERT(c->state == NET_CONN_CLOSING && !(c->flags & NET_F_FD_CLOSED));
    /* The ring refused the request (it never ran): the fd is still open. Any other result, an
     * error included, means the kernel released the fd number. */
    if (res == -EAGAIN || res == -ENOMEM || res == -EBUSY)
        close(c->fd);
    c->flags |= NET_F_FD_CLOSED;
    net_conn_maybe_finish(c);
}

/* Once no op is in flight: close the fd through the ring, then free everything. */
void net_conn_maybe_finish(struct net_conn *c)
{
    /* A move waits for the end of a quiet state (NET_HOLD_QUIET_MOVE): the codec may be in the
     * middle of rekeying. */
    if (c->hold == NET_HOLD_MOVE && c->state == NET_CONN_OPEN) {
        if (c->depth == 0 && !hd_op_busy(&c->recv_op) && !hd_op_busy(&c->send_op) &&
            !hd_op_busy(&c->ctl_op))
            net_migrate_step(c);
        return;
    }
    if ((c->flags & NET_F_QUIET_WAIT) && c->state == NET_CONN_OPEN) {
        if (c->depth > 0 || hd_op_busy(&c->recv_op) || hd_op_busy(&c->send_op) ||
            hd_op_busy(&c->ctl_op) || c->wire.count > 0)
            return;
        c->flags &= ~NET_F_QUIET_WAIT;
        c->depth++;
        const struct net_codec_level *l = &c->codecs[0]; /* quiesced is a level 0 hook */
        if (l->codec && l->codec->quiesced) {
            uint8_t at = net_conn_codec_at(c, 0);
            l->codec->quiesced(c, l->state);
            c->codec_at = at;
        } else
            net_conn_quiet_end(c); /* the codec that asked is gone */
        c->depth--;
        /* On: the hook may have closed the connection. */
    }
    if (c->state != NET_CONN_CLOSING || c->depth > 0 || hd_op_busy(&c->recv_op) ||
        hd_op_busy(&c->send_op) || hd_op_busy(&c->ctl_op))
        return;
    HD_ASSERT(net_conn_migration(c) == NULL); /* a move ends OPEN; a closed one drops it */
    if (!(c->flags & NET_F_FD_CLOSED)) {
        c->ctl_op.fn = close_done;
        struct io_uring_sqe *sqe = hd_op_sqe(c->shard, &c->ctl_op);
        if (sqe) {
            io_uring_prep_close(sqe, c->fd);
            return;
        }
        close(c->fd); /* SQ full: a plain close is as good */
        c->flags |= NET_F_FD_CLOSED;
    }
    net_conn_finish_close(c);
}

void net_conn_finish_close(struct net_conn *c)
{
    HD_ASSERT(c->state == NET_CONN_CLOSING && (c->flags & NET_F_FD_CLOSED));
    net_conn_state_set(c, NET_CONN_CLOSED); /* asserts no op in flight, no handler running */
    net_conn_release(c, true);
}

/* Free what the connection holds and the struct itself; notify: call on_close first. */
void net_conn_release(struct net_conn *c, bool notify)
{
    struct hd_shard *s = c->shard;
    struct net_shard *ns = c->ns;
    HD_ASSERT(c->state == NET_CONN_CLOSED && ns->conns_count > 0);
    hd_timer_stop(s, &c->idle_timer);
    hd_timer_stop(s, &c->write_timer);
    hd_timer_stop(s, &c->nobufs_timer);
    hd_timer_stop(s, &c->deadline_timer);
    hd_flush_cancel(s, &c->flush);
    held_drain(c, false);
    pending_drain(c, false);
    if (c->hold != NET_HOLD_NONE) /* closed while quiet: the move state goes back */
        net_conn_hold_set(c, NET_HOLD_NONE);
    for (unsigned level = c->codecs_n; level-- > 0;) { /* the top one first */
        struct net_codec_level *l = &c->codecs[level];
        if (l->codec && l->codec->release) /* NULL: level 0's, gone with a failed move */
            l->codec->release(c, l->state);
        l->codec = NULL;
    }
    c->codecs_n = 0;
    for (unsigned level = 0; level < NET_CODECS_MAX; level++)
        net_conn_tail_drop(c, &c->codecs[level].tail);
    for (unsigned i = 0; i < NET_CODECS_MAX - 1; i++)
        net_sendq_clear(ns, s, &c->mid[i]);
    net_sendq_clear(ns, s, &c->plain);
    net_sendq_clear(ns, s, &c->wire);
    net_conn_tail_drop(c, &c->rx_tail);
    net_conn_tail_drop(c, &c->recv_frame);
    net_conn_class_clear(c, notify);         /* on_drop, before on_close */
    int hrc = hd_handle_close(s, c->handle); /* copies held anywhere are stale from now */
    HD_ASSERT(hrc == 0);
    (void)hrc;
    if (notify && c->h->on_close)
        c->h->on_close(c, c->close_reason);
    *c->all_pprev = c->all_next;
    if (c->all_next)
        c->all_next->all_pprev = c->all_pprev;
    HD_ASSERT(c->move == NULL); /* a close frees a waiting move's package, a move sends it */
    if (c->rmsg)
        hd_slab_put(ns->rmsgs, c->rmsg);
    ns->conns_count--;
    hd_slab_put(ns->conns, c);
}

/* A graceful close through the codec first (TLS: close_notify), once. Under a stacked codec
 * (wss) the upper one frames what the app queued first, so the lower one's last records hold
 * it; the lower codec's hook runs at its own level, wherever the close came from (the upper
 * codec's decode: its records went to the upper codec's output and, with a pong waiting there,
 * TLS sealed its own records again in a loop until the frame pool ran out). Returns true if the
 * codec closes the connection. */
static bool codec_close(struct net_conn *c, int reason)
{
    c->flags |= NET_F_CODEC_CLOSE;
    int rc = net_conn_upper_encode(c);
    if (rc < 0) {
        net_conn_close(c, rc, false);
        return true;
    }
    uint8_t at = net_conn_codec_at(c, 0);
    rc = c->codecs[0].codec->close(c, c->codecs[0].state, reason);
    c->codec_at = at;
    return rc == 0;
}

/* Closed while waiting to move (an op still in flight): the move is off, and its package, still
 * empty, goes; the app hears on_close here, its adopt never runs. */
static void move_cancel(struct net_conn *c)
{
    if (net_conn_migration(c) == NULL)
        return;
    free(c->move->migration);
    c->move->migration = NULL;
    net_conn_hold_set(c, c->hold == NET_HOLD_QUIET_MOVE ? NET_HOLD_QUIET
                         : c->move->pending_head        ? NET_HOLD_CARRY
                                                        : NET_HOLD_NONE);
}

void net_conn_close(struct net_conn *c, int reason, bool flush)
{
    if (c->state == NET_CONN_CLOSING || c->state == NET_CONN_CLOSED)
        return;
    /* First, so that a flush-close stays here: the move's step only waits for the ops in
     * flight and would carry the connection away open, its close forgotten. */
    move_cancel(c);
    HD_ASSERT(!(c->flags & NET_F_MIGRATING)); /* a move holds only while its package waits */
    if (flush && c->state == NET_CONN_OPEN && c->codecs[0].codec && c->codecs[0].codec->close &&
        !(c->flags & NET_F_CODEC_CLOSE) && codec_close(c, reason))
        return;
    if (flush && c->state == NET_CONN_OPEN && !net_conn_queues_empty(c)) {
        /* Stop reading, send what is queued (bounded by the write timeout), then close. */
        c->flags |= NET_F_FLUSH_CLOSE;
        c->close_reason = reason;
        net_conn_pause_recv(c, true);
        if (c->write_timeout_ms && !hd_timer_armed(&c->write_timer))
            hd_timer_start(c->shard, &c->write_timer, c->write_timeout_ms);
        hd_flush_request(c->shard, &c->flush);
        return;
    }
    net_conn_state_set(c, NET_CONN_CLOSING); /* OPEN/CONNECTING -> CLOSING, once */
    c->close_reason = reason;
    hd_timer_stop(c->shard, &c->idle_timer);
    hd_timer_stop(c->shard, &c->write_timer);
    hd_timer_stop(c->shard, &c->nobufs_timer);
    hd_timer_stop(c->shard, &c->deadline_timer);
    if (hd_op_busy(&c->recv_op))
        hd_op_cancel(c->shard, &c->recv_op);
    if (hd_op_busy(&c->send_op))
        hd_op_cancel(c->shard, &c->send_op);
    if (hd_op_busy(&c->ctl_op))
        hd_op_cancel(c->shard, &c->ctl_op);
    /* Inside a completion handler (depth > 0) the handler finishes the close when it returns;
     * from anywhere else (a timer, another connection) the end-of-tick flush does, so the
     * caller can still touch c until its own callback returns. */
    hd_flush_request(c->shard, &c->flush);
}
