/* server.h - hderp-server's private structures (the .c files of apps/derp/server only).
 *
 * Where things live: a client connection is accepted on any shard, speaks HTTP there, and after
 * the DERP handshake moves (net_conn_migrate) to the shard that owns its key,
 * srv_owner(key) = hash(key) % shards. Each shard's peer table is authoritative for the keys it
 * owns, so routing a packet is one hash: local delivery, or one bus message to the owner. A
 * client that keeps sending to one peer may then move to that peer's shard as a guest, the
 * owner's entry pointing there (server_place.c). Per-client state is heap memory because it is
 * born on the accepting shard and dies on another. */
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

/* A bounded FIFO of packet frames waiting for the connection (derper: two per client). Its
 * SRV_QUEUE_DEPTH slots are the k-th half of the connection's qslots. */
struct srv_pktq {
    uint8_t head, count;
};

/* Keys this connection has received packets from: they get PeerGone when those leave
 * (server_sources.c). One block: cap key prefixes (0 = empty), then cap uint32 positions of
 * the connection in that key's subscriber list (struct srv_subs_entry). */
struct srv_keyset {
    uint64_t *slots;
    uint32_t cap, count;
};

/* ADMITTING: ClientInfo read, admission's answer pending (reading paused, §5). */
enum srv_client_phase {
    SRV_CLIENT_HANDSHAKE,
    SRV_CLIENT_ADMITTING,
    SRV_CLIENT_MOVING,
    SRV_CLIENT_ACTIVE
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
    uint32_t watch_idx;       /* watcher: its slot in ds->watch_list */
    struct hd_frame *notes;   /* watcher: this tick's presence notices (server_peers.c) */
    bool send_paused;         /* net queue over its high watermark */
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
    /* Both queues' slots (SRV_KINDS * SRV_QUEUE_DEPTH), allocated when a packet has to wait
     * (the connection is backed up) and freed when both queues are empty again: a connection
     * that keeps up, idle ones above all, pays 8 bytes here, not 512. */
    struct hd_frame **qslots;
    struct srv_pktq q[SRV_KINDS];
    struct srv_keyset sources;
    struct hd_flush writer;
    struct hd_timer keepalive;
    uint32_t keepalive_ms;      /* its KeepAlive period: the interval + its own jitter (derper) */
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
     * remote destination this client sent to last, and how many packets in a row. */
    bool guest, placing, going_home;
    uint32_t place_run;
    uint64_t place_dst;
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

struct srv_subs {
    struct srv_subs_entry *slots;
    uint32_t cap, count;
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
    uint8_t *scratch; /* ClientInfo plaintext (DERP_CLIENT_INFO_PLAIN_MAX) */
    /* -accept-connection-limit: this shard's share of the rate and burst (rate 0: off) */
    struct hd_tbucket accept;
    double accept_per_ms, accept_burst;
    struct srv_mesh_link *links; /* cfg->mesh_count entries; this shard's: id % shards */
    struct srv_prelogin prelogin;
    struct srv_frames frames;
    struct srv_admit_cache_slot *admit_cache; /* -verify-cache-ttl; NULL until the first */
    uint32_t rechecks_inflight;
    struct srv_acct *acct;         /* per-key accounting (server_account.c) */
    struct srv_quota_state *quota; /* -rate-config Keys' usage (server_quota.c); NULL: none */
    struct srv_live *live;         /* an upgrade's hand-over of clients (server_live.c) */
    struct srv_counters ctr;
};

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

/* server_frames.c: fair shares of the frame pools. */
int srv_frames_init(struct srv_shard *ds);
void srv_frames_fini(struct srv_shard *ds);
uint32_t srv_frame_addrs_live(const struct srv_shard *ds); /* addresses with accounts (varz) */
void srv_frames_client_init(struct srv_client *cl);        /* at activation, on the owner shard */
void srv_frames_client_fini(struct srv_client *cl);        /* at close */
/* A frame for a packet cl sent, or NULL (the reserve, or cl's or its address's share: counted). */
struct hd_frame *srv_frame_get_data(struct srv_client *cl, size_t size);
hd_frame_release_fn srv_frame_release;
/* --frame-pool-mib: the two classes. 0 or -EINVAL (out of range). */
int srv_frame_classes(uint32_t pool_mib, struct hd_frame_class out[SRV_FRAME_CLASSES]);

/* server_client.c: the DERP connection */
int srv_client_start(struct srv_shard *ds, struct net_conn *c, bool fast_start, bool not_ideal);
#define SRV_ENQUEUED_BEHIND 1 /* queued behind the connection's backlog */
int srv_client_enqueue(struct srv_client *cl, struct hd_frame *f, enum srv_kind kind);
int srv_client_send_ctl(struct srv_client *cl, const uint8_t *frame, size_t len);
/* Stop reading cl for at most ms (then it reads again: whatever paused it checks again); read
 * again from the next tick. */
void srv_client_read_pause(struct srv_client *cl, uint64_t ms);
void srv_client_read_resume_soon(struct srv_client *cl);

/* server_wait.c: senders wait for a backed-up receiver on their shard. cl sent a packet to dst;
 * rcv: the receiver on this shard it was queued behind a backlog for, or NULL. True when cl now
 * waits (reading paused: the caller stops taking its frames). */
bool srv_wait_note(struct srv_client *cl, const uint8_t dst[DERP_KEY_LEN], struct srv_client *rcv);
void srv_wait_drained(struct srv_client *rcv); /* its queues emptied: its senders read again */
void srv_wait_expired(struct srv_client *cl);  /* cl's wait ran out (--sender-wait-ms) */
void srv_wait_leave(struct srv_client *cl);    /* cl leaves its shard (or closes) */
void srv_client_close(struct srv_client *cl, int reason);
/* Admission passed: activate here or move to the key's owner shard. 0 or -errno. */
int srv_client_admitted(struct srv_client *cl);

/* server_sources.c: PeerGone subscriptions (§6.7). A RecvPacket from key was written to cl. */
void srv_source_subscribe(struct srv_client *cl, const uint8_t key[DERP_KEY_LEN]);
/* cl closes: out of every subscriber list, its keyset freed. */
void srv_sources_drop(struct srv_client *cl);
/* key left: its subscribers here, moved to *out (each one's keyset forgets key); false when it
 * had none. The caller walks srv_subs_vec(out)[0..out->count) and frees it. */
bool srv_sources_take(struct srv_shard *ds, const uint8_t key[DERP_KEY_LEN],
                      struct srv_subs_entry *out);
struct srv_client **srv_subs_vec(struct srv_subs_entry *e);
void srv_subs_entry_free(struct srv_subs_entry *e);
void srv_subs_fini(struct srv_subs *t);

/* server_peers.c: the peer table, routing, PeerGone and watchers */
int srv_peers_init(struct srv_peer_table *t);
void srv_peers_fini(struct srv_peer_table *t);
struct srv_peer *srv_peers_find(struct srv_peer_table *t, const uint8_t key[DERP_KEY_LEN]);
int srv_peers_insert(struct srv_peer_table *t, struct srv_peer *p);
void srv_peers_remove(struct srv_peer_table *t, struct srv_peer *p);
void srv_register(struct srv_shard *ds, struct srv_client *cl);
void srv_unregister(struct srv_shard *ds, struct srv_client *cl);
void srv_note_activity(struct srv_shard *ds, struct srv_client *cl);
/* Route a packet frame: f->data[0..32) = destination key, then a whole RecvPacket frame of len
 * bytes at offset SRV_ROUTE_OFF. Takes the caller's reference. */
/* crossed: the frame went to another shard over the bus (to the key's owner, or from the owner
 * on to the shard where its connection lives as a guest). */
struct srv_routed {
    bool crossed;              /* the frame went to another shard over the bus */
    struct srv_client *behind; /* a receiver on this shard it was queued behind a backlog for */
};
struct srv_routed srv_route(struct srv_shard *ds, struct hd_frame *f, enum srv_kind kind,
                            bool forwarded);
void srv_watch_start(struct srv_shard *ds, struct srv_client *cl);
void srv_watch_stop(struct srv_shard *ds, struct srv_client *cl);
void srv_watch_notes_flush(struct srv_client *cl); /* cl->notes into its send queue */
void srv_close_peer(struct srv_shard *ds, const uint8_t key[DERP_KEY_LEN]);
/* Run fn(ds, f, arg) on shard `to` (at once when it is this one), or on every shard. Take the
 * caller's reference of f; a full bus drops the event (counted, logged; send: -EAGAIN). arg
 * fits 32 bits (the message's other half names the relay instance). */
typedef void srv_event_fn(struct srv_shard *ds, struct hd_frame *f, uint64_t arg);
int srv_event_send(struct srv_shard *ds, unsigned to, srv_event_fn *fn, struct hd_frame *f,
                   uint64_t arg);
void srv_event_broadcast(struct srv_shard *ds, srv_event_fn *fn, struct hd_frame *f, uint64_t arg);
/* A frame holding key a (and b after it, when not NULL); NULL when the pool is empty. */
struct hd_frame *srv_key_frame(struct srv_shard *ds, const uint8_t *a, const uint8_t *b);
/* Mesh forwarders (owner shard of the key): node `id` reported key / no longer has it / went
 * away (every shard: forget all it reported). The key's correspondents get PeerGone when it
 * leaves the region (§6.7). */
void srv_forwarder_add(struct srv_shard *ds, const uint8_t key[DERP_KEY_LEN], unsigned id);
void srv_forwarder_remove(struct srv_shard *ds, const uint8_t key[DERP_KEY_LEN], unsigned id);
void srv_forwarder_remove_node(struct srv_shard *ds, unsigned id);
/* A disco packet from src had no destination: tell src's connection (on its owner shard). */
void srv_not_here(struct srv_shard *ds, const uint8_t src[DERP_KEY_LEN],
                  const uint8_t dst[DERP_KEY_LEN]);

/* server_sources.c: a connection that moves keeps its sources; only the index changes. */
bool srv_source_has(const struct srv_client *cl, const uint8_t key[DERP_KEY_LEN]);
void srv_sources_detach(struct srv_client *cl); /* out of this shard's index (keyset kept) */
void srv_sources_attach(struct srv_client *cl); /* into this shard's index (cl->ds) */

/* server_peers.c, for placement: the key's connection count falls by one (a guest left); p
 * may be freed. Route-message flag bits (u64[0]): bit 0 kind, bit 1 forwarded, and: */
#define SRV_ROUTE_TO_GUEST 4u /* owner -> the guest's shard */
#define SRV_ROUTE_BOUNCED  8u /* guest's shard -> owner: the guest had gone; never again */
void srv_peer_count_down(struct srv_shard *ds, struct srv_peer *p);
void srv_route_msg(struct hd_shard *s, const struct hd_msg *m);

#include "relay/server_place.h" /* placement and packing */

/* client_activate's per-shard half: timers, writer, rate bucket, gauges (server_client.c). */
void srv_client_settle(struct srv_shard *ds, struct srv_client *cl);
void srv_client_unsettle(struct srv_shard *ds, struct srv_client *cl);
extern const struct net_conn_handler srv_client_handler;

/* server_mesh.c: -mesh-with (spec §7) */
/* Main thread, at start-up (needs the mesh key): parse the list, 0 or -1 with err set. parse is
 * the syntax alone (cfg->mesh, mesh_count; no lookups); configure adds https links' TLS context. */
int srv_mesh_parse(struct srv_config *cfg, const char *list, char *err, size_t err_size);
int srv_mesh_configure(struct srv_config *cfg, const char *list, char *err, size_t err_size);
void srv_mesh_config_free(struct srv_config *cfg);
/* On each shard: dial this shard's links / close them. */
int srv_mesh_start(struct srv_shard *ds);
void srv_mesh_stop(struct srv_shard *ds);
void srv_mesh_fini(struct srv_shard *ds);
/* Owner shard: send the routed frame f (layout of srv_route) as ForwardPacket on node id's
 * link (on the link's shard). Takes the caller's reference. */
void srv_mesh_forward(struct srv_shard *ds, struct hd_frame *f, unsigned id);

/* server_certs.c: TLS mode's server context (main thread, except current) */
int srv_certs_configure(struct srv_config *cfg, char *err, size_t err_size);
int srv_certs_attach(struct srv_config *cfg, struct hd_runtime *rt);
void srv_certs_detach(struct srv_config *cfg);
void srv_certs_reload(struct srv_config *cfg); /* SIGHUP: a bad file keeps the old one */
struct tls_ctx *srv_certs_current(const struct srv_shard *ds);

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

/* server_metrics.c: /debug/varz (Prometheus text) or /debug/keys (JSON) */
void srv_varz_request(struct srv_shard *ds, struct net_conn *c, bool head_only, bool keys);

#endif /* SERVER_H */
