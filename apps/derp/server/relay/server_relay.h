/* server_relay.h - the relay core (relay/) as the rest of the server sees it: the DERP
 * connection, senders' waits, PeerGone subscriptions, the peer table and routing, placement,
 * the mesh. Included by server.h after the structures it names; nothing here calls up
 * into admit/, ops/ or upgrade/ (those hear the core's events through cfg->hooks). */
#ifndef SERVER_RELAY_H
#define SERVER_RELAY_H

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

/* A routed packet's flags: the packet's own (SRV_ROUTE_DISCO, SRV_ROUTE_FORWARDED) in its
 * frame's app_flags, set once where it was read; a route message's (u64[1] >> 32) add where it
 * goes (SRV_ROUTE_TO_GUEST, SRV_ROUTE_BOUNCED). */
#define SRV_ROUTE_DISCO        1u /* a disco packet: derper's disco queue, NotHere if unknown */
#define SRV_ROUTE_FORWARDED    2u /* from a mesh peer (ForwardPacket): never forwarded again */
#define SRV_ROUTE_TO_GUEST     4u /* owner -> the guest's shard */
#define SRV_ROUTE_BOUNCED      8u /* guest's shard -> owner: the guest had gone; never again */
#define SRV_ROUTE_PACKET_FLAGS (SRV_ROUTE_DISCO | SRV_ROUTE_FORWARDED)
static inline enum srv_kind srv_frame_kind(const struct hd_frame *f)
{
    return (f->app_flags & SRV_ROUTE_DISCO) ? SRV_KIND_DISCO : SRV_KIND_OTHER;
}
/* A packet lost: derper's packets_dropped / bytes_dropped by reason and kind (the payload's
 * bytes), and the caller's reference of f released. */
void srv_packet_drop(struct srv_shard *ds, struct hd_frame *f, enum srv_drop why);
/* The counting alone: for a packet that never had a frame, or whose frame is still needed. */
void srv_packet_drop_count(struct srv_shard *ds, enum srv_drop why, enum srv_kind kind,
                           uint64_t bytes);

/* server_client.c: the DERP connection */
int srv_client_start(struct srv_shard *ds, struct net_conn *c, bool fast_start, bool not_ideal);
/* Queue the packet frame f (its kind in its flags) for cl. Takes the caller's reference. 0
 * (written), SRV_ENQUEUED_BEHIND (queued behind the connection's backlog: server_wait.c) or
 * -errno (dropped, counted). */
#define SRV_ENQUEUED_BEHIND 1
int srv_client_enqueue(struct srv_client *cl, struct hd_frame *f);
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

/* server_sources.c: PeerGone subscriptions (§6.7). A key is known by a 64-bit prefix (not the
 * shard bits; never 0). */
static inline uint64_t srv_source_prefix(const uint8_t key[DERP_KEY_LEN])
{
    uint64_t h;
    memcpy(&h, key + 16, sizeof(h));
    return h ? h : 1;
}
void srv_source_subscribe_new(struct srv_client *cl, uint64_t prefix);
/* A RecvPacket from key was written to cl: the source of the last one costs a compare with the
 * keyset's memo, another one a probe of it (and a subscription when it is new). */
static inline void srv_source_subscribe(struct srv_client *cl, const uint8_t key[DERP_KEY_LEN])
{
    uint64_t p = srv_source_prefix(key);
    if (p != cl->sources.last)
        srv_source_subscribe_new(cl, p);
}
/* cl closes: out of every subscriber list, its keyset freed. */
void srv_sources_drop(struct srv_client *cl);
/* key left: its subscribers here, moved to *out (each one's keyset forgets key); false when it
 * had none. The caller walks srv_subs_vec(out)[0..out->count) and frees it. */
bool srv_sources_take(struct srv_shard *ds, const uint8_t key[DERP_KEY_LEN],
                      struct srv_subs_entry *out);
struct srv_client **srv_subs_vec(struct srv_subs_entry *e);
void srv_subs_entry_free(struct srv_subs_entry *e); /* on the shard that took it */
/* Shard start: the index and the pools (0 or -ENOMEM); fini: after every client left. */
int srv_sources_shard_init(struct srv_shard *ds);
void srv_sources_shard_fini(struct srv_shard *ds);

/* server_peers.c: the peer table, routing, PeerGone and watchers */
int srv_peers_init(struct srv_peer_table *t);
void srv_peers_fini(struct srv_peer_table *t);
struct srv_peer *srv_peers_find(struct srv_peer_table *t, const uint8_t key[DERP_KEY_LEN]);
int srv_peers_insert(struct srv_peer_table *t, struct srv_peer *p);
void srv_peers_remove(struct srv_peer_table *t, struct srv_peer *p);
void srv_register(struct srv_shard *ds, struct srv_client *cl);
void srv_unregister(struct srv_shard *ds, struct srv_client *cl);
void srv_note_activity(struct srv_shard *ds, struct srv_client *cl);
struct srv_peer *srv_peers_find_h(struct srv_peer_table *t, const uint8_t key[DERP_KEY_LEN],
                                  uint64_t h); /* h = srv_hash_node_key(key) */
/* The one routing call of a packet: f->data[0..32) = destination key, h its hash
 * (srv_hash_node_key), a whole RecvPacket frame at SRV_ROUTE_OFF (to f->len), the packet's
 * flags in f->app_flags. Takes the caller's reference. Where it went: */
enum srv_route_to {
    SRV_ROUTED_LOCAL, /* a connection on this shard (its own, or a guest placed here) */
    SRV_ROUTED_OWNER, /* over the bus to the key's owner shard */
    SRV_ROUTED_GUEST, /* on the owner: on to (or held for) the shard its connection lives on */
    SRV_ROUTED_MESH,  /* to the mesh node that reported the key (on the owner) */
    SRV_ROUTED_NONE,  /* not here: dropped and counted (unknown, a duplicate's, a full bus) */
};
struct srv_routed {
    enum srv_route_to to;
    struct srv_client *behind; /* LOCAL: the receiver, when queued behind its backlog */
};
struct srv_routed srv_route(struct srv_shard *ds, struct hd_frame *f, uint64_t h);
void srv_watch_start(struct srv_shard *ds, struct srv_client *cl);
void srv_watch_stop(struct srv_shard *ds, struct srv_client *cl);
void srv_watch_notes_flush(struct srv_client *cl); /* cl->notes into its send queue */
/* Presence notices for a watcher (size bytes of frames) go out together: derper's
 * mesh_update_batch_size (server_client.c, beside srv_client_note_frame's histogram). */
void srv_watch_notes_observe(struct srv_client *cl, const uint8_t *data, uint32_t size);
/* The writer ran (or the watcher leaves the shard): the notices batches since, observed. */
void srv_watch_notes_loops(struct srv_client *cl);
/* A frame handed to the connection (derper's buffered_write_frames: per tick). */
void srv_client_note_frame(struct srv_client *cl);
void srv_close_peer(struct srv_shard *ds, const uint8_t key[DERP_KEY_LEN]);
/* Run fn(ds, f, arg) on shard `to` (at once when it is this one), or on every shard. Take the
 * caller's reference of f. Events are the bus's control messages (hd_bus_send_control): packets
 * that filled the bus leave them room, in order behind those packets; a bus full even for them
 * drops the event (counted, logged; send: -EAGAIN). arg
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
/* detach: out of this shard's index and pools, the keyset travelling (a move); attach: into
 * this shard's (cl->ds); forget: a travelling keyset's end (the move failed, or it closed). */
void srv_sources_detach(struct srv_client *cl);
void srv_sources_attach(struct srv_client *cl);
void srv_sources_forget(struct srv_client *cl);

/* server_peers.c, for placement: the key's connection count falls by one (a guest left); p
 * may be freed. A route message: ptr the frame, u64[0] its key's hash, u64[1] the relay
 * instance and, above bit 32, SRV_ROUTE_TO_GUEST or SRV_ROUTE_BOUNCED. */
void srv_peer_count_down(struct srv_shard *ds, struct srv_peer *p);
void srv_route_msg(struct hd_shard *s, const struct hd_msg *m);
static inline struct hd_msg srv_route_msg_make(const struct srv_shard *ds, struct hd_frame *f,
                                               uint64_t h, uint32_t flags)
{
    return (struct hd_msg){
        .fn = srv_route_msg, .ptr = f, .u64 = {h, ds->instance | (uint64_t)flags << 32}};
}

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

/* A client about to leave its shard (an upgrade's export, upgrade/server_live.c; a guest going
 * home, server_place.c): its Pong and the packets waiting in its send classes into its
 * connection's send queue (past the high watermark: the bytes go with the connection). */
void srv_client_drain(struct srv_client *cl);
/* server_sources.c: the source prefixes (at most max) and, in the successor, a keyset from them. */
uint32_t srv_sources_list(const struct srv_client *cl, uint64_t *out, uint32_t max);
void srv_sources_restore(struct srv_client *cl, const uint64_t *prefixes, uint32_t count);
/* server_peers.c: in the successor, the key's PeerGone (watchers and former correspondents)
 * unless one of its connections came over or logged in since. */
void srv_peer_gone_if_absent(struct srv_shard *ds, const uint8_t key[DERP_KEY_LEN]);

#endif /* SERVER_RELAY_H */
