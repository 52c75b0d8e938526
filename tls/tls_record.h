/* tls_record.h - userspace TLS 1.3 record layer (RFC 8446 §5) with the traffic keys BoringSSL's
 * handshake produced: seals queued plaintext frames into records of up to 16 KiB (coalescing
 * small frames, splitting large ones), opens records in place from a received byte stream, and
 * parses the post-handshake messages and alerts that arrive inside them.
 * One struct tls_record_state per direction, embedded in the caller's connection; every call
 * runs on the shard that owns the connection and never allocates (EVP_AEAD_CTX is inline). */
#ifndef TLS_RECORD_H
#define TLS_RECORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <openssl/base.h>
#ifndef OPENSSL_IS_BORINGSSL
#error "tls/ needs BoringSSL (android-libboringssl-dev)"
#endif
#include <openssl/aead.h>

#include "tls_keys.h"
#include "tls_limits.h"

/* RFC 8446 §5.1 ContentType. */
enum tls_content_type {
    TLS_CONTENT_CHANGE_CIPHER_SPEC = 20,
    TLS_CONTENT_ALERT = 21,
    TLS_CONTENT_HANDSHAKE = 22,
    TLS_CONTENT_APPLICATION_DATA = 23,
};

/* RFC 8446 §4 HandshakeType values that may follow the handshake. */
enum tls_handshake_type {
    TLS_HANDSHAKE_NEW_SESSION_TICKET = 4,
    TLS_HANDSHAKE_KEY_UPDATE = 24,
};

/* RFC 8446 §6 AlertDescription values we name. */
enum tls_alert_description {
    TLS_ALERT_CLOSE_NOTIFY = 0,
    TLS_ALERT_UNEXPECTED_MESSAGE = 10,
    TLS_ALERT_BAD_RECORD_MAC = 20,
    TLS_ALERT_RECORD_OVERFLOW = 22,
    TLS_ALERT_DECODE_ERROR = 50,
    TLS_ALERT_INTERNAL_ERROR = 80,
    TLS_ALERT_USER_CANCELED = 90,
};

/* One direction of a connection's record protection: 672 bytes, caller-owned. */
struct tls_record_state {
    EVP_AEAD_CTX aead;      /* keyed AEAD, state inline (no heap) */
    uint64_t seq;           /* sequence number of the next record */
    uint8_t iv[TLS_IV_LEN]; /* static IV; nonce = iv XOR seq (RFC 8446 §5.3) */
    uint16_t suite;         /* enum tls_suite */
    uint8_t secret_len;     /* traffic secret, kept for KeyUpdate */
    uint8_t secret[TLS_SECRET_LEN_MAX];
};

/* Keys st from keys (borrowed, copied) with the next record sequence number seq (0 right after
 * the handshake, or SSL_get_read_sequence / SSL_get_write_sequence). st needs no prior init.
 * Returns 0, -ENOTSUP (unsupported suite) or -EINVAL (keys inconsistent); on error st is
 * wiped and safe to _deinit. */
int tls_record_state_init(struct tls_record_state *st, const struct tls_traffic_keys *keys,
                          uint64_t seq);

/* Wipes st (keys included). Safe on a wiped or failed state. */
void tls_record_state_deinit(struct tls_record_state *st);

/* KeyUpdate for this direction (RFC 8446 §4.6.3): next secret, new key and IV, seq = 0.
 * Receiving side: call after opening a KeyUpdate. Sending side: call right after sealing one.
 * Returns 0 or -EINVAL (st not keyed); on error st is wiped (the connection must close). */
int tls_record_state_update(struct tls_record_state *st);

/* True when this direction should be rekeyed before sealing more: AES-GCM after
 * TLS_AES_GCM_RECORDS_PER_KEY records (RFC 8446 §5.5); any suite near sequence wrap. */
bool tls_record_state_update_due(const struct tls_record_state *st);

/* Seals application data: the bytes of iov[0..iov_count) in order, into as many records as
 * fit in out[0..out_cap): each record carries min(remaining, TLS_RECORD_PLAINTEXT_MAX, room)
 * bytes, so many small frames coalesce into one record and one frame may span records.
 * Records are cut to fit out; give out_cap >= TLS_RECORD_SIZE_MAX to get only full records
 * until the input runs out. No padding; header 17 03 03 len. *consumed (always set) is how
 * many input bytes were sealed: the caller advances its queue by that much and calls again.
 * Input may not overlap out. Contiguous record plaintext is encrypted straight into out;
 * plaintext spread over several iovecs is gathered into out first, then sealed in place.
 * Returns bytes written to out (>= 0; 0 only for empty input), or with nothing written:
 * -ENOBUFS (out_cap < TLS_RECORD_OVERHEAD + 1), -EOVERFLOW (sequence exhausted: rekey or
 * close), -EIO (AEAD failure, not expected). Records already written are never taken back:
 * an error after the first record ends the call early with a positive return. */
ssize_t tls_record_seal_iov(struct tls_record_state *st, const struct iovec *iov, size_t iov_count,
                            size_t *consumed, uint8_t *out, size_t out_cap);

/* Seals one record of content type type (alert, handshake, application data) carrying
 * data[0..len) (borrowed). data may be out + TLS_RECORD_HEADER_LEN (plaintext already placed:
 * sealed in place) but may not otherwise overlap out. Returns the record size
 * (len + TLS_RECORD_OVERHEAD), or -EINVAL (type not 21/22/23; len 0 for alert or handshake,
 * which RFC 8446 §5.1 forbids), -EMSGSIZE (len > TLS_RECORD_PLAINTEXT_MAX), -ENOBUFS (out_cap too
 * small), -EOVERFLOW (sequence exhausted), -EIO (AEAD failure). */
ssize_t tls_record_seal(struct tls_record_state *st, uint8_t type, const uint8_t *data, size_t len,
                        uint8_t *out, size_t out_cap);

/* Seals a KeyUpdate handshake message (RFC 8446 §4.6.3) with update_requested or not. The
 * caller then calls tls_record_state_update(st) before sealing anything else.
 * Returns the record size or the errors of tls_record_seal. */
ssize_t tls_record_seal_key_update(struct tls_record_state *st, bool update_requested, uint8_t *out,
                                   size_t out_cap);

/* Seals an alert: close_notify and user_canceled at level warning (1), others fatal (2).
 * Returns the record size or the errors of tls_record_seal. */
ssize_t tls_record_seal_alert(struct tls_record_state *st, uint8_t description, uint8_t *out,
                              size_t out_cap);

/* What tls_record_open found. */
struct tls_record_in {
    uint8_t type;      /* inner content type: 21, 22 or 23 */
    uint8_t *data;     /* plaintext, inside the caller's buffer (decrypted in place) */
    size_t data_len;   /* plaintext length, padding and content type stripped */
    size_t record_len; /* bytes of the stream this record took: drop them after use */
    size_t need;       /* on -EAGAIN: bytes still missing before a record can be opened */
};

/* Opens the first record of buf[0..len) in place: the header is checked, the record is
 * decrypted where it lies (buf is modified), padding is stripped and rec filled.
 * Returns 0 with rec filled, or:
 *   -EAGAIN    incomplete record; rec->need bytes more are needed (for a partial header, the
 *              bytes to complete the header). Oversized lengths are refused before waiting.
 *   -EMSGSIZE  TLSCiphertext.length > 2^14 + 256, or inner plaintext > 2^14 (record_overflow)
 *   -EPROTO    outer type not application_data (23) or legacy version not 03 03; inner
 *              content type missing (all zeros), unknown, or an empty alert/handshake record
 *              (unexpected_message)
 *   -EBADMSG   authentication failed, or a body shorter than type + tag (bad_record_mac)
 *   -EOVERFLOW sequence number exhausted
 * st->seq advances only on success. On -EBADMSG after decryption was tried, the record's
 * bytes in buf are zeroed (BoringSSL never leaves unauthenticated plaintext behind).
 * On any error other than -EAGAIN the connection is dead. */
int tls_record_open(struct tls_record_state *st, uint8_t *buf, size_t len,
                    struct tls_record_in *rec);

/* What a handshake record carried after the handshake. */
struct tls_post_handshake {
    uint32_t tickets_count; /* NewSessionTicket messages seen (and ignored) */
    bool key_update;        /* a KeyUpdate ended the record: update the read state */
    bool update_requested;  /* ... and the peer asks for ours: seal a KeyUpdate(not requested)
                             * and update the write state before the next data record */
};

/* Scans the plaintext of one handshake record (rec.type 22) after the handshake: any number of
 * NewSessionTicket messages (ignored) and at most one KeyUpdate, which must end the record
 * (RFC 8446 §5.1: messages before a key change align with a record boundary).
 * Returns 0 with out filled, or -EPROTO (another message type, e.g. CertificateRequest we never
 * allowed; a KeyUpdate body other than one byte 0 or 1; a KeyUpdate not last; a message cut at
 * the record end, which this layer does not reassemble), -EMSGSIZE (a message body longer
 * than TLS_RECORD_PLAINTEXT_MAX). */
int tls_post_handshake_parse(const uint8_t *data, size_t len, struct tls_post_handshake *out);

/* Parses the plaintext of an alert record (rec.type 21): exactly level + description
 * (RFC 8446 §6: alerts are never fragmented or coalesced). *description is set whenever two
 * bytes were present, for logging.
 * Returns 0 for close_notify (the peer's stream ended cleanly), 1 for user_canceled (a closure
 * alert that a close_notify follows: keep reading), -ECONNRESET for any other alert (the peer
 * aborted; RFC 8446 §6: treat as fatal whatever its level), -EPROTO (length not 2). */
int tls_alert_parse(const uint8_t *data, size_t len, uint8_t *description);

#endif /* TLS_RECORD_H */
