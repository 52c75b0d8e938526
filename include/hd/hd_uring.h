/* hd_uring.h - the io_uring face of the reactor, for net/ only (CONVENTIONS.md: no io_uring
 * type above net/). liburing 2.3 with a 6.1-level linux/io_uring.h while kernels run up to 6.18:
 * the compat block defines the few newer UAPI values we use (values from the kernel's
 * include/uapi/linux/io_uring.h); features are probed at run time, never assumed. */
#ifndef HD_URING_H
#define HD_URING_H

#include <liburing.h>

#include <hd/hd.h>

/* ---- compat: UAPI values newer than Debian's headers */
#ifndef IORING_RECVSEND_BUNDLE
#define IORING_RECVSEND_BUNDLE (1U << 4) /* 6.10 */
#endif
#ifndef IOU_PBUF_RING_INC
#define IOU_PBUF_RING_INC 2 /* 6.12: incremental buffer consumption */
#endif
#ifndef IORING_CQE_F_BUF_MORE
#define IORING_CQE_F_BUF_MORE (1U << 4) /* 6.12 */
#endif
#ifndef IORING_MSG_RING_CQE_SKIP
#define IORING_MSG_RING_CQE_SKIP (1U << 0) /* 6.2 */
#endif
#ifndef IORING_FEAT_MIN_TIMEOUT
#define IORING_FEAT_MIN_TIMEOUT (1U << 15) /* 6.12: io_uring_getevents_arg.min_wait_usec */
#endif
/* struct io_uring_getevents_arg as of 6.12: 6.1's `pad` became min_wait_usec. */
struct hd_getevents_arg {
    __u64 sigmask;
    __u32 sigmask_sz;
    __u32 min_wait_usec;
    __u64 ts;
};
_Static_assert(sizeof(struct hd_getevents_arg) == sizeof(struct io_uring_getevents_arg),
               "the kernel reads the 6.1 layout's size");
#ifndef IORING_SETUP_NO_SQARRAY
#define IORING_SETUP_NO_SQARRAY (1U << 16) /* 6.6 */
#endif

/* An SQE for op, tagged with the op's pointer and generation, counted in flight. When the SQ is
 * full the ring is submitted first; NULL only if it stays full (counted as sqe_full). */
struct io_uring_sqe *hd_op_sqe(struct hd_shard *s, struct hd_op *op);
/* The SQE just taken (hd_op_sqe) posts its completion within the io_uring_enter that submits it:
 * a NOP, a send to a socket with room in its buffer. Under load the tick's sleep then submits
 * and sleeps in one enter, waiting for a completion beyond those (a submit that returned first
 * would let a peer its sends woke on this CPU preempt the shard on the way out); one that does
 * not complete at once after all is seen within HD_INLINE_WAIT_US (docs/ARCHITECTURE.md, the
 * wait policy). */
void hd_op_expect_inline(struct hd_shard *s);
/* The shard's ring (for registration calls such as buffer rings). */
struct io_uring *hd_shard_ring(struct hd_shard *s);

#endif /* HD_URING_H */
