/* server_flags.h - hderp-server's command line: derper's flag names and defaults (spec §11). */
#ifndef SERVER_FLAGS_H
#define SERVER_FLAGS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

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
    uint64_t keepalive_ms;            /* --keepalive-interval (tests only; derper: fixed 60 s) */
    unsigned shards;                  /* --shards (0: one per CPU) */
    bool placement;                   /* --placement (default true) */
    bool pack;                        /* --pack (default true) */
    long pack_low_pct, pack_high_pct; /* --pack-low, --pack-high (percent of one core) */
    unsigned min_wait_us;             /* --min-wait-us (0: off) */
    uint64_t stall_ms;                /* --stall-threshold (with stall_set; 0: no watchdog) */
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
    const char *account_keys;         /* --account-keys FILE (hderp's own; NULL: off) */
    uint64_t account_window_ms;       /* --account-window (default SRV_ACCT_WINDOW_MS) */
    uint64_t http_deadline_ms;        /* --http-deadline (derper: 30 s) */
    uint64_t login_deadline_ms;       /* --login-deadline (derper: 10 s) */
    long prelogin_max;                /* --prelogin-max, per shard */
    long prelogin_addr_max;           /* --prelogin-per-addr-max, per shard */
    long mesh_conns_max;              /* --mesh-conns-max, per shard */
    long frame_pool_mib;              /* --frame-pool-mib, per shard */
    uint64_t sender_wait_ms;          /* --sender-wait (0: never) */
    const char *hash_key;             /* --hash-key HEX (tests: predictable shards); NULL: random */
    const char *port_file;            /* --port-file FILE: the bound addresses (NULL: none) */
    const char *bootstrap_dns;        /* -bootstrap-dns-names LIST ("" none) */
    const char *unpublished_dns;      /* -unpublished-bootstrap-dns-names LIST ("" none) */
    const char *secrets_url;          /* -secrets-url URL (setec; NULL or "": none) */
    const char *secrets_prefix;       /* -secrets-path-prefix (default prod/derp) */
    const char *secrets_cache;        /* -secrets-cache-dir: the cache FILE (NULL: derper's) */
    /* hderp's own deployment flags (server_flags_deploy.c) */
    const char *proxy_from; /* --proxy-protocol-from CIDR,... */
    int print_derpmap;      /* --print-derpmap[=json|yaml]: 0 no, 1 JSON, 2 YAML */
    long derpmap_region_id; /* --derpmap-region-id (default 900) */
    long derpmap_port;      /* --derpmap-port: the public DERP port (0: from -a) */
    const char *derpmap_region_code, *derpmap_region_name, *derpmap_node_name;
    const char *derpmap_ipv4, *derpmap_ipv6; /* --derpmap-ipv4/-ipv6: public addresses */
    bool log_json;
    const char *pid_file;        /* --pid-file FILE (hderp only; NULL: none) */
    uint64_t upgrade_timeout_ms; /* --upgrade-timeout (SRV_UPGRADE_TIMEOUT_MS_DEFAULT) */
    /* -certmode letsencrypt (server_acme.c): -acme-directory (hderp only; NULL: Let's Encrypt),
     * -acme-email, --acme-renew-before and --acme-check-interval (0: 30 days, 12 hours) */
    const char *acme_directory, *acme_email;
    const char *acme_eab_kid, *acme_eab_key; /* -certmode gcp's External Account Binding */
    bool acme_ip_certs;                      /* -acme-ip-certs (with an IP -hostname) */
    uint64_t acme_renew_before_ms, acme_check_interval_ms; /* --log-format json */
};

/* Returns 0 (run), 1 (--help or -version printed: exit 0), or -1 (bad flags, message printed:
 * exit 2). */
int srv_flags_parse(int argc, char **argv, struct srv_flags *out);
/* server_flags_deploy.c: the flags above, for apply's unknown names (0, or -1 with a message:
 * bad value or unknown flag); which of them are booleans, which names are theirs; their --help
 * lines. */
int srv_flags_apply_deploy(struct srv_flags *f, const char *name, const char *v);
bool srv_flags_deploy_is_bool(const char *name);
bool srv_flags_deploy_is_known(const char *name);
extern const char srv_flags_deploy_usage[];
/* derper's certificate files (spec §1.2): dir = -certdir or derper's default
 * ($XDG_CACHE_HOME/tailscale/derper-certs, else ~/.cache/...), crt and key = <dir>/<H>.crt and
 * .key, H = -hostname without characters outside [A-Za-z0-9.-]; each buffer size bytes. 0, or
 * -1 (no -certdir and no $HOME, or too long). */
int srv_flags_cert_paths(const struct srv_flags *f, char *dir, char *crt, char *key, size_t size);
/* server_derpmap.c: --print-derpmap, from the flags as they would run. 0, or -1 (message). */
int srv_derpmap_print(const struct srv_flags *f, FILE *out);
/* derper: TLS iff the port is 443 (or "https") or -certmode manual; hderp also when
 * -certmode letsencrypt or gcp comes with -acme-directory (its own flag), on any port. */
bool srv_flags_tls_mode(const struct srv_flags *f);
/* A duration as Go writes it (kit_duration_parse: "0", "1.5s", "500ms", "10m", "1h30m"; no bare
 * numbers), in whole milliseconds; -1 if malformed. */
int64_t srv_parse_duration_ms(const char *text);

#endif
