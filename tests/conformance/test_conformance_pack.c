/* test_conformance_pack.c - packing (docs/ARCHITECTURE.md "Placement policy", --pack) against a
 * real hderp-server with 2 shards. Water marks no load reaches make the policy's choice fixed
 * (--pack-low=1000 --pack-high=1000: pack at any load; --pack-high=0: spread at any load), so
 * every check is a counter, never a time: a pair on shard 1 ends on shard 0 (both at home there
 * moves both; a pair that placement put on shard 1 sends one side home); a pair on shard 0
 * spreads to shard 1; a duplicate of a packed key calls it home and the newest receives; a close
 * right while a move starts leaves the server consistent. Packets go in bursts of BURST
 * without reading, so the moves happen with packets in flight, and each burst must arrive
 * complete and in order. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "conf_support.h"

#define SHARDS 2
/* Packets in flight per burst: under the owner's hold while a connection moves (32), so no
 * packet may drop there. */
#define BURST 16
/* Bursts each way before checking where the pair is: SRV_PLACE_PACKETS (64) packets decide a
 * move, so a few runs of them, for the first move and the follower's. */
#define BURSTS 24

static struct conf_server srv;

static void down(void)
{
    conf_server_down(&srv);
}

TestSuite(test_conformance_pack, .fini = down, .timeout = 120);

static void start(const char *low, const char *high)
{
    const char *extra[] = {"--pack", "--pack-low", low, "--pack-high", high, NULL};
    cr_assert_eq(
        conf_server_start(&srv, &(struct conf_server_opts){.shards = SHARDS, .extra = extra}), 0);
}

static void login_on_shard(struct conf_raw *r, struct derp_keypair *kp, unsigned shard)
{
    CONF_OK(conf_keypair_on_shard(kp, shard, SHARDS));
    CONF_OK(conf_raw_login(r, &srv, kp, NULL));
}

/* n packets from -> to without reading, then each must arrive, from `from`, in order. */
static void burst(struct conf_raw *from, struct conf_raw *to, const char *tag, int round, int n)
{
    char msg[64];
    for (int i = 0; i < n; i++) {
        int len = snprintf(msg, sizeof(msg), "%s %d.%d", tag, round, i);
        CONF_OK(conf_raw_send_packet(from, &to->kp.pub, msg, (size_t)len));
    }
    for (int i = 0; i < n; i++) {
        int len = snprintf(msg, sizeof(msg), "%s %d.%d", tag, round, i);
        struct derp_pubkey src;
        const uint8_t *data;
        size_t got;
        CONF_OK(conf_raw_read_packet(to, CONF_IO_TIMEOUT_MS, &src, &data, &got));
        cr_assert(derp_pubkey_equal(&src, &from->kp.pub), "%s: wrong source", msg);
        cr_assert(got == (size_t)len && memcmp(data, msg, got) == 0, "got %.*s, want %s", (int)got,
                  data, msg);
    }
}

/* Both ways, bursts rounds times. */
static void talk(struct conf_raw *a, struct conf_raw *b, const char *tag, int rounds)
{
    char ta[32], tb[32];
    snprintf(ta, sizeof(ta), "%s a2b", tag);
    snprintf(tb, sizeof(tb), "%s b2a", tag);
    for (int i = 0; i < rounds; i++) {
        burst(a, b, ta, i, BURST);
        burst(b, a, tb, i, BURST);
    }
}

static int64_t varz(const char *name)
{
    int64_t v = -1;
    CONF_OK(conf_varz(&srv, name, false, &v));
    return v;
}

static void wait_varz(const char *name, int64_t want)
{
    int64_t last = -1;
    int rc = conf_varz_wait(&srv, name, want, CONF_IO_TIMEOUT_MS, &last);
    cr_assert_eq(rc, 0, "%s: %lld, want %lld", name, (long long)last, (long long)want);
}

#define GUESTS_0 "hderp_placement_guests{shard=\"0\"}"
#define GUESTS_1 "hderp_placement_guests{shard=\"1\"}"

/* a must be the smaller key (the side placement moves of a pair that talks both ways). */
static void order_pair(struct conf_raw *a, struct conf_raw *b)
{
    if (memcmp(b->kp.pub.bytes, a->kp.pub.bytes, DERP_KEY_LEN) < 0) {
        struct conf_raw t = *a;
        *a = *b, *b = t;
    }
}

static void close_all(struct conf_raw *a, struct conf_raw *b)
{
    conf_raw_close(a);
    conf_raw_close(b);
    wait_varz("derp_current_connections", 0);
    wait_varz("derp_clients_total", 0);
    wait_varz(GUESTS_0, 0);
    wait_varz(GUESTS_1, 0);
}

/* Both keys owned by shard 1: the larger moves to shard 0, the smaller follows (two moves). */
Test(test_conformance_pack, pair_on_shard1_packs_to_shard0)
{
    start("1000", "1000");
    struct conf_raw a, b;
    struct derp_keypair ka, kb;
    login_on_shard(&a, &ka, 1);
    login_on_shard(&b, &kb, 1);
    talk(&a, &b, "pack", BURSTS);
    wait_varz(GUESTS_0, 2);
    cr_assert_eq(varz(GUESTS_1), 0);
    cr_assert_eq(varz("hderp_placement_packs"), 1, "one packing decision");
    cr_assert_eq(varz("hderp_placement_moves"), 2, "both moved once");
    cr_assert_eq(varz("hderp_placement_spreads"), 0);
    talk(&a, &b, "packed", BURSTS); /* and it stays so */
    cr_assert_eq(varz("hderp_placement_moves"), 2);
    close_all(&a, &b);
    conf_server_stop_clean(&srv);
}

/* Keys of shards 0 and 1, the smaller on shard 0: placement moves it to shard 1; packing then
 * moves the larger to shard 0 and the smaller follows it home (a guest that asks its owner). */
Test(test_conformance_pack, placed_pair_packs_guest_goes_home)
{
    start("1000", "1000");
    struct conf_raw a, b;
    struct derp_keypair ka, kb;
    do { /* a: shard 0 and the smaller key */
        CONF_OK(conf_keypair_on_shard(&ka, 0, SHARDS));
        CONF_OK(conf_keypair_on_shard(&kb, 1, SHARDS));
    } while (memcmp(ka.pub.bytes, kb.pub.bytes, DERP_KEY_LEN) > 0);
    CONF_OK(conf_raw_login(&a, &srv, &ka, NULL));
    CONF_OK(conf_raw_login(&b, &srv, &kb, NULL));
    talk(&a, &b, "placed", BURSTS);
    wait_varz("hderp_placement_returns", 1);
    wait_varz(GUESTS_0, 1); /* b, owned by shard 1; a is at home on shard 0 */
    cr_assert_eq(varz(GUESTS_1), 0);
    cr_assert_eq(varz("hderp_placement_packs"), 1);
    cr_assert_eq(varz("hderp_placement_moves"), 2, "a to shard 1, then b to shard 0");
    talk(&a, &b, "home", BURSTS);
    cr_assert_eq(varz("hderp_placement_moves"), 2);
    cr_assert_eq(varz("hderp_placement_returns"), 1);
    close_all(&a, &b);
    conf_server_stop_clean(&srv);
}

/* --pack-high=0: shard 0 always counts as busy. A pair of shard 0 keys goes to shard 1. */
Test(test_conformance_pack, pair_on_shard0_spreads_to_shard1)
{
    start("1000", "0");
    struct conf_raw a, b;
    struct derp_keypair ka, kb;
    login_on_shard(&a, &ka, 0);
    login_on_shard(&b, &kb, 0);
    talk(&a, &b, "spread", BURSTS);
    wait_varz(GUESTS_1, 2);
    cr_assert_eq(varz(GUESTS_0), 0);
    cr_assert_eq(varz("hderp_placement_spreads"), 1);
    cr_assert_eq(varz("hderp_placement_packs"), 0);
    cr_assert_eq(varz("hderp_placement_moves"), 2);
    talk(&a, &b, "spread out", BURSTS);
    close_all(&a, &b);
    conf_server_stop_clean(&srv);
}

/* A second connection for a packed key: the first goes home (shard 1) as an inactive duplicate,
 * the newest receives; when it leaves, the old one receives again. */
Test(test_conformance_pack, duplicate_of_packed_key)
{
    start("1000", "1000");
    struct conf_raw a, b, a2;
    struct derp_keypair ka, kb;
    login_on_shard(&a, &ka, 1);
    login_on_shard(&b, &kb, 1);
    order_pair(&a, &b);
    talk(&a, &b, "pack", BURSTS);
    wait_varz(GUESTS_0, 2);
    CONF_OK(conf_raw_login(&a2, &srv, &a.kp, NULL));
    wait_varz(GUESTS_0, 1); /* the first a went home */
    talk(&b, &a2, "dup", BURSTS);
    struct conf_frame f = {0};
    int rc = conf_raw_expect_silence(&a, 300, &f);
    cr_assert_eq(rc, 0, "the inactive duplicate: rc %d, frame type %u", rc, f.type);
    conf_raw_close(&a2);
    wait_varz("derp_current_connections", 2);
    talk(&a, &b, "after dup", BURSTS);
    close_all(&a, &b);
    conf_server_stop_clean(&srv);
}

/* --pack=false (packing is on by default): a pair on shard 1 stays there. */
Test(test_conformance_pack, off_never_packs)
{
    const char *extra[] = {"--pack=false", "--pack-low", "1000", "--pack-high", "1000", NULL};
    cr_assert_eq(
        conf_server_start(&srv, &(struct conf_server_opts){.shards = SHARDS, .extra = extra}), 0);
    struct conf_raw a, b;
    struct derp_keypair ka, kb;
    login_on_shard(&a, &ka, 1);
    login_on_shard(&b, &kb, 1);
    talk(&a, &b, "off", BURSTS);
    cr_assert_eq(varz("hderp_placement_packs"), 0);
    cr_assert_eq(varz("hderp_placement_moves"), 0);
    cr_assert_eq(varz(GUESTS_0), 0);
    close_all(&a, &b);
    conf_server_stop_clean(&srv);
}

/* One side closes right after the packet that makes the pair move: whichever step the move was
 * at, the server counts both gone, and a new pair still packs. */
Test(test_conformance_pack, close_during_a_move)
{
    start("1000", "1000");
    for (int round = 0; round < 4; round++) {
        struct conf_raw a, b;
        struct derp_keypair ka, kb;
        login_on_shard(&a, &ka, 1);
        login_on_shard(&b, &kb, 1);
        /* one way: b is the receiver, the side that moves; a's 64th packet decides */
        char msg[32];
        for (int i = 0; i < 64 + round * 8; i++) {
            int len = snprintf(msg, sizeof(msg), "x %d", i);
            CONF_OK(conf_raw_send_packet(&a, &b.kp.pub, msg, (size_t)len));
        }
        if (round % 2)
            conf_raw_close(&b);
        else
            conf_raw_close(&a);
        conf_raw_close(round % 2 ? &a : &b);
        wait_varz("derp_current_connections", 0);
        wait_varz("derp_clients_total", 0);
        wait_varz(GUESTS_0, 0);
        wait_varz(GUESTS_1, 0);
    }
    struct conf_raw a, b;
    struct derp_keypair ka, kb;
    login_on_shard(&a, &ka, 1);
    login_on_shard(&b, &kb, 1);
    int64_t packs = varz("hderp_placement_packs");
    talk(&a, &b, "after", BURSTS);
    wait_varz(GUESTS_0, 2);
    cr_assert_eq(varz("hderp_placement_packs"), packs + 1);
    close_all(&a, &b);
    conf_server_stop_clean(&srv);
}
