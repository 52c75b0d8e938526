/* tls_roots.c - the system's root certificates for a verifying client context (system_roots),
 * found the way Go's crypto/x509 finds them on Linux (what Go programs trust), read once at
 * start: the first bundle file that can be read, from SSL_CERT_FILE if it is set (it replaces
 * the default list) or else from the distributions' usual paths
 * (/etc/ssl/certs/ca-certificates.crt and the others); then every file of every certificate
 * directory, from SSL_CERT_DIR if it is set (colon-separated; it replaces the default list) or
 * else /etc/ssl/certs and /etc/pki/tls/certs. Directory entries that are symlinks to a name in
 * the same directory (the OpenSSL hash links) are skipped, as Go does; other files are read
 * whole, and every CERTIFICATE block in them is added (blocks that do not parse are skipped).
 * Finding nothing is a logged warning, and every handshake then fails. Connections on such a
 * context must name the server (tls_conn_start refuses without server_name), and the
 * certificate must match that name. Main thread. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "tls_impl.h"

/* Go's certFiles for Linux, in its order: the first one that reads is used. */
static const char *const roots_files[] = {
    "/etc/ssl/certs/ca-certificates.crt",                /* Debian, Ubuntu, Gentoo */
    "/etc/pki/tls/certs/ca-bundle.crt",                  /* Fedora, RHEL 6 */
    "/etc/ssl/ca-bundle.pem",                            /* OpenSUSE */
    "/etc/pki/tls/cacert.pem",                           /* OpenELEC */
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", /* CentOS, RHEL 7 */
    "/etc/ssl/cert.pem",                                 /* Alpine */
};

/* Go's certDirectories for Linux: all are read. */
static const char *const roots_dirs[] = {"/etc/ssl/certs", "/etc/pki/tls/certs"};

/* A roots file larger than this is refused (Debian's bundle is ~200 KiB). */
#define TLS_ROOTS_FILE_MAX (16u << 20)

/* Adds every CERTIFICATE block of the PEM file at path to st. Returns the number added, or
 * -errno if the file cannot be opened or read. */
static int roots_add_file(X509_STORE *st, const char *path)
{
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return -errno;
    struct stat sb = {0};
    if (fstat(fileno(f), &sb) < 0 || !S_ISREG(sb.st_mode) || sb.st_size > TLS_ROOTS_FILE_MAX) {
        int rc = S_ISDIR(sb.st_mode) ? -EISDIR : -EINVAL;
        fclose(f);
        return rc;
    }
    BIO *bio = BIO_new_fp(f, BIO_CLOSE);
    if (bio == NULL) {
        fclose(f);
        return -ENOMEM;
    }
    int added = 0;
    for (;;) {
        char *name = NULL, *header = NULL;
        uint8_t *der = NULL;
        long len = 0;
        if (!PEM_read_bio(bio, &name, &header, &der, &len))
            break; /* end of file (or text that is not PEM: ignored, as Go does) */
        if (strcmp(name, "CERTIFICATE") == 0 && header[0] == '\0') {
            const uint8_t *p = der;
            X509 *x = d2i_X509(NULL, &p, len);
            if (x && X509_STORE_add_cert(st, x))
                added++;
            X509_free(x);
        }
        OPENSSL_free(name);
        OPENSSL_free(header);
        OPENSSL_free(der);
    }
    ERR_clear_error();
    BIO_free(bio);
    return added;
}

/* A symlink whose target names an entry of the same directory (no '/'): skipped. */
static bool same_dir_symlink(const char *path)
{
    char target[PATH_MAX];
    ssize_t n = readlink(path, target, sizeof(target) - 1);
    if (n < 0)
        return false;
    target[n] = '\0';
    return strchr(target, '/') == NULL;
}

/* Adds the certificates of every file in dir. Returns the number added, or -errno if the
 * directory cannot be read. */
static int roots_add_dir(X509_STORE *st, const char *dir)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return -errno;
    int added = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char path[PATH_MAX];
        if (snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) >= (int)sizeof(path))
            continue;
        if (same_dir_symlink(path))
            continue;
        int n = roots_add_file(st, path);
        if (n > 0)
            added += n;
    }
    closedir(d);
    return added;
}

int tls_roots_load(X509_STORE *st)
{
    int total = 0;
    const char *env_file = getenv("SSL_CERT_FILE");
    const char *env_dir = getenv("SSL_CERT_DIR");
    const char *used_file = NULL;
    if (env_file && env_file[0]) {
        int n = roots_add_file(st, env_file);
        if (n < 0 && n != -ENOENT)
            hd_log(HD_LOG_WARN, "tls: SSL_CERT_FILE %s: %s", env_file, strerror(-n));
        if (n >= 0) {
            total += n;
            used_file = env_file;
        }
    } else {
        for (size_t i = 0; i < sizeof(roots_files) / sizeof(roots_files[0]); i++) {
            int n = roots_add_file(st, roots_files[i]);
            if (n < 0 && n != -ENOENT)
                hd_log(HD_LOG_WARN, "tls: roots file %s: %s", roots_files[i], strerror(-n));
            if (n >= 0) {
                total += n;
                used_file = roots_files[i];
                break;
            }
        }
    }
    if (env_dir && env_dir[0]) {
        char *dirs = strdup(env_dir);
        if (dirs == NULL)
            return -ENOMEM;
        char *save = NULL;
        for (char *dir = strtok_r(dirs, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
            int n = roots_add_dir(st, dir);
            if (n < 0 && n != -ENOENT)
                hd_log(HD_LOG_WARN, "tls: SSL_CERT_DIR entry %s: %s", dir, strerror(-n));
            total += n > 0 ? n : 0;
        }
        free(dirs);
    } else {
        for (size_t i = 0; i < sizeof(roots_dirs) / sizeof(roots_dirs[0]); i++) {
            int n = roots_add_dir(st, roots_dirs[i]);
            if (n < 0 && n != -ENOENT)
                hd_log(HD_LOG_WARN, "tls: roots dir %s: %s", roots_dirs[i], strerror(-n));
            total += n > 0 ? n : 0;
        }
    }
    if (total == 0)
        hd_log(HD_LOG_WARN,
               "tls: no system root certificates found (SSL_CERT_FILE=%s SSL_CERT_DIR=%s; "
               "Debian: apt-get install ca-certificates): every verified connection will fail",
               env_file ? env_file : "unset", env_dir ? env_dir : "unset");
    else
        hd_log(HD_LOG_INFO, "tls: %d system root certificates read (file %s, dirs %s)", total,
               used_file ? used_file : "none", env_dir && env_dir[0] ? env_dir : "default");
    return total;
}
