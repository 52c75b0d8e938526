/* net_class.h - a connection's send classes (net/conn_class.c): bounded queues of frames
 * waiting for room in the send queue, each with its drop policy, for an app that must drop
 * under backpressure without a queue of its own. The handler names them (struct
 * net_conn_handler.send_classes). Threading: the connection's shard. */
#ifndef NET_CLASS_H
#define NET_CLASS_H

#include <hd/net.h>

/* Send classes: bounded queues of frames that wait for room in the send queue, each with its
 * own drop policy, so an app that must drop under backpressure keeps no queue of its own.
 * While the send queue is under its high watermark (on_send_pressure not paused) and no class
 * holds anything, net_conn_send_class is net_conn_send. Otherwise the frame waits in its class
 * (net's send queue does not hold it yet: send_max_bytes and the watermarks do not count it,
 * the class's depth bounds it); a full class drops its oldest frame to make room, up to tries
 * times, and else the new one. At each flush (the tick's end, and each send's completion) net
 * moves waiting frames into the send queue, one from each class in turn, until the send queue
 * reaches its high watermark. Urgent messages (net_conn_send_urgent) still go ahead of the
 * frames queued but not yet in the kernel's hands. Before a move or an export (and by
 * net_conn_class_drain) everything waiting goes into the send queue, past the watermark; while
 * the connection moves, a frame goes into the send queue as net_conn_send (it travels). */
enum net_send_drop {
    NET_SEND_DROP_OLDEST, /* the class was full: its oldest frame made room for a new one */
    NET_SEND_DROP_NEW,    /* the class was full after its tries (or no pool entry): the new one */
    NET_SEND_DROP_ERROR,  /* the send queue had no entry for it when its turn came */
    NET_SEND_DROP_CLOSED, /* the connection closed with it waiting (just before on_close) */
};
struct net_send_class {
    uint16_t depth; /* frames that may wait (>= 1) */
    uint8_t tries;  /* a full class drops its oldest up to this many times, then the new frame */
};
struct net_send_classes {
    unsigned count; /* 1..NET_SEND_CLASSES_MAX */
    struct net_send_class cls[NET_SEND_CLASSES_MAX];
    /* A frame of class k was dropped (f valid during the call; net releases its reference
     * after), after waited_ms in its class (0 for NET_SEND_DROP_NEW). Optional. */
    void (*on_drop)(struct net_conn *c, struct hd_frame *f, uint32_t off, uint32_t len, unsigned k,
                    enum net_send_drop why, uint32_t waited_ms);
    /* A waiting frame went into the send queue after waited_ms in its class. Optional. */
    void (*on_taken)(struct net_conn *c, struct hd_frame *f, uint32_t off, uint32_t len, unsigned k,
                     uint32_t waited_ms);
    /* The classes emptied into the send queue and the send queue is under its high watermark
     * again: what waited for this connection may go on. Once per time frames waited. Optional. */
    void (*on_drained)(struct net_conn *c);
};
/* Queue a frame in class k of the handler's send_classes (a reference taken as net_conn_send
 * does, except when it is dropped). Returns 0 (in the send queue at once), 1 (waits in its
 * class behind a backlog), -ENOSPC (dropped by the class's policy: on_drop has run with
 * NET_SEND_DROP_NEW), -ENOBUFS (as net_conn_send: over send_max_bytes, no pool entry; no
 * on_drop), -EPIPE (closing; no on_drop). */
int net_conn_send_class(struct net_conn *c, struct hd_frame *f, uint32_t off, uint32_t len,
                        unsigned k);
/* Frames waiting in class k (k = NET_SEND_CLASSES_MAX: in all of them). */
unsigned net_conn_class_count(const struct net_conn *c, unsigned k);
/* Whether the send queue is over its high watermark (paused, as on_send_pressure said). */
bool net_conn_send_paused(const struct net_conn *c);
/* Move every waiting frame into the send queue now, past the watermark (on_taken each). */
void net_conn_class_drain(struct net_conn *c);

#endif /* NET_CLASS_H */
