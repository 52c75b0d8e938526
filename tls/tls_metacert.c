/* tls_metacert.c - DERP's meta certificate (spec §1.2): one extra self-signed certificate
 * sent after the server's normal chain, whose subject names the server's DERP key, so that
 * Tailscale clients (TLS 1.3, where the chain is encrypted) learn the key and use fast start.
 * Built once at start-up on the main thread; the SSL_CTX then holds it. */
#include <errno.h>
#include <openssl/base.h>
#ifndef OPENSSL_IS_BORINGSSL
#error "tls/ needs BoringSSL (android-libboringssl-dev)"
#endif
#include <openssl/evp.h>
#include <string.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <hd/tls.h>
#include "tls_impl.h"

/* A fresh Ed25519 key per start (derper: only the certificate's content matters). */
static EVP_PKEY *ed25519_new(void)
{
    EVP_PKEY *pk = NULL;
    EVP_PKEY_CTX *kctx = EVP_PKEY_CTX_new_id(EVP_PKEY_ED25519, NULL);
    if (kctx == NULL || EVP_PKEY_keygen_init(kctx) != 1 || EVP_PKEY_keygen(kctx, &pk) != 1)
        pk = NULL;
    EVP_PKEY_CTX_free(kctx);
    return pk;
}

/* Exactly one extension: basicConstraints, CA:FALSE, critical (as Go writes it). */
static bool add_basic_constraints(X509 *x)
{
    BASIC_CONSTRAINTS *bc = BASIC_CONSTRAINTS_new();
    if (bc == NULL)
        return false;
    bc->ca = 0;
    bool ok = X509_add1_ext_i2d(x, NID_basic_constraints, bc, 1, 0) == 1;
    BASIC_CONSTRAINTS_free(bc);
    return ok;
}

int tls_server_ctx_add_meta_cert(struct tls_ctx *ctx, const char *common_name, long serial,
                                 long validity_s)
{
    if (ctx == NULL || !ctx->server || common_name == NULL || serial <= 0 || validity_s <= 0)
        return -EINVAL;
    EVP_PKEY *pk = ed25519_new();
    X509 *x = X509_new();
    bool ok = pk && x && X509_set_version(x, X509_VERSION_3) &&
              ASN1_INTEGER_set(X509_get_serialNumber(x), serial) &&
              X509_gmtime_adj(X509_getm_notBefore(x), -validity_s) &&
              X509_gmtime_adj(X509_getm_notAfter(x), validity_s);
    X509_NAME *name = ok ? X509_get_subject_name(x) : NULL;
    /* "derpkey" + 64 hex digits is 71 characters, over X.509's 64 for a CN, which the
     * MBSTRING path enforces; Go does not, and clients expect the whole key. A plain string
     * type skips that check; PrintableString is what Go writes for such a name. */
    ok =
        ok &&
        X509_NAME_add_entry_by_txt(name, "CN", V_ASN1_PRINTABLESTRING, (const uint8_t *)common_name,
                                   (int)strlen(common_name), -1, 0) &&
        X509_set_issuer_name(x, name) && X509_set_pubkey(x, pk) && add_basic_constraints(x) &&
        X509_sign(x, pk, NULL) > 0 /* Ed25519 signs without a separate digest */ &&
        SSL_CTX_add1_chain_cert(ctx->ssl_ctx, x) == 1;
    X509_free(x);
    EVP_PKEY_free(pk);
    return ok ? 0 : -ENOMEM;
}
