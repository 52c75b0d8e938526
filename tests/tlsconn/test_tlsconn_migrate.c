/* test_tlsconn_migrate.c - live userspace-TLS connections move to another shard mid-stream:
 * 2 shards, a TLS echo server whose every connection moves to the other shard after ~1 MiB (and
 * in one case back again, 0->1->0; in another twelve times under send pressure), our TLS clients on
 * both shards streaming 8 MiB each way, checksummed byte by byte. Not a byte may be lost,
 * duplicated or reordered: the record keys leave as plain secrets and sequence numbers and are
 * re-keyed on the new shard, and the queued plaintext, the app's unconsumed tail and any partial
 * record travel with the connection. Runs on the test thread (Criterion) and the two shard threads
 * (handlers). */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include <hd/net_codec.h>
#include <hd/tls.h>
#include "tlsconn_util.h"

static void suite_init(void)
{
    tu_check_boringssl();
}

TestSuite(test_tlsconn_migrate, .init = suite_init, .timeout = 180);

#define SHARDS            2
#define CLIENTS_PER_SHARD 2
#define CONNS             (SHARDS * CLIENTS_PER_SHARD)
#define CHUNK             (60u * 1024u)
#define BULK_BYTES        (8ull << 20) /* each way, per connection */
#define MOVES_MAX         12
/* A stalled stream (a lost byte leaves both ends waiting) closes its client with -ETIMEDOUT
 * instead of hanging the test: far longer than any pause of a healthy loopback stream. */
#define STALL_TIMEOUT_MS 10000u
/* Raw bytes received (TLS overhead included) before a server connection's first move. */
#define FIRST_MOVE_AT (1ull << 20)

/* One server connection, followed across its moves (the app state travels by pointer). */
struct sconn {
    unsigned accepted_on, moves_wanted, moves;
    unsigned left[MOVES_MAX], arrived[MOVES_MAX];
    bool codec_ok[MOVES_MAX]; /* the TLS record codec was still installed on arrival */
    bool moving, closed, handshaken;
    bool recv_paused; /* this app paused recv for send pressure and waits to be told to resume */
    int mode, close_reason;
    unsigned close_shard;
    uint64_t echoed;
};

struct client {
    struct hd_shard *s;
    struct net_conn *c;
    uint64_t seed, total, sent, got;
    bool paused, bad, handshaken, closed;
    int mode, close_reason;
};

static struct {
    uint16_t port;
    unsigned moves_wanted;
    uint64_t move_every; /* raw bytes between one move and the next */
    bool squeeze;        /* each move starts with recv paused for send pressure (srv_move) */
    bool listen_s0_only; /* every server connection starts on shard 0 */
    struct tls_ctx *server_ctx, *client_ctx;
    struct net_listener *listeners[SHARDS];
    struct sconn sconns[CONNS];
    struct client clients[CONNS];
    _Atomic unsigned sconns_used;
    _Atomic unsigned closes; /* clients' and server connections' */
} g;

/* The last of all 2 * CONNS closes stops the runtime. */
static void count_close(struct hd_shard *s)
{
    if (atomic_fetch_add(&g.closes, 1) + 1 == 2 * CONNS)
        hd_runtime_stop(hd_shard_runtime(s));
}

/* ---------------------------------------------------------------- server */

static ssize_t srv_data(struct net_conn *c, const uint8_t *data, size_t len);
static void srv_adopt(struct net_conn *c, void *arg);

static bool move_due(struct net_conn *c, const struct sconn *sc)
{
    return !sc->moving && sc->moves < sc->moves_wanted &&
           net_conn_stats(c)->bytes_in >= FIRST_MOVE_AT + sc->moves * g.move_every;
}

static void move_begin(struct net_conn *c, struct sconn *sc)
{
    unsigned here = hd_shard_id(net_conn_shard(c));
    sc->left[sc->moves] = here;
    sc->moving = true;
    HDT_CHECK(net_conn_migrate(c, (here + 1) % hd_shard_count(net_conn_shard(c)), srv_adopt, sc) ==
              0);
}

static void srv_pressure(struct net_conn *c, bool paused)
{
    struct sconn *sc = net_conn_app(c);
    sc->recv_paused = paused;
    net_conn_pause_recv(c, paused); /* the source is our own reader: stop it */
}

static void srv_eof(struct net_conn *c)
{
    net_conn_close(c, 0, true);
}

static void srv_close(struct net_conn *c, int reason)
{
    struct sconn *sc = net_conn_app(c);
    if (reason != 0)
        fprintf(stderr, "server connection closed: %s\n", strerror(-reason));
    sc->closed = true;
    sc->close_reason = reason;
    sc->close_shard = hd_shard_id(net_conn_shard(c));
    count_close(net_conn_shard(c));
}

static const struct net_conn_handler srv_handler = {
    .on_data = srv_data,
    .on_send_pressure = srv_pressure,
    .on_eof = srv_eof,
    .on_close = srv_close,
};

/* Echo half of what is here, then move: that half is still queued as plaintext (nothing is
 * sealed while a move waits) and the other half stays unconsumed, so both the send queue and
 * the app's tail travel, besides whatever records and raw bytes are buffered.
 * Squeezed: watermarks just above what is queued make that echo pause recv for pressure before
 * the move starts, and a send still in flight that completes during the move's wait drops the
 * queue back under the low mark: on_send_pressure(false) resumes recv, in the middle of the
 * move (adopt restores the defaults). */
static ssize_t srv_move(struct net_conn *c, struct sconn *sc, const uint8_t *data, size_t len)
{
    size_t half = len / 2;
    if (g.squeeze && half > 0) {
        uint32_t q = (uint32_t)net_conn_queued_bytes(c);
        net_conn_set_limits(c, q + 1, q, NET_SEND_MAX_DEFAULT);
    }
    if (half > 0) {
        int rc = net_conn_send_copy(c, data, half);
        if (rc < 0)
            return rc;
        sc->echoed += half;
    }
    move_begin(c, sc);
    return (ssize_t)half; /* the rest is offered again on the new shard */
}

static ssize_t srv_data(struct net_conn *c, const uint8_t *data, size_t len)
{
    struct sconn *sc = net_conn_app(c);
    HDT_CHECK(!sc->moving); /* once a move starts, the old shard hears nothing more */
    if (move_due(c, sc))
        return srv_move(c, sc, data, len);
    int rc = net_conn_send_copy(c, data, len);
    if (rc < 0)
        return rc;
    sc->echoed += len;
    return (ssize_t)len;
}

/* On the destination shard. */
static void srv_adopt(struct net_conn *c, void *arg)
{
    struct sconn *sc = arg;
    HDT_CHECK(c != NULL); /* the destination's pool has room for every connection here */
    HDT_CHECK(sc->moving && sc->moves < MOVES_MAX);
    const struct net_codec *codec = net_conn_codec(c, NULL);
    sc->arrived[sc->moves] = hd_shard_id(net_conn_shard(c));
    sc->codec_ok[sc->moves] = codec != NULL && strcmp(codec->name, "tls-records") == 0;
    sc->moves++;
    sc->moving = false;
    net_conn_set_app(c, &srv_handler, sc);
    if (g.squeeze)
        net_conn_set_limits(c, NET_SEND_HIGH_DEFAULT, NET_SEND_LOW_DEFAULT, NET_SEND_MAX_DEFAULT);
    /* Receiving resumes on the new shard; an app still waiting for on_send_pressure(false)
     * pauses it again, and relies on hearing that call here. */
    if (sc->recv_paused)
        net_conn_pause_recv(c, true);
}

static void srv_handshake(struct net_conn *c, const struct tls_conn_info *info)
{
    struct sconn *sc = net_conn_app(c);
    sc->handshaken = true;
    sc->mode = (int)info->mode;
}

static void srv_accept(struct net_listener *l, int fd, const struct net_addr *peer, void *arg)
{
    (void)peer, (void)arg;
    unsigned i = atomic_fetch_add(&g.sconns_used, 1);
    HDT_CHECK(i < CONNS);
    struct sconn *sc = &g.sconns[i];
    sc->accepted_on = hd_shard_id(net_listener_shard(l));
    sc->moves_wanted = g.moves_wanted;
    struct net_conn *c;
    HDT_CHECK(net_conn_adopt(net_listener_shard(l), fd, &srv_handler, sc, NULL, &c) == 0);
    struct tls_conn_options o = {.on_handshake = srv_handshake,
                                 .idle_timeout_ms = STALL_TIMEOUT_MS};
    HDT_CHECK(tls_conn_start(c, g.server_ctx, &o) == 0);
}

/* ---------------------------------------------------------------- clients */

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
    if (k->got >= k->total)
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
    struct client *k = net_conn_app(c);
    if (reason != 0)
        fprintf(stderr, "client closed: %s (sent %llu got %llu)\n", strerror(-reason),
                (unsigned long long)k->sent, (unsigned long long)k->got);
    k->closed = true;
    k->close_reason = reason;
    count_close(net_conn_shard(c));
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

static void client_start(struct hd_shard *s, struct client *k)
{
    struct net_addr a;
    char text[32];
    snprintf(text, sizeof(text), "127.0.0.1:%u", g.port);
    HDT_CHECK(net_addr_parse(text, &a) == 0);
    HDT_CHECK(net_conn_connect(s, &a, 5000, &client_handler, k, NULL, &k->c) == 0);
    struct tls_conn_options o = {.server_name = "localhost",
                                 .on_handshake = client_handshake,
                                 .idle_timeout_ms = STALL_TIMEOUT_MS};
    HDT_CHECK(tls_conn_start(k->c, g.client_ctx, &o) == 0);
    client_fill(k); /* queued during the handshake: sealed once it ends */
}

/* ---------------------------------------------------------------- shards */

/* Userspace records always: a kTLS connection has no codec state left to move. */
static struct tls_shard_options tls_opts = {.ktls_disable = true};
static const struct hd_module *const layers[] = {&net_module, &tls_module};
static void *const layers_args[] = {NULL, &tls_opts};

static void shard_stop(struct hd_shard *s)
{
    unsigned id = hd_shard_id(s);
    if (g.listeners[id])
        net_listener_stop(g.listeners[id]);
    g.listeners[id] = NULL;
}

static void clients_start(struct hd_shard *s)
{
    unsigned id = hd_shard_id(s);
    for (unsigned i = 0; i < CLIENTS_PER_SHARD; i++) {
        struct client *k = &g.clients[id * CLIENTS_PER_SHARD + i];
        k->s = s;
        k->seed = 9000 + id * 10 + i;
        k->total = BULK_BYTES;
        client_start(s, k);
    }
}

static void clients_start_msg(struct hd_shard *s, const struct hd_msg *m)
{
    (void)m;
    clients_start(s);
}

/* Listen (on every shard, or on shard 0 only), then start this shard's clients; with one
 * listener, shard 1's clients start once shard 0 listens (it tells shard 1 over the bus). */
static void body(struct hd_shard *s, void *arg)
{
    (void)arg;
    unsigned id = hd_shard_id(s);
    HDT_CHECK(id < SHARDS);
    if (g.listen_s0_only && id != 0)
        return;
    struct net_addr a;
    char text[32];
    snprintf(text, sizeof(text), "127.0.0.1:%u", g.port);
    HDT_CHECK(net_addr_parse(text, &a) == 0);
    HDT_CHECK(net_listener_start(s, &a, NULL, srv_accept, NULL, &g.listeners[id]) == 0);
    clients_start(s);
    if (g.listen_s0_only) {
        struct hd_msg m = {.fn = clients_start_msg};
        HDT_CHECK(hd_bus_send(s, 1, &m) == 0);
    }
}

/* ---------------------------------------------------------------- the runs */

static void check_server_conn(unsigned i, const struct sconn *sc)
{
    cr_assert(sc->handshaken, "server conn %u: no handshake", i);
    cr_assert_eq(sc->mode, TLS_MODE_USERSPACE, "server conn %u", i);
    cr_assert(sc->closed, "server conn %u never closed", i);
    cr_assert_eq(sc->close_reason, 0, "server conn %u: %s", i, strerror(-sc->close_reason));
    cr_assert_eq(sc->moves, sc->moves_wanted, "server conn %u moved %u times", i, sc->moves);
    cr_assert_eq(sc->echoed, BULK_BYTES, "server conn %u echoed %llu", i,
                 (unsigned long long)sc->echoed);
    if (g.listen_s0_only)
        cr_assert_eq(sc->accepted_on, 0, "server conn %u accepted on s%u", i, sc->accepted_on);
    unsigned at = sc->accepted_on;
    for (unsigned m = 0; m < sc->moves; m++) {
        cr_assert_eq(sc->left[m], at, "server conn %u move %u left from s%u", i, m, sc->left[m]);
        cr_assert_eq(sc->arrived[m], (at + 1) % SHARDS, "server conn %u move %u: s%u -> s%u", i, m,
                     sc->left[m], sc->arrived[m]);
        cr_assert(sc->codec_ok[m], "server conn %u move %u: arrived without its TLS codec", i, m);
        at = sc->arrived[m];
    }
    cr_assert_eq(sc->close_shard, at, "server conn %u closed on s%u, lives on s%u", i,
                 sc->close_shard, at);
}

struct run_options {
    unsigned moves;
    uint64_t move_every;
    bool squeeze, listen_s0_only;
};

static void run(const struct run_options *ro)
{
    memset(&g, 0, sizeof(g));
    g.port = tu_port_hold();
    g.moves_wanted = ro->moves;
    g.move_every = ro->move_every;
    g.squeeze = ro->squeeze;
    g.listen_s0_only = ro->listen_s0_only;
    cr_assert_leq(ro->moves, MOVES_MAX);
    /* Every move happens mid-stream, with bytes still flowing both ways. */
    cr_assert_lt(FIRST_MOVE_AT + ro->moves * ro->move_every, BULK_BYTES);
    struct tls_server_options so = {.self_signed_host = "localhost"};
    cr_assert_eq(tls_server_ctx_create(&so, &g.server_ctx), 0);
    struct tls_client_options co = {.insecure = true};
    cr_assert_eq(tls_client_ctx_create(&co, &g.client_ctx), 0);
    struct hdt_options o = {.shards = SHARDS,
                            .layers = layers,
                            .layers_args = layers_args,
                            .layers_count = 2,
                            .shard_stop = shard_stop};
    int rc = hdt_run(&o, body, NULL, NULL);
    tls_ctx_destroy(g.server_ctx);
    tls_ctx_destroy(g.client_ctx);
    cr_assert_eq(rc, 0);
    for (unsigned i = 0; i < CONNS; i++) {
        const struct client *k = &g.clients[i];
        cr_assert(k->handshaken, "client %u: no handshake", i);
        cr_assert_eq(k->mode, TLS_MODE_USERSPACE, "client %u", i);
        cr_assert(k->closed && k->close_reason == 0, "client %u: %s", i,
                  strerror(-k->close_reason));
        cr_assert_eq(k->sent, BULK_BYTES, "client %u sent %llu", i, (unsigned long long)k->sent);
        cr_assert_eq(k->got, BULK_BYTES, "client %u got %llu", i, (unsigned long long)k->got);
        cr_assert(!k->bad, "client %u: lost, duplicated, reordered or corrupted bytes", i);
    }
    cr_assert_eq(atomic_load(&g.sconns_used), CONNS);
    for (unsigned i = 0; i < CONNS; i++)
        check_server_conn(i, &g.sconns[i]);
}

/* Every server connection moves to the other shard after ~1 MiB while both sides keep
 * streaming. */
Test(test_tlsconn_migrate, every_conn_moves_once_mid_stream)
{
    run(&(struct run_options){.moves = 1});
}

/* Every server connection starts on shard 0 and moves 0->1 after ~1 MiB, then 1->0 2 MiB
 * later: re-keyed twice, the second time in the pool of the shard it started on. */
Test(test_tlsconn_migrate, every_conn_moves_there_and_back)
{
    run(&(struct run_options){.moves = 2, .move_every = 2ull << 20, .listen_s0_only = true});
}

/* Twelve moves per connection, one every 512 KiB, each starting with recv paused for send
 * pressure (srv_move): a send in flight when the move starts is common, and its completion
 * must not resume recv on the shard being left. */
Test(test_tlsconn_migrate, ping_pong_under_send_pressure)
{
    run(&(struct run_options){.moves = MOVES_MAX, .move_every = 512u << 10, .squeeze = true});
}
