/* echo_probe.c - the ping/echo probe payload and the accounting of echoes, shared by
 * hderp-echo ping (echo_ping.c) and hderp-bench --latency (perf/). Runs on the pinger's shard;
 * the printers run on the main thread after the runtime stopped. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "echo_probe.h"

const double echo_probe_quantiles[ECHO_PROBE_QUANTILES] = {0.5, 0.9, 0.95, 0.99, 0.999, 1.0};
const char *const echo_probe_quantile_names[ECHO_PROBE_QUANTILES] = {"p50", "p90",  "p95",
                                                                     "p99", "p999", "max"};

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
}

static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

void echo_probe_fill(uint8_t *buf, uint64_t seq, uint64_t now_ns)
{
    memcpy(buf, ECHO_MAGIC, 4);
    put_u64(buf + 4, seq);
    put_u64(buf + 12, now_ns);
}

int echo_probe_rx_init(struct echo_probe_rx *rx, uint64_t count_max)
{
    memset(rx, 0, sizeof(*rx));
    hd_hist_init(&rx->rtt_ns);
    rx->count_max = count_max;
    rx->seen = calloc((count_max + 7) / 8, 1);
    return rx->seen ? 0 : -ENOMEM;
}

void echo_probe_rx_deinit(struct echo_probe_rx *rx)
{
    free(rx->seen);
    rx->seen = NULL;
}

bool echo_probe_rx_note(struct echo_probe_rx *rx, const uint8_t *data, size_t len, uint64_t sent,
                        uint64_t now_ns, uint64_t measure_from, uint64_t measure_to)
{
    if (len < ECHO_HEADER_LEN || memcmp(data, ECHO_MAGIC, 4) != 0) {
        rx->misrouted++;
        return false;
    }
    uint64_t seq = get_u64(data + 4), t = get_u64(data + 12);
    if (seq >= sent || seq >= rx->count_max || rx->seen == NULL) {
        rx->misrouted++;
        return false;
    }
    if (rx->seen[seq / 8] & (1u << (seq % 8))) {
        rx->duplicated++;
        return false;
    }
    rx->seen[seq / 8] |= (uint8_t)(1u << (seq % 8));
    rx->received++;
    if (seq < rx->highest_seq)
        rx->reordered++;
    else
        rx->highest_seq = seq;
    if (seq < measure_from || seq >= measure_to)
        return false;
    rx->received_measured++;
    hd_hist_record(&rx->rtt_ns, now_ns - t);
    return true;
}

double echo_probe_mean_ns(const struct echo_probe_rx *rx)
{
    return rx->rtt_ns.count ? (double)rx->rtt_ns.sum / (double)rx->rtt_ns.count : 0;
}

void echo_probe_json_quantiles(FILE *out, const struct echo_probe_rx *rx)
{
    for (unsigned i = 0; i < ECHO_PROBE_QUANTILES; i++)
        fprintf(out, ",\"%s_us\":%.3f", echo_probe_quantile_names[i],
                (double)hd_hist_quantile(&rx->rtt_ns, echo_probe_quantiles[i]) / 1e3);
}

void echo_probe_text_quantiles(FILE *out, const struct echo_probe_rx *rx)
{
    for (unsigned i = 0; i < ECHO_PROBE_QUANTILES; i++)
        fprintf(out, " %s %.1f", echo_probe_quantile_names[i],
                (double)hd_hist_quantile(&rx->rtt_ns, echo_probe_quantiles[i]) / 1e3);
}
