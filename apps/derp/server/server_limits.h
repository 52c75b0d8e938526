/* server_limits.h - hderp-server's own limits, with their sources. Constants only. Protocol-wide
 * values (handshake and keep-alive timers, mesh retry) are derper's and live in derp_limits.h. */
#ifndef SERVER_LIMITS_H
#define SERVER_LIMITS_H

#include "derp_limits.h"

/* derper: perClientSendQueueDepth = 32, one queue for disco and one for other packets. */
#define SRV_QUEUE_DEPTH 32
/* derper: up to 3 attempts to make room by dropping the queue head, then drop the new one. */
#define SRV_QUEUE_TRIES 3

/* A routed packet frame: the destination key, the key of the connection that sent it (NotHere
 * goes there: the sender, or the mesh peer that forwarded it), then the RecvPacket frame as it
 * goes out. */
#define SRV_ROUTE_REPLY_OFF 32
#define SRV_ROUTE_OFF       64
/* The frame pool's big class must hold the largest routed frame. */
#define SRV_ROUTE_FRAME_MAX (SRV_ROUTE_OFF + DERP_FRAME_HEADER_LEN + DERP_RECV_PACKET_LEN_MAX)

/* derper's HTTP server: read timeout 30 s (bounds the request head). */
#define SRV_HTTP_READ_TIMEOUT_MS 30000

/* Net send queue of a client: it plays the part of derper's kernel socket buffer (a writer
 * goroutine drains derper's 32-packet queues into it concurrently; ours fills within a tick and
 * is handed to the kernel at the tick's end). Pause the writer at 1 MiB queued, resume at
 * 256 KiB, refuse past 4 MiB; the derper-sized packet queues above are where drops happen.
 * At 64 KiB, one 5 ms stall at 1 Gbit/s already overflowed them (perf/RESULTS.md). Mesh peers
 * (watch streams are unbounded in derper) may queue up to 64 MiB. */
#define SRV_NET_HIGH_BYTES     (1024u * 1024u)
#define SRV_NET_LOW_BYTES      (256u * 1024u)
#define SRV_NET_MAX_BYTES      (4u * 1024u * 1024u)
#define SRV_MESH_NET_MAX_BYTES (64u * 1024u * 1024u)

/* PeerGone bookkeeping: most distinct sources one connection remembers. */
#define SRV_SOURCES_MAX 65536u
/* Watchers in the process (mesh peers and monitoring tools). */
#define SRV_WATCHERS_MAX 1024u
/* Peer table: initial slots per shard (grows by doubling at 50% load). */
#define SRV_PEERS_INITIAL 1024u
/* Placement (server_place.c): a client moves to the shard of the peer it sends to after this
 * many packets in a row to that one peer went over the bus (a few ms of WireGuard traffic; a
 * handshake or a burst to many peers never moves anyone). */
#define SRV_PLACE_PACKETS 64u
/* Packets for a client held by its owner shard while its connection is on the way to another
 * shard (one queue's worth, as a backed-up client gets); more are dropped as a full queue. */
#define SRV_PLACE_HELD_MAX SRV_QUEUE_DEPTH

/* derper initMetacert: NotBefore now - 30 days, NotAfter now + 30 days. */
#define SRV_META_CERT_VALIDITY_S (30L * 24 * 3600)

/* -mesh-with: other nodes of the region (derper has no limit; regions are a handful of nodes).
 * A key's forwarders are a list of node ids, so this also bounds that list. */
#define SRV_MESH_NODES_MAX 32u
/* A -mesh-with entry: [http://]host[:port][/dialhost], each host a DNS name or an address. */
#define SRV_MESH_ENTRY_LEN_MAX 512
/* -rate-config (spec §6.9): a frame costs min(payload, 65568) tokens, the burst floor
 * (DERP_RATE_BURST_MIN, derp_limits.h), so one frame always fits the bucket; a waiting client
 * checks its bucket again at least once a second (a reload applies within that time). */
#define SRV_RATE_TAKE_MAX    DERP_RATE_BURST_MIN
#define SRV_RATE_WAIT_MAX_MS 1000u
/* --allow-keys: most keys in the file (32 MiB of keys; a region's tailnets are far smaller) and
 * the longest line ("nodekey:" + 64 hex, room for white space and a comment). */
#define SRV_ALLOW_KEYS_MAX (1u << 20)
#define SRV_ALLOW_LINE_MAX 512u

/* derper: the key file root uses without -c. */
#define SRV_DEFAULT_KEY_FILE "/var/lib/derper/derper.key"

#endif /* SERVER_LIMITS_H */
