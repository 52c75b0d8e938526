/* tls_test_util.c - hex decoding and the BoringSSL binding check for the tls/ tests. */
#define _GNU_SOURCE
#include "tls_test_util.h"

#include <dlfcn.h>
#include <string.h>

#include <criterion/criterion.h>
#include <openssl/base.h>
#ifndef OPENSSL_IS_BORINGSSL
#error "tls/ needs BoringSSL (android-libboringssl-dev)"
#endif
#include <openssl/crypto.h>
#include <openssl/digest.h>

#include <hd/net_http.h>

#include "tls_keys.h"

size_t tt_hex(const char *hex, uint8_t *out, size_t cap)
{
    size_t n = 0;
    int hi = -1;
    for (const char *p = hex; *p; p++) {
        if (*p == ' ' || *p == '\n')
            continue;
        int v = net_hex_digit(*p);
        cr_assert(v >= 0, "bad hex digit '%c'", *p);
        if (hi < 0) {
            hi = v;
            continue;
        }
        cr_assert(n < cap, "hex vector longer than %zu bytes", cap);
        out[n++] = (uint8_t)(hi << 4 | v);
        hi = -1;
    }
    cr_assert(hi < 0, "odd number of hex digits");
    return n;
}

void tt_check_boringssl(void)
{
    const char *name = OpenSSL_version(OPENSSL_VERSION);
    cr_assert(name && strstr(name, "BoringSSL"),
              "OpenSSL_version() says '%s': symbols bound to the wrong libcrypto", name);
    cr_assert(tls_crypto_is_boringssl());
    Dl_info info;
    cr_assert(dladdr((void *)EVP_sha256, &info) != 0 && info.dli_fname != NULL);
    cr_assert(strstr(info.dli_fname, "/android/") != NULL,
              "EVP_sha256 resolves into %s, not BoringSSL's libcrypto", info.dli_fname);
}

void tt_state_pair(uint16_t suite, uint8_t seed, uint64_t seq, struct tls_record_state *tx,
                   struct tls_record_state *rx)
{
    uint8_t secret[TLS_SECRET_LEN_MAX];
    memset(secret, seed, sizeof(secret));
    size_t len = suite == TLS_SUITE_AES_256_GCM_SHA384 ? 48 : 32;
    struct tls_traffic_keys keys;
    cr_assert_eq(tls_traffic_keys_init(&keys, suite, secret, len), 0);
    cr_assert_eq(tls_record_state_init(tx, &keys, seq), 0);
    cr_assert_eq(tls_record_state_init(rx, &keys, seq), 0);
    tls_traffic_keys_deinit(&keys);
}

size_t tt_open_stream(struct tls_record_state *rx, uint8_t *stream, size_t len, uint8_t *out,
                      size_t out_cap, size_t *records_count)
{
    size_t off = 0, n = 0;
    *records_count = 0;
    while (off < len) {
        struct tls_record_in rec;
        int rc = tls_record_open(rx, stream + off, len - off, &rec);
        cr_assert_eq(rc, 0, "record %zu at offset %zu: %d", *records_count, off, rc);
        cr_assert_eq(rec.type, TLS_CONTENT_APPLICATION_DATA);
        cr_assert_leq(rec.data_len, TLS_RECORD_PLAINTEXT_MAX);
        cr_assert_leq(n + rec.data_len, out_cap);
        memcpy(out + n, rec.data, rec.data_len);
        n += rec.data_len;
        off += rec.record_len;
        (*records_count)++;
    }
    return n;
}
