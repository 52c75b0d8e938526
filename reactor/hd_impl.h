/* hd_impl.h - the reactor's private structures (reactor/ only). Each shard's struct is written by
 * its own thread only; the fields other threads touch are the atomics named below. */
#ifndef HD_IMPL_H
#define HD_IMPL_H

#include <pthread.h>

#include <hd/hd_uring.h>

/* Reserved CQE tags: never valid op pointers. */
#define HD_TAG_IGNORE 0u /* our own cancel requests and MSG_RING source completions */
#define HD_TAG_WAKE   1u /* a wake-up MSG_RING arriving from another shard */
#define HD_TAG_FAULT  2u /* fault.c's NOP standing in for a submission made to fail */

/* ---- fault injection (fault.c; the switch itself is in hd/hd_fault.h) */
int hd_faults_from_env(void); /* HD_FAULTS, parsed once per process: 0 or -EINVAL */
void hd_faults_report(void);  /* one log line of what was injected, when any rate is set */
/* A scratch SQE for a submission made to fail (a NOP tagged HD_TAG_FAULT is queued in its place
 * and the op's CQE will carry the error); NULL: no room, submit this one normally. */
struct io_uring_sqe *hd_fault_sqe(struct hd_shard *s, uint64_t tag);
/* The oldest refused submission's tag and error, when its NOP completes (false: none). */
bool hd_fault_cqe(uint64_t *tag, int32_t *res);

/* ---- bus: one SPSC ring per (producer, consumer) pair */
struct hd_bus_ring {
    /* Producer's line: tail is published with release, read by the consumer with acquire. */
    _Alignas(HD_CACHELINE) _Atomic uint32_t tail;
    uint32_t tail_local;  /* producer: written but not yet published */
    uint32_t head_cached; /* producer: last head it read */
    /* Consumer's line: head is released after the messages are consumed. */
    _Alignas(HD_CACHELINE) _Atomic uint32_t head;
    _Alignas(HD_CACHELINE) struct hd_msg slots[HD_BUS_RING_SIZE];
};

/* Producer-side overflow for one destination: a plain ring owned by the producer. */
struct hd_bus_overflow {
    uint32_t head, tail;
    struct hd_msg slots[HD_BUS_OVERFLOW_SIZE];
};

/* ---- posts: one bounded inbox per shard for threads that are not shards. Producers are
 * serialised by the lock (posts are rare: reloads), the shard consumes without it. tail is
 * released by a producer after writing its slot and acquired by the shard; head is released by
 * the shard after running a slot and acquired by producers checking for room. */
struct hd_post {
    hd_post_fn *fn;
    void *arg;
};
struct hd_post_inbox {
    pthread_mutex_t lock; /* producers; the shard only to close the inbox at exit */
    bool closed;          /* under lock: the shard has exited, posts fail with -ESHUTDOWN */
    _Alignas(HD_CACHELINE) _Atomic uint32_t tail;
    _Alignas(HD_CACHELINE) _Atomic uint32_t head;
    struct hd_post slots[HD_POST_INBOX_SIZE];
};

/* ---- timer wheel */
struct hd_wheel {
    uint64_t current_ms; /* last millisecond processed */
    uint64_t armed;
    struct hd_timer *due;    /* armed for a millisecond already processed */
    struct hd_timer *firing; /* collected by the running pass, in expiry order */
    struct hd_timer **firing_tail;
    uint64_t occupied[HD_WHEEL_LEVELS];
    struct hd_timer *slots[HD_WHEEL_LEVELS][HD_WHEEL_SLOTS];
};

struct hd_task {
    union {
        hd_task_fn *fn;         /* hd_defer */
        hd_handle_task_fn *hfn; /* hd_defer_handle */
    };
    void *arg;
    uint64_t handle; /* by_handle: the struct hd_handle's value */
    bool by_handle;
};
int hd_defer_task(struct hd_shard *s, struct hd_task t); /* 0 or -EAGAIN */
struct hd_handle_slot;
void hd_handles_fini(struct hd_shard *s);

struct hd_frame_pool {
    struct hd_slab *slab;
    uint32_t size;
};

enum hd_shard_phase { HD_PHASE_RUNNING, HD_PHASE_STOPPING, HD_PHASE_CANCELLING, HD_PHASE_DONE };

struct hd_shard {
    struct io_uring ring;
    struct hd_runtime *rt;
    unsigned id, count;
    uint32_t features;
    int ring_fd;
    int wake_fd; /* eventfd: wake-ups from foreign threads and the no-MSG_RING fallback */
    uint64_t wake_buf;
    struct hd_op wake_op;
    enum hd_shard_phase phase;
    uint64_t phase_deadline_ms;
    uint64_t now_ms;
    uint32_t ops_inflight;
    uint16_t op_gen;
    int error;
    /* The wait policy's load estimate: CQEs dispatched in millisecond rate_ms and the one before.
     */
    uint64_t rate_ms;
    uint32_t rate_cur, rate_prev;
    /* The last min-wait gathered input within its window (shard.c, min_wait_enter): the next
     * one may carry the tick's submissions. ended_empty: the last one, with submissions, ended
     * at its window with only their completions: the next sleep waits for the first one. */
    bool min_wait_gathers, min_wait_ended_empty;
    /* The recent gap: how long the tick's waits (spin or sleep) lasted until work came, a
     * moving average (1/HD_SPIN_GAP_WEIGHT), each wait counted up to HD_SPIN_GAP_CAP_NS. */
    uint64_t gap_ns;
    /* SQEs in the SQ whose completions their submit posts (hd_op_expect_inline): under load the
     * sleep that submits them waits for one completion beyond them (shard.c, enter). */
    unsigned sq_inline;
    uint64_t rand_state[4]; /* rand.c: xoshiro256**, never all zero */

    /* Set (seq_cst) by this shard right before it sleeps; cleared by the one producer that wins
     * the exchange and wakes it. Pairs with the producer's fence after publishing a tail. */
    _Alignas(HD_CACHELINE) _Atomic uint32_t sleeping;
    /* Read by the stall watchdog (watchdog.c), written here only, relaxed: the tick count at
     * the start of each tick's work, and the callback running now (hd_running). */
    _Alignas(HD_CACHELINE) _Atomic uint64_t beat;
    _Atomic(const void *) running_fn;
    _Atomic uint32_t running_kind;
    /* busy.c: the busy fraction of the last interval and when it was published (relaxed, any
     * thread reads them: hd_shard_busy_ppm); busy_ms, busy_cpu_ns: this thread's, at that time. */
    _Atomic uint32_t busy_ppm;
    _Atomic uint64_t busy_stamp_ms;
    uint64_t busy_ms, busy_cpu_ns;
    _Alignas(HD_CACHELINE) uint32_t tasks_head, tasks_tail;
    struct hd_task tasks[HD_DEFER_RING_SIZE];
    struct hd_flush *flush_head, *flush_running;
    /* handle.c: chunks of slots, never moved while the shard lives; free list of slot + 1 */
    struct hd_handle_slot **handle_chunks;
    uint32_t handle_chunks_count, handle_free, handles_open;
    struct hd_wheel wheel;

    /* bus, producer side: rings[dst] is rt->rings[id][dst]; dirty = unpublished writes */
    uint64_t bus_dirty;               /* bitmap of destinations (shards < 64) */
    uint64_t bus_urgent;              /* of those, destinations owed a wake-up */
    struct hd_bus_overflow *overflow; /* [count] */
    /* Messages to this shard itself: run at the next drain, never inside hd_bus_send. */
    struct hd_msg *self_q; /* [HD_BUS_SELF_SIZE] */
    uint32_t self_head, self_tail;
    struct hd_frame **frames_back; /* [count]: frames to return to their owner shard */
    uint64_t frames_back_dirty;    /* bitmap: owners with frames in frames_back */

    struct hd_frame_pool frame_pools[HD_FRAME_CLASSES_MAX];
    unsigned frame_classes_count;
    struct hd_slab *slabs; /* every pool this shard created */
    uint64_t trim_ms;      /* the last hd_slabs_trim */
    /* hd_slabs_trim_wanted walks every pool: its answer is kept HD_SLAB_TRIM_CHECK_MS (a
     * sleeping relay asked it before every sleep: ~100 instructions a packet). */
    uint64_t trim_checked_ms;
    bool trim_wanted;

    struct hd_post_inbox posts;      /* from threads that are not shards (post.c) */
    struct hd_collect_req *collects; /* requests this shard is waiting on */
    void **module_states;
    struct hd_shard_stats stats;
    pthread_t thread;
};

struct hd_runtime {
    struct hd_runtime_config cfg; /* modules, modules_args: the resolved list below */
    const struct hd_module *mods[HD_MODULES_MAX];
    void *mods_args[HD_MODULES_MAX];
    bool mods_listed[HD_MODULES_MAX]; /* listed in the config (not only required) */
    struct hd_frame_class frame_classes[HD_FRAME_CLASSES_MAX];
    unsigned count;
    struct hd_shard **shards;
    struct hd_bus_ring **rings; /* [producer * count + consumer], NULL on the diagonal */
    _Atomic uint32_t stopping;
    int done_fd; /* eventfd: each exiting shard adds 1 */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    unsigned ready, exited;
    bool go, started, waited;
    int error;
    struct hd_watchdog *watchdog; /* NULL: stall detection off */
};

/* What a shard is running, for the stall watchdog: one relaxed store per callback. */
enum hd_running_kind {
    HD_RUN_NONE = 0,
    HD_RUN_OP,
    HD_RUN_TASK,
    HD_RUN_TIMER,
    HD_RUN_FLUSH,
    HD_RUN_BUS,
    HD_RUN_KINDS
};
static inline void hd_running(struct hd_shard *s, enum hd_running_kind kind, const void *fn)
{
    atomic_store_explicit(&s->running_fn, fn, memory_order_relaxed);
    atomic_store_explicit(&s->running_kind, (uint32_t)kind, memory_order_relaxed);
}
/* watchdog.c: started by hd_runtime_start (after the shards), stopped by hd_runtime_wait. */
int hd_watchdog_start(struct hd_runtime *rt);
void hd_watchdog_stop(struct hd_runtime *rt);
void hd_watchdog_free(struct hd_runtime *rt); /* stops it first if needed */
/* symbol.c: the name of the function at addr (from the ELF symbol tables of the file that holds
 * it), or "file+0xoffset" when there is none. Watchdog thread only. */
void hd_symbolize(const void *addr, char *out, size_t size);

/* Internal steps of the tick, one file each. */
unsigned hd_ops_dispatch(struct hd_shard *s, unsigned budget);
int hd_ring_setup(struct hd_shard *s, uint32_t entries, uint32_t disable);
/* Publish the prepared SQEs (the SQ tail) without entering; returns how many await submission,
 * the to_submit of a hand-made io_uring_enter. */
unsigned hd_ring_sq_publish(struct io_uring *ring);
/* Submit what the SQ holds without waiting, counted once: one enter, and the SQEs the kernel
 * took. Returns io_uring_submit's result. */
int hd_ring_submit(struct hd_shard *s);
/* The one way to a free SQE (ops, cancels, wake-ups): take one; when the SQ is full, submit it
 * (hd_ring_submit) and take one again. NULL, counted in sqe_full, when it is still full. The
 * caller writes user_data. */
struct io_uring_sqe *hd_sqe_get(struct hd_shard *s);
void hd_wheel_init(struct hd_wheel *w, uint64_t now_ms);
void hd_wheel_expire(struct hd_shard *s, uint64_t now_ms);
/* ms until the next timer is due (0 = now), or UINT64_MAX when none is armed. */
uint64_t hd_wheel_next_ms(const struct hd_wheel *w, uint64_t now_ms);
void hd_tasks_run(struct hd_shard *s);
bool hd_bus_self_pending(const struct hd_shard *s); /* messages this shard sent itself wait */
void hd_bus_drain_self(struct hd_shard *s, unsigned budget); /* those queued before the call */
void hd_flushes_run(struct hd_shard *s);
int hd_bus_init(struct hd_shard *s);
void hd_bus_fini(struct hd_shard *s);
void hd_bus_drain(struct hd_shard *s, unsigned budget);
int hd_bus_send_internal(struct hd_shard *s, unsigned dst, const struct hd_msg *m);
/* A reactor message that need not wake a sleeping consumer (frames going home). */
int hd_bus_send_lazy(struct hd_shard *s, unsigned dst, const struct hd_msg *m);
void hd_bus_publish(struct hd_shard *s);
bool hd_bus_pending(struct hd_shard *s);
void hd_bus_wake_received(struct hd_shard *s);
int hd_frames_init(struct hd_shard *s);
void hd_frames_fini(struct hd_shard *s);
void hd_frames_flush_back(struct hd_shard *s);
void hd_slabs_destroy_all(struct hd_shard *s);
/* busy.c: publish the busy fraction of the interval that ended (the tick, once an interval). */
void hd_busy_roll(struct hd_shard *s);
static inline void hd_busy_tick(struct hd_shard *s)
{
    if (hd_unlikely(s->now_ms - s->busy_ms >= HD_BUSY_INTERVAL_MS))
        hd_busy_roll(s);
}
/* Every HD_SLAB_TRIM_MS (the tick): free the empty chunks pools did not need (slab.c). */
void hd_slabs_trim(struct hd_shard *s);
bool hd_slabs_trim_wanted(const struct hd_shard *s);
const struct hd_slab *hd_slab_next_in_shard(const struct hd_slab *p);
void hd_collects_poll(struct hd_shard *s);
void hd_posts_init(struct hd_shard *s);
void hd_posts_deinit(struct hd_shard *s);
void hd_posts_drain(struct hd_shard *s);
bool hd_posts_pending(struct hd_shard *s);
void hd_posts_close(struct hd_shard *s);
void hd_collects_free(struct hd_shard *s);
/* rand.c: seed s's generator from getrandom() (the clock, the PID and the shard id if that
 * fails); main thread, when the runtime allocates the shard. seed_from: from one 64-bit seed,
 * expanded by splitmix64 (tests, for a known sequence); distinct seeds give distinct states. */
void hd_rand_seed(struct hd_shard *s);
/* splitmix64 (Vigna) of x + the golden gamma: a bijection, to expand or mix seeds (rand.c,
 * fault.c). A sequence is hd_splitmix64(x), hd_splitmix64(x + gamma), ... */
#define HD_SPLITMIX64_GAMMA UINT64_C(0x9e3779b97f4a7c15)
static inline uint64_t hd_splitmix64(uint64_t x)
{
    x += HD_SPLITMIX64_GAMMA;
    x = (x ^ (x >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    x = (x ^ (x >> 27)) * UINT64_C(0x94d049bb133111eb);
    return x ^ (x >> 31);
}
void hd_rand_seed_from(struct hd_shard *s, uint64_t seed);
void hd_shard_wake(struct hd_shard *s); /* any thread: eventfd write */
uint64_t hd_clock_ms(void);
/* The wait policy (shard.c): the min-wait of a sleep after cqes_2ms completions in this and the
 * previous millisecond, with the configured cap and gather (hd_runtime_config); 0: none. */
uint32_t hd_min_wait_us(uint32_t cqes_2ms, uint32_t cap_us, uint32_t gather);
/* Whether a min-wait of us that submitted `submitted` SQEs and came back after waited_ns with
 * `ready` completions gathered input within its window (shard.c, min_wait_enter). */
bool hd_min_wait_gathered(unsigned submitted, unsigned ready, uint64_t waited_ns, uint32_t us);
/* The wait policy's spin before a sleep (shard.c): how long to spin, given the recent gap
 * (shard->gap_ns) and what a sleep costs (us); 0: sleep at once. */
uint32_t hd_spin_us(uint64_t gap_ns, uint32_t sleep_cost_us);
/* The recent gap after one more wait of waited_ns. */
uint64_t hd_spin_gap(uint64_t gap_ns, uint64_t waited_ns);
/* How long a sleep that submits completions-at-once (hd_op_expect_inline) waits for one beyond
 * them, given the recent gap (shard->gap_ns); 0: input is too sparse for it, the submit goes
 * first (shard.c, enter). */
uint32_t hd_inline_wait_us(uint64_t gap_ns);

/* log_json.c: one JSON log line into out (always '}' and '\n' terminated, truncating the
 * message if it must); returns its length. level is padded text ("INFO "), trimmed here. */
size_t hd_log_json_line(char *out, size_t size, const char *time, const char *level,
                        const char *shard, const char *msg);

#endif /* HD_IMPL_H */
