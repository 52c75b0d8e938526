/* test_http_parse.c - request and response head parser: table-driven good and bad heads (each bad
 * one with the status it must get), identical results whatever the split of the input, exact
 * read-ahead, semantics (keep-alive, Connection, Content-Length, target forms). Single thread. */
#define _GNU_SOURCE /* memmem */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hd/net_http.h>

#define OK_HEAD 0 /* expected rc in the tables: success, consumed up to the first empty line */

#define IN(s) (s), sizeof(s) - 1 /* a literal and its length: inputs may hold NUL */

struct http_case {
    const char *name;
    const char *in;
    size_t len;
    int rc; /* OK_HEAD or the -errno */
    uint16_t status;
};

static const struct http_case req_cases[] = {
    {"derp upgrade",
     IN("GET /derp HTTP/1.1\r\nHost: derp.example.com\r\nUser-Agent: Go-http-client/1.1"
        "\r\nConnection: Upgrade\r\nUpgrade: DERP\r\n\r\n"),
     OK_HEAD, 0},
    {"derp fast start + read-ahead",
     IN("GET /derp HTTP/1.1\r\nHost: h:3340\r\nConnection: Upgrade\r\n"
        "Upgrade: DERP\r\nDerp-Fast-Start: 1\r\n\r\n\x02\x00\x00\x00\x68xyz"),
     OK_HEAD, 0},
    {"websocket",
     IN("GET /derp HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
        "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        "Sec-WebSocket-Protocol: derp\r\n\r\n"),
     OK_HEAD, 0},
    {"generate_204 challenge",
     IN("GET /generate_204 HTTP/1.1\r\nHost: 192.0.2.1\r\n"
        "X-Tailscale-Challenge: ts_derp1\r\n\r\n"),
     OK_HEAD, 0},
    {"probe HEAD", IN("HEAD /derp/probe HTTP/1.1\r\nHost: h\r\n\r\n"), OK_HEAD, 0},
    {"query", IN("GET /debug/varz?debugkey=abc&x HTTP/1.1\r\nHost: h\r\n\r\n"), OK_HEAD, 0},
    {"http/1.0 no host", IN("GET /robots.txt HTTP/1.0\r\n\r\n"), OK_HEAD, 0},
    {"absolute form", IN("GET http://Example.com:80/derp?x=1 HTTP/1.1\r\nHost: other\r\n\r\n"),
     OK_HEAD, 0},
    {"absolute no path", IN("GET HTTPS://h HTTP/1.1\r\nHost: h\r\n\r\n"), OK_HEAD, 0},
    {"connect authority", IN("CONNECT h:443 HTTP/1.1\r\nHost: h:443\r\n\r\n"), OK_HEAD, 0},
    {"options asterisk", IN("OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n"), OK_HEAD, 0},
    {"post with body", IN("POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello"), OK_HEAD,
     0},
    {"ows and obs-text",
     IN("GET / HTTP/1.1\r\nHost:h\r\nX-A: \t v a l \t\r\nX-B: \xe9t\xe9\r\nX-C:"
        "\r\nX-D:   \r\n\r\n"),
     OK_HEAD, 0},
    {"duplicate equal CL",
     IN("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 007\r\n"
        "content-length: 7\r\n\r\n"),
     OK_HEAD, 0},
    {"CL at the limit", IN("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 65536\r\n\r\n"), OK_HEAD,
     0},
    {"connection list",
     IN("GET / HTTP/1.0\r\nConnection: , Keep-Alive ,,UPGRADE\r\nUpgrade: x\r\n"
        "Connection: foo\r\n\r\n"),
     OK_HEAD, 0},
    {"unknown method", IN("PROPFIND / HTTP/1.1\r\nHost: h\r\n\r\n"), OK_HEAD, 0},
    {"ipv6 host", IN("GET / HTTP/1.1\r\nHost: [2001:db8::1]:443\r\nExpect: 100-continue\r\n\r\n"),
     OK_HEAD, 0},
    /* bad syntax: 400 */
    {"bare LF in request line", IN("GET / HTTP/1.1\nHost: h\r\n\r\n"), -EPROTO, 400},
    {"bare LF ends head", IN("GET / HTTP/1.1\r\nHost: h\r\n\n"), -EPROTO, 400},
    {"bare CR in value", IN("GET / HTTP/1.1\r\nHost: h\r\nX: a\rb\r\n\r\n"), -EPROTO, 400},
    {"CR CR LF", IN("GET / HTTP/1.1\r\nHost: h\r\r\n\r\n"), -EPROTO, 400},
    {"NUL in value", IN("GET / HTTP/1.1\r\nHost: h\r\nX: a\0b\r\n\r\n"), -EPROTO, 400},
    {"NUL in target", IN("GET /\0 HTTP/1.1\r\nHost: h\r\n\r\n"), -EPROTO, 400},
    {"control byte in value", IN("GET / HTTP/1.1\r\nHost: h\r\nX: a\x01\r\n\r\n"), -EPROTO, 400},
    {"DEL in value", IN("GET / HTTP/1.1\r\nHost: h\r\nX: a\x7f\r\n\r\n"), -EPROTO, 400},
    {"obs-fold", IN("GET / HTTP/1.1\r\nHost: h\r\nX: a\r\n b\r\n\r\n"), -EPROTO, 400},
    {"whitespace before first field", IN("GET / HTTP/1.1\r\n Host: h\r\n\r\n"), -EPROTO, 400},
    {"space before colon", IN("GET / HTTP/1.1\r\nHost : h\r\n\r\n"), -EPROTO, 400},
    {"tab before colon", IN("GET / HTTP/1.1\r\nHost\t: h\r\n\r\n"), -EPROTO, 400},
    {"bad char in name", IN("GET / HTTP/1.1\r\nHo(st: h\r\n\r\n"), -EPROTO, 400},
    {"obs-text in name", IN("GET / HTTP/1.1\r\nH\xe9: h\r\nHost: h\r\n\r\n"), -EPROTO, 400},
    {"empty field name", IN("GET / HTTP/1.1\r\n: h\r\nHost: h\r\n\r\n"), -EPROTO, 400},
    {"field without colon", IN("GET / HTTP/1.1\r\nHost\r\n\r\n"), -EPROTO, 400},
    {"lowercase version", IN("GET / http/1.1\r\nHost: h\r\n\r\n"), -EPROTO, 400},
    {"version too long", IN("GET / HTTP/1.10\r\nHost: h\r\n\r\n"), -EPROTO, 400},
    {"version short", IN("GET / HTTP/1\r\nHost: h\r\n\r\n"), -EPROTO, 400},
    {"trailing space", IN("GET / HTTP/1.1 \r\nHost: h\r\n\r\n"), -EPROTO, 400},
    {"http/0.9 line", IN("GET /\r\n\r\n"), -EPROTO, 400},
    {"double space", IN("GET  / HTTP/1.1\r\nHost: h\r\n\r\n"), -EPROTO, 400},
    {"empty method", IN(" / HTTP/1.1\r\nHost: h\r\n\r\n"), -EPROTO, 400},
    {"method not a token", IN("G@T / HTTP/1.1\r\nHost: h\r\n\r\n"), -EPROTO, 400},
    {"leading CRLF", IN("\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n"), -EPROTO, 400},
    {"fragment", IN("GET /a#b HTTP/1.1\r\nHost: h\r\n\r\n"), -EPROTO, 400},
    {"non-ascii target", IN("GET /\xc3\xa9 HTTP/1.1\r\nHost: h\r\n\r\n"), -EPROTO, 400},
    {"tab in target", IN("GET /a\tb HTTP/1.1\r\nHost: h\r\n\r\n"), -EPROTO, 400},
    {"relative target", IN("GET derp HTTP/1.1\r\nHost: h\r\n\r\n"), -EPROTO, 400},
    {"asterisk with GET", IN("GET * HTTP/1.1\r\nHost: h\r\n\r\n"), -EPROTO, 400},
    {"absolute empty authority", IN("GET http:///x HTTP/1.1\r\nHost: h\r\n\r\n"), -EPROTO, 400},
    {"missing host", IN("GET / HTTP/1.1\r\nUser-Agent: x\r\n\r\n"), -EPROTO, 400},
    {"two hosts", IN("GET / HTTP/1.1\r\nHost: a\r\nhost: a\r\n\r\n"), -EPROTO, 400},
    {"two hosts http/1.0", IN("GET / HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n"), -EPROTO, 400},
    {"host with space", IN("GET / HTTP/1.1\r\nHost: a b\r\n\r\n"), -EPROTO, 400},
    {"host with slash", IN("GET / HTTP/1.1\r\nHost: a/b\r\n\r\n"), -EPROTO, 400},
    {"CL plus", IN("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: +5\r\n\r\n"), -EPROTO, 400},
    {"CL minus", IN("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: -1\r\n\r\n"), -EPROTO, 400},
    {"CL list", IN("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5, 5\r\n\r\n"), -EPROTO, 400},
    {"CL hex", IN("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 0x10\r\n\r\n"), -EPROTO, 400},
    {"CL empty", IN("POST / HTTP/1.1\r\nHost: h\r\nContent-Length:\r\n\r\n"), -EPROTO, 400},
    {"CL inner space", IN("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1 2\r\n\r\n"), -EPROTO,
     400},
    {"CL disagree",
     IN("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n"), -EPROTO,
     400},
    {"bad connection token", IN("GET / HTTP/1.1\r\nHost: h\r\nConnection: close, a b\r\n\r\n"),
     -EPROTO, 400},
    {"TE in http/1.0", IN("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"), -EPROTO, 400},
    /* other statuses */
    {"CL too large", IN("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 65537\r\n\r\n"), -EFBIG,
     413},
    {"CL overflow",
     IN("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 99999999999999999999999\r\n\r\n"), -EFBIG,
     413},
    {"TE chunked", IN("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"),
     -EOPNOTSUPP, 501},
    {"TE and CL",
     IN("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nTransfer-Encoding: chunked"
        "\r\n\r\n"),
     -EOPNOTSUPP, 501},
    {"method too long", IN("ABCDEFGHIJKLMNOPQ / HTTP/1.1\r\nHost: h\r\n\r\n"), -EOPNOTSUPP, 501},
    {"version 1.2", IN("GET / HTTP/1.2\r\nHost: h\r\n\r\n"), -EPROTONOSUPPORT, 505},
    {"version 2.0", IN("GET / HTTP/2.0\r\nHost: h\r\n\r\n"), -EPROTONOSUPPORT, 505},
    {"version 0.9", IN("GET / HTTP/0.9\r\nHost: h\r\n\r\n"), -EPROTONOSUPPORT, 505},
};

static const struct http_case resp_cases[] = {
    {"derp 101 + frame",
     IN("HTTP/1.1 101 Switching Protocols\r\nUpgrade: DERP\r\nConnection: Upgrade"
        "\r\nDerp-Version: 2\r\n\r\n\x01\x00\x00\x00\x28"
        "DERP"),
     OK_HEAD, 0},
    {"200 CL", IN("HTTP/1.1 200 OK\r\nContent-Length: 16\r\n\r\n{\"Allow\": true}\n"), OK_HEAD, 0},
    {"200 chunked", IN("HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\n5\r\n"), OK_HEAD, 0},
    {"200 until close", IN("HTTP/1.1 200 OK\r\n\r\nbody"), OK_HEAD, 0},
    {"no reason", IN("HTTP/1.1 404\r\nContent-Length: 0\r\n\r\n"), OK_HEAD, 0},
    {"empty reason", IN("HTTP/1.1 204 \r\n\r\n"), OK_HEAD, 0},
    {"http/1.0 keep-alive",
     IN("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n"
        "\r\nok"),
     OK_HEAD, 0},
    {"100 then 200", IN("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n\r\n"), OK_HEAD, 0},
    {"code too short", IN("HTTP/1.1 20 OK\r\n\r\n"), -EPROTO, 400},
    {"code too long", IN("HTTP/1.1 2000 OK\r\n\r\n"), -EPROTO, 400},
    {"code 600", IN("HTTP/1.1 600 X\r\n\r\n"), -EPROTO, 400},
    {"code letters", IN("HTTP/1.1 2x0 OK\r\n\r\n"), -EPROTO, 400},
    {"version malformed", IN("HTTP/2 200 OK\r\n\r\n"), -EPROTO, 400},
    {"version 2.0", IN("HTTP/2.0 200 OK\r\n\r\n"), -EPROTONOSUPPORT, 505},
    {"control in reason", IN("HTTP/1.1 200 O\x01K\r\n\r\n"), -EPROTO, 400},
    {"bare LF", IN("HTTP/1.1 200 OK\nContent-Length: 0\r\n\r\n"), -EPROTO, 400},
    {"obs-fold", IN("HTTP/1.1 200 OK\r\nX: a\r\n\tb\r\n\r\n"), -EPROTO, 400},
    {"space before colon", IN("HTTP/1.1 200 OK\r\nContent-Length : 0\r\n\r\n"), -EPROTO, 400},
    {"CL disagree", IN("HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"),
     -EPROTO, 400},
    {"CL and TE", IN("HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"),
     -EPROTO, 400},
    {"TE gzip", IN("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"), -EOPNOTSUPP,
     501},
    {"CL overflow", IN("HTTP/1.1 200 OK\r\nContent-Length: 18446744073709551616\r\n\r\n"), -EFBIG,
     413},
};

static size_t case_len(const struct http_case *c)
{
    return c->len;
}

static char *dup_exact(const char *s, size_t n)
{
    char *p = malloc(n > 0 ? n : 1); /* exact size: ASan sees any read past the end */
    cr_assert(p != NULL);
    memcpy(p, s, n);
    return p;
}

/* Offset of a string from base, SIZE_MAX when absent: comparable across buffers. */
static size_t off_of(const char *base, struct net_http_str s)
{
    return s.ptr == NULL ? SIZE_MAX : (size_t)(s.ptr - base);
}

/* Everything a parse produced, position-independent. memset first so memcmp is meaningful. */
struct snap {
    int rc;
    uint16_t status, fields_count;
    uint8_t version_minor, conn_flags;
    int kind, form, keep_alive, upgrade, expect;
    uint64_t body;
    size_t strs[6][2];
    struct net_http_field fields[NET_HTTP_HEADERS_MAX];
};

static void snap_str(struct snap *s, int i, const char *base, struct net_http_str v)
{
    s->strs[i][0] = off_of(base, v);
    s->strs[i][1] = v.len;
}

static void snap_head(struct snap *s, int rc, const struct net_http_head *h)
{
    memset(s, 0, sizeof(*s));
    s->rc = rc;
    s->status = h->error_status;
    if (rc <= 0) {
        return;
    }
    s->fields_count = h->fields_count;
    s->version_minor = h->version_minor;
    s->conn_flags = h->conn_flags;
    memcpy(s->fields, h->fields, sizeof(s->fields));
}

static void snap_req(struct snap *s, int rc, const struct net_http_req *r)
{
    snap_head(s, rc, &r->head);
    if (rc <= 0) {
        return;
    }
    const char *b = r->head.base;
    s->kind = r->method;
    s->form = r->target_form;
    s->keep_alive = r->keep_alive;
    s->upgrade = r->upgrade;
    s->expect = r->expect_continue;
    s->body = r->body_size;
    snap_str(s, 0, b, r->method_str);
    snap_str(s, 1, b, r->target);
    snap_str(s, 2, b, r->path);
    snap_str(s, 3, b, r->query);
    snap_str(s, 4, b, r->host);
}

static void snap_resp(struct snap *s, int rc, const struct net_http_resp *r)
{
    snap_head(s, rc, &r->head);
    if (rc <= 0) {
        return;
    }
    s->kind = r->status;
    s->form = r->body;
    s->keep_alive = r->keep_alive;
    s->body = r->head.content_length;
    snap_str(s, 5, r->head.base, r->reason);
}

/* One parser interface for both kinds, so the split tests are written once. */
union msg {
    struct net_http_req req;
    struct net_http_resp resp;
};

static int msg_parse(bool is_req, union msg *m, const char *buf, size_t len)
{
    return is_req ? net_http_req_parse(&m->req, buf, len) : net_http_resp_parse(&m->resp, buf, len);
}

static void msg_init(bool is_req, union msg *m)
{
    if (is_req) {
        net_http_req_init(&m->req);
    } else {
        net_http_resp_init(&m->resp, false);
    }
}

static void msg_snap(bool is_req, struct snap *s, int rc, const union msg *m)
{
    if (is_req) {
        snap_req(s, rc, &m->req);
    } else {
        snap_resp(s, rc, &m->resp);
    }
}

static int expected_rc(const struct http_case *c)
{
    if (c->rc != OK_HEAD) {
        return c->rc;
    }
    const char *end = memmem(c->in, c->len, "\r\n\r\n", 4);
    cr_assert(end != NULL, "%s: table error", c->name);
    return (int)(end - c->in) + 4;
}

/* Whole input at once: the expected result, then each split point and byte-at-a-time must give
 * the very same snapshot. */
static void check_case(bool is_req, const struct http_case *c)
{
    size_t len = case_len(c);
    union msg m;
    struct snap whole, other;
    char *buf = dup_exact(c->in, len);

    msg_init(is_req, &m);
    int rc = msg_parse(is_req, &m, buf, len);
    cr_assert_eq(rc, expected_rc(c), "%s: rc %d, want %d (%s)", c->name, rc, expected_rc(c),
                 m.req.head.error_reason ? m.req.head.error_reason : "-");
    cr_assert_eq(m.req.head.error_status, c->status, "%s: status %u, want %u", c->name,
                 m.req.head.error_status, c->status);
    cr_assert_eq(msg_parse(is_req, &m, buf, len), rc, "%s: result is not sticky", c->name);
    msg_snap(is_req, &whole, rc, &m);

    for (size_t k = 0; k <= len; k++) { /* two calls, each on its own exact-size buffer */
        char *first = dup_exact(c->in, k);
        msg_init(is_req, &m);
        int rc1 = msg_parse(is_req, &m, first, k);
        int rc2 = msg_parse(is_req, &m, buf, len);
        cr_assert(rc1 == -EAGAIN || rc1 == rc, "%s: split %zu: early rc %d", c->name, k, rc1);
        msg_snap(is_req, &other, rc2, &m);
        cr_assert(memcmp(&whole, &other, sizeof(whole)) == 0, "%s: split at %zu differs", c->name,
                  k);
        free(first);
    }
    msg_init(is_req, &m);
    int last = -EAGAIN;
    for (size_t k = 0; k <= len; k++) { /* byte at a time */
        int rk = msg_parse(is_req, &m, buf, k);
        cr_assert(rk == -EAGAIN || rk == rc, "%s: %zu bytes: rc %d", c->name, k, rk);
        cr_assert(last == -EAGAIN || rk == last, "%s: result changed at %zu", c->name, k);
        last = rk;
    }
    msg_snap(is_req, &other, last, &m);
    cr_assert(memcmp(&whole, &other, sizeof(whole)) == 0, "%s: byte-wise differs", c->name);
    free(buf);
}

Test(http_parse, request_table)
{
    for (size_t i = 0; i < sizeof(req_cases) / sizeof(req_cases[0]); i++) {
        check_case(true, &req_cases[i]);
    }
}

Test(http_parse, response_table)
{
    for (size_t i = 0; i < sizeof(resp_cases) / sizeof(resp_cases[0]); i++) {
        check_case(false, &resp_cases[i]);
    }
}

/* Builds "GET <target> HTTP/1.1\r\nHost: h\r\n" + fields_count "X-N: v" lines + filler + CRLF. */
static size_t build_req(char *out, size_t size, size_t target_len, size_t fields_count,
                        size_t filler_len)
{
    size_t n = 0;
    n += (size_t)snprintf(out + n, size - n, "GET /");
    for (size_t i = 1; i < target_len; i++) {
        out[n++] = 'a';
    }
    n += (size_t)snprintf(out + n, size - n, " HTTP/1.1\r\nHost: h\r\n");
    for (size_t i = 0; i < fields_count; i++) {
        n += (size_t)snprintf(out + n, size - n, "X-%zu: v\r\n", i);
    }
    if (filler_len > 0) {
        n += (size_t)snprintf(out + n, size - n, "F: ");
        for (size_t i = 0; i < filler_len; i++) {
            out[n++] = 'f';
        }
        n += (size_t)snprintf(out + n, size - n, "\r\n");
    }
    n += (size_t)snprintf(out + n, size - n, "\r\n");
    cr_assert(n < size);
    return n;
}

Test(http_parse, limits)
{
    static char big[3 * NET_HTTP_HEAD_SIZE_MAX];
    struct http_case c = {.in = big};
    size_t base;

    c.name = "target at limit";
    c.len = build_req(big, sizeof(big), NET_HTTP_TARGET_LEN_MAX, 0, 0);
    check_case(true, &c);
    c = (struct http_case){"target over limit", big, 0, -ENAMETOOLONG, 414};
    c.len = build_req(big, sizeof(big), NET_HTTP_TARGET_LEN_MAX + 1, 0, 0);
    check_case(true, &c);

    c = (struct http_case){"fields at limit", big, 0, OK_HEAD, 0};
    c.len = build_req(big, sizeof(big), 1, NET_HTTP_HEADERS_MAX - 1, 0); /* + Host */
    check_case(true, &c);
    c = (struct http_case){"fields over limit", big, 0, -EMSGSIZE, 431};
    c.len = build_req(big, sizeof(big), 1, NET_HTTP_HEADERS_MAX, 0);
    check_case(true, &c);

    base = build_req(big, sizeof(big), 1, 0, 0) + 5; /* + "F: " and its CRLF */
    c = (struct http_case){"head at limit", big, 0, OK_HEAD, 0};
    c.len = build_req(big, sizeof(big), 1, 0, NET_HTTP_HEAD_SIZE_MAX - base);
    cr_assert_eq(c.len, NET_HTTP_HEAD_SIZE_MAX);
    check_case(true, &c);
    c = (struct http_case){"head over limit", big, 0, -EMSGSIZE, 431};
    c.len = build_req(big, sizeof(big), 1, 0, NET_HTTP_HEAD_SIZE_MAX - base + 1);
    check_case(true, &c);
    /* The head's end is past the limit: 431 as soon as the limit is reached, not later. */
    c.len = NET_HTTP_HEAD_SIZE_MAX;
    check_case(true, &c);
}

Test(http_parse, derp_readahead_exact)
{
    const struct http_case *c = &req_cases[1];
    struct net_http_req req;
    size_t len = case_len(c);
    const char *frame = (const char *)memmem(c->in, len, "\r\n\r\n", 4) + 4;

    net_http_req_init(&req);
    int rc = net_http_req_parse(&req, c->in, len);
    cr_assert_gt(rc, 0);
    cr_assert_eq(len - (size_t)rc, 8, "read-ahead is the 5-byte frame header + 3 bytes");
    cr_assert(memcmp(c->in + rc, frame, 8) == 0);
    cr_assert(net_http_str_eq(net_http_header_get(&req.head, "derp-fast-start"), "1"));
    cr_assert(net_http_str_eq_nocase(net_http_header_get(&req.head, "UPGRADE"), "derp"));
    cr_assert(req.upgrade);
    cr_assert(!req.keep_alive || req.head.version_minor == 1);
    cr_assert(net_http_str_eq(req.host, "h:3340"));
    cr_assert(net_http_str_eq(req.path, "/derp"));
    cr_assert_null(req.query.ptr);
}

static void parse_req_ok(struct net_http_req *req, const char *s)
{
    net_http_req_init(req);
    int rc = net_http_req_parse(req, s, strlen(s));
    cr_assert_gt(rc, 0, "%s: rc %d (%s)", s, rc, req->head.error_reason);
}

Test(http_parse, request_semantics)
{
    struct net_http_req r;

    parse_req_ok(&r, req_cases[3].in); /* generate_204 */
    cr_assert_eq(r.method, NET_HTTP_METHOD_GET);
    cr_assert(net_http_str_eq(net_http_header_get(&r.head, "x-tailscale-challenge"), "ts_derp1"));
    cr_assert_null(net_http_header_get(&r.head, "X-Tailscale-Response").ptr);
    cr_assert(r.keep_alive);
    cr_assert(!r.upgrade);

    parse_req_ok(&r, req_cases[5].in); /* query */
    cr_assert(net_http_str_eq(r.path, "/debug/varz"));
    cr_assert(net_http_str_eq(r.query, "debugkey=abc&x"));

    parse_req_ok(&r, "GET /x? HTTP/1.1\r\nHost: h\r\n\r\n");
    cr_assert(r.query.ptr != NULL && r.query.len == 0, "empty query is present");

    parse_req_ok(&r, req_cases[6].in); /* HTTP/1.0 without Host */
    cr_assert(!r.keep_alive);
    cr_assert_eq(r.head.version_minor, 0);
    cr_assert_null(r.host.ptr);

    parse_req_ok(&r, req_cases[7].in); /* absolute-form: its authority wins over Host */
    cr_assert_eq(r.target_form, NET_HTTP_TARGET_ABSOLUTE);
    cr_assert(net_http_str_eq(r.host, "Example.com:80"));
    cr_assert(net_http_str_eq(r.path, "/derp"));
    cr_assert(net_http_str_eq(r.query, "x=1"));

    parse_req_ok(&r, req_cases[8].in);
    cr_assert(net_http_str_eq(r.host, "h") && r.path.len == 0);

    parse_req_ok(&r, req_cases[9].in);
    cr_assert_eq(r.method, NET_HTTP_METHOD_CONNECT);
    cr_assert_eq(r.target_form, NET_HTTP_TARGET_AUTHORITY);
    cr_assert(net_http_str_eq(r.host, "h:443"));

    parse_req_ok(&r, req_cases[10].in);
    cr_assert_eq(r.target_form, NET_HTTP_TARGET_ASTERISK);
    cr_assert(net_http_str_eq(r.path, "*"));

    parse_req_ok(&r, "get / HTTP/1.1\r\nHost: h\r\n\r\n"); /* methods are case-sensitive */
    cr_assert_eq(r.method, NET_HTTP_METHOD_OTHER);
    cr_assert(net_http_str_eq(r.method_str, "get"));

    parse_req_ok(&r, req_cases[17].in);
    cr_assert(r.expect_continue);
    cr_assert(net_http_str_eq(r.host, "[2001:db8::1]:443"));
}

Test(http_parse, connection_and_values)
{
    struct net_http_req r;
    struct net_http_str n, v;

    parse_req_ok(&r, req_cases[15].in); /* HTTP/1.0, keep-alive + upgrade in a list */
    cr_assert_eq(r.head.conn_flags, NET_HTTP_CONN_F_KEEP_ALIVE | NET_HTTP_CONN_F_UPGRADE);
    cr_assert(r.keep_alive);
    cr_assert(r.upgrade);
    cr_assert_eq(net_http_header_count(&r.head, "connection"), 2);
    cr_assert(net_http_header_has_token(&r.head, "Connection", "foo"));
    cr_assert(!net_http_header_has_token(&r.head, "Connection", "close"));

    parse_req_ok(&r, "GET / HTTP/1.1\r\nHost: h\r\nConnection: keep-alive, close\r\n\r\n");
    cr_assert(!r.keep_alive, "close wins");

    parse_req_ok(&r, "GET / HTTP/1.1\r\nHost: h\r\nUpgrade: DERP\r\n\r\n");
    cr_assert(!r.upgrade, "Upgrade without Connection: upgrade is not an upgrade (RFC 9110)");

    parse_req_ok(&r, req_cases[12].in); /* OWS trimmed, obs-text kept, empty values */
    cr_assert(net_http_str_eq(net_http_header_get(&r.head, "x-a"), "v a l"));
    cr_assert(net_http_str_eq(net_http_header_get(&r.head, "X-B"), "\xe9t\xe9"));
    cr_assert(net_http_header_get(&r.head, "X-C").ptr != NULL);
    cr_assert_eq(net_http_header_get(&r.head, "X-C").len, 0);
    cr_assert_eq(net_http_header_get(&r.head, "X-D").len, 0);
    cr_assert(net_http_header_at(&r.head, 0, &n, &v));
    cr_assert(net_http_str_eq(n, "Host") && net_http_str_eq(v, "h"));
    cr_assert(!net_http_header_at(&r.head, r.head.fields_count, &n, &v));

    parse_req_ok(&r, req_cases[13].in);
    cr_assert(r.head.has_content_length);
    cr_assert_eq(r.body_size, 7);
}

Test(http_parse, keep_alive_pipeline)
{
    static const char two[] = "POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc"
                              "GET /b HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\nTAIL";
    struct net_http_req r;
    size_t len = sizeof(two) - 1;

    net_http_req_init(&r);
    int rc = net_http_req_parse(&r, two, len);
    cr_assert_gt(rc, 0);
    cr_assert(r.keep_alive);
    cr_assert_eq(r.body_size, 3);
    cr_assert(memcmp(two + rc, "abc", 3) == 0);
    size_t next = (size_t)rc + r.body_size;

    net_http_req_init(&r);
    rc = net_http_req_parse(&r, two + next, len - next);
    cr_assert_gt(rc, 0);
    cr_assert(net_http_str_eq(r.path, "/b"));
    cr_assert(!r.keep_alive);
    cr_assert(strcmp(two + next + (size_t)rc, "TAIL") == 0);
}

Test(http_parse, response_semantics)
{
    struct net_http_resp r;
    const struct http_case *c;

    for (size_t i = 0; i < 8; i++) {
        c = &resp_cases[i];
        net_http_resp_init(&r, false);
        cr_assert_gt(net_http_resp_parse(&r, c->in, case_len(c)), 0, "%s", c->name);
    }
    c = &resp_cases[0];
    net_http_resp_init(&r, false);
    int rc = net_http_resp_parse(&r, c->in, case_len(c));
    cr_assert_eq(r.status, 101);
    cr_assert_eq(r.body, NET_HTTP_BODY_NONE);
    cr_assert(!r.keep_alive);
    cr_assert(net_http_str_eq(r.reason, "Switching Protocols"));
    cr_assert_eq(case_len(c) - (size_t)rc, 9, "the ServerKey frame start is read-ahead");

    c = &resp_cases[1];
    net_http_resp_init(&r, false);
    rc = net_http_resp_parse(&r, c->in, case_len(c));
    cr_assert_eq(r.body, NET_HTTP_BODY_LENGTH);
    cr_assert_eq(r.head.content_length, 16);
    cr_assert_eq(case_len(c) - (size_t)rc, 16);
    cr_assert(r.keep_alive);

    net_http_resp_init(&r, true); /* response to HEAD: no body whatever Content-Length says */
    net_http_resp_parse(&r, c->in, case_len(c));
    cr_assert_eq(r.body, NET_HTTP_BODY_NONE);

    net_http_resp_init(&r, false);
    net_http_resp_parse(&r, resp_cases[2].in, case_len(&resp_cases[2]));
    cr_assert_eq(r.body, NET_HTTP_BODY_CHUNKED);

    net_http_resp_init(&r, false);
    net_http_resp_parse(&r, resp_cases[3].in, case_len(&resp_cases[3]));
    cr_assert_eq(r.body, NET_HTTP_BODY_UNTIL_CLOSE);
    cr_assert(!r.keep_alive);

    net_http_resp_init(&r, false);
    net_http_resp_parse(&r, resp_cases[4].in, case_len(&resp_cases[4]));
    cr_assert_eq(r.status, 404);
    cr_assert_eq(r.reason.len, 0);

    net_http_resp_init(&r, false);
    net_http_resp_parse(&r, resp_cases[6].in, case_len(&resp_cases[6]));
    cr_assert(r.keep_alive);
    cr_assert_eq(r.head.version_minor, 0);
}

Test(http_parse, interim_then_final)
{
    const struct http_case *c = &resp_cases[7];
    struct net_http_resp r;
    size_t len = case_len(c);

    net_http_resp_init(&r, false);
    int rc = net_http_resp_parse(&r, c->in, len);
    cr_assert_eq(r.status, 100);
    net_http_resp_init(&r, false);
    int rc2 = net_http_resp_parse(&r, c->in + rc, len - (size_t)rc);
    cr_assert_eq(rc2, (int)(len - (size_t)rc));
    cr_assert_eq(r.status, 200);
    cr_assert_eq(r.body, NET_HTTP_BODY_UNTIL_CLOSE);
}

Test(http_parse, string_helpers)
{
    cr_assert(net_http_list_has_token(NET_HTTP_LIT(" a ,\tB,, c "), "b"));
    cr_assert(net_http_list_has_token(NET_HTTP_LIT("a,c"), "c"));
    cr_assert(!net_http_list_has_token(NET_HTTP_LIT("ab, bc"), "b"));
    cr_assert(!net_http_list_has_token((struct net_http_str){NULL, 0}, "b"));
    cr_assert(!net_http_str_eq_nocase((struct net_http_str){NULL, 0}, ""));
    cr_assert(net_http_str_eq_nocase(NET_HTTP_LIT("WebSocket"), "websocket"));
    cr_assert(!net_http_str_eq(NET_HTTP_LIT("WebSocket"), "websocket"));
    cr_assert(net_http_token_valid(NET_HTTP_LIT("Sec-WebSocket-Key")));
    cr_assert(!net_http_token_valid(NET_HTTP_LIT("a b")));
    cr_assert(!net_http_token_valid(NET_HTTP_LIT("")));
    cr_assert(!net_http_value_valid(NET_HTTP_LIT("a\r\nb")));
    cr_assert(net_http_value_valid(NET_HTTP_LIT("a\tb \x80")));
    cr_assert(net_http_host_valid(NET_HTTP_LIT("[::1]:443")));
    cr_assert(!net_http_host_valid(NET_HTTP_LIT("a@b")));
}

/* Percent-escapes in a path, as Go's net/url decodes URL.Path (issue 24). */
Test(test_http_parse, path_unescape)
{
    char out[64];
    struct {
        const char *in, *want;
        bool keep_slash;
    } ok[] = {
        {"/debug/%76arz", "/debug/varz", true},
        {"/a%2fb%2Fc", "/a%2fb%2Fc", true},
        {"/a%2fb", "/a/b", false},
        {"/a+b%20c", "/a+b c", true},
        {"/%41%4a%4A", "/AJJ", true},
        {"/plain", "/plain", true},
        {"", "", true},
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        ssize_t n =
            net_http_path_unescape(net_http_cstr(ok[i].in), out, sizeof(out), ok[i].keep_slash);
        cr_assert_eq(n, (ssize_t)strlen(ok[i].want), "%s: %zd", ok[i].in, n);
        cr_assert(memcmp(out, ok[i].want, (size_t)n) == 0, "%s", ok[i].in);
    }
    ssize_t n = net_http_path_unescape(net_http_cstr("/%00x"), out, sizeof(out), true);
    cr_assert(n == 3 && out[1] == '\0' && out[2] == 'x');
    const char *bad[] = {"/%", "/%4", "/%zz", "/%4g", "/x%g4", "%"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        cr_assert_eq(net_http_path_unescape(net_http_cstr(bad[i]), out, sizeof(out), true), -EPROTO,
                     "%s", bad[i]);
    cr_assert_eq(net_http_path_unescape(net_http_cstr("/abcd"), out, 3, true), -ENOSPC);
}

/* A query's key or value, as Go's url.QueryUnescape: "+" a space, "%2B" a plus. */
Test(test_http_parse, query_unescape)
{
    char out[64];
    struct {
        const char *in, *want;
    } ok[] = {
        {"a+b%20c", "a b c"}, {"%2B+%2b", "+ +"}, {"%3A%3a2", "::2"},
        {"a%2Fb", "a/b"},     {"plain", "plain"}, {"", ""},
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        ssize_t n = net_http_query_unescape(net_http_cstr(ok[i].in), out, sizeof(out));
        cr_assert_eq(n, (ssize_t)strlen(ok[i].want), "%s: %zd", ok[i].in, n);
        cr_assert(memcmp(out, ok[i].want, (size_t)n) == 0, "%s", ok[i].in);
    }
    const char *bad[] = {"%", "a%4", "%zz", "%4g", "+%g4"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        cr_assert_eq(net_http_query_unescape(net_http_cstr(bad[i]), out, sizeof(out)), -EPROTO,
                     "%s", bad[i]);
    cr_assert_eq(net_http_query_unescape(net_http_cstr("a+b+"), out, 3), -ENOSPC);
    cr_assert_eq(net_http_query_unescape(net_http_cstr("a%41+"), out, 3), 3);
}

/* Hex digits either case; a byte string's hex of odd length, a bad digit or too long refused. */
Test(test_http_parse, hex)
{
    const char digits[] = "0123456789abcdefABCDEF";
    for (const char *d = digits; *d; d++)
        cr_assert_eq(net_hex_digit(*d), (int)(d - digits < 16 ? d - digits : d - digits - 6), "%c",
                     *d);
    const char not_digits[] = {'g', 'G', '/', ':', '@', '`', ' ', '\0', '\x80', '\xff', 'x'};
    for (size_t i = 0; i < sizeof(not_digits); i++)
        cr_assert_eq(net_hex_digit(not_digits[i]), -1, "%#x", (unsigned char)not_digits[i]);

    uint8_t out[4];
    cr_assert_eq(net_hex_decode("00ff7FaB", 8, out, sizeof(out)), 4);
    cr_assert(memcmp(out, "\x00\xff\x7f\xab", 4) == 0);
    cr_assert_eq(net_hex_decode("DEADbeef", 8, out, sizeof(out)), 4, "upper and lower case");
    cr_assert(memcmp(out, "\xde\xad\xbe\xef", 4) == 0);
    cr_assert_eq(net_hex_decode("", 0, out, 0), 0);
    cr_assert_eq(net_hex_decode("abc", 3, out, sizeof(out)), -EINVAL, "odd length");
    cr_assert_eq(net_hex_decode("a", 1, out, sizeof(out)), -EINVAL, "odd length");
    cr_assert_eq(net_hex_decode("0g", 2, out, sizeof(out)), -EINVAL, "bad digit");
    cr_assert_eq(net_hex_decode("g0", 2, out, sizeof(out)), -EINVAL, "bad digit");
    cr_assert_eq(net_hex_decode("00 1", 4, out, sizeof(out)), -EINVAL, "a space");
    cr_assert_eq(net_hex_decode("0x00", 4, out, sizeof(out)), -EINVAL, "a 0x prefix");
    cr_assert_eq(net_hex_decode("0011223344", 10, out, sizeof(out)), -ENOSPC, "past cap");
    cr_assert_eq(net_hex_decode("00ff", 2, out, sizeof(out)), 1, "hex_len bounds the read");
    cr_assert_eq(out[0], 0);
}
