/* http_write.c - HTTP/1.1 head writers: responses, canned text and error answers, the exact
 * derper 101, the WebSocket handshake (RFC 6455), and client request heads. Runs on the shard
 * that owns the connection; writes only into the caller's buffer, owns nothing. Every value is
 * checked before it is written so no caller-supplied text can inject a header or end the head. */
#include <hd/net_http.h>

#include <errno.h>
#include <limits.h>
#include <string.h>

#include <openssl/base64.h>
#include <openssl/sha.h>

#include <hd/hd_base.h>

/* Bounded output: records overflow instead of writing past size, so callers check once. */
struct wbuf {
    char *p;
    size_t size;
    size_t len;
    bool overflow;
};

static void wbuf_init(struct wbuf *w, char *buf, size_t size)
{
    HD_ASSERT(buf != NULL || size == 0);
    w->p = buf;
    w->size = size < INT_MAX ? size : INT_MAX; /* the result is an int */
    w->len = 0;
    w->overflow = false;
}

static void put(struct wbuf *w, const void *s, size_t n)
{
    if (w->overflow || n > w->size - w->len) {
        w->overflow = true;
        return;
    }
    if (n > 0) {
        memcpy(w->p + w->len, s, n);
    }
    w->len += n;
}

static void put_cstr(struct wbuf *w, const char *s)
{
    put(w, s, strlen(s));
}

static void put_str(struct wbuf *w, struct net_http_str s)
{
    put(w, s.ptr, s.len);
}

static void put_u64(struct wbuf *w, uint64_t v)
{
    char digits[20]; /* 2^64 - 1 has 20 digits */
    size_t n = sizeof(digits);
    do {
        digits[--n] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    put(w, digits + n, sizeof(digits) - n);
}

static void put_field(struct wbuf *w, const char *name, struct net_http_str value)
{
    put_cstr(w, name);
    put(w, ": ", 2);
    put_str(w, value);
    put(w, "\r\n", 2);
}

static int wbuf_result(const struct wbuf *w)
{
    return w->overflow ? -ENOSPC : (int)w->len;
}

/* RFC 9110 section 15 phrases for the statuses we answer or expect to see. */
static const struct {
    uint16_t status;
    const char *text;
} http_reasons[] = {
    {100, "Continue"},
    {101, "Switching Protocols"},
    {200, "OK"},
    {204, "No Content"},
    {301, "Moved Permanently"},
    {302, "Found"},
    {304, "Not Modified"},
    {400, "Bad Request"},
    {401, "Unauthorized"},
    {403, "Forbidden"},
    {404, "Not Found"},
    {405, "Method Not Allowed"},
    {408, "Request Timeout"},
    {411, "Length Required"},
    {413, "Request Entity Too Large"}, /* Go's text; RFC 9110 renamed it "Content Too Large" */
    {414, "Request URI Too Long"},
    {417, "Expectation Failed"},
    {426, "Upgrade Required"},
    {429, "Too Many Requests"},
    {431, "Request Header Fields Too Large"},
    {500, "Internal Server Error"},
    {501, "Not Implemented"},
    {502, "Bad Gateway"},
    {503, "Service Unavailable"},
    {504, "Gateway Timeout"},
    {505, "HTTP Version Not Supported"},
};

const char *net_http_reason(unsigned status)
{
    for (size_t i = 0; i < HD_ARRAY_SIZE(http_reasons); i++) {
        if (http_reasons[i].status == status) {
            return http_reasons[i].text;
        }
    }
    return "Unknown";
}

static bool hdrs_valid(const struct net_http_hdr *hdrs, size_t count)
{
    HD_ASSERT(hdrs != NULL || count == 0);
    for (size_t i = 0; i < count; i++) {
        if (hdrs[i].name == NULL || !net_http_token_valid(net_http_cstr(hdrs[i].name)) ||
            (hdrs[i].value.ptr == NULL && hdrs[i].value.len != 0) ||
            !net_http_value_valid(hdrs[i].value)) {
            return false;
        }
    }
    return true;
}

/* The part after the start line: caller's fields, Content-Length, Connection, empty line. */
static void put_fields(struct wbuf *w, const struct net_http_hdr *hdrs, size_t count,
                       int64_t content_length, enum net_http_conn conn)
{
    static const char *const conn_values[] = {
        [NET_HTTP_CONN_KEEP_ALIVE] = "keep-alive",
        [NET_HTTP_CONN_CLOSE] = "close",
        [NET_HTTP_CONN_UPGRADE] = "Upgrade",
    };
    for (size_t i = 0; i < count; i++) {
        put_field(w, hdrs[i].name, hdrs[i].value);
    }
    if (content_length >= 0) {
        put_cstr(w, "Content-Length: ");
        put_u64(w, (uint64_t)content_length);
        put(w, "\r\n", 2);
    }
    if (conn != NET_HTTP_CONN_OMIT) {
        put_field(w, "Connection", net_http_cstr(conn_values[conn]));
    }
    put(w, "\r\n", 2);
}

static bool conn_valid(enum net_http_conn conn)
{
    return (unsigned)conn <= NET_HTTP_CONN_UPGRADE;
}

int net_http_write_resp(char *buf, size_t size, const struct net_http_resp_spec *spec)
{
    const char *reason = spec->reason != NULL ? spec->reason : net_http_reason(spec->status);
    struct wbuf w;

    if (spec->status < 100 || spec->status > 599 || !conn_valid(spec->connection) ||
        !net_http_value_valid(net_http_cstr(reason)) ||
        !hdrs_valid(spec->headers, spec->headers_count)) {
        return -EINVAL;
    }
    wbuf_init(&w, buf, size);
    put_cstr(&w, "HTTP/1.1 ");
    put_u64(&w, spec->status);
    put(&w, " ", 1);
    put_cstr(&w, reason);
    put(&w, "\r\n", 2);
    put_fields(&w, spec->headers, spec->headers_count, spec->content_length, spec->connection);
    return wbuf_result(&w);
}

/* A text/plain head, then the body pieces unless head_only. */
static int write_text_parts(char *buf, size_t size, uint16_t status, struct net_http_str a,
                            struct net_http_str b, enum net_http_conn conn, bool head_only)
{
    const struct net_http_hdr hdrs[] = {
        {"Content-Type", NET_HTTP_LIT("text/plain; charset=utf-8")},
        {"X-Content-Type-Options", NET_HTTP_LIT("nosniff")},
    };
    const struct net_http_resp_spec spec = {
        .status = status,
        .headers = hdrs,
        .headers_count = HD_ARRAY_SIZE(hdrs),
        .content_length = (int64_t)(a.len + b.len),
        .connection = conn,
    };
    struct wbuf w;
    int n;

    HD_ASSERT(a.ptr != NULL || a.len == 0);
    n = net_http_write_resp(buf, size, &spec);
    if (n < 0 || head_only) {
        return n;
    }
    wbuf_init(&w, buf, size);
    w.len = (size_t)n;
    put_str(&w, a);
    put_str(&w, b);
    return wbuf_result(&w);
}

int net_http_write_text(char *buf, size_t size, uint16_t status, struct net_http_str text,
                        enum net_http_conn conn, bool head_only)
{
    return write_text_parts(buf, size, status, text, NET_HTTP_LIT(""), conn, head_only);
}

int net_http_write_error(char *buf, size_t size, uint16_t status, bool head_only)
{
    return write_text_parts(buf, size, status, net_http_cstr(net_http_reason(status)),
                            NET_HTTP_LIT("\n"), NET_HTTP_CONN_CLOSE, head_only);
}

int net_http_write_derp_101(char *buf, size_t size,
                            const uint8_t server_key[NET_HTTP_DERP_KEY_SIZE])
{
    static const char hex[] = "0123456789abcdef";
    char key_hex[2 * NET_HTTP_DERP_KEY_SIZE];
    struct wbuf w;

    for (size_t i = 0; i < NET_HTTP_DERP_KEY_SIZE; i++) {
        key_hex[2 * i] = hex[server_key[i] >> 4];
        key_hex[2 * i + 1] = hex[server_key[i] & 0xf];
    }
    wbuf_init(&w, buf, size);
    /* derper's bytes exactly (spec §1.3); Derp-Version is derp.ProtocolVersion = 2. */
    put_cstr(&w, "HTTP/1.1 101 Switching Protocols\r\n"
                 "Upgrade: DERP\r\n"
                 "Connection: Upgrade\r\n"
                 "Derp-Version: 2\r\n"
                 "Derp-Public-Key: ");
    put(&w, key_hex, sizeof(key_hex));
    put(&w, "\r\n\r\n", 4);
    HD_ASSERT(w.overflow || w.len == NET_HTTP_DERP_101_LEN);
    return wbuf_result(&w);
}

/* ---- WebSocket (RFC 6455 section 4) ---- */

static bool is_base64_char(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' ||
           c == '/';
}

/* 16 bytes in base64: 22 alphabet characters and "==". Trailing bits are not checked, as Go's
 * (lenient) decoder in the reference does not check them either. */
static bool ws_key_valid(struct net_http_str key)
{
    if (key.ptr == NULL || key.len != NET_HTTP_WS_KEY_LEN || key.ptr[22] != '=' ||
        key.ptr[23] != '=') {
        return false;
    }
    for (size_t i = 0; i < 22; i++) {
        if (!is_base64_char((unsigned char)key.ptr[i])) {
            return false;
        }
    }
    return true;
}

int net_http_ws_accept(struct net_http_str key, char out[NET_HTTP_WS_ACCEPT_LEN + 1])
{
    static const char guid[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"; /* RFC 6455 section 1.3 */
    uint8_t input[NET_HTTP_WS_KEY_LEN + sizeof(guid) - 1];
    uint8_t digest[SHA_DIGEST_LENGTH];

    _Static_assert(4 * ((SHA_DIGEST_LENGTH + 2) / 3) == NET_HTTP_WS_ACCEPT_LEN, "accept length");
    if (!ws_key_valid(key)) {
        return -EINVAL;
    }
    memcpy(input, key.ptr, NET_HTTP_WS_KEY_LEN);
    memcpy(input + NET_HTTP_WS_KEY_LEN, guid, sizeof(guid) - 1);
    SHA1(input, sizeof(input), digest);
    size_t n = EVP_EncodeBlock((uint8_t *)out, digest, sizeof(digest)); /* writes a NUL too */
    HD_ASSERT(n == NET_HTTP_WS_ACCEPT_LEN);
    return 0;
}

/* The order of coder/websocket's verifyClientRequest, so answers match the reference. */
int net_http_ws_check(const struct net_http_req *req, uint16_t *status)
{
    const struct net_http_head *h = &req->head;
    *status = 0;
    if (h->version_minor < 1) {
        *status = 400;
    } else if (!(h->conn_flags & NET_HTTP_CONN_F_UPGRADE) ||
               !net_http_header_has_token(h, "Upgrade", "websocket")) {
        *status = 426;
    } else if (req->method != NET_HTTP_METHOD_GET) {
        *status = 405;
    } else if (!net_http_str_eq(net_http_header_get(h, "Sec-WebSocket-Version"), "13") ||
               net_http_header_count(h, "Sec-WebSocket-Key") != 1 ||
               !ws_key_valid(net_http_header_get(h, "Sec-WebSocket-Key"))) {
        *status = 400;
    }
    return *status != 0 ? -EPROTO : 0;
}

int net_http_write_ws_101(char *buf, size_t size, struct net_http_str key,
                          struct net_http_str protocol)
{
    char accept[NET_HTTP_WS_ACCEPT_LEN + 1];
    struct net_http_hdr hdrs[] = {
        {"Upgrade", NET_HTTP_LIT("websocket")},
        {"Connection", NET_HTTP_LIT("Upgrade")},
        {"Sec-WebSocket-Accept", {accept, NET_HTTP_WS_ACCEPT_LEN}},
        {"Sec-WebSocket-Protocol", protocol},
    };
    const struct net_http_resp_spec spec = {
        .status = 101,
        .headers = hdrs,
        .headers_count = protocol.ptr != NULL ? 4 : 3,
        .content_length = -1,
    };

    if (net_http_ws_accept(key, accept) != 0) {
        return -EINVAL;
    }
    return net_http_write_resp(buf, size, &spec);
}

/* ---- client requests ---- */

static bool target_valid(struct net_http_str t)
{
    if (t.ptr == NULL || t.len == 0 || t.len > NET_HTTP_TARGET_LEN_MAX) {
        return false;
    }
    for (size_t i = 0; i < t.len; i++) {
        unsigned char c = (unsigned char)t.ptr[i];
        if (c < 0x21 || c > 0x7e || c == '#') {
            return false;
        }
    }
    return true;
}

int net_http_write_req(char *buf, size_t size, const struct net_http_req_spec *spec)
{
    struct wbuf w;

    if (spec->method == NULL || !net_http_token_valid(net_http_cstr(spec->method)) ||
        !target_valid(spec->target) || (spec->host.ptr == NULL && spec->host.len != 0) ||
        !net_http_host_valid(spec->host) || !conn_valid(spec->connection) ||
        !hdrs_valid(spec->headers, spec->headers_count)) {
        return -EINVAL;
    }
    wbuf_init(&w, buf, size);
    put_cstr(&w, spec->method);
    put(&w, " ", 1);
    put_str(&w, spec->target);
    put_cstr(&w, " HTTP/1.1\r\n");
    put_field(&w, "Host", spec->host);
    put_fields(&w, spec->headers, spec->headers_count, spec->content_length, spec->connection);
    return wbuf_result(&w);
}
