/* test_conformance_placement.c - placement (docs/ARCHITECTURE.md "Placement policy") against a
 * real hderp-server with 2 shards: two clients on different shards that send to each other
 * end up on one shard (hderp_placement_moves), and every packet is delivered exactly once, in
 * order, while that happens, while a third client sends to both, while one side reconnects
 * and while a duplicate connection calls the moved one home; PeerGone still reaches the
 * correspondent of a moved client, and --placement=false moves nobody. Raw blocking clients on the
 * test thread, strict turns, so a lost, repeated or misrouted packet is a named failure. Over TLS,
 * hderp-echo's ping and echo (the DERP client library) on keys of different shards: the record
 * codec moves with the connection and every echo comes back. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include "conf_support.h"

#define SHARDS   2
#define QUIET_MS 300
/* Packets each way per exchange: well past the server's SRV_PLACE_PACKETS (64). */
#define ROUNDS 200

static struct conf_server srv;
/* Placement alone: packing (on by default; test_conformance_pack) would move the pairs on. */
static const char *const no_pack[] = {"--pack=false", NULL};

static void up(void)
{
    cr_assert_eq(
        conf_server_start(&srv, &(struct conf_server_opts){.shards = SHARDS, .extra = no_pack}), 0);
}

static void down(void)
{
    conf_server_down(&srv);
}

TestSuite(test_conformance_placement, .init = up, .fini = down, .timeout = 120);

/* One packet from -> to carrying tag and n; the next data frame `to` reads must be it. */
static void hop(struct conf_raw *from, struct conf_raw *to, const char *tag, int n)
{
    char msg[64], want[64];
    int len = snprintf(msg, sizeof(msg), "%s %d", tag, n);
    memcpy(want, msg, (size_t)len + 1);
    CONF_OK(conf_raw_send_packet(from, &to->kp.pub, msg, (size_t)len));
    struct derp_pubkey src;
    const uint8_t *data;
    size_t got;
    int rc = conf_raw_read_packet(to, CONF_IO_TIMEOUT_MS, &src, &data, &got);
    cr_assert_eq(rc, 0, "%s: no packet (%d)", want, rc);
    cr_assert(derp_pubkey_equal(&src, &from->kp.pub), "%s: wrong source", want);
    cr_assert(got == (size_t)len && memcmp(data, want, got) == 0, "got %.*s, want %s", (int)got,
              data, want);
}

static void exchange(struct conf_raw *a, struct conf_raw *b, const char *tag)
{
    char ta[32], tb[32];
    snprintf(ta, sizeof(ta), "%s a2b", tag);
    snprintf(tb, sizeof(tb), "%s b2a", tag);
    for (int i = 0; i < ROUNDS; i++) {
        hop(a, b, ta, i);
        hop(b, a, tb, i);
    }
}

static void expect_silence(struct conf_raw *r, const char *who)
{
    struct conf_frame f = {0};
    int rc = conf_raw_expect_silence(r, QUIET_MS, &f);
    cr_assert_eq(rc, 0, "%s: rc %d, unexpected frame type %u", who, rc, f.type);
}

static int64_t moves(void)
{
    int64_t v = -1;
    CONF_OK(conf_varz(&srv, "hderp_placement_moves", false, &v));
    return v;
}

Test(test_conformance_placement, pair_moves_third_sends_reconnect_dup)
{
    struct conf_raw a, b, c, a2;
    struct derp_keypair ka, kb, kc;
    int64_t last = -1;
    conf_login_on_shard(&a, &srv, &ka, 0, SHARDS);
    conf_login_on_shard(&b, &srv, &kb, 1, SHARDS);
    conf_login_on_shard(&c, &srv, &kc, 0, SHARDS);
    if (memcmp(kb.pub.bytes, ka.pub.bytes, DERP_KEY_LEN) < 0) { /* A: the side that moves */
        struct conf_raw tr = a;
        a = b, b = tr;
        struct derp_keypair tk = ka;
        ka = kb, kb = tk;
    }
    exchange(&a, &b, "first");
    cr_assert_eq(moves(), 1, "one side of the pair moved (moves %lld)", (long long)moves());
    expect_silence(&a, "A");
    expect_silence(&b, "B");
    /* A third client sends to both (one of them is a guest now, the other at home). */
    for (int i = 0; i < 20; i++) {
        hop(&c, &a, "c2a", i);
        hop(&c, &b, "c2b", i);
    }
    exchange(&a, &b, "again");
    /* A duplicate for A's key: the newest is active, the first one (a guest) goes home. */
    CONF_OK(conf_raw_login(&a2, &srv, &ka, NULL));
    for (int i = 0; i < ROUNDS; i++) {
        hop(&b, &a2, "b2a2", i);
        hop(&a2, &b, "a22b", i);
    }
    expect_silence(&a, "the inactive duplicate");
    hop(&a, &b, "old a writes", 0); /* lastWriterIsActive: the old one receives again */
    hop(&b, &a, "b2old", 0);
    expect_silence(&a2, "the now inactive duplicate");
    conf_raw_close(&a2);
    /* B reconnects (same key, after its first connection has gone). */
    conf_raw_close(&b);
    CONF_OK(conf_varz_wait(&srv, "derp_current_connections", 2, CONF_IO_TIMEOUT_MS, &last));
    CONF_OK(conf_raw_login(&b, &srv, &kb, NULL));
    exchange(&a, &b, "reconnected");
    hop(&c, &a, "c2a after", 0);
    hop(&c, &b, "c2b after", 0);
    /* B leaves: A, which received from it, hears PeerGone; C never did. */
    conf_raw_close(&b);
    struct conf_frame f;
    CONF_OK(conf_raw_read_nka(&a, CONF_IO_TIMEOUT_MS, &f));
    cr_assert_eq(f.type, DERP_FRAME_PEER_GONE, "A got frame type %u", f.type);
    cr_assert_eq(memcmp(f.p, kb.pub.bytes, DERP_KEY_LEN), 0);
    expect_silence(&c, "C (it only sent to B)");
    conf_raw_close(&a);
    conf_raw_close(&c);
    CONF_OK(conf_varz_wait(&srv, "derp_current_connections", 0, CONF_IO_TIMEOUT_MS, &last));
    CONF_OK(conf_varz_wait(&srv, "derp_clients_total", 0, CONF_IO_TIMEOUT_MS, &last));
    conf_server_stop_clean(&srv);
}

/* --placement=false: the same pair never moves, and still talks. */
Test(test_conformance_placement, off_never_moves)
{
    conf_server_down(&srv);
    const char *extra[] = {"--placement=false", NULL};
    cr_assert_eq(
        conf_server_start(&srv, &(struct conf_server_opts){.shards = SHARDS, .extra = extra}), 0);
    struct conf_raw a, b;
    struct derp_keypair ka, kb;
    conf_login_on_shard(&a, &srv, &ka, 0, SHARDS);
    conf_login_on_shard(&b, &srv, &kb, 1, SHARDS);
    exchange(&a, &b, "off");
    cr_assert_eq(moves(), 0);
    conf_raw_close(&a);
    conf_raw_close(&b);
    conf_server_stop_clean(&srv);
}

/* A derper key file for kp (what hderp-echo --key-file reads). */
static void write_key_file(const char *path, const struct derp_keypair *kp)
{
    char text[DERP_PRIVKEY_TEXT_SIZE];
    derp_privkey_format(&kp->priv, text);
    FILE *f = fopen(path, "w");
    cr_assert(f != NULL, "%s", path);
    fprintf(f, "{\"PrivateKey\": \"%s\"}\n", text);
    fclose(f);
}

extern char **environ;

/* argv[0] started with stdout and stderr to log: its PID. */
static pid_t spawn_logged(const char *const *argv, const char *log)
{
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    pid_t pid = 0;
    int rc = posix_spawn(&pid, argv[0], &fa, NULL, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    cr_assert_eq(rc, 0, "spawn %s: %s", argv[0], strerror(rc));
    return pid;
}

/* Over TLS: hderp-echo echo on a key of shard echo_shard, ping on one of ping_shard, 400 pings
 * of 1,200 B; every echo must come back. The server runs with extra. */
static void tls_ping_echo(const char *const *extra, unsigned echo_shard, unsigned ping_shard)
{
    conf_server_down(&srv);
    cr_assert_eq(
        conf_server_start(
            &srv, &(struct conf_server_opts){.shards = SHARDS, .tls = true, .extra = extra}),
        0);
    struct derp_keypair ke, kp;
    CONF_OK(conf_keypair_on_shard(&ke, echo_shard, SHARDS));
    CONF_OK(conf_keypair_on_shard(&kp, ping_shard, SHARDS));
    char url[96], kef[300], kpf[300], elog[300], plog[300], peer[DERP_PUBKEY_TEXT_SIZE];
    snprintf(url, sizeof(url), "https://%s:%u/derp", CONF_TLS_HOSTNAME, srv.port);
    snprintf(kef, sizeof(kef), "%s/echo.key", srv.dir);
    snprintf(kpf, sizeof(kpf), "%s/ping.key", srv.dir);
    snprintf(elog, sizeof(elog), "%s/echo.log", srv.dir);
    snprintf(plog, sizeof(plog), "%s/ping.log", srv.dir);
    write_key_file(kef, &ke);
    write_key_file(kpf, &kp);
    derp_pubkey_format(&ke.pub, peer);
    const char *eargv[] = {CONF_BIN_DIR "/hderp-echo",
                           "echo",
                           "--server",
                           url,
                           "--ca",
                           srv.cert_file,
                           "--key-file",
                           kef,
                           NULL};
    pid_t echo = spawn_logged(eargv, elog);
    int rc;
    int64_t last = -1;
    rc = conf_varz_wait(&srv, "derp_current_connections", 1, CONF_IO_TIMEOUT_MS, &last);
    if (rc == 0) {
        const char *pargv[] = {CONF_BIN_DIR "/hderp-echo",
                               "ping",
                               "--server",
                               url,
                               "--ca",
                               srv.cert_file,
                               "--key-file",
                               kpf,
                               "--peer",
                               peer,
                               "--count",
                               "400",
                               "--warmup",
                               "0",
                               "--size",
                               "1200",
                               "--json",
                               NULL};
        int status = -1;
        rc = conf_run(pargv, plog, 60000, &status);
        if (rc == 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
            rc = -ECHILD;
    }
    kill(echo, SIGKILL);
    waitpid(echo, NULL, 0);
    cr_assert_eq(rc, 0, "echo up and ping run: %s (see %s, %s)", strerror(-rc), elog, plog);
    char out[4096] = "";
    FILE *f = fopen(plog, "r");
    cr_assert(f != NULL);
    size_t n = fread(out, 1, sizeof(out) - 1, f);
    out[n] = '\0';
    fclose(f);
    cr_assert(strstr(out, "\"received\":400,") && strstr(out, "\"lost\":0,") &&
                  strstr(out, "\"duplicated\":0,") && strstr(out, "\"misrouted\":0,"),
              "ping: %s", out);
}

Test(test_conformance_placement, tls_pair_moves_every_echo_back)
{
    tls_ping_echo(no_pack, 0, 1);
    cr_assert_eq(moves(), 1, "one side moved");
    conf_server_stop_clean(&srv);
}

/* Packing over TLS (water marks any load is under: it always packs): a pair on shard 1 goes
 * to shard 0 (both move; the record codec moves with each connection) and every echo comes
 * back. */
Test(test_conformance_placement, tls_pair_packs_every_echo_back)
{
    const char *const pack[] = {"--pack-low", "1000", "--pack-high", "1000", NULL};
    tls_ping_echo(pack, 1, 1);
    int64_t v = -1;
    CONF_OK(conf_varz(&srv, "hderp_placement_packs", false, &v));
    cr_assert_eq(v, 1, "one packing decision (packs %lld)", (long long)v);
    CONF_OK(conf_varz(&srv, "hderp_placement_moves", false, &v));
    cr_assert_eq(v, 2, "both moved (moves %lld)", (long long)v);
    conf_server_stop_clean(&srv);
}
