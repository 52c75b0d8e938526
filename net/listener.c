/* listener.c - a listening TCP socket on one shard (SO_REUSEPORT: every shard has its own on
 * the same address, and the kernel spreads connections over them) with one multishot accept.
 * EMFILE/ENFILE/ENOMEM/ENOBUFS: the accept ends; it is re-armed after NET_ACCEPT_BACKOFF_MS,
 * never in a loop. Over the shard's connection cap a new socket is closed at once and counted.
 * net_listener_claim (main thread, before the shards listen): a socket with SO_REUSEADDR and
 * without SO_REUSEPORT, bound and never listening, which cannot bind where another process
 * listens ("address in use") and does not stop our own listeners: one process per address.
 * net_listener_adopt takes a socket another process handed over (handover.c; its type and
 * listening state are checked). net_listener_stop and net_listener_drain close only this
 * process's descriptor: what the kernel queued stays for the socket's other holder (a successor),
 * and drain still serves what the kernel had already accepted for us. net_listener_kick re-arms
 * the accept at once (io_uring's accepts wait exclusively: a wake-up the kernel gave an accept
 * that another process then cancelled would leave a connection waiting for the next one).
 * Runs on its shard; owns the socket and the struct (freed once the kernel returned the op). */
#include <errno.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "net_impl.h"

struct net_listener {
    struct hd_shard *shard;
    int fd;
    bool stopping;
    bool drain;  /* stopping, but what the kernel accepted meanwhile still goes to fn */
    bool kicked; /* the accept was cancelled to be armed again at once (net_listener_kick) */
    struct hd_op op;
    struct hd_timer backoff;
    net_accept_fn *fn;
    void *arg;
    uint32_t conns_max;
    struct net_addr addr;
    struct net_listener_stats stats;
};

static void accept_arm(struct net_listener *l);

static void listener_free(struct net_listener *l)
{
    hd_timer_stop(l->shard, &l->backoff);
    close(l->fd);
    free(l);
}

static void accept_done(struct hd_op *op, int32_t res, uint32_t flags)
{
    struct net_listener *l = hd_container_of(op, struct net_listener, op);
    if (res >= 0) {
        if (l->stopping && !l->drain) {
            close(res);
        } else if (net_conns_count(l->shard) >= l->conns_max) {
            close(res);
            l->stats.refused_cap++;
            hd_log_rl(HD_LOG_WARN, "listener: %u connections on this shard (the cap): refused one",
                      l->conns_max);
        } else {
            struct net_addr peer = {.len = sizeof(peer.ss)};
            if (getpeername(res, &peer.sa, &peer.len) < 0)
                peer.len = 0;
            l->stats.accepted++;
            l->fn(l, res, &peer, l->arg);
        }
    } else if (res != -ECANCELED) {
        l->stats.accept_errors++;
        hd_log_rl(HD_LOG_WARN, "listener: accept failed: %s; pausing %d ms", strerror(-res),
                  NET_ACCEPT_BACKOFF_MS);
    }
    if (flags & IORING_CQE_F_MORE)
        return;
    if (l->stopping) {
        listener_free(l);
        return;
    }
    bool kicked = l->kicked && res == -ECANCELED;
    l->kicked = false;
    if (res < 0 && !kicked)
        hd_timer_start(l->shard, &l->backoff, NET_ACCEPT_BACKOFF_MS);
    else
        accept_arm(l);
}

static void backoff_fired(struct hd_timer *t)
{
    accept_arm(hd_container_of(t, struct net_listener, backoff));
}

static void accept_arm(struct net_listener *l)
{
    struct io_uring_sqe *sqe = hd_op_sqe(l->shard, &l->op);
    if (sqe == NULL) {
        hd_timer_start(l->shard, &l->backoff, NET_ACCEPT_BACKOFF_MS);
        return;
    }
    io_uring_prep_multishot_accept(sqe, l->fd, NULL, NULL, SOCK_CLOEXEC);
}

static int listen_socket(const struct net_addr *addr, const struct net_listener_options *opt)
{
    int fd = socket(addr->sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC, IPPROTO_TCP);
    if (fd < 0)
        return -errno;
    int one = 1, zero = 0;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (!opt || opt->reuseport)
        setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
    if (addr->sa.sa_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero)); /* ":port" = both */
    if (opt && opt->tcp_user_timeout_ms > 0)
        setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &opt->tcp_user_timeout_ms,
                   sizeof(opt->tcp_user_timeout_ms));
    if (opt && opt->keepalive_s > 0) {
        setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &opt->keepalive_s, sizeof(opt->keepalive_s));
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &opt->keepalive_s, sizeof(opt->keepalive_s));
    }
    int backlog = opt && opt->backlog > 0 ? opt->backlog : NET_LISTEN_BACKLOG;
    if (bind(fd, &addr->sa, addr->len) < 0 || listen(fd, backlog) < 0) {
        int err = -errno;
        close(fd);
        return err;
    }
    return fd;
}

int net_listener_claim(const struct net_addr *addr)
{
    if (net_addr_port(addr) == 0)
        return -EINVAL;
    int fd = socket(addr->sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC, IPPROTO_TCP);
    if (fd < 0)
        return -errno;
    int one = 1, zero = 0;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)); /* our listeners bind too */
    if (addr->sa.sa_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero)); /* as listen_socket */
    if (bind(fd, &addr->sa, addr->len) < 0) {
        int err = -errno;
        close(fd);
        return err;
    }
    return fd;
}

/* A listener on fd, a listening socket it now owns (closed on failure too). */
static int listener_begin(struct hd_shard *s, int fd, const struct net_listener_options *opt,
                          net_accept_fn *fn, void *arg, struct net_listener **out)
{
    struct net_listener *l = calloc(1, sizeof(*l));
    if (l == NULL) {
        close(fd);
        return -ENOMEM;
    }
    l->shard = s;
    l->fd = fd;
    l->fn = fn;
    l->arg = arg;
    l->conns_max = opt && opt->conns_max ? opt->conns_max : NET_CONNS_MAX;
    l->addr.len = sizeof(l->addr.ss);
    getsockname(fd, &l->addr.sa, &l->addr.len);
    hd_op_init(s, &l->op, accept_done);
    hd_timer_init(&l->backoff, backoff_fired);
    accept_arm(l);
    *out = l;
    return 0;
}

int net_listener_start(struct hd_shard *s, const struct net_addr *addr,
                       const struct net_listener_options *opt, net_accept_fn *fn, void *arg,
                       struct net_listener **out)
{
    int fd = listen_socket(addr, opt);
    if (fd < 0)
        return fd;
    return listener_begin(s, fd, opt, fn, arg, out);
}

int net_listener_adopt(struct hd_shard *s, int fd, const struct net_listener_options *opt,
                       net_accept_fn *fn, void *arg, struct net_listener **out)
{
    int listening = 0, type = 0;
    socklen_t len = sizeof(listening), tlen = sizeof(type);
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) < 0 ||
        getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tlen) < 0 || !listening ||
        type != SOCK_STREAM) {
        close(fd);
        return -EINVAL;
    }
    return listener_begin(s, fd, opt, fn, arg, out);
}

void net_listener_stop(struct net_listener *l)
{
    if (l->stopping)
        return;
    l->stopping = true;
    hd_timer_stop(l->shard, &l->backoff);
    if (hd_op_busy(&l->op))
        hd_op_cancel(l->shard, &l->op);
    else
        listener_free(l);
}

void net_listener_drain(struct net_listener *l)
{
    if (!l->stopping)
        l->drain = true;
    net_listener_stop(l);
}

void net_listener_kick(struct net_listener *l)
{
    if (l->stopping)
        return;
    if (hd_op_busy(&l->op)) {
        l->kicked = true;
        hd_op_cancel(l->shard, &l->op);
        return;
    }
    hd_timer_stop(l->shard, &l->backoff);
    accept_arm(l);
}

const struct net_listener_stats *net_listener_stats(const struct net_listener *l)
{
    return &l->stats;
}

const struct net_addr *net_listener_addr(const struct net_listener *l)
{
    return &l->addr;
}

struct hd_shard *net_listener_shard(const struct net_listener *l)
{
    return l->shard;
}

int net_listener_fd(const struct net_listener *l)
{
    return l->fd;
}
