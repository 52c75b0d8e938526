/* server_prelogin.c - connections that have not logged in yet (TLS handshake, HTTP head, DERP
 * login; also HTTP-only requests such as probes): each shard counts them, in all and per source
 * address, and refuses a new connection over either cap, so a client that opens connections
 * and drips bytes into them cannot hold every fd (issue 16; derper has no such cap, only its
 * deadlines). The per-address counts live in an open-addressed table keyed by srv_hash, sized
 * at twice the shard cap so it is never more than half full. Runs on the accepting shard, which
 * is where every pre-login phase happens (a client moves to its owner only after ClientInfo). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "server.h"

struct srv_prelogin_slot {
    uint8_t ip[16]; /* IPv4 as ::ffff:a.b.c.d */
    uint32_t count; /* 0: free */
};

int srv_prelogin_init(struct srv_shard *ds)
{
    uint32_t cap = 1;
    while (cap < 2 * ds->cfg->prelogin_shard_max)
        cap <<= 1;
    ds->prelogin.slots = calloc(cap, sizeof(*ds->prelogin.slots));
    if (ds->prelogin.slots == NULL)
        return -ENOMEM;
    ds->prelogin.mask = cap - 1;
    return 0;
}

void srv_prelogin_fini(struct srv_shard *ds)
{
    free(ds->prelogin.slots);
    ds->prelogin.slots = NULL;
}

/* The slot of ip, or the free slot where it would go. */
static uint32_t slot_find(const struct srv_prelogin *p, const uint8_t ip[16])
{
    uint32_t i = (uint32_t)srv_hash(ip, 16) & p->mask;
    for (uint32_t probes = 0;; probes++, i = (i + 1) & p->mask) {
        HD_ASSERT(probes <= p->mask); /* at most half full: a free slot is always there */
        const struct srv_prelogin_slot *s = &p->slots[i];
        if (s->count == 0 || memcmp(s->ip, ip, 16) == 0)
            return i;
    }
}

bool srv_prelogin_enter(struct srv_shard *ds, const struct net_addr *peer)
{
    struct srv_prelogin *p = &ds->prelogin;
    if (p->count >= ds->cfg->prelogin_shard_max) {
        ds->ctr.prelogin_refused_shard++;
        hd_log_rl(HD_LOG_WARN,
                  "accept: %u connections not logged in on this shard (the cap, "
                  "--prelogin-max): refused one",
                  p->count);
        return false;
    }
    uint8_t ip[16];
    srv_addr_key(peer, ip);
    uint32_t i = slot_find(p, ip);
    struct srv_prelogin_slot *s = &p->slots[i];
    if (s->count >= ds->cfg->prelogin_addr_max) {
        ds->ctr.prelogin_refused_addr++;
        hd_log_rl(HD_LOG_WARN,
                  "accept: %u connections not logged in from one address on this "
                  "shard (the cap, --prelogin-per-addr-max): refused one",
                  s->count);
        return false;
    }
    if (s->count == 0)
        memcpy(s->ip, ip, 16);
    s->count++;
    p->count++;
    return true;
}

void srv_prelogin_leave(struct srv_shard *ds, const struct net_addr *peer)
{
    struct srv_prelogin *p = &ds->prelogin;
    uint8_t ip[16];
    srv_addr_key(peer, ip);
    uint32_t i = slot_find(p, ip);
    HD_ASSERT(p->count > 0 && p->slots[i].count > 0); /* left only after it entered */
    p->count--;
    if (--p->slots[i].count > 0)
        return;
    /* Backward-shift deletion: later entries of the probe chain move into the hole. */
    uint32_t hole = i;
    for (uint32_t k = (i + 1) & p->mask; p->slots[k].count; k = (k + 1) & p->mask) {
        uint32_t home = (uint32_t)srv_hash(p->slots[k].ip, 16) & p->mask;
        if (((k - home) & p->mask) >= ((k - hole) & p->mask)) {
            p->slots[hole] = p->slots[k];
            hole = k;
        }
    }
    p->slots[hole].count = 0;
}

bool srv_prelogin_move(struct srv_shard *ds, const struct net_addr *from, const struct net_addr *to)
{
    struct srv_prelogin *p = &ds->prelogin;
    srv_prelogin_leave(ds, from);
    uint8_t ip[16];
    srv_addr_key(to, ip);
    struct srv_prelogin_slot *s = &p->slots[slot_find(p, ip)];
    if (s->count == 0)
        memcpy(s->ip, ip, 16);
    s->count++;
    p->count++; /* back to what it was: the shard cap was checked at accept */
    if (s->count <= ds->cfg->prelogin_addr_max)
        return false;
    ds->ctr.prelogin_refused_addr++;
    return true;
}
