/* test_server_place.c - routing (srv_route, relay/server_peers.c) and placement
 * (relay/server_place.c) at their edges, on two real shards: a packet for a key nobody has
 * (dropped and counted, here or on the owner after one bus hop, forwarded or not); a key whose
 * connection travels (held up to SRV_PLACE_HELD_MAX, then dropped and counted); a packet for a
 * guest that left, bounced back to the owner once and dropped there; runs of packets and the
 * answers of srv_place_move_to. Delivery to a live connection is the integration tests' (it
 * needs a connection): here no client is active. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server_test.h"

#define PAYLOAD 100u

/* A packet of PAYLOAD bytes from src to key, routed as on_send_packet routes it. */
static struct srv_routed route(struct srv_shard *ds, const uint8_t key[DERP_KEY_LEN],
                               const uint8_t src[DERP_KEY_LEN], enum srv_kind kind, bool fwd)
{
    struct hd_frame *f = srvt_route_frame(ds, key, src, PAYLOAD);
    f->app_flags =
        (uint8_t)((kind == SRV_KIND_DISCO ? SRV_ROUTE_DISCO : 0) | (fwd ? SRV_ROUTE_FORWARDED : 0));
    return srv_route(ds, f, srv_hash_node_key(key));
}

static uint64_t dropped(const struct srv_shard *ds, enum srv_drop why)
{
    return ds->ctr.packets_dropped[why][SRV_KIND_OTHER];
}

/* An entry of table t for key with one connection, placing: packets for it are held (room for
 * SRV_PLACE_HELD_MAX); the test frees it. */
static struct srv_peer *placing_entry(struct srv_peer_table *t, const uint8_t key[DERP_KEY_LEN])
{
    struct srv_peer *p = calloc(1, sizeof(*p));
    HDT_CHECK(p != NULL);
    memcpy(p->key.bytes, key, DERP_KEY_LEN);
    p->clients_count = 1;
    p->placing = true;
    p->held = malloc(SRV_PLACE_HELD_MAX * sizeof(*p->held));
    HDT_CHECK(p->held && srv_peers_insert(t, p) == 0);
    return p;
}

/* The owner's entry of a key whose one connection is on its way to shard 1 (guest_at 2). */
static struct srv_peer *travelling_peer(struct srv_shard *ds, const uint8_t key[DERP_KEY_LEN])
{
    struct srv_peer *p = placing_entry(&ds->peers, key);
    p->guest_at = 2;
    return p;
}

/* Each shard waits, a bounded number of 1 ms polls, for the drops it expects to count: shard 1
 * the packet for its key, shard 0 the one that bounced back. */
struct route_shard {
    struct srv_shard *ds;
    struct hd_timer poll;
    unsigned polls;
    uint64_t expect; /* UNKNOWN_DEST drops */
    struct srv_peer *travelling;
};
static struct route_shard rs[2];

static void poll_fired(struct hd_timer *t)
{
    struct route_shard *me = hd_container_of(t, struct route_shard, poll);
    struct srv_shard *ds = me->ds;
    if (dropped(ds, SRV_DROP_UNKNOWN_DEST) < me->expect) {
        HDT_CHECK(++me->polls < 30000); /* 30 s: the bus is not that slow */
        hd_timer_start(ds->s, &me->poll, 1);
        return;
    }
    HDT_CHECK(dropped(ds, SRV_DROP_UNKNOWN_DEST) == me->expect); /* bounced once, no more */
    struct srv_peer *p = me->travelling; /* the travelling key's entry and held packets go */
    for (unsigned i = 0; p && i < p->held_count; i++)
        hd_frame_unref(ds->s, p->held[i]);
    if (p) {
        free(p->held);
        srv_peers_remove(&ds->peers, p);
        free(p);
    }
    srvt_done(ds);
}

static void poll_start(struct route_shard *me, struct srv_shard *ds, uint64_t expect)
{
    me->ds = ds;
    me->expect = expect;
    hd_timer_init(&me->poll, poll_fired);
    hd_timer_start(ds->s, &me->poll, 1);
}

static void route_body(struct srv_shard *ds, void *arg)
{
    (void)arg;
    if (hd_shard_id(ds->s) == 1) {
        poll_start(&rs[1], ds, 1); /* the packet for its key */
        return;
    }
    uint8_t src[DERP_KEY_LEN], here[DERP_KEY_LEN], there[DERP_KEY_LEN], moving[DERP_KEY_LEN];
    srvt_key(1, src);
    srvt_key_owned(ds, 0, 0, here);
    srvt_key_owned(ds, 1, 0, there);
    srvt_key_owned(ds, 0, 1, moving);
    /* a key this shard owns, nobody connected: dropped here, counted with its bytes */
    struct srv_routed r = route(ds, here, src, SRV_KIND_OTHER, false);
    HDT_CHECK(r.to == SRV_ROUTED_NONE && r.behind == NULL &&
              dropped(ds, SRV_DROP_UNKNOWN_DEST) == 1);
    HDT_CHECK(ds->ctr.bytes_dropped[SRV_DROP_UNKNOWN_DEST][SRV_KIND_OTHER] == PAYLOAD);
    /* the same, come from a mesh peer: its own reason */
    r = route(ds, here, src, SRV_KIND_OTHER, true);
    HDT_CHECK(r.to == SRV_ROUTED_NONE && dropped(ds, SRV_DROP_UNKNOWN_DEST_ON_FWD) == 1);
    /* a key shard 1 owns: one bus hop, dropped and counted there */
    r = route(ds, there, src, SRV_KIND_OTHER, false);
    HDT_CHECK(r.to == SRV_ROUTED_OWNER && dropped(ds, SRV_DROP_UNKNOWN_DEST) == 1);
    /* a key whose one connection is on its way to shard 1: held, up to the cap */
    struct srv_peer *p = travelling_peer(ds, moving);
    rs[0].travelling = p;
    for (unsigned i = 0; i < SRV_PLACE_HELD_MAX; i++) {
        r = route(ds, moving, src, SRV_KIND_OTHER, false);
        HDT_CHECK(r.to == SRV_ROUTED_GUEST); /* placement follows it only with packing */
    }
    HDT_CHECK(p->held_count == SRV_PLACE_HELD_MAX && dropped(ds, SRV_DROP_QUEUE_TAIL) == 0);
    (void)route(ds, moving, src, SRV_KIND_OTHER, false);
    HDT_CHECK(p->held_count == SRV_PLACE_HELD_MAX && dropped(ds, SRV_DROP_QUEUE_TAIL) == 1);
    /* it arrived, as far as this shard knows, but shard 1 has no such guest: the packet goes
     * there, comes back once (bounced), and is dropped here */
    p->placing = false;
    (void)route(ds, moving, src, SRV_KIND_OTHER, false);
    p->placing = true; /* the held packets stay until the poll frees them */
    poll_start(&rs[0], ds, 2);
}

Test(server_route, edges)
{
    memset(&rs, 0, sizeof(rs));
    struct srvt_opts o = {.shards = 2};
    cr_assert_eq(srvt_run(&o, route_body, NULL), 0);
}

/* ---------------------------------------------------------------- placement's decisions */

/* The tests below run on shard 0, with shard 1 there to be moved to: shard 1's body is done at
 * once (true). */
static bool idle_on_shard_1(struct srv_shard *ds)
{
    if (hd_shard_id(ds->s) != 1)
        return false;
    srvt_done(ds);
    return true;
}

static void place_body(struct srv_shard *ds, void *arg)
{
    (void)arg;
    if (idle_on_shard_1(ds))
        return;
    uint8_t a[DERP_KEY_LEN], b[DERP_KEY_LEN], mine[DERP_KEY_LEN], theirs[DERP_KEY_LEN];
    srvt_key(1, a), srvt_key(2, b);
    srvt_key_owned(ds, 0, 0, mine);
    srvt_key_owned(ds, 1, 0, theirs);
    struct srv_client *cl = srvt_client(ds, mine, SRV_CLIENT_ACTIVE);
    /* a run: SRV_PLACE_PACKETS in a row to one destination, then it starts again */
    for (unsigned i = 1; i < SRV_PLACE_PACKETS; i++)
        HDT_CHECK(!srv_place_run(cl, a));
    HDT_CHECK(srv_place_run(cl, a));
    HDT_CHECK(!srv_place_run(cl, a)); /* a new run */
    for (unsigned i = 0; i < SRV_PLACE_PACKETS - 2; i++)
        HDT_CHECK(!srv_place_run(cl, a));
    HDT_CHECK(!srv_place_run(cl, b)); /* another destination breaks the run */
    for (unsigned i = 2; i < SRV_PLACE_PACKETS; i++)
        HDT_CHECK(!srv_place_run(cl, b));
    HDT_CHECK(srv_place_run(cl, b));
    /* where a key's connection lives, as this shard knows it */
    HDT_CHECK(srv_place_lives_at(ds, theirs) == 1);
    HDT_CHECK(srv_place_lives_at(ds, mine) == 0);
    struct srv_peer *p = calloc(1, sizeof(*p));
    HDT_CHECK(p != NULL);
    memcpy(p->key.bytes, mine, DERP_KEY_LEN);
    p->guest_at = 2;
    HDT_CHECK(srv_peers_insert(&ds->peers, p) == 0);
    HDT_CHECK(srv_place_lives_at(ds, mine) == 1); /* a guest on shard 1 */
    srv_peers_remove(&ds->peers, p);
    free(p);
    /* srv_place_move_to's answers that need no move */
    HDT_CHECK(srv_place_move_to(cl, 0) == -EALREADY); /* here already */
    HDT_CHECK(srv_place_move_to(cl, 2) == -EALREADY); /* no such shard */
    cl->phase = SRV_CLIENT_ADMITTING;
    HDT_CHECK(srv_place_move_to(cl, 1) == -EBUSY); /* not active */
    cl->phase = SRV_CLIENT_ACTIVE;
    cl->guest = true;
    HDT_CHECK(srv_place_move_to(cl, 1) == -EXDEV); /* a guest moves home only, with packing */
    srvt_cfg.pack = true;
    HDT_CHECK(srv_place_move_to(cl, 1) == -EXDEV); /* shard 1 is not its owner */
    srvt_cfg.pack = false;
    srvt_client_free(cl);
    srvt_done(ds);
}

Test(server_place, decisions)
{
    struct srvt_opts o = {.shards = 2};
    cr_assert_eq(srvt_run(&o, place_body, NULL), 0);
}

/* Packets held for a travelling connection keep their kind (disco or other): the bit that says
 * which was read back inverted, so a held disco packet went to the other queue (and was counted
 * as one when dropped). Dropped here by the connection's close before it left. */
static void held_kind_body(struct srv_shard *ds, void *arg)
{
    (void)arg;
    if (idle_on_shard_1(ds))
        return;
    uint8_t src[DERP_KEY_LEN], moving[DERP_KEY_LEN];
    srvt_key(1, src);
    srvt_key_owned(ds, 0, 0, moving);
    struct srv_client *cl = srvt_client(ds, moving, SRV_CLIENT_MOVING);
    struct srv_peer *p = travelling_peer(ds, moving);
    cl->peer = p;
    cl->placing = true;
    ds->ctr.clients_local = 1;
    (void)route(ds, moving, src, SRV_KIND_DISCO, false);
    (void)route(ds, moving, src, SRV_KIND_OTHER, false);
    (void)route(ds, moving, src, SRV_KIND_OTHER, true);
    HDT_CHECK(p->held_count == 3);
    srv_place_closed(cl); /* closed before it left: what waited for it is dropped, counted */
    const uint64_t *gone = ds->ctr.packets_dropped[SRV_DROP_GONE_DISCONNECTED];
    HDT_CHECK(gone[SRV_KIND_DISCO] == 1 && gone[SRV_KIND_OTHER] == 2);
    HDT_CHECK(srv_peers_find(&ds->peers, moving) == NULL && ds->ctr.clients_local == 0);
    free(cl);
    srvt_done(ds);
}

Test(server_place, held_packets_keep_their_kind)
{
    struct srvt_opts o = {.shards = 2};
    cr_assert_eq(srvt_run(&o, held_kind_body, NULL), 0);
}

/* ---------------------------------------------------------------- events behind a full bus */

/* Packets that fill the bus to a shard leave room for the relay's events (hd_bus_send_control):
 * placement's guest_here, guest_gone and guest_settled, NotHere, ClosePeer. Lost, an owner
 * would hold a moved key's packets for good (no guest_here) or count a gone connection as
 * present (no guest_gone). Shard 0 routes packets for a key of shard 1 in one tick until the
 * bus refuses one, then sends an event: before events had a room of their own it was refused
 * too (-EAGAIN, and lost). On shard 1 the event runs after every packet that went before it. */
#define EVENT_ARG 7u

static struct {
    uint64_t routed; /* packets shard 0 put on the bus before it was full */
    _Atomic bool ran;
    struct srv_shard *ds1;
    struct hd_timer poll;
    unsigned polls;
} ev;

static void full_bus_event(struct srv_shard *ds, struct hd_frame *f, uint64_t arg)
{
    (void)f;
    HDT_CHECK(hd_shard_id(ds->s) == 1 && arg == EVENT_ARG);
    /* In the one order from shard 0: every packet before it was delivered (to nobody). */
    HDT_CHECK(dropped(ds, SRV_DROP_UNKNOWN_DEST) == ev.routed);
    atomic_store(&ev.ran, true);
}

static void full_bus_poll(struct hd_timer *t)
{
    struct srv_shard *ds = ev.ds1;
    if (!atomic_load(&ev.ran)) {
        HDT_CHECK(++ev.polls < 30000); /* 30 s: the bus is not that slow */
        hd_timer_start(ds->s, t, 1);
        return;
    }
    srvt_done(ds);
}

static void full_bus_body(struct srv_shard *ds, void *arg)
{
    (void)arg;
    if (hd_shard_id(ds->s) == 1) {
        ev.ds1 = ds;
        hd_timer_init(&ev.poll, full_bus_poll);
        hd_timer_start(ds->s, &ev.poll, 1);
        return;
    }
    uint8_t src[DERP_KEY_LEN], there[DERP_KEY_LEN];
    srvt_key(1, src);
    srvt_key_owned(ds, 1, 0, there);
    /* One tick: shard 1 sees none of it until this tick publishes. */
    struct srv_routed r;
    while ((r = route(ds, there, src, SRV_KIND_OTHER, false)).to == SRV_ROUTED_OWNER)
        ev.routed++;
    HDT_CHECK(r.to == SRV_ROUTED_NONE && ds->ctr.bus_dropped == 1);
    HDT_CHECK(ev.routed >= HD_BUS_RING_SIZE); /* the bus was full, not the frame pool */
    struct hd_frame *f = srv_key_frame(ds, there, NULL);
    HDT_CHECK(f != NULL);
    HDT_CHECK(srv_event_send(ds, 1, full_bus_event, f, EVENT_ARG) == 0);
    HDT_CHECK(ds->ctr.bus_dropped == 1);
    srvt_done(ds);
}

Test(server_route, events_pass_a_bus_full_of_packets)
{
    memset(&ev, 0, sizeof(ev));
    struct srvt_opts o = {.shards = 2};
    cr_assert_eq(srvt_run(&o, full_bus_body, NULL), 0);
}

/* ---------------------------------------------------------------- a guest settling */

/* A guest that just arrived on shard 1 (its key's owner is shard 0): what shard 1's own senders
 * send it waits until the owner's word (guest_settled). A full wait dropped nothing before: it let
 * every waiting packet go to the connection, ahead of the packets of those same senders that the
 * owner still held and had not sent on, so one sender's packets to one receiver could arrive out
 * of order. Now the next one drops (a full queue), and only SRV_PLACE_SETTLE_MS after the arrival,
 * the word taken as lost, does the next packet let them all go, in order. */
static void settle_body(struct srv_shard *ds, void *arg)
{
    (void)arg;
    if (hd_shard_id(ds->s) == 0) {
        srvt_done(ds);
        return;
    }
    uint8_t src[DERP_KEY_LEN], guest[DERP_KEY_LEN];
    srvt_key(1, src);
    srvt_key_owned(ds, 0, 0, guest);
    int sv[2];
    HDT_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) == 0);
    struct srv_client *cl = srvt_client(ds, guest, SRV_CLIENT_ACTIVE);
    HDT_CHECK(net_conn_adopt(ds->s, sv[0], &srvt_sink_handler, cl, NULL, &cl->conn) == 0);
    uint64_t now = hd_now_ms(ds->s);
    HDT_CHECK(now > SRV_PLACE_SETTLE_MS);
    cl->guest = true;
    cl->moved_ms = now;                                     /* it arrived just now */
    struct srv_peer *g = placing_entry(&ds->guests, guest); /* settling: no word from the owner */
    g->clients = g->active = cl;
    cl->peer = g;
    for (unsigned i = 0; i < SRV_PLACE_HELD_MAX; i++)
        HDT_CHECK(route(ds, guest, src, SRV_KIND_OTHER, false).to == SRV_ROUTED_LOCAL);
    HDT_CHECK(g->held_count == SRV_PLACE_HELD_MAX && dropped(ds, SRV_DROP_QUEUE_TAIL) == 0);
    /* full, right after the arrival: this one drops, the waiting ones stay */
    (void)route(ds, guest, src, SRV_KIND_OTHER, false);
    HDT_CHECK(g->placing && g->held_count == SRV_PLACE_HELD_MAX);
    HDT_CHECK(dropped(ds, SRV_DROP_QUEUE_TAIL) == 1);
    /* the word never came: long after the arrival the next packet lets them all go */
    cl->moved_ms = now - SRV_PLACE_SETTLE_MS;
    (void)route(ds, guest, src, SRV_KIND_OTHER, false);
    HDT_CHECK(!g->placing && g->held == NULL && g->held_count == 0);
    srv_peers_remove(&ds->guests, g);
    free(g);
    cl->peer = NULL;
    net_conn_close(cl->conn, 0, false);
    close(sv[1]);
    srvt_client_free(cl);
    srvt_done(ds);
}

Test(server_place, a_full_settling_wait_drops_before_it_reorders)
{
    struct srvt_opts o = {.shards = 2, .net = true};
    cr_assert_eq(srvt_run(&o, settle_body, NULL), 0);
}
