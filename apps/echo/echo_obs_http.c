/* echo_obs_http.c - hderp-echo observe's HTTP endpoint (--metrics-listen): GET /metrics
 * (Prometheus text: per path a round-trip histogram with labels region/from/to/path, counters
 * and gauges; per node the STUN round trip), /status.json (per path the last minute's and last
 * hour's percentiles and loss) and / (a page: one row per path with an inline SVG chart of the
 * hour's per-minute p50/p99; no external assets). One request per connection. Runs on the shard;
 * the writers also run on the main thread for --once. */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "echo_obs.h"
#include <hd/net_http.h>

void echo_obs_buf_printf(struct echo_obs_buf *b, const char *fmt, ...)
{
    for (int tries = 0; tries < 2 && !b->failed; tries++) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = b->cap - b->len;
        int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? room : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->failed = true;
            return;
        }
        if (b->p && (size_t)n < room) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap : 16384;
        while (cap - b->len <= (size_t)n)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (p == NULL) {
            b->failed = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
}

/* ---------------------------------------------------------------- /metrics */

/* Prometheus bucket bounds in seconds: 10 us to 10 s. A bound counts every fine bucket of the
 * histogram whose upper edge is at or below it (the fine buckets are ~6 % wide). */
static const double le_s[] = {1e-5,   2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2,
                              2.5e-2, 5e-2,   0.1,  0.25, 0.5,    1,    2.5,  5,      10};

static void put_hist(struct echo_obs_buf *b, const char *name, const char *labels,
                     const struct hd_hist *h)
{
    unsigned bucket = 0;
    uint64_t cum = 0;
    for (size_t i = 0; i < sizeof(le_s) / sizeof(le_s[0]); i++) {
        uint64_t le_ns = (uint64_t)(le_s[i] * 1e9);
        while (bucket < HD_HIST_BUCKETS && hd_hist_bucket_upper(bucket) <= le_ns)
            cum += h->buckets[bucket++];
        echo_obs_buf_printf(b, "%s_bucket{%s,le=\"%g\"} %llu\n", name, labels, le_s[i],
                            (unsigned long long)cum);
    }
    echo_obs_buf_printf(b, "%s_bucket{%s,le=\"+Inf\"} %llu\n", name, labels,
                        (unsigned long long)h->count);
    echo_obs_buf_printf(b, "%s_sum{%s} %.9f\n%s_count{%s} %llu\n", name, labels,
                        (double)h->sum / 1e9, name, labels, (unsigned long long)h->count);
}

static void path_labels(const struct echo_obs_path *p, char *out, size_t size)
{
    snprintf(out, size, "region=\"%s\",from=\"%s\",to=\"%s\",path=\"%s\"", p->from->region,
             p->from->name, p->to->name, p->kind);
}

void echo_obs_write_metrics(struct echo_obs *ob, uint64_t now_ms, struct echo_obs_buf *b)
{
    (void)now_ms;
    char l[512];
    echo_obs_buf_printf(b, "# HELP hderp_observe_rtt_seconds DERP round trip of a probe "
                           "(pinger on from, echo on to)\n# TYPE hderp_observe_rtt_seconds "
                           "histogram\n");
    for (unsigned i = 0; i < ob->paths_count; i++) {
        path_labels(&ob->paths[i], l, sizeof(l));
        put_hist(b, "hderp_observe_rtt_seconds", l, &ob->paths[i].total_ns);
    }
    static const struct {
        const char *name, *type;
        size_t off;
    } ctr[] = {
        {"hderp_observe_sent_total", "counter", offsetof(struct echo_obs_path, sent)},
        {"hderp_observe_received_total", "counter", offsetof(struct echo_obs_path, received)},
        {"hderp_observe_lost_total", "counter", offsetof(struct echo_obs_path, lost)},
        {"hderp_observe_late_total", "counter", offsetof(struct echo_obs_path, late)},
        {"hderp_observe_reordered_total", "counter", offsetof(struct echo_obs_path, reordered)},
        {"hderp_observe_duplicated_total", "counter", offsetof(struct echo_obs_path, duplicated)},
    };
    for (size_t c = 0; c < sizeof(ctr) / sizeof(ctr[0]); c++) {
        echo_obs_buf_printf(b, "# TYPE %s %s\n", ctr[c].name, ctr[c].type);
        for (unsigned i = 0; i < ob->paths_count; i++) {
            path_labels(&ob->paths[i], l, sizeof(l));
            uint64_t v = *(const uint64_t *)((const char *)&ob->paths[i] + ctr[c].off);
            echo_obs_buf_printf(b, "%s{%s} %llu\n", ctr[c].name, l, (unsigned long long)v);
        }
    }
    echo_obs_buf_printf(b, "# TYPE hderp_observe_up gauge\n");
    for (unsigned i = 0; i < ob->paths_count; i++) {
        path_labels(&ob->paths[i], l, sizeof(l));
        echo_obs_buf_printf(b, "hderp_observe_up{%s} %d\n", l, ob->paths[i].up);
    }
    echo_obs_buf_printf(b, "# TYPE hderp_observe_reconnects_total counter\n"
                           "# TYPE hderp_observe_login_seconds gauge\n"
                           "# TYPE hderp_observe_tcp_connect_seconds gauge\n"
                           "# TYPE hderp_observe_tls_handshake_seconds gauge\n");
    for (unsigned i = 0; i < ob->paths_count; i++) {
        const struct echo_obs_path *p = &ob->paths[i];
        path_labels(p, l, sizeof(l));
        const struct echo_obs_side *sd[2] = {&p->pinger, &p->echo};
        for (int j = 0; j < 2; j++) {
            const char *side = j ? "echo" : "pinger";
            echo_obs_buf_printf(b, "hderp_observe_reconnects_total{%s,side=\"%s\"} %llu\n", l, side,
                                (unsigned long long)sd[j]->reconnects);
            echo_obs_buf_printf(b, "hderp_observe_login_seconds{%s,side=\"%s\"} %.6f\n", l, side,
                                sd[j]->login_ms / 1e3);
            echo_obs_buf_printf(b, "hderp_observe_tcp_connect_seconds{%s,side=\"%s\"} %.6f\n", l,
                                side, sd[j]->tcp_ms / 1e3);
            if (sd[j]->node->url.tls)
                echo_obs_buf_printf(b, "hderp_observe_tls_handshake_seconds{%s,side=\"%s\"} %.6f\n",
                                    l, side, sd[j]->tls_ms / 1e3);
        }
    }
    echo_obs_buf_printf(b, "# TYPE hderp_observe_stun_rtt_seconds histogram\n"
                           "# TYPE hderp_observe_stun_lost_total counter\n");
    for (unsigned i = 0; i < ob->o->nodes_count; i++) {
        const struct echo_obs_node *n = &ob->o->nodes[i];
        if (!n->has_stun)
            continue;
        snprintf(l, sizeof(l), "region=\"%s\",node=\"%s\"", n->region, n->name);
        put_hist(b, "hderp_observe_stun_rtt_seconds", l, &ob->stun[i].total_ns);
        echo_obs_buf_printf(b, "hderp_observe_stun_lost_total{%s} %llu\n", l,
                            (unsigned long long)ob->stun[i].lost);
    }
}

/* ---------------------------------------------------------------- /status.json */

static void put_summary(struct echo_obs_buf *b, const char *name, const struct echo_obs_summary *s)
{
    static const double q[] = {0.5, 0.9, 0.99, 0.999, 1.0};
    static const char *const qn[] = {"p50_ms", "p90_ms", "p99_ms", "p999_ms", "max_ms"};
    echo_obs_buf_printf(b, "\"%s\":{", name);
    for (int i = 0; i < 5; i++)
        echo_obs_buf_printf(b, "\"%s\":%.3f,", qn[i],
                            echo_obs_ms(hd_hist_quantile(&s->rtt_ns, q[i])));
    echo_obs_buf_printf(b, "\"sent\":%llu,\"received\":%llu,\"lost\":%llu,\"loss_pct\":%.3f}",
                        (unsigned long long)s->sent, (unsigned long long)s->received,
                        (unsigned long long)s->lost, echo_obs_loss_pct(s->received, s->lost));
}

void echo_obs_write_status(struct echo_obs *ob, uint64_t now_ms, struct echo_obs_buf *b)
{
    echo_obs_buf_printf(b, "{\"uptime_s\":%.1f,\"paths\":[", (double)(now_ms - ob->start_ms) / 1e3);
    for (unsigned i = 0; i < ob->paths_count; i++) {
        const struct echo_obs_path *p = &ob->paths[i];
        struct echo_obs_summary m, h;
        echo_obs_summarise(p->short_w, ECHO_OBS_SHORT_SLOTS, ECHO_OBS_SHORT_SLOT_MS, now_ms,
                           ECHO_OBS_SHORT_SLOTS, &m);
        echo_obs_summarise(p->long_w, ECHO_OBS_LONG_SLOTS, ECHO_OBS_LONG_SLOT_MS, now_ms,
                           ECHO_OBS_LONG_SLOTS, &h);
        echo_obs_buf_printf(b,
                            "%s{\"path\":\"%s\",\"region\":\"%s\",\"from\":\"%s\",\"to\":\"%s\","
                            "\"kind\":\"%s\",\"up\":%s,\"sent\":%llu,\"received\":%llu,"
                            "\"lost\":%llu,\"reordered\":%llu,\"duplicated\":%llu,"
                            "\"reconnects\":%llu,\"login_ms\":%.3f,\"upgrade_ms\":%.3f,"
                            "\"tcp_connect_ms\":%.3f,\"tls_handshake_ms\":%.3f,",
                            i ? "," : "", p->label, p->from->region, p->from->name, p->to->name,
                            p->kind, p->up ? "true" : "false", (unsigned long long)p->sent,
                            (unsigned long long)p->received, (unsigned long long)p->lost,
                            (unsigned long long)p->reordered, (unsigned long long)p->duplicated,
                            (unsigned long long)(p->pinger.reconnects + p->echo.reconnects),
                            p->pinger.login_ms, p->pinger.upgrade_ms, p->pinger.tcp_ms,
                            p->pinger.tls_ms);
        put_summary(b, "last_minute", &m);
        echo_obs_buf_printf(b, ",");
        put_summary(b, "last_hour", &h);
        echo_obs_buf_printf(b, "}");
    }
    echo_obs_buf_printf(b, "],\"stun\":[");
    bool first = true;
    for (unsigned i = 0; i < ob->o->nodes_count; i++) {
        const struct echo_obs_stun *st = &ob->stun[i];
        if (!ob->o->nodes[i].has_stun)
            continue;
        struct echo_obs_summary m;
        echo_obs_summarise(st->short_w, ECHO_OBS_SHORT_SLOTS, ECHO_OBS_SHORT_SLOT_MS, now_ms,
                           ECHO_OBS_SHORT_SLOTS, &m);
        echo_obs_buf_printf(b, "%s{\"node\":\"%s\",\"region\":\"%s\",", first ? "" : ",",
                            ob->o->nodes[i].name, ob->o->nodes[i].region);
        put_summary(b, "last_minute", &m);
        echo_obs_buf_printf(b, "}");
        first = false;
    }
    echo_obs_buf_printf(b, "]}\n");
}

/* ---------------------------------------------------------------- / */

/* The hour's per-minute p50 (blue) and p99 (red), oldest at the left, 0 ms at the bottom. */
static void put_chart(struct echo_obs_buf *b, const struct echo_obs_path *p, uint64_t now_ms)
{
    double p50[ECHO_OBS_LONG_SLOTS], p99[ECHO_OBS_LONG_SLOTS], top = 0.001;
    uint64_t now_slot = now_ms / ECHO_OBS_LONG_SLOT_MS;
    for (unsigned i = 0; i < ECHO_OBS_LONG_SLOTS; i++) {
        uint64_t slot = now_slot + 1 + i - ECHO_OBS_LONG_SLOTS; /* oldest first */
        const struct echo_obs_window *w = &p->long_w[slot % ECHO_OBS_LONG_SLOTS];
        bool have = w->slot == slot && w->received > 0;
        p50[i] = have ? echo_obs_ms(hd_hist_quantile(&w->rtt_ns, 0.5)) : -1;
        p99[i] = have ? echo_obs_ms(hd_hist_quantile(&w->rtt_ns, 0.99)) : -1;
        top = p99[i] > top ? p99[i] : top;
    }
    echo_obs_buf_printf(b,
                        "<svg class=\"chart\" width=\"240\" height=\"40\" viewBox=\"0 0 240 40\""
                        " xmlns=\"http://www.w3.org/2000/svg\"><title>max %.3f ms</title>",
                        top);
    const double *series[2] = {p50, p99};
    const char *color[2] = {"#1f77b4", "#d62728"};
    for (int s = 0; s < 2; s++) {
        echo_obs_buf_printf(b, "<polyline fill=\"none\" stroke=\"%s\" points=\"", color[s]);
        for (unsigned i = 0; i < ECHO_OBS_LONG_SLOTS; i++)
            if (series[s][i] >= 0)
                echo_obs_buf_printf(b, "%u,%.1f ", i * 4, 38 - 36 * series[s][i] / top);
        echo_obs_buf_printf(b, "\"/>");
    }
    echo_obs_buf_printf(b, "</svg>");
}

void echo_obs_write_page(struct echo_obs *ob, uint64_t now_ms, struct echo_obs_buf *b)
{
    echo_obs_buf_printf(
        b, "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><meta http-equiv=\"refresh\" "
           "content=\"10\"><title>hderp observe</title><style>body{font-family:sans-serif}"
           "td,th{padding:2px 8px;text-align:right}.down{background:#fdd}.up{background:#dfd}"
           "</style></head><body><h1>DERP relay paths</h1><p>Last minute's round trips and loss; "
           "chart: the last hour's per-minute p50 (blue) and p99 (red).</p><table>"
           "<tr><th>region</th><th>path</th><th>kind</th><th>state</th><th>p50 ms</th>"
           "<th>p99 ms</th><th>p99.9 ms</th><th>loss %%</th><th>sent</th><th>reconnects</th>"
           "<th>last hour</th></tr>");
    for (unsigned i = 0; i < ob->paths_count; i++) {
        const struct echo_obs_path *p = &ob->paths[i];
        struct echo_obs_summary m;
        echo_obs_summarise(p->short_w, ECHO_OBS_SHORT_SLOTS, ECHO_OBS_SHORT_SLOT_MS, now_ms,
                           ECHO_OBS_SHORT_SLOTS, &m);
        echo_obs_buf_printf(
            b,
            "<tr class=\"path %s\" data-path=\"%s\"><td>%s</td><td>%s</td><td>%s</td><td>%s</td>"
            "<td>%.3f</td><td>%.3f</td><td>%.3f</td><td>%.2f</td><td>%llu</td><td>%llu</td><td>",
            p->up ? "up" : "down", p->label, p->from->region, p->label, p->kind,
            p->up ? "up" : "down", echo_obs_ms(hd_hist_quantile(&m.rtt_ns, 0.5)),
            echo_obs_ms(hd_hist_quantile(&m.rtt_ns, 0.99)),
            echo_obs_ms(hd_hist_quantile(&m.rtt_ns, 0.999)), echo_obs_loss_pct(m.received, m.lost),
            (unsigned long long)p->sent,
            (unsigned long long)(p->pinger.reconnects + p->echo.reconnects));
        put_chart(b, p, now_ms);
        echo_obs_buf_printf(b, "</td></tr>");
    }
    echo_obs_buf_printf(b, "</table></body></html>\n");
}

/* ---------------------------------------------------------------- the endpoint */

static struct echo_obs *http_obs;

static void respond(struct net_conn *c, uint16_t status, const char *type,
                    const struct echo_obs_buf *body, bool head_only)
{
    char head[512];
    struct net_http_hdr ct = {"Content-Type", net_http_cstr(type)};
    struct net_http_resp_spec spec = {.status = status,
                                      .headers = &ct,
                                      .headers_count = 1,
                                      .content_length = (int64_t)body->len,
                                      .connection = NET_HTTP_CONN_CLOSE};
    int n = net_http_write_resp(head, sizeof(head), &spec);
    /* Head and body in one queue, or nothing: a failed send closes without a partial answer. */
    if (n > 0 && net_conn_send_copy(c, head, (size_t)n) == 0 && !head_only && body->len)
        (void)net_conn_send_copy(c, body->p, body->len);
    net_conn_close(c, 0, true);
}

static void serve(struct net_conn *c, const struct net_http_req *req)
{
    struct echo_obs *ob = http_obs;
    uint64_t now_ms = hd_clock_ns() / 1000000;
    struct echo_obs_buf b = {0};
    bool head_only = req->method == NET_HTTP_METHOD_HEAD;
    const char *type = "text/plain; charset=utf-8";
    uint16_t status = 200;
    if (req->method != NET_HTTP_METHOD_GET && !head_only) {
        status = 405;
        echo_obs_buf_printf(&b, "method not allowed\n");
    } else if (net_http_str_eq(req->path, "/metrics")) {
        type = "text/plain; version=0.0.4";
        echo_obs_write_metrics(ob, now_ms, &b);
    } else if (net_http_str_eq(req->path, "/status.json")) {
        type = "application/json";
        echo_obs_write_status(ob, now_ms, &b);
    } else if (net_http_str_eq(req->path, "/")) {
        type = "text/html; charset=utf-8";
        echo_obs_write_page(ob, now_ms, &b);
    } else {
        status = 404;
        echo_obs_buf_printf(&b, "not found: try /, /metrics or /status.json\n");
    }
    if (b.failed) {
        char buf[256];
        int n = net_http_write_error(buf, sizeof(buf), 503, head_only);
        if (n > 0)
            (void)net_conn_send_copy(c, buf, (size_t)n);
        net_conn_close(c, 0, true);
    } else {
        respond(c, status, type, &b, head_only);
    }
    free(b.p);
}

struct http_req_state {
    struct net_http_req req;
    bool answered;
};

static ssize_t http_data(struct net_conn *c, const uint8_t *data, size_t len)
{
    struct http_req_state *st = net_conn_app(c);
    if (st->answered)
        return (ssize_t)len;
    net_http_req_init(&st->req);
    int rc = net_http_req_parse(&st->req, (const char *)data, len);
    if (rc == -EAGAIN)
        return 0; /* keep the bytes; the head is offered again with more */
    st->answered = true;
    if (rc < 0) {
        char buf[256];
        int n = net_http_write_error(buf, sizeof(buf), st->req.head.error_status, false);
        if (n > 0)
            (void)net_conn_send_copy(c, buf, (size_t)n);
        net_conn_close(c, 0, true);
        return (ssize_t)len;
    }
    serve(c, &st->req);
    return (ssize_t)len;
}

static void http_closed(struct net_conn *c, int reason)
{
    (void)reason;
    free(net_conn_app(c));
}

static const struct net_conn_handler http_handler = {.on_data = http_data, .on_close = http_closed};

static void http_accept(struct net_listener *l, int fd, const struct net_addr *peer, void *arg)
{
    (void)peer, (void)arg;
    struct http_req_state *st = calloc(1, sizeof(*st));
    struct net_conn_options opt = {.idle_timeout_ms = ECHO_OBS_HTTP_IDLE_MS,
                                   .write_timeout_ms = ECHO_OBS_HTTP_IDLE_MS};
    struct net_conn *c;
    if (st == NULL || net_conn_adopt(net_listener_shard(l), fd, &http_handler, st, &opt, &c) < 0) {
        free(st);
        close(fd);
    }
}

int echo_obs_http_start(struct echo_obs *ob)
{
    http_obs = ob;
    if (ob->o->metrics_listen == NULL)
        return 0;
    struct net_listener_options lo = {.conns_max = 64};
    int rc = net_listener_start(ob->s, &ob->o->metrics_addr, &lo, http_accept, ob, &ob->http);
    if (rc < 0) {
        hd_log(HD_LOG_ERROR, "observe: --metrics-listen %s: %s", ob->o->metrics_listen,
               strerror(-rc));
        return rc;
    }
    char text[96];
    net_addr_format(net_listener_addr(ob->http), text, sizeof(text));
    hd_log(HD_LOG_INFO, "observe: metrics on http://%s/ (/metrics, /status.json)", text);
    return 0;
}

void echo_obs_http_stop(struct echo_obs *ob)
{
    if (ob->http)
        net_listener_stop(ob->http);
    ob->http = NULL;
}
