/* server_account.c - per-key accounting: which keys relay the most (bytes and packets, received
 * from the key and sent to it), in bounded memory whatever the number of keys, and exact
 * counters for the keys named in -account-keys FILE (reloaded on SIGHUP like --allow-keys).
 *
 * Counting is per connection (srv_tally_rx/tx: two adds and a compare on the relay path); the
 * connection feeds its shard's tables in batches (SRV_ACCT_FEED_BYTES, each KeepAlive, close),
 * never by a walk over connections. Each shard keeps two Space-Saving sketches (by bytes, by
 * packets) of SRV_ACCT_TOP_ENTRIES keys: a key not in a full sketch takes the place of the
 * smallest entry and inherits its count as its error, so an entry's count is an upper bound
 * and count - error a lower one. Reads (/debug/varz, /debug/keys) copy every shard's tables
 * with hd_collect and merge them here (server_account_out.c formats). Everything runs on the
 * connection's own shard: state follows the connection, not srv_owner(key): attached at settle
 * and detached at unsettle, so a client placed on its peer's shard feeds the old shard's tables
 * what it counted there and goes on in the new one's; a key seen on two shards has an entry on
 * each, summed on read. A feed is one scan of each sketch (~2 x 128 compares per 256 KiB
 * relayed). Keys named in -account-keys (a sorted snapshot like --allow-keys', checked at
 * activation) also get an exact entry in the shard's open-addressing table (SRV_ACCT_SLOTS,
 * allocated at the first named key; at most SRV_ACCT_KEYS_MAX keys, further ones counted in
 * hderp_account_named_full), which the connection indexes (cl->tally.named); the entry counts
 * its live connections and keeps its counters for --account-window (10 minutes) after the last
 * one closes, so a reconnect continues them. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server.h"
#include "ops/server_account.h"

struct srv_acct {
    struct srv_acct_sketch top[SRV_ACCT_DIMS];
    struct srv_acct_named *named; /* SRV_ACCT_SLOTS, open addressing; NULL until the first */
    uint32_t named_count;
    uint64_t feeds, named_full;
};

/* ---------------------------------------------------------------- the file */

int srv_acct_configure(struct srv_config *cfg, const char *path, char *err, size_t err_size)
{
    if (path == NULL)
        return 0;
    struct srv_keylist *l;
    int rc = srv_keylist_load(path, SRV_ACCT_KEYS_MAX, &l, err, err_size);
    if (rc < 0)
        return rc;
    cfg->account_path = path;
    cfg->account_initial = l;
    hd_log(HD_LOG_INFO, "-account-keys %s: loaded %u keys", path, l->count);
    return 0;
}

void srv_acct_config_free(struct srv_config *cfg)
{
    if (cfg->account_initial)
        hd_snap_unref(&cfg->account_initial->snap);
    cfg->account_initial = NULL;
}

int srv_acct_attach_config(struct srv_config *cfg, struct hd_runtime *rt)
{
    if (cfg->account_path == NULL)
        return 0;
    struct srv_keylist *l = cfg->account_initial;
    cfg->account_initial = NULL;
    return hd_snap_var_create(rt, &l->snap, &cfg->account); /* takes l's reference */
}

void srv_acct_detach_config(struct srv_config *cfg)
{
    srv_acct_config_free(cfg); /* never attached (start-up failed first) */
    hd_snap_var_destroy(cfg->account);
    cfg->account = NULL;
}

void srv_acct_reload(struct srv_config *cfg)
{
    if (cfg->account == NULL)
        return;
    char err[512];
    struct srv_keylist *l;
    int rc = srv_keylist_load(cfg->account_path, SRV_ACCT_KEYS_MAX, &l, err, sizeof(err));
    if (rc < 0) {
        hd_log(HD_LOG_ERROR, "-account-keys reload failed, keeping the previous list: %s", err);
        return;
    }
    unsigned count = l->count;
    rc = hd_snap_var_publish(cfg->account, &l->snap); /* takes l's reference */
    if (rc < 0)
        hd_log(HD_LOG_ERROR,
               "-account-keys %s: %u keys read, but some shards keep the previous "
               "list (%s); send SIGHUP again",
               cfg->account_path, count, strerror(-rc));
    else
        hd_log(HD_LOG_INFO, "-account-keys %s: reloaded %u keys", cfg->account_path, count);
}

/* ---------------------------------------------------------------- the shard's tables */

int srv_acct_shard_init(struct srv_shard *ds)
{
    ds->acct = calloc(1, sizeof(*ds->acct));
    return ds->acct ? 0 : -ENOMEM;
}

void srv_acct_shard_fini(struct srv_shard *ds)
{
    if (ds->acct)
        free(ds->acct->named);
    free(ds->acct);
    ds->acct = NULL;
}

static uint64_t key_prefix(const struct derp_pubkey *k)
{
    uint64_t h;
    memcpy(&h, k->bytes, sizeof(h)); /* node keys are curve points: uniform bytes */
    return h;
}

static void counts_add(struct srv_acct_counts *to, const struct srv_acct_counts *d)
{
    to->rx_bytes += d->rx_bytes;
    to->rx_pkts += d->rx_pkts;
    to->tx_bytes += d->tx_bytes;
    to->tx_pkts += d->tx_pkts;
}

/* Space-Saving: one pass finds the key's entry or the smallest one. */
static void sketch_add(struct srv_acct_sketch *sk, const struct derp_pubkey *key, uint64_t w,
                       const struct srv_acct_counts *d)
{
    uint64_t p = key_prefix(key);
    uint32_t min = 0;
    for (uint32_t i = 0; i < sk->count; i++) {
        struct srv_acct_entry *e = &sk->e[i];
        if (key_prefix(&e->key) == p && derp_pubkey_equal(&e->key, key)) {
            e->weight += w;
            counts_add(&e->c, d);
            return;
        }
        if (e->weight < sk->e[min].weight)
            min = i;
    }
    struct srv_acct_entry *e;
    if (sk->count < SRV_ACCT_TOP_ENTRIES) {
        e = &sk->e[sk->count++];
        *e = (struct srv_acct_entry){.key = *key, .weight = w};
    } else {
        e = &sk->e[min]; /* evicted: the newcomer may have had up to its count before */
        sk->evictions++;
        *e = (struct srv_acct_entry){.key = *key, .weight = e->weight + w, .error = e->weight};
    }
    counts_add(&e->c, d);
}

/* The key's slot in the named table (inserted when absent), or NULL: the table is full. */
static struct srv_acct_named *named_slot(struct srv_acct *a, const struct derp_pubkey *key)
{
    if (a->named == NULL && (a->named = calloc(SRV_ACCT_SLOTS, sizeof(*a->named))) == NULL)
        return NULL;
    for (uint32_t i = (uint32_t)key_prefix(key), n = 0; n < SRV_ACCT_SLOTS; i++, n++) {
        struct srv_acct_named *e = &a->named[i & (SRV_ACCT_SLOTS - 1)];
        if (e->used && derp_pubkey_equal(&e->key, key))
            return e;
        if (!e->used) {
            if (a->named_count == SRV_ACCT_KEYS_MAX)
                return NULL;
            a->named_count++;
            *e = (struct srv_acct_named){.key = *key, .used = true};
            return e;
        }
    }
    return NULL;
}

static bool named_expired(const struct srv_shard *ds, const struct srv_acct_named *e,
                          uint64_t now_ms)
{
    return e->conns == 0 && now_ms - e->idle_ms > ds->cfg->account_window_ms;
}

void srv_acct_attach(struct srv_client *cl)
{
    struct srv_shard *ds = cl->ds;
    cl->tally = (struct srv_acct_conn){.attached = true};
    if (ds->cfg->account == NULL || cl->mesh)
        return;
    const struct hd_snap *sn = hd_snap_var_get(ds->cfg->account, ds->s);
    if (!srv_keylist_has(hd_container_of(sn, struct srv_keylist, snap), &cl->key))
        return;
    struct srv_acct_named *e = named_slot(ds->acct, &cl->key);
    if (e == NULL) {
        ds->acct->named_full++;
        hd_log_rl(HD_LOG_WARN, "-account-keys: this shard's table is full (%u keys)",
                  SRV_ACCT_KEYS_MAX);
        return;
    }
    if (named_expired(ds, e, hd_now_ms(ds->s))) { /* away longer than the window: start again */
        e->c = (struct srv_acct_counts){0};
        e->connects = 0;
    }
    e->conns++;
    e->connects++;
    cl->tally.named = (uint32_t)(e - ds->acct->named) + 1;
}

void srv_acct_feed(struct srv_client *cl)
{
    struct srv_acct_conn *c = &cl->tally;
    if (!c->attached || (c->rx_pkts == 0 && c->tx_pkts == 0))
        return;
    struct srv_acct *a = cl->ds->acct;
    struct srv_acct_counts d = {c->rx_bytes, c->rx_pkts, c->tx_bytes, c->tx_pkts};
    a->feeds++;
    sketch_add(&a->top[SRV_ACCT_BYTES], &cl->key, d.rx_bytes + d.tx_bytes, &d);
    sketch_add(&a->top[SRV_ACCT_PACKETS], &cl->key, d.rx_pkts + d.tx_pkts, &d);
    if (c->named)
        counts_add(&a->named[c->named - 1].c, &d);
    c->rx_bytes = c->rx_pkts = c->tx_bytes = c->tx_pkts = 0;
}

void srv_acct_detach(struct srv_client *cl)
{
    if (!cl->tally.attached)
        return;
    srv_acct_feed(cl);
    if (cl->tally.named) {
        struct srv_acct_named *e = &cl->ds->acct->named[cl->tally.named - 1];
        HD_ASSERT(e->conns > 0);
        if (--e->conns == 0)
            e->idle_ms = hd_now_ms(cl->ds->s);
    }
    cl->tally = (struct srv_acct_conn){0};
}

/* ---------------------------------------------------------------- reads */

void srv_acct_fill(struct srv_shard *ds, struct srv_acct_slot *slot)
{
    const struct srv_acct *a = ds->acct;
    memcpy(slot->top, a->top, sizeof(slot->top));
    slot->feeds = a->feeds;
    slot->named_full = a->named_full;
    slot->named_count = 0;
    uint64_t now = hd_now_ms(ds->s);
    for (uint32_t i = 0; a->named && i < SRV_ACCT_SLOTS; i++)
        if (a->named[i].used && !named_expired(ds, &a->named[i], now))
            slot->named[slot->named_count++] = a->named[i];
}
