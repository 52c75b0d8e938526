/* net_impl.h - the socket layer's private structures (net/ only). Everything here belongs to one
 * shard and is touched by its thread only. */
#ifndef NET_IMPL_H
#define NET_IMPL_H

#include <hd/hd_uring.h>
#include <hd/net_class.h>
#include <hd/net_codec.h>

/* ---- send queues: chunks of (frame, off, len) entries */
struct net_sendq_entry {
    struct hd_frame *frame;
    uint32_t off, len;
};
struct net_sendq_chunk {
    struct net_sendq_chunk *next;
    uint16_t head, tail; /* entries [head, tail) are live */
    struct net_sendq_entry e[NET_SENDQ_CHUNK_ENTRIES];
    uint32_t at[NET_SENDQ_CHUNK_ENTRIES]; /* a send class's entries: hd_now_ms when queued */
};
struct net_sendq {
    struct net_sendq_chunk *first, *last;
    uint32_t count; /* entries */
    uint64_t bytes; /* bytes in entries */
};

/* Control buffers, sized as literals (CMSG_SPACE is not an integer constant expression for
 * every compiler): one cmsghdr (16 bytes on LP64) plus the data rounded up to 8. */
#define NET_QUIET_CMSG_SPACE 32u /* NET_QUIET_CONTROL_MAX bytes of data */
#define NET_RECV_CMSG_SPACE  24u /* one record type byte */
_Static_assert(NET_QUIET_CMSG_SPACE >= CMSG_SPACE(NET_QUIET_CONTROL_MAX), "quiet cmsg fits");
_Static_assert(NET_RECV_CMSG_SPACE >= CMSG_SPACE(sizeof(uint8_t)), "record type cmsg fits");

/* One sendmsg in flight: its msghdr and iovecs must live until the CQE. A quiet sendmsg
 * (net_conn_quiet_sendmsg) carries its own control message and payload here too. */
struct net_send_ctx {
    struct msghdr msg;
    struct iovec iov[NET_IOV_MAX];
    uint32_t entries; /* entries of the wire queue covered by iov */
    uint64_t bytes;
    union {
        size_t align; /* a cmsghdr's alignment (struct cmsghdr has a flexible array) */
        uint8_t buf[NET_QUIET_CMSG_SPACE];
    } control;
    uint8_t payload[NET_QUIET_MSG_MAX];
};

/* Record-typed receive (codec->record): one recvmsg at a time. The kernel writes the record
 * type into control and msg_controllen / msg_flags back into msg at completion, so all of it
 * lives (in the connection) until the CQE. */
struct net_recv_msg {
    struct msghdr msg;
    struct iovec iov; /* without a buffer ring: the connection's recv frame */
    union {
        size_t align; /* a cmsghdr's alignment (struct cmsghdr has a flexible array) */
        uint8_t buf[NET_RECV_CMSG_SPACE];
    } control;
};

/* What holds an open connection away from its steady state (conn_life.c has the table). */
enum net_conn_hold {
    NET_HOLD_NONE,       /* steady: receiving, decoding, sending */
    NET_HOLD_QUIET,      /* a codec holds the socket still (net_conn_quiet_begin .. _end) */
    NET_HOLD_MOVE,       /* a move or export waits until no op is in flight (migrate.c) */
    NET_HOLD_QUIET_MOVE, /* a move asked for while quiet: it waits for the quiet state's end */
    NET_HOLD_CARRY,      /* raw bytes carried from before (a move, an import, a hand-over, a
                          * quiet read) wait for their replay, ahead of anything received */
};

/* What a connection holds only while away from its steady state (hold != NET_HOLD_NONE): from
 * the shard's pool, taken by net_conn_hold_set as the connection leaves NET_HOLD_NONE and given
 * back as it returns there, so a steady connection carries none of it. */
struct net_conn_move {
    struct hd_frame *pending_head, *pending_tail; /* raw bytes to replay before new ones */
    struct net_migration *migration;              /* a move's package (NET_HOLD_*MOVE) */
};

/* How deep codecs stack on a connection (net_conn_switch_codec): TLS and WebSocket above it. */
#define NET_CODECS_MAX 2u
_Static_assert(NET_CODECS_MAX >= 2 && NET_CODECS_MAX <= UINT8_MAX, "a stack, counted in a byte");

/* One level of a connection's codec stack. */
struct net_codec_level {
    const struct net_codec *codec; /* NULL: no codec at this level */
    void *state;
    /* Bytes from below this level not consumed yet: level 0's are raw bytes from the socket
     * (kept with a codec or not: a codec switched in, a hand-over, an import take them), a
     * higher level's are a copy of what the level below delivered (its codec decodes in place). */
    struct hd_frame *tail;
};

enum net_conn_flag {
    NET_F_RECV_PAUSED = 1u << 0,
    NET_F_SEND_PAUSED = 1u << 1, /* above the high watermark, source told to pause */
    NET_F_FLUSH_CLOSE = 1u << 2, /* close once the queues are empty */
    NET_F_SHUT_WR = 1u << 3,     /* shut the write side once the queues are empty */
    NET_F_WR_SHUT = 1u << 4,     /* write side is shut */
    NET_F_NOBUFS = 1u << 5,      /* recv waits for the buffer ring to refill */
    NET_F_FD_CLOSED = 1u << 6,
    NET_F_MIGRATING = 1u << 7,    /* hold MOVE or QUIET_MOVE (written by net_conn_hold_set) */
    NET_F_ENCODING = 1u << 8,     /* inside codec->encode (a flush is running) */
    NET_F_QUIET = 1u << 9,        /* hold QUIET or QUIET_MOVE (written by net_conn_hold_set) */
    NET_F_QUIET_WAIT = 1u << 10,  /* ... and waits for codec->quiesced */
    NET_F_QUIET_READ = 1u << 11,  /* recv_op is a net_conn_quiet_read */
    NET_F_ENCODE_DUE = 1u << 12,  /* the codec holds plaintext of its own: encode at the flush */
    NET_F_CODEC_REST = 1u << 13,  /* net_conn_switch_codec in on_data: the rest is codec input */
    NET_F_IN_DATA = 1u << 14,     /* inside on_data */
    NET_F_CARRY = 1u << 15,       /* hold CARRY (written by net_conn_hold_set) */
    NET_F_SEND_BACKED = 1u << 17, /* the last send went in part: the next covers backed_kib */
    NET_F_REOFFER = 1u << 18,     /* net_conn_reoffer: an offer of the kept bytes is deferred */
    NET_F_CODEC_CLOSE = 1u << 19, /* codec->close was asked: the next graceful close is its */
    NET_F_EOF_HELD = 1u << 20,    /* the peer's end came while bytes before it were held */
    NET_F_RECV_TYPED = 1u << 21,  /* the recv in flight is record-typed (codec->record) */
    NET_F_CLASS_WAIT = 1u << 22,  /* frames wait in send classes (conn_class.c) */
    NET_F_CLASS_DRAIN = 1u << 23, /* frames waited: on_drained is due once they are all sent on */
};

struct net_conn {
    struct hd_shard *shard;
    struct net_shard *ns;
    int fd;
    enum net_conn_state state;
    uint32_t flags;
    uint32_t depth; /* > 0 inside one of our completion handlers: freeing waits for its end */
    int close_reason;
    uint8_t closed_by;   /* enum net_conn_timer: which of our timers closed it (NONE: none) */
    uint16_t backed_kib; /* NET_F_SEND_BACKED: what the last send took, in KiB (capped) */
    /* Which level of the codec stack is speaking: set by net around each call into a codec's
     * hooks (and by net_conn_codec_enter), so what a codec queues goes to its own output queue
     * and what it takes comes from its own input. Outside any hook (the app, a timer) it is
     * level 0, the codec nearest the socket. */
    uint8_t codec_at;
    /* Levels of codecs[] in use (0: none), changed with codecs[] only. Level 0's codec may be
     * NULL with levels counted (its move_out or move_in failed: closed soon, what is queued is
     * never encoded): test the codec itself before calling its hooks. */
    uint8_t codecs_n;
    uint8_t hold; /* enum net_conn_hold: changed by net_conn_hold_set only */
    const struct net_conn_handler *h;
    void *app;
    /* The codec stack, level 0 nearest the socket (TLS), level 1 above it (WebSocket over TLS):
     * each level decodes what the one below delivers and encodes into the one below's input. */
    struct net_codec_level codecs[NET_CODECS_MAX];
    /* mid[i]: what level i+1 encoded, level i's plaintext (plain is the top level's input,
     * wire level 0's output). */
    struct net_sendq mid[NET_CODECS_MAX - 1];
    struct hd_op recv_op, send_op, ctl_op;
    struct hd_flush flush;
    struct hd_timer idle_timer, write_timer;
    struct hd_timer nobufs_timer; /* NET_F_NOBUFS: the recv's retry (the idle timer is off) */
    uint32_t idle_timeout_ms, write_timeout_ms;
    /* An absolute deadline (net_conn_set_deadline): bytes do not restart it. deadline_at_ms is
     * the shard clock's time of it (0: none), so a move can re-arm what is left. */
    struct hd_timer deadline_timer;
    uint64_t deadline_at_ms;
    uint32_t send_high, send_low, send_max;
    uint32_t send_high_frames, send_low_frames; /* 0: no entry watermark */
    uint32_t rx_tail_max;          /* bound of each tail below (net_conn_options.rx_tail_max) */
    struct hd_frame *rx_tail;      /* bytes the app left unconsumed (data[0..len)) */
    struct hd_frame *recv_frame;   /* fallback recv target */
    uint16_t held_head, held_tail; /* ring buffers received while paused (NET_BID_NONE: none) */
    struct net_sendq plain;        /* app frames awaiting the top codec (only with a codec) */
    struct net_sendq wire;         /* bytes for the socket */
    struct net_send_ctx *send_ctx; /* non-NULL while a sendmsg is in flight */
    struct net_sendq classq[NET_SEND_CLASSES_MAX]; /* frames waiting for room (conn_class.c) */
    struct net_addr peer;
    struct net_conn_stats stats;
    struct net_recv_msg *rmsg;              /* record-typed receive only: from its first read */
    struct net_conn_move *move;             /* exactly while hold != NET_HOLD_NONE */
    struct net_conn *all_next, **all_pprev; /* the shard's list of live connections */
    struct hd_handle handle;                /* net_conn_handle: closed just before on_close */
};

/* Enter a codec level for a call into it; returns the level to restore afterwards. Level 0 is
 * also where the app and timers speak from, with a codec or without. */
static inline uint8_t net_conn_codec_at(struct net_conn *c, unsigned level)
{
    uint8_t prev = c->codec_at;
    HD_ASSERT(level == 0 || level < c->codecs_n);
    c->codec_at = (uint8_t)level;
    return prev;
}

/* The queue a level's codec encodes into (the one below takes it as its plaintext). */
static inline struct net_sendq *net_conn_level_out(struct net_conn *c, unsigned level)
{
    HD_ASSERT(level < NET_CODECS_MAX);
    return level == 0 ? &c->wire : &c->mid[level - 1];
}

/* The plaintext a level's codec encodes: the app's queue for the top one. */
static inline struct net_sendq *net_conn_level_in(struct net_conn *c, unsigned level)
{
    HD_ASSERT(level < NET_CODECS_MAX);
    return level + 1u >= c->codecs_n ? &c->plain : &c->mid[level];
}

struct net_shard {
    struct hd_shard *shard;
    struct hd_slab *conns, *chunks, *send_ctxs;
    struct hd_slab *rmsgs; /* kTLS record-typed recvmsg state, one a connection that reads so */
    struct hd_slab *moves; /* struct net_conn_move, one a connection away from steady state */
    struct net_sendq_chunk *chunk_spare; /* one emptied chunk kept aside (sendq.c), or NULL */
    struct io_uring_buf_ring *br;
    uint8_t *bufs;
    bool buf_ring;
    uint32_t rx_tail_max; /* the shard's default for its connections */
    uint32_t conns_count;
    struct net_conn *all; /* every live connection (for net_shard_close_all) */
    struct net_shard_counters counters;
    uint32_t br_pending; /* buffers returned since the last tail publish */
    /* Buffers a paused connection holds, chained per connection in arrival order. */
    uint16_t held_next[NET_BUF_RING_ENTRIES];
    uint32_t held_len[NET_BUF_RING_ENTRIES];
    uint8_t held_type[NET_BUF_RING_ENTRIES]; /* record type (0: untyped bytes) */
    struct hd_flush br_flush;
    bool udp_gro;        /* UDP sockets receive with GRO where they can (net_shard_options) */
    uint64_t udp_groups; /* bit i: buffer group NET_UDP_GRO_GROUP_FIRST + i is a UDP socket's */
};

#define NET_BID_NONE 0xffffu
_Static_assert(NET_BUF_RING_ENTRIES < NET_BID_NONE, "buffer ids leave room for the sentinel");

struct net_shard *net_shard_of(struct hd_shard *s);

/* sendq.c */
int net_sendq_push(struct net_shard *ns, struct net_sendq *q, struct hd_frame *f, uint32_t off,
                   uint32_t len);
struct net_sendq_entry *net_sendq_at(struct net_sendq *q, uint32_t index);
/* Push, then move the new entry to index (0..count before it): the later entries shift back. */
int net_sendq_insert(struct net_shard *ns, struct net_sendq *q, uint32_t index, struct hd_frame *f,
                     uint32_t off, uint32_t len);
void net_sendq_pop(struct net_shard *ns, struct hd_shard *s, struct net_sendq *q, bool unref);
/* Remove n bytes from the front (after a send), unreferencing finished frames. */
void net_sendq_consume(struct net_shard *ns, struct hd_shard *s, struct net_sendq *q, uint64_t n);
void net_sendq_clear(struct net_shard *ns, struct hd_shard *s, struct net_sendq *q);

/* bufring.c */
int net_bufring_init(struct net_shard *ns);
void net_bufring_fini(struct net_shard *ns);
uint8_t *net_bufring_addr(struct net_shard *ns, uint16_t bid);
void net_bufring_recycle(struct net_shard *ns, uint16_t bid);

/* migrate.c */
void net_migrate_step(struct net_conn *c);
/* The quiet point of a move, for an export to another process (export.c): once reached,
 * net_export_step(c, save, done, arg) runs instead of the move. 0 or -EBUSY/-ENOMEM. */
int net_migrate_begin(struct net_conn *c, net_codec_save_fn *save, net_export_fn *done, void *arg);

/* export.c: a connection as bytes. The fixed part of the layout: magic, version and flags,
 * eight settings, the deadline left, three counters, the peer (its length and a whole
 * sockaddr_storage), the lengths of the codec state, the two tails and the received bytes. */
#define NET_EXPORT_HEADER_SIZE                                                                     \
    (4u + 4u + 32u + 8u + 24u + 4u + sizeof(struct sockaddr_storage) + 16u)
struct net_export_queue {
    uint32_t count;
    size_t at; /* offset of its first entry (u32 length + bytes each) in the blob */
};
/* A parsed blob: pointers into it, every length checked. */
struct net_export_view {
    const uint8_t *blob;
    struct net_conn_options opt;
    bool send_paused;
    uint64_t deadline_left_ms; /* 0: none */
    struct net_conn_stats stats;
    struct net_addr peer;
    const uint8_t *codec, *rx_tail, *raw_tail, *received;
    size_t codec_len, rx_tail_len, raw_tail_len, received_len;
    struct net_export_queue plain, wire;
};
/* 0, or -EPROTO (truncated, trailing bytes, a length over its bound, another version). Pure. */
int net_export_parse(const uint8_t *blob, size_t len, struct net_export_view *v);
void net_export_step(struct net_conn *c, net_codec_save_fn *save, net_export_fn *done, void *arg);

/* conn_codec.c */
int net_conn_input(struct net_conn *c, uint8_t *data, size_t len);
int net_conn_tails_replay(struct net_conn *c);
void net_conn_tail_drop(struct net_conn *c, struct hd_frame **tailp);

/* conn_life.c: every change of c->state and c->hold, checked against the tables there. Leaving
 * NET_HOLD_NONE takes c->move from the shard's pool (-ENOMEM: nothing changed), returning there
 * gives it back (its pending frames and package gone first); other changes return 0. */
void net_conn_state_set(struct net_conn *c, enum net_conn_state to);
int net_conn_hold_set(struct net_conn *c, enum net_conn_hold to);

/* The first raw frame carried for replay, or NULL. */
static inline struct hd_frame *net_conn_pending(const struct net_conn *c)
{
    return c->move ? c->move->pending_head : NULL;
}
/* The package of a move that waits, or NULL. */
static inline struct net_migration *net_conn_migration(const struct net_conn *c)
{
    return c->move ? c->move->migration : NULL;
}

/* conn.c / conn_send.c */
struct net_conn *net_conn_new(struct hd_shard *s, int fd, const struct net_conn_handler *h,
                              void *app, const struct net_conn_options *opt);
void net_conn_recv_arm(struct net_conn *c);
void net_conn_release(struct net_conn *c, bool notify);
int net_conn_held_take(struct net_conn *c, struct hd_frame ***out, uint32_t *count);
/* Carry f (the reference moves) for replay ahead of new bytes: 0, or -ENOMEM (no carrying
 * state: f is still the caller's; only the first frame of a connection in NET_HOLD_NONE can
 * fail). */
int net_conn_pending_add(struct net_conn *c, struct hd_frame *f);
int net_conn_replay(struct net_conn *c);
void net_conn_flush_now(struct net_conn *c);
void net_conn_finish_close(struct net_conn *c);
void net_conn_maybe_finish(struct net_conn *c);
void net_conn_send_done(struct hd_op *op, int32_t res, uint32_t flags);
bool net_conn_queues_empty(const struct net_conn *c);
void net_conn_update_pressure(struct net_conn *c);
/* The levels above level 0 encode, top down, each its plaintext into the input of the one below
 * (a flush; a graceful close before level 0 ends its protocol). Returns 0 or -errno (the caller
 * closes). */
int net_conn_upper_encode(struct net_conn *c);

/* conn_class.c: send classes. At a flush (before the send): move waiting frames into the send
 * queue while it is under its high watermark. At release: drop what waits (on_drop with
 * NET_SEND_DROP_CLOSED when notify). */
int net_conn_class_push(struct net_conn *c, struct hd_frame *f, uint32_t off, uint32_t len,
                        unsigned k);
void net_conn_class_feed(struct net_conn *c, bool all);
void net_conn_class_clear(struct net_conn *c, bool notify);

/* udp_gro.c: UDP GRO on receive (net_limits.h). A UDP socket's own buffer ring. */
struct net_udp_ring {
    struct io_uring_buf_ring *br;
    uint8_t *bufs;
    uint16_t bgid;
    uint16_t pending;      /* buffers returned since the last tail publish */
    struct hd_flush flush; /* publishes them at the tick's end, as the shard's ring does */
    struct hd_shard *shard;
};
/* Registers a ring of NET_UDP_GRO_BUFS buffers in a free group of the shard: 0, -ENOSPC (every
 * group taken), -ENOMEM or the kernel's -errno (nothing kept). */
int net_udp_ring_init(struct net_shard *ns, struct net_udp_ring *r);
/* Unregisters it (the kernel returned every op that used the group) and frees it. */
void net_udp_ring_fini(struct net_shard *ns, struct net_udp_ring *r);
uint8_t *net_udp_ring_addr(const struct net_udp_ring *r, uint16_t bid);
/* Gives buffer bid back to the kernel at the tick's end (so one tick takes at most
 * NET_UDP_GRO_BUFS buffers). */
void net_udp_ring_recycle(struct net_udp_ring *r, uint16_t bid);
/* The segment size a UDP_GRO cmsg in control[0..len) carries: 0 when there is none (a datagram
 * the kernel did not coalesce) or the block is malformed. Walks the block with every length
 * checked; pure. */
size_t net_udp_gro_size(const void *control, size_t len);
typedef void net_udp_segment_fn(const uint8_t *seg, size_t len, void *arg);
/* Cuts a received buffer of len bytes into the datagrams it holds: seg bytes each, the last one
 * 1..seg; seg 0 or >= len: one datagram, the buffer whole (an empty datagram too). *stop is read
 * before each segment after the first (the app closed the socket from fn). Returns how many
 * segments fn got. Pure but for fn. */
unsigned net_udp_gro_split(const uint8_t *data, size_t len, size_t seg, net_udp_segment_fn *fn,
                           void *arg, const bool *stop);
/* UDP_GRO on (or off) on fd: 0 or -errno (a kernel before 5.0, a socket that is not UDP). */
int net_udp_gro_set(int fd, bool on);

/* resolve.c: from net_shard_fini (the shard's lookups in flight are orphaned). */
void net_resolve_shard_fini(struct hd_shard *s);

#endif /* NET_IMPL_H */
