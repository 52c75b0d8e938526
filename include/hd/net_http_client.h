/* net_http_client.h - one HTTP/1.1 request per connection, from a shard (control path: it
 * allocates). The response head is parsed by net_http_resp_parse; the body is read by
 * Content-Length, chunked coding or until close; beyond resp_max the first resp_max bytes are kept
 * and the request ends with -EFBIG (a chunked body: the chunks that fit whole). TLS: net does
 * not know it; on_connect lets the app install a codec (tls_conn_start) before the request is
 * queued. Name lookups are the caller's (addr is numeric or a unix socket path). */
#ifndef NET_HTTP_CLIENT_H
#define NET_HTTP_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include <hd/net.h>
#include <hd/net_http.h>

struct net_http_client;

struct net_http_result {
    uint16_t status;
    const uint8_t *body; /* decoded body, valid during the done call */
    size_t body_len;
};

/* err 0 and r set: a complete response. err -errno and r NULL: no response arrived
 * (-ETIMEDOUT, -ECONNREFUSED, -EPROTO a failed codec or bytes that are not HTTP, ...). err -errno
 * and r set: a response arrived but is incomplete; r has its status and the body read so far:
 * the head was refused after a valid status line ("HTTP/d.d ddd": -EPROTO, -EMSGSIZE over
 * NET_HTTP_HEAD_SIZE_MAX, ...; no body), or the body is over resp_max (-EFBIG), timed out
 * (-ETIMEDOUT), ended early (-ECONNRESET) or has bad chunked coding (-EPROTO). Called exactly
 * once unless cancelled; the client is gone after it returns. */
typedef void net_http_done_fn(void *arg, int err, const struct net_http_result *r);
/* The connection is up; install a codec on c if needed. Return 0 or -errno (fails the request). */
typedef int net_http_connect_fn(struct net_conn *c, void *arg);

struct net_http_request {
    const char *method;         /* "GET", "POST" */
    struct net_http_str target; /* origin-form */
    struct net_http_str host;   /* Host field value */
    const struct net_http_hdr *headers;
    size_t headers_count;
    const void *body; /* NULL: no body and no Content-Length */
    size_t body_len;
    uint32_t timeout_ms;             /* whole request: connect to last body byte; > 0 */
    size_t resp_max;                 /* decoded body bytes kept at most; > 0 */
    net_http_connect_fn *on_connect; /* optional */
    void *on_connect_arg;
};

/* Starts the request on shard s. Returns 0 (done follows) or -errno (nothing started). */
int net_http_client_start(struct hd_shard *s, const struct net_addr *addr,
                          const struct net_http_request *rq, net_http_done_fn *done, void *arg,
                          struct net_http_client **out);
/* Abandons a started request: done is not called. Only before done ran. */
void net_http_client_cancel(struct net_http_client *h);

#endif /* NET_HTTP_CLIENT_H */
