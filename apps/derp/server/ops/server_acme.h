/* server_acme.h - -certmode letsencrypt (and gcp: Google's CA, with an External Account
 * Binding): an ACME (RFC 8555) client on a thread of its own
 * (server_acme.c: the protocol, renewal, http-01 tokens; server_acme_jws.c: keys, JWS, CSR;
 * server_acme_http.c: blocking HTTPS requests to the CA). */
#ifndef SERVER_ACME_H
#define SERVER_ACME_H

#include <openssl/evp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A path under -certdir, a CA's URL, a header value worth keeping (nonces, locations). */
#define ACME_PATH_MAX 1400
#define ACME_URL_MAX  1024
/* A CA response: directory, order, authorization JSON, a certificate chain (a few KiB). */
#define ACME_RESP_MAX (256 * 1024)

/* ---- server_acme_jws.c */
size_t acme_b64url(const uint8_t *in, size_t len, char *out, size_t size); /* 0: no room */
EVP_PKEY *acme_key_new(void);                                              /* P-256 */
int acme_key_write(const char *path, EVP_PKEY *k);                         /* 0600, atomic */
int acme_key_load_or_create(const char *path, EVP_PKEY **out, bool *created);
int acme_jwk(EVP_PKEY *k, char *out, size_t size);        /* RFC 7638 member order */
int acme_thumbprint(EVP_PKEY *k, char *out, size_t size); /* base64url SHA-256 of the JWK */
/* The request body (malloc'd; NULL on failure): kid NULL means "jwk" (newAccount). */
char *acme_jws(EVP_PKEY *k, const char *kid, const char *nonce, const char *url,
               const char *payload);
int acme_csr(EVP_PKEY *k, const char *host, char *out, size_t size); /* base64url DER */
/* The newAccount payload's externalAccountBinding (RFC 8555 section 7.3.4: the JWK signed with
 * the CA's MAC key, HS256) into out; 0 or -ENOSPC. */
/* -acme-eab-key: base64url without padding or standard base64 (derper's decodeEABKey) into
 * out; 0 or -EINVAL. */
int acme_eab_key_decode(const char *text, uint8_t *out, size_t size, size_t *len);
int acme_eab_jws(EVP_PKEY *k, const char *eab_kid, const uint8_t *mac_key, size_t mac_len,
                 const char *url, char *out, size_t size);

/* ---- server_acme_http.c */
struct acme_resp {
    unsigned status;
    char nonce[256];             /* Replay-Nonce */
    char location[ACME_URL_MAX]; /* Location */
    unsigned retry_after_s;      /* Retry-After (seconds form), 0: none */
    char *body;                  /* NUL-terminated, malloc'd: acme_resp_free */
    size_t body_len;
};
/* method GET, HEAD or POST (body with Content-Type application/jose+json) to an https (or, for
 * tests, http) URL; TLS verified against the system roots (SSL_CERT_FILE) for the URL's host.
 * Returns 0 (any status) or -errno with err set. Blocks, at most timeout_ms per step. */
int acme_http(const char *method, const char *url, const char *body, uint32_t timeout_ms,
              struct acme_resp *r, char *err, size_t err_size);
void acme_resp_free(struct acme_resp *r);
/* The same for any blocking caller (not a shard): body (if any) sent with Content-Type ctype;
 * extra: more header lines, each ending in CRLF ("" none). */
int srv_http_blocking(const char *method, const char *url, const char *body, const char *ctype,
                      const char *extra, uint32_t timeout_ms, struct acme_resp *r, char *err,
                      size_t err_size);

/* ---- server_acme.c */
struct srv_config;
struct srv_flags;
/* The letsencrypt and gcp part of configure: files, flags; 0 or -1 (message printed). Main
 * thread. */
int srv_acme_configure(struct srv_config *cfg, const struct srv_flags *f, const char *certdir);
/* mkdir -p dir, each directory it creates 0700 (derper's autocert.DirCache and self-signed IP
 * certificate: os.MkdirAll(dir, 0700)): keys go there. 0 or -errno (mkdir's, -ENAMETOOLONG). */
int srv_mkdir_all(const char *dir);
/* Start / stop the ACME thread (after the runtime started; before it is destroyed). */
int srv_acme_start(struct srv_config *cfg);
void srv_acme_stop(void);
/* http-01: the key authorization for token (the path's last part), for the -http-port
 * listener; false when the token is not one of ours. Any thread (a mutex: a cold path). */
bool srv_acme_http01(const char *token, size_t len, char *out, size_t size);

#endif /* SERVER_ACME_H */
