/* test_ops.c - ops on a real io_uring: NOP, timeout, read/write on a pipe and a socketpair,
 * multishot, cancellation, stale completions, and stopping with ops in flight. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "harness.h"
#include <hd/hd_uring.h>

static const struct hdt_options one = {.shards = 1};

/* ---- NOP and timeout */
struct nop_ctx {
    struct hd_shard *s;
    struct hd_op op;
    int calls;
    int32_t res;
};

static void nop_done(struct hd_op *op, int32_t res, uint32_t flags)
{
    struct nop_ctx *c = hd_container_of(op, struct nop_ctx, op);
    HDT_CHECK(!(flags & HD_OP_F_MORE));
    HDT_CHECK(!hd_op_busy(op));
    c->calls++;
    c->res = res;
    if (c->calls < 1000) {
        HDT_CHECK(hd_op_nop(c->s, op) == 0);
        return;
    }
    hdt_done(c->s);
}

static void nop_body(struct hd_shard *s, void *arg)
{
    struct nop_ctx *c = arg;
    c->s = s;
    hd_op_init(s, &c->op, nop_done);
    HDT_CHECK(hd_op_nop(s, &c->op) == 0);
    HDT_CHECK(hd_op_busy(&c->op));
}

Test(test_reactor_ops, nop_round_trips)
{
    struct nop_ctx c = {0};
    cr_assert_eq(hdt_run(&one, nop_body, &c, NULL), 0);
    cr_assert_eq(c.calls, 1000);
    cr_assert_eq(c.res, 0);
}

struct tmo_ctx {
    struct hd_shard *s;
    struct hd_op op;
    uint64_t start_ns, end_ns;
    int32_t res;
};

static void tmo_done(struct hd_op *op, int32_t res, uint32_t flags)
{
    (void)flags;
    struct tmo_ctx *c = hd_container_of(op, struct tmo_ctx, op);
    c->res = res;
    c->end_ns = hd_clock_ns();
    hdt_done(c->s);
}

static void tmo_body(struct hd_shard *s, void *arg)
{
    struct tmo_ctx *c = arg;
    c->s = s;
    hd_op_init(s, &c->op, tmo_done);
    c->start_ns = hd_clock_ns();
    HDT_CHECK(hd_op_timeout(s, &c->op, 20 * 1000 * 1000) == 0);
}

Test(test_reactor_ops, kernel_timeout_fires_not_early)
{
    struct tmo_ctx c = {0};
    cr_assert_eq(hdt_run(&one, tmo_body, &c, NULL), 0);
    cr_assert_eq(c.res, -ETIME);
    cr_assert_geq(c.end_ns - c.start_ns, 20u * 1000 * 1000, "fired after %llu ns",
                  (unsigned long long)(c.end_ns - c.start_ns));
}

/* ---- read/write through a pipe or a socketpair: a writer op and a reader op ping-pong 64 KiB */
struct rw_ctx {
    struct hd_shard *s;
    int rfd, wfd;
    struct hd_op rop, wop;
    unsigned char out[65536], in[65536];
    size_t sent, got;
    bool socket;
};

static void rw_write(struct rw_ctx *c);
static void rw_read(struct rw_ctx *c);

static void rw_wdone(struct hd_op *op, int32_t res, uint32_t flags)
{
    (void)flags;
    struct rw_ctx *c = hd_container_of(op, struct rw_ctx, wop);
    HDT_CHECK(res > 0);
    c->sent += (size_t)res;
    if (c->sent < sizeof(c->out))
        rw_write(c);
}

static void rw_rdone(struct hd_op *op, int32_t res, uint32_t flags)
{
    (void)flags;
    struct rw_ctx *c = hd_container_of(op, struct rw_ctx, rop);
    HDT_CHECK(res > 0);
    c->got += (size_t)res;
    if (c->got < sizeof(c->in))
        rw_read(c);
    else
        hdt_done(c->s);
}

static void rw_write(struct rw_ctx *c)
{
    struct io_uring_sqe *sqe = hd_op_sqe(c->s, &c->wop);
    HDT_CHECK(sqe);
    size_t n = sizeof(c->out) - c->sent;
    if (n > 4000)
        n = 4000;
    if (c->socket)
        io_uring_prep_send(sqe, c->wfd, c->out + c->sent, n, 0);
    else
        io_uring_prep_write(sqe, c->wfd, c->out + c->sent, (unsigned)n, 0);
}

static void rw_read(struct rw_ctx *c)
{
    struct io_uring_sqe *sqe = hd_op_sqe(c->s, &c->rop);
    HDT_CHECK(sqe);
    size_t n = sizeof(c->in) - c->got;
    if (c->socket)
        io_uring_prep_recv(sqe, c->rfd, c->in + c->got, n, 0);
    else
        io_uring_prep_read(sqe, c->rfd, c->in + c->got, (unsigned)n, 0);
}

static void rw_body(struct hd_shard *s, void *arg)
{
    struct rw_ctx *c = arg;
    c->s = s;
    hd_op_init(s, &c->rop, rw_rdone);
    hd_op_init(s, &c->wop, rw_wdone);
    rw_read(c); /* armed first: it waits for data */
    rw_write(c);
}

static void rw_check(bool socket)
{
    static struct rw_ctx c;
    memset(&c, 0, sizeof(c));
    int fds[2];
    if (socket)
        cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    else
        cr_assert_eq(pipe(fds), 0);
    c.rfd = fds[0];
    c.wfd = fds[1];
    c.socket = socket;
    for (size_t i = 0; i < sizeof(c.out); i++)
        c.out[i] = (unsigned char)(i * 131 + 7);
    cr_assert_eq(hdt_run(&one, rw_body, &c, NULL), 0);
    cr_assert_eq(c.got, sizeof(c.in));
    cr_assert_eq(memcmp(c.in, c.out, sizeof(c.in)), 0);
    close(fds[0]);
    close(fds[1]);
}

Test(test_reactor_ops, pipe_read_write)
{
    rw_check(false);
}

Test(test_reactor_ops, socketpair_send_recv)
{
    rw_check(true);
}

/* ---- multishot: one poll SQE, many CQEs with MORE, then cancel ends it with -ECANCELED */
struct ms_ctx {
    struct hd_shard *s;
    struct hd_op op;
    int efd;
    int more, finals;
    int32_t final_res;
    struct hd_timer kick;
};

static void ms_kick(struct hd_timer *t)
{
    struct ms_ctx *c = hd_container_of(t, struct ms_ctx, kick);
    uint64_t v;
    if (read(c->efd, &v, sizeof(v)) < 0) /* drain so the next write re-triggers */
        v = 0;
    if (c->more < 5) {
        v = 1;
        HDT_CHECK(write(c->efd, &v, sizeof(v)) == sizeof(v));
        hd_timer_start(c->s, t, 2);
    } else {
        HDT_CHECK(hd_op_cancel(c->s, &c->op) == 0);
    }
}

static void ms_done(struct hd_op *op, int32_t res, uint32_t flags)
{
    struct ms_ctx *c = hd_container_of(op, struct ms_ctx, op);
    if (flags & HD_OP_F_MORE) {
        HDT_CHECK(res > 0 && (res & POLLIN));
        HDT_CHECK(hd_op_busy(op)); /* still armed */
        c->more++;
        return;
    }
    c->finals++;
    c->final_res = res;
    HDT_CHECK(!hd_op_busy(op));
    hdt_done(c->s);
}

static void ms_body(struct hd_shard *s, void *arg)
{
    struct ms_ctx *c = arg;
    c->s = s;
    hd_op_init(s, &c->op, ms_done);
    struct io_uring_sqe *sqe = hd_op_sqe(s, &c->op);
    HDT_CHECK(sqe);
    io_uring_prep_poll_multishot(sqe, c->efd, POLLIN);
    hd_timer_init(&c->kick, ms_kick);
    hd_timer_start(s, &c->kick, 1);
}

Test(test_reactor_ops, multishot_then_cancel)
{
    struct ms_ctx c = {0};
    c.efd = eventfd(0, EFD_NONBLOCK);
    cr_assert_geq(c.efd, 0);
    cr_assert_eq(hdt_run(&one, ms_body, &c, NULL), 0);
    cr_assert_geq(c.more, 5);
    cr_assert_eq(c.finals, 1);
    cr_assert_eq(c.final_res, -ECANCELED);
    close(c.efd);
}

/* ---- cancel a read that would wait forever */
struct cancel_ctx {
    struct hd_shard *s;
    struct hd_op op;
    int fds[2];
    char buf[16];
    int32_t res;
    int calls;
};

static void cancel_done(struct hd_op *op, int32_t res, uint32_t flags)
{
    (void)flags;
    struct cancel_ctx *c = hd_container_of(op, struct cancel_ctx, op);
    c->res = res;
    c->calls++;
    hdt_done(c->s);
}

static void cancel_body(struct hd_shard *s, void *arg)
{
    struct cancel_ctx *c = arg;
    c->s = s;
    hd_op_init(s, &c->op, cancel_done);
    HDT_CHECK(hd_op_cancel(s, &c->op) == -ENOENT); /* nothing in flight yet */
    struct io_uring_sqe *sqe = hd_op_sqe(s, &c->op);
    io_uring_prep_read(sqe, c->fds[0], c->buf, sizeof(c->buf), 0);
    HDT_CHECK(hd_op_cancel(s, &c->op) == 0);
}

Test(test_reactor_ops, cancel_read_sees_ecanceled)
{
    struct cancel_ctx c = {0};
    cr_assert_eq(pipe(c.fds), 0);
    cr_assert_eq(hdt_run(&one, cancel_body, &c, NULL), 0);
    cr_assert_eq(c.calls, 1);
    cr_assert_eq(c.res, -ECANCELED);
    close(c.fds[0]);
    close(c.fds[1]);
}

/* ---- stale completion: the owner is reused (re-initialised) while its NOP is in the kernel.
 * The old completion must be counted and dropped, never delivered to the new owner. */
struct stale_ctx {
    struct hd_shard *s;
    struct hd_op op;
    struct hd_op probe;
    int old_calls, new_calls;
    uint64_t stale;
};

static void stale_old(struct hd_op *op, int32_t res, uint32_t flags)
{
    (void)res, (void)flags;
    hd_container_of(op, struct stale_ctx, op)->old_calls++;
}

static void stale_new(struct hd_op *op, int32_t res, uint32_t flags)
{
    (void)res, (void)flags;
    hd_container_of(op, struct stale_ctx, op)->new_calls++;
}

static void stale_probe_done(struct hd_op *op, int32_t res, uint32_t flags)
{
    (void)res, (void)flags;
    struct stale_ctx *c = hd_container_of(op, struct stale_ctx, probe);
    c->stale = hd_shard_stats(c->s)->cqes_stale;
    hdt_done(c->s);
}

static void stale_body(struct hd_shard *s, void *arg)
{
    struct stale_ctx *c = arg;
    c->s = s;
    hd_op_init(s, &c->op, stale_old);
    HDT_CHECK(hd_op_nop(s, &c->op) == 0);
    /* Simulate the owner's memory being recycled for a new object (a bug the tag defends
     * against): forget the op in flight and give it a new life. */
    c->op.inflight = 0;
    hd_op_init(s, &c->op, stale_new);
    hd_op_init(s, &c->probe, stale_probe_done);
    HDT_CHECK(hd_op_nop(s, &c->probe) == 0); /* completes after the stale NOP */
}

Test(test_reactor_ops, stale_completion_is_dropped)
{
    struct stale_ctx c = {0};
    cr_assert_eq(hdt_run(&one, stale_body, &c, NULL), 0);
    cr_assert_eq(c.old_calls, 0);
    cr_assert_eq(c.new_calls, 0);
    cr_assert_eq(c.stale, 1);
}

/* ---- stop with ops in flight: every owner is freed by its -ECANCELED callback (ASan's leak
 * check proves nothing is left), on two shards. */
#define STOP_READS 64
struct pending_read {
    struct hd_op op;
    char buf[8];
};
static _Atomic int stop_cancelled;
static int stop_fds[2];

static void pending_done(struct hd_op *op, int32_t res, uint32_t flags)
{
    (void)flags;
    HDT_CHECK(res == -ECANCELED);
    atomic_fetch_add(&stop_cancelled, 1);
    free(hd_container_of(op, struct pending_read, op));
}

static void stop_body(struct hd_shard *s, void *arg)
{
    (void)arg;
    for (int i = 0; i < STOP_READS; i++) {
        struct pending_read *p = malloc(sizeof(*p));
        HDT_CHECK(p);
        memset(p, 0, sizeof(*p));
        hd_op_init(s, &p->op, pending_done);
        struct io_uring_sqe *sqe = hd_op_sqe(s, &p->op);
        io_uring_prep_read(sqe, stop_fds[0], p->buf, sizeof(p->buf), 0);
    }
    hdt_done(s); /* stop while all of them wait */
}

Test(test_reactor_ops, stop_cancels_ops_in_flight)
{
    cr_assert_eq(pipe(stop_fds), 0);
    struct hdt_options two = {.shards = 2};
    cr_assert_eq(hdt_run(&two, stop_body, NULL, NULL), 0);
    cr_assert_eq(atomic_load(&stop_cancelled), 2 * STOP_READS);
    close(stop_fds[0]);
    close(stop_fds[1]);
}
