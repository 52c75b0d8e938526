/* tls_keys.h - TLS 1.3 key schedule pieces the record layer needs after a BoringSSL handshake:
 * HKDF-Expand-Label (RFC 8446 §7.1), traffic key/IV derivation (§7.3), KeyUpdate (§7.2),
 * SSLKEYLOGFILE line parsing (how BoringSSL hands out the traffic secrets) and the Linux kTLS
 * crypto_info layout. Pure functions over caller-owned memory: no allocation, any thread. */
#ifndef TLS_KEYS_H
#define TLS_KEYS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <linux/tls.h>
#include <openssl/base.h>
#ifndef OPENSSL_IS_BORINGSSL
#error "tls/ needs BoringSSL (android-libboringssl-dev)"
#endif

#include "tls_limits.h"

/* IANA cipher suite numbers of the three TLS 1.3 suites we support (RFC 8446 §B.4). */
enum tls_suite {
    TLS_SUITE_AES_128_GCM_SHA256 = 0x1301,
    TLS_SUITE_AES_256_GCM_SHA384 = 0x1302,
    TLS_SUITE_CHACHA20_POLY1305_SHA256 = 0x1303,
};

/* One direction's traffic keys: the secret (kept for KeyUpdate) and what it expands to. */
struct tls_traffic_keys {
    uint16_t suite;     /* enum tls_suite */
    uint8_t key_len;    /* 16 or 32 */
    uint8_t secret_len; /* Hash.length: 32 or 48 */
    uint8_t key[TLS_KEY_LEN_MAX];
    uint8_t iv[TLS_IV_LEN];
    uint8_t secret[TLS_SECRET_LEN_MAX];
};

/* True when the process's BoringSSL symbols really are BoringSSL (OpenSSL_version names it).
 * A binary that also loads OpenSSL's libcrypto.so.3 (Criterion does, via libgit2) can bind
 * EVP_sha256 & co to the wrong library; call this once at start-up and refuse to run if false. */
bool tls_crypto_is_boringssl(void);

/* True for the three suites above. */
bool tls_suite_is_supported(uint16_t suite);

/* The suite's hash (EVP_sha256 / EVP_sha384) or AEAD, NULL for an unsupported suite. */
const EVP_MD *tls_suite_md(uint16_t suite);
const EVP_AEAD *tls_suite_aead(uint16_t suite);

/* HKDF-Expand-Label(secret, label, context, out_len) of RFC 8446 §7.1 with hash md: builds the
 * HkdfLabel ("tls13 " + label) on the stack and calls BoringSSL's HKDF_expand. Borrows all
 * pointers. label is a NUL-terminated ASCII string without the "tls13 " prefix.
 * Returns 0, or -EINVAL (label longer than TLS_HKDF_LABEL_MAX, context longer than
 * TLS_HKDF_CONTEXT_MAX, out_len over 65535 or over 255 * Hash.length, md NULL). */
int tls_hkdf_expand_label(const EVP_MD *md, const uint8_t *secret, size_t secret_len,
                          const char *label, const uint8_t *context, size_t context_len,
                          uint8_t *out, size_t out_len);

/* Fills keys from a traffic secret (RFC 8446 §7.3): key = HKDF-Expand-Label(secret, "key", "",
 * key_length), iv = HKDF-Expand-Label(secret, "iv", "", 12); the secret is copied for
 * KeyUpdate. keys is written in place (nothing to free; _deinit wipes it).
 * Returns 0, -ENOTSUP (unsupported suite), or -EINVAL (secret_len is not the suite's Hash.length).
 * On error keys is wiped. */
int tls_traffic_keys_init(struct tls_traffic_keys *keys, uint16_t suite, const uint8_t *secret,
                          size_t secret_len);

/* Wipes keys (OPENSSL_cleanse). */
void tls_traffic_keys_deinit(struct tls_traffic_keys *keys);

/* KeyUpdate (RFC 8446 §7.2): secret = HKDF-Expand-Label(secret, "traffic upd", "", Hash.length),
 * then key and iv re-derived from it. The record sequence number restarts at 0 (the caller's).
 * Returns 0, or -EINVAL (keys not initialised). */
int tls_traffic_keys_update(struct tls_traffic_keys *keys);

/* Which secret a keylog line carried. */
enum tls_keylog_kind {
    TLS_KEYLOG_CLIENT_TRAFFIC_0 = 1, /* "CLIENT_TRAFFIC_SECRET_0": client -> server records */
    TLS_KEYLOG_SERVER_TRAFFIC_0 = 2, /* "SERVER_TRAFFIC_SECRET_0": server -> client records */
};

struct tls_keylog_entry {
    enum tls_keylog_kind kind;
    uint8_t secret_len; /* 32 or 48 */
    uint8_t client_random[TLS_CLIENT_RANDOM_LEN];
    uint8_t secret[TLS_SECRET_LEN_MAX];
};

/* Parses one SSLKEYLOGFILE-format line as BoringSSL's keylog callback passes it:
 * "<LABEL> <client_random: 64 hex> <secret: hex>", single spaces, optional trailing "\n" or
 * "\r\n", no NUL needed inside line_len. Borrows line.
 * Returns 1 with entry filled for CLIENT_TRAFFIC_SECRET_0 / SERVER_TRAFFIC_SECRET_0 (secret of
 * 32 or 48 bytes); 0 for a well-formed line with any other label (handshake secrets,
 * EXPORTER_SECRET, TLS 1.2's CLIENT_RANDOM ...), which the caller ignores; -EINVAL for a
 * malformed line (wrong field count or separators, bad hex, odd or wrong lengths, label not
 * [A-Z0-9_], longer than TLS_KEYLOG_LINE_MAX). entry is wiped unless 1 is returned. */
int tls_keylog_parse(const char *line, size_t line_len, struct tls_keylog_entry *entry);

/* The kernel's kTLS key blob (<linux/tls.h>) for setsockopt(SOL_TLS, TLS_TX / TLS_RX). */
union tls_ktls_info {
    struct tls_crypto_info info;
    struct tls12_crypto_info_aes_gcm_128 aes_gcm_128;
    struct tls12_crypto_info_aes_gcm_256 aes_gcm_256;
    struct tls12_crypto_info_chacha20_poly1305 chacha20_poly1305;
};

/* Fills info for TLS 1.3 with keys and the next record sequence number seq (big-endian in
 * rec_seq). AES-GCM: salt = iv[0..4), iv = iv[4..12) (the kernel XORs rec_seq into
 * salt||iv). ChaCha20-Poly1305: iv = all 12 bytes, no salt. Unused bytes are zeroed; the
 * caller wipes info after setsockopt (it holds the key).
 * Returns the optlen to pass to setsockopt (> 0), or -ENOTSUP (unsupported suite). */
int tls_ktls_info_fill(union tls_ktls_info *info, const struct tls_traffic_keys *keys,
                       uint64_t seq);

#endif /* TLS_KEYS_H */
