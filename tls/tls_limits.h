/* tls_limits.h - every size the tls/ layer depends on, each with the RFC text it comes from.
 * Header-only constants; any thread. */
#ifndef TLS_LIMITS_H
#define TLS_LIMITS_H

#include <stdint.h>

/* RFC 8446 §5.1: ContentType (1) + legacy_record_version (2) + length (2). */
#define TLS_RECORD_HEADER_LEN 5

/* RFC 8446 §5.1: "The length MUST NOT exceed 2^14 bytes" (TLSPlaintext / TLSInnerPlaintext
 * content). Records we seal carry at most this much plaintext. */
#define TLS_RECORD_PLAINTEXT_MAX 16384

/* RFC 8446 §5.2: TLSCiphertext.length "MUST NOT exceed 2^14 + 256 bytes"; a longer one is a
 * record_overflow. This bounds how many bytes a peer can make us wait for. */
#define TLS_RECORD_CIPHERTEXT_MAX (16384 + 256)

/* All three TLS 1.3 AEADs (AES-128/256-GCM, ChaCha20-Poly1305) have 16-byte tags and 12-byte
 * nonces (RFC 8446 §5.3: iv_length = max(8, N_MIN) = 12). */
#define TLS_AEAD_TAG_LEN 16
#define TLS_IV_LEN       12

/* Bytes a sealed record adds to its plaintext: header + inner content type + tag (no padding). */
#define TLS_RECORD_OVERHEAD (TLS_RECORD_HEADER_LEN + 1 + TLS_AEAD_TAG_LEN)

/* Largest record we produce on the wire (full plaintext, no padding): 16406 bytes. */
#define TLS_RECORD_SIZE_MAX (TLS_RECORD_PLAINTEXT_MAX + TLS_RECORD_OVERHEAD)

/* Largest record a peer may send us (padding included): size a receive buffer at least this. */
#define TLS_RECORD_WIRE_MAX (TLS_RECORD_HEADER_LEN + TLS_RECORD_CIPHERTEXT_MAX)

/* Smallest valid protected record body: the inner content type byte plus the tag. */
#define TLS_RECORD_CIPHERTEXT_MIN (1 + TLS_AEAD_TAG_LEN)

/* AES-256-GCM and ChaCha20-Poly1305 keys are 32 bytes, AES-128-GCM 16. */
#define TLS_KEY_LEN_MAX 32

/* Traffic secrets are Hash.length: 32 (SHA-256) or 48 (SHA-384, TLS_AES_256_GCM_SHA384). */
#define TLS_SECRET_LEN_MAX 48

/* RFC 8446 §4.1.2: ClientHello.random is 32 bytes; the keylog line names it in hex. */
#define TLS_CLIENT_RANDOM_LEN 32

/* RFC 8446 §7.1: HkdfLabel.label is opaque<7..255> and starts with "tls13 " (6 bytes), so the
 * caller's label is at most 249; context is opaque<0..255>. */
#define TLS_HKDF_LABEL_PREFIX_LEN 6
#define TLS_HKDF_LABEL_MAX        (255 - TLS_HKDF_LABEL_PREFIX_LEN)
#define TLS_HKDF_CONTEXT_MAX      255
/* uint16 length + label<> + context<>: the largest HkdfLabel, built on the stack. */
#define TLS_HKDF_INFO_MAX (2 + 1 + 255 + 1 + TLS_HKDF_CONTEXT_MAX)

/* SSLKEYLOGFILE line: longest label BoringSSL writes ("CLIENT_HANDSHAKE_TRAFFIC_SECRET", 31)
 * + ' ' + 64 hex + ' ' + 96 hex = 193; anything longer is malformed. */
#define TLS_KEYLOG_LINE_MAX 256

/* RFC 8446 §4: handshake message header is msg_type (1) + uint24 length. */
#define TLS_HANDSHAKE_HEADER_LEN 4

/* RFC 8446 §5.5: AES-GCM may protect at most 2^24.5 full-size records per key; we ask for a
 * KeyUpdate well before, at 2^24 records. ChaCha20-Poly1305's limit exceeds 2^64, so the
 * sequence number wraps first (§5.5). */
#define TLS_AES_GCM_RECORDS_PER_KEY (UINT64_C(1) << 24)

/* Any suite: ask for a KeyUpdate once half the 64-bit sequence space is used, far before the
 * wrap RFC 8446 §5.3 forbids (we refuse to use sequence number 2^64 - 1 at all). */
#define TLS_RECORD_SEQ_UPDATE_AT (UINT64_C(1) << 63)

_Static_assert(TLS_RECORD_PLAINTEXT_MAX + TLS_RECORD_CIPHERTEXT_MIN <= TLS_RECORD_CIPHERTEXT_MAX,
               "a full record we seal must be one our peer (and we) accept");
_Static_assert(TLS_RECORD_SIZE_MAX <= TLS_RECORD_WIRE_MAX, "sealed records fit the receive bound");
_Static_assert(TLS_AES_GCM_RECORDS_PER_KEY < TLS_RECORD_SEQ_UPDATE_AT, "AES-GCM limit comes first");
_Static_assert(TLS_RECORD_CIPHERTEXT_MAX <= UINT16_MAX, "record length is a uint16");
_Static_assert(TLS_SECRET_LEN_MAX <= 255 && TLS_KEY_LEN_MAX <= 255, "lengths fit a uint8_t");
_Static_assert(TLS_KEYLOG_LINE_MAX >=
                   31 + 1 + 2 * TLS_CLIENT_RANDOM_LEN + 1 + 2 * TLS_SECRET_LEN_MAX,
               "the longest valid keylog line fits");

#endif /* TLS_LIMITS_H */
