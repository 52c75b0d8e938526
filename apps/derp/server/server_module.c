/* server_module.c - the relay as a module: per shard a listener (and -http-port's, STUN, the
 * mesh links) and a peer table, for the configuration given as the module's arg; the frame
 * classes it needs; attaching and detaching what the configuration shares with the shards.
 * Hooks run on each shard's thread (shard_*) or the main thread (global_*, on_signal, attach). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server.h"
#include "ops/server_account.h"
#include "ops/server_acme.h"
#include "upgrade/server_live.h"
#include "upgrade/server_upgrade.h"

/* What shard_init built before its listeners, freed. */
static void ds_free(struct srv_shard *ds)
{
    srv_acct_shard_fini(ds);
    srv_live_fini(ds);
    srv_frames_fini(ds);
    srv_prelogin_fini(ds);
    srv_peers_fini(&ds->peers);
    srv_peers_fini(&ds->guests);
    srv_sources_shard_fini(ds);
    free(ds->scratch);
    free(ds);
}

/* A listener of this shard: the socket an upgrade handed over for it (server_upgrade.c), else a
 * new one on addr; noted for the next upgrade either way. */
static int listen_on(struct srv_shard *ds, enum srv_upgrade_kind kind, const struct net_addr *addr,
                     net_accept_fn *fn, struct net_listener **out)
{
    const struct srv_config *cfg = ds->cfg;
    struct net_listener_options lo = {.reuseport = true,
                                      .tcp_user_timeout_ms = cfg->tcp_user_timeout_ms,
                                      .keepalive_s = cfg->tcp_keepalive_s};
    unsigned id = hd_shard_id(ds->s);
    int fd = srv_upgrade_take(cfg, kind, id);
    int rc = fd >= 0 ? net_listener_adopt(ds->s, fd, &lo, fn, ds, out)
                     : net_listener_start(ds->s, addr, &lo, fn, ds, out);
    if (rc == 0)
        srv_upgrade_note(cfg, kind, id, net_listener_fd(*out));
    return rc;
}

static int shard_init(struct hd_shard *s, void *arg, void **state)
{
    struct srv_config *cfg = arg;
    HD_ASSERT(cfg != NULL); /* the module's arg is its configuration */
    int rc = 0;
    struct srv_shard *ds = calloc(1, sizeof(*ds));
    if (ds == NULL)
        return -ENOMEM;
    ds->s = s;
    ds->cfg = cfg;
    int idx = hd_runtime_module_index(hd_shard_runtime(s), &srv_module, cfg);
    HD_ASSERT(idx >= 0); /* this very instance is in the runtime's list */
    ds->instance = (unsigned)idx;
    ds->scratch = malloc(DERP_CLIENT_INFO_PLAIN_MAX);
    if (ds->scratch == NULL || (rc = srv_peers_init(&ds->peers)) < 0 ||
        (rc = srv_peers_init(&ds->guests)) < 0) {
        srv_peers_fini(&ds->peers);
        srv_peers_fini(&ds->guests);
        free(ds->scratch);
        free(ds);
        return rc < 0 ? rc : -ENOMEM;
    }
    if ((rc = srv_sources_shard_init(ds)) < 0 || (rc = srv_prelogin_init(ds)) < 0 ||
        (rc = srv_frames_init(ds)) < 0 || (rc = srv_acct_shard_init(ds)) < 0) {
        ds_free(ds);
        return rc;
    }
    srv_accept_limit_init(ds);
    rc = listen_on(ds, SRV_UP_LISTEN, &cfg->addr, srv_http_accept, &ds->listener);
    if (rc < 0) {
        hd_log(HD_LOG_ERROR, "cannot listen on %s: %s", cfg->addr_text, strerror(-rc));
        ds_free(ds);
        return rc;
    }
    if (cfg->tls && cfg->http_port > 0) {
        rc = listen_on(ds, SRV_UP_HTTP, &cfg->http_addr, srv_http80_accept, &ds->http_listener);
        if (rc < 0)
            hd_log(HD_LOG_ERROR, "cannot listen on -http-port %d: %s", cfg->http_port,
                   strerror(-rc));
    }
    if (rc == 0 && cfg->stun)
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
        ds_free(ds);
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
    (void)s;
    srv_mesh_fini(ds);
    srv_place_tick_fini(ds);
    free(ds->watch_list);
    srv_peers_fini(&ds->peers);
    srv_peers_fini(&ds->guests);
    srv_sources_shard_fini(ds);
    srv_prelogin_fini(ds);
    srv_frames_fini(ds);
    srv_admit_shard_fini(ds);
    srv_acct_shard_fini(ds);
    srv_quota_shard_fini(ds);
    srv_live_fini(ds);
    free(ds->scratch);
    free(ds);
}

static int global_init(struct hd_runtime *rt, void *arg)
{
    struct srv_config *cfg = arg;
    (void)rt;
    int rc = derp_crypto_init();
    if (rc == 0)
        srv_hash_init(cfg->hash_key_given ? cfg->hash_key : NULL);
    return rc < 0 ? rc : srv_acme_start(cfg); /* -certmode letsencrypt: its thread */
}

static void global_fini(struct hd_runtime *rt, void *arg)
{
    (void)rt, (void)arg;
    srv_acme_stop();
}

/* Main thread, SIGHUP: reload what can be reloaded. */
static void on_signal(struct hd_runtime *rt, int signo, void *arg)
{
    struct srv_config *cfg = arg;
    if (signo == SIGUSR2) {
        srv_upgrade_signal(cfg, rt); /* server_upgrade.c: hand over to a new binary */
        return;
    }
    if (signo != SIGHUP)
        return;
    srv_allow_reload(cfg); /* --allow-keys */
    srv_acct_reload(cfg);  /* --account-keys */
    srv_certs_reload(cfg); /* TLS mode: the certificate files */
    srv_rate_reload(cfg);  /* -rate-config */
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

int srv_attach(struct srv_config *cfg, struct hd_runtime *rt, char *err, size_t err_size)
{
    int rc;
    if ((rc = srv_allow_attach(cfg, rt)) < 0) { /* --allow-keys: every shard's list */
        snprintf(err, err_size, "--allow-keys: %s", strerror(-rc));
        return rc;
    }
    if ((rc = srv_acct_attach_config(cfg, rt)) < 0) { /* --account-keys */
        snprintf(err, err_size, "--account-keys: %s", strerror(-rc));
        srv_allow_detach(cfg);
        return rc;
    }
    if ((rc = srv_rate_attach(cfg, rt)) < 0) { /* -rate-config: every shard's limit */
        snprintf(err, err_size, "-rate-config: %s", strerror(-rc));
        srv_acct_detach_config(cfg);
        srv_allow_detach(cfg);
        return rc;
    }
    if ((rc = srv_certs_attach(cfg, rt)) < 0) { /* TLS: every shard's context */
        snprintf(err, err_size, "TLS: %s", strerror(-rc));
        srv_rate_detach(cfg);
        srv_acct_detach_config(cfg);
        srv_allow_detach(cfg);
        return rc;
    }
    if ((rc = srv_bootdns_attach(cfg, rt)) < 0) { /* bootstrap DNS names: their thread */
        snprintf(err, err_size, "-bootstrap-dns-names: %s", strerror(-rc));
        srv_detach(cfg);
        return rc;
    }
    return 0;
}

void srv_detach(struct srv_config *cfg)
{
    srv_bootdns_detach(cfg);
    srv_rate_detach(cfg);
    srv_acct_detach_config(cfg);
    srv_allow_detach(cfg);
    srv_certs_detach(cfg);
}

void srv_config_fini(struct srv_config *cfg)
{
    srv_admit_fini(cfg);
    srv_mesh_config_free(cfg);
}
