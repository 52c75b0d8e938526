/* test_conformance_peers.c - spec §14 rows 11, 17, 18, 21 and 40 against a real
 * hderp-server with 2 shards, raw blocking clients on the test thread whose keys are chosen so
 * both shards own some (srv_owner: keyed SipHash under the tests' --hash-key): packets across
 * shards with the right source key, PeerGone(Disconnected) and NotHere with its rate limit,
 * duplicate connections for one key, and gauges returning to zero after everyone left. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "conf_support.h"

#define SHARDS 2
/* Silence long enough for a wrongly sent frame to arrive from a local server. */
#define QUIET_MS 300

static struct conf_server srv;

static void up(void)
{
    cr_assert_eq(conf_server_start(&srv, &(struct conf_server_opts){.shards = SHARDS}), 0);
}

static void down(void)
{
    conf_server_down(&srv);
}

TestSuite(test_conformance_peers, .init = up, .fini = down, .timeout = 120);

static void expect_packet(struct conf_raw *r, const struct derp_pubkey *src, const char *text)
{
    struct derp_pubkey got;
    const uint8_t *data;
    size_t len;
    CONF_OK(conf_raw_read_packet(r, CONF_IO_TIMEOUT_MS, &got, &data, &len));
    cr_assert(derp_pubkey_equal(&got, src), "wrong source key for %s", text);
    cr_assert_eq(len, strlen(text));
    cr_assert_eq(memcmp(data, text, len), 0, "payload %.*s, want %s", (int)len, data, text);
}

static void expect_silence(struct conf_raw *r, const char *who)
{
    struct conf_frame f = {0};
    int rc = conf_raw_expect_silence(r, QUIET_MS, &f);
    cr_assert_eq(rc, 0, "%s: rc %d, unexpected frame type %u", who, rc, f.type);
}

/* Row 11: every client sends to every other; 4 keys owned by each shard. */
#define MESH_N 8
Test(test_conformance_peers, send_recv_across_shards)
{
    static struct conf_raw c[MESH_N];
    for (unsigned i = 0; i < MESH_N; i++)
        conf_login_on_shard(&c[i], &srv, NULL, i % SHARDS, SHARDS);
    char text[32];
    for (unsigned i = 0; i < MESH_N; i++)
        for (unsigned j = 0; j < MESH_N; j++) {
            snprintf(text, sizeof(text), "from %u to %u", i, j);
            CONF_OK(conf_raw_send_packet(&c[i], &c[j].kp.pub, text, strlen(text)));
        }
    /* Each receiver sees each sender's packet exactly once (order across senders is free). */
    for (unsigned j = 0; j < MESH_N; j++) {
        bool seen[MESH_N] = {0};
        for (unsigned n = 0; n < MESH_N; n++) {
            struct derp_pubkey src;
            const uint8_t *data;
            size_t len;
            CONF_OK(conf_raw_read_packet(&c[j], CONF_IO_TIMEOUT_MS, &src, &data, &len));
            unsigned i = MESH_N;
            for (unsigned k = 0; k < MESH_N; k++)
                if (derp_pubkey_equal(&src, &c[k].kp.pub))
                    i = k;
            cr_assert_lt(i, MESH_N, "unknown source key at receiver %u", j);
            cr_assert(!seen[i], "duplicate from %u at %u", i, j);
            seen[i] = true;
            snprintf(text, sizeof(text), "from %u to %u", i, j);
            cr_assert_eq(len, strlen(text));
            cr_assert_eq(memcmp(data, text, len), 0, "src key and payload disagree at %u", j);
        }
        expect_silence(&c[j], "after all packets");
    }
    int64_t v = -1;
    CONF_OK(conf_varz_wait(&srv, "derp_packets_sent", MESH_N * MESH_N, CONF_IO_TIMEOUT_MS, &v));
    for (unsigned i = 0; i < MESH_N; i++)
        conf_raw_close(&c[i]);
    conf_server_stop_clean(&srv);
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

/* Row 17 (TestSendRecv): A->B, B->C; A leaves: B gets PeerGone(A), C nothing; B leaves: C gets
 * PeerGone(B); C leaves: nobody. A and C on one shard, B on the other. */
Test(test_conformance_peers, peer_gone_disconnected)
{
    struct conf_raw a, b, c, d;
    conf_login_on_shard(&a, &srv, NULL, 0, SHARDS);
    conf_login_on_shard(&b, &srv, NULL, 1, SHARDS);
    conf_login_on_shard(&c, &srv, NULL, 0, SHARDS);
    conf_login_on_shard(&d, &srv, NULL, 1, SHARDS); /* a bystander */
    CONF_OK(conf_raw_send_packet(&a, &b.kp.pub, "a2b", 3));
    expect_packet(&b, &a.kp.pub, "a2b");
    CONF_OK(conf_raw_send_packet(&b, &c.kp.pub, "b2c", 3));
    expect_packet(&c, &b.kp.pub, "b2c");
    conf_raw_close(&a);
    expect_gone(&b, &a.kp.pub, DERP_PEER_GONE_DISCONNECTED);
    expect_silence(&c, "C after A left");
    expect_silence(&d, "bystander after A left");
    conf_raw_close(&b);
    expect_gone(&c, &b.kp.pub, DERP_PEER_GONE_DISCONNECTED);
    conf_raw_close(&c);
    expect_silence(&d, "bystander after B, C left");
    int64_t v = -1;
    CONF_OK(conf_varz_wait(&srv, "derp_peer_gone_disconnected_frames", 2, CONF_IO_TIMEOUT_MS, &v));
    conf_raw_close(&d);
    conf_server_stop_clean(&srv);
}

/* A key that received packets from itself leaves: its own (closing) connection is not told,
 * the other receiver is, and the counter says one PeerGone. */
Test(test_conformance_peers, peer_gone_not_to_itself)
{
    struct conf_raw a, b;
    conf_login_on_shard(&a, &srv, NULL, 0, SHARDS);
    conf_login_on_shard(&b, &srv, NULL, 1, SHARDS);
    CONF_OK(conf_raw_send_packet(&a, &a.kp.pub, "a2a", 3));
    expect_packet(&a, &a.kp.pub, "a2a");
    CONF_OK(conf_raw_send_packet(&a, &b.kp.pub, "a2b", 3));
    expect_packet(&b, &a.kp.pub, "a2b");
    conf_raw_close(&a);
    expect_gone(&b, &a.kp.pub, DERP_PEER_GONE_DISCONNECTED);
    expect_silence(&b, "B after A left");
    int64_t v = -1;
    CONF_OK(conf_varz(&srv, "derp_peer_gone_disconnected_frames", false, &v));
    cr_assert_eq(v, 1, "PeerGone frames: %lld, want 1", (long long)v);
    conf_raw_close(&b);
    conf_server_stop_clean(&srv);
}

/* Row 17 with many subscribers: 4 sources (2 per shard) send to 6 receivers (3 per shard), so
 * each shard's list of a source's subscribers has 3 entries; receivers leave from the middle
 * and the front of those lists (the last entry moves into the hole, then leaves too), then the
 * sources leave: each remaining receiver gets one PeerGone per source, nobody else anything. */
#define CHURN_SRC 4
#define CHURN_RCV 6
Test(test_conformance_peers, peer_gone_many_subscribers)
{
    static struct conf_raw src[CHURN_SRC], rcv[CHURN_RCV];
    for (unsigned i = 0; i < CHURN_SRC; i++)
        conf_login_on_shard(&src[i], &srv, NULL, i % SHARDS, SHARDS);
    for (unsigned j = 0; j < CHURN_RCV; j++)
        conf_login_on_shard(&rcv[j], &srv, NULL, j % SHARDS, SHARDS);
    for (unsigned i = 0; i < CHURN_SRC; i++)
        for (unsigned j = 0; j < CHURN_RCV; j++)
            CONF_OK(conf_raw_send_packet(&src[i], &rcv[j].kp.pub, "p", 1));
    for (unsigned j = 0; j < CHURN_RCV; j++)
        for (unsigned i = 0; i < CHURN_SRC; i++) {
            struct derp_pubkey got;
            const uint8_t *data;
            size_t len;
            CONF_OK(conf_raw_read_packet(&rcv[j], CONF_IO_TIMEOUT_MS, &got, &data, &len));
        }
    /* shard 0's lists: rcv 0, 2, 4 (2 leaves, 4 moves, 4 leaves); shard 1's: 1, 3, 5 (1
     * leaves, 5 moves to the front, 5 leaves). rcv 0 and 3 stay. */
    const unsigned leave[] = {2, 4, 1, 5};
    for (unsigned k = 0; k < sizeof(leave) / sizeof(leave[0]); k++)
        conf_raw_close(&rcv[leave[k]]);
    int64_t v = -1;
    CONF_OK(
        conf_varz_wait(&srv, "derp_current_connections", CHURN_SRC + 2, CONF_IO_TIMEOUT_MS, &v));
    for (unsigned i = 0; i < CHURN_SRC; i++) {
        conf_raw_close(&src[i]);
        expect_gone(&rcv[0], &src[i].kp.pub, DERP_PEER_GONE_DISCONNECTED);
        expect_gone(&rcv[3], &src[i].kp.pub, DERP_PEER_GONE_DISCONNECTED);
    }
    expect_silence(&rcv[0], "rcv 0 after every source left");
    expect_silence(&rcv[3], "rcv 3 after every source left");
    CONF_OK(conf_varz_wait(&srv, "derp_peer_gone_disconnected_frames", 2 * CHURN_SRC,
                           CONF_IO_TIMEOUT_MS, &v));
    conf_raw_close(&rcv[0]);
    conf_raw_close(&rcv[3]);
    conf_server_stop_clean(&srv);
}

/* Row 18: disco to an unknown key -> PeerGone(NotHere); non-disco -> nothing; 6 rapid disco
 * sends -> 3 NotHere (burst 3, refill 1/s: the 6 go out well within a second). */
Test(test_conformance_peers, peer_gone_not_here_limited)
{
    struct conf_raw a, b;
    struct derp_keypair nobody;
    CONF_OK(derp_keypair_generate(&nobody));
    uint8_t disco[CONF_DISCO_LEN], plain[CONF_DISCO_LEN];
    conf_disco_payload(disco);
    memset(plain, 0x42, sizeof(plain));

    conf_login_on_shard(&a, &srv, NULL, 0, SHARDS);
    CONF_OK(conf_raw_send_packet(&a, &nobody.pub, plain, sizeof(plain)));
    expect_silence(&a, "non-disco to nobody");
    CONF_OK(conf_raw_send_packet(&a, &nobody.pub, disco, sizeof(disco)));
    expect_gone(&a, &nobody.pub, DERP_PEER_GONE_NOT_HERE);
    conf_raw_close(&a);

    conf_login_on_shard(&b, &srv, NULL, 1, SHARDS);
    for (int i = 0; i < 6; i++)
        CONF_OK(conf_raw_send_packet(&b, &nobody.pub, disco, sizeof(disco)));
    for (int i = 0; i < 3; i++)
        expect_gone(&b, &nobody.pub, DERP_PEER_GONE_NOT_HERE);
    CONF_OK(
        conf_raw_ping_pong(&b, 7, CONF_IO_TIMEOUT_MS)); /* all 6 were handled: Pong after them */
    expect_silence(&b, "no 4th NotHere");
    int64_t v = -1;
    CONF_OK(conf_varz_wait(&srv, "derp_peer_gone_not_here_frames", 4, CONF_IO_TIMEOUT_MS, &v));
    conf_raw_close(&b);
    conf_server_stop_clean(&srv);
}

/* Row 21 (TestServerDupClients): newest receives; the old one sends any frame -> it receives;
 * closing the newest -> the old one receives. The sender is on the other shard. */
Test(test_conformance_peers, dup_connections)
{
    struct derp_keypair k;
    CONF_OK(conf_keypair_on_shard(&k, 1, SHARDS));
    struct conf_raw s, old, nw;
    conf_login_on_shard(&s, &srv, NULL, 0, SHARDS);
    CONF_OK(conf_raw_login(&old, &srv, &k, NULL));
    CONF_OK(conf_raw_login(&nw, &srv, &k, NULL));
    int64_t v = -1;
    CONF_OK(conf_varz_wait(&srv, "derp_current_dup_client_keys", 1, CONF_IO_TIMEOUT_MS, &v));
    CONF_OK(conf_varz_wait(&srv, "derp_current_dup_client_conns", 2, CONF_IO_TIMEOUT_MS, &v));

    CONF_OK(conf_raw_send_packet(&s, &k.pub, "one", 3));
    expect_packet(&nw, &s.kp.pub, "one");
    expect_silence(&old, "old while the newest is active");

    CONF_OK(conf_raw_ping_pong(&old, 1, CONF_IO_TIMEOUT_MS)); /* any frame makes it active */
    CONF_OK(conf_raw_send_packet(&s, &k.pub, "two", 3));
    expect_packet(&old, &s.kp.pub, "two");
    expect_silence(&nw, "newest after old spoke");

    CONF_OK(conf_raw_ping_pong(&nw, 2, CONF_IO_TIMEOUT_MS)); /* newest active again, then leaves */
    conf_raw_close(&nw);
    CONF_OK(conf_varz_wait(&srv, "derp_current_dup_client_keys", 0, CONF_IO_TIMEOUT_MS, &v));
    CONF_OK(conf_raw_send_packet(&s, &k.pub, "three", 5));
    expect_packet(&old, &s.kp.pub, "three");
    expect_silence(&s, "no PeerGone: the key still has a connection");
    CONF_OK(conf_varz(&srv, "derp_total_dup_client_conns", false, &v));
    cr_assert_eq(v, 1, "total_dup_client_conns %lld", (long long)v);
    /* K received from S, not the other way round: S is not told when K goes (§6.7). */
    conf_raw_close(&old);
    CONF_OK(conf_varz_wait(&srv, "derp_current_connections", 1, CONF_IO_TIMEOUT_MS, &v));
    expect_silence(&s, "the sender after K left");
    conf_raw_close(&s);
    conf_server_stop_clean(&srv);
}

/* Row 40: after everyone disconnects, the gauges return to 0 and what was still queued for a
 * connection that went away is counted as gone_disconnected. */
Test(test_conformance_peers, gauges_return_to_zero)
{
    static const char *gauges[] = {
        "derp_current_connections",
        "derp_current_home_connections",
        "derp_clients_local",
        "derp_clients_total",
        "derp_current_dup_client_keys",
        "derp_current_dup_client_conns",
        "derp_current_notideal_connections",
        "derp_watchers",
    };
    struct derp_keypair k;
    CONF_OK(derp_keypair_generate(&k));
    struct conf_raw c[6];
    for (unsigned i = 0; i < 4; i++)
        conf_login_on_shard(&c[i], &srv, NULL, i % SHARDS, SHARDS);
    CONF_OK(conf_raw_login(&c[4], &srv, &k, NULL));
    CONF_OK(conf_raw_login(&c[5], &srv, &k, NULL));
    for (unsigned i = 0; i < 6; i++)
        CONF_OK(conf_raw_send_frame(&c[i], DERP_FRAME_NOTE_PREFERRED, "\x01", 1));
    int64_t v = -1;
    CONF_OK(conf_varz_wait(&srv, "derp_current_connections", 6, CONF_IO_TIMEOUT_MS, &v));
    CONF_OK(conf_varz_wait(&srv, "derp_current_home_connections", 6, CONF_IO_TIMEOUT_MS, &v));
    CONF_OK(conf_varz_wait(&srv, "derp_clients_local", 5, CONF_IO_TIMEOUT_MS, &v));
    for (unsigned i = 0; i < 6; i++)
        if (i % 2)
            conf_raw_abort(&c[i]);
        else
            conf_raw_close(&c[i]);
    for (size_t g = 0; g < sizeof(gauges) / sizeof(gauges[0]); g++) {
        int rc = conf_varz_wait(&srv, gauges[g], 0, CONF_IO_TIMEOUT_MS, &v);
        cr_assert_eq(rc, 0, "%s stays at %lld (rc %d)", gauges[g], (long long)v, rc);
    }
    conf_server_stop_clean(&srv);
}
