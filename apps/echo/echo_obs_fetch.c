/* echo_obs_fetch.c - hderp-echo observe --derp-map URL: one GET of the map from the observer's
 * shard at start (the framework's HTTP client; https through the TLS layer, verified as the
 * nodes are: --ca or the system roots, none with --insecure), then the same reader as for a
 * file (echo_obs_derpmap_parse). Runs on the shard; the URL was resolved on the main thread. */
#include <errno.h>
#include <string.h>

#include "echo_obs.h"
#include <hd/net_http_client.h>

static struct {
    struct echo_obs *ob;
    struct echo_obs_opts *o;
    echo_obs_fetched_fn *done;
    struct net_http_client *req;
} fetch;

static int fetch_tls(struct net_conn *c, void *arg)
{
    (void)arg;
    struct echo_obs *ob = fetch.ob;
    struct tls_conn_options to = {.server_name = fetch.o->map_loc.host};
    return tls_conn_start(c, fetch.o->insecure ? ob->tls_insecure : ob->tls_verify, &to);
}

static void fetched(void *arg, int err, const struct net_http_result *r)
{
    (void)arg;
    fetch.req = NULL;
    const char *url = fetch.o->map_url;
    if (err < 0) {
        hd_log(HD_LOG_ERROR, "observe: --derp-map %s: %s", url, strerror(-err));
        fetch.done(fetch.ob, err);
        return;
    }
    if (r->status != 200) {
        hd_log(HD_LOG_ERROR, "observe: --derp-map %s: HTTP %u", url, (unsigned)r->status);
        fetch.done(fetch.ob, -EPROTO);
        return;
    }
    char why[256];
    if (echo_obs_derpmap_parse((const char *)r->body, r->body_len, fetch.o->map_plain_http, fetch.o,
                               why, sizeof(why)) < 0) {
        hd_log(HD_LOG_ERROR, "observe: --derp-map %s: %s", url, why);
        fetch.done(fetch.ob, -EPROTO);
        return;
    }
    for (unsigned i = 0; i < fetch.o->nodes_count; i++)
        fetch.o->nodes[i].insecure |= fetch.o->insecure;
    fetch.done(fetch.ob, 0);
}

int echo_obs_fetch_start(struct echo_obs *ob, struct echo_obs_opts *o, echo_obs_fetched_fn *done)
{
    fetch.ob = ob;
    fetch.o = o;
    fetch.done = done;
    const struct net_url *u = &o->map_loc;
    struct net_http_request rq = {.method = "GET",
                                  .target = net_http_cstr(u->path[0] ? u->path : "/"),
                                  .host = net_http_cstr(u->authority),
                                  .timeout_ms = ECHO_OBS_MAP_TIMEOUT_MS,
                                  .resp_max = ECHO_OBS_MAP_MAX,
                                  .on_connect = u->tls ? fetch_tls : NULL};
    return net_http_client_start(ob->s, &o->map_addr, &rq, fetched, NULL, &fetch.req);
}

void echo_obs_fetch_cancel(void)
{
    if (fetch.req)
        net_http_client_cancel(fetch.req);
    fetch.req = NULL;
}
