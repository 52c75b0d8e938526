/* test_conformance_mesh.c - spec §14 rows 8 (mesh half), 21 (watcher half), 22-25 against a
 * real hderp-server started with -mesh-psk-file: mesh-only frames without the key close the
 * connection, WatchConns snapshots and live updates with flags and addresses, ClosePeer and
 * ForwardPacket. Raw blocking clients on the test thread. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "conf_support.h"

#define QUIET_MS  300
#define MESH_HEX  "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
#define MESH_JSON "{\"meshKey\":\"" MESH_HEX "\",\"version\":2,\"CanAckPings\":false}"

static struct conf_server srv;

static void up(void)
{
    cr_assert_eq(conf_server_start(&srv, &(struct conf_server_opts){.mesh_key_hex = MESH_HEX}), 0);
}

static void down(void)
{
    conf_server_down(&srv);
}

TestSuite(test_conformance_mesh, .init = up, .fini = down, .timeout = 120);

static void expect_silence(struct conf_raw *r, const char *who)
{
    struct conf_frame f = {0};
    int rc = conf_raw_expect_silence(r, QUIET_MS, &f);
    cr_assert_eq(rc, 0, "%s: rc %d, unexpected frame type %u", who, rc, f.type);
}

static uint16_t local_port(const struct conf_raw *r)
{
    struct sockaddr_in a;
    socklen_t len = sizeof(a);
    cr_assert_eq(getsockname(r->fd, (struct sockaddr *)&a, &len), 0);
    return ntohs(a.sin_port);
}

/* Reads one PeerPresent and checks key (if given), flags, 127.0.0.1 and port (if given). */
static void expect_present(struct conf_raw *w, const struct conf_raw *peer, uint8_t flags,
                           uint8_t key_out[DERP_KEY_LEN])
{
    struct conf_frame f;
    CONF_OK(conf_raw_read_nka(w, CONF_IO_TIMEOUT_MS, &f));
    cr_assert_eq(f.type, DERP_FRAME_PEER_PRESENT, "got frame type %u", f.type);
    cr_assert_eq(f.len, DERP_PEER_PRESENT_LEN);
    static const uint8_t v4mapped[16] = {[10] = 0xff, [11] = 0xff, 127, 0, 0, 1};
    cr_assert_eq(memcmp(f.p + DERP_KEY_LEN, v4mapped, 16), 0, "IP is ::ffff:127.0.0.1");
    if (key_out)
        memcpy(key_out, f.p, DERP_KEY_LEN);
    if (!peer)
        return;
    cr_assert_eq(memcmp(f.p, peer->kp.pub.bytes, DERP_KEY_LEN), 0, "PeerPresent key");
    uint16_t port = (uint16_t)(f.p[DERP_KEY_LEN + 16] << 8 | f.p[DERP_KEY_LEN + 17]);
    if (peer->fd >= 0) /* (still open: its port is known) */
        cr_assert_eq(port, local_port(peer), "PeerPresent port is the peer's");
    cr_assert_eq(f.p[DERP_KEY_LEN + 18], flags, "flags 0x%02x, want 0x%02x", f.p[DERP_KEY_LEN + 18],
                 flags);
}

static void expect_gone(struct conf_raw *r, const struct derp_pubkey *peer, uint8_t reason)
{
    struct conf_frame f;
    CONF_OK(conf_raw_read_nka(r, CONF_IO_TIMEOUT_MS, &f));
    cr_assert_eq(f.type, DERP_FRAME_PEER_GONE, "got frame type %u", f.type);
    cr_assert_eq(f.len, DERP_PEER_GONE_LEN);
    cr_assert_eq(memcmp(f.p, peer->bytes, DERP_KEY_LEN), 0, "PeerGone names the peer");
    cr_assert_eq(f.p[DERP_KEY_LEN], reason);
}

static void mesh_login(struct conf_raw *r, const char *json)
{
    CONF_OK(conf_raw_login(r, &srv, NULL, json ? json : MESH_JSON));
}

/* Row 22: mesh-only frames from a client without (or with a wrong) mesh key close it. */
Test(test_conformance_mesh, mesh_frames_need_the_key)
{
    static const char *jsons[] = {
        NULL,
        "{\"meshKey\":\"ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff\"}",
    };
    uint8_t fwd[2 * DERP_KEY_LEN + 4] = {0};
    uint8_t target[DERP_KEY_LEN] = {1};
    for (size_t j = 0; j < 2; j++) {
        struct conf_raw r;
        CONF_OK(conf_raw_login(&r, &srv, NULL, jsons[j]));
        CONF_OK(conf_raw_send_frame(&r, DERP_FRAME_WATCH_CONNS, NULL, 0));
        CONF_OK(conf_raw_wait_closed(&r, CONF_IO_TIMEOUT_MS));
        conf_raw_close(&r);
        CONF_OK(conf_raw_login(&r, &srv, NULL, jsons[j]));
        CONF_OK(conf_raw_send_frame(&r, DERP_FRAME_CLOSE_PEER, target, sizeof(target)));
        CONF_OK(conf_raw_wait_closed(&r, CONF_IO_TIMEOUT_MS));
        conf_raw_close(&r);
        CONF_OK(conf_raw_login(&r, &srv, NULL, jsons[j]));
        CONF_OK(conf_raw_send_frame(&r, DERP_FRAME_FORWARD_PACKET, fwd, sizeof(fwd)));
        CONF_OK(conf_raw_wait_closed(&r, CONF_IO_TIMEOUT_MS));
        conf_raw_close(&r);
    }
    /* With the key (any letter case in the JSON names, row 8) WatchConns works. */
    static const char *good[] = {
        MESH_JSON,
        "{\"MeshKey\":\"" MESH_HEX "\",\"Version\":2}",
        "{\"meshkey\":\"" MESH_HEX "\"}",
    };
    for (size_t j = 0; j < 3; j++) {
        struct conf_raw w;
        mesh_login(&w, good[j]);
        CONF_OK(conf_raw_send_frame(&w, DERP_FRAME_WATCH_CONNS, NULL, 0));
        expect_present(&w, &w, DERP_PEER_PRESENT_IS_MESH_PEER, NULL);
        CONF_OK(conf_raw_ping_pong(&w, 5, CONF_IO_TIMEOUT_MS));
        conf_raw_close(&w);
    }
    conf_server_stop_clean(&srv);
}

/* Row 23 (TestWatch) and the watcher half of row 21. */
Test(test_conformance_mesh, watch_snapshot_and_stream)
{
    struct conf_raw w1, w2, c1, c2, c3, d1, d2;
    mesh_login(&w1, NULL);
    CONF_OK(conf_raw_send_frame(&w1, DERP_FRAME_WATCH_CONNS, NULL, 0));
    expect_present(&w1, &w1, DERP_PEER_PRESENT_IS_MESH_PEER, NULL);

    CONF_OK(conf_raw_login(&c1, &srv, NULL, NULL));
    expect_present(&w1, &c1, DERP_PEER_PRESENT_IS_REGULAR, NULL);
    CONF_OK(conf_raw_login(&c2, &srv, NULL, "{\"version\":2,\"IsProber\":true}"));
    expect_present(&w1, &c2, DERP_PEER_PRESENT_IS_PROBER, NULL);
    /* Ideal-Node marks the connection not ideal. */
    CONF_OK(conf_raw_open(&c3, &srv, NULL));
    CONF_OK(conf_raw_upgrade(&c3, "Ideal-Node: derp1\r\n"));
    cr_assert_eq(c3.http_status, 101);
    CONF_OK(conf_raw_read_server_key(&c3));
    uint8_t ci[512];
    ssize_t n = conf_raw_client_info(&c3, NULL, ci, sizeof(ci));
    cr_assert_gt(n, 0);
    CONF_OK(conf_raw_write(&c3, ci, (size_t)n));
    CONF_OK(conf_raw_read_server_info(&c3, NULL));
    expect_present(&w1, &c3, DERP_PEER_PRESENT_NOT_IDEAL, NULL);
    int64_t v = -1;
    CONF_OK(conf_varz_wait(&srv, "derp_current_notideal_connections", 1, CONF_IO_TIMEOUT_MS, &v));

    conf_raw_close(&c1);
    expect_gone(&w1, &c1.kp.pub, DERP_PEER_GONE_DISCONNECTED);

    /* A later watcher's snapshot: w1, w2, c2, c3 in any order, then nothing. */
    mesh_login(&w2, NULL);
    expect_present(&w1, &w2, DERP_PEER_PRESENT_IS_MESH_PEER, NULL);
    CONF_OK(conf_raw_send_frame(&w2, DERP_FRAME_WATCH_CONNS, NULL, 0));
    const struct conf_raw *want[] = {&w1, &w2, &c2, &c3};
    bool seen[4] = {0};
    for (int i = 0; i < 4; i++) {
        uint8_t key[DERP_KEY_LEN];
        expect_present(&w2, NULL, 0, key);
        int hit = -1;
        for (int j = 0; j < 4; j++)
            if (memcmp(key, want[j]->kp.pub.bytes, DERP_KEY_LEN) == 0)
                hit = j;
        cr_assert(hit >= 0 && !seen[hit], "snapshot entry %d unexpected or repeated", i);
        seen[hit] = true;
    }
    expect_silence(&w2, "after the snapshot");
    CONF_OK(conf_varz_wait(&srv, "derp_watchers", 2, CONF_IO_TIMEOUT_MS, &v));

    /* Dups: a PeerPresent per connection, one PeerGone when the last goes. */
    struct derp_keypair k;
    CONF_OK(derp_keypair_generate(&k));
    CONF_OK(conf_raw_login(&d1, &srv, &k, NULL));
    expect_present(&w1, &d1, DERP_PEER_PRESENT_IS_REGULAR, NULL);
    CONF_OK(conf_raw_login(&d2, &srv, &k, NULL));
    expect_present(&w1, &d2, DERP_PEER_PRESENT_IS_REGULAR, NULL);
    conf_raw_close(&d1);
    expect_silence(&w1, "one dup of two left");
    conf_raw_close(&d2);
    expect_gone(&w1, &k.pub, DERP_PEER_GONE_DISCONNECTED);
    expect_present(&w2, &d1, DERP_PEER_PRESENT_IS_REGULAR, NULL);
    expect_present(&w2, &d2, DERP_PEER_PRESENT_IS_REGULAR, NULL);
    expect_gone(&w2, &k.pub, DERP_PEER_GONE_DISCONNECTED);
    conf_raw_close(&w2);
    expect_gone(&w1, &w2.kp.pub, DERP_PEER_GONE_DISCONNECTED);
    CONF_OK(conf_varz_wait(&srv, "derp_watchers", 1, CONF_IO_TIMEOUT_MS, &v));
    conf_raw_close(&c2);
    conf_raw_close(&c3);
    conf_raw_close(&w1);
    CONF_OK(conf_varz_wait(&srv, "derp_watchers", 0, CONF_IO_TIMEOUT_MS, &v));
    conf_server_stop_clean(&srv);
}

/* derper's addWatcher sends the snapshot on every WatchConns: a repeated one gets it again (a
 * mesh client that resyncs), and the watcher is still counted once. */
Test(test_conformance_mesh, watch_conns_again)
{
    struct conf_raw w, c;
    mesh_login(&w, NULL);
    CONF_OK(conf_raw_login(&c, &srv, NULL, NULL));
    for (int round = 0; round < 2; round++) {
        CONF_OK(conf_raw_send_frame(&w, DERP_FRAME_WATCH_CONNS, NULL, 0));
        bool seen_w = false, seen_c = false;
        for (int i = 0; i < 2; i++) {
            uint8_t key[DERP_KEY_LEN];
            expect_present(&w, NULL, 0, key);
            seen_w |= memcmp(key, w.kp.pub.bytes, DERP_KEY_LEN) == 0;
            seen_c |= memcmp(key, c.kp.pub.bytes, DERP_KEY_LEN) == 0;
        }
        cr_assert(seen_w && seen_c, "round %d: the snapshot holds the watcher and the client",
                  round);
        expect_silence(&w, "after a snapshot");
    }
    int64_t v = -1;
    CONF_OK(conf_varz_wait(&srv, "derp_watchers", 1, CONF_IO_TIMEOUT_MS, &v));
    conf_raw_close(&c);
    expect_gone(&w, &c.kp.pub, DERP_PEER_GONE_DISCONNECTED);
    conf_raw_close(&w);
    CONF_OK(conf_varz_wait(&srv, "derp_watchers", 0, CONF_IO_TIMEOUT_MS, &v));
    conf_server_stop_clean(&srv);
}

/* Row 24: ClosePeer(K) from a mesh peer closes every connection of K; the mesh peer stays, and
 * an unknown target is harmless. */
Test(test_conformance_mesh, close_peer)
{
    struct derp_keypair k;
    CONF_OK(derp_keypair_generate(&k));
    struct conf_raw m, a, b, other;
    mesh_login(&m, NULL);
    CONF_OK(conf_raw_login(&a, &srv, &k, NULL));
    CONF_OK(conf_raw_login(&b, &srv, &k, NULL));
    CONF_OK(conf_raw_login(&other, &srv, NULL, NULL));
    CONF_OK(conf_raw_send_frame(&m, DERP_FRAME_CLOSE_PEER, k.pub.bytes, DERP_KEY_LEN));
    CONF_OK(conf_raw_wait_closed(&a, CONF_IO_TIMEOUT_MS));
    CONF_OK(conf_raw_wait_closed(&b, CONF_IO_TIMEOUT_MS));
    uint8_t unknown[DERP_KEY_LEN] = {7, 7, 7};
    CONF_OK(conf_raw_send_frame(&m, DERP_FRAME_CLOSE_PEER, unknown, DERP_KEY_LEN));
    CONF_OK(conf_raw_ping_pong(&m, 9, CONF_IO_TIMEOUT_MS));
    CONF_OK(conf_raw_ping_pong(&other, 10, CONF_IO_TIMEOUT_MS));
    int64_t v = -1;
    CONF_OK(conf_varz_wait(&srv, "derp_current_connections", 2, CONF_IO_TIMEOUT_MS, &v));
    conf_raw_close(&a);
    conf_raw_close(&b);
    conf_raw_close(&other);
    conf_raw_close(&m);
    conf_server_stop_clean(&srv);
}

/* Row 25: ForwardPacket(src X, dst B) from a mesh peer reaches B with src X. */
Test(test_conformance_mesh, forward_packet)
{
    struct derp_keypair x;
    CONF_OK(derp_keypair_generate(&x));
    struct conf_raw m, b;
    mesh_login(&m, NULL);
    CONF_OK(conf_raw_login(&b, &srv, NULL, NULL));
    uint8_t buf[2 * DERP_KEY_LEN + 9];
    memcpy(buf, x.pub.bytes, DERP_KEY_LEN);
    memcpy(buf + DERP_KEY_LEN, b.kp.pub.bytes, DERP_KEY_LEN);
    memcpy(buf + 2 * DERP_KEY_LEN, "forwarded", 9);
    CONF_OK(conf_raw_send_frame(&m, DERP_FRAME_FORWARD_PACKET, buf, sizeof(buf)));
    struct derp_pubkey src;
    const uint8_t *data;
    size_t len;
    CONF_OK(conf_raw_read_packet(&b, CONF_IO_TIMEOUT_MS, &src, &data, &len));
    cr_assert(derp_pubkey_equal(&src, &x.pub), "src is the forwarded source, not the mesh peer");
    cr_assert_eq(len, 9);
    cr_assert_eq(memcmp(data, "forwarded", 9), 0);
    int64_t v = -1;
    CONF_OK(conf_varz_wait(&srv, "derp_packets_forwarded_in", 1, CONF_IO_TIMEOUT_MS, &v));
    conf_raw_close(&b);
    conf_raw_close(&m);
    conf_server_stop_clean(&srv);
}

/* Row 25, §7: a disco ForwardPacket to a dst the server does not have earns the forwarding
 * connection a PeerGone(dst, NotHere) (so the forwarder forgets that route). */
Test(test_conformance_mesh, forward_packet_not_here)
{
    struct derp_keypair x, nobody;
    CONF_OK(derp_keypair_generate(&x));
    CONF_OK(derp_keypair_generate(&nobody));
    struct conf_raw m;
    mesh_login(&m, NULL);
    uint8_t buf[2 * DERP_KEY_LEN + CONF_DISCO_LEN];
    memcpy(buf, x.pub.bytes, DERP_KEY_LEN);
    memcpy(buf + DERP_KEY_LEN, nobody.pub.bytes, DERP_KEY_LEN);
    conf_disco_payload(buf + 2 * DERP_KEY_LEN);
    CONF_OK(conf_raw_send_frame(&m, DERP_FRAME_FORWARD_PACKET, buf, sizeof(buf)));
    int64_t v = -1;
    CONF_OK(conf_varz_wait(&srv,
                           "derp_packets_dropped{reason=\"unknown_dest_on_fwd\",kind=\"disco\"}", 1,
                           CONF_IO_TIMEOUT_MS, &v));
    expect_gone(&m, &nobody.pub, DERP_PEER_GONE_NOT_HERE);
    conf_raw_close(&m);
    conf_server_stop_clean(&srv);
}
