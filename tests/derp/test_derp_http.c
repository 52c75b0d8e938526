/* test_derp_http.c - DERP's 101 (spec §1.3) on net's generic writer: derper's bytes exactly,
 * -ENOSPC at every short size without writing past it, and it parses back. Single thread. */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include <hd/net_http.h>

#include "derp_http.h"

/* Spec Appendix A server public key. */
static const uint8_t derp_key[DERP_KEY_LEN] = {
    0x07, 0xa3, 0x7c, 0xbc, 0x14, 0x20, 0x93, 0xc8, 0xb7, 0x55, 0xdc, 0x1b, 0x10, 0xe8, 0x6c, 0xb4,
    0x26, 0x37, 0x4a, 0xd1, 0x6a, 0xa8, 0x53, 0xed, 0x0b, 0xdf, 0xc0, 0xb2, 0xb8, 0x6d, 0x1c, 0x7c,
};

static const char derp_101[] =
    "HTTP/1.1 101 Switching Protocols\r\n"
    "Upgrade: DERP\r\n"
    "Connection: Upgrade\r\n"
    "Derp-Version: 2\r\n"
    "Derp-Public-Key: 07a37cbc142093c8b755dc1b10e86cb426374ad16aa853ed0bdfc0b2b86d1c7c\r\n"
    "\r\n";

#define CANARY 0x5a

Test(derp_http, exact_at_every_size)
{
    cr_assert_eq(sizeof(derp_101) - 1, DERP_HTTP_101_LEN);
    char buf[DERP_HTTP_101_LEN + 64];
    for (size_t size = 0; size <= DERP_HTTP_101_LEN; size++) {
        memset(buf, CANARY, sizeof(buf));
        int n = derp_http_write_101(buf, size, derp_key);
        for (size_t i = size; i < sizeof(buf); i++)
            cr_assert_eq((unsigned char)buf[i], CANARY, "size %zu: byte %zu written", size, i);
        if (size < DERP_HTTP_101_LEN) {
            cr_assert_eq(n, -ENOSPC, "size %zu: %d", size, n);
        } else {
            cr_assert_eq(n, DERP_HTTP_101_LEN);
            cr_assert(memcmp(buf, derp_101, DERP_HTTP_101_LEN) == 0, "got:\n%.*s", n, buf);
        }
    }
}

Test(derp_http, parses)
{
    char buf[DERP_HTTP_101_LEN];
    struct net_http_resp r;
    cr_assert_eq(derp_http_write_101(buf, sizeof(buf), derp_key), DERP_HTTP_101_LEN);
    net_http_resp_init(&r, false);
    cr_assert_eq(net_http_resp_parse(&r, buf, sizeof(buf)), DERP_HTTP_101_LEN);
    cr_assert_eq(r.status, 101);
    cr_assert(net_http_str_eq(net_http_header_get(&r.head, "derp-version"), "2"));
    cr_assert_eq(net_http_header_get(&r.head, "Derp-Public-Key").len, 64);
}
