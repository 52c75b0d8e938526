/* test_handle.c - generation-checked handles (issue 27): open/get/close, a closed handle stays
 * stale after its slot is reused, another shard's handle and {0} find nothing, the table grows
 * past one chunk, and hd_defer_handle runs a task on a live object but drops (and counts) one
 * whose object closed before it ran. */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "harness.h"

struct obj {
    struct hd_handle h;
    unsigned ran;
};

struct handle_ctx {
    struct obj live, dead;
    struct obj many[HD_HANDLE_CHUNK + 10];
    unsigned open_after;
    bool checks_done;
};

static struct handle_ctx *hc;

static void on_obj(struct hd_shard *s, void *obj)
{
    HDT_CHECK(hd_shard_current() == s);
    ((struct obj *)obj)->ran++;
}

static void finish(void *arg)
{
    struct hd_shard *s = arg;
    HDT_CHECK(hd_handle_close(s, hc->live.h) == 0);
    hc->open_after = hd_shard_handles_open(s);
    hdt_done(s);
}

static void handle_body(struct hd_shard *s, void *arg)
{
    (void)arg;
    HDT_CHECK(hd_handle_open(s, &hc->live, &hc->live.h) == 0);
    HDT_CHECK(hd_handle_open(s, &hc->dead, &hc->dead.h) == 0);
    HDT_CHECK(hd_handle_shard(hc->live.h) == hd_shard_id(s));
    HDT_CHECK(hd_handle_get(s, hc->live.h) == &hc->live);
    /* Tasks on both; the dead one closes before the tasks run. */
    HDT_CHECK(hd_defer_handle(s, on_obj, hc->live.h) == 0);
    HDT_CHECK(hd_defer_handle(s, on_obj, hc->dead.h) == 0);
    struct hd_handle old = hc->dead.h;
    HDT_CHECK(hd_handle_close(s, old) == 0);
    HDT_CHECK(hd_handle_close(s, old) == -ENOENT);
    HDT_CHECK(hd_handle_get(s, old) == NULL);
    /* The slot is reused (the free list is LIFO) with a new generation: the old copy stays stale.
     */
    struct hd_handle reuse;
    HDT_CHECK(hd_handle_open(s, &hc->dead, &reuse) == 0);
    HDT_CHECK(!hd_handle_eq(reuse, old));
    HDT_CHECK(hd_handle_get(s, old) == NULL);
    HDT_CHECK(hd_handle_get(s, reuse) == &hc->dead);
    HDT_CHECK(hd_handle_close(s, reuse) == 0);
    /* {0} and another shard's handle (shard 1 does not exist here: never found). */
    HDT_CHECK(hd_handle_get(s, (struct hd_handle){0}) == NULL);
    struct hd_handle other = {hc->live.h.v ^ (UINT64_C(1) << 56)};
    HDT_CHECK(hd_handle_get(s, other) == NULL);
    HDT_CHECK(hd_defer_handle(s, on_obj, other) == -EINVAL);
    HDT_CHECK(hd_defer_handle(s, on_obj, (struct hd_handle){0}) == -EINVAL);
    /* Past one chunk: every handle distinct and found. */
    for (unsigned i = 0; i < HD_ARRAY_SIZE(hc->many); i++)
        HDT_CHECK(hd_handle_open(s, &hc->many[i], &hc->many[i].h) == 0);
    for (unsigned i = 0; i < HD_ARRAY_SIZE(hc->many); i++) {
        HDT_CHECK(hd_handle_get(s, hc->many[i].h) == &hc->many[i]);
        HDT_CHECK(hd_handle_close(s, hc->many[i].h) == 0);
    }
    HDT_CHECK(hd_shard_handles_open(s) == 1);
    hc->checks_done = true;
    HDT_CHECK(hd_defer(s, finish, s) == 0);
}

Test(test_reactor_handle, generation_checked_and_deferred)
{
    static struct handle_ctx c;
    memset(&c, 0, sizeof(c));
    hc = &c;
    struct hdt_options o = {.shards = 1};
    struct hd_runtime *rt;
    cr_assert_eq(hdt_run(&o, handle_body, NULL, &rt), 0);
    cr_assert(c.checks_done);
    cr_assert_eq(c.live.ran, 1, "live task ran %u times", c.live.ran);
    cr_assert_eq(c.dead.ran, 0, "a task on a closed handle ran");
    cr_assert_eq(hd_shard_stats(hd_runtime_shard(rt, 0))->tasks_stale, 1);
    cr_assert_eq(c.open_after, 0);
    hd_runtime_destroy(rt);
}
