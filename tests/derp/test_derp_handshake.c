/* test_derp_handshake.c - ServerKey / ClientInfo / ServerInfo: Appendix A vectors byte-exact,
 * seal/open round trips, every open failure, and the Go encoding/json rules for the ClientInfo
 * JSON (case-insensitive keys, unknown keys, types, meshKey strictness, duplicates, null). */
#include <criterion/criterion.h>
#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "derp_frame.h"
#include "derp_handshake.h"
#include "derp_test_util.h"

static struct derp_keypair server, client;
static uint8_t ci_nonce[24], si_nonce[24];

static const char *ci_frame_hex =
    "02 00000068"
    "79a631eede1bf9c98f12032cdeadd0e7a079398fc786b88cc846ec89af85a51a"
    "a0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7"
    "d091f5904fb1485a2783bbf0aafa397a"
    "ceed23792e9bd5c9928be7033904d23ff1f1c05bf0ff70315d0f0ac5dd60b4fe";
static const char *si_frame_hex = "03 00000035"
                                  "c0c1c2c3c4c5c6c7c8c9cacbcccdcecfd0d1d2d3d4d5d6d7"
                                  "d4e4674c9f993829ec94b3856cb28537"
                                  "73116b3c96a1598fbcf2872735";

static void setup(void)
{
    struct derp_privkey sp, cp;
    for (int i = 0; i < 32; i++) {
        sp.bytes[i] = (uint8_t)(0x01 + i);
        cp.bytes[i] = (uint8_t)(0x40 + i);
    }
    derp_privkey_clamp(&sp);
    derp_privkey_clamp(&cp);
    cr_assert_eq(derp_keypair_from_privkey(&server, &sp), 0);
    cr_assert_eq(derp_keypair_from_privkey(&client, &cp), 0);
    for (int i = 0; i < 24; i++) {
        ci_nonce[i] = (uint8_t)(0xa0 + i);
        si_nonce[i] = (uint8_t)(0xc0 + i);
    }
}

TestSuite(derp_handshake, .init = setup);

static size_t vector(const char *hex, uint8_t *out, size_t size)
{
    return test_hex(hex, out, size);
}

/* ---- Appendix A ----------------------------------------------------------------------------- */

Test(derp_handshake, appendix_a_server_key)
{
    uint8_t buf[64], want[64];
    size_t n = vector("01 00000028 44455250f09f9491 "
                      "07a37cbc142093c8b755dc1b10e86cb426374ad16aa853ed0bdfc0b2b86d1c7c",
                      want, sizeof(want));
    cr_assert_eq(derp_server_key_encode(buf, sizeof(buf), &server.pub), (ssize_t)n);
    cr_assert(memcmp(buf, want, n) == 0);
    struct derp_pubkey got;
    cr_assert_eq(derp_server_key_decode(buf + 5, 40, &got), 0);
    cr_assert(derp_pubkey_equal(&got, &server.pub));
    cr_assert_eq(derp_server_key_decode(buf + 5, 39, &got), -EPROTO);
}

Test(derp_handshake, appendix_a_client_info_seal)
{
    uint8_t buf[256], want[256];
    size_t n = vector(ci_frame_hex, want, sizeof(want));
    struct derp_client_info info = {.version = 2, .can_ack_pings = true};
    char json[64];
    cr_assert_eq(derp_client_info_format_json(json, sizeof(json), &info), 32);
    cr_assert(memcmp(json, "{\"version\":2,\"CanAckPings\":true}", 32) == 0);
    ssize_t w = derp_client_info_seal(buf, sizeof(buf), &client, &server.pub, &info, ci_nonce);
    cr_assert_eq(w, (ssize_t)n);
    cr_assert(memcmp(buf, want, n) == 0, "byte-exact Appendix A ClientInfo");
    cr_assert_eq(derp_client_info_seal(buf, n - 1, &client, &server.pub, &info, ci_nonce), -ENOSPC);
}

Test(derp_handshake, appendix_a_client_info_open)
{
    uint8_t frame[256], scratch[64];
    size_t n = vector(ci_frame_hex, frame, sizeof(frame));
    struct derp_pubkey ck;
    struct derp_client_info info;
    cr_assert_eq(derp_client_info_open(frame + 5, n - 5, &server, &ck, &info, scratch, 32), 0);
    cr_assert(derp_pubkey_equal(&ck, &client.pub));
    cr_assert(info.version == 2 && info.can_ack_pings && !info.is_prober && !info.has_mesh_key);
    cr_assert_str_eq(info.app_name, "");
    /* Scratch one byte short; NULL scratch allocates. */
    cr_assert_eq(derp_client_info_open(frame + 5, n - 5, &server, &ck, &info, scratch, 31),
                 -ENOSPC);
    cr_assert_eq(derp_client_info_open(frame + 5, n - 5, &server, &ck, &info, NULL, 0), 0);
}

Test(derp_handshake, appendix_a_server_info)
{
    uint8_t buf[128], want[128];
    size_t n = vector(si_frame_hex, want, sizeof(want));
    ssize_t w = derp_server_info_seal(buf, sizeof(buf), &server, &client.pub, NULL, si_nonce);
    cr_assert_eq(w, (ssize_t)n);
    cr_assert(memcmp(buf, want, n) == 0, "byte-exact Appendix A ServerInfo");
    struct derp_server_info si = {.version = 2};
    w = derp_server_info_seal(buf, sizeof(buf), &server, &client.pub, &si, si_nonce);
    cr_assert(w == (ssize_t)n && memcmp(buf, want, n) == 0);

    struct derp_server_info got = {0};
    cr_assert_eq(derp_server_info_open(want + 5, n - 5, &client, &server.pub, &got, NULL, 0), 0);
    cr_assert(got.version == 2 && got.token_bucket_bytes_per_second == 0);
    cr_assert_eq(derp_server_info_seal(buf, n - 1, &server, &client.pub, NULL, si_nonce), -ENOSPC);
}

/* ---- Round trips -------------------------------------------------------------------------------
 */

Test(derp_handshake, client_info_round_trip_full)
{
    uint8_t buf[1200];
    struct derp_client_info in = {
        .version = 2, .can_ack_pings = false, .is_prober = true, .has_mesh_key = true};
    memset(in.mesh_key.bytes, 0x5c, 32);
    snprintf(in.app_name, sizeof(in.app_name), "hderp-echo <&> \"q\" \\ \n é");
    ssize_t w = derp_client_info_seal(buf, sizeof(buf), &client, &server.pub, &in, NULL);
    cr_assert_gt(w, 0);

    /* Through the splitter, as the server sees it. */
    struct derp_splitter s;
    struct derp_split r;
    derp_splitter_init(&s, DERP_READER_SERVER_HELLO);
    cr_assert(derp_splitter_next(&s, buf, (size_t)w, &r) == 0 && r.kind == DERP_SPLIT_FRAME);
    struct derp_pubkey ck;
    struct derp_client_info out;
    cr_assert_eq(derp_client_info_open(buf + r.payload_offset, r.len, &server, &ck, &out, NULL, 0),
                 0);
    cr_assert(derp_pubkey_equal(&ck, &client.pub));
    cr_assert(out.version == 2 && !out.can_ack_pings && out.is_prober && out.has_mesh_key);
    cr_assert(derp_mesh_key_equal(&out.mesh_key, &in.mesh_key));
    cr_assert_str_eq(out.app_name, in.app_name);

    /* Random nonces differ between seals. */
    uint8_t buf2[1200];
    derp_client_info_seal(buf2, sizeof(buf2), &client, &server.pub, &in, NULL);
    cr_assert(memcmp(buf + 37, buf2 + 37, 24) != 0);
}

Test(derp_handshake, server_info_round_trip_all_fields)
{
    uint8_t buf[256];
    struct derp_server_info in = {2, 1000000, 65568}, out = {0};
    char json[128];
    ssize_t n = derp_server_info_format_json(json, sizeof(json), &in);
    json[n] = '\0';
    cr_assert_str_eq(json, "{\"version\":2,\"TokenBucketBytesPerSecond\":1000000,"
                           "\"TokenBucketBytesBurst\":65568}");
    ssize_t w = derp_server_info_seal(buf, sizeof(buf), &server, &client.pub, &in, NULL);
    cr_assert_gt(w, 0);
    struct derp_splitter s;
    struct derp_split r;
    derp_splitter_init(&s, DERP_READER_CLIENT);
    cr_assert(derp_splitter_next(&s, buf, (size_t)w, &r) == 0 && r.kind == DERP_SPLIT_FRAME);
    cr_assert_eq(derp_server_info_open(buf + 5, r.len, &client, &server.pub, &out, NULL, 0), 0);
    cr_assert(out.version == 2 && out.token_bucket_bytes_per_second == 1000000 &&
              out.token_bucket_bytes_burst == 65568);
    struct derp_server_info zero = {0};
    n = derp_server_info_format_json(json, sizeof(json), &zero);
    cr_assert(n == 2 && memcmp(json, "{}", 2) == 0);
    cr_assert_eq(derp_server_info_format_json(json, 5, &in), -ENOSPC);
}

/* ---- Open failures -------------------------------------------------------------------------- */

Test(derp_handshake, client_info_open_failures)
{
    uint8_t frame[256];
    size_t n = vector(ci_frame_hex, frame, sizeof(frame));
    uint8_t *p = frame + 5;
    size_t len = n - 5;
    struct derp_pubkey ck;
    struct derp_client_info info;

    /* Wrong server key. */
    struct derp_keypair other;
    cr_assert_eq(derp_keypair_generate(&other), 0);
    cr_assert_eq(derp_client_info_open(p, len, &other, &ck, &info, NULL, 0), -EBADMSG);
    /* Every byte of nonce, tag, ciphertext and claimed client key matters. */
    for (size_t i = 0; i < len; i++) {
        p[i] ^= 0x01;
        cr_assert_eq(derp_client_info_open(p, len, &server, &ck, &info, NULL, 0), -EBADMSG,
                     "byte %zu", i);
        p[i] ^= 0x01;
    }
    /* Truncated: the box no longer opens; below 56 the frame itself is refused. */
    cr_assert_eq(derp_client_info_open(p, len - 1, &server, &ck, &info, NULL, 0), -EBADMSG);
    cr_assert_eq(derp_client_info_open(p, 32 + 24 + 15, &server, &ck, &info, NULL, 0), -EBADMSG);
    cr_assert_eq(derp_client_info_open(p, 56, &server, &ck, &info, NULL, 0), -EBADMSG);
    cr_assert_eq(derp_client_info_open(p, 55, &server, &ck, &info, NULL, 0), -EPROTO);
    static uint8_t big[(256 << 10) + 1];
    cr_assert_eq(derp_client_info_open(big, sizeof(big), &server, &ck, &info, NULL, 0), -EMSGSIZE);
    /* A degenerate (all-zero) client key never opens (libsodium refuses the zero point). */
    memset(p, 0, 32);
    cr_assert_eq(derp_client_info_open(p, len, &server, &ck, &info, NULL, 0), -EBADMSG);
}

Test(derp_handshake, server_info_open_failures)
{
    uint8_t frame[128];
    size_t n = vector(si_frame_hex, frame, sizeof(frame));
    struct derp_server_info si;
    struct derp_keypair other;
    cr_assert_eq(derp_keypair_generate(&other), 0);
    cr_assert_eq(derp_server_info_open(frame + 5, n - 5, &other, &server.pub, &si, NULL, 0),
                 -EBADMSG);
    cr_assert_eq(derp_server_info_open(frame + 5, n - 5, &client, &other.pub, &si, NULL, 0),
                 -EBADMSG);
    cr_assert_eq(derp_server_info_open(frame + 5, 23, &client, &server.pub, &si, NULL, 0), -EPROTO);
    cr_assert_eq(derp_server_info_open(frame + 5, 39, &client, &server.pub, &si, NULL, 0),
                 -EBADMSG);
    uint8_t scratch[13];
    cr_assert_eq(derp_server_info_open(frame + 5, n - 5, &client, &server.pub, &si, scratch, 12),
                 -ENOSPC);
    cr_assert_eq(derp_server_info_open(frame + 5, n - 5, &client, &server.pub, &si, scratch, 13),
                 0);
}

Test(derp_handshake, seal_to_degenerate_key)
{
    uint8_t buf[256];
    struct derp_pubkey zero = {{0}};
    struct derp_client_info info = {.version = 2};
    cr_assert_eq(derp_client_info_seal(buf, sizeof(buf), &client, &zero, &info, NULL), -EINVAL);
    cr_assert_eq(derp_server_info_seal(buf, sizeof(buf), &server, &zero, NULL, NULL), -EINVAL);
}

/* Seals arbitrary plaintext as a client would (to test the server's JSON handling end to end). */
static int open_json(const char *json, struct derp_client_info *info)
{
    uint8_t buf[2048], nonce[24] = {7};
    size_t len = strlen(json);
    memcpy(buf, client.pub.bytes, 32);
    memcpy(buf + 32, nonce, 24);
    cr_assert_eq(crypto_box_easy(buf + 56, (const uint8_t *)json, len, nonce, server.pub.bytes,
                                 client.priv.bytes),
                 0);
    struct derp_pubkey ck;
    return derp_client_info_open(buf, 56 + 16 + len, &server, &ck, info, NULL, 0);
}

/* ---- ClientInfo JSON rules (§4.1, §13.6, TestClientInfoUnmarshal)
 * -------------------------------- */

#define MK "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

Test(derp_handshake, json_case_insensitive_keys)
{
    struct derp_client_info ci;
    cr_assert_eq(open_json("{\"Version\":2,\"MeshKey\":\"" MK "\"}", &ci), 0);
    cr_assert(ci.version == 2 && ci.has_mesh_key && ci.mesh_key.bytes[0] == 0x01);
    cr_assert_eq(open_json("{\"VERSION\":3,\"meshkey\":\"" MK "\",\"canackpings\":true,"
                           "\"ISPROBER\":true,\"appname\":\"x\"}",
                           &ci),
                 0);
    cr_assert(ci.version == 3 && ci.has_mesh_key && ci.can_ack_pings && ci.is_prober);
    cr_assert_str_eq(ci.app_name, "x");
    cr_assert_eq(derp_client_info_parse_json((const uint8_t *)"{\"cAnAcKpInGs\":true}", 20, &ci),
                 0);
    cr_assert(ci.can_ack_pings && ci.version == 0);
}

static int parse(const char *json, struct derp_client_info *ci)
{
    return derp_client_info_parse_json((const uint8_t *)json, strlen(json), ci);
}

Test(derp_handshake, json_unknown_keys_nulls_duplicates)
{
    struct derp_client_info ci;
    cr_assert_eq(parse(" {\"x\":{\"y\":[1,2,{\"z\":null}]},\"version\":2,\"q\":\"s\"} \n", &ci), 0);
    cr_assert_eq(ci.version, 2);
    cr_assert_eq(parse("{\"version\":null,\"CanAckPings\":null,\"AppName\":null}", &ci), 0);
    cr_assert(ci.version == 0 && !ci.can_ack_pings);
    cr_assert_eq(parse("{\"version\":2,\"Version\":null}", &ci), 0);
    cr_assert_eq(ci.version, 2, "null leaves the earlier value (Go)");
    cr_assert_eq(parse("{\"version\":2,\"Version\":3}", &ci), 0);
    cr_assert_eq(ci.version, 3, "last match wins");
    cr_assert_eq(parse("{\"version\":-1}", &ci), 0);
    cr_assert_eq(ci.version, -1);
    cr_assert_eq(parse("null", &ci), 0, "json.Unmarshal(null) is a no-op");
    cr_assert_eq(parse("{}", &ci), 0);
    cr_assert_eq(parse("{\"AppName\":\"a\\u0000b\"}", &ci), 0);
    cr_assert_str_eq(ci.app_name, "a");
}

/* Go's json.Unmarshal replaces each invalid UTF-8 byte in a string with U+FFFD (issue 16): the
 * login goes on, AppName carries the replacements; outside strings it is still a syntax error. */
Test(derp_handshake, json_invalid_utf8_replaced)
{
    struct derp_client_info ci;
    cr_assert_eq(parse("{\"AppName\":\"a\xff\xc0\x80"
                       "b\",\"version\":2}",
                       &ci),
                 0);
    cr_assert_eq(ci.version, 2);
    cr_assert_str_eq(ci.app_name, "a\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"
                                  "b");
    cr_assert_eq(parse("{\"x\":\"\xed\xa0\x80\xf4\x90\x80\x80\xe2\x82\",\"version\":3}", &ci), 0,
                 "surrogates, > U+10FFFF and a cut sequence in an unknown field");
    cr_assert_eq(ci.version, 3);
    cr_assert_eq(parse("{\"AppName\":\"\xc3\xa9\xf0\x9f\x98\x80\"}", &ci), 0);
    cr_assert_str_eq(ci.app_name, "\xc3\xa9\xf0\x9f\x98\x80", "valid UTF-8 is kept");
    cr_assert_eq(parse("{\"version\":2\xff}", &ci), -EPROTO, "outside a string: syntax error");
}

/* Go's decoder takes nesting up to 10,000 (maxNestingDepth); jansson stops at 2,048. A deep
 * unknown field logs in; a deep known one is a type error as in Go; 10,001 levels are refused. */
static int parse_nested(unsigned levels, const char *key, const char *tail)
{
    size_t len = 16 + strlen(key) + 2 * levels + strlen(tail);
    char *j = malloc(len + 1);
    cr_assert_not_null(j);
    int n = sprintf(j, "{\"%s\":", key);
    memset(j + n, '[', levels);
    memset(j + n + levels, ']', levels);
    strcpy(j + n + 2 * levels, tail);
    struct derp_client_info ci = {0};
    int rc = derp_client_info_parse_json((const uint8_t *)j, strlen(j), &ci);
    free(j);
    if (rc == 0)
        cr_assert_eq(ci.version, 2, "the field after the deep one was read");
    return rc;
}

Test(derp_handshake, json_nesting_as_go)
{
    cr_assert_eq(parse_nested(3000, "x", ",\"version\":2}"), 0, "3,000 levels (jansson: 2,048)");
    cr_assert_eq(parse_nested(9999, "x", ",\"version\":2}"), 0, "9,999 + the top object");
    cr_assert_eq(parse_nested(10000, "x", ",\"version\":2}"), -EPROTO, "10,001 levels");
    cr_assert_eq(parse_nested(3000, "version", "}"), -EPROTO, "an array for version");
    cr_assert_eq(parse_nested(3000, "x", ",\"version\":2"), -EPROTO, "not closed");
    cr_assert_eq(parse_nested(100, "x", ",\"version\":2}"), 0, "shallow: jansson alone");
}

Test(derp_handshake, json_rejections)
{
    struct derp_client_info ci = {.version = 77};
    const char *bad[] = {
        "",
        "   ",
        "{",
        "{\"version\":2} x",
        "{\"version\":2}{}",
        "[]",
        "2",
        "\"s\"",
        "{\"version\":\"2\"}",
        "{\"version\":2.0}",
        "{\"version\":2e0}",
        "{\"version\":99999999999999999999}",
        "{\"CanAckPings\":1}",
        "{\"IsProber\":\"true\"}",
        "{\"AppName\":5}",
        "{\"meshKey\":\"\"}",
        "{\"meshKey\":null}",
        "{\"meshKey\":5}",
        "{\"meshKey\":[]}",
        "{\"meshKey\":\"" MK "0\"}",
        "{\"meshKey\":\"" MK "00\"}",
        "{\"meshKey\":\"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde\"}",
        "{\"meshKey\":\"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdeg\"}",
        "{\"meshKey\":\" " MK "\"}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        cr_assert_eq(parse(bad[i], &ci), -EPROTO, "accepted: %s", bad[i]);
    cr_assert_eq(ci.version, 77, "output untouched on failure");
    /* End to end the same: the server closes. */
    cr_assert_eq(open_json("{\"meshKey\":\"short\"}", &ci), -EPROTO);
    cr_assert_eq(open_json("not json", &ci), -EPROTO);
}

Test(derp_handshake, json_mesh_key_forms)
{
    struct derp_client_info ci;
    cr_assert_eq(parse("{\"meshKey\":\"0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789ab"
                       "cdef\"}",
                       &ci),
                 0, "upper-case hex decodes (Go hex.Decode)");
    cr_assert(ci.has_mesh_key && ci.mesh_key.bytes[7] == 0xEF);
    cr_assert_eq(parse("{\"meshKey\":\"\\u0030123456789abcdef0123456789abcdef0123456789abcdef0123"
                       "456789abcdef\"}",
                       &ci),
                 0, "JSON escapes are decoded first");
    cr_assert_eq(parse("{\"version\":2}", &ci), 0);
    cr_assert(!ci.has_mesh_key && derp_mesh_key_is_zero(&ci.mesh_key));
}

Test(derp_handshake, json_app_name_truncation)
{
    struct derp_client_info ci;
    char json[256], name[80];
    memset(name, 'a', 62);
    strcpy(name + 62, "\xc3\xa9zz"); /* 62 ASCII + "é" (2 bytes): the é would be cut in half */
    snprintf(json, sizeof(json), "{\"AppName\":\"%s\"}", name);
    cr_assert_eq(parse(json, &ci), 0);
    cr_assert_eq(strlen(ci.app_name), 62);
    memset(name, 'b', 61);
    strcpy(name + 61, "\xc3\xa9zz"); /* the é fits exactly */
    snprintf(json, sizeof(json), "{\"AppName\":\"%s\"}", name);
    cr_assert_eq(parse(json, &ci), 0);
    cr_assert_eq(strlen(ci.app_name), 63);
    cr_assert_str_eq(ci.app_name + 61, "\xc3\xa9");
}

Test(derp_handshake, json_format_go_style)
{
    char json[DERP_CLIENT_INFO_JSON_MAX + 1];
    struct derp_client_info ci = {.version = 2, .has_mesh_key = true};
    memset(ci.mesh_key.bytes, 0xab, 32);
    ssize_t n = derp_client_info_format_json(json, sizeof(json), &ci);
    json[n] = '\0';
    cr_assert_str_eq(json,
                     "{\"meshKey\":\"abababababababababababababababab"
                     "abababababababababababababababab\",\"version\":2,\"CanAckPings\":false}");
    memset(ci.mesh_key.bytes, 0, 32); /* zero key: omitted (omitzero) */
    ci.version = 0;
    n = derp_client_info_format_json(json, sizeof(json), &ci);
    json[n] = '\0';
    cr_assert_str_eq(json, "{\"CanAckPings\":false}");

    snprintf(ci.app_name, sizeof(ci.app_name), "<a&b>\"\\\t\x01\xe2\x80\xa8\xe2\x80\xa9\xc3\xa9");
    n = derp_client_info_format_json(json, sizeof(json), &ci);
    json[n] = '\0';
    cr_assert_str_eq(json,
                     "{\"CanAckPings\":false,\"AppName\":"
                     "\"\\u003ca\\u0026b\\u003e\\\"\\\\\\u0009\\u0001\\u2028\\u2029\xc3\xa9\"}");
    struct derp_client_info back;
    cr_assert_eq(derp_client_info_parse_json((uint8_t *)json, (size_t)n, &back), 0);
    cr_assert_str_eq(back.app_name, ci.app_name);

    const char *invalid[] = {"\xff", "\xc3", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80"};
    for (size_t i = 0; i < sizeof(invalid) / sizeof(invalid[0]); i++) {
        snprintf(ci.app_name, sizeof(ci.app_name), "%s", invalid[i]);
        cr_assert_eq(derp_client_info_format_json(json, sizeof(json), &ci), -EINVAL, "%zu", i);
    }
    ci.app_name[0] = '\0';
    cr_assert_eq(derp_client_info_format_json(json, 10, &ci), -ENOSPC);
}

Test(derp_handshake, server_info_json_rules)
{
    struct derp_server_info si;
    const char *ok = "{\"VERSION\":2,\"tokenbucketbytespersecond\":5,\"x\":[]}";
    cr_assert_eq(derp_server_info_parse_json((const uint8_t *)ok, strlen(ok), &si), 0);
    cr_assert(si.version == 2 && si.token_bucket_bytes_per_second == 5);
    const char *bad = "{\"version\":\"2\"}";
    cr_assert_eq(derp_server_info_parse_json((const uint8_t *)bad, strlen(bad), &si), -EPROTO);
    cr_assert_eq(derp_server_info_parse_json((const uint8_t *)"[1]", 3, &si), -EPROTO);
    cr_assert_eq(derp_server_info_parse_json((const uint8_t *)"{}", 2, &si), 0);
}
