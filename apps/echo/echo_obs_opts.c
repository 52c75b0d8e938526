/* echo_obs_opts.c - hderp-echo observe's command line and the DERP map reader (the JSON a
 * Tailscale policy file's derpMap or Headscale serves: {"Regions": {"ID": {"RegionID",
 * "RegionCode", "Nodes": [{"Name", "HostName", "IPv4", "IPv6", "DERPPort", "STUNPort",
 * "STUNOnly", "InsecureForTests"}]}}}, or that inside {"derpMap": ...} as a policy file and
 * hderp-server --print-derpmap write it). Main thread, before the runtime starts. */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "echo_obs.h"
#include <hd/kit.h>

static void usage(FILE *out)
{
    fprintf(out,
            "usage: hderp-echo observe (--server URL ... | --derp-map FILE) [options]\n\n"
            "Keeps a pinger and an echo peer logged in for every path and pings at a steady\n"
            "rate: each --server URL is a node path (pinger and echo on that node); a DERP map\n"
            "gives every node's path and every ordered pair of nodes in a region (pinger on A,\n"
            "echo on B: the mesh path between them). Paths that are down are reported down.\n\n"
            "  --server URL        http[s]://HOST[:PORT][/path] (repeatable)\n"
            "  --derp-map F|URL    a DERP map in JSON (Tailscale's derpMap / Headscale's), a\n"
            "                      file or http[s]:// (fetched once at start)\n"
            "  --derp-http         DERP map nodes over plain http (as TS_DEBUG_USE_DERP_HTTP)\n"
            "  --no-mesh-paths     DERP map: only each node's own path\n"
            "  --rate PPS          probes per second per path (default 10, at most %u)\n"
            "  --size B            probe size in bytes (default 64, %u..%u)\n"
            "  --metrics-listen A  serve /metrics (Prometheus), /status.json and / on A\n"
            "                      (e.g. 127.0.0.1:9464; port 0 picks one, logged at start)\n"
            "  --alert-p99-ms D    log an alert when a path's p99 goes over D, and when back\n"
            "  --alert-loss-pct P  log an alert when a path loses more than P %% of probes\n"
            "  --alert-window D    the window alerts judge (default 60s, 10s..60s)\n"
            "  --down-after D      no echo for this long while pinging: down (default 3s)\n"
            "  --once              measure for --duration, print a table, exit 1 if any path\n"
            "                      was down at the end or over an alert threshold\n"
            "  --duration D        with --once (default 30s)\n"
            "  --json              with --once: the result as JSON\n"
            "  --insecure          https without certificate checks (tests)\n"
            "  --ca F              https: CA file (default: the system's roots)\n"
            "Durations as in Go (500ms, 10s, 5m, 1h30m); a bare number keeps its old unit\n"
            "(milliseconds for --alert-p99-ms and --down-after, seconds for the others).\n",
            ECHO_OBS_RATE_MAX, ECHO_OBS_SIZE_MIN, ECHO_OBS_SIZE_MAX);
}

static int parse_num(const char *flag, const char *v, double lo, double hi, double *out)
{
    char *end;
    double x = strtod(v, &end);
    if (*v == '\0' || *end || !(x >= lo && x <= hi)) {
        fprintf(stderr, "hderp-echo: %s %s: expected a number in %g..%g\n", flag, v, lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

/* A duration as every program takes them (kit_duration_parse), a bare number in bare_unit_ns
 * as before; in [lo, hi] seconds; *out in seconds. */
static int parse_duration(const char *flag, const char *v, int64_t bare_unit_ns, double lo,
                          double hi, double *out)
{
    int64_t ns;
    double x = 0;
    if (kit_duration_parse(v, bare_unit_ns, &ns) == 0)
        x = (double)ns / 1e9;
    if (!(x >= lo && x <= hi)) {
        fprintf(stderr, "hderp-echo: %s %s: expected %s, %gs..%gs (a bare number: %s)\n", flag, v,
                KIT_DURATION_HINT, lo, hi, bare_unit_ns == 1000000 ? "milliseconds" : "seconds");
        return -1;
    }
    *out = x;
    return 0;
}

static int add_server(struct echo_obs_opts *o, const char *url)
{
    if (o->nodes_count == ECHO_OBS_NODES_MAX) {
        fprintf(stderr, "hderp-echo: more than %u nodes\n", ECHO_OBS_NODES_MAX);
        return -1;
    }
    struct echo_obs_node *n = &o->nodes[o->nodes_count];
    memset(n, 0, sizeof(*n));
    if (derp_client_url_parse(url, &n->url) < 0) {
        fprintf(stderr, "hderp-echo: --server %s: expected http[s]://HOST[:PORT][/path]\n", url);
        return -1;
    }
    size_t len = strnlen(n->url.host, sizeof(n->name) - 1);
    memcpy(n->name, n->url.host, len); /* the URL's host[:port], cut to fit */
    n->name[len] = '\0';
    o->nodes_count++;
    return 0;
}

/* An http(s) URL: resolved now, fetched on the shard once the runtime runs. */
static int map_url(struct echo_obs_opts *o, const char *url, bool plain_http)
{
    if (net_url_parse(url, &o->map_loc) < 0) {
        fprintf(stderr, "hderp-echo: --derp-map %s: not an http[s]://HOST[:PORT]/path URL\n", url);
        return -1;
    }
    if (net_url_resolve(&o->map_loc, false, &o->map_addr) < 0) {
        fprintf(stderr, "hderp-echo: --derp-map %s: cannot resolve %s\n", url, o->map_loc.host);
        return -1;
    }
    o->map_url = url;
    o->map_plain_http = plain_http;
    return 0;
}

static int load_map(struct echo_obs_opts *o, const char *path, bool plain_http)
{
    if (strncmp(path, "http://", 7) == 0 || strncmp(path, "https://", 8) == 0)
        return map_url(o, path, plain_http);
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "hderp-echo: --derp-map %s: %s\n", path, strerror(errno));
        return -1;
    }
    static char text[ECHO_OBS_MAP_MAX];
    size_t n = fread(text, 1, sizeof(text), f);
    bool too_big = n == sizeof(text);
    fclose(f);
    if (too_big) {
        fprintf(stderr, "hderp-echo: --derp-map %s: larger than 1 MiB\n", path);
        return -1;
    }
    char err[256];
    if (echo_obs_derpmap_parse(text, n, plain_http, o, err, sizeof(err)) < 0) {
        fprintf(stderr, "hderp-echo: --derp-map %s: %s\n", path, err);
        return -1;
    }
    return 0;
}

static int apply(struct echo_obs_opts *o, int opt, const char *v)
{
    double x;
    switch (opt) {
    case 's':
        return add_server(o, v);
    case 'r':
        return parse_num("--rate", v, 0.1, ECHO_OBS_RATE_MAX, &o->rate_pps);
    case 'z':
        if (parse_num("--size", v, ECHO_OBS_SIZE_MIN, ECHO_OBS_SIZE_MAX, &x) < 0)
            return -1;
        o->size = (uint32_t)x;
        return 0;
    case 'm':
        o->metrics_listen = v;
        if (net_addr_parse(v, &o->metrics_addr) < 0) {
            fprintf(stderr, "hderp-echo: --metrics-listen %s: expected ADDRESS:PORT\n", v);
            return -1;
        }
        return 0;
    case 'P':
        if (parse_duration("--alert-p99-ms", v, 1000000, 1e-6, 1e3, &x) < 0)
            return -1;
        o->alert_p99_ms = x * 1e3;
        return 0;
    case 'L':
        return parse_num("--alert-loss-pct", v, 0.001, 100, &o->alert_loss_pct);
    case 'W':
        if (parse_duration("--alert-window", v, 1000000000, 10, 60, &x) < 0)
            return -1;
        o->alert_window_s = (uint32_t)x;
        return 0;
    case 'D':
        if (parse_duration("--down-after", v, 1000000, 0.1, 600, &x) < 0)
            return -1;
        o->down_after_ms = (uint32_t)(x * 1e3 + 0.5);
        return 0;
    case 'd':
        if (parse_duration("--duration", v, 1000000000, 1, 86400, &x) < 0)
            return -1;
        o->duration_s = (uint32_t)x;
        return 0;
    case 'a':
        o->ca_file = v;
        return 0;
    default:
        return -1;
    }
}

/* What --help states as the defaults. */
static void set_defaults(struct echo_obs_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->rate_pps = 10;
    o->size = 64;
    o->alert_window_s = 60;
    o->down_after_ms = 3000;
    o->duration_s = 30;
    o->mesh_paths = true;
}

int echo_obs_opts_parse(int argc, char **argv, struct echo_obs_opts *o)
{
    static const struct option longs[] = {
        {"server", required_argument, NULL, 's'},
        {"derp-map", required_argument, NULL, 'M'},
        {"derp-http", no_argument, NULL, 'H'},
        {"no-mesh-paths", no_argument, NULL, 'N'},
        {"rate", required_argument, NULL, 'r'},
        {"size", required_argument, NULL, 'z'},
        {"metrics-listen", required_argument, NULL, 'm'},
        {"alert-p99-ms", required_argument, NULL, 'P'},
        {"alert-loss-pct", required_argument, NULL, 'L'},
        {"alert-window", required_argument, NULL, 'W'},
        {"down-after", required_argument, NULL, 'D'},
        {"once", no_argument, NULL, 'o'},
        {"duration", required_argument, NULL, 'd'},
        {"json", no_argument, NULL, 'j'},
        {"insecure", no_argument, NULL, 'I'},
        {"ca", required_argument, NULL, 'a'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    set_defaults(o);
    const char *map = NULL;
    bool plain_http = false;
    optind = 2;
    int opt;
    while ((opt = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        switch (opt) {
        case 'h':
            usage(stdout);
            return 1;
        case 'M':
            map = optarg;
            continue;
        case 'H':
            plain_http = true;
            continue;
        case 'N':
            o->mesh_paths = false;
            continue;
        case 'o':
            o->once = true;
            continue;
        case 'j':
            o->json = true;
            continue;
        case 'I':
            o->insecure = true;
            continue;
        }
        if (opt == '?' || apply(o, opt, optarg) < 0)
            return -1;
    }
    if (optind < argc) {
        fprintf(stderr, "hderp-echo: observe: unexpected argument %s (see --help)\n", argv[optind]);
        return -1;
    }
    if (map && load_map(o, map, plain_http) < 0)
        return -1;
    if (o->nodes_count == 0 && o->map_url == NULL) {
        fprintf(stderr, "hderp-echo: observe needs --server URL or --derp-map FILE (see --help)\n");
        return -1;
    }
    for (unsigned i = 0; i < o->nodes_count; i++)
        o->nodes[i].insecure |= o->insecure;
    return 0;
}

/* ---------------------------------------------------------------- the DERP map */

static const char *str_of(const json_t *obj, const char *key)
{
    const json_t *v = json_object_get(obj, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static long long int_of(const json_t *obj, const char *key, long long dflt)
{
    const json_t *v = json_object_get(obj, key);
    return json_is_integer(v) ? json_integer_value(v) : dflt;
}

/* Names go into Prometheus labels, JSON and HTML unescaped: only characters none of them
 * treats specially (what DERP maps use: "900a", "nyc", host names, addresses). */
static bool name_ok(const char *s)
{
    if (s == NULL || *s == '\0' || strlen(s) >= ECHO_OBS_NAME_MAX)
        return false;
    for (; *s; s++)
        if (!(isalnum((unsigned char)*s) || strchr("._:-[]", *s)))
            return false;
    return true;
}

/* One node of region rid: its DERP URL (an address from IPv4/IPv6 when given, so nothing is
 * looked up but HostName when it has to be), TLS name and STUN address. */
static int add_node(struct echo_obs_opts *o, const json_t *jn, long long rid, const char *rcode,
                    bool plain_http, char *err, size_t err_size)
{
    const char *name = str_of(jn, "Name"), *host = str_of(jn, "HostName");
    const char *v4 = str_of(jn, "IPv4"), *v6 = str_of(jn, "IPv6");
    if (name == NULL || (host == NULL && v4 == NULL && v6 == NULL)) {
        snprintf(err, err_size, "region %lld: a node without Name or HostName", rid);
        return -1;
    }
    if (json_is_true(json_object_get(jn, "STUNOnly")))
        return 0;
    if (!name_ok(name) || !name_ok(rcode) || (host && *host && !name_ok(host))) {
        snprintf(err, err_size,
                 "region %lld: node or region name %s/%s: use letters, digits and ._:-[] (at "
                 "most %u)",
                 rid, name, rcode, ECHO_OBS_NAME_MAX - 1);
        return -1;
    }
    if (o->nodes_count == ECHO_OBS_NODES_MAX) {
        snprintf(err, err_size, "more than %u nodes", ECHO_OBS_NODES_MAX);
        return -1;
    }
    struct echo_obs_node *n = &o->nodes[o->nodes_count];
    memset(n, 0, sizeof(*n));
    snprintf(n->name, sizeof(n->name), "%s", name);
    snprintf(n->region, sizeof(n->region), "%s", rcode);
    n->region_id = (int)rid;
    n->insecure = json_is_true(json_object_get(jn, "InsecureForTests"));
    long long port = int_of(jn, "DERPPort", 0), stun = int_of(jn, "STUNPort", 0);
    if (port <= 0)
        port = plain_http ? 80 : 443;
    const char *dial = v4 && *v4 ? v4 : v6 && *v6 ? v6 : host;
    bool bracket = strchr(dial, ':') != NULL;
    char url[512];
    snprintf(url, sizeof(url), "%s://%s%s%s:%lld/derp", plain_http ? "http" : "https",
             bracket ? "[" : "", dial, bracket ? "]" : "", port);
    if (port > 65535 || derp_client_url_parse(url, &n->url) < 0) {
        snprintf(err, err_size, "node %s: cannot reach %s", name, url);
        return -1;
    }
    if (host && *host) { /* Host header and TLS name: the node's name, as Tailscale dials it */
        snprintf(n->sni, sizeof(n->sni), "%s", host);
        snprintf(n->url.host, sizeof(n->url.host), "%s:%lld", host, port);
    }
    if (stun >= 0 && n->url.addr.sa.sa_family != AF_UNIX) {
        n->stun = n->url.addr;
        if (n->stun.sa.sa_family == AF_INET)
            n->stun.in4.sin_port = htons((uint16_t)(stun ? stun : 3478));
        else
            n->stun.in6.sin6_port = htons((uint16_t)(stun ? stun : 3478));
        n->has_stun = stun <= 65535;
    }
    o->nodes_count++;
    return 0;
}

int echo_obs_derpmap_parse(const char *text, size_t len, bool plain_http, struct echo_obs_opts *o,
                           char *err, size_t err_size)
{
    json_error_t je;
    json_t *root = json_loadb(text, len, 0, &je);
    if (root == NULL) {
        snprintf(err, err_size, "not JSON (line %d: %s)", je.line, je.text);
        return -EINVAL;
    }
    int rc = -EINVAL;
    json_t *regions = json_object_get(root, "Regions");
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v)
    {
        if (regions == NULL && strcasecmp(key, "derpMap") == 0 && json_is_object(v))
            regions = json_object_get(v, "Regions"); /* a policy file's {"derpMap": {...}} */
    }
    if (!json_is_object(regions)) {
        snprintf(err, err_size,
                 "no \"Regions\" object (at the top, or in \"derpMap\" as --print-derpmap and "
                 "policy files have it)");
        goto out;
    }
    const char *id;
    json_t *r;
    json_object_foreach(regions, id, r)
    {
        long long rid = int_of(r, "RegionID", atoll(id));
        const char *code = str_of(r, "RegionCode");
        char rcode[32];
        snprintf(rcode, sizeof(rcode), "%s", code && *code ? code : id);
        json_t *nodes = json_object_get(r, "Nodes");
        size_t i;
        json_t *jn;
        json_array_foreach(nodes, i, jn)
        {
            if (add_node(o, jn, rid, rcode, plain_http, err, err_size) < 0)
                goto out;
        }
    }
    rc = 0;
out:
    json_decref(root);
    return rc;
}
