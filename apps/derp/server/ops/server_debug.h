/* server_debug.h - the /debug/ endpoints (server_debug.c: who may reach them, the index page,
 * /debug/check, /debug/traffic and the Go runtime's refused by name; server_metrics.c:
 * /debug/varz, /debug/vars and /debug/keys; server_metrics_proc.c: the process figures). */
#ifndef SERVER_DEBUG_H
#define SERVER_DEBUG_H

#include "ops/server_account.h"

/* What a collect over the shards answers (server_metrics.c). */
enum srv_debug_kind {
    SRV_DEBUG_VARZ,  /* /debug/varz: Prometheus text */
    SRV_DEBUG_VARS,  /* /debug/vars: derper's expvar JSON */
    SRV_DEBUG_KEYS,  /* /debug/keys: per-key accounting, JSON */
    SRV_DEBUG_CHECK, /* /debug/check: the relay's consistency check */
};
/* over_tls: the request came in on the TLS listener (derper_tls_active_version counts it). */
void srv_debug_collect(struct srv_shard *ds, struct net_conn *c, bool head_only,
                       enum srv_debug_kind kind, bool over_tls);

/* server_debug.c: a request for /debug or under it (req->path decoded; over_tls: on the TLS
 * listener, not port 80). Returns true when the
 * connection is taken over (an answer comes later: the caller returns the bytes used and does
 * nothing more); false when it answered (the caller closes or keeps the connection as usual). */
bool srv_debug_serve(struct srv_shard *ds, struct net_conn *c, const struct net_http_req *req,
                     bool keep, bool over_tls);
/* /debug/check's per-shard part, on the shard: "" when consistent, else what is not. */
void srv_debug_check_shard(const struct srv_shard *ds, char *out, size_t size);
/* An answer with a body (Connection: close when !keep). */
int srv_debug_reply(struct net_conn *c, uint16_t status, const char *type, const char *body,
                    size_t len, bool keep, bool head_only);

/* server_traffic.c: /debug/traffic, streamed until the client closes. */
void srv_traffic_request(struct srv_shard *ds, struct net_conn *c, bool head_only);

/* server_metrics_proc.c */
int64_t srv_proc_fds(void);
int64_t srv_proc_boot_unix(void);
int64_t srv_proc_start_unix(void);
int64_t srv_proc_uptime_s(void);
void srv_proc_format_varz(struct srv_text *o);
void srv_proc_cmdline_json(struct srv_text *o);

#endif /* SERVER_DEBUG_H */
