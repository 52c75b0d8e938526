/* test_resolve.c - net_resolve_start on a real shard: a name (localhost, from /etc/hosts) and a
 * numeric host come back on the shard's thread with their addresses; a name that cannot exist
 * fails with -ENOENT; a cancelled lookup never calls back (and ASan sees no leak). */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "harness.h"
#include <hd/net.h>

struct result {
    pthread_t shard_thread;
    int calls;
    int rc;
    unsigned count;
    struct net_addr addrs[NET_RESOLVE_ADDRS_MAX];
    bool on_shard_thread;
};

static struct result got;
static const char *want_host;
static uint16_t want_port;
static struct hd_timer stop_timer;

static void stop_later(struct hd_timer *t)
{
    (void)t;
    hd_runtime_stop(hd_shard_runtime(hd_shard_current()));
}

static void done(struct hd_shard *s, int rc, const struct net_addr *addrs, unsigned count,
                 void *arg)
{
    HDT_CHECK(arg == &got);
    got.calls++;
    got.rc = rc;
    got.count = count;
    memcpy(got.addrs, addrs, count * sizeof(*addrs));
    got.on_shard_thread = pthread_equal(pthread_self(), got.shard_thread);
    hd_runtime_stop(hd_shard_runtime(s));
}

static void body(struct hd_shard *s, void *arg)
{
    (void)arg;
    got.shard_thread = pthread_self();
    struct net_resolve *r;
    HDT_CHECK(net_resolve_start(s, want_host, want_port, done, &got, &r) == 0);
    /* A guard: a lookup that never answers fails the test instead of hanging it. */
    hd_timer_init(&stop_timer, stop_later);
    hd_timer_start(s, &stop_timer, 20000);
}

static void run(const char *host, uint16_t port)
{
    memset(&got, 0, sizeof(got));
    want_host = host;
    want_port = port;
    struct hdt_options o = {.shards = 1};
    cr_assert_eq(hdt_run(&o, body, NULL, NULL), 0);
}

static bool has(const char *text)
{
    for (unsigned i = 0; i < got.count; i++) {
        char buf[64];
        if (strcmp(net_addr_format(&got.addrs[i], buf, sizeof(buf)), text) == 0)
            return true;
    }
    return false;
}

Test(net_resolve, localhost)
{
    run("localhost", 3340);
    cr_assert_eq(got.calls, 1);
    cr_assert_eq(got.rc, 0);
    cr_assert(got.on_shard_thread, "done runs on the shard that asked");
    cr_assert(got.count >= 1 && got.count <= NET_RESOLVE_ADDRS_MAX);
    cr_assert(has("127.0.0.1:3340") || has("[::1]:3340"), "localhost is a loopback address");
}

Test(net_resolve, numeric)
{
    run("192.0.2.7", 443);
    cr_assert_eq(got.calls, 1);
    cr_assert_eq(got.rc, 0);
    cr_assert_eq(got.count, 1);
    cr_assert(has("192.0.2.7:443"));
}

Test(net_resolve, no_such_name)
{
    run("no-such-host.invalid.", 443); /* RFC 6761: .invalid never resolves */
    cr_assert_eq(got.calls, 1);
    cr_assert(got.rc == -ENOENT || got.rc == -EAGAIN, "rc %d", got.rc);
    cr_assert_eq(got.count, 0);
}

Test(net_resolve, too_long)
{
    char name[NET_RESOLVE_HOST_MAX + 2];
    memset(name, 'a', sizeof(name) - 1);
    name[sizeof(name) - 1] = '\0';
    struct net_resolve *r;
    cr_assert_eq(net_resolve_start(NULL, name, 1, done, NULL, &r), -ENAMETOOLONG);
}

static int cancelled_calls;

static void cancelled_done(struct hd_shard *s, int rc, const struct net_addr *addrs, unsigned count,
                           void *arg)
{
    (void)s, (void)rc, (void)addrs, (void)count, (void)arg;
    cancelled_calls++;
}

static void cancel_body(struct hd_shard *s, void *arg)
{
    (void)arg;
    struct net_resolve *r;
    HDT_CHECK(net_resolve_start(s, "localhost", 80, cancelled_done, NULL, &r) == 0);
    net_resolve_cancel(r);
    hd_timer_init(&stop_timer, stop_later); /* long enough for the lookup to come back */
    hd_timer_start(s, &stop_timer, 1000);
}

Test(net_resolve, cancelled)
{
    cancelled_calls = 0;
    struct hdt_options o = {.shards = 1};
    cr_assert_eq(hdt_run(&o, cancel_body, NULL, NULL), 0);
    cr_assert_eq(cancelled_calls, 0);
}
