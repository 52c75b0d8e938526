/* fuzz_derp_frames.c - libFuzzer target for the DERP stream splitter and every frame decoder
 * (apps/derp/proto/derp_frame.c). Input: a mode byte (bits 0-1 the reader mode, bit 2 mesh, bits
 * 3-7 how to cut the stream, scaled to its length), then the bytes a peer sent. The stream is
 * split twice, whole and cut at the chosen points (as arriving over TCP), keeping unconsumed
 * bytes as a connection does; each whole frame goes through its type's decoder. Invariants: both
 * feeds give the same frames, skipped frames (counted once, at their first step) and verdict; a
 * step never consumes more than it was given, a NEED consumes nothing and never asks past
 * derp_splitter_frame_size_max; a frame's payload lies inside the bytes given; every view a decoder
 * returns lies inside the payload. */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "derp_frame.h"
#include "fuzz_util.h"

#define STREAM_MAX (1u << 20)

static bool inside(const uint8_t *v, size_t n, const uint8_t *p, size_t len)
{
    return v == NULL || (v >= p && v + n <= p + len);
}

/* The three packet frames: keys and data inside the payload. */
static int decode_packet(uint8_t type, const uint8_t *p, size_t len, uint64_t *h)
{
    struct derp_packet pk;
    int rc = type == DERP_FRAME_SEND_PACKET   ? derp_frame_send_packet_decode(p, len, &pk)
             : type == DERP_FRAME_RECV_PACKET ? derp_frame_recv_packet_decode(p, len, &pk)
                                              : derp_frame_forward_packet_decode(p, len, &pk);
    if (rc == 0) {
        CHECK(inside(pk.src_key, DERP_KEY_LEN, p, len));
        CHECK(inside(pk.dst_key, DERP_KEY_LEN, p, len));
        CHECK(inside(pk.data, pk.data_len, p, len));
        *h = fuzz_mix(*h, pk.data_len);
    }
    return rc;
}

/* The login and mesh frames. */
static int decode_login(uint8_t type, const uint8_t *p, size_t len)
{
    const uint8_t *v;
    int rc;
    if (type == DERP_FRAME_SERVER_KEY) {
        if ((rc = derp_frame_server_key_decode(p, len, &v)) == 0)
            CHECK(inside(v, DERP_KEY_LEN, p, len));
    } else if (type == DERP_FRAME_CLIENT_INFO) {
        struct derp_client_info_frame ci;
        if ((rc = derp_frame_client_info_decode(p, len, &ci)) == 0)
            CHECK(inside(ci.client_key, DERP_KEY_LEN, p, len) &&
                  inside(ci.sealed, ci.sealed_len, p, len));
    } else if (type == DERP_FRAME_SERVER_INFO) {
        struct derp_server_info_frame si;
        if ((rc = derp_frame_server_info_decode(p, len, &si)) == 0)
            CHECK(inside(si.sealed, si.sealed_len, p, len));
    } else if (type == DERP_FRAME_WATCH_CONNS) {
        rc = derp_frame_watch_conns_decode(len);
    } else {
        if ((rc = derp_frame_close_peer_decode(p, len, &v)) == 0)
            CHECK(inside(v, DERP_KEY_LEN, p, len));
    }
    return rc;
}

/* Presence, pings, health and the rest a server or client sends in the steady state. */
static int decode_other(uint8_t type, const uint8_t *p, size_t len, uint64_t *h)
{
    const uint8_t *v;
    int rc = -ENOSYS;
    if (type == DERP_FRAME_NOTE_PREFERRED) {
        bool pref;
        if ((rc = derp_frame_note_preferred_decode(p, len, &pref)) == 0)
            *h = fuzz_mix(*h, pref);
    } else if (type == DERP_FRAME_PEER_GONE) {
        struct derp_peer_gone g;
        if ((rc = derp_frame_peer_gone_decode(p, len, &g)) == 0)
            CHECK(inside(g.key, DERP_KEY_LEN, p, len));
    } else if (type == DERP_FRAME_PEER_PRESENT) {
        struct derp_peer_present pp;
        if ((rc = derp_frame_peer_present_decode(p, len, &pp)) == 0) {
            CHECK(inside(pp.key, DERP_KEY_LEN, p, len));
            *h = fuzz_mix(*h, (uint64_t)pp.has_addr << 1 | pp.has_flags);
        }
    } else if (type == DERP_FRAME_PING || type == DERP_FRAME_PONG) {
        rc = type == DERP_FRAME_PING ? derp_frame_ping_decode(p, len, &v)
                                     : derp_frame_pong_decode(p, len, &v);
        if (rc == 0)
            CHECK(inside(v, DERP_PING_LEN, p, len));
    } else if (type == DERP_FRAME_HEALTH) {
        const char *text;
        size_t n;
        if ((rc = derp_frame_health_decode(p, len, &text, &n)) == 0)
            CHECK(inside((const uint8_t *)text, n, p, len));
    } else if (type == DERP_FRAME_RESTARTING) {
        struct derp_restarting r;
        if ((rc = derp_frame_restarting_decode(p, len, &r)) == 0)
            *h = fuzz_mix(*h, (uint64_t)r.reconnect_in_ms << 32 | r.try_for_ms);
    }
    return rc;
}

/* Every decoder for the frame's type; views checked, digest of what was decoded. */
static uint64_t decode(uint8_t type, const uint8_t *p, size_t len)
{
    uint64_t h = fuzz_mix(0, type);
    int rc;
    if (type == DERP_FRAME_SEND_PACKET || type == DERP_FRAME_RECV_PACKET ||
        type == DERP_FRAME_FORWARD_PACKET)
        rc = decode_packet(type, p, len, &h);
    else if (type == DERP_FRAME_SERVER_KEY || type == DERP_FRAME_CLIENT_INFO ||
             type == DERP_FRAME_SERVER_INFO || type == DERP_FRAME_WATCH_CONNS ||
             type == DERP_FRAME_CLOSE_PEER)
        rc = decode_login(type, p, len);
    else
        rc = decode_other(type, p, len, &h);
    CHECK(rc == 0 || rc == -EPROTO || rc == -EMSGSIZE || rc == -ENOSYS);
    return fuzz_mix(h, (uint64_t)(rc + 1000));
}

struct trace {
    uint64_t hash;
    int error;
};

/* Feeds stream[0..len) in pieces ending at cuts[] (sorted, the last = len). */
static struct trace run(enum derp_reader_mode mode, bool mesh, const uint8_t *stream, size_t len,
                        const size_t *cuts, unsigned ncuts)
{
    static uint8_t buf[STREAM_MAX];
    CHECK(ncuts > 0 && cuts[ncuts - 1] == len);
    struct derp_splitter sp;
    derp_splitter_init(&sp, mode);
    struct trace t = {0};
    size_t have = 0, fed = 0; /* buf[0..have) unconsumed; stream[0..fed) given */
    for (unsigned c = 0; c < ncuts; c++) {
        memcpy(buf + have, stream + fed, cuts[c] - fed);
        have += cuts[c] - fed;
        fed = cuts[c];
        for (unsigned steps = 0; steps < 1u << 20; steps++) {
            struct derp_split out;
            int rc = derp_splitter_next(&sp, buf, have, &out);
            if (rc < 0) {
                CHECK(rc == -EPROTO || rc == -EMSGSIZE || rc == -EPERM);
                t.error = rc;
                return t;
            }
            CHECK(out.consumed <= have);
            if (out.kind == DERP_SPLIT_NEED) {
                CHECK(out.consumed == 0 && out.need > 0);
                CHECK(have + out.need <= derp_splitter_frame_size_max(&sp) ||
                      derp_splitter_skipping(&sp));
                break;
            }
            if (out.kind == DERP_SPLIT_FRAME) {
                CHECK(out.payload_offset + out.len <= have);
                t.hash = fuzz_mix(t.hash, decode(out.type, buf + out.payload_offset, out.len));
                t.hash = fuzz_mix_bytes(t.hash, buf + out.payload_offset, out.len);
                if (out.type == DERP_FRAME_CLIENT_INFO && mesh)
                    derp_splitter_set_mesh(&sp, true); /* as the server does after admission */
            } else if (out.frame_start) { /* a skipped frame streams past in any number of steps */
                CHECK(out.header_known);
                t.hash = fuzz_mix(t.hash, 0x5000u + out.type + ((uint64_t)out.len << 8));
            }
            memmove(buf, buf + out.consumed, have - out.consumed);
            have -= out.consumed;
            if (out.consumed == 0 && out.kind != DERP_SPLIT_FRAME)
                break;
        }
    }
    t.hash = fuzz_mix(t.hash, have); /* bytes left over: the same either way */
    return t;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size - 1 > STREAM_MAX)
        return 0;
    uint8_t m = data[0];
    enum derp_reader_mode mode = (enum derp_reader_mode)(m & 3);
    bool mesh = m & 4;
    const uint8_t *s = data + 1;
    size_t len = size - 1;
    size_t whole[1] = {len};
    struct trace a = run(mode, mesh, s, len, whole, 1);
    /* Cuts: every k bytes, k from the mode byte (1..32), so frames straddle every boundary. */
    static size_t cuts[STREAM_MAX + 1];
    unsigned n = 0;
    size_t k = (size_t)(m >> 3) + 1;
    for (size_t at = k; at < len; at += k)
        cuts[n++] = at;
    cuts[n++] = len;
    struct trace b = run(mode, mesh, s, len, cuts, n);
    CHECK(a.error == b.error);
    CHECK(a.hash == b.hash);
    return 0;
}
