/* test_conformance_watchers.c - issue 24 item 2 against a real hderp-server: mesh watchers
 * (the mesh key, WatchConns) that never read cannot drain the frame pool while clients come
 * and go (their presence notices are charged to them like a client's packets, and a watcher
 * at its share is closed), a bystander pair and a ping client are served throughout, and
 * logins with the mesh key are capped per shard (--mesh-conns-max; refused past it, counted).
 * Raw blocking clients. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf_support.h"

#define MESH_HEX  "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
#define MESH_JSON "{\"meshKey\":\"" MESH_HEX "\",\"version\":2,\"CanAckPings\":false}"

static struct conf_server srv;

#define TINY_MSS 536

static void down(void)
{
    if (srv.pid > 0)
        conf_server_stop(&srv);
}

TestSuite(test_conformance_watchers, .fini = down, .timeout = 240);

/* A login from source address src with json (the mesh key or NULL) on a socket whose receive
 * buffer is rcvbuf bytes (0: the default), with a tiny MSS beside a small buffer. */
static int login_via(struct conf_raw *r, const char *src, int rcvbuf, const char *json)
{
    return conf_raw_login_via(r, &srv, src, rcvbuf, rcvbuf ? TINY_MSS : 0, json);
}

/* The attack, scaled down: one shard with a 4 MiB frame pool (1,024 small frames, 128
 * of them the reserve) and n mesh-key connections, each with a tiny receive buffer and MSS (so
 * the kernel takes little off the server's queue), that send WatchConns and never read: from
 * one address (127.0.0.2), or each from its own (127.0.1.x). Then CHURN clients log in and
 * leave, one after the other: each login is a PeerPresent and each departure a PeerGone for
 * every watcher. Every ROUND of them a bystander pair (on 127.0.0.1) exchanges a packet and a
 * ping client gets its Pong: each must come through, no control frame may go without a frame
 * ("frame pool exhausted"), no packet may find the pool at its reserve, the watchers must have
 * been closed (at their share, their address's, or by the write deadline), and a fresh login
 * works at the end. Before the fix each notice held a 2 KiB frame in the watcher's unbounded
 * queue: the pool ran dry and bystander packets were lost (checked). */
#define CHURN    3000
#define ROUND    50
#define TINY_RCV 2048

/* Churn step i: a client logs in and leaves. */
static void churn_step(int i, void *arg)
{
    (void)arg;
    struct conf_raw c;
    int rc = conf_raw_login(&c, &srv, NULL, NULL);
    conf_raw_close(&c);
    cr_assert_eq(rc, 0, "churn login %d: %d", i, rc);
}

static void drain_attack(int n, bool own_addresses)
{
    static const char *const extra[] = {"--frame-pool-mib", "4", NULL};
    CONF_OK(conf_server_start(
        &srv, &(struct conf_server_opts){.shards = 1, .mesh_key_hex = MESH_HEX, .extra = extra}));
    struct conf_raw *w = calloc((size_t)n, sizeof(*w));
    cr_assert(w != NULL);
    for (int i = 0; i < n; i++) {
        char src[32];
        snprintf(src, sizeof(src), own_addresses ? "127.0.1.%d" : "127.0.0.2", i + 1);
        CONF_OK(login_via(&w[i], src, TINY_RCV, MESH_JSON));
        CONF_OK(conf_raw_send_frame(&w[i], DERP_FRAME_WATCH_CONNS, NULL, 0));
    }
    struct conf_bystanders by;
    conf_bystanders_login(&by, &srv);
    int64_t v = 0;
    CONF_OK(conf_varz_wait(&srv, "derp_watchers", n, CONF_IO_TIMEOUT_MS, &v));
    conf_bystanders_every(&by, CHURN, ROUND, churn_step, NULL);
    conf_bystanders_check(&by, CHURN / ROUND);
    int64_t closed = conf_varz_must(&srv, "derp_sclient_write_timeouts");
    CONF_OK(conf_varz(&srv, "hderp_watchers_closed", true, &v));
    cr_assert_gt(closed + v, 0, "no watcher reached its share or its write deadline: no attack");
    cr_assert_eq(conf_varz_must(&srv, "hderp_ctl_dropped"), 0, "control frames found none");
    cr_assert(!conf_log_has(&srv, "frame pool exhausted"), "the pool ran dry");
    cr_assert_eq(conf_varz_must(&srv, "hderp_frames_refused{why=\"reserve\"}"), 0,
                 "packets found the pool at its reserve");
    struct conf_raw fresh;
    CONF_OK(conf_raw_login(&fresh, &srv, NULL, NULL));
    CONF_OK(conf_raw_ping_pong(&fresh, 9, CONF_IO_TIMEOUT_MS));
    conf_raw_close(&fresh);
    conf_bystanders_close(&by);
    for (int i = 0; i < n; i++)
        conf_raw_close(&w[i]);
    free(w);
    cr_assert_eq(conf_server_stop(&srv), 0);
}

/* 48 watchers from one address: together they reach the address's share. */
Test(test_conformance_watchers, never_reading_watchers_one_address)
{
    drain_attack(48, false);
}

/* 16 watchers, each from its own address: each reaches its own share (or its write deadline);
 * at most 16 x SRV_FRAMES_SHARE_MIN frames of the 896 above the reserve are theirs. */
Test(test_conformance_watchers, never_reading_watchers_own_addresses)
{
    drain_attack(16, true);
}

/* A watcher that stops reading has a client's write deadline (-tcp-write-timeout 1s here; a
 * mesh peer's was 30 s): STALL_CHURN logins and departures fill its small socket buffers (its
 * backlog stays under its share), and once nothing moves for a second it is closed, counted in
 * derp_sclient_write_timeouts. A watcher beside it that reads hears every notice, in order
 * (they are gathered into shared frames per tick now): a PeerPresent, then a PeerGone, for
 * each client that came and went, and a PeerGone for the closed watcher. */
#define STALL_CHURN   6000
#define STALL_READ    100   /* the reader catches up every this many churn logins */
#define STALL_WAIT_MS 15000 /* a hang's bound: it closes after 1 s (it was 30 s) */

/* What the reading watcher has heard: the churn keys up to next (each PeerPresent then
 * PeerGone; present: the next one's PeerPresent came), and the stalled watcher's PeerGone. */
struct heard {
    const struct derp_pubkey *keys, *stalled;
    int next;
    bool present, stalled_gone;
};

/* Reads r's frames until the churn keys before upto have come and gone (and, with stalled, the
 * stalled watcher's PeerGone came): anything else than the snapshot's PeerPresents (before the
 * first churn key), those in their order, and the stalled watcher's PeerGone (once, anywhere)
 * fails the test. */
static void hear(struct conf_raw *r, struct heard *h, int upto, bool stalled)
{
    while (h->next < upto || h->present || (stalled && !h->stalled_gone)) {
        struct conf_frame f;
        CONF_OK(conf_raw_read_nka(r, CONF_IO_TIMEOUT_MS, &f));
        cr_assert(f.type == DERP_FRAME_PEER_PRESENT || f.type == DERP_FRAME_PEER_GONE);
        bool churn = h->next < STALL_CHURN && !memcmp(f.p, h->keys[h->next].bytes, DERP_KEY_LEN);
        if (f.type == DERP_FRAME_PEER_GONE && !memcmp(f.p, h->stalled->bytes, DERP_KEY_LEN)) {
            cr_assert(!h->stalled_gone, "the stalled watcher's PeerGone twice");
            h->stalled_gone = true;
        } else if (f.type == DERP_FRAME_PEER_PRESENT && churn) {
            cr_assert(!h->present, "PeerPresent of churn key %d twice", h->next);
            h->present = true;
        } else if (f.type == DERP_FRAME_PEER_GONE && churn && h->present) {
            h->present = false;
            h->next++;
        } else {
            cr_assert(h->next == 0 && !h->present && f.type == DERP_FRAME_PEER_PRESENT,
                      "frame %u out of order at churn key %d", f.type, h->next);
        }
    }
}

Test(test_conformance_watchers, stalled_watcher_closed_reader_served)
{
    CONF_OK(conf_server_start(
        &srv,
        &(struct conf_server_opts){.shards = 1, .mesh_key_hex = MESH_HEX, .write_timeout = "1s"}));
    struct conf_raw stalled, reader;
    CONF_OK(login_via(&stalled, "127.0.0.2", TINY_RCV, MESH_JSON));
    CONF_OK(conf_raw_send_frame(&stalled, DERP_FRAME_WATCH_CONNS, NULL, 0));
    CONF_OK(conf_raw_login(&reader, &srv, NULL, MESH_JSON));
    CONF_OK(conf_raw_send_frame(&reader, DERP_FRAME_WATCH_CONNS, NULL, 0));
    conf_varz_expect(&srv, "two watchers", "derp_watchers", 2, CONF_IO_TIMEOUT_MS);
    static struct derp_pubkey keys[STALL_CHURN];
    struct derp_pubkey stalled_key = stalled.kp.pub;
    struct heard h = {.keys = keys, .stalled = &stalled_key};
    for (int i = 0; i < STALL_CHURN; i++) {
        struct conf_raw c;
        int rc = conf_raw_login(&c, &srv, NULL, NULL);
        keys[i] = c.kp.pub;
        conf_raw_close(&c);
        cr_assert_eq(rc, 0, "churn login %d: %d", i, rc);
        if (i % STALL_READ == STALL_READ - 1)
            hear(&reader, &h, i + 1, false);
    }
    conf_varz_expect(&srv, "the stalled watcher's write deadline", "derp_sclient_write_timeouts", 1,
                     STALL_WAIT_MS);
    cr_assert_eq(conf_raw_wait_closed(&stalled, CONF_IO_TIMEOUT_MS), 0);
    conf_raw_close(&stalled);
    hear(&reader, &h, STALL_CHURN, true);
    cr_assert_eq(conf_varz_must(&srv, "derp_watchers"), 1);
    cr_assert_eq(conf_varz_must(&srv, "hderp_watchers_closed{why=\"share\"}"), 0);
    conf_raw_close(&reader);
    cr_assert_eq(conf_server_stop(&srv), 0);
}

/* --mesh-conns-max 4: four logins with the mesh key (and a plain client beside them) are in, the
 * fifth is refused (closed before ServerInfo, counted, logged naming the flag); once one of the
 * four leaves, a mesh login is let in again. */
#define MESH_CAP 4

Test(test_conformance_watchers, mesh_logins_capped)
{
    static const char *const extra[] = {"--mesh-conns-max", "4", NULL};
    CONF_OK(conf_server_start(
        &srv, &(struct conf_server_opts){.shards = 1, .mesh_key_hex = MESH_HEX, .extra = extra}));
    struct conf_raw m[MESH_CAP], over, plain, again;
    for (int i = 0; i < MESH_CAP; i++)
        CONF_OK(conf_raw_login(&m[i], &srv, NULL, MESH_JSON));
    CONF_OK(conf_raw_login(&plain, &srv, NULL, NULL));
    int rc = conf_raw_login(&over, &srv, NULL, MESH_JSON);
    cr_assert(rc == -ESHUTDOWN || rc == -ECONNRESET, "a mesh login over the cap: %d", rc);
    conf_raw_close(&over);
    cr_assert_eq(conf_varz_must(&srv, "hderp_mesh_conns_refused"), 1);
    cr_assert_eq(conf_varz_must(&srv, "hderp_mesh_conns"), MESH_CAP);
    cr_assert(conf_log_wait(&srv, "--mesh-conns-max", CONF_IO_TIMEOUT_MS), "no log line");
    CONF_OK(conf_raw_ping_pong(&plain, 1, CONF_IO_TIMEOUT_MS));
    conf_raw_close(&m[0]);
    conf_varz_expect(&srv, "a mesh connection left", "hderp_mesh_conns", MESH_CAP - 1,
                     CONF_IO_TIMEOUT_MS);
    CONF_OK(conf_raw_login(&again, &srv, NULL, MESH_JSON));
    CONF_OK(conf_raw_send_frame(&again, DERP_FRAME_WATCH_CONNS, NULL, 0));
    struct conf_frame f; /* a watcher as any: the snapshot names the plain client */
    CONF_OK(conf_raw_read_nka(&again, CONF_IO_TIMEOUT_MS, &f));
    cr_assert_eq(f.type, DERP_FRAME_PEER_PRESENT);
    cr_assert_eq(conf_varz_must(&srv, "hderp_mesh_conns_refused"), 1);
    conf_raw_close(&again);
    conf_raw_close(&plain);
    for (int i = 1; i < MESH_CAP; i++)
        conf_raw_close(&m[i]);
    cr_assert_eq(conf_server_stop(&srv), 0);
}
