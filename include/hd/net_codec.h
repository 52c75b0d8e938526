/* net_codec.h - the codec writer's side of net/: what a layer between the socket and the app
 * (userspace TLS records, WebSocket framing, a protocol's own framing) implements and calls.
 * Apps use <hd/net.h> and a codec's own API (tls.h, net_ws.h); only codecs include this.
 * Threading and errors as in net.h: the connection's shard, 0 or -errno. */
#ifndef NET_CODEC_H
#define NET_CODEC_H

#include <hd/net.h>

/* ---------------------------------------------------------------- codecs */

/* A codec sits between the socket and the app (userspace TLS records, WebSocket framing).
 * decode gets raw bytes and calls net_conn_deliver with what it produced; encode turns the
 * queued plaintext into wire bytes just before a send. */
struct net_codec {
    const char *name;
    /* Raw bytes in (in[0..len) may be modified in place). Return bytes consumed or -errno. */
    ssize_t (*decode)(struct net_conn *c, void *state, uint8_t *in, size_t len);
    /* Build wire frames from queued plaintext frames: take frames with net_conn_plain_take and
     * queue their encoding with net_conn_wire_queue. Return 0 or -errno (closes). */
    int (*encode)(struct net_conn *c, void *state);
    /* The connection is closing: release state (no further calls). */
    void (*release)(struct net_conn *c, void *state);
    /* Optional, for codecs whose state lives in a shard pool: before a move (on the old shard)
     * turn state into heap memory (freeing the pooled state), and on the new shard turn that
     * back into pooled state (freeing the heap memory). NULL result: the move fails and the
     * connection closes (move_out's NULL leaves its state as it was: release frees it). Without
     * them the state pointer itself moves. */
    void *(*move_out)(struct net_conn *c, void *state);
    void *(*move_in)(struct net_conn *c, void *moved);
    /* Optional, with move_out: free a moved state that never arrives (the destination shard could
     * not take the connection); s is that shard. Without it such a state leaks. */
    void (*move_drop)(struct hd_shard *s, void *moved);
    /* Optional, for a socket whose kernel opens records itself (kTLS RX): its presence makes the
     * connection receive with recvmsg and a control buffer, one read in flight at a time, so
     * every read's record type (cmsg SOL_TLS / TLS_GET_RECORD_TYPE) is known and nothing is read
     * past a record the codec has not seen yet. Application data (NET_RECORD_DATA) still goes to
     * decode; a read of any other type (one record: an alert, post-handshake messages) comes here
     * (data[0..len) valid during the call). Returns 0 or -errno (closes). */
    int (*record)(struct net_conn *c, void *state, uint8_t type, uint8_t *data, size_t len);
    /* Optional: the connection became quiet after net_conn_quiet_begin (see there). */
    void (*quiesced)(struct net_conn *c, void *state);
    /* Optional: the app asked for a graceful close (net_conn_close with flush) of an open
     * connection: end the protocol cleanly (TLS: close_notify after the queued bytes) and
     * close with net_conn_close(c, reason, ...) once done (that call does not come here again).
     * Return 0 (the codec closes), or -errno to let net_conn_close go on as without it. */
    int (*close)(struct net_conn *c, void *state, int reason);
};

/* The record type of application data (RFC 8446 §5.1 ContentType): reads of this type are
 * decoded as bytes; 0 means an untyped read (no record-typed receive). */
#define NET_RECORD_DATA 23u

/* Codecs: install (decode/encode from now on) or remove. Bytes already buffered and not consumed
 * by the app stay where they are; raw bytes that arrive later go through the codec. */
void net_conn_set_codec(struct net_conn *c, const struct net_codec *codec, void *state);
/* A protocol switch inside the byte stream (an HTTP 101 followed by WebSocket frames): from
 * inside on_data, install codec; the bytes after what this on_data call consumes, and every
 * byte received later, are its input (decoded once on_data returns). On a connection with a
 * codec already (TLS) the new one goes above it: it decodes what the first one delivers, and
 * what it encodes is the first one's plaintext; what was queued before the switch is sent as
 * it is (below the new codec). At most two codecs; the upper one must do without move, record
 * and quiesced hooks (its state moves with a migrating connection as it is), and its release
 * may get c NULL (a moved connection the destination had no room for: free on the current
 * shard). Returns 0, -EBUSY
 * (two codecs already), -EINVAL (upper codec with move or record hooks). */
int net_conn_switch_codec(struct net_conn *c, const struct net_codec *codec, void *state);
/* The codec installed above the first one by net_conn_switch_codec (NULL: none). */
const struct net_codec *net_conn_upper_codec(const struct net_conn *c, void **state);
/* A codec's own public call (one the app makes, not one of its hooks) that queues wire bytes or
 * takes plaintext brackets that work with these, so that on a connection with two codecs its
 * output goes below it and not past the other one (net sets the level itself around every
 * hook, and outside them it is the lower codec's). enter returns what leave restores; a codec
 * not installed on c leaves the level as it is. */
unsigned net_conn_codec_enter(struct net_conn *c, const struct net_codec *codec);
void net_conn_codec_leave(struct net_conn *c, unsigned saved);
/* The installed codec (NULL: none) and its state. */
const struct net_codec *net_conn_codec(const struct net_conn *c, void **state);
/* For codecs: hand decoded plaintext to the app (copied into the app's reassembly if the app
 * leaves a tail). Returns 0 or -errno (the app asked to close). */
int net_conn_deliver(struct net_conn *c, const uint8_t *data, size_t len);
/* For codecs: the next unsent plaintext entry (frame reference moves to the codec), or NULL. */
struct hd_frame *net_conn_plain_take(struct net_conn *c, uint32_t *off, uint32_t *len);
/* For codecs that change nothing on the way out (yet): every unsent plaintext entry goes to the
 * wire as it is. Returns 0 or net_conn_wire_queue's -errno. */
int net_conn_plain_pass(struct net_conn *c);
/* For codecs that hold plaintext outside the connection's queue (taken but not yet sealed, or
 * queued while handshaking): run encode at this tick's flush even if the queue is empty; until
 * then the connection does not count as drained (a flush-close waits for it). */
void net_conn_encode_request(struct net_conn *c);
/* For codecs: queue wire bytes (reference moves to the connection); they go out with this
 * tick's flush, also when queued from decode (handshake replies, alerts). */
int net_conn_wire_queue(struct net_conn *c, struct hd_frame *f, uint32_t off, uint32_t len);

/* ---------------------------------------------------------------- quiet points */

/* For layers that change how the kernel reads or writes the socket (kTLS keys): a point where
 * nothing of the connection is in the kernel's hands. */

/* The largest payload and control data of a net_conn_quiet_sendmsg (a KeyUpdate message is 5
 * bytes, an alert 2; a TLS record type 1). */
#define NET_QUIET_MSG_MAX     64u
#define NET_QUIET_CONTROL_MAX 8u

/* Stop receiving and wait until no recv, send or control op is in flight and the wire queue is
 * empty, then run codec->quiesced (from a completion or the end of the tick, never inside this
 * call). Bytes that still arrive are kept unread in arrival order (net_conn_kept_*); what the
 * app queues stays in the plain queue unless the codec's encode takes it. While quiet, the
 * codec may read more bytes (net_conn_quiet_read) or send one message with ancillary data
 * (net_conn_quiet_sendmsg): quiesced runs again once that completed. It may also ask for another
 * round (net_conn_quiet_begin again, also allowed inside quiesced), and ends the quiet state
 * with net_conn_quiet_end. Returns 0, -EINVAL (the codec has no quiesced), -EBUSY (not open,
 * or moving), -ENOMEM (no state for the quiet point: the shard's pool could not grow). */
int net_conn_quiet_begin(struct net_conn *c);
/* While quiet: read at most len more raw bytes (one recv) onto the kept bytes. A peer that
 * closes meanwhile closes the connection (-ECONNRESET). Returns 0, -EBUSY (not quiet, or a read
 * is in flight), -ENOBUFS (no frame of len bytes). */
int net_conn_quiet_read(struct net_conn *c, size_t len);
/* While quiet: one sendmsg of data[0..len) (copied) with one control message (level, type,
 * cdata[0..clen), copied) in front of whatever the app queues later; a short or failed send
 * closes the connection. Returns 0, -EBUSY (not quiet, or a send in flight), -EMSGSIZE (len 0
 * or over NET_QUIET_MSG_MAX, clen over NET_QUIET_CONTROL_MAX), -ENOMEM (send contexts). */
int net_conn_quiet_sendmsg(struct net_conn *c, int level, int type, const void *cdata, size_t clen,
                           const void *data, size_t len);
/* Leave the quiet state: the kept bytes go through the (possibly new) codec, receiving resumes
 * (record-typed if the codec has a record hook) and queued sends are flushed. */
void net_conn_quiet_end(struct net_conn *c);
/* Raw bytes received but not yet taken by the codec (its tail, then bytes kept while paused or
 * quiet, in arrival order): how many, and a copy of len of them from offset off (returns the
 * bytes copied, fewer at the end). */
size_t net_conn_kept_bytes(const struct net_conn *c);
size_t net_conn_kept_peek(const struct net_conn *c, size_t off, void *buf, size_t len);
/* The other end of a hand-over of c's socket (another process, SCM_RIGHTS): the raw bytes
 * the earlier owner had received and its codec not consumed (what net_conn_kept_peek showed
 * there, e.g. a partial TLS record) go in front of everything read from now on: decoded at
 * once through the codec installed (or, while paused or quiet, when that ends). Call on the
 * connection just adopted from the fd, after installing its codec, from the callback that
 * adopted it (before its first recv completes). Copied. Returns 0, -EBUSY (not open, or
 * moving), -ENOBUFS (no frames: nothing was added). */
int net_conn_kept_restore(struct net_conn *c, const void *data, size_t len);

#endif /* NET_CODEC_H */
