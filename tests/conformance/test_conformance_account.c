/* test_conformance_account.c - per-key accounting against a real hderp-server (2 shards): raw
 * clients relay different volumes to a sink and /debug/keys ranks them (top_bytes and
 * top_packets, in order, with exact counts once they closed: a closing connection feeds its
 * counts) and /debug/varz shows the same; a key named in -account-keys keeps its counters over
 * a reconnect, a key added to the file on SIGHUP is counted from its next login, an unnamed
 * key is never in "named"; with many more keys than the sketches hold, each shard's sketch
 * stays at its bound and the heavy key stays on top; after --account-window without a
 * connection a named key's counters start again; a client placed on its peer's shard keeps
 * exact counts; a file over the bound refuses to start. */
#include <criterion/criterion.h>
#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "conf_support.h"
#include "derp_keys.h"

#define SHARDS       2
#define WAIT_MS      10000 /* hang guard: closes and reloads take a tick or two */
#define SKETCH_MAX   128   /* SRV_ACCT_TOP_ENTRIES */
#define CHURN_KEYS   300   /* over SHARDS x SKETCH_MAX: both sketches must evict */
#define PAYLOAD_SIZE 1000

static struct conf_server srv;
static char dir[256], list[300];

static void suite_up(void)
{
    signal(SIGPIPE, SIG_IGN);
    mkdir(CONF_WORK_DIR, 0755);
    snprintf(dir, sizeof(dir), "%s/account-XXXXXX", CONF_WORK_DIR);
    cr_assert_not_null(mkdtemp(dir));
    snprintf(list, sizeof(list), "%s/account.keys", dir);
}

static void suite_down(void)
{
    conf_server_down(&srv);
}

TestSuite(test_conformance_account, .init = suite_up, .fini = suite_down, .timeout = 240);

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

static void server_up(bool with_list)
{
    const char *extra[] = {"--account-keys", list, NULL};
    cr_assert_eq(
        conf_server_start(
            &srv, &(struct conf_server_opts){.shards = SHARDS, .extra = with_list ? extra : NULL}),
        0);
}

static void key_text(const struct derp_pubkey *k, char out[DERP_PUBKEY_TEXT_SIZE])
{
    derp_pubkey_format(k, out);
}

/* GET /debug/keys, parsed (the caller json_decref's it). */
static json_t *keys_get(void)
{
    char *resp = malloc(CONF_HTTP_RESP_MAX);
    cr_assert_not_null(resp);
    ssize_t n = conf_http(&srv, "GET /debug/keys HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                          resp, CONF_HTTP_RESP_MAX);
    cr_assert_gt(n, 0);
    cr_assert_eq(strncmp(resp, "HTTP/1.1 200", 12), 0, "%.40s", resp);
    const char *body = strstr(resp, "\r\n\r\n");
    cr_assert_not_null(body);
    json_error_t err;
    json_t *j = json_loads(body + 4, 0, &err);
    cr_assert_not_null(j, "bad JSON: %s", err.text);
    free(resp);
    return j;
}

/* The entry of key k in list `name` of j and its index there (-1: absent). */
static json_t *entry_of(json_t *j, const char *name, const struct derp_pubkey *k, int *index)
{
    char t[DERP_PUBKEY_TEXT_SIZE];
    key_text(k, t);
    json_t *a = json_object_get(j, name);
    cr_assert(json_is_array(a), "no %s", name);
    for (size_t i = 0; i < json_array_size(a); i++) {
        json_t *e = json_array_get(a, i);
        if (strcmp(json_string_value(json_object_get(e, "key")), t) == 0) {
            if (index)
                *index = (int)i;
            return e;
        }
    }
    if (index)
        *index = -1;
    return NULL;
}

static int64_t field(json_t *e, const char *name)
{
    json_t *v = json_object_get(e, name);
    cr_assert(json_is_integer(v), "no integer %s", name);
    return json_integer_value(v);
}

/* Polls /debug/keys until key k's entry in list `name` has `what` == want; returns j. */
static json_t *wait_for(const char *name, const struct derp_pubkey *k, const char *what,
                        int64_t want)
{
    int64_t end = conf_now_ms() + WAIT_MS, last = -1;
    for (;;) {
        json_t *j = keys_get();
        json_t *e = entry_of(j, name, k, NULL);
        if (e && (last = field(e, what)) == want)
            return j;
        json_decref(j);
        if (conf_now_ms() > end)
            cr_assert_fail("%s: %s is %lld, want %lld", name, what, (long long)last,
                           (long long)want);
        conf_sleep_ms(20);
    }
}

/* n packets of PAYLOAD_SIZE from r to the sink, which reads them all. */
static void relay(struct conf_raw *r, struct conf_raw *sink, int n)
{
    static uint8_t payload[PAYLOAD_SIZE];
    for (int i = 0; i < n; i++) {
        CONF_OK(conf_raw_send_packet(r, &sink->kp.pub, payload, sizeof(payload)));
        struct derp_pubkey src;
        const uint8_t *data;
        size_t len;
        CONF_OK(conf_raw_read_packet(sink, CONF_IO_TIMEOUT_MS, &src, &data, &len));
        cr_assert_eq(len, sizeof(payload));
        cr_assert(derp_pubkey_equal(&src, &r->kp.pub));
    }
}

Test(test_conformance_account, top_talkers_ranked_with_exact_counts)
{
    server_up(false);
    enum { A = 60, B = 30, C = 10 }; /* packets each sender relays */
    struct conf_raw sink, ra, rb, rc;
    CONF_OK(conf_raw_login(&sink, &srv, NULL, NULL));
    CONF_OK(conf_raw_login(&ra, &srv, NULL, NULL));
    CONF_OK(conf_raw_login(&rb, &srv, NULL, NULL));
    CONF_OK(conf_raw_login(&rc, &srv, NULL, NULL));
    for (int round = 0; round < 10; round++) { /* interleaved, so no one is first by time */
        relay(&ra, &sink, A / 10);
        relay(&rb, &sink, B / 10);
        relay(&rc, &sink, C / 10);
    }
    struct derp_pubkey ka = ra.kp.pub, kb = rb.kp.pub, kc = rc.kp.pub, ks = sink.kp.pub;
    conf_raw_close(&ra);
    conf_raw_close(&rb);
    conf_raw_close(&rc);
    json_decref(wait_for("top_bytes", &ka, "bytes_received", A * PAYLOAD_SIZE));
    json_decref(wait_for("top_bytes", &kb, "bytes_received", B * PAYLOAD_SIZE));
    json_t *j = wait_for("top_bytes", &kc, "bytes_received", C * PAYLOAD_SIZE);
    const char *lists[] = {"top_bytes", "top_packets"};
    for (int l = 0; l < 2; l++) {
        int ia, ib, ic;
        json_t *ea = entry_of(j, lists[l], &ka, &ia), *eb = entry_of(j, lists[l], &kb, &ib);
        json_t *ec = entry_of(j, lists[l], &kc, &ic);
        cr_assert(ea && eb && ec, "%s lacks a sender", lists[l]);
        cr_assert(ia < ib && ib < ic, "%s: order %d %d %d", lists[l], ia, ib, ic);
        cr_assert_eq(field(ea, "packets_received"), A);
        cr_assert_eq(field(eb, "packets_received"), B);
        cr_assert_eq(field(ec, "packets_received"), C);
        cr_assert_eq(field(ea, "bytes_sent"), 0, "nothing was relayed to a sender");
        cr_assert_eq(field(ea, "error"), 0, "no evictions with 4 keys");
    }
    cr_assert_eq(field(entry_of(j, "top_bytes", &ka, NULL), "bytes"), A * PAYLOAD_SIZE);
    cr_assert_eq(field(entry_of(j, "top_packets", &ka, NULL), "packets"), A);
    json_decref(j);
    conf_raw_close(&sink); /* the sink's sent counts reach the tables at its close */
    j = wait_for("top_bytes", &ks, "bytes_sent", (A + B + C) * PAYLOAD_SIZE);
    int is;
    json_t *es = entry_of(j, "top_bytes", &ks, &is);
    cr_assert_eq(is, 0, "the sink relayed the most");
    cr_assert_eq(field(es, "packets_sent"), A + B + C);
    cr_assert_eq(field(es, "bytes_received"), 0);
    json_decref(j);
    /* /debug/varz: the same figures. */
    char t[DERP_PUBKEY_TEXT_SIZE], name[256];
    key_text(&ks, t);
    snprintf(name, sizeof(name),
             "hderp_top_key_bytes{by=\"bytes\",rank=\"1\",key=\"%s\",dir=\"sent\"}", t);
    int64_t v = -1;
    CONF_OK(conf_varz(&srv, name, false, &v));
    cr_assert_eq(v, (A + B + C) * PAYLOAD_SIZE);
    key_text(&ka, t);
    snprintf(name, sizeof(name),
             "hderp_top_key_packets{by=\"packets\",rank=\"2\",key=\"%s\",dir=\"received\"}", t);
    CONF_OK(conf_varz(&srv, name, false, &v));
    cr_assert_eq(v, A);
    CONF_OK(conf_varz(&srv, "hderp_account_tracked_keys", false, &v));
    cr_assert_eq(v, 4);
    conf_server_stop_clean(&srv);
}

Test(test_conformance_account, named_key_survives_reconnect_and_reload)
{
    struct derp_keypair kn, km;
    CONF_OK(derp_keypair_generate(&kn));
    CONF_OK(derp_keypair_generate(&km));
    char n[DERP_PUBKEY_TEXT_SIZE], m[DERP_PUBKEY_TEXT_SIZE], text[400];
    key_text(&kn.pub, n);
    key_text(&km.pub, m);
    snprintf(text, sizeof(text), "# accounted\n%s\n", n);
    write_list(text);
    server_up(true);
    struct conf_raw sink, r;
    CONF_OK(conf_raw_login(&sink, &srv, NULL, NULL));
    CONF_OK(conf_raw_login(&r, &srv, &kn, NULL));
    relay(&r, &sink, 5);
    conf_raw_close(&r);
    json_t *j = wait_for("named", &kn.pub, "packets_received", 5);
    json_t *e = entry_of(j, "named", &kn.pub, NULL);
    cr_assert_eq(field(e, "bytes_received"), 5 * PAYLOAD_SIZE);
    cr_assert_eq(field(e, "connects"), 1);
    json_decref(j);
    json_decref(wait_for("named", &kn.pub, "connections", 0));

    CONF_OK(conf_raw_login(&r, &srv, &kn, NULL)); /* the same key again: counters go on */
    json_decref(wait_for("named", &kn.pub, "connections", 1));
    relay(&r, &sink, 3);
    conf_raw_close(&r);
    j = wait_for("named", &kn.pub, "packets_received", 8);
    e = entry_of(j, "named", &kn.pub, NULL);
    cr_assert_eq(field(e, "bytes_received"), 8 * PAYLOAD_SIZE);
    cr_assert_eq(field(e, "connects"), 2);
    cr_assert_null(entry_of(j, "named", &sink.kp.pub, NULL), "an unnamed key is in \"named\"");
    json_decref(j);

    /* km is not named yet: its traffic is not in "named"; after SIGHUP its next login is. */
    CONF_OK(conf_raw_login(&r, &srv, &km, NULL));
    relay(&r, &sink, 2);
    conf_raw_close(&r);
    json_decref(wait_for("top_bytes", &km.pub, "packets_received", 2));
    j = keys_get();
    cr_assert_null(entry_of(j, "named", &km.pub, NULL));
    json_decref(j);
    snprintf(text, sizeof(text), "%s\n%s\n", n, m);
    write_list(text);
    cr_assert_eq(kill(srv.pid, SIGHUP), 0);
    int64_t end = conf_now_ms() + WAIT_MS;
    for (;;) { /* a login per try, on whichever shard: until it is counted as named */
        CONF_OK(conf_raw_login(&r, &srv, &km, NULL));
        relay(&r, &sink, 1);
        conf_raw_close(&r);
        conf_sleep_ms(20);
        j = keys_get();
        bool named = entry_of(j, "named", &km.pub, NULL) != NULL;
        json_decref(j);
        if (named)
            break;
        cr_assert_lt(conf_now_ms(), end, "a key added on SIGHUP is never named");
    }
    conf_raw_close(&sink);
    conf_server_stop_clean(&srv);
}

Test(test_conformance_account, sketch_bounded_with_many_keys)
{
    server_up(false);
    struct conf_raw sink, h;
    CONF_OK(conf_raw_login(&sink, &srv, NULL, NULL));
    CONF_OK(conf_raw_login(&h, &srv, NULL, NULL));
    relay(&h, &sink, 50);
    struct derp_pubkey kh = h.kp.pub;
    conf_raw_close(&h);
    json_decref(wait_for("top_bytes", &kh, "packets_received", 50));
    for (int i = 0; i < CHURN_KEYS; i++) { /* one small packet per fresh key */
        struct conf_raw r;
        CONF_OK(conf_raw_login(&r, &srv, NULL, NULL));
        CONF_OK(conf_raw_send_packet(&r, &sink.kp.pub, "x", 1));
        CONF_OK(conf_raw_ping_pong(&r, (uint64_t)i, CONF_IO_TIMEOUT_MS)); /* the packet is in */
        conf_raw_close(&r);
    }
    int64_t ev = 0, end = conf_now_ms() + WAIT_MS; /* every close fed: evictions happened */
    while (conf_varz(&srv, "hderp_account_evictions", false, &ev) == 0 &&
           ev < CHURN_KEYS + 1 - SHARDS * SKETCH_MAX && conf_now_ms() < end)
        conf_sleep_ms(20);
    cr_assert_geq(ev, CHURN_KEYS + 1 - SHARDS * SKETCH_MAX, "evictions %lld", (long long)ev);
    json_t *j = keys_get();
    json_t *tracked = json_object_get(j, "tracked");
    cr_assert_eq(json_array_size(tracked), SHARDS);
    for (size_t i = 0; i < SHARDS; i++) {
        json_int_t t = json_integer_value(json_array_get(tracked, i));
        cr_assert(t > 0 && t <= SKETCH_MAX, "shard %zu tracks %lld keys", i, (long long)t);
    }
    int ih;
    json_t *e = entry_of(j, "top_bytes", &kh, &ih);
    cr_assert_not_null(e, "the heavy key was evicted");
    cr_assert_eq(ih, 0, "the heavy key is not first");
    cr_assert_eq(field(e, "packets_received"), 50);
    cr_assert_geq(field(e, "bytes"), 50 * PAYLOAD_SIZE);
    cr_assert_leq(field(e, "bytes") - field(e, "error"), 50 * PAYLOAD_SIZE);
    json_decref(j);
    conf_raw_close(&sink);
    conf_server_stop_clean(&srv);
}

/* --account-window: once a named key has been away longer, its counters are gone (not shown)
 * and its next login starts them again. */
Test(test_conformance_account, named_counters_restart_after_the_window)
{
    struct derp_keypair kn;
    CONF_OK(derp_keypair_generate(&kn));
    char n[DERP_PUBKEY_TEXT_SIZE], text[200];
    key_text(&kn.pub, n);
    snprintf(text, sizeof(text), "%s\n", n);
    write_list(text);
    const char *extra[] = {"--account-keys", list, "--account-window", "2s", NULL};
    CONF_OK(conf_server_start(&srv, &(struct conf_server_opts){.shards = SHARDS, .extra = extra}));
    struct conf_raw sink, r;
    CONF_OK(conf_raw_login(&sink, &srv, NULL, NULL));
    CONF_OK(conf_raw_login(&r, &srv, &kn, NULL));
    relay(&r, &sink, 4);
    conf_raw_close(&r);
    json_decref(wait_for("named", &kn.pub, "packets_received", 4));
    int64_t end = conf_now_ms() + WAIT_MS;
    for (;;) { /* the window passes: the entry leaves the answer */
        json_t *j = keys_get();
        bool there = entry_of(j, "named", &kn.pub, NULL) != NULL;
        json_decref(j);
        if (!there)
            break;
        cr_assert_lt(conf_now_ms(), end, "the named key's counters never expired");
        conf_sleep_ms(50);
    }
    CONF_OK(conf_raw_login(&r, &srv, &kn, NULL));
    relay(&r, &sink, 1);
    conf_raw_close(&r);
    json_t *j = wait_for("named", &kn.pub, "packets_received", 1);
    cr_assert_eq(field(entry_of(j, "named", &kn.pub, NULL), "connects"), 1);
    json_decref(j);
    conf_raw_close(&sink);
    conf_server_stop_clean(&srv);
}

/* Placement moves one of a talking pair to the other's shard while it relays: its counts,
 * split over the two shards' tables, still add up exactly (named and in the sketch). */
Test(test_conformance_account, counts_follow_a_placed_client)
{
    enum { ROUNDS = 200 }; /* past the server's placement threshold (64 packets) */
    struct derp_keypair ka, kb;
    CONF_OK(conf_keypair_on_shard(&ka, 0, SHARDS));
    CONF_OK(conf_keypair_on_shard(&kb, 1, SHARDS));
    char text[300], t[DERP_PUBKEY_TEXT_SIZE];
    key_text(&ka.pub, t);
    snprintf(text, sizeof(text), "%s\n", t);
    key_text(&kb.pub, t);
    snprintf(text + strlen(text), sizeof(text) - strlen(text), "%s\n", t);
    write_list(text);
    server_up(true);
    struct conf_raw a, b;
    CONF_OK(conf_raw_login(&a, &srv, &ka, NULL));
    CONF_OK(conf_raw_login(&b, &srv, &kb, NULL));
    for (int i = 0; i < ROUNDS; i++) {
        relay(&a, &b, 1);
        relay(&b, &a, 1);
    }
    int64_t moves = -1;
    CONF_OK(conf_varz(&srv, "hderp_placement_moves", false, &moves));
    /* 1, or more when packing (on by default) moved the pair on to shard 0 */
    cr_assert_geq(moves, 1, "no placement happened (moves %lld)", (long long)moves);
    conf_raw_close(&a);
    conf_raw_close(&b);
    const struct derp_pubkey *keys[] = {&ka.pub, &kb.pub};
    for (int k = 0; k < 2; k++) {
        json_t *j = wait_for("named", keys[k], "connections", 0);
        json_decref(j);
        j = wait_for("named", keys[k], "packets_received", ROUNDS);
        json_t *e = entry_of(j, "named", keys[k], NULL);
        cr_assert_eq(field(e, "packets_sent"), ROUNDS);
        cr_assert_eq(field(e, "bytes_received"), ROUNDS * PAYLOAD_SIZE);
        cr_assert_eq(field(e, "bytes_sent"), ROUNDS * PAYLOAD_SIZE);
        e = entry_of(j, "top_packets", keys[k], NULL);
        cr_assert_not_null(e);
        cr_assert_eq(field(e, "packets"), 2 * ROUNDS);
        cr_assert_eq(field(e, "error"), 0);
        json_decref(j);
    }
    conf_server_stop_clean(&srv);
}

/* More keys than the named table holds (1,024): start-up refuses, naming the line. */
Test(test_conformance_account, too_many_named_keys_refuses_to_start)
{
    enum { KEYS_MAX = 1024 }; /* SRV_ACCT_KEYS_MAX */
    FILE *f = fopen(list, "w");
    cr_assert_not_null(f);
    for (unsigned i = 0; i <= KEYS_MAX; i++)
        fprintf(f, "%064x\n", i + 1);
    cr_assert_eq(fclose(f), 0);
    char log[300];
    snprintf(log, sizeof(log), "%s/start.log", dir);
    const char *argv[] = {CONF_BIN_DIR "/hderp-server",
                          "-dev",
                          "-a",
                          "127.0.0.1:0",
                          "-stun=false",
                          "--shards",
                          "1",
                          "--account-keys",
                          list,
                          NULL};
    int status = 0;
    int rc = conf_run(argv, log, CONF_START_TIMEOUT_MS, &status); /* if it started: killed */
    cr_assert(rc == 0 || rc == -ETIMEDOUT, "spawn %s: %s", argv[0], strerror(-rc));
    cr_assert_eq(rc, 0, "hderp-server kept running with 1,025 --account-keys");
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) != 0, "exit status %d", status);
    f = fopen(log, "r");
    cr_assert_not_null(f);
    char line[1024], want[400];
    snprintf(want, sizeof(want), "%s:%u: more than %u keys", list, KEYS_MAX + 1, KEYS_MAX);
    bool seen = false;
    while (!seen && fgets(line, sizeof(line), f))
        seen = strstr(line, want) != NULL;
    fclose(f);
    cr_assert(seen, "no \"%s\" in the start-up error", want);
}
