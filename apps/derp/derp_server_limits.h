/* derp_server_limits.h - hderp-server's limits, with their sources. Constants only. */
#ifndef DERP_SERVER_LIMITS_H
#define DERP_SERVER_LIMITS_H

#include "derp_limits.h"

/* derper: perClientSendQueueDepth = 32, one queue for disco and one for other packets. */
#define DERP_QUEUE_DEPTH 32
/* derper: up to 3 attempts to make room by dropping the queue head, then drop the new one. */
#define DERP_QUEUE_TRIES 3

/* A routed packet frame: the destination key, the key of the connection that sent it (NotHere
 * goes there: the sender, or the mesh peer that forwarded it), then the RecvPacket frame as it
 * goes out. */
#define DERP_ROUTE_REPLY_OFF 32
#define DERP_ROUTE_OFF       64
/* The frame pool's big class must hold the largest routed frame. */
#define DERP_ROUTE_FRAME_MAX (DERP_ROUTE_OFF + DERP_FRAME_HEADER_LEN + DERP_RECV_PACKET_LEN_MAX)

/* derper: 10 s to write ServerKey, then a fresh 10 s for the whole ClientInfo. */
#define DERP_HANDSHAKE_TIMEOUT_MS 10000
/* derper's HTTP server: read timeout 30 s (bounds the request head). */
#define DERP_HTTP_READ_TIMEOUT_MS 30000
/* derper: write deadline 30 s for mesh peers. */
#define DERP_MESH_WRITE_TIMEOUT_MS 30000
/* derper: KeepAlive every 60 s + [0, 5 s) of jitter chosen per connection. */
#define DERP_KEEPALIVE_JITTER_MS 5000

/* Net send queue of a client: it plays the part of derper's kernel socket buffer (a writer
 * goroutine drains derper's 32-packet queues into it concurrently; ours fills within a tick and
 * is handed to the kernel at the tick's end). Pause the writer at 1 MiB queued, resume at
 * 256 KiB, refuse past 4 MiB; the derper-sized packet queues above are where drops happen.
 * At 64 KiB, one 5 ms stall at 1 Gbit/s already overflowed them (perf/RESULTS.md). Mesh peers
 * (watch streams are unbounded in derper) may queue up to 64 MiB. */
#define DERP_NET_HIGH_BYTES     (1024u * 1024u)
#define DERP_NET_LOW_BYTES      (256u * 1024u)
#define DERP_NET_MAX_BYTES      (4u * 1024u * 1024u)
#define DERP_MESH_NET_MAX_BYTES (64u * 1024u * 1024u)

/* PeerGone bookkeeping: most distinct sources one connection remembers. */
#define DERP_SOURCES_MAX 65536u
/* Watchers in the process (mesh peers and monitoring tools). */
#define DERP_WATCHERS_MAX 1024u
/* Peer table: initial slots per shard (grows by doubling at 50% load). */
#define DERP_PEERS_INITIAL 1024u

/* derper initMetacert: NotBefore now - 30 days, NotAfter now + 30 days. */
#define DERP_META_CERT_VALIDITY_S (30L * 24 * 3600)

/* -mesh-with: other nodes of the region (derper has no limit; regions are a handful of nodes).
 * A key's forwarders are a list of node ids, so this also bounds that list. */
#define DERP_MESH_NODES_MAX 32u
/* derper's mesh client: retry a failed watch connection every 5 s. */
#define DERP_MESH_RETRY_MS 5000
/* A -mesh-with entry: [http://]host[:port][/dialhost], each host a DNS name or an address. */
#define DERP_MESH_ENTRY_LEN_MAX 512
/* -rate-config (spec §6.9): a frame costs min(payload, 65568) tokens, the burst floor
 * (DERP_RATE_BURST_MIN, derp_limits.h), so one frame always fits the bucket; a waiting client
 * checks its bucket again at least once a second (a reload applies within that time). */
#define DERP_RATE_TAKE_MAX    DERP_RATE_BURST_MIN
#define DERP_RATE_WAIT_MAX_MS 1000u
/* --allow-keys: most keys in the file (32 MiB of keys; a region's tailnets are far smaller) and
 * the longest line ("nodekey:" + 64 hex, room for white space and a comment). */
#define DERP_ALLOW_KEYS_MAX (1u << 20)
#define DERP_ALLOW_LINE_MAX 512u

/* derper: the key file root uses without -c. */
#define DERP_DEFAULT_KEY_FILE "/var/lib/derper/derper.key"

#endif /* DERP_SERVER_LIMITS_H */
