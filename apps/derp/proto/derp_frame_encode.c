/* derp_frame_encode.c - DERP frame encoders (§2.1) into caller buffers, packet-frame prefixes
 * for iovec writers, and in-place rewrites of relayed packet frames. Runs on whichever shard
 * writes the frame; owns nothing. */
#include "derp_frame.h"

#include <errno.h>
#include <string.h>

#include <hd/hd_base.h>

static void store_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* Header for a payload of len bytes, after checking the whole frame fits buf. */
static ssize_t begin(uint8_t *buf, size_t buf_size, uint8_t type, size_t len)
{
    if (len > buf_size || buf_size - len < DERP_FRAME_HEADER_LEN)
        return -ENOSPC;
    derp_frame_header_encode(buf, buf_size, type, (uint32_t)len);
    return DERP_FRAME_HEADER_LEN + (ssize_t)len;
}

ssize_t derp_frame_server_key_encode(uint8_t *buf, size_t buf_size, const uint8_t *server_key)
{
    ssize_t n = begin(buf, buf_size, DERP_FRAME_SERVER_KEY, DERP_SERVER_KEY_LEN);
    if (n < 0)
        return n;
    memcpy(buf + DERP_FRAME_HEADER_LEN, DERP_MAGIC, DERP_MAGIC_LEN);
    memcpy(buf + DERP_FRAME_HEADER_LEN + DERP_MAGIC_LEN, server_key, DERP_KEY_LEN);
    return n;
}

ssize_t derp_frame_client_info_encode(uint8_t *buf, size_t buf_size, const uint8_t *client_key,
                                      const uint8_t *sealed, size_t sealed_len)
{
    /* The server closes on anything outside 56..256 KiB (§2). */
    if (sealed_len > DERP_CLIENT_INFO_LEN_MAX - DERP_KEY_LEN)
        return -EMSGSIZE;
    if (sealed_len < DERP_CLIENT_INFO_LEN_MIN - DERP_KEY_LEN)
        return -EINVAL;
    ssize_t n = begin(buf, buf_size, DERP_FRAME_CLIENT_INFO, DERP_KEY_LEN + sealed_len);
    if (n < 0)
        return n;
    memmove(buf + DERP_FRAME_HEADER_LEN + DERP_KEY_LEN, sealed, sealed_len);
    memmove(buf + DERP_FRAME_HEADER_LEN, client_key, DERP_KEY_LEN);
    return n;
}

ssize_t derp_frame_server_info_encode(uint8_t *buf, size_t buf_size, const uint8_t *sealed,
                                      size_t sealed_len)
{
    /* Never emit frames over the client's 1 MiB limit (§13.7). */
    if (sealed_len > DERP_CLIENT_RECV_FRAME_LEN_MAX)
        return -EMSGSIZE;
    if (sealed_len < DERP_SERVER_INFO_LEN_MIN)
        return -EINVAL;
    ssize_t n = begin(buf, buf_size, DERP_FRAME_SERVER_INFO, sealed_len);
    if (n < 0)
        return n;
    memmove(buf + DERP_FRAME_HEADER_LEN, sealed, sealed_len);
    return n;
}

ssize_t derp_frame_send_packet_prefix_encode(uint8_t *buf, size_t buf_size, const uint8_t *dst_key,
                                             size_t data_len)
{
    if (data_len > DERP_PACKET_LEN_MAX)
        return -EMSGSIZE;
    if (buf_size < DERP_FRAME_HEADER_LEN + DERP_KEY_LEN)
        return -ENOSPC;
    derp_frame_header_encode(buf, buf_size, DERP_FRAME_SEND_PACKET,
                             (uint32_t)(DERP_KEY_LEN + data_len));
    memcpy(buf + DERP_FRAME_HEADER_LEN, dst_key, DERP_KEY_LEN);
    return DERP_FRAME_HEADER_LEN + DERP_KEY_LEN;
}

ssize_t derp_frame_recv_packet_prefix_encode(uint8_t *buf, size_t buf_size, const uint8_t *src_key,
                                             size_t data_len)
{
    /* RecvPacket is always the v2 layout with the source key (§2.1). */
    if (data_len > DERP_PACKET_LEN_MAX)
        return -EMSGSIZE;
    if (buf_size < DERP_FRAME_HEADER_LEN + DERP_KEY_LEN)
        return -ENOSPC;
    derp_frame_header_encode(buf, buf_size, DERP_FRAME_RECV_PACKET,
                             (uint32_t)(DERP_KEY_LEN + data_len));
    memcpy(buf + DERP_FRAME_HEADER_LEN, src_key, DERP_KEY_LEN);
    return DERP_FRAME_HEADER_LEN + DERP_KEY_LEN;
}

ssize_t derp_frame_forward_packet_prefix_encode(uint8_t *buf, size_t buf_size,
                                                const uint8_t *src_key, const uint8_t *dst_key,
                                                size_t data_len)
{
    if (data_len > DERP_PACKET_LEN_MAX)
        return -EMSGSIZE;
    if (buf_size < DERP_FRAME_HEADER_LEN + 2 * DERP_KEY_LEN)
        return -ENOSPC;
    derp_frame_header_encode(buf, buf_size, DERP_FRAME_FORWARD_PACKET,
                             (uint32_t)(2 * DERP_KEY_LEN + data_len));
    memcpy(buf + DERP_FRAME_HEADER_LEN, src_key, DERP_KEY_LEN); /* §13.9: src, then dst */
    memcpy(buf + DERP_FRAME_HEADER_LEN + DERP_KEY_LEN, dst_key, DERP_KEY_LEN);
    return DERP_FRAME_HEADER_LEN + 2 * DERP_KEY_LEN;
}

/* Whole packet frame: header, n_keys keys, data. The keys are saved and the data moved first,
 * so inputs that overlap buf (re-encoding a frame in place) come out right. */
static ssize_t packet_encode(uint8_t *buf, size_t buf_size, uint8_t type,
                             const uint8_t *const keys[2], size_t n_keys, const uint8_t *data,
                             size_t data_len)
{
    const size_t prefix = DERP_FRAME_HEADER_LEN + n_keys * DERP_KEY_LEN;
    uint8_t saved[2][DERP_KEY_LEN];

    if (data_len > DERP_PACKET_LEN_MAX)
        return -EMSGSIZE;
    if (buf_size < prefix || buf_size - prefix < data_len)
        return -ENOSPC;
    for (size_t i = 0; i < n_keys; i++)
        memcpy(saved[i], keys[i], DERP_KEY_LEN);
    if (data_len)
        memmove(buf + prefix, data, data_len);
    derp_frame_header_encode(buf, buf_size, type,
                             (uint32_t)(prefix - DERP_FRAME_HEADER_LEN + data_len));
    for (size_t i = 0; i < n_keys; i++)
        memcpy(buf + DERP_FRAME_HEADER_LEN + i * DERP_KEY_LEN, saved[i], DERP_KEY_LEN);
    return (ssize_t)(prefix + data_len);
}

ssize_t derp_frame_send_packet_encode(uint8_t *buf, size_t buf_size, const uint8_t *dst_key,
                                      const uint8_t *data, size_t data_len)
{
    const uint8_t *const keys[2] = {dst_key, NULL};
    return packet_encode(buf, buf_size, DERP_FRAME_SEND_PACKET, keys, 1, data, data_len);
}

ssize_t derp_frame_recv_packet_encode(uint8_t *buf, size_t buf_size, const uint8_t *src_key,
                                      const uint8_t *data, size_t data_len)
{
    const uint8_t *const keys[2] = {src_key, NULL};
    return packet_encode(buf, buf_size, DERP_FRAME_RECV_PACKET, keys, 1, data, data_len);
}

ssize_t derp_frame_forward_packet_encode(uint8_t *buf, size_t buf_size, const uint8_t *src_key,
                                         const uint8_t *dst_key, const uint8_t *data,
                                         size_t data_len)
{
    const uint8_t *const keys[2] = {src_key, dst_key}; /* §13.9: src, then dst */
    return packet_encode(buf, buf_size, DERP_FRAME_FORWARD_PACKET, keys, 2, data, data_len);
}

ssize_t derp_frame_keep_alive_encode(uint8_t *buf, size_t buf_size)
{
    return begin(buf, buf_size, DERP_FRAME_KEEP_ALIVE, 0);
}

ssize_t derp_frame_note_preferred_encode(uint8_t *buf, size_t buf_size, bool preferred)
{
    ssize_t n = begin(buf, buf_size, DERP_FRAME_NOTE_PREFERRED, DERP_NOTE_PREFERRED_LEN);
    if (n < 0)
        return n;
    buf[DERP_FRAME_HEADER_LEN] = preferred ? 0x01 : 0x00;
    return n;
}

ssize_t derp_frame_peer_gone_encode(uint8_t *buf, size_t buf_size, const uint8_t *key,
                                    uint8_t reason)
{
    if (reason == DERP_PEER_GONE_MESH_CONN_BROKE)
        return -EINVAL; /* client-internal, never on the wire (§2.1) */
    ssize_t n = begin(buf, buf_size, DERP_FRAME_PEER_GONE, DERP_PEER_GONE_LEN);
    if (n < 0)
        return n;
    memcpy(buf + DERP_FRAME_HEADER_LEN, key, DERP_KEY_LEN);
    buf[DERP_FRAME_HEADER_LEN + DERP_KEY_LEN] = reason;
    return n;
}

ssize_t derp_frame_peer_present_encode(uint8_t *buf, size_t buf_size, const uint8_t *key,
                                       const struct derp_addr *addr, uint8_t flags)
{
    ssize_t n = begin(buf, buf_size, DERP_FRAME_PEER_PRESENT, DERP_PEER_PRESENT_LEN);
    if (n < 0)
        return n;
    uint8_t *p = buf + DERP_FRAME_HEADER_LEN;
    memcpy(p, key, DERP_KEY_LEN);
    p += DERP_KEY_LEN;
    if (addr)
        memcpy(p, addr->ip, DERP_PEER_PRESENT_IP_LEN);
    else
        memset(p, 0, DERP_PEER_PRESENT_IP_LEN);
    p += DERP_PEER_PRESENT_IP_LEN;
    uint16_t port = addr ? addr->port : 0;
    p[0] = (uint8_t)(port >> 8);
    p[1] = (uint8_t)port;
    p[2] = flags;
    return n;
}

uint8_t derp_peer_present_flags(bool mesh_peer, bool prober, bool not_ideal)
{
    uint8_t f = 0;
    if (mesh_peer)
        f |= DERP_PEER_PRESENT_IS_MESH_PEER;
    if (prober)
        f |= DERP_PEER_PRESENT_IS_PROBER;
    if (not_ideal)
        f |= DERP_PEER_PRESENT_NOT_IDEAL;
    return f ? f : DERP_PEER_PRESENT_IS_REGULAR; /* a modern server never sends 0 */
}

ssize_t derp_frame_watch_conns_encode(uint8_t *buf, size_t buf_size)
{
    return begin(buf, buf_size, DERP_FRAME_WATCH_CONNS, DERP_WATCH_CONNS_LEN);
}

ssize_t derp_frame_close_peer_encode(uint8_t *buf, size_t buf_size, const uint8_t *target_key)
{
    ssize_t n = begin(buf, buf_size, DERP_FRAME_CLOSE_PEER, DERP_CLOSE_PEER_LEN);
    if (n < 0)
        return n;
    memcpy(buf + DERP_FRAME_HEADER_LEN, target_key, DERP_KEY_LEN);
    return n;
}

static ssize_t ping_pong_encode(uint8_t *buf, size_t buf_size, uint8_t type, const uint8_t *data)
{
    ssize_t n = begin(buf, buf_size, type, DERP_PING_LEN);
    if (n < 0)
        return n;
    memmove(buf + DERP_FRAME_HEADER_LEN, data, DERP_PING_LEN);
    return n;
}

ssize_t derp_frame_ping_encode(uint8_t *buf, size_t buf_size, const uint8_t data[DERP_PING_LEN])
{
    return ping_pong_encode(buf, buf_size, DERP_FRAME_PING, data);
}

ssize_t derp_frame_pong_encode(uint8_t *buf, size_t buf_size, const uint8_t data[DERP_PING_LEN])
{
    return ping_pong_encode(buf, buf_size, DERP_FRAME_PONG, data);
}

ssize_t derp_frame_health_encode(uint8_t *buf, size_t buf_size, const char *text, size_t text_len)
{
    if (text_len > DERP_HEALTH_LEN_MAX)
        return -EMSGSIZE;
    ssize_t n = begin(buf, buf_size, DERP_FRAME_HEALTH, text_len);
    if (n < 0)
        return n;
    if (text_len)
        memmove(buf + DERP_FRAME_HEADER_LEN, text, text_len);
    return n;
}

ssize_t derp_frame_restarting_encode(uint8_t *buf, size_t buf_size, uint32_t reconnect_in_ms,
                                     uint32_t try_for_ms)
{
    ssize_t n = begin(buf, buf_size, DERP_FRAME_RESTARTING, DERP_RESTARTING_LEN);
    if (n < 0)
        return n;
    store_be32(buf + DERP_FRAME_HEADER_LEN, reconnect_in_ms);
    store_be32(buf + DERP_FRAME_HEADER_LEN + 4, try_for_ms);
    return n;
}

/* ---- In-place rewrites ------------------------------------------------------------------- */

void derp_frame_send_to_recv_inplace(uint8_t *frame, size_t frame_size, const uint8_t *src_key)
{
    /* Our invariant: the caller passes a frame the splitter delivered. */
    HD_ASSERT(frame_size >= DERP_FRAME_HEADER_LEN + DERP_SEND_PACKET_LEN_MIN);
    HD_ASSERT(frame[0] == DERP_FRAME_SEND_PACKET);
    /* Same length: dst[32] || pkt becomes src[32] || pkt. */
    frame[0] = DERP_FRAME_RECV_PACKET;
    memmove(frame + DERP_FRAME_HEADER_LEN, src_key, DERP_KEY_LEN);
}

uint8_t *derp_frame_forward_to_recv_inplace(uint8_t *frame, size_t frame_size)
{
    HD_ASSERT(frame_size >= DERP_FRAME_HEADER_LEN + DERP_FORWARD_PACKET_LEN_MIN);
    HD_ASSERT(frame[0] == DERP_FRAME_FORWARD_PACKET);
    /* hdr[5] src[32] dst[32] pkt  ->  (32 bytes dropped) hdr[5] src[32] pkt: the src key
     * moves over dst, the new header lands on the old src's tail. */
    uint8_t *out = frame + DERP_KEY_LEN;
    size_t payload_len = frame_size - DERP_FRAME_HEADER_LEN - DERP_KEY_LEN;
    memmove(out + DERP_FRAME_HEADER_LEN, frame + DERP_FRAME_HEADER_LEN, DERP_KEY_LEN);
    derp_frame_header_encode(out, DERP_FRAME_HEADER_LEN, DERP_FRAME_RECV_PACKET,
                             (uint32_t)payload_len);
    return out;
}
