/* server_acme.c - -certmode letsencrypt: derper's automatic certificates with an ACME (RFC 8555)
 * client of our own. A thread (not a shard: it blocks on the CA) keeps <certdir>/<hostname>.crt
 * and .key current: at start-up and every --acme-check-interval it looks at the certificate and,
 * when it is missing or within --acme-renew-before of expiry, orders a new one from
 * -acme-directory (account key <certdir>/acme_account+key, 0600, as derper's autocert names
 * it): account, order, the http-01 challenge (answered by the -http-port listener through
 * srv_acme_http01), finalize with a CSR for -hostname, download. The new files are written
 * atomically and the server is sent SIGHUP, so the existing reload path swaps the certificate
 * in for new handshakes (live connections untouched). Any failure is logged, the previous
 * certificate stays, and the next try backs off (ACME_BACKOFF_MIN_S doubling to
 * ACME_BACKOFF_MAX_S). Until a first certificate exists the server serves a self-signed one.
 * -acme-ip-certs with an IP -hostname: the same for that address, as derper's ipCertManager
 * orders it (an "ip" identifier, the "shortlived" profile, a CSR with only the IP, its file
 * names and account key file; renewed with a third of the life left, looked at hourly). */
#include <errno.h>
#include <jansson.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "server.h"
#include "ops/server_acme.h"
#include "ops/server_flags.h"

/* Let's Encrypt's production directory: derper's default CA; -certmode gcp's (derper's). */
#define ACME_DIRECTORY_DEFAULT "https://acme-v02.api.letsencrypt.org/directory"
#define ACME_DIRECTORY_GCP     "https://dv.acme-v02.api.pki.goog/directory"
/* An EAB MAC key: Google's are 32 bytes (base64url); room for a CA's longer ones. */
#define ACME_EAB_KEY_MAX 128
/* Renew 30 days before expiry (Let's Encrypt's advice for its 90-day certificates, what
 * derper's autocert does); look at the certificate twice a day. */
#define ACME_RENEW_BEFORE_DEFAULT_S   (30u * 86400u)
#define ACME_CHECK_INTERVAL_DEFAULT_S (12u * 3600u)
/* IP certificates (about six days): derper's renewLoop looks every hour. */
#define ACME_CHECK_INTERVAL_IP_S 3600u
/* Each request to the CA; each poll of an order or authorization until it settles. */
#define ACME_REQUEST_TIMEOUT_MS 15000
#define ACME_POLL_DEADLINE_S    120
/* A failed attempt is retried after 10 s, doubling to an hour (Let's Encrypt's rate limits). */
#define ACME_BACKOFF_MIN_S 10
#define ACME_BACKOFF_MAX_S 3600
/* Tokens being answered at once: one per authorization of an order (one name: one). */
#define ACME_TOKENS_MAX 4
#define ACME_TOKEN_MAX  128
#define ACME_AUTH_MAX   256 /* token "." thumbprint (43) */

struct acme {
    struct srv_config *cfg;
    char directory[ACME_URL_MAX], email[256], account_path[ACME_PATH_MAX];
    char eab_kid[256]; /* -certmode gcp: the External Account Binding ("" none) */
    uint8_t eab_key[ACME_EAB_KEY_MAX];
    size_t eab_len;
    uint64_t renew_before_s, check_interval_s;
    bool ip; /* -acme-ip-certs with an IP -hostname: the "shortlived" profile, an ip identifier */
    bool renew_set; /* --acme-renew-before given (IP: else a third of the lifetime, derper's) */
    EVP_PKEY *account;
    char kid[ACME_URL_MAX], nonce[256];
    char new_nonce[ACME_URL_MAX], new_account[ACME_URL_MAX], new_order[ACME_URL_MAX];
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool started, stop;
};

static struct acme A = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static pthread_mutex_t tok_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    char token[ACME_TOKEN_MAX], auth[ACME_AUTH_MAX];
} tokens[ACME_TOKENS_MAX];

bool srv_acme_http01(const char *token, size_t len, char *out, size_t size)
{
    bool found = false;
    pthread_mutex_lock(&tok_mu);
    for (unsigned i = 0; i < ACME_TOKENS_MAX && !found; i++)
        if (tokens[i].token[0] && strlen(tokens[i].token) == len &&
            memcmp(tokens[i].token, token, len) == 0) {
            snprintf(out, size, "%s", tokens[i].auth);
            found = true;
        }
    pthread_mutex_unlock(&tok_mu);
    return found;
}

static void token_set(unsigned i, const char *token, const char *auth)
{
    pthread_mutex_lock(&tok_mu);
    snprintf(tokens[i].token, sizeof(tokens[i].token), "%s", token);
    snprintf(tokens[i].auth, sizeof(tokens[i].auth), "%s", auth);
    pthread_mutex_unlock(&tok_mu);
}

static void tokens_clear(void)
{
    pthread_mutex_lock(&tok_mu);
    memset(tokens, 0, sizeof(tokens));
    pthread_mutex_unlock(&tok_mu);
}

/* ---------------------------------------------------------------- requests */

static const char *jstr(json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s ? s : "";
}

/* A signed POST (payload "" is POST-as-GET); a badNonce answer is retried once with the fresh
 * nonce it carries. The body is parsed into *json (NULL for non-JSON, e.g. the certificate). */
static int post(const char *url, const char *payload, bool use_jwk, struct acme_resp *r,
                json_t **json, char *err, size_t err_size)
{
    *json = NULL;
    memset(r, 0, sizeof(*r));
    for (int attempt = 0; attempt < 2; attempt++) {
        if (A.nonce[0] == '\0') {
            struct acme_resp h;
            int rc =
                acme_http("HEAD", A.new_nonce, NULL, ACME_REQUEST_TIMEOUT_MS, &h, err, err_size);
            snprintf(A.nonce, sizeof(A.nonce), "%s", rc == 0 ? h.nonce : "");
            acme_resp_free(&h);
            if (rc < 0 || A.nonce[0] == '\0')
                return rc < 0 ? rc : -EPROTO;
        }
        char *body = acme_jws(A.account, use_jwk ? NULL : A.kid, A.nonce, url, payload);
        if (body == NULL) {
            snprintf(err, err_size, "cannot sign the request");
            return -EIO;
        }
        int rc = acme_http("POST", url, body, ACME_REQUEST_TIMEOUT_MS, r, err, err_size);
        free(body);
        A.nonce[0] = '\0';
        if (rc < 0)
            return rc;
        snprintf(A.nonce, sizeof(A.nonce), "%s", r->nonce);
        *json = json_loadb(r->body, r->body_len, 0, NULL);
        bool bad_nonce =
            r->status == 400 && strstr(jstr(*json, "type"), "badNonce") != NULL && attempt == 0;
        if (!bad_nonce)
            break;
        json_decref(*json);
        acme_resp_free(r);
    }
    if (r->status >= 400) {
        snprintf(err, err_size, "%.300s: HTTP %u: %.200s %.300s", url, r->status,
                 jstr(*json, "type"), jstr(*json, "detail"));
        return -EPROTO;
    }
    return 0;
}

static int directory(char *err, size_t err_size)
{
    struct acme_resp r;
    int rc = acme_http("GET", A.directory, NULL, ACME_REQUEST_TIMEOUT_MS, &r, err, err_size);
    if (rc < 0)
        return rc;
    json_t *d = json_loadb(r.body, r.body_len, 0, NULL);
    snprintf(A.new_nonce, sizeof(A.new_nonce), "%s", jstr(d, "newNonce"));
    snprintf(A.new_account, sizeof(A.new_account), "%s", jstr(d, "newAccount"));
    snprintf(A.new_order, sizeof(A.new_order), "%s", jstr(d, "newOrder"));
    json_decref(d);
    acme_resp_free(&r);
    if (r.status != 200 || !A.new_nonce[0] || !A.new_account[0] || !A.new_order[0]) {
        snprintf(err, err_size, "%.300s: not an ACME directory (HTTP %u)", A.directory, r.status);
        return -EPROTO;
    }
    return 0;
}

static int account(char *err, size_t err_size)
{
    char payload[4096], eab[2048] = "";
    if (A.eab_kid[0] && acme_eab_jws(A.account, A.eab_kid, A.eab_key, A.eab_len, A.new_account, eab,
                                     sizeof(eab)) < 0) {
        snprintf(err, err_size, "cannot sign the external account binding");
        return -EIO;
    }
    int n = snprintf(payload, sizeof(payload), "{\"termsOfServiceAgreed\":true");
    if (A.email[0])
        n += snprintf(payload + n, sizeof(payload) - (size_t)n, ",\"contact\":[\"mailto:%s\"]",
                      A.email);
    if (eab[0])
        n += snprintf(payload + n, sizeof(payload) - (size_t)n, ",\"externalAccountBinding\":%s",
                      eab);
    snprintf(payload + n, sizeof(payload) - (size_t)n, "}");
    struct acme_resp r;
    json_t *j;
    int rc = post(A.new_account, payload, true, &r, &j, err, err_size);
    if (rc == 0)
        snprintf(A.kid, sizeof(A.kid), "%s", r.location);
    json_decref(j);
    acme_resp_free(&r);
    if (rc == 0 && A.kid[0] == '\0') {
        snprintf(err, err_size, "newAccount answered without a Location");
        return -EPROTO;
    }
    return rc;
}

/* POST-as-GET url until its status is want (or not "pending"/"processing"). */
static int poll_status(const char *url, const char *want, json_t **out, char *err, size_t err_size)
{
    time_t end = time(NULL) + ACME_POLL_DEADLINE_S;
    for (;;) {
        struct acme_resp r;
        json_t *j;
        int rc = post(url, "", false, &r, &j, err, err_size);
        unsigned wait = r.retry_after_s ? r.retry_after_s : 1;
        acme_resp_free(&r);
        if (rc < 0)
            return rc;
        const char *st = jstr(j, "status");
        if (strcmp(st, want) == 0) {
            *out = j;
            return 0;
        }
        if ((strcmp(st, "pending") != 0 && strcmp(st, "processing") != 0 &&
             strcmp(st, "ready") != 0) ||
            time(NULL) + wait > end) {
            json_t *e = json_object_get(j, "error");
            json_t *ch = json_array_get(json_object_get(j, "challenges"), 0);
            if (e == NULL && ch)
                e = json_object_get(ch, "error");
            snprintf(err, err_size, "%.300s is %.20s, not %s: %.300s", url, st, want,
                     jstr(e, "detail"));
            json_decref(j);
            return -EPROTO;
        }
        json_decref(j);
        sleep(wait);
    }
}

/* One authorization: publish the http-01 key authorization, tell the CA, wait for valid. */
static int authorize(unsigned slot, const char *url, char *err, size_t err_size)
{
    if (url == NULL) {
        snprintf(err, err_size, "an order lists an authorization that is not a URL");
        return -EPROTO;
    }
    struct acme_resp r;
    json_t *z;
    int rc = post(url, "", false, &r, &z, err, err_size);
    acme_resp_free(&r);
    if (rc < 0)
        return rc;
    if (strcmp(jstr(z, "status"), "valid") == 0) {
        json_decref(z);
        return 0; /* reused */
    }
    json_t *ch = NULL, *c;
    size_t i;
    json_t *all = json_object_get(z, "challenges");
    for (i = 0; i < json_array_size(all); i++)
        if (strcmp(jstr(c = json_array_get(all, i), "type"), "http-01") == 0)
            ch = c;
    char token[ACME_TOKEN_MAX], chal[ACME_URL_MAX], thumb[64], auth[ACME_AUTH_MAX];
    snprintf(token, sizeof(token), "%s", jstr(ch, "token"));
    snprintf(chal, sizeof(chal), "%s", jstr(ch, "url"));
    json_decref(z);
    if (ch == NULL || token[0] == '\0' || chal[0] == '\0') {
        snprintf(err, err_size, "%.300s offers no http-01 challenge", url);
        return -EPROTO;
    }
    acme_thumbprint(A.account, thumb, sizeof(thumb));
    snprintf(auth, sizeof(auth), "%s.%s", token, thumb);
    token_set(slot, token, auth);
    json_t *j;
    rc = post(chal, "{}", false, &r, &j, err, err_size);
    json_decref(j);
    acme_resp_free(&r);
    if (rc == 0)
        rc = poll_status(url, "valid", &j, err, err_size);
    if (rc == 0)
        json_decref(j);
    return rc;
}

/* The new key and chain, written so that neither file is ever half there. */
static int install(EVP_PKEY *key, const char *chain, size_t len, char *err, size_t err_size)
{
    const struct srv_config *cfg = A.cfg;
    char tmp[sizeof(cfg->cert_file) + 8];
    snprintf(tmp, sizeof(tmp), "%s.tmp", cfg->cert_file);
    FILE *f = fopen(tmp, "w");
    if (f == NULL || fwrite(chain, 1, len, f) != len || fclose(f) != 0) {
        snprintf(err, err_size, "cannot write %.300s", tmp);
        return -EIO;
    }
    int rc = acme_key_write(cfg->key_file, key);
    if (rc == 0 && rename(tmp, cfg->cert_file) != 0)
        rc = -errno;
    if (rc < 0)
        snprintf(err, err_size, "cannot install %.300s / %.300s: %s", cfg->cert_file, cfg->key_file,
                 strerror(-rc));
    return rc;
}

static int finalize(const char *fin_url, const char *order_url, char *err, size_t err_size)
{
    EVP_PKEY *key = acme_key_new();
    char csr[4096], payload[4200];
    if (key == NULL || acme_csr(key, A.cfg->hostname, csr, sizeof(csr)) < 0) {
        EVP_PKEY_free(key);
        snprintf(err, err_size, "cannot make the CSR");
        return -EIO;
    }
    snprintf(payload, sizeof(payload), "{\"csr\":\"%s\"}", csr);
    struct acme_resp r;
    json_t *o;
    int rc = post(fin_url, payload, false, &r, &o, err, err_size);
    json_decref(o);
    acme_resp_free(&r);
    if (rc == 0)
        rc = poll_status(order_url, "valid", &o, err, err_size);
    if (rc == 0) {
        char cert_url[ACME_URL_MAX];
        snprintf(cert_url, sizeof(cert_url), "%s", jstr(o, "certificate"));
        json_decref(o);
        rc = post(cert_url, "", false, &r, &o, err, err_size);
        if (rc == 0 && strstr(r.body, "BEGIN CERTIFICATE") == NULL) {
            snprintf(err, err_size, "%.300s: no PEM chain", cert_url);
            rc = -EPROTO;
        }
        if (rc == 0)
            rc = install(key, r.body, r.body_len, err, err_size);
        json_decref(o);
        acme_resp_free(&r);
    }
    EVP_PKEY_free(key);
    return rc;
}

/* Directory, account, order, challenges, certificate. */
static int issue(char *err, size_t err_size)
{
    int rc = directory(err, err_size);
    if (rc == 0 && A.kid[0] == '\0')
        rc = account(err, err_size);
    if (rc < 0)
        return rc;
    char payload[600];
    if (A.ip) /* derper's ipCertManager: acme.IPIDs, WithOrderProfile("shortlived") */
        snprintf(payload, sizeof(payload),
                 "{\"identifiers\":[{\"type\":\"ip\",\"value\":\"%s\"}],"
                 "\"profile\":\"shortlived\"}",
                 A.cfg->hostname);
    else
        snprintf(payload, sizeof(payload),
                 "{\"identifiers\":[{\"type\":\"dns\",\"value\":\"%s\"}]}", A.cfg->hostname);
    struct acme_resp r;
    json_t *o;
    rc = post(A.new_order, payload, false, &r, &o, err, err_size);
    char order_url[ACME_URL_MAX], fin[ACME_URL_MAX];
    snprintf(order_url, sizeof(order_url), "%s", r.location);
    snprintf(fin, sizeof(fin), "%s", jstr(o, "finalize"));
    acme_resp_free(&r);
    json_t *authz = json_incref(json_object_get(o, "authorizations"));
    json_decref(o);
    size_t i;
    for (i = 0; rc == 0 && i < json_array_size(authz) && i < ACME_TOKENS_MAX; i++)
        rc = authorize((unsigned)i, json_string_value(json_array_get(authz, i)), err, err_size);
    json_decref(authz);
    if (rc == 0)
        rc = finalize(fin, order_url, err, err_size);
    tokens_clear();
    return rc;
}

/* Seconds until the certificate file expires; -1 when it is missing or does not parse. life:
 * its whole validity in seconds (NULL: not wanted). */
static int64_t cert_seconds_left_life(const char *path, int64_t *life)
{
    FILE *f = fopen(path, "r");
    X509 *x = f ? PEM_read_X509(f, NULL, NULL, NULL) : NULL;
    if (f)
        fclose(f);
    int days = 0, secs = 0, ld = 0, ls = 0;
    bool ok = x && ASN1_TIME_diff(&days, &secs, NULL, X509_get0_notAfter(x)) &&
              ASN1_TIME_diff(&ld, &ls, X509_get0_notBefore(x), X509_get0_notAfter(x));
    X509_free(x);
    if (life)
        *life = (int64_t)ld * 86400 + ls;
    return ok ? (int64_t)days * 86400 + secs : -1;
}

static int64_t cert_seconds_left(const char *path)
{
    return cert_seconds_left_life(path, NULL);
}

/* Whether the certificate is due: missing, or within the renewal window (IP certificates
 * without --acme-renew-before: less than a third of its life left, derper's
 * certNeedsRenewal). left: seconds until it expires, -1 when missing. */
static bool cert_due(int64_t *left)
{
    int64_t life;
    *left = cert_seconds_left_life(A.cfg->cert_file, &life);
    uint64_t window = A.ip && !A.renew_set ? (uint64_t)(life > 0 ? life / 3 : 0) : A.renew_before_s;
    return *left < 0 || (uint64_t)*left <= window;
}

/* Sleeps s seconds or until srv_acme_stop; false when stopping. */
static bool wait_s(uint64_t s)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += (time_t)s;
    pthread_mutex_lock(&A.mu);
    while (!A.stop && pthread_cond_timedwait(&A.cv, &A.mu, &until) != ETIMEDOUT)
        ;
    bool go_on = !A.stop;
    pthread_mutex_unlock(&A.mu);
    return go_on;
}

static void *acme_thread(void *arg)
{
    (void)arg;
    uint64_t backoff = 0;
    do {
        int64_t left;
        if (!cert_due(&left)) {
            backoff = 0;
            continue; /* not due: look again after the check interval */
        }
        hd_log(HD_LOG_INFO, "ACME: %s for %s from %s",
               left < 0 ? "getting a certificate" : "renewing the certificate", A.cfg->hostname,
               A.directory);
        char err[1024];
        if (issue(err, sizeof(err)) == 0) {
            hd_log(HD_LOG_INFO, "ACME: new certificate for %s in %s; reloading", A.cfg->hostname,
                   A.cfg->cert_file);
            if (A.ip) /* derper's hint: a DERP map node for this address */
                hd_log(HD_LOG_INFO,
                       "ACME: configure it in the DERP map using "
                       "(https://tailscale.com/s/custom-derp): "
                       "{\"Name\":\"custom\",\"RegionID\":900,\"HostName\":\"%s\"}",
                       A.cfg->hostname);
            backoff = 0;
            kill(getpid(), SIGHUP); /* the reload path: new handshakes get it */
            continue;
        }
        backoff = backoff ? (backoff * 2 > ACME_BACKOFF_MAX_S ? ACME_BACKOFF_MAX_S : backoff * 2)
                          : ACME_BACKOFF_MIN_S;
        hd_log(HD_LOG_ERROR, "ACME: %s for %s failed, keeping the %s; next try in %llus: %s",
               left < 0 ? "getting a certificate" : "renewal", A.cfg->hostname,
               left < 0 ? "self-signed certificate" : "previous certificate",
               (unsigned long long)backoff, err);
    } while (wait_s(backoff && backoff < A.check_interval_s ? backoff : A.check_interval_s));
    return NULL;
}

int srv_mkdir_all(const char *dir)
{
    char path[1024];
    if (snprintf(path, sizeof(path), "%s", dir) >= (int)sizeof(path))
        return -ENAMETOOLONG;
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char c = *p;
        *p = '\0';
        struct stat st;
        if (stat(path, &st) != 0 && mkdir(path, 0700) != 0 && errno != EEXIST)
            return -errno;
        *p = c;
        if (c == '\0')
            return 0;
    }
}

/* derper's certProviderByCertMode rules for -acme-ip-certs and an IP -hostname; in IP mode the
 * files are derper's ipCertManager's (<certdir>/<ip, ':' as '.'>.crt and .key). 0 or -1
 * (printed). */
static int configure_ip(struct srv_config *cfg, const struct srv_flags *f, const char *certdir)
{
    bool ip = !cfg->sni_required;
    if (ip && strcmp(f->certmode, "gcp") == 0) {
        fprintf(stderr, "hderp-server: -certmode gcp requires -hostname to be a DNS name, not an "
                        "IP address\n");
        return -1;
    }
    if (ip && !f->acme_ip_certs) {
        fprintf(stderr,
                "hderp-server: -hostname %s is an IP address; use -certmode manual for a "
                "self-signed cert, or set -acme-ip-certs to get Let's Encrypt IP address "
                "certs\n",
                f->hostname);
        return -1;
    }
    if (!ip && f->acme_ip_certs) {
        fprintf(stderr,
                "hderp-server: -acme-ip-certs: a DNS -hostname (%s) with IP address certificates "
                "beside it is not supported: give the server's IP address as -hostname (its "
                "certificate is then the IP's), or drop -acme-ip-certs\n",
                f->hostname);
        return -1;
    }
    A.ip = ip;
    if (!ip)
        return 0;
    char base[64];
    snprintf(base, sizeof(base), "%s", f->hostname);
    for (char *c = base; *c; c++)
        *c = *c == ':' ? '.' : *c;
    if (snprintf(cfg->cert_file, sizeof(cfg->cert_file), "%s/%s.crt", certdir, base) >=
            (int)sizeof(cfg->cert_file) ||
        snprintf(cfg->key_file, sizeof(cfg->key_file), "%s/%s.key", certdir, base) >=
            (int)sizeof(cfg->key_file)) {
        fprintf(stderr, "hderp-server: -certdir %s: too long\n", certdir);
        return -1;
    }
    return 0;
}

int srv_acme_configure(struct srv_config *cfg, const struct srv_flags *f, const char *certdir)
{
    if (configure_ip(cfg, f, certdir) < 0)
        return -1;
    if (f->http_port <= 0)
        hd_log(HD_LOG_WARN,
               "ACME: -http-port is off, so the CA's http-01 check of %s cannot "
               "reach this server (certificates will not be issued)",
               f->hostname);
    A.cfg = cfg;
    bool gcp = strcmp(f->certmode, "gcp") == 0; /* checked by srv_flags_parse */
    snprintf(A.directory, sizeof(A.directory), "%s",
             f->acme_directory ? f->acme_directory
             : gcp             ? ACME_DIRECTORY_GCP
                               : ACME_DIRECTORY_DEFAULT);
    if (gcp) {
        snprintf(A.eab_kid, sizeof(A.eab_kid), "%s", f->acme_eab_kid);
        if (acme_eab_key_decode(f->acme_eab_key, A.eab_key, sizeof(A.eab_key), &A.eab_len) < 0)
            return -1;
    }
    snprintf(A.email, sizeof(A.email), "%s", f->acme_email ? f->acme_email : "");
    A.renew_set = f->acme_renew_before_ms != 0;
    A.renew_before_s =
        f->acme_renew_before_ms ? f->acme_renew_before_ms / 1000 : ACME_RENEW_BEFORE_DEFAULT_S;
    A.check_interval_s = f->acme_check_interval_ms ? f->acme_check_interval_ms / 1000
                         : A.ip                    ? ACME_CHECK_INTERVAL_IP_S
                                                   : ACME_CHECK_INTERVAL_DEFAULT_S;
    if (A.check_interval_s == 0)
        A.check_interval_s = 1;
    int rc =
        srv_mkdir_all(certdir); /* a -certdir that does not exist yet is made, as derper does */
    if (rc < 0) {
        fprintf(stderr,
                "hderp-server: -certdir %s: cannot create it: %s (create it, or give a "
                "-certdir this user may write)\n",
                certdir, strerror(-rc));
        return -1;
    }
    snprintf(A.account_path, sizeof(A.account_path), "%s/%s", certdir,
             A.ip ? "acme-account.key" : "acme_account+key"); /* derper's, for each */
    bool created;
    rc = acme_key_load_or_create(A.account_path, &A.account, &created);
    if (rc < 0) {
        fprintf(stderr, "hderp-server: ACME account key %s: %s\n", A.account_path, strerror(-rc));
        return -1;
    }
    if (created)
        hd_log(HD_LOG_INFO, "ACME: created the account key %s", A.account_path);
    cfg->acme = true;
    if (cert_seconds_left(cfg->cert_file) < 0) {
        hd_log(HD_LOG_INFO, "ACME: no certificate in %s yet: self-signed until one is issued",
               cfg->cert_file);
        cfg->self_signed = true;
    }
    return 0;
}

int srv_acme_start(struct srv_config *cfg)
{
    if (!cfg->acme)
        return 0;
    /* The thread is born with the runtime's signals blocked (it may start before the runtime
     * blocks them): SIGHUP must reach the main thread's signalfd, never end the process here. */
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGHUP);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    int rc = pthread_create(&A.thread, NULL, acme_thread, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    A.started = rc == 0;
    return -rc;
}

void srv_acme_stop(void)
{
    if (A.started) {
        pthread_mutex_lock(&A.mu);
        A.stop = true;
        pthread_cond_signal(&A.cv);
        pthread_mutex_unlock(&A.mu);
        pthread_join(A.thread, NULL); /* a request in flight ends within its timeout */
        A.started = false;
    }
    EVP_PKEY_free(A.account);
    A.account = NULL;
}
