/* test_kit_pipe_join.c - kit_pipe_join on real loopback connections and 2 shards (issue 27):
 * shard 0 and shard 1 each listen on a port of their own, so a test decides where each client
 * lives. A client sends "PAIR\n"; its shard sends the connection's handle to the pipe's shard,
 * which joins the first two it gets. Cases:
 *   - a writer on shard 0 and a slow reader on shard 1 (the reader is moved): 8 MiB arrive whole
 *     and in order after "OK\n", the writer's side is paused by the reader's send queue, the
 *     pipe shard's frames stay bounded (a fraction of what went through), the half close and
 *     the answer travel, done runs once with reason 0;
 *   - both clients on shard 1 and the pipe on shard 0 (both moved), and the reader closing in
 *     the middle of an endless stream: the writer's connection ends, done runs;
 *   - a side that closed before the join (a stale handle on the other shard): the other side
 *     is closed without "OK", done runs with -EPIPE. */
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <hd/kit.h>

#include "pipe_stream.h"

#define PIPE_BYTES   (8u << 20)
#define SEND_HIGH    (64u * 1024)
#define SEND_MAX     (256u * 1024)
#define FRAMES_BOUND (2u << 20) /* frame memory the pipe shard may have held at once */
#define WAIT_STEPS   2000       /* polls of 10 ms: a bound on waiting, not a timed check */

static struct {
    struct net_addr addr[2];
    struct net_listener *listener[2];
    unsigned pipe_shard;
    struct hd_handle h[2]; /* on the pipe shard: the handles collected */
    unsigned n;
    struct kit_pipe pipe;
    int join_rc;
    struct kit_pipe_stats stats;
    uint64_t frame_bytes_high; /* on the pipe shard at done: sum of class high waters x size */
    int reason;
    _Atomic int collected, closed_early, done;
    _Atomic int writer_ok, reader_ok;
} g;

static char line_seen; /* app mark: "PAIR\n" consumed, waiting for the pipe */

static void pipe_done(struct kit_pipe *p, void *arg)
{
    (void)arg;
    struct hd_shard *s = hd_shard_current();
    g.stats = p->stats;
    g.reason = p->reason;
    struct hd_pool_stats st;
    for (unsigned c = 0; c < hd_frame_classes_count(s); c++) {
        hd_frame_stats(s, c, &st);
        g.frame_bytes_high += st.high_water * hd_frame_class_size(s, c);
    }
    atomic_store(&g.done, 1);
}

/* On the pipe's shard: the handles, in the order they come; the second joins. */
static void collect(struct hd_shard *s, const struct hd_msg *m)
{
    g.h[g.n++] = (struct hd_handle){m->u64[0]};
    atomic_fetch_add(&g.collected, 1);
    if (g.n == 2)
        g.join_rc = kit_pipe_join(s, &g.pipe, g.h[0], g.h[1], "OK\n", pipe_done, NULL);
}

static ssize_t pair_data(struct net_conn *c, const uint8_t *data, size_t len)
{
    if (net_conn_app(c) == &line_seen) {
        net_conn_pause_recv(c, true); /* waiting for the pipe: keep the rest */
        return 0;
    }
    if (len < 5)
        return 0;
    if (memcmp(data, "PAIR\n", 5) != 0)
        return -EPROTO;
    net_conn_set_app(c, net_conn_app_handler(c), &line_seen);
    struct hd_msg m = {.fn = collect, .u64 = {net_conn_handle(c).v}};
    if (hd_bus_send(net_conn_shard(c), g.pipe_shard, &m) != 0)
        abort(); /* a shard thread: no cr_assert here; an idle bus has room */
    return 5;
}

static void pair_close(struct net_conn *c, int reason)
{
    (void)c, (void)reason;
    atomic_fetch_add(&g.closed_early, 1); /* closed before the pipe took it */
}

static const struct net_conn_handler pair_handler = {.on_data = pair_data, .on_close = pair_close};

static void on_accept(struct net_listener *l, int fd, const struct net_addr *peer, void *arg)
{
    (void)peer, (void)arg;
    struct net_conn *c;
    /* Small watermarks so an 8 MiB transfer must pause; a cap well under what goes through. */
    struct net_conn_options o = {
        .send_high_bytes = SEND_HIGH, .send_low_bytes = SEND_HIGH / 4, .send_max_bytes = SEND_MAX};
    if (net_conn_adopt(net_listener_shard(l), fd, &pair_handler, NULL, &o, &c) < 0)
        close(fd);
}

static int shard_init(struct hd_shard *s, void *arg, void **state)
{
    (void)arg;
    *state = NULL;
    unsigned id = hd_shard_id(s);
    struct net_listener_options lo = {.reuseport = true};
    return net_listener_start(s, &g.addr[id], &lo, on_accept, NULL, &g.listener[id]);
}

static void shard_stop(struct hd_shard *s, void *state)
{
    (void)state;
    net_listener_stop(g.listener[hd_shard_id(s)]);
    net_shard_close_all(s, 0);
}

static const struct hd_module *const requires[] = {&net_module, NULL};
static const struct hd_module join_module = {.abi_version = HD_MODULE_ABI,
                                             .name = "jointest",
                                             .requires = requires,
                                             .shard_init = shard_init,
                                             .shard_stop = shard_stop};

static struct hd_runtime *start(unsigned pipe_shard)
{
    memset(&g, 0, sizeof(g));
    g.pipe_shard = pipe_shard;
    int holds[2];
    for (unsigned i = 0; i < 2; i++) {
        net_addr_parse("127.0.0.1:0", &g.addr[i]);
        holds[i] = kit_port_hold(&g.addr[i], SOCK_STREAM);
        cr_assert_geq(holds[i], 0);
    }
    const struct hd_module *mods[] = {&join_module};
    struct hd_runtime_config rc = {.shards_count = 2, .modules = mods, .modules_count = 1};
    struct hd_runtime *rt;
    cr_assert_eq(hd_runtime_create(&rc, &rt), 0);
    cr_assert_eq(hd_runtime_start(rt), 0);
    close(holds[0]);
    close(holds[1]);
    return rt;
}

static void finish(struct hd_runtime *rt)
{
    for (int i = 0; i < WAIT_STEPS && !atomic_load(&g.done); i++)
        usleep(10000);
    hd_runtime_stop(rt);
    cr_assert_eq(hd_runtime_wait(rt), 0);
    hd_runtime_destroy(rt);
    cr_assert_eq(g.join_rc, 0, "kit_pipe_join: %d", g.join_rc);
    cr_assert(atomic_load(&g.done), "done did not run");
}

static void wait_collected(int n)
{
    for (int i = 0; i < WAIT_STEPS && atomic_load(&g.collected) < n; i++)
        usleep(10000);
    cr_assert_geq(atomic_load(&g.collected), n, "the pipe shard never got the handle");
}

static int dial(unsigned shard, int rcvbuf)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct timeval tv = {.tv_sec = 20};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (rcvbuf)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    if (connect(fd, &g.addr[shard].sa, g.addr[shard].len) != 0 || write(fd, "PAIR\n", 5) != 5) {
        close(fd);
        return -1;
    }
    return fd;
}

static bool read_ok(int fd)
{
    char ok[3];
    size_t n = 0;
    ssize_t r;
    while (n < 3 && (r = read(fd, ok + n, 3 - n)) > 0)
        n += (size_t)r;
    return n == 3 && memcmp(ok, "OK\n", 3) == 0;
}

/* After "OK": PIPE_BYTES of the pattern, a half close, then "bye" and the end expected. */
static void *writer(void *arg)
{
    int fd = *(int *)arg;
    bool ok = read_ok(fd) && pipe_stream_send(fd, PIPE_BYTES);
    atomic_store(&g.writer_ok, ok ? 1 : -1);
    close(fd);
    return NULL;
}

Test(test_kit_pipe_join, slow_reader_on_another_shard, .timeout = 120)
{
    struct hd_runtime *rt = start(0);
    int wfd = dial(0, 0);
    cr_assert_geq(wfd, 0);
    wait_collected(1);            /* the writer is side 0 */
    int rfd = dial(1, 16 * 1024); /* a small window: the relay holds what it cannot take */
    cr_assert_geq(rfd, 0);
    pthread_t tw;
    pthread_create(&tw, NULL, writer, &wfd);
    /* Slow: reads of 4 KiB, with a rest after each 64 KiB. */
    bool ok = read_ok(rfd) && pipe_stream_recv(rfd, PIPE_BYTES, 4096, 2000);
    close(rfd);
    pthread_join(tw, NULL);
    finish(rt);
    cr_assert(ok, "the reader did not get every byte after OK, then the end");
    cr_assert_eq(atomic_load(&g.writer_ok), 1, "the writer did not get bye and the end");
    cr_assert_eq(g.stats.moved, 1);
    cr_assert_eq(g.stats.bytes[0], PIPE_BYTES);
    cr_assert_eq(g.stats.bytes[1], 3);
    cr_assert_geq(g.stats.pauses, 1, "the slow reader never paused the writer's side");
    cr_log_info("pauses %llu, frame bytes high %llu", (unsigned long long)g.stats.pauses,
                (unsigned long long)g.frame_bytes_high);
    cr_assert_leq(g.frame_bytes_high, FRAMES_BOUND, "the pipe shard held %llu bytes of frames",
                  (unsigned long long)g.frame_bytes_high);
    cr_assert_eq(g.reason, 0, "closed with %d", g.reason);
}

Test(test_kit_pipe_join, reader_closes_both_moved, .timeout = 120)
{
    struct hd_runtime *rt = start(0); /* both clients on shard 1: both move to shard 0 */
    int wfd = dial(1, 0);
    cr_assert_geq(wfd, 0);
    wait_collected(1);
    int rfd = dial(1, 0);
    cr_assert_geq(rfd, 0);
    cr_assert(read_ok(wfd) && read_ok(rfd), "no OK");
    static uint8_t buf[64 * 1024];
    memset(buf, 'x', sizeof(buf));
    uint64_t got = 0;
    ssize_t r;
    while (got < (1u << 20)) { /* the writer streams; the reader takes 1 MiB and leaves */
        cr_assert_eq(send(wfd, buf, sizeof(buf), MSG_NOSIGNAL), (ssize_t)sizeof(buf));
        while (got < (1u << 20) && (r = recv(rfd, buf, sizeof(buf), MSG_DONTWAIT)) > 0)
            got += (uint64_t)r;
    }
    close(rfd); /* with bytes unread: a reset */
    ssize_t w = 0;
    for (int i = 0; i < 100000 && w >= 0; i++) /* until the relay has closed the writer */
        w = send(wfd, buf, sizeof(buf), MSG_NOSIGNAL);
    cr_assert_lt(w, 0, "the writer's connection outlived its reader's close");
    cr_assert(errno == EPIPE || errno == ECONNRESET, "writer: %s", strerror(errno));
    close(wfd);
    finish(rt);
    cr_assert_eq(g.stats.moved, 2);
    cr_assert_geq(g.stats.bytes[0], 1u << 20);
}

Test(test_kit_pipe_join, side_gone_before_join, .timeout = 120)
{
    struct hd_runtime *rt = start(0);
    int gone = dial(1, 0);
    cr_assert_geq(gone, 0);
    wait_collected(1);
    close(gone); /* its handle on shard 1 goes stale */
    for (int i = 0; i < WAIT_STEPS && atomic_load(&g.closed_early) < 1; i++)
        usleep(10000);
    cr_assert_eq(atomic_load(&g.closed_early), 1);
    int fd = dial(0, 0);
    cr_assert_geq(fd, 0);
    char b[8];
    ssize_t r = read(fd, b, sizeof(b));
    cr_assert_eq(r, 0, "the side left alone got %zd bytes (errno %d), not the end", r, errno);
    close(fd);
    finish(rt);
    cr_assert_eq(g.reason, -EPIPE, "reason %d", g.reason);
    cr_assert_eq(g.stats.moved, 0);
}
