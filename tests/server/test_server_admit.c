/* test_server_admit.c - the per-client rate limit (admit/server_rate.c) and per-key quotas
 * (admit/server_quota.c). The rate's refill is real time on a real shard: a client that used
 * its burst waits (reading paused, on a real connection: net_conn_pause_recv) until the tokens
 * are there, and its frame then goes. Quota windows use srv_quota_charge, take's arithmetic
 * without the wall clock (the seam: srv_quota_take reads CLOCK_REALTIME for the UTC day). */
#include <criterion/criterion.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server_test.h"

/* ---------------------------------------------------------------- quota windows */

Test(server_quota, day_and_month_windows)
{
    struct srv_quota q = {.daily_bytes = 1000, .monthly_bytes = 1500};
    struct srv_quota_use u = {.used = true};
    const uint32_t day = 20000, month = 1400;
    cr_assert_eq(srv_quota_charge(&q, &u, day, month, 600), -1);
    cr_assert_eq(srv_quota_charge(&q, &u, day, month, 400), -1, "exactly the budget");
    cr_assert_eq(srv_quota_charge(&q, &u, day, month, 1), SRV_QUOTA_DAILY);
    cr_assert_eq(u.day_used, 1000, "a refused packet is not charged");
    /* the next day: its own budget; the month's keeps counting */
    cr_assert_eq(srv_quota_charge(&q, &u, day + 1, month, 600), SRV_QUOTA_MONTHLY);
    cr_assert_eq(u.day_used, 0);
    cr_assert_eq(u.month_used, 1000);
    cr_assert_eq(srv_quota_charge(&q, &u, day + 1, month, 500), -1, "the month's last bytes");
    cr_assert_eq(srv_quota_charge(&q, &u, day + 2, month, 1), SRV_QUOTA_MONTHLY);
    /* a new month (and day) starts both again */
    cr_assert_eq(srv_quota_charge(&q, &u, day + 3, month + 1, 1000), -1);
    cr_assert_eq(u.month_used, 1000);
    /* a day that goes back (the clock was set back) is a new window too, never a negative */
    cr_assert_eq(srv_quota_charge(&q, &u, day + 2, month + 1, 10), -1);
    cr_assert_eq(u.day_used, 10);
    cr_assert_eq(u.month_used, 1010);
    /* no budget: no limit */
    struct srv_quota none = {0};
    struct srv_quota_use v = {.used = true};
    cr_assert_eq(srv_quota_charge(&none, &v, day, month, UINT32_MAX), -1);
}

/* A shard's usage table: a listed key keeps its slot (and its usage) over reconnects; the
 * table holds SRV_QUOTA_KEYS_MAX keys, one more gets none (it relays without its budget). */
static struct srv_quota *quotas;

static int quota_cmp(const void *a, const void *b)
{
    return memcmp(a, b, DERP_KEY_LEN);
}

static void table_body(struct srv_shard *ds, void *arg)
{
    (void)arg;
    uint32_t slots_seen = 0;
    uint8_t k[DERP_KEY_LEN];
    for (uint32_t n = 1; n <= SRV_QUOTA_KEYS_MAX + 1; n++) {
        srvt_key(n, k);
        struct srv_client *cl = srvt_client(ds, k, SRV_CLIENT_ACTIVE);
        srv_quota_attach(cl);
        if (n <= SRV_QUOTA_KEYS_MAX) {
            HDT_CHECK(cl->quota >= 1 && cl->quota <= SRV_QUOTA_SLOTS);
            slots_seen++;
        } else {
            HDT_CHECK(cl->quota == 0); /* the table is full */
        }
        srvt_client_free(cl);
    }
    HDT_CHECK(slots_seen == SRV_QUOTA_KEYS_MAX);
    /* key 1 again: its slot, with what it used */
    srvt_key(1, k);
    struct srv_client *a = srvt_client(ds, k, SRV_CLIENT_ACTIVE);
    srv_quota_attach(a);
    HDT_CHECK(srv_quota_take(a, 700));
    uint32_t slot = a->quota;
    srvt_client_free(a);
    struct srv_client *b = srvt_client(ds, k, SRV_CLIENT_ACTIVE);
    srv_quota_attach(b);
    HDT_CHECK(b->quota == slot);
    HDT_CHECK(!srv_quota_take(b, 301)); /* 700 + 301 > 1000 today */
    HDT_CHECK(ds->ctr.quota_dropped[SRV_QUOTA_DAILY] == 1);
    HDT_CHECK(ds->ctr.quota_dropped_bytes[SRV_QUOTA_DAILY] == 301);
    HDT_CHECK(srv_quota_take(b, 300));
    b->mesh = true; /* mesh peers are never attached */
    srv_quota_attach(b);
    HDT_CHECK(b->quota == 0);
    srvt_client_free(b);
    srvt_done(ds);
}

Test(server_quota, usage_table)
{
    const uint32_t n = SRV_QUOTA_KEYS_MAX + 1;
    quotas = calloc(n, sizeof(*quotas));
    cr_assert_not_null(quotas);
    for (uint32_t i = 0; i < n; i++) {
        srvt_key(i + 1, quotas[i].key);
        quotas[i].daily_bytes = 1000;
    }
    qsort(quotas, n, sizeof(*quotas), quota_cmp);
    srvt_cfg.rate.quotas = quotas;
    srvt_cfg.rate.quotas_count = n;
    int rc = srvt_run(NULL, table_body, NULL);
    srvt_cfg.rate.quotas = NULL;
    srvt_cfg.rate.quotas_count = 0;
    free(quotas);
    cr_assert_eq(rc, 0);
}

/* ---------------------------------------------------------------- the rate's refill */

#define RATE_PER_SEC 1000000u /* 1,000 bytes a millisecond */

struct rate_state {
    struct srv_client *cl;
    struct net_conn *c;
    int peer_fd;
    uint64_t waited_at, need_ms; /* when it had to wait; the refill's least time */
    unsigned retries;
};
static struct rate_state rt;

static void rate_retry(struct hd_timer *t)
{
    (void)t;
    struct srv_client *cl = rt.cl;
    struct srv_shard *ds = cl->ds;
    if (!srv_rate_take(cl, 10000)) { /* not yet: it paused again for what is missing */
        HDT_CHECK(++rt.retries < 1000);
        return;
    }
    /* the tokens came back at the configured rate, not sooner */
    HDT_CHECK(hd_now_ms(ds->s) - rt.waited_at >= rt.need_ms);
    HDT_CHECK(ds->ctr.rate_limit_waited == 1); /* once per frame that had to wait */
    srv_rate_frame_done(cl);
    HDT_CHECK(!cl->rate_waiting && !cl->rate_paid);
    hd_timer_stop(ds->s, &cl->read_timer);
    net_conn_close(rt.c, 0, false);
    close(rt.peer_fd);
    srvt_client_free(cl);
    srvt_done(ds);
}

static void rate_body(struct srv_shard *ds, void *arg)
{
    (void)arg;
    int sv[2];
    HDT_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) == 0);
    uint8_t k[DERP_KEY_LEN];
    srvt_key(1, k);
    struct srv_client *cl = srvt_client(ds, k, SRV_CLIENT_ACTIVE);
    HDT_CHECK(net_conn_adopt(ds->s, sv[0], &srvt_sink_handler, cl, NULL, &rt.c) == 0);
    cl->conn = rt.c;
    rt.cl = cl;
    rt.peer_fd = sv[1];
    hd_timer_init(&cl->read_timer, rate_retry);
    srv_rate_client_init(cl, hd_now_ms(ds->s)); /* a full bucket: the burst */
    double burst = srvt_cfg.rate.burst;
    HDT_CHECK(burst >= SRV_RATE_TAKE_MAX);
    /* a frame is charged at most SRV_RATE_TAKE_MAX; a second take for the frame that paid is
     * free (it is offered again after a pause) */
    HDT_CHECK(srv_rate_take(cl, 1u << 20) && cl->rate_paid);
    HDT_CHECK(srv_rate_take(cl, 1u << 20));
    srv_rate_frame_done(cl);
    while (cl->rate.tokens >= 10000) { /* the rest of the burst */
        HDT_CHECK(srv_rate_take(cl, 10000));
        srv_rate_frame_done(cl);
    }
    /* mesh peers are exempt */
    cl->mesh = true;
    HDT_CHECK(srv_rate_take(cl, 10000));
    srv_rate_frame_done(cl);
    cl->mesh = false;
    rt.waited_at = hd_now_ms(ds->s);
    rt.need_ms = (uint64_t)((10000 - cl->rate.tokens) / (RATE_PER_SEC / 1000));
    HDT_CHECK(rt.need_ms >= 9); /* the burst is spent: the wait is a real one */
    HDT_CHECK(!srv_rate_take(cl, 10000));
    HDT_CHECK(cl->rate_waiting && hd_timer_armed(&cl->read_timer));
    HDT_CHECK(ds->ctr.rate_limit_waited == 1);
}

Test(server_rate, refill)
{
    srv_rate_set(&srvt_cfg.rate, RATE_PER_SEC, 0);
    struct srvt_opts o = {.net = true};
    int rc = srvt_run(&o, rate_body, NULL);
    srv_rate_set(&srvt_cfg.rate, 0, 0);
    cr_assert_eq(rc, 0);
}
