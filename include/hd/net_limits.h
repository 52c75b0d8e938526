/* net_limits.h - every limit of the socket layer, with its reason. Constants only. */
#ifndef NET_LIMITS_H
#define NET_LIMITS_H

#include <hd/hd_base.h>

/* Provided-buffer ring per shard: 256 x 16 KiB = 4 MiB. 16 KiB holds a whole TLS record
 * (2^14 plaintext + overhead spans two buffers at worst) and a burst of small packets. */
#define NET_BUF_RING_ENTRIES 256
#define NET_BUF_SIZE         (16u * 1024u)
#define NET_BUF_GROUP        0
_Static_assert(HD_IS_POW2(NET_BUF_RING_ENTRIES), "kernel requires a power of two");

/* Without a buffer ring, each connection receives into a frame of this size per recv. */
#define NET_RECV_FALLBACK_SIZE 2048u

/* Connections per shard (pool cap): the default per-shard connection cap too. */
#define NET_CONNS_MAX 65536u

/* Send queue: entries live in chunks from a shard pool, so an idle connection holds none. */
#define NET_SENDQ_CHUNK_ENTRIES 15
#define NET_IOV_MAX             256 /* iovecs per sendmsg (kernel UIO_MAXIOV is 1024) */
/* net_conn_send_urgent: a control message's bytes at most (a Pong, a keep-alive); queued entries
 * this small at the front of what is not yet sent are taken for earlier urgent ones. */
#define NET_URGENT_MAX 64u
/* While the socket is backed up (the last sendmsg went in part), the next covers about what the
 * last one took, at least this much: the rest stays in the queue, where urgent messages go ahead
 * of it and an app's drop-oldest finds it (a send waiting for room holds its entries). */
#define NET_SEND_BACKED_MIN  (64u * 1024u)
#define NET_SENDQ_CHUNKS_MAX (NET_CONNS_MAX * 2u)
#define NET_SEND_CTX_MAX     NET_CONNS_MAX /* one in flight per connection at most */
/* Send classes per connection (net_conn_send_class): each holds a queue head in the connection. */
#define NET_SEND_CLASSES_MAX 2u

/* Default watermarks: pause the source at 256 KiB queued, resume at 64 KiB, refuse past 4 MiB. */
#define NET_SEND_HIGH_DEFAULT (256u * 1024u)
#define NET_SEND_LOW_DEFAULT  (64u * 1024u)
#define NET_SEND_MAX_DEFAULT  (4u * 1024u * 1024u)
_Static_assert(NET_SEND_LOW_DEFAULT < NET_SEND_HIGH_DEFAULT, "hysteresis");
_Static_assert(NET_SEND_HIGH_DEFAULT < NET_SEND_MAX_DEFAULT, "pause before refusing");

/* The default bound of the bytes an app (or a codec) may leave unconsumed on a connection (its
 * reassembly tail): a 64 KiB message, the size of the runtime's default large frame class.
 * A protocol with larger messages sets its own, per runtime (net_shard_options.rx_tail_max) or
 * per connection (net_conn_options.rx_tail_max), and a frame class that holds it. */
#define NET_RX_TAIL_MAX_DEFAULT (64u * 1024u)

/* A URL's authority: a DNS name (253) or [IPv6] (41), plus ":" and a 5-digit port. */
#define NET_URL_AUTHORITY_LEN_MAX (253 + 6)

/* net_resolve: addresses kept from one lookup (getaddrinfo's order: a dual-stack name has a
 * few of each family), and the longest host name (DNS: 253). */
#define NET_RESOLVE_ADDRS_MAX 8
#define NET_RESOLVE_HOST_MAX  253

/* Accept: listen backlog; after EMFILE/ENFILE/ENOMEM accept again after this pause. */
#define NET_LISTEN_BACKLOG    4096
#define NET_ACCEPT_BACKOFF_MS 100
/* After a recv found the buffer ring empty, re-arm after this pause (never spin). */
#define NET_NOBUFS_RETRY_MS 1
/* A deadline with on_deadline on a connection without a write timeout: the last message's
 * flush gets this long before the close is forced. */
#define NET_DEADLINE_FLUSH_MS 5000u

/* UDP: the largest datagram received (IPv4/IPv6 payload limit), the largest one sent through
 * the copy slots (STUN replies are 32 or 44 bytes; a WireGuard packet fits a 1500 MTU) and the
 * sends in flight per socket: a relay forwards a tick's burst (up to a buffer ring's worth of
 * datagrams) before the first of its sends completes. 256 slots: ~400 KiB per socket. */
#define NET_UDP_DATAGRAM_MAX 65536u
#define NET_UDP_SEND_MAX     1500u
#define NET_UDP_SLOTS        256u
_Static_assert(NET_UDP_SLOTS >= NET_BUF_RING_ENTRIES, "a received burst can be forwarded whole");
/* (With GRO a tick may bring more: NET_UDP_GRO_BUFS buffers of up to 64 datagrams each, only
 * when a source sends that fast; sends beyond the slots are dropped and counted, as ever.) */
/* UDP GSO: datagrams queued in one tick for one address with one size go as one sendmsg (the
 * kernel's UDP_MAX_SEGMENTS is 64; a UDP payload is at most 65,507 bytes), from at most
 * NET_UDP_GSO_GROUPS such sends in flight per socket (beyond them: one sendmsg per datagram). */
#define NET_UDP_GSO_SEGS      64u
#define NET_UDP_GSO_BYTES_MAX 65000u
#define NET_UDP_GSO_GROUPS    16u
_Static_assert(NET_UDP_SLOTS <= 65535u, "slot numbers are u16");
/* UDP GRO on receive: the kernel hands a socket with UDP_GRO one buffer of up to 64 datagrams
 * of a flow (at most 64 KiB in all) with their size in a cmsg; net/ cuts it back into the
 * datagrams. A coalesced datagram does not fit the shard's 16 KiB ring buffers (the kernel would
 * cut off the rest), so such a socket receives into a buffer ring of its own: NET_UDP_GRO_BUFS
 * buffers of NET_UDP_GRO_BUF_SIZE (the recvmsg header, the source address, the cmsg and 64 KiB:
 * ~2 MiB per socket), one buffer group each (NET_UDP_GRO_GROUP_FIRST on, at most
 * NET_UDP_GRO_GROUPS sockets per shard; beyond them, or where the kernel refuses UDP_GRO, a
 * socket receives without GRO through the shard's ring as before). */
#define NET_UDP_GRO_BUFS        32u
#define NET_UDP_GRO_BUF_SIZE    (NET_UDP_DATAGRAM_MAX + 512u)
#define NET_UDP_GRO_GROUP_FIRST 1u
#define NET_UDP_GRO_GROUPS      64u
_Static_assert(HD_IS_POW2(NET_UDP_GRO_BUFS), "kernel requires a power of two");
_Static_assert(NET_UDP_GRO_GROUP_FIRST > NET_BUF_GROUP, "the shard's ring keeps its group");

/* WebSocket (RFC 6455, net_ws.h). A frame header is at most 2 + 8 (64-bit length) + 4 (mask);
 * a control frame's payload at most 125 bytes (section 5.5), a close reason 125 - 2 (status).
 * A message may be NET_WS_MESSAGE_MAX payload bytes: protocols carried over WebSocket put up to
 * 64 KiB and a small header in one message (and Go's servers write one message per write of
 * their 4 KiB buffer or one big packet), so 64 KiB + 4 KiB leaves room and refuses anything
 * absurd. A
 * client masks a copy of what it sends, in messages of at most NET_WS_CLIENT_CHUNK payload
 * bytes (one pool frame each). A server sends messages of at most NET_WS_SERVER_CHUNK bytes
 * (the payload by reference): Tailscale's client (coder/websocket) reads at most 32 KiB a
 * message and closes the connection on a bigger one. Each encode frames at most
 * NET_WS_ENCODE_BATCH queued entries (two wire entries per message, header and payload), so
 * the rest stays droppable for the app. */
#define NET_WS_HEADER_MAX       14u
#define NET_WS_CONTROL_MAX      125u
#define NET_WS_CLOSE_REASON_MAX (NET_WS_CONTROL_MAX - 2u)
#define NET_WS_MESSAGE_MAX      (65536u + 4096u)
#define NET_WS_CLIENT_CHUNK     (16u * 1024u)
#define NET_WS_SERVER_CHUNK     (16u * 1024u)
#define NET_WS_ENCODE_BATCH     (NET_IOV_MAX / 2)
/* A client that sent its close waits this long for the server's (coder/websocket: 5 s). */
#define NET_WS_CLOSE_WAIT_MS 5000u
_Static_assert(NET_WS_MESSAGE_MAX >= 65536u + 64u, "a 64 KiB message with its header");
_Static_assert(NET_WS_CLIENT_CHUNK + NET_WS_HEADER_MAX <= NET_RX_TAIL_MAX_DEFAULT,
               "a pool frame class");

/* Process hand-over (net_handover_*): the environment variable naming the inherited socket;
 * descriptors per message (the kernel's SCM_MAX_FD is 253; a batch of 64 keeps the control
 * buffer on the stack at 16 + 256 bytes) and the bytes of one message (a SEQPACKET datagram). */
#define NET_HANDOVER_ENV     "HD_HANDOVER_FD"
#define NET_HANDOVER_FDS_MAX 64u
#define NET_HANDOVER_MSG_MAX 65536u
_Static_assert(NET_HANDOVER_FDS_MAX <= 253u, "SCM_MAX_FD");

/* Exporting a connection (net_conn_export): a codec's state (TLS: TLS_CONN_STATE_MAX, 1 KiB,
 * with room); one queued entry or tail (a frame class's data: 64 KiB + the 128 bytes an app
 * frame may add); bytes received but not offered yet (a paused connection holds at most every
 * ring buffer). */
#define NET_EXPORT_CODEC_MAX    4096u
#define NET_EXPORT_ENTRY_MAX    (65536u + 128u)
#define NET_EXPORT_RECEIVED_MAX (NET_BUF_RING_ENTRIES * NET_BUF_SIZE)

#endif /* NET_LIMITS_H */
