/* test_conn_move_close.c - a graceful close (flush) of a connection that waits to move: the move
 * is off, what was queued goes out, the peer reads EOF and the app hears on_close on the shard it
 * closed on; the destination never adopts it. Before, the flush-close only marked the
 * connection, the move went on (it only waited for its receive's cancel), and the connection
 * arrived open on the other shard: the close was lost and the peer never saw EOF.
 * Two shards; a socketpair adopted on shard 0, asked to move to shard 1. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <hd/net.h>

#include "harness.h"

#define LAST_WORDS "last words\n"

static struct {
    struct net_conn *c;
    struct hd_timer poll;
    unsigned polls;
    int peer_fd;
    _Atomic int closed;  /* on_close ran on shard 0 */
    _Atomic int adopted; /* shard 1 adopted it (the move went on: the bug) */
    int close_reason;
} g;

static const struct hd_module *const layers[] = {&net_module};

static ssize_t take_all(struct net_conn *c, const uint8_t *data, size_t len)
{
    (void)c, (void)data;
    return (ssize_t)len;
}

static void on_close(struct net_conn *c, int reason)
{
    HDT_CHECK(hd_shard_id(net_conn_shard(c)) == 0);
    g.close_reason = reason;
    atomic_store(&g.closed, 1);
}

static const struct net_conn_handler handler = {.on_data = take_all, .on_close = on_close};

static void quiet_close(struct net_conn *c, int reason)
{
    (void)c, (void)reason;
}

static const struct net_conn_handler arrived_handler = {.on_data = take_all,
                                                        .on_close = quiet_close};

static void adopt(struct net_conn *c, void *arg)
{
    (void)arg;
    if (c == NULL)
        return;
    atomic_store(&g.adopted, 1);
    net_conn_set_app(c, &arrived_handler, NULL);
    net_conn_close(c, 0, false);
}

static void poll_fired(struct hd_timer *t)
{
    struct hd_shard *s = hd_shard_current();
    if (!atomic_load(&g.closed) && !atomic_load(&g.adopted)) {
        HDT_CHECK(++g.polls < 30000); /* 30 s */
        hd_timer_start(s, t, 1);
        return;
    }
    hdt_done(s);
}

static void body(struct hd_shard *s, void *arg)
{
    (void)arg;
    if (hd_shard_id(s) == 1) {
        hdt_done(s); /* it keeps serving until shard 0 is done: a move would arrive here */
        return;
    }
    int sv[2];
    HDT_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) == 0);
    g.peer_fd = sv[1];
    HDT_CHECK(net_conn_adopt(s, sv[0], &handler, NULL, NULL, &g.c) == 0);
    /* Its receive is armed: the move waits for that op's cancel, a later tick. */
    HDT_CHECK(net_conn_migrate(g.c, 1, adopt, NULL) == 0);
    HDT_CHECK(net_conn_state(g.c) == NET_CONN_OPEN);
    HDT_CHECK(net_conn_send_copy(g.c, LAST_WORDS, strlen(LAST_WORDS)) == 0);
    net_conn_close(g.c, -ECONNABORTED, true);
    hd_timer_init(&g.poll, poll_fired);
    hd_timer_start(s, &g.poll, 1);
}

Test(test_net_conn_move_close, flush_close_while_waiting_to_move)
{
    memset(&g, 0, sizeof(g));
    struct hdt_options o = {.shards = 2, .layers = layers, .layers_count = 1};
    cr_assert_eq(hdt_run(&o, body, NULL, NULL), 0);
    cr_expect_eq(atomic_load(&g.adopted), 0, "the connection moved after its close");
    cr_expect_eq(atomic_load(&g.closed), 1, "on_close never ran on the shard that closed it");
    cr_expect_eq(g.close_reason, -ECONNABORTED);
    /* The peer reads what was queued, then EOF. */
    int fl = fcntl(g.peer_fd, F_GETFL);
    cr_assert(fl >= 0 && fcntl(g.peer_fd, F_SETFL, fl & ~O_NONBLOCK) == 0);
    struct timeval tv = {.tv_sec = 10}; /* a bound: the runtime is gone, the fd closed or not */
    cr_assert_eq(setsockopt(g.peer_fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
    char buf[64];
    size_t got = 0;
    ssize_t n;
    while ((n = read(g.peer_fd, buf + got, sizeof(buf) - got)) > 0)
        got += (size_t)n;
    cr_expect_eq(n, 0, "no EOF: %s", n < 0 ? strerror(errno) : "more bytes");
    cr_expect_eq(got, strlen(LAST_WORDS));
    cr_expect(memcmp(buf, LAST_WORDS, strlen(LAST_WORDS)) == 0, "the queued bytes were lost");
    close(g.peer_fd);
}
