/* server_metrics.c - /debug/varz (Prometheus text), /debug/vars (derper's expvar JSON) and
 * /debug/check from one collect over the shards (hd_collect), and /debug/keys (per-key
 * accounting, server_account_out.c). Every series is a row of one table (series[]): its
 * Prometheus name and type, its place in /debug/vars (derper's expvar path, type prefix and
 * all: "derp.gauge_current_connections"), and where its value is in a shard's slot; one printer
 * writes the table either way. Counters are per shard and summed here; gauges are each shard's
 * share, summed. Runs on the shard that got the request; the answer is written once every
 * shard has filled its slot. */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/server_debug.h"

const char *const srv_drop_names[SRV_DROPS] = {
    "unknown_dest", "unknown_dest_on_fwd", "gone_disconnected", "queue_head",
    "queue_tail",   "write_error",         "dup_client",
};

struct varz_slot {
    struct srv_counters ctr;
    struct hd_shard_stats loop;
    uint64_t frames_in_use, frames_exhausted;
    uint64_t stalls, stall_max_ms; /* the stall watchdog's (hd_shard_stalls) */
    uint64_t guests, busy_ppm;     /* guests here; hd_shard_busy_ppm */
    double queue_avg_ms;           /* derper's average_queue_duration_ms, this shard's */
    struct srv_rate rate;          /* -rate-config as the shard applies it */
    struct tls_shard_stats tls;    /* the TLS layer's (zero when the runtime has none) */
    char check[160];               /* /debug/check: "" or what is inconsistent here */
    struct srv_acct_slot acct;     /* per-key accounting (the large part: last) */
};

/* The answer: the fixed series, and per-key accounting's (a few lines per named key). */
#define VARZ_TEXT_MAX (64u * 1024 + (SRV_ACCT_KEYS_MAX + 4 * SRV_ACCT_JSON_TOP) * 640u)

struct varz_req {
    const struct srv_config *cfg; /* the relay asked: its counters on every shard */
    unsigned instance;            /* ... its place in the runtime's modules */
    struct net_conn *conn;        /* NULL once the connection closed */
    bool head_only, done;
    bool over_tls; /* the request came in on the TLS listener */
    enum srv_debug_kind kind;
};

static void fill(struct hd_shard *s, void *slot, void *arg)
{
    const struct varz_req *r = arg;
    struct varz_slot *v = slot;
    struct srv_shard *ds = srv_shard_at(s, r->instance);
    if (ds) {
        v->ctr = ds->ctr;
        v->ctr.clients_total = ds->peers.count; /* keys local or reachable via the mesh */
        v->ctr.watchers = ds->watch_count;
        v->ctr.prelogin_now = ds->prelogin.count;
        v->ctr.frame_addrs = srv_frame_addrs_live(ds);
        v->ctr.mesh_links_configured = 0; /* this shard's links (id % shards), self excluded */
        for (unsigned i = hd_shard_id(s); ds->links && i < ds->cfg->mesh_count;
             i += hd_shard_count(s))
            v->ctr.mesh_links_configured += !ds->links[i].self;
        v->ctr.stun_read_error = ds->stun ? net_udp_stats(ds->stun)->recv_errors : 0;
        v->queue_avg_ms = ds->queue_avg_ms;
        v->rate = *srv_rate_current(ds);
        v->guests = ds->guests.count;
        if (r->kind == SRV_DEBUG_CHECK)
            srv_debug_check_shard(ds, v->check, sizeof(v->check));
        if (r->kind == SRV_DEBUG_KEYS || r->kind == SRV_DEBUG_VARZ)
            srv_acct_fill(ds, &v->acct);
    }
    if (srv_needs_tls(r->cfg))
        v->tls = *tls_shard_stats(s);
    v->busy_ppm = hd_shard_busy_ppm(hd_shard_runtime(s), hd_shard_id(s));
    v->loop = *hd_shard_stats(s);
    v->stalls = hd_shard_stalls(s);
    v->stall_max_ms = hd_shard_stall_max_ms(s);
    for (unsigned i = 0; i < hd_frame_classes_count(s); i++) {
        struct hd_pool_stats st;
        hd_frame_stats(s, i, &st);
        v->frames_in_use += st.in_use;
        v->frames_exhausted += st.exhausted;
    }
}

void srv_text_put(struct srv_text *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(o->buf + o->len, o->cap - o->len, fmt, ap);
    va_end(ap);
    if (n > 0)
        o->len += (size_t)n < o->cap - o->len ? (size_t)n : o->cap - o->len - 1;
}

/* ---------------------------------------------------------------- the table */

/* How a row's value is read: ONE (an 8-byte value at off, summed over the shards), LABELS (n
 * of them at off, off + 8, ...: one series per label value), COUNTED (as LABELS, only the
 * labels counted so far: derper's LabelMap), HIST (derper's metrics.Histogram: n bounds, n + 1
 * buckets at off, the sum after them), PER_SHARD (ONE, a series per shard), FN (its own). */
enum how { ONE, LABELS, COUNTED, HIST, PER_SHARD, FN };
/* When a row is there: always, with -rate-config, in TLS mode (derper's TLS listener and TLS
 * request counts), when the runtime has hderp's TLS layer (its own counts). */
enum when { ALWAYS, W_RATE, W_TLS, W_TLS_LAYER };

struct series;
struct ctx {
    struct srv_text *o;
    const struct varz_slot *v;
    unsigned count;
    const struct srv_config *cfg;
    bool over_tls; /* the request being answered came in over TLS */
};
typedef void row_fn(const struct ctx *x, const struct series *s, bool json);

struct series {
    const char *name; /* Prometheus; NULL: /debug/vars only */
    const char *type; /* counter, gauge, histogram, summary; NULL: untyped (no TYPE line) */
    const char *vars; /* the path in /debug/vars; NULL: /debug/varz only */
    uint8_t how, when;
    uint16_t n;
    size_t off;                /* in struct varz_slot */
    const char *label;         /* LABELS, COUNTED: its name; NULL: labels[] are whole pairs */
    const char *const *labels; /* ... the n values */
    const uint16_t *bounds;    /* HIST */
    row_fn *fn;                /* FN */
};

static int64_t value_at(const struct varz_slot *v, size_t off)
{
    int64_t x;
    memcpy(&x, (const char *)v + off, sizeof(x));
    return x;
}

static int64_t sum_at(const struct ctx *x, size_t off)
{
    int64_t s = 0;
    for (unsigned i = 0; i < x->count; i++)
        s += value_at(&x->v[i], off);
    return s;
}

#define OFF(field) offsetof(struct varz_slot, field)
#define C(name, type, vars, field)                                                                 \
    {                                                                                              \
        name, type, vars, ONE, ALWAYS, 1, OFF(ctr.field), NULL, NULL, NULL, NULL                   \
    }
#define CW(name, type, vars, field, when)                                                          \
    {                                                                                              \
        name, type, vars, ONE, when, 1, OFF(ctr.field), NULL, NULL, NULL, NULL                     \
    }
#define L(how, name, type, vars, field, label, labels, when)                                       \
    {                                                                                              \
        name, type, vars, how, when, HD_ARRAY_SIZE(labels), OFF(field), label, labels, NULL, NULL  \
    }
#define H(name, vars, field, bounds)                                                               \
    {                                                                                              \
        name, "histogram", vars, HIST, ALWAYS, HD_ARRAY_SIZE(bounds), OFF(ctr.field), NULL, NULL,  \
            bounds, NULL                                                                           \
    }
#define S(name, type, field)                                                                       \
    {                                                                                              \
        name, type, NULL, PER_SHARD, ALWAYS, 1, OFF(field), NULL, NULL, NULL, NULL                 \
    }
#define F(name, type, vars, fn, when)                                                              \
    {                                                                                              \
        name, type, vars, FN, when, 0, 0, NULL, NULL, NULL, fn                                     \
    }
#define T(name, field)                                                                             \
    {                                                                                              \
        name, "counter", NULL, ONE, W_TLS_LAYER, 1, OFF(tls.field), NULL, NULL, NULL, NULL         \
    }

/* The pairs of derp_packets_dropped / derp_bytes_dropped, as packets_dropped[reason][kind]. */
#define DROP(r) "reason=\"" r "\",kind=\"disco\"", "reason=\"" r "\",kind=\"other\""
static const char *const drop_pairs[SRV_DROPS * SRV_KINDS] = {
    DROP("unknown_dest"), DROP("unknown_dest_on_fwd"), DROP("gone_disconnected"),
    DROP("queue_head"),   DROP("queue_tail"),          DROP("write_error"),
    DROP("dup_client")};
_Static_assert(SRV_DROPS == 7, "drop_pairs names every reason");
static const char *const kind_names[SRV_KINDS] = {"disco", "other"};
static const char *const rtt_names[SRV_RTT_LABELS] = {"10ms",  "20ms",  "50ms", "100ms", "150ms",
                                                      "250ms", "500ms", "inf",  "error"};
static const char *const stun_req_names[] = {"success", "not_stun", "write_error", "read_error"};
static const char *const stun_family_names[] = {"ipv4", "ipv6"};
static const char *const tls_versions[] = {"1.3"}; /* hderp speaks TLS 1.3 only */
static const char *const quota_why[SRV_QUOTA_WHYS] = {"daily", "monthly"};
static const char *const closed_why[] = {"reserve", "share", "addr"};
static const char *const prelogin_caps[] = {"shard", "addr"};
static const char *const frames_why[] = {"share", "reserve", "addr"};
static const char *const tls_modes[] = {"userspace", "ktls"};

static row_fn fds_row, version_row, uptime_row, start_row, boot_row, cmdline_row, queue_row,
    remote_row, rate_bps_row, rate_burst_row, tls_active_row, derp_version_row, proc_row,
    states_loaded_row, summaries_row, acct_row, queried_row;

static const struct series series[] = {
    F("derp_current_file_descriptors", "gauge", "derp.gauge_current_file_descriptors", fds_row,
      ALWAYS),
    C("derp_accepts", "counter", "derp.accepts", accepts),
    C("derp_accepts_rate_limited", "counter", NULL, accepts_refused),
    C("derp_proxy_headers", "counter", NULL, proxy_headers),
    C("derp_proxy_untrusted_refused", "counter", NULL, proxy_untrusted),
    C("derp_proxy_bad_headers", "counter", NULL, proxy_bad_headers),
    C("derp_bytes_received", "counter", "derp.bytes_received", bytes_received),
    C("derp_bytes_sent", "counter", "derp.bytes_sent", bytes_sent),
    C("derp_packets_received", "counter", "derp.packets_received", packets_received),
    C("derp_packets_sent", "counter", "derp.packets_sent", packets_sent),
    L(LABELS, "derp_packets_received_kind", "counter", "derp.counter_packets_received_kind",
      ctr.packets_received_kind, "kind", kind_names, ALWAYS),
    C("derp_got_ping", "counter", "derp.got_ping", got_ping),
    C("derp_sent_pong", "counter", "derp.sent_pong", sent_pong),
    C("derp_unknown_frames", "counter", "derp.unknown_frames", unknown_frames),
    C("derp_home_moves_in", "counter", "derp.home_moves_in", home_moves_in),
    C("derp_home_moves_out", "counter", "derp.home_moves_out", home_moves_out),
    C("derp_peer_gone_disconnected_frames", "counter", "derp.peer_gone_disconnected_frames",
      peer_gone_disconnected_frames),
    C("derp_peer_gone_not_here_frames", "counter", "derp.peer_gone_not_here_frames",
      peer_gone_not_here_frames),
    C("derp_packets_forwarded_in", "counter", "derp.packets_forwarded_in", packets_forwarded_in),
    C("derp_packets_forwarded_out", "counter", "derp.packets_forwarded_out", packets_forwarded_out),
    C("derp_sclient_write_timeouts", "counter", "derp.sclient_write_timeouts",
      sclient_write_timeouts),
    C("derp_total_dup_client_conns", "counter", "derp.counter_total_dup_client_conns",
      total_dup_client_conns),
    C("derp_current_connections", "gauge", "derp.gauge_current_connections", current_connections),
    C("derp_current_home_connections", "gauge", "derp.gauge_current_home_connections",
      current_home_connections),
    C("derp_current_notideal_connections", "gauge", "derp.gauge_current_notideal_connections",
      current_notideal_connections),
    C("derp_clients_total", "gauge", "derp.gauge_clients_total", clients_total),
    C("derp_clients_local", "gauge", "derp.gauge_clients_local", clients_local),
    F("derp_clients_remote", "gauge", "derp.gauge_clients_remote", remote_row, ALWAYS),
    C("derp_multiforwarder_created", "counter", "derp.multiforwarder_created",
      multiforwarder_created),
    C("derp_multiforwarder_deleted", "counter", "derp.multiforwarder_deleted",
      multiforwarder_deleted),
    C("derp_packet_forwarder_delete_other_value", "counter",
      "derp.packet_forwarder_delete_other_value", packet_forwarder_delete_other_value),
    C("derp_mesh_links_ready", "gauge", NULL, mesh_links_ready),
    C("derp_mesh_forward_dropped", "counter", NULL, mesh_forward_dropped),
    C("derp_current_dup_client_keys", "gauge", "derp.gauge_current_dup_client_keys",
      current_dup_client_keys),
    C("derp_current_dup_client_conns", "gauge", "derp.gauge_current_dup_client_conns",
      current_dup_client_conns),
    C("derp_watchers", "gauge", "derp.gauge_watchers", watchers),
    C("derp_websocket_accepts", "counter", "derp_websocket_accepts", websocket_accepts),
    F("derp_average_queue_duration_ms", NULL, "derp.average_queue_duration_ms", queue_row, ALWAYS),
    H("derp_mesh_update_batch_size", "derp.counter_mesh_update_batch_size", mesh_batch,
      srv_mesh_batch_bounds),
    H("derp_mesh_update_loop_count", "derp.counter_mesh_update_loop_count", mesh_loops,
      srv_mesh_loop_bounds),
    H("derp_buffered_write_frames", "derp.counter_buffered_write_frames", write_frames,
      srv_write_frames_bounds),
    L(COUNTED, "derp_tcp_rtt", "counter", "derp.counter_tcp_rtt", ctr.tcp_rtt, "le", rtt_names,
      ALWAYS),
    F(NULL, NULL, "derp.version", derp_version_row, ALWAYS),
    L(LABELS, "derp_packets_dropped", "counter", "derp_packets_dropped", ctr.packets_dropped, NULL,
      drop_pairs, ALWAYS),
    L(LABELS, "derp_bytes_dropped", "counter", "derp_bytes_dropped", ctr.bytes_dropped, NULL,
      drop_pairs, ALWAYS),
    /* net/stunserver's */
    L(LABELS, "stun_requests", "counter", "stun.counter_requests", ctr.stun_success, "disposition",
      stun_req_names, ALWAYS),
    L(LABELS, "stun_addrfamily", "counter", "stun.counter_addrfamily", ctr.stun_ipv4, "family",
      stun_family_names, ALWAYS),
    /* cmd/derper's: its TLS listener and the TLS version of HTTP requests */
    CW("tls_listener_accepted_connections", "counter", "tls_listener.counter_accepted_connections",
       listener_accepted, W_TLS),
    CW("tls_listener_rejected_connections", "counter", "tls_listener.counter_rejected_connections",
       accepts_refused, W_TLS),
    L(COUNTED, "derper_tls_request_version", NULL, "derper_tls_request_version", ctr.tls_requests,
      "version", tls_versions, W_TLS),
    F("derper_tls_active_version", "gauge", "gauge_derper_tls_active_version", tls_active_row,
      W_TLS),
    /* cmd/derper's bootstrap DNS (tsweb strips varz's counter_) */
    C("bootstrap_dns_requests", "counter", "counter_bootstrap_dns_requests", bootdns_requests),
    C("bootstrap_dns_published_hits", "counter", "counter_bootstrap_dns_published_hits",
      bootdns_pub_hits),
    C("bootstrap_dns_published_misses", "counter", "counter_bootstrap_dns_published_misses",
      bootdns_pub_misses),
    C("bootstrap_dns_unpublished_hits", "counter", "counter_bootstrap_dns_unpublished_hits",
      bootdns_unpub_hits),
    C("bootstrap_dns_unpublished_misses", "counter", "counter_bootstrap_dns_unpublished_misses",
      bootdns_unpub_misses),
    C("bootstrap_dns_unpublished_percent_misses", "counter",
      "counter_bootstrap_dns_unpublished_percent_misses", bootdns_unpub_pct_misses),
    F("bootstrap_dns_queried_domains", "counter", "counter_bootstrap_dns_queried_domains",
      queried_row, ALWAYS),
    /* tsweb's, and the Prometheus client's process collector */
    F("version", NULL, "version", version_row, ALWAYS),
    F("uptime_sec", "counter", "counter_uptime_sec", uptime_row, ALWAYS),
    F("process_start_unix_time", NULL, "process_start_unix_time", start_row, ALWAYS),
    F("node_boot_time_seconds", NULL, "node_boot_time_seconds", boot_row, ALWAYS),
    F(NULL, NULL, "cmdline", cmdline_row, ALWAYS), F("process_", NULL, NULL, proc_row, ALWAYS),
    /* -rate-config (spec §9): only with a config file, as derper */
    F("derp_rate_limit_per_client_bytes_per_second", "gauge",
      "derp.rate_limit_per_client_bytes_per_second", rate_bps_row, W_RATE),
    F("derp_rate_limit_per_client_burst_bytes", "gauge", "derp.rate_limit_per_client_burst_bytes",
      rate_burst_row, W_RATE),
    CW("derp_rate_limit_per_client_waited", "counter", "derp.rate_limit_per_client_waited",
       rate_limit_waited, W_RATE),
    CW("hderp_rate_limit_key_waited", "counter", NULL, rate_limit_waited_key, W_RATE),
    L(LABELS, "hderp_quota_dropped_packets", "counter", NULL, ctr.quota_dropped, "reason",
      quota_why, W_RATE),
    L(LABELS, "hderp_quota_dropped_bytes", "counter", NULL, ctr.quota_dropped_bytes, "reason",
      quota_why, W_RATE),
    /* hderp's own (METRICS.md) */
    C("hderp_mesh_refused", "counter", NULL, mesh_refused),
    C("hderp_mesh_conns", "gauge", NULL, mesh_conns),
    C("hderp_mesh_conns_refused", "counter", NULL, mesh_conns_refused),
    L(LABELS, "hderp_watchers_closed", "counter", NULL, ctr.watchers_closed, "why", closed_why,
      ALWAYS),
    C("hderp_mesh_links_configured", "gauge", NULL, mesh_links_configured),
    C("hderp_handshake_errors", "counter", NULL, handshake_errors),
    C("hderp_admit_refused", "counter", NULL, admit_refused),
    C("hderp_admit_errors", "counter", NULL, admit_errors),
    C("hderp_admit_cache_hits", "counter", NULL, admit_cache_hits),
    C("hderp_admit_rechecks", "counter", NULL, admit_rechecks),
    C("hderp_admit_recheck_errors", "counter", NULL, admit_recheck_errors),
    C("hderp_admit_revoked", "counter", NULL, admit_revoked),
    C("hderp_allowlist_refused", "counter", NULL, allowlist_refused),
    C("hderp_bus_dropped", "counter", NULL, bus_dropped),
    C("hderp_sender_waits", "counter", NULL, sender_waits),
    C("hderp_sender_wait_timeouts", "counter", NULL, sender_wait_timeouts),
    C("hderp_placement_moves", "counter", NULL, placement_moves),
    C("hderp_placement_returns", "counter", NULL, placement_returns),
    C("hderp_placement_packs", "counter", NULL, placement_packs),
    C("hderp_placement_spreads", "counter", NULL, placement_spreads),
    C("hderp_conns_accepted", "counter", NULL, conns_accepted),
    C("hderp_prelogin_conns", "gauge", NULL, prelogin_now),
    L(LABELS, "hderp_prelogin_refused", "counter", NULL, ctr.prelogin_refused_shard, "cap",
      prelogin_caps, ALWAYS),
    C("hderp_deadline_closes", "counter", NULL, deadline_closes),
    L(LABELS, "hderp_frames_refused", "counter", NULL, ctr.frames_share_dropped, "why", frames_why,
      ALWAYS),
    C("hderp_frame_addrs", "gauge", NULL, frame_addrs),
    C("hderp_frame_addrs_spilled", "counter", NULL, frame_addrs_spilled),
    C("hderp_subscriptions_refused", "counter", NULL, subs_refused),
    C("hderp_ctl_dropped", "counter", NULL, ctl_dropped),
    /* the TLS layer: how handshakes ended, each connection's record path (kTLS or userspace),
     * the connection states an upgrade moved (saved here, loaded in the successor, by mode) */
    T("hderp_tls_handshakes_done", handshakes_done),
    T("hderp_tls_handshakes_failed", handshakes_failed),
    L(LABELS, "hderp_tls_conns", "counter", NULL, tls.conns_userspace, "mode", tls_modes,
      W_TLS_LAYER),
    T("hderp_tls_ktls_failed", ktls_failed), T("hderp_tls_states_saved", states_saved),
    F("hderp_tls_states_loaded", "counter", NULL, states_loaded_row, W_TLS_LAYER),
    /* the loop's own figures, per shard, so an uneven load shows: the wait policy's cost
     * (io_uring_enter calls, sleeps, min-wait sleeps, spins), the bus between the shards,
     * the frame pools, placement and how busy each shard was lately */
    F("hderp_loop_", "summary", NULL, summaries_row, ALWAYS),
    S("hderp_loop_ticks", "counter", loop.ticks), S("hderp_loop_enters", "counter", loop.enters),
    S("hderp_loop_sleeps", "counter", loop.sleeps),
    S("hderp_loop_min_waits", "counter", loop.min_waits),
    S("hderp_loop_inline_waits", "counter", loop.inline_waits),
    S("hderp_loop_spins", "counter", loop.spins),
    S("hderp_loop_spins_won", "counter", loop.spins_won),
    S("hderp_loop_bus_sent", "counter", loop.bus_sent),
    S("hderp_loop_wakes_sent", "counter", loop.wakes_sent),
    S("hderp_loop_wakes_received", "counter", loop.wakes_received),
    S("hderp_loop_frames_returned", "counter", loop.frames_returned),
    S("hderp_loop_stalls", "counter", stalls), S("hderp_loop_stall_max_ms", "gauge", stall_max_ms),
    S("hderp_bus_full", "counter", loop.bus_full), S("hderp_frames_in_use", "gauge", frames_in_use),
    S("hderp_frames_exhausted", "counter", frames_exhausted),
    S("hderp_placement_guests", "gauge", guests), S("hderp_loop_busy_ppm", "gauge", busy_ppm),
    F("hderp_key_", NULL, NULL, acct_row, ALWAYS), /* per-key accounting's */
};

/* ---------------------------------------------------------------- the rows' own printers */

/* A plain value: "name value" (with its TYPE line when it has a type), or a JSON value. */
static void put_value(const struct ctx *x, const struct series *s, bool json, const char *value)
{
    if (json)
        srv_text_put(x->o, "%s", value);
    else if (s->type)
        srv_text_put(x->o, "# TYPE %s %s\n%s %s\n", s->name, s->type, s->name, value);
    else
        srv_text_put(x->o, "%s %s\n", s->name, value);
}

static void put_int(const struct ctx *x, const struct series *s, bool json, int64_t v)
{
    char b[32];
    snprintf(b, sizeof(b), "%lld", (long long)v);
    put_value(x, s, json, b);
}

static void fds_row(const struct ctx *x, const struct series *s, bool json)
{
    int64_t fds = srv_proc_fds();
    if (fds >= 0)
        put_int(x, s, json, fds);
    else if (json)
        srv_text_put(x->o, "null");
}

static void remote_row(const struct ctx *x, const struct series *s, bool json)
{
    put_int(x, s, json, sum_at(x, OFF(ctr.clients_total)) - sum_at(x, OFF(ctr.clients_local)));
}

/* The shards' moving averages, averaged over the shards that wrote packets. */
static void queue_row(const struct ctx *x, const struct series *s, bool json)
{
    double sum = 0;
    unsigned n = 0;
    for (unsigned i = 0; i < x->count; i++)
        if (x->v[i].ctr.packets_sent) {
            sum += x->v[i].queue_avg_ms;
            n++;
        }
    char b[32];
    snprintf(b, sizeof(b), "%g", n ? sum / n : 0.0);
    put_value(x, s, json, b);
}

static void derp_version_row(const struct ctx *x, const struct series *s, bool json)
{
    (void)s;
    if (json)
        srv_text_put(x->o, "\"%s\"", SRV_VERSION);
}

/* tsweb's version series: the version as a label, binary the program's name. */
static void version_row(const struct ctx *x, const struct series *s, bool json)
{
    (void)s;
    if (json)
        srv_text_put(x->o, "\"%s\"", SRV_VERSION);
    else
        srv_text_put(x->o, "version{version=\"%s\",binary=\"hderp-server\"} 1\n", SRV_VERSION);
}

static void uptime_row(const struct ctx *x, const struct series *s, bool json)
{
    put_int(x, s, json, srv_proc_uptime_s());
}

static void queried_row(const struct ctx *x, const struct series *s, bool json)
{
    put_int(x, s, json, (int64_t)srv_bootdns_queried_domains());
}

static void start_row(const struct ctx *x, const struct series *s, bool json)
{
    put_int(x, s, json, srv_proc_start_unix());
}

static void boot_row(const struct ctx *x, const struct series *s, bool json)
{
    int64_t b = srv_proc_boot_unix();
    if (b > 0)
        put_int(x, s, json, b);
    else if (json)
        srv_text_put(x->o, "null");
}

static void cmdline_row(const struct ctx *x, const struct series *s, bool json)
{
    (void)s;
    if (json)
        srv_proc_cmdline_json(x->o);
}

static void proc_row(const struct ctx *x, const struct series *s, bool json)
{
    (void)s;
    if (!json)
        srv_proc_format_varz(x->o);
}

/* The limit as shard 0 applies it; derper applies an empty config when the rate is 0 (no
 * limit): its burst reads 0 then (the burst after raising it to 65568 otherwise). */
static void rate_bps_row(const struct ctx *x, const struct series *s, bool json)
{
    put_int(x, s, json, (int64_t)x->v[0].rate.bytes_per_sec);
}

static void rate_burst_row(const struct ctx *x, const struct series *s, bool json)
{
    put_int(x, s, json, x->v[0].rate.bytes_per_sec ? (int64_t)x->v[0].rate.burst : 0);
}

/* derper counts an HTTP request over TLS as active while its handler runs: a DERP connection
 * for its whole life, and the request being answered (this one, unless it came in on port 80).
 * hderp: its DERP connections (in TLS mode all came in over TLS), and this request. */
static void tls_active_row(const struct ctx *x, const struct series *s, bool json)
{
    int64_t n = sum_at(x, OFF(ctr.current_connections)) + x->over_tls;
    if (json)
        srv_text_put(x->o, "{\"%s\": %lld}", tls_versions[0], (long long)n);
    else
        srv_text_put(x->o, "# TYPE %s gauge\n%s{version=\"%s\"} %lld\n", s->name, s->name,
                     tls_versions[0], (long long)n);
}

static void states_loaded_row(const struct ctx *x, const struct series *s, bool json)
{
    (void)json;
    int64_t loaded = sum_at(x, OFF(tls.states_loaded));
    int64_t ktls = sum_at(x, OFF(tls.states_loaded_ktls));
    srv_text_put(x->o, "# TYPE %s counter\n%s{mode=\"ktls\"} %lld\n%s{mode=\"userspace\"} %lld\n",
                 s->name, s->name, (long long)ktls, s->name, (long long)(loaded - ktls));
}

static void summary(const struct ctx *x, const char *name, size_t off)
{
    static const double qs[] = {0.5, 0.9, 0.99, 0.999};
    srv_text_put(x->o, "# TYPE %s summary\n", name);
    for (unsigned i = 0; i < x->count; i++) {
        const struct hd_hist *h = (const struct hd_hist *)((const char *)&x->v[i] + off);
        for (unsigned q = 0; q < HD_ARRAY_SIZE(qs); q++)
            srv_text_put(x->o, "%s{shard=\"%u\",quantile=\"%g\"} %llu\n", name, i, qs[q],
                         (unsigned long long)hd_hist_quantile(h, qs[q]));
    }
}

static void summaries_row(const struct ctx *x, const struct series *s, bool json)
{
    (void)s, (void)json;
    summary(x, "hderp_loop_tick_ns", OFF(loop.tick_ns));
    summary(x, "hderp_loop_cqes_per_tick", OFF(loop.cqes_per_tick));
}

static void acct_row(const struct ctx *x, const struct series *s, bool json)
{
    (void)s, (void)json;
    srv_acct_format_varz(x->o, &x->v->acct, sizeof(*x->v), x->count);
}

/* ---------------------------------------------------------------- the printer */

static void put_labels(const struct ctx *x, const struct series *s, bool json)
{
    if (json && s->label == NULL) { /* derper's MultiLabelMap shows as its type name */
        srv_text_put(x->o, "\"MultiLabelMap\"");
        return;
    }
    if (!json && s->type)
        srv_text_put(x->o, "# TYPE %s %s\n", s->name, s->type);
    if (json)
        srv_text_put(x->o, "{");
    for (unsigned i = 0, first = 1; i < s->n; i++) {
        int64_t v = sum_at(x, s->off + 8 * i);
        if (s->how == COUNTED && v == 0)
            continue;
        if (json)
            srv_text_put(x->o, "%s\"%s\": %lld", first ? "" : ", ", s->labels[i], (long long)v);
        else if (s->label)
            srv_text_put(x->o, "%s{%s=\"%s\"} %lld\n", s->name, s->label, s->labels[i],
                         (long long)v);
        else
            srv_text_put(x->o, "%s{%s} %lld\n", s->name, s->labels[i], (long long)v);
        first = 0;
    }
    if (json)
        srv_text_put(x->o, "}");
}

/* derper's Histogram: cumulative buckets by their bound ("+Inf": the count), sum, count. */
static void put_hist(const struct ctx *x, const struct series *s, bool json)
{
    int64_t cum = 0;
    if (json)
        srv_text_put(x->o, "{");
    else
        srv_text_put(x->o, "# TYPE %s histogram\n", s->name);
    for (unsigned i = 0; i <= s->n; i++) {
        cum += sum_at(x, s->off + 8 * i);
        char le[16];
        if (i < s->n)
            snprintf(le, sizeof(le), "%u", (unsigned)s->bounds[i]);
        else
            snprintf(le, sizeof(le), "+Inf");
        if (json)
            srv_text_put(x->o, "%s\"%s\": %lld", i ? "," : "", le, (long long)cum);
        else
            srv_text_put(x->o, "%s_bucket{le=\"%s\"} %lld\n", s->name, le, (long long)cum);
    }
    long long sum = (long long)sum_at(x, s->off + 8 * (s->n + 1));
    if (json)
        srv_text_put(x->o, ",\"sum\": %lld,\"count\": %lld}", sum, (long long)cum);
    else
        srv_text_put(x->o, "%s_sum %lld\n%s_count %lld\n", s->name, sum, s->name, (long long)cum);
}

static void put_row(const struct ctx *x, const struct series *s, bool json)
{
    switch (s->how) {
    case ONE:
        put_int(x, s, json, sum_at(x, s->off));
        break;
    case LABELS:
    case COUNTED:
        put_labels(x, s, json);
        break;
    case HIST:
        put_hist(x, s, json);
        break;
    case PER_SHARD:
        srv_text_put(x->o, "# TYPE %s %s\n", s->name, s->type);
        for (unsigned i = 0; i < x->count; i++)
            srv_text_put(x->o, "%s{shard=\"%u\"} %llu\n", s->name, i,
                         (unsigned long long)value_at(&x->v[i], s->off));
        break;
    default:
        s->fn(x, s, json);
    }
}

static bool row_on(const struct ctx *x, const struct series *s)
{
    switch (s->when) {
    case W_RATE:
        return x->cfg->rate_config_path != NULL;
    case W_TLS:
        return x->cfg->tls;
    case W_TLS_LAYER:
        return srv_needs_tls(x->cfg);
    default:
        return true;
    }
}

static void format_varz(const struct ctx *x)
{
    for (size_t i = 0; i < HD_ARRAY_SIZE(series); i++)
        if (series[i].name && row_on(x, &series[i]))
            put_row(x, &series[i], false);
}

static int by_vars(const void *a, const void *b)
{
    return strcmp((*(const struct series *const *)a)->vars,
                  (*(const struct series *const *)b)->vars);
}

/* expvar's JSON: the top-level names sorted, a group ("derp.accepts") as an object of its
 * members, sorted too (every member of a group sorts together: '.' before '_' and letters). */
static void format_vars(const struct ctx *x)
{
    const struct series *rows[HD_ARRAY_SIZE(series)];
    size_t n = 0;
    for (size_t i = 0; i < HD_ARRAY_SIZE(series); i++)
        if (series[i].vars && row_on(x, &series[i]))
            rows[n++] = &series[i];
    qsort(rows, n, sizeof(rows[0]), by_vars);
    srv_text_put(x->o, "{\n");
    size_t open_len = 0; /* the open group's name length (0: none) */
    for (size_t i = 0; i < n; i++) {
        const char *path = rows[i]->vars, *dot = strchr(path, '.');
        size_t glen = dot ? (size_t)(dot - path) : 0;
        bool same = open_len && glen == open_len && strncmp(path, rows[i - 1]->vars, glen) == 0;
        if (open_len && !same)
            srv_text_put(x->o, "}");
        if (i && !same)
            srv_text_put(x->o, ",\n");
        if (dot && !same)
            srv_text_put(x->o, "\"%.*s\": {", (int)glen, path);
        else if (same)
            srv_text_put(x->o, ", ");
        srv_text_put(x->o, "\"%s\": ", dot ? dot + 1 : path);
        put_row(x, rows[i], true);
        open_len = glen;
    }
    srv_text_put(x->o, "%s\n}\n", open_len ? "}" : "");
}

/* /debug/check: derper's words when every shard is consistent, else what is not (500). */
static uint16_t format_check(const struct ctx *x)
{
    bool bad = false;
    for (unsigned i = 0; i < x->count; i++)
        if (x->v[i].check[0]) {
            srv_text_put(x->o, "%sshard %u: %s", bad ? ", " : "", i, x->v[i].check);
            bad = true;
        }
    if (!bad)
        srv_text_put(x->o, "derp.Server ConsistencyCheck okay");
    else
        srv_text_put(x->o, "\n");
    return bad ? 500 : 200;
}

/* ---------------------------------------------------------------- the request */

static void done(struct hd_shard *s, void *slots, unsigned count, void *arg)
{
    (void)s;
    struct varz_req *r = arg;
    r->done = true;
    if (r->conn == NULL) {
        free(r);
        return;
    }
    struct srv_text o = {.cap = VARZ_TEXT_MAX};
    o.buf = malloc(o.cap);
    if (o.buf == NULL) {
        net_conn_close(r->conn, -ENOMEM, false);
        return;
    }
    const struct varz_slot *v = slots;
    struct ctx x = {&o, v, count, r->cfg, r->over_tls};
    uint16_t status = 200;
    const char *type = "application/json";
    if (r->kind == SRV_DEBUG_KEYS) {
        srv_acct_format_json(&o, &v->acct, sizeof(*v), count);
    } else if (r->kind == SRV_DEBUG_VARS) {
        format_vars(&x);
    } else if (r->kind == SRV_DEBUG_CHECK) {
        status = format_check(&x);
        type = "text/plain; charset=utf-8";
    } else {
        format_varz(&x);
        type = "text/plain; version=0.0.4";
    }
    /* No body without its head; a failed send (no frames, queue cap) drops the answer: the
     * connection closes at once instead of flushing half of it. */
    int rc = srv_debug_reply(r->conn, status, type, o.buf, o.len, false, r->head_only);
    free(o.buf);
    if (rc < 0) {
        hd_log_rl(HD_LOG_WARN, "/debug: answer not sent: %s", strerror(-rc));
        net_conn_close(r->conn, rc, false);
        return;
    }
    net_conn_close(r->conn, 0, true); /* on_close frees r */
}

static ssize_t varz_data(struct net_conn *c, const uint8_t *data, size_t len)
{
    (void)c, (void)data;
    return (ssize_t)len; /* nothing more is read on this connection */
}

static void varz_closed(struct net_conn *c, int reason)
{
    (void)reason;
    struct varz_req *r = net_conn_app(c);
    /* as http_close: an HTTP request (the varz connection never moves: this shard's relay) */
    srv_prelogin_leave(srv_shard_at(net_conn_shard(c), r->instance), net_conn_peer(c));
    r->conn = NULL;
    if (r->done)
        free(r);
}

static const struct net_conn_handler varz_handler = {
    .on_data = varz_data,
    .on_close = varz_closed,
};

void srv_debug_collect(struct srv_shard *ds, struct net_conn *c, bool head_only,
                       enum srv_debug_kind kind, bool over_tls)
{
    struct varz_req *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        net_conn_close(c, -ENOMEM, false);
        return;
    }
    r->cfg = ds->cfg;
    r->instance = ds->instance;
    r->conn = c;
    r->head_only = head_only;
    r->kind = kind;
    r->over_tls = over_tls;
    net_conn_set_app(c, &varz_handler, r);
    net_conn_pause_recv(c, true); /* one request at a time: the answer comes later */
    int rc = hd_collect(ds->s, sizeof(struct varz_slot), fill, done, r);
    if (rc < 0) {
        r->done = true;
        char buf[256];
        int n = net_http_write_error(buf, sizeof(buf), 503, head_only);
        if (n > 0 && net_conn_send_copy(c, buf, (size_t)n) < 0)
            n = -1; /* not sent: close at once */
        net_conn_close(c, 0, n > 0);
    }
}
