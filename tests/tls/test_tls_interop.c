/* test_tls_interop.c - tls/ against BoringSSL's own TLS 1.3 stack: a real handshake between an
 * SSL client and an SSL server in this process over memory BIOs (self-signed ECDSA P-256
 * certificate made here), secrets taken from the keylog callback, then records sealed by
 * tls_record are read by the peer's SSL_read and records from SSL_write are opened by
 * tls_record, including KeyUpdate both ways and close_notify. Sequence numbers come from
 * SSL_get_read_sequence / SSL_get_write_sequence. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <string.h>

#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <openssl/base.h>
#ifndef OPENSSL_IS_BORINGSSL
#error "tls/ needs BoringSSL (android-libboringssl-dev)"
#endif
#include <openssl/bio.h>
#include <openssl/digest.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/nid.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "tls_keys.h"
#include "tls_record.h"
#include "tls_test_util.h"

/* What one SSL's keylog callback saw. Failures are recorded, not asserted: the callback runs
 * inside libssl, and a test abort must not unwind through it. */
struct endpoint {
    struct tls_keylog_entry client0, server0;
    int lines_count, bad_lines_count, traffic_count, random_mismatch_count;
};

struct tls_pair {
    SSL_CTX *server_ctx, *client_ctx;
    SSL *server, *client;
    BIO *c2s, *s2c; /* client -> server bytes, server -> client bytes */
    struct endpoint server_ep, client_ep;
    uint16_t suite;
};

static struct tls_pair P;

static void keylog_cb(const SSL *ssl, const char *line)
{
    struct endpoint *ep = SSL_get_app_data(ssl);
    struct tls_keylog_entry e;
    ep->lines_count++;
    int rc = tls_keylog_parse(line, strlen(line), &e);
    if (rc < 0) {
        ep->bad_lines_count++;
        return;
    }
    if (rc == 0)
        return;
    uint8_t random[TLS_CLIENT_RANDOM_LEN];
    if (SSL_get_client_random(ssl, random, sizeof(random)) != sizeof(random) ||
        memcmp(random, e.client_random, sizeof(random)) != 0)
        ep->random_mismatch_count++;
    ep->traffic_count++;
    if (e.kind == TLS_KEYLOG_CLIENT_TRAFFIC_0)
        ep->client0 = e;
    else
        ep->server0 = e;
}

static EVP_PKEY *make_key(void)
{
    EVP_PKEY *pkey = NULL;
    EVP_PKEY_CTX *kctx = EVP_PKEY_CTX_new_id(EVP_PKEY_EC, NULL);
    cr_assert_not_null(kctx);
    cr_assert_eq(EVP_PKEY_keygen_init(kctx), 1);
    cr_assert_eq(EVP_PKEY_CTX_set_ec_paramgen_curve_nid(kctx, NID_X9_62_prime256v1), 1);
    cr_assert_eq(EVP_PKEY_keygen(kctx, &pkey), 1);
    EVP_PKEY_CTX_free(kctx);
    return pkey;
}

static X509 *make_cert(EVP_PKEY *pkey)
{
    X509 *x = X509_new();
    cr_assert_not_null(x);
    cr_assert(X509_set_version(x, X509_VERSION_3));
    cr_assert(ASN1_INTEGER_set(X509_get_serialNumber(x), 1));
    cr_assert_not_null(X509_gmtime_adj(X509_getm_notBefore(x), -3600));
    cr_assert_not_null(X509_gmtime_adj(X509_getm_notAfter(x), 3600));
    X509_NAME *name = X509_get_subject_name(x);
    cr_assert(X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const uint8_t *)"hderp test",
                                         -1, -1, 0));
    cr_assert(X509_set_issuer_name(x, name));
    cr_assert(X509_set_pubkey(x, pkey));
    cr_assert(X509_sign(x, pkey, EVP_sha256()) > 0);
    return x;
}

static BIO *pipe_new(void)
{
    BIO *b = BIO_new(BIO_s_mem());
    cr_assert_not_null(b);
    BIO_set_mem_eof_return(b, -1); /* empty = "retry", so SSL reports WANT_READ */
    return b;
}

static SSL_CTX *ctx_new(void)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_method());
    cr_assert_not_null(ctx);
    cr_assert(SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION));
    SSL_CTX_set_keylog_callback(ctx, keylog_cb);
    return ctx;
}

static void expect_want(SSL *ssl, int rc, const char *who)
{
    if (rc == 1)
        return;
    int err = SSL_get_error(ssl, rc);
    cr_assert(err == SSL_ERROR_WANT_READ, "%s handshake: SSL error %d (lib %u)", who, err,
              (unsigned)ERR_peek_error());
}

/* Starts both endpoints and runs the handshake to completion. */
static void pair_setup(void)
{
    tt_check_boringssl();
    Dl_info info;
    cr_assert(dladdr((void *)SSL_new, &info) && strstr(info.dli_fname, "/android/"),
              "SSL_new must come from BoringSSL's libssl");
    memset(&P, 0, sizeof(P));
    EVP_PKEY *pkey = make_key();
    X509 *cert = make_cert(pkey);
    P.server_ctx = ctx_new();
    P.client_ctx = ctx_new();
    cr_assert(SSL_CTX_use_certificate(P.server_ctx, cert));
    cr_assert(SSL_CTX_use_PrivateKey(P.server_ctx, pkey));
    cr_assert(SSL_CTX_set_num_tickets(P.server_ctx, 0));
    X509_free(cert);
    EVP_PKEY_free(pkey);

    P.server = SSL_new(P.server_ctx);
    P.client = SSL_new(P.client_ctx);
    cr_assert(P.server && P.client);
    SSL_set_app_data(P.server, &P.server_ep);
    SSL_set_app_data(P.client, &P.client_ep);
    P.c2s = pipe_new();
    P.s2c = pipe_new();
    BIO_up_ref(P.c2s); /* each pipe is held by both SSLs */
    BIO_up_ref(P.s2c);
    SSL_set_bio(P.client, P.s2c, P.c2s);
    SSL_set_bio(P.server, P.c2s, P.s2c);
    SSL_set_connect_state(P.client);
    SSL_set_accept_state(P.server);

    int rc_c = 0, rc_s = 0;
    for (int round = 0; round < 16 && (rc_c != 1 || rc_s != 1); round++) {
        rc_c = SSL_do_handshake(P.client);
        expect_want(P.client, rc_c, "client");
        rc_s = SSL_do_handshake(P.server);
        expect_want(P.server, rc_s, "server");
    }
    cr_assert(rc_c == 1 && rc_s == 1, "handshake did not finish");
    cr_assert_eq(SSL_version(P.client), TLS1_3_VERSION);
    P.suite = SSL_CIPHER_get_protocol_id(SSL_get_current_cipher(P.client));
    cr_log_info("negotiated suite %#x", P.suite);
    cr_assert(tls_suite_is_supported(P.suite));

    const struct endpoint *eps[2] = {&P.client_ep, &P.server_ep};
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(eps[i]->bad_lines_count, 0, "BoringSSL wrote a keylog line we reject");
        cr_assert_eq(eps[i]->random_mismatch_count, 0);
        cr_assert_eq(eps[i]->traffic_count, 2, "both traffic secrets logged");
        cr_assert_gt(eps[i]->lines_count, 2, "handshake secrets are logged and ignored");
    }
    cr_assert_arr_eq(&P.client_ep.client0, &P.server_ep.client0, sizeof(P.client_ep.client0));
    cr_assert_arr_eq(&P.client_ep.server0, &P.server_ep.server0, sizeof(P.client_ep.server0));
}

static void pair_teardown(void)
{
    SSL_free(P.client);
    SSL_free(P.server);
    SSL_CTX_free(P.client_ctx);
    SSL_CTX_free(P.server_ctx);
}

TestSuite(tls_interop, .init = pair_setup, .fini = pair_teardown);

/* A record state from a logged secret at the SSL's current sequence number. */
static void state_from(struct tls_record_state *st, const struct tls_keylog_entry *e, uint64_t seq)
{
    struct tls_traffic_keys keys;
    cr_assert_eq(tls_traffic_keys_init(&keys, P.suite, e->secret, e->secret_len), 0);
    cr_assert_eq(tls_record_state_init(st, &keys, seq), 0);
    tls_traffic_keys_deinit(&keys);
}

static uint8_t sealed[256 * 1024], drained[256 * 1024], got[256 * 1024];
static uint8_t payload[100 * 1400];

static void fill_payload(uint8_t salt)
{
    for (size_t i = 0; i < sizeof(payload); i++)
        payload[i] = (uint8_t)(i * 13 + salt + (i >> 9));
}

/* Writes raw bytes into a pipe as if the other SSL had sent them. */
static void pipe_put(BIO *b, const uint8_t *data, size_t len)
{
    cr_assert_eq(BIO_write(b, data, (int)len), (int)len);
}

/* Everything waiting in a pipe. */
static size_t pipe_drain(BIO *b, uint8_t *out, size_t cap)
{
    size_t n = 0;
    while (BIO_pending(b) > 0) {
        cr_assert_lt(n, cap);
        int r = BIO_read(b, out + n, (int)(cap - n));
        cr_assert_gt(r, 0);
        n += (size_t)r;
    }
    return n;
}

/* SSL_read until want bytes arrived; the test fails on anything else. */
static void ssl_read_all(SSL *ssl, uint8_t *out, size_t want)
{
    size_t n = 0;
    for (int i = 0; n < want && i < 1000; i++) {
        int r = SSL_read(ssl, out + n, (int)(want - n));
        cr_assert_gt(r, 0, "SSL_read: error %d", SSL_get_error(ssl, r));
        n += (size_t)r;
    }
    cr_assert_eq(n, want);
}

/* Seals len bytes of payload as 1400-byte frames (coalesced into 16 KiB records) into pipe. */
static void seal_frames(struct tls_record_state *tx, BIO *pipe, size_t len)
{
    struct iovec iov[100];
    size_t count = 0;
    for (size_t off = 0; off < len; off += 1400, count++)
        iov[count] = (struct iovec){payload + off, len - off < 1400 ? len - off : 1400};
    size_t consumed = 0;
    ssize_t n = tls_record_seal_iov(tx, iov, count, &consumed, sealed, sizeof(sealed));
    cr_assert_gt(n, 0);
    cr_assert_eq(consumed, len);
    pipe_put(pipe, sealed, (size_t)n);
}

/* Opens every record in pipe with rx, expecting application data; returns the plaintext. */
static size_t open_pipe(struct tls_record_state *rx, BIO *pipe)
{
    size_t n = pipe_drain(pipe, drained, sizeof(drained)), records;
    return tt_open_stream(rx, drained, n, got, sizeof(got), &records);
}

/* We are the client: our records reach the server's SSL_read, its SSL_write reaches us. */
Test(tls_interop, userspace_client_with_boringssl_server)
{
    fill_payload(1);
    struct tls_record_state tx, rx;
    state_from(&tx, &P.client_ep.client0, SSL_get_write_sequence(P.client));
    state_from(&rx, &P.client_ep.server0, SSL_get_read_sequence(P.client));

    seal_frames(&tx, P.c2s, sizeof(payload)); /* 140000 bytes: 9 records */
    ssl_read_all(P.server, got, sizeof(payload));
    cr_assert_arr_eq(got, payload, sizeof(payload));
    cr_assert_eq(SSL_get_read_sequence(P.server), tx.seq);

    static const int writes[] = {1, 1400, 20000, 16384, 77};
    size_t total = 0;
    for (size_t i = 0; i < 5; i++) {
        cr_assert_eq(SSL_write(P.server, payload + total, writes[i]), writes[i]);
        total += (size_t)writes[i];
    }
    cr_assert_eq(open_pipe(&rx, P.s2c), total);
    cr_assert_arr_eq(got, payload, total);
    cr_assert_eq(rx.seq, SSL_get_write_sequence(P.server));
}

/* We are the server: the same both ways with the server's secrets. */
Test(tls_interop, userspace_server_with_boringssl_client)
{
    fill_payload(2);
    struct tls_record_state tx, rx;
    state_from(&tx, &P.server_ep.server0, SSL_get_write_sequence(P.server));
    state_from(&rx, &P.server_ep.client0, SSL_get_read_sequence(P.server));

    seal_frames(&tx, P.s2c, 12 * 1400);
    ssl_read_all(P.client, got, 12 * 1400);
    cr_assert_arr_eq(got, payload, 12 * 1400);

    cr_assert_eq(SSL_write(P.client, payload, 50000), 50000);
    cr_assert_eq(open_pipe(&rx, P.c2s), 50000);
    cr_assert_arr_eq(got, payload, 50000);
    cr_assert_eq(rx.seq, SSL_get_write_sequence(P.client));
}

/* Taking over mid-stream: BoringSSL exchanged records first; the sequence numbers it reports
 * continue exactly where it stopped. */
Test(tls_interop, takeover_after_boringssl_records)
{
    fill_payload(3);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(SSL_write(P.server, payload, 100), 100);
        ssl_read_all(P.client, got, 100);
        cr_assert_eq(SSL_write(P.client, payload, 200), 200);
        ssl_read_all(P.server, got, 200);
    }
    cr_assert_eq(SSL_get_read_sequence(P.client), 3);
    struct tls_record_state tx, rx;
    state_from(&tx, &P.client_ep.client0, SSL_get_write_sequence(P.client));
    state_from(&rx, &P.client_ep.server0, SSL_get_read_sequence(P.client));
    cr_assert_eq(tx.seq, 3);

    seal_frames(&tx, P.c2s, 5000);
    ssl_read_all(P.server, got, 5000);
    cr_assert_arr_eq(got, payload, 5000);
    cr_assert_eq(SSL_write(P.server, payload + 7, 3000), 3000);
    cr_assert_eq(open_pipe(&rx, P.s2c), 3000);
    cr_assert_arr_eq(got, payload + 7, 3000);
}

/* Opens one record from raw bytes and checks it is a KeyUpdate. */
static size_t open_key_update(struct tls_record_state *rx, uint8_t *buf, size_t len,
                              bool *requested)
{
    struct tls_record_in rec;
    struct tls_post_handshake ph;
    cr_assert_eq(tls_record_open(rx, buf, len, &rec), 0);
    cr_assert_eq(rec.type, TLS_CONTENT_HANDSHAKE);
    cr_assert_eq(tls_post_handshake_parse(rec.data, rec.data_len, &ph), 0);
    cr_assert(ph.key_update);
    *requested = ph.update_requested;
    cr_assert_eq(tls_record_state_update(rx), 0);
    return rec.record_len;
}

/* The BoringSSL server asks for a KeyUpdate: we update our read side, answer with ours, and
 * traffic continues under the new keys in both directions. */
Test(tls_interop, key_update_from_boringssl)
{
    fill_payload(4);
    struct tls_record_state tx, rx;
    state_from(&tx, &P.client_ep.client0, SSL_get_write_sequence(P.client));
    state_from(&rx, &P.client_ep.server0, SSL_get_read_sequence(P.client));

    cr_assert(SSL_key_update(P.server, SSL_KEY_UPDATE_REQUESTED));
    cr_assert_eq(SSL_write(P.server, payload, 1000), 1000);
    size_t n = pipe_drain(P.s2c, drained, sizeof(drained));
    bool requested = false;
    size_t off = open_key_update(&rx, drained, n, &requested);
    cr_assert(requested);
    size_t records;
    cr_assert_eq(tt_open_stream(&rx, drained + off, n - off, got, sizeof(got), &records), 1000);
    cr_assert_arr_eq(got, payload, 1000);

    /* Our reply KeyUpdate(not requested), then data under our new write keys. */
    ssize_t k = tls_record_seal_key_update(&tx, false, sealed, sizeof(sealed));
    cr_assert_gt(k, 0);
    pipe_put(P.c2s, sealed, (size_t)k);
    cr_assert_eq(tls_record_state_update(&tx), 0);
    seal_frames(&tx, P.c2s, 30000);
    ssl_read_all(P.server, got, 30000);
    cr_assert_arr_eq(got, payload, 30000);
    cr_assert_eq(SSL_get_read_sequence(P.server), tx.seq);

    cr_assert_eq(SSL_write(P.server, payload + 1, 500), 500);
    cr_assert_eq(open_pipe(&rx, P.s2c), 500);
    cr_assert_arr_eq(got, payload + 1, 500);
}

/* We ask the BoringSSL server for a KeyUpdate; it answers with its own before its next data. */
Test(tls_interop, key_update_to_boringssl)
{
    fill_payload(5);
    struct tls_record_state tx, rx;
    state_from(&tx, &P.client_ep.client0, SSL_get_write_sequence(P.client));
    state_from(&rx, &P.client_ep.server0, SSL_get_read_sequence(P.client));

    ssize_t k = tls_record_seal_key_update(&tx, true, sealed, sizeof(sealed));
    cr_assert_gt(k, 0);
    pipe_put(P.c2s, sealed, (size_t)k);
    cr_assert_eq(tls_record_state_update(&tx), 0);
    seal_frames(&tx, P.c2s, 2800);
    ssl_read_all(P.server, got, 2800);
    cr_assert_arr_eq(got, payload, 2800);

    cr_assert_eq(SSL_write(P.server, payload + 9, 700), 700);
    size_t n = pipe_drain(P.s2c, drained, sizeof(drained));
    bool requested = true;
    size_t off = open_key_update(&rx, drained, n, &requested);
    cr_assert(!requested, "the reply must not ask for another update");
    size_t records;
    cr_assert_eq(tt_open_stream(&rx, drained + off, n - off, got, sizeof(got), &records), 700);
    cr_assert_arr_eq(got, payload + 9, 700);
}

/* close_notify both ways. */
Test(tls_interop, close_notify)
{
    struct tls_record_state tx, rx;
    state_from(&tx, &P.client_ep.client0, SSL_get_write_sequence(P.client));
    state_from(&rx, &P.client_ep.server0, SSL_get_read_sequence(P.client));

    /* BoringSSL's close_notify opens as an alert we read as a clean end of stream. */
    cr_assert_geq(SSL_shutdown(P.server), 0);
    size_t n = pipe_drain(P.s2c, drained, sizeof(drained));
    struct tls_record_in rec;
    cr_assert_eq(tls_record_open(&rx, drained, n, &rec), 0);
    cr_assert_eq(rec.record_len, n);
    cr_assert_eq(rec.type, TLS_CONTENT_ALERT);
    uint8_t desc = 0xff;
    cr_assert_eq(tls_alert_parse(rec.data, rec.data_len, &desc), 0);
    cr_assert_eq(desc, TLS_ALERT_CLOSE_NOTIFY);

    /* Ours makes the server's SSL_read report a clean close. */
    ssize_t k = tls_record_seal_alert(&tx, TLS_ALERT_CLOSE_NOTIFY, sealed, sizeof(sealed));
    cr_assert_gt(k, 0);
    pipe_put(P.c2s, sealed, (size_t)k);
    uint8_t byte;
    int r = SSL_read(P.server, &byte, 1);
    cr_assert_eq(r, 0);
    cr_assert_eq(SSL_get_error(P.server, r), SSL_ERROR_ZERO_RETURN);
}

/* A tampered record from us makes BoringSSL fail the read (bad_record_mac), as it must. */
Test(tls_interop, tampered_record_rejected_by_boringssl)
{
    fill_payload(6);
    struct tls_record_state tx;
    state_from(&tx, &P.client_ep.client0, SSL_get_write_sequence(P.client));
    struct iovec iov = {payload, 1400};
    size_t consumed;
    ssize_t n = tls_record_seal_iov(&tx, &iov, 1, &consumed, sealed, sizeof(sealed));
    cr_assert_gt(n, 0);
    sealed[n - 1] ^= 0x80;
    pipe_put(P.c2s, sealed, (size_t)n);
    int r = SSL_read(P.server, got, sizeof(got));
    cr_assert_leq(r, 0);
    cr_assert_eq(SSL_get_error(P.server, r), SSL_ERROR_SSL);
    ERR_clear_error();
}
