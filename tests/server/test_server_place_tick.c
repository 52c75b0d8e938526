/* test_server_place_tick.c - placement decided at the end of the tick (server_place_tick.c), on
 * two real shards: the packet path only counts a run (srv_place_count) and the decision for a
 * run of SRV_PLACE_PACKETS is taken once the tick ends, with the outcomes placement had when it
 * decided at the packet: a run broken by another key decides nothing, a run of 64 to one key
 * does (here a guest with packing that asks its owner to call it home: a real bus event, seen
 * on the owner), one that is not movable then moves nothing, a client that left the shard
 * before the tick's end is not decided, a full list defers a run to the client's next packet.
 * The client has a real connection (a socketpair adopted by net) so that it is movable. */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <unistd.h>

#include <hd/net_class.h>

#include "server_test.h"

static struct tick_state {
    struct srv_client *cl, *others[SRV_PLACE_DUE_MAX];
    struct net_conn *c;
    int peer_fd;
    uint8_t mine[DERP_KEY_LEN], dst[DERP_KEY_LEN], other[DERP_KEY_LEN];
    struct hd_timer poll[2];
    unsigned step, polls[2];
    struct srv_peer *entry;      /* shard 1: the owner's entry of the guest's key */
    struct srv_peer guest_entry; /* shard 0: the guest's entry (cl->peer) */
    struct srv_shard *ds1;
    atomic_bool asked; /* shard 1 saw the ask (and called it home) */
} ts;

/* n packets from cl to key, counted as on_send_packet counts one that crossed the bus. */
static void sends(struct srv_client *cl, const uint8_t key[DERP_KEY_LEN], unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        uint64_t h = srv_hash_memo_get(&cl->dst_hash, key);
        srv_place_count(cl, key, h, SRV_ROUTED_OWNER);
    }
}

static void next_tick(struct srv_shard *ds)
{
    HDT_CHECK(++ts.polls[0] < 30000);
    hd_timer_start(ds->s, &ts.poll[0], 1);
}

/* Shard 0, one step a tick (each timer fires in a later tick than the packets before it). */
static void step0(struct hd_timer *t)
{
    (void)t;
    struct srv_client *cl = ts.cl;
    struct srv_shard *ds = cl->ds;
    struct srv_place_tick *pt = &ds->place_tick;
    HDT_CHECK(pt->count == 0 && !cl->place_due); /* the tick's end took its decisions */
    switch (ts.step++) {
    case 0: /* the run of 64 was decided: the guest asked its owner to call it home */
        HDT_CHECK(ds->ctr.placement_returns == 1 && cl->asked_ms != 0);
        /* not movable now (its connection backed up): a run decides, nothing moves */
        cl->asked_ms = 0;
        net_conn_set_limits(ts.c, 1, 0, NET_SEND_MAX_DEFAULT); /* a queued byte backs it up */
        HDT_CHECK(net_conn_send_copy(ts.c, "x", 1) == 0 && net_conn_send_paused(ts.c));
        sends(cl, ts.dst, SRV_PLACE_PACKETS);
        HDT_CHECK(cl->place_due && pt->count == 1);
        break;
    case 1:
        HDT_CHECK(ds->ctr.placement_returns == 1 && cl->asked_ms == 0);
        if (net_conn_send_paused(ts.c)) { /* the byte is not sent yet: look again next tick */
            ts.step = 1;
            break;
        }
        /* movable again, but it leaves the list before the tick ends */
        net_conn_set_limits(ts.c, NET_SEND_HIGH_DEFAULT, NET_SEND_LOW_DEFAULT,
                            NET_SEND_MAX_DEFAULT);
        sends(cl, ts.dst, SRV_PLACE_PACKETS);
        HDT_CHECK(cl->place_due && pt->count == 1);
        srv_place_tick_leave(cl);
        HDT_CHECK(!cl->place_due && pt->count == 1 && pt->due[0].cl == NULL);
        break;
    case 2: /* not decided; now a full list: SRV_PLACE_DUE_MAX others first */
        HDT_CHECK(ds->ctr.placement_returns == 1 && cl->asked_ms == 0);
        for (unsigned i = 0; i < SRV_PLACE_DUE_MAX; i++)
            sends(ts.others[i], ts.dst, SRV_PLACE_PACKETS);
        HDT_CHECK(pt->count == SRV_PLACE_DUE_MAX);
        sends(cl, ts.dst, SRV_PLACE_PACKETS + 1); /* its run stays at its length */
        HDT_CHECK(!cl->place_due && cl->place_run == SRV_PLACE_PACKETS + 1);
        break;
    case 3: /* the others were not movable (no connection); cl's next packet lists it */
        HDT_CHECK(ds->ctr.placement_returns == 1 && ds->ctr.placement_moves == 0);
        sends(cl, ts.dst, 1);
        HDT_CHECK(cl->place_due && pt->count == 1 && cl->place_run == 0);
        break;
    case 4:
        HDT_CHECK(ds->ctr.placement_returns == 2 && cl->asked_ms != 0);
        break;
    default: /* the owner's answer (go home) reached this shard, which has no such guest */
        if (!atomic_load(&ts.asked))
            break;
        for (unsigned i = 0; i < SRV_PLACE_DUE_MAX; i++)
            srvt_client_free(ts.others[i]);
        net_conn_close(ts.c, 0, false);
        close(ts.peer_fd);
        srvt_client_free(cl);
        srvt_cfg.pack = false;
        srvt_done(ds);
        return;
    }
    next_tick(ds);
}

/* Shard 1, the owner of the guest's key: waits for its ask (home_ask_event holds the key's
 * packets from then on and calls it home). */
static void step1(struct hd_timer *t)
{
    (void)t;
    struct srv_peer *p = ts.entry;
    struct srv_shard *ds = ts.ds1;
    if (!p->placing) {
        HDT_CHECK(++ts.polls[1] < 30000);
        hd_timer_start(ds->s, &ts.poll[1], 1);
        return;
    }
    free(p->held);
    srv_peers_remove(&ds->peers, p);
    free(p);
    atomic_store(&ts.asked, true);
    srvt_done(ds);
}

static void tick_body(struct srv_shard *ds, void *arg)
{
    (void)arg;
    uint8_t mine[DERP_KEY_LEN]; /* the guest's key, owned by shard 1 (each shard finds it) */
    srvt_key_owned(ds, 1, 0, mine);
    if (hd_shard_id(ds->s) == 1) {
        struct srv_peer *p = calloc(1, sizeof(*p));
        HDT_CHECK(p != NULL);
        memcpy(p->key.bytes, mine, DERP_KEY_LEN);
        ts.ds1 = ds;
        p->clients_count = 1;
        p->guest_at = 1; /* its one connection is a guest on shard 0 */
        HDT_CHECK(srv_peers_insert(&ds->peers, p) == 0);
        ts.entry = p;
        hd_timer_init(&ts.poll[1], step1);
        hd_timer_start(ds->s, &ts.poll[1], 1);
        return;
    }
    /* A guest of shard 0 whose key shard 1 owns, sending to a key shard 1 owns too: with
     * packing it follows its peer home (srv_place_move_to asks its owner). */
    memcpy(ts.mine, mine, DERP_KEY_LEN);
    srvt_key_owned(ds, 1, 1, ts.dst);
    srvt_key(7, ts.other);
    int sv[2];
    HDT_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) == 0);
    struct srv_client *cl = srvt_client(ds, ts.mine, SRV_CLIENT_ACTIVE);
    HDT_CHECK(net_conn_adopt(ds->s, sv[0], &srvt_sink_handler, cl, NULL, &ts.c) == 0);
    cl->conn = ts.c;
    ts.peer_fd = sv[1];
    cl->guest = true;
    cl->peer = &ts.guest_entry;
    ts.cl = cl;
    for (unsigned i = 0; i < SRV_PLACE_DUE_MAX; i++) {
        uint8_t k[DERP_KEY_LEN];
        srvt_key(100 + i, k);
        ts.others[i] = srvt_client(ds, k, SRV_CLIENT_ACTIVE);
    }
    struct srv_place_tick *pt = &ds->place_tick;
    /* a run broken by another key: 63, one elsewhere, 63 again decide nothing */
    sends(cl, ts.dst, SRV_PLACE_PACKETS - 1);
    sends(cl, ts.other, 1);
    sends(cl, ts.dst, SRV_PLACE_PACKETS - 1);
    HDT_CHECK(!cl->place_due && pt->count == 0);
    /* the 64th in a row puts it on the list; the decision waits for the tick's end */
    sends(cl, ts.dst, 1);
    HDT_CHECK(cl->place_due && pt->count == 1 && cl->place_run == 0);
    HDT_CHECK(pt->due[0].cl == cl && memcmp(pt->due[0].dst, ts.dst, DERP_KEY_LEN) == 0);
    HDT_CHECK(ds->ctr.placement_returns == 0);
    /* a second run in the same tick is that same decision */
    sends(cl, ts.dst, SRV_PLACE_PACKETS);
    HDT_CHECK(pt->count == 1 && cl->place_run == 0 && ds->ctr.placement_returns == 0);
    hd_timer_init(&ts.poll[0], step0);
    hd_timer_start(ds->s, &ts.poll[0], 1);
}

Test(server_place_tick, decided_at_the_tick_end)
{
    memset(&ts, 0, sizeof(ts));
    atomic_init(&ts.asked, false);
    srvt_cfg.pack = true;
    struct srvt_opts o = {.shards = 2, .net = true};
    int rc = srvt_run(&o, tick_body, NULL);
    srvt_cfg.pack = false;
    cr_assert_eq(rc, 0);
}

/* What a run of packets that stayed on the shard counts: nothing without packing; with packing
 * on one shard, a run but no decision (nothing to pack or spread). */
static void local_body(struct srv_shard *ds, void *arg)
{
    (void)arg;
    uint8_t k[DERP_KEY_LEN], dst[DERP_KEY_LEN];
    srvt_key(1, k), srvt_key(2, dst);
    struct srv_client *cl = srvt_client(ds, k, SRV_CLIENT_ACTIVE);
    uint64_t h = srv_hash_node_key(dst);
    for (unsigned i = 0; i < SRV_PLACE_PACKETS; i++)
        srv_place_count(cl, dst, h, SRV_ROUTED_LOCAL);
    HDT_CHECK(cl->place_run == 0 && ds->place_tick.count == 0); /* not counted */
    srvt_cfg.pack = true;
    for (unsigned i = 0; i < SRV_PLACE_PACKETS - 1; i++)
        srv_place_count(cl, dst, h, SRV_ROUTED_LOCAL);
    HDT_CHECK(cl->place_run == SRV_PLACE_PACKETS - 1);
    srv_place_count(cl, dst, h, SRV_ROUTED_LOCAL);
    HDT_CHECK(cl->place_run == 0 && !cl->place_due && ds->place_tick.count == 0);
    srvt_cfg.pack = false;
    srvt_client_free(cl);
    srvt_done(ds);
}

Test(server_place_tick, local_runs)
{
    cr_assert_eq(srvt_run(NULL, local_body, NULL), 0);
}
