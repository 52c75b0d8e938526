/* server_flags.h - hderp-server's command line: derper's flag names and defaults (spec §11). */
#ifndef SERVER_FLAGS_H
#define SERVER_FLAGS_H

#include <stdbool.h>
#include <stdint.h>

struct srv_flags {
    const char *addr;        /* -a */
    bool dev;                /* -dev */
    const char *config_path; /* -c */
    const char *certmode;    /* -certmode */
    const char *certdir;     /* -certdir */
    const char *hostname;    /* -hostname */
    int http_port;           /* -http-port */
    bool stun;               /* -stun */
    int stun_port;           /* -stun-port */
    const char *home;        /* -home */
    const char *mesh_psk_file;
    const char *mesh_with; /* -mesh-with */
    uint64_t tcp_keepalive_ms, tcp_user_timeout_ms, tcp_write_timeout_ms;
    uint64_t keepalive_ms; /* --keepalive-interval (tests only; derper: fixed 60 s) */
    unsigned shards;       /* --shards (0: one per CPU) */
    uint64_t stall_ms;     /* --stall-threshold (with stall_set; 0: no watchdog) */
    bool stall_set;
    bool verbose;
    const char *verify_client_url;    /* -verify-client-url */
    bool verify_client_url_fail_open; /* -verify-client-url-fail-open (default true) */
    uint64_t verify_cache_ttl_ms;     /* -verify-cache-ttl (hderp; 0: off) */
    uint64_t verify_recheck_ms;       /* -verify-recheck-interval (hderp; 0: off) */
    bool verify_clients;              /* -verify-clients */
    const char *socket;               /* -socket ("" or NULL: tailscaled's default path) */
    double accept_limit;              /* -accept-connection-limit, per second (INFINITY: off) */
    long accept_burst;                /* -accept-connection-burst */
    const char *rate_config;          /* -rate-config FILE (spec §6.9), NULL: none */
    const char *allow_keys;           /* --allow-keys FILE (hderp's own; NULL: off) */
    const char *account_keys;         /* -account-keys FILE (hderp's own; NULL: off) */
    uint64_t http_deadline_ms;        /* --http-deadline (derper: 30 s) */
    uint64_t login_deadline_ms;       /* --login-deadline (derper: 10 s) */
    long prelogin_max;                /* --prelogin-max, per shard */
    long prelogin_addr_max;           /* --prelogin-per-addr-max, per shard */
    long frame_pool_mib;              /* --frame-pool-mib, per shard */
    const char *hash_key;             /* --hash-key HEX (tests: predictable shards); NULL: random */
};

/* Returns 0 (run), 1 (--help or -version printed: exit 0), or -1 (bad flags, message printed:
 * exit 2). */
int srv_flags_parse(int argc, char **argv, struct srv_flags *out);
/* derper: TLS iff the port is 443 (or "https") or -certmode manual. */
bool srv_flags_tls_mode(const struct srv_flags *f);
/* Go's time.ParseDuration subset: "0", "1.5s", "500ms", "10m", "1h30m". -1 if malformed. */
int64_t srv_parse_duration_ms(const char *text);

#endif
