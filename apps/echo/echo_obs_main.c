/* echo_obs_main.c - `hderp-echo observe`: the observer's module on one shard (paths, STUN, the
 * HTTP endpoint, a tick that probes and judges), the --once run and its report. Main thread:
 * flags, TLS contexts, the runtime; the report after the runtime stopped. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "echo_obs.h"
#include <hd/kit.h>

static struct echo_obs_opts opts;
static struct echo_obs obs;
static int start_error;

static void tick(struct hd_timer *t)
{
    struct echo_obs *ob = hd_container_of(t, struct echo_obs, tick);
    uint64_t now_ms = hd_clock_ns() / 1000000;
    echo_obs_paths_tick(ob, now_ms);
    echo_obs_alerts_check(ob, now_ms);
    hd_timer_start(ob->s, t, ob->tick_ms);
}

static void stop_timer(struct hd_timer *t)
{
    struct echo_obs *ob = hd_container_of(t, struct echo_obs, stop);
    hd_runtime_stop(hd_shard_runtime(ob->s));
}

/* The paths are known: STUN, the clients, the tick (and --once's end). */
static void observe_start(struct echo_obs *ob)
{
    echo_obs_stun_start(ob);
    echo_obs_paths_start(ob);
    hd_timer_start(ob->s, &ob->tick, ob->tick_ms);
    if (ob->o->once)
        hd_timer_start(ob->s, &ob->stop, (uint64_t)ob->o->duration_s * 1000);
}

static void log_paths(const struct echo_obs *ob)
{
    hd_log(HD_LOG_INFO, "observe: %u paths over %u nodes, %.1f probes/s each of %u B",
           ob->paths_count, ob->o->nodes_count, ob->o->rate_pps, ob->o->size);
}

/* --derp-map URL: the map arrived (its nodes are in opts) or could not be had. */
static void map_fetched(struct echo_obs *ob, int err)
{
    if (err == 0 && (err = echo_obs_paths_build(ob)) < 0)
        hd_log(HD_LOG_ERROR, "observe: %s",
               err == -E2BIG ? "too many paths (at most 512)" : strerror(-err));
    if (err < 0) {
        start_error = err;
        hd_runtime_stop(hd_shard_runtime(ob->s));
        return;
    }
    log_paths(ob);
    observe_start(ob);
}

static int shard_init(struct hd_shard *s, void *arg, void **state)
{
    struct echo_obs *ob = arg;
    int rc;
    ob->s = s;
    ob->start_ms = hd_clock_ns() / 1000000;
    hd_timer_init(&ob->tick, tick);
    hd_timer_init(&ob->stop, stop_timer);
    if ((rc = echo_obs_http_start(ob)) < 0) {
        start_error = rc;
        return rc;
    }
    *state = ob;
    if (ob->o->map_url == NULL) {
        observe_start(ob);
        return 0;
    }
    if ((rc = echo_obs_fetch_start(ob, &opts, map_fetched)) < 0) {
        hd_log(HD_LOG_ERROR, "observe: --derp-map %s: %s", opts.map_url, strerror(-rc));
        start_error = rc;
        echo_obs_http_stop(ob);
        return rc;
    }
    return 0;
}

static void shard_stop(struct hd_shard *s, void *state)
{
    struct echo_obs *ob = state;
    ob->stopping = true;
    echo_obs_fetch_cancel();
    hd_timer_stop(s, &ob->tick);
    hd_timer_stop(s, &ob->stop);
    echo_obs_paths_stop(ob);
    echo_obs_stun_stop(ob);
    echo_obs_http_stop(ob);
    net_shard_close_all(s, 0);
}

static const struct hd_module *const obs_requires[] = {&net_module, NULL};

static const struct hd_module obs_module = {
    .abi_version = HD_MODULE_ABI,
    .name = "echo-observe",
    .shard_init = shard_init,
    .shard_stop = shard_stop,
    .requires = obs_requires,
};

static int make_tls(struct echo_obs *ob)
{
    /* A map fetched later may name https nodes of either kind: both, then. */
    bool verify = opts.map_url != NULL, insecure = opts.map_url != NULL;
    for (unsigned i = 0; i < opts.nodes_count; i++) {
        if (!opts.nodes[i].url.tls)
            continue;
        *(opts.nodes[i].insecure ? &insecure : &verify) = true;
    }
    int rc = 0;
    if (verify) {
        struct tls_client_options to = {.ca_file = opts.ca_file, .system_roots = !opts.ca_file};
        rc = tls_client_ctx_create(&to, &ob->tls_verify);
    }
    if (rc == 0 && insecure) {
        struct tls_client_options to = {.insecure = true};
        rc = tls_client_ctx_create(&to, &ob->tls_insecure);
    }
    if (rc < 0)
        fprintf(stderr, "hderp-echo: observe: TLS set-up failed: %s\n", strerror(-rc));
    return rc;
}

static int obs_parse(struct kit_app *a, int argc, char **argv)
{
    (void)a;
    return echo_obs_opts_parse(argc, argv, &opts);
}

static int obs_setup(struct kit_app *a)
{
    obs.o = &opts;
    double interval = 1000.0 / opts.rate_pps;
    obs.tick_ms = interval < ECHO_OBS_TICK_MIN_MS ? ECHO_OBS_TICK_MIN_MS : (uint32_t)interval;
    if (derp_crypto_init() < 0 || make_tls(&obs) < 0)
        return -EINVAL;
    int rc;
    if (opts.map_url == NULL && (rc = echo_obs_paths_build(&obs)) < 0) {
        fprintf(stderr, "hderp-echo: observe: %s\n",
                rc == -E2BIG ? "too many paths (at most 512)" : strerror(-rc));
        return rc;
    }
    if (opts.map_url == NULL)
        log_paths(&obs);
    if (obs.tls_verify || obs.tls_insecure) /* tls_module (net before it): some node is https */
        a->layer = &tls_module;
    return 0;
}

static int obs_finish(struct kit_app *a, int rc)
{
    (void)a;
    int code = rc < 0 || start_error ? 1 : 0;
    if (code == 0 && opts.once)
        code = echo_obs_report(&obs, hd_clock_ns() / 1000000, stdout);
    return code;
}

static void obs_teardown(struct kit_app *a)
{
    (void)a;
    if (obs.tls_verify)
        tls_ctx_destroy(obs.tls_verify);
    if (obs.tls_insecure)
        tls_ctx_destroy(obs.tls_insecure);
    free(obs.paths);
}

int echo_obs_main(int argc, char **argv)
{
    struct kit_app app = {.name = "hderp-echo",
                          .parse = obs_parse,
                          .rt = {.shards_count = 1,
                                 .frame_classes = derp_client_frame_classes,
                                 .frame_classes_count = DERP_CLIENT_FRAME_CLASSES_COUNT},
                          .module = &obs_module,
                          .module_arg = &obs,
                          .setup = obs_setup,
                          .finish = obs_finish,
                          .teardown = obs_teardown};
    return kit_app_main(&app, argc, argv);
}

/* ---------------------------------------------------------------- --once */

/* Over the whole run: is the path healthy by the thresholds given? */
static bool path_ok(const struct echo_obs_path *p, const struct echo_obs_opts *o)
{
    if (!p->up || p->received == 0)
        return false;
    if (o->alert_p99_ms > 0 && echo_obs_ms(hd_hist_quantile(&p->total_ns, 0.99)) > o->alert_p99_ms)
        return false;
    return !(o->alert_loss_pct > 0 && echo_obs_loss_pct(p->received, p->lost) > o->alert_loss_pct);
}

int echo_obs_report(struct echo_obs *ob, uint64_t now_ms, FILE *out)
{
    (void)now_ms;
    int code = 0;
    if (!ob->o->json)
        fprintf(out, "%-40s %-5s %-5s %9s %9s %9s %9s %8s %7s %6s\n", "path", "kind", "state",
                "p50_ms", "p99_ms", "p999_ms", "max_ms", "received", "loss%", "recon");
    else
        fprintf(out, "{\"paths\":[");
    for (unsigned i = 0; i < ob->paths_count; i++) {
        const struct echo_obs_path *p = &ob->paths[i];
        bool ok = path_ok(p, ob->o);
        code |= !ok;
        double q[4] = {echo_obs_ms(hd_hist_quantile(&p->total_ns, 0.5)),
                       echo_obs_ms(hd_hist_quantile(&p->total_ns, 0.99)),
                       echo_obs_ms(hd_hist_quantile(&p->total_ns, 0.999)),
                       echo_obs_ms(p->total_ns.max)};
        double loss = echo_obs_loss_pct(p->received, p->lost);
        unsigned long long recon = p->pinger.reconnects + p->echo.reconnects;
        if (ob->o->json)
            fprintf(out,
                    "%s{\"path\":\"%s\",\"region\":\"%s\",\"kind\":\"%s\",\"up\":%s,\"ok\":%s,"
                    "\"p50_ms\":%.3f,\"p99_ms\":%.3f,\"p999_ms\":%.3f,\"max_ms\":%.3f,"
                    "\"sent\":%llu,\"received\":%llu,\"lost\":%llu,\"loss_pct\":%.3f,"
                    "\"reordered\":%llu,\"duplicated\":%llu,\"reconnects\":%llu}",
                    i ? "," : "", p->label, p->from->region, p->kind, p->up ? "true" : "false",
                    ok ? "true" : "false", q[0], q[1], q[2], q[3], (unsigned long long)p->sent,
                    (unsigned long long)p->received, (unsigned long long)p->lost, loss,
                    (unsigned long long)p->reordered, (unsigned long long)p->duplicated, recon);
        else
            fprintf(out, "%-40s %-5s %-5s %9.3f %9.3f %9.3f %9.3f %8llu %7.2f %6llu%s\n", p->label,
                    p->kind, p->up ? "up" : "down", q[0], q[1], q[2], q[3],
                    (unsigned long long)p->received, loss, recon, ok ? "" : "  FAIL");
    }
    if (ob->o->json)
        fprintf(out, "],\"ok\":%s}\n", code ? "false" : "true");
    else
        fprintf(out, "%s: %u paths, %s\n", code ? "FAIL" : "OK", ob->paths_count,
                code ? "some down or over a threshold" : "all up and within thresholds");
    return code;
}
