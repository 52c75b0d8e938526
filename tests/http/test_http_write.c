/* test_http_write.c - response and request writers: byte-exact derper 101 (spec §1.3)
 * and WebSocket accept (RFC 6455 section 1.3 vector), canned errors that parse back, -ENOSPC at
 * every short size without writing past it, -EINVAL for injected CR/LF. Single thread. */
#define _GNU_SOURCE /* memmem */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include <hd/net_http.h>

/* spec Appendix A server public key. */
static const uint8_t derp_key[NET_HTTP_DERP_KEY_SIZE] = {
    0x07, 0xa3, 0x7c, 0xbc, 0x14, 0x20, 0x93, 0xc8, 0xb7, 0x55, 0xdc, 0x1b, 0x10, 0xe8, 0x6c, 0xb4,
    0x26, 0x37, 0x4a, 0xd1, 0x6a, 0xa8, 0x53, 0xed, 0x0b, 0xdf, 0xc0, 0xb2, 0xb8, 0x6d, 0x1c, 0x7c,
};

static const char derp_101[] =
    "HTTP/1.1 101 Switching Protocols\r\n"
    "Upgrade: DERP\r\n"
    "Connection: Upgrade\r\n"
    "Derp-Version: 2\r\n"
    "Derp-Public-Key: 07a37cbc142093c8b755dc1b10e86cb426374ad16aa853ed0bdfc0b2b86d1c7c\r\n"
    "\r\n";

#define CANARY 0x5a

/* Output of fn at every size below the full one is -ENOSPC and never touches buf[size..]. */
typedef int write_fn(char *buf, size_t size, const void *arg);

static void check_sizes(write_fn *fn, const void *arg, const char *want, size_t want_len)
{
    char buf[1024];
    cr_assert_lt(want_len, sizeof(buf));
    for (size_t size = 0; size <= want_len; size++) {
        memset(buf, CANARY, sizeof(buf));
        int n = fn(buf, size, arg);
        for (size_t i = size; i < sizeof(buf); i++) {
            cr_assert_eq((unsigned char)buf[i], CANARY, "size %zu: byte %zu written", size, i);
        }
        if (size < want_len) {
            cr_assert_eq(n, -ENOSPC, "size %zu: %d", size, n);
        } else {
            cr_assert_eq(n, (int)want_len);
            cr_assert(memcmp(buf, want, want_len) == 0, "got:\n%.*s", n, buf);
        }
    }
}

static int derp_fn(char *buf, size_t size, const void *arg)
{
    return net_http_write_derp_101(buf, size, arg);
}

Test(http_write, derp_101_exact)
{
    cr_assert_eq(sizeof(derp_101) - 1, NET_HTTP_DERP_101_LEN);
    check_sizes(derp_fn, derp_key, derp_101, sizeof(derp_101) - 1);
}

Test(http_write, derp_101_parses)
{
    char buf[NET_HTTP_DERP_101_LEN];
    struct net_http_resp r;

    cr_assert_eq(net_http_write_derp_101(buf, sizeof(buf), derp_key), NET_HTTP_DERP_101_LEN);
    net_http_resp_init(&r, false);
    cr_assert_eq(net_http_resp_parse(&r, buf, sizeof(buf)), NET_HTTP_DERP_101_LEN);
    cr_assert_eq(r.status, 101);
    cr_assert(net_http_str_eq(net_http_header_get(&r.head, "derp-version"), "2"));
    cr_assert_eq(net_http_header_get(&r.head, "Derp-Public-Key").len, 64);
}

Test(http_write, ws_accept_rfc6455)
{
    char out[NET_HTTP_WS_ACCEPT_LEN + 1];
    cr_assert_eq(net_http_ws_accept(NET_HTTP_LIT("dGhlIHNhbXBsZSBub25jZQ=="), out), 0);
    cr_assert_str_eq(out, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");

    cr_assert_eq(net_http_ws_accept(NET_HTTP_LIT("dGhlIHNhbXBsZSBub25jZQ="), out), -EINVAL);
    cr_assert_eq(net_http_ws_accept(NET_HTTP_LIT("dGhlIHNhbXBsZSBub25jZQ==="), out), -EINVAL);
    cr_assert_eq(net_http_ws_accept(NET_HTTP_LIT("dGhlIHNhbXBsZSBub25jZQ.="), out), -EINVAL);
    cr_assert_eq(net_http_ws_accept(NET_HTTP_LIT("dGhlIHNhbXBsZ Bub25jZQ=="), out), -EINVAL);
    cr_assert_eq(net_http_ws_accept((struct net_http_str){NULL, 0}, out), -EINVAL);
}

struct ws_arg {
    struct net_http_str key, protocol;
};

static int ws_fn(char *buf, size_t size, const void *arg)
{
    const struct ws_arg *a = arg;
    return net_http_write_ws_101(buf, size, a->key, a->protocol);
}

Test(http_write, ws_101_exact)
{
    static const char want[] = "HTTP/1.1 101 Switching Protocols\r\n"
                               "Upgrade: websocket\r\n"
                               "Connection: Upgrade\r\n"
                               "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"
                               "Sec-WebSocket-Protocol: derp\r\n"
                               "\r\n";
    struct ws_arg a = {NET_HTTP_LIT("dGhlIHNhbXBsZSBub25jZQ=="), NET_HTTP_LIT("derp")};
    char buf[256];

    check_sizes(ws_fn, &a, want, sizeof(want) - 1);
    a.protocol = (struct net_http_str){NULL, 0};
    int n = ws_fn(buf, sizeof(buf), &a);
    cr_assert_gt(n, 0);
    cr_assert_null(memmem(buf, (size_t)n, "Sec-WebSocket-Protocol", 22));
    a.key = NET_HTTP_LIT("short");
    cr_assert_eq(ws_fn(buf, sizeof(buf), &a), -EINVAL);
}

static uint16_t ws_status(const char *head)
{
    struct net_http_req r;
    uint16_t status = 999;
    net_http_req_init(&r);
    cr_assert_gt(net_http_req_parse(&r, head, strlen(head)), 0, "%s", head);
    int rc = net_http_ws_check(&r, &status);
    cr_assert_eq(rc, status == 0 ? 0 : -EPROTO);
    return status;
}

Test(http_write, ws_check)
{
#define WS_KEY "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
#define WS_VER "Sec-WebSocket-Version: 13\r\n"
#define WS_UPG "Connection: keep-alive, Upgrade\r\nUpgrade: websocket\r\n"
    cr_assert_eq(ws_status("GET /derp HTTP/1.1\r\nHost: h\r\n" WS_UPG WS_VER WS_KEY "\r\n"), 0);
    cr_assert_eq(ws_status("GET /derp HTTP/1.0\r\nHost: h\r\n" WS_UPG WS_VER WS_KEY "\r\n"), 400);
    cr_assert_eq(
        ws_status("GET /derp HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\n" WS_VER WS_KEY "\r\n"),
        426);
    cr_assert_eq(ws_status("GET /derp HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\nUpgrade: DERP"
                           "\r\n" WS_VER WS_KEY "\r\n"),
                 426);
    cr_assert_eq(ws_status("POST /derp HTTP/1.1\r\nHost: h\r\n" WS_UPG WS_VER WS_KEY "\r\n"), 405);
    cr_assert_eq(ws_status("GET /derp HTTP/1.1\r\nHost: h\r\n" WS_UPG
                           "Sec-WebSocket-Version: 8\r\n" WS_KEY "\r\n"),
                 400);
    cr_assert_eq(ws_status("GET /derp HTTP/1.1\r\nHost: h\r\n" WS_UPG WS_VER "\r\n"), 400);
    cr_assert_eq(ws_status("GET /derp HTTP/1.1\r\nHost: h\r\n" WS_UPG WS_VER WS_KEY WS_KEY "\r\n"),
                 400);
    cr_assert_eq(ws_status("GET /derp HTTP/1.1\r\nHost: h\r\n" WS_UPG WS_VER
                           "Sec-WebSocket-Key: abc\r\n\r\n"),
                 400);
}

static int resp_fn(char *buf, size_t size, const void *arg)
{
    return net_http_write_resp(buf, size, arg);
}

Test(http_write, generate_204_exact)
{
    static const char want[] =
        "HTTP/1.1 204 No Content\r\n"
        "Cache-Control: no-cache, no-store, must-revalidate, no-transform, max-age=0\r\n"
        "X-Tailscale-Response: response ts_derp1\r\n"
        "\r\n";
    const struct net_http_hdr hdrs[] = {
        {"Cache-Control", NET_HTTP_LIT("no-cache, no-store, must-revalidate, no-transform, "
                                       "max-age=0")},
        {"X-Tailscale-Response", NET_HTTP_LIT("response ts_derp1")},
    };
    const struct net_http_resp_spec spec = {204, NULL, hdrs, 2, -1, NET_HTTP_CONN_OMIT};
    check_sizes(resp_fn, &spec, want, sizeof(want) - 1);
}

Test(http_write, resp_fields_and_connection)
{
    static const char want[] = "HTTP/1.1 200 OK\r\n"
                               "Access-Control-Allow-Origin: *\r\n"
                               "Content-Length: 0\r\n"
                               "Connection: keep-alive\r\n"
                               "\r\n";
    const struct net_http_hdr hdrs[] = {{"Access-Control-Allow-Origin", NET_HTTP_LIT("*")}};
    struct net_http_resp_spec spec = {200, NULL, hdrs, 1, 0, NET_HTTP_CONN_KEEP_ALIVE};
    check_sizes(resp_fn, &spec, want, sizeof(want) - 1);

    char buf[256];
    spec = (struct net_http_resp_spec){302, "Found it", NULL, 0, 12345678901, NET_HTTP_CONN_CLOSE};
    int n = net_http_write_resp(buf, sizeof(buf), &spec);
    static const char want2[] = "HTTP/1.1 302 Found it\r\nContent-Length: 12345678901\r\n"
                                "Connection: close\r\n\r\n";
    cr_assert_eq(n, (int)sizeof(want2) - 1);
    cr_assert(memcmp(buf, want2, sizeof(want2) - 1) == 0);
}

Test(http_write, text_426_exact)
{
    static const char want[] = "HTTP/1.1 426 Upgrade Required\r\n"
                               "Content-Type: text/plain; charset=utf-8\r\n"
                               "X-Content-Type-Options: nosniff\r\n"
                               "Content-Length: 33\r\n"
                               "\r\n"
                               "DERP requires connection upgrade\n";
    char buf[512];
    int n = net_http_write_text(buf, sizeof(buf), 426,
                                NET_HTTP_LIT("DERP requires connection upgrade\n"),
                                NET_HTTP_CONN_OMIT, false);
    cr_assert_eq(n, (int)sizeof(want) - 1);
    cr_assert(memcmp(buf, want, sizeof(want) - 1) == 0, "%.*s", n, buf);
    n = net_http_write_text(buf, sizeof(buf), 426,
                            NET_HTTP_LIT("DERP requires connection upgrade\n"), NET_HTTP_CONN_OMIT,
                            true);
    cr_assert_eq(n, (int)sizeof(want) - 1 - 33, "HEAD: same head, no body");
    for (size_t size = 0; size < sizeof(want) - 1; size++) {
        cr_assert_eq(net_http_write_text(buf, size, 426,
                                         NET_HTTP_LIT("DERP requires connection "
                                                      "upgrade\n"),
                                         NET_HTTP_CONN_OMIT, false),
                     -ENOSPC);
    }
}

Test(http_write, canned_errors_parse_back)
{
    static const uint16_t statuses[] = {400, 403, 404, 405, 413, 414, 426, 431, 500, 501, 505};
    char buf[512];
    struct net_http_resp r;

    for (size_t i = 0; i < sizeof(statuses) / sizeof(statuses[0]); i++) {
        uint16_t st = statuses[i];
        const char *reason = net_http_reason(st);
        int n = net_http_write_error(buf, sizeof(buf), st, false);
        cr_assert_gt(n, 0, "%u", st);
        cr_assert_str_neq(reason, "Unknown", "%u has a reason", st);
        net_http_resp_init(&r, false);
        int head = net_http_resp_parse(&r, buf, (size_t)n);
        cr_assert_gt(head, 0, "%u: %d", st, head);
        cr_assert_eq(r.status, st);
        cr_assert(net_http_str_eq(r.reason, reason));
        cr_assert(!r.keep_alive, "%u: errors close", st);
        cr_assert_eq(r.body, NET_HTTP_BODY_LENGTH);
        cr_assert_eq(r.head.content_length, strlen(reason) + 1);
        cr_assert_eq((size_t)n - (size_t)head, strlen(reason) + 1);
        cr_assert(memcmp(buf + head, reason, strlen(reason)) == 0 && buf[n - 1] == '\n');
        cr_assert_eq(net_http_write_error(buf, sizeof(buf), st, true), head);
    }
    cr_assert_str_eq(net_http_reason(999), "Unknown");
}

Test(http_write, injection_rejected)
{
    char buf[256];
    struct net_http_hdr h = {"X-A", NET_HTTP_LIT("a\r\nSet-Cookie: x")};
    struct net_http_resp_spec spec = {200, NULL, &h, 1, -1, NET_HTTP_CONN_OMIT};

    cr_assert_eq(net_http_write_resp(buf, sizeof(buf), &spec), -EINVAL);
    h.value = NET_HTTP_LIT("a\nb");
    cr_assert_eq(net_http_write_resp(buf, sizeof(buf), &spec), -EINVAL);
    h.value = (struct net_http_str){"a\0b", 3};
    cr_assert_eq(net_http_write_resp(buf, sizeof(buf), &spec), -EINVAL);
    h = (struct net_http_hdr){"X A", NET_HTTP_LIT("v")};
    cr_assert_eq(net_http_write_resp(buf, sizeof(buf), &spec), -EINVAL);
    h = (struct net_http_hdr){"X:A", NET_HTTP_LIT("v")};
    cr_assert_eq(net_http_write_resp(buf, sizeof(buf), &spec), -EINVAL);
    h = (struct net_http_hdr){"X-A", NET_HTTP_LIT("ok \t value")};
    cr_assert_gt(net_http_write_resp(buf, sizeof(buf), &spec), 0);
    spec.reason = "OK\r\n";
    cr_assert_eq(net_http_write_resp(buf, sizeof(buf), &spec), -EINVAL);
    spec.reason = NULL;
    spec.status = 99;
    cr_assert_eq(net_http_write_resp(buf, sizeof(buf), &spec), -EINVAL);
    spec.status = 600;
    cr_assert_eq(net_http_write_resp(buf, sizeof(buf), &spec), -EINVAL);
}

static int req_fn(char *buf, size_t size, const void *arg)
{
    return net_http_write_req(buf, size, arg);
}

Test(http_write, request_exact_and_round_trip)
{
    static const char want[] = "GET /derp HTTP/1.1\r\n"
                               "Host: derp1.example.com\r\n"
                               "User-Agent: hderp\r\n"
                               "Upgrade: DERP\r\n"
                               "Connection: Upgrade\r\n"
                               "\r\n";
    const struct net_http_hdr hdrs[] = {
        {"User-Agent", NET_HTTP_LIT("hderp")},
        {"Upgrade", NET_HTTP_LIT("DERP")},
    };
    const struct net_http_req_spec spec = {
        "GET", NET_HTTP_LIT("/derp"), NET_HTTP_LIT("derp1.example.com"), hdrs, 2,
        -1,    NET_HTTP_CONN_UPGRADE};
    check_sizes(req_fn, &spec, want, sizeof(want) - 1);

    struct net_http_req r;
    net_http_req_init(&r);
    cr_assert_eq(net_http_req_parse(&r, want, sizeof(want) - 1), (int)sizeof(want) - 1);
    cr_assert(r.upgrade);
    cr_assert(net_http_str_eq(r.host, "derp1.example.com"));
    cr_assert(net_http_str_eq(net_http_header_get(&r.head, "upgrade"), "DERP"));

    char buf[256];
    const struct net_http_req_spec post = {
        "POST", NET_HTTP_LIT("/verify"), NET_HTTP_LIT("c:8080"), NULL, 0, 52, NET_HTTP_CONN_CLOSE};
    int n = net_http_write_req(buf, sizeof(buf), &post);
    cr_assert_gt(n, 0);
    net_http_req_init(&r);
    cr_assert_eq(net_http_req_parse(&r, buf, (size_t)n), n);
    cr_assert_eq(r.method, NET_HTTP_METHOD_POST);
    cr_assert_eq(r.body_size, 52);
    cr_assert(!r.keep_alive);
}

Test(http_write, request_rejects_bad_parts)
{
    char buf[256];
    struct net_http_req_spec s = {"GET", NET_HTTP_LIT("/a#b"), NET_HTTP_LIT("h"), NULL, 0, -1, 0};
    cr_assert_eq(net_http_write_req(buf, sizeof(buf), &s), -EINVAL);
    s.target = NET_HTTP_LIT("/a b");
    cr_assert_eq(net_http_write_req(buf, sizeof(buf), &s), -EINVAL);
    s.target = NET_HTTP_LIT("");
    cr_assert_eq(net_http_write_req(buf, sizeof(buf), &s), -EINVAL);
    s.target = NET_HTTP_LIT("/");
    s.host = NET_HTTP_LIT("h\r\nX: y");
    cr_assert_eq(net_http_write_req(buf, sizeof(buf), &s), -EINVAL);
    s.host = (struct net_http_str){"h\0x", 3};
    cr_assert_eq(net_http_write_req(buf, sizeof(buf), &s), -EINVAL);
    s.host = NET_HTTP_LIT("h");
    s.method = "G T";
    cr_assert_eq(net_http_write_req(buf, sizeof(buf), &s), -EINVAL);
    s.method = "GET";
    cr_assert_gt(net_http_write_req(buf, sizeof(buf), &s), 0);
}
