/* test_server_peers.c - the peer table (relay/server_peers.c): growth at half load, removal by
 * backward shift (also while a walk is in progress, as srv_forwarder_remove_node does), a key
 * that leaves and comes back; registration of duplicate connections and which one is active;
 * a key's departure and its PeerGone subscribers; mesh forwarders. */
#include <criterion/criterion.h>
#include <string.h>

#include "server_test.h"

static struct srv_peer *peer_new(uint32_t n)
{
    struct srv_peer *p = calloc(1, sizeof(*p));
    cr_assert(p != NULL);
    srvt_key(n, p->key.bytes);
    return p;
}

static uint32_t key_number(const struct srv_peer *p, uint32_t max)
{
    uint8_t k[DERP_KEY_LEN];
    for (uint32_t n = 1; n <= max; n++) {
        srvt_key(n, k);
        if (memcmp(k, p->key.bytes, DERP_KEY_LEN) == 0)
            return n;
    }
    return 0;
}

Test(server_peers, grows_at_half_load)
{
    srv_hash_init(NULL);
    struct srv_peer_table t;
    cr_assert_eq(srv_peers_init(&t), 0);
    cr_assert_eq(t.cap, SRV_PEERS_INITIAL);
    for (uint32_t n = 1; n <= SRV_PEERS_INITIAL / 2; n++)
        cr_assert_eq(srv_peers_insert(&t, peer_new(n)), 0);
    cr_assert_eq(t.cap, SRV_PEERS_INITIAL, "exactly half full: no growth yet");
    cr_assert_eq(srv_peers_insert(&t, peer_new(SRV_PEERS_INITIAL / 2 + 1)), 0);
    cr_assert_eq(t.cap, 2 * SRV_PEERS_INITIAL, "one past half: doubled");
    cr_assert_eq(t.count, SRV_PEERS_INITIAL / 2 + 1);
    uint8_t k[DERP_KEY_LEN];
    for (uint32_t n = 1; n <= t.count; n++) {
        srvt_key(n, k);
        struct srv_peer *p = srv_peers_find(&t, k);
        cr_assert(p != NULL && memcmp(p->key.bytes, k, DERP_KEY_LEN) == 0, "key %u", n);
    }
    srvt_key(100000, k);
    cr_assert_null(srv_peers_find(&t, k));
    srv_peers_fini(&t);
}

/* srv_forwarder_remove_node's walk: a removal shifts later entries of the probe chain back into
 * slot i, so the walk looks at slot i again. Every entry must be seen once and only once. */
Test(server_peers, remove_while_walking)
{
    srv_hash_init(NULL);
    const uint32_t keys = 3000;
    struct srv_peer_table t;
    cr_assert_eq(srv_peers_init(&t), 0);
    for (uint32_t n = 1; n <= keys; n++)
        cr_assert_eq(srv_peers_insert(&t, peer_new(n)), 0);
    uint32_t removed = 0, kept_seen = 0;
    for (uint32_t i = 0; i < t.cap;) {
        struct srv_peer *p = t.slots[i];
        uint32_t n = p ? key_number(p, keys) : 0;
        if (p && n % 2 == 1) {
            srv_peers_remove(&t, p);
            free(p);
            removed++;
            continue; /* slot i again */
        }
        kept_seen += p != NULL;
        i++;
    }
    cr_assert_eq(removed, keys / 2);
    cr_assert_eq(t.count, keys - removed);
    /* Every kept entry was seen (one shifted back across the array's end is seen twice). */
    cr_assert_geq(kept_seen, t.count);
    uint8_t k[DERP_KEY_LEN];
    for (uint32_t n = 1; n <= keys; n++) {
        srvt_key(n, k);
        if (n % 2)
            cr_assert_null(srv_peers_find(&t, k), "key %u removed", n);
        else
            cr_assert_not_null(srv_peers_find(&t, k), "key %u kept", n);
    }
    srv_peers_fini(&t);
}

/* A key that leaves and comes back (a reconnect) takes a slot again; everything else in its
 * probe chain stays reachable; emptied, the table has no slot left over. */
Test(server_peers, leave_and_return)
{
    srv_hash_init(NULL);
    const uint32_t keys = 400;
    struct srv_peer_table t;
    cr_assert_eq(srv_peers_init(&t), 0);
    struct srv_peer *all[401];
    for (uint32_t n = 1; n <= keys; n++)
        cr_assert_eq(srv_peers_insert(&t, all[n] = peer_new(n)), 0);
    for (int round = 0; round < 5; round++) {
        for (uint32_t n = 1 + round; n <= keys; n += 7) {
            srv_peers_remove(&t, all[n]);
            cr_assert_null(srv_peers_find(&t, all[n]->key.bytes));
            cr_assert_eq(srv_peers_insert(&t, all[n]), 0);
        }
        for (uint32_t n = 1; n <= keys; n++)
            cr_assert_eq(srv_peers_find(&t, all[n]->key.bytes), all[n]);
    }
    for (uint32_t n = keys; n >= 1; n--)
        srv_peers_remove(&t, all[n]);
    cr_assert_eq(t.count, 0);
    for (uint32_t i = 0; i < t.cap; i++)
        cr_assert_null(t.slots[i]);
    for (uint32_t n = 1; n <= keys; n++)
        free(all[n]);
    srv_peers_fini(&t);
}

/* ---------------------------------------------------------------- on a shard */

static void dups_body(struct srv_shard *ds, void *arg)
{
    (void)arg;
    uint8_t k[DERP_KEY_LEN], other[DERP_KEY_LEN];
    srvt_key(1, k);
    srvt_key(2, other);
    struct srv_client *c1 = srvt_client(ds, k, SRV_CLIENT_ACTIVE);
    struct srv_client *c2 = srvt_client(ds, k, SRV_CLIENT_ACTIVE);
    struct srv_client *c3 = srvt_client(ds, k, SRV_CLIENT_ACTIVE);
    srv_register(ds, c1);
    HDT_CHECK(ds->ctr.clients_local == 1 && ds->ctr.current_dup_client_keys == 0);
    srv_register(ds, c2);
    srv_register(ds, c3);
    struct srv_peer *p = srv_peers_find(&ds->peers, k);
    HDT_CHECK(p && p->clients_count == 3 && p->active == c3); /* the newest is active */
    HDT_CHECK(ds->ctr.clients_local == 1);
    HDT_CHECK(ds->ctr.current_dup_client_keys == 1 && ds->ctr.current_dup_client_conns == 3);
    HDT_CHECK(ds->ctr.total_dup_client_conns == 2);
    srv_note_activity(ds, c1); /* lastWriterIsActive */
    HDT_CHECK(p->active == c1);
    /* the active one leaves: the most recently active of the others takes over */
    srv_unregister(ds, c1);
    HDT_CHECK(p->active == c3 && p->clients_count == 2 && c1->peer == NULL);
    HDT_CHECK(ds->ctr.current_dup_client_keys == 1 && ds->ctr.current_dup_client_conns == 2);
    srv_unregister(ds, c3);
    HDT_CHECK(p->active == c2 && p->clients_count == 1);
    HDT_CHECK(ds->ctr.current_dup_client_keys == 0 && ds->ctr.current_dup_client_conns == 0);
    /* A connection that received from k (not active: it sends nothing here) is subscribed. */
    struct srv_client *sub = srvt_client(ds, other, SRV_CLIENT_HANDSHAKE);
    srv_source_subscribe(sub, k);
    HDT_CHECK(srv_source_has(sub, k) && ds->subs.count == 1);
    /* k's last connection leaves: the entry goes, and so does the subscription (PeerGone) */
    srv_unregister(ds, c2);
    HDT_CHECK(srv_peers_find(&ds->peers, k) == NULL && ds->peers.count == 0);
    HDT_CHECK(ds->ctr.clients_local == 0);
    HDT_CHECK(!srv_source_has(sub, k) && ds->subs.count == 0 && sub->sources.count == 0);
    /* and k may come back */
    srv_register(ds, c1);
    HDT_CHECK(srv_peers_find(&ds->peers, k) == c1->peer && ds->ctr.clients_local == 1);
    srv_unregister(ds, c1);
    srvt_client_free(c1), srvt_client_free(c2), srvt_client_free(c3), srvt_client_free(sub);
    srvt_done(ds);
}

Test(server_peers, duplicates_and_departure)
{
    cr_assert_eq(srvt_run(NULL, dups_body, NULL), 0);
}

static void mesh_body(struct srv_shard *ds, void *arg)
{
    (void)arg;
    uint8_t k[DERP_KEY_LEN], a[DERP_KEY_LEN], b[DERP_KEY_LEN], other[DERP_KEY_LEN];
    srvt_key(1, k), srvt_key(3, a), srvt_key(4, b), srvt_key(2, other);
    struct srv_client *sub = srvt_client(ds, other, SRV_CLIENT_HANDSHAKE);
    /* k: a local connection and mesh node 3; the connection leaves, the region still has k */
    struct srv_client *c = srvt_client(ds, k, SRV_CLIENT_ACTIVE);
    srv_register(ds, c);
    srv_forwarder_add(ds, k, 3);
    srv_source_subscribe(sub, k);
    srv_unregister(ds, c);
    struct srv_peer *p = srv_peers_find(&ds->peers, k);
    HDT_CHECK(p && p->clients_count == 0 && p->fwd_count == 1 && p->fwd[0] == 3);
    HDT_CHECK(srv_source_has(sub, k)); /* still in the region: no PeerGone */
    srv_forwarder_add(ds, k, 3);       /* a repeat changes nothing */
    HDT_CHECK(p->fwd_count == 1 && ds->ctr.multiforwarder_created == 0);
    srv_forwarder_remove(ds, k, 3); /* it left the region */
    HDT_CHECK(srv_peers_find(&ds->peers, k) == NULL && !srv_source_has(sub, k));
    /* a: node 1 only; b: nodes 1 and 2. Node 1 goes away: a leaves, b stays via node 2. */
    srv_forwarder_add(ds, a, 1);
    srv_forwarder_add(ds, b, 1);
    srv_forwarder_add(ds, b, 2);
    HDT_CHECK(ds->ctr.multiforwarder_created == 1);
    srv_source_subscribe(sub, a);
    srv_source_subscribe(sub, b);
    srv_forwarder_remove_node(ds, 1);
    HDT_CHECK(srv_peers_find(&ds->peers, a) == NULL);
    p = srv_peers_find(&ds->peers, b);
    HDT_CHECK(p && p->fwd_count == 1 && p->fwd[0] == 2);
    HDT_CHECK(ds->ctr.multiforwarder_deleted == 1);
    HDT_CHECK(!srv_source_has(sub, a) && srv_source_has(sub, b));
    /* A full forwarder list ignores one more node. */
    for (unsigned id = 3; id < 3 + SRV_MESH_NODES_MAX + 2; id++)
        srv_forwarder_add(ds, b, id);
    HDT_CHECK(p->fwd_count == SRV_MESH_NODES_MAX);
    srv_forwarder_remove_node(ds, 2);
    for (unsigned id = 3; id < 3 + SRV_MESH_NODES_MAX; id++)
        srv_forwarder_remove(ds, b, id);
    HDT_CHECK(ds->peers.count == 0 && !srv_source_has(sub, b));
    srvt_client_free(c), srvt_client_free(sub);
    srvt_done(ds);
}

Test(server_peers, mesh_forwarders)
{
    cr_assert_eq(srvt_run(NULL, mesh_body, NULL), 0);
}
