/* server_check_derp.c - the DERP half of `hderp-server check URL`: on one shard of a runtime of
 * its own, client A logs in with the HTTP upgrade (101, Derp-Public-Key equal to the ServerKey
 * frame's key) and client B with fast start; then each sends CHK_PACKETS packets to the other
 * (every one must arrive, from the right key, intact) and A pings the server (the Pong must echo
 * the data). Everything is bounded by the check's deadline; the results go back to the main
 * thread (server_check.c), which prints them. */
#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>

#include <hd/kit.h>

#include "derp_client.h"
#include "ops/server_check.h"

/* Packets each client sends the other: enough to see loss or reordering, few enough to be quick. */
#define CHK_PACKETS 20u
#define CHK_PAYLOAD 64u

struct chk_derp {
    struct chk_derp_result *res;
    const struct chk_derp_opts *opts;
    struct derp_client *a, *b;
    bool a_ready, b_ready;
    unsigned a_got, b_got; /* packets each received intact, in order */
    uint8_t ping[DERP_PING_LEN];
    bool pinged, done;
    struct hd_timer deadline;
    struct hd_shard *s;
};

static struct chk_derp run;

static void finish(struct chk_derp *r)
{
    if (r->done)
        return;
    r->done = true;
    hd_timer_stop(r->s, &r->deadline);
    r->res->packets_ab = r->b_got;
    r->res->packets_ba = r->a_got;
    if (r->a)
        derp_client_abort(r->a, 0);
    if (r->b)
        derp_client_abort(r->b, 0);
    hd_runtime_stop(hd_shard_runtime(r->s));
}

static bool all_done(const struct chk_derp *r)
{
    return r->a_got == CHK_PACKETS && r->b_got == CHK_PACKETS && r->res->pong_ok;
}

static void payload(uint8_t *buf, char from, unsigned i)
{
    memset(buf, 0, CHK_PAYLOAD);
    snprintf((char *)buf, CHK_PAYLOAD, "hderp-check %c %u", from, i);
}

static void start_exchange(struct chk_derp *r)
{
    uint8_t buf[CHK_PAYLOAD];
    for (unsigned i = 0; i < CHK_PACKETS; i++) {
        payload(buf, 'A', i);
        int rc = derp_client_send(r->a, derp_client_public_key(r->b), buf, sizeof(buf));
        payload(buf, 'B', i);
        if (rc == 0)
            rc = derp_client_send(r->b, derp_client_public_key(r->a), buf, sizeof(buf));
        if (rc < 0) {
            snprintf(r->res->error, sizeof(r->res->error), "send: %s", strerror(-rc));
            finish(r);
            return;
        }
    }
    randombytes_buf(r->ping, sizeof(r->ping));
    r->pinged = derp_client_ping(r->a, r->ping) == 0;
}

static void on_http_response(struct derp_client *k, const struct net_http_resp *resp)
{
    (void)k;
    run.res->upgrade_status = resp->status;
}

static void on_ready(struct derp_client *k, const struct derp_server_info *info)
{
    (void)info;
    struct chk_derp *r = &run;
    if (k == r->a) {
        r->a_ready = true;
        struct derp_pubkey up;
        const struct derp_pubkey *sk = derp_client_server_key(k);
        r->res->upgrade_ok = r->res->upgrade_status == 101;
        r->res->upgrade_key_ok =
            derp_client_upgrade_key(k, &up) && sk && memcmp(up.bytes, sk->bytes, DERP_KEY_LEN) == 0;
        if (sk)
            derp_pubkey_format(sk, r->res->server_key);
    } else {
        r->b_ready = true;
        r->res->fast_start_ok = true;
    }
    if (r->a_ready && r->b_ready)
        start_exchange(r);
}

static void on_packet(struct derp_client *k, const struct derp_pubkey *src, const uint8_t *data,
                      size_t len)
{
    struct chk_derp *r = &run;
    bool to_a = k == r->a;
    struct derp_client *other = to_a ? r->b : r->a;
    unsigned *got = to_a ? &r->a_got : &r->b_got;
    uint8_t want[CHK_PAYLOAD];
    payload(want, to_a ? 'B' : 'A', *got);
    if (memcmp(src->bytes, derp_client_public_key(other)->bytes, DERP_KEY_LEN) != 0 ||
        len != CHK_PAYLOAD || memcmp(data, want, len) != 0) {
        snprintf(r->res->error, sizeof(r->res->error),
                 "packet %u to %c: wrong source, size or contents (lost or reordered)", *got,
                 to_a ? 'A' : 'B');
        finish(r);
        return;
    }
    (*got)++;
    if (all_done(r))
        finish(r);
}

static void on_pong(struct derp_client *k, const uint8_t data[DERP_PING_LEN])
{
    struct chk_derp *r = &run;
    if (k == r->a && r->pinged && memcmp(data, r->ping, DERP_PING_LEN) == 0)
        r->res->pong_ok = true;
    if (all_done(r))
        finish(r);
}

static void on_close(struct derp_client *k, int reason)
{
    struct chk_derp *r = &run;
    bool is_a = k == r->a;
    if (is_a)
        r->a = NULL;
    else
        r->b = NULL;
    if (r->done)
        return;
    snprintf(r->res->error, sizeof(r->res->error), "client %c (%s) closed: %s", is_a ? 'A' : 'B',
             is_a ? "upgrade" : "fast start", reason ? strerror(-reason) : "by us");
    finish(r);
}

static const struct derp_client_callbacks callbacks = {
    .on_http_response = on_http_response,
    .on_ready = on_ready,
    .on_packet = on_packet,
    .on_pong = on_pong,
    .on_close = on_close,
};

static void deadline_fired(struct hd_timer *t)
{
    (void)t;
    if (run.res->error[0] == '\0')
        snprintf(run.res->error, sizeof(run.res->error),
                 "timed out (A %s, B %s, %u/%u and %u/%u packets, pong %s)",
                 run.a_ready ? "logged in" : "not logged in",
                 run.b_ready ? "logged in" : "not logged in", run.b_got, CHK_PACKETS, run.a_got,
                 CHK_PACKETS, run.res->pong_ok ? "seen" : "missing");
    finish(&run);
}

static int connect_one(struct chk_derp *r, bool fast, struct derp_client **out)
{
    struct derp_client_config cfg = {.can_ack_pings = true,
                                     .fast_start = fast,
                                     .app_name = "hderp-check",
                                     .login_timeout_ms = r->opts->timeout_ms,
                                     .read_timeout_ms = DERP_CLIENT_TIMEOUT_OFF};
    derp_client_config_set_url(&cfg, r->opts->url);
    cfg.websocket = false; /* the DERP upgrade itself is what is checked */
    cfg.tls_ctx = r->opts->tls;
    return derp_client_connect(r->s, &cfg, &callbacks, r, out);
}

static int shard_init(struct hd_shard *s, void *arg, void **state)
{
    (void)arg;
    *state = NULL;
    int rc;
    run.s = s;
    hd_timer_init(&run.deadline, deadline_fired);
    hd_timer_start(s, &run.deadline, run.opts->timeout_ms);
    if ((rc = connect_one(&run, false, &run.a)) == 0)
        rc = connect_one(&run, true, &run.b);
    if (rc < 0) {
        snprintf(run.res->error, sizeof(run.res->error), "connect: %s", strerror(-rc));
        finish(&run);
    }
    return 0;
}

static void shard_stop(struct hd_shard *s, void *state)
{
    (void)state;
    hd_timer_stop(s, &run.deadline);
    net_shard_close_all(s, 0);
}

static int check_parse(struct kit_app *a, int argc, char **argv)
{
    (void)a, (void)argc, (void)argv;
    return 0; /* `check` parsed its command line already */
}

static const struct hd_module *const check_requires[] = {&net_module, NULL};
static const struct hd_module check_module = {
    .abi_version = HD_MODULE_ABI,
    .name = "check",
    .requires = check_requires,
    .shard_init = shard_init,
    .shard_stop = shard_stop,
};

static int check_finish(struct kit_app *a, int rc)
{
    *(int *)a->arg = rc;
    return rc < 0 ? 1 : 0;
}

int chk_derp_run(const struct chk_derp_opts *opts, struct chk_derp_result *res)
{
    memset(res, 0, sizeof(*res));
    run = (struct chk_derp){.res = res, .opts = opts};
    int rc = 0;
    /* A step of `check` (its command line is parsed, its logging level set, the errors are its
     * report's): one shard, no signals; tls_module (net before it) for an https server. */
    struct kit_app app = {.name = "hderp-server check",
                          .parse = check_parse,
                          .rt = {.shards_count = 1,
                                 .pin = false,
                                 .frame_classes = derp_client_frame_classes,
                                 .frame_classes_count = DERP_CLIENT_FRAME_CLASSES_COUNT},
                          .no_signals = true,
                          .keep_logging = true,
                          .quiet = true,
                          .module = &check_module,
                          .layer = opts->tls ? &tls_module : NULL,
                          .finish = check_finish,
                          .arg = &rc};
    (void)kit_app_main(&app, 0, NULL); /* its exit code is check_finish's, from rc */
    res->packets_total = CHK_PACKETS;
    return rc;
}
