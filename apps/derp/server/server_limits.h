/* server_limits.h - hderp-server's own limits, with their sources. Constants only. Protocol-wide
 * values (handshake and keep-alive timers, mesh retry) are derper's and live in derp_limits.h. */
#ifndef SERVER_LIMITS_H
#define SERVER_LIMITS_H

/* hderp-server's version (-version, /debug/vars, the version series of /debug/varz). */
#define SRV_VERSION "0.1.0"

#include "derp_limits.h"
#include <hd/net_limits.h>

/* derper: perClientSendQueueDepth = 32, one queue for disco and one for other packets. */
#define SRV_QUEUE_DEPTH 32
/* derper: up to 3 attempts to make room by dropping the queue head, then drop the new one. */
#define SRV_QUEUE_TRIES 3

/* Senders that wait for a backed-up receiver (server_wait.c, --sender-wait). A sender waits only
 * after this many packets in a row to that receiver (one that spreads its packets keeps
 * derper's drop-oldest: pausing it would hold its traffic to healthy receivers back); a wait
 * ends when the receiver's queues drain, at most --sender-wait (a tenth of a second: a receiver
 * that reads drains in well under that on any link a relay serves), then derper's policy for
 * SRV_WAIT_OFF_MS (a receiver that never reads costs a sender one bounded wait a second). */
#define SRV_WAIT_RUN_MIN           8u
#define SRV_SENDER_WAIT_MS_DEFAULT 100u
#define SRV_SENDER_WAIT_MS_MAX     10000u
#define SRV_WAIT_OFF_MS            1000u
_Static_assert(SRV_WAIT_RUN_MIN <= SRV_QUEUE_DEPTH, "a run fits in the queue it fills");

/* A routed packet frame: the destination key, the key of the connection that sent it (NotHere
 * goes there: the sender, or the mesh peer that forwarded it), then the RecvPacket frame as it
 * goes out. */
#define SRV_ROUTE_REPLY_OFF 32
#define SRV_ROUTE_OFF       64
/* The frame pool's big class must hold the largest routed frame. */
#define SRV_ROUTE_FRAME_MAX (SRV_ROUTE_OFF + DERP_FRAME_HEADER_LEN + DERP_RECV_PACKET_LEN_MAX)

/* derper's HTTP server: read timeout 30 s (bounds the request head). */
#define SRV_HTTP_READ_TIMEOUT_MS 30000
/* Absolute deadlines (net_conn_set_deadline), not idle timers: derper's http.Server ReadTimeout
 * (30 s from accept: the TLS handshake and the request head; again for each further request of
 * a kept-alive connection) and its accept() deadline for the login (10 s from the upgrade: the
 * ServerKey write, then ClientInfo). --http-deadline / --login-deadline change them (tests);
 * below 100 ms a loaded shard would cut off honest clients. */
#define SRV_HTTP_DEADLINE_MS_DEFAULT  SRV_HTTP_READ_TIMEOUT_MS
#define SRV_LOGIN_DEADLINE_MS_DEFAULT DERP_HANDSHAKE_TIMEOUT_MS
#define SRV_DEADLINE_MS_MIN           100u
/* -home URL: it goes into a Location header of serve_home's 2 KiB answer buffer, with room for
 * the status line and the other headers. */
#define SRV_HOME_URL_MAX 1024
/* derper's stats loop (derpserver_linux.go statsInterval = 10 s): a client's TCP round-trip
 * time is read from TCP_INFO this often into derp_tcp_rtt. */
#define SRV_RTT_INTERVAL_MS 10000u
/* An upgrade's successor must say it accepts within this (--upgrade-timeout) or it is killed
 * and the old process serves on: a start-up (flags, key, certificates, shards) takes well
 * under a second; 30 s leaves room for a slow disk or a loaded machine. */
#define SRV_UPGRADE_TIMEOUT_MS_DEFAULT 30000u
/* Connections not logged in yet, per shard (--prelogin-max) and per source address per shard
 * (--prelogin-per-addr-max). An honest login takes a few round trips, so even a 10k-connection
 * reconnect storm holds a few hundred at once; with the deadlines above a source dripping bytes
 * holds at most this many slots for at most 30 s. NATed clients share an address, hence the
 * generous per-address default (also: hderp-bench logs in up to 4,096 peers at once from one
 * address); 0 is not allowed (no cap would be the old behaviour). */
#define SRV_PRELOGIN_SHARD_MAX_DEFAULT 16384u
#define SRV_PRELOGIN_ADDR_MAX_DEFAULT  4096u
#define SRV_PRELOGIN_MAX_MAX           (1u << 20)
_Static_assert(SRV_PRELOGIN_ADDR_MAX_DEFAULT <= SRV_PRELOGIN_SHARD_MAX_DEFAULT,
               "the per-address cap is within the shard's");

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

/* Frame pools per shard (server_frames.c): two classes, MTU-sized packets and the largest routed
 * frame (at least net's tail size), half of --frame-pool-mib each: the default 256 MiB gives
 * 65,536 x 2 KiB and 2,048 x 64 KiB. At least 4 MiB (1,024 small frames: tests), at most
 * 16 GiB. A pool's pages are carved lazily, so an idle server does not use the cap. */
#define SRV_FRAME_CLASSES 2u
#define SRV_FRAME_SMALL   2048u
#define SRV_FRAME_BIG                                                                              \
    (SRV_ROUTE_FRAME_MAX > DERP_CONN_TAIL_MAX ? SRV_ROUTE_FRAME_MAX : DERP_CONN_TAIL_MAX)
#define SRV_FRAME_POOL_MIB_DEFAULT 256u
#define SRV_FRAME_POOL_MIB_MIN     4u
#define SRV_FRAME_POOL_MIB_MAX     16384u
/* Of each class, 1/8 is kept for control frames (KeepAlive, Pong, ServerInfo), logins and HTTP
 * answers; a sender gets a frame while it holds less than 1/4 of what is free above that (at
 * least 32 frames), so one flooder converges to a fifth of the pool. */
#define SRV_FRAMES_RESERVE_DIV 8u
#define SRV_FRAMES_SHARE_DIV   4u
#define SRV_FRAMES_SHARE_MIN   32u
/* All connections from one source address (an IPv6 /64) together: at most 1/2 of what is free
 * above the reserve (at least SRV_FRAMES_SHARE_MIN), so many flooding connections from one
 * address converge to a third of the pool, and room is left for everyone else (NATed honest
 * clients share it too, but their frames leave at once). Twice a connection's share: one
 * connection alone is held by its own. The table of addresses starts at this many slots. */
#define SRV_FRAMES_ADDR_SHARE_DIV 2u
#define SRV_FRAME_ADDRS_INITIAL   64u
_Static_assert(SRV_FRAMES_ADDR_SHARE_DIV < SRV_FRAMES_SHARE_DIV, "an address gets more than one");
_Static_assert((SRV_FRAME_ADDRS_INITIAL & (SRV_FRAME_ADDRS_INITIAL - 1)) == 0, "masked index");
/* Accounts: one per sending client plus closed ones whose frames are still out: never more
 * than connections + frames. */
#define SRV_ACCOUNTS_MAX (2u * NET_CONNS_MAX)
/* A client's net send queue also pauses at this many frames (resumes at the low mark): small
 * packets hold a whole 2 KiB frame each, so 1 MiB of them would be ~7,000 frames. */
#define SRV_NET_HIGH_FRAMES 1024u
#define SRV_NET_LOW_FRAMES  256u

/* A ClientInfo frame larger than this is gathered in its own heap buffer (login only, freed at
 * once) instead of in net's unconsumed tail, which holds at most DERP_CONN_TAIL_MAX: derper reads
 * ClientInfo up to 256 KiB (DERP_CLIENT_INFO_LEN_MAX). */
#define SRV_LOGIN_INLINE_MAX (16u * 1024u)
_Static_assert(SRV_LOGIN_INLINE_MAX < DERP_CONN_TAIL_MAX,
               "small ClientInfo frames stay in net's tail");

/* PeerGone bookkeeping: most distinct sources one connection remembers. */
#define SRV_SOURCES_MAX 65536u
/* Their memory comes from per-shard pools (server_sources.c), never from malloc on the path of
 * a packet. A connection's keyset is a block of 16 << i slots (at most half full, 12 bytes a
 * slot); a key's subscriber list on a shard a block of 4 << i pointers (one subscriber: inline),
 * at most every connection of the shard; the shard's index of source keys has a fixed
 * SRV_SUBS_SLOTS slots (24 bytes each, allocated at shard start, at most half full: the keys
 * the shard's connections received from; a subscription past that is not made, and counted:
 * that connection then misses the key's PeerGone, as past SRV_SOURCES_MAX). */
#define SRV_KEYSET_MIN       16u
#define SRV_KEYSET_CLASSES   14u /* 16 .. 131072 slots = 2 * SRV_SOURCES_MAX */
#define SRV_SUBS_VEC_MIN     4u
#define SRV_SUBS_VEC_CLASSES 15u /* 4 .. 65536 pointers = NET_CONNS_MAX */
#define SRV_SUBS_SLOTS       (4u * NET_CONNS_MAX)
_Static_assert((SRV_KEYSET_MIN << (SRV_KEYSET_CLASSES - 1)) == 2 * SRV_SOURCES_MAX,
               "the largest keyset holds SRV_SOURCES_MAX at half load");
_Static_assert((SRV_SUBS_VEC_MIN << (SRV_SUBS_VEC_CLASSES - 1)) >= NET_CONNS_MAX,
               "a key's subscriber list holds every connection of a shard");
_Static_assert((SRV_SUBS_SLOTS & (SRV_SUBS_SLOTS - 1)) == 0, "masked index");
/* Watchers in the process (mesh peers and monitoring tools). */
#define SRV_WATCHERS_MAX 1024u
/* Connections with the mesh key per shard (--mesh-conns-max): a region is at most
 * SRV_MESH_NODES_MAX nodes, each with one watch connection here (two for a moment while it
 * reconnects), plus a monitoring tool or two; derper has no cap. Each costs a share of the frame
 * pool when it falls behind (issue 24: 1,100 of them that never read drained the pool; 32 cost
 * nothing). A shard's cap, as the frame pools are a shard's: a mesh connection lives on its key's
 * owner shard. */
#define SRV_MESH_CONNS_MAX_DEFAULT (2u * SRV_MESH_NODES_MAX)
#define SRV_MESH_CONNS_MAX_MAX     SRV_WATCHERS_MAX
/* Peer table: initial slots per shard (grows by doubling at 50% load). */
#define SRV_PEERS_INITIAL 1024u
/* Placement (server_place.c): a client moves to the shard of the peer it sends to after this
 * many packets in a row to that one peer went over the bus (a few ms of WireGuard traffic; a
 * handshake or a burst to many peers never moves anyone). */
#define SRV_PLACE_PACKETS 64u
/* The decisions a shard takes at the end of one tick (server_place_tick.c: a fixed list in the
 * shard); a client whose run ends while it is full tries again at its next packet. A tick of a
 * busy shard holds a few hundred packets, so more than a few clients whose runs end in it are
 * rare. */
#define SRV_PLACE_DUE_MAX 64u
/* Packets for a client held by its owner shard while its connection is on the way to another
 * shard; more are dropped as a full queue. The client is not backed up, only travelling (one
 * bus round trip once its sends are done), so this is eight queues' worth: a sender's burst
 * of a few milliseconds (a 100-packet burst into a one-way pair's moving receiver lost its end
 * with 32). Held only during a move (an array of pointers, malloc'd at the move). */
#define SRV_PLACE_HELD_MAX (8u * SRV_QUEUE_DEPTH)
_Static_assert(SRV_PLACE_HELD_MAX <= 65535, "srv_peer.held_count is 16 bits");
/* A guest shard's own senders' packets for a guest that arrived wait (SRV_PLACE_HELD_MAX) until
 * the owner's word that it released what it held (one bus round trip). More are dropped as a
 * full queue, not let go ahead of the owner's, for this long after the arrival; after it the
 * word was lost (a bus full even for events) and the next packet lets them all go, in order. */
#define SRV_PLACE_SETTLE_MS 1000u
/* A guest that asked its owner to call it home asks again no sooner than this (the owner says
 * no without a word when the key got a duplicate or is on its way). */
#define SRV_PLACE_ASK_MS 1000u
/* Packing (server_pack.c): a client that moved may not be moved by packing or spreading again
 * for this long (following its peer is not held back), so that nothing oscillates between a
 * packed and a spread state faster than the busy figures (HD_BUSY_INTERVAL_MS) can tell. */
#define SRV_PACK_HOLD_MS 3000u
/* ... and each shard decides at most this many moves per window, so a change of load moves a
 * few pairs per second, not every pair at once (each move holds a pair's packets briefly). */
#define SRV_PACK_MOVES_MAX 16u
#define SRV_PACK_WINDOW_MS 1000u
/* Default water marks, percent of one core: pack while the whole relay is below LOW; spread
 * while shard 0 is at HIGH or more and another shard below LOW (perf/RESULTS.md, "packing":
 * the client-like load of issue 11 costs ~40 % of a core on one shard). */
#define SRV_PACK_LOW_PCT_DEFAULT  60
#define SRV_PACK_HIGH_PCT_DEFAULT 80
/* The flags' range: the low mark is a sum over shards, so it may exceed one core (tests set
 * marks no load reaches, to pack or spread at any load). */
#define SRV_PACK_PCT_MAX 1000

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

/* Per-key accounting (server_account.c). A connection feeds its shard's tables once it has
 * relayed this many bytes since the last feed (and at each KeepAlive, and at close): one feed
 * is a scan of the two sketches, so its cost per byte relayed stays small (~2 x 128 compares
 * per 256 KiB). The sketches keep this many keys per shard each (Space-Saving: a key with more
 * than 1/128 of a shard's traffic is always in them); /debug/varz shows the top
 * SRV_ACCT_VARZ_TOP, /debug/keys the top SRV_ACCT_JSON_TOP of the merged view. */
#define SRV_ACCT_FEED_BYTES  (256u << 10)
#define SRV_ACCT_TOP_ENTRIES 128u
#define SRV_ACCT_VARZ_TOP    10u
#define SRV_ACCT_JSON_TOP    50u
/* -account-keys: most keys in the file (their exact counters: 88 B each, per shard that sees
 * them; the table has twice as many slots, allocated at the first named key on the shard), and
 * how long a key's counters outlive its last connection by default (--account-window; its
 * reconnects within this window continue them; later ones start again from zero). */
#define SRV_ACCT_KEYS_MAX  1024u
#define SRV_ACCT_SLOTS     (2 * SRV_ACCT_KEYS_MAX)
#define SRV_ACCT_WINDOW_MS (10u * 60 * 1000)
_Static_assert((SRV_ACCT_SLOTS & (SRV_ACCT_SLOTS - 1)) == 0, "masked index");

/* -rate-config "Keys": most keys listed (a shard's usage table has twice as many slots, 56 B
 * each, allocated at the first listed key it sees), and how often a shard reads the wall clock
 * for the UTC day and month the budgets count in. */
#define SRV_QUOTA_KEYS_MAX 1024u
#define SRV_QUOTA_SLOTS    (2 * SRV_QUOTA_KEYS_MAX)
#define SRV_QUOTA_CLOCK_MS 1000u
_Static_assert((SRV_QUOTA_SLOTS & (SRV_QUOTA_SLOTS - 1)) == 0, "masked index");

/* derper: the key file root uses without -c. */
#define SRV_DEFAULT_KEY_FILE "/var/lib/derper/derper.key"

/* --min-wait-us: the most latency a relay operator may trade for fewer wake-ups (1 ms: beyond
 * that a ping under load would wait longer than an idle round trip takes). */
#define SRV_MIN_WAIT_US_MAX 1000
/* --min-wait-us's default: the longest window the adaptive min-wait may use. A window gathers
 * SRV_MIN_WAIT_GATHER completions at the shard's recent rate, and none is used where that takes
 * longer than this (issue 25: a capped window held each packet of a light load for its length,
 * +100-150 us on a ping's round trip at 56-224 Mbit/s of one-frame-per-write clients, for a
 * wake-up or two saved; perf/RESULTS.md 2026-12-07). Quiet shards never wait
 * (HD_MIN_WAIT_ARM_CQES). */
#define SRV_MIN_WAIT_US_DEFAULT 100
/* The relay's min-wait is adaptive: a sleep under load gathers about this many completions at the
 * shard's recent rate (a relayed packet is about two: its receive and its send), and none where
 * that takes longer than --min-wait-us (hd_runtime_config.min_wait_gather, hd_min_wait_us). */
#define SRV_MIN_WAIT_GATHER 4
/* -verify-cache-ttl: answers cached per shard, direct-mapped (a power of two). 4,096 x 48 B =
 * 192 KiB a shard, allocated at the first answer. */
#define SRV_ADMIT_CACHE_SLOTS 4096u
_Static_assert((SRV_ADMIT_CACHE_SLOTS & (SRV_ADMIT_CACHE_SLOTS - 1)) == 0, "masked index");
/* -verify-recheck-interval: at most this many re-check requests in flight per shard (a
 * controller sees a trickle, never a burst); a re-check over it waits [1, 2) s and tries again. */
#define SRV_RECHECK_INFLIGHT_MAX 8u
#define SRV_RECHECK_BUSY_MS      1000u

#endif /* SERVER_LIMITS_H */
