/* test_ws_conn.c - the WebSocket codec on real loopback connections, both roles: a client sends
 * a mock upgrade request and its first WebSocket message (masked by hand) in one write, so the
 * server's switch finds codec input behind the request head; the server answers the 101 and the
 * echo of that message in one write, so the client's switch does too. Then 2 MiB per client
 * stream through both codecs (client chunks of 60 KiB become 16 KiB masked messages), echoed
 * back and checked byte by byte, while every server connection moves to the other shard
 * mid-stream; the client ends with a close frame that the server echoes (-ESHUTDOWN there, 0
 * here). With and without the buffer ring (2 KiB receives: headers split everywhere). */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"
#include <hd/net.h>
#include "net_test_util.h"
#include <hd/net_ws.h>

#define SHARDS            2
#define CLIENTS_PER_SHARD 2
#define CLIENTS           (SHARDS * CLIENTS_PER_SHARD)
#define TOTAL             (2u << 20)
#define CHUNK             (60u * 1024u)
#define EARLY             64u /* stream bytes in the hand-made first message */
#define MOVE_AT           (1u << 20)

static const char request[] = "GET /ws HTTP/1.1\r\nUpgrade: websocket\r\n\r\n";
static const char response[] = "HTTP/1.1 101 Switching Protocols\r\n\r\n";

static struct {
    uint16_t port;
    bool no_buf_ring;
    struct net_listener *listeners[SHARDS];
    _Atomic unsigned server_closed, server_bad_reason, migrated, left;
} g;

/* The socket layer under the test module: net_module with this run's options. */
static const struct hd_module *const net_layers[] = {&net_module};

static void *const *net_layers_args(void)
{
    static struct net_shard_options opt;
    static void *args[] = {&opt};
    opt = (struct net_shard_options){.no_buf_ring = g.no_buf_ring};
    return args;
}

#define NET_LAYERS .layers = net_layers, .layers_args = net_layers_args(), .layers_count = 1

static void net_stop(struct hd_shard *s)
{
    if (g.listeners[hd_shard_id(s)])
        net_listener_stop(g.listeners[hd_shard_id(s)]);
    g.listeners[hd_shard_id(s)] = NULL;
}

/* ---------------------------------------------------------------- server: upgrade, then echo */

enum srv_phase { SRV_HTTP = 0, SRV_WS, SRV_MOVED };

static void srv_adopt(struct net_conn *c, void *arg)
{
    (void)arg;
    HDT_CHECK(c != NULL);
    HDT_CHECK(net_ws_active(c)); /* the codec came along */
    net_conn_set_app(c, net_conn_app_handler(c), (void *)(uintptr_t)SRV_MOVED);
    atomic_fetch_add(&g.migrated, 1);
}

static ssize_t srv_data(struct net_conn *c, const uint8_t *data, size_t len)
{
    enum srv_phase phase = (enum srv_phase)(uintptr_t)net_conn_app(c);
    if (phase == SRV_HTTP) {
        if (len < sizeof(request) - 1)
            return 0;
        HDT_CHECK(memcmp(data, request, sizeof(request) - 1) == 0);
        HDT_CHECK(len > sizeof(request) - 1); /* the first message came in the same read */
        HDT_CHECK(net_conn_send_copy(c, response, sizeof(response) - 1) == 0);
        HDT_CHECK(net_ws_start(c, true) == 0);
        net_conn_set_app(c, net_conn_app_handler(c), (void *)(uintptr_t)SRV_WS);
        return (ssize_t)(sizeof(request) - 1);
    }
    if (phase == SRV_WS && net_conn_stats(c)->bytes_in >= MOVE_AT) {
        unsigned here = hd_shard_id(net_conn_shard(c));
        HDT_CHECK(net_conn_migrate(c, (here + 1) % SHARDS, srv_adopt, NULL) == 0);
        return 0; /* offered again on the new shard */
    }
    int rc = net_conn_send_copy(c, data, len);
    return rc < 0 ? rc : (ssize_t)len;
}

static void srv_pressure(struct net_conn *c, bool paused)
{
    net_conn_pause_recv(c, paused);
}

static void srv_close(struct net_conn *c, int reason)
{
    (void)c;
    if (reason != -ESHUTDOWN) { /* the client's close frame, echoed */
        fprintf(stderr, "server connection closed: %d (%s)\n", reason, strerror(-reason));
        atomic_fetch_add(&g.server_bad_reason, 1);
    }
    atomic_fetch_add(&g.server_closed, 1);
}

static const struct net_conn_handler srv_handler = {
    .on_data = srv_data,
    .on_send_pressure = srv_pressure,
    .on_close = srv_close,
};

static void srv_accept(struct net_listener *l, int fd, const struct net_addr *peer, void *arg)
{
    (void)peer, (void)arg;
    struct net_conn *c;
    if (net_conn_adopt(net_listener_shard(l), fd, &srv_handler, (void *)(uintptr_t)SRV_HTTP, NULL,
                       &c) < 0)
        close(fd);
}

/* ---------------------------------------------------------------- clients */

struct client {
    struct hd_shard *s;
    struct net_conn *c;
    uint64_t seed, sent, got;
    bool upgraded, paused;
};
static struct client clients[CLIENTS];

static void client_fill(struct client *k)
{
    while (k->upgraded && !k->paused && k->sent < TOTAL) {
        struct hd_frame *f = hd_frame_get(k->s, CHUNK);
        HDT_CHECK(f != NULL);
        uint32_t n = (uint32_t)(TOTAL - k->sent < CHUNK ? TOTAL - k->sent : CHUNK);
        for (uint32_t i = 0; i < n; i++)
            f->data[i] = nt_stream_byte(k->seed, k->sent + i);
        int rc = net_conn_send(k->c, f, 0, n);
        hd_frame_unref(k->s, f);
        HDT_CHECK(rc == 0);
        k->sent += n;
    }
}

static ssize_t client_data(struct net_conn *c, const uint8_t *data, size_t len)
{
    struct client *k = net_conn_app(c);
    if (!k->upgraded) {
        if (len < sizeof(response) - 1)
            return 0;
        HDT_CHECK(memcmp(data, response, sizeof(response) - 1) == 0);
        HDT_CHECK(net_ws_start(c, false) == 0);
        k->upgraded = true;
        client_fill(k);
        return (ssize_t)(sizeof(response) - 1);
    }
    for (size_t i = 0; i < len; i++)
        HDT_CHECK(data[i] == nt_stream_byte(k->seed, k->got + i));
    k->got += len;
    HDT_CHECK(k->got <= TOTAL);
    if (k->got == TOTAL)
        HDT_CHECK(net_ws_close(c, NET_WS_CLOSE_NORMAL, "done", 0) == 0);
    return (ssize_t)len;
}

static void client_pressure(struct net_conn *c, bool paused)
{
    struct client *k = net_conn_app(c);
    k->paused = paused;
    if (!paused)
        client_fill(k);
}

/* The request and the first message (EARLY stream bytes, masked by hand) in one write. */
static void client_connected(struct net_conn *c, int res)
{
    HDT_CHECK(res == 0);
    struct client *k = net_conn_app(c);
    uint8_t buf[sizeof(request) + NET_WS_HEADER_MAX + EARLY];
    static const uint8_t key[4] = {0xa1, 0x07, 0x5e, 0xee};
    size_t n = sizeof(request) - 1;
    memcpy(buf, request, n);
    n += net_ws_header_write(buf + n, NET_WS_OP_BINARY, true, EARLY, key);
    for (uint32_t i = 0; i < EARLY; i++)
        buf[n + i] = nt_stream_byte(k->seed, i);
    net_ws_mask(buf + n, EARLY, key, 0);
    HDT_CHECK(net_conn_send_copy(c, buf, n + EARLY) == 0);
    k->sent = EARLY;
}

static void client_close(struct net_conn *c, int reason)
{
    struct client *k = net_conn_app(c);
    if (reason != 0 || k->got != TOTAL)
        fprintf(stderr, "client closed: %d (%s), got %llu\n", reason, strerror(-reason),
                (unsigned long long)k->got);
    HDT_CHECK(reason == 0 && k->got == TOTAL);
    if (atomic_fetch_sub(&g.left, 1) == 1)
        hd_runtime_stop(hd_shard_runtime(k->s));
}

static const struct net_conn_handler client_handler = {
    .on_data = client_data,
    .on_send_pressure = client_pressure,
    .on_connected = client_connected,
    .on_close = client_close,
};

static void body(struct hd_shard *s, void *arg)
{
    (void)arg;
    struct net_addr a;
    char text[32];
    snprintf(text, sizeof(text), "127.0.0.1:%u", g.port);
    HDT_CHECK(net_addr_parse(text, &a) == 0);
    struct net_listener_options lo = {.reuseport = true};
    HDT_CHECK(net_listener_start(s, &a, &lo, srv_accept, NULL, &g.listeners[hd_shard_id(s)]) == 0);
    for (unsigned i = 0; i < CLIENTS_PER_SHARD; i++) {
        struct client *k = &clients[hd_shard_id(s) * CLIENTS_PER_SHARD + i];
        k->s = s;
        k->seed = 77 + hd_shard_id(s) * 10 + i;
        HDT_CHECK(net_conn_connect(s, &a, 2000, &client_handler, k, NULL, &k->c) == 0);
    }
}

static void run(bool no_buf_ring)
{
    memset(&g, 0, sizeof(g));
    memset(clients, 0, sizeof(clients));
    g.port = nt_port_hold();
    g.no_buf_ring = no_buf_ring;
    g.left = CLIENTS;
    struct hdt_options o = {.shards = SHARDS, NET_LAYERS, .shard_stop = net_stop};
    cr_assert_eq(hdt_run(&o, body, NULL, NULL), 0);
    cr_assert_eq(atomic_load(&g.server_closed), CLIENTS);
    cr_assert_eq(atomic_load(&g.server_bad_reason), 0, "every server side ended by the close");
    cr_assert_eq(atomic_load(&g.migrated), CLIENTS, "every server connection moved");
}

Test(test_net_ws_conn, stream_both_roles_with_moves, .timeout = 120)
{
    run(false);
}

Test(test_net_ws_conn, stream_both_roles_small_receives, .timeout = 120)
{
    run(true);
}
