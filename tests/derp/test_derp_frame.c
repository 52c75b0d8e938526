/* test_derp_frame.c - DERP framing: header, every encoder/decoder, per-type bounds (one under,
 * at, one over), Appendix A/C bytes, in-place rewrites, disco detection. The stream splitter has
 * its own file section below. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "derp_disco.h"
#include "derp_frame.h"
#include "derp_test_util.h"
#include <hd/hd_base.h>

static uint8_t key_a[DERP_KEY_LEN], key_b[DERP_KEY_LEN];

static void setup_keys(void)
{
    for (int i = 0; i < DERP_KEY_LEN; i++) {
        key_a[i] = (uint8_t)(0xA0 + i);
        key_b[i] = (uint8_t)(0x10 + i);
    }
}

TestSuite(derp_frame, .init = setup_keys);

/* Compares buf[0..n) with a hex vector. */
static void expect_bytes(const uint8_t *buf, ssize_t n, const char *hex)
{
    uint8_t want[256];
    size_t want_len = test_hex(hex, want, sizeof(want));
    cr_assert_eq(n, (ssize_t)want_len, "size %zd, want %zu", n, want_len);
    cr_assert(memcmp(buf, want, want_len) == 0, "bytes differ from %s", hex);
}

Test(derp_frame, header_round_trip)
{
    uint8_t buf[8];
    uint8_t type;
    uint32_t len;

    cr_assert_eq(derp_frame_header_encode(buf, sizeof(buf), 0xAB, 0x01020304), 5);
    expect_bytes(buf, 5, "ab 01020304");
    cr_assert_eq(derp_frame_header_decode(buf, 5, &type, &len), 0);
    cr_assert_eq(type, 0xAB);
    cr_assert_eq(len, 0x01020304u);
    cr_assert_eq(derp_frame_header_encode(buf, 4, 1, 0), -ENOSPC);
    cr_assert_eq(derp_frame_header_decode(buf, 4, &type, &len), -EAGAIN);
    cr_assert_eq(derp_frame_header_decode(buf, 0, &type, &len), -EAGAIN);
    buf[1] = buf[2] = buf[3] = buf[4] = 0xFF;
    cr_assert_eq(derp_frame_header_decode(buf, 5, &type, &len), 0);
    cr_assert_eq(len, 0xFFFFFFFFu);
}

Test(derp_frame, type_names)
{
    cr_assert_str_eq(derp_frame_type_name(DERP_FRAME_SEND_PACKET), "SendPacket");
    cr_assert_str_eq(derp_frame_type_name(DERP_FRAME_RESTARTING), "Restarting");
    cr_assert_str_eq(derp_frame_type_name(0x0b), "unknown");
    cr_assert_str_eq(derp_frame_type_name(0x16), "unknown");
}

/* ---- Appendix A / C vectors --------------------------------------------------------------------
 */

Test(derp_frame, appendix_a_server_key)
{
    uint8_t key[DERP_KEY_LEN], buf[64];
    test_hex("07a37cbc142093c8b755dc1b10e86cb426374ad16aa853ed0bdfc0b2b86d1c7c", key, sizeof(key));
    ssize_t n = derp_frame_server_key_encode(buf, sizeof(buf), key);
    expect_bytes(buf, n,
                 "01 00000028 44455250f09f9491 "
                 "07a37cbc142093c8b755dc1b10e86cb426374ad16aa853ed0bdfc0b2b86d1c7c");
    const uint8_t *got;
    cr_assert_eq(derp_frame_server_key_decode(buf + 5, 40, &got), 0);
    cr_assert(memcmp(got, key, 32) == 0);
    cr_assert_eq(derp_frame_server_key_encode(buf, 44, key), -ENOSPC);
    cr_assert_eq(derp_frame_server_key_encode(buf, 45, key), 45);
}

Test(derp_frame, appendix_c_bytes)
{
    uint8_t buf[64], ping[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    char hex[200];

    expect_bytes(buf, derp_frame_keep_alive_encode(buf, sizeof(buf)), "06 00000000");
    expect_bytes(buf, derp_frame_ping_encode(buf, sizeof(buf), ping),
                 "12 00000008 0102030405060708");
    expect_bytes(buf, derp_frame_pong_encode(buf, sizeof(buf), ping),
                 "13 00000008 0102030405060708");
    expect_bytes(buf, derp_frame_note_preferred_encode(buf, sizeof(buf), true), "07 00000001 01");
    expect_bytes(buf, derp_frame_note_preferred_encode(buf, sizeof(buf), false), "07 00000001 00");
    snprintf(hex, sizeof(hex), "08 00000021 %s 01",
             "a0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebf");
    expect_bytes(buf, derp_frame_peer_gone_encode(buf, sizeof(buf), key_a, DERP_PEER_GONE_NOT_HERE),
                 hex);

    struct derp_addr addr;
    derp_addr_from_ipv4(&addr, (const uint8_t[]){198, 51, 100, 7}, 41641);
    /* Appendix C prints the length as 00000029 (41); its own bytes make 51 = 0x33, which is what
     * derpserver.go sendPeerPresent writes (keyLen + 16 + 2 + 1). */
    snprintf(hex, sizeof(hex), "09 00000033 %s 00000000000000000000ffffc6336407 a2a9 01",
             "a0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebf");
    expect_bytes(buf,
                 derp_frame_peer_present_encode(buf, sizeof(buf), key_a, &addr,
                                                derp_peer_present_flags(false, false, false)),
                 hex);
    expect_bytes(buf, derp_frame_restarting_encode(buf, sizeof(buf), 1, 2),
                 "15 00000008 00000001 00000002");
    expect_bytes(buf, derp_frame_watch_conns_encode(buf, sizeof(buf)), "10 00000000");
}

/* ---- Encoder/decoder round trips
 * ----------------------------------------------------------------- */

Test(derp_frame, packet_round_trips)
{
    static uint8_t buf[DERP_FORWARD_PACKET_LEN_MAX + 5], data[DERP_PACKET_LEN_MAX];
    uint64_t seed = 1;
    test_fill(&seed, data, sizeof(data));
    struct derp_packet p;

    size_t sizes[] = {0, 1, 1400, DERP_PACKET_LEN_MAX};
    for (size_t i = 0; i < HD_ARRAY_SIZE(sizes); i++) {
        size_t n = sizes[i];
        ssize_t w = derp_frame_send_packet_encode(buf, sizeof(buf), key_b, data, n);
        cr_assert_eq(w, (ssize_t)(5 + 32 + n));
        cr_assert_eq(buf[0], DERP_FRAME_SEND_PACKET);
        cr_assert_eq(derp_frame_send_packet_decode(buf + 5, (size_t)w - 5, &p), 0);
        cr_assert(p.src_key == NULL && memcmp(p.dst_key, key_b, 32) == 0);
        cr_assert(p.data_len == n && memcmp(p.data, data, n) == 0);
        cr_assert(p.data == buf + 37, "decoders return views, not copies");

        w = derp_frame_recv_packet_encode(buf, sizeof(buf), key_a, data, n);
        cr_assert_eq(w, (ssize_t)(37 + n));
        cr_assert_eq(derp_frame_recv_packet_decode(buf + 5, (size_t)w - 5, &p), 0);
        cr_assert(p.dst_key == NULL && memcmp(p.src_key, key_a, 32) == 0);
        cr_assert(p.data_len == n && memcmp(p.data, data, n) == 0);

        w = derp_frame_forward_packet_encode(buf, sizeof(buf), key_a, key_b, data, n);
        cr_assert_eq(w, (ssize_t)(69 + n));
        cr_assert_eq(derp_frame_forward_packet_decode(buf + 5, (size_t)w - 5, &p), 0);
        cr_assert(memcmp(p.src_key, key_a, 32) == 0 && memcmp(p.dst_key, key_b, 32) == 0);
        cr_assert(p.data_len == n && memcmp(p.data, data, n) == 0);
    }
}

Test(derp_frame, packet_encoder_limits)
{
    static uint8_t buf[DERP_FORWARD_PACKET_LEN_MAX + 8], data[DERP_PACKET_LEN_MAX + 1];
    const size_t max = DERP_PACKET_LEN_MAX;

    cr_assert_eq(derp_frame_send_packet_encode(buf, sizeof(buf), key_b, data, max), 37 + 65536);
    cr_assert_eq(derp_frame_send_packet_encode(buf, sizeof(buf), key_b, data, max + 1), -EMSGSIZE);
    cr_assert_eq(derp_frame_recv_packet_encode(buf, sizeof(buf), key_b, data, max + 1), -EMSGSIZE);
    cr_assert_eq(derp_frame_forward_packet_encode(buf, sizeof(buf), key_a, key_b, data, max + 1),
                 -EMSGSIZE);
    /* Exactly the frame size fits; one byte less does not. */
    cr_assert_eq(derp_frame_send_packet_encode(buf, 37 + 10, key_b, data, 10), 47);
    cr_assert_eq(derp_frame_send_packet_encode(buf, 37 + 9, key_b, data, 10), -ENOSPC);
    cr_assert_eq(derp_frame_recv_packet_encode(buf, 36, key_b, data, 0), -ENOSPC);
    cr_assert_eq(derp_frame_forward_packet_encode(buf, 69 + 9, key_a, key_b, data, 10), -ENOSPC);
    cr_assert_eq(derp_frame_forward_packet_encode(buf, 69 + 10, key_a, key_b, data, 10), 79);
}

Test(derp_frame, packet_prefixes_match_full_frames)
{
    uint8_t full[128], prefix[128], data[20];
    memset(data, 0x5A, sizeof(data));

    ssize_t n = derp_frame_send_packet_prefix_encode(prefix, sizeof(prefix), key_b, 20);
    cr_assert_eq(n, 37);
    derp_frame_send_packet_encode(full, sizeof(full), key_b, data, 20);
    cr_assert(memcmp(full, prefix, 37) == 0);

    n = derp_frame_recv_packet_prefix_encode(prefix, sizeof(prefix), key_a, 20);
    cr_assert_eq(n, 37);
    derp_frame_recv_packet_encode(full, sizeof(full), key_a, data, 20);
    cr_assert(memcmp(full, prefix, 37) == 0);

    n = derp_frame_forward_packet_prefix_encode(prefix, sizeof(prefix), key_a, key_b, 20);
    cr_assert_eq(n, 69);
    derp_frame_forward_packet_encode(full, sizeof(full), key_a, key_b, data, 20);
    cr_assert(memcmp(full, prefix, 69) == 0);

    cr_assert_eq(derp_frame_recv_packet_prefix_encode(prefix, 36, key_a, 20), -ENOSPC);
    cr_assert_eq(derp_frame_forward_packet_prefix_encode(prefix, 68, key_a, key_b, 20), -ENOSPC);
    cr_assert_eq(derp_frame_send_packet_prefix_encode(prefix, 37, key_b, 65537), -EMSGSIZE);
}

Test(derp_frame, encoders_accept_overlapping_data)
{
    uint8_t buf[128], want[128], data[40];
    for (size_t i = 0; i < sizeof(data); i++)
        data[i] = (uint8_t)i;
    derp_frame_recv_packet_encode(want, sizeof(want), key_a, data, sizeof(data));
    /* The data already sits where the encoder will put it, and the key inside the data area. */
    memcpy(buf + 37, data, sizeof(data));
    ssize_t n = derp_frame_recv_packet_encode(buf, sizeof(buf), key_a, buf + 37, sizeof(data));
    cr_assert(n == 77 && memcmp(buf, want, 77) == 0);
    /* Data before its destination (moving right over the prefix area). */
    memcpy(buf, data, sizeof(data));
    n = derp_frame_recv_packet_encode(buf, sizeof(buf), key_a, buf, sizeof(data));
    cr_assert(n == 77 && memcmp(buf, want, 77) == 0);
}

Test(derp_frame, small_frame_round_trips)
{
    uint8_t buf[128];
    bool pref;
    const uint8_t *k, *d;

    derp_frame_note_preferred_encode(buf, sizeof(buf), true);
    cr_assert(derp_frame_note_preferred_decode(buf + 5, 1, &pref) == 0 && pref);
    buf[5] = 0x05; /* any non-zero byte = true */
    cr_assert(derp_frame_note_preferred_decode(buf + 5, 1, &pref) == 0 && pref);
    buf[5] = 0;
    cr_assert(derp_frame_note_preferred_decode(buf + 5, 1, &pref) == 0 && !pref);

    derp_frame_close_peer_encode(buf, sizeof(buf), key_b);
    cr_assert_eq(derp_frame_close_peer_decode(buf + 5, 32, &k), 0);
    cr_assert(memcmp(k, key_b, 32) == 0);

    uint8_t pdata[8] = {9, 8, 7, 6, 5, 4, 3, 2};
    derp_frame_ping_encode(buf, sizeof(buf), pdata);
    cr_assert(derp_frame_ping_decode(buf + 5, 8, &d) == 0 && memcmp(d, pdata, 8) == 0);
    derp_frame_pong_encode(buf, sizeof(buf), pdata);
    cr_assert(derp_frame_pong_decode(buf + 5, 8, &d) == 0 && memcmp(d, pdata, 8) == 0);
    cr_assert_eq(derp_frame_watch_conns_decode(0), 0);

    struct derp_restarting r;
    derp_frame_restarting_encode(buf, sizeof(buf), 0xDEADBEEF, 7);
    cr_assert_eq(derp_frame_restarting_decode(buf + 5, 8, &r), 0);
    cr_assert(r.reconnect_in_ms == 0xDEADBEEFu && r.try_for_ms == 7);

    const char *text;
    size_t text_len;
    ssize_t n = derp_frame_health_encode(buf, sizeof(buf), "disk on fire", 12);
    cr_assert_eq(n, 17);
    cr_assert_eq(derp_frame_health_decode(buf + 5, 12, &text, &text_len), 0);
    cr_assert(text_len == 12 && memcmp(text, "disk on fire", 12) == 0);
    cr_assert_eq(derp_frame_health_encode(buf, sizeof(buf), NULL, 0), 5); /* healthy again */
}

Test(derp_frame, peer_gone_and_present)
{
    uint8_t buf[128];
    struct derp_peer_gone g;
    struct derp_peer_present pp;
    struct derp_addr a6 = {.ip = {0x20, 0x01, 0x0d, 0xb8, [15] = 1}, .port = 443};

    derp_frame_peer_gone_encode(buf, sizeof(buf), key_a, DERP_PEER_GONE_DISCONNECTED);
    cr_assert_eq(derp_frame_peer_gone_decode(buf + 5, 33, &g), 0);
    cr_assert(memcmp(g.key, key_a, 32) == 0 && g.reason == DERP_PEER_GONE_DISCONNECTED);
    buf[5 + 32] = DERP_PEER_GONE_NOT_HERE;
    cr_assert(derp_frame_peer_gone_decode(buf + 5, 40, &g) == 0 && g.reason == 1, "extra ignored");
    /* Old servers: 32 bytes, reason defaults to Disconnected. */
    cr_assert(derp_frame_peer_gone_decode(buf + 5, 32, &g) == 0 && g.reason == 0);
    cr_assert_eq(derp_frame_peer_gone_decode(buf + 5, 31, &g), -EPROTO);
    cr_assert_eq(derp_frame_peer_gone_encode(buf, sizeof(buf), key_a, 0xF0), -EINVAL);

    uint8_t flags = derp_peer_present_flags(true, false, true);
    cr_assert_eq(derp_frame_peer_present_encode(buf, sizeof(buf), key_b, &a6, flags), 56);
    cr_assert_eq(derp_frame_peer_present_decode(buf + 5, 51, &pp), 0);
    cr_assert(memcmp(pp.key, key_b, 32) == 0 && pp.has_addr && pp.has_flags);
    cr_assert(memcmp(pp.addr.ip, a6.ip, 16) == 0 && pp.addr.port == 443);
    cr_assert_eq(pp.flags, DERP_PEER_PRESENT_IS_MESH_PEER | DERP_PEER_PRESENT_NOT_IDEAL);
    /* Optional fields: key only; key + addr without flags; partial addr = no addr. */
    cr_assert(derp_frame_peer_present_decode(buf + 5, 32, &pp) == 0 && !pp.has_addr);
    cr_assert(derp_frame_peer_present_decode(buf + 5, 49, &pp) == 0 && !pp.has_addr);
    cr_assert(derp_frame_peer_present_decode(buf + 5, 50, &pp) == 0 && pp.has_addr &&
              !pp.has_flags && pp.addr.port == 443);
    cr_assert(derp_frame_peer_present_decode(buf + 5, 60, &pp) == 0 && pp.has_flags);
    cr_assert_eq(derp_frame_peer_present_decode(buf + 5, 31, &pp), -EPROTO);
    /* Unknown address: zeros. */
    derp_frame_peer_present_encode(buf, sizeof(buf), key_b, NULL, DERP_PEER_PRESENT_IS_REGULAR);
    cr_assert(derp_frame_peer_present_decode(buf + 5, 51, &pp) == 0);
    cr_assert(derp_addr_is_unspecified(&pp.addr) && pp.addr.port == 0 && pp.flags == 1);
    cr_assert_eq(derp_frame_peer_present_encode(buf, 55, key_b, NULL, 1), -ENOSPC);
}

Test(derp_frame, peer_present_flags)
{
    cr_assert_eq(derp_peer_present_flags(false, false, false), DERP_PEER_PRESENT_IS_REGULAR);
    cr_assert_eq(derp_peer_present_flags(true, false, false), DERP_PEER_PRESENT_IS_MESH_PEER);
    cr_assert_eq(derp_peer_present_flags(false, true, false), DERP_PEER_PRESENT_IS_PROBER);
    cr_assert_eq(derp_peer_present_flags(false, false, true), DERP_PEER_PRESENT_NOT_IDEAL);
    cr_assert_eq(derp_peer_present_flags(true, true, true), 0x0E);
}

Test(derp_frame, info_frames)
{
    uint8_t buf[128], sealed[60];
    memset(sealed, 0x33, sizeof(sealed));
    struct derp_client_info_frame ci;
    struct derp_server_info_frame si;

    ssize_t n = derp_frame_client_info_encode(buf, sizeof(buf), key_a, sealed, sizeof(sealed));
    cr_assert_eq(n, 5 + 32 + 60);
    cr_assert(buf[0] == DERP_FRAME_CLIENT_INFO);
    cr_assert_eq(derp_frame_client_info_decode(buf + 5, 92, &ci), 0);
    cr_assert(memcmp(ci.client_key, key_a, 32) == 0 && ci.sealed_len == 60);
    cr_assert(memcmp(ci.sealed, sealed, 60) == 0);
    cr_assert_eq(derp_frame_client_info_encode(buf, 96, key_a, sealed, 60), -ENOSPC);
    cr_assert_eq(derp_frame_client_info_encode(buf, 128, key_a, sealed, 23), -EINVAL);

    n = derp_frame_server_info_encode(buf, sizeof(buf), sealed, sizeof(sealed));
    cr_assert_eq(n, 65);
    cr_assert_eq(derp_frame_server_info_decode(buf + 5, 60, &si), 0);
    cr_assert(si.sealed == buf + 5 && si.sealed_len == 60);
    cr_assert_eq(derp_frame_server_info_encode(buf, sizeof(buf), sealed, 23), -EINVAL);
}

/* ---- Decoder bounds: one under, at, one over ---------------------------------------------------
 */

Test(derp_frame, decoder_bounds)
{
    static uint8_t p[DERP_SERVER_INFO_LEN_MAX + 2];
    struct derp_packet pk;
    struct derp_client_info_frame ci;
    struct derp_server_info_frame si;
    struct derp_restarting r;
    const uint8_t *k;
    const char *t;
    size_t tl;
    bool b;

    cr_assert_eq(derp_frame_send_packet_decode(p, 31, &pk), -EPROTO);
    cr_assert_eq(derp_frame_send_packet_decode(p, 32, &pk), 0);
    cr_assert_eq(derp_frame_send_packet_decode(p, 65568, &pk), 0);
    cr_assert_eq(derp_frame_send_packet_decode(p, 65569, &pk), -EMSGSIZE);
    cr_assert_eq(derp_frame_forward_packet_decode(p, 63, &pk), -EPROTO);
    cr_assert_eq(derp_frame_forward_packet_decode(p, 64, &pk), 0);
    cr_assert_eq(derp_frame_forward_packet_decode(p, 65600, &pk), 0);
    cr_assert_eq(derp_frame_forward_packet_decode(p, 65601, &pk), -EMSGSIZE);
    cr_assert_eq(derp_frame_recv_packet_decode(p, 31, &pk), -EPROTO);
    cr_assert_eq(derp_frame_recv_packet_decode(p, 32, &pk), 0);
    cr_assert_eq(derp_frame_recv_packet_decode(p, 1 << 20, &pk), 0);
    cr_assert_eq(derp_frame_recv_packet_decode(p, (1 << 20) + 1, &pk), -EMSGSIZE);
    cr_assert_eq(derp_frame_note_preferred_decode(p, 0, &b), -EPROTO);
    cr_assert_eq(derp_frame_note_preferred_decode(p, 2, &b), -EPROTO);
    cr_assert_eq(derp_frame_close_peer_decode(p, 31, &k), -EPROTO);
    cr_assert_eq(derp_frame_close_peer_decode(p, 33, &k), -EPROTO);
    cr_assert_eq(derp_frame_watch_conns_decode(1), -EPROTO);
    cr_assert_eq(derp_frame_ping_decode(p, 7, &k), -EPROTO);
    cr_assert_eq(derp_frame_ping_decode(p, 8, &k), 0);
    cr_assert_eq(derp_frame_ping_decode(p, 1000, &k), 0);
    cr_assert_eq(derp_frame_pong_decode(p, 7, &k), -EPROTO);
    cr_assert_eq(derp_frame_restarting_decode(p, 7, &r), -EPROTO);
    cr_assert_eq(derp_frame_restarting_decode(p, 9, &r), 0);
    cr_assert_eq(derp_frame_health_decode(p, 1 << 20, &t, &tl), 0);
    cr_assert_eq(derp_frame_health_decode(p, (1 << 20) + 1, &t, &tl), -EMSGSIZE);
    cr_assert_eq(derp_frame_client_info_decode(p, 55, &ci), -EPROTO);
    cr_assert_eq(derp_frame_client_info_decode(p, 56, &ci), 0);
    cr_assert_eq(derp_frame_client_info_decode(p, 256 << 10, &ci), 0);
    cr_assert_eq(derp_frame_client_info_decode(p, (256 << 10) + 1, &ci), -EMSGSIZE);
    cr_assert_eq(derp_frame_server_info_decode(p, 23, &si), -EPROTO);
    cr_assert_eq(derp_frame_server_info_decode(p, 24, &si), 0);
    cr_assert_eq(derp_frame_server_info_decode(p, DERP_SERVER_INFO_LEN_MAX, &si), 0);
    cr_assert_eq(derp_frame_server_info_decode(p, DERP_SERVER_INFO_LEN_MAX + 1, &si), -EMSGSIZE);

    memcpy(p, DERP_MAGIC, DERP_MAGIC_LEN);
    cr_assert_eq(derp_frame_server_key_decode(p, 39, &k), -EPROTO);
    cr_assert_eq(derp_frame_server_key_decode(p, 40, &k), 0);
    cr_assert_eq(derp_frame_server_key_decode(p, 1024, &k), 0, "future bytes are ignored");
    cr_assert_eq(derp_frame_server_key_decode(p, 1025, &k), -EMSGSIZE);
    p[7] ^= 1;
    cr_assert_eq(derp_frame_server_key_decode(p, 40, &k), -EPROTO, "bad magic");
}

Test(derp_frame, encoder_size_limits)
{
    static char text[DERP_HEALTH_LEN_MAX + 6];
    static uint8_t buf[DERP_HEALTH_LEN_MAX + 6];
    cr_assert_eq(derp_frame_health_encode(buf, sizeof(buf), text, DERP_HEALTH_LEN_MAX),
                 5 + DERP_HEALTH_LEN_MAX);
    cr_assert_eq(derp_frame_health_encode(buf, sizeof(buf), text, DERP_HEALTH_LEN_MAX + 1),
                 -EMSGSIZE, "never send frames > 1 MiB");
    cr_assert_eq(derp_frame_server_info_encode(buf, sizeof(buf), buf, (1 << 20) + 1), -EMSGSIZE);
    cr_assert_eq(derp_frame_client_info_encode(buf, sizeof(buf), key_a, buf, (256 << 10) - 31),
                 -EMSGSIZE);
    cr_assert_eq(derp_frame_client_info_encode(buf, sizeof(buf), key_a, buf, (256 << 10) - 32),
                 5 + (256 << 10));
    /* Every fixed-size encoder refuses a buffer one byte short. */
    uint8_t d8[8] = {0};
    cr_assert_eq(derp_frame_keep_alive_encode(buf, 4), -ENOSPC);
    cr_assert_eq(derp_frame_note_preferred_encode(buf, 5, true), -ENOSPC);
    cr_assert_eq(derp_frame_peer_gone_encode(buf, 37, key_a, 0), -ENOSPC);
    cr_assert_eq(derp_frame_watch_conns_encode(buf, 4), -ENOSPC);
    cr_assert_eq(derp_frame_close_peer_encode(buf, 36, key_a), -ENOSPC);
    cr_assert_eq(derp_frame_ping_encode(buf, 12, d8), -ENOSPC);
    cr_assert_eq(derp_frame_pong_encode(buf, 12, d8), -ENOSPC);
    cr_assert_eq(derp_frame_restarting_encode(buf, 12, 1, 2), -ENOSPC);
    cr_assert_eq(derp_frame_health_encode(buf, 9, "hello", 5), -ENOSPC);
    cr_assert_eq(derp_frame_server_info_encode(buf, 28, buf + 100, 24), -ENOSPC);
}

/* ---- Per-type policy (derp_frame_check)
 * ---------------------------------------------------------- */

#define CHECK(mode, mesh, type, len, want)                                                         \
    cr_assert_eq(derp_frame_check(mode, mesh, type, len), want, "type 0x%02x len %u", type,        \
                 (unsigned)(len))

Test(derp_frame, check_server_hello)
{
    enum derp_reader_mode m = DERP_READER_SERVER_HELLO;
    CHECK(m, false, DERP_FRAME_CLIENT_INFO, 55, -EPROTO);
    CHECK(m, false, DERP_FRAME_CLIENT_INFO, 56, DERP_FRAME_DELIVER);
    CHECK(m, false, DERP_FRAME_CLIENT_INFO, 256 << 10, DERP_FRAME_DELIVER);
    CHECK(m, false, DERP_FRAME_CLIENT_INFO, (256 << 10) + 1, -EMSGSIZE);
    CHECK(m, false, DERP_FRAME_SEND_PACKET, 100, -EPROTO);
    CHECK(m, false, DERP_FRAME_NOTE_PREFERRED, 1, -EPROTO);
    CHECK(m, false, 0x30, 0, -EPROTO);
}

Test(derp_frame, check_server)
{
    enum derp_reader_mode m = DERP_READER_SERVER;
    CHECK(m, false, DERP_FRAME_SEND_PACKET, 31, -EPROTO);
    CHECK(m, false, DERP_FRAME_SEND_PACKET, 32, DERP_FRAME_DELIVER);
    CHECK(m, false, DERP_FRAME_SEND_PACKET, 65568, DERP_FRAME_DELIVER);
    CHECK(m, false, DERP_FRAME_SEND_PACKET, 65569, -EMSGSIZE);
    CHECK(m, false, DERP_FRAME_SEND_PACKET, 0xFFFFFFFFu, -EMSGSIZE);
    CHECK(m, true, DERP_FRAME_FORWARD_PACKET, 63, -EPROTO);
    CHECK(m, true, DERP_FRAME_FORWARD_PACKET, 64, DERP_FRAME_DELIVER);
    CHECK(m, true, DERP_FRAME_FORWARD_PACKET, 65600, DERP_FRAME_DELIVER);
    CHECK(m, true, DERP_FRAME_FORWARD_PACKET, 65601, -EMSGSIZE);
    CHECK(m, false, DERP_FRAME_FORWARD_PACKET, 100, -EPERM);
    CHECK(m, false, DERP_FRAME_FORWARD_PACKET, 0xFFFFFFFFu, -EPERM);
    CHECK(m, false, DERP_FRAME_NOTE_PREFERRED, 0, -EPROTO);
    CHECK(m, false, DERP_FRAME_NOTE_PREFERRED, 1, DERP_FRAME_DELIVER);
    CHECK(m, false, DERP_FRAME_NOTE_PREFERRED, 2, -EPROTO);
    CHECK(m, true, DERP_FRAME_WATCH_CONNS, 0, DERP_FRAME_DELIVER);
    CHECK(m, true, DERP_FRAME_WATCH_CONNS, 1, -EPROTO);
    CHECK(m, false, DERP_FRAME_WATCH_CONNS, 0, -EPERM);
    CHECK(m, true, DERP_FRAME_CLOSE_PEER, 31, -EPROTO);
    CHECK(m, true, DERP_FRAME_CLOSE_PEER, 32, DERP_FRAME_DELIVER);
    CHECK(m, true, DERP_FRAME_CLOSE_PEER, 33, -EPROTO);
    CHECK(m, false, DERP_FRAME_CLOSE_PEER, 32, -EPERM);
    CHECK(m, false, DERP_FRAME_PING, 7, -EPROTO);
    CHECK(m, false, DERP_FRAME_PING, 8, DERP_FRAME_DELIVER);
    CHECK(m, false, DERP_FRAME_PING, 1000, DERP_FRAME_DELIVER);
    CHECK(m, false, DERP_FRAME_PING, 1001, -EMSGSIZE);
    /* Everything else is skipped, whatever its length. */
    CHECK(m, false, 0x30, 0xFFFFFFFFu, DERP_FRAME_SKIP);
    CHECK(m, false, 0x0b, 0, DERP_FRAME_SKIP);
    CHECK(m, false, DERP_FRAME_PONG, 8, DERP_FRAME_SKIP);
    CHECK(m, false, DERP_FRAME_KEEP_ALIVE, 0, DERP_FRAME_SKIP);
    CHECK(m, false, DERP_FRAME_SERVER_KEY, 40, DERP_FRAME_SKIP);
    CHECK(m, false, DERP_FRAME_CLIENT_INFO, 100, DERP_FRAME_SKIP);
    CHECK(m, false, DERP_FRAME_RECV_PACKET, 1 << 30, DERP_FRAME_SKIP);
}

Test(derp_frame, check_client)
{
    enum derp_reader_mode h = DERP_READER_CLIENT_HELLO, m = DERP_READER_CLIENT;
    CHECK(h, false, DERP_FRAME_SERVER_KEY, 39, -EPROTO);
    CHECK(h, false, DERP_FRAME_SERVER_KEY, 40, DERP_FRAME_DELIVER);
    CHECK(h, false, DERP_FRAME_SERVER_KEY, 1024, DERP_FRAME_DELIVER);
    CHECK(h, false, DERP_FRAME_SERVER_KEY, 1025, -EMSGSIZE);
    CHECK(h, false, DERP_FRAME_SERVER_INFO, 60, -EPROTO);

    CHECK(m, false, DERP_FRAME_HEALTH, 1 << 20, DERP_FRAME_DELIVER);
    CHECK(m, false, DERP_FRAME_HEALTH, (1 << 20) + 1, -EMSGSIZE);
    CHECK(m, false, 0x30, (1 << 20) + 1, -EMSGSIZE);
    CHECK(m, false, 0x30, 1 << 20, DERP_FRAME_SKIP);
    CHECK(m, false, DERP_FRAME_SERVER_INFO, 23, -EPROTO);
    CHECK(m, false, DERP_FRAME_SERVER_INFO, 24, DERP_FRAME_DELIVER);
    CHECK(m, false, DERP_FRAME_RECV_PACKET, 31, DERP_FRAME_DROP);
    CHECK(m, false, DERP_FRAME_RECV_PACKET, 32, DERP_FRAME_DELIVER);
    CHECK(m, false, DERP_FRAME_PEER_GONE, 31, DERP_FRAME_DROP);
    CHECK(m, false, DERP_FRAME_PEER_GONE, 32, DERP_FRAME_DELIVER);
    CHECK(m, false, DERP_FRAME_PEER_PRESENT, 31, DERP_FRAME_DROP);
    CHECK(m, false, DERP_FRAME_PEER_PRESENT, 32, DERP_FRAME_DELIVER);
    CHECK(m, false, DERP_FRAME_PING, 7, DERP_FRAME_DROP);
    CHECK(m, false, DERP_FRAME_PING, 8, DERP_FRAME_DELIVER);
    CHECK(m, false, DERP_FRAME_PING, 5000, DERP_FRAME_DELIVER);
    CHECK(m, false, DERP_FRAME_PONG, 7, DERP_FRAME_DROP);
    CHECK(m, false, DERP_FRAME_RESTARTING, 7, DERP_FRAME_DROP);
    CHECK(m, false, DERP_FRAME_RESTARTING, 8, DERP_FRAME_DELIVER);
    CHECK(m, false, DERP_FRAME_KEEP_ALIVE, 3, DERP_FRAME_DELIVER);
    CHECK(m, false, DERP_FRAME_SERVER_KEY, 40, DERP_FRAME_SKIP);
    CHECK(m, false, DERP_FRAME_SEND_PACKET, 40, DERP_FRAME_SKIP);
    cr_assert_eq(derp_frame_check((enum derp_reader_mode)99, false, 1, 1), -EINVAL);
}

/* ---- In-place rewrites --------------------------------------------------------------------------
 */

Test(derp_frame, send_to_recv_inplace)
{
    uint8_t frame[64], want[64], data[20];
    memset(data, 0x77, sizeof(data));
    ssize_t n = derp_frame_send_packet_encode(frame, sizeof(frame), key_b, data, sizeof(data));
    derp_frame_recv_packet_encode(want, sizeof(want), key_a, data, sizeof(data));
    derp_frame_send_to_recv_inplace(frame, (size_t)n, key_a);
    cr_assert(memcmp(frame, want, (size_t)n) == 0);
}

Test(derp_frame, forward_to_recv_inplace)
{
    uint8_t frame[128], want[128], data[20];
    memset(data, 0x66, sizeof(data));
    ssize_t n = derp_frame_forward_packet_encode(frame, sizeof(frame), key_a, key_b, data, 20);
    ssize_t w = derp_frame_recv_packet_encode(want, sizeof(want), key_a, data, 20);
    uint8_t *out = derp_frame_forward_to_recv_inplace(frame, (size_t)n);
    cr_assert_eq(out, frame + 32);
    cr_assert_eq(w, n - 32);
    cr_assert(memcmp(out, want, (size_t)w) == 0);
    /* Empty packet edge. */
    n = derp_frame_forward_packet_encode(frame, sizeof(frame), key_a, key_b, data, 0);
    w = derp_frame_recv_packet_encode(want, sizeof(want), key_a, data, 0);
    out = derp_frame_forward_to_recv_inplace(frame, (size_t)n);
    cr_assert(memcmp(out, want, (size_t)w) == 0);
}

Test(derp_frame, inplace_rejects_wrong_frame, .signal = SIGABRT)
{
    uint8_t frame[64] = {DERP_FRAME_PING};
    derp_frame_send_to_recv_inplace(frame, sizeof(frame), key_a); /* our bug: HD_ASSERT */
}

/* ---- Disco detection (§6.2)
 * ----------------------------------------------------------------------- */

Test(derp_frame, disco_predicate)
{
    uint8_t p[100] = {0};
    memcpy(p, DERP_DISCO_MAGIC, DERP_DISCO_MAGIC_LEN);
    cr_assert(!derp_disco_is_packet(p, 61));
    cr_assert(derp_disco_is_packet(p, 62));
    cr_assert(derp_disco_is_packet(p, 100));
    p[5] ^= 1;
    cr_assert(!derp_disco_is_packet(p, 62));
    p[5] ^= 1;
    p[0] = 'X';
    cr_assert(!derp_disco_is_packet(p, 100));
    cr_assert(!derp_disco_is_packet(p, 0));
}

Test(derp_frame, addr_helpers)
{
    struct derp_addr a;
    char text[DERP_ADDR_TEXT_SIZE];
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(41641)};
    memcpy(&sin.sin_addr, (const uint8_t[]){198, 51, 100, 7}, 4);
    cr_assert_eq(derp_addr_from_sockaddr(&a, (struct sockaddr *)&sin, sizeof(sin)), 0);
    cr_assert(derp_addr_is_ipv4(&a) && a.port == 41641);
    cr_assert_eq(derp_addr_format_ip(&a, text, sizeof(text)), 12);
    cr_assert_str_eq(text, "198.51.100.7");
    cr_assert_eq(derp_addr_format_ip(&a, text, 12), -ENOSPC);

    struct sockaddr_in6 sin6 = {.sin6_family = AF_INET6, .sin6_port = htons(3478)};
    sin6.sin6_addr.s6_addr[0] = 0x20;
    sin6.sin6_addr.s6_addr[1] = 0x01;
    sin6.sin6_addr.s6_addr[2] = 0x0d;
    sin6.sin6_addr.s6_addr[3] = 0xb8;
    sin6.sin6_addr.s6_addr[15] = 1;
    cr_assert_eq(derp_addr_from_sockaddr(&a, (struct sockaddr *)&sin6, sizeof(sin6)), 0);
    cr_assert(!derp_addr_is_ipv4(&a) && a.port == 3478);
    derp_addr_format_ip(&a, text, sizeof(text));
    cr_assert_str_eq(text, "2001:db8::1");
    cr_assert_eq(derp_addr_from_sockaddr(&a, (struct sockaddr *)&sin6, sizeof(sin)), -EINVAL);

    struct sockaddr sa = {.sa_family = AF_UNIX};
    cr_assert_eq(derp_addr_from_sockaddr(&a, &sa, sizeof(sa)), -EAFNOSUPPORT);
    memset(&a, 0, sizeof(a));
    cr_assert_eq(derp_addr_format_ip(&a, text, sizeof(text)), 0, "unknown = empty Source");
    cr_assert_str_eq(text, "");
}
