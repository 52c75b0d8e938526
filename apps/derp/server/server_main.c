/* server_main.c - hderp-server's main: flags (server_flags.c) into a configuration
 * (server_setup.c), a runtime with the relay module (server_module.c) on every shard, the start
 * line, and the wait for SIGINT/SIGTERM (SIGHUP reloads). Main thread.
 * Before the shards start, main claims -a (and -http-port) with net_listener_claim, so a port
 * another process listens on is refused with "address in use", as derper; a fixed -stun-port
 * is checked with net_udp_claim (another server's reuseport group, or a socket that shares with
 * nobody, is refused the same way; port holds are bound beside; another user's hderp-server
 * shares through SO_REUSEADDR and is not told from a hold; nothing stays held). -stun-port -1
 * is no STUN (as derper, and the DERP map's STUNPort -1). Port 0 (-a, -http-port, -stun-port)
 * is held with kit_port_hold instead, and the port the kernel picked goes into the
 * configuration, so every shard binds the same one (the UDP hold is closed once the shards bound
 * it, as it would get a share of the datagrams). Once hd_runtime_start returned (every shard
 * listens), --port-file is written with kit_port_file_write; a failure to write it stops the
 * server (exit 1). In an upgrade's successor, main takes the handed-over sockets and claims
 * instead (upgrade/server_upgrade.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hd/kit.h>

#include "server.h"
#include "ops/server_check.h"
#include "ops/server_flags.h"
#include "upgrade/server_upgrade.h"

#define HDERP_VERSION "0.1.0"

/* jemalloc (release builds): give freed pages back within about a second, from its own
 * background thread, so the chunks pools free after a burst (hd_slab_trim) leave RSS without
 * waiting for allocator activity (issue 16: RSS stayed at the burst's peak). Read by jemalloc at
 * start-up; an unused symbol under the sanitizers. */
extern const char *malloc_conf;
const char *malloc_conf = "background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0";

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
           "STUN %s, io_uring%s%s%s, mesh key %s, %u mesh nodes",
           HDERP_VERSION, cfg->addr_text,
           cfg->tls ? (tls_ktls_available() ? "TLS 1.3, kTLS" : "TLS 1.3, userspace records")
                    : "plain HTTP",
           hd_runtime_shards_count(rt), pub, stun,
           (feat & HD_FEAT_DEFER_TASKRUN) ? " defer-taskrun" : "",
           (feat & HD_FEAT_MSG_RING) ? " msg-ring" : " eventfd-wake",
           (feat & HD_FEAT_MIN_WAIT) ? " min-wait" : "", cfg->have_mesh_key ? "set" : "none",
           cfg->mesh_count);
    if (cfg->dev)
        hd_log(HD_LOG_INFO,
               "dev mode: point a client at http://127.0.0.1:%u/derp (tailscaled: "
               "TS_DEBUG_USE_DERP_HTTP=1 and a DERP map node with DERPPort %u)",
               net_addr_port(&cfg->addr), net_addr_port(&cfg->addr));
}

/* derper fails with "address in use" when another process listens on its address; our shards
 * share it through SO_REUSEPORT, which would let a second server in silently (TCP:
 * net_listener_claim, held; UDP: net_udp_claim, a check that holds nothing). Port 0: the kernel
 * picks a port, held (kit_port_hold) so that every shard binds that one, and written back into
 * *addr. 0 with *held the socket (-1: none), or -1 (message printed). */
static int claim(struct net_addr *addr, int type, const char *what, int *held)
{
    bool check_only = type == SOCK_DGRAM && net_addr_port(addr) != 0;
    int rc = net_addr_port(addr) == 0 ? kit_port_hold(addr, type)
             : check_only             ? net_udp_claim(addr)
                                      : net_listener_claim(addr);
    *held = rc >= 0 && !check_only ? rc : -1;
    if (rc >= 0)
        return 0;
    char text[64];
    net_addr_format(addr, text, sizeof(text));
    if (rc == -EADDRINUSE)
        fprintf(stderr,
                "hderp-server: %s %s: address in use: another process listens there (a second "
                "hderp-server or derper?)\n",
                what, text);
    else
        fprintf(stderr, "hderp-server: %s %s: cannot bind: %s\n", what, text, strerror(-rc));
    return -1;
}

/* -a, -http-port: held until exit; -stun-port 0's hold: closed once the shards bound it (a UDP
 * socket in the group would get its share of the datagrams). */
static int claim_fds[3] = {-1, -1, -1};

static void set_port(struct net_addr *a, uint16_t port)
{
    if (a->sa.sa_family == AF_INET)
        a->in4.sin_port = htons(port);
    else
        a->in6.sin6_port = htons(port);
}

/* The STUN address: -a's IP, -stun-port. */
static struct net_addr stun_addr(const struct srv_config *cfg)
{
    struct net_addr a = cfg->addr;
    set_port(&a, (uint16_t)cfg->stun_port);
    return a;
}

static int claim_all(struct srv_config *cfg)
{
    bool any_port = net_addr_port(&cfg->addr) == 0;
    if (claim(&cfg->addr, SOCK_STREAM, "-a", &claim_fds[0]) < 0)
        return -1;
    if (any_port) /* the start-up line names the port the kernel picked */
        net_addr_format(&cfg->addr, cfg->addr_text, sizeof(cfg->addr_text));
    if (cfg->tls && cfg->http_port >= 0) {
        if (claim(&cfg->http_addr, SOCK_STREAM, "-http-port", &claim_fds[1]) < 0)
            return -1;
        cfg->http_port = net_addr_port(&cfg->http_addr);
    }
    if (cfg->stun) { /* -stun-port N: checked free (issue 24); 0: picked and held */
        struct net_addr a = stun_addr(cfg);
        if (claim(&a, SOCK_DGRAM, "-stun-port", &claim_fds[2]) < 0)
            return -1;
        cfg->stun_port = net_addr_port(&a);
    }
    return 0;
}

static void claim_release(unsigned from)
{
    for (unsigned i = from; i < 3; i++)
        if (claim_fds[i] >= 0)
            close(claim_fds[i]);
    for (unsigned i = from; i < 3; i++)
        claim_fds[i] = -1;
}

/* --port-file: what every shard now listens on. 0 or -errno (printed). */
static int write_port_file(const struct srv_config *cfg, const char *path)
{
    struct net_addr stun = stun_addr(cfg);
    struct kit_port_entry e[3] = {{"derp", &cfg->addr}};
    unsigned n = 1;
    if (cfg->tls && cfg->http_port > 0)
        e[n++] = (struct kit_port_entry){"http", &cfg->http_addr};
    if (cfg->stun)
        e[n++] = (struct kit_port_entry){"stun", &stun};
    int rc = kit_port_file_write(path, e, n);
    if (rc < 0)
        hd_log(HD_LOG_ERROR, "--port-file %s: %s", path, strerror(-rc));
    return rc;
}

/* The runtime with the relay (and tls_module before it when it speaks TLS) until a signal. */
static int run(struct srv_config *cfg, const struct srv_flags *f)
{
    const struct hd_module *const modules[] = {&tls_module, &srv_module};
    void *const args[] = {NULL, cfg};
    unsigned first = srv_needs_tls(cfg) ? 0 : 1;
    static struct hd_frame_class classes[SRV_FRAME_CLASSES];
    int fc = srv_frame_classes((uint32_t)f->frame_pool_mib, classes);
    HD_ASSERT(fc == 0); /* the flag parser checked the size */
    struct hd_runtime_config rc_cfg = {
        .shards_count = f->shards,
        .min_wait_us = f->min_wait_us,
        .min_wait_gather = SRV_MIN_WAIT_GATHER,
        .stall_ms = !f->stall_set      ? 0
                    : f->stall_ms == 0 ? HD_STALL_OFF
                                       : (uint32_t)f->stall_ms,
        .pin = true,
        .handle_signals = true,
        .frame_classes = classes,
        .frame_classes_count = SRV_FRAME_CLASSES,
        .frame_release = srv_frame_release, /* the senders' accounts (server_frames.c) */
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
        claim_release(2); /* every shard bound the STUN port */
        log_start(cfg, rt);
        int prc = f->port_file ? write_port_file(cfg, f->port_file) : 0;
        if (prc < 0)
            hd_runtime_stop(rt);      /* whoever waits for the file would wait in vain */
        srv_upgrade_started(cfg, rt); /* the pid file; a successor's READY */
        rc = hd_runtime_wait(rt);
        srv_upgrade_stop(cfg); /* its thread posts to the runtime: joined before it goes */
        rc = prc < 0 ? prc : rc;
        hd_log(HD_LOG_INFO, "stopped");
    }
    srv_detach(cfg);
    hd_runtime_destroy(rt);
    return rc;
}

/* The flags, and the modes that do not run a server: the exit code, or -1 to go on. */
static int parse_and_modes(int argc, char **argv, struct srv_flags *f)
{
    if (argc > 1 && strcmp(argv[1], "check") == 0) /* server_check.c: the self-test */
        return srv_check_main(argc - 1, argv + 1);
    if (argc > 1 && strcmp(argv[1], "upgrade") == 0) /* server_upgrade_cmd.c */
        return srv_upgrade_cmd_main(argc - 1, argv + 1);
    int rc = srv_flags_parse(argc, argv, f);
    if (rc != 0)
        return rc > 0 ? 0 : 2; /* > 0: --help or -version printed */
    if (f->log_json)           /* --log-format json: every hd_log line from here on */
        hd_log_set_format(HD_LOG_FORMAT_JSON);
    if (f->print_derpmap) /* server_derpmap.c: the DERP map entry instead of running */
        return srv_derpmap_print(f, stdout) < 0 ? 2 : 0;
    return -1;
}

int main(int argc, char **argv)
{
    struct srv_flags f;
    int rc = parse_and_modes(argc, argv, &f);
    if (rc >= 0)
        return rc; /* --help, -version, check, --print-derpmap, or bad flags */
    struct srv_config *cfg = calloc(1, sizeof(*cfg));
    if (cfg == NULL || srv_configure(cfg, &f) < 0) {
        if (cfg)
            srv_config_fini(cfg);
        free(cfg);
        return 1;
    }
    if (f.verbose)
        hd_log_set_level(HD_LOG_DEBUG);
    /* A successor (SIGUSR2 in the old process) gets the claims and listeners instead. */
    int handed = srv_upgrade_init(cfg, argv, f.pid_file, (uint32_t)f.upgrade_timeout_ms) < 0
                     ? -1
                     : srv_upgrade_receive(cfg);
    if (handed < 0 || (handed == 0 && claim_all(cfg) < 0)) {
        claim_release(0);
        srv_upgrade_fini(cfg);
        srv_config_fini(cfg);
        free(cfg);
        return 1;
    }
    if (handed == 0) { /* -a's and -http-port's claims are the upgrade's now (handed over) */
        srv_upgrade_claims(cfg, claim_fds);
        claim_fds[0] = claim_fds[1] = -1;
    }
    rc = run(cfg, &f);
    claim_release(0);
    srv_upgrade_fini(cfg); /* after the runtime: closes the claims */
    srv_config_fini(cfg);
    free(cfg);
    return rc < 0 ? 1 : 0;
}
