/* derp_frame.h - DERP framing (§2): frame header, per-type length policy, encoders into caller
 * buffers, zero-copy decoders returning views into the input, and an incremental stream splitter.
 * Pure functions over bytes: no sockets, no allocation; any thread (a splitter belongs to one
 * connection). Spec references are to docs/DERP-PROTOCOL.md. */
#ifndef DERP_FRAME_H
#define DERP_FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "derp_addr.h"
#include "derp_limits.h"

/* §2.1. 0x0b-0x0f and > 0x15 are unassigned; receivers skip them. */
enum derp_frame_type {
    DERP_FRAME_SERVER_KEY = 0x01,     /* S->C magic[8] || serverPub[32] || ignored */
    DERP_FRAME_CLIENT_INFO = 0x02,    /* C->S clientPub[32] || nonce[24] || box(JSON) */
    DERP_FRAME_SERVER_INFO = 0x03,    /* S->C nonce[24] || box(JSON) */
    DERP_FRAME_SEND_PACKET = 0x04,    /* C->S dstPub[32] || packet */
    DERP_FRAME_RECV_PACKET = 0x05,    /* S->C srcPub[32] || packet */
    DERP_FRAME_KEEP_ALIVE = 0x06,     /* S->C empty */
    DERP_FRAME_NOTE_PREFERRED = 0x07, /* C->S 1 byte, non-zero = home DERP */
    DERP_FRAME_PEER_GONE = 0x08,      /* S->C peerPub[32] || reason[1] */
    DERP_FRAME_PEER_PRESENT = 0x09,   /* S->C peerPub[32] || ip[16] || port[2] || flags[1] */
    DERP_FRAME_FORWARD_PACKET = 0x0a, /* C->S mesh: srcPub[32] || dstPub[32] || packet */
    DERP_FRAME_WATCH_CONNS = 0x10,    /* C->S mesh: empty */
    DERP_FRAME_CLOSE_PEER = 0x11,     /* C->S mesh: targetPub[32] */
    DERP_FRAME_PING = 0x12,           /* both: 8 opaque bytes */
    DERP_FRAME_PONG = 0x13,           /* both: the 8 bytes of the Ping */
    DERP_FRAME_HEALTH = 0x14,         /* S->C UTF-8 problem text, empty = healthy */
    DERP_FRAME_RESTARTING = 0x15,     /* S->C reconnectIn_ms[4] || tryFor_ms[4] */
};

/* §2.1 PeerGone reasons. MESH_CONN_BROKE is client-internal and never goes on the wire. */
enum derp_peer_gone_reason {
    DERP_PEER_GONE_DISCONNECTED = 0x00,
    DERP_PEER_GONE_NOT_HERE = 0x01,
    DERP_PEER_GONE_MESH_CONN_BROKE = 0xF0,
};

/* §2.1 PeerPresent flags. IS_REGULAR is sent alone, when none of the others apply. */
#define DERP_PEER_PRESENT_IS_REGULAR   0x01
#define DERP_PEER_PRESENT_IS_MESH_PEER 0x02
#define DERP_PEER_PRESENT_IS_PROBER    0x04
#define DERP_PEER_PRESENT_NOT_IDEAL    0x08

/* Who reads the stream and at which phase: the length policy differs (§2 size table). */
enum derp_reader_mode {
    DERP_READER_SERVER_HELLO, /* server, first frame: must be ClientInfo */
    DERP_READER_SERVER,       /* server after ClientInfo */
    DERP_READER_CLIENT_HELLO, /* client, first frame: must be ServerKey (not fast start) */
    DERP_READER_CLIENT,       /* client after ServerKey, or from the start with fast start */
};

/* What a reader does with a frame whose header it has seen (derp_frame_check). */
enum derp_frame_action {
    DERP_FRAME_DELIVER = 0, /* hand the whole frame to the protocol handler */
    DERP_FRAME_SKIP = 1,    /* not for this reader (unknown type etc.): discard, streaming */
    DERP_FRAME_DROP = 2,    /* client only: known type too short to use; the reference logs
                             * "[unexpected] dropping short ..." and keeps the connection */
};

/* ---- Header --------------------------------------------------------------------------------- */

/* Writes type || len (BE) into buf. Returns DERP_FRAME_HEADER_LEN or -ENOSPC. */
ssize_t derp_frame_header_encode(uint8_t *buf, size_t buf_size, uint8_t type, uint32_t len);
/* Reads a header from buf. Returns 0, or -EAGAIN if fewer than 5 bytes are available. */
int derp_frame_header_decode(const uint8_t *buf, size_t buf_len, uint8_t *type, uint32_t *len);
/* Frame type name for logs ("SendPacket"; "unknown" for unassigned types). */
const char *derp_frame_type_name(uint8_t type);

/* ---- Per-type length policy ------------------------------------------------------------------
 * Decides from a header alone (before any payload is read, so a 4 GiB length costs nothing) what
 * the reader does. `mesh` = the connection authenticated with the mesh key (server modes only).
 * Returns a derp_frame_action, or an error that closes the connection (§6.1, §4 step 2):
 *   -EPROTO   wrong first frame type; length below the type's minimum; a length that must be
 *             exact (NotePreferred 1, WatchConns 0, ClosePeer 32) is not
 *   -EMSGSIZE length above the type's maximum (client: any frame > 1 MiB)
 *   -EPERM    ForwardPacket / WatchConns / ClosePeer from a non-mesh connection (§13.16) */
int derp_frame_check(enum derp_reader_mode mode, bool mesh, uint8_t type, uint32_t len);

/* ---- Stream splitter ----------------------------------------------------------------------------
 * Fed the bytes of one connection as they arrive, split anywhere. Each call looks at the bytes
 * starting at the current frame boundary (plus the splitter's skip state) and reports one step.
 * The caller drops `consumed` bytes from the front and calls again; on NEED it keeps the
 * unconsumed bytes (a frame prefix, at most derp_splitter_frame_size_max) and calls again once
 * more bytes have been appended. Skipped payloads are discarded as they stream past, never
 * buffered (§13.13). Mode moves from *_HELLO to the steady mode after the hello frame is
 * delivered; the caller must finish handling a delivered frame (e.g. set mesh after ClientInfo)
 * before asking for the next. */
enum derp_split_kind {
    DERP_SPLIT_NEED,  /* need `need` more bytes; consumed = 0 */
    DERP_SPLIT_FRAME, /* one whole frame: payload at buf + payload_offset, `len` bytes */
    DERP_SPLIT_SKIP,  /* `consumed` bytes of a skipped (or dropped) frame discarded */
};

struct derp_split {
    enum derp_split_kind kind;
    bool header_known;     /* type and len are valid (FRAME, SKIP, NEED past the header) */
    bool dropped;          /* SKIP of a DERP_FRAME_DROP frame (client: log once per frame) */
    bool frame_start;      /* FRAME, or the first SKIP step of a frame: meter/log it now */
    uint8_t type;          /* frame type */
    uint32_t len;          /* payload length */
    size_t payload_offset; /* FRAME: always DERP_FRAME_HEADER_LEN */
    size_t consumed;       /* bytes to drop from the front of buf */
    size_t need;           /* NEED: bytes missing; while skipping with nothing buffered, 1 */
};

struct derp_splitter {
    enum derp_reader_mode mode;
    bool mesh;
    int error;          /* sticky: once a frame was refused, the stream is dead */
    uint8_t skip_type;  /* frame being discarded */
    bool skip_dropped;  /* it is a DROP, not a SKIP */
    uint32_t skip_len;  /* its payload length */
    uint32_t skip_left; /* payload bytes still to discard */
};

void derp_splitter_init(struct derp_splitter *s, enum derp_reader_mode mode);
/* Server: after admission, whether the client is a mesh peer (allows mesh-only frames). */
void derp_splitter_set_mesh(struct derp_splitter *s, bool mesh);
/* The largest whole frame (header included) this splitter can ask the caller to hold. */
size_t derp_splitter_frame_size_max(const struct derp_splitter *s);
/* Discarding a skipped frame's payload: the next step reports no new header (header_known is
 * set then too, for the frame being skipped). */
static inline bool derp_splitter_skipping(const struct derp_splitter *s)
{
    return s->skip_left > 0;
}
/* One step over buf (borrowed, may be empty). Returns 0 with *out filled, or the
 * derp_frame_check error (-EPROTO, -EMSGSIZE, -EPERM), sticky: the connection must close. */
int derp_splitter_next(struct derp_splitter *s, const uint8_t *buf, size_t buf_len,
                       struct derp_split *out);

/* ---- Decoders
 * ------------------------------------------------------------------------------------ Input: one
 * frame's payload (borrowed). Output: views into it (no copies) valid while it lives. Each checks
 * the lengths its receiver requires (the same policy as derp_frame_check, except the server-only
 * Ping maximum, which derp_frame_check applies). Errors: -EPROTO (short, bad magic, wrong exact
 * length), -EMSGSIZE (too long). */

/* Send/Recv/ForwardPacket. Absent keys are NULL (Send has no src, Recv no dst). */
struct derp_packet {
    const uint8_t *src_key;
    const uint8_t *dst_key;
    const uint8_t *data;
    size_t data_len;
};

struct derp_client_info_frame {
    const uint8_t *client_key; /* 32 bytes */
    const uint8_t *sealed;     /* nonce[24] || tag[16] || ciphertext */
    size_t sealed_len;
};

struct derp_server_info_frame {
    const uint8_t *sealed; /* nonce[24] || tag[16] || ciphertext */
    size_t sealed_len;
};

struct derp_peer_gone {
    const uint8_t *key;
    uint8_t reason; /* DERP_PEER_GONE_DISCONNECTED for the old 32-byte form */
};

struct derp_peer_present {
    const uint8_t *key;
    bool has_addr; /* ip+port present (servers since 2023-08) */
    bool has_flags;
    struct derp_addr addr;
    uint8_t flags;
};

struct derp_restarting {
    uint32_t reconnect_in_ms;
    uint32_t try_for_ms;
};

/* Client side: 40..1024 bytes, magic checked; *server_key points at the 32 key bytes. */
int derp_frame_server_key_decode(const uint8_t *p, size_t len, const uint8_t **server_key);
/* Server side: 56..256 KiB. */
int derp_frame_client_info_decode(const uint8_t *p, size_t len, struct derp_client_info_frame *out);
/* Client side: 24..24+1 MiB. */
int derp_frame_server_info_decode(const uint8_t *p, size_t len, struct derp_server_info_frame *out);
/* Server side: 32..32+65536. */
int derp_frame_send_packet_decode(const uint8_t *p, size_t len, struct derp_packet *out);
/* Client side: >= 32 (the reference client has no packet maximum below its 1 MiB frame cap). */
int derp_frame_recv_packet_decode(const uint8_t *p, size_t len, struct derp_packet *out);
/* Server side: 64..64+65536. */
int derp_frame_forward_packet_decode(const uint8_t *p, size_t len, struct derp_packet *out);
/* Server side: exactly 1 byte; any non-zero byte = preferred. */
int derp_frame_note_preferred_decode(const uint8_t *p, size_t len, bool *preferred);
/* Client side: >= 32; trailing bytes after the reason ignored. */
int derp_frame_peer_gone_decode(const uint8_t *p, size_t len, struct derp_peer_gone *out);
/* Client side: >= 32; ip/port (bytes 32..50) and flags (byte 50) optional, extra ignored. */
int derp_frame_peer_present_decode(const uint8_t *p, size_t len, struct derp_peer_present *out);
/* Server side: exactly 0 bytes. */
int derp_frame_watch_conns_decode(size_t len);
/* Server side: exactly 32 bytes. */
int derp_frame_close_peer_decode(const uint8_t *p, size_t len, const uint8_t **target_key);
/* Both sides: >= 8; *data points at the first 8 bytes (all a Pong echoes). */
int derp_frame_ping_decode(const uint8_t *p, size_t len, const uint8_t **data);
int derp_frame_pong_decode(const uint8_t *p, size_t len, const uint8_t **data);
/* Client side: any length up to 1 MiB; the text is not NUL-terminated. */
int derp_frame_health_decode(const uint8_t *p, size_t len, const char **text, size_t *text_len);
/* Client side: >= 8; extra bytes ignored. */
int derp_frame_restarting_decode(const uint8_t *p, size_t len, struct derp_restarting *out);

/* ---- Encoders
 * ------------------------------------------------------------------------------------ Write one
 * whole frame (header included) into buf (borrowed) and return its size, or: -ENOSPC   buf_size too
 * small (nothing useful written) -EMSGSIZE the payload exceeds what the receiver accepts (packet >
 * 64 KiB, Health > 1 MiB, ClientInfo > 256 KiB, ServerInfo > 1 MiB) -EINVAL   a value that must
 * never be sent (PeerGone reason MeshConnBroke) Keys are 32 borrowed bytes. Packet data may overlap
 * buf (it is moved, not copied). */

ssize_t derp_frame_server_key_encode(uint8_t *buf, size_t buf_size, const uint8_t *server_key);
/* sealed = nonce || box, as derp_handshake produces it. */
ssize_t derp_frame_client_info_encode(uint8_t *buf, size_t buf_size, const uint8_t *client_key,
                                      const uint8_t *sealed, size_t sealed_len);
ssize_t derp_frame_server_info_encode(uint8_t *buf, size_t buf_size, const uint8_t *sealed,
                                      size_t sealed_len);
ssize_t derp_frame_send_packet_encode(uint8_t *buf, size_t buf_size, const uint8_t *dst_key,
                                      const uint8_t *data, size_t data_len);
ssize_t derp_frame_recv_packet_encode(uint8_t *buf, size_t buf_size, const uint8_t *src_key,
                                      const uint8_t *data, size_t data_len);
ssize_t derp_frame_forward_packet_encode(uint8_t *buf, size_t buf_size, const uint8_t *src_key,
                                         const uint8_t *dst_key, const uint8_t *data,
                                         size_t data_len);
ssize_t derp_frame_keep_alive_encode(uint8_t *buf, size_t buf_size);
ssize_t derp_frame_note_preferred_encode(uint8_t *buf, size_t buf_size, bool preferred);
ssize_t derp_frame_peer_gone_encode(uint8_t *buf, size_t buf_size, const uint8_t *key,
                                    uint8_t reason);
/* addr NULL = unknown (16 zero bytes, port 0). flags per DERP_PEER_PRESENT_*. */
ssize_t derp_frame_peer_present_encode(uint8_t *buf, size_t buf_size, const uint8_t *key,
                                       const struct derp_addr *addr, uint8_t flags);
ssize_t derp_frame_watch_conns_encode(uint8_t *buf, size_t buf_size);
ssize_t derp_frame_close_peer_encode(uint8_t *buf, size_t buf_size, const uint8_t *target_key);
ssize_t derp_frame_ping_encode(uint8_t *buf, size_t buf_size, const uint8_t data[DERP_PING_LEN]);
ssize_t derp_frame_pong_encode(uint8_t *buf, size_t buf_size, const uint8_t data[DERP_PING_LEN]);
ssize_t derp_frame_health_encode(uint8_t *buf, size_t buf_size, const char *text, size_t text_len);
ssize_t derp_frame_restarting_encode(uint8_t *buf, size_t buf_size, uint32_t reconnect_in_ms,
                                     uint32_t try_for_ms);

/* PeerPresent flags for a connection (§2.1): IS_REGULAR alone when nothing else applies. */
uint8_t derp_peer_present_flags(bool mesh_peer, bool prober, bool not_ideal);

/* Packet-frame prefixes (header + key(s)) for writers that send the data from where it already
 * is (an iovec pair). Return the prefix size (37, 37, 69) or -ENOSPC / -EMSGSIZE. */
ssize_t derp_frame_send_packet_prefix_encode(uint8_t *buf, size_t buf_size, const uint8_t *dst_key,
                                             size_t data_len);
ssize_t derp_frame_recv_packet_prefix_encode(uint8_t *buf, size_t buf_size, const uint8_t *src_key,
                                             size_t data_len);
ssize_t derp_frame_forward_packet_prefix_encode(uint8_t *buf, size_t buf_size,
                                                const uint8_t *src_key, const uint8_t *dst_key,
                                                size_t data_len);

/* In-place rewrites for the relay path (no copy of the packet).
 * frame must be a whole SendPacket frame that passed derp_frame_check; it becomes a RecvPacket
 * from src_key of the same size. */
void derp_frame_send_to_recv_inplace(uint8_t *frame, size_t frame_size, const uint8_t *src_key);
/* frame must be a whole ForwardPacket frame that passed derp_frame_check; the RecvPacket
 * (src = the forwarded src) is built inside it, 32 bytes shorter: returns frame + 32. */
uint8_t *derp_frame_forward_to_recv_inplace(uint8_t *frame, size_t frame_size);

#endif /* DERP_FRAME_H */
