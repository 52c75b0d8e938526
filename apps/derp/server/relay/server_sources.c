/* server_sources.c - who hears PeerGone when a key leaves (spec §6.7). A connection subscribes
 * to a source key once a RecvPacket from it was written to it. Each connection keeps its
 * sources (struct srv_keyset, at most SRV_SOURCES_MAX), and each shard keeps the reverse: per
 * source key, the connections of this shard subscribed to it (struct srv_subs), so that a
 * departure touches only them. The two are kept in step: every keyset slot remembers where its
 * connection sits in the key's subscriber list, so a closing connection leaves every list in
 * O(1) per subscription. Keys are remembered by a 64-bit prefix on both sides: a collision makes
 * one PeerGone go missing or arrive for a key never heard from — harmless. Runs on one shard.
 * Memory: a subscription is made per packet written, so nothing here calls malloc on that path
 * (tidy: no-malloc-data-path). The index is allocated at shard start (SRV_SUBS_SLOTS), keysets
 * and subscriber lists come from the shard's pools in power-of-two classes (server_limits.h);
 * a full index or pool refuses the subscription (counted: hderp_subscriptions_refused). A
 * keyset that moves with its connection to another shard travels as a heap list of its
 * prefixes (a move is not a packet) and is rebuilt from the new shard's pools on arrival.
 * Per packet: a keyset remembers the prefix it subscribed to last (a receiver mostly hears from
 * one source in a row), so a repeated source costs one compare and no probe; the memo names
 * only a prefix in the set (cleared when that one leaves it). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server.h"

#define KS_SLOT_BYTES (sizeof(uint64_t) + sizeof(uint32_t)) /* a prefix and its position */

static uint32_t home_of(uint64_t p, uint32_t cap)
{
    return (uint32_t)(p * 0x9E3779B97F4A7C15ull >> 32) & (cap - 1);
}

/* ---------------------------------------------------------------- the shard's pools */

static void refused(struct srv_subs *t)
{
    hd_container_of(t, struct srv_shard, subs)->ctr.subs_refused++;
}

/* The class whose blocks hold n units exactly (n: min times a power of two). */
static unsigned class_of(uint32_t n, uint32_t min)
{
    HD_ASSERT(n >= min && HD_IS_POW2(n / min) && n % min == 0);
    return (unsigned)__builtin_ctz(n / min);
}

int srv_sources_shard_init(struct srv_shard *ds)
{
    struct srv_subs *t = &ds->subs;
    *t = (struct srv_subs){0};
    char name[32];
    for (unsigned c = 0; c < SRV_KEYSET_CLASSES; c++) {
        snprintf(name, sizeof(name), "keyset-%u", SRV_KEYSET_MIN << c);
        int rc = hd_slab_create(ds->s, name, (size_t)(SRV_KEYSET_MIN << c) * KS_SLOT_BYTES,
                                NET_CONNS_MAX, &t->keysets[c]); /* one keyset a connection */
        if (rc < 0)
            return rc; /* the shard's pools go with the shard */
    }
    for (unsigned c = 0; c < SRV_SUBS_VEC_CLASSES; c++) {
        snprintf(name, sizeof(name), "subscribers-%u", SRV_SUBS_VEC_MIN << c);
        int rc = hd_slab_create(ds->s, name, (size_t)(SRV_SUBS_VEC_MIN << c) * sizeof(void *),
                                SRV_SUBS_SLOTS / 2, &t->vecs[c]); /* one list a key */
        if (rc < 0)
            return rc;
    }
    t->slots = calloc(SRV_SUBS_SLOTS, sizeof(*t->slots)); /* pages touched as keys arrive */
    if (t->slots == NULL)
        return -ENOMEM;
    t->cap = SRV_SUBS_SLOTS;
    return 0;
}

/* The pools themselves are the shard's (freed with it, hd_slabs_destroy_all). */
void srv_sources_shard_fini(struct srv_shard *ds)
{
    free(ds->subs.slots);
    ds->subs.slots = NULL;
    ds->subs.cap = ds->subs.count = 0;
}

/* A zeroed keyset block of cap slots, or NULL (the class is at its cap: counted by the pool). */
static uint64_t *ks_block_get(struct srv_subs *t, uint32_t cap)
{
    unsigned c = class_of(cap, SRV_KEYSET_MIN);
    HD_ASSERT(c < SRV_KEYSET_CLASSES);
    uint64_t *b = hd_slab_get(t->keysets[c]);
    if (b)
        memset(b, 0, (size_t)cap * KS_SLOT_BYTES);
    return b;
}

static void ks_block_put(struct srv_subs *t, struct srv_keyset *ks)
{
    struct hd_slab *pool = t->keysets[class_of(ks->cap, SRV_KEYSET_MIN)];
    HD_ASSERT(!ks->travelling && hd_slab_owns(pool, ks->slots)); /* this shard's, this class */
    hd_slab_put(pool, ks->slots);
}

static struct srv_client **vec_get(struct srv_subs *t, uint32_t cap)
{
    unsigned c = class_of(cap, SRV_SUBS_VEC_MIN);
    return c < SRV_SUBS_VEC_CLASSES ? hd_slab_get(t->vecs[c]) : NULL;
}

/* ---------------------------------------------------------------- a connection's keyset */

/* One block of cap prefixes, then cap positions (the connection's index in that key's
 * subscriber list): 12 bytes a slot. */
static uint32_t *ks_pos(const struct srv_keyset *ks)
{
    HD_ASSERT(!ks->travelling);
    return (uint32_t *)(ks->slots + ks->cap);
}

static bool ks_grow(struct srv_subs *t, struct srv_keyset *ks)
{
    uint32_t cap = ks->cap ? ks->cap * 2 : SRV_KEYSET_MIN;
    uint64_t *slots = ks_block_get(t, cap);
    if (slots == NULL)
        return false;
    uint32_t *pos = (uint32_t *)(slots + cap), *old_pos = ks->slots ? ks_pos(ks) : NULL;
    for (uint32_t i = 0; i < ks->cap; i++) {
        if (!ks->slots[i])
            continue;
        uint32_t j = home_of(ks->slots[i], cap);
        while (slots[j])
            j = (j + 1) & (cap - 1);
        slots[j] = ks->slots[i];
        pos[j] = old_pos[i];
    }
    if (ks->slots)
        ks_block_put(t, ks);
    ks->slots = slots;
    ks->cap = cap;
    return true;
}

/* The slot of p, or -1. */
static int64_t ks_find(const struct srv_keyset *ks, uint64_t p)
{
    if (!ks->count || ks->travelling)
        return -1;
    uint32_t mask = ks->cap - 1;
    for (uint32_t j = home_of(p, ks->cap); ks->slots[j]; j = (j + 1) & mask)
        if (ks->slots[j] == p)
            return j;
    return -1;
}

/* The new slot of p; -1 when it was there already, or the set is full (SRV_SOURCES_MAX, or
 * the pool: counted). */
static int64_t ks_add(struct srv_subs *t, struct srv_keyset *ks, uint64_t p)
{
    HD_ASSERT(p != 0 && !ks->travelling);
    if (ks_find(ks, p) >= 0)
        return -1;
    if (!(ks->cap && ks->count < ks->cap / 2) &&
        (ks->count >= SRV_SOURCES_MAX || !ks_grow(t, ks))) {
        refused(t);
        return -1;
    }
    uint32_t j = home_of(p, ks->cap);
    while (ks->slots[j])
        j = (j + 1) & (ks->cap - 1);
    ks->slots[j] = p;
    ks->count++;
    HD_ASSERT(ks->count * 2 <= ks->cap); /* at most half full: every probe ends */
    return j;
}

/* Backward-shift deletion of slot j keeps every probe chain unbroken. */
static void ks_remove_at(struct srv_keyset *ks, uint32_t j)
{
    HD_ASSERT(j < ks->cap && ks->slots[j] != 0 && ks->count > 0);
    if (ks->slots[j] == ks->last)
        ks->last = 0; /* the memo names only a prefix in the set */
    uint32_t mask = ks->cap - 1, hole = j, *pos = ks_pos(ks);
    for (uint32_t k = (j + 1) & mask; ks->slots[k]; k = (k + 1) & mask) {
        if (((k - home_of(ks->slots[k], ks->cap)) & mask) >= ((k - hole) & mask)) {
            ks->slots[hole] = ks->slots[k];
            pos[hole] = pos[k];
            hole = k;
        }
    }
    ks->slots[hole] = 0;
    ks->count--;
}

/* ---------------------------------------------------------------- the shard's reverse index */

struct srv_client **srv_subs_vec(struct srv_subs_entry *e)
{
    return e->cap ? e->many : &e->one;
}

static struct srv_subs_entry *subs_find(const struct srv_subs *t, uint64_t p)
{
    if (!t->count)
        return NULL;
    uint32_t mask = t->cap - 1;
    for (uint32_t j = home_of(p, t->cap); t->slots[j].prefix; j = (j + 1) & mask)
        if (t->slots[j].prefix == p)
            return &t->slots[j];
    return NULL;
}

/* Appends cl to p's subscribers: its position there, or -1 (the index or the pool is full:
 * counted). */
static int64_t subs_add(struct srv_subs *t, uint64_t p, struct srv_client *cl)
{
    struct srv_subs_entry *e = subs_find(t, p);
    if (e == NULL) {
        if ((t->count + 1) * 2 > t->cap) { /* at most half full: probes stay short */
            refused(t);
            return -1;
        }
        uint32_t j = home_of(p, t->cap);
        while (t->slots[j].prefix)
            j = (j + 1) & (t->cap - 1);
        e = &t->slots[j];
        *e = (struct srv_subs_entry){.prefix = p, .count = 1, .one = cl};
        t->count++;
        return 0;
    }
    uint32_t room = e->cap ? e->cap : 1;
    HD_ASSERT(e->count >= 1 && e->count <= room);
    if (e->count == room) {
        uint32_t cap = room * 2 < SRV_SUBS_VEC_MIN ? SRV_SUBS_VEC_MIN : room * 2;
        struct srv_client **v = vec_get(t, cap);
        if (v == NULL) {
            refused(t);
            return -1;
        }
        memcpy(v, srv_subs_vec(e), e->count * sizeof(*v));
        if (e->cap)
            hd_slab_put(hd_slab_of(e->many), e->many);
        e->many = v;
        e->cap = cap;
    }
    srv_subs_vec(e)[e->count] = cl;
    return e->count++;
}

/* Backward-shift deletion of entry e (its vector already given back). */
static void subs_remove_entry(struct srv_subs *t, struct srv_subs_entry *e)
{
    HD_ASSERT(e >= t->slots && e < t->slots + t->cap && t->count > 0);
    uint32_t mask = t->cap - 1, hole = (uint32_t)(e - t->slots);
    for (uint32_t k = (hole + 1) & mask; t->slots[k].prefix; k = (k + 1) & mask) {
        if (((k - home_of(t->slots[k].prefix, t->cap)) & mask) >= ((k - hole) & mask)) {
            t->slots[hole] = t->slots[k];
            hole = k;
        }
    }
    t->slots[hole] = (struct srv_subs_entry){0};
    t->count--;
}

void srv_subs_entry_free(struct srv_subs_entry *e)
{
    if (e->cap) /* the pool of the shard that took it: this one */
        hd_slab_put(hd_slab_of(e->many), e->many);
    *e = (struct srv_subs_entry){0};
}

/* A list at most 4x its size: into the class below (kept as it is when that pool is empty). */
static void subs_shrink(struct srv_subs *t, struct srv_subs_entry *e)
{
    struct srv_client **v = e->many;
    if (e->count == 1) {
        e->one = v[0];
        e->cap = 0;
        hd_slab_put(hd_slab_of(v), v);
        return;
    }
    struct srv_client **n = vec_get(t, e->cap / 2);
    if (n == NULL)
        return;
    memcpy(n, v, e->count * sizeof(*n));
    hd_slab_put(hd_slab_of(v), v);
    e->many = n;
    e->cap /= 2;
}

/* Takes the subscriber at position at out of p's list (the last one moves into its place). */
static void subs_del(struct srv_subs *t, uint64_t p, uint32_t at)
{
    struct srv_subs_entry *e = subs_find(t, p);
    HD_ASSERT(e != NULL && at < e->count); /* the keyset and the index move together */
    struct srv_client **v = srv_subs_vec(e);
    if (--e->count == 0) {
        srv_subs_entry_free(e);
        subs_remove_entry(t, e);
        return;
    }
    if (at != e->count) {
        struct srv_client *moved = v[e->count];
        v[at] = moved;
        int64_t j = ks_find(&moved->sources, p);
        HD_ASSERT(j >= 0 && ks_pos(&moved->sources)[j] == e->count);
        ks_pos(&moved->sources)[j] = at;
    }
    if (e->cap > SRV_SUBS_VEC_MIN && e->count <= e->cap / 4)
        subs_shrink(t, e);
}

/* ---------------------------------------------------------------- the two together */

/* Not the source of its last packet (srv_source_subscribe, server_relay.h: that one is the
 * common case, and costs no probe). */
void srv_source_subscribe_new(struct srv_client *cl, uint64_t p)
{
    struct srv_keyset *ks = &cl->sources;
    HD_ASSERT(p != 0 && p != ks->last);
    struct srv_subs *t = &cl->ds->subs;
    if (ks_find(ks, p) >= 0) {
        ks->last = p; /* known already */
        return;
    }
    int64_t j = ks_add(t, ks, p);
    if (j < 0)
        return; /* full (counted at every packet, as before the memo) */
    int64_t at = subs_add(t, p, cl);
    if (at < 0) {
        ks_remove_at(ks, (uint32_t)j); /* not subscribed at all */
        return;
    }
    ks_pos(ks)[j] = (uint32_t)at;
    ks->last = p;
}

/* Out of every subscriber list of this shard (the keyset stays as it is). */
static void ks_unsubscribe(struct srv_subs *t, struct srv_keyset *ks)
{
    uint32_t *pos = ks_pos(ks);
    for (uint32_t i = 0; i < ks->cap; i++)
        if (ks->slots[i])
            subs_del(t, ks->slots[i], pos[i]);
}

void srv_sources_drop(struct srv_client *cl)
{
    struct srv_keyset *ks = &cl->sources;
    if (ks->travelling) {
        srv_sources_forget(cl);
        return;
    }
    if (ks->slots) {
        ks_unsubscribe(&cl->ds->subs, ks);
        ks_block_put(&cl->ds->subs, ks);
    }
    *ks = (struct srv_keyset){0};
}

bool srv_sources_take(struct srv_shard *ds, const uint8_t key[DERP_KEY_LEN],
                      struct srv_subs_entry *out)
{
    uint64_t p = srv_source_prefix(key);
    struct srv_subs_entry *e = subs_find(&ds->subs, p);
    if (e == NULL)
        return false;
    *out = *e;
    subs_remove_entry(&ds->subs, e);
    struct srv_client **v = srv_subs_vec(out);
    for (uint32_t i = 0; i < out->count; i++) {
        int64_t j = ks_find(&v[i]->sources, p);
        HD_ASSERT(j >= 0); /* a subscriber has the key in its keyset */
        ks_remove_at(&v[i]->sources, (uint32_t)j);
    }
    return true;
}

/* ---------------------------------------------------------------- a connection that moves */

bool srv_source_has(const struct srv_client *cl, const uint8_t key[DERP_KEY_LEN])
{
    return ks_find(&cl->sources, srv_source_prefix(key)) >= 0;
}

/* A move, not a packet: the keyset leaves this shard's pools as a heap list of its prefixes. */
void srv_sources_detach(struct srv_client *cl)
{
    struct srv_keyset *ks = &cl->sources;
    if (ks->slots == NULL || ks->travelling)
        return;
    struct srv_subs *t = &cl->ds->subs;
    ks_unsubscribe(t, ks);
    uint64_t *list = ks->count ? malloc(ks->count * sizeof(*list)) : NULL;
    uint32_t n = 0;
    for (uint32_t i = 0; list && i < ks->cap; i++)
        if (ks->slots[i])
            list[n++] = ks->slots[i];
    HD_ASSERT(list == NULL || n == ks->count);
    ks_block_put(t, ks); /* no memory for the list: the sources are lost (their PeerGone) */
    *ks = (struct srv_keyset){.slots = list, .count = n, .travelling = list != NULL};
}

void srv_sources_forget(struct srv_client *cl)
{
    struct srv_keyset *ks = &cl->sources;
    HD_ASSERT(ks->travelling || ks->slots == NULL); /* in no shard's pool */
    free(ks->slots);
    *ks = (struct srv_keyset){0};
}

void srv_sources_attach(struct srv_client *cl)
{
    struct srv_keyset *ks = &cl->sources;
    struct srv_subs *t = &cl->ds->subs;
    if (ks->travelling) { /* into this shard's pools (a full one: the rest are lost) */
        struct srv_keyset travel = *ks;
        *ks = (struct srv_keyset){0};
        for (uint32_t i = 0; i < travel.count; i++)
            (void)ks_add(t, ks, travel.slots[i]);
        free(travel.slots);
    }
    if (ks->slots == NULL)
        return;
    uint32_t *pos = ks_pos(ks);
    for (uint32_t i = 0; i < ks->cap; i++) {
        if (!ks->slots[i])
            continue;
        int64_t at = subs_add(t, ks->slots[i], cl);
        if (at < 0) { /* the index is full: forget every source (their PeerGone is lost) */
            for (uint32_t k = 0; k < i; k++)
                if (ks->slots[k])
                    subs_del(t, ks->slots[k], pos[k]);
            ks_block_put(t, ks);
            *ks = (struct srv_keyset){0};
            return;
        }
        pos[i] = (uint32_t)at;
    }
}

/* ---------------------------------------------------------------- an upgrade's hand-over */

uint32_t srv_sources_list(const struct srv_client *cl, uint64_t *out, uint32_t max)
{
    const struct srv_keyset *ks = &cl->sources;
    uint32_t n = 0;
    if (ks->travelling) {
        for (; n < ks->count && n < max; n++)
            out[n] = ks->slots[n];
        return n;
    }
    for (uint32_t i = 0; ks->slots && i < ks->cap && n < max; i++)
        if (ks->slots[i])
            out[n++] = ks->slots[i];
    return n;
}

void srv_sources_restore(struct srv_client *cl, const uint64_t *prefixes, uint32_t count)
{
    for (uint32_t i = 0; i < count; i++)
        if (prefixes[i] != 0)
            (void)ks_add(&cl->ds->subs, &cl->sources, prefixes[i]); /* full: that one is lost */
    srv_sources_attach(cl);
}
