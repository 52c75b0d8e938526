/* fuzz_http_parse.c - libFuzzer target for the HTTP/1.1 request and response head parsers.
 * Input: one mode byte (bit 0: response, bit 1: response to HEAD, bits 2-7: where to split the
 * rest), then the bytes a peer sent. Beyond "no crash, no sanitizer report" it checks what the
 * parser promises: every string lies inside the head, consumed <= length, the head ends with
 * CRLFCRLF, a split feed (into a moved buffer) gives the same result as a whole one, the read-ahead
 * does not change the head's meaning, and a parsed head's fields survive the writer. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hd/net_http.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Fuzz invariants abort (libFuzzer reports the input); they are not HD_ASSERTs of the library. */
#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond);           \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

union msg {
    struct net_http_req req;
    struct net_http_resp resp;
};

static int msg_parse(bool is_req, union msg *m, bool head_req, const char *buf, size_t len,
                     bool init)
{
    if (init && is_req) {
        net_http_req_init(&m->req);
    } else if (init) {
        net_http_resp_init(&m->resp, head_req);
    }
    return is_req ? net_http_req_parse(&m->req, buf, len) : net_http_resp_parse(&m->resp, buf, len);
}

static bool is_ws(char c)
{
    return c == ' ' || c == '\t';
}

static void check_str(const char *base, size_t head, struct net_http_str s)
{
    if (s.ptr == NULL) {
        CHECK(s.len == 0);
        return;
    }
    CHECK(s.ptr >= base && s.ptr <= base + head);
    CHECK(s.len <= head - (size_t)(s.ptr - base));
}

static void check_error(const struct net_http_head *h, int rc)
{
    static const int errs[] = {-EPROTO,   -EFBIG,      -ENAMETOOLONG,
                               -EMSGSIZE, -EOPNOTSUPP, -EPROTONOSUPPORT};
    static const uint16_t statuses[] = {400, 413, 414, 431, 501, 505};
    bool known = false;
    for (size_t i = 0; i < sizeof(errs) / sizeof(errs[0]); i++) {
        known = known || (rc == errs[i] && h->error_status == statuses[i]);
    }
    CHECK(known);
    CHECK(h->error_reason != NULL);
}

static void check_head(const struct net_http_head *h, const char *buf, size_t len, int rc)
{
    size_t head = (size_t)rc;
    CHECK(head <= len && head <= NET_HTTP_HEAD_SIZE_MAX && head == h->size);
    CHECK(head >= 4 && memcmp(buf + head - 4, "\r\n\r\n", 4) == 0);
    CHECK(h->base == buf);
    CHECK(h->version_minor <= 1);
    CHECK(h->fields_count <= NET_HTTP_HEADERS_MAX);
    for (size_t i = 0; i < h->fields_count; i++) {
        struct net_http_str n, v;
        CHECK(net_http_header_at(h, i, &n, &v));
        check_str(buf, head, n);
        check_str(buf, head, v);
        CHECK(net_http_token_valid(n));
        CHECK(net_http_value_valid(v));
        CHECK(v.len == 0 || (!is_ws(v.ptr[0]) && !is_ws(v.ptr[v.len - 1]))); /* OWS trimmed */
    }
}

static void check_req(const struct net_http_req *r, const char *buf, size_t head)
{
    const struct net_http_str strs[] = {r->method_str, r->target, r->path, r->query, r->host};
    for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++) {
        check_str(buf, head, strs[i]);
    }
    CHECK(r->method_str.ptr == buf && net_http_token_valid(r->method_str));
    CHECK(r->method_str.len <= NET_HTTP_METHOD_LEN_MAX);
    CHECK(r->target.len > 0 && r->target.len <= NET_HTTP_TARGET_LEN_MAX);
    CHECK(r->path.ptr >= r->target.ptr &&
          r->path.ptr + r->path.len <= r->target.ptr + r->target.len);
    CHECK(r->body_size <= NET_HTTP_BODY_SIZE_MAX);
    CHECK(!r->keep_alive || !(r->head.conn_flags & NET_HTTP_CONN_F_CLOSE));
    bool ka10 = (r->head.conn_flags & (NET_HTTP_CONN_F_KEEP_ALIVE | NET_HTTP_CONN_F_CLOSE)) ==
                NET_HTTP_CONN_F_KEEP_ALIVE;
    CHECK(r->keep_alive ==
          (r->head.version_minor == 1 ? !(r->head.conn_flags & NET_HTTP_CONN_F_CLOSE) : ka10));
}

static void check_resp(const struct net_http_resp *r, const char *buf, size_t head)
{
    check_str(buf, head, r->reason);
    CHECK(r->status >= 100 && r->status <= 599);
    CHECK(!r->keep_alive || r->body != NET_HTTP_BODY_UNTIL_CLOSE);
    CHECK(!r->head_request || r->body == NET_HTTP_BODY_NONE);
}

/* Position-independent summary of a parse, to compare runs over different buffers. */
static void summarize(bool is_req, const union msg *m, int rc, char *out, size_t size)
{
    const struct net_http_head *h = &m->req.head;
    int n = snprintf(out, size, "%d %u", rc, h->error_status);
    if (rc <= 0) {
        return;
    }
    n += snprintf(out + n, size - (size_t)n, " %u %u %u", h->fields_count, h->conn_flags,
                  h->version_minor);
    if (is_req) {
        const struct net_http_req *r = &m->req;
        snprintf(out + n, size - (size_t)n, " %d %d %d %d %d %llu %td %zu %td %zu %td", r->method,
                 r->target_form, r->keep_alive, r->upgrade, r->expect_continue,
                 (unsigned long long)r->body_size, r->path.ptr - h->base, r->path.len,
                 r->query.ptr ? r->query.ptr - h->base : -1, r->host.len,
                 r->host.ptr ? r->host.ptr - h->base : -1);
    } else {
        const struct net_http_resp *r = &m->resp;
        snprintf(out + n, size - (size_t)n, " %u %d %d %llu %zu", r->status, r->body, r->keep_alive,
                 (unsigned long long)h->content_length, r->reason.len);
    }
}

/* Every successfully parsed field must be writable, and the written head must parse back to the
 * same fields (when it still fits the head limit: "name:v" grows to "name: v"). */
static void check_round_trip(const struct net_http_head *h)
{
    static struct net_http_hdr hdrs[NET_HTTP_HEADERS_MAX];
    static char out[2 * NET_HTTP_HEAD_SIZE_MAX];
    static char names[NET_HTTP_HEADERS_MAX][NET_HTTP_HEAD_SIZE_MAX];
    struct net_http_resp back;

    for (size_t i = 0; i < h->fields_count; i++) {
        struct net_http_str n, v;
        CHECK(net_http_header_at(h, i, &n, &v));
        memcpy(names[i], n.ptr, n.len);
        names[i][n.len] = '\0';
        hdrs[i] = (struct net_http_hdr){names[i], v};
    }
    const struct net_http_resp_spec spec = {
        200, NULL, hdrs, h->fields_count, -1, NET_HTTP_CONN_OMIT};
    int n = net_http_write_resp(out, sizeof(out), &spec);
    CHECK(n > 0);
    if ((size_t)n > NET_HTTP_HEAD_SIZE_MAX) {
        return;
    }
    net_http_resp_init(&back, false);
    int rc = net_http_resp_parse(&back, out, (size_t)n);
    CHECK(rc == n);
    CHECK(back.head.fields_count == h->fields_count);
    for (size_t i = 0; i < h->fields_count; i++) {
        struct net_http_str n1, v1, n2, v2;
        CHECK(net_http_header_at(h, i, &n1, &v1) && net_http_header_at(&back.head, i, &n2, &v2));
        CHECK(n1.len == n2.len && memcmp(n1.ptr, n2.ptr, n1.len) == 0);
        CHECK(v1.len == v2.len && (v1.len == 0 || memcmp(v1.ptr, v2.ptr, v1.len) == 0));
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static union msg m, m2;
    char sum1[256], sum2[256];

    if (size < 1) {
        return 0;
    }
    bool is_req = !(data[0] & 1), head_req = (data[0] & 2) != 0;
    size_t len = size - 1, split = (size_t)(data[0] >> 2) * len / 63;
    char *buf = malloc(len + 1), *part = malloc(split + 1), *moved = malloc(len + 1);
    CHECK(buf != NULL && part != NULL && moved != NULL);
    memcpy(buf, data + 1, len); /* exact copies: ASan flags any read past len */
    memcpy(part, buf, split);
    memcpy(moved, buf, len);

    int rc = msg_parse(is_req, &m, head_req, buf, len, true);
    if (rc > 0) {
        check_head(&m.req.head, buf, len, rc);
        if (is_req) {
            check_req(&m.req, buf, (size_t)rc);
        } else {
            check_resp(&m.resp, buf, (size_t)rc);
        }
        check_round_trip(&m.req.head);
    } else if (rc != -EAGAIN) {
        check_error(&m.req.head, rc);
    } else {
        CHECK(len < NET_HTTP_HEAD_SIZE_MAX);
    }
    summarize(is_req, &m, rc, sum1, sizeof(sum1));

    int rc1 = msg_parse(is_req, &m2, head_req, part, split, true);
    CHECK(rc1 == -EAGAIN || rc1 == rc);
    int rc2 = msg_parse(is_req, &m2, head_req, moved, len, false);
    CHECK(rc2 == rc);
    summarize(is_req, &m2, rc2, sum2, sizeof(sum2));
    CHECK(strcmp(sum1, sum2) == 0);

    if (rc > 0) { /* the head alone, without read-ahead, means the same */
        int rc3 = msg_parse(is_req, &m2, head_req, moved, (size_t)rc, true);
        summarize(is_req, &m2, rc3, sum2, sizeof(sum2));
        CHECK(strcmp(sum1, sum2) == 0);
    }
    free(moved);
    free(part);
    free(buf);
    return 0;
}
