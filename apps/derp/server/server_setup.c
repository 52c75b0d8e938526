/* server_setup.c - hderp-server's configuration from derper's flags (spec §11): the listen
 * address, TLS mode and its certificate files, the key file, the mesh, admission, rate and allow
 * lists. Main thread, before the runtime starts; the configuration is read-only afterwards
 * (except what SIGHUP reloads through snapshots) and is the relay module's arg. */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <sodium.h>

#include "server.h"
#include "ops/server_account.h"
#include "ops/server_acme.h"
#include "ops/server_flags.h"
#include "ops/server_secrets.h"

static int load_key(struct srv_config *cfg, const struct srv_flags *f)
{
    char err[256];
    const char *path = f->config_path;
    if (path == NULL && f->dev)
        return derp_keypair_generate(&cfg->key); /* -dev: an ephemeral key, as derper */
    if (path == NULL) {
        if (geteuid() != 0) { /* derper: the default path is root's only */
            fprintf(stderr, "hderp-server: -c <key file> is required when not running as "
                            "root (root's default: " SRV_DEFAULT_KEY_FILE ")\n");
            return -EINVAL;
        }
        path = SRV_DEFAULT_KEY_FILE;
    }
    bool created = false;
    struct derp_privkey priv;
    int rc = derp_key_file_load_or_create(path, &priv, &created, err, sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "hderp-server: -c %s: %s\n", path, err);
        return rc;
    }
    if (created)
        hd_log(HD_LOG_INFO, "created a new server key in %s", path);
    return derp_keypair_from_privkey(&cfg->key, &priv);
}

static bool is_ip_literal(const char *host)
{
    struct in6_addr a6;
    struct in_addr a4;
    return inet_pton(AF_INET, host, &a4) == 1 || inet_pton(AF_INET6, host, &a6) == 1;
}

/* derper's manual mode with an IP -hostname and neither file (cert.go createSelfSignedIPCert): a
 * self-signed certificate written to them (the directory made 0700), so it stays the same
 * across restarts and upgrades, and the DERP map line that pins it by CertName, logged (also
 * when the files were there). 0 or -1 (printed). */
static int self_signed_ip_cert(struct srv_config *cfg, const char *certdir)
{
    if (access(cfg->cert_file, F_OK) != 0 && access(cfg->key_file, F_OK) != 0) {
        int rc = srv_mkdir_all(certdir);
        if (rc == 0)
            rc = tls_self_signed_write(cfg->hostname, cfg->cert_file, cfg->key_file);
        if (rc < 0) {
            fprintf(stderr,
                    "hderp-server: -certmode manual: cannot write a self-signed certificate for "
                    "%s to %s: %s (give a -certdir this user may write, or put the files "
                    "there)\n",
                    cfg->hostname, cfg->cert_file, strerror(-rc));
            return -1;
        }
        hd_log(HD_LOG_INFO, "created a self-signed certificate for %s in %s", cfg->hostname,
               cfg->cert_file);
    }
    uint8_t sum[32];
    char hex[65];
    if (tls_cert_file_sha256(cfg->cert_file, sum) < 0)
        return 0; /* the certificate load says what is wrong with it */
    sodium_bin2hex(hex, sizeof(hex), sum, sizeof(sum));
    hd_log(HD_LOG_INFO,
           "Using self-signed certificate for IP address %s. Configure it in DERPMap using: "
           "{\"Name\":\"custom\",\"RegionID\":900,\"HostName\":\"%s\",\"CertName\":"
           "\"sha256-raw:%s\"} (or hderp-server --print-derpmap with the same flags)",
           cfg->hostname, cfg->hostname, hex);
    return 0;
}

/* derper's manual mode (spec §1.2): <certdir>/<H>.crt and <certdir>/<H>.key, H = -hostname
 * without characters outside [A-Za-z0-9.-]; an IP hostname without them gets a self-signed
 * certificate written there; letsencrypt: server_acme.c keeps them current. */
static int configure_tls(struct srv_config *cfg, const struct srv_flags *f)
{
    bool acme = strcmp(f->certmode, "letsencrypt") == 0 || /* server_acme.c */
                strcmp(f->certmode, "gcp") == 0;
    if (!acme && strcmp(f->certmode, "manual") != 0) {
        fprintf(stderr,
                "hderp-server: -certmode %s is not implemented: use letsencrypt or manual\n",
                f->certmode);
        return -1;
    }
    if (f->acme_ip_certs && strcmp(f->certmode, "letsencrypt") != 0) { /* derper's check */
        fprintf(stderr, "hderp-server: -acme-ip-certs requires -certmode letsencrypt\n");
        return -1;
    }
    char certdir[1024];
    if (srv_flags_cert_paths(f, certdir, cfg->cert_file, cfg->key_file, sizeof(certdir)) < 0) {
        fprintf(stderr, "hderp-server: TLS mode needs -certdir (no $HOME for derper's default, "
                        "or the path is too long)\n");
        return -1;
    }
    cfg->sni_required = !is_ip_literal(f->hostname); /* a DNS name: SNI must equal it */
    snprintf(cfg->hostname, sizeof(cfg->hostname), "%s", f->hostname);
    if (acme && srv_acme_configure(cfg, f, certdir) < 0)
        return -1;
    if (!acme && !cfg->sni_required && self_signed_ip_cert(cfg, certdir) < 0)
        return -1;
    cfg->tls = true; /* the context is built once the key is known (srv_configure) */
    cfg->meta_cert = true;
    cfg->http_port = f->http_port;
    cfg->http_addr = cfg->addr;
    if (cfg->http_addr.sa.sa_family == AF_INET)
        cfg->http_addr.in4.sin_port = htons((uint16_t)(f->http_port > 0 ? f->http_port : 0));
    else
        cfg->http_addr.in6.sin6_port = htons((uint16_t)(f->http_port > 0 ? f->http_port : 0));
    return 0;
}

/* derper's -mesh-psk-file default (cmd/derper, v1.102.5): the first of these that exists, not
 * in -dev mode. A product default copied from derper on purpose, not a path of this machine. */
static const char *default_mesh_psk_file(char *buf, size_t size)
{
    static const char derper_home_key[] = "/home/derp/keys/derp-mesh.key";
    const char *home = getenv("HOME");
    if (access(derper_home_key, F_OK) == 0)
        return derper_home_key;
    if (home && snprintf(buf, size, "%s/keys/derp-mesh.key", home) < (int)size &&
        access(buf, F_OK) == 0)
        return buf;
    return NULL;
}

/* -secrets-url: the mesh key from setec (server_secrets.c), cached in -secrets-cache-dir (a file;
 * derper's default $HOME/.cache/derper-secrets). Blocks until the server answers. */
static int configure_setec(struct srv_config *cfg, const struct srv_flags *f)
{
    char dflt[1024], err[1024];
    const char *cache = f->secrets_cache;
    if (cache == NULL) {
        const char *home = getenv("HOME");
        snprintf(dflt, sizeof(dflt), "%s%s.cache/derper-secrets", home ? home : "",
                 home && home[0] ? "/" : ""); /* filepath.Join($HOME, ".cache", ...) */
        cache = dflt;
    }
    int rc = srv_secrets_mesh_key(f->secrets_url, f->secrets_prefix, cache, &cfg->mesh_key, err,
                                  sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "hderp-server: -secrets-url %s: %s\n", f->secrets_url, err);
        return -EINVAL;
    }
    cfg->have_mesh_key = rc == 0; /* 1: an empty secret, no mesh key (derper's) */
    return 0;
}

/* The mesh key (spec §7): -secrets-url (setec), -mesh-psk-file (derper's default file when not
 * given; "" none), or in -dev mode $TAILSCALE_DERPER_MESH_KEY. */
static int configure_mesh_key(struct srv_config *cfg, const struct srv_flags *f)
{
    if (f->secrets_url && f->secrets_url[0]) /* derper: setec before -mesh-psk-file */
        return configure_setec(cfg, f);
    char dflt[1024];
    const char *path = f->mesh_psk_file;
    if (path == NULL && !f->dev && (path = default_mesh_psk_file(dflt, sizeof(dflt))))
        hd_log(HD_LOG_INFO, "mesh key from %s (derper's default -mesh-psk-file)", path);
    if (path && path[0]) {
        char err[256];
        if (derp_mesh_key_load_file(path, &cfg->mesh_key, err, sizeof(err)) < 0) {
            fprintf(stderr, "hderp-server: -mesh-psk-file %s: %s\n", path, err);
            return -EINVAL;
        }
        cfg->have_mesh_key = true;
    } else if (f->dev && getenv("TAILSCALE_DERPER_MESH_KEY")) {
        const char *k = getenv("TAILSCALE_DERPER_MESH_KEY");
        if (derp_mesh_key_parse(k, strlen(k), &cfg->mesh_key) < 0) {
            fprintf(stderr, "hderp-server: TAILSCALE_DERPER_MESH_KEY is not 64 hex digits\n");
            return -EINVAL;
        }
        cfg->have_mesh_key = true;
    }
    return 0;
}

/* Issue 16's limits (deadlines, pre-login caps) and --hash-key. 0 or -EINVAL (printed). */
static int configure_limits(struct srv_config *cfg, const struct srv_flags *f)
{
    cfg->http_deadline_ms = (uint32_t)f->http_deadline_ms;
    cfg->login_deadline_ms = (uint32_t)f->login_deadline_ms;
    cfg->prelogin_shard_max = (uint32_t)f->prelogin_max;
    cfg->prelogin_addr_max = (uint32_t)f->prelogin_addr_max;
    cfg->mesh_conns_max = (uint32_t)f->mesh_conns_max;
    cfg->placement = f->placement;       /* where clients live (server_place.c) */
    cfg->pack = f->pack && f->placement; /* server_pack.c */
    cfg->pack_low_ppm = (uint32_t)f->pack_low_pct * (HD_BUSY_PPM_FULL / 100);
    cfg->pack_high_ppm = (uint32_t)f->pack_high_pct * (HD_BUSY_PPM_FULL / 100);
    if (f->hash_key == NULL)
        return 0;
    size_t got = 0;
    if (strlen(f->hash_key) != 2 * SRV_HASH_KEY_LEN ||
        sodium_hex2bin(cfg->hash_key, sizeof(cfg->hash_key), f->hash_key, 2 * SRV_HASH_KEY_LEN,
                       NULL, &got, NULL) != 0 ||
        got != sizeof(cfg->hash_key)) {
        fprintf(stderr, "hderp-server: --hash-key: expected %d hex digits\n", 2 * SRV_HASH_KEY_LEN);
        return -EINVAL;
    }
    cfg->hash_key_given = true;
    return 0;
}

/* --allow-keys and --account-keys: a bad line refuses to start. */
static int configure_key_lists(struct srv_config *cfg, const struct srv_flags *f)
{
    char err[512];
    if (f->allow_keys && srv_allow_configure(cfg, f->allow_keys, err, sizeof(err)) < 0) {
        fprintf(stderr, "hderp-server: --allow-keys %s\n", err);
        return -EINVAL;
    }
    if (f->account_keys && srv_acct_configure(cfg, f->account_keys, err, sizeof(err)) < 0) {
        fprintf(stderr, "hderp-server: --account-keys %s\n", err);
        return -EINVAL;
    }
    return 0;
}

/* -verify-client-url (its cache and re-checks) and -verify-clients: 0 or -1 (printed). */
static int configure_admission(struct srv_config *cfg, const struct srv_flags *f)
{
    char aerr[256];
    if (srv_admit_configure(cfg, f->verify_client_url, f->verify_client_url_fail_open, aerr,
                            sizeof(aerr)) < 0) {
        fprintf(stderr, "hderp-server: -verify-client-url %s: %s\n", f->verify_client_url, aerr);
        return -1;
    }
    if (srv_admit_recheck_configure(cfg, f->verify_cache_ttl_ms, f->verify_recheck_ms) < 0)
        return -1;
    if (srv_admit_local_configure(cfg, f->verify_clients, f->socket, aerr, sizeof(aerr)) < 0) {
        fprintf(stderr, "hderp-server: -verify-clients: %s\n", aerr);
        return -1;
    }
    return 0;
}

/* derper's debug knobs hderp does not honour: one line each at start, naming what it does. */
static void note_unhonoured_env(void)
{
    static const char *const knobs[][2] = {
        {"TS_DEBUG_DERP_PER_CLIENT_SEND_QUEUE_DEPTH",
         "the per-client send queue stays 32 packets (derper's default)"},
        {"DERP_DEBUG_LOGS", "use --verbose for debug logs"},
        {"DERP_PROBER_DEBUG_LOGS", "use --verbose for debug logs (probers' included)"},
        {"TS_DEBUG_VERBOSE_DROPS",
         "use --verbose; drops are counted in derp_packets_dropped{reason,kind}"},
    };
    for (size_t i = 0; i < HD_ARRAY_SIZE(knobs); i++) {
        const char *v = getenv(knobs[i][0]);
        if (v && v[0])
            fprintf(stderr, "hderp-server: %s=%s is derper's and ignored here: %s\n", knobs[i][0],
                    v, knobs[i][1]);
    }
}

/* Who may reach /debug/ besides loopback: tsweb's environment knobs. TS_ALLOW_DEBUG_IP (one
 * address; derper compares it as text: something not an address never matches, said here) and
 * TS_DEBUG_TRUSTED_CIDRS (a list of prefixes; derper stops on a bad one at the first debug
 * request, hderp at start). TS_DEBUG_KEY_PATH: the ?debugkey= file (server_debug.c). */
static int configure_debug_access(struct srv_config *cfg)
{
    const char *ip = getenv("TS_ALLOW_DEBUG_IP"), *cidrs = getenv("TS_DEBUG_TRUSTED_CIDRS");
    const char *bad = NULL;
    if (cidrs && cidrs[0]) {
        int n = net_cidr_parse_list(cidrs, cfg->debug_from, NET_CIDR_LIST_MAX, &bad);
        if (n < 0) {
            fprintf(stderr,
                    "hderp-server: TS_DEBUG_TRUSTED_CIDRS=%s: \"%.*s\" is not a prefix like "
                    "10.0.0.0/8 (at most %u, host bits zero)\n",
                    cidrs, bad ? (int)strcspn(bad, ",") : 0, bad ? bad : "", NET_CIDR_LIST_MAX);
            return -EINVAL;
        }
        cfg->debug_from_count = (unsigned)n;
    }
    if (ip && ip[0]) {
        if (strchr(ip, '/') == NULL &&
            net_cidr_parse_list(ip, &cfg->debug_from[cfg->debug_from_count], 1, &bad) == 1)
            cfg->debug_from_count++;
        else
            fprintf(stderr,
                    "hderp-server: TS_ALLOW_DEBUG_IP=%s is not an IP address: it lets "
                    "nobody in\n",
                    ip);
    }
    const char *key = getenv("TS_DEBUG_KEY_PATH");
    cfg->debug_key_path = key && key[0] ? key : NULL;
    note_unhonoured_env();
    return 0;
}

int srv_configure(struct srv_config *cfg, const struct srv_flags *f)
{
    if (net_addr_parse(f->addr, &cfg->addr) < 0) {
        fprintf(stderr,
                "hderp-server: -a %s: not a numeric address like :3340, "
                "127.0.0.1:3340 or [::1]:3340\n",
                f->addr);
        return -EINVAL;
    }
    cfg->hooks = &srv_hooks;
    cfg->http_port = -1;
    if (srv_flags_tls_mode(f) && configure_tls(cfg, f) < 0)
        return -EINVAL;
    snprintf(cfg->addr_text, sizeof(cfg->addr_text), "%s", f->addr);
    cfg->dev = f->dev;
    cfg->verbose = f->verbose;
    cfg->shards = f->shards;
    cfg->write_timeout_ms = f->tcp_write_timeout_ms;
    cfg->sender_wait_ms = (uint32_t)f->sender_wait_ms; /* server_wait.c */
    cfg->keepalive_ms = f->keepalive_ms;
    cfg->account_window_ms = f->account_window_ms;
    cfg->keepalive_jitter_ms =
        f->keepalive_ms == DERP_KEEPALIVE_INTERVAL_MS ? DERP_KEEPALIVE_JITTER_MS : 0;
    const char *rtt_off = getenv("TS_DERP_DISABLE_RTT_STATS"); /* Go's strconv.ParseBool */
    cfg->rtt_stats_off = rtt_off && (strcmp(rtt_off, "1") == 0 || strcasecmp(rtt_off, "t") == 0 ||
                                     strcasecmp(rtt_off, "true") == 0);
    if (configure_debug_access(cfg) < 0)
        return -EINVAL;
    cfg->tcp_user_timeout_ms = (int)f->tcp_user_timeout_ms;
    cfg->tcp_keepalive_s = (int)(f->tcp_keepalive_ms / 1000);
    cfg->home = f->home;
    cfg->bootdns_names = f->bootstrap_dns ? f->bootstrap_dns : "";
    cfg->bootdns_unpublished = f->unpublished_dns ? f->unpublished_dns : "";
    cfg->accept_rate = isinf(f->accept_limit) ? 0 : f->accept_limit / 1000.0;
    cfg->accept_burst = (double)f->accept_burst;
    if (configure_limits(cfg, f) < 0)
        return -EINVAL;
    /* -stun-port -1: no STUN (derper's listen fails and it goes on without; the DERP map's
     * STUNPort -1 says so). It used to bind port 65535. */
    cfg->stun = f->stun && f->stun_port >= 0;
    cfg->stun_port = f->stun_port;
    if (configure_mesh_key(cfg, f) < 0)
        return -EINVAL;
    if (configure_admission(cfg, f) < 0)
        return -EINVAL;
    char aerr[256];
    if (srv_mesh_configure(cfg, f->mesh_with, aerr, sizeof(aerr)) < 0) {
        fprintf(stderr, "hderp-server: -mesh-with: %s\n", aerr);
        return -EINVAL;
    }
    if (f->rate_config) { /* -rate-config (spec §6.9): a bad file refuses to start */
        char rerr[256];
        if (srv_rate_load(f->rate_config, &cfg->rate, rerr, sizeof(rerr)) < 0) {
            fprintf(stderr, "hderp-server: -rate-config %s: %s\n", f->rate_config, rerr);
            return -EINVAL;
        }
        cfg->rate_config_path = f->rate_config;
    }
    if (f->proxy_from && srv_proxy_configure(cfg, f->proxy_from) < 0)
        return -EINVAL; /* --proxy-protocol-from: the message is printed */
    if (configure_key_lists(cfg, f) < 0)
        return -EINVAL;
    int rc = load_key(cfg, f);
    if (rc < 0)
        return rc;
    derp_key_hex_format(cfg->key.pub.bytes, cfg->key_hex);
    char terr[1024];
    if (srv_certs_configure(cfg, terr, sizeof(terr)) < 0) {
        fprintf(stderr, "hderp-server: %s\n", terr);
        return -1;
    }
    return 0;
}
