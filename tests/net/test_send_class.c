/* test_send_class.c - net_conn_send_class on real loopback sockets: frames queued behind a
 * backed-up connection wait in their bounded class, a full class drops its oldest up to its
 * tries and else the new frame (on_drop says which), the waiting frames go into the send queue
 * one from each class in turn once it falls under its low watermark (on_taken each, on_drained
 * once), an urgent message goes ahead of them, and what still waits at a close is dropped
 * (on_drop, before on_close) or, drained, goes into the send queue past the watermark; a frame
 * sent to a class while the connection moves to another shard travels with it.
 *
 * The server side's socket has a small send buffer (and the reader a small receive buffer), and
 * the reader starts only once everything is queued, so the backlog of BACKLOG entries keeps the
 * connection over its high watermark while the class frames are queued: every step of the
 * policy happens at a known point. Entry bytes are tags: backlog i is (i % 100), class 0's j-th
 * frame 0x80 + j, class 1's 0xc0 + j, the urgent message 0xe1. Sends go in part all along. */
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
#include <hd/net_class.h>

#define BACKLOG  200  /* entries of ENTRY bytes: far more than the small socket buffers hold */
#define ENTRY    1000 /* bytes per entry */
#define URGENT   8
#define C0_SENT  6 /* into class 0 (depth 4, 3 tries): the first two dropped as the oldest */
#define C1_SENT  3 /* into class 1 (depth 2, no tries): the third dropped as the new one */
#define DELIVER  6 /* class frames that reach the reader */
#define TOTAL    (BACKLOG * ENTRY + URGENT + DELIVER * ENTRY)
#define SMALLBUF 4096
#define MOVING   0xa0 /* the tag of the class frame sent while the connection moves */

static const struct hd_module *const net_layers[] = {&net_module};
static struct net_shard_options net_opts;
static void *const net_layers_args[] = {&net_opts};

struct drop {
    unsigned k;
    uint8_t tag;
    enum net_send_drop why;
    uint32_t waited_ms;
};

static struct {
    struct net_conn *c;
    struct hd_timer timer;
    int reader_fd;
    pthread_t reader;
    bool reading; /* the reader thread was started */
    _Atomic int go, done;
    uint8_t *got;
    size_t got_len, want;
    int rc[C0_SENT + C1_SENT];
    int urgent_rc;
    unsigned counts[2]; /* class counts after the sends */
    bool paused;        /* the connection was over its watermark at the sends */
    struct drop drops[16];
    unsigned ndrops, closed_drops_at_close;
    uint8_t taken[16];
    unsigned ntaken, drained, closes;
    uint32_t taken_waited_max;
    size_t queued_before_drain, queued_after_drain;
    unsigned count_after_drain;
    int moving_rc;
    _Atomic(struct net_conn *) moved; /* the connection, adopted on shard 1 */
} g;

static void *reader_main(void *arg)
{
    (void)arg;
    while (!atomic_load(&g.go))
        usleep(1000);
    struct timeval tv = {.tv_sec = 10};
    setsockopt(g.reader_fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    while (g.got_len < g.want) {
        ssize_t n = read(g.reader_fd, g.got + g.got_len, g.want - g.got_len);
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
    g.closes++;
    for (unsigned i = 0; i < g.ndrops; i++)
        g.closed_drops_at_close += g.drops[i].why == NET_SEND_DROP_CLOSED;
}

static ssize_t on_data(struct net_conn *c, const uint8_t *data, size_t len)
{
    (void)c, (void)data;
    return (ssize_t)len;
}

static void on_drop(struct net_conn *c, struct hd_frame *f, uint32_t off, uint32_t len, unsigned k,
                    enum net_send_drop why, uint32_t waited_ms)
{
    (void)c;
    cr_assert_eq(len, ENTRY);
    if (g.ndrops < 16)
        g.drops[g.ndrops++] =
            (struct drop){.k = k, .tag = f->data[off], .why = why, .waited_ms = waited_ms};
}

static void on_taken(struct net_conn *c, struct hd_frame *f, uint32_t off, uint32_t len, unsigned k,
                     uint32_t waited_ms)
{
    (void)c, (void)len;
    cr_assert_eq(f->data[off] >= 0xc0, k == 1, "class %u's frame, tag 0x%x", k, f->data[off]);
    if (g.ntaken < 16)
        g.taken[g.ntaken++] = f->data[off];
    if (waited_ms > g.taken_waited_max)
        g.taken_waited_max = waited_ms;
}

static void on_drained(struct net_conn *c)
{
    (void)c;
    g.drained++;
}

static const struct net_send_classes classes = {
    .count = 2,
    .cls = {{.depth = 4, .tries = 3}, {.depth = 2, .tries = 0}},
    .on_drop = on_drop,
    .on_taken = on_taken,
    .on_drained = on_drained,
};

static const struct net_conn_handler handler = {
    .on_data = on_data, .on_close = on_close, .send_classes = &classes};

static void timer_fired(struct hd_timer *t)
{
    struct hd_shard *s = hd_shard_current();
    atomic_store(&g.go, 1);
    if (!atomic_load(&g.done)) {
        hd_timer_start(s, t, 10);
        return;
    }
    net_conn_close(g.c, 0, false);
    hdt_done(s);
}

static int frame_send(struct hd_shard *s, uint8_t tag, int cls)
{
    struct hd_frame *f = hd_frame_get(s, ENTRY);
    HDT_CHECK(f != NULL);
    memset(f->data, tag, ENTRY);
    f->len = ENTRY;
    int rc = cls < 0 ? net_conn_send(g.c, f, 0, ENTRY) : net_conn_send_class(g.c, f, 0, ENTRY, cls);
    hd_frame_unref(s, f);
    return rc;
}

/* A loopback pair made here: the server end (small send buffer) goes to net, the other end to
 * the reader thread (small receive buffer, set before connect so the window stays small). The
 * backlog, then the class frames, all in this tick: the connection is paused throughout. */
static void setup(struct hd_shard *s, bool reader)
{
    int fd;
    HDT_CHECK(nt_loopback_pair(SMALLBUF, &fd, &g.reader_fd) == 0);
    if (reader) {
        HDT_CHECK(pthread_create(&g.reader, NULL, reader_main, NULL) == 0);
        g.reading = true;
    }
    struct net_conn_options o = {
        .send_high_bytes = 16000, .send_low_bytes = 2000, .send_max_bytes = 1u << 20};
    HDT_CHECK(net_conn_adopt(s, fd, &handler, NULL, &o, &g.c) == 0);
    for (unsigned i = 0; i < BACKLOG; i++)
        HDT_CHECK(frame_send(s, (uint8_t)(i % 100), -1) == 0);
    g.paused = net_conn_send_paused(g.c);
    unsigned n = 0;
    for (unsigned j = 0; j < C0_SENT; j++)
        g.rc[n++] = frame_send(s, (uint8_t)(0x80 + j), 0);
    for (unsigned j = 0; j < C1_SENT; j++)
        g.rc[n++] = frame_send(s, (uint8_t)(0xc0 + j), 1);
    g.counts[0] = net_conn_class_count(g.c, 0);
    g.counts[1] = net_conn_class_count(g.c, 1);
    uint8_t m[URGENT];
    memset(m, 0xe1, sizeof(m));
    g.urgent_rc = net_conn_send_urgent(g.c, m, sizeof(m));
}

static void body_deliver(struct hd_shard *s, void *arg)
{
    (void)arg;
    setup(s, true);
    hd_timer_init(&g.timer, timer_fired);
    hd_timer_start(s, &g.timer, 50);
}

static void body_close(struct hd_shard *s, void *arg)
{
    (void)arg;
    setup(s, false);
    net_conn_close(g.c, 0, false);
    hdt_done(s);
}

static void body_drain(struct hd_shard *s, void *arg)
{
    (void)arg;
    setup(s, false);
    g.queued_before_drain = net_conn_queued_bytes(g.c);
    net_conn_class_drain(g.c);
    g.queued_after_drain = net_conn_queued_bytes(g.c);
    g.count_after_drain = net_conn_class_count(g.c, NET_SEND_CLASSES_MAX);
    net_conn_close(g.c, 0, false);
    hdt_done(s);
}

/* WAIT_MS after the classes filled (a later tick), two more frames for class 0: each drops the
 * oldest, which waited that long (on_drop says how long; derper averages it in its queue time). */
#define WAIT_MS 40
static void later_fired(struct hd_timer *t)
{
    struct hd_shard *s = hd_shard_current();
    (void)t;
    g.rc[0] = frame_send(s, 0x90, 0);
    g.rc[1] = frame_send(s, 0x91, 0);
    net_conn_close(g.c, 0, false);
    hdt_done(s);
}

static void body_wait(struct hd_shard *s, void *arg)
{
    (void)arg;
    setup(s, false);
    hd_timer_init(&g.timer, later_fired);
    hd_timer_start(s, &g.timer, WAIT_MS);
}

/* Shard 1: the moved connection, closed once the reader is done. */
static void moved_fired(struct hd_timer *t)
{
    struct hd_shard *s = hd_shard_current();
    struct net_conn *c = atomic_load(&g.moved);
    if (c == NULL || !atomic_load(&g.done)) {
        hd_timer_start(s, t, 10);
        return;
    }
    net_conn_close(c, 0, false);
    hdt_done(s);
}

static void moved_adopt(struct net_conn *c, void *arg)
{
    (void)arg;
    HDT_CHECK(c != NULL && hd_shard_id(net_conn_shard(c)) == 1);
    atomic_store(&g.moved, c);
}

/* Shard 0 moves the backed-up connection to shard 1 (what waits in its classes goes into its
 * send queue), then sends one more class frame while it moves: it must travel too. */
static void body_migrate(struct hd_shard *s, void *arg)
{
    (void)arg;
    if (hd_shard_id(s) == 1) {
        hd_timer_init(&g.timer, moved_fired);
        hd_timer_start(s, &g.timer, 10);
        return;
    }
    setup(s, true);
    HDT_CHECK(net_conn_migrate(g.c, 1, moved_adopt, NULL) == 0);
    g.count_after_drain = net_conn_class_count(g.c, NET_SEND_CLASSES_MAX);
    g.moving_rc = frame_send(s, MOVING, 0);
    atomic_store(&g.go, 1);
    hdt_done(s);
}

static void run_on(hdt_body_fn *body, unsigned shards, size_t bytes)
{
    memset(&g, 0, sizeof(g));
    g.want = bytes;
    g.got = malloc(bytes);
    cr_assert_not_null(g.got);
    struct hdt_options o = {
        .shards = shards, .layers = net_layers, .layers_args = net_layers_args, .layers_count = 1};
    cr_assert_eq(hdt_run(&o, body, NULL, NULL), 0);
    if (g.reading)
        pthread_join(g.reader, NULL);
    close(g.reader_fd);
    cr_assert(g.paused, "the backlog put the connection over its high watermark");
    static const int want[C0_SENT + C1_SENT] = {1, 1, 1, 1, 1, 1, 1, 1, -ENOSPC};
    for (unsigned i = 0; i < C0_SENT + C1_SENT; i++)
        cr_assert_eq(g.rc[i], want[i], "send %u returned %d", i, g.rc[i]);
    cr_assert_eq(g.counts[0], 4, "class 0 holds its depth");
    cr_assert_eq(g.counts[1], 2, "class 1 holds its depth");
    cr_assert_eq(g.urgent_rc, 0);
    cr_assert_geq(g.ndrops, 3);
    /* Class 0: the 5th and 6th frames made room by dropping the oldest; class 1 (no tries):
     * its 3rd frame was dropped. */
    cr_assert_eq(g.drops[0].k, 0);
    cr_assert_eq(g.drops[0].tag, 0x80);
    cr_assert_eq(g.drops[0].why, NET_SEND_DROP_OLDEST);
    cr_assert_eq(g.drops[1].k, 0);
    cr_assert_eq(g.drops[1].tag, 0x81);
    cr_assert_eq(g.drops[1].why, NET_SEND_DROP_OLDEST);
    cr_assert_eq(g.drops[2].k, 1);
    cr_assert_eq(g.drops[2].tag, 0xc2);
    cr_assert_eq(g.drops[2].why, NET_SEND_DROP_NEW);
    cr_assert_eq(g.closes, 1);
}

static void run(hdt_body_fn *body)
{
    run_on(body, 1, TOTAL);
}

Test(test_net_send_class, drop_policy_then_alternating_after_the_backlog, .timeout = 60)
{
    run(body_deliver);
    cr_assert_eq(g.ndrops, 3, "nothing else dropped (%u drops)", g.ndrops);
    cr_assert_eq(g.got_len, (size_t)TOTAL, "got %zu of %d bytes", g.got_len, TOTAL);
    /* The urgent message: between two backlog entries, ahead of every class frame. */
    uint8_t *u = memchr(g.got, 0xe1, TOTAL);
    cr_assert_not_null(u, "the urgent message never came");
    size_t at = (size_t)(u - g.got);
    cr_assert_eq(at % ENTRY, 0, "the urgent message cut entry %zu", at / ENTRY);
    cr_assert_lt(at, (size_t)BACKLOG * ENTRY, "the urgent message came after the class frames");
    for (size_t i = 0; i < URGENT; i++)
        cr_assert_eq(u[i], 0xe1);
    memmove(u, u + URGENT, TOTAL - at - URGENT);
    for (size_t i = 0; i < (size_t)BACKLOG * ENTRY; i++)
        cr_assert_eq(g.got[i], (uint8_t)((i / ENTRY) % 100), "backlog entry %zu byte %zu",
                     i / ENTRY, i % ENTRY);
    /* Then the classes' frames, one from each in turn, each whole. */
    static const uint8_t order[DELIVER] = {0x82, 0xc0, 0x83, 0xc1, 0x84, 0x85};
    for (unsigned j = 0; j < DELIVER; j++)
        for (size_t i = 0; i < ENTRY; i++)
            cr_assert_eq(g.got[(size_t)(BACKLOG + j) * ENTRY + i], order[j],
                         "class frame %u byte %zu: 0x%x", j, i,
                         g.got[(size_t)(BACKLOG + j) * ENTRY + i]);
    cr_assert_eq(g.ntaken, DELIVER);
    cr_assert_eq(memcmp(g.taken, order, DELIVER), 0, "on_taken in the order sent");
    cr_assert_eq(g.drained, 1, "on_drained once (%u)", g.drained);
    cr_log_info("the class frames waited up to %u ms", g.taken_waited_max);
}

Test(test_net_send_class, waiting_frames_dropped_before_on_close, .timeout = 60)
{
    run(body_close);
    cr_assert_eq(g.ndrops, 3 + DELIVER);
    cr_assert_eq(g.closed_drops_at_close, DELIVER, "every waiting frame dropped before on_close");
    cr_assert_eq(g.ntaken, 0);
    cr_assert_eq(g.drained, 0);
}

Test(test_net_send_class, drain_moves_everything_past_the_watermark, .timeout = 60)
{
    run(body_drain);
    cr_assert_eq(g.count_after_drain, 0);
    cr_assert_eq(g.ntaken, DELIVER);
    cr_assert_eq(g.queued_after_drain, g.queued_before_drain + (size_t)DELIVER * ENTRY);
    cr_assert_eq(g.ndrops, 3, "nothing dropped at the close: it all was in the send queue");
}

Test(test_net_send_class, a_frame_sent_while_moving_travels, .timeout = 60)
{
    run_on(body_migrate, 2, TOTAL + ENTRY);
    cr_assert_eq(g.count_after_drain, 0, "the move drained the classes");
    cr_assert_eq(g.ntaken, DELIVER);
    cr_assert_eq(g.ndrops, 3, "nothing dropped by the move (%u drops)", g.ndrops);
    cr_assert_geq(g.moving_rc, 0, "the frame sent while moving: %d", g.moving_rc);
    cr_assert_eq(g.got_len, (size_t)TOTAL + ENTRY,
                 "got %zu of %d bytes: the frame sent while "
                 "moving was lost",
                 g.got_len, TOTAL + ENTRY);
    for (size_t i = 0; i < ENTRY; i++)
        cr_assert_eq(g.got[TOTAL + i], MOVING, "the last entry is the one sent while moving");
}

Test(test_net_send_class, a_head_drop_says_how_long_its_frame_waited, .timeout = 60)
{
    run(body_wait);
    cr_assert_geq(g.ndrops, 5, "%u drops", g.ndrops);
    for (unsigned i = 0; i < 3; i++) /* in the tick the frames went in: no wait */
        cr_assert_eq(g.drops[i].waited_ms, 0, "drop %u waited %u ms", i, g.drops[i].waited_ms);
    for (unsigned i = 3; i < 5; i++) {
        cr_assert_eq(g.drops[i].why, NET_SEND_DROP_OLDEST);
        cr_assert_eq(g.drops[i].tag, 0x82 + (i - 3));
        cr_assert_geq(g.drops[i].waited_ms, WAIT_MS - 1, "drop %u waited %u ms", i,
                      g.drops[i].waited_ms);
    }
}
