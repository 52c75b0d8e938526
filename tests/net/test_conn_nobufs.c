/* test_conn_nobufs.c - a receive that finds no buffer waits and retries (never in a loop), on its
 * own timer: the plain-recv path (no buffer ring) with a frame class of two receive frames. Two
 * connections take them; the third finds none (NET_F_NOBUFS, checked on the shard) and has an
 * idle timeout of 50 ms, which must not run while it waits for a buffer (the peer is not idle,
 * the shard is); 200 ms later the server closes the first connection, the waiting one gets its
 * frame at the next retry and echoes what its peer sent meanwhile. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"
#include "net_impl.h"
#include "net_test_util.h"
#include <hd/net.h>

#define WAITING_IDLE_MS 50u
#define FIRST_CLOSE_MS  200u /* well past the waiting connection's idle timeout */

static struct {
    uint16_t port;
    struct net_listener *listener;
    struct net_conn *conns[3]; /* in accept order */
    unsigned accepted;
    struct hd_timer close_first;
    _Atomic int waited; /* the third connection found no buffer */
    _Atomic unsigned closes;
    _Atomic int echoed;
    _Atomic(struct hd_runtime *) rt;
} g;

static const struct hd_frame_class classes[] = {
    {.size = NET_RECV_FALLBACK_SIZE, .cap_count = 2}, /* the receive frames */
    {.size = 65536, .cap_count = 64},                 /* the echoes */
};

static const struct hd_module *const net_layers[] = {&net_module};
static struct net_shard_options net_opt = {.no_buf_ring = true};
static void *const net_args[] = {&net_opt};

static ssize_t srv_data(struct net_conn *c, const uint8_t *data, size_t len)
{
    struct hd_frame *f = hd_frame_get(net_conn_shard(c), 4096); /* the large class */
    HDT_CHECK(f != NULL && len <= f->size);
    memcpy(f->data, data, len);
    f->len = (uint32_t)len;
    HDT_CHECK(net_conn_send(c, f, 0, f->len) == 0);
    hd_frame_unref(net_conn_shard(c), f);
    return (ssize_t)len;
}

static void srv_close(struct net_conn *c, int reason)
{
    (void)reason;
    for (unsigned i = 0; i < 3; i++)
        if (g.conns[i] == c)
            g.conns[i] = NULL;
    atomic_fetch_add(&g.closes, 1);
}

static const struct net_conn_handler srv_handler = {.on_data = srv_data, .on_close = srv_close};

static void close_first(struct hd_timer *t)
{
    (void)t;
    if (g.conns[0])
        net_conn_close(g.conns[0], 0, false); /* its receive frame goes back to the pool */
}

static void srv_accept(struct net_listener *l, int fd, const struct net_addr *peer, void *arg)
{
    (void)peer, (void)arg;
    struct hd_shard *s = net_listener_shard(l);
    struct net_conn *c;
    HDT_CHECK(g.accepted < 3);
    HDT_CHECK(net_conn_adopt(s, fd, &srv_handler, NULL, NULL, &c) == 0);
    g.conns[g.accepted++] = c;
    if (g.accepted < 3) {
        HDT_CHECK(!(c->flags & NET_F_NOBUFS));
        return;
    }
    HDT_CHECK(c->flags & NET_F_NOBUFS); /* both receive frames are taken */
    atomic_store(&g.waited, 1);
    net_conn_set_timeouts(c, WAITING_IDLE_MS, 0); /* not armed while it waits */
    hd_timer_start(s, &g.close_first, FIRST_CLOSE_MS);
}

static void body(struct hd_shard *s, void *arg)
{
    (void)arg;
    struct net_addr a;
    char text[32];
    snprintf(text, sizeof(text), "127.0.0.1:%u", g.port);
    HDT_CHECK(net_addr_parse(text, &a) == 0);
    hd_timer_init(&g.close_first, close_first);
    HDT_CHECK(net_listener_start(s, &a, NULL, srv_accept, NULL, &g.listener) == 0);
    atomic_store(&g.rt, hd_shard_runtime(s));
}

static void stop(struct hd_shard *s)
{
    hd_timer_stop(s, &g.close_first);
    if (g.listener)
        net_listener_stop(g.listener);
    g.listener = NULL;
    for (unsigned i = 0; i < 3; i++)
        if (g.conns[i])
            net_conn_close(g.conns[i], 0, false);
}

static int dial(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(g.port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (int i = 0; i < 500; i++) { /* the listener may not be up yet: bounded */
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
            return fd;
        if (fd >= 0)
            close(fd);
        usleep(10000);
    }
    return -1;
}

/* Read exactly one byte, waiting at most timeout_ms. */
static int read_byte(int fd, int timeout_ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    char b;
    if (poll(&p, 1, timeout_ms) != 1 || read(fd, &b, 1) != 1)
        return -1;
    return (unsigned char)b;
}

static void *client(void *arg)
{
    (void)arg;
    int a = dial(), b = dial();
    bool ok = write(a, "a", 1) == 1 && read_byte(a, 10000) == 'a';
    ok = ok && write(b, "b", 1) == 1 && read_byte(b, 10000) == 'b';
    int c = dial();
    ok = ok && write(c, "c", 1) == 1;
    /* Only after the first connection closed: the retry got its frame. */
    ok = ok && read_byte(c, 10000) == 'c';
    atomic_store(&g.echoed, ok ? 1 : -1);
    close(c);
    close(b);
    close(a);
    for (int i = 0; i < 1000 && atomic_load(&g.closes) < 3; i++)
        usleep(10000);
    while (atomic_load(&g.rt) == NULL)
        usleep(1000);
    hd_runtime_stop(atomic_load(&g.rt));
    return NULL;
}

Test(test_net_conn_nobufs, waits_for_a_buffer_without_idling_out, .timeout = 60)
{
    memset(&g, 0, sizeof(g));
    g.port = nt_port_hold();
    struct hdt_options o = {.shards = 1,
                            .frame_classes = classes,
                            .frame_classes_count = 2,
                            .layers = net_layers,
                            .layers_args = net_args,
                            .layers_count = 1,
                            .shard_stop = stop};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, client, NULL), 0);
    int rc = hdt_run(&o, body, NULL, NULL);
    pthread_join(t, NULL);
    cr_assert_eq(rc, 0);
    cr_assert_eq(atomic_load(&g.waited), 1, "the third connection found a buffer");
    /* Closed by its idle timeout while it waited, it would never have echoed. */
    cr_assert_eq(atomic_load(&g.echoed), 1, "the waiting connection never received");
    cr_assert_eq(atomic_load(&g.closes), 3);
}
