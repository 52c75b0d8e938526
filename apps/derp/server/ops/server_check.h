/* server_check.h - `hderp-server check URL` (server_check.c prints; server_check_derp.c runs the
 * DERP clients on a shard; server_check_net.c makes the blocking TLS/HTTP/STUN probes). */
#ifndef SERVER_CHECK_H
#define SERVER_CHECK_H

#include <stdbool.h>
#include <stdint.h>

#include "derp_client.h"

struct chk_derp_opts {
    const struct derp_client_url *url;
    struct tls_ctx *tls; /* https: the client context; NULL: plain */
    uint32_t timeout_ms; /* the whole DERP part */
};

struct chk_derp_result {
    unsigned upgrade_status; /* the upgrade's HTTP status (101) */
    bool upgrade_ok, upgrade_key_ok, fast_start_ok, pong_ok;
    unsigned packets_ab, packets_ba, packets_total;
    char server_key[DERP_PUBKEY_TEXT_SIZE];
    char error[256]; /* "" when every step finished */
};

/* Runs a one-shard runtime until the DERP checks finished or timed out. Returns 0 or the
 * runtime's error (the checks' own verdicts are in res). Main thread. */
int chk_derp_run(const struct chk_derp_opts *opts, struct chk_derp_result *res);

/* server_check_net.c: blocking probes from the main thread, every step bounded by timeout_ms. */
struct chk_tls_info {
    bool verified; /* chain and name verified (false with --insecure, or a failure) */
    char verify_error[160];
    char subject[256], issuer[256];
    long days_left; /* until notAfter (negative: expired) */
    char not_after[32];
};
struct chk_http {
    const struct net_addr *addr;
    bool tls;
    const char *host;    /* Host header and SNI (without the port for SNI) */
    const char *sni;     /* NULL: no SNI (an IP host) */
    const char *ca_file; /* NULL: the system roots */
    bool insecure;
    uint32_t timeout_ms;
};
/* GET path: status and up to resp_size bytes of the response (head and body), NUL-terminated;
 * with tls, the certificate facts in *info (if not NULL). Returns 0, or -errno with err set. */
int chk_http_get(const struct chk_http *h, const char *path, const char *extra_headers,
                 struct chk_tls_info *info, unsigned *status, char *resp, size_t resp_size,
                 char *err, size_t err_size);
/* A TCP connection to a within timeout_ms, blocking afterwards with that read/write timeout. */
int chk_connect(const struct net_addr *a, uint32_t timeout_ms, int *fd);
/* A client SSL_CTX (TLS 1.2+) trusting ca_file, or the system roots as Go finds them
 * (SSL_CERT_FILE, SSL_CERT_DIR); it does not verify by itself: callers check
 * SSL_get_verify_result (or set SSL_VERIFY_PEER). NULL: out of memory. */
struct ssl_ctx_st;
struct ssl_ctx_st *chk_ssl_ctx(const char *ca_file);
/* One STUN Binding Request to addr (retried thrice within timeout_ms); the mapped address as
 * text. Returns 0, -ETIMEDOUT or -EPROTO (a reply that does not parse). */
int chk_stun(const struct net_addr *addr, uint32_t timeout_ms, char *mapped, size_t size);

/* server_check.c: `hderp-server check [flags] URL`; the exit code. */
int srv_check_main(int argc, char **argv);

#endif /* SERVER_CHECK_H */
