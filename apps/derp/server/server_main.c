/* server_main.c - hderp-server's main: flags (server_flags.c) into a configuration
 * (server_setup.c), a runtime with the relay module (server_module.c) on every shard, the start
 * line, and the wait for SIGINT/SIGTERM (SIGHUP reloads). Main thread. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server.h"
#include "server_flags.h"

#define HDERP_VERSION "0.1.0"

static void log_start(const struct srv_config *cfg, struct hd_runtime *rt)
{
    struct hd_shard *s0 = hd_runtime_shard(rt, 0);
    uint32_t feat = hd_shard_features(s0);
    char pub[DERP_PUBKEY_TEXT_SIZE], stun[32];
    derp_pubkey_format(&cfg->key.pub, pub);
    if (cfg->stun)
        snprintf(stun, sizeof(stun), "on UDP %d", cfg->stun_port);
    else
        snprintf(stun, sizeof(stun), "off");
    hd_log(HD_LOG_INFO,
           "hderp-server %s: listening on %s (%s), %u shards, public key %s, "
           "STUN %s, io_uring%s%s, mesh key %s, %u mesh nodes",
           HDERP_VERSION, cfg->addr_text,
           cfg->tls ? (tls_ktls_available() ? "TLS 1.3, kTLS" : "TLS 1.3, userspace records")
                    : "plain HTTP",
           hd_runtime_shards_count(rt), pub, stun,
           (feat & HD_FEAT_DEFER_TASKRUN) ? " defer-taskrun" : "",
           (feat & HD_FEAT_MSG_RING) ? " msg-ring" : " eventfd-wake",
           cfg->have_mesh_key ? "set" : "none", cfg->mesh_count);
    if (cfg->dev)
        hd_log(HD_LOG_INFO,
               "dev mode: point a client at http://127.0.0.1:%u/derp (tailscaled: "
               "TS_DEBUG_USE_DERP_HTTP=1 and a DERP map node with DERPPort %u)",
               net_addr_port(&cfg->addr), net_addr_port(&cfg->addr));
}

/* The runtime with the relay (and tls_module before it when it speaks TLS) until a signal. */
static int run(struct srv_config *cfg, const struct srv_flags *f)
{
    const struct hd_module *const modules[] = {&tls_module, &srv_module};
    void *const args[] = {NULL, cfg};
    unsigned first = srv_needs_tls(cfg) ? 0 : 1;
    struct hd_runtime_config rc_cfg = {
        .shards_count = f->shards,
        .stall_ms = !f->stall_set      ? 0
                    : f->stall_ms == 0 ? HD_STALL_OFF
                                       : (uint32_t)f->stall_ms,
        .pin = true,
        .handle_signals = true,
        .frame_classes = srv_frame_classes,
        .frame_classes_count = SRV_FRAME_CLASSES_COUNT,
        .modules = modules + first,
        .modules_args = args + first,
        .modules_count = 2 - first,
    };
    struct hd_runtime *rt;
    int rc = hd_runtime_create(&rc_cfg, &rt);
    if (rc < 0) {
        fprintf(stderr, "hderp-server: cannot set up the runtime: %s\n", strerror(-rc));
        return rc;
    }
    char err[256];
    if ((rc = srv_attach(cfg, rt, err, sizeof(err))) < 0) {
        fprintf(stderr, "hderp-server: %s\n", err);
        hd_runtime_destroy(rt);
        return rc;
    }
    rc = hd_runtime_start(rt);
    if (rc < 0) {
        fprintf(stderr, "hderp-server: start failed: %s\n", strerror(-rc));
    } else {
        log_start(cfg, rt);
        rc = hd_runtime_wait(rt);
        hd_log(HD_LOG_INFO, "stopped");
    }
    srv_detach(cfg);
    hd_runtime_destroy(rt);
    return rc;
}

int main(int argc, char **argv)
{
    struct srv_flags f;
    int rc = srv_flags_parse(argc, argv, &f);
    if (rc != 0)
        return rc > 0 ? 0 : 2; /* > 0: --help or -version printed */
    struct srv_config *cfg = calloc(1, sizeof(*cfg));
    if (cfg == NULL || srv_configure(cfg, &f) < 0) {
        if (cfg)
            srv_config_fini(cfg);
        free(cfg);
        return 1;
    }
    if (f.verbose)
        hd_log_set_level(HD_LOG_DEBUG);
    rc = run(cfg, &f);
    srv_config_fini(cfg);
    free(cfg);
    return rc < 0 ? 1 : 0;
}
