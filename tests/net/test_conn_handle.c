/* test_conn_handle.c - what a second app needed from connections (issue 27), on real loopback
 * sockets with a blocking client on its own thread:
 *   - a connection addressed by handle from another shard (net_conn_send_to, net_conn_close_to)
 *     and from its own shard (queued, not run inside the call), a stale handle counted;
 *   - net_conn_reoffer: bytes on_data kept are offered again with no new bytes and no pause;
 *   - on_deadline: the app writes a last line before the deadline closes the connection.
 * Shard 0 listens; shard 1 only sends. */
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <hd/net.h>

#include "harness.h"
#include "net_test_util.h"

enum mode { MODE_HANDLE, MODE_REOFFER, MODE_DEADLINE };

static struct {
    enum mode mode;
    uint16_t port;
    struct net_listener *listener;
    struct hd_timer poll[2];
    struct net_conn *conn;   /* shard 0's connection */
    _Atomic uint64_t handle; /* its handle, for shard 1 */
    _Atomic int closed;      /* on_close ran */
    _Atomic int stale_sent;  /* shard 1 sent to the handle after the close */
    _Atomic int stale_ok;    /* shard 0 counted it */
    bool own_reentered;      /* net_conn_send_to(own shard) sent inside the call */
    bool ready;              /* MODE_REOFFER: on_data may consume now */
    unsigned offers;         /* on_data calls */
    int paused_seen;         /* on_data ran with receive paused (never expected) */
    char got[256];           /* what the client read until EOF */
    _Atomic int client_done;
} g;

static const struct hd_module *const layers[] = {&net_module};

static struct hd_frame *frame_of(struct hd_shard *s, const char *text)
{
    struct hd_frame *f = hd_frame_get(s, strlen(text));
    HDT_CHECK(f != NULL);
    memcpy(f->data, text, strlen(text));
    return f;
}

static ssize_t srv_data(struct net_conn *c, const uint8_t *data, size_t len)
{
    struct hd_shard *s = net_conn_shard(c);
    (void)data;
    g.offers++;
    if (g.mode == MODE_HANDLE) {
        struct hd_handle h = net_conn_handle(c);
        HDT_CHECK(net_conn_by_handle(s, h) == c);
        struct hd_frame *f = frame_of(s, "own\n");
        size_t before = net_conn_queued_bytes(c);
        HDT_CHECK(net_conn_send_to(s, h, f, 0, 4) == 0);
        g.own_reentered = net_conn_queued_bytes(c) != before;
        hd_frame_unref(s, f);
        atomic_store(&g.handle, h.v);
        return (ssize_t)len;
    }
    if (g.mode == MODE_REOFFER) {
        if (!g.ready)
            return 0; /* kept: no more bytes will come, only net_conn_reoffer offers them */
        char line[64];
        int n = snprintf(line, sizeof(line), "ok %zu\n", len);
        HDT_CHECK(net_conn_send_copy(c, line, (size_t)n) == 0);
        net_conn_close(c, 0, true);
        return (ssize_t)len;
    }
    return (ssize_t)len; /* MODE_DEADLINE: read and wait */
}

static void srv_deadline(struct net_conn *c)
{
    HDT_CHECK(net_conn_send_copy(c, "ERR timeout\n", 12) == 0);
}

static void srv_close(struct net_conn *c, int reason)
{
    (void)reason;
    /* The handle is stale already in on_close. */
    HDT_CHECK(net_conn_by_handle(net_conn_shard(c), net_conn_handle(c)) == NULL);
    g.conn = NULL;
    atomic_store(&g.closed, 1);
}

static const struct net_conn_handler srv_handler = {
    .on_data = srv_data, .on_close = srv_close, .on_deadline = srv_deadline};

static void srv_accept(struct net_listener *l, int fd, const struct net_addr *peer, void *arg)
{
    (void)peer, (void)arg;
    struct hd_shard *s = net_listener_shard(l);
    HDT_CHECK(net_conn_adopt(s, fd, &srv_handler, NULL, NULL, &g.conn) == 0);
    if (g.mode == MODE_DEADLINE)
        net_conn_set_deadline(g.conn, 100);
}

/* Shard 0, MODE_REOFFER: once the bytes are kept, make ready and ask for them again. */
static void poll0(struct hd_timer *t)
{
    struct hd_shard *s = hd_shard_current();
    if (g.mode == MODE_REOFFER && g.conn && g.offers > 0 && !g.ready) {
        g.ready = true;
        HDT_CHECK(net_conn_reoffer(g.conn) == 0);
        HDT_CHECK(net_conn_reoffer(g.conn) == 0); /* a second ask makes no second offer */
    }
    if (g.mode == MODE_HANDLE && atomic_load(&g.stale_sent) &&
        net_shard_counters(s)->handle_stale >= 1)
        atomic_store(&g.stale_ok, 1);
    hd_timer_start(s, t, 5);
}

/* Shard 1, MODE_HANDLE: write to and close the connection on shard 0 by its handle, then use
 * the stale handle. */
static void poll1(struct hd_timer *t)
{
    struct hd_shard *s = hd_shard_current();
    struct hd_handle h = {atomic_load(&g.handle)};
    static bool sent;
    if (h.v != 0 && !sent) {
        HDT_CHECK(hd_handle_shard(h) == 0);
        HDT_CHECK(net_conn_by_handle(s, h) == NULL); /* not this shard's */
        struct hd_frame *f = frame_of(s, "from1\n");
        HDT_CHECK(net_conn_send_to(s, h, f, 0, 6) == 0);
        hd_frame_unref(s, f);
        HDT_CHECK(net_conn_close_to(s, h, 0, true) == 0);
        sent = true;
    } else if (sent && atomic_load(&g.closed) && !atomic_load(&g.stale_sent)) {
        struct hd_frame *f = frame_of(s, "late\n");
        HDT_CHECK(net_conn_send_to(s, h, f, 0, 5) == 0);
        hd_frame_unref(s, f);
        atomic_store(&g.stale_sent, 1);
    }
    hd_timer_start(s, t, 5);
}

static void body(struct hd_shard *s, void *arg)
{
    (void)arg;
    unsigned id = hd_shard_id(s);
    hd_timer_init(&g.poll[id], id == 0 ? poll0 : poll1);
    hd_timer_start(s, &g.poll[id], 5);
    if (id != 0)
        return;
    struct net_addr a;
    char text[32];
    snprintf(text, sizeof(text), "127.0.0.1:%u", g.port);
    HDT_CHECK(net_addr_parse(text, &a) == 0);
    struct net_listener_options lo = {.reuseport = true};
    HDT_CHECK(net_listener_start(s, &a, &lo, srv_accept, NULL, &g.listener) == 0);
}

static void stop_hook(struct hd_shard *s)
{
    hd_timer_stop(s, &g.poll[hd_shard_id(s)]);
    if (hd_shard_id(s) == 0) {
        net_listener_stop(g.listener);
        net_shard_close_all(s, 0);
    }
}

static _Atomic(struct hd_runtime *) rt_now;

/* The client: connect, send one line, read everything until EOF (10 s receive timeout). */
static void *client(void *arg)
{
    const char *line = arg;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons(g.port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct timeval tv = {.tv_sec = 10};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    int ok = -1;
    for (int i = 0; i < 500 && ok < 0; i++) { /* the listener comes up with the runtime */
        ok = connect(fd, (struct sockaddr *)&a, sizeof(a));
        if (ok < 0)
            usleep(10000);
    }
    if (ok == 0 && write(fd, line, strlen(line)) == (ssize_t)strlen(line)) {
        size_t n = 0;
        ssize_t r;
        while (n < sizeof(g.got) - 1 && (r = read(fd, g.got + n, sizeof(g.got) - 1 - n)) > 0)
            n += (size_t)r;
    }
    close(fd);
    atomic_store(&g.client_done, 1);
    return NULL;
}

static void *stopper(void *arg)
{
    (void)arg;
    for (int i = 0; i < 1500; i++) { /* at most 15 s */
        if (atomic_load(&g.client_done) && atomic_load(&g.closed) &&
            (g.mode != MODE_HANDLE || atomic_load(&g.stale_ok)))
            break;
        usleep(10000);
    }
    while (atomic_load(&rt_now) == NULL)
        usleep(1000);
    hd_runtime_stop(atomic_load(&rt_now));
    return NULL;
}

static void body_rt(struct hd_shard *s, void *arg)
{
    atomic_store(&rt_now, hd_shard_runtime(s));
    body(s, arg);
}

static void run(enum mode mode, const char *line)
{
    memset(&g, 0, sizeof(g));
    g.mode = mode;
    g.port = nt_port_hold();
    atomic_store(&rt_now, NULL);
    struct hdt_options o = {
        .shards = 2, .layers = layers, .layers_count = 1, .shard_stop = stop_hook};
    pthread_t t1, t2;
    pthread_create(&t1, NULL, client, (void *)line);
    pthread_create(&t2, NULL, stopper, NULL);
    cr_assert_eq(hdt_run(&o, body_rt, NULL, NULL), 0);
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
}

Test(test_net_conn_handle, send_and_close_by_handle_from_any_shard, .timeout = 60)
{
    run(MODE_HANDLE, "hello\n");
    cr_assert(!g.own_reentered, "a send by handle to the own shard ran inside the call");
    cr_assert_str_eq(g.got, "own\nfrom1\n");
    cr_assert(atomic_load(&g.closed), "close by handle did not close");
    cr_assert(atomic_load(&g.stale_ok), "a send to a closed connection's handle was not counted");
}

Test(test_net_conn_handle, reoffer_kept_bytes_without_pause, .timeout = 60)
{
    run(MODE_REOFFER, "wait for me\n");
    cr_assert_str_eq(g.got, "ok 12\n", "got \"%s\"", g.got);
    cr_assert_eq(g.offers, 2, "on_data ran %u times (one offer, one re-offer)", g.offers);
}

Test(test_net_conn_handle, deadline_lets_the_app_write_last, .timeout = 60)
{
    run(MODE_DEADLINE, "slow\n");
    cr_assert_str_eq(g.got, "ERR timeout\n", "got \"%s\"", g.got);
}
