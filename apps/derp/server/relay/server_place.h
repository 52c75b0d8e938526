/* server_place.h - placement and packing (server_place.c, server_pack.c): where a client's
 * connection lives. Included by server.h after the types and events it uses. */
#ifndef SERVER_PLACE_H
#define SERVER_PLACE_H

/* server_place.c: placement (docs/ARCHITECTURE.md "Placement policy"). On the packet path
 * only a run is counted (srv_place_count); the decisions are taken at the end of the tick
 * (server_place_tick.c). */
/* What a run of SRV_PLACE_PACKETS asks for: placement (the packets crossed the bus), packing
 * (they stayed on this shard, packing on). */
enum srv_place_for { SRV_PLACE_FOR_MOVE = 1, SRV_PLACE_FOR_PACK };
/* cl's run of packets to the destination of hash h: true once it reached SRV_PLACE_PACKETS in a
 * row (the caller starts a new one by zeroing place_run). */
static inline bool srv_place_run_h(struct srv_client *cl, uint64_t h)
{
    if (h != cl->place_h) {
        cl->place_h = h;
        cl->place_run = 0;
    }
    return ++cl->place_run >= SRV_PLACE_PACKETS;
}
/* The same for key dst: true (and a new run) at each SRV_PLACE_PACKETS in a row. */
bool srv_place_run(struct srv_client *cl, const uint8_t dst[DERP_KEY_LEN]);
/* server_place_tick.c: cl's run to dst reached its length: on its shard's list for the decision
 * at the end of this tick (true: on it, or nothing to decide; false: the list is full). */
bool srv_place_due(struct srv_client *cl, const uint8_t dst[DERP_KEY_LEN], enum srv_place_for why);
/* The packet path's part (on_send_packet, after srv_route put cl's packet to dst, of hash h,
 * where `to` says): a packet that crossed the bus counts towards placement's run (on the owner a
 * guest's one only with packing); with packing, one that stayed here towards packing's. */
static inline void srv_place_count(struct srv_client *cl, const uint8_t dst[DERP_KEY_LEN],
                                   uint64_t h, enum srv_route_to to)
{
    bool pack = cl->ds->cfg->pack;
    enum srv_place_for why = to == SRV_ROUTED_OWNER || (to == SRV_ROUTED_GUEST && pack)
                                 ? SRV_PLACE_FOR_MOVE
                                 : SRV_PLACE_FOR_PACK;
    if ((why == SRV_PLACE_FOR_MOVE || pack) && srv_place_run_h(cl, h) &&
        srv_place_due(cl, dst, why))
        cl->place_run = 0;
}
/* Leaves the list (from srv_client_unsettle: it leaves the shard, or closes); the shard's end. */
void srv_place_tick_leave(struct srv_client *cl);
void srv_place_tick_fini(struct srv_shard *ds);
/* The decisions, at the end of the tick: placement's for a run whose packets crossed the bus,
 * packing's for one that stayed here (server_pack.c). */
void srv_place_decide(struct srv_client *cl, const uint8_t dst[DERP_KEY_LEN]);
void srv_pack_decide(struct srv_client *cl, const uint8_t dst[DERP_KEY_LEN]);
/* Where dst lives, as far as this shard knows. */
unsigned srv_place_lives_at(struct srv_shard *ds, const uint8_t dst[DERP_KEY_LEN]);
/* Move cl to shard `to`: at home, as a guest (the key's only connection, nothing queued); a
 * guest (packing on) only home, by asking its owner. 0 (on its way, or asked), -EALREADY (it
 * is there), -EBUSY (not movable now), -EXDEV (a guest to a third shard), -ENOMEM. */
int srv_place_move_to(struct srv_client *cl, unsigned to);
/* Owner shard: deliver f (routed, h its key's hash) to p's connection elsewhere (held while it
 * moves). */
void srv_place_deliver(struct srv_shard *ds, struct srv_peer *p, struct hd_frame *f, uint64_t h);
/* The guest of this shard for key (h: its hash), or NULL. */
struct srv_client *srv_place_guest(struct srv_shard *ds, const uint8_t key[DERP_KEY_LEN]);
struct srv_client *srv_place_guest_h(struct srv_shard *ds, const uint8_t key[DERP_KEY_LEN],
                                     uint64_t h);
/* A sender on guest cl's shard sends it f: right after the guest arrived, f waits until its
 * owner released what it held (a sender here must not overtake its own packets that went by
 * the owner while the guest travelled; a full wait drops f, SRV_PLACE_SETTLE_MS). Returns
 * srv_client_enqueue's return (0 while held or dropped). */
int srv_place_guest_enqueue(struct srv_client *cl, struct hd_frame *f);
/* A second connection registered for p while its first lives elsewhere: call that one home. */
void srv_place_recall(struct srv_shard *ds, struct srv_peer *p);
/* client_closed of a guest or placing connection (instead of the owner's unregister). */
void srv_place_closed(struct srv_client *cl);
/* Owner: forward an event for p's connection to its guest shard (arg 1 there). */
void srv_place_event(struct srv_shard *ds, struct srv_peer *p, srv_event_fn *fn,
                     struct hd_frame *f);

#endif /* SERVER_PLACE_H */
