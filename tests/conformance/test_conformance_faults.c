/* test_conformance_faults.c - a real hderp-server under fault injection (HD_FAULTS, see
 * include/hd/hd_fault.h: failed submissions, short sends, resets mid-frame, failed pool gets)
 * with a paced load of raw DERP client pairs on a few test threads. The server must stay up
 * (answer /derp/probe after the load), exit 0 on SIGTERM (under the debug preset: no ASan or
 * LSan report, which would fail the exit) and have injected every kind of fault; every client
 * must either get all its packets, intact and in order, or see its connection closed. A client
 * left waiting on an open connection, or given a wrong packet, fails the test. */
#define _GNU_SOURCE /* POLLRDHUP */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf_support.h"

/* The load: FAULT_THREADS test threads, each driving FAULT_PAIRS (sender, receiver) pairs in
 * FAULT_ROUNDS rounds of FAULT_BATCH packets (well under the relay's per-client queue depth). */
#define FAULT_THREADS 4
#define FAULT_PAIRS   12
#define FAULT_ROUNDS  25
#define FAULT_BATCH   8
/* Rates that close a part of the pairs and leave most to finish; the seed makes the server's
 * draws the same from run to run (the event order, and so the victims, still vary). */
#define FAULT_SPEC "HD_FAULTS=seed=7,sqe=0.01,short_send=0.05,reset=0.004,alloc=0.002"
/* A receiver's wait for a batch, in slices between which the sender is checked for a close. */
#define FAULT_WAIT_MS  5000
#define FAULT_SLICE_MS 100
/* Probes after the load: faults are still on, so one refused probe is allowed to be retried. */
#define FAULT_PROBES 20
/* Pings at the end of a pair, per client: a Pong that found no frame (an alloc fault) is skipped
 * and counted by the server (hderp_ctl_dropped; a lost Pong is a lost Ping, as in derper), so a
 * client pings again, as Tailscale's does. Every Ping lost must be one the server counted. */
#define FAULT_PING_TRIES 3

/* How a pair ended. OUT_DROPS: open to the end, some packets missing; the server must have
 * counted at least as many drops (a pool get that failed drops the packet, as under exhaustion).
 * OUT_STUCK: a login, or a Ping at the end, got neither its answer nor a close. */
enum outcome { OUT_ACTIVE, OUT_PACKETS, OUT_CLOSED, OUT_DROPS, OUT_STUCK, OUT_WRONG };

struct pair {
    struct conf_raw a, b; /* a sends to b */
    enum outcome out;
    int err;             /* OUT_STUCK / OUT_WRONG: what went wrong */
    uint32_t sent, got;  /* packets a sent, b received */
    uint32_t next;       /* the lowest sequence number b may get next */
    uint32_t pongs_lost; /* Pings at the end that went unanswered before one was answered */
};

struct worker {
    pthread_t thread;
    const struct conf_server *srv;
    struct pair pairs[FAULT_PAIRS];
};

static struct conf_server srv;

static void down(void)
{
    conf_server_down(&srv);
}

TestSuite(test_conformance_faults, .fini = down, .timeout = 240);

/* The server closed (EOF, RST or a write into a closed connection). */
static bool is_close(int rc)
{
    return rc == -ESHUTDOWN || rc == -ECONNRESET || rc == -EPIPE;
}

static bool hung_up(const struct conf_raw *r)
{
    struct pollfd p = {.fd = r->fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

static void pair_end(struct pair *p, enum outcome out, int err)
{
    p->out = out;
    p->err = err;
    conf_raw_close(&p->a);
    conf_raw_close(&p->b);
}

/* Packet seq of a pair: its number, then a pattern the receiver checks byte by byte. */
static size_t packet_make(uint8_t *buf, uint32_t seq)
{
    size_t len = 64 + (seq * 37u) % 1100u;
    memcpy(buf, &seq, sizeof(seq));
    for (size_t i = sizeof(seq); i < len; i++)
        buf[i] = (uint8_t)(seq + i);
    return len;
}

static bool packet_ok(const uint8_t *d, size_t len, uint32_t seq)
{
    uint8_t want[1200];
    return len == packet_make(want, seq) && memcmp(d, want, len) == 0;
}

static void pair_login(struct pair *p, const struct conf_server *s)
{
    p->a.fd = p->b.fd = -1; /* closable before they are opened */
    int rc = conf_raw_login(&p->b, s, NULL, NULL);
    if (rc == 0)
        rc = conf_raw_login(&p->a, s, NULL, NULL);
    if (rc != 0)
        pair_end(p, is_close(rc) ? OUT_CLOSED : OUT_STUCK, rc);
}

static void pair_send(struct pair *p)
{
    uint8_t buf[1200];
    for (int i = 0; i < FAULT_BATCH && p->out == OUT_ACTIVE; i++) {
        size_t len = packet_make(buf, p->sent);
        int rc = conf_raw_send_packet(&p->a, &p->b.kp.pub, buf, len);
        if (rc != 0)
            pair_end(p, is_close(rc) ? OUT_CLOSED : OUT_WRONG, rc);
        else
            p->sent++;
    }
}

/* Reads until the last packet sent so far arrived, one side closed, or FAULT_WAIT_MS of waiting
 * (a dropped packet: the server counts those, checked at the end). Packets must come intact, in
 * order, each at most once; one the relay dropped leaves a gap. */
static void pair_receive(struct pair *p)
{
    int64_t deadline = conf_now_ms() + FAULT_WAIT_MS;
    while (p->out == OUT_ACTIVE && p->next < p->sent && conf_now_ms() < deadline) {
        struct derp_pubkey src;
        const uint8_t *d;
        size_t len;
        uint32_t seq = UINT32_MAX;
        int rc = conf_raw_read_packet(&p->b, FAULT_SLICE_MS, &src, &d, &len);
        if (rc == 0 && len >= sizeof(seq))
            memcpy(&seq, d, sizeof(seq));
        if (rc == 0 && (memcmp(&src, &p->a.kp.pub, sizeof(src)) != 0 || seq < p->next ||
                        seq >= p->sent || !packet_ok(d, len, seq))) {
            pair_end(p, OUT_WRONG, -EBADMSG);
        } else if (rc == 0) {
            p->got++;
            p->next = seq + 1;
        } else if (is_close(rc) || (rc == -ETIMEDOUT && hung_up(&p->a))) {
            pair_end(p, OUT_CLOSED, rc); /* the sender's close lost what it had in flight */
        } else if (rc != -ETIMEDOUT) {
            pair_end(p, OUT_WRONG, rc);
        }
    }
}

/* One client's Ping at the end of its pair, tried FAULT_PING_TRIES times (each with its own
 * value, so a late Pong is not taken for the next one's): 0 or the last try's -errno. */
static int ping_tries(struct pair *p, struct conf_raw *r, uint64_t ping)
{
    int rc = -ETIMEDOUT;
    for (uint64_t t = 0; t < FAULT_PING_TRIES; t++) {
        rc = conf_raw_ping_pong(r, ping * FAULT_PING_TRIES + t, FAULT_WAIT_MS);
        if (rc != -ETIMEDOUT)
            return rc;
        p->pongs_lost++;
    }
    return rc;
}

/* The end of an open pair: both clients must still be served (a Ping gets its Pong, within
 * FAULT_PING_TRIES) or see a close. A connection the server dropped without closing its socket
 * fails here. */
static void pair_finish(struct pair *p, uint64_t ping)
{
    if (p->out != OUT_ACTIVE)
        return;
    int rc = ping_tries(p, &p->a, ping);
    if (rc == 0)
        rc = ping_tries(p, &p->b, ping);
    if (rc != 0)
        pair_end(p, is_close(rc) ? OUT_CLOSED : OUT_STUCK, rc);
    else
        pair_end(p, p->got == p->sent ? OUT_PACKETS : OUT_DROPS, 0);
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    for (int i = 0; i < FAULT_PAIRS; i++)
        pair_login(&w->pairs[i], w->srv);
    for (int r = 0; r < FAULT_ROUNDS; r++) {
        for (int i = 0; i < FAULT_PAIRS; i++)
            pair_send(&w->pairs[i]);
        for (int i = 0; i < FAULT_PAIRS; i++)
            pair_receive(&w->pairs[i]);
    }
    for (int i = 0; i < FAULT_PAIRS; i++)
        pair_finish(&w->pairs[i], (uint64_t)i);
    return NULL;
}

/* Open fds of the server (/proc/PID/fd), or -errno. */
static int fds_open(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    if (d == NULL)
        return -errno;
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* Polls until the server holds no more fds than at start (every connection's socket closed):
 * the count last seen. */
static int fds_settle(pid_t pid, int baseline)
{
    int64_t deadline = conf_now_ms() + FAULT_WAIT_MS;
    int n;
    while ((n = fds_open(pid)) > baseline && conf_now_ms() < deadline)
        conf_sleep_ms(FAULT_SLICE_MS);
    return n;
}

/* /derp/probe answers 200 (TLS mode: the plain port redirects, and /generate_204 is its probe). */
static bool probe_ok(const struct conf_server *s)
{
    const char *req = s->tls ? "GET /generate_204 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                             : "GET /derp/probe HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    const char *want = s->tls ? "HTTP/1.1 204" : "HTTP/1.1 200";
    char resp[4096];
    for (int i = 0; i < FAULT_PROBES; i++) {
        ssize_t n = conf_http(s, req, resp, sizeof(resp));
        if (n > 12 && strncmp(resp, want, 12) == 0)
            return true;
    }
    return false;
}

/* The counts of the server's last words: "faults injected: sqe=N short_send=N reset=N alloc=N". */
static int injected(const char *dir, unsigned long long n[4])
{
    char path[400], line[512];
    snprintf(path, sizeof(path), "%s/server.log", dir);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -errno;
    int rc = -ENOENT;
    while (fgets(line, sizeof(line), f)) {
        const char *p = strstr(line, "faults injected: ");
        if (p && sscanf(p, "faults injected: sqe=%llu short_send=%llu reset=%llu alloc=%llu", &n[0],
                        &n[1], &n[2], &n[3]) == 4)
            rc = 0;
        if (strstr(line, "runtime error:") || strstr(line, "Sanitizer"))
            rc = -EFAULT; /* UBSan that did not halt, or any sanitizer report */
    }
    fclose(f);
    return rc;
}

/* Clients per outcome into n; returns the packets missing on connections open to the end, and
 * the Pings answered only on a later try in *pongs_lost. */
static uint64_t count(const struct worker *w, unsigned *n, uint64_t *pongs_lost)
{
    uint64_t missing = 0;
    *pongs_lost = 0;
    for (int t = 0; t < FAULT_THREADS; t++) {
        for (int i = 0; i < FAULT_PAIRS; i++) {
            const struct pair *p = &w[t].pairs[i];
            n[p->out] += 2; /* both clients of the pair */
            if (p->out == OUT_PACKETS || p->out == OUT_DROPS)
                *pongs_lost += p->pongs_lost;
            if (p->out == OUT_DROPS)
                missing += p->sent - p->got;
            if (p->out == OUT_STUCK || p->out == OUT_WRONG)
                fprintf(stderr, "pair %d.%d: %s (%d, %s), got %u of %u\n", t, i,
                        p->out == OUT_STUCK ? "neither an answer nor a close" : "wrong packet",
                        p->err, strerror(-p->err), p->got, p->sent);
        }
    }
    return missing;
}

/* A counter (all its series): retried, since the faults may refuse a request too; -1 if none. */
static int64_t counted(const struct conf_server *s, const char *name)
{
    int64_t v = -1;
    for (int i = 0; i < FAULT_PROBES && conf_varz(s, name, true, &v) != 0; i++)
        v = -1;
    return v;
}

Test(test_conformance_faults, load_under_faults)
{
    const char *env[] = {FAULT_SPEC, NULL};
    CONF_OK(conf_server_start(&srv, &(struct conf_server_opts){.env = env}));
    int fds_before = fds_open(srv.pid);
    cr_assert_gt(fds_before, 0, "/proc/%d/fd: %s", (int)srv.pid, strerror(-fds_before));
    static struct worker w[FAULT_THREADS];
    for (int t = 0; t < FAULT_THREADS; t++) {
        w[t].srv = &srv;
        cr_assert_eq(pthread_create(&w[t].thread, NULL, worker_main, &w[t]), 0);
    }
    for (int t = 0; t < FAULT_THREADS; t++)
        pthread_join(w[t].thread, NULL);
    unsigned n[OUT_WRONG + 1] = {0};
    uint64_t pongs_lost;
    uint64_t missing = count(w, n, &pongs_lost);
    int64_t drops = counted(&srv, "derp_packets_dropped");
    int64_t ctl_dropped = counted(&srv, "hderp_ctl_dropped");
    fprintf(stderr,
            "faults: clients: %u got every packet, %u saw a close, %u missed %llu packets "
            "(server counted %lld drops), %u stuck, %u wrong; %llu Pings unanswered, then "
            "answered (server counted %lld control frames not sent)\n",
            n[OUT_PACKETS], n[OUT_CLOSED], n[OUT_DROPS], (unsigned long long)missing,
            (long long)drops, n[OUT_STUCK], n[OUT_WRONG], (unsigned long long)pongs_lost,
            (long long)ctl_dropped);
    cr_expect(conf_server_alive(&srv), "the server died under faults");
    cr_expect(probe_ok(&srv), "no /derp/probe answered after the load");
    int fds_after = fds_settle(srv.pid, fds_before);
    cr_expect_leq(fds_after, fds_before, "the server holds %d fds, %d before the load", fds_after,
                  fds_before);
    cr_expect_eq(n[OUT_STUCK], 0, "clients that got neither an answer nor a close");
    cr_expect_eq(n[OUT_WRONG], 0, "clients given a wrong packet");
    cr_expect_geq(drops, (int64_t)missing, "packets missing on open connections, not counted");
    cr_expect_geq(ctl_dropped, (int64_t)pongs_lost, "Pings left unanswered, not counted");
    cr_expect_gt(n[OUT_PACKETS], 0, "no client got through: the rates are too high to test");
    cr_expect_gt(n[OUT_CLOSED], 0, "no client was closed: the faults did not bite");
    CONF_OK(conf_server_stop_keep(&srv));
    unsigned long long k[4] = {0};
    CONF_OK(injected(srv.dir, k));
    fprintf(stderr, "faults injected: sqe=%llu short_send=%llu reset=%llu alloc=%llu\n", k[0], k[1],
            k[2], k[3]);
    for (int i = 0; i < 4; i++)
        cr_expect_gt(k[i], 0, "no fault of kind %d was injected", i);
    conf_dir_remove(srv.dir);
}

/* ---- TLS and WebSocket under faults: hderp-bench as the load. It gives up at the first pair
 * the server closes (most runs end in their logins: TLS handshakes, upgrades), so it runs
 * FAULT_BENCH_RUNS times against one server, and only the server is judged: it stays up, answers,
 * frees every socket, exits 0 with no sanitizer report, and injected every kind of fault into its
 * TLS (and WebSocket) paths. */
#define FAULT_BENCH_RUNS  60
#define FAULT_BENCH_PAIRS "16"
#define FAULT_BENCH_RATE  "40"  /* Mbit/s over all senders: ~3,600 packets of 1,400 B a second */
#define FAULT_BENCH_MS    60000 /* one run: 1 s warm-up, 2 s window, start-up on a busy box */

static void bench_under_faults(const char *scheme)
{
    const char *env[] = {FAULT_SPEC, NULL};
    CONF_OK(conf_server_start(&srv, &(struct conf_server_opts){.env = env, .tls = true}));
    int fds_before = fds_open(srv.pid);
    cr_assert_gt(fds_before, 0);
    char url[128], log[400];
    snprintf(url, sizeof(url), "%s://127.0.0.1:%u/derp", scheme, srv.port);
    snprintf(log, sizeof(log), "%s/bench.log", srv.dir);
    const char *argv[] = {CONF_BIN_DIR "/hderp-bench",
                          "--server",
                          url,
                          "--ca",
                          srv.cert_file,
                          "--tls-name",
                          CONF_TLS_HOSTNAME,
                          "--pairs",
                          FAULT_BENCH_PAIRS,
                          "--rate-mbps",
                          FAULT_BENCH_RATE,
                          "--warmup",
                          "1",
                          "--duration",
                          "2",
                          NULL};
    int ended = 0; /* runs that went the distance */
    for (int r = 0; r < FAULT_BENCH_RUNS && conf_server_alive(&srv); r++) {
        int status = 0;
        CONF_OK(conf_run(argv, log, FAULT_BENCH_MS, &status));
        ended += status == 0;
    }
    fprintf(stderr, "faults (%s): %d of %d hderp-bench runs went the distance (not judged)\n",
            scheme, ended, FAULT_BENCH_RUNS);
    cr_expect(conf_server_alive(&srv), "the server died under faults");
    cr_expect(probe_ok(&srv), "no /derp/probe answered after the load");
    int fds_after = fds_settle(srv.pid, fds_before);
    cr_expect_leq(fds_after, fds_before, "the server holds %d fds, %d before the load", fds_after,
                  fds_before);
    CONF_OK(conf_server_stop_keep(&srv));
    unsigned long long k[4] = {0};
    CONF_OK(injected(srv.dir, k));
    fprintf(stderr, "faults injected (%s): sqe=%llu short_send=%llu reset=%llu alloc=%llu\n",
            scheme, k[0], k[1], k[2], k[3]);
    for (int i = 0; i < 4; i++)
        cr_expect_gt(k[i], 0, "no fault of kind %d was injected", i);
    conf_dir_remove(srv.dir);
}

Test(test_conformance_faults, tls_under_faults)
{
    bench_under_faults("https");
}

Test(test_conformance_faults, websocket_under_faults)
{
    bench_under_faults("wss");
}
