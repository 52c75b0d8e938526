/* op.c - ops: tagging SQEs with (op pointer, generation), dispatching CQEs to callbacks,
 * cancellation. Runs on the owning shard's thread; owns nothing (ops live in their owners).
 *
 * struct hd_op (16 bytes: callback, 16-bit generation, in-flight count) is embedded in its
 * owner. hd_op_sqe takes an SQE (submitting first if the SQ is full), writes the tag
 * pointer | generation << 48 into user_data and counts the op in flight; the caller then preps
 * the SQE. Dispatch decodes the tag; a completion whose generation no longer matches (the owner
 * re-initialised the op: hd_op_init takes a shard-wide counter) is counted in cqes_stale and
 * dropped. A CQE without IORING_CQE_F_MORE ends the op's SQE; multishot ops stay in flight until
 * then. hd_op_cancel submits ASYNC_CANCEL (ALL) for the tag; the callback then sees -ECANCELED.
 * Reserved tags (hd_impl.h): 0 (our cancels and MSG_RING source completions), 1 (a wake-up) and
 * 2 (fault injection's stand-in NOP, fault.c). */
#include <errno.h>
#include <string.h>

#include <hd/hd_fault.h>

#include "hd_impl.h"

_Static_assert(HD_OP_F_MORE == IORING_CQE_F_MORE, "hd.h mirrors the CQE flag");

/* x86-64 and aarch64 user pointers fit in 48 bits: the top 16 carry the generation. */
#define HD_TAG_PTR_BITS 48
#define HD_TAG_PTR_MASK ((UINT64_C(1) << HD_TAG_PTR_BITS) - 1)

static inline uint64_t op_tag(const struct hd_op *op)
{
    uint64_t p = (uint64_t)(uintptr_t)op;
    HD_ASSERT((p & ~HD_TAG_PTR_MASK) == 0 && p > HD_TAG_FAULT);
    return p | ((uint64_t)op->gen << HD_TAG_PTR_BITS);
}

void hd_op_init(struct hd_shard *s, struct hd_op *op, hd_op_fn *fn)
{
    HD_ASSERT(op->inflight == 0 || op->fn == NULL);
    /* A shard-wide counter, not op->gen + 1: the memory may have been poisoned or zeroed since
     * its last life, and two owners must not get the same generation by accident. */
    s->op_gen++;
    if (s->op_gen == 0)
        s->op_gen = 1;
    op->fn = fn;
    op->gen = s->op_gen;
    op->inflight = 0;
    op->user = 0;
}

struct io_uring_sqe *hd_op_sqe(struct hd_shard *s, struct hd_op *op)
{
    struct io_uring_sqe *sqe = NULL;
    if (hd_fault(HD_FAULT_SQE) && (sqe = hd_fault_sqe(s, op_tag(op))) != NULL) {
        op->inflight++; /* in flight until its failed CQE is dispatched */
        s->ops_inflight++;
        return sqe;
    }
    sqe = hd_sqe_get(s);
    if (hd_unlikely(sqe == NULL))
        return NULL;
    /* Callers prep after this: liburing's io_uring_prep_* helpers never write user_data. */
    io_uring_sqe_set_data64(sqe, op_tag(op));
    op->inflight++;
    s->ops_inflight++;
    return sqe;
}

void hd_op_expect_inline(struct hd_shard *s)
{
    s->sq_inline++;
}

static inline void dispatch_op(struct hd_shard *s, uint64_t tag, int32_t res, uint32_t flags)
{
    struct hd_op *op = (struct hd_op *)(uintptr_t)(tag & HD_TAG_PTR_MASK);
    uint16_t gen = (uint16_t)(tag >> HD_TAG_PTR_BITS);
    if (hd_unlikely(op->gen != gen || op->inflight == 0)) {
        /* The kernel finished an SQE of an op's previous life: it is no longer in flight,
         * but its owner is someone else now and must not hear of it. */
        s->stats.cqes_stale++;
        if (!(flags & IORING_CQE_F_MORE))
            s->ops_inflight--;
        return;
    }
    if (!(flags & IORING_CQE_F_MORE)) {
        op->inflight--;
        s->ops_inflight--;
    }
    hd_running(s, HD_RUN_OP, (const void *)op->fn);
    op->fn(op, res, flags);
}

/* A refused submission's stand-in NOP completed: the op hears its error (fault.c). Out of line,
 * so the common path stays as it was. */
__attribute__((noinline, cold)) static void dispatch_fault(struct hd_shard *s)
{
    uint64_t tag;
    int32_t res;
    if (hd_fault_cqe(&tag, &res))
        dispatch_op(s, tag, res, 0);
}

static void dispatch_one(struct hd_shard *s, const struct io_uring_cqe *cqe)
{
    uint64_t tag = cqe->user_data;
    if (hd_unlikely(tag <= HD_TAG_FAULT || tag == LIBURING_UDATA_TIMEOUT)) {
        /* Our cancels and wake sources, liburing's own timeout on kernels w/o EXT_ARG. */
        if (tag == HD_TAG_WAKE)
            hd_bus_wake_received(s);
        else if (tag == HD_TAG_FAULT)
            dispatch_fault(s);
        return;
    }
    dispatch_op(s, tag, cqe->res, cqe->flags);
}

unsigned hd_ops_dispatch(struct hd_shard *s, unsigned budget)
{
    struct io_uring_cqe *cqes[HD_CQE_BATCH];
    unsigned total = 0;
    while (total < budget) {
        unsigned want = budget - total < HD_CQE_BATCH ? budget - total : HD_CQE_BATCH;
        unsigned n = io_uring_peek_batch_cqe(&s->ring, cqes, want);
        if (n == 0)
            break;
        for (unsigned i = 0; i < n; i++) {
            /* Copy before advancing would be needed if callbacks could refill the CQ under us;
             * they cannot (CQEs only arrive when we enter), so dispatch in place. */
            dispatch_one(s, cqes[i]);
        }
        io_uring_cq_advance(&s->ring, n);
        total += n;
        if (n < want)
            break; /* the CQ is empty: no need to look again */
    }
    s->stats.cqes += total;
    return total;
}

int hd_op_cancel(struct hd_shard *s, struct hd_op *op)
{
    if (op->inflight == 0)
        return -ENOENT;
    struct io_uring_sqe *sqe = hd_sqe_get(s);
    if (sqe == NULL)
        return -EBUSY;
    /* ALL: a multishot op or several SQEs of the same op go in one request. */
    io_uring_prep_cancel64(sqe, op_tag(op), IORING_ASYNC_CANCEL_ALL);
    io_uring_sqe_set_data64(sqe, HD_TAG_IGNORE);
    return 0;
}

int hd_op_nop(struct hd_shard *s, struct hd_op *op)
{
    struct io_uring_sqe *sqe = hd_op_sqe(s, op);
    if (sqe == NULL)
        return -EBUSY;
    io_uring_prep_nop(sqe);
    return 0;
}

int hd_op_timeout(struct hd_shard *s, struct hd_op *op, uint64_t timeout_ns)
{
    struct __kernel_timespec ts = {.tv_sec = (long long)(timeout_ns / 1000000000u),
                                   .tv_nsec = (long long)(timeout_ns % 1000000000u)};
    struct io_uring_sqe *sqe = hd_op_sqe(s, op);
    if (sqe == NULL)
        return -EBUSY;
    io_uring_prep_timeout(sqe, &ts, 0, 0);
    hd_ring_submit(s); /* the kernel reads ts when it takes the SQE: submit while ts is alive */
    return 0;
}
