/* server_secrets.c - derper's -secrets-url (cmd/derper at v1.102.5, with the setec client
 * tailscale.com's go.mod requires): the mesh key is the secret "<-secrets-path-prefix>/meshkey"
 * of a setec server, kept in a cache file (-secrets-cache-dir names the file, as derper's
 * setec.NewFileCache takes it). As setec.NewStore does: a valid cache that holds the secret is
 * used without asking the server; otherwise POST <url>/api/get {"Name": ..., "Version": 0} is
 * retried (1 ms doubling up to 4 s, each failure logged) until the server answers, and the cache
 * is written (0600, through a rename; its directory created 0700), other secrets in it kept.
 * The value then follows derper's mesh key rules (64 hex digits once white space is trimmed;
 * anything else refuses to start). Main thread, at start-up: it blocks, as derper does. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <hd/hd.h>
#include <sodium.h>

#include "ops/server_acme.h"
#include "ops/server_secrets.h"

#define SETEC_MESH_KEY_NAME "meshkey" /* derper's setecMeshKeyName */
#define SETEC_TIMEOUT_MS    30000     /* one request (derper's has none: Go's default client) */
#define SETEC_RETRY_MS_MAX  4096      /* setec's initializeActive backoff: 1 ms doubling */
#define SETEC_VALUE_MAX     4096
#define SETEC_NAME_MAX      1024

/* path.Join(prefix, "meshkey"): joined with "/", repeated slashes collapsed, "." parts
 * dropped. */
static void secret_name(const char *prefix, char *out, size_t size)
{
    char joined[SETEC_NAME_MAX];
    snprintf(joined, sizeof(joined), "%s/%s", prefix, SETEC_MESH_KEY_NAME);
    size_t n = 0;
    bool rooted = joined[0] == '/' && prefix[0] != '\0';
    if (rooted && n + 1 < size)
        out[n++] = '/';
    for (char *save = NULL, *part = strtok_r(joined, "/", &save); part;
         part = strtok_r(NULL, "/", &save)) {
        if (strcmp(part, ".") == 0)
            continue;
        int k = snprintf(out + n, size - n, "%s%s", n > (size_t)rooted ? "/" : "", part);
        n = k > 0 && (size_t)k < size - n ? n + (size_t)k : n;
    }
    out[n] = '\0';
}

/* The cache as setec reads it: a JSON object of name -> {"secret": {...}, "lastAccess": ...};
 * unreadable or not such an object: a warning and an empty cache. */
static json_t *cache_read(const char *path)
{
    json_error_t je;
    json_t *c = json_load_file(path, 0, &je);
    if (c == NULL) {
        if (access(path, F_OK) == 0)
            hd_log(HD_LOG_WARN, "setec: error decoding cache %s: %s (continuing)", path, je.text);
        return json_object();
    }
    const char *k;
    json_t *v;
    bool valid = json_is_object(c);
    json_object_foreach(c, k, v)
    {
        json_t *sec = json_is_object(v) ? json_object_get(v, "secret") : NULL;
        valid &= k[0] != '\0' && json_is_object(sec);
    }
    if (!valid) {
        hd_log(HD_LOG_WARN, "setec: cache %s is not valid; discarding it", path);
        json_decref(c);
        return json_object();
    }
    return c;
}

/* A SecretValue object's Value (Go's []byte: standard base64). 0 or -EINVAL. */
static int secret_value(const json_t *sv, uint8_t *out, size_t cap, size_t *len)
{
    const json_t *v = json_object_get(sv, "Value");
    *len = 0;
    if (json_is_null(v) || v == NULL)
        return 0;
    const char *b64 = json_string_value(v);
    if (b64 == NULL || sodium_base642bin(out, cap, b64, strlen(b64), NULL, len, NULL,
                                         sodium_base64_VARIANT_ORIGINAL) != 0)
        return -EINVAL;
    return 0;
}

/* The cache written as setec's FileCache writes it: compact, keys sorted, 0600 through a rename
 * in the same directory. */
static int cache_write(const char *path, const json_t *c)
{
    char tmp[SRV_SECRETS_PATH_MAX + 16];
    if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
        return -ENAMETOOLONG;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return -errno;
    char *text = json_dumps(c, JSON_COMPACT | JSON_SORT_KEYS);
    size_t len = text ? strlen(text) : 0;
    int rc = text && write(fd, text, len) == (ssize_t)len && fsync(fd) == 0 ? 0 : -EIO;
    free(text);
    close(fd);
    if (rc == 0 && rename(tmp, path) < 0)
        rc = -errno;
    if (rc < 0)
        unlink(tmp);
    return rc;
}

/* One api/get: 0 and *sv (the SecretValue object, the caller's), or -errno with why in err. */
static int fetch(const char *url, const char *name, json_t **sv, char *err, size_t err_size)
{
    char target[SRV_SECRETS_PATH_MAX + 16];
    size_t ulen = strlen(url);
    while (ulen > 0 && url[ulen - 1] == '/') /* strings.TrimSuffix(Server, "/"), once in Go */
        ulen--;
    snprintf(target, sizeof(target), "%.*s/api/get", (int)ulen, url);
    json_t *req = json_pack("{s:s, s:i, s:b}", "Name", name, "Version", 0, "UpdateIfChanged", 0);
    char *body = req ? json_dumps(req, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(req);
    if (body == NULL)
        return -ENOMEM;
    struct acme_resp r;
    int rc = srv_http_blocking("POST", target, body, "application/json",
                               "User-Agent: hderp-server\r\n"
                               "Sec-X-Tailscale-No-Browsers: setec\r\n",
                               SETEC_TIMEOUT_MS, &r, err, err_size);
    free(body);
    if (rc < 0)
        return rc;
    rc = -EPROTO;
    if (r.status == 404 || r.status == 403 || r.status == 304) { /* setec's sentinel errors */
        snprintf(err, err_size, "%s (HTTP %u)",
                 r.status == 404   ? "not found"
                 : r.status == 403 ? "access denied"
                                   : "value not changed",
                 r.status);
    } else if (r.status != 200) {
        size_t n = r.body_len;
        while (n > 0 && isspace((unsigned char)r.body[n - 1]))
            n--;
        snprintf(err, err_size, "request returned status %u: \"%.*s\"", r.status,
                 (int)(n > 200 ? 200 : n), r.body);
    } else {
        json_error_t je;
        *sv = json_loadb(r.body, r.body_len, 0, &je);
        uint8_t v[SETEC_VALUE_MAX];
        size_t vlen;
        if (*sv && json_is_object(*sv) && secret_value(*sv, v, sizeof(v), &vlen) == 0) {
            rc = 0;
        } else {
            snprintf(err, err_size, "unmarshaling response: %s", *sv ? "no Value" : je.text);
            json_decref(*sv);
            *sv = NULL;
        }
    }
    acme_resp_free(&r);
    return rc;
}

/* setec's initializeActive for one secret: until the server gives it (derper waits as long). */
static json_t *fetch_until_given(const char *url, const char *name)
{
    uint64_t wait_ms = 1;
    for (;;) {
        char err[512] = "";
        json_t *sv = NULL;
        if (fetch(url, name, &sv, err, sizeof(err)) == 0)
            return sv;
        hd_log(HD_LOG_WARN, "-secrets-url %s: error fetching \"%s\": %s (retrying)", url, name,
               err);
        nanosleep(&(struct timespec){.tv_sec = (time_t)(wait_ms / 1000),
                                     .tv_nsec = (long)(wait_ms % 1000) * 1000000L},
                  NULL);
        if (wait_ms < SETEC_RETRY_MS_MAX)
            wait_ms *= 2;
    }
}

/* setec.NewFileCache: the directory made (0700), a path that is there but not a file refused. */
static int cache_open(const char *path, char *err, size_t err_size)
{
    char dir[SRV_SECRETS_PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", path);
    char *slash = strrchr(dir, '/');
    int rc = 0;
    if (slash && slash != dir) {
        *slash = '\0';
        rc = srv_mkdir_all(dir);
    }
    struct stat st;
    if (rc < 0)
        snprintf(err, err_size, "cache directory: %s", strerror(-rc));
    else if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode))
        snprintf(err, err_size, "cache path exists and is not a regular file");
    else
        return 0;
    return -EINVAL;
}

int srv_secrets_mesh_key(const char *url, const char *prefix, const char *cache_path,
                         struct derp_mesh_key *out, char *err, size_t err_size)
{
    char name[SETEC_NAME_MAX];
    secret_name(prefix, name, sizeof(name));
    if (strlen(cache_path) >= SRV_SECRETS_PATH_MAX || strlen(url) >= SRV_SECRETS_PATH_MAX) {
        snprintf(err, err_size, "-secrets-url or -secrets-cache-dir too long");
        return -ENAMETOOLONG;
    }
    if (cache_open(cache_path, err, err_size) < 0)
        return -EINVAL;
    hd_log(HD_LOG_INFO, "setting up setec store from \"%s\" (secret \"%s\", cache %s)", url, name,
           cache_path);
    json_t *cache = cache_read(cache_path);
    json_t *entry = json_object_get(cache, name);
    json_t *sv = entry ? json_incref(json_object_get(entry, "secret")) : NULL;
    if (sv)
        hd_log(HD_LOG_INFO, "setec: \"%s\" from the cache %s", name, cache_path);
    else
        sv = fetch_until_given(url, name);
    char now[24];
    snprintf(now, sizeof(now), "%lld", (long long)time(NULL));
    json_object_set_new(cache, name, json_pack("{s:O, s:s}", "secret", sv, "lastAccess", now));
    int rc = cache_write(cache_path, cache);
    if (rc < 0)
        hd_log(HD_LOG_WARN, "setec: error flushing cache %s: %s", cache_path, strerror(-rc));
    uint8_t v[SETEC_VALUE_MAX];
    size_t len = 0;
    rc = secret_value(sv, v, sizeof(v), &len);
    json_decref(sv);
    json_decref(cache);
    hd_log(HD_LOG_INFO, "got mesh key from setec store");
    if (rc == 0 && len == 0) { /* derper: meshKey == "": "No mesh key configured", runs on */
        hd_log(HD_LOG_WARN, "setec secret \"%s\" is empty: no mesh key configured", name);
        return 1;
    }
    /* key.ParseDERPMesh: strings.TrimSpace, then exactly 64 hex digits */
    size_t a = 0;
    while (a < len && isspace(v[a]))
        a++;
    while (len > a && isspace(v[len - 1]))
        len--;
    if (rc < 0 || derp_mesh_key_parse((const char *)v + a, len - a, out) < 0) {
        snprintf(err, err_size,
                 "invalid mesh key from setec secret \"%s\": must be 64-digit hexadecimal "
                 "number (got %zu bytes)",
                 name, len - a);
        sodium_memzero(v, sizeof(v));
        return -EINVAL;
    }
    sodium_memzero(v, sizeof(v));
    return 0;
}
