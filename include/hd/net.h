/* net.h - the socket layer's public API: listeners, connections (plain TCP now; TLS installs
 * itself as a codec), UDP sockets. Apps use a connection without knowing whether its bytes are
 * plain, kTLS or userspace TLS: they get plaintext bytes in on_data and queue frames to send.
 * Writing a codec (a layer between the socket and the app): <hd/net_codec.h>.
 *
 * Threading: everything runs on the shard that owns the object. Errors: 0 or -errno. */
#ifndef NET_H
#define NET_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

#include <hd/hd.h>
#include <hd/http_limits.h>
#include <hd/net_limits.h>

struct net_conn;
struct net_listener;
struct net_codec; /* <hd/net_codec.h>: for codec writers */
struct net_send_classes;

/* ---------------------------------------------------------------- addresses */

struct net_addr {
    union {
        struct sockaddr sa;
        struct sockaddr_in in4;
        struct sockaddr_in6 in6;
        struct sockaddr_un un; /* net_addr_unix: for net_conn_connect */
        struct sockaddr_storage ss;
    };
    socklen_t len;
};
/* "host:port", "[v6]:port", ":port" (all IPv6 and IPv4 addresses), "port". Numeric hosts only
 * (name lookups do not belong on a shard). Returns 0 or -EINVAL. */
int net_addr_parse(const char *text, struct net_addr *out);
/* "1.2.3.4:5" / "[::1]:5" into buf; returns buf. */
const char *net_addr_format(const struct net_addr *a, char *buf, size_t size);
uint16_t net_addr_port(const struct net_addr *a);
/* A unix stream socket path (AF_UNIX). Returns 0 or -ENAMETOOLONG / -EINVAL (empty). */
int net_addr_unix(const char *path, struct net_addr *out);

/* An http or https URL in parts (url.c). */
struct net_url {
    bool tls;                                      /* https */
    uint16_t port;                                 /* as written, else 80 / 443 */
    char authority[NET_URL_AUTHORITY_LEN_MAX + 1]; /* host[:port] as written: the Host header */
    char host[NET_URL_AUTHORITY_LEN_MAX + 1];      /* without brackets and port */
    char path[NET_HTTP_TARGET_LEN_MAX + 1];        /* origin-form; "" when the URL has none */
};
/* http[s]://host[:port][/path][?query]: host a name, IPv4 or [IPv6]. Returns 0 or -EINVAL
 * (another scheme, no host, bad port, a fragment, too long). Pure, any thread. */
int net_url_parse(const char *url, struct net_url *out);
/* The URL's address: a numeric host at once; a name through getaddrinfo unless numeric_only
 * (it blocks: start-up or a thread of its own, never a shard). Returns 0, -EINVAL (not numeric
 * and numeric_only) or -ENOENT (the name did not resolve). */
int net_url_resolve(const struct net_url *u, bool numeric_only, struct net_addr *out);

/* Name lookup for a shard: getaddrinfo(host, port, TCP) on a thread of its own (it blocks for
 * as long as DNS takes), the answer handed back with hd_runtime_post, so done runs on shard s:
 * rc 0 with 1..NET_RESOLVE_ADDRS_MAX addresses in getaddrinfo's order, or -ENOENT (no such
 * name, or no address), -EAGAIN (a temporary DNS failure). A numeric host is answered the same
 * way, without DNS. One thread per lookup: meant for connection set-up (a mesh link redialing),
 * not per packet. */
struct net_resolve;
typedef void net_resolve_fn(struct hd_shard *s, int rc, const struct net_addr *addrs,
                            unsigned count, void *arg);
/* Returns 0 (*out: the lookup, until done runs or it is cancelled), -ENAMETOOLONG, -ENOMEM or
 * pthread_create's error (done never runs then). Shard s's thread. */
int net_resolve_start(struct hd_shard *s, const char *host, uint16_t port, net_resolve_fn *done,
                      void *arg, struct net_resolve **out);
/* done will not run; the lookup's memory goes when its thread is done. Shard s's thread, before
 * done ran. */
void net_resolve_cancel(struct net_resolve *r);
/* getaddrinfo's answer ai (a list) as net_addrs: the first cap addresses in its order (one
 * larger than a net_addr is skipped) into out. Returns how many (0..cap). For a caller that runs
 * getaddrinfo itself, on a thread of its own; pure, any thread. */
struct addrinfo;
unsigned net_addrs_from_addrinfo(const struct addrinfo *ai, struct net_addr *out, unsigned cap);

/* ---------------------------------------------------------------- connections */

enum net_conn_state {
    NET_CONN_CONNECTING, /* outgoing connect in progress */
    NET_CONN_OPEN,       /* bytes flow both ways */
    NET_CONN_CLOSING,    /* close requested: waiting for the kernel to return every op */
    NET_CONN_CLOSED,     /* on_close has run; the struct goes back to its pool */
};

/* Why a connection closed (the errno-style reason passed to on_close). */
#define NET_CLOSE_LOCAL 0 /* the app called net_conn_close with reason 0 */
/* Which of the connection's own timers closed it, if one did (on_close's reason is -ETIMEDOUT
 * then). The kernel's -ETIMEDOUT (TCP_USER_TIMEOUT, a failed TCP keepalive) comes with NONE. */
enum net_conn_timer {
    NET_CONN_TIMER_NONE = 0,
    NET_CONN_TIMER_IDLE,     /* idle_timeout_ms: nothing received for that long */
    NET_CONN_TIMER_WRITE,    /* write_timeout_ms: a send made no progress for that long */
    NET_CONN_TIMER_DEADLINE, /* net_conn_set_deadline */
};

/* What an app (or a codec user, or another layer) hears from a connection. Every callback runs
 * on the connection's shard. */
struct net_conn_handler {
    /* Plaintext bytes: data[0..len) is every byte not yet consumed. Return how many were
     * consumed (0..len; the rest is kept and offered again with more bytes), or -errno to close
     * the connection with that reason. The bytes are only valid during the call. */
    ssize_t (*on_data)(struct net_conn *c, const uint8_t *data, size_t len);
    /* The send queue crossed its high watermark (paused = true) or fell back under the low one
     * (paused = false). Optional. */
    void (*on_send_pressure)(struct net_conn *c, bool paused);
    /* The peer closed its write side (recv returned 0). Optional: default is to close. */
    void (*on_eof)(struct net_conn *c);
    /* Outgoing connections: the connect finished (res 0) or failed (then on_close follows). */
    void (*on_connected)(struct net_conn *c, int res);
    /* Last call for this connection: no callback follows; free the app state here. reason is 0
     * for a local close or -errno (-ECONNRESET, -ETIMEDOUT, -EPROTO, ...). */
    void (*on_close)(struct net_conn *c, int reason);
    /* The deadline (net_conn_set_deadline) passed. Optional: when set it runs first and may
     * queue a last message (`ERR timeout`); then the connection closes with -ETIMEDOUT once
     * what is queued is sent (bounded by the write timeout, or NET_DEADLINE_FLUSH_MS when the
     * connection has none), unless the app closed it itself. Without it the close is at once. */
    void (*on_deadline)(struct net_conn *c);
    /* Send classes (<hd/net_class.h>): NULL for none. Static, as the handler. */
    const struct net_send_classes *send_classes;
};

struct net_conn_options {
    uint32_t idle_timeout_ms;  /* no bytes received for this long: close (-ETIMEDOUT); 0 = off */
    uint32_t write_timeout_ms; /* a send that makes no progress for this long: close; 0 = off */
    uint32_t send_high_bytes;  /* queued bytes that pause the source (on_send_pressure) */
    uint32_t send_low_bytes;   /* and resume it */
    uint32_t send_max_bytes;   /* hard cap: net_conn_send beyond it fails with -ENOBUFS */
    /* Queued entries (frames) that pause the source too, and resume it (both must be under
     * their low marks); 0 = no entry watermark. Small packets hold a whole pool frame each, so
     * bytes alone would let one slow reader hold thousands of frames. */
    uint32_t send_high_frames, send_low_frames;
    /* Bytes the app (or a codec) may leave unconsumed: a larger tail closes the connection
     * (-EMSGSIZE). 0: the shard's (net_shard_options.rx_tail_max). A frame class must hold it. */
    uint32_t rx_tail_max;
};

struct net_conn_stats {
    uint64_t bytes_in, bytes_out;
    uint64_t sends; /* sendmsg calls */
};

/* Adopt an accepted or connected socket fd on shard s (takes ownership of fd on success).
 * Returns 0, -ENOMEM (connection pool exhausted; fd is left to the caller). */
int net_conn_adopt(struct hd_shard *s, int fd, const struct net_conn_handler *h, void *app,
                   const struct net_conn_options *opt, struct net_conn **out);
/* Connect to addr; on_connected reports the result. Returns 0 or -errno (nothing created). */
int net_conn_connect(struct hd_shard *s, const struct net_addr *addr, uint32_t timeout_ms,
                     const struct net_conn_handler *h, void *app,
                     const struct net_conn_options *opt, struct net_conn **out);

/* Queue len bytes at frame->data + off for sending, in order. Takes one reference of frame on
 * success (the caller's reference stays the caller's). Sent as one sendmsg per connection per
 * tick. Returns 0, -ENOBUFS (over send_max_bytes or the queue's entry cap), -EPIPE (closing). */
int net_conn_send(struct net_conn *c, struct hd_frame *f, uint32_t off, uint32_t len);
/* Copy bytes into pool frames and queue them (small control messages). Same errors + -ENOMEM. */
int net_conn_send_copy(struct net_conn *c, const void *data, size_t len);
/* Copy a small control message (1..NET_URGENT_MAX bytes) and queue it ahead of what is queued
 * but not yet handed to the kernel, behind what the kernel has (and at most one entry that may
 * have gone in part) and behind the small entries at the front of the rest (earlier urgent ones
 * keep their order): a Pong or a keep-alive does not wait behind a backlog. For apps whose
 * entries are whole messages (it goes between two). On a codec's connection it goes ahead of
 * the plaintext not yet encoded (what a codec sealed is wire bytes, in order). Same errors as
 * net_conn_send_copy, and -EINVAL for a message over NET_URGENT_MAX. */
int net_conn_send_urgent(struct net_conn *c, const void *data, size_t len);
/* Entries queued but not yet handed to the kernel (dropped ones included until they reach the
 * front); apps with their own queue policy (e.g. drop the oldest) bound them. */
unsigned net_conn_unsent_count(const struct net_conn *c);
/* Drop the oldest entry not yet in the kernel's hands; returns its length, or 0 if there is
 * none. */
uint32_t net_conn_drop_oldest(struct net_conn *c);
size_t net_conn_queued_bytes(const struct net_conn *c);

/* Stop or resume reading (backpressure from the app). Paused from on_data, the bytes on_data
 * did not consume, and the rest of the read (or of the codec's output) being delivered, are kept
 * in order as the app's tail and offered again on resume; buffers that arrive meanwhile wait
 * unread. That tail must stay within rx_tail_max (else the connection closes, -EMSGSIZE):
 * pause before a large message is buffered (at its header), not once it is whole. Resuming
 * offers the kept bytes at once, inside this call: the app's state may be gone after it. */
void net_conn_pause_recv(struct net_conn *c, bool paused);
/* Close after the queued bytes are sent (flush = true; bounded by the write timeout) or at once.
 * reason reaches on_close. Idempotent. A connection waiting to move (net_conn_migrate) stays:
 * the move is off, its adopt never runs, and it closes here either way. */
void net_conn_close(struct net_conn *c, int reason, bool flush);
/* Shut down the write side once the queue is empty (half close). */
void net_conn_shutdown_write(struct net_conn *c);

void *net_conn_app(const struct net_conn *c);
const struct net_conn_handler *net_conn_app_handler(const struct net_conn *c);
void net_conn_set_app(struct net_conn *c, const struct net_conn_handler *h, void *app);
int net_conn_fd(const struct net_conn *c);
struct hd_shard *net_conn_shard(const struct net_conn *c);
enum net_conn_state net_conn_state(const struct net_conn *c);
/* Valid in on_close (and before: NONE while open). */
enum net_conn_timer net_conn_closed_by(const struct net_conn *c);
const struct net_addr *net_conn_peer(const struct net_conn *c);
const struct net_conn_stats *net_conn_stats(const struct net_conn *c);
void net_conn_set_timeouts(struct net_conn *c, uint32_t idle_timeout_ms, uint32_t write_timeout_ms);
void net_conn_timeouts(const struct net_conn *c, uint32_t *idle_timeout_ms,
                       uint32_t *write_timeout_ms);
/* An absolute deadline: close (-ETIMEDOUT) ms from now, however many bytes arrive meanwhile
 * (the idle timeout restarts on each read; a client sending a byte a second would keep it
 * forever). 0 clears it; a new call replaces it; a move keeps what is left of it. With the
 * handler's on_deadline the app hears it first and may write a last line. */
void net_conn_set_deadline(struct net_conn *c, uint32_t ms);
/* Change the send watermarks and cap (see struct net_conn_options). */
void net_conn_set_limits(struct net_conn *c, uint32_t high, uint32_t low, uint32_t max);
/* Change the entry watermarks (send_high_frames / send_low_frames; 0, 0: none). */
void net_conn_set_frame_limits(struct net_conn *c, uint32_t high, uint32_t low);

/* ---------------------------------------------------------------- handles, from any shard */

/* The connection's handle: (shard, slot, generation) in 64 bits, which any shard may hold (in
 * its tables, in a bus message's u64) instead of a pointer. It goes stale when the connection
 * closes (just before on_close) or moves (the connection on the new shard has a new one: ask
 * it in the adopt callback). Constant while the connection lives; on its shard. */
struct hd_handle net_conn_handle(const struct net_conn *c);
/* The connection h names if it lives on s, else NULL (stale, {0}, another shard's). On s. */
struct net_conn *net_conn_by_handle(struct hd_shard *s, struct hd_handle h);
/* From any shard s (h's own included): queue len bytes at f->data + off on h's connection. It
 * travels as a bus message to h's shard (the own shard too: it runs at the next bus drain, never
 * inside this call), which does net_conn_send there; a connection gone by then, or refusing the
 * bytes (over its send cap, closing), drops them and counts (net_shard_counters on that shard).
 * Takes its own reference of f on success (the caller's stays the caller's). Returns 0, -EAGAIN
 * (the bus to that shard is full: nothing queued; the caller pauses its source or drops),
 * -EINVAL (h is {0} or names a shard out of range). Shard s's thread. */
int net_conn_send_to(struct hd_shard *s, struct hd_handle h, struct hd_frame *f, uint32_t off,
                     uint32_t len);
/* From any shard s: net_conn_close(c, reason, flush) on h's connection, through the bus as
 * net_conn_send_to (a control message: sends that filled the bus leave it room, and it stays
 * behind them); a connection gone by then is counted (handle_stale). Returns 0, -EAGAIN,
 * -EINVAL (as net_conn_send_to). */
int net_conn_close_to(struct hd_shard *s, struct hd_handle h, int reason, bool flush);
/* Per-shard counters of the calls by handle that arrived on this shard. On s. */
struct net_shard_counters {
    uint64_t handle_stale;   /* sends or closes for a connection gone (closed, moved) */
    uint64_t handle_refused; /* sends the connection refused (net_conn_send's error) */
};
const struct net_shard_counters *net_shard_counters(struct hd_shard *s);

/* Offer the bytes the app left unconsumed (on_data's tail) to on_data again, without new bytes
 * and without toggling pause: for an app that returned 0 because something else was not ready
 * (a peer not yet paired, a bus full) and now is. The offer runs at the shard's next tick (never
 * inside this call, so it is safe from on_data); several calls before it make one offer; it
 * does nothing if the connection is paused by then (resuming offers them) or closed. With no
 * bytes kept, on_data is not called. Returns 0, -EPIPE (closing), -EAGAIN (task ring full). On
 * the connection's shard. */
int net_conn_reoffer(struct net_conn *c);

/* ---------------------------------------------------------------- migration */

/* Runs on the destination shard with the connection now living there: set its handler and
 * app state with net_conn_set_app (the handler it had on the old shard is kept until then).
 * c is NULL if the destination could not take the connection (its pool is full): the fd is
 * closed and the app frees its state. */
typedef void net_adopt_fn(struct net_conn *c, void *arg);
/* Move c to shard dst: once no op of it is in flight, its fd, peer, timeouts, unconsumed bytes,
 * queued sends and codec (whose state must be heap memory, not a shard pool's) travel over the
 * bus, and adopt(new, arg) runs on dst; receiving resumes there. On this shard the app hears
 * nothing more of c (no on_close): the connection is not closed, only moved.
 * Returns 0, -EINVAL (dst out of range or this shard), -EBUSY (already moving or closing),
 * -ENOMEM. */
int net_conn_migrate(struct net_conn *c, unsigned dst, net_adopt_fn *adopt, void *arg);

/* ---------------------------------------------------------------- export to another process */

/* A codec's state as bytes (at most cap = NET_EXPORT_CODEC_MAX), on a quiet connection: its
 * length, or -errno (the connection cannot be exported now: it is closed with that reason).
 * The app passes the codec's own (TLS: tls_conn_state_save). */
typedef ssize_t net_codec_save_fn(struct net_conn *c, uint8_t *buf, size_t cap);
/* In the new process: reinstall the codec on c from those bytes (TLS: tls_conn_state_load).
 * 0 or -errno (-EPROTO: bad bytes). */
typedef int net_codec_load_fn(struct net_conn *c, const uint8_t *buf, size_t len);
/* The connection as bytes: fd (now the caller's, open) and blob (valid during the call). */
typedef void net_export_fn(int fd, const uint8_t *blob, size_t len, void *arg);
/* Take c out of this process: like net_conn_migrate, receiving pauses and, once no op of c is
 * in flight, its fd, peer, settings, the deadline left, unconsumed and unread bytes, both send
 * queues and the codec's state (through save) become fd + bytes for done, and c is gone (no
 * on_close; the fd stays open). If c closes first, on_close runs as usual and done never does;
 * if packing fails, c is closed with the error (on_close). Returns 0, -EBUSY (moving or
 * closing), -EOPNOTSUPP (a stacked upper codec, or a codec and no save), -ENOMEM. */
int net_conn_export(struct net_conn *c, net_codec_save_fn *save, net_export_fn *done, void *arg);
/* A connection on shard s from fd and what net_conn_export made of it: h and app as for
 * net_conn_adopt; load reinstalls the codec (NULL when the blob has no codec state). The
 * connection comes with receiving paused, so the app can set up its state for it first:
 * net_conn_pause_recv(c, false) then offers the carried bytes to on_data and receives; the
 * queued sends go out at this tick's flush. Returns 0 (fd taken), or -EPROTO (bad or truncated
 * bytes), -EOPNOTSUPP (a codec state and no load), -ENOMEM, -ENOBUFS (frame pools), load's error:
 * then nothing is kept and fd is still the caller's. */
int net_conn_import(struct hd_shard *s, int fd, const uint8_t *blob, size_t len,
                    const struct net_conn_handler *h, void *app, net_codec_load_fn *load,
                    struct net_conn **out);

/* ---------------------------------------------------------------- listeners */

/* A new connection was accepted: adopt fd (net_conn_adopt) or close it. peer is its address. */
typedef void net_accept_fn(struct net_listener *l, int fd, const struct net_addr *peer, void *arg);

struct net_listener_options {
    int backlog;             /* 0: NET_LISTEN_BACKLOG */
    uint32_t conns_max;      /* per shard; over it new connections are closed at once (counted) */
    bool reuseport;          /* one socket per shard on the same address (default on) */
    int tcp_user_timeout_ms; /* TCP_USER_TIMEOUT on the socket (inherited); 0 = kernel default */
    int keepalive_s;         /* SO_KEEPALIVE idle/interval seconds; 0 = off */
};

struct net_listener_stats {
    uint64_t accepted;
    uint64_t refused_cap;   /* closed at once: over conns_max */
    uint64_t accept_errors; /* EMFILE/ENFILE/ENOBUFS/... (each one backs off) */
};

/* Listen on addr on shard s (SO_REUSEPORT: every shard calls this for the same address).
 * Returns 0 or -errno (-EADDRINUSE, -EACCES, ...). */
int net_listener_start(struct hd_shard *s, const struct net_addr *addr,
                       const struct net_listener_options *opt, net_accept_fn *fn, void *arg,
                       struct net_listener **out);
/* A listener on fd, a listening TCP socket handed over by another process (net_handover_recv),
 * which it takes in every case (closed on failure). Returns 0, -EINVAL (not a listening TCP
 * socket), -ENOMEM. */
int net_listener_adopt(struct hd_shard *s, int fd, const struct net_listener_options *opt,
                       net_accept_fn *fn, void *arg, struct net_listener **out);
/* Stop accepting and close the socket; the struct is freed once the kernel returned the op.
 * Connections the kernel queued stay queued for any other holder of the socket (a successor
 * that adopted it): they are not refused. */
void net_listener_stop(struct net_listener *l);
/* The same, except that connections the kernel accepted for this listener before the stop took
 * effect (completions still on their way) reach fn instead of being closed: for a process that
 * handed the socket to its successor and serves what it already took. */
void net_listener_drain(struct net_listener *l);
/* Arm the accept again (cancel it and re-arm at once): a new accept first takes what waits in
 * the queue. For a socket another process accepted from too and has stopped: io_uring's
 * accepts wait exclusively, so a wake-up that went to that process's cancelled accept is lost
 * to ours, and a connection would wait in the queue until the next one arrived. */
void net_listener_kick(struct net_listener *l);
/* Claims addr for this process before its shards listen there: SO_REUSEPORT lets any process of
 * the same user join a port (the kernel then spreads connections over both), so the shards'
 * sharing alone cannot tell a second server. A socket with SO_REUSEADDR and without
 * SO_REUSEPORT cannot bind where another socket listens, but does not stop our own listeners;
 * it stays bound (never listening) until closed, so a later claim by another process fails
 * too. Returns the socket (close it at exit) or -errno: -EADDRINUSE when someone listens on
 * addr. Port 0 claims nothing (returns -EINVAL: every shard would get its own port anyway). */
int net_listener_claim(const struct net_addr *addr);
const struct net_listener_stats *net_listener_stats(const struct net_listener *l);
/* The bound address (the actual port when addr had port 0). */
const struct net_addr *net_listener_addr(const struct net_listener *l);
struct hd_shard *net_listener_shard(const struct net_listener *l);
/* The listening socket (to hand over; the listener still owns it). */
int net_listener_fd(const struct net_listener *l);
/* The shard's live connection count (what conns_max limits). */
uint32_t net_conns_count(struct hd_shard *s);

/* ---------------------------------------------------------------- UDP */

struct net_udp;
/* A datagram arrived (data valid during the call; from is its source). */
typedef void net_udp_recv_fn(struct net_udp *u, const uint8_t *data, size_t len,
                             const struct net_addr *from, void *arg);
struct net_udp_stats {
    uint64_t received, sent, recv_errors, send_errors, send_dropped;
    uint64_t recv_nobufs;  /* the ring was empty (the shard's: receive paused 1 ms; the socket's
                            * own, with GRO: armed again once the tick returned its buffers) */
    uint64_t truncated;    /* a datagram larger than its ring buffer (NET_BUF_SIZE), dropped */
    uint64_t gso_sends;    /* sendmsgs that carried several datagrams (UDP GSO) */
    uint64_t gro_receives; /* receives that carried several datagrams (UDP GRO), cut apart */
};
/* A UDP socket bound to addr on shard s (SO_REUSEPORT: one per shard on the same address).
 * Datagrams arrive through a multishot recvmsg into a buffer ring (a burst in one tick), or one
 * recvmsg at a time where the shard has no ring. With UDP GRO (where the kernel has it): the
 * kernel may hand over several datagrams of one source in one buffer; the app still gets them
 * one by one, in order. Such a socket has a buffer ring of its own (net_limits.h,
 * NET_UDP_GRO_BUFS), else it shares the shard's ring without GRO. Returns 0 or -errno
 * (-EADDRINUSE, -EACCES, -ENOMEM). */
int net_udp_open(struct hd_shard *s, const struct net_addr *addr, net_udp_recv_fn *fn, void *arg,
                 struct net_udp **out);
/* Whether addr's UDP port may be taken before the shards bind it: net_udp_open's SO_REUSEPORT
 * would let a second server of the same user join another's group and split its datagrams.
 * Throw-away binds tell who is there: with no flag, nobody (free); with SO_REUSEPORT alone, a
 * reuseport group (another server's shards: in use); with SO_REUSEADDR alone failing too, a
 * socket that shares with nobody (in use). What is left, sockets with SO_REUSEADDR alone (a
 * port hold, as tests keep), net_udp_open binds beside as it always did. Nothing stays held:
 * once the shards bound, a later check fails. Returns 0 (nothing kept) or -errno: -EADDRINUSE.
 * Limit: another user's server shares through SO_REUSEADDR and is not told from a hold. */
int net_udp_claim(const struct net_addr *addr);
/* A UDP socket on fd, handed over by another process; taken in every case (closed on failure).
 * Returns 0, -EINVAL (not a datagram socket), -ENOMEM. */
int net_udp_adopt(struct hd_shard *s, int fd, net_udp_recv_fn *fn, void *arg, struct net_udp **out);
/* Copy a datagram (at most NET_UDP_SEND_MAX bytes) and send it to `to` at the end of the tick:
 * the datagrams of a tick to one address with one size go as one sendmsg (UDP GSO), the others
 * one sendmsg each, in the order queued. Returns 0, -EMSGSIZE, -ENOBUFS (every send slot in
 * flight: dropped and counted), -EPIPE (closing). */
int net_udp_send(struct net_udp *u, const void *data, size_t len, const struct net_addr *to);
/* Close; freed once the kernel returned every op. */
void net_udp_close(struct net_udp *u);
const struct net_udp_stats *net_udp_stats(const struct net_udp *u);
struct hd_shard *net_udp_shard(const struct net_udp *u);
/* The socket (to hand over; the UDP socket still owns it). */
int net_udp_fd(const struct net_udp *u);

/* ---------------------------------------------------------------- process hand-over */

/* A running program handing its sockets to its successor (a zero-downtime upgrade): it starts
 * the binary its /proc/self/exe names now (the file on disk, also after a package replaced
 * it) with one end of a SOCK_SEQPACKET socketpair inherited, its number in the environment
 * variable NET_HANDOVER_ENV; the two exchange messages of at most NET_HANDOVER_MSG_MAX bytes,
 * each with up to NET_HANDOVER_FDS_MAX descriptors (SCM_RIGHTS, so batch them). What the
 * messages say is the app's. Blocking with deadlines: call these from the main thread or a
 * thread of the app's, never from a shard. */
/* Start /proc/self/exe's current path with argv (argv[0] included) and this environment (any
 * inherited NET_HANDOVER_ENV replaced); every signal unblocked and at its default in the
 * child. *sock is our end (close-on-exec). Returns 0, or -errno from readlink, socketpair or
 * posix_spawn (-ENOENT: the binary is gone, -EACCES). */
int net_handover_spawn(char *const argv[], pid_t *pid, int *sock);
/* The path net_handover_spawn starts (" (deleted)" removed). 0, -errno, -ENAMETOOLONG. */
int net_handover_exe(char *path, size_t cap);
/* In the successor: the inherited socket (made close-on-exec; the variable is removed from
 * the environment), -ENOENT when there is none, -EINVAL/-EBADF when the variable is bad. */
int net_handover_inherited(void);
/* One message with fds_count descriptors (the caller keeps its own). 0, -EINVAL (len 0 or too
 * long, too many fds), -EPIPE (the peer is gone), -errno. */
int net_handover_send(int sock, const void *msg, size_t len, const int *fds, unsigned fds_count);
/* Wait up to timeout_ms (-1: forever) for one message; its descriptors (close-on-exec) go to
 * fds, which has room for NET_HANDOVER_FDS_MAX (or is NULL: a message with any is refused).
 * Returns its length, -ETIMEDOUT, -EPIPE (the peer closed or exited, also with our messages
 * unread), -EPROTO (truncated:
 * longer than cap, or descriptors it cannot hold, all closed), -errno. */
ssize_t net_handover_recv(int sock, void *msg, size_t cap, int *fds, unsigned *fds_count,
                          int timeout_ms);

/* ---------------------------------------------------------------- per-shard set-up */

/* The socket layer as a module: list net_module (arg: a struct net_shard_options *, or NULL
 * for the defaults) in the runtime's modules, or put it in a module's requires. On each shard
 * it creates the connection pools and the provided-buffer ring before the modules after it, and
 * frees them after their shard_fini. Every other net_ call on a shard needs it there. */
struct net_shard_options {
    bool no_buf_ring; /* force the plain-recv fallback (tests) */
    /* Bit i: shard i only uses the plain-recv fallback (a test runs both paths at once). */
    uint64_t no_buf_ring_shards;
    bool no_udp_gro; /* UDP sockets receive without GRO, through the shard's ring (tests) */
    /* Connections' default rx_tail_max (net_conn_options); 0: NET_RX_TAIL_MAX_DEFAULT. */
    uint32_t rx_tail_max;
};
extern const struct hd_module net_module;
/* Close every connection of the shard (flushing what is queued, bounded by write timeouts):
 * for a module's shard_stop. */
void net_shard_close_all(struct hd_shard *s, int reason);
/* true when this shard receives through a provided-buffer ring (multishot recv). */
bool net_shard_uses_buf_ring(struct hd_shard *s);

#endif /* NET_H */
