/* server.h - hderp-server's private structures (the .c files of apps/derp/server only).
 *
 * Where things live: a client connection is accepted on any shard, speaks HTTP there, and after
 * the DERP handshake moves (net_conn_migrate) to the shard that owns its key, srv_owner(key):
 * the high 32 bits of the key's keyed SipHash (server_hash.h) modulo shards, its low bits the
 * peer-table slot. Each shard's peer table is authoritative for the keys it owns (no shared
 * table, no locks), so routing a packet is one hash: local delivery, or one bus message to the
 * owner. A client that keeps sending to one peer may then move to that peer's shard as a guest,
 * the owner's entry pointing there (server_place.c). Per-client state is heap memory because it
 * is born on the accepting shard and dies on another. The relay core tells the layers above it
 * what happens through struct srv_relay_hooks (cfg->hooks, server_hooks.c). */
#ifndef SERVER_H
#define SERVER_H

#include <arpa/inet.h>

#include "derp_proto.h"
#include "server_config.h"
#include "server_counters.h"
#include "relay/server_hash.h"
#include "server_limits.h"
#include <hd/hd.h>
#include <hd/net.h>
#include <hd/net_http.h>
#include <hd/tls.h>

/* ---------------------------------------------------------------- clients and peers */

struct srv_shard;
struct srv_peer;

/* Keys this connection has received packets from: they get PeerGone when those leave
 * (server_sources.c). One block of its shard's pool: cap key prefixes (0 = empty), then cap
 * uint32 positions of the connection in that key's subscriber list (struct srv_subs_entry).
 * travelling: between two shards (a move), slots is a heap array of count prefixes. */
struct srv_keyset {
    uint64_t *slots;
    uint32_t cap, count;
    bool travelling;
    uint64_t last; /* the prefix subscribed to last, in slots (0: none): the per-packet memo */
};

/* A client's phase, changed only by srv_client_phase_set (below), which asserts each change:
 *   HANDSHAKE -> ADMITTING  ClientInfo read, admission's answer pending (reading paused, §5)
 *   HANDSHAKE, ADMITTING -> ACTIVE  admitted on its key's owner shard (or taken over from the
 *                                   predecessor at an upgrade: HANDSHAKE -> ACTIVE)
 *   HANDSHAKE, ADMITTING -> MOVING  admitted, on its way to the owner shard
 *   ACTIVE -> MOVING        placement, a call home, an upgrade's hand-over
 *   MOVING -> ACTIVE        arrived (on the owner, as a guest, or home)
 *   ACTIVE -> CLOSED        closed: no more enqueues (a close in another phase keeps it). */
enum srv_client_phase {
    SRV_CLIENT_HANDSHAKE,
    SRV_CLIENT_ADMITTING,
    SRV_CLIENT_MOVING,
    SRV_CLIENT_ACTIVE,
    SRV_CLIENT_CLOSED,
    SRV_CLIENT_PHASES
};

struct net_http_client;

/* Per-key accounting (server_account.c): what this connection relayed and has not yet fed to
 * its shard's tables (received: from the key; sent: to it), and its named-key entry there. */
struct srv_acct_conn {
    uint64_t rx_bytes, rx_pkts, tx_bytes, tx_pkts;
    uint32_t named; /* 1 + its index in the shard's named table; 0: not a named key */
    bool attached;
};

struct srv_client {
    struct net_conn *conn;
    struct srv_shard *ds;
    unsigned instance; /* ds->instance: which relay of the runtime, after a move too */
    enum srv_client_phase phase;
    struct derp_pubkey key;
    bool mesh, prober, can_ack_pings, not_ideal, fast_start, preferred, watcher;
    uint8_t notes_batches; /* watcher: notices frames sent since its writer last ran */
    /* frames handed to the connection in the tick whose count's low 16 bits are batch_tick (in
     * the padding before watch_idx: an idle connection costs nothing more; a frame exactly
     * 65,536 ticks after the last merges into its batch, harmless) */
    uint16_t batch_frames, batch_tick;
    uint32_t watch_idx;       /* watcher: its slot in ds->watch_list */
    struct hd_frame *notes;   /* watcher: this tick's presence notices (server_peers.c) */
    bool prelogin;            /* counted in ds->prelogin (until admitted or closed) */
    struct srv_account *acct; /* frames its packets (a watcher: its notices) hold */
    /* A ClientInfo over SRV_LOGIN_INLINE_MAX, gathered here (net keeps at most
     * DERP_CONN_TAIL_MAX unconsumed; the spec allows 256 KiB): the whole frame, login only. */
    uint8_t *login_buf;
    uint32_t login_len, login_have;
    bool pong_pending;
    uint8_t pong[DERP_PING_LEN];
    struct derp_addr remote;
    struct derp_splitter sp;
    struct net_http_client *admit; /* pending admission request (§5) */
    struct srv_peer *peer;
    struct srv_client *peer_next; /* the key's other connections (dups) */
    uint64_t activity;            /* shard-wide sequence of its last frame */
    uint64_t connected_ms;
    struct srv_keyset sources;
    struct hd_flush writer;
    struct hd_timer keepalive;
    uint32_t keepalive_ms;      /* its KeepAlive period: the interval + its own jitter (derper) */
    struct hd_timer rtt_timer;  /* derp_tcp_rtt: TCP_INFO every SRV_RTT_INTERVAL_MS */
    bool rtt_checked, rtt_off;  /* the first look done; it failed ("error": no more looks) */
    struct hd_tbucket not_here; /* NotHere replies (DERP_NOT_HERE_BURST, 1 per interval) */
    /* -rate-config (server_rate.c): this connection's bucket; reading paused until read_timer
     * while a frame waits for its tokens; paid: the current frame has its tokens. */
    struct hd_tbucket rate;
    bool rate_paid, rate_waiting;
    /* Reading paused until this fires (srv_client_read_pause): a frame waiting for its rate
     * tokens, or a wait for a backed-up receiver (server_wait.c). */
    struct hd_timer read_timer;
    /* server_wait.c: the receiver this sender waits for (NULL: none), the senders waiting for
     * this one, its links in that list; derper's policy only until wait_off_ms; its run of
     * packets to one destination (the first 8 bytes of its key). */
    struct srv_client *wait_for, *waiters, *wait_next, **wait_pprev;
    uint64_t wait_off_ms, run_dst;
    uint16_t run_len;
    /* Placement (server_place.c): guest = the connection lives on another shard than its key's
     * owner (cl->peer is then this shard's guest entry); placing = on its way there. The
     * hash of the destination this client sent to last, and how many packets in a row
     * (server_place_tick.c); place_due: on its shard's list for this tick's decisions. */
    bool guest, placing, going_home, place_due;
    uint32_t place_run;
    uint64_t place_h;
    uint64_t moved_ms, asked_ms; /* its last move or ask to go home; its last ask */
    /* -verify-recheck-interval (server_admit_recheck.c): the next re-check; the request in
     * flight is cl->admit, rechecking while it is. */
    struct hd_timer recheck;
    bool rechecking;
    struct srv_acct_conn tally;          /* per-key accounting (server_account.c) */
    uint32_t quota;                      /* -rate-config Keys: 1 + its usage slot on ds; 0: none */
    struct srv_hash_memo dst_hash;       /* the hash of the key it last sent to (on_send_packet) */
    struct srv_live_out *exporting;      /* an upgrade's hand-over (server_live.c), and: */
    bool imported, live_paused, in_move; /* in_move: counted in moves_sent */
};

static inline void srv_client_phase_set(struct srv_client *cl, enum srv_client_phase to)
{
#define SRV_PHASE_BIT(p) (1u << SRV_CLIENT_##p)
    static const uint8_t allowed[SRV_CLIENT_PHASES] = {
        [SRV_CLIENT_HANDSHAKE] =
            SRV_PHASE_BIT(ADMITTING) | SRV_PHASE_BIT(ACTIVE) | SRV_PHASE_BIT(MOVING),
        [SRV_CLIENT_ADMITTING] = SRV_PHASE_BIT(ACTIVE) | SRV_PHASE_BIT(MOVING),
        [SRV_CLIENT_MOVING] = SRV_PHASE_BIT(ACTIVE),
        [SRV_CLIENT_ACTIVE] = SRV_PHASE_BIT(MOVING) | SRV_PHASE_BIT(CLOSED),
        [SRV_CLIENT_CLOSED] = 0,
    };
#undef SRV_PHASE_BIT
    HD_ASSERT(cl->phase < SRV_CLIENT_PHASES && to < SRV_CLIENT_PHASES);
    HD_ASSERT(allowed[cl->phase] & (1u << to)); /* a transition the table above allows */
    cl->phase = to;
}

/* A key this shard owns with at least one local connection, or reachable via mesh nodes. */
struct srv_peer {
    struct derp_pubkey key;
    struct srv_client *clients; /* dup list, newest first */
    struct srv_client *active;  /* the one that receives; NULL: none (dup_client drops) */
    uint32_t clients_count;
    /* Mesh nodes that reported the key (PeerPresent on their watch stream), in the order
     * they did: fwd[0] is the one packets go to while the key has no local connection. */
    uint8_t fwd_count;
    uint8_t fwd[SRV_MESH_NODES_MAX];
    /* Owner table: the key's one connection lives on shard guest_at - 1 (0: here, or none);
     * it counts in clients_count but is not in clients. While placing (on its way), packets
     * wait in held (SRV_PLACE_HELD_MAX, allocated for the move). */
    uint8_t guest_at;
    bool placing;
    uint16_t held_count; /* <= SRV_PLACE_HELD_MAX */
    struct hd_frame **held;
};

struct srv_peer_table {
    struct srv_peer **slots;
    uint32_t cap, count;
};

/* The reverse of the keysets, per shard: a source key's subscribers on this shard. */
struct srv_subs_entry {
    uint64_t prefix;     /* 0 = empty slot */
    uint32_t count, cap; /* cap 0: the one subscriber is inline */
    union {
        struct srv_client *one;
        struct srv_client **many;
    };
};

/* The shard's index (SRV_SUBS_SLOTS, allocated at shard start) and the pools of the keysets and
 * subscriber lists (server_sources.c); a subscription they have no room for is counted in
 * ctr.subs_refused. */
struct srv_subs {
    struct srv_subs_entry *slots;
    uint32_t cap, count;
    struct hd_slab *keysets[SRV_KEYSET_CLASSES]; /* class i: SRV_KEYSET_MIN << i slots */
    struct hd_slab *vecs[SRV_SUBS_VEC_CLASSES];  /* class i: SRV_SUBS_VEC_MIN << i pointers */
};

struct derp_client; /* derp_client.h: the DERP client library */

/* The outbound watch connection to mesh node `id` (on shard id % shards). */
struct srv_mesh_link {
    struct srv_shard *ds;
    const struct srv_mesh_node *node;
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

/* Connections on this shard not logged in yet (server_prelogin.c). */
struct srv_prelogin_slot;
struct srv_prelogin {
    uint32_t count; /* all of them */
    uint32_t mask;  /* slots - 1 */
    struct srv_prelogin_slot *slots;
};

/* Fair shares of the frame pools (server_frames.c: connections; server_frame_addrs.c). */
struct srv_frame_addr; /* struct srv_account: with srv_client above */
struct srv_frames {
    unsigned classes;
    uint32_t size[HD_FRAME_CLASSES_MAX];                    /* data bytes of each class */
    uint64_t reserve[HD_FRAME_CLASSES_MAX];                 /* kept for control frames */
    const struct hd_pool_stats *pool[HD_FRAME_CLASSES_MAX]; /* live: cap - in_use */
    struct hd_slab *accounts, *addrs;
    struct srv_frame_addr **slots; /* address -> entry: open addressing, at most 1/2 full */
    uint32_t cap, count;           /* slots; entries in them (some free to reuse) */
    struct srv_frame_addr *spill;  /* for connections whose entry could not be made */
};

/* This tick's placement decisions (server_place_tick.c): the clients whose run of packets
 * reached SRV_PLACE_PACKETS, with the destination and what the route asked for. */
struct srv_place_due {
    struct srv_client *cl; /* NULL: it left the shard or closed since */
    uint8_t why;           /* enum srv_place_for (server_place.h) */
    uint8_t dst[DERP_KEY_LEN];
};
struct srv_place_tick {
    struct hd_flush flush; /* queued while count > 0 */
    uint32_t count;
    struct srv_place_due due[SRV_PLACE_DUE_MAX];
};

struct srv_shard {
    struct hd_shard *s;
    const struct srv_config *cfg;
    /* This relay's place in the runtime's modules (hd_runtime_module_index): several relays,
     * each with its own configuration, share one runtime; bus messages name their instance. */
    unsigned instance;
    struct net_listener *listener;
    struct net_listener *http_listener; /* -http-port in TLS mode */
    struct net_udp *stun;
    struct srv_peer_table peers;
    struct srv_peer_table guests; /* connections living here whose keys other shards own */
    struct srv_subs subs;         /* source key -> connections here that received from it (§6.7) */
    /* This shard's watchers (WatchConns), so presence events reach them without a walk over
     * every connection; allocated at the first one (SRV_WATCHERS_MAX slots). */
    struct srv_client **watch_list;
    uint32_t watch_count;
    /* Watchers anywhere in the process (every shard hears of each WatchConns and of each
     * watcher's end): presence events are broadcast only while this is non-zero. */
    uint32_t watchers_total;
    uint64_t activity_seq;
    uint64_t pack_window_ms; /* server_pack.c: its moves in the window that began then */
    uint32_t pack_moves;
    struct srv_place_tick place_tick; /* this tick's placement decisions (server_place_tick.c) */
    uint8_t *scratch;                 /* ClientInfo plaintext (DERP_CLIENT_INFO_PLAIN_MAX) */
    /* -accept-connection-limit: this shard's share of the rate and burst (rate 0: off) */
    struct hd_tbucket accept;
    double accept_per_ms, accept_burst;
    /* derper's average_queue_duration_ms: a moving average (weight 0.1 for the newest) of the
     * milliseconds each packet written here waited in its receiver's queue (0: sent at once). */
    double queue_avg_ms;
    struct srv_mesh_link *links; /* cfg->mesh_count entries; this shard's: id % shards */
    struct srv_prelogin prelogin;
    struct srv_frames frames;
    struct srv_admit_cache_slot *admit_cache; /* -verify-cache-ttl; NULL until the first */
    uint32_t rechecks_inflight;
    struct srv_acct *acct;         /* per-key accounting (server_account.c) */
    struct srv_quota_state *quota; /* -rate-config Keys' usage (server_quota.c); NULL: none */
    struct srv_live *live;         /* an upgrade's hand-over of clients (server_live.c) */
    /* Set by the upgrade when this shard hands its clients over (srv_live_freeze): presence is
     * silent, nothing is placed, a packet for a key that left gets no NotHere. */
    bool handing_over;
    uint64_t handover_dropped; /* packets for clients on their way out, dropped */
    struct srv_counters ctr;
};

/* The relay core's events, for what sits above it: admission and rate limits (admit/),
 * per-key accounting (ops/), the upgrade's bookkeeping (upgrade/). The composition root fills
 * one table (srv_hooks, server_hooks.c) and srv_configure points cfg->hooks at it; relay/ calls
 * up only through it (tidy: server-layers), and every hook is set. */
struct srv_relay_hooks {
    /* §5, a client that is not a mesh peer sent its ClientInfo: srv_client_admitted's result
     * (admitted now), 0 (pending: srv_client_admitted follows) or -errno (refused). */
    int (*admit)(struct srv_client *cl);
    void (*login_over)(struct srv_client *cl); /* admitted, refused or closed: pre-login ends */
    void (*settle)(struct srv_client *cl);     /* active on its shard (again, after a move) */
    void (*unsettle)(struct srv_client *cl);   /* leaves its shard, or closes */
    void (*closing)(struct srv_client *cl);    /* closed, before the core lets it go */
    void (*closed)(struct srv_client *cl);     /* closed: last, before it is freed */
    /* A move between shards began (after net_conn_migrate returned 0) / ended (on the
     * destination, c NULL when it failed; or its close on the source). */
    void (*move_sent)(struct srv_client *cl);
    void (*move_done)(struct srv_shard *ds, struct srv_client *cl, struct net_conn *c);
    void (*tally_feed)(struct srv_client *cl); /* cl->tally to the shard's tables */
    /* -rate-config: a frame of len bytes may go (false: reading paused until its tokens are
     * there); the frame is done. Quota: a packet of len bytes is within the key's budgets. */
    bool (*rate_take)(struct srv_client *cl, uint32_t len);
    void (*rate_frame_done)(struct srv_client *cl);
    bool (*quota_take)(struct srv_client *cl, uint32_t len);
};
extern const struct srv_relay_hooks srv_hooks;

/* What a connection relayed since its last feed (per-key accounting reads cl->tally): two adds
 * and a compare on the relay path; past SRV_ACCT_FEED_BYTES the hook feeds the tables. */
static inline void srv_tally_rx(struct srv_client *cl, uint32_t bytes)
{
    cl->tally.rx_bytes += bytes;
    cl->tally.rx_pkts++;
    if (cl->tally.rx_bytes + cl->tally.tx_bytes >= SRV_ACCT_FEED_BYTES)
        cl->ds->cfg->hooks->tally_feed(cl);
}
static inline void srv_tally_tx(struct srv_client *cl, uint32_t bytes)
{
    cl->tally.tx_bytes += bytes;
    cl->tally.tx_pkts++;
    if (cl->tally.rx_bytes + cl->tally.tx_bytes >= SRV_ACCT_FEED_BYTES)
        cl->ds->cfg->hooks->tally_feed(cl);
}

/* ---------------------------------------------------------------- functions */

/* The relay as a module (server_module.c): arg = its struct srv_config (built by srv_configure,
 * attached with srv_attach; it outlives the runtime). It requires net_module; list tls_module
 * before it when srv_needs_tls. Several instances (configurations) may share a runtime. */
extern const struct hd_module srv_module;
struct srv_flags;
/* Main thread, before the runtime: derper's flags into cfg (zeroed by the caller). Messages go
 * to stderr. 0 or -errno; srv_config_fini frees what it built, also after a failure. */
int srv_configure(struct srv_config *cfg, const struct srv_flags *f);
void srv_config_fini(struct srv_config *cfg);
/* Whether the shards speak TLS for cfg (TLS mode, https mesh links or admission). */
bool srv_needs_tls(const struct srv_config *cfg);
/* Main thread, after hd_runtime_create and before start: give every shard cfg's reloadable
 * parts (allow list, rate limit, TLS context); srv_detach after hd_runtime_wait. 0 or -errno
 * with err set (nothing attached). */
int srv_attach(struct srv_config *cfg, struct hd_runtime *rt, char *err, size_t err_size);
void srv_detach(struct srv_config *cfg);
/* Relay instance's state on shard s (NULL before its shard_init, after its shard_fini). */
static inline struct srv_shard *srv_shard_at(const struct hd_shard *s, unsigned instance)
{
    return hd_shard_instance_state(s, instance);
}

static inline unsigned srv_owner(const struct srv_shard *ds, const uint8_t key[DERP_KEY_LEN])
{
    /* keyed (server_hash.c): a client cannot pick keys that all land on one shard */
    return srv_key_shard(srv_hash_node_key(key), hd_shard_count(ds->s));
}

/* server_http.c: a fresh connection's HTTP phase */
void srv_http_accept(struct net_listener *l, int fd, const struct net_addr *peer, void *arg);
/* The plain -http-port listener of TLS mode (spec §1.1). */
void srv_http80_accept(struct net_listener *l, int fd, const struct net_addr *peer, void *arg);
/* -accept-connection-limit: this shard's bucket, before its listener starts. */
void srv_accept_limit_init(struct srv_shard *ds);

/* server_prelogin.c: connections not logged in yet, per shard and per source address. enter
 * returns false (counted, logged) over --prelogin-max or --prelogin-per-addr-max; leave once
 * for each enter that returned true. */
int srv_prelogin_init(struct srv_shard *ds);
void srv_prelogin_fini(struct srv_shard *ds);
bool srv_prelogin_enter(struct srv_shard *ds, const struct net_addr *peer);
void srv_prelogin_leave(struct srv_shard *ds, const struct net_addr *peer);
/* The connection counted under from (entered) now counts under to (a PROXY header named the
 * client): always moved; true when to is now over the per-address cap (close it). */
bool srv_prelogin_move(struct srv_shard *ds, const struct net_addr *from,
                       const struct net_addr *to);
/* A source address as 16 bytes (IPv4 as ::ffff:a.b.c.d; none: zeros): the tables' key. */
void srv_addr_key(const struct net_addr *a, uint8_t ip[16]);

/* The relay core (relay/): clients, routing, peers, frames, placement, the mesh. */
#include "relay/server_relay.h"

/* server_certs.c: TLS mode's server context (main thread, except current) */
int srv_certs_configure(struct srv_config *cfg, char *err, size_t err_size);
int srv_certs_attach(struct srv_config *cfg, struct hd_runtime *rt);
void srv_certs_detach(struct srv_config *cfg);
void srv_certs_reload(struct srv_config *cfg); /* SIGHUP: a bad file keeps the old one */
struct tls_ctx *srv_certs_current(const struct srv_shard *ds);

/* server_bootdns.c: -bootstrap-dns-names and -unpublished-bootstrap-dns-names (main thread:
 * attach, detach; a shard: serve GET /bootstrap-dns, the connection closed after it). */
int srv_bootdns_attach(struct srv_config *cfg, struct hd_runtime *rt);
void srv_bootdns_detach(struct srv_config *cfg);
void srv_bootdns_serve(struct srv_shard *ds, struct net_conn *c, const struct net_http_req *req);
bool srv_bootdns_addr_matches(const struct net_addr *a, double percent);
double srv_bootdns_pcg_float64(uint64_t seed1, uint64_t seed2); /* Go's PCG: its first Float64 */
unsigned srv_bootdns_queried_domains(void); /* distinct ?q= names seen (derper's, any thread) */

/* server_http.c, for server_proxy.c: a main-listener connection in its HTTP phase (NULL: the
 * pool was full, fd closed), TLS under it (or closed), and the accept bucket's verdict. */
struct net_conn *srv_http_adopt(struct srv_shard *ds, int fd, const struct net_addr *peer);
void srv_http_tls_start(struct srv_shard *ds, struct net_conn *c);
bool srv_accept_allowed(struct srv_shard *ds);

/* server_proxy.c: -proxy-protocol-from (PROXY protocol v1/v2 on the main listener). */
/* Parses the list into cfg; 0, or -errno with the message printed. Main thread. */
int srv_proxy_configure(struct srv_config *cfg, const char *list);
void srv_proxy_accept(struct srv_shard *ds, int fd, const struct net_addr *peer);

/* server_stun.c */
int srv_stun_start(struct srv_shard *ds);
void srv_stun_stop(struct srv_shard *ds);

/* Admission (§5): admit/server_admit.h */
#include "admit/server_admit.h"

/* server_rate.c: -rate-config (spec §6.9) */
/* Main thread: read FILE into *out. Returns 0 or -EINVAL with err naming what is wrong. */
int srv_rate_load(const char *path, struct srv_rate *out, char *err, size_t err_size);
void srv_rate_set(struct srv_rate *r, uint64_t bytes_per_sec, uint64_t burst_bytes);
/* attach: after hd_runtime_create, before start (0 or -ENOMEM); reload: main thread, SIGHUP (a
 * bad file is logged, the old limit stays); detach: after hd_runtime_wait. */
int srv_rate_attach(struct srv_config *cfg, struct hd_runtime *rt);
void srv_rate_reload(struct srv_config *cfg);
void srv_rate_detach(struct srv_config *cfg);
/* The limit this shard applies now (borrowed until the shard returns to its loop). */
const struct srv_rate *srv_rate_current(const struct srv_shard *ds);
/* At activation (a full bucket) and at close. */
void srv_rate_client_init(struct srv_client *cl, uint64_t now_ms);
/* Before handling a frame of payload_len bytes: true to go on (tokens taken, or no limit);
 * false: reading is paused until the tokens are there, then the frame is offered again. */
bool srv_rate_take(struct srv_client *cl, uint32_t payload_len);
/* The frame that paid was handled (its bytes consumed). */
void srv_rate_frame_done(struct srv_client *cl);
/* server_allow.c: --allow-keys FILE (node keys allowed to log in; reloaded on SIGHUP).
 * configure: main thread, before the runtime (loads the file; err names file:line; 0 or
 * -errno). attach: after hd_runtime_create, before start (0 or -ENOMEM). reload: main thread
 * (SIGHUP; a bad file is logged, the old list stays). detach: after hd_runtime_wait. admits: on
 * the client's shard; counts and logs a refusal. */
int srv_allow_configure(struct srv_config *cfg, const char *path, char *err, size_t err_size);
/* The list configure loaded, when it never got attached (tools, tests, error paths). */
void srv_allow_config_free(struct srv_config *cfg);
int srv_allow_attach(struct srv_config *cfg, struct hd_runtime *rt);
void srv_allow_reload(struct srv_config *cfg);
void srv_allow_detach(struct srv_config *cfg);
bool srv_allow_admits(struct srv_shard *ds, const struct derp_pubkey *key);

/* The sorted key list of a file (--allow-keys, -account-keys): one per line, nodekey:<hex> or
 * hex, # comments. load: a new snapshot (the caller's reference) or -errno, err naming
 * file:line; at most max keys. */
struct srv_keylist {
    struct hd_snap snap;
    uint32_t count;
    uint8_t (*keys)[DERP_KEY_LEN]; /* sorted, no duplicates */
};
int srv_keylist_load(const char *path, uint32_t max, struct srv_keylist **out, char *err,
                     size_t err_size);
bool srv_keylist_has(const struct srv_keylist *l, const struct derp_pubkey *key);

#endif /* SERVER_H */
