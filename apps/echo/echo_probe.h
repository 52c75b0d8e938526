/* echo_probe.h - the ping/echo probe shared by hderp-echo ping and hderp-bench --latency: the
 * payload ("HDPG" magic, sequence number, CLOCK_MONOTONIC send time, zero padding), the
 * receiving side's accounting of echoes (seen bitmap: duplicates, reordering, misrouting; round
 * trips of the measured ones in a histogram) and the percentiles both programs report. Pure
 * code on whichever shard owns the pinger; no I/O except the report printers. */
#ifndef ECHO_PROBE_H
#define ECHO_PROBE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <hd/hd.h>

#define ECHO_MAGIC      "HDPG"
#define ECHO_HEADER_LEN 20

/* Echoes of one pinger. seen has one bit per sequence number below count_max. */
struct echo_probe_rx {
    uint64_t count_max;
    uint8_t *seen;
    uint64_t received, received_measured, reordered, duplicated, misrouted, highest_seq;
    struct hd_hist rtt_ns;
};

/* The percentiles both programs report, and their JSON names (p50, p90, p95, p99, p999, max). */
#define ECHO_PROBE_QUANTILES 6
extern const double echo_probe_quantiles[ECHO_PROBE_QUANTILES];
extern const char *const echo_probe_quantile_names[ECHO_PROBE_QUANTILES];

/* Writes the header of probe seq sent at now_ns into buf (size >= ECHO_HEADER_LEN); the rest of
 * buf is the caller's (zero padding). */
void echo_probe_fill(uint8_t *buf, uint64_t seq, uint64_t now_ns);
/* Allocates the bitmap for count_max probes. Returns 0 or -ENOMEM. */
int echo_probe_rx_init(struct echo_probe_rx *rx, uint64_t count_max);
void echo_probe_rx_deinit(struct echo_probe_rx *rx);
/* One echo arriving at now_ns, sent probes so far: sent; its round trip is recorded when
 * measure_from <= seq < measure_to. Not a probe, or a sequence number not sent yet: misrouted.
 * Returns true when it was a new (not duplicated) measured echo. */
bool echo_probe_rx_note(struct echo_probe_rx *rx, const uint8_t *data, size_t len, uint64_t sent,
                        uint64_t now_ns, uint64_t measure_from, uint64_t measure_to);
/* Mean round trip in ns (0 when nothing was measured). */
double echo_probe_mean_ns(const struct echo_probe_rx *rx);
/* ",\"p50_us\":X,...,\"max_us\":X" for the quantiles above. */
void echo_probe_json_quantiles(FILE *out, const struct echo_probe_rx *rx);
/* " p50 X p90 X ... max X" in microseconds. */
void echo_probe_text_quantiles(FILE *out, const struct echo_probe_rx *rx);

#endif
