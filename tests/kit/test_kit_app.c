/* test_kit_app.c - kit_app_main, the start-up every program repeats (issue 27): the kit's flags
 * (-shards, -log-level, -log-format) beside the app's, the exit codes (0 help, 2 usage, 1 a
 * failed setup, finish's code), the order of the hooks, the runtime with the shards asked for,
 * a layer listed before the app, and a held port closed once the shards run (a listener on
 * every shard shares it), and for a program that runs it as one step of its own (the server's
 * self-check): the program's logging level kept, and no error printed by the kit with quiet.
 * Real runtime and sockets; the module stops the runtime itself. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <hd/kit.h>

static struct {
    char order[16];
    unsigned n;
    uint32_t extra; /* the app's own flag */
    struct net_addr listen;
    _Atomic unsigned inits;
    unsigned shards_seen;
    enum hd_log_level level_seen;
    bool net_state_seen; /* the layer (net_module) ran before the app on the shard */
    int setup_rc;
    int finish_rc;
} t;
static struct {
    bool keep_logging, quiet;
    int started_rc;
} opt; /* not cleared by main_with */

static void mark(char c)
{
    t.order[t.n++] = c;
}

static int app_shard_init(struct hd_shard *s, void *arg, void **state)
{
    (void)arg;
    *state = NULL;
    t.net_state_seen = hd_shard_module_state(s, &net_module) != NULL;
    struct net_listener_options lo = {.reuseport = true};
    struct net_listener *l;
    /* The held port: every shard listens on it beside the hold. */
    int rc = net_listener_start(s, &t.listen, &lo, NULL, NULL, &l);
    if (rc == 0)
        net_listener_stop(l);
    if (atomic_fetch_add(&t.inits, 1) + 1 == hd_shard_count(s))
        hd_runtime_stop(hd_shard_runtime(s));
    return rc;
}

static const struct hd_module app_module = {
    .abi_version = HD_MODULE_ABI, .name = "kitapp", .shard_init = app_shard_init};

static int setup(struct kit_app *a)
{
    mark('s');
    t.level_seen = hd_log_level_max;
    if (t.setup_rc)
        return t.setup_rc;
    a->layer = &net_module;
    return kit_app_hold(a, &t.listen, SOCK_STREAM);
}

static int started(struct kit_app *a, struct hd_runtime *rt)
{
    (void)a;
    mark('r');
    t.shards_seen = hd_runtime_shards_count(rt);
    return opt.started_rc;
}

static int finish(struct kit_app *a, int rc)
{
    mark('f');
    t.finish_rc = rc;
    cr_assert_not_null(a->runtime);
    return rc == 0 ? 7 : 1;
}

static void teardown(struct kit_app *a)
{
    (void)a;
    mark('t');
}

static int main_with(int argc, char **argv, int setup_rc)
{
    memset(&t, 0, sizeof(t));
    net_addr_parse("127.0.0.1:0", &t.listen);
    t.setup_rc = setup_rc;
    const struct kit_flag flags[] = {
        {"extra", KIT_FLAG_U32, &t.extra, 0, 100, "an app flag"},
    };
    struct kit_app a = {.name = "kitapp",
                        .flags = flags,
                        .flags_count = 1,
                        .shards_flag = true,
                        .rt = {.shards_count = 1},
                        .no_signals = true,
                        .keep_logging = opt.keep_logging,
                        .quiet = opt.quiet,
                        .module = &app_module,
                        .setup = setup,
                        .started = started,
                        .finish = finish,
                        .teardown = teardown};
    return kit_app_main(&a, argc, argv);
}

Test(test_kit_app, runs_with_the_kits_flags)
{
    char *argv[] = {"kitapp", "-shards", "3", "-extra=5", "-log-level", "debug", NULL};
    int code = main_with(6, argv, 0);
    hd_log_set_level(HD_LOG_INFO);
    cr_assert_eq(code, 7, "exit code %d: finish's", code);
    cr_assert_str_eq(t.order, "srft");
    cr_assert_eq(t.shards_seen, 3);
    cr_assert_eq(atomic_load(&t.inits), 3);
    cr_assert_eq(t.extra, 5);
    cr_assert_eq(t.level_seen, HD_LOG_DEBUG);
    cr_assert(t.net_state_seen, "the layer was not set up before the app");
    cr_assert_neq(net_addr_port(&t.listen), 0, "the hold did not report its port");
    /* The hold is closed: a plain bind of the port (no SO_REUSEPORT) now succeeds. */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert_eq(bind(fd, &t.listen.sa, t.listen.len), 0, "the held port is still held");
    close(fd);
}

Test(test_kit_app, exit_codes)
{
    char *help[] = {"kitapp", "--help", NULL};
    cr_assert_eq(main_with(2, help, 0), 0);
    cr_assert_str_eq(t.order, "", "a hook ran after --help");
    char *bad[] = {"kitapp", "-log-level", "loud", NULL};
    cr_assert_eq(main_with(3, bad, 0), 2);
    char *shards0[] = {"kitapp", "-shards", "0", NULL};
    cr_assert_eq(main_with(3, shards0, 0), 2);
    char *ok[] = {"kitapp", NULL};
    cr_assert_eq(main_with(1, ok, -EACCES), 1);
    cr_assert_str_eq(t.order, "st", "a failed setup still tears down, and runs nothing else");
}

/* What the kit writes to stderr during one main_with. */
static int main_capturing(int argc, char **argv, char *err, size_t size)
{
    fflush(stderr);
    FILE *tmp = tmpfile();
    cr_assert_not_null(tmp);
    int saved = dup(STDERR_FILENO);
    dup2(fileno(tmp), STDERR_FILENO);
    int code = main_with(argc, argv, 0);
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    rewind(tmp);
    size_t n = fread(err, 1, size - 1, tmp);
    err[n] = 0;
    fclose(tmp);
    return code;
}

Test(test_kit_app, a_step_of_a_larger_program)
{
    char *plain[] = {"kitapp", NULL};
    hd_log_set_level(HD_LOG_WARN); /* what the program chose before */
    opt.keep_logging = true;
    cr_assert_eq(main_with(1, plain, 0), 7);
    cr_assert_eq(t.level_seen, HD_LOG_WARN, "the kit reset the program's logging level");
    char *flag[] = {"kitapp", "-log-level", "debug", NULL};
    cr_assert_eq(main_with(3, flag, 0), 2, "-log-level is the program's, not the kit's, here");
    char err[256];
    opt.started_rc = -EIO; /* a runtime step that fails: finish hears it */
    cr_assert_eq(main_capturing(1, plain, err, sizeof(err)), 1);
    cr_assert_eq(t.finish_rc, -EIO);
    cr_assert(strstr(err, "kitapp: ") != NULL, "without quiet the kit says why: \"%s\"", err);
    opt.quiet = true;
    cr_assert_eq(main_capturing(1, plain, err, sizeof(err)), 1);
    cr_assert_eq(t.finish_rc, -EIO);
    cr_assert_str_eq(err, "", "quiet, yet the kit wrote \"%s\"", err);
    opt = (typeof(opt)){0};
    hd_log_set_level(HD_LOG_INFO);
}
