/* wgr.h - hderp-wgrelay: a relay for stock WireGuard peers (no crypto on the relay).
 *
 * The pure parts, unit-tested and fuzzed without sockets: the packet classifier and MAC1
 * (wgr_proto.c), the peers file (wgr_peers.c) and the routing table (wgr_table.c), which takes
 * one datagram and its source and says where it goes (or why it is dropped). The app
 * (wgr_main.c) is the I/O around them. Message layouts: the WireGuard paper, section 5.4, and
 * wireguard.com/protocol. */
#ifndef WGR_H
#define WGR_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <hd/hd.h>

/* ---------------------------------------------------------------- limits */

#define WGR_KEY_LEN   32u   /* Curve25519 public key */
#define WGR_MAC_LEN   16u   /* MAC1, MAC2: BLAKE2s-128 */
#define WGR_NAME_MAX  32u   /* a peer's name in the peers file, with its NUL */
#define WGR_PEERS_MAX 4096u /* registered peers (an initiation is checked against each: O(n)) */
#define WGR_ALLOW_MAX 64u   /* names on one peer's allow list */
/* Index table: one entry per session index a peer chose (two per completed handshake) and one
 * per initiation waiting for its response. Open addressing, load kept under 3/4. */
#define WGR_INDEX_SLOTS    65536u
#define WGR_INDEX_MAX      (WGR_INDEX_SLOTS / 4u * 3u)
#define WGR_PENDING_MAX    8192u /* initiations waiting for a response, all sources together */
#define WGR_INDEX_PER_PEER 256u  /* live indexes one peer may hold (its sessions, all partners) */
/* WireGuard's timers (paper section 6.1): a keypair is rejected after REJECT_AFTER_TIME, an
 * initiation is retried (with a new index) after REKEY_TIMEOUT. A session index cannot be in use
 * after REJECT_AFTER_TIME + REKEY_TIMEOUT; an unanswered initiation is stale after 2 retries. */
#define WGR_REJECT_AFTER_MS  180000u
#define WGR_REKEY_TIMEOUT_MS 5000u
#define WGR_LIVE_AGE_MS      (WGR_REJECT_AFTER_MS + WGR_REKEY_TIMEOUT_MS)
#define WGR_PENDING_AGE_MS   (2u * WGR_REKEY_TIMEOUT_MS)
/* A peer's learned address is forgotten after three keypair lifetimes of silence. */
#define WGR_ADDR_AGE_MS (3u * WGR_REJECT_AFTER_MS)
/* An initiation for a peer whose address is not known yet goes to the sources of recent
 * initiations that are not known either (at most WGR_CANDIDATES_MAX, seen in the last
 * WGR_CANDIDATE_AGE_MS): the one that is that peer answers, the others cannot decrypt it and stay
 * silent. This is how two peers behind NAT meet the first time. */
#define WGR_CANDIDATES_MAX   8u
#define WGR_CANDIDATE_AGE_MS (3u * WGR_REKEY_TIMEOUT_MS)
/* Per-source handshake limit: wireguard-go's own (ratelimiter.go: 20 per second, burst 5),
 * per IP address; a table of buckets, a source that collides takes the slot over. */
#define WGR_RATE_SLOTS   4096u
#define WGR_RATE_PER_S   20u
#define WGR_RATE_BURST   5u
#define WGR_DATAGRAM_MAX 1500u /* what net_udp_send sends; a WireGuard packet fits a 1500 MTU */
_Static_assert((WGR_INDEX_SLOTS & (WGR_INDEX_SLOTS - 1)) == 0, "a mask indexes the table");
_Static_assert((WGR_RATE_SLOTS & (WGR_RATE_SLOTS - 1)) == 0, "a mask indexes the table");
_Static_assert(WGR_PEERS_MAX < 0xffffu, "peer ids are u16 with a sentinel");
_Static_assert(WGR_PENDING_MAX < WGR_INDEX_MAX, "pending entries live in the index table");

/* ---------------------------------------------------------------- wire format (wgr_proto.c) */

enum wgr_type {
    WGR_INITIATION = 1, /* 148 bytes: type, sender, ephemeral, static, timestamp, mac1, mac2 */
    WGR_RESPONSE = 2,   /* 92 bytes: type, sender, receiver, ephemeral, empty, mac1, mac2 */
    WGR_COOKIE = 3,     /* 64 bytes: type, receiver, nonce, cookie */
    WGR_DATA = 4,       /* >= 32 bytes: type, receiver, counter, packet (padded) + tag */
};
#define WGR_INITIATION_LEN  148u
#define WGR_RESPONSE_LEN    92u
#define WGR_COOKIE_LEN      64u
#define WGR_DATA_MIN_LEN    32u
#define WGR_INITIATION_MAC1 116u /* offset of mac1: it covers the bytes before it */
#define WGR_RESPONSE_MAC1   60u

/* The type of a well-formed WireGuard message (exact length, zero reserved bytes, a data
 * message of at least 32 bytes), or 0 for anything else. */
unsigned wgr_classify(const uint8_t *p, size_t len);
static inline uint32_t wgr_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t wgr_le64(const uint8_t *p)
{
    return (uint64_t)wgr_le32(p) | (uint64_t)wgr_le32(p + 4) << 32;
}
/* HASH("mac1----" || pub): the key of MAC1 for messages to the owner of pub. */
void wgr_mac1_key(const uint8_t pub[WGR_KEY_LEN], uint8_t key[WGR_KEY_LEN]);
/* Whether msg's MAC1 (at mac1_off, over msg[0..mac1_off)) was made with key. */
bool wgr_mac1_ok(const uint8_t key[WGR_KEY_LEN], const uint8_t *msg, size_t mac1_off);
/* Make msg's MAC1 (tests, the load generator). */
void wgr_mac1_put(const uint8_t key[WGR_KEY_LEN], uint8_t *msg, size_t mac1_off);
/* A base64 WireGuard key (44 characters, as `wg genkey | wg pubkey` prints). 0 or -EINVAL. */
int wgr_key_parse(const char *s, uint8_t key[WGR_KEY_LEN]);

/* A source address (IPv4 or IPv6). */
struct wgr_addr {
    union {
        struct sockaddr sa;
        struct sockaddr_in in4;
        struct sockaddr_in6 in6;
    };
    uint32_t len;
};
bool wgr_addr_eq(const struct wgr_addr *a, const struct wgr_addr *b);

/* ---------------------------------------------------------------- cookies (wgr_cookie.c) */

#define WGR_COOKIE_SECRET_MS 120000u /* the paper: the cookie secret changes every two minutes */
struct wgr_cookies {
    uint8_t secret[2][32]; /* the current one, the one before */
    uint64_t rotated_ms;   /* 0: never (no cookie is valid yet) */
};
/* HASH("cookie--" || pub): the key of cookie replies on behalf of the owner of pub. */
void wgr_cookie_key(const uint8_t pub[WGR_KEY_LEN], uint8_t key[WGR_KEY_LEN]);
/* A new secret when the current one is two minutes old (or none). */
void wgr_cookies_rotate(struct wgr_cookies *c, uint64_t now_ms);
/* Whether an initiation's MAC2 was made with the cookie of its source (either secret). */
bool wgr_mac2_ok(const struct wgr_cookies *c, const uint8_t *msg, const struct wgr_addr *from);
/* The cookie reply to init from `from`, as its responder (cookie_key: wgr_cookie_key of the
 * responder) would send it. */
void wgr_cookie_reply(const struct wgr_cookies *c, const uint8_t *init, const struct wgr_addr *from,
                      const uint8_t cookie_key[WGR_KEY_LEN], uint8_t out[WGR_COOKIE_LEN]);
/* The initiator's side (tests, the load generator): the cookie out of a reply (0 or -EBADMSG),
 * and an initiation's MAC2 made with it. */
int wgr_cookie_open(const uint8_t reply[WGR_COOKIE_LEN], const uint8_t cookie_key[WGR_KEY_LEN],
                    const uint8_t mac1[WGR_MAC_LEN], uint8_t cookie[WGR_MAC_LEN]);
void wgr_mac2_put(const uint8_t cookie[WGR_MAC_LEN], uint8_t *msg);

/* ---------------------------------------------------------------- the peers file (wgr_peers.c) */

#define WGR_PEER_NONE 0xffffu
struct wgr_peer {
    uint8_t pub[WGR_KEY_LEN];
    uint8_t mac1_key[WGR_KEY_LEN];
    uint8_t cookie_key[WGR_KEY_LEN];
    char name[WGR_NAME_MAX];
    bool allow_any; /* no allow list on its line: it may reach every registered peer */
    uint16_t allow_count;
    uint16_t allow[WGR_ALLOW_MAX]; /* peer ids */
};
/* An immutable list (a snapshot shared by the shards; reloaded as a whole). */
struct wgr_peers {
    struct hd_snap snap;
    uint32_t count;
    struct wgr_peer peer[];
};
/* Parse a peers file's text: one peer a line, `pubkey [name] [allowed-peer...]`, '#' starts a
 * comment; an allowed peer is named by its name or its key. Returns the list (one reference) or
 * NULL with the reason and the line in err. */
struct wgr_peers *wgr_peers_parse(const char *text, size_t len, char *err, size_t err_size);
/* The same from a file (err names the file). */
struct wgr_peers *wgr_peers_load(const char *path, char *err, size_t err_size);
/* Both may talk: each allows the other (a peer never talks to itself). */
bool wgr_pair_allowed(const struct wgr_peers *ps, unsigned a, unsigned b);
/* The id of the peer with key pub, or WGR_PEER_NONE. */
unsigned wgr_peer_find(const struct wgr_peers *ps, const uint8_t pub[WGR_KEY_LEN]);
/* The id of the peer whose MAC1 msg carries, or WGR_PEER_NONE. */
unsigned wgr_peer_by_mac1(const struct wgr_peers *ps, const uint8_t *msg, size_t mac1_off);

/* ---------------------------------------------------------------- routing (wgr_table.c) */

/* Why a datagram was dropped, one counter each (docs/WGRELAY.md, metrics). */
#define WGR_DROPS(X)                                                                               \
    X(malformed)       /* not a WireGuard message (classifier) */                                  \
    X(mac1_unknown)    /* an initiation whose MAC1 names no registered peer */                     \
    X(response_mac1)   /* a response whose MAC1 names no registered peer (unregistered sender) */  \
    X(pair_refused)    /* the two peers do not allow each other */                                 \
    X(rate_limited)    /* over the per-source handshake rate */                                    \
    X(no_session)      /* a response, cookie or data for an index the relay does not know */       \
    X(no_route)        /* an initiation for a peer with no known address and no candidate */       \
    X(stale_source)    /* data from a new address that did not advance the counter (a replay) */   \
    X(table_full)      /* the index table or the pending initiations are at their bound */         \
    X(peer_full)       /* a peer holds WGR_INDEX_PER_PEER indexes already */                       \
    X(index_collision) /* a new index equal to a live one of another session */                    \
    X(self)            /* an initiation to the peer that sent it */                                \
    X(peer_rate)       /* a peer sending data over --peer-rate */                                  \
    X(no_frame)        /* a datagram for the table's shard found no frame or a full bus */         \
    X(send_failed)     /* the socket refused the send (every send slot in flight) */

enum wgr_drop {
#define WGR_DROP_ENUM(n) WGR_DROP_##n,
    WGR_DROPS(WGR_DROP_ENUM)
#undef WGR_DROP_ENUM
        WGR_DROP_COUNT
};
extern const char *const wgr_drop_names[WGR_DROP_COUNT];

struct wgr_stats {
    uint64_t received, forwarded, initiations, responses, cookies, data;
    uint64_t broadcast_sends, roamed, sessions, expired, cookies_sent, cookie_proven;
    uint64_t routed; /* datagrams a shard handed to the table's shard over the bus */
    uint64_t drops[WGR_DROP_COUNT];
};

struct wgr_table;
/* Where a datagram goes: up to WGR_CANDIDATES_MAX addresses (one but for a broadcast
 * initiation), or none and drop says why. */
struct wgr_verdict {
    unsigned count;
    int drop; /* enum wgr_drop, or -1 */
    struct wgr_addr to[WGR_CANDIDATES_MAX];
    bool cookie; /* send reply (a cookie reply) back to the source (with drop rate_limited) */
    uint8_t reply[WGR_COOKIE_LEN];
};
/* The table with `slots` index slots (a power of two >= 16; WGR_INDEX_SLOTS: about 5 MiB,
 * allocate at start-up; tests and the fuzzer use small ones). peers: borrowed, see
 * wgr_table_set_peers. */
struct wgr_table *wgr_table_create(const struct wgr_peers *peers, unsigned slots);
void wgr_table_destroy(struct wgr_table *t);
/* A new peers list (a reload): what was learned moves to the peers that are still there, by
 * key; sessions of a removed peer or of a pair no longer allowed are forgotten. peers is
 * borrowed until the next call or destroy. */
void wgr_table_set_peers(struct wgr_table *t, const struct wgr_peers *peers);
/* Decide one datagram from `from` at now_ms; counts into st. */
void wgr_table_input(struct wgr_table *t, const uint8_t *p, size_t len, const struct wgr_addr *from,
                     uint64_t now_ms, struct wgr_verdict *v, struct wgr_stats *st);
/* Forget what has aged (call about once a second). */
void wgr_table_sweep(struct wgr_table *t, uint64_t now_ms, struct wgr_stats *st);
/* Tests: live and pending entries, and a peer's learned address (false: none). */
unsigned wgr_table_live_count(const struct wgr_table *t);
unsigned wgr_table_pending_count(const struct wgr_table *t);
/* Live and pending entries together stay at most this (3/4 of the slots). */
unsigned wgr_table_live_max(const struct wgr_table *t);
bool wgr_table_peer_addr(const struct wgr_table *t, unsigned peer, struct wgr_addr *out);
/* Over the handshake rate, answer with a cookie reply for the responder (on) or drop (off, the
 * default of a new table). */
void wgr_table_set_cookies(struct wgr_table *t, bool on);
/* Set the handshake rate per source (per second, burst); 0 turns the limit off. */
void wgr_table_set_rate(struct wgr_table *t, uint32_t per_s, uint32_t burst);
/* Set the data each peer may send through the relay (bytes per second, burst in bytes); 0 turns
 * the limit off (the default). */
void wgr_table_set_peer_rate(struct wgr_table *t, uint64_t bytes_per_s, uint64_t burst_bytes);

#endif /* WGR_H */
