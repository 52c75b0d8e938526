/* bench_pairs.c - hderp-bench's pair files: pre-generated key pairs for the K sender->receiver
 * pairs of one experiment, and which instance (process) runs each side, so several generator
 * processes or machines share one experiment (perf/README.md, "Pair files"). Text, one record
 * a line:
 *
 *   hderp-bench-pairs 1
 *   instances N
 *   pair ID SENDER_INSTANCE RECEIVER_INSTANCE SENDER_KEY RECEIVER_KEY
 *
 * IDs run 0..K-1 in order; a key is "privkey:<64 hex>" or bare 64 hex (a private key), or
 * "nodekey:<64 hex>" (only the public key: the side is run elsewhere). Blank lines and lines
 * starting with '#' are ignored. Also "hderp-bench gen-pairs", which writes such a file.
 * Main thread, before the runtime starts; blocking file I/O. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_relay_impl.h"

#define PAIRS_MAGIC "hderp-bench-pairs"

static int line_error(const struct bench_config *c, unsigned line, const char *what)
{
    fprintf(stderr, "hderp-bench: --pair-file %s line %u: %s\n", c->pair_file, line, what);
    return -1;
}

/* One key field. *has_priv: a private key was given (this side may run here). */
static int key_parse(const char *text, struct derp_keypair *kp, bool *has_priv)
{
    size_t len = strlen(text);
    memset(kp, 0, sizeof(*kp));
    *has_priv = false;
    if (strncmp(text, DERP_PUBKEY_PREFIX, strlen(DERP_PUBKEY_PREFIX)) == 0)
        return derp_pubkey_parse(text, len, &kp->pub);
    struct derp_privkey priv;
    if (derp_privkey_parse(text, len, &priv) < 0 || derp_keypair_from_privkey(kp, &priv) < 0)
        return -EINVAL;
    *has_priv = true;
    return 0;
}

static int pubkey_cmp(const void *a, const void *b)
{
    return memcmp(a, b, DERP_KEY_LEN);
}

/* A pair record: "pair ID TXI RXI TXKEY RXKEY" (the first word already matched). */
static int pair_line(struct bench_config *c, unsigned line, char *rest, unsigned id_want,
                     struct bench_pair_spec *out, struct derp_pubkey *pubs)
{
    char *f[6], *save = NULL;
    unsigned n = 0;
    for (char *t = strtok_r(rest, " \t", &save); t; t = strtok_r(NULL, " \t", &save))
        if (n < HD_ARRAY_SIZE(f))
            f[n++] = t;
        else
            return line_error(c, line,
                              "too many fields (want: pair ID SENDER_INSTANCE "
                              "RECEIVER_INSTANCE SENDER_KEY RECEIVER_KEY)");
    if (n != 5)
        return line_error(c, line,
                          "want: pair ID SENDER_INSTANCE RECEIVER_INSTANCE "
                          "SENDER_KEY RECEIVER_KEY");
    unsigned long v[3];
    for (unsigned i = 0; i < 3; i++) {
        char *end;
        errno = 0;
        v[i] = strtoul(f[i], &end, 10);
        if (errno || end == f[i] || *end || f[i][0] == '-')
            return line_error(c, line, "pair ID and instances must be unsigned numbers");
    }
    char msg[128];
    if (v[0] != id_want) {
        snprintf(msg, sizeof(msg),
                 "pair %lu: pairs must be numbered 0, 1, 2, ... in order "
                 "(expected %u)",
                 v[0], id_want);
        return line_error(c, line, msg);
    }
    if (v[1] >= c->instances || v[2] >= c->instances) {
        snprintf(msg, sizeof(msg), "pair %lu: instance %lu is not below the file's instances %u",
                 v[0], v[1] >= c->instances ? v[1] : v[2], c->instances);
        return line_error(c, line, msg);
    }
    bool tx_priv, rx_priv;
    *out = (struct bench_pair_spec){.id = id_want};
    if (key_parse(f[3], &out->sender_kp, &tx_priv) < 0 ||
        key_parse(f[4], &out->receiver_kp, &rx_priv) < 0)
        return line_error(c, line, "a key is not privkey:<64 hex>, nodekey:<64 hex> or 64 hex");
    out->has_tx = v[1] == c->instance;
    out->has_rx = v[2] == c->instance;
    if ((out->has_tx && !tx_priv) || (out->has_rx && !rx_priv)) {
        snprintf(msg, sizeof(msg),
                 "pair %u: instance %u runs its %s but the file has only its "
                 "public key (nodekey:)",
                 id_want, c->instance, out->has_tx && !tx_priv ? "sender" : "receiver");
        return line_error(c, line, msg);
    }
    pubs[2 * id_want] = out->sender_kp.pub;
    pubs[2 * id_want + 1] = out->receiver_kp.pub;
    return 0;
}

static int load(struct bench_config *c, FILE *f, struct bench_pair_spec *specs,
                struct derp_pubkey *pubs)
{
    char buf[BENCH_PAIR_FILE_LINE_MAX + 2];
    unsigned line = 0, pairs = 0, local = 0;
    bool magic = false;
    while (fgets(buf, sizeof(buf), f)) {
        line++;
        size_t len = strlen(buf);
        if (len > BENCH_PAIR_FILE_LINE_MAX || (len && buf[len - 1] != '\n' && !feof(f)))
            return line_error(c, line, "line too long");
        buf[strcspn(buf, "\r\n")] = '\0';
        char *s = buf + strspn(buf, " \t"), *save = NULL;
        if (*s == '\0' || *s == '#')
            continue;
        char *word = strtok_r(s, " \t", &save), *rest = strtok_r(NULL, "", &save);
        if (!magic) {
            if (strcmp(word, PAIRS_MAGIC) != 0 || rest == NULL || strcmp(rest, "1") != 0)
                return line_error(c, line,
                                  "not a pair file (the first line must be \"" PAIRS_MAGIC " 1\")");
            magic = true;
        } else if (strcmp(word, "instances") == 0) {
            char *end;
            unsigned long n = rest ? strtoul(rest, &end, 10) : 0;
            if (c->instances || pairs || rest == NULL || *end || n < 1 || n > BENCH_INSTANCES_MAX)
                return line_error(c, line, "want one \"instances N\" (1..1024) before the pairs");
            c->instances = (unsigned)n;
            if (c->instance >= c->instances) {
                char msg[96];
                snprintf(msg, sizeof(msg), "--instance %u: the file has instances 0..%u",
                         c->instance, c->instances - 1);
                return line_error(c, line, msg);
            }
        } else if (strcmp(word, "pair") == 0) {
            if (c->instances == 0)
                return line_error(c, line, "\"instances N\" must come before the pairs");
            if (pairs == BENCH_PAIR_FILE_PAIRS_MAX)
                return line_error(c, line, "more than 65536 pairs");
            if (pair_line(c, line, rest ? rest : (char *)"", pairs, &specs[local], pubs) < 0)
                return -1;
            if (specs[local].has_tx || specs[local].has_rx) {
                c->sides_count += specs[local].has_tx + specs[local].has_rx;
                if (++local > BENCH_PAIRS_MAX) {
                    char msg[96];
                    snprintf(msg, sizeof(msg),
                             "instance %u runs more than %d pairs: split them "
                             "over more instances",
                             c->instance, BENCH_PAIRS_MAX);
                    return line_error(c, line, msg);
                }
            }
            pairs++;
        } else {
            return line_error(c, line, "unknown record (want \"instances N\" or \"pair ...\")");
        }
    }
    if (ferror(f))
        return line_error(c, line, "read error");
    if (!magic || pairs == 0)
        return line_error(c, line, "no pairs in the file");
    qsort(pubs, 2 * (size_t)pairs, sizeof(*pubs), pubkey_cmp);
    for (unsigned i = 1; i < 2 * pairs; i++)
        if (derp_pubkey_equal(&pubs[i - 1], &pubs[i]))
            return line_error(c, line, "a key is used twice (one relay connection per key)");
    if (local == 0) {
        char msg[64];
        snprintf(msg, sizeof(msg), "no pair has a side on instance %u", c->instance);
        return line_error(c, line, msg);
    }
    c->pairs_total = pairs;
    c->pairs_count = local;
    return 0;
}

int bench_pair_file_load(struct bench_config *c)
{
    FILE *f = fopen(c->pair_file, "r");
    if (f == NULL) {
        fprintf(stderr, "hderp-bench: --pair-file %s: %s\n", c->pair_file, strerror(errno));
        return -1;
    }
    c->specs = calloc(BENCH_PAIRS_MAX + 1, sizeof(*c->specs));
    struct derp_pubkey *pubs = calloc(2 * BENCH_PAIR_FILE_PAIRS_MAX, sizeof(*pubs));
    int rc = -1;
    if (c->specs == NULL || pubs == NULL)
        fprintf(stderr, "hderp-bench: --pair-file %s: out of memory\n", c->pair_file);
    else
        rc = load(c, f, c->specs, pubs);
    fclose(f);
    free(pubs);
    if (rc < 0) {
        free(c->specs);
        c->specs = NULL;
    }
    return rc;
}

/* ---- gen-pairs ------------------------------------------------------------------------------- */

static void gen_usage(FILE *out)
{
    fprintf(out,
            "usage: hderp-bench gen-pairs --pairs K --out FILE [--instances N]\n"
            "         [--layout split|cross|sides]\n"
            "  writes K fresh sender->receiver key pairs and which instance runs each side\n"
            "  (mode 0600: it holds private keys); run each instance with\n"
            "  hderp-bench --pair-file FILE --instance I ...\n"
            "  --pairs K       1..%d\n"
            "  --instances N   1..%d (default 1)\n"
            "  --layout        split: pair i wholly on instance i %% N (default);\n"
            "                  cross: sender on i %% N, receiver on (i+1) %% N;\n"
            "                  sides: N even, senders on instances 0..N/2-1, receivers on\n"
            "                  N/2..N-1 (N = 2: instance 0 sends, instance 1 receives)\n",
            BENCH_PAIR_FILE_PAIRS_MAX, BENCH_INSTANCES_MAX);
}

static int gen_write(const char *out, unsigned pairs, unsigned instances, const char *layout)
{
    int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (f == NULL) {
        fprintf(stderr, "hderp-bench gen-pairs: --out %s: %s\n", out, strerror(errno));
        if (fd >= 0)
            close(fd);
        return 1;
    }
    fprintf(f,
            PAIRS_MAGIC " 1\n# %u pairs, layout %s; pair ID SENDER_INSTANCE "
                        "RECEIVER_INSTANCE SENDER_KEY RECEIVER_KEY\ninstances %u\n",
            pairs, layout, instances);
    unsigned half = instances / 2 ? instances / 2 : 1;
    int rc = 0;
    for (unsigned i = 0; i < pairs && rc == 0; i++) {
        unsigned tx = i % instances, rx = tx;
        if (strcmp(layout, "cross") == 0)
            rx = (i + 1) % instances;
        else if (strcmp(layout, "sides") == 0)
            tx = i % half, rx = half + i % half;
        struct derp_keypair a, b;
        char ta[DERP_PRIVKEY_TEXT_SIZE], tb[DERP_PRIVKEY_TEXT_SIZE];
        if (derp_keypair_generate(&a) < 0 || derp_keypair_generate(&b) < 0) {
            fprintf(stderr, "hderp-bench gen-pairs: key generation failed\n");
            rc = 1;
            break;
        }
        derp_privkey_format(&a.priv, ta);
        derp_privkey_format(&b.priv, tb);
        fprintf(f, "pair %u %u %u %s %s\n", i, tx, rx, ta, tb);
    }
    if (fclose(f) != 0 && rc == 0) {
        fprintf(stderr, "hderp-bench gen-pairs: --out %s: %s\n", out, strerror(errno));
        rc = 1;
    }
    return rc;
}

int bench_gen_pairs_main(int argc, char **argv)
{
    unsigned long pairs = 0, instances = 1;
    const char *out = NULL, *layout = "split";
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0) {
            gen_usage(stdout);
            return 0;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "hderp-bench gen-pairs: %s needs a value (see --help)\n", a);
            return 2;
        }
        const char *v = argv[++i];
        char *end;
        if (strcmp(a, "--out") == 0) {
            out = v;
        } else if (strcmp(a, "--layout") == 0) {
            layout = v;
        } else if (strcmp(a, "--pairs") == 0 || strcmp(a, "--instances") == 0) {
            bool p = a[2] == 'p';
            unsigned long x = strtoul(v, &end, 10);
            unsigned long hi = p ? BENCH_PAIR_FILE_PAIRS_MAX : BENCH_INSTANCES_MAX;
            if (*v == '\0' || *v == '-' || *end || x < 1 || x > hi) {
                fprintf(stderr, "hderp-bench gen-pairs: %s %s: expected 1..%lu\n", a, v, hi);
                return 2;
            }
            *(p ? &pairs : &instances) = x;
        } else {
            fprintf(stderr, "hderp-bench gen-pairs: unknown option %s (see --help)\n", a);
            return 2;
        }
    }
    if (pairs == 0 || out == NULL) {
        fprintf(stderr, "hderp-bench gen-pairs: --pairs and --out are required\n");
        gen_usage(stderr);
        return 2;
    }
    if (strcmp(layout, "split") != 0 && strcmp(layout, "cross") != 0 &&
        strcmp(layout, "sides") != 0) {
        fprintf(stderr, "hderp-bench gen-pairs: --layout %s: expected split, cross or sides\n",
                layout);
        return 2;
    }
    if (strcmp(layout, "sides") == 0 && instances % 2) {
        fprintf(stderr,
                "hderp-bench gen-pairs: --layout sides needs an even --instances, not "
                "%lu\n",
                instances);
        return 2;
    }
    if (derp_crypto_init() < 0) {
        fprintf(stderr, "hderp-bench gen-pairs: libsodium failed to initialise\n");
        return 1;
    }
    return gen_write(out, (unsigned)pairs, (unsigned)instances, layout);
}
