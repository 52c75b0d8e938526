/* hd.h - the reactor's public API: shards and the runtime that starts them, ops and callbacks,
 * deferred tasks, end-of-tick flushes, timers, slab and frame pools, the cross-shard bus,
 * statistics, histograms and logging.
 *
 * Threading: unless a function says otherwise it must be called on the shard that owns the
 * object (the shard's own thread). Functions marked "any thread" are safe anywhere.
 * Errors: 0 or -errno; each prototype lists the errnos it returns. No io_uring type appears here:
 * net/ reaches the ring through hd_uring.h. */
#ifndef HD_H
#define HD_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hd/hd_base.h>
#include <hd/hd_bus.h>
#include <hd/hd_handle.h>
#include <hd/hd_limits.h>

struct hd_runtime;
struct hd_shard;

/* ---------------------------------------------------------------- ops */

struct hd_op;
/* Completion callback: res is the CQE's result (>= 0 or -errno, -ECANCELED after a cancel),
 * flags the CQE's flags (HD_OP_F_MORE: a multishot op stays armed). */
typedef void hd_op_fn(struct hd_op *op, int32_t res, uint32_t flags);

/* Embedded in its owner (container_of in the callback), so submitting allocates nothing.
 * The kernel gets a tag = pointer + generation; hd_op_init gives the op a new generation, so a
 * completion for an op's previous life is counted as stale and dropped, never delivered. */
struct hd_op {
    hd_op_fn *fn;
    uint16_t gen;
    uint16_t inflight; /* SQEs submitted whose final CQE has not arrived */
    uint32_t user;     /* free for the owner (e.g. which of its ops this is) */
};

#define HD_OP_F_MORE (1u << 1) /* = IORING_CQE_F_MORE; checked in op.c */

/* (Re)initialise an op for a new owner: new generation, nothing in flight. The op must be idle. */
void hd_op_init(struct hd_shard *s, struct hd_op *op, hd_op_fn *fn);
static inline bool hd_op_busy(const struct hd_op *op)
{
    return op->inflight != 0;
}
/* Ask the kernel to cancel every SQE of this op; its callback then sees -ECANCELED (or the
 * result, if it completed first). Returns 0, -ENOENT (nothing in flight), -EBUSY (SQ full). */
int hd_op_cancel(struct hd_shard *s, struct hd_op *op);
/* A NOP through the ring: the callback runs with res 0. Returns 0 or -EBUSY. */
int hd_op_nop(struct hd_shard *s, struct hd_op *op);
/* A one-shot kernel timeout op (for tests and rare waits; app timeouts use hd_timer).
 * Returns 0 or -EBUSY. The callback sees -ETIME when it expires. */
int hd_op_timeout(struct hd_shard *s, struct hd_op *op, uint64_t timeout_ns);

/* ---------------------------------------------------------------- deferred tasks, flushes */

typedef void hd_task_fn(void *arg);
/* Run fn(arg) on this shard's next tick (continuations without recursion).
 * Returns 0 or -EAGAIN when the shard's task ring (HD_DEFER_RING_SIZE) is full. */
int hd_defer(struct hd_shard *s, hd_task_fn *fn, void *arg);

/* An end-of-tick flush: queued once per tick however often it is requested, run just before the
 * shard submits (net/ uses it to send one sendmsg per connection per tick). Embedded in owner. */
struct hd_flush;
typedef void hd_flush_fn(struct hd_flush *f);
struct hd_flush {
    struct hd_flush *next;
    hd_flush_fn *fn;
    bool queued;
};
void hd_flush_init(struct hd_flush *f, hd_flush_fn *fn);
void hd_flush_request(struct hd_shard *s, struct hd_flush *f);
/* Remove a queued flush (before its owner is freed). */
void hd_flush_cancel(struct hd_shard *s, struct hd_flush *f);

/* ---------------------------------------------------------------- timers */

struct hd_timer;
typedef void hd_timer_fn(struct hd_timer *t);
/* Millisecond timer on the shard's wheel; embedded in its owner. Fires once per start. */
struct hd_timer {
    struct hd_timer *next;
    struct hd_timer **pprev; /* NULL when not armed */
    uint64_t expiry_ms;
    hd_timer_fn *fn;
};
void hd_timer_init(struct hd_timer *t, hd_timer_fn *fn);
/* Arm (or re-arm) to fire delay_ms from the shard's current tick time. */
void hd_timer_start(struct hd_shard *s, struct hd_timer *t, uint64_t delay_ms);
void hd_timer_stop(struct hd_shard *s, struct hd_timer *t);
static inline bool hd_timer_armed(const struct hd_timer *t)
{
    return t->pprev != NULL;
}
/* The shard's clock (CLOCK_MONOTONIC), read once per tick. */
uint64_t hd_now_ms(const struct hd_shard *s);
/* CLOCK_MONOTONIC in nanoseconds, read now. Any thread. */
uint64_t hd_clock_ns(void);

/* ---------------------------------------------------------------- token buckets */

/* A token bucket's state; the rate and the burst are the caller's, so one rule (a config field,
 * a protocol constant) serves many buckets at 16 bytes each. Plain data on one shard. */
struct hd_tbucket {
    double tokens;
    uint64_t last_ms;
};
static inline void hd_tbucket_fill(struct hd_tbucket *b, double burst, uint64_t now_ms)
{
    b->tokens = burst;
    b->last_ms = now_ms;
}
/* Refill at per_ms tokens a millisecond since the last call (capped at burst), then take n
 * tokens if there are that many. Returns whether it took them. */
static inline bool hd_tbucket_take(struct hd_tbucket *b, double per_ms, double burst,
                                   uint64_t now_ms, double n)
{
    if (now_ms > b->last_ms) {
        b->tokens += (double)(now_ms - b->last_ms) * per_ms;
        b->last_ms = now_ms;
    }
    if (b->tokens > burst)
        b->tokens = burst;
    if (b->tokens < n)
        return false;
    b->tokens -= n;
    return true;
}

/* ---------------------------------------------------------------- slab pools */

struct hd_slab;
struct hd_pool_stats {
    uint64_t capacity;   /* objects carved so far (grows in chunks up to the cap) */
    uint64_t cap;        /* most objects this pool may ever hold */
    uint64_t in_use;     /* objects handed out now */
    uint64_t high_water; /* most objects in use at once */
    uint64_t exhausted;  /* gets that returned NULL */
    uint64_t gets, puts;
    uint64_t chunks;
    uint64_t chunks_freed; /* empty chunks given back after a burst (HD_SLAB_SPARE_CHUNKS) */
};
/* A pool of fixed-size objects owned by shard s, grown in HD_SLAB_CHUNK_SIZE-aligned chunks up to
 * cap_objects. Start-up only (allocates). Returns 0, -EINVAL, -ENOMEM. */
int hd_slab_create(struct hd_shard *s, const char *name, size_t obj_size, uint64_t cap_objects,
                   struct hd_slab **out);
/* Frees every chunk (objects still in use are gone too): owner shard, or a stopped runtime. */
void hd_slab_destroy(struct hd_slab *p);
/* An object, or NULL when the cap is reached (counted). Contents are undefined. */
void *hd_slab_get(struct hd_slab *p);
/* Return an object to its pool (asserts the pool owns it). In debug builds it is poisoned. */
void hd_slab_put(struct hd_slab *p, void *obj);
/* Frees the empty chunks beyond what the pool's peak since the last trim needed (plus
 * HD_SLAB_SPARE_CHUNKS); a shard's pools are trimmed every HD_SLAB_TRIM_MS by its loop. Owner
 * thread. Frees memory: never from the data path. */
void hd_slab_trim(struct hd_slab *p);
bool hd_slab_trim_wanted(const struct hd_slab *p);
/* O(1): does obj lie in one of this pool's chunks? obj must come from some hd_slab. */
bool hd_slab_owns(const struct hd_slab *p, const void *obj);
void hd_slab_stats(const struct hd_slab *p, struct hd_pool_stats *out);
const struct hd_pool_stats *hd_slab_counters(const struct hd_slab *p); /* live: owner thread */
struct hd_slab *hd_slab_of(const void *obj); /* the pool obj came from: O(1), its chunk header */

/* ---------------------------------------------------------------- frames */

/* A refcounted buffer from the shard's frame pool. Born with one reference; any shard may hold
 * references; the last unref returns it to the owner shard's pool (over the bus, batched, when
 * the last reference dies elsewhere). `next` belongs to whoever holds the only reference. */
struct hd_frame {
    struct hd_frame *next;
    uint32_t len;  /* bytes of data in use, set by the app */
    uint32_t size; /* bytes of data available */
    _Atomic uint32_t refs;
    uint16_t owner; /* shard id of the pool */
    uint8_t cls;    /* size class index */
    uint8_t app_flags;
    uint64_t app_u64; /* free for the app */
    uint8_t data[];
};
_Static_assert(sizeof(struct hd_frame) == 32, "frame header is half a cache line");

struct hd_frame_class {
    uint32_t size;      /* data bytes */
    uint64_t cap_count; /* frames of this class per shard */
};
/* A frame with at least size bytes of data, len 0, refs 1; NULL if no class fits or the class is
 * exhausted (counted). */
struct hd_frame *hd_frame_get(struct hd_shard *s, size_t size);
static inline void hd_frame_ref(struct hd_frame *f)
{
    /* Relaxed: taking a reference needs one already held; ordering comes with the handoff. */
    atomic_fetch_add_explicit(&f->refs, 1, memory_order_relaxed);
}
/* Drop a reference on shard s (any shard). Pairs: acq_rel on the count so the last holder sees
 * every write before it frees. */
void hd_frame_unref(struct hd_shard *s, struct hd_frame *f);
void hd_frame_stats(struct hd_shard *s, unsigned cls, struct hd_pool_stats *out);
unsigned hd_frame_classes_count(const struct hd_shard *s);
/* Data bytes of class cls (< hd_frame_classes_count; they ascend): the last is the largest
 * frame hd_frame_get can give. */
uint32_t hd_frame_class_size(const struct hd_shard *s, unsigned cls);
/* The class a frame of size bytes comes from (the first that fits), or -ENOBUFS; class cls's
 * live counters (cap - in_use: frames it can hand out now) for a policy (a reserve, fair
 * shares) deciding before the get: found once, read per packet (owner shard, shard's life). */
int hd_frame_class_of(const struct hd_shard *s, size_t size);
const struct hd_pool_stats *hd_frame_class_counters(const struct hd_shard *s, unsigned cls);
/* Called on the owner shard for each frame whose app_u64 is non-zero just before it goes back
 * to its pool (the app's accounting of who holds frames: hd_runtime_config.frame_release). */
typedef void hd_frame_release_fn(struct hd_shard *s, struct hd_frame *f);

/* ---------------------------------------------------------------- posts from other threads */

/* The bus links shards to shards; a post is how a thread that is not a shard (the main thread
 * in on_signal, a test) hands work to a shard. Each shard has one bounded inbox
 * (HD_POST_INBOX_SIZE) that it drains every tick, right after its bus inboxes; a post wakes a
 * sleeping shard the way the bus does (its sleeping flag, then an eventfd write). Posts to one
 * shard run in the order they were accepted. When a shard exits it closes its inbox and runs
 * what is left in it on its thread, before the modules' shard_fini, so an accepted post always
 * runs exactly once (even if the shard is stopping: fn must not assume the shard still runs).
 * fn runs on shard s; arg is fn's (ownership moves to fn on success only). */
typedef void hd_post_fn(struct hd_shard *s, void *arg);
/* Any thread (meant for threads that are not shards: shards use hd_bus_send). Never blocks
 * beyond a short producer lock. Returns 0, -EINVAL (shard out of range), -EAGAIN (that shard's
 * inbox is full: nothing queued, try again later), -ESHUTDOWN (that shard has exited). */
int hd_runtime_post(struct hd_runtime *rt, unsigned shard, hd_post_fn *fn, void *arg);

/* ---------------------------------------------------------------- shared snapshots */

/* An immutable object (a reloaded config) shared by every shard without locks: the main thread
 * builds it, publishes it to a hd_snap_var, and each shard swaps it in on its own thread (a
 * post) and drops its reference to the one it replaces; the last reference frees it, on
 * whichever thread drops it. Readers on a shard call hd_snap_var_get and use the snapshot
 * until they return to the loop (it cannot change under them: swaps run between callbacks);
 * to keep it longer (across an async wait) take a reference. Embed struct hd_snap in the
 * object; never write the object after publishing it.
 *
 *   struct cfg { struct hd_snap snap; ... };               // main thread, e.g. in on_signal:
 *   struct cfg *c = build();  hd_snap_init(&c->snap, cfg_free);
 *   hd_snap_var_publish(var, &c->snap);                    // takes our reference
 *   // on a shard:
 *   const struct cfg *c = (const void *)hd_snap_var_get(var, s);  // borrowed for this call */
struct hd_snap;
typedef void hd_snap_free_fn(struct hd_snap *sn);
struct hd_snap {
    _Atomic uint32_t refs;
    hd_snap_free_fn *free_fn;
    struct hd_snap_var *var; /* set by hd_snap_var_publish: the swap finds its slot */
};
/* One reference held by the caller. */
void hd_snap_init(struct hd_snap *sn, hd_snap_free_fn *free_fn);
static inline void hd_snap_ref(struct hd_snap *sn)
{
    /* Relaxed: taking a reference needs one already held; ordering comes with the handoff. */
    atomic_fetch_add_explicit(&sn->refs, 1, memory_order_relaxed);
}
/* Any thread. acq_rel on the count pairs between holders: the one that frees sees every write
 * made before the others let go. The last reference calls free_fn(sn). NULL is ignored. */
void hd_snap_unref(struct hd_snap *sn);

/* A per-shard "current snapshot" slot for every shard of a runtime (a cache line each). */
struct hd_snap_var;
/* Start-up, before the shards can see v (e.g. in global_init, or before hd_runtime_start).
 * Every shard starts with initial (may be NULL); takes the caller's reference to initial
 * always. Returns 0 or -ENOMEM. */
int hd_snap_var_create(struct hd_runtime *rt, struct hd_snap *initial, struct hd_snap_var **out);
/* After hd_runtime_wait (e.g. in global_fini): drops every shard's snapshot. NULL is ignored. */
void hd_snap_var_destroy(struct hd_snap_var *v);
/* Shard s's current snapshot (or NULL), borrowed until s returns to its loop. On s only. */
struct hd_snap *hd_snap_var_get(const struct hd_snap_var *v, const struct hd_shard *s);
/* Post sn to every shard, each swapping it in and dropping the one it replaces. A thread that is
 * not a shard (it may sleep: a full inbox is retried every millisecond for up to
 * HD_POST_RETRY_MS). Takes the caller's reference always. Returns once every post is queued, not
 * run. 0, -EAGAIN (some shard's inbox stayed full; that shard keeps its previous snapshot until
 * the next publish), -ESHUTDOWN (some shard has exited). A snapshot is published to one var. */
int hd_snap_var_publish(struct hd_snap_var *v, struct hd_snap *sn);

/* ---------------------------------------------------------------- histograms */

/* Log-linear histogram of uint64 values: 16 linear sub-buckets per power of two, so a bucket is
 * within ~6% of the values in it. 7.8 KiB; record is O(1) with no branches on the value range. */
struct hd_hist {
    uint64_t count, sum, min, max;
    uint64_t buckets[HD_HIST_BUCKETS];
};
void hd_hist_init(struct hd_hist *h);
void hd_hist_record(struct hd_hist *h, uint64_t v);
void hd_hist_merge(struct hd_hist *into, const struct hd_hist *from);
/* Value at quantile q in [0,1] (upper bound of its bucket, clamped to max); 0 when empty. */
uint64_t hd_hist_quantile(const struct hd_hist *h, double q);
unsigned hd_hist_bucket_of(uint64_t v);
uint64_t hd_hist_bucket_upper(unsigned bucket);

/* ---------------------------------------------------------------- shard statistics */

struct hd_shard_stats {
    uint64_t ticks;
    uint64_t enters;       /* io_uring_enter calls that waited or submitted */
    uint64_t sleeps;       /* of those, waits that could block (the shard had nothing to do) */
    uint64_t min_waits;    /* of those, waits with the kernel's min-wait (completions batched) */
    uint64_t inline_waits; /* of those, submits that slept for a completion beyond their own */
    uint64_t spins, spins_won; /* spins before a sleep (short recent gaps); won: found work */
    uint64_t sqes;             /* SQEs submitted */
    uint64_t cqes;             /* CQEs dispatched */
    uint64_t cqes_stale;       /* completions of an op's previous life: dropped */
    uint64_t sqe_full;         /* no SQE even after submitting (an op, a cancel, a wake-up) */
    uint64_t tasks_run, timers_fired; /* deferred tasks run; timers fired */
    uint64_t tasks_stale;    /* of those tasks, hd_defer_handle's dropped: their handle was stale */
    uint64_t bus_sent;       /* messages accepted by hd_bus_send */
    uint64_t bus_received;   /* messages run on this shard */
    uint64_t bus_overflowed; /* messages that went through the overflow */
    uint64_t bus_full;       /* hd_bus_send returned -EAGAIN */
    uint64_t wakes_sent;     /* wake-ups this shard sent to sleeping shards */
    uint64_t wakes_received;
    uint64_t wakes_skipped;   /* publishes of only lazy messages (frames going home) */
    uint64_t frames_returned; /* frames freed here that belonged to another shard */
    uint64_t posts_run;       /* hd_runtime_post messages run on this shard */
    /* Sampled one tick in HD_TICK_SAMPLE: */
    struct hd_hist tick_ns; /* time spent working in a tick (excludes sleeping) */
    struct hd_hist cqes_per_tick;
};
const struct hd_shard_stats *hd_shard_stats(const struct hd_shard *s);
/* Stalls the watchdog saw on this shard, and the longest that ended (ms). Any thread. */
uint64_t hd_shard_stalls(const struct hd_shard *s);
uint64_t hd_shard_stall_max_ms(const struct hd_shard *s);
uint32_t hd_shard_busy_ppm(struct hd_runtime *rt, unsigned shard); /* hd_limits.h, HD_BUSY_ */
/* Gather per-shard data from every shard: fill(shard, slot) runs on each shard (over the bus),
 * writing slot_size bytes; then done(s, slots, count, arg) runs on the requesting shard with the
 * slots in shard order. Returns 0, -ENOMEM, -EAGAIN (bus full: try again later). */
typedef void hd_collect_fill_fn(struct hd_shard *s, void *slot, void *arg);
typedef void hd_collect_done_fn(struct hd_shard *s, void *slots, unsigned count, void *arg);
int hd_collect(struct hd_shard *s, size_t slot_size, hd_collect_fill_fn *fill,
               hd_collect_done_fn *done, void *arg);

/* ---------------------------------------------------------------- runtime and shards */

/* An app: one const struct listed at build time (CONVENTIONS.md: no constructor registration). */
#define HD_MODULE_ABI 1
struct hd_module {
    uint32_t abi_version; /* HD_MODULE_ABI */
    const char *name;
    /* Main thread, before shards start / after they all stopped. */
    int (*global_init)(struct hd_runtime *rt, void *arg);
    void (*global_fini)(struct hd_runtime *rt, void *arg);
    /* On each shard's thread: before its loop (may create pools, listeners), when stop was
     * requested (close listeners and connections), after its last op completed. */
    int (*shard_init)(struct hd_shard *s, void *arg, void **state);
    void (*shard_stop)(struct hd_shard *s, void *state);
    void (*shard_fini)(struct hd_shard *s, void *state);
    /* Main thread, in hd_runtime_wait, when signals are handled: SIGHUP, SIGUSR2 (the app's). */
    void (*on_signal)(struct hd_runtime *rt, int signo, void *arg);
    /* The layers this module needs on every shard before it (e.g. net_module, tls_module),
     * NULL-terminated, or NULL. See hd_runtime_config.modules for how they are placed. */
    const struct hd_module *const *requires;
};

#define HD_FEAT_SINGLE_ISSUER (1u << 0)
#define HD_FEAT_DEFER_TASKRUN (1u << 1)
#define HD_FEAT_COOP_TASKRUN  (1u << 2)
#define HD_FEAT_MSG_RING      (1u << 3) /* wake-ups by IORING_OP_MSG_RING, else eventfd writes */
#define HD_FEAT_EXT_ARG       (1u << 4)
#define HD_FEAT_MIN_WAIT      (1u << 5) /* IORING_FEAT_MIN_TIMEOUT (6.12) on a DEFER_TASKRUN ring */

struct hd_runtime_config {
    unsigned shards_count;    /* 0: one per CPU this process may run on */
    bool pin;                 /* pin shard i to the i-th allowed CPU */
    bool handle_signals;      /* hd_runtime_wait: INT/TERM stop, HUP/USR2 -> on_signal */
    uint32_t sq_entries;      /* 0: HD_SQ_ENTRIES_DEFAULT */
    uint32_t busy_poll_us;    /* spin at least this long before a sleep; 0: the adaptive spin */
    uint32_t min_wait_us;     /* under load, let a sleep gather completions this long; 0 = off
                               * (also off on kernels without it: HD_FEAT_MIN_WAIT) */
    uint32_t min_wait_gather; /* > 0: adaptive min-wait (docs/ARCHITECTURE.md, wait policy) */
    uint32_t stop_grace_ms;   /* 0: HD_STOP_GRACE_MS_DEFAULT */
    /* Stall watchdog: a shard awake and inside one stretch of work (one tick's callbacks, or
     * one callback) for this long is logged with the callback it runs, and counted
     * (hd_shard_stalls). 0: HD_STALL_MS_DEFAULT; HD_STALL_OFF: no watchdog thread. */
    uint32_t stall_ms;
    uint32_t features_disable; /* HD_FEAT_* to leave unused (tests force the fallbacks) */
    const struct hd_frame_class *frame_classes; /* NULL: 2 KiB and 64 KiB classes */
    unsigned frame_classes_count;
    hd_frame_release_fn *frame_release; /* NULL: none */
    /* Apps and layers (<= HD_MODULES_MAX with requirements), one instance per entry with its
     * arg. A module's requires go before it, once, with arg NULL unless listed too (then the
     * listed arg). Init and stop in that order, fini in reverse; a failed shard_init gets the
     * modules before it their shard_fini, in reverse, and the start fails. */
    const struct hd_module *const *modules;
    void *const *modules_args; /* NULL: every arg NULL */
    unsigned modules_count;
};

/* Allocates the runtime and its bus. Main thread. Returns 0, -EINVAL, -ENOMEM. */
int hd_runtime_create(const struct hd_runtime_config *cfg, struct hd_runtime **out);
/* Runs global_init, starts the shard threads, returns once every shard ran shard_init.
 * On a failure everything started is stopped and joined. Returns 0 or the first -errno. */
int hd_runtime_start(struct hd_runtime *rt);
/* Ask every shard to stop. Any thread, async-signal-safe, idempotent. */
void hd_runtime_stop(struct hd_runtime *rt);
/* Wait until every shard has stopped (handling signals if configured), then global_fini.
 * Returns 0 or the first error a shard reported. */
int hd_runtime_wait(struct hd_runtime *rt);
int hd_runtime_run(struct hd_runtime *rt); /* start + wait */
/* After wait: frees shards, pools, bus. */
void hd_runtime_destroy(struct hd_runtime *rt);
unsigned hd_runtime_shards_count(const struct hd_runtime *rt);
/* Shard i; its contents are the shard's own (read stats only after wait). */
struct hd_shard *hd_runtime_shard(struct hd_runtime *rt, unsigned i);
/* Number of CPUs this process may run on (the default shard count). Any thread. */
unsigned hd_cpus_available(void);

/* The shard running on this thread, or NULL. Any thread. */
struct hd_shard *hd_shard_current(void);
unsigned hd_shard_id(const struct hd_shard *s);
unsigned hd_shard_count(const struct hd_shard *s);
struct hd_runtime *hd_shard_runtime(const struct hd_shard *s);
/* True once stop was requested (apps stop accepting new work). */
bool hd_shard_stopping(const struct hd_shard *s);
uint32_t hd_shard_features(const struct hd_shard *s);
/* The state m's shard_init returned on this shard (its first instance's), or NULL: m is not
 * in this runtime, its shard_init has not returned yet, or its shard_fini has run. This is how
 * a layer above the reactor finds its per-shard state (net_shard_of, tls_shard_of). */
void *hd_shard_module_state(const struct hd_shard *s, const struct hd_module *m);
/* A module instance's place in the runtime's resolved module list (the one whose module is m
 * and whose arg is arg), or -ENOENT. Any thread, after hd_runtime_create. With it a module
 * listed more than once tells its instances apart in its bus messages. */
int hd_runtime_module_index(const struct hd_runtime *rt, const struct hd_module *m,
                            const void *arg);
/* The state of the instance at index on shard s (as hd_shard_module_state), or NULL. */
void *hd_shard_instance_state(const struct hd_shard *s, unsigned index);
/* Slab pools this shard owns now (frame pools included): leak checks. */
unsigned hd_shard_slabs_count(const struct hd_shard *s);

/* ---------------------------------------------------------------- logging */

enum hd_log_level { HD_LOG_ERROR = 0, HD_LOG_WARN, HD_LOG_INFO, HD_LOG_DEBUG };
extern enum hd_log_level hd_log_level_max;
void hd_log_set_level(enum hd_log_level level);
/* One line to stderr, "2026-12-02T14:00:00.123Z INFO  s0 message", written with one write().
 * Any thread. */
void hd_log_write(enum hd_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Text (the default) or JSON lines: one object a line, {"time", "level", "shard", "event",
 * "msg"} plus "addr" (the first ip:port in the message) and "suppressed" (a rate-limited line's
 * count) when present; event is the message's "word:" prefix ("mesh", "tls", ...) or "log".
 * Set before the shards start. */
enum hd_log_format { HD_LOG_FORMAT_TEXT = 0, HD_LOG_FORMAT_JSON };
void hd_log_set_format(enum hd_log_format format);

/* Per call site and thread: at most HD_LOG_RL_BURST lines per HD_LOG_RL_WINDOW_MS; the first line
 * of a later window says how many were suppressed. */
struct hd_log_rl {
    uint64_t window_ms;
    uint32_t lines;
    uint32_t suppressed;
};
bool hd_log_rl_allow(struct hd_log_rl *rl, uint32_t *suppressed);
/* The same at a given time (tests). */
bool hd_log_rl_allow_at(struct hd_log_rl *rl, uint64_t now_ms, uint32_t *suppressed);

#define hd_log(level, ...)                                                                         \
    do {                                                                                           \
        if ((level) <= hd_log_level_max)                                                           \
            hd_log_write((level), __VA_ARGS__);                                                    \
    } while (0)

#define hd_log_rl(level, fmt, ...)                                                                 \
    do {                                                                                           \
        static __thread struct hd_log_rl hd_rl_;                                                   \
        uint32_t hd_sup_;                                                                          \
        if ((level) <= hd_log_level_max && hd_log_rl_allow(&hd_rl_, &hd_sup_)) {                   \
            if (hd_sup_)                                                                           \
                hd_log_write((level), fmt " (%u similar lines suppressed)", ##__VA_ARGS__,         \
                             hd_sup_);                                                             \
            else                                                                                   \
                hd_log_write((level), fmt, ##__VA_ARGS__);                                         \
        }                                                                                          \
    } while (0)

#endif /* HD_H */
