/* tls_keys.c - TLS 1.3 key schedule pieces over BoringSSL's HKDF: HKDF-Expand-Label, traffic
 * key/IV derivation, KeyUpdate, keylog line parsing and the kTLS crypto_info layout.
 * Runs on whichever shard owns the connection (or at start-up); owns no state of its own:
 * everything lives in caller-provided structs and on the stack, nothing is allocated. */
#include "tls_keys.h"

#include <errno.h>
#include <string.h>

#include <openssl/aead.h>
#include <openssl/crypto.h>
#include <openssl/digest.h>
#include <openssl/err.h>
#include <openssl/hkdf.h>
#include <openssl/mem.h>

#include <hd/hd_base.h>
#include <hd/net_http.h>

/* What each suite is made of (RFC 8446 §B.4). */
struct tls_suite_desc {
    uint16_t suite;
    uint8_t key_len;
    uint8_t hash_len;
    uint16_t ktls_cipher;
    const EVP_MD *(*md)(void);
    const EVP_AEAD *(*aead)(void);
};

static const struct tls_suite_desc tls_suites[] = {
    {TLS_SUITE_AES_128_GCM_SHA256, 16, 32, TLS_CIPHER_AES_GCM_128, EVP_sha256,
     EVP_aead_aes_128_gcm},
    {TLS_SUITE_AES_256_GCM_SHA384, 32, 48, TLS_CIPHER_AES_GCM_256, EVP_sha384,
     EVP_aead_aes_256_gcm},
    {TLS_SUITE_CHACHA20_POLY1305_SHA256, 32, 32, TLS_CIPHER_CHACHA20_POLY1305, EVP_sha256,
     EVP_aead_chacha20_poly1305},
};

_Static_assert(TLS_CIPHER_AES_GCM_128_KEY_SIZE == 16 && TLS_CIPHER_AES_GCM_256_KEY_SIZE == 32 &&
                   TLS_CIPHER_CHACHA20_POLY1305_KEY_SIZE == 32,
               "kernel key sizes match the suites");
_Static_assert(TLS_CIPHER_AES_GCM_128_SALT_SIZE + TLS_CIPHER_AES_GCM_128_IV_SIZE == TLS_IV_LEN &&
                   TLS_CIPHER_AES_GCM_256_SALT_SIZE + TLS_CIPHER_AES_GCM_256_IV_SIZE ==
                       TLS_IV_LEN &&
                   TLS_CIPHER_CHACHA20_POLY1305_IV_SIZE == TLS_IV_LEN,
               "kernel salt || iv is the 12-byte TLS 1.3 static IV");
_Static_assert(TLS_CIPHER_AES_GCM_128_REC_SEQ_SIZE == 8 &&
                   TLS_CIPHER_AES_GCM_256_REC_SEQ_SIZE == 8 &&
                   TLS_CIPHER_CHACHA20_POLY1305_REC_SEQ_SIZE == 8,
               "rec_seq is the 64-bit sequence number");

static const struct tls_suite_desc *tls_suite_find(uint16_t suite)
{
    for (size_t i = 0; i < HD_ARRAY_SIZE(tls_suites); i++) {
        if (tls_suites[i].suite == suite)
            return &tls_suites[i];
    }
    return NULL;
}

bool tls_crypto_is_boringssl(void)
{
    const char *name = OpenSSL_version(OPENSSL_VERSION);
    return name != NULL && strstr(name, "BoringSSL") != NULL;
}

bool tls_suite_is_supported(uint16_t suite)
{
    return tls_suite_find(suite) != NULL;
}

const EVP_MD *tls_suite_md(uint16_t suite)
{
    const struct tls_suite_desc *d = tls_suite_find(suite);
    return d ? d->md() : NULL;
}

const EVP_AEAD *tls_suite_aead(uint16_t suite)
{
    const struct tls_suite_desc *d = tls_suite_find(suite);
    return d ? d->aead() : NULL;
}

int tls_hkdf_expand_label(const EVP_MD *md, const uint8_t *secret, size_t secret_len,
                          const char *label, const uint8_t *context, size_t context_len,
                          uint8_t *out, size_t out_len)
{
    if (md == NULL || out_len > UINT16_MAX || context_len > TLS_HKDF_CONTEXT_MAX)
        return -EINVAL;
    size_t label_len = strnlen(label, TLS_HKDF_LABEL_MAX + 1);
    if (label_len > TLS_HKDF_LABEL_MAX)
        return -EINVAL;

    /* struct { uint16 length; opaque label<7..255>; opaque context<0..255>; } HkdfLabel */
    uint8_t info[TLS_HKDF_INFO_MAX];
    size_t n = 0;
    info[n++] = (uint8_t)(out_len >> 8);
    info[n++] = (uint8_t)out_len;
    info[n++] = (uint8_t)(TLS_HKDF_LABEL_PREFIX_LEN + label_len);
    memcpy(info + n, "tls13 ", TLS_HKDF_LABEL_PREFIX_LEN);
    n += TLS_HKDF_LABEL_PREFIX_LEN;
    memcpy(info + n, label, label_len);
    n += label_len;
    info[n++] = (uint8_t)context_len;
    if (context_len > 0)
        memcpy(info + n, context, context_len);
    n += context_len;

    /* HKDF_expand fails only for out_len > 255 * Hash.length (RFC 5869 §2.3). */
    int ok = HKDF_expand(out, out_len, md, secret, secret_len, info, n);
    OPENSSL_cleanse(info, n);
    if (!ok) {
        ERR_clear_error(); /* keep BoringSSL's thread error queue clean for SSL_get_error */
        return -EINVAL;
    }
    return 0;
}

/* key and iv from keys->secret (RFC 8446 §7.3). */
static int tls_traffic_keys_expand(struct tls_traffic_keys *keys, const struct tls_suite_desc *d)
{
    const EVP_MD *md = d->md();
    int rc = tls_hkdf_expand_label(md, keys->secret, keys->secret_len, "key", NULL, 0, keys->key,
                                   d->key_len);
    if (rc == 0)
        rc = tls_hkdf_expand_label(md, keys->secret, keys->secret_len, "iv", NULL, 0, keys->iv,
                                   TLS_IV_LEN);
    return rc;
}

int tls_traffic_keys_init(struct tls_traffic_keys *keys, uint16_t suite, const uint8_t *secret,
                          size_t secret_len)
{
    tls_traffic_keys_deinit(keys);
    const struct tls_suite_desc *d = tls_suite_find(suite);
    if (d == NULL)
        return -ENOTSUP;
    if (secret_len != d->hash_len)
        return -EINVAL;
    keys->suite = suite;
    keys->key_len = d->key_len;
    keys->secret_len = d->hash_len;
    memcpy(keys->secret, secret, secret_len);
    int rc = tls_traffic_keys_expand(keys, d);
    if (rc < 0)
        tls_traffic_keys_deinit(keys);
    return rc;
}

void tls_traffic_keys_deinit(struct tls_traffic_keys *keys)
{
    OPENSSL_cleanse(keys, sizeof(*keys));
}

int tls_traffic_keys_update(struct tls_traffic_keys *keys)
{
    const struct tls_suite_desc *d = tls_suite_find(keys->suite);
    if (d == NULL || keys->secret_len != d->hash_len)
        return -EINVAL;
    uint8_t next[TLS_SECRET_LEN_MAX];
    int rc = tls_hkdf_expand_label(d->md(), keys->secret, keys->secret_len, "traffic upd", NULL, 0,
                                   next, keys->secret_len);
    if (rc == 0) {
        memcpy(keys->secret, next, keys->secret_len);
        rc = tls_traffic_keys_expand(keys, d);
    }
    OPENSSL_cleanse(next, sizeof(next));
    return rc;
}

/* ---- keylog lines ---- */

static bool tls_keylog_label_char(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

/* Splits "LABEL SP RANDOM SP SECRET": field starts and lengths; -EINVAL unless three fields. */
static int tls_keylog_split(const char *line, size_t len, size_t start[3], size_t flen[3])
{
    size_t field = 0;
    start[0] = 0;
    for (size_t i = 0; i < len; i++) {
        if (line[i] != ' ')
            continue;
        if (field == 2)
            return -EINVAL;
        flen[field] = i - start[field];
        start[++field] = i + 1;
    }
    if (field != 2)
        return -EINVAL;
    flen[2] = len - start[2];
    for (size_t f = 0; f < 3; f++) {
        if (flen[f] == 0)
            return -EINVAL;
    }
    return 0;
}

static int tls_keylog_parse_fields(const char *line, size_t len, struct tls_keylog_entry *entry)
{
    size_t start[3], flen[3];
    if (tls_keylog_split(line, len, start, flen) < 0)
        return -EINVAL;
    for (size_t i = 0; i < flen[0]; i++) {
        if (!tls_keylog_label_char(line[i]))
            return -EINVAL;
    }
    if (net_hex_decode(line + start[1], flen[1], entry->client_random, TLS_CLIENT_RANDOM_LEN) !=
        TLS_CLIENT_RANDOM_LEN)
        return -EINVAL;
    /* Secrets are Hash.length (32 or 48) in TLS 1.3, the 48-byte master secret in TLS 1.2. */
    size_t secret_len = flen[2] / 2;
    if (flen[2] % 2 != 0 || (secret_len != 32 && secret_len != 48))
        return -EINVAL;
    if (net_hex_decode(line + start[2], flen[2], entry->secret, secret_len) != (ssize_t)secret_len)
        return -EINVAL;
    entry->secret_len = (uint8_t)secret_len;

    static const char client0[] = "CLIENT_TRAFFIC_SECRET_0";
    static const char server0[] = "SERVER_TRAFFIC_SECRET_0";
    if (flen[0] == sizeof(client0) - 1 && memcmp(line, client0, flen[0]) == 0) {
        entry->kind = TLS_KEYLOG_CLIENT_TRAFFIC_0;
        return 1;
    }
    if (flen[0] == sizeof(server0) - 1 && memcmp(line, server0, flen[0]) == 0) {
        entry->kind = TLS_KEYLOG_SERVER_TRAFFIC_0;
        return 1;
    }
    return 0;
}

int tls_keylog_parse(const char *line, size_t line_len, struct tls_keylog_entry *entry)
{
    OPENSSL_cleanse(entry, sizeof(*entry));
    if (line_len > TLS_KEYLOG_LINE_MAX)
        return -EINVAL;
    if (line_len > 0 && line[line_len - 1] == '\n')
        line_len--;
    if (line_len > 0 && line[line_len - 1] == '\r')
        line_len--;
    int rc = tls_keylog_parse_fields(line, line_len, entry);
    if (rc != 1)
        OPENSSL_cleanse(entry, sizeof(*entry));
    return rc;
}

/* ---- kTLS ---- */

static void tls_put_be64(uint8_t out[8], uint64_t v)
{
    for (int i = 7; i >= 0; i--) {
        out[i] = (uint8_t)v;
        v >>= 8;
    }
}

int tls_ktls_info_fill(union tls_ktls_info *info, const struct tls_traffic_keys *keys, uint64_t seq)
{
    memset(info, 0, sizeof(*info));
    const struct tls_suite_desc *d = tls_suite_find(keys->suite);
    if (d == NULL)
        return -ENOTSUP;
    info->info.version = TLS_1_3_VERSION;
    info->info.cipher_type = d->ktls_cipher;
    switch (keys->suite) {
    case TLS_SUITE_AES_128_GCM_SHA256: {
        struct tls12_crypto_info_aes_gcm_128 *ci = &info->aes_gcm_128;
        memcpy(ci->salt, keys->iv, sizeof(ci->salt));
        memcpy(ci->iv, keys->iv + sizeof(ci->salt), sizeof(ci->iv));
        memcpy(ci->key, keys->key, sizeof(ci->key));
        tls_put_be64(ci->rec_seq, seq);
        return (int)sizeof(*ci);
    }
    case TLS_SUITE_AES_256_GCM_SHA384: {
        struct tls12_crypto_info_aes_gcm_256 *ci = &info->aes_gcm_256;
        memcpy(ci->salt, keys->iv, sizeof(ci->salt));
        memcpy(ci->iv, keys->iv + sizeof(ci->salt), sizeof(ci->iv));
        memcpy(ci->key, keys->key, sizeof(ci->key));
        tls_put_be64(ci->rec_seq, seq);
        return (int)sizeof(*ci);
    }
    default: { /* TLS_SUITE_CHACHA20_POLY1305_SHA256 */
        struct tls12_crypto_info_chacha20_poly1305 *ci = &info->chacha20_poly1305;
        memcpy(ci->iv, keys->iv, sizeof(ci->iv));
        memcpy(ci->key, keys->key, sizeof(ci->key));
        tls_put_be64(ci->rec_seq, seq);
        return (int)sizeof(*ci);
    }
    }
}
