/* fuzz_tls_record.c - libFuzzer target for the userspace TLS 1.3 record layer (tls/tls_record.c)
 * with short, split and corrupt records. Input: a mode byte, then bytes.
 *   mode 0: the bytes are what a peer sent: opened record by record (only documented errors);
 *           handshake and alert plaintexts go through their parsers.
 *   mode 1: the bytes are plaintext chunks (a length byte, then that many bytes), sealed as
 *           records with one state and opened, fed in pieces of k bytes, with a mirror state:
 *           every chunk comes back exactly, in order, and nothing else.
 *   mode 2: as 1, then one byte of the sealed stream at a chosen position is flipped: records
 *           before it open as sealed, the damaged one fails (-EBADMSG, -EPROTO, -EMSGSIZE or
 *           -EAGAIN when the damage lengthened it past the end), and nothing after it opens. */
#include <errno.h>
#include <string.h>

#include "fuzz_util.h"
#include "tls_keys.h"
#include "tls_record.h"

#define STREAM_MAX (64u * 1024u)

static void state_pair(uint16_t suite, struct tls_record_state *w, struct tls_record_state *r)
{
    uint8_t secret[48];
    memset(secret, 0x42, sizeof(secret));
    struct tls_traffic_keys k;
    size_t slen = suite == TLS_SUITE_AES_256_GCM_SHA384 ? 48 : 32;
    CHECK(tls_traffic_keys_init(&k, suite, secret, slen) == 0);
    CHECK(tls_record_state_init(w, &k, 0) == 0);
    CHECK(tls_record_state_init(r, &k, 0) == 0);
    tls_traffic_keys_deinit(&k);
}

static void open_raw(struct tls_record_state *r, uint8_t *buf, size_t len)
{
    while (len > 0) {
        struct tls_record_in rec;
        int rc = tls_record_open(r, buf, len, &rec);
        if (rc < 0) {
            CHECK(rc == -EAGAIN || rc == -EMSGSIZE || rc == -EPROTO || rc == -EBADMSG);
            CHECK(rc != -EAGAIN || rec.need > 0);
            return;
        }
        CHECK(rec.record_len <= len && rec.data_len <= TLS_RECORD_PLAINTEXT_MAX);
        CHECK(rec.data >= buf && rec.data + rec.data_len <= buf + rec.record_len);
        if (rec.type == 22) {
            struct tls_post_handshake ph;
            int prc = tls_post_handshake_parse(rec.data, rec.data_len, &ph);
            CHECK(prc == 0 || prc == -EPROTO || prc == -EMSGSIZE);
        } else if (rec.type == 21) {
            uint8_t d;
            int arc = tls_alert_parse(rec.data, rec.data_len, &d);
            CHECK(arc == 0 || arc == 1 || arc == -ECONNRESET || arc == -EPROTO);
        }
        buf += rec.record_len;
        len -= rec.record_len;
    }
}

/* Intact: everything opened, in order, nothing left. Damaged: the record with the flipped byte
 * (and every later one) did not open, and the verdict is one the layer documents. */
static void check_verdict(bool damaged, int verdict, bool all_opened, bool some_unopened)
{
    if (!damaged) {
        CHECK(verdict == 0 && all_opened);
        return;
    }
    CHECK(verdict == -EBADMSG || verdict == -EPROTO || verdict == -EMSGSIZE || verdict == 0);
    CHECK(some_unopened);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2 || size > STREAM_MAX / 2)
        return 0;
    static const uint16_t suites[] = {TLS_SUITE_AES_128_GCM_SHA256, TLS_SUITE_AES_256_GCM_SHA384,
                                      TLS_SUITE_CHACHA20_POLY1305_SHA256};
    struct fuzz_in in = {data, size};
    uint8_t mode = fuzz_u8(&in);
    struct tls_record_state w, r;
    state_pair(suites[(mode >> 2) % 3], &w, &r);
    static uint8_t stream[STREAM_MAX], plain[STREAM_MAX];
    if ((mode & 3) == 0 || (mode & 3) == 3) {
        memcpy(stream, in.p, in.len);
        open_raw(&r, stream, in.len);
        goto out;
    }
    /* Seal chunk by chunk; remember where each record ends. */
    size_t slen = 0, plen = 0, ends[1024], chunks[1024], nrec = 0;
    while (in.len > 0 && nrec < 1024) {
        size_t n = fuzz_u8(&in) % 200 + 1;
        if (n > in.len)
            n = in.len;
        ssize_t got = tls_record_seal(&w, 23, in.p, n, stream + slen, sizeof(stream) - slen);
        CHECK(got == (ssize_t)(n + TLS_RECORD_OVERHEAD));
        memcpy(plain + plen, in.p, n);
        plen += n;
        slen += (size_t)got;
        ends[nrec] = slen;
        chunks[nrec++] = n;
        in.p += n;
        in.len -= n;
    }
    size_t flip =
        (mode & 3) == 2 && slen ? ((size_t)data[size - 1] * 257u + size) % slen : SIZE_MAX;
    if (flip != SIZE_MAX)
        stream[flip] ^= (uint8_t)(1u << (data[size - 1] & 7));
    /* Open, delivering the stream k bytes at a time into a connection-like buffer. */
    static uint8_t buf[STREAM_MAX];
    size_t k = (size_t)(mode >> 4) + 1, have = 0, fed = 0, out_off = 0, rec = 0;
    int verdict = 0;
    while (fed < slen && verdict == 0) {
        size_t step = slen - fed < k ? slen - fed : k;
        memcpy(buf + have, stream + fed, step);
        have += step;
        fed += step;
        for (;;) {
            struct tls_record_in ri;
            int rc = tls_record_open(&r, buf, have, &ri);
            if (rc == -EAGAIN)
                break;
            if (rc < 0) {
                verdict = rc;
                break;
            }
            CHECK(ri.type == 23 && ri.data_len == chunks[rec]);
            CHECK(memcmp(ri.data, plain + out_off, ri.data_len) == 0);
            CHECK(flip == SIZE_MAX || flip >= ends[rec]); /* a damaged record never opens */
            out_off += ri.data_len;
            rec++;
            memmove(buf, buf + ri.record_len, have - ri.record_len);
            have -= ri.record_len;
        }
    }
    check_verdict(flip != SIZE_MAX, verdict, rec == nrec && out_off == plen && have == 0,
                  rec < nrec);
out:
    tls_record_state_deinit(&w);
    tls_record_state_deinit(&r);
    return 0;
}
