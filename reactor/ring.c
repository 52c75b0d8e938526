/* ring.c - io_uring set-up for one shard, probing what the kernel offers, best first:
 * SINGLE_ISSUER | DEFER_TASKRUN | SUBMIT_ALL (6.1+; DEFER_TASKRUN needs SINGLE_ISSUER), else
 * SINGLE_ISSUER | COOP_TASKRUN | SUBMIT_ALL, else COOP_TASKRUN, else plain (all but the last with
 * TASKRUN_FLAG: IORING_SQ_TASKRUN tells a spinning shard that completions wait in the kernel's
 * task work, shard.c); whether IORING_OP_MSG_RING exists for wake-ups (io_uring_get_probe_ring);
 * and the min-wait (IORING_FEAT_MIN_TIMEOUT, 6.12, used on DEFER_TASKRUN rings only:
 * HD_FEAT_MIN_WAIT). hd_runtime_config.features_disable forces the fallbacks (tests use it for
 * the eventfd wake-up path). Runs on the shard's own thread (SINGLE_ISSUER binds the ring to the
 * thread that creates it). */
#include <errno.h>
#include <string.h>

#include "hd_impl.h"

static const struct {
    uint32_t flags;
    uint32_t features;
} setups[] = {
    {IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_SUBMIT_ALL |
         IORING_SETUP_TASKRUN_FLAG,
     HD_FEAT_SINGLE_ISSUER | HD_FEAT_DEFER_TASKRUN},
    {IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_COOP_TASKRUN | IORING_SETUP_SUBMIT_ALL |
         IORING_SETUP_TASKRUN_FLAG,
     HD_FEAT_SINGLE_ISSUER | HD_FEAT_COOP_TASKRUN},
    {IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG, HD_FEAT_COOP_TASKRUN},
    {0, 0},
};

int hd_ring_setup(struct hd_shard *s, uint32_t entries, uint32_t disable)
{
    int rc = -EINVAL;
    for (unsigned i = 0; i < HD_ARRAY_SIZE(setups); i++) {
        if (setups[i].features & disable)
            continue;
        struct io_uring_params p;
        memset(&p, 0, sizeof(p));
        p.flags = setups[i].flags;
        rc = io_uring_queue_init_params(entries, &s->ring, &p);
        if (rc == 0) {
            s->features = setups[i].features;
            if (p.features & IORING_FEAT_EXT_ARG)
                s->features |= HD_FEAT_EXT_ARG;
            /* min-wait only on DEFER_TASKRUN rings: there the kernel turns the wait back into
             * wake-on-first-completion once the min-wait passed empty (cq_wait_nr = 1). */
            if ((p.features & IORING_FEAT_MIN_TIMEOUT) && (p.features & IORING_FEAT_EXT_ARG) &&
                (s->features & HD_FEAT_DEFER_TASKRUN) && !(disable & HD_FEAT_MIN_WAIT))
                s->features |= HD_FEAT_MIN_WAIT;
            break;
        }
        if (rc != -EINVAL)
            return rc; /* ENOMEM, EPERM (io_uring disabled), ...: no weaker setup helps */
    }
    if (rc < 0)
        return rc;
    s->ring_fd = s->ring.ring_fd;
    struct io_uring_probe *probe = io_uring_get_probe_ring(&s->ring);
    if (probe) {
        if (io_uring_opcode_supported(probe, IORING_OP_MSG_RING) && !(disable & HD_FEAT_MSG_RING))
            s->features |= HD_FEAT_MSG_RING;
        io_uring_free_probe(probe);
    }
    return 0;
}

int hd_ring_submit(struct hd_shard *s)
{
    int n = io_uring_submit(&s->ring);
    s->stats.enters++;
    s->sq_inline = 0;
    if (n > 0)
        s->stats.sqes += (uint64_t)n;
    return n;
}

struct io_uring_sqe *hd_sqe_get(struct hd_shard *s)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&s->ring);
    if (hd_likely(sqe != NULL))
        return sqe;
    hd_ring_submit(s); /* a full SQ: make room, never spin on it */
    sqe = io_uring_get_sqe(&s->ring);
    if (sqe == NULL)
        s->stats.sqe_full++;
    return sqe;
}

unsigned hd_ring_sq_publish(struct io_uring *ring)
{
    /* What liburing's submit does before its io_uring_enter (2.3 does not export it): make the
     * SQEs prepared since the last publish visible to the kernel (a release store of the tail),
     * and return how many the kernel has not consumed yet. Not for SQPOLL rings (never set up). */
    struct io_uring_sq *sq = &ring->sq;
    unsigned tail = sq->sqe_tail;
    if (sq->sqe_head != tail) {
        sq->sqe_head = tail;
        io_uring_smp_store_release(sq->ktail, tail);
    }
    return tail - io_uring_smp_load_acquire(sq->khead);
}
