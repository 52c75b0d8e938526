/* udp.c - UDP sockets on the reactor (STUN, a WireGuard relay). Receive: where the shard has its
 * buffer ring, one multishot recvmsg that stays armed and fills ring buffers (each holds the
 * kernel's io_uring_recvmsg_out header, the source address and the datagram), handed to the app
 * one by one in the tick they arrived and returned to the ring right after; every datagram of a
 * burst comes in one tick without a submission each. With UDP GRO (udp_gro.c) the socket has a
 * ring of its own with 64 KiB buffers: a buffer may hold several datagrams of one source, cut
 * apart at the size its cmsg gives before the app sees them. Without a ring: one recvmsg in
 * flight into the socket's own datagram buffer (64 KiB, with GRO too), re-armed after each. Sends
 * copy the datagram into one of NET_UDP_SLOTS send slots (a received burst can be forwarded whole)
 * and wait for the end of the tick; then a run of datagrams to one address with one size goes as
 * one sendmsg with UDP_SEGMENT (GSO: the kernel cuts it; off for the socket after the kernel
 * refused one), the others as one sendmsg each, in the order queued (batched by the ring, submitted
 * with the tick). net_udp_adopt takes a socket handed over by another process. net_udp_claim (main
 * thread, before the shards bind a fixed port) tries throw-away binds (no flag, SO_REUSEPORT
 * alone, SO_REUSEADDR alone): a port where another process's reuseport group (whose datagrams
 * ours would split) or a socket that shares with nobody is bound is -EADDRINUSE; sockets with
 * SO_REUSEADDR alone (a port hold) are bound beside; nothing stays held. Runs on the socket's
 * shard; owns the socket and its buffers, freed once the kernel returned every op. */
#include <errno.h>
#include <netinet/udp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "net_impl.h"

struct net_udp_slot {
    struct hd_op op;
    struct net_udp *u;
    struct msghdr msg;
    struct iovec iov;
    struct net_addr to;
    bool busy;
    uint8_t data[NET_UDP_SEND_MAX];
};

#define NET_UDP_CMSG_ROOM 32 /* >= CMSG_SPACE(sizeof(uint16_t)), asserted where it is used */
_Static_assert(CMSG_SPACE(sizeof(int)) <= NET_UDP_CMSG_ROOM, "room for the UDP_GRO cmsg");

/* One sendmsg carrying several datagrams to one address (UDP GSO: the kernel cuts them at
 * segment size). Its datagrams stay in their slots until it completes. */
struct net_udp_group {
    struct hd_op op;
    struct net_udp *u;
    struct msghdr msg;
    union { /* UDP_SEGMENT's cmsg, CMSG_SPACE(sizeof(uint16_t)) bytes, aligned as a cmsghdr
             * (size_t: glibc's struct cmsghdr ends in a flexible array, which clang refuses in
             * a union that is not last) */
        char buf[NET_UDP_CMSG_ROOM];
        size_t align;
    } cmsg;
    unsigned count;
    bool busy;
    uint16_t slot[NET_UDP_GSO_SEGS];
    struct iovec iov[NET_UDP_GSO_SEGS];
};

struct net_udp {
    struct hd_shard *shard;
    struct net_shard *ns;
    int fd;
    bool closing;
    bool delivering;          /* in the app's callback: a close there must not free us under it */
    bool multishot;           /* the recv is a multishot recvmsg into a buffer ring */
    bool gro;                 /* UDP_GRO is on: a receive may carry several datagrams (udp_gro.c) */
    struct net_udp_ring ring; /* with GRO and multishot: the socket's own ring (else br NULL) */
    struct hd_timer nobufs_timer; /* the ring was empty: arm again after NET_NOBUFS_RETRY_MS */
    net_udp_recv_fn *fn;
    void *arg;
    struct hd_op recv_op;
    struct msghdr msg;
    struct iovec iov;
    struct net_addr from;
    union { /* the plain recv's control block (the UDP_GRO cmsg), aligned as a cmsghdr */
        char buf[NET_UDP_CMSG_ROOM];
        size_t align;
    } rcmsg;
    struct net_udp_stats stats;
    unsigned free_count; /* free_slots[0..free_count): slots not in flight */
    uint16_t free_slots[NET_UDP_SLOTS];
    unsigned pending_count; /* pending[0..pending_count): queued this tick, in order */
    uint16_t pending[NET_UDP_SLOTS];
    struct hd_flush flush; /* at the tick's end: the pending slots go out */
    bool gso;              /* the kernel took a GSO send (off after it refused one) */
    struct net_udp_group groups[NET_UDP_GSO_GROUPS];
    struct net_udp_slot slots[NET_UDP_SLOTS];
    uint8_t buf[NET_UDP_DATAGRAM_MAX];
};

static void udp_recv_arm(struct net_udp *u);

static bool udp_idle(const struct net_udp *u)
{
    return !hd_op_busy(&u->recv_op) && u->free_count == NET_UDP_SLOTS;
}

static void udp_maybe_free(struct net_udp *u)
{
    if (u->closing && !u->delivering && udp_idle(u)) {
        net_udp_ring_fini(u->ns, &u->ring);
        close(u->fd);
        free(u);
    }
}

static void udp_deliver(struct net_udp *u, const uint8_t *data, size_t len)
{
    u->stats.received++;
    u->delivering = true;
    u->fn(u, data, len, &u->from, u->arg);
    u->delivering = false;
}

static void udp_deliver_segment(const uint8_t *data, size_t len, void *arg)
{
    udp_deliver(arg, data, len);
}

/* What one receive brought: one datagram, or with GRO several of seg bytes each (the last one
 * shorter) from one source, handed over one by one. */
static void udp_deliver_all(struct net_udp *u, const uint8_t *data, size_t len, size_t seg)
{
    if (seg > 0 && seg < len)
        u->stats.gro_receives++;
    net_udp_gro_split(data, len, seg, udp_deliver_segment, u, &u->closing);
}

/* A ring buffer the multishot recvmsg filled: [recvmsg_out][name][control][payload]. */
static void udp_deliver_buf(struct net_udp *u, uint16_t bid, int32_t res)
{
    uint8_t *buf = u->ring.br ? net_udp_ring_addr(&u->ring, bid) : net_bufring_addr(u->ns, bid);
    struct io_uring_recvmsg_out *o = io_uring_recvmsg_validate(buf, res, &u->msg);
    if (o == NULL) {
        u->stats.recv_errors++;
        return;
    }
    if (o->flags & MSG_TRUNC) {
        u->stats.truncated++; /* larger than a ring buffer: not a datagram we can hand over */
        return;
    }
    socklen_t namelen = o->namelen <= sizeof(u->from.ss) ? o->namelen : sizeof(u->from.ss);
    memcpy(&u->from.ss, io_uring_recvmsg_name(o), namelen);
    u->from.len = namelen;
    size_t seg = 0;
    if (u->gro) {
        const uint8_t *control = (const uint8_t *)io_uring_recvmsg_name(o) + u->msg.msg_namelen;
        size_t clen = o->controllen <= u->msg.msg_controllen ? o->controllen : 0;
        seg = net_udp_gro_size(control, clen);
    }
    udp_deliver_all(u, io_uring_recvmsg_payload(o, &u->msg),
                    io_uring_recvmsg_payload_length(o, res, &u->msg), seg);
}

static void udp_nobufs_retry(struct hd_timer *t)
{
    struct net_udp *u = hd_container_of(t, struct net_udp, nobufs_timer);
    if (!u->closing)
        udp_recv_arm(u);
}

static void udp_recv_done(struct hd_op *op, int32_t res, uint32_t flags)
{
    struct net_udp *u = hd_container_of(op, struct net_udp, recv_op);
    if (flags & IORING_CQE_F_BUFFER) {
        uint16_t bid = (uint16_t)(flags >> IORING_CQE_BUFFER_SHIFT);
        if (res > 0 && !u->closing)
            udp_deliver_buf(u, bid, res);
        if (u->ring.br)
            net_udp_ring_recycle(&u->ring, bid);
        else
            net_bufring_recycle(u->ns, bid);
    } else if (res >= 0 && !u->closing && !u->multishot) {
        u->from.len = u->msg.msg_namelen;
        size_t clen = u->msg.msg_controllen <= sizeof(u->rcmsg.buf) ? u->msg.msg_controllen : 0;
        udp_deliver_all(u, u->buf, (size_t)res, u->gro ? net_udp_gro_size(u->rcmsg.buf, clen) : 0);
    } else if (res == -ENOBUFS) {
        u->stats.recv_nobufs++;
    } else if (res < 0 && res != -ECANCELED) {
        u->stats.recv_errors++;
    }
    if (flags & IORING_CQE_F_MORE)
        return; /* the multishot recv stays armed */
    if (u->closing) {
        udp_maybe_free(u);
        return;
    }
    /* Out of buffers: the socket's own ring has every buffer back by the end of this tick
     * (each is returned once handed over, its completions came before this one, and the
     * returns are published before this submission goes); the shard's ring may be held by
     * paused connections, so that one waits. */
    if (res == -ENOBUFS && !u->ring.br)
        hd_timer_start(u->shard, &u->nobufs_timer, NET_NOBUFS_RETRY_MS);
    else
        udp_recv_arm(u);
}

static void udp_recv_arm(struct net_udp *u)
{
    struct io_uring_sqe *sqe = hd_op_sqe(u->shard, &u->recv_op);
    if (sqe == NULL)
        return; /* SQ full even after submitting: the socket goes deaf (counted by the reactor) */
    if (u->multishot) {
        /* The kernel reads the name and control sizes from this header to lay out each buffer. */
        /* and with GRO room for the UDP_GRO cmsg, between the name and the payload */
        u->msg = (struct msghdr){.msg_namelen = sizeof(u->from.ss),
                                 .msg_controllen = u->gro ? NET_UDP_CMSG_ROOM : 0};
        io_uring_prep_recvmsg_multishot(sqe, u->fd, &u->msg, 0);
        sqe->flags |= IOSQE_BUFFER_SELECT;
        sqe->buf_group = u->ring.br ? u->ring.bgid : NET_BUF_GROUP;
        return;
    }
    u->iov = (struct iovec){.iov_base = u->buf, .iov_len = sizeof(u->buf)};
    u->msg = (struct msghdr){.msg_name = &u->from.ss,
                             .msg_namelen = sizeof(u->from.ss),
                             .msg_iov = &u->iov,
                             .msg_iovlen = 1,
                             .msg_control = u->gro ? u->rcmsg.buf : NULL,
                             .msg_controllen = u->gro ? sizeof(u->rcmsg.buf) : 0};
    io_uring_prep_recvmsg(sqe, u->fd, &u->msg, 0);
}

static void udp_slot_release(struct net_udp *u, struct net_udp_slot *sl)
{
    sl->busy = false;
    u->free_slots[u->free_count++] = (uint16_t)(sl - u->slots);
}

static void udp_send_done(struct hd_op *op, int32_t res, uint32_t flags)
{
    (void)flags;
    struct net_udp_slot *sl = hd_container_of(op, struct net_udp_slot, op);
    struct net_udp *u = sl->u;
    udp_slot_release(u, sl);
    if (res < 0)
        u->stats.send_errors++;
    else
        u->stats.sent++;
    udp_maybe_free(u);
}

static void udp_group_done(struct hd_op *op, int32_t res, uint32_t flags)
{
    (void)flags;
    struct net_udp_group *g = hd_container_of(op, struct net_udp_group, op);
    struct net_udp *u = g->u;
    for (unsigned i = 0; i < g->count; i++)
        udp_slot_release(u, &u->slots[g->slot[i]]);
    if (res < 0) {
        u->stats.send_errors += g->count;
        if (res == -EIO || res == -EINVAL || res == -EOPNOTSUPP)
            u->gso = false; /* no GSO on this path: one sendmsg per datagram from now on */
    } else {
        u->stats.sent += g->count;
        u->stats.gso_sends++;
    }
    g->busy = false;
    udp_maybe_free(u);
}

static void udp_send_one(struct net_udp *u, struct net_udp_slot *sl)
{
    struct io_uring_sqe *sqe = hd_op_sqe(u->shard, &sl->op);
    if (sqe == NULL) { /* the SQ stayed full: dropped, counted */
        udp_slot_release(u, sl);
        u->stats.send_errors++;
        return;
    }
    sl->msg = (struct msghdr){
        .msg_name = &sl->to.ss, .msg_namelen = sl->to.len, .msg_iov = &sl->iov, .msg_iovlen = 1};
    io_uring_prep_sendmsg(sqe, u->fd, &sl->msg, 0);
}

/* How many pending slots from i on can go as one GSO send: the same address, the same length
 * (the last one may be shorter), at most NET_UDP_GSO_SEGS and 64 KiB. */
static unsigned udp_run(struct net_udp *u, unsigned i)
{
    const struct net_udp_slot *first = &u->slots[u->pending[i]];
    size_t seg = first->iov.iov_len, total = seg;
    unsigned n = 1;
    while (i + n < u->pending_count && n < NET_UDP_GSO_SEGS) {
        const struct net_udp_slot *sl = &u->slots[u->pending[i + n]];
        size_t len = sl->iov.iov_len;
        if (len > seg || total + len > NET_UDP_GSO_BYTES_MAX || sl->to.len != first->to.len ||
            memcmp(&sl->to.ss, &first->to.ss, first->to.len) != 0)
            break;
        total += len;
        n++;
        if (len < seg)
            break;
    }
    return n;
}

static bool udp_send_group(struct net_udp *u, unsigned i, unsigned n)
{
    struct net_udp_group *g = NULL;
    for (unsigned k = 0; k < NET_UDP_GSO_GROUPS && g == NULL; k++)
        if (!u->groups[k].busy)
            g = &u->groups[k];
    if (g == NULL)
        return false;
    struct io_uring_sqe *sqe = hd_op_sqe(u->shard, &g->op);
    if (sqe == NULL)
        return false;
    struct net_udp_slot *first = &u->slots[u->pending[i]];
    for (unsigned k = 0; k < n; k++) {
        g->slot[k] = u->pending[i + k];
        g->iov[k] = u->slots[g->slot[k]].iov;
    }
    g->count = n;
    g->busy = true;
    g->msg = (struct msghdr){.msg_name = &first->to.ss,
                             .msg_namelen = first->to.len,
                             .msg_iov = g->iov,
                             .msg_iovlen = n,
                             .msg_control = g->cmsg.buf,
                             .msg_controllen = CMSG_SPACE(sizeof(uint16_t))};
    HD_ASSERT(CMSG_SPACE(sizeof(uint16_t)) <= sizeof(g->cmsg.buf));
    struct cmsghdr *cm = CMSG_FIRSTHDR(&g->msg);
    cm->cmsg_level = SOL_UDP;
    cm->cmsg_type = UDP_SEGMENT;
    cm->cmsg_len = CMSG_LEN(sizeof(uint16_t));
    uint16_t seg = (uint16_t)first->iov.iov_len;
    memcpy(CMSG_DATA(cm), &seg, sizeof(seg));
    io_uring_prep_sendmsg(sqe, u->fd, &g->msg, 0);
    return true;
}

/* End of the tick: the datagrams queued during it go out, runs to one address as one GSO send
 * each (one sendmsg per destination and size), the rest one sendmsg each, in queue order. */
static void udp_flush(struct hd_flush *f)
{
    struct net_udp *u = hd_container_of(f, struct net_udp, flush);
    for (unsigned i = 0; i < u->pending_count;) {
        unsigned n = u->gso ? udp_run(u, i) : 1;
        if (n >= 2 && udp_send_group(u, i, n)) {
            i += n;
            continue;
        }
        udp_send_one(u, &u->slots[u->pending[i]]);
        i++;
    }
    u->pending_count = 0;
}

/* GRO where it can be had: the plain recv's buffer takes 64 KiB; a multishot recv needs the
 * socket's own ring of 64 KiB buffers. Otherwise off (a socket handed over may have it on). */
static void udp_gro_begin(struct net_udp *u)
{
    if (u->ns->udp_gro && (!u->multishot || net_udp_ring_init(u->ns, &u->ring) == 0)) {
        u->gro = net_udp_gro_set(u->fd, true) == 0;
        if (u->gro)
            return;
        net_udp_ring_fini(u->ns, &u->ring);
    }
    net_udp_gro_set(u->fd, false);
}

/* A UDP socket on fd, which it now owns (closed on failure too). */
static int udp_begin(struct hd_shard *s, int fd, net_udp_recv_fn *fn, void *arg,
                     struct net_udp **out)
{
    struct net_udp *u = calloc(1, sizeof(*u));
    if (u == NULL) {
        close(fd);
        return -ENOMEM;
    }
    u->shard = s;
    u->ns = net_shard_of(s);
    u->multishot = u->ns->buf_ring;
    hd_timer_init(&u->nobufs_timer, udp_nobufs_retry);
    u->fd = fd;
    u->fn = fn;
    u->arg = arg;
    hd_op_init(s, &u->recv_op, udp_recv_done);
    for (unsigned i = 0; i < NET_UDP_SLOTS; i++) {
        u->slots[i].u = u;
        hd_op_init(s, &u->slots[i].op, udp_send_done);
        u->free_slots[i] = (uint16_t)(NET_UDP_SLOTS - 1 - i);
    }
    u->free_count = NET_UDP_SLOTS;
    for (unsigned i = 0; i < NET_UDP_GSO_GROUPS; i++) {
        u->groups[i].u = u;
        hd_op_init(s, &u->groups[i].op, udp_group_done);
    }
    hd_flush_init(&u->flush, udp_flush);
    u->gso = true;
    udp_gro_begin(u);
    udp_recv_arm(u);
    *out = u;
    return 0;
}

int net_udp_open(struct hd_shard *s, const struct net_addr *addr, net_udp_recv_fn *fn, void *arg,
                 struct net_udp **out)
{
    int fd = socket(addr->sa.sa_family, SOCK_DGRAM | SOCK_CLOEXEC, IPPROTO_UDP);
    if (fd < 0)
        return -errno;
    int one = 1, zero = 0;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)); /* one socket per shard */
    if (addr->sa.sa_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    if (bind(fd, &addr->sa, addr->len) < 0) {
        int err = -errno;
        close(fd);
        return err;
    }
    return udp_begin(s, fd, fn, arg, out);
}

/* Binds a throw-away UDP socket on addr with the flags given: 0 or -errno. */
static int udp_try_bind(const struct net_addr *addr, bool reuse_addr, bool reuse_port)
{
    int fd = socket(addr->sa.sa_family, SOCK_DGRAM | SOCK_CLOEXEC, IPPROTO_UDP);
    if (fd < 0)
        return -errno;
    int one = 1, zero = 0;
    if (reuse_addr)
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (reuse_port)
        setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
    if (addr->sa.sa_family == AF_INET6) /* as net_udp_open: ":port" is both families */
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    int rc = bind(fd, &addr->sa, addr->len) < 0 ? -errno : 0;
    close(fd);
    return rc;
}

int net_udp_claim(const struct net_addr *addr)
{
    int rc = udp_try_bind(addr, false, false);
    if (rc != -EADDRINUSE)
        return rc; /* free (0), or another error */
    if (udp_try_bind(addr, false, true) == 0)
        return -EADDRINUSE; /* a SO_REUSEPORT group (another server's shards) we would join */
    if (udp_try_bind(addr, true, false) < 0)
        return -EADDRINUSE; /* a socket that shares with nobody */
    return 0; /* only SO_REUSEADDR sockets (a port hold): the shards bind beside them, as ever */
}

int net_udp_adopt(struct hd_shard *s, int fd, net_udp_recv_fn *fn, void *arg, struct net_udp **out)
{
    int type = 0;
    socklen_t len = sizeof(type);
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) < 0 || type != SOCK_DGRAM) {
        close(fd);
        return -EINVAL;
    }
    return udp_begin(s, fd, fn, arg, out);
}

int net_udp_send(struct net_udp *u, const void *data, size_t len, const struct net_addr *to)
{
    if (u->closing)
        return -EPIPE;
    if (len > NET_UDP_SEND_MAX)
        return -EMSGSIZE;
    if (u->free_count == 0) {
        u->stats.send_dropped++;
        return -ENOBUFS;
    }
    struct net_udp_slot *sl = &u->slots[u->free_slots[--u->free_count]];
    memcpy(sl->data, data, len);
    sl->to = *to;
    sl->iov = (struct iovec){.iov_base = sl->data, .iov_len = len};
    sl->busy = true;
    u->pending[u->pending_count++] = (uint16_t)(sl - u->slots);
    hd_flush_request(u->shard, &u->flush);
    return 0;
}

void net_udp_close(struct net_udp *u)
{
    if (u->closing)
        return;
    u->closing = true;
    hd_timer_stop(u->shard, &u->nobufs_timer);
    if (hd_op_busy(&u->recv_op))
        hd_op_cancel(u->shard, &u->recv_op);
    udp_maybe_free(u);
}

const struct net_udp_stats *net_udp_stats(const struct net_udp *u)
{
    return &u->stats;
}

struct hd_shard *net_udp_shard(const struct net_udp *u)
{
    return u->shard;
}

int net_udp_fd(const struct net_udp *u)
{
    return u->fd;
}
