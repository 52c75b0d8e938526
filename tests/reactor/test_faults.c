/* test_faults.c - the fault-injection switch (hd/hd_fault.h) on a real runtime: the spec's
 * parser, a refused submission (the op hears the error and the kernel never ran it), failed pool
 * gets on shard threads only, and the same seed giving the same draws. */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include <hd/hd_fault.h>
#include <hd/hd_uring.h>

static const struct hdt_options one = {.shards = 1};

Test(test_reactor_faults, spec_parsing)
{
    cr_assert_eq(hd_faults_configure(NULL), 0);
    cr_assert_eq(hd_faults_configure(""), 0);
    cr_assert_eq(hd_faults_configure("seed=7,sqe=0.01,short_send=0.05,reset=0.001,alloc=1"), 0);
    cr_assert_eq(hd_faults_configure("sqe=1.5"), -EINVAL);
    cr_assert_eq(hd_faults_configure("sqe=-0.1"), -EINVAL);
    cr_assert_eq(hd_faults_configure("sqe=0.1x"), -EINVAL);
    cr_assert_eq(hd_faults_configure("seed=x"), -EINVAL);
    cr_assert_eq(hd_faults_configure("nosuch=0.1"), -EINVAL);
    cr_assert_eq(hd_faults_configure("sqe"), -EINVAL);
    cr_assert_str_eq(hd_fault_name(HD_FAULT_SHORT_SEND), "short_send");
    /* A spec that failed leaves faults off: arming does nothing. */
    hd_faults_arm(true);
    cr_assert_not(atomic_load(&hd_faults_armed));
}

/* ---- a refused submission: a read of a pipe that holds data */
struct sqe_ctx {
    struct hd_shard *s;
    struct hd_op op;
    int fds[2];
    char buf[8];
    int32_t refused, read;
    int calls;
};

static void read_arm(struct sqe_ctx *c)
{
    struct io_uring_sqe *sqe = hd_op_sqe(c->s, &c->op);
    HDT_CHECK(sqe != NULL);
    io_uring_prep_read(sqe, c->fds[0], c->buf, sizeof(c->buf), 0);
}

static void sqe_done(struct hd_op *op, int32_t res, uint32_t flags)
{
    struct sqe_ctx *c = hd_container_of(op, struct sqe_ctx, op);
    HDT_CHECK(!(flags & HD_OP_F_MORE) && !hd_op_busy(op));
    if (c->calls++ == 0) {
        c->refused = res;
        hd_faults_arm(false);
        read_arm(c); /* the same read, now let through */
        return;
    }
    c->read = res;
    hdt_done(c->s);
}

static void sqe_body(struct hd_shard *s, void *arg)
{
    struct sqe_ctx *c = arg;
    c->s = s;
    hd_op_init(s, &c->op, sqe_done);
    HDT_CHECK(hd_faults_configure("seed=3,sqe=1") == 0);
    hd_faults_arm(true);
    read_arm(c);
    HDT_CHECK(hd_op_busy(&c->op));
}

Test(test_reactor_faults, refused_submission)
{
    struct sqe_ctx c = {0};
    cr_assert_eq(pipe(c.fds), 0);
    cr_assert_eq(write(c.fds[1], "abcdefgh", 8), 8);
    cr_assert_eq(hdt_run(&one, sqe_body, &c, NULL), 0);
    cr_assert(c.refused == -EAGAIN || c.refused == -ENOMEM || c.refused == -EBUSY, "res %d",
              c.refused);
    cr_assert_eq(c.read, 8, "the refused read never ran: the bytes are still there (%d)", c.read);
    cr_assert_eq(memcmp(c.buf, "abcdefgh", 8), 0);
    cr_assert_eq(hd_faults_count(HD_FAULT_SQE), 1);
    close(c.fds[0]);
    close(c.fds[1]);
}

/* ---- failed pool gets */
struct alloc_ctx {
    bool slab_null, frame_null, after_ok;
};

static void alloc_body(struct hd_shard *s, void *arg)
{
    struct alloc_ctx *c = arg;
    struct hd_slab *p;
    HDT_CHECK(hd_slab_create(s, "faults", 64, 16, &p) == 0);
    HDT_CHECK(hd_faults_configure("seed=1,alloc=1") == 0);
    hd_faults_arm(true);
    c->slab_null = hd_slab_get(p) == NULL;
    c->frame_null = hd_frame_get(s, 100) == NULL;
    hd_faults_arm(false);
    void *o = hd_slab_get(p);
    c->after_ok = o != NULL;
    if (o)
        hd_slab_put(p, o);
    hd_slab_destroy(p);
    hdt_done(s);
}

Test(test_reactor_faults, failed_pool_gets)
{
    struct alloc_ctx c = {0};
    cr_assert_eq(hdt_run(&one, alloc_body, &c, NULL), 0);
    cr_assert(c.slab_null && c.frame_null && c.after_ok);
    cr_assert_eq(hd_faults_count(HD_FAULT_ALLOC), 2);
    /* Off any shard (tools, the main thread's set-up): never. */
    struct hd_slab *p;
    cr_assert_eq(hd_slab_create(NULL, "main", 64, 16, &p), 0);
    cr_assert_eq(hd_faults_configure("alloc=1"), 0);
    hd_faults_arm(true);
    void *o = hd_slab_get(p);
    hd_faults_arm(false);
    cr_assert_not_null(o);
    hd_slab_put(p, o);
    hd_slab_destroy(p);
}

/* ---- reproducible draws: the same seed, the same faults on the same shard */
struct draw_ctx {
    const char *spec;
    uint64_t mask;
};

static void draw_body(struct hd_shard *s, void *arg)
{
    struct draw_ctx *c = arg;
    HDT_CHECK(hd_faults_configure(c->spec) == 0);
    hd_faults_arm(true);
    for (int i = 0; i < 64; i++)
        if (hd_fault(HD_FAULT_RESET))
            c->mask |= UINT64_C(1) << i;
    hd_faults_arm(false);
    hdt_done(s);
}

Test(test_reactor_faults, same_seed_same_draws)
{
    struct draw_ctx a = {.spec = "seed=9,reset=0.5"}, b = a, other = {.spec = "seed=10,reset=0.5"};
    cr_assert_eq(hdt_run(&one, draw_body, &a, NULL), 0);
    cr_assert_eq(hdt_run(&one, draw_body, &b, NULL), 0);
    cr_assert_eq(hdt_run(&one, draw_body, &other, NULL), 0);
    cr_assert_eq(a.mask, b.mask);
    cr_assert_neq(a.mask, other.mask);
    cr_assert(a.mask != 0 && a.mask != UINT64_MAX, "about half: %016llx",
              (unsigned long long)a.mask);
}
