/* test_conformance_quota.c - per-key limits and byte quotas of the -rate-config file ("Keys")
 * against a real hderp-server: a key over its daily budget has the rest of its packets dropped
 * (counted by reason, bytes too) while an unlisted key relays everything; the usage survives a
 * reconnect; a monthly budget likewise; a SIGHUP with a larger budget lets the key relay again
 * on its open connection; a key with its own rate waits for tokens (counted as the key's) while
 * an unlisted key, with no default limit, never does, and nothing of either is lost. */
#include <criterion/criterion.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "conf_support.h"
#include "derp_keys.h"

#define SHARDS  2
#define WAIT_MS 10000 /* hang guard: a reload is one file read and a few posts */
#define SMALL   1000  /* bytes a packet in the budget tests */
#define DAILY   5000  /* the daily budget: 5 small packets */
#define MONTHLY 3000
#define BIG     60000  /* bytes a packet in the rate test */
#define KEY_BPS 200000 /* the rate-limited key's own bytes/s */

static struct conf_server srv;
static char dir[256], cfg_path[300];

static void suite_up(void)
{
    signal(SIGPIPE, SIG_IGN);
    mkdir(CONF_WORK_DIR, 0755);
    snprintf(dir, sizeof(dir), "%s/quota-XXXXXX", CONF_WORK_DIR);
    cr_assert_not_null(mkdtemp(dir));
    snprintf(cfg_path, sizeof(cfg_path), "%s/rate.json", dir);
}

static void suite_down(void)
{
    conf_server_down(&srv);
}

TestSuite(test_conformance_quota, .init = suite_up, .fini = suite_down, .timeout = 180);

static void write_cfg(const char *text)
{
    char tmp[320];
    snprintf(tmp, sizeof(tmp), "%s.tmp", cfg_path);
    FILE *f = fopen(tmp, "w");
    cr_assert_not_null(f);
    cr_assert(fputs(text, f) >= 0);
    cr_assert_eq(fclose(f), 0);
    cr_assert_eq(rename(tmp, cfg_path), 0);
}

/* n packets of len from r to sink; then a Ping round trip, so the server handled them all. */
static void send_n(struct conf_raw *r, struct conf_raw *sink, int n, size_t len)
{
    static uint8_t payload[BIG];
    for (int i = 0; i < n; i++)
        CONF_OK(conf_raw_send_packet(r, &sink->kp.pub, payload, len));
    CONF_OK(conf_raw_ping_pong(r, 7, CONF_IO_TIMEOUT_MS * 4));
}

/* The sink gets exactly n packets from src, then nothing more (KeepAlives, PeerGone aside). */
static void receive_exactly(struct conf_raw *sink, const struct derp_pubkey *src, int n)
{
    for (int i = 0; i < n; i++) {
        struct derp_pubkey from;
        const uint8_t *data;
        size_t len;
        CONF_OK(conf_raw_read_packet(sink, CONF_IO_TIMEOUT_MS, &from, &data, &len));
        cr_assert(derp_pubkey_equal(&from, src), "packet %d from another key", i);
    }
    struct conf_frame f;
    int rc;
    do /* PeerGone: a sender reconnected (its old connection's end) */
        rc = conf_raw_expect_silence(sink, 200, &f);
    while (rc == -EEXIST && f.type == DERP_FRAME_PEER_GONE);
    cr_assert_eq(rc, 0, "more than %d packets arrived (%d, frame type %d)", n, rc, f.type);
}

static void keys_cfg(char *out, size_t size, const struct derp_keypair *q, uint64_t daily,
                     const struct derp_keypair *m)
{
    char tq[DERP_PUBKEY_TEXT_SIZE], tm[DERP_PUBKEY_TEXT_SIZE];
    derp_pubkey_format(&q->pub, tq);
    derp_pubkey_format(&m->pub, tm);
    snprintf(out, size,
             "{\"Keys\": {\"%s\": {\"DailyBytes\": %llu},\n"
             "          \"%s\": {\"MonthlyBytes\": %d}}}\n",
             tq, (unsigned long long)daily, tm, MONTHLY);
}

Test(test_conformance_quota, over_budget_dropped_others_flow_reconnect_and_reload)
{
    struct derp_keypair kq, km;
    CONF_OK(derp_keypair_generate(&kq));
    CONF_OK(derp_keypair_generate(&km));
    char text[600];
    keys_cfg(text, sizeof(text), &kq, DAILY, &km);
    write_cfg(text);
    const char *extra[] = {"-rate-config", cfg_path, NULL};
    CONF_OK(conf_server_start(&srv, &(struct conf_server_opts){.shards = SHARDS, .extra = extra}));
    struct conf_raw sink, q, m, p;
    CONF_OK(conf_raw_login(&sink, &srv, NULL, NULL));
    CONF_OK(conf_raw_login(&q, &srv, &kq, NULL));
    CONF_OK(conf_raw_login(&p, &srv, NULL, NULL));
    send_n(&q, &sink, 10, SMALL); /* 5 fit the day's budget */
    receive_exactly(&sink, &kq.pub, DAILY / SMALL);
    send_n(&p, &sink, 100, SMALL); /* unlisted: everything */
    receive_exactly(&sink, &p.kp.pub, 100);
    cr_assert_eq(conf_varz_must(&srv, "hderp_quota_dropped_packets{reason=\"daily\"}"), 5);
    cr_assert_eq(conf_varz_must(&srv, "hderp_quota_dropped_bytes{reason=\"daily\"}"), 5 * SMALL);
    cr_assert_eq(
        conf_varz_must(&srv, "derp_packets_dropped{reason=\"unknown_dest\",kind=\"other\"}"), 0);

    conf_raw_close(&q); /* the budget is the key's, not the connection's */
    CONF_OK(conf_raw_login(&q, &srv, &kq, NULL));
    send_n(&q, &sink, 1, SMALL);
    receive_exactly(&sink, &kq.pub, 0);
    cr_assert_eq(conf_varz_must(&srv, "hderp_quota_dropped_packets{reason=\"daily\"}"), 6);

    CONF_OK(conf_raw_login(&m, &srv, &km, NULL));
    send_n(&m, &sink, 5, SMALL);
    receive_exactly(&sink, &km.pub, MONTHLY / SMALL);
    cr_assert_eq(conf_varz_must(&srv, "hderp_quota_dropped_packets{reason=\"monthly\"}"), 2);

    keys_cfg(text, sizeof(text), &kq, 100 * DAILY, &km); /* a larger budget: q goes on */
    write_cfg(text);
    unsigned before = conf_log_count(&srv, "reloaded:");
    cr_assert_eq(kill(srv.pid, SIGHUP), 0);
    int64_t end = conf_now_ms() + WAIT_MS;
    while (conf_log_count(&srv, "reloaded:") == before && conf_now_ms() < end)
        conf_sleep_ms(20);
    cr_assert_gt(conf_log_count(&srv, "reloaded:"), before, "no reload in the log");
    send_n(&q, &sink, 3, SMALL);
    receive_exactly(&sink, &kq.pub, 3);
    cr_assert_eq(conf_varz_must(&srv, "hderp_quota_dropped_packets{reason=\"daily\"}"), 6);
    conf_raw_close(&q);
    conf_raw_close(&m);
    conf_raw_close(&p);
    conf_raw_close(&sink);
    conf_server_stop_clean(&srv);
}

Test(test_conformance_quota, key_rate_paces_that_key_only)
{
    struct derp_keypair kr;
    CONF_OK(derp_keypair_generate(&kr));
    char tr[DERP_PUBKEY_TEXT_SIZE], text[400];
    derp_pubkey_format(&kr.pub, tr);
    snprintf(text, sizeof(text), "{\"Keys\": {\"%s\": {\"BytesPerSec\": %d}}}\n", tr, KEY_BPS);
    write_cfg(text);
    const char *extra[] = {"-rate-config", cfg_path, NULL};
    CONF_OK(conf_server_start(&srv, &(struct conf_server_opts){.shards = SHARDS, .extra = extra}));
    cr_assert_eq(conf_varz_must(&srv, "derp_rate_limit_per_client_bytes_per_second"), 0,
                 "no default limit");
    struct conf_raw sink, r, p;
    CONF_OK(conf_raw_login(&sink, &srv, NULL, NULL));
    CONF_OK(conf_raw_login(&p, &srv, NULL, NULL));
    CONF_OK(conf_raw_login(&r, &srv, &kr, NULL));
    for (int i = 0; i < 5; i++) { /* unlisted: never waits */
        send_n(&p, &sink, 1, BIG);
        receive_exactly(&sink, &p.kp.pub, 1);
    }
    cr_assert_eq(conf_varz_must(&srv, "derp_rate_limit_per_client_waited"), 0);
    for (int i = 0; i < 5; i++) { /* 300 KB at 200 KB/s past a 64 KiB burst: it waits */
        send_n(&r, &sink, 1, BIG);
        receive_exactly(&sink, &kr.pub, 1);
    }
    int64_t waited = conf_varz_must(&srv, "derp_rate_limit_per_client_waited");
    cr_assert_gt(waited, 0, "the key's own rate never made it wait");
    cr_assert_eq(conf_varz_must(&srv, "hderp_rate_limit_key_waited"), waited,
                 "waits not counted as the key's");
    conf_raw_close(&r);
    conf_raw_close(&p);
    conf_raw_close(&sink);
    conf_server_stop_clean(&srv);
}
