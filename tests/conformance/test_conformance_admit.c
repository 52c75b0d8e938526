/* test_conformance_admit.c - spec §5 -verify-client-url against a real hderp-server and a
 * real controller process (admit_controller.py, python3 http.server on a free port) that answers
 * per NodePublic: admitted clients log in and exchange packets; "Allow": false, non-200 and bad
 * JSON refuse, and so do oversized, chunked, cut-short, redirected or big-headed answers (judged
 * from the first 4 KiB as derper does, never "unreachable"); an unreachable controller admits
 * iff -verify-client-url-fail-open; a controller
 * slow for one key does not hold up another client already in. https: the controller serves a
 * leaf from a test CA (openssl CLI) and the server trusts it through SSL_CERT_FILE (the system
 * roots as Go reads them); a controller whose CA is not trusted is a transport error. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "conf_support.h"
#include "derp_keys.h"

extern char **environ;

#define SHARDS       2
#define CTL_START_MS 15000 /* python3 start-up on a loaded machine */

static struct conf_server srv;
static pid_t ctl_pid, tls_ctl_pid; /* the http and the https controller */
static int64_t last;               /* conf_varz_wait's last value */
static char dir[256], rules[300], url[64];

/* argv[0] (a program on PATH) started with its stdout and stderr on /dev/null (not the test's:
 * ctest waits for its pipe); its PID. */
static pid_t spawn_quiet(const char *const argv[])
{
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], &fa, NULL, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    cr_assert_eq(rc, 0, "%s: %s", argv[0], strerror(rc));
    return pid;
}

/* Starts admit_controller.py (https with cert/key when given) with its port file dir/NAME.port;
 * returns its PID and writes its port. */
static pid_t ctl_spawn(const char *name, const char *cert, const char *key, int *port_out)
{
    char port_file[300];
    snprintf(port_file, sizeof(port_file), "%s/%s.port", dir, name);
    const char *argv[] = {"python3", ADMIT_CTL, port_file, rules, cert, key, NULL};
    pid_t pid = spawn_quiet(argv);
    int port = 0;
    for (int64_t end = conf_now_ms() + CTL_START_MS; port == 0 && conf_now_ms() < end;) {
        FILE *f = fopen(port_file, "r");
        if (f == NULL || fscanf(f, "%d", &port) != 1)
            usleep(50 * 1000);
        if (f)
            fclose(f);
    }
    cr_assert_gt(port, 0, "the %s controller did not start", name);
    *port_out = port;
    return pid;
}

static void ctl_up(void)
{
    signal(SIGPIPE, SIG_IGN); /* the server closes refused clients while they write */
    mkdir(CONF_WORK_DIR, 0755);
    snprintf(dir, sizeof(dir), "%s/admit-XXXXXX", CONF_WORK_DIR);
    cr_assert_not_null(mkdtemp(dir));
    snprintf(rules, sizeof(rules), "%s/rules", dir);
    int port;
    ctl_pid = ctl_spawn("http", NULL, NULL, &port);
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/verify", port);
}

static void ctl_down(void)
{
    conf_server_down(&srv);
    pid_t *pids[] = {&ctl_pid, &tls_ctl_pid};
    for (size_t i = 0; i < sizeof(pids) / sizeof(pids[0]); i++) {
        if (*pids[i] > 0) {
            kill(*pids[i], SIGTERM);
            waitpid(*pids[i], NULL, 0);
            *pids[i] = 0;
        }
    }
}

TestSuite(test_conformance_admit, .init = ctl_up, .fini = ctl_down, .timeout = 120);

/* The server asking u, fail_open one of the -verify-client-url-fail-open forms, with one more
 * flag and its value (flag NULL: none) on shards shards. */
static void server_up_with(const char *u, const char *fail_open, const char *flag,
                           const char *value, unsigned shards)
{
    const char *extra[] = {"-verify-client-url", u, fail_open, flag, value, NULL};
    cr_assert_eq(
        conf_server_start(&srv, &(struct conf_server_opts){.shards = shards, .extra = extra}), 0);
}

static void server_up(const char *u, const char *fail_open)
{
    server_up_with(u, fail_open, NULL, NULL, SHARDS);
}

/* A fresh key pair whose admission mode is mode ("allow", "deny", "slow", "500", "junk"). */
static void keyed(struct derp_keypair *kp, const char *mode)
{
    CONF_OK(derp_keypair_generate(kp));
    char key[DERP_PUBKEY_TEXT_SIZE];
    derp_pubkey_format(&kp->pub, key);
    FILE *f = fopen(rules, "a");
    cr_assert_not_null(f);
    fprintf(f, "%s %s\n", key, mode);
    fclose(f);
}

/* Two fresh key pairs in mode (keyed), both logged in as a and b. */
static void two_in(const char *mode, struct derp_keypair *ka, struct derp_keypair *kb,
                   struct conf_raw *a, struct conf_raw *b)
{
    keyed(ka, mode);
    keyed(kb, mode);
    CONF_OK(conf_raw_login(a, &srv, ka, NULL));
    CONF_OK(conf_raw_login(b, &srv, kb, NULL));
}

/* The counter name now, which must be want. */
static void varz_is(const char *name, int64_t want, const char *why)
{
    int64_t v = -1;
    CONF_OK(conf_varz(&srv, name, false, &v));
    cr_assert_eq(v, want, "%s is %lld, not %lld: %s", name, (long long)v, (long long)want, why);
}

/* The end of a test with two clients in: both closed, the server stopped (it must exit 0). */
static void two_out(struct conf_raw *a, struct conf_raw *b)
{
    conf_raw_close(a);
    conf_raw_close(b);
    conf_server_stop_clean(&srv);
}

static void exchange(struct conf_raw *a, struct conf_raw *b, const char *text)
{
    struct derp_pubkey src;
    const uint8_t *data;
    size_t len;
    CONF_OK(conf_raw_send_packet(a, &b->kp.pub, text, strlen(text)));
    CONF_OK(conf_raw_read_packet(b, CONF_IO_TIMEOUT_MS, &src, &data, &len));
    cr_assert(derp_pubkey_equal(&src, &a->kp.pub));
    cr_assert(len == strlen(text) && memcmp(data, text, len) == 0);
}

/* Login with a fresh key kp in mode must fail: the server closes after ClientInfo (§5), nothing
 * else, and hderp_admit_refused comes to want_refused. */
static void refused_key(struct derp_keypair *kp, const char *mode, int64_t want_refused)
{
    keyed(kp, mode);
    struct conf_raw r;
    cr_assert_neq(conf_raw_login(&r, &srv, kp, NULL), 0, "%s: admitted", mode);
    conf_raw_close(&r);
    CONF_OK(conf_varz_wait(&srv, "hderp_admit_refused", want_refused, CONF_IO_TIMEOUT_MS, &last));
}

static void refused(const char *mode, int64_t want_refused)
{
    struct derp_keypair kp;
    refused_key(&kp, mode, want_refused);
}

/* How many of the controller's logged request bodies hold text (whole: are that line). */
static int ctl_log_count(const char *text, bool whole)
{
    char log[320], line[512];
    snprintf(log, sizeof(log), "%s.log", rules);
    FILE *f = fopen(log, "r");
    int n = 0;
    while (f && fgets(line, sizeof(line), f))
        n += whole ? strcmp(line, text) == 0 : strstr(line, text) != NULL;
    if (f)
        fclose(f);
    return n;
}

/* How many requests the controller got about kp. */
static int ctl_asked_count(const struct derp_keypair *kp)
{
    char key[DERP_PUBKEY_TEXT_SIZE];
    derp_pubkey_format(&kp->pub, key);
    return ctl_log_count(key, false);
}

static bool ctl_asked(const struct derp_keypair *kp)
{
    return ctl_asked_count(kp) > 0;
}

Test(test_conformance_admit, allow_then_packets_and_the_request_body)
{
    server_up(url, "-verify-client-url-fail-open=true");
    struct derp_keypair ka, kb;
    struct conf_raw a, b;
    two_in("allow", &ka, &kb, &a, &b);
    exchange(&a, &b, "admitted a to b");
    exchange(&b, &a, "admitted b to a");
    CONF_OK(conf_raw_ping_pong(&a, 7, CONF_IO_TIMEOUT_MS));
    /* The body exactly as spec §5 has it. */
    char want[600], key[DERP_PUBKEY_TEXT_SIZE];
    derp_pubkey_format(&ka.pub, key);
    snprintf(want, sizeof(want), "{\"NodePublic\":\"%s\",\"Source\":\"127.0.0.1\"}\n", key);
    cr_assert_gt(ctl_log_count(want, true), 0, "no request body %s", want);
    varz_is("hderp_admit_refused", 0, "nobody was refused");
    two_out(&a, &b);
}

Test(test_conformance_admit, deny_non200_and_bad_json_refuse_even_fail_open)
{
    server_up(url, "-verify-client-url-fail-open=true");
    refused("deny", 1);
    refused("500", 2);
    refused("junk", 3);
    varz_is("hderp_admit_errors", 0, "answers are not transport errors");
    conf_server_stop_clean(&srv);
}

/* Answers that arrived are judged as derper judges them (the first 4 KiB of a 200's body, a
 * refusal for anything else), never taken as "unreachable" for fail-open to admit: an oversized
 * refusal used to admit (issue 24). */
Test(test_conformance_admit, oversized_or_cut_answers_refuse_even_fail_open)
{
    server_up(url, "-verify-client-url-fail-open=true");
    const char *modes[] = {"longno",  "hugeno",  "chunkedno", "cut",
                           "500huge", "bighead", "redirect",  "101"};
    for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++)
        refused(modes[i], (int64_t)i + 1);
    varz_is("hderp_admit_errors", 0, "answers are not transport errors");
    conf_server_stop_clean(&srv);
}

/* What derper admits from the same first 4 KiB, fail-closed: a whole {"Allow": true} before
 * 4 MiB of padding, and a lower-case key (encoding/json matches case-insensitively). */
Test(test_conformance_admit, answer_judged_from_its_first_4k_as_derper)
{
    server_up(url, "-verify-client-url-fail-open=false");
    struct derp_keypair ka, kb;
    struct conf_raw a, b;
    keyed(&ka, "hugeyes");
    keyed(&kb, "lower");
    CONF_OK(conf_raw_login(&a, &srv, &ka, NULL));
    CONF_OK(conf_raw_login(&b, &srv, &kb, NULL));
    exchange(&a, &b, "judged from the first 4 KiB");
    varz_is("hderp_admit_refused", 0, "nobody was refused");
    two_out(&a, &b);
}

/* A port nobody listens on (bound, then closed). */
static void dead_url(char *out, size_t size)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
    close(fd);
    snprintf(out, size, "http://127.0.0.1:%u/verify", ntohs(sa.sin_port));
}

Test(test_conformance_admit, unreachable_fail_open_admits)
{
    char u[64];
    dead_url(u, sizeof(u));
    server_up(u, "-verify-client-url-fail-open"); /* bare boolean: true */
    struct conf_raw a, b;
    CONF_OK(conf_raw_login(&a, &srv, NULL, NULL));
    CONF_OK(conf_raw_login(&b, &srv, NULL, NULL));
    exchange(&a, &b, "fail open");
    CONF_OK(conf_varz_wait(&srv, "hderp_admit_errors", 2, CONF_IO_TIMEOUT_MS, &last));
    two_out(&a, &b);
}

Test(test_conformance_admit, unreachable_fail_closed_refuses)
{
    char u[64];
    dead_url(u, sizeof(u));
    server_up(u, "-verify-client-url-fail-open=false");
    refused("allow", 1); /* the rule is never asked */
    CONF_OK(conf_varz_wait(&srv, "hderp_admit_errors", 1, CONF_IO_TIMEOUT_MS, &last));
    conf_server_stop_clean(&srv);
}

/* While the controller takes 3 s over one key, clients already in keep exchanging packets. */
Test(test_conformance_admit, slow_answer_does_not_block_others)
{
    server_up(url, "-verify-client-url-fail-open=false");
    struct derp_keypair ka, kb, ks;
    struct conf_raw a, b, s;
    two_in("allow", &ka, &kb, &a, &b);
    keyed(&ks, "slow");
    /* The slow one: up to ClientInfo, not waiting for ServerInfo. */
    int64_t t0 = 0;
    CONF_OK(conf_raw_login_send(&s, &srv, &ks, NULL, &t0));
    for (int i = 0; i < 20; i++) {
        exchange(&a, &b, "while the controller thinks");
        exchange(&b, &a, "still moving");
    }
    CONF_OK(conf_raw_ping_pong(&a, 9, CONF_IO_TIMEOUT_MS));
    int64_t took = conf_now_ms() - t0;
    cr_assert_lt(took, 2500, "the exchange took %lld ms: blocked behind the slow answer?",
                 (long long)took);
    CONF_OK(conf_raw_read_server_info(&s, NULL));
    cr_assert_geq(conf_now_ms() - t0, 2900, "the slow answer came early");
    exchange(&s, &a, "slow one in");
    conf_raw_close(&a);
    conf_raw_close(&b);
    conf_raw_close(&s);
    conf_server_stop_clean(&srv);
}

/* ---------------------------------------------------------------- https */

static void openssl_run(const char *const argv[])
{
    pid_t pid = spawn_quiet(argv);
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "openssl %s failed", argv[1]);
}

static char ca_pem[300], other_pem[300], empty_dir[300];

/* dir/ca.pem (the test CA), dir/other.pem (a CA that signed nothing here), dir/empty, and the
 * https controller with a leaf from ca.pem for 127.0.0.1: its URL in out. */
static void https_ctl_up(char *out, size_t size)
{
    char ca_key[300], other_key[300], leaf[300], leaf_key[300];
    snprintf(ca_pem, sizeof(ca_pem), "%s/ca.pem", dir);
    snprintf(ca_key, sizeof(ca_key), "%s/ca.key", dir);
    snprintf(other_pem, sizeof(other_pem), "%s/other.pem", dir);
    snprintf(other_key, sizeof(other_key), "%s/other.key", dir);
    snprintf(leaf, sizeof(leaf), "%s/leaf.pem", dir);
    snprintf(leaf_key, sizeof(leaf_key), "%s/leaf.key", dir);
    snprintf(empty_dir, sizeof(empty_dir), "%s/empty", dir);
    cr_assert_eq(mkdir(empty_dir, 0700), 0);
    const char *cas[][3] = {{ca_pem, ca_key, "/CN=admit test CA"},
                            {other_pem, other_key, "/CN=admit other CA"}};
    for (size_t i = 0; i < 2; i++) {
        const char *argv[] = {"openssl",
                              "req",
                              "-x509",
                              "-newkey",
                              "ec",
                              "-pkeyopt",
                              "ec_paramgen_curve:prime256v1",
                              "-nodes",
                              "-keyout",
                              cas[i][1],
                              "-out",
                              cas[i][0],
                              "-days",
                              "2",
                              "-subj",
                              cas[i][2],
                              "-addext",
                              "basicConstraints=critical,CA:TRUE",
                              "-addext",
                              "keyUsage=critical,keyCertSign",
                              NULL};
        openssl_run(argv);
    }
    const char *argv[] = {"openssl",
                          "req",
                          "-x509",
                          "-CA",
                          ca_pem,
                          "-CAkey",
                          ca_key,
                          "-newkey",
                          "ec",
                          "-pkeyopt",
                          "ec_paramgen_curve:prime256v1",
                          "-nodes",
                          "-keyout",
                          leaf_key,
                          "-out",
                          leaf,
                          "-days",
                          "2",
                          "-subj",
                          "/CN=127.0.0.1",
                          "-addext",
                          "subjectAltName=IP:127.0.0.1",
                          "-addext",
                          "basicConstraints=CA:FALSE",
                          NULL};
    openssl_run(argv);
    int port;
    tls_ctl_pid = ctl_spawn("https", leaf, leaf_key, &port);
    snprintf(out, size, "https://127.0.0.1:%d/verify", port);
}

/* The server with SSL_CERT_FILE = cert_file and an empty SSL_CERT_DIR: it trusts only that. */
static void server_up_trusting(const char *cert_file, const char *u, const char *fail_open)
{
    setenv("SSL_CERT_FILE", cert_file, 1);
    setenv("SSL_CERT_DIR", empty_dir, 1);
    server_up(u, fail_open);
    unsetenv("SSL_CERT_FILE");
    unsetenv("SSL_CERT_DIR");
}

/* The https controller up and the server asking it, trusting only the test CA that signed the
 * controller's certificate (trust_ca) or only the other one. */
static void https_up(bool trust_ca, const char *fail_open)
{
    char u[64];
    https_ctl_up(u, sizeof(u));
    server_up_trusting(trust_ca ? ca_pem : other_pem, u, fail_open);
}

Test(test_conformance_admit, https_allow_and_deny)
{
    https_up(true, "-verify-client-url-fail-open=false");
    struct derp_keypair ka, kb;
    struct conf_raw a, b;
    two_in("allow", &ka, &kb, &a, &b);
    exchange(&a, &b, "admitted over https");
    cr_assert(ctl_asked(&ka) && ctl_asked(&kb));
    refused("deny", 1);
    refused("500", 2);
    varz_is("hderp_admit_errors", 0, "https answers are not transport errors");
    two_out(&a, &b);
}

/* The controller's CA is not among the roots: the handshake fails, nothing is asked, and
 * fail-closed refuses an "allow" key. */
Test(test_conformance_admit, https_untrusted_fail_closed_refuses)
{
    https_up(false, "-verify-client-url-fail-open=false");
    struct derp_keypair kp;
    refused_key(&kp, "allow", 1); /* admitted through an untrusted TLS otherwise */
    CONF_OK(conf_varz_wait(&srv, "hderp_admit_errors", 1, CONF_IO_TIMEOUT_MS, &last));
    cr_assert(!ctl_asked(&kp), "the request went to a controller that did not verify");
    conf_server_stop_clean(&srv);
}

/* Same, fail-open: a "deny" key is admitted, since the controller was never reached. */
Test(test_conformance_admit, https_untrusted_fail_open_admits)
{
    https_up(false, "-verify-client-url-fail-open=true");
    struct derp_keypair ka, kb;
    struct conf_raw a, b;
    two_in("deny", &ka, &kb, &a, &b);
    exchange(&a, &b, "fail open over https");
    CONF_OK(conf_varz_wait(&srv, "hderp_admit_errors", 2, CONF_IO_TIMEOUT_MS, &last));
    cr_assert(!ctl_asked(&ka) && !ctl_asked(&kb));
    two_out(&a, &b);
}

/* ---------------------------------------------------------------- revocation */

/* The controller's answer for kp from now on (the rules file rewritten in one rename). */
static void set_mode(const struct derp_keypair *kp, const char *mode)
{
    char key[DERP_PUBKEY_TEXT_SIZE], line[256], tmp[320];
    derp_pubkey_format(&kp->pub, key);
    snprintf(tmp, sizeof(tmp), "%s.new", rules);
    FILE *in = fopen(rules, "r"), *out = fopen(tmp, "w");
    cr_assert(in && out);
    while (fgets(line, sizeof(line), in))
        if (strncmp(line, key, strlen(key)) != 0)
            fputs(line, out);
    fprintf(out, "%s %s\n", key, mode);
    fclose(in);
    fclose(out);
    cr_assert_eq(rename(tmp, rules), 0);
}

/* A key revoked at the controller while it relays is closed within the re-check interval; the
 * others keep relaying. */
Test(test_conformance_admit, revoked_key_closed_others_untouched)
{
    server_up_with(url, "-verify-client-url-fail-open=false", "-verify-recheck-interval", "1s",
                   SHARDS);
    struct derp_keypair ka, kb, kc;
    struct conf_raw a, b, c;
    two_in("allow", &ka, &kb, &a, &b);
    keyed(&kc, "allow");
    CONF_OK(conf_raw_login(&c, &srv, &kc, NULL));
    exchange(&a, &b, "before the revocation");
    CONF_OK(conf_varz_wait(&srv, "hderp_admit_rechecks", 3, 10000, &last)); /* each asked again */
    set_mode(&ka, "deny");
    CONF_OK(conf_raw_wait_closed(&a, 10000));
    CONF_OK(conf_varz_wait(&srv, "hderp_admit_revoked", 1, CONF_IO_TIMEOUT_MS, &last));
    exchange(&b, &c, "b to c after a was revoked");
    exchange(&c, &b, "c to b after a was revoked");
    CONF_OK(conf_varz_wait(&srv, "hderp_admit_rechecks", 6, 10000, &last)); /* b, c again */
    varz_is("hderp_admit_revoked", 1, "only the revoked key was closed");
    exchange(&b, &c, "still relaying");
    conf_raw_close(&a);
    conf_raw_close(&b);
    conf_raw_close(&c);
    conf_server_stop_clean(&srv);
}

/* The controller goes away: admitted clients stay (fail-closed too: an outage closes nobody). */
Test(test_conformance_admit, controller_down_closes_nobody)
{
    server_up_with(url, "-verify-client-url-fail-open=false", "-verify-recheck-interval", "1s",
                   SHARDS);
    struct derp_keypair ka, kb;
    struct conf_raw a, b;
    two_in("allow", &ka, &kb, &a, &b);
    kill(ctl_pid, SIGTERM);
    waitpid(ctl_pid, NULL, 0);
    ctl_pid = 0;
    CONF_OK(conf_varz_wait(&srv, "hderp_admit_recheck_errors", 4, 15000, &last));
    exchange(&a, &b, "the controller is down");
    exchange(&b, &a, "and nobody was closed");
    varz_is("hderp_admit_revoked", 0, "nobody was closed");
    two_out(&a, &b);
}

/* -verify-cache-ttl: a key's second login within the TTL is decided without asking; a refusal
 * is cached too (for a quarter of the TTL). */
Test(test_conformance_admit, cached_answers_decide_logins)
{
    /* One shard: the cache is the admitting (accepting) shard's, and with two a second login
     * may land on the other one. */
    server_up_with(url, "-verify-client-url-fail-open=false", "-verify-cache-ttl", "60s", 1);
    struct derp_keypair ka, kd;
    keyed(&kd, "deny");
    struct conf_raw a, d;
    keyed(&ka, "allow");
    for (int i = 0; i < 2; i++) {
        CONF_OK(conf_raw_login(&a, &srv, &ka, NULL));
        conf_raw_close(&a);
        cr_assert_neq(conf_raw_login(&d, &srv, &kd, NULL), 0, "a refused key got in");
        conf_raw_close(&d);
    }
    int asked = ctl_asked_count(&ka) + ctl_asked_count(&kd);
    cr_assert_eq(asked, 2, "the controller was asked %d times for two keys", asked);
    varz_is("hderp_admit_cache_hits", 2, "the second logins were decided by the cache");
    conf_server_stop_clean(&srv);
}
