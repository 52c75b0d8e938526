/* conf_load.c - the 100 clients x 1,000 packets driver shared by test_conformance_load.c (plain
 * TCP) and test_conformance_tls.c (TLS): DERP clients (hd_derp_client on 2 real test shards)
 * against an already running hderp-server with 2 shards, every packet delivered exactly once to
 * the right key with the right source, none to anyone else. Sending goes in rounds (a 1 ms timer
 * per shard) so no receiver ever has more than CONF_LOAD_BATCH packets in flight: the relay's
 * 32-deep queues never drop, and any loss is a relay bug. Shard-side results are recorded in
 * atomics and asserted (criterion) on the test thread after the runtime stopped. Owns the
 * driver's state, one run at a time. Also the bystanders of an attack (conf_bystanders_*: a
 * pair and a ping client checked every round of a flood or a churn) and the suites' criterion
 * fixtures (conf_server_down, conf_server_stop_clean): the criterion-side half of the support
 * library lives here. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <stdatomic.h>
#include <string.h>

#include "conf_support.h"
#include "derp_client.h"
#include "harness.h"
#include <hd/tls.h>

#define LOAD_CLIENTS CONF_LOAD_CLIENTS
#define LOAD_PACKETS CONF_LOAD_PACKETS
#define LOAD_BATCH   CONF_LOAD_BATCH
#define LOAD_ROUNDS  (LOAD_PACKETS / LOAD_BATCH)
#define LOAD_TOTAL   (LOAD_CLIENTS * LOAD_PACKETS)
#define TEST_SHARDS  2

_Static_assert(LOAD_PACKETS % LOAD_BATCH == 0, "whole rounds");
_Static_assert(LOAD_BATCH < 32, "a round never fills a relay queue");

struct payload {
    uint32_t sender, seq, dst;
};

static struct {
    const struct conf_load_opts *o;
    struct derp_keypair kp[LOAD_CLIENTS];
    struct derp_client *k[LOAD_CLIENTS]; /* owned by the shard i % TEST_SHARDS */
    uint8_t seen[LOAD_CLIENTS][LOAD_PACKETS];
    atomic_uint ready, closed, round, bad, dups, connect_errors, send_errors, early_close;
    atomic_uint delivered, http_not_101;
    atomic_uint tls_done, tls_failed; /* summed over the test shards in shard_fini */
    atomic_bool timed_out;
    struct shard_state {
        struct hd_shard *s;
        struct hd_timer tick;
        unsigned my_round;
        uint64_t start_ms;
        bool closing;
    } sh[TEST_SHARDS];
} g;

static uint32_t dst_of(uint32_t i, uint32_t seq)
{
    return (i + 1 + seq) % LOAD_CLIENTS; /* per (round, j) a permutation of the clients */
}

static void on_ready(struct derp_client *k, const struct derp_server_info *info)
{
    (void)info;
    if (derp_client_http_status(k) != 101)
        atomic_fetch_add(&g.http_not_101, 1);
    atomic_fetch_add(&g.ready, 1);
}

static void on_packet(struct derp_client *k, const struct derp_pubkey *src, const uint8_t *data,
                      size_t len)
{
    uint32_t me = (uint32_t)(uintptr_t)derp_client_user(k);
    struct payload p;
    if (len != sizeof(p)) {
        atomic_fetch_add(&g.bad, 1);
        return;
    }
    memcpy(&p, data, sizeof(p));
    if (p.sender >= LOAD_CLIENTS || p.seq >= LOAD_PACKETS || p.dst != me ||
        dst_of(p.sender, p.seq) != me || !derp_pubkey_equal(src, &g.kp[p.sender].pub)) {
        atomic_fetch_add(&g.bad, 1);
        return;
    }
    /* (sender, seq) has one destination: only this shard touches this byte. */
    if (g.seen[p.sender][p.seq]++) {
        atomic_fetch_add(&g.dups, 1);
        return;
    }
    unsigned d = atomic_fetch_add(&g.delivered, 1) + 1;
    unsigned r = atomic_load(&g.round);
    if (d == (r + 1) * LOAD_CLIENTS * LOAD_BATCH)
        atomic_compare_exchange_strong(&g.round, &r, r + 1);
}

static void on_close(struct derp_client *k, int reason)
{
    uint32_t me = (uint32_t)(uintptr_t)derp_client_user(k);
    g.k[me] = NULL;
    if (!g.sh[me % TEST_SHARDS].closing || reason != 0)
        atomic_fetch_add(&g.early_close, 1);
    if (atomic_fetch_add(&g.closed, 1) + 1 == LOAD_CLIENTS)
        hd_runtime_stop(hd_shard_runtime(derp_client_shard(k)));
}

static const struct derp_client_callbacks cb = {
    .on_ready = on_ready,
    .on_packet = on_packet,
    .on_close = on_close,
};

static void send_round(unsigned id, unsigned round)
{
    for (uint32_t i = id; i < LOAD_CLIENTS; i += TEST_SHARDS)
        for (uint32_t j = 0; j < LOAD_BATCH; j++) {
            uint32_t seq = round * LOAD_BATCH + j;
            struct payload p = {i, seq, dst_of(i, seq)};
            if (!g.k[i] || derp_client_send(g.k[i], &g.kp[p.dst].pub, &p, sizeof(p)) != 0)
                atomic_fetch_add(&g.send_errors, 1);
        }
}

static void close_mine(struct shard_state *st, unsigned id)
{
    st->closing = true;
    for (uint32_t i = id; i < LOAD_CLIENTS; i += TEST_SHARDS)
        if (g.k[i])
            derp_client_close(g.k[i]);
}

static void tick(struct hd_timer *t)
{
    struct shard_state *st = hd_container_of(t, struct shard_state, tick);
    unsigned id = hd_shard_id(st->s);
    if (st->closing)
        return;
    if (hd_now_ms(st->s) - st->start_ms > g.o->deadline_ms) {
        atomic_store(&g.timed_out, true);
        close_mine(st, id);
        return;
    }
    if (atomic_load(&g.delivered) == LOAD_TOTAL) {
        close_mine(st, id);
        return;
    }
    if (atomic_load(&g.ready) == LOAD_CLIENTS && st->my_round < LOAD_ROUNDS &&
        st->my_round <= atomic_load(&g.round))
        send_round(id, st->my_round++);
    hd_timer_start(st->s, &st->tick, 1);
}

static void body(struct hd_shard *s, void *arg)
{
    (void)arg;
    unsigned id = hd_shard_id(s);
    struct shard_state *st = &g.sh[id];
    st->s = s;
    st->start_ms = hd_now_ms(s);
    struct derp_client_config cfg = {.read_timeout_ms = DERP_CLIENT_TIMEOUT_OFF};
    if (g.o->tls_ctx) {
        cfg.tls = true;
        cfg.tls_ctx = g.o->tls_ctx;
        cfg.host = g.o->host;
    }
    HDT_CHECK(net_addr_parse("127.0.0.1:0", &cfg.addr) == 0);
    cfg.addr.in4.sin_port = htons(g.o->srv->port);
    for (uint32_t i = id; i < LOAD_CLIENTS; i += TEST_SHARDS) {
        cfg.keypair = &g.kp[i];
        cfg.websocket = g.o->websocket_half && (i & 1);
        if (derp_client_connect(s, &cfg, &cb, (void *)(uintptr_t)i, &g.k[i]) != 0) {
            atomic_fetch_add(&g.connect_errors, 1);
            atomic_fetch_add(&g.closed, 1);
        }
    }
    hd_timer_init(&st->tick, tick);
    hd_timer_start(s, &st->tick, 1);
}

/* net always; tls too when the run has a TLS context. */
static const struct hd_module *const layers[] = {&net_module, &tls_module};

static void shard_stop(struct hd_shard *s)
{
    unsigned id = hd_shard_id(s);
    hd_timer_stop(s, &g.sh[id].tick);
    for (uint32_t i = id; i < LOAD_CLIENTS; i += TEST_SHARDS)
        if (g.k[i])
            derp_client_abort(g.k[i], -ECANCELED);
}

static void shard_fini(struct hd_shard *s)
{
    if (g.o->tls_ctx) {
        const struct tls_shard_stats *st = tls_shard_stats(s);
        atomic_fetch_add(&g.tls_done, (unsigned)st->handshakes_done);
        atomic_fetch_add(&g.tls_failed, (unsigned)st->handshakes_failed);
    }
}

/* What the run must show; the TLS checks only with a TLS context, as the two tests had them. */
static void check_results(const struct conf_load_opts *o)
{
    cr_assert(!atomic_load(&g.timed_out), "not done in time: %u of %u delivered, round %u",
              atomic_load(&g.delivered), LOAD_TOTAL, atomic_load(&g.round));
    cr_assert_eq(atomic_load(&g.connect_errors), 0);
    if (o->tls_ctx) {
        cr_assert_eq(atomic_load(&g.tls_done), LOAD_CLIENTS, "every client handshook TLS");
        cr_assert_eq(atomic_load(&g.tls_failed), 0);
        cr_assert_eq(atomic_load(&g.http_not_101), 0, "the upgrade over TLS answers 101");
    }
    cr_assert_eq(atomic_load(&g.send_errors), 0);
    cr_assert_eq(atomic_load(&g.early_close), 0, "a client closed before the end");
    cr_assert_eq(atomic_load(&g.bad), 0, "packets with a wrong src, dst or payload");
    cr_assert_eq(atomic_load(&g.dups), 0, "packets delivered twice");
    cr_assert_eq(atomic_load(&g.delivered), LOAD_TOTAL);
    for (unsigned i = 0; i < LOAD_CLIENTS; i++)
        for (unsigned s = 0; s < LOAD_PACKETS; s++)
            cr_assert_eq(g.seen[i][s], 1, "packet %u of %u", s, i);
    int64_t v = -1;
    cr_assert_eq(conf_varz(o->srv, "derp_packets_sent", false, &v), 0);
    cr_assert_eq(v, LOAD_TOTAL, "derp_packets_sent");
    cr_assert_eq(conf_varz(o->srv, "derp_packets_dropped", true, &v), 0);
    cr_assert_eq(v, 0, "derp_packets_dropped");
    cr_assert_eq(conf_varz_wait(o->srv, "derp_current_connections", 0, CONF_IO_TIMEOUT_MS, &v), 0,
                 "derp_current_connections %lld", (long long)v);
    if (o->websocket_half) {
        cr_assert_eq(conf_varz(o->srv, "derp_websocket_accepts", false, &v), 0);
        cr_assert_eq(v, LOAD_CLIENTS / 2, "derp_websocket_accepts");
    }
}

void conf_load_run(const struct conf_load_opts *o)
{
    cr_assert(o->srv && o->deadline_ms > 0 && (!o->tls_ctx || o->host));
    memset(&g, 0, sizeof(g));
    g.o = o;
    unsigned on_shard[2] = {0};
    for (unsigned i = 0; i < LOAD_CLIENTS; i++) {
        cr_assert_eq(derp_keypair_generate(&g.kp[i]), 0);
        on_shard[conf_key_shard(&g.kp[i].pub, 2)]++;
    }
    cr_assert(on_shard[0] > 0 && on_shard[1] > 0, "both relay shards own some keys");
    struct hdt_options ho = {.frame_classes = derp_client_frame_classes,
                             .frame_classes_count = DERP_CLIENT_FRAME_CLASSES_COUNT,
                             .shards = TEST_SHARDS,
                             .layers = layers,
                             .layers_count = o->tls_ctx ? 2 : 1,
                             .shard_stop = shard_stop,
                             .shard_fini = shard_fini};
    cr_assert_eq(hdt_run(&ho, body, NULL, NULL), 0);
    check_results(o);
    g.o = NULL;
}

void conf_server_down(struct conf_server *srv)
{
    if (srv->pid > 0)
        conf_server_stop(srv);
}

void conf_server_stop_clean(struct conf_server *srv)
{
    cr_assert_eq(conf_server_stop(srv), 0, "hderp-server exits 0 on SIGTERM");
}

void conf_bystanders_login(struct conf_bystanders *by, const struct conf_server *srv)
{
    CONF_OK(conf_raw_login(&by->a, srv, NULL, NULL));
    CONF_OK(conf_raw_login(&by->b, srv, NULL, NULL));
    CONF_OK(conf_raw_login(&by->p, srv, NULL, NULL));
}

void conf_bystanders_check(struct conf_bystanders *by, int i)
{
    uint8_t pkt[64] = {(uint8_t)i};
    CONF_OK(conf_raw_send_packet(&by->a, &by->b.kp.pub, pkt, sizeof(pkt)));
    struct derp_pubkey src;
    const uint8_t *d;
    size_t len;
    int rc = conf_raw_read_packet(&by->b, CONF_IO_TIMEOUT_MS, &src, &d, &len);
    cr_assert_eq(rc, 0, "bystander packet of round %d lost: %d", i, rc);
    cr_assert(len == sizeof(pkt) && d[0] == (uint8_t)i);
    rc = conf_raw_ping_pong(&by->p, (uint64_t)i, CONF_IO_TIMEOUT_MS);
    cr_assert_eq(rc, 0, "ping of round %d: %d", i, rc);
}

void conf_bystanders_every(struct conf_bystanders *by, int n, int round,
                           void (*step)(int i, void *arg), void *arg)
{
    for (int i = 0; i < n; i++) {
        step(i, arg);
        if (i % round == round - 1)
            conf_bystanders_check(by, i / round);
    }
}

void conf_bystanders_close(struct conf_bystanders *by)
{
    conf_raw_close(&by->p);
    conf_raw_close(&by->b);
    conf_raw_close(&by->a);
}
