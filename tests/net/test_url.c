/* test_url.c - net_url_parse and net_url_resolve: the parts of http and https URLs (default
 * ports, brackets, query-only paths), what is refused, and numeric vs name resolution. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include <hd/net.h>

Test(net_url, parts)
{
    struct net_url u;
    cr_assert_eq(net_url_parse("http://127.0.0.1:3340/derp", &u), 0);
    cr_assert(!u.tls);
    cr_assert_str_eq(u.authority, "127.0.0.1:3340");
    cr_assert_str_eq(u.host, "127.0.0.1");
    cr_assert_eq(u.port, 3340);
    cr_assert_str_eq(u.path, "/derp");

    cr_assert_eq(net_url_parse("https://[::1]", &u), 0);
    cr_assert(u.tls);
    cr_assert_str_eq(u.authority, "[::1]");
    cr_assert_str_eq(u.host, "::1");
    cr_assert_eq(u.port, 443);
    cr_assert_str_eq(u.path, "");

    cr_assert_eq(net_url_parse("http://ctl.example.com?k=v", &u), 0);
    cr_assert_str_eq(u.host, "ctl.example.com");
    cr_assert_eq(u.port, 80);
    cr_assert_str_eq(u.path, "/?k=v");

    cr_assert_eq(net_url_parse("http://[fe80::1]:8080/a/b?c", &u), 0);
    cr_assert_str_eq(u.host, "fe80::1");
    cr_assert_eq(u.port, 8080);
    cr_assert_str_eq(u.path, "/a/b?c");
}

Test(net_url, refused)
{
    struct net_url u;
    static const char *const bad[] = {
        "ftp://1.2.3.4/",   "http:///derp",       "http://1.2.3.4:99999/", "http://1.2.3.4:0/",
        "http://1.2.3.4:/", "http://1.2.3.4:8a/", "http://::1/",           "http://[::1/",
        "http://[]:80/",    "http://[::1]x/",     "http://h/p#frag",       "1.2.3.4:80",
        "http://:80/",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        cr_expect_eq(net_url_parse(bad[i], &u), -EINVAL, "%s", bad[i]);
    char longer[NET_URL_AUTHORITY_LEN_MAX + 32] = "http://";
    memset(longer + 7, 'a', NET_URL_AUTHORITY_LEN_MAX + 1);
    cr_expect_eq(net_url_parse(longer, &u), -EINVAL, "authority over the limit");
}

Test(net_url, resolve)
{
    struct net_url u;
    struct net_addr a;
    cr_assert_eq(net_url_parse("http://127.0.0.1:3340/", &u), 0);
    cr_assert_eq(net_url_resolve(&u, true, &a), 0);
    cr_assert_eq(a.sa.sa_family, AF_INET);
    cr_assert_eq(net_addr_port(&a), 3340);

    cr_assert_eq(net_url_parse("https://[::1]/", &u), 0);
    cr_assert_eq(net_url_resolve(&u, true, &a), 0);
    cr_assert_eq(a.sa.sa_family, AF_INET6);
    cr_assert_eq(net_addr_port(&a), 443);

    /* A name: refused when only numeric hosts are allowed, resolved (/etc/hosts) otherwise. */
    cr_assert_eq(net_url_parse("http://localhost:8081/", &u), 0);
    cr_assert_eq(net_url_resolve(&u, true, &a), -EINVAL);
    cr_assert_eq(net_url_resolve(&u, false, &a), 0);
    cr_assert_eq(net_addr_port(&a), 8081);
}
