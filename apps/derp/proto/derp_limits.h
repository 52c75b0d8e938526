/* derp_limits.h - every DERP protocol constant and limit, with where it comes from.
 * Header-only; any thread. Section numbers refer to docs/DERP-PROTOCOL.md, names in quotes to
 * the reference (tailscale derp/derp.go, derp/derp_client.go, derp/derpserver/derpserver.go,
 * cmd/derper, net/stun, disco/disco.go). */
#ifndef DERP_LIMITS_H
#define DERP_LIMITS_H

/* ---- Framing (§2) ---------------------------------------------------------------------------- */

/* derp.go "frameHeaderLen": type u8 + length u32 big-endian; the length excludes the header. */
#define DERP_FRAME_HEADER_LEN 5
/* derp.go "keyLen": a Curve25519 public key on the wire. */
#define DERP_KEY_LEN 32
/* derp.go "nonceLen": NaCl box nonce that prefixes every sealed blob. */
#define DERP_NONCE_LEN 24
/* NaCl box Poly1305 tag (libsodium crypto_box_MACBYTES), written before the ciphertext. */
#define DERP_BOX_MAC_LEN 16
/* §3: a sealed blob is nonce[24] || tag[16] || ciphertext. */
#define DERP_SEALED_OVERHEAD (DERP_NONCE_LEN + DERP_BOX_MAC_LEN)
/* derp.go "magic" = "DERP🔑" (8 bytes, the key emoji is F0 9F 94 91), starts ServerKey. */
#define DERP_MAGIC     "DERP\xF0\x9F\x94\x91"
#define DERP_MAGIC_LEN 8
/* derp.go "ProtocolVersion": in Derp-Version, the meta-cert serial and both JSON blobs. */
#define DERP_PROTOCOL_VERSION 2
/* derp.go "MaxPacketSize = 64<<10": packet bytes inside Send/Recv/ForwardPacket. */
#define DERP_PACKET_LEN_MAX (64 << 10)
/* derp.go "maxInfoLen = 1<<20": the largest JSON blob a client accepts in ServerInfo. */
#define DERP_INFO_LEN_MAX (1 << 20)

/* ---- Per-frame-type lengths (§2 size table, §2.1 layouts) --------------------------------------
 * "_LEN" = exact length we emit; "_LEN_MIN/_MAX" = what the receiver accepts. */

/* derp_client.go recvServerKey: readFrame(br, 1<<10, buf[40]); shorter or bad magic = abort. */
#define DERP_SERVER_KEY_LEN     (DERP_MAGIC_LEN + DERP_KEY_LEN)
#define DERP_SERVER_KEY_LEN_MIN DERP_SERVER_KEY_LEN
#define DERP_SERVER_KEY_LEN_MAX (1 << 10)
/* derpserver.go recvClientKey: "minLen = keyLen + nonceLen"; "fl > 256<<10" = long client info
 * (limits JSON resource exhaustion, golang/go#31789). The box tag is checked by the open. */
#define DERP_CLIENT_INFO_LEN_MIN (DERP_KEY_LEN + DERP_NONCE_LEN)
#define DERP_CLIENT_INFO_LEN_MAX (256 << 10)
/* derp_client.go parseServerInfo: shorter than nonceLen or longer than nonceLen+maxInfoLen. */
#define DERP_SERVER_INFO_LEN_MIN DERP_NONCE_LEN
#define DERP_SERVER_INFO_LEN_MAX (DERP_NONCE_LEN + DERP_INFO_LEN_MAX)
/* derpserver.go recvPacket / handleFrameForwardPacket: key(s) then at most MaxPacketSize. */
#define DERP_SEND_PACKET_LEN_MIN    DERP_KEY_LEN
#define DERP_SEND_PACKET_LEN_MAX    (DERP_KEY_LEN + DERP_PACKET_LEN_MAX)
#define DERP_RECV_PACKET_LEN_MIN    DERP_KEY_LEN
#define DERP_RECV_PACKET_LEN_MAX    (DERP_KEY_LEN + DERP_PACKET_LEN_MAX)
#define DERP_FORWARD_PACKET_LEN_MIN (2 * DERP_KEY_LEN)
#define DERP_FORWARD_PACKET_LEN_MAX (2 * DERP_KEY_LEN + DERP_PACKET_LEN_MAX)
/* derpserver.go setPreferred: exactly one byte, non-zero = preferred. */
#define DERP_NOTE_PREFERRED_LEN 1
/* derpserver.go handleFrameWatchConns / handleFrameClosePeer: "wrong size" otherwise. */
#define DERP_WATCH_CONNS_LEN 0
#define DERP_CLOSE_PEER_LEN  DERP_KEY_LEN
/* PeerGone = key || reason; clients accept the pre-2023 32-byte form (reason Disconnected). */
#define DERP_PEER_GONE_LEN     (DERP_KEY_LEN + 1)
#define DERP_PEER_GONE_LEN_MIN DERP_KEY_LEN
/* PeerPresent = key || ip[16] || port[2] || flags[1] = 51 bytes; clients accept >= 32 (the
 * fields after the key are optional, extra bytes ignored). */
#define DERP_PEER_PRESENT_IP_LEN    16
#define DERP_PEER_PRESENT_PORT_LEN  2
#define DERP_PEER_PRESENT_FLAGS_LEN 1
#define DERP_PEER_PRESENT_LEN                                                                      \
    (DERP_KEY_LEN + DERP_PEER_PRESENT_IP_LEN + DERP_PEER_PRESENT_PORT_LEN +                        \
     DERP_PEER_PRESENT_FLAGS_LEN)
#define DERP_PEER_PRESENT_LEN_MIN DERP_KEY_LEN
/* derpserver.go handleFramePing: "len < 8 || len > 1000" closes; only the first 8 are echoed.
 * Clients (derp_client.go) drop pings/pongs shorter than 8 and have no maximum. */
#define DERP_PING_LEN            8
#define DERP_PING_LEN_SERVER_MAX 1000
/* derp_client.go frameRestarting: reconnectIn_ms u32 BE || tryFor_ms u32 BE; shorter = dropped. */
#define DERP_RESTARTING_LEN 8
/* derp_client.go recvTimeout: "n > 1<<20" = unexpectedly large frame, connection killed.
 * So nothing we send may exceed it (§13.7). */
#define DERP_CLIENT_RECV_FRAME_LEN_MAX (1 << 20)
/* derp.go writeFrame: the client writer refuses frames > 10 MiB (local error). */
#define DERP_CLIENT_WRITE_FRAME_LEN_MAX (10 << 20)
/* Health text: anything up to the client's receive limit (the reference never sends it). */
#define DERP_HEALTH_LEN_MAX DERP_CLIENT_RECV_FRAME_LEN_MAX

/* The largest frame (header included) a reader must hold in one piece, per role and phase:
 * server before login (ClientInfo), server after login (ForwardPacket), client (1 MiB). */
#define DERP_SERVER_HELLO_FRAME_SIZE_MAX (DERP_FRAME_HEADER_LEN + DERP_CLIENT_INFO_LEN_MAX)
#define DERP_SERVER_FRAME_SIZE_MAX       (DERP_FRAME_HEADER_LEN + DERP_FORWARD_PACKET_LEN_MAX)
#define DERP_CLIENT_FRAME_SIZE_MAX       (DERP_FRAME_HEADER_LEN + DERP_CLIENT_RECV_FRAME_LEN_MAX)

/* ---- Keys (§3) ---------------------------------------------------------------------------------
 */

/* types/key: "nodekey:" / "privkey:" + 64 lowercase hex; "untyped" = the bare hex. */
#define DERP_KEY_HEX_LEN        (2 * DERP_KEY_LEN)
#define DERP_PUBKEY_PREFIX      "nodekey:"
#define DERP_PUBKEY_PREFIX_LEN  8
#define DERP_PRIVKEY_PREFIX     "privkey:"
#define DERP_PRIVKEY_PREFIX_LEN 8
#define DERP_PUBKEY_TEXT_LEN    (DERP_PUBKEY_PREFIX_LEN + DERP_KEY_HEX_LEN)
#define DERP_PRIVKEY_TEXT_LEN   (DERP_PRIVKEY_PREFIX_LEN + DERP_KEY_HEX_LEN)
/* Buffer sizes for the text forms, NUL included. */
#define DERP_KEY_HEX_SIZE      (DERP_KEY_HEX_LEN + 1)
#define DERP_PUBKEY_TEXT_SIZE  (DERP_PUBKEY_TEXT_LEN + 1)
#define DERP_PRIVKEY_TEXT_SIZE (DERP_PRIVKEY_TEXT_LEN + 1)
/* types/key/derp.go DERPMesh: 32 bytes, text exactly 64 hex digits. */
#define DERP_MESH_KEY_LEN     32
#define DERP_MESH_KEY_HEX_LEN (2 * DERP_MESH_KEY_LEN)
/* Our bound on files we read whole (derper.key, mesh PSK): they hold ~100 bytes; anything
 * bigger is the wrong file, refused before reading. */
#define DERP_KEY_FILE_SIZE_MAX (64 << 10)
/* cmd/derper writeNewConfig: atomicfile.WriteFile(path, b, 0600); MkdirAll(dir, 0777). */
#define DERP_KEY_FILE_MODE     0600
#define DERP_KEY_FILE_DIR_MODE 0777
/* §4.1 AppName is stats only: we keep this many bytes (cut at a UTF-8 boundary). */
#define DERP_APP_NAME_LEN_MAX 63

/* ---- Timing (§4, §6, §13) ------------------------------------------------------------------- */

/* derp.go "KeepAlive = 60 * time.Second"; derpserver.go adds rand [0, 5 s) jitter at connect. */
#define DERP_KEEPALIVE_INTERVAL_MS 60000
#define DERP_KEEPALIVE_JITTER_MS   5000
/* derp_client.go Recv: recvTimeout(120 * time.Second). tailscaled warns after ~125 s. */
#define DERP_CLIENT_READ_TIMEOUT_MS 120000
/* derpserver.go accept: 10 s to write ServerKey, then a fresh 10 s to receive ClientInfo. */
#define DERP_HANDSHAKE_TIMEOUT_MS 10000
/* cmd/derper -tcp-write-timeout default 2 s (regular); derpserver.go uses 30 s for mesh peers. */
#define DERP_WRITE_TIMEOUT_MS      2000
#define DERP_MESH_WRITE_TIMEOUT_MS 30000
/* derp_client.go ForwardPacket: time.AfterFunc(5*time.Second, writeTimeoutFired). */
#define DERP_FORWARD_WRITE_TIMEOUT_MS 5000
/* derphttp/mesh_client.go: retry a failed mesh watch connection every 5 s. */
#define DERP_MESH_RETRY_MS 5000
/* tailscaled pings its home DERP with a 3 s timeout after network changes (§6.5). */
#define DERP_CLIENT_PING_TIMEOUT_MS 3000
/* derpserver.go verifyClient: the admission URL call is capped at 5 s; body read <= 4 KiB. */
#define DERP_VERIFY_URL_TIMEOUT_MS 5000
#define DERP_VERIFY_URL_BODY_MAX   4096
/* derpserver.go noteClientActivity: home moves count only > 5 s after connect. */
#define DERP_HOME_MOVE_GRACE_MS 5000

/* ---- Queues and rate limits (§6) ---------------------------------------------------------------
 */

/* derpserver.go "perClientSendQueueDepth = 32": per connection, one disco and one other queue. */
#define DERP_SEND_QUEUE_DEPTH 32
/* derpserver.go sendPkt: up to 3 head-drop attempts, then the new packet is a tail drop. */
#define DERP_ENQUEUE_ATTEMPTS 3
/* derpserver.go requestPeerGoneWriteLimited: NotHere token bucket, burst 3, refill 1/s. */
#define DERP_NOT_HERE_BURST       3
#define DERP_NOT_HERE_INTERVAL_MS 1000
/* §6.9: the receive-rate burst is raised to at least one maximal SendPacket payload. */
#define DERP_RATE_BURST_MIN DERP_SEND_PACKET_LEN_MAX
/* §6.4: queue latency EWMA alpha = 0.1, kept as a fraction. */
#define DERP_QUEUE_EWMA_ALPHA_NUM 1
#define DERP_QUEUE_EWMA_ALPHA_DEN 10

/* ---- Disco detection (§6.2, disco/disco.go LooksLikeDiscoWrapper) ------------------------------
 */

/* disco.go "Magic = TS💬" (54 53 F0 9F 92 AC); a disco wrapper is magic || key[32] || nonce[24]
 * at least, so shorter payloads are never disco. */
#define DERP_DISCO_MAGIC     "TS\xF0\x9F\x92\xAC"
#define DERP_DISCO_MAGIC_LEN 6
#define DERP_DISCO_LEN_MIN   (DERP_DISCO_MAGIC_LEN + DERP_KEY_LEN + DERP_NONCE_LEN)

/* ---- TLS meta certificate and WebSocket (§1.2, §1.5) ------------------------------------------
 */

/* derpserver.go initMetacert: CN "derpkey" + 64 hex, serial = ProtocolVersion, +-30 days. */
#define DERP_META_CERT_CN_PREFIX     "derpkey"
#define DERP_META_CERT_SERIAL        DERP_PROTOCOL_VERSION
#define DERP_META_CERT_VALIDITY_DAYS 30
/* §1.5: be more liberal than coder/websocket's 32 KiB default: one full frame plus slack. */
#define DERP_WS_MESSAGE_LEN_MIN ((64 << 10) + 64)

/* ---- STUN (§10, net/stun/stun.go)
 * ---------------------------------------------------------------- */

/* cmd/derper -stun-port default. */
#define DERP_STUN_PORT 3478
/* RFC 5389 §6: type[2] length[2] cookie[4] txid[12]. */
#define DERP_STUN_HEADER_LEN 20
#define DERP_STUN_COOKIE     0x2112A442u
#define DERP_STUN_TXID_LEN   12
/* RFC 5389 §15: attribute = type[2] length[2] value, padded to 4. */
#define DERP_STUN_ATTR_HEADER_LEN  4
#define DERP_STUN_ATTR_ALIGN       4
#define DERP_STUN_ATTR_XOR_MAPPED  0x0020
#define DERP_STUN_ATTR_SOFTWARE    0x8022
#define DERP_STUN_ATTR_FINGERPRINT 0x8028
/* stun.go "software = tailnode": 8 bytes, no padding. */
#define DERP_STUN_SOFTWARE     "tailnode"
#define DERP_STUN_SOFTWARE_LEN 8
/* RFC 5389 §15.5: CRC-32 (IEEE) of the message before the attribute, XOR 0x5354554e. */
#define DERP_STUN_FINGERPRINT_XOR 0x5354554Eu
#define DERP_STUN_FINGERPRINT_LEN (DERP_STUN_ATTR_HEADER_LEN + 4)
/* stun.go Request(): header + SOFTWARE(4+8) + FINGERPRINT(8). */
#define DERP_STUN_REQUEST_LEN                                                                      \
    (DERP_STUN_HEADER_LEN + DERP_STUN_ATTR_HEADER_LEN + DERP_STUN_SOFTWARE_LEN +                   \
     DERP_STUN_FINGERPRINT_LEN)
/* Binding success: header + XOR-MAPPED-ADDRESS (4 + reserved + family + port + address). */
#define DERP_STUN_XOR_MAPPED_V4_LEN 8
#define DERP_STUN_XOR_MAPPED_V6_LEN 20
#define DERP_STUN_RESPONSE_V4_LEN                                                                  \
    (DERP_STUN_HEADER_LEN + DERP_STUN_ATTR_HEADER_LEN + DERP_STUN_XOR_MAPPED_V4_LEN)
#define DERP_STUN_RESPONSE_V6_LEN                                                                  \
    (DERP_STUN_HEADER_LEN + DERP_STUN_ATTR_HEADER_LEN + DERP_STUN_XOR_MAPPED_V6_LEN)
#define DERP_STUN_RESPONSE_LEN_MAX DERP_STUN_RESPONSE_V6_LEN
/* stunserver.go: reads datagrams of up to 64 KiB. */
#define DERP_STUN_DATAGRAM_LEN_MAX (64 << 10)

/* ---- Relationships
 * ------------------------------------------------------------------------------- */

_Static_assert(sizeof(DERP_MAGIC) - 1 == DERP_MAGIC_LEN, "magic is 8 bytes");
_Static_assert(sizeof(DERP_DISCO_MAGIC) - 1 == DERP_DISCO_MAGIC_LEN, "disco magic is 6 bytes");
_Static_assert(sizeof(DERP_STUN_SOFTWARE) - 1 == DERP_STUN_SOFTWARE_LEN, "tailnode is 8 bytes");
_Static_assert(DERP_STUN_SOFTWARE_LEN % DERP_STUN_ATTR_ALIGN == 0, "SOFTWARE needs no padding");
_Static_assert(sizeof(DERP_PUBKEY_PREFIX) - 1 == DERP_PUBKEY_PREFIX_LEN, "nodekey: prefix");
_Static_assert(sizeof(DERP_PRIVKEY_PREFIX) - 1 == DERP_PRIVKEY_PREFIX_LEN, "privkey: prefix");
_Static_assert(DERP_SERVER_KEY_LEN == 40, "ServerKey payload is magic || key (Appendix A)");
_Static_assert(DERP_SERVER_KEY_LEN <= DERP_SERVER_KEY_LEN_MAX, "our ServerKey fits the client");
/* The spec's "41 bytes" (and 0x29 in Appendix C) is an arithmetic slip: the layout it gives,
 * and derpserver.go sendPeerPresent (keyLen + 16 + 2 + 1), make 51. */
_Static_assert(DERP_PEER_PRESENT_LEN == 51, "PeerPresent is key || ip[16] || port[2] || flags");
_Static_assert(DERP_PEER_GONE_LEN == 33, "PeerGone is 33 bytes (Appendix C)");
_Static_assert(DERP_DISCO_LEN_MIN == 62, "disco: >= 62 bytes (§6.2)");
_Static_assert(DERP_CLIENT_INFO_LEN_MIN + DERP_BOX_MAC_LEN <= DERP_CLIENT_INFO_LEN_MAX,
               "an empty sealed ClientInfo fits");
_Static_assert(DERP_RECV_PACKET_LEN_MAX == 65568, "RecvPacket max is src[32] || 64 KiB (§13.7)");
_Static_assert(DERP_FORWARD_PACKET_LEN_MAX <= DERP_CLIENT_RECV_FRAME_LEN_MAX,
               "every packet frame is below the client's frame limit");
_Static_assert(DERP_CLIENT_INFO_LEN_MAX <= DERP_CLIENT_RECV_FRAME_LEN_MAX,
               "ClientInfo bound is below the generic frame bound");
_Static_assert(DERP_CLIENT_RECV_FRAME_LEN_MAX <= DERP_CLIENT_WRITE_FRAME_LEN_MAX,
               "what a client reads it could also write");
_Static_assert(DERP_SERVER_FRAME_SIZE_MAX <= DERP_SERVER_HELLO_FRAME_SIZE_MAX,
               "a server reassembly buffer sized for ClientInfo holds any later frame");
_Static_assert(DERP_PING_LEN <= DERP_PING_LEN_SERVER_MAX, "ping bounds are ordered");
_Static_assert(DERP_KEEPALIVE_INTERVAL_MS + DERP_KEEPALIVE_JITTER_MS < DERP_CLIENT_READ_TIMEOUT_MS,
               "a keep-alive always arrives before the client's read timeout (§13.10)");
_Static_assert(DERP_RATE_BURST_MIN == 65568, "rate burst floor is 65536 + 32 (§6.9)");
_Static_assert(DERP_STUN_REQUEST_LEN == 40, "Tailscale STUN request is 40 bytes (Appendix B)");
_Static_assert(DERP_STUN_RESPONSE_V4_LEN == 32 && DERP_STUN_RESPONSE_V6_LEN == 44,
               "STUN reply sizes (Appendix B)");
_Static_assert(DERP_WS_MESSAGE_LEN_MIN >= DERP_FRAME_HEADER_LEN + DERP_SEND_PACKET_LEN_MAX,
               "a WebSocket message can carry a maximal SendPacket frame");
_Static_assert(DERP_APP_NAME_LEN_MAX + 1 <= DERP_CLIENT_INFO_LEN_MAX, "AppName copy is bounded");
_Static_assert(DERP_SEND_QUEUE_DEPTH > 0 && DERP_ENQUEUE_ATTEMPTS > 0, "queues are not empty");

#endif /* DERP_LIMITS_H */
