/* server_debug.c - derper's /debug/ (tsweb's debug handler, cmd/derper's pages): who may reach
 * it (tsweb.AllowDebugAccess: loopback, TS_ALLOW_DEBUG_IP, TS_DEBUG_TRUSTED_CIDRS, a GET with
 * ?debugkey= matching TS_DEBUG_KEY_PATH's file; nothing with X-Forwarded-For; not Tailscale's
 * 100.64.0.0/10 addresses: docs/DERPER-PARITY.md), the index page, /debug/check (the relay's
 * consistency check), and the Go runtime's pages refused by name. /debug/varz, /debug/vars and
 * /debug/keys are server_metrics.c's, /debug/traffic server_traffic.c's. On the shard that got
 * the request. */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ops/server_debug.h"

int srv_debug_reply(struct net_conn *c, uint16_t status, const char *type, const char *body,
                    size_t len, bool keep, bool head_only)
{
    char head[512];
    struct net_http_hdr hdrs[] = {
        {"Content-Type", net_http_cstr(type)},
        {"X-Content-Type-Options", NET_HTTP_LIT("nosniff")},
    };
    struct net_http_resp_spec spec = {.status = status,
                                      .headers = hdrs,
                                      .headers_count = HD_ARRAY_SIZE(hdrs),
                                      .content_length = (int64_t)len,
                                      .connection =
                                          keep ? NET_HTTP_CONN_OMIT : NET_HTTP_CONN_CLOSE};
    int n = net_http_write_resp(head, sizeof(head), &spec);
    int rc = n > 0 ? net_conn_send_copy(c, head, (size_t)n) : -EINVAL;
    if (rc == 0 && !head_only && len)
        rc = net_conn_send_copy(c, body, len);
    return rc;
}

static void reply(struct net_conn *c, uint16_t status, const char *text, bool keep, bool head_only)
{
    if (srv_debug_reply(c, status, "text/plain; charset=utf-8", text, strlen(text), keep,
                        head_only) < 0)
        net_conn_close(c, -ENOBUFS, false);
}

/* ---------------------------------------------------------------- access */

static bool is_loopback(const struct net_addr *a)
{
    if (a->sa.sa_family == AF_INET)
        return (ntohl(a->in4.sin_addr.s_addr) >> 24) == 127;
    if (a->sa.sa_family == AF_INET6) {
        const struct in6_addr *ip = &a->in6.sin6_addr;
        return IN6_IS_ADDR_LOOPBACK(ip) || (IN6_IS_ADDR_V4MAPPED(ip) && ip->s6_addr[12] == 127);
    }
    return false;
}

/* tsweb's allowDebugAccessWithKey: a GET whose debugkey parameter equals the contents of the
 * file TS_DEBUG_KEY_PATH names (whitespace trimmed), read at each request. */
static bool key_allows(const struct srv_shard *ds, const struct net_http_req *req)
{
    const char *path = ds->cfg->debug_key_path;
    if (path == NULL || req->method != NET_HTTP_METHOD_GET || req->query.ptr == NULL)
        return false;
    char want[256], got[256];
    ssize_t got_len = -1;
    for (const char *p = req->query.ptr, *end = p + req->query.len; p < end;) {
        const char *amp = memchr(p, '&', (size_t)(end - p));
        const char *stop = amp ? amp : end;
        if ((size_t)(stop - p) > 9 && memcmp(p, "debugkey=", 9) == 0) {
            got_len = net_http_path_unescape((struct net_http_str){p + 9, (size_t)(stop - p - 9)},
                                             got, sizeof(got), false);
            break; /* Go's FormValue: the first */
        }
        p = stop + 1;
    }
    if (got_len <= 0)
        return false;
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return false;
    size_t n = fread(want, 1, sizeof(want) - 1, f);
    fclose(f);
    char *w = want;
    while (n && isspace((unsigned char)w[n - 1]))
        n--;
    while (n && isspace((unsigned char)*w))
        w++, n--;
    if (n != (size_t)got_len)
        return false;
    unsigned char diff = 0;
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned char)(w[i] ^ got[i]);
    return diff == 0;
}

static bool allowed(const struct srv_shard *ds, struct net_conn *c, const struct net_http_req *req)
{
    if (key_allows(ds, req))
        return true;
    if (net_http_header_get(&req->head, "X-Forwarded-For").ptr != NULL)
        return false;
    const struct net_addr *a = net_conn_peer(c);
    return is_loopback(a) || net_cidr_match(ds->cfg->debug_from, ds->cfg->debug_from_count, a);
}

/* ---------------------------------------------------------------- pages */

/* Go's time.Duration.String of whole seconds: 3s, 1m5s, 2h0m3s. */
static void put_uptime(struct srv_text *o, int64_t s)
{
    if (s >= 3600)
        srv_text_put(o, "%lldh%lldm%llds", (long long)(s / 3600), (long long)(s / 60 % 60),
                     (long long)(s % 60));
    else if (s >= 60)
        srv_text_put(o, "%lldm%llds", (long long)(s / 60), (long long)(s % 60));
    else
        srv_text_put(o, "%llds", (long long)s);
}

/* tsweb's index: title, the facts, a link per page (derper's KV lines and links, hderp's). */
static void serve_index(struct net_conn *c, const struct srv_shard *ds, bool keep, bool head_only)
{
    char buf[4096], host[256] = "";
    struct srv_text o = {buf, 0, sizeof(buf)};
    gethostname(host, sizeof(host) - 1);
    srv_text_put(&o, "<html><body><h1>hderp-server debug</h1><ul><li><b>Uptime:</b> ");
    put_uptime(&o, srv_proc_uptime_s());
    srv_text_put(&o, "</li><li><b>Version:</b> %s</li>", SRV_VERSION);
    if (host[0] && !strpbrk(host, "<>&\"'"))
        srv_text_put(&o, "<li><b>Machine:</b> %s</li>", host);
    srv_text_put(&o, "<li><b>TLS hostname:</b> %s</li><li><b>Mesh key:</b> %s</li>",
                 !ds->cfg->hostname[0]                  ? "(none: plain HTTP)"
                 : strpbrk(ds->cfg->hostname, "<>&\"'") ? "?"
                                                        : ds->cfg->hostname,
                 ds->cfg->have_mesh_key ? "true" : "false");
    static const char *const links[][2] = {
        {"vars", "Metrics (Go)"},       {"varz", "Metrics (Prometheus)"},
        {"check", "Consistency check"}, {"traffic", "Traffic check"},
        {"keys", "Per-key accounting"},
    };
    for (size_t i = 0; i < HD_ARRAY_SIZE(links); i++)
        srv_text_put(&o, "<li><a href=\"/debug/%s\">/debug/%s</a> (%s)</li>", links[i][0],
                     links[i][0], links[i][1]);
    srv_text_put(&o, "</ul><p>derper's Go runtime pages (/debug/pprof/, /debug/gc, "
                     "/debug/set-mutex-profile-fraction) have no counterpart in hderp-server, "
                     "a C program: they answer 501.</p></body></html>\n");
    if (srv_debug_reply(c, 200, "text/html; charset=utf-8", o.buf, o.len, keep, head_only) < 0)
        net_conn_close(c, -ENOBUFS, false);
}

/* derper's pages that are Go's runtime: refused by name (501), with what to use instead. */
static bool serve_go_runtime(struct net_conn *c, struct net_http_str path, bool keep,
                             bool head_only)
{
    static const char *const pages[][2] = {
        {"/debug/pprof", "Go's runtime profiles (pprof: CPU, heap, goroutines, mutexes); "
                         "profile hderp-server with perf (perf record -g -p PID) or read its "
                         "loop figures in /debug/varz (hderp_loop_*)"},
        {"/debug/gc", "Go's garbage collector; hderp-server has none (its memory is pools "
                      "sized at start-up: hderp_frames_* in /debug/varz)"},
        {"/debug/set-mutex-profile-fraction",
         "Go's mutex profiler; hderp-server's shards share no locks"},
    };
    for (size_t i = 0; i < HD_ARRAY_SIZE(pages); i++) {
        size_t n = strlen(pages[i][0]);
        if (path.len < n || memcmp(path.ptr, pages[i][0], n) != 0 ||
            (path.len > n && path.ptr[n] != '/'))
            continue;
        char text[512];
        snprintf(text, sizeof(text),
                 "501 not implemented: %s is %s. hderp-server is not a Go program.\n", pages[i][0],
                 pages[i][1]);
        reply(c, 501, text, keep, head_only);
        return true;
    }
    return false;
}

bool srv_debug_serve(struct srv_shard *ds, struct net_conn *c, const struct net_http_req *req,
                     bool keep, bool over_tls)
{
    bool head_only = req->method == NET_HTTP_METHOD_HEAD;
    struct net_http_str path = req->path;
    if (net_http_str_eq(path, "/debug")) { /* Go's ServeMux: the subtree's root, redirected */
        char buf[256];
        struct net_http_hdr loc = {"Location", NET_HTTP_LIT("/debug/")};
        struct net_http_resp_spec spec = {.status = 301,
                                          .headers = &loc,
                                          .headers_count = 1,
                                          .content_length = 0,
                                          .connection =
                                              keep ? NET_HTTP_CONN_OMIT : NET_HTTP_CONN_CLOSE};
        int n = net_http_write_resp(buf, sizeof(buf), &spec);
        if (n > 0 && net_conn_send_copy(c, buf, (size_t)n) < 0)
            net_conn_close(c, -ENOBUFS, false);
        return false;
    }
    if (!allowed(ds, c, req)) {
        char text[160] = "debug access denied\n";
        char ip[INET6_ADDRSTRLEN] = "";
        const struct net_addr *a = net_conn_peer(c);
        if (a->sa.sa_family == AF_INET)
            inet_ntop(AF_INET, &a->in4.sin_addr, ip, sizeof(ip));
        else if (a->sa.sa_family == AF_INET6)
            inet_ntop(AF_INET6, &a->in6.sin6_addr, ip, sizeof(ip));
        if (ds->cfg->dev) /* tsweb's DevMode: how to let this address in */
            snprintf(text, sizeof(text),
                     "debug access denied; to permit access, set TS_ALLOW_DEBUG_IP=%s\n", ip);
        reply(c, 403, text, keep, head_only);
        return false;
    }
    static const struct {
        const char *path;
        enum srv_debug_kind kind;
    } collects[] = {{"/debug/varz", SRV_DEBUG_VARZ},
                    {"/debug/vars", SRV_DEBUG_VARS},
                    {"/debug/keys", SRV_DEBUG_KEYS},
                    {"/debug/check", SRV_DEBUG_CHECK}};
    for (size_t i = 0; i < HD_ARRAY_SIZE(collects); i++)
        if (net_http_str_eq(path, collects[i].path)) {
            srv_debug_collect(ds, c, head_only, collects[i].kind, over_tls);
            return true;
        }
    if (net_http_str_eq(path, "/debug/traffic")) {
        srv_traffic_request(ds, c, head_only);
        return true;
    }
    if (net_http_str_eq(path, "/debug/"))
        serve_index(c, ds, keep, head_only);
    else if (!serve_go_runtime(c, path, keep, head_only))
        reply(c, 404, "404 page not found\n", keep, head_only); /* Go's http.NotFound */
    return false;
}

/* ---------------------------------------------------------------- /debug/check */

/* derper's ConsistencyCheck, for hderp's tables: every key in this shard's peer table has a
 * connection or a mesh forwarder (derper: clientsMesh keys not in clients), and the gauges
 * kept as connections come and go agree with the table (derper: the connections expvar against
 * its count of keys). */
void srv_debug_check_shard(const struct srv_shard *ds, char *out, size_t size)
{
    int64_t empty = 0, local = 0, dup_keys = 0, dup_conns = 0;
    const struct srv_peer_table *t = &ds->peers;
    for (uint32_t i = 0; i < t->cap; i++) {
        const struct srv_peer *p = t->slots ? t->slots[i] : NULL;
        if (p == NULL)
            continue;
        empty += p->clients_count == 0 && p->fwd_count == 0 && !p->placing;
        local += p->clients_count > 0;
        if (p->clients_count >= 2) {
            dup_keys++;
            dup_conns += p->clients_count;
        }
    }
    struct srv_text o = {out, 0, size};
    out[0] = 0;
    if (empty)
        srv_text_put(&o, "%lld keys with neither a connection nor a mesh forwarder; ",
                     (long long)empty);
    if (local != ds->ctr.clients_local)
        srv_text_put(&o, "clients_local %lld != %lld keys with a connection; ",
                     (long long)ds->ctr.clients_local, (long long)local);
    if (dup_keys != ds->ctr.current_dup_client_keys ||
        dup_conns != ds->ctr.current_dup_client_conns)
        srv_text_put(&o, "dup keys/conns %lld/%lld != %lld/%lld in the table; ",
                     (long long)ds->ctr.current_dup_client_keys,
                     (long long)ds->ctr.current_dup_client_conns, (long long)dup_keys,
                     (long long)dup_conns);
    if (o.len >= 2 && out[o.len - 2] == ';')
        out[o.len - 2] = 0;
}
