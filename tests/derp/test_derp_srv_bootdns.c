/* test_derp_srv_bootdns.c - bootstrap DNS's rollout percentage (apps/derp/server/ops/
 * server_bootdns.c): derper's remoteAddrMatchesPercent seeds Go's math/rand/v2 PCG with the
 * client's address and compares its first Float64 with the percentage, so a client gets the
 * same answer from derper and hderp. The expected draws were printed by Go 1.26 with
 *   r := rand.New(rand.NewPCG(binary.LittleEndian.Uint64(b[:8]),
 *                             binary.LittleEndian.Uint64(b[8:])))  // b = addr.As16()
 *   fmt.Printf("%.17g", r.Float64())
 * Pure: no sockets. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <string.h>

#include "server.h"

static const struct {
    const char *ip;
    double draw;
} go_draws[] = {
    {"1.2.3.4", 0.068657977083725119},           {"100.64.0.1", 0.1326417960005104},
    {"203.0.113.77", 0.41394766311788178},       {"2001:db8::1", 0.17365074425987426},
    {"fd7a:115c:a1e0::53", 0.32485003520940148}, {"8.8.8.8", 0.35032690643351905},
};

static struct net_addr addr_of(const char *text)
{
    struct net_addr a;
    memset(&a, 0, sizeof(a));
    if (strchr(text, ':')) {
        a.in6.sin6_family = AF_INET6;
        cr_assert_eq(inet_pton(AF_INET6, text, &a.in6.sin6_addr), 1);
        a.len = sizeof(a.in6);
    } else {
        a.in4.sin_family = AF_INET;
        cr_assert_eq(inet_pton(AF_INET, text, &a.in4.sin_addr), 1);
        a.len = sizeof(a.in4);
    }
    return a;
}

Test(bootdns, addresses_draw_as_go_does)
{
    for (size_t i = 0; i < sizeof(go_draws) / sizeof(go_draws[0]); i++) {
        struct net_addr a = addr_of(go_draws[i].ip);
        double d = go_draws[i].draw;
        /* a percentage just above the draw admits, just below (or equal) refuses */
        cr_expect(srv_bootdns_addr_matches(&a, d + 1e-9), "%s: %.17g", go_draws[i].ip, d);
        cr_expect(!srv_bootdns_addr_matches(&a, d - 1e-9), "%s: %.17g", go_draws[i].ip, d);
        cr_expect(!srv_bootdns_addr_matches(&a, d), "%s: %.17g", go_draws[i].ip, d);
    }
}

Test(bootdns, zero_and_hundred_percent)
{
    struct net_addr a = addr_of("1.2.3.4"), lo = addr_of("127.0.0.1");
    cr_expect(!srv_bootdns_addr_matches(&a, 0));
    cr_expect(srv_bootdns_addr_matches(&a, 1));
    cr_expect(!srv_bootdns_addr_matches(&lo, 0));
    cr_expect(srv_bootdns_addr_matches(&lo, 1));
}

/* Loopback draws at random (derper: "for local testing"): both answers come up. */
Test(bootdns, loopback_draws_at_random)
{
    struct net_addr lo = addr_of("127.0.0.1");
    unsigned yes = 0;
    for (int i = 0; i < 2000; i++)
        yes += srv_bootdns_addr_matches(&lo, 0.5);
    cr_expect(yes > 0 && yes < 2000, "%u of 2000", yes);
}
