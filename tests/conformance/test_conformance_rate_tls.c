/* test_conformance_rate_tls.c - -rate-config (spec §6.9) on a real hderp-server in TLS mode:
 * the limiter pauses reading in the middle of decrypted records (userspace records, or kTLS
 * where the kernel has it), so what the server keeps while paused is plaintext from the record
 * layer. A DERP client over TLS (hd_derp_client on a test shard) sends 1.5 MiB of 64 KiB packets
 * at once to another: every packet arrives, in order and intact, and not sooner than the limit
 * allows; nothing is dropped, the connection stays up. Shard-side results go to plain fields,
 * asserted on the test thread after the runtime stopped. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "conf_support.h"
#include "derp_client.h"
#include "harness.h"
#include <hd/tls.h>

#define RATE     (256 * 1024)
#define BURST    65568
#define PKTS     24
#define COST     (DERP_KEY_LEN + DERP_PACKET_LEN_MAX) /* what the limiter charges a packet */
#define DEADLINE 60000                                /* ~6 s at the limit: only a hang guard */

static struct conf_server srv;
static struct tls_ctx *ca_ctx;
static char host[64], cfg_path[300];

static void up(void)
{
    mkdir(CONF_WORK_DIR, 0755);
    char dir[256];
    snprintf(dir, sizeof(dir), "%s/rate-tls-XXXXXX", CONF_WORK_DIR);
    cr_assert_not_null(mkdtemp(dir));
    snprintf(cfg_path, sizeof(cfg_path), "%s/rate.json", dir);
    FILE *f = fopen(cfg_path, "w");
    cr_assert_not_null(f);
    fprintf(f, "{\"PerClientRateLimitBytesPerSec\": %d}\n", RATE);
    cr_assert_eq(fclose(f), 0);
    const char *extra[] = {"-rate-config", cfg_path, NULL};
    CONF_OK(conf_server_start(&srv, &(struct conf_server_opts){.tls = true, .extra = extra}));
    CONF_OK(tls_client_ctx_create(&(struct tls_client_options){.ca_file = srv.cert_file}, &ca_ctx));
    snprintf(host, sizeof(host), "%s:%u", CONF_TLS_HOSTNAME, srv.port);
}

static void down(void)
{
    conf_server_down(&srv);
    if (ca_ctx)
        tls_ctx_destroy(ca_ctx);
    ca_ctx = NULL;
}

TestSuite(test_conformance_rate_tls, .init = up, .fini = down, .timeout = 180);

/* ---------------------------------------------------------------- the test shard */

static struct {
    struct hd_shard *s;
    struct hd_timer tick;
    struct derp_client *a, *b;
    unsigned ready, closed, got, bad, send_errors, early_close;
    uint64_t start_ms, sent_ms, done_ms;
    bool sent, done, timed_out;
} t;

static void on_ready(struct derp_client *k, const struct derp_server_info *info)
{
    (void)k, (void)info;
    t.ready++;
}

static void on_packet(struct derp_client *k, const struct derp_pubkey *src, const uint8_t *data,
                      size_t len)
{
    unsigned seq = 0;
    if (len >= sizeof(seq))
        memcpy(&seq, data, sizeof(seq));
    if (k != t.b || !derp_pubkey_equal(src, derp_client_public_key(t.a)) ||
        len != DERP_PACKET_LEN_MAX || seq != t.got || data[len - 1] != (uint8_t)seq)
        t.bad++;
    if (++t.got == PKTS)
        t.done_ms = hd_now_ms(t.s);
}

static void on_close(struct derp_client *k, int reason)
{
    if (k == t.a)
        t.a = NULL;
    else
        t.b = NULL;
    if (!t.done || reason != 0)
        t.early_close++;
    if (++t.closed == 2 && t.done)
        hd_runtime_stop(hd_shard_runtime(t.s));
}

static const struct derp_client_callbacks cb = {
    .on_ready = on_ready,
    .on_packet = on_packet,
    .on_close = on_close,
};

/* A sends every packet at once (1.5 MiB: under the client's 4 MiB send cap); the server's
 * limiter then decides when it reads them. */
static void send_all(void)
{
    static uint8_t pkt[DERP_PACKET_LEN_MAX];
    for (unsigned i = 0; i < PKTS; i++) {
        memset(pkt, (int)(i & 0xff), sizeof(pkt));
        memcpy(pkt, &i, sizeof(i));
        if (derp_client_send(t.a, derp_client_public_key(t.b), pkt, sizeof(pkt)) != 0)
            t.send_errors++;
    }
    t.sent_ms = hd_now_ms(t.s);
    t.sent = true;
}

static void tick(struct hd_timer *tm)
{
    (void)tm;
    if (!t.done && hd_now_ms(t.s) - t.start_ms > DEADLINE)
        t.timed_out = true;
    if (!t.sent && t.ready == 2)
        send_all();
    if (!t.done && (t.timed_out || t.got >= PKTS)) {
        t.done = true;
        if (t.a)
            derp_client_close(t.a);
        if (t.b)
            derp_client_close(t.b);
        if (t.closed == 2)
            hd_runtime_stop(hd_shard_runtime(t.s));
        return;
    }
    hd_timer_start(t.s, &t.tick, 1);
}

static void body(struct hd_shard *s, void *arg)
{
    (void)arg;
    t.s = s;
    t.start_ms = hd_now_ms(s);
    struct derp_client_config cfg = {
        .read_timeout_ms = DERP_CLIENT_TIMEOUT_OFF, .tls = true, .tls_ctx = ca_ctx, .host = host};
    HDT_CHECK(net_addr_parse("127.0.0.1:0", &cfg.addr) == 0);
    cfg.addr.in4.sin_port = htons(srv.port);
    HDT_CHECK(derp_client_connect(s, &cfg, &cb, NULL, &t.a) == 0);
    HDT_CHECK(derp_client_connect(s, &cfg, &cb, NULL, &t.b) == 0);
    hd_timer_init(&t.tick, tick);
    hd_timer_start(s, &t.tick, 1);
}

static const struct hd_module *const layers[] = {&tls_module}; /* net: tls requires it */

static void shard_stop(struct hd_shard *s)
{
    hd_timer_stop(s, &t.tick);
    if (t.a)
        derp_client_abort(t.a, -ECANCELED);
    if (t.b)
        derp_client_abort(t.b, -ECANCELED);
}

Test(test_conformance_rate_tls, paced_over_tls_in_order_nothing_lost)
{
    memset(&t, 0, sizeof(t));
    struct hdt_options o = {
        .shards = 1, .layers = layers, .layers_count = 1, .shard_stop = shard_stop};
    cr_assert_eq(hdt_run(&o, body, NULL, NULL), 0);
    cr_assert(!t.timed_out, "timed out: ready %u, got %u of %u", t.ready, t.got, PKTS);
    cr_assert_eq(t.send_errors, 0);
    cr_assert_eq(t.bad, 0, "packets from the wrong source, cut or out of order");
    cr_assert_eq(t.early_close, 0, "a client closed before the end");
    int64_t took = (int64_t)(t.done_ms - t.sent_ms);
    int64_t min = (int64_t)((double)(PKTS * COST - BURST) * 1000.0 / RATE * 0.8);
    cr_assert_geq(took, min, "%d packets took %lld ms (at least %lld)", PKTS, (long long)took,
                  (long long)min);
    int64_t v = -1;
    CONF_OK(conf_varz(&srv, "derp_packets_dropped", true, &v));
    cr_assert_eq(v, 0, "paced, not dropped");
    CONF_OK(conf_varz(&srv, "derp_rate_limit_per_client_waited", false, &v));
    cr_assert_gt(v, 0);
    conf_server_stop_clean(&srv);
}
