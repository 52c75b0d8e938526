/* server_check_net.c - the blocking probes of `hderp-server check`, on the main thread (not a
 * shard: a command-line tool waiting on one socket at a time): an HTTP/1.1 GET over TCP or TLS
 * that also reports the server's certificate (verified against --ca or the system roots as Go
 * finds them, its name, its expiry), and one STUN Binding Request. Every connect, read and write
 * is bounded by the timeout. */
#include <errno.h>
#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "derp_proto.h"
#include "ops/server_check.h"

/* The system CA bundles Go's crypto/x509 tries on Linux (SSL_CERT_FILE replaces them). */
static const char *const ca_bundles[] = {"/etc/ssl/certs/ca-certificates.crt",
                                         "/etc/pki/tls/certs/ca-bundle.crt",
                                         "/etc/ssl/ca-bundle.pem",
                                         "/etc/pki/tls/cacert.pem",
                                         "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
                                         "/etc/ssl/cert.pem"};

int chk_connect(const struct net_addr *a, uint32_t timeout_ms, int *out)
{
    int fd = socket(a->sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -errno;
    int rc = connect(fd, &a->sa, a->len) == 0 ? 0 : -errno;
    if (rc == -EINPROGRESS) {
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int n = poll(&p, 1, (int)timeout_ms);
        int soerr = 0;
        socklen_t sl = sizeof(soerr);
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
        rc = n == 0 ? -ETIMEDOUT : n < 0 ? -errno : -soerr;
    }
    if (rc < 0) {
        close(fd);
        return rc;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    *out = fd;
    return 0;
}

SSL_CTX *chk_ssl_ctx(const char *ca_file)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_method());
    if (ctx == NULL)
        return NULL;
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION); /* derper speaks 1.2 and 1.3 */
    SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);     /* verified below, to say why */
    if (ca_file) {
        SSL_CTX_load_verify_locations(ctx, ca_file, NULL);
        return ctx;
    }
    const char *file = getenv("SSL_CERT_FILE");
    if (file && file[0]) {
        SSL_CTX_load_verify_locations(ctx, file, NULL);
    } else {
        for (size_t i = 0; i < sizeof(ca_bundles) / sizeof(ca_bundles[0]); i++)
            if (access(ca_bundles[i], R_OK) == 0 &&
                SSL_CTX_load_verify_locations(ctx, ca_bundles[i], NULL) == 1)
                break;
    }
    const char *dir = getenv("SSL_CERT_DIR");
    if (dir && dir[0])
        SSL_CTX_load_verify_locations(ctx, NULL, dir);
    ERR_clear_error();
    return ctx;
}

static void name_text(X509_NAME *n, char *buf, size_t size)
{
    buf[0] = '\0';
    if (n)
        X509_NAME_oneline(n, buf, (int)size);
}

static void tls_facts(SSL *ssl, const struct chk_http *h, struct chk_tls_info *info)
{
    memset(info, 0, sizeof(*info));
    X509 *leaf = SSL_get_peer_certificate(ssl);
    if (leaf == NULL) {
        snprintf(info->verify_error, sizeof(info->verify_error), "no certificate");
        return;
    }
    name_text(X509_get_subject_name(leaf), info->subject, sizeof(info->subject));
    name_text(X509_get_issuer_name(leaf), info->issuer, sizeof(info->issuer));
    const ASN1_TIME *na = X509_get0_notAfter(leaf);
    int days = 0, secs = 0;
    if (ASN1_TIME_diff(&days, &secs, NULL, na)) {
        info->days_left = days;
        time_t when = time(NULL) + (time_t)days * 86400 + secs;
        struct tm tm;
        gmtime_r(&when, &tm);
        strftime(info->not_after, sizeof(info->not_after), "%Y-%m-%d %H:%M UTC", &tm);
    }
    long v = SSL_get_verify_result(ssl);
    if (h->insecure)
        snprintf(info->verify_error, sizeof(info->verify_error), "not verified (--insecure)");
    else if (v != X509_V_OK)
        snprintf(info->verify_error, sizeof(info->verify_error), "%s",
                 X509_verify_cert_error_string(v));
    else
        info->verified = true;
    X509_free(leaf);
}

/* The handshake, with the name checked by the chain verification (host or IP). */
static int tls_open(int fd, SSL_CTX *ctx, const struct chk_http *h, SSL **out, char *err,
                    size_t err_size)
{
    SSL *ssl = SSL_new(ctx);
    if (ssl == NULL)
        return -ENOMEM;
    X509_VERIFY_PARAM *param = SSL_get0_param(ssl);
    if (h->sni) {
        SSL_set_tlsext_host_name(ssl, h->sni);
        X509_VERIFY_PARAM_set1_host(param, h->sni, strlen(h->sni));
    } else {
        char ip[64];
        snprintf(ip, sizeof(ip), "%s", h->host);
        char *colon = strrchr(ip, ':');
        if (ip[0] == '[') {
            memmove(ip, ip + 1, strlen(ip));
            *strchr(ip, ']') = '\0';
        } else if (colon) {
            *colon = '\0';
        }
        X509_VERIFY_PARAM_set1_ip_asc(param, ip);
    }
    SSL_set_fd(ssl, fd);
    if (SSL_connect(ssl) != 1) {
        unsigned long e = ERR_get_error();
        snprintf(err, err_size, "TLS handshake failed: %s",
                 e ? ERR_reason_error_string(e) : "connection closed or timed out");
        SSL_free(ssl);
        return -EPROTO;
    }
    *out = ssl;
    return 0;
}

static ssize_t io(int fd, SSL *ssl, bool write_it, void *buf, size_t len)
{
    if (ssl == NULL)
        return write_it ? send(fd, buf, len, MSG_NOSIGNAL) : recv(fd, buf, len, 0);
    int n = write_it ? SSL_write(ssl, buf, (int)len) : SSL_read(ssl, buf, (int)len);
    return n > 0 ? n : (SSL_get_error(ssl, n) == SSL_ERROR_ZERO_RETURN ? 0 : -1);
}

static int exchange(int fd, SSL *ssl, char *req, size_t req_len, char *resp, size_t size,
                    unsigned *status)
{
    if (io(fd, ssl, true, req, req_len) != (ssize_t)req_len)
        return -EIO;
    size_t got = 0;
    for (;;) {
        ssize_t n = got + 1 < size ? io(fd, ssl, false, resp + got, size - 1 - got) : 0;
        if (n <= 0)
            break; /* EOF, a full buffer, an error or the read timeout */
        got += (size_t)n;
    }
    resp[got] = '\0';
    unsigned st = 0;
    if (sscanf(resp, "HTTP/1.%*c %u", &st) != 1)
        return -EPROTO;
    *status = st;
    return 0;
}

int chk_http_get(const struct chk_http *h, const char *path, const char *extra_headers,
                 struct chk_tls_info *info, unsigned *status, char *resp, size_t resp_size,
                 char *err, size_t err_size)
{
    int fd = -1, rc = chk_connect(h->addr, h->timeout_ms, &fd);
    if (rc < 0) {
        snprintf(err, err_size, "connect: %s", strerror(-rc));
        return rc;
    }
    SSL_CTX *ctx = NULL;
    SSL *ssl = NULL;
    if (h->tls) {
        ctx = chk_ssl_ctx(h->ca_file);
        rc = ctx ? tls_open(fd, ctx, h, &ssl, err, err_size) : -ENOMEM;
        if (rc == 0 && info)
            tls_facts(ssl, h, info);
    }
    if (rc == 0) {
        char req[1024];
        int n = snprintf(req, sizeof(req),
                         "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: hderp-check\r\n%s"
                         "Connection: close\r\n\r\n",
                         path, h->host, extra_headers ? extra_headers : "");
        rc = exchange(fd, ssl, req, (size_t)n, resp, resp_size, status);
        if (rc < 0)
            snprintf(err, err_size, "no HTTP response to GET %s", path);
    }
    if (ssl)
        SSL_free(ssl);
    SSL_CTX_free(ctx);
    close(fd);
    return rc;
}

int chk_stun(const struct net_addr *addr, uint32_t timeout_ms, char *mapped, size_t size)
{
    int fd = socket(addr->sa.sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    uint8_t txid[DERP_STUN_TXID_LEN], req[64], resp[512];
    randombytes_buf(txid, sizeof(txid));
    ssize_t n = derp_stun_build_request(req, sizeof(req), txid);
    int rc = -ETIMEDOUT;
    for (int attempt = 0; attempt < 3 && rc == -ETIMEDOUT && n > 0; attempt++) {
        sendto(fd, req, (size_t)n, 0, &addr->sa, addr->len);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, (int)(timeout_ms / 3)) <= 0)
            continue;
        ssize_t m = recv(fd, resp, sizeof(resp), 0);
        uint8_t got_txid[DERP_STUN_TXID_LEN];
        struct derp_addr a;
        if (m <= 0 || derp_stun_parse_response(resp, (size_t)m, got_txid, &a) < 0 ||
            memcmp(got_txid, txid, sizeof(txid)) != 0) {
            rc = m > 0 ? -EPROTO : -ETIMEDOUT;
            continue;
        }
        derp_addr_format_ip(&a, mapped, size);
        rc = 0;
    }
    close(fd);
    return rc;
}
