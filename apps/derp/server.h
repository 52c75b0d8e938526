/* server.h - hderp-server's private structures (apps/derp/server_*.c only).
 *
 * Where things live: a client connection is accepted on any shard, speaks HTTP there, and after
 * the DERP handshake moves (net_conn_migrate) to the shard that owns its key,
 * derp_owner(key) = hash(key) % shards. Each shard's peer table is authoritative for the keys it
 * owns, so routing a packet is one hash: local delivery, or one bus message to the owner.
 * Per-client state is heap memory because it is born on the accepting shard and dies on the
 * owner shard. */
#ifndef DERP_SERVER_H
#define DERP_SERVER_H

#include <arpa/inet.h>

#include "derp_proto.h"
#include "derp_server_limits.h"
#include "hd.h"
#include "net.h"
#include "net_http.h"
#include "tls.h"

/* ---------------------------------------------------------------- configuration (read-only) */

/* One -mesh-with entry (spec §7): the node this server keeps a watch connection to. */
struct derp_mesh_node {
    char entry[DERP_MESH_ENTRY_LEN_MAX + 1];  /* as given, for logs */
    char host[NET_URL_AUTHORITY_LEN_MAX + 1]; /* Host header: host[:port] */
    char name[NET_URL_AUTHORITY_LEN_MAX + 1]; /* TLS server name: host without port, brackets */
    char dial[NET_URL_AUTHORITY_LEN_MAX + 1]; /* dialhost, or host: looked up at each dial */
    uint16_t port;                            /* the URL's (443, 80 or as written) */
    bool numeric;                             /* dial is an address: addr, no lookups */
    struct net_addr addr;
    bool tls; /* https (derper); http:// entries: plain */
};

/* -rate-config (spec §6.9, server_rate.c): the per-client receive limit as read from the file,
 * and what the buckets use (tokens a millisecond; the burst raised to DERP_RATE_BURST_MIN). */
struct derp_rate {
    uint64_t bytes_per_sec; /* PerClientRateLimitBytesPerSec; 0: off */
    uint64_t burst_bytes;   /* PerClientRateBurstBytes, as configured */
    double per_ms, burst;
};

struct derp_config {
    struct net_addr addr;
    char addr_text[64];
    bool dev;
    bool verbose;
    unsigned shards;
    struct derp_keypair key;
    char key_hex[DERP_KEY_HEX_SIZE];
    bool have_mesh_key;
    struct derp_mesh_key mesh_key;
    uint32_t write_timeout_ms;    /* -tcp-write-timeout (regular clients) */
    uint32_t keepalive_ms;        /* DERP KeepAlive frame period (60 s) */
    uint32_t keepalive_jitter_ms; /* + random [0, jitter) per connection */
    int tcp_user_timeout_ms;      /* -tcp-user-timeout */
    int tcp_keepalive_s;          /* -tcp-keepalive-time */
    const char *home;             /* -home: "", "blank" or a URL */
    bool stun;                    /* -stun */
    int stun_port;                /* -stun-port */
    bool tls;                     /* TLS mode (port 443 or -certmode manual); false: plain */
    int http_port;                /* -http-port in TLS mode; -1: off */
    struct net_addr http_addr;
    bool sni_required; /* manual mode with a DNS -hostname: SNI must equal it (spec §1.2) */
    char hostname[256];
    bool meta_cert; /* TLS: send the meta certificate (spec §1.2) */
    /* TLS mode's certificate (server_certs.c): the files, or self-signed for an IP hostname;
     * the server context is a snapshot per shard, rebuilt on SIGHUP. */
    bool self_signed;
    char cert_file[1400], key_file[1400];
    struct derp_tls_snap *tls_initial; /* built at start-up, until derp_certs_attach */
    struct hd_snap_var *tls_var;
    /* -verify-client-url (spec §5); NULL: off. Resolved once at start-up (server_admit.c). */
    const char *verify_url;
    struct net_url verify;       /* its parts: authority (Host), path ("" means "/") */
    struct net_addr verify_addr; /* its host, resolved */
    struct tls_ctx *verify_tls;  /* https: system roots, host name checked; NULL: http */
    bool verify_fail_open;
    /* -verify-clients (spec §5): ask tailscaled's LocalAPI at -socket (server_admit_local.c). */
    bool verify_local;
    const char *verify_local_path;
    struct net_addr verify_local_addr;
    /* -accept-connection-limit/-burst, process-wide; each shard's bucket gets 1/shards of both
     * (reuseport spreads accepts over shards), so no shared state on accept. */
    double accept_rate; /* tokens per ms; 0: off */
    double accept_burst;
    /* -mesh-with (server_mesh.c): node i's link lives on shard i % shards. */
    struct derp_mesh_node *mesh;
    unsigned mesh_count;
    struct tls_ctx *mesh_tls; /* https links: system roots (SSL_CERT_FILE); NULL: none */
    /* -rate-config FILE (NULL: none, no rate metrics), its limit at start-up, and the limit in
     * force as a snapshot per shard (reloaded on SIGHUP; NULL without a file). */
    const char *rate_config_path;
    struct derp_rate rate;
    struct hd_snap_var *rate_var;
    /* --allow-keys (server_allow.c); NULL: off. The list itself is a snapshot per shard. */
    const char *allow_path;
    struct derp_allow *allow_initial; /* loaded at start-up, until derp_allow_attach */
    struct hd_snap_var *allow;
};

/* ---------------------------------------------------------------- metrics (per shard, summed) */

enum derp_kind { DERP_KIND_DISCO = 0, DERP_KIND_OTHER = 1, DERP_KINDS };
enum derp_drop {
    DERP_DROP_UNKNOWN_DEST,
    DERP_DROP_UNKNOWN_DEST_ON_FWD,
    DERP_DROP_GONE_DISCONNECTED,
    DERP_DROP_QUEUE_HEAD,
    DERP_DROP_QUEUE_TAIL,
    DERP_DROP_WRITE_ERROR,
    DERP_DROP_DUP_CLIENT,
    DERP_DROPS
};
extern const char *const derp_drop_names[DERP_DROPS];

struct derp_counters {
    uint64_t accepts;
    uint64_t accepts_refused; /* closed by -accept-connection-limit */
    uint64_t bytes_received, packets_received;
    uint64_t packets_received_kind[DERP_KINDS];
    uint64_t bytes_sent, packets_sent;
    uint64_t packets_dropped[DERP_DROPS][DERP_KINDS];
    uint64_t bytes_dropped[DERP_DROPS][DERP_KINDS];
    uint64_t got_ping, sent_pong;
    uint64_t peer_gone_disconnected_frames, peer_gone_not_here_frames;
    uint64_t home_moves_in, home_moves_out;
    uint64_t sclient_write_timeouts;
    uint64_t total_dup_client_conns;
    uint64_t unknown_frames;
    uint64_t packets_forwarded_in, packets_forwarded_out;
    uint64_t mesh_refused;     /* mesh-only frames from non-mesh clients (closed) */
    uint64_t handshake_errors; /* connections that failed the login */
    uint64_t http_requests;
    uint64_t websocket_accepts;
    uint64_t admit_refused;     /* closed by admission control (§5) */
    uint64_t admit_errors;      /* admission requests that failed (timeout, unreachable, ...) */
    uint64_t allowlist_refused; /* closed at login: key not in --allow-keys */
    uint64_t bus_dropped;       /* packets dropped because the bus to the owner was full */
    uint64_t stun_success, stun_not_stun, stun_write_error, stun_ipv4, stun_ipv6;
    /* mesh (§7): a key gained a second forwarder / went back to one; a removal for a
     * forwarder the key did not have; forwards lost because the link was down or full */
    uint64_t multiforwarder_created, multiforwarder_deleted;
    uint64_t packet_forwarder_delete_other_value;
    uint64_t mesh_forward_dropped;
    uint64_t rate_limit_waited; /* frames that waited for -rate-config tokens */
    /* gauges (this shard's share) */
    int64_t current_connections;
    int64_t current_home_connections;
    int64_t current_notideal_connections;
    int64_t clients_local; /* keys with at least one connection here */
    int64_t current_dup_client_keys, current_dup_client_conns;
    int64_t watchers;         /* ds->watch_count, set when read */
    int64_t clients_total;    /* keys local or reachable via the mesh (set when read) */
    int64_t mesh_links_ready; /* outbound mesh links logged in */
};

/* ---------------------------------------------------------------- clients and peers */

struct derp_shard;
struct derp_peer;

/* A bounded FIFO of packet frames waiting for the connection (derper: two per client). Its
 * DERP_QUEUE_DEPTH slots are the k-th half of the connection's qslots. */
struct derp_pktq {
    uint8_t head, count;
};

/* Keys this connection has received packets from: they get PeerGone when those leave
 * (server_sources.c). One block: cap key prefixes (0 = empty), then cap uint32 positions of
 * the connection in that key's subscriber list (struct derp_subs_entry). */
struct derp_keyset {
    uint64_t *slots;
    uint32_t cap, count;
};

/* ADMITTING: ClientInfo read, admission's answer pending (reading paused, §5). */
enum derp_sclient_phase {
    DERP_SCLIENT_HANDSHAKE,
    DERP_SCLIENT_ADMITTING,
    DERP_SCLIENT_MOVING,
    DERP_SCLIENT_ACTIVE
};

struct net_http_client;

struct derp_sclient {
    struct net_conn *conn;
    struct derp_shard *ds;
    enum derp_sclient_phase phase;
    struct derp_pubkey key;
    bool mesh, prober, can_ack_pings, not_ideal, fast_start, preferred, watcher;
    uint32_t watch_idx; /* watcher: its slot in ds->watch_list */
    bool send_paused;   /* net queue over its high watermark */
    bool pong_pending;
    uint8_t pong[DERP_PING_LEN];
    struct derp_addr remote;
    struct derp_splitter sp;
    struct net_http_client *admit; /* pending admission request (§5) */
    struct derp_peer *peer;
    struct derp_sclient *peer_next; /* the key's other connections (dups) */
    uint64_t activity;              /* shard-wide sequence of its last frame */
    uint64_t connected_ms;
    /* Both queues' slots (DERP_KINDS * DERP_QUEUE_DEPTH), allocated when a packet has to wait
     * (the connection is backed up) and freed when both queues are empty again: a connection
     * that keeps up, idle ones above all, pays 8 bytes here, not 512. */
    struct hd_frame **qslots;
    struct derp_pktq q[DERP_KINDS];
    struct derp_keyset sources;
    struct hd_flush writer;
    struct hd_timer keepalive;
    struct hd_tbucket not_here; /* NotHere replies (DERP_NOT_HERE_BURST, 1 per interval) */
    /* -rate-config (server_rate.c): this connection's bucket; reading paused until the timer
     * while a frame waits for its tokens; paid: the current frame has its tokens. */
    struct hd_tbucket rate;
    struct hd_timer rate_timer;
    bool rate_paid, rate_waiting;
};

/* A key this shard owns with at least one local connection, or reachable via mesh nodes. */
struct derp_peer {
    struct derp_pubkey key;
    struct derp_sclient *clients; /* dup list, newest first */
    struct derp_sclient *active;  /* the one that receives; NULL: none (dup_client drops) */
    uint32_t clients_count;
    /* Mesh nodes that reported the key (PeerPresent on their watch stream), in the order
     * they did: fwd[0] is the one packets go to while the key has no local connection. */
    uint8_t fwd_count;
    uint8_t fwd[DERP_MESH_NODES_MAX];
};

struct derp_peer_table {
    struct derp_peer **slots;
    uint32_t cap, count;
};

/* The reverse of the keysets, per shard: a source key's subscribers on this shard. */
struct derp_subs_entry {
    uint64_t prefix;     /* 0 = empty slot */
    uint32_t count, cap; /* cap 0: the one subscriber is inline */
    union {
        struct derp_sclient *one;
        struct derp_sclient **many;
    };
};

struct derp_subs {
    struct derp_subs_entry *slots;
    uint32_t cap, count;
};

struct derp_client; /* derp_client.h: the DERP client library */

/* The outbound watch connection to mesh node `id` (on shard id % shards). */
struct derp_mesh_link {
    struct derp_shard *ds;
    const struct derp_mesh_node *node;
    unsigned id;
    struct derp_client *k; /* NULL: not connected (retry pending, or self) */
    bool ready;            /* logged in: ForwardPacket goes out on it */
    bool self;             /* the entry is this server (same key): never dialed again */
    bool reported;         /* this connection sent PeerPresent: its close forgets routes */
    uint64_t failures;     /* consecutive failed attempts (logging) */
    struct hd_timer retry;
    /* A named node: the lookup in flight, and its addresses, tried in order before the next
     * lookup (as Go's dialer tries every address of a name). */
    struct net_resolve *resolving;
    struct net_addr addrs[NET_RESOLVE_ADDRS_MAX];
    unsigned addrs_count, addr_next;
};

struct derp_shard {
    struct hd_shard *s;
    const struct derp_config *cfg;
    struct net_listener *listener;
    struct net_listener *http_listener; /* -http-port in TLS mode */
    struct net_udp *stun;
    struct derp_peer_table peers;
    struct derp_subs subs; /* source key -> connections here that received from it (§6.7) */
    /* This shard's watchers (WatchConns), so presence events reach them without a walk over
     * every connection; allocated at the first one (DERP_WATCHERS_MAX slots). */
    struct derp_sclient **watch_list;
    uint32_t watch_count;
    /* Watchers anywhere in the process (every shard hears of each WatchConns and of each
     * watcher's end): presence events are broadcast only while this is non-zero. */
    uint32_t watchers_total;
    uint64_t activity_seq;
    uint8_t *scratch; /* ClientInfo plaintext (DERP_CLIENT_INFO_PLAIN_MAX) */
    /* -accept-connection-limit: this shard's share of the rate and burst (rate 0: off) */
    struct hd_tbucket accept;
    double accept_per_ms, accept_burst;
    struct derp_mesh_link *links; /* cfg->mesh_count entries; this shard's: id % shards */
    struct derp_counters ctr;
};

/* ---------------------------------------------------------------- functions */

extern const struct hd_module derp_module;

static inline unsigned derp_owner(const struct derp_shard *ds, const uint8_t key[DERP_KEY_LEN])
{
    uint64_t h;
    __builtin_memcpy(&h, key, sizeof(h)); /* node keys are curve points: uniform bytes */
    return (unsigned)(h % hd_shard_count(ds->s));
}

/* server_http.c: a fresh connection's HTTP phase */
void derp_http_accept(struct net_listener *l, int fd, const struct net_addr *peer, void *arg);
/* The plain -http-port listener of TLS mode (spec §1.1). */
void derp_http80_accept(struct net_listener *l, int fd, const struct net_addr *peer, void *arg);
/* -accept-connection-limit: this shard's bucket, before its listener starts. */
void derp_accept_limit_init(struct derp_shard *ds);

/* server_client.c: the DERP connection */
int derp_sclient_start(struct derp_shard *ds, struct net_conn *c, bool fast_start, bool not_ideal);
int derp_sclient_enqueue(struct derp_sclient *cl, struct hd_frame *f, uint32_t off, uint32_t len,
                         enum derp_kind kind);
void derp_sclient_send_ctl(struct derp_sclient *cl, const uint8_t *frame, size_t len);
void derp_sclient_close(struct derp_sclient *cl, int reason);
/* Admission passed: activate here or move to the key's owner shard. 0 or -errno. */
int derp_sclient_admitted(struct derp_sclient *cl);

/* server_sources.c: PeerGone subscriptions (§6.7). A RecvPacket from key was written to cl. */
void derp_source_subscribe(struct derp_sclient *cl, const uint8_t key[DERP_KEY_LEN]);
/* cl closes: out of every subscriber list, its keyset freed. */
void derp_sources_drop(struct derp_sclient *cl);
/* key left: its subscribers here, moved to *out (each one's keyset forgets key); false when it
 * had none. The caller walks derp_subs_vec(out)[0..out->count) and frees it. */
bool derp_sources_take(struct derp_shard *ds, const uint8_t key[DERP_KEY_LEN],
                       struct derp_subs_entry *out);
struct derp_sclient **derp_subs_vec(struct derp_subs_entry *e);
void derp_subs_entry_free(struct derp_subs_entry *e);
void derp_subs_fini(struct derp_subs *t);

/* server_peers.c: the peer table, routing, PeerGone and watchers */
int derp_peers_init(struct derp_peer_table *t);
void derp_peers_fini(struct derp_peer_table *t);
struct derp_peer *derp_peers_find(struct derp_peer_table *t, const uint8_t key[DERP_KEY_LEN]);
void derp_register(struct derp_shard *ds, struct derp_sclient *cl);
void derp_unregister(struct derp_shard *ds, struct derp_sclient *cl);
void derp_note_activity(struct derp_shard *ds, struct derp_sclient *cl);
/* Route a packet frame: f->data[0..32) = destination key, then a whole RecvPacket frame of len
 * bytes at offset DERP_ROUTE_OFF. Takes the caller's reference. */
void derp_route(struct derp_shard *ds, struct hd_frame *f, uint32_t len, enum derp_kind kind,
                bool forwarded);
void derp_watch_start(struct derp_shard *ds, struct derp_sclient *cl);
void derp_watch_stop(struct derp_shard *ds, struct derp_sclient *cl);
void derp_close_peer(struct derp_shard *ds, const uint8_t key[DERP_KEY_LEN]);
/* Run fn(ds, f, arg) on shard `to` (at once when it is this one), or on every shard. Take the
 * caller's reference of f; a full bus drops the event (counted, logged; send: -EAGAIN). */
typedef void derp_event_fn(struct derp_shard *ds, struct hd_frame *f, uint64_t arg);
int derp_event_send(struct derp_shard *ds, unsigned to, derp_event_fn *fn, struct hd_frame *f,
                    uint64_t arg);
void derp_event_broadcast(struct derp_shard *ds, derp_event_fn *fn, struct hd_frame *f,
                          uint64_t arg);
/* A frame holding key a (and b after it, when not NULL); NULL when the pool is empty. */
struct hd_frame *derp_key_frame(struct derp_shard *ds, const uint8_t *a, const uint8_t *b);
/* Mesh forwarders (owner shard of the key): node `id` reported key / no longer has it / went
 * away (every shard: forget all it reported). The key's correspondents get PeerGone when it
 * leaves the region (§6.7). */
void derp_forwarder_add(struct derp_shard *ds, const uint8_t key[DERP_KEY_LEN], unsigned id);
void derp_forwarder_remove(struct derp_shard *ds, const uint8_t key[DERP_KEY_LEN], unsigned id);
void derp_forwarder_remove_node(struct derp_shard *ds, unsigned id);
/* A disco packet from src had no destination: tell src's connection (on its owner shard). */
void derp_not_here(struct derp_shard *ds, const uint8_t src[DERP_KEY_LEN],
                   const uint8_t dst[DERP_KEY_LEN]);
struct derp_shard *derp_shard_here(void);

/* server_mesh.c: -mesh-with (spec §7) */
/* Main thread: parse and resolve the list (needs the mesh key). 0 or -1 with err set. */
int derp_mesh_configure(struct derp_config *cfg, const char *list, char *err, size_t err_size);
void derp_mesh_config_free(struct derp_config *cfg);
/* On each shard: dial this shard's links / close them. */
int derp_mesh_start(struct derp_shard *ds);
void derp_mesh_stop(struct derp_shard *ds);
void derp_mesh_fini(struct derp_shard *ds);
/* Owner shard: send the routed frame f (layout of derp_route) as ForwardPacket on node id's
 * link (on the link's shard). Takes the caller's reference. */
void derp_mesh_forward(struct derp_shard *ds, struct hd_frame *f, unsigned id);

/* server_certs.c: TLS mode's server context (main thread, except current) */
int derp_certs_configure(struct derp_config *cfg, char *err, size_t err_size);
int derp_certs_attach(struct derp_config *cfg, struct hd_runtime *rt);
void derp_certs_detach(struct derp_config *cfg);
void derp_certs_reload(struct derp_config *cfg); /* SIGHUP: a bad file keeps the old one */
struct tls_ctx *derp_certs_current(const struct derp_shard *ds);

/* server_stun.c */
int derp_stun_start(struct derp_shard *ds);
void derp_stun_stop(struct derp_shard *ds);

/* server_admit.c: admission control (§5) */
#define DERP_ADMIT_TIMEOUT_MS 5000 /* derper's -verify-client-url timeout */
#define DERP_ADMIT_BODY_MAX   4096 /* derper reads at most 4 KiB of the answer */
int derp_admit_configure(struct derp_config *cfg, const char *url, bool fail_open, char *err,
                         size_t err_size);
bool derp_admit_needed(const struct derp_config *cfg);
/* Whether admission makes TLS client connections (shards then need tls_shard_init). */
bool derp_admit_needs_tls(const struct derp_config *cfg);
void derp_admit_fini(struct derp_config *cfg); /* main thread, after the runtime stopped */
/* server_admit_local.c: -verify-clients (§5 step 2), GET whois from tailscaled's LocalAPI. */
#define DERP_TAILSCALED_SOCKET_DEFAULT "/var/run/tailscale/tailscaled.sock" /* derper on Linux */
#define DERP_ADMIT_LOCAL_BODY_MAX      (256u * 1024u) /* a WhoIsResponse: node, profile, caps */
int derp_admit_local_configure(struct derp_config *cfg, bool on, const char *socket, char *err,
                               size_t err_size);
/* Starts the whois request (cl->admit): 0 (derp_admit_local_done follows) or -errno. */
int derp_admit_local_start(struct derp_sclient *cl);
/* server_admit.c: the whois answer; why_refused NULL: known to tailscaled, go on. */
void derp_admit_local_done(struct derp_sclient *cl, const char *why_refused);
int derp_admit_start(struct derp_sclient *cl);
void derp_admit_cancel(struct derp_sclient *cl);

/* server_rate.c: -rate-config (spec §6.9) */
/* Main thread: read FILE into *out. Returns 0 or -EINVAL with err naming what is wrong. */
int derp_rate_load(const char *path, struct derp_rate *out, char *err, size_t err_size);
void derp_rate_set(struct derp_rate *r, uint64_t bytes_per_sec, uint64_t burst_bytes);
/* attach: after hd_runtime_create, before start (0 or -ENOMEM); reload: main thread, SIGHUP (a
 * bad file is logged, the old limit stays); detach: after hd_runtime_wait. */
int derp_rate_attach(struct derp_config *cfg, struct hd_runtime *rt);
void derp_rate_reload(struct derp_config *cfg);
void derp_rate_detach(struct derp_config *cfg);
/* The limit this shard applies now (borrowed until the shard returns to its loop). */
const struct derp_rate *derp_rate_current(const struct derp_shard *ds);
/* At activation (a full bucket) and at close. */
void derp_rate_client_init(struct derp_sclient *cl, uint64_t now_ms);
void derp_rate_client_fini(struct derp_sclient *cl);
/* Before handling a frame of payload_len bytes: true to go on (tokens taken, or no limit);
 * false: reading is paused until the tokens are there, then the frame is offered again. */
bool derp_rate_take(struct derp_sclient *cl, uint32_t payload_len);
/* The frame that paid was handled (its bytes consumed). */
void derp_rate_frame_done(struct derp_sclient *cl);
/* server_allow.c: --allow-keys FILE (node keys allowed to log in; reloaded on SIGHUP).
 * configure: main thread, before the runtime (loads the file; err names file:line; 0 or
 * -errno). attach: after hd_runtime_create, before start (0 or -ENOMEM). reload: main thread
 * (SIGHUP; a bad file is logged, the old list stays). detach: after hd_runtime_wait. admits: on
 * the client's shard; counts and logs a refusal. */
int derp_allow_configure(struct derp_config *cfg, const char *path, char *err, size_t err_size);
int derp_allow_attach(struct derp_config *cfg, struct hd_runtime *rt);
void derp_allow_reload(struct derp_config *cfg);
void derp_allow_detach(struct derp_config *cfg);
bool derp_allow_admits(struct derp_shard *ds, const struct derp_pubkey *key);

/* server_metrics.c */
void derp_varz_request(struct derp_shard *ds, struct net_conn *c, bool head_only);

#endif /* DERP_SERVER_H */
