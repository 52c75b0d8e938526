/* hd_bus.h - the cross-shard bus (bus.c): 32-byte messages from one shard to another, or to
 * itself. Included by <hd/hd.h>. Sender's shard thread; the handler runs on the destination. */
#ifndef HD_BUS_H
#define HD_BUS_H

#include <stdint.h>

struct hd_shard;

struct hd_msg;
/* Runs on the destination shard. The message is borrowed for the call. */
typedef void hd_msg_fn(struct hd_shard *dst, const struct hd_msg *m);
struct hd_msg {
    hd_msg_fn *fn;
    void *ptr;
    uint64_t u64[2];
};
_Static_assert(sizeof(struct hd_msg) == 32, "two messages per cache line");

/* Queue m for shard dst; published at the end of this tick (batched, at most one wake-up per
 * sleeping destination). When dst's ring is full the message waits in a bounded per-destination
 * overflow; when that is full too: -EAGAIN, nothing queued — the caller applies backpressure
 * (stop reading the source) or drops by its policy and counts. dst may be this shard: the
 * message waits in the shard's own queue (HD_BUS_SELF_SIZE) and runs at its next bus drain,
 * never inside this call, so a sender in a connection's callback is not re-entered; same
 * -EAGAIN when that queue is full. Messages from one shard to one shard run in send order.
 * Returns 0, -EAGAIN, -EINVAL (dst out of range). Ownership of what m points to moves only on
 * success. m->fn must be set. */
int hd_bus_send(struct hd_shard *s, unsigned dst, const struct hd_msg *m);
/* hd_bus_send for an app's control messages: the few per connection that change its state on
 * another shard (it moved, it left), which must not be lost to the app's own bulk (packets). They
 * may take the HD_BUS_CONTROL_ROOM slots that hd_bus_send leaves free, and keep their place in
 * the one order of messages from this shard to dst. -EAGAIN only when that room is used up too
 * (counted in bus_full like any refusal). Never for bulk: its room is what keeps it for control. */
int hd_bus_send_control(struct hd_shard *s, unsigned dst, const struct hd_msg *m);
/* Messages this shard could still queue for dst right now with hd_bus_send (ring space +
 * overflow space, or its own queue's space when dst is this shard, less the slots bulk leaves
 * free: HD_BUS_BULK_RESERVE); 0 when dst is out of range. */
unsigned hd_bus_room(struct hd_shard *s, unsigned dst);

#endif /* HD_BUS_H */
