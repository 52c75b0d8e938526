/* test_tlsconn_wss.c - WebSocket over TLS (two stacked codecs) on a real loopback connection,
 * both ends ours on one shard: the client sends an upgrade request over TLS, the server answers
 * the 101 and switches to WebSocket above TLS, the client does too and sends one message; the
 * server answers it and ends the connection in one of three ways. Each must reach the client as
 * the answer, then the ending, then a clean TLS end (close_notify: the client's on_close sees 0;
 * an end of stream without it is -ECONNRESET):
 * - net_conn_close(c, 0, true) inside on_data (that is, inside the WebSocket codec's decode):
 *   the TLS close hook sealed its close_notify into the WebSocket codec's output queue (the
 *   client failed the record after it); with a ping in the same read (its pong waiting in that
 *   queue), TLS took what it sealed back as its own plaintext, in a loop, until the frame pool
 *   ran out ("sealing records: No buffer space available" after 20-30 s of a stalled shard:
 *   the client here frames its ping and message by hand and reads the frames itself);
 * - the same from a task (outside any codec): the close_notify went out before the answer
 *   (still the app's plaintext, not yet framed), and the client dropped the answer after it;
 * - net_ws_close from a task: the close frame went on the wire unencrypted.
 * And net_conn_send_urgent under the stacked codecs: a control message queued after an answer in
 * the same on_data goes ahead of it, framed by the WebSocket codec like a message of the app's
 * (it queued behind the answer, as any other send, while the codec levels were implicit). */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdatomic.h>
#include <string.h>

#include "tlsconn_server.h"
#include "tlsconn_util.h"
#include <hd/net_ws.h>

static void suite_init(void)
{
    tu_check_boringssl();
}

TestSuite(test_tlsconn_wss, .init = suite_init, .timeout = 120);

enum end_how { END_IN_DATA, END_IN_DATA_PINGED, END_FROM_TASK, END_WS_CLOSE, END_URGENT };

static const char request[] = "GET /ws HTTP/1.1\r\nUpgrade: websocket\r\n\r\n";
static const char response[] = "HTTP/1.1 101 Switching Protocols\r\n\r\n";
static const char question[] = "question";
static const char answer[] = "the answer, then the end";
/* END_URGENT: an answer longer than NET_URGENT_MAX (an urgent message passes such entries only),
 * then an urgent one; the client must get them the other way round. */
static const char long_answer[] = "a long answer: it is longer than any urgent message can be, "
                                  "so that an urgent one goes ahead of it";
static const char urgent[] = "urgent";

static struct {
    enum end_how how;
    struct tls_ctx *server_ctx, *client_ctx;
    struct net_listener *listener;
    bool server_ws, client_ws, answer_out;
    char got[256];
    size_t got_len;
    struct net_ws_decoder dec; /* END_IN_DATA_PINGED: the client reads the frames itself */
    unsigned pongs;
    _Atomic int server_reason, client_reason, closes;
} w;

static void both_closed(struct hd_shard *s)
{
    if (atomic_fetch_add(&w.closes, 1) == 1)
        hd_runtime_stop(hd_shard_runtime(s));
}

/* ---------------------------------------------------------------- server */

static void srv_end(void *arg)
{
    struct net_conn *c = arg; /* still open: the client waits for this end */
    if (w.how != END_WS_CLOSE) {
        net_conn_close(c, 0, true);
        return;
    }
    /* net_ws_close drops what is not framed yet: first let the answer go (this tick's flush;
     * a task that defers runs in the next tick). */
    if (!w.answer_out) {
        w.answer_out = true;
        HDT_CHECK(hd_defer(net_conn_shard(c), srv_end, c) == 0);
        return;
    }
    HDT_CHECK(net_ws_close(c, 1000, "bye", 0) == 0);
}

static ssize_t srv_data(struct net_conn *c, const uint8_t *data, size_t len)
{
    if (!w.server_ws) {
        if (len < sizeof(request) - 1)
            return 0;
        HDT_CHECK(memcmp(data, request, sizeof(request) - 1) == 0);
        HDT_CHECK(net_conn_send_copy(c, response, sizeof(response) - 1) == 0);
        HDT_CHECK(net_ws_start(c, true) == 0); /* above TLS */
        w.server_ws = true;
        return (ssize_t)(sizeof(request) - 1);
    }
    if (len < sizeof(question) - 1)
        return 0;
    HDT_CHECK(memcmp(data, question, sizeof(question) - 1) == 0);
    if (w.how == END_URGENT) {
        HDT_CHECK(net_conn_send_copy(c, long_answer, sizeof(long_answer) - 1) == 0);
        HDT_CHECK(net_conn_send_urgent(c, urgent, sizeof(urgent) - 1) == 0);
    } else {
        HDT_CHECK(net_conn_send_copy(c, answer, sizeof(answer) - 1) == 0);
    }
    if (w.how == END_IN_DATA || w.how == END_IN_DATA_PINGED || w.how == END_URGENT)
        net_conn_close(c, 0, true);
    else
        HDT_CHECK(hd_defer(net_conn_shard(c), srv_end, c) == 0);
    return (ssize_t)len;
}

static void srv_close(struct net_conn *c, int reason)
{
    atomic_store(&w.server_reason, reason);
    both_closed(net_conn_shard(c));
}

static const struct net_conn_handler srv_handler = {.on_data = srv_data, .on_close = srv_close};

static void srv_accept(struct net_listener *l, int fd, const struct net_addr *peer, void *arg)
{
    (void)peer, (void)arg;
    struct net_conn *c;
    HDT_CHECK(net_conn_adopt(net_listener_shard(l), fd, &srv_handler, NULL, NULL, &c) == 0);
    struct tls_conn_options o = {.ktls_disable = true};
    HDT_CHECK(tls_conn_start(c, w.server_ctx, &o) == 0);
}

/* ---------------------------------------------------------------- client */

static void cl_handshake(struct net_conn *c, const struct tls_conn_info *info)
{
    HDT_CHECK(info->mode == TLS_MODE_USERSPACE);
    HDT_CHECK(net_conn_send_copy(c, request, sizeof(request) - 1) == 0);
}

/* A masked client frame of payload p[0..n) appended at out; returns its size. */
static size_t frame_by_hand(uint8_t *out, uint8_t opcode, const char *p, size_t n)
{
    static const uint8_t key[4] = {1, 2, 3, 4};
    size_t h = net_ws_header_write(out, opcode, true, n, key);
    memcpy(out + h, p, n);
    net_ws_mask(out + h, n, key, 0);
    return h + n;
}

static int got_data(void *arg, const uint8_t *data, size_t len)
{
    (void)arg;
    HDT_CHECK(w.got_len + len < sizeof(w.got));
    memcpy(w.got + w.got_len, data, len);
    w.got_len += len;
    return 0;
}

static int got_control(void *arg, uint8_t opcode, const uint8_t *payload, size_t len)
{
    (void)arg, (void)payload, (void)len;
    HDT_CHECK(opcode == NET_WS_OP_PONG);
    w.pongs++;
    return 0;
}

static const struct net_ws_sink got_sink = {.data = got_data, .control = got_control};

/* After the 101: a ping and the question in one send (one TLS record). */
static void cl_pinged_start(struct net_conn *c)
{
    uint8_t out[2 * (NET_WS_HEADER_MAX + 16)];
    size_t n = frame_by_hand(out, NET_WS_OP_PING, "p", 1);
    n += frame_by_hand(out + n, NET_WS_OP_BINARY, question, sizeof(question) - 1);
    HDT_CHECK(net_conn_send_copy(c, out, n) == 0);
    net_ws_decoder_init(&w.dec, false);
}

static ssize_t cl_data(struct net_conn *c, const uint8_t *data, size_t len)
{
    if (!w.client_ws) {
        if (len < sizeof(response) - 1)
            return 0;
        HDT_CHECK(memcmp(data, response, sizeof(response) - 1) == 0);
        w.client_ws = true;
        if (w.how == END_IN_DATA_PINGED) {
            cl_pinged_start(c);
        } else {
            HDT_CHECK(net_ws_start(c, false) == 0);
            HDT_CHECK(net_conn_send_copy(c, question, sizeof(question) - 1) == 0);
        }
        return (ssize_t)(sizeof(response) - 1);
    }
    if (w.how != END_IN_DATA_PINGED)
        return got_data(NULL, data, len) == 0 ? (ssize_t)len : -EIO;
    uint8_t copy[512]; /* the decoder unmasks in place */
    HDT_CHECK(len <= sizeof(copy));
    memcpy(copy, data, len);
    HDT_CHECK(net_ws_decode(&w.dec, copy, len, &got_sink, NULL) == 0);
    return (ssize_t)len;
}

static void cl_close(struct net_conn *c, int reason)
{
    atomic_store(&w.client_reason, reason);
    both_closed(net_conn_shard(c));
}

static const struct net_conn_handler cl_handler = {.on_data = cl_data, .on_close = cl_close};

static void body(struct hd_shard *s, void *arg)
{
    (void)arg;
    struct net_addr a;
    char text[32];
    snprintf(text, sizeof(text), "127.0.0.1:%u", ts.port);
    HDT_CHECK(net_addr_parse(text, &a) == 0);
    HDT_CHECK(net_listener_start(s, &a, NULL, srv_accept, NULL, &w.listener) == 0);
    struct net_conn *c;
    HDT_CHECK(net_conn_connect(s, &a, 5000, &cl_handler, NULL, NULL, &c) == 0);
    struct tls_conn_options o = {.on_handshake = cl_handshake, .ktls_disable = true};
    HDT_CHECK(tls_conn_start(c, w.client_ctx, &o) == 0);
}

static void stop(struct hd_shard *s)
{
    (void)s;
    if (w.listener)
        net_listener_stop(w.listener);
    w.listener = NULL;
}

static void run(enum end_how how)
{
    ts_reset(); /* a port, and ts_layers' options */
    memset(&w, 0, sizeof(w));
    w.how = how;
    atomic_store(&w.server_reason, 1);
    atomic_store(&w.client_reason, 1);
    struct tls_server_options so = {.self_signed_host = "127.0.0.1"};
    cr_assert_eq(tls_server_ctx_create(&so, &w.server_ctx), 0);
    struct tls_client_options co = {.insecure = true};
    cr_assert_eq(tls_client_ctx_create(&co, &w.client_ctx), 0);
    struct hdt_options o = {.shards = 1, TS_LAYERS, .shard_stop = stop};
    int rc = hdt_run(&o, body, NULL, NULL);
    tls_ctx_destroy(w.server_ctx);
    tls_ctx_destroy(w.client_ctx);
    cr_assert_eq(rc, 0);
    cr_assert_eq(atomic_load(&w.closes), 2);
    char want_got[256];
    if (how == END_URGENT)
        snprintf(want_got, sizeof(want_got), "%s%s", urgent, long_answer);
    else
        snprintf(want_got, sizeof(want_got), "%s", answer);
    cr_assert_eq(w.got_len, strlen(want_got), "the client got %zu bytes: %.*s", w.got_len,
                 (int)w.got_len, w.got);
    cr_assert_eq(memcmp(w.got, want_got, w.got_len), 0, "the client got %.*s", (int)w.got_len,
                 w.got);
    if (how == END_IN_DATA_PINGED)
        cr_assert_eq(w.pongs, 1);
    cr_assert_eq(atomic_load(&w.server_reason), 0, "server: %s",
                 strerror(-atomic_load(&w.server_reason)));
    /* After a close frame the client's WebSocket codec ends with -ESHUTDOWN; otherwise TLS's
     * close_notify ends it with 0. An end without close_notify would be -ECONNRESET. */
    int want = how == END_WS_CLOSE ? -ESHUTDOWN : 0;
    cr_assert_eq(atomic_load(&w.client_reason), want, "client: %s",
                 strerror(-atomic_load(&w.client_reason)));
}

Test(test_tlsconn_wss, graceful_close_inside_on_data)
{
    run(END_IN_DATA);
}

Test(test_tlsconn_wss, graceful_close_inside_on_data_with_a_pong_queued)
{
    run(END_IN_DATA_PINGED);
}

Test(test_tlsconn_wss, graceful_close_from_a_task)
{
    run(END_FROM_TASK);
}

Test(test_tlsconn_wss, websocket_close_from_a_task)
{
    run(END_WS_CLOSE);
}

Test(test_tlsconn_wss, urgent_goes_ahead_through_both_codecs)
{
    run(END_URGENT);
}
