/* server_pack.c - packing (on by default; --pack=false): while the whole relay is lightly
 * loaded, pairs gather on shard 0 so that the other loops sleep (at a light load a loop sleeps
 * and is woken for nearly every packet, and that wake-up is most of a packet's cost; with two
 * shards each loop has half the packets, so fewer per wake-up); while shard 0 is busy and
 * another shard is not, pairs spread out again. It decides on the sender's shard, at the end of
 * the tick in which a run of SRV_PLACE_PACKETS packets a client sent to a peer on the same shard
 * ended (server_place_tick.c; the packet path only counts the run), and moves one side of the
 * pair: the side the placement rule keeps still (srv_place_decide: of a pair that talks both ways
 * the larger key, else the receiver), so that the other one follows it by that rule (its packets
 * now cross the bus, and after its next run placement moves it to where its peer lives) and no
 * two moves cross. The moves themselves are placement's (server_place.c). docs/ARCHITECTURE.md,
 * "Placement policy".
 *
 * Busy fractions: the reactor publishes each shard's (hd_shard_busy_ppm: its thread's CPU time
 * over the last HD_BUSY_INTERVAL_MS, 1 s; 0 for a shard that slept through two). Packing: on a
 * shard other than 0, when all shards add up to less than --pack-low (default 60 % of one core)
 * with shard 0 below it too, the side moves to shard 0. Spreading, the mirror: on shard 0, while
 * shard 0 is at --pack-high (default 80 %) or more and another shard is below --pack-low, the
 * side moves to the least busy shard (spreading wins when the marks overlap). A side that
 * packing or spreading moved is not moved by them again for SRV_PACK_HOLD_MS (3 s; following is
 * not held back), and each shard decides at most SRV_PACK_MOVES_MAX (16) moves a second, so
 * nothing oscillates faster than the busy figures change. Counters: hderp_placement_packs,
 * _spreads, _returns (guests that asked to go home); gauges per shard: hderp_placement_guests,
 * hderp_loop_busy_ppm. */
#include <string.h>

#include "server.h"

enum pack_verdict { PACK_NONE, PACK_IN, PACK_OUT };

/* What the load asks for now; for spreading, *to is the least busy shard other than 0. */
static enum pack_verdict verdict(const struct srv_shard *ds, unsigned *to)
{
    struct hd_runtime *rt = hd_shard_runtime(ds->s);
    unsigned n = hd_shard_count(ds->s);
    uint32_t b0 = hd_shard_busy_ppm(rt, 0), least = UINT32_MAX;
    uint64_t sum = b0;
    for (unsigned i = 1; i < n; i++) {
        uint32_t b = hd_shard_busy_ppm(rt, i);
        sum += b;
        if (b < least) {
            least = b;
            *to = i;
        }
    }
    HD_ASSERT(n < 2 || (*to >= 1 && *to < n)); /* spreading goes to another shard than 0 */
    if (b0 >= ds->cfg->pack_high_ppm && least < ds->cfg->pack_low_ppm)
        return PACK_OUT; /* first: with water marks that overlap, spreading wins */
    if (sum < ds->cfg->pack_low_ppm && b0 < ds->cfg->pack_low_ppm)
        return PACK_IN;
    return PACK_NONE;
}

/* One more move in this shard's window, if the budget allows. */
static bool budget_take(struct srv_shard *ds)
{
    uint64_t now = hd_now_ms(ds->s);
    if (now - ds->pack_window_ms >= SRV_PACK_WINDOW_MS) {
        ds->pack_window_ms = now;
        ds->pack_moves = 0;
    }
    if (ds->pack_moves >= SRV_PACK_MOVES_MAX)
        return false;
    ds->pack_moves++;
    HD_ASSERT(ds->pack_moves <= SRV_PACK_MOVES_MAX);
    return true;
}

/* The connection of key dst on this shard (at home or a guest), or NULL. */
static struct srv_client *local_of(struct srv_shard *ds, const uint8_t dst[DERP_KEY_LEN])
{
    struct srv_peer *p = srv_peers_find(&ds->peers, dst);
    return p ? p->active : srv_place_guest(ds, dst);
}

/* Whether c can follow its peer to shard `to` by placement: at home it can go anywhere, a
 * guest only home (srv_place_move_to). */
static bool can_follow(const struct srv_client *c, unsigned to)
{
    return !c->guest || srv_owner(c->ds, c->key.bytes) == to;
}

void srv_pack_decide(struct srv_client *cl, const uint8_t dst[DERP_KEY_LEN])
{
    struct srv_shard *ds = cl->ds;
    if (hd_shard_count(ds->s) < 2)
        return;
    unsigned to = 0, me = hd_shard_id(ds->s);
    enum pack_verdict v = verdict(ds, &to);
    if (v == PACK_IN)
        to = 0;
    if (v == PACK_NONE || (v == PACK_IN && me == 0) || (v == PACK_OUT && me != 0))
        return;
    struct srv_client *peer = local_of(ds, dst);
    if (peer == NULL || peer == cl)
        return;
    /* Of a pair that talks both ways the larger key moves, else the receiver: placement would
     * move the other one (the smaller key, or the only sender), which now follows. */
    bool both = srv_source_has(cl, dst);
    struct srv_client *mover = both && memcmp(cl->key.bytes, dst, DERP_KEY_LEN) > 0 ? cl : peer;
    struct srv_client *follower = mover == cl ? peer : cl;
    uint64_t now = hd_now_ms(ds->s);
    if ((mover->moved_ms != 0 && now - mover->moved_ms < SRV_PACK_HOLD_MS) ||
        !can_follow(follower, to) || !budget_take(ds))
        return;
    HD_ASSERT(mover != follower && mover->ds == ds && ds->pack_moves > 0);
    if (srv_place_move_to(mover, to) < 0) {
        ds->pack_moves--; /* nothing moved: the budget is for moves */
        return;
    }
    if (v == PACK_IN)
        ds->ctr.placement_packs++;
    else
        ds->ctr.placement_spreads++;
}
