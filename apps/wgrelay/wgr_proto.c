/* wgr_proto.c - WireGuard's message shapes (wgr_classify) and MAC1 (the paper, section 5.4.4):
 * mac1 = MAC(HASH(LABEL_MAC1 || responder public key), msg up to mac1), where HASH is
 * BLAKE2s-256 and MAC is keyed BLAKE2s-128. BLAKE2s comes from libb2 (Debian's libb2-dev).
 * Also base64 public keys (wgr_key_parse). Pure, any thread. */
#include <errno.h>
#include <string.h>

#include <blake2.h>
#include <sodium.h>

#include "wgr.h"

unsigned wgr_classify(const uint8_t *p, size_t len)
{
    if (len < 4 || p[1] != 0 || p[2] != 0 || p[3] != 0)
        return 0;
    switch (p[0]) {
    case WGR_INITIATION:
        return len == WGR_INITIATION_LEN ? WGR_INITIATION : 0;
    case WGR_RESPONSE:
        return len == WGR_RESPONSE_LEN ? WGR_RESPONSE : 0;
    case WGR_COOKIE:
        return len == WGR_COOKIE_LEN ? WGR_COOKIE : 0;
    case WGR_DATA:
        /* Not 32 + 16n: the sender pads to 16 only up to its MTU, so a full-MTU packet (1420
         * bytes: 1452 on the wire) has any length. */
        return len >= WGR_DATA_MIN_LEN ? WGR_DATA : 0;
    default:
        return 0;
    }
}

void wgr_mac1_key(const uint8_t pub[WGR_KEY_LEN], uint8_t key[WGR_KEY_LEN])
{
    static const char label[8] = "mac1----";
    uint8_t in[sizeof(label) + WGR_KEY_LEN];
    memcpy(in, label, sizeof(label));
    memcpy(in + sizeof(label), pub, WGR_KEY_LEN);
    int rc = blake2s(key, in, NULL, WGR_KEY_LEN, sizeof(in), 0);
    HD_ASSERT(rc == 0);
}

static void mac1(const uint8_t key[WGR_KEY_LEN], const uint8_t *msg, size_t mac1_off,
                 uint8_t out[WGR_MAC_LEN])
{
    int rc = blake2s(out, msg, key, WGR_MAC_LEN, mac1_off, WGR_KEY_LEN);
    HD_ASSERT(rc == 0);
}

bool wgr_mac1_ok(const uint8_t key[WGR_KEY_LEN], const uint8_t *msg, size_t mac1_off)
{
    uint8_t m[WGR_MAC_LEN];
    mac1(key, msg, mac1_off, m);
    return sodium_memcmp(m, msg + mac1_off, WGR_MAC_LEN) == 0;
}

void wgr_mac1_put(const uint8_t key[WGR_KEY_LEN], uint8_t *msg, size_t mac1_off)
{
    mac1(key, msg, mac1_off, msg + mac1_off);
}

int wgr_key_parse(const char *s, uint8_t key[WGR_KEY_LEN])
{
    size_t n = 0;
    const char *end = NULL;
    if (strlen(s) != 44 ||
        sodium_base642bin(key, WGR_KEY_LEN, s, 44, NULL, &n, &end,
                          sodium_base64_VARIANT_ORIGINAL) != 0 ||
        n != WGR_KEY_LEN || *end != '\0')
        return -EINVAL;
    return 0;
}
