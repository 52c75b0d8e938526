/* ktls_layer_ends.c: the runtime side of ktls_layer_test: both kinds of our ends (clients that
 * start when their phase does, the server every shard listens with), and the shards' hooks. Each
 * end is touched by its shard only. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "ktls_layer_impl.h"

/* The server end that named client id, or NULL. */
struct lt_end *lt_server_of(unsigned id)
{
    for (unsigned i = 0; i < LT_SERVERS_MAX; i++)
        if (g.servers[i].id == (int)id)
            return &g.servers[i];
    return NULL;
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

void lt_end_take(struct lt_end *e, const uint8_t *data, size_t len)
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
    lt_end_take(k, data, len);
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
    lt_end_take(e, data + off, len - off);
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

void lt_body(struct hd_shard *s, void *arg)
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
static struct net_shard_options lt_net_opts = {.no_buf_ring_shards = 1u << 1};
const struct hd_module *const lt_layers[2] = {&net_module, &tls_module};
void *const lt_layers_args[2] = {&lt_net_opts, NULL};

int lt_shard_init(struct hd_shard *s)
{
    g.ring[hd_shard_id(s)] = net_shard_uses_buf_ring(s);
    return 0;
}

void lt_shard_stop(struct hd_shard *s)
{
    unsigned id = hd_shard_id(s);
    g.stats[id] = *tls_shard_stats(s);
    hd_timer_stop(s, &g.poll[id]);
    if (g.listeners[id])
        net_listener_stop(g.listeners[id]);
    g.listeners[id] = NULL;
    net_shard_close_all(s, 0);
}
