/* tls_test_util.h - helpers shared by the tls/ tests: hex vectors, the BoringSSL binding check,
 * and an allocation counter for the no-malloc claims. Test code only. */
#ifndef TLS_TEST_UTIL_H
#define TLS_TEST_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tls_record.h"

/* Decodes hex (spaces and newlines ignored) into out; the test fails on bad hex or overflow.
 * Returns the byte count. */
size_t tt_hex(const char *hex, uint8_t *out, size_t cap);

/* Fails the current test unless OpenSSL_version() names BoringSSL and EVP_sha256 (a symbol
 * OpenSSL's libcrypto.so.3, pulled in by Criterion -> libgit2, also exports) resolves into
 * BoringSSL's library. Use as the suite's .init. */
void tt_check_boringssl(void);

/* Keys two record states (a sender and a receiver) for suite from a secret of Hash.length
 * bytes all equal to seed, at sequence seq. The test fails if that fails. */
void tt_state_pair(uint16_t suite, uint8_t seed, uint64_t seq, struct tls_record_state *tx,
                   struct tls_record_state *rx);

/* Opens every record of stream[0..len) with rx, appending plaintext (all application data)
 * to out; the test fails on any error or leftover bytes. Returns plaintext bytes; *records_count
 * gets the number of records. */
size_t tt_open_stream(struct tls_record_state *rx, uint8_t *stream, size_t len, uint8_t *out,
                      size_t out_cap, size_t *records_count);

/* Counts malloc/calloc/realloc calls made by this thread between _start and _stop. Available
 * only in builds without sanitizers (they own malloc there). */
bool tt_malloc_count_available(void);
void tt_malloc_count_start(void);
size_t tt_malloc_count_stop(void);

#endif /* TLS_TEST_UTIL_H */
