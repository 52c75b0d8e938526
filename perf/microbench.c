/* microbench.c - hd-microbench: the reactor's unit costs on this machine. Prints one
 * machine-readable line per figure ("name value unit") and then a human summary. Figures:
 * a loop round trip of one NOP op vs a plain syscall, NOPs in batches of 32, bus messages per
 * second between two shards, slab get+put, frame get+unref, timer start+expire.
 * Runs on the main thread and on shards it starts; bounded (a few seconds). */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "hd_impl.h"

struct figure {
    const char *name;
    double value;
    const char *unit;
    const char *what;
};
static struct figure figures[16];
static unsigned figures_count;

static void report(const char *name, double value, const char *unit, const char *what)
{
    printf("%s %.2f %s\n", name, value, unit);
    fflush(stdout);
    figures[figures_count++] = (struct figure){name, value, unit, what};
}

/* ---- plain syscall baseline */
static void bench_syscall(void)
{
    const unsigned n = 1000000;
    uint64_t t0 = hd_clock_ns();
    for (unsigned i = 0; i < n; i++)
        syscall(SYS_getppid);
    report("syscall_getppid_ns", (double)(hd_clock_ns() - t0) / n, "ns", "plain syscall");
}

/* ---- ops through the loop: one NOP at a time, or 32 per tick */
struct nop_bench {
    struct hd_shard *s;
    struct hd_op ops[32];
    unsigned width, remaining, outstanding;
    uint64_t t0, t1;
};
static struct nop_bench nb;

static void nop_cb(struct hd_op *op, int32_t res, uint32_t flags)
{
    (void)res, (void)flags;
    nb.outstanding--;
    if (nb.remaining > 0) {
        nb.remaining--;
        nb.outstanding++;
        hd_op_nop(nb.s, op);
    } else if (nb.outstanding == 0) {
        nb.t1 = hd_clock_ns();
        hd_runtime_stop(hd_shard_runtime(nb.s));
    }
}

static void nop_start(void *arg)
{
    struct hd_shard *s = arg;
    nb.s = s;
    nb.t0 = hd_clock_ns();
    for (unsigned i = 0; i < nb.width; i++) {
        hd_op_init(s, &nb.ops[i], nop_cb);
        nb.remaining--;
        nb.outstanding++;
        hd_op_nop(s, &nb.ops[i]);
    }
}

static int nop_init(struct hd_shard *s, void *arg, void **state)
{
    (void)arg, (void)state;
    return hd_defer(s, nop_start, s);
}

static const struct hd_module nop_module = {
    .abi_version = HD_MODULE_ABI, .name = "nop", .shard_init = nop_init};

static double run_nops(unsigned width, unsigned total)
{
    static const struct hd_module *const mods[] = {&nop_module};
    struct hd_runtime_config cfg = {
        .shards_count = 1, .pin = true, .modules = mods, .modules_count = 1};
    struct hd_runtime *rt;
    if (hd_runtime_create(&cfg, &rt) < 0)
        return -1;
    memset(&nb, 0, sizeof(nb));
    nb.width = width;
    nb.remaining = total;
    hd_runtime_run(rt);
    hd_runtime_destroy(rt);
    return (double)(nb.t1 - nb.t0) / total;
}

/* ---- bus: shard 0 sends, shard 1 counts; each on its own core */
#define BUS_MESSAGES 20000000u
static _Atomic uint64_t bus_received_total;
static uint64_t bus_t0, bus_t1;
static uint64_t bus_sent;

static void bus_msg(struct hd_shard *dst, const struct hd_msg *m)
{
    (void)m;
    uint64_t n = atomic_fetch_add_explicit(&bus_received_total, 1, memory_order_relaxed) + 1;
    if (n == BUS_MESSAGES) {
        bus_t1 = hd_clock_ns();
        hd_runtime_stop(hd_shard_runtime(dst));
    }
}

static void bus_produce(void *arg)
{
    struct hd_shard *s = arg;
    struct hd_msg m = {.fn = bus_msg};
    /* Fill what the ring takes this tick, then yield a tick so it is published. */
    while (bus_sent < BUS_MESSAGES) {
        m.u64[0] = bus_sent;
        if (hd_bus_room(s, 1) <= HD_BUS_OVERFLOW_SIZE || hd_bus_send(s, 1, &m) < 0)
            break;
        bus_sent++;
    }
    if (bus_sent < BUS_MESSAGES)
        hd_defer(s, bus_produce, s);
}

static int bus_init(struct hd_shard *s, void *arg, void **state)
{
    (void)arg, (void)state;
    if (hd_shard_id(s) != 0)
        return 0;
    bus_t0 = hd_clock_ns();
    return hd_defer(s, bus_produce, s);
}

static const struct hd_module bus_module = {
    .abi_version = HD_MODULE_ABI, .name = "bus", .shard_init = bus_init};

static double run_bus(void)
{
    static const struct hd_module *const mods[] = {&bus_module};
    struct hd_runtime_config cfg = {
        .shards_count = 2, .pin = true, .modules = mods, .modules_count = 1};
    struct hd_runtime *rt;
    if (hd_runtime_create(&cfg, &rt) < 0)
        return -1;
    hd_runtime_run(rt);
    hd_runtime_destroy(rt);
    return (double)BUS_MESSAGES / ((double)(bus_t1 - bus_t0) / 1e9);
}

/* ---- pools and timers, single-threaded on a bare shard struct (no ring needed) */
static void bench_slab(void)
{
    struct hd_slab *p;
    if (hd_slab_create(NULL, "bench", 64, 1024, &p) < 0)
        return;
    void *objs[64];
    const unsigned rounds = 200000;
    for (unsigned i = 0; i < 64; i++) /* carve first: measure steady state */
        objs[i] = hd_slab_get(p);
    for (unsigned i = 0; i < 64; i++)
        hd_slab_put(p, objs[i]);
    uint64_t t0 = hd_clock_ns();
    for (unsigned r = 0; r < rounds; r++) {
        for (unsigned i = 0; i < 64; i++)
            objs[i] = hd_slab_get(p);
        for (unsigned i = 0; i < 64; i++)
            hd_slab_put(p, objs[i]);
    }
    report("slab_get_put_ns", (double)(hd_clock_ns() - t0) / (rounds * 64.0), "ns",
           "slab get + put of a 64 B object");
    hd_slab_destroy(p);
}

static uint64_t timers_fired;
static void timer_cb(struct hd_timer *t)
{
    (void)t;
    timers_fired++;
}

static void bench_timers(void)
{
    struct hd_shard *s = calloc(1, sizeof(*s));
    enum { N = 4096, ROUNDS = 200 };
    struct hd_timer *ts = calloc(N, sizeof(*ts));
    if (!s || !ts)
        return;
    uint64_t now = 1000000;
    hd_wheel_init(&s->wheel, now);
    s->now_ms = now;
    uint64_t t0 = hd_clock_ns();
    for (unsigned r = 0; r < ROUNDS; r++) {
        for (unsigned i = 0; i < N; i++) {
            hd_timer_init(&ts[i], timer_cb);
            hd_timer_start(s, &ts[i], 1 + (i * 7919u) % 5000u); /* up to 5 s: two levels */
        }
        now += 5001;
        s->now_ms = now;
        hd_wheel_expire(s, now);
    }
    double ns = (double)(hd_clock_ns() - t0) / ((double)N * ROUNDS);
    if (timers_fired == (uint64_t)N * ROUNDS)
        report("timer_start_expire_ns", ns, "ns", "timer start + expire (4096 armed, <= 5 s)");
    free(ts);
    free(s);
}

/* hd-microbench [--only NAME] [--scale F]: --only runs one figure (for valgrind --tool=callgrind
 * or perf record), --scale multiplies the iteration counts (e.g. 0.02 under callgrind). */
int main(int argc, char **argv)
{
    const char *only = NULL;
    double scale = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--only") == 0)
            only = argv[i + 1];
        else if (strcmp(argv[i], "--scale") == 0)
            scale = atof(argv[i + 1]);
    }
    if (scale <= 0 || scale > 100) {
        fprintf(stderr, "hd-microbench: --scale must be in (0, 100]\n");
        return 2;
    }
#define WANT(name) (only == NULL || strcmp(only, name) == 0)
    printf("# hd-microbench: name value unit\n");
    if (WANT("syscall_getppid_ns"))
        bench_syscall();
    if (WANT("op_nop_roundtrip_ns"))
        report("op_nop_roundtrip_ns", run_nops(1, (unsigned)(1000000 * scale)), "ns",
               "one NOP op through the loop: submit, wait, dispatch, callback");
    if (WANT("op_nop_batch32_ns"))
        report("op_nop_batch32_ns", run_nops(32, (unsigned)(4000000 * scale)), "ns",
               "per NOP, 32 in flight");
    if (WANT("bus_msgs_per_sec"))
        report("bus_msgs_per_sec", run_bus(), "msg/s", "bus messages shard 0 -> shard 1");
    if (WANT("slab_get_put_ns"))
        bench_slab();
    if (WANT("timer_start_expire_ns"))
        bench_timers();
    if (only)
        return 0;
    printf("\nsummary (this machine, noisy: compare ratios within one run)\n");
    for (unsigned i = 0; i < figures_count; i++)
        printf("  %-24s %14.2f %-6s %s\n", figures[i].name, figures[i].value, figures[i].unit,
               figures[i].what);
    double sys = figures[0].value, rt = figures[1].value;
    if (sys > 0)
        printf("  op round trip = %.2f x a plain syscall\n", rt / sys);
    return 0;
}
