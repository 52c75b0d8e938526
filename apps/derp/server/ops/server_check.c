/* server_check.c - `hderp-server check [flags] URL`: a self-test an operator runs against any
 * DERP server (this one, derper, a region's node). One line per check, then a verdict line; exit
 * 0 when nothing failed, 1 otherwise, 2 for bad flags. Checks: the TLS certificate (verified
 * chain and name, days to expiry), /generate_204 with the captive-portal challenge, the HTTP
 * upgrade and fast start logins, two clients exchanging packets, a server ping, STUN on
 * --stun-port, and the mesh links from /debug/varz when the server is local (loopback) or
 * --varz is given. Main thread; the DERP part runs on a shard (server_check_derp.c). */
#define _GNU_SOURCE /* strcasestr */
#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hd/kit.h>

#include "ops/server_check.h"
#include "ops/server_flags.h"

/* A certificate this close to expiry is a warning (Let's Encrypt renews 30 days before). */
#define CHK_EXPIRY_WARN_DAYS  14
#define CHK_TIMEOUT_MS        10000
#define CHK_STUN_PORT_DEFAULT 3478
#define CHK_RESP_MAX          65536 /* /debug/varz is a few KiB */

struct chk_opts {
    const char *url, *ca_file, *varz;
    bool insecure;
    int stun_port;
    uint32_t timeout_ms;
};

struct chk_tally {
    unsigned ok, warn, fail, skip;
    char failed[256];
};

static void report(struct chk_tally *t, const char *verdict, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void report(struct chk_tally *t, const char *verdict, const char *name, const char *fmt, ...)
{
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    printf("  %-5s %s: %s\n", verdict, name, text);
    fflush(stdout);
    if (strcmp(verdict, "ok") == 0) {
        t->ok++;
    } else if (strcmp(verdict, "warn") == 0) {
        t->warn++;
    } else if (strcmp(verdict, "skip") == 0) {
        t->skip++;
    } else {
        t->fail++;
        size_t n = strlen(t->failed);
        snprintf(t->failed + n, sizeof(t->failed) - n, "%s%s", n ? ", " : "", name);
    }
}

static void usage(FILE *out)
{
    fputs("usage: hderp-server check [--ca FILE | --insecure] [--stun-port N] [--varz URL]\n"
          "                          [--timeout D] URL\n"
          "Self-test of a DERP server at URL (http[s]://host[:port][/derp]): its TLS\n"
          "certificate (name, expiry), /generate_204, the HTTP upgrade and fast start, two\n"
          "clients exchanging packets, a server ping, STUN (--stun-port, default 3478; 0 skips\n"
          "it), and the mesh links from /debug/varz (when the host is loopback, or at --varz\n"
          "URL). Prints one line per check and a verdict; exit 0 if none failed, else 1.\n"
          "  --ca FILE     verify TLS against this CA bundle (default: the system roots)\n"
          "  --insecure    do not verify the certificate (still reported)\n"
          "  --timeout D   bound for each step (default 10s)\n",
          out);
}

static int parse_args(int argc, char **argv, struct chk_opts *o)
{
    *o = (struct chk_opts){.stun_port = CHK_STUN_PORT_DEFAULT, .timeout_ms = CHK_TIMEOUT_MS};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *name = a + (a[0] == '-' && a[1] == '-' ? 2 : a[0] == '-' ? 1 : 0);
        bool has_value = i + 1 < argc;
        if (name == a) {
            if (o->url) {
                fprintf(stderr, "hderp-server check: one URL only (%s)\n", a);
                return -1;
            }
            o->url = a;
        } else if (strcmp(name, "h") == 0 || strcmp(name, "help") == 0) {
            usage(stdout);
            return 1;
        } else if (strcmp(name, "insecure") == 0) {
            o->insecure = true;
        } else if (strcmp(name, "ca") == 0 && has_value) {
            o->ca_file = argv[++i];
        } else if (strcmp(name, "varz") == 0 && has_value) {
            o->varz = argv[++i];
        } else if (strcmp(name, "stun-port") == 0 && has_value) {
            char *end;
            long p = strtol(argv[++i], &end, 10);
            if (*end || p < 0 || p > 65535) {
                fprintf(stderr, "hderp-server check: --stun-port %s: not a port\n", argv[i]);
                return -1;
            }
            o->stun_port = (int)p;
        } else if (strcmp(name, "timeout") == 0 && has_value) {
            int64_t ms = srv_parse_duration_ms(argv[++i]);
            if (ms <= 0 || ms > 600000) {
                fprintf(stderr, "hderp-server check: --timeout %s: expected %s, 1ms..10m\n",
                        argv[i], KIT_DURATION_HINT);
                return -1;
            }
            o->timeout_ms = (uint32_t)ms;
        } else if (!has_value && (strcmp(name, "ca") == 0 || strcmp(name, "varz") == 0 ||
                                  strcmp(name, "stun-port") == 0 || strcmp(name, "timeout") == 0)) {
            fprintf(stderr, "hderp-server check: %s needs a value (see --help)\n", a);
            return -1;
        } else {
            fprintf(stderr, "hderp-server check: unknown flag %s (see --help)\n", a);
            return -1;
        }
    }
    if (o->url == NULL) {
        usage(stderr);
        return -1;
    }
    return 0;
}

static bool is_loopback(const struct net_addr *a)
{
    if (a->sa.sa_family == AF_INET)
        return (ntohl(a->in4.sin_addr.s_addr) >> 24) == 127;
    return a->sa.sa_family == AF_INET6 && IN6_IS_ADDR_LOOPBACK(&a->in6.sin6_addr);
}

/* The URL's host without port or brackets; NULL sni for an IP address. */
static void host_parts(const struct derp_client_url *u, char *name, size_t size, bool *is_ip)
{
    struct net_url p;
    name[0] = '\0';
    char url[NET_URL_AUTHORITY_LEN_MAX + 16];
    snprintf(url, sizeof(url), "http://%s/", u->host);
    if (net_url_parse(url, &p) == 0)
        snprintf(name, size, "%s", p.host);
    unsigned char b[16];
    *is_ip = inet_pton(AF_INET, name, b) == 1 || inet_pton(AF_INET6, name, b) == 1;
}

static void check_http(const struct chk_opts *o, const struct derp_client_url *u,
                       struct chk_tally *t)
{
    char name[NET_URL_AUTHORITY_LEN_MAX + 1], err[256];
    bool is_ip;
    host_parts(u, name, sizeof(name), &is_ip);
    struct chk_http h = {.addr = &u->addr,
                         .tls = u->tls,
                         .host = u->host,
                         .sni = is_ip ? NULL : name,
                         .ca_file = o->ca_file,
                         .insecure = o->insecure,
                         .timeout_ms = o->timeout_ms};
    static char resp[CHK_RESP_MAX];
    struct chk_tls_info info;
    unsigned status = 0;
    int rc = chk_http_get(&h, "/generate_204", "X-Tailscale-Challenge: hderp-check-0123\r\n", &info,
                          &status, resp, sizeof(resp), err, sizeof(err));
    if (u->tls && (rc == 0 || info.subject[0])) {
        const char *v = !info.verified && !o->insecure                            ? "FAIL"
                        : info.days_left < 0                                      ? "FAIL"
                        : info.days_left < CHK_EXPIRY_WARN_DAYS || !info.verified ? "warn"
                                                                                  : "ok";
        report(t, v, "tls", "certificate %s (issuer %s) for %s: %s; expires %s (%ld days)",
               info.subject, info.issuer, name, info.verified ? "verified" : info.verify_error,
               info.not_after, info.days_left);
    } else if (u->tls) {
        report(t, "FAIL", "tls", "%s", err);
    }
    if (rc < 0) {
        report(t, "FAIL", "generate_204", "%s", err);
        return;
    }
    bool challenge = strcasestr(resp, "X-Tailscale-Response: response hderp-check-0123") != NULL;
    report(t, status == 204 && challenge ? "ok" : "FAIL", "generate_204", "answered %u%s", status,
           challenge ? " with the challenge response" : ", no X-Tailscale-Response");
}

static void check_derp(const struct chk_opts *o, const struct derp_client_url *u,
                       struct chk_tally *t)
{
    struct tls_ctx *tls = NULL;
    if (u->tls) {
        struct tls_client_options to = {.ca_file = o->ca_file,
                                        .system_roots = o->ca_file == NULL && !o->insecure,
                                        .insecure = o->insecure && o->ca_file == NULL};
        int rc = tls_client_ctx_create(&to, &tls);
        if (rc < 0) {
            report(t, "FAIL", "derp", "TLS client set-up: %s", strerror(-rc));
            return;
        }
    }
    struct chk_derp_opts d = {.url = u, .tls = tls, .timeout_ms = o->timeout_ms};
    struct chk_derp_result r;
    int rc = chk_derp_run(&d, &r);
    if (tls)
        tls_ctx_destroy(tls);
    if (rc < 0) {
        report(t, "FAIL", "derp", "runtime: %s", strerror(-rc));
        return;
    }
    if (r.upgrade_status != 101)
        report(t, "FAIL", "upgrade", r.upgrade_status ? "not 101 but HTTP %u" : "no HTTP answer",
               r.upgrade_status);
    else
        report(t, r.upgrade_key_ok ? "ok" : "FAIL", "upgrade", "HTTP 101, %s%s",
               r.upgrade_key_ok ? "Derp-Public-Key matches the ServerKey "
                                : "Derp-Public-Key does not match the ServerKey frame",
               r.upgrade_key_ok ? r.server_key : "");
    report(t, r.fast_start_ok ? "ok" : "FAIL", "fast-start", "%s",
           r.fast_start_ok ? "logged in without the 101" : "no login");
    bool all = r.packets_ab == r.packets_total && r.packets_ba == r.packets_total;
    report(t, all ? "ok" : "FAIL", "packets", "%u/%u A->B, %u/%u B->A", r.packets_ab,
           r.packets_total, r.packets_ba, r.packets_total);
    report(t, r.pong_ok ? "ok" : "FAIL", "ping", "%s",
           r.pong_ok ? "the server answered with the same data" : "no Pong");
    if (r.error[0] && !(all && r.pong_ok && r.upgrade_ok && r.fast_start_ok))
        printf("        (%s)\n", r.error);
}

static void check_stun(const struct chk_opts *o, const struct derp_client_url *u,
                       struct chk_tally *t)
{
    if (o->stun_port == 0) {
        report(t, "skip", "stun", "--stun-port 0");
        return;
    }
    struct net_addr a = u->addr;
    if (a.sa.sa_family == AF_INET)
        a.in4.sin_port = htons((uint16_t)o->stun_port);
    else
        a.in6.sin6_port = htons((uint16_t)o->stun_port);
    char mapped[64] = "", where[64];
    net_addr_format(&a, where, sizeof(where));
    int rc = chk_stun(&a, o->timeout_ms, mapped, sizeof(mapped));
    if (rc == 0)
        report(t, "ok", "stun", "%s answered: this client is %s", where, mapped);
    else
        report(t, "FAIL", "stun", "%s: %s", where, rc == -ETIMEDOUT ? "no answer" : "bad answer");
}

static long metric(const char *text, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = text; (p = strstr(p, name)) != NULL; p += n)
        if ((p == text || p[-1] == '\n') && p[n] == ' ')
            return strtol(p + n + 1, NULL, 10);
    return -1;
}

static void check_mesh(const struct chk_opts *o, const struct derp_client_url *u,
                       struct chk_tally *t)
{
    struct derp_client_url vu;
    const struct derp_client_url *where = u;
    if (o->varz) {
        if (derp_client_url_parse(o->varz, &vu) < 0) {
            report(t, "FAIL", "mesh", "--varz %s: not a URL that resolves", o->varz);
            return;
        }
        where = &vu;
    } else if (!is_loopback(&u->addr)) {
        report(t, "skip", "mesh",
               "/debug/varz answers loopback only (run check on the node, "
               "or give --varz)");
        return;
    }
    char name[NET_URL_AUTHORITY_LEN_MAX + 1], err[256];
    bool is_ip;
    host_parts(where, name, sizeof(name), &is_ip);
    struct chk_http h = {.addr = &where->addr,
                         .tls = where->tls,
                         .host = where->host,
                         .sni = is_ip ? NULL : name,
                         .ca_file = o->ca_file,
                         .insecure = true, /* the certificate was checked above */
                         .timeout_ms = o->timeout_ms};
    static char resp[CHK_RESP_MAX];
    unsigned status = 0;
    const char *path = o->varz ? where->path : "/debug/varz";
    if (chk_http_get(&h, path, NULL, NULL, &status, resp, sizeof(resp), err, sizeof(err)) < 0 ||
        status != 200) {
        report(t, "FAIL", "mesh", "%s: %s", path, status ? "not 200" : err);
        return;
    }
    long ready = metric(resp, "derp_mesh_links_ready");
    long want = metric(resp, "hderp_mesh_links_configured");
    if (ready < 0)
        report(t, "warn", "mesh", "no derp_mesh_links_ready in %s", path);
    else if (want < 0)
        report(t, "ok", "mesh", "%ld links ready", ready);
    else if (want == 0)
        report(t, "ok", "mesh", "no -mesh-with peers configured");
    else
        report(t, ready >= want ? "ok" : "FAIL", "mesh", "%ld of %ld links ready", ready, want);
}

int srv_check_main(int argc, char **argv)
{
    struct chk_opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc != 0)
        return rc > 0 ? 0 : 2;
    if (derp_crypto_init() < 0)
        return 1;
    hd_log_set_level(HD_LOG_WARN); /* the clients' connection lines are not the report */
    struct derp_client_url u;
    if ((rc = derp_client_url_parse(o.url, &u)) < 0 || u.websocket) {
        fprintf(stderr, "hderp-server check: %s: %s\n", o.url,
                rc == -ENOENT ? "the name does not resolve" : "not an http(s) DERP URL");
        return 2;
    }
    char where[64];
    printf("hderp-server check %s (%s)\n", o.url, net_addr_format(&u.addr, where, sizeof(where)));
    struct chk_tally t = {0};
    check_http(&o, &u, &t);
    check_derp(&o, &u, &t);
    check_stun(&o, &u, &t);
    check_mesh(&o, &u, &t);
    if (t.fail)
        printf("verdict: FAIL (%u failed: %s; %u ok, %u warnings, %u skipped)\n", t.fail, t.failed,
               t.ok, t.warn, t.skip);
    else
        printf("verdict: PASS (%u ok, %u warnings, %u skipped)\n", t.ok, t.warn, t.skip);
    return t.fail ? 1 : 0;
}
