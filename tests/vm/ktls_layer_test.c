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
 * `FAIL <name>: why`; exits 1 if a check failed.
 * Files: this one (the rows, the checks, main), ktls_layer_ends.c (the runtime side),
 * ktls_layer_peers.c (the driver thread and the openssl peers), ktls_layer_impl.h (shared). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ktls_layer_impl.h"
#include "tls_keys.h"

#define LT_ROW(ph, sh, user, bytes, act)                                                           \
    {                                                                                              \
        .phase = ph, .shard = sh, .ktls_disable = user, .up = bytes, .down = bytes, .action = act  \
    }
const struct lt_spec lt_specs[] = {
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
_Static_assert(HD_ARRAY_SIZE(lt_specs) == LT_CLIENTS, "LT_CLIENTS counts the rows");

struct lt_global g;

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
        const struct lt_end *k = &g.clients[i], *e = lt_server_of(i);
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
    const struct lt_end *k = &g.clients[id], *e = lt_server_of(id);
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
    const struct lt_end *k = &g.clients[id], *e = lt_server_of(id);
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
        const struct lt_end *e = lt_server_of(i);
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
        fnv_up ^= lt_server_of(i)->fnv;
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
    /* An openssl peer that exits early makes the driver's pipe write fail: EPIPE, reported by
     * the row's checks, instead of a SIGPIPE that kills the test without a word (seen: 141). */
    signal(SIGPIPE, SIG_IGN);
    log_capture();
    struct lt_tls_stat before, after;
    if (tls_stat_read(&before) < 0)
        lt_fail("tls_stat", "/proc/net/tls_stat: %s", strerror(errno));
    if (failures == 0 && setup()) {
        struct hdt_options o = {.shards = LT_SHARDS,
                                .layers = lt_layers,
                                .layers_args = lt_layers_args,
                                .layers_count = 2,
                                .shard_init = lt_shard_init,
                                .shard_stop = lt_shard_stop};
        pthread_t driver;
        HDT_CHECK(pthread_create(&driver, NULL, lt_driver_main, NULL) == 0);
        int rc = hdt_run(&o, lt_body, NULL, NULL);
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
