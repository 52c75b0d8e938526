/* conf_check.c - what the conformance tests read back from a running server to check it (see
 * conf_support.h): a varz series that must exist, one that may not exist yet, a bounded wait for
 * a value, lines of its log, and a login whose key lives on a given shard. Criterion
 * assertions; test thread only. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "conf_support.h"

/* Longest log line compared whole (longer ones are read in pieces, each searched). */
#define CONF_LOG_LINE_MAX 2048
/* Polling step of conf_log_wait. */
#define CONF_LOG_POLL_MS 20

int64_t conf_varz_must(const struct conf_server *srv, const char *name)
{
    int64_t v = -1;
    int rc = conf_varz(srv, name, false, &v);
    cr_assert_eq(rc, 0, "varz %s on port %u: %s", name, srv->port, strerror(-rc));
    return v;
}

int64_t conf_varz_or0(const struct conf_server *srv, const char *name)
{
    int64_t v = 0;
    int rc = conf_varz(srv, name, false, &v);
    cr_assert(rc == 0 || rc == -ENOENT, "varz %s: %s", name, strerror(-rc));
    return rc == 0 ? v : 0;
}

void conf_varz_expect(const struct conf_server *srv, const char *what, const char *name,
                      int64_t want, int timeout_ms)
{
    int64_t last = -1;
    int rc = conf_varz_wait(srv, name, want, timeout_ms, &last);
    cr_assert_eq(rc, 0, "%s: %s stays at %lld, want %lld (rc %d)", what, name, (long long)last,
                 (long long)want, rc);
}

unsigned conf_log_count(const struct conf_server *srv, const char *text)
{
    char path[300], line[CONF_LOG_LINE_MAX];
    snprintf(path, sizeof(path), "%s/server.log", srv->dir);
    FILE *f = fopen(path, "r");
    unsigned n = 0;
    while (f && fgets(line, sizeof(line), f))
        n += strstr(line, text) != NULL;
    if (f)
        fclose(f);
    return n;
}

bool conf_log_has(const struct conf_server *srv, const char *text)
{
    return conf_log_count(srv, text) > 0;
}

bool conf_log_wait(const struct conf_server *srv, const char *text, int timeout_ms)
{
    for (int64_t end = conf_now_ms() + timeout_ms;; conf_sleep_ms(CONF_LOG_POLL_MS)) {
        if (conf_log_has(srv, text))
            return true;
        if (conf_now_ms() >= end)
            return false;
    }
}

void conf_login_on_shard(struct conf_raw *r, const struct conf_server *srv, struct derp_keypair *kp,
                         unsigned shard, unsigned shards)
{
    struct derp_keypair scratch;
    if (kp == NULL)
        kp = &scratch;
    CONF_OK(conf_keypair_on_shard(kp, shard, shards));
    CONF_OK(conf_raw_login(r, srv, kp, NULL));
}
