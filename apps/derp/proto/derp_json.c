/* derp_json.c - Go's nesting limit for ClientInfo JSON. encoding/json accepts documents nested up
 * to 10,000 levels; jansson stops at JSON_PARSER_MAX_DEPTH (2,048), so a login whose ClientInfo
 * carries a deeply nested unknown field was refused where derper admits it (issue 16). This is
 * an iterative (no recursion) validator of RFC 8259 text as Go's scanner reads it, nesting at
 * most DERP_JSON_DEPTH_MAX, that also finds the top-level object's member values nested too
 * deep for jansson; derp_json_flatten replaces those with [] (every field we read refuses an
 * array, as Go's Unmarshal does; unknown fields are ignored either way). Pure, any thread. */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "derp_json.h"

struct skim {
    const uint8_t *p;
    size_t len, i;
    uint32_t depth;
    uint8_t kinds[DERP_JSON_DEPTH_MAX / 8 + 1]; /* bit per level: 1 object, 0 array */
};

static void ws(struct skim *s)
{
    while (s->i < s->len &&
           (s->p[s->i] == ' ' || s->p[s->i] == '\t' || s->p[s->i] == '\n' || s->p[s->i] == '\r'))
        s->i++;
}

static bool hex(uint8_t c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static bool digits(struct skim *s)
{
    size_t start = s->i;
    while (s->i < s->len && s->p[s->i] >= '0' && s->p[s->i] <= '9')
        s->i++;
    return s->i > start;
}

static bool string_(struct skim *s)
{
    if (s->i >= s->len || s->p[s->i] != '"')
        return false;
    for (s->i++; s->i < s->len; s->i++) {
        uint8_t c = s->p[s->i];
        if (c == '"') {
            s->i++;
            return true;
        }
        if (c < 0x20)
            return false;
        if (c != '\\')
            continue;
        if (++s->i >= s->len)
            return false;
        c = s->p[s->i];
        if (c == 'u') {
            for (int k = 0; k < 4; k++)
                if (++s->i >= s->len || !hex(s->p[s->i]))
                    return false;
        } else if (!strchr("\"\\/bfnrt", c) || c == 0) {
            return false;
        }
    }
    return false;
}

static bool scalar(struct skim *s)
{
    uint8_t c = s->p[s->i];
    if (c == '"')
        return string_(s);
    static const char *const lits[] = {"true", "false", "null"};
    for (int k = 0; k < 3; k++) {
        size_t n = strlen(lits[k]);
        if (s->len - s->i >= n && memcmp(s->p + s->i, lits[k], n) == 0) {
            s->i += n;
            return true;
        }
    }
    if (c == '-')
        s->i++;
    if (s->i < s->len && s->p[s->i] == '0')
        s->i++;
    else if (!digits(s))
        return false;
    if (s->i < s->len && s->p[s->i] == '.' && (s->i++, !digits(s)))
        return false;
    if (s->i < s->len && (s->p[s->i] == 'e' || s->p[s->i] == 'E')) {
        s->i++;
        if (s->i < s->len && (s->p[s->i] == '+' || s->p[s->i] == '-'))
            s->i++;
        if (!digits(s))
            return false;
    }
    return true;
}

static bool top_is_object(const struct skim *s)
{
    uint32_t d = s->depth - 1;
    return (s->kinds[d / 8] >> (d % 8)) & 1;
}

/* An object member's key and colon, at s->i. */
static bool member_key(struct skim *s)
{
    ws(s);
    if (!string_(s))
        return false;
    ws(s);
    if (s->i >= s->len || s->p[s->i] != ':')
        return false;
    s->i++;
    return true;
}

int derp_json_scan(const uint8_t *text, size_t len, struct derp_json_deep *deep)
{
    struct skim *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return -ENOMEM;
    *s = (struct skim){.p = text, .len = len};
    deep->count = 0;
    int rc = -EPROTO;
    size_t member_start = 0;
    uint32_t member_max = 0;
    for (bool want_value = true;;) {
        ws(s);
        if (s->i >= s->len)
            break;
        uint8_t c = s->p[s->i];
        if (want_value) {
            if (s->depth == 1 && top_is_object(s)) { /* a top-level member's value starts */
                member_start = s->i;
                member_max = 1;
            }
            if (c == '{' || c == '[') {
                if (s->depth >= DERP_JSON_DEPTH_MAX)
                    break; /* Go: "exceeded max depth" */
                uint32_t d = s->depth++;
                s->kinds[d / 8] = (uint8_t)((s->kinds[d / 8] & ~(1u << (d % 8))) |
                                            (unsigned)(c == '{') << (d % 8));
                if (s->depth > member_max)
                    member_max = s->depth;
                s->i++;
                ws(s);
                if (s->i < s->len && s->p[s->i] == (c == '{' ? '}' : ']')) {
                    s->depth--;
                    s->i++;
                    want_value = false;
                } else if (c == '{' && !member_key(s)) {
                    break;
                }
                continue;
            }
            if (!scalar(s))
                break;
            want_value = false;
        } else if (c == ',' && s->depth > 0) {
            s->i++;
            if (top_is_object(s) && !member_key(s))
                break;
            want_value = true;
            continue;
        } else if ((c == '}' || c == ']') && s->depth > 0 && (c == '}') == top_is_object(s)) {
            s->depth--;
            s->i++;
        } else {
            break;
        }
        /* a value ended: a top-level member's (back at depth 1 in the top object)? */
        if (s->depth == 1 && top_is_object(s) && member_max > DERP_JSON_JANSSON_DEPTH + 1) {
            if (deep->count == DERP_JSON_DEEP_MAX)
                break;
            deep->span[deep->count][0] = member_start;
            deep->span[deep->count++][1] = s->i;
        }
        if (s->depth == 1)
            member_max = 0;
        if (s->depth == 0) {
            ws(s);
            rc = s->i == s->len ? 0 : -EPROTO;
            break;
        }
    }
    free(s);
    return rc;
}

uint8_t *derp_json_flatten(const uint8_t *text, size_t len, const struct derp_json_deep *deep,
                           size_t *out_len)
{
    uint8_t *o = malloc(len + 1);
    if (o == NULL)
        return NULL;
    size_t k = 0, from = 0;
    for (uint32_t i = 0; i < deep->count; i++) {
        memcpy(o + k, text + from, deep->span[i][0] - from);
        k += deep->span[i][0] - from;
        memcpy(o + k, "[]", 2); /* a deep value is at least "[[...]]": never longer */
        k += 2;
        from = deep->span[i][1];
    }
    memcpy(o + k, text + from, len - from);
    *out_len = k + len - from;
    return o;
}
