/* fake_server.h - a small fake DERP server on net/ for the client tests: answers the upgrade
 * exactly as derper does (101 + ServerKey in one write, nothing for fast start), opens ClientInfo,
 * seals ServerInfo, echoes SendPacket as RecvPacket from the sender, answers Ping with Pong,
 * delivers ForwardPacket, answers WatchConns with a PeerPresent of the watcher. Misbehaviours
 * for negative tests are switched on in struct fake_opts. Test support only: runs on one shard,
 * allocates freely. */
#ifndef FAKE_SERVER_H
#define FAKE_SERVER_H

#include <stdbool.h>
#include <stdint.h>

#include "derp_proto.h"
#include <hd/net.h>

struct fake_opts {
    bool close_at_accept;       /* close each connection as soon as it is accepted */
    bool close_after_101;       /* send the 101 (no ServerKey), then close */
    bool never_answer;          /* read the request, answer nothing */
    uint16_t status;            /* answer with this status instead of 101 (e.g. 426) */
    bool bad_magic;             /* ServerKey with a broken magic */
    bool server_info_wrong_key; /* ServerInfo sealed with another server key */
    bool send_101_always;       /* send the 101 to fast-start clients too (a server bug) */
    bool split_101_and_key;     /* ServerKey 5 ms after the 101, not in the same write */
    uint32_t dribble; /* > 0: output up to ServerInfo leaves in chunks of this size, 1 per ms */
    bool push_extras; /* after ServerInfo push every S->C frame type (see .c) */
    /* After ServerInfo, what a relay with several sends in flight on one socket writes when the
     * first is cut short (Hyper-DERP, issue 11): FAKE_CUT bytes of RecvPacket A, all of
     * RecvPacket B, then the rest of A. B's payload is FAKE_DESYNC_BYTE throughout, so the
     * client reads a header of that byte 5 times: type 0xab, length 0xabababab. */
    bool interleave_partial;
    struct derp_mesh_key mesh_key; /* all zero: no mesh */
};

struct fake_stats {
    unsigned accepts, requests, logins;
    bool fast_start_header;
    bool info_with_request; /* ClientInfo was in the same receive as the request head */
    bool got_client_info;
    char path[64], host[64], upgrade[32], extra[32]; /* request line/headers seen */
    struct derp_pubkey client_key;
    struct derp_client_info info;
    bool mesh; /* ClientInfo carried our mesh key */
    unsigned packets, forwards, pings, pongs, preferred_frames, watches, close_peers, skipped;
    bool preferred;
    uint8_t last_pong[DERP_PING_LEN];
    struct derp_pubkey close_peer_key;
    uint64_t login_stream_bytes; /* ServerKey + ServerInfo frames: the DERP stream before extras */
};

/* What push_extras sends (the client test checks each arrives intact). */
#define FAKE_HEALTH_TEXT    "disk is full"
#define FAKE_BIG_HEALTH_LEN (200u * 1024u) /* > one pool frame: heap assembly */
#define FAKE_UNKNOWN_TYPE   0x30
#define FAKE_UNKNOWN_LEN    (100u * 1000u) /* skipped by streaming */
#define FAKE_BIG_PACKET_LEN DERP_PACKET_LEN_MAX
#define FAKE_RESTART_IN_MS  1
#define FAKE_RESTART_TRY_MS 2
#define FAKE_DESYNC_LEN     1400u /* payload of A and B */
#define FAKE_DESYNC_BYTE    0xabu
#define FAKE_CUT            700u /* bytes of A before B */
extern const uint8_t fake_ping_data[DERP_PING_LEN];
extern const struct derp_pubkey fake_peer_key; /* PeerGone / PeerPresent / big packet src */

/* Listen on 127.0.0.1:0 on shard s. The keypair is borrowed for the server's life. */
int fake_server_start(struct hd_shard *s, const struct fake_opts *opts,
                      const struct derp_keypair *kp, struct fake_stats *stats);
const struct net_addr *fake_server_addr(void);
/* Stop listening and close every connection (shard_stop). */
void fake_server_stop(void);

#endif /* FAKE_SERVER_H */
