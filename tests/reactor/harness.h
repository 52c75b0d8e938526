/* harness.h - run test bodies on real shards. Each shard runs body(shard, arg) as its first
 * deferred task; bodies call hd_runtime_stop when done (or use hdt_done). Failures inside shard
 * threads abort the process (Criterion reports the crash), since cr_assert must stay on the
 * test's own thread. */
#ifndef HDT_HARNESS_H
#define HDT_HARNESS_H

#include <stdio.h>
#include <stdlib.h>

#include <hd/hd.h>

#define HDT_CHECK(cond)                                                                            \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

typedef void hdt_body_fn(struct hd_shard *s, void *arg);

struct hdt_options {
    unsigned shards;
    uint32_t features_disable;
    uint32_t busy_poll_us;
    uint32_t min_wait_us; /* 0: the default */
    const struct hd_frame_class *frame_classes;
    unsigned frame_classes_count;
    /* Layers (e.g. net_module, tls_module) the runtime sets up on every shard before the test
     * module and tears down after it, each with its arg (layers_args NULL: defaults). */
    const struct hd_module *const *layers;
    void *const *layers_args;
    unsigned layers_count;
    /* Optional per-shard hooks around the body (after the layers: e.g. listeners); stop runs
     * when the runtime is asked to stop (close what the body opened). */
    int (*shard_init)(struct hd_shard *s);
    void (*shard_stop)(struct hd_shard *s);
    void (*shard_fini)(struct hd_shard *s);
    /* Optional: the test module's own per-shard state, for code that finds its state as a
     * module's (hd_shard_instance_state at index layers_count): made before shard_init, dropped
     * after shard_fini. */
    int (*state_init)(struct hd_shard *s, void **state);
    void (*state_fini)(struct hd_shard *s, void *state);
};

/* Starts a runtime, runs body on every shard, waits for the stop. Returns hd_runtime_wait's
 * result; *rt_out (if given) keeps the runtime for inspection, to hd_runtime_destroy later. */
int hdt_run(const struct hdt_options *o, hdt_body_fn *body, void *arg, struct hd_runtime **rt_out);

/* Counts down shards that finished; the last one stops the runtime. */
void hdt_done(struct hd_shard *s);

#endif
