/* hd_limits.h - every limit of the reactor, with its reason. Any thread (constants only). */
#ifndef HD_LIMITS_H
#define HD_LIMITS_H

#include <hd/hd_base.h>

/* Shards: one per online core by default; the bus is N x (N-1) rings, so N stays small. */
#define HD_SHARDS_MAX 64

/* io_uring submission queue entries per shard. The CQ is twice that (kernel default); multishot
 * recv and accept can post many CQEs per SQE, overflow is handled by the kernel's backlog. */
#define HD_SQ_ENTRIES_DEFAULT 1024
#define HD_SQ_ENTRIES_MAX     32768
_Static_assert(HD_IS_POW2(HD_SQ_ENTRIES_DEFAULT), "io_uring rounds entries to a power of two");

/* CQEs dispatched per peek batch; the loop drains in batches until the CQ is empty or the tick's
 * CQE budget is spent (so a flood of completions cannot starve timers and the bus). */
#define HD_CQE_BATCH      256
#define HD_CQE_BUDGET_MAX 8192
_Static_assert(HD_CQE_BATCH <= HD_CQE_BUDGET_MAX, "a batch fits in the budget");

/* Deferred tasks per shard: a fixed ring, -EAGAIN when full (no hidden malloc). */
#define HD_DEFER_RING_SIZE 4096
_Static_assert(HD_IS_POW2(HD_DEFER_RING_SIZE), "ring index masks");
/* Generation-checked handles (hd_handle_open) per shard: the table grows by HD_HANDLE_CHUNK
 * slots (16 B each) as they are needed, up to HD_HANDLES_MAX (then -ENOSPC), and keeps its
 * chunks until the shard is freed (a stale handle's slot is always there to check). */
#define HD_HANDLE_CHUNK 4096u
#define HD_HANDLES_MAX  (1u << 22)

/* Bus: SPSC ring slots per (producer, consumer) pair and the producer-side overflow that absorbs
 * short bursts when a ring is full. 4096 x 32 B = 128 KiB per pair. */
#define HD_BUS_RING_SIZE     4096
#define HD_BUS_OVERFLOW_SIZE 1024
#define HD_BUS_DRAIN_BUDGET  4096 /* messages taken from one inbox per tick */
/* Slots apps cannot take: the reactor's own messages (frames going home) always fit. */
#define HD_BUS_RESERVED 64
/* Slots an app's bulk messages (hd_bus_send) leave free for its control messages
 * (hd_bus_send_control: a connection's state changes between shards), so a bus its packets
 * filled still carries them, in order behind those packets. */
#define HD_BUS_CONTROL_ROOM 256
/* What hd_bus_send leaves free of ring + overflow (or of the own shard's queue). */
#define HD_BUS_BULK_RESERVE (HD_BUS_RESERVED + HD_BUS_CONTROL_ROOM)
/* Lazy messages (frames going home) do not wake a sleeping consumer while fewer than this many
 * messages wait in its ring from us: it drains them on its next tick, whatever wakes it. A
 * quarter of the ring, so a long sleep can never leave the ring too full for urgent ones. */
#define HD_BUS_LAZY_BACKLOG (HD_BUS_RING_SIZE / 4)
_Static_assert(HD_IS_POW2(HD_BUS_RING_SIZE), "ring index masks");
_Static_assert(HD_IS_POW2(HD_BUS_OVERFLOW_SIZE), "overflow index masks");
_Static_assert(HD_BUS_DRAIN_BUDGET <= HD_BUS_RING_SIZE, "budget never exceeds one full ring");
_Static_assert(HD_BUS_BULK_RESERVE < HD_BUS_OVERFLOW_SIZE / 2,
               "apps' bulk keeps most of the overflow");
/* Messages a shard sends itself (hd_bus_send to its own id) wait in a queue of their own, run at
 * the shard's next bus drain: 4096 x 32 B = 128 KiB per shard. */
#define HD_BUS_SELF_SIZE HD_BUS_RING_SIZE
_Static_assert(HD_IS_POW2(HD_BUS_SELF_SIZE), "self queue index masks");
_Static_assert(HD_BUS_SELF_SIZE > 2 * HD_BUS_BULK_RESERVE,
               "apps' bulk gets most of the self queue");

/* Posts (hd_runtime_post): slots in each shard's inbox for threads that are not shards. The main
 * thread posts a handful of messages per reload (one per shard per snapshot), so 64 is plenty;
 * a full inbox returns -EAGAIN. hd_snap_var_publish retries a full inbox every millisecond for
 * at most HD_POST_RETRY_MS before giving up on that shard. */
#define HD_POST_INBOX_SIZE 64
#define HD_POST_RETRY_MS   1000
_Static_assert(HD_IS_POW2(HD_POST_INBOX_SIZE), "inbox index masks");

/* Timer wheel: 4 levels x 64 slots of 1 ms, 64^4 ms = 4.6 h; longer timers are re-cascaded. */
#define HD_WHEEL_BITS   6
#define HD_WHEEL_SLOTS  (1u << HD_WHEEL_BITS)
#define HD_WHEEL_LEVELS 4
_Static_assert(HD_WHEEL_SLOTS == 64, "a level's occupancy is one uint64_t bitmap");

/* One tick in this many records the loop histograms (tick work time, CQEs per tick). */
#define HD_TICK_SAMPLE 16
_Static_assert(HD_IS_POW2(HD_TICK_SAMPLE), "sampling masks the tick counter");

/* hd_shard_busy_ppm(rt, shard) (hd.h; any thread, a few loads and one clock read): how busy
 * the shard was lately, in parts per million of one core (0 .. HD_BUSY_PPM_FULL): its thread's
 * CPU time (user and kernel, so the work io_uring_enter does inline counts) over the wall time
 * of the last HD_BUSY_INTERVAL_MS, as the shard published it at the end of that interval; 0 for
 * a shard that has slept for two intervals or more, and for a shard number out of range. For
 * policies that gather or spread work (a relay packing its clients on one shard). The interval
 * is long enough that one slow tick does not swing the figure, short enough that a policy
 * reacts within a second or two. */
#define HD_BUSY_INTERVAL_MS 1000
#define HD_BUSY_PPM_FULL    1000000u

/* Busy-poll before sleeping (microseconds). 0 = off; capped so a misconfiguration cannot burn a
 * core for long without checking timers. */
#define HD_BUSY_POLL_US_MAX 1000

/* The adaptive spin before a sleep (shard.c, docs/ARCHITECTURE.md "The wait policy"): when the
 * recent waits for work averaged at most what a sleep and its wake-up cost the shard's CPU, the
 * shard spins that long before it sleeps (a spin that outlasts it costs at most twice the sleep
 * it tried to avoid). HD_SLEEP_COST_US: 9-17 us for a sleep ended by another CPU's wake-up,
 * 19-27 us by a timer, on the 2-vCPU VM of perf/RESULTS.md 2026-12-06. The average weighs each
 * new wait 1/HD_SPIN_GAP_WEIGHT, each counted up to HD_SPIN_GAP_CAP_NS (an idle second does
 * not need a thousand waits to be forgotten, and is long enough already). */
#define HD_SLEEP_COST_US   15
#define HD_SPIN_GAP_WEIGHT 8
#define HD_SPIN_GAP_CAP_NS (1000u * 1000u)
/* A sleep that submits completions-at-once (hd_op_expect_inline) waits for one completion beyond
 * them, where the recent gap is at most HD_INLINE_GAP_MAX_NS, for at most HD_INLINE_WAIT_US (so a
 * send that went asynchronous after all, whose completion does not wake such a wait, is taken
 * that soon even if nothing else comes). The bound is longer than a scheduler tick (4 ms at
 * HZ=250) on purpose: a shorter one would be the CPU's earliest timer at every sleep, and
 * arming and cancelling it reprograms the timer hardware, a VM exit each on a VM (+30 % CPU per
 * GB at a 200 us bound, perf/RESULTS.md 2026-12-07). With input at least twenty times closer
 * than the bound the wait rarely ends at it; with sparser input the submit goes first. */
#define HD_INLINE_GAP_MAX_NS (250u * 1000u)
#define HD_INLINE_WAIT_US    5000

/* The tick's min-wait (io_uring's IORING_ENTER_EXT_ARG min_wait_usec, kernels >= 6.12, probed).
 * Under load (at least HD_MIN_WAIT_ARM_CQES completions dispatched in this millisecond and the
 * one before) a sleep waits for HD_MIN_WAIT_BATCH completions, or until the min-wait passed with at
 * least one: one wake-up for several packets instead of one each. A completion it holds waits at
 * most the min-wait; once the min-wait passed empty the first completion wakes at once, and a
 * lone ping (four CQEs) never arms it. Off unless configured (min_wait_us: an app's trade of
 * latency for CPU, docs/ARCHITECTURE.md). The cap keeps a configuration from holding completions
 * for long. */
#define HD_MIN_WAIT_US_MAX   1000000
#define HD_MIN_WAIT_BATCH    32
#define HD_MIN_WAIT_ARM_CQES 16
/* A min-wait sleep always carries a timeout (without one the kernel ends the wait at the
 * min-wait even with nothing to report): at most this long when no timer is armed. */
#define HD_MIN_WAIT_IDLE_TS_MS 1000
/* Adaptive min-wait (min_wait_gather > 0): a wait shorter than this is not worth its timer (the
 * shard is busy enough to find completions without it), so the plain wait runs instead. */
#define HD_MIN_WAIT_US_FLOOR   10
#define HD_MIN_WAIT_GATHER_MAX 64
_Static_assert(HD_MIN_WAIT_GATHER_MAX <= HD_MIN_WAIT_BATCH * 2, "gathering stays a small batch");
/* Each shard thread's timer slack (PR_SET_TIMERSLACK): the kernel may end a timed wait this much
 * late (the default is 50 us, which a min-wait of tens of microseconds would more than double). */
#define HD_TIMER_SLACK_NS 1000

/* Slab pools: objects are carved lazily (bump pointer, so untouched pages stay unmapped) from
 * chunks aligned to their size; a chunk header finds its pool in O(1). */
#define HD_SLAB_CHUNK_SIZE (2u * 1024u * 1024u) /* all pools: header found by masking */
#define HD_SLAB_OBJ_MIN    16u
/* Empty chunks a pool keeps after a burst (more go back to the allocator): one, so a load that
 * hovers at a chunk boundary does not allocate and free 2 MiB per cycle. */
#define HD_SLAB_SPARE_CHUNKS 1u
/* How often a shard frees the empty chunks its pools did not need over that interval; an idle
 * shard with such chunks wakes for it (one tick), one without sleeps on. */
#define HD_SLAB_TRIM_MS 1000u
/* How long an idle shard trusts its last look at whether a pool has chunks to give back. */
#define HD_SLAB_TRIM_CHECK_MS 100u
_Static_assert(HD_SLAB_TRIM_CHECK_MS < HD_SLAB_TRIM_MS, "looked at between two trims");
_Static_assert(HD_IS_POW2(HD_SLAB_CHUNK_SIZE), "chunk alignment masks a pointer");

/* Frame pools: at most this many size classes of frame payload bytes per runtime (the default:
 * 2 KiB for an MTU packet with headers, 64 KiB for a large message; frame.c). */
#define HD_FRAME_CLASSES_MAX 4

/* Modules in one runtime once requirements are added: a few apps and their layers. */
#define HD_MODULES_MAX 16

/* Stopping: how long shards wait for apps to finish their ops after stop, then after cancel-all. */
#define HD_STOP_GRACE_MS_DEFAULT 1000
/* Stall watchdog: a tick stretch this long is a stall (a 50 ms stall at 20k packets/s holds up
 * 1,000 packets); sampled this many times per threshold (the error of the reported length). */
#define HD_STALL_MS_DEFAULT 50u
#define HD_STALL_OFF        UINT32_MAX
#define HD_STALL_SAMPLES    5u
#define HD_STOP_CANCEL_MS   2000

/* Logging: per call site and thread (shard), HD_LOG_RL_BURST lines per HD_LOG_RL_WINDOW_MS, then
 * lines are suppressed and counted; the first line of a later window carries the count. Lines
 * a peer can trigger go through it, so a flood (accept failing with EMFILE every 100 ms on each
 * shard, a stream of bad frames) costs a few lines per 10 s, not 20 a second (issue 16). */
#define HD_LOG_RL_BURST     5
#define HD_LOG_RL_WINDOW_MS 10000
#define HD_LOG_LINE_MAX     1024
/* A JSON log line: the message (at most HD_LOG_LINE_MAX) escaped (a control byte is 6 bytes,
 * \u00XX; most need none) plus the fixed fields; an escaped message that does not fit is cut at
 * an escape boundary. */
#define HD_LOG_JSON_LINE_MAX (4 * HD_LOG_LINE_MAX)

/* hd_rand_below: draws before it settles for a slightly biased answer. A draw is rejected with
 * probability (2^64 mod n) / 2^64 < 1/2, so all of them are with probability < 2^-64: the
 * bound is never reached in practice, it only keeps the loop bounded (CONVENTIONS.md). */
#define HD_RAND_DRAWS_MAX 64

/* Histograms: log-linear, 2^HD_HIST_SUB_BITS linear sub-buckets per power of two (~6% error). */
#define HD_HIST_SUB_BITS 4
#define HD_HIST_BUCKETS  ((64 - HD_HIST_SUB_BITS + 1) << HD_HIST_SUB_BITS)

#endif /* HD_LIMITS_H */
