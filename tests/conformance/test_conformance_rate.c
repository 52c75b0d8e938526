/* test_conformance_rate.c - spec §14 row 29, §6.9 -rate-config against a real hderp-server:
 * a client sending 2 MiB at a 256 KiB/s limit is paced (its receiver needs at least
 * (bytes - burst) / rate, less 20%), nothing is dropped or reordered; a second pair sending
 * within its burst at the same time is done long before; a mesh client never waits; the metrics
 * exist only with a config file; a bad file stops the server at start with a message naming it;
 * SIGHUP re-reads the file for the connections already there (a bad one keeps the old limit).
 * Raw blocking clients; the paced flow's sender and receiver have a thread each. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "conf_support.h"

#define MESH_HEX  "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
#define MESH_JSON "{\"meshKey\":\"" MESH_HEX "\",\"version\":2,\"CanAckPings\":false}"

#define RATE       (256 * 1024) /* bytes a second */
#define BURST      65568        /* the floor (spec §6.9) */
#define BIG_PKTS   32           /* of DERP_PACKET_LEN_MAX: 2 MiB */
#define SMALL_PKTS 20           /* of SMALL_LEN, 21 KiB: within one burst */
#define SMALL_LEN  1024
/* What the limiter charges for one big SendPacket: its payload (key + packet). */
#define BIG_COST (DERP_KEY_LEN + DERP_PACKET_LEN_MAX)
#define EXIT_MS  15000 /* a refused start exits at once; this only guards a hang */

static struct conf_server srv;
static char cfg_path[300];

static void down(void)
{
    conf_server_down(&srv);
}

TestSuite(test_conformance_rate, .fini = down, .timeout = 180);

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "%s: %s", path, strerror(errno));
    fputs(text, f);
    cr_assert_eq(fclose(f), 0);
}

/* A config file in a fresh directory (cfg_path). */
static void config(const char *json)
{
    mkdir(CONF_WORK_DIR, 0755);
    char dir[256];
    snprintf(dir, sizeof(dir), "%s/rate-XXXXXX", CONF_WORK_DIR);
    cr_assert_not_null(mkdtemp(dir));
    snprintf(cfg_path, sizeof(cfg_path), "%s/rate.json", dir);
    write_file(cfg_path, json);
}

static void server_up(void)
{
    const char *extra[] = {"-rate-config", cfg_path, NULL};
    CONF_OK(conf_server_start(
        &srv, &(struct conf_server_opts){.mesh_key_hex = MESH_HEX, .extra = extra}));
}

/* ---------------------------------------------------------------- the paced flow */

/* A sends BIG_PKTS packets (sequence number in the first 4 bytes) to B; B checks each one. */
struct flow {
    struct conf_raw *a, *b;
    unsigned pkts;
    int send_rc, recv_rc;
    _Atomic unsigned got;
    bool bad; /* wrong source, size or order */
    int64_t done_ms;
};

static void *flow_send(void *arg)
{
    struct flow *fl = arg;
    static uint8_t pkt[DERP_PACKET_LEN_MAX];
    for (unsigned i = 0; i < fl->pkts && fl->send_rc == 0; i++) {
        memset(pkt, (int)(i & 0xff), sizeof(pkt));
        memcpy(pkt, &i, sizeof(i));
        fl->send_rc = conf_raw_send_packet(fl->a, &fl->b->kp.pub, pkt, sizeof(pkt));
    }
    return NULL;
}

static void *flow_recv(void *arg)
{
    struct flow *fl = arg;
    for (unsigned i = 0; i < fl->pkts && fl->recv_rc == 0; i++) {
        struct derp_pubkey src;
        const uint8_t *data;
        size_t len;
        /* One packet every 250 ms at the limit: the I/O timeout only guards a hang. */
        fl->recv_rc = conf_raw_read_packet(fl->b, CONF_IO_TIMEOUT_MS, &src, &data, &len);
        if (fl->recv_rc != 0)
            break;
        unsigned seq;
        memcpy(&seq, data, sizeof(seq));
        if (!derp_pubkey_equal(&src, &fl->a->kp.pub) || len != DERP_PACKET_LEN_MAX || seq != i ||
            data[len - 1] != (uint8_t)(i & 0xff))
            fl->bad = true;
        atomic_store(&fl->got, i + 1);
    }
    fl->done_ms = conf_now_ms();
    return NULL;
}

/* C sends n small packets to D, one round trip at a time. */
static void small_exchange(struct conf_raw *c, struct conf_raw *d, unsigned n)
{
    uint8_t pkt[SMALL_LEN];
    for (unsigned i = 0; i < n; i++) {
        memset(pkt, (int)i, sizeof(pkt));
        CONF_OK(conf_raw_send_packet(c, &d->kp.pub, pkt, sizeof(pkt)));
        struct derp_pubkey src;
        const uint8_t *data;
        size_t len;
        CONF_OK(conf_raw_read_packet(d, CONF_IO_TIMEOUT_MS, &src, &data, &len));
        cr_assert(derp_pubkey_equal(&src, &c->kp.pub));
        cr_assert(len == SMALL_LEN && data[0] == (uint8_t)i && data[len - 1] == (uint8_t)i,
                  "small packet %u", i);
    }
}

/* Starts A -> B (threads), returns when the flow is paced (B has its first two packets: the
 * burst is spent); the caller joins. */
static void flow_start(struct flow *fl, pthread_t th[2])
{
    cr_assert_eq(pthread_create(&th[1], NULL, flow_recv, fl), 0);
    cr_assert_eq(pthread_create(&th[0], NULL, flow_send, fl), 0);
    for (int64_t end = conf_now_ms() + 2 * CONF_IO_TIMEOUT_MS;
         atomic_load(&fl->got) < 2 && fl->recv_rc == 0 && conf_now_ms() < end;)
        usleep(10 * 1000);
}

static void flow_join(struct flow *fl, pthread_t th[2])
{
    pthread_join(th[0], NULL);
    pthread_join(th[1], NULL);
    cr_assert_eq(fl->send_rc, 0, "sender: %s", strerror(-fl->send_rc));
    cr_assert_eq(fl->recv_rc, 0, "receiver: %s after %u packets", strerror(-fl->recv_rc),
                 atomic_load(&fl->got));
    cr_assert(!fl->bad, "a packet arrived from the wrong source, cut or out of order");
}

/* The time a limit of rate bytes/s with burst forces on n frames of cost bytes, less 20%
 * (the first frames ride the burst; timers and scheduling only make it longer). */
static int64_t floor_ms(unsigned n, int64_t cost, int64_t rate, int64_t burst)
{
    return (int64_t)((double)(n * cost - burst) * 1000.0 / (double)rate * 0.8);
}

Test(test_conformance_rate, paced_not_dropped_others_unaffected_mesh_exempt)
{
    char json[128];
    snprintf(json, sizeof(json),
             "{\"PerClientRateLimitBytesPerSec\": %d, \"PerClientRateBurstBytes\": 1000}\n", RATE);
    config(json); /* a burst under the floor is raised to 65568 */
    server_up();
    cr_assert_eq(conf_varz_must(&srv, "derp_rate_limit_per_client_bytes_per_second"), RATE);
    cr_assert_eq(conf_varz_must(&srv, "derp_rate_limit_per_client_burst_bytes"), BURST);
    cr_assert_eq(conf_varz_must(&srv, "derp_rate_limit_per_client_waited"), 0);

    struct conf_raw a, b, c, d;
    CONF_OK(conf_raw_login(&a, &srv, NULL, NULL));
    CONF_OK(conf_raw_login(&b, &srv, NULL, NULL));
    CONF_OK(conf_raw_login(&c, &srv, NULL, NULL));
    CONF_OK(conf_raw_login(&d, &srv, NULL, NULL));
    struct flow fl = {.a = &a, .b = &b, .pkts = BIG_PKTS};
    pthread_t th[2];
    int64_t t0 = conf_now_ms();
    flow_start(&fl, th);
    /* Meanwhile C -> D, within C's own burst: all of it arrives while A is still paced. */
    small_exchange(&c, &d, SMALL_PKTS);
    unsigned got_then = atomic_load(&fl.got);
    flow_join(&fl, th);
    cr_assert_lt(got_then, BIG_PKTS, "the small pair finished only after the paced flow (%u)",
                 got_then);
    int64_t took = fl.done_ms - t0, min = floor_ms(BIG_PKTS, BIG_COST, RATE, BURST);
    cr_assert_geq(took, min, "2 MiB at %d B/s took %lld ms (at least %lld)", RATE, (long long)took,
                  (long long)min);
    int64_t waited = conf_varz_must(&srv, "derp_rate_limit_per_client_waited");
    cr_assert(waited > 0 && waited <= BIG_PKTS, "waited %lld", (long long)waited);
    int64_t dropped = -1;
    CONF_OK(conf_varz(&srv, "derp_packets_dropped", true, &dropped));
    cr_assert_eq(dropped, 0, "paced, not dropped");

    /* A mesh client sends as much again: it never waits. One packet at a time, so that the
     * receiver's queues never overflow. */
    struct conf_raw m, e;
    CONF_OK(conf_raw_login(&m, &srv, NULL, MESH_JSON));
    CONF_OK(conf_raw_login(&e, &srv, NULL, NULL));
    static uint8_t pkt[DERP_PACKET_LEN_MAX];
    for (unsigned i = 0; i < BIG_PKTS; i++) {
        memset(pkt, (int)i, sizeof(pkt));
        CONF_OK(conf_raw_send_packet(&m, &e.kp.pub, pkt, sizeof(pkt)));
        struct derp_pubkey src;
        const uint8_t *data;
        size_t len;
        CONF_OK(conf_raw_read_packet(&e, CONF_IO_TIMEOUT_MS, &src, &data, &len));
        cr_assert(len == sizeof(pkt) && data[len - 1] == (uint8_t)i, "mesh packet %u", i);
    }
    cr_assert_eq(conf_varz_must(&srv, "derp_rate_limit_per_client_waited"), waited,
                 "the mesh client waited");
    CONF_OK(conf_raw_ping_pong(&a, 1, CONF_IO_TIMEOUT_MS)); /* the paced client is fine */
    conf_raw_close(&a);
    conf_raw_close(&b);
    conf_raw_close(&c);
    conf_raw_close(&d);
    conf_raw_close(&m);
    conf_raw_close(&e);
    conf_server_stop_clean(&srv);
}

/* N = 0: no limit, but the metrics are there (a config file is set); without a file they are
 * not. */
Test(test_conformance_rate, zero_is_off_and_metrics_only_with_a_file)
{
    config("{\"PerClientRateLimitBytesPerSec\": 0, \"PerClientRateBurstBytes\": 0}");
    server_up();
    cr_assert_eq(conf_varz_must(&srv, "derp_rate_limit_per_client_bytes_per_second"), 0);
    struct conf_raw a, b;
    CONF_OK(conf_raw_login(&a, &srv, NULL, NULL));
    CONF_OK(conf_raw_login(&b, &srv, NULL, NULL));
    static uint8_t pkt[DERP_PACKET_LEN_MAX];
    for (unsigned i = 0; i < 8; i++) {
        CONF_OK(conf_raw_send_packet(&a, &b.kp.pub, pkt, sizeof(pkt)));
        struct derp_pubkey src;
        const uint8_t *data;
        size_t len;
        CONF_OK(conf_raw_read_packet(&b, CONF_IO_TIMEOUT_MS, &src, &data, &len));
    }
    cr_assert_eq(conf_varz_must(&srv, "derp_rate_limit_per_client_waited"), 0);
    conf_raw_close(&a);
    conf_raw_close(&b);
    conf_server_stop_clean(&srv);

    CONF_OK(conf_server_start(&srv, NULL));
    int64_t v;
    cr_assert_eq(conf_varz(&srv, "derp_rate_limit_per_client_waited", false, &v), -ENOENT);
    cr_assert_eq(conf_varz(&srv, "derp_rate_limit_per_client_bytes_per_second", false, &v),
                 -ENOENT);
    conf_server_stop_clean(&srv);
}

/* A client closing while it waits for tokens, and a server stopping while another one waits:
 * both clean (the waiting client's timer goes with it). */
Test(test_conformance_rate, close_and_stop_while_paused)
{
    config("{\"PerClientRateLimitBytesPerSec\": 65536}");
    server_up();
    struct conf_raw x, y, z;
    CONF_OK(conf_raw_login(&x, &srv, NULL, NULL));
    CONF_OK(conf_raw_login(&y, &srv, NULL, NULL));
    CONF_OK(conf_raw_login(&z, &srv, NULL, NULL));
    static uint8_t pkt[DERP_PACKET_LEN_MAX];
    for (unsigned i = 0; i < 4; i++) { /* a burst's worth, then a second or more each */
        CONF_OK(conf_raw_send_packet(&x, &y.kp.pub, pkt, sizeof(pkt)));
        CONF_OK(conf_raw_send_packet(&z, &y.kp.pub, pkt, sizeof(pkt)));
    }
    int64_t last = -1;
    CONF_OK(
        conf_varz_wait(&srv, "derp_rate_limit_per_client_waited", 2, CONF_IO_TIMEOUT_MS, &last));
    conf_raw_abort(&x);
    CONF_OK(conf_varz_wait(&srv, "derp_current_connections", 2, CONF_IO_TIMEOUT_MS, &last));
    CONF_OK(conf_raw_ping_pong(&y, 3, CONF_IO_TIMEOUT_MS));
    conf_server_stop_clean(&srv); /* z still waits for its tokens */
    conf_raw_close(&y);
    conf_raw_close(&z);
}

/* ---------------------------------------------------------------- SIGHUP */

static void reload(const char *json, const char *gauge, int64_t want)
{
    write_file(cfg_path, json);
    cr_assert_eq(kill(srv.pid, SIGHUP), 0);
    int64_t last = -1;
    int rc = conf_varz_wait(&srv, gauge, want, CONF_IO_TIMEOUT_MS, &last);
    cr_assert_eq(rc, 0, "after SIGHUP %s is %lld, not %lld", gauge, (long long)last,
                 (long long)want);
}

/* The file is read again on SIGHUP and applies to connections already there: a lower rate
 * paces them at once, a bad file changes nothing, N = 0 releases a client that is waiting. */
Test(test_conformance_rate, sighup_reload_applies_to_existing_connections)
{
    char json[128];
    snprintf(json, sizeof(json), "{\"PerClientRateLimitBytesPerSec\": %d}", RATE);
    config(json);
    server_up();
    struct conf_raw a, b;
    CONF_OK(conf_raw_login(&a, &srv, NULL, NULL));
    CONF_OK(conf_raw_login(&b, &srv, NULL, NULL));

    /* 64 KiB/s: 8 big packets need ~7 s (they would need ~1.75 s at the old rate). */
    reload("{\"PerClientRateLimitBytesPerSec\": 65536, \"PerClientRateBurstBytes\": 0}",
           "derp_rate_limit_per_client_bytes_per_second", 65536);
    struct flow fl = {.a = &a, .b = &b, .pkts = 8};
    pthread_t th[2];
    int64_t t0 = conf_now_ms();
    flow_start(&fl, th);
    flow_join(&fl, th);
    int64_t took = fl.done_ms - t0, min = floor_ms(8, BIG_COST, 65536, BURST);
    cr_assert_geq(took, min, "after the reload 512 KiB took %lld ms (at least %lld)",
                  (long long)took, (long long)min);

    /* A bad file: logged, the limit stays. */
    write_file(cfg_path, "{\"PerClientRateLimitBytesPerSec\": \"fast\"}");
    cr_assert_eq(kill(srv.pid, SIGHUP), 0);
    cr_assert(conf_log_wait(&srv, "reload failed, keeping the previous limit", CONF_IO_TIMEOUT_MS),
              "no log line");
    cr_assert(conf_server_alive(&srv));
    cr_assert_eq(conf_varz_must(&srv, "derp_rate_limit_per_client_bytes_per_second"), 65536);

    /* 32 KiB/s: every big packet after the first waits 2 s. Once B has two, N = 0: the frame
     * waiting then goes within a second and no later frame waits. */
    reload("{\"PerClientRateLimitBytesPerSec\": 32768}",
           "derp_rate_limit_per_client_bytes_per_second", 32768);
    struct flow f2 = {.a = &a, .b = &b, .pkts = 6};
    flow_start(&f2, th);
    reload("{\"PerClientRateLimitBytesPerSec\": 0}", "derp_rate_limit_per_client_bytes_per_second",
           0);
    int64_t waited = conf_varz_must(&srv, "derp_rate_limit_per_client_waited");
    flow_join(&f2, th);
    cr_assert_eq(conf_varz_must(&srv, "derp_rate_limit_per_client_waited"), waited,
                 "frames waited after the limit was turned off");
    conf_raw_close(&a);
    conf_raw_close(&b);
    conf_server_stop_clean(&srv);
}

/* ---------------------------------------------------------------- bad files */

/* §9: a config whose rate is 0 is no limit, and derper then applies (and publishes) an empty
 * one: rate and burst both 0, not the burst raised to its floor. */
Test(test_conformance_rate, rate_zero_publishes_an_empty_config)
{
    config("{\"PerClientRateLimitBytesPerSec\": 0, \"PerClientRateBurstBytes\": 1000}\n");
    server_up();
    cr_assert_eq(conf_varz_must(&srv, "derp_rate_limit_per_client_bytes_per_second"), 0);
    cr_assert_eq(conf_varz_must(&srv, "derp_rate_limit_per_client_burst_bytes"), 0);
    cr_assert_eq(conf_varz_must(&srv, "derp_rate_limit_per_client_waited"), 0);
    conf_server_stop_clean(&srv);
}

/* Runs hderp-server with -rate-config path; returns its exit status, its output in out. */
static int run_refused(const char *path, char *out, size_t size)
{
    char log[320];
    snprintf(log, sizeof(log), "%s/rate-refused-%d.log", CONF_WORK_DIR, (int)getpid());
    const char *argv[] = {CONF_BIN_DIR "/hderp-server",
                          "-dev",
                          "-a",
                          "127.0.0.1:0",
                          "-stun=false",
                          "-rate-config",
                          path,
                          NULL};
    int status = 0;
    int rc = conf_run(argv, log, EXIT_MS, &status); /* if it started: killed, fails below */
    cr_assert(rc == 0 || rc == -ETIMEDOUT, "spawn %s: %s", argv[0], strerror(-rc));
    FILE *f = fopen(log, "r");
    size_t n = f ? fread(out, 1, size - 1, f) : 0;
    out[n] = '\0';
    if (f)
        fclose(f);
    return rc == 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void refused(const char *json, const char *want)
{
    config(json);
    char out[4096];
    int st = run_refused(cfg_path, out, sizeof(out));
    cr_assert_eq(st, 1, "exit status %d for %s; output:\n%s", st, json, out);
    cr_assert_not_null(strstr(out, cfg_path), "the message names the file:\n%s", out);
    cr_assert_not_null(strstr(out, want), "the message says \"%s\":\n%s", want, out);
}

Test(test_conformance_rate, bad_file_refuses_to_start)
{
    refused("{\"PerClientRateLimitBytesPerSec\": -1}", "PerClientRateLimitBytesPerSec");
    refused("{\"PerClientRateBurstBytes\": \"lots\"}", "PerClientRateBurstBytes");
    refused("{\"PerClientRateLimitBytesPerSec\": 1.5}", "PerClientRateLimitBytesPerSec");
    refused("[100, 200]", "JSON object");
    refused("{\"PerClientRateLimitBytesPerSec\": 100,", "not valid JSON");
    char out[4096], missing[320];
    snprintf(missing, sizeof(missing), "%s/no-such-dir/rate.json", CONF_WORK_DIR);
    cr_assert_eq(run_refused(missing, out, sizeof(out)), 1, "%s", out);
    cr_assert_not_null(strstr(out, missing), "%s", out);
}
