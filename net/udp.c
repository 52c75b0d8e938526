/* udp.c - UDP sockets on the reactor (STUN, a WireGuard relay). Receive: where the shard has its
 * buffer ring, one multishot recvmsg that stays armed and fills ring buffers (each holds the
 * kernel's io_uring_recvmsg_out header, the source address and the datagram), handed to the app
 * one by one in the tick they arrived and returned to the ring right after; every datagram of a
 * burst comes in one tick without a submission each. Without a ring: one recvmsg in flight into
 * the socket's own datagram buffer, re-armed after each datagram. Sends copy the datagram into
 * one of a fixed set of send slots and go out as one sendmsg each (batched by the ring,
 * submitted with the tick). Runs on the socket's shard; owns the socket and its buffers, freed
 * once the kernel returned every op. */
#include <errno.h>
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

struct net_udp {
    struct hd_shard *shard;
    struct net_shard *ns;
    int fd;
    bool closing;
    bool delivering; /* in the app's callback: a close there must not free us under it */
    bool multishot;  /* the recv is a multishot recvmsg into the shard's buffer ring */
    struct hd_timer nobufs_timer; /* the ring was empty: arm again after NET_NOBUFS_RETRY_MS */
    net_udp_recv_fn *fn;
    void *arg;
    struct hd_op recv_op;
    struct msghdr msg;
    struct iovec iov;
    struct net_addr from;
    struct net_udp_stats stats;
    unsigned free_count; /* free_slots[0..free_count): slots not in flight */
    uint16_t free_slots[NET_UDP_SLOTS];
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

/* A ring buffer the multishot recvmsg filled: [recvmsg_out][name][payload]. */
static void udp_deliver_buf(struct net_udp *u, uint16_t bid, int32_t res)
{
    uint8_t *buf = net_bufring_addr(u->ns, bid);
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
    udp_deliver(u, io_uring_recvmsg_payload(o, &u->msg),
                io_uring_recvmsg_payload_length(o, res, &u->msg));
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
        net_bufring_recycle(u->ns, bid);
    } else if (res >= 0 && !u->closing && !u->multishot) {
        u->from.len = u->msg.msg_namelen;
        udp_deliver(u, u->buf, (size_t)res);
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
    if (res == -ENOBUFS)
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
        u->msg = (struct msghdr){.msg_namelen = sizeof(u->from.ss)};
        io_uring_prep_recvmsg_multishot(sqe, u->fd, &u->msg, 0);
        sqe->flags |= IOSQE_BUFFER_SELECT;
        sqe->buf_group = NET_BUF_GROUP;
        return;
    }
    u->iov = (struct iovec){.iov_base = u->buf, .iov_len = sizeof(u->buf)};
    u->msg = (struct msghdr){.msg_name = &u->from.ss,
                             .msg_namelen = sizeof(u->from.ss),
                             .msg_iov = &u->iov,
                             .msg_iovlen = 1};
    io_uring_prep_recvmsg(sqe, u->fd, &u->msg, 0);
}

static void udp_send_done(struct hd_op *op, int32_t res, uint32_t flags)
{
    (void)flags;
    struct net_udp_slot *sl = hd_container_of(op, struct net_udp_slot, op);
    struct net_udp *u = sl->u;
    sl->busy = false;
    u->free_slots[u->free_count++] = (uint16_t)(sl - u->slots);
    if (res < 0)
        u->stats.send_errors++;
    else
        u->stats.sent++;
    udp_maybe_free(u);
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
    struct net_udp_slot *sl = &u->slots[u->free_slots[u->free_count - 1]];
    struct io_uring_sqe *sqe = hd_op_sqe(u->shard, &sl->op);
    if (sqe == NULL)
        return -EBUSY;
    u->free_count--;
    memcpy(sl->data, data, len);
    sl->to = *to;
    sl->iov = (struct iovec){.iov_base = sl->data, .iov_len = len};
    sl->msg = (struct msghdr){
        .msg_name = &sl->to.ss, .msg_namelen = to->len, .msg_iov = &sl->iov, .msg_iovlen = 1};
    io_uring_prep_sendmsg(sqe, u->fd, &sl->msg, 0);
    sl->busy = true;
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
