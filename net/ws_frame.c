/* ws_frame.c - WebSocket frames (RFC 6455 section 5) without sockets: a streaming decoder that
 * unmasks in place and hands binary payload bytes and whole control frames to a sink, and the
 * header writer. Pure code on caller memory; any thread. */
#include <errno.h>
#include <string.h>

#include <hd/net_ws.h>

void net_ws_decoder_init(struct net_ws_decoder *d, bool from_client)
{
    memset(d, 0, sizeof(*d));
    d->from_client = from_client;
}

static int fail(struct net_ws_decoder *d, int rc, uint16_t code, const char *why)
{
    d->error_code = code;
    d->error = why;
    return rc;
}

/* Header bytes needed once the first two are known. */
static size_t header_need(const uint8_t *h)
{
    size_t n = 2;
    uint8_t len7 = h[1] & 0x7f;
    if (len7 == 126)
        n += 2;
    else if (len7 == 127)
        n += 8;
    return n + ((h[1] & 0x80) ? 4 : 0);
}

/* A whole header is in d->header: check it and start the frame. */
static int header_done(struct net_ws_decoder *d)
{
    const uint8_t *h = d->header;
    uint8_t op = h[0] & 0x0f;
    bool fin = (h[0] & 0x80) != 0;
    bool masked = (h[1] & 0x80) != 0;
    uint8_t len7 = h[1] & 0x7f;
    size_t at = 2;
    uint64_t len = len7;
    if (h[0] & 0x70)
        return fail(d, -EPROTO, NET_WS_CLOSE_PROTOCOL, "reserved bits set (no extension)");
    if (len7 == 126) {
        len = (uint64_t)h[2] << 8 | h[3];
        at = 4;
    } else if (len7 == 127) {
        len = 0;
        for (int i = 0; i < 8; i++)
            len = len << 8 | h[2 + i];
        at = 10;
        if (len >> 63)
            return fail(d, -EPROTO, NET_WS_CLOSE_PROTOCOL, "payload length has its top bit set");
    }
    if (masked != d->from_client)
        return fail(d, -EPROTO, NET_WS_CLOSE_PROTOCOL,
                    d->from_client ? "client frame not masked" : "server frame masked");
    if (masked)
        memcpy(d->mask, h + at, 4);
    switch (op) {
    case NET_WS_OP_CLOSE:
    case NET_WS_OP_PING:
    case NET_WS_OP_PONG:
        if (!fin)
            return fail(d, -EPROTO, NET_WS_CLOSE_PROTOCOL, "fragmented control frame");
        if (len > NET_WS_CONTROL_MAX)
            return fail(d, -EPROTO, NET_WS_CLOSE_PROTOCOL, "control frame over 125 bytes");
        break;
    case NET_WS_OP_TEXT:
        return fail(d, -EPROTO, NET_WS_CLOSE_UNSUPPORTED, "text message (binary expected)");
    case NET_WS_OP_BINARY:
        if (d->in_message)
            return fail(d, -EPROTO, NET_WS_CLOSE_PROTOCOL, "new message inside a fragmented one");
        d->in_message = true;
        d->message_bytes = 0;
        break;
    case NET_WS_OP_CONT:
        if (!d->in_message)
            return fail(d, -EPROTO, NET_WS_CLOSE_PROTOCOL, "continuation without a message");
        break;
    default:
        return fail(d, -EPROTO, NET_WS_CLOSE_PROTOCOL, "reserved opcode");
    }
    if (op == NET_WS_OP_BINARY || op == NET_WS_OP_CONT) {
        if (len > NET_WS_MESSAGE_MAX - d->message_bytes)
            return fail(d, -EMSGSIZE, NET_WS_CLOSE_TOO_BIG, "message too big");
        d->message_bytes += len;
    }
    d->opcode = op;
    d->fin = fin;
    d->masked = masked;
    d->left = len;
    d->mask_pos = 0;
    d->control_len = 0;
    d->in_frame = true;
    return 0;
}

/* The current frame's payload is complete. */
static int frame_done(struct net_ws_decoder *d, const struct net_ws_sink *sink, void *arg)
{
    d->in_frame = false;
    d->header_len = 0;
    if (d->opcode >= NET_WS_OP_CLOSE)
        return sink->control(arg, d->opcode, d->control, d->control_len);
    if (d->fin)
        d->in_message = false;
    return 0;
}

/* Payload bytes of the current frame: at most d->left of in[0..len). Returns bytes used. */
static size_t payload_take(struct net_ws_decoder *d, uint8_t *in, size_t len, int *rc,
                           const struct net_ws_sink *sink, void *arg)
{
    size_t n = d->left < len ? (size_t)d->left : len;
    if (d->masked)
        net_ws_mask(in, n, d->mask, d->mask_pos);
    d->mask_pos = (uint8_t)((d->mask_pos + n) & 3);
    d->left -= n;
    if (d->opcode >= NET_WS_OP_CLOSE) {
        memcpy(d->control + d->control_len, in, n); /* len <= 125 was checked */
        d->control_len = (uint8_t)(d->control_len + n);
    } else if (n > 0) {
        *rc = sink->data(arg, in, n);
    }
    return n;
}

int net_ws_decode(struct net_ws_decoder *d, uint8_t *in, size_t len, const struct net_ws_sink *sink,
                  void *arg)
{
    size_t at = 0;
    while (at < len || (d->in_frame && d->left == 0)) {
        int rc = 0;
        if (!d->in_frame) {
            size_t need = d->header_len < 2 ? 2 : header_need(d->header);
            size_t take = need - d->header_len;
            if (take > len - at)
                take = len - at;
            memcpy(d->header + d->header_len, in + at, take);
            d->header_len = (uint8_t)(d->header_len + take);
            at += take;
            if (d->header_len < 2 || d->header_len < header_need(d->header))
                continue; /* more header bytes (at == len: wait for the next read) */
            rc = header_done(d);
        } else if (d->left > 0) {
            at += payload_take(d, in + at, len - at, &rc, sink, arg);
        }
        if (rc == 0 && d->in_frame && d->left == 0)
            rc = frame_done(d, sink, arg);
        if (rc < 0)
            return rc;
    }
    return 0;
}

size_t net_ws_header_size(uint64_t len, bool masked)
{
    size_t n = len < 126 ? 2 : len <= 0xffff ? 4 : 10;
    return n + (masked ? 4 : 0);
}

size_t net_ws_header_write(uint8_t *out, uint8_t opcode, bool fin, uint64_t len,
                           const uint8_t mask[4])
{
    size_t n = 2;
    uint8_t m = mask ? 0x80 : 0;
    out[0] = (uint8_t)((fin ? 0x80 : 0) | (opcode & 0x0f));
    if (len < 126) {
        out[1] = (uint8_t)(m | len);
    } else if (len <= 0xffff) {
        out[1] = m | 126;
        out[2] = (uint8_t)(len >> 8);
        out[3] = (uint8_t)len;
        n = 4;
    } else {
        out[1] = m | 127;
        for (int i = 0; i < 8; i++)
            out[2 + i] = (uint8_t)(len >> (56 - 8 * i));
        n = 10;
    }
    if (mask) {
        memcpy(out + n, mask, 4);
        n += 4;
    }
    return n;
}

void net_ws_mask(uint8_t *data, size_t len, const uint8_t key[4], size_t pos)
{
    for (size_t i = 0; i < len; i++)
        data[i] ^= key[(pos + i) & 3];
}
