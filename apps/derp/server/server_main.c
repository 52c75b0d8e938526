/* server_main.c - hderp-server: derper's flags (spec §11), the key file, the module that puts a
 * listener and a peer table on every shard, and main. Flags are parsed on the main thread
 * before any shard starts; the configuration is read-only afterwards. */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sodium.h>

#include "server_account.h"
#include "server_acme.h"
#include "server_check.h"
#include "server_flags.h"

#define HDERP_VERSION "0.1.0"

/* ---------------------------------------------------------------- the module */

static struct srv_config config;

/* jemalloc (release builds): give freed pages back within about a second, from its own
 * background thread, so the chunks pools free after a burst (hd_slab_trim) leave RSS without
 * waiting for allocator activity (issue 16: RSS stayed at the burst's peak). Read by jemalloc at
 * start-up; an unused symbol under the sanitizers. */
extern const char *malloc_conf;
const char *malloc_conf = "background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0";
static uint8_t hash_key[SRV_HASH_KEY_LEN]; /* --hash-key */
static bool hash_key_given;

static int shard_init(struct hd_shard *s, void *arg, void **state)
{
    (void)arg;
    int rc = 0;
    struct srv_shard *ds = calloc(1, sizeof(*ds));
    if (ds == NULL)
        return -ENOMEM;
    ds->s = s;
    ds->cfg = &config;
    ds->scratch = malloc(DERP_CLIENT_INFO_PLAIN_MAX);
    if (ds->scratch == NULL || (rc = srv_peers_init(&ds->peers)) < 0 ||
        (rc = srv_peers_init(&ds->guests)) < 0) {
        srv_peers_fini(&ds->peers);
        srv_peers_fini(&ds->guests);
        free(ds->scratch);
        free(ds);
        return rc < 0 ? rc : -ENOMEM;
    }
    if ((rc = srv_prelogin_init(ds)) < 0 || (rc = srv_frames_init(ds)) < 0 ||
        (rc = srv_acct_shard_init(ds)) < 0) {
        srv_acct_shard_fini(ds);
        srv_prelogin_fini(ds);
        srv_peers_fini(&ds->peers);
        free(ds->scratch);
        free(ds);
        return rc;
    }
    srv_accept_limit_init(ds);
    struct net_listener_options lo = {.reuseport = true,
                                      .tcp_user_timeout_ms = config.tcp_user_timeout_ms,
                                      .keepalive_s = config.tcp_keepalive_s};
    rc = net_listener_start(s, &config.addr, &lo, srv_http_accept, ds, &ds->listener);
    if (rc < 0) {
        hd_log(HD_LOG_ERROR, "cannot listen on %s: %s", config.addr_text, strerror(-rc));
        srv_acct_shard_fini(ds);
        srv_prelogin_fini(ds);
        srv_peers_fini(&ds->peers);
        srv_peers_fini(&ds->guests);
        free(ds->scratch);
        free(ds);
        return rc;
    }
    if (config.tls && config.http_port > 0) {
        rc = net_listener_start(s, &config.http_addr, &lo, srv_http80_accept, ds,
                                &ds->http_listener);
        if (rc < 0)
            hd_log(HD_LOG_ERROR, "cannot listen on -http-port %d: %s", config.http_port,
                   strerror(-rc));
    }
    if (rc == 0 && config.stun)
        rc = srv_stun_start(ds);
    if (rc == 0)
        rc = srv_mesh_start(ds);
    if (rc < 0) {
        srv_mesh_stop(ds);
        srv_mesh_fini(ds);
        srv_stun_stop(ds);
        if (ds->http_listener)
            net_listener_stop(ds->http_listener);
        net_listener_stop(ds->listener);
        srv_acct_shard_fini(ds);
        srv_prelogin_fini(ds);
        srv_peers_fini(&ds->peers);
        srv_peers_fini(&ds->guests);
        free(ds->scratch);
        free(ds);
        return rc;
    }
    *state = ds;
    return 0;
}

static void shard_stop(struct hd_shard *s, void *state)
{
    struct srv_shard *ds = state;
    if (ds->listener)
        net_listener_stop(ds->listener);
    ds->listener = NULL;
    if (ds->http_listener)
        net_listener_stop(ds->http_listener);
    ds->http_listener = NULL;
    srv_stun_stop(ds);
    srv_mesh_stop(ds);
    net_shard_close_all(s, 0);
}

static void shard_fini(struct hd_shard *s, void *state)
{
    struct srv_shard *ds = state;
    srv_mesh_fini(ds);
    free(ds->watch_list);
    srv_peers_fini(&ds->peers);
    srv_peers_fini(&ds->guests);
    srv_subs_fini(&ds->subs);
    srv_prelogin_fini(ds);
    srv_admit_shard_fini(ds);
    srv_acct_shard_fini(ds);
    srv_quota_shard_fini(ds);
    free(ds->scratch);
    free(ds);
    (void)s;
}

static int global_init(struct hd_runtime *rt, void *arg)
{
    (void)rt, (void)arg;
    int rc = derp_crypto_init();
    if (rc == 0)
        srv_hash_init(hash_key_given ? hash_key : NULL);
    return rc < 0 ? rc : srv_acme_start(&config); /* -certmode letsencrypt: its thread */
}

static void global_fini(struct hd_runtime *rt, void *arg)
{
    (void)rt, (void)arg;
    srv_acme_stop();
}

/* Main thread, SIGHUP: reload what can be reloaded. */
static void on_signal(struct hd_runtime *rt, int signo, void *arg)
{
    (void)rt, (void)arg;
    if (signo != SIGHUP)
        return;
    srv_allow_reload(&config); /* --allow-keys */
    srv_acct_reload(&config);  /* --account-keys */
    srv_certs_reload(&config); /* TLS mode: the certificate files */
    srv_rate_reload(&config);  /* -rate-config */
}

static const struct hd_module *const srv_requires[] = {&net_module, NULL};

const struct hd_module srv_module = {
    .abi_version = HD_MODULE_ABI,
    .name = "derp",
    .requires = srv_requires,
    .global_init = global_init,
    .global_fini = global_fini,
    .shard_init = shard_init,
    .shard_stop = shard_stop,
    .shard_fini = shard_fini,
    .on_signal = on_signal,
};

/* ---------------------------------------------------------------- start-up */

static int load_key(const struct srv_flags *f)
{
    char err[256];
    const char *path = f->config_path;
    if (path == NULL && f->dev)
        return derp_keypair_generate(&config.key); /* -dev: an ephemeral key, as derper */
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
    return derp_keypair_from_privkey(&config.key, &priv);
}

static bool is_ip_literal(const char *host)
{
    struct in6_addr a6;
    struct in_addr a4;
    return inet_pton(AF_INET, host, &a4) == 1 || inet_pton(AF_INET6, host, &a6) == 1;
}

/* derper's manual mode (spec §1.2): <certdir>/<H>.crt and <certdir>/<H>.key, H = -hostname
 * without characters outside [A-Za-z0-9.-]. An IP hostname without the files gets a
 * self-signed certificate (not written to disk yet). ACME modes are not implemented. */
static int configure_tls(const struct srv_flags *f)
{
    bool acme = strcmp(f->certmode, "letsencrypt") == 0; /* server_acme.c */
    if (!acme && strcmp(f->certmode, "manual") != 0) {
        fprintf(stderr,
                "hderp-server: -certmode %s is not implemented: use letsencrypt or manual\n",
                f->certmode);
        return -1;
    }
    char certdir[1024];
    if (f->certdir && f->certdir[0]) {
        snprintf(certdir, sizeof(certdir), "%s", f->certdir);
    } else if (getenv("XDG_CACHE_HOME") && getenv("XDG_CACHE_HOME")[0]) { /* derper's default */
        snprintf(certdir, sizeof(certdir), "%s/tailscale/derper-certs", getenv("XDG_CACHE_HOME"));
    } else if (getenv("HOME")) {
        snprintf(certdir, sizeof(certdir), "%s/.cache/tailscale/derper-certs", getenv("HOME"));
    } else {
        fprintf(stderr, "hderp-server: -certmode manual needs -certdir\n");
        return -1;
    }
    char host[256];
    size_t n = 0;
    for (const char *p = f->hostname; *p && n + 1 < sizeof(host); p++)
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
            *p == '.' || *p == '-')
            host[n++] = *p;
    host[n] = '\0';
    snprintf(config.cert_file, sizeof(config.cert_file), "%s/%s.crt", certdir, host);
    snprintf(config.key_file, sizeof(config.key_file), "%s/%s.key", certdir, host);
    config.sni_required = !is_ip_literal(f->hostname); /* a DNS name: SNI must equal it */
    snprintf(config.hostname, sizeof(config.hostname), "%s", f->hostname);
    if (acme && srv_acme_configure(&config, f, certdir) < 0)
        return -1;
    if (!acme && access(config.cert_file, R_OK) != 0 && !config.sni_required) {
        hd_log(HD_LOG_WARN,
               "%s missing: using a self-signed certificate for %s (clients must "
               "pin it or skip verification)",
               config.cert_file, f->hostname);
        config.self_signed = true;
    }
    config.tls = true; /* the context is built once the key is known (configure) */
    config.meta_cert = true;
    config.http_port = f->http_port;
    config.http_addr = config.addr;
    if (config.http_addr.sa.sa_family == AF_INET)
        config.http_addr.in4.sin_port = htons((uint16_t)(f->http_port > 0 ? f->http_port : 0));
    else
        config.http_addr.in6.sin6_port = htons((uint16_t)(f->http_port > 0 ? f->http_port : 0));
    return 0;
}

/* The mesh key (spec §7): -mesh-psk-file, or in -dev mode $TAILSCALE_DERPER_MESH_KEY. */
static int configure_mesh_key(const struct srv_flags *f)
{
    if (f->mesh_psk_file) {
        char err[256];
        if (derp_mesh_key_load_file(f->mesh_psk_file, &config.mesh_key, err, sizeof(err)) < 0) {
            fprintf(stderr, "hderp-server: -mesh-psk-file %s: %s\n", f->mesh_psk_file, err);
            return -EINVAL;
        }
        config.have_mesh_key = true;
    } else if (f->dev && getenv("TAILSCALE_DERPER_MESH_KEY")) {
        const char *k = getenv("TAILSCALE_DERPER_MESH_KEY");
        if (derp_mesh_key_parse(k, strlen(k), &config.mesh_key) < 0) {
            fprintf(stderr, "hderp-server: TAILSCALE_DERPER_MESH_KEY is not 64 hex digits\n");
            return -EINVAL;
        }
        config.have_mesh_key = true;
    }
    return 0;
}

/* --allow-keys and --account-keys: a bad line refuses to start. */
static int configure_key_lists(const struct srv_flags *f)
{
    char err[512];
    if (f->allow_keys && srv_allow_configure(&config, f->allow_keys, err, sizeof(err)) < 0) {
        fprintf(stderr, "hderp-server: --allow-keys %s\n", err);
        return -EINVAL;
    }
    if (f->account_keys && srv_acct_configure(&config, f->account_keys, err, sizeof(err)) < 0) {
        fprintf(stderr, "hderp-server: --account-keys %s\n", err);
        return -EINVAL;
    }
    return 0;
}

/* Issue 16's limits (deadlines, pre-login caps) and --hash-key. 0 or -EINVAL (printed). */
static int configure_limits(const struct srv_flags *f)
{
    config.http_deadline_ms = (uint32_t)f->http_deadline_ms;
    config.login_deadline_ms = (uint32_t)f->login_deadline_ms;
    config.prelogin_shard_max = (uint32_t)f->prelogin_max;
    config.prelogin_addr_max = (uint32_t)f->prelogin_addr_max;
    config.placement = f->placement; /* where clients live (server_place.c) */
    if (f->hash_key == NULL)
        return 0;
    size_t got = 0;
    if (strlen(f->hash_key) != 2 * SRV_HASH_KEY_LEN ||
        sodium_hex2bin(hash_key, sizeof(hash_key), f->hash_key, 2 * SRV_HASH_KEY_LEN, NULL, &got,
                       NULL) != 0 ||
        got != sizeof(hash_key)) {
        fprintf(stderr, "hderp-server: --hash-key: expected %d hex digits\n", 2 * SRV_HASH_KEY_LEN);
        return -EINVAL;
    }
    hash_key_given = true;
    return 0;
}

/* -verify-client-url (its cache and re-checks) and -verify-clients: 0 or -1 (printed). */
static int configure_admission(const struct srv_flags *f)
{
    char aerr[256];
    if (srv_admit_configure(&config, f->verify_client_url, f->verify_client_url_fail_open, aerr,
                            sizeof(aerr)) < 0) {
        fprintf(stderr, "hderp-server: -verify-client-url %s: %s\n", f->verify_client_url, aerr);
        return -1;
    }
    if (srv_admit_recheck_configure(&config, f->verify_cache_ttl_ms, f->verify_recheck_ms) < 0)
        return -1;
    if (srv_admit_local_configure(&config, f->verify_clients, f->socket, aerr, sizeof(aerr)) < 0) {
        fprintf(stderr, "hderp-server: -verify-clients: %s\n", aerr);
        return -1;
    }
    return 0;
}

static int configure(const struct srv_flags *f)
{
    if (net_addr_parse(f->addr, &config.addr) < 0) {
        fprintf(stderr,
                "hderp-server: -a %s: not a numeric address like :3340, "
                "127.0.0.1:3340 or [::1]:3340\n",
                f->addr);
        return -EINVAL;
    }
    config.http_port = -1;
    if (srv_flags_tls_mode(f) && configure_tls(f) < 0)
        return -EINVAL;
    snprintf(config.addr_text, sizeof(config.addr_text), "%s", f->addr);
    config.dev = f->dev;
    config.verbose = f->verbose;
    config.shards = f->shards;
    config.write_timeout_ms = f->tcp_write_timeout_ms;
    config.keepalive_ms = f->keepalive_ms;
    config.account_window_ms = f->account_window_ms;
    config.keepalive_jitter_ms =
        f->keepalive_ms == DERP_KEEPALIVE_INTERVAL_MS ? DERP_KEEPALIVE_JITTER_MS : 0;
    config.tcp_user_timeout_ms = (int)f->tcp_user_timeout_ms;
    config.tcp_keepalive_s = (int)(f->tcp_keepalive_ms / 1000);
    config.home = f->home;
    config.accept_rate = isinf(f->accept_limit) ? 0 : f->accept_limit / 1000.0;
    config.accept_burst = (double)f->accept_burst;
    if (configure_limits(f) < 0)
        return -EINVAL;
    config.stun = f->stun;
    config.stun_port = f->stun_port;
    if (configure_mesh_key(f) < 0)
        return -EINVAL;
    if (configure_admission(f) < 0)
        return -EINVAL;
    char aerr[256];
    if (srv_mesh_configure(&config, f->mesh_with, aerr, sizeof(aerr)) < 0) {
        fprintf(stderr, "hderp-server: -mesh-with: %s\n", aerr);
        return -EINVAL;
    }
    if (f->rate_config) { /* -rate-config (spec §6.9): a bad file refuses to start */
        char rerr[256];
        if (srv_rate_load(f->rate_config, &config.rate, rerr, sizeof(rerr)) < 0) {
            fprintf(stderr, "hderp-server: -rate-config %s: %s\n", f->rate_config, rerr);
            return -EINVAL;
        }
        config.rate_config_path = f->rate_config;
    }
    if (f->proxy_from && srv_proxy_configure(&config, f->proxy_from) < 0)
        return -EINVAL; /* --proxy-protocol-from: the message is printed */
    if (configure_key_lists(f) < 0)
        return -EINVAL;
    int rc = load_key(f);
    if (rc < 0)
        return rc;
    derp_key_hex_format(config.key.pub.bytes, config.key_hex);
    char terr[1024];
    if (srv_certs_configure(&config, terr, sizeof(terr)) < 0) {
        fprintf(stderr, "hderp-server: %s\n", terr);
        return -1;
    }
    return 0;
}

/* After hd_runtime_create: every shard's snapshot of the reloadable configuration (lists,
 * limit, TLS context). 0, or -1 with the message printed (detach_snapshots undoes the rest). */
static int attach_failed(const char *what, int rc)
{
    fprintf(stderr, "hderp-server: %s: %s\n", what, strerror(-rc));
    return -1;
}

static int attach_snapshots(struct hd_runtime *rt)
{
    int rc;
    if ((rc = srv_allow_attach(&config, rt)) < 0)
        return attach_failed("--allow-keys", rc);
    if ((rc = srv_acct_attach_config(&config, rt)) < 0)
        return attach_failed("--account-keys", rc);
    if ((rc = srv_rate_attach(&config, rt)) < 0)
        return attach_failed("-rate-config", rc);
    if ((rc = srv_certs_attach(&config, rt)) < 0)
        return attach_failed("TLS", rc);
    return 0;
}

static void detach_snapshots(void)
{
    srv_rate_detach(&config);
    srv_acct_detach_config(&config);
    srv_allow_detach(&config);
    srv_certs_detach(&config);
}

static void log_start(struct hd_runtime *rt)
{
    struct hd_shard *s0 = hd_runtime_shard(rt, 0);
    uint32_t feat = hd_shard_features(s0);
    char pub[DERP_PUBKEY_TEXT_SIZE], stun[32];
    derp_pubkey_format(&config.key.pub, pub);
    if (config.stun)
        snprintf(stun, sizeof(stun), "on UDP %d", config.stun_port);
    else
        snprintf(stun, sizeof(stun), "off");
    hd_log(HD_LOG_INFO,
           "hderp-server %s: listening on %s (%s), %u shards, public key %s, "
           "STUN %s, io_uring%s%s%s, mesh key %s, %u mesh nodes",
           HDERP_VERSION, config.addr_text,
           config.tls ? (tls_ktls_available() ? "TLS 1.3, kTLS" : "TLS 1.3, userspace records")
                      : "plain HTTP",
           hd_runtime_shards_count(rt), pub, stun,
           (feat & HD_FEAT_DEFER_TASKRUN) ? " defer-taskrun" : "",
           (feat & HD_FEAT_MSG_RING) ? " msg-ring" : " eventfd-wake",
           (feat & HD_FEAT_MIN_WAIT) ? " min-wait" : "", config.have_mesh_key ? "set" : "none",
           config.mesh_count);
    if (config.dev)
        hd_log(HD_LOG_INFO,
               "dev mode: point a client at http://127.0.0.1:%u/derp (tailscaled: "
               "TS_DEBUG_USE_DERP_HTTP=1 and a DERP map node with DERPPort %u)",
               net_addr_port(&config.addr), net_addr_port(&config.addr));
}

/* derper fails with "address in use" when another process listens on its address; our shards
 * share it through SO_REUSEPORT, which would let a second server in silently
 * (net_listener_claim). Returns the claim's socket, -1 for port 0 (nothing claimed), or -2
 * (message printed). */
static int claim(const struct net_addr *addr, const char *what)
{
    int fd = net_listener_claim(addr);
    if (fd >= 0 || fd == -EINVAL)
        return fd >= 0 ? fd : -1;
    char text[64];
    net_addr_format(addr, text, sizeof(text));
    if (fd == -EADDRINUSE)
        fprintf(stderr,
                "hderp-server: %s %s: address in use: another process listens there (a second "
                "hderp-server or derper?)\n",
                what, text);
    else
        fprintf(stderr, "hderp-server: %s %s: cannot bind: %s\n", what, text, strerror(-fd));
    return -2;
}

static int claim_fds[2] = {-1, -1}; /* -a, -http-port: held until exit */

static int claim_all(void)
{
    if ((claim_fds[0] = claim(&config.addr, "-a")) == -2)
        return -1;
    if (config.tls && config.http_port > 0 &&
        (claim_fds[1] = claim(&config.http_addr, "-http-port")) == -2)
        return -1;
    return 0;
}

static void claim_release(void)
{
    for (unsigned i = 0; i < 2; i++)
        if (claim_fds[i] >= 0)
            close(claim_fds[i]);
}

/* The flags, and the modes that do not run a server: the exit code, or -1 to go on. */
static int parse_and_modes(int argc, char **argv, struct srv_flags *f)
{
    if (argc > 1 && strcmp(argv[1], "check") == 0) /* server_check.c: the self-test */
        return srv_check_main(argc - 1, argv + 1);
    int rc = srv_flags_parse(argc, argv, f);
    if (rc != 0)
        return rc > 0 ? 0 : 2; /* > 0: --help or -version printed */
    if (f->log_json)           /* --log-format json: every hd_log line from here on */
        hd_log_set_format(HD_LOG_FORMAT_JSON);
    if (f->print_derpmap) /* server_derpmap.c: the DERP map entry instead of running */
        return srv_derpmap_print(f, stdout) < 0 ? 2 : 0;
    return -1;
}

/* The runtime the flags ask for: frame pools, the modules (tls_module when anything on the
 * shards speaks TLS), the wait and stall settings. 0 or hd_runtime_create's error. */
static int runtime_create(const struct srv_flags *f, struct hd_runtime **rt)
{
    static struct hd_frame_class classes[SRV_FRAME_CLASSES];
    HD_ASSERT(srv_frame_classes((uint32_t)f->frame_pool_mib, classes) == 0); /* flag checked */
    /* tls_module (net before it) when anything on the shards speaks TLS. */
    static const struct hd_module *const modules[] = {&tls_module, &srv_module};
    unsigned first = config.tls || config.mesh_tls || srv_admit_needs_tls(&config) ? 0 : 1;
    struct hd_runtime_config cfg = {
        .shards_count = f->shards,
        .min_wait_us = f->min_wait_us,
        .pin = true,
        .handle_signals = true,
        .frame_classes = classes,
        .frame_classes_count = HD_ARRAY_SIZE(classes),
        .frame_release = srv_frame_release, /* the senders' accounts (server_frames.c) */
        .modules = modules + first,
        .modules_count = 2 - first,
        .stall_ms = !f->stall_set      ? 0
                    : f->stall_ms == 0 ? HD_STALL_OFF
                                       : (uint32_t)f->stall_ms,
    };
    return hd_runtime_create(&cfg, rt);
}

int main(int argc, char **argv)
{
    struct srv_flags f;
    int rc = parse_and_modes(argc, argv, &f);
    if (rc >= 0)
        return rc; /* --help, -version, check, --print-derpmap, or bad flags */
    if (configure(&f) < 0)
        return 1;
    if (f.verbose)
        hd_log_set_level(HD_LOG_DEBUG);
    if (claim_all() < 0)
        return 1;
    struct hd_runtime *rt;
    if ((rc = runtime_create(&f, &rt)) < 0) {
        fprintf(stderr, "hderp-server: cannot set up the runtime: %s\n", strerror(-rc));
        return 1;
    }
    if (attach_snapshots(rt) < 0 || (rc = hd_runtime_start(rt)) < 0) {
        if (rc < 0)
            fprintf(stderr, "hderp-server: start failed: %s\n", strerror(-rc));
        detach_snapshots();
        hd_runtime_destroy(rt);
        return 1;
    }
    log_start(rt);
    rc = hd_runtime_wait(rt);
    detach_snapshots();
    hd_runtime_destroy(rt);
    srv_admit_fini(&config);
    srv_mesh_config_free(&config);
    claim_release();
    hd_log(HD_LOG_INFO, "stopped");
    return rc < 0 ? 1 : 0;
}
