/* server_place_tick.c - placement and packing decided off the packet path, once per tick. What
 * a packet leaves behind is a run count: on_send_packet, after routing, counts the packets a
 * client sends in a row to one destination (srv_place_count, server_place.h: its key's hash,
 * already computed for the routing call, compared and a counter bumped). At the
 * SRV_PLACE_PACKETS-th in a row the client goes on its shard's list for this tick (srv_place_due,
 * here: the destination key and what the packet's route asks for, placement or packing) and its
 * run starts again; at the tick's end one flush takes the decisions for the clients on the list
 * (srv_place_decide, server_place.c; srv_pack_decide, server_pack.c), with the conditions as
 * they stand then. A client is on the list at most once a tick (a second run in the same tick
 * is that same decision), and leaves it when it leaves the shard or closes
 * (srv_place_tick_leave, from srv_client_unsettle). The list is the shard's, fixed
 * (SRV_PLACE_DUE_MAX entries, no allocation); while it is full a run that reached its length
 * stays there and tries again at the client's next packet. docs/ARCHITECTURE.md, "Placement
 * policy". */
#include <string.h>

#include "server.h"

static void decide_all(struct hd_flush *fl)
{
    struct srv_place_tick *t = hd_container_of(fl, struct srv_place_tick, flush);
    struct srv_shard *ds = hd_container_of(t, struct srv_shard, place_tick);
    HD_ASSERT(t->count <= SRV_PLACE_DUE_MAX);
    /* A decision may move another client of the list (packing moves a pair's other side): its
     * leave empties its entry. Nothing adds to the list meanwhile (only packets do). */
    for (uint32_t i = 0; i < t->count; i++) {
        struct srv_place_due *e = &t->due[i];
        struct srv_client *cl = e->cl;
        if (cl == NULL)
            continue;
        HD_ASSERT(cl->place_due && cl->ds == ds);
        e->cl = NULL;
        cl->place_due = false;
        if (e->why == SRV_PLACE_FOR_MOVE)
            srv_place_decide(cl, e->dst);
        else
            srv_pack_decide(cl, e->dst);
    }
    t->count = 0;
}

bool srv_place_due(struct srv_client *cl, const uint8_t dst[DERP_KEY_LEN], enum srv_place_for why)
{
    struct srv_shard *ds = cl->ds;
    struct srv_place_tick *t = &ds->place_tick;
    if (cl->place_due) /* this tick's decision for it is taken at the end of the tick */
        return true;
    if (why == SRV_PLACE_FOR_PACK && hd_shard_count(ds->s) < 2)
        return true; /* one shard: nothing to pack or spread */
    if (t->count == SRV_PLACE_DUE_MAX)
        return false; /* full: its run stays at its length and tries again */
    if (t->count == 0) {
        hd_flush_init(&t->flush, decide_all); /* not queued while the list is empty */
        hd_flush_request(ds->s, &t->flush);
    }
    struct srv_place_due *e = &t->due[t->count++];
    e->cl = cl;
    e->why = (uint8_t)why;
    memcpy(e->dst, dst, DERP_KEY_LEN);
    cl->place_due = true;
    return true;
}

void srv_place_tick_leave(struct srv_client *cl)
{
    if (!cl->place_due)
        return;
    struct srv_place_tick *t = &cl->ds->place_tick;
    for (uint32_t i = 0; i < t->count; i++) {
        if (t->due[i].cl == cl) {
            t->due[i].cl = NULL;
            break;
        }
    }
    cl->place_due = false;
}

void srv_place_tick_fini(struct srv_shard *ds)
{
    struct srv_place_tick *t = &ds->place_tick;
    if (t->count)
        hd_flush_cancel(ds->s, &t->flush);
    t->count = 0;
}
