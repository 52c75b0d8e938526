/* server_admit.h - admission (§5) as the rest of the server sees it: -verify-client-url
 * (server_admit.c), -verify-clients (server_admit_local.c), the answer cache and re-checks
 * (server_admit_recheck.c), -rate-config's per-key limits and quotas (server_quota.c). Included by
 * server.h after the structures it names. */
#ifndef SERVER_ADMIT_H
#define SERVER_ADMIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct srv_config;
struct srv_client;
struct srv_shard;
struct derp_pubkey;

/* server_admit.c: admission control (§5) */
#define SRV_ADMIT_TIMEOUT_MS 5000 /* derper's -verify-client-url timeout */
#define SRV_ADMIT_BODY_MAX   4096 /* derper reads at most 4 KiB of the answer */
int srv_admit_configure(struct srv_config *cfg, const char *url, bool fail_open, char *err,
                        size_t err_size);
bool srv_admit_needed(const struct srv_config *cfg);
/* Whether admission makes TLS client connections (the runtime then needs tls_module). */
bool srv_admit_needs_tls(const struct srv_config *cfg);
void srv_admit_fini(struct srv_config *cfg); /* main thread, after the runtime stopped */
/* server_admit_local.c: -verify-clients (§5 step 2), GET whois from tailscaled's LocalAPI. */
#define SRV_TAILSCALED_SOCKET_DEFAULT "/var/run/tailscale/tailscaled.sock" /* derper on Linux */
#define SRV_ADMIT_LOCAL_BODY_MAX      (256u * 1024u) /* a WhoIsResponse: node, profile, caps */
int srv_admit_local_configure(struct srv_config *cfg, bool on, const char *socket, char *err,
                              size_t err_size);
/* Starts the whois request (cl->admit): 0 (srv_admit_local_done follows) or -errno. */
int srv_admit_local_start(struct srv_client *cl);
/* server_admit.c: the whois answer; why_refused NULL: known to tailscaled, go on. */
void srv_admit_local_done(struct srv_client *cl, const char *why_refused);
int srv_admit_start(struct srv_client *cl);
void srv_admit_cancel(struct srv_client *cl);
struct net_http_result;
/* A controller's answer: NULL with *allow (200 {"Allow": true}; or no answer arrived and
 * fail_open), else the reason it refuses. An answer that arrived is never "unreachable". */
const char *srv_admit_judge(int err, const struct net_http_result *r, bool fail_open, bool *allow);
/* The answer arrived (judged as such), and is the controller's definite verdict (cacheable). */
bool srv_admit_answered(int err, const struct net_http_result *r);
bool srv_admit_definite(int err, const struct net_http_result *r);
/* POST the key to -verify-client-url; done gets the answer. 0 or -errno (nothing started). */
int srv_admit_url_request(struct srv_client *cl,
                          void (*done)(void *arg, int err, const struct net_http_result *r));
/* server_admit_recheck.c: the answer cache (-verify-cache-ttl): 1 allow, 0 refuse, -ENOENT
 * none; put stores a definite answer. Re-checks (-verify-recheck-interval): start at
 * activation (on the owner shard), stop at close; cancelled: the request was cancelled. */
/* Main thread: the two flags (they need -verify-client-url: message printed, -EINVAL). */
int srv_admit_recheck_configure(struct srv_config *cfg, uint64_t cache_ttl_ms, uint64_t recheck_ms);
int srv_admit_cache_get(struct srv_shard *ds, const struct derp_pubkey *key);
void srv_admit_cache_put(struct srv_shard *ds, const struct derp_pubkey *key, bool allow);
void srv_admit_shard_fini(struct srv_shard *ds);
void srv_admit_recheck_start(struct srv_client *cl);
void srv_admit_recheck_stop(struct srv_client *cl);
void srv_admit_recheck_cancelled(struct srv_client *cl);

/* server_quota.c: -rate-config's "Keys" (per-key limits and byte quotas). parse: main thread,
 * from srv_rate_load (0 or -EINVAL/-ENOMEM with err); free: what srv_rate_load filled. attach:
 * at activation, on the connection's shard; take: before relaying a packet of bytes from a
 * connection with cl->quota (false: over a budget, drop it; counted). */
struct json_t;
struct srv_rate;
struct srv_quota;
int srv_quota_parse(struct json_t *keys, struct srv_rate *out, char *err, size_t err_size);
void srv_rate_free(struct srv_rate *r);
const struct srv_quota *srv_quota_find(const struct srv_rate *r, const struct derp_pubkey *key);
void srv_quota_attach(struct srv_client *cl);
bool srv_quota_take(struct srv_client *cl, uint32_t bytes);
void srv_quota_shard_fini(struct srv_shard *ds);
/* A listed key's usage on a shard (its slot in the shard's table), in UTC days and months. */
struct srv_quota_use {
    struct derp_pubkey key;
    uint64_t day_used, month_used; /* bytes in the current day / month */
    uint32_t day, month;           /* which: days since 1970, months since 1900 (UTC) */
    bool used;
};
/* take's arithmetic at (day, month), without the clock: a new day or month starts its budget
 * again; -1 when bytes fit both budgets (charged to u), else the enum srv_quota_why it would
 * pass (nothing charged). */
int srv_quota_charge(const struct srv_quota *q, struct srv_quota_use *u, uint32_t day,
                     uint32_t month, uint32_t bytes);

#endif /* SERVER_ADMIT_H */
