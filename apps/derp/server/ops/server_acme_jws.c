/* server_acme_jws.c - the cryptography of -certmode letsencrypt's ACME client (RFC 8555 on RFC
 * 7515/7517/7638): P-256 keys kept as PEM files (created 0600), base64url, the account's JWK and
 * its thumbprint, ES256-signed flattened JWS request bodies, the External Account Binding
 * (-certmode gcp) and the CSR for -hostname. Pure
 * apart from the key files; runs on the ACME thread (server_acme.c). */
#include <errno.h>
#include <fcntl.h>
#include <openssl/bn.h>
#include <openssl/bytestring.h>
#include <openssl/ec.h>
#include <openssl/ec_key.h>
#include <openssl/ecdsa.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/nid.h>
#include <openssl/pem.h>
#include <openssl/sha.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sodium.h>

#include "ops/server_acme.h"

size_t acme_b64url(const uint8_t *in, size_t len, char *out, size_t size)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    size_t n = 0;
    for (size_t i = 0; i < len; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (i + 1 < len ? (uint32_t)in[i + 1] << 8 : 0) |
                     (i + 2 < len ? in[i + 2] : 0);
        size_t chars = i + 2 < len ? 4 : i + 1 < len ? 3 : 2;
        for (size_t k = 0; k < chars; k++) {
            if (n + 1 >= size)
                return 0;
            out[n++] = tab[(v >> (18 - 6 * k)) & 63];
        }
    }
    out[n] = '\0';
    return n;
}

/* An EC P-256 key from a PEM file, or a new one written there (0600, created exclusively). */
int acme_key_load_or_create(const char *path, EVP_PKEY **out, bool *created)
{
    *created = false;
    FILE *f = fopen(path, "r");
    if (f) {
        EVP_PKEY *k = PEM_read_PrivateKey(f, NULL, NULL, NULL);
        fclose(f);
        if (k == NULL || EVP_PKEY_id(k) != EVP_PKEY_EC) {
            EVP_PKEY_free(k);
            return -EBADMSG;
        }
        *out = k;
        return 0;
    }
    if (errno != ENOENT)
        return -errno;
    EVP_PKEY *k = acme_key_new();
    if (k == NULL)
        return -ENOMEM;
    int rc = acme_key_write(path, k);
    if (rc < 0) {
        EVP_PKEY_free(k);
        return rc;
    }
    *created = true;
    *out = k;
    return 0;
}

EVP_PKEY *acme_key_new(void)
{
    EC_KEY *ec = EC_KEY_new_by_curve_name(NID_X9_62_prime256v1);
    EVP_PKEY *k = EVP_PKEY_new();
    if (ec == NULL || k == NULL || !EC_KEY_generate_key(ec) || !EVP_PKEY_assign_EC_KEY(k, ec)) {
        EC_KEY_free(ec);
        EVP_PKEY_free(k);
        return NULL;
    }
    return k;
}

/* PEM private key to path.tmp (0600), then renamed over path: never a half-written key. */
int acme_key_write(const char *path, EVP_PKEY *k)
{
    char tmp[ACME_PATH_MAX + 8];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return -errno;
    FILE *f = fdopen(fd, "w");
    if (f == NULL) {
        close(fd);
        return -errno;
    }
    int ok = PEM_write_PrivateKey(f, k, NULL, NULL, 0, NULL, NULL);
    if (fclose(f) != 0 || !ok) {
        unlink(tmp);
        return -EIO;
    }
    return rename(tmp, path) == 0 ? 0 : -errno;
}

/* {"crv":"P-256","kty":"EC","x":"...","y":"..."}: members in RFC 7638's order, no spaces, so it
 * is also the thumbprint's input. */
int acme_jwk(EVP_PKEY *k, char *out, size_t size)
{
    const EC_KEY *ec = EVP_PKEY_get0_EC_KEY(k);
    uint8_t pt[65];
    if (ec == NULL ||
        EC_POINT_point2oct(EC_KEY_get0_group(ec), EC_KEY_get0_public_key(ec),
                           POINT_CONVERSION_UNCOMPRESSED, pt, sizeof(pt), NULL) != sizeof(pt))
        return -EINVAL;
    char x[64], y[64];
    acme_b64url(pt + 1, 32, x, sizeof(x));
    acme_b64url(pt + 33, 32, y, sizeof(y));
    int n =
        snprintf(out, size, "{\"crv\":\"P-256\",\"kty\":\"EC\",\"x\":\"%s\",\"y\":\"%s\"}", x, y);
    return n > 0 && (size_t)n < size ? 0 : -ENOSPC;
}

int acme_thumbprint(EVP_PKEY *k, char *out, size_t size)
{
    char jwk[256];
    int rc = acme_jwk(k, jwk, sizeof(jwk));
    if (rc < 0)
        return rc;
    uint8_t d[SHA256_DIGEST_LENGTH];
    SHA256((const uint8_t *)jwk, strlen(jwk), d);
    return acme_b64url(d, sizeof(d), out, size) ? 0 : -ENOSPC;
}

/* ES256 over "protected.payload": r and s, 32 bytes each (RFC 7518 section 3.4). */
static int es256(EVP_PKEY *k, const char *signing_input, char *out, size_t size)
{
    uint8_t d[SHA256_DIGEST_LENGTH];
    SHA256((const uint8_t *)signing_input, strlen(signing_input), d);
    ECDSA_SIG *sig = ECDSA_do_sign(d, sizeof(d), EVP_PKEY_get0_EC_KEY(k));
    if (sig == NULL)
        return -EIO;
    uint8_t rs[64];
    const BIGNUM *r, *s;
    ECDSA_SIG_get0(sig, &r, &s);
    int ok = BN_bn2bin_padded(rs, 32, r) && BN_bn2bin_padded(rs + 32, 32, s);
    ECDSA_SIG_free(sig);
    if (!ok)
        return -EIO;
    return acme_b64url(rs, sizeof(rs), out, size) ? 0 : -ENOSPC;
}

/* The flattened JWS a request carries: kid (the account URL) or, for newAccount, the jwk. */
char *acme_jws(EVP_PKEY *k, const char *kid, const char *nonce, const char *url,
               const char *payload)
{
    size_t plen = strlen(payload);
    char jwk[256] = "";
    if (kid == NULL && acme_jwk(k, jwk, sizeof(jwk)) < 0)
        return NULL;
    char prot[2048];
    int n = kid ? snprintf(prot, sizeof(prot),
                           "{\"alg\":\"ES256\",\"kid\":\"%s\",\"nonce\":\"%s\",\"url\":\"%s\"}",
                           kid, nonce, url)
                : snprintf(prot, sizeof(prot),
                           "{\"alg\":\"ES256\",\"jwk\":%s,\"nonce\":\"%s\",\"url\":\"%s\"}", jwk,
                           nonce, url);
    if (n < 0 || (size_t)n >= sizeof(prot))
        return NULL;
    size_t p64size = 4 * sizeof(prot) / 3 + 4, b64size = 4 * plen / 3 + 4;
    size_t total = p64size + b64size + 256;
    char *input = malloc(p64size + b64size + 2), *out = malloc(total);
    char sig[128];
    if (input == NULL || out == NULL)
        goto fail;
    size_t a = acme_b64url((const uint8_t *)prot, (size_t)n, input, p64size);
    input[a] = '.';
    acme_b64url((const uint8_t *)payload, plen, input + a + 1, b64size);
    if (es256(k, input, sig, sizeof(sig)) < 0)
        goto fail;
    input[a] = '\0';
    snprintf(out, total, "{\"protected\":\"%s\",\"payload\":\"%s\",\"signature\":\"%s\"}", input,
             input + a + 1, sig);
    free(input);
    return out;
fail:
    free(input);
    free(out);
    return NULL;
}

/* RFC 8555 section 7.3.4: the account key (its JWK) signed with the CA's MAC key by HS256,
 * kid the CA's key identifier, url the newAccount URL. out: the JWS object, NUL-terminated. */
int acme_eab_jws(EVP_PKEY *k, const char *eab_kid, const uint8_t *mac_key, size_t mac_len,
                 const char *url, char *out, size_t size)
{
    char jwk[256], prot[ACME_URL_MAX + 512], input[2 * (ACME_URL_MAX + 512) + 512], sig[64];
    uint8_t mac[EVP_MAX_MD_SIZE];
    unsigned mac_size = 0;
    int n = snprintf(prot, sizeof(prot), "{\"alg\":\"HS256\",\"kid\":\"%s\",\"url\":\"%s\"}",
                     eab_kid, url);
    if (acme_jwk(k, jwk, sizeof(jwk)) < 0 || n < 0 || (size_t)n >= sizeof(prot))
        return -ENOSPC;
    size_t a = acme_b64url((const uint8_t *)prot, (size_t)n, input, sizeof(input));
    if (a == 0 || a + 2 >= sizeof(input))
        return -ENOSPC;
    input[a] = '.';
    size_t b = acme_b64url((const uint8_t *)jwk, strlen(jwk), input + a + 1, sizeof(input) - a - 1);
    if (b == 0 || HMAC(EVP_sha256(), mac_key, mac_len, (const uint8_t *)input, a + 1 + b, mac,
                       &mac_size) == NULL)
        return -ENOSPC;
    if (acme_b64url(mac, mac_size, sig, sizeof(sig)) == 0)
        return -ENOSPC;
    input[a] = '\0';
    n = snprintf(out, size, "{\"protected\":\"%s\",\"payload\":\"%s\",\"signature\":\"%s\"}", input,
                 input + a + 1, sig);
    return n < 0 || (size_t)n >= size ? -ENOSPC : 0;
}

int acme_eab_key_decode(const char *text, uint8_t *out, size_t size, size_t *len)
{
    const char *end;
    size_t n = strlen(text);
    if (n > 0 &&
        (sodium_base642bin(out, size, text, n, NULL, len, &end,
                           sodium_base64_VARIANT_URLSAFE_NO_PADDING) == 0 ||
         sodium_base642bin(out, size, text, n, NULL, len, &end, sodium_base64_VARIANT_ORIGINAL) ==
             0) &&
        *len > 0)
        return 0;
    return -EINVAL;
}

/* subjectAltName with one dNSName, or one iPAddress when host is an IP literal. */
static X509_EXTENSION *san_extension(const char *host)
{
    GENERAL_NAMES *gens = sk_GENERAL_NAME_new_null();
    GENERAL_NAME *gn = GENERAL_NAME_new();
    ASN1_OCTET_STRING *ip = a2i_IPADDRESS(host); /* NULL: not an IP literal */
    ASN1_IA5STRING *ia5 = ip ? ip : ASN1_IA5STRING_new();
    X509_EXTENSION *ext = NULL;
    if (gens && gn && ia5 && (ip || ASN1_STRING_set(ia5, host, -1))) {
        GENERAL_NAME_set0_value(gn, ip ? GEN_IPADD : GEN_DNS, ia5);
        ia5 = NULL;
        if (sk_GENERAL_NAME_push(gens, gn)) {
            gn = NULL;
            ext = X509V3_EXT_i2d(NID_subject_alt_name, 0, gens);
        }
    }
    ASN1_IA5STRING_free(ia5);
    GENERAL_NAME_free(gn);
    GENERAL_NAMES_free(gens);
    return ext;
}

/* A CSR for host (CN and a dNSName; an IP: only the iPAddress, as derper's IP certificate
 * request), signed with k; DER base64url into out. */
int acme_csr(EVP_PKEY *k, const char *host, char *out, size_t size)
{
    X509_REQ *req = X509_REQ_new();
    X509_NAME *name = X509_NAME_new();
    STACK_OF(X509_EXTENSION) *exts = sk_X509_EXTENSION_new_null();
    X509_EXTENSION *ext = san_extension(host);
    int rc = -EIO;
    uint8_t *der = NULL;
    bool pushed = exts && ext && sk_X509_EXTENSION_push(exts, ext);
    if (pushed)
        ext = NULL; /* the stack owns it now */
    ASN1_OCTET_STRING *is_ip = a2i_IPADDRESS(host);
    bool cn = is_ip == NULL;
    ASN1_OCTET_STRING_free(is_ip);
    if (req && name && pushed &&
        (!cn ||
         X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const uint8_t *)host, -1, -1, 0)) &&
        X509_REQ_set_subject_name(req, name) && X509_REQ_set_pubkey(req, k) &&
        X509_REQ_add_extensions(req, exts) && X509_REQ_sign(req, k, EVP_sha256())) {
        int len = i2d_X509_REQ(req, &der);
        if (len > 0 && acme_b64url(der, (size_t)len, out, size))
            rc = 0;
    }
    OPENSSL_free(der);
    X509_EXTENSION_free(ext);
    sk_X509_EXTENSION_pop_free(exts, X509_EXTENSION_free);
    X509_NAME_free(name);
    X509_REQ_free(req);
    return rc;
}
