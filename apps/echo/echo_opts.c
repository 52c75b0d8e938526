/* echo_opts.c - hderp-echo's command line. Main thread. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "echo.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: hderp-echo echo --server URL [--key-file F] [--insecure | --ca F]\n"
            "       hderp-echo ping --server URL --peer KEY [--count N] [--warmup N] [--size B]\n"
            "                       [--interval MS | --rate PPS] [--timeout MS] [--json]\n"
            "                       [--key-file F] [--insecure | --ca F]\n"
            "       hderp-echo observe (--server URL ... | --derp-map FILE) [...]\n"
            "                       (hderp-echo observe --help)\n\n"
            "echo: a DERP client that sends every packet back to its sender; prints its public\n"
            "      key as one line (nodekey:<64 hex>) once logged in.\n"
            "ping: sends packets carrying a sequence number and a send time to an echo peer and\n"
            "      reports round-trip percentiles after discarding the warm-up.\n\n"
            "  --server URL     http[s]://HOST[:PORT][/path] (default path /derp); a name is\n"
            "                   resolved once at start; https verifies the name; ws:// or\n"
            "                   wss:// for the WebSocket carrier\n"
            "  --peer KEY       the echo peer: nodekey:<hex> or bare hex\n"
            "  --count N        packets to send (default 5000, at most %u)\n"
            "  --warmup N       first packets not measured (default 500)\n"
            "  --size B         packet size in bytes (default 64, %d..%d)\n"
            "  --interval MS    one packet every MS milliseconds (default 1)\n"
            "  --rate PPS       packets per second instead of --interval\n"
            "  --timeout MS     wait this long for the last echoes (default 1000)\n"
            "  --key-file F     key file in derper's JSON format (created if missing);\n"
            "                   default: a fresh key\n"
            "  --insecure       https without certificate checks (tests)\n"
            "  --ca F           https: CA file to verify the server against\n"
            "  --json           machine-readable result\n",
            ECHO_COUNT_MAX, ECHO_HEADER_LEN, ECHO_SIZE_MAX);
}

static int parse_u32(const char *flag, const char *v, uint32_t lo, uint32_t hi, uint32_t *out)
{
    char *end;
    unsigned long x = strtoul(v, &end, 10);
    if (*v == '\0' || *end || x < lo || x > hi) {
        fprintf(stderr, "hderp-echo: %s %s: expected %u..%u\n", flag, v, lo, hi);
        return -1;
    }
    *out = (uint32_t)x;
    return 0;
}

static int apply(struct echo_opts *o, int opt, const char *v)
{
    switch (opt) {
    case 's':
        o->server = v;
        if (derp_client_url_parse(v, &o->url) < 0) {
            fprintf(stderr,
                    "hderp-echo: --server %s: expected http[s]://HOST[:PORT][/path] (an address or "
                    "a name that resolves)\n",
                    v);
            return -1;
        }
        return 0;
    case 'p':
        if (derp_pubkey_parse(v, strlen(v), &o->peer) < 0) {
            fprintf(stderr, "hderp-echo: --peer %s: not a key (nodekey:<64 hex> or hex)\n", v);
            return -1;
        }
        return 0;
    case 'c':
        return parse_u32("--count", v, 1, ECHO_COUNT_MAX, &o->count);
    case 'w':
        return parse_u32("--warmup", v, 0, ECHO_COUNT_MAX, &o->warmup);
    case 'z':
        return parse_u32("--size", v, ECHO_HEADER_LEN, ECHO_SIZE_MAX, &o->size);
    case 'i':
        return parse_u32("--interval", v, 1, 60000, &o->interval_ms);
    case 'r':
        o->rate_pps = strtod(v, NULL);
        if (o->rate_pps <= 0 || o->rate_pps > 1e7) {
            fprintf(stderr, "hderp-echo: --rate %s: expected 0 < PPS <= 10000000\n", v);
            return -1;
        }
        return 0;
    case 't':
        return parse_u32("--timeout", v, 1, 600000, &o->timeout_ms);
    case 'k':
        o->key_file = v;
        return 0;
    case 'a':
        o->ca_file = v;
        return 0;
    default:
        return -1;
    }
}

int echo_opts_parse(int argc, char **argv, struct echo_opts *o)
{
    static const struct option longs[] = {
        {"server", required_argument, NULL, 's'},   {"peer", required_argument, NULL, 'p'},
        {"count", required_argument, NULL, 'c'},    {"warmup", required_argument, NULL, 'w'},
        {"size", required_argument, NULL, 'z'},     {"interval", required_argument, NULL, 'i'},
        {"rate", required_argument, NULL, 'r'},     {"timeout", required_argument, NULL, 't'},
        {"key-file", required_argument, NULL, 'k'}, {"ca", required_argument, NULL, 'a'},
        {"insecure", no_argument, NULL, 'I'},       {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},           {NULL, 0, NULL, 0},
    };
    *o = (struct echo_opts){
        .count = 5000, .warmup = 500, .size = 64, .interval_ms = 1, .timeout_ms = 1000};
    if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? -1 : 1;
    }
    o->mode = argv[1];
    if (strcmp(o->mode, "echo") != 0 && strcmp(o->mode, "ping") != 0) {
        fprintf(stderr, "hderp-echo: unknown mode %s (echo, ping or observe)\n", o->mode);
        return -1;
    }
    bool have_peer = false;
    optind = 2;
    int opt;
    while ((opt = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        if (opt == 'h') {
            usage(stdout);
            return 1;
        }
        if (opt == 'I' || opt == 'j') {
            *(opt == 'I' ? &o->insecure : &o->json) = true;
            continue;
        }
        if (opt == '?' || apply(o, opt, optarg) < 0)
            return -1;
        have_peer |= opt == 'p';
    }
    if (optind < argc || o->server == NULL) {
        fprintf(stderr, "hderp-echo: %s (see --help)\n",
                o->server ? "unexpected argument" : "--server is required");
        return -1;
    }
    if (strcmp(o->mode, "ping") == 0 && (!have_peer || o->warmup >= o->count)) {
        fprintf(stderr, "hderp-echo: ping needs --peer, and --warmup below --count\n");
        return -1;
    }
    if (o->url.tls && !o->insecure && o->ca_file == NULL) {
        fprintf(stderr, "hderp-echo: https needs --ca FILE or --insecure\n");
        return -1;
    }
    return 0;
}
