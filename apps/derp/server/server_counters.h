/* server_counters.h - hderp-server's per-shard counters (summed on read by server_metrics.c)
 * and the packet kinds and drop reasons derper's metrics are labelled by. */
#ifndef SERVER_COUNTERS_H
#define SERVER_COUNTERS_H

#include <stdint.h>

enum srv_kind { SRV_KIND_DISCO = 0, SRV_KIND_OTHER = 1, SRV_KINDS };
/* -rate-config Keys: the budget a dropped packet would have gone over. */
enum srv_quota_why { SRV_QUOTA_DAILY, SRV_QUOTA_MONTHLY, SRV_QUOTA_WHYS };
enum srv_drop {
    SRV_DROP_UNKNOWN_DEST,
    SRV_DROP_UNKNOWN_DEST_ON_FWD,
    SRV_DROP_GONE_DISCONNECTED,
    SRV_DROP_QUEUE_HEAD,
    SRV_DROP_QUEUE_TAIL,
    SRV_DROP_WRITE_ERROR,
    SRV_DROP_DUP_CLIENT,
    SRV_DROPS
};
extern const char *const srv_drop_names[SRV_DROPS];

/* derp_tcp_rtt's labels: the buckets' upper bounds (derper's durationToLabel), "inf", then
 * "error" (SRV_RTT_ERROR). Names in server_metrics.c. */
#define SRV_RTT_BUCKETS 8
#define SRV_RTT_ERROR   SRV_RTT_BUCKETS
#define SRV_RTT_LABELS  (SRV_RTT_BUCKETS + 1)

/* derper's histograms (tailscale.com/metrics.Histogram): a count per bucket, bucket i holding
 * what is at most bounds[i] and the last one what is above every bound (+Inf), and the sum of
 * what was observed. Observed on the shard; printed cumulative, as derper's, by
 * server_metrics.c. mesh_update_batch_size: presence notices written to a watcher together;
 * mesh_update_loop_count: those batches per writer run; buffered_write_frames: frames a
 * connection's writer run put in its send queue together (spec §9). */
static const uint16_t srv_mesh_batch_bounds[] = {0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000};
static const uint16_t srv_mesh_loop_bounds[] = {0, 1, 2, 5, 10, 20, 50, 100};
static const uint16_t srv_write_frames_bounds[] = {0, 1, 2,  3,  4,  5,  6,  7,
                                                   8, 9, 10, 15, 20, 25, 50, 100};
#define SRV_HIST_BOUNDS(b) (sizeof(b) / sizeof((b)[0]))
#define SRV_MESH_BATCH_N   (SRV_HIST_BOUNDS(srv_mesh_batch_bounds) + 1)
#define SRV_MESH_LOOP_N    (SRV_HIST_BOUNDS(srv_mesh_loop_bounds) + 1)
#define SRV_WRITE_FRAMES_N (SRV_HIST_BOUNDS(srv_write_frames_bounds) + 1)

/* One observation of v: its bucket (n bounds, n + 1 buckets) and the sum. */
static inline void srv_hist_observe(uint64_t *buckets, uint64_t *sum, const uint16_t *bounds,
                                    unsigned n, uint64_t v)
{
    unsigned i = 0;
    while (i < n && v > bounds[i])
        i++;
    buckets[i]++;
    *sum += v;
}
#define SRV_HIST_OBSERVE(ctr, name, bounds, v)                                                     \
    srv_hist_observe((ctr)->name, &(ctr)->name##_sum, bounds, SRV_HIST_BOUNDS(bounds), v)

struct srv_counters {
    uint64_t accepts;
    uint64_t accepts_refused; /* closed by -accept-connection-limit */
    uint64_t conns_accepted;  /* every TCP connection (derper's accepts counts DERP clients) */
    uint64_t prelogin_refused_shard, prelogin_refused_addr; /* --prelogin-max, -per-addr-max */
    uint64_t deadline_closes;        /* closed at the HTTP or login deadline */
    uint64_t frames_share_dropped;   /* packets dropped: the sender held its share of the pool */
    uint64_t frames_reserve_dropped; /* packets dropped: only the control reserve was left */
    uint64_t frames_addr_dropped;    /* packets dropped: the sender's address held its share */
    uint64_t frame_addrs_spilled;    /* accounts that got the shared spill entry (no memory) */
    uint64_t subs_refused; /* PeerGone subscriptions not made (SRV_SOURCES_MAX, index, pools) */
    uint64_t frame_addrs;  /* varz: source addresses with frame accounts (a gauge) */
    uint64_t ctl_dropped;  /* KeepAlive/Pong not sent: no frame even in the reserve */
    uint64_t bytes_received, packets_received;
    uint64_t packets_received_kind[SRV_KINDS];
    uint64_t bytes_sent, packets_sent;
    uint64_t packets_dropped[SRV_DROPS][SRV_KINDS];
    uint64_t bytes_dropped[SRV_DROPS][SRV_KINDS];
    uint64_t got_ping, sent_pong;
    uint64_t peer_gone_disconnected_frames, peer_gone_not_here_frames;
    uint64_t home_moves_in, home_moves_out;
    uint64_t sclient_write_timeouts;
    uint64_t total_dup_client_conns;
    uint64_t unknown_frames;
    uint64_t packets_forwarded_in, packets_forwarded_out;
    uint64_t mesh_refused;       /* mesh-only frames from non-mesh clients (closed) */
    uint64_t mesh_conns_refused; /* logins with the mesh key over --mesh-conns-max (closed) */
    /* watchers closed: a presence notice found them at their share of the frame pool, their
     * address's, or the pool at its reserve (enum srv_frames_why - 1) */
    uint64_t watchers_closed[3];
    uint64_t handshake_errors; /* connections that failed the login */
    uint64_t http_requests;
    uint64_t websocket_accepts;
    uint64_t admit_refused;        /* closed by admission control (§5) */
    uint64_t admit_errors;         /* admission requests that failed (timeout, unreachable, ...) */
    uint64_t admit_cache_hits;     /* logins decided by a cached answer (-verify-cache-ttl) */
    uint64_t admit_rechecks;       /* re-checks of admitted keys asked (-verify-recheck-interval) */
    uint64_t admit_recheck_errors; /* of those, the controller unreachable (nobody closed) */
    uint64_t admit_revoked;        /* connections closed: the controller now refuses the key */
    uint64_t allowlist_refused;    /* closed at login: key not in --allow-keys */
    uint64_t bus_dropped;          /* packets dropped because the bus to the owner was full */
    uint64_t placement_moves;      /* clients moved to the shard of the peer they send to */
    uint64_t placement_returns;    /* guests that asked to go home (packing) */
    uint64_t placement_packs;      /* moves to shard 0 packing decided (low load) */
    uint64_t placement_spreads;    /* moves off shard 0 spreading decided (shard 0 busy) */
    /* client moves between shards begun here / ended here (arrived, failed or closed on the
     * way): an upgrade waits until every move ended (server_live.c) */
    uint64_t moves_sent, moves_done;
    /* derper's stun_requests{disposition} in its order (read_error: the STUN socket's receive
     * errors, net_udp_stats, set when read), then stun_addrfamily{family} */
    uint64_t stun_success, stun_not_stun, stun_write_error, stun_read_error;
    uint64_t stun_ipv4, stun_ipv6;
    /* mesh (§7): a key gained a second forwarder / went back to one; a removal for a
     * forwarder the key did not have; forwards lost because the link was down or full */
    uint64_t multiforwarder_created, multiforwarder_deleted;
    uint64_t packet_forwarder_delete_other_value;
    uint64_t mesh_forward_dropped;
    uint64_t rate_limit_waited; /* frames that waited for -rate-config tokens */
    /* derper's counter_tcp_rtt{le}: a client's TCP_INFO round trip every 10 s, by bucket
     * (srv_rtt_names: 10ms .. 500ms, inf), and "error" for a socket that could not tell */
    uint64_t tcp_rtt[SRV_RTT_LABELS];
    uint64_t sender_waits;          /* senders paused for a backed-up receiver (server_wait.c) */
    uint64_t sender_wait_timeouts;  /* of those, waits that ran out (--sender-wait) */
    uint64_t rate_limit_waited_key; /* of those, at a key's own rate (-rate-config Keys) */
    uint64_t quota_dropped[SRV_QUOTA_WHYS], quota_dropped_bytes[SRV_QUOTA_WHYS];
    /* -proxy-protocol-from: headers read; connections from other sources refused; bad headers */
    uint64_t proxy_headers, proxy_untrusted, proxy_bad_headers;
    /* derper's histograms (above) */
    uint64_t mesh_batch[SRV_MESH_BATCH_N], mesh_batch_sum;
    uint64_t mesh_loops[SRV_MESH_LOOP_N], mesh_loops_sum;
    uint64_t write_frames[SRV_WRITE_FRAMES_N], write_frames_sum;
    uint64_t listener_accepted; /* -a's connections past -accept-connection-limit */
    uint64_t tls_requests;      /* HTTP requests over TLS on -a (derper_tls_request_version) */
    /* derper's bootstrap DNS counters (handleBootstrapDNS, server_bootdns.c): requests; of
     * those with a ?q=, a name of the unpublished list (hit), and of those the client outside
     * its rollout percentage; a name of the published list (hit; miss: no address), neither */
    uint64_t bootdns_requests, bootdns_unpub_hits, bootdns_unpub_pct_misses;
    uint64_t bootdns_pub_hits, bootdns_pub_misses, bootdns_unpub_misses;
    /* gauges (this shard's share) */
    int64_t current_connections;
    int64_t current_home_connections;
    int64_t current_notideal_connections;
    int64_t clients_local; /* keys with at least one connection here */
    int64_t current_dup_client_keys, current_dup_client_conns;
    int64_t watchers;              /* ds->watch_count, set when read */
    int64_t mesh_conns;            /* logged in with the mesh key (--mesh-conns-max) */
    int64_t clients_total;         /* keys local or reachable via the mesh (set when read) */
    int64_t mesh_links_ready;      /* outbound mesh links logged in */
    int64_t mesh_links_configured; /* -mesh-with entries that are not this server (when read) */
    int64_t prelogin_now;          /* ds->prelogin.count, set when read */
};

#endif /* SERVER_COUNTERS_H */
