/* test_conformance_harden.c - issue 16 against a real hderp-server: a client that drips bytes
 * cannot hold a connection past the absolute deadlines (the HTTP head from accept, the DERP
 * login from the upgrade; shortened with --http-deadline / --login-deadline), a logged-in
 * client is not cut by them, and connections not logged in yet are capped per source address
 * (--prelogin-per-addr-max) with the count returning to zero. Raw blocking clients. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <arpa/inet.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "conf_support.h"

static struct conf_server srv;

static void down(void)
{
    if (srv.pid > 0)
        conf_server_stop(&srv);
}

TestSuite(test_conformance_harden, .fini = down, .timeout = 120);

/* The drip: one byte every DRIP_MS, far inside the idle timeouts (30 s HTTP, 10 s login) that
 * used to restart on each byte, for at most DRIP_MAX_MS: the server must close first. */
#define DRIP_MS     100
#define DRIP_MAX_MS 20000

/* Writes data one byte per DRIP_MS (then nothing more) until the server closes; returns 0 when
 * it did (EOF or reset seen), -ETIMEDOUT when it was still open after DRIP_MAX_MS. data is
 * never complete, so only a deadline can close the connection. */
static int drip_until_closed(struct conf_raw *r, const uint8_t *data, size_t len)
{
    int64_t end = conf_now_ms() + DRIP_MAX_MS;
    for (size_t i = 0; conf_now_ms() < end; i++) {
        if (i < len && send(r->fd, data + i, 1, MSG_NOSIGNAL) != 1)
            return 0; /* reset: closed */
        struct conf_frame f;
        int rc = conf_raw_read(r, DRIP_MS, &f);
        if (rc == -ESHUTDOWN || rc == -ECONNRESET)
            return 0;
    }
    return -ETIMEDOUT;
}

static const char *const short_deadlines[] = {"--http-deadline", "700ms", "--login-deadline",
                                              "700ms", NULL};

/* The request head dripped byte by byte: closed at the HTTP deadline (derper: 30 s). */
Test(test_conformance_harden, http_head_drip_closed)
{
    CONF_OK(conf_server_start(&srv, &(struct conf_server_opts){.extra = short_deadlines}));
    struct conf_raw r;
    CONF_OK(conf_raw_open(&r, &srv, NULL));
    static const char head[] = "GET /derp/probe HTTP/1.1\r\nHost: x\r\nX-Pad: aaaaaaaaaaaa";
    cr_assert_eq(drip_until_closed(&r, (const uint8_t *)head, sizeof(head) - 1), 0,
                 "a dripped request head kept the connection open");
    conf_raw_close(&r);
    int64_t v = 0;
    CONF_OK(conf_varz(&srv, "hderp_deadline_closes", false, &v));
    cr_assert_geq(v, 1);
    CONF_OK(conf_varz_wait(&srv, "hderp_prelogin_conns", 1, CONF_IO_TIMEOUT_MS, &v)); /* varz */
    cr_assert_eq(conf_server_stop(&srv), 0);
}

/* The upgrade, then ClientInfo dripped: closed at the login deadline (derper: 10 s). */
Test(test_conformance_harden, login_drip_closed)
{
    CONF_OK(conf_server_start(&srv, &(struct conf_server_opts){.extra = short_deadlines}));
    struct conf_raw r;
    CONF_OK(conf_raw_open(&r, &srv, NULL));
    CONF_OK(conf_raw_upgrade(&r, NULL));
    cr_assert_eq(r.http_status, 101);
    CONF_OK(conf_raw_read_server_key(&r));
    uint8_t ci[1024];
    ssize_t n = conf_raw_client_info(&r, NULL, ci, sizeof(ci));
    cr_assert_gt(n, 1);
    /* never the last byte: the frame must stay incomplete */
    cr_assert_eq(drip_until_closed(&r, ci, (size_t)n - 1), 0,
                 "a dripped ClientInfo kept the connection open");
    conf_raw_close(&r);
    cr_assert_eq(conf_server_stop(&srv), 0);
}

/* A logged-in client outlives both deadlines (they end at the login) and still gets a Pong. */
Test(test_conformance_harden, logged_in_client_not_cut)
{
    CONF_OK(conf_server_start(&srv, &(struct conf_server_opts){.extra = short_deadlines}));
    struct conf_raw r;
    CONF_OK(conf_raw_login(&r, &srv, NULL, NULL));
    conf_sleep_ms(1500); /* twice the deadlines: what is tested is that nothing fires */
    CONF_OK(conf_raw_ping_pong(&r, 42, CONF_IO_TIMEOUT_MS));
    conf_raw_close(&r);
    int64_t v = -1;
    CONF_OK(conf_varz(&srv, "hderp_deadline_closes", false, &v));
    cr_assert_eq(v, 0);
    cr_assert_eq(conf_server_stop(&srv), 0);
}

#define ADDR_MAX 4

/* A TCP connection to the server from source address 127.0.0.2 (the varz requests come from
 * 127.0.0.1, so they are not under the cap being filled). */
static int connect_from(const char *src)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    inet_pton(AF_INET, src, &a.sin_addr);
    struct sockaddr_in d = {.sin_family = AF_INET, .sin_port = htons(srv.port)};
    inet_pton(AF_INET, "127.0.0.1", &d.sin_addr);
    cr_assert(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
                  connect(fd, (struct sockaddr *)&d, sizeof(d)) == 0,
              "connect from %s: %s", src, strerror(errno));
    return fd;
}

/* ADDR_MAX silent connections from one address fill its cap (one shard): the next one is
 * closed at once and counted; once they go, the gauge is back to the varz request alone and
 * that address is served again (every pre-login phase leaves the count). */
Test(test_conformance_harden, prelogin_per_addr_cap)
{
    static const char *const extra[] = {"--prelogin-per-addr-max", "4", NULL};
    CONF_OK(conf_server_start(&srv, &(struct conf_server_opts){.shards = 1, .extra = extra}));
    int idle[ADDR_MAX];
    for (int i = 0; i < ADDR_MAX; i++)
        idle[i] = connect_from("127.0.0.2");
    /* all of them accepted (the varz request counts itself too) */
    int64_t v = 0;
    CONF_OK(conf_varz_wait(&srv, "hderp_prelogin_conns", ADDR_MAX + 1, CONF_IO_TIMEOUT_MS, &v));
    int over = connect_from("127.0.0.2");
    char b;
    struct timeval tv = {.tv_sec = CONF_IO_TIMEOUT_MS / 1000};
    setsockopt(over, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    cr_assert_leq(recv(over, &b, 1, 0), 0, "over the cap: closed at once");
    close(over);
    CONF_OK(conf_varz(&srv, "hderp_prelogin_refused{cap=\"addr\"}", false, &v));
    cr_assert_eq(v, 1);
    for (int i = 0; i < ADDR_MAX; i++)
        close(idle[i]);
    CONF_OK(conf_varz_wait(&srv, "hderp_prelogin_conns", 1, CONF_IO_TIMEOUT_MS, &v));
    int again = connect_from("127.0.0.2");
    static const char req[] = "GET /derp/probe HTTP/1.1\r\nHost: x\r\n\r\n";
    cr_assert_eq(send(again, req, sizeof(req) - 1, MSG_NOSIGNAL), (ssize_t)sizeof(req) - 1);
    setsockopt(again, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char resp[64] = {0};
    cr_assert_gt(recv(again, resp, sizeof(resp) - 1, 0), 12);
    cr_assert(strncmp(resp, "HTTP/1.1 200", 12) == 0, "served again: %s", resp);
    close(again);
    struct conf_raw ok;
    CONF_OK(conf_raw_login(&ok, &srv, NULL, NULL));
    CONF_OK(conf_raw_ping_pong(&ok, 7, CONF_IO_TIMEOUT_MS));
    CONF_OK(conf_varz_wait(&srv, "hderp_prelogin_conns", 1, CONF_IO_TIMEOUT_MS, &v));
    conf_raw_close(&ok);
    cr_assert_eq(conf_server_stop(&srv), 0);
}
