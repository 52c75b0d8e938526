/* server_flags.c - derper-compatible flag parsing (spec §11): -flag, --flag, -flag=value,
 * -flag value; booleans as -flag or -flag=true|false; Go durations. Flags derper has that this
 * server does not implement yet are listed in --help as such and refused when given. Main
 * thread, before start-up. */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hd/kit.h>

#include "ops/server_acme.h"
#include "ops/server_flags.h"
#include "server_limits.h"

/* derper's flags (v1.102.5) that hderp-server does not implement: refused by name, each with
 * what to do instead (docs/DERPER-PARITY.md), unless given derper's default (ok: the value that
 * does nothing). */
static const struct {
    const char *name, *ok, *why;
} unsupported[] = {
    {"ace", "false", "no embedded CONNECT proxy (ACE)"},
    {"derp", "true",
     "-derp=false (STUN and bootstrap DNS only) is not supported: run a "
     "STUN-only server instead, or keep DERP on"},
};

/* derper's flags (spec §11) as this server takes them. */
static void usage_derper(FILE *out)
{
    static const char text[] =
        "usage: hderp-server [flags]\n"
        "A DERP relay for Tailscale clients (a drop-in for derper), on io_uring shards.\n\n"
        "  -a ADDR                 listen address (default \":443\"); TLS 1.3 when the port\n"
        "                          is 443 or -certmode manual, plain HTTP otherwise; port 0:\n"
        "                          the kernel picks one (see --port-file)\n"
        "  -dev                    development mode: plain HTTP on 127.0.0.1:3340, ephemeral\n"
        "                          key, mesh key from $TAILSCALE_DERPER_MESH_KEY\n"
        "  -c FILE                 server key file, derper's JSON\n"
        "                          {\"PrivateKey\": \"privkey:...\"}, created 0600 if missing;\n"
        "                          root's default /var/lib/derper/derper.key\n"
        "  -certmode MODE          manual: <certdir>/<hostname>.crt and .key (an IP hostname\n"
        "                          without them gets a self-signed certificate); SIGHUP\n"
        "                          re-reads the files (a bad file keeps the old certificate);\n"
        "                          letsencrypt (default): ACME keeps those files current\n"
        "                          (http-01 on -http-port; see -acme-directory); gcp: the\n"
        "                          same from Google's CA (-acme-eab-kid, -acme-eab-key and\n"
        "                          -acme-email required)\n"
        "  -certdir DIR            certificate directory, created 0700 when hderp writes\n"
        "                          there; default $XDG_CACHE_HOME/tailscale/derper-certs\n"
        "  -hostname NAME          TLS host name (default derp.tailscale.com); a DNS name\n"
        "                          must be the clients' SNI\n"
        "  -http-port N            plain HTTP port in TLS mode (default 80; -1 off; 0: the\n"
        "                          kernel picks one)\n"
        "  -stun                   run STUN (default true)\n"
        "  -stun-port N            STUN UDP port (default 3478; -1 off; 0: the kernel picks\n"
        "                          one); a port another process has is refused\n"
        "  -home VALUE             home page: \"\" default, \"blank\", or a URL to redirect to\n"
        "  -mesh-psk-file FILE     mesh pre-shared key (64 hex digits): clients presenting it\n"
        "                          may watch, forward and close peers (default, as derper:\n"
        "                          /home/derp/keys/derp-mesh.key or $HOME/keys/derp-mesh.key\n"
        "                          if one exists; \"\" none)\n"
        "  -secrets-url URL        the mesh key from this setec server instead: the secret\n"
        "                          <-secrets-path-prefix>/meshkey (POST URL/api/get), kept in\n"
        "                          the -secrets-cache-dir file; a cached key is used without\n"
        "                          asking; start-up waits (retrying, each error logged) until\n"
        "                          the server gives it; not 64 hex digits: refused\n"
        "  -secrets-path-prefix P  the setec secret's prefix (default prod/derp)\n"
        "  -secrets-cache-dir FILE the setec cache, a file despite the name, as derper (its\n"
        "                          directory made 0700; default $HOME/.cache/derper-secrets)\n"
        "  -mesh-with LIST         the region's other nodes, comma-separated\n"
        "                          host[:port][/dialhost]: a watch link to https://host/derp\n"
        "                          each (dialing dialhost, same port; SSL_CERT_FILE replaces\n"
        "                          the system CA bundle), redialed every 5s; names looked up\n"
        "                          at each dial; this server's own entry is recognised and\n"
        "                          skipped;\n"
        "                          an http://host:port entry dials plain HTTP (hderp only)\n"
        "  -tcp-keepalive-time D   TCP keepalive (default 10m)\n"
        "  -tcp-user-timeout D     TCP_USER_TIMEOUT (default 15s)\n"
        "  -tcp-write-timeout D    per-frame write deadline (default 2s; 0 = none; mesh 30s)\n"
        "  -accept-connection-limit R  accepted connections per second (default +Inf: off);\n"
        "                          over it a new connection is closed at once (split per shard)\n"
        "  -accept-connection-burst N  token bucket burst for the above (default math.MaxInt)\n"
        "  -bootstrap-dns-names LIST  comma-separated names served at /bootstrap-dns as\n"
        "                          {\"name\": [addresses]} (resolved at start and every 10m\n"
        "                          with the system resolver; a name that fails is left out)\n"
        "  -unpublished-bootstrap-dns-names LIST  names answered at /bootstrap-dns?q=NAME\n"
        "                          only (that name alone), not in the list; NAME/TXTNAME:\n"
        "                          only to the share of clients TXTNAME's TXT record gives\n"
        "                          (0 to 100, a client address picks the same way each time)\n"
        "  -version                print the version and exit\n";
    fputs(text, out);
}

/* derper's admission and rate flags. */
static void usage_derper_admit(FILE *out)
{
    static const char text[] =
        "  -verify-client-url URL  admission: POST {\"NodePublic\",\"Source\"} to URL for each\n"
        "                          client (mesh peers exempt), admit on 200 {\"Allow\": true}\n"
        "                          within 5s; a host name is resolved once at start-up;\n"
        "                          https: TLS 1.3, verified against the system roots\n"
        "                          (SSL_CERT_FILE / SSL_CERT_DIR as in Go) for the URL's host\n"
        "  -verify-clients         admission: admit only node keys the local tailscaled\n"
        "                          knows (LocalAPI whois over its unix socket, within 5s;\n"
        "                          mesh peers exempt); tailscaled unreachable: refused\n"
        "  -socket PATH            tailscaled's LocalAPI socket for -verify-clients\n"
        "                          (default /var/run/tailscale/tailscaled.sock)\n"
        "  -verify-client-url-fail-open  admit when the URL cannot be reached, times out or\n"
        "                          its certificate does not verify (default true; a non-200\n"
        "                          answer always refuses)\n"
        "  -verify-cache-ttl D     -verify-client-url: keep each key's answer this long (a\n"
        "                          refusal a quarter of it) and decide its logins from it;\n"
        "                          default 0: ask at every login, as derper\n"
        "  -verify-recheck-interval D  -verify-client-url: ask again about every admitted key\n"
        "                          about once per D (spread out, at most 8 requests at once a\n"
        "                          shard) and close its connections when now refused; an\n"
        "                          unreachable controller closes nobody; default 0: off\n"
        "  -rate-config FILE       per-client receive limit, JSON\n"
        "                          {\"PerClientRateLimitBytesPerSec\": N,\n"
        "                           \"PerClientRateBurstBytes\": M}: non-mesh clients are read\n"
        "                          at N bytes/s, bursts of M (at least 65568), paced through\n"
        "                          TCP, nothing dropped; N = 0: off; re-read on SIGHUP\n"
        "                          (for every connection; a bad file keeps the old limit)\n";
    fputs(text, out);
}

/* hderp-server's own flags, and what of derper's it lacks. */
static void usage_own(FILE *out)
{
    static const char text[] =
        "  --allow-keys FILE       only these node keys may log in (mesh peers exempt): one\n"
        "                          per line, nodekey:<64 hex> or 64 hex, # comments; checked\n"
        "                          before -verify-clients and -verify-client-url; re-read on\n"
        "                          SIGHUP (a bad file keeps the old list)\n"
        "  --account-keys FILE     exact relayed bytes and packets for these node keys (same\n"
        "                          format, at most 1024) in /debug/keys and /debug/varz;\n"
        "                          re-read on SIGHUP. The top talkers are shown without it.\n"
        "  --account-window D      a named key's counters outlive its last connection this\n"
        "                          long, so reconnects continue them (default 10m)\n"
        "%s"
        "  --shards N              shards (threads; default: one per CPU)\n"
        "  --port-file FILE        once every shard listens, write the bound addresses to\n"
        "                          FILE, one \"NAME ADDRESS\" line each (derp; http in TLS\n"
        "                          mode; stun), replaced whole: for whoever started it on\n"
        "                          port 0\n"
        "  --placement=false       keep every client on its key's owner shard (default: a\n"
        "                          client that keeps sending to one peer on another shard\n"
        "                          moves to that shard)\n"
        "  --pack=false            do not gather pairs on one shard (default: while the\n"
        "                          relay is lightly loaded, talking pairs gather on shard 0\n"
        "                          so the other shards sleep, and spread out again when shard\n"
        "                          0 gets busy; needs --placement)\n"
        "  --pack-low N            pack while all shards together are below N %% of one core\n"
        "                          (default 60; up to 1000)\n"
        "  --pack-high N           spread while shard 0 is at N %% or more and another shard\n"
        "                          below --pack-low (default 80)\n"
        "  --min-wait-us N         let a shard's sleep gather completions where about four\n"
        "                          come within N us at its recent rate (io_uring min-wait,\n"
        "                          Linux >= 6.12; default 100, 0 = wake for every completion,\n"
        "                          max 1000): fewer wake-ups under heavy load, for no more\n"
        "                          latency than four completions' time per pass\n"
        "  --keepalive-interval D  DERP KeepAlive period (default 60s + up to 5s jitter; for\n"
        "                          tests)\n"
        "  --http-deadline D       a new connection's TLS handshake and HTTP request head\n"
        "                          must be done within D of accept, each further request on\n"
        "                          it within D (default 30s, as derper; at least 100ms)\n"
        "  --login-deadline D      the DERP login (ClientInfo) must arrive within D of the\n"
        "                          upgrade (default 10s, as derper; at least 100ms)\n"
        "  --prelogin-max N        connections not logged in yet per shard; over it a new\n"
        "                          connection is closed at once (default 16384)\n"
        "  --prelogin-per-addr-max N  the same per source address per shard (default 4096)\n"
        "  --sender-wait D         a client streaming to one receiver that is backed up\n"
        "                          stops being read until the receiver drains, at most D\n"
        "                          (then derper's drop-oldest for a second); TCP slows the\n"
        "                          sender instead of the relay dropping (default 100ms, 0 =\n"
        "                          never wait: derper's behaviour; at most 10s)\n"
        "  --mesh-conns-max N      connections with the mesh key per shard (mesh peers and\n"
        "                          watchers); over it a login is refused (default 64; up to\n"
        "                          1024)\n"
        "  --frame-pool-mib N      packet frame memory per shard in MiB (default 256: 65536\n"
        "                          x 2 KiB + 2048 x 64 KiB; 4..16384); carved as used, so\n"
        "                          this bounds what a burst can take\n"
        "  --hash-key HEX          32 hex digits: the tables' SipHash key (tests only: makes\n"
        "                          owner shards predictable; default random per process)\n"
        "  --stall-threshold D     log a shard that stays busy this long in one stretch, with\n"
        "                          the callback it runs, and count it (hderp_loop_stalls in\n"
        "                          /debug/varz); default 50ms, 0 turns the watchdog off\n"
        "  --verbose               debug logging\n"
        "Durations as in Go: 500ms, 2s, 10m, 1h30m. Flags take - or --, and = or a space.\n\n"
        "derper flags not supported yet (refused by name, with what to do instead, unless\n"
        "given derper's default): -ace, -derp=false\n"
        "(docs/DERPER-PARITY.md).\n";
    fprintf(out, text, srv_flags_deploy_usage);
}

/* derper's environment knobs hderp reads. */
static void usage_env(FILE *out)
{
    static const char text[] =
        "\nEnvironment (derper's): TS_DERP_DISABLE_RTT_STATS=true: no derp_tcp_rtt;\n"
        "TAILSCALE_DERPER_MESH_KEY: the mesh key in -dev mode. /debug/ answers loopback, and\n"
        "TS_ALLOW_DEBUG_IP (one address), TS_DEBUG_TRUSTED_CIDRS (prefixes, like\n"
        "10.0.0.0/8,fd00::/8), a GET with ?debugkey= equal to the file TS_DEBUG_KEY_PATH names;\n"
        "never a request with X-Forwarded-For, and not Tailscale's 100.64.0.0/10 (derper lets it\n"
        "in: list the tailnet in TS_DEBUG_TRUSTED_CIDRS; docs/DERPER-PARITY.md). Not honoured, "
        "named\n"
        "at start when set: TS_DEBUG_DERP_PER_CLIENT_SEND_QUEUE_DEPTH (the queue is 32),\n"
        "DERP_DEBUG_LOGS, DERP_PROBER_DEBUG_LOGS, TS_DEBUG_VERBOSE_DROPS (use --verbose).\n";
    fputs(text, out);
}

static void usage(FILE *out)
{
    usage_derper(out);
    usage_derper_admit(out);
    usage_own(out);
    usage_env(out);
}

int64_t srv_parse_duration_ms(const char *t)
{
    int64_t ns;
    return kit_duration_parse(t, 0, &ns) < 0 ? -1 : ns / 1000000; /* the kit's, in every program */
}

static int parse_bool(const char *v, bool *out)
{
    if (v == NULL || strcmp(v, "true") == 0 || strcmp(v, "1") == 0) {
        *out = true;
        return 0;
    }
    if (strcmp(v, "false") == 0 || strcmp(v, "0") == 0) {
        *out = false;
        return 0;
    }
    return -1;
}

static int parse_int(const char *v, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || *end || end == v || x < lo || x > hi)
        return -1;
    *out = x;
    return 0;
}

static bool is_bool_flag(const char *name)
{
    static const char *const bools[] = {"dev",
                                        "stun",
                                        "placement",
                                        "pack",
                                        "version",
                                        "verbose",
                                        "h",
                                        "help",
                                        "verify-clients",
                                        "acme-ip-certs",
                                        "ace",
                                        "derp",
                                        "verify-client-url-fail-open"};
    for (size_t i = 0; i < sizeof(bools) / sizeof(bools[0]); i++)
        if (strcmp(name, bools[i]) == 0)
            return true;
    return srv_flags_deploy_is_bool(name);
}

static int set_duration(const char *name, const char *v, uint64_t *out)
{
    int64_t ms = srv_parse_duration_ms(v);
    if (ms < 0) {
        fprintf(stderr, "hderp-server: -%s %s: not a duration (like 2s, 500ms, 10m)\n", name, v);
        return -1;
    }
    *out = (uint64_t)ms;
    return 0;
}

/* A derper flag this server does not implement: 1 when it may pass anyway (its default, or
 * ignored), -1 refused, 0 not one of them. v: NULL for a bare boolean. */
static int refuse_unsupported(const char *name, const char *v)
{
    for (size_t i = 0; i < sizeof(unsupported) / sizeof(unsupported[0]); i++) {
        if (strcmp(name, unsupported[i].name) != 0)
            continue;
        const char *ok = unsupported[i].ok;
        bool b, is_bool = strcmp(ok, "true") == 0 || strcmp(ok, "false") == 0;
        if (strcmp(ok, "*") == 0 || (!is_bool && v && strcmp(v, ok) == 0) ||
            (is_bool && parse_bool(v, &b) == 0 && b == (ok[0] == 't')))
            return 1;
        fprintf(stderr, "hderp-server: -%s: a derper flag hderp-server does not support: %s\n",
                name, unsupported[i].why);
        return -1;
    }
    return 0;
}

struct flag_field {
    const char *name;
    size_t off; /* in struct srv_flags */
};
#define FIELD(n, m)                                                                                \
    {                                                                                              \
        n, offsetof(struct srv_flags, m)                                                           \
    }

/* Kept as given; each is checked where it is used (the key file by the key loader, -rate-config
 * by srv_rate_load, --allow-keys by srv_allow_configure, ...). */
static const struct flag_field string_flags[] = {
    FIELD("a", addr),
    FIELD("c", config_path),
    FIELD("certdir", certdir),
    FIELD("hostname", hostname),
    FIELD("home", home),
    FIELD("mesh-psk-file", mesh_psk_file),
    FIELD("mesh-with", mesh_with),
    FIELD("socket", socket),
    FIELD("rate-config", rate_config),
    FIELD("verify-client-url", verify_client_url),
    FIELD("allow-keys", allow_keys),
    FIELD("account-keys", account_keys),
    FIELD("hash-key", hash_key), /* 32 hex digits, checked by configure */
    FIELD("port-file", port_file),
    FIELD("bootstrap-dns-names", bootstrap_dns),
    FIELD("unpublished-bootstrap-dns-names", unpublished_dns),
    FIELD("secrets-url", secrets_url),
    FIELD("secrets-path-prefix", secrets_prefix),
    FIELD("secrets-cache-dir", secrets_cache),
};
static const struct flag_field bool_flags[] = {
    FIELD("dev", dev),
    FIELD("stun", stun),
    FIELD("placement", placement),
    FIELD("pack", pack),
    FIELD("verbose", verbose),
    FIELD("verify-clients", verify_clients),
    FIELD("verify-client-url-fail-open", verify_client_url_fail_open),
    FIELD("acme-ip-certs", acme_ip_certs),
};
static const struct flag_field duration_flags[] = {
    FIELD("tcp-keepalive-time", tcp_keepalive_ms),
    FIELD("tcp-user-timeout", tcp_user_timeout_ms),
    FIELD("tcp-write-timeout", tcp_write_timeout_ms),
    FIELD("keepalive-interval", keepalive_ms),
    FIELD("verify-cache-ttl", verify_cache_ttl_ms),
    FIELD("verify-recheck-interval", verify_recheck_ms),
    FIELD("account-window", account_window_ms),
};
#undef FIELD
#define COUNT(t) (sizeof(t) / sizeof((t)[0]))

static const struct flag_field *field_find(const struct flag_field *t, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(t[i].name, name) == 0)
            return &t[i];
    return NULL;
}

/* The flags of one of the three tables: 1 applied, -1 bad value, 0 none of them. */
static int apply_field(struct srv_flags *f, const char *name, const char *v)
{
    const struct flag_field *d;
    char *base = (char *)f;
    if ((d = field_find(string_flags, COUNT(string_flags), name))) {
        *(const char **)(base + d->off) = v;
    } else if ((d = field_find(bool_flags, COUNT(bool_flags), name))) {
        if (parse_bool(v, (bool *)(base + d->off)) < 0) {
            fprintf(stderr, "hderp-server: -%s=%s: expected true or false\n", name, v);
            return -1;
        }
    } else if ((d = field_find(duration_flags, COUNT(duration_flags), name))) {
        uint64_t *ms = (uint64_t *)(base + d->off);
        if (set_duration(name, v, ms) < 0)
            return -1;
        if (ms == &f->keepalive_ms && *ms == 0) {
            fprintf(stderr, "hderp-server: --keepalive-interval must be > 0\n");
            return -1;
        }
    } else {
        return 0;
    }
    return 1;
}

/* Flags with a number: 1 applied, -1 bad value, 0 none of them. */
static int apply_number(struct srv_flags *f, const char *name, const char *v)
{
    long n;
    if (strcmp(name, "http-port") == 0 || strcmp(name, "stun-port") == 0) {
        if (parse_int(v, -1, 65535, &n) < 0) {
            fprintf(stderr, "hderp-server: -%s %s: not a port\n", name, v);
            return -1;
        }
        *(name[0] == 'h' ? &f->http_port : &f->stun_port) = (int)n;
    } else if (strcmp(name, "accept-connection-limit") == 0) {
        char *end;
        double r = strtod(v, &end);
        if (end == v || *end || !(r >= 0)) {
            fprintf(stderr, "hderp-server: -%s %s: expected a rate >= 0\n", name, v);
            return -1;
        }
        f->accept_limit = r;
    } else if (strcmp(name, "accept-connection-burst") == 0) {
        if (parse_int(v, 0, 1L << 30, &n) < 0) {
            fprintf(stderr, "hderp-server: -%s %s: expected 0..2^30\n", name, v);
            return -1;
        }
        f->accept_burst = n;
    } else if (strcmp(name, "shards") == 0) {
        if (parse_int(v, 1, 64, &n) < 0) {
            fprintf(stderr, "hderp-server: --shards %s: expected 1..64\n", v);
            return -1;
        }
        f->shards = (unsigned)n;
    } else if (strcmp(name, "min-wait-us") == 0) {
        if (parse_int(v, 0, SRV_MIN_WAIT_US_MAX, &n) < 0) {
            fprintf(stderr, "hderp-server: --min-wait-us %s: expected 0..%d\n", v,
                    SRV_MIN_WAIT_US_MAX);
            return -1;
        }
        f->min_wait_us = (unsigned)n;
    } else {
        return 0;
    }
    return 1;
}

/* Issue 16's limits: 1 applied, -1 bad value, 0 none of them. The deadlines have a lower bound
 * only (tests shorten them). */
static int apply_limit(struct srv_flags *f, const char *name, const char *v)
{
    long n;
    if (strcmp(name, "http-deadline") == 0 || strcmp(name, "login-deadline") == 0) {
        uint64_t *out = name[0] == 'h' ? &f->http_deadline_ms : &f->login_deadline_ms;
        if (set_duration(name, v, out) < 0 || *out < SRV_DEADLINE_MS_MIN || *out > UINT32_MAX) {
            fprintf(stderr, "hderp-server: --%s %s: expected a duration of at least %ums\n", name,
                    v, SRV_DEADLINE_MS_MIN);
            return -1;
        }
    } else if (strcmp(name, "prelogin-max") == 0 || strcmp(name, "prelogin-per-addr-max") == 0) {
        if (parse_int(v, 1, SRV_PRELOGIN_MAX_MAX, &n) < 0) {
            fprintf(stderr, "hderp-server: --%s %s: expected 1..%u\n", name, v,
                    SRV_PRELOGIN_MAX_MAX);
            return -1;
        }
        *(strcmp(name, "prelogin-max") == 0 ? &f->prelogin_max : &f->prelogin_addr_max) = n;
    } else if (strcmp(name, "sender-wait") == 0) {
        if (set_duration(name, v, &f->sender_wait_ms) < 0 ||
            f->sender_wait_ms > SRV_SENDER_WAIT_MS_MAX) {
            fprintf(stderr, "hderp-server: --%s %s: expected a duration of at most %ums\n", name, v,
                    SRV_SENDER_WAIT_MS_MAX);
            return -1;
        }
    } else if (strcmp(name, "mesh-conns-max") == 0) {
        if (parse_int(v, 1, SRV_MESH_CONNS_MAX_MAX, &n) < 0) {
            fprintf(stderr, "hderp-server: --%s %s: expected 1..%u\n", name, v,
                    SRV_MESH_CONNS_MAX_MAX);
            return -1;
        }
        f->mesh_conns_max = n;
    } else if (strcmp(name, "frame-pool-mib") == 0) {
        if (parse_int(v, SRV_FRAME_POOL_MIB_MIN, SRV_FRAME_POOL_MIB_MAX, &n) < 0) {
            fprintf(stderr, "hderp-server: --%s %s: expected %u..%u\n", name, v,
                    SRV_FRAME_POOL_MIB_MIN, SRV_FRAME_POOL_MIB_MAX);
            return -1;
        }
        f->frame_pool_mib = n;
    } else if (strcmp(name, "pack-low") == 0 || strcmp(name, "pack-high") == 0) {
        if (parse_int(v, 0, SRV_PACK_PCT_MAX, &n) < 0) {
            fprintf(stderr, "hderp-server: --%s %s: a percentage of one core, 0 to %d\n", name, v,
                    SRV_PACK_PCT_MAX);
            return -1;
        }
        *(name[5] == 'l' ? &f->pack_low_pct : &f->pack_high_pct) = n;
    } else {
        return 0;
    }
    return 1;
}

/* The flags with a value that the tables above do not hold (apply_number, apply_limit, apply):
 * a new flag goes here too, or given last without its value it reads as unknown
 * (test_integration_flag_errors checks every flag --help names). */
static const char *const other_value_flags[] = {
    "http-port",
    "stun-port",
    "accept-connection-limit",
    "accept-connection-burst",
    "shards",
    "min-wait-us",
    "http-deadline",
    "login-deadline",
    "prelogin-max",
    "prelogin-per-addr-max",
    "frame-pool-mib",
    "pack-low",
    "pack-high",
    "certmode",
    "stall-threshold",
    "sender-wait",
    "mesh-conns-max",
};

/* Whether name is a flag at all (given without its value, it is told apart from a typo). */
static bool is_known_flag(const char *name)
{
    for (size_t i = 0; i < COUNT(other_value_flags); i++)
        if (strcmp(name, other_value_flags[i]) == 0)
            return true;
    for (size_t i = 0; i < COUNT(unsupported); i++)
        if (strcmp(name, unsupported[i].name) == 0)
            return true;
    return field_find(string_flags, COUNT(string_flags), name) ||
           field_find(bool_flags, COUNT(bool_flags), name) ||
           field_find(duration_flags, COUNT(duration_flags), name) || is_bool_flag(name) ||
           srv_flags_deploy_is_known(name);
}

/* One flag with its value (NULL for a bare boolean). */
static int apply(struct srv_flags *f, const char *name, const char *v, bool *version)
{
    int rc = refuse_unsupported(name, v);
    if (rc == 0)
        rc = apply_field(f, name, v);
    if (rc == 0)
        rc = apply_number(f, name, v);
    if (rc == 0)
        rc = apply_limit(f, name, v);
    if (rc != 0)
        return rc < 0 ? -1 : 0;
    if (strcmp(name, "certmode") == 0) {
        if (strcmp(v, "letsencrypt") && strcmp(v, "manual") && strcmp(v, "gcp")) {
            fprintf(stderr, "hderp-server: -certmode %s: expected letsencrypt, manual or gcp\n", v);
            return -1;
        }
        f->certmode = v;
    } else if (strcmp(name, "stall-threshold") == 0) {
        if (set_duration(name, v, &f->stall_ms) < 0)
            return -1;
        if (f->stall_ms >= UINT32_MAX) {
            fprintf(stderr, "hderp-server: --stall-threshold %s: too long\n", v);
            return -1;
        }
        f->stall_set = true;
    } else if (strcmp(name, "version") == 0) {
        if (parse_bool(v, version) < 0) {
            fprintf(stderr, "hderp-server: -%s=%s: expected true or false\n", name, v);
            return -1;
        }
    } else {
        return srv_flags_apply_deploy(f, name, v); /* server_flags_deploy.c */
    }
    return 0;
}

/* derper's -home: "" (the default page), "blank", or an http(s) URL to redirect to; anything
 * else is refused (derper: "unknown --home value"). The URL goes into a Location header. */
static int check_home(const char *home)
{
    bool url = strncmp(home, "http://", 7) == 0 || strncmp(home, "https://", 8) == 0;
    bool clean = strlen(home) <= SRV_HOME_URL_MAX;
    for (const char *p = home; *p; p++)
        clean &= (unsigned char)*p > ' ' && *p != 0x7f;
    if (home[0] == '\0' || strcmp(home, "blank") == 0 || (url && clean))
        return 0;
    fprintf(stderr,
            "hderp-server: -home %s: expected \"\" (the default page), \"blank\", or an http:// or "
            "https:// URL to redirect to (no spaces, at most %d characters)\n",
            home, SRV_HOME_URL_MAX);
    return -1;
}

/* derper's -certmode gcp rules (cert.go): the EAB key id and MAC key and a contact. */
static int check_gcp(const struct srv_flags *f)
{
    uint8_t key[256];
    size_t len;
    if (strcmp(f->certmode, "gcp") != 0)
        return 0;
    if (!f->acme_eab_kid || !f->acme_eab_kid[0] || !f->acme_eab_key || !f->acme_eab_key[0]) {
        fprintf(stderr, "hderp-server: -certmode gcp requires -acme-eab-kid and -acme-eab-key "
                        "(gcloud publicca external-account-keys create)\n");
        return -1;
    }
    if (!f->acme_email || !f->acme_email[0]) {
        fprintf(stderr, "hderp-server: -certmode gcp requires -acme-email\n");
        return -1;
    }
    if (acme_eab_key_decode(f->acme_eab_key, key, sizeof(key), &len) < 0) {
        fprintf(stderr, "hderp-server: -acme-eab-key: invalid base64 encoding for EAB key\n");
        return -1;
    }
    return 0;
}

static void set_defaults(struct srv_flags *f)
{
    *f = (struct srv_flags){.addr = ":443",
                            .secrets_prefix = "prod/derp",
                            .certmode = "letsencrypt",
                            .hostname = "derp.tailscale.com",
                            .http_port = 80,
                            .stun = true,
                            .placement = true,
                            .pack = true,
                            .pack_low_pct = SRV_PACK_LOW_PCT_DEFAULT,
                            .pack_high_pct = SRV_PACK_HIGH_PCT_DEFAULT,
                            .min_wait_us = SRV_MIN_WAIT_US_DEFAULT,
                            .stun_port = 3478,
                            .home = "",
                            .tcp_keepalive_ms = 10 * 60 * 1000,
                            .tcp_user_timeout_ms = 15000,
                            .tcp_write_timeout_ms = 2000,
                            .keepalive_ms = DERP_KEEPALIVE_INTERVAL_MS,
                            .account_window_ms = SRV_ACCT_WINDOW_MS,
                            .verify_client_url_fail_open = true,
                            .accept_limit = INFINITY,
                            .accept_burst = 1L << 30,
                            .http_deadline_ms = SRV_HTTP_DEADLINE_MS_DEFAULT,
                            .login_deadline_ms = SRV_LOGIN_DEADLINE_MS_DEFAULT,
                            .prelogin_max = SRV_PRELOGIN_SHARD_MAX_DEFAULT,
                            .prelogin_addr_max = SRV_PRELOGIN_ADDR_MAX_DEFAULT,
                            .mesh_conns_max = SRV_MESH_CONNS_MAX_DEFAULT,
                            .frame_pool_mib = SRV_FRAME_POOL_MIB_DEFAULT,
                            .sender_wait_ms = SRV_SENDER_WAIT_MS_DEFAULT,
                            .upgrade_timeout_ms = SRV_UPGRADE_TIMEOUT_MS_DEFAULT};
}

int srv_flags_parse(int argc, char **argv, struct srv_flags *f)
{
    set_defaults(f);
    bool version = false, addr_given = false;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (arg[0] != '-' || arg[1] == '\0') {
            fprintf(stderr, "hderp-server: unexpected argument %s (see --help)\n", arg);
            return -1;
        }
        const char *name = arg + (arg[1] == '-' ? 2 : 1);
        char buf[64];
        const char *eq = strchr(name, '=');
        const char *v = NULL;
        if (eq) {
            snprintf(buf, sizeof(buf), "%.*s", (int)(eq - name), name);
            name = buf;
            v = eq + 1;
        }
        if (strcmp(name, "h") == 0 || strcmp(name, "help") == 0) {
            usage(stdout);
            return 1;
        }
        if (!is_known_flag(name)) {
            fprintf(stderr, "hderp-server: unknown flag %s (see --help)\n", arg);
            return -1;
        }
        if (v == NULL && !is_bool_flag(name)) {
            if (i + 1 >= argc) {
                fprintf(stderr, "hderp-server: -%s needs a value\n", name);
                return -1;
            }
            v = argv[++i];
        }
        if (strcmp(name, "a") == 0)
            addr_given = true;
        if (apply(f, name, v, &version) < 0)
            return -1;
    }
    if (version) {
        printf("hderp-server %s\n", SRV_VERSION);
        return 1;
    }
    if (f->dev && !addr_given)
        f->addr = "127.0.0.1:3340";
    if (check_home(f->home) < 0 || check_gcp(f) < 0)
        return -1;
    struct net_addr a; /* a flag error (exit 2), not a start-up failure */
    if (net_addr_parse(f->addr, &a) < 0) {
        fprintf(stderr,
                "hderp-server: -a %s: not a numeric address like :3340, 127.0.0.1:3340 or "
                "[::1]:3340\n",
                f->addr);
        return -1;
    }
    return 0;
}

bool srv_flags_tls_mode(const struct srv_flags *f)
{
    const char *colon = strrchr(f->addr, ':');
    const char *port = colon ? colon + 1 : f->addr;
    return strcmp(port, "443") == 0 || strcmp(port, "https") == 0 ||
           strcmp(f->certmode, "manual") == 0 ||
           (strcmp(f->certmode, "manual") != 0 && f->acme_directory != NULL);
}
