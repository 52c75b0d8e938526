/* test_layers.c - net and tls as modules on a real runtime: the runtime places the layers an app
 * requires before it (once, with the arg of a listed layer), and when a module's shard_init
 * fails the layers below it are torn down again on that shard (their pools are gone), in
 * reverse order. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdatomic.h>
#include <string.h>

#include <hd/net.h>
#include <hd/tls.h>

#define SHARDS  2
#define FAIL_ON 1u /* the failing module fails on this shard only */
#define NET_POOLS                                                                                  \
    5u /* net_conn, net_sendq, net_send_ctx, net_rmsg (the kTLS receive state), net_move */
#define TLS_POOLS 2u /* tls_conn, tls_handshake */

static struct {
    _Atomic unsigned seq;
    _Atomic unsigned spy_fini_seq[SHARDS], app_fini_seq[SHARDS];
    _Atomic unsigned app_inits, app_finis;
    _Atomic bool layers_up_in_init;   /* net and tls state (and pools) seen by the app */
    _Atomic bool layers_gone_in_fini; /* ... gone again when the first module finished */
    _Atomic bool ring_seen;           /* some shard used a buffer ring */
} g;

static unsigned extra_pools(const struct hd_shard *s)
{
    return hd_shard_slabs_count(s) - hd_frame_classes_count(s);
}

/* First in the list, so its shard_fini runs last: everything above it must be gone by then. */
static void spy_fini(struct hd_shard *s, void *state)
{
    (void)state;
    atomic_store(&g.spy_fini_seq[hd_shard_id(s)], atomic_fetch_add(&g.seq, 1) + 1);
    if (hd_shard_module_state(s, &net_module) != NULL ||
        hd_shard_module_state(s, &tls_module) != NULL || extra_pools(s) != 0)
        atomic_store(&g.layers_gone_in_fini, false);
}

static const struct hd_module spy_module = {
    .abi_version = HD_MODULE_ABI, .name = "spy", .shard_fini = spy_fini};

static int app_init(struct hd_shard *s, void *arg, void **state)
{
    (void)arg;
    *state = NULL;
    atomic_fetch_add(&g.app_inits, 1);
    if (hd_shard_module_state(s, &net_module) == NULL ||
        hd_shard_module_state(s, &tls_module) == NULL || extra_pools(s) != NET_POOLS + TLS_POOLS)
        atomic_store(&g.layers_up_in_init, false);
    if (net_shard_uses_buf_ring(s))
        atomic_store(&g.ring_seen, true);
    return hd_shard_id(s) == FAIL_ON && arg == NULL ? -EADDRINUSE : 0;
}

static void app_fini(struct hd_shard *s, void *state)
{
    (void)state;
    atomic_fetch_add(&g.app_finis, 1);
    atomic_store(&g.app_fini_seq[hd_shard_id(s)], atomic_fetch_add(&g.seq, 1) + 1);
}

static const struct hd_module *const app_requires[] = {&tls_module, NULL};

static const struct hd_module app_module = {.abi_version = HD_MODULE_ABI,
                                            .name = "app",
                                            .shard_init = app_init,
                                            .shard_fini = app_fini,
                                            .requires = app_requires};

static void reset(void)
{
    memset(&g, 0, sizeof(g));
    atomic_store(&g.layers_up_in_init, true);
    atomic_store(&g.layers_gone_in_fini, true);
}

Test(test_layers, failed_shard_init_tears_the_layers_down)
{
    reset();
    const struct hd_module *const mods[] = {&spy_module, &app_module};
    struct hd_runtime_config cfg = {.shards_count = SHARDS, .modules = mods, .modules_count = 2};
    struct hd_runtime *rt;
    cr_assert_eq(hd_runtime_create(&cfg, &rt), 0);
    cr_assert_eq(hd_runtime_start(rt), -EADDRINUSE);
    cr_assert_eq(atomic_load(&g.app_inits), SHARDS);
    cr_assert(atomic_load(&g.layers_up_in_init), "net and tls were not set up before the app");
    cr_assert(atomic_load(&g.layers_gone_in_fini), "a layer was left initialised");
    /* The app failed on FAIL_ON: no shard_fini there; finished (before the spy) elsewhere. */
    cr_assert_eq(atomic_load(&g.app_finis), SHARDS - 1);
    cr_assert_eq(atomic_load(&g.app_fini_seq[FAIL_ON]), 0);
    for (unsigned i = 0; i < SHARDS; i++) {
        struct hd_shard *s = hd_runtime_shard(rt, i);
        cr_assert_neq(atomic_load(&g.spy_fini_seq[i]), 0, "shard %u: spy not finished", i);
        if (i != FAIL_ON)
            cr_assert_lt(atomic_load(&g.app_fini_seq[i]), atomic_load(&g.spy_fini_seq[i]));
        cr_assert_eq(extra_pools(s), 0, "shard %u: layer pools left", i);
        cr_assert_null(hd_shard_module_state(s, &net_module));
    }
    hd_runtime_destroy(rt);
}

/* A listed layer gives the one instance its arg, wherever it is listed; a layer required by
 * two modules is set up once (else net's second init would fail with -EEXIST). */
Test(test_layers, listed_layer_args_and_one_instance)
{
    reset();
    struct net_shard_options no = {.no_buf_ring = true};
    const struct hd_module *const mods[] = {&app_module, &app_module, &net_module};
    void *const args[] = {&no, &no, &no}; /* app: non-NULL arg, it does not fail */
    struct hd_runtime_config cfg = {
        .shards_count = SHARDS, .modules = mods, .modules_args = args, .modules_count = 3};
    struct hd_runtime *rt;
    cr_assert_eq(hd_runtime_create(&cfg, &rt), 0);
    /* Resolved: net (the listed arg), tls (required by app), app, app. */
    cr_assert_eq(hd_runtime_module_index(rt, &net_module, &no), 0);
    cr_assert_eq(hd_runtime_module_index(rt, &tls_module, NULL), 1);
    cr_assert_eq(hd_runtime_module_index(rt, &app_module, &no), 2);
    cr_assert_eq(hd_runtime_module_index(rt, &spy_module, NULL), -ENOENT);
    cr_assert_eq(hd_runtime_start(rt), 0);
    cr_assert_null(hd_shard_instance_state(hd_runtime_shard(rt, 0), 99));
    cr_assert_eq(hd_shard_instance_state(hd_runtime_shard(rt, 0), 0),
                 hd_shard_module_state(hd_runtime_shard(rt, 0), &net_module));
    hd_runtime_stop(rt);
    cr_assert_eq(hd_runtime_wait(rt), 0);
    cr_assert_eq(atomic_load(&g.app_inits), 2 * SHARDS, "two app instances per shard");
    cr_assert(atomic_load(&g.layers_up_in_init));
    cr_assert(!atomic_load(&g.ring_seen), "net's listed arg (no_buf_ring) was not used");
    cr_assert_eq(atomic_load(&g.app_finis), 2 * SHARDS);
    hd_runtime_destroy(rt);
}

static const struct hd_module loop_module;
static const struct hd_module *const loop_requires[] = {&loop_module, NULL};
static const struct hd_module loop_module = {
    .abi_version = HD_MODULE_ABI, .name = "loop", .requires = loop_requires};

Test(test_layers, bad_module_lists)
{
    struct hd_runtime *rt;
    const struct hd_module *const loop[] = {&loop_module};
    struct hd_runtime_config cfg = {.shards_count = 1, .modules = loop, .modules_count = 1};
    cr_assert_eq(hd_runtime_create(&cfg, &rt), -EINVAL, "a requirement cycle");
    /* net listed twice is two instances of one socket layer: the second refuses. */
    const struct hd_module *const twice[] = {&net_module, &net_module};
    cfg.modules = twice;
    cfg.modules_count = 2;
    cr_assert_eq(hd_runtime_create(&cfg, &rt), 0);
    cr_assert_eq(hd_runtime_start(rt), -EEXIST);
    cr_assert_eq(extra_pools(hd_runtime_shard(rt, 0)), 0);
    hd_runtime_destroy(rt);
}
