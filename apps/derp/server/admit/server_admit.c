/* server_admit.c - admission control (spec §5): -verify-clients (its request is in
 * server_admit_local.c), then -verify-client-url; both must pass (--allow-keys, a snapshot
 * lookup, comes before both: server_allow.c). After ClientInfo a regular client (mesh peers
 * skip this) waits in SRV_CLIENT_ADMITTING, its reading paused, while the shard asks tailscaled
 * and/or POSTs {"NodePublic","Source"} to the controller (net_http_client, 5 s each); the
 * answers continue the login (srv_client_admitted) or close the connection with one log line;
 * other connections on the shard are not held up. The URL is parsed and its host resolved once
 * on the main thread (srv_admit_configure); an https URL gets a client TLS context on the system
 * roots there (tls_roots.c: SSL_CERT_FILE / SSL_CERT_DIR as Go reads them), and the HTTP
 * client's on_connect starts TLS for the URL's host; a certificate that does not verify is a
 * transport error (fail-open rules). An answer that arrived (the HTTP client reports one
 * whenever a valid status line came, with the body read so far, even when its head or body is
 * then refused, over 4 KiB or cut short) is judged as derper judges it (srv_admit_judge), never
 * taken as "unreachable" (DERP-PROTOCOL.md §5). Runs on the client's accepting shard; owns the
 * pending request (cancelled if the client goes first). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include <hd/net_http_client.h>
#include "server.h"

/* http[s]://host[:port][/path]: host numeric (v4, [v6]) or a DNS name resolved here, once.
 * https: a client context on the system roots (SSL_CERT_FILE / SSL_CERT_DIR as Go reads them),
 * the certificate checked against host. */
int srv_admit_configure(struct srv_config *cfg, const char *url, bool fail_open, char *err,
                        size_t err_size)
{
    cfg->verify_fail_open = fail_open;
    if (url == NULL || url[0] == '\0')
        return 0;
    if (net_url_parse(url, &cfg->verify) < 0) {
        snprintf(err, err_size, "malformed URL (http[s]://host[:port][/path]), or too long");
        return -EINVAL;
    }
    if (net_url_resolve(&cfg->verify, false, &cfg->verify_addr) < 0) {
        snprintf(err, err_size, "cannot resolve %s", cfg->verify.host);
        return -EINVAL;
    }
    if (cfg->verify.tls) {
        struct tls_client_options o = {.system_roots = true, .alpn = "http/1.1"};
        int rc = tls_client_ctx_create(&o, &cfg->verify_tls);
        if (rc < 0) {
            snprintf(err, err_size, "cannot set up TLS: %s", strerror(-rc));
            return rc;
        }
    }
    cfg->verify_url = url;
    return 0;
}

void srv_admit_fini(struct srv_config *cfg)
{
    if (cfg->verify_tls)
        tls_ctx_destroy(cfg->verify_tls);
    cfg->verify_tls = NULL;
}

bool srv_admit_needs_tls(const struct srv_config *cfg)
{
    return cfg->verify_tls != NULL;
}

bool srv_admit_needed(const struct srv_config *cfg)
{
    return cfg->verify_url != NULL || cfg->verify_local;
}

/* An answer arrived (r set: at least a valid status line; its head or body may be refused, over
 * the 4 KiB kept or cut short). No r is a transport error: "unreachable". */
bool srv_admit_answered(int err, const struct net_http_result *r)
{
    (void)err;
    return r != NULL;
}

/* The controller's whole answer, or one over the 4 KiB: the cache may keep its verdict (one cut
 * short by a timeout, a reset or a malformed head is judged but not kept). */
bool srv_admit_definite(int err, const struct net_http_result *r)
{
    return r != NULL && (err == 0 || err == -EFBIG);
}

/* The value decoded the way derper's encoding/json does into tailcfg.DERPAdmitClientResponse:
 * keys match "Allow" case-insensitively, the last one wins, null leaves it false, anything
 * but a boolean is an error; other keys are ignored; a top-level null is a refusal, any other
 * non-object an error. */
static const char *judge_value(json_t *v, bool *allow)
{
    if (json_is_null(v))
        return "controller said no";
    if (!json_is_object(v))
        return "bad JSON (not an object)";
    const char *k;
    json_t *a;
    json_object_foreach(v, k, a)
    {
        if (strcasecmp(k, "Allow") != 0 || json_is_null(a))
            continue;
        if (!json_is_boolean(a)) {
            *allow = false;
            return "bad JSON (Allow is not a boolean)";
        }
        *allow = json_is_true(a);
    }
    return *allow ? NULL : "controller said no";
}

/* derper's verifyClient: a transport error is "unreachable" (fail_open admits); an answer that
 * arrived is judged, never taken as unreachable: a status other than 200 refuses; a 200 admits
 * only when the first 4 KiB of its body (all derper reads) begin with a whole JSON value saying
 * Allow true, whatever follows it (Go's json.Decoder stops after the value). */
const char *srv_admit_judge(int err, const struct net_http_result *r, bool fail_open, bool *allow)
{
    *allow = false;
    if (!srv_admit_answered(err, r)) {
        *allow = fail_open;
        return fail_open        ? NULL
               : err == -EPROTO ? "controller unreachable (TLS handshake failed)"
                                : strerror(-err);
    }
    if (r->status != 200)
        return "controller answered non-200";
    json_error_t je;
    size_t len = r->body_len < SRV_ADMIT_BODY_MAX ? r->body_len : SRV_ADMIT_BODY_MAX;
    json_t *v = json_loadb(
        (const char *)r->body, len,
        JSON_DECODE_ANY | JSON_DISABLE_EOF_CHECK | JSON_ALLOW_NUL | JSON_DECODE_INT_AS_REAL, &je);
    const char *why = v               ? judge_value(v, allow)
                      : err == -EFBIG ? "bad JSON (no whole JSON value in the first 4 KiB)"
                      : err < 0       ? "bad answer (malformed head, or cut short)"
                                      : "bad JSON";
    json_decref(v);
    return why;
}

static void note_refused(struct srv_client *cl, const char *why)
{
    char key[DERP_PUBKEY_TEXT_SIZE], ip[64];
    derp_pubkey_format(&cl->key, key);
    if (derp_addr_format_ip(&cl->remote, ip, sizeof(ip)) < 0)
        ip[0] = '\0';
    cl->ds->ctr.admit_refused++;
    hd_log_rl(HD_LOG_INFO, "admission: refused %s from %s: %s", key, ip, why); /* clients */
}

static void answered(void *arg, int err, const struct net_http_result *r)
{
    struct srv_client *cl = arg;
    HD_ASSERT(cl->phase == SRV_CLIENT_ADMITTING && !cl->rechecking); /* a login's answer */
    cl->admit = NULL;
    bool allow;
    const char *why = srv_admit_judge(err, r, cl->ds->cfg->verify_fail_open, &allow);
    if (srv_admit_definite(err, r)) /* the controller's verdict (not an outage) */
        srv_admit_cache_put(cl->ds, &cl->key, allow);
    if (!srv_admit_answered(err, r)) {
        cl->ds->ctr.admit_errors++;
        if (allow) { /* derper logs each; a dead controller must not flood the log */
            char key[DERP_PUBKEY_TEXT_SIZE];
            derp_pubkey_format(&cl->key, key);
            hd_log_rl(HD_LOG_INFO, "admission: controller unreachable (%s); allowing %s",
                      err == -EPROTO ? "TLS handshake failed" : strerror(-err), key);
        }
    }
    if (!allow) {
        note_refused(cl, why);
        srv_client_close(cl, -EACCES);
        return;
    }
    int rc = srv_client_admitted(cl);
    if (rc < 0)
        srv_client_close(cl, rc);
}

/* https: TLS on the controller's connection before the request is queued (it waits for the
 * handshake); a certificate that does not verify for the URL's host fails the request like any
 * transport error (fail-open applies). */
static int verify_tls_start(struct net_conn *c, void *arg)
{
    const struct srv_config *cfg = arg;
    struct tls_conn_options o = {.server_name = cfg->verify.host};
    return tls_conn_start(c, cfg->verify_tls, &o);
}

/* POST {"NodePublic","Source"} for cl to the controller; done(cl, ...) gets the answer (into
 * cl->admit until then). 0, or net_http_client_start's error (nothing started). */
int srv_admit_url_request(struct srv_client *cl, net_http_done_fn *done)
{
    struct srv_shard *ds = cl->ds;
    const struct srv_config *cfg = ds->cfg;
    HD_ASSERT(cl->admit == NULL && cfg->verify_url != NULL); /* one request at a time */
    char key[DERP_PUBKEY_TEXT_SIZE], ip[64], body[256];
    derp_pubkey_format(&cl->key, key);
    if (derp_addr_format_ip(&cl->remote, ip, sizeof(ip)) < 0)
        ip[0] = '\0';
    int n = snprintf(body, sizeof(body), "{\"NodePublic\":\"%s\",\"Source\":\"%s\"}", key, ip);
    HD_ASSERT(n > 0 && (size_t)n < sizeof(body));
    struct net_http_request rq = {.method = "POST",
                                  .target =
                                      net_http_cstr(cfg->verify.path[0] ? cfg->verify.path : "/"),
                                  .host = net_http_cstr(cfg->verify.authority),
                                  .body = body,
                                  .body_len = (size_t)n,
                                  .timeout_ms = SRV_ADMIT_TIMEOUT_MS,
                                  .resp_max = SRV_ADMIT_BODY_MAX,
                                  .on_connect = cfg->verify_tls ? verify_tls_start : NULL,
                                  .on_connect_arg = (void *)cfg};
    int rc = net_http_client_start(ds->s, &cfg->verify_addr, &rq, done, cl, &cl->admit);
    if (rc < 0)
        cl->admit = NULL;
    return rc;
}

/* The -verify-client-url check: 0 (the answer follows), 1 (admitted now: a cached allow, or the
 * request could not start and fail-open applies) or -EACCES (refused now: a cached refusal, or
 * fail-closed). */
static int url_start(struct srv_client *cl)
{
    struct srv_shard *ds = cl->ds;
    int cached = srv_admit_cache_get(ds, &cl->key);
    if (cached >= 0) {
        if (cached)
            return 1;
        note_refused(cl, "controller said no (cached)");
        return -EACCES;
    }
    int rc = srv_admit_url_request(cl, answered);
    if (rc < 0) { /* nothing started: a transport error now */
        ds->ctr.admit_errors++;
        if (ds->cfg->verify_fail_open)
            return 1;
        note_refused(cl, strerror(-rc));
        return -EACCES;
    }
    return 0;
}

/* Reading paused while an answer is pending (once: the two checks share the phase). */
static void wait_answer(struct srv_client *cl)
{
    if (cl->phase == SRV_CLIENT_ADMITTING)
        return;
    srv_client_phase_set(cl, SRV_CLIENT_ADMITTING);
    net_conn_pause_recv(cl->conn, true);
}

/* Called from the reader (ClientInfo): 0 (the answer follows), 1 (admitted now: the request
 * could not start and fail-open applies) or -EACCES (refused now). -verify-clients asks first,
 * then -verify-client-url: both must pass (§5). */
int srv_admit_start(struct srv_client *cl)
{
    HD_ASSERT(cl->phase == SRV_CLIENT_HANDSHAKE && cl->admit == NULL && !cl->mesh);
    int rc;
    if (cl->ds->cfg->verify_local) {
        rc = srv_admit_local_start(cl);
        if (rc < 0) { /* nothing started: no fail-open for tailscaled */
            cl->ds->ctr.admit_errors++;
            char why[128];
            snprintf(why, sizeof(why), "cannot ask tailscaled: %s", strerror(-rc));
            note_refused(cl, why);
            return -EACCES;
        }
    } else if ((rc = url_start(cl)) != 0) {
        return rc;
    }
    wait_answer(cl);
    return 0;
}

void srv_admit_local_done(struct srv_client *cl, const char *why_refused)
{
    HD_ASSERT(cl->phase == SRV_CLIENT_ADMITTING && cl->admit == NULL); /* the whois answered */
    if (why_refused) {
        note_refused(cl, why_refused);
        srv_client_close(cl, -EACCES);
        return;
    }
    int rc = cl->ds->cfg->verify_url ? url_start(cl) : 1;
    if (rc == 0)
        return; /* still ADMITTING: the controller's answer follows */
    if (rc < 0) {
        srv_client_close(cl, rc);
        return;
    }
    rc = srv_client_admitted(cl);
    if (rc < 0)
        srv_client_close(cl, rc);
}

/* The client went away while its answer was pending. */
void srv_admit_cancel(struct srv_client *cl)
{
    if (cl->admit)
        net_http_client_cancel(cl->admit);
    cl->admit = NULL;
    srv_admit_recheck_cancelled(cl);
}
