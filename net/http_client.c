/* http_client.c - one HTTP/1.1 request on an outgoing connection (TCP or unix socket:
 * net_addr_unix): writes the request with net_http_write_req, parses the response head with
 * net_http_resp_parse, reads the body by Content-Length, chunked coding (net_http_chunked_decode:
 * chunk data is copied as it arrives, so a chunk may be larger than the connection's reassembly
 * tail) or until close, bounded by resp_max (the first resp_max bytes are kept, then -EFBIG), all
 * within timeout_ms (else the whole request fails with -ETIMEDOUT). Once the head arrived, done
 * gets it and the body read so far whatever ends the request. net does not know TLS: the
 * on_connect hook lets the app install a codec (tls_conn_start) before the request is queued.
 * Addresses are numeric; name lookups are the caller's (resolve.c). net_http_client_cancel
 * abandons a request whose requester went away (its done is then never called). Runs on the
 * shard that started it; owns its heap state (control path only, never the data path) until
 * done. */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <hd/net.h>
#include <hd/net_http.h>
#include <hd/net_http_client.h>

struct net_http_client {
    struct hd_shard *s;
    struct net_conn *conn;
    struct hd_timer timer;
    net_http_done_fn *done; /* NULL once answered or cancelled */
    void *arg;
    net_http_connect_fn *on_connect;
    void *on_connect_arg;
    struct net_http_resp resp;
    struct net_http_chunked chunked; /* the body's decoder, when it is chunked */
    size_t resp_max;
    size_t head_len; /* 0 until the head is parsed */
    bool answered;   /* the head was parsed, or refused after a valid status line */
    size_t body_len; /* decoded body bytes in body[] */
    char *req;       /* the request bytes, until connected */
    size_t req_len;
    uint8_t *body; /* resp_max bytes */
};

static void finish(struct net_http_client *h, int err)
{
    net_http_done_fn *done = h->done;
    h->done = NULL;
    if (done == NULL)
        return;
    struct net_http_result r = {.status = h->resp.status, .body = h->body, .body_len = h->body_len};
    done(h->arg, err, h->answered ? &r : NULL); /* the answer arrived, maybe partial */
}

static ssize_t body_data(struct net_http_client *h, const uint8_t *d, size_t len)
{
    bool complete = false;
    ssize_t used;
    if (h->resp.body == NET_HTTP_BODY_CHUNKED) {
        used = net_http_chunked_decode(&h->chunked, d, len, h->body, h->resp_max, &h->body_len);
        if (used < 0)
            return used;
        complete = net_http_chunked_done(&h->chunked);
    } else {
        size_t want = h->resp.body == NET_HTTP_BODY_LENGTH
                          ? (size_t)h->resp.head.content_length - h->body_len
                          : len;
        size_t n = len < want ? len : want, room = h->resp_max - h->body_len;
        memcpy(h->body + h->body_len, d, n < room ? n : room);
        if (n > room) { /* the first resp_max bytes are kept for done */
            h->body_len = h->resp_max;
            return -EFBIG;
        }
        h->body_len += n;
        used = (ssize_t)n;
        complete = h->resp.body == NET_HTTP_BODY_NONE ||
                   (h->resp.body == NET_HTTP_BODY_LENGTH &&
                    h->body_len == (size_t)h->resp.head.content_length);
    }
    if (complete) {
        finish(h, 0);
        net_conn_close(h->conn, 0, false);
    }
    return used;
}

/* The status of a head that begins "HTTP/d.d ddd" followed by SP or CR, else 0: a head the parser
 * refused after it is still a response (a peer that is not HTTP at all is not). */
static uint16_t status_line(const uint8_t *d, size_t len)
{
    if (len < 13 || memcmp(d, "HTTP/", 5) != 0 || !isdigit(d[5]) || d[6] != '.' || !isdigit(d[7]) ||
        d[8] != ' ' || (d[12] != ' ' && d[12] != '\r'))
        return 0;
    unsigned v = 0;
    for (int i = 9; i < 12; i++) {
        if (!isdigit(d[i]))
            return 0;
        v = v * 10 + (unsigned)(d[i] - '0');
    }
    return v >= 100 ? (uint16_t)v : 0;
}

static ssize_t conn_data(struct net_conn *c, const uint8_t *data, size_t len)
{
    struct net_http_client *h = net_conn_app(c);
    if (h->done == NULL)
        return (ssize_t)len;
    if (h->head_len == 0) {
        int rc = net_http_resp_parse(&h->resp, (const char *)data, len);
        if (rc == -EAGAIN)
            return 0; /* the head stays in the connection's buffer until complete */
        if (rc < 0) {
            h->resp.status = status_line(data, len);
            h->answered = h->resp.status != 0;
            return rc;
        }
        if (h->resp.status < 200 && h->resp.status != 101) { /* the final response follows */
            net_http_resp_init(&h->resp, h->resp.head_request);
            return rc;
        }
        h->head_len = (size_t)rc;
        h->answered = true;
        net_http_chunked_init(&h->chunked);
        ssize_t b = body_data(h, data + rc, len - (size_t)rc);
        return b < 0 ? b : rc + b;
    }
    return body_data(h, data, len);
}

static void conn_eof(struct net_conn *c)
{
    struct net_http_client *h = net_conn_app(c);
    if (h->head_len && h->resp.body == NET_HTTP_BODY_UNTIL_CLOSE)
        finish(h, 0);
    net_conn_close(c, -ECONNRESET, false);
}

static void conn_connected(struct net_conn *c, int res)
{
    struct net_http_client *h = net_conn_app(c);
    if (res < 0)
        return; /* on_close follows */
    int rc = h->on_connect ? h->on_connect(c, h->on_connect_arg) : 0;
    if (rc == 0)
        rc = net_conn_send_copy(c, h->req, h->req_len);
    free(h->req);
    h->req = NULL;
    if (rc < 0)
        net_conn_close(c, rc, false);
}

static void conn_closed(struct net_conn *c, int reason)
{
    struct net_http_client *h = net_conn_app(c);
    hd_timer_stop(h->s, &h->timer);
    finish(h, reason < 0 ? reason : -ECONNRESET);
    free(h->req);
    free(h->body);
    free(h);
}

static const struct net_conn_handler http_client_handler = {
    .on_data = conn_data,
    .on_eof = conn_eof,
    .on_connected = conn_connected,
    .on_close = conn_closed,
};

static void timer_fired(struct hd_timer *t)
{
    struct net_http_client *h = hd_container_of(t, struct net_http_client, timer);
    net_conn_close(h->conn, -ETIMEDOUT, false);
}

static int build_request(struct net_http_client *h, const struct net_http_request *rq)
{
    size_t cap = NET_HTTP_HEAD_SIZE_MAX + rq->body_len;
    h->req = malloc(cap);
    if (h->req == NULL)
        return -ENOMEM;
    struct net_http_req_spec spec = {.method = rq->method,
                                     .target = rq->target,
                                     .host = rq->host,
                                     .headers = rq->headers,
                                     .headers_count = rq->headers_count,
                                     .content_length = rq->body ? (int64_t)rq->body_len : -1,
                                     .connection = NET_HTTP_CONN_CLOSE};
    int n = net_http_write_req(h->req, cap - rq->body_len, &spec);
    if (n < 0)
        return n;
    if (rq->body_len)
        memcpy(h->req + n, rq->body, rq->body_len);
    h->req_len = (size_t)n + rq->body_len;
    return 0;
}

int net_http_client_start(struct hd_shard *s, const struct net_addr *addr,
                          const struct net_http_request *rq, net_http_done_fn *done, void *arg,
                          struct net_http_client **out)
{
    if (rq->resp_max == 0 || rq->timeout_ms == 0 || done == NULL)
        return -EINVAL;
    struct net_http_client *h = calloc(1, sizeof(*h));
    if (h == NULL)
        return -ENOMEM;
    h->s = s;
    h->done = done;
    h->arg = arg;
    h->on_connect = rq->on_connect;
    h->on_connect_arg = rq->on_connect_arg;
    h->resp_max = rq->resp_max;
    h->body = malloc(rq->resp_max);
    net_http_resp_init(&h->resp, strcmp(rq->method, "HEAD") == 0);
    int rc = h->body ? build_request(h, rq) : -ENOMEM;
    if (rc == 0) {
        rc = net_conn_connect(s, addr, rq->timeout_ms, &http_client_handler, h, NULL, &h->conn);
    }
    if (rc < 0) {
        free(h->req);
        free(h->body);
        free(h);
        return rc;
    }
    hd_timer_init(&h->timer, timer_fired);
    hd_timer_start(s, &h->timer, rq->timeout_ms);
    if (out)
        *out = h;
    return 0;
}

void net_http_client_cancel(struct net_http_client *h)
{
    h->done = NULL;
    net_conn_close(h->conn, 0, false);
}
