/* test_conformance_admit.c - DERP-SPEC §5 -verify-client-url against a real hderp-server and a
 * real controller process (admit_controller.py, python3 http.server on a free port) that answers
 * per NodePublic: admitted clients log in and exchange packets; "Allow": false, non-200 and bad
 * JSON refuse; an unreachable controller admits iff -verify-client-url-fail-open; a controller
 * slow for one key does not hold up another client already in. */
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
static pid_t ctl_pid;
static int64_t last; /* conf_varz_wait's last value */
static char dir[256], rules[300], url[64];

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void ctl_up(void)
{
    signal(SIGPIPE, SIG_IGN); /* the server closes refused clients while they write */
    mkdir(CONF_WORK_DIR, 0755);
    snprintf(dir, sizeof(dir), "%s/admit-XXXXXX", CONF_WORK_DIR);
    cr_assert_not_null(mkdtemp(dir));
    char port_file[300];
    snprintf(port_file, sizeof(port_file), "%s/port", dir);
    snprintf(rules, sizeof(rules), "%s/rules", dir);
    const char *argv[] = {"python3", ADMIT_CTL, port_file, rules, NULL};
    posix_spawn_file_actions_t fa; /* not the test's stdout: ctest waits for its pipe */
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    int rc = posix_spawnp(&ctl_pid, argv[0], &fa, NULL, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    cr_assert_eq(rc, 0);
    int port = 0;
    for (int64_t end = now_ms() + CTL_START_MS; port == 0 && now_ms() < end;) {
        FILE *f = fopen(port_file, "r");
        if (f == NULL || fscanf(f, "%d", &port) != 1)
            usleep(50 * 1000);
        if (f)
            fclose(f);
    }
    cr_assert_gt(port, 0, "the controller did not start");
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/verify", port);
}

static void ctl_down(void)
{
    conf_server_down(&srv);
    if (ctl_pid > 0) {
        kill(ctl_pid, SIGTERM);
        waitpid(ctl_pid, NULL, 0);
        ctl_pid = 0;
    }
}

TestSuite(test_conformance_admit, .init = ctl_up, .fini = ctl_down, .timeout = 120);

static void server_up(const char *u, const char *fail_open)
{
    const char *extra[] = {"-verify-client-url", u, fail_open, NULL};
    cr_assert_eq(
        conf_server_start(&srv, &(struct conf_server_opts){.shards = SHARDS, .extra = extra}), 0);
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

/* Login must fail: the server closes after ClientInfo (§5), nothing else. */
static void refused(const char *mode, int64_t want_refused)
{
    struct derp_keypair kp;
    keyed(&kp, mode);
    struct conf_raw r;
    cr_assert_neq(conf_raw_login(&r, &srv, &kp, NULL), 0, "%s: admitted", mode);
    conf_raw_close(&r);
    CONF_OK(conf_varz_wait(&srv, "hderp_admit_refused", want_refused, CONF_IO_TIMEOUT_MS, &last));
}

Test(test_conformance_admit, allow_then_packets_and_the_request_body)
{
    server_up(url, "-verify-client-url-fail-open=true");
    struct derp_keypair ka, kb;
    keyed(&ka, "allow");
    keyed(&kb, "allow");
    struct conf_raw a, b;
    CONF_OK(conf_raw_login(&a, &srv, &ka, NULL));
    CONF_OK(conf_raw_login(&b, &srv, &kb, NULL));
    exchange(&a, &b, "admitted a to b");
    exchange(&b, &a, "admitted b to a");
    CONF_OK(conf_raw_ping_pong(&a, 7, CONF_IO_TIMEOUT_MS));
    /* The body exactly as spec §5 has it. */
    char want[600], log[320], line[512];
    char key[DERP_PUBKEY_TEXT_SIZE];
    derp_pubkey_format(&ka.pub, key);
    snprintf(want, sizeof(want), "{\"NodePublic\":\"%s\",\"Source\":\"127.0.0.1\"}\n", key);
    snprintf(log, sizeof(log), "%s.log", rules);
    FILE *f = fopen(log, "r");
    cr_assert_not_null(f);
    bool seen = false;
    while (!seen && fgets(line, sizeof(line), f))
        seen = strcmp(line, want) == 0;
    fclose(f);
    cr_assert(seen, "no request body %s", want);
    int64_t v = -1;
    CONF_OK(conf_varz(&srv, "hderp_admit_refused", false, &v));
    cr_assert_eq(v, 0);
    conf_raw_close(&a);
    conf_raw_close(&b);
    conf_server_stop_clean(&srv);
}

Test(test_conformance_admit, deny_non200_and_bad_json_refuse_even_fail_open)
{
    server_up(url, "-verify-client-url-fail-open=true");
    refused("deny", 1);
    refused("500", 2);
    refused("junk", 3);
    int64_t v = -1;
    CONF_OK(conf_varz(&srv, "hderp_admit_errors", false, &v));
    cr_assert_eq(v, 0, "answers are not transport errors");
    conf_server_stop_clean(&srv);
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
    conf_raw_close(&a);
    conf_raw_close(&b);
    conf_server_stop_clean(&srv);
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
    keyed(&ka, "allow");
    keyed(&kb, "allow");
    keyed(&ks, "slow");
    struct conf_raw a, b, s;
    CONF_OK(conf_raw_login(&a, &srv, &ka, NULL));
    CONF_OK(conf_raw_login(&b, &srv, &kb, NULL));
    /* The slow one: up to ClientInfo, not waiting for ServerInfo. */
    uint8_t ci[2048];
    CONF_OK(conf_raw_open(&s, &srv, &ks));
    CONF_OK(conf_raw_upgrade(&s, NULL));
    CONF_OK(conf_raw_read_server_key(&s));
    ssize_t n = conf_raw_client_info(&s, NULL, ci, sizeof(ci));
    cr_assert_gt(n, 0);
    int64_t t0 = now_ms();
    CONF_OK(conf_raw_write(&s, ci, (size_t)n));
    for (int i = 0; i < 20; i++) {
        exchange(&a, &b, "while the controller thinks");
        exchange(&b, &a, "still moving");
    }
    CONF_OK(conf_raw_ping_pong(&a, 9, CONF_IO_TIMEOUT_MS));
    int64_t took = now_ms() - t0;
    cr_assert_lt(took, 2500, "the exchange took %lld ms: blocked behind the slow answer?",
                 (long long)took);
    CONF_OK(conf_raw_read_server_info(&s, NULL));
    cr_assert_geq(now_ms() - t0, 2900, "the slow answer came early");
    exchange(&s, &a, "slow one in");
    conf_raw_close(&a);
    conf_raw_close(&b);
    conf_raw_close(&s);
    conf_server_stop_clean(&srv);
}
