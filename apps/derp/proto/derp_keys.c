/* derp_keys.c - node keys, their text forms, the server key file and the mesh key (§3).
 * Key math and text run on any thread; the file functions block and are for start-up (main
 * thread). Owns nothing beyond the temporaries it wipes. */
#define _GNU_SOURCE /* mkostemp */
#include "derp_keys.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

_Static_assert(crypto_scalarmult_BYTES == DERP_KEY_LEN, "X25519 public key size");
_Static_assert(crypto_scalarmult_SCALARBYTES == DERP_KEY_LEN, "X25519 private key size");

/* Key-file JSON key, matched case-insensitively like Go's encoding/json. */
#define KEY_FILE_FIELD "PrivateKey"

static void set_err(char *err, size_t err_size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_err(char *err, size_t err_size, const char *fmt, ...)
{
    if (!err || err_size == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_size, fmt, ap);
    va_end(ap);
}

int derp_crypto_init(void)
{
    /* jansson seeds its hash function on first use; doing it here, at start-up, keeps that off
     * the shards (it is only effective before the first JSON object exists). */
    json_object_seed(0);
    return sodium_init() < 0 ? -EIO : 0; /* 1 = already initialised: fine */
}

/* ---- Node keys ------------------------------------------------------------------------------- */

void derp_privkey_clamp(struct derp_privkey *k)
{
    k->bytes[0] &= 248;
    k->bytes[31] = (uint8_t)((k->bytes[31] & 127) | 64);
}

int derp_privkey_generate(struct derp_privkey *out)
{
    if (derp_crypto_init() < 0)
        return -EIO;
    randombytes_buf(out->bytes, sizeof(out->bytes));
    derp_privkey_clamp(out);
    return 0;
}

int derp_pubkey_from_privkey(struct derp_pubkey *out, const struct derp_privkey *priv)
{
    if (derp_crypto_init() < 0)
        return -EIO;
    if (crypto_scalarmult_base(out->bytes, priv->bytes) != 0)
        return -EINVAL;
    return derp_key_bytes_is_zero(out->bytes) ? -EINVAL : 0;
}

int derp_keypair_from_privkey(struct derp_keypair *kp, const struct derp_privkey *priv)
{
    struct derp_privkey copy = *priv; /* priv may alias kp->priv */
    int rc = derp_pubkey_from_privkey(&kp->pub, &copy);
    if (rc == 0)
        kp->priv = copy;
    sodium_memzero(&copy, sizeof(copy));
    return rc;
}

int derp_keypair_generate(struct derp_keypair *kp)
{
    int rc = derp_privkey_generate(&kp->priv);
    if (rc < 0)
        return rc;
    return derp_pubkey_from_privkey(&kp->pub, &kp->priv);
}

bool derp_pubkey_equal(const struct derp_pubkey *a, const struct derp_pubkey *b)
{
    return memcmp(a->bytes, b->bytes, DERP_KEY_LEN) == 0;
}

bool derp_key_bytes_is_zero(const uint8_t key[DERP_KEY_LEN])
{
    return sodium_is_zero(key, DERP_KEY_LEN) == 1;
}

/* ---- Text forms ------------------------------------------------------------------------------ */

void derp_key_hex_format(const uint8_t key[DERP_KEY_LEN], char out[DERP_KEY_HEX_SIZE])
{
    sodium_bin2hex(out, DERP_KEY_HEX_SIZE, key, DERP_KEY_LEN); /* constant time, lowercase */
}

void derp_pubkey_format(const struct derp_pubkey *k, char out[DERP_PUBKEY_TEXT_SIZE])
{
    memcpy(out, DERP_PUBKEY_PREFIX, DERP_PUBKEY_PREFIX_LEN);
    derp_key_hex_format(k->bytes, out + DERP_PUBKEY_PREFIX_LEN);
}

void derp_privkey_format(const struct derp_privkey *k, char out[DERP_PRIVKEY_TEXT_SIZE])
{
    memcpy(out, DERP_PRIVKEY_PREFIX, DERP_PRIVKEY_PREFIX_LEN);
    derp_key_hex_format(k->bytes, out + DERP_PRIVKEY_PREFIX_LEN);
}

int derp_key_hex_parse(const char *text, size_t len, uint8_t out[DERP_KEY_LEN])
{
    size_t bin_len = 0;
    const char *end = NULL;
    uint8_t tmp[DERP_KEY_LEN];

    if (len != DERP_KEY_HEX_LEN)
        return -EINVAL;
    /* sodium_hex2bin: constant time (private keys go through here), either case. */
    int rc = sodium_hex2bin(tmp, sizeof(tmp), text, len, NULL, &bin_len, &end);
    if (rc != 0 || bin_len != DERP_KEY_LEN || end != text + len) {
        sodium_memzero(tmp, sizeof(tmp));
        return -EINVAL;
    }
    memcpy(out, tmp, DERP_KEY_LEN);
    sodium_memzero(tmp, sizeof(tmp));
    return 0;
}

/* prefix || hex or bare hex. */
static int parse_prefixed(const char *text, size_t len, const char *prefix, size_t prefix_len,
                          uint8_t out[DERP_KEY_LEN])
{
    if (len == prefix_len + DERP_KEY_HEX_LEN && memcmp(text, prefix, prefix_len) == 0)
        return derp_key_hex_parse(text + prefix_len, DERP_KEY_HEX_LEN, out);
    return derp_key_hex_parse(text, len, out);
}

int derp_pubkey_parse(const char *text, size_t len, struct derp_pubkey *out)
{
    return parse_prefixed(text, len, DERP_PUBKEY_PREFIX, DERP_PUBKEY_PREFIX_LEN, out->bytes);
}

int derp_privkey_parse(const char *text, size_t len, struct derp_privkey *out)
{
    return parse_prefixed(text, len, DERP_PRIVKEY_PREFIX, DERP_PRIVKEY_PREFIX_LEN, out->bytes);
}

/* ---- Small files ----------------------------------------------------------------------------- */

/* Reads a whole regular file of at most DERP_KEY_FILE_SIZE_MAX bytes into a malloc'd buffer
 * (*data, caller wipes and frees). Returns 0 or -errno with err set. */
static int read_small_file(const char *path, char **data, size_t *len, char *err, size_t err_size)
{
    struct stat st;
    /* O_NONBLOCK: a FIFO in place of the file must not hang start-up (it is refused below). */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        int e = errno;
        set_err(err, err_size, "%s: cannot open: %s", path, strerror(e));
        return -e;
    }
    int rc = 0;
    char *buf = NULL;
    if (fstat(fd, &st) < 0) {
        rc = -errno;
        set_err(err, err_size, "%s: cannot stat: %s", path, strerror(-rc));
        goto out_close;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = -EINVAL;
        set_err(err, err_size, "%s: not a regular file", path);
        goto out_close;
    }
    if (st.st_size > DERP_KEY_FILE_SIZE_MAX) {
        rc = -EFBIG;
        set_err(err, err_size, "%s: %lld bytes, more than a key file can be (%d)", path,
                (long long)st.st_size, DERP_KEY_FILE_SIZE_MAX);
        goto out_close;
    }
    buf = malloc(DERP_KEY_FILE_SIZE_MAX + 1);
    if (!buf) {
        rc = -ENOMEM;
        set_err(err, err_size, "%s: out of memory", path);
        goto out_close;
    }
    size_t got = 0;
    while (got <= DERP_KEY_FILE_SIZE_MAX) { /* the size may change under us: re-bound it */
        ssize_t n = read(fd, buf + got, DERP_KEY_FILE_SIZE_MAX + 1 - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = -errno;
            set_err(err, err_size, "%s: cannot read: %s", path, strerror(-rc));
            goto out_free;
        }
        if (n == 0)
            break;
        got += (size_t)n;
    }
    if (got > DERP_KEY_FILE_SIZE_MAX) {
        rc = -EFBIG;
        set_err(err, err_size, "%s: grew past %d bytes while read", path, DERP_KEY_FILE_SIZE_MAX);
        goto out_free;
    }
    *data = buf;
    *len = got;
    close(fd);
    return 0;
out_free:
    sodium_memzero(buf, DERP_KEY_FILE_SIZE_MAX + 1);
    free(buf);
out_close:
    close(fd);
    return rc;
}

static void free_secret(char *data)
{
    if (data) {
        sodium_memzero(data, DERP_KEY_FILE_SIZE_MAX + 1);
        free(data);
    }
}

/* ---- Server key file ------------------------------------------------------------------------- */

/* The JSON value for "PrivateKey": Go's decoding picks the last key that matches
 * case-insensitively; jansson gives them in document order. */
static json_t *find_private_key(json_t *root)
{
    const char *name;
    json_t *value, *found = NULL;
    json_object_foreach(root, name, value)
    {
        if (strcasecmp(name, KEY_FILE_FIELD) == 0)
            found = value;
    }
    return found;
}

static int parse_key_file(const char *path, const char *data, size_t len, struct derp_privkey *out,
                          char *err, size_t err_size)
{
    json_error_t jerr;
    json_t *root = json_loadb(data, len, 0, &jerr);
    if (!root) {
        set_err(err, err_size, "%s: invalid JSON at line %d column %d: %s", path, jerr.line,
                jerr.column, jerr.text);
        return -EINVAL;
    }
    int rc = -EINVAL;
    json_t *v = find_private_key(root);
    if (!v || json_is_null(v)) {
        set_err(err, err_size, "%s: no \"%s\" in the key file", path, KEY_FILE_FIELD);
        goto out;
    }
    const char *s = json_string_value(v);
    size_t s_len = json_string_length(v);
    /* types/key NodePrivate.UnmarshalText: the "privkey:" prefix is required here. */
    if (!s || s_len != DERP_PRIVKEY_TEXT_LEN ||
        memcmp(s, DERP_PRIVKEY_PREFIX, DERP_PRIVKEY_PREFIX_LEN) != 0 ||
        derp_key_hex_parse(s + DERP_PRIVKEY_PREFIX_LEN, DERP_KEY_HEX_LEN, out->bytes) < 0) {
        set_err(err, err_size, "%s: \"%s\" must be a string \"privkey:<64 hex digits>\"", path,
                KEY_FILE_FIELD);
        goto out;
    }
    if (derp_key_bytes_is_zero(out->bytes)) {
        set_err(err, err_size, "%s: \"%s\" is the zero key", path, KEY_FILE_FIELD);
        goto out;
    }
    rc = 0;
out:
    json_decref(root);
    return rc;
}

int derp_key_file_load(const char *path, struct derp_privkey *out, char *err, size_t err_size)
{
    char *data = NULL;
    size_t len = 0;
    int rc = read_small_file(path, &data, &len, err, err_size);
    if (rc < 0)
        return rc;
    struct derp_privkey k;
    rc = parse_key_file(path, data, len, &k, err, err_size);
    if (rc == 0)
        *out = k;
    sodium_memzero(&k, sizeof(k));
    free_secret(data);
    return rc;
}

/* mkdir -p of path's parent directories (os.MkdirAll(filepath.Dir(path), 0777)). */
static int make_parent_dirs(const char *path, char *err, size_t err_size)
{
    char dir[PATH_MAX];
    size_t len = strlen(path);
    if (len >= sizeof(dir)) {
        set_err(err, err_size, "%s: path too long", path);
        return -ENAMETOOLONG;
    }
    memcpy(dir, path, len + 1);
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir)
        return 0; /* relative file in the cwd, or a file in / */
    *slash = '\0';
    for (char *p = dir + 1; p <= slash; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char saved = *p;
        *p = '\0';
        if (mkdir(dir, DERP_KEY_FILE_DIR_MODE) < 0 && errno != EEXIST) {
            int e = errno;
            set_err(err, err_size, "%s: cannot create directory %s: %s", path, dir, strerror(e));
            return -e;
        }
        *p = saved;
    }
    return 0;
}

static int write_all(int fd, const char *data, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, data, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        data += n;
        len -= (size_t)n;
    }
    return 0;
}

/* fsync the directory holding path so the rename survives a crash. */
static int sync_parent_dir(const char *path)
{
    char dir[PATH_MAX];
    const char *slash = strrchr(path, '/');
    if (!slash) {
        strcpy(dir, ".");
    } else if (slash == path) {
        strcpy(dir, "/");
    } else {
        size_t n = (size_t)(slash - path);
        memcpy(dir, path, n); /* path was length-checked by make_parent_dirs */
        dir[n] = '\0';
    }
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rc = fsync(fd) < 0 ? -errno : 0;
    close(fd);
    return rc;
}

/* atomicfile.WriteFile: temp file beside path, mode, write, fsync, rename, fsync dir. */
static int write_file_atomic(const char *path, const char *data, size_t len, char *err,
                             size_t err_size)
{
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof(tmp), "%s.tmpXXXXXX", path) >= (int)sizeof(tmp)) {
        set_err(err, err_size, "%s: path too long", path);
        return -ENAMETOOLONG;
    }
    int fd = mkostemp(tmp, O_CLOEXEC); /* created 0600, O_EXCL */
    if (fd < 0) {
        int e = errno;
        set_err(err, err_size, "%s: cannot create temporary file: %s", path, strerror(e));
        return -e;
    }
    int rc = fchmod(fd, DERP_KEY_FILE_MODE) < 0 ? -errno : 0;
    if (rc == 0)
        rc = write_all(fd, data, len);
    if (rc == 0 && fsync(fd) < 0)
        rc = -errno;
    if (close(fd) < 0 && rc == 0)
        rc = -errno;
    if (rc == 0 && rename(tmp, path) < 0)
        rc = -errno;
    if (rc < 0) {
        set_err(err, err_size, "%s: cannot write: %s", path, strerror(-rc));
        unlink(tmp);
        return rc;
    }
    rc = sync_parent_dir(path);
    if (rc < 0)
        set_err(err, err_size, "%s: written, but syncing its directory failed: %s", path,
                strerror(-rc));
    return rc;
}

int derp_key_file_create(const char *path, struct derp_privkey *out, char *err, size_t err_size)
{
    /* json.MarshalIndent(config{PrivateKey}, "", "\t"), byte for byte. */
    static const char head[] = "{\n\t\"" KEY_FILE_FIELD "\": \"";
    static const char tail[] = "\"\n}";
    char text[sizeof(head) - 1 + DERP_PRIVKEY_TEXT_SIZE + sizeof(tail)];
    struct derp_privkey k;

    int rc = derp_privkey_generate(&k);
    if (rc < 0) {
        set_err(err, err_size, "%s: cannot initialise libsodium", path);
        return rc;
    }
    rc = make_parent_dirs(path, err, err_size);
    if (rc < 0)
        goto out;
    memcpy(text, head, sizeof(head) - 1);
    derp_privkey_format(&k, text + sizeof(head) - 1);
    memcpy(text + sizeof(head) - 1 + DERP_PRIVKEY_TEXT_LEN, tail, sizeof(tail));
    rc = write_file_atomic(path, text, strlen(text), err, err_size);
    if (rc == 0)
        *out = k;
out:
    sodium_memzero(text, sizeof(text));
    sodium_memzero(&k, sizeof(k));
    return rc;
}

int derp_key_file_load_or_create(const char *path, struct derp_privkey *out, bool *created,
                                 char *err, size_t err_size)
{
    if (created)
        *created = false;
    int rc = derp_key_file_load(path, out, err, err_size);
    if (rc != -ENOENT)
        return rc;
    rc = derp_key_file_create(path, out, err, err_size);
    if (rc == 0 && created)
        *created = true;
    return rc;
}

/* ---- Mesh key -------------------------------------------------------------------------------- */

static bool is_space(char c)
{
    /* strings.TrimSpace's ASCII set (it also trims Unicode spaces; no hex file has those). */
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

int derp_mesh_key_parse(const char *text, size_t len, struct derp_mesh_key *out)
{
    while (len > 0 && is_space(text[0])) {
        text++;
        len--;
    }
    while (len > 0 && is_space(text[len - 1]))
        len--;
    return derp_key_hex_parse(text, len, out->bytes);
}

int derp_mesh_key_load_file(const char *path, struct derp_mesh_key *out, char *err, size_t err_size)
{
    char *data = NULL;
    size_t len = 0;
    int rc = read_small_file(path, &data, &len, err, err_size);
    if (rc < 0)
        return rc;
    rc = derp_mesh_key_parse(data, len, out);
    if (rc < 0)
        set_err(err, err_size, "%s: mesh key must contain exactly 64 hex digits", path);
    free_secret(data);
    return rc;
}

void derp_mesh_key_format(const struct derp_mesh_key *k, char out[DERP_KEY_HEX_SIZE])
{
    derp_key_hex_format(k->bytes, out);
}

bool derp_mesh_key_is_zero(const struct derp_mesh_key *k)
{
    return derp_key_bytes_is_zero(k->bytes);
}

bool derp_mesh_key_equal(const struct derp_mesh_key *a, const struct derp_mesh_key *b)
{
    return sodium_memcmp(a->bytes, b->bytes, DERP_MESH_KEY_LEN) == 0;
}

bool derp_mesh_key_admits(const struct derp_mesh_key *server, const struct derp_mesh_key *client)
{
    /* Both checks run (no early exit on the secret); zero client key = no key presented. */
    bool present = !derp_mesh_key_is_zero(client);
    bool equal = derp_mesh_key_equal(server, client);
    return present & equal;
}
