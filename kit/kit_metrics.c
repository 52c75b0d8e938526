/* kit_metrics.c - the relay kit's metrics endpoint: a listener on one shard that answers
 * GET /metrics with a body the app formats from every shard's counters (gathered with
 * hd_collect), then closes. Everything runs on the listener's shard except the app's fill,
 * which hd_collect runs on each shard. A request's state comes from the endpoint's own slab;
 * it is freed when both the connection has closed and the collect it started has come back. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hd/kit.h>
#include <hd/net_http.h>

#define KIT_METRICS_TIMEOUT_MS 10000u /* a scraper that sends no complete request in 10 s */
#define KIT_METRICS_HEAD_MAX   512u   /* the answer's head (text/plain, Content-Length, close) */

struct kit_metrics {
    struct hd_shard *s;
    struct net_listener *listener;
    struct hd_slab *reqs;
    struct kit_metrics_options o;
    unsigned live; /* requests not freed yet */
    bool stopping;
    char body[KIT_METRICS_BODY_MAX];
};

struct kit_mreq {
    struct kit_metrics *m;
    struct net_conn *c; /* NULL once closed */
    struct net_http_req req;
    bool collecting, head_only;
};

static void mreq_put(struct kit_mreq *r)
{
    struct kit_metrics *m = r->m;
    hd_slab_put(m->reqs, r);
    if (--m->live == 0 && m->stopping) {
        hd_slab_destroy(m->reqs);
        free(m);
    }
}

static void answer(struct kit_mreq *r, uint16_t status, const char *body, size_t len)
{
    struct hd_frame *f = hd_frame_get(r->m->s, KIT_METRICS_HEAD_MAX + len);
    int n = -ENOBUFS;
    if (f) {
        struct net_http_str text = {body ? body : net_http_reason(status), body ? len : 0};
        if (body == NULL)
            text.len = strlen(text.ptr);
        n = net_http_write_text((char *)f->data, f->size, status, text, NET_HTTP_CONN_CLOSE,
                                r->head_only);
        if (n > 0)
            net_conn_send(r->c, f, 0, (uint32_t)n);
        hd_frame_unref(r->m->s, f);
    }
    net_conn_close(r->c, n > 0 ? 0 : n, true);
}

static void fill(struct hd_shard *s, void *slot, void *arg)
{
    struct kit_metrics *m = ((struct kit_mreq *)arg)->m;
    m->o.fill(s, slot, m->o.arg);
}

static void collected(struct hd_shard *s, void *slots, unsigned count, void *arg)
{
    (void)s;
    struct kit_mreq *r = arg;
    r->collecting = false;
    if (r->c) {
        struct kit_metrics *m = r->m;
        size_t len = m->o.format(slots, count, m->body, sizeof(m->body), m->o.arg);
        answer(r, 200, m->body, len < sizeof(m->body) ? len : sizeof(m->body));
    } else {
        mreq_put(r);
    }
}

static ssize_t on_data(struct net_conn *c, const uint8_t *data, size_t len)
{
    struct kit_mreq *r = net_conn_app(c);
    if (r->collecting || net_conn_state(c) != NET_CONN_OPEN)
        return (ssize_t)len; /* one request per connection: the rest is ignored */
    int rc = net_http_req_parse(&r->req, (const char *)data, len);
    if (rc == -EAGAIN)
        return 0; /* keep the bytes: the parser resumes over them with more */
    r->head_only = r->req.method == NET_HTTP_METHOD_HEAD;
    if (rc < 0) {
        answer(r, r->req.head.error_status, NULL, 0);
    } else if (r->req.method != NET_HTTP_METHOD_GET && !r->head_only) {
        answer(r, 405, NULL, 0);
    } else if (r->req.path.len != 8 || memcmp(r->req.path.ptr, "/metrics", 8) != 0) {
        answer(r, 404, NULL, 0);
    } else if (hd_collect(r->m->s, r->m->o.slot_size, fill, collected, r) == 0) {
        r->collecting = true;
    } else {
        answer(r, 503, NULL, 0); /* the bus is full or no memory: try the next scrape */
    }
    return (ssize_t)len;
}

static void on_close(struct net_conn *c, int reason)
{
    (void)reason;
    struct kit_mreq *r = net_conn_app(c);
    r->c = NULL;
    if (!r->collecting)
        mreq_put(r);
}

static const struct net_conn_handler kit_metrics_handler = {.on_data = on_data,
                                                            .on_close = on_close};

static void on_accept(struct net_listener *l, int fd, const struct net_addr *peer, void *arg)
{
    (void)l, (void)peer;
    struct kit_metrics *m = arg;
    struct kit_mreq *r = hd_slab_get(m->reqs);
    struct net_conn_options co = {.idle_timeout_ms = KIT_METRICS_TIMEOUT_MS,
                                  .write_timeout_ms = KIT_METRICS_TIMEOUT_MS};
    if (r == NULL) {
        close(fd); /* KIT_METRICS_CONNS_MAX requests in progress */
        return;
    }
    *r = (struct kit_mreq){.m = m};
    net_http_req_init(&r->req);
    if (net_conn_adopt(m->s, fd, &kit_metrics_handler, r, &co, &r->c) < 0) {
        hd_slab_put(m->reqs, r);
        close(fd);
        return;
    }
    m->live++;
}

int kit_metrics_start(struct hd_shard *s, const struct net_addr *addr,
                      const struct kit_metrics_options *o, struct kit_metrics **out)
{
    HD_ASSERT(o->fill && o->format && o->slot_size > 0);
    struct kit_metrics *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return -ENOMEM;
    m->s = s;
    m->o = *o;
    int rc =
        hd_slab_create(s, "kit_metrics", sizeof(struct kit_mreq), KIT_METRICS_CONNS_MAX, &m->reqs);
    struct net_listener_options lo = {.reuseport = true, .conns_max = KIT_METRICS_CONNS_MAX};
    if (rc == 0)
        rc = net_listener_start(s, addr, &lo, on_accept, m, &m->listener);
    if (rc < 0) {
        if (m->reqs)
            hd_slab_destroy(m->reqs);
        free(m);
        return rc;
    }
    *out = m;
    return 0;
}

void kit_metrics_stop(struct kit_metrics *m)
{
    net_listener_stop(m->listener);
    m->stopping = true;
    if (m->live == 0) {
        hd_slab_destroy(m->reqs);
        free(m);
    }
}
