/* test_conformance_tls.c - a real hderp-server in TLS mode (-certmode manual with a fresh
 * certificate for "localhost", 2 shards) against DERP clients over TLS (hd_derp_client with
 * tls_module on real test shards): 100 clients x 1,000 packets (the driver in conf_load.c,
 * as in test_conformance_load.c: exactly once, right key, right source, no drops), fast start
 * over TLS with a packet round trip, and SNI enforcement (a wrong or missing SNI is refused
 * before login while logged-in clients carry on and new ones still log in). Clients verify the
 * server against the generated certificate as CA; only the refused ones skip verification (else
 * they would fail on their own side). Shard-side results go to plain or atomic fields, asserted on
 * the test thread after the runtime stopped. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conf_support.h"
#include "conf_support_impl.h"
#include "derp_client.h"
#include "harness.h"
#include <hd/tls.h>

/* A few logins and packets on one shard: far beyond any local round trip, even under ASan. */
#define SMALL_DEADLINE_MS 30000

static struct conf_server srv;
static struct tls_ctx *ca_ctx;       /* verifies srv's certificate for CONF_TLS_HOSTNAME */
static struct tls_ctx *insecure_ctx; /* the wrong-SNI clients: any certificate */
static char host[64];                /* "localhost:PORT": Host header, SNI without the port */
/* Summed over the test shards in shard_fini. */
static atomic_uint tls_done, tls_failed;

static void up(void)
{
    tls_done = tls_failed = 0;
    cr_assert_eq(conf_server_start(&srv, &(struct conf_server_opts){.shards = 2, .tls = true}), 0);
    struct tls_client_options co = {.ca_file = srv.cert_file};
    cr_assert_eq(tls_client_ctx_create(&co, &ca_ctx), 0);
    cr_assert_eq(
        tls_client_ctx_create(&(struct tls_client_options){.insecure = true}, &insecure_ctx), 0);
    snprintf(host, sizeof(host), "%s:%u", CONF_TLS_HOSTNAME, srv.port);
}

static void down(void)
{
    conf_server_down(&srv);
    if (ca_ctx)
        tls_ctx_destroy(ca_ctx);
    if (insecure_ctx)
        tls_ctx_destroy(insecure_ctx);
    ca_ctx = insecure_ctx = NULL;
}

TestSuite(test_conformance_tls, .init = up, .fini = down, .timeout = 240);

static const struct hd_module *const layers[] = {&net_module, &tls_module};

static void shard_fini(struct hd_shard *s)
{
    const struct tls_shard_stats *st = tls_shard_stats(s);
    atomic_fetch_add(&tls_done, (unsigned)st->handshakes_done);
    atomic_fetch_add(&tls_failed, (unsigned)st->handshakes_failed);
}

/* A verifying client for srv: SNI "localhost" from the Host header. */
static void tls_config(struct derp_client_config *cfg)
{
    *cfg = (struct derp_client_config){
        .read_timeout_ms = DERP_CLIENT_TIMEOUT_OFF, .tls = true, .tls_ctx = ca_ctx, .host = host};
    HDT_CHECK(net_addr_parse("127.0.0.1:0", &cfg->addr) == 0);
    cfg->addr.in4.sin_port = htons(srv.port);
}

static void stop_clean(void)
{
    int64_t v = -1;
    cr_assert_eq(conf_varz_wait(&srv, "derp_current_connections", 0, CONF_IO_TIMEOUT_MS, &v), 0,
                 "derp_current_connections %lld", (long long)v);
    conf_server_stop_clean(&srv);
}

/* ---------------------------------------------------------------- 100 clients x 1,000 packets */

/* About a second on a healthy relay in plain TCP; TLS under ASan several times that. */
#define LOAD_DEADLINE_MS 120000

/* The driver (conf_load.c) over TLS: verifying clients, SNI "localhost" from the Host header. */
Test(test_conformance_tls, clients_100_x_packets_1000)
{
    conf_load_run(&(struct conf_load_opts){
        .srv = &srv, .tls_ctx = ca_ctx, .host = host, .deadline_ms = LOAD_DEADLINE_MS});
    stop_clean();
}

/* ---------------------------------------------------------------- small exchanges (one shard) */

/* Clients of the small tests, by role. */
enum {
    C_A,    /* logged in first, stays to the end */
    C_B,    /* ditto */
    C_BAD,  /* wrong SNI (sni test) */
    C_NONE, /* no SNI at all: the Host is an IP literal (sni test) */
    C_LATE, /* logs in after the refusals (sni test) */
    C_COUNT
};

static struct {
    struct hd_shard *s;
    struct hd_timer tick;
    struct derp_client *k[C_COUNT];
    struct derp_pubkey pub[C_COUNT];
    uint64_t start_ms;
    int phase;
    unsigned opened, closed, ready_mask, got_mask, bad, early_close;
    int reason[C_COUNT];           /* on_close's */
    unsigned http_status[C_COUNT]; /* at on_ready, or when a refused client closed */
    bool server_key_ok[C_COUNT];   /* derp_client_server_key == srv.key at on_ready */
    bool upgrade_key[C_COUNT];     /* a Derp-Public-Key header was seen */
    unsigned refused_progress;     /* ServerKey, HTTP responses or ServerInfo for C_BAD/C_NONE */
    bool timed_out, done;
} sm;

static bool sm_is_refused(unsigned i)
{
    return i == C_BAD || i == C_NONE;
}

static void sm_on_ready(struct derp_client *k, const struct derp_server_info *info)
{
    (void)info;
    unsigned me = (unsigned)(uintptr_t)derp_client_user(k);
    if (sm_is_refused(me)) {
        sm.refused_progress++;
        return;
    }
    sm.ready_mask |= 1u << me;
    sm.http_status[me] = derp_client_http_status(k);
    const struct derp_pubkey *sk = derp_client_server_key(k);
    sm.server_key_ok[me] = sk && derp_pubkey_equal(sk, &srv.key);
    struct derp_pubkey hk;
    sm.upgrade_key[me] = derp_client_upgrade_key(k, &hk);
}

static void sm_on_server_key(struct derp_client *k, const struct derp_pubkey *key)
{
    (void)key;
    if (sm_is_refused((unsigned)(uintptr_t)derp_client_user(k)))
        sm.refused_progress++;
}

static void sm_on_http(struct derp_client *k, const struct net_http_resp *resp)
{
    (void)resp;
    if (sm_is_refused((unsigned)(uintptr_t)derp_client_user(k)))
        sm.refused_progress++;
}

/* Payloads are "<phase> <from> <to>"; each (phase, to) is expected once: got_mask bit to. */
static void sm_send(unsigned from, unsigned to)
{
    char text[32];
    int n = snprintf(text, sizeof(text), "%d %u %u", sm.phase, from, to);
    if (!sm.k[from] || derp_client_send(sm.k[from], &sm.pub[to], text, (size_t)n) != 0)
        sm.bad++;
}

static void sm_on_packet(struct derp_client *k, const struct derp_pubkey *src, const uint8_t *data,
                         size_t len)
{
    unsigned me = (unsigned)(uintptr_t)derp_client_user(k);
    char want[32];
    unsigned from = C_COUNT;
    for (unsigned i = 0; i < C_COUNT; i++)
        if (sm.k[i] && derp_pubkey_equal(src, &sm.pub[i]))
            from = i;
    int n = snprintf(want, sizeof(want), "%d %u %u", sm.phase, from, me);
    if (from == C_COUNT || len != (size_t)n || memcmp(data, want, len) != 0 ||
        (sm.got_mask & 1u << me)) {
        sm.bad++;
        return;
    }
    sm.got_mask |= 1u << me;
}

static void sm_on_close(struct derp_client *k, int reason)
{
    unsigned me = (unsigned)(uintptr_t)derp_client_user(k);
    sm.k[me] = NULL;
    sm.reason[me] = reason;
    if (sm_is_refused(me))
        sm.http_status[me] = derp_client_http_status(k);
    else if (!sm.done || reason != 0)
        sm.early_close++;
    if (++sm.closed == sm.opened && sm.done)
        hd_runtime_stop(hd_shard_runtime(sm.s));
}

static const struct derp_client_callbacks sm_cb = {
    .on_http_response = sm_on_http,
    .on_server_key = sm_on_server_key,
    .on_ready = sm_on_ready,
    .on_packet = sm_on_packet,
    .on_close = sm_on_close,
};

static void sm_connect(unsigned i, const struct derp_client_config *cfg)
{
    HDT_CHECK(derp_client_connect(sm.s, cfg, &sm_cb, (void *)(uintptr_t)i, &sm.k[i]) == 0);
    sm.pub[i] = *derp_client_public_key(sm.k[i]);
    sm.opened++;
}

static void sm_next(int phase)
{
    sm.phase = phase;
    sm.got_mask = 0;
}

/* The test's step: called every millisecond until it returns true (done). */
typedef bool sm_step_fn(void);
static sm_step_fn *sm_step;

static void sm_tick(struct hd_timer *t)
{
    (void)t;
    if (!sm.done && hd_now_ms(sm.s) - sm.start_ms > SMALL_DEADLINE_MS)
        sm.timed_out = true;
    if (!sm.done && (sm.timed_out || sm_step())) {
        sm.done = true;
        for (unsigned i = 0; i < C_COUNT; i++)
            if (sm.k[i])
                derp_client_close(sm.k[i]);
        if (sm.closed == sm.opened)
            hd_runtime_stop(hd_shard_runtime(sm.s));
        return;
    }
    hd_timer_start(sm.s, &sm.tick, 1);
}

static void sm_shard_stop(struct hd_shard *s)
{
    hd_timer_stop(s, &sm.tick);
    for (unsigned i = 0; i < C_COUNT; i++)
        if (sm.k[i])
            derp_client_abort(sm.k[i], -ECANCELED);
}

static void sm_run(hdt_body_fn *body)
{
    memset(&sm, 0, sizeof(sm));
    struct hdt_options o = {.frame_classes = derp_client_frame_classes,
                            .frame_classes_count = DERP_CLIENT_FRAME_CLASSES_COUNT,
                            .shards = 1,
                            .layers = layers,
                            .layers_count = 2,
                            .shard_stop = sm_shard_stop,
                            .shard_fini = shard_fini};
    cr_assert_eq(hdt_run(&o, body, NULL, NULL), 0);
    cr_assert(!sm.timed_out, "stuck in phase %d (ready %#x, got %#x)", sm.phase, sm.ready_mask,
              sm.got_mask);
    cr_assert_eq(sm.bad, 0, "wrong, duplicate or unsendable packets");
    cr_assert_eq(sm.early_close, 0, "a client closed before the end");
    cr_assert_eq(sm.closed, sm.opened);
}

static void sm_start(struct hd_shard *s, sm_step_fn *step)
{
    sm.s = s;
    sm.start_ms = hd_now_ms(s);
    sm_step = step;
    hd_timer_init(&sm.tick, sm_tick);
    hd_timer_start(s, &sm.tick, 1);
}

/* ---------------------------------------------------------------- fast start over TLS */

/* Phases: 0 logging in, 1 A -> B, 2 B -> A. */
static bool fs_step(void)
{
    switch (sm.phase) {
    case 0:
        if (sm.ready_mask == (1u << C_A | 1u << C_B)) {
            sm_next(1);
            sm_send(C_A, C_B);
        }
        return false;
    case 1:
        if (sm.got_mask == 1u << C_B) {
            sm_next(2);
            sm_send(C_B, C_A);
        }
        return false;
    default:
        return sm.got_mask == 1u << C_A;
    }
}

static void fs_body(struct hd_shard *s, void *arg)
{
    (void)arg;
    struct derp_client_config cfg;
    tls_config(&cfg);
    cfg.host = NULL; /* Host "127.0.0.1:PORT"; the name for SNI given on its own */
    cfg.tls_server_name = CONF_TLS_HOSTNAME;
    cfg.fast_start = true;
    sm.s = s;
    sm_connect(C_A, &cfg); /* learns the key from the ServerKey frame, then sends ClientInfo */
    cfg.has_server_key = true;
    cfg.server_key = srv.key; /* ClientInfo goes with the request, queued behind the handshake */
    sm_connect(C_B, &cfg);
    sm_start(s, fs_step);
}

Test(test_conformance_tls, fast_start_round_trip)
{
    sm_run(fs_body);
    cr_assert_eq(sm.got_mask, 1u << C_A, "B's answer reached A");
    for (unsigned i = C_A; i <= C_B; i++) {
        cr_assert_eq(sm.http_status[i], 0, "fast start: no HTTP response (client %u)", i);
        cr_assert(!sm.upgrade_key[i], "no 101 head, so no Derp-Public-Key (client %u)", i);
        cr_assert(sm.server_key_ok[i], "the ServerKey frame carried the server's key (%u)", i);
    }
    cr_assert_eq(atomic_load(&tls_done), 2);
    cr_assert_eq(atomic_load(&tls_failed), 0);
    int64_t v = -1;
    cr_assert_eq(conf_varz(&srv, "derp_packets_sent", false, &v), 0);
    cr_assert_eq(v, 2, "derp_packets_sent");
    /* The server's TLS layer in /debug/varz: both handshakes, on kTLS where the kernel has it */
    int64_t ktls = tls_ktls_available() ? 2 : 0;
    cr_assert_eq(conf_varz_must(&srv, "hderp_tls_handshakes_done"), 2);
    cr_assert_eq(conf_varz_must(&srv, "hderp_tls_handshakes_failed"), 0);
    cr_assert_eq(conf_varz_must(&srv, "hderp_tls_conns{mode=\"ktls\"}"), ktls);
    cr_assert_eq(conf_varz_must(&srv, "hderp_tls_conns{mode=\"userspace\"}"), 2 - ktls);
    cr_assert_eq(conf_varz_must(&srv, "hderp_tls_states_saved"), 0, "no upgrade, no state");
    cr_assert_eq(conf_varz_must(&srv, "hderp_tls_states_loaded{mode=\"ktls\"}"), 0);
    stop_clean();
}

/* ---------------------------------------------------------------- SNI must be the hostname */

/* Phases: 0 A, B log in; 1 A -> B; 2 the refused clients connect; 3 A <-> B again; 4 a late
 * client logs in; 5 late -> A. */
static bool sni_connect_refused(void)
{
    struct derp_client_config cfg;
    tls_config(&cfg);
    cfg.tls_ctx = insecure_ctx; /* a verifying client would refuse the certificate itself */
    cfg.tls_server_name = "wrong.example";
    sm_connect(C_BAD, &cfg);
    cfg.tls_server_name = NULL;
    cfg.host = NULL; /* "127.0.0.1:PORT": an IP literal is never sent as SNI */
    sm_connect(C_NONE, &cfg);
    return false;
}

static bool sni_step(void)
{
    struct derp_client_config cfg;
    switch (sm.phase) {
    case 0:
        if (sm.ready_mask == (1u << C_A | 1u << C_B)) {
            sm_next(1);
            sm_send(C_A, C_B);
        }
        return false;
    case 1:
        if (sm.got_mask != 1u << C_B)
            return false;
        sm_next(2);
        return sni_connect_refused();
    case 2:
        if (sm.k[C_BAD] || sm.k[C_NONE])
            return false; /* both must be closed by the server */
        sm_next(3);
        sm_send(C_A, C_B);
        sm_send(C_B, C_A);
        return false;
    case 3:
        if (sm.got_mask != (1u << C_A | 1u << C_B))
            return false;
        sm_next(4);
        tls_config(&cfg);
        sm_connect(C_LATE, &cfg);
        return false;
    case 4:
        if (sm.ready_mask & 1u << C_LATE) {
            sm_next(5);
            sm_send(C_LATE, C_A);
        }
        return false;
    default:
        return sm.got_mask == 1u << C_A;
    }
}

static void sni_body(struct hd_shard *s, void *arg)
{
    (void)arg;
    struct derp_client_config cfg;
    tls_config(&cfg);
    sm.s = s;
    sm_connect(C_A, &cfg);
    sm_connect(C_B, &cfg);
    sm_start(s, sni_step);
}

Test(test_conformance_tls, wrong_sni_refused_others_continue)
{
    sm_run(sni_body);
    cr_assert_eq(sm.phase, 5, "every phase ran");
    cr_assert_eq(sm.refused_progress, 0, "a refused client got an HTTP answer, ServerKey or more");
    for (unsigned i = C_BAD; i <= C_NONE; i++) {
        cr_assert_lt(sm.reason[i], 0, "refused client %u closed by the server", i);
        cr_assert_neq(sm.reason[i], -ETIMEDOUT, "client %u: the server never closed it", i);
        cr_assert_eq(sm.http_status[i], 0, "client %u saw an HTTP response", i);
    }
    cr_assert(sm.ready_mask == (1u << C_A | 1u << C_B | 1u << C_LATE));
    cr_assert(conf_log_has(&srv, "SNI \"wrong.example\" is not " CONF_TLS_HOSTNAME),
              "the refusal's reason");
    int64_t v = -1;
    cr_assert_eq(conf_varz(&srv, "derp_packets_sent", false, &v), 0);
    cr_assert_eq(v, 4, "derp_packets_sent");
    stop_clean();
}

/* Plain HTTP to the TLS port gets Go's net/http answer (a 400 in clear text) and a close, not
 * silence (issue 16). */
Test(test_conformance_tls, plain_http_gets_400)
{
    int fd = conf_tcp_connect(srv.port);
    cr_assert_geq(fd, 0);
    static const char req[] = "GET /derp/probe HTTP/1.1\r\nHost: localhost\r\n\r\n";
    cr_assert_eq(conf_write_all(fd, req, sizeof(req) - 1), 0);
    char resp[512];
    size_t got = 0;
    int64_t deadline = conf_now_ms() + CONF_IO_TIMEOUT_MS;
    while (got < sizeof(resp) - 1 && conf_wait_readable(fd, deadline) == 0) {
        ssize_t n = read(fd, resp + got, sizeof(resp) - 1 - got);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    resp[got] = '\0';
    close(fd);
    cr_assert_str_eq(resp, "HTTP/1.0 400 Bad Request\r\n\r\n"
                           "Client sent an HTTP request to an HTTPS server.\n");
    stop_clean();
}

/* A wrong SNI fails the handshake itself with an alert (unrecognized_name), as derper's manual
 * mode does, instead of completing it and then closing (openssl s_client as the client). */
Test(test_conformance_tls, wrong_sni_handshake_alert)
{
    char connect[32], log[320];
    snprintf(connect, sizeof(connect), "127.0.0.1:%u", srv.port);
    snprintf(log, sizeof(log), "%s/s_client.log", srv.dir);
    const char *argv[] = {"openssl",     "s_client",      "-connect", connect,
                          "-servername", "wrong.example", "-tls1_3",  NULL};
    int status = 0;
    cr_assert_eq(conf_run(argv, log, CONF_START_TIMEOUT_MS, &status), 0);
    FILE *f = fopen(log, "r");
    cr_assert_not_null(f);
    char line[512];
    bool alert = false, cipher = false;
    while (fgets(line, sizeof(line), f)) {
        alert |= strstr(line, "alert number 112") != NULL || strstr(line, "unrecognized name");
        cipher |= strstr(line, "Cipher is TLS_") != NULL;
    }
    fclose(f);
    cr_assert(alert, "no unrecognized_name alert in %s", log);
    cr_assert(!cipher, "the handshake completed");
    cr_assert_neq(status, 0, "s_client succeeded");
    stop_clean();
}

/* A client that offers only TLS 1.2 (Python's ssl on the system OpenSSL, maximum_version
 * TLSv1_2) gets the protocol_version alert, which it reports in words, and the server log says
 * why in words (issue 24: it said "UNSUPPORTED_PROTOCOL" at WARN); a TLS 1.3 client of the same
 * script is served. hderp does not speak TLS 1.2: docs/ARCHITECTURE.md says why. */
Test(test_conformance_tls, tls12_only_client_refused_in_words)
{
    static const char py[] =
        "import socket, ssl, sys\n"
        "for v in (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3):\n"
        "    c = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)\n"
        "    c.load_verify_locations(sys.argv[2])\n"
        "    c.maximum_version = v\n"
        "    try:\n"
        "        raw = socket.create_connection(('127.0.0.1', int(sys.argv[1])))\n"
        "        with c.wrap_socket(raw, server_hostname=sys.argv[3]) as s:\n"
        "            print(v.name, 'served', s.version())\n"
        "    except ssl.SSLError as e:\n"
        "        print(v.name, 'refused', e.reason)\n";
    char port[8], log[320];
    snprintf(port, sizeof(port), "%u", srv.port);
    snprintf(log, sizeof(log), "%s/tls12.log", srv.dir);
    const char *argv[] = {"python3", "-c", py, port, srv.cert_file, CONF_TLS_HOSTNAME, NULL};
    int status = -1;
    cr_assert_eq(conf_run(argv, log, CONF_START_TIMEOUT_MS, &status), 0);
    cr_assert_eq(status, 0, "the python client failed: see %s", log);
    FILE *f = fopen(log, "r");
    cr_assert_not_null(f);
    char line[512];
    bool refused = false, served = false;
    while (fgets(line, sizeof(line), f)) {
        refused |= strstr(line, "TLSv1_2 refused TLSV1_ALERT_PROTOCOL_VERSION") != NULL;
        served |= strstr(line, "TLSv1_3 served TLSv1.3") != NULL;
    }
    fclose(f);
    cr_assert(refused, "no protocol_version alert for the TLS 1.2 client in %s", log);
    cr_assert(served, "the TLS 1.3 client was not served: see %s", log);
    cr_assert(conf_log_wait(&srv, "offers only TLS 1.2 or older: this side speaks TLS 1.3 only",
                            CONF_IO_TIMEOUT_MS),
              "no readable refusal in the server log");
    stop_clean();
}
