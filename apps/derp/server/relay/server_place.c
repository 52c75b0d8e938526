/* server_place.c - placement: a client that keeps sending to one peer whose key another shard
 * owns moves (net_conn_migrate) to that shard, so the pair's packets stop crossing the bus.
 * Key ownership does not change: the owner's table still has the key, with guest_at naming the
 * shard where its one connection now lives, and that shard keeps the connection in its guest
 * table. Routing on any shard: its own guests first, else the owner, which hands packets for
 * a guest on with one more bus hop. While the connection travels the owner holds its packets
 * and sends them on once the guest shard says it arrived. A second connection for the key
 * calls the guest home (dups live on the owner). With packing (server_pack.c) a guest may also
 * go home on its own, to follow its peer there: it asks the owner, who holds its packets from
 * then on and calls it home as a duplicate would. Runs on the shards involved; they talk only
 * over bus events. docs/ARCHITECTURE.md, "Placement policy".
 *
 * - When. On the sender's shard, each SendPacket that srv_route put on the bus (SRV_ROUTED_OWNER;
 *   on the owner with packing, SRV_ROUTED_GUEST too) counts towards a run of packets to that
 *   destination key (a different key restarts the run; srv_place_count, the packet path's only
 *   part). After SRV_PLACE_PACKETS (64) in a row the decision is taken at the end of that tick
 *   (server_place_tick.c, srv_place_decide): the client moves to the destination's owner shard if
 *   it is movable then: active, at home, the key's only connection, not a mesh peer or watcher,
 *   nothing queued or rate-paused, --placement on. Of a pair that talks both ways only one side
 *   moves: the one whose peer never sent to it, else the smaller key (each side decides alone,
 *   and both decide the same way). The destination is where the peer lives now: for a key the
 *   sender's shard owns, the shard its guest_at names (with packing, packets to such a guest
 *   cross the bus too, and count); else the peer's owner. Without packing a guest never moves
 *   again, so a connection moves at most once (and home once per duplicate).
 * - Where things are. The owner's table keeps the key; its entry says guest_at (the shard + 1) and
 *   still counts the connection in clients_count, but has no local active. The guest's shard holds
 *   the connection in its own guests table. Routing on any shard: owned keys as before; else its
 *   guests (srv_place_guest, skipped while it has none); else a bus message to the owner, which for
 *   a guest key hands the frame on to the guest shard (SRV_ROUTE_TO_GUEST; a third shard's packets
 *   take two hops). Local always wins: a connection of the key on the owner itself (a duplicate) is
 *   delivered to first.
 * - The move. On the owner the connection leaves the table (writer, keep-alive and re-check timers,
 *   rate bucket, frame account, gauges and its PeerGone subscriptions come off this shard; the new
 *   shard starts them afresh) and net_conn_migrate carries it. While it travels the owner holds its
 *   packets (at most SRV_PLACE_HELD_MAX, 256; more drop as a full queue). On arrival the guest
 *   shard takes it into guests, re-subscribes its sources in its own index and tells the owner
 *   (guest_here), which sends the held packets on in order and then guest_settled, behind them on
 *   the same bus ring. Until that arrives the guest entry is *settling*: what the guest shard's own
 *   senders send the guest waits in the entry (srv_place_guest_enqueue, at most SRV_PLACE_HELD_MAX,
 *   more drop as a full queue; SRV_PLACE_SETTLE_MS after the arrival the owner's word counts as
 *   lost and the next packet lets them all go, in order), because their packets from before the
 *   arrival went by the owner and are among the held ones; delivered at once they would overtake
 *   them. A settling guest
 *   that leaves (home, or closed) sends what waited to the owner like any packet for the key.
 * - Leaving. A guest that closes leaves guests and tells the owner (guest_gone), which counts the
 *   connection down there, with the usual departure (PeerGone, watchers). A packet that reaches the
 *   guest shard after its guest went is bounced to the owner once (SRV_ROUTE_BOUNCED), who delivers
 *   it to a connection of the key there or drops it as an unknown destination; it is never
 *   forwarded to a guest again. A close during the move is handled on whichever side it happens
 *   (owner: the held packets drop; destination: tells the owner).
 * - Duplicates. A second connection for the key registers on the owner as before (newest active,
 *   lastWriterIsActive) and calls the guest home (go_home; after its arrival if it is still on the
 *   way). On the guest shard it leaves guests at once (packets for it go to the owner; what waits
 *   in its derper queues goes into its connection's send queue: srv_client_drain), migrates back
 *   and rejoins the key's list there as an inactive duplicate. A guest that became a watcher,
 *   or whose admission re-check is in flight, stays where it is.
 * - Events for the key that the owner handles (NotHere to it, ClosePeer) are handed on to the guest
 *   shard; watchers' snapshots are made by every shard from its own keys and its guests. PeerGone
 *   subscriptions are per shard of the receiving connection, and departures are broadcast, so they
 *   need nothing more. Mesh peers never move; a forwarded packet for a guest key takes the same
 *   path as a local one.
 * - A guest going home on its own. With packing a guest may follow its peer to its own owner: it
 *   asks the owner (home_ask), which says yes if the guest is still the key's only connection and
 *   not on its way, starts holding the key's packets and calls it home as for a duplicate (go_home;
 *   what the owner sent it before is ahead of the call on the bus). The guest leaves guests (its
 *   shard's packets for the key now go to the owner, which holds them) and migrates; on arrival the
 *   owner sends the held packets on after its queue, in order. A guest that cannot leave (a
 *   watcher, a re-check in flight) answers guest_here, which releases what was held to it. A close
 *   on the way is the guest-gone case (held packets drop). A guest moves only to its owner: a guest
 *   whose owner is neither its shard nor the destination (three shards or more) does not follow, so
 *   packing moves a pair only if its follower can follow.
 * - Windows it leaves. Between a duplicate's registration and the guest shard hearing of it,
 *   packets from the guest shard's own senders still reach the old connection (derper would give
 *   them to the new one); a ClosePeer during the move reaches nobody. Events travel as the bus's
 *   control messages, which packets cannot crowd out; a lost one (a bus full even for them:
 *   HD_BUS_CONTROL_ROOM events queued to one shard in a tick) leaves the owner routing to where it
 *   last knew (those packets bounce back and drop). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <hd/net_class.h>

#include "server.h"

static void guest_here_event(struct srv_shard *ds, struct hd_frame *f, uint64_t arg);
static void guest_gone_event(struct srv_shard *ds, struct hd_frame *f, uint64_t arg);
static void go_home_event(struct srv_shard *ds, struct hd_frame *f, uint64_t arg);
static void home_ask_event(struct srv_shard *ds, struct hd_frame *f, uint64_t arg);
static void guest_settled_event(struct srv_shard *ds, struct hd_frame *f, uint64_t arg);

static unsigned here(const struct srv_shard *ds)
{
    return hd_shard_id(ds->s);
}

/* ---------------------------------------------------------------- a client's placement */

/* Where a client stands, from its three flags (one state, asserted consistent):
 *   HOME -> PLACING     place_move: on the owner, on its way to a guest shard
 *   PLACING -> GUEST    guest_adopt: it arrived (a close on the way ends it as PLACING)
 *   GUEST -> GOING_HOME go_home_event: called home (by a duplicate, or its own ask)
 *   GOING_HOME -> HOME  home_adopt: back on the owner (a close on the way ends it there) */
enum place_state { PLACE_HOME, PLACE_PLACING, PLACE_GUEST, PLACE_GOING_HOME };

static enum place_state place_state(const struct srv_client *cl)
{
    HD_ASSERT(!(cl->placing && (cl->guest || cl->going_home))); /* placing: not a guest yet */
    HD_ASSERT(!cl->going_home || cl->guest);                    /* only a guest goes home */
    return cl->placing      ? PLACE_PLACING
           : cl->going_home ? PLACE_GOING_HOME
           : cl->guest      ? PLACE_GUEST
                            : PLACE_HOME;
}

static void place_set(struct srv_client *cl, enum place_state to)
{
    enum place_state from = place_state(cl);
    HD_ASSERT(to == (from + 1) % 4); /* the one way round: HOME, PLACING, GUEST, GOING_HOME */
    cl->placing = to == PLACE_PLACING;
    cl->guest = to == PLACE_GUEST || to == PLACE_GOING_HOME;
    cl->going_home = to == PLACE_GOING_HOME;
    HD_ASSERT(place_state(cl) == to);
}

/* A packet waiting in a peer entry's held (owner: its connection travels; guest shard: it
 * settles); its flags travel in its frame (SRV_ROUTE_DISCO, SRV_ROUTE_FORWARDED). */
static void held_put(struct srv_peer *p, struct hd_frame *f)
{
    HD_ASSERT(p->placing && p->held != NULL && p->held_count < SRV_PLACE_HELD_MAX);
    p->held[p->held_count++] = f;
}

static void held_release(struct srv_shard *ds, struct srv_peer *p);

/* Tell the key's owner shard (fn there, arg = this shard). Full bus: the event is lost and
 * counted; the owner then keeps routing to where it thinks the connection is (bounced back). */
static void tell_owner(struct srv_shard *ds, const struct derp_pubkey *key, srv_event_fn *fn)
{
    struct hd_frame *f = srv_key_frame(ds, key->bytes, NULL);
    if (f)
        srv_event_send(ds, srv_owner(ds, key->bytes), fn, f, here(ds));
}

struct srv_client *srv_place_guest_h(struct srv_shard *ds, const uint8_t key[DERP_KEY_LEN],
                                     uint64_t h)
{
    if (ds->guests.count == 0)
        return NULL;
    struct srv_peer *g = srv_peers_find_h(&ds->guests, key, h);
    return g ? g->active : NULL;
}

struct srv_client *srv_place_guest(struct srv_shard *ds, const uint8_t key[DERP_KEY_LEN])
{
    return ds->guests.count ? srv_place_guest_h(ds, key, srv_hash_node_key(key)) : NULL;
}

/* ---------------------------------------------------------------- deciding to move */

/* Whether cl may leave this shard at all: active, nothing queued or paused, no request of its
 * own in flight. */
static bool can_leave(const struct srv_client *cl)
{
    return cl->phase == SRV_CLIENT_ACTIVE && !cl->mesh && !cl->watcher && !cl->rate_waiting &&
           cl->wait_for == NULL && cl->admit == NULL && cl->peer &&
           net_conn_state(cl->conn) == NET_CONN_OPEN && !net_conn_send_paused(cl->conn) &&
           net_conn_class_count(cl->conn, NET_SEND_CLASSES_MAX) == 0 &&
           !hd_shard_stopping(cl->ds->s);
}

/* At home, and the key's only connection. */
static bool can_move(const struct srv_client *cl)
{
    const struct srv_peer *p = cl->peer;
    return can_leave(cl) && !cl->guest && p->clients_count == 1 && p->guest_at == 0;
}

static void guest_adopt(struct net_conn *c, void *arg);

/* On the owner: take cl out of this shard (its packets are held from now on) and move it. */
static int place_move(struct srv_client *cl, unsigned to)
{
    struct srv_shard *ds = cl->ds;
    struct srv_peer *p = cl->peer;
    /* its key's only connection, at home, nothing held for it (can_move) */
    HD_ASSERT(p->clients == cl && cl->peer_next == NULL && p->active == cl);
    HD_ASSERT(p->guest_at == 0 && !p->placing && p->held == NULL);
    p->held = malloc(SRV_PLACE_HELD_MAX * sizeof(*p->held));
    if (p->held == NULL)
        return -ENOMEM;
    srv_client_unsettle(ds, cl);
    srv_sources_detach(cl);
    p->clients = NULL; /* cl was its only connection; it stays counted */
    p->active = NULL;
    p->guest_at = (uint8_t)(to + 1);
    p->placing = true;
    p->held_count = 0;
    srv_client_phase_set(cl, SRV_CLIENT_MOVING);
    place_set(cl, PLACE_PLACING);
    cl->moved_ms = hd_now_ms(ds->s);
    ds->ctr.placement_moves++;
    int rc = net_conn_migrate(cl->conn, to, guest_adopt, cl);
    if (rc < 0) /* not movable after all (closing): it ends here, as a placing one */
        net_conn_close(cl->conn, rc, false);
    else
        ds->cfg->hooks->move_sent(cl);
    return 0;
}

/* On the guest shard: ask the owner to call cl home (home_ask_event; at most one ask in
 * SRV_PLACE_ASK_MS, as the answer may be no). */
static int ask_home(struct srv_client *cl)
{
    struct srv_shard *ds = cl->ds;
    uint64_t now = hd_now_ms(ds->s);
    if (cl->asked_ms != 0 && now - cl->asked_ms < SRV_PLACE_ASK_MS)
        return -EINPROGRESS;
    cl->asked_ms = now;
    cl->moved_ms = now;
    ds->ctr.placement_returns++;
    tell_owner(ds, &cl->key, home_ask_event);
    return 0;
}

int srv_place_move_to(struct srv_client *cl, unsigned to)
{
    struct srv_shard *ds = cl->ds;
    if (to == here(ds) || to >= hd_shard_count(ds->s))
        return -EALREADY;
    if (!cl->guest)
        return can_move(cl) ? place_move(cl, to) : -EBUSY;
    /* A guest goes home only (a move to a third shard is not implemented: see "Placement
     * policy"); only with packing, so that without it a connection moves at most once. */
    if (!ds->cfg->pack || srv_owner(ds, cl->key.bytes) != to)
        return -EXDEV;
    return can_leave(cl) ? ask_home(cl) : -EBUSY;
}

bool srv_place_run(struct srv_client *cl, const uint8_t dst[DERP_KEY_LEN])
{
    if (!srv_place_run_h(cl, srv_hash_node_key(dst)))
        return false;
    cl->place_run = 0;
    return true;
}

/* Where the connection of key dst lives, as far as this shard knows: for a key it owns, its
 * guest shard if it has one; else the owner (which hands packets on to its guest). */
unsigned srv_place_lives_at(struct srv_shard *ds, const uint8_t dst[DERP_KEY_LEN])
{
    unsigned owner = srv_owner(ds, dst);
    if (owner != here(ds))
        return owner;
    const struct srv_peer *p = srv_peers_find(&ds->peers, dst);
    return p && p->guest_at ? (unsigned)p->guest_at - 1 : owner;
}

void srv_place_decide(struct srv_client *cl, const uint8_t dst[DERP_KEY_LEN])
{
    /* A pair moves one side only: the one whose peer never sent to it, else the smaller key
     * (each side decides alone, and the same way). */
    if (srv_source_has(cl, dst) && memcmp(cl->key.bytes, dst, DERP_KEY_LEN) > 0)
        return;
    (void)srv_place_move_to(cl, srv_place_lives_at(cl->ds, dst));
}

/* ---------------------------------------------------------------- on the guest shard */

static void guest_adopt(struct net_conn *c, void *arg)
{
    struct srv_client *cl = arg;
    struct srv_shard *ds = srv_shard_at(hd_shard_current(), cl->instance);
    ds->cfg->hooks->move_done(ds, cl, c);
    if (c == NULL) { /* this shard could not take the connection: it is gone */
        tell_owner(ds, &cl->key, guest_gone_event);
        srv_sources_forget(cl); /* travelling: in no shard's pool */
        free(cl);
        return;
    }
    cl->conn = c;
    cl->ds = ds;
    net_conn_set_app(c, &srv_client_handler, cl);
    place_set(cl, PLACE_GUEST);
    srv_client_phase_set(cl, SRV_CLIENT_ACTIVE);
    cl->moved_ms = hd_now_ms(ds->s); /* its arrival: the settling's bound counts from it */
    struct srv_peer *g = calloc(1, sizeof(*g));
    if (g) {
        g->key = cl->key;
        g->clients = g->active = cl;
        g->clients_count = 1;
    }
    if (g == NULL || srv_peers_insert(&ds->guests, g) < 0) {
        free(g);
        cl->peer = NULL;
        srv_client_settle(ds, cl);
        srv_sources_attach(cl);
        tell_owner(ds, &cl->key, guest_here_event);
        srv_client_close(cl, -ENOMEM);
        return;
    }
    cl->peer = g;
    /* Settling: until the owner's settled event, what this shard's senders send it waits here
     * (srv_place_guest_enqueue). No memory for that: it receives at once (a sender here may then
     * overtake its own packets still held by the owner). */
    g->held = malloc(SRV_PLACE_HELD_MAX * sizeof(*g->held));
    g->placing = g->held != NULL;
    srv_client_settle(ds, cl);
    srv_sources_attach(cl);
    tell_owner(ds, &cl->key, guest_here_event);
}

/* The owner released what it held for the guest (those packets are ahead of this event on the
 * bus): what this shard's senders sent meanwhile goes to the connection (held_release: the guest
 * entry's active one), and they reach it directly from now on. */
static void guest_settled_event(struct srv_shard *ds, struct hd_frame *f, uint64_t arg)
{
    (void)arg;
    struct srv_client *cl = srv_place_guest(ds, f->data);
    if (cl && cl->peer && cl->peer->placing)
        held_release(ds, cl->peer);
}

int srv_place_guest_enqueue(struct srv_client *cl, struct hd_frame *f)
{
    struct srv_peer *g = cl->peer;
    if (g && g->placing && g->held_count == SRV_PLACE_HELD_MAX) {
        /* Full before the owner's word: let go now, they could overtake this shard's senders'
         * packets the owner still holds; they drop as a full queue, as the owner's do. Long
         * after the arrival the word was lost: all go, in order. */
        if (hd_now_ms(cl->ds->s) - cl->moved_ms < SRV_PLACE_SETTLE_MS) {
            srv_packet_drop(cl->ds, f, SRV_DROP_QUEUE_TAIL);
            return 0;
        }
        held_release(cl->ds, g);
    }
    if (g == NULL || !g->placing)
        return srv_client_enqueue(cl, f);
    held_put(g, f);
    return 0;
}

/* The guest leaves this shard's table (it closes, or goes home). */
static void guest_leave(struct srv_shard *ds, struct srv_client *cl)
{
    struct srv_peer *g = cl->peer;
    if (g) {
        srv_peers_remove(&ds->guests, g);
        cl->peer = NULL;
        /* Packets still settling go where packets for the key go now: to its owner. */
        uint64_t h = g->held_count ? srv_hash_node_key(g->key.bytes) : 0;
        for (unsigned i = 0; i < g->held_count; i++)
            (void)srv_route(ds, g->held[i], h);
        free(g->held);
        free(g);
    }
    if (cl->watcher)
        srv_watch_stop(ds, cl);
}

static void home_adopt(struct net_conn *c, void *arg);

/* The owner has a second connection for this key: this one goes back to the owner, where
 * duplicates live (a watcher stays: its watch list is here; so does one whose admission
 * re-check is in flight). */
static void go_home_event(struct srv_shard *ds, struct hd_frame *f, uint64_t arg)
{
    (void)arg;
    struct srv_client *cl = srv_place_guest(ds, f->data);
    if (cl == NULL) /* gone: its guest_gone is on the way to the owner */
        return;
    if (cl->watcher || cl->admit || net_conn_state(cl->conn) != NET_CONN_OPEN) {
        /* A re-check in flight (-verify-recheck-interval) is this shard's request. It stays:
         * an owner holding its packets (it asked to come home) sends them on now. */
        tell_owner(ds, &cl->key, guest_here_event);
        return;
    }
    srv_client_drain(cl); /* what waits for it goes with its connection */
    srv_client_unsettle(ds, cl);
    srv_sources_detach(cl);
    guest_leave(ds, cl); /* packets for it here go to the owner from now on */
    srv_client_phase_set(cl, SRV_CLIENT_MOVING);
    place_set(cl, PLACE_GOING_HOME);
    int rc = net_conn_migrate(cl->conn, srv_owner(ds, cl->key.bytes), home_adopt, cl);
    if (rc < 0)
        net_conn_close(cl->conn, rc, false);
    else
        ds->cfg->hooks->move_sent(cl);
}

/* ---------------------------------------------------------------- on the owner shard */

static void held_drop(struct srv_shard *ds, struct srv_peer *p);

/* The guest on shard arg asks to come home (to follow its peer here). Yes if it is still its
 * only connection and not on the way somewhere: hold its packets from now on, and call it home
 * (what this shard sent it before is ahead of the call on the bus, so it gets those there). */
static void home_ask_event(struct srv_shard *ds, struct hd_frame *f, uint64_t arg)
{
    struct srv_peer *p = srv_peers_find(&ds->peers, f->data);
    if (p == NULL || p->guest_at != arg + 1 || p->placing || p->clients != NULL ||
        hd_shard_stopping(ds->s))
        return;
    HD_ASSERT(p->held == NULL && p->held_count == 0); /* not placing: nothing held */
    struct hd_frame *call = srv_key_frame(ds, p->key.bytes, NULL);
    if (call == NULL)
        return;
    p->held = malloc(SRV_PLACE_HELD_MAX * sizeof(*p->held));
    if (p->held == NULL) {
        hd_frame_unref(ds->s, call);
        return;
    }
    p->placing = true;
    p->held_count = 0;
    if (srv_event_send(ds, (unsigned)arg, go_home_event, call, 0) < 0)
        held_drop(ds, p); /* nothing held yet; the guest stays where it is */
}

static void held_drop(struct srv_shard *ds, struct srv_peer *p)
{
    HD_ASSERT(p->placing && p->held != NULL && p->held_count <= SRV_PLACE_HELD_MAX);
    for (unsigned i = 0; i < p->held_count; i++)
        srv_packet_drop(ds, p->held[i], SRV_DROP_GONE_DISCONNECTED);
    free(p->held);
    p->held = NULL;
    p->held_count = 0;
    p->placing = false;
}

/* h: p's key's hash (it travels with the message: the guest's shard finds its guest by it). */
static void to_guest(struct srv_shard *ds, struct srv_peer *p, struct hd_frame *f, uint64_t h)
{
    HD_ASSERT(p->guest_at != 0 && (unsigned)p->guest_at - 1 != here(ds)); /* lives elsewhere */
    struct hd_msg m = srv_route_msg_make(ds, f, h, SRV_ROUTE_TO_GUEST);
    if (hd_bus_send(ds->s, (unsigned)p->guest_at - 1, &m) < 0) {
        ds->ctr.bus_dropped++;
        srv_packet_drop(ds, f, SRV_DROP_QUEUE_TAIL);
    }
}

void srv_place_deliver(struct srv_shard *ds, struct srv_peer *p, struct hd_frame *f, uint64_t h)
{
    HD_ASSERT(p->guest_at != 0 && p->active == NULL); /* its one connection is elsewhere */
    if (!p->placing)
        to_guest(ds, p, f, h);
    else if (p->held_count < SRV_PLACE_HELD_MAX)
        held_put(p, f);
    else
        srv_packet_drop(ds, f, SRV_DROP_QUEUE_TAIL);
}

/* What waited for p's connection goes to its active connection here, else to its guest shard. */
static void held_release(struct srv_shard *ds, struct srv_peer *p)
{
    HD_ASSERT(p->placing && p->held != NULL && p->held_count <= SRV_PLACE_HELD_MAX);
    HD_ASSERT(p->active != NULL || p->guest_at != 0); /* somewhere to send them */
    p->placing = false;
    uint64_t h = p->active || p->held_count == 0 ? 0 : srv_hash_node_key(p->key.bytes);
    for (unsigned i = 0; i < p->held_count; i++) {
        if (p->active)
            (void)srv_client_enqueue(p->active, p->held[i]);
        else
            to_guest(ds, p, p->held[i], h);
    }
    free(p->held);
    p->held = NULL;
    p->held_count = 0;
}

/* The moved connection arrived on shard arg: send it what was held (or to a duplicate that
 * registered meanwhile, which is the active one now, and call the guest home). */
static void guest_here_event(struct srv_shard *ds, struct hd_frame *f, uint64_t arg)
{
    struct srv_peer *p = srv_peers_find(&ds->peers, f->data);
    if (p && p->guest_at == arg + 1 && p->placing) {
        held_release(ds, p);
        if (p->clients)
            srv_place_recall(ds, p);
    }
    /* Behind the released packets on the same bus ring: the guest's shard ends its settling. */
    hd_frame_ref(f); /* the caller unrefs its own */
    srv_event_send(ds, (unsigned)arg, guest_settled_event, f, 0);
}

/* The connection on shard arg is gone (closed there, or could not be taken). */
static void guest_gone_event(struct srv_shard *ds, struct hd_frame *f, uint64_t arg)
{
    struct srv_peer *p = srv_peers_find(&ds->peers, f->data);
    if (p == NULL || p->guest_at != arg + 1)
        return;
    if (p->placing)
        held_drop(ds, p);
    p->guest_at = 0;
    srv_peer_count_down(ds, p);
}

void srv_place_recall(struct srv_shard *ds, struct srv_peer *p)
{
    HD_ASSERT(p->guest_at != 0); /* its first connection lives as a guest */
    if (p->placing)              /* not there yet: its arrival calls it home */
        return;
    struct hd_frame *f = srv_key_frame(ds, p->key.bytes, NULL);
    if (f)
        srv_event_send(ds, (unsigned)p->guest_at - 1, go_home_event, f, 0);
}

static void home_adopt(struct net_conn *c, void *arg)
{
    struct srv_client *cl = arg;
    struct srv_shard *ds = srv_shard_at(hd_shard_current(), cl->instance);
    struct srv_peer *p = srv_peers_find(&ds->peers, cl->key.bytes);
    bool counted = p && p->guest_at != 0; /* its entry still counts it */
    ds->cfg->hooks->move_done(ds, cl, c);
    if (c == NULL) {
        if (counted) {
            if (p->placing)
                held_drop(ds, p);
            p->guest_at = 0;
            srv_peer_count_down(ds, p);
        }
        srv_sources_forget(cl); /* travelling: in no shard's pool */
        free(cl);
        return;
    }
    cl->conn = c;
    cl->ds = ds;
    net_conn_set_app(c, &srv_client_handler, cl);
    place_set(cl, PLACE_HOME);
    srv_client_phase_set(cl, SRV_CLIENT_ACTIVE);
    cl->peer = NULL;
    srv_client_settle(ds, cl);
    srv_sources_attach(cl);
    if (!counted) { /* its entry went meanwhile (a lost event): nothing to join */
        srv_client_close(cl, -ESTALE);
        return;
    }
    p->guest_at = 0;
    cl->peer = p;
    cl->peer_next = p->clients;
    p->clients = cl;
    cl->activity = 0; /* the duplicate that called it home stays the active one */
    if (p->active == NULL)
        p->active = cl;
    cl->moved_ms = hd_now_ms(ds->s);
    if (p->placing) /* it asked to come home: what waited for it, in order, after its queue */
        held_release(ds, p);
}

void srv_place_event(struct srv_shard *ds, struct srv_peer *p, srv_event_fn *fn, struct hd_frame *f)
{
    HD_ASSERT(p->guest_at != 0);
    srv_event_send(ds, (unsigned)p->guest_at - 1, fn, f, 1);
}

/* ---------------------------------------------------------------- closing */

void srv_place_closed(struct srv_client *cl)
{
    struct srv_shard *ds = cl->ds;
    if (cl->placing) { /* closed on the owner before the move: nothing went anywhere */
        struct srv_peer *p = cl->peer;
        HD_ASSERT(p != NULL && p->guest_at != 0 && p->clients_count > 0);
        held_drop(ds, p);
        p->guest_at = 0;
        cl->peer = NULL;
        srv_sources_forget(cl); /* travelling: in no shard's pool */
        srv_peer_count_down(ds, p);
        return;
    }
    if (cl->going_home) {       /* closed on the guest shard on the way home */
        srv_sources_forget(cl); /* travelling: in no shard's pool */
        tell_owner(ds, &cl->key, guest_gone_event);
        return;
    }
    guest_leave(ds, cl);
    tell_owner(ds, &cl->key, guest_gone_event);
}
