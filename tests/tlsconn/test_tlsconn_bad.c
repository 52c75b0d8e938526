/* test_tlsconn_bad.c - bad input after the handshake closes only its own connection: a victim
 * client writes raw bytes past its TLS codec (a record with a wrong tag, an oversized length,
 * a wrong outer type, or a cut record then EOF); the server closes it with the matching error
 * while a second connection on the same shard keeps exchanging data. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tlsconn_server.h"
#include "tlsconn_util.h"

static struct tls_ctx *bad_client_ctx;
static const uint8_t *bad_bytes;
static size_t bad_len;
static bool bad_then_eof;

static struct {
    struct net_conn *victim, *bystander;
    bool wrote;
    bool victim_closed;
    char got[64];
    size_t got_len;
    _Atomic int bystander_ok;
} bad;

static struct net_conn *bad_start(struct hd_shard *s, const struct net_conn_handler *h,
                                  tls_handshake_fn *fn)
{
    struct net_addr a;
    char text[32];
    snprintf(text, sizeof(text), "127.0.0.1:%u", ts.port);
    HDT_CHECK(net_addr_parse(text, &a) == 0);
    struct net_conn *c;
    HDT_CHECK(net_conn_connect(s, &a, 5000, h, NULL, NULL, &c) == 0);
    struct tls_conn_options o = {.on_handshake = fn};
    HDT_CHECK(tls_conn_start(c, bad_client_ctx, &o) == 0);
    return c;
}

static ssize_t by_data(struct net_conn *c, const uint8_t *data, size_t len)
{
    size_t n = len < sizeof(bad.got) - 1 - bad.got_len ? len : sizeof(bad.got) - 1 - bad.got_len;
    memcpy(bad.got + bad.got_len, data, n);
    bad.got_len += n;
    if (bad.got_len >= 6) {
        atomic_store(&bad.bystander_ok, memcmp(bad.got, "alive\n", 6) == 0 ? 1 : -1);
        net_conn_close(c, 0, false);
    }
    return (ssize_t)len;
}

static void by_close(struct net_conn *c, int reason)
{
    (void)c, (void)reason;
}

static void victim_close(struct net_conn *c, int reason)
{
    (void)reason;
    bad.victim_closed = true;
    /* The victim is gone: the bystander must still work. */
    HDT_CHECK(net_conn_state(bad.bystander) == NET_CONN_OPEN);
    HDT_CHECK(net_conn_send_copy(bad.bystander, "alive\n", 6) == 0);
    (void)c;
}

static const struct net_conn_handler by_handler = {.on_data = by_data, .on_close = by_close};

/* The echo of "hi" proves the server finished its handshake: now the bad bytes go straight to
 * the victim's socket, behind every record its codec sent. */
static ssize_t victim_data(struct net_conn *c, const uint8_t *d, size_t n)
{
    (void)d;
    if (bad.wrote)
        return (ssize_t)n;
    bad.wrote = true;
    int fd = net_conn_fd(c);
    HDT_CHECK(write(fd, bad_bytes, bad_len) == (ssize_t)bad_len);
    if (bad_then_eof)
        shutdown(fd, SHUT_WR);
    return (ssize_t)n;
}

static const struct net_conn_handler victim_handler = {.on_data = victim_data,
                                                       .on_close = victim_close};

static void victim_handshake(struct net_conn *c, const struct tls_conn_info *info)
{
    (void)info;
    HDT_CHECK(net_conn_send_copy(c, "hi\n", 3) == 0);
}

static void bad_body(struct hd_shard *s, void *arg)
{
    (void)arg;
    bad.victim = bad_start(s, &victim_handler, victim_handshake);
    bad.bystander = bad_start(s, &by_handler, NULL);
}

static void run_bad(const uint8_t *bytes, size_t len, bool then_eof)
{
    ts_reset();
    memset(&bad, 0, sizeof(bad));
    bad_bytes = bytes;
    bad_len = len;
    bad_then_eof = then_eof;
    struct tls_server_options so = {.self_signed_host = "localhost"};
    cr_assert_eq(tls_server_ctx_create(&so, &ts.ctx), 0);
    struct tls_client_options co = {.insecure = true};
    cr_assert_eq(tls_client_ctx_create(&co, &bad_client_ctx), 0);
    ts_run_with(1, NULL, bad_body, 2);
    tls_ctx_destroy(ts.ctx);
    tls_ctx_destroy(bad_client_ctx);
    cr_assert_eq(atomic_load(&ts.handshakes), 2);
    cr_assert_eq(atomic_load(&ts.closes), 2);
    cr_assert_eq(atomic_load(&bad.bystander_ok), 1, "the other connection was disturbed");
    cr_assert_eq(atomic_load(&ts.reasons[1]), 0, "bystander closed with %d", ts.reasons[1]);
}

/* A well-formed header and 32 bytes that are no valid ciphertext: bad_record_mac. */
Test(test_tlsconn_bulk, garbage_record_closes_only_its_conn)
{
    static const uint8_t rec[5 + 32] = {0x17, 0x03, 0x03, 0x00, 0x20, 1, 2, 3, 4, 5, 6, 7, 8};
    run_bad(rec, sizeof(rec), false);
    cr_assert_eq(atomic_load(&ts.reasons[0]), -EBADMSG, "victim closed with %d", ts.reasons[0]);
    cr_assert_eq(atomic_load(&ts.record_errors), 1);
}

/* A length over 2^14 + 256 is refused before waiting for the body (record_overflow). */
Test(test_tlsconn_bulk, oversized_record_closes_only_its_conn)
{
    static const uint8_t rec[5] = {0x17, 0x03, 0x03, 0xff, 0xff};
    run_bad(rec, sizeof(rec), false);
    cr_assert_eq(atomic_load(&ts.reasons[0]), -EMSGSIZE, "victim closed with %d", ts.reasons[0]);
}

/* An outer content type other than application_data after the handshake. */
Test(test_tlsconn_bulk, mistyped_record_closes_only_its_conn)
{
    static const uint8_t rec[5 + 20] = {0x16, 0x03, 0x03, 0x00, 0x14};
    run_bad(rec, sizeof(rec), false);
    cr_assert_eq(atomic_load(&ts.reasons[0]), -EPROTO, "victim closed with %d", ts.reasons[0]);
}

/* A record cut short, then EOF: the victim's connection ends (net reports the EOF to the app:
 * no close_notify came, but the codec has no EOF hook to call it truncation), the other lives. */
Test(test_tlsconn_bulk, truncated_record_closes_only_its_conn)
{
    static const uint8_t rec[5 + 50] = {0x17, 0x03, 0x03, 0x00, 0x64};
    run_bad(rec, sizeof(rec), true);
}
