/* echo_opts.c - hderp-echo's command line: the mode, then a table of flags for the relay kit's
 * parser (kit_flags_parse); the usage text is written out. Main thread. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "echo.h"
#include <hd/kit.h>

static void usage(FILE *out)
{
    fprintf(out,
            "usage: hderp-echo echo --server URL [--key-file F] [--insecure | --ca F]\n"
            "       hderp-echo ping --server URL --peer KEY [--count N] [--warmup N] [--size B]\n"
            "                       [--interval D | --rate PPS] [--timeout D] [--json]\n"
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
            "  --interval D     one packet every D (default 1ms)\n"
            "  --rate PPS       packets per second instead of --interval\n"
            "  --timeout D      wait this long for the last echoes (default 1s)\n"
            "  --key-file F     key file in derper's JSON format (created if missing);\n"
            "                   default: a fresh key\n"
            "  --insecure       https without certificate checks (tests)\n"
            "  --ca F           https: CA file to verify the server against\n"
            "  --json           machine-readable result\n"
            "Durations as in Go (500ms, 10s, 5m, 1h30m); a bare number is milliseconds.\n",
            ECHO_COUNT_MAX, ECHO_HEADER_LEN, ECHO_SIZE_MAX);
}

/* The values that need more than a range check (kit_flag_fn). */
static int set_server(const char *v, void *arg, char *err, size_t err_size)
{
    struct echo_opts *o = arg;
    o->server = v;
    if (derp_client_url_parse(v, &o->url) < 0) {
        snprintf(err, err_size,
                 "--server %s: expected http[s]://HOST[:PORT][/path] (an address or a name that "
                 "resolves)",
                 v);
        return -EINVAL;
    }
    return 0;
}

struct peer_arg {
    struct echo_opts *o;
    bool given;
};

static int set_peer(const char *v, void *arg, char *err, size_t err_size)
{
    struct peer_arg *p = arg;
    if (derp_pubkey_parse(v, strlen(v), &p->o->peer) < 0) {
        snprintf(err, err_size, "--peer %s: not a key (nodekey:<64 hex> or hex)", v);
        return -EINVAL;
    }
    p->given = true;
    return 0;
}

static int set_rate(const char *v, void *arg, char *err, size_t err_size)
{
    struct echo_opts *o = arg;
    o->rate_pps = strtod(v, NULL);
    if (o->rate_pps <= 0 || o->rate_pps > 1e7) {
        snprintf(err, err_size, "--rate %s: expected 0 < PPS <= 10000000", v);
        return -EINVAL;
    }
    return 0;
}

int echo_opts_parse(int argc, char **argv, struct echo_opts *o)
{
    *o = (struct echo_opts){
        .count = 5000, .warmup = 500, .size = 64, .interval_ms = 1, .timeout_ms = 1000};
    struct peer_arg peer_given = {o, false};
    struct kit_flag_call server = {set_server, o}, peer = {set_peer, &peer_given},
                         rate = {set_rate, o};
    const struct kit_flag flags[] = {
        {"server", KIT_FLAG_FN, &server, 0, 0, NULL},
        {"peer", KIT_FLAG_FN, &peer, 0, 0, NULL},
        {"count", KIT_FLAG_U32, &o->count, 1, ECHO_COUNT_MAX, NULL},
        {"warmup", KIT_FLAG_U32, &o->warmup, 0, ECHO_COUNT_MAX, NULL},
        {"size", KIT_FLAG_U32, &o->size, ECHO_HEADER_LEN, ECHO_SIZE_MAX, NULL},
        {"interval", KIT_FLAG_MS, &o->interval_ms, 1, 60000, NULL},
        {"rate", KIT_FLAG_FN, &rate, 0, 0, NULL},
        {"timeout", KIT_FLAG_MS, &o->timeout_ms, 1, 600000, NULL},
        {"key-file", KIT_FLAG_STR, &o->key_file, 0, 0, NULL},
        {"ca", KIT_FLAG_STR, &o->ca_file, 0, 0, NULL},
        {"insecure", KIT_FLAG_BOOL, &o->insecure, 0, 0, NULL},
        {"json", KIT_FLAG_BOOL, &o->json, 0, 0, NULL},
    };
    if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? -1 : 1;
    }
    o->mode = argv[1];
    if (strcmp(o->mode, "echo") != 0 && strcmp(o->mode, "ping") != 0) {
        fprintf(stderr, "hderp-echo: unknown mode %s (echo or ping)\n", o->mode);
        return -1;
    }
    char err[256];
    /* The flags after the mode: argv[1] plays the program name's part for the parser. */
    int rc = kit_flags_parse(flags, HD_ARRAY_SIZE(flags), argc - 1, argv + 1, err, sizeof(err));
    if (rc == -ECANCELED) {
        usage(stdout);
        return 1;
    }
    if (rc < 0 || o->server == NULL) {
        fprintf(stderr, "hderp-echo: %s (see --help)\n", rc < 0 ? err : "--server is required");
        return -1;
    }
    if (strcmp(o->mode, "ping") == 0 && (!peer_given.given || o->warmup >= o->count)) {
        fprintf(stderr, "hderp-echo: ping needs --peer, and --warmup below --count\n");
        return -1;
    }
    if (o->url.tls && !o->insecure && o->ca_file == NULL) {
        fprintf(stderr, "hderp-echo: https needs --ca FILE or --insecure\n");
        return -1;
    }
    return 0;
}
