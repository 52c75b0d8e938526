/* server_peers.c - each shard's peer table (the keys it owns), duplicate connections (§6.6),
 * packet routing between shards (§6.2: srv_route, the one routing call, with the destination's
 * hash as its argument), PeerGone to former correspondents (§6.7), watchers (§6.8), ClosePeer and
 * NotHere. Runs on each shard for its own table; other shards are reached only through bus
 * messages, whose payloads travel in refcounted frames. Presence: a key's last connection leaving
 * broadcasts one event; each shard sends PeerGone to its subscribers of that key
 * (server_sources.c) and its watchers (at most SRV_WATCHERS_MAX a shard; a WatchConns past it is
 * refused). A watcher's notices are gathered per tick into a frame of its own (cl->notes, ~40 to a
 * 2 KiB frame; sent by its writer at the tick's end, and before a snapshot so that order holds),
 * charged to its share (srv_frame_get_notice, never the reserve); a watcher refused one is closed
 * (hderp_watchers_closed{why}; derper queues without bound). Registrations go to watchers only
 * while there are watchers; WatchConns broadcasts a watch request and each shard answers
 * PeerPresent for its active keys and guests. NotHere goes to the sender's owner shard,
 * rate-limited per connection (DERP_NOT_HERE_BURST, 1/s). The mesh's forwarder table is this
 * table: struct srv_peer carries, besides its local connections, fwd[], the node ids that reported
 * the key, in order. A link's PeerPresent(K) appends the node on K's owner (a second one counts
 * multiforwarder_created); its PeerGone(K), for any reason (NotHere after a forward too), removes
 * it; a link's close broadcasts "forget node id" (srv_forwarder_remove_node: the keys that left
 * batched, up to 2,048 in one 64 KiB frame per shard). An entry lives while it has a local
 * connection or a forwarder, so clients_total is the table size; PeerGone to former correspondents
 * goes out when it dies; watchers hear only of local connections. Local always wins over fwd[0]. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "server.h"

#include "relay/server_frames.h"

/* ---------------------------------------------------------------- the table */

static uint32_t slot_of(const struct srv_peer_table *t, const uint8_t key[DERP_KEY_LEN])
{
    return srv_key_slot(srv_hash_node_key(key), t->cap - 1); /* keyed: server_hash.c */
}

int srv_peers_init(struct srv_peer_table *t)
{
    t->cap = SRV_PEERS_INITIAL;
    t->count = 0;
    t->slots = calloc(t->cap, sizeof(*t->slots));
    return t->slots ? 0 : -ENOMEM;
}

void srv_peers_fini(struct srv_peer_table *t)
{
    for (uint32_t i = 0; t->slots && i < t->cap; i++)
        free(t->slots[i]);
    free(t->slots);
    t->slots = NULL;
}

struct srv_peer *srv_peers_find_h(struct srv_peer_table *t, const uint8_t key[DERP_KEY_LEN],
                                  uint64_t h)
{
    HD_DASSERT(h == srv_hash_node_key(key));
    for (uint32_t i = srv_key_slot(h, t->cap - 1), probes = 0;; i = (i + 1) & (t->cap - 1)) {
        HD_ASSERT(probes++ < t->cap); /* at most half full: a free slot ends every probe */
        struct srv_peer *p = t->slots[i];
        if (p == NULL)
            return NULL;
        if (memcmp(p->key.bytes, key, DERP_KEY_LEN) == 0)
            return p;
    }
}

struct srv_peer *srv_peers_find(struct srv_peer_table *t, const uint8_t key[DERP_KEY_LEN])
{
    return srv_peers_find_h(t, key, srv_hash_node_key(key));
}

static void table_put(struct srv_peer_table *t, struct srv_peer *p)
{
    uint32_t i = slot_of(t, p->key.bytes);
    for (uint32_t probes = 0; t->slots[i]; i = (i + 1) & (t->cap - 1)) {
        HD_ASSERT(probes++ < t->cap && t->slots[i] != p); /* room, and not in it twice */
    }
    t->slots[i] = p;
}

int srv_peers_insert(struct srv_peer_table *t, struct srv_peer *p)
{
    if ((t->count + 1) * 2 > t->cap) { /* grow at half load: probes stay short */
        struct srv_peer_table n = {.cap = t->cap * 2};
        n.slots = calloc(n.cap, sizeof(*n.slots));
        if (n.slots == NULL)
            return -ENOMEM;
        for (uint32_t i = 0; i < t->cap; i++)
            if (t->slots[i])
                table_put(&n, t->slots[i]);
        free(t->slots);
        t->slots = n.slots;
        t->cap = n.cap;
    }
    HD_DASSERT(srv_peers_find(t, p->key.bytes) == NULL); /* one entry per key */
    table_put(t, p);
    t->count++;
    HD_ASSERT(t->count * 2 <= t->cap);
    return 0;
}

void srv_peers_remove(struct srv_peer_table *t, struct srv_peer *p)
{
    uint32_t mask = t->cap - 1, i = slot_of(t, p->key.bytes);
    HD_ASSERT(t->count > 0);
    /* p must be in its probe chain: a missing entry would walk forever (or remove another) */
    for (uint32_t probes = 0; t->slots[i] != p; i = (i + 1) & mask)
        HD_ASSERT(t->slots[i] != NULL && ++probes < t->cap);
    uint32_t hole = i;
    for (uint32_t k = (i + 1) & mask; t->slots[k]; k = (k + 1) & mask) {
        uint32_t home = slot_of(t, t->slots[k]->key.bytes);
        if (((k - home) & mask) >= ((k - hole) & mask)) {
            t->slots[hole] = t->slots[k];
            hole = k;
        }
    }
    t->slots[hole] = NULL;
    t->count--;
}

/* ---------------------------------------------------------------- broadcasts */

static void event_msg(struct hd_shard *s, const struct hd_msg *m)
{
    struct srv_shard *ds = srv_shard_at(s, (unsigned)(m->u64[0] >> 32));
    srv_event_fn *fn = (srv_event_fn *)(uintptr_t)m->u64[1];
    if (ds && !hd_shard_stopping(s))
        fn(ds, m->ptr, m->u64[0] & UINT32_MAX);
    hd_frame_unref(s, m->ptr);
}

int srv_event_send(struct srv_shard *ds, unsigned to, srv_event_fn *fn, struct hd_frame *f,
                   uint64_t arg)
{
    if (to == hd_shard_id(ds->s)) {
        fn(ds, f, arg);
        hd_frame_unref(ds->s, f);
        return 0;
    }
    /* The relay instance rides in the arg's high half (events' args are small). */
    HD_ASSERT(arg <= UINT32_MAX);
    struct hd_msg m = {.fn = event_msg,
                       .ptr = f,
                       .u64 = {arg | (uint64_t)ds->instance << 32, (uint64_t)(uintptr_t)fn}};
    int rc = hd_bus_send_control(ds->s, to, &m); /* packets leave room for events */
    if (rc < 0) {
        ds->ctr.bus_dropped++;
        hd_log_rl(HD_LOG_WARN,
                  "bus to shard %u full, its room for events too: an event was dropped", to);
        hd_frame_unref(ds->s, f);
    }
    return rc;
}

void srv_event_broadcast(struct srv_shard *ds, srv_event_fn *fn, struct hd_frame *f, uint64_t arg)
{
    unsigned n = hd_shard_count(ds->s);
    for (unsigned i = 1; i < n; i++)
        hd_frame_ref(f);
    for (unsigned i = 0; i < n; i++)
        srv_event_send(ds, i, fn, f, arg);
}

struct hd_frame *srv_key_frame(struct srv_shard *ds, const uint8_t *a, const uint8_t *b)
{
    struct hd_frame *f = hd_frame_get(ds->s, 2 * DERP_KEY_LEN);
    if (f == NULL)
        return NULL;
    memcpy(f->data, a, DERP_KEY_LEN);
    if (b)
        memcpy(f->data + DERP_KEY_LEN, b, DERP_KEY_LEN);
    f->len = b ? 2 * DERP_KEY_LEN : DERP_KEY_LEN;
    return f;
}

/* ---------------------------------------------------------------- presence */

static void send_peer_gone(struct srv_shard *ds, struct srv_client *cl, const uint8_t *key,
                           uint8_t reason)
{
    uint8_t buf[DERP_FRAME_HEADER_LEN + DERP_PEER_GONE_LEN];
    derp_frame_peer_gone_encode(buf, sizeof(buf), key, reason);
    if (reason == DERP_PEER_GONE_NOT_HERE)
        ds->ctr.peer_gone_not_here_frames++;
    else
        ds->ctr.peer_gone_disconnected_frames++;
    srv_client_send_ctl(cl, buf, sizeof(buf));
}

/* A presence notice (PeerPresent, PeerGone: len bytes) for the watcher w, gathered into its
 * notes frame (sent by its writer at the tick's end). The frames are charged to w as a client's
 * packets are to it (srv_frame_get_notice): a watcher that does not read, or not fast enough,
 * reaches its share of the pool and is closed, as its write deadline would close it; its
 * backlog is bounded either way (issue 24: 1,100 watchers that never read drained the pool,
 * where derper queues without bound). */
static void watch_note(struct srv_shard *ds, struct srv_client *w, const uint8_t *frame,
                       uint32_t len)
{
    if (net_conn_state(w->conn) != NET_CONN_OPEN)
        return; /* closing: it hears nothing more */
    struct hd_frame *f = w->notes;
    if (f && f->len + len > f->size) {
        srv_watch_notes_flush(w);
        if (net_conn_state(w->conn) != NET_CONN_OPEN)
            return; /* its queue was over its cap: closed */
        f = NULL;
    }
    if (f == NULL) {
        enum srv_frames_why why;
        f = srv_frame_get_notice(w, SRV_FRAME_SMALL, &why);
        if (f == NULL) {
            ds->ctr.watchers_closed[why - 1]++;
            hd_log_rl(HD_LOG_WARN,
                      "watcher closed: it does not read its presence notices (%s of the "
                      "frame pool reached)",
                      why == SRV_FRAMES_SHARE  ? "its share"
                      : why == SRV_FRAMES_ADDR ? "its address's share"
                                               : "the reserve");
            srv_client_close(w, -ENOBUFS);
            return;
        }
        f->len = 0;
        w->notes = f;
        hd_flush_request(ds->s, &w->writer);
    }
    memcpy(f->data + f->len, frame, len);
    f->len += len;
}

void srv_watch_notes_flush(struct srv_client *cl)
{
    struct hd_frame *f = cl->notes;
    if (f == NULL)
        return;
    cl->notes = NULL;
    srv_watch_notes_observe(cl, f->data, f->len);
    srv_client_note_frame(cl);
    if (net_conn_state(cl->conn) == NET_CONN_OPEN &&
        net_conn_send(cl->conn, f, 0, f->len) < 0) /* over its queue's cap: it cannot keep up */
        srv_client_close(cl, -ENOBUFS);
    hd_frame_unref(cl->ds->s, f);
}

static void watch_peer_gone(struct srv_shard *ds, struct srv_client *w, const uint8_t *key)
{
    uint8_t buf[DERP_FRAME_HEADER_LEN + DERP_PEER_GONE_LEN];
    derp_frame_peer_gone_encode(buf, sizeof(buf), key, DERP_PEER_GONE_DISCONNECTED);
    ds->ctr.peer_gone_disconnected_frames++;
    watch_note(ds, w, buf, sizeof(buf));
}

/* Who hears that a key went (gone_event's arg). */
#define GONE_WATCHERS 1u /* its last local connection went: watchers (local presence only) */
#define GONE_SOURCES  2u /* it left the region (§6.7): connections that received from it */

/* Keys went (f->data: one or more keys): tell the watchers and/or the connections that
 * received packets from them (arg: GONE_*), once each per key. Runs on every shard. The
 * subscribers come from the shard's reverse index (server_sources.c): a departure costs its
 * subscribers, not every connection; watchers (GONE_WATCHERS) come from the shard's watcher
 * list. */
static void gone_event(struct srv_shard *ds, struct hd_frame *f, uint64_t arg)
{
    for (uint32_t off = 0; off + DERP_KEY_LEN <= f->len; off += DERP_KEY_LEN) {
        const uint8_t *key = f->data + off;
        bool watchers = (arg & GONE_WATCHERS) && ds->watch_count > 0;
        struct srv_subs_entry e;
        if ((arg & GONE_SOURCES) && srv_sources_take(ds, key, &e)) {
            struct srv_client **v = srv_subs_vec(&e);
            for (uint32_t i = 0; i < e.count; i++) {
                /* Not the closing connection itself (it received from its own key): like the
                 * walk, which no longer found it in the table. A watcher hears it below. */
                if (v[i]->phase == SRV_CLIENT_ACTIVE && !(watchers && v[i]->watcher))
                    send_peer_gone(ds, v[i], key, DERP_PEER_GONE_DISCONNECTED);
            }
            srv_subs_entry_free(&e);
        }
        for (uint32_t i = 0; watchers && i < ds->watch_count; i++)
            watch_peer_gone(ds, ds->watch_list[i], key);
    }
}

static void broadcast_gone(struct srv_shard *ds, const uint8_t key[DERP_KEY_LEN], unsigned who)
{
    if (ds->handing_over) /* handing over: the key did not go, it moves */
        return;
    struct hd_frame *f = srv_key_frame(ds, key, NULL);
    if (f)
        srv_event_broadcast(ds, gone_event, f, who);
}

/* A PeerPresent frame (f->data) for this shard's watchers; arg 1: the key came over from the
 * predecessor at an upgrade, so only the watchers that did not come with it hear it. */
static void present_event(struct srv_shard *ds, struct hd_frame *f, uint64_t arg)
{
    for (uint32_t i = 0; i < ds->watch_count; i++)
        if (arg == 0 || !ds->watch_list[i]->imported)
            watch_note(ds, ds->watch_list[i], f->data, f->len);
}

static void broadcast_present(struct srv_shard *ds, struct srv_client *cl)
{
    if (ds->handing_over)
        return;
    struct hd_frame *f = hd_frame_get(ds->s, DERP_FRAME_HEADER_LEN + DERP_PEER_PRESENT_LEN);
    if (f == NULL)
        return;
    uint8_t flags = derp_peer_present_flags(cl->mesh, cl->prober, cl->not_ideal);
    f->len = (uint32_t)derp_frame_peer_present_encode(f->data, f->size, cl->key.bytes, &cl->remote,
                                                      flags);
    srv_event_broadcast(ds, present_event, f, cl->imported ? 1 : 0);
}

/* ---------------------------------------------------------------- registration */

void srv_register(struct srv_shard *ds, struct srv_client *cl)
{
    HD_ASSERT(cl->peer == NULL && cl->phase == SRV_CLIENT_ACTIVE); /* registered once */
    struct srv_peer *p = srv_peers_find(&ds->peers, cl->key.bytes);
    if (p == NULL) {
        p = calloc(1, sizeof(*p));
        if (p)
            p->key = cl->key; /* before the insert: the slot is a hash of it */
        if (p == NULL || srv_peers_insert(&ds->peers, p) < 0) {
            free(p);
            srv_client_close(cl, -ENOMEM);
            return;
        }
    }
    if (p->clients_count == 0)
        ds->ctr.clients_local++;
    cl->peer = p;
    cl->peer_next = p->clients;
    p->clients = cl;
    p->clients_count++;
    p->active = cl; /* a new connection becomes active */
    cl->activity = ++ds->activity_seq;
    if (p->clients_count == 2) {
        ds->ctr.current_dup_client_keys++;
        ds->ctr.current_dup_client_conns += 2;
    } else if (p->clients_count > 2) {
        ds->ctr.current_dup_client_conns++;
    }
    if (p->clients_count >= 2)
        ds->ctr.total_dup_client_conns++;
    if (p->guest_at) /* its first connection lives on another shard: duplicates live here */
        srv_place_recall(ds, p);
    if (ds->watchers_total > 0)
        broadcast_present(ds, cl);
}

void srv_unregister(struct srv_shard *ds, struct srv_client *cl)
{
    struct srv_peer *p = cl->peer;
    if (p == NULL)
        return;
    HD_ASSERT(p->clients_count > 0 && p->clients != NULL);
    struct srv_client **pp = &p->clients;
    while (*pp != cl) {
        HD_ASSERT(*pp != NULL); /* cl is on its key's list */
        pp = &(*pp)->peer_next;
    }
    *pp = cl->peer_next;
    cl->peer = NULL;
    if (p->active == cl) { /* the most recently active remaining one takes over */
        p->active = NULL;
        for (struct srv_client *o = p->clients; o; o = o->peer_next)
            if (p->active == NULL || o->activity > p->active->activity)
                p->active = o;
    }
    if (cl->watcher)
        srv_watch_stop(ds, cl);
    srv_peer_count_down(ds, p);
}

void srv_peer_count_down(struct srv_shard *ds, struct srv_peer *p)
{
    if (p->clients_count == 2) {
        ds->ctr.current_dup_client_keys--;
        ds->ctr.current_dup_client_conns -= 2;
    } else if (p->clients_count > 2) {
        ds->ctr.current_dup_client_conns--;
    }
    p->clients_count--;
    /* Connections: those in the list, and one living on another shard (guest_at). */
    HD_ASSERT((p->clients_count == 0) == (p->clients == NULL && p->guest_at == 0));
    HD_ASSERT(p->clients_count == 0 || p->active != NULL || p->guest_at != 0);
    if (p->clients_count > 0)
        return;
    ds->ctr.clients_local--;
    if (p->fwd_count > 0) { /* still in the region, via the mesh */
        broadcast_gone(ds, p->key.bytes, GONE_WATCHERS);
        return;
    }
    broadcast_gone(ds, p->key.bytes, GONE_WATCHERS | GONE_SOURCES);
    srv_peers_remove(&ds->peers, p);
    free(p);
}

void srv_note_activity(struct srv_shard *ds, struct srv_client *cl)
{
    struct srv_peer *p = cl->peer;
    if (p && p->clients_count > 1) { /* lastWriterIsActive */
        cl->activity = ++ds->activity_seq;
        p->active = cl;
    }
}

/* ---------------------------------------------------------------- routing */

/* No route for f (p: the key's entry, or NULL): counted, and NotHere for a disco packet. */
static void not_here(struct srv_shard *ds, struct srv_peer *p, struct hd_frame *f)
{
    bool forwarded = (f->app_flags & SRV_ROUTE_FORWARDED) != 0;
    enum srv_drop why = p && p->clients_count >= 2 ? SRV_DROP_DUP_CLIENT
                        : forwarded                ? SRV_DROP_UNKNOWN_DEST_ON_FWD
                                                   : SRV_DROP_UNKNOWN_DEST;
    if (ds->handing_over) { /* its receiver left for the successor: no NotHere */
        ds->handover_dropped++;
        srv_packet_drop(ds, f, why);
        return;
    }
    /* §6.2/§7: NotHere to the connection the packet came on: the sender, or the mesh peer that
     * forwarded it (so that it forgets the route). */
    if (srv_frame_kind(f) == SRV_KIND_DISCO && why != SRV_DROP_DUP_CLIENT)
        srv_not_here(ds, f->data + SRV_ROUTE_REPLY_OFF, f->data);
    srv_packet_drop(ds, f, why);
}

/* On the key's owner shard; bounced: the guest's shard sent it back (never to a guest again). */
static struct srv_routed deliver(struct srv_shard *ds, struct hd_frame *f, uint64_t h, bool bounced)
{
    struct srv_peer *p = srv_peers_find_h(&ds->peers, f->data, h);
    struct srv_routed r = {.to = SRV_ROUTED_LOCAL};
    if (p && p->active) { /* local always wins (§7) */
        if (srv_client_enqueue(p->active, f) == SRV_ENQUEUED_BEHIND)
            r.behind = p->active;
        return r;
    }
    if (p && p->guest_at && !bounced) { /* it lives on another shard */
        srv_place_deliver(ds, p, f, h);
        r.to = SRV_ROUTED_GUEST;
        return r;
    }
    if (p && p->clients_count == 0 && !(f->app_flags & SRV_ROUTE_FORWARDED)) {
        srv_mesh_forward(ds, f, p->fwd[0]); /* only the mesh has it: one hop */
        r.to = SRV_ROUTED_MESH;
        return r;
    }
    not_here(ds, p, f);
    r.to = SRV_ROUTED_NONE;
    return r;
}

/* The bus to shard `to` was full: dropped as a full queue would, never blocking the reader. */
static void route_drop_bus(struct srv_shard *ds, struct hd_frame *f)
{
    ds->ctr.bus_dropped++;
    srv_packet_drop(ds, f, SRV_DROP_QUEUE_TAIL);
}

void srv_route_msg(struct hd_shard *s, const struct hd_msg *m)
{
    struct srv_shard *ds = srv_shard_at(s, (unsigned)(m->u64[1] & UINT32_MAX));
    struct hd_frame *f = m->ptr;
    uint64_t h = m->u64[0];
    uint32_t flags = (uint32_t)(m->u64[1] >> 32);
    HD_ASSERT((flags & ~(SRV_ROUTE_TO_GUEST | SRV_ROUTE_BOUNCED)) == 0);
    if (ds == NULL || hd_shard_stopping(s)) {
        if (ds) /* the process stops: counted, as every packet a relay loses */
            srv_packet_drop(ds, f, SRV_DROP_GONE_DISCONNECTED);
        else
            hd_frame_unref(s, f);
        return;
    }
    if (!(flags & SRV_ROUTE_TO_GUEST)) {
        (void)deliver(ds, f, h, (flags & SRV_ROUTE_BOUNCED) != 0);
        return;
    }
    struct srv_client *cl = srv_place_guest_h(ds, f->data, h);
    if (cl) {
        (void)srv_client_enqueue(cl, f); /* no sender here to wait */
        return;
    }
    /* The guest left (closed, or on its way home): back to the owner, who knows what now. */
    struct hd_msg b = srv_route_msg_make(ds, f, h, SRV_ROUTE_BOUNCED);
    if (hd_bus_send(s, srv_key_shard(h, hd_shard_count(s)), &b) < 0)
        route_drop_bus(ds, f);
}

struct srv_routed srv_route(struct srv_shard *ds, struct hd_frame *f, uint64_t h)
{
    HD_ASSERT((f->app_flags & ~SRV_ROUTE_PACKET_FLAGS) == 0);
    unsigned owner = srv_key_shard(h, hd_shard_count(ds->s));
    if (owner == hd_shard_id(ds->s))
        return deliver(ds, f, h, false);
    struct srv_routed r = {.to = SRV_ROUTED_LOCAL};
    struct srv_client *guest = srv_place_guest_h(ds, f->data, h); /* placed beside its peer */
    if (guest) {
        if (srv_place_guest_enqueue(guest, f) == SRV_ENQUEUED_BEHIND)
            r.behind = guest;
        return r;
    }
    struct hd_msg m = srv_route_msg_make(ds, f, h, 0);
    if (hd_bus_send(ds->s, owner, &m) < 0) {
        route_drop_bus(ds, f);
        r.to = SRV_ROUTED_NONE;
        return r;
    }
    r.to = SRV_ROUTED_OWNER;
    return r;
}

/* ---------------------------------------------------------------- NotHere, ClosePeer */

static void not_here_event(struct srv_shard *ds, struct hd_frame *f, uint64_t arg)
{
    struct srv_peer *p = srv_peers_find(&ds->peers, f->data);
    struct srv_client *cl = p ? p->active : srv_place_guest(ds, f->data);
    if (cl == NULL && p && p->guest_at && !p->placing && arg == 0) {
        hd_frame_ref(f);                           /* the caller unrefs its own */
        srv_place_event(ds, p, not_here_event, f); /* arg 1 there: no further hop */
        return;
    }
    if (cl == NULL)
        return;
    if (!hd_tbucket_take(&cl->not_here, 1.0 / DERP_NOT_HERE_INTERVAL_MS, DERP_NOT_HERE_BURST,
                         hd_now_ms(ds->s), 1))
        return;
    send_peer_gone(ds, cl, f->data + DERP_KEY_LEN, DERP_PEER_GONE_NOT_HERE);
}

void srv_not_here(struct srv_shard *ds, const uint8_t src[DERP_KEY_LEN],
                  const uint8_t dst[DERP_KEY_LEN])
{
    struct hd_frame *f = srv_key_frame(ds, src, dst);
    if (f)
        srv_event_send(ds, srv_owner(ds, src), not_here_event, f, 0);
}

static void close_peer_event(struct srv_shard *ds, struct hd_frame *f, uint64_t arg)
{
    (void)arg;
    struct srv_peer *p = srv_peers_find(&ds->peers, f->data);
    struct srv_client *guest = srv_place_guest(ds, f->data);
    if (guest) /* forwarded by the owner */
        srv_client_close(guest, 0);
    if (p == NULL) {
        if (guest == NULL)
            hd_log_rl(HD_LOG_INFO, "ClosePeer for a key that is not connected here");
        return;
    }
    for (struct srv_client *cl = p->clients; cl; cl = cl->peer_next)
        srv_client_close(cl, 0);
    if (p->guest_at && (unsigned)p->guest_at - 1 != hd_shard_id(ds->s)) {
        hd_frame_ref(f);
        srv_place_event(ds, p, close_peer_event, f);
    }
}

void srv_close_peer(struct srv_shard *ds, const uint8_t key[DERP_KEY_LEN])
{
    struct hd_frame *f = srv_key_frame(ds, key, NULL);
    if (f)
        srv_event_send(ds, srv_owner(ds, key), close_peer_event, f, 0);
}

/* ---------------------------------------------------------------- mesh forwarders (§7) */

static int fwd_index(const struct srv_peer *p, unsigned id)
{
    for (unsigned i = 0; i < p->fwd_count; i++)
        if (p->fwd[i] == id)
            return (int)i;
    return -1;
}

void srv_forwarder_add(struct srv_shard *ds, const uint8_t key[DERP_KEY_LEN], unsigned id)
{
    struct srv_peer *p = srv_peers_find(&ds->peers, key);
    if (p == NULL) {
        p = calloc(1, sizeof(*p));
        if (p)
            memcpy(p->key.bytes, key, DERP_KEY_LEN);
        if (p == NULL || srv_peers_insert(&ds->peers, p) < 0) {
            free(p);
            hd_log_rl(HD_LOG_WARN, "mesh: out of memory: a remote key was not recorded");
            return;
        }
    }
    if (fwd_index(p, id) >= 0 || p->fwd_count >= SRV_MESH_NODES_MAX)
        return;
    p->fwd[p->fwd_count++] = (uint8_t)id;
    if (p->fwd_count == 2)
        ds->ctr.multiforwarder_created++;
}

/* Departures collected into one frame of keys, broadcast when full (and at the end): a dropped
 * mesh link makes every key learned only from it leave at once (§6.7, §7). */
struct gone_batch {
    struct hd_frame *f;
};

static void gone_batch_flush(struct srv_shard *ds, struct gone_batch *b)
{
    if (b->f)
        srv_event_broadcast(ds, gone_event, b->f, GONE_SOURCES);
    b->f = NULL;
}

static void gone_batch_add(struct srv_shard *ds, struct gone_batch *b,
                           const uint8_t key[DERP_KEY_LEN])
{
    if (b->f && b->f->len + DERP_KEY_LEN > b->f->size)
        gone_batch_flush(ds, b);
    if (b->f == NULL && (b->f = hd_frame_get(ds->s, 65536)) == NULL) {
        broadcast_gone(ds, key, GONE_SOURCES); /* no big frame: one key at a time */
        return;
    }
    memcpy(b->f->data + b->f->len, key, DERP_KEY_LEN);
    b->f->len += DERP_KEY_LEN;
}

/* Drops node id from p (which must have it); p is freed when nothing is left, its departure
 * broadcast at once or added to batch (when not NULL). Returns true when p was removed from
 * the table. */
static bool fwd_drop(struct srv_shard *ds, struct srv_peer *p, int at, struct gone_batch *batch)
{
    memmove(p->fwd + at, p->fwd + at + 1, (size_t)(p->fwd_count - at - 1));
    p->fwd_count--;
    if (p->fwd_count == 1)
        ds->ctr.multiforwarder_deleted++;
    if (p->fwd_count > 0 || p->clients_count > 0)
        return false;
    if (batch) /* it left the region */
        gone_batch_add(ds, batch, p->key.bytes);
    else
        broadcast_gone(ds, p->key.bytes, GONE_SOURCES);
    srv_peers_remove(&ds->peers, p);
    free(p);
    return true;
}

void srv_forwarder_remove(struct srv_shard *ds, const uint8_t key[DERP_KEY_LEN], unsigned id)
{
    struct srv_peer *p = srv_peers_find(&ds->peers, key);
    int at = p ? fwd_index(p, id) : -1;
    if (at < 0) { /* derper counts a key held by one other forwarder, or only locally */
        if (p && p->fwd_count <= 1)
            ds->ctr.packet_forwarder_delete_other_value++;
        return;
    }
    fwd_drop(ds, p, at, NULL);
}

void srv_forwarder_remove_node(struct srv_shard *ds, unsigned id)
{
    struct gone_batch batch = {0};
    /* A removal shifts later entries of the probe chain back into slot i: look at it again. */
    for (uint32_t i = 0; i < ds->peers.cap;) {
        struct srv_peer *p = ds->peers.slots[i];
        int at = p ? fwd_index(p, id) : -1;
        if (at >= 0 && fwd_drop(ds, p, at, &batch))
            continue;
        i++;
    }
    gone_batch_flush(ds, &batch);
}

/* ---------------------------------------------------------------- watchers */

/* A snapshot for one watcher: f->data = watcher key, then PeerPresent frames. */
static void snapshot_event(struct srv_shard *ds, struct hd_frame *f, uint64_t arg)
{
    (void)arg;
    struct srv_peer *p = srv_peers_find(&ds->peers, f->data);
    if (p == NULL)
        p = srv_peers_find(&ds->guests, f->data); /* a watcher placed here */
    for (struct srv_client *cl = p ? p->clients : NULL; cl; cl = cl->peer_next) {
        if (!cl->watcher)
            continue;
        srv_watch_notes_flush(cl); /* the notices gathered so far go first */
        /* derper queues its snapshot as one batch of its pending changes: so is this one */
        srv_watch_notes_observe(cl, f->data + DERP_KEY_LEN, f->len - DERP_KEY_LEN);
        if (net_conn_send(cl->conn, f, DERP_KEY_LEN, f->len - DERP_KEY_LEN) < 0)
            srv_client_close(cl, -ENOBUFS);
    }
}

/* Every shard: count the watcher and send it this shard's active keys. */
/* watch_add_event's arg: a new watcher (count it), or a repeat; below it the shard id. */
#define WATCH_NEW   (1ull << 31)
#define WATCH_QUIET (1ull << 30) /* counted only: a watcher the predecessor handed over */
_Static_assert(HD_SHARDS_MAX < WATCH_QUIET, "the shard id stays below the flags");

/* PeerPresent frames for the active keys of table t, in frames of 64 KiB sent to the
 * watcher's shard; false when the pool is empty. */
static bool snapshot_table(struct srv_shard *ds, struct srv_peer_table *t, struct hd_frame *kf,
                           unsigned watcher_shard, struct hd_frame **fp)
{
    const size_t one = DERP_FRAME_HEADER_LEN + DERP_PEER_PRESENT_LEN;
    for (uint32_t i = 0; i < t->cap; i++) {
        struct srv_peer *p = t->slots[i];
        if (p == NULL || p->active == NULL)
            continue;
        if (*fp && (*fp)->len + one > (*fp)->size) {
            srv_event_send(ds, watcher_shard, snapshot_event, *fp, 0);
            *fp = NULL;
        }
        if (*fp == NULL) {
            *fp = hd_frame_get(ds->s, 65536);
            if (*fp == NULL)
                return false;
            memcpy((*fp)->data, kf->data, DERP_KEY_LEN);
            (*fp)->len = DERP_KEY_LEN;
        }
        struct hd_frame *f = *fp;
        struct srv_client *a = p->active;
        uint8_t flags = derp_peer_present_flags(a->mesh, a->prober, a->not_ideal);
        f->len += (uint32_t)derp_frame_peer_present_encode(f->data + f->len, f->size - f->len,
                                                           p->key.bytes, &a->remote, flags);
    }
    return true;
}

/* Every shard: the keys whose connections live here, its own and its guests. */
static void watch_add_event(struct srv_shard *ds, struct hd_frame *kf, uint64_t arg)
{
    unsigned watcher_shard = (unsigned)(arg & (WATCH_QUIET - 1));
    if (arg & WATCH_NEW)
        ds->watchers_total++;
    if (arg & WATCH_QUIET)
        return; /* it knows every key already: the keys move with it */
    struct hd_frame *f = NULL;
    if (!snapshot_table(ds, &ds->peers, kf, watcher_shard, &f) ||
        !snapshot_table(ds, &ds->guests, kf, watcher_shard, &f))
        return;
    if (f)
        srv_event_send(ds, watcher_shard, snapshot_event, f, 0);
}

static void watch_remove_event(struct srv_shard *ds, struct hd_frame *f, uint64_t arg)
{
    (void)f, (void)arg;
    if (ds->watchers_total > 0)
        ds->watchers_total--;
}

/* A repeated WatchConns gets the snapshot again, as derper's addWatcher sends it each time. */
void srv_watch_start(struct srv_shard *ds, struct srv_client *cl)
{
    struct hd_frame *f = srv_key_frame(ds, cl->key.bytes, NULL);
    if (f == NULL)
        return;
    uint64_t arg = hd_shard_id(ds->s) | (cl->imported && !cl->watcher ? WATCH_QUIET : 0);
    if (!cl->watcher) {
        if (ds->watch_list == NULL)
            ds->watch_list = calloc(SRV_WATCHERS_MAX, sizeof(*ds->watch_list));
        if (ds->watch_list == NULL || ds->watch_count == SRV_WATCHERS_MAX) {
            hd_log_rl(HD_LOG_WARN, "WatchConns refused: %u watchers on this shard already",
                      ds->watch_count);
            hd_frame_unref(ds->s, f);
            srv_client_close(cl, -ENOBUFS);
            return;
        }
        cl->watch_idx = ds->watch_count;
        ds->watch_list[ds->watch_count++] = cl;
        cl->watcher = true;
        arg |= WATCH_NEW;
        /* a client's write deadline, not a mesh peer's 30 s (issue 24): a watcher that stalls
         * is closed as a stalled client is (srv_client_settle keeps it on a move) */
        net_conn_set_timeouts(cl->conn, 0, ds->cfg->write_timeout_ms);
    }
    srv_event_broadcast(ds, watch_add_event, f, arg);
}

void srv_watch_stop(struct srv_shard *ds, struct srv_client *cl)
{
    struct srv_client *last = ds->watch_list[--ds->watch_count];
    ds->watch_list[cl->watch_idx] = last;
    last->watch_idx = cl->watch_idx;
    cl->watcher = false;
    struct hd_frame *f = srv_key_frame(ds, cl->key.bytes, NULL);
    if (f)
        srv_event_broadcast(ds, watch_remove_event, f, 0);
}

void srv_peer_gone_if_absent(struct srv_shard *ds, const uint8_t key[DERP_KEY_LEN])
{
    struct srv_peer *p = srv_peers_find(&ds->peers, key);
    if (p == NULL || p->clients_count == 0)
        broadcast_gone(ds, key, p && p->fwd_count ? GONE_WATCHERS : GONE_WATCHERS | GONE_SOURCES);
}
