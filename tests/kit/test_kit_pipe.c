/* test_kit_pipe.c - kit_pipe_start on real loopback connections (issue 27): two clients pair
 * with a "PAIR\n" line; the first one, waiting, is paused with bytes already kept; once piped,
 * 8 MiB go one way to a reader that starts late (the writer's side is paused by the reader's
 * send queue: backpressure, counted), the writer's half close reaches the reader after every
 * byte, the reader's answer comes back the other way, and done runs once both have closed.
 * It also caught net handing on_eof over bytes still held for a paused receiver (the writer's
 * end overtook its last bytes, and the pipe closed with -EPIPE): fixed in net/conn.c. */
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <hd/kit.h>

#include "pipe_stream.h"

#define PIPE_BYTES (8u << 20)

static struct {
    struct net_addr addr;
    struct net_listener *listener;
    struct net_conn *waiting;
    struct kit_pipe pipe;
    struct kit_pipe_stats stats;
    _Atomic int done;
    int reason;
    _Atomic int writer_ok, reader_ok;
} g;

static void pipe_done(struct kit_pipe *p, void *arg)
{
    (void)arg;
    g.stats = p->stats;
    g.reason = p->reason;
    atomic_store(&g.done, 1);
    hd_runtime_stop(hd_shard_runtime(hd_shard_current()));
}

/* Before the pipe: wait for "PAIR\n"; the first to pair waits (paused, its bytes kept). */
static ssize_t pair_data(struct net_conn *c, const uint8_t *data, size_t len)
{
    if (net_conn_app(c) != NULL)
        return 0; /* paired line seen, waiting: keep the rest */
    if (len < 5)
        return 0;
    if (memcmp(data, "PAIR\n", 5) != 0)
        return -EPROTO;
    if (g.waiting == NULL) {
        g.waiting = c;
        net_conn_set_app(c, net_conn_app_handler(c), &g); /* marks "line seen" */
        net_conn_pause_recv(c, true);
        return 5;
    }
    if (kit_pipe_start(&g.pipe, g.waiting, c, pipe_done, NULL) != 0)
        abort(); /* a shard thread: no cr_assert here */
    g.waiting = NULL;
    return 5;
}

static void pair_close(struct net_conn *c, int reason)
{
    (void)reason;
    if (g.waiting == c)
        g.waiting = NULL;
}

static const struct net_conn_handler pair_handler = {.on_data = pair_data, .on_close = pair_close};

static void on_accept(struct net_listener *l, int fd, const struct net_addr *peer, void *arg)
{
    (void)peer, (void)arg;
    struct net_conn *c;
    /* Small watermarks so an 8 MiB transfer must pause. */
    struct net_conn_options o = {.send_high_bytes = 64 * 1024, .send_low_bytes = 16 * 1024};
    if (net_conn_adopt(net_listener_shard(l), fd, &pair_handler, NULL, &o, &c) < 0)
        close(fd);
}

static int shard_init(struct hd_shard *s, void *arg, void **state)
{
    (void)arg;
    *state = NULL;
    struct net_listener_options lo = {.reuseport = true};
    return net_listener_start(s, &g.addr, &lo, on_accept, NULL, &g.listener);
}

static void shard_stop(struct hd_shard *s, void *state)
{
    (void)state;
    net_listener_stop(g.listener);
    net_shard_close_all(s, 0);
}

static const struct hd_module *const requires[] = {&net_module, NULL};
static const struct hd_module pipe_module = {.abi_version = HD_MODULE_ABI,
                                             .name = "pipetest",
                                             .requires = requires,
                                             .shard_init = shard_init,
                                             .shard_stop = shard_stop};

static int dial(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct timeval tv = {.tv_sec = 20};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    for (int i = 0; i < 500; i++) {
        if (connect(fd, &g.addr.sa, g.addr.len) == 0)
            return fd;
        usleep(10000);
    }
    return -1;
}

/* Pairs first, sends its line and the first 64 KiB at once (kept while it waits), then the
 * rest, half-closes, and expects "bye" and the end. */
static void *writer(void *arg)
{
    (void)arg;
    int fd = dial();
    bool ok = fd >= 0 && write(fd, "PAIR\n", 5) == 5 && pipe_stream_send(fd, PIPE_BYTES);
    atomic_store(&g.writer_ok, ok ? 1 : -1);
    close(fd);
    return NULL;
}

static void *reader(void *arg)
{
    (void)arg;
    usleep(100000); /* the writer waits paired-but-alone first */
    int fd = dial();
    bool ok = fd >= 0 && write(fd, "PAIR\n", 5) == 5;
    usleep(300000); /* start late: the writer's side must be paused meanwhile */
    ok = ok && pipe_stream_recv(fd, PIPE_BYTES, PIPE_STREAM_CHUNK, 0);
    atomic_store(&g.reader_ok, ok ? 1 : -1);
    close(fd);
    return NULL;
}

Test(test_kit_pipe, pipes_both_ways_with_backpressure, .timeout = 120)
{
    memset(&g, 0, sizeof(g));
    net_addr_parse("127.0.0.1:0", &g.addr);
    int hold = kit_port_hold(&g.addr, SOCK_STREAM);
    cr_assert_geq(hold, 0);
    const struct hd_module *mods[] = {&pipe_module};
    struct hd_runtime_config rc = {.shards_count = 1, .modules = mods, .modules_count = 1};
    struct hd_runtime *rt;
    cr_assert_eq(hd_runtime_create(&rc, &rt), 0);
    cr_assert_eq(hd_runtime_start(rt), 0);
    close(hold);
    pthread_t tw, tr;
    pthread_create(&tw, NULL, writer, NULL);
    pthread_create(&tr, NULL, reader, NULL);
    pthread_join(tw, NULL);
    pthread_join(tr, NULL);
    for (int i = 0; i < 1000 && !atomic_load(&g.done); i++) /* done stops it; at most 10 s */
        usleep(10000);
    hd_runtime_stop(rt);
    cr_assert_eq(hd_runtime_wait(rt), 0);
    hd_runtime_destroy(rt);
    cr_assert_eq(atomic_load(&g.writer_ok), 1, "the writer did not get bye and the end");
    cr_assert_eq(atomic_load(&g.reader_ok), 1, "the reader did not get every byte, then EOF");
    cr_assert(atomic_load(&g.done), "done did not run");
    cr_assert_eq(g.stats.bytes[0], PIPE_BYTES);
    cr_assert_eq(g.stats.bytes[1], 3);
    cr_assert_geq(g.stats.pauses, 1, "the late reader never paused the writer's side");
    cr_assert_eq(g.reason, 0, "closed with %d", g.reason);
}
