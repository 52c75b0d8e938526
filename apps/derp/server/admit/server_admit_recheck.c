/* server_admit_recheck.c - admission that follows revocation (-verify-client-url):
 *   - a per-shard cache of the controller's answers by key (-verify-cache-ttl): an allow is
 *     kept for the TTL, a refusal for a quarter of it, so a key revoked at the controller is
 *     refused again soon; direct-mapped, SRV_ADMIT_CACHE_SLOTS entries a shard (bounded; a
 *     collision replaces; 4,096, allocated at the first answer), only definite answers
 *     (transport errors are not cached);
 *   - re-checks of admitted keys (-verify-recheck-interval): each regular connection asks the
 *     controller again about once per interval, the first time at a random point of it and
 *     never more than SRV_RECHECK_INFLIGHT_MAX requests at once per shard (the others wait a
 *     random short while, 1-2 s), so a restart's thousands of logins do not come back as a
 *     burst. The timer starts once the connection is active on its owner shard; a re-check
 *     reuses the login's request slot (cl->admit, cancelled if the client leaves). A
 *     refusal closes the connection (counted: admit_revoked); a controller that cannot be
 *     reached changes nothing (fail-open or not: nobody is closed for the controller's outage).
 * Runs on the client's shard: the cache on the admitting shard, re-checks on the owner shard. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hd/hd_rand.h>
#include <hd/net_http_client.h>
#include "server.h"

int srv_admit_recheck_configure(struct srv_config *cfg, uint64_t cache_ttl_ms, uint64_t recheck_ms)
{
    cfg->verify_cache_ttl_ms = cache_ttl_ms;
    cfg->verify_recheck_ms = recheck_ms;
    if ((cache_ttl_ms || recheck_ms) && !cfg->verify_url) {
        fprintf(stderr, "hderp-server: -verify-cache-ttl and -verify-recheck-interval need "
                        "-verify-client-url\n");
        return -EINVAL;
    }
    return 0;
}

struct srv_admit_cache_slot {
    uint8_t key[DERP_KEY_LEN];
    uint64_t expires_ms; /* 0: empty */
    bool allow;
};

static struct srv_admit_cache_slot *slot_of(struct srv_shard *ds, const uint8_t *key, bool make)
{
    if (ds->admit_cache == NULL) {
        if (!make)
            return NULL;
        ds->admit_cache = calloc(SRV_ADMIT_CACHE_SLOTS, sizeof(*ds->admit_cache));
        if (ds->admit_cache == NULL)
            return NULL; /* no cache: every login asks (nothing else changes) */
    }
    uint64_t h;
    memcpy(&h, key + 8, sizeof(h)); /* not the bytes srv_owner uses: spread within a shard */
    return &ds->admit_cache[h & (SRV_ADMIT_CACHE_SLOTS - 1)];
}

int srv_admit_cache_get(struct srv_shard *ds, const struct derp_pubkey *key)
{
    if (ds->cfg->verify_cache_ttl_ms == 0)
        return -ENOENT;
    struct srv_admit_cache_slot *e = slot_of(ds, key->bytes, false);
    if (e == NULL || e->expires_ms <= hd_now_ms(ds->s) || memcmp(e->key, key->bytes, DERP_KEY_LEN))
        return -ENOENT;
    ds->ctr.admit_cache_hits++;
    return e->allow ? 1 : 0;
}

void srv_admit_cache_put(struct srv_shard *ds, const struct derp_pubkey *key, bool allow)
{
    uint64_t ttl = ds->cfg->verify_cache_ttl_ms;
    if (ttl == 0)
        return;
    struct srv_admit_cache_slot *e = slot_of(ds, key->bytes, true);
    if (e == NULL)
        return;
    memcpy(e->key, key->bytes, DERP_KEY_LEN);
    e->allow = allow;
    e->expires_ms = hd_now_ms(ds->s) + (allow ? ttl : ttl / 4 + 1);
}

void srv_admit_shard_fini(struct srv_shard *ds)
{
    free(ds->admit_cache);
    ds->admit_cache = NULL;
}

/* ---------------------------------------------------------------- re-checks */

/* [0, span): the shard's own generator, so logins spread without sharing libc's locked one. */
static uint64_t jitter(struct srv_shard *ds, uint64_t span)
{
    return span ? hd_rand_below(ds->s, span) : 0;
}

static void recheck_fired(struct hd_timer *t);

static void recheck_again(struct srv_client *cl, uint64_t delay_ms)
{
    hd_timer_start(cl->ds->s, &cl->recheck, delay_ms);
}

void srv_admit_recheck_start(struct srv_client *cl)
{
    const struct srv_config *cfg = cl->ds->cfg;
    hd_timer_init(&cl->recheck, recheck_fired);
    if (cl->mesh || cfg->verify_url == NULL || cfg->verify_recheck_ms == 0)
        return;
    /* Anywhere in the first interval: logins that came together spread out. */
    recheck_again(cl, 1 + jitter(cl->ds, cfg->verify_recheck_ms));
}

void srv_admit_recheck_stop(struct srv_client *cl)
{
    hd_timer_stop(cl->ds->s, &cl->recheck);
}

static void rechecked(void *arg, int err, const struct net_http_result *r)
{
    struct srv_client *cl = arg;
    struct srv_shard *ds = cl->ds;
    HD_ASSERT(cl->rechecking && ds->rechecks_inflight > 0); /* counted when it started */
    cl->admit = NULL;
    cl->rechecking = false;
    ds->rechecks_inflight--;
    uint64_t interval = ds->cfg->verify_recheck_ms;
    if (!srv_admit_answered(err, r)) { /* the controller is away: the client stays */
        ds->ctr.admit_recheck_errors++;
        recheck_again(cl, interval);
        return;
    }
    bool allow; /* an answer that arrived is judged, as at login (server_admit.c) */
    const char *why = srv_admit_judge(err, r, false, &allow);
    if (srv_admit_definite(err, r))
        srv_admit_cache_put(ds, &cl->key, allow);
    if (allow) {
        recheck_again(cl, interval - interval / 8 + jitter(ds, interval / 4));
        return;
    }
    char key[DERP_PUBKEY_TEXT_SIZE];
    derp_pubkey_format(&cl->key, key);
    ds->ctr.admit_revoked++;
    hd_log_rl(HD_LOG_INFO, "admission: %s no longer admitted (%s): closing its connection", key,
              why);
    srv_client_close(cl, -EACCES);
}

static void recheck_fired(struct hd_timer *t)
{
    struct srv_client *cl = hd_container_of(t, struct srv_client, recheck);
    struct srv_shard *ds = cl->ds;
    if (cl->phase != SRV_CLIENT_ACTIVE || cl->admit)
        return;
    if (ds->rechecks_inflight >= SRV_RECHECK_INFLIGHT_MAX) {
        recheck_again(cl, SRV_RECHECK_BUSY_MS + jitter(ds, SRV_RECHECK_BUSY_MS));
        return;
    }
    int rc = srv_admit_url_request(cl, rechecked);
    if (rc < 0) { /* could not even start: as unreachable */
        ds->ctr.admit_recheck_errors++;
        recheck_again(cl, ds->cfg->verify_recheck_ms);
        return;
    }
    HD_ASSERT(!cl->rechecking && cl->admit != NULL);
    cl->rechecking = true;
    ds->rechecks_inflight++;
    HD_ASSERT(ds->rechecks_inflight <= SRV_RECHECK_INFLIGHT_MAX);
    ds->ctr.admit_rechecks++;
}

void srv_admit_recheck_cancelled(struct srv_client *cl)
{
    if (cl->rechecking) {
        HD_ASSERT(cl->ds->rechecks_inflight > 0);
        cl->rechecking = false;
        cl->ds->rechecks_inflight--;
    }
}
