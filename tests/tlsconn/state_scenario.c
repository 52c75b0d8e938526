/* state_scenario.c - the hand-over scenario of state_scenario.h: the server on the shard (accept,
 * echo, save, hand-over, load), the BoringSSL client on its own thread, and sc_run. Threads: the
 * shard (server), the client thread, the caller (sc_run, which joins both). */
#include "state_scenario.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/bio.h>
#include <openssl/mem.h>
#include <openssl/ssl.h>

#include "harness.h"
#include <hd/net_codec.h>

/* A peer that stops answering fails the test instead of hanging it (a healthy loopback peer
 * answers in microseconds). */
#define WAIT_MS  20000
#define POLL_MS  1u
#define BIG      50000u /* spans four records each way */
#define HALF_MSG 300u   /* the record the client sends half of before the save */
#define BUF_MAX  (64u * 1024u)
#define KEPT_MAX (32u * 1024u)

enum cmd { CMD_NONE, CMD_SAVE, CMD_KEY_UPDATE };
enum step { STEP_LIVE, STEP_HAND_IN, STEP_DONE };

static struct {
    _Atomic uint16_t port;
    _Atomic int cmd;
    _Atomic size_t half; /* raw bytes of the half record the server must hold before saving */
    struct tls_ctx *server_ctx;
    struct net_listener *listener;
    struct hd_timer poll;
    struct net_conn *c;
    int step, dup_fd;
    bool handing_over;
    uint8_t blob[TLS_CONN_STATE_MAX];
    ssize_t blob_len;
    uint8_t kept[KEPT_MAX];
    size_t kept_len;
    bool ktls;
    struct sc_result r; /* read by sc_run once the runtime and the client stopped */
} g;

/* ---------------------------------------------------------------- server (shard) */

static ssize_t srv_data(struct net_conn *c, const uint8_t *data, size_t len)
{
    int rc = net_conn_send_copy(c, data, len);
    if (rc < 0)
        return rc;
    g.r.echoed += len;
    return (ssize_t)len;
}

static void srv_eof(struct net_conn *c)
{
    net_conn_close(c, 0, true);
}

static void srv_close(struct net_conn *c, int reason)
{
    if (g.handing_over) { /* the old connection: the new one is adopted at the next poll */
        g.handing_over = false;
        g.step = STEP_HAND_IN;
        return;
    }
    g.r.final_reason = reason;
    g.r.closed = true;
    g.r.stats = *tls_shard_stats(net_conn_shard(c));
    g.step = STEP_DONE;
    hd_runtime_stop(hd_shard_runtime(net_conn_shard(c)));
}

static const struct net_conn_handler srv_handler = {
    .on_data = srv_data,
    .on_eof = srv_eof,
    .on_close = srv_close,
};

static void srv_handshake(struct net_conn *c, const struct tls_conn_info *info)
{
    (void)c;
    g.r.mode = (int)info->mode;
}

static void srv_accept(struct net_listener *l, int fd, const struct net_addr *peer, void *arg)
{
    (void)peer, (void)arg;
    HDT_CHECK(g.c == NULL);
    HDT_CHECK(net_conn_adopt(net_listener_shard(l), fd, &srv_handler, NULL, NULL, &g.c) == 0);
    struct tls_conn_options o = {.idle_timeout_ms = WAIT_MS, .on_handshake = srv_handshake};
    HDT_CHECK(tls_conn_start(g.c, g.server_ctx, &o) == 0);
    g.r.busy_rc = (int)tls_conn_state_save(g.c, g.blob, sizeof(g.blob)); /* handshaking */
}

/* Save once the half record is in (userspace: net keeps it raw; kTLS: the kernel does); then
 * the old connection goes (its fd number with it). */
static bool hand_out(void)
{
    struct net_conn *c = g.c;
    if (!g.ktls && net_conn_kept_bytes(c) < atomic_load(&g.half))
        return false;
    net_conn_pause_recv(c, true); /* the client is silent until the new connection speaks */
    uint8_t small[16];
    g.r.nospc_rc = (int)tls_conn_state_save(c, small, sizeof(small));
    g.blob_len = tls_conn_state_save(c, g.blob, sizeof(g.blob));
    HDT_CHECK(g.blob_len > 0); /* the damaged copies below need a state */
    g.kept_len = net_conn_kept_bytes(c);
    HDT_CHECK(g.kept_len <= sizeof(g.kept));
    HDT_CHECK(net_conn_kept_peek(c, 0, g.kept, g.kept_len) == g.kept_len);
    g.dup_fd = dup(net_conn_fd(c));
    HDT_CHECK(g.dup_fd >= 0);
    g.handing_over = true;
    g.c = NULL;
    net_conn_close(c, 0, false);
    return true;
}

/* Damaged copies of the state: each refused with -EPROTO, nothing installed. */
static void try_bad_loads(struct net_conn *c)
{
    uint8_t b[TLS_CONN_STATE_MAX + 1];
    size_t n = (size_t)g.blob_len;
    size_t lens[SC_BAD_CASES] = {n - 1, 20, 0, n, n, n, n, n + 1};
    for (unsigned i = 0; i < SC_BAD_CASES; i++) {
        memcpy(b, g.blob, n);
        b[n] = 0;
        if (i == 3)
            b[4] ^= 0x03; /* version */
        if (i == 4)
            b[0] ^= 0x20; /* magic */
        if (i == 5)
            b[n - 20] ^= 0x01; /* a secret's byte */
        if (i == 6)
            b[n - 1] ^= 0x80; /* the check */
        g.r.bad_rc[i] = tls_conn_state_load(c, b, lens[i]);
        if (net_conn_codec(c, NULL) != NULL)
            g.r.bad_left_codec = true;
    }
}

static void hand_in(struct hd_shard *s)
{
    struct net_conn *c;
    HDT_CHECK(net_conn_adopt(s, g.dup_fd, &srv_handler, NULL, NULL, &c) == 0);
    g.r.notls_rc = (int)tls_conn_state_save(c, g.blob, 0); /* a connection without TLS */
    try_bad_loads(c);
    g.r.load_rc = tls_conn_state_load(c, g.blob, (size_t)g.blob_len);
    const struct net_codec *k = net_conn_codec(c, NULL);
    g.r.codec = k ? k->name : NULL;
    g.r.restore_rc = net_conn_kept_restore(c, g.kept, g.kept_len);
    g.c = c;
    HDT_CHECK(net_conn_send_copy(c, "READY", 5) == 0);
}

static void poll_fired(struct hd_timer *t)
{
    struct hd_shard *s = hd_shard_current();
    if (g.step == STEP_DONE)
        return;
    if (g.step == STEP_HAND_IN) {
        g.step = STEP_LIVE;
        hand_in(s);
    } else if (g.c != NULL && atomic_load(&g.cmd) == CMD_SAVE) {
        if (hand_out())
            atomic_store(&g.cmd, CMD_NONE);
    } else if (g.c != NULL && atomic_load(&g.cmd) == CMD_KEY_UPDATE) {
        atomic_store(&g.cmd, CMD_NONE);
        g.r.key_update_rc = tls_conn_key_update(g.c, true);
        HDT_CHECK(net_conn_send_copy(g.c, "KU-OK!", 6) == 0);
    }
    hd_timer_start(s, t, POLL_MS);
}

static void body(struct hd_shard *s, void *arg)
{
    (void)arg;
    struct net_addr a;
    HDT_CHECK(net_addr_parse("127.0.0.1:0", &a) == 0);
    HDT_CHECK(net_listener_start(s, &a, NULL, srv_accept, NULL, &g.listener) == 0);
    hd_timer_init(&g.poll, poll_fired);
    hd_timer_start(s, &g.poll, POLL_MS);
    atomic_store(&g.port, net_addr_port(net_listener_addr(g.listener)));
}

static void shard_stop(struct hd_shard *s)
{
    hd_timer_stop(s, &g.poll);
    if (g.listener)
        net_listener_stop(g.listener);
    g.listener = NULL;
}

/* ---------------------------------------------------------------- client (BoringSSL) */

/* BoringSSL on memory BIOs; this thread moves the bytes to and from the socket, so it can also
 * send a record in two pieces. */
struct cl {
    int fd;
    SSL_CTX *ctx;
    SSL *ssl;
    BIO *rb, *wb;
};

static void write_all(int fd, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        HDT_CHECK(w > 0);
        p += w;
        n -= (size_t)w;
    }
}

static void cl_flush(struct cl *k)
{
    uint8_t buf[4096];
    int n;
    while ((n = BIO_read(k->wb, buf, sizeof(buf))) > 0)
        write_all(k->fd, buf, (size_t)n);
}

/* More bytes from the socket into BoringSSL; false at EOF. */
static bool cl_fill(struct cl *k)
{
    struct pollfd p = {.fd = k->fd, .events = POLLIN};
    HDT_CHECK(poll(&p, 1, WAIT_MS) == 1); /* the server answers long before */
    uint8_t buf[16384];
    ssize_t n = read(k->fd, buf, sizeof(buf));
    HDT_CHECK(n >= 0);
    if (n > 0)
        HDT_CHECK(BIO_write(k->rb, buf, (int)n) == (int)n);
    return n > 0;
}

static void cl_start(struct cl *k, uint16_t port)
{
    k->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {
        .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    HDT_CHECK(k->fd >= 0 && connect(k->fd, (struct sockaddr *)&a, sizeof(a)) == 0);
    k->ctx = SSL_CTX_new(TLS_method());
    HDT_CHECK(k->ctx && SSL_CTX_set_min_proto_version(k->ctx, TLS1_3_VERSION));
    SSL_CTX_set_verify(k->ctx, SSL_VERIFY_NONE, NULL);
    k->ssl = SSL_new(k->ctx);
    k->rb = BIO_new(BIO_s_mem());
    k->wb = BIO_new(BIO_s_mem());
    HDT_CHECK(k->ssl && k->rb && k->wb);
    BIO_set_mem_eof_return(k->rb, -1); /* empty: "retry", so SSL reports WANT_READ */
    SSL_set_bio(k->ssl, k->rb, k->wb);
    SSL_set_connect_state(k->ssl);
    int r;
    while ((r = SSL_do_handshake(k->ssl)) != 1) {
        cl_flush(k);
        HDT_CHECK(SSL_get_error(k->ssl, r) == SSL_ERROR_WANT_READ);
        HDT_CHECK(cl_fill(k));
    }
    cl_flush(k);
}

static void cl_read_exact(struct cl *k, uint8_t *out, size_t n)
{
    size_t got = 0;
    while (got < n) {
        int r = SSL_read(k->ssl, out + got, (int)(n - got));
        cl_flush(k); /* an answer to a KeyUpdate */
        if (r > 0) {
            got += (size_t)r;
            continue;
        }
        HDT_CHECK(SSL_get_error(k->ssl, r) == SSL_ERROR_WANT_READ);
        HDT_CHECK(cl_fill(k));
    }
}

static void cl_write(struct cl *k, const uint8_t *p, size_t n)
{
    HDT_CHECK(SSL_write(k->ssl, p, (int)n) == (int)n);
    cl_flush(k);
}

static void fill_pattern(uint8_t *p, size_t n, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17; /* xorshift64 */
        p[i] = (uint8_t)x;
    }
}

/* Send n pattern bytes, read their echo back, compare. */
static void cl_echo(struct cl *k, size_t n, uint64_t seed)
{
    static uint8_t out[BUF_MAX], in[BUF_MAX];
    HDT_CHECK(n <= BUF_MAX);
    fill_pattern(out, n, seed);
    g.r.echo_expected += n;
    cl_write(k, out, n);
    cl_read_exact(k, in, n);
    HDT_CHECK(memcmp(in, out, n) == 0);
}

static void cl_expect(struct cl *k, const char *s)
{
    uint8_t in[16];
    size_t n = strlen(s);
    cl_read_exact(k, in, n);
    HDT_CHECK(memcmp(in, s, n) == 0);
}

static void wait_cmd_taken(void)
{
    for (int i = 0; i < WAIT_MS && atomic_load(&g.cmd) != CMD_NONE; i++)
        usleep(1000);
    HDT_CHECK(atomic_load(&g.cmd) == CMD_NONE);
}

/* Half of a HALF_MSG record goes out before the save, the rest after the load. */
static void cl_hand_over(struct cl *k)
{
    uint8_t msg[HALF_MSG], rec[HALF_MSG + 64], in[HALF_MSG];
    fill_pattern(msg, sizeof(msg), 77);
    HDT_CHECK(SSL_write(k->ssl, msg, sizeof(msg)) == (int)sizeof(msg));
    int len = BIO_read(k->wb, rec, sizeof(rec));
    HDT_CHECK(len > (int)HALF_MSG && BIO_pending(k->wb) == 0);
    size_t half = (size_t)len / 2;
    write_all(k->fd, rec, half);
    atomic_store(&g.half, half);
    atomic_store(&g.cmd, CMD_SAVE);
    cl_expect(k, "READY"); /* the new connection's first record */
    write_all(k->fd, rec + half, (size_t)len - half);
    cl_read_exact(k, in, sizeof(in));
    HDT_CHECK(memcmp(in, msg, sizeof(msg)) == 0);
    g.r.echo_expected += sizeof(msg);
}

static void *client_main(void *arg)
{
    (void)arg;
    for (int i = 0; i < WAIT_MS && atomic_load(&g.port) == 0; i++)
        usleep(1000);
    HDT_CHECK(atomic_load(&g.port) != 0);
    struct cl k;
    cl_start(&k, atomic_load(&g.port));
    cl_echo(&k, 100, 1);
    cl_echo(&k, BIG, 2);
    cl_echo(&k, 5, 3);
    cl_hand_over(&k);
    cl_echo(&k, BIG, 4);
    if (g.r.key_updates) {
        /* Our KeyUpdate asks for the server's: both directions move to new keys. */
        HDT_CHECK(SSL_key_update(k.ssl, SSL_KEY_UPDATE_REQUESTED));
        cl_echo(&k, 1000, 5);
        cl_echo(&k, BIG, 6);
        /* The server's KeyUpdate (asking for ours), then a marker under its new key. */
        atomic_store(&g.cmd, CMD_KEY_UPDATE);
        wait_cmd_taken();
        cl_expect(&k, "KU-OK!");
        cl_echo(&k, BIG, 7);
    }
    /* close_notify both ways, then the server closes. */
    HDT_CHECK(SSL_shutdown(k.ssl) == 0);
    cl_flush(&k);
    uint8_t b[16];
    int r;
    while ((r = SSL_read(k.ssl, b, sizeof(b))) <= 0 &&
           SSL_get_error(k.ssl, r) == SSL_ERROR_WANT_READ)
        HDT_CHECK(cl_fill(&k));
    HDT_CHECK(r == 0 && SSL_get_error(k.ssl, r) == SSL_ERROR_ZERO_RETURN);
    while (cl_fill(&k)) /* then EOF */
        ;
    SSL_free(k.ssl);
    SSL_CTX_free(k.ctx);
    close(k.fd);
    return NULL;
}

/* ---------------------------------------------------------------- the run */

static struct tls_shard_options tls_opts;
static const struct hd_module *const layers[] = {&net_module, &tls_module};
static void *const layers_args[] = {NULL, &tls_opts};

void sc_run(bool ktls, struct sc_result *out)
{
    memset(&g, 0, sizeof(g));
    g.dup_fd = -1;
    g.ktls = ktls;
    tls_opts.ktls_disable = !ktls;
    /* A kernel without TLS 1.3 rekey (before Linux 6.14) ends a kTLS connection on KeyUpdate. */
    g.r.key_updates = !ktls || tls_ktls_rekey_available();
    struct tls_server_options so = {.self_signed_host = "localhost"};
    HDT_CHECK(tls_server_ctx_create(&so, &g.server_ctx) == 0);
    pthread_t t;
    HDT_CHECK(pthread_create(&t, NULL, client_main, NULL) == 0);
    struct hdt_options o = {.shards = 1,
                            .layers = layers,
                            .layers_args = layers_args,
                            .layers_count = 2,
                            .shard_stop = shard_stop};
    g.r.run_rc = hdt_run(&o, body, NULL, NULL);
    pthread_join(t, NULL);
    tls_ctx_destroy(g.server_ctx);
    g.r.blob_len = g.blob_len;
    g.r.kept_len = g.kept_len;
    OPENSSL_cleanse(g.blob, sizeof(g.blob)); /* key material */
    *out = g.r;
}
