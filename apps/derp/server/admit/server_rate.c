/* server_rate.c - per-client receive rate limiting (spec §6.9): -rate-config FILE, derper's JSON
 * {"PerClientRateLimitBytesPerSec": N, "PerClientRateBurstBytes": M}, read on the main thread
 * at start-up; and the limiter itself, on each client's shard: a token bucket per connection
 * (struct srv_client.rate), charged min(payload, 65568) bytes per frame before the frame is
 * handled. Without the tokens the connection stops reading (nothing is dropped) until a timer
 * says they are there, which back-pressures the sender through TCP; the frame is offered again
 * from the bytes net kept, in order. Mesh peers are exempt; N = 0 turns the limit off.
 * SIGHUP reads the file again (main thread): a good one becomes a new immutable snapshot that
 * every shard swaps in (hd_snap_var), so existing connections use it from their next frame (a
 * waiting one within SRV_RATE_WAIT_MAX_MS, 1 s, after which it looks again); a bad one is logged
 * and the old limit stays. A bucket is a struct hd_tbucket (16 bytes, filled at activation). A
 * waiting connection holds at most the frame's header and the rest of one read unconsumed (the
 * header is metered before the payload is there), plus the buffers net holds meanwhile; the
 * kernel's socket buffers fill and TCP slows the sender; other connections on the shard are
 * not affected. rate_limit_per_client_waited counts frames that had to wait, with the two
 * config gauges, only when a file is set. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include "server.h"

/* ---------------------------------------------------------------- the file (main thread) */

static const char *const field_rate = "PerClientRateLimitBytesPerSec";
static const char *const field_burst = "PerClientRateBurstBytes";

/* A uint64 field, as Go's encoding/json fills one: absent or null leaves 0; anything but a
 * non-negative integer is an error. */
static int get_u64(json_t *v, const char *name, uint64_t *out, char *err, size_t err_size)
{
    *out = 0;
    if (v == NULL || json_is_null(v))
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0) {
        snprintf(err, err_size, "%s: expected a non-negative integer (bytes)", name);
        return -EINVAL;
    }
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

void srv_rate_set(struct srv_rate *r, uint64_t bytes_per_sec, uint64_t burst_bytes)
{
    r->bytes_per_sec = bytes_per_sec;
    r->burst_bytes = burst_bytes;
    r->per_ms = (double)bytes_per_sec / 1000.0;
    r->burst = (double)(burst_bytes < DERP_RATE_BURST_MIN ? DERP_RATE_BURST_MIN : burst_bytes);
    HD_ASSERT(r->burst >= SRV_RATE_TAKE_MAX); /* a frame's charge always fits the bucket */
}

int srv_rate_load(const char *path, struct srv_rate *out, char *err, size_t err_size)
{
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (root == NULL) {
        if (je.line <= 0)
            snprintf(err, err_size, "%s", je.text); /* "unable to open ...: <why>" */
        else
            snprintf(err, err_size, "not valid JSON: line %d column %d: %s", je.line, je.column,
                     je.text);
        return -EINVAL;
    }
    int rc = 0;
    uint64_t rate = 0, burst = 0;
    struct srv_rate tmp = {0};
    if (!json_is_object(root)) {
        snprintf(err, err_size, "expected a JSON object {\"%s\": N, \"%s\": M}", field_rate,
                 field_burst);
        rc = -EINVAL;
        goto out_root;
    }
    /* Go matches field names without regard to case; other fields are ignored (said once). */
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v)
    {
        if (strcasecmp(key, field_rate) == 0)
            rc = get_u64(v, field_rate, &rate, err, err_size);
        else if (strcasecmp(key, field_burst) == 0)
            rc = get_u64(v, field_burst, &burst, err, err_size);
        else if (strcmp(key, "Keys") == 0) /* hderp's: server_quota.c */
            rc = srv_quota_parse(v, &tmp, err, err_size);
        else
            hd_log(HD_LOG_WARN, "-rate-config %s: unknown field \"%s\" ignored", path, key);
        if (rc < 0)
            goto out_root;
    }
    srv_rate_set(&tmp, rate, burst);
    *out = tmp;
    tmp.quotas = NULL;
out_root:
    srv_rate_free(&tmp);
    json_decref(root);
    return rc;
}

/* ---------------------------------------------------------------- reload (main thread) */

struct srv_rate_snap {
    struct hd_snap snap;
    struct srv_rate rate;
};

static void snap_free(struct hd_snap *sn)
{
    struct srv_rate_snap *rs = hd_container_of(sn, struct srv_rate_snap, snap);
    srv_rate_free(&rs->rate);
    free(rs);
}

static struct hd_snap *snap_new(const struct srv_rate *r)
{
    struct srv_rate_snap *rs = malloc(sizeof(*rs));
    if (rs == NULL)
        return NULL;
    hd_snap_init(&rs->snap, snap_free);
    rs->rate = *r;
    return &rs->snap;
}

int srv_rate_attach(struct srv_config *cfg, struct hd_runtime *rt)
{
    if (cfg->rate_config_path == NULL)
        return 0;
    struct hd_snap *sn = snap_new(&cfg->rate);
    if (sn == NULL)
        return -ENOMEM;
    cfg->rate.quotas = NULL; /* the snapshot owns them now */
    cfg->rate.quotas_count = 0;
    return hd_snap_var_create(rt, sn, &cfg->rate_var); /* takes sn's reference */
}

void srv_rate_detach(struct srv_config *cfg)
{
    srv_rate_free(&cfg->rate); /* never attached */
    hd_snap_var_destroy(cfg->rate_var);
    cfg->rate_var = NULL;
}

void srv_rate_reload(struct srv_config *cfg)
{
    if (cfg->rate_var == NULL)
        return;
    char err[256];
    struct srv_rate r;
    if (srv_rate_load(cfg->rate_config_path, &r, err, sizeof(err)) < 0) {
        hd_log(HD_LOG_ERROR, "-rate-config %s: reload failed, keeping the previous limit: %s",
               cfg->rate_config_path, err);
        return;
    }
    struct hd_snap *sn = snap_new(&r);
    if (sn == NULL)
        srv_rate_free(&r);
    int rc = sn ? hd_snap_var_publish(cfg->rate_var, sn) : -ENOMEM; /* takes sn's reference */
    if (rc < 0)
        hd_log(HD_LOG_ERROR,
               "-rate-config %s: read, but some shards keep the previous limit (%s); send "
               "SIGHUP again",
               cfg->rate_config_path, strerror(-rc));
    else
        hd_log(HD_LOG_INFO, "-rate-config %s: reloaded: %llu bytes/s, burst %llu, %u keys",
               cfg->rate_config_path, (unsigned long long)r.bytes_per_sec,
               (unsigned long long)r.burst, r.quotas_count);
}

/* ---------------------------------------------------------------- the limiter (client's shard) */

const struct srv_rate *srv_rate_current(const struct srv_shard *ds)
{
    if (ds->cfg->rate_var == NULL)
        return &ds->cfg->rate; /* no file: all zero, off */
    const struct hd_snap *sn = hd_snap_var_get(ds->cfg->rate_var, ds->s);
    HD_ASSERT(sn != NULL); /* attached with a snapshot; a reload swaps one for another */
    return &hd_container_of(sn, const struct srv_rate_snap, snap)->rate;
}

void srv_rate_client_init(struct srv_client *cl, uint64_t now_ms)
{
    hd_tbucket_fill(&cl->rate, srv_rate_current(cl->ds)->burst, now_ms);
    cl->rate_paid = false;
}

bool srv_rate_take(struct srv_client *cl, uint32_t payload_len)
{
    struct srv_shard *ds = cl->ds;
    const struct srv_rate *r = srv_rate_current(ds); /* borrowed: this call only */
    if (cl->rate_paid || cl->mesh)
        return true;
    double per_ms = r->per_ms, burst = r->burst;
    const struct srv_quota *q = cl->quota ? srv_quota_find(r, &cl->key) : NULL;
    if (q && q->per_ms > 0) /* the key's own rate (-rate-config Keys) */
        per_ms = q->per_ms, burst = q->burst;
    if (per_ms <= 0)
        return true;
    HD_ASSERT(cl->phase == SRV_CLIENT_ACTIVE); /* the reader asks for active clients only */
    double n = payload_len < SRV_RATE_TAKE_MAX ? payload_len : SRV_RATE_TAKE_MAX;
    HD_ASSERT(n <= burst); /* else no wait would ever be enough */
    if (hd_tbucket_take(&cl->rate, per_ms, burst, hd_now_ms(ds->s), n)) {
        cl->rate_paid = true;
        return true;
    }
    /* The bucket refills by per_ms a millisecond: wait that long (rounded up), at most a
     * second at a time (so a reload with a higher rate applies soon to a client waiting at a
     * low one). */
    double wait = (n - cl->rate.tokens) / per_ms;
    uint64_t wait_ms = wait >= SRV_RATE_WAIT_MAX_MS ? SRV_RATE_WAIT_MAX_MS : (uint64_t)wait + 1;
    HD_ASSERT(wait > 0 && wait_ms >= 1 && wait_ms <= SRV_RATE_WAIT_MAX_MS);
    if (!cl->rate_waiting) {
        ds->ctr.rate_limit_waited++; /* once per frame that had to wait */
        if (per_ms != r->per_ms)
            ds->ctr.rate_limit_waited_key++;
        cl->rate_waiting = true;
    }
    srv_client_read_pause(cl, wait_ms); /* the timer reads on: this frame is offered again */
    return false;
}

void srv_rate_frame_done(struct srv_client *cl)
{
    cl->rate_paid = false;
    cl->rate_waiting = false;
}
