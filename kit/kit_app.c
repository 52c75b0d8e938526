/* kit_app.c - the start-up every program on the framework repeats, as one call: the command
 * line (the app's flags plus -shards, -log-level, -log-format, or the app's own parser), the
 * logging level (unless the app keeps its own), the app's set-up, the runtime
 * with the app's module (and a layer such as tls_module before it), port holds closed once the
 * shards listen, signals, the wait, and the tear-down, with the exit codes of a command-line
 * tool (0, 1 failure, 2 usage). Main thread. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <hd/kit.h>

static int set_log_level(const char *v, void *arg, char *err, size_t err_size)
{
    static const char *const names[] = {"error", "warn", "info", "debug"};
    for (unsigned i = 0; i < HD_ARRAY_SIZE(names); i++) {
        if (strcmp(v, names[i]) == 0) {
            *(enum hd_log_level *)arg = (enum hd_log_level)i;
            return 0;
        }
    }
    snprintf(err, err_size, "-log-level %s: expected error, warn, info or debug", v);
    return -EINVAL;
}

static int set_log_format(const char *v, void *arg, char *err, size_t err_size)
{
    if (strcmp(v, "text") == 0 || strcmp(v, "json") == 0) {
        *(enum hd_log_format *)arg = v[0] == 'j' ? HD_LOG_FORMAT_JSON : HD_LOG_FORMAT_TEXT;
        return 0;
    }
    snprintf(err, err_size, "-log-format %s: expected text or json", v);
    return -EINVAL;
}

int kit_app_hold(struct kit_app *a, struct net_addr *addr, int type)
{
    if (a->holds_count == KIT_APP_HOLDS_MAX)
        return -ENOSPC;
    int fd = kit_port_hold(addr, type);
    if (fd < 0)
        return fd;
    a->holds[a->holds_count++] = fd;
    return 0;
}

static void holds_close(struct kit_app *a)
{
    for (unsigned i = 0; i < a->holds_count; i++)
        close(a->holds[i]);
    a->holds_count = 0;
}

/* The app's flags and the kit's in one table, parsed. 0, 1 (help printed), 2 (usage error). */
static int parse(struct kit_app *a, int argc, char **argv, enum hd_log_level *level,
                 enum hd_log_format *format)
{
    if (a->parse) {
        int rc = a->parse(a, argc, argv);
        return rc == 0 ? 0 : rc > 0 ? 1 : 2;
    }
    if (a->flags_count > KIT_APP_FLAGS_MAX) {
        fprintf(stderr, "%s: too many flags (at most %u)\n", a->name, KIT_APP_FLAGS_MAX);
        return 2;
    }
    struct kit_flag all[KIT_APP_FLAGS_MAX + 3];
    unsigned n = a->flags_count;
    if (n)
        memcpy(all, a->flags, n * sizeof(all[0]));
    struct kit_flag_call lc = {set_log_level, level}, fc = {set_log_format, format};
    char shards_help[64];
    if (a->rt.shards_count)
        snprintf(shards_help, sizeof(shards_help), "shards, one thread each (default %u)",
                 a->rt.shards_count);
    else
        snprintf(shards_help, sizeof(shards_help),
                 "shards, one thread each (default: one per CPU)");
    if (a->shards_flag)
        all[n++] = (struct kit_flag){"shards", KIT_FLAG_U32,  &a->rt.shards_count,
                                     1,        HD_SHARDS_MAX, shards_help};
    if (!a->keep_logging) {
        all[n++] = (struct kit_flag){
            "log-level", KIT_FLAG_FN, &lc, 0, 0, "error, warn, info (default) or debug"};
        all[n++] = (struct kit_flag){
            "log-format", KIT_FLAG_FN, &fc, 0, 0, "text (default) or json (one object a line)"};
    }
    char err[200];
    int rc = kit_flags_parse(all, n, argc, argv, err, sizeof(err));
    if (rc == -ECANCELED) {
        kit_flags_usage(stdout, a->name, all, n);
        return 1;
    }
    if (rc < 0) {
        fprintf(stderr, "%s: %s\n", a->name, err);
        kit_flags_usage(stderr, a->name, all, n);
        return 2;
    }
    return 0;
}

/* Create, start, announce, wait. Returns 0 or -errno (printed here). */
static int run(struct kit_app *a)
{
    const struct hd_module *mods[2];
    void *args[2];
    unsigned n = 0;
    if (a->layer) {
        mods[n] = a->layer;
        args[n++] = a->layer_arg;
    }
    HD_ASSERT(a->module != NULL);
    mods[n] = a->module;
    args[n++] = a->module_arg;
    struct hd_runtime_config cfg = a->rt;
    cfg.handle_signals = !a->no_signals;
    cfg.modules = mods;
    cfg.modules_args = args;
    cfg.modules_count = n;
    struct hd_runtime *rt = NULL;
    int rc = hd_runtime_create(&cfg, &rt);
    if (rc == 0)
        rc = hd_runtime_start(rt);
    holds_close(a); /* every shard has its socket on the held ports now (or the start failed) */
    if (rc == 0 && a->started)
        rc = a->started(a, rt);
    if (rc == 0)
        rc = hd_runtime_wait(rt);
    else if (rt) { /* started() failed: stop what runs (a no-op if the start failed) */
        hd_runtime_stop(rt);
        (void)hd_runtime_wait(rt);
    }
    a->runtime = rt; /* for finish: statistics */
    if (rc < 0 && !a->quiet)
        fprintf(stderr, "%s: %s\n", a->name, strerror(-rc));
    return rc;
}

int kit_app_main(struct kit_app *a, int argc, char **argv)
{
    HD_ASSERT(a->name != NULL && a->module != NULL);
    enum hd_log_level level = HD_LOG_INFO;
    enum hd_log_format format = HD_LOG_FORMAT_TEXT;
    int pc = parse(a, argc, argv, &level, &format);
    if (pc != 0)
        return pc == 1 ? 0 : 2;
    if (!a->keep_logging) {
        hd_log_set_level(level);
        hd_log_set_format(format);
    }
    int rc = a->setup ? a->setup(a) : 0;
    int code = 1;
    if (rc == 0) {
        rc = run(a);
        code = rc < 0 ? 1 : 0;
        if (a->finish)
            code = a->finish(a, rc);
        if (a->runtime)
            hd_runtime_destroy(a->runtime);
        a->runtime = NULL;
    }
    holds_close(a);
    if (a->teardown)
        a->teardown(a);
    return code;
}
