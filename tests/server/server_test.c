/* server_test.c - see server_test.h. */
#include "server_test.h"

#include <string.h>

struct srv_config srvt_cfg;
struct srvt_hook_counts srvt_hooks_seen[HD_SHARDS_MAX];

/* ---------------------------------------------------------------- the hooks: counted no-ops */

static struct srvt_hook_counts *seen(const struct srv_client *cl)
{
    return &srvt_hooks_seen[hd_shard_id(cl->ds->s)];
}

static int hook_admit(struct srv_client *cl)
{
    (void)cl;
    return 1;
}
static void hook_none(struct srv_client *cl)
{
    (void)cl;
}
static void hook_settle(struct srv_client *cl)
{
    seen(cl)->settle++;
}
static void hook_unsettle(struct srv_client *cl)
{
    seen(cl)->unsettle++;
}
static void hook_closing(struct srv_client *cl)
{
    seen(cl)->closing++;
}
static void hook_closed(struct srv_client *cl)
{
    seen(cl)->closed++;
}
static void hook_move_sent(struct srv_client *cl)
{
    seen(cl)->move_sent++;
}
static void hook_move_done(struct srv_shard *ds, struct srv_client *cl, struct net_conn *c)
{
    (void)cl, (void)c;
    srvt_hooks_seen[hd_shard_id(ds->s)].move_done++;
}
static void hook_tally_feed(struct srv_client *cl)
{
    seen(cl)->tally_feed++;
    cl->tally = (struct srv_acct_conn){0};
}
static bool hook_take(struct srv_client *cl, uint32_t len)
{
    (void)cl, (void)len;
    return true;
}

static const struct srv_relay_hooks srvt_hooks = {
    .admit = hook_admit,
    .login_over = hook_none,
    .settle = hook_settle,
    .unsettle = hook_unsettle,
    .closing = hook_closing,
    .closed = hook_closed,
    .move_sent = hook_move_sent,
    .move_done = hook_move_done,
    .tally_feed = hook_tally_feed,
    .rate_take = hook_take,
    .rate_frame_done = hook_none,
    .quota_take = hook_take,
};

/* ---------------------------------------------------------------- each shard's relay state */

/* The relay's state is the test module's (hdt_run puts it after the layers): its index is the
 * relay instance, as srv_shard_at finds it. */
static unsigned the_instance;
static srvt_body_fn *the_body;

static int state_init(struct hd_shard *s, void **state)
{
    struct srv_shard *ds = calloc(1, sizeof(*ds));
    HDT_CHECK(ds != NULL);
    ds->s = s;
    ds->cfg = &srvt_cfg;
    ds->instance = the_instance;
    HDT_CHECK(srv_peers_init(&ds->peers) == 0);
    HDT_CHECK(srv_peers_init(&ds->guests) == 0);
    HDT_CHECK(srv_sources_shard_init(ds) == 0);
    *state = ds;
    return 0;
}

static void state_fini(struct hd_shard *s, void *state)
{
    (void)s;
    struct srv_shard *ds = state;
    srv_place_tick_fini(ds);
    srv_peers_fini(&ds->peers);
    srv_peers_fini(&ds->guests);
    srv_sources_shard_fini(ds);
    srv_quota_shard_fini(ds);
    free(ds->watch_list);
    free(ds);
}

static void body(struct hd_shard *s, void *arg)
{
    struct srv_shard *ds = srv_shard_at(s, the_instance);
    HDT_CHECK(ds != NULL && ds->s == s);
    the_body(ds, arg);
}

void srvt_done(struct srv_shard *ds)
{
    hdt_done(ds->s);
}

int srvt_run(const struct srvt_opts *o, srvt_body_fn *fn, void *arg)
{
    unsigned shards = o && o->shards ? o->shards : 1;
    srv_hash_init(NULL);
    srvt_cfg.hooks = &srvt_hooks;
    srvt_cfg.shards = shards;
    memset(srvt_hooks_seen, 0, sizeof(srvt_hooks_seen));
    static const struct hd_module *const net_layer[] = {&net_module};
    struct hdt_options ho = {.shards = shards,
                             .layers = net_layer,
                             .layers_count = o && o->net ? 1 : 0,
                             .state_init = state_init,
                             .state_fini = state_fini};
    the_instance = ho.layers_count;
    the_body = fn;
    int rc = hdt_run(&ho, body, arg, NULL);
    the_body = NULL;
    return rc;
}

/* ---------------------------------------------------------------- keys, clients, frames */

void srvt_key(uint32_t n, uint8_t key[DERP_KEY_LEN])
{
    /* Spread over every byte (the tables hash the whole key, sources take bytes 16..24). */
    uint64_t x = n * 0x9E3779B97F4A7C15ull + 1;
    for (unsigned i = 0; i < DERP_KEY_LEN; i += 8) {
        x ^= x >> 31;
        x *= 0xBF58476D1CE4E5B9ull;
        memcpy(key + i, &x, sizeof(x));
    }
}

void srvt_key_owned(const struct srv_shard *ds, unsigned owner, uint32_t n,
                    uint8_t key[DERP_KEY_LEN])
{
    for (uint32_t i = 1, found = 0;; i++) {
        srvt_key(i * 7919u + n, key);
        if (srv_owner(ds, key) == owner && found++ == n)
            return;
    }
}

struct srv_client *srvt_client(struct srv_shard *ds, const uint8_t key[DERP_KEY_LEN],
                               enum srv_client_phase phase)
{
    struct srv_client *cl = calloc(1, sizeof(*cl));
    HDT_CHECK(cl != NULL);
    cl->ds = ds;
    cl->instance = ds->instance;
    cl->phase = phase;
    memcpy(cl->key.bytes, key, DERP_KEY_LEN);
    return cl;
}

void srvt_client_free(struct srv_client *cl)
{
    srv_sources_drop(cl);
    free(cl);
}

struct hd_frame *srvt_route_frame(struct srv_shard *ds, const uint8_t dst[DERP_KEY_LEN],
                                  const uint8_t src[DERP_KEY_LEN], uint32_t payload)
{
    uint32_t body = DERP_KEY_LEN + payload;
    struct hd_frame *f = hd_frame_get(ds->s, SRV_ROUTE_OFF + DERP_FRAME_HEADER_LEN + body);
    HDT_CHECK(f != NULL);
    memcpy(f->data, dst, DERP_KEY_LEN);
    memcpy(f->data + SRV_ROUTE_REPLY_OFF, src, DERP_KEY_LEN);
    uint8_t *h = f->data + SRV_ROUTE_OFF;
    h[0] = DERP_FRAME_RECV_PACKET;
    h[1] = (uint8_t)(body >> 24), h[2] = (uint8_t)(body >> 16);
    h[3] = (uint8_t)(body >> 8), h[4] = (uint8_t)body;
    memcpy(h + DERP_FRAME_HEADER_LEN, src, DERP_KEY_LEN);
    memset(h + DERP_FRAME_HEADER_LEN + DERP_KEY_LEN, 0xab, payload);
    f->len = SRV_ROUTE_OFF + DERP_FRAME_HEADER_LEN + body;
    return f;
}

static ssize_t sink_data(struct net_conn *c, const uint8_t *data, size_t len)
{
    (void)c, (void)data;
    return (ssize_t)len;
}

static void sink_close(struct net_conn *c, int reason)
{
    (void)c, (void)reason;
}

const struct net_conn_handler srvt_sink_handler = {.on_data = sink_data, .on_close = sink_close};
