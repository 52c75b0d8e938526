/* server_metrics.c - /debug/varz: derper's metric names (spec §9) in Prometheus text, summed
 * over shards with hd_collect, plus hderp's own per-shard loop figures, the TLS layer's, and the
 * per-key accounting (server_account_out.c), which /debug/keys shows as JSON. Runs on the shard
 * that got the request; the answer is written once every shard has filled its slot. */
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/server_account.h"

const char *const srv_drop_names[SRV_DROPS] = {
    "unknown_dest", "unknown_dest_on_fwd", "gone_disconnected", "queue_head",
    "queue_tail",   "write_error",         "dup_client",
};
static const char *const kind_names[SRV_KINDS] = {"disco", "other"};

struct varz_slot {
    struct srv_counters ctr;
    struct hd_shard_stats loop;
    uint64_t frames_in_use, frames_exhausted;
    uint64_t stalls, stall_max_ms; /* the stall watchdog's (hd_shard_stalls) */
    uint64_t guests, busy_ppm;     /* guests here; hd_shard_busy_ppm */
    struct srv_rate rate;          /* -rate-config as the shard applies it */
    struct tls_shard_stats tls;    /* the TLS layer's (zero when the runtime has none) */
    struct srv_acct_slot acct;     /* per-key accounting (the large part: last) */
};

/* The answer: the fixed series, and per-key accounting's (a few lines per named key). */
#define VARZ_TEXT_MAX (64u * 1024 + (SRV_ACCT_KEYS_MAX + 4 * SRV_ACCT_JSON_TOP) * 640u)

struct varz_req {
    const struct srv_config *cfg; /* the relay asked: its counters on every shard */
    unsigned instance;            /* ... its place in the runtime's modules */
    struct net_conn *conn;        /* NULL once the connection closed */
    bool head_only, done;
    bool keys; /* /debug/keys (JSON) */
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
        v->rate = *srv_rate_current(ds);
        v->guests = ds->guests.count;
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

/* The sum over the shards' slots of one member (a path in struct varz_slot). */
#define SUM_OF(member)                                                                             \
    ({                                                                                             \
        int64_t s_ = 0;                                                                            \
        for (unsigned i_ = 0; i_ < count; i_++)                                                    \
            s_ += (int64_t)v[i_].member;                                                           \
        s_;                                                                                        \
    })
#define SUM(field) SUM_OF(ctr.field)

static void put_metric(struct srv_text *o, const char *name, const char *type, int64_t value)
{
    srv_text_put(o, "# TYPE derp_%s %s\nderp_%s %lld\n", name, type, name, (long long)value);
}

/* derper's STUN server (net/stunserver): requests by disposition, answered ones by family. */
static void format_stun(struct srv_text *o, const struct varz_slot *v, unsigned count)
{
    srv_text_put(o, "# TYPE stun_requests counter\n");
    srv_text_put(o, "stun_requests{disposition=\"success\"} %lld\n", (long long)SUM(stun_success));
    srv_text_put(o, "stun_requests{disposition=\"not_stun\"} %lld\n",
                 (long long)SUM(stun_not_stun));
    srv_text_put(o, "stun_requests{disposition=\"write_error\"} %lld\n",
                 (long long)SUM(stun_write_error));
    /* derper's four dispositions are always there, read_error too (a failed receive) */
    srv_text_put(o, "stun_requests{disposition=\"read_error\"} %lld\n",
                 (long long)SUM(stun_read_error));
    srv_text_put(o, "# TYPE stun_addrfamily counter\n");
    srv_text_put(o, "stun_addrfamily{family=\"ipv4\"} %lld\n", (long long)SUM(stun_ipv4));
    srv_text_put(o, "stun_addrfamily{family=\"ipv6\"} %lld\n", (long long)SUM(stun_ipv6));
}

/* derper's gauge_current_file_descriptors (metrics.CurrentFDs): the entries of /proc/self/fd,
 * counted at the scrape (a cold path: one directory read). -1 if it cannot be read. */
static int64_t current_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL)
        return -1;
    int64_t n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static void format_derp(struct srv_text *o, const struct varz_slot *v, unsigned count)
{
    int64_t fds = current_fds();
    if (fds >= 0)
        put_metric(o, "current_file_descriptors", "gauge", fds);
    put_metric(o, "accepts", "counter", SUM(accepts));
    put_metric(o, "accepts_rate_limited", "counter", SUM(accepts_refused));
    put_metric(o, "proxy_headers", "counter", SUM(proxy_headers));
    put_metric(o, "proxy_untrusted_refused", "counter", SUM(proxy_untrusted));
    put_metric(o, "proxy_bad_headers", "counter", SUM(proxy_bad_headers));
    put_metric(o, "bytes_received", "counter", SUM(bytes_received));
    put_metric(o, "bytes_sent", "counter", SUM(bytes_sent));
    put_metric(o, "packets_received", "counter", SUM(packets_received));
    put_metric(o, "packets_sent", "counter", SUM(packets_sent));
    srv_text_put(o, "# TYPE derp_packets_received_kind counter\n");
    for (unsigned k = 0; k < SRV_KINDS; k++)
        srv_text_put(o, "derp_packets_received_kind{kind=\"%s\"} %lld\n", kind_names[k],
                     (long long)SUM(packets_received_kind[k]));
    put_metric(o, "got_ping", "counter", SUM(got_ping));
    put_metric(o, "sent_pong", "counter", SUM(sent_pong));
    put_metric(o, "unknown_frames", "counter", SUM(unknown_frames));
    put_metric(o, "home_moves_in", "counter", SUM(home_moves_in));
    put_metric(o, "home_moves_out", "counter", SUM(home_moves_out));
    put_metric(o, "peer_gone_disconnected_frames", "counter", SUM(peer_gone_disconnected_frames));
    put_metric(o, "peer_gone_not_here_frames", "counter", SUM(peer_gone_not_here_frames));
    put_metric(o, "packets_forwarded_in", "counter", SUM(packets_forwarded_in));
    put_metric(o, "packets_forwarded_out", "counter", SUM(packets_forwarded_out));
    put_metric(o, "sclient_write_timeouts", "counter", SUM(sclient_write_timeouts));
    put_metric(o, "total_dup_client_conns", "counter", SUM(total_dup_client_conns));
    put_metric(o, "current_connections", "gauge", SUM(current_connections));
    put_metric(o, "current_home_connections", "gauge", SUM(current_home_connections));
    put_metric(o, "current_notideal_connections", "gauge", SUM(current_notideal_connections));
    put_metric(o, "clients_total", "gauge", SUM(clients_total));
    put_metric(o, "clients_local", "gauge", SUM(clients_local));
    put_metric(o, "clients_remote", "gauge", SUM(clients_total) - SUM(clients_local));
    put_metric(o, "multiforwarder_created", "counter", SUM(multiforwarder_created));
    put_metric(o, "multiforwarder_deleted", "counter", SUM(multiforwarder_deleted));
    put_metric(o, "packet_forwarder_delete_other_value", "counter",
               SUM(packet_forwarder_delete_other_value));
    put_metric(o, "mesh_links_ready", "gauge", SUM(mesh_links_ready));
    put_metric(o, "mesh_forward_dropped", "counter", SUM(mesh_forward_dropped));
    put_metric(o, "current_dup_client_keys", "gauge", SUM(current_dup_client_keys));
    put_metric(o, "current_dup_client_conns", "gauge", SUM(current_dup_client_conns));
    put_metric(o, "watchers", "gauge", SUM(watchers));
    put_metric(o, "websocket_accepts", "counter", SUM(websocket_accepts)); /* §1.5 */
    static const char *const rtt_names[SRV_RTT_LABELS] = {
        "10ms", "20ms", "50ms", "100ms", "150ms", "250ms", "500ms", "inf", "error"};
    srv_text_put(o, "# TYPE derp_tcp_rtt counter\n"); /* derper: the labels counted so far */
    for (unsigned i = 0; i < SRV_RTT_LABELS; i++)
        if (SUM(tcp_rtt[i]))
            srv_text_put(o, "derp_tcp_rtt{le=\"%s\"} %lld\n", rtt_names[i],
                         (long long)SUM(tcp_rtt[i]));
    srv_text_put(o, "# TYPE derp_packets_dropped counter\n");
    for (unsigned r = 0; r < SRV_DROPS; r++)
        for (unsigned k = 0; k < SRV_KINDS; k++)
            srv_text_put(o, "derp_packets_dropped{reason=\"%s\",kind=\"%s\"} %lld\n",
                         srv_drop_names[r], kind_names[k], (long long)SUM(packets_dropped[r][k]));
    srv_text_put(o, "# TYPE derp_bytes_dropped counter\n");
    for (unsigned r = 0; r < SRV_DROPS; r++)
        for (unsigned k = 0; k < SRV_KINDS; k++)
            srv_text_put(o, "derp_bytes_dropped{reason=\"%s\",kind=\"%s\"} %lld\n",
                         srv_drop_names[r], kind_names[k], (long long)SUM(bytes_dropped[r][k]));
}

/* One of hderp's own series, summed over shards. */
static void put_own(struct srv_text *o, const char *name, const char *type, int64_t value)
{
    srv_text_put(o, "# TYPE hderp_%s %s\nhderp_%s %lld\n", name, type, name, (long long)value);
}

/* -rate-config (spec §9): only with a config file. The limit as shard 0 applies it (the burst
 * after raising it to 65568), and the frames that waited for their tokens. */
static void format_rate(struct srv_text *o, const struct varz_slot *v, unsigned count)
{
    put_metric(o, "rate_limit_per_client_bytes_per_second", "gauge",
               (int64_t)v[0].rate.bytes_per_sec);
    /* derper applies an empty config when the rate is 0 (no limit): its burst reads 0 then */
    put_metric(o, "rate_limit_per_client_burst_bytes", "gauge",
               v[0].rate.bytes_per_sec ? (int64_t)v[0].rate.burst : 0);
    put_metric(o, "rate_limit_per_client_waited", "counter", SUM(rate_limit_waited));
    put_own(o, "rate_limit_key_waited", "counter", SUM(rate_limit_waited_key));
    srv_text_put(o, "# TYPE hderp_quota_dropped_packets counter\n"
                    "# TYPE hderp_quota_dropped_bytes counter\n");
    static const char *const why[SRV_QUOTA_WHYS] = {"daily", "monthly"};
    for (unsigned w = 0; w < SRV_QUOTA_WHYS; w++)
        srv_text_put(o,
                     "hderp_quota_dropped_packets{reason=\"%s\"} %lld\n"
                     "hderp_quota_dropped_bytes{reason=\"%s\"} %lld\n",
                     why[w], (long long)SUM(quota_dropped[w]), why[w],
                     (long long)SUM(quota_dropped_bytes[w]));
}

/* Loop counters per shard (bus messages, wake-ups, frames sent home): the cross-shard cost per
 * packet, read by perf/ scripts. */
/* One series with a value per shard: name (after "hderp_"), type, and the value of shard i's
 * slot (an expression in v[i]). */
#define PER_SHARD(name, type, value)                                                               \
    do {                                                                                           \
        srv_text_put(o, "# TYPE hderp_" name " " type "\n");                                       \
        for (unsigned i = 0; i < count; i++)                                                       \
            srv_text_put(o, "hderp_" name "{shard=\"%u\"} %llu\n", i,                              \
                         (unsigned long long)(value));                                             \
    } while (0)

/* hderp's own figures: per shard, so an uneven load shows. */
static void format_hderp(struct srv_text *o, const struct varz_slot *v, unsigned count)
{
    put_own(o, "mesh_refused", "counter", SUM(mesh_refused));
    put_own(o, "mesh_conns", "gauge", SUM(mesh_conns));
    put_own(o, "mesh_conns_refused", "counter", SUM(mesh_conns_refused));
    srv_text_put(o, "# TYPE hderp_watchers_closed counter\n");
    static const char *const closed_why[3] = {"reserve", "share", "addr"};
    for (unsigned w = 0; w < 3; w++)
        srv_text_put(o, "hderp_watchers_closed{why=\"%s\"} %lld\n", closed_why[w],
                     (long long)SUM(watchers_closed[w]));
    put_own(o, "mesh_links_configured", "gauge", SUM(mesh_links_configured));
    put_own(o, "handshake_errors", "counter", SUM(handshake_errors));
    put_own(o, "admit_refused", "counter", SUM(admit_refused));
    put_own(o, "admit_errors", "counter", SUM(admit_errors));
    put_own(o, "admit_cache_hits", "counter", SUM(admit_cache_hits));
    put_own(o, "admit_rechecks", "counter", SUM(admit_rechecks));
    put_own(o, "admit_recheck_errors", "counter", SUM(admit_recheck_errors));
    put_own(o, "admit_revoked", "counter", SUM(admit_revoked));
    put_own(o, "allowlist_refused", "counter", SUM(allowlist_refused));
    put_own(o, "bus_dropped", "counter", SUM(bus_dropped));
    put_own(o, "sender_waits", "counter", SUM(sender_waits));
    put_own(o, "sender_wait_timeouts", "counter", SUM(sender_wait_timeouts));
    put_own(o, "placement_moves", "counter", SUM(placement_moves));
    put_own(o, "placement_returns", "counter", SUM(placement_returns));
    put_own(o, "placement_packs", "counter", SUM(placement_packs));
    put_own(o, "placement_spreads", "counter", SUM(placement_spreads));
    put_own(o, "conns_accepted", "counter", SUM(conns_accepted));
    put_own(o, "prelogin_conns", "gauge", SUM(prelogin_now));
    srv_text_put(o, "# TYPE hderp_prelogin_refused counter\n");
    srv_text_put(o, "hderp_prelogin_refused{cap=\"shard\"} %lld\n",
                 (long long)SUM(prelogin_refused_shard));
    srv_text_put(o, "hderp_prelogin_refused{cap=\"addr\"} %lld\n",
                 (long long)SUM(prelogin_refused_addr));
    put_own(o, "deadline_closes", "counter", SUM(deadline_closes));
    srv_text_put(o, "# TYPE hderp_frames_refused counter\n");
    srv_text_put(o, "hderp_frames_refused{why=\"share\"} %lld\n",
                 (long long)SUM(frames_share_dropped));
    srv_text_put(o, "hderp_frames_refused{why=\"reserve\"} %lld\n",
                 (long long)SUM(frames_reserve_dropped));
    srv_text_put(o, "hderp_frames_refused{why=\"addr\"} %lld\n",
                 (long long)SUM(frames_addr_dropped));
    put_own(o, "frame_addrs", "gauge", SUM(frame_addrs));
    put_own(o, "frame_addrs_spilled", "counter", SUM(frame_addrs_spilled));
    put_own(o, "subscriptions_refused", "counter", SUM(subs_refused));
    put_own(o, "ctl_dropped", "counter", SUM(ctl_dropped));
}

/* The TLS layer (with tls_module only): how handshakes ended, which record path each connection
 * took (kTLS or userspace), and the connection states an upgrade moved (saved here, loaded in
 * the successor, by mode). */
#define SUM_TLS(field) SUM_OF(tls.field)

static void format_tls(struct srv_text *o, const struct varz_slot *v, unsigned count)
{
    put_own(o, "tls_handshakes_done", "counter", SUM_TLS(handshakes_done));
    put_own(o, "tls_handshakes_failed", "counter", SUM_TLS(handshakes_failed));
    srv_text_put(o, "# TYPE hderp_tls_conns counter\n");
    srv_text_put(o, "hderp_tls_conns{mode=\"ktls\"} %lld\n", (long long)SUM_TLS(conns_ktls));
    srv_text_put(o, "hderp_tls_conns{mode=\"userspace\"} %lld\n",
                 (long long)SUM_TLS(conns_userspace));
    put_own(o, "tls_ktls_failed", "counter", SUM_TLS(ktls_failed));
    put_own(o, "tls_states_saved", "counter", SUM_TLS(states_saved));
    int64_t loaded = SUM_TLS(states_loaded), loaded_ktls = SUM_TLS(states_loaded_ktls);
    srv_text_put(o, "# TYPE hderp_tls_states_loaded counter\n");
    srv_text_put(o, "hderp_tls_states_loaded{mode=\"ktls\"} %lld\n", (long long)loaded_ktls);
    srv_text_put(o, "hderp_tls_states_loaded{mode=\"userspace\"} %lld\n",
                 (long long)(loaded - loaded_ktls));
}

/* The loop's own figures, per shard, so an uneven load shows. */
static void format_loop(struct srv_text *o, const struct varz_slot *v, unsigned count)
{
    static const double qs[] = {0.5, 0.9, 0.99, 0.999};
    srv_text_put(o, "# TYPE hderp_loop_tick_ns summary\n");
    for (unsigned i = 0; i < count; i++)
        for (unsigned q = 0; q < HD_ARRAY_SIZE(qs); q++)
            srv_text_put(o, "hderp_loop_tick_ns{shard=\"%u\",quantile=\"%g\"} %llu\n", i, qs[q],
                         (unsigned long long)hd_hist_quantile(&v[i].loop.tick_ns, qs[q]));
    srv_text_put(o, "# TYPE hderp_loop_cqes_per_tick summary\n");
    for (unsigned i = 0; i < count; i++)
        for (unsigned q = 0; q < HD_ARRAY_SIZE(qs); q++)
            srv_text_put(o, "hderp_loop_cqes_per_tick{shard=\"%u\",quantile=\"%g\"} %llu\n", i,
                         qs[q],
                         (unsigned long long)hd_hist_quantile(&v[i].loop.cqes_per_tick, qs[q]));
    PER_SHARD("loop_ticks", "counter", v[i].loop.ticks);
    /* The wait policy's cost per packet: io_uring_enter calls, sleeps, min-wait sleeps, spins. */
    PER_SHARD("loop_enters", "counter", v[i].loop.enters);
    PER_SHARD("loop_sleeps", "counter", v[i].loop.sleeps);
    PER_SHARD("loop_min_waits", "counter", v[i].loop.min_waits);
    PER_SHARD("loop_spins", "counter", v[i].loop.spins);
    PER_SHARD("loop_spins_won", "counter", v[i].loop.spins_won);
    /* The bus between the shards (h-perf-shards' lazy messages). */
    PER_SHARD("loop_bus_sent", "counter", v[i].loop.bus_sent);
    PER_SHARD("loop_wakes_sent", "counter", v[i].loop.wakes_sent);
    PER_SHARD("loop_wakes_received", "counter", v[i].loop.wakes_received);
    PER_SHARD("loop_frames_returned", "counter", v[i].loop.frames_returned);
    PER_SHARD("loop_stalls", "counter", v[i].stalls);
    PER_SHARD("loop_stall_max_ms", "gauge", v[i].stall_max_ms);
    PER_SHARD("bus_full", "counter", v[i].loop.bus_full);
    PER_SHARD("frames_in_use", "gauge", v[i].frames_in_use);
    PER_SHARD("frames_exhausted", "counter", v[i].frames_exhausted);
    /* Placement and packing: where the clients are, and how busy each shard was lately. */
    PER_SHARD("placement_guests", "gauge", v[i].guests);
    PER_SHARD("loop_busy_ppm", "gauge", v[i].busy_ppm);
}

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
    if (o.buf) {
        const struct varz_slot *v = slots;
        if (r->keys) {
            srv_acct_format_json(&o, &v->acct, sizeof(*v), count);
        } else {
            format_derp(&o, slots, count);
            format_stun(&o, slots, count);
            if (r->cfg->rate_config_path)
                format_rate(&o, slots, count);
            format_hderp(&o, slots, count);
            if (srv_needs_tls(r->cfg))
                format_tls(&o, slots, count);
            format_loop(&o, slots, count);
            srv_acct_format_varz(&o, &v->acct, sizeof(*v), count);
        }
        char head[256];
        struct net_http_hdr ct = {"Content-Type", r->keys
                                                      ? NET_HTTP_LIT("application/json")
                                                      : NET_HTTP_LIT("text/plain; version=0.0.4")};
        struct net_http_resp_spec spec = {.status = 200,
                                          .headers = &ct,
                                          .headers_count = 1,
                                          .content_length = (int64_t)o.len,
                                          .connection = NET_HTTP_CONN_CLOSE};
        int n = net_http_write_resp(head, sizeof(head), &spec);
        /* No body without its head; a failed send (no frames, queue cap) drops the answer:
         * the connection closes at once instead of flushing half of it. */
        int rc = n > 0 ? net_conn_send_copy(r->conn, head, (size_t)n) : -EINVAL;
        if (rc == 0 && !r->head_only)
            rc = net_conn_send_copy(r->conn, o.buf, o.len);
        free(o.buf);
        if (rc < 0) {
            hd_log_rl(HD_LOG_WARN, "/debug/varz: answer not sent: %s", strerror(-rc));
            net_conn_close(r->conn, rc, false);
            return;
        }
    } else {
        net_conn_close(r->conn, -ENOMEM, false);
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

void srv_varz_request(struct srv_shard *ds, struct net_conn *c, bool head_only, bool keys)
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
    r->keys = keys;
    net_conn_set_app(c, &varz_handler, r);
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
