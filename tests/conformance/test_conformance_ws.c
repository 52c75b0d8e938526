/* test_conformance_ws.c - spec §1.5 (§14 rows 30 and 31) against a real hderp-server (2
 * shards): a blocking raw WebSocket client on the test thread (RFC 6455 framing written here,
 * masked with random keys) logs in and exchanges packets with a plain raw DERP client in both
 * directions, with DERP frames split over several messages and fragments and several frames in
 * one message; a 64 KiB + 64 message is accepted; a larger message and a text message are
 * answered with a close frame and the connection closes; pings are answered; a close is echoed;
 * the handshake's headers; `Upgrade: websocket` without the derp subprotocol stays raw DERP; and
 * 100 DERP clients (hd_derp_client), half of them over WebSocket, exchange 100,000 packets. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <errno.h>
#include <poll.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "conf_support.h"
#include "derp_frame.h"
#include "derp_handshake.h"
#include <hd/net_http.h>
#include <hd/tls.h>

static struct conf_server srv;

static void up(void)
{
    cr_assert_eq(conf_server_start(&srv, NULL), 0);
}

static void down(void)
{
    conf_server_down(&srv);
}

TestSuite(test_conformance_ws, .init = up, .fini = down, .timeout = 240);

/* ---------------------------------------------------------------- a raw WebSocket client */

#define WS_IN_MAX     (512u << 10) /* raw bytes read ahead */
#define WS_STREAM_MAX (512u << 10) /* DERP stream bytes from binary messages */

struct ws {
    struct conf_raw r; /* socket, key pair, server key */
    char head[2048];   /* the 101 head */
    uint8_t *in, *stream;
    size_t in_len, stream_len, stream_off;
    size_t msg_max; /* the largest binary message (or fragment) the server sent */
};

/* More raw bytes within the deadline: 0, -ETIMEDOUT, -ESHUTDOWN (EOF), -ECONNRESET. */
static int ws_fill(struct ws *w, int64_t deadline)
{
    int64_t left = deadline - conf_now_ms();
    if (left <= 0)
        return -ETIMEDOUT;
    struct pollfd p = {.fd = w->r.fd, .events = POLLIN};
    int n = poll(&p, 1, (int)left);
    if (n == 0)
        return -ETIMEDOUT;
    cr_assert_lt(w->in_len, WS_IN_MAX, "read-ahead full");
    ssize_t got = recv(w->r.fd, w->in + w->in_len, WS_IN_MAX - w->in_len, 0);
    if (got == 0)
        return -ESHUTDOWN;
    if (got < 0)
        return errno == ECONNRESET ? -ECONNRESET : -errno;
    w->in_len += (size_t)got;
    return 0;
}

static int ws_open(struct ws *w, const char *protocol_line)
{
    memset(w, 0, sizeof(*w));
    w->in = malloc(WS_IN_MAX);
    w->stream = malloc(WS_STREAM_MAX);
    cr_assert(w->in && w->stream);
    int rc = conf_raw_open(&w->r, &srv, NULL);
    if (rc < 0)
        return rc;
    uint8_t nonce[16];
    char key[32], req[1024];
    randombytes_buf(nonce, sizeof(nonce));
    sodium_bin2base64(key, sizeof(key), nonce, sizeof(nonce), sodium_base64_VARIANT_ORIGINAL);
    int n = snprintf(req, sizeof(req),
                     "GET /derp HTTP/1.1\r\nHost: localhost\r\nConnection: Upgrade\r\n"
                     "Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
                     "Sec-WebSocket-Key: %s\r\n%s\r\n",
                     key, protocol_line ? protocol_line : "Sec-WebSocket-Protocol: derp\r\n");
    rc = conf_raw_write(&w->r, req, (size_t)n);
    if (rc < 0)
        return rc;
    int64_t deadline = conf_now_ms() + CONF_IO_TIMEOUT_MS;
    uint8_t *end;
    while ((end = memmem(w->in, w->in_len, "\r\n\r\n", 4)) == NULL)
        if ((rc = ws_fill(w, deadline)) < 0)
            return rc;
    size_t head_len = (size_t)(end + 4 - w->in);
    cr_assert_lt(head_len, sizeof(w->head));
    memcpy(w->head, w->in, head_len);
    memmove(w->in, w->in + head_len, w->in_len - head_len);
    w->in_len -= head_len;
    /* The accept value must be the key's. */
    char want[NET_HTTP_WS_ACCEPT_LEN + 1], line[80];
    cr_assert_eq(net_http_ws_accept(net_http_cstr(key), want), 0);
    snprintf(line, sizeof(line), "\r\nSec-WebSocket-Accept: %s\r\n", want);
    if (strncmp(w->head, "HTTP/1.1 101 ", 13) == 0)
        cr_assert_not_null(strstr(w->head, line), "%s", w->head);
    return 0;
}

static void ws_close(struct ws *w)
{
    conf_raw_close(&w->r);
    free(w->in);
    free(w->stream);
}

/* One masked frame. */
static void ws_send(struct ws *w, uint8_t op, bool fin, const void *data, size_t len)
{
    uint8_t *b = malloc(len + 14);
    cr_assert_not_null(b);
    uint8_t key[4];
    randombytes_buf(key, sizeof(key));
    size_t h = 2;
    b[0] = (uint8_t)((fin ? 0x80 : 0) | op);
    if (len < 126) {
        b[1] = (uint8_t)(0x80 | len);
    } else if (len <= 0xffff) {
        b[1] = 0x80 | 126;
        b[2] = (uint8_t)(len >> 8);
        b[3] = (uint8_t)len;
        h = 4;
    } else {
        b[1] = 0x80 | 127;
        for (int i = 0; i < 8; i++)
            b[2 + i] = (uint8_t)((uint64_t)len >> (56 - 8 * i));
        h = 10;
    }
    memcpy(b + h, key, 4);
    h += 4;
    for (size_t i = 0; i < len; i++)
        b[h + i] = ((const uint8_t *)data)[i] ^ key[i & 3];
    cr_assert_eq(conf_raw_write(&w->r, b, h + len), 0);
    free(b);
}

/* The next server frame: 0 with op/payload (valid until the next read), or a read error. */
static int ws_frame(struct ws *w, int64_t deadline, uint8_t *op, bool *fin, uint8_t **p,
                    size_t *len)
{
    for (;;) {
        if (w->in_len >= 2) {
            cr_assert_eq(w->in[1] & 0x80, 0, "a server frame is never masked");
            cr_assert_eq(w->in[0] & 0x70, 0, "no extension: RSV bits clear");
            size_t h = 2;
            uint64_t n = w->in[1] & 0x7f;
            if (n == 126)
                h = 4;
            else if (n == 127)
                h = 10;
            if (w->in_len >= h) {
                if (h == 4)
                    n = (uint64_t)w->in[2] << 8 | w->in[3];
                for (size_t i = 2; h == 10 && i < 10; i++)
                    n = (i == 2 ? 0 : n << 8) | w->in[i];
                cr_assert_leq(n, WS_IN_MAX / 2);
                if (w->in_len >= h + n) {
                    *op = w->in[0] & 0x0f;
                    *fin = (w->in[0] & 0x80) != 0;
                    /* Move the payload to the front: the caller reads it, we drop it later. */
                    static uint8_t payload[WS_IN_MAX];
                    memcpy(payload, w->in + h, n);
                    memmove(w->in, w->in + h + n, w->in_len - h - n);
                    w->in_len -= h + n;
                    *p = payload;
                    *len = (size_t)n;
                    return 0;
                }
            }
        }
        int rc = ws_fill(w, deadline);
        if (rc < 0)
            return rc;
    }
}

/* The next DERP frame from the binary messages (KeepAlives skipped when skip_ka). A close frame
 * ends it with -ESHUTDOWN, a text one fails the test. */
static int ws_derp(struct ws *w, int timeout_ms, bool skip_ka, struct conf_frame *f)
{
    int64_t deadline = conf_now_ms() + timeout_ms;
    for (;;) {
        size_t have = w->stream_len - w->stream_off;
        const uint8_t *s = w->stream + w->stream_off;
        if (have >= DERP_FRAME_HEADER_LEN) {
            uint32_t n = (uint32_t)s[1] << 24 | (uint32_t)s[2] << 16 | (uint32_t)s[3] << 8 | s[4];
            if (have >= DERP_FRAME_HEADER_LEN + n) {
                w->stream_off += DERP_FRAME_HEADER_LEN + n;
                if (skip_ka && s[0] == DERP_FRAME_KEEP_ALIVE)
                    continue;
                f->type = s[0];
                f->len = n;
                f->p = s + DERP_FRAME_HEADER_LEN;
                return 0;
            }
        }
        if (w->stream_off > 0) { /* compact */
            memmove(w->stream, w->stream + w->stream_off, have);
            w->stream_len = have;
            w->stream_off = 0;
        }
        uint8_t op, *p;
        bool fin;
        size_t len;
        int rc = ws_frame(w, deadline, &op, &fin, &p, &len);
        if (rc < 0)
            return rc;
        cr_assert_neq(op, 0x1, "the server sends binary messages only");
        if (op == 0x8)
            return -ESHUTDOWN;
        if (op == 0x2 || op == 0x0) {
            w->msg_max = len > w->msg_max ? len : w->msg_max;
            cr_assert_leq(w->stream_len + len, WS_STREAM_MAX);
            memcpy(w->stream + w->stream_len, p, len);
            w->stream_len += len;
        }
    }
}

/* Upgrade with the derp subprotocol, ServerKey, ClientInfo (in one message), ServerInfo. */
static void ws_login(struct ws *w)
{
    CONF_OK(ws_open(w, NULL));
    cr_assert_eq(strncmp(w->head, "HTTP/1.1 101 ", 13), 0, "%s", w->head);
    struct conf_frame f;
    CONF_OK(ws_derp(w, CONF_IO_TIMEOUT_MS, false, &f));
    cr_assert_eq(f.type, DERP_FRAME_SERVER_KEY, "the first DERP frame is ServerKey");
    cr_assert_eq(memcmp(f.p, DERP_MAGIC, DERP_MAGIC_LEN), 0);
    memcpy(w->r.server_key.bytes, f.p + DERP_MAGIC_LEN, DERP_KEY_LEN);
    cr_assert_eq(memcmp(w->r.server_key.bytes, srv.key.bytes, DERP_KEY_LEN), 0);
    uint8_t ci[1024];
    ssize_t n = conf_raw_client_info(&w->r, NULL, ci, sizeof(ci));
    cr_assert_gt(n, 0);
    ws_send(w, 0x2, true, ci, (size_t)n);
    CONF_OK(ws_derp(w, CONF_IO_TIMEOUT_MS, false, &f));
    cr_assert_eq(f.type, DERP_FRAME_SERVER_INFO);
    struct derp_server_info info;
    uint8_t scratch[DERP_SERVER_INFO_JSON_MAX];
    CONF_OK(derp_server_info_open(f.p, f.len, &w->r.kp, &w->r.server_key, &info, scratch,
                                  sizeof(scratch)));
    cr_assert_eq(info.version, 2);
}

/* The server closes: a close frame with status, then EOF (or a reset). */
static void ws_expect_close(struct ws *w, uint16_t status)
{
    int64_t deadline = conf_now_ms() + CONF_IO_TIMEOUT_MS;
    uint8_t op, *p;
    bool fin;
    size_t len;
    for (;;) {
        CONF_OK(ws_frame(w, deadline, &op, &fin, &p, &len));
        if (op == 0x8)
            break;
    }
    cr_assert_geq(len, 2, "the close carries a status");
    cr_assert_eq(p[0] << 8 | p[1], status, "close status %u", p[0] << 8 | p[1]);
    int rc;
    while ((rc = ws_frame(w, deadline, &op, &fin, &p, &len)) == 0)
        ;
    cr_assert(rc == -ESHUTDOWN || rc == -ECONNRESET, "then the connection closes: %d", rc);
}

static size_t put_send_packet(uint8_t *b, const struct derp_pubkey *dst, const uint8_t *data,
                              size_t len)
{
    ssize_t n = derp_frame_send_packet_encode(b, DERP_FRAME_HEADER_LEN + DERP_KEY_LEN + len,
                                              dst->bytes, data, len);
    cr_assert_gt(n, 0);
    return (size_t)n;
}

static size_t put_ping(uint8_t *b, uint8_t tag)
{
    uint8_t d[DERP_PING_LEN] = {tag, 1, 2, 3, 4, 5, 6, 7};
    return (size_t)derp_frame_ping_encode(b, DERP_FRAME_HEADER_LEN + DERP_PING_LEN, d);
}

static void expect_pong(struct ws *w, uint8_t tag)
{
    struct conf_frame f;
    CONF_OK(ws_derp(w, CONF_IO_TIMEOUT_MS, true, &f));
    cr_assert_eq(f.type, DERP_FRAME_PONG);
    cr_assert_eq(f.p[0], tag);
}

static void expect_packet(struct conf_raw *r, const struct derp_pubkey *src, const uint8_t *data,
                          size_t len)
{
    struct derp_pubkey from;
    const uint8_t *got;
    size_t got_len;
    CONF_OK(conf_raw_read_packet(r, CONF_IO_TIMEOUT_MS, &from, &got, &got_len));
    cr_assert_eq(memcmp(from.bytes, src->bytes, DERP_KEY_LEN), 0, "the source is the sender");
    cr_assert_eq(got_len, len);
    cr_assert_eq(memcmp(got, data, len), 0);
}

/* ---------------------------------------------------------------- tests */

/* Row 30: the 101 of a WebSocket upgrade, and the derp_websocket_accepts counter. */
Test(test_conformance_ws, handshake_headers)
{
    struct ws w;
    ws_login(&w);
    cr_assert_eq(strncmp(w.head, "HTTP/1.1 101 Switching Protocols\r\n", 34), 0, "%s", w.head);
    cr_assert_not_null(strcasestr(w.head, "\r\nUpgrade: websocket\r\n"), "%s", w.head);
    cr_assert_not_null(strcasestr(w.head, "\r\nConnection: Upgrade\r\n"), "%s", w.head);
    cr_assert_not_null(strstr(w.head, "\r\nSec-WebSocket-Protocol: derp\r\n"), "%s", w.head);
    cr_assert_null(strcasestr(w.head, "Derp-"), "no Derp headers on this path: %s", w.head);
    cr_assert_null(strcasestr(w.head, "Sec-WebSocket-Extensions"), "no compression");
    int64_t v = -1;
    CONF_OK(conf_varz(&srv, "derp_websocket_accepts", false, &v));
    cr_assert_eq(v, 1);
    ws_close(&w);
    conf_server_stop_clean(&srv);
}

/* Row 30: packets both ways between a WebSocket client and a plain one; DERP frames split over
 * messages and fragments, many frames in one message, a WebSocket ping among fragments. */
Test(test_conformance_ws, exchange_with_plain_client)
{
    struct ws w;
    ws_login(&w);
    struct conf_raw b;
    CONF_OK(conf_raw_login(&b, &srv, NULL, NULL));
    static uint8_t buf[4096], data[1000];
    for (size_t i = 0; i < sizeof(data); i++)
        data[i] = (uint8_t)(i * 13 + 1);

    /* Plain -> WebSocket. */
    CONF_OK(conf_raw_send_packet(&b, &w.r.kp.pub, data, 300));
    struct conf_frame f;
    CONF_OK(ws_derp(&w, CONF_IO_TIMEOUT_MS, true, &f));
    cr_assert_eq(f.type, DERP_FRAME_RECV_PACKET);
    cr_assert_eq(f.len, DERP_KEY_LEN + 300);
    cr_assert_eq(memcmp(f.p, b.kp.pub.bytes, DERP_KEY_LEN), 0);
    cr_assert_eq(memcmp(f.p + DERP_KEY_LEN, data, 300), 0);

    /* WebSocket -> plain: one SendPacket over three messages (the header split too). */
    size_t n = put_send_packet(buf, &b.kp.pub, data, 700);
    ws_send(&w, 0x2, true, buf, 3);
    ws_send(&w, 0x2, true, buf + 3, 100);
    ws_send(&w, 0x2, true, buf + 103, n - 103);
    expect_packet(&b, &w.r.kp.pub, data, 700);

    /* One message in four fragments, a ping and an empty fragment between them. */
    n = put_send_packet(buf, &b.kp.pub, data + 1, 500);
    ws_send(&w, 0x2, false, buf, 10);
    ws_send(&w, 0x9, true, "are you there", 13);
    ws_send(&w, 0x0, false, buf + 10, 0);
    ws_send(&w, 0x0, false, buf + 10, 200);
    ws_send(&w, 0x0, true, buf + 210, n - 210);
    uint8_t op, *p;
    bool fin;
    size_t len;
    CONF_OK(ws_frame(&w, conf_now_ms() + CONF_IO_TIMEOUT_MS, &op, &fin, &p, &len));
    cr_assert_eq(op, 0xa, "a ping is answered with a pong");
    cr_assert(fin && len == 13 && memcmp(p, "are you there", 13) == 0);
    expect_packet(&b, &w.r.kp.pub, data + 1, 500);

    /* Three packets and a Ping in one message. */
    n = put_send_packet(buf, &b.kp.pub, data, 10);
    n += put_send_packet(buf + n, &b.kp.pub, data + 10, 20);
    n += put_ping(buf + n, 0x42);
    n += put_send_packet(buf + n, &b.kp.pub, data + 30, 30);
    ws_send(&w, 0x2, true, buf, n);
    expect_packet(&b, &w.r.kp.pub, data, 10);
    expect_packet(&b, &w.r.kp.pub, data + 10, 20);
    expect_packet(&b, &w.r.kp.pub, data + 30, 30);
    expect_pong(&w, 0x42);

    /* And back again after all that. */
    CONF_OK(conf_raw_send_packet(&b, &w.r.kp.pub, data + 5, 64));
    CONF_OK(ws_derp(&w, CONF_IO_TIMEOUT_MS, true, &f));
    cr_assert_eq(f.type, DERP_FRAME_RECV_PACKET);
    cr_assert_eq(memcmp(f.p + DERP_KEY_LEN, data + 5, 64), 0);
    conf_raw_close(&b);
    ws_close(&w);
    conf_server_stop_clean(&srv);
}

/* §1.5: a message of exactly 64 KiB + 64 bytes (one SendPacket of 65532 bytes, a Ping and three
 * NotePreferred: the server keeps one Pong pending at most, §6.5) is accepted; its packet
 * arrives whole and the Ping is answered. */
Test(test_conformance_ws, message_64k_plus_64_accepted)
{
    struct ws w;
    ws_login(&w);
    struct conf_raw b;
    CONF_OK(conf_raw_login(&b, &srv, NULL, NULL));
    size_t plen = 65536 + 64 - (DERP_FRAME_HEADER_LEN + DERP_KEY_LEN) -
                  (DERP_FRAME_HEADER_LEN + DERP_PING_LEN) - 3 * (DERP_FRAME_HEADER_LEN + 1);
    cr_assert_leq(plen, DERP_PACKET_LEN_MAX);
    uint8_t *data = malloc(plen), *buf = malloc(65536 + 64);
    cr_assert(data && buf);
    for (size_t i = 0; i < plen; i++)
        data[i] = (uint8_t)(i * 7 + i / 256);
    size_t n = put_send_packet(buf, &b.kp.pub, data, plen);
    n += put_ping(buf + n, 7);
    for (int i = 0; i < 3; i++)
        n += (size_t)derp_frame_note_preferred_encode(buf + n, DERP_FRAME_HEADER_LEN + 1, i & 1);
    cr_assert_eq(n, 65536 + 64);
    ws_send(&w, 0x2, true, buf, n);
    expect_packet(&b, &w.r.kp.pub, data, plen);
    expect_pong(&w, 7);
    free(data);
    free(buf);
    conf_raw_close(&b);
    ws_close(&w);
    conf_server_stop_clean(&srv);
}

/* §1.5: a 64 KiB packet to a WebSocket client arrives whole, in messages of at most 32 KiB:
 * Tailscale's WebSocket client (coder/websocket) closes on a bigger one. */
Test(test_conformance_ws, big_packet_in_small_messages)
{
    struct ws w;
    ws_login(&w);
    struct conf_raw b;
    CONF_OK(conf_raw_login(&b, &srv, NULL, NULL));
    size_t plen = DERP_PACKET_LEN_MAX;
    uint8_t *data = malloc(plen);
    cr_assert(data);
    for (size_t i = 0; i < plen; i++)
        data[i] = (uint8_t)(i * 5 + i / 512);
    w.msg_max = 0;
    CONF_OK(conf_raw_send_packet(&b, &w.r.kp.pub, data, plen));
    struct conf_frame f;
    CONF_OK(ws_derp(&w, CONF_IO_TIMEOUT_MS, true, &f));
    cr_assert_eq(f.type, DERP_FRAME_RECV_PACKET);
    cr_assert_eq(f.len, DERP_KEY_LEN + plen);
    cr_assert_eq(memcmp(f.p + DERP_KEY_LEN, data, plen), 0);
    cr_assert_leq(w.msg_max, 32768u, "a %zu-byte message: Tailscale's client reads <= 32 KiB",
                  w.msg_max);
    free(data);
    conf_raw_close(&b);
    ws_close(&w);
    conf_server_stop_clean(&srv);
}

/* A message far over any sane limit (128 KiB) is refused from its header: close 1009. */
Test(test_conformance_ws, oversized_message_closes)
{
    struct ws w;
    ws_login(&w);
    uint8_t hdr[14] = {0x82, 0x80 | 127, 0, 0, 0, 0, 0, 2, 0, 0, 1, 2, 3, 4}; /* 131072 */
    CONF_OK(conf_raw_write(&w.r, hdr, sizeof(hdr)));
    uint8_t junk[1024] = {0};
    CONF_OK(conf_raw_write(&w.r, junk, sizeof(junk)));
    ws_expect_close(&w, 1009);
    ws_close(&w);
    /* Fragments that add up to too much are refused the same way. */
    ws_login(&w);
    static uint8_t part[40000];
    ws_send(&w, 0x2, false, part, sizeof(part));
    ws_send(&w, 0x0, false, part, sizeof(part));
    ws_expect_close(&w, 1009);
    ws_close(&w);
    conf_server_stop_clean(&srv);
}

/* Row 30: a text message is a protocol error: close (1003) and the connection ends. */
Test(test_conformance_ws, text_message_closes)
{
    struct ws w;
    ws_login(&w);
    ws_send(&w, 0x1, true, "hello", 5);
    ws_expect_close(&w, 1003);
    ws_close(&w);
    conf_server_stop_clean(&srv);
}

/* An unmasked client frame is refused (RFC 6455 section 5.1): close 1002. */
Test(test_conformance_ws, unmasked_frame_closes)
{
    struct ws w;
    ws_login(&w);
    uint8_t frame[2 + 13] = {0x82, 13};
    put_ping(frame + 2, 9);
    CONF_OK(conf_raw_write(&w.r, frame, sizeof(frame)));
    ws_expect_close(&w, 1002);
    ws_close(&w);
    conf_server_stop_clean(&srv);
}

/* The client's close is echoed (same status) and the server closes the connection. */
Test(test_conformance_ws, client_close_echoed)
{
    struct ws w;
    ws_login(&w);
    ws_send(&w, 0x8, true, "\x03\xe8", 2);
    ws_expect_close(&w, 1000);
    ws_close(&w);
    /* A status that never goes on the wire (1005: "no status") is not echoed: 1002. */
    ws_login(&w);
    ws_send(&w, 0x8, true, "\x03\xed", 2);
    ws_expect_close(&w, 1002);
    ws_close(&w);
    conf_server_stop_clean(&srv);
}

/* Offering a protocol that merely contains "derp": the WebSocket is accepted without a
 * subprotocol, then closed with 1008 (derper: "client must speak the derp subprotocol"). */
Test(test_conformance_ws, wrong_subprotocol_1008)
{
    struct ws w;
    CONF_OK(ws_open(&w, "Sec-WebSocket-Protocol: derpy\r\n"));
    cr_assert_eq(strncmp(w.head, "HTTP/1.1 101 ", 13), 0, "%s", w.head);
    cr_assert_null(strcasestr(w.head, "Sec-WebSocket-Protocol"), "%s", w.head);
    ws_expect_close(&w, 1008);
    ws_close(&w);
    conf_server_stop_clean(&srv);
}

/* Row 31: `Upgrade: websocket` without the derp subprotocol is raw DERP (historic clients). */
Test(test_conformance_ws, websocket_upgrade_without_derp_is_raw_derp)
{
    struct conf_raw r;
    CONF_OK(conf_raw_open(&r, &srv, NULL));
    static const char req[] = "GET /derp HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\n"
                              "Upgrade: websocket\r\n\r\n";
    CONF_OK(conf_raw_write(&r, req, sizeof(req) - 1));
    /* conf_raw_upgrade writes its own request; read the head by hand through a frame read. */
    char head[1024];
    size_t got = 0;
    while (!memmem(head, got, "\r\n\r\n", 4)) {
        struct pollfd p = {.fd = r.fd, .events = POLLIN};
        cr_assert_eq(poll(&p, 1, CONF_IO_TIMEOUT_MS), 1);
        ssize_t n = recv(r.fd, head + got, 1, 0); /* one byte at a time: nothing read past */
        cr_assert_eq(n, 1);
        got++;
        cr_assert_lt(got, sizeof(head));
    }
    head[got] = 0;
    cr_assert_eq(strncmp(head, "HTTP/1.1 101 ", 13), 0, "%s", head);
    cr_assert_not_null(strcasestr(head, "\r\nUpgrade: DERP\r\n"), "%s", head);
    CONF_OK(conf_raw_read_server_key(&r));
    conf_raw_close(&r);
    conf_server_stop_clean(&srv);
}

/* The DERP client library's WebSocket mode (client role of the codec): 100 clients, every odd
 * one over WebSocket, 1,000 packets each, every packet exactly once. */
Test(test_conformance_ws, derp_clients_half_websocket)
{
    conf_load_run(
        &(struct conf_load_opts){.srv = &srv, .deadline_ms = 120000, .websocket_half = true});
    conf_server_stop_clean(&srv);
}

/* The same over TLS (wss): the WebSocket codec above the TLS one on both sides, connections
 * moving to their owner shards with both codecs. */
Test(test_conformance_ws, derp_clients_half_websocket_over_tls)
{
    conf_server_down(&srv); /* the suite's plain server */
    cr_assert_eq(conf_server_start(&srv, &(struct conf_server_opts){.shards = 2, .tls = true}), 0);
    struct tls_ctx *ca = NULL;
    cr_assert_eq(tls_client_ctx_create(&(struct tls_client_options){.ca_file = srv.cert_file}, &ca),
                 0);
    char host[64];
    snprintf(host, sizeof(host), "%s:%u", CONF_TLS_HOSTNAME, srv.port);
    conf_load_run(&(struct conf_load_opts){
        .srv = &srv, .tls_ctx = ca, .host = host, .deadline_ms = 120000, .websocket_half = true});
    tls_ctx_destroy(ca);
    conf_server_stop_clean(&srv);
}
