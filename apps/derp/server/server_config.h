/* server_config.h - hderp-server's configuration: what the flags and files say, read-only on
 * the shards once the runtime runs (reloadable parts are hd_snap snapshots). */
#ifndef SERVER_CONFIG_H
#define SERVER_CONFIG_H

#include "derp_proto.h"
#include "relay/server_hash.h"
#include "server_limits.h"
#include <hd/hd.h>
#include <hd/net.h>
#include <hd/net_proxy.h>

struct srv_tls_snap;
struct srv_keylist;
struct srv_upgrade;
struct tls_ctx;

/* One -mesh-with entry (spec §7): the node this server keeps a watch connection to. */
struct srv_mesh_node {
    char entry[SRV_MESH_ENTRY_LEN_MAX + 1];   /* as given, for logs */
    char host[NET_URL_AUTHORITY_LEN_MAX + 1]; /* Host header: host[:port] */
    char name[NET_URL_AUTHORITY_LEN_MAX + 1]; /* TLS server name: host without port, brackets */
    char dial[NET_URL_AUTHORITY_LEN_MAX + 1]; /* dialhost, or host: looked up at each dial */
    uint16_t port;                            /* the URL's (443, 80 or as written) */
    bool numeric;                             /* dial is an address: addr, no lookups */
    struct net_addr addr;
    bool tls; /* https (derper); http:// entries: plain */
};

/* -rate-config (spec §6.9, server_rate.c): the per-client receive limit as read from the file,
 * and what the buckets use (tokens a millisecond; the burst raised to DERP_RATE_BURST_MIN). */
struct srv_quota {
    uint8_t key[DERP_KEY_LEN];
    uint64_t daily_bytes, monthly_bytes; /* 0: none */
    uint64_t bytes_per_sec; /* this key's receive limit instead of the default; 0: none */
    double per_ms, burst;
};

struct srv_rate {
    uint64_t bytes_per_sec; /* PerClientRateLimitBytesPerSec; 0: off */
    uint64_t burst_bytes;   /* PerClientRateBurstBytes, as configured */
    double per_ms, burst;
    /* "Keys" (hderp's, server_quota.c): per-key limits and quotas, sorted by key; owned by the
     * snapshot that holds this struct (srv_rate_free). */
    struct srv_quota *quotas;
    uint32_t quotas_count;
};

struct srv_relay_hooks;
struct srv_config {
    const struct srv_relay_hooks *hooks; /* the relay core's events (server_hooks.c) */
    struct net_addr addr;
    char addr_text[64];
    bool dev;
    bool verbose;
    unsigned shards;
    bool placement; /* --placement: clients may move to the shard of their peer */
    /* --pack: pairs gather on shard 0 while the relay is below pack_low_ppm in all (and shard 0
     * too); they spread out while shard 0 is at pack_high_ppm or more (server_pack.c). */
    bool pack;
    uint32_t pack_low_ppm, pack_high_ppm;
    struct derp_keypair key;
    char key_hex[DERP_KEY_HEX_SIZE];
    bool have_mesh_key;
    struct derp_mesh_key mesh_key;
    uint32_t write_timeout_ms;    /* -tcp-write-timeout (regular clients) */
    uint32_t sender_wait_ms;      /* --sender-wait: a sender's wait for its receiver (0: none) */
    uint32_t keepalive_ms;        /* DERP KeepAlive frame period (60 s) */
    uint32_t keepalive_jitter_ms; /* + random [0, jitter) per connection */
    bool rtt_stats_off;           /* $TS_DERP_DISABLE_RTT_STATS (derper's knob): no derp_tcp_rtt */
    int tcp_user_timeout_ms;      /* -tcp-user-timeout */
    int tcp_keepalive_s;          /* -tcp-keepalive-time */
    const char *home;             /* -home: "", "blank" or a URL */
    bool stun;                    /* -stun */
    int stun_port;                /* -stun-port */
    bool tls;                     /* TLS mode (port 443 or -certmode manual); false: plain */
    int http_port;                /* -http-port in TLS mode; -1: off */
    struct net_addr http_addr;
    bool sni_required; /* manual mode with a DNS -hostname: SNI must equal it (spec §1.2) */
    char hostname[256];
    bool meta_cert; /* TLS: send the meta certificate (spec §1.2) */
    /* TLS mode's certificate (server_certs.c): the files, or self-signed for an IP hostname;
     * the server context is a snapshot per shard, rebuilt on SIGHUP. */
    bool self_signed;
    bool acme; /* -certmode letsencrypt: server_acme.c keeps cert_file/key_file current */
    char cert_file[1400], key_file[1400];
    struct srv_tls_snap *tls_initial; /* built at start-up, until srv_certs_attach */
    struct hd_snap_var *tls_var;
    /* -verify-client-url (spec §5); NULL: off. Resolved once at start-up (server_admit.c). */
    const char *verify_url;
    struct net_url verify;       /* its parts: authority (Host), path ("" means "/") */
    struct net_addr verify_addr; /* its host, resolved */
    struct tls_ctx *verify_tls;  /* https: system roots, host name checked; NULL: http */
    bool verify_fail_open;
    uint64_t verify_cache_ttl_ms; /* -verify-cache-ttl: answers kept per key; 0: off */
    uint64_t verify_recheck_ms;   /* -verify-recheck-interval: admitted keys asked again; 0: off */
    /* -verify-clients (spec §5): ask tailscaled's LocalAPI at -socket (server_admit_local.c). */
    bool verify_local;
    const char *verify_local_path;
    struct net_addr verify_local_addr;
    /* -accept-connection-limit/-burst, process-wide; each shard's bucket gets 1/shards of both
     * (reuseport spreads accepts over shards), so no shared state on accept. */
    double accept_rate; /* tokens per ms; 0: off */
    double accept_burst;
    /* Absolute deadlines from accept (derper: http.Server ReadTimeout 30 s for the TLS handshake
     * and the request head) and from the upgrade (derper: 10 s for the login), and the caps on
     * connections not logged in yet, per shard and per source address per shard. */
    uint32_t http_deadline_ms, login_deadline_ms;
    uint32_t prelogin_shard_max, prelogin_addr_max;
    uint32_t mesh_conns_max; /* --mesh-conns-max: logins with the mesh key per shard */
    /* --hash-key (the keyed hash of the peer tables). Process-wide: every relay instance's
     * global_init sets it, the last one wins; without the flag a random key. */
    uint8_t hash_key[SRV_HASH_KEY_LEN];
    bool hash_key_given;
    /* -mesh-with (server_mesh.c): node i's link lives on shard i % shards. */
    struct srv_mesh_node *mesh;
    unsigned mesh_count;
    struct tls_ctx *mesh_tls; /* https links: system roots (SSL_CERT_FILE); NULL: none */
    /* -rate-config FILE (NULL: none, no rate metrics), its limit at start-up, and the limit in
     * force as a snapshot per shard (reloaded on SIGHUP; NULL without a file). */
    const char *rate_config_path;
    struct srv_rate rate;
    struct hd_snap_var *rate_var;
    /* --allow-keys (server_allow.c); NULL: off. The list itself is a snapshot per shard. */
    const char *allow_path;
    struct srv_keylist *allow_initial; /* loaded at start-up, until srv_allow_attach */
    struct hd_snap_var *allow;
    /* -account-keys (server_account.c); NULL: off. The list is a snapshot per shard. */
    const char *account_path;
    struct srv_keylist *account_initial; /* loaded at start-up, until attached */
    struct hd_snap_var *account;
    uint64_t account_window_ms; /* --account-window: named counters outlive a key's connections */
    /* -proxy-protocol-from (server_proxy.c): sources whose connections start with a PROXY
     * header; with any entry, the main listener takes no connection from anyone else. */
    struct net_cidr proxy_from[NET_CIDR_LIST_MAX];
    unsigned proxy_from_count;
    /* -bootstrap-dns-names, -unpublished-bootstrap-dns-names ("" none; server_bootdns.c): the
     * answers as a snapshot per shard, refreshed every 10 minutes; NULL without names. */
    const char *bootdns_names, *bootdns_unpublished;
    struct hd_snap_var *bootdns;
    /* /debug/ beyond loopback (tsweb's knobs, server_debug.c): $TS_ALLOW_DEBUG_IP and
     * $TS_DEBUG_TRUSTED_CIDRS as one list; $TS_DEBUG_KEY_PATH (NULL: none). */
    struct net_cidr debug_from[NET_CIDR_LIST_MAX + 1];
    unsigned debug_from_count;
    const char *debug_key_path;
    /* The upgrade (server_upgrade.c): the sockets to hand over or handed over; NULL when the
     * relay runs without one (tests with a runtime of their own). */
    struct srv_upgrade *upgrade;
};

#endif /* SERVER_CONFIG_H */
