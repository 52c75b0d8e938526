/* test_resolve.c - net_resolve_start on a real shard: a name (localhost, from /etc/hosts) and a
 * numeric host come back on the shard's thread with their addresses; a name that cannot exist
 * fails with -ENOENT; a cancelled lookup never calls back (and ASan sees no leak). And
 * net_addrs_from_addrinfo on lists made by hand and by getaddrinfo: v4, v6, an address too large
 * for a net_addr skipped, more answers than room. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <netdb.h>
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

/* ---------------------------------------------------------------- net_addrs_from_addrinfo */

/* An addrinfo list of v4 10.0.0.i:80+i and v6 2001:db8::i:80+i nodes (kinds[i]: 4 or 6; 0: an
 * address larger than a sockaddr_storage, which no net_addr holds). */
#define AI_NODES_MAX 8
static struct addrinfo ai_nodes[AI_NODES_MAX];
static struct sockaddr_storage ai_addrs[AI_NODES_MAX];

static struct addrinfo *ai_list(const int *kinds, unsigned n)
{
    cr_assert(n <= AI_NODES_MAX);
    memset(ai_nodes, 0, sizeof(ai_nodes));
    memset(ai_addrs, 0, sizeof(ai_addrs));
    for (unsigned i = 0; i < n; i++) {
        struct addrinfo *a = &ai_nodes[i];
        a->ai_addr = (struct sockaddr *)&ai_addrs[i];
        a->ai_next = i + 1 < n ? &ai_nodes[i + 1] : NULL;
        if (kinds[i] == 4) {
            struct sockaddr_in *in4 = (struct sockaddr_in *)&ai_addrs[i];
            in4->sin_family = AF_INET;
            in4->sin_port = htons((uint16_t)(80 + i));
            in4->sin_addr.s_addr = htonl(0x0a000000u + i);
            a->ai_family = AF_INET;
            a->ai_addrlen = sizeof(*in4);
        } else if (kinds[i] == 6) {
            struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ai_addrs[i];
            in6->sin6_family = AF_INET6;
            in6->sin6_port = htons((uint16_t)(80 + i));
            cr_assert_eq(inet_pton(AF_INET6, "2001:db8::", &in6->sin6_addr), 1);
            in6->sin6_addr.s6_addr[15] = (uint8_t)i;
            a->ai_family = AF_INET6;
            a->ai_addrlen = sizeof(*in6);
        } else {
            a->ai_family = AF_INET;
            a->ai_addrlen = sizeof(struct sockaddr_storage) + 1;
        }
    }
    return n ? &ai_nodes[0] : NULL;
}

static const char *fmt(const struct net_addr *a)
{
    static char buf[64];
    return net_addr_format(a, buf, sizeof(buf));
}

Test(net_addrs_from_addrinfo, v4_and_v6_in_order)
{
    static const int kinds[] = {6, 4, 6};
    struct net_addr out[4];
    memset(out, 0xee, sizeof(out));
    cr_assert_eq(net_addrs_from_addrinfo(ai_list(kinds, 3), out, 4), 3);
    cr_assert_str_eq(fmt(&out[0]), "[2001:db8::]:80");
    cr_assert_eq(out[0].len, sizeof(struct sockaddr_in6));
    cr_assert_str_eq(fmt(&out[1]), "10.0.0.1:81");
    cr_assert_eq(out[1].len, sizeof(struct sockaddr_in));
    cr_assert_str_eq(fmt(&out[2]), "[2001:db8::2]:82");
    /* Zeroed past the sockaddr: a net_addr compares whole (memcmp) in the tables. */
    static const uint8_t zero[sizeof(struct sockaddr_storage)];
    cr_assert(memcmp((const uint8_t *)&out[1].ss + sizeof(struct sockaddr_in), zero,
                     sizeof(out[1].ss) - sizeof(struct sockaddr_in)) == 0);
}

Test(net_addrs_from_addrinfo, more_answers_than_room)
{
    static const int kinds[] = {4, 6, 4, 6, 4};
    struct net_addr out[3];
    cr_assert_eq(net_addrs_from_addrinfo(ai_list(kinds, 5), out, 2), 2, "only cap are taken");
    cr_assert_str_eq(fmt(&out[0]), "10.0.0.0:80");
    cr_assert_str_eq(fmt(&out[1]), "[2001:db8::1]:81");
    cr_assert_eq(net_addrs_from_addrinfo(ai_list(kinds, 5), out, 0), 0);
}

Test(net_addrs_from_addrinfo, oversized_skipped_and_empty)
{
    static const int kinds[] = {0, 4, 0};
    struct net_addr out[3];
    cr_assert_eq(net_addrs_from_addrinfo(ai_list(kinds, 3), out, 3), 1);
    cr_assert_str_eq(fmt(&out[0]), "10.0.0.1:81");
    cr_assert_eq(net_addrs_from_addrinfo(NULL, out, 3), 0);
}

Test(net_addrs_from_addrinfo, from_getaddrinfo)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV},
                    *res = NULL;
    struct net_addr out[2];
    cr_assert_eq(getaddrinfo("::1", "3340", &hints, &res), 0);
    cr_assert_eq(net_addrs_from_addrinfo(res, out, 2), 1);
    freeaddrinfo(res);
    cr_assert_str_eq(fmt(&out[0]), "[::1]:3340");
    cr_assert_eq(getaddrinfo("192.0.2.9", "7", &hints, &res), 0);
    cr_assert_eq(net_addrs_from_addrinfo(res, out, 2), 1);
    freeaddrinfo(res);
    cr_assert_str_eq(fmt(&out[0]), "192.0.2.9:7");
}
