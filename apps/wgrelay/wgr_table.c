/* wgr_table.c - where each WireGuard message goes, decided from what the relay learned.
 *
 * Handshake initiation (sender index I): its MAC1 names the responder T (a registered peer);
 * the relay keeps "I is waiting, from S, for T" (pending) and forwards the message to T's
 * address. Response (sender J, receiver I): its MAC1 names the initiator A; the pending entry I
 * names the responder B = T. If the pair is allowed, I becomes a session index owned by A and J
 * one owned by B, and the relay now knows both peers' addresses (S is A's, the response's source
 * is B's). Cookie replies and data go by receiver index to the owner's current address. Data to
 * an index comes from its partner: a new source address becomes the partner's address when the
 * counter moves past what was seen (roaming); an old counter from a new address is a replay and
 * is dropped. Entries age out on WireGuard's timers (wgr.h). The interface: one datagram and its
 * source in, a verdict out (up to WGR_CANDIDATES_MAX destinations, or one drop reason). The
 * index table is open addressing with linear probing and backward-shift deletion, sized at
 * create, swept once a second (wgr_table_sweep).
 *
 * The relay holds no keys: MAC1 uses public keys only, so it says "addressed to a registered
 * peer", not "sent by one". What decides is the pair check on the response (whose MAC1 names the
 * initiator) and WireGuard's own crypto at the two ends. */
#include <stdlib.h>
#include <string.h>

#include "wgr.h"

enum { SLOT_FREE = 0, SLOT_PENDING, SLOT_LIVE };

struct wgr_index {
    uint32_t idx;
    uint8_t kind;
    uint16_t owner;        /* live: the peer that chose idx (messages to idx go to it) */
    uint16_t partner;      /* live: the peer that sends to idx; pending: the responder */
    uint64_t counter_next; /* live: one past the highest data counter accepted */
    uint64_t created_ms;
    struct wgr_addr from; /* pending: the initiation's source */
};

struct wgr_peer_state {
    struct wgr_addr addr; /* len 0: not known */
    uint64_t seen_ms;
    uint32_t indexes;
    uint64_t rate_ms, rate_tokens; /* the data it sends: bytes it may still send (token bucket) */
};

struct wgr_candidate {
    struct wgr_addr addr;
    uint64_t ms;
};

struct wgr_rate {
    uint8_t ip[18]; /* address, and port when proven */
    uint64_t last_ms;
    uint64_t tokens_milli;
};

struct wgr_table {
    const struct wgr_peers *peers;
    struct wgr_peer_state *ps; /* [WGR_PEERS_MAX] */
    struct wgr_index *slots;   /* [mask + 1] */
    unsigned mask, live_max, pending_max;
    unsigned live, pending;
    struct wgr_candidate cand[WGR_CANDIDATES_MAX];
    unsigned cand_next;
    struct wgr_rate *rate; /* [WGR_RATE_SLOTS] */
    uint32_t rate_per_s, rate_burst;
    uint64_t peer_bytes_per_s, peer_burst_bytes; /* 0: no per-peer data limit */
    struct wgr_cookies cookies;
    bool cookie_replies; /* over the rate: answer with a cookie reply (else drop) */
};

const char *const wgr_drop_names[WGR_DROP_COUNT] = {
#define WGR_DROP_NAME(n) #n,
    WGR_DROPS(WGR_DROP_NAME)
#undef WGR_DROP_NAME
};

bool wgr_addr_eq(const struct wgr_addr *a, const struct wgr_addr *b)
{
    if (a->len != b->len || a->sa.sa_family != b->sa.sa_family)
        return false;
    if (a->sa.sa_family == AF_INET)
        return a->in4.sin_port == b->in4.sin_port &&
               a->in4.sin_addr.s_addr == b->in4.sin_addr.s_addr;
    if (a->sa.sa_family == AF_INET6)
        return a->in6.sin6_port == b->in6.sin6_port &&
               memcmp(&a->in6.sin6_addr, &b->in6.sin6_addr, 16) == 0;
    return false;
}

struct wgr_table *wgr_table_create(const struct wgr_peers *peers, unsigned slots)
{
    HD_ASSERT(slots >= 16 && HD_IS_POW2(slots));
    struct wgr_table *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return NULL;
    t->mask = slots - 1;
    t->live_max = slots / 4 * 3;
    t->pending_max = WGR_PENDING_MAX < t->live_max / 2 ? WGR_PENDING_MAX : t->live_max / 2;
    t->ps = calloc(WGR_PEERS_MAX, sizeof(*t->ps));
    t->slots = calloc(slots, sizeof(*t->slots));
    t->rate = calloc(WGR_RATE_SLOTS, sizeof(*t->rate));
    if (!t->ps || !t->slots || !t->rate) {
        wgr_table_destroy(t);
        return NULL;
    }
    t->peers = peers;
    t->rate_per_s = WGR_RATE_PER_S;
    t->rate_burst = WGR_RATE_BURST;
    return t;
}

void wgr_table_destroy(struct wgr_table *t)
{
    if (t == NULL)
        return;
    free(t->ps);
    free(t->slots);
    free(t->rate);
    free(t);
}

void wgr_table_set_peer_rate(struct wgr_table *t, uint64_t bytes_per_s, uint64_t burst_bytes)
{
    t->peer_bytes_per_s = bytes_per_s;
    t->peer_burst_bytes = burst_bytes;
}

/* A peer's data within its rate (a token bucket of bytes, refilled by the millisecond). */
static bool peer_rate_ok(struct wgr_table *t, struct wgr_peer_state *p, size_t len, uint64_t now)
{
    if (t->peer_bytes_per_s == 0)
        return true;
    if (p->rate_ms == 0 || now < p->rate_ms) {
        p->rate_tokens = t->peer_burst_bytes;
    } else {
        uint64_t add = (now - p->rate_ms) * t->peer_bytes_per_s / 1000u;
        p->rate_tokens =
            p->rate_tokens + add > t->peer_burst_bytes ? t->peer_burst_bytes : p->rate_tokens + add;
    }
    p->rate_ms = now ? now : 1;
    if (p->rate_tokens < len)
        return false;
    p->rate_tokens -= len;
    return true;
}

void wgr_table_set_cookies(struct wgr_table *t, bool on)
{
    t->cookie_replies = on;
}

void wgr_table_set_rate(struct wgr_table *t, uint32_t per_s, uint32_t burst)
{
    t->rate_per_s = per_s;
    t->rate_burst = burst ? burst : 1;
}

/* ---------------------------------------------------------------- the index table */

static unsigned home(const struct wgr_table *t, uint32_t idx)
{
    return (unsigned)((idx * 2654435769u) >> 16) & t->mask;
}

/* The slot holding idx, or NULL; *free_out (if given) gets the first free slot of its run. */
static struct wgr_index *find(struct wgr_table *t, uint32_t idx, struct wgr_index **free_out)
{
    for (unsigned i = home(t, idx), n = 0; n <= t->mask; i = (i + 1) & t->mask, n++) {
        struct wgr_index *x = &t->slots[i];
        if (x->kind == SLOT_FREE) {
            if (free_out)
                *free_out = x;
            return NULL;
        }
        if (x->idx == idx)
            return x;
    }
    HD_ASSERT(!"the table's load is bounded below its size");
    return NULL;
}

/* Remove slot x (linear probing: later entries of the run move back). */
static void slot_remove(struct wgr_table *t, struct wgr_index *x)
{
    if (x->kind == SLOT_LIVE) {
        t->live--;
        if (x->owner < WGR_PEERS_MAX && t->ps[x->owner].indexes > 0)
            t->ps[x->owner].indexes--;
    } else if (x->kind == SLOT_PENDING) {
        t->pending--;
    }
    unsigned i = (unsigned)(x - t->slots), j = i;
    for (;;) {
        j = (j + 1) & t->mask;
        if (t->slots[j].kind == SLOT_FREE)
            break;
        unsigned k = home(t, t->slots[j].idx);
        /* j's entry may move to i when its home is not in (i, j] (cyclically). */
        bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
        if (!stays) {
            t->slots[i] = t->slots[j];
            i = j;
        }
    }
    memset(&t->slots[i], 0, sizeof(t->slots[i]));
}

/* ---------------------------------------------------------------- peers' addresses */

static bool addr_known(const struct wgr_table *t, unsigned p, uint64_t now)
{
    return t->ps[p].addr.len > 0 && now - t->ps[p].seen_ms <= WGR_ADDR_AGE_MS;
}

static unsigned peer_by_addr(const struct wgr_table *t, const struct wgr_addr *a, uint64_t now)
{
    for (unsigned i = 0; i < t->peers->count; i++)
        if (addr_known(t, i, now) && wgr_addr_eq(&t->ps[i].addr, a))
            return i;
    return WGR_PEER_NONE;
}

static void learn(struct wgr_table *t, unsigned p, const struct wgr_addr *a, uint64_t now)
{
    t->ps[p].addr = *a;
    t->ps[p].seen_ms = now;
}

bool wgr_table_peer_addr(const struct wgr_table *t, unsigned peer, struct wgr_addr *out)
{
    if (peer >= t->peers->count || t->ps[peer].addr.len == 0)
        return false;
    *out = t->ps[peer].addr;
    return true;
}

/* ---------------------------------------------------------------- per-source handshake rate */

/* A source's initiations within the rate: per IP address, or per IP address and port for a
 * source that proved it receives there (a valid MAC2: a NAT's many peers behind one address each
 * get their own bucket). */
static bool rate_ok(struct wgr_table *t, const struct wgr_addr *from, bool proven, uint64_t now)
{
    if (t->rate_per_s == 0)
        return true;
    uint8_t ip[18] = {0};
    if (from->sa.sa_family == AF_INET) {
        memcpy(ip, &from->in4.sin_addr, 4);
        if (proven)
            memcpy(ip + 16, &from->in4.sin_port, 2);
    } else {
        memcpy(ip, &from->in6.sin6_addr, 16);
        if (proven)
            memcpy(ip + 16, &from->in6.sin6_port, 2);
    }
    uint32_t h = 2166136261u;
    for (unsigned i = 0; i < sizeof(ip); i++)
        h = (h ^ ip[i]) * 16777619u;
    struct wgr_rate *r = &t->rate[h & (WGR_RATE_SLOTS - 1)];
    uint64_t cap = (uint64_t)t->rate_burst * 1000u;
    if (memcmp(r->ip, ip, sizeof(ip)) != 0 || r->last_ms == 0) {
        memcpy(r->ip, ip, sizeof(ip));
        r->tokens_milli = cap;
    } else {
        uint64_t add = (now - r->last_ms) * t->rate_per_s;
        r->tokens_milli = r->tokens_milli + add > cap ? cap : r->tokens_milli + add;
    }
    r->last_ms = now ? now : 1;
    if (r->tokens_milli < 1000)
        return false;
    r->tokens_milli -= 1000;
    return true;
}

/* ---------------------------------------------------------------- candidates */

static void candidate_add(struct wgr_table *t, const struct wgr_addr *a, uint64_t now)
{
    for (unsigned i = 0; i < WGR_CANDIDATES_MAX; i++) {
        if (wgr_addr_eq(&t->cand[i].addr, a)) {
            t->cand[i].ms = now;
            return;
        }
    }
    t->cand[t->cand_next] = (struct wgr_candidate){.addr = *a, .ms = now};
    t->cand_next = (t->cand_next + 1) % WGR_CANDIDATES_MAX;
}

static void candidates_to(struct wgr_table *t, const struct wgr_addr *from, uint64_t now,
                          struct wgr_verdict *v)
{
    for (unsigned i = 0; i < WGR_CANDIDATES_MAX; i++) {
        const struct wgr_candidate *c = &t->cand[i];
        if (c->addr.len == 0 || now - c->ms > WGR_CANDIDATE_AGE_MS || wgr_addr_eq(&c->addr, from) ||
            peer_by_addr(t, &c->addr, now) != WGR_PEER_NONE)
            continue;
        v->to[v->count++] = c->addr;
    }
}

/* ---------------------------------------------------------------- the messages */

static int on_initiation(struct wgr_table *t, const uint8_t *p, const struct wgr_addr *from,
                         uint64_t now, struct wgr_verdict *v, struct wgr_stats *st)
{
    st->initiations++;
    wgr_cookies_rotate(&t->cookies, now);
    bool proven = wgr_mac2_ok(&t->cookies, p, from);
    st->cookie_proven += proven;
    if (!rate_ok(t, from, proven, now)) {
        /* Over the rate: as the responder under load would, answer with a cookie (for a
         * registered responder only; a proven source over its own bucket is just dropped). */
        unsigned to = proven ? WGR_PEER_NONE : wgr_peer_by_mac1(t->peers, p, WGR_INITIATION_MAC1);
        if (to != WGR_PEER_NONE && t->cookie_replies) {
            wgr_cookie_reply(&t->cookies, p, from, t->peers->peer[to].cookie_key, v->reply);
            v->cookie = true;
            st->cookies_sent++;
        }
        return WGR_DROP_rate_limited;
    }
    unsigned target = wgr_peer_by_mac1(t->peers, p, WGR_INITIATION_MAC1);
    if (target == WGR_PEER_NONE)
        return WGR_DROP_mac1_unknown;
    unsigned sender = peer_by_addr(t, from, now);
    if (sender == target)
        return WGR_DROP_self;
    if (sender != WGR_PEER_NONE && !wgr_pair_allowed(t->peers, sender, target))
        return WGR_DROP_pair_refused;
    uint32_t idx = wgr_le32(p + 4);
    struct wgr_index *free_slot = NULL, *x = find(t, idx, &free_slot);
    if (x && x->kind == SLOT_LIVE)
        return WGR_DROP_index_collision;
    if (x == NULL) {
        if (t->pending >= t->pending_max || t->live + t->pending >= t->live_max)
            return WGR_DROP_table_full;
        x = free_slot;
        t->pending++;
    }
    *x = (struct wgr_index){.idx = idx,
                            .kind = SLOT_PENDING,
                            .owner = (uint16_t)sender,
                            .partner = (uint16_t)target,
                            .created_ms = now,
                            .from = *from};
    if (addr_known(t, target, now)) {
        v->to[v->count++] = t->ps[target].addr;
    } else {
        candidates_to(t, from, now, v);
        st->broadcast_sends += v->count;
    }
    if (sender == WGR_PEER_NONE)
        candidate_add(t, from, now);
    if (v->count == 0) {
        slot_remove(t, x);
        return WGR_DROP_no_route;
    }
    return -1;
}

static struct wgr_index *live_insert(struct wgr_table *t, uint32_t idx, unsigned owner,
                                     unsigned partner, uint64_t now)
{
    struct wgr_index *free_slot = NULL, *x = find(t, idx, &free_slot);
    if (x) {
        if (x->kind != SLOT_LIVE || x->owner != owner || x->partner != partner)
            return NULL;
    } else {
        x = free_slot;
        t->live++;
        t->ps[owner].indexes++;
    }
    *x = (struct wgr_index){.idx = idx,
                            .kind = SLOT_LIVE,
                            .owner = (uint16_t)owner,
                            .partner = (uint16_t)partner,
                            .created_ms = now};
    return x;
}

static int on_response(struct wgr_table *t, const uint8_t *p, const struct wgr_addr *from,
                       uint64_t now, struct wgr_verdict *v, struct wgr_stats *st)
{
    st->responses++;
    uint32_t idx_b = wgr_le32(p + 4), idx_a = wgr_le32(p + 8);
    struct wgr_index *x = find(t, idx_a, NULL);
    if (x == NULL || x->kind != SLOT_PENDING)
        return WGR_DROP_no_session;
    unsigned a = wgr_peer_by_mac1(t->peers, p, WGR_RESPONSE_MAC1), b = x->partner;
    if (a == WGR_PEER_NONE)
        return WGR_DROP_response_mac1;
    if (a == b)
        return WGR_DROP_self;
    if (!wgr_pair_allowed(t->peers, a, b)) {
        slot_remove(t, x);
        return WGR_DROP_pair_refused;
    }
    if (t->ps[a].indexes >= WGR_INDEX_PER_PEER || t->ps[b].indexes >= WGR_INDEX_PER_PEER)
        return WGR_DROP_peer_full;
    struct wgr_index *y = find(t, idx_b, NULL);
    if (y != NULL && (y->kind != SLOT_LIVE || y->owner != b))
        return WGR_DROP_index_collision;
    if (y == NULL && t->live + t->pending >= t->live_max)
        return WGR_DROP_table_full;
    struct wgr_addr a_from = x->from;
    /* I (pending) becomes A's live index in place; then J is inserted (nothing moves). */
    x->kind = SLOT_LIVE;
    x->owner = (uint16_t)a;
    x->partner = (uint16_t)b;
    x->counter_next = 0;
    x->created_ms = now;
    t->pending--;
    t->live++;
    t->ps[a].indexes++;
    if (live_insert(t, idx_b, b, a, now) == NULL)
        return WGR_DROP_index_collision; /* unreachable: checked above */
    learn(t, a, &a_from, now);
    learn(t, b, from, now);
    st->sessions++;
    v->to[v->count++] = a_from;
    return -1;
}

static int on_cookie(struct wgr_table *t, const uint8_t *p, uint64_t now, struct wgr_verdict *v,
                     struct wgr_stats *st)
{
    st->cookies++;
    struct wgr_index *x = find(t, wgr_le32(p + 4), NULL);
    if (x == NULL)
        return WGR_DROP_no_session;
    if (x->kind == SLOT_PENDING) {
        v->to[v->count++] = x->from;
        return -1;
    }
    if (!addr_known(t, x->owner, now))
        return WGR_DROP_no_route;
    v->to[v->count++] = t->ps[x->owner].addr;
    return -1;
}

static int on_data(struct wgr_table *t, const uint8_t *p, size_t len, const struct wgr_addr *from,
                   uint64_t now, struct wgr_verdict *v, struct wgr_stats *st)
{
    st->data++;
    struct wgr_index *x = find(t, wgr_le32(p + 4), NULL);
    if (x == NULL || x->kind != SLOT_LIVE || now - x->created_ms > WGR_LIVE_AGE_MS)
        return WGR_DROP_no_session;
    uint64_t counter = wgr_le64(p + 8);
    struct wgr_peer_state *sender = &t->ps[x->partner];
    bool moved = !wgr_addr_eq(&sender->addr, from);
    if (moved && counter < x->counter_next)
        return WGR_DROP_stale_source;
    if (!peer_rate_ok(t, sender, len, now))
        return WGR_DROP_peer_rate;
    if (moved) {
        sender->addr = *from;
        st->roamed++;
    }
    if (counter >= x->counter_next)
        x->counter_next = counter + 1;
    sender->seen_ms = now;
    if (!addr_known(t, x->owner, now))
        return WGR_DROP_no_route;
    v->to[v->count++] = t->ps[x->owner].addr;
    return -1;
}

void wgr_table_input(struct wgr_table *t, const uint8_t *p, size_t len, const struct wgr_addr *from,
                     uint64_t now, struct wgr_verdict *v, struct wgr_stats *st)
{
    v->count = 0;
    v->cookie = false;
    st->received++;
    int drop;
    switch (wgr_classify(p, len)) {
    case WGR_INITIATION:
        drop = on_initiation(t, p, from, now, v, st);
        break;
    case WGR_RESPONSE:
        drop = on_response(t, p, from, now, v, st);
        break;
    case WGR_COOKIE:
        drop = on_cookie(t, p, now, v, st);
        break;
    case WGR_DATA:
        drop = on_data(t, p, len, from, now, v, st);
        break;
    default:
        drop = WGR_DROP_malformed;
        break;
    }
    v->drop = drop;
    if (drop >= 0) {
        v->count = 0;
        st->drops[drop]++;
    }
}

/* ---------------------------------------------------------------- ageing and reloads */

void wgr_table_sweep(struct wgr_table *t, uint64_t now, struct wgr_stats *st)
{
    for (unsigned i = 0; i <= t->mask;) {
        struct wgr_index *x = &t->slots[i];
        uint64_t age = x->kind == SLOT_PENDING ? WGR_PENDING_AGE_MS : WGR_LIVE_AGE_MS;
        if (x->kind != SLOT_FREE && now - x->created_ms > age) {
            slot_remove(t, x); /* a later entry may have moved into i: look again */
            st->expired++;
            continue;
        }
        i++;
    }
    for (unsigned i = 0; i < t->peers->count; i++)
        if (t->ps[i].addr.len > 0 && now - t->ps[i].seen_ms > WGR_ADDR_AGE_MS)
            memset(&t->ps[i].addr, 0, sizeof(t->ps[i].addr));
}

void wgr_table_set_peers(struct wgr_table *t, const struct wgr_peers *np)
{
    const struct wgr_peers *op = t->peers;
    uint16_t *map = calloc(op->count ? op->count : 1, sizeof(*map));
    struct wgr_peer_state *ps = calloc(WGR_PEERS_MAX, sizeof(*ps));
    size_t bytes = (size_t)(t->mask + 1) * sizeof(*t->slots);
    struct wgr_index *old = malloc(bytes);
    HD_ASSERT(map && ps && old); /* a reload is rare: no memory for it is fatal */
    for (unsigned i = 0; i < op->count; i++) {
        map[i] = (uint16_t)wgr_peer_find(np, op->peer[i].pub);
        if (map[i] != WGR_PEER_NONE) {
            ps[map[i]] = t->ps[i];
            ps[map[i]].indexes = 0;
        }
    }
    memcpy(old, t->slots, bytes);
    memset(t->slots, 0, bytes);
    memcpy(t->ps, ps, WGR_PEERS_MAX * sizeof(*ps));
    t->peers = np;
    t->live = t->pending = 0;
    for (unsigned i = 0; i <= t->mask; i++) {
        struct wgr_index e = old[i];
        if (e.kind == SLOT_FREE)
            continue;
        e.partner = e.partner < op->count ? map[e.partner] : WGR_PEER_NONE;
        e.owner = e.owner < op->count ? map[e.owner] : WGR_PEER_NONE;
        if (e.partner == WGR_PEER_NONE ||
            (e.kind == SLOT_LIVE && !wgr_pair_allowed(np, e.owner, e.partner)))
            continue;
        struct wgr_index *free_slot = NULL;
        find(t, e.idx, &free_slot);
        *free_slot = e;
        if (e.kind == SLOT_LIVE) {
            t->live++;
            t->ps[e.owner].indexes++;
        } else {
            t->pending++;
        }
    }
    free(old);
    free(ps);
    free(map);
}

unsigned wgr_table_live_count(const struct wgr_table *t)
{
    return t->live;
}

unsigned wgr_table_pending_count(const struct wgr_table *t)
{
    return t->pending;
}

unsigned wgr_table_live_max(const struct wgr_table *t)
{
    return t->live_max;
}
