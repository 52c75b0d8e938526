/* echo_ping.c - the pinger: paced timestamped packets to an echo peer, matched by sequence
 * number, sent from an ECHO_TICK_MS (1 ms) timer that catches up in bursts of at most
 * ECHO_BURST_MAX; round trips go into a log-linear histogram (hd_hist) after the warm-up. It
 * first sends one disco-looking probe, so that a relay without the peer answers NotHere instead
 * of leaving the run to time out. Runs on the shard; the report is printed by the main thread
 * after the runtime stopped. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "echo.h"

static void finish(struct echo_ping_state *p)
{
    if (p->done)
        return;
    p->done = true;
    p->end_ns = hd_clock_ns();
    hd_timer_stop(p->s, &p->tick);
    if (p->client)
        derp_client_close(p->client);
}

static void send_due(struct echo_ping_state *p)
{
    const struct echo_opts *o = p->o;
    uint64_t now = hd_clock_ns();
    uint64_t due = (now - p->start_ns) / p->interval_ns + 1;
    if (due > o->count)
        due = o->count;
    uint8_t buf[ECHO_SIZE_MAX];
    memset(buf, 0, o->size);
    for (unsigned burst = 0; p->sent < due && burst < ECHO_BURST_MAX; burst++) {
        echo_probe_fill(buf, p->sent, hd_clock_ns());
        if (derp_client_send(p->client, &o->peer, buf, o->size) < 0) {
            p->send_failed++; /* counted as lost: the queue to the relay is full */
        }
        p->sent++;
    }
}

static void tick_fired(struct hd_timer *t)
{
    struct echo_ping_state *p = hd_container_of(t, struct echo_ping_state, tick);
    if (p->peer_gone) {
        finish(p);
        return;
    }
    if (!p->sending_done) {
        send_due(p);
        if (p->sent == p->o->count) {
            p->sending_done = true;
            hd_timer_start(p->s, t, p->o->timeout_ms); /* the last echoes' deadline */
            return;
        }
        hd_timer_start(p->s, t, ECHO_TICK_MS);
        return;
    }
    finish(p);
}

void echo_ping_init(struct echo_ping_state *p, const struct echo_opts *o, struct hd_shard *s)
{
    memset(p, 0, sizeof(*p));
    p->o = o;
    p->s = s;
    p->interval_ns =
        o->rate_pps > 0 ? (uint64_t)(1e9 / o->rate_pps) : (uint64_t)o->interval_ms * 1000000u;
    if (p->interval_ns == 0)
        p->interval_ns = 1;
    echo_probe_rx_init(&p->rx, o->count); /* out of memory: every echo counts as misrouted */
    hd_timer_init(&p->tick, tick_fired);
}

/* A disco-looking packet (spec §6.2: >= 62 bytes starting with "TS" + U+1F4AC): a relay that
 * does not know the peer answers it with PeerGone(NotHere), so an unknown peer is reported at
 * once instead of as 100% loss. Its echo is recognised and ignored. */
static const uint8_t probe_magic[6] = {'T', 'S', 0xf0, 0x9f, 0x92, 0xac};

static void send_probe(struct echo_ping_state *p)
{
    uint8_t probe[62] = {0};
    memcpy(probe, probe_magic, sizeof(probe_magic));
    memcpy(probe + sizeof(probe_magic), "hderp-echo probe", 16);
    derp_client_send(p->client, &p->o->peer, probe, sizeof(probe));
}

void echo_ping_ready(struct derp_client *k, const struct derp_server_info *info)
{
    (void)info;
    struct echo_ping_state *p = derp_client_user(k);
    p->ready = true;
    send_probe(p);
    p->start_ns = hd_clock_ns();
    hd_timer_start(p->s, &p->tick, 0);
}

void echo_ping_packet(struct derp_client *k, const struct derp_pubkey *src, const uint8_t *data,
                      size_t len)
{
    struct echo_ping_state *p = derp_client_user(k);
    uint64_t now = hd_clock_ns();
    if (len >= sizeof(probe_magic) && memcmp(data, probe_magic, sizeof(probe_magic)) == 0)
        return; /* the probe's echo */
    if (!derp_pubkey_equal(src, &p->o->peer)) {
        p->rx.misrouted++;
        return;
    }
    echo_probe_rx_note(&p->rx, data, len, p->sent, now, p->o->warmup, UINT64_MAX);
    if (p->sending_done && p->rx.received == p->sent)
        finish(p); /* everything is back: no need to wait for the deadline */
}

void echo_ping_peer_gone(struct derp_client *k, const struct derp_pubkey *peer, uint8_t reason)
{
    struct echo_ping_state *p = derp_client_user(k);
    if (!derp_pubkey_equal(peer, &p->o->peer))
        return;
    p->peer_gone = true;
    hd_log(HD_LOG_ERROR, "ping: the relay says the peer is %s (PeerGone %s)",
           reason == DERP_PEER_GONE_NOT_HERE ? "not connected to it" : "gone",
           reason == DERP_PEER_GONE_NOT_HERE ? "NotHere" : "Disconnected");
    finish(p);
}

void echo_ping_stop(struct echo_ping_state *p)
{
    if (p->o && !p->done)
        finish(p);
    p->client = NULL;
}

int echo_ping_report(struct echo_ping_state *p, const struct echo_opts *o)
{
    const struct echo_probe_rx *rx = &p->rx;
    uint64_t measured = p->sent > o->warmup ? p->sent - o->warmup : 0;
    uint64_t lost = measured - rx->received_measured;
    double mean = echo_probe_mean_ns(rx);
    if (o->json) {
        printf("{\"server\":\"%s\",\"count\":%u,\"warmup\":%u,\"size\":%u,\"sent\":%llu,"
               "\"received\":%llu,\"measured\":%llu,\"lost\":%llu,\"reordered\":%llu,"
               "\"duplicated\":%llu,\"misrouted\":%llu,\"mean_us\":%.3f",
               o->server, o->count, o->warmup, o->size, (unsigned long long)p->sent,
               (unsigned long long)rx->received, (unsigned long long)measured,
               (unsigned long long)lost, (unsigned long long)rx->reordered,
               (unsigned long long)rx->duplicated, (unsigned long long)rx->misrouted, mean / 1e3);
        echo_probe_json_quantiles(stdout, rx);
        printf(",\"peer_gone\":%s}\n", p->peer_gone ? "true" : "false");
    } else {
        printf("hderp-echo ping %s: %llu sent, %llu measured after %u warm-up, %llu lost, "
               "%llu reordered, %llu duplicated\n",
               o->server, (unsigned long long)p->sent, (unsigned long long)measured, o->warmup,
               (unsigned long long)lost, (unsigned long long)rx->reordered,
               (unsigned long long)rx->duplicated);
        printf("  rtt us:");
        echo_probe_text_quantiles(stdout, rx);
        printf("  mean %.1f\n", mean / 1e3);
    }
    bool none = rx->received_measured == 0;
    echo_probe_rx_deinit(&p->rx);
    if (p->peer_gone || none) {
        fprintf(stderr, "hderp-echo: %s\n",
                p->peer_gone ? "the peer is not on this relay" : "no echo came back");
        return -1;
    }
    return 0;
}
