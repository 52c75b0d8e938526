/* server_acme_http.c - one HTTP/1.1 request to an ACME CA from the ACME thread (and to a setec
 * server from the main thread at start-up, server_secrets.c): the URL's host
 * looked up (getaddrinfo: this thread may block), TLS verified against the system roots (as Go,
 * so SSL_CERT_FILE points at a test CA) for that host, "Connection: close", the response read to
 * the end (bounded by ACME_RESP_MAX and the timeout) and parsed by net's HTTP parser; chunked
 * bodies are decoded. Never runs on a shard. */
#include <errno.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hd/net.h>
#include <hd/net_http.h>
#include "ops/server_acme.h"
#include "ops/server_check.h"

static void copy_header(const struct net_http_resp *h, const char *name, char *out, size_t size)
{
    struct net_http_str v = net_http_header_get(&h->head, name);
    snprintf(out, size, "%.*s", v.ptr ? (int)v.len : 0, v.ptr ? v.ptr : "");
}

/* In-place chunked decoding; returns the decoded length, or -1 when malformed. */
static long dechunk(char *b, size_t len)
{
    size_t in = 0, out = 0;
    for (;;) {
        char *end;
        unsigned long n = strtoul(b + in, &end, 16);
        char *crlf = strstr(end, "\r\n");
        if (end == b + in || crlf == NULL)
            return -1;
        in = (size_t)(crlf - b) + 2;
        if (n == 0)
            return (long)out;
        if (n > len - in)
            return -1;
        memmove(b + out, b + in, n);
        out += n;
        in += n + 2; /* the chunk's CRLF */
        if (in > len)
            return -1;
    }
}

static int parse(char *buf, size_t len, bool head, struct acme_resp *r)
{
    struct net_http_resp h;
    net_http_resp_init(&h, head);
    int n = net_http_resp_parse(&h, buf, len);
    if (n < 0)
        return -EPROTO;
    r->status = h.status;
    copy_header(&h, "Replay-Nonce", r->nonce, sizeof(r->nonce));
    copy_header(&h, "Location", r->location, sizeof(r->location));
    char ra[32];
    copy_header(&h, "Retry-After", ra, sizeof(ra));
    r->retry_after_s = (unsigned)strtoul(ra, NULL, 10);
    size_t body = len - (size_t)n;
    memmove(buf, buf + n, body);
    if (h.body == NET_HTTP_BODY_CHUNKED) {
        long d = dechunk(buf, body);
        if (d < 0)
            return -EPROTO;
        body = (size_t)d;
    }
    buf[body] = '\0';
    r->body = buf;
    r->body_len = body;
    return 0;
}

static ssize_t io(int fd, SSL *ssl, bool wr, void *b, size_t n)
{
    if (ssl == NULL)
        return wr ? write(fd, b, n) : read(fd, b, n);
    int k = wr ? SSL_write(ssl, b, (int)n) : SSL_read(ssl, b, (int)n);
    return k > 0 ? k : (SSL_get_error(ssl, k) == SSL_ERROR_ZERO_RETURN ? 0 : -1);
}

static int tls_start(int fd, const char *host, SSL_CTX **ctxp, SSL **sslp, char *err,
                     size_t err_size)
{
    SSL_CTX *ctx = *ctxp = chk_ssl_ctx(NULL);
    SSL *ssl = ctx ? SSL_new(ctx) : NULL;
    if (ssl == NULL)
        return -ENOMEM;
    *sslp = ssl;
    SSL_set_verify(ssl, SSL_VERIFY_PEER, NULL);
    SSL_set_tlsext_host_name(ssl, host);
    X509_VERIFY_PARAM *p = SSL_get0_param(ssl);
    if (!X509_VERIFY_PARAM_set1_ip_asc(p, host))
        X509_VERIFY_PARAM_set1_host(p, host, strlen(host));
    SSL_set_fd(ssl, fd);
    if (SSL_connect(ssl) != 1) {
        long v = SSL_get_verify_result(ssl);
        snprintf(err, err_size, "TLS to %s: %s", host,
                 v != X509_V_OK ? X509_verify_cert_error_string(v) : "handshake failed");
        return -EPROTO;
    }
    return 0;
}

static int roundtrip(int fd, SSL *ssl, const char *req, size_t req_len, const char *body, bool head,
                     struct acme_resp *r, char *err, size_t err_size)
{
    size_t blen = body ? strlen(body) : 0;
    if (io(fd, ssl, true, (void *)req, req_len) != (ssize_t)req_len ||
        (blen && io(fd, ssl, true, (void *)body, blen) != (ssize_t)blen)) {
        snprintf(err, err_size, "sending the request failed");
        return -EIO;
    }
    char *buf = malloc(ACME_RESP_MAX + 1);
    if (buf == NULL)
        return -ENOMEM;
    size_t got = 0;
    ssize_t n;
    while (got < ACME_RESP_MAX && (n = io(fd, ssl, false, buf + got, ACME_RESP_MAX - got)) > 0)
        got += (size_t)n;
    int rc = parse(buf, got, head, r);
    if (rc < 0) {
        free(buf);
        snprintf(err, err_size, "no valid HTTP response (%zu bytes)", got);
    }
    return rc;
}

int srv_http_blocking(const char *method, const char *url, const char *body, const char *ctype,
                      const char *extra, uint32_t timeout_ms, struct acme_resp *r, char *err,
                      size_t err_size)
{
    memset(r, 0, sizeof(*r));
    struct net_url u;
    struct net_addr a;
    if (net_url_parse(url, &u) < 0 || net_url_resolve(&u, false, &a) < 0) {
        snprintf(err, err_size, "%s: not a URL, or its host does not resolve", url);
        return -EINVAL;
    }
    int fd = -1, rc = chk_connect(&a, timeout_ms, &fd);
    if (rc < 0) {
        snprintf(err, err_size, "connect to %s: %s", u.authority, strerror(-rc));
        return rc;
    }
    SSL_CTX *ctx = NULL;
    SSL *ssl = NULL;
    if (u.tls)
        rc = tls_start(fd, u.host, &ctx, &ssl, err, err_size);
    if (rc == 0) {
        char req[ACME_URL_MAX + 1024], clen[160] = "";
        if (body)
            snprintf(clen, sizeof(clen), "Content-Type: %s\r\nContent-Length: %zu\r\n", ctype,
                     strlen(body));
        int n = snprintf(req, sizeof(req),
                         "%s %s HTTP/1.1\r\nHost: %s\r\n%s%sConnection: close\r\n\r\n", method,
                         u.path[0] ? u.path : "/", u.authority, extra, clen);
        rc = n > 0 && (size_t)n < sizeof(req)
                 ? roundtrip(fd, ssl, req, (size_t)n, body, strcmp(method, "HEAD") == 0, r, err,
                             err_size)
                 : -ENAMETOOLONG;
    }
    SSL_free(ssl);
    SSL_CTX_free(ctx);
    close(fd);
    ERR_clear_error();
    return rc;
}

int acme_http(const char *method, const char *url, const char *body, uint32_t timeout_ms,
              struct acme_resp *r, char *err, size_t err_size)
{
    return srv_http_blocking(method, url, body, "application/jose+json",
                             "User-Agent: hderp-acme\r\n"
                             "Accept: application/json, application/pem-certificate-chain\r\n",
                             timeout_ms, r, err, err_size);
}

void acme_resp_free(struct acme_resp *r)
{
    free(r->body);
    r->body = NULL;
}
