/* server_sources.c - who hears PeerGone when a key leaves (spec §6.7). A connection subscribes
 * to a source key once a RecvPacket from it was written to it. Each connection keeps its
 * sources (struct srv_keyset, at most SRV_SOURCES_MAX), and each shard keeps the reverse: per
 * source key, the connections of this shard subscribed to it (struct srv_subs), so that a
 * departure touches only them. The two are kept in step: every keyset slot remembers where its
 * connection sits in the key's subscriber list, so a closing connection leaves every list in
 * O(1) per subscription. Keys are remembered by a 64-bit prefix on both sides: a collision makes
 * one PeerGone go missing or arrive for a key never heard from — harmless. Runs on one shard. */
#include <stdlib.h>
#include <string.h>

#include "server.h"

static uint64_t key_prefix(const uint8_t key[DERP_KEY_LEN])
{
    uint64_t h;
    memcpy(&h, key + 16, sizeof(h)); /* not the shard bits (bytes 0..8) */
    return h ? h : 1;
}

static uint32_t home_of(uint64_t p, uint32_t cap)
{
    return (uint32_t)(p * 0x9E3779B97F4A7C15ull >> 32) & (cap - 1);
}

/* ---------------------------------------------------------------- a connection's keyset */

/* One block of cap prefixes, then cap positions (the connection's index in that key's
 * subscriber list): 12 bytes a slot. */
static uint32_t *ks_pos(const struct srv_keyset *ks)
{
    return (uint32_t *)(ks->slots + ks->cap);
}

static bool ks_grow(struct srv_keyset *ks)
{
    uint32_t cap = ks->cap ? ks->cap * 2 : 16;
    uint64_t *slots = calloc(cap, sizeof(uint64_t) + sizeof(uint32_t));
    if (slots == NULL)
        return false;
    uint32_t *pos = (uint32_t *)(slots + cap), *old_pos = ks_pos(ks);
    for (uint32_t i = 0; i < ks->cap; i++) {
        if (!ks->slots[i])
            continue;
        uint32_t j = home_of(ks->slots[i], cap);
        while (slots[j])
            j = (j + 1) & (cap - 1);
        slots[j] = ks->slots[i];
        pos[j] = old_pos[i];
    }
    free(ks->slots);
    ks->slots = slots;
    ks->cap = cap;
    return true;
}

/* The slot of p, or -1. */
static int64_t ks_find(const struct srv_keyset *ks, uint64_t p)
{
    if (!ks->count)
        return -1;
    uint32_t mask = ks->cap - 1;
    for (uint32_t j = home_of(p, ks->cap); ks->slots[j]; j = (j + 1) & mask)
        if (ks->slots[j] == p)
            return j;
    return -1;
}

/* The new slot of p; -1 when it was there already or the set is full. */
static int64_t ks_add(struct srv_keyset *ks, uint64_t p)
{
    if (ks->cap && ks->count < ks->cap / 2) {
        /* room: probe below */
    } else if (ks->count >= SRV_SOURCES_MAX || !ks_grow(ks)) {
        return -1;
    }
    uint32_t j = home_of(p, ks->cap);
    while (ks->slots[j]) {
        if (ks->slots[j] == p)
            return -1;
        j = (j + 1) & (ks->cap - 1);
    }
    ks->slots[j] = p;
    ks->count++;
    return j;
}

/* Backward-shift deletion of slot j keeps every probe chain unbroken. */
static void ks_remove_at(struct srv_keyset *ks, uint32_t j)
{
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

static bool subs_grow(struct srv_subs *t)
{
    uint32_t cap = t->cap ? t->cap * 2 : 64;
    struct srv_subs_entry *slots = calloc(cap, sizeof(*slots));
    if (slots == NULL)
        return false;
    for (uint32_t i = 0; i < t->cap; i++) {
        if (!t->slots[i].prefix)
            continue;
        uint32_t j = home_of(t->slots[i].prefix, cap);
        while (slots[j].prefix)
            j = (j + 1) & (cap - 1);
        slots[j] = t->slots[i];
    }
    free(t->slots);
    t->slots = slots;
    t->cap = cap;
    return true;
}

/* Appends cl to p's subscribers: its position there, or -1 (out of memory). */
static int64_t subs_add(struct srv_subs *t, uint64_t p, struct srv_client *cl)
{
    struct srv_subs_entry *e = subs_find(t, p);
    if (e == NULL) {
        if ((t->count + 1) * 2 > t->cap && !subs_grow(t))
            return -1;
        uint32_t j = home_of(p, t->cap);
        while (t->slots[j].prefix)
            j = (j + 1) & (t->cap - 1);
        e = &t->slots[j];
        *e = (struct srv_subs_entry){.prefix = p, .count = 1, .one = cl};
        t->count++;
        return 0;
    }
    uint32_t room = e->cap ? e->cap : 1;
    if (e->count == room) {
        uint32_t cap = room * 2 < 4 ? 4 : room * 2;
        struct srv_client **v = malloc(cap * sizeof(*v));
        if (v == NULL)
            return -1;
        memcpy(v, srv_subs_vec(e), e->count * sizeof(*v));
        if (e->cap)
            free(e->many);
        e->many = v;
        e->cap = cap;
    }
    srv_subs_vec(e)[e->count] = cl;
    return e->count++;
}

/* Backward-shift deletion of entry e (its vector already freed). */
static void subs_remove_entry(struct srv_subs *t, struct srv_subs_entry *e)
{
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
    if (e->cap)
        free(e->many);
    *e = (struct srv_subs_entry){0};
}

/* Takes the subscriber at position at out of p's list (the last one moves into its place). */
static void subs_del(struct srv_subs *t, uint64_t p, uint32_t at)
{
    struct srv_subs_entry *e = subs_find(t, p);
    if (e == NULL || at >= e->count)
        return; /* cannot happen: the keyset and the index move together */
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
        if (j >= 0)
            ks_pos(&moved->sources)[j] = at;
    }
    if (e->cap > 4 && e->count <= e->cap / 4) { /* shrink: a list is at most 4x its size */
        if (e->count == 1) {
            struct srv_client *one = v[0];
            free(e->many);
            e->one = one;
            e->cap = 0;
        } else {
            struct srv_client **n = realloc(e->many, e->cap / 2 * sizeof(*n));
            if (n) {
                e->many = n;
                e->cap /= 2;
            }
        }
    }
}

void srv_subs_fini(struct srv_subs *t)
{
    for (uint32_t i = 0; i < t->cap; i++)
        srv_subs_entry_free(&t->slots[i]);
    free(t->slots);
    *t = (struct srv_subs){0};
}

/* ---------------------------------------------------------------- the two together */

void srv_source_subscribe(struct srv_client *cl, const uint8_t key[DERP_KEY_LEN])
{
    uint64_t p = key_prefix(key);
    int64_t j = ks_add(&cl->sources, p);
    if (j < 0)
        return; /* known already (the common case), or SRV_SOURCES_MAX reached */
    int64_t at = subs_add(&cl->ds->subs, p, cl);
    if (at < 0) {
        ks_remove_at(&cl->sources, (uint32_t)j); /* out of memory: not subscribed at all */
        return;
    }
    ks_pos(&cl->sources)[j] = (uint32_t)at;
}

void srv_sources_drop(struct srv_client *cl)
{
    srv_sources_detach(cl); /* out of every subscriber list, then the keyset goes */
    free(cl->sources.slots);
    cl->sources = (struct srv_keyset){0};
}

bool srv_sources_take(struct srv_shard *ds, const uint8_t key[DERP_KEY_LEN],
                      struct srv_subs_entry *out)
{
    uint64_t p = key_prefix(key);
    struct srv_subs_entry *e = subs_find(&ds->subs, p);
    if (e == NULL)
        return false;
    *out = *e;
    subs_remove_entry(&ds->subs, e);
    struct srv_client **v = srv_subs_vec(out);
    for (uint32_t i = 0; i < out->count; i++) {
        int64_t j = ks_find(&v[i]->sources, p);
        if (j >= 0)
            ks_remove_at(&v[i]->sources, (uint32_t)j);
    }
    return true;
}

/* ---------------------------------------------------------------- a connection that moves */

bool srv_source_has(const struct srv_client *cl, const uint8_t key[DERP_KEY_LEN])
{
    return ks_find(&cl->sources, key_prefix(key)) >= 0;
}

void srv_sources_detach(struct srv_client *cl)
{
    struct srv_keyset *ks = &cl->sources;
    if (ks->slots == NULL)
        return;
    uint32_t *pos = ks_pos(ks);
    for (uint32_t i = 0; i < ks->cap; i++)
        if (ks->slots[i])
            subs_del(&cl->ds->subs, ks->slots[i], pos[i]);
}

void srv_sources_attach(struct srv_client *cl)
{
    struct srv_keyset *ks = &cl->sources;
    if (ks->slots == NULL)
        return;
    uint32_t *pos = ks_pos(ks);
    for (uint32_t i = 0; i < ks->cap; i++) {
        if (!ks->slots[i])
            continue;
        int64_t at = subs_add(&cl->ds->subs, ks->slots[i], cl);
        if (at < 0) { /* out of memory: forget every source (their PeerGone is lost) */
            for (uint32_t k = 0; k < i; k++)
                if (ks->slots[k])
                    subs_del(&cl->ds->subs, ks->slots[k], pos[k]);
            free(ks->slots);
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
    for (uint32_t i = 0; ks->slots && i < ks->cap && n < max; i++)
        if (ks->slots[i])
            out[n++] = ks->slots[i];
    return n;
}

void srv_sources_restore(struct srv_client *cl, const uint64_t *prefixes, uint32_t count)
{
    for (uint32_t i = 0; i < count; i++)
        if (prefixes[i] != 0)
            (void)ks_add(&cl->sources, prefixes[i]); /* out of memory: that one is lost */
    srv_sources_attach(cl);
}
