/* test_codec_move.c - a move whose codec cannot arrive (its move_in fails on the destination
 * shard, as TLS's does when that shard's pool is out of state): the app still adopts the
 * connection there, and must be able to call net's API on it before net closes it with -ENOMEM.
 * The codec is gone from level 0 while the level stays counted (what it would have encoded must
 * never reach the socket as plaintext), so net must test the codec itself, not the level count,
 * before calling its hooks: a graceful close in adopt (the codec's close hook) and a resumed
 * receive in adopt (its record hook) both dereferenced the missing codec.
 *
 * Two shards: shard 0 adopts one end of a loopback TCP pair with the test codec (it passes bytes
 * through but the last, kept as its tail; moves by a heap token; refuses every arrival) and,
 * once the peer's first bytes came through, moves it to shard 1, whose adopt does the call under
 * test (a resume replays the tails: the codec's, without the codec, must not be decoded). The test
 * thread holds the other end and reads until the end of stream, bounded by a receive timeout. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "harness.h"
#include "net_test_util.h"
#include <hd/net_codec.h>

static const struct hd_module *const net_layers[] = {&net_module};
static struct net_shard_options net_opts;
static void *const net_layers_args[] = {&net_opts};

enum adopt_call { ADOPT_CLOSE_GRACEFUL, ADOPT_RESUME_RECV };

static struct {
    enum adopt_call call;
    int peer_fd;
    bool moving; /* shard 0 asked for the move */
    _Atomic unsigned adopted, closes, close_shard, moved_drops, moved_in, releases;
    _Atomic bool codec_at_adopt; /* net_conn_codec() was non-NULL in adopt */
    _Atomic int close_reason;
} g;

/* ---------------------------------------------------------------- the test codec */

/* Keeps the last byte it is given (the codec's tail, as TLS keeps a partial record). */
static ssize_t pass_decode(struct net_conn *c, void *state, uint8_t *in, size_t len)
{
    (void)state;
    if (len < 2)
        return 0;
    int rc = net_conn_deliver(c, in, len - 1);
    return rc < 0 ? rc : (ssize_t)len - 1;
}

static int pass_encode(struct net_conn *c, void *state)
{
    (void)state;
    return net_conn_plain_pass(c);
}

static void *pass_move_out(struct net_conn *c, void *state)
{
    (void)c, (void)state;
    return malloc(1); /* the moved state: heap memory */
}

static void *pass_move_in(struct net_conn *c, void *moved)
{
    (void)c;
    free(moved);
    atomic_fetch_add(&g.moved_in, 1);
    return NULL; /* the destination has no state for it: the move fails */
}

static void pass_move_drop(struct hd_shard *s, void *moved)
{
    (void)s;
    free(moved);
    atomic_fetch_add(&g.moved_drops, 1);
}

static int pass_close(struct net_conn *c, void *state, int reason)
{
    (void)state;
    net_conn_close(c, reason, true);
    return 0;
}

static int pass_record(struct net_conn *c, void *state, uint8_t type, uint8_t *data, size_t len)
{
    (void)c, (void)state, (void)type, (void)data, (void)len;
    return -EPROTO;
}

static const struct net_codec pass_codec = {
    .name = "pass",
    .decode = pass_decode,
    .encode = pass_encode,
    .move_out = pass_move_out,
    .move_in = pass_move_in,
    .move_drop = pass_move_drop,
    .close = pass_close,
};

/* The same with a record hook (kTLS's shape): receiving is record-typed. */
static const struct net_codec pass_record_codec = {
    .name = "pass-record",
    .decode = pass_decode,
    .encode = pass_encode,
    .move_out = pass_move_out,
    .move_in = pass_move_in,
    .move_drop = pass_move_drop,
    .record = pass_record,
    .close = pass_close,
};

/* A codec that refuses to leave (TLS's in the middle of a handshake or a rekey): move_out returns
 * NULL and its state stays the codec's, for its release at the close. */
static void *refuse_move_out(struct net_conn *c, void *state)
{
    (void)c, (void)state;
    return NULL;
}

static void refuse_release(struct net_conn *c, void *state)
{
    (void)c;
    free(state);
    atomic_fetch_add(&g.releases, 1);
}

static const struct net_codec refuse_codec = {
    .name = "refuse",
    .decode = pass_decode,
    .encode = pass_encode,
    .release = refuse_release,
    .move_out = refuse_move_out,
    .move_in = pass_move_in,
    .move_drop = pass_move_drop,
};

/* ---------------------------------------------------------------- the app */

static void adopt(struct net_conn *c, void *arg);

/* Shard 0: the peer's first bytes came through the codec (it kept the last one): move. */
static ssize_t on_data(struct net_conn *c, const uint8_t *data, size_t len)
{
    (void)data;
    if (hd_shard_id(net_conn_shard(c)) == 0 && !g.moving) {
        g.moving = true;
        HDT_CHECK(net_conn_migrate(c, 1, adopt, NULL) == 0);
    }
    return (ssize_t)len;
}

static void on_close(struct net_conn *c, int reason)
{
    atomic_store(&g.close_reason, reason);
    atomic_store(&g.close_shard, hd_shard_id(net_conn_shard(c)));
    atomic_fetch_add(&g.closes, 1);
    hdt_done(net_conn_shard(c));
}

static const struct net_conn_handler handler = {.on_data = on_data, .on_close = on_close};

static void adopt(struct net_conn *c, void *arg)
{
    (void)arg;
    HDT_CHECK(c != NULL && hd_shard_id(net_conn_shard(c)) == 1);
    atomic_fetch_add(&g.adopted, 1);
    atomic_store(&g.codec_at_adopt, net_conn_codec(c, NULL) != NULL);
    if (g.call == ADOPT_CLOSE_GRACEFUL) {
        net_conn_close(c, 0, true);
    } else {
        net_conn_pause_recv(c, true);
        net_conn_pause_recv(c, false);
    }
}

/* Shard 0: one end of a loopback pair, with the codec, moved to shard 1 at once. */
static void body(struct hd_shard *s, void *arg)
{
    const struct net_codec *codec = arg;
    if (hd_shard_id(s) != 0)
        return; /* shard 1 is done when the moved connection closes (shard 0 when it stays) */
    int fd;
    HDT_CHECK(nt_loopback_pair(0, &fd, &g.peer_fd) == 0);
    static const uint8_t hello[3] = {1, 2, 3};
    HDT_CHECK(write(g.peer_fd, hello, sizeof(hello)) == (ssize_t)sizeof(hello));
    struct net_conn *c;
    HDT_CHECK(net_conn_adopt(s, fd, &handler, NULL, NULL, &c) == 0);
    void *state = NULL;
    if (codec == &refuse_codec) {
        state = malloc(1);
        HDT_CHECK(state != NULL);
    }
    net_conn_set_codec(c, codec, state);
    hdt_done(s);
}

static void run(enum adopt_call call, const struct net_codec *codec)
{
    memset(&g, 0, sizeof(g));
    g.call = call;
    g.peer_fd = -1;
    struct hdt_options o = {
        .shards = 2, .layers = net_layers, .layers_args = net_layers_args, .layers_count = 1};
    cr_assert_eq(hdt_run(&o, body, (void *)codec, NULL), 0);
    cr_assert_eq(atomic_load(&g.moved_in), 1, "the codec's move_in ran on the destination");
    cr_assert_eq(atomic_load(&g.adopted), 1, "the app adopted the connection on shard 1");
    cr_assert_not(atomic_load(&g.codec_at_adopt), "the codec that could not move is gone");
    cr_assert_eq(atomic_load(&g.closes), 1, "closed once");
    cr_assert_eq(atomic_load(&g.close_shard), 1, "on the destination shard");
    cr_assert_eq(atomic_load(&g.moved_drops), 0, "the moved state arrived (and was refused)");
    /* The peer sees the end of the stream and nothing before it. */
    struct timeval tv = {.tv_sec = 10};
    cr_assert_eq(setsockopt(g.peer_fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
    uint8_t b;
    ssize_t n = read(g.peer_fd, &b, 1);
    cr_assert(n == 0 || (n < 0 && errno == ECONNRESET), "end of stream (read gave %zd)", n);
    close(g.peer_fd);
}

Test(test_net_codec_move, graceful_close_in_adopt_after_move_in_failed, .timeout = 60)
{
    run(ADOPT_CLOSE_GRACEFUL, &pass_codec);
    cr_assert_eq(atomic_load(&g.close_reason), 0, "the app's close came first");
}

Test(test_net_codec_move, resumed_recv_in_adopt_after_move_in_failed, .timeout = 60)
{
    run(ADOPT_RESUME_RECV, &pass_record_codec);
    cr_assert_eq(atomic_load(&g.close_reason), -ENOMEM, "net closes a move that failed");
}

/* The codec refuses to leave: the move fails on shard 0, which closes the connection with
 * -ENOMEM, and the codec's state is released there once (it leaked: the level had let go of it). */
Test(test_net_codec_move, a_codec_that_refuses_to_leave_is_released_at_the_close, .timeout = 60)
{
    memset(&g, 0, sizeof(g));
    g.peer_fd = -1;
    struct hdt_options o = {
        .shards = 2, .layers = net_layers, .layers_args = net_layers_args, .layers_count = 1};
    cr_assert_eq(hdt_run(&o, body, (void *)&refuse_codec, NULL), 0);
    cr_assert_eq(atomic_load(&g.adopted), 0, "nothing arrived on shard 1");
    cr_assert_eq(atomic_load(&g.closes), 1, "closed once");
    cr_assert_eq(atomic_load(&g.close_shard), 0, "on the source shard");
    cr_assert_eq(atomic_load(&g.close_reason), -ENOMEM);
    cr_assert_eq(atomic_load(&g.releases), 1, "the codec's state released once (%u)",
                 atomic_load(&g.releases));
    close(g.peer_fd);
}
