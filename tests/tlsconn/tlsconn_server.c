/* tlsconn_server.c - see tlsconn_server.h. Handlers run on the shards; ts_run on the test
 * thread. */
#define _GNU_SOURCE
#include "tlsconn_server.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "tlsconn_util.h"

struct ts_state ts;

void ts_reset(void)
{
    memset(&ts, 0, sizeof(ts));
    ts.port = tu_port_hold();
}

static const char http_reply[] = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                                 "Content-Length: 17\r\nConnection: close\r\n\r\n"
                                 "hello from hderp\n";

static ssize_t srv_data(struct net_conn *c, const uint8_t *data, size_t len)
{
    if (!ts.http) {
        int rc = net_conn_send_copy(c, data, len);
        return rc < 0 ? rc : (ssize_t)len;
    }
    if (memmem(data, len, "\r\n\r\n", 4) == NULL)
        return 0; /* wait for the whole request head */
    HDT_CHECK(len >= 14 && memcmp(data, "GET / HTTP/1.1", 14) == 0);
    HDT_CHECK(net_conn_send_copy(c, http_reply, sizeof(http_reply) - 1) == 0);
    net_conn_close(c, 0, true);
    return (ssize_t)len;
}

static void srv_eof(struct net_conn *c)
{
    net_conn_close(c, 0, true);
}

static void srv_close(struct net_conn *c, int reason)
{
    const struct tls_shard_stats *st = tls_shard_stats(net_conn_shard(c));
    /* Stats are per shard and cumulative: keep the largest value seen. */
    if (st->key_updates_in > atomic_load(&ts.key_updates_in))
        atomic_store(&ts.key_updates_in, st->key_updates_in);
    if (st->key_updates_out > atomic_load(&ts.key_updates_out))
        atomic_store(&ts.key_updates_out, st->key_updates_out);
    if (st->handshakes_refused > atomic_load(&ts.refused))
        atomic_store(&ts.refused, st->handshakes_refused);
    if (st->record_errors > atomic_load(&ts.record_errors))
        atomic_store(&ts.record_errors, st->record_errors);
    if (st->early_bytes > atomic_load(&ts.early_bytes))
        atomic_store(&ts.early_bytes, st->early_bytes);
    unsigned i = atomic_fetch_add(&ts.closes, 1);
    if (i < TS_CLOSES_MAX)
        atomic_store(&ts.reasons[i], reason);
}

static void srv_pressure(struct net_conn *c, bool paused)
{
    net_conn_pause_recv(c, paused); /* the source is our own reader: stop it */
}

static const struct net_conn_handler srv_handler = {
    .on_data = srv_data,
    .on_send_pressure = srv_pressure,
    .on_eof = srv_eof,
    .on_close = srv_close,
};

static void srv_handshake(struct net_conn *c, const struct tls_conn_info *info)
{
    (void)c;
    snprintf(ts.sni, sizeof(ts.sni), "%s", info->server_name);
    snprintf(ts.alpn, sizeof(ts.alpn), "%s", info->alpn);
    atomic_store(&ts.mode, (int)info->mode);
    HDT_CHECK(info->version == 0x0304);
    atomic_fetch_add(&ts.handshakes, 1);
}

static void srv_accept(struct net_listener *l, int fd, const struct net_addr *peer, void *arg)
{
    (void)peer, (void)arg;
    struct net_conn *c;
    if (net_conn_adopt(net_listener_shard(l), fd, &srv_handler, NULL, NULL, &c) < 0) {
        close(fd);
        return;
    }
    struct tls_conn_options o = {.handshake_timeout_ms = ts.handshake_timeout_ms,
                                 .on_handshake = srv_handshake};
    int rc = tls_conn_start(c, ts.ctx, &o);
    if (rc < 0)
        net_conn_close(c, rc, false);
}

const struct hd_module *const ts_layers[2] = {&net_module, &tls_module};

void *const *ts_layers_args(void)
{
    static struct tls_shard_options o;
    static void *args[] = {NULL, &o};
    o = (struct tls_shard_options){.handshakes_max = ts.handshakes_max};
    return args;
}

void ts_shard_stop(struct hd_shard *s)
{
    unsigned id = hd_shard_id(s);
    if (id < TS_SHARDS_MAX && ts.listeners[id])
        net_listener_stop(ts.listeners[id]);
    if (id < TS_SHARDS_MAX)
        ts.listeners[id] = NULL;
}

void ts_listen_body(struct hd_shard *s, void *arg)
{
    (void)arg;
    struct net_addr a;
    char text[32];
    snprintf(text, sizeof(text), "127.0.0.1:%u", ts.port);
    HDT_CHECK(net_addr_parse(text, &a) == 0);
    HDT_CHECK(hd_shard_id(s) < TS_SHARDS_MAX);
    HDT_CHECK(net_listener_start(s, &a, NULL, srv_accept, NULL, &ts.listeners[hd_shard_id(s)]) ==
              0);
    atomic_store(&ts.rt, hd_shard_runtime(s));
    atomic_fetch_add(&ts.listening, 1);
}

static void (*drv_fn)(void);
static hdt_body_fn *drv_body;

static void run_body(struct hd_shard *s, void *arg)
{
    ts_listen_body(s, arg);
    if (drv_body)
        drv_body(s, arg);
}
static unsigned drv_shards, drv_closes;

static void *driver_main(void *arg)
{
    (void)arg;
    for (int i = 0; i < 500 && atomic_load(&ts.listening) < drv_shards; i++)
        usleep(10000);
    if (atomic_load(&ts.listening) == drv_shards && drv_fn)
        drv_fn();
    for (int i = 0; i < 2000 && atomic_load(&ts.closes) < drv_closes; i++)
        usleep(10000);
    while (atomic_load(&ts.rt) == NULL)
        usleep(1000);
    hd_runtime_stop(atomic_load(&ts.rt));
    return NULL;
}

void ts_run(unsigned shards, void (*driver)(void), unsigned closes_expected)
{
    ts_run_with(shards, driver, NULL, closes_expected);
}

void ts_run_with(unsigned shards, void (*driver)(void), hdt_body_fn *body, unsigned closes_expected)
{
    drv_fn = driver;
    drv_body = body;
    drv_shards = shards;
    drv_closes = closes_expected;
    struct hdt_options o = {.shards = shards, TS_LAYERS, .shard_stop = ts_shard_stop};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, driver_main, NULL), 0);
    /* The runtime outlives the driver thread, which may still call hd_runtime_stop on it when
     * the runtime stopped by itself (ASan saw that use after free in a CI dry run). */
    struct hd_runtime *rt = NULL;
    int rc = hdt_run(&o, run_body, NULL, &rt);
    pthread_join(t, NULL);
    if (rt)
        hd_runtime_destroy(rt);
    cr_assert_eq(rc, 0);
}
