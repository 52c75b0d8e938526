/* harness.c - see harness.h. */
#include "harness.h"

#include <stdatomic.h>

struct hdt_ctx {
    const struct hdt_options *o;
    hdt_body_fn *body;
    void *arg;
    _Atomic unsigned remaining;
};

static struct hdt_ctx *the_ctx;

static void body_task(void *p)
{
    struct hd_shard *s = p;
    the_ctx->body(s, the_ctx->arg);
}

static int shard_init(struct hd_shard *s, void *arg, void **state)
{
    (void)arg;
    *state = NULL;
    int rc = the_ctx->o->state_init ? the_ctx->o->state_init(s, state) : 0;
    if (rc < 0)
        return rc;
    if (the_ctx->o->shard_init)
        rc = the_ctx->o->shard_init(s);
    if (rc >= 0)
        rc = hd_defer(s, body_task, s);
    if (rc < 0 && the_ctx->o->state_fini)
        the_ctx->o->state_fini(s, *state);
    return rc;
}

static void shard_stop(struct hd_shard *s, void *state)
{
    (void)state;
    if (the_ctx->o->shard_stop)
        the_ctx->o->shard_stop(s);
}

static void shard_fini(struct hd_shard *s, void *state)
{
    if (the_ctx->o->shard_fini)
        the_ctx->o->shard_fini(s);
    if (the_ctx->o->state_fini)
        the_ctx->o->state_fini(s, state);
}

static const struct hd_module test_module = {
    .abi_version = HD_MODULE_ABI,
    .name = "test",
    .shard_init = shard_init,
    .shard_stop = shard_stop,
    .shard_fini = shard_fini,
};

void hdt_done(struct hd_shard *s)
{
    if (atomic_fetch_sub(&the_ctx->remaining, 1) == 1)
        hd_runtime_stop(hd_shard_runtime(s));
}

int hdt_run(const struct hdt_options *o, hdt_body_fn *body, void *arg, struct hd_runtime **rt_out)
{
    const struct hd_module *mods[HD_MODULES_MAX];
    void *args[HD_MODULES_MAX] = {0};
    HDT_CHECK(o->layers_count < HD_MODULES_MAX);
    for (unsigned i = 0; i < o->layers_count; i++) {
        mods[i] = o->layers[i];
        args[i] = o->layers_args ? o->layers_args[i] : NULL;
    }
    mods[o->layers_count] = &test_module;
    struct hdt_ctx ctx = {.o = o, .body = body, .arg = arg};
    struct hd_runtime_config cfg = {
        .shards_count = o->shards,
        .pin = true,
        .features_disable = o->features_disable,
        .busy_poll_us = o->busy_poll_us,
        .min_wait_us = o->min_wait_us,
        .frame_classes = o->frame_classes,
        .frame_classes_count = o->frame_classes_count,
        .modules = mods,
        .modules_args = args,
        .modules_count = o->layers_count + 1,
    };
    struct hd_runtime *rt;
    int rc = hd_runtime_create(&cfg, &rt);
    if (rc < 0)
        return rc;
    atomic_init(&ctx.remaining, hd_runtime_shards_count(rt));
    the_ctx = &ctx;
    rc = hd_runtime_run(rt);
    the_ctx = NULL;
    if (rt_out)
        *rt_out = rt;
    else
        hd_runtime_destroy(rt);
    return rc;
}
