/* server_bootdns.c - derper's bootstrap DNS (cmd/derper/bootstrap_dns.go at v1.102.5):
 * -bootstrap-dns-names and -unpublished-bootstrap-dns-names, comma-separated names resolved at
 * start and every 10 minutes on a thread of their own (the system resolver, getaddrinfo, as
 * net/resolve.c uses; "name/txtname" entries of the unpublished list take a rollout percentage
 * from txtname's TXT record, "0".."100", through libresolv). Each refresh builds an immutable
 * snapshot published to every shard (hd_snap_var_publish); GET /bootstrap-dns answers from the
 * shard's snapshot: the published names as derper's indented JSON object (name -> addresses,
 * shuffled each refresh), or for ?q=NAME of the unpublished list whose percentage admits the
 * client, only {NAME: addresses}. Counted as derper's handleBootstrapDNS counts (per shard,
 * server_counters.h; the distinct ?q= names in one set for the process, as derper's
 * bootstrapLookupMap). Main thread (attach/detach), the refresh thread, the shards (serve). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <arpa/nameser.h>
#include <ctype.h>
#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <resolv.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sodium.h>

#include "server.h"

#define BOOTDNS_REFRESH_S   600 /* derper: time.Sleep(10 * time.Minute) */
#define BOOTDNS_NAMES_MAX   64  /* entries per list */
#define BOOTDNS_ADDRS_MAX   32  /* addresses kept per name */
#define BOOTDNS_JSON_MAX    (BOOTDNS_NAMES_MAX * (BOOTDNS_ADDRS_MAX * 56 + 600) + 16)
#define BOOTDNS_TXT_ANS_MAX 4096
#define BOOTDNS_QUERIED_MAX 500  /* derper: bootstrapLookupMap cleared when it holds more */
#define BOOTDNS_QUERIED_CAP 1024 /* open addressing, at most half full */

struct bootdns_name {
    char name[NI_MAXHOST];
    double percent; /* derper's Percent[name]: 0 when absent */
    char *json;     /* {"name": [...]} (unpublished: one name's answer) */
    size_t json_len;
};

struct bootdns_pub {
    char name[NI_MAXHOST];
    unsigned addrs;
};

struct srv_bootdns_snap {
    struct hd_snap snap;
    char *published; /* NULL: no -bootstrap-dns-names, the body is empty */
    size_t published_len;
    struct bootdns_name *unpub; /* resolved unpublished names (with at least one address) */
    unsigned unpub_count;
    struct bootdns_pub *pub; /* the published names (derper's dnsCache: hit or miss counted) */
    unsigned pub_count;
};

static struct {
    pthread_t thread;
    bool started, stop;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    const char *names, *unpublished;
    struct hd_snap_var *var;
} B = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

/* ---------------------------------------------------------------- JSON as Go writes it */

struct jbuf {
    char *p;
    size_t len, cap;
    bool over;
};

static void jput(struct jbuf *b, const char *s, size_t n)
{
    if (b->over || b->len + n >= b->cap) {
        b->over = true;
        return;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

static void jputs(struct jbuf *b, const char *s)
{
    jput(b, s, strlen(s));
}

/* A JSON string as encoding/json escapes it (HTML-safe: <, > and & as \u00XX). */
static void jstring(struct jbuf *b, const char *s)
{
    jputs(b, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\', esc[1] = (char)c;
            jput(b, esc, 2);
        } else if (c == '\n' || c == '\r' || c == '\t') {
            esc[0] = '\\', esc[1] = c == '\n' ? 'n' : c == '\r' ? 'r' : 't';
            jput(b, esc, 2);
        } else if (c < 0x20 || c == '<' || c == '>' || c == '&') {
            snprintf(esc, sizeof(esc), "\\u%04x", c);
            jput(b, esc, 6);
        } else {
            jput(b, (const char *)&c, 1);
        }
    }
    jputs(b, "\"");
}

/* net.IP.String(): dotted for IPv4 and IPv4-mapped IPv6, RFC 5952 otherwise. */
static void ip_text(const struct net_addr *a, char out[INET6_ADDRSTRLEN])
{
    if (a->sa.sa_family == AF_INET) {
        inet_ntop(AF_INET, &a->in4.sin_addr, out, INET6_ADDRSTRLEN);
    } else if (IN6_IS_ADDR_V4MAPPED(&a->in6.sin6_addr)) {
        inet_ntop(AF_INET, &a->in6.sin6_addr.s6_addr[12], out, INET6_ADDRSTRLEN);
    } else {
        inet_ntop(AF_INET6, &a->in6.sin6_addr, out, INET6_ADDRSTRLEN);
    }
}

/* One `"name": [ ... ]` member at indent level 1 (json.MarshalIndent(m, "", "\t")). */
static void jmember(struct jbuf *b, const char *name, const struct net_addr *addrs, unsigned n)
{
    jputs(b, "\n\t");
    jstring(b, name);
    jputs(b, ": [");
    for (unsigned i = 0; i < n; i++) {
        char ip[INET6_ADDRSTRLEN];
        ip_text(&addrs[i], ip);
        jputs(b, i ? ",\n\t\t\"" : "\n\t\t\"");
        jputs(b, ip);
        jputs(b, "\"");
    }
    jputs(b, n ? "\n\t]" : "]");
}

/* ---------------------------------------------------------------- lookups */

struct resolved {
    char name[NI_MAXHOST];
    char txt[NI_MAXHOST]; /* "" when the entry has no "/" */
    unsigned count;
    struct net_addr addrs[BOOTDNS_ADDRS_MAX];
};

/* Go's LookupIP(ctx, "ip", name): every address, v4 and v6, in the resolver's order. */
static int lookup_ip(struct resolved *r)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int rc = getaddrinfo(r->name, NULL, &hints, &res);
    if (rc != 0) {
        hd_log(HD_LOG_WARN, "bootstrap DNS lookup \"%s\": %s", r->name, gai_strerror(rc));
        return -ENOENT;
    }
    r->count = net_addrs_from_addrinfo(res, r->addrs, BOOTDNS_ADDRS_MAX);
    freeaddrinfo(res);
    return r->count ? 0 : -ENOENT;
}

/* Go's LookupTXT and derper's reading of it: each record's strings joined; the last record that
 * is a whole number 0..100 sets the percentage. -1: no such record (the percentage stays 0). */
static double lookup_percent(const char *txt_name)
{
    unsigned char ans[BOOTDNS_TXT_ANS_MAX];
    struct __res_state st = {0};
    if (res_ninit(&st) != 0)
        return -1;
    int len = res_nquery(&st, txt_name, ns_c_in, ns_t_txt, ans, sizeof(ans));
    res_nclose(&st);
    ns_msg msg;
    if (len < 0 || ns_initparse(ans, len, &msg) < 0) {
        hd_log(HD_LOG_WARN, "bootstrap DNS lookup \"%s\": no TXT record", txt_name);
        return -1;
    }
    double percent = -1;
    for (int i = 0; i < ns_msg_count(msg, ns_s_an); i++) {
        ns_rr rr;
        if (ns_parserr(&msg, ns_s_an, i, &rr) < 0 || ns_rr_type(rr) != ns_t_txt)
            continue;
        char joined[512];
        size_t j = 0;
        const unsigned char *p = ns_rr_rdata(rr), *end = p + ns_rr_rdlen(rr);
        while (p < end && p + 1 + *p <= end) {
            size_t n = *p;
            if (j + n < sizeof(joined))
                memcpy(joined + j, p + 1, n), j += n;
            p += 1 + n;
        }
        joined[j] = '\0';
        char *e;
        errno = 0;
        long v = j ? strtol(joined, &e, 10) : -1;
        if (j && !errno && *e == '\0' && !isspace((unsigned char)joined[0]) && v >= 0 &&
            v <= 100) /* strconv.Atoi: no leading space */
            percent = (double)v / 100;
    }
    return percent;
}

static void shuffle(struct net_addr *a, unsigned n)
{
    for (unsigned i = n; i > 1; i--) {
        unsigned j = randombytes_uniform(i);
        struct net_addr t = a[i - 1];
        a[i - 1] = a[j];
        a[j] = t;
    }
}

static int cmp_name(const void *x, const void *y)
{
    return strcmp(((const struct resolved *)x)->name, ((const struct resolved *)y)->name);
}

/* derper's resolveList: split on ",", "name[/txtname]" each; the failures are logged and left
 * out. Sorted by name (Go's JSON orders map keys), a repeated name kept once. */
static unsigned resolve_list(const char *list, struct resolved *out)
{
    unsigned n = 0;
    const char *p = list;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        struct resolved *r = &out[n];
        memset(r, 0, sizeof(*r));
        const char *slash = memchr(p, '/', len);
        size_t nlen = slash ? (size_t)(slash - p) : len;
        if (n < BOOTDNS_NAMES_MAX && nlen < sizeof(r->name) && len - nlen < sizeof(r->txt)) {
            memcpy(r->name, p, nlen);
            if (slash)
                memcpy(r->txt, slash + 1, len - nlen - 1);
            if (r->name[0] == '\0')
                hd_log(HD_LOG_WARN, "bootstrap DNS lookup \"\": no such host");
            else if (lookup_ip(r) == 0)
                n++;
        }
        if (!comma)
            break;
        p = comma + 1;
    }
    qsort(out, n, sizeof(*out), cmp_name);
    unsigned k = 0;
    for (unsigned i = 0; i < n; i++) {
        if (k > 0 && strcmp(out[k - 1].name, out[i].name) == 0)
            continue; /* a repeated name: one entry, as Go's map */
        if (k != i)
            out[k] = out[i];
        k++;
    }
    return k;
}

/* ---------------------------------------------------------------- the snapshot */

static void snap_free(struct hd_snap *sn)
{
    struct srv_bootdns_snap *b = hd_container_of(sn, struct srv_bootdns_snap, snap);
    for (unsigned i = 0; i < b->unpub_count; i++)
        free(b->unpub[i].json);
    free(b->unpub);
    free(b->pub);
    free(b->published);
    free(b);
}

/* json.MarshalIndent of a map[string][]net.IP: "null" for a nil map (every lookup failed). */
static char *marshal(const struct resolved *r, unsigned n, size_t *len)
{
    struct jbuf b = {.cap = BOOTDNS_JSON_MAX};
    if ((b.p = malloc(b.cap)) == NULL)
        return NULL;
    if (n == 0)
        jputs(&b, "null");
    for (unsigned i = 0; i < n; i++) {
        jputs(&b, i ? "," : "{");
        jmember(&b, r[i].name, r[i].addrs, r[i].count);
    }
    if (n)
        jputs(&b, "\n}");
    HD_ASSERT(!b.over); /* BOOTDNS_JSON_MAX holds every name's every address */
    *len = b.len;
    return b.p;
}

/* The unpublished names: each one's own answer and percentage. 0 or -ENOMEM. */
static int build_unpublished(struct srv_bootdns_snap *b, struct resolved *r, unsigned n)
{
    if (n == 0)
        return 0;
    if ((b->unpub = calloc(n, sizeof(*b->unpub))) == NULL)
        return -ENOMEM;
    for (unsigned i = 0; i < n; i++) {
        struct bootdns_name *u = &b->unpub[b->unpub_count++];
        snprintf(u->name, sizeof(u->name), "%s", r[i].name);
        u->percent = 1.0;
        if (r[i].txt[0]) {
            double p = lookup_percent(r[i].txt);
            u->percent = p < 0 ? 0 : p;
        }
        if ((u->json = marshal(&r[i], 1, &u->json_len)) == NULL)
            return -ENOMEM;
    }
    return 0;
}

/* derper's refreshBootstrapDNS and refreshUnpublishedDNS: NULL on no memory. */
static struct srv_bootdns_snap *refresh(void)
{
    struct resolved *r = calloc(BOOTDNS_NAMES_MAX, sizeof(*r));
    struct srv_bootdns_snap *b = calloc(1, sizeof(*b));
    if (r == NULL || b == NULL)
        goto fail;
    hd_snap_init(&b->snap, snap_free);
    if (B.names[0]) {
        unsigned n = resolve_list(B.names, r);
        for (unsigned i = 0; i < n; i++)
            shuffle(r[i].addrs, r[i].count); /* derper: so clients do not all favour IPv6 */
        if ((b->published = marshal(r, n, &b->published_len)) == NULL)
            goto fail;
        if (n && (b->pub = calloc(n, sizeof(*b->pub))) == NULL)
            goto fail;
        for (unsigned i = 0; i < n; i++, b->pub_count++) {
            snprintf(b->pub[i].name, sizeof(b->pub[i].name), "%s", r[i].name);
            b->pub[i].addrs = r[i].count;
        }
    }
    if (B.unpublished[0] && build_unpublished(b, r, resolve_list(B.unpublished, r)) < 0)
        goto fail;
    free(r);
    return b;
fail:
    free(r);
    if (b)
        hd_snap_unref(&b->snap);
    return NULL;
}

static bool wait_s(uint64_t s)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += (time_t)s;
    pthread_mutex_lock(&B.mu);
    while (!B.stop && pthread_cond_timedwait(&B.cv, &B.mu, &until) != ETIMEDOUT)
        ;
    bool go_on = !B.stop;
    pthread_mutex_unlock(&B.mu);
    return go_on;
}

static void *refresh_thread(void *arg)
{
    (void)arg;
    do {
        struct srv_bootdns_snap *b = refresh();
        if (b == NULL) {
            hd_log(HD_LOG_WARN, "bootstrap DNS: out of memory: the previous answers stay");
            continue;
        }
        int rc = hd_snap_var_publish(B.var, &b->snap);
        if (rc < 0 && rc != -ESHUTDOWN)
            hd_log(HD_LOG_WARN, "bootstrap DNS: publishing the answers: %s", strerror(-rc));
    } while (wait_s(BOOTDNS_REFRESH_S));
    return NULL;
}

int srv_bootdns_attach(struct srv_config *cfg, struct hd_runtime *rt)
{
    B.names = cfg->bootdns_names ? cfg->bootdns_names : "";
    B.unpublished = cfg->bootdns_unpublished ? cfg->bootdns_unpublished : "";
    if (!B.names[0] && !B.unpublished[0])
        return 0; /* derper's refreshBootstrapDNSLoop returns at once */
    B.stop = false;
    int rc = hd_snap_var_create(rt, NULL, &B.var);
    if (rc < 0)
        return rc;
    cfg->bootdns = B.var;
    sigset_t block, old; /* as the ACME thread: signals stay with the main thread */
    sigemptyset(&block);
    sigaddset(&block, SIGHUP);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGUSR2);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    rc = pthread_create(&B.thread, NULL, refresh_thread, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        hd_snap_var_destroy(B.var);
        cfg->bootdns = B.var = NULL;
        return -rc;
    }
    B.started = true;
    return 0;
}

void srv_bootdns_detach(struct srv_config *cfg)
{
    if (B.started) {
        pthread_mutex_lock(&B.mu);
        B.stop = true;
        pthread_cond_signal(&B.cv);
        pthread_mutex_unlock(&B.mu);
        pthread_join(B.thread, NULL); /* a lookup in flight ends within the resolver's timeout */
        B.started = false;
    }
    hd_snap_var_destroy(B.var);
    cfg->bootdns = B.var = NULL;
}

/* ---------------------------------------------------------------- serving */

/* Go's math/rand/v2 PCG seeded (seed1, seed2), its first Float64. */
double srv_bootdns_pcg_float64(uint64_t seed1, uint64_t seed2)
{
    const unsigned __int128 mul =
        ((unsigned __int128)2549297995355413924ULL << 64) | 4865540595714422341ULL;
    const unsigned __int128 inc =
        ((unsigned __int128)6364136223846793005ULL << 64) | 1442695040888963407ULL;
    unsigned __int128 state = ((unsigned __int128)seed1 << 64) | seed2;
    state = state * mul + inc;
    uint64_t hi = (uint64_t)(state >> 64), lo = (uint64_t)state;
    hi ^= hi >> 32; /* DXSM */
    hi *= 0xda942042e4dd58b5ULL;
    hi ^= hi >> 48;
    hi *= lo | 1;
    return (double)(hi << 11 >> 11) / (double)(1ULL << 53);
}

/* derper's remoteAddrMatchesPercent: the client's address (as 16 bytes, IPv4 mapped) seeds a
 * PCG whose first draw must be under the percentage; loopback draws at random (for testing). */
bool srv_bootdns_addr_matches(const struct net_addr *a, double percent)
{
    if (percent == 0)
        return false;
    if (percent == 1)
        return true;
    if (a->sa.sa_family != AF_INET && a->sa.sa_family != AF_INET6)
        return false;
    uint8_t ip[16];
    srv_addr_key(a, ip);
    static const uint8_t v4_prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    bool loop = (memcmp(ip, v4_prefix, 12) == 0 && ip[12] == 127) ||
                IN6_IS_ADDR_LOOPBACK((const struct in6_addr *)ip);
    if (loop)
        return randombytes_uniform(1U << 30) < (1U << 29);
    uint64_t s1 = 0, s2 = 0;
    for (int i = 7; i >= 0; i--) /* binary.LittleEndian.Uint64 */
        s1 = s1 << 8 | ip[i], s2 = s2 << 8 | ip[8 + i];
    return percent > srv_bootdns_pcg_float64(s1, s2);
}

/* Is this query key "q" once unescaped as Go's url.ParseQuery does ("q" or "%71", either case)?
 * A key with a bad escape is a pair Go skips. */
static bool key_is_q(const char *k, size_t len)
{
    char key[4];
    ssize_t n = net_http_query_unescape((struct net_http_str){k, len}, key, sizeof(key));
    return n == 1 && key[0] == 'q'; /* longer keys (-ENOSPC) are not "q" either */
}

/* Go's r.URL.Query().Get("q"): '&'-separated pairs (one with ';' skipped), key and value
 * unescaped as url.QueryUnescape does (a pair with a bad escape in either skipped); the first q.
 * false: none. */
static bool query_q(struct net_http_str query, char *out, size_t cap)
{
    const char *p = query.ptr, *end = p ? p + query.len : NULL;
    while (p && p < end) {
        const char *amp = memchr(p, '&', (size_t)(end - p));
        const char *pe = amp ? amp : end;
        bool semi = memchr(p, ';', (size_t)(pe - p)) != NULL;
        const char *eq = memchr(p, '=', (size_t)(pe - p));
        const char *ke = eq ? eq : pe;
        if (!semi && key_is_q(p, (size_t)(ke - p))) {
            const char *v = eq ? eq + 1 : pe;
            struct net_http_str value = {v, (size_t)(pe - v)};
            ssize_t n = net_http_query_unescape(value, out, cap - 1); /* room for the NUL */
            if (n >= 0) {
                out[n] = '\0';
                return true;
            }
        }
        p = amp ? amp + 1 : end;
    }
    return false;
}

/* derper's bootstrapLookupMap: the distinct ?q= names (as keyed 64-bit hashes), cleared once
 * it holds more than 500; one set for every shard, behind a lock (a few hashes' work). */
static struct {
    pthread_mutex_t mu;
    bool keyed;
    unsigned char key[crypto_shorthash_KEYBYTES];
    unsigned count;
    uint64_t slot[BOOTDNS_QUERIED_CAP]; /* 0: empty */
} Q = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void queried_add(const char *q)
{
    unsigned char h[crypto_shorthash_BYTES];
    pthread_mutex_lock(&Q.mu);
    if (!Q.keyed) {
        randombytes_buf(Q.key, sizeof(Q.key));
        Q.keyed = true;
    }
    crypto_shorthash(h, (const unsigned char *)q, strlen(q), Q.key);
    uint64_t v;
    memcpy(&v, h, sizeof(v));
    v += v == 0;
    unsigned i = (unsigned)v & (BOOTDNS_QUERIED_CAP - 1);
    while (Q.slot[i] != 0 && Q.slot[i] != v)
        i = (i + 1) & (BOOTDNS_QUERIED_CAP - 1);
    if (Q.slot[i] == 0) {
        Q.slot[i] = v;
        if (++Q.count > BOOTDNS_QUERIED_MAX) { /* derper's "defensive" Clear */
            memset(Q.slot, 0, sizeof(Q.slot));
            Q.count = 0;
        }
    }
    pthread_mutex_unlock(&Q.mu);
}

unsigned srv_bootdns_queried_domains(void)
{
    pthread_mutex_lock(&Q.mu);
    unsigned n = Q.count;
    pthread_mutex_unlock(&Q.mu);
    return n;
}

/* A ?q=NAME request as derper's handleBootstrapDNS counts it: the unpublished answer when NAME
 * is of that list and the client falls in its percentage (NULL: the published body). */
static const struct bootdns_name *query(struct srv_shard *ds, const struct srv_bootdns_snap *b,
                                        const char *q, const struct net_addr *peer)
{
    struct srv_counters *ctr = &ds->ctr;
    queried_add(q);
    for (unsigned i = 0; b && i < b->unpub_count; i++) {
        const struct bootdns_name *u = &b->unpub[i];
        if (strcmp(u->name, q) != 0)
            continue;
        ctr->bootdns_unpub_hits++;
        if (srv_bootdns_addr_matches(peer, u->percent))
            return u;
        ctr->bootdns_unpub_pct_misses++;
        break;
    }
    for (unsigned i = 0; b && i < b->pub_count; i++) {
        if (strcmp(b->pub[i].name, q) == 0) {
            if (b->pub[i].addrs)
                ctr->bootdns_pub_hits++;
            else
                ctr->bootdns_pub_misses++;
            return NULL;
        }
    }
    ctr->bootdns_unpub_misses++; /* in neither list: counted as the unpublished list's miss */
    return NULL;
}

void srv_bootdns_serve(struct srv_shard *ds, struct net_conn *c, const struct net_http_req *req)
{
    const struct srv_bootdns_snap *b =
        ds->cfg->bootdns ? (const void *)hd_snap_var_get(ds->cfg->bootdns, ds->s) : NULL;
    const char *body = b && b->published ? b->published : "";
    size_t body_len = b && b->published ? b->published_len : 0;
    char q[NI_MAXHOST];
    ds->ctr.bootdns_requests++;
    if (query_q(req->query, q, sizeof(q)) && q[0]) {
        const struct bootdns_name *u = query(ds, b, q, net_conn_peer(c));
        if (u) {
            body = u->json;
            body_len = u->json_len;
        }
    }
    char buf[768];
    struct net_http_hdr hdrs[] = {
        /* tsweb.AddBrowserHeaders, then derper's own */
        {"Strict-Transport-Security", NET_HTTP_LIT("max-age=63072000; includeSubDomains")},
        {"Content-Security-Policy",
         NET_HTTP_LIT("default-src 'self'; frame-ancestors 'none'; form-action 'self'; "
                      "base-uri 'self'; block-all-mixed-content; object-src 'none'")},
        {"X-Frame-Options", NET_HTTP_LIT("DENY")},
        {"X-Content-Type-Options", NET_HTTP_LIT("nosniff")},
        {"Content-Type", NET_HTTP_LIT("application/json")},
    };
    struct net_http_resp_spec spec = {.status = 200,
                                      .headers = hdrs,
                                      .headers_count = HD_ARRAY_SIZE(hdrs),
                                      .content_length = (int64_t)body_len,
                                      .connection = NET_HTTP_CONN_CLOSE};
    int n = net_http_write_resp(buf, sizeof(buf), &spec);
    bool head_only = req->method == NET_HTTP_METHOD_HEAD;
    if (n <= 0 || net_conn_send_copy(c, buf, (size_t)n) < 0 ||
        (!head_only && body_len && net_conn_send_copy(c, body, body_len) < 0))
        net_conn_close(c, -ENOBUFS, false);
}
