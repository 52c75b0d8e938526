/* server_rate.c - per-client receive rate limiting (spec §6.9): -rate-config FILE, derper's JSON
 * {"PerClientRateLimitBytesPerSec": N, "PerClientRateBurstBytes": M}, read on the main thread
 * at start-up; and the limiter itself, on each client's shard: a token bucket per connection
 * (struct derp_sclient.rate), charged min(payload, 65568) bytes per frame before the frame is
 * handled. Without the tokens the connection stops reading (nothing is dropped) until a timer
 * says they are there, which back-pressures the sender through TCP; the frame is offered again
 * from the bytes net kept, in order. Mesh peers are exempt; N = 0 turns the limit off. */
#include <errno.h>
#include <stdio.h>
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

void derp_rate_set(struct derp_rate *r, uint64_t bytes_per_sec, uint64_t burst_bytes)
{
    r->bytes_per_sec = bytes_per_sec;
    r->burst_bytes = burst_bytes;
    r->per_ms = (double)bytes_per_sec / 1000.0;
    r->burst = (double)(burst_bytes < DERP_RATE_BURST_MIN ? DERP_RATE_BURST_MIN : burst_bytes);
}

int derp_rate_load(const char *path, struct derp_rate *out, char *err, size_t err_size)
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
        else
            hd_log(HD_LOG_WARN, "-rate-config %s: unknown field \"%s\" ignored", path, key);
        if (rc < 0)
            goto out_root;
    }
    derp_rate_set(out, rate, burst);
out_root:
    json_decref(root);
    return rc;
}

/* ---------------------------------------------------------------- the limiter (client's shard) */

/* The tokens are there (or the limit is off for this client): read on. */
static void rate_resume(struct hd_timer *t)
{
    struct derp_sclient *cl = hd_container_of(t, struct derp_sclient, rate_timer);
    net_conn_pause_recv(cl->conn, false); /* offers the kept bytes again: cl may be gone */
}

void derp_rate_client_init(struct derp_sclient *cl, uint64_t now_ms)
{
    hd_timer_init(&cl->rate_timer, rate_resume);
    hd_tbucket_fill(&cl->rate, cl->ds->rate.burst, now_ms);
    cl->rate_paid = false;
}

void derp_rate_client_fini(struct derp_sclient *cl)
{
    hd_timer_stop(cl->ds->s, &cl->rate_timer);
}

bool derp_rate_take(struct derp_sclient *cl, uint32_t payload_len)
{
    struct derp_shard *ds = cl->ds;
    const struct derp_rate *r = &ds->rate;
    if (cl->rate_paid || cl->mesh || r->per_ms <= 0)
        return true;
    double n = payload_len < DERP_RATE_TAKE_MAX ? payload_len : DERP_RATE_TAKE_MAX;
    if (hd_tbucket_take(&cl->rate, r->per_ms, r->burst, hd_now_ms(ds->s), n)) {
        cl->rate_paid = true;
        return true;
    }
    /* The bucket refills by per_ms a millisecond: wait that long (rounded up), at most a
     * second at a time (so a reload with a higher rate applies soon to a client waiting at a
     * low one). */
    double wait = (n - cl->rate.tokens) / r->per_ms;
    uint64_t wait_ms = wait >= DERP_RATE_WAIT_MAX_MS ? DERP_RATE_WAIT_MAX_MS : (uint64_t)wait + 1;
    if (!cl->rate_waiting) {
        ds->ctr.rate_limit_waited++; /* once per frame that had to wait */
        cl->rate_waiting = true;
    }
    net_conn_pause_recv(cl->conn, true);
    hd_timer_start(ds->s, &cl->rate_timer, wait_ms);
    return false;
}

void derp_rate_frame_done(struct derp_sclient *cl)
{
    cl->rate_paid = false;
    cl->rate_waiting = false;
}
