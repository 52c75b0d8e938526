/* server_traffic.c - derper's /debug/traffic: every 2 s (minTimeBetweenLogs), a JSON line per
 * DERP connection whose byte counts grew since the last look: {"Sent": bytes written, "Recv":
 * bytes read, "Key": its node key, "UniqueSenders": how many keys sent it packets}, then an
 * empty line; until the client goes away. derper reads the counts from ss(8) (the kernel's
 * bytes_sent / bytes_received per TCP socket) and estimates UniqueSenders with a HyperLogLog
 * per client; hderp reads its own count of the bytes each connection wrote and read on its
 * socket, and the number of keys it keeps as the connection's sources (server_sources.c: the
 * keys that sent it a packet, while they are connected; exact, at most SRV_SOURCES_MAX). The
 * connections are gathered on every shard (hd_collect); the request lives on the shard that got
 * it. docs/DERPER-PARITY.md. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ops/server_debug.h"

#define TRAFFIC_INTERVAL_MS 2000u /* derper's minTimeBetweenLogs */

struct traffic_ent {
    uintptr_t id; /* the connection (a pointer: new connections may reuse one; harmless) */
    uint64_t sent, recv, senders;
    uint8_t key[DERP_KEY_LEN];
};

struct traffic_list {
    struct traffic_ent *v;
    uint32_t n;
};

struct traffic_req {
    const struct srv_config *cfg;
    unsigned instance;
    struct hd_shard *s;
    struct net_conn *conn; /* NULL once closed */
    bool collecting;       /* a collect in flight: it frees the request if the connection went */
    struct hd_timer timer;
    struct traffic_list *prev; /* per shard, sorted by id; NULL before the first look */
    unsigned shards;
};

static void add_clients(struct traffic_list *l, uint32_t cap, const struct srv_peer_table *t)
{
    for (uint32_t i = 0; i < t->cap && t->slots; i++)
        for (struct srv_client *cl = t->slots[i] ? t->slots[i]->clients : NULL; cl;
             cl = cl->peer_next) {
            if (cl->phase != SRV_CLIENT_ACTIVE || l->n == cap)
                continue;
            const struct net_conn_stats *st = net_conn_stats(cl->conn);
            struct traffic_ent *e = &l->v[l->n++];
            e->id = (uintptr_t)cl->conn;
            e->sent = st->bytes_out;
            e->recv = st->bytes_in;
            e->senders = cl->sources.count;
            memcpy(e->key, cl->key.bytes, DERP_KEY_LEN);
        }
}

static uint32_t count_clients(const struct srv_peer_table *t)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < t->cap && t->slots; i++)
        for (struct srv_client *cl = t->slots[i] ? t->slots[i]->clients : NULL; cl;
             cl = cl->peer_next)
            n++;
    return n;
}

static int by_id(const void *a, const void *b)
{
    uintptr_t x = ((const struct traffic_ent *)a)->id, y = ((const struct traffic_ent *)b)->id;
    return x < y ? -1 : x > y;
}

/* On each shard: its connections' counts (the list is the requesting shard's to free). */
static void fill(struct hd_shard *s, void *slot, void *arg)
{
    const struct traffic_req *r = arg;
    struct traffic_list *l = slot;
    struct srv_shard *ds = srv_shard_at(s, r->instance);
    if (ds == NULL)
        return;
    uint32_t cap = count_clients(&ds->peers) + count_clients(&ds->guests);
    l->v = cap ? malloc(cap * sizeof(*l->v)) : NULL;
    if (l->v == NULL)
        return;
    add_clients(l, cap, &ds->peers);
    add_clients(l, cap, &ds->guests);
    qsort(l->v, l->n, sizeof(*l->v), by_id);
}

/* The lines for one shard: its connections whose counts grew since prev. */
static void format_shard(struct srv_text *o, const struct traffic_list *now,
                         const struct traffic_list *prev)
{
    for (uint32_t i = 0; i < now->n; i++) {
        const struct traffic_ent *e = &now->v[i], *p = NULL;
        if (prev && prev->n)
            p = bsearch(e, prev->v, prev->n, sizeof(*e), by_id);
        if (p && p->sent >= e->sent && p->recv >= e->recv)
            continue;
        char hex[DERP_KEY_HEX_SIZE];
        derp_key_hex_format(e->key, hex);
        srv_text_put(o, "{\"Sent\":%llu,\"Recv\":%llu,\"Key\":\"nodekey:%s\"",
                     (unsigned long long)e->sent, (unsigned long long)e->recv, hex);
        if (e->senders) /* derper: omitzero */
            srv_text_put(o, ",\"UniqueSenders\":%llu", (unsigned long long)e->senders);
        srv_text_put(o, "}\n");
    }
}

static void free_lists(struct traffic_list *l, unsigned n)
{
    for (unsigned i = 0; l && i < n; i++)
        free(l[i].v);
}

static void req_free(struct traffic_req *r)
{
    free_lists(r->prev, r->shards);
    free(r->prev);
    free(r);
}

static void tick(struct hd_timer *t);

static void done(struct hd_shard *s, void *slots, unsigned count, void *arg)
{
    (void)s;
    struct traffic_req *r = arg;
    struct traffic_list *now = slots;
    r->collecting = false;
    if (r->conn == NULL) {
        free_lists(now, count);
        req_free(r);
        return;
    }
    size_t cap = 256;
    for (unsigned i = 0; i < count; i++)
        cap += (size_t)now[i].n * 200;
    struct srv_text o = {malloc(cap), 0, cap};
    if (r->prev == NULL) {
        r->prev = calloc(count, sizeof(*r->prev));
        r->shards = r->prev ? count : 0;
    }
    if (o.buf == NULL || r->prev == NULL) {
        free(o.buf);
        free_lists(now, count);
        net_conn_close(r->conn, -ENOMEM, false);
        return;
    }
    for (unsigned i = 0; i < count && i < r->shards; i++) {
        format_shard(&o, &now[i], &r->prev[i]);
        free(r->prev[i].v);
        r->prev[i] = now[i];
    }
    srv_text_put(&o, "\n"); /* derper's Fprintln after each look */
    int rc = net_conn_send_copy(r->conn, o.buf, o.len);
    free(o.buf);
    if (rc < 0) {
        net_conn_close(r->conn, rc, false);
        return;
    }
    hd_timer_start(r->s, &r->timer, TRAFFIC_INTERVAL_MS);
}

static void look(struct traffic_req *r)
{
    r->collecting = true;
    if (hd_collect(r->s, sizeof(struct traffic_list), fill, done, r) < 0) {
        r->collecting = false; /* the bus is full: next time */
        hd_timer_start(r->s, &r->timer, TRAFFIC_INTERVAL_MS);
    }
}

static void tick(struct hd_timer *t)
{
    look(hd_container_of(t, struct traffic_req, timer));
}

static ssize_t traffic_data(struct net_conn *c, const uint8_t *data, size_t len)
{
    (void)c, (void)data;
    return (ssize_t)len; /* nothing more is read on this connection */
}

static void traffic_closed(struct net_conn *c, int reason)
{
    (void)reason;
    struct traffic_req *r = net_conn_app(c);
    srv_prelogin_leave(srv_shard_at(net_conn_shard(c), r->instance), net_conn_peer(c));
    hd_timer_stop(r->s, &r->timer);
    r->conn = NULL;
    if (!r->collecting)
        req_free(r);
}

static const struct net_conn_handler traffic_handler = {
    .on_data = traffic_data,
    .on_close = traffic_closed,
};

void srv_traffic_request(struct srv_shard *ds, struct net_conn *c, bool head_only)
{
    char head[256];
    struct net_http_hdr type = {"Content-Type", NET_HTTP_LIT("text/plain; charset=utf-8")};
    struct net_http_resp_spec spec = {.status = 200,
                                      .headers = &type,
                                      .headers_count = 1,
                                      .content_length = -1, /* the body ends with the close */
                                      .connection = NET_HTTP_CONN_CLOSE};
    int n = net_http_write_resp(head, sizeof(head), &spec);
    if (n <= 0 || net_conn_send_copy(c, head, (size_t)n) < 0) {
        net_conn_close(c, -ENOBUFS, false);
        return;
    }
    struct traffic_req *r = head_only ? NULL : calloc(1, sizeof(*r));
    if (r == NULL) {
        net_conn_close(c, 0, true);
        return;
    }
    r->cfg = ds->cfg;
    r->instance = ds->instance;
    r->s = ds->s;
    r->conn = c;
    hd_timer_init(&r->timer, tick);
    net_conn_set_app(c, &traffic_handler, r);
    net_conn_pause_recv(c, true);
    net_conn_set_deadline(c, 0); /* it streams until the client goes: no read deadline */
    uint32_t idle, write;
    net_conn_timeouts(c, &idle, &write);
    net_conn_set_timeouts(c, 0, write);
    look(r);
}
