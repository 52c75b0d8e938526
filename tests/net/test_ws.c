/* test_ws.c - the WebSocket frame decoder and header writer (net/ws_frame.c) without sockets:
 * header sizes and round trips, masking, a fragmented message with a ping inside split at every
 * byte boundary and fed a byte at a time, control frames, and every refusal (text, masking,
 * reserved bits and opcodes, bad fragmentation, long control frames, oversized messages). The
 * codec on real connections is covered by tests/conformance/test_conformance_ws.c. */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include <hd/net_ws.h>

/* What a sink saw: payload bytes concatenated, control frames as "opcode:len" records. */
struct seen {
    uint8_t data[3 * NET_WS_MESSAGE_MAX];
    size_t data_len;
    unsigned data_calls;
    uint8_t ctl_op[16];
    uint8_t ctl[16][NET_WS_CONTROL_MAX];
    size_t ctl_len[16];
    unsigned ctl_count;
};

static int seen_data(void *arg, const uint8_t *data, size_t len)
{
    struct seen *s = arg;
    cr_assert_gt(len, 0, "no empty data calls");
    cr_assert_leq(s->data_len + len, sizeof(s->data));
    memcpy(s->data + s->data_len, data, len);
    s->data_len += len;
    s->data_calls++;
    return 0;
}

static int seen_control(void *arg, uint8_t opcode, const uint8_t *payload, size_t len)
{
    struct seen *s = arg;
    cr_assert_lt(s->ctl_count, 16);
    s->ctl_op[s->ctl_count] = opcode;
    memcpy(s->ctl[s->ctl_count], payload, len);
    s->ctl_len[s->ctl_count] = len;
    s->ctl_count++;
    return 0;
}

static const struct net_ws_sink sink = {.data = seen_data, .control = seen_control};
static struct seen seen;

/* Append one frame (masked with key when key != NULL) to buf at *at. */
static void put_frame(uint8_t *buf, size_t *at, uint8_t op, bool fin, const void *payload,
                      size_t len, const uint8_t *key)
{
    size_t h = net_ws_header_write(buf + *at, op, fin, len, key);
    cr_assert_eq(h, net_ws_header_size(len, key != NULL));
    if (len > 0)
        memcpy(buf + *at + h, payload, len);
    if (key)
        net_ws_mask(buf + *at + h, len, key, 0);
    *at += h + len;
}

static const uint8_t key1[4] = {0x37, 0xfa, 0x21, 0x3d}, key2[4] = {0x01, 0x80, 0xff, 0x5a};

Test(ws, header_sizes_and_bytes)
{
    uint8_t h[NET_WS_HEADER_MAX];
    cr_assert_eq(net_ws_header_write(h, NET_WS_OP_BINARY, true, 0, NULL), 2);
    cr_assert(h[0] == 0x82 && h[1] == 0x00);
    cr_assert_eq(net_ws_header_write(h, NET_WS_OP_BINARY, true, 125, NULL), 2);
    cr_assert_eq(h[1], 125);
    cr_assert_eq(net_ws_header_write(h, NET_WS_OP_CONT, false, 126, NULL), 4);
    cr_assert(h[0] == 0x00 && h[1] == 126 && h[2] == 0 && h[3] == 126);
    cr_assert_eq(net_ws_header_write(h, NET_WS_OP_BINARY, true, 65535, key1), 8);
    cr_assert(h[1] == (0x80 | 126) && h[2] == 0xff && h[3] == 0xff);
    cr_assert_eq(memcmp(h + 4, key1, 4), 0);
    cr_assert_eq(net_ws_header_write(h, NET_WS_OP_BINARY, true, 65536, key1), 14);
    static const uint8_t len64[8] = {0, 0, 0, 0, 0, 1, 0, 0};
    cr_assert(h[1] == (0x80 | 127));
    cr_assert_eq(memcmp(h + 2, len64, 8), 0);
    cr_assert_eq(net_ws_header_size(65536, false), 10);
}

Test(ws, mask_is_an_involution_from_any_offset)
{
    uint8_t a[37], b[37];
    for (size_t i = 0; i < sizeof(a); i++)
        a[i] = b[i] = (uint8_t)(i * 7);
    net_ws_mask(b, sizeof(b), key1, 0);
    cr_assert_eq(b[0], a[0] ^ key1[0]);
    cr_assert_eq(b[5], a[5] ^ key1[1]);
    /* Unmasking in two pieces (the second starting at key position 13 % 4) restores it. */
    net_ws_mask(b, 13, key1, 0);
    net_ws_mask(b + 13, sizeof(b) - 13, key1, 13);
    cr_assert_eq(memcmp(a, b, sizeof(a)), 0);
}

/* A client stream: a binary message in three fragments with a ping between them, an empty
 * frame, a pong, a second one-frame message, a close. */
static size_t client_stream(uint8_t *buf, uint8_t *want, size_t *want_len)
{
    size_t at = 0;
    uint8_t p[300];
    for (size_t i = 0; i < sizeof(p); i++)
        p[i] = (uint8_t)(i ^ 0x5c);
    put_frame(buf, &at, NET_WS_OP_BINARY, false, p, 10, key1);
    put_frame(buf, &at, NET_WS_OP_PING, true, "ping!", 5, key2);
    put_frame(buf, &at, NET_WS_OP_CONT, false, p + 10, 200, key2);
    put_frame(buf, &at, NET_WS_OP_CONT, false, NULL, 0, key1);
    put_frame(buf, &at, NET_WS_OP_CONT, true, p + 210, 90, key1);
    put_frame(buf, &at, NET_WS_OP_PONG, true, NULL, 0, key1);
    put_frame(buf, &at, NET_WS_OP_BINARY, true, p, 126, key2);
    put_frame(buf, &at, NET_WS_OP_CLOSE, true, "\x03\xe8", 2, key1);
    memcpy(want, p, 300);
    memcpy(want + 300, p, 126);
    *want_len = 426;
    return at;
}

static void check_stream_seen(const uint8_t *want, size_t want_len)
{
    cr_assert_eq(seen.data_len, want_len);
    cr_assert_eq(memcmp(seen.data, want, want_len), 0);
    cr_assert_eq(seen.ctl_count, 3);
    cr_assert_eq(seen.ctl_op[0], NET_WS_OP_PING);
    cr_assert(seen.ctl_len[0] == 5 && memcmp(seen.ctl[0], "ping!", 5) == 0);
    cr_assert(seen.ctl_op[1] == NET_WS_OP_PONG && seen.ctl_len[1] == 0);
    cr_assert(seen.ctl_op[2] == NET_WS_OP_CLOSE && seen.ctl_len[2] == 2);
    cr_assert(seen.ctl[2][0] == 0x03 && seen.ctl[2][1] == 0xe8);
}

Test(ws, stream_split_at_every_byte_boundary)
{
    static uint8_t buf[1024], copy[1024], want[512];
    size_t want_len;
    size_t len = client_stream(buf, want, &want_len);
    for (size_t cut = 0; cut <= len; cut++) {
        memset(&seen, 0, sizeof(seen));
        memcpy(copy, buf, len); /* decoding unmasks in place */
        struct net_ws_decoder d;
        net_ws_decoder_init(&d, true);
        cr_assert_eq(net_ws_decode(&d, copy, cut, &sink, &seen), 0, "cut %zu", cut);
        cr_assert_eq(net_ws_decode(&d, copy + cut, len - cut, &sink, &seen), 0, "cut %zu", cut);
        check_stream_seen(want, want_len);
    }
}

Test(ws, stream_one_byte_at_a_time)
{
    static uint8_t buf[1024], want[512];
    size_t want_len;
    size_t len = client_stream(buf, want, &want_len);
    memset(&seen, 0, sizeof(seen));
    struct net_ws_decoder d;
    net_ws_decoder_init(&d, true);
    for (size_t i = 0; i < len; i++)
        cr_assert_eq(net_ws_decode(&d, buf + i, 1, &sink, &seen), 0, "byte %zu", i);
    check_stream_seen(want, want_len);
}

Test(ws, server_frames_unmasked_and_large)
{
    static uint8_t buf[NET_WS_MESSAGE_MAX + 64];
    static uint8_t p[NET_WS_MESSAGE_MAX];
    for (size_t i = 0; i < sizeof(p); i++)
        p[i] = (uint8_t)(i * 31 + 7);
    size_t at = 0;
    put_frame(buf, &at, NET_WS_OP_BINARY, true, p, 65536 + 64, NULL); /* spec §1.5 */
    memset(&seen, 0, sizeof(seen));
    struct net_ws_decoder d;
    net_ws_decoder_init(&d, false);
    cr_assert_eq(net_ws_decode(&d, buf, at, &sink, &seen), 0);
    cr_assert_eq(seen.data_len, 65536 + 64);
    cr_assert_eq(memcmp(seen.data, p, seen.data_len), 0);
    /* The limit itself, in fragments. */
    at = 0;
    put_frame(buf, &at, NET_WS_OP_BINARY, false, p, 1000, NULL);
    put_frame(buf, &at, NET_WS_OP_CONT, true, p + 1000, NET_WS_MESSAGE_MAX - 1000, NULL);
    cr_assert_eq(net_ws_decode(&d, buf, at, &sink, &seen), 0);
    cr_assert_eq(seen.data_len, 65536 + 64 + NET_WS_MESSAGE_MAX);
}

/* Feed one stream and expect rc with close status code. */
static void expect_refused(bool from_client, const uint8_t *buf, size_t len, int rc, uint16_t code)
{
    static uint8_t copy[2 * NET_WS_MESSAGE_MAX];
    memcpy(copy, buf, len);
    memset(&seen, 0, sizeof(seen));
    struct net_ws_decoder d;
    net_ws_decoder_init(&d, from_client);
    cr_assert_eq(net_ws_decode(&d, copy, len, &sink, &seen), rc);
    cr_assert_eq(d.error_code, code);
    cr_assert_not_null(d.error);
}

Test(ws, refusals)
{
    static uint8_t b[2 * NET_WS_MESSAGE_MAX];
    static uint8_t p[NET_WS_MESSAGE_MAX + 1];
    size_t at;
#define FRAMES(...)                                                                                \
    do {                                                                                           \
        at = 0;                                                                                    \
        __VA_ARGS__;                                                                               \
    } while (0)
    FRAMES(put_frame(b, &at, NET_WS_OP_TEXT, true, "hi", 2, key1));
    expect_refused(true, b, at, -EPROTO, NET_WS_CLOSE_UNSUPPORTED);
    cr_assert_eq(seen.data_len, 0, "a text payload never reaches the app");
    FRAMES(put_frame(b, &at, NET_WS_OP_BINARY, true, "hi", 2, NULL));
    expect_refused(true, b, at, -EPROTO, NET_WS_CLOSE_PROTOCOL); /* client must mask */
    FRAMES(put_frame(b, &at, NET_WS_OP_BINARY, true, "hi", 2, key1));
    expect_refused(false, b, at, -EPROTO, NET_WS_CLOSE_PROTOCOL); /* server must not */
    FRAMES(put_frame(b, &at, NET_WS_OP_BINARY, true, "hi", 2, key1); b[0] |= 0x40);
    expect_refused(true, b, at, -EPROTO, NET_WS_CLOSE_PROTOCOL); /* RSV1: no compression */
    FRAMES(put_frame(b, &at, 0x3, true, "hi", 2, key1));
    expect_refused(true, b, at, -EPROTO, NET_WS_CLOSE_PROTOCOL); /* reserved opcode */
    FRAMES(put_frame(b, &at, NET_WS_OP_PING, false, "hi", 2, key1));
    expect_refused(true, b, at, -EPROTO, NET_WS_CLOSE_PROTOCOL); /* fragmented control */
    FRAMES(put_frame(b, &at, NET_WS_OP_PING, true, p, 126, key1));
    expect_refused(true, b, at, -EPROTO, NET_WS_CLOSE_PROTOCOL); /* control over 125 */
    FRAMES(put_frame(b, &at, NET_WS_OP_CONT, true, "hi", 2, key1));
    expect_refused(true, b, at, -EPROTO, NET_WS_CLOSE_PROTOCOL); /* nothing to continue */
    FRAMES(put_frame(b, &at, NET_WS_OP_BINARY, false, "hi", 2, key1);
           put_frame(b, &at, NET_WS_OP_BINARY, true, "hi", 2, key1));
    expect_refused(true, b, at, -EPROTO, NET_WS_CLOSE_PROTOCOL); /* message inside message */
    FRAMES(put_frame(b, &at, NET_WS_OP_BINARY, false, "hi", 2, key1);
           put_frame(b, &at, NET_WS_OP_TEXT, true, "hi", 2, key1));
    expect_refused(true, b, at, -EPROTO, NET_WS_CLOSE_UNSUPPORTED);
    /* One byte over the limit: one frame (refused from its header, before any payload) ... */
    FRAMES(put_frame(b, &at, NET_WS_OP_BINARY, true, p, NET_WS_MESSAGE_MAX + 1, key1));
    expect_refused(true, b, at, -EMSGSIZE, NET_WS_CLOSE_TOO_BIG);
    cr_assert_eq(seen.data_len, 0);
    /* ... or fragments whose sum is over it. */
    FRAMES(put_frame(b, &at, NET_WS_OP_BINARY, false, p, NET_WS_MESSAGE_MAX, key1);
           put_frame(b, &at, NET_WS_OP_CONT, true, p, 1, key1));
    expect_refused(true, b, at, -EMSGSIZE, NET_WS_CLOSE_TOO_BIG);
    /* A 64-bit length with the top bit set. */
    static const uint8_t huge[] = {0x82, 0xff, 0x80, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4};
    expect_refused(true, huge, sizeof(huge), -EPROTO, NET_WS_CLOSE_PROTOCOL);
#undef FRAMES
}

/* A sink error stops decoding and is returned as it is (no close status: the app's choice). */
static int data_fails(void *arg, const uint8_t *data, size_t len)
{
    (void)arg, (void)data, (void)len;
    return -ECONNABORTED;
}

Test(ws, sink_error_stops)
{
    uint8_t b[64];
    size_t at = 0;
    put_frame(b, &at, NET_WS_OP_BINARY, true, "abc", 3, key1);
    struct net_ws_sink s = {.data = data_fails, .control = seen_control};
    struct net_ws_decoder d;
    net_ws_decoder_init(&d, true);
    cr_assert_eq(net_ws_decode(&d, b, at, &s, NULL), -ECONNABORTED);
    cr_assert_eq(d.error_code, 0);
}
