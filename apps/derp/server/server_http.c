/* server_http.c - a fresh connection's HTTP/1.1 phase on the accepting shard: the /derp upgrade
 * (spec §1.3) and derper's small endpoints (§8): /derp/probe, /derp/latency-check,
 * /generate_204, /robots.txt, /debug/ (ops/server_debug.c) and the home page. The
 * connection's app pointer is the shard's srv_shard: an HTTP connection owns no memory of its own.
 * The accept: -accept-connection-limit takes a token from this shard's bucket (rate and burst
 * divided by the shard count, so accepting shares no state; over it the connection is closed at
 * once, accepts_rate_limited, and the accept loop goes on), then the pre-login caps
 * (admit/server_prelogin.c). --http-deadline (30 s) runs from accept for the TLS handshake and
 * the request head, and again for each kept-alive request (an absolute deadline, not restarted
 * by bytes). /derp with Upgrade: DERP answers the exact 101 (nothing for fast start) and the
 * ServerKey frame in one write; the bytes after the request head stay in the connection and are
 * the DERP stream. Upgrade: websocket with a Sec-WebSocket-Protocol containing derp is the
 * WebSocket carrier (spec §1.5): the RFC 6455 101 (Sec-WebSocket-Protocol: derp; without a derp
 * token in the offer the 101 has none and a 1008 close follows, as derper does), then the
 * WebSocket codec (above TLS on a TLS port) and the same DERP connection as a fast-start one
 * (ServerKey first, no Derp headers, Ideal-Node ignored), counted in derp_websocket_accepts;
 * Upgrade: websocket without derp stays raw DERP. In TLS mode -http-port (port 80) is a second
 * plain listener per shard (spec §1.1: /generate_204 and /debug as on the main port, ACME's
 * http-01 answers, other GET/HEAD redirected to https, anything else refused). TLS starts here
 * (srv_http_tls_start): a first record that reads like a plain HTTP request gets Go's 400 in
 * clear text (reply_plain_http), and with a DNS -hostname in manual mode a handshake with
 * another (or no) SNI is refused once it is done (check_sni), as derper does. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <hd/net_ws.h>
#include "server.h"
#include "ops/server_acme.h"
#include "ops/server_debug.h"

static bool ds_acme(struct net_conn *c)
{
    const struct srv_shard *ds = net_conn_app(c);
    return ds->cfg->acme;
}

static const char home_html[] =
    "<html><head><title>hderp</title></head><body>\n"
    "<h1>DERP</h1>\n"
    "<p>This is a <a href=\"https://tailscale.com/kb/1232/derp-servers\">Tailscale DERP</a> "
    "relay (hderp).</p>\n"
    "</body></html>\n";

static void reply(struct net_conn *c, const char *buf, int n)
{
    if (n > 0 && net_conn_send_copy(c, buf, (size_t)n) < 0)
        net_conn_close(c, -ENOBUFS, false);
}

static void reply_text(struct net_conn *c, uint16_t status, const char *text, bool keep,
                       bool head_only)
{
    char buf[1024];
    int n = net_http_write_text(buf, sizeof(buf), status, net_http_cstr(text),
                                keep ? NET_HTTP_CONN_OMIT : NET_HTTP_CONN_CLOSE, head_only);
    reply(c, buf, n);
}

/* §8: a challenge of at most 64 characters of [A-Za-z0-9._:-] is echoed. */
static bool challenge_ok(struct net_http_str ch)
{
    if (ch.ptr == NULL || ch.len == 0 || ch.len > 64)
        return false;
    for (size_t i = 0; i < ch.len; i++) {
        char x = ch.ptr[i];
        bool ok = (x >= 'a' && x <= 'z') || (x >= 'A' && x <= 'Z') || (x >= '0' && x <= '9') ||
                  x == '.' || x == '_' || x == ':' || x == '-';
        if (!ok)
            return false;
    }
    return true;
}

static void serve_204(struct net_conn *c, const struct net_http_req *req, bool keep)
{
    char buf[512], resp[160];
    struct net_http_hdr hdrs[2] = {
        {"Cache-Control", NET_HTTP_LIT("no-cache, no-store, must-revalidate, no-transform, "
                                       "max-age=0")},
    };
    size_t count = 1;
    struct net_http_str ch = net_http_header_get(&req->head, "X-Tailscale-Challenge");
    if (challenge_ok(ch)) {
        int m = snprintf(resp, sizeof(resp), "response %.*s", (int)ch.len, ch.ptr);
        hdrs[count++] = (struct net_http_hdr){"X-Tailscale-Response", {resp, (size_t)m}};
    }
    struct net_http_resp_spec spec = {.status = 204,
                                      .headers = hdrs,
                                      .headers_count = count,
                                      .content_length = -1,
                                      .connection =
                                          keep ? NET_HTTP_CONN_OMIT : NET_HTTP_CONN_CLOSE};
    reply(c, buf, net_http_write_resp(buf, sizeof(buf), &spec));
}

static void serve_probe(struct net_conn *c, const struct net_http_req *req, bool keep)
{
    if (req->method != NET_HTTP_METHOD_GET && req->method != NET_HTTP_METHOD_HEAD) {
        reply_text(c, 405, "bogus probe method\n", keep, false);
        return;
    }
    char buf[256];
    struct net_http_hdr acao = {"Access-Control-Allow-Origin", NET_HTTP_LIT("*")};
    struct net_http_resp_spec spec = {.status = 200,
                                      .headers = &acao,
                                      .headers_count = 1,
                                      .content_length = 0,
                                      .connection =
                                          keep ? NET_HTTP_CONN_OMIT : NET_HTTP_CONN_CLOSE};
    reply(c, buf, net_http_write_resp(buf, sizeof(buf), &spec));
}

static void serve_home(struct net_conn *c, const struct srv_shard *ds,
                       const struct net_http_req *req, bool keep)
{
    const char *home = ds->cfg->home;
    bool head_only = req->method == NET_HTTP_METHOD_HEAD;
    char buf[2048];
    if (home && (strncmp(home, "http://", 7) == 0 || strncmp(home, "https://", 8) == 0)) {
        struct net_http_hdr loc = {"Location", net_http_cstr(home)};
        struct net_http_resp_spec spec = {.status = 302,
                                          .headers = &loc,
                                          .headers_count = 1,
                                          .content_length = 0,
                                          .connection =
                                              keep ? NET_HTTP_CONN_OMIT : NET_HTTP_CONN_CLOSE};
        reply(c, buf, net_http_write_resp(buf, sizeof(buf), &spec));
        return;
    }
    const char *body = (home && strcmp(home, "blank") == 0) ? "" : home_html;
    size_t body_len = strlen(body);
    struct net_http_hdr hdrs[] = {
        {"Content-Type", NET_HTTP_LIT("text/html; charset=utf-8")},
        {"X-Frame-Options", NET_HTTP_LIT("DENY")},
        {"X-Content-Type-Options", NET_HTTP_LIT("nosniff")},
        {"Strict-Transport-Security", NET_HTTP_LIT("max-age=63072000; includeSubDomains")},
        {"Content-Security-Policy", NET_HTTP_LIT("default-src 'self'; frame-ancestors 'none'")},
    };
    struct net_http_resp_spec spec = {.status = 200,
                                      .headers = hdrs,
                                      .headers_count = HD_ARRAY_SIZE(hdrs),
                                      .content_length = (int64_t)body_len,
                                      .connection =
                                          keep ? NET_HTTP_CONN_OMIT : NET_HTTP_CONN_CLOSE};
    int n = net_http_write_resp(buf, sizeof(buf), &spec);
    reply(c, buf, n);
    if (n > 0 && !head_only && body_len)
        reply(c, body, (int)body_len);
}

/* §1.5: the WebSocket carrier (RFC 6455 handshake as coder/websocket's Accept answers it, then
 * the DERP byte stream in binary messages, net_ws.h). Returns true when the connection became
 * a DERP connection. */
static bool serve_websocket(struct net_conn *c, struct srv_shard *ds,
                            const struct net_http_req *req)
{
    uint16_t status;
    if (net_http_ws_check(req, &status) < 0) {
        hd_log_rl(HD_LOG_INFO, "websocket: bad opening handshake: %u", (unsigned)status);
        reply_text(c, status,
                   status == 400 ? "bad WebSocket handshake\n" : "WebSocket protocol violation\n",
                   false, false);
        return false;
    }
    /* Subprotocol selection: "derp" when the client offers it as a token; the 1008 close below
     * covers offers that only contain the substring (derper's check before Accept). */
    bool derp = net_http_header_has_token(&req->head, "Sec-WebSocket-Protocol", "derp");
    char buf[512];
    struct net_http_str key = net_http_header_get(&req->head, "Sec-WebSocket-Key");
    int n = net_http_write_ws_101(buf, sizeof(buf), key,
                                  derp ? NET_HTTP_LIT("derp") : (struct net_http_str){0});
    HD_ASSERT(n > 0); /* the key was checked */
    reply(c, buf, n);
    int rc = net_ws_start(c, true); /* over TLS: above the TLS codec */
    if (rc < 0) {
        net_conn_close(c, rc, false);
        return false;
    }
    if (!derp) {
        net_ws_close(c, NET_WS_CLOSE_POLICY, "client must speak the derp subprotocol", 0);
        return false;
    }
    ds->ctr.websocket_accepts++;
    /* No 101 with Derp headers (the WebSocket 101 went out): the ServerKey frame comes first,
     * as for fast start; Ideal-Node is not looked at on this path. */
    rc = srv_client_start(ds, c, true, false);
    if (rc < 0) {
        net_conn_close(c, rc, false);
        return false;
    }
    return true;
}

/* §1.3: returns true when the connection became a DERP connection. */
static bool serve_derp(struct net_conn *c, struct srv_shard *ds, const struct net_http_req *req)
{
    struct net_http_str up = net_http_header_get(&req->head, "Upgrade");
    bool derp = net_http_str_eq_nocase(up, "derp");
    bool ws = net_http_str_eq_nocase(up, "websocket");
    if (!derp && !ws) {
        reply_text(c, 426, "DERP requires connection upgrade\n", false, false);
        return false;
    }
    struct net_http_str proto = net_http_header_get(&req->head, "Sec-WebSocket-Protocol");
    if (ws && proto.ptr && memmem(proto.ptr, proto.len, "derp", 4))
        return serve_websocket(c, ds, req);
    bool fast = net_http_str_eq(net_http_header_get(&req->head, "Derp-Fast-Start"), "1");
    struct net_http_str ideal = net_http_header_get(&req->head, "Ideal-Node");
    int rc = srv_client_start(ds, c, fast, ideal.ptr != NULL && ideal.len > 0);
    if (rc < 0) {
        net_conn_close(c, rc, false);
        return false;
    }
    return true;
}

/* Port 80 in TLS mode (§1.1): /generate_204 and /debug as on the main port, other GET/HEAD
 * redirected to https, anything else refused. Returns true when it answered. */
/* -certmode letsencrypt's http-01 answers (RFC 8555 section 8.3), from server_acme.c. */
static bool serve_acme(struct net_conn *c, const struct net_http_req *req, bool keep)
{
    static const char prefix[] = "/.well-known/acme-challenge/";
    size_t n = sizeof(prefix) - 1;
    if (req->path.len <= n || memcmp(req->path.ptr, prefix, n) != 0)
        return false;
    char auth[512];
    bool ours = srv_acme_http01(req->path.ptr + n, req->path.len - n, auth, sizeof(auth));
    reply_text(c, ours ? 200 : 404, ours ? auth : "no such challenge\n", keep,
               req->method == NET_HTTP_METHOD_HEAD);
    return true;
}

static bool serve_port80(struct net_conn *c, const struct net_http_req *req, bool keep)
{
    if (ds_acme(c) && serve_acme(c, req, keep))
        return true;
    if (net_http_str_eq(req->path, "/generate_204") ||
        (req->path.len >= 6 && memcmp(req->path.ptr, "/debug", 6) == 0))
        return false;
    if (req->method != NET_HTTP_METHOD_GET && req->method != NET_HTTP_METHOD_HEAD) {
        reply_text(c, 400, "Use HTTPS\n", keep, false);
        return true;
    }
    char loc[NET_HTTP_HEAD_SIZE_MAX], buf[NET_HTTP_HEAD_SIZE_MAX + 256];
    int n = snprintf(loc, sizeof(loc), "https://%.*s%.*s", (int)req->host.len,
                     req->host.ptr ? req->host.ptr : "", (int)req->target.len, req->target.ptr);
    struct net_http_hdr h = {"Location", {loc, n > 0 ? (size_t)n : 0}};
    struct net_http_resp_spec spec = {.status = 302,
                                      .headers = &h,
                                      .headers_count = 1,
                                      .content_length = 0,
                                      .connection =
                                          keep ? NET_HTTP_CONN_OMIT : NET_HTTP_CONN_CLOSE};
    reply(c, buf, net_http_write_resp(buf, sizeof(buf), &spec));
    return true;
}

/* req->path decoded into path, as Go's ServeMux routes ("/debug/%76arz" is /debug/varz; "%2F"
 * is no separator there): true, or false after Go's 400 for a bad escape (closing). */
static bool decode_path(struct net_conn *c, struct net_http_req *req, char *path, size_t size)
{
    ssize_t n = net_http_path_unescape(req->path, path, size, true);
    if (n >= 0) {
        req->path = (struct net_http_str){path, (size_t)n};
        return true;
    }
    char buf[256];
    reply(c, buf, net_http_write_error(buf, sizeof(buf), 400, false));
    hd_log_rl(HD_LOG_INFO, "http: bad request (invalid URL escape in the path): 400");
    net_conn_close(c, 0, true);
    return false;
}

static ssize_t http_request(struct net_conn *c, const uint8_t *data, size_t len, bool port80)
{
    struct srv_shard *ds = net_conn_app(c);
    struct net_http_req req;
    net_http_req_init(&req);
    int n = net_http_req_parse(&req, (const char *)data, len);
    if (n == -EAGAIN)
        return 0; /* the head is not complete: net keeps the bytes and offers them again */
    if (n < 0) {
        char buf[256];
        reply(c, buf, net_http_write_error(buf, sizeof(buf), req.head.error_status, false));
        hd_log_rl(HD_LOG_INFO, "http: bad request (%s): %u", req.head.error_reason,
                  req.head.error_status);
        net_conn_close(c, 0, true);
        return (ssize_t)len;
    }
    if (len < (size_t)n + req.body_size)
        return 0; /* wait for the (small, bounded) body */
    size_t used = (size_t)n + req.body_size;
    ds->ctr.http_requests++;
    if (ds->cfg->tls && !port80) /* derper_tls_request_version: hderp speaks TLS 1.3 only */
        ds->ctr.tls_requests++;
    char path[NET_HTTP_HEAD_SIZE_MAX];
    if (!decode_path(c, &req, path, sizeof(path)))
        return (ssize_t)len;
    bool keep = req.keep_alive;
    bool head_only = req.method == NET_HTTP_METHOD_HEAD;
    if (port80 && serve_port80(c, &req, keep)) {
        /* answered */
    } else if (req.method == NET_HTTP_METHOD_CONNECT) { /* derper: ACE's, off without -ace */
        reply_text(c, 403, "CONNECT not enabled\n", false, false);
        keep = false;
    } else if (net_http_str_eq(req.path, "/bootstrap-dns")) {
        srv_bootdns_serve(ds, c, &req); /* server_bootdns.c */
        keep = false;
    } else if (net_http_str_eq(req.path, "/derp")) {
        if (serve_derp(c, ds, &req))
            return (ssize_t)used; /* what follows the head is DERP: the new handler gets it */
        keep = false;
    } else if (net_http_str_eq(req.path, "/derp/probe") ||
               net_http_str_eq(req.path, "/derp/latency-check")) {
        serve_probe(c, &req, keep);
    } else if (net_http_str_eq(req.path, "/generate_204")) {
        serve_204(c, &req, keep);
    } else if (net_http_str_eq(req.path, "/robots.txt")) {
        reply_text(c, 200, "User-agent: *\nDisallow: /\n", keep, head_only);
    } else if (net_http_str_eq(req.path, "/debug") ||
               (req.path.len >= 7 && memcmp(req.path.ptr, "/debug/", 7) == 0)) {
        if (srv_debug_serve(ds, c, &req, keep,
                            ds->cfg->tls && !port80)) /* server_debug.c; true: it answers later */
            return (ssize_t)used;
    } else {
        serve_home(c, ds, &req, keep);
    }
    if (!keep)
        net_conn_close(c, 0, true);
    else /* derper (Go's ReadTimeout): the next request's head within the deadline again */
        net_conn_set_deadline(c, ds->cfg->http_deadline_ms);
    return (ssize_t)used;
}

static ssize_t http_data(struct net_conn *c, const uint8_t *data, size_t len)
{
    return http_request(c, data, len, false);
}

static ssize_t http80_data(struct net_conn *c, const uint8_t *data, size_t len)
{
    return http_request(c, data, len, true);
}

/* Every handler of the HTTP phase (this one, varz's) ends the pre-login count at close. */
static void http_close(struct net_conn *c, int reason)
{
    struct srv_shard *ds = net_conn_app(c);
    if (reason == -ETIMEDOUT)
        ds->ctr.deadline_closes++;
    srv_prelogin_leave(ds, net_conn_peer(c));
}

static const struct net_conn_handler http_handler = {
    .on_data = http_data,
    .on_close = http_close,
};

static const struct net_conn_handler http80_handler = {
    .on_data = http80_data,
    .on_close = http_close,
};

/* derper's manual mode with a DNS hostname: a handshake with another (or no) SNI fails. */
static void check_sni(struct net_conn *c, const struct tls_conn_info *info)
{
    struct srv_shard *ds = net_conn_app(c);
    if (strcmp(info->server_name, ds->cfg->hostname) != 0) {
        hd_log_rl(HD_LOG_INFO, "tls: SNI \"%s\" is not %s: connection refused", info->server_name,
                  ds->cfg->hostname);
        net_conn_close(c, -EACCES, false);
    }
}

static struct net_conn *adopt(struct srv_shard *ds, int fd, const struct net_addr *peer,
                              const struct net_conn_handler *h)
{
    ds->ctr.conns_accepted++;
    if (!srv_prelogin_enter(ds, peer)) {
        close(fd);
        return NULL;
    }
    struct net_conn_options opt = {.idle_timeout_ms = SRV_HTTP_READ_TIMEOUT_MS,
                                   .write_timeout_ms = ds->cfg->write_timeout_ms,
                                   .send_high_bytes = SRV_NET_HIGH_BYTES,
                                   .send_low_bytes = SRV_NET_LOW_BYTES,
                                   .send_max_bytes = SRV_NET_MAX_BYTES,
                                   .send_high_frames = SRV_NET_HIGH_FRAMES,
                                   .send_low_frames = SRV_NET_LOW_FRAMES,
                                   .rx_tail_max = DERP_CONN_TAIL_MAX};
    struct net_conn *c;
    if (net_conn_adopt(ds->s, fd, h, ds, &opt, &c) < 0) {
        hd_log_rl(HD_LOG_WARN, "accept: connection pool exhausted: refused a connection");
        srv_prelogin_leave(ds, peer);
        close(fd);
        return NULL;
    }
    /* The TLS handshake and the request head by this time, however slowly bytes drip in
     * (the idle timer alone restarts on each byte). */
    net_conn_set_deadline(c, ds->cfg->http_deadline_ms);
    return c;
}

struct net_conn *srv_http_adopt(struct srv_shard *ds, int fd, const struct net_addr *peer)
{
    return adopt(ds, fd, peer, &http_handler);
}

void srv_http_tls_start(struct srv_shard *ds, struct net_conn *c)
{
    /* The TLS codec goes under the HTTP handler: it sees plaintext either way. */
    struct tls_conn_options to = {.idle_timeout_ms = SRV_HTTP_READ_TIMEOUT_MS,
                                  .write_timeout_ms = ds->cfg->write_timeout_ms,
                                  .on_handshake = ds->cfg->sni_required ? check_sni : NULL,
                                  .reply_plain_http = true}; /* Go's 400 to plain HTTP */
    int rc = tls_conn_start(c, srv_certs_current(ds), &to);
    if (rc < 0)
        net_conn_close(c, rc, false);
}

/* -accept-connection-limit: this shard's token bucket (srv_accept_limit_init). A refused
 * connection is closed and the accept loop goes on (derper's loop stopped on it, spec §6.9). */
bool srv_accept_allowed(struct srv_shard *ds)
{
    return ds->accept_per_ms <= 0 ||
           hd_tbucket_take(&ds->accept, ds->accept_per_ms, ds->accept_burst, hd_now_ms(ds->s), 1);
}

/* Each shard gets 1/shards of the rate and of the burst (at least 1): reuseport spreads
 * accepts over the shards, so accepting shares no state. */
void srv_accept_limit_init(struct srv_shard *ds)
{
    double n = (double)hd_shard_count(ds->s);
    ds->accept_per_ms = ds->cfg->accept_rate / n;
    ds->accept_burst = ds->cfg->accept_burst / n < 1 ? 1 : ds->cfg->accept_burst / n;
    hd_tbucket_fill(&ds->accept, ds->accept_burst, hd_now_ms(ds->s));
}

void srv_http_accept(struct net_listener *l, int fd, const struct net_addr *peer, void *arg)
{
    (void)l;
    struct srv_shard *ds = arg;
    if (ds->cfg->proxy_from_count) { /* -proxy-protocol-from: the header first (server_proxy.c) */
        srv_proxy_accept(ds, fd, peer);
        return;
    }
    if (!srv_accept_allowed(ds)) {
        ds->ctr.accepts_refused++;
        hd_log_rl(HD_LOG_INFO, "accept: over -accept-connection-limit: connection closed");
        close(fd);
        return;
    }
    ds->ctr.listener_accepted++;
    struct net_conn *c = srv_http_adopt(ds, fd, peer);
    if (c && ds->cfg->tls)
        srv_http_tls_start(ds, c);
}

void srv_http80_accept(struct net_listener *l, int fd, const struct net_addr *peer, void *arg)
{
    (void)l;
    adopt(arg, fd, peer, &http80_handler);
}
