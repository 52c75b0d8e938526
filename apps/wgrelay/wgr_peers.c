/* wgr_peers.c - the peers file: one registered peer a line,
 *
 *     pubkey [name [allowed-peer...]]     # comment
 *
 * pubkey is the peer's WireGuard public key in base64; name (letters, digits, '.', '_', '-';
 * '-' alone: no name) is how logs and other lines refer to it; the allowed peers (names or keys)
 * are the only ones it may talk to. A line without an allow list may talk to every registered
 * peer. A pair talks when each side allows the other. The whole file is checked before it
 * replaces the list in use: one bad line refuses the file. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wgr.h"

#define WGR_PEERS_FILE_MAX (4u << 20) /* 4096 lines of 64 allowed keys fit */
#define WGR_TOKENS_MAX     (2u + WGR_ALLOW_MAX)

struct parse_line {
    unsigned lineno, ntok;
    const char *tok[WGR_TOKENS_MAX];
};

static bool name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n >= WGR_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return false;
    }
    return true;
}

/* Split buf (NUL-terminated, modified) into lines of tokens; comments and blank lines go. */
static int split(char *buf, struct parse_line *lines, unsigned *count, char *err, size_t esz)
{
    unsigned n = 0, lineno = 0;
    for (char *save = NULL, *line = buf; line; line = save) {
        save = strchr(line, '\n');
        if (save)
            *save++ = '\0';
        lineno++;
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        struct parse_line pl = {.lineno = lineno};
        for (char *sp = NULL, *t = strtok_r(line, " \t\r", &sp); t;
             t = strtok_r(NULL, " \t\r", &sp)) {
            if (pl.ntok == WGR_TOKENS_MAX) {
                snprintf(err, esz, "line %u: more than %u allowed peers", lineno, WGR_ALLOW_MAX);
                return -EINVAL;
            }
            pl.tok[pl.ntok++] = t;
        }
        if (pl.ntok == 0)
            continue;
        if (n == WGR_PEERS_MAX) {
            snprintf(err, esz, "line %u: more than %u peers", lineno, WGR_PEERS_MAX);
            return -EINVAL;
        }
        lines[n++] = pl;
    }
    *count = n;
    return 0;
}

static unsigned find_ref(const struct wgr_peers *ps, const char *ref)
{
    uint8_t k[WGR_KEY_LEN];
    if (wgr_key_parse(ref, k) == 0)
        return wgr_peer_find(ps, k);
    for (unsigned i = 0; i < ps->count; i++)
        if (ps->peer[i].name[0] && strcmp(ps->peer[i].name, ref) == 0)
            return i;
    return WGR_PEER_NONE;
}

/* First pass: keys and names, unique. */
static int fill_keys(struct wgr_peers *ps, const struct parse_line *lines, unsigned n, char *err,
                     size_t esz)
{
    for (unsigned i = 0; i < n; i++) {
        struct wgr_peer *p = &ps->peer[i];
        const struct parse_line *l = &lines[i];
        if (wgr_key_parse(l->tok[0], p->pub) < 0) {
            snprintf(err, esz, "line %u: '%.60s' is not a base64 WireGuard public key", l->lineno,
                     l->tok[0]);
            return -EINVAL;
        }
        if (wgr_peer_find(ps, p->pub) != WGR_PEER_NONE) {
            snprintf(err, esz, "line %u: key %.60s is listed twice", l->lineno, l->tok[0]);
            return -EINVAL;
        }
        if (l->ntok > 1 && strcmp(l->tok[1], "-") != 0) {
            uint8_t k[WGR_KEY_LEN];
            if (!name_ok(l->tok[1]) || wgr_key_parse(l->tok[1], k) == 0) {
                snprintf(err, esz,
                         "line %u: bad name '%.60s' (1-%u of A-Z a-z 0-9 . _ -, not a key)",
                         l->lineno, l->tok[1], WGR_NAME_MAX - 1);
                return -EINVAL;
            }
            if (find_ref(ps, l->tok[1]) != WGR_PEER_NONE) {
                snprintf(err, esz, "line %u: name %s is used twice", l->lineno, l->tok[1]);
                return -EINVAL;
            }
            memcpy(p->name, l->tok[1], strlen(l->tok[1]) + 1);
        }
        wgr_mac1_key(p->pub, p->mac1_key);
        wgr_cookie_key(p->pub, p->cookie_key);
        ps->count = i + 1;
    }
    return 0;
}

static void peers_free(struct hd_snap *sn)
{
    free(sn);
}

struct wgr_peers *wgr_peers_parse(const char *text, size_t len, char *err, size_t esz)
{
    struct parse_line *lines = calloc(WGR_PEERS_MAX, sizeof(*lines));
    char *buf = malloc(len + 1);
    struct wgr_peers *ps = NULL;
    unsigned n = 0;
    if (lines == NULL || buf == NULL) {
        snprintf(err, esz, "out of memory");
        goto out;
    }
    memcpy(buf, text, len);
    buf[len] = '\0';
    if (memchr(text, '\0', len) != NULL) {
        snprintf(err, esz, "a NUL byte in the file");
        goto out;
    }
    if (split(buf, lines, &n, err, esz) < 0)
        goto out;
    ps = calloc(1, sizeof(*ps) + (size_t)(n ? n : 1) * sizeof(ps->peer[0]));
    if (ps == NULL) {
        snprintf(err, esz, "out of memory");
        goto out;
    }
    hd_snap_init(&ps->snap, peers_free);
    if (fill_keys(ps, lines, n, err, esz) < 0)
        goto bad;
    for (unsigned i = 0; i < n; i++) {
        struct wgr_peer *p = &ps->peer[i];
        p->allow_any = lines[i].ntok <= 2;
        for (unsigned j = 2; j < lines[i].ntok; j++) {
            unsigned id = find_ref(ps, lines[i].tok[j]);
            if (id == WGR_PEER_NONE) {
                snprintf(err, esz, "line %u: allowed peer '%.60s' is not a registered name or key",
                         lines[i].lineno, lines[i].tok[j]);
                goto bad;
            }
            p->allow[p->allow_count++] = (uint16_t)id;
        }
    }
    goto out;
bad:
    free(ps);
    ps = NULL;
out:
    free(lines);
    free(buf);
    return ps;
}

struct wgr_peers *wgr_peers_load(const char *path, char *err, size_t esz)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        snprintf(err, esz, "%s: %s", path, strerror(errno));
        return NULL;
    }
    char *buf = malloc(WGR_PEERS_FILE_MAX + 1);
    size_t n = buf ? fread(buf, 1, WGR_PEERS_FILE_MAX + 1, f) : 0;
    bool bad = buf == NULL || ferror(f) || n > WGR_PEERS_FILE_MAX;
    fclose(f);
    if (bad) {
        snprintf(err, esz, "%s: %s", path,
                 buf == NULL              ? "out of memory"
                 : n > WGR_PEERS_FILE_MAX ? "larger than 4 MiB"
                                          : "read error");
        free(buf);
        return NULL;
    }
    char why[200];
    struct wgr_peers *ps = wgr_peers_parse(buf, n, why, sizeof(why));
    free(buf);
    if (ps == NULL)
        snprintf(err, esz, "%s: %s", path, why);
    return ps;
}

static bool allows(const struct wgr_peer *p, unsigned other)
{
    if (p->allow_any)
        return true;
    for (unsigned i = 0; i < p->allow_count; i++)
        if (p->allow[i] == other)
            return true;
    return false;
}

bool wgr_pair_allowed(const struct wgr_peers *ps, unsigned a, unsigned b)
{
    if (a == b || a >= ps->count || b >= ps->count)
        return false;
    return allows(&ps->peer[a], b) && allows(&ps->peer[b], a);
}

unsigned wgr_peer_find(const struct wgr_peers *ps, const uint8_t pub[WGR_KEY_LEN])
{
    for (unsigned i = 0; i < ps->count; i++)
        if (memcmp(ps->peer[i].pub, pub, WGR_KEY_LEN) == 0)
            return i;
    return WGR_PEER_NONE;
}

unsigned wgr_peer_by_mac1(const struct wgr_peers *ps, const uint8_t *msg, size_t mac1_off)
{
    for (unsigned i = 0; i < ps->count; i++)
        if (wgr_mac1_ok(ps->peer[i].mac1_key, msg, mac1_off))
            return i;
    return WGR_PEER_NONE;
}
