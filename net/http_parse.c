/* http_parse.c - strict, bounded, incremental HTTP/1.1 head parser for requests and responses
 * (RFC 9110, RFC 9112). Runs on the shard that owns the connection; no allocation, no I/O.
 * It owns only the struct it fills: the caller's buffer is borrowed per call, and positions are
 * kept as offsets so the caller may move its buffer between calls.
 *
 * Shape: a byte-at-a-time state machine over the start line and field lines. Each byte is looked
 * at once, and every syntax decision depends only on the bytes before it, so feeding a head in
 * any number of pieces gives the same answer as feeding it whole. Semantic checks (framing, Host,
 * Connection) run once, when the empty line that ends the head has been seen. */
#include <hd/net_http.h>

#include <errno.h>
#include <string.h>

#include <hd/hd_base.h>

enum http_state {
    ST_INIT = 0,    /* not initialised: init sets the first state */
    ST_METHOD,      /* request: method token, up to SP */
    ST_TARGET,      /* request: request-target, up to SP */
    ST_VERSION,     /* request: HTTP-version, up to CR */
    ST_S_VERSION,   /* response: HTTP-version, up to SP */
    ST_S_CODE,      /* response: 3-digit status code, up to SP or CR */
    ST_S_REASON,    /* response: reason-phrase, up to CR */
    ST_LINE_LF,     /* LF after the start line's CR */
    ST_FIELD_START, /* first byte of a field line, or CR of the empty line */
    ST_NAME,        /* field-name, up to ':' */
    ST_VALUE_OWS,   /* whitespace before the field value */
    ST_VALUE,       /* field value, up to CR */
    ST_FIELD_LF,    /* LF after a field line's CR */
    ST_END_LF,      /* LF of the empty line that ends the head */
    ST_DONE,        /* head complete (semantic checks follow) */
    ST_FAILED,
};

/* ---- character classes (RFC 9110 section 5.6.2, 5.5) ---- */

static bool is_alnum(unsigned c)
{
    unsigned lower = c | 0x20u;
    return (lower >= 'a' && lower <= 'z') || (c >= '0' && c <= '9');
}

static bool is_tchar(unsigned c)
{
    return is_alnum(c) || (c != 0 && c < 0x80 && strchr("!#$%&'*+-.^_`|~", (int)c) != NULL);
}

/* field-vchar: VCHAR or obs-text (kept opaque, never interpreted). */
static bool is_field_vchar(unsigned c)
{
    return (c >= 0x21 && c <= 0x7e) || c >= 0x80;
}

static bool is_ws(unsigned c)
{
    return c == ' ' || c == '\t';
}

static bool is_digit(unsigned c)
{
    return c >= '0' && c <= '9';
}

static unsigned char lower_ascii(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') ? (unsigned char)(c | 0x20u) : c;
}

/* ---- failures ---- */

/* The errno each answer maps to (net_http.h lists them); everything else is a 400, -EPROTO. */
static int errno_of_status(uint16_t status)
{
    static const uint16_t statuses[] = {413, 414, 431, 501, 505};
    static const int errs[] = {EFBIG, ENAMETOOLONG, EMSGSIZE, EOPNOTSUPP, EPROTONOSUPPORT};
    _Static_assert(HD_ARRAY_SIZE(statuses) == HD_ARRAY_SIZE(errs), "one errno per status");
    for (size_t i = 0; i < HD_ARRAY_SIZE(statuses); i++) {
        if (statuses[i] == status) {
            return -errs[i];
        }
    }
    return -EPROTO;
}

static void head_fail(struct net_http_head *h, uint16_t status, const char *reason)
{
    h->state = ST_FAILED;
    h->error_status = status;
    h->error_reason = reason;
    h->result = errno_of_status(status);
}

/* ---- start lines ---- */

/* "HTTP/" DIGIT "." DIGIT; only 1.0 and 1.1 are ours (505 for other numbers, 400 otherwise). */
static void check_version(struct net_http_head *h, const unsigned char *v, size_t len)
{
    if (len != NET_HTTP_VERSION_LEN || memcmp(v, "HTTP/", 5) != 0 || !is_digit(v[5]) ||
        v[6] != '.' || !is_digit(v[7])) {
        head_fail(h, 400, "malformed HTTP-version");
        return;
    }
    if (v[5] != '1' || (v[7] != '0' && v[7] != '1')) {
        head_fail(h, 505, "HTTP version not supported");
        return;
    }
    h->version_minor = (uint8_t)(v[7] - '0');
}

static void st_method(struct net_http_head *h, const unsigned char *p)
{
    unsigned c = p[h->off];
    if (c == ' ') {
        if (h->off == 0) {
            head_fail(h, 400, "empty method");
            return;
        }
        h->sp1 = h->off;
        h->mark = (uint16_t)(h->off + 1);
        h->state = ST_TARGET;
    } else if (!is_tchar(c)) {
        head_fail(h, 400, "method is not a token");
    } else if (h->off >= NET_HTTP_METHOD_LEN_MAX) {
        head_fail(h, 501, "method too long");
    }
}

static void st_target(struct net_http_head *h, const unsigned char *p)
{
    unsigned c = p[h->off];
    if (c == ' ') {
        if (h->off == h->mark) {
            head_fail(h, 400, "empty request-target");
            return;
        }
        h->sp2 = h->off;
        h->mark = (uint16_t)(h->off + 1);
        h->state = ST_VERSION;
    } else if (c < 0x21 || c > 0x7e) {
        head_fail(h, 400, "invalid byte in request-target");
    } else if (c == '#') {
        head_fail(h, 400, "fragment in request-target");
    } else if (h->off - h->mark >= NET_HTTP_TARGET_LEN_MAX) {
        head_fail(h, 414, "request-target too long");
    }
}

static void st_version(struct net_http_head *h, const unsigned char *p)
{
    if (p[h->off] == '\r') {
        h->line_end = h->off;
        h->state = ST_LINE_LF;
        check_version(h, p + h->mark, (size_t)(h->off - h->mark));
    } else if (h->off - h->mark >= NET_HTTP_VERSION_LEN) {
        head_fail(h, 400, "malformed HTTP-version");
    }
}

static void st_s_version(struct net_http_head *h, const unsigned char *p)
{
    if (p[h->off] == ' ') {
        h->sp1 = h->off;
        h->mark = (uint16_t)(h->off + 1);
        h->state = ST_S_CODE;
        check_version(h, p, h->off);
    } else if (h->off >= NET_HTTP_VERSION_LEN) {
        head_fail(h, 400, "malformed HTTP-version");
    }
}

/* status-code = 3DIGIT; a missing reason-phrase (CR right after the code) is accepted, as
 * RFC 9112 section 4 tells clients to ignore the reason anyway. */
static void st_s_code(struct net_http_head *h, const unsigned char *p)
{
    unsigned c = p[h->off];
    size_t digits = (size_t)(h->off - h->mark);
    if (is_digit(c) && digits < 3) {
        return;
    }
    if ((c != ' ' && c != '\r') || digits != 3 || p[h->mark] < '1' || p[h->mark] > '5') {
        head_fail(h, 400, "malformed status-code");
        return;
    }
    if (c == ' ') {
        h->sp2 = h->off;
        h->state = ST_S_REASON;
    } else {
        h->line_end = h->off;
        h->state = ST_LINE_LF;
    }
}

static void st_s_reason(struct net_http_head *h, const unsigned char *p)
{
    unsigned c = p[h->off];
    if (c == '\r') {
        h->line_end = h->off;
        h->state = ST_LINE_LF;
    } else if (!is_ws(c) && !is_field_vchar(c)) {
        head_fail(h, 400, "control byte in reason-phrase");
    }
}

/* ---- field lines (RFC 9112 section 5) ---- */

/* LF after a CR: ends the start line, a field line, or (ST_END_LF) the head. Bare LF is refused
 * too: RFC 9112 section 2.2 only permits accepting it, and every client we serve sends CRLF. */
static void st_lf(struct net_http_head *h, const unsigned char *p)
{
    if (p[h->off] != '\n') {
        head_fail(h, 400, "CR not followed by LF");
    } else if (h->state == ST_END_LF) {
        h->size = (uint16_t)(h->off + 1);
        h->state = ST_DONE;
    } else {
        h->state = ST_FIELD_START;
    }
}

static void st_field_start(struct net_http_head *h, const unsigned char *p)
{
    unsigned c = p[h->off];
    if (c == '\r') {
        h->state = ST_END_LF;
    } else if (is_ws(c)) {
        /* RFC 9112 section 5.2: obs-fold is rejected; whitespace before the first field
         * (section 2.2) likewise. */
        head_fail(h, 400, h->fields_count == 0 ? "whitespace before first field" : "obs-fold");
    } else if (!is_tchar(c)) {
        head_fail(h, 400, "field-name is not a token");
    } else if (h->fields_count >= NET_HTTP_HEADERS_MAX) {
        head_fail(h, 431, "too many header fields");
    } else {
        h->mark = h->off;
        h->state = ST_NAME;
    }
}

static void st_name(struct net_http_head *h, const unsigned char *p)
{
    unsigned c = p[h->off];
    if (c == ':') {
        struct net_http_field *f = &h->fields[h->fields_count];
        f->name_off = h->mark;
        f->name_len = (uint16_t)(h->off - h->mark);
        h->state = ST_VALUE_OWS;
    } else if (is_ws(c)) {
        /* RFC 9112 section 5.1: MUST reject, it has been used for request smuggling. */
        head_fail(h, 400, "whitespace before colon");
    } else if (!is_tchar(c)) {
        head_fail(h, 400, "field-name is not a token");
    }
}

static void field_end(struct net_http_head *h, uint16_t value_off, uint16_t value_len)
{
    struct net_http_field *f = &h->fields[h->fields_count];
    f->value_off = value_off;
    f->value_len = value_len;
    h->fields_count++;
    h->state = ST_FIELD_LF;
}

static void st_value_ows(struct net_http_head *h, const unsigned char *p)
{
    unsigned c = p[h->off];
    if (is_ws(c)) {
        return;
    }
    if (c == '\r') {
        field_end(h, h->off, 0);
    } else if (!is_field_vchar(c)) {
        head_fail(h, 400, "control byte in field value");
    } else {
        h->mark = h->off;
        h->value_end = (uint16_t)(h->off + 1);
        h->state = ST_VALUE;
    }
}

static void st_value(struct net_http_head *h, const unsigned char *p)
{
    unsigned c = p[h->off];
    if (is_field_vchar(c)) {
        h->value_end = (uint16_t)(h->off + 1);
    } else if (c == '\r') {
        field_end(h, h->mark, (uint16_t)(h->value_end - h->mark));
    } else if (!is_ws(c)) {
        head_fail(h, 400, "control byte in field value");
    }
}

typedef void http_step_fn(struct net_http_head *h, const unsigned char *p);

static http_step_fn *const http_steps[ST_DONE] = {
    [ST_METHOD] = st_method,   [ST_TARGET] = st_target,
    [ST_VERSION] = st_version, [ST_S_VERSION] = st_s_version,
    [ST_S_CODE] = st_s_code,   [ST_S_REASON] = st_s_reason,
    [ST_LINE_LF] = st_lf,      [ST_FIELD_START] = st_field_start,
    [ST_NAME] = st_name,       [ST_VALUE_OWS] = st_value_ows,
    [ST_VALUE] = st_value,     [ST_FIELD_LF] = st_lf,
    [ST_END_LF] = st_lf,
};

/* Runs the state machine over the new bytes, never past NET_HTTP_HEAD_SIZE_MAX. Returns true when
 * the head is complete and its semantic checks should run; otherwise h->result is final (an
 * error) or 0 (need more). */
static bool head_scan(struct net_http_head *h, const char *buf, size_t len)
{
    const unsigned char *p = (const unsigned char *)buf;
    size_t end = len < NET_HTTP_HEAD_SIZE_MAX ? len : NET_HTTP_HEAD_SIZE_MAX;

    HD_ASSERT(h->state > ST_INIT && h->state < ST_DONE); /* init was called, not final yet */
    HD_ASSERT(len >= h->off);                            /* the caller's buffer did not shrink */
    h->base = buf;
    while (h->off < end && h->state < ST_DONE) {
        http_steps[h->state](h, p);
        h->off++;
    }
    if (h->state < ST_DONE && h->off == NET_HTTP_HEAD_SIZE_MAX) {
        head_fail(h, 431, "header section too large");
    }
    return h->state == ST_DONE;
}

/* ---- strings and lists ---- */

struct net_http_str net_http_cstr(const char *s)
{
    return (struct net_http_str){s, s != NULL ? strlen(s) : 0};
}

bool net_http_str_eq(struct net_http_str s, const char *lit)
{
    size_t n = strlen(lit);
    return s.ptr != NULL && s.len == n && memcmp(s.ptr, lit, n) == 0;
}

bool net_http_str_eq_nocase(struct net_http_str s, const char *lit)
{
    size_t n = strlen(lit);
    if (s.ptr == NULL || s.len != n) {
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        if (lower_ascii((unsigned char)s.ptr[i]) != lower_ascii((unsigned char)lit[i])) {
            return false;
        }
    }
    return true;
}

/* Next non-empty element of a comma-separated list (RFC 9110 section 5.6.1), OWS trimmed.
 * Returns false at the end of the list. */
static bool list_next(struct net_http_str *rest, struct net_http_str *elem)
{
    while (rest->len > 0) {
        const char *comma = memchr(rest->ptr, ',', rest->len);
        size_t n = comma != NULL ? (size_t)(comma - rest->ptr) : rest->len;
        const char *s = rest->ptr;
        rest->ptr += n;
        rest->len -= n;
        if (rest->len > 0) { /* step over the comma */
            rest->ptr++;
            rest->len--;
        }
        while (n > 0 && is_ws((unsigned char)s[0])) {
            s++;
            n--;
        }
        while (n > 0 && is_ws((unsigned char)s[n - 1])) {
            n--;
        }
        if (n > 0) {
            *elem = (struct net_http_str){s, n};
            return true;
        }
    }
    return false;
}

bool net_http_list_has_token(struct net_http_str list, const char *token)
{
    struct net_http_str elem;
    if (list.ptr == NULL) {
        return false;
    }
    while (list_next(&list, &elem)) {
        if (net_http_str_eq_nocase(elem, token)) {
            return true;
        }
    }
    return false;
}

bool net_http_token_valid(struct net_http_str s)
{
    for (size_t i = 0; i < s.len; i++) {
        if (!is_tchar((unsigned char)s.ptr[i])) {
            return false;
        }
    }
    return s.len > 0;
}

bool net_http_value_valid(struct net_http_str s)
{
    for (size_t i = 0; i < s.len; i++) {
        unsigned c = (unsigned char)s.ptr[i];
        if (!is_field_vchar(c) && !is_ws(c)) {
            return false;
        }
    }
    return true;
}

/* ---- header access ---- */

bool net_http_header_at(const struct net_http_head *head, size_t i, struct net_http_str *name,
                        struct net_http_str *value)
{
    if (i >= head->fields_count || head->base == NULL) {
        return false;
    }
    const struct net_http_field *f = &head->fields[i];
    *name = (struct net_http_str){head->base + f->name_off, f->name_len};
    *value = (struct net_http_str){head->base + f->value_off, f->value_len};
    return true;
}

struct net_http_str net_http_header_get(const struct net_http_head *head, const char *name)
{
    struct net_http_str n, v;
    for (size_t i = 0; net_http_header_at(head, i, &n, &v); i++) {
        if (net_http_str_eq_nocase(n, name)) {
            return v;
        }
    }
    return (struct net_http_str){NULL, 0};
}

size_t net_http_header_count(const struct net_http_head *head, const char *name)
{
    struct net_http_str n, v;
    size_t count = 0;
    for (size_t i = 0; net_http_header_at(head, i, &n, &v); i++) {
        count += net_http_str_eq_nocase(n, name);
    }
    return count;
}

bool net_http_header_has_token(const struct net_http_head *head, const char *name,
                               const char *token)
{
    struct net_http_str n, v;
    for (size_t i = 0; net_http_header_at(head, i, &n, &v); i++) {
        if (net_http_str_eq_nocase(n, name) && net_http_list_has_token(v, token)) {
            return true;
        }
    }
    return false;
}

/* ---- semantic checks shared by requests and responses ---- */

/* What the field lines say about framing and the connection, gathered in one pass. */
struct field_scan {
    uint16_t cl_count, te_count, host_count, upgrade_count;
    struct net_http_str te, host;
    bool cl_bad;      /* a Content-Length that is not 1*DIGIT */
    bool cl_differ;   /* two Content-Length lines that disagree */
    bool cl_overflow; /* a value beyond 2^64 - 1 */
    bool conn_bad;    /* a Connection element that is not a token */
    bool expect_continue;
    uint64_t cl;
};

/* RFC 9110 section 8.6: Content-Length = 1*DIGIT. No sign, no list ("5, 5"), no spaces inside. */
static void scan_content_length(struct field_scan *fs, struct net_http_str v)
{
    uint64_t n = 0;
    bool overflow = false;
    if (v.len == 0) {
        fs->cl_bad = true;
        return;
    }
    for (size_t i = 0; i < v.len; i++) {
        unsigned d = (unsigned char)v.ptr[i] - (unsigned)'0';
        if (d > 9) {
            fs->cl_bad = true;
            return;
        }
        if (n > (UINT64_MAX - d) / 10) {
            overflow = true;
        } else if (!overflow) {
            n = n * 10 + d;
        }
    }
    if (fs->cl_count > 0 && (n != fs->cl || overflow != fs->cl_overflow)) {
        fs->cl_differ = true;
    }
    fs->cl = n;
    fs->cl_overflow = fs->cl_overflow || overflow;
    fs->cl_count++;
}

static void scan_connection(struct net_http_head *h, struct field_scan *fs, struct net_http_str v)
{
    struct net_http_str elem;
    while (list_next(&v, &elem)) {
        if (!net_http_token_valid(elem)) {
            fs->conn_bad = true;
        } else if (net_http_str_eq_nocase(elem, "close")) {
            h->conn_flags |= NET_HTTP_CONN_F_CLOSE;
        } else if (net_http_str_eq_nocase(elem, "keep-alive")) {
            h->conn_flags |= NET_HTTP_CONN_F_KEEP_ALIVE;
        } else if (net_http_str_eq_nocase(elem, "upgrade")) {
            h->conn_flags |= NET_HTTP_CONN_F_UPGRADE;
        }
    }
}

static void scan_fields(struct net_http_head *h, struct field_scan *fs)
{
    struct net_http_str n, v;
    memset(fs, 0, sizeof(*fs));
    for (size_t i = 0; net_http_header_at(h, i, &n, &v); i++) {
        if (net_http_str_eq_nocase(n, "content-length")) {
            scan_content_length(fs, v);
        } else if (net_http_str_eq_nocase(n, "transfer-encoding")) {
            fs->te = v;
            fs->te_count++;
        } else if (net_http_str_eq_nocase(n, "connection")) {
            scan_connection(h, fs, v);
        } else if (net_http_str_eq_nocase(n, "host")) {
            fs->host = v;
            fs->host_count++;
        } else if (net_http_str_eq_nocase(n, "upgrade")) {
            fs->upgrade_count++;
        } else if (net_http_str_eq_nocase(n, "expect")) {
            fs->expect_continue = net_http_str_eq_nocase(v, "100-continue");
        }
    }
    h->has_content_length = fs->cl_count > 0 && !fs->cl_bad && !fs->cl_differ;
    h->content_length = fs->cl;
}

/* HTTP/1.1 persists unless "close"; HTTP/1.0 only with "keep-alive" (RFC 9112 section 9.3). */
static bool head_keep_alive(const struct net_http_head *h)
{
    if (h->conn_flags & NET_HTTP_CONN_F_CLOSE) {
        return false;
    }
    return h->version_minor >= 1 || (h->conn_flags & NET_HTTP_CONN_F_KEEP_ALIVE) != 0;
}

/* ---- requests ---- */

static const struct {
    const char *name;
    enum net_http_method method;
} http_methods[] = {
    {"GET", NET_HTTP_METHOD_GET},         {"HEAD", NET_HTTP_METHOD_HEAD},
    {"POST", NET_HTTP_METHOD_POST},       {"PUT", NET_HTTP_METHOD_PUT},
    {"DELETE", NET_HTTP_METHOD_DELETE},   {"OPTIONS", NET_HTTP_METHOD_OPTIONS},
    {"CONNECT", NET_HTTP_METHOD_CONNECT}, {"TRACE", NET_HTTP_METHOD_TRACE},
    {"PATCH", NET_HTTP_METHOD_PATCH},
};

/* Methods are case-sensitive (RFC 9110 section 9.1): "get" is an unknown method. */
static enum net_http_method method_of(struct net_http_str s)
{
    for (size_t i = 0; i < HD_ARRAY_SIZE(http_methods); i++) {
        if (net_http_str_eq(s, http_methods[i].name)) {
            return http_methods[i].method;
        }
    }
    return NET_HTTP_METHOD_OTHER;
}

bool net_http_host_valid(struct net_http_str v)
{
    for (size_t i = 0; i < v.len; i++) {
        unsigned c = (unsigned char)v.ptr[i];
        if (!is_alnum(c) && (c == 0 || strchr("-._~!$&'()*+,;=:[]%", (int)c) == NULL)) {
            return false;
        }
    }
    return true;
}

/* "path?query": query.ptr stays NULL without a '?'. */
static void split_path_query(struct net_http_req *req, struct net_http_str s)
{
    const char *q = memchr(s.ptr, '?', s.len);
    if (q == NULL) {
        req->path = s;
        return;
    }
    req->path = (struct net_http_str){s.ptr, (size_t)(q - s.ptr)};
    req->query = (struct net_http_str){q + 1, s.len - req->path.len - 1};
}

/* "http://" or "https://" (scheme is case-insensitive): its length, else 0. */
static size_t scheme_len(struct net_http_str t)
{
    static const char *const schemes[] = {"http://", "https://"};
    for (size_t i = 0; i < HD_ARRAY_SIZE(schemes); i++) {
        size_t n = strlen(schemes[i]);
        if (t.len > n && net_http_str_eq_nocase((struct net_http_str){t.ptr, n}, schemes[i])) {
            return n;
        }
    }
    return 0;
}

/* RFC 9112 section 3.2: the four forms of request-target. Returns false after failing. */
static bool split_target(struct net_http_req *req)
{
    struct net_http_str t = req->target;
    if (t.ptr[0] == '/') {
        req->target_form = NET_HTTP_TARGET_ORIGIN;
        split_path_query(req, t);
        return true;
    }
    if (req->method == NET_HTTP_METHOD_CONNECT) {
        req->target_form = NET_HTTP_TARGET_AUTHORITY;
        req->host = t;
        req->path = (struct net_http_str){t.ptr, 0};
        return true;
    }
    if (t.len == 1 && t.ptr[0] == '*' && req->method == NET_HTTP_METHOD_OPTIONS) {
        req->target_form = NET_HTTP_TARGET_ASTERISK;
        req->path = t;
        return true;
    }
    size_t skip = scheme_len(t);
    size_t auth_len = 0;
    while (skip > 0 && skip + auth_len < t.len && t.ptr[skip + auth_len] != '/' &&
           t.ptr[skip + auth_len] != '?') {
        auth_len++;
    }
    if (auth_len == 0) {
        head_fail(&req->head, 400, "invalid request-target form");
        return false;
    }
    req->target_form = NET_HTTP_TARGET_ABSOLUTE;
    req->host = (struct net_http_str){t.ptr + skip, auth_len};
    split_path_query(req, (struct net_http_str){t.ptr + skip + auth_len, t.len - skip - auth_len});
    return true;
}

/* Fixed order of checks so one head always gets one answer: syntax (400) first, then transfer
 * codings (501), then sizes (413). */
static void req_check_fields(struct net_http_req *req, const struct field_scan *fs)
{
    struct net_http_head *h = &req->head;
    if (fs->conn_bad) {
        head_fail(h, 400, "invalid Connection element");
    } else if (fs->cl_bad || fs->cl_differ) {
        head_fail(h, 400, fs->cl_bad ? "invalid Content-Length" : "conflicting Content-Length");
    } else if (fs->host_count > 1 || (fs->host_count == 0 && h->version_minor >= 1)) {
        /* RFC 9112 section 3.2: MUST answer 400 to a missing (HTTP/1.1) or repeated Host. */
        head_fail(h, 400, fs->host_count > 1 ? "repeated Host" : "missing Host");
    } else if (!net_http_host_valid(fs->host)) {
        head_fail(h, 400, "invalid Host");
    } else if (fs->te_count > 0 && h->version_minor == 0) {
        /* RFC 9112 section 6.1: Transfer-Encoding in HTTP/1.0 means faulty framing. */
        head_fail(h, 400, "Transfer-Encoding in HTTP/1.0");
    } else if (fs->te_count > 0) {
        /* Chunked request bodies are not implemented: no endpoint we serve reads a body. */
        head_fail(h, 501, "Transfer-Encoding not implemented");
    } else if (fs->cl_overflow || fs->cl > NET_HTTP_BODY_SIZE_MAX) {
        head_fail(h, 413, "request body too large");
    }
}

static void req_finish(struct net_http_req *req)
{
    struct net_http_head *h = &req->head;
    struct field_scan fs;

    req->method_str = (struct net_http_str){h->base, h->sp1};
    req->method = method_of(req->method_str);
    req->target = (struct net_http_str){h->base + h->sp1 + 1, (size_t)(h->sp2 - h->sp1 - 1)};
    if (!split_target(req)) {
        return;
    }
    scan_fields(h, &fs);
    req_check_fields(req, &fs);
    if (h->state == ST_FAILED) {
        return;
    }
    if (req->target_form != NET_HTTP_TARGET_ABSOLUTE &&
        req->target_form != NET_HTTP_TARGET_AUTHORITY) {
        req->host = fs.host;
    }
    req->body_size = fs.cl;
    req->keep_alive = head_keep_alive(h);
    req->upgrade = (h->conn_flags & NET_HTTP_CONN_F_UPGRADE) != 0 && fs.upgrade_count > 0;
    req->expect_continue = fs.expect_continue;
    h->result = h->size;
}

void net_http_req_init(struct net_http_req *req)
{
    memset(req, 0, sizeof(*req));
    req->head.state = ST_METHOD;
}

int net_http_req_parse(struct net_http_req *req, const char *buf, size_t len)
{
    HD_ASSERT(buf != NULL || len == 0);
    if (req->head.result != 0) {
        return req->head.result;
    }
    if (head_scan(&req->head, buf, len)) {
        req_finish(req);
    }
    return req->head.result != 0 ? req->head.result : -EAGAIN;
}

/* ---- responses ---- */

static void resp_check_fields(struct net_http_resp *resp, const struct field_scan *fs)
{
    struct net_http_head *h = &resp->head;
    if (fs->conn_bad) {
        head_fail(h, 400, "invalid Connection element");
    } else if (fs->cl_bad || fs->cl_differ) {
        head_fail(h, 400, fs->cl_bad ? "invalid Content-Length" : "conflicting Content-Length");
    } else if (fs->te_count > 0 && (fs->cl_count > 0 || h->version_minor == 0)) {
        /* RFC 9112 section 6.2: a sender MUST NOT send both; TE does not exist in 1.0. */
        head_fail(h, 400, "Transfer-Encoding with Content-Length or in HTTP/1.0");
    } else if (fs->te_count > 1 ||
               (fs->te_count == 1 && !net_http_str_eq_nocase(fs->te, "chunked"))) {
        head_fail(h, 501, "transfer coding not implemented");
    } else if (fs->cl_overflow) {
        head_fail(h, 413, "Content-Length too large");
    }
}

static enum net_http_body resp_body(const struct net_http_resp *resp, const struct field_scan *fs)
{
    uint16_t s = resp->status;
    if (s < 200 || s == 204 || s == 304 || resp->head_request) {
        return NET_HTTP_BODY_NONE;
    }
    if (fs->te_count > 0) {
        return NET_HTTP_BODY_CHUNKED;
    }
    return fs->cl_count > 0 ? NET_HTTP_BODY_LENGTH : NET_HTTP_BODY_UNTIL_CLOSE;
}

static void resp_finish(struct net_http_resp *resp)
{
    struct net_http_head *h = &resp->head;
    const char *code = h->base + h->sp1 + 1;
    struct field_scan fs;

    resp->status = (uint16_t)((code[0] - '0') * 100 + (code[1] - '0') * 10 + (code[2] - '0'));
    if (h->sp2 != 0) {
        resp->reason =
            (struct net_http_str){h->base + h->sp2 + 1, (size_t)(h->line_end - h->sp2 - 1)};
    } else {
        resp->reason = (struct net_http_str){h->base + h->line_end, 0};
    }
    scan_fields(h, &fs);
    resp_check_fields(resp, &fs);
    if (h->state == ST_FAILED) {
        return;
    }
    resp->body = resp_body(resp, &fs);
    resp->keep_alive =
        head_keep_alive(h) && resp->body != NET_HTTP_BODY_UNTIL_CLOSE && resp->status != 101;
    h->result = h->size;
}

void net_http_resp_init(struct net_http_resp *resp, bool head_request)
{
    memset(resp, 0, sizeof(*resp));
    resp->head.state = ST_S_VERSION;
    resp->head_request = head_request;
}

int net_http_resp_parse(struct net_http_resp *resp, const char *buf, size_t len)
{
    HD_ASSERT(buf != NULL || len == 0);
    if (resp->head.result != 0) {
        return resp->head.result;
    }
    if (head_scan(&resp->head, buf, len)) {
        resp_finish(resp);
    }
    return resp->head.result != 0 ? resp->head.result : -EAGAIN;
}
