/* derp_handshake.c - ServerKey / ClientInfo / ServerInfo payloads (§4): NaCl box seal and open
 * (libsodium crypto_box_easy: nonce[24] || tag[16] || ciphertext, §3) and the two JSON blobs,
 * decoded the way Go's encoding/json decodes them (jansson underneath). Runs on the shard doing
 * the handshake; owns only its temporaries. */
#include "derp_handshake.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "derp_frame.h"
#include "derp_json.h"

_Static_assert(crypto_box_NONCEBYTES == DERP_NONCE_LEN, "NaCl box nonce");
_Static_assert(crypto_box_MACBYTES == DERP_BOX_MAC_LEN, "NaCl box tag");
_Static_assert(crypto_box_PUBLICKEYBYTES == DERP_KEY_LEN, "NaCl box keys are X25519 keys");
_Static_assert(DERP_CLIENT_INFO_JSON_MAX + DERP_SEALED_OVERHEAD + DERP_KEY_LEN <=
                   DERP_CLIENT_INFO_LEN_MAX,
               "our ClientInfo always fits the server's bound");
_Static_assert(DERP_SERVER_INFO_JSON_MAX + DERP_SEALED_OVERHEAD <= DERP_CLIENT_RECV_FRAME_LEN_MAX,
               "our ServerInfo always fits the client's bound");

/* ---- ServerKey ------------------------------------------------------------------------------- */

ssize_t derp_server_key_encode(uint8_t *buf, size_t buf_size, const struct derp_pubkey *server)
{
    return derp_frame_server_key_encode(buf, buf_size, server->bytes);
}

int derp_server_key_decode(const uint8_t *payload, size_t len, struct derp_pubkey *server)
{
    const uint8_t *key;
    int rc = derp_frame_server_key_decode(payload, len, &key);
    if (rc == 0)
        memcpy(server->bytes, key, DERP_KEY_LEN);
    return rc;
}

/* ---- JSON decoding (Go encoding/json rules, §4.1, §13.6) -------------------------------------
 * Field names match case-insensitively; the last matching key wins; null leaves a field as it
 * was (Go: null into a non-pointer is a no-op) except meshKey, whose UnmarshalJSON rejects it;
 * wrong types are errors; unknown keys are ignored. */

/* 1 = null (no effect), 0 = stored, -EPROTO = wrong type. */
static int json_get_int(const json_t *v, int64_t *out)
{
    if (json_is_null(v))
        return 1;
    if (!json_is_integer(v)) /* Go: 2.0 and 2e0 do not fit an int either */
        return -EPROTO;
    *out = (int64_t)json_integer_value(v);
    return 0;
}

static int json_get_bool(const json_t *v, bool *out)
{
    if (json_is_null(v))
        return 1;
    if (!json_is_boolean(v))
        return -EPROTO;
    *out = json_is_true(v);
    return 0;
}

/* types/key/derp.go DERPMesh.UnmarshalJSON: a string of exactly 64 hex digits, nothing else
 * (no trimming here, unlike the flag file). */
static int json_get_mesh_key(const json_t *v, struct derp_mesh_key *out)
{
    if (!json_is_string(v))
        return -EPROTO;
    if (derp_key_hex_parse(json_string_value(v), json_string_length(v), out->bytes) < 0)
        return -EPROTO;
    return 0;
}

/* Keeps at most DERP_APP_NAME_LEN_MAX bytes, cut before a partial UTF-8 sequence or a NUL. */
static int json_get_app_name(const json_t *v, char out[DERP_APP_NAME_LEN_MAX + 1])
{
    if (json_is_null(v))
        return 1;
    if (!json_is_string(v))
        return -EPROTO;
    const char *s = json_string_value(v);
    size_t n = strnlen(s, json_string_length(v));
    if (n > DERP_APP_NAME_LEN_MAX) {
        n = DERP_APP_NAME_LEN_MAX;
        while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
            n--; /* s[n] continues a character we would cut: drop that character */
    }
    memcpy(out, s, n);
    out[n] = '\0';
    return 0;
}

/* Length of the valid UTF-8 sequence at p (1..4), or 0 where Go's utf8.DecodeRune sees an
 * error (a stray continuation byte, an overlong form, a surrogate, above U+10FFFF, cut off). */
static size_t utf8_valid_len(const uint8_t *p, size_t left)
{
    uint8_t b = p[0];
    if (b < 0x80)
        return 1;
    size_t n = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 0;
    if (n == 0 || b >= 0xF5 || b == 0xC0 || b == 0xC1 || n > left)
        return 0;
    for (size_t i = 1; i < n; i++)
        if ((p[i] & 0xC0) != 0x80)
            return 0;
    if ((b == 0xE0 && p[1] < 0xA0) || (b == 0xED && p[1] >= 0xA0) || /* overlong, surrogate */
        (b == 0xF0 && p[1] < 0x90) || (b == 0xF4 && p[1] >= 0x90))   /* overlong, > U+10FFFF */
        return 0;
    return n;
}

/* Go's decoder replaces each byte of invalid UTF-8 with U+FFFD (in strings; elsewhere it is a
 * syntax error either way); jansson refuses the document. A copy with the replacements (3 bytes
 * each: at most 3x), or NULL (*out_len = len) when text is valid. Login path, not data path. */
static uint8_t *utf8_sanitize(const uint8_t *text, size_t len, size_t *out_len)
{
    size_t i = 0, n;
    while (i < len && (n = utf8_valid_len(text + i, len - i)) > 0)
        i += n;
    *out_len = len;
    if (i == len)
        return NULL;
    uint8_t *o = malloc(3 * len);
    if (o == NULL)
        return NULL;
    memcpy(o, text, i);
    size_t k = i;
    while (i < len) {
        n = utf8_valid_len(text + i, len - i);
        if (n == 0) {
            memcpy(o + k, "\xEF\xBF\xBD", 3);
            k += 3;
            i++;
        } else {
            memcpy(o + k, text + i, n);
            k += n;
            i += n;
        }
    }
    *out_len = k;
    return o;
}

/* Parses text into a JSON value the way json.Unmarshal sees a document: any top-level value,
 * trailing whitespace only, \u0000 allowed in strings, invalid UTF-8 as U+FFFD. */
static json_t *json_parse(const uint8_t *text, size_t len)
{
    json_error_t jerr;
    size_t n;
    uint8_t *clean = utf8_sanitize(text, len, &n);
    const uint8_t *doc = clean ? clean : text;
    json_t *v = json_loadb((const char *)doc, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
    struct derp_json_deep *deep = v ? NULL : malloc(sizeof(*deep));
    if (deep && derp_json_scan(doc, n, deep) == 0 && deep->count > 0) {
        /* nested deeper than jansson goes but within Go's 10,000: those members become [] */
        size_t flat_len;
        uint8_t *flat = derp_json_flatten(doc, n, deep, &flat_len);
        if (flat)
            v = json_loadb((const char *)flat, flat_len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
        free(flat);
    }
    free(deep);
    free(clean);
    return v;
}

static int client_info_field(const char *name, const json_t *v, void *out)
{
    struct derp_client_info *ci = out;
    int rc = 1;
    if (strcasecmp(name, "version") == 0) {
        rc = json_get_int(v, &ci->version);
    } else if (strcasecmp(name, "meshKey") == 0) {
        rc = json_get_mesh_key(v, &ci->mesh_key);
        if (rc == 0)
            ci->has_mesh_key = true;
    } else if (strcasecmp(name, "CanAckPings") == 0) {
        rc = json_get_bool(v, &ci->can_ack_pings);
    } else if (strcasecmp(name, "IsProber") == 0) {
        rc = json_get_bool(v, &ci->is_prober);
    } else if (strcasecmp(name, "AppName") == 0) {
        rc = json_get_app_name(v, ci->app_name);
    }
    return rc < 0 ? rc : 0;
}

/* Go's json.Unmarshal into a struct: an object whose fields field() takes one by one (unknown
 * keys ignored by it), or a bare null (a no-op). Returns 0 or -EPROTO. */
typedef int json_field_fn(const char *name, const json_t *v, void *out);

static int parse_object(const uint8_t *text, size_t len, json_field_fn *field, void *out)
{
    json_t *root = json_parse(text, len);
    if (!root)
        return -EPROTO;
    int rc = 0;
    if (json_is_object(root)) {
        const char *name;
        json_t *v;
        json_object_foreach(root, name, v)
        {
            rc = field(name, v, out);
            if (rc < 0)
                break;
        }
    } else if (!json_is_null(root)) {
        rc = -EPROTO;
    }
    json_decref(root);
    return rc;
}

int derp_client_info_parse_json(const uint8_t *text, size_t len, struct derp_client_info *info)
{
    struct derp_client_info ci;
    memset(&ci, 0, sizeof(ci));
    int rc = parse_object(text, len, client_info_field, &ci);
    if (rc == 0)
        *info = ci;
    sodium_memzero(&ci, sizeof(ci)); /* it held the mesh key */
    return rc;
}

static int server_info_field(const char *name, const json_t *v, void *out)
{
    struct derp_server_info *si = out;
    int rc = 1;
    if (strcasecmp(name, "version") == 0)
        rc = json_get_int(v, &si->version);
    else if (strcasecmp(name, "TokenBucketBytesPerSecond") == 0)
        rc = json_get_int(v, &si->token_bucket_bytes_per_second);
    else if (strcasecmp(name, "TokenBucketBytesBurst") == 0)
        rc = json_get_int(v, &si->token_bucket_bytes_burst);
    return rc < 0 ? rc : 0;
}

int derp_server_info_parse_json(const uint8_t *text, size_t len, struct derp_server_info *info)
{
    struct derp_server_info si = {0};
    int rc = parse_object(text, len, server_info_field, &si);
    if (rc == 0)
        *info = si;
    return rc;
}

/* ---- JSON encoding -----------------------------------------------------------------------------
 */

struct out {
    char *p;
    size_t len;
    size_t size;
    bool full;
};

static void out_bytes(struct out *o, const char *s, size_t n)
{
    if (o->full || o->size - o->len < n) {
        o->full = true;
        return;
    }
    memcpy(o->p + o->len, s, n);
    o->len += n;
}

static void out_str(struct out *o, const char *s)
{
    out_bytes(o, s, strlen(s));
}

static void out_field_int(struct out *o, bool *first, const char *name, int64_t v)
{
    char num[32];
    snprintf(num, sizeof(num), "%" PRId64, v);
    out_str(o, *first ? "{\"" : ",\"");
    out_str(o, name);
    out_str(o, "\":");
    out_str(o, num);
    *first = false;
}

static void out_field_bool(struct out *o, bool *first, const char *name, bool v)
{
    out_str(o, *first ? "{\"" : ",\"");
    out_str(o, name);
    out_str(o, v ? "\":true" : "\":false");
    *first = false;
}

/* Length of the valid UTF-8 sequence at s (RFC 3629: no overlongs, no surrogates, <= U+10FFFF),
 * or 0 if invalid. */
static size_t utf8_seq_len(const unsigned char *s, size_t n)
{
    if (s[0] < 0x80)
        return 1;
    size_t len = s[0] >= 0xF0 ? 4 : s[0] >= 0xE0 ? 3 : s[0] >= 0xC2 ? 2 : 0;
    if (len == 0 || len > n || s[0] > 0xF4)
        return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    if ((s[0] == 0xE0 && s[1] < 0xA0) || (s[0] == 0xED && s[1] >= 0xA0) ||
        (s[0] == 0xF0 && s[1] < 0x90) || (s[0] == 0xF4 && s[1] >= 0x90))
        return 0;
    return len;
}

/* A JSON string the way Go writes it: ", \, control characters, and the HTML-sensitive < > &
 * and U+2028/U+2029 escaped. Returns -EINVAL on invalid UTF-8 (Go would write U+FFFD). */
static int out_json_string(struct out *o, const char *str)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t n = strlen(str);
    out_str(o, "\"");
    for (size_t i = 0; i < n;) {
        size_t seq = utf8_seq_len(s + i, n - i);
        if (seq == 0)
            return -EINVAL;
        char esc[8];
        bool line_sep = seq == 3 && s[i] == 0xE2 && s[i + 1] == 0x80 && (s[i + 2] & 0xFE) == 0xA8;
        if (s[i] == '"' || s[i] == '\\') {
            esc[0] = '\\';
            esc[1] = (char)s[i];
            out_bytes(o, esc, 2);
        } else if (s[i] < 0x20 || s[i] == '<' || s[i] == '>' || s[i] == '&') {
            snprintf(esc, sizeof(esc), "\\u%04x", s[i]);
            out_bytes(o, esc, 6);
        } else if (line_sep) {
            out_str(o, s[i + 2] == 0xA8 ? "\\u2028" : "\\u2029");
        } else {
            out_bytes(o, (const char *)s + i, seq);
        }
        i += seq;
    }
    out_str(o, "\"");
    return 0;
}

ssize_t derp_client_info_format_json(char *buf, size_t buf_size,
                                     const struct derp_client_info *info)
{
    struct out o = {.p = buf, .size = buf_size};
    bool first = true;

    /* derp.ClientInfo field order; meshKey omitzero, version omitempty, CanAckPings always. */
    if (info->has_mesh_key && !derp_mesh_key_is_zero(&info->mesh_key)) {
        char hex[DERP_KEY_HEX_SIZE];
        derp_mesh_key_format(&info->mesh_key, hex);
        out_str(&o, "{\"meshKey\":\"");
        out_str(&o, hex);
        out_str(&o, "\"");
        sodium_memzero(hex, sizeof(hex));
        first = false;
    }
    if (info->version != 0)
        out_field_int(&o, &first, "version", info->version);
    out_field_bool(&o, &first, "CanAckPings", info->can_ack_pings);
    if (info->is_prober)
        out_field_bool(&o, &first, "IsProber", true);
    if (info->app_name[0] != '\0') {
        out_str(&o, ",\"AppName\":");
        if (out_json_string(&o, info->app_name) < 0)
            return -EINVAL;
    }
    out_str(&o, "}");
    return o.full ? -ENOSPC : (ssize_t)o.len;
}

ssize_t derp_server_info_format_json(char *buf, size_t buf_size,
                                     const struct derp_server_info *info)
{
    struct out o = {.p = buf, .size = buf_size};
    bool first = true;

    /* derp.ServerInfo: every field omitempty. */
    if (info->version != 0)
        out_field_int(&o, &first, "version", info->version);
    if (info->token_bucket_bytes_per_second != 0)
        out_field_int(&o, &first, "TokenBucketBytesPerSecond", info->token_bucket_bytes_per_second);
    if (info->token_bucket_bytes_burst != 0)
        out_field_int(&o, &first, "TokenBucketBytesBurst", info->token_bucket_bytes_burst);
    out_str(&o, first ? "{}" : "}");
    return o.full ? -ENOSPC : (ssize_t)o.len;
}

/* ---- Box
 * ----------------------------------------------------------------------------------------- */

/* nonce || crypto_box_easy(plain) at out. out_size must hold plain_len + 40. */
static int seal(uint8_t *out, const uint8_t *plain, size_t plain_len, const uint8_t *nonce,
                const struct derp_pubkey *to, const struct derp_privkey *from)
{
    if (derp_crypto_init() < 0)
        return -EIO;
    if (nonce)
        memcpy(out, nonce, DERP_NONCE_LEN);
    else
        randombytes_buf(out, DERP_NONCE_LEN);
    /* Fails only if the shared point is zero (a low-order peer key). */
    if (crypto_box_easy(out + DERP_NONCE_LEN, plain, plain_len, out, to->bytes, from->bytes) != 0)
        return -EINVAL;
    return 0;
}

/* Opens nonce || box into scratch (or a malloc'd buffer, *owned), *plain_len set. */
static int open_box(const uint8_t *sealed, size_t sealed_len, const struct derp_pubkey *from,
                    const struct derp_privkey *to, uint8_t *scratch, size_t scratch_size,
                    uint8_t **plain, size_t *plain_len, uint8_t **owned)
{
    *owned = NULL;
    if (sealed_len < DERP_SEALED_OVERHEAD)
        return -EBADMSG;
    if (derp_crypto_init() < 0)
        return -EIO;
    size_t n = sealed_len - DERP_SEALED_OVERHEAD;
    if (!scratch) {
        *owned = malloc(n ? n : 1);
        if (!*owned)
            return -ENOMEM;
        scratch = *owned;
    } else if (scratch_size < n) {
        return -ENOSPC;
    }
    if (crypto_box_open_easy(scratch, sealed + DERP_NONCE_LEN, sealed_len - DERP_NONCE_LEN, sealed,
                             from->bytes, to->bytes) != 0) {
        free(*owned);
        *owned = NULL;
        return -EBADMSG;
    }
    *plain = scratch;
    *plain_len = n;
    return 0;
}

static void wipe_free(uint8_t *plain, size_t len, uint8_t *owned)
{
    if (plain)
        sodium_memzero(plain, len); /* ClientInfo carries the mesh key */
    free(owned);
}

/* ---- ClientInfo / ServerInfo -------------------------------------------------------------------
 */

ssize_t derp_client_info_seal(uint8_t *buf, size_t buf_size, const struct derp_keypair *client,
                              const struct derp_pubkey *server, const struct derp_client_info *info,
                              const uint8_t nonce[DERP_NONCE_LEN])
{
    char json[DERP_CLIENT_INFO_JSON_MAX];
    ssize_t json_len = derp_client_info_format_json(json, sizeof(json), info);
    if (json_len < 0)
        return json_len;

    const size_t sealed_off = DERP_FRAME_HEADER_LEN + DERP_KEY_LEN;
    const size_t sealed_len = DERP_SEALED_OVERHEAD + (size_t)json_len;
    if (buf_size < sealed_off + sealed_len) {
        sodium_memzero(json, sizeof(json));
        return -ENOSPC;
    }
    int rc = seal(buf + sealed_off, (const uint8_t *)json, (size_t)json_len, nonce, server,
                  &client->priv);
    sodium_memzero(json, sizeof(json));
    if (rc < 0)
        return rc;
    /* Header and key around the sealed blob already in place (encode moves it onto itself). */
    return derp_frame_client_info_encode(buf, buf_size, client->pub.bytes, buf + sealed_off,
                                         sealed_len);
}

int derp_client_info_open(const uint8_t *payload, size_t len, const struct derp_keypair *server,
                          struct derp_pubkey *client_key, struct derp_client_info *info,
                          uint8_t *scratch, size_t scratch_size)
{
    struct derp_client_info_frame f;
    int rc = derp_frame_client_info_decode(payload, len, &f);
    if (rc < 0)
        return rc;
    struct derp_pubkey from;
    memcpy(from.bytes, f.client_key, DERP_KEY_LEN);

    uint8_t *plain = NULL, *owned = NULL;
    size_t plain_len = 0;
    rc = open_box(f.sealed, f.sealed_len, &from, &server->priv, scratch, scratch_size, &plain,
                  &plain_len, &owned);
    if (rc < 0)
        return rc;
    rc = derp_client_info_parse_json(plain, plain_len, info);
    wipe_free(plain, plain_len, owned);
    if (rc == 0)
        *client_key = from;
    return rc;
}

ssize_t derp_server_info_seal(uint8_t *buf, size_t buf_size, const struct derp_keypair *server,
                              const struct derp_pubkey *client_key,
                              const struct derp_server_info *info,
                              const uint8_t nonce[DERP_NONCE_LEN])
{
    static const struct derp_server_info reference = {.version = DERP_PROTOCOL_VERSION};
    char json[DERP_SERVER_INFO_JSON_MAX];
    ssize_t json_len = derp_server_info_format_json(json, sizeof(json), info ? info : &reference);
    if (json_len < 0)
        return json_len;

    const size_t sealed_len = DERP_SEALED_OVERHEAD + (size_t)json_len;
    if (buf_size < DERP_FRAME_HEADER_LEN + sealed_len)
        return -ENOSPC;
    int rc = seal(buf + DERP_FRAME_HEADER_LEN, (const uint8_t *)json, (size_t)json_len, nonce,
                  client_key, &server->priv);
    if (rc < 0)
        return rc;
    return derp_frame_server_info_encode(buf, buf_size, buf + DERP_FRAME_HEADER_LEN, sealed_len);
}

int derp_server_info_open(const uint8_t *payload, size_t len, const struct derp_keypair *client,
                          const struct derp_pubkey *server, struct derp_server_info *info,
                          uint8_t *scratch, size_t scratch_size)
{
    struct derp_server_info_frame f;
    int rc = derp_frame_server_info_decode(payload, len, &f);
    if (rc < 0)
        return rc;
    uint8_t *plain = NULL, *owned = NULL;
    size_t plain_len = 0;
    rc = open_box(f.sealed, f.sealed_len, server, &client->priv, scratch, scratch_size, &plain,
                  &plain_len, &owned);
    if (rc < 0)
        return rc;
    rc = derp_server_info_parse_json(plain, plain_len, info);
    wipe_free(plain, plain_len, owned);
    return rc;
}
