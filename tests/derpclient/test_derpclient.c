/* test_derpclient.c - the DERP client (apps/derp/client/derp_client.h) against the fake server of
 * fake_server.c on one real shard over loopback: normal and fast-start login (with and without
 * a known server key), the read-ahead case (101 + ServerKey in one write) and its opposite,
 * dribbled input, packet and ping round trips, every server->client frame type including
 * frames that span receives or are skipped, mesh frames, manual login with raw bytes, send
 * errors, and each way a login can fail. Results are recorded on the shard and asserted on the
 * test thread after the runtime stopped. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "derp_client.h"
#include "fake_server.h"
#include "harness.h"

static const uint8_t ping_data[DERP_PING_LEN] = {1, 2, 3, 4, 5, 6, 7, 8};
static const struct derp_pubkey other_key = {{0xab, [31] = 0xcd}};

/* What a test sets up and what the client saw. */
static struct {
    struct derp_keypair server_kp;
    struct fake_opts so;
    struct fake_stats st;
    struct derp_client_config cfg;
    const struct derp_client_callbacks *cb;
    bool no_server;     /* connect to a port nobody listens on */
    bool no_buf_ring;   /* plain recv into 2 KiB frames: more frames span receives */
    bool close_at_once; /* derp_client_close right after derp_client_connect */
    struct derp_client *k;
    int connect_rc;
    /* client side */
    bool closed, ready;
    int reason;
    enum derp_client_state state_at_close;
    unsigned http_status, http_responses;
    bool has_upgrade_key;
    struct derp_pubkey upgrade_key, server_key, pub;
    bool has_server_key;
    struct derp_client_stats cs;
    int64_t server_version;
    unsigned packets, big_packets, bad_packets, pongs, pings, keepalives, healths, restarts;
    unsigned gones, presents, server_keys, frames_seen, send_errors;
    int err_early, err_big, err_nobufs;
    unsigned sent_before_nobufs;
    char health_first[32];
    size_t health_big_len;
    bool health_empty;
    uint32_t restart_in, restart_try;
    uint8_t gone_reason;
    struct derp_peer_present present;
    struct derp_pubkey present_key;
    bool saw_server_key_frame, saw_server_info_frame, intercepted_pong;
} t;

/* ---------------------------------------------------------------- plumbing */

static const struct hd_module *const layers[] = {&net_module};

static void shard_stop(struct hd_shard *s)
{
    (void)s;
    fake_server_stop();
    if (t.k)
        derp_client_abort(t.k, -ECANCELED);
}

static void body(struct hd_shard *s, void *arg)
{
    (void)arg;
    if (t.no_server) {
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t len = sizeof(a);
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        HDT_CHECK(bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0);
        HDT_CHECK(getsockname(fd, (struct sockaddr *)&a, &len) == 0);
        close(fd); /* nobody listens there now */
        memcpy(&t.cfg.addr.in4, &a, sizeof(a));
        t.cfg.addr.len = sizeof(a);
    } else {
        HDT_CHECK(fake_server_start(s, &t.so, &t.server_kp, &t.st) == 0);
        t.cfg.addr = *fake_server_addr();
    }
    t.connect_rc = derp_client_connect(s, &t.cfg, t.cb, &t, &t.k);
    if (t.connect_rc < 0)
        hd_runtime_stop(hd_shard_runtime(s));
    else if (t.close_at_once)
        derp_client_close(t.k);
}

static void run(const struct derp_client_callbacks *cb)
{
    t.cb = cb;
    struct net_shard_options no = {.no_buf_ring = t.no_buf_ring};
    void *args[] = {&no};
    struct hdt_options o = {.frame_classes = derp_client_frame_classes,
                            .frame_classes_count = DERP_CLIENT_FRAME_CLASSES_COUNT,
                            .shards = 1,
                            .layers = layers,
                            .layers_args = args,
                            .layers_count = 1,
                            .shard_stop = shard_stop};
    cr_assert_eq(hdt_run(&o, body, NULL, NULL), 0);
    cr_assert_eq(t.connect_rc, 0, "connect: %s", strerror(-t.connect_rc));
    cr_assert(t.closed, "the client never closed");
}

static void setup(void)
{
    memset(&t, 0, sizeof(t));
    cr_assert_eq(derp_crypto_init(), 0);
    cr_assert_eq(derp_keypair_generate(&t.server_kp), 0);
}

static void on_close(struct derp_client *k, int reason)
{
    t.closed = true;
    t.reason = reason;
    t.state_at_close = derp_client_state(k);
    t.http_status = derp_client_http_status(k);
    t.has_upgrade_key = derp_client_upgrade_key(k, &t.upgrade_key);
    const struct derp_pubkey *sk = derp_client_server_key(k);
    t.has_server_key = sk != NULL;
    if (sk)
        t.server_key = *sk;
    t.pub = *derp_client_public_key(k);
    t.cs = *derp_client_stats(k);
    t.k = NULL;
    hd_runtime_stop(hd_shard_runtime(derp_client_shard(k)));
}

static void on_ready(struct derp_client *k, const struct derp_server_info *info)
{
    (void)k;
    t.ready = true;
    t.server_version = info->version;
}

static void on_http_response(struct derp_client *k, const struct net_http_resp *resp)
{
    (void)resp;
    t.http_responses++;
    t.err_early = derp_client_send(k, &other_key, "x", 1); /* before ClientInfo */
}

static uint8_t pattern(size_t i)
{
    return (uint8_t)(i * 7 + 3);
}

static void on_packet(struct derp_client *k, const struct derp_pubkey *src, const uint8_t *data,
                      size_t len)
{
    bool from_self = derp_pubkey_equal(src, derp_client_public_key(k));
    if (len == FAKE_BIG_PACKET_LEN) {
        bool ok = derp_pubkey_equal(src, &fake_peer_key) || from_self;
        for (size_t i = 0; i < len && ok; i++)
            ok = data[i] == pattern(i);
        ok ? t.big_packets++ : t.bad_packets++;
        return;
    }
    bool ok = len == 5 && memcmp(data, "hello", 5) == 0 &&
              (from_self || derp_pubkey_equal(src, &other_key));
    ok ? t.packets++ : t.bad_packets++;
}

static void on_pong_close(struct derp_client *k, const uint8_t data[DERP_PING_LEN])
{
    if (memcmp(data, ping_data, DERP_PING_LEN) == 0)
        t.pongs++;
    derp_client_close(k);
}

/* ---------------------------------------------------------------- login + round trips */

static void ready_roundtrip(struct derp_client *k, const struct derp_server_info *info)
{
    on_ready(k, info);
    static uint8_t big[FAKE_BIG_PACKET_LEN];
    for (size_t i = 0; i < sizeof(big); i++)
        big[i] = pattern(i);
    HDT_CHECK(derp_client_send(k, derp_client_public_key(k), "hello", 5) == 0);
    HDT_CHECK(derp_client_send(k, derp_client_public_key(k), big, sizeof(big)) == 0);
    t.err_big = derp_client_send(k, &other_key, big, DERP_PACKET_LEN_MAX + 1);
    HDT_CHECK(derp_client_ping(k, ping_data) == 0); /* answered after both echoes */
}

static const struct derp_client_callbacks roundtrip_cb = {
    .on_http_response = on_http_response,
    .on_ready = ready_roundtrip,
    .on_packet = on_packet,
    .on_pong = on_pong_close,
    .on_close = on_close,
};

static void check_roundtrip(void)
{
    cr_assert_eq(t.reason, 0, "closed with %s", strerror(-t.reason));
    cr_assert(t.ready);
    cr_assert_eq(t.server_version, 2);
    cr_assert_eq(t.packets, 1);
    cr_assert_eq(t.big_packets, 1);
    cr_assert_eq(t.bad_packets, 0);
    cr_assert_eq(t.pongs, 1);
    cr_assert_eq(t.err_big, -EMSGSIZE);
    cr_assert(t.st.got_client_info);
    cr_assert(derp_pubkey_equal(&t.st.client_key, &t.pub), "ClientInfo carries our key");
    cr_assert(t.has_server_key && derp_pubkey_equal(&t.server_key, &t.server_kp.pub));
    cr_assert_eq(t.st.packets, 2);
    cr_assert_eq(t.st.pings, 1);
    cr_assert_eq(t.cs.frames_early, 0);
    cr_assert_eq(t.cs.packets_out, 2);
    cr_assert_eq(t.cs.packets_in, 2);
    cr_assert_eq(t.cs.packet_bytes_in, 5 + FAKE_BIG_PACKET_LEN);
    cr_assert_geq(t.cs.frames_assembled, 1, "a 64 KiB frame spans receives");
}

Test(test_derpclient_fake, normal_login_roundtrip, .init = setup, .timeout = 30)
{
    static const struct net_http_hdr extra[] = {{"X-Test", NET_HTTP_LIT("yes")}};
    t.cfg.host = "derp.example:3340";
    t.cfg.headers = extra;
    t.cfg.headers_count = 1;
    t.cfg.app_name = "hderp-test";
    t.cfg.can_ack_pings = true;
    t.cfg.preferred = true;
    run(&roundtrip_cb);
    check_roundtrip();
    cr_assert_eq(t.http_status, 101);
    cr_assert_eq(t.http_responses, 1);
    cr_assert_eq(t.err_early, -ENOTCONN);
    cr_assert(t.has_upgrade_key && derp_pubkey_equal(&t.upgrade_key, &t.server_kp.pub),
              "Derp-Public-Key of the 101 is the server key");
    cr_assert_str_eq(t.st.path, "/derp");
    cr_assert_str_eq(t.st.host, "derp.example:3340");
    cr_assert_str_eq(t.st.upgrade, "DERP");
    cr_assert_str_eq(t.st.extra, "yes");
    cr_assert(!t.st.fast_start_header);
    cr_assert(!t.st.info_with_request);
    cr_assert_eq(t.st.info.version, 2);
    cr_assert(t.st.info.can_ack_pings);
    cr_assert(!t.st.info.is_prober && !t.st.info.has_mesh_key);
    cr_assert_str_eq(t.st.info.app_name, "hderp-test");
    cr_assert_eq(t.st.preferred_frames, 1);
    cr_assert(t.st.preferred);
}

Test(test_derpclient_fake, normal_login_roundtrip_plain_recv, .init = setup, .timeout = 30)
{
    t.no_buf_ring = true;
    t.cfg.can_ack_pings = true;
    run(&roundtrip_cb);
    check_roundtrip();
}

/* The ServerKey arrives 5 ms after the 101, in a receive of its own. */
Test(test_derpclient_fake, normal_login_split_101_and_key, .init = setup, .timeout = 30)
{
    t.so.split_101_and_key = true;
    run(&roundtrip_cb);
    check_roundtrip();
    cr_assert_eq(t.http_status, 101);
}

/* Every server byte up to ServerInfo in 3-byte writes: the 101 head parses incrementally,
 * ServerKey and ServerInfo assemble across receives. */
Test(test_derpclient_fake, dribbled_login, .init = setup, .timeout = 60)
{
    t.so.dribble = 3;
    run(&roundtrip_cb);
    check_roundtrip();
    cr_assert_geq(t.cs.frames_assembled, 3, "ServerKey, ServerInfo, the 64 KiB echo: %llu",
                  (unsigned long long)t.cs.frames_assembled);
}

Test(test_derpclient_fake, fast_start_known_key, .init = setup, .timeout = 30)
{
    t.cfg.fast_start = true;
    t.cfg.has_server_key = true;
    t.cfg.server_key = t.server_kp.pub;
    run(&roundtrip_cb);
    check_roundtrip();
    cr_assert(t.st.fast_start_header);
    cr_assert(t.st.info_with_request, "ClientInfo went in the same write as the request");
    cr_assert_eq(t.http_status, 0);
    cr_assert_eq(t.http_responses, 0);
}

Test(test_derpclient_fake, fast_start_learns_key, .init = setup, .timeout = 30)
{
    t.cfg.fast_start = true;
    run(&roundtrip_cb);
    check_roundtrip();
    cr_assert(t.st.fast_start_header);
    cr_assert(!t.st.info_with_request, "ClientInfo waited for the ServerKey");
    cr_assert_eq(t.http_status, 0);
}

/* ---------------------------------------------------------------- server -> client frames */

static void extras_ping(struct derp_client *k, const uint8_t data[DERP_PING_LEN])
{
    /* The automatic Pong is queued already; our Ping behind it comes back once the server
     * read that Pong. */
    if (memcmp(data, fake_ping_data, DERP_PING_LEN) == 0)
        t.pings++;
    HDT_CHECK(derp_client_ping(k, ping_data) == 0);
}

static void extras_keepalive(struct derp_client *k)
{
    (void)k;
    t.keepalives++;
}

static void extras_health(struct derp_client *k, const char *text, size_t len)
{
    (void)k;
    if (t.healths++ == 0 && len < sizeof(t.health_first))
        memcpy(t.health_first, text, len);
    if (len == FAKE_BIG_HEALTH_LEN && text[0] == 'h' && text[len - 1] == 'h')
        t.health_big_len = len;
    if (len == 0)
        t.health_empty = true;
}

static void extras_restarting(struct derp_client *k, uint32_t in_ms, uint32_t try_ms)
{
    (void)k;
    t.restarts++;
    t.restart_in = in_ms;
    t.restart_try = try_ms;
}

static void extras_gone(struct derp_client *k, const struct derp_pubkey *peer, uint8_t reason)
{
    (void)k;
    if (derp_pubkey_equal(peer, &fake_peer_key))
        t.gones++;
    t.gone_reason = reason;
}

static void extras_present(struct derp_client *k, const struct derp_peer_present *p)
{
    (void)k;
    t.presents++;
    t.present = *p;
    memcpy(t.present_key.bytes, p->key, DERP_KEY_LEN);
    t.present.key = NULL;
}

static const struct derp_client_callbacks extras_cb = {
    .on_ready = on_ready,
    .on_packet = on_packet,
    .on_ping = extras_ping,
    .on_pong = on_pong_close,
    .on_keepalive = extras_keepalive,
    .on_health = extras_health,
    .on_restarting = extras_restarting,
    .on_peer_gone = extras_gone,
    .on_peer_present = extras_present,
    .on_close = on_close,
};

Test(test_derpclient_fake, server_frames, .init = setup, .timeout = 30)
{
    t.so.push_extras = true;
    t.cfg.can_ack_pings = true;
    run(&extras_cb);
    cr_assert_eq(t.reason, 0, "closed with %s", strerror(-t.reason));
    cr_assert_eq(t.keepalives, 1);
    cr_assert_eq(t.healths, 3);
    cr_assert_str_eq(t.health_first, FAKE_HEALTH_TEXT);
    cr_assert_eq(t.health_big_len, FAKE_BIG_HEALTH_LEN);
    cr_assert(t.health_empty);
    cr_assert_eq(t.restarts, 1);
    cr_assert_eq(t.restart_in, FAKE_RESTART_IN_MS);
    cr_assert_eq(t.restart_try, FAKE_RESTART_TRY_MS);
    cr_assert_eq(t.gones, 1);
    cr_assert_eq(t.gone_reason, DERP_PEER_GONE_NOT_HERE);
    cr_assert_eq(t.presents, 1);
    cr_assert(derp_pubkey_equal(&t.present_key, &fake_peer_key));
    cr_assert(t.present.has_addr && t.present.has_flags);
    cr_assert_eq(t.present.addr.port, 41641);
    cr_assert(derp_addr_is_ipv4(&t.present.addr));
    cr_assert_eq(memcmp(t.present.addr.ip + 12, (uint8_t[]){198, 51, 100, 7}, 4), 0);
    cr_assert_eq(t.present.flags, DERP_PEER_PRESENT_IS_PROBER);
    cr_assert_eq(t.big_packets, 1);
    cr_assert_eq(t.bad_packets, 0);
    cr_assert_eq(t.pings, 1);
    cr_assert_eq(t.pongs, 1);
    cr_assert_eq(t.st.pongs, 1, "the client answered the server's Ping");
    cr_assert_eq(memcmp(t.st.last_pong, fake_ping_data, DERP_PING_LEN), 0);
    cr_assert_eq(t.cs.pongs_sent, 1);
    cr_assert_eq(t.cs.frames_dropped, 1, "the short PeerGone");
    cr_assert_eq(t.cs.frames_skipped, 1, "the unknown frame");
    cr_assert_eq(t.cs.frames_heap, 1, "the 200 KiB Health");
    cr_assert_geq(t.cs.frames_assembled, 2);
    cr_assert_eq(t.cs.frames_early, 0);
}

Test(test_derpclient_fake, server_frames_plain_recv, .init = setup, .timeout = 30)
{
    t.no_buf_ring = true;
    t.so.push_extras = true;
    t.cfg.can_ack_pings = true;
    run(&extras_cb);
    cr_assert_eq(t.reason, 0, "closed with %s", strerror(-t.reason));
    cr_assert_eq(t.healths, 3);
    cr_assert_eq(t.health_big_len, FAKE_BIG_HEALTH_LEN);
    cr_assert_eq(t.big_packets, 1);
    cr_assert_eq(t.bad_packets, 0);
    cr_assert_eq(t.pongs, 1);
    cr_assert_eq(t.cs.frames_skipped, 1);
    cr_assert_eq(t.cs.frames_dropped, 1);
}

/* ---------------------------------------------------------------- mesh frames */

static const struct derp_mesh_key mesh = {{0x11, 0x22, [31] = 0x33}};

static void mesh_present(struct derp_client *k, const struct derp_peer_present *p)
{
    t.presents++;
    if (!p->has_flags || p->flags != DERP_PEER_PRESENT_IS_MESH_PEER ||
        memcmp(p->key, derp_client_public_key(k)->bytes, DERP_KEY_LEN) != 0)
        t.bad_packets++;
    /* Forward "hello" from other_key to ourselves; the fake server delivers it locally. */
    HDT_CHECK(derp_client_forward(k, &other_key, derp_client_public_key(k), "hello", 5) == 0);
    HDT_CHECK(derp_client_close_peer(k, &other_key) == 0);
    HDT_CHECK(derp_client_ping(k, ping_data) == 0);
}

static const struct derp_client_callbacks mesh_cb = {
    .on_ready = on_ready,
    .on_packet = on_packet,
    .on_peer_present = mesh_present,
    .on_pong = on_pong_close,
    .on_close = on_close,
};

Test(test_derpclient_fake, mesh_watch_forward_close_peer, .init = setup, .timeout = 30)
{
    t.so.mesh_key = mesh;
    t.cfg.mesh_key = &mesh;
    t.cfg.watch = true;
    run(&mesh_cb);
    cr_assert_eq(t.reason, 0, "closed with %s", strerror(-t.reason));
    cr_assert(t.ready);
    cr_assert(t.st.mesh, "ClientInfo carried the mesh key");
    cr_assert_eq(t.st.watches, 1);
    cr_assert_eq(t.presents, 1);
    cr_assert_eq(t.st.forwards, 1);
    cr_assert_eq(t.packets, 1, "the forwarded packet came back from other_key");
    cr_assert_eq(t.st.close_peers, 1);
    cr_assert(derp_pubkey_equal(&t.st.close_peer_key, &other_key));
    cr_assert_eq(t.bad_packets, 0);
    cr_assert_eq(t.pongs, 1);
}

/* ---------------------------------------------------------------- manual login, raw bytes */

static void manual_server_key(struct derp_client *k, const struct derp_pubkey *server_key)
{
    t.server_keys++;
    struct derp_client_info info = {.version = 2, .is_prober = true};
    uint8_t buf[512];
    ssize_t n =
        derp_client_info_seal(buf, sizeof(buf), derp_client_keypair(k), server_key, &info, NULL);
    HDT_CHECK(n > 0);
    HDT_CHECK(derp_client_send_raw(k, buf, (size_t)n) == 0);
    /* An unknown frame the server must skip, then a Ping. */
    static const uint8_t junk[] = {0x30, 0, 0, 0, 3, 'a', 'b', 'c'};
    HDT_CHECK(derp_client_send_raw(k, junk, sizeof(junk)) == 0);
    HDT_CHECK(derp_client_ping(k, ping_data) == 0);
}

static bool manual_frame(struct derp_client *k, uint8_t type, const uint8_t *p, size_t len)
{
    t.frames_seen++;
    t.saw_server_key_frame |= type == DERP_FRAME_SERVER_KEY;
    t.saw_server_info_frame |= type == DERP_FRAME_SERVER_INFO;
    if (type != DERP_FRAME_PONG)
        return false;
    t.intercepted_pong = len == DERP_PING_LEN && memcmp(p, ping_data, DERP_PING_LEN) == 0;
    derp_client_close(k);
    return true; /* on_pong must not run */
}

static const struct derp_client_callbacks manual_cb = {
    .on_server_key = manual_server_key,
    .on_frame = manual_frame,
    .on_ready = on_ready,
    .on_pong = on_pong_close,
    .on_close = on_close,
};

Test(test_derpclient_fake, manual_login_raw_and_on_frame, .init = setup, .timeout = 30)
{
    t.cfg.manual_login = true;
    run(&manual_cb);
    cr_assert_eq(t.reason, 0, "closed with %s", strerror(-t.reason));
    cr_assert_eq(t.server_keys, 1);
    cr_assert(t.ready, "ServerInfo sealed to our key opened");
    cr_assert(t.st.info.is_prober, "the server got our hand-made ClientInfo");
    cr_assert(t.saw_server_key_frame && t.saw_server_info_frame);
    cr_assert_eq(t.frames_seen, 3);
    cr_assert(t.intercepted_pong);
    cr_assert_eq(t.pongs, 0);
    cr_assert_eq(t.st.skipped, 1);
}

/* ---------------------------------------------------------------- send queue cap */

static void ready_flood(struct derp_client *k, const struct derp_server_info *info)
{
    on_ready(k, info);
    static uint8_t big[FAKE_BIG_PACKET_LEN];
    for (size_t i = 0; i < sizeof(big); i++)
        big[i] = pattern(i);
    int rc;
    /* Nothing leaves before the end of this tick: the queue fills deterministically. */
    while ((rc = derp_client_send(k, derp_client_public_key(k), big, sizeof(big))) == 0)
        t.sent_before_nobufs++;
    t.err_nobufs = rc;
    HDT_CHECK(derp_client_ping(k, ping_data) == 0);
}

static const struct derp_client_callbacks flood_cb = {
    .on_ready = ready_flood,
    .on_packet = on_packet,
    .on_pong = on_pong_close,
    .on_close = on_close,
};

Test(test_derpclient_fake, send_queue_cap_enobufs, .init = setup, .timeout = 30)
{
    t.cfg.send_max_bytes = 150000; /* two 65573-byte frames fit, a third does not */
    run(&flood_cb);
    cr_assert_eq(t.reason, 0, "closed with %s", strerror(-t.reason));
    cr_assert_eq(t.err_nobufs, -ENOBUFS);
    cr_assert_eq(t.sent_before_nobufs, 2);
    cr_assert_eq(t.big_packets, 2, "both queued packets were echoed");
    cr_assert_eq(t.pongs, 1);
}

/* Issue 11: hderp-bench through Hyper-DERP stopped with "Message too long". A relay that cuts a
 * send short and writes the next frame before the rest (several sends in flight on one socket)
 * breaks the stream's frame boundaries: the client delivers the first frame garbled (it cannot
 * know), then reads a header from inside the second frame's payload and refuses its length. The
 * client names that header: type, length and the stream offset it began at. */
static void desync_packet(struct derp_client *k, const struct derp_pubkey *src, const uint8_t *data,
                          size_t len)
{
    (void)k, (void)src, (void)data;
    t.packets++;
    t.big_packets += len == FAKE_DESYNC_LEN;
}

static const struct derp_client_callbacks desync_cb = {
    .on_ready = on_ready, .on_packet = desync_packet, .on_close = on_close};

Test(test_derpclient_fake, desynced_stream_names_the_refused_header, .init = setup, .timeout = 30)
{
    t.so.interleave_partial = true;
    run(&desync_cb);
    cr_assert(t.ready);
    cr_assert_eq(t.reason, -EMSGSIZE, "closed with %s", strerror(-t.reason));
    cr_assert_eq(t.packets, 1, "the cut frame A was delivered (garbled, with B's head)");
    cr_assert_eq(t.big_packets, 1);
    cr_assert(t.cs.refused);
    cr_assert_eq(t.cs.refused_type, FAKE_DESYNC_BYTE);
    cr_assert_eq(t.cs.refused_len, 0xabababab);
    /* A whole (as the client framed it: 5 + 32 + 1400 bytes) after the login frames. */
    uint64_t at = t.st.login_stream_bytes + DERP_FRAME_HEADER_LEN + DERP_KEY_LEN + FAKE_DESYNC_LEN;
    cr_assert_eq(t.cs.refused_at, at, "refused at %llu, want %llu",
                 (unsigned long long)t.cs.refused_at, (unsigned long long)at);
    cr_assert_eq(t.cs.last_type, DERP_FRAME_RECV_PACKET);
    cr_assert_eq(t.cs.last_len, DERP_KEY_LEN + FAKE_DESYNC_LEN);
    cr_assert_leq(t.cs.stream_bytes, at, "what was consumed before the refused chunk");
}

/* ---------------------------------------------------------------- failures */

static const struct derp_client_callbacks fail_cb = {
    .on_http_response = on_http_response,
    .on_ready = on_ready,
    .on_close = on_close,
};

static void check_failed(int reason)
{
    cr_assert_eq(t.reason, reason, "closed with %d (%s), want %d (%s)", t.reason,
                 strerror(-t.reason), reason, strerror(-reason));
    cr_assert(!t.ready);
}

Test(test_derpclient_fake, server_closes_after_101, .init = setup, .timeout = 30)
{
    t.so.close_after_101 = true;
    run(&fail_cb);
    check_failed(-ESHUTDOWN);
    cr_assert_eq(t.http_status, 101);
    cr_assert(!t.has_server_key);
}

Test(test_derpclient_fake, server_closes_at_accept, .init = setup, .timeout = 30)
{
    t.so.close_at_accept = true;
    run(&fail_cb);
    /* FIN or RST, depending on whether the request reached the socket before its close. */
    cr_assert(t.reason == -ESHUTDOWN || t.reason == -ECONNRESET, "closed with %s",
              strerror(-t.reason));
    cr_assert(!t.ready);
    cr_assert_eq(t.http_status, 0);
}

Test(test_derpclient_fake, upgrade_refused_426, .init = setup, .timeout = 30)
{
    t.so.status = 426;
    run(&fail_cb);
    check_failed(-ENOPROTOOPT);
    cr_assert_eq(t.http_status, 426);
    cr_assert_eq(t.http_responses, 1);
}

Test(test_derpclient_fake, bad_magic, .init = setup, .timeout = 30)
{
    t.so.bad_magic = true;
    run(&fail_cb);
    check_failed(-EPROTO);
}

Test(test_derpclient_fake, server_key_mismatch, .init = setup, .timeout = 30)
{
    t.cfg.has_server_key = true;
    t.cfg.server_key = other_key;
    run(&fail_cb);
    check_failed(-EKEYREJECTED);
    cr_assert(!t.st.got_client_info, "nothing was sealed to the wrong key");
}

Test(test_derpclient_fake, server_info_does_not_open, .init = setup, .timeout = 30)
{
    t.so.server_info_wrong_key = true;
    run(&fail_cb);
    check_failed(-EBADMSG);
    cr_assert(t.st.got_client_info);
}

Test(test_derpclient_fake, fast_start_given_101, .init = setup, .timeout = 30)
{
    t.so.send_101_always = true;
    t.cfg.fast_start = true;
    run(&fail_cb);
    check_failed(-EMSGSIZE); /* "HTTP" read as a frame header of ~1.4 GB (§1.3) */
}

/* The login times out at a server that never answers, after one request and no retry. On a busy
 * machine a short timeout can run out before the request even reaches the server (the shard
 * stalled in connect), so the timeout doubles until a run sees its request arrive. */
Test(test_derpclient_fake, login_timeout, .init = setup, .timeout = 60)
{
    for (uint32_t ms = 200; ms <= 12800; ms *= 2) {
        setup();
        t.so.never_answer = true;
        t.cfg.login_timeout_ms = ms;
        run(&fail_cb);
        check_failed(-ETIMEDOUT);
        cr_assert_leq(t.st.requests, 1, "the client retried its login (%d ms)", (int)ms);
        if (t.st.requests == 1)
            return;
    }
    cr_assert_fail("no login reached the server before its timeout, up to 12.8 s");
}

Test(test_derpclient_fake, read_timeout_after_login, .init = setup, .timeout = 30)
{
    t.cfg.read_timeout_ms = 100; /* the fake server sends nothing after ServerInfo */
    run(&fail_cb);
    cr_assert_eq(t.reason, -ETIMEDOUT, "closed with %s", strerror(-t.reason));
    cr_assert(t.ready);
    cr_assert_eq(t.state_at_close, DERP_CLIENT_CLOSING);
}

Test(test_derpclient_fake, close_while_connecting, .init = setup, .timeout = 30)
{
    t.close_at_once = true;
    run(&fail_cb);
    check_failed(0);
    cr_assert_eq(t.http_status, 0);
}

Test(test_derpclient_fake, connect_refused, .init = setup, .timeout = 30)
{
    t.no_server = true;
    run(&fail_cb);
    check_failed(-ECONNREFUSED);
}

/* ---------------------------------------------------------------- configuration */

Test(test_derpclient_fake, url_parse)
{
    struct derp_client_url u;
    char buf[64];
    cr_assert_eq(derp_client_url_parse("http://127.0.0.1:3340/derp", &u), 0);
    cr_assert(!u.tls);
    cr_assert_str_eq(u.host, "127.0.0.1:3340");
    cr_assert_str_eq(u.path, "/derp");
    cr_assert_str_eq(net_addr_format(&u.addr, buf, sizeof(buf)), "127.0.0.1:3340");
    cr_assert_eq(derp_client_url_parse("https://[::1]", &u), 0);
    cr_assert(u.tls);
    cr_assert_str_eq(u.host, "[::1]");
    cr_assert_str_eq(u.path, "/derp");
    cr_assert_eq(net_addr_port(&u.addr), 443);
    cr_assert_eq(derp_client_url_parse("http://10.0.0.1/x?y=1", &u), 0);
    cr_assert_eq(net_addr_port(&u.addr), 80);
    cr_assert_str_eq(u.path, "/x?y=1");
    cr_assert_eq(derp_client_url_parse("https://localhost:8443/derp", &u), 0); /* /etc/hosts */
    cr_assert(u.tls);
    cr_assert_str_eq(u.host, "localhost:8443");
    cr_assert_eq(net_addr_port(&u.addr), 8443);
    cr_assert_eq(derp_client_url_parse("ftp://1.2.3.4/", &u), -EINVAL);
    cr_assert_eq(derp_client_url_parse("http:///derp", &u), -EINVAL);
    cr_assert_eq(derp_client_url_parse("http://1.2.3.4:99999/", &u), -EINVAL);
    cr_assert_eq(derp_client_url_parse("ws://127.0.0.1:3340", &u), 0);
    cr_assert(u.websocket && !u.tls);
    cr_assert_str_eq(u.host, "127.0.0.1:3340");
    cr_assert_str_eq(u.path, "/derp");
    cr_assert_eq(derp_client_url_parse("wss://[::1]/derp", &u), 0);
    cr_assert(u.websocket && u.tls);
    cr_assert_str_eq(derp_client_url_scheme(&u), "wss");
    cr_assert_eq(net_addr_port(&u.addr), 443);
    cr_assert_eq(derp_client_url_parse("wsx://1.2.3.4/", &u), -EINVAL);
    cr_assert_eq(derp_client_url_parse("http://127.0.0.1/", &u), 0);
    cr_assert(!u.websocket);

    struct derp_client_config cfg = {0};
    derp_client_config_set_url(&cfg, &u);
    struct derp_client *k;
    static const struct derp_client_callbacks cb = {.on_close = on_close};
    cfg.tls = true; /* https without a client TLS context is refused before anything starts */
    cr_assert_eq(derp_client_connect(NULL, &cfg, &cb, NULL, &k), -EINVAL);
    cfg.tls = false;
    cr_assert_eq(derp_client_connect(NULL, &cfg, &(struct derp_client_callbacks){0}, NULL, &k),
                 -EINVAL, "on_close is required");
    cfg.websocket = cfg.fast_start = true; /* §1.5: no fast start over WebSocket */
    cr_assert_eq(derp_client_connect(NULL, &cfg, &cb, NULL, &k), -EINVAL);
}

/* The runtime's default frame classes (64 KiB at most) cannot hold a whole DERP frame: connect
 * refuses at once (nothing created) instead of failing on the first large packet. */
static void small_classes_body(struct hd_shard *s, void *arg)
{
    (void)arg;
    static const struct derp_client_callbacks cb = {.on_close = on_close};
    struct derp_client_url u;
    HDT_CHECK(derp_client_url_parse("http://127.0.0.1:1/derp", &u) == 0);
    struct derp_client_config cfg = {.keypair = &t.server_kp};
    derp_client_config_set_url(&cfg, &u);
    struct derp_client *k = NULL;
    t.connect_rc = derp_client_connect(s, &cfg, &cb, NULL, &k);
    hd_runtime_stop(hd_shard_runtime(s));
}

Test(test_derpclient_fake, refuses_a_runtime_without_a_frame_class_for_a_frame, .init = setup,
     .timeout = 30)
{
    struct hdt_options o = {.shards = 1, .layers = layers, .layers_count = 1};
    cr_assert_eq(hdt_run(&o, small_classes_body, NULL, NULL), 0);
    cr_assert_eq(t.connect_rc, -EINVAL);
    cr_assert(!t.closed, "no callback runs when connect fails");
}
