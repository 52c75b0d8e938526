/* test_conformance_metrics.c - spec §9 against a real hderp-server: derper's metric names mean
 * what they mean in derper (docs/METRICS.md has the whole table). derp_accepts counts DERP
 * connections (Server.Accept: an upgrade, before its login), not TCP connections, HTTP
 * requests or junk; stun_requests has derper's four dispositions, read_error included;
 * derp_sclient_write_timeouts counts the write deadline only, not the kernel's ETIMEDOUT
 * (TCP_USER_TIMEOUT giving up on a receiver whose window stays shut). Raw blocking clients. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "conf_support.h"

static struct conf_server srv;

static void down(void)
{
    if (srv.pid > 0)
        conf_server_stop(&srv);
}

TestSuite(test_conformance_metrics, .fini = down, .timeout = 180);

/* A plain HTTP exchange on its own connection; the answer's status line must start with want. */
static void http_status(const char *req, const char *want)
{
    static char resp[CONF_HTTP_RESP_MAX];
    ssize_t n = conf_http(&srv, req, resp, sizeof(resp));
    cr_assert_gt(n, 0, "%s: no answer", req);
    cr_assert(strncmp(resp, want, strlen(want)) == 0, "%s: %.40s", req, resp);
}

Test(test_conformance_metrics, accepts_counts_derp_connections)
{
    CONF_OK(conf_server_start(&srv, &(struct conf_server_opts){0}));
    int64_t v = -1;
    /* Not DERP: HTTP requests (probes, varz, a 426 for a missing Upgrade) and a junk peer. */
    http_status("GET /derp/probe HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", "HTTP/1.1 200");
    http_status("GET /generate_204 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                "HTTP/1.1 204");
    http_status("GET /derp HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", "HTTP/1.1 426");
    static char resp[CONF_HTTP_RESP_MAX];
    cr_assert_geq(conf_http(&srv, "\x16\x03\x01 not a request\r\n\r\n", resp, sizeof(resp)), 0);
    CONF_OK(conf_varz(&srv, "hderp_conns_accepted", false, &v));
    cr_assert_geq(v, 5, "every TCP connection is in hderp_conns_accepted (%lld)", (long long)v);
    CONF_OK(conf_varz(&srv, "derp_accepts", false, &v));
    cr_assert_eq(v, 0, "derp_accepts %lld before any DERP connection", (long long)v);
    /* DERP: two logins, and an upgrade that never logs in (derper counts it at Accept). */
    struct conf_raw a, b, c;
    CONF_OK(conf_raw_login(&a, &srv, NULL, NULL));
    CONF_OK(conf_raw_login(&b, &srv, NULL, NULL));
    CONF_OK(conf_raw_open(&c, &srv, NULL));
    CONF_OK(conf_raw_upgrade(&c, NULL));
    cr_assert_eq(c.http_status, 101);
    CONF_OK(conf_raw_read_server_key(&c));
    CONF_OK(conf_varz(&srv, "derp_accepts", false, &v));
    cr_assert_eq(v, 3, "derp_accepts %lld after three DERP connections", (long long)v);
    CONF_OK(conf_varz(&srv, "derp_current_connections", false, &v));
    cr_assert_eq(v, 2, "derp_current_connections %lld: the logged-in ones", (long long)v);
    conf_raw_close(&a);
    conf_raw_close(&b);
    conf_raw_close(&c);
    cr_assert_eq(conf_server_stop(&srv), 0);
}

Test(test_conformance_metrics, stun_read_error_series)
{
    CONF_OK(conf_server_start(&srv, &(struct conf_server_opts){0}));
    static const char *const dispositions[] = {"success", "not_stun", "write_error", "read_error"};
    for (unsigned i = 0; i < 4; i++) {
        char name[80];
        snprintf(name, sizeof(name), "stun_requests{disposition=\"%s\"}", dispositions[i]);
        int64_t v = -1;
        CONF_OK(conf_varz(&srv, name, false, &v));
        cr_assert_eq(v, 0, "%s %lld with no STUN traffic", name, (long long)v);
    }
    cr_assert_eq(conf_server_stop(&srv), 0);
}

/* Packets for the stalled receiver: enough to fill its receive buffer and the server's send
 * buffer many times over, so its window stays shut. */
#define SHUT_PACKETS 400

/* No write deadline (-tcp-write-timeout 0) and a 1 s TCP_USER_TIMEOUT: the kernel gives up on
 * a receiver whose window stays shut and the connection closes with -ETIMEDOUT. derper counts
 * only its own write deadline in sclient_write_timeouts, so that close is not one. */
Test(test_conformance_metrics, kernel_timeout_is_not_a_write_timeout)
{
    static const char *const extra[] = {"-tcp-user-timeout", "1s", NULL};
    CONF_OK(
        conf_server_start(&srv, &(struct conf_server_opts){.write_timeout = "0", .extra = extra}));
    struct conf_raw a, b;
    CONF_OK(conf_raw_login(&a, &srv, NULL, NULL));
    CONF_OK(conf_raw_login(&b, &srv, NULL, NULL)); /* never reads again */
    static uint8_t big[DERP_PACKET_LEN_MAX];
    memset(big, 0xbb, sizeof(big));
    for (unsigned i = 0; i < SHUT_PACKETS; i++)
        CONF_OK(conf_raw_send_packet(&a, &b.kp.pub, big, sizeof(big)));
    int64_t v = -1;
    /* The kernel's zero-window probes give up after the user timeout: B goes. */
    int rc = conf_varz_wait(&srv, "derp_current_connections", 1, 60000, &v);
    cr_assert_eq(rc, 0, "the shut receiver is still connected (%lld connections)", (long long)v);
    CONF_OK(conf_varz(&srv, "derp_sclient_write_timeouts", false, &v));
    cr_assert_eq(v, 0, "a kernel timeout counted as a write timeout (%lld)", (long long)v);
    CONF_OK(conf_raw_ping_pong(&a, 1, CONF_IO_TIMEOUT_MS)); /* the sender is fine */
    conf_raw_close(&a);
    conf_raw_close(&b);
    cr_assert_eq(conf_server_stop(&srv), 0);
}
