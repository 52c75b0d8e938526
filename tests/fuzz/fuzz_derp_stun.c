/* fuzz_derp_stun.c - libFuzzer target for the STUN subset (apps/derp/proto/derp_stun.c): a
 * datagram from anyone on the server's UDP port, and a reply the client side parses. Invariants:
 * a request that parses gets a response that our own response parser reads back with the same
 * transaction ID and address; the request builder's output parses as a request; a response
 * parse never fails in a way other than -EPROTO. */
#include <errno.h>
#include <string.h>

#include "derp_stun.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t txid[DERP_STUN_TXID_LEN], back[DERP_STUN_TXID_LEN], out[64];
    int rc = derp_stun_parse_request(data, size, txid);
    CHECK(rc == 0 || rc == -EPROTO);
    CHECK(rc != 0 || derp_stun_is(data, size));
    if (rc == 0) {
        /* The reply for an address taken from the input (v4 or v6 by its first byte). */
        struct derp_addr a = {.port = (uint16_t)(size * 7919u)};
        memcpy(a.ip, data, size < sizeof(a.ip) ? size : sizeof(a.ip));
        if (size > 0 && (data[0] & 1)) {
            static const uint8_t v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
            memcpy(a.ip, v4mapped, sizeof(v4mapped));
        }
        ssize_t n = derp_stun_build_response(out, sizeof(out), txid, &a);
        CHECK(n > 0);
        struct derp_addr got;
        CHECK(derp_stun_parse_response(out, (size_t)n, back, &got) == 0);
        CHECK(memcmp(back, txid, sizeof(txid)) == 0);
        CHECK(memcmp(got.ip, a.ip, sizeof(a.ip)) == 0 && got.port == a.port);
    }
    struct derp_addr any;
    rc = derp_stun_parse_response(data, size, back, &any);
    CHECK(rc == 0 || rc == -EPROTO);
    /* Our own request, with the input's first bytes as its transaction ID, is a request. */
    memset(txid, 0, sizeof(txid));
    memcpy(txid, data, size < sizeof(txid) ? size : sizeof(txid));
    ssize_t n = derp_stun_build_request(out, sizeof(out), txid);
    CHECK(n == 40);
    CHECK(derp_stun_parse_request(out, (size_t)n, back) == 0);
    CHECK(memcmp(back, txid, sizeof(txid)) == 0);
    return 0;
}
