/* ktls_layer_test: kTLS through our own tls/ layer, inside the test VM (run_vm_test.sh --smp 2),
 * since the host may lack the tls ULP. A 2-shard runtime runs a TLS server (self-signed) and our
 * TLS clients on 127.0.0.1, in phases: 64 MiB each way over 4 kTLS connections (every byte
 * checked, FNV-1a printed) ended by close_notify, shard 0 receiving through its buffer ring and
 * shard 1 without one; openssl s_client making our kTLS server take AES-256-GCM and
 * ChaCha20-Poly1305; our kTLS client against openssl s_server, whose NewSessionTickets must stay
 * out of the data; a userspace client whose first 1 MiB rides with its Finished (the server
 * opens those records itself, then hands over to the kernel at the right sequence number); a
 * KeyUpdate arriving on kTLS RX and one asked for on kTLS TX, which Linux 6.1 cannot follow: both
 * must end cleanly with a logged reason. Then /proc/net/tls_stat must show the kernel did it.
 * Threads: the runtime's two shards run our connections (each end is touched by its shard only);
 * a driver thread starts phases through an atomic the shards poll, talks to the openssl peers
 * over pipes and stops the runtime; main checks the results after the runtime is joined. stderr
 * is teed through a pipe thread (to find the logged close reasons). Prints `ok <name>` /
 * `FAIL <name>: why`; exits 1 if a check failed. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "tls.h"
#include "tls_keys.h"

#define LT_SHARDS          2
#define LT_BULK_BYTES      (16ull << 20) /* x 4 connections = 64 MiB each way */
#define LT_EARLY_BYTES     (1ull << 20)  /* queued before the handshake: rides with Finished */
#define LT_SMALL_BYTES     16ull         /* enough to know the other side is in kTLS mode */
#define LT_PIPE_BYTES      (16ull << 10) /* s_client: well inside a pipe's 64 KiB, no deadlock */
#define LT_EXTERNAL_WAIT_S 30            /* an openssl peer that hangs fails its check */
#define LT_CHUNK           (60u * 1024u) /* fits the 64 KiB frame class */
#define LT_PHASE_TIMEOUT_S 90            /* a stuck phase fails, well inside the VM's timeout */
#define LT_POLL_MS         5
#define LT_MAGIC           0x6b746c73u    /* "ktls" */
#define LT_LOG_MAX         (256u * 1024u) /* ~60 lines are logged; the copy keeps the first */
#define LT_SERVERS_MAX     16

enum lt_phase { LT_IDLE, LT_BULK, LT_SUITES, LT_TICKETS, LT_EARLY, LT_KU_IN, LT_KU_OUT, LT_DONE };
enum lt_action { LT_CLOSE_NOTIFY, LT_KEY_UPDATE };

/* One client per row; the server learns the row from the header the client sends first. */
struct lt_spec {
    enum lt_phase phase;
    unsigned shard;
    bool ktls_disable; /* the client stays in userspace (the server still goes kTLS) */
    uint64_t up, down; /* stream bytes client -> server, server -> client */
    enum lt_action action;
    const char *suite; /* set: the client is `openssl s_client -ciphersuites suite` instead */
    bool s_server;     /* the server is `openssl s_server` (it sends NewSessionTickets) */
};
#define LT_ROW(ph, sh, user, bytes, act)                                                           \
    {                                                                                              \
        .phase = ph, .shard = sh, .ktls_disable = user, .up = bytes, .down = bytes, .action = act  \
    }
static const struct lt_spec lt_specs[] = {
    LT_ROW(LT_BULK, 0, false, LT_BULK_BYTES, LT_CLOSE_NOTIFY),
    LT_ROW(LT_BULK, 1, false, LT_BULK_BYTES, LT_CLOSE_NOTIFY),
    LT_ROW(LT_BULK, 0, false, LT_BULK_BYTES, LT_CLOSE_NOTIFY),
    LT_ROW(LT_BULK, 1, false, LT_BULK_BYTES, LT_CLOSE_NOTIFY),
    /* BoringSSL offers no TLS 1.3 suite choice: OpenSSL's client makes our server take these. */
    {.phase = LT_SUITES,
     .ktls_disable = true,
     .up = LT_PIPE_BYTES,
     .down = LT_PIPE_BYTES,
     .action = LT_CLOSE_NOTIFY,
     .suite = "TLS_AES_256_GCM_SHA384"},
    {.phase = LT_SUITES,
     .ktls_disable = true,
     .up = LT_PIPE_BYTES,
     .down = LT_PIPE_BYTES,
     .action = LT_CLOSE_NOTIFY,
     .suite = "TLS_CHACHA20_POLY1305_SHA256"},
    /* Our kTLS client against OpenSSL's server: its NewSessionTickets must not become data. */
    {.phase = LT_TICKETS,
     .shard = 1,
     .up = LT_PIPE_BYTES,
     .down = LT_PIPE_BYTES,
     .action = LT_CLOSE_NOTIFY,
     .s_server = true},
    LT_ROW(LT_EARLY, 0, true, LT_EARLY_BYTES, LT_CLOSE_NOTIFY),
    LT_ROW(LT_KU_IN, 1, true, LT_SMALL_BYTES, LT_KEY_UPDATE),
    LT_ROW(LT_KU_OUT, 0, false, LT_SMALL_BYTES, LT_KEY_UPDATE),
};
#define LT_CLIENTS HD_ARRAY_SIZE(lt_specs)
_Static_assert(LT_CLIENTS <= LT_SERVERS_MAX, "one server end per client");

struct lt_header {
    uint32_t magic, id;
    uint64_t up, down;
};

/* One end of a connection: what it sends and what it must receive. */
struct lt_end {
    struct hd_shard *s;
    struct net_conn *c;
    int id; /* client row (servers: -1 until the header arrived) */
    uint64_t seed_out, seed_in, out_total, in_total, sent, got, fnv;
    bool paused, bad, handshaken, acted;
    int mode, reason, action_rc;
    uint16_t suite;
    uint8_t hdr[sizeof(struct lt_header)];
    size_t hdr_got;
    _Atomic bool closed;
};

static struct {
    struct tls_ctx *server_ctx, *client_ctx;
    uint16_t port, s_server_port;
    struct hd_runtime *_Atomic rt;
    _Atomic int phase;
    _Atomic unsigned listening, closes, servers_used;
    struct net_listener *listeners[LT_SHARDS];
    struct lt_end clients[LT_CLIENTS];
    struct lt_end servers[LT_SERVERS_MAX];
    struct tls_shard_stats stats[LT_SHARDS];
    int started[LT_SHARDS];
    bool ring[LT_SHARDS];
    struct hd_timer poll[LT_SHARDS];
    int timed_out_phase;
} g;

/* The server end that named client id, or NULL. */
static struct lt_end *server_of(unsigned id)
{
    for (unsigned i = 0; i < LT_SERVERS_MAX; i++)
        if (g.servers[i].id == (int)id)
            return &g.servers[i];
    return NULL;
}

static int failures;

static void lt_ok(const char *name, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void lt_fail(const char *name, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void lt_ok(const char *name, const char *fmt, ...)
{
    char why[256] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    printf("ok %s%s%s\n", name, why[0] ? " " : "", why);
}

static void lt_fail(const char *name, const char *fmt, ...)
{
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    printf("FAIL %s: %s\n", name, why);
    failures++;
}

/* The byte at position i of stream seed (recomputed by the receiver). */
static uint8_t lt_stream_byte(uint64_t seed, uint64_t i)
{
    uint64_t x = (i >> 3) * 0x9E3779B97F4A7C15ull + seed;
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 32;
    return (uint8_t)(x >> ((i & 7) * 8));
}

/* ---------------------------------------------------------------- both ends */

static void end_fill(struct lt_end *e)
{
    while (!e->paused && e->sent < e->out_total) {
        struct hd_frame *f = hd_frame_get(e->s, LT_CHUNK);
        HDT_CHECK(f != NULL);
        uint64_t left = e->out_total - e->sent;
        uint32_t n = left < LT_CHUNK ? (uint32_t)left : LT_CHUNK;
        for (uint32_t i = 0; i < n; i++)
            f->data[i] = lt_stream_byte(e->seed_out, e->sent + i);
        int rc = net_conn_send(e->c, f, 0, n);
        hd_frame_unref(e->s, f);
        if (rc < 0) { /* closing: the result checks will tell */
            e->paused = true;
            return;
        }
        e->sent += n;
    }
}

static void end_take(struct lt_end *e, const uint8_t *data, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        if (e->got + i >= e->in_total || data[i] != lt_stream_byte(e->seed_in, e->got + i))
            e->bad = true;
        e->fnv = (e->fnv ^ data[i]) * 0x100000001b3ull;
    }
    e->got += len;
}

static void end_pressure(struct net_conn *c, bool paused)
{
    struct lt_end *e = net_conn_app(c);
    e->paused = paused;
    if (!paused)
        end_fill(e);
}

static void end_closed(struct lt_end *e, int reason)
{
    e->reason = reason;
    atomic_store_explicit(&e->closed, true, memory_order_release);
    atomic_fetch_add(&g.closes, 1);
}

/* ---------------------------------------------------------------- clients */

/* Sent everything and got everything: end the way the row says. */
static void client_maybe_act(struct lt_end *k)
{
    if (k->acted || !k->handshaken || k->sent < k->out_total || k->got < k->in_total)
        return;
    k->acted = true;
    if (lt_specs[k->id].action == LT_CLOSE_NOTIFY)
        k->action_rc = tls_conn_close_notify(k->c);
    else
        k->action_rc = tls_conn_key_update(k->c, false);
}

static ssize_t client_data(struct net_conn *c, const uint8_t *data, size_t len)
{
    struct lt_end *k = net_conn_app(c);
    end_take(k, data, len);
    client_maybe_act(k);
    return (ssize_t)len;
}

static void client_pressure(struct net_conn *c, bool paused)
{
    end_pressure(c, paused);
    if (!paused)
        client_maybe_act(net_conn_app(c));
}

static void client_close(struct net_conn *c, int reason)
{
    end_closed(net_conn_app(c), reason);
}

static void client_handshake(struct net_conn *c, const struct tls_conn_info *info)
{
    struct lt_end *k = net_conn_app(c);
    k->handshaken = true;
    k->mode = (int)info->mode;
    k->suite = info->suite;
    end_fill(k);
    client_maybe_act(k);
}

static const struct net_conn_handler client_handler = {
    .on_data = client_data,
    .on_send_pressure = client_pressure,
    .on_close = client_close,
};

static void client_start(struct hd_shard *s, unsigned id)
{
    const struct lt_spec *sp = &lt_specs[id];
    struct lt_end *k = &g.clients[id];
    memset(k, 0, sizeof(*k));
    k->s = s;
    k->id = (int)id;
    k->seed_out = 2 * id + 1;
    k->seed_in = 2 * id + 2;
    k->out_total = sp->up;
    k->in_total = sp->down;
    k->fnv = 0xcbf29ce484222325ull;
    struct net_addr a;
    char text[32];
    snprintf(text, sizeof(text), "127.0.0.1:%u", sp->s_server ? g.s_server_port : g.port);
    HDT_CHECK(net_addr_parse(text, &a) == 0);
    HDT_CHECK(net_conn_connect(s, &a, 5000, &client_handler, k, NULL, &k->c) == 0);
    struct tls_conn_options o = {.on_handshake = client_handshake,
                                 .ktls_disable = sp->ktls_disable};
    HDT_CHECK(tls_conn_start(k->c, g.client_ctx, &o) == 0);
    struct lt_header h = {.magic = LT_MAGIC, .id = id, .up = sp->up, .down = sp->down};
    HDT_CHECK(net_conn_send_copy(k->c, &h, sizeof(h)) == 0);
    if (sp->phase == LT_EARLY)
        end_fill(k); /* queued before the handshake ends: leaves with the Finished */
}

/* ---------------------------------------------------------------- server */

static ssize_t server_data(struct net_conn *c, const uint8_t *data, size_t len)
{
    struct lt_end *e = net_conn_app(c);
    size_t off = 0;
    if (e->hdr_got < sizeof(e->hdr)) {
        off = sizeof(e->hdr) - e->hdr_got < len ? sizeof(e->hdr) - e->hdr_got : len;
        memcpy(e->hdr + e->hdr_got, data, off);
        e->hdr_got += off;
        if (e->hdr_got < sizeof(e->hdr))
            return (ssize_t)len;
        struct lt_header h;
        memcpy(&h, e->hdr, sizeof(h));
        if (h.magic != LT_MAGIC || h.id >= LT_CLIENTS)
            return -EPROTO;
        e->id = (int)h.id;
        e->seed_in = 2 * h.id + 1;
        e->seed_out = 2 * h.id + 2;
        e->in_total = h.up;
        e->out_total = h.down;
        end_fill(e);
    }
    end_take(e, data + off, len - off);
    return (ssize_t)len;
}

static void server_close(struct net_conn *c, int reason)
{
    end_closed(net_conn_app(c), reason);
}

static void server_handshake(struct net_conn *c, const struct tls_conn_info *info)
{
    struct lt_end *e = net_conn_app(c);
    e->handshaken = true;
    e->mode = (int)info->mode;
    e->suite = info->suite;
}

static const struct net_conn_handler server_handler = {
    .on_data = server_data,
    .on_send_pressure = end_pressure,
    .on_close = server_close,
};

static void server_accept(struct net_listener *l, int fd, const struct net_addr *peer, void *arg)
{
    (void)peer, (void)arg;
    unsigned i = atomic_fetch_add(&g.servers_used, 1);
    HDT_CHECK(i < LT_SERVERS_MAX);
    struct lt_end *e = &g.servers[i];
    e->s = net_listener_shard(l);
    e->id = -1;
    e->fnv = 0xcbf29ce484222325ull;
    HDT_CHECK(net_conn_adopt(e->s, fd, &server_handler, e, NULL, &e->c) == 0);
    struct tls_conn_options o = {.on_handshake = server_handshake};
    HDT_CHECK(tls_conn_start(e->c, g.server_ctx, &o) == 0);
}

/* ---------------------------------------------------------------- shards and driver */

static void poll_fired(struct hd_timer *t)
{
    struct hd_shard *s = hd_shard_current();
    unsigned id = hd_shard_id(s);
    int phase = atomic_load(&g.phase);
    if (phase != g.started[id]) {
        g.started[id] = phase;
        for (unsigned i = 0; i < LT_CLIENTS; i++)
            if ((int)lt_specs[i].phase == phase && lt_specs[i].shard == id && !lt_specs[i].suite)
                client_start(s, i);
    }
    if (phase != LT_DONE)
        hd_timer_start(s, t, LT_POLL_MS);
}

static void body(struct hd_shard *s, void *arg)
{
    (void)arg;
    unsigned id = hd_shard_id(s);
    struct net_addr a;
    char text[32];
    snprintf(text, sizeof(text), "127.0.0.1:%u", g.port);
    HDT_CHECK(net_addr_parse(text, &a) == 0);
    HDT_CHECK(net_listener_start(s, &a, NULL, server_accept, NULL, &g.listeners[id]) == 0);
    hd_timer_init(&g.poll[id], poll_fired);
    hd_timer_start(s, &g.poll[id], LT_POLL_MS);
    atomic_store(&g.rt, hd_shard_runtime(s));
    atomic_fetch_add(&g.listening, 1);
}

/* Shard 1 receives without a buffer ring (one recv or recvmsg at a time into a pool frame), so
 * both of net's receive paths carry kTLS. */
static int shard_init(struct hd_shard *s)
{
    struct net_shard_options no = {.no_buf_ring = hd_shard_id(s) == 1};
    int rc = net_shard_init(s, &no);
    if (rc == 0)
        g.ring[hd_shard_id(s)] = net_shard_uses_buf_ring(s);
    return rc < 0 ? rc : tls_shard_init(s, NULL);
}

static void shard_stop(struct hd_shard *s)
{
    unsigned id = hd_shard_id(s);
    g.stats[id] = *tls_shard_stats(s);
    hd_timer_stop(s, &g.poll[id]);
    if (g.listeners[id])
        net_listener_stop(g.listeners[id]);
    g.listeners[id] = NULL;
    net_shard_close_all(s, 0);
}

static void shard_fini(struct hd_shard *s)
{
    tls_shard_fini(s);
    net_shard_fini(s);
}

/* Ends of this phase: its clients, and the servers that named one of them. */
static unsigned phase_closed(int phase)
{
    unsigned n = 0;
    for (unsigned i = 0; i < LT_CLIENTS; i++)
        if ((int)lt_specs[i].phase == phase &&
            atomic_load_explicit(&g.clients[i].closed, memory_order_acquire))
            n++;
    for (unsigned i = 0; i < LT_SERVERS_MAX; i++) {
        struct lt_end *e = &g.servers[i];
        if (atomic_load_explicit(&e->closed, memory_order_acquire) && e->id >= 0 &&
            (int)lt_specs[e->id].phase == phase)
            n++;
    }
    return n;
}

extern char **environ;

static bool fd_write_all(int fd, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w <= 0)
            return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

/* Waits at most LT_EXTERNAL_WAIT_S for pid; returns its exit status, or -1 (killed). */
static int child_wait(pid_t pid)
{
    int st;
    for (int i = 0; i < LT_EXTERNAL_WAIT_S * 100; i++) {
        if (waitpid(pid, &st, WNOHANG) == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        usleep(10000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    return -1;
}

/* Start argv[0] from PATH with stdin / stdout on pipes (in_w, out_r; NULL: none) and stderr
 * to /dev/null. Returns the PID, or -errno. */
static pid_t spawn_piped(char *const argv[], int *in_w, int *out_r)
{
    int in[2] = {-1, -1}, out[2] = {-1, -1};
    if ((in_w && pipe2(in, O_CLOEXEC) < 0) || (out_r && pipe2(out, O_CLOEXEC) < 0))
        return -errno;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (in_w)
        posix_spawn_file_actions_adddup2(&fa, in[0], STDIN_FILENO);
    if (out_r)
        posix_spawn_file_actions_adddup2(&fa, out[1], STDOUT_FILENO);
    posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    for (int i = 0; i < 2; i++) {
        if (in_w && (i == 0 || rc != 0))
            close(in[i]);
        if (out_r && (i == 1 || rc != 0))
            close(out[i]);
    }
    if (rc != 0)
        return -rc;
    if (in_w)
        *in_w = in[1];
    if (out_r)
        *out_r = out[0];
    return pid;
}

/* Read from fd into e (as its downstream) until e->in_total bytes or a quiet period. */
static void pipe_take(int fd, struct lt_end *e, uint64_t skip)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    while (e->got < e->in_total && poll(&p, 1, LT_EXTERNAL_WAIT_S * 1000) == 1) {
        uint8_t chunk[4096];
        ssize_t n = read(fd, chunk, sizeof(chunk));
        if (n <= 0)
            return;
        size_t drop = skip < (uint64_t)n ? (size_t)skip : (size_t)n;
        skip -= drop;
        end_take(e, chunk + drop, (size_t)n - drop);
    }
}

/* The bytes e sends: its stream, after a header when hdr is set. Returns the length. */
static size_t stream_fill(uint8_t *buf, const struct lt_end *e, const struct lt_header *hdr)
{
    size_t off = 0;
    if (hdr) {
        memcpy(buf, hdr, sizeof(*hdr));
        off = sizeof(*hdr);
    }
    for (uint64_t i = 0; i < e->out_total; i++)
        buf[off + i] = lt_stream_byte(e->seed_out, i);
    return off + e->out_total;
}

static uint8_t pipe_buf[sizeof(struct lt_header) + LT_PIPE_BYTES];

static void end_external(struct lt_end *e, unsigned id, bool client)
{
    memset(e, 0, sizeof(*e));
    e->id = (int)id;
    e->seed_out = client ? 2 * id + 1 : 2 * id + 2;
    e->seed_in = client ? 2 * id + 2 : 2 * id + 1;
    e->out_total = client ? lt_specs[id].up : lt_specs[id].down;
    e->in_total = client ? lt_specs[id].down : lt_specs[id].up;
    e->fnv = 0xcbf29ce484222325ull;
    e->reason = -1;
    e->mode = TLS_MODE_USERSPACE; /* OpenSSL's own records */
}

static void external_done(struct lt_end *e, pid_t pid)
{
    e->reason = pid < 0 ? (int)pid : child_wait(pid); /* 0: it ended cleanly */
    atomic_store_explicit(&e->closed, true, memory_order_release);
    atomic_fetch_add(&g.closes, 1);
}

/* Driver thread: one row's client is openssl s_client. stdin carries the header and the
 * upstream, stdout the downstream; closing stdin makes it send close_notify and exit. */
static void s_client_run(unsigned id)
{
    struct lt_end *k = &g.clients[id];
    end_external(k, id, true);
    char port[32];
    snprintf(port, sizeof(port), "127.0.0.1:%u", g.port);
    char *argv[] = {"openssl",
                    "s_client",
                    "-connect",
                    port,
                    "-tls1_3",
                    "-ciphersuites",
                    (char *)lt_specs[id].suite,
                    "-quiet",
                    "-no_ign_eof",
                    "-nocommands",
                    NULL};
    int in_w, out_r;
    pid_t pid = spawn_piped(argv, &in_w, &out_r);
    if (pid > 0) {
        struct lt_header h = {.magic = LT_MAGIC, .id = id, .up = k->out_total, .down = k->in_total};
        k->handshaken = fd_write_all(in_w, pipe_buf, stream_fill(pipe_buf, k, &h));
        k->sent = k->handshaken ? k->out_total : 0;
        pipe_take(out_r, k, 0);
        close(in_w); /* EOF: s_client sends close_notify and exits */
        close(out_r);
    }
    external_done(k, pid);
}

#define LT_CERT "/tmp/ktls_layer_cert.pem"
#define LT_KEY  "/tmp/ktls_layer_key.pem"

/* A loopback port nobody uses now, or 0. */
static uint16_t free_port(void)
{
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    uint16_t port = 0;
    if (l >= 0 && bind(l, (struct sockaddr *)&a, alen) == 0 &&
        getsockname(l, (struct sockaddr *)&a, &alen) == 0)
        port = ntohs(a.sin_port);
    if (l >= 0)
        close(l);
    return port;
}

/* Something listens on the port when we cannot bind it (no connection is made: s_server
 * -naccept 1 serves exactly one). */
static bool port_taken(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {
        .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    bool taken = fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 && errno == EADDRINUSE;
    if (fd >= 0)
        close(fd);
    return taken;
}

static struct {
    pid_t pid;
    int in_w, out_r;
} ss;

/* Driver thread, before the row's phase: a certificate, then openssl s_server listening. */
static void s_server_start(unsigned id)
{
    unsigned slot = atomic_fetch_add(&g.servers_used, 1);
    HDT_CHECK(slot < LT_SERVERS_MAX);
    end_external(&g.servers[slot], id, false);
    char *req[] = {
        "openssl", "req",     "-x509", "-newkey", "ec",    "-pkeyopt", "ec_paramgen_curve:P-256",
        "-nodes",  "-keyout", LT_KEY,  "-out",    LT_CERT, "-subj",    "/CN=127.0.0.1",
        "-days",   "2",       NULL};
    pid_t pid = spawn_piped(req, NULL, NULL);
    ss.pid = -ENOENT;
    g.s_server_port = free_port();
    if (pid < 0 || child_wait(pid) != 0 || g.s_server_port == 0)
        return;
    char port[32];
    snprintf(port, sizeof(port), "127.0.0.1:%u", g.s_server_port);
    char *argv[] = {"openssl", "s_server", "-accept", port,       "-cert", LT_CERT, "-key",
                    LT_KEY,    "-tls1_3",  "-quiet",  "-naccept", "1",     NULL};
    ss.pid = spawn_piped(argv, &ss.in_w, &ss.out_r);
    for (int i = 0; ss.pid > 0 && i < LT_EXTERNAL_WAIT_S * 100 && !port_taken(g.s_server_port); i++)
        usleep(10000);
}

/* Driver thread, once our client is on its way: check its upstream, send the downstream, wait
 * for s_server to end (our client's close_notify ends it). */
static void s_server_serve(unsigned id)
{
    struct lt_end *e = server_of(id);
    if (ss.pid > 0) {
        pipe_take(ss.out_r, e, sizeof(struct lt_header));
        e->handshaken = fd_write_all(ss.in_w, pipe_buf, stream_fill(pipe_buf, e, NULL));
        e->sent = e->handshaken ? e->out_total : 0;
    }
    external_done(e, ss.pid);
    if (ss.pid > 0) {
        close(ss.in_w);
        close(ss.out_r);
    }
}

static void *driver_main(void *arg)
{
    (void)arg;
    for (int i = 0; i < 1000 && atomic_load(&g.listening) < LT_SHARDS; i++)
        usleep(10000);
    for (int phase = LT_BULK; phase < LT_DONE && atomic_load(&g.listening) == LT_SHARDS; phase++) {
        unsigned want = 0;
        for (unsigned i = 0; i < LT_CLIENTS; i++)
            want += (int)lt_specs[i].phase == phase ? 2 : 0;
        uint64_t t0 = hd_clock_ns();
        for (unsigned i = 0; i < LT_CLIENTS; i++)
            if ((int)lt_specs[i].phase == phase && lt_specs[i].s_server)
                s_server_start(i);
        atomic_store(&g.phase, phase);
        for (unsigned i = 0; i < LT_CLIENTS; i++) {
            if ((int)lt_specs[i].phase != phase)
                continue;
            if (lt_specs[i].suite)
                s_client_run(i);
            if (lt_specs[i].s_server)
                s_server_serve(i);
        }
        while (phase_closed(phase) < want &&
               hd_clock_ns() - t0 < (uint64_t)LT_PHASE_TIMEOUT_S * 1000000000ull)
            usleep(10000);
        printf("phase %d: %.2f s\n", phase, (double)(hd_clock_ns() - t0) / 1e9);
        if (phase_closed(phase) < want) {
            g.timed_out_phase = phase;
            break;
        }
    }
    atomic_store(&g.phase, LT_DONE);
    while (atomic_load(&g.rt) == NULL)
        usleep(1000);
    hd_runtime_stop(atomic_load(&g.rt));
    return NULL;
}

/* ---------------------------------------------------------------- checks */

struct lt_tls_stat {
    long long tx_sw, rx_sw, curr_tx_sw, curr_rx_sw;
};

static int tls_stat_read(struct lt_tls_stat *st)
{
    memset(st, 0, sizeof(*st));
    FILE *f = fopen("/proc/net/tls_stat", "r");
    if (f == NULL)
        return -errno;
    char name[64];
    long long v;
    while (fscanf(f, "%63s %lld", name, &v) == 2) {
        if (strcmp(name, "TlsTxSw") == 0)
            st->tx_sw = v;
        else if (strcmp(name, "TlsRxSw") == 0)
            st->rx_sw = v;
        else if (strcmp(name, "TlsCurrTxSw") == 0)
            st->curr_tx_sw = v;
        else if (strcmp(name, "TlsCurrRxSw") == 0)
            st->curr_rx_sw = v;
    }
    fclose(f);
    return 0;
}

static struct tls_shard_stats stats_sum(void)
{
    struct tls_shard_stats t = {0};
    for (unsigned i = 0; i < LT_SHARDS; i++) {
        const struct tls_shard_stats *s = &g.stats[i];
        t.conns_ktls += s->conns_ktls;
        t.conns_userspace += s->conns_userspace;
        t.ktls_failed += s->ktls_failed;
        t.close_notify_in += s->close_notify_in;
        t.close_notify_out += s->close_notify_out;
        t.key_updates_in += s->key_updates_in;
        t.ktls_rekey_closes += s->ktls_rekey_closes;
        t.early_bytes += s->early_bytes;
        t.record_errors += s->record_errors;
        t.handshakes_failed += s->handshakes_failed;
    }
    return t;
}

static void check_modes(const struct tls_shard_stats *t)
{
    unsigned want_ktls = 0, want_user = 0;
    for (unsigned i = 0; i < LT_CLIENTS; i++) {
        const struct lt_spec *sp = &lt_specs[i];
        const struct lt_end *k = &g.clients[i], *e = server_of(i);
        /* Ours: the server (unless s_server) in kTLS, the client (unless s_client) as asked. */
        int want = sp->ktls_disable || sp->suite ? TLS_MODE_USERSPACE : TLS_MODE_KTLS;
        int want_server = sp->s_server ? TLS_MODE_USERSPACE : TLS_MODE_KTLS;
        if (!k->handshaken || k->mode != want || !e || !e->handshaken || e->mode != want_server) {
            lt_fail("handshake_ktls", "client %u: handshaken %d mode %s (want %s), server %s %s", i,
                    k->handshaken, tls_mode_name(k->mode), tls_mode_name(want),
                    e ? "mode" : "missing", e ? tls_mode_name(e->mode) : "");
            return;
        }
        want_ktls += (want == TLS_MODE_KTLS) + !sp->s_server;
        want_user += want == TLS_MODE_USERSPACE && !sp->suite; /* ours only */
    }
    if (t->conns_ktls != want_ktls || t->conns_userspace != want_user || t->ktls_failed) {
        lt_fail("handshake_ktls", "conns_ktls %llu (want %u) userspace %llu (want %u) failed %llu",
                (unsigned long long)t->conns_ktls, want_ktls,
                (unsigned long long)t->conns_userspace, want_user,
                (unsigned long long)t->ktls_failed);
        return;
    }
    lt_ok("handshake_ktls", "(%u kTLS ends, %u userspace clients, suite 0x%04x)", want_ktls,
          want_user, g.clients[0].suite);
    if (!g.ring[0] || g.ring[1] || !g.stats[0].conns_ktls || !g.stats[1].conns_ktls)
        lt_fail("receive_paths", "buffer ring on shard 0 %d, 1 %d; kTLS ends %llu / %llu",
                g.ring[0], g.ring[1], (unsigned long long)g.stats[0].conns_ktls,
                (unsigned long long)g.stats[1].conns_ktls);
    else
        lt_ok("receive_paths", "(kTLS ends: %llu on the ring shard, %llu on the plain-recv one)",
              (unsigned long long)g.stats[0].conns_ktls, (unsigned long long)g.stats[1].conns_ktls);
}

/* Both directions of client id arrived whole and unchanged. */
static bool streams_ok(unsigned id, const char *name)
{
    const struct lt_end *k = &g.clients[id], *e = server_of(id);
    if (!e || k->got != k->in_total || k->bad || e->got != e->in_total || e->bad) {
        lt_fail(name, "client %u got %llu/%llu%s, server got %llu/%llu%s", id,
                (unsigned long long)k->got, (unsigned long long)k->in_total,
                k->bad ? " (corrupt)" : "", e ? (unsigned long long)e->got : 0ull,
                e ? (unsigned long long)e->in_total : 0ull, e && e->bad ? " (corrupt)" : "");
        return false;
    }
    return true;
}

static bool reasons_are(unsigned id, const char *name, int client_rc, int client, int server)
{
    const struct lt_end *k = &g.clients[id], *e = server_of(id);
    if (k->action_rc != client_rc || k->reason != client || !e || e->reason != server) {
        lt_fail(name,
                "client %u: call %d (want %d), closed %d (want %d), server closed %d (want %d)", id,
                k->action_rc, client_rc, k->reason, client, e ? e->reason : 1, server);
        return false;
    }
    return true;
}

/* Each server end took the suite its openssl peer offered, in kTLS, and ended clean. */
static void check_suites(void)
{
    char seen[128] = "";
    for (unsigned i = 0; i < LT_CLIENTS; i++) {
        const struct lt_spec *sp = &lt_specs[i];
        if (!sp->suite)
            continue;
        const struct lt_end *e = server_of(i);
        uint16_t want = strstr(sp->suite, "CHACHA") ? 0x1303 : 0x1302;
        if (!streams_ok(i, "suites"))
            return;
        if (!e || e->suite != want || e->mode != TLS_MODE_KTLS || e->reason != 0 ||
            g.clients[i].reason != 0) {
            lt_fail("suites", "%s: server suite 0x%04x mode %s closed %d, s_client exit %d",
                    sp->suite, e ? e->suite : 0, e ? tls_mode_name(e->mode) : "-",
                    e ? e->reason : 1, g.clients[i].reason);
            return;
        }
        snprintf(seen + strlen(seen), sizeof(seen) - strlen(seen), " 0x%04x", want);
    }
    lt_ok("suites", "(kTLS server with openssl s_client:%s; our own clients 0x%04x)", seen,
          g.clients[0].suite);
}

/* Our kTLS client took OpenSSL's NewSessionTickets as records, not data, and ended clean. */
static void check_tickets(void)
{
    for (unsigned i = 0; i < LT_CLIENTS; i++)
        if (lt_specs[i].s_server && streams_ok(i, "tickets_not_data"))
            lt_ok("tickets_not_data",
                  "(kTLS client vs openssl s_server: %llu bytes each way intact)",
                  (unsigned long long)g.clients[i].got);
}

static void check_bulk(void)
{
    uint64_t up = 0, down = 0, fnv_up = 0, fnv_down = 0;
    for (unsigned i = 0; i < LT_CLIENTS; i++) {
        if (lt_specs[i].phase != LT_BULK)
            continue;
        if (!streams_ok(i, "bulk_each_way"))
            return;
        up += g.clients[i].out_total;
        down += g.clients[i].in_total;
        fnv_up ^= server_of(i)->fnv;
        fnv_down ^= g.clients[i].fnv;
    }
    lt_ok("bulk_each_way", "(%llu MiB up, %llu MiB down, fnv1a xor %016llx / %016llx)",
          (unsigned long long)(up >> 20), (unsigned long long)(down >> 20),
          (unsigned long long)fnv_up, (unsigned long long)fnv_down);
}

static void check_close_notify(const struct tls_shard_stats *t)
{
    unsigned n = 0, ours = 0;
    for (unsigned i = 0; i < LT_CLIENTS; i++) {
        if (lt_specs[i].action != LT_CLOSE_NOTIFY)
            continue;
        if (!reasons_are(i, "close_notify", 0, 0, 0))
            return;
        n++;
        ours += !lt_specs[i].s_server;
    }
    /* Our servers of those rows, the KU_OUT server and the KU_IN client each read one. */
    if (t->close_notify_in < ours + 2) {
        lt_fail("close_notify", "close_notify_in %llu, want >= %u",
                (unsigned long long)t->close_notify_in, ours + 2);
        return;
    }
    lt_ok("close_notify", "(%u connections ended clean; in %llu, out %llu)", n,
          (unsigned long long)t->close_notify_in, (unsigned long long)t->close_notify_out);
}

static void check_early(const struct tls_shard_stats *t)
{
    for (unsigned i = 0; i < LT_CLIENTS; i++) {
        if (lt_specs[i].phase != LT_EARLY)
            continue;
        if (!streams_ok(i, "early_records_handoff"))
            return;
    }
    if (t->early_bytes == 0) {
        lt_fail("early_records_handoff", "no record bytes arrived before the kTLS switch");
        return;
    }
    lt_ok("early_records_handoff", "(%llu bytes opened in userspace before the kernel took over)",
          (unsigned long long)t->early_bytes);
}

static bool log_has(const char *log, const char *needle, const char *name)
{
    if (strstr(log, needle))
        return true;
    lt_fail(name, "no log line with \"%s\"", needle);
    return false;
}

static void check_key_updates(const struct tls_shard_stats *t, const char *log)
{
    for (unsigned i = 0; i < LT_CLIENTS; i++) {
        if (lt_specs[i].phase == LT_KU_IN) {
            /* The userspace client rekeys; the kTLS server cannot follow: close_notify, and
             * the client sees a clean end. */
            if (reasons_are(i, "key_update_in", 0, 0, -EOPNOTSUPP) && streams_ok(i, "ku_in") &&
                log_has(log, "closing: peer KeyUpdate cannot be followed", "key_update_in"))
                lt_ok("key_update_in", "(server on_close: %s)", strerror(EOPNOTSUPP));
        }
        if (lt_specs[i].phase == LT_KU_OUT) {
            if (reasons_are(i, "key_update_out", -EOPNOTSUPP, -EOPNOTSUPP, 0) &&
                streams_ok(i, "ku_out") &&
                log_has(log, "closing: KeyUpdate requested: kTLS cannot rekey", "key_update_out"))
                lt_ok("key_update_out", "(client on_close: %s)", strerror(EOPNOTSUPP));
        }
    }
    if (t->ktls_rekey_closes != 2 || t->key_updates_in < 1)
        lt_fail("key_update_stats", "ktls_rekey_closes %llu (want 2), key_updates_in %llu",
                (unsigned long long)t->ktls_rekey_closes, (unsigned long long)t->key_updates_in);
}

static void check_tls_stat(const struct lt_tls_stat *a, const struct lt_tls_stat *b,
                           const struct tls_shard_stats *t)
{
    long long want = (long long)t->conns_ktls;
    if (b->tx_sw - a->tx_sw < want || b->rx_sw - a->rx_sw < want) {
        lt_fail("tls_stat", "TlsTxSw %lld->%lld TlsRxSw %lld->%lld, want +%lld each", a->tx_sw,
                b->tx_sw, a->rx_sw, b->rx_sw, want);
        return;
    }
    lt_ok("tls_stat",
          "(TlsTxSw %lld->%lld, TlsRxSw %lld->%lld, TlsCurrTxSw %lld, TlsCurrRxSw %lld)", a->tx_sw,
          b->tx_sw, a->rx_sw, b->rx_sw, b->curr_tx_sw, b->curr_rx_sw);
}

/* stderr (hd_log's lines, sanitizer reports) goes through a pipe: a thread copies it to the
 * real stderr and keeps a copy to look for the logged close reasons. */
static struct {
    int real, pipe_r;
    pthread_t pump;
    char buf[LT_LOG_MAX];
    size_t len;
    bool pumping;
} lg;

static void *log_pump(void *arg)
{
    (void)arg;
    char chunk[4096];
    ssize_t n;
    while ((n = read(lg.pipe_r, chunk, sizeof(chunk))) > 0) {
        if (write(lg.real, chunk, (size_t)n) < 0) { /* the console is gone: keep the copy */
        }
        size_t k =
            (size_t)n < sizeof(lg.buf) - 1 - lg.len ? (size_t)n : sizeof(lg.buf) - 1 - lg.len;
        memcpy(lg.buf + lg.len, chunk, k);
        lg.len += k;
    }
    return NULL;
}

static void log_capture(void)
{
    int p[2];
    lg.real = dup(STDERR_FILENO);
    if (lg.real < 0 || pipe2(p, O_CLOEXEC) < 0 || dup2(p[1], STDERR_FILENO) < 0) {
        perror("ktls_layer_test: log capture");
        exit(1);
    }
    close(p[1]);
    lg.pipe_r = p[0];
    HDT_CHECK(pthread_create(&lg.pump, NULL, log_pump, NULL) == 0);
    lg.pumping = true;
}

/* Back to the real stderr; returns everything logged meanwhile. */
static const char *log_finish(void)
{
    if (lg.pumping) {
        dup2(lg.real, STDERR_FILENO); /* closes the pipe's last write end: the pump sees EOF */
        pthread_join(lg.pump, NULL);
        close(lg.pipe_r);
        lg.pumping = false;
    }
    lg.buf[lg.len] = '\0';
    return lg.buf;
}

static bool setup(void)
{
    if (!tls_crypto_is_boringssl()) {
        lt_fail("setup", "BoringSSL symbols bound to another library");
        return false;
    }
    if (!tls_ktls_available()) {
        lt_fail("setup", "the kernel has no tls ULP (run this inside tests/vm/run_vm_test.sh)");
        return false;
    }
    bool rekey = tls_ktls_rekey_available();
    if (rekey) { /* the VM boots Linux 6.1: this test checks the clean close, not a rekey */
        lt_fail("setup", "the kernel can rekey kTLS: this test expects Linux 6.1 (no rekey)");
        return false;
    }
    lt_ok("rekey_probe", "(kernel refuses a second TLS_TX: KeyUpdate on kTLS closes cleanly)");
    struct tls_server_options so = {.self_signed_host = "127.0.0.1"};
    struct tls_client_options co = {.insecure = true};
    if (tls_server_ctx_create(&so, &g.server_ctx) < 0 ||
        tls_client_ctx_create(&co, &g.client_ctx) < 0) {
        lt_fail("setup", "TLS contexts");
        return false;
    }
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    if (l < 0 || bind(l, (struct sockaddr *)&a, alen) < 0 ||
        getsockname(l, (struct sockaddr *)&a, &alen) < 0) {
        lt_fail("setup", "no free port: %s", strerror(errno));
        return false;
    }
    g.port = ntohs(a.sin_port);
    close(l);
    return true;
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    log_capture();
    struct lt_tls_stat before, after;
    if (tls_stat_read(&before) < 0)
        lt_fail("tls_stat", "/proc/net/tls_stat: %s", strerror(errno));
    if (failures == 0 && setup()) {
        struct hdt_options o = {.shards = LT_SHARDS,
                                .shard_init = shard_init,
                                .shard_stop = shard_stop,
                                .shard_fini = shard_fini};
        pthread_t driver;
        HDT_CHECK(pthread_create(&driver, NULL, driver_main, NULL) == 0);
        int rc = hdt_run(&o, body, NULL, NULL);
        pthread_join(driver, NULL);
        if (rc < 0)
            lt_fail("runtime", "%s", strerror(-rc));
        if (g.timed_out_phase)
            lt_fail("phases", "phase %d did not finish in %d s", g.timed_out_phase,
                    LT_PHASE_TIMEOUT_S);
        struct tls_shard_stats t = stats_sum();
        const char *log = log_finish();
        check_modes(&t);
        check_suites();
        check_tickets();
        check_bulk();
        check_close_notify(&t);
        check_early(&t);
        check_key_updates(&t, log);
        if (t.record_errors || t.handshakes_failed)
            lt_fail("errors", "record_errors %llu, handshakes_failed %llu",
                    (unsigned long long)t.record_errors, (unsigned long long)t.handshakes_failed);
        if (tls_stat_read(&after) == 0)
            check_tls_stat(&before, &after, &t);
        tls_ctx_destroy(g.server_ctx);
        tls_ctx_destroy(g.client_ctx);
    }
    log_finish();
    printf("ktls_layer_test: %d check(s) failed\n", failures);
    return failures ? 1 : 0;
}
