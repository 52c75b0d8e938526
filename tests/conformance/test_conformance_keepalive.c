/* test_conformance_keepalive.c - spec §6.4 against a real hderp-server: clients that log in
 * together get their first KeepAlive spread over the whole period (issue 11 item 5: at the
 * period's end, 4,000 peers sent ~800 a second for 5 s each minute), and every later one a full
 * period after the one before (derper's ticker). The period is shortened with the test flag
 * --keepalive-interval. Raw blocking clients, read with poll. */
#include <criterion/criterion.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf_support.h"

/* Enough clients that a uniform spread puts ~50 in each quarter of the period, so a quarter
 * below a tenth of them (4.9 standard deviations low) does not happen by chance. */
#define KA_CLIENTS   200
#define KA_PERIOD_MS 4000
#define KA_BINS      4
/* A KeepAlive timer may fire a tick early or late: a later one must come at least this close
 * to a full period after the one before. */
#define KA_SLACK_MS 250

static struct conf_server srv;
static struct conf_raw raw[KA_CLIENTS];
static unsigned raw_open;

static void down(void)
{
    for (unsigned i = 0; i < raw_open; i++)
        conf_raw_close(&raw[i]);
    raw_open = 0;
    if (srv.pid > 0)
        conf_server_stop(&srv);
}

TestSuite(test_conformance_keepalive, .fini = down, .timeout = 240);

/* When each client's KeepAlives were read (0: not yet). A frame read by one drain arrived after
 * the previous drain of that client began (it read all there was): first_after_ms. */
struct ka_seen {
    int64_t login_ms, first_ms, second_ms;
    int64_t looked_ms, first_after_ms;
};

/* Reads every frame that has arrived (buffered or on the socket) on client i; notes KeepAlives.
 * conf_raw_read with no time left does not look at the socket: poll says whether to read. */
static void drain(unsigned i, struct ka_seen *s)
{
    int64_t start = conf_now_ms();
    for (;;) {
        struct pollfd p = {.fd = raw[i].fd, .events = POLLIN};
        if (raw[i].len < DERP_FRAME_HEADER_LEN && poll(&p, 1, 0) <= 0) {
            s->looked_ms = start;
            return;
        }
        struct conf_frame f;
        int rc = conf_raw_read(&raw[i], CONF_IO_TIMEOUT_MS, &f); /* bytes are there */
        cr_assert_eq(rc, 0, "client %u: read: %d", i, rc);
        cr_assert_eq(f.type, DERP_FRAME_KEEP_ALIVE, "client %u: frame type %u", i, f.type);
        int64_t now = conf_now_ms();
        if (s->first_ms == 0) {
            s->first_ms = now;
            s->first_after_ms = s->looked_ms ? s->looked_ms : s->login_ms;
        } else if (s->second_ms == 0) {
            s->second_ms = now;
        }
    }
}

/* Polls every client until each has had two KeepAlives (bounded: a broken server fails here). */
static void collect(struct ka_seen *seen)
{
    static struct pollfd pf[KA_CLIENTS];
    int64_t deadline = conf_now_ms() + 4 * KA_PERIOD_MS + 60000;
    for (;;) {
        unsigned waiting = 0;
        for (unsigned i = 0; i < KA_CLIENTS; i++) {
            drain(i, &seen[i]);
            waiting += seen[i].second_ms == 0;
            pf[i] = (struct pollfd){.fd = raw[i].fd, .events = POLLIN};
        }
        if (waiting == 0)
            return;
        cr_assert_lt(conf_now_ms(), deadline, "%u clients still wait for KeepAlives", waiting);
        poll(pf, KA_CLIENTS, 100);
    }
}

Test(test_conformance_keepalive, first_spread_over_the_period)
{
    char period[32];
    snprintf(period, sizeof(period), "%dms", KA_PERIOD_MS);
    CONF_OK(conf_server_start(&srv, &(struct conf_server_opts){.keepalive = period}));
    static struct ka_seen seen[KA_CLIENTS];
    for (unsigned i = 0; i < KA_CLIENTS; i++) {
        CONF_OK(conf_raw_login(&raw[i], &srv, NULL, NULL));
        raw_open = i + 1;
        seen[i].login_ms = conf_now_ms();
        for (unsigned j = 0; j < i; j++) /* the earlier ones' KeepAlives, timed as they come */
            drain(j, &seen[j]);
    }
    collect(seen);
    unsigned bins[KA_BINS] = {0};
    for (unsigned i = 0; i < KA_CLIENTS; i++) {
        int64_t first = seen[i].first_ms - seen[i].login_ms; /* < 0: read with ServerInfo */
        first = first < 0 ? 0 : first;
        unsigned b = (unsigned)(first * KA_BINS / KA_PERIOD_MS);
        bins[b < KA_BINS ? b : KA_BINS - 1]++; /* late ones (a busy machine) count as last */
        /* the most they can have been apart: how late the first was read cannot fail this */
        int64_t gap = seen[i].second_ms - seen[i].first_after_ms;
        cr_assert_geq(gap, KA_PERIOD_MS - KA_SLACK_MS, "client %u: KeepAlives %lld ms apart", i,
                      (long long)gap);
    }
    for (unsigned b = 0; b < KA_BINS; b++) {
        cr_log_info("first KeepAlive in quarter %u of the period: %u clients", b, bins[b]);
        cr_assert_geq(bins[b], KA_CLIENTS / 10,
                      "quarter %u of the period: %u of %d first KeepAlives", b, bins[b],
                      KA_CLIENTS);
    }
    for (unsigned i = 0; i < raw_open; i++)
        conf_raw_close(&raw[i]);
    raw_open = 0;
    cr_assert_eq(conf_server_stop(&srv), 0);
}
