/* wgr_cookie.c - WireGuard's cookie mechanism (the paper, section 5.4.7), answered by the relay
 * for the responder when a source sends initiations over its rate. A cookie is MAC(R, source
 * address and port), R a random secret replaced every two minutes; the cookie reply carries it
 * encrypted with XChaCha20-Poly1305 under HASH("cookie--" || responder's public key), with the
 * initiation's MAC1 as associated data. Both keys derive from public keys, so the relay can do
 * this without the responder's private key, and the initiator (stock WireGuard) then sends its
 * next initiation with MAC2 = MAC(cookie, message up to MAC2): proof that it receives at that
 * address. MAC is keyed BLAKE2s-128 (libb2), the AEAD libsodium's. */
#include <errno.h>
#include <string.h>

#include <blake2.h>
#include <sodium.h>

#include "wgr.h"

#define WGR_INITIATION_MAC2 132u /* mac2 covers everything before it */

void wgr_cookie_key(const uint8_t pub[WGR_KEY_LEN], uint8_t key[WGR_KEY_LEN])
{
    static const char label[8] = "cookie--";
    uint8_t in[sizeof(label) + WGR_KEY_LEN];
    memcpy(in, label, sizeof(label));
    memcpy(in + sizeof(label), pub, WGR_KEY_LEN);
    int rc = blake2s(key, in, NULL, WGR_KEY_LEN, sizeof(in), 0);
    HD_ASSERT(rc == 0);
}

void wgr_cookies_rotate(struct wgr_cookies *c, uint64_t now_ms)
{
    if (c->rotated_ms != 0 && now_ms - c->rotated_ms < WGR_COOKIE_SECRET_MS)
        return;
    memcpy(c->secret[1], c->secret[0], sizeof(c->secret[0]));
    randombytes_buf(c->secret[0], sizeof(c->secret[0]));
    if (c->rotated_ms == 0)
        memcpy(c->secret[1], c->secret[0], sizeof(c->secret[0]));
    c->rotated_ms = now_ms ? now_ms : 1;
}

/* MAC(secret, ip || port) */
static void cookie_of(const uint8_t secret[32], const struct wgr_addr *from,
                      uint8_t cookie[WGR_MAC_LEN])
{
    uint8_t a[18];
    size_t n;
    if (from->sa.sa_family == AF_INET6) {
        memcpy(a, &from->in6.sin6_addr, 16);
        memcpy(a + 16, &from->in6.sin6_port, 2);
        n = 18;
    } else {
        memcpy(a, &from->in4.sin_addr, 4);
        memcpy(a + 4, &from->in4.sin_port, 2);
        n = 6;
    }
    int rc = blake2s(cookie, a, secret, WGR_MAC_LEN, n, 32);
    HD_ASSERT(rc == 0);
}

void wgr_mac2_put(const uint8_t cookie[WGR_MAC_LEN], uint8_t *msg)
{
    int rc = blake2s(msg + WGR_INITIATION_MAC2, msg, cookie, WGR_MAC_LEN, WGR_INITIATION_MAC2,
                     WGR_MAC_LEN);
    HD_ASSERT(rc == 0);
}

bool wgr_mac2_ok(const struct wgr_cookies *c, const uint8_t *msg, const struct wgr_addr *from)
{
    static const uint8_t zero[WGR_MAC_LEN];
    if (c->rotated_ms == 0 || sodium_memcmp(msg + WGR_INITIATION_MAC2, zero, WGR_MAC_LEN) == 0)
        return false;
    for (unsigned i = 0; i < 2; i++) {
        uint8_t cookie[WGR_MAC_LEN], mac2[WGR_MAC_LEN];
        cookie_of(c->secret[i], from, cookie);
        int rc = blake2s(mac2, msg, cookie, WGR_MAC_LEN, WGR_INITIATION_MAC2, WGR_MAC_LEN);
        HD_ASSERT(rc == 0);
        if (sodium_memcmp(mac2, msg + WGR_INITIATION_MAC2, WGR_MAC_LEN) == 0)
            return true;
    }
    return false;
}

void wgr_cookie_reply(const struct wgr_cookies *c, const uint8_t *init, const struct wgr_addr *from,
                      const uint8_t cookie_key[WGR_KEY_LEN], uint8_t out[WGR_COOKIE_LEN])
{
    uint8_t cookie[WGR_MAC_LEN];
    cookie_of(c->secret[0], from, cookie);
    memset(out, 0, 8);
    out[0] = WGR_COOKIE;
    memcpy(out + 4, init + 4, 4); /* receiver: the initiator's sender index */
    randombytes_buf(out + 8, 24);
    unsigned long long clen = 0;
    crypto_aead_xchacha20poly1305_ietf_encrypt(out + 32, &clen, cookie, WGR_MAC_LEN,
                                               init + WGR_INITIATION_MAC1, WGR_MAC_LEN, NULL,
                                               out + 8, cookie_key);
    HD_ASSERT(clen == 32);
}

int wgr_cookie_open(const uint8_t reply[WGR_COOKIE_LEN], const uint8_t cookie_key[WGR_KEY_LEN],
                    const uint8_t mac1[WGR_MAC_LEN], uint8_t cookie[WGR_MAC_LEN])
{
    unsigned long long n = 0;
    if (crypto_aead_xchacha20poly1305_ietf_decrypt(cookie, &n, NULL, reply + 32, 32, mac1,
                                                   WGR_MAC_LEN, reply + 8, cookie_key) != 0)
        return -EBADMSG;
    return n == WGR_MAC_LEN ? 0 : -EBADMSG;
}
