/* test_export.c - a live connection exported as fd + bytes (net_conn_export) and imported
 * again (net_conn_import) on a real shard over a real socket: the bytes the app left unconsumed
 * and a send still queued at the export survive it, in order, and the peer never notices;
 * the blob's parser refuses every truncation, trailing bytes, a wrong magic or version and
 * lengths over their bounds with -EPROTO, and an import of bad bytes leaves the fd alone. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"
#include "net_impl.h"

static const struct hd_module *const net_layers[] = {&net_module};

static struct {
    int peer;               /* the test's end of the socketpair (non-blocking) */
    struct net_conn *a, *b; /* before and after the export */
    uint8_t blob[8192];
    size_t blob_len;
    int fd;
    char got_peer[64]; /* what the peer read */
    size_t got_peer_len;
    char got_app[64]; /* what the imported connection's app consumed */
    size_t got_app_len;
    int import_bad_rc, parse_fails, closes;
    struct hd_timer poll;
    unsigned step;
    uint64_t deadline_ms; /* the run gives up here (a lost byte would otherwise wait forever) */
    bool timed_out;
} g;

static void exported(int fd, const uint8_t *blob, size_t len, void *arg)
{
    (void)arg;
    HDT_CHECK(len <= sizeof(g.blob));
    memcpy(g.blob, blob, len);
    g.blob_len = len;
    g.fd = fd;
    g.a = NULL;
    g.step = 2;
}

/* A message parser of the simplest kind: nothing until 10 bytes are there. */
static ssize_t app_data(struct net_conn *c, const uint8_t *data, size_t len)
{
    if (c == g.a && g.step == 0) { /* the first 4 bytes: queue a send, and export */
        HDT_CHECK(len == 4);
        HDT_CHECK(net_conn_send_copy(c, "queued", 6) == 0);
        g.step = 1;
        HDT_CHECK(net_conn_export(c, NULL, exported, NULL) == 0);
        return 0; /* kept: the tail travels with the export */
    }
    if (len < 10)
        return 0;
    HDT_CHECK(c == g.b);
    memcpy(g.got_app, data, 10);
    g.got_app_len = 10;
    return 10;
}

static void app_close(struct net_conn *c, int reason)
{
    (void)c, (void)reason;
    g.closes++;
}

static const struct net_conn_handler handler = {.on_data = app_data, .on_close = app_close};

/* The parser on every truncation and a few corruptions of the real blob. */
static void parse_checks(const uint8_t *blob, size_t len)
{
    struct net_export_view v;
    for (size_t n = 0; n < len; n++)
        if (net_export_parse(blob, n, &v) != -EPROTO)
            g.parse_fails++;
    uint8_t *copy = malloc(len + 1);
    HDT_CHECK(copy != NULL);
    memcpy(copy, blob, len);
    copy[len] = 0;
    if (net_export_parse(copy, len + 1, &v) != -EPROTO) /* a trailing byte */
        g.parse_fails++;
    copy[0] ^= 1; /* the magic */
    if (net_export_parse(copy, len, &v) != -EPROTO)
        g.parse_fails++;
    copy[0] ^= 1;
    copy[4] ^= 2; /* the version */
    if (net_export_parse(copy, len, &v) != -EPROTO)
        g.parse_fails++;
    copy[4] ^= 2;
    /* the codec state's length (after the fixed fields) over its bound */
    size_t codec_len_at = NET_EXPORT_HEADER_SIZE - 16u;
    uint32_t big = NET_EXPORT_CODEC_MAX + 1;
    memcpy(copy + codec_len_at, &big, sizeof(big));
    if (net_export_parse(copy, len, &v) != -EPROTO)
        g.parse_fails++;
    free(copy);
}

static void import_now(struct hd_shard *s)
{
    struct net_export_view v;
    HDT_CHECK(net_export_parse(g.blob, g.blob_len, &v) == 0);
    HDT_CHECK(v.rx_tail_len == 4 && memcmp(v.rx_tail, "0123", 4) == 0);
    HDT_CHECK(v.wire.count == 1 && v.plain.count == 0 && v.codec_len == 0);
    HDT_CHECK(v.stats.bytes_in == 4 && v.opt.idle_timeout_ms == 60000);
    parse_checks(g.blob, g.blob_len);
    uint8_t bad[16] = {0};
    g.import_bad_rc = net_conn_import(s, g.fd, bad, sizeof(bad), &handler, NULL, NULL, &g.b);
    HDT_CHECK(fcntl(g.fd, F_GETFD) >= 0); /* a refused import leaves the fd open */
    HDT_CHECK(net_conn_import(s, g.fd, g.blob, g.blob_len, &handler, NULL, NULL, &g.b) == 0);
    net_conn_pause_recv(g.b, false); /* it comes paused: the carried "0123" is offered now */
    HDT_CHECK(write(g.peer, "456789", 6) == 6);
    g.step = 3;
}

static void poll_fired(struct hd_timer *t)
{
    struct hd_shard *s = hd_shard_current();
    ssize_t n = read(g.peer, g.got_peer + g.got_peer_len, sizeof(g.got_peer) - g.got_peer_len);
    if (n > 0)
        g.got_peer_len += (size_t)n;
    if (g.step == 2)
        import_now(s);
    g.timed_out = hd_now_ms(s) > g.deadline_ms;
    if (g.timed_out || (g.step == 3 && g.got_app_len == 10 && g.got_peer_len >= 6)) {
        if (g.b)
            net_conn_close(g.b, 0, false);
        close(g.peer);
        hd_runtime_stop(hd_shard_runtime(s));
        return;
    }
    hd_timer_start(s, t, 1);
}

static void body(struct hd_shard *s, void *arg)
{
    (void)arg;
    int sv[2];
    HDT_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    HDT_CHECK(fcntl(sv[1], F_SETFL, O_NONBLOCK) == 0);
    g.peer = sv[1];
    struct net_conn_options o = {.idle_timeout_ms = 60000};
    HDT_CHECK(net_conn_adopt(s, sv[0], &handler, NULL, &o, &g.a) == 0);
    HDT_CHECK(write(g.peer, "0123", 4) == 4);
    g.deadline_ms = hd_now_ms(s) + 20000;
    hd_timer_init(&g.poll, poll_fired);
    hd_timer_start(s, &g.poll, 1);
}

Test(export, round_trip_over_a_live_socket)
{
    memset(&g, 0, sizeof(g));
    g.fd = -1;
    struct hdt_options o = {.shards = 1, .layers = net_layers, .layers_count = 1};
    cr_assert_eq(hdt_run(&o, body, NULL, NULL), 0);
    cr_assert(!g.timed_out, "no answer within 20 s: step %u, the app has %zu bytes, the peer %zu",
              g.step, g.got_app_len, g.got_peer_len);
    cr_assert_eq(g.parse_fails, 0, "the parser accepted %d bad blobs", g.parse_fails);
    cr_assert_eq(g.import_bad_rc, -EPROTO);
    cr_assert_eq(g.got_peer_len, 6, "the peer read %zu bytes", g.got_peer_len);
    cr_assert(memcmp(g.got_peer, "queued", 6) == 0, "the queued send did not arrive");
    cr_assert_eq(g.got_app_len, 10);
    cr_assert(memcmp(g.got_app, "0123456789", 10) == 0, "bytes lost or reordered: %.10s",
              g.got_app);
    cr_assert_eq(g.closes, 1, "on_close ran %d times (only the import's close)", g.closes);
}

Test(export, parser_refuses_garbage)
{
    struct net_export_view v;
    uint8_t junk[512];
    for (unsigned seed = 1; seed < 200; seed++) {
        for (size_t i = 0; i < sizeof(junk); i++)
            junk[i] = (uint8_t)((i * 131u + seed * 7u) ^ (seed >> 1));
        cr_assert_eq(net_export_parse(junk, (seed * 13u) % sizeof(junk), &v), -EPROTO);
    }
    cr_assert_eq(net_export_parse(junk, 0, &v), -EPROTO);
}
