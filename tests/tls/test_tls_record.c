/* test_tls_record.c - the record layer of tls/tls_record.c: RFC 8448 §3 records byte for byte,
 * seal/open round trips for all three suites, coalescing of frames into 16 KiB records, frames
 * spanning records, output-bounded sealing. Errors live in test_tls_record_errors.c. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <openssl/aead.h>

#include "tls_record.h"
#include "tls_test_util.h"

TestSuite(tls_record, .init = tt_check_boringssl);

/* RFC 8448 §3 application traffic secrets and the handshake secret of the client Finished. */
#define C_AP_SECRET "9e40646ce79a7f9dc05af8889bce6552875afa0b06df0087f792ebb7c17504a5"
#define S_AP_SECRET "a11af9f05531f856ad47116b45a950328204b4f44bfb6b3a4b4f1f3fcb631643"
#define C_HS_SECRET "b3eddb126e067f35a780b3abf45e2d8f3b1a950738f52e9600746a0e27a55a21"

/* {client} send application_data record, seq 0: payload 00 01 .. 31. */
#define C_APP_RECORD                                                                               \
    "17 03 03 00 43 a2 3f 70 54 b6 2c 94 d0 af fa fe 82 28 ba 55 cb ef ac ea"                      \
    "42 f9 14 aa 66 bc ab 3f 2b 98 19 a8 a5 b4 6b 39 5b d5 4a 9a 20 44 1e 2b"                      \
    "62 97 4e 1f 5a 62 92 a2 97 70 14 bd 1e 3d ea e6 3a ee bb 21 69 49 15 e4"
/* {server} send application_data record, seq 1 (the NewSessionTicket was seq 0). */
#define S_APP_RECORD                                                                               \
    "17 03 03 00 43 2e 93 7e 11 ef 4a c7 40 e5 38 ad 36 00 5f c4 a4 69 32 fc"                      \
    "32 25 d0 5f 82 aa 1b 36 e3 0e fa f9 7d 90 e6 df fc 60 2d cb 50 1a 59 a8"                      \
    "fc c4 9c 4b f2 e5 f0 a2 1c 00 47 c2 ab f3 32 54 0d d0 32 e1 67 c2 95 5d"
/* close_notify alerts: client seq 1, server seq 2. */
#define C_ALERT_RECORD "17 03 03 00 13 c9 87 27 60 65 56 66 b7 4d 7f f1 15 3e fd 6d b6 d0 b0 e3"
#define S_ALERT_RECORD "17 03 03 00 13 b5 8f d6 71 66 eb f5 99 d2 47 20 cf be 7e fa 7a 88 64 a9"
/* {server} NewSessionTicket (205 octets) and its record, seq 0 under the server's keys. */
#define S_NST                                                                                      \
    "040000c90000001efad6aac502000000b22c035d829359ee5ff7af4ec900000000262a6494dc486d2c8a34cb"     \
    "33fa90bf1b0070ad3c498883c9367c09a2be785abc55cd226097a3a982117283f82a03a143efd3ff5dd36d64"     \
    "e861be7fd61d2827db279cce145077d454a3664d4e6da4d29ee03725a6a4dafcd0fc67d2aea70529513e3da2"     \
    "677fa5906c5b3f7d8f92f228bda40dda721470f9fbf297b5aea617646fac5c03272e970727c621a79141ef5f"     \
    "7de6505e5bfbc388e93343694093934ae4d3570008002a000400000400"
#define S_NST_RECORD                                                                               \
    "17 03 03 00 de 3a 6b 8f 90 41 4a 97 d6 95 9c 34 87 68 0d e5 13 4a 2b 24"                      \
    "0e 6c ff ac 11 6e 95 d4 1d 6a f8 f6 b5 80 dc f3 d1 1d 63 c7 58 db 28 9a"                      \
    "01 59 40 25 2f 55 71 3e 06 1d c1 3e 07 88 91 a3 8e fb cf 57 53 ad 8e f1"                      \
    "70 ad 3c 73 53 d1 6d 9d a7 73 b9 ca 7f 2b 9f a1 b6 c0 d4 a3 d0 3f 75 e0"                      \
    "9c 30 ba 1e 62 97 2a c4 6f 75 f7 b9 81 be 63 43 9b 29 99 ce 13 06 46 15"                      \
    "13 98 91 d5 e4 c5 b4 06 f1 6e 3f c1 81 a7 7c a4 75 84 00 25 db 2f 0a 77"                      \
    "f8 1b 5a b0 5b 94 c0 13 46 75 5f 69 23 2c 86 51 9d 86 cb ee ac 87 aa c3"                      \
    "47 d1 43 f9 60 5d 64 f6 50 db 4d 02 3e 70 e9 52 ca 49 fe 51 37 12 1c 74"                      \
    "bc 26 97 68 7e 24 87 46 d6 df 35 30 05 f3 bc e1 86 96 12 9c 81 53 55 6b"                      \
    "3b 6c 67 79 b3 7b f1 59 85 68 4f"
/* {client} Finished (36 octets) and its record, seq 0 under the client handshake keys. */
#define C_FINISHED "14000020a8ec436d677634ae525ac1fcebe11a039ec17694fac6e98527b642f2edd5ce61"
#define C_FINISHED_RECORD                                                                          \
    "17 03 03 00 35 75 ec 4d c2 38 cc e6 0b 29 80 44 a7 1e 21 9c 56 cc 77 b0"                      \
    "51 7f e9 b9 3c 7a 4b fc 44 d8 7f 38 f8 03 38 ac 98 fc 46 de b3 84 bd 1c"                      \
    "ae ac ab 68 67 d7 26 c4 05 46"

static void rfc_state(const char *secret_hex, uint64_t seq, struct tls_record_state *st)
{
    uint8_t secret[32];
    struct tls_traffic_keys keys;
    cr_assert_eq(tt_hex(secret_hex, secret, sizeof(secret)), 32);
    cr_assert_eq(tls_traffic_keys_init(&keys, TLS_SUITE_AES_128_GCM_SHA256, secret, 32), 0);
    cr_assert_eq(tls_record_state_init(st, &keys, seq), 0);
    tls_traffic_keys_deinit(&keys);
}

static void rfc_payload(uint8_t payload[50])
{
    for (uint8_t i = 0; i < 50; i++)
        payload[i] = i;
}

/* Opens want[] with a fresh state and checks type and plaintext. */
static void check_open(const char *secret_hex, uint64_t seq, uint8_t *record, size_t len,
                       uint8_t type, const uint8_t *plain, size_t plain_len)
{
    struct tls_record_state rx;
    struct tls_record_in rec;
    rfc_state(secret_hex, seq, &rx);
    cr_assert_eq(tls_record_open(&rx, record, len, &rec), 0);
    cr_assert_eq(rec.type, type);
    cr_assert_eq(rec.record_len, len);
    cr_assert_eq(rec.data_len, plain_len);
    cr_assert_arr_eq(rec.data, plain, plain_len);
    cr_assert_eq(rx.seq, seq + 1);
    tls_record_state_deinit(&rx);
}

Test(tls_record, rfc8448_client_application_data)
{
    uint8_t want[72], out[128], payload[50];
    cr_assert_eq(tt_hex(C_APP_RECORD, want, sizeof(want)), 72);
    rfc_payload(payload);

    struct tls_record_state tx;
    rfc_state(C_AP_SECRET, 0, &tx);
    struct iovec iov = {payload, sizeof(payload)};
    size_t consumed = 0;
    cr_assert_eq(tls_record_seal_iov(&tx, &iov, 1, &consumed, out, sizeof(out)), 72);
    cr_assert_eq(consumed, 50);
    cr_assert_arr_eq(out, want, 72);
    cr_assert_eq(tx.seq, 1);

    /* The same record from tls_record_seal and from a payload split over three iovecs
     * (gather path). */
    rfc_state(C_AP_SECRET, 0, &tx);
    cr_assert_eq(tls_record_seal(&tx, TLS_CONTENT_APPLICATION_DATA, payload, 50, out, 72), 72);
    cr_assert_arr_eq(out, want, 72);
    rfc_state(C_AP_SECRET, 0, &tx);
    struct iovec parts[3] = {{payload, 7}, {payload + 7, 0}, {payload + 7, 43}};
    cr_assert_eq(tls_record_seal_iov(&tx, parts, 3, &consumed, out, sizeof(out)), 72);
    cr_assert_arr_eq(out, want, 72);

    /* Close_notify at seq 1. */
    uint8_t alert_want[24];
    cr_assert_eq(tt_hex(C_ALERT_RECORD, alert_want, sizeof(alert_want)), 24);
    cr_assert_eq(tls_record_seal_alert(&tx, TLS_ALERT_CLOSE_NOTIFY, out, sizeof(out)), 24);
    cr_assert_arr_eq(out, alert_want, 24);
    tls_record_state_deinit(&tx);

    check_open(C_AP_SECRET, 0, want, 72, TLS_CONTENT_APPLICATION_DATA, payload, 50);
    const uint8_t close_notify[2] = {1, 0};
    check_open(C_AP_SECRET, 1, alert_want, 24, TLS_CONTENT_ALERT, close_notify, 2);
}

Test(tls_record, rfc8448_server_records)
{
    uint8_t nst[205], nst_want[227], app_want[72], alert_want[24], payload[50], out[256];
    cr_assert_eq(tt_hex(S_NST, nst, sizeof(nst)), 205);
    cr_assert_eq(tt_hex(S_NST_RECORD, nst_want, sizeof(nst_want)), 227);
    cr_assert_eq(tt_hex(S_APP_RECORD, app_want, sizeof(app_want)), 72);
    cr_assert_eq(tt_hex(S_ALERT_RECORD, alert_want, sizeof(alert_want)), 24);
    rfc_payload(payload);

    struct tls_record_state tx;
    rfc_state(S_AP_SECRET, 0, &tx);
    cr_assert_eq(tls_record_seal(&tx, TLS_CONTENT_HANDSHAKE, nst, 205, out, sizeof(out)), 227);
    cr_assert_arr_eq(out, nst_want, 227);
    struct iovec iov = {payload, 50};
    size_t consumed;
    cr_assert_eq(tls_record_seal_iov(&tx, &iov, 1, &consumed, out, sizeof(out)), 72);
    cr_assert_arr_eq(out, app_want, 72);
    cr_assert_eq(tls_record_seal_alert(&tx, TLS_ALERT_CLOSE_NOTIFY, out, sizeof(out)), 24);
    cr_assert_arr_eq(out, alert_want, 24);
    tls_record_state_deinit(&tx);

    /* The client's view: the three records back to back in one buffer. */
    uint8_t stream[227 + 72 + 24];
    memcpy(stream, nst_want, 227);
    memcpy(stream + 227, app_want, 72);
    memcpy(stream + 299, alert_want, 24);
    struct tls_record_state rx;
    struct tls_record_in rec;
    rfc_state(S_AP_SECRET, 0, &rx);
    cr_assert_eq(tls_record_open(&rx, stream, sizeof(stream), &rec), 0);
    cr_assert_eq(rec.type, TLS_CONTENT_HANDSHAKE);
    cr_assert_eq(rec.record_len, 227);
    struct tls_post_handshake ph;
    cr_assert_eq(tls_post_handshake_parse(rec.data, rec.data_len, &ph), 0);
    cr_assert_eq(ph.tickets_count, 1);
    cr_assert(!ph.key_update);

    cr_assert_eq(tls_record_open(&rx, stream + 227, sizeof(stream) - 227, &rec), 0);
    cr_assert_eq(rec.type, TLS_CONTENT_APPLICATION_DATA);
    cr_assert_arr_eq(rec.data, payload, 50);
    cr_assert_eq(tls_record_open(&rx, stream + 299, sizeof(stream) - 299, &rec), 0);
    cr_assert_eq(rec.type, TLS_CONTENT_ALERT);
    uint8_t desc = 0xff;
    cr_assert_eq(tls_alert_parse(rec.data, rec.data_len, &desc), 0);
    cr_assert_eq(desc, TLS_ALERT_CLOSE_NOTIFY);
    cr_assert_eq(rx.seq, 3);
    tls_record_state_deinit(&rx);
}

Test(tls_record, rfc8448_client_finished_handshake_record)
{
    uint8_t fin[36], want[58], out[64];
    cr_assert_eq(tt_hex(C_FINISHED, fin, sizeof(fin)), 36);
    cr_assert_eq(tt_hex(C_FINISHED_RECORD, want, sizeof(want)), 58);
    struct tls_record_state tx;
    rfc_state(C_HS_SECRET, 0, &tx);
    cr_assert_eq(tls_record_seal(&tx, TLS_CONTENT_HANDSHAKE, fin, 36, out, sizeof(out)), 58);
    cr_assert_arr_eq(out, want, 58);
    tls_record_state_deinit(&tx);
    check_open(C_HS_SECRET, 0, want, 58, TLS_CONTENT_HANDSHAKE, fin, 36);
}

/* Frame i of FRAME_LEN bytes: bytes that name the frame and the offset, so a misplaced or
 * dropped byte shows. */
#define FRAME_LEN    1400
#define FRAMES_COUNT 40
static uint8_t frames[FRAMES_COUNT][FRAME_LEN];
static uint8_t wire[FRAMES_COUNT * FRAME_LEN + 16 * TLS_RECORD_OVERHEAD];
static uint8_t plain[FRAMES_COUNT * FRAME_LEN];

static void fill_frames(void)
{
    for (size_t f = 0; f < FRAMES_COUNT; f++) {
        for (size_t i = 0; i < FRAME_LEN; i++)
            frames[f][i] = (uint8_t)(f * 31 + i * 7 + (i >> 8));
    }
}

static void coalesce_round_trip(uint16_t suite)
{
    fill_frames();
    struct iovec iov[FRAMES_COUNT];
    for (size_t f = 0; f < FRAMES_COUNT; f++)
        iov[f] = (struct iovec){frames[f], FRAME_LEN};
    struct tls_record_state tx, rx;
    tt_state_pair(suite, 0x5a, 7, &tx, &rx);

    size_t consumed = 0, total = FRAMES_COUNT * FRAME_LEN;
    ssize_t n = tls_record_seal_iov(&tx, iov, FRAMES_COUNT, &consumed, wire, sizeof(wire));
    /* 56000 bytes = 3 full records of 16384 + one of 6848. */
    cr_assert_eq(consumed, total);
    cr_assert_eq(n, (ssize_t)(total + 4 * TLS_RECORD_OVERHEAD));
    cr_assert_eq(tx.seq, 7 + 4);
    size_t off = 0;
    static const size_t lens[4] = {16384, 16384, 16384, 6848};
    for (size_t r = 0; r < 4; r++) {
        size_t body = (size_t)wire[off + 3] << 8 | wire[off + 4];
        cr_assert_eq(wire[off], 0x17);
        cr_assert_eq(wire[off + 1], 0x03);
        cr_assert_eq(wire[off + 2], 0x03);
        cr_assert_eq(body, lens[r] + 1 + TLS_AEAD_TAG_LEN, "record %zu", r);
        off += TLS_RECORD_HEADER_LEN + body;
    }

    size_t records;
    size_t got = tt_open_stream(&rx, wire, (size_t)n, plain, sizeof(plain), &records);
    cr_assert_eq(records, 4);
    cr_assert_eq(got, total);
    cr_assert_arr_eq(plain, frames, total, "frames 11 and 23 span records");
    tls_record_state_deinit(&tx);
    tls_record_state_deinit(&rx);
}

Test(tls_record, coalesce_aes_128_gcm)
{
    coalesce_round_trip(TLS_SUITE_AES_128_GCM_SHA256);
}

Test(tls_record, coalesce_aes_256_gcm)
{
    coalesce_round_trip(TLS_SUITE_AES_256_GCM_SHA384);
}

Test(tls_record, coalesce_chacha20_poly1305)
{
    coalesce_round_trip(TLS_SUITE_CHACHA20_POLY1305_SHA256);
}

/* Suites must not be interchangeable: a record sealed with one suite's state does not open
 * with another's even from the same secret bytes. */
Test(tls_record, suites_differ)
{
    struct tls_record_state a_tx, a_rx, b_tx, b_rx;
    tt_state_pair(TLS_SUITE_AES_128_GCM_SHA256, 1, 0, &a_tx, &a_rx);
    tt_state_pair(TLS_SUITE_CHACHA20_POLY1305_SHA256, 1, 0, &b_tx, &b_rx);
    uint8_t msg[100] = {1, 2, 3}, out[200];
    struct tls_record_in rec;
    cr_assert_eq(tls_record_seal(&a_tx, 23, msg, 100, out, sizeof(out)), 122);
    uint8_t copy[122];
    memcpy(copy, out, sizeof(copy)); /* a failed open zeroes what it tried */
    cr_assert_eq(tls_record_open(&b_rx, copy, 122, &rec), -EBADMSG);
    cr_assert_eq(tls_record_open(&a_rx, out, 122, &rec), 0);
}

/* The caller bounds memory with out_cap: records are cut to fit, consumed says how far the
 * input got, and calling again with the rest continues the stream seamlessly. */
Test(tls_record, bounded_output_resumes)
{
    fill_frames();
    struct tls_record_state tx, rx;
    tt_state_pair(TLS_SUITE_AES_128_GCM_SHA256, 3, 0, &tx, &rx);
    const uint8_t *all = &frames[0][0];
    size_t total = sizeof(frames), done = 0, wire_len = 0, calls = 0;
    /* 20000-byte windows: a full record (16406 bytes) and a 3572-byte one per call. */
    while (done < total) {
        struct iovec iov = {(void *)(all + done), total - done};
        size_t consumed = 0;
        size_t cap = sizeof(wire) - wire_len < 20000 ? sizeof(wire) - wire_len : 20000;
        ssize_t n = tls_record_seal_iov(&tx, &iov, 1, &consumed, wire + wire_len, cap);
        cr_assert_gt(n, 0);
        cr_assert_leq((size_t)n, cap);
        if (calls == 0) {
            cr_assert_eq(consumed, 16384 + (20000 - TLS_RECORD_SIZE_MAX - TLS_RECORD_OVERHEAD));
            cr_assert_eq(n, 20000);
        }
        done += consumed;
        wire_len += (size_t)n;
        calls++;
        cr_assert_lt(calls, 10);
    }
    size_t records;
    cr_assert_eq(tt_open_stream(&rx, wire, wire_len, plain, sizeof(plain), &records), total);
    cr_assert_arr_eq(plain, frames, total);
    cr_assert_eq(tx.seq, records);
}

Test(tls_record, exact_and_tiny_output_buffers)
{
    fill_frames();
    struct tls_record_state tx, rx;
    tt_state_pair(TLS_SUITE_AES_256_GCM_SHA384, 9, 0, &tx, &rx);
    struct iovec iov = {frames, sizeof(frames)};
    size_t consumed = 99;
    /* Exactly one full record. */
    cr_assert_eq(tls_record_seal_iov(&tx, &iov, 1, &consumed, wire, TLS_RECORD_SIZE_MAX),
                 TLS_RECORD_SIZE_MAX);
    cr_assert_eq(consumed, TLS_RECORD_PLAINTEXT_MAX);
    /* Room for one byte of plaintext, and for none. */
    iov.iov_base = (uint8_t *)iov.iov_base + consumed;
    iov.iov_len -= consumed;
    cr_assert_eq(tls_record_seal_iov(&tx, &iov, 1, &consumed, wire + TLS_RECORD_SIZE_MAX,
                                     TLS_RECORD_OVERHEAD + 1),
                 TLS_RECORD_OVERHEAD + 1);
    cr_assert_eq(consumed, 1);
    cr_assert_eq(tls_record_seal_iov(&tx, &iov, 1, &consumed, wire, TLS_RECORD_OVERHEAD), -ENOBUFS);
    cr_assert_eq(consumed, 0);
    cr_assert_eq(tx.seq, 2, "a refused call uses no sequence number");
    size_t records;
    cr_assert_eq(tt_open_stream(&rx, wire, TLS_RECORD_SIZE_MAX + TLS_RECORD_OVERHEAD + 1, plain,
                                sizeof(plain), &records),
                 TLS_RECORD_PLAINTEXT_MAX + 1);
    cr_assert_eq(records, 2);
    cr_assert_arr_eq(plain, frames, TLS_RECORD_PLAINTEXT_MAX + 1);

    /* Empty input (no iovecs, or only empty ones) writes nothing. */
    struct iovec empty[2] = {{frames, 0}, {NULL, 0}};
    cr_assert_eq(tls_record_seal_iov(&tx, empty, 2, &consumed, wire, sizeof(wire)), 0);
    cr_assert_eq(tls_record_seal_iov(&tx, NULL, 0, &consumed, wire, 0), 0);
    cr_assert_eq(consumed, 0);
}

/* One large contiguous frame (the no-copy path), then empty iovecs between small ones. */
Test(tls_record, large_frame_and_empty_iovecs)
{
    fill_frames();
    struct tls_record_state tx, rx;
    tt_state_pair(TLS_SUITE_CHACHA20_POLY1305_SHA256, 4, 0, &tx, &rx);
    uint8_t *all = &frames[0][0];
    struct iovec iov[5] = {
        {all, 40000}, {NULL, 0}, {all + 40000, 3}, {NULL, 0}, {all + 40003, 997},
    };
    size_t consumed;
    ssize_t n = tls_record_seal_iov(&tx, iov, 5, &consumed, wire, sizeof(wire));
    cr_assert_eq(consumed, 41000);
    cr_assert_eq(n, 41000 + 3 * TLS_RECORD_OVERHEAD);
    size_t records;
    cr_assert_eq(tt_open_stream(&rx, wire, (size_t)n, plain, sizeof(plain), &records), 41000);
    cr_assert_eq(records, 3);
    cr_assert_arr_eq(plain, frames, 41000);
}

/* tls_record_seal with the plaintext already in place behind the header. */
Test(tls_record, seal_in_place)
{
    struct tls_record_state tx, rx;
    tt_state_pair(TLS_SUITE_AES_128_GCM_SHA256, 8, 0, &tx, &rx);
    uint8_t buf[64], want[] = "in place plaintext";
    memcpy(buf + TLS_RECORD_HEADER_LEN, want, sizeof(want));
    cr_assert_eq(
        tls_record_seal(&tx, 23, buf + TLS_RECORD_HEADER_LEN, sizeof(want), buf, sizeof(buf)),
        (ssize_t)(sizeof(want) + TLS_RECORD_OVERHEAD));
    cr_assert(memcmp(buf + TLS_RECORD_HEADER_LEN, want, sizeof(want)) != 0, "encrypted");
    struct tls_record_in rec;
    cr_assert_eq(tls_record_open(&rx, buf, sizeof(want) + TLS_RECORD_OVERHEAD, &rec), 0);
    cr_assert_eq(rec.data_len, sizeof(want));
    cr_assert_arr_eq(rec.data, want, sizeof(want));
    cr_assert_eq(rec.data, buf + TLS_RECORD_HEADER_LEN, "opened in place");
}

/* Zero-length application data is legal (RFC 8446 §5.1) and round-trips. */
Test(tls_record, empty_application_data_record)
{
    struct tls_record_state tx, rx;
    tt_state_pair(TLS_SUITE_AES_128_GCM_SHA256, 2, 0, &tx, &rx);
    uint8_t out[32];
    cr_assert_eq(tls_record_seal(&tx, 23, NULL, 0, out, sizeof(out)), TLS_RECORD_OVERHEAD);
    struct tls_record_in rec;
    cr_assert_eq(tls_record_open(&rx, out, TLS_RECORD_OVERHEAD, &rec), 0);
    cr_assert_eq(rec.type, 23);
    cr_assert_eq(rec.data_len, 0);
}

/* The record path allocates nothing: seal many frames and open them with a counter on. */
Test(tls_record, no_allocation_on_record_path)
{
    if (!tt_malloc_count_available())
        cr_skip_test("allocation counter unavailable under sanitizers");
    fill_frames();
    struct iovec iov[FRAMES_COUNT];
    for (size_t f = 0; f < FRAMES_COUNT; f++)
        iov[f] = (struct iovec){frames[f], FRAME_LEN};
    static const uint16_t suites[] = {TLS_SUITE_AES_128_GCM_SHA256, TLS_SUITE_AES_256_GCM_SHA384,
                                      TLS_SUITE_CHACHA20_POLY1305_SHA256};
    for (size_t s = 0; s < 3; s++) {
        struct tls_record_state tx, rx;
        tt_state_pair(suites[s], 6, 0, &tx, &rx);
        size_t consumed, allocs;
        tt_malloc_count_start();
        ssize_t n = tls_record_seal_iov(&tx, iov, FRAMES_COUNT, &consumed, wire, sizeof(wire));
        ssize_t k = tls_record_seal_key_update(&tx, true, wire + n, sizeof(wire) - (size_t)n);
        size_t off = 0, records = 0;
        int rc = 0;
        while (rc == 0 && off < (size_t)(n + k)) {
            struct tls_record_in rec;
            rc = tls_record_open(&rx, wire + off, (size_t)(n + k) - off, &rec);
            off += rec.record_len;
            records++;
        }
        allocs = tt_malloc_count_stop();
        cr_assert_eq(rc, 0);
        cr_assert_eq(records, 5);
        cr_assert_eq(allocs, 0, "suite %#x: %zu allocations", suites[s], allocs);
    }
    /* The counter really counts, BoringSSL's own allocations included. */
    tt_malloc_count_start();
    void *volatile p = malloc(16);
    free(p);
    cr_assert_eq(tt_malloc_count_stop(), 1);
    uint8_t key[16] = {0};
    tt_malloc_count_start();
    EVP_AEAD_CTX *heap_ctx = EVP_AEAD_CTX_new(EVP_aead_aes_128_gcm(), key, 16, 16);
    size_t allocs = tt_malloc_count_stop();
    cr_assert_not_null(heap_ctx);
    EVP_AEAD_CTX_free(heap_ctx);
    cr_assert_geq(allocs, 1);
}
