/* test_derp_stun.c - STUN (§10): Appendix B request/replies byte-exact, what derper accepts and
 * ignores (SOFTWARE, trailing FINGERPRINT, attribute walk to the end of the datagram), replies
 * for IPv4 (family 1) and IPv6, and the reply parser. */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "derp_stun.h"
#include "derp_test_util.h"

static const uint8_t txid[12] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};

static const char *req_hex = "0001 0014 2112a442 000102030405060708090a0b"
                             "8022 0008 7461696c6e6f6465"
                             "8028 0004 8aabad90";

/* Recomputes the trailing FINGERPRINT of a hand-built request of len bytes. */
static void fix_fingerprint(uint8_t *p, size_t len)
{
    uint32_t fp = derp_stun_crc32(p, len - 8) ^ DERP_STUN_FINGERPRINT_XOR;
    p[len - 4] = (uint8_t)(fp >> 24);
    p[len - 3] = (uint8_t)(fp >> 16);
    p[len - 2] = (uint8_t)(fp >> 8);
    p[len - 1] = (uint8_t)fp;
}

Test(derp_stun, crc32_check_value)
{
    cr_assert_eq(derp_stun_crc32((const uint8_t *)"123456789", 9), 0xCBF43926u);
    cr_assert_eq(derp_stun_crc32(NULL, 0), 0);
}

Test(derp_stun, appendix_b_request)
{
    uint8_t want[64], buf[64], got[12];
    size_t n = test_hex(req_hex, want, sizeof(want));
    cr_assert_eq(n, 40);
    cr_assert_eq(derp_stun_build_request(buf, sizeof(buf), txid), 40);
    cr_assert(memcmp(buf, want, 40) == 0, "byte-exact Appendix B request");
    cr_assert(derp_stun_is(want, 40));
    cr_assert_eq(derp_stun_parse_request(want, 40, got), 0);
    cr_assert(memcmp(got, txid, 12) == 0);
    cr_assert_eq(derp_stun_build_request(buf, 39, txid), -ENOSPC);
}

Test(derp_stun, appendix_b_replies)
{
    uint8_t want[64], buf[64];
    struct derp_addr v4, v6 = {.ip = {0x20, 0x01, 0x0d, 0xb8, [15] = 1}, .port = 54321};
    derp_addr_from_ipv4(&v4, (const uint8_t[]){192, 0, 2, 1}, 54321);

    size_t n = test_hex("0101 000c 2112a442 000102030405060708090a0b"
                        "0020 0008 00 01 f523 e112a643",
                        want, sizeof(want));
    cr_assert_eq(derp_stun_build_response(buf, sizeof(buf), txid, &v4), (ssize_t)n);
    cr_assert(memcmp(buf, want, n) == 0, "IPv4 reply: family 1 (not the v4-mapped quirk)");
    cr_assert_eq(derp_stun_build_response(buf, n - 1, txid, &v4), -ENOSPC);

    n = test_hex("0101 0018 2112a442 000102030405060708090a0b"
                 "0020 0014 00 02 f523 0113a9fa000102030405060708090a0a",
                 want, sizeof(want));
    cr_assert_eq(derp_stun_build_response(buf, sizeof(buf), txid, &v6), (ssize_t)n);
    cr_assert(memcmp(buf, want, n) == 0, "IPv6 reply");
    cr_assert_eq(derp_stun_build_response(buf, n - 1, txid, &v6), -ENOSPC);
}

Test(derp_stun, reply_round_trip)
{
    uint8_t buf[64], got_tx[12];
    struct derp_addr in, out;
    derp_addr_from_ipv4(&in, (const uint8_t[]){203, 0, 113, 9}, 1);
    ssize_t n = derp_stun_build_response(buf, sizeof(buf), txid, &in);
    cr_assert_eq(derp_stun_parse_response(buf, (size_t)n, got_tx, &out), 0);
    cr_assert(memcmp(&out.ip, &in.ip, 16) == 0 && out.port == 1);
    cr_assert(memcmp(got_tx, txid, 12) == 0);

    struct derp_addr in6 = {.ip = {0xfe, 0x80, [8] = 0xaa, [15] = 0x55}, .port = 65535};
    n = derp_stun_build_response(buf, sizeof(buf), txid, &in6);
    cr_assert_eq(derp_stun_parse_response(buf, (size_t)n, got_tx, &out), 0);
    cr_assert(memcmp(&out.ip, &in6.ip, 16) == 0 && out.port == 65535);
    /* A reply is not a request, and a request is not a reply. */
    cr_assert_eq(derp_stun_parse_request(buf, (size_t)n, got_tx), -EPROTO);
    uint8_t req[40];
    test_hex(req_hex, req, sizeof(req));
    cr_assert_eq(derp_stun_parse_response(req, 40, got_tx, &out), -EPROTO);
    cr_assert_eq(derp_stun_parse_response(buf, (size_t)n - 1, got_tx, &out), -EPROTO);
}

Test(derp_stun, request_rejections)
{
    uint8_t p[128], tx[12];
    size_t n = test_hex(req_hex, p, sizeof(p));

    cr_assert_eq(derp_stun_parse_request(p, 19, tx), -EPROTO, "shorter than a header");
    cr_assert_eq(derp_stun_parse_request(p, 39, tx), -EPROTO, "truncated attribute");
    for (size_t cut = 20; cut < n; cut++)
        cr_assert_eq(derp_stun_parse_request(p, cut, tx), -EPROTO, "cut at %zu", cut);
    p[0] |= 0x40;
    cr_assert(!derp_stun_is(p, n));
    cr_assert_eq(derp_stun_parse_request(p, n, tx), -EPROTO, "top bits set");
    p[0] &= 0x3F;
    p[7] ^= 1;
    cr_assert_eq(derp_stun_parse_request(p, n, tx), -EPROTO, "wrong cookie");
    p[7] ^= 1;
    p[1] = 0x02; /* not a Binding Request */
    fix_fingerprint(p, n);
    cr_assert_eq(derp_stun_parse_request(p, n, tx), -EPROTO);
    p[1] = 0x01;
    p[27] ^= 1; /* SOFTWARE "tailnodd" */
    fix_fingerprint(p, n);
    cr_assert_eq(derp_stun_parse_request(p, n, tx), -EPROTO, "non-Tailscale software");
    p[27] ^= 1;
    fix_fingerprint(p, n);
    cr_assert_eq(derp_stun_parse_request(p, n, tx), 0);
    p[39] ^= 1;
    cr_assert_eq(derp_stun_parse_request(p, n, tx), -EPROTO, "bogus fingerprint");
    p[39] ^= 1;
    p[12] ^= 1; /* any covered byte changes the CRC */
    cr_assert_eq(derp_stun_parse_request(p, n, tx), -EPROTO);
}

Test(derp_stun, request_attribute_layouts)
{
    uint8_t p[128], tx[12];
    /* Extra attributes before SOFTWARE are fine; the header length field is not consulted. */
    size_t n = test_hex("0001 0000 2112a442 000102030405060708090a0b"
                        "0024 0003 aabbcc00"
                        "8022 0008 7461696c6e6f6465"
                        "8028 0004 00000000",
                        p, sizeof(p));
    fix_fingerprint(p, n);
    cr_assert_eq(derp_stun_parse_request(p, n, tx), 0);

    /* FINGERPRINT not last. The trailing attribute is empty, so the last 8 bytes are the
     * FINGERPRINT's value plus that header, and the value can be made right: only the
     * "last attribute must be FINGERPRINT" rule rejects it. */
    n = test_hex("0001 0000 2112a442 000102030405060708090a0b"
                 "8022 0008 7461696c6e6f6465"
                 "8028 0004 00000000"
                 "0024 0000",
                 p, sizeof(p));
    uint32_t fp = derp_stun_crc32(p, n - 8) ^ DERP_STUN_FINGERPRINT_XOR;
    p[n - 8] = (uint8_t)(fp >> 24);
    p[n - 7] = (uint8_t)(fp >> 16);
    p[n - 6] = (uint8_t)(fp >> 8);
    p[n - 5] = (uint8_t)fp;
    cr_assert_eq(derp_stun_parse_request(p, n, tx), -EPROTO);

    /* No SOFTWARE at all. */
    n = test_hex("0001 0000 2112a442 000102030405060708090a0b 8028 0004 00000000", p, sizeof(p));
    fix_fingerprint(p, n);
    cr_assert_eq(derp_stun_parse_request(p, n, tx), -EPROTO);

    /* SOFTWARE "tailnodeX" (9 bytes, padded): not exactly tailnode. */
    n = test_hex("0001 0000 2112a442 000102030405060708090a0b"
                 "8022 0009 7461696c6e6f646558000000"
                 "8028 0004 00000000",
                 p, sizeof(p));
    fix_fingerprint(p, n);
    cr_assert_eq(derp_stun_parse_request(p, n, tx), -EPROTO);

    /* Trailing bytes after the FINGERPRINT break the walk. */
    n = test_hex(req_hex, p, sizeof(p));
    p[n] = 0;
    cr_assert_eq(derp_stun_parse_request(p, n + 1, tx), -EPROTO);
    /* Header only: no attributes, no SOFTWARE. */
    cr_assert_eq(derp_stun_parse_request(p, 20, tx), -EPROTO);
}
