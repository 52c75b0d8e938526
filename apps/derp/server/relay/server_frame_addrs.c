/* server_frame_addrs.c - the frames held per source address (issue 16 item 2): many
 * connections from one address together get a bounded share of a shard's pools, as one
 * connection does (server_frames.c checks both). Each shard keeps a table, address -> entry,
 * of the addresses whose connections have accounts here. It is looked up once per account (at
 * activation, and on the shard a placed client moves to), never per packet: the account points
 * at its entry, and the release hook, which may run after the relay's shard state is gone,
 * touches only that. So an entry no account points at stays in the table, free to reuse, until
 * the table is next rebuilt (an address that comes back meanwhile finds its entry again). An
 * IPv6 address counts by its /64 (one host commonly has a whole /64; IPv4-mapped addresses by
 * their IPv4 address). Pointers in an open-addressed table keyed by srv_hash; a rebuild drops
 * the free entries and doubles the table while that leaves it over 1/4 full (at a login, not
 * per packet). An entry that cannot be made (no memory) is the shard's spill entry, shared by
 * every such connection. Runs on the accounts' shard. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "relay/server_frames.h"

/* The tables' key of an address (the pre-login caps use it too). */
void srv_addr_key(const struct net_addr *a, uint8_t ip[16])
{
    memset(ip, 0, 16);
    if (a->len && a->sa.sa_family == AF_INET6) {
        memcpy(ip, &a->in6.sin6_addr, 16);
    } else if (a->len && a->sa.sa_family == AF_INET) {
        ip[10] = ip[11] = 0xff;
        memcpy(ip + 12, &a->in4.sin_addr, 4);
    }
}

int srv_frame_addrs_init(struct srv_shard *ds)
{
    struct srv_frames *fr = &ds->frames;
    int rc = hd_slab_create(ds->s, "frame addrs", sizeof(struct srv_frame_addr),
                            SRV_ACCOUNTS_MAX + 1, &fr->addrs);
    if (rc < 0)
        return rc;
    fr->spill = hd_slab_get(fr->addrs); /* freed with the slab, as every entry */
    fr->slots = calloc(SRV_FRAME_ADDRS_INITIAL, sizeof(*fr->slots));
    if (fr->spill == NULL || fr->slots == NULL)
        return -ENOMEM;
    *fr->spill = (struct srv_frame_addr){0};
    fr->cap = SRV_FRAME_ADDRS_INITIAL;
    return 0;
}

void srv_frame_addrs_fini(struct srv_shard *ds)
{
    free(ds->frames.slots); /* the entries live on in their slab for frames still out */
    ds->frames.slots = NULL;
}

/* Entries accounts point at: O(slots), for a rebuild or /debug/varz only. */
static uint32_t live_of(const struct srv_frames *fr)
{
    uint32_t live = 0;
    for (uint32_t i = 0; i < fr->cap; i++)
        live += fr->slots[i] && fr->slots[i]->accounts;
    return live;
}

uint32_t srv_frame_addrs_live(const struct srv_shard *ds)
{
    return live_of(&ds->frames);
}

static void key_of(const struct net_addr *peer, uint8_t ip[16])
{
    srv_addr_key(peer, ip);
    static const uint8_t v4_mapped[12] = {[10] = 0xff, [11] = 0xff};
    if (memcmp(ip, v4_mapped, sizeof(v4_mapped)) != 0)
        memset(ip + 8, 0, 8); /* IPv6: the /64 */
}

static uint32_t home_of(const struct srv_frames *fr, const uint8_t ip[16])
{
    return (uint32_t)srv_hash(ip, 16) & (fr->cap - 1);
}

static void table_put(struct srv_frame_addr **slots, uint32_t cap, uint32_t home,
                      struct srv_frame_addr *e)
{
    uint32_t i = home;
    for (uint32_t probes = 0; slots[i]; i = (i + 1) & (cap - 1))
        HD_ASSERT(++probes < cap); /* at most half full */
    slots[i] = e;
}

/* Into a new table of at least cap slots, without the free entries; -ENOMEM keeps the old. */
static int table_rebuild(struct srv_frames *fr, uint32_t cap)
{
    uint32_t live = live_of(fr);
    while ((live + 1) * 4 > cap)
        cap *= 2;
    struct srv_frame_addr **slots = calloc(cap, sizeof(*slots));
    if (slots == NULL)
        return -ENOMEM;
    struct srv_frames n = {.cap = cap};
    for (uint32_t i = 0; i < fr->cap; i++) {
        struct srv_frame_addr *e = fr->slots[i];
        if (e == NULL)
            continue;
        if (e->accounts == 0) {
            hd_slab_put(fr->addrs, e);
            continue;
        }
        table_put(slots, cap, home_of(&n, e->ip), e);
        n.count++;
    }
    HD_ASSERT(n.count == live);
    free(fr->slots);
    fr->slots = slots;
    fr->cap = cap;
    fr->count = n.count;
    return 0;
}

static struct srv_frame_addr *spill(struct srv_shard *ds)
{
    ds->ctr.frame_addrs_spilled++;
    ds->frames.spill->accounts++;
    return ds->frames.spill;
}

struct srv_frame_addr *srv_frame_addr_enter(struct srv_shard *ds, const struct net_addr *peer)
{
    struct srv_frames *fr = &ds->frames;
    uint8_t ip[16];
    key_of(peer, ip);
    uint32_t i = home_of(fr, ip);
    for (uint32_t probes = 0; fr->slots[i]; i = (i + 1) & (fr->cap - 1)) {
        HD_ASSERT(++probes < fr->cap);
        struct srv_frame_addr *e = fr->slots[i];
        if (memcmp(e->ip, ip, 16) == 0) {
            e->accounts++;
            return e;
        }
    }
    if ((fr->count + 1) * 2 > fr->cap) {
        if (table_rebuild(fr, fr->cap) < 0)
            return spill(ds);
        i = home_of(fr, ip);
    }
    struct srv_frame_addr *e = hd_slab_get(fr->addrs);
    if (e == NULL)
        return spill(ds);
    *e = (struct srv_frame_addr){.accounts = 1};
    memcpy(e->ip, ip, 16);
    table_put(fr->slots, fr->cap, i, e);
    fr->count++;
    return e;
}
