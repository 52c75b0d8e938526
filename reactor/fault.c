/* fault.c - fault injection for tests (hd_fault.h): the HD_FAULTS settings, one generator per
 * shard thread, and failed submissions. A failed submission never reaches the kernel: the caller
 * preps a scratch SQE, a NOP tagged HD_TAG_FAULT goes in its place, and when the NOP completes
 * op.c's dispatch hands the op a CQE with the error, as the kernel does for an SQE it refuses
 * (so no fd or ring buffer a real op would have produced is lost). The settings are written
 * once before any shard runs; the rest is per thread.
 *
 * The first hd_runtime_create reads HD_FAULTS (a bad spec fails it with -EINVAL);
 * hd_runtime_start arms it once every shard ran its init; it is disarmed after the shards are
 * joined, when one line reports the counts ("faults injected: sqe=N short_send=N reset=N
 * alloc=N"). The hooks: sqe in hd_op_sqe (op.c: -EAGAIN, -ENOMEM or -EBUSY), short_send in
 * net_conn_flush_now (net/conn_send.c: a sendmsg of n bytes sends 1..n-1), reset in recv_done
 * (net/conn.c: part of the bytes, then ECONNRESET), alloc in hd_slab_get (slab.c: NULL as at the
 * cap, counted in exhausted; every frame get goes through it). Bugs it found: a close SQE the
 * ring refused left the socket open (close_done now closes the fd itself on -EAGAIN/-ENOMEM/
 * -EBUSY); a connection closed while waiting to move kept its migrating flag and hit an
 * assertion (net_conn_close drops the move); under ASan, a TLS connection whose destination
 * shard could not take it leaked its exported record state (the codec's move_drop frees it). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hd/hd_fault.h>

#include "hd_impl.h"

/* Failed submissions waiting for their NOP: a few per tick at any sane rate; when full, no
 * more are injected until some are delivered. */
#define HD_FAULT_PENDING_MAX 256u
#define HD_FAULT_SPEC_MAX    256u /* longest HD_FAULTS accepted: a handful of key=value pairs */

atomic_bool hd_faults_armed;

static const char *const kind_names[HD_FAULT_KINDS_COUNT] = {"sqe", "short_send", "reset", "alloc"};
static uint64_t seed;
static uint64_t thresholds[HD_FAULT_KINDS_COUNT]; /* rate * 2^32: a draw below it injects */
static bool any_rate;
static _Atomic uint64_t counts[HD_FAULT_KINDS_COUNT];

struct fault_cqe {
    uint64_t tag;
    int32_t res;
};

static _Thread_local struct {
    bool seeded;
    uint64_t rng;
    uint32_t head, tail; /* FIFO of failed submissions, in NOP order */
    struct fault_cqe pending[HD_FAULT_PENDING_MAX];
    struct io_uring_sqe scratch; /* what a failed submission's caller preps; never submitted */
} tls;

static uint32_t next32(void)
{
    if (!tls.seeded) {
        struct hd_shard *s = hd_shard_current();
        tls.rng = hd_splitmix64(seed ^ hd_splitmix64(s ? s->id + 1u : 0u)) | 1u;
        tls.seeded = true;
    }
    /* xorshift64*: plenty for picking faults */
    tls.rng ^= tls.rng >> 12;
    tls.rng ^= tls.rng << 25;
    tls.rng ^= tls.rng >> 27;
    return (uint32_t)((tls.rng * UINT64_C(0x2545f4914f6cdd1d)) >> 32);
}

bool hd_fault_roll(enum hd_fault_kind kind)
{
    HD_ASSERT((unsigned)kind < HD_FAULT_KINDS_COUNT);
    if (thresholds[kind] == 0 || hd_shard_current() == NULL)
        return false; /* only shard threads: tools and the main thread's set-up run clean */
    if (next32() >= thresholds[kind])
        return false;
    atomic_fetch_add_explicit(&counts[kind], 1, memory_order_relaxed);
    return true;
}

uint32_t hd_fault_below(uint32_t bound)
{
    HD_ASSERT(bound > 0);
    return (uint32_t)(((uint64_t)next32() * bound) >> 32);
}

static int parse_pair(const char *key, const char *val)
{
    char *end;
    errno = 0;
    if (strcmp(key, "seed") == 0) {
        unsigned long long v = strtoull(val, &end, 0);
        if (errno || end == val || *end)
            return -EINVAL;
        seed = v;
        return 0;
    }
    for (unsigned k = 0; k < HD_FAULT_KINDS_COUNT; k++) {
        if (strcmp(key, kind_names[k]) != 0)
            continue;
        double r = strtod(val, &end);
        if (errno || end == val || *end || !(r >= 0.0 && r <= 1.0))
            return -EINVAL;
        thresholds[k] = (uint64_t)(r * 4294967296.0);
        any_rate |= thresholds[k] != 0;
        return 0;
    }
    return -EINVAL;
}

int hd_faults_configure(const char *spec)
{
    atomic_store(&hd_faults_armed, false); /* disarmed until hd_faults_arm */
    seed = 0;
    any_rate = false;
    memset(thresholds, 0, sizeof(thresholds));
    if (spec == NULL || spec[0] == '\0')
        return 0;
    char buf[HD_FAULT_SPEC_MAX];
    if (strlen(spec) >= sizeof(buf))
        return -EINVAL;
    strcpy(buf, spec);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        if (eq == NULL)
            return -EINVAL;
        *eq = '\0';
        int rc = parse_pair(tok, eq + 1);
        if (rc < 0) {
            hd_faults_configure(NULL);
            return rc;
        }
    }
    return 0;
}

void hd_faults_arm(bool on)
{
    atomic_store(&hd_faults_armed, on && any_rate);
}

uint64_t hd_faults_count(enum hd_fault_kind kind)
{
    HD_ASSERT((unsigned)kind < HD_FAULT_KINDS_COUNT);
    return atomic_load_explicit(&counts[kind], memory_order_relaxed);
}

const char *hd_fault_name(enum hd_fault_kind kind)
{
    HD_ASSERT((unsigned)kind < HD_FAULT_KINDS_COUNT);
    return kind_names[kind];
}

static int env_rc;

static void env_once(void)
{
    const char *spec = getenv("HD_FAULTS");
    env_rc = hd_faults_configure(spec);
    if (env_rc < 0)
        hd_log(HD_LOG_ERROR,
               "HD_FAULTS=\"%s\": bad spec (keys: seed, sqe, short_send, reset, "
               "alloc; rates in [0, 1])",
               spec);
    else if (any_rate)
        hd_log(HD_LOG_WARN, "HD_FAULTS=\"%s\": fault injection on", spec);
}

int hd_faults_from_env(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, env_once);
    return env_rc;
}

void hd_faults_report(void)
{
    if (!any_rate)
        return;
    hd_log(HD_LOG_INFO, "faults injected: sqe=%llu short_send=%llu reset=%llu alloc=%llu",
           (unsigned long long)hd_faults_count(HD_FAULT_SQE),
           (unsigned long long)hd_faults_count(HD_FAULT_SHORT_SEND),
           (unsigned long long)hd_faults_count(HD_FAULT_RESET),
           (unsigned long long)hd_faults_count(HD_FAULT_ALLOC));
}

struct io_uring_sqe *hd_fault_sqe(struct hd_shard *s, uint64_t tag)
{
    static const int32_t errs[] = {-EAGAIN, -ENOMEM, -EBUSY};
    if (tls.tail - tls.head == HD_FAULT_PENDING_MAX)
        return NULL;
    struct io_uring_sqe *nop = io_uring_get_sqe(&s->ring);
    if (nop == NULL)
        return NULL; /* no room for the NOP: this submission goes through */
    io_uring_prep_nop(nop);
    io_uring_sqe_set_data64(nop, HD_TAG_FAULT);
    tls.pending[tls.tail % HD_FAULT_PENDING_MAX] =
        (struct fault_cqe){.tag = tag, .res = errs[hd_fault_below(HD_ARRAY_SIZE(errs))]};
    tls.tail++;
    memset(&tls.scratch, 0, sizeof(tls.scratch));
    return &tls.scratch;
}

bool hd_fault_cqe(uint64_t *tag, int32_t *res)
{
    if (tls.head == tls.tail)
        return false;
    const struct fault_cqe *f = &tls.pending[tls.head % HD_FAULT_PENDING_MAX];
    tls.head++;
    *tag = f->tag;
    *res = f->res;
    return true;
}
