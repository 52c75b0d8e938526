/* test_conformance_tailscaled.c - spec §5 -verify-clients against a real hderp-server and a
 * fake tailscaled (fake_tailscaled.py: python3 http.server on a unix socket answering LocalAPI
 * whois per node key): a key tailscaled knows logs in and exchanges packets, the request is
 * derper's (GET whois?addr=nodekey%3A<hex>, Host local-tailscaled.sock, Tailscale-Cap); an
 * unknown key (404), another status, an old tailscaled and bad JSON refuse with derper's
 * reasons; a socket nobody listens on refuses every client with a clear log line (no
 * fail-open, as derper); -verify-clients with -verify-client-url needs both; a slow tailscaled
 * does not hold up clients already in. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
static pid_t tsd_pid, ctl_pid; /* the fake tailscaled, the URL controller (one test) */
static int64_t last;           /* conf_varz_wait's last value */
static char dir[64], sock[128], rules[128];

static pid_t spawn_quiet(const char *const argv[])
{
    posix_spawn_file_actions_t fa; /* not the test's stdout: ctest waits for its pipe */
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], &fa, NULL, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    cr_assert_eq(rc, 0);
    return pid;
}

static void tsd_up(void)
{
    signal(SIGPIPE, SIG_IGN); /* the server closes refused clients while they write */
    /* /tmp: a unix socket path has at most 107 bytes, the build tree can be deep. */
    snprintf(dir, sizeof(dir), "/tmp/hd-tsd-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(sock, sizeof(sock), "%s/tailscaled.sock", dir);
    snprintf(rules, sizeof(rules), "%s/rules", dir);
    const char *argv[] = {"python3", FAKE_TAILSCALED, sock, rules, NULL};
    tsd_pid = spawn_quiet(argv);
    struct stat st;
    for (int64_t end = conf_now_ms() + CTL_START_MS; stat(sock, &st) < 0 && conf_now_ms() < end;)
        usleep(50 * 1000);
    cr_assert_eq(stat(sock, &st), 0, "the fake tailscaled did not start");
}

static void stop_pid(pid_t *pid)
{
    if (*pid > 0) {
        kill(*pid, SIGTERM);
        waitpid(*pid, NULL, 0);
        *pid = 0;
    }
}

static void tsd_down(void)
{
    conf_server_down(&srv);
    stop_pid(&tsd_pid);
    stop_pid(&ctl_pid);
    const char *names[] = {"tailscaled.sock", "rules",     "rules.log",
                           "ctl.port",        "ctl.rules", "ctl.rules.log"};
    char path[192];
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
}

TestSuite(test_conformance_tailscaled, .init = tsd_up, .fini = tsd_down, .timeout = 120);

static void server_up(const char *const *extra)
{
    cr_assert_eq(
        conf_server_start(&srv, &(struct conf_server_opts){.shards = SHARDS, .extra = extra}), 0);
}

/* A fresh key pair that tailscaled answers with mode (known, old, 500, junk, slow), or that it
 * does not know (mode NULL). */
static void keyed(struct derp_keypair *kp, const char *mode)
{
    CONF_OK(derp_keypair_generate(kp));
    if (mode == NULL)
        return;
    char key[DERP_PUBKEY_TEXT_SIZE];
    derp_pubkey_format(&kp->pub, key);
    FILE *f = fopen(rules, "a");
    cr_assert_not_null(f);
    fprintf(f, "%s %s\n", key, mode);
    fclose(f);
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

/* Whether a line of file holds needle (and needle2 if not NULL). */
static bool file_has(const char *file, const char *needle, const char *needle2)
{
    FILE *f = fopen(file, "r");
    if (f == NULL)
        return false;
    char line[1024];
    bool seen = false;
    while (!seen && fgets(line, sizeof(line), f))
        seen = strstr(line, needle) && (needle2 == NULL || strstr(line, needle2));
    fclose(f);
    return seen;
}

/* The server's log has a line with needle and needle2 (polled: logs are written by shards). */
static void assert_logged(const char *needle, const char *needle2)
{
    char log[300];
    snprintf(log, sizeof(log), "%s/server.log", srv.dir);
    bool seen = false;
    for (int64_t end = conf_now_ms() + CONF_IO_TIMEOUT_MS; !seen && conf_now_ms() < end;) {
        seen = file_has(log, needle, needle2);
        if (!seen)
            usleep(20 * 1000);
    }
    cr_assert(seen, "no log line with \"%s\" / \"%s\"", needle, needle2 ? needle2 : "");
}

/* Login must fail: the server closes after ClientInfo (§5). */
static void refused(const struct derp_keypair *kp, int64_t want_refused)
{
    struct conf_raw r;
    cr_assert_neq(conf_raw_login(&r, &srv, kp, NULL), 0, "admitted");
    conf_raw_close(&r);
    CONF_OK(conf_varz_wait(&srv, "hderp_admit_refused", want_refused, CONF_IO_TIMEOUT_MS, &last));
}

Test(test_conformance_tailscaled, known_admitted_unknown_refused)
{
    const char *extra[] = {"-verify-clients", "-socket", sock, NULL};
    server_up(extra);
    struct derp_keypair ka, kb, ku;
    keyed(&ka, "known");
    keyed(&kb, "known");
    keyed(&ku, NULL);
    struct conf_raw a, b;
    CONF_OK(conf_raw_login(&a, &srv, &ka, NULL));
    CONF_OK(conf_raw_login(&b, &srv, &kb, NULL));
    exchange(&a, &b, "known to tailscaled");
    exchange(&b, &a, "both ways");
    /* The request as derper's LocalAPI client sends it. */
    char hex[DERP_KEY_HEX_SIZE], want[256], log[160];
    derp_key_hex_format(ka.pub.bytes, hex);
    snprintf(want, sizeof(want), "GET /localapi/v0/whois?addr=nodekey%%3A%s local-tailscaled.sock ",
             hex);
    snprintf(log, sizeof(log), "%s.log", rules);
    cr_assert(file_has(log, want, NULL), "no request %s", want);
    cr_assert(!file_has(log, want, " -\n"), "no Tailscale-Cap header");
    refused(&ku, 1);
    char key[DERP_PUBKEY_TEXT_SIZE];
    derp_pubkey_format(&ku.pub, key);
    assert_logged(key, "not authorized (not found in local tailscaled)");
    int64_t v = -1;
    CONF_OK(conf_varz(&srv, "hderp_admit_errors", false, &v));
    cr_assert_eq(v, 0, "a 404 is an answer, not a transport error");
    conf_raw_close(&a);
    conf_raw_close(&b);
    conf_server_stop_clean(&srv);
}

Test(test_conformance_tailscaled, other_answers_refuse)
{
    const char *extra[] = {"-verify-clients", "-socket", sock, NULL};
    server_up(extra);
    struct derp_keypair k500, kold, kjunk;
    keyed(&k500, "500");
    keyed(&kold, "old");
    keyed(&kjunk, "junk");
    refused(&k500, 1);
    assert_logged("failed to query local tailscaled status", "HTTP 500");
    refused(&kold, 2);
    assert_logged("tailscaled version is too old (out of sync with derper binary)", NULL);
    refused(&kjunk, 3);
    assert_logged("failed to query local tailscaled status", "bad JSON");
    conf_server_stop_clean(&srv);
}

/* derper refuses everyone while tailscaled is away (no fail-open for this check); the server
 * starts anyway and says so. */
Test(test_conformance_tailscaled, socket_absent_refuses_with_a_clear_log)
{
    char absent[160];
    snprintf(absent, sizeof(absent), "%s/absent.sock", dir);
    const char *extra[] = {"-verify-clients", "-socket", absent, NULL};
    server_up(extra);
    assert_logged(absent, "every client is refused until tailscaled listens there");
    struct derp_keypair kp;
    keyed(&kp, "known");
    refused(&kp, 1);
    assert_logged("cannot reach tailscaled at", "not running?");
    CONF_OK(conf_varz_wait(&srv, "hderp_admit_errors", 1, CONF_IO_TIMEOUT_MS, &last));
    conf_server_stop_clean(&srv);
}

/* Both checks: tailscaled first, then the controller (its own rules file); each can refuse. */
Test(test_conformance_tailscaled, with_verify_client_url_both_must_pass)
{
    char port_file[160], url[64], ctl_rules[160], ctl_log[170];
    snprintf(port_file, sizeof(port_file), "%s/ctl.port", dir);
    snprintf(ctl_rules, sizeof(ctl_rules), "%s/ctl.rules", dir);
    snprintf(ctl_log, sizeof(ctl_log), "%s.log", ctl_rules);
    const char *argv[] = {"python3", ADMIT_CTL, port_file, ctl_rules, NULL};
    ctl_pid = spawn_quiet(argv);
    int port = 0;
    for (int64_t end = conf_now_ms() + CTL_START_MS; port == 0 && conf_now_ms() < end;) {
        FILE *f = fopen(port_file, "r");
        if (f == NULL || fscanf(f, "%d", &port) != 1)
            usleep(50 * 1000);
        if (f)
            fclose(f);
    }
    cr_assert_gt(port, 0, "the controller did not start");
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/verify", port);
    const char *extra[] = {"-verify-clients",
                           "-socket",
                           sock,
                           "-verify-client-url",
                           url,
                           "-verify-client-url-fail-open=false",
                           NULL};
    server_up(extra);
    struct derp_keypair ka, kb, kt, kc;
    keyed(&ka, "known");
    keyed(&kb, "known");
    keyed(&kt, "known"); /* the controller has no line for it: deny */
    keyed(&kc, NULL);    /* tailscaled does not know it; the controller would allow */
    const struct derp_keypair *allowed[] = {&ka, &kb, &kc};
    FILE *f = fopen(ctl_rules, "a");
    cr_assert_not_null(f);
    char key[DERP_PUBKEY_TEXT_SIZE];
    for (size_t i = 0; i < 3; i++) {
        derp_pubkey_format(&allowed[i]->pub, key);
        fprintf(f, "%s allow\n", key);
    }
    fclose(f);
    struct conf_raw a, b;
    CONF_OK(conf_raw_login(&a, &srv, &ka, NULL));
    CONF_OK(conf_raw_login(&b, &srv, &kb, NULL));
    exchange(&a, &b, "tailscaled and the controller agree");
    refused(&kt, 1); /* passed tailscaled, the controller said no */
    derp_pubkey_format(&kt.pub, key);
    cr_assert(file_has(ctl_log, key, NULL), "the controller was not asked after tailscaled");
    refused(&kc, 2); /* tailscaled said 404: the controller is never asked */
    derp_pubkey_format(&kc.pub, key);
    cr_assert(!file_has(ctl_log, key, NULL), "the controller was asked after tailscaled refused");
    conf_raw_close(&a);
    conf_raw_close(&b);
    conf_server_stop_clean(&srv);
}

/* While tailscaled takes 3 s over one key, clients already in keep exchanging packets. */
Test(test_conformance_tailscaled, slow_tailscaled_does_not_block_others)
{
    const char *extra[] = {"-verify-clients", "-socket", sock, NULL};
    server_up(extra);
    struct derp_keypair ka, kb, ks;
    keyed(&ka, "known");
    keyed(&kb, "known");
    keyed(&ks, "slow");
    struct conf_raw a, b, s;
    CONF_OK(conf_raw_login(&a, &srv, &ka, NULL));
    CONF_OK(conf_raw_login(&b, &srv, &kb, NULL));
    int64_t t0 = 0;
    CONF_OK(conf_raw_login_send(&s, &srv, &ks, NULL, &t0));
    for (int i = 0; i < 20; i++) {
        exchange(&a, &b, "while tailscaled thinks");
        exchange(&b, &a, "still moving");
    }
    int64_t took = conf_now_ms() - t0;
    cr_assert_lt(took, 2500, "the exchange took %lld ms: blocked behind tailscaled?",
                 (long long)took);
    CONF_OK(conf_raw_read_server_info(&s, NULL));
    cr_assert_geq(conf_now_ms() - t0, 2900, "the slow answer came early");
    exchange(&s, &a, "slow one in");
    conf_raw_close(&a);
    conf_raw_close(&b);
    conf_raw_close(&s);
    conf_server_stop_clean(&srv);
}
