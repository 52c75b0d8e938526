/* ktls_layer_peers.c: ktls_layer_test's driver thread. It starts each phase through g.phase
 * (the shards poll it), runs the openssl peers of its rows (s_client against our server, s_server
 * against our client) over pipes, waits for the phase's ends to close, then stops the runtime. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ktls_layer_impl.h"

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
        lt_end_take(e, chunk + drop, (size_t)n - drop);
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

/* A loopback port for s_server, or 0: bound with SO_REUSEADDR and never listening, and kept open
 * (the hold) until the process exits, so no other process is given it while s_server, whose
 * listener sets SO_REUSEADDR too, binds beside it. */
static uint16_t port_hold(void)
{
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    uint16_t port = 0;
    if (l >= 0 && setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == 0 &&
        bind(l, (struct sockaddr *)&a, alen) == 0 &&
        getsockname(l, (struct sockaddr *)&a, &alen) == 0)
        return ntohs(a.sin_port);
    if (l >= 0)
        close(l);
    return port;
}

/* Something listens on the port when a SO_REUSEADDR socket cannot bind it (the idle hold does
 * not stop it; no connection is made: s_server -naccept 1 serves exactly one). */
static bool port_taken(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    struct sockaddr_in a = {
        .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd >= 0)
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
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
    g.s_server_port = port_hold();
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
    struct lt_end *e = lt_server_of(id);
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

void *lt_driver_main(void *arg)
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
