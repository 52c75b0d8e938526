/* wgr_main.c - hderp-wgrelay (docs/WGRELAY.md): the app around the routing table (wgr_table.c).
 * The pure parts (wgr_proto.c, wgr_peers.c, wgr_table.c, wgr_cookie.c) are a library,
 * hd_wgrelay, that tests/wgrelay and the fuzzer reach without sockets.
 *
 * Every shard reads the relay's UDP port through its own SO_REUSEPORT socket (net_udp; the
 * kernel spreads sources over them). The routing table lives on shard 0: a datagram that arrives
 * elsewhere is copied into a pool frame with its source in front and sent there over the bus,
 * so a pair whose two peers hash to different shards still meets in one table. Shard 0 sends
 * from its own socket, which has the same local address, and sweeps the table every
 * WGR_SWEEP_MS. The peers file is a snapshot (hd_snap) the main thread reloads on SIGHUP
 * (on_signal) and publishes (hd_snap_var_publish); shard 0 moves the table to it on the next
 * datagram or sweep; a file that does not parse is logged and the list in use stays. /metrics
 * is kit_metrics over the shards' counters. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <hd/hd.h>
#include <hd/kit.h>
#include <hd/net.h>

#include "wgr.h"

#define WGR_TABLE_SHARD   0u
#define WGR_SWEEP_MS      1000u
#define WGR_SOCKET_BUFFER (4 << 20) /* each shard's socket, both ways */

struct wgr_config {
    struct net_addr listen, metrics; /* metrics.len 0: no endpoint */
    const char *peers_path;
    uint32_t shards, rate_per_s, rate_burst;
    double peer_mbit, peer_burst_kib; /* --peer-rate (0: off), --peer-burst */
    bool cookie_replies;              /* --cookie-replies */
    struct hd_snap_var *peers;        /* the current list */
};

struct wgr_shard {
    struct hd_shard *s;
    const struct wgr_config *cfg;
    struct net_udp *udp;
    struct kit_metrics *metrics;
    struct wgr_stats st;
    /* shard 0 only */
    struct wgr_table *table;
    struct wgr_peers *peers; /* the table's list: one reference */
    struct hd_timer sweep;
    struct wgr_verdict v;
};

/* What a shard reports to /metrics. */
struct wgr_slot {
    struct wgr_stats st;
    uint64_t live, pending, peers, send_dropped, gso_sends, gro_receives;
};

static const struct hd_module wgr_module;

static void to_wgr_addr(const struct net_addr *a, struct wgr_addr *w)
{
    memset(w, 0, sizeof(*w));
    size_t n = a->len <= sizeof(w->in6) ? a->len : sizeof(w->in6);
    memcpy(&w->sa, &a->sa, n);
    w->len = (uint32_t)n;
}

static void to_net_addr(const struct wgr_addr *w, struct net_addr *a)
{
    memset(a, 0, sizeof(*a));
    memcpy(&a->sa, &w->sa, w->len);
    a->len = w->len;
}

/* Shard 0: a newer peers list was published: the table moves to it. */
static void peers_refresh(struct wgr_shard *ws)
{
    struct wgr_peers *cur = (struct wgr_peers *)hd_snap_var_get(ws->cfg->peers, ws->s);
    if (cur == NULL || cur == ws->peers)
        return;
    hd_snap_ref(&cur->snap);
    wgr_table_set_peers(ws->table, cur);
    hd_snap_unref(&ws->peers->snap);
    ws->peers = cur;
    hd_log(HD_LOG_INFO, "wgrelay: %u peers in use, %u session indexes kept", cur->count,
           wgr_table_live_count(ws->table));
}

/* One rate-limited line for a refused datagram (stragglers of ended sessions are only counted). */
static void log_drop(int drop, const uint8_t *data, size_t len, const struct wgr_addr *from)
{
    static const char *const types[] = {"datagram", "handshake initiation", "handshake response",
                                        "cookie reply", "data message"};
    char a[64];
    struct net_addr na;
    to_net_addr(from, &na);
    hd_log_rl(HD_LOG_INFO, "wgrelay: dropped a %s from %s: %s", types[wgr_classify(data, len)],
              net_addr_format(&na, a, sizeof(a)), wgr_drop_names[drop]);
}

/* Shard 0: route one datagram and send it where the table says. */
static void relay(struct wgr_shard *ws, const uint8_t *data, size_t len,
                  const struct wgr_addr *from)
{
    peers_refresh(ws);
    struct wgr_verdict *v = &ws->v;
    wgr_table_input(ws->table, data, len, from, hd_now_ms(ws->s), v, &ws->st);
    if (v->drop >= 0 && v->drop != WGR_DROP_stale_source && v->drop != WGR_DROP_no_session)
        log_drop(v->drop, data, len, from);
    if (v->cookie) {
        struct net_addr back;
        to_net_addr(from, &back);
        if (net_udp_send(ws->udp, v->reply, sizeof(v->reply), &back) < 0)
            ws->st.drops[WGR_DROP_send_failed]++;
    }
    for (unsigned i = 0; i < v->count; i++) {
        struct net_addr to;
        to_net_addr(&v->to[i], &to);
        if (net_udp_send(ws->udp, data, len, &to) == 0)
            ws->st.forwarded++;
        else
            ws->st.drops[WGR_DROP_send_failed]++;
    }
}

/* Bus handler on shard 0: frame = [struct wgr_addr][datagram]. */
static void on_routed(struct hd_shard *s, const struct hd_msg *m)
{
    struct wgr_shard *ws = hd_shard_module_state(s, &wgr_module);
    struct hd_frame *f = m->ptr;
    struct wgr_addr from;
    memcpy(&from, f->data, sizeof(from));
    if (ws)
        relay(ws, f->data + sizeof(from), f->len - sizeof(from), &from);
    hd_frame_unref(s, f);
}

static void on_datagram(struct net_udp *u, const uint8_t *data, size_t len,
                        const struct net_addr *from, void *arg)
{
    (void)u;
    struct wgr_shard *ws = arg;
    struct wgr_addr w;
    to_wgr_addr(from, &w);
    if (len > WGR_DATAGRAM_MAX) {
        ws->st.received++;
        ws->st.drops[WGR_DROP_malformed]++;
        return;
    }
    if (hd_shard_id(ws->s) == WGR_TABLE_SHARD) {
        relay(ws, data, len, &w);
        return;
    }
    struct hd_frame *f = hd_frame_get(ws->s, sizeof(w) + len);
    if (f == NULL) {
        ws->st.drops[WGR_DROP_no_frame]++;
        return;
    }
    memcpy(f->data, &w, sizeof(w));
    memcpy(f->data + sizeof(w), data, len);
    f->len = (uint32_t)(sizeof(w) + len);
    struct hd_msg m = {.fn = on_routed, .ptr = f};
    if (hd_bus_send(ws->s, WGR_TABLE_SHARD, &m) < 0) {
        hd_frame_unref(ws->s, f);
        ws->st.drops[WGR_DROP_no_frame]++;
    } else {
        ws->st.routed++;
    }
}

static void on_sweep(struct hd_timer *t)
{
    struct wgr_shard *ws = hd_container_of(t, struct wgr_shard, sweep);
    peers_refresh(ws);
    wgr_table_sweep(ws->table, hd_now_ms(ws->s), &ws->st);
    hd_timer_start(ws->s, &ws->sweep, WGR_SWEEP_MS);
}

/* ---------------------------------------------------------------- /metrics */

static void metrics_fill(struct hd_shard *s, void *slot, void *arg)
{
    (void)arg;
    struct wgr_shard *ws = hd_shard_module_state(s, &wgr_module);
    struct wgr_slot *out = slot;
    memset(out, 0, sizeof(*out));
    if (ws == NULL)
        return;
    out->st = ws->st;
    if (ws->udp)
        out->send_dropped = net_udp_stats(ws->udp)->send_dropped;
    if (ws->udp) {
        out->gso_sends = net_udp_stats(ws->udp)->gso_sends;
        out->gro_receives = net_udp_stats(ws->udp)->gro_receives;
    }
    if (ws->table) {
        out->live = wgr_table_live_count(ws->table);
        out->pending = wgr_table_pending_count(ws->table);
        out->peers = ws->peers->count;
    }
}

#define SUM(field)                                                                                 \
    ({                                                                                             \
        unsigned long long sum_ = 0;                                                               \
        for (unsigned j_ = 0; j_ < count; j_++)                                                    \
            sum_ += sl[j_].field;                                                                  \
        sum_;                                                                                      \
    })

static size_t metrics_format(const void *slots, unsigned count, char *buf, size_t size, void *arg)
{
    (void)arg;
    const struct wgr_slot *sl = slots;
    size_t n = 0;
#define OUT(...)                                                                                   \
    do {                                                                                           \
        if (n < size)                                                                              \
            n += (size_t)snprintf(buf + n, size - n, __VA_ARGS__);                                 \
    } while (0)
    OUT("wgrelay_received_total %llu\n", SUM(st.received));
    OUT("wgrelay_forwarded_total %llu\n", SUM(st.forwarded));
    OUT("wgrelay_initiations_total %llu\n", SUM(st.initiations));
    OUT("wgrelay_responses_total %llu\n", SUM(st.responses));
    OUT("wgrelay_cookies_total %llu\n", SUM(st.cookies));
    OUT("wgrelay_data_total %llu\n", SUM(st.data));
    OUT("wgrelay_broadcast_sends_total %llu\n", SUM(st.broadcast_sends));
    OUT("wgrelay_roamed_total %llu\n", SUM(st.roamed));
    OUT("wgrelay_sessions_total %llu\n", SUM(st.sessions));
    OUT("wgrelay_expired_total %llu\n", SUM(st.expired));
    OUT("wgrelay_routed_total %llu\n", SUM(st.routed));
    OUT("wgrelay_cookies_sent_total %llu\n", SUM(st.cookies_sent));
    OUT("wgrelay_cookie_proven_total %llu\n", SUM(st.cookie_proven));
    OUT("wgrelay_socket_send_dropped_total %llu\n", SUM(send_dropped));
    OUT("wgrelay_socket_gso_sends_total %llu\n", SUM(gso_sends));
    OUT("wgrelay_socket_gro_receives_total %llu\n", SUM(gro_receives));
    for (unsigned d = 0; d < WGR_DROP_COUNT; d++)
        OUT("wgrelay_dropped_total{reason=\"%s\"} %llu\n", wgr_drop_names[d], SUM(st.drops[d]));
    OUT("wgrelay_indexes_live %llu\n", SUM(live));
    OUT("wgrelay_indexes_pending %llu\n", SUM(pending));
    OUT("wgrelay_peers %llu\n", SUM(peers));
#undef OUT
    return n < size ? n : size;
}

static const struct kit_metrics_options wgr_metrics = {
    .slot_size = sizeof(struct wgr_slot), .fill = metrics_fill, .format = metrics_format};

/* ---------------------------------------------------------------- the module */

static int shard_init(struct hd_shard *s, void *arg, void **state)
{
    const struct wgr_config *cfg = arg;
    struct wgr_shard *ws = calloc(1, sizeof(*ws));
    if (ws == NULL)
        return -ENOMEM;
    ws->s = s;
    ws->cfg = cfg;
    int rc = 0;
    if (hd_shard_id(s) == WGR_TABLE_SHARD) {
        ws->peers = (struct wgr_peers *)hd_snap_var_get(cfg->peers, s);
        hd_snap_ref(&ws->peers->snap);
        ws->table = wgr_table_create(ws->peers, WGR_INDEX_SLOTS);
        if (ws->table == NULL)
            rc = -ENOMEM;
        else {
            wgr_table_set_rate(ws->table, cfg->rate_per_s, cfg->rate_burst);
            wgr_table_set_cookies(ws->table, cfg->cookie_replies);
            wgr_table_set_peer_rate(ws->table, (uint64_t)(cfg->peer_mbit * 1e6 / 8),
                                    (uint64_t)(cfg->peer_burst_kib * 1024));
        }
    }
    if (rc == 0)
        rc = net_udp_open(s, &cfg->listen, on_datagram, ws, &ws->udp);
    if (rc == 0) {
        /* A burst waits in the socket while the shard forwards the one before: the default
         * 208 KiB holds ~100 full-size packets. The kernel caps it at net.core.rmem_max. */
        int bytes = WGR_SOCKET_BUFFER;
        setsockopt(net_udp_fd(ws->udp), SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
        setsockopt(net_udp_fd(ws->udp), SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
    }
    if (rc == 0 && cfg->metrics.len > 0 && hd_shard_id(s) == 0)
        rc = kit_metrics_start(s, &cfg->metrics, &wgr_metrics, &ws->metrics);
    if (rc < 0) {
        if (ws->udp)
            net_udp_close(ws->udp);
        wgr_table_destroy(ws->table);
        if (ws->peers)
            hd_snap_unref(&ws->peers->snap);
        free(ws);
        return rc;
    }
    if (ws->table) {
        hd_timer_init(&ws->sweep, on_sweep);
        hd_timer_start(s, &ws->sweep, WGR_SWEEP_MS);
    }
    *state = ws;
    return 0;
}

static void shard_stop(struct hd_shard *s, void *state)
{
    struct wgr_shard *ws = state;
    if (ws->table)
        hd_timer_stop(s, &ws->sweep);
    net_udp_close(ws->udp);
    ws->udp = NULL;
    if (ws->metrics)
        kit_metrics_stop(ws->metrics);
    net_shard_close_all(s, 0);
}

static void shard_fini(struct hd_shard *s, void *state)
{
    struct wgr_shard *ws = state;
    unsigned long long drops = 0;
    for (unsigned d = 0; d < WGR_DROP_COUNT; d++)
        drops += ws->st.drops[d];
    hd_log(HD_LOG_INFO,
           "wgrelay: shard %u routed to shard 0 %llu; judged %llu forwarded %llu sessions %llu "
           "dropped %llu",
           hd_shard_id(s), (unsigned long long)ws->st.routed, (unsigned long long)ws->st.received,
           (unsigned long long)ws->st.forwarded, (unsigned long long)ws->st.sessions, drops);
    wgr_table_destroy(ws->table);
    if (ws->peers)
        hd_snap_unref(&ws->peers->snap);
    free(ws);
}

/* Main thread, SIGHUP: read the peers file again; a bad one keeps the list in use. */
static void on_signal(struct hd_runtime *rt, int signo, void *arg)
{
    (void)rt;
    struct wgr_config *cfg = arg;
    if (signo != SIGHUP)
        return;
    char err[256];
    struct wgr_peers *ps = wgr_peers_load(cfg->peers_path, err, sizeof(err));
    if (ps == NULL) {
        hd_log(HD_LOG_ERROR, "wgrelay: reload refused, the previous peers stay in use: %s", err);
        return;
    }
    unsigned n = ps->count;
    int rc = hd_snap_var_publish(cfg->peers, &ps->snap);
    if (rc < 0)
        hd_log(HD_LOG_ERROR, "wgrelay: reload of %s not published: %s", cfg->peers_path,
               strerror(-rc));
    else
        hd_log(HD_LOG_INFO, "wgrelay: reloaded %s: %u peers", cfg->peers_path, n);
}

static const struct hd_module *const wgr_requires[] = {&net_module, NULL};
static const struct hd_module wgr_module = {
    .abi_version = HD_MODULE_ABI,
    .requires = wgr_requires,
    .name = "wgrelay",
    .shard_init = shard_init,
    .shard_stop = shard_stop,
    .shard_fini = shard_fini,
    .on_signal = on_signal,
};

static int parse_flags(struct wgr_config *cfg, int argc, char **argv)
{
    const struct kit_flag flags[] = {
        {"listen", KIT_FLAG_ADDR, &cfg->listen, 0, 0,
         "UDP address the peers use as their Endpoint (default 0.0.0.0:51820; port 0: any)"},
        {"peers", KIT_FLAG_STR, &cfg->peers_path, 0, 0,
         "the registered peers: `pubkey [name [allowed-peer...]]` a line (required; SIGHUP "
         "reloads it)"},
        {"metrics", KIT_FLAG_ADDR, &cfg->metrics, 0, 0,
         "serve GET /metrics on this TCP address (default: none)"},
        {"shards", KIT_FLAG_U32, &cfg->shards, 1, 64, "shards, one thread each (default 1)"},
        {"handshake-rate", KIT_FLAG_U32, &cfg->rate_per_s, 0, 1000000,
         "handshake initiations per second per source IP (default 20, wireguard-go's; 0: off)"},
        {"handshake-burst", KIT_FLAG_U32, &cfg->rate_burst, 1, 1000000,
         "initiations a source may send at once (default 5)"},
        {"cookie-replies", KIT_FLAG_BOOL, &cfg->cookie_replies, 0, 0,
         "over the handshake rate, answer with WireGuard's cookie reply for the responder "
         "(default true; =false: drop)"},
        {"peer-rate", KIT_FLAG_F64, &cfg->peer_mbit, 0, 1e6,
         "data each peer may send through the relay, Mbit/s (default 0: no limit)"},
        {"peer-burst", KIT_FLAG_F64, &cfg->peer_burst_kib, 2, 1e6,
         "the burst a peer may send over --peer-rate, KiB (default 256)"},
    };
    unsigned count = sizeof(flags) / sizeof(flags[0]);
    char err[160];
    int rc = kit_flags_parse(flags, count, argc, argv, err, sizeof(err));
    if (rc == 0 && cfg->peers_path == NULL) {
        snprintf(err, sizeof(err), "--peers FILE is required");
        rc = -EINVAL;
    }
    if (rc < 0) {
        if (rc != -ECANCELED)
            fprintf(stderr, "hderp-wgrelay: %s\n", err);
        kit_flags_usage(rc == -ECANCELED ? stdout : stderr, "hderp-wgrelay", flags, count);
        return rc == -ECANCELED ? 0 : 2;
    }
    return -1;
}

static int run(struct wgr_config *cfg, struct wgr_peers *ps, int hold, int mhold)
{
    const struct hd_module *mods[] = {&wgr_module};
    void *args[] = {cfg};
    struct hd_runtime_config rc_cfg = {.shards_count = cfg->shards,
                                       .handle_signals = true,
                                       .modules = mods,
                                       .modules_args = args,
                                       .modules_count = 1};
    struct hd_runtime *rt = NULL;
    int rc = hd_runtime_create(&rc_cfg, &rt);
    if (rc == 0)
        rc = hd_snap_var_create(rt, &ps->snap, &cfg->peers);
    else
        hd_snap_unref(&ps->snap);
    if (rc == 0)
        rc = hd_runtime_start(rt);
    close(hold); /* before the port is announced: it would get its share of datagrams */
    if (mhold >= 0)
        close(mhold);
    if (rc == 0) {
        char a[64], b[64] = "";
        if (cfg->metrics.len > 0)
            net_addr_format(&cfg->metrics, b, sizeof(b));
        printf("wgrelay: listening on %s%s%s\n", net_addr_format(&cfg->listen, a, sizeof(a)),
               b[0] ? " metrics " : "", b);
        fflush(stdout);
        rc = hd_runtime_wait(rt);
    }
    if (rt)
        hd_runtime_destroy(rt);
    hd_snap_var_destroy(cfg->peers);
    return rc;
}

int main(int argc, char **argv)
{
    struct wgr_config cfg = {.shards = 1,
                             .rate_per_s = WGR_RATE_PER_S,
                             .rate_burst = WGR_RATE_BURST,
                             .peer_burst_kib = 256,
                             .cookie_replies = true};
    net_addr_parse("0.0.0.0:51820", &cfg.listen);
    int frc = parse_flags(&cfg, argc, argv);
    if (frc >= 0)
        return frc;
    char err[256];
    struct wgr_peers *ps = wgr_peers_load(cfg.peers_path, err, sizeof(err));
    if (ps == NULL) {
        fprintf(stderr, "hderp-wgrelay: %s\n", err);
        return 2;
    }
    int hold = kit_port_hold(&cfg.listen, SOCK_DGRAM), mhold = -1;
    if (hold >= 0 && cfg.metrics.len > 0 && (mhold = kit_port_hold(&cfg.metrics, SOCK_STREAM)) < 0)
        close(hold), hold = mhold;
    if (hold < 0) {
        fprintf(stderr, "hderp-wgrelay: cannot bind: %s\n", strerror(-hold));
        hd_snap_unref(&ps->snap);
        return 1;
    }
    hd_log(HD_LOG_INFO, "wgrelay: %u peers from %s", ps->count, cfg.peers_path);
    int rc = run(&cfg, ps, hold, mhold);
    if (rc < 0)
        fprintf(stderr, "hderp-wgrelay: %s\n", strerror(-rc));
    return rc < 0 ? 1 : 0;
}
