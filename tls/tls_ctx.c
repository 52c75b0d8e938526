/* tls_ctx.c - TLS contexts: a server SSL_CTX from PEM files or a self-signed ECDSA P-256
 * certificate made at start (dev mode; tls_self_signed_write also writes one out as PEM files),
 * a client SSL_CTX verifying against a CA file, the system roots (tls_roots.c) or explicitly not
 * at all, the keylog callback that hands traffic secrets to the record layer, and the
 * once-per-process kTLS probe (the kernel's tls ULP). Session tickets are off. Contexts are made
 * on the main thread at start-up and only read afterwards (SSL_new from any shard is safe on a
 * const SSL_CTX). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/ec_key.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/nid.h>
#include <openssl/obj.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "tls_impl.h"

#ifndef TCP_ULP
#define TCP_ULP 31 /* include/uapi/linux/tcp.h */
#endif

/* Dev certificates: valid from an hour ago (clock skew) for a year. */
#define TLS_DEV_CERT_BACKDATE_S (60L * 60L)
#define TLS_DEV_CERT_VALID_S    (365L * 24L * 60L * 60L)

static const uint8_t alpn_http11[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};

void tls_keylog_cb(const SSL *ssl, const char *line)
{
    struct tls_handshake *hs = SSL_get_app_data(ssl);
    if (hs == NULL)
        return;
    struct tls_keylog_entry e;
    if (tls_keylog_parse(line, strlen(line), &e) != 1)
        return; /* handshake secrets, exporter: not ours to keep */
    if (e.kind == TLS_KEYLOG_CLIENT_TRAFFIC_0) {
        hs->client_secret = e;
        hs->secrets_seen |= 1u;
    } else {
        hs->server_secret = e;
        hs->secrets_seen |= 2u;
    }
    OPENSSL_cleanse(&e, sizeof(e));
}

/* Offer http/1.1 when the client asks for it; clients that send no ALPN get none. */
static int alpn_select(SSL *ssl, const uint8_t **out, uint8_t *out_len, const uint8_t *in,
                       unsigned in_len, void *arg)
{
    (void)ssl, (void)arg;
    uint8_t *sel;
    if (SSL_select_next_proto(&sel, out_len, alpn_http11, sizeof(alpn_http11), in, in_len) !=
        OPENSSL_NPN_NEGOTIATED)
        return SSL_TLSEXT_ERR_NOACK;
    *out = sel;
    return SSL_TLSEXT_ERR_OK;
}

static SSL_CTX *ctx_new_common(void)
{
    SSL_CTX *c = SSL_CTX_new(TLS_method());
    if (c == NULL)
        return NULL;
    /* TLS 1.3 only: the record layer after the handshake speaks only 1.3 (see tls.h). */
    if (!SSL_CTX_set_min_proto_version(c, TLS1_3_VERSION) ||
        !SSL_CTX_set_max_proto_version(c, TLS1_3_VERSION)) {
        SSL_CTX_free(c);
        return NULL;
    }
    SSL_CTX_set_session_cache_mode(c, SSL_SESS_CACHE_OFF);
    SSL_CTX_set_keylog_callback(c, tls_keylog_cb);
    return c;
}

/* The error the last failing BoringSSL file/PEM call left, as an errno. */
/* BoringSSL's error queue as an errno: a system error anywhere in it (the fopen under a PEM
 * read: ENOENT, EACCES) wins over fallback; the last entry is logged. */
static int err_to_errno(int fallback)
{
    uint32_t e, last = 0;
    int rc = fallback;
    while ((e = ERR_get_error()) != 0) {
        if (ERR_GET_LIB(e) == ERR_LIB_SYS && ERR_GET_REASON(e) > 0)
            rc = -ERR_GET_REASON(e);
        last = e;
    }
    char buf[160];
    ERR_error_string_n(last, buf, sizeof(buf));
    hd_log(HD_LOG_ERROR, "tls: %s", buf);
    return rc;
}

/* A PEM file the server reads: 0, or why it cannot be (open's errno, -EISDIR), before
 * BoringSSL's error queue would say only "system library". */
static int file_readable(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct stat st;
    int rc = fstat(fd, &st) < 0 ? -errno : S_ISDIR(st.st_mode) ? -EISDIR : 0;
    close(fd);
    return rc;
}

/* ---------------------------------------------------------------- dev certificate */

static EVP_PKEY *p256_key_new(void)
{
    EC_KEY *ec = EC_KEY_new_by_curve_name(NID_X9_62_prime256v1);
    EVP_PKEY *pk = EVP_PKEY_new();
    if (ec == NULL || pk == NULL || !EC_KEY_generate_key(ec) || !EVP_PKEY_assign_EC_KEY(pk, ec)) {
        EC_KEY_free(ec);
        EVP_PKEY_free(pk);
        return NULL;
    }
    return pk;
}

/* subjectAltName with one entry: iPAddress for an IP literal, dNSName otherwise. */
static int add_san(X509 *x, const char *host)
{
    GENERAL_NAMES *names = sk_GENERAL_NAME_new_null();
    GENERAL_NAME *gn = GENERAL_NAME_new();
    int rc = -ENOMEM;
    if (names == NULL || gn == NULL)
        goto out_free;
    ASN1_OCTET_STRING *ip = a2i_IPADDRESS(host);
    if (ip) {
        GENERAL_NAME_set0_value(gn, GEN_IPADD, ip);
    } else {
        ASN1_IA5STRING *dns = ASN1_IA5STRING_new();
        if (dns == NULL || !ASN1_STRING_set(dns, host, (int)strlen(host))) {
            ASN1_IA5STRING_free(dns);
            goto out_free;
        }
        GENERAL_NAME_set0_value(gn, GEN_DNS, dns);
    }
    if (!sk_GENERAL_NAME_push(names, gn))
        goto out_free;
    gn = NULL;
    rc = X509_add1_ext_i2d(x, NID_subject_alt_name, names, 0, 0) == 1 ? 0 : -ENOMEM;
out_free:
    GENERAL_NAME_free(gn);
    sk_GENERAL_NAME_pop_free(names, GENERAL_NAME_free);
    return rc;
}

static X509 *self_signed_new(EVP_PKEY *pk, const char *host)
{
    X509 *x = X509_new();
    if (x == NULL)
        return NULL;
    uint8_t serial[8];
    RAND_bytes(serial, sizeof(serial));
    serial[0] &= 0x7f; /* a positive INTEGER */
    BIGNUM *bn = BN_bin2bn(serial, sizeof(serial), NULL);
    X509_NAME *name = X509_get_subject_name(x);
    bool ok =
        bn && X509_set_version(x, X509_VERSION_3) &&
        BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x)) &&
        X509_gmtime_adj(X509_getm_notBefore(x), -TLS_DEV_CERT_BACKDATE_S) &&
        X509_gmtime_adj(X509_getm_notAfter(x), TLS_DEV_CERT_VALID_S) &&
        X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, (const uint8_t *)host, -1, -1, 0) &&
        X509_set_issuer_name(x, name) && X509_set_pubkey(x, pk) && add_san(x, host) == 0 &&
        X509_sign(x, pk, EVP_sha256()) > 0;
    BN_free(bn);
    if (!ok) {
        X509_free(x);
        return NULL;
    }
    return x;
}

static int use_self_signed(SSL_CTX *c, const char *host)
{
    if (host == NULL || host[0] == '\0' || strlen(host) >= TLS_SERVER_NAME_MAX)
        return -EINVAL;
    EVP_PKEY *pk = p256_key_new();
    X509 *x = pk ? self_signed_new(pk, host) : NULL;
    int rc = -ENOMEM;
    if (x && SSL_CTX_use_certificate(c, x) && SSL_CTX_use_PrivateKey(c, pk))
        rc = 0;
    X509_free(x);
    EVP_PKEY_free(pk);
    if (rc == 0)
        hd_log(HD_LOG_INFO, "tls: self-signed ECDSA P-256 certificate for %s", host);
    return rc;
}

static int use_files(SSL_CTX *c, const char *cert_file, const char *key_file)
{
    if (key_file == NULL)
        return -EINVAL;
    int rc = file_readable(cert_file);
    if (rc == 0)
        rc = file_readable(key_file);
    if (rc < 0)
        return rc;
    if (!SSL_CTX_use_certificate_chain_file(c, cert_file))
        return err_to_errno(-EBADMSG);
    if (!SSL_CTX_use_PrivateKey_file(c, key_file, SSL_FILETYPE_PEM))
        return err_to_errno(-EBADMSG);
    if (!SSL_CTX_check_private_key(c))
        return err_to_errno(-EBADMSG);
    return 0;
}

/* PEM to a new file of this mode: 0 or -errno. */
static int pem_write_new(const char *path, mode_t mode, X509 *x, EVP_PKEY *pk)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd < 0)
        return -errno;
    FILE *f = fdopen(fd, "w");
    if (f == NULL) {
        int rc = -errno;
        close(fd);
        return rc;
    }
    bool ok = x ? PEM_write_X509(f, x)
                : PEM_write_ECPrivateKey(f, EVP_PKEY_get0_EC_KEY(pk), NULL, NULL, 0, NULL, NULL);
    int rc = fclose(f) != 0 ? -errno : ok ? 0 : -ENOMEM;
    ERR_clear_error();
    if (rc < 0)
        unlink(path);
    return rc;
}

int tls_self_signed_write(const char *host, const char *cert_path, const char *key_path)
{
    if (host == NULL || host[0] == '\0' || strlen(host) >= TLS_SERVER_NAME_MAX)
        return -EINVAL;
    EVP_PKEY *pk = p256_key_new();
    X509 *x = pk ? self_signed_new(pk, host) : NULL;
    int rc = x ? pem_write_new(key_path, 0600, NULL, pk) : -ENOMEM;
    if (rc == 0 && (rc = pem_write_new(cert_path, 0644, x, NULL)) < 0)
        unlink(key_path);
    X509_free(x);
    EVP_PKEY_free(pk);
    return rc;
}

int tls_cert_file_sha256(const char *path, uint8_t out[32])
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -errno;
    X509 *x = PEM_read_X509(f, NULL, NULL, NULL);
    fclose(f);
    uint8_t *der = NULL;
    int len = x ? i2d_X509(x, &der) : -1;
    X509_free(x);
    ERR_clear_error();
    if (len <= 0)
        return -EBADMSG;
    SHA256(der, (size_t)len, out);
    OPENSSL_free(der);
    return 0;
}

/* ---------------------------------------------------------------- contexts */

/* BoringSSL's servername callback (runs for every ClientHello, before certificate selection):
 * the handshake fails here, with an alert, instead of completing and then being closed.
 * The name is the SSL_CTX's ex data (freed with it): a handshake may outlive its tls_ctx (a
 * reload), never its SSL_CTX. */
static void sni_free(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int index, long argl, void *argp)
{
    (void)parent, (void)ad, (void)index, (void)argl, (void)argp;
    free(ptr);
}

static pthread_once_t sni_once = PTHREAD_ONCE_INIT;
static int sni_index = -1;

static void sni_index_init(void)
{
    sni_index = SSL_CTX_get_ex_new_index(0, NULL, NULL, NULL, sni_free);
}

static int sni_check(SSL *ssl, int *alert, void *arg)
{
    (void)arg;
    const char *want = SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), sni_index);
    const char *name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
    if (want == NULL || (name && strcmp(name, want) == 0))
        return SSL_TLSEXT_ERR_OK;
    hd_log_rl(HD_LOG_INFO, "tls: SNI \"%s\" is not %s: handshake refused", name ? name : "", want);
    *alert = SSL_AD_UNRECOGNIZED_NAME;
    return SSL_TLSEXT_ERR_ALERT_FATAL;
}

int tls_server_ctx_create(const struct tls_server_options *o, struct tls_ctx **out)
{
    if (o->cert_file == NULL && o->self_signed_host == NULL)
        return -EINVAL;
    struct tls_ctx *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return -ENOMEM;
    t->server = true;
    t->ssl_ctx = ctx_new_common();
    if (t->ssl_ctx == NULL) {
        free(t);
        return -ENOMEM;
    }
    /* No tickets: resumption is not worth a post-handshake message per connection, and the
     * record layer would otherwise start with BoringSSL's writes in flight. */
    SSL_CTX_set_num_tickets(t->ssl_ctx, 0);
    SSL_CTX_set_options(t->ssl_ctx, SSL_OP_NO_TICKET);
    SSL_CTX_set_alpn_select_cb(t->ssl_ctx, alpn_select, NULL);
    int rc = o->cert_file ? use_files(t->ssl_ctx, o->cert_file, o->key_file)
                          : use_self_signed(t->ssl_ctx, o->self_signed_host);
    if (rc == 0 && o->sni_required) {
        pthread_once(&sni_once, sni_index_init);
        char *name = strdup(o->sni_required);
        if (name == NULL || sni_index < 0 || !SSL_CTX_set_ex_data(t->ssl_ctx, sni_index, name)) {
            free(name);
            rc = -ENOMEM;
        }
        SSL_CTX_set_tlsext_servername_callback(t->ssl_ctx, sni_check);
    }
    if (rc < 0) {
        tls_ctx_destroy(t);
        return rc;
    }
    *out = t;
    return 0;
}

int tls_client_ctx_create(const struct tls_client_options *o, struct tls_ctx **out)
{
    /* One way to trust the server (ca_file wins over insecure, as it always did). */
    if (o->ca_file == NULL && !o->insecure && !o->system_roots)
        return -EINVAL;
    if (o->system_roots && (o->ca_file != NULL || o->insecure))
        return -EINVAL;
    size_t alpn_len = o->alpn ? strlen(o->alpn) : 0;
    if (alpn_len >= TLS_ALPN_MAX)
        return -EINVAL;
    struct tls_ctx *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return -ENOMEM;
    t->ssl_ctx = ctx_new_common();
    if (t->ssl_ctx == NULL) {
        free(t);
        return -ENOMEM;
    }
    int rc = 0;
    if (o->ca_file) {
        if (!SSL_CTX_load_verify_locations(t->ssl_ctx, o->ca_file, NULL))
            rc = err_to_errno(-EBADMSG);
        SSL_CTX_set_verify(t->ssl_ctx, SSL_VERIFY_PEER, NULL);
    } else if (o->system_roots) {
        int n = tls_roots_load(SSL_CTX_get_cert_store(t->ssl_ctx));
        rc = n < 0 ? n : 0;
        t->needs_name = true;
        SSL_CTX_set_verify(t->ssl_ctx, SSL_VERIFY_PEER, NULL);
    } else {
        SSL_CTX_set_verify(t->ssl_ctx, SSL_VERIFY_NONE, NULL);
    }
    if (rc == 0 && alpn_len) {
        uint8_t wire[TLS_ALPN_MAX + 1];
        wire[0] = (uint8_t)alpn_len;
        memcpy(wire + 1, o->alpn, alpn_len);
        if (SSL_CTX_set_alpn_protos(t->ssl_ctx, wire, alpn_len + 1) != 0)
            rc = -ENOMEM;
    }
    if (rc < 0) {
        tls_ctx_destroy(t);
        return rc;
    }
    *out = t;
    return 0;
}

void tls_ctx_destroy(struct tls_ctx *ctx)
{
    if (ctx == NULL)
        return;
    SSL_CTX_free(ctx->ssl_ctx);
    free(ctx);
}

/* ---------------------------------------------------------------- kTLS probe */

static pthread_once_t ktls_once = PTHREAD_ONCE_INIT;
static bool ktls_present;

/* Linux answers TCP_ULP "tls" on an unconnected socket with ENOTCONN when the ULP exists and
 * ENOENT when it does not (tcp_set_ulp finds no such ULP, even after request_module). */
static void ktls_probe(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return;
    int rc = setsockopt(fd, IPPROTO_TCP, TCP_ULP, "tls", sizeof("tls"));
    ktls_present = rc == 0 || errno == ENOTCONN;
    close(fd);
    hd_log(HD_LOG_INFO, "tls: kernel tls ULP %s", ktls_present ? "present" : "absent");
}

bool tls_ktls_available(void)
{
    pthread_once(&ktls_once, ktls_probe);
    return ktls_present;
}

const char *tls_mode_name(enum tls_mode mode)
{
    switch (mode) {
    case TLS_MODE_HANDSHAKE:
        return "handshake";
    case TLS_MODE_USERSPACE:
        return "userspace";
    case TLS_MODE_KTLS:
        return "ktls";
    }
    return "?";
}
