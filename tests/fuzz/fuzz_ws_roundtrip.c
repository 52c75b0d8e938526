/* fuzz_ws_roundtrip.c - libFuzzer target for the WebSocket encoder against its decoder (net/
 * ws_frame.c): the input describes frames (a flags byte: opcode choice, fin, length class; a
 * length; the payload taken from the rest), each written with net_ws_header_write, masked with
 * net_ws_mask when a client sends, and the whole stream decoded in pieces. Invariants: well-formed
 * binary messages come back byte for byte in order, controls come back whole, and the stream is
 * refused only where the encoder was asked for something RFC 6455 forbids (a control frame
 * longer than 125 bytes or fragmented, a continuation outside a message, a message that does
 * not continue). */
#include <errno.h>
#include <string.h>

#include "fuzz_util.h"
#include <hd/net_ws.h>

#define STREAM_MAX (256u * 1024u)

struct seen {
    uint8_t data[STREAM_MAX];
    size_t len;
    unsigned controls;
};

static int s_data(void *arg, const uint8_t *p, size_t len)
{
    struct seen *s = arg;
    CHECK(s->len + len <= STREAM_MAX);
    memcpy(s->data + s->len, p, len);
    s->len += len;
    return 0;
}

static int s_control(void *arg, uint8_t op, const uint8_t *p, size_t len)
{
    (void)p;
    struct seen *s = arg;
    CHECK(op == NET_WS_OP_CLOSE || op == NET_WS_OP_PING || op == NET_WS_OP_PONG);
    CHECK(len <= NET_WS_CONTROL_MAX);
    s->controls++;
    return 0;
}

static const struct net_ws_sink sink = {.data = s_data, .control = s_control};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const uint8_t ops[] = {NET_WS_OP_BINARY, NET_WS_OP_CONT,   NET_WS_OP_PING,
                                  NET_WS_OP_PONG,   NET_WS_OP_BINARY, NET_WS_OP_CONT};
    static uint8_t stream[STREAM_MAX + 4096], want[STREAM_MAX];
    static struct seen seen;
    struct fuzz_in in = {data, size};
    uint8_t mode = fuzz_u8(&in);
    bool client = mode & 1; /* the sender is a client: frames are masked */
    size_t slen = 0, wlen = 0;
    unsigned controls = 0;
    bool in_msg = false, legal = true;
    while (in.len > 0 && slen < STREAM_MAX) {
        uint8_t f = fuzz_u8(&in);
        uint8_t op = ops[f % sizeof(ops)];
        bool fin = f & 0x40;
        size_t len = f & 0x80 ? fuzz_u16(&in) : fuzz_u8(&in) % 130;
        if (len > in.len)
            len = in.len;
        if (slen + NET_WS_HEADER_MAX + len > STREAM_MAX)
            break;
        bool control = op >= 0x8;
        if (control && (len > NET_WS_CONTROL_MAX || !fin))
            legal = false;
        if ((op == NET_WS_OP_CONT) != in_msg && !control)
            legal = false;
        uint8_t key[4] = {(uint8_t)f, (uint8_t)len, 0xa5, 0x3c};
        slen += net_ws_header_write(stream + slen, op, fin, len, client ? key : NULL);
        memcpy(stream + slen, in.p, len);
        if (legal && !control) {
            memcpy(want + wlen, in.p, len);
            wlen += len;
            in_msg = !fin;
        }
        controls += legal && control;
        if (client)
            net_ws_mask(stream + slen, len, key, 0);
        slen += len;
        in.p += len;
        in.len -= len;
        if (!legal)
            break; /* the decoder must stop here; nothing after it matters */
    }
    struct net_ws_decoder d;
    net_ws_decoder_init(&d, client);
    seen.len = 0;
    seen.controls = 0;
    size_t k = (size_t)(mode >> 1) + 1, off = 0;
    int rc = 0;
    while (off < slen && rc == 0) {
        size_t n = slen - off < k ? slen - off : k;
        rc = net_ws_decode(&d, stream + off, n, &sink, &seen);
        off += n;
    }
    if (legal) {
        CHECK(rc == 0);
        CHECK(seen.len == wlen && memcmp(seen.data, want, wlen) == 0);
        CHECK(seen.controls == controls);
    } else {
        CHECK(rc == -EPROTO || rc == -EMSGSIZE);
        CHECK(seen.len <= wlen + 65535 && seen.controls <= controls);
    }
    return 0;
}
