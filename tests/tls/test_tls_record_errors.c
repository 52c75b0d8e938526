/* test_tls_record_errors.c - what tls/tls_record.c refuses and why: corrupted tags, truncated
 * and oversized records, wrong outer type/version, bad inner plaintext (crafted with the raw
 * AEAD), sequence exhaustion, KeyUpdate state changes, post-handshake message and alert
 * parsing. Part of the test_tls_record binary. */
#include <errno.h>
#include <string.h>

#include <criterion/criterion.h>
#include <openssl/aead.h>

#include "tls_record.h"
#include "tls_test_util.h"

TestSuite(tls_record_errors, .init = tt_check_boringssl);

static uint8_t buf[TLS_RECORD_WIRE_MAX + 64];

/* Seals an arbitrary TLSInnerPlaintext (content || type || padding) with tx's raw AEAD, the
 * way a peer could; returns the record size. */
static size_t seal_raw(struct tls_record_state *tx, const uint8_t *inner, size_t inner_len,
                       uint8_t *out)
{
    size_t body = inner_len + TLS_AEAD_TAG_LEN;
    out[0] = 23;
    out[1] = 3;
    out[2] = 3;
    out[3] = (uint8_t)(body >> 8);
    out[4] = (uint8_t)body;
    uint8_t nonce[TLS_IV_LEN];
    memcpy(nonce, tx->iv, TLS_IV_LEN);
    for (int i = 0; i < 8; i++)
        nonce[TLS_IV_LEN - 1 - i] ^= (uint8_t)(tx->seq >> (8 * i));
    size_t out_len = 0;
    cr_assert(EVP_AEAD_CTX_seal(&tx->aead, out + 5, &out_len, body, nonce, TLS_IV_LEN, inner,
                                inner_len, out, 5));
    cr_assert_eq(out_len, body);
    tx->seq++;
    return 5 + body;
}

static struct tls_record_state tx, rx;

static void pair(void)
{
    tt_state_pair(TLS_SUITE_AES_128_GCM_SHA256, 0x11, 0, &tx, &rx);
}

Test(tls_record_errors, corrupted_tag_and_ciphertext)
{
    pair();
    uint8_t msg[300];
    memset(msg, 0xab, sizeof(msg));
    struct tls_record_in rec;
    ssize_t n = tls_record_seal(&tx, 23, msg, sizeof(msg), buf, sizeof(buf));
    cr_assert_eq(n, 322);
    uint8_t copy[322];
    static const size_t flips[] = {321, 321 - 15, 5, 150, 305 /* the content type byte */};
    for (size_t i = 0; i < sizeof(flips) / sizeof(flips[0]); i++) {
        memcpy(copy, buf, 322);
        copy[flips[i]] ^= 0x01;
        cr_assert_eq(tls_record_open(&rx, copy, 322, &rec), -EBADMSG, "flip at %zu", flips[i]);
        cr_assert_eq(rx.seq, 0, "a failed open does not advance the sequence");
    }
    /* Header bytes are the AAD: a different length is a different record. Shorten the record
     * by one byte and declare it so: authentication fails. */
    memcpy(copy, buf, 322);
    copy[4]--;
    cr_assert_eq(tls_record_open(&rx, copy, 321, &rec), -EBADMSG);
    /* A record opened with the wrong sequence number fails too (replay, reordering); a failed
     * open zeroes the bytes it tried, so each attempt gets a fresh copy. */
    memcpy(copy, buf, 322);
    rx.seq = 1;
    cr_assert_eq(tls_record_open(&rx, copy, 322, &rec), -EBADMSG);
    static const uint8_t zero[300];
    cr_assert_arr_eq(copy + 5, zero, 300, "failed open leaves no plaintext behind");
    rx.seq = 0;
    memcpy(copy, buf, 322);
    cr_assert_eq(tls_record_open(&rx, copy, 322, &rec), 0);
    cr_assert_arr_eq(rec.data, msg, 300);
    /* Replaying it now fails. */
    memcpy(copy, buf, 322);
    cr_assert_eq(tls_record_open(&rx, copy, 322, &rec), -EBADMSG);
}

Test(tls_record_errors, truncated_records_need_more)
{
    pair();
    uint8_t msg[1000] = {0};
    cr_assert_eq(tls_record_seal(&tx, 23, msg, sizeof(msg), buf, sizeof(buf)), 1022);
    struct tls_record_in rec;
    for (size_t len = 0; len < 1022; len += (len < 8 ? 1 : 97)) {
        cr_assert_eq(tls_record_open(&rx, buf, len, &rec), -EAGAIN, "len %zu", len);
        size_t want = len < 5 ? 5 - len : 1022 - len;
        cr_assert_eq(rec.need, want, "len %zu", len);
    }
    cr_assert_eq(rx.seq, 0);
    /* Extra bytes of the next record do not matter. */
    cr_assert_eq(tls_record_open(&rx, buf, sizeof(buf), &rec), 0);
    cr_assert_eq(rec.record_len, 1022);
    cr_assert_eq(rec.need, 0);
}

Test(tls_record_errors, oversized_and_undersized_lengths)
{
    pair();
    struct tls_record_in rec;
    uint8_t hdr[5] = {23, 3, 3, 0, 0};
    /* 2^14 + 256 + 1: refused from the header alone, before waiting for the body. */
    size_t over = TLS_RECORD_CIPHERTEXT_MAX + 1;
    hdr[3] = (uint8_t)(over >> 8);
    hdr[4] = (uint8_t)over;
    cr_assert_eq(tls_record_open(&rx, hdr, 5, &rec), -EMSGSIZE);
    hdr[3] = hdr[4] = 0xff;
    cr_assert_eq(tls_record_open(&rx, hdr, 5, &rec), -EMSGSIZE);
    /* Exactly the maximum is accepted (we wait for it). */
    hdr[3] = (uint8_t)(TLS_RECORD_CIPHERTEXT_MAX >> 8);
    hdr[4] = (uint8_t)TLS_RECORD_CIPHERTEXT_MAX;
    cr_assert_eq(tls_record_open(&rx, hdr, 5, &rec), -EAGAIN);
    cr_assert_eq(rec.need, TLS_RECORD_CIPHERTEXT_MAX);
    /* Too short to hold a content type and a tag. */
    for (uint8_t len = 0; len < TLS_RECORD_CIPHERTEXT_MIN; len++) {
        uint8_t tiny[5 + TLS_RECORD_CIPHERTEXT_MIN] = {23, 3, 3, 0, len};
        cr_assert_eq(tls_record_open(&rx, tiny, sizeof(tiny), &rec), -EBADMSG, "len %u", len);
    }
}

Test(tls_record_errors, wrong_outer_type_and_version)
{
    pair();
    uint8_t msg[10] = {0};
    cr_assert_eq(tls_record_seal(&tx, 23, msg, sizeof(msg), buf, sizeof(buf)), 32);
    struct tls_record_in rec;
    uint8_t copy[32];
    static const uint8_t types[] = {20, 21, 22, 24, 0};
    for (size_t i = 0; i < sizeof(types); i++) {
        memcpy(copy, buf, 32);
        copy[0] = types[i];
        cr_assert_eq(tls_record_open(&rx, copy, 32, &rec), -EPROTO, "type %u", types[i]);
    }
    static const uint8_t versions[][2] = {{3, 1}, {3, 4}, {2, 3}, {0, 0}};
    for (size_t i = 0; i < 4; i++) {
        memcpy(copy, buf, 32);
        copy[1] = versions[i][0];
        copy[2] = versions[i][1];
        cr_assert_eq(tls_record_open(&rx, copy, 32, &rec), -EPROTO);
    }
    /* A plaintext ChangeCipherSpec (14 03 03 00 01 01) is no longer allowed. */
    uint8_t ccs[6] = {20, 3, 3, 0, 1, 1};
    cr_assert_eq(tls_record_open(&rx, ccs, 6, &rec), -EPROTO);
    cr_assert_eq(tls_record_open(&rx, buf, 32, &rec), 0, "state untouched by the refusals");
}

Test(tls_record_errors, inner_plaintext_padding_and_type)
{
    pair();
    static uint8_t inner[TLS_RECORD_CIPHERTEXT_MAX];
    struct tls_record_in rec;

    /* "hi" || 23 || 100 zeros: padding stripped. */
    memset(inner, 0, sizeof(inner));
    inner[0] = 'h';
    inner[1] = 'i';
    inner[2] = 23;
    size_t n = seal_raw(&tx, inner, 103, buf);
    cr_assert_eq(tls_record_open(&rx, buf, n, &rec), 0);
    cr_assert_eq(rec.type, 23);
    cr_assert_eq(rec.data_len, 2);
    cr_assert_eq(memcmp(rec.data, "hi", 2), 0);

    /* The largest legal record: 2^14 content + type + 239 zeros = 2^14 + 256 with the tag. */
    memset(inner, 'x', TLS_RECORD_PLAINTEXT_MAX);
    inner[TLS_RECORD_PLAINTEXT_MAX] = 23;
    memset(inner + TLS_RECORD_PLAINTEXT_MAX + 1, 0, 239);
    n = seal_raw(&tx, inner, TLS_RECORD_PLAINTEXT_MAX + 1 + 239, buf);
    cr_assert_eq(n, TLS_RECORD_WIRE_MAX);
    cr_assert_eq(tls_record_open(&rx, buf, n, &rec), 0);
    cr_assert_eq(rec.data_len, TLS_RECORD_PLAINTEXT_MAX);

    /* 2^14 + 1 bytes of content: record_overflow. */
    memset(inner, 'x', TLS_RECORD_PLAINTEXT_MAX + 1);
    inner[TLS_RECORD_PLAINTEXT_MAX + 1] = 23;
    n = seal_raw(&tx, inner, TLS_RECORD_PLAINTEXT_MAX + 2, buf);
    cr_assert_eq(tls_record_open(&rx, buf, n, &rec), -EMSGSIZE);
    rx.seq = tx.seq;

    /* All zeros: no content type. */
    memset(inner, 0, 50);
    n = seal_raw(&tx, inner, 50, buf);
    cr_assert_eq(tls_record_open(&rx, buf, n, &rec), -EPROTO);
    rx.seq = tx.seq;

    /* Unknown inner types, and an inner ChangeCipherSpec. */
    static const uint8_t bad_types[] = {1, 20, 24, 99, 255};
    for (size_t i = 0; i < sizeof(bad_types); i++) {
        inner[0] = 'a';
        inner[1] = bad_types[i];
        n = seal_raw(&tx, inner, 2, buf);
        cr_assert_eq(tls_record_open(&rx, buf, n, &rec), -EPROTO, "type %u", bad_types[i]);
        rx.seq = tx.seq;
    }

    /* Empty alert and handshake records are forbidden (RFC 8446 §5.1); empty data is fine. */
    static const uint8_t empty_types[] = {21, 22};
    for (size_t i = 0; i < 2; i++) {
        inner[0] = empty_types[i];
        inner[1] = 0;
        n = seal_raw(&tx, inner, 2, buf);
        cr_assert_eq(tls_record_open(&rx, buf, n, &rec), -EPROTO);
        rx.seq = tx.seq;
    }
    inner[0] = 23;
    n = seal_raw(&tx, inner, 1, buf);
    cr_assert_eq(tls_record_open(&rx, buf, n, &rec), 0);
    cr_assert_eq(rec.data_len, 0);
}

Test(tls_record_errors, seal_argument_errors)
{
    pair();
    uint8_t msg[TLS_RECORD_PLAINTEXT_MAX + 1] = {0};
    cr_assert_eq(tls_record_seal(&tx, 20, msg, 1, buf, sizeof(buf)), -EINVAL);
    cr_assert_eq(tls_record_seal(&tx, 24, msg, 1, buf, sizeof(buf)), -EINVAL);
    cr_assert_eq(tls_record_seal(&tx, 21, msg, 0, buf, sizeof(buf)), -EINVAL);
    cr_assert_eq(tls_record_seal(&tx, 22, msg, 0, buf, sizeof(buf)), -EINVAL);
    cr_assert_eq(tls_record_seal(&tx, 23, msg, sizeof(msg), buf, sizeof(buf)), -EMSGSIZE);
    cr_assert_eq(tls_record_seal(&tx, 23, msg, 100, buf, 100 + TLS_RECORD_OVERHEAD - 1), -ENOBUFS);
    cr_assert_eq(tls_record_seal_alert(&tx, 0, buf, 23), -ENOBUFS);
    cr_assert_eq(tls_record_seal_key_update(&tx, false, buf, 26), -ENOBUFS);
    cr_assert_eq(tx.seq, 0, "refusals use no sequence number");
    cr_assert_eq(tls_record_seal(&tx, 23, msg, TLS_RECORD_PLAINTEXT_MAX, buf, sizeof(buf)),
                 TLS_RECORD_SIZE_MAX);
}

Test(tls_record_errors, sequence_exhaustion)
{
    tt_state_pair(TLS_SUITE_CHACHA20_POLY1305_SHA256, 0x22, UINT64_MAX - 2, &tx, &rx);
    static uint8_t msg[40000];
    static uint8_t out[3 * TLS_RECORD_SIZE_MAX];
    struct iovec iov = {msg, sizeof(msg)};
    size_t consumed;
    struct tls_record_in rec;
    /* Two sequence numbers are left (2^64 - 3 and 2^64 - 2): the third record is refused, the
     * call ends early with what was sealed. */
    ssize_t n = tls_record_seal_iov(&tx, &iov, 1, &consumed, out, sizeof(out));
    cr_assert_eq(consumed, 2 * TLS_RECORD_PLAINTEXT_MAX);
    cr_assert_eq(n, (ssize_t)(consumed + 2 * TLS_RECORD_OVERHEAD));
    cr_assert_eq(tx.seq, UINT64_MAX);
    cr_assert_eq(tls_record_seal_iov(&tx, &iov, 1, &consumed, buf, sizeof(buf)), -EOVERFLOW);
    cr_assert_eq(consumed, 0);
    cr_assert_eq(tls_record_seal(&tx, 21, msg, 2, buf, sizeof(buf)), -EOVERFLOW);
    cr_assert(tls_record_state_update_due(&tx));

    /* The receiver opens the two and then refuses to go on. */
    cr_assert_eq(tls_record_open(&rx, out, (size_t)n, &rec), 0);
    cr_assert_eq(tls_record_open(&rx, out + rec.record_len, (size_t)n - rec.record_len, &rec), 0);
    cr_assert_eq(rx.seq, UINT64_MAX);
    cr_assert_eq(tls_record_open(&rx, out, (size_t)n, &rec), -EOVERFLOW);
}

Test(tls_record_errors, update_due_thresholds)
{
    struct tls_record_state st;
    tt_state_pair(TLS_SUITE_AES_128_GCM_SHA256, 1, TLS_AES_GCM_RECORDS_PER_KEY - 1, &st, &rx);
    cr_assert(!tls_record_state_update_due(&st));
    st.seq++;
    cr_assert(tls_record_state_update_due(&st));
    tt_state_pair(TLS_SUITE_CHACHA20_POLY1305_SHA256, 1, TLS_AES_GCM_RECORDS_PER_KEY, &st, &rx);
    cr_assert(!tls_record_state_update_due(&st), "ChaCha20 has no per-key record limit");
    st.seq = TLS_RECORD_SEQ_UPDATE_AT;
    cr_assert(tls_record_state_update_due(&st));
}

Test(tls_record_errors, key_update_state)
{
    tt_state_pair(TLS_SUITE_AES_256_GCM_SHA384, 0x33, 41, &tx, &rx);
    struct tls_record_in rec;
    ssize_t n = tls_record_seal_key_update(&tx, true, buf, sizeof(buf));
    cr_assert_eq(n, 5 + TLS_RECORD_OVERHEAD);
    cr_assert_eq(tls_record_state_update(&tx), 0);
    cr_assert_eq(tx.seq, 0);
    uint8_t msg[] = "after the update";
    ssize_t m = tls_record_seal(&tx, 23, msg, sizeof(msg), buf + n, sizeof(buf) - (size_t)n);
    cr_assert_gt(m, 0);

    cr_assert_eq(tls_record_open(&rx, buf, (size_t)(n + m), &rec), 0);
    cr_assert_eq(rec.type, TLS_CONTENT_HANDSHAKE);
    struct tls_post_handshake ph;
    cr_assert_eq(tls_post_handshake_parse(rec.data, rec.data_len, &ph), 0);
    cr_assert(ph.key_update && ph.update_requested);
    cr_assert_eq(ph.tickets_count, 0);
    /* Not updating the read side: the next record cannot be opened. */
    struct tls_record_state stale, unused;
    tt_state_pair(TLS_SUITE_AES_256_GCM_SHA384, 0x33, rx.seq, &stale, &unused);
    uint8_t copy[64];
    memcpy(copy, buf + n, (size_t)m);
    cr_assert_eq(tls_record_open(&stale, copy, (size_t)m, &rec), -EBADMSG);
    cr_assert_eq(tls_record_state_update(&rx), 0);
    cr_assert_eq(tls_record_open(&rx, buf + n, (size_t)m, &rec), 0);
    cr_assert_arr_eq(rec.data, msg, sizeof(msg));

    /* update_requested = false encodes 0. */
    n = tls_record_seal_key_update(&tx, false, buf, sizeof(buf));
    cr_assert_eq(tls_record_open(&rx, buf, (size_t)n, &rec), 0);
    cr_assert_eq(tls_post_handshake_parse(rec.data, rec.data_len, &ph), 0);
    cr_assert(ph.key_update && !ph.update_requested);

    /* A wiped state cannot be updated. */
    tls_record_state_deinit(&tx);
    cr_assert_eq(tls_record_state_update(&tx), -EINVAL);
}

Test(tls_record_errors, state_init_errors)
{
    struct tls_traffic_keys keys;
    uint8_t secret[32] = {7};
    cr_assert_eq(tls_traffic_keys_init(&keys, TLS_SUITE_AES_128_GCM_SHA256, secret, 32), 0);
    struct tls_traffic_keys bad = keys;
    bad.suite = 0x1304;
    cr_assert_eq(tls_record_state_init(&tx, &bad, 0), -ENOTSUP);
    bad = keys;
    bad.key_len = 32;
    cr_assert_eq(tls_record_state_init(&tx, &bad, 0), -EINVAL);
    bad = keys;
    bad.secret_len = 48;
    cr_assert_eq(tls_record_state_init(&tx, &bad, 0), -EINVAL);
    tls_record_state_deinit(&tx); /* safe after a failed init */
}

static int ph_parse(const char *hex, struct tls_post_handshake *ph)
{
    uint8_t msg[64];
    size_t n = tt_hex(hex, msg, sizeof(msg));
    return tls_post_handshake_parse(msg, n, ph);
}

Test(tls_record_errors, post_handshake_messages)
{
    struct tls_post_handshake ph;
    /* Two tickets (minimal bodies; the content is not inspected), then a KeyUpdate. */
    cr_assert_eq(ph_parse("04 000002 aabb 04 000000 18 000001 00", &ph), 0);
    cr_assert_eq(ph.tickets_count, 2);
    cr_assert(ph.key_update && !ph.update_requested);
    cr_assert_eq(ph_parse("18 000001 01", &ph), 0);
    cr_assert(ph.key_update && ph.update_requested);

    cr_assert_eq(ph_parse("18 000001 00 04 000000", &ph), -EPROTO, "KeyUpdate not last");
    cr_assert_eq(ph_parse("18 000001 02", &ph), -EPROTO, "request_update 2");
    cr_assert_eq(ph_parse("18 000002 0000", &ph), -EPROTO, "KeyUpdate body 2 bytes");
    cr_assert_eq(ph_parse("18 000000", &ph), -EPROTO, "KeyUpdate body empty");
    cr_assert_eq(ph_parse("0d 000001 00", &ph), -EPROTO, "CertificateRequest");
    cr_assert_eq(ph_parse("14 000001 00", &ph), -EPROTO, "Finished");
    cr_assert_eq(ph_parse("04 0000", &ph), -EPROTO, "cut header");
    cr_assert_eq(ph_parse("04 000010 aabb", &ph), -EPROTO, "cut body (fragmented message)");
    cr_assert_eq(ph_parse("04 004001 aabb", &ph), -EMSGSIZE, "body over 2^14");
    cr_assert_eq(ph_parse("04 ffffff aabb", &ph), -EMSGSIZE);
    cr_assert_eq(tls_post_handshake_parse(NULL, 0, &ph), -EPROTO);
}

Test(tls_record_errors, alerts)
{
    uint8_t desc = 0xff;
    cr_assert_eq(tls_alert_parse((const uint8_t[]){1, 0}, 2, &desc), 0);
    cr_assert_eq(desc, 0);
    cr_assert_eq(tls_alert_parse((const uint8_t[]){2, 0}, 2, &desc), 0, "level is ignored");
    cr_assert_eq(tls_alert_parse((const uint8_t[]){1, 90}, 2, &desc), 1);
    cr_assert_eq(tls_alert_parse((const uint8_t[]){2, 40}, 2, &desc), -ECONNRESET);
    cr_assert_eq(desc, 40);
    cr_assert_eq(tls_alert_parse((const uint8_t[]){1, 42}, 2, &desc), -ECONNRESET,
                 "warning level is still fatal in TLS 1.3");
    cr_assert_eq(tls_alert_parse((const uint8_t[]){1, 0, 1, 0}, 4, &desc), -EPROTO,
                 "coalesced alerts");
    cr_assert_eq(tls_alert_parse((const uint8_t[]){1}, 1, &desc), -EPROTO);
    cr_assert_eq(tls_alert_parse((const uint8_t[]){3, 0}, 2, &desc), -EPROTO, "bad level");

    /* What we seal: warning for closure alerts, fatal for the rest. */
    pair();
    struct tls_record_in rec;
    static const uint8_t descs[][2] = {{0, 1}, {90, 1}, {10, 2}, {80, 2}};
    for (size_t i = 0; i < 4; i++) {
        ssize_t n = tls_record_seal_alert(&tx, descs[i][0], buf, sizeof(buf));
        cr_assert_eq(n, 2 + TLS_RECORD_OVERHEAD);
        cr_assert_eq(tls_record_open(&rx, buf, (size_t)n, &rec), 0);
        cr_assert_eq(rec.type, TLS_CONTENT_ALERT);
        cr_assert_eq(rec.data_len, 2);
        cr_assert_eq(rec.data[0], descs[i][1]);
        cr_assert_eq(rec.data[1], descs[i][0]);
    }
}
