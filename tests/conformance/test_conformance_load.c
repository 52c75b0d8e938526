/* test_conformance_load.c - many DERP clients (hd_derp_client on real test shards) against a
 * real hderp-server: 100 clients x 1,000 packets over plain TCP (the driver in conf_load.c: every
 * packet delivered exactly once to the right key with the right source, none to anyone else, no
 * drops), and an overload that must not wedge the relay (flood a paused receiver, then calm
 * traffic arrives complete). Results are asserted on the test thread after the runtime stopped. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "conf_support.h"
#include "derp_client.h"
#include "harness.h"

/* The whole exchange on a healthy relay takes about a second; ASan several. */
#define LOAD_DEADLINE_MS 90000

struct payload {
    uint32_t sender, seq, dst;
};

static struct conf_server srv;

static const struct hd_module *const layers[] = {&net_module};

static void down(void)
{
    conf_server_down(&srv);
}

/* The driver (conf_load.c) over plain TCP. */
Test(test_conformance_load, clients_100_x_packets_1000, .fini = down, .timeout = 240)
{
    cr_assert_eq(conf_server_start(&srv, &(struct conf_server_opts){.shards = 2}), 0);
    conf_load_run(&(struct conf_load_opts){.srv = &srv, .deadline_ms = LOAD_DEADLINE_MS});
    conf_server_stop_clean(&srv);
}

/* ---------------------------------------------------------------- overload, then calm */

/* Flooders send at unlimited rate (until their own send queue is full) to one paused receiver
 * and to each other; then the receiver resumes, the backlog drains, and calm traffic on the same
 * connections and on a new one must arrive complete. */
#define OV_FLOODERS    4
#define OV_SENDERS     (OV_FLOODERS + 1) /* + the late client */
#define OV_FLOOD_MS    800               /* under the relay's write timeout (5 s here) */
#define OV_QUIET_MS    300               /* nothing received for this long: drained */
#define OV_CALM        100               /* calm packets per sender per target */
#define OV_CALM_TOTAL  (OV_SENDERS * OV_CALM * 2)
#define OV_PKT_LEN     1024
#define OV_DEADLINE_MS 60000

enum ov_phase { OV_LOGIN, OV_FLOOD, OV_DRAIN, OV_LATE, OV_CALM_PHASE, OV_DONE };

/* Client slots: 0..3 flooders, 4 the late client, 5 the slow receiver. */
#define OV_RECEIVER 5
#define OV_ALL      6

static struct {
    struct derp_keypair kp[OV_ALL];
    struct derp_client *k[OV_ALL];
    struct hd_shard *s;
    struct hd_timer tick;
    enum ov_phase phase;
    uint64_t start_ms, phase_ms, last_rx_ms;
    unsigned ready, closed, calm_sent, calm_got, bad, dups, early_close, send_errors;
    uint64_t flood_sent, flood_got;
    uint8_t seen[OV_SENDERS][2][OV_CALM];
    bool timed_out;
} ov;

static unsigned ov_peer(unsigned i)
{
    return (i + 1) % OV_SENDERS;
}

static void ov_on_ready(struct derp_client *k, const struct derp_server_info *info)
{
    (void)k;
    (void)info;
    ov.ready++;
}

static void ov_on_packet(struct derp_client *k, const struct derp_pubkey *src, const uint8_t *data,
                         size_t len)
{
    unsigned me = (unsigned)(uintptr_t)derp_client_user(k);
    ov.last_rx_ms = hd_now_ms(ov.s);
    if (len == OV_PKT_LEN) {
        ov.flood_got++;
        return;
    }
    struct payload p;
    if (len != sizeof(p)) {
        ov.bad++;
        return;
    }
    memcpy(&p, data, sizeof(p));
    unsigned which = me == OV_RECEIVER ? 0 : 1;
    if (p.sender >= OV_SENDERS || p.seq >= OV_CALM || p.dst != me ||
        (which == 1 && ov_peer(p.sender) != me) || !derp_pubkey_equal(src, &ov.kp[p.sender].pub)) {
        ov.bad++;
        return;
    }
    if (ov.seen[p.sender][which][p.seq]++) {
        ov.dups++;
        return;
    }
    ov.calm_got++;
}

static void ov_on_close(struct derp_client *k, int reason)
{
    unsigned me = (unsigned)(uintptr_t)derp_client_user(k);
    ov.k[me] = NULL;
    if (ov.phase != OV_DONE || reason != 0)
        ov.early_close++;
    if (++ov.closed == OV_ALL)
        hd_runtime_stop(hd_shard_runtime(ov.s));
}

static const struct derp_client_callbacks ov_cb = {
    .on_ready = ov_on_ready,
    .on_packet = ov_on_packet,
    .on_close = ov_on_close,
};

static void ov_connect(unsigned i)
{
    struct derp_client_config cfg = {.read_timeout_ms = DERP_CLIENT_TIMEOUT_OFF,
                                     .send_max_bytes = 256 << 10};
    HDT_CHECK(net_addr_parse("127.0.0.1:0", &cfg.addr) == 0);
    cfg.addr.in4.sin_port = htons(srv.port);
    cfg.keypair = &ov.kp[i];
    HDT_CHECK(derp_client_connect(ov.s, &cfg, &ov_cb, (void *)(uintptr_t)i, &ov.k[i]) == 0);
}

static void ov_flood(void)
{
    static uint8_t junk[OV_PKT_LEN];
    for (unsigned i = 0; i < OV_FLOODERS; i++) {
        unsigned targets[2] = {OV_RECEIVER, (i + 1) % OV_FLOODERS};
        for (unsigned n = 0;; n++) {
            int rc = derp_client_send(ov.k[i], &ov.kp[targets[n % 2]].pub, junk, sizeof(junk));
            if (rc == -ENOBUFS)
                break;
            if (rc != 0) {
                ov.send_errors++;
                break;
            }
            ov.flood_sent++;
        }
    }
}

static void ov_calm(void)
{
    unsigned seq = ov.calm_sent++;
    for (unsigned i = 0; i < OV_SENDERS; i++) {
        unsigned targets[2] = {OV_RECEIVER, ov_peer(i)};
        for (unsigned t = 0; t < 2; t++) {
            struct payload p = {i, seq, targets[t]};
            if (derp_client_send(ov.k[i], &ov.kp[p.dst].pub, &p, sizeof(p)) != 0)
                ov.send_errors++;
        }
    }
}

static void ov_next(enum ov_phase p, uint64_t now)
{
    ov.phase = p;
    ov.phase_ms = now;
}

static void ov_tick(struct hd_timer *t)
{
    (void)t;
    uint64_t now = hd_now_ms(ov.s);
    if (now - ov.start_ms > OV_DEADLINE_MS)
        ov.timed_out = true;
    if (ov.timed_out || ov.phase == OV_DONE) {
        ov.phase = OV_DONE;
        for (unsigned i = 0; i < OV_ALL; i++)
            if (ov.k[i])
                derp_client_close(ov.k[i]);
        return;
    }
    switch (ov.phase) {
    case OV_LOGIN:
        if (ov.ready == OV_ALL - 1) {
            derp_client_pause_recv(ov.k[OV_RECEIVER], true);
            ov_next(OV_FLOOD, now);
        }
        break;
    case OV_FLOOD:
        ov_flood();
        if (now - ov.phase_ms >= OV_FLOOD_MS) {
            derp_client_pause_recv(ov.k[OV_RECEIVER], false);
            ov.last_rx_ms = now;
            ov_next(OV_DRAIN, now);
        }
        break;
    case OV_DRAIN:
        if (now - ov.last_rx_ms >= OV_QUIET_MS) {
            ov_connect(OV_FLOODERS); /* the late client */
            ov_next(OV_LATE, now);
        }
        break;
    case OV_LATE:
        if (ov.ready == OV_ALL)
            ov_next(OV_CALM_PHASE, now);
        break;
    case OV_CALM_PHASE:
        if (ov.calm_sent < OV_CALM)
            ov_calm();
        else if (ov.calm_got == OV_CALM_TOTAL)
            ov_next(OV_DONE, now);
        break;
    case OV_DONE:
        break;
    }
    hd_timer_start(ov.s, &ov.tick, 1);
}

static void ov_body(struct hd_shard *s, void *arg)
{
    (void)arg;
    ov.s = s;
    ov.start_ms = hd_now_ms(s);
    for (unsigned i = 0; i < OV_ALL; i++)
        if (i != OV_FLOODERS)
            ov_connect(i);
    hd_timer_init(&ov.tick, ov_tick);
    hd_timer_start(s, &ov.tick, 1);
}

static void ov_shard_stop(struct hd_shard *s)
{
    hd_timer_stop(s, &ov.tick);
    for (unsigned i = 0; i < OV_ALL; i++)
        if (ov.k[i])
            derp_client_abort(ov.k[i], -ECANCELED);
}

Test(test_conformance_load, overload_never_wedges, .fini = down, .timeout = 240)
{
    memset(&ov, 0, sizeof(ov));
    cr_assert_eq(conf_server_start(&srv, &(struct conf_server_opts){.write_timeout = "5s"}), 0);
    for (unsigned i = 0; i < OV_ALL; i++)
        cr_assert_eq(derp_keypair_generate(&ov.kp[i]), 0);
    struct hdt_options o = {
        .shards = 1, .layers = layers, .layers_count = 1, .shard_stop = ov_shard_stop};
    cr_assert_eq(hdt_run(&o, ov_body, NULL, NULL), 0);
    cr_assert(!ov.timed_out, "stuck in phase %d: calm %u of %u", ov.phase, ov.calm_got,
              OV_CALM_TOTAL);
    cr_assert_eq(ov.early_close, 0, "a client closed before the end");
    cr_assert_eq(ov.send_errors, 0);
    cr_assert_eq(ov.bad, 0);
    cr_assert_eq(ov.dups, 0);
    cr_assert_eq(ov.calm_got, OV_CALM_TOTAL, "calm traffic after the flood: zero loss");
    cr_assert_gt(ov.flood_sent, ov.flood_got, "the flood overflowed somewhere");
    int64_t drops = -1, sent = -1;
    cr_assert_eq(conf_varz(&srv, "derp_packets_dropped", true, &drops), 0);
    cr_assert_gt(drops, 0, "relay queues overflowed and counted drops");
    cr_assert_eq(conf_varz(&srv, "derp_packets_sent", false, &sent), 0);
    cr_assert_geq(sent, (int64_t)(ov.flood_got + OV_CALM_TOTAL));
    cr_assert_eq(conf_server_stop(&srv), 0);
}
