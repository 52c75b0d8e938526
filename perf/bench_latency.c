/* bench_latency.c - hderp-bench --latency: latency under load. Beside the bulk pairs, one
 * ping/echo pair of DERP clients on generator shard 0: the echo client sends every packet back
 * to its sender, the pinger sends BENCH_LATENCY_PPS probes a second of BENCH_LATENCY_SIZE bytes
 * (apps/echo's probe format and accounting, echo_probe.h) from the warm-up to the end of the
 * window; the round trips of the probes sent inside the window are the run's latency under
 * load. With several --server URLs the echo logs in to the second, like a pair's receiver.
 * Threads: init/deinit on the main thread before/after the runtime; the rest on shard 0. */
#include <errno.h>
#include <string.h>

#include "bench_relay_impl.h"

/* Failures name the client after the pairs and idle peers: pinger, then echo. */
static unsigned who(const struct bench_run *r, bool echo)
{
    return r->cfg.pairs_count + r->idle_count + echo;
}

int bench_latency_init(struct bench_run *r)
{
    struct bench_latency *l = &r->lat;
    memset(l, 0, sizeof(*l));
    if (derp_keypair_generate(&l->ping_kp) < 0 || derp_keypair_generate(&l->echo_kp) < 0)
        return -EIO;
    l->interval_ns = 1000000000ull / BENCH_LATENCY_PPS;
    uint64_t count = (uint64_t)((r->cfg.warmup_s + r->cfg.duration_s) * BENCH_LATENCY_PPS);
    return echo_probe_rx_init(&l->rx, count + BENCH_LATENCY_SLACK);
}

void bench_latency_deinit(struct bench_run *r)
{
    echo_probe_rx_deinit(&r->lat.rx);
}

static void ready(struct derp_client *k, const struct derp_server_info *info)
{
    (void)info;
    struct bench_run *r = derp_client_user(k);
    atomic_fetch_add(&r->ready_count, 1);
}

static void closed(struct derp_client *k, int reason)
{
    struct bench_run *r = derp_client_user(k);
    bool echo = k == r->lat.echo;
    *(echo ? &r->lat.echo : &r->lat.ping) = NULL;
    if (!r->lat.stopping)
        bench_fail(r, hd_shard_current(), who(r, echo), reason);
}

static void echo_packet(struct derp_client *k, const struct derp_pubkey *src, const uint8_t *data,
                        size_t len)
{
    struct bench_run *r = derp_client_user(k);
    if (derp_client_send(k, src, data, len) < 0)
        r->lat.echo_dropped++; /* its queue is full: the pinger counts the probe as lost */
}

static void ping_packet(struct derp_client *k, const struct derp_pubkey *src, const uint8_t *data,
                        size_t len)
{
    struct bench_run *r = derp_client_user(k);
    struct bench_latency *l = &r->lat;
    if (!derp_pubkey_equal(src, &l->echo_kp.pub)) {
        l->rx.misrouted++;
        return;
    }
    uint64_t to = l->window_closed ? l->end_seq : UINT64_MAX;
    echo_probe_rx_note(&l->rx, data, len, l->sent, hd_clock_ns(),
                       l->window_open ? l->first_seq : UINT64_MAX, to);
}

static const struct derp_client_callbacks echo_cb = {
    .on_ready = ready, .on_packet = echo_packet, .on_close = closed};
static const struct derp_client_callbacks ping_cb = {
    .on_ready = ready, .on_packet = ping_packet, .on_close = closed};

int bench_latency_connect(struct bench_run *r, struct hd_shard *s)
{
    struct bench_latency *l = &r->lat;
    unsigned n = r->cfg.servers_count;
    int rc = bench_connect(r, s, n > 1 ? 1 : 0, &l->echo_kp, &echo_cb, r, &l->echo);
    if (rc < 0) {
        bench_fail(r, s, who(r, true), rc);
        return rc;
    }
    rc = bench_connect(r, s, 0, &l->ping_kp, &ping_cb, r, &l->ping);
    if (rc < 0)
        bench_fail(r, s, who(r, false), rc);
    return rc;
}

void bench_latency_pump(struct bench_run *r, uint64_t now)
{
    struct bench_latency *l = &r->lat;
    if (l->ping == NULL || derp_client_state(l->ping) != DERP_CLIENT_READY)
        return;
    if (l->next_ns == 0)
        l->next_ns = now;
    uint8_t buf[BENCH_LATENCY_SIZE] = {0};
    for (unsigned i = 0; i < BENCH_LATENCY_BURST && l->next_ns <= now; i++) {
        if (l->sent == l->rx.count_max)
            return;
        echo_probe_fill(buf, l->sent, hd_clock_ns());
        if (derp_client_send(l->ping, &l->echo_kp.pub, buf, sizeof(buf)) < 0)
            l->send_failed += l->window_open; /* counted as lost: the queue is full */
        l->sent++;
        l->next_ns += l->interval_ns;
    }
    if (l->next_ns <= now) /* more than a burst behind: skip ahead rather than flood */
        l->next_ns = now + l->interval_ns;
}

void bench_latency_window(struct bench_run *r, bool start)
{
    struct bench_latency *l = &r->lat;
    if (start) {
        l->first_seq = l->sent;
        l->window_open = true;
    } else {
        l->end_seq = l->sent;
        l->window_closed = true;
    }
}

bool bench_latency_drained(const struct bench_run *r)
{
    const struct bench_latency *l = &r->lat;
    return !r->cfg.latency || l->rx.received_measured >= l->end_seq - l->first_seq;
}

void bench_latency_stop(struct bench_run *r)
{
    struct bench_latency *l = &r->lat;
    l->stopping = true;
    if (l->ping)
        derp_client_abort(l->ping, -ECANCELED);
    if (l->echo)
        derp_client_abort(l->echo, -ECANCELED);
}
