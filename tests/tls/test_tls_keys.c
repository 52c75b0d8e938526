/* test_tls_keys.c - the TLS 1.3 key schedule pieces of tls/tls_keys.c: HKDF-Expand-Label and
 * traffic keys against RFC 8448 §3, KeyUpdate, keylog line parsing, the kTLS crypto_info
 * layout. Vectors marked "independent" were computed with a separate Python HKDF (hmac +
 * hashlib) that reproduces every RFC 8448 value used here. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <criterion/criterion.h>
#include <openssl/base.h>
#ifndef OPENSSL_IS_BORINGSSL
#error "tls/ needs BoringSSL (android-libboringssl-dev)"
#endif
#include <openssl/digest.h>

#include "tls_keys.h"
#include "tls_test_util.h"

TestSuite(tls_keys, .init = tt_check_boringssl);

/* RFC 8448 §3 (Simple 1-RTT Handshake), TLS_AES_128_GCM_SHA256. */
#define RFC8448_S_HS_SECRET "b67b7d690cc16c4e75e54213cb2d37b4e9c912bcded9105d42befd59d391ad38"
#define RFC8448_S_HS_KEY    "3fce516009c21727d0f2e4e86ee403bc"
#define RFC8448_S_HS_IV     "5d313eb2671276ee13000b30"
#define RFC8448_C_HS_SECRET "b3eddb126e067f35a780b3abf45e2d8f3b1a950738f52e9600746a0e27a55a21"
#define RFC8448_C_HS_KEY    "dbfaa693d1762c5b666af5d950258d01"
#define RFC8448_C_HS_IV     "5bd3c71b836e0b76bb73265f"
#define RFC8448_S_AP_SECRET "a11af9f05531f856ad47116b45a950328204b4f44bfb6b3a4b4f1f3fcb631643"
#define RFC8448_S_AP_KEY    "9f02283b6c9c07efc26bb9f2ac92e356"
#define RFC8448_S_AP_IV     "cf782b88dd83549aadf1e984"
#define RFC8448_C_AP_SECRET "9e40646ce79a7f9dc05af8889bce6552875afa0b06df0087f792ebb7c17504a5"
#define RFC8448_C_AP_KEY    "17422dda596ed5d9acd890e3c63f5051"
#define RFC8448_C_AP_IV     "5b78923dee08579033e523d9"

static void check_keys(uint16_t suite, const char *secret_hex, const char *key_hex,
                       const char *iv_hex)
{
    uint8_t secret[TLS_SECRET_LEN_MAX], key[TLS_KEY_LEN_MAX], iv[TLS_IV_LEN];
    size_t secret_len = tt_hex(secret_hex, secret, sizeof(secret));
    size_t key_len = tt_hex(key_hex, key, sizeof(key));
    cr_assert_eq(tt_hex(iv_hex, iv, sizeof(iv)), TLS_IV_LEN);

    struct tls_traffic_keys k;
    cr_assert_eq(tls_traffic_keys_init(&k, suite, secret, secret_len), 0);
    cr_assert_eq(k.suite, suite);
    cr_assert_eq(k.key_len, key_len);
    cr_assert_eq(k.secret_len, secret_len);
    cr_assert_arr_eq(k.key, key, key_len);
    cr_assert_arr_eq(k.iv, iv, TLS_IV_LEN);
    cr_assert_arr_eq(k.secret, secret, secret_len);
    tls_traffic_keys_deinit(&k);
    static const struct tls_traffic_keys zero;
    cr_assert_arr_eq(&k, &zero, sizeof(k), "deinit wipes the keys");
}

Test(tls_keys, rfc8448_traffic_keys)
{
    check_keys(TLS_SUITE_AES_128_GCM_SHA256, RFC8448_S_HS_SECRET, RFC8448_S_HS_KEY,
               RFC8448_S_HS_IV);
    check_keys(TLS_SUITE_AES_128_GCM_SHA256, RFC8448_C_HS_SECRET, RFC8448_C_HS_KEY,
               RFC8448_C_HS_IV);
    check_keys(TLS_SUITE_AES_128_GCM_SHA256, RFC8448_S_AP_SECRET, RFC8448_S_AP_KEY,
               RFC8448_S_AP_IV);
    check_keys(TLS_SUITE_AES_128_GCM_SHA256, RFC8448_C_AP_SECRET, RFC8448_C_AP_KEY,
               RFC8448_C_AP_IV);
}

/* HKDF-Expand-Label with a context: RFC 8448 §3 "derived" (context = SHA-256("")) and
 * "resumption" (context = ticket_nonce 00 00). */
Test(tls_keys, rfc8448_expand_label_with_context)
{
    uint8_t early[32], empty_hash[32], want[32], out[32];
    tt_hex("33ad0a1c607ec03b09e6cd9893680ce210adf300aa1f2660e1b22e10f170f92a", early, 32);
    tt_hex("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", empty_hash, 32);
    tt_hex("6f2615a108c702c5678f54fc9dbab69716c076189c48250cebeac3576c3611ba", want, 32);
    cr_assert_eq(tls_hkdf_expand_label(EVP_sha256(), early, 32, "derived", empty_hash, 32, out, 32),
                 0);
    cr_assert_arr_eq(out, want, 32);

    uint8_t res_master[32];
    const uint8_t nonce[2] = {0, 0};
    tt_hex("7df235f2031d2a051287d02b0241b0bfdaf86cc856231f2d5aba46c434ec196c", res_master, 32);
    tt_hex("4ecd0eb6ec3b4d87f5d6028f922ca4c5851a277fd41311c9e62d2c9492e1c4f3", want, 32);
    cr_assert_eq(
        tls_hkdf_expand_label(EVP_sha256(), res_master, 32, "resumption", nonce, 2, out, 32), 0);
    cr_assert_arr_eq(out, want, 32);
}

Test(tls_keys, sha384_and_chacha_keys)
{
    uint8_t secret[48];
    for (size_t i = 0; i < sizeof(secret); i++)
        secret[i] = (uint8_t)i;
    char hex[97];
    for (size_t i = 0; i < 48; i++)
        snprintf(hex + 2 * i, 3, "%02x", secret[i]);
    /* independent */
    check_keys(TLS_SUITE_AES_256_GCM_SHA384, hex,
               "6877d022f1c61d24ebb7487c16752d9a4798e40431c75b39320e537c90e23225",
               "42822531a0fe88648fc09e9f");
    hex[64] = '\0'; /* first 32 bytes: a SHA-256 secret */
    check_keys(TLS_SUITE_CHACHA20_POLY1305_SHA256, hex,
               "2ffbc449e87844051c7768f61ffd8ad070830f01ec2c520ef65f08e8296dffa0",
               "2f41c846a431a163814bcd71");
}

Test(tls_keys, init_rejects_bad_suite_and_length)
{
    uint8_t secret[48] = {1};
    struct tls_traffic_keys k;
    cr_assert_eq(tls_traffic_keys_init(&k, 0x1304, secret, 32), -ENOTSUP); /* AES-128-CCM */
    cr_assert_eq(tls_traffic_keys_init(&k, 0xc02f, secret, 32), -ENOTSUP); /* a TLS 1.2 suite */
    cr_assert_eq(tls_traffic_keys_init(&k, TLS_SUITE_AES_128_GCM_SHA256, secret, 48), -EINVAL);
    cr_assert_eq(tls_traffic_keys_init(&k, TLS_SUITE_AES_256_GCM_SHA384, secret, 32), -EINVAL);
    cr_assert_eq(k.key_len, 0, "failed init leaves keys wiped");
    cr_assert_eq(tls_traffic_keys_update(&k), -EINVAL, "update of wiped keys");
    cr_assert(tls_suite_is_supported(0x1301) && tls_suite_is_supported(0x1302) &&
              tls_suite_is_supported(0x1303) && !tls_suite_is_supported(0x1305));
    cr_assert_null(tls_suite_md(0x1304));
    cr_assert_null(tls_suite_aead(0x1304));
    cr_assert_eq(tls_suite_md(0x1302), EVP_sha384());
}

Test(tls_keys, expand_label_limits)
{
    uint8_t secret[32] = {0}, out[64], ctx[256] = {0};
    char label[251];
    memset(label, 'a', sizeof(label) - 1);
    label[250] = '\0'; /* 250 > 249 = 255 - strlen("tls13 ") */
    cr_assert_eq(tls_hkdf_expand_label(EVP_sha256(), secret, 32, label, NULL, 0, out, 32), -EINVAL);
    label[249] = '\0'; /* exactly the maximum */
    cr_assert_eq(tls_hkdf_expand_label(EVP_sha256(), secret, 32, label, NULL, 0, out, 32), 0);
    cr_assert_eq(tls_hkdf_expand_label(EVP_sha256(), secret, 32, "key", ctx, 256, out, 32),
                 -EINVAL);
    cr_assert_eq(tls_hkdf_expand_label(EVP_sha256(), secret, 32, "key", ctx, 255, out, 32), 0);
    cr_assert_eq(tls_hkdf_expand_label(NULL, secret, 32, "key", NULL, 0, out, 32), -EINVAL);
    cr_assert_eq(tls_hkdf_expand_label(EVP_sha256(), secret, 32, "key", NULL, 0, out, 65536),
                 -EINVAL);
    /* RFC 5869: at most 255 * HashLen; 255 * 32 = 8160 */
    static uint8_t big[8161];
    cr_assert_eq(tls_hkdf_expand_label(EVP_sha256(), secret, 32, "key", NULL, 0, big, 8160), 0);
    cr_assert_eq(tls_hkdf_expand_label(EVP_sha256(), secret, 32, "key", NULL, 0, big, 8161),
                 -EINVAL);
}

/* KeyUpdate: secret' = HKDF-Expand-Label(secret, "traffic upd", "", Hash.length), keys from it. */
Test(tls_keys, key_update_chain)
{
    uint8_t secret[32], next[32];
    tt_hex(RFC8448_C_AP_SECRET, secret, 32);
    struct tls_traffic_keys k, manual;
    cr_assert_eq(tls_traffic_keys_init(&k, TLS_SUITE_AES_128_GCM_SHA256, secret, 32), 0);
    cr_assert_eq(tls_traffic_keys_update(&k), 0);

    cr_assert_eq(tls_hkdf_expand_label(EVP_sha256(), secret, 32, "traffic upd", NULL, 0, next, 32),
                 0);
    cr_assert_eq(tls_traffic_keys_init(&manual, TLS_SUITE_AES_128_GCM_SHA256, next, 32), 0);
    cr_assert_arr_eq(&k, &manual, sizeof(k), "update == init(expand_label(traffic upd))");

    /* independent */
    uint8_t want[32];
    tt_hex("fcdfcc72725aaee48bf64e4fd8b749cdbdbab39d90da0b26e2245ca6ea167207", want, 32);
    cr_assert_arr_eq(k.secret, want, 32);
    tt_hex("3879d82f5f14056e623f2ce5bfc66fce", want, 16);
    cr_assert_arr_eq(k.key, want, 16);
    tt_hex("5dfb2c5938c3379b6cc5d1f2", want, 12);
    cr_assert_arr_eq(k.iv, want, 12);

    /* Each generation differs from the last. */
    cr_assert_eq(tls_traffic_keys_update(&manual), 0);
    cr_assert(memcmp(manual.secret, k.secret, 32) != 0);
    cr_assert(memcmp(manual.key, k.key, 16) != 0);
}

Test(tls_keys, key_update_sha384)
{
    uint8_t secret[48], want[48];
    for (size_t i = 0; i < sizeof(secret); i++)
        secret[i] = (uint8_t)i;
    struct tls_traffic_keys k;
    cr_assert_eq(tls_traffic_keys_init(&k, TLS_SUITE_AES_256_GCM_SHA384, secret, 48), 0);
    cr_assert_eq(tls_traffic_keys_update(&k), 0);
    cr_assert_eq(k.secret_len, 48);
    /* independent */
    tt_hex("401331b63e9d59f202e8f041042d9516f4cd7fa2e2ee14631d3b49fc340d7af3"
           "7fc2c0c9f252d8036f81ec5b85cbe5db",
           want, 48);
    cr_assert_arr_eq(k.secret, want, 48);
    tt_hex("eb354f3b48924ed78de34dd8aa6a6a0a51d857ddad1454d5cfa7b69f60712911", want, 32);
    cr_assert_arr_eq(k.key, want, 32);
    tt_hex("8478ffbe4f2e5450789775b3", want, 12);
    cr_assert_arr_eq(k.iv, want, 12);
}

#define RANDOM_HEX "0c4a4a8d6c2b5f1e0b9a7d3c2e1f00112233445566778899aabbccddeeff0011"

static int parse(const char *line, struct tls_keylog_entry *e)
{
    return tls_keylog_parse(line, strlen(line), e);
}

Test(tls_keys, keylog_good_lines)
{
    struct tls_keylog_entry e;
    uint8_t want[48];
    cr_assert_eq(parse("CLIENT_TRAFFIC_SECRET_0 " RANDOM_HEX " " RFC8448_C_AP_SECRET, &e), 1);
    cr_assert_eq(e.kind, TLS_KEYLOG_CLIENT_TRAFFIC_0);
    cr_assert_eq(e.secret_len, 32);
    tt_hex(RFC8448_C_AP_SECRET, want, 32);
    cr_assert_arr_eq(e.secret, want, 32);
    tt_hex(RANDOM_HEX, want, 32);
    cr_assert_arr_eq(e.client_random, want, 32);

    /* Upper-case hex, a trailing newline (file form), and a SHA-384 secret. */
    cr_assert_eq(parse("SERVER_TRAFFIC_SECRET_0 " RANDOM_HEX " "
                       "A11AF9F05531F856AD47116B45A950328204B4F44BFB6B3A4B4F1F3FCB631643"
                       "000102030405060708090a0b0c0d0e0f\r\n",
                       &e),
                 1);
    cr_assert_eq(e.kind, TLS_KEYLOG_SERVER_TRAFFIC_0);
    cr_assert_eq(e.secret_len, 48);
    cr_assert_eq(e.secret[0], 0xa1);
    cr_assert_eq(e.secret[47], 0x0f);
}

Test(tls_keys, keylog_ignored_lines)
{
    struct tls_keylog_entry e;
    static const char *const labels[] = {
        "CLIENT_HANDSHAKE_TRAFFIC_SECRET", "SERVER_HANDSHAKE_TRAFFIC_SECRET", "EXPORTER_SECRET",
        "CLIENT_EARLY_TRAFFIC_SECRET",     "CLIENT_TRAFFIC_SECRET_1",         "CLIENT_RANDOM",
    };
    char line[TLS_KEYLOG_LINE_MAX];
    for (size_t i = 0; i < sizeof(labels) / sizeof(labels[0]); i++) {
        snprintf(line, sizeof(line), "%s %s %s", labels[i], RANDOM_HEX, RFC8448_S_AP_SECRET);
        cr_assert_eq(parse(line, &e), 0, "%s is ignored", labels[i]);
        cr_assert_eq(e.secret_len, 0, "ignored line leaves the entry wiped");
    }
}

Test(tls_keys, keylog_malformed_lines)
{
    struct tls_keylog_entry e;
    static const char *const bad[] = {
        "",
        "CLIENT_TRAFFIC_SECRET_0",
        "CLIENT_TRAFFIC_SECRET_0 " RANDOM_HEX,
        "CLIENT_TRAFFIC_SECRET_0 " RANDOM_HEX " ",
        "CLIENT_TRAFFIC_SECRET_0  " RANDOM_HEX " " RFC8448_C_AP_SECRET,     /* double space */
        " CLIENT_TRAFFIC_SECRET_0 " RANDOM_HEX " " RFC8448_C_AP_SECRET,     /* leading space */
        "CLIENT_TRAFFIC_SECRET_0 " RANDOM_HEX " " RFC8448_C_AP_SECRET " ",  /* trailing space */
        "CLIENT_TRAFFIC_SECRET_0 " RANDOM_HEX " " RFC8448_C_AP_SECRET " x", /* four fields */
        "CLIENT_TRAFFIC_SECRET_0 0c4a " RFC8448_C_AP_SECRET,                /* short random */
        "CLIENT_TRAFFIC_SECRET_0 " RANDOM_HEX " 9e40646ce79a7f9dc05af8889bce6552875afa0b06df0087f"
        "792ebb7c17504a",                                                          /* 31.5 bytes */
        "CLIENT_TRAFFIC_SECRET_0 " RANDOM_HEX " 9e40646ce79a7f9dc05af8889bce6552", /* 16 bytes */
        "CLIENT_TRAFFIC_SECRET_0 " RANDOM_HEX " 9e40646ce79a7f9dc05af8889bce6552875afa0b06df0087f"
        "792ebb7c17504ag",                                                  /* bad hex digit */
        "CLIENT_TRAFFIC_SECRET_0 " RANDOM_HEX " " RFC8448_C_AP_SECRET "00", /* 33 bytes */
        "client_traffic_secret_0 " RANDOM_HEX " " RFC8448_C_AP_SECRET,      /* label charset */
        "CLIENT_TRAFFIC_SECRET_0\t" RANDOM_HEX " " RFC8448_C_AP_SECRET,     /* tab */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        cr_assert_eq(parse(bad[i], &e), -EINVAL, "line %zu: '%s'", i, bad[i]);
    /* The client random's hex: one byte too many, an odd length, a bad digit (either end). */
    static const char *const bad_random[] = {
        "CLIENT_TRAFFIC_SECRET_0 " RANDOM_HEX "00 " RFC8448_C_AP_SECRET,
        "CLIENT_TRAFFIC_SECRET_0 " RANDOM_HEX "0 " RFC8448_C_AP_SECRET,
    };
    for (size_t i = 0; i < sizeof(bad_random) / sizeof(bad_random[0]); i++)
        cr_assert_eq(parse(bad_random[i], &e), -EINVAL, "'%s'", bad_random[i]);
    char digit[TLS_KEYLOG_LINE_MAX];
    size_t at[] = {24, 24 + 63}; /* the random's first and last digit */
    for (size_t i = 0; i < sizeof(at) / sizeof(at[0]); i++) {
        snprintf(digit, sizeof(digit), "CLIENT_TRAFFIC_SECRET_0 %s %s", RANDOM_HEX,
                 RFC8448_C_AP_SECRET);
        cr_assert_eq(parse(digit, &e), 1);
        digit[at[i]] = 'g';
        cr_assert_eq(parse(digit, &e), -EINVAL, "'%s'", digit);
    }

    /* Over TLS_KEYLOG_LINE_MAX, even if it would parse otherwise. */
    char line[TLS_KEYLOG_LINE_MAX + 8];
    memset(line, 'A', sizeof(line));
    cr_assert_eq(tls_keylog_parse(line, sizeof(line), &e), -EINVAL);
    /* An embedded NUL is not a separator. */
    char nul[] = "CLIENT_TRAFFIC_SECRET_0 " RANDOM_HEX " " RFC8448_C_AP_SECRET;
    nul[3] = '\0';
    cr_assert_eq(tls_keylog_parse(nul, sizeof(nul) - 1, &e), -EINVAL);
}

static void key_pattern(struct tls_traffic_keys *k, uint16_t suite, uint8_t key_len)
{
    memset(k, 0, sizeof(*k));
    k->suite = suite;
    k->key_len = key_len;
    for (size_t i = 0; i < TLS_KEY_LEN_MAX; i++)
        k->key[i] = (uint8_t)(0x40 + i);
    for (size_t i = 0; i < TLS_IV_LEN; i++)
        k->iv[i] = (uint8_t)(0xa0 + i);
}

static const uint8_t seq_be[8] = {0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08};
#define SEQ UINT64_C(0x0102030405060708)

Test(tls_keys, ktls_aes_gcm_128)
{
    struct tls_traffic_keys k;
    union tls_ktls_info info;
    key_pattern(&k, TLS_SUITE_AES_128_GCM_SHA256, 16);
    cr_assert_eq(tls_ktls_info_fill(&info, &k, SEQ),
                 (int)sizeof(struct tls12_crypto_info_aes_gcm_128));
    const struct tls12_crypto_info_aes_gcm_128 *ci = &info.aes_gcm_128;
    cr_assert_eq(ci->info.version, TLS_1_3_VERSION);
    cr_assert_eq(ci->info.version, 0x0304);
    cr_assert_eq(ci->info.cipher_type, TLS_CIPHER_AES_GCM_128);
    cr_assert_arr_eq(ci->salt, k.iv, 4);
    cr_assert_arr_eq(ci->iv, k.iv + 4, 8);
    cr_assert_arr_eq(ci->key, k.key, 16);
    cr_assert_arr_eq(ci->rec_seq, seq_be, 8);
}

Test(tls_keys, ktls_aes_gcm_256)
{
    struct tls_traffic_keys k;
    union tls_ktls_info info;
    key_pattern(&k, TLS_SUITE_AES_256_GCM_SHA384, 32);
    cr_assert_eq(tls_ktls_info_fill(&info, &k, SEQ),
                 (int)sizeof(struct tls12_crypto_info_aes_gcm_256));
    const struct tls12_crypto_info_aes_gcm_256 *ci = &info.aes_gcm_256;
    cr_assert_eq(ci->info.version, TLS_1_3_VERSION);
    cr_assert_eq(ci->info.cipher_type, TLS_CIPHER_AES_GCM_256);
    cr_assert_arr_eq(ci->salt, k.iv, 4);
    cr_assert_arr_eq(ci->iv, k.iv + 4, 8);
    cr_assert_arr_eq(ci->key, k.key, 32);
    cr_assert_arr_eq(ci->rec_seq, seq_be, 8);
}

Test(tls_keys, ktls_chacha20_poly1305)
{
    struct tls_traffic_keys k;
    union tls_ktls_info info;
    key_pattern(&k, TLS_SUITE_CHACHA20_POLY1305_SHA256, 32);
    cr_assert_eq(tls_ktls_info_fill(&info, &k, 0),
                 (int)sizeof(struct tls12_crypto_info_chacha20_poly1305));
    const struct tls12_crypto_info_chacha20_poly1305 *ci = &info.chacha20_poly1305;
    cr_assert_eq(ci->info.version, TLS_1_3_VERSION);
    cr_assert_eq(ci->info.cipher_type, TLS_CIPHER_CHACHA20_POLY1305);
    cr_assert_arr_eq(ci->iv, k.iv, 12);
    cr_assert_arr_eq(ci->key, k.key, 32);
    static const uint8_t zero[8];
    cr_assert_arr_eq(ci->rec_seq, zero, 8);
}

Test(tls_keys, ktls_unsupported_suite)
{
    struct tls_traffic_keys k;
    union tls_ktls_info info;
    key_pattern(&k, 0x1304, 16);
    cr_assert_eq(tls_ktls_info_fill(&info, &k, 0), -ENOTSUP);
}
