/* test_stall.c - the stall watchdog on a real runtime: a timer callback that keeps its shard
 * busy for 150 ms is noticed, named (symbol) and counted; a shard that sleeps is not a stall;
 * HD_STALL_OFF starts no watchdog. stderr goes to a file for the log checks. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <hd/hd.h>

struct stall_case {
    uint32_t busy_ms;  /* how long the timer callback spins */
    uint32_t sleep_ms; /* then how long the shard idles before it stops */
    struct hd_timer t, stop;
};

__attribute__((noinline)) static void slow_timer_cb(struct hd_timer *t)
{
    struct stall_case *c = hd_container_of(t, struct stall_case, t);
    uint64_t end = hd_clock_ns() + (uint64_t)c->busy_ms * 1000000u;
    while (hd_clock_ns() < end)
        ; /* a deliberately slow callback */
    hd_timer_start(hd_shard_current(), &c->stop, c->sleep_ms);
}

static void stop_cb(struct hd_timer *t)
{
    (void)t;
    hd_runtime_stop(hd_shard_runtime(hd_shard_current()));
}

static int case_init(struct hd_shard *s, void *arg, void **state)
{
    struct stall_case *c = arg;
    hd_timer_init(&c->t, slow_timer_cb);
    hd_timer_init(&c->stop, stop_cb);
    hd_timer_start(s, &c->t, 10);
    *state = c;
    return 0;
}

static const struct hd_module case_module = {
    .abi_version = HD_MODULE_ABI, .name = "stall-case", .shard_init = case_init};

static char log_text[16384];

/* Runs one case with the given threshold; returns shard 0's stall count, *max_ms its longest. */
static uint64_t run_case(struct stall_case *c, uint32_t stall_ms, uint64_t *max_ms)
{
    char path[] = "/tmp/hd-stall-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    unlink(path);
    int saved = dup(STDERR_FILENO);
    dup2(fd, STDERR_FILENO);
    static const struct hd_module *const modules[] = {&case_module};
    struct hd_runtime_config cfg = {.shards_count = 1,
                                    .stall_ms = stall_ms,
                                    .modules = modules,
                                    .modules_args = (void *const[]){c},
                                    .modules_count = 1};
    struct hd_runtime *rt;
    cr_assert_eq(hd_runtime_create(&cfg, &rt), 0);
    int rc = hd_runtime_run(rt);
    uint64_t stalls = hd_shard_stalls(hd_runtime_shard(rt, 0));
    *max_ms = hd_shard_stall_max_ms(hd_runtime_shard(rt, 0));
    hd_runtime_destroy(rt);
    dup2(saved, STDERR_FILENO);
    close(saved);
    ssize_t n = pread(fd, log_text, sizeof(log_text) - 1, 0);
    log_text[n > 0 ? n : 0] = '\0';
    close(fd);
    cr_assert_eq(rc, 0);
    return stalls;
}

Test(reactor_stall, slow_callback_is_named_and_counted)
{
    struct stall_case c = {.busy_ms = 150, .sleep_ms = 50};
    uint64_t max_ms;
    uint64_t stalls = run_case(&c, 30, &max_ms);
    cr_assert_geq(stalls, 1, "log:\n%s", log_text);
    cr_assert_geq(max_ms, 100, "the stall lasted 150 ms, reported %llu\nlog:\n%s",
                  (unsigned long long)max_ms, log_text);
    cr_assert(strstr(log_text, "stall: shard 0 busy for"), "log:\n%s", log_text);
    cr_assert(strstr(log_text, "timer slow_timer_cb"), "the callback by name; log:\n%s", log_text);
    cr_assert(strstr(log_text, "stall: shard 0 went on after"), "log:\n%s", log_text);
}

Test(reactor_stall, sleeping_is_not_a_stall)
{
    struct stall_case c = {.busy_ms = 0, .sleep_ms = 400};
    uint64_t max_ms;
    cr_assert_eq(run_case(&c, 150, &max_ms), 0, "log:\n%s", log_text);
    cr_assert_null(strstr(log_text, "stall:"), "log:\n%s", log_text);
}

Test(reactor_stall, off_means_no_watchdog)
{
    struct stall_case c = {.busy_ms = 120, .sleep_ms = 10};
    uint64_t max_ms;
    cr_assert_eq(run_case(&c, HD_STALL_OFF, &max_ms), 0);
    cr_assert_null(strstr(log_text, "stall:"), "log:\n%s", log_text);
}
