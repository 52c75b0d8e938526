/* server_quota.c - per-key limits and byte quotas of the -rate-config file (hderp's "Keys"
 * object): for each listed node key, a receive rate of its own (instead of the file's
 * per-client default) and daily / monthly budgets of bytes it may send through the relay (UTC
 * calendar days and months). The file part runs on the main thread inside srv_rate_load; the
 * rest on the connection's shard: at activation a listed key gets an entry in its shard's usage
 * table (kept over reconnects; bounded by the list's size), and each packet it sends is counted
 * there and dropped once it would go over a budget (counted per reason). A key with connections
 * on two shards has a budget on each. Keys added by a reload apply from their next login.
 * The "Keys" are parsed with the rest of the file into a sorted array that the rate snapshot
 * owns (freed with it), so a reload swaps limits, rates and budgets together. A listed key
 * (binary search at activation) gets a slot in its shard's usage table (open addressing,
 * SRV_QUOTA_SLOTS for at most SRV_QUOTA_KEYS_MAX keys, allocated at the first listed key; never
 * emptied, so usage survives reconnects) and the connection keeps its index (cl->quota). For
 * such a connection only, each packet looks the key's budgets up in the current snapshot, resets
 * the day or month when the UTC date moved (the wall clock read at most every
 * SRV_QUOTA_CLOCK_MS per shard) and drops a packet that would go over (quota_dropped[reason])
 * before the frame is taken from the pool; other connections pay one test of cl->quota. The
 * limiter (srv_rate_take) uses the key's own rate and burst when it has them. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <jansson.h>

#include "server.h"

struct srv_quota_state {
    struct srv_quota_use slots[SRV_QUOTA_SLOTS];
    uint32_t count;
    uint32_t day, month; /* now, read from the wall clock at most every SRV_QUOTA_CLOCK_MS */
    uint64_t clock_next_ms;
};

/* ---------------------------------------------------------------- the file (main thread) */

static int quota_cmp(const void *a, const void *b)
{
    return memcmp(((const struct srv_quota *)a)->key, ((const struct srv_quota *)b)->key,
                  DERP_KEY_LEN);
}

static int get_u64(json_t *o, const char *name, uint64_t *out, char *err, size_t err_size)
{
    json_t *v = json_object_get(o, name);
    *out = 0;
    if (v == NULL || json_is_null(v))
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0) {
        snprintf(err, err_size, "Keys: %s: expected a non-negative integer (bytes)", name);
        return -EINVAL;
    }
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

static int quota_entry(const char *name, json_t *o, struct srv_quota *q, char *err, size_t size)
{
    struct derp_pubkey k;
    if (derp_pubkey_parse(name, strlen(name), &k) < 0) {
        snprintf(err, size, "Keys: \"%.80s\" is not a node key", name);
        return -EINVAL;
    }
    if (!json_is_object(o)) {
        snprintf(err, size, "Keys: %.80s: expected an object", name);
        return -EINVAL;
    }
    uint64_t burst = 0;
    int rc;
    memcpy(q->key, k.bytes, DERP_KEY_LEN);
    if ((rc = get_u64(o, "DailyBytes", &q->daily_bytes, err, size)) < 0 ||
        (rc = get_u64(o, "MonthlyBytes", &q->monthly_bytes, err, size)) < 0 ||
        (rc = get_u64(o, "BytesPerSec", &q->bytes_per_sec, err, size)) < 0 ||
        (rc = get_u64(o, "BurstBytes", &burst, err, size)) < 0)
        return rc;
    q->per_ms = (double)q->bytes_per_sec / 1000.0;
    q->burst = (double)(burst < DERP_RATE_BURST_MIN ? DERP_RATE_BURST_MIN : burst);
    HD_ASSERT(q->burst >= SRV_RATE_TAKE_MAX); /* as the default's: a frame always fits */
    return 0;
}

int srv_quota_parse(json_t *keys, struct srv_rate *out, char *err, size_t err_size)
{
    if (!json_is_object(keys)) {
        snprintf(err, err_size, "Keys: expected an object {\"nodekey:<hex>\": {...}}");
        return -EINVAL;
    }
    size_t n = json_object_size(keys);
    if (n > SRV_QUOTA_KEYS_MAX) {
        snprintf(err, err_size, "Keys: more than %u keys", SRV_QUOTA_KEYS_MAX);
        return -EINVAL;
    }
    struct srv_quota *q = n ? calloc(n, sizeof(*q)) : NULL;
    if (n && q == NULL) {
        snprintf(err, err_size, "out of memory");
        return -ENOMEM;
    }
    const char *name;
    json_t *v;
    uint32_t i = 0;
    json_object_foreach(keys, name, v)
    {
        int rc = quota_entry(name, v, &q[i++], err, err_size);
        if (rc < 0) {
            free(q);
            return rc;
        }
    }
    if (n > 1)
        qsort(q, n, sizeof(*q), quota_cmp);
    for (uint32_t j = 1; j < n; j++)
        if (quota_cmp(&q[j - 1], &q[j]) == 0) {
            snprintf(err, err_size, "Keys: a key is listed twice");
            free(q);
            return -EINVAL;
        }
    free(out->quotas);
    out->quotas = q;
    out->quotas_count = (uint32_t)n;
    return 0;
}

void srv_rate_free(struct srv_rate *r)
{
    free(r->quotas);
    r->quotas = NULL;
    r->quotas_count = 0;
}

const struct srv_quota *srv_quota_find(const struct srv_rate *r, const struct derp_pubkey *key)
{
    if (r->quotas_count == 0)
        return NULL;
    struct srv_quota probe;
    memcpy(probe.key, key->bytes, DERP_KEY_LEN);
    return bsearch(&probe, r->quotas, r->quotas_count, sizeof(probe), quota_cmp);
}

/* ---------------------------------------------------------------- the shard */

void srv_quota_shard_fini(struct srv_shard *ds)
{
    free(ds->quota);
    ds->quota = NULL;
}

void srv_quota_attach(struct srv_client *cl)
{
    struct srv_shard *ds = cl->ds;
    cl->quota = 0;
    if (cl->mesh || srv_quota_find(srv_rate_current(ds), &cl->key) == NULL)
        return;
    if (ds->quota == NULL && (ds->quota = calloc(1, sizeof(*ds->quota))) == NULL)
        return; /* no memory: the key relays without its budget (never seen in practice) */
    struct srv_quota_state *st = ds->quota;
    uint64_t h;
    memcpy(&h, cl->key.bytes, sizeof(h));
    for (uint32_t i = (uint32_t)h, n = 0; n < SRV_QUOTA_SLOTS; i++, n++) {
        struct srv_quota_use *u = &st->slots[i & (SRV_QUOTA_SLOTS - 1)];
        if (u->used && derp_pubkey_equal(&u->key, &cl->key)) {
            cl->quota = (i & (SRV_QUOTA_SLOTS - 1)) + 1;
            return;
        }
        if (!u->used && st->count < SRV_QUOTA_KEYS_MAX) {
            *u = (struct srv_quota_use){.key = cl->key, .used = true};
            st->count++;
            HD_ASSERT(st->count <= SRV_QUOTA_KEYS_MAX && st->count * 2 <= SRV_QUOTA_SLOTS);
            cl->quota = (i & (SRV_QUOTA_SLOTS - 1)) + 1;
            return;
        }
    }
    hd_log_rl(HD_LOG_WARN, "-rate-config Keys: this shard's usage table is full");
}

static void clock_read(struct srv_shard *ds, struct srv_quota_state *st)
{
    uint64_t now = hd_now_ms(ds->s);
    if (now < st->clock_next_ms)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    st->day = (uint32_t)(ts.tv_sec / 86400);
    st->month = (uint32_t)(tm.tm_year * 12 + tm.tm_mon);
    st->clock_next_ms = now + SRV_QUOTA_CLOCK_MS;
}

bool srv_quota_take(struct srv_client *cl, uint32_t bytes)
{
    struct srv_shard *ds = cl->ds;
    const struct srv_quota *q = srv_quota_find(srv_rate_current(ds), &cl->key);
    if (q == NULL)
        return true; /* no longer listed (a reload) */
    struct srv_quota_state *st = ds->quota;
    HD_ASSERT(st != NULL && cl->quota >= 1 && cl->quota <= SRV_QUOTA_SLOTS); /* attached */
    struct srv_quota_use *u = &st->slots[cl->quota - 1];
    HD_ASSERT(u->used && derp_pubkey_equal(&u->key, &cl->key)); /* its own slot */
    clock_read(ds, st);
    int why = srv_quota_charge(q, u, st->day, st->month, bytes);
    if (why >= 0) {
        ds->ctr.quota_dropped[why]++;
        ds->ctr.quota_dropped_bytes[why] += bytes;
        return false;
    }
    return true;
}

int srv_quota_charge(const struct srv_quota *q, struct srv_quota_use *u, uint32_t day,
                     uint32_t month, uint32_t bytes)
{
    if (u->day != day) /* a new UTC day (or month): its budget starts again */
        u->day = day, u->day_used = 0;
    if (u->month != month)
        u->month = month, u->month_used = 0;
    if (q->daily_bytes && u->day_used + bytes > q->daily_bytes)
        return SRV_QUOTA_DAILY;
    if (q->monthly_bytes && u->month_used + bytes > q->monthly_bytes)
        return SRV_QUOTA_MONTHLY;
    u->day_used += bytes;
    u->month_used += bytes;
    HD_ASSERT(!q->daily_bytes || u->day_used <= q->daily_bytes);
    return -1;
}
