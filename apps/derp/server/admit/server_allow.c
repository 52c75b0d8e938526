/* server_allow.c - --allow-keys FILE: only the node keys listed in FILE may log in (mesh peers
 * with the mesh key skip it, as every admission check). The file is read on the main thread at
 * start-up (a bad line refuses to start) and again on SIGHUP (a bad file is logged and the old
 * list stays); each load builds an immutable sorted array of keys in a struct hd_snap, published
 * to every shard (hd_snap_var_publish), which swaps it in between callbacks. The check runs on
 * the client's accepting shard right after ClientInfo, before -verify-client-url: a key that is
 * not listed never costs a controller request; the lookup is a binary search, and a refusal is
 * counted (hderp_allowlist_refused). The key-list loader is shared with --account-keys. Owns the
 * snapshots (freed by their last shard). */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server.h"

static void allow_free(struct hd_snap *sn)
{
    struct srv_keylist *a = hd_container_of(sn, struct srv_keylist, snap);
    free(a->keys);
    free(a);
}

static int key_cmp(const void *x, const void *y)
{
    return memcmp(x, y, DERP_KEY_LEN);
}

/* One line: "" or "# ..." (nothing), or a key with optional "# ..." after it. 1: a key, 0: none,
 * -EINVAL: something else. Surrounding white space (and a CR) is ignored. */
static int parse_line(char *line, uint8_t key[DERP_KEY_LEN])
{
    char *hash = strchr(line, '#');
    if (hash)
        *hash = '\0';
    char *p = line;
    while (isspace((unsigned char)*p))
        p++;
    size_t n = strlen(p);
    while (n > 0 && isspace((unsigned char)p[n - 1]))
        n--;
    if (n == 0)
        return 0;
    struct derp_pubkey k;
    if (derp_pubkey_parse(p, n, &k) < 0)
        return -EINVAL;
    memcpy(key, k.bytes, DERP_KEY_LEN);
    return 1;
}

static int keys_add(struct srv_keylist *a, uint32_t *cap, const uint8_t key[DERP_KEY_LEN])
{
    if (a->count == *cap) {
        uint32_t ncap = *cap ? *cap * 2 : 64;
        void *nk = realloc(a->keys, (size_t)ncap * DERP_KEY_LEN);
        if (nk == NULL)
            return -ENOMEM;
        a->keys = nk;
        *cap = ncap;
    }
    memcpy(a->keys[a->count++], key, DERP_KEY_LEN);
    return 0;
}

int srv_keylist_load(const char *path, uint32_t max, struct srv_keylist **out, char *err,
                     size_t err_size)
{
    FILE *fp = fopen(path, "re");
    if (fp == NULL) {
        int e = errno;
        snprintf(err, err_size, "%s: %s", path, strerror(e));
        return -e;
    }
    struct srv_keylist *a = calloc(1, sizeof(*a));
    char line[SRV_ALLOW_LINE_MAX + 2]; /* the longest line, its newline and the NUL */
    uint32_t cap = 0;
    unsigned lineno = 0;
    int rc = a ? 0 : -ENOMEM;
    while (rc == 0 && fgets(line, sizeof(line), fp)) {
        lineno++;
        size_t len = strlen(line);
        if (len == sizeof(line) - 1 && line[len - 1] != '\n') {
            snprintf(err, err_size, "%s:%u: line longer than %u bytes", path, lineno,
                     SRV_ALLOW_LINE_MAX);
            rc = -EINVAL;
            break;
        }
        uint8_t key[DERP_KEY_LEN];
        int k = parse_line(line, key);
        if (k < 0) {
            snprintf(err, err_size,
                     "%s:%u: not a node key (nodekey:<64 hex> or 64 hex digits, # comments)", path,
                     lineno);
            rc = -EINVAL;
        } else if (k > 0 && a->count == max) {
            snprintf(err, err_size, "%s:%u: more than %u keys", path, lineno, max);
            rc = -E2BIG;
        } else if (k > 0 && (rc = keys_add(a, &cap, key)) < 0) {
            snprintf(err, err_size, "%s: out of memory", path);
        }
    }
    if (rc == 0 && ferror(fp)) {
        snprintf(err, err_size, "%s: read error", path);
        rc = -EIO;
    }
    fclose(fp);
    if (rc < 0) {
        if (a)
            free(a->keys);
        free(a);
        return rc;
    }
    if (a->count > 1) /* no keys: a->keys is NULL, which qsort may not be given */
        qsort(a->keys, a->count, DERP_KEY_LEN, key_cmp);
    uint32_t unique = 0;
    for (uint32_t i = 0; i < a->count; i++)
        if (unique == 0 || memcmp(a->keys[unique - 1], a->keys[i], DERP_KEY_LEN) != 0)
            memmove(a->keys[unique++], a->keys[i], DERP_KEY_LEN);
    a->count = unique;
    hd_snap_init(&a->snap, allow_free);
    *out = a;
    return 0;
}

static void log_loaded(const char *path, const struct srv_keylist *a, const char *what)
{
    hd_log(HD_LOG_INFO, "--allow-keys %s: %s %u keys%s", path, what, a->count,
           a->count ? "" : " (only mesh peers can log in)");
}

int srv_allow_configure(struct srv_config *cfg, const char *path, char *err, size_t err_size)
{
    if (path == NULL)
        return 0;
    struct srv_keylist *a;
    int rc = srv_keylist_load(path, SRV_ALLOW_KEYS_MAX, &a, err, err_size);
    if (rc < 0)
        return rc;
    cfg->allow_path = path;
    cfg->allow_initial = a;
    log_loaded(path, a, "loaded");
    return 0;
}

void srv_allow_config_free(struct srv_config *cfg)
{
    if (cfg->allow_initial)
        hd_snap_unref(&cfg->allow_initial->snap);
    cfg->allow_initial = NULL;
}

int srv_allow_attach(struct srv_config *cfg, struct hd_runtime *rt)
{
    if (cfg->allow_path == NULL)
        return 0;
    struct srv_keylist *a = cfg->allow_initial;
    cfg->allow_initial = NULL;
    return hd_snap_var_create(rt, &a->snap, &cfg->allow); /* takes a's reference */
}

void srv_allow_detach(struct srv_config *cfg)
{
    hd_snap_var_destroy(cfg->allow);
    cfg->allow = NULL;
}

void srv_allow_reload(struct srv_config *cfg)
{
    if (cfg->allow == NULL)
        return;
    char err[512];
    struct srv_keylist *a;
    int rc = srv_keylist_load(cfg->allow_path, SRV_ALLOW_KEYS_MAX, &a, err, sizeof(err));
    if (rc < 0) {
        hd_log(HD_LOG_ERROR, "--allow-keys reload failed, keeping the previous list: %s", err);
        return;
    }
    unsigned count = a->count;
    rc = hd_snap_var_publish(cfg->allow, &a->snap); /* takes a's reference */
    if (rc < 0)
        hd_log(HD_LOG_ERROR,
               "--allow-keys %s: %u keys read, but some shards keep the previous "
               "list (%s); send SIGHUP again",
               cfg->allow_path, count, strerror(-rc));
    else
        hd_log(HD_LOG_INFO, "--allow-keys %s: reloaded %u keys", cfg->allow_path, count);
}

bool srv_keylist_has(const struct srv_keylist *l, const struct derp_pubkey *key)
{
    return l->count && bsearch(key->bytes, l->keys, l->count, DERP_KEY_LEN, key_cmp) != NULL;
}

bool srv_allow_admits(struct srv_shard *ds, const struct derp_pubkey *key)
{
    if (ds->cfg->allow == NULL)
        return true;
    const struct hd_snap *sn = hd_snap_var_get(ds->cfg->allow, ds->s);
    const struct srv_keylist *a = hd_container_of(sn, struct srv_keylist, snap);
    if (srv_keylist_has(a, key))
        return true;
    char text[DERP_PUBKEY_TEXT_SIZE];
    derp_pubkey_format(key, text);
    ds->ctr.allowlist_refused++;
    hd_log_rl(HD_LOG_INFO, "--allow-keys: refused %s: not in the list", text);
    return false;
}
