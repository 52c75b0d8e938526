/* echo_main.c - hderp-echo: a DERP latency observer on the framework, for any DERP server.
 *   hderp-echo echo --server URL [--key-file F]        bounce every packet back to its sender
 *   hderp-echo ping --server URL --peer KEY [...]      timestamped packets to an echo peer,
 *                                                      percentiles after a warm-up
 *   hderp-echo observe --server URL... | --derp-map F  a continuous observer of relay paths
 *                                                      (echo_obs_main.c)
 * One shard; the DERP client (apps/derp/client/derp_client.h) over plain TCP or TLS. Main thread
 * parses flags; everything else runs on the shard. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "derp_client.h"
#include <hd/kit.h>
#include "echo.h"
#include "echo_obs.h"

static struct echo_opts o;
static struct echo_ping_state ping;
static struct derp_keypair keypair;
static struct tls_ctx *client_tls;
static int exit_code;

/* ---------------------------------------------------------------- echo */

static void on_packet_echo(struct derp_client *k, const struct derp_pubkey *src,
                           const uint8_t *data, size_t len)
{
    if (derp_client_send(k, src, data, len) < 0)
        o.echo_dropped++; /* the send queue is full: an echo is lost, the sender counts it */
}

static void on_ready_echo(struct derp_client *k, const struct derp_server_info *info)
{
    (void)info;
    char text[DERP_PUBKEY_TEXT_SIZE];
    derp_pubkey_format(derp_client_public_key(k), text);
    printf("%s\n", text); /* the machine-readable line a pinger reads */
    fflush(stdout);
    hd_log(HD_LOG_INFO, "echo: logged in to %s as %s", o.server, text);
}

/* ---------------------------------------------------------------- common */

static void on_close(struct derp_client *k, int reason)
{
    (void)k;
    if (reason != 0) {
        hd_log(HD_LOG_ERROR, "%s: connection to %s closed: %s", o.mode, o.server,
               strerror(-reason));
        exit_code = 1;
    }
    hd_runtime_stop(hd_shard_runtime(hd_shard_current()));
}

static const struct derp_client_callbacks echo_cb = {
    .on_ready = on_ready_echo,
    .on_packet = on_packet_echo,
    .on_close = on_close,
};

static const struct derp_client_callbacks ping_cb = {
    .on_ready = echo_ping_ready,
    .on_packet = echo_ping_packet,
    .on_peer_gone = echo_ping_peer_gone,
    .on_close = on_close,
};

static int shard_init(struct hd_shard *s, void *arg, void **state)
{
    (void)arg;
    struct derp_client_config cfg = {.keypair = &keypair, .can_ack_pings = true};
    derp_client_config_set_url(&cfg, &o.url);
    cfg.tls_ctx = client_tls;
    cfg.read_timeout_ms = DERP_CLIENT_TIMEOUT_OFF; /* keep-alives arrive every minute anyway */
    bool is_ping = strcmp(o.mode, "ping") == 0;
    if (is_ping)
        echo_ping_init(&ping, &o, s);
    struct derp_client *k;
    int rc = derp_client_connect(s, &cfg, is_ping ? &ping_cb : &echo_cb, &ping, &k);
    if (rc < 0) {
        hd_log(HD_LOG_ERROR, "%s: cannot connect to %s: %s", o.mode, o.server, strerror(-rc));
        return rc;
    }
    ping.client = k;
    *state = NULL;
    return 0;
}

static void shard_stop(struct hd_shard *s, void *state)
{
    (void)state;
    echo_ping_stop(&ping);
    net_shard_close_all(s, 0);
}

static const struct hd_module *const echo_requires[] = {&net_module, NULL};

static const struct hd_module echo_module = {
    .abi_version = HD_MODULE_ABI,
    .name = "echo",
    .shard_init = shard_init,
    .shard_stop = shard_stop,
    .requires = echo_requires,
};

static int load_keys(void)
{
    if (o.key_file == NULL)
        return derp_keypair_generate(&keypair);
    char err[256];
    bool created;
    struct derp_privkey priv;
    if (derp_key_file_load_or_create(o.key_file, &priv, &created, err, sizeof(err)) < 0) {
        fprintf(stderr, "hderp-echo: --key-file %s: %s\n", o.key_file, err);
        return -EINVAL;
    }
    return derp_keypair_from_privkey(&keypair, &priv);
}

static int echo_parse(struct kit_app *a, int argc, char **argv)
{
    (void)a;
    return echo_opts_parse(argc, argv, &o);
}

static int echo_setup(struct kit_app *a)
{
    if (derp_crypto_init() < 0 || load_keys() < 0)
        return -EINVAL;
    if (o.url.tls) { /* tls_module (with net before it) only for an https server */
        struct tls_client_options to = {.ca_file = o.ca_file, .insecure = o.insecure};
        int rc = tls_client_ctx_create(&to, &client_tls);
        if (rc < 0) {
            fprintf(stderr, "hderp-echo: TLS set-up failed: %s\n", strerror(-rc));
            return rc;
        }
        a->layer = &tls_module;
    }
    return 0;
}

static int echo_finish(struct kit_app *a, int rc)
{
    (void)a;
    if (rc < 0)
        exit_code = 1;
    if (strcmp(o.mode, "ping") == 0 && exit_code == 0)
        exit_code = echo_ping_report(&ping, &o) < 0 ? 1 : 0;
    return exit_code;
}

static void echo_teardown(struct kit_app *a)
{
    (void)a;
    if (client_tls)
        tls_ctx_destroy(client_tls);
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "observe") == 0)
        return echo_obs_main(argc, argv);
    struct kit_app app = {.name = "hderp-echo",
                          .parse = echo_parse,
                          .rt = {.shards_count = 1,
                                 .frame_classes = derp_client_frame_classes,
                                 .frame_classes_count = DERP_CLIENT_FRAME_CLASSES_COUNT},
                          .module = &echo_module,
                          .setup = echo_setup,
                          .finish = echo_finish,
                          .teardown = echo_teardown};
    return kit_app_main(&app, argc, argv);
}
