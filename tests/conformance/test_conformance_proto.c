/* test_conformance_proto.c - spec §14 rows 1-5, 7-10, 12, 13, 15, 16 and 36 against a real
 * hderp-server (2 shards) with the raw blocking client of conf_support.c on the test thread:
 * the HTTP upgrade, ServerKey, fast start with read-ahead, ClientInfo validation, ServerInfo,
 * early frames, packet size limits, unknown frames, Ping/Pong bounds, NotePreferred and varz. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "conf_support.h"

static struct conf_server srv;

static void up(void)
{
    cr_assert_eq(conf_server_start(&srv, NULL), 0);
}

static void down(void)
{
    if (srv.pid > 0)
        conf_server_stop(&srv);
}

static void stop_clean(void)
{
    cr_assert_eq(conf_server_stop(&srv), 0, "hderp-server exits 0 on SIGTERM");
}

#define OK(expr)                                                                                   \
    do {                                                                                           \
        int rc_ = (int)(expr);                                                                     \
        cr_assert_eq(rc_, 0, "%s: %d (%s)", #expr, rc_, strerror(rc_ < 0 ? -rc_ : 0));             \
    } while (0)

TestSuite(test_conformance_proto, .init = up, .fini = down, .timeout = 120);

/* Row 1: 426 for GET /derp without a DERP/websocket Upgrade. */
Test(test_conformance_proto, upgrade_required_426)
{
    static const char *reqs[] = {
        "GET /derp HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        "GET /derp HTTP/1.1\r\nHost: x\r\nUpgrade: h2c\r\nConnection: close\r\n\r\n",
    };
    char resp[4096];
    for (size_t i = 0; i < 2; i++) {
        cr_assert_gt(conf_http(&srv, reqs[i], resp, sizeof(resp)), 0);
        cr_assert_eq(strncmp(resp, "HTTP/1.1 426", 12), 0, "got: %.40s", resp);
        cr_assert_not_null(strstr(resp, "\r\n\r\nDERP requires connection upgrade"), "%s", resp);
    }
    stop_clean();
}

/* Rows 2, 3, 9: the 101 head, the ServerKey frame and ServerInfo. */
Test(test_conformance_proto, upgrade_101_server_key_server_info)
{
    struct conf_raw r;
    OK(conf_raw_open(&r, &srv, NULL));
    OK(conf_raw_upgrade(&r, NULL));
    cr_assert_eq(r.http_status, 101, "%s", r.head);
    cr_assert_eq(strncmp(r.head, "HTTP/1.1 101 Switching Protocols\r\n", 34), 0, "%s", r.head);
    cr_assert_not_null(strcasestr(r.head, "\r\nUpgrade: DERP\r\n"), "%s", r.head);
    cr_assert_not_null(strcasestr(r.head, "\r\nConnection: Upgrade\r\n"), "%s", r.head);
    cr_assert_not_null(strstr(r.head, "\r\nDerp-Version: 2\r\n"), "%s", r.head);
    char hex[DERP_KEY_HEX_SIZE], want[128];
    derp_key_hex_format(srv.key.bytes, hex);
    snprintf(want, sizeof(want), "\r\nDerp-Public-Key: %s\r\n", hex);
    cr_assert_not_null(strstr(r.head, want), "want %s in %s", want, r.head);

    struct conf_frame f;
    OK(conf_raw_read(&r, CONF_IO_TIMEOUT_MS, &f));
    cr_assert_eq(f.type, DERP_FRAME_SERVER_KEY);
    cr_assert_eq(f.len, DERP_MAGIC_LEN + DERP_KEY_LEN);
    cr_assert_eq(memcmp(f.p, DERP_MAGIC, DERP_MAGIC_LEN), 0);
    cr_assert_eq(memcmp(f.p + DERP_MAGIC_LEN, srv.key.bytes, DERP_KEY_LEN), 0);
    memcpy(r.server_key.bytes, srv.key.bytes, DERP_KEY_LEN);

    uint8_t ci[512];
    ssize_t n = conf_raw_client_info(&r, NULL, ci, sizeof(ci));
    cr_assert_gt(n, 0);
    OK(conf_raw_write(&r, ci, (size_t)n));
    int64_t version = 0;
    OK(conf_raw_read_server_info(&r, &version));
    cr_assert_eq(version, 2);
    OK(conf_raw_ping_pong(&r, 42, CONF_IO_TIMEOUT_MS));
    conf_raw_close(&r);
    stop_clean();
}

/* Rows 4 and 5: fast start, with NotePreferred, a SendPacket to ourselves and a Ping in the same
 * write as the request and ClientInfo: no HTTP comes back, and every read-ahead frame counts. */
Test(test_conformance_proto, fast_start_read_ahead)
{
    struct conf_raw r;
    OK(conf_raw_open(&r, &srv, NULL));
    r.server_key = srv.key; /* a fast-start client knows it in advance */
    uint8_t buf[2048];
    size_t len = (size_t)snprintf((char *)buf, sizeof(buf),
                                  "GET /derp HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\n"
                                  "Upgrade: DERP\r\nDerp-Fast-Start: 1\r\n\r\n");
    ssize_t n = conf_raw_client_info(&r, NULL, buf + len, sizeof(buf) - len);
    cr_assert_gt(n, 0);
    len += (size_t)n;
    len += (size_t)derp_frame_note_preferred_encode(buf + len, sizeof(buf) - len, true);
    len += (size_t)derp_frame_send_packet_encode(buf + len, sizeof(buf) - len, r.kp.pub.bytes,
                                                 (const uint8_t *)"self", 4);
    uint8_t ping[DERP_PING_LEN] = {9, 8, 7, 6, 5, 4, 3, 2};
    len += (size_t)derp_frame_ping_encode(buf + len, sizeof(buf) - len, ping);
    OK(conf_raw_write(&r, buf, len));

    struct conf_frame f;
    OK(conf_raw_read(&r, CONF_IO_TIMEOUT_MS, &f));
    cr_assert_eq(f.type, DERP_FRAME_SERVER_KEY, "first bytes are a ServerKey frame, not HTTP");
    cr_assert_eq(memcmp(f.p, DERP_MAGIC, DERP_MAGIC_LEN), 0);
    OK(conf_raw_read_server_info(&r, NULL));
    bool got_packet = false, got_pong = false;
    while (!got_packet || !got_pong) {
        OK(conf_raw_read_nka(&r, CONF_IO_TIMEOUT_MS, &f));
        if (f.type == DERP_FRAME_RECV_PACKET) {
            cr_assert_eq(f.len, DERP_KEY_LEN + 4);
            cr_assert_eq(memcmp(f.p, r.kp.pub.bytes, DERP_KEY_LEN), 0, "src is ourselves");
            cr_assert_eq(memcmp(f.p + DERP_KEY_LEN, "self", 4), 0);
            got_packet = true;
        } else {
            cr_assert_eq(f.type, DERP_FRAME_PONG, "unexpected frame %u", f.type);
            cr_assert_eq(memcmp(f.p, ping, DERP_PING_LEN), 0);
            got_pong = true;
        }
    }
    int64_t home = -1;
    OK(conf_varz_wait(&srv, "derp_current_home_connections", 1, CONF_IO_TIMEOUT_MS, &home));
    conf_raw_close(&r);
    OK(conf_varz_wait(&srv, "derp_current_home_connections", 0, CONF_IO_TIMEOUT_MS, &home));
    stop_clean();
}

/* Up to the ServerKey, then bytes of the caller's making; the server must close without a
 * ServerInfo. */
static void expect_login_rejected(const uint8_t *bytes, size_t len, const char *what)
{
    struct conf_raw r;
    OK(conf_raw_open(&r, &srv, NULL));
    OK(conf_raw_upgrade(&r, NULL));
    OK(conf_raw_read_server_key(&r));
    OK(conf_raw_write(&r, bytes, len));
    struct conf_frame f;
    int rc = conf_raw_read(&r, CONF_IO_TIMEOUT_MS, &f);
    cr_assert(rc == -ESHUTDOWN || rc == -ECONNRESET, "%s: want a close, got rc %d type %u", what,
              rc, rc == 0 ? f.type : 0);
    conf_raw_close(&r);
}

/* Seals json and expects a rejection (accept = false) or a ServerInfo (accept = true). */
static void login_json(const char *json, bool accept)
{
    struct conf_raw r;
    int rc = conf_raw_login(&r, &srv, NULL, json);
    if (accept)
        cr_assert_eq(rc, 0, "%s: rc %d", json, rc);
    else
        cr_assert(rc == -ESHUTDOWN || rc == -ECONNRESET, "%s: want a close, got %d", json, rc);
    conf_raw_close(&r);
}

/* Row 7: ClientInfo validation. */
Test(test_conformance_proto, client_info_validation)
{
    struct conf_raw k; /* only for its key pair and server key */
    OK(conf_raw_open(&k, &srv, NULL));
    k.server_key = srv.key;
    uint8_t ci[1024];
    ssize_t n = conf_raw_client_info(&k, NULL, ci, sizeof(ci));
    cr_assert_gt(n, 0);

    uint8_t wrong_type[1024];
    memcpy(wrong_type, ci, (size_t)n);
    wrong_type[0] = DERP_FRAME_SEND_PACKET;
    expect_login_rejected(wrong_type, (size_t)n, "first frame not ClientInfo");

    uint8_t shortf[DERP_FRAME_HEADER_LEN + 55];
    memcpy(shortf, ci, sizeof(shortf));
    derp_frame_header_encode(shortf, sizeof(shortf), DERP_FRAME_CLIENT_INFO, 55);
    expect_login_rejected(shortf, sizeof(shortf), "len 55");

    uint8_t big[DERP_FRAME_HEADER_LEN + 64];
    memcpy(big, ci, sizeof(big));
    derp_frame_header_encode(big, sizeof(big), DERP_FRAME_CLIENT_INFO, (256 << 10) + 1);
    expect_login_rejected(big, sizeof(big), "len 256 KiB + 1");

    uint8_t badbox[1024];
    memcpy(badbox, ci, (size_t)n);
    badbox[n - 1] ^= 1;
    expect_login_rejected(badbox, (size_t)n, "box does not open");
    conf_raw_close(&k);

    static const char *bad[] = {
        "{\"version\":2",
        "{\"version\":2} x",
        "[2]",
        "{\"version\":\"2\"}",
        "{\"CanAckPings\":1}",
        "{\"meshKey\":\"\"}",
        "{\"meshKey\":null}",
        "{\"meshKey\":12}",
        "{\"meshKey\":\"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde\"}",
        "{\"meshKey\":\"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0\"}",
        "{\"meshKey\":\"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdeg\"}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        login_json(bad[i], false);
    /* Controls: the same path admits good JSON, unknown keys and case-insensitive names (row 8;
     * the mesh half is in test_conformance_mesh). */
    login_json("{\"version\":2,\"CanAckPings\":true,\"Unknown\":[1,{}]}", true);
    login_json("{\"Version\":2,\"canackpings\":true,\"ISPROBER\":true}", true);
    login_json("{}", true);
    stop_clean();
}

/* Row 10: NotePreferred and Ping sent right after ClientInfo, before ServerInfo arrived:
 * ServerInfo comes first, then the Pong. */
Test(test_conformance_proto, early_frames)
{
    struct conf_raw r;
    OK(conf_raw_open(&r, &srv, NULL));
    OK(conf_raw_upgrade(&r, NULL));
    OK(conf_raw_read_server_key(&r));
    uint8_t buf[1024];
    ssize_t n = conf_raw_client_info(&r, NULL, buf, sizeof(buf));
    cr_assert_gt(n, 0);
    size_t len = (size_t)n;
    len += (size_t)derp_frame_note_preferred_encode(buf + len, sizeof(buf) - len, true);
    uint8_t ping[DERP_PING_LEN] = {1, 1, 2, 3, 5, 8, 13, 21};
    len += (size_t)derp_frame_ping_encode(buf + len, sizeof(buf) - len, ping);
    OK(conf_raw_write(&r, buf, len));
    OK(conf_raw_read_server_info(&r, NULL));
    struct conf_frame f;
    OK(conf_raw_read_nka(&r, CONF_IO_TIMEOUT_MS, &f));
    cr_assert_eq(f.type, DERP_FRAME_PONG);
    cr_assert_eq(memcmp(f.p, ping, DERP_PING_LEN), 0);
    int64_t home = -1;
    OK(conf_varz_wait(&srv, "derp_current_home_connections", 1, CONF_IO_TIMEOUT_MS, &home));
    conf_raw_close(&r);
    stop_clean();
}

/* Row 12: a 65536-byte packet is delivered (to ourselves); 65537 closes the sender. */
Test(test_conformance_proto, max_packet)
{
    static uint8_t pkt[DERP_PACKET_LEN_MAX + 1];
    for (size_t i = 0; i < sizeof(pkt); i++)
        pkt[i] = (uint8_t)(i * 31 + 7);
    struct conf_raw r;
    OK(conf_raw_login(&r, &srv, NULL, NULL));
    OK(conf_raw_send_packet(&r, &r.kp.pub, pkt, DERP_PACKET_LEN_MAX));
    struct derp_pubkey src;
    const uint8_t *data;
    size_t len;
    OK(conf_raw_read_packet(&r, CONF_IO_TIMEOUT_MS, &src, &data, &len));
    cr_assert_eq(len, DERP_PACKET_LEN_MAX);
    cr_assert(derp_pubkey_equal(&src, &r.kp.pub));
    cr_assert_eq(memcmp(data, pkt, len), 0);
    conf_raw_send_packet(&r, &r.kp.pub, pkt, DERP_PACKET_LEN_MAX + 1); /* may fail: closed */
    OK(conf_raw_wait_closed(&r, CONF_IO_TIMEOUT_MS));
    conf_raw_close(&r);
    stop_clean();
}

/* Row 13: an unknown frame type with a 100 KB payload is skipped; a Ping after it is answered. */
Test(test_conformance_proto, unknown_frame_skipped)
{
    static uint8_t junk[100000];
    memset(junk, 0xee, sizeof(junk));
    struct conf_raw r;
    OK(conf_raw_login(&r, &srv, NULL, NULL));
    OK(conf_raw_send_frame(&r, 0x30, junk, sizeof(junk)));
    OK(conf_raw_send_frame(&r, 0x0b, junk, 10));
    OK(conf_raw_send_frame(&r, DERP_FRAME_KEEP_ALIVE, NULL, 0)); /* client-sent: skipped */
    OK(conf_raw_ping_pong(&r, 0x1122334455667788ULL, CONF_IO_TIMEOUT_MS));
    conf_raw_close(&r);
    stop_clean();
}

/* Row 15: Ping bounds. */
Test(test_conformance_proto, ping_pong_bounds)
{
    uint8_t p[1001];
    for (size_t i = 0; i < sizeof(p); i++)
        p[i] = (uint8_t)(i + 1);
    struct conf_raw r;
    OK(conf_raw_login(&r, &srv, NULL, NULL));
    size_t ok_lens[] = {8, 20, 1000};
    for (size_t i = 0; i < 3; i++) {
        OK(conf_raw_send_frame(&r, DERP_FRAME_PING, p, ok_lens[i]));
        struct conf_frame f;
        OK(conf_raw_read_nka(&r, CONF_IO_TIMEOUT_MS, &f));
        cr_assert_eq(f.type, DERP_FRAME_PONG);
        cr_assert_eq(f.len, DERP_PING_LEN, "a Pong carries the first 8 bytes only");
        cr_assert_eq(memcmp(f.p, p, DERP_PING_LEN), 0);
    }
    conf_raw_close(&r);
    size_t bad_lens[] = {7, 0, 1001};
    for (size_t i = 0; i < 3; i++) {
        OK(conf_raw_login(&r, &srv, NULL, NULL));
        OK(conf_raw_send_frame(&r, DERP_FRAME_PING, p, bad_lens[i]));
        OK(conf_raw_wait_closed(&r, CONF_IO_TIMEOUT_MS));
        conf_raw_close(&r);
    }
    stop_clean();
}

/* Row 16: NotePreferred of a length other than 1 closes; the home gauge tracks the flag. */
Test(test_conformance_proto, note_preferred)
{
    struct conf_raw r;
    int64_t v = -1;
    OK(conf_raw_login(&r, &srv, NULL, NULL));
    OK(conf_raw_send_frame(&r, DERP_FRAME_NOTE_PREFERRED, "\x01", 1));
    OK(conf_varz_wait(&srv, "derp_current_home_connections", 1, CONF_IO_TIMEOUT_MS, &v));
    OK(conf_raw_send_frame(&r, DERP_FRAME_NOTE_PREFERRED, "\x00", 1));
    OK(conf_varz_wait(&srv, "derp_current_home_connections", 0, CONF_IO_TIMEOUT_MS, &v));
    OK(conf_raw_send_frame(&r, DERP_FRAME_NOTE_PREFERRED, "\x07", 1)); /* non-zero = true */
    OK(conf_varz_wait(&srv, "derp_current_home_connections", 1, CONF_IO_TIMEOUT_MS, &v));
    OK(conf_raw_send_frame(&r, DERP_FRAME_NOTE_PREFERRED, "\x01\x01", 2));
    OK(conf_raw_wait_closed(&r, CONF_IO_TIMEOUT_MS));
    conf_raw_close(&r);
    OK(conf_varz_wait(&srv, "derp_current_home_connections", 0, CONF_IO_TIMEOUT_MS, &v));
    OK(conf_raw_login(&r, &srv, NULL, NULL));
    OK(conf_raw_send_frame(&r, DERP_FRAME_NOTE_PREFERRED, NULL, 0));
    OK(conf_raw_wait_closed(&r, CONF_IO_TIMEOUT_MS));
    conf_raw_close(&r);
    stop_clean();
}

/* The path is routed decoded, as Go's ServeMux does (issue 24: /debug/%76arz was a 404 where
 * derper serves /debug/varz); a bad escape is Go's 400; "%2F" is no separator. */
Test(test_conformance_proto, path_percent_decoded)
{
    char resp[65536];
    cr_assert_gt(conf_http(&srv,
                           "GET /debug/%76arz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                           resp, sizeof(resp)),
                 0);
    cr_assert_eq(strncmp(resp, "HTTP/1.1 200", 12), 0, "/debug/%%76arz: %.40s", resp);
    cr_assert_not_null(strstr(resp, "derp_current_connections"), "not the varz page");
    cr_assert_gt(conf_http(&srv,
                           "GET /derp/prob%65 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                           resp, sizeof(resp)),
                 0);
    cr_assert_eq(strncmp(resp, "HTTP/1.1 200", 12), 0, "/derp/prob%%65: %.40s", resp);
    cr_assert_null(strstr(resp, "<html"), "/derp/prob%%65 got the home page");
    static const char *const bad[] = {"/debug/%zz", "/x%4", "/x%"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char rq[128];
        snprintf(rq, sizeof(rq), "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", bad[i]);
        cr_assert_gt(conf_http(&srv, rq, resp, sizeof(resp)), 0);
        cr_assert_eq(strncmp(resp, "HTTP/1.1 400", 12), 0, "%s: %.40s", bad[i], resp);
    }
    /* "/derp%2Fprobe" is one segment for Go's ServeMux: the home page, not the probe. */
    cr_assert_gt(conf_http(&srv,
                           "GET /derp%2Fprobe HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                           resp, sizeof(resp)),
                 0);
    cr_assert_not_null(strstr(resp, "<html"), "/derp%%2Fprobe: %.80s", resp);
    stop_clean();
}

/* Row 36: /debug/varz from loopback, derp_current_connections counts logged-in clients. */
Test(test_conformance_proto, varz_current_connections)
{
    struct conf_raw a, b;
    int64_t v = -1;
    OK(conf_varz_wait(&srv, "derp_current_connections", 0, CONF_IO_TIMEOUT_MS, &v));
    OK(conf_raw_login(&a, &srv, NULL, NULL));
    OK(conf_raw_login(&b, &srv, NULL, NULL));
    OK(conf_varz_wait(&srv, "derp_current_connections", 2, CONF_IO_TIMEOUT_MS, &v));
    conf_raw_close(&a);
    OK(conf_varz_wait(&srv, "derp_current_connections", 1, CONF_IO_TIMEOUT_MS, &v));
    conf_raw_close(&b);
    OK(conf_varz_wait(&srv, "derp_current_connections", 0, CONF_IO_TIMEOUT_MS, &v));
    char resp[4096];
    cr_assert_gt(conf_http(&srv,
                           "GET /debug/varz HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 8.8.8.8\r\n"
                           "Connection: close\r\n\r\n",
                           resp, sizeof(resp)),
                 0);
    cr_assert_eq(strncmp(resp, "HTTP/1.1 403", 12), 0, "forwarded: %.40s", resp);
    stop_clean();
}
