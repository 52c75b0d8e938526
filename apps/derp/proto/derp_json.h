/* derp_json.h - Go's JSON nesting limit for ClientInfo (derp_json.c). */
#ifndef DERP_JSON_H
#define DERP_JSON_H

#include <stddef.h>
#include <stdint.h>

/* Go's encoding/json maxNestingDepth. */
#define DERP_JSON_DEPTH_MAX 10000u
/* Member values nested deeper than this are flattened before jansson (JSON_PARSER_MAX_DEPTH
 * 2,048 counts the whole document; the top-level object is one more level, so 2,000 keeps a
 * margin). */
#define DERP_JSON_JANSSON_DEPTH 2000u
/* Deep members one document may have: each is over 4,000 bytes, so a 256 KiB ClientInfo holds
 * at most 65. */
#define DERP_JSON_DEEP_MAX 72u

struct derp_json_deep {
    uint32_t count;
    size_t span[DERP_JSON_DEEP_MAX][2]; /* [start, end) of each deep member value */
};

/* Validates text as one JSON value (Go's grammar and nesting limit) and lists the top-level
 * object's member values nested deeper than DERP_JSON_JANSSON_DEPTH. 0, -EPROTO (not JSON,
 * too deep, too many deep members) or -ENOMEM. */
int derp_json_scan(const uint8_t *text, size_t len, struct derp_json_deep *deep);
/* A copy of text with the deep member values replaced by []; *out_len its length. NULL: no
 * memory. The caller frees it. */
uint8_t *derp_json_flatten(const uint8_t *text, size_t len, const struct derp_json_deep *deep,
                           size_t *out_len);

#endif /* DERP_JSON_H */
