/* bench_stream.c - hd-bench-stream: a one-way stream on loopback between two pinned shards
 * (server on shard 0, client on shard 1, so each has a core), plain TCP against userspace TLS
 * 1.3 records, and the AEAD floor (seal + open of one 1400-byte record with tls_record.c) as the
 * reference for what sealing alone costs. Per mode: Mbit/s of payload delivered to the server
 * app, and CPU-ns per KiB of payload on each shard's thread (CLOCK_THREAD_CPUTIME_ID) and for
 * the whole process (getrusage: also io-wq workers, if the kernel punted any send).
 *
 * Modes: frames of 1400 bytes (a DERP packet) or 16 KiB, either queued up to the send
 * watermark (net sends one sendmsg per tick; the TLS codec seals everything queued at that
 * point into records of up to 16 KiB: "coalesced"), or one frame per sendmsg ("per_send": a
 * high watermark of one byte, so the next frame is queued only once the previous send
 * completed). The codec has no knob to stop coalescing, but it seals only what is queued when
 * a send can start, so one frame per send is exactly one 1400-byte record per sendmsg; its
 * plain-TCP twin separates the per-send cost from the per-record cost.
 *
 * Output: one "name value unit" line per figure, then a human summary ("#" lines). Threads:
 * main creates the TLS contexts, runs the AEAD floor, then one runtime per mode; the stream
 * runs on the shards. Exit: 0 figures printed, 1 a run failed, 2 usage. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <hd/net.h>
#include <hd/kit.h>
#include <hd/tls.h>
#include "tls_keys.h"
#include "tls_record.h"

/* A DERP packet: a WireGuard datagram under the 1500-byte MTU (as in hd-bench-aead). */
#define BENCH_FRAME_SMALL 1400u
/* A full TLS record's plaintext: the largest frame that still maps to one record. */
#define BENCH_FRAME_LARGE TLS_RECORD_PLAINTEXT_MAX
/* Connections streaming at once (--conns): "one or a few"; each holds at most the send cap. */
#define BENCH_CONNS_MAX     8u
#define BENCH_CONNS_DEFAULT 1u
/* Load before the measured window: connection set-up, handshakes, slow start and pool growth
 * stay out of the figures. */
#define BENCH_WARMUP_MS 300u
/* Measured window per mode (--duration): 6 modes x (3 s + warm-up + set-up) stays under 25 s. */
#define BENCH_DURATION_MS_DEFAULT 3000u
#define BENCH_DURATION_MS_MIN     200u
#define BENCH_DURATION_MS_MAX     20000u
/* Every connection must be streaming by then, or the mode fails (a handshake is ~1 ms). */
#define BENCH_SETUP_MS_MAX 5000u
/* AEAD floor: time per figure, and iterations between clock reads (amortises clock_gettime). */
#define BENCH_AEAD_BUDGET_NS 300000000ull
#define BENCH_AEAD_BATCH     64u

_Static_assert(BENCH_FRAME_LARGE <= 65536u, "a large frame fits the default 64 KiB class");
_Static_assert(BENCH_FRAME_SMALL <= 2048u, "a small frame fits the default 2 KiB class");
_Static_assert(BENCH_CONNS_MAX <= NET_CONNS_MAX, "the connection pool holds them");
_Static_assert(BENCH_WARMUP_MS + BENCH_DURATION_MS_MIN < BENCH_SETUP_MS_MAX + 1000u,
               "warm-up is short next to the set-up bound");

enum bench_kind { BENCH_TCP, BENCH_TLS };

struct bench_mode {
    const char *name;
    enum bench_kind kind;
    uint32_t frame_len;
    bool per_send; /* one frame per sendmsg (watermark of one byte) */
    const char *what;
    bool record_per_frame; /* TLS: tls_conn_options.record_per_frame */
};

static const struct bench_mode bench_modes[] = {
    {"tcp_1400", BENCH_TCP, BENCH_FRAME_SMALL, false, "plain TCP, 1400 B frames", false},
    {"tls_1400_coalesced", BENCH_TLS, BENCH_FRAME_SMALL, false,
     "userspace TLS, 1400 B frames coalesced into records <= 16 KiB", false},
    {"tcp_1400_per_send", BENCH_TCP, BENCH_FRAME_SMALL, true,
     "plain TCP, one 1400 B frame per sendmsg", false},
    {"tls_1400_record_per_send", BENCH_TLS, BENCH_FRAME_SMALL, true,
     "userspace TLS, one 1400 B record per sendmsg", false},
    {"tls_1400_record_per_frame", BENCH_TLS, BENCH_FRAME_SMALL, false,
     "userspace TLS, 1400 B frames each its own record, sends batched as usual", true},
    {"tcp_16k", BENCH_TCP, BENCH_FRAME_LARGE, false, "plain TCP, 16 KiB frames", false},
    {"tls_16k", BENCH_TLS, BENCH_FRAME_LARGE, false, "userspace TLS, 16 KiB frames (1 record each)",
     false},
};
#define BENCH_MODES_COUNT HD_ARRAY_SIZE(bench_modes)

/* One side's counters at a window edge, read on that side's shard. */
struct bench_snap {
    uint64_t wall_ns, cpu_ns;
    uint64_t plain_bytes; /* server: payload delivered to on_data */
    uint64_t wire_bytes;  /* server: bytes received; client: bytes sent (net_conn_stats) */
    uint64_t sends;       /* client: sendmsg calls */
    uint64_t proc_cpu_ns; /* client: getrusage of the whole process */
    uint64_t runq_ns;     /* time runnable but waiting for the CPU (schedstat run_delay) */
};

struct bench_client {
    struct net_conn *c;
    uint64_t frames_sent;
    bool paused, ready;
};

/* One mode's run. Each field is written by one thread only: srv_* on shard 0, cli_* on shard 1,
 * the rest by main before the runtime starts; main reads everything after hd_runtime_wait. */
struct bench_run {
    const struct bench_mode *mode;
    unsigned conns_count;
    uint32_t duration_ms;
    /* shard 0 */
    struct net_listener *srv_listener;
    struct net_conn *srv_conns[BENCH_CONNS_MAX];
    uint64_t srv_plain_bytes, srv_wire_closed;
    struct bench_snap srv[2];
    unsigned srv_snaps;
    int srv_error;
    bool srv_stopping;
    /* shard 1 */
    struct bench_client cli[BENCH_CONNS_MAX];
    unsigned cli_ready_count;
    struct hd_timer cli_guard, cli_warm, cli_end;
    struct bench_snap cli_snap[2];
    unsigned cli_snaps;
    uint16_t cli_suite;
    int cli_error;
    bool cli_stopping;
};

static struct bench_run run;
static struct tls_ctx *srv_ctx, *cli_ctx;

static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t process_cpu_ns(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    uint64_t us = (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000ull +
                  (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
    return us * 1000u;
}

/* Time this thread spent runnable but not running (/proc/thread-self/schedstat, second field):
 * other work on our pinned core shows up here, so a noisy run can be told from a slow one.
 * 0 when the kernel has no schedstat. */
static uint64_t thread_runq_ns(void)
{
    FILE *f = fopen("/proc/thread-self/schedstat", "r");
    unsigned long long run_ns = 0, wait_ns = 0;
    if (f == NULL)
        return 0;
    if (fscanf(f, "%llu %llu", &run_ns, &wait_ns) != 2)
        wait_ns = 0;
    fclose(f);
    return wait_ns;
}

/* ---------------------------------------------------------------- server (shard 0) */

static ssize_t srv_data(struct net_conn *c, const uint8_t *data, size_t len)
{
    (void)c, (void)data;
    run.srv_plain_bytes += len;
    return (ssize_t)len;
}

static void srv_eof(struct net_conn *c)
{
    net_conn_close(c, 0, false);
}

static void srv_close(struct net_conn *c, int reason)
{
    (void)reason; /* the client ends the stream with an abrupt close: any reason is fine */
    run.srv_wire_closed += net_conn_stats(c)->bytes_in;
    for (unsigned i = 0; i < BENCH_CONNS_MAX; i++)
        if (run.srv_conns[i] == c)
            run.srv_conns[i] = NULL;
}

static const struct net_conn_handler srv_handler = {
    .on_data = srv_data,
    .on_eof = srv_eof,
    .on_close = srv_close,
};

static void srv_accept(struct net_listener *l, int fd, const struct net_addr *peer, void *arg)
{
    (void)peer, (void)arg;
    unsigned slot = 0;
    while (slot < BENCH_CONNS_MAX && run.srv_conns[slot] != NULL)
        slot++;
    struct net_conn *c;
    if (slot == BENCH_CONNS_MAX ||
        net_conn_adopt(net_listener_shard(l), fd, &srv_handler, NULL, NULL, &c) < 0) {
        close(fd);
        return;
    }
    run.srv_conns[slot] = c;
    if (run.mode->kind == BENCH_TLS) {
        struct tls_conn_options o = {.record_per_frame = run.mode->record_per_frame};
        int rc = tls_conn_start(c, srv_ctx, &o);
        if (rc < 0) {
            run.srv_error = rc;
            net_conn_close(c, rc, false);
        }
    }
}

/* Window edge on the server: phase 0 starts the window, phase 1 ends it and the run. */
static void srv_snap_msg(struct hd_shard *s, const struct hd_msg *m)
{
    struct bench_snap *p = &run.srv[m->u64[0] ? 1 : 0];
    p->wall_ns = hd_clock_ns();
    p->cpu_ns = thread_cpu_ns();
    p->runq_ns = thread_runq_ns();
    p->plain_bytes = run.srv_plain_bytes;
    p->wire_bytes = run.srv_wire_closed;
    for (unsigned i = 0; i < BENCH_CONNS_MAX; i++)
        if (run.srv_conns[i])
            p->wire_bytes += net_conn_stats(run.srv_conns[i])->bytes_in;
    run.srv_snaps++;
    if (m->u64[0]) {
        run.srv_stopping = true;
        hd_runtime_stop(hd_shard_runtime(s));
    }
}

/* ---------------------------------------------------------------- client (shard 1) */

static void cli_fail(struct hd_shard *s, int reason)
{
    if (run.cli_error == 0)
        run.cli_error = reason;
    run.cli_stopping = true;
    hd_runtime_stop(hd_shard_runtime(s));
}

/* Queue frames until the connection says stop (the high watermark: in per_send mode, the
 * first frame). Frames come from the pool unfilled but for a sequence number: the cost
 * measured is moving bytes, not making them. */
static void cli_fill(struct bench_client *k)
{
    struct hd_shard *s = net_conn_shard(k->c);
    uint32_t len = run.mode->frame_len;
    while (!k->paused && !run.cli_stopping) {
        struct hd_frame *f = hd_frame_get(s, len);
        if (f == NULL) {
            cli_fail(s, -ENOBUFS);
            return;
        }
        memcpy(f->data, &k->frames_sent, sizeof(k->frames_sent));
        f->len = len;
        int rc = net_conn_send(k->c, f, 0, len);
        hd_frame_unref(s, f);
        if (rc < 0) {
            cli_fail(s, rc);
            return;
        }
        k->frames_sent++;
    }
}

static void cli_pressure(struct net_conn *c, bool paused)
{
    struct bench_client *k = net_conn_app(c);
    k->paused = paused;
    if (!paused && k->ready)
        cli_fill(k);
}

static void cli_snap(struct hd_shard *s, unsigned phase)
{
    struct bench_snap *p = &run.cli_snap[phase];
    p->wall_ns = hd_clock_ns();
    p->cpu_ns = thread_cpu_ns();
    p->proc_cpu_ns = process_cpu_ns();
    p->runq_ns = thread_runq_ns();
    for (unsigned i = 0; i < run.conns_count; i++) {
        if (run.cli[i].c == NULL)
            continue; /* closed by a failure: the run is void anyway */
        const struct net_conn_stats *st = net_conn_stats(run.cli[i].c);
        p->wire_bytes += st->bytes_out;
        p->sends += st->sends;
    }
    run.cli_snaps++;
    struct hd_msg m = {.fn = srv_snap_msg, .u64 = {phase, 0}};
    int rc = hd_bus_send(s, 0, &m);
    if (rc < 0)
        cli_fail(s, rc);
}

static void cli_end(struct hd_timer *t)
{
    (void)t;
    struct hd_shard *s = hd_shard_current();
    if (run.cli_stopping)
        return; /* a failure already stopped the run */
    cli_snap(s, 1);
    run.cli_stopping = true;
    for (unsigned i = 0; i < run.conns_count; i++)
        if (run.cli[i].c)
            net_conn_close(run.cli[i].c, 0, false);
}

static void cli_warm(struct hd_timer *t)
{
    (void)t;
    struct hd_shard *s = hd_shard_current();
    if (run.cli_stopping)
        return;
    cli_snap(s, 0);
    hd_timer_start(s, &run.cli_end, run.duration_ms);
}

static void cli_guard(struct hd_timer *t)
{
    (void)t;
    cli_fail(hd_shard_current(), -ETIMEDOUT);
}

static void cli_ready(struct bench_client *k)
{
    struct hd_shard *s = net_conn_shard(k->c);
    k->ready = true;
    if (run.mode->per_send) /* anything queued pauses; resume once everything went out */
        net_conn_set_limits(k->c, 1, 0, NET_SEND_MAX_DEFAULT);
    cli_fill(k);
    if (++run.cli_ready_count == run.conns_count) {
        hd_timer_stop(s, &run.cli_guard);
        hd_timer_start(s, &run.cli_warm, BENCH_WARMUP_MS);
    }
}

static void cli_connected(struct net_conn *c, int res)
{
    if (res == 0 && run.mode->kind == BENCH_TCP)
        cli_ready(net_conn_app(c)); /* TLS: ready once the handshake is done */
}

static void cli_handshake(struct net_conn *c, const struct tls_conn_info *info)
{
    run.cli_suite = info->suite;
    if (info->mode != TLS_MODE_USERSPACE) {
        cli_fail(net_conn_shard(c), -EPROTONOSUPPORT); /* we measure userspace records */
        return;
    }
    cli_ready(net_conn_app(c));
}

static ssize_t cli_data(struct net_conn *c, const uint8_t *data, size_t len)
{
    (void)c, (void)data;
    return (ssize_t)len; /* the server sends nothing */
}

static void cli_close(struct net_conn *c, int reason)
{
    struct bench_client *k = net_conn_app(c);
    if (!run.cli_stopping)
        cli_fail(net_conn_shard(c), reason ? reason : -ECONNRESET);
    k->c = NULL;
}

static const struct net_conn_handler cli_handler = {
    .on_data = cli_data,
    .on_send_pressure = cli_pressure,
    .on_connected = cli_connected,
    .on_close = cli_close,
};

/* From shard 0 once it listens: u64[0] is the port. Opens every connection. */
static void cli_start_msg(struct hd_shard *s, const struct hd_msg *m)
{
    struct net_addr a;
    char text[32];
    snprintf(text, sizeof(text), "127.0.0.1:%u", (unsigned)m->u64[0]);
    int rc = net_addr_parse(text, &a);
    hd_timer_start(s, &run.cli_guard, BENCH_SETUP_MS_MAX);
    for (unsigned i = 0; rc == 0 && i < run.conns_count; i++) {
        struct bench_client *k = &run.cli[i];
        rc = net_conn_connect(s, &a, BENCH_SETUP_MS_MAX, &cli_handler, k, NULL, &k->c);
        if (rc == 0 && run.mode->kind == BENCH_TLS) {
            struct tls_conn_options o = {.server_name = "localhost",
                                         .on_handshake = cli_handshake,
                                         .record_per_frame = run.mode->record_per_frame};
            rc = tls_conn_start(k->c, cli_ctx, &o);
            if (rc < 0)
                net_conn_close(k->c, rc, false);
        }
    }
    if (rc < 0)
        cli_fail(s, rc);
}

/* ---------------------------------------------------------------- the module */

static void srv_announce(void *arg)
{
    struct hd_shard *s = arg;
    struct hd_msg m = {.fn = cli_start_msg,
                       .u64 = {net_addr_port(net_listener_addr(run.srv_listener)), 0}};
    int rc = hd_bus_send(s, 1, &m);
    if (rc < 0) {
        run.srv_error = rc;
        hd_runtime_stop(hd_shard_runtime(s));
    }
}

static int bench_shard_init(struct hd_shard *s, void *arg, void **state)
{
    (void)arg, (void)state;
    if (hd_shard_id(s) != 0) {
        hd_timer_init(&run.cli_guard, cli_guard);
        hd_timer_init(&run.cli_warm, cli_warm);
        hd_timer_init(&run.cli_end, cli_end);
        return 0;
    }
    struct net_addr a;
    int rc = net_addr_parse("127.0.0.1:0", &a);
    if (rc == 0)
        rc = net_listener_start(s, &a, NULL, srv_accept, NULL, &run.srv_listener);
    return rc < 0 ? rc : hd_defer(s, srv_announce, s);
}

static void bench_shard_stop(struct hd_shard *s, void *state)
{
    (void)state;
    if (hd_shard_id(s) == 0) {
        run.srv_stopping = true;
        if (run.srv_listener)
            net_listener_stop(run.srv_listener);
        run.srv_listener = NULL;
    } else {
        run.cli_stopping = true;
        hd_timer_stop(s, &run.cli_guard);
        hd_timer_stop(s, &run.cli_warm);
        hd_timer_stop(s, &run.cli_end);
    }
    net_shard_close_all(s, 0);
}

static const struct hd_module bench_module = {
    .abi_version = HD_MODULE_ABI,
    .name = "bench-stream",
    .shard_init = bench_shard_init,
    .shard_stop = bench_shard_stop,
};

/* ---------------------------------------------------------------- AEAD floor (main thread) */

struct bench_aead {
    struct tls_record_state tx, rx;
    uint8_t plain[BENCH_FRAME_LARGE];
    uint8_t wire[TLS_RECORD_SIZE_MAX];
};

/* Seal + open of one len-byte record for the time budget; returns ns per record or -errno. */
static double aead_run(struct bench_aead *b, size_t len)
{
    struct iovec iov = {b->plain, len};
    uint64_t start = hd_clock_ns(), elapsed = 0, records = 0;
    while (elapsed < BENCH_AEAD_BUDGET_NS) {
        for (unsigned i = 0; i < BENCH_AEAD_BATCH; i++) {
            size_t consumed;
            ssize_t n = tls_record_seal_iov(&b->tx, &iov, 1, &consumed, b->wire, sizeof(b->wire));
            if (n < 0)
                return (double)n;
            struct tls_record_in rec;
            int rc = tls_record_open(&b->rx, b->wire, (size_t)n, &rec);
            if (rc < 0)
                return rc;
        }
        records += BENCH_AEAD_BATCH;
        elapsed = hd_clock_ns() - start;
    }
    return (double)elapsed / (double)records;
}

/* The floor for suite: ns per 1400-byte record and per 16 KiB record. Returns 0 or -errno. */
static int aead_floor(uint16_t suite, double *small_ns, double *large_ns)
{
    static struct bench_aead b; /* 32 KiB: off the stack */
    uint8_t secret[TLS_SECRET_LEN_MAX];
    memset(secret, 0x5a, sizeof(secret));
    memset(b.plain, 0xa5, sizeof(b.plain));
    struct tls_traffic_keys keys;
    int rc = tls_traffic_keys_init(&keys, suite, secret,
                                   suite == TLS_SUITE_AES_256_GCM_SHA384 ? 48 : 32);
    if (rc == 0)
        rc = tls_record_state_init(&b.tx, &keys, 0);
    if (rc == 0)
        rc = tls_record_state_init(&b.rx, &keys, 0);
    tls_traffic_keys_deinit(&keys);
    if (rc == 0) {
        *small_ns = aead_run(&b, BENCH_FRAME_SMALL);
        *large_ns = aead_run(&b, BENCH_FRAME_LARGE);
        if (*small_ns < 0 || *large_ns < 0)
            rc = -EIO;
    }
    tls_record_state_deinit(&b.tx);
    tls_record_state_deinit(&b.rx);
    return rc;
}

/* ---------------------------------------------------------------- runs (main thread) */

struct bench_result {
    double mbps;
    double srv_ns_per_kib, cli_ns_per_kib, proc_ns_per_kib;
    double srv_cpu_pct, cli_cpu_pct;
    double srv_runq_pct, cli_runq_pct; /* of the window: waiting for a CPU held by others */
    double bytes_per_send;
    double record_bytes; /* TLS: payload per record, from the server's wire vs plain bytes */
};

static int run_mode(const struct bench_mode *m, unsigned conns, uint32_t duration_ms,
                    struct bench_result *out)
{
    memset(&run, 0, sizeof(run));
    run.mode = m;
    run.conns_count = conns;
    run.duration_ms = duration_ms;
    /* tls (and net before it) under the bench; userspace records are the subject. */
    static struct tls_shard_options to = {.ktls_disable = true};
    static const struct hd_module *const mods[] = {&tls_module, &bench_module};
    static void *const args[] = {&to, NULL};
    struct hd_runtime_config cfg = {
        .shards_count = 2, .pin = true, .modules = mods, .modules_args = args, .modules_count = 2};
    struct hd_runtime *rt;
    int rc = hd_runtime_create(&cfg, &rt);
    if (rc < 0)
        return rc;
    rc = hd_runtime_run(rt);
    hd_runtime_destroy(rt);
    if (rc == 0)
        rc = run.cli_error ? run.cli_error : run.srv_error;
    if (rc == 0 && (run.cli_snaps != 2 || run.srv_snaps != 2))
        rc = -EIO; /* the window did not close on both sides */
    if (rc < 0)
        return rc;
    const struct bench_snap *s0 = &run.srv[0], *s1 = &run.srv[1];
    const struct bench_snap *c0 = &run.cli_snap[0], *c1 = &run.cli_snap[1];
    double plain = (double)(s1->plain_bytes - s0->plain_bytes);
    double kib = plain / 1024.0;
    double srv_wall = (double)(s1->wall_ns - s0->wall_ns);
    double cli_wall = (double)(c1->wall_ns - c0->wall_ns);
    if (plain <= 0 || srv_wall <= 0 || cli_wall <= 0)
        return -EIO;
    out->mbps = plain * 8.0 / (srv_wall / 1e9) / 1e6;
    out->srv_ns_per_kib = (double)(s1->cpu_ns - s0->cpu_ns) / kib;
    out->cli_ns_per_kib = (double)(c1->cpu_ns - c0->cpu_ns) / kib;
    out->proc_ns_per_kib = (double)(c1->proc_cpu_ns - c0->proc_cpu_ns) / kib;
    out->srv_cpu_pct = 100.0 * (double)(s1->cpu_ns - s0->cpu_ns) / srv_wall;
    out->cli_cpu_pct = 100.0 * (double)(c1->cpu_ns - c0->cpu_ns) / cli_wall;
    out->srv_runq_pct = 100.0 * (double)(s1->runq_ns - s0->runq_ns) / srv_wall;
    out->cli_runq_pct = 100.0 * (double)(c1->runq_ns - c0->runq_ns) / cli_wall;
    uint64_t sends = c1->sends - c0->sends;
    out->bytes_per_send = sends ? (double)(c1->wire_bytes - c0->wire_bytes) / (double)sends : 0;
    double overhead = (double)(s1->wire_bytes - s0->wire_bytes) - plain;
    out->record_bytes = 0;
    if (m->kind == BENCH_TLS && overhead > 0)
        out->record_bytes = plain / (overhead / TLS_RECORD_OVERHEAD);
    return 0;
}

static void figure(const char *mode, const char *name, double value, const char *unit)
{
    printf("bench_stream_%s%s%s %.1f %s\n", mode, mode[0] ? "_" : "", name, value, unit);
}

static void report_mode(const struct bench_mode *m, const struct bench_result *r)
{
    figure(m->name, "mbps", r->mbps, "Mbit/s");
    figure(m->name, "server_cpu_ns_per_kib", r->srv_ns_per_kib, "ns/KiB");
    figure(m->name, "client_cpu_ns_per_kib", r->cli_ns_per_kib, "ns/KiB");
    figure(m->name, "process_cpu_ns_per_kib", r->proc_ns_per_kib, "ns/KiB");
    figure(m->name, "server_cpu_pct", r->srv_cpu_pct, "%");
    figure(m->name, "client_cpu_pct", r->cli_cpu_pct, "%");
    figure(m->name, "server_runq_wait_pct", r->srv_runq_pct, "%");
    figure(m->name, "client_runq_wait_pct", r->cli_runq_pct, "%");
    figure(m->name, "bytes_per_sendmsg", r->bytes_per_send, "B");
    if (m->kind == BENCH_TLS)
        figure(m->name, "record_payload_bytes", r->record_bytes, "B");
    fflush(stdout);
}

static const char *suite_name(uint16_t suite)
{
    switch (suite) {
    case TLS_SUITE_AES_128_GCM_SHA256:
        return "TLS_AES_128_GCM_SHA256";
    case TLS_SUITE_AES_256_GCM_SHA384:
        return "TLS_AES_256_GCM_SHA384";
    case TLS_SUITE_CHACHA20_POLY1305_SHA256:
        return "TLS_CHACHA20_POLY1305_SHA256";
    }
    return "unknown";
}

/* TLS against its TCP twin: the extra CPU on both sides, per KiB and per 1400-byte frame. */
static void summary_delta(const char *label, const struct bench_result *tls,
                          const struct bench_result *tcp, double floor_ns_per_kib)
{
    double extra =
        tls->srv_ns_per_kib + tls->cli_ns_per_kib - tcp->srv_ns_per_kib - tcp->cli_ns_per_kib;
    printf("# %s: %.2fx the Mbit/s; CPU %+.0f ns/KiB (client %+.0f, server %+.0f), %+.0f ns per "
           "1400 B; that is %.2fx the AEAD floor of %.0f ns/KiB\n",
           label, tls->mbps / tcp->mbps, extra, tls->cli_ns_per_kib - tcp->cli_ns_per_kib,
           tls->srv_ns_per_kib - tcp->srv_ns_per_kib, extra * BENCH_FRAME_SMALL / 1024.0,
           floor_ns_per_kib > 0 ? extra / floor_ns_per_kib : 0, floor_ns_per_kib);
}

static void summary(const struct bench_result *r, const bool *done, double small_ns,
                    double large_ns, unsigned conns, uint32_t duration_ms, uint16_t suite)
{
    printf("# hd-bench-stream: loopback, server shard 0 / client shard 1 (pinned), %u "
           "connection(s), %.1f s per mode after %u ms warm-up; TLS suite %s\n",
           conns, duration_ms / 1000.0, BENCH_WARMUP_MS, suite_name(suite));
    printf("# %-24s %6s %8s %8s %9s %4s %4s %5s %5s %7s %5s\n", "mode", "Mbit/s", "srv ns/K",
           "cli ns/K", "proc ns/K", "srv%", "cli%", "srvRQ", "cliRQ", "B/send", "rec B");
    for (size_t i = 0; i < BENCH_MODES_COUNT; i++) {
        if (!done[i])
            continue;
        const struct bench_result *x = &r[i];
        printf("# %-24s %6.0f %8.0f %8.0f %9.0f %4.0f %4.0f %5.1f %5.1f %7.0f %5.0f\n",
               bench_modes[i].name, x->mbps, x->srv_ns_per_kib, x->cli_ns_per_kib,
               x->proc_ns_per_kib, x->srv_cpu_pct, x->cli_cpu_pct, x->srv_runq_pct, x->cli_runq_pct,
               x->bytes_per_send, x->record_bytes);
    }
    printf("# srv%%/cli%%: each shard's CPU share of the window; srvRQ/cliRQ: share spent runnable "
           "but waiting\n# for the CPU (schedstat): more than ~1%% means other work shared our "
           "cores (a noisy run)\n");
    if (small_ns > 0)
        printf("# AEAD floor (%s, seal+open): 1400 B record %.0f ns (%.0f ns/KiB); 16 KiB record "
               "%.0f ns/KiB\n",
               suite_name(TLS_SUITE_AES_128_GCM_SHA256), small_ns,
               small_ns * 1024.0 / BENCH_FRAME_SMALL, large_ns * 1024.0 / BENCH_FRAME_LARGE);
    if (done[0] && done[1])
        summary_delta("tls_1400_coalesced vs tcp_1400", &r[1], &r[0],
                      large_ns * 1024.0 / BENCH_FRAME_LARGE);
    if (done[2] && done[3])
        summary_delta("tls_1400_record_per_send vs tcp_1400_per_send", &r[3], &r[2],
                      small_ns * 1024.0 / BENCH_FRAME_SMALL);
    if (done[0] && done[4])
        summary_delta("tls_1400_record_per_frame vs tcp_1400", &r[4], &r[0],
                      small_ns * 1024.0 / BENCH_FRAME_SMALL);
    if (done[5] && done[6])
        summary_delta("tls_16k vs tcp_16k", &r[6], &r[5], large_ns * 1024.0 / BENCH_FRAME_LARGE);
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: hd-bench-stream [--duration D] [--conns N] [--only NAME]\n"
            "  --duration D  measured time per mode, %.1fs..%.0fs (default %.0fs; 500ms, 10s;\n"
            "                a bare number is seconds)\n"
            "  --conns N     connections streaming at once, 1..%u (default %u)\n"
            "  --only NAME   one mode (for perf record / callgrind), or 'aead'; modes:\n",
            BENCH_DURATION_MS_MIN / 1000.0, BENCH_DURATION_MS_MAX / 1000.0,
            BENCH_DURATION_MS_DEFAULT / 1000.0, BENCH_CONNS_MAX, BENCH_CONNS_DEFAULT);
    for (size_t i = 0; i < BENCH_MODES_COUNT; i++)
        fprintf(f, "                %-26s %s\n", bench_modes[i].name, bench_modes[i].what);
}

struct bench_args {
    uint32_t duration_ms;
    unsigned conns;
    const char *only;
};

static int parse_args(int argc, char **argv, struct bench_args *a)
{
    *a = (struct bench_args){BENCH_DURATION_MS_DEFAULT, BENCH_CONNS_DEFAULT, NULL};
    for (int i = 1; i < argc; i += 2) {
        if (i + 1 >= argc)
            return -EINVAL;
        char *end;
        double v = strtod(argv[i + 1], &end);
        bool num = end != argv[i + 1] && *end == '\0';
        int64_t ns = -1; /* Go's spelling as everywhere (kit); a bare number is seconds */
        if (strcmp(argv[i], "--duration") == 0 &&
            kit_duration_parse(argv[i + 1], 1000000000, &ns) == 0 &&
            ns / 1000000 >= BENCH_DURATION_MS_MIN && ns / 1000000 <= BENCH_DURATION_MS_MAX)
            a->duration_ms = (uint32_t)(ns / 1000000);
        else if (strcmp(argv[i], "--conns") == 0 && num && v >= 1 && v <= BENCH_CONNS_MAX)
            a->conns = (unsigned)v;
        else if (strcmp(argv[i], "--only") == 0)
            a->only = argv[i + 1];
        else
            return -EINVAL;
    }
    if (a->only == NULL || strcmp(a->only, "aead") == 0)
        return 0;
    for (size_t i = 0; i < BENCH_MODES_COUNT; i++)
        if (strcmp(a->only, bench_modes[i].name) == 0)
            return 0;
    return -EINVAL;
}

static int contexts_create(void)
{
    struct tls_server_options so = {.self_signed_host = "localhost"};
    int rc = tls_server_ctx_create(&so, &srv_ctx);
    if (rc < 0)
        return rc;
    struct tls_client_options co = {.insecure = true}; /* our own self-signed server */
    return tls_client_ctx_create(&co, &cli_ctx);
}

int main(int argc, char **argv)
{
    struct bench_args a;
    if (parse_args(argc, argv, &a) < 0) {
        usage(stderr);
        return 2;
    }
    if (!tls_crypto_is_boringssl()) {
        fprintf(stderr, "hd-bench-stream: libcrypto is not BoringSSL\n");
        return 1;
    }
    int rc = contexts_create();
    if (rc < 0) {
        fprintf(stderr, "hd-bench-stream: TLS contexts: %s\n", strerror(-rc));
        return 1;
    }
    printf("# hd-bench-stream: name value unit\n");
    double small_ns = 0, large_ns = 0;
    if (a.only == NULL || strcmp(a.only, "aead") == 0) {
        rc = aead_floor(TLS_SUITE_AES_128_GCM_SHA256, &small_ns, &large_ns);
        if (rc < 0) {
            fprintf(stderr, "hd-bench-stream: AEAD floor: %s\n", strerror(-rc));
            return 1;
        }
        figure("", "aead_seal_open_1400_ns", small_ns, "ns");
        figure("", "aead_seal_open_1400_ns_per_kib", small_ns * 1024.0 / BENCH_FRAME_SMALL,
               "ns/KiB");
        figure("", "aead_seal_open_16k_ns_per_kib", large_ns * 1024.0 / BENCH_FRAME_LARGE,
               "ns/KiB");
    }
    struct bench_result results[BENCH_MODES_COUNT];
    bool done[BENCH_MODES_COUNT] = {0};
    uint16_t suite = 0;
    int status = 0;
    for (size_t i = 0; i < BENCH_MODES_COUNT; i++) {
        if (a.only && strcmp(a.only, bench_modes[i].name) != 0)
            continue;
        rc = run_mode(&bench_modes[i], a.conns, a.duration_ms, &results[i]);
        if (rc < 0) {
            fprintf(stderr, "hd-bench-stream: %s failed: %s\n", bench_modes[i].name, strerror(-rc));
            status = 1;
            continue;
        }
        done[i] = true;
        if (run.cli_suite)
            suite = run.cli_suite;
        report_mode(&bench_modes[i], &results[i]);
    }
    summary(results, done, small_ns, large_ns, a.conns, a.duration_ms, suite);
    if (suite && suite != TLS_SUITE_AES_128_GCM_SHA256)
        printf("# note: the floor is AES-128-GCM but the connections negotiated %s\n",
               suite_name(suite));
    tls_ctx_destroy(srv_ctx);
    tls_ctx_destroy(cli_ctx);
    return status;
}
