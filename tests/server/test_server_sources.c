/* test_server_sources.c - PeerGone subscriptions (relay/server_sources.c): a keyset that grows
 * through its pool classes up to SRV_SOURCES_MAX, subscriber lists that grow and shrink, a
 * connection that leaves from the middle of a list, a key's departure, a move between shards
 * (detach, travel, attach on the other shard), an upgrade's list and restore, the index full,
 * and the last-source memo. Memory comes from the shard's pools: nothing is malloc'd per
 * subscription. */
#include <criterion/criterion.h>
#include <string.h>

#include "server_test.h"

#define SUBS 40 /* connections subscribed to one key: lists of 4, 8, 16, 32, 64 */

static struct srv_client *client_n(struct srv_shard *ds, uint32_t n)
{
    uint8_t k[DERP_KEY_LEN];
    srvt_key(n, k);
    return srvt_client(ds, k, SRV_CLIENT_HANDSHAKE); /* not ACTIVE: no PeerGone is sent */
}

static bool vec_has(struct srv_subs_entry *e, const struct srv_client *cl)
{
    struct srv_client **v = srv_subs_vec(e);
    for (uint32_t i = 0; i < e->count; i++)
        if (v[i] == cl)
            return true;
    return false;
}

static void lists_body(struct srv_shard *ds, void *arg)
{
    (void)arg;
    uint8_t key[DERP_KEY_LEN];
    srvt_key(1000, key);
    struct srv_client *c[SUBS];
    for (unsigned i = 0; i < SUBS; i++) {
        c[i] = client_n(ds, i + 1);
        srv_source_subscribe(c[i], key);
        srv_source_subscribe(c[i], key); /* a repeat: nothing new */
        HDT_CHECK(srv_source_has(c[i], key) && c[i]->sources.count == 1);
    }
    HDT_CHECK(ds->subs.count == 1 && ds->ctr.subs_refused == 0);
    /* Leave from the middle and the front: the last subscriber moves into the hole and its
     * keyset's position follows (a later drop of it would otherwise remove someone else). */
    for (unsigned i = 0; i < SUBS; i += 3)
        srv_sources_drop(c[i]);
    srv_sources_drop(c[SUBS - 1]);
    struct srv_subs_entry e;
    HDT_CHECK(srv_sources_take(ds, key, &e));
    unsigned left = 0;
    for (unsigned i = 0; i < SUBS; i++) {
        bool dropped = i % 3 == 0 || i == SUBS - 1;
        HDT_CHECK(vec_has(&e, c[i]) == !dropped);
        HDT_CHECK(!srv_source_has(c[i], key)); /* taken: every keyset forgot the key */
        left += !dropped;
    }
    HDT_CHECK(e.count == left && ds->subs.count == 0);
    srv_subs_entry_free(&e);
    HDT_CHECK(!srv_sources_take(ds, key, &e)); /* gone: nothing to take */
    /* Shrinking: 40 subscribers, then all but one leave; the list shrinks class by class. */
    for (unsigned i = 0; i < SUBS; i++)
        srv_source_subscribe(c[i], key);
    for (unsigned i = 1; i < SUBS; i++)
        srv_sources_drop(c[i]);
    HDT_CHECK(ds->subs.count == 1 && srv_source_has(c[0], key));
    HDT_CHECK(srv_sources_take(ds, key, &e) && e.count == 1 && e.cap <= SRV_SUBS_VEC_MIN);
    HDT_CHECK(srv_subs_vec(&e)[0] == c[0]);
    srv_subs_entry_free(&e);
    for (unsigned i = 0; i < SUBS; i++)
        srvt_client_free(c[i]);
    HDT_CHECK(ds->subs.count == 0);
    srvt_done(ds);
}

Test(server_sources, subscriber_lists)
{
    cr_assert_eq(srvt_run(NULL, lists_body, NULL), 0);
}

/* The last-source memo (a repeated source costs no probe): a source whose departure took it
 * out of the set is subscribed to again at its next packet, though it was the last one. */
static void memo_body(struct srv_shard *ds, void *arg)
{
    (void)arg;
    uint8_t a[DERP_KEY_LEN], b[DERP_KEY_LEN];
    srvt_key(1000, a), srvt_key(1001, b);
    struct srv_client *cl = client_n(ds, 1);
    srv_source_subscribe(cl, a);
    srv_source_subscribe(cl, a);
    HDT_CHECK(srv_source_has(cl, a) && cl->sources.count == 1 && ds->subs.count == 1);
    struct srv_subs_entry e;
    HDT_CHECK(srv_sources_take(ds, a, &e) && e.count == 1);
    srv_subs_entry_free(&e);
    HDT_CHECK(!srv_source_has(cl, a) && cl->sources.count == 0);
    srv_source_subscribe(cl, a); /* its next packet: subscribed again */
    HDT_CHECK(srv_source_has(cl, a) && cl->sources.count == 1 && ds->subs.count == 1);
    /* another source leaving keeps the memo of the last one */
    srv_source_subscribe(cl, b);
    srv_source_subscribe(cl, a);
    HDT_CHECK(srv_sources_take(ds, b, &e) && e.count == 1);
    srv_subs_entry_free(&e);
    srv_source_subscribe(cl, a);
    HDT_CHECK(srv_source_has(cl, a) && !srv_source_has(cl, b) && cl->sources.count == 1);
    srv_source_subscribe(cl, b);
    HDT_CHECK(srv_source_has(cl, b) && cl->sources.count == 2 && ds->subs.count == 2);
    srvt_client_free(cl);
    HDT_CHECK(ds->subs.count == 0);
    srvt_done(ds);
}

Test(server_sources, last_source_memo)
{
    cr_assert_eq(srvt_run(NULL, memo_body, NULL), 0);
}

/* One connection hears from SRV_SOURCES_MAX keys and more: its keyset goes through every
 * class, the one past the cap is refused (counted), and each key's departure finds it. */
static void keyset_body(struct srv_shard *ds, void *arg)
{
    (void)arg;
    struct srv_client *cl = client_n(ds, 1);
    uint8_t k[DERP_KEY_LEN];
    for (uint32_t n = 1; n <= SRV_SOURCES_MAX + 10; n++) {
        srvt_key(n + 100, k);
        srv_source_subscribe(cl, k);
    }
    HDT_CHECK(cl->sources.count == SRV_SOURCES_MAX);
    HDT_CHECK(cl->sources.cap == SRV_KEYSET_MIN << (SRV_KEYSET_CLASSES - 1));
    HDT_CHECK(ds->subs.count == SRV_SOURCES_MAX && ds->ctr.subs_refused == 10);
    struct srv_subs_entry e;
    for (uint32_t n = 1; n <= SRV_SOURCES_MAX; n += 97) {
        srvt_key(n + 100, k);
        HDT_CHECK(srv_sources_take(ds, k, &e) && e.count == 1 && e.one == cl);
        srv_subs_entry_free(&e);
        HDT_CHECK(!srv_source_has(cl, k));
    }
    srvt_client_free(cl);
    HDT_CHECK(ds->subs.count == 0);
    srvt_done(ds);
}

Test(server_sources, keyset_to_its_cap)
{
    cr_assert_eq(srvt_run(NULL, keyset_body, NULL), 0);
}

/* A connection moves from shard 0 to shard 1 (as placement moves it): out of shard 0's index
 * and pools, its keys travelling, into shard 1's. Shard 1 does the second half on its thread. */
struct move_state {
    struct srv_client *cl, *stay;
    _Atomic int step;
};

static void move_arrive(struct srv_shard *ds, struct hd_frame *f, uint64_t arg)
{
    struct move_state *m = (struct move_state *)(uintptr_t)f->app_u64;
    (void)arg;
    struct srv_client *cl = m->cl;
    HDT_CHECK(cl->sources.travelling && cl->sources.count == 50);
    cl->ds = ds;
    srv_sources_attach(cl);
    HDT_CHECK(!cl->sources.travelling && cl->sources.count == 50);
    HDT_CHECK(ds->subs.count == 50);
    uint8_t k[DERP_KEY_LEN];
    for (uint32_t n = 1; n <= 50; n++) {
        srvt_key(n + 500, k);
        HDT_CHECK(srv_source_has(cl, k));
    }
    /* an upgrade's hand-over: the prefixes, into a fresh connection's keyset */
    uint64_t list[64];
    HDT_CHECK(srv_sources_list(cl, list, 64) == 50);
    struct srv_client *heir = client_n(ds, 9);
    srv_sources_restore(heir, list, 50);
    HDT_CHECK(heir->sources.count == 50 && ds->subs.count == 50);
    struct srv_subs_entry e;
    srvt_key(501, k);
    HDT_CHECK(srv_sources_take(ds, k, &e) && e.count == 2);
    srv_subs_entry_free(&e);
    srvt_client_free(heir);
    srvt_client_free(cl);
    HDT_CHECK(ds->subs.count == 0);
    f->app_u64 = 0;
    atomic_store(&m->step, 2);
    srvt_done(ds);
}

static void move_body(struct srv_shard *ds, void *arg)
{
    struct move_state *m = arg;
    if (hd_shard_id(ds->s) == 1)
        return; /* shard 0 sends it the connection */
    uint8_t k[DERP_KEY_LEN];
    m->cl = client_n(ds, 1);
    m->stay = client_n(ds, 2);
    for (uint32_t n = 1; n <= 50; n++) {
        srvt_key(n + 500, k);
        srv_source_subscribe(m->cl, k);
        if (n % 2)
            srv_source_subscribe(m->stay, k);
    }
    HDT_CHECK(ds->subs.count == 50);
    srv_sources_detach(m->cl);
    HDT_CHECK(m->cl->sources.travelling && !srv_source_has(m->cl, k)); /* in no index */
    HDT_CHECK(ds->subs.count == 25); /* the keys the other one heard from stay */
    srv_sources_detach(m->cl);       /* twice: nothing more */
    struct hd_frame *f = hd_frame_get(ds->s, 8);
    HDT_CHECK(f != NULL);
    f->app_u64 = (uint64_t)(uintptr_t)m;
    HDT_CHECK(srv_event_send(ds, 1, move_arrive, f, 0) == 0);
    srvt_client_free(m->stay);
    HDT_CHECK(ds->subs.count == 0);
    atomic_store(&m->step, 1);
    srvt_done(ds);
}

Test(server_sources, move_between_shards)
{
    struct move_state m = {0};
    struct srvt_opts o = {.shards = 2};
    cr_assert_eq(srvt_run(&o, move_body, &m), 0);
    cr_assert_eq(atomic_load(&m.step), 2);
}

/* A travelling keyset whose move failed (or that closed on the way) is forgotten. */
static void forget_body(struct srv_shard *ds, void *arg)
{
    (void)arg;
    struct srv_client *cl = client_n(ds, 1);
    uint8_t k[DERP_KEY_LEN];
    srvt_key(7, k);
    srv_source_subscribe(cl, k);
    srv_sources_detach(cl);
    HDT_CHECK(cl->sources.travelling && ds->subs.count == 0);
    srv_sources_forget(cl);
    HDT_CHECK(cl->sources.slots == NULL && !cl->sources.travelling);
    srv_sources_drop(cl); /* and a close after it is harmless */
    free(cl);
    srvt_done(ds);
}

Test(server_sources, travelling_forgotten)
{
    cr_assert_eq(srvt_run(NULL, forget_body, NULL), 0);
}
