/* server_admit_local.c - admission through the local tailscaled (spec §5 step 2,
 * -verify-clients): for each regular client, the shard asks tailscaled's LocalAPI over its unix
 * socket (-socket) `GET /localapi/v0/whois?addr=nodekey%3A<hex>` (Host local-tailscaled.sock,
 * Tailscale-Cap) with net_http_client, never blocking: 200 with a JSON object admits, 404 is
 * "not found in local tailscaled", anything else (another status, bad JSON, a body over
 * SRV_ADMIT_LOCAL_BODY_MAX or ended early, tailscaled not running) refuses, as derper does; there
 * is no fail-open for this check: an absent tailscaled refuses every client, and start-up warns
 * when the socket is not there. The request is bounded by 5 s (derper bounds only the URL's).
 * The reasons are derper's. The answer goes to srv_admit_local_done
 * (server_admit.c), which runs the -verify-client-url check next when it is on. Runs on the
 * client's accepting shard. */
#define _GNU_SOURCE /* memmem */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "derp_keys.h"
#include <hd/net_http_client.h>
#include "server.h"

/* tailcfg.CurrentCapabilityVersion sent as Tailscale-Cap, as derper's LocalAPI client does
 * (130: Tailscale of October 2025). tailscaled answers whois the same for any recent value. */
#define SRV_TAILSCALE_CAP_VERSION "130"

int srv_admit_local_configure(struct srv_config *cfg, bool on, const char *socket, char *err,
                              size_t err_size)
{
    if (!on)
        return 0;
    const char *path = socket && socket[0] ? socket : SRV_TAILSCALED_SOCKET_DEFAULT;
    int rc = net_addr_unix(path, &cfg->verify_local_addr);
    if (rc < 0) {
        snprintf(err, err_size, "-socket %s: %s", path,
                 rc == -ENAMETOOLONG ? "path too long for a unix socket" : strerror(-rc));
        return rc;
    }
    cfg->verify_local = true;
    cfg->verify_local_path = path;
    /* derper starts anyway and refuses every client while tailscaled is away: so do we, but
     * say so now. */
    struct stat st;
    if (stat(path, &st) < 0)
        hd_log(HD_LOG_WARN,
               "admission: -verify-clients: tailscaled socket %s: %s; every client is refused "
               "until tailscaled listens there",
               path, strerror(errno));
    else if (!S_ISSOCK(st.st_mode))
        hd_log(HD_LOG_WARN, "admission: -verify-clients: %s is not a unix socket", path);
    else
        hd_log(HD_LOG_INFO, "admission: -verify-clients through tailscaled at %s", path);
    return 0;
}

/* Why the answer refuses (NULL: admitted), written into why. */
static const char *judge(const struct srv_client *cl, int err, const struct net_http_result *r,
                         char *why, size_t size)
{
    char key[DERP_PUBKEY_TEXT_SIZE];
    derp_pubkey_format(&cl->key, key);
    const char *path = cl->ds->cfg->verify_local_path;
    if (r == NULL) {
        snprintf(why, size,
                 "failed to query local tailscaled status for %s: cannot reach tailscaled at %s: "
                 "%s (not running?)",
                 key, path, strerror(-err));
        return why;
    }
    if (r->status == 404) {
        snprintf(why, size, "peer %s not authorized (not found in local tailscaled)", key);
        return why;
    }
    if (r->status != 200) {
        static const char old[] = "invalid 'addr' parameter"; /* tailscale issue 12617 */
        if (memmem(r->body, r->body_len, old, sizeof(old) - 1))
            snprintf(why, size, "tailscaled version is too old (out of sync with derper binary)");
        else
            snprintf(why, size,
                     "failed to query local tailscaled status for %s: HTTP %u from tailscaled", key,
                     r->status);
        return why;
    }
    if (err < 0) { /* a 200 refused in its head, over the bound or cut short */
        snprintf(why, size,
                 "failed to query local tailscaled status for %s: tailscaled's answer %s", key,
                 err == -EFBIG ? "is over 256 KiB" : "is malformed or cut short");
        return why;
    }
    json_error_t je;
    json_t *o = json_loadb((const char *)r->body, r->body_len, 0, &je);
    bool ok = json_is_object(o);
    json_decref(o);
    if (ok)
        return NULL;
    snprintf(why, size, "failed to query local tailscaled status for %s: bad JSON from tailscaled",
             key);
    return why;
}

static void answered(void *arg, int err, const struct net_http_result *r)
{
    struct srv_client *cl = arg;
    cl->admit = NULL;
    if (r == NULL)
        cl->ds->ctr.admit_errors++;
    char why[DERP_PUBKEY_TEXT_SIZE + 256 + sizeof(cl->ds->cfg->verify_local_addr.un.sun_path)];
    srv_admit_local_done(cl, judge(cl, err, r, why, sizeof(why)));
}

int srv_admit_local_start(struct srv_client *cl)
{
    struct srv_shard *ds = cl->ds;
    const struct srv_config *cfg = ds->cfg;
    char hex[DERP_KEY_HEX_SIZE], target[128];
    derp_key_hex_format(cl->key.bytes, hex);
    snprintf(target, sizeof(target), "/localapi/v0/whois?addr=nodekey%%3A%s", hex);
    const struct net_http_hdr hdrs[] = {
        {.name = "Tailscale-Cap", .value = net_http_cstr(SRV_TAILSCALE_CAP_VERSION)}};
    struct net_http_request rq = {.method = "GET",
                                  .target = net_http_cstr(target),
                                  .host = net_http_cstr("local-tailscaled.sock"),
                                  .headers = hdrs,
                                  .headers_count = HD_ARRAY_SIZE(hdrs),
                                  .timeout_ms = SRV_ADMIT_TIMEOUT_MS,
                                  .resp_max = SRV_ADMIT_LOCAL_BODY_MAX};
    int rc = net_http_client_start(ds->s, &cfg->verify_local_addr, &rq, answered, cl, &cl->admit);
    if (rc < 0)
        cl->admit = NULL;
    return rc;
}
