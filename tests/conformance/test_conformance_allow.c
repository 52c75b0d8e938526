/* test_conformance_allow.c - --allow-keys against a real hderp-server: a listed key logs in and
 * gets ServerInfo, an unlisted one is closed after ClientInfo (counted in
 * hderp_allowlist_refused), a mesh peer with an unlisted key is admitted; SIGHUP (by PID) after
 * rewriting the file swaps the list (the new key is admitted, the removed one refused); a broken
 * file on reload is logged with its line and the old list stays; a broken file at start-up makes
 * the server exit non-zero naming file:line; the allow-list is checked before
 * -verify-client-url (an unlisted key never reaches the controller). */
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
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

#define SHARDS      2
#define LOG_WAIT_MS 10000 /* hang guard: a reload is one file read and a few posts */
#define MESH_HEX    "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
#define MESH_JSON   "{\"meshKey\":\"" MESH_HEX "\",\"version\":2,\"CanAckPings\":false}"

static struct conf_server srv;
static char dir[256], list[300];

static void suite_up(void)
{
    signal(SIGPIPE, SIG_IGN); /* the server closes refused clients while they write */
    mkdir(CONF_WORK_DIR, 0755);
    snprintf(dir, sizeof(dir), "%s/allow-XXXXXX", CONF_WORK_DIR);
    cr_assert_not_null(mkdtemp(dir));
    snprintf(list, sizeof(list), "%s/allowed.keys", dir);
}

static void suite_down(void)
{
    conf_server_down(&srv);
}

TestSuite(test_conformance_allow, .init = suite_up, .fini = suite_down, .timeout = 120);

/* Replaces the list file atomically (write a temp file, rename) with text. */
static void write_list(const char *text)
{
    char tmp[320];
    snprintf(tmp, sizeof(tmp), "%s.tmp", list);
    FILE *f = fopen(tmp, "w");
    cr_assert_not_null(f);
    cr_assert(fputs(text, f) >= 0);
    cr_assert_eq(fclose(f), 0);
    cr_assert_eq(rename(tmp, list), 0);
}

static void key_text(const struct derp_keypair *kp, bool prefixed, char *out, size_t size)
{
    char t[DERP_PUBKEY_TEXT_SIZE];
    derp_pubkey_format(&kp->pub, t);
    snprintf(out, size, "%s", prefixed ? t : t + strlen("nodekey:"));
}

static void server_up(const char *const *more)
{
    const char *extra[8] = {"--allow-keys", list};
    for (size_t i = 0; more && more[i]; i++)
        extra[2 + i] = more[i];
    cr_assert_eq(conf_server_start(&srv, &(struct conf_server_opts){.shards = SHARDS,
                                                                    .mesh_key_hex = MESH_HEX,
                                                                    .extra = extra}),
                 0);
}

static void admitted(const struct derp_keypair *kp, const char *json, const char *what)
{
    struct conf_raw r;
    int rc = conf_raw_login(&r, &srv, kp, json);
    if (rc == 0)
        rc = conf_raw_ping_pong(&r, 42, CONF_IO_TIMEOUT_MS);
    conf_raw_close(&r);
    if (rc != 0)
        conf_server_dump_log(&srv);
    cr_assert_eq(rc, 0, "%s: not admitted (%d)", what, rc);
}

/* The server closes after ClientInfo, without ServerInfo. */
static void refused(const struct derp_keypair *kp, const char *what)
{
    struct conf_raw r;
    CONF_OK(conf_raw_open(&r, &srv, kp));
    CONF_OK(conf_raw_upgrade(&r, NULL));
    cr_assert_eq(r.http_status, 101);
    CONF_OK(conf_raw_read_server_key(&r));
    uint8_t buf[1024];
    ssize_t n = conf_raw_client_info(&r, NULL, buf, sizeof(buf));
    cr_assert_gt(n, 0);
    CONF_OK(conf_raw_write(&r, buf, (size_t)n));
    struct conf_frame f;
    int rc = conf_raw_read(&r, CONF_IO_TIMEOUT_MS, &f);
    conf_raw_close(&r);
    cr_assert(rc == -ESHUTDOWN || rc == -ECONNRESET, "%s: not closed after ClientInfo (%d, %s)",
              what, rc, rc == 0 && f.type == DERP_FRAME_SERVER_INFO ? "got ServerInfo" : "");
}

/* SIGHUP to the server's PID, then wait (bounded) until the log says text once more. Once the
 * line is there every shard's swap is queued, and it runs before the shard reads our next
 * ClientInfo (the upgrade before it takes the shard at least one more tick). */
static void reload_and_wait(const char *text)
{
    unsigned before = conf_log_count(&srv, text);
    cr_assert_eq(kill(srv.pid, SIGHUP), 0);
    int64_t end = conf_now_ms() + LOG_WAIT_MS;
    while (conf_log_count(&srv, text) == before && conf_now_ms() < end)
        usleep(20 * 1000);
    if (conf_log_count(&srv, text) == before)
        conf_server_dump_log(&srv);
    cr_assert_gt(conf_log_count(&srv, text), before, "no \"%s\" in the log after SIGHUP", text);
}

Test(test_conformance_allow, listed_key_logs_in_other_is_closed_mesh_exempt)
{
    struct derp_keypair ka, kb, km;
    CONF_OK(derp_keypair_generate(&ka));
    CONF_OK(derp_keypair_generate(&kb));
    CONF_OK(derp_keypair_generate(&km));
    char a[80], text[400];
    key_text(&ka, true, a, sizeof(a));
    /* Comments, blank lines, CRLF, white space, a duplicate: one key. */
    snprintf(text, sizeof(text), "# the allowed nodes\r\n\r\n  %s   # node a\r\n%s\n", a, a);
    write_list(text);
    server_up(NULL);
    cr_assert_eq(conf_log_count(&srv, "loaded 1 keys"), 1, "the list is not one key");
    admitted(&ka, NULL, "listed key");
    refused(&kb, "unlisted key");
    CONF_OK(conf_varz_wait(&srv, "hderp_allowlist_refused", 1, CONF_IO_TIMEOUT_MS, NULL));
    admitted(&km, MESH_JSON, "mesh peer with an unlisted key");
    cr_assert_eq(conf_varz_must(&srv, "hderp_allowlist_refused"), 1);
    cr_assert_eq(conf_varz_must(&srv, "hderp_admit_refused"), 0,
                 "the allow-list has its own counter");
    conf_server_stop_clean(&srv);
}

Test(test_conformance_allow, sighup_swaps_the_list_and_a_bad_file_keeps_it)
{
    struct derp_keypair ka, kb;
    CONF_OK(derp_keypair_generate(&ka));
    CONF_OK(derp_keypair_generate(&kb));
    char a[80], b[80], text[400];
    key_text(&ka, true, a, sizeof(a));
    key_text(&kb, false, b, sizeof(b)); /* bare hex */
    snprintf(text, sizeof(text), "%s\n", a);
    write_list(text);
    server_up(NULL);
    admitted(&ka, NULL, "a before the reload");
    refused(&kb, "b before the reload");

    snprintf(text, sizeof(text), "# a removed, b added\n%s\n", b);
    write_list(text);
    reload_and_wait("reloaded 1 keys");
    for (int i = 0; i < 4; i++) { /* both shards, whichever accepts */
        admitted(&kb, NULL, "b after the reload");
        refused(&ka, "a after the reload");
    }
    CONF_OK(conf_varz_wait(&srv, "hderp_allowlist_refused", 5, CONF_IO_TIMEOUT_MS, NULL));

    snprintf(text, sizeof(text), "%s\n# fine so far\nnodekey:not-a-key\n%s\n", b, a);
    write_list(text);
    reload_and_wait("reload failed, keeping the previous list");
    char want[400];
    snprintf(want, sizeof(want), "%s:3: not a node key", list);
    cr_assert_eq(conf_log_count(&srv, want), 1, "the reload error does not name %s:3", list);
    for (int i = 0; i < 4; i++) {
        admitted(&kb, NULL, "b after a bad reload");
        refused(&ka, "a after a bad reload");
    }
    CONF_OK(conf_varz_wait(&srv, "hderp_allowlist_refused", 9, CONF_IO_TIMEOUT_MS, NULL));
    conf_server_stop_clean(&srv);
}

/* An unlisted key is refused by the list without a controller request; a listed one then goes
 * to the controller (here unreachable and fail-closed, so refused by admission). */
Test(test_conformance_allow, checked_before_verify_client_url)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0); /* a port nobody listens on */
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
    close(fd);
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/verify", ntohs(sa.sin_port));
    struct derp_keypair ka, kb;
    CONF_OK(derp_keypair_generate(&ka));
    CONF_OK(derp_keypair_generate(&kb));
    char a[80], text[200];
    key_text(&ka, true, a, sizeof(a));
    snprintf(text, sizeof(text), "%s\n", a);
    write_list(text);
    const char *more[] = {"-verify-client-url", url, "-verify-client-url-fail-open=false", NULL};
    server_up(more);
    refused(&kb, "unlisted key");
    CONF_OK(conf_varz_wait(&srv, "hderp_allowlist_refused", 1, CONF_IO_TIMEOUT_MS, NULL));
    cr_assert_eq(conf_varz_must(&srv, "hderp_admit_errors"), 0,
                 "an unlisted key reached the controller");
    refused(&ka, "listed key, controller unreachable (fail closed)");
    CONF_OK(conf_varz_wait(&srv, "hderp_admit_refused", 1, CONF_IO_TIMEOUT_MS, NULL));
    cr_assert_eq(conf_varz_must(&srv, "hderp_admit_errors"), 1);
    cr_assert_eq(conf_varz_must(&srv, "hderp_allowlist_refused"), 1);
    conf_server_stop_clean(&srv);
}

/* Runs hderp-server with a broken list: it must exit non-zero (bounded) and name file:line. */
Test(test_conformance_allow, bad_file_at_start_up_refuses_to_start)
{
    write_list("# line 1\n\n"
               "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n"
               "nodekey:0123\n");
    char log[300];
    snprintf(log, sizeof(log), "%s/start.log", dir);
    const char *argv[] = {CONF_BIN_DIR "/hderp-server",
                          "-dev",
                          "-a",
                          "127.0.0.1:0",
                          "-stun=false",
                          "--shards",
                          "1",
                          "-allow-keys",
                          list,
                          NULL};
    int status = 0;
    int rc = conf_run(argv, log, CONF_START_TIMEOUT_MS, &status); /* if it started: killed */
    cr_assert(rc == 0 || rc == -ETIMEDOUT, "spawn %s: %s", argv[0], strerror(-rc));
    cr_assert_eq(rc, 0, "hderp-server kept running with a broken --allow-keys file");
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) != 0, "exit status %d", status);
    FILE *f = fopen(log, "r");
    cr_assert_not_null(f);
    char line[1024], want[400];
    snprintf(want, sizeof(want), "%s:4: not a node key", list);
    bool seen = false;
    while (!seen && fgets(line, sizeof(line), f))
        seen = strstr(line, want) != NULL;
    fclose(f);
    cr_assert(seen, "no \"%s\" in the start-up error", want);
}
