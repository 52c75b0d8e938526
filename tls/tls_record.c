/* tls_record.c - userspace TLS 1.3 records (RFC 8446 §5): seal queued frames into coalesced
 * records, open records in place, parse post-handshake messages and alerts.
 * Runs on the shard that owns the connection; owns nothing beyond the caller's
 * struct tls_record_state (AEAD context inline). The seal and open paths never allocate: the
 * nonce, header and content-type byte live on the stack, ciphertext goes to caller buffers. */
#include "tls_record.h"

#include <errno.h>
#include <string.h>

#include <openssl/digest.h>
#include <openssl/err.h>
#include <openssl/mem.h>

#include <hd/hd_base.h>

/* RFC 8446 §5.1: legacy_record_version of every protected record. */
#define TLS_LEGACY_VERSION_MAJOR 3
#define TLS_LEGACY_VERSION_MINOR 3

/* RFC 8446 §6: AlertLevel. */
#define TLS_ALERT_LEVEL_WARNING 1
#define TLS_ALERT_LEVEL_FATAL   2

/* DESIGN.md allows 4 KiB per idle TLS connection: both directions' states take 1.3 KiB. */
_Static_assert(2 * sizeof(struct tls_record_state) <= 1536, "record keys stay small");

/* A KeyUpdate message: header + one byte request_update (RFC 8446 §4.6.3). */
#define TLS_KEY_UPDATE_MSG_LEN (TLS_HANDSHAKE_HEADER_LEN + 1)

int tls_record_state_init(struct tls_record_state *st, const struct tls_traffic_keys *keys,
                          uint64_t seq)
{
    memset(st, 0, sizeof(*st)); /* a zeroed EVP_AEAD_CTX is safe to clean up */
    const EVP_AEAD *aead = tls_suite_aead(keys->suite);
    const EVP_MD *md = tls_suite_md(keys->suite);
    if (aead == NULL || md == NULL)
        return -ENOTSUP;
    if (keys->key_len != EVP_AEAD_key_length(aead) || keys->secret_len != EVP_MD_size(md))
        return -EINVAL;
    HD_ASSERT(EVP_AEAD_nonce_length(aead) == TLS_IV_LEN);
    if (!EVP_AEAD_CTX_init(&st->aead, aead, keys->key, keys->key_len, TLS_AEAD_TAG_LEN, NULL)) {
        ERR_clear_error();
        tls_record_state_deinit(st);
        return -EINVAL;
    }
    st->seq = seq;
    memcpy(st->iv, keys->iv, TLS_IV_LEN);
    st->suite = keys->suite;
    st->secret_len = keys->secret_len;
    memcpy(st->secret, keys->secret, keys->secret_len);
    return 0;
}

void tls_record_state_deinit(struct tls_record_state *st)
{
    EVP_AEAD_CTX_cleanup(&st->aead);
    OPENSSL_cleanse(st, sizeof(*st));
}

int tls_record_state_update(struct tls_record_state *st)
{
    struct tls_traffic_keys keys;
    int rc = tls_traffic_keys_init(&keys, st->suite, st->secret, st->secret_len);
    if (rc == 0)
        rc = tls_traffic_keys_update(&keys);
    tls_record_state_deinit(st);
    if (rc == 0)
        rc = tls_record_state_init(st, &keys, 0);
    tls_traffic_keys_deinit(&keys);
    return rc < 0 ? -EINVAL : 0;
}

bool tls_record_state_update_due(const struct tls_record_state *st)
{
    if (st->seq >= TLS_RECORD_SEQ_UPDATE_AT)
        return true;
    return st->suite != TLS_SUITE_CHACHA20_POLY1305_SHA256 &&
           st->seq >= TLS_AES_GCM_RECORDS_PER_KEY;
}

/* RFC 8446 §5.3: the 64-bit sequence number, big-endian and left-padded to iv_length, XORed
 * into the static IV. */
static void tls_record_nonce(const struct tls_record_state *st, uint8_t nonce[TLS_IV_LEN])
{
    memcpy(nonce, st->iv, TLS_IV_LEN);
    uint64_t seq = st->seq;
    for (int i = TLS_IV_LEN - 1; i >= TLS_IV_LEN - 8; i--) {
        nonce[i] ^= (uint8_t)seq;
        seq >>= 8;
    }
}

/* Seals one record at out: header, then n plaintext bytes taken from src (or already at
 * out + TLS_RECORD_HEADER_LEN when src is NULL, sealed in place), then the encrypted content
 * type and the tag. out must hold n + TLS_RECORD_OVERHEAD bytes. Returns 0, -EOVERFLOW, -EIO. */
static int tls_record_seal_one(struct tls_record_state *st, uint8_t type, const uint8_t *src,
                               size_t n, uint8_t *out)
{
    /* Sequence 2^64 - 1 is never used, so seq + 1 cannot wrap (RFC 8446 §5.3). */
    if (hd_unlikely(st->seq == UINT64_MAX))
        return -EOVERFLOW;
    HD_ASSERT(n <= TLS_RECORD_PLAINTEXT_MAX);
    size_t body = n + 1 + TLS_AEAD_TAG_LEN;
    out[0] = TLS_CONTENT_APPLICATION_DATA; /* opaque_type: every protected record says 23 */
    out[1] = TLS_LEGACY_VERSION_MAJOR;
    out[2] = TLS_LEGACY_VERSION_MINOR;
    out[3] = (uint8_t)(body >> 8);
    out[4] = (uint8_t)body;

    uint8_t nonce[TLS_IV_LEN];
    tls_record_nonce(st, nonce);
    uint8_t *payload = out + TLS_RECORD_HEADER_LEN;
    size_t tag_len = 0;
    /* The content type byte is extra_in: it is encrypted after the plaintext and lands, with
     * the tag, right behind it, so the record is contiguous without copying the plaintext. */
    int ok = EVP_AEAD_CTX_seal_scatter(&st->aead, payload, payload + n, &tag_len,
                                       1 + TLS_AEAD_TAG_LEN, nonce, TLS_IV_LEN, src ? src : payload,
                                       n, &type, 1, out, TLS_RECORD_HEADER_LEN);
    if (hd_unlikely(!ok || tag_len != 1 + TLS_AEAD_TAG_LEN)) {
        ERR_clear_error();
        return -EIO;
    }
    st->seq++;
    return 0;
}

/* A position in an iovec list. */
struct tls_iov_cursor {
    size_t index;
    size_t offset;
};

/* Moves past exhausted (or empty) iovecs. */
static void tls_iov_skip_empty(const struct iovec *iov, size_t count, struct tls_iov_cursor *cur)
{
    while (cur->index < count && cur->offset == iov[cur->index].iov_len) {
        cur->index++;
        cur->offset = 0;
    }
}

/* Copies n bytes from the cursor into dst and advances it; the bytes are known to exist. */
static void tls_iov_gather(const struct iovec *iov, size_t count, struct tls_iov_cursor *cur,
                           uint8_t *dst, size_t n)
{
    while (n > 0) {
        tls_iov_skip_empty(iov, count, cur);
        HD_ASSERT(cur->index < count);
        size_t avail = iov[cur->index].iov_len - cur->offset;
        size_t take = avail < n ? avail : n;
        memcpy(dst, (const uint8_t *)iov[cur->index].iov_base + cur->offset, take);
        dst += take;
        n -= take;
        cur->offset += take;
    }
}

ssize_t tls_record_seal_iov(struct tls_record_state *st, const struct iovec *iov, size_t iov_count,
                            size_t *consumed, uint8_t *out, size_t out_cap)
{
    *consumed = 0;
    size_t total = 0;
    for (size_t i = 0; i < iov_count; i++)
        total += iov[i].iov_len;
    if (total == 0)
        return 0;
    if (out_cap < TLS_RECORD_OVERHEAD + 1)
        return -ENOBUFS;

    struct tls_iov_cursor cur = {0, 0};
    size_t done = 0, written = 0;
    /* Each pass seals one record of >= 1 byte: at most total passes, in practice
     * out_cap / TLS_RECORD_SIZE_MAX + 1. */
    while (done < total && out_cap - written >= TLS_RECORD_OVERHEAD + 1) {
        size_t n = total - done;
        size_t room = out_cap - written - TLS_RECORD_OVERHEAD;
        if (n > TLS_RECORD_PLAINTEXT_MAX)
            n = TLS_RECORD_PLAINTEXT_MAX;
        if (n > room)
            n = room;

        uint8_t *rec = out + written;
        struct tls_iov_cursor next = cur;
        tls_iov_skip_empty(iov, iov_count, &next);
        const uint8_t *src = NULL;
        if (iov[next.index].iov_len - next.offset >= n) {
            src = (const uint8_t *)iov[next.index].iov_base + next.offset; /* contiguous */
            next.offset += n;
        } else {
            tls_iov_gather(iov, iov_count, &next, rec + TLS_RECORD_HEADER_LEN, n);
        }
        int rc = tls_record_seal_one(st, TLS_CONTENT_APPLICATION_DATA, src, n, rec);
        if (rc < 0) {
            if (written == 0)
                return rc;
            break;
        }
        cur = next;
        done += n;
        written += n + TLS_RECORD_OVERHEAD;
    }
    *consumed = done;
    return (ssize_t)written;
}

ssize_t tls_record_seal(struct tls_record_state *st, uint8_t type, const uint8_t *data, size_t len,
                        uint8_t *out, size_t out_cap)
{
    if (type != TLS_CONTENT_ALERT && type != TLS_CONTENT_HANDSHAKE &&
        type != TLS_CONTENT_APPLICATION_DATA)
        return -EINVAL;
    if (len == 0 && type != TLS_CONTENT_APPLICATION_DATA)
        return -EINVAL;
    if (len > TLS_RECORD_PLAINTEXT_MAX)
        return -EMSGSIZE;
    if (out_cap < len + TLS_RECORD_OVERHEAD)
        return -ENOBUFS;
    const uint8_t *src = data == out + TLS_RECORD_HEADER_LEN ? NULL : data;
    int rc = tls_record_seal_one(st, type, src, len, out);
    return rc < 0 ? rc : (ssize_t)(len + TLS_RECORD_OVERHEAD);
}

ssize_t tls_record_seal_key_update(struct tls_record_state *st, bool update_requested, uint8_t *out,
                                   size_t out_cap)
{
    const uint8_t msg[TLS_KEY_UPDATE_MSG_LEN] = {TLS_HANDSHAKE_KEY_UPDATE, 0, 0, 1,
                                                 update_requested ? 1 : 0};
    return tls_record_seal(st, TLS_CONTENT_HANDSHAKE, msg, sizeof(msg), out, out_cap);
}

ssize_t tls_record_seal_alert(struct tls_record_state *st, uint8_t description, uint8_t *out,
                              size_t out_cap)
{
    bool closure = description == TLS_ALERT_CLOSE_NOTIFY || description == TLS_ALERT_USER_CANCELED;
    const uint8_t msg[2] = {closure ? TLS_ALERT_LEVEL_WARNING : TLS_ALERT_LEVEL_FATAL, description};
    return tls_record_seal(st, TLS_CONTENT_ALERT, msg, sizeof(msg), out, out_cap);
}

/* Header checks: the record's body length, or -EPROTO / -EMSGSIZE / -EBADMSG. */
static int tls_record_check_header(const uint8_t *hdr, size_t *body)
{
    if (hdr[0] != TLS_CONTENT_APPLICATION_DATA)
        return -EPROTO; /* CCS is only tolerated during the handshake (RFC 8446 §5) */
    if (hdr[1] != TLS_LEGACY_VERSION_MAJOR || hdr[2] != TLS_LEGACY_VERSION_MINOR)
        return -EPROTO;
    *body = (size_t)hdr[3] << 8 | hdr[4];
    if (*body > TLS_RECORD_CIPHERTEXT_MAX)
        return -EMSGSIZE;
    if (*body < TLS_RECORD_CIPHERTEXT_MIN)
        return -EBADMSG;
    return 0;
}

int tls_record_open(struct tls_record_state *st, uint8_t *buf, size_t len,
                    struct tls_record_in *rec)
{
    memset(rec, 0, sizeof(*rec));
    if (len < TLS_RECORD_HEADER_LEN) {
        rec->need = TLS_RECORD_HEADER_LEN - len;
        return -EAGAIN;
    }
    size_t body;
    int rc = tls_record_check_header(buf, &body);
    if (rc < 0)
        return rc;
    if (len - TLS_RECORD_HEADER_LEN < body) {
        rec->need = TLS_RECORD_HEADER_LEN + body - len;
        return -EAGAIN;
    }
    if (hd_unlikely(st->seq == UINT64_MAX))
        return -EOVERFLOW;

    uint8_t nonce[TLS_IV_LEN];
    tls_record_nonce(st, nonce);
    uint8_t *p = buf + TLS_RECORD_HEADER_LEN;
    size_t ct_len = body - TLS_AEAD_TAG_LEN;
    if (!EVP_AEAD_CTX_open_gather(&st->aead, p, nonce, TLS_IV_LEN, p, ct_len, p + ct_len,
                                  TLS_AEAD_TAG_LEN, buf, TLS_RECORD_HEADER_LEN)) {
        ERR_clear_error(); /* keep BoringSSL's thread error queue clean for SSL_get_error */
        return -EBADMSG;
    }

    /* TLSInnerPlaintext: content || type || zeros; the last non-zero byte is the type. The scan
     * is bounded by the record (<= 2^14 + 255 bytes). */
    size_t n = ct_len;
    while (n > 0 && p[n - 1] == 0)
        n--;
    if (n == 0)
        return -EPROTO;
    uint8_t type = p[--n];
    if (n > TLS_RECORD_PLAINTEXT_MAX)
        return -EMSGSIZE;
    if (type != TLS_CONTENT_ALERT && type != TLS_CONTENT_HANDSHAKE &&
        type != TLS_CONTENT_APPLICATION_DATA)
        return -EPROTO;
    if (n == 0 && type != TLS_CONTENT_APPLICATION_DATA)
        return -EPROTO;

    st->seq++;
    rec->type = type;
    rec->data = p;
    rec->data_len = n;
    rec->record_len = TLS_RECORD_HEADER_LEN + body;
    return 0;
}

int tls_post_handshake_parse(const uint8_t *data, size_t len, struct tls_post_handshake *out)
{
    memset(out, 0, sizeof(*out));
    if (len == 0)
        return -EPROTO;
    size_t off = 0;
    /* Each pass consumes >= TLS_HANDSHAKE_HEADER_LEN bytes: bounded by len. */
    while (off < len) {
        if (out->key_update)
            return -EPROTO; /* KeyUpdate must end its record */
        if (len - off < TLS_HANDSHAKE_HEADER_LEN)
            return -EPROTO;
        const uint8_t *m = data + off;
        uint32_t body_len = (uint32_t)m[1] << 16 | (uint32_t)m[2] << 8 | m[3];
        if (body_len > TLS_RECORD_PLAINTEXT_MAX)
            return -EMSGSIZE;
        if (len - off - TLS_HANDSHAKE_HEADER_LEN < body_len)
            return -EPROTO; /* fragmented across records: not reassembled here */
        const uint8_t *body = m + TLS_HANDSHAKE_HEADER_LEN;
        switch (m[0]) {
        case TLS_HANDSHAKE_NEW_SESSION_TICKET:
            out->tickets_count++;
            break;
        case TLS_HANDSHAKE_KEY_UPDATE:
            if (body_len != 1 || body[0] > 1)
                return -EPROTO;
            out->key_update = true;
            out->update_requested = body[0] == 1;
            break;
        default:
            return -EPROTO;
        }
        off += TLS_HANDSHAKE_HEADER_LEN + body_len;
    }
    return 0;
}

int tls_alert_parse(const uint8_t *data, size_t len, uint8_t *description)
{
    if (len != 2)
        return -EPROTO;
    *description = data[1];
    if (data[0] != TLS_ALERT_LEVEL_WARNING && data[0] != TLS_ALERT_LEVEL_FATAL)
        return -EPROTO;
    if (data[1] == TLS_ALERT_CLOSE_NOTIFY)
        return 0;
    if (data[1] == TLS_ALERT_USER_CANCELED)
        return 1;
    return -ECONNRESET;
}
