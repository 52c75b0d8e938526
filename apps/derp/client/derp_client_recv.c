/* derp_client_recv.c - the DERP client's receiving side: the 101 upgrade response, then the
 * frame stream split in place (derp_splitter, client modes) with frames that span receives
 * copied once into an assembly buffer, and the handling of each frame type a client receives
 * (§4, §6, §2.1). Runs on the client's shard, inside the connection's on_data. Owns the
 * assembly buffer (a pool frame, or heap memory for frames over the largest pool class). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "derp_client_impl.h"
#include <hd/net_ws.h>

/* ServerInfo plaintexts this small are opened into a stack buffer (the reference's is 13 bytes);
 * larger ones make derp_server_info_open allocate (once per login). */
#define DERP_CLIENT_INFO_SCRATCH_SIZE 256
_Static_assert(DERP_CLIENT_INFO_SCRATCH_SIZE >= DERP_SERVER_INFO_JSON_MAX,
               "what our own server seals opens without allocating");

/* ---- Upgrade response ------------------------------------------------------------------------ */

static void note_upgrade_key(struct derp_client *k)
{
    struct net_http_str v = net_http_header_get(&k->resp.head, "Derp-Public-Key");
    if (v.ptr && derp_key_hex_parse(v.ptr, v.len, k->upgrade_key.bytes) == 0)
        k->has_upgrade_key = true;
}

/* §1.5: the 101 must prove it read our key and select derp; then the bytes after its head go
 * through the WebSocket codec (client role). Returns 0, -ENOPROTOOPT or net_ws_start's error. */
static int ws_accepted(struct derp_client *k)
{
    char want[NET_HTTP_WS_ACCEPT_LEN + 1];
    int rc = net_http_ws_accept(net_http_cstr(k->ws_key), want);
    HD_ASSERT(rc == 0);
    const struct net_http_head *h = &k->resp.head;
    if (!net_http_str_eq(net_http_header_get(h, "Sec-WebSocket-Accept"), want) ||
        !net_http_str_eq_nocase(net_http_header_get(h, "Upgrade"), "websocket") ||
        !net_http_str_eq(net_http_header_get(h, "Sec-WebSocket-Protocol"), "derp"))
        return -ENOPROTOOPT;
    return net_ws_start(k->conn, false);
}

/* Bytes of the response so far (net keeps them contiguous until we consume the head). Returns
 * 0 (need more), the head size (the bytes after it are DERP stream bytes: net offers them
 * again), or -EPROTO / -ENOPROTOOPT. */
static ssize_t upgrade_input(struct derp_client *k, const uint8_t *data, size_t len)
{
    int rc = net_http_resp_parse(&k->resp, (const char *)data, len);
    if (rc == -EAGAIN)
        return 0;
    if (rc < 0)
        return -EPROTO;
    k->http_status = k->resp.status;
    note_upgrade_key(k);
    if (k->cb->on_http_response)
        k->cb->on_http_response(k, &k->resp);
    if (derp_client_closing(k))
        return rc;
    /* derphttp: anything but 101 (a 1xx too) is a failed upgrade. */
    if (k->resp.status != 101)
        return -ENOPROTOOPT;
    if (k->websocket) {
        int wrc = ws_accepted(k);
        if (wrc < 0)
            return wrc;
    }
    k->state = DERP_CLIENT_SERVER_KEY;
    return rc;
}

/* ---- Frames ---------------------------------------------------------------------------------- */

static int on_server_key(struct derp_client *k, const uint8_t *p, size_t len)
{
    struct derp_pubkey key;
    int rc = derp_server_key_decode(p, len, &key);
    if (rc < 0)
        return rc;
    if (k->has_server_key && !derp_pubkey_equal(&key, &k->server_key))
        return -EKEYREJECTED; /* our ClientInfo (fast start) was sealed to another key */
    k->server_key = key;
    k->has_server_key = true;
    k->server_key_seen = true;
    if (k->state == DERP_CLIENT_SERVER_KEY) {
        if (k->manual_login)
            k->state = DERP_CLIENT_LOGIN;
        else if ((rc = derp_client_send_info(k)) < 0)
            return rc;
    }
    if (k->cb->on_server_key && !derp_client_closing(k))
        k->cb->on_server_key(k, &k->server_key);
    return 0;
}

static int on_server_info(struct derp_client *k, const uint8_t *p, size_t len)
{
    uint8_t scratch[DERP_CLIENT_INFO_SCRATCH_SIZE];
    bool small = len - DERP_NONCE_LEN <= DERP_BOX_MAC_LEN + sizeof(scratch);
    struct derp_server_info info;
    /* derp_client.go parseServerInfo: every ServerInfo must open and parse, else the
     * connection dies; the splitter already refused one shorter than the nonce. */
    int rc = derp_server_info_open(p, len, &k->keypair, &k->server_key, &info,
                                   small ? scratch : NULL, small ? sizeof(scratch) : 0);
    if (rc < 0)
        return rc;
    k->server_info = info;
    k->stats.server_infos++;
    if (k->ready)
        return 0;
    derp_client_ready(k);
    if (k->cb->on_ready)
        k->cb->on_ready(k, &k->server_info);
    return 0;
}

static int on_recv_packet(struct derp_client *k, const uint8_t *p, size_t len)
{
    struct derp_packet pkt;
    int rc = derp_frame_recv_packet_decode(p, len, &pkt);
    if (rc < 0)
        return rc;
    k->stats.packets_in++;
    k->stats.packet_bytes_in += pkt.data_len;
    if (k->cb->on_packet)
        k->cb->on_packet(k, (const struct derp_pubkey *)pkt.src_key, pkt.data, pkt.data_len);
    return 0;
}

static int on_peer_gone(struct derp_client *k, const uint8_t *p, size_t len)
{
    struct derp_peer_gone g;
    int rc = derp_frame_peer_gone_decode(p, len, &g);
    if (rc == 0 && k->cb->on_peer_gone)
        k->cb->on_peer_gone(k, (const struct derp_pubkey *)g.key, g.reason);
    return rc;
}

static int on_peer_present(struct derp_client *k, const uint8_t *p, size_t len)
{
    struct derp_peer_present pp;
    int rc = derp_frame_peer_present_decode(p, len, &pp);
    if (rc == 0 && k->cb->on_peer_present)
        k->cb->on_peer_present(k, &pp);
    return rc;
}

static int on_ping(struct derp_client *k, const uint8_t *p, size_t len)
{
    const uint8_t *data;
    int rc = derp_frame_ping_decode(p, len, &data);
    if (rc < 0)
        return rc;
    uint8_t copy[DERP_PING_LEN];
    memcpy(copy, data, sizeof(copy)); /* the callback may not keep p */
    if (k->can_ack_pings) {
        rc = derp_client_pong(k, copy);
        if (rc == 0)
            k->stats.pongs_sent++;
        else if (rc != -ENOTCONN && rc != -EPIPE)
            return rc; /* a pool ran dry: the server would time us out anyway */
    }
    if (k->cb->on_ping && !derp_client_closing(k))
        k->cb->on_ping(k, copy);
    return 0;
}

static int on_pong(struct derp_client *k, const uint8_t *p, size_t len)
{
    const uint8_t *data;
    int rc = derp_frame_pong_decode(p, len, &data);
    if (rc == 0 && k->cb->on_pong)
        k->cb->on_pong(k, data);
    return rc;
}

static int on_health(struct derp_client *k, const uint8_t *p, size_t len)
{
    const char *text;
    size_t text_len;
    int rc = derp_frame_health_decode(p, len, &text, &text_len);
    if (rc == 0 && k->cb->on_health)
        k->cb->on_health(k, text, text_len);
    return rc;
}

static int on_restarting(struct derp_client *k, const uint8_t *p, size_t len)
{
    struct derp_restarting r;
    int rc = derp_frame_restarting_decode(p, len, &r);
    if (rc == 0 && k->cb->on_restarting)
        k->cb->on_restarting(k, r.reconnect_in_ms, r.try_for_ms);
    return rc;
}

/* One whole frame the splitter delivered (it applied the client length policy). */
static int frame_handle(struct derp_client *k, uint8_t type, const uint8_t *p, size_t len)
{
    k->stats.frames_in++;
    k->stats.last_type = type;
    k->stats.last_len = (uint32_t)len;
    if (!k->ready && type != DERP_FRAME_SERVER_KEY && type != DERP_FRAME_SERVER_INFO)
        k->stats.frames_early++;
    if (k->cb->on_frame && k->cb->on_frame(k, type, p, len))
        return 0;
    switch (type) {
    case DERP_FRAME_SERVER_KEY:
        return on_server_key(k, p, len);
    case DERP_FRAME_SERVER_INFO:
        return on_server_info(k, p, len);
    case DERP_FRAME_RECV_PACKET:
        return on_recv_packet(k, p, len);
    case DERP_FRAME_KEEP_ALIVE:
        if (k->cb->on_keepalive)
            k->cb->on_keepalive(k);
        return 0;
    case DERP_FRAME_PEER_GONE:
        return on_peer_gone(k, p, len);
    case DERP_FRAME_PEER_PRESENT:
        return on_peer_present(k, p, len);
    case DERP_FRAME_PING:
        return on_ping(k, p, len);
    case DERP_FRAME_PONG:
        return on_pong(k, p, len);
    case DERP_FRAME_HEALTH:
        return on_health(k, p, len);
    case DERP_FRAME_RESTARTING:
        return on_restarting(k, p, len);
    default:
        return 0; /* the splitter skips every other type: nothing reaches here */
    }
}

/* ---- Assembly of frames that span receives --------------------------------------------------- */

void derp_client_asm_release(struct derp_client *k)
{
    struct derp_client_asm *a = &k->as;
    if (a->frame)
        hd_frame_unref(k->shard, a->frame);
    else
        free(a->buf);
    memset(a, 0, sizeof(*a));
}

/* The splitter needs more bytes of a frame whose header it accepted: take what is here into a
 * buffer of the frame's size, so net keeps no tail (its tail is bounded well below 1 MiB). */
static int asm_start(struct derp_client *k, const uint8_t *data, size_t avail, size_t size)
{
    struct derp_client_asm *a = &k->as;
    HD_ASSERT(a->buf == NULL && avail < size);
    if (size <= DERP_CLIENT_POOL_FRAME_SIZE_MAX) {
        a->frame = hd_frame_get(k->shard, size);
        if (a->frame == NULL)
            return -ENOBUFS;
        a->buf = a->frame->data;
    } else {
        /* Only frames no reference server sends (ServerInfo/Health > 64 KiB) get here. */
        a->buf = malloc(size);
        if (a->buf == NULL)
            return -ENOMEM;
        k->stats.frames_heap++;
    }
    memcpy(a->buf, data, avail);
    a->size = size;
    a->have = avail;
    k->stats.frames_assembled++;
    return 0;
}

static ssize_t asm_input(struct derp_client *k, const uint8_t *data, size_t len)
{
    struct derp_client_asm *a = &k->as;
    size_t n = len < a->size - a->have ? len : a->size - a->have;
    memcpy(a->buf + a->have, data, n);
    a->have += n;
    if (a->have < a->size)
        return (ssize_t)n;
    /* Whole: let the splitter see it again so its state moves past the frame. */
    struct derp_split sp;
    int rc = derp_splitter_next(&k->split, a->buf, a->size, &sp);
    HD_ASSERT(rc == 0 && sp.kind == DERP_SPLIT_FRAME && sp.consumed == a->size);
    rc = frame_handle(k, sp.type, a->buf + sp.payload_offset, sp.len);
    derp_client_asm_release(k);
    return rc < 0 ? rc : (ssize_t)n;
}

/* ---- Stream ---------------------------------------------------------------------------------- */

/* The header the length policy refused (the splitter filled in its type and length). */
static void refused_note(struct derp_client *k, const struct derp_split *sp, size_t off)
{
    if (!sp->header_known || k->stats.refused)
        return;
    k->stats.refused = true;
    k->stats.refused_type = sp->type;
    k->stats.refused_len = sp->len;
    k->stats.refused_at = k->stats.stream_bytes + off;
}

/* Whole frames are handled where they lie; a frame cut by the end of data moves into the
 * assembly buffer; only a cut header (< 5 bytes) is left to net. */
static ssize_t stream_input(struct derp_client *k, const uint8_t *data, size_t len)
{
    size_t off = 0;
    while (off < len && !derp_client_closing(k)) {
        struct derp_split sp;
        int rc = derp_splitter_next(&k->split, data + off, len - off, &sp);
        if (rc < 0) {
            refused_note(k, &sp, off);
            return rc;
        }
        if (sp.kind == DERP_SPLIT_SKIP) {
            if (sp.frame_start && sp.dropped)
                k->stats.frames_dropped++;
            else if (sp.frame_start)
                k->stats.frames_skipped++;
            off += sp.consumed;
            continue;
        }
        if (sp.kind == DERP_SPLIT_NEED) {
            if (!sp.header_known)
                break;
            rc = asm_start(k, data + off, len - off, DERP_FRAME_HEADER_LEN + (size_t)sp.len);
            if (rc < 0)
                return rc;
            off = len;
            break;
        }
        rc = frame_handle(k, sp.type, data + off + sp.payload_offset, sp.len);
        if (rc < 0)
            return rc;
        off += sp.consumed;
    }
    /* Closed by a callback: the rest is of no use to anyone, so net need not keep it. */
    return derp_client_closing(k) ? (ssize_t)len : (ssize_t)off;
}

ssize_t derp_client_on_data(struct net_conn *c, const uint8_t *data, size_t len)
{
    struct derp_client *k = net_conn_app(c);
    if (derp_client_closing(k))
        return (ssize_t)len; /* closing: nothing more is handled */
    if (k->state == DERP_CLIENT_UPGRADING)
        return upgrade_input(k, data, len);
    ssize_t n = k->as.buf ? asm_input(k, data, len) : stream_input(k, data, len);
    if (n > 0)
        k->stats.stream_bytes += (uint64_t)n;
    return n;
}
