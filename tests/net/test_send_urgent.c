/* test_send_urgent.c - net_conn_send_urgent on real loopback sockets: small control messages
 * queued behind a backlog go out ahead of what the kernel does not have yet, in their own order,
 * between two whole entries, and every entry still comes once and in order (issue 25 item 2).
 * The server side's socket has a small send buffer (and the reader a small receive buffer), so
 * the backlog stays in the connection's queue; the reader starts only once the urgent messages
 * are queued. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "harness.h"
#include "net_test_util.h"
#include <hd/net.h>

#define ENTRIES  400  /* ~400 KB queued: far more than the small socket buffers hold */
#define ENTRY    1000 /* bytes per entry; entry i is ENTRY bytes of (i % 100) */
#define URGENT   8    /* bytes per urgent message: 0xe1 then 0xe2 */
#define TOTAL    (ENTRIES * ENTRY + 2 * URGENT)
#define SMALLBUF 4096

static const struct hd_module *const net_layers[] = {&net_module};
static struct net_shard_options net_opts;
static void *const net_layers_args[] = {&net_opts};

static struct {
    struct net_conn *c;
    struct hd_timer timer;
    int reader_fd;
    pthread_t reader;
    _Atomic int go, done;
    uint8_t *got;
    size_t got_len;
    int send_rc[2];
} g;

static void *reader_main(void *arg)
{
    (void)arg;
    while (!atomic_load(&g.go))
        usleep(1000);
    struct timeval tv = {.tv_sec = 10};
    setsockopt(g.reader_fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    while (g.got_len < TOTAL) {
        ssize_t n = read(g.reader_fd, g.got + g.got_len, TOTAL - g.got_len);
        if (n <= 0)
            break;
        g.got_len += (size_t)n;
    }
    atomic_store(&g.done, 1);
    return NULL;
}

static void on_close(struct net_conn *c, int reason)
{
    (void)c, (void)reason;
}

static ssize_t on_data(struct net_conn *c, const uint8_t *data, size_t len)
{
    (void)c, (void)data;
    return (ssize_t)len;
}

static const struct net_conn_handler handler = {.on_data = on_data, .on_close = on_close};

/* 50 ms after the backlog was queued (its first send went in part long since): the two urgent
 * messages, then the reader goes; then every 10 ms: is it done. */
static void timer_fired(struct hd_timer *t)
{
    struct hd_shard *s = hd_shard_current();
    if (!atomic_load(&g.go)) {
        uint8_t m[URGENT];
        memset(m, 0xe1, sizeof(m));
        g.send_rc[0] = net_conn_send_urgent(g.c, m, sizeof(m));
        memset(m, 0xe2, sizeof(m));
        g.send_rc[1] = net_conn_send_urgent(g.c, m, sizeof(m));
        atomic_store(&g.go, 1);
    }
    if (!atomic_load(&g.done)) {
        hd_timer_start(s, t, 10);
        return;
    }
    net_conn_close(g.c, 0, false);
    hdt_done(s);
}

/* A loopback pair made here: the server end (small send buffer) goes to net, the other end to
 * the reader thread (small receive buffer, set before connect so the window stays small). */
static void body(struct hd_shard *s, void *arg)
{
    (void)arg;
    int fd;
    HDT_CHECK(nt_loopback_pair(SMALLBUF, &fd, &g.reader_fd) == 0);
    HDT_CHECK(pthread_create(&g.reader, NULL, reader_main, NULL) == 0);
    struct net_conn_options o = {0};
    HDT_CHECK(net_conn_adopt(s, fd, &handler, NULL, &o, &g.c) == 0);
    for (unsigned i = 0; i < ENTRIES; i++) {
        struct hd_frame *f = hd_frame_get(s, ENTRY);
        HDT_CHECK(f != NULL);
        memset(f->data, (int)(i % 100), ENTRY);
        f->len = ENTRY;
        HDT_CHECK(net_conn_send(g.c, f, 0, ENTRY) == 0);
        hd_frame_unref(s, f);
    }
    hd_timer_init(&g.timer, timer_fired);
    hd_timer_start(s, &g.timer, 50);
}

Test(test_net_send_urgent, ahead_of_the_backlog_in_order, .timeout = 60)
{
    memset(&g, 0, sizeof(g));
    g.got = malloc(TOTAL);
    cr_assert_not_null(g.got);
    struct hdt_options o = {
        .shards = 1, .layers = net_layers, .layers_args = net_layers_args, .layers_count = 1};
    cr_assert_eq(hdt_run(&o, body, NULL, NULL), 0);
    pthread_join(g.reader, NULL);
    close(g.reader_fd);
    cr_assert_eq(g.send_rc[0], 0);
    cr_assert_eq(g.send_rc[1], 0);
    cr_assert_eq(g.got_len, (size_t)TOTAL, "got %zu of %d bytes", g.got_len, TOTAL);
    uint8_t *u = memchr(g.got, 0xe1, TOTAL);
    cr_assert_not_null(u, "the urgent message never came");
    size_t at = (size_t)(u - g.got);
    cr_assert_eq(at % ENTRY, 0, "the urgent message cut entry %zu at byte %zu", at / ENTRY,
                 at % ENTRY);
    for (size_t i = 0; i < 2 * URGENT; i++)
        cr_assert_eq(u[i], i < URGENT ? 0xe1 : 0xe2, "the urgent messages in order, whole");
    memmove(u, u + 2 * URGENT, TOTAL - at - 2 * URGENT);
    for (size_t i = 0; i < (size_t)ENTRIES * ENTRY; i++)
        cr_assert_eq(g.got[i], (uint8_t)((i / ENTRY) % 100), "entry %zu byte %zu", i / ENTRY,
                     i % ENTRY);
    cr_log_info("the urgent messages came after %zu of %d entries", at / ENTRY, ENTRIES);
    cr_assert_lt(at / ENTRY, ENTRIES / 2, "they waited behind %zu of %d entries", at / ENTRY,
                 ENTRIES);
    free(g.got);
}
