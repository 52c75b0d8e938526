/* server_place.h - placement and packing (server_place.c, server_pack.c): where a client's
 * connection lives. Included by server.h after the types and events it uses. */
#ifndef SERVER_PLACE_H
#define SERVER_PLACE_H

/* server_place.c: placement (docs/ARCHITECTURE.md "Placement policy") */
/* cl (on its owner shard, or a guest) sent a packet to dst over the bus, to dst's owner. */
void srv_place_note(struct srv_client *cl, const uint8_t dst[DERP_KEY_LEN]);
/* cl's run of packets to dst: true (a new run) at each SRV_PLACE_PACKETS in a row; where dst
 * lives, as far as this shard knows. */
bool srv_place_run(struct srv_client *cl, const uint8_t dst[DERP_KEY_LEN]);
unsigned srv_place_lives_at(struct srv_shard *ds, const uint8_t dst[DERP_KEY_LEN]);
/* Move cl to shard `to`: at home, as a guest (the key's only connection, nothing queued); a
 * guest (packing on) only home, by asking its owner. 0 (on its way, or asked), -EALREADY (it
 * is there), -EBUSY (not movable now), -EXDEV (a guest to a third shard), -ENOMEM. */
int srv_place_move_to(struct srv_client *cl, unsigned to);
void srv_pack_note(struct srv_client *cl, const uint8_t dst[DERP_KEY_LEN]); /* server_pack.c */
/* Owner shard: deliver f (routed, h its key's hash) to p's connection elsewhere (held while it
 * moves). */
void srv_place_deliver(struct srv_shard *ds, struct srv_peer *p, struct hd_frame *f, uint64_t h);
/* The guest of this shard for key (h: its hash), or NULL. */
struct srv_client *srv_place_guest(struct srv_shard *ds, const uint8_t key[DERP_KEY_LEN]);
struct srv_client *srv_place_guest_h(struct srv_shard *ds, const uint8_t key[DERP_KEY_LEN],
                                     uint64_t h);
/* A sender on guest cl's shard sends it f: right after the guest arrived, f waits until its
 * owner released what it held (a sender here must not overtake its own packets that went by
 * the owner while the guest travelled). srv_client_enqueue's return (0 while held). */
int srv_place_guest_enqueue(struct srv_client *cl, struct hd_frame *f);
/* A second connection registered for p while its first lives elsewhere: call that one home. */
void srv_place_recall(struct srv_shard *ds, struct srv_peer *p);
/* client_closed of a guest or placing connection (instead of the owner's unregister). */
void srv_place_closed(struct srv_client *cl);
/* Owner: forward an event for p's connection to its guest shard (arg 1 there). */
void srv_place_event(struct srv_shard *ds, struct srv_peer *p, srv_event_fn *fn,
                     struct hd_frame *f);

#endif /* SERVER_PLACE_H */
