/* server_certs.c - TLS mode's server context: built from -certmode manual's files (or a
 * self-signed certificate for an IP hostname without them), the meta certificate appended (spec
 * §1.2: tls_server_ctx_add_extra_cert, CN derpkey<hex>, serial 2, so Tailscale clients know the
 * key before the upgrade and use fast start), and rebuilt on SIGHUP so a renewed certificate is
 * served without a restart. Each build is an immutable snapshot published to every shard
 * (hd_snap_var): new handshakes use the shard's current one, handshakes already started keep
 * theirs (their SSL holds a reference to its SSL_CTX). A file that does not load on reload is
 * logged and the previous certificate stays. Builds run on the main thread; the last shard to
 * drop a snapshot frees it. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "server.h"

struct srv_tls_snap {
    struct hd_snap snap;
    struct tls_ctx *ctx;
};

static void tls_snap_free(struct hd_snap *sn)
{
    struct srv_tls_snap *t = hd_container_of(sn, struct srv_tls_snap, snap);
    tls_ctx_destroy(t->ctx);
    free(t);
}

/* What tls_server_ctx_create's rc means for the operator: which file, why, what to do. */
static void explain(const struct srv_config *cfg, int rc, char *err, size_t err_size)
{
    const char *mode = cfg->acme ? "-certmode letsencrypt" : "-certmode manual";
    if (cfg->self_signed) {
        snprintf(err, err_size, "self-signed certificate for %s: %s", cfg->hostname, strerror(-rc));
        return;
    }
    if (rc == -EBADMSG || rc == -ENOMEM) {
        snprintf(err, err_size,
                 "%s: certificate %s / key %s: %s (the .crt must be a PEM certificate chain, "
                 "the .key the PEM private key of its first certificate; see the line above)",
                 mode, cfg->cert_file, cfg->key_file,
                 rc == -ENOMEM ? strerror(-rc) : "not PEM, or the key is not the certificate's");
        return;
    }
    /* A file that cannot be read: the certificate first, as the TLS layer tries it. */
    int fd = open(cfg->cert_file, O_RDONLY | O_CLOEXEC);
    bool cert = fd < 0;
    if (fd >= 0) {
        struct stat st;
        cert = fstat(fd, &st) == 0 && S_ISDIR(st.st_mode);
        close(fd);
    }
    const char *path = cert ? cfg->cert_file : cfg->key_file;
    char what[160];
    if (rc == -ENOENT)
        snprintf(what, sizeof(what), "put the PEM %s there (%s reads <certdir>/<hostname>%s)",
                 cert ? "certificate chain" : "private key", mode, cert ? ".crt" : ".key");
    else if (rc == -EACCES)
        snprintf(what, sizeof(what), "make it readable by this user (uid %u)", (unsigned)geteuid());
    else
        snprintf(what, sizeof(what), "it must be a readable file");
    snprintf(err, err_size, "%s: %s %s: %s: %s", mode, cert ? "certificate" : "private key", path,
             strerror(-rc), what);
}

/* A new server context with the meta certificate; err says what failed. */
static int build(const struct srv_config *cfg, struct srv_tls_snap **out, char *err,
                 size_t err_size)
{
    struct tls_server_options o = {.cert_file = cfg->cert_file, .key_file = cfg->key_file};
    if (cfg->self_signed)
        o = (struct tls_server_options){.self_signed_host = cfg->hostname};
    o.sni_required = cfg->sni_required ? cfg->hostname : NULL; /* the handshake fails (alert) */
    struct srv_tls_snap *t = calloc(1, sizeof(*t));
    if (t == NULL) {
        snprintf(err, err_size, "out of memory");
        return -ENOMEM;
    }
    int rc = tls_server_ctx_create(&o, &t->ctx);
    if (rc < 0) {
        explain(cfg, rc, err, err_size);
        free(t);
        return rc;
    }
    if (cfg->meta_cert) { /* §1.2: CN derpkey<hex>, serial = protocol version, +-30 days */
        char cn[8 + DERP_KEY_HEX_SIZE];
        snprintf(cn, sizeof(cn), "derpkey%s", cfg->key_hex);
        rc = tls_server_ctx_add_extra_cert(t->ctx, cn, DERP_PROTOCOL_VERSION,
                                           SRV_META_CERT_VALIDITY_S);
        if (rc < 0) {
            snprintf(err, err_size, "cannot build the meta certificate: %s", strerror(-rc));
            tls_ctx_destroy(t->ctx);
            free(t);
            return rc;
        }
    }
    hd_snap_init(&t->snap, tls_snap_free);
    *out = t;
    return 0;
}

bool srv_needs_tls(const struct srv_config *cfg)
{
    return cfg->tls || cfg->mesh_tls || srv_admit_needs_tls(cfg);
}

int srv_certs_configure(struct srv_config *cfg, char *err, size_t err_size)
{
    if (!cfg->tls)
        return 0;
    return build(cfg, &cfg->tls_initial, err, err_size);
}

int srv_certs_attach(struct srv_config *cfg, struct hd_runtime *rt)
{
    if (!cfg->tls)
        return 0;
    struct srv_tls_snap *t = cfg->tls_initial;
    cfg->tls_initial = NULL;
    return hd_snap_var_create(rt, &t->snap, &cfg->tls_var); /* takes t's reference */
}

void srv_certs_detach(struct srv_config *cfg)
{
    if (cfg->tls_initial)
        hd_snap_unref(&cfg->tls_initial->snap);
    cfg->tls_initial = NULL;
    hd_snap_var_destroy(cfg->tls_var);
    cfg->tls_var = NULL;
}

void srv_certs_reload(struct srv_config *cfg)
{
    if (cfg->tls_var == NULL)
        return;
    if (cfg->self_signed && cfg->acme && access(cfg->cert_file, R_OK) == 0)
        cfg->self_signed = false; /* ACME's first certificate replaces the stand-in */
    if (cfg->self_signed) {
        hd_log(HD_LOG_INFO, "TLS: self-signed certificate for %s: nothing to reload",
               cfg->hostname);
        return;
    }
    char err[1024];
    struct srv_tls_snap *t;
    if (build(cfg, &t, err, sizeof(err)) < 0) {
        hd_log(HD_LOG_ERROR, "TLS reload failed, keeping the previous certificate: %s", err);
        return;
    }
    int rc = hd_snap_var_publish(cfg->tls_var, &t->snap); /* takes t's reference */
    if (rc < 0)
        hd_log(HD_LOG_ERROR,
               "TLS: %s loaded, but some shards keep the previous certificate (%s); send SIGHUP "
               "again",
               cfg->cert_file, strerror(-rc));
    else
        hd_log(HD_LOG_INFO, "TLS: reloaded %s", cfg->cert_file);
}

struct tls_ctx *srv_certs_current(const struct srv_shard *ds)
{
    const struct hd_snap *sn = hd_snap_var_get(ds->cfg->tls_var, ds->s);
    return hd_container_of(sn, struct srv_tls_snap, snap)->ctx;
}
