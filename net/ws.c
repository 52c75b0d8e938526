/* ws.c - the WebSocket codec (net_ws.h, net_ws_start): decode turns the peer's binary messages
 * into the app's byte stream (boundaries mean nothing: one app frame may span messages, a
 * message may hold many) and answers pings and closes; encode wraps each queued plaintext entry
 * in binary messages of at most 16 KiB (a server sends a 2-10 byte header frame and the payload
 * by reference for each: Tailscale's WebSocket client refuses a message over 32 KiB; a client
 * masks a copy with a fresh random key, in messages of at most NET_WS_CLIENT_CHUNK bytes). The
 * decoder (ws_frame.c) is streaming and unmasks in place. A ping is answered with a pong, a close
 * is echoed and closes the connection after the flush; a text message (1003), a message over
 * NET_WS_MESSAGE_MAX (1009, refused from the header), an unmasked client frame, RSV bits (no
 * extension is ever negotiated: no permessage-deflate), reserved opcodes or bad fragmentation
 * (1002) are answered with a close frame and one log line. net_ws_close sends our own close: a
 * server closes after the flush, a client waits up to NET_WS_CLOSE_WAIT_MS for the server's
 * close first (RFC 6455 section 7.1.1). Runs on the connection's shard. Owns: struct net_ws,
 * which lives in one pool frame (so it moves with a migrating connection as it is, and any shard
 * may free it) until the codec is released. */
#include <errno.h>
#include <string.h>

#include <openssl/rand.h>

#include <hd/net_codec.h>
#include <hd/net_ws.h>

struct net_ws {
    struct hd_frame *self; /* the frame holding this struct */
    bool server;
    bool closing;     /* our close frame is queued: nothing more is framed, input is ignored */
    bool awaiting;    /* a client's own close: input is read until the server's close comes */
    int close_reason; /* for the connection's close once the server's close came */
    struct net_ws_decoder dec;
    struct net_ws_stats stats;
};

static const struct net_codec ws_codec;

/* What the sink callbacks need: the connection changes when it migrates, so it is not kept. */
struct ws_call {
    struct net_conn *c;
    struct net_ws *w;
};

/* A control frame of ours: straight onto the wire queue, between whole messages. */
static int control_out(struct net_conn *c, struct net_ws *w, uint8_t opcode, const uint8_t *data,
                       size_t len)
{
    HD_ASSERT(len <= NET_WS_CONTROL_MAX);
    struct hd_frame *f = hd_frame_get(net_conn_shard(c), NET_WS_HEADER_MAX + NET_WS_CONTROL_MAX);
    if (f == NULL)
        return -ENOBUFS;
    uint8_t key[4];
    if (!w->server)
        RAND_bytes(key, sizeof(key));
    size_t n = net_ws_header_write(f->data, opcode, true, len, w->server ? NULL : key);
    memcpy(f->data + n, data, len);
    if (!w->server)
        net_ws_mask(f->data + n, len, key, 0);
    f->len = (uint32_t)(n + len);
    return net_conn_wire_queue(c, f, 0, f->len);
}

/* Queue our close frame (once): from now on nothing more is framed. Returns 0 or -errno. */
static int close_frame(struct net_conn *c, struct net_ws *w, uint16_t status, const char *text,
                       size_t text_len)
{
    w->closing = true;
    uint8_t p[NET_WS_CONTROL_MAX];
    size_t n = 0;
    if (status != 0) {
        p[0] = (uint8_t)(status >> 8);
        p[1] = (uint8_t)status;
        if (text_len > NET_WS_CLOSE_REASON_MAX)
            text_len = NET_WS_CLOSE_REASON_MAX;
        if (text_len > 0)
            memcpy(p + 2, text, text_len);
        n = 2 + text_len;
    }
    return control_out(c, w, NET_WS_OP_CLOSE, p, n);
}

/* Queue a close frame and close c once it is sent. */
static void close_out(struct net_conn *c, struct net_ws *w, uint16_t status, const char *text,
                      size_t text_len, int reason)
{
    if (w->closing)
        return;
    int rc = close_frame(c, w, status, text, text_len);
    net_conn_close(c, rc < 0 ? rc : reason, rc == 0);
}

/* ---------------------------------------------------------------- decode */

static int sink_data(void *arg, const uint8_t *data, size_t len)
{
    struct ws_call *k = arg;
    if (k->w->closing)
        return 0;
    return net_conn_deliver(k->c, data, len);
}

static int sink_control(void *arg, uint8_t opcode, const uint8_t *payload, size_t len)
{
    struct ws_call *k = arg;
    struct net_ws *w = k->w;
    if (w->awaiting && opcode == NET_WS_OP_CLOSE) { /* the answer to ours: done */
        w->awaiting = false;
        w->stats.closes_in++;
        net_conn_close(k->c, w->close_reason, true);
        return 0;
    }
    if (w->closing)
        return 0;
    if (opcode == NET_WS_OP_PING) {
        w->stats.pings_in++;
        return control_out(k->c, w, NET_WS_OP_PONG, payload, len);
    }
    if (opcode == NET_WS_OP_CLOSE) {
        /* RFC 6455 section 5.5.1: answer with a close (echoing the status), then close. */
        w->stats.closes_in++;
        uint16_t status = len >= 2 ? (uint16_t)(payload[0] << 8 | payload[1]) : 0;
        /* Section 7.4: 1004-1006 and 1015 never go on the wire, nor anything under 1000. */
        bool sendable =
            status >= 1000 && status < 5000 && (status < 1004 || status > 1006) && status != 1015;
        if (status != 0 && !sendable)
            status = NET_WS_CLOSE_PROTOCOL;
        close_out(k->c, w, status, NULL, 0, -ESHUTDOWN);
    }
    return 0; /* a pong: nothing to do (we send no pings) */
}

static const struct net_ws_sink ws_sink = {.data = sink_data, .control = sink_control};

static ssize_t ws_decode(struct net_conn *c, void *state, uint8_t *in, size_t len)
{
    struct net_ws *w = state;
    if (w->closing && !w->awaiting)
        return (ssize_t)len; /* after a close nothing counts */
    struct ws_call k = {c, w};
    int rc = net_ws_decode(&w->dec, in, len, &ws_sink, &k);
    if (rc == 0 || (w->closing && !w->awaiting))
        return (ssize_t)len;
    if (w->awaiting) { /* a bad frame instead of the server's close: close now */
        w->awaiting = false;
        net_conn_close(c, rc, false);
        return (ssize_t)len;
    }
    if (w->dec.error == NULL)
        return rc; /* the app (net_conn_deliver) asked to close */
    w->stats.protocol_errors++;
    char peer[64];
    /* A refused size names the limit: a peer's message over it is the likely reason. */
    hd_log_rl(HD_LOG_INFO, "websocket: %s%s from %s: closing with status %u", w->dec.error,
              rc == -EMSGSIZE ? " (limit NET_WS_MESSAGE_MAX = 69632 bytes)" : "",
              net_addr_format(net_conn_peer(c), peer, sizeof(peer)), (unsigned)w->dec.error_code);
    _Static_assert(NET_WS_MESSAGE_MAX == 69632u, "the log line above names the limit");
    close_out(c, w, w->dec.error_code, w->dec.error, strlen(w->dec.error), rc);
    return (ssize_t)len;
}

/* ---------------------------------------------------------------- encode */

/* Server: the payload by reference in messages of at most NET_WS_SERVER_CHUNK bytes, a header
 * frame before each (Tailscale's client, coder/websocket, refuses a message over 32 KiB and
 * closes). Takes f's reference. */
static int frame_server(struct net_conn *c, struct hd_frame *f, uint32_t off, uint32_t len)
{
    struct hd_shard *s = net_conn_shard(c);
    for (uint32_t at = 0; at < len;) {
        uint32_t n = len - at < NET_WS_SERVER_CHUNK ? len - at : NET_WS_SERVER_CHUNK;
        bool last = at + n == len;
        struct hd_frame *h = hd_frame_get(s, NET_WS_HEADER_MAX);
        if (h == NULL) {
            hd_frame_unref(s, f);
            return -ENOBUFS;
        }
        h->len = (uint32_t)net_ws_header_write(h->data, NET_WS_OP_BINARY, true, n, NULL);
        int rc = net_conn_wire_queue(c, h, 0, h->len);
        if (rc < 0) {
            hd_frame_unref(s, f);
            return rc;
        }
        if (!last)
            hd_frame_ref(f); /* one reference per message; the last one moves ours */
        rc = net_conn_wire_queue(c, f, off + at, n);
        if (rc < 0) {
            if (!last)
                hd_frame_unref(s, f);
            return rc;
        }
        at += n;
    }
    return 0;
}

/* Client: masked copies with a fresh random key each (RFC 6455 section 5.3). Takes f's
 * reference. */
static int frame_client(struct net_conn *c, struct hd_frame *f, uint32_t off, uint32_t len)
{
    struct hd_shard *s = net_conn_shard(c);
    int rc = 0;
    for (uint32_t at = 0; at < len && rc == 0;) {
        uint32_t n = len - at < NET_WS_CLIENT_CHUNK ? len - at : NET_WS_CLIENT_CHUNK;
        struct hd_frame *g = hd_frame_get(s, NET_WS_HEADER_MAX + n);
        if (g == NULL) {
            rc = -ENOBUFS;
            break;
        }
        uint8_t key[4];
        RAND_bytes(key, sizeof(key));
        size_t h = net_ws_header_write(g->data, NET_WS_OP_BINARY, true, n, key);
        memcpy(g->data + h, f->data + off + at, n);
        net_ws_mask(g->data + h, n, key, 0);
        g->len = (uint32_t)(h + n);
        rc = net_conn_wire_queue(c, g, 0, g->len);
        at += n;
    }
    hd_frame_unref(s, f);
    return rc;
}

static int ws_encode(struct net_conn *c, void *state)
{
    struct net_ws *w = state;
    uint32_t off, len;
    struct hd_frame *f;
    for (unsigned moved = 0; moved < NET_WS_ENCODE_BATCH; moved++) {
        len = UINT32_MAX;
        if ((f = net_conn_plain_take(c, &off, &len)) == NULL) {
            if (len == 0)
                continue; /* a dropped entry's tombstone (net_conn_drop_oldest) */
            return 0;     /* the queue is empty */
        }
        if (len == 0 || w->closing) { /* an empty entry, or after our close */
            hd_frame_unref(net_conn_shard(c), f);
            continue;
        }
        int rc = w->server ? frame_server(c, f, off, len) : frame_client(c, f, off, len);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static void ws_release(struct net_conn *c, void *state)
{
    struct net_ws *w = state;
    hd_frame_unref(c ? net_conn_shard(c) : hd_shard_current(), w->self); /* c NULL: net.h */
}

static const struct net_codec ws_codec = {
    .name = "websocket",
    .decode = ws_decode,
    .encode = ws_encode,
    .release = ws_release,
};

/* ---------------------------------------------------------------- public */

int net_ws_start(struct net_conn *c, bool server)
{
    if (net_conn_upper_codec(c, NULL) != NULL)
        return -EBUSY;
    struct hd_frame *f = hd_frame_get(net_conn_shard(c), sizeof(struct net_ws));
    if (f == NULL)
        return -ENOMEM;
    struct net_ws *w = (struct net_ws *)(void *)f->data;
    _Static_assert(sizeof(struct hd_frame) % _Alignof(struct net_ws) == 0, "frame data aligned");
    memset(w, 0, sizeof(*w));
    w->self = f;
    w->server = server;
    net_ws_decoder_init(&w->dec, server);
    int rc = net_conn_switch_codec(c, &ws_codec, w);
    if (rc < 0)
        hd_frame_unref(net_conn_shard(c), f);
    return rc;
}

static struct net_ws *ws_of(const struct net_conn *c)
{
    void *state;
    if (net_conn_upper_codec(c, &state) == &ws_codec) /* over TLS */
        return state;
    return net_conn_codec(c, &state) == &ws_codec ? state : NULL;
}

/* The app's call, at the codec's own level (over TLS: above it). */
static void ws_close_call(struct net_conn *c, struct net_ws *w, uint16_t status, const char *text,
                          int reason)
{
    size_t text_len = text ? strlen(text) : 0;
    if (w->server || w->closing) {
        close_out(c, w, status, text, text_len, reason);
        return;
    }
    /* RFC 6455 section 7.1.1: a client waits for the server to answer (and close first). */
    int rc = close_frame(c, w, status, text, text_len);
    if (rc < 0) {
        net_conn_close(c, rc, false);
        return;
    }
    w->awaiting = true;
    w->close_reason = reason;
    uint32_t idle_ms, write_ms;
    net_conn_timeouts(c, &idle_ms, &write_ms);
    net_conn_set_timeouts(c, NET_WS_CLOSE_WAIT_MS, write_ms);
}

int net_ws_close(struct net_conn *c, uint16_t status, const char *text, int reason)
{
    struct net_ws *w = ws_of(c);
    if (w == NULL)
        return -EINVAL;
    unsigned at = net_conn_codec_enter(c, &ws_codec);
    ws_close_call(c, w, status, text, reason);
    net_conn_codec_leave(c, at);
    return 0;
}

bool net_ws_active(const struct net_conn *c)
{
    return ws_of(c) != NULL;
}

const struct net_ws_stats *net_ws_stats(const struct net_conn *c)
{
    struct net_ws *w = ws_of(c);
    return w ? &w->stats : NULL;
}
