/* derp_frame.c - DERP frame header, the per-type length policy (§2 size table, §6.1), the
 * incremental stream splitter and the zero-copy decoders. Runs on whichever shard owns the
 * connection; owns nothing but the caller's struct derp_splitter. */
#include "derp_frame.h"

#include <errno.h>
#include <string.h>

#include <hd/hd_base.h>

static uint32_t load_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

ssize_t derp_frame_header_encode(uint8_t *buf, size_t buf_size, uint8_t type, uint32_t len)
{
    if (buf_size < DERP_FRAME_HEADER_LEN)
        return -ENOSPC;
    buf[0] = type;
    buf[1] = (uint8_t)(len >> 24);
    buf[2] = (uint8_t)(len >> 16);
    buf[3] = (uint8_t)(len >> 8);
    buf[4] = (uint8_t)len;
    return DERP_FRAME_HEADER_LEN;
}

int derp_frame_header_decode(const uint8_t *buf, size_t buf_len, uint8_t *type, uint32_t *len)
{
    if (buf_len < DERP_FRAME_HEADER_LEN)
        return -EAGAIN;
    *type = buf[0];
    *len = load_be32(buf + 1);
    return 0;
}

const char *derp_frame_type_name(uint8_t type)
{
    switch (type) {
    case DERP_FRAME_SERVER_KEY:
        return "ServerKey";
    case DERP_FRAME_CLIENT_INFO:
        return "ClientInfo";
    case DERP_FRAME_SERVER_INFO:
        return "ServerInfo";
    case DERP_FRAME_SEND_PACKET:
        return "SendPacket";
    case DERP_FRAME_RECV_PACKET:
        return "RecvPacket";
    case DERP_FRAME_KEEP_ALIVE:
        return "KeepAlive";
    case DERP_FRAME_NOTE_PREFERRED:
        return "NotePreferred";
    case DERP_FRAME_PEER_GONE:
        return "PeerGone";
    case DERP_FRAME_PEER_PRESENT:
        return "PeerPresent";
    case DERP_FRAME_FORWARD_PACKET:
        return "ForwardPacket";
    case DERP_FRAME_WATCH_CONNS:
        return "WatchConns";
    case DERP_FRAME_CLOSE_PEER:
        return "ClosePeer";
    case DERP_FRAME_PING:
        return "Ping";
    case DERP_FRAME_PONG:
        return "Pong";
    case DERP_FRAME_HEALTH:
        return "Health";
    case DERP_FRAME_RESTARTING:
        return "Restarting";
    default:
        return "unknown";
    }
}

/* ---- Length policy ------------------------------------------------------------------------- */

/* min <= len <= max: below is -EPROTO (short), above -EMSGSIZE (long). */
static int check_range(uint32_t len, uint32_t min, uint32_t max)
{
    if (len < min)
        return -EPROTO;
    if (len > max)
        return -EMSGSIZE;
    return DERP_FRAME_DELIVER;
}

/* Mesh-only frame (§6.1): permission and exact length both close the connection. */
static int check_mesh_exact(bool mesh, uint32_t len, uint32_t want)
{
    if (len != want)
        return -EPROTO;
    return mesh ? DERP_FRAME_DELIVER : -EPERM;
}

/* derpserver.go handleFrame*: what a logged-in server does with each client frame (§6.1). */
static int check_server(bool mesh, uint8_t type, uint32_t len)
{
    switch (type) {
    case DERP_FRAME_NOTE_PREFERRED:
        return len == DERP_NOTE_PREFERRED_LEN ? DERP_FRAME_DELIVER : -EPROTO;
    case DERP_FRAME_SEND_PACKET:
        return check_range(len, DERP_SEND_PACKET_LEN_MIN, DERP_SEND_PACKET_LEN_MAX);
    case DERP_FRAME_FORWARD_PACKET:
        /* Permission first: the reference checks canMesh before reading the payload. */
        if (!mesh)
            return -EPERM;
        return check_range(len, DERP_FORWARD_PACKET_LEN_MIN, DERP_FORWARD_PACKET_LEN_MAX);
    case DERP_FRAME_WATCH_CONNS:
        return check_mesh_exact(mesh, len, DERP_WATCH_CONNS_LEN);
    case DERP_FRAME_CLOSE_PEER:
        return check_mesh_exact(mesh, len, DERP_CLOSE_PEER_LEN);
    case DERP_FRAME_PING:
        return check_range(len, DERP_PING_LEN, DERP_PING_LEN_SERVER_MAX);
    default:
        /* Unknown types and everything a client has no business sending (ServerKey, a second
         * ClientInfo, Pong, KeepAlive, ...) are skipped, not errors (§6.1, §13.13). */
        return DERP_FRAME_SKIP;
    }
}

/* derp_client.go recvTimeout: frames over 1 MiB kill the connection, short known frames are
 * dropped with a log line, a short ServerInfo is fatal (parseServerInfo's error). */
static int check_client(uint8_t type, uint32_t len)
{
    if (len > DERP_CLIENT_RECV_FRAME_LEN_MAX)
        return -EMSGSIZE;
    switch (type) {
    case DERP_FRAME_SERVER_INFO:
        return len < DERP_SERVER_INFO_LEN_MIN ? -EPROTO : DERP_FRAME_DELIVER;
    case DERP_FRAME_KEEP_ALIVE:
    case DERP_FRAME_HEALTH:
        return DERP_FRAME_DELIVER;
    case DERP_FRAME_RECV_PACKET:
    case DERP_FRAME_PEER_GONE:
    case DERP_FRAME_PEER_PRESENT:
        return len < DERP_KEY_LEN ? DERP_FRAME_DROP : DERP_FRAME_DELIVER;
    case DERP_FRAME_PING:
    case DERP_FRAME_PONG:
        return len < DERP_PING_LEN ? DERP_FRAME_DROP : DERP_FRAME_DELIVER;
    case DERP_FRAME_RESTARTING:
        return len < DERP_RESTARTING_LEN ? DERP_FRAME_DROP : DERP_FRAME_DELIVER;
    default:
        /* Includes a ServerKey after login: fast-start clients ignore it (§1.4). */
        return DERP_FRAME_SKIP;
    }
}

int derp_frame_check(enum derp_reader_mode mode, bool mesh, uint8_t type, uint32_t len)
{
    switch (mode) {
    case DERP_READER_SERVER_HELLO:
        /* derpserver.go recvClientKey: readFrameTypeHeader(frameClientInfo), then bounds. */
        if (type != DERP_FRAME_CLIENT_INFO)
            return -EPROTO;
        return check_range(len, DERP_CLIENT_INFO_LEN_MIN, DERP_CLIENT_INFO_LEN_MAX);
    case DERP_READER_SERVER:
        return check_server(mesh, type, len);
    case DERP_READER_CLIENT_HELLO:
        /* derp_client.go recvServerKey: readFrame(br, 1<<10, ...) first (size), then type. */
        if (len > DERP_SERVER_KEY_LEN_MAX)
            return -EMSGSIZE;
        if (type != DERP_FRAME_SERVER_KEY || len < DERP_SERVER_KEY_LEN_MIN)
            return -EPROTO;
        return DERP_FRAME_DELIVER;
    case DERP_READER_CLIENT:
        return check_client(type, len);
    }
    return -EINVAL;
}

/* ---- Splitter ------------------------------------------------------------------------------- */

void derp_splitter_init(struct derp_splitter *s, enum derp_reader_mode mode)
{
    memset(s, 0, sizeof(*s));
    s->mode = mode;
}

void derp_splitter_set_mesh(struct derp_splitter *s, bool mesh)
{
    s->mesh = mesh;
}

size_t derp_splitter_frame_size_max(const struct derp_splitter *s)
{
    switch (s->mode) {
    case DERP_READER_SERVER_HELLO:
        return DERP_SERVER_HELLO_FRAME_SIZE_MAX;
    case DERP_READER_SERVER:
        return DERP_SERVER_FRAME_SIZE_MAX;
    case DERP_READER_CLIENT_HELLO:
        return DERP_FRAME_HEADER_LEN + DERP_SERVER_KEY_LEN_MAX;
    case DERP_READER_CLIENT:
        return DERP_CLIENT_FRAME_SIZE_MAX;
    }
    return 0;
}

/* Continue discarding a skipped payload. */
static void split_skip_more(struct derp_splitter *s, size_t buf_len, struct derp_split *out)
{
    out->header_known = true;
    out->type = s->skip_type;
    out->len = s->skip_len;
    out->dropped = s->skip_dropped;
    if (buf_len == 0) {
        out->kind = DERP_SPLIT_NEED;
        out->need = 1; /* any byte makes progress; nothing needs to be buffered */
        return;
    }
    size_t n = buf_len < s->skip_left ? buf_len : s->skip_left;
    s->skip_left -= (uint32_t)n;
    out->kind = DERP_SPLIT_SKIP;
    out->consumed = n;
}

/* A header was accepted with action SKIP/DROP: consume it and what payload is here. */
static void split_skip_start(struct derp_splitter *s, int action, size_t buf_len,
                             struct derp_split *out)
{
    size_t avail = buf_len - DERP_FRAME_HEADER_LEN;
    size_t n = avail < out->len ? avail : out->len;

    out->kind = DERP_SPLIT_SKIP;
    out->dropped = action == DERP_FRAME_DROP;
    out->frame_start = true;
    out->consumed = DERP_FRAME_HEADER_LEN + n;
    s->skip_type = out->type;
    s->skip_len = out->len;
    s->skip_dropped = out->dropped;
    s->skip_left = out->len - (uint32_t)n;
}

static void split_hello_done(struct derp_splitter *s)
{
    if (s->mode == DERP_READER_SERVER_HELLO)
        s->mode = DERP_READER_SERVER;
    else if (s->mode == DERP_READER_CLIENT_HELLO)
        s->mode = DERP_READER_CLIENT;
}

int derp_splitter_next(struct derp_splitter *s, const uint8_t *buf, size_t buf_len,
                       struct derp_split *out)
{
    memset(out, 0, sizeof(*out));
    if (s->error)
        return s->error;
    if (s->skip_left > 0) {
        split_skip_more(s, buf_len, out);
        return 0;
    }
    if (derp_frame_header_decode(buf, buf_len, &out->type, &out->len) < 0) {
        out->kind = DERP_SPLIT_NEED;
        out->need = DERP_FRAME_HEADER_LEN - buf_len;
        return 0;
    }
    out->header_known = true;

    int action = derp_frame_check(s->mode, s->mesh, out->type, out->len);
    if (action < 0) {
        s->error = action;
        return action;
    }
    if (action != DERP_FRAME_DELIVER) {
        split_skip_start(s, action, buf_len, out);
        return 0;
    }
    /* Delivered frames are bounded by derp_frame_check, so this cannot overflow size_t. */
    size_t frame_size = DERP_FRAME_HEADER_LEN + (size_t)out->len;
    HD_ASSERT(frame_size <= derp_splitter_frame_size_max(s));
    if (buf_len < frame_size) {
        out->kind = DERP_SPLIT_NEED;
        out->need = frame_size - buf_len;
        return 0;
    }
    out->kind = DERP_SPLIT_FRAME;
    out->frame_start = true;
    out->payload_offset = DERP_FRAME_HEADER_LEN;
    out->consumed = frame_size;
    split_hello_done(s);
    return 0;
}

/* ---- Decoders ------------------------------------------------------------------------------- */

int derp_frame_server_key_decode(const uint8_t *p, size_t len, const uint8_t **server_key)
{
    if (len > DERP_SERVER_KEY_LEN_MAX)
        return -EMSGSIZE;
    if (len < DERP_SERVER_KEY_LEN_MIN || memcmp(p, DERP_MAGIC, DERP_MAGIC_LEN) != 0)
        return -EPROTO;
    *server_key = p + DERP_MAGIC_LEN; /* bytes after the key are for future use: ignored */
    return 0;
}

int derp_frame_client_info_decode(const uint8_t *p, size_t len, struct derp_client_info_frame *out)
{
    int rc = check_range(len > UINT32_MAX ? UINT32_MAX : (uint32_t)len, DERP_CLIENT_INFO_LEN_MIN,
                         DERP_CLIENT_INFO_LEN_MAX);
    if (rc < 0)
        return rc;
    out->client_key = p;
    out->sealed = p + DERP_KEY_LEN;
    out->sealed_len = len - DERP_KEY_LEN;
    return 0;
}

int derp_frame_server_info_decode(const uint8_t *p, size_t len, struct derp_server_info_frame *out)
{
    if (len < DERP_SERVER_INFO_LEN_MIN)
        return -EPROTO;
    if (len > DERP_SERVER_INFO_LEN_MAX)
        return -EMSGSIZE;
    out->sealed = p;
    out->sealed_len = len;
    return 0;
}

/* Shared by the three packet frames: keys_len bytes of keys, then <= data_max bytes. */
static int packet_split(const uint8_t *p, size_t len, size_t keys_len, size_t data_max,
                        struct derp_packet *out)
{
    if (len < keys_len)
        return -EPROTO;
    if (len - keys_len > data_max)
        return -EMSGSIZE;
    out->src_key = NULL;
    out->dst_key = NULL;
    out->data = p + keys_len;
    out->data_len = len - keys_len;
    return 0;
}

int derp_frame_send_packet_decode(const uint8_t *p, size_t len, struct derp_packet *out)
{
    int rc = packet_split(p, len, DERP_KEY_LEN, DERP_PACKET_LEN_MAX, out);
    if (rc == 0)
        out->dst_key = p;
    return rc;
}

int derp_frame_recv_packet_decode(const uint8_t *p, size_t len, struct derp_packet *out)
{
    int rc = packet_split(p, len, DERP_KEY_LEN, DERP_CLIENT_RECV_FRAME_LEN_MAX - DERP_KEY_LEN, out);
    if (rc == 0)
        out->src_key = p;
    return rc;
}

int derp_frame_forward_packet_decode(const uint8_t *p, size_t len, struct derp_packet *out)
{
    int rc = packet_split(p, len, 2 * DERP_KEY_LEN, DERP_PACKET_LEN_MAX, out);
    if (rc == 0) {
        out->src_key = p; /* §13.9: src first, then dst */
        out->dst_key = p + DERP_KEY_LEN;
    }
    return rc;
}

int derp_frame_note_preferred_decode(const uint8_t *p, size_t len, bool *preferred)
{
    if (len != DERP_NOTE_PREFERRED_LEN)
        return -EPROTO;
    *preferred = p[0] != 0;
    return 0;
}

int derp_frame_peer_gone_decode(const uint8_t *p, size_t len, struct derp_peer_gone *out)
{
    if (len < DERP_PEER_GONE_LEN_MIN)
        return -EPROTO;
    out->key = p;
    out->reason = len > DERP_KEY_LEN ? p[DERP_KEY_LEN] : DERP_PEER_GONE_DISCONNECTED;
    return 0;
}

int derp_frame_peer_present_decode(const uint8_t *p, size_t len, struct derp_peer_present *out)
{
    const size_t addr_end = DERP_KEY_LEN + DERP_PEER_PRESENT_IP_LEN + DERP_PEER_PRESENT_PORT_LEN;

    if (len < DERP_PEER_PRESENT_LEN_MIN)
        return -EPROTO;
    memset(out, 0, sizeof(*out));
    out->key = p;
    if (len >= addr_end) { /* derp_client.go: fields after the key are optional */
        out->has_addr = true;
        memcpy(out->addr.ip, p + DERP_KEY_LEN, DERP_PEER_PRESENT_IP_LEN);
        out->addr.port = (uint16_t)(p[addr_end - 2] << 8 | p[addr_end - 1]);
    }
    if (len >= addr_end + DERP_PEER_PRESENT_FLAGS_LEN) {
        out->has_flags = true;
        out->flags = p[addr_end];
    }
    return 0;
}

int derp_frame_watch_conns_decode(size_t len)
{
    return len == DERP_WATCH_CONNS_LEN ? 0 : -EPROTO;
}

int derp_frame_close_peer_decode(const uint8_t *p, size_t len, const uint8_t **target_key)
{
    if (len != DERP_CLOSE_PEER_LEN)
        return -EPROTO;
    *target_key = p;
    return 0;
}

int derp_frame_ping_decode(const uint8_t *p, size_t len, const uint8_t **data)
{
    if (len < DERP_PING_LEN)
        return -EPROTO;
    *data = p; /* §6.1: a longer ping is answered with its first 8 bytes */
    return 0;
}

int derp_frame_pong_decode(const uint8_t *p, size_t len, const uint8_t **data)
{
    return derp_frame_ping_decode(p, len, data);
}

int derp_frame_health_decode(const uint8_t *p, size_t len, const char **text, size_t *text_len)
{
    if (len > DERP_HEALTH_LEN_MAX)
        return -EMSGSIZE;
    *text = (const char *)p;
    *text_len = len;
    return 0;
}

int derp_frame_restarting_decode(const uint8_t *p, size_t len, struct derp_restarting *out)
{
    if (len < DERP_RESTARTING_LEN)
        return -EPROTO;
    out->reconnect_in_ms = load_be32(p);
    out->try_for_ms = load_be32(p + 4);
    return 0;
}
